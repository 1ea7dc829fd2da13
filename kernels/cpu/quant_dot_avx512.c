/*
 * quant_dot_avx512.c — the AVX-512 VNNI tile kernel for q8_0 / q4_0 weights: two 32-byte blocks per register, one
 * vpdpbusd (unsigned x signed bytes, summed into int32) per weight row x activation row pair.
 * vpdpbusd wants one operand unsigned, so weights are made unsigned instead of flipping signs per pair:
 *   q8_0: w + 128 (an xor of the sign bit), q4_0: the raw nibble q = w + 8;
 * the excess 128 * sum(x) or 8 * sum(x) per block is taken out by starting the accumulator at minus that (the
 * activation blocks carry their sums), so the integer result is exact. Each lane's int32 is then converted and
 * scaled by d_w * d_x of its block. An odd last block is done alone with masked loads (never past a row's end).
 * Compiled with a target attribute; quant_matmul.c calls it only when the CPU has AVX512F/BW/VL/DQ + VNNI.
 */
#include "quant.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define Z_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#define Z_FN __attribute__((target(Z_TARGET))) static inline __attribute__((always_inline))

/* Weight blocks b (and b + 1 when two) as unsigned bytes; lanes 0-7 of the dword view belong to block b. */
Z_FN __m512i load_w(const char *wb, size_t bs, kern_dtype dt, int two) {
    if (dt == KERN_Q8_0) {
        __m256i lo = _mm256_loadu_si256((const __m256i *)(wb + 2));
        __m256i hi = two ? _mm256_loadu_si256((const __m256i *)(wb + bs + 2)) : _mm256_setzero_si256();
        __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    }
    __m128i q0 = _mm_loadu_si128((const __m128i *)(wb + 2));
    __m128i q1 = two ? _mm_loadu_si128((const __m128i *)(wb + bs + 2)) : _mm_setzero_si128();
    __m256i t = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1), m4 = _mm256_set1_epi8(15);
    __m256i lo = _mm256_and_si256(t, m4), hi = _mm256_and_si256(_mm256_srli_epi16(t, 4), m4);
    /* [lo0 lo1 hi0 hi1] -> [lo0 hi0 lo1 hi1]: element order of each block */
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

/* [s0 x8, s1 x8] */
Z_FN __m512 pair_ps(float s0, float s1) {
    return _mm512_insertf32x8(_mm512_set1_ps(s0), _mm256_set1_ps(s1), 1);
}

Z_FN void tile_fixed(float *out, int64_t ldo, const char *w, size_t wrb, const kq_act *a, int64_t x0, int64_t nb,
                     kern_dtype dt, const int NW, const int NX) {
    const size_t bs = dt == KERN_Q8_0 ? sizeof(kq_block_q8_0) : sizeof(kq_block_q4_0);
    const int32_t off = dt == KERN_Q8_0 ? -128 : -8;
    __m512 acc[KQ_TILE][KQ_TILE];
    for (int i = 0; i < NW; i++)
        for (int j = 0; j < NX; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) {
        const int two = b + 1 < nb;
        __m512i wv[KQ_TILE];
        __m512 dw[KQ_TILE];
        for (int i = 0; i < NW; i++) {
            const char *wb = w + (size_t)i * wrb + (size_t)b * bs;
            wv[i] = load_w(wb, bs, dt, two);
            dw[i] = pair_ps(_cvtsh_ss(*(const uint16_t *)wb), two ? _cvtsh_ss(*(const uint16_t *)(wb + bs)) : 0.f);
        }
        for (int j = 0; j < NX; j++) {
            int64_t r = x0 + j, o = r * nb + b;
            __m512i xv = two ? _mm512_loadu_si512(a->qs + o * KERN_QBLOCK)
                             : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, a->qs + o * KERN_QBLOCK);
            __m512 dx = pair_ps(a->d[o], two ? a->d[o + 1] : 0.f);
            /* the offset correction, in lane 0 of each block */
            __m128i c0 = _mm_cvtsi32_si128(off * a->sum[o]), c1 = _mm_cvtsi32_si128(two ? off * a->sum[o + 1] : 0);
            __m512i corr = _mm512_inserti32x4(_mm512_castsi128_si512(c0), c1, 2);
            for (int i = 0; i < NW; i++) {
                __m512i p = _mm512_dpbusd_epi32(corr, wv[i], xv);
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw[i], dx), acc[i][j]);
            }
        }
    }
    for (int i = 0; i < NW; i++)
        for (int j = 0; j < NX; j++) out[j * ldo + i] = _mm512_reduce_add_ps(acc[i][j]);
}

__attribute__((target(Z_TARGET))) static void tile(float *out, int64_t ldo, const void *w, size_t wrb, int nw,
                                                   const kq_act *a, int64_t x0, int nx, int64_t nb, kern_dtype dt) {
    if (nw == KQ_TILE && nx == KQ_TILE) {
        tile_fixed(out, ldo, w, wrb, a, x0, nb, dt, KQ_TILE, KQ_TILE);
        return;
    }
    if (nx == 1) { /* decode: one row at a time, so each thread reads one sequential stream (the prefetchers follow
                    * it; four interleaved rows measured ~20% slower on a 59 MB matrix) */
        for (int i = 0; i < nw; i++)
            tile_fixed(out + i, ldo, (const char *)w + (size_t)i * wrb, wrb, a, x0, nb, dt, 1, 1);
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

kq_tile_fn kq_tile_avx512vnni(kern_dtype dt) {
    /* k-quants: quant_kdot_avx512.c; the x types: quant_xdot_avx512.c */
    if (kq_is_x(dt)) return kq_xtile_avx512vnni(dt);
    return dt == KERN_Q8_0 ? tile_q8 : dt == KERN_Q4_0 ? tile_q4 : kq_ktile_avx512vnni(dt);
}
#else
kq_tile_fn kq_tile_avx512vnni(kern_dtype dt) { (void)dt; return NULL; }
#endif
