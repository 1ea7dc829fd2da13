/*
 * cpu_attn_tiles_avx2.c — the attention tiles (cpu_attn_tiles.h) on AVX2 + FMA, for CPUs without AVX-512.
 * With 16 ymm registers the tiles are 6 rows x 16 columns (12 accumulators): scores sweeps the 64 columns in four
 * such strips, pv sweeps head_dim in strips of 16 (the last one masked). fold, p_ds, vexp: 8 lanes at a time.
 * Compiled for AVX2/FMA by function attributes and taken at run time (kern_cpu_attn_path).
 */
#include <math.h>
#include <string.h>

#include "cpu_attn_tiles.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define Y __attribute__((target("avx2,fma")))
#define YI Y static inline __attribute__((always_inline))
#define MR 6

YI __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(ATT_EXP_LO);
    __m256 xc = _mm256_min_ps(_mm256_set1_ps(ATT_EXP_HI), _mm256_max_ps(lo, x)); /* NaN stays (second operand) */
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(ATT_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(ATT_LN2_HI), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(ATT_LN2_LO), r);
    __m256 p = _mm256_set1_ps(ATT_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATT_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATT_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATT_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATT_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATT_P5));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), y); /* below the range: 0 */
}

/* All-ones lanes where lo <= base + i < hi, i < 8. */
YI __m256i lanes8(int lo, int hi, int base) {
    __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(base), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(lo - 1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), idx));
}

YI float hmax8(__m256 v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

YI float hsum8(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* s rows [0, mr), columns [c0, c0 + 16). */
YI void scores_tile(int mr, float *s, const float *a, int64_t lda, const float *bt, int64_t hd, int c0) {
    __m256 acc[MR][2];
    for (int r = 0; r < mr; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t d = 0; d < hd; d++) {
        const float *b = bt + d * ATT_BK + c0;
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        for (int r = 0; r < mr; r++) {
            __m256 av = _mm256_broadcast_ss(a + r * lda + d);
            acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
        }
    }
    for (int r = 0; r < mr; r++) {
        _mm256_storeu_ps(s + r * ATT_BK + c0, acc[r][0]);
        _mm256_storeu_ps(s + r * ATT_BK + c0 + 8, acc[r][1]);
    }
}

Y static void scores(float *s, const float *a, int64_t lda, int rows, const float *bt, int64_t hd) {
    for (int c0 = 0; c0 < ATT_BK; c0 += 16) {
        int r = 0;
#define SC(mr) scores_tile(mr, s + r * ATT_BK, a + r * lda, lda, bt, hd, c0)
        for (; r + MR <= rows; r += MR) SC(MR);
        switch (rows - r) {
        case 5: SC(5); break;
        case 4: SC(4); break;
        case 3: SC(3); break;
        case 2: SC(2); break;
        case 1: SC(1); break;
        default: break;
        }
#undef SC
    }
}

/* o rows [0, mr), 16 columns where m0, m1 say. */
YI void pv_tile(int mr, float *o, int64_t ldo, const float *c, const float *p, int n, const float *v, int64_t ldv,
                __m256i m0, __m256i m1) {
    __m256 acc[MR][2];
    for (int r = 0; r < mr; r++) {
        __m256 cr = _mm256_set1_ps(c ? c[r] : 1.f);
        acc[r][0] = _mm256_mul_ps(cr, _mm256_maskload_ps(o + r * ldo, m0));
        acc[r][1] = _mm256_mul_ps(cr, _mm256_maskload_ps(o + r * ldo + 8, m1));
    }
    for (int j = 0; j < n; j++) {
        const float *vj = v + j * ldv;
        __m256 v0 = _mm256_maskload_ps(vj, m0), v1 = _mm256_maskload_ps(vj + 8, m1);
        for (int r = 0; r < mr; r++) {
            __m256 pr = _mm256_broadcast_ss(p + r * ATT_BK + j);
            acc[r][0] = _mm256_fmadd_ps(pr, v0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(pr, v1, acc[r][1]);
        }
    }
    for (int r = 0; r < mr; r++) {
        _mm256_maskstore_ps(o + r * ldo, m0, acc[r][0]);
        _mm256_maskstore_ps(o + r * ldo + 8, m1, acc[r][1]);
    }
}

Y static void pv(float *o, int64_t ldo, const float *c, const float *p, int rows, int n, const float *v, int64_t ldv,
                 int64_t hd) {
    for (int64_t d0 = 0; d0 < hd; d0 += 16) {
        int w = hd - d0 < 16 ? (int)(hd - d0) : 16;
        __m256i m0 = lanes8(0, w, 0), m1 = lanes8(0, w, 8);
        int r = 0;
#define PV(mr) pv_tile(mr, o + r * ldo + d0, ldo, c ? c + r : NULL, p + r * ATT_BK, n, v + d0, ldv, m0, m1)
        for (; r + MR <= rows; r += MR) PV(MR);
        switch (rows - r) {
        case 5: PV(5); break;
        case 4: PV(4); break;
        case 3: PV(3); break;
        case 2: PV(2); break;
        case 1: PV(1); break;
        default: break;
        }
#undef PV
    }
}

Y static float fold(float *s, int nv, float scale, float *m, float *l) {
    __m256 t[8], vm[8], mx = _mm256_set1_ps(*m), vs = _mm256_set1_ps(scale);
    for (int q = 0; q < 8; q++) {
        vm[q] = _mm256_castsi256_ps(lanes8(0, nv, 8 * q));
        t[q] = _mm256_mul_ps(_mm256_loadu_ps(s + 8 * q), vs);
        mx = _mm256_blendv_ps(mx, _mm256_max_ps(mx, t[q]), vm[q]);
    }
    float m_new = hmax8(mx);
    if (m_new == -INFINITY) { /* nothing visible yet (the accumulator is still 0) */
        memset(s, 0, ATT_BK * sizeof(float));
        return 1.f;
    }
    float corr = m_new == *m ? 1.f : _mm256_cvtss_f32(exp8(_mm256_set1_ps(*m - m_new)));
    __m256 mn = _mm256_set1_ps(m_new), sum = _mm256_setzero_ps();
    for (int q = 0; q < 8; q++) {
        __m256 e = _mm256_and_ps(vm[q], exp8(_mm256_sub_ps(t[q], mn)));
        _mm256_storeu_ps(s + 8 * q, e);
        sum = _mm256_add_ps(sum, e);
    }
    *l = *l * corr + hsum8(sum);
    *m = m_new;
    return corr;
}

Y static void p_ds(float *s, float *dp, float scale, const float *lse, const float *D, int stride, int lo, int hi) {
    __m256 vs = _mm256_set1_ps(scale);
    for (int q = 0; q < 8; q++) {
        __m256 vm = _mm256_castsi256_ps(lanes8(lo, hi, 8 * q));
        __m256 L = stride ? _mm256_loadu_ps(lse + 8 * q) : _mm256_set1_ps(lse[0]);
        __m256 Dv = stride ? _mm256_loadu_ps(D + 8 * q) : _mm256_set1_ps(D[0]);
        __m256 p = _mm256_and_ps(vm, exp8(_mm256_fmsub_ps(vs, _mm256_loadu_ps(s + 8 * q), L)));
        __m256 ds = _mm256_mul_ps(_mm256_mul_ps(vs, p), _mm256_sub_ps(_mm256_loadu_ps(dp + 8 * q), Dv));
        _mm256_storeu_ps(s + 8 * q, p);
        _mm256_storeu_ps(dp + 8 * q, _mm256_and_ps(vm, ds));
    }
}

Y static void vexp(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        __m256i m = lanes8(0, (int)(n - i), 0);
        _mm256_maskstore_ps(y + i, m, exp8(_mm256_maskload_ps(x + i, m)));
    }
}

const att_tiles *att_tiles_avx2(void) {
    static const att_tiles t = {scores, pv, fold, p_ds, vexp};
    return &t;
}
#else
const att_tiles *att_tiles_avx2(void) { return NULL; }
#endif
