/*
 * quant_dot_avx2.c — the AVX2 tile kernel for q8_0 / q4_0 weights (llama.cpp's AVX2 scheme): one 32-byte block per
 * register; signed x signed bytes are multiplied as |w| (unsigned) x sign(w)*x (signed) by vpmaddubsw, pairs summed
 * to int32 by vpmaddwd, converted and scaled by d_w * d_x per block. q4_0 nibbles are unpacked and shifted to
 * [-8, 7] first. Compiled for AVX2+FMA+F16C with a target attribute, so one binary carries every path and
 * quant_matmul.c picks at run time.
 */
#include "quant.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2_FN __attribute__((target("avx2,fma,f16c"))) static inline __attribute__((always_inline))

AVX2_FN __m256i load_w(const char *wb, kern_dtype dt) {
    if (dt == KERN_Q8_0) return _mm256_loadu_si256((const __m256i *)(wb + 2));
    __m128i q = _mm_loadu_si128((const __m128i *)(wb + 2)), m4 = _mm_set1_epi8(15);
    __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
    return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
}

AVX2_FN float hsum(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* NW x NX tile with compile-time sizes so the accumulators stay in registers. */
AVX2_FN void tile_fixed(float *out, int64_t ldo, const char *w, size_t wrb, const kq_act *a, int64_t x0, int64_t nb,
                        kern_dtype dt, const int NW, const int NX) {
    const size_t bs = dt == KERN_Q8_0 ? sizeof(kq_block_q8_0) : sizeof(kq_block_q4_0);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[KQ_TILE][KQ_TILE];
    for (int i = 0; i < NW; i++)
        for (int j = 0; j < NX; j++) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i aw[KQ_TILE], wv[KQ_TILE];
        float dw[KQ_TILE];
        for (int i = 0; i < NW; i++) {
            const char *wb = w + (size_t)i * wrb + (size_t)b * bs;
            wv[i] = load_w(wb, dt);
            aw[i] = _mm256_abs_epi8(wv[i]);
            dw[i] = _cvtsh_ss(*(const uint16_t *)wb);
        }
        for (int j = 0; j < NX; j++) {
            int64_t r = x0 + j;
            __m256i xv = _mm256_loadu_si256((const __m256i *)(a->qs + (r * nb + b) * KERN_QBLOCK));
            float dx = a->d[r * nb + b];
            for (int i = 0; i < NW; i++) {
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[i], _mm256_sign_epi8(xv, wv[i])), ones);
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw[i] * dx), acc[i][j]);
            }
        }
    }
    for (int i = 0; i < NW; i++)
        for (int j = 0; j < NX; j++) out[j * ldo + i] = hsum(acc[i][j]);
}

__attribute__((target("avx2,fma,f16c"))) static void tile(float *out, int64_t ldo, const void *w, size_t wrb, int nw,
                                                          const kq_act *a, int64_t x0, int nx, int64_t nb,
                                                          kern_dtype dt) {
    if (nw == KQ_TILE && nx == KQ_TILE) {
        tile_fixed(out, ldo, w, wrb, a, x0, nb, dt, KQ_TILE, KQ_TILE);
        return;
    }
    for (int i = 0; i < nw; i++)
        for (int j = 0; j < nx; j++)
            tile_fixed(out + j * ldo + i, ldo, (const char *)w + (size_t)i * wrb, wrb, a, x0 + j, nb, dt, 1, 1);
}

static void tile_q8(float *out, int64_t ldo, const void *w, size_t wrb, int nw, const kq_act *a, int64_t x0, int nx,
                    int64_t nb) {
    tile(out, ldo, w, wrb, nw, a, x0, nx, nb, KERN_Q8_0);
}
static void tile_q4(float *out, int64_t ldo, const void *w, size_t wrb, int nw, const kq_act *a, int64_t x0, int nx,
                    int64_t nb) {
    tile(out, ldo, w, wrb, nw, a, x0, nx, nb, KERN_Q4_0);
}

kq_tile_fn kq_tile_avx2(kern_dtype dt) {
    /* k-quants: quant_kdot_avx2.c; the x types: quant_xdot_avx2.c */
    if (kq_is_x(dt)) return kq_xtile_avx2(dt);
    return dt == KERN_Q8_0 ? tile_q8 : dt == KERN_Q4_0 ? tile_q4 : kq_ktile_avx2(dt);
}
#else
kq_tile_fn kq_tile_avx2(kern_dtype dt) { (void)dt; return NULL; }
#endif
