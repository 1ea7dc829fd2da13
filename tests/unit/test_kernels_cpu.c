/*
 * test_kernels_cpu.c — every CPU op against a naive double-precision reference written here, over shapes that
 * hit each code path: GEMV (m <= 8, with the 4-row m==1 path and its tail), sgemm with panel widening
 * (m > 8), odd sizes (k not a multiple of 16, head_dim 100 and 12), GQA, causal offsets, all weight dtypes.
 * fp32 weights with m > 8 run twice: mnemo's AVX-512 FMA tiles and, with them forbidden, OpenBLAS (both 1e-5).
 * bf16 weights with m > 8 run twice where the CPU has AVX512_BF16: in a FAST context on the vdpbf16ps tiles
 * (activations rounded to bf16; bound 2^-8 * sum|x w| per element), in an EXACT one on the widening sgemm (1e-6).
 * Also guard values around every output catch out-of-bounds writes.
 * Backward twins (second half): each against central finite differences of an fp64 forward and against an fp64
 * reference backward; cross_entropy against a direct fp64 computation; adamw against an fp64 torch-semantics step.
 */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "kernels_cpu_paths.h"
#include "test_util.h"

#define GUARD 8
#define GUARD_VAL 12345.0f

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 24))) * 2.f - 1.f;
}

/* A float buffer with GUARD sentinels before and after. */
static float *guarded(size_t n) {
    float *p = malloc((n + 2 * GUARD) * sizeof(float));
    for (size_t i = 0; i < n + 2 * GUARD; i++) p[i] = GUARD_VAL;
    return p + GUARD;
}
static bool guards_ok(const float *p, size_t n) {
    for (int i = 1; i <= GUARD; i++)
        if (p[-i] != GUARD_VAL || p[n + (size_t)i - 1] != GUARD_VAL) return false;
    return true;
}
static void guarded_free(float *p) { free(p - GUARD); }

/* Random weights stored in dt, plus their exact fp32 values. */
static void *make_weights(kern_dtype dt, size_t n, float *exact) {
    void *w = malloc(n * kern_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        float v = frand();
        if (dt == KERN_F32) { ((float *)w)[i] = v; exact[i] = v; }
        else if (dt == KERN_BF16) { uint16_t h = kern_f32_to_bf16(v); ((uint16_t *)w)[i] = h; exact[i] = kern_bf16_to_f32(h); }
        else { uint16_t h = kern_f32_to_f16(v); ((uint16_t *)w)[i] = h; exact[i] = kern_f16_to_f32(h); }
    }
    return w;
}

static double rel_err(const float *got, const double *want, size_t n) {
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = got[i] - want[i];
        if (isnan(got[i])) return INFINITY;
        num += d * d;
        den += want[i] * want[i];
    }
    return sqrt(num / den);
}

/* f32_tiles 1: fp32 weights with m > 8 take mnemo's AVX-512 FMA tiles where the CPU has them; 0: OpenBLAS. */
static void test_matmul_paths(const kern_backend *be, kern_ctx *kc, int f32_tiles) {
    kern_cpu_set_gemm(kc, KERN_CPU_GEMM_EXACT); /* bf16 dot-product tiles (FAST) are checked by test_matmul_bf16dot */
    kern_cpu_f32gemm_allow(f32_tiles);
    const int64_t ms[] = {1, 2, 3, 8, 9, 33}, ns[] = {1, 5, 64, 131}, ks[] = {7, 16, 100, 257, 1100};
    for (int dt = 0; dt < 3; dt++)
        for (size_t a = 0; a < 6; a++)
            for (size_t b = 0; b < 4; b++)
                for (size_t c = 0; c < 5; c++)
                    for (int beta = 0; beta <= 1; beta++) {
                        int64_t m = ms[a], n = ns[b], k = ks[c];
                        float *x = malloc((size_t)(m * k) * sizeof(float)), *we = malloc((size_t)(n * k) * sizeof(float));
                        for (int64_t i = 0; i < m * k; i++) x[i] = frand();
                        void *w = make_weights((kern_dtype)dt, (size_t)(n * k), we);
                        float *y = guarded((size_t)(m * n));
                        double *ref = malloc((size_t)(m * n) * sizeof(double)), num = 0, den = 1e-30;
                        double *mag = malloc((size_t)(m * n) * sizeof(double));
                        for (int64_t i = 0; i < m * n; i++) y[i] = beta ? frand() : NAN; /* beta 0 must ignore y */
                        for (int64_t i = 0; i < m; i++)
                            for (int64_t j = 0; j < n; j++) {
                                double s = beta ? y[i * n + j] : 0.0, t = fabs(s);
                                for (int64_t q = 0; q < k; q++) {
                                    s += (double)x[i * k + q] * we[j * k + q];
                                    t += fabs((double)x[i * k + q] * we[j * k + q]);
                                }
                                ref[i * n + j] = s;
                                mag[i * n + j] = t;
                            }
                        int rc = be->matmul(kc, y, x, w, (kern_dtype)dt, m, n, k, (float)beta);
                        /* error over the size of the terms summed (sum |x w|), so a result that cancels to near
                         * zero (n = 1) does not read as a large relative error */
                        for (int64_t i = 0; i < m * n; i++) {
                            double d = isnan(y[i]) ? INFINITY : y[i] - ref[i];
                            num += d * d;
                            den += mag[i] * mag[i];
                        }
                        double e = sqrt(num / den);
                        CHECK(rc == KERN_OK && e < 1e-6 && guards_ok(y, (size_t)(m * n)),
                              "matmul %s m=%ld n=%ld k=%ld beta=%d f32 tiles %d: rc %d err %.2e of sum|x w|",
                              kern_dtype_name((kern_dtype)dt), (long)m, (long)n, (long)k, beta, f32_tiles, rc, e);
                        free(x); free(we); free(w); free(ref); free(mag); guarded_free(y);
                    }
    float y[4];
    CHECK(be->matmul(kc, y, y, y, KERN_F32, 1, 1, 0, 0.f) == KERN_ESHAPE, "matmul k=0 must be a shape error");
    CHECK(be->matmul(kc, y, y, y, KERN_F32, 1, 1, 1, 0.5f) == KERN_ESHAPE, "matmul beta 0.5 must be refused");
    kern_cpu_set_gemm(kc, KERN_CPU_GEMM_FAST);
    kern_cpu_f32gemm_allow(1);
}

static void test_matmul(const kern_backend *be, kern_ctx *kc) {
    if (!kern_cpu_f32gemm_available()) printf("note: no AVX-512 on this CPU: fp32 FMA tiles not tested (OpenBLAS is)\n");
    test_matmul_paths(be, kc, 1);
    test_matmul_paths(be, kc, 0);
}

/* bf16 weights, m > 8, on the AVX512_BF16 tiles: every element within 2^-8 * sum_k |x w| (+ 1e-6 |y|) of the fp64
 * product (the activations' bf16 rounding is <= 2^-9 relative), and the rounding must be visible somewhere (the
 * path really ran). Shapes: row tails 1..5 of the 6-row tile, column tails of the 64-column panel, odd k, two K
 * blocks (k > 512). Skipped, with a note, where the CPU lacks AVX512_BF16. */
static void test_matmul_bf16dot(const kern_backend *be, kern_ctx *kc) {
    kern_cpu_set_gemm(kc, KERN_CPU_GEMM_FAST);
    if (!kern_cpu_bf16dot_available()) {
        printf("note: no AVX512_BF16 on this CPU: bf16 dot-product tiles not tested (the fallback is)\n");
        return;
    }
    const int64_t ms[] = {9, 13, 34, 71}, ns[] = {1, 5, 64, 131}, ks[] = {7, 100, 257, 1100};
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t c = 0; c < 4; c++)
                for (int beta = 0; beta <= 1; beta++) {
                    int64_t m = ms[a], n = ns[b], k = ks[c];
                    float *x = malloc((size_t)(m * k) * sizeof(float)), *we = malloc((size_t)(n * k) * sizeof(float));
                    for (int64_t i = 0; i < m * k; i++) x[i] = frand();
                    void *w = make_weights(KERN_BF16, (size_t)(n * k), we);
                    float *y = guarded((size_t)(m * n));
                    double *ref = malloc((size_t)(m * n) * sizeof(double)), *mag = malloc((size_t)(m * n) * sizeof(double));
                    for (int64_t i = 0; i < m * n; i++) y[i] = beta ? frand() : NAN;
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++) {
                            double s = beta ? y[i * n + j] : 0.0, t = 0;
                            for (int64_t q = 0; q < k; q++) {
                                double p = (double)x[i * k + q] * we[j * k + q];
                                s += p;
                                t += fabs(p);
                            }
                            ref[i * n + j] = s;
                            mag[i * n + j] = t / 256 + 1e-6 * fabs(s);
                        }
                    int rc = be->matmul(kc, y, x, w, KERN_BF16, m, n, k, (float)beta);
                    double worst = 0, diff = 0; /* worst: error / bound; diff: largest error (must be > 0) */
                    for (int64_t i = 0; i < m * n; i++) {
                        double e = fabs(y[i] - ref[i]);
                        if (isnan(y[i])) e = INFINITY;
                        worst = fmax(worst, e / mag[i]);
                        diff = fmax(diff, e);
                    }
                    CHECK(rc == KERN_OK && worst <= 1.0 && guards_ok(y, (size_t)(m * n)),
                          "matmul bf16dot m=%ld n=%ld k=%ld beta=%d: rc %d, error %.2f of the bound", (long)m,
                          (long)n, (long)k, beta, rc, worst);
                    CHECK(k < 16 || diff > 1e-7, "matmul bf16dot m=%ld n=%ld k=%ld: no rounding seen, path not taken?",
                          (long)m, (long)n, (long)k);
                    free(x); free(we); free(w); free(ref); free(mag); guarded_free(y);
                }
}

static void test_rmsnorm_embed(const kern_backend *be, kern_ctx *kc) {
    for (int dt = 0; dt < 3; dt++) {
        int64_t n = 5, d = 100;
        float *x = malloc((size_t)(n * d) * sizeof(float)), *we = malloc((size_t)d * sizeof(float));
        for (int64_t i = 0; i < n * d; i++) x[i] = frand() * 3.f;
        void *w = make_weights((kern_dtype)dt, (size_t)d, we);
        float *y = guarded((size_t)(n * d)), rstd[5];
        double *ref = malloc((size_t)(n * d) * sizeof(double));
        for (int64_t i = 0; i < n; i++) {
            double ss = 0;
            for (int64_t j = 0; j < d; j++) ss += (double)x[i * d + j] * x[i * d + j];
            double r = 1.0 / sqrt(ss / d + 1e-6);
            for (int64_t j = 0; j < d; j++) ref[i * d + j] = x[i * d + j] * r * we[j];
        }
        int rc = be->rmsnorm(kc, y, rstd, x, w, (kern_dtype)dt, n, d, 1e-6f);
        double e = rel_err(y, ref, (size_t)(n * d));
        CHECK(rc == KERN_OK && e < 1e-6 && guards_ok(y, (size_t)(n * d)), "rmsnorm %s: rel err %.2e",
              kern_dtype_name((kern_dtype)dt), e);
        /* embedding: gather rows 3, 0, 4 of a [5, 100] table */
        int32_t ids[3] = {3, 0, 4};
        float *out = guarded(300);
        rc = be->embed(kc, out, w, (kern_dtype)dt, 1, d, ids, 1); /* vocab 1: id 3 out of range */
        CHECK(rc == KERN_ERANGE, "embed must refuse an id >= vocab");
        float *tbl_e = malloc(500 * sizeof(float));
        void *tbl = make_weights((kern_dtype)dt, 500, tbl_e);
        rc = be->embed(kc, out, tbl, (kern_dtype)dt, 5, d, ids, 3);
        bool same = rc == KERN_OK;
        for (int i = 0; i < 3 && same; i++) same = !memcmp(out + i * d, tbl_e + ids[i] * d, (size_t)d * sizeof(float));
        CHECK(same && guards_ok(out, 300), "embed %s gathers exact rows", kern_dtype_name((kern_dtype)dt));
        free(x); free(we); free(w); free(ref); guarded_free(y); guarded_free(out); free(tbl_e); free(tbl);
    }
}

static void test_rope(const kern_backend *be, kern_ctx *kc) {
    const int64_t hds[] = {12, 100, 128};
    for (int s = 0; s < 3; s++) {
        int64_t n = 7, heads = 3, hd = hds[s], half = hd / 2;
        float theta = s == 1 ? 500000.f : 10000.f, scale = s == 2 ? 2.f : 1.f;
        int32_t pos[7] = {0, 1, 2, 17, 100, 1000, 4095};
        float *x = guarded((size_t)(n * heads * hd));
        double *ref = malloc((size_t)(n * heads * hd) * sizeof(double));
        for (int64_t i = 0; i < n * heads * hd; i++) x[i] = frand();
        for (int64_t i = 0; i < n; i++)
            for (int64_t h = 0; h < heads; h++)
                for (int64_t j = 0; j < half; j++) {
                    double ang = pos[i] / scale * pow(theta, -2.0 * j / hd);
                    const float *v = x + (i * heads + h) * hd;
                    double a = v[j], b = v[j + half];
                    ref[(i * heads + h) * hd + j] = a * cos(ang) - b * sin(ang);
                    ref[(i * heads + h) * hd + j + half] = b * cos(ang) + a * sin(ang);
                }
        int rc = be->rope(kc, x, n, heads, hd, pos, theta, scale);
        double e = rel_err(x, ref, (size_t)(n * heads * hd));
        /* fp32 angles at position 4095 carry ~1e-4 rad of rounding, as HF's fp32 RoPE does */
        CHECK(rc == KERN_OK && e < 2e-4 && guards_ok(x, (size_t)(n * heads * hd)), "rope hd=%ld: rel err %.2e",
              (long)hd, e);
        free(ref); guarded_free(x);
    }
}

static void test_attention(const kern_backend *be, kern_ctx *kc) {
    struct { int64_t nq, nkv, q0, hq, hkv, hd; } cases[] = {
        {1, 1, 0, 4, 4, 16}, {5, 5, 0, 8, 2, 12}, {1, 37, 36, 32, 32, 100}, {3, 20, 17, 6, 3, 64}, {17, 17, 0, 4, 1, 33},
        /* decode with long caches: key ranges split over the threads, GQA groups of 3 and 8 */
        {1, 700, 699, 9, 3, 64}, {2, 1500, 1498, 32, 4, 64}, {3, 260, 257, 8, 1, 100},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t nq = cases[c].nq, nkv = cases[c].nkv, q0 = cases[c].q0, hq = cases[c].hq, hkv = cases[c].hkv,
                hd = cases[c].hd;
        float *q = malloc((size_t)(nq * hq * hd) * 4), *k = malloc((size_t)(nkv * hkv * hd) * 4),
              *v = malloc((size_t)(nkv * hkv * hd) * 4), *out = guarded((size_t)(nq * hq * hd));
        double *ref = calloc((size_t)(nq * hq * hd), sizeof(double)), *p = malloc((size_t)nkv * sizeof(double));
        for (int64_t i = 0; i < nq * hq * hd; i++) q[i] = frand() * 2.f;
        for (int64_t i = 0; i < nkv * hkv * hd; i++) { k[i] = frand() * 2.f; v[i] = frand(); }
        float scale = 1.f / sqrtf((float)hd);
        for (int64_t i = 0; i < nq; i++)
            for (int64_t h = 0; h < hq; h++) {
                int64_t g = h / (hq / hkv), lim = q0 + i + 1;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < lim; j++) {
                    double s = 0;
                    for (int64_t d = 0; d < hd; d++) s += (double)q[(i * hq + h) * hd + d] * k[(j * hkv + g) * hd + d];
                    p[j] = s * scale;
                    if (p[j] > mx) mx = p[j];
                }
                for (int64_t j = 0; j < lim; j++) { p[j] = exp(p[j] - mx); sum += p[j]; }
                for (int64_t j = 0; j < lim; j++)
                    for (int64_t d = 0; d < hd; d++) ref[(i * hq + h) * hd + d] += p[j] / sum * v[(j * hkv + g) * hd + d];
            }
        int rc = be->attention(kc, out, NULL, q, k, v, nq, nkv, q0, hq, hkv, hd, scale);
        double e = rel_err(out, ref, (size_t)(nq * hq * hd));
        CHECK(rc == KERN_OK && e < 1e-5 && guards_ok(out, (size_t)(nq * hq * hd)),
              "attention case %zu (nq %ld nkv %ld hq %ld hkv %ld hd %ld): rel err %.2e", c, (long)nq, (long)nkv, (long)hq,
              (long)hkv, (long)hd, e);
        free(q); free(k); free(v); free(ref); free(p); guarded_free(out);
    }
    float b[4];
    CHECK(be->attention(kc, b, NULL, b, b, b, 2, 1, 0, 4, 4, 1, 1.f) == KERN_ESHAPE, "attention: queries past the cache");
    CHECK(be->attention(kc, b, NULL, b, b, b, 1, 1, 0, 3, 2, 1, 1.f) == KERN_ESHAPE, "attention: hq not a multiple of hkv");
}

/* attention_mem against a double-precision oracle: memory rows (stored in dt, widened exactly) join the causal
 * local keys in one softmax; dense = every row, selected = the listed ids (-1 skipped, duplicates counted). */
static void test_attention_mem(const kern_backend *be, kern_ctx *kc) {
    struct { int64_t nq, nkv, q0, hq, hkv, hd, n_mem, n_sel; kern_dtype dt; } cases[] = {
        {1, 1, 0, 4, 4, 16, 0, 0, KERN_BF16},       {5, 9, 4, 8, 2, 12, 300, 0, KERN_BF16},
        {1, 37, 36, 4, 4, 100, 1000, 0, KERN_F16},  {20, 20, 0, 4, 2, 25, 37, 0, KERN_F32},
        {3, 20, 17, 6, 3, 64, 200, 4, KERN_BF16},   {17, 17, 0, 4, 1, 33, 50, 128, KERN_F32},
        {2, 2, 0, 2, 2, 16, 5, 7, KERN_F16},
        {70, 80, 10, 4, 2, 64, 130, 0, KERN_BF16},  {66, 66, 0, 2, 1, 100, 90, 70, KERN_F16}, /* tiles, 64-edges */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t nq = cases[c].nq, nkv = cases[c].nkv, q0 = cases[c].q0, hq = cases[c].hq, hkv = cases[c].hkv,
                hd = cases[c].hd, nm = cases[c].n_mem, ns = cases[c].n_sel;
        kern_dtype dt = cases[c].dt;
        float *q = malloc((size_t)(nq * hq * hd) * 4), *k = malloc((size_t)(nkv * hkv * hd) * 4),
              *v = malloc((size_t)(nkv * hkv * hd) * 4), *out = guarded((size_t)(nq * hq * hd));
        float *mkx = malloc((size_t)(hkv * nm * hd + 1) * 4), *mvx = malloc((size_t)(hkv * nm * hd + 1) * 4);
        const void *mk[8], *mv[8];
        void *mkb = make_weights(dt, (size_t)(hkv * nm * hd), mkx), *mvb = make_weights(dt, (size_t)(hkv * nm * hd), mvx);
        size_t es = kern_dtype_size(dt);
        for (int64_t g = 0; g < hkv; g++) {
            mk[g] = (const char *)mkb + (size_t)(g * nm * hd) * es;
            mv[g] = (const char *)mvb + (size_t)(g * nm * hd) * es;
        }
        int64_t *sel = ns ? malloc((size_t)(nq * hq * ns) * sizeof(int64_t)) : NULL;
        for (int64_t i = 0; ns && i < nq * hq * ns; i++) {
            uint64_t r = (uint64_t)((frand() + 1.f) * 1e6f);
            sel[i] = r % 5 == 0 ? -1 : (int64_t)(r % (uint64_t)nm);
        }
        double *ref = calloc((size_t)(nq * hq * hd), sizeof(double));
        double *p = malloc((size_t)(nkv + nm + ns + 1) * sizeof(double));
        const float **vrow = malloc((size_t)(nkv + nm + ns + 1) * sizeof *vrow);
        for (int64_t i = 0; i < nq * hq * hd; i++) q[i] = frand() * 2.f;
        for (int64_t i = 0; i < nkv * hkv * hd; i++) { k[i] = frand() * 2.f; v[i] = frand(); }
        float scale = 1.f / sqrtf((float)hd);
        for (int64_t i = 0; i < nq; i++)
            for (int64_t h = 0; h < hq; h++) {
                int64_t g = h / (hq / hkv), n = 0;
                const float *qv = q + (i * hq + h) * hd;
                double mx = -INFINITY, sum = 0;
#define ADD_ROW(krow, vr)                                                                                       \
    do {                                                                                                        \
        double s_ = 0;                                                                                          \
        for (int64_t d = 0; d < hd; d++) s_ += (double)qv[d] * (krow)[d];                                       \
        p[n] = s_ * scale; vrow[n] = (vr); if (p[n] > mx) mx = p[n]; n++;                                       \
    } while (0)
                for (int64_t j = 0; j <= q0 + i; j++) ADD_ROW(k + (j * hkv + g) * hd, v + (j * hkv + g) * hd);
                for (int64_t j = 0; j < (ns ? ns : nm); j++) {
                    int64_t id = ns ? sel[(i * hq + h) * ns + j] : j;
                    if (id >= 0) ADD_ROW(mkx + (g * nm + id) * hd, mvx + (g * nm + id) * hd);
                }
#undef ADD_ROW
                for (int64_t j = 0; j < n; j++) { p[j] = exp(p[j] - mx); sum += p[j]; }
                for (int64_t j = 0; j < n; j++)
                    for (int64_t d = 0; d < hd; d++) ref[(i * hq + h) * hd + d] += p[j] / sum * vrow[j][d];
            }
        int rc = be->attention_mem(kc, out, q, k, v, nq, nkv, q0, hq, hkv, hd, scale, mk, mv, dt, nm, sel, ns);
        double e = rel_err(out, ref, (size_t)(nq * hq * hd));
        CHECK(rc == KERN_OK && e < 1e-5 && guards_ok(out, (size_t)(nq * hq * hd)),
              "attention_mem case %zu (nq %ld nkv %ld hq %ld hkv %ld hd %ld n_mem %ld n_sel %ld): rc %d rel err %.2e",
              c, (long)nq, (long)nkv, (long)hq, (long)hkv, (long)hd, (long)nm, (long)ns, rc, e);
        if (ns) { /* an id past the memory is refused before anything is written */
            sel[0] = nm;
            CHECK(be->attention_mem(kc, out, q, k, v, nq, nkv, q0, hq, hkv, hd, scale, mk, mv, dt, nm, sel, ns) ==
                      KERN_ERANGE, "attention_mem case %zu: bad selected id refused", c);
        }
        free(q); free(k); free(v); free(ref); free(p); free(vrow); free(sel); free(mkx); free(mvx);
        free(mkb); free(mvb); guarded_free(out);
    }
    float b[4];
    const void *mp[1] = {b};
    CHECK(be->attention_mem(kc, b, b, b, b, 2, 1, 0, 4, 4, 1, 1.f, mp, mp, KERN_F32, 1, NULL, 0) == KERN_ESHAPE,
          "attention_mem: queries past the cache");
    CHECK(be->attention_mem(kc, b, b, b, b, 1, 1, 0, 1, 1, 1, 1.f, NULL, NULL, KERN_F32, 3, NULL, 0) == KERN_ESHAPE,
          "attention_mem: memory rows without memory");
}

static void test_swiglu_add(const kern_backend *be, kern_ctx *kc) {
    int64_t n = 1001;
    float *g = malloc((size_t)n * 4), *u = malloc((size_t)n * 4), *h = guarded((size_t)n);
    double *ref = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) { g[i] = frand() * 8.f; u[i] = frand(); ref[i] = g[i] / (1 + exp(-(double)g[i])) * u[i]; }
    int rc = be->swiglu(kc, h, g, u, n);
    double e = rel_err(h, ref, (size_t)n);
    CHECK(rc == KERN_OK && e < 1e-6 && guards_ok(h, (size_t)n), "swiglu rel err %.2e", e);
    for (int64_t i = 0; i < n; i++) ref[i] = (double)h[i] + g[i];
    rc = be->add(kc, h, g, n);
    e = rel_err(h, ref, (size_t)n);
    CHECK(rc == KERN_OK && e < 1e-7 && guards_ok(h, (size_t)n), "add rel err %.2e", e);
    free(g); free(u); free(ref); guarded_free(h);
}

/* ================================================================ backward twins
 * Each backward is checked two ways, at several shapes:
 *   - against central finite differences of a double-precision forward written here: the scalar
 *     L = sum(dy * f(inputs)) has gradient dL/dinput = backward(dy); sampled input elements are moved by +-h
 *     and (L+ - L-) / 2h compared with the op's fp32 result, relative to the largest |gradient| (fd_err);
 *   - against an fp64 reference backward over every element (rel_err, norm-wise).
 * Accumulating outputs (+=) start from random values and the increment is compared; overwritten ones start NaN. */

#define FD_TOL 1e-5  /* fp32 op against fp64 differences: ~1e-7 measured (rope 2e-6: fp32 angles); a sign error gives ~1 */
#define REF_TOL 2e-6 /* fp32 op against the fp64 reference backward, norm-wise: <= 5e-7 measured */

typedef double (*loss_fn)(const void *prob);

/* Max over sampled elements i of |(L(x + h e_i) - L(x - h e_i)) / 2h - got[i]|, divided by max |got|. */
static double fd_err(loss_fn f, const void *prob, double *x, size_t n, const double *got, size_t max_samples) {
    double scale = 1e-30, err = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(got[i]));
    size_t samples = n < max_samples ? n : max_samples;
    for (size_t s = 0; s < samples; s++) {
        size_t i = n <= max_samples ? s : (s * 7919u + 13u) % n;
        double save = x[i], h = 1e-4 * fmax(1.0, fabs(save));
        x[i] = save + h;
        double lp = f(prob);
        x[i] = save - h;
        double lm = f(prob);
        x[i] = save;
        err = fmax(err, fabs((lp - lm) / (2 * h) - got[i]));
    }
    return err / scale;
}

static double *to_double(const float *p, size_t n) {
    double *d = malloc((n ? n : 1) * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = p[i];
    return d;
}
static float *rand_vec(size_t n, float scale) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}
/* after - before, in double: the increment an accumulating (+=) output received */
static double *delta(const float *after, const float *before, size_t n) {
    double *d = malloc((n ? n : 1) * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = (double)after[i] - (double)before[i];
    return d;
}
static double rel_err_d(const double *got, const double *want, size_t n) {
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i])) return INFINITY;
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return sqrt(num / den);
}
/* rel_err_d for a gradient the kernel added into fp32 storage holding `before` (delta() of it is `got`): the stored
 * sum is rounded to fp32, an error of up to 2^-24 |before + grad| per element whatever the kernel does, large against
 * a small gradient (m = n = 1, k = 7). So the allowance is REF_TOL ||want|| plus 2^-23 ||before||, scaled so that
 * the result compares with REF_TOL like rel_err_d's. */
static double acc_err_d(const double *got, const double *want, const float *before, size_t n) {
    double num = 0, w2 = 0, b2 = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i])) return INFINITY;
        num += (got[i] - want[i]) * (got[i] - want[i]);
        w2 += want[i] * want[i];
        b2 += (double)before[i] * before[i];
    }
    return sqrt(num) / (sqrt(w2) + 0x1p-23 / REF_TOL * sqrt(b2) + 1e-30);
}

/* ---- embed_backward: L = sum dout * table[ids] */
typedef struct { const double *table, *dout; const int32_t *ids; int64_t n, d; } embed_prob;
static double embed_loss(const void *pp) {
    const embed_prob *p = pp;
    double L = 0;
    for (int64_t i = 0; i < p->n; i++)
        for (int64_t j = 0; j < p->d; j++) L += p->dout[i * p->d + j] * p->table[p->ids[i] * p->d + j];
    return L;
}

static void test_embed_backward(const kern_backend *be, kern_ctx *kc) {
    struct { int64_t vocab, d, n; } cases[] = {{7, 5, 9}, {50, 100, 33}, {3, 1, 4}, {1000, 300, 250}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t V = cases[c].vocab, d = cases[c].d, n = cases[c].n;
        int32_t *ids = malloc((size_t)n * sizeof *ids);
        for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 7 + 1) % V); /* n > V: ids repeat */
        float *dout = rand_vec((size_t)(n * d), 1.f), *tbl = rand_vec((size_t)(V * d), 1.f);
        float *dt = guarded((size_t)(V * d)), *dt0 = rand_vec((size_t)(V * d), 1.f);
        memcpy(dt, dt0, (size_t)(V * d) * sizeof(float));
        int rc = be->embed_backward(kc, dt, dout, V, d, ids, n);
        double *got = delta(dt, dt0, (size_t)(V * d)), *ref = calloc((size_t)(V * d), sizeof(double));
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < d; j++) ref[ids[i] * d + j] += dout[i * d + j];
        double *tbl_d = to_double(tbl, (size_t)(V * d)), *dout_d = to_double(dout, (size_t)(n * d));
        embed_prob p = {tbl_d, dout_d, ids, n, d};
        double e_ref = rel_err_d(got, ref, (size_t)(V * d)), e_fd = fd_err(embed_loss, &p, tbl_d, (size_t)(V * d), got, 200);
        CHECK(rc == KERN_OK && e_ref < REF_TOL && e_fd < FD_TOL && guards_ok(dt, (size_t)(V * d)),
              "embed_backward vocab=%ld d=%ld n=%ld: rc %d ref err %.2e fd err %.2e", (long)V, (long)d, (long)n, rc,
              e_ref, e_fd);
        /* an id past the vocabulary: refused, nothing written */
        ids[n - 1] = (int32_t)V;
        memcpy(dt0, dt, (size_t)(V * d) * sizeof(float));
        rc = be->embed_backward(kc, dt, dout, V, d, ids, n);
        CHECK(rc == KERN_ERANGE && !memcmp(dt, dt0, (size_t)(V * d) * sizeof(float)),
              "embed_backward refuses an id >= vocab and writes nothing (rc %d)", rc);
        free(ids); free(dout); free(tbl); free(dt0); free(got); free(ref); free(tbl_d); free(dout_d); guarded_free(dt);
    }
}

/* ---- rmsnorm_backward: L = sum dy * w * x * rstd(x) */
typedef struct { const double *x, *w, *dy; int64_t n, d; double eps; } rms_prob;
static double rms_loss(const void *pp) {
    const rms_prob *p = pp;
    double L = 0;
    for (int64_t i = 0; i < p->n; i++) {
        const double *xi = p->x + i * p->d, *gi = p->dy + i * p->d;
        double ss = 0;
        for (int64_t j = 0; j < p->d; j++) ss += xi[j] * xi[j];
        double r = 1.0 / sqrt(ss / (double)p->d + p->eps);
        for (int64_t j = 0; j < p->d; j++) L += gi[j] * p->w[j] * xi[j] * r;
    }
    return L;
}

static void test_rmsnorm_backward(const kern_backend *be, kern_ctx *kc) {
    struct { int64_t n, d; kern_dtype dt; int beta; } cases[] = {
        {3, 7, KERN_F32, 0}, {5, 100, KERN_BF16, 1}, {2, 3, KERN_F32, 0}, {300, 256, KERN_F32, 1}, {4, 33, KERN_F16, 0},
    };
    const float eps = 1e-5f;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t n = cases[c].n, d = cases[c].d;
        size_t nd = (size_t)(n * d);
        kern_dtype dt = cases[c].dt;
        float *x = rand_vec(nd, 2.f), *dy = rand_vec(nd, 1.f), *we = malloc((size_t)d * sizeof(float));
        void *w = make_weights(dt, (size_t)d, we);
        float *y = malloc(nd * sizeof(float)), *rstd = malloc((size_t)n * sizeof(float));
        float *dx = guarded(nd), *dx0 = rand_vec(nd, 1.f), *dw = guarded((size_t)d), *dw0 = rand_vec((size_t)d, 1.f);
        for (size_t i = 0; i < nd; i++) dx[i] = cases[c].beta ? dx0[i] : NAN; /* beta 0 must ignore dx */
        memcpy(dw, dw0, (size_t)d * sizeof(float));
        int rc = be->rmsnorm(kc, y, rstd, x, w, dt, n, d, eps);
        if (rc == KERN_OK) rc = be->rmsnorm_backward(kc, dx, dw, dy, x, w, dt, rstd, n, d, (float)cases[c].beta);
        double *gx = cases[c].beta ? delta(dx, dx0, nd) : to_double(dx, nd), *gw = delta(dw, dw0, (size_t)d);
        /* fp64 reference backward */
        double *rx = malloc(nd * sizeof(double)), *rw = calloc((size_t)d, sizeof(double));
        for (int64_t i = 0; i < n; i++) {
            double ss = 0, s = 0;
            for (int64_t j = 0; j < d; j++) ss += (double)x[i * d + j] * x[i * d + j];
            double r = 1.0 / sqrt(ss / (double)d + eps);
            for (int64_t j = 0; j < d; j++) s += (double)dy[i * d + j] * we[j] * x[i * d + j];
            for (int64_t j = 0; j < d; j++) {
                rx[i * d + j] = r * dy[i * d + j] * we[j] - r * r * r / (double)d * x[i * d + j] * s;
                rw[j] += (double)dy[i * d + j] * x[i * d + j] * r;
            }
        }
        double *xd = to_double(x, nd), *wd = to_double(we, (size_t)d), *dyd = to_double(dy, nd);
        rms_prob p = {xd, wd, dyd, n, d, eps};
        double ex = rel_err_d(gx, rx, nd), ew = rel_err_d(gw, rw, (size_t)d);
        double fx = fd_err(rms_loss, &p, xd, nd, gx, 120), fw = fd_err(rms_loss, &p, wd, (size_t)d, gw, 120);
        CHECK(rc == KERN_OK && ex < REF_TOL && ew < REF_TOL && fx < FD_TOL && fw < FD_TOL && guards_ok(dx, nd) &&
                  guards_ok(dw, (size_t)d),
              "rmsnorm_backward %s n=%ld d=%ld beta=%d: rc %d dx ref %.2e fd %.2e, dw ref %.2e fd %.2e",
              kern_dtype_name(dt), (long)n, (long)d, cases[c].beta, rc, ex, fx, ew, fw);
        /* dw NULL (frozen weight) gives the same dx; dx may alias dy */
        float *dy2 = malloc(nd * sizeof(float));
        memcpy(dy2, dy, nd * sizeof(float));
        rc = be->rmsnorm_backward(kc, dy2, NULL, dy2, x, w, dt, rstd, n, d, 0.f);
        double *g2 = to_double(dy2, nd);
        double e2 = rel_err_d(g2, rx, nd);
        CHECK(rc == KERN_OK && e2 < REF_TOL, "rmsnorm_backward dw NULL, dx aliasing dy: rc %d err %.2e", rc, e2);
        free(x); free(dy); free(we); free(w); free(y); free(rstd); free(dx0); free(dw0); free(gx); free(gw); free(rx);
        free(rw); free(xd); free(wd); free(dyd); free(dy2); free(g2); guarded_free(dx); guarded_free(dw);
    }
    float b[4] = {0};
    CHECK(be->rmsnorm_backward(kc, b, b, b, b, b, KERN_F32, b, 1, 1, 0.5f) == KERN_ESHAPE, "rmsnorm_backward beta 0.5");
}

/* ---- matmul_backward_x / _w: L = sum dy * (x . w^T) */
typedef struct { const double *x, *w, *dy; int64_t m, n, k; } mm_prob;
static double mm_loss(const void *pp) {
    const mm_prob *p = pp;
    double L = 0;
    for (int64_t i = 0; i < p->m; i++)
        for (int64_t j = 0; j < p->n; j++) {
            double s = 0;
            for (int64_t q = 0; q < p->k; q++) s += p->x[i * p->k + q] * p->w[j * p->k + q];
            L += p->dy[i * p->n + j] * s;
        }
    return L;
}

static void check_matmul_backward(const kern_backend *be, kern_ctx *kc, int dt, int64_t m, int64_t n, int64_t k,
                                  int beta, int f32_tiles) {
    size_t mk = (size_t)(m * k), mn = (size_t)(m * n), nk = (size_t)(n * k);
    float *x = rand_vec(mk, 1.f), *dy = rand_vec(mn, 1.f), *we = malloc(nk * sizeof(float));
    void *w = make_weights((kern_dtype)dt, nk, we);
    float *dx = guarded(mk), *dx0 = rand_vec(mk, 1.f), *dw = guarded(nk), *dw0 = rand_vec(nk, 1.f);
    for (size_t i = 0; i < mk; i++) dx[i] = beta ? dx0[i] : NAN;
    memcpy(dw, dw0, nk * sizeof(float));
    int rc = be->matmul_backward_x(kc, dx, dy, w, (kern_dtype)dt, m, n, k, (float)beta);
    int rc2 = be->matmul_backward_w(kc, dw, dy, x, m, n, k);
    double *gx = beta ? delta(dx, dx0, mk) : to_double(dx, mk), *gw = delta(dw, dw0, nk);
    double *rx = calloc(mk, sizeof(double)), *rw = calloc(nk, sizeof(double));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t q = 0; q < k; q++) {
                rx[i * k + q] += (double)dy[i * n + j] * we[j * k + q];
                rw[j * k + q] += (double)dy[i * n + j] * x[i * k + q];
            }
    double *xd = to_double(x, mk), *wd = to_double(we, nk), *dyd = to_double(dy, mn);
    mm_prob p = {xd, wd, dyd, m, n, k};
    double ex = beta ? acc_err_d(gx, rx, dx0, mk) : rel_err_d(gx, rx, mk), ew = acc_err_d(gw, rw, dw0, nk);
    /* A gradient added into storage holding `before` carries its fp32 rounding (acc_err_d's allowance), which a
     * finite difference cannot allow for (m = n = 1 failed by 1.6e-5 on one random draw): there the difference checks
     * the fp64 reference, which acc_err_d ties to the kernel; a gradient written afresh is checked directly. */
    double fx = fd_err(mm_loss, &p, xd, mk, beta ? rx : gx, 24), fw = fd_err(mm_loss, &p, wd, nk, rw, 24);
    CHECK(rc == KERN_OK && rc2 == KERN_OK && ex < REF_TOL && ew < REF_TOL && fx < FD_TOL && fw < FD_TOL &&
              guards_ok(dx, mk) && guards_ok(dw, nk),
          "matmul_backward %s m=%ld n=%ld k=%ld beta=%d f32 tiles %d: rc %d/%d dx ref %.2e fd %.2e, dw ref %.2e fd "
          "%.2e", kern_dtype_name((kern_dtype)dt), (long)m, (long)n, (long)k, beta, f32_tiles, rc, rc2, ex, fx, ew, fw);
    free(x); free(dy); free(we); free(w); free(dx0); free(dw0); free(gx); free(gw); free(rx);
    free(rw); free(xd); free(wd); free(dyd); guarded_free(dx); guarded_free(dw);
}

/* f32_tiles 1: mnemo's AVX-512 fp32 tiles with k-major operands (where the CPU has them); 0: OpenBLAS. The extra
 * shapes give each GEMM an inner dimension past one K block (1024) and many 64-column panels. */
static void test_matmul_backward(const kern_backend *be, kern_ctx *kc) {
    const int64_t ms[] = {1, 9, 33}, ns[] = {1, 5, 131}, ks[] = {7, 100};
    const int64_t big[][3] = {{1030, 5, 7}, {9, 1030, 70}, {40, 70, 1030}};
    for (int f32_tiles = 1; f32_tiles >= 0; f32_tiles--) {
        kern_cpu_f32gemm_allow(f32_tiles);
        for (int dt = 0; dt < 3; dt++)
            for (int beta = 0; beta <= 1; beta++) {
                for (size_t a = 0; a < 3; a++)
                    for (size_t b = 0; b < 3; b++)
                        for (size_t c = 0; c < 2; c++) check_matmul_backward(be, kc, dt, ms[a], ns[b], ks[c], beta, f32_tiles);
                for (size_t i = 0; i < 3; i++) check_matmul_backward(be, kc, dt, big[i][0], big[i][1], big[i][2], beta, f32_tiles);
            }
    }
    kern_cpu_f32gemm_allow(1);
    float b[4];
    CHECK(be->matmul_backward_x(kc, b, b, b, KERN_F32, 1, 1, 1, 0.5f) == KERN_ESHAPE, "matmul_backward_x beta 0.5");
    CHECK(be->matmul_backward_w(kc, b, b, b, 1, 0, 1) == KERN_ESHAPE, "matmul_backward_w n 0");
}

/* ---- rope_backward: L = sum dy * rope(x) */
typedef struct { const double *x, *dy; const int32_t *pos; int64_t n, heads, hd; double theta, scale; } rope_prob;
static double rope_loss(const void *pp) {
    const rope_prob *p = pp;
    int64_t half = p->hd / 2;
    double L = 0;
    for (int64_t i = 0; i < p->n; i++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t j = 0; j < half; j++) {
                double ang = p->pos[i] / p->scale * pow(p->theta, -2.0 * j / p->hd);
                int64_t o = (i * p->heads + h) * p->hd + j;
                double a = p->x[o], b = p->x[o + half];
                L += p->dy[o] * (a * cos(ang) - b * sin(ang)) + p->dy[o + half] * (b * cos(ang) + a * sin(ang));
            }
    return L;
}

static void test_rope_backward(const kern_backend *be, kern_ctx *kc) {
    struct { int64_t n, heads, hd; float theta, scale; } cases[] = {
        {7, 3, 12, 10000.f, 1.f}, {5, 2, 100, 500000.f, 2.f}, {3, 8, 2, 10000.f, 1.f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t n = cases[c].n, heads = cases[c].heads, hd = cases[c].hd, half = hd / 2;
        size_t len = (size_t)(n * heads * hd);
        int32_t pos[8] = {0, 1, 2, 17, 100, 63, 5, 9};
        float *dy = rand_vec(len, 1.f), *x = rand_vec(len, 1.f), *g = guarded(len);
        memcpy(g, dy, len * sizeof(float));
        int rc = be->rope_backward(kc, g, n, heads, hd, pos, cases[c].theta, cases[c].scale);
        double *got = to_double(g, len), *ref = malloc(len * sizeof(double));
        for (int64_t i = 0; i < n; i++)
            for (int64_t h = 0; h < heads; h++)
                for (int64_t j = 0; j < half; j++) { /* the transposed rotation */
                    double ang = pos[i] / (double)cases[c].scale * pow(cases[c].theta, -2.0 * j / hd);
                    int64_t o = (i * heads + h) * hd + j;
                    double a = dy[o], b = dy[o + half];
                    ref[o] = a * cos(ang) + b * sin(ang);
                    ref[o + half] = b * cos(ang) - a * sin(ang);
                }
        double *xd = to_double(x, len), *dyd = to_double(dy, len);
        rope_prob p = {xd, dyd, pos, n, heads, hd, cases[c].theta, cases[c].scale};
        double e_ref = rel_err_d(got, ref, len), e_fd = fd_err(rope_loss, &p, xd, len, got, 150);
        /* the backward undoes the forward */
        float *rt = malloc(len * sizeof(float));
        memcpy(rt, x, len * sizeof(float));
        int rc2 = be->rope(kc, rt, n, heads, hd, pos, cases[c].theta, cases[c].scale);
        if (rc2 == KERN_OK) rc2 = be->rope_backward(kc, rt, n, heads, hd, pos, cases[c].theta, cases[c].scale);
        double *rtd = to_double(rt, len);
        double e_rt = rel_err_d(rtd, xd, len);
        CHECK(rc == KERN_OK && rc2 == KERN_OK && e_ref < REF_TOL && e_fd < FD_TOL && e_rt < 1e-6 && guards_ok(g, len),
              "rope_backward hd=%ld: rc %d/%d ref err %.2e fd err %.2e round trip %.2e", (long)hd, rc, rc2, e_ref, e_fd,
              e_rt);
        free(dy); free(x); free(got); free(ref); free(xd); free(dyd); free(rt); free(rtd); guarded_free(g);
    }
    float b[4];
    int32_t p0 = 0;
    CHECK(be->rope_backward(kc, b, 1, 1, 3, &p0, 10000.f, 1.f) == KERN_ESHAPE, "rope_backward odd head_dim");
}

/* ---- attention_backward: L = sum dout * attention(q, k, v) */
typedef struct { const double *q, *k, *v, *dout; int64_t nq, q0, hq, hkv, hd; double scale; } att_prob;

/* out_ih and lse_ih in double; p: scratch of q0 + nq doubles. */
static void att_row(const att_prob *a, int64_t i, int64_t h, double *o, double *lse, double *p) {
    int64_t g = h / (a->hq / a->hkv), lim = a->q0 + i + 1;
    const double *qi = a->q + (i * a->hq + h) * a->hd;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < lim; j++) {
        double s = 0;
        for (int64_t d = 0; d < a->hd; d++) s += qi[d] * a->k[(j * a->hkv + g) * a->hd + d];
        p[j] = s * a->scale;
        mx = fmax(mx, p[j]);
    }
    for (int64_t j = 0; j < lim; j++) sum += (p[j] = exp(p[j] - mx));
    for (int64_t d = 0; d < a->hd; d++) o[d] = 0;
    for (int64_t j = 0; j < lim; j++)
        for (int64_t d = 0; d < a->hd; d++) o[d] += p[j] / sum * a->v[(j * a->hkv + g) * a->hd + d];
    for (int64_t j = 0; j < lim; j++) p[j] /= sum;
    *lse = mx + log(sum);
}

static double att_loss(const void *pp) {
    const att_prob *a = pp;
    double L = 0, lse, o[256], *p = malloc((size_t)(a->q0 + a->nq) * sizeof(double));
    for (int64_t i = 0; i < a->nq; i++)
        for (int64_t h = 0; h < a->hq; h++) {
            att_row(a, i, h, o, &lse, p);
            for (int64_t d = 0; d < a->hd; d++) L += a->dout[(i * a->hq + h) * a->hd + d] * o[d];
        }
    free(p);
    return L;
}

static void test_attention_backward(const kern_backend *be, kern_ctx *kc) {
    struct { int64_t nq, nkv, q0, hq, hkv, hd; } cases[] = {
        {5, 5, 0, 8, 2, 12}, {1, 1, 0, 2, 2, 16}, {3, 9, 4, 4, 4, 16}, {17, 17, 0, 4, 1, 33}, {6, 6, 0, 8, 2, 100},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t nq = cases[c].nq, nkv = cases[c].nkv, q0 = cases[c].q0, hq = cases[c].hq, hkv = cases[c].hkv,
                hd = cases[c].hd;
        size_t nqd = (size_t)(nq * hq * hd), nkd = (size_t)(nkv * hkv * hd), nl = (size_t)(nq * hq);
        float *q = rand_vec(nqd, 1.5f), *k = rand_vec(nkd, 1.5f), *v = rand_vec(nkd, 1.f), *dout = rand_vec(nqd, 1.f);
        float *out = malloc(nqd * sizeof(float)), *lse = guarded(nl);
        float *dq = guarded(nqd), *dk = guarded(nkd), *dv = guarded(nkd), *dk0 = rand_vec(nkd, 1.f),
              *dv0 = rand_vec(nkd, 1.f);
        for (size_t i = 0; i < nqd; i++) dq[i] = NAN; /* overwritten */
        memcpy(dk, dk0, nkd * sizeof(float));
        memcpy(dv, dv0, nkd * sizeof(float));
        float scale = 1.f / sqrtf((float)hd);
        int rc = be->attention(kc, out, lse, q, k, v, nq, nkv, q0, hq, hkv, hd, scale);
        int rc2 = be->attention_backward(kc, dq, dk, dv, dout, q, k, v, out, lse, nq, nkv, q0, hq, hkv, hd, scale);
        double *gq = to_double(dq, nqd), *gk = delta(dk, dk0, nkd), *gv = delta(dv, dv0, nkd);
        /* fp64 reference: forward rows, then the backward formulas */
        double *qd = to_double(q, nqd), *kd = to_double(k, nkd), *vd = to_double(v, nkd), *dod = to_double(dout, nqd);
        att_prob a = {qd, kd, vd, dod, nq, q0, hq, hkv, hd, scale};
        double *rq = calloc(nqd, sizeof(double)), *rk = calloc(nkd, sizeof(double)), *rv = calloc(nkd, sizeof(double));
        double *rl = malloc(nl * sizeof(double)), *lsed = to_double(lse, nl), *p = malloc((size_t)nkv * sizeof(double));
        double o[256];
        for (int64_t i = 0; i < nq; i++)
            for (int64_t h = 0; h < hq; h++) {
                int64_t g = h / (hq / hkv), r = i * hq + h;
                att_row(&a, i, h, o, &rl[r], p);
                const double *doi = dod + r * hd, *qi = qd + r * hd;
                double D = 0;
                for (int64_t d = 0; d < hd; d++) D += doi[d] * o[d];
                for (int64_t j = 0; j <= q0 + i; j++) {
                    const double *kj = kd + (j * hkv + g) * hd, *vj = vd + (j * hkv + g) * hd;
                    double dp = 0;
                    for (int64_t d = 0; d < hd; d++) dp += doi[d] * vj[d];
                    double ds = p[j] * (dp - D);
                    for (int64_t d = 0; d < hd; d++) {
                        rq[r * hd + d] += scale * ds * kj[d];
                        rk[(j * hkv + g) * hd + d] += scale * ds * qi[d];
                        rv[(j * hkv + g) * hd + d] += p[j] * doi[d];
                    }
                }
            }
        double el = rel_err_d(lsed, rl, nl);
        double eq = rel_err_d(gq, rq, nqd), ek = rel_err_d(gk, rk, nkd), ev = rel_err_d(gv, rv, nkd);
        double fq = fd_err(att_loss, &a, qd, nqd, gq, 60), fk = fd_err(att_loss, &a, kd, nkd, gk, 60),
               fv = fd_err(att_loss, &a, vd, nkd, gv, 60);
        CHECK(rc == KERN_OK && rc2 == KERN_OK && el < 1e-6 && eq < REF_TOL && ek < REF_TOL && ev < REF_TOL &&
                  fq < FD_TOL && fk < FD_TOL && fv < FD_TOL && guards_ok(lse, nl) && guards_ok(dq, nqd) &&
                  guards_ok(dk, nkd) && guards_ok(dv, nkd),
              "attention_backward case %zu (nq %ld nkv %ld q0 %ld hq %ld hkv %ld hd %ld): rc %d/%d lse %.2e, dq ref "
              "%.2e fd %.2e, dk ref %.2e fd %.2e, dv ref %.2e fd %.2e",
              c, (long)nq, (long)nkv, (long)q0, (long)hq, (long)hkv, (long)hd, rc, rc2, el, eq, fq, ek, fk, ev, fv);
        /* queries in two chunks over the same cache accumulate the same dk, dv (and the same dq rows) */
        if (nq > 1) {
            int64_t n1 = nq / 2;
            size_t off = (size_t)(n1 * hq * hd);
            memcpy(dk, dk0, nkd * sizeof(float));
            memcpy(dv, dv0, nkd * sizeof(float));
            rc = be->attention_backward(kc, dq, dk, dv, dout, q, k, v, out, lse, n1, nkv, q0, hq, hkv, hd, scale);
            if (rc == KERN_OK)
                rc = be->attention_backward(kc, dq + off, dk, dv, dout + off, q + off, k, v, out + off,
                                            lse + n1 * hq, nq - n1, nkv, q0 + n1, hq, hkv, hd, scale);
            double *cq = to_double(dq, nqd), *ck = delta(dk, dk0, nkd), *cv = delta(dv, dv0, nkd);
            double e1 = rel_err_d(cq, rq, nqd), e2 = rel_err_d(ck, rk, nkd), e3 = rel_err_d(cv, rv, nkd);
            CHECK(rc == KERN_OK && e1 < REF_TOL && e2 < REF_TOL && e3 < REF_TOL,
                  "attention_backward case %zu in two chunks: rc %d errs %.2e %.2e %.2e", c, rc, e1, e2, e3);
            free(cq); free(ck); free(cv);
        }
        free(q); free(k); free(v); free(dout); free(out); free(dk0); free(dv0); free(gq); free(gk); free(gv);
        free(qd); free(kd); free(vd); free(dod); free(rq); free(rk); free(rv); free(rl); free(lsed); free(p);
        guarded_free(lse); guarded_free(dq); guarded_free(dk); guarded_free(dv);
    }
    float b[4];
    CHECK(be->attention_backward(kc, b, b, b, b, b, b, b, b, NULL, 1, 1, 0, 1, 1, 1, 1.f) == KERN_ESHAPE,
          "attention_backward needs lse");
    CHECK(be->attention_backward(kc, b, b, b, b, b, b, b, b, b, 2, 1, 0, 1, 1, 1, 1.f) == KERN_ESHAPE,
          "attention_backward: queries past the cache");
}

/* ---- attention_cross, attention_merge, attention_cross_backward: FoT's split of one softmax. A row whose queries
 * see nx extra keys whole and their own nq keys causally is the causal op over [extras | own] with q_pos0 = nx
 * (checked against fp64 above); the split computes the own part causally, the extras with attention_cross, merges
 * them, and takes the backward as the sum of the two parts' backwards against the merged out and lse. */
static void test_attention_cross(const kern_backend *be, kern_ctx *kc) {
    struct { int64_t nq, nx, hq, hkv, hd; } cases[] = {
        {1, 1, 2, 2, 16}, {5, 37, 8, 2, 12}, {17, 64, 4, 1, 33}, {32, 200, 8, 8, 32}, {40, 129, 6, 3, 64},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int64_t nq = cases[c].nq, nx = cases[c].nx, hq = cases[c].hq, hkv = cases[c].hkv, hd = cases[c].hd;
        const int64_t kvd = hkv * hd, n = nx + nq;
        const size_t nqd = (size_t)(nq * hq * hd), nl = (size_t)(nq * hq), nxd = (size_t)(nx * kvd),
                     nod = (size_t)(nq * kvd);
        float *q = rand_vec(nqd, 1.5f), *k = rand_vec((size_t)(n * kvd), 1.5f), *v = rand_vec((size_t)(n * kvd), 1.f);
        float *dout = rand_vec(nqd, 1.f), *own_k = k + nxd, *own_v = v + nxd;
        const float scale = 1.f / sqrtf((float)hd);
        /* reference: one causal call over [extras | own] */
        float *ro = malloc(nqd * 4), *rl = malloc(nl * 4), *rdq = malloc(nqd * 4);
        float *rdk = calloc((size_t)(n * kvd), 4), *rdv = calloc((size_t)(n * kvd), 4);
        int rc = be->attention(kc, ro, rl, q, k, v, nq, n, nx, hq, hkv, hd, scale);
        if (rc == KERN_OK) rc = be->attention_backward(kc, rdq, rdk, rdv, dout, q, k, v, ro, rl, nq, n, nx, hq, hkv, hd, scale);
        /* split: own causal, extras whole, merged */
        float *o = guarded(nqd), *l = guarded(nl), *o2 = guarded(nqd), *l2 = guarded(nl);
        float *dq = guarded(nqd), *dq2 = guarded(nqd), *dkx = guarded(nxd), *dvx = guarded(nxd), *dko = guarded(nod),
              *dvo = guarded(nod);
        memset(dkx, 0, nxd * 4), memset(dvx, 0, nxd * 4), memset(dko, 0, nod * 4), memset(dvo, 0, nod * 4);
        int rc2 = be->attention(kc, o, l, q, own_k, own_v, nq, nq, 0, hq, hkv, hd, scale);
        if (rc2 == KERN_OK) rc2 = be->attention_cross(kc, o2, l2, q, k, v, nq, nx, hq, hkv, hd, scale);
        if (rc2 == KERN_OK) rc2 = be->attention_merge(kc, o, l, o2, l2, nq, hq, hd);
        if (rc2 == KERN_OK)
            rc2 = be->attention_backward(kc, dq, dko, dvo, dout, q, own_k, own_v, o, l, nq, nq, 0, hq, hkv, hd, scale);
        if (rc2 == KERN_OK)
            rc2 = be->attention_cross_backward(kc, dq2, dkx, dvx, dout, q, k, v, o, l, nq, nx, hq, hkv, hd, scale);
        for (size_t i = 0; i < nqd; i++) dq[i] += dq2[i];
        double *go = to_double(o, nqd), *gl = to_double(l, nl), *gq = to_double(dq, nqd);
        double *wo = to_double(ro, nqd), *wl = to_double(rl, nl), *wq = to_double(rdq, nqd);
        double *gkx = to_double(dkx, nxd), *gvx = to_double(dvx, nxd), *gko = to_double(dko, nod),
               *gvo = to_double(dvo, nod);
        double *wkx = to_double(rdk, nxd), *wvx = to_double(rdv, nxd), *wko = to_double(rdk + nxd, nod),
               *wvo = to_double(rdv + nxd, nod);
        const double eo = rel_err_d(go, wo, nqd), el = rel_err_d(gl, wl, nl), eq = rel_err_d(gq, wq, nqd);
        const double ekx = rel_err_d(gkx, wkx, nxd), evx = rel_err_d(gvx, wvx, nxd), eko = rel_err_d(gko, wko, nod),
                     evo = rel_err_d(gvo, wvo, nod);
        CHECK(rc == KERN_OK && rc2 == KERN_OK && eo < 1e-5 && el < 1e-6 && eq < 1e-5 && ekx < 1e-5 && evx < 1e-5 &&
                  eko < 1e-5 && evo < 1e-5 && guards_ok(o, nqd) && guards_ok(l, nl) && guards_ok(o2, nqd) &&
                  guards_ok(l2, nl) && guards_ok(dq2, nqd) && guards_ok(dkx, nxd) && guards_ok(dvx, nxd),
              "attention_cross case %zu (nq %ld, %ld extra keys, hq %ld hkv %ld hd %ld): rc %d/%d out %.2e lse %.2e "
              "dq %.2e, extras dk %.2e dv %.2e, own dk %.2e dv %.2e",
              c, (long)nq, (long)nx, (long)hq, (long)hkv, (long)hd, rc, rc2, eo, el, eq, ekx, evx, eko, evo);
        free(q); free(k); free(v); free(dout); free(ro); free(rl); free(rdq); free(rdk); free(rdv);
        free(go); free(gl); free(gq); free(wo); free(wl); free(wq); free(gkx); free(gvx); free(gko); free(gvo);
        free(wkx); free(wvx); free(wko); free(wvo);
        guarded_free(o); guarded_free(l); guarded_free(o2); guarded_free(l2); guarded_free(dq); guarded_free(dq2);
        guarded_free(dkx); guarded_free(dvx); guarded_free(dko); guarded_free(dvo);
    }
    /* a set with no key (lse -inf) leaves the other's result unchanged */
    float o[2] = {0.25f, -1.f}, l[1] = {0.5f}, o2[2] = {7.f, 7.f}, l2[1] = {-INFINITY};
    CHECK(be->attention_merge(kc, o, l, o2, l2, 1, 1, 2) == KERN_OK && o[0] == 0.25f && o[1] == -1.f && l[0] == 0.5f,
          "attention_merge with an empty second set");
    float b[4];
    CHECK(be->attention_cross(kc, b, NULL, b, b, b, 1, 0, 1, 1, 1, 1.f) == KERN_ESHAPE, "attention_cross: no keys");
    CHECK(be->attention_cross(kc, b, NULL, b, b, b, 1, 1, 3, 2, 1, 1.f) == KERN_ESHAPE,
          "attention_cross: hq not a multiple of hkv");
    CHECK(be->attention_cross_backward(kc, b, b, b, b, b, b, b, b, NULL, 1, 1, 1, 1, 1, 1.f) == KERN_ESHAPE,
          "attention_cross_backward needs lse");
}

/* ---- swiglu_backward: L = sum dh * silu(gate) * up */
typedef struct { const double *g, *u, *dh; int64_t n; } swiglu_prob;
static double swiglu_loss(const void *pp) {
    const swiglu_prob *p = pp;
    double L = 0;
    for (int64_t i = 0; i < p->n; i++) L += p->dh[i] * p->g[i] / (1 + exp(-p->g[i])) * p->u[i];
    return L;
}

static void test_swiglu_backward(const kern_backend *be, kern_ctx *kc) {
    const int64_t ns[] = {1, 1001, 70001};
    for (size_t c = 0; c < 3; c++) {
        int64_t n = ns[c];
        float *g = rand_vec((size_t)n, 8.f), *u = rand_vec((size_t)n, 1.f), *dh = rand_vec((size_t)n, 1.f);
        float *dg = guarded((size_t)n), *du = guarded((size_t)n);
        int rc = be->swiglu_backward(kc, dg, du, dh, g, u, n);
        double *gg = to_double(dg, (size_t)n), *gu = to_double(du, (size_t)n);
        double *rg = malloc((size_t)n * sizeof(double)), *ru = malloc((size_t)n * sizeof(double));
        for (int64_t i = 0; i < n; i++) {
            double s = 1 / (1 + exp(-(double)g[i]));
            rg[i] = (double)dh[i] * u[i] * s * (1 + g[i] * (1 - s));
            ru[i] = (double)dh[i] * g[i] * s;
        }
        double *gd = to_double(g, (size_t)n), *ud = to_double(u, (size_t)n), *dhd = to_double(dh, (size_t)n);
        swiglu_prob p = {gd, ud, dhd, n};
        double eg = rel_err_d(gg, rg, (size_t)n), eu = rel_err_d(gu, ru, (size_t)n);
        double fg = fd_err(swiglu_loss, &p, gd, (size_t)n, gg, 50), fu = fd_err(swiglu_loss, &p, ud, (size_t)n, gu, 50);
        /* outputs over the inputs: dgate over dh, dup over up */
        float *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
        memcpy(a, dh, (size_t)n * sizeof(float));
        memcpy(b, u, (size_t)n * sizeof(float));
        int rc2 = be->swiglu_backward(kc, a, b, a, g, b, n);
        bool same = !memcmp(a, dg, (size_t)n * sizeof(float)) && !memcmp(b, du, (size_t)n * sizeof(float));
        CHECK(rc == KERN_OK && rc2 == KERN_OK && eg < REF_TOL && eu < REF_TOL && fg < FD_TOL && fu < FD_TOL && same &&
                  guards_ok(dg, (size_t)n) && guards_ok(du, (size_t)n),
              "swiglu_backward n=%ld: rc %d/%d dgate ref %.2e fd %.2e, dup ref %.2e fd %.2e, aliased same %d", (long)n,
              rc, rc2, eg, fg, eu, fu, same);
        free(g); free(u); free(dh); free(gg); free(gu); free(rg); free(ru); free(gd); free(ud); free(dhd); free(a);
        free(b); guarded_free(dg); guarded_free(du);
    }
}

/* ---- cross_entropy against a direct fp64 computation (and the fp64 loss's finite differences) */
typedef struct { const double *logits; const int32_t *t; int64_t n, vocab; double dloss; } ce_prob;
static double ce_loss(const void *pp) {
    const ce_prob *p = pp;
    double L = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < p->n; i++) {
        if (p->t[i] < 0) continue;
        const double *l = p->logits + i * p->vocab;
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < p->vocab; j++) mx = fmax(mx, l[j]);
        for (int64_t j = 0; j < p->vocab; j++) s += exp(l[j] - mx);
        L += mx + log(s) - l[p->t[i]];
        count++;
    }
    return count ? p->dloss * L / (double)count : NAN;
}

static void test_cross_entropy(const kern_backend *be, kern_ctx *kc) {
    struct { int64_t n, vocab; float dloss; } cases[] = {{5, 11, 1.f}, {64, 1000, 0.25f}, {1, 1, 1.f}, {3, 32000, 2.f}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int inplace = 0; inplace <= 1; inplace++) {
            int64_t n = cases[c].n, V = cases[c].vocab;
            size_t nv = (size_t)(n * V);
            int32_t *t = malloc((size_t)n * sizeof *t);
            for (int64_t i = 0; i < n; i++) t[i] = i % 4 == 1 ? -1 : (int32_t)((i * 31 + 7) % V); /* some ignored */
            float *logits = rand_vec(nv, 6.f), *d = guarded(nv), *loss = guarded(1);
            if (inplace) memcpy(d, logits, nv * sizeof(float));
            int rc = be->cross_entropy(kc, loss, d, inplace ? d : logits, t, n, V, cases[c].dloss);
            double *ld = to_double(logits, nv), *got = to_double(d, nv), *ref = calloc(nv, sizeof(double));
            ce_prob p = {ld, t, n, V, cases[c].dloss};
            double want = ce_loss(&p) / cases[c].dloss;
            int64_t count = 0;
            for (int64_t i = 0; i < n; i++) count += t[i] >= 0;
            for (int64_t i = 0; i < n; i++) {
                if (t[i] < 0) continue;
                const double *l = ld + i * V;
                double mx = -INFINITY, s = 0;
                for (int64_t j = 0; j < V; j++) mx = fmax(mx, l[j]);
                for (int64_t j = 0; j < V; j++) s += exp(l[j] - mx);
                for (int64_t j = 0; j < V; j++)
                    ref[i * V + j] = cases[c].dloss / (double)count * (exp(l[j] - mx) / s - (j == t[i]));
            }
            double e = rel_err_d(got, ref, nv), f = fd_err(ce_loss, &p, ld, nv, got, 60);
            double el = fabs(loss[0] - want) / fmax(1e-30, fabs(want));
            CHECK(rc == KERN_OK && el < 1e-6 && e < REF_TOL && f < FD_TOL && guards_ok(d, nv) && guards_ok(loss, 1),
                  "cross_entropy n=%ld vocab=%ld%s: rc %d loss %.7g want %.7g (rel %.2e), dlogits ref %.2e fd %.2e",
                  (long)n, (long)V, inplace ? " in place" : "", rc, loss[0], want, el, e, f);
            /* loss only */
            float l2 = NAN;
            rc = be->cross_entropy(kc, &l2, NULL, logits, t, n, V, 1.f);
            CHECK(rc == KERN_OK && l2 == loss[0], "cross_entropy without dlogits: rc %d loss %g vs %g", rc, l2, loss[0]);
            /* a target past the vocabulary: refused, nothing written */
            t[0] = (int32_t)V;
            memcpy(d, logits, nv * sizeof(float));
            rc = be->cross_entropy(kc, &l2, d, d, t, n, V, 1.f);
            CHECK(rc == KERN_ERANGE && !memcmp(d, logits, nv * sizeof(float)), "cross_entropy refuses target %ld",
                  (long)V);
            free(t); free(logits); free(ld); free(got); free(ref); guarded_free(d); guarded_free(loss);
        }
    /* every row ignored: loss NaN (torch's mean over nothing), gradient zero */
    float lg[6] = {1, 2, 3, 4, 5, 6}, loss = 0;
    int32_t t[2] = {-1, -1};
    int rc = be->cross_entropy(kc, &loss, lg, lg, t, 2, 3, 1.f);
    bool zero = true;
    for (int i = 0; i < 6; i++) zero &= lg[i] == 0.f;
    CHECK(rc == KERN_OK && isnan(loss) && zero, "cross_entropy with every row ignored: rc %d loss %g", rc, loss);
    t[0] = -2;
    CHECK(be->cross_entropy(kc, &loss, lg, lg, t, 2, 3, 1.f) == KERN_ERANGE, "cross_entropy refuses target -2");
}

/* ---- adamw against a hand-written fp64 torch.optim.AdamW step (3 steps, weight decay, a grad scale) */
static void test_adamw(const kern_backend *be, kern_ctx *kc) {
    struct { int64_t n; double lr, b1, b2, eps, wd; float gscale; } cases[] = {
        {1000, 1e-2, 0.9, 0.999, 1e-8, 0.1, 1.f}, {70001, 3e-4, 0.8, 0.95, 1e-6, 0.01, 0.5f},
        {7, 1e-1, 0.3, 0.5, 1e-3, 0.0, 2.f}, /* beta1 < 0.5: torch's other lerp branch */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t n = cases[c].n;
        float *p = rand_vec((size_t)n, 1.f), *m = guarded((size_t)n), *v = guarded((size_t)n);
        double *pd = to_double(p, (size_t)n), *md = calloc((size_t)n, sizeof(double)),
               *vd = calloc((size_t)n, sizeof(double));
        for (int64_t i = 0; i < n; i++) m[i] = v[i] = 0.f;
        double worst = 0;
        int rc = KERN_OK;
        for (int64_t step = 1; step <= 3; step++) {
            float *g = rand_vec((size_t)n, 1.f);
            for (int64_t i = 0; i < n; i += 3) g[i] *= 1e-6f; /* tiny grads: where eps (outside the sqrt) matters */
            if (rc == KERN_OK)
                rc = be->adamw(kc, p, m, v, g, n, cases[c].gscale, cases[c].lr, cases[c].b1, cases[c].b2, cases[c].eps,
                               cases[c].wd, step);
            double b1 = cases[c].b1, b2 = cases[c].b2, lr = cases[c].lr;
            double bc1 = 1 - pow(b1, (double)step), bc2 = 1 - pow(b2, (double)step);
            for (int64_t i = 0; i < n; i++) {
                double gi = (double)g[i] * cases[c].gscale;
                pd[i] *= 1 - lr * cases[c].wd;
                md[i] = b1 * md[i] + (1 - b1) * gi;
                vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
                pd[i] -= lr / bc1 * md[i] / (sqrt(vd[i]) / sqrt(bc2) + cases[c].eps);
            }
            double *pg = to_double(p, (size_t)n), *mg = to_double(m, (size_t)n), *vg = to_double(v, (size_t)n);
            worst = fmax(worst, fmax(rel_err_d(pg, pd, (size_t)n), fmax(rel_err_d(mg, md, (size_t)n),
                                                                         rel_err_d(vg, vd, (size_t)n))));
            free(pg); free(mg); free(vg); free(g);
        }
        CHECK(rc == KERN_OK && worst < 1e-6 && guards_ok(m, (size_t)n) && guards_ok(v, (size_t)n),
              "adamw n=%ld lr=%g betas=(%g, %g) eps=%g wd=%g grad_scale=%g, 3 steps: rc %d worst rel err %.2e", (long)n,
              cases[c].lr, cases[c].b1, cases[c].b2, cases[c].eps, cases[c].wd, cases[c].gscale, rc, worst);
        free(p); free(pd); free(md); free(vd); guarded_free(m); guarded_free(v);
    }
    float b[2] = {0};
    CHECK(be->adamw(kc, b, b, b, b, 1, 1.f, 1e-3, 0.9, 0.999, 1e-8, 0, 0) == KERN_ESHAPE, "adamw step 0 refused");
    CHECK(be->adamw(kc, b, b, b, b, 1, 1.f, 1e-3, 1.0, 0.999, 1e-8, 0, 1) == KERN_ESHAPE, "adamw beta1 1 refused");
}

#include "kernels_quant_cases.h" /* test_quant: q8_0 / q4_0 on every vector path */

static void test_conversions(void) {
    bool ok = true;
    for (uint32_t h = 0; h < 0x10000; h++) { /* f16 -> f32 -> f16 is the identity on non-NaN values */
        float f = kern_f16_to_f32((uint16_t)h);
        if (!isnan(f) && kern_f32_to_f16(f) != h) { ok = false; break; }
    }
    CHECK(ok, "f16 round trip");
    CHECK(kern_f32_to_bf16(1.00390625f) == 0x3f80, "bf16 rounds half to even (down)");
    CHECK(kern_f32_to_bf16(1.01171875f) == 0x3f82, "bf16 rounds half to even (up)");
    CHECK(isnan(kern_bf16_to_f32(kern_f32_to_bf16(NAN))), "bf16 keeps NaN");
}

int main(void) {
    const kern_backend *be = kern_cpu_backend();
    CHECK(be && !strcmp(be->name, "cpu"), "cpu backend present");
    for (int i = 0; i < KERN_OP_COUNT; i++) CHECK(kern_op_names[i] && kern_op_docs[i][0], "op %d has name and doc", i);
    for (int threads = 1; threads <= 2; threads++) {
        kern_ctx *kc = kern_cpu_ctx_new(threads);
        test_matmul(be, kc);
        test_matmul_bf16dot(be, kc);
        test_rmsnorm_embed(be, kc);
        test_rope(be, kc);
        test_attention(be, kc);
        test_attention_mem(be, kc);
        test_swiglu_add(be, kc);
        test_embed_backward(be, kc);
        test_rmsnorm_backward(be, kc);
        test_matmul_backward(be, kc);
        test_rope_backward(be, kc);
        test_attention_backward(be, kc);
        test_attention_cross(be, kc);
        test_swiglu_backward(be, kc);
        test_cross_entropy(be, kc);
        test_adamw(be, kc);
        test_quant(be, kc);
        kern_cpu_ctx_free(kc);
    }
    test_conversions();
    return test_summary();
}
