/*
 * quant.h — internals of the CPU's block-quantized weights (q8_0, q4_0, the k-quants, q4_1, q5_0, q5_1): the block
 * layouts GGML defines, the quantized activation rows the integer dot products read, and the per-instruction-set
 * tile kernels that quant_matmul.c dispatches to.
 */
#ifndef MNEMO_QUANT_H
#define MNEMO_QUANT_H

#include <stddef.h>
#include <math.h>
#include <stdint.h>

#include "kernels.h"

typedef struct {
    uint16_t d;                  /* f16 scale */
    int8_t qs[KERN_QBLOCK];
} kq_block_q8_0;                 /* 34 bytes, GGML's block_q8_0 */

typedef struct {
    uint16_t d;                  /* f16 scale */
    uint8_t qs[KERN_QBLOCK / 2]; /* element j in the low nibble of qs[j], element j + 16 in the high one */
} kq_block_q4_0;                 /* 18 bytes, GGML's block_q4_0 */

typedef struct {
    uint16_t d, dmin;            /* f16 super-block scales of the sub-blocks' scales and mins */
    uint8_t scales[12];          /* 6-bit scale and min of each of the 8 sub-blocks of 32 (kq_q4k_scales) */
    uint8_t qs[KERN_QK_K / 2];   /* sub-block 2p in the low nibbles of qs[32p .. 32p+31], 2p+1 in the high ones */
} kq_block_q4_K;                 /* 144 bytes, GGML's block_q4_K */

typedef struct {
    uint8_t ql[KERN_QK_K / 2];   /* low 4 bits; see kq_kblock_ints for which element is where */
    uint8_t qh[KERN_QK_K / 4];   /* high 2 bits, four elements per byte */
    int8_t scales[KERN_QK_K / 16]; /* one per 16 elements, in element order */
    uint16_t d;                  /* f16 */
} kq_block_q6_K;                 /* 210 bytes, GGML's block_q6_K */

typedef struct {
    uint16_t d, m;               /* f16 scale and offset: w = d * q + m */
    uint8_t qs[KERN_QBLOCK / 2]; /* q4_0's nibble order */
} kq_block_q4_1;                 /* 20 bytes, GGML's block_q4_1 */

typedef struct {
    uint16_t d;                  /* f16 scale: w = d * (q - 16) */
    uint8_t qh[4];               /* bit j (little-endian uint32) = bit 4 of element j */
    uint8_t qs[KERN_QBLOCK / 2]; /* low 4 bits, q4_0's nibble order */
} kq_block_q5_0;                 /* 22 bytes, GGML's block_q5_0 */

typedef struct {
    uint16_t d, m;               /* w = d * q + m */
    uint8_t qh[4];
    uint8_t qs[KERN_QBLOCK / 2];
} kq_block_q5_1;                 /* 24 bytes, GGML's block_q5_1 */

typedef struct {
    uint8_t scales[KERN_QK_K / 16]; /* per 16 elements in element order: scale in the low nibble, min in the high */
    uint8_t qs[KERN_QK_K / 4];      /* 32-block j: bits 2 (j % 4) of qs[32 (j / 4) + e] */
    uint16_t d, dmin;
} kq_block_q2_K;                    /* 84 bytes, GGML's block_q2_K */

typedef struct {
    uint8_t hmask[KERN_QK_K / 8]; /* 32-block j: bit j of hmask[e] set means q >= 0 (else 4 is taken off) */
    uint8_t qs[KERN_QK_K / 4];    /* low 2 bits, as q2_K's */
    uint8_t scales[12];           /* 16 6-bit scales, stored + 32 (kq_q3k_scale) */
    uint16_t d;
} kq_block_q3_K;                  /* 110 bytes, GGML's block_q3_K */

typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];           /* q4_K's packing */
    uint8_t qh[KERN_QK_K / 8];    /* 32-block j: bit j of qh[e] = bit 4 */
    uint8_t qs[KERN_QK_K / 2];    /* low 4 bits, q4_K's nibble order */
} kq_block_q5_K;                  /* 176 bytes, GGML's block_q5_K */

_Static_assert(sizeof(kq_block_q4_1) == 20, "q4_1 block must be packed as in GGML");
_Static_assert(sizeof(kq_block_q5_0) == 22, "q5_0 block must be packed as in GGML");
_Static_assert(sizeof(kq_block_q5_1) == 24, "q5_1 block must be packed as in GGML");
_Static_assert(sizeof(kq_block_q2_K) == 84, "q2_K block must be packed as in GGML");
_Static_assert(sizeof(kq_block_q3_K) == 110, "q3_K block must be packed as in GGML");
_Static_assert(sizeof(kq_block_q5_K) == 176, "q5_K block must be packed as in GGML");
_Static_assert(sizeof(kq_block_q4_K) == 144, "q4_K block must be packed as in GGML");
_Static_assert(sizeof(kq_block_q6_K) == 210, "q6_K block must be packed as in GGML");
_Static_assert(sizeof(kq_block_q8_0) == 34, "q8_0 block must be packed as in GGML");
_Static_assert(sizeof(kq_block_q4_0) == 18, "q4_0 block must be packed as in GGML");

/* q4_K's 12 bytes of packed 6-bit values -> the 8 scales (sc) and 8 mins (mn) of its sub-blocks: sub-blocks 0-3 in
 * the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); 4-7 in the nibbles of bytes 8-11 plus the top 2 bits of
 * bytes 0-7. Four 32-bit words at a time, as ggml's kernels unpack them. */
static inline void kq_q4k_scales(const uint8_t *packed, uint8_t sc[8], uint8_t mn[8]) {
    uint32_t u[3], o[4];
    for (int i = 0; i < 3; i++)
        u[i] = (uint32_t)packed[4 * i] | (uint32_t)packed[4 * i + 1] << 8 | (uint32_t)packed[4 * i + 2] << 16 |
               (uint32_t)packed[4 * i + 3] << 24;
    o[0] = u[0] & 0x3f3f3f3fu;                                               /* scales 0-3 */
    o[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);        /* scales 4-7 */
    o[2] = u[1] & 0x3f3f3f3fu;                                               /* mins 0-3 */
    o[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4); /* mins 4-7 */
    for (int i = 0; i < 4; i++) {
        sc[i] = (uint8_t)(o[0] >> (8 * i)), sc[4 + i] = (uint8_t)(o[1] >> (8 * i));
        mn[i] = (uint8_t)(o[2] >> (8 * i)), mn[4 + i] = (uint8_t)(o[3] >> (8 * i));
    }
}

/* The 32 integers of 32-block b (counted from the row's start) of a q4_K / q6_K row and its scales, so that weight
 * e of the block is sc[e / 16] * q[e] - mn (q4_K: q in [0, 15], the two sc equal; q6_K: q in [-32, 31], mn = 0).
 * sc and mn are the fp32 products ggml's dequantize_row_* forms (d * scale, dmin * min), so sc * q - mn is
 * bit for bit its dequantized weight. The readable reference of the k-quant layouts (quant_kblocks.c). */
void kq_kblock_ints(const void *row, kern_dtype dt, int64_t b, int8_t q[32], float sc[2], float *mn);
/* kern_quantize_row / kern_dequantize_row for q4_K / q6_K, n a multiple of 256 (quant_kblocks.c). */
void kq_quantize_k(void *dst, const float *src, kern_dtype dt, int64_t n);
void kq_dequantize_k(float *dst, const void *src, kern_dtype dt, int64_t n);

/* ---- q4_1, q5_0, q5_1, q2_K, q3_K, q5_K ("x" types: the ones that came with real GGUF files; quant_xblocks.c).
 * Every 32-block of them reads as 32 integers q with a scale and a min per 16 elements: weight e is
 * sc[e / 16] * q[e] - mn[e / 16], the fp32 arithmetic of ggml's dequantize_row_* (all these products are exact in
 * fp32, so the order of rounding cannot differ). */
static inline int kq_is_x(kern_dtype dt) { return dt >= KERN_Q4_1 && dt <= KERN_Q5_K; }
/* What q + off is never negative by: q5_0 16, q3_K 4, else 0 (the vector kernels multiply unsigned bytes). */
static inline int kq_xoff(kern_dtype dt) { return dt == KERN_Q5_0 ? 16 : dt == KERN_Q3_K ? 4 : 0; }
/* Scale and min of each half of 32-block b (counted from the row's start). */
void kq_xscales(const void *row, kern_dtype dt, int64_t b, float sc[2], float mn[2]);
/* The integers and scales of 32-block b: the reference every x-type kernel follows. */
void kq_xblock_ints(const void *row, kern_dtype dt, int64_t b, int8_t q[32], float sc[2], float mn[2]);
void kq_dequantize_x(float *dst, const void *src, kern_dtype dt, int64_t n);
void kq_quantize_x(void *dst, const float *src, kern_dtype dt, int64_t n); /* quant_xquantize.c */

/* m activation rows of k (a multiple of 32) quantized per 32-block, structure of arrays so a pair of blocks is one
 * 64-byte load: qs[m, k] int8, d[m, k/32] fp32 scales, sum[m, k/32] the int8 sums (for q4_0's -8 offset and the
 * unsigned form of q8_0 weights). */
typedef struct {
    int8_t *qs;
    float *d;
    int32_t *sum;
} kq_act;

void kq_quantize_act(kq_act *a, const float *x, int64_t m, int64_t k, int threads); /* rows split over threads */

/* The decode GEMV on AVX-512 VBMI for q4_0 / q4_1 / q5_0 / q5_1 / q8_0 (quant_gemv_vbmi.c): the activation row as
 * it wants it, made once per call by kq_gemv_prepare from kq_act: xp (nb * 32 bytes; nibble types: each whole
 * group of four blocks as the low-nibble elements 0-15 of its blocks then the high ones 16-31, the rest in element
 * order), c[nb] (the per-block offset / min term, see the file), d the activation's block scales. */
typedef struct {
    int8_t *xp;
    float *c;
    const float *d;
} kq_gemv_act;
int kq_gemv_vbmi_available(void);          /* the CPU has AVX-512 VBMI + VNNI (and it is compiled in) */
int kq_gemv_vbmi_supports(kern_dtype dt);  /* q4_0, q4_1, q5_0, q5_1, q8_0 */
void kq_gemv_prepare(kq_gemv_act *g, const kq_act *a, kern_dtype dt, int64_t nb);
/* y[n] = w[n, 32 nb] . x (+ beta y when beta == 1), rows split over threads. */
void kq_gemv_vbmi(float *y, const void *w, kern_dtype dt, int64_t n, int64_t nb, const kq_gemv_act *g, float beta,
                  int threads);

/* out[j * ldo + i] = weight row i (of nw <= KQ_TILE, rows wrow_bytes apart) . activation row x0 + j (j < nx <=
 * KQ_TILE) of a, over nb blocks (k = 32 nb). One function per instruction set, same results up to fp32 summation
 * order (the integer part is exact). */
#define KQ_TILE 4
typedef void (*kq_tile_fn)(float *out, int64_t ldo, const void *w, size_t wrow_bytes, int nw, const kq_act *a,
                           int64_t x0, int nx, int64_t nb);
kq_tile_fn kq_tile_scalar(kern_dtype dt);
kq_tile_fn kq_tile_avx2(kern_dtype dt);        /* NULL when not compiled in */
kq_tile_fn kq_tile_avx512vnni(kern_dtype dt);  /* NULL when not compiled in */

/* Weight panels for the prefill GEMMs (quant_panel.c): columns [j0, j0 + nr) of w[n, k] (zeros past n), nr a
 * multiple of 16, dequantized and packed as the GEMM's own packer would pack bf16 / fp32 weights:
 *   bf16: b[p * nr + c] = bf16 pair (2p, 2p+1) of column c, pairs [p0, p0 + kcp); p0 and kcp multiples of 16.
 *         Needs AVX512_BF16 (cpu_gemm_bf16dot.c checks).
 *   f32:  b[i * nr + c] = weight i of column c, i in [i0, i0 + kc); i0 and kc multiples of 32. Needs AVX-512F. */
void kq_panel_bf16(uint32_t *b, int nr, const void *w, kern_dtype dt, int64_t n, int64_t k, int64_t j0, int64_t p0,
                   int64_t kcp);
void kq_panel_f32(float *b, int nr, const void *w, kern_dtype dt, int64_t n, int64_t k, int64_t j0, int64_t i0,
                  int64_t kc);

/* y[m,n] = a . w^T + beta*y for activation rows a (kq_quantize_act) and q8_0 / q4_0 weights on AVX-512 VNNI, the
 * weights packed per call into per-thread panels (quant_gemm_vnni.c): `panels` holds threads x
 * kq_gemm_vnni_panel_bytes(k) bytes, 64-byte aligned. KERN_EUNSUPPORTED when not compiled in; the caller checks
 * the CPU. */
size_t kq_gemm_vnni_panel_bytes(int64_t k);
int kq_gemm_vnni(float *y, const kq_act *a, const void *w, kern_dtype dt, int64_t m, int64_t n, int64_t k, float beta,
                 void *panels, int threads);

/* The k-quant tile kernels (quant_kdot_*.c), same contract as kq_tile_fn with nb counted in 32-blocks (a multiple
 * of 8); the kq_tile_* functions above return them for KERN_Q4_K / KERN_Q6_K. */
kq_tile_fn kq_ktile_scalar(kern_dtype dt);
kq_tile_fn kq_ktile_avx2(kern_dtype dt);
kq_tile_fn kq_ktile_avx512vnni(kern_dtype dt);
/* The x types' tile kernels (quant_xdot_*.c), same contract (nb in 32-blocks; a multiple of 8 for q2_K, q3_K, q5_K);
 * the kq_tile_* functions above return them too. */
kq_tile_fn kq_xtile_scalar(kern_dtype dt);
kq_tile_fn kq_xtile_avx2(kern_dtype dt);
kq_tile_fn kq_xtile_avx512vnni(kern_dtype dt);

/* kern_cpu_matmul for quantized weights (quant_matmul.c); k must be whole blocks (kern_dtype_block). */
int kern_cpu_matmul_quant(kern_ctx *kc, float *y, const float *x, const void *w, kern_dtype dt, int64_t m, int64_t n,
                          int64_t k, float beta);

/* The 16 group scales of a 256-weight super-block for the signed K-types (q3_K, q6_K): each group of 16 maps its value
 * of largest magnitude to -levels (ggml's sign trick); returns the group scale of largest magnitude, with its sign. */
static inline float kq_signed_group_scales(const float *x, float levels, float scale[16]) {
    float max_scale = 0.f, amax_scale = 0.f;
    for (int g = 0; g < 16; g++) {
        float amax = 0.f, max = 0.f;
        for (int e = 0; e < 16; e++)
            if (fabsf(x[16 * g + e]) > amax) amax = fabsf(x[16 * g + e]), max = x[16 * g + e];
        scale[g] = max / -levels;
        if (fabsf(scale[g]) > amax_scale) amax_scale = fabsf(scale[g]), max_scale = scale[g];
    }
    return max_scale;
}

#endif
