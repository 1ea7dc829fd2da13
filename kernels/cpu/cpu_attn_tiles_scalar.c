/*
 * cpu_attn_tiles_scalar.c — the plain-C attention tiles (cpu_attn_tiles.h): the readable statement of what the
 * vector paths compute, the fallback on CPUs without AVX2, and the path selection.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu_attn_tiles.h"

static inline float exp1(float x) {
    if (x != x) return x;
    if (x < ATT_EXP_LO) return 0.f;
    float xc = x > ATT_EXP_HI ? ATT_EXP_HI : x;
    float n = nearbyintf(xc * ATT_LOG2E);
    float r = fmaf(n, -ATT_LN2_HI, xc);
    r = fmaf(n, -ATT_LN2_LO, r);
    float p = ATT_P0;
    p = fmaf(p, r, ATT_P1);
    p = fmaf(p, r, ATT_P2);
    p = fmaf(p, r, ATT_P3);
    p = fmaf(p, r, ATT_P4);
    p = fmaf(p, r, ATT_P5);
    float y = fmaf(p, r * r, r) + 1.f;
    union { uint32_t u; float f; } e = {.u = (uint32_t)((int32_t)n + 127) << 23};
    return y * e.f;
}

static void scores(float *s, const float *a, int64_t lda, int rows, const float *bt, int64_t hd) {
    for (int r = 0; r < rows; r++) {
        float *sr = s + r * ATT_BK;
        for (int c = 0; c < ATT_BK; c++) sr[c] = 0.f;
        for (int64_t d = 0; d < hd; d++) {
            float ad = a[r * lda + d];
            const float *b = bt + d * ATT_BK;
            for (int c = 0; c < ATT_BK; c++) sr[c] = fmaf(ad, b[c], sr[c]); /* one FMA chain per score, as the vector paths */
        }
    }
}

static void pv(float *o, int64_t ldo, const float *c, const float *p, int rows, int n, const float *v, int64_t ldv,
               int64_t hd) {
    for (int r = 0; r < rows; r++) {
        float *orow = o + r * ldo;
        if (c)
            for (int64_t d = 0; d < hd; d++) orow[d] *= c[r];
        for (int j = 0; j < n; j++) {
            float pj = p[r * ATT_BK + j];
            const float *vj = v + j * ldv;
            for (int64_t d = 0; d < hd; d++) orow[d] += pj * vj[d];
        }
    }
}

static float fold(float *s, int nv, float scale, float *m, float *l) {
    float mx = *m;
    for (int c = 0; c < nv; c++) {
        s[c] *= scale;
        if (s[c] > mx) mx = s[c];
    }
    if (mx == -INFINITY) { /* nothing visible yet (the accumulator is still 0) */
        memset(s, 0, ATT_BK * sizeof(float));
        return 1.f;
    }
    float corr = mx == *m ? 1.f : exp1(*m - mx), sum = 0.f;
    for (int c = 0; c < ATT_BK; c++) {
        s[c] = c < nv ? exp1(s[c] - mx) : 0.f;
        sum += s[c];
    }
    *l = *l * corr + sum;
    *m = mx;
    return corr;
}

static void p_ds(float *s, float *dp, float scale, const float *lse, const float *D, int stride, int lo, int hi) {
    for (int c = 0; c < ATT_BK; c++) {
        if (c < lo || c >= hi) {
            s[c] = dp[c] = 0.f;
            continue;
        }
        float p = exp1(scale * s[c] - lse[c * stride]);
        s[c] = p;
        dp[c] = scale * p * (dp[c] - D[c * stride]);
    }
}

static void vexp(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = exp1(x[i]);
}

const att_tiles *att_tiles_scalar(void) {
    static const att_tiles t = {scores, pv, fold, p_ds, vexp};
    return &t;
}

/* ---- path selection */
static atomic_int g_path = -1; /* kern_apath in force; -1 until first asked */

static kern_apath best_path(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (att_tiles_avx512() && __builtin_cpu_supports("avx512f")) return KERN_APATH_AVX512;
    if (att_tiles_avx2() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return KERN_APATH_AVX2;
#endif
    return KERN_APATH_SCALAR;
}

kern_apath kern_cpu_attn_path(kern_apath want) {
    kern_apath best = best_path(), p = want > best ? best : want;
    atomic_store(&g_path, (int)p);
    return p;
}

const char *kern_apath_name(kern_apath p) {
    switch (p) {
    case KERN_APATH_SCALAR: return "scalar";
    case KERN_APATH_AVX2: return "avx2";
    case KERN_APATH_AVX512: return "avx512";
    case KERN_APATH_BEST: return "best";
    }
    return "?";
}

const att_tiles *att_tiles_get(void) {
    int p = atomic_load(&g_path);
    if (p < 0) p = (int)kern_cpu_attn_path(KERN_APATH_BEST);
    if (p == KERN_APATH_AVX512) return att_tiles_avx512();
    if (p == KERN_APATH_AVX2) return att_tiles_avx2();
    return att_tiles_scalar();
}

void kern_cpu_attn_exp(float *y, const float *x, int64_t n) { att_tiles_get()->vexp(y, x, n); }
