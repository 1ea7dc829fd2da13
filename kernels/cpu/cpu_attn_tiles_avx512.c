/*
 * cpu_attn_tiles_avx512.c — the attention tiles (cpu_attn_tiles.h) on AVX-512F.
 *   scores: a 6 x 64 tile in 24 zmm accumulators; per d, 4 loads of the packed operand and 6 broadcasts of a
 *           (the shape of cpu_gemm_f32.c's microkernel), k = head_dim.
 *   pv:     a 6 x 64 slice of o in 24 zmm (head_dim in slices of 64, the last one masked); per key, 4 loads of v's
 *           row and 6 broadcasts of p.
 *   fold, p_ds, vexp: 16 lanes at a time with the exp of the header.
 * Compiled for AVX-512F by function attributes and taken at run time (kern_cpu_attn_path).
 */
#include <math.h>
#include <string.h>

#include "cpu_attn_tiles.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define Z __attribute__((target("avx512f")))
#define ZI Z static inline __attribute__((always_inline))
#define MR 6

ZI __m512 exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(ATT_EXP_LO);
    __m512 xc = _mm512_min_ps(_mm512_set1_ps(ATT_EXP_HI), _mm512_max_ps(lo, x)); /* NaN stays (second operand) */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(ATT_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ATT_LN2_HI), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ATT_LN2_LO), r);
    __m512 p = _mm512_set1_ps(ATT_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATT_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATT_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATT_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATT_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATT_P5));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    y = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), y, _mm512_setzero_ps());
}

/* Lanes [lo, hi) of the 16 starting at column 16 q (lo, hi in 0..64). */
static inline __mmask16 lanes(int lo, int hi, int q) {
    uint64_t h = hi >= 64 ? ~0ull : (1ull << hi) - 1, l = lo >= 64 ? ~0ull : (1ull << lo) - 1;
    return (__mmask16)((h & ~l) >> (16 * q));
}

ZI void scores_tile(int mr, float *s, const float *a, int64_t lda, const float *bt, int64_t hd) {
    __m512 acc[MR][4];
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < 4; q++) acc[r][q] = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; d++) {
        const float *b = bt + d * ATT_BK;
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32),
               b3 = _mm512_loadu_ps(b + 48);
        for (int r = 0; r < mr; r++) {
            __m512 av = _mm512_set1_ps(a[r * lda + d]);
            acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(av, b2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(av, b3, acc[r][3]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < 4; q++) _mm512_storeu_ps(s + r * ATT_BK + 16 * q, acc[r][q]);
}

Z static void scores(float *s, const float *a, int64_t lda, int rows, const float *bt, int64_t hd) {
    int r = 0;
    for (; r + MR <= rows; r += MR) scores_tile(MR, s + r * ATT_BK, a + r * lda, lda, bt, hd);
    switch (rows - r) {
    case 5: scores_tile(5, s + r * ATT_BK, a + r * lda, lda, bt, hd); break;
    case 4: scores_tile(4, s + r * ATT_BK, a + r * lda, lda, bt, hd); break;
    case 3: scores_tile(3, s + r * ATT_BK, a + r * lda, lda, bt, hd); break;
    case 2: scores_tile(2, s + r * ATT_BK, a + r * lda, lda, bt, hd); break;
    case 1: scores_tile(1, s + r * ATT_BK, a + r * lda, lda, bt, hd); break;
    default: break;
    }
}

/* o rows [0, mr), columns d0 + [0, 64) where the four 16-lane masks m say. */
ZI void pv_tile(int mr, float *o, int64_t ldo, const float *c, const float *p, int n, const float *v, int64_t ldv,
                __mmask16 m0, __mmask16 m1, __mmask16 m2, __mmask16 m3) {
    const __mmask16 m[4] = {m0, m1, m2, m3};
    __m512 acc[MR][4];
    for (int r = 0; r < mr; r++) {
        __m512 cr = _mm512_set1_ps(c ? c[r] : 1.f);
        for (int q = 0; q < 4; q++) {
            __m512 x = _mm512_maskz_loadu_ps(m[q], o + r * ldo + 16 * q);
            acc[r][q] = c ? _mm512_mul_ps(cr, x) : x;
        }
    }
    for (int j = 0; j < n; j++) {
        const float *vj = v + j * ldv;
        __m512 v0 = _mm512_maskz_loadu_ps(m0, vj), v1 = _mm512_maskz_loadu_ps(m1, vj + 16),
               v2 = _mm512_maskz_loadu_ps(m2, vj + 32), v3 = _mm512_maskz_loadu_ps(m3, vj + 48);
        for (int r = 0; r < mr; r++) {
            __m512 pr = _mm512_set1_ps(p[r * ATT_BK + j]);
            acc[r][0] = _mm512_fmadd_ps(pr, v0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(pr, v1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(pr, v2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(pr, v3, acc[r][3]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < 4; q++) _mm512_mask_storeu_ps(o + r * ldo + 16 * q, m[q], acc[r][q]);
}

Z static void pv(float *o, int64_t ldo, const float *c, const float *p, int rows, int n, const float *v, int64_t ldv,
                 int64_t hd) {
    for (int64_t d0 = 0; d0 < hd; d0 += 64) {
        int w = hd - d0 < 64 ? (int)(hd - d0) : 64;
        __mmask16 m0 = lanes(0, w, 0), m1 = lanes(0, w, 1), m2 = lanes(0, w, 2), m3 = lanes(0, w, 3);
        int r = 0;
#define PV(mr) pv_tile(mr, o + r * ldo + d0, ldo, c ? c + r : NULL, p + r * ATT_BK, n, v + d0, ldv, m0, m1, m2, m3)
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

Z static float fold(float *s, int nv, float scale, float *m, float *l) {
    __m512 t[4], mx = _mm512_set1_ps(*m), vs = _mm512_set1_ps(scale);
    __mmask16 vm[4];
    for (int q = 0; q < 4; q++) {
        vm[q] = lanes(0, nv, q);
        t[q] = _mm512_mul_ps(_mm512_loadu_ps(s + 16 * q), vs);
        mx = _mm512_mask_max_ps(mx, vm[q], mx, t[q]);
    }
    float m_new = _mm512_reduce_max_ps(mx);
    if (m_new == -INFINITY) { /* nothing visible yet (the accumulator is still 0) */
        memset(s, 0, ATT_BK * sizeof(float));
        return 1.f;
    }
    float corr = m_new == *m ? 1.f : _mm512_cvtss_f32(exp16(_mm512_set1_ps(*m - m_new)));
    __m512 mn = _mm512_set1_ps(m_new), sum = _mm512_setzero_ps();
    for (int q = 0; q < 4; q++) {
        __m512 e = _mm512_maskz_mov_ps(vm[q], exp16(_mm512_sub_ps(t[q], mn)));
        _mm512_storeu_ps(s + 16 * q, e);
        sum = _mm512_add_ps(sum, e);
    }
    *l = *l * corr + _mm512_reduce_add_ps(sum);
    *m = m_new;
    return corr;
}

Z static void p_ds(float *s, float *dp, float scale, const float *lse, const float *D, int stride, int lo, int hi) {
    __m512 vs = _mm512_set1_ps(scale);
    for (int q = 0; q < 4; q++) {
        __mmask16 vm = lanes(lo, hi, q);
        __m512 L = stride ? _mm512_loadu_ps(lse + 16 * q) : _mm512_set1_ps(lse[0]);
        __m512 Dv = stride ? _mm512_loadu_ps(D + 16 * q) : _mm512_set1_ps(D[0]);
        __m512 p = _mm512_maskz_mov_ps(vm, exp16(_mm512_fmsub_ps(vs, _mm512_loadu_ps(s + 16 * q), L)));
        __m512 ds = _mm512_mul_ps(_mm512_mul_ps(vs, p), _mm512_sub_ps(_mm512_loadu_ps(dp + 16 * q), Dv));
        _mm512_storeu_ps(s + 16 * q, p);
        _mm512_storeu_ps(dp + 16 * q, _mm512_maskz_mov_ps(vm, ds));
    }
}

Z static void vexp(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

const att_tiles *att_tiles_avx512(void) {
    static const att_tiles t = {scores, pv, fold, p_ds, vexp};
    return &t;
}
#else
const att_tiles *att_tiles_avx512(void) { return NULL; }
#endif
