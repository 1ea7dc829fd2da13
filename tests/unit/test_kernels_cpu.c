/*
 * test_kernels_cpu.c — every CPU op against a naive double-precision reference written here, over shapes that
 * hit each code path: GEMV (m <= 8, with the 4-row m==1 path and its tail), sgemm with panel widening
 * (m > 8), odd sizes (k not a multiple of 16, head_dim 100 and 12), GQA, causal offsets, all weight dtypes.
 * Also guard values around every output catch out-of-bounds writes.
 */
#include <math.h>
#include <string.h>

#include "kernels.h"
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

static void test_matmul(const kern_backend *be, kern_ctx *kc) {
    const int64_t ms[] = {1, 2, 3, 8, 9, 33}, ns[] = {1, 5, 64, 131}, ks[] = {7, 16, 100, 257};
    for (int dt = 0; dt < 3; dt++)
        for (size_t a = 0; a < 6; a++)
            for (size_t b = 0; b < 4; b++)
                for (size_t c = 0; c < 4; c++)
                    for (int beta = 0; beta <= 1; beta++) {
                        int64_t m = ms[a], n = ns[b], k = ks[c];
                        float *x = malloc((size_t)(m * k) * sizeof(float)), *we = malloc((size_t)(n * k) * sizeof(float));
                        for (int64_t i = 0; i < m * k; i++) x[i] = frand();
                        void *w = make_weights((kern_dtype)dt, (size_t)(n * k), we);
                        float *y = guarded((size_t)(m * n));
                        double *ref = malloc((size_t)(m * n) * sizeof(double));
                        for (int64_t i = 0; i < m * n; i++) y[i] = beta ? frand() : NAN; /* beta 0 must ignore y */
                        for (int64_t i = 0; i < m; i++)
                            for (int64_t j = 0; j < n; j++) {
                                double s = beta ? y[i * n + j] : 0.0;
                                for (int64_t q = 0; q < k; q++) s += (double)x[i * k + q] * we[j * k + q];
                                ref[i * n + j] = s;
                            }
                        int rc = be->matmul(kc, y, x, w, (kern_dtype)dt, m, n, k, (float)beta);
                        double e = rel_err(y, ref, (size_t)(m * n));
                        CHECK(rc == KERN_OK && e < 1e-5 && guards_ok(y, (size_t)(m * n)),
                              "matmul %s m=%ld n=%ld k=%ld beta=%d: rc %d rel err %.2e", kern_dtype_name((kern_dtype)dt),
                              (long)m, (long)n, (long)k, beta, rc, e);
                        free(x); free(we); free(w); free(ref); guarded_free(y);
                    }
    float y[4];
    CHECK(be->matmul(kc, y, y, y, KERN_F32, 1, 1, 0, 0.f) == KERN_ESHAPE, "matmul k=0 must be a shape error");
    CHECK(be->matmul(kc, y, y, y, KERN_F32, 1, 1, 1, 0.5f) == KERN_ESHAPE, "matmul beta 0.5 must be refused");
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
        int rc = be->attention(kc, out, q, k, v, nq, nkv, q0, hq, hkv, hd, scale);
        double e = rel_err(out, ref, (size_t)(nq * hq * hd));
        CHECK(rc == KERN_OK && e < 1e-5 && guards_ok(out, (size_t)(nq * hq * hd)),
              "attention case %zu (nq %ld nkv %ld hq %ld hkv %ld hd %ld): rel err %.2e", c, (long)nq, (long)nkv, (long)hq,
              (long)hkv, (long)hd, e);
        free(q); free(k); free(v); free(ref); free(p); guarded_free(out);
    }
    float b[4];
    CHECK(be->attention(kc, b, b, b, b, 2, 1, 0, 4, 4, 1, 1.f) == KERN_ESHAPE, "attention: queries past the cache");
    CHECK(be->attention(kc, b, b, b, b, 1, 1, 0, 3, 2, 1, 1.f) == KERN_ESHAPE, "attention: hq not a multiple of hkv");
}

/* attention_mem against a double-precision oracle: memory rows (stored in dt, widened exactly) join the causal
 * local keys in one softmax; dense = every row, selected = the listed ids (-1 skipped, duplicates counted). */
static void test_attention_mem(const kern_backend *be, kern_ctx *kc) {
    struct { int64_t nq, nkv, q0, hq, hkv, hd, n_mem, n_sel; kern_dtype dt; } cases[] = {
        {1, 1, 0, 4, 4, 16, 0, 0, KERN_BF16},       {5, 9, 4, 8, 2, 12, 300, 0, KERN_BF16},
        {1, 37, 36, 4, 4, 100, 1000, 0, KERN_F16},  {20, 20, 0, 4, 2, 25, 37, 0, KERN_F32},
        {3, 20, 17, 6, 3, 64, 200, 4, KERN_BF16},   {17, 17, 0, 4, 1, 33, 50, 128, KERN_F32},
        {2, 2, 0, 2, 2, 16, 5, 7, KERN_F16},
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
        test_rmsnorm_embed(be, kc);
        test_rope(be, kc);
        test_attention(be, kc);
        test_attention_mem(be, kc);
        test_swiglu_add(be, kc);
        kern_cpu_ctx_free(kc);
    }
    test_conversions();
    return test_summary();
}
