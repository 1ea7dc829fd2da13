/*
 * quant.h — internals of the CPU's block-quantized weights (q8_0, q4_0): the block layouts GGML defines, the
 * quantized activation rows the integer dot products read, and the per-instruction-set tile kernels that
 * quant_matmul.c dispatches to.
 */
#ifndef MNEMO_QUANT_H
#define MNEMO_QUANT_H

#include <stddef.h>
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

_Static_assert(sizeof(kq_block_q8_0) == 34, "q8_0 block must be packed as in GGML");
_Static_assert(sizeof(kq_block_q4_0) == 18, "q4_0 block must be packed as in GGML");

/* m activation rows of k (a multiple of 32) quantized per 32-block, structure of arrays so a pair of blocks is one
 * 64-byte load: qs[m, k] int8, d[m, k/32] fp32 scales, sum[m, k/32] the int8 sums (for q4_0's -8 offset and the
 * unsigned form of q8_0 weights). */
typedef struct {
    int8_t *qs;
    float *d;
    int32_t *sum;
} kq_act;

void kq_quantize_act(kq_act *a, const float *x, int64_t m, int64_t k, int threads); /* rows split over threads */

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

/* kern_cpu_matmul for q8_0 / q4_0 weights (quant_matmul.c); k must be a multiple of 32. */
int kern_cpu_matmul_quant(kern_ctx *kc, float *y, const float *x, const void *w, kern_dtype dt, int64_t m, int64_t n,
                          int64_t k, float beta);

#endif
