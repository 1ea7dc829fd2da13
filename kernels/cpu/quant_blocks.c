/*
 * quant_blocks.c — GGML's q8_0 and q4_0 block formats (and the byte size of every quantized type, and the
 * quantize / dequantize entry points of all): the reference
 * quantizers (bit-for-bit those of ggml-quants.c, so a file mnemo writes holds what llama.cpp's own quantizer
 * would) and dequantization.
 * Scalar on purpose: these run once per weight at quantize time, or per gathered embedding row.
 */
#include <math.h>
#include <string.h>

#include "quant.h"

size_t kern_dtype_bytes(kern_dtype dt, int64_t n) {
    if (n < 0) return 0;
    switch (dt) {
    case KERN_F32: return (size_t)n * 4;
    case KERN_F16:
    case KERN_BF16: return (size_t)n * 2;
    case KERN_Q8_0: return n % KERN_QBLOCK ? 0 : (size_t)(n / KERN_QBLOCK) * sizeof(kq_block_q8_0);
    case KERN_Q4_0: return n % KERN_QBLOCK ? 0 : (size_t)(n / KERN_QBLOCK) * sizeof(kq_block_q4_0);
    case KERN_Q4_K: return n % KERN_QK_K ? 0 : (size_t)(n / KERN_QK_K) * sizeof(kq_block_q4_K);
    case KERN_Q6_K: return n % KERN_QK_K ? 0 : (size_t)(n / KERN_QK_K) * sizeof(kq_block_q6_K);
    case KERN_Q4_1: return n % KERN_QBLOCK ? 0 : (size_t)(n / KERN_QBLOCK) * sizeof(kq_block_q4_1);
    case KERN_Q5_0: return n % KERN_QBLOCK ? 0 : (size_t)(n / KERN_QBLOCK) * sizeof(kq_block_q5_0);
    case KERN_Q5_1: return n % KERN_QBLOCK ? 0 : (size_t)(n / KERN_QBLOCK) * sizeof(kq_block_q5_1);
    case KERN_Q2_K: return n % KERN_QK_K ? 0 : (size_t)(n / KERN_QK_K) * sizeof(kq_block_q2_K);
    case KERN_Q3_K: return n % KERN_QK_K ? 0 : (size_t)(n / KERN_QK_K) * sizeof(kq_block_q3_K);
    case KERN_Q5_K: return n % KERN_QK_K ? 0 : (size_t)(n / KERN_QK_K) * sizeof(kq_block_q5_K);
    }
    return 0;
}

/* v rounded and clamped to [lo, hi]; NaN (from NaN or infinite weights) gives 0 instead of undefined behaviour. */
static inline int clamp_round(float v, int lo, int hi) {
    if (!(v == v)) return 0;
    return v <= (float)lo ? lo : v >= (float)hi ? hi : (int)roundf(v);
}

static void quantize_q8_0(kq_block_q8_0 *b, const float *x, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += KERN_QBLOCK) {
        float amax = 0.f;
        for (int j = 0; j < KERN_QBLOCK; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.f, id = d ? 1.f / d : 0.f;
        b[i].d = kern_f32_to_f16(d);
        for (int j = 0; j < KERN_QBLOCK; j++) b[i].qs[j] = (int8_t)clamp_round(x[j] * id, -127, 127);
    }
}

/* The value of largest magnitude maps to -8, so the scale keeps its sign (ggml's choice: one more level). */
static void quantize_q4_0(kq_block_q4_0 *b, const float *x, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += KERN_QBLOCK) {
        float amax = 0.f, max = 0.f;
        for (int j = 0; j < KERN_QBLOCK; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        float d = max / -8.f, id = d ? 1.f / d : 0.f;
        b[i].d = kern_f32_to_f16(d);
        for (int j = 0; j < KERN_QBLOCK / 2; j++) {
            /* ggml: (int)(x * id + 8.5) truncated, at most 15; the clamp at 0 only matters for non-finite input */
            float v0 = x[j] * id + 8.5f, v1 = x[j + KERN_QBLOCK / 2] * id + 8.5f;
            int q0 = v0 == v0 ? (v0 >= 15.f ? 15 : v0 <= 0.f ? 0 : (int)v0) : 0;
            int q1 = v1 == v1 ? (v1 >= 15.f ? 15 : v1 <= 0.f ? 0 : (int)v1) : 0;
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void kern_quantize_row(void *dst, const float *src, kern_dtype dt, int64_t n) {
    if (dt == KERN_Q8_0) quantize_q8_0(dst, src, n / KERN_QBLOCK);
    if (dt == KERN_Q4_0) quantize_q4_0(dst, src, n / KERN_QBLOCK);
    if (dt == KERN_Q4_K || dt == KERN_Q6_K) kq_quantize_k(dst, src, dt, n); /* quant_kblocks.c */
    if (kq_is_x(dt)) kq_quantize_x(dst, src, dt, n);                       /* quant_xquantize.c */
}

void kern_dequantize_row(float *dst, const void *src, kern_dtype dt, int64_t n) {
    int64_t nb = n / KERN_QBLOCK;
    if (dt == KERN_Q4_K || dt == KERN_Q6_K) kq_dequantize_k(dst, src, dt, n);
    if (kq_is_x(dt)) kq_dequantize_x(dst, src, dt, n); /* quant_xblocks.c */
    if (dt == KERN_Q8_0) {
        const kq_block_q8_0 *b = src;
        for (int64_t i = 0; i < nb; i++) {
            float d = kern_f16_to_f32(b[i].d);
            for (int j = 0; j < KERN_QBLOCK; j++) dst[i * KERN_QBLOCK + j] = d * (float)b[i].qs[j];
        }
    } else if (dt == KERN_Q4_0) {
        const kq_block_q4_0 *b = src;
        for (int64_t i = 0; i < nb; i++) {
            float d = kern_f16_to_f32(b[i].d);
            for (int j = 0; j < KERN_QBLOCK / 2; j++) {
                dst[i * KERN_QBLOCK + j] = d * (float)((b[i].qs[j] & 15) - 8);
                dst[i * KERN_QBLOCK + j + KERN_QBLOCK / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
            }
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* One activation row, AVX-512: the scalar loop below step for step (the same fp32 operations, max ignoring NaN,
 * lrintf's round-to-nearest-even by cvtps with the default rounding, NaN -> 0), so both give identical bytes. */
__attribute__((target("avx512f"))) static void quantize_act_row_avx512(int8_t *q, float *dq, int32_t *sq,
                                                                         const float *x, int64_t nb) {
    const __m512 lim = _mm512_set1_ps(127.f), nlim = _mm512_set1_ps(-127.f);
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * KERN_QBLOCK;
        __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
        /* max(new, acc) returns acc when new is NaN, as fmaxf does */
        __m512 mx = _mm512_max_ps(_mm512_abs_ps(v1), _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps()));
        float amax = _mm512_reduce_max_ps(mx);
        float d = amax / 127.f, id = d ? 1.f / d : 0.f;
        __m512 s0 = _mm512_mul_ps(v0, _mm512_set1_ps(id)), s1 = _mm512_mul_ps(v1, _mm512_set1_ps(id));
        __mmask16 o0 = _mm512_cmp_ps_mask(s0, s0, _CMP_ORD_Q), o1 = _mm512_cmp_ps_mask(s1, s1, _CMP_ORD_Q);
        __m512i i0 = _mm512_maskz_cvtps_epi32(o0, _mm512_max_ps(_mm512_min_ps(s0, lim), nlim));
        __m512i i1 = _mm512_maskz_cvtps_epi32(o1, _mm512_max_ps(_mm512_min_ps(s1, lim), nlim));
        _mm_storeu_si128((__m128i *)(q + b * KERN_QBLOCK), _mm512_cvtepi32_epi8(i0));
        _mm_storeu_si128((__m128i *)(q + b * KERN_QBLOCK + 16), _mm512_cvtepi32_epi8(i1));
        dq[b] = d;
        sq[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
    }
}
#endif

/* Activation rows for the integer dot products: per 32-block an fp32 scale, the int8 values and their sum. */
void kq_quantize_act(kq_act *a, const float *x, int64_t m, int64_t k, int threads) {
    int64_t nb = k / KERN_QBLOCK;
    int vec = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    vec = __builtin_cpu_supports("avx512f");
#endif
#pragma omp parallel for num_threads(threads) schedule(static) if (m * k >= (1 << 16))
    for (int64_t r = 0; r < m; r++) {
#if defined(__x86_64__) && defined(__GNUC__)
        if (vec) {
            quantize_act_row_avx512(a->qs + r * k, a->d + r * nb, a->sum + r * nb, x + r * k, nb);
            continue;
        }
#endif
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + r * k + b * KERN_QBLOCK;
            float amax = 0.f;
            for (int j = 0; j < KERN_QBLOCK; j++) amax = fmaxf(amax, fabsf(xb[j]));
            float d = amax / 127.f, id = d ? 1.f / d : 0.f;
            int8_t *q = a->qs + (r * nb + b) * KERN_QBLOCK;
            int32_t s = 0;
            for (int j = 0; j < KERN_QBLOCK; j++) {
                float v = xb[j] * id;
                q[j] = (int8_t)(v == v ? (v >= 127.f ? 127 : v <= -127.f ? -127 : lrintf(v)) : 0);
                s += q[j];
            }
            a->d[r * nb + b] = d;
            a->sum[r * nb + b] = s;
        }
    }
}
