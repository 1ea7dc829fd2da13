/*
 * quant_kdot_avx2.c — the AVX2 tile kernel for q4_K / q6_K weights against int8 activation blocks (the contract of
 * quant_kdot_scalar.c). Per super-block the 6-bit scales and mins (q4_K) or int8 scales (q6_K) are unpacked to
 * fp32 once per weight row; per 32-block the weights are unpacked to unsigned bytes u (q4_K: the nibble, q6_K:
 * q + 32) and multiplied with the signed activations by vpmaddubsw (|u x + u' x'| <= 2 * 63 * 127 fits int16) and
 * vpmaddwd, giving 8 int32 lanes of 4 elements each; lanes 0-3 and 4-7 are the two 16-element groups (q6_K's
 * scales). q6_K's +32 is taken out per lane by the same products of 32 with x (once per activation block, shared
 * by the tile's weight rows); q4_K's min term is one 8-wide FMA per super-block, mins times d_x * sum(x) of the 8
 * activation blocks. Compiled with a target attribute; quant_matmul.c picks it at run time.
 */
#include "quant.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2_FN __attribute__((target("avx2,fma,f16c"))) static inline __attribute__((always_inline))

/* 32-block j (0..7) of super-block blk as unsigned bytes: q4_K the nibble, q6_K q + 32 (see kq_kblock_ints). */
AVX2_FN __m256i load_u(const char *blk, kern_dtype dt, int j) {
    const __m256i m4 = _mm256_set1_epi8(15);
    if (dt == KERN_Q4_K) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * (j / 2)));
        return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(4 * (j % 2))), m4);
    }
    int h = j / 4, t = j % 4;
    __m256i l = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32 * (t % 2)));
    __m256i hb = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
    l = _mm256_and_si256(_mm256_srl_epi16(l, _mm_cvtsi32_si128(4 * (t / 2))), m4);
    hb = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * t)), _mm256_set1_epi8(3));
    return _mm256_or_si256(l, _mm256_slli_epi16(hb, 4)); /* bytes <= 3 shifted by 4 stay in their byte */
}

AVX2_FN float hsum(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* Super-block scales of one weight row: sc[g] per 16-element group (q4_K: both groups of a sub-block alike), and
 * for q4_K the 8 mins dmin * m_j. */
AVX2_FN void unpack_scales(const char *blk, kern_dtype dt, float sc[16], __m256 *mn) {
    if (dt == KERN_Q4_K) {
        uint8_t s[8], m[8];
        kq_q4k_scales((const uint8_t *)blk + 4, s, m);
        const float d = _cvtsh_ss(*(const uint16_t *)blk);
        for (int j = 0; j < 8; j++) sc[2 * j] = sc[2 * j + 1] = d * (float)s[j];
        __m256 mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)m)));
        *mn = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(*(const uint16_t *)(blk + 2))), mf);
        return;
    }
    const float d = _cvtsh_ss(*(const uint16_t *)(blk + 208));
    for (int g = 0; g < 16; g++) sc[g] = d * (float)((const int8_t *)blk)[192 + g];
    *mn = _mm256_setzero_ps();
}

/* NW x NX tile with compile-time sizes so the accumulators stay in registers. */
AVX2_FN void tile_fixed(float *out, int64_t ldo, const char *w, size_t wrb, const kq_act *a, int64_t x0, int64_t nb,
                        kern_dtype dt, const int NW, const int NX) {
    const size_t bs = dt == KERN_Q4_K ? sizeof(kq_block_q4_K) : sizeof(kq_block_q6_K);
    const __m256i ones = _mm256_set1_epi16(1), c32 = _mm256_set1_epi8(32);
    __m256 acc[KQ_TILE][KQ_TILE], macc[KQ_TILE][KQ_TILE];
    for (int i = 0; i < NW; i++)
        for (int j = 0; j < NX; j++) acc[i][j] = macc[i][j] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nb / 8; sb++) {
        float sc[KQ_TILE][16];
        __m256 mn[KQ_TILE];
        const char *blk[KQ_TILE];
        for (int i = 0; i < NW; i++) {
            blk[i] = w + (size_t)i * wrb + (size_t)sb * bs;
            unpack_scales(blk[i], dt, sc[i], &mn[i]);
        }
        if (dt == KERN_Q4_K)
            for (int j = 0; j < NX; j++) { /* the min term: sum over sub-blocks of mn_j * d_x * sum(x) */
                int64_t o = (x0 + j) * nb + sb * 8;
                __m256 xs = _mm256_mul_ps(_mm256_loadu_ps(a->d + o),
                                          _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(a->sum + o))));
                for (int i = 0; i < NW; i++) macc[i][j] = _mm256_fmadd_ps(mn[i], xs, macc[i][j]);
            }
        for (int b = 0; b < 8; b++) {
            __m256i u[KQ_TILE];
            __m256 sv[KQ_TILE];
            for (int i = 0; i < NW; i++) {
                u[i] = load_u(blk[i], dt, b);
                sv[i] = _mm256_set_m128(_mm_set1_ps(sc[i][2 * b + 1]), _mm_set1_ps(sc[i][2 * b]));
            }
            for (int j = 0; j < NX; j++) {
                int64_t o = (x0 + j) * nb + sb * 8 + b;
                __m256i xv = _mm256_loadu_si256((const __m256i *)(a->qs + o * KERN_QBLOCK));
                __m256 dx = _mm256_set1_ps(a->d[o]);
                __m256i corr = dt == KERN_Q6_K ? _mm256_madd_epi16(_mm256_maddubs_epi16(c32, xv), ones)
                                               : _mm256_setzero_si256();
                for (int i = 0; i < NW; i++) {
                    __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u[i], xv), ones);
                    if (dt == KERN_Q6_K) p = _mm256_sub_epi32(p, corr);
                    acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(sv[i], dx), acc[i][j]);
                }
            }
        }
    }
    for (int i = 0; i < NW; i++)
        for (int j = 0; j < NX; j++) out[j * ldo + i] = hsum(acc[i][j]) - hsum(macc[i][j]);
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

static void tile_q4k(float *out, int64_t ldo, const void *w, size_t wrb, int nw, const kq_act *a, int64_t x0, int nx,
                     int64_t nb) {
    tile(out, ldo, w, wrb, nw, a, x0, nx, nb, KERN_Q4_K);
}
static void tile_q6k(float *out, int64_t ldo, const void *w, size_t wrb, int nw, const kq_act *a, int64_t x0, int nx,
                     int64_t nb) {
    tile(out, ldo, w, wrb, nw, a, x0, nx, nb, KERN_Q6_K);
}

kq_tile_fn kq_ktile_avx2(kern_dtype dt) { return dt == KERN_Q4_K ? tile_q4k : dt == KERN_Q6_K ? tile_q6k : NULL; }
#else
kq_tile_fn kq_ktile_avx2(kern_dtype dt) { (void)dt; return NULL; }
#endif
