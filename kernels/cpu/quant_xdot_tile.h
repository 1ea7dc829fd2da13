/*
 * quant_xdot_tile.h — the vector tile kernel for q4_1, q5_0, q5_1, q2_K, q3_K and q5_K weights (the contract of
 * quant_xdot_scalar.c), written once for AVX2 and AVX-512 VNNI: the including file defines XD_TARGET (its target
 * attribute), XD_DOT(acc, u, x) (acc + the 8 int32 lanes of 4 products each of unsigned bytes u and signed bytes
 * x: vpmaddubsw + vpmaddwd, or one vpdpbusd) and XD_SUFFIX (names the kq_xtile_ function).
 * Per 32-block (one 256-bit register), weight row i, activation row j:
 *   - u = q + off as unsigned bytes (quant_xunpack.h); lanes 0-3 hold elements 0-15, lanes 4-7 elements 16-31,
 *     the two halves whose scales and mins may differ (q2_K, q3_K: per 16 elements);
 *   - xs = the lanes' sums of x (XD_DOT of ones), once per activation block and shared by the tile's weight rows;
 *     the integer dot is p = XD_DOT(-off * xs, u, x), exact;
 *   - acc += d_x * (sc_lane * p - mn_lane * xs): the mins' term with the same lanes.
 * |u x + u' x'| <= 2 * 31 * 127 fits vpmaddubsw's int16.
 */
#include "quant_xunpack.h"

#define XD_FN __attribute__((target(XD_TARGET))) static inline __attribute__((always_inline))
#define XD_CAT2(a, b) a##b
#define XD_CAT(a, b) XD_CAT2(a, b)

XD_FN float xd_hsum(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* NW x NX tile with compile-time sizes so the accumulators stay in registers. */
XD_FN void xd_tile_fixed(float *out, int64_t ldo, const char *w, size_t wrb, const kq_act *a, int64_t x0, int64_t nb,
                         kern_dtype dt, const int NW, const int NX) {
    const int off = kq_xoff(dt), mins = dt == KERN_Q4_1 || dt == KERN_Q5_1 || dt == KERN_Q2_K || dt == KERN_Q5_K;
    const __m256i ones = _mm256_set1_epi8(1);
    __m256 acc[KQ_TILE][KQ_TILE];
    for (int i = 0; i < NW; i++)
        for (int j = 0; j < NX; j++) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i u[KQ_TILE];
        __m256 sv[KQ_TILE], mv[KQ_TILE];
        for (int i = 0; i < NW; i++) {
            const char *row = w + (size_t)i * wrb;
            float sc[2], mn[2];
            u[i] = xu_block(row, dt, b);
            xu_scales(row, dt, b, sc, mn);
            sv[i] = _mm256_set_m128(_mm_set1_ps(sc[1]), _mm_set1_ps(sc[0]));
            mv[i] = _mm256_set_m128(_mm_set1_ps(mn[1]), _mm_set1_ps(mn[0]));
        }
        for (int j = 0; j < NX; j++) {
            int64_t o = (x0 + j) * nb + b;
            __m256i xv = _mm256_loadu_si256((const __m256i *)(a->qs + o * KERN_QBLOCK));
            __m256i xs = XD_DOT(_mm256_setzero_si256(), ones, xv);
            __m256i start = off == 16  ? _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(xs, 4))
                            : off == 4 ? _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(xs, 2))
                                       : _mm256_setzero_si256();
            __m256 xsf = _mm256_cvtepi32_ps(xs), dx = _mm256_set1_ps(a->d[o]);
            for (int i = 0; i < NW; i++) {
                __m256 f = _mm256_mul_ps(sv[i], _mm256_cvtepi32_ps(XD_DOT(start, u[i], xv)));
                if (mins) f = _mm256_fnmadd_ps(mv[i], xsf, f);
                acc[i][j] = _mm256_fmadd_ps(f, dx, acc[i][j]);
            }
        }
    }
    for (int i = 0; i < NW; i++)
        for (int j = 0; j < NX; j++) out[j * ldo + i] = xd_hsum(acc[i][j]);
}

__attribute__((target(XD_TARGET))) static void xd_tile(float *out, int64_t ldo, const void *w, size_t wrb, int nw,
                                                       const kq_act *a, int64_t x0, int nx, int64_t nb, kern_dtype dt) {
    if (nw == KQ_TILE && nx == KQ_TILE) {
        xd_tile_fixed(out, ldo, w, wrb, a, x0, nb, dt, KQ_TILE, KQ_TILE);
        return;
    }
    /* decode (nx == 1) and partial tiles: one weight row at a time, one sequential stream per thread */
    for (int i = 0; i < nw; i++)
        for (int j = 0; j < nx; j++)
            xd_tile_fixed(out + j * ldo + i, ldo, (const char *)w + (size_t)i * wrb, wrb, a, x0 + j, nb, dt, 1, 1);
}

#define XD_TILE(name, DT)                                                                                            \
    static void name(float *out, int64_t ldo, const void *w, size_t wrb, int nw, const kq_act *a, int64_t x0,     \
                     int nx, int64_t nb) {                                                                           \
        xd_tile(out, ldo, w, wrb, nw, a, x0, nx, nb, DT);                                                           \
    }
XD_TILE(xd_q4_1, KERN_Q4_1)
XD_TILE(xd_q5_0, KERN_Q5_0)
XD_TILE(xd_q5_1, KERN_Q5_1)
XD_TILE(xd_q2_K, KERN_Q2_K)
XD_TILE(xd_q3_K, KERN_Q3_K)
XD_TILE(xd_q5_K, KERN_Q5_K)

kq_tile_fn XD_CAT(kq_xtile_, XD_SUFFIX)(kern_dtype dt) {
    switch (dt) {
    case KERN_Q4_1: return xd_q4_1;
    case KERN_Q5_0: return xd_q5_0;
    case KERN_Q5_1: return xd_q5_1;
    case KERN_Q2_K: return xd_q2_K;
    case KERN_Q3_K: return xd_q3_K;
    case KERN_Q5_K: return xd_q5_K;
    default: return NULL;
    }
}
