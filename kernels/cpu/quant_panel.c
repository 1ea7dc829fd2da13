/*
 * quant_panel.c — quantized weights (every type: q8_0, q4_0, the k-quants, q4_1, q5_0, q5_1) dequantized into the packed weight panels of the prefill GEMMs,
 * so a prefill on quantized weights runs the same tiles as bf16 (cpu_gemm_bf16dot.c, FAST) or fp32
 * (cpu_gemm_f32.c, EXACT) weights. A prefill GEMM packs every weight panel once per call anyway; dequantizing
 * while packing costs O(n k) against the tiles' O(m n k), and the weights stay quantized in memory (the mapped
 * GGUF file).
 *
 * Both packers take the panel as 16-column groups: the 16 columns' blocks are dequantized into 16 registers (one
 * per column), transposed 16 x 16 in registers and stored as whole 64-byte rows of the panel, so the panel is
 * written with full aligned stores instead of 4-byte scatters.
 *   bf16 panel: b[p * NR + c] = bf16 pair (2p, 2p+1) of column c, each weight d * q rounded to bf16 (nearest
 *               even; |error| <= 2^-9 |w|). One block = 16 pairs = one register per column.
 *   f32 panel:  b[i * NR + c] = d * q exactly (an f16 times a 4- or 8-bit integer fits fp32's mantissa), the
 *               values kern_dequantize_row gives (q4_K / q6_K: sc * q - mn as ggml rounds it, the same values).
 *               One 32-block = two registers per column.
 * k-quants go by 32-blocks too (a sub-block of their 256-blocks; kblock_f32 unpacks its scales), so the GEMMs'
 * K blocks (multiples of 32) need not align with the super-blocks.
 * Compiled with target attributes; called only when the CPU has what the calling GEMM needs (AVX512_BF16 or
 * AVX-512F), so a build for another CPU keeps this file and never calls it.
 */
#include "quant.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "avx512_transpose16.h"
#include "quant_xunpack.h"

#define QP_F32 __attribute__((target("avx512f,f16c")))
#define QP_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,f16c")))
#define QP_INLINE static inline __attribute__((always_inline))

/* 32-block b of a q4_K / q6_K row as fp32, the values kq_kblock_ints gives (sc * q - mn, rounded alike). */
QP_F32 QP_INLINE void kblock_f32(const char *row, int64_t b, kern_dtype dt, __m512 *lo, __m512 *hi) {
    int64_t sb = b / 8, j = b % 8;
    __m512i q0, q1;
    __m512 s0, s1, mn = _mm512_setzero_ps();
    if (dt == KERN_Q4_K) {
        const kq_block_q4_K *x = (const kq_block_q4_K *)row + sb;
        uint8_t sc[8], m[8];
        kq_q4k_scales(x->scales, sc, m);
        const uint8_t *qs = x->qs + 32 * (j / 2);
        __m512i sh = _mm512_set1_epi32(4 * (int)(j % 2)), m4 = _mm512_set1_epi32(15);
        q0 = _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs)), sh), m4);
        q1 = _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qs + 16))), sh),
                              m4);
        s0 = s1 = _mm512_set1_ps(_cvtsh_ss(x->d) * (float)sc[j]);
        mn = _mm512_set1_ps(_cvtsh_ss(x->dmin) * (float)m[j]);
    } else {
        const kq_block_q6_K *x = (const kq_block_q6_K *)row + sb;
        int64_t h = j / 4, t = j % 4;
        const uint8_t *ql = x->ql + 64 * h + 32 * (t % 2), *qh = x->qh + 32 * h;
        __m512i sl = _mm512_set1_epi32(4 * (int)(t / 2)), sh = _mm512_set1_epi32(2 * (int)t);
        __m512i m4 = _mm512_set1_epi32(15), m2 = _mm512_set1_epi32(3), c32 = _mm512_set1_epi32(32);
        __m512i l0 = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)ql)), sl);
        __m512i l1 = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(ql + 16))), sl);
        __m512i h0 = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qh)), sh);
        __m512i h1 = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qh + 16))), sh);
        /* (low nibble | high 2 bits << 4) - 32 */
        q0 = _mm512_or_si512(_mm512_and_si512(l0, m4), _mm512_slli_epi32(_mm512_and_si512(h0, m2), 4));
        q1 = _mm512_or_si512(_mm512_and_si512(l1, m4), _mm512_slli_epi32(_mm512_and_si512(h1, m2), 4));
        q0 = _mm512_sub_epi32(q0, c32);
        q1 = _mm512_sub_epi32(q1, c32);
        const float d = _cvtsh_ss(x->d);
        s0 = _mm512_set1_ps(d * (float)x->scales[8 * h + 2 * t]);
        s1 = _mm512_set1_ps(d * (float)x->scales[8 * h + 2 * t + 1]);
    }
    *lo = _mm512_sub_ps(_mm512_mul_ps(s0, _mm512_cvtepi32_ps(q0)), mn);
    *hi = _mm512_sub_ps(_mm512_mul_ps(s1, _mm512_cvtepi32_ps(q1)), mn);
}

/* 32-block b of a q4_1 / q5_0 / q5_1 / q2_K / q3_K / q5_K row as fp32: sc * q - mn per half, the values
 * kq_xblock_ints gives. */
QP_F32 QP_INLINE void xblock_f32(const char *row, int64_t b, kern_dtype dt, __m512 *lo, __m512 *hi) {
    float sc[2], mn[2];
    __m256i u = xu_block(row, dt, b);
    xu_scales(row, dt, b, sc, mn);
    __m512i off = _mm512_set1_epi32(kq_xoff(dt));
    __m512i q0 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(u)), off);
    __m512i q1 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(u, 1)), off);
    *lo = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(sc[0]), _mm512_cvtepi32_ps(q0)), _mm512_set1_ps(mn[0]));
    *hi = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(sc[1]), _mm512_cvtepi32_ps(q1)), _mm512_set1_ps(mn[1]));
}

/* 32-block b of a row as fp32: lo = elements 0..15, hi = 16..31. */
QP_F32 QP_INLINE void block_f32(const char *row, int64_t b, kern_dtype dt, __m512 *lo, __m512 *hi) {
    if (kq_is_x(dt)) {
        xblock_f32(row, b, dt, lo, hi);
        return;
    }
    if (kern_dtype_is_kquant(dt)) {
        kblock_f32(row, b, dt, lo, hi);
        return;
    }
    const char *blk = row + (size_t)b * (dt == KERN_Q8_0 ? sizeof(kq_block_q8_0) : sizeof(kq_block_q4_0));
    __m512 d = _mm512_set1_ps(_cvtsh_ss(*(const uint16_t *)blk)); /* d is each block's first field */
    if (dt == KERN_Q8_0) {
        *lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)))));
        *hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 18)))));
    } else { /* q4_0: element j in the low nibble of qs[j], j + 16 in the high one, stored as q + 8 */
        __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)));
        __m512i m4 = _mm512_set1_epi32(15), eight = _mm512_set1_epi32(8);
        *lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(q, m4), eight)));
        *hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight)));
    }
}

/* rows[i] = weight row j + i (rows of rb bytes), NULL past n; returns how many exist. */
static inline int panel_rows(const char *rows[16], const void *w, size_t rb, int64_t j, int64_t n) {
    int live = 0;
    for (int i = 0; i < 16; i++) {
        rows[i] = j + i < n ? (const char *)w + (size_t)(j + i) * rb : NULL;
        live += rows[i] != NULL;
    }
    return live;
}

QP_BF16 void kq_panel_bf16(uint32_t *b, int nr, const void *w, kern_dtype dt, int64_t n, int64_t k, int64_t j0,
                           int64_t p0, int64_t kcp) {
    size_t rb = kern_dtype_bytes(dt, k);
    int64_t blocks = kcp / 16, b0 = p0 / 16; /* 16 pairs per 32-block */
    for (int c0 = 0; c0 < nr; c0 += 16) {
        const char *rows[16];
        int live = panel_rows(rows, w, rb, j0 + c0, n);
        for (int64_t q = 0; q < blocks; q++) {
            __m512i r[16];
            for (int i = 0; i < 16; i++) {
                if (i >= live) { /* columns past n: zeros */
                    r[i] = _mm512_setzero_si512();
                    continue;
                }
                __m512 lo, hi;
                block_f32(rows[i], b0 + q, dt, &lo, &hi);
                r[i] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo); /* dword j = elements (2j, 2j+1) */
            }
            transpose16(r);
            uint32_t *bq = b + q * 16 * nr + c0;
            for (int j = 0; j < 16; j++) _mm512_storeu_si512(bq + (int64_t)j * nr, r[j]);
        }
    }
}

QP_F32 void kq_panel_f32(float *b, int nr, const void *w, kern_dtype dt, int64_t n, int64_t k, int64_t j0, int64_t i0,
                         int64_t kc) {
    size_t rb = kern_dtype_bytes(dt, k);
    int64_t blocks = kc / KERN_QBLOCK, b0 = i0 / KERN_QBLOCK;
    for (int c0 = 0; c0 < nr; c0 += 16) {
        const char *rows[16];
        int live = panel_rows(rows, w, rb, j0 + c0, n);
        for (int64_t q = 0; q < blocks; q++) {
            __m512i lo[16], hi[16];
            for (int i = 0; i < 16; i++) {
                __m512 l = _mm512_setzero_ps(), h = _mm512_setzero_ps();
                if (i < live) block_f32(rows[i], b0 + q, dt, &l, &h);
                lo[i] = _mm512_castps_si512(l);
                hi[i] = _mm512_castps_si512(h);
            }
            transpose16(lo);
            transpose16(hi);
            float *bq = b + q * KERN_QBLOCK * nr + c0;
            for (int j = 0; j < 16; j++) {
                _mm512_storeu_si512(bq + (int64_t)j * nr, lo[j]);
                _mm512_storeu_si512(bq + (int64_t)(16 + j) * nr, hi[j]);
            }
        }
    }
}
#else
void kq_panel_bf16(uint32_t *b, int nr, const void *w, kern_dtype dt, int64_t n, int64_t k, int64_t j0, int64_t p0,
                   int64_t kcp) {
    (void)b, (void)nr, (void)w, (void)dt, (void)n, (void)k, (void)j0, (void)p0, (void)kcp;
}
void kq_panel_f32(float *b, int nr, const void *w, kern_dtype dt, int64_t n, int64_t k, int64_t j0, int64_t i0,
                  int64_t kc) {
    (void)b, (void)nr, (void)w, (void)dt, (void)n, (void)k, (void)j0, (void)i0, (void)kc;
}
#endif
