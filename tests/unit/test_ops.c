/*
 * test_ops.c — every op of the kernel table on the CUDA backend against the CPU reference backend, in the spirit
 * of llama.cpp's test-backend-ops.
 *
 *   test_ops [--perf] [--list] [op ...]      (op names: test_ops --list)
 *
 * Correctness mode (default): each op x shapes (odd sizes, head_dim 100 and generic ones, GQA, causal offsets,
 * 2K-key caches) x weight dtypes runs on both backends from the same inputs. A case passes when
 *   - both return KERN_OK (or, for the error cases, the same KERN_E* code, deferred ones read at the next sync),
 *   - NaN and Inf appear at the same positions (same sign for Inf),
 *   - the normalized MSE sum((cpu - cuda)^2) / sum(cpu^2) over the finite values is below the op's threshold,
 *   - the GUARD sentinel floats on both sides of every CUDA output buffer are untouched (out-of-bounds writes).
 * Thresholds (NMSE), with why:
 *   embed, add                      0      gathers and single fp32 adds are exact on both backends
 *   rmsnorm, swiglu                 1e-12  only summation order / expf ulps differ
 *   rope                            1e-10  same fp32 frequencies and angles; cosf/sinf ulps at angles ~1e4
 *   matmul fp32 paths               1e-9   f32 weights, the fp32 GEMV (m <= 8), and the SPLIT bf16/f16 GEMM: fp32
 *                                          accuracy, summation order differs (~1e-13 expected; 1e-9 still catches
 *                                          a lost lo half, which costs ~1e-6)
 *   matmul FAST, bf16 weights       1e-5   activations rounded to bf16 once: ~1.3e-6 expected
 *   matmul FAST, f16 weights        2e-7   activations rounded to f16 once: ~2e-8 expected
 *   attention                       1e-9   fp32 online softmax against the CPU's exact one (the tensor-core
 *                                          prefill kernels in SPLIT mode too: 3 products, ~1e-11 seen)
 *   attention prefill, FAST         2e-6   TF32 operands (cuda.attn=tc); 4e-5 for bf16 ones (=mma: q, k,
 *                                          p and v each rounded to bf16 once, 5e-6 .. 1.2e-5 seen)
 *   attention_mem                   1e-9   same, memory rows widened exactly from f32/bf16/f16
 *   topk_ip                         1e-10  scores; ids identical but at near-tied scores (exact ties: lower id)
 *   ivf_scan_topk                   1e-10  as topk_ip, over the rows of each query's probed cells
 *   scatter_i32                     exact
 *   attention's lse (training)      1e-12  the same max + log(sum) of the same fp32 scores
 *   backward twins, loss, adamw     see the table above test_embed_backward
 * --perf: times each op on CUDA at LongLLaMA-3B's shapes and prints us/run, GB/s (bytes an ideal kernel moves)
 * and GFLOP/s; no correctness checks.
 * Every op of KERN_OPS has its case test_<op>, found by op id (CASES below): a new op without one does not
 * compile. An op (or a use of one, such as attention's lse output) the CUDA backend answers KERN_EUNSUPPORTED is
 * printed as SKIP and listed by name at the end; anywhere else KERN_EUNSUPPORTED fails the case.
 * Exit status: 0 when every case passed; 1 on any failure; 0 with "SKIP" when there is no usable CUDA backend
 * (not built, no driver, no device), so CI without a GPU stays green.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "kernels_cpu_paths.h"
#include "test_util.h"

#define GUARD 16
static const uint32_t SENTINEL = 0x7fa5a5a5u; /* a NaN with a payload no op produces */

static const kern_backend *CPU, *GPU;
static kern_ctx *kc_cpu, *kc_gpu;
static bool verbose = true;

/* ---------------------------------------------------------------- helpers */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 24))) * 2.f - 1.f;
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test_ops: out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static float *rand_floats(size_t n, float scale) {
    float *p = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}

/* Random weights stored in dt. */
static void *rand_weights(kern_dtype dt, size_t n, float scale) {
    void *w = xmalloc(n * kern_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        float v = frand() * scale;
        if (dt == KERN_F32) ((float *)w)[i] = v;
        else if (dt == KERN_BF16) ((uint16_t *)w)[i] = kern_f32_to_bf16(v);
        else ((uint16_t *)w)[i] = kern_f32_to_f16(v);
    }
    return w;
}

/* A device copy of host data (inputs). */
static void *up(const void *host, size_t bytes) {
    void *d = GPU->mem_alloc(bytes);
    if (!d || GPU->mem_copy(kc_gpu, d, host, bytes, KERN_H2D) != KERN_OK) {
        fprintf(stderr, "test_ops: device allocation/upload of %zu bytes failed\n", bytes);
        exit(1);
    }
    return d;
}

/* An output buffer on the device: n floats with GUARD sentinels each side, the interior set from init. */
typedef struct {
    float *base, *p;
    size_t n;
} gbuf;

static gbuf gout(size_t n, const float *init) {
    size_t total = n + 2 * GUARD;
    float *h = xmalloc(total * sizeof(float));
    for (size_t i = 0; i < total; i++) memcpy(&h[i], &SENTINEL, 4);
    if (init) memcpy(h + GUARD, init, n * sizeof(float));
    gbuf g = {.base = up(h, total * sizeof(float)), .n = n};
    g.p = g.base + GUARD;
    free(h);
    return g;
}

/* Downloads g's interior into host (n floats); *guards_ok tells whether the sentinels survived. Returns the
 * download's status (a deferred KERN_ERANGE shows up here). */
static int gfetch(gbuf *g, float *host, bool *guards_ok) {
    size_t total = g->n + 2 * GUARD;
    float *h = xmalloc(total * sizeof(float));
    int rc = GPU->mem_copy(kc_gpu, h, g->base, total * sizeof(float), KERN_D2H);
    *guards_ok = true;
    for (size_t i = 0; i < GUARD; i++)
        if (memcmp(&h[i], &SENTINEL, 4) || memcmp(&h[GUARD + g->n + i], &SENTINEL, 4)) *guards_ok = false;
    memcpy(host, h + GUARD, g->n * sizeof(float));
    free(h);
    return rc;
}

static void gfree(gbuf *g) { GPU->mem_free(g->base); }

typedef struct {
    double nmse;
    size_t nonfinite_mismatch; /* positions where NaN/Inf disagree */
    size_t first_bad;
} cmp_result;

static cmp_result compare(const float *ref, const float *got, size_t n) {
    cmp_result c = {0, 0, (size_t)-1};
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        bool rf = isfinite(ref[i]), gf = isfinite(got[i]);
        if (!rf || !gf) {
            bool same = (isnan(ref[i]) && isnan(got[i])) || (isinf(ref[i]) && isinf(got[i]) && (ref[i] > 0) == (got[i] > 0));
            if (!same) {
                if (!c.nonfinite_mismatch) c.first_bad = i;
                c.nonfinite_mismatch++;
            }
            continue;
        }
        double d = (double)ref[i] - (double)got[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    c.nmse = den > 0 ? num / den : (num > 0 ? INFINITY : 0);
    return c;
}

/* Records one case. */
static void verdict(const char *desc, int rc_cpu, int rc_gpu, bool guards, const float *ref, const float *got,
                    size_t n, double thr) {
    cmp_result c = compare(ref, got, n);
    bool ok = rc_cpu == KERN_OK && rc_gpu == KERN_OK && guards && c.nonfinite_mismatch == 0 && c.nmse <= thr;
    if (verbose || !ok)
        printf("  %-72s nmse %.2e (max %.0e)  %s\n", desc, c.nmse, thr, ok ? "OK" : "FAIL");
    CHECK(ok, "%s: rc cpu %d cuda %d, guards %s, NaN/Inf mismatches %zu (first at %zu: cpu %g cuda %g), nmse %.3e > %.1e?",
          desc, rc_cpu, rc_gpu, guards ? "intact" : "OVERWRITTEN", c.nonfinite_mismatch, c.first_bad,
          c.nonfinite_mismatch ? ref[c.first_bad] : 0.0, c.nonfinite_mismatch ? got[c.first_bad] : 0.0, c.nmse, thr);
}

/* Both backends must refuse a bad call with the same code (a device-side one read back by sync). */
static void same_error(const char *desc, int rc_cpu, int rc_gpu) {
    if (rc_gpu == KERN_OK) rc_gpu = GPU->sync(kc_gpu);
    if (verbose || rc_cpu != rc_gpu || rc_cpu == KERN_OK)
        printf("  %-72s cpu %d cuda %d  %s\n", desc, rc_cpu, rc_gpu, rc_cpu == rc_gpu && rc_cpu != KERN_OK ? "OK" : "FAIL");
    CHECK(rc_cpu == rc_gpu && rc_cpu != KERN_OK, "%s: cpu returned %d, cuda %d", desc, rc_cpu, rc_gpu);
}

/* Ops (or uses of an op) the CUDA backend answers KERN_EUNSUPPORTED: reported as skipped, by name, never as
 * passed. A case calls unsupported() with the CUDA return code before judging it; verdict() and same_error()
 * count KERN_EUNSUPPORTED as a failure, so an op cannot drop out of the tests by answering it unasked. */
static char skipped[1024];
static int n_skipped;

static bool unsupported(const char *what, int rc_gpu) {
    if (rc_gpu != KERN_EUNSUPPORTED) return false;
    printf("  %-72s SKIP (cuda: not supported yet)\n", what);
    size_t len = strlen(skipped);
    snprintf(skipped + len, sizeof skipped - len, "%s%s", n_skipped++ ? ", " : "", what);
    return true;
}

static void report_skips(void) {
    if (n_skipped) printf("SKIPPED on cuda (KERN_EUNSUPPORTED, %d): %s\n", n_skipped, skipped);
}

static const kern_dtype DTYPES[3] = {KERN_F32, KERN_BF16, KERN_F16};

/* ---------------------------------------------------------------- per-op cases */

static void test_embed(void) {
    struct { int64_t vocab, d, n; } cases[] = {{100, 64, 7}, {50, 100, 1}, {1000, 3200, 33}, {32000, 128, 5}, {3, 1, 4}};
    for (int t = 0; t < 3; t++)
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            int64_t V = cases[c].vocab, d = cases[c].d, n = cases[c].n;
            kern_dtype dt = DTYPES[t];
            void *tbl = rand_weights(dt, (size_t)(V * d), 1.f);
            int32_t *ids = xmalloc((size_t)n * sizeof *ids);
            for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919 + 3) % V);
            ids[n - 1] = (int32_t)(V - 1); /* the last row of the table */
            float *ref = xmalloc((size_t)(n * d) * 4), *got = xmalloc((size_t)(n * d) * 4);
            void *dtbl = up(tbl, (size_t)(V * d) * kern_dtype_size(dt));
            int32_t *dids = up(ids, (size_t)n * sizeof *ids);
            gbuf o = gout((size_t)(n * d), NULL);
            int rc_c = CPU->embed(kc_cpu, ref, tbl, dt, V, d, ids, n);
            int rc_g = GPU->embed(kc_gpu, o.p, dtbl, dt, V, d, dids, n);
            bool guards;
            int rc_f = gfetch(&o, got, &guards);
            char desc[160];
            snprintf(desc, sizeof desc, "embed(%s, vocab=%ld, d=%ld, n=%ld)", kern_dtype_name(dt), (long)V, (long)d, (long)n);
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, guards, ref, got, (size_t)(n * d), 0.0);
            /* an id past the vocabulary: refused (CPU at once, CUDA at the next sync) */
            ids[0] = (int32_t)V;
            GPU->mem_copy(kc_gpu, dids, ids, sizeof *ids, KERN_H2D);
            snprintf(desc, sizeof desc, "embed(%s) id %ld >= vocab %ld", kern_dtype_name(dt), (long)V, (long)V);
            same_error(desc, CPU->embed(kc_cpu, ref, tbl, dt, V, d, ids, n), GPU->embed(kc_gpu, o.p, dtbl, dt, V, d, dids, n));
            gfree(&o); GPU->mem_free(dtbl); GPU->mem_free(dids);
            free(tbl); free(ids); free(ref); free(got);
        }
}

static void test_rmsnorm(void) {
    struct { int64_t n, d; } cases[] = {{1, 64}, {7, 100}, {33, 3200}, {5, 8640}, {3, 1}, {2, 4097}};
    for (int t = 0; t < 3; t++)
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
            for (int inplace = 0; inplace <= 1; inplace++) {
                int64_t n = cases[c].n, d = cases[c].d;
                kern_dtype dt = DTYPES[t];
                float *x = rand_floats((size_t)(n * d), 3.f), *ref = xmalloc((size_t)(n * d) * 4),
                      *got = xmalloc((size_t)(n * d) * 4), rstd_c[64], rstd_g[64];
                if (n > 1) x[d] = NAN; /* row 1 turns NaN on both backends */
                void *w = rand_weights(dt, (size_t)d, 1.f), *dw = up(w, (size_t)d * kern_dtype_size(dt));
                float *dx = inplace ? NULL : up(x, (size_t)(n * d) * 4);
                gbuf o = gout((size_t)(n * d), inplace ? x : NULL), r = gout((size_t)n, NULL);
                int rc_c = CPU->rmsnorm(kc_cpu, ref, rstd_c, x, w, dt, n, d, 1e-6f);
                int rc_g = GPU->rmsnorm(kc_gpu, o.p, r.p, inplace ? o.p : dx, dw, dt, n, d, 1e-6f);
                bool g1, g2;
                int rc_f = gfetch(&o, got, &g1);
                gfetch(&r, rstd_g, &g2);
                char desc[160];
                snprintf(desc, sizeof desc, "rmsnorm(%s, n=%ld, d=%ld%s)", kern_dtype_name(dt), (long)n, (long)d,
                         inplace ? ", in place" : "");
                verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, g1 && g2, ref, got, (size_t)(n * d), 1e-12);
                snprintf(desc, sizeof desc, "rmsnorm(%s, n=%ld, d=%ld) rstd", kern_dtype_name(dt), (long)n, (long)d);
                verdict(desc, rc_c, rc_g, g2, rstd_c, rstd_g, (size_t)n, 1e-12);
                gfree(&o); gfree(&r); GPU->mem_free(dx); GPU->mem_free(dw);
                free(x); free(ref); free(got); free(w);
            }
}

static void test_matmul(void) {
    const int64_t ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 17, 64, 200};
    struct { int64_t n, k; } nk[] = {{5, 7}, {64, 16}, {131, 100}, {333, 257}, {1000, 3200}, {130, 8640}};
    for (int t = 0; t < 3; t++)
        for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
            for (size_t b = 0; b < sizeof nk / sizeof *nk; b++)
                for (int beta = 0; beta <= 1; beta++)
                    for (int mode = 0; mode <= 1; mode++) {
                        int64_t m = ms[a], n = nk[b].n, k = nk[b].k;
                        kern_dtype dt = DTYPES[t];
                        bool gemm16 = m > 8 && dt != KERN_F32; /* the only path the mode changes */
                        if (mode == 1 && !gemm16) continue;
                        float *x = rand_floats((size_t)(m * k), 1.f), *y0 = xmalloc((size_t)(m * n) * 4);
                        for (int64_t i = 0; i < m * n; i++) y0[i] = beta ? frand() : NAN; /* beta 0 ignores y */
                        if (m > 2 && b == 2) x[k + 3] = NAN;     /* row 1 of the output turns NaN */
                        if (m > 2 && b == 3) x[2 * k] = INFINITY; /* row 2: Inf times mixed signs -> NaN or Inf */
                        void *w = rand_weights(dt, (size_t)(n * k), 1.f);
                        float *ref = xmalloc((size_t)(m * n) * 4), *got = xmalloc((size_t)(m * n) * 4);
                        memcpy(ref, y0, (size_t)(m * n) * 4);
                        void *dw = up(w, (size_t)(n * k) * kern_dtype_size(dt));
                        float *dx = up(x, (size_t)(m * k) * 4);
                        gbuf o = gout((size_t)(m * n), y0);
                        kern_cuda_set_gemm(kc_gpu, mode ? KERN_CUDA_GEMM_FAST : KERN_CUDA_GEMM_SPLIT);
                        int rc_c = CPU->matmul(kc_cpu, ref, x, w, dt, m, n, k, (float)beta);
                        int rc_g = GPU->matmul(kc_gpu, o.p, dx, dw, dt, m, n, k, (float)beta);
                        bool guards;
                        int rc_f = gfetch(&o, got, &guards);
                        double thr = !mode ? 1e-9 : dt == KERN_BF16 ? 1e-5 : 2e-7;
                        char desc[160];
                        snprintf(desc, sizeof desc, "matmul(%s, m=%ld, n=%ld, k=%ld, beta=%d, %s)", kern_dtype_name(dt),
                                 (long)m, (long)n, (long)k, beta,
                                 m <= 8 ? "gemv" : dt == KERN_F32 ? "sgemm" : mode ? "fast" : "split");
                        verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, guards, ref, got, (size_t)(m * n), thr);
                        gfree(&o); GPU->mem_free(dw); GPU->mem_free(dx);
                        free(x); free(y0); free(w); free(ref); free(got);
                    }
    kern_cuda_set_gemm(kc_gpu, KERN_CUDA_GEMM_SPLIT);
    float b[8];
    float *d = up(b, sizeof b);
    same_error("matmul k=0", CPU->matmul(kc_cpu, b, b, b, KERN_F32, 1, 1, 0, 0.f),
               GPU->matmul(kc_gpu, d, d, d, KERN_F32, 1, 1, 0, 0.f));
    same_error("matmul beta=0.5", CPU->matmul(kc_cpu, b, b, b, KERN_F32, 1, 1, 1, 0.5f),
               GPU->matmul(kc_gpu, d, d, d, KERN_F32, 1, 1, 1, 0.5f));
    GPU->mem_free(d);
}

static void test_rope(void) {
    struct { int64_t n, heads, hd; float theta, scale; int32_t maxpos; } cases[] = {
        {7, 3, 12, 10000.f, 1.f, 4095}, {5, 4, 100, 10000.f, 1.f, 2047}, {9, 32, 128, 500000.f, 2.f, 16383},
        {3, 2, 64, 10000.f, 8.f, 100000}, {1, 1, 2, 10000.f, 1.f, 7}, {40, 8, 256, 1e6f, 1.f, 32767},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t n = cases[c].n, heads = cases[c].heads, hd = cases[c].hd, len = n * heads * hd;
        int32_t *pos = xmalloc((size_t)n * sizeof *pos);
        for (int64_t i = 0; i < n; i++) pos[i] = (int32_t)(i == n - 1 ? cases[c].maxpos : (i * 37) % (cases[c].maxpos + 1));
        float *x = rand_floats((size_t)len, 1.f), *got = xmalloc((size_t)len * 4);
        int32_t *dpos = up(pos, (size_t)n * sizeof *pos);
        gbuf o = gout((size_t)len, x);
        int rc_c = CPU->rope(kc_cpu, x, n, heads, hd, pos, cases[c].theta, cases[c].scale);
        int rc_g = GPU->rope(kc_gpu, o.p, n, heads, hd, dpos, cases[c].theta, cases[c].scale);
        bool guards;
        int rc_f = gfetch(&o, got, &guards);
        char desc[160];
        snprintf(desc, sizeof desc, "rope(n=%ld, heads=%ld, hd=%ld, theta=%g, scale=%g, max pos %d)", (long)n,
                 (long)heads, (long)hd, cases[c].theta, cases[c].scale, cases[c].maxpos);
        verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, guards, x, got, (size_t)len, 1e-10);
        pos[0] = -1;
        GPU->mem_copy(kc_gpu, dpos, pos, sizeof *pos, KERN_H2D);
        snprintf(desc, sizeof desc, "rope(hd=%ld) negative position", (long)hd);
        same_error(desc, CPU->rope(kc_cpu, x, n, heads, hd, pos, 10000.f, 1.f),
                   GPU->rope(kc_gpu, o.p, n, heads, hd, dpos, 10000.f, 1.f));
        gfree(&o); GPU->mem_free(dpos);
        free(pos); free(x); free(got);
    }
    float b[4];
    float *d = up(b, sizeof b);
    int32_t p0 = 0, *dp = up(&p0, sizeof p0);
    same_error("rope odd head_dim", CPU->rope(kc_cpu, b, 1, 1, 3, &p0, 10000.f, 1.f),
               GPU->rope(kc_gpu, d, 1, 1, 3, dp, 10000.f, 1.f));
    GPU->mem_free(d); GPU->mem_free(dp);
}

/* The kernel settings given with --set (cuda.attn=tc ...), applied to both contexts. */
static const char *settings;

/* Attention prefill in FAST mode: the TF32 tensor-core kernel (--set cuda.attn=tc) rounds operands to TF32
 * (relative 2^-11), measured nmse <= 1.8e-7 on these cases; the bf16 mma.sync one (=mma) rounds q, k, p and v to
 * bf16 (2^-9), measured 5e-6 .. 1.2e-5 on the emulator; the SIMT kernel stays exact in both modes. */
static double att_fast_nmse(void) { return settings && strstr(settings, "cuda.attn=mma") ? 4e-5 : 2e-6; }

static void test_attention(void) {
    struct { int64_t nq, nkv, q0, hq, hkv, hd; } cases[] = {
        /* split-KV decode (nq <= 8) */
        {1, 1, 0, 4, 4, 64}, {1, 37, 36, 8, 2, 100}, {3, 50, 47, 4, 1, 128}, {8, 300, 292, 6, 3, 64},
        {1, 1000, 999, 2, 2, 256}, {1, 20, 19, 2, 1, 6}, {2, 77, 75, 4, 2, 130}, {5, 5, 0, 8, 2, 12},
        {1, 2048, 2047, 32, 32, 100}, {4, 2048, 2044, 8, 2, 128},
        /* flash prefill (nq > 8) */
        {9, 9, 0, 4, 2, 64}, {64, 64, 0, 2, 2, 128}, {100, 100, 0, 4, 1, 100}, {33, 133, 100, 8, 8, 100},
        {70, 70, 0, 2, 1, 256}, {65, 65, 0, 2, 2, 18}, {17, 17, 0, 4, 1, 33}, {300, 2048, 1748, 2, 2, 128},
        {2048, 2048, 0, 4, 2, 100}, {129, 1000, 500, 4, 4, 200},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t nq = cases[c].nq, nkv = cases[c].nkv, q0 = cases[c].q0, hq = cases[c].hq, hkv = cases[c].hkv,
                hd = cases[c].hd;
        int64_t nqd = nq * hq * hd, nkd = nkv * hkv * hd;
        float *q = rand_floats((size_t)nqd, 2.f), *k = rand_floats((size_t)nkd, 2.f), *v = rand_floats((size_t)nkd, 1.f);
        if (c == 2 || c == 13) q[hd + 1] = NAN; /* query row 0, head 1 turns NaN on both backends */
        float *ref = xmalloc((size_t)nqd * 4), *got = xmalloc((size_t)nqd * 4);
        float *dq = up(q, (size_t)nqd * 4), *dk = up(k, (size_t)nkd * 4), *dv = up(v, (size_t)nkd * 4);
        gbuf o = gout((size_t)nqd, NULL);
        float scale = 1.f / sqrtf((float)hd);
        int rc_c = CPU->attention(kc_cpu, ref, NULL, q, k, v, nq, nkv, q0, hq, hkv, hd, scale);
        int rc_g = GPU->attention(kc_gpu, o.p, NULL, dq, dk, dv, nq, nkv, q0, hq, hkv, hd, scale);
        bool guards;
        int rc_f = gfetch(&o, got, &guards);
        char desc[160];
        snprintf(desc, sizeof desc, "attention(nq=%ld, nkv=%ld, q_pos0=%ld, hq=%ld, hkv=%ld, hd=%ld, %s)", (long)nq,
                 (long)nkv, (long)q0, (long)hq, (long)hkv, (long)hd, nq <= 8 ? "split-kv" : "flash");
        verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, guards, ref, got, (size_t)nqd, 1e-9);
        if (nq > 8) { /* FAST mode: one product per tile on the tensor cores (SPLIT above: three) */
            kern_cuda_set_gemm(kc_gpu, KERN_CUDA_GEMM_FAST);
            gfree(&o);
            o = gout((size_t)nqd, NULL);
            rc_g = GPU->attention(kc_gpu, o.p, NULL, dq, dk, dv, nq, nkv, q0, hq, hkv, hd, scale);
            rc_f = gfetch(&o, got, &guards);
            kern_cuda_set_gemm(kc_gpu, KERN_CUDA_GEMM_SPLIT);
            snprintf(desc, sizeof desc, "attention(nq=%ld, nkv=%ld, q_pos0=%ld, hq=%ld, hkv=%ld, hd=%ld, flash, fast)",
                     (long)nq, (long)nkv, (long)q0, (long)hq, (long)hkv, (long)hd);
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, guards, ref, got, (size_t)nqd, att_fast_nmse());
        }
        gfree(&o); GPU->mem_free(dq); GPU->mem_free(dk); GPU->mem_free(dv);
        free(q); free(k); free(v); free(ref); free(got);
    }
    float b[4];
    float *d = up(b, sizeof b);
    same_error("attention queries past the cache", CPU->attention(kc_cpu, b, NULL, b, b, b, 2, 1, 0, 4, 4, 1, 1.f),
               GPU->attention(kc_gpu, d, NULL, d, d, d, 2, 1, 0, 4, 4, 1, 1.f));
    same_error("attention hq not a multiple of hkv", CPU->attention(kc_cpu, b, NULL, b, b, b, 1, 1, 0, 3, 2, 1, 1.f),
               GPU->attention(kc_gpu, d, NULL, d, d, d, 1, 1, 0, 3, 2, 1, 1.f));
    /* CUDA-only limit, documented in kernels.h: head_dim > 256 is refused, never computed wrongly */
    CHECK(GPU->attention(kc_gpu, d, NULL, d, d, d, 1, 1, 0, 1, 1, 320, 1.f) == KERN_ESHAPE, "cuda attention hd 320 refused");
    GPU->mem_free(d);
    /* the log-sum-exp training saves for attention_backward */
    struct { int64_t nq, nkv, q0, hq, hkv, hd; } lc[] = {{3, 50, 47, 4, 1, 128}, {100, 100, 0, 4, 1, 100}};
    for (size_t c = 0; c < sizeof lc / sizeof *lc; c++) {
        int64_t nq = lc[c].nq, nkv = lc[c].nkv, nqd = nq * lc[c].hq * lc[c].hd, nkd = nkv * lc[c].hkv * lc[c].hd;
        float *q = rand_floats((size_t)nqd, 2.f), *k = rand_floats((size_t)nkd, 2.f), *v = rand_floats((size_t)nkd, 1.f);
        float *out = xmalloc((size_t)nqd * 4), *lse = xmalloc((size_t)(nq * lc[c].hq) * 4),
              *got = xmalloc((size_t)nqd * 4), *lgot = xmalloc((size_t)(nq * lc[c].hq) * 4);
        float *dq = up(q, (size_t)nqd * 4), *dk = up(k, (size_t)nkd * 4), *dv = up(v, (size_t)nkd * 4);
        gbuf o = gout((size_t)nqd, NULL), l = gout((size_t)(nq * lc[c].hq), NULL);
        float scale = 1.f / sqrtf((float)lc[c].hd);
        int rc_g = GPU->attention(kc_gpu, o.p, l.p, dq, dk, dv, nq, nkv, lc[c].q0, lc[c].hq, lc[c].hkv, lc[c].hd, scale);
        if (!unsupported("attention with lse (training)", rc_g)) {
            int rc_c = CPU->attention(kc_cpu, out, lse, q, k, v, nq, nkv, lc[c].q0, lc[c].hq, lc[c].hkv, lc[c].hd, scale);
            bool g1, g2;
            int rc_f = gfetch(&o, got, &g1);
            gfetch(&l, lgot, &g2);
            char desc[160];
            snprintf(desc, sizeof desc, "attention(nq=%ld, nkv=%ld) with lse: out", (long)nq, (long)nkv);
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, g1, out, got, (size_t)nqd, 1e-9);
            snprintf(desc, sizeof desc, "attention(nq=%ld, nkv=%ld) with lse: lse", (long)nq, (long)nkv);
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, g2, lse, lgot, (size_t)(nq * lc[c].hq), 1e-12);
        }
        gfree(&o); gfree(&l); GPU->mem_free(dq); GPU->mem_free(dk); GPU->mem_free(dv);
        free(q); free(k); free(v); free(out); free(lse); free(got); free(lgot);
        if (rc_g == KERN_EUNSUPPORTED) break;
    }
}

/* attention_mem: memory rows in f32/bf16/f16, dense or selected ids (-1 skipped), CUDA against the CPU.
 * pat: 0 = every 7th id -1, the rest spread over the memory; 1 = ids past the first third of each list are -1,
 * so with several splits some splits see only skipped ids. The big dense decode case (8000 rows) runs on
 * several splits even with few SMs, so the partial/combine path is checked, not only the single-split one. */
static void test_attention_mem(void) {
    struct { int64_t nq, nkv, q0, hq, hkv, hd, n_mem, n_sel; kern_dtype dt; int pat; } cases[] = {
        {1, 1, 0, 4, 4, 16, 0, 0, KERN_BF16, 0},      {1, 37, 36, 4, 2, 100, 1000, 0, KERN_BF16, 0},
        {70, 90, 20, 4, 2, 25, 37, 0, KERN_F32, 0},   {3, 20, 17, 2, 1, 128, 500, 4, KERN_F16, 0},
        {9, 9, 0, 4, 2, 64, 300, 128, KERN_BF16, 0},  {1, 5, 4, 2, 2, 16, 1, 1, KERN_F32, 0},
        {1, 64, 63, 4, 2, 128, 1000, 0, KERN_F16, 0}, {1, 3, 2, 4, 2, 128, 0, 0, KERN_F32, 0},
        {70, 100, 30, 2, 1, 100, 1000, 0, KERN_BF16, 0}, {70, 80, 10, 4, 2, 16, 37, 4, KERN_F32, 0},
        {1, 10, 9, 4, 2, 25, 1000, 128, KERN_F16, 0}, {70, 75, 5, 4, 2, 128, 1, 1, KERN_BF16, 0},
        {2, 4, 2, 4, 2, 16, 0, 4, KERN_F32, 0},       {70, 71, 1, 4, 2, 100, 1000, 128, KERN_F16, 0},
        {1, 8, 7, 2, 1, 16, 8000, 0, KERN_BF16, 0},   {1, 4, 3, 4, 2, 25, 3000, 2000, KERN_F32, 1},
        {1, 6, 5, 4, 2, 100, 37, 1, KERN_F16, 0},     {1, 2, 1, 4, 2, 16, 1, 0, KERN_F16, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t nq = cases[c].nq, nkv = cases[c].nkv, q0 = cases[c].q0, hq = cases[c].hq, hkv = cases[c].hkv,
                hd = cases[c].hd, nm = cases[c].n_mem, ns = cases[c].n_sel;
        kern_dtype dt = cases[c].dt;
        size_t es = kern_dtype_size(dt), mrows = (size_t)(nm * hd);
        int64_t nqd = nq * hq * hd, nkd = nkv * hkv * hd;
        float *q = rand_floats((size_t)nqd, 2.f), *k = rand_floats((size_t)nkd, 2.f), *v = rand_floats((size_t)nkd, 1.f);
        float *mf = rand_floats(2 * (size_t)hkv * mrows + 1, 1.f);
        uint16_t *mh = xmalloc((2 * (size_t)hkv * mrows + 1) * 2);
        for (size_t i = 0; i < 2 * (size_t)hkv * mrows; i++)
            mh[i] = dt == KERN_BF16 ? kern_f32_to_bf16(mf[i]) : kern_f32_to_f16(mf[i]);
        const char *host_mem = dt == KERN_F32 ? (const char *)mf : (const char *)mh;
        char *dmem = up(host_mem, 2 * (size_t)hkv * mrows * es + 4);
        const void *hk[8], *hv[8], *dkp[8], *dvp[8];
        for (int64_t g = 0; g < hkv; g++) {
            hk[g] = host_mem + (size_t)g * mrows * es, hv[g] = host_mem + ((size_t)hkv + (size_t)g) * mrows * es;
            dkp[g] = dmem + (size_t)g * mrows * es, dvp[g] = dmem + ((size_t)hkv + (size_t)g) * mrows * es;
        }
        int64_t *sel = NULL, *dsel = NULL;
        if (ns) {
            sel = xmalloc((size_t)(nq * hq * ns) * sizeof *sel);
            for (int64_t i = 0; i < nq * hq * ns; i++) {
                bool skip = cases[c].pat ? i % ns >= ns / 3 : i % 7 == 3;
                sel[i] = skip || nm == 0 ? -1 : (i * 7919) % nm;
            }
            dsel = up(sel, (size_t)(nq * hq * ns) * sizeof *sel);
        }
        float *ref = xmalloc((size_t)nqd * 4), *got = xmalloc((size_t)nqd * 4);
        float *dq = up(q, (size_t)nqd * 4), *dk = up(k, (size_t)nkd * 4), *dv = up(v, (size_t)nkd * 4);
        gbuf o = gout((size_t)nqd, NULL);
        float scale = 1.f / sqrtf((float)hd);
        int rc_c = CPU->attention_mem(kc_cpu, ref, q, k, v, nq, nkv, q0, hq, hkv, hd, scale, hk, hv, dt, nm, sel, ns);
        int rc_g = GPU->attention_mem(kc_gpu, o.p, dq, dk, dv, nq, nkv, q0, hq, hkv, hd, scale, dkp, dvp, dt, nm, dsel, ns);
        bool guards;
        int rc_f = gfetch(&o, got, &guards);
        char desc[200];
        snprintf(desc, sizeof desc, "attention_mem(nq=%ld, nkv=%ld, q_pos0=%ld, hq=%ld, hkv=%ld, hd=%ld, n_mem=%ld, "
                 "n_sel=%ld%s, %s)", (long)nq, (long)nkv, (long)q0, (long)hq, (long)hkv, (long)hd, (long)nm, (long)ns,
                 cases[c].pat ? " tail -1" : "", dt == KERN_F32 ? "f32" : dt == KERN_BF16 ? "bf16" : "f16");
        verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, guards, ref, got, (size_t)nqd, 1e-9);
        gfree(&o); GPU->mem_free(dq); GPU->mem_free(dk); GPU->mem_free(dv); GPU->mem_free(dmem); GPU->mem_free(dsel);
        free(q); free(k); free(v); free(mf); free(mh); free(sel); free(ref); free(got);
    }
    /* refusals: shapes on both sides, bad selected ids (CPU up front, CUDA deferred to the next sync) */
    float b[64] = {0};
    float *d = up(b, sizeof b);
    const void *hp[2] = {b, b}, *dp[2] = {d, d};
    same_error("attention_mem queries past the cache",
               CPU->attention_mem(kc_cpu, b, b, b, b, 2, 1, 0, 4, 4, 1, 1.f, hp, hp, KERN_F32, 1, NULL, 0),
               GPU->attention_mem(kc_gpu, d, d, d, d, 2, 1, 0, 4, 4, 1, 1.f, dp, dp, KERN_F32, 1, NULL, 0));
    same_error("attention_mem hq not a multiple of hkv",
               CPU->attention_mem(kc_cpu, b, b, b, b, 1, 1, 0, 3, 2, 1, 1.f, hp, hp, KERN_F32, 1, NULL, 0),
               GPU->attention_mem(kc_gpu, d, d, d, d, 1, 1, 0, 3, 2, 1, 1.f, dp, dp, KERN_F32, 1, NULL, 0));
    same_error("attention_mem memory without row pointers",
               CPU->attention_mem(kc_cpu, b, b, b, b, 1, 1, 0, 1, 1, 1, 1.f, NULL, NULL, KERN_F32, 1, NULL, 0),
               GPU->attention_mem(kc_gpu, d, d, d, d, 1, 1, 0, 1, 1, 1, 1.f, NULL, NULL, KERN_F32, 1, NULL, 0));
    same_error("attention_mem bad memory dtype",
               CPU->attention_mem(kc_cpu, b, b, b, b, 1, 1, 0, 1, 1, 1, 1.f, hp, hp, (kern_dtype)7, 1, NULL, 0),
               GPU->attention_mem(kc_gpu, d, d, d, d, 1, 1, 0, 1, 1, 1, 1.f, dp, dp, (kern_dtype)7, 1, NULL, 0));
    {
        const int64_t hs_empty[1] = {0};
        int64_t *ds = up(hs_empty, sizeof hs_empty);
        same_error("attention_mem sel with n_sel 0",
                   CPU->attention_mem(kc_cpu, b, b, b, b, 1, 1, 0, 1, 1, 1, 1.f, hp, hp, KERN_F32, 1, hs_empty, 0),
                   GPU->attention_mem(kc_gpu, d, d, d, d, 1, 1, 0, 1, 1, 1, 1.f, dp, dp, KERN_F32, 1, ds, 0));
        GPU->mem_free(ds);
    }
    /* bad ids: n_mem 4, 2 queries x 2 heads x 3 ids; one id == n_mem, then one id == -2 */
    for (int bad = 0; bad < 2; bad++) {
        int64_t hs[12] = {0, 1, -1, 3, 2, 1, 0, 0, 3, -1, 2, 1};
        hs[bad ? 9 : 4] = bad ? -2 : 4;
        int64_t *ds = up(hs, sizeof hs);
        char desc[96];
        snprintf(desc, sizeof desc, "attention_mem selected id %s", bad ? "-2" : "== n_mem");
        same_error(desc,
                   CPU->attention_mem(kc_cpu, b, b, b, b, 2, 2, 0, 2, 1, 4, 1.f, hp, hp, KERN_F32, 4, hs, 3),
                   GPU->attention_mem(kc_gpu, d, d, d, d, 2, 2, 0, 2, 1, 4, 1.f, dp, dp, KERN_F32, 4, ds, 3));
        GPU->mem_free(ds);
    }
    {   /* the error word was consumed: a valid call right after succeeds */
        int64_t hs[12] = {0, 1, -1, 3, 2, 1, 0, 0, 3, -1, 2, 1};
        int64_t *ds = up(hs, sizeof hs);
        int rc = GPU->attention_mem(kc_gpu, d, d, d, d, 2, 2, 0, 2, 1, 4, 1.f, dp, dp, KERN_F32, 4, ds, 3);
        if (rc == KERN_OK) rc = GPU->sync(kc_gpu);
        CHECK(rc == KERN_OK, "attention_mem valid call after a bad-id one: %d", rc);
        GPU->mem_free(ds);
    }
    /* CUDA-only limits, documented in cuda_attention_mem.cu: refused, never computed wrongly */
    CHECK(GPU->attention_mem(kc_gpu, d, d, d, d, 1, 1, 0, 1, 1, 320, 1.f, dp, dp, KERN_F32, 0, NULL, 0) ==
              KERN_ESHAPE, "cuda attention_mem hd 320 refused");
    CHECK(GPU->attention_mem(kc_gpu, d, d, d, d, 1, 1, 0, 200, 200, 1, 1.f, dp, dp, KERN_F32, 0, NULL, 0) ==
              KERN_ESHAPE, "cuda attention_mem hkv 200 refused");
    GPU->mem_free(d);
}

/* topk_ip: ids must match the CPU except where two scores tie within fp32 rounding, scores within 1e-10 nmse;
 * keys in every dtype; ties (duplicated key rows) go to the lower id; fewer keys than k pad with -1/-inf; the
 * output row stride (ldo > k) and query stride (ldq > hd) are honoured; guard bytes catch writes past the rows. */
static void test_topk_ip(void) {
    struct { int64_t nq, ldq_extra, n_keys, hd, k, ldo_extra; kern_dtype dt; bool dup; } cases[] = {
        {1, 0, 1000, 64, 128, 0, KERN_BF16, false}, {37, 3, 5000, 100, 32, 5, KERN_F32, false},
        {5, 0, 100, 16, 128, 0, KERN_F16, false},   {64, 0, 300, 128, 1, 0, KERN_BF16, false},
        {3, 0, 2000, 25, 1024, 0, KERN_F32, false}, {4, 0, 512, 64, 64, 0, KERN_BF16, true},
        {2, 0, 0, 16, 8, 0, KERN_F32, false},       {300, 0, 4096, 64, 128, 128, KERN_BF16, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t nq = cases[c].nq, hd = cases[c].hd, ldq = hd + cases[c].ldq_extra, n = cases[c].n_keys, k = cases[c].k,
                ldo = k + cases[c].ldo_extra;
        kern_dtype dt = cases[c].dt;
        size_t es = kern_dtype_size(dt);
        float *q = rand_floats((size_t)(nq * ldq), 1.f), *kf = rand_floats((size_t)(n * hd) + 1, 1.f);
        if (cases[c].dup) /* rows 2j and 2j+1 equal: every score comes twice */
            for (int64_t j = 1; j < n; j += 2) memcpy(kf + j * hd, kf + (j - 1) * hd, (size_t)hd * 4);
        uint16_t *kh = xmalloc(((size_t)(n * hd) + 1) * 2);
        for (int64_t i = 0; i < n * hd; i++) kh[i] = dt == KERN_BF16 ? kern_f32_to_bf16(kf[i]) : kern_f32_to_f16(kf[i]);
        const void *keys = dt == KERN_F32 ? (const void *)kf : (const void *)kh;
        size_t no = (size_t)(nq * ldo);
        int64_t *ids_c = xmalloc(no * 8), *ids_g = xmalloc(no * 8);
        float *sc_c = rand_floats(no, 1.f), *sc_g = xmalloc(no * 4);
        memcpy(sc_g, sc_c, no * 4); /* the ldo gaps keep their values on both sides */
        for (size_t i = 0; i < no; i++) ids_c[i] = ids_g[i] = -7;
        float *dq = up(q, (size_t)(nq * ldq) * 4);
        void *dkeys = up(keys, (size_t)(n * hd) * es + 4);
        int64_t *dids = up(ids_g, no * 8);
        gbuf o = gout(no, sc_c);
        int rc_c = CPU->topk_ip(kc_cpu, ids_c, sc_c, ldo, q, nq, ldq, keys, dt, n, hd, k);
        int rc_g = GPU->topk_ip(kc_gpu, dids, o.p, ldo, dq, nq, ldq, dkeys, dt, n, hd, k);
        bool guards = false;
        if (rc_g == KERN_OK) rc_g = gfetch(&o, sc_g, &guards);
        if (rc_g == KERN_OK) rc_g = GPU->mem_copy(kc_gpu, ids_g, dids, no * 8, KERN_D2H);
        /* an id may differ only where the two sides' i-th best scores are a near-tie (fp32 summation order) */
        size_t id_bad = 0, swaps = 0, first = (size_t)-1;
        for (size_t i = 0; i < no; i++) {
            if (ids_c[i] == ids_g[i]) continue;
            bool tie = rc_g == KERN_OK && fabsf(sc_c[i] - sc_g[i]) <= 1e-5f * fabsf(sc_c[i]) + 1e-6f;
            if (tie) swaps++;
            else if (id_bad++ == 0) first = i;
        }
        if (swaps && verbose) printf("    (%zu ids swapped at near-tied scores)\n", swaps);
        char desc[200];
        snprintf(desc, sizeof desc, "topk_ip(nq=%ld, ldq=%ld, n_keys=%ld, hd=%ld, k=%ld, ldo=%ld, %s%s)", (long)nq,
                 (long)ldq, (long)n, (long)hd, (long)k, (long)ldo, kern_dtype_name(dt), cases[c].dup ? ", ties" : "");
        verdict(desc, rc_c, rc_g, guards, sc_c, sc_g, no, 1e-10);
        CHECK(id_bad == 0, "%s: %zu ids differ (first at %zu: cpu %ld cuda %ld)", desc, id_bad, first,
              first != (size_t)-1 ? (long)ids_c[first] : 0L, first != (size_t)-1 ? (long)ids_g[first] : 0L);
        if (cases[c].dup && k > 1) /* a tied pair is taken lower id first */
            CHECK(ids_c[1] == ids_c[0] + 1 && ids_c[0] % 2 == 0, "%s: tie order %ld, %ld", desc, (long)ids_c[0],
                  (long)ids_c[1]);
        free(q), free(kf), free(kh), free(ids_c), free(ids_g), free(sc_c), free(sc_g);
        GPU->mem_free(dq), GPU->mem_free(dkeys), GPU->mem_free(dids), gfree(&o);
    }
    float b[4] = {0};
    int64_t hi[4];
    float *d = up(b, sizeof b);
    int64_t *di = up(hi, sizeof hi);
    same_error("topk_ip k 0", CPU->topk_ip(kc_cpu, hi, b, 1, b, 1, 1, b, KERN_F32, 1, 1, 0),
               GPU->topk_ip(kc_gpu, di, d, 1, d, 1, 1, d, KERN_F32, 1, 1, 0));
    same_error("topk_ip ldo < k", CPU->topk_ip(kc_cpu, hi, b, 1, b, 1, 1, b, KERN_F32, 1, 1, 2),
               GPU->topk_ip(kc_gpu, di, d, 1, d, 1, 1, d, KERN_F32, 1, 1, 2));
    same_error("topk_ip ldq < hd", CPU->topk_ip(kc_cpu, hi, b, 1, b, 1, 1, b, KERN_F32, 1, 2, 1),
               GPU->topk_ip(kc_gpu, di, d, 1, d, 1, 1, d, KERN_F32, 1, 2, 1));
    same_error("topk_ip bad dtype", CPU->topk_ip(kc_cpu, hi, b, 1, b, 1, 1, b, (kern_dtype)7, 1, 1, 1),
               GPU->topk_ip(kc_gpu, di, d, 1, d, 1, 1, d, (kern_dtype)7, 1, 1, 1));
    /* CUDA-only limit, documented in cuda_topk.cu: refused, never computed wrongly */
    CHECK(GPU->topk_ip(kc_gpu, di, d, 2000, d, 1, 1, d, KERN_F32, 1, 1, 2000) == KERN_ESHAPE, "cuda topk_ip k 2000 "
                                                                                             "refused");
    GPU->mem_free(d), GPU->mem_free(di);
}

/* ivf_scan_topk: the same comparison as topk_ip over the rows of each query's probed cells. The cells partition a
 * random subset of the rows (ids in random order, lists with room between them, as the mirror's capacity blocks
 * leave); each query probes distinct random cells, some probes -1; one case has tied rows, one fewer rows than k.
 * Bad probes, row ids and max_scan are refused on both sides (CUDA: deferred to the sync). */
static void test_ivf_scan_topk(void) {
    struct { int64_t nq, ldq_extra, n_keys, hd, cells, nprobe, k, ldo_extra; kern_dtype dt; bool dup; } cases[] = {
        {1, 0, 3000, 64, 24, 8, 128, 0, KERN_BF16, false},  {37, 3, 5000, 100, 40, 5, 32, 5, KERN_F32, false},
        {9, 0, 800, 16, 12, 4, 64, 0, KERN_F16, false},     {64, 0, 2000, 128, 16, 3, 1, 0, KERN_BF16, false},
        {5, 0, 600, 32, 6, 6, 1024, 0, KERN_F32, false},    {4, 0, 1024, 64, 8, 4, 64, 0, KERN_BF16, true},
        {3, 0, 300, 16, 50, 2, 100, 0, KERN_F32, false},    {100, 0, 4096, 64, 64, 16, 128, 128, KERN_BF16, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t nq = cases[c].nq, hd = cases[c].hd, ldq = hd + cases[c].ldq_extra, n = cases[c].n_keys, k = cases[c].k,
                ldo = k + cases[c].ldo_extra, nc = cases[c].cells, np = cases[c].nprobe;
        kern_dtype dt = cases[c].dt;
        size_t es = kern_dtype_size(dt);
        float *q = rand_floats((size_t)(nq * ldq), 1.f), *kf = rand_floats((size_t)(n * hd) + 1, 1.f);
        if (cases[c].dup)
            for (int64_t j = 1; j < n; j += 2) memcpy(kf + j * hd, kf + (j - 1) * hd, (size_t)hd * 4);
        uint16_t *kh = xmalloc(((size_t)(n * hd) + 1) * 2);
        for (int64_t i = 0; i < n * hd; i++) kh[i] = dt == KERN_BF16 ? kern_f32_to_bf16(kf[i]) : kern_f32_to_f16(kf[i]);
        const void *keys = dt == KERN_F32 ? (const void *)kf : (const void *)kh;
        /* rows shuffled, 8 in 10 dealt to random cells; each cell's list placed with 7 free slots after it */
        int32_t *perm = xmalloc((size_t)n * 4), *start = xmalloc((size_t)nc * 4), *len = xmalloc((size_t)nc * 4),
                *cell_of = xmalloc((size_t)n * 4), *rows = xmalloc(((size_t)n + 8 * (size_t)nc) * 4);
        for (int64_t i = 0; i < n; i++) perm[i] = (int32_t)i;
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)((frand() + 1.f) * 0.5f * (float)(i + 1)) % (i + 1);
            int32_t t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        memset(len, 0, (size_t)nc * 4);
        for (int64_t i = 0; i < n; i++) { /* cell_of[row]: its cell, or -1 */
            cell_of[i] = frand() < 0.8f ? (int32_t)((int64_t)((frand() + 1.f) * 0.5f * (float)nc) % nc) : -1;
            if (cell_of[i] >= 0) len[cell_of[i]]++;
        }
        for (int64_t ci = 0, at = 0; ci < nc; ci++) start[ci] = (int32_t)at, at += len[ci] + 7, len[ci] = 0;
        for (int64_t i = 0; i < n; i++) /* rows dealt in shuffled order: lists are not sorted by id */
            if (cell_of[perm[i]] >= 0) rows[start[cell_of[perm[i]]] + len[cell_of[perm[i]]]++] = perm[i];
        int64_t n_rows = start[nc - 1] + len[nc - 1] + 7;
        for (int64_t ci = 0; ci < nc; ci++)
            for (int j = 0; j < 7; j++) rows[start[ci] + len[ci] + j] = -5; /* free slots: never read */
        int64_t *probe = xmalloc((size_t)(nq * np) * 8), max_scan = 0;
        for (int64_t i = 0; i < nq; i++) {
            int64_t total = 0;
            for (int64_t p = 0; p < np; p++) {
                int64_t pick;
                bool dup;
                do {
                    pick = (int64_t)((frand() + 1.f) * 0.5f * (float)nc) % nc;
                    dup = false;
                    for (int64_t b = 0; b < p; b++) dup |= probe[i * np + b] == pick;
                } while (dup);
                probe[i * np + p] = p == np - 1 && np > 1 && i % 3 == 1 ? -1 : pick;
                total += probe[i * np + p] >= 0 ? len[pick] : 0;
            }
            max_scan = total > max_scan ? total : max_scan;
        }
        size_t no = (size_t)(nq * ldo);
        int64_t *ids_c = xmalloc(no * 8), *ids_g = xmalloc(no * 8);
        float *sc_c = rand_floats(no, 1.f), *sc_g = xmalloc(no * 4);
        memcpy(sc_g, sc_c, no * 4);
        for (size_t i = 0; i < no; i++) ids_c[i] = ids_g[i] = -7;
        float *dq = up(q, (size_t)(nq * ldq) * 4);
        void *dkeys = up(keys, (size_t)(n * hd) * es + 4);
        int64_t *dids = up(ids_g, no * 8), *dprobe = up(probe, (size_t)(nq * np) * 8);
        int32_t *dstart = up(start, (size_t)nc * 4), *dlen = up(len, (size_t)nc * 4), *drows = up(rows, (size_t)n_rows * 4);
        gbuf o = gout(no, sc_c);
        int rc_c = CPU->ivf_scan_topk(kc_cpu, ids_c, sc_c, ldo, q, nq, ldq, keys, dt, n, hd, probe, np, start, len, nc,
                                      rows, max_scan, k);
        int rc_g = GPU->ivf_scan_topk(kc_gpu, dids, o.p, ldo, dq, nq, ldq, dkeys, dt, n, hd, dprobe, np, dstart, dlen,
                                      nc, drows, max_scan, k);
        char desc[200];
        snprintf(desc, sizeof desc, "ivf_scan_topk(nq=%ld, n_keys=%ld, hd=%ld, cells=%ld, nprobe=%ld, k=%ld, ldo=%ld, %s%s)",
                 (long)nq, (long)n, (long)hd, (long)nc, (long)np, (long)k, (long)ldo, kern_dtype_name(dt),
                 cases[c].dup ? ", ties" : "");
        if (!unsupported(desc, rc_g)) {
            bool guards = false;
            if (rc_g == KERN_OK) rc_g = gfetch(&o, sc_g, &guards);
            if (rc_g == KERN_OK) rc_g = GPU->mem_copy(kc_gpu, ids_g, dids, no * 8, KERN_D2H);
            size_t id_bad = 0, swaps = 0, first = (size_t)-1, found = 0;
            for (size_t i = 0; i < no; i++) {
                found += ids_c[i] >= 0 && (int64_t)(i % (size_t)ldo) < k;
                if (ids_c[i] == ids_g[i]) continue;
                bool tie = rc_g == KERN_OK && fabsf(sc_c[i] - sc_g[i]) <= 1e-5f * fabsf(sc_c[i]) + 1e-6f;
                if (tie) swaps++;
                else if (id_bad++ == 0) first = i;
            }
            if (swaps && verbose) printf("    (%zu ids swapped at near-tied scores)\n", swaps);
            verdict(desc, rc_c, rc_g, guards, sc_c, sc_g, no, 1e-10);
            CHECK(id_bad == 0, "%s: %zu ids differ (first at %zu: cpu %ld cuda %ld)", desc, id_bad, first,
                  first != (size_t)-1 ? (long)ids_c[first] : 0L, first != (size_t)-1 ? (long)ids_g[first] : 0L);
            CHECK(found > 0, "%s: the case found no rows at all", desc);
            /* every id returned lies in a cell its query probed */
            bool in_probed = true;
            for (int64_t i = 0; i < nq; i++)
                for (int64_t j = 0; j < k; j++) {
                    int64_t id = ids_c[i * ldo + j];
                    if (id < 0) continue;
                    bool hit = false;
                    for (int64_t p = 0; p < np; p++) hit |= probe[i * np + p] == cell_of[id] && cell_of[id] >= 0;
                    in_probed &= hit;
                }
            CHECK(in_probed, "%s: an id outside the probed cells", desc);
            if (cases[c].dup) /* a tied pair, both found, is taken lower id first, on each side */
                for (size_t i = 0; i + 1 < no; i++) {
                    if (ids_c[i] >= 0 && ids_c[i + 1] >= 0 && sc_c[i] == sc_c[i + 1])
                        CHECK(ids_c[i] < ids_c[i + 1], "%s: cpu tie order %ld, %ld", desc, (long)ids_c[i],
                              (long)ids_c[i + 1]);
                    if (ids_g[i] >= 0 && ids_g[i + 1] >= 0 && sc_g[i] == sc_g[i + 1])
                        CHECK(ids_g[i] < ids_g[i + 1], "%s: cuda tie order %ld, %ld", desc, (long)ids_g[i],
                              (long)ids_g[i + 1]);
                }
        }
        /* refused on both sides: max_scan one row short, a probe past the cells, a row id past the keys */
        if (max_scan > 0) {
            same_error("ivf_scan_topk max_scan too small",
                       CPU->ivf_scan_topk(kc_cpu, ids_c, sc_c, ldo, q, nq, ldq, keys, dt, n, hd, probe, np, start, len,
                                          nc, rows, max_scan - 1, k),
                       GPU->ivf_scan_topk(kc_gpu, dids, o.p, ldo, dq, nq, ldq, dkeys, dt, n, hd, dprobe, np, dstart,
                                          dlen, nc, drows, max_scan - 1, k));
        }
        if (c == 0) {
            int64_t bad_probe = nc;
            int64_t *dbad = up(&bad_probe, 8);
            same_error("ivf_scan_topk probe past the cells",
                       CPU->ivf_scan_topk(kc_cpu, ids_c, sc_c, ldo, q, 1, ldq, keys, dt, n, hd, &bad_probe, 1, start,
                                          len, nc, rows, max_scan, k),
                       GPU->ivf_scan_topk(kc_gpu, dids, o.p, ldo, dq, 1, ldq, dkeys, dt, n, hd, dbad, 1, dstart, dlen,
                                          nc, drows, max_scan, k));
            GPU->mem_free(dbad);
            /* the first row of query 0's first probed cell made n_keys */
            int32_t *rows_bad = xmalloc((size_t)n_rows * 4);
            memcpy(rows_bad, rows, (size_t)n_rows * 4);
            CHECK(len[probe[0]] > 0, "the probed cell holds rows");
            rows_bad[start[probe[0]]] = (int32_t)n;
            int32_t *drb = up(rows_bad, (size_t)n_rows * 4);
            same_error("ivf_scan_topk row id out of range",
                       CPU->ivf_scan_topk(kc_cpu, ids_c, sc_c, ldo, q, nq, ldq, keys, dt, n, hd, probe, np, start, len,
                                          nc, rows_bad, max_scan, k),
                       GPU->ivf_scan_topk(kc_gpu, dids, o.p, ldo, dq, nq, ldq, dkeys, dt, n, hd, dprobe, np, dstart,
                                          dlen, nc, drb, max_scan, k));
            GPU->mem_free(drb), free(rows_bad);
            same_error("ivf_scan_topk k 0",
                       CPU->ivf_scan_topk(kc_cpu, ids_c, sc_c, ldo, q, nq, ldq, keys, dt, n, hd, probe, np, start, len,
                                          nc, rows, max_scan, 0),
                       GPU->ivf_scan_topk(kc_gpu, dids, o.p, ldo, dq, nq, ldq, dkeys, dt, n, hd, dprobe, np, dstart,
                                          dlen, nc, drows, max_scan, 0));
            /* CUDA-only limits, documented in cuda_ivf.cu: refused, never computed wrongly */
            CHECK(GPU->ivf_scan_topk(kc_gpu, dids, o.p, ldo, dq, nq, 300, dkeys, dt, n, 300, dprobe, np, dstart, dlen,
                                     nc, drows, max_scan, k) == KERN_ESHAPE,
                  "cuda ivf_scan_topk hd 300 refused");
        }
        free(q), free(kf), free(kh), free(perm), free(start), free(len), free(cell_of), free(rows), free(probe);
        free(ids_c), free(ids_g), free(sc_c), free(sc_g);
        GPU->mem_free(dq), GPU->mem_free(dkeys), GPU->mem_free(dids), GPU->mem_free(dprobe), GPU->mem_free(dstart);
        GPU->mem_free(dlen), GPU->mem_free(drows), gfree(&o);
    }
}

/* scatter_i32: entries land where their index says, the rest of dst untouched; a bad index refused by both. */
static void test_scatter_i32(void) {
    const int64_t n_dst = 5000, ns[] = {0, 1, 777, 4999};
    int32_t *base = xmalloc((size_t)n_dst * 4), *ref = xmalloc((size_t)n_dst * 4), *got = xmalloc((size_t)n_dst * 4);
    int32_t *perm = xmalloc((size_t)n_dst * 4), *src = xmalloc((size_t)n_dst * 4);
    for (int64_t i = 0; i < n_dst; i++) base[i] = (int32_t)(i * 7 + 3), perm[i] = (int32_t)i, src[i] = (int32_t)(-i - 11);
    for (int64_t i = n_dst - 1; i > 0; i--) {
        int64_t j = (int64_t)((frand() + 1.f) * 0.5f * (float)(i + 1)) % (i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (size_t c = 0; c < sizeof ns / sizeof *ns; c++) {
        int64_t n = ns[c];
        memcpy(ref, base, (size_t)n_dst * 4);
        int32_t *ddst = up(base, (size_t)n_dst * 4), *didx = up(perm, (size_t)n_dst * 4), *dsrc = up(src, (size_t)n_dst * 4);
        int rc_c = CPU->scatter_i32(kc_cpu, ref, n_dst, perm, src, n);
        int rc_g = GPU->scatter_i32(kc_gpu, ddst, n_dst, didx, dsrc, n);
        if (rc_g == KERN_OK) rc_g = GPU->mem_copy(kc_gpu, got, ddst, (size_t)n_dst * 4, KERN_D2H);
        char desc[100];
        snprintf(desc, sizeof desc, "scatter_i32(n_dst=%ld, n=%ld)", (long)n_dst, (long)n);
        bool same = rc_c == KERN_OK && rc_g == KERN_OK && !memcmp(ref, got, (size_t)n_dst * 4);
        if (verbose || !same) printf("  %-72s %s\n", desc, same ? "OK" : "FAIL");
        CHECK(same, "%s: rc cpu %d cuda %d, outputs %s", desc, rc_c, rc_g, same ? "same" : "differ");
        GPU->mem_free(ddst), GPU->mem_free(didx), GPU->mem_free(dsrc);
    }
    int32_t bad[2] = {3, (int32_t)n_dst}, v[2] = {1, 2};
    int32_t *ddst = up(base, (size_t)n_dst * 4), *dbad = up(bad, sizeof bad), *dv = up(v, sizeof v);
    same_error("scatter_i32 index past dst", CPU->scatter_i32(kc_cpu, ref, n_dst, bad, v, 2),
               GPU->scatter_i32(kc_gpu, ddst, n_dst, dbad, dv, 2));
    CHECK(ref[3] != 1, "cpu scatter_i32 wrote before refusing");
    GPU->mem_free(ddst), GPU->mem_free(dbad), GPU->mem_free(dv);
    free(base), free(ref), free(got), free(perm), free(src);
}

static void test_swiglu(void) {
    const int64_t ns[] = {1, 17, 1000003, 4096};
    for (size_t c = 0; c < sizeof ns / sizeof *ns; c++)
        for (int alias = 0; alias <= 1; alias++) {
            int64_t n = ns[c];
            float *g = rand_floats((size_t)n, 8.f), *u = rand_floats((size_t)n, 1.f), *ref = xmalloc((size_t)n * 4),
                  *got = xmalloc((size_t)n * 4);
            if (n > 3) { g[1] = NAN; u[2] = INFINITY; g[3] = -INFINITY; }
            float *du = up(u, (size_t)n * 4), *dg = alias ? NULL : up(g, (size_t)n * 4);
            gbuf o = gout((size_t)n, alias ? g : NULL);
            int rc_c = CPU->swiglu(kc_cpu, ref, g, u, n);
            int rc_g = GPU->swiglu(kc_gpu, o.p, alias ? o.p : dg, du, n);
            bool guards;
            int rc_f = gfetch(&o, got, &guards);
            char desc[160];
            snprintf(desc, sizeof desc, "swiglu(n=%ld%s)", (long)n, alias ? ", h aliases gate" : "");
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, guards, ref, got, (size_t)n, 1e-12);
            gfree(&o); GPU->mem_free(du); GPU->mem_free(dg);
            free(g); free(u); free(ref); free(got);
        }
}

/* add must be exact, NaN and Inf included, on both sides */
static void test_add(void) {
    const int64_t ns[] = {1, 17, 1000003, 4096};
    for (size_t c = 0; c < sizeof ns / sizeof *ns; c++) {
        int64_t n = ns[c];
        float *y = rand_floats((size_t)n, 8.f), *x = rand_floats((size_t)n, 1.f), *got = xmalloc((size_t)n * 4);
        if (n > 3) { y[1] = NAN; x[2] = INFINITY; y[3] = -INFINITY; }
        float *dx = up(x, (size_t)n * 4);
        gbuf o = gout((size_t)n, y);
        int rc_c = CPU->add(kc_cpu, y, x, n);
        int rc_g = GPU->add(kc_gpu, o.p, dx, n);
        bool guards;
        int rc_f = gfetch(&o, got, &guards);
        char desc[160];
        snprintf(desc, sizeof desc, "add(n=%ld)", (long)n);
        verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, guards, y, got, (size_t)n, 0.0);
        gfree(&o); GPU->mem_free(dx);
        free(y); free(x); free(got);
    }
}

/* ---------------------------------------------------------------- backward twins (training)
 * Thresholds (NMSE), with why:
 *   embed_backward                  0      each column summed in row order on both backends
 *   rmsnorm_backward, cross_entropy 1e-10  reduction orders differ (block sums vs row loops, exp-sum fp32 vs double)
 *   matmul_backward_x, _w           1e-9   fp32 GEMMs (SPLIT for 16-bit weights), summation order differs
 *   rope_backward                   1e-10  as rope
 *   attention_backward              1e-9   fp32 throughout
 *   swiglu_backward, adamw          1e-12  the same expressions; expf / sqrtf ulps
 *   axpby                           1e-13  one product and one add per element (the device may fuse them: FMA)
 *   sumsq                           1e-13  double sums in another order, rounded once to fp32 */

static void test_embed_backward(void) {
    struct { int64_t vocab, d, n; } cases[] = {{100, 64, 7}, {7, 100, 33}, {1000, 3200, 65}, {3, 1, 4}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t V = cases[c].vocab, d = cases[c].d, n = cases[c].n;
        int32_t *ids = xmalloc((size_t)n * sizeof *ids);
        for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919 + 3) % V); /* repeats when n > V */
        float *dout = rand_floats((size_t)(n * d), 1.f), *ref = rand_floats((size_t)(V * d), 1.f),
              *got = xmalloc((size_t)(V * d) * 4);
        float *ddout = up(dout, (size_t)(n * d) * 4);
        int32_t *dids = up(ids, (size_t)n * sizeof *ids);
        gbuf o = gout((size_t)(V * d), ref);
        int rc_g = GPU->embed_backward(kc_gpu, o.p, ddout, V, d, dids, n);
        char desc[160];
        snprintf(desc, sizeof desc, "embed_backward(vocab=%ld, d=%ld, n=%ld)", (long)V, (long)d, (long)n);
        if (!unsupported("embed_backward", rc_g)) {
            int rc_c = CPU->embed_backward(kc_cpu, ref, dout, V, d, ids, n);
            bool guards;
            int rc_f = gfetch(&o, got, &guards);
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, guards, ref, got, (size_t)(V * d), 0.0);
            ids[0] = (int32_t)V; /* refused: the CPU at once, CUDA at the next sync */
            GPU->mem_copy(kc_gpu, dids, ids, sizeof *ids, KERN_H2D);
            same_error("embed_backward id >= vocab", CPU->embed_backward(kc_cpu, ref, dout, V, d, ids, n),
                       GPU->embed_backward(kc_gpu, o.p, ddout, V, d, dids, n));
        }
        gfree(&o); GPU->mem_free(ddout); GPU->mem_free(dids);
        free(ids); free(dout); free(ref); free(got);
        if (rc_g == KERN_EUNSUPPORTED) return;
    }
}

static void test_rmsnorm_backward(void) {
    struct { int64_t n, d; } cases[] = {{1, 64}, {7, 100}, {33, 3200}, {3, 1}, {300, 257}, {2048, 16}};
    /* the last: qk_norm's head norms (d = head_dim, n = tokens x heads), dw summed in 8 chunks of rows */
    for (int t = 0; t < 3; t++)
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
            for (int beta = 0; beta <= 1; beta++) {
                int64_t n = cases[c].n, d = cases[c].d;
                size_t nd = (size_t)(n * d);
                kern_dtype dt = DTYPES[t];
                float *x = rand_floats(nd, 3.f), *dy = rand_floats(nd, 1.f), *rstd = xmalloc((size_t)n * 4),
                      *y = xmalloc(nd * 4);
                void *w = rand_weights(dt, (size_t)d, 1.f);
                CPU->rmsnorm(kc_cpu, y, rstd, x, w, dt, n, d, 1e-6f);
                float *dx_c = rand_floats(nd, 1.f), *dw_c = rand_floats((size_t)d, 1.f), *dx_g = xmalloc(nd * 4),
                      *dw_g = xmalloc((size_t)d * 4);
                float *dx_d = up(x, nd * 4), *ddy = up(dy, nd * 4), *drs = up(rstd, (size_t)n * 4);
                void *dwt = up(w, (size_t)d * kern_dtype_size(dt));
                gbuf ox = gout(nd, dx_c), ow = gout((size_t)d, dw_c);
                int rc_g = GPU->rmsnorm_backward(kc_gpu, ox.p, ow.p, ddy, dx_d, dwt, dt, drs, n, d, (float)beta);
                if (!unsupported("rmsnorm_backward", rc_g)) {
                    int rc_c = CPU->rmsnorm_backward(kc_cpu, dx_c, dw_c, dy, x, w, dt, rstd, n, d, (float)beta);
                    bool g1, g2;
                    int rc_f = gfetch(&ox, dx_g, &g1);
                    gfetch(&ow, dw_g, &g2);
                    char desc[160];
                    snprintf(desc, sizeof desc, "rmsnorm_backward(%s, n=%ld, d=%ld, beta=%d) dx", kern_dtype_name(dt),
                             (long)n, (long)d, beta);
                    verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, g1, dx_c, dx_g, nd, 1e-10);
                    snprintf(desc, sizeof desc, "rmsnorm_backward(%s, n=%ld, d=%ld, beta=%d) dw", kern_dtype_name(dt),
                             (long)n, (long)d, beta);
                    verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, g2, dw_c, dw_g, (size_t)d, 1e-10);
                }
                gfree(&ox); gfree(&ow); GPU->mem_free(dx_d); GPU->mem_free(ddy); GPU->mem_free(drs);
                GPU->mem_free(dwt);
                free(x); free(dy); free(rstd); free(y); free(w); free(dx_c); free(dw_c); free(dx_g); free(dw_g);
                if (rc_g == KERN_EUNSUPPORTED) return;
            }
    float b[4] = {0};
    float *d = up(b, sizeof b);
    same_error("rmsnorm_backward beta 0.5", CPU->rmsnorm_backward(kc_cpu, b, b, b, b, b, KERN_F32, b, 1, 1, 0.5f),
               GPU->rmsnorm_backward(kc_gpu, d, d, d, d, d, KERN_F32, d, 1, 1, 0.5f));
    GPU->mem_free(d);
}

static void test_matmul_backward_x(void) {
    const int64_t ms[] = {1, 3, 9, 64, 200};
    struct { int64_t n, k; } nk[] = {{5, 7}, {131, 100}, {333, 257}, {1000, 320}};
    for (int t = 0; t < 3; t++)
        for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
            for (size_t b = 0; b < sizeof nk / sizeof *nk; b++)
                for (int beta = 0; beta <= 1; beta++) {
                    int64_t m = ms[a], n = nk[b].n, k = nk[b].k;
                    kern_dtype dt = DTYPES[t];
                    float *dy = rand_floats((size_t)(m * n), 1.f), *x0 = xmalloc((size_t)(m * k) * 4);
                    for (int64_t i = 0; i < m * k; i++) x0[i] = beta ? frand() : NAN; /* beta 0 ignores dx */
                    void *w = rand_weights(dt, (size_t)(n * k), 1.f);
                    float *ref = xmalloc((size_t)(m * k) * 4), *got = xmalloc((size_t)(m * k) * 4);
                    memcpy(ref, x0, (size_t)(m * k) * 4);
                    void *dw = up(w, (size_t)(n * k) * kern_dtype_size(dt));
                    float *ddy = up(dy, (size_t)(m * n) * 4);
                    gbuf o = gout((size_t)(m * k), x0);
                    int rc_g = GPU->matmul_backward_x(kc_gpu, o.p, ddy, dw, dt, m, n, k, (float)beta);
                    if (!unsupported("matmul_backward_x", rc_g)) {
                        int rc_c = CPU->matmul_backward_x(kc_cpu, ref, dy, w, dt, m, n, k, (float)beta);
                        bool guards;
                        int rc_f = gfetch(&o, got, &guards);
                        char desc[160];
                        snprintf(desc, sizeof desc, "matmul_backward_x(%s, m=%ld, n=%ld, k=%ld, beta=%d)",
                                 kern_dtype_name(dt), (long)m, (long)n, (long)k, beta);
                        verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, guards, ref, got, (size_t)(m * k), 1e-9);
                    }
                    gfree(&o); GPU->mem_free(dw); GPU->mem_free(ddy);
                    free(dy); free(x0); free(w); free(ref); free(got);
                    if (rc_g == KERN_EUNSUPPORTED) return;
                }
    float b[8];
    float *d = up(b, sizeof b);
    same_error("matmul_backward_x beta=0.5", CPU->matmul_backward_x(kc_cpu, b, b, b, KERN_F32, 1, 1, 1, 0.5f),
               GPU->matmul_backward_x(kc_gpu, d, d, d, KERN_F32, 1, 1, 1, 0.5f));
    GPU->mem_free(d);
}

static void test_matmul_backward_w(void) {
    const int64_t ms[] = {1, 9, 200, 513};
    struct { int64_t n, k; } nk[] = {{5, 7}, {131, 100}, {1000, 320}};
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t b = 0; b < sizeof nk / sizeof *nk; b++) {
            int64_t m = ms[a], n = nk[b].n, k = nk[b].k;
            float *dy = rand_floats((size_t)(m * n), 1.f), *x = rand_floats((size_t)(m * k), 1.f);
            float *ref = rand_floats((size_t)(n * k), 1.f), *got = xmalloc((size_t)(n * k) * 4);
            float *ddy = up(dy, (size_t)(m * n) * 4), *dx = up(x, (size_t)(m * k) * 4);
            gbuf o = gout((size_t)(n * k), ref);
            int rc_g = GPU->matmul_backward_w(kc_gpu, o.p, ddy, dx, m, n, k);
            if (!unsupported("matmul_backward_w", rc_g)) {
                int rc_c = CPU->matmul_backward_w(kc_cpu, ref, dy, x, m, n, k);
                bool guards;
                int rc_f = gfetch(&o, got, &guards);
                char desc[160];
                snprintf(desc, sizeof desc, "matmul_backward_w(m=%ld, n=%ld, k=%ld)", (long)m, (long)n, (long)k);
                verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, guards, ref, got, (size_t)(n * k), 1e-9);
            }
            gfree(&o); GPU->mem_free(ddy); GPU->mem_free(dx);
            free(dy); free(x); free(ref); free(got);
            if (rc_g == KERN_EUNSUPPORTED) return;
        }
    float b[8];
    float *d = up(b, sizeof b);
    same_error("matmul_backward_w k=0", CPU->matmul_backward_w(kc_cpu, b, b, b, 1, 1, 0),
               GPU->matmul_backward_w(kc_gpu, d, d, d, 1, 1, 0));
    GPU->mem_free(d);
}

static void test_rope_backward(void) {
    struct { int64_t n, heads, hd; float theta, scale; } cases[] = {
        {7, 3, 12, 10000.f, 1.f}, {5, 4, 100, 10000.f, 1.f}, {9, 32, 128, 500000.f, 2.f}, {40, 8, 256, 1e6f, 1.f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t n = cases[c].n, heads = cases[c].heads, hd = cases[c].hd, len = n * heads * hd;
        int32_t *pos = xmalloc((size_t)n * sizeof *pos);
        for (int64_t i = 0; i < n; i++) pos[i] = (int32_t)((i * 37) % 4096);
        float *x = rand_floats((size_t)len, 1.f), *got = xmalloc((size_t)len * 4);
        int32_t *dpos = up(pos, (size_t)n * sizeof *pos);
        gbuf o = gout((size_t)len, x);
        int rc_g = GPU->rope_backward(kc_gpu, o.p, n, heads, hd, dpos, cases[c].theta, cases[c].scale);
        if (!unsupported("rope_backward", rc_g)) {
            int rc_c = CPU->rope_backward(kc_cpu, x, n, heads, hd, pos, cases[c].theta, cases[c].scale);
            bool guards;
            int rc_f = gfetch(&o, got, &guards);
            char desc[160];
            snprintf(desc, sizeof desc, "rope_backward(n=%ld, heads=%ld, hd=%ld, theta=%g, scale=%g)", (long)n,
                     (long)heads, (long)hd, cases[c].theta, cases[c].scale);
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, guards, x, got, (size_t)len, 1e-10);
        }
        gfree(&o); GPU->mem_free(dpos);
        free(pos); free(x); free(got);
        if (rc_g == KERN_EUNSUPPORTED) return;
    }
}

/* One backward case, CUDA against the CPU: attention_backward with q_pos0 q0, or attention_cross_backward (q0 < 0)
 * against a softmax over more keys than its own (its lse raised by 0.5, as FoT's merged one). The forward runs on
 * the CPU (out, lse), so the case checks the backward alone. Returns the CUDA status, so a caller stops at
 * KERN_EUNSUPPORTED. */
static int backward_case(int64_t nq, int64_t nkv, int64_t q0, int64_t hq, int64_t hkv, int64_t hd) {
    const bool cross = q0 < 0;
    size_t nqd = (size_t)(nq * hq * hd), nkd = (size_t)(nkv * hkv * hd), nl = (size_t)(nq * hq);
    float *q = rand_floats(nqd, 2.f), *k = rand_floats(nkd, 2.f), *v = rand_floats(nkd, 1.f),
          *dout = rand_floats(nqd, 1.f), *out = xmalloc(nqd * 4), *lse = xmalloc(nl * 4);
    float scale = 1.f / sqrtf((float)hd);
    if (cross) {
        CPU->attention_cross(kc_cpu, out, lse, q, k, v, nq, nkv, hq, hkv, hd, scale);
        for (size_t i = 0; i < nl; i++) lse[i] += 0.5f;
    } else {
        CPU->attention(kc_cpu, out, lse, q, k, v, nq, nkv, q0, hq, hkv, hd, scale);
    }
    float *dq_c = xmalloc(nqd * 4), *dk_c = rand_floats(nkd, 1.f), *dv_c = rand_floats(nkd, 1.f);
    float *dq_g = xmalloc(nqd * 4), *dk_g = xmalloc(nkd * 4), *dv_g = xmalloc(nkd * 4);
    float *d_q = up(q, nqd * 4), *d_k = up(k, nkd * 4), *d_v = up(v, nkd * 4), *d_do = up(dout, nqd * 4),
          *d_o = up(out, nqd * 4), *d_l = up(lse, nl * 4);
    gbuf oq = gout(nqd, NULL), okb = gout(nkd, dk_c), ovb = gout(nkd, dv_c);
    const char *op = cross ? "attention_cross_backward" : "attention_backward";
    int rc_g = cross ? GPU->attention_cross_backward(kc_gpu, oq.p, okb.p, ovb.p, d_do, d_q, d_k, d_v, d_o, d_l, nq,
                                                     nkv, hq, hkv, hd, scale)
                     : GPU->attention_backward(kc_gpu, oq.p, okb.p, ovb.p, d_do, d_q, d_k, d_v, d_o, d_l, nq, nkv,
                                               q0, hq, hkv, hd, scale);
    if (!unsupported(op, rc_g)) {
        int rc_c = cross ? CPU->attention_cross_backward(kc_cpu, dq_c, dk_c, dv_c, dout, q, k, v, out, lse, nq, nkv,
                                                         hq, hkv, hd, scale)
                         : CPU->attention_backward(kc_cpu, dq_c, dk_c, dv_c, dout, q, k, v, out, lse, nq, nkv, q0,
                                                   hq, hkv, hd, scale);
        bool g1, g2, g3;
        int rc_f = gfetch(&oq, dq_g, &g1);
        gfetch(&okb, dk_g, &g2);
        gfetch(&ovb, dv_g, &g3);
        char desc[160];
        const char *names[3] = {"dq", "dk", "dv"};
        float *refs[3] = {dq_c, dk_c, dv_c}, *gots[3] = {dq_g, dk_g, dv_g};
        bool guards[3] = {g1, g2, g3};
        for (int t = 0; t < 3; t++) {
            if (cross)
                snprintf(desc, sizeof desc, "%s(nq=%ld, nkv=%ld, hq=%ld, hkv=%ld, hd=%ld) %s", op, (long)nq,
                         (long)nkv, (long)hq, (long)hkv, (long)hd, names[t]);
            else
                snprintf(desc, sizeof desc, "%s(nq=%ld, nkv=%ld, q_pos0=%ld, hq=%ld, hkv=%ld, hd=%ld) %s", op,
                         (long)nq, (long)nkv, (long)q0, (long)hq, (long)hkv, (long)hd, names[t]);
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, guards[t], refs[t], gots[t], t ? nkd : nqd, 1e-9);
        }
    }
    gfree(&oq); gfree(&okb); gfree(&ovb);
    GPU->mem_free(d_q); GPU->mem_free(d_k); GPU->mem_free(d_v); GPU->mem_free(d_do); GPU->mem_free(d_o);
    GPU->mem_free(d_l);
    free(q); free(k); free(v); free(dout); free(out); free(lse); free(dq_c); free(dk_c); free(dv_c);
    free(dq_g); free(dk_g); free(dv_g);
    return rc_g;
}

static void test_attention_backward(void) {
    struct { int64_t nq, nkv, q0, hq, hkv, hd; } cases[] = {
        {5, 5, 0, 8, 2, 12}, {1, 37, 36, 8, 2, 100}, {64, 64, 0, 4, 1, 128}, {33, 133, 100, 8, 8, 100},
        {17, 20, 0, 4, 2, 33},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        if (backward_case(cases[c].nq, cases[c].nkv, cases[c].q0, cases[c].hq, cases[c].hkv, cases[c].hd) ==
            KERN_EUNSUPPORTED)
            return;
}

/* attention_cross (every query sees every key; FoT's extra contexts), its backward (against the merged out and lse
 * of a softmax over more keys, as FoT uses it) and attention_merge: CUDA against the CPU. */
static void test_attention_cross(void) {
    struct { int64_t nq, nkv, hq, hkv, hd; } cases[] = {{1, 1, 2, 2, 16}, {5, 37, 8, 2, 12}, {64, 300, 8, 8, 32},
                                                        {33, 129, 4, 1, 100}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int64_t nq = cases[c].nq, nkv = cases[c].nkv, hq = cases[c].hq, hkv = cases[c].hkv, hd = cases[c].hd;
        const size_t nqd = (size_t)(nq * hq * hd), nkd = (size_t)(nkv * hkv * hd), nl = (size_t)(nq * hq);
        float *q = rand_floats(nqd, 2.f), *k = rand_floats(nkd, 2.f), *v = rand_floats(nkd, 1.f);
        float *out = xmalloc(nqd * 4), *lse = xmalloc(nl * 4), *got = xmalloc(nqd * 4), *lgot = xmalloc(nl * 4);
        float *d_q = up(q, nqd * 4), *d_k = up(k, nkd * 4), *d_v = up(v, nkd * 4);
        gbuf o = gout(nqd, NULL), l = gout(nl, NULL);
        const float scale = 1.f / sqrtf((float)hd);
        int rc_g = GPU->attention_cross(kc_gpu, o.p, l.p, d_q, d_k, d_v, nq, nkv, hq, hkv, hd, scale);
        if (!unsupported("attention_cross", rc_g)) {
            int rc_c = CPU->attention_cross(kc_cpu, out, lse, q, k, v, nq, nkv, hq, hkv, hd, scale);
            bool g1, g2;
            int rc_f = gfetch(&o, got, &g1);
            gfetch(&l, lgot, &g2);
            char desc[160];
            snprintf(desc, sizeof desc, "attention_cross(nq=%ld, nkv=%ld, hq=%ld, hkv=%ld, hd=%ld) out", (long)nq,
                     (long)nkv, (long)hq, (long)hkv, (long)hd);
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, g1, out, got, nqd, 1e-9);
            snprintf(desc, sizeof desc, "attention_cross(nq=%ld, nkv=%ld) lse", (long)nq, (long)nkv);
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, g2, lse, lgot, nl, 1e-12);
        }
        gfree(&o); gfree(&l); GPU->mem_free(d_q); GPU->mem_free(d_k); GPU->mem_free(d_v);
        free(q); free(k); free(v); free(out); free(lse); free(got); free(lgot);
        if (rc_g == KERN_EUNSUPPORTED) return;
    }
    float b[4], *d = up(b, sizeof b);
    same_error("attention_cross with no keys", CPU->attention_cross(kc_cpu, b, NULL, b, b, b, 1, 0, 1, 1, 1, 1.f),
               GPU->attention_cross(kc_gpu, d, NULL, d, d, d, 1, 0, 1, 1, 1, 1.f));
    GPU->mem_free(d);
}

static void test_attention_cross_backward(void) {
    struct { int64_t nq, nkv, hq, hkv, hd; } cases[] = {{5, 37, 8, 2, 12}, {64, 200, 8, 8, 32}, {17, 20, 4, 2, 33}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        if (backward_case(cases[c].nq, cases[c].nkv, -1, cases[c].hq, cases[c].hkv, cases[c].hd) == KERN_EUNSUPPORTED)
            return;
}

static void test_attention_merge(void) {
    const int64_t n = 37, hq = 8, hd = 100;
    const size_t no = (size_t)(n * hq * hd), nl = (size_t)(n * hq);
    float *o = rand_floats(no, 1.f), *o2 = rand_floats(no, 1.f), *l = rand_floats(nl, 20.f), *l2 = rand_floats(nl, 20.f);
    l2[3] = -INFINITY; /* a set with no key */
    float *d_o2 = up(o2, no * 4), *d_l2 = up(l2, nl * 4), *got = xmalloc(no * 4), *lgot = xmalloc(nl * 4);
    gbuf go = gout(no, o), gl = gout(nl, l);
    int rc_g = GPU->attention_merge(kc_gpu, go.p, gl.p, d_o2, d_l2, n, hq, hd);
    if (!unsupported("attention_merge", rc_g)) {
        int rc_c = CPU->attention_merge(kc_cpu, o, l, o2, l2, n, hq, hd);
        bool g1, g2;
        int rc_f = gfetch(&go, got, &g1);
        gfetch(&gl, lgot, &g2);
        verdict("attention_merge(n=37, hq=8, hd=100) out", rc_c, rc_g != KERN_OK ? rc_g : rc_f, g1, o, got, no, 1e-12);
        verdict("attention_merge(n=37, hq=8, hd=100) lse", rc_c, rc_g != KERN_OK ? rc_g : rc_f, g2, l, lgot, nl, 1e-12);
    }
    gfree(&go); gfree(&gl); GPU->mem_free(d_o2); GPU->mem_free(d_l2);
    free(o); free(o2); free(l); free(l2); free(got); free(lgot);
}

static void test_swiglu_backward(void) {
    const int64_t ns[] = {1, 17, 1000003, 4096};
    for (size_t c = 0; c < sizeof ns / sizeof *ns; c++) {
        int64_t n = ns[c];
        float *g = rand_floats((size_t)n, 8.f), *u = rand_floats((size_t)n, 1.f), *dh = rand_floats((size_t)n, 1.f);
        if (n > 3) { g[1] = NAN; u[2] = INFINITY; dh[3] = -INFINITY; }
        float *rg = xmalloc((size_t)n * 4), *ru = xmalloc((size_t)n * 4), *gg = xmalloc((size_t)n * 4),
              *gu = xmalloc((size_t)n * 4);
        float *d_g = up(g, (size_t)n * 4), *d_u = up(u, (size_t)n * 4), *d_h = up(dh, (size_t)n * 4);
        gbuf og = gout((size_t)n, NULL), ou = gout((size_t)n, NULL);
        int rc_g = GPU->swiglu_backward(kc_gpu, og.p, ou.p, d_h, d_g, d_u, n);
        if (!unsupported("swiglu_backward", rc_g)) {
            int rc_c = CPU->swiglu_backward(kc_cpu, rg, ru, dh, g, u, n);
            bool g1, g2;
            int rc_f = gfetch(&og, gg, &g1);
            gfetch(&ou, gu, &g2);
            char desc[160];
            snprintf(desc, sizeof desc, "swiglu_backward(n=%ld) dgate", (long)n);
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, g1, rg, gg, (size_t)n, 1e-12);
            snprintf(desc, sizeof desc, "swiglu_backward(n=%ld) dup", (long)n);
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, g2, ru, gu, (size_t)n, 1e-12);
        }
        gfree(&og); gfree(&ou); GPU->mem_free(d_g); GPU->mem_free(d_u); GPU->mem_free(d_h);
        free(g); free(u); free(dh); free(rg); free(ru); free(gg); free(gu);
        if (rc_g == KERN_EUNSUPPORTED) return;
    }
}

static void test_cross_entropy(void) {
    struct { int64_t n, vocab; float dloss; } cases[] = {{5, 11, 1.f}, {64, 1000, 0.25f}, {1, 1, 1.f}, {33, 32000, 2.f}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int inplace = 0; inplace <= 1; inplace++) {
            int64_t n = cases[c].n, V = cases[c].vocab;
            size_t nv = (size_t)(n * V);
            int32_t *t = xmalloc((size_t)n * sizeof *t);
            for (int64_t i = 0; i < n; i++) t[i] = i % 4 == 1 ? -1 : (int32_t)((i * 31 + 7) % V);
            float *logits = rand_floats(nv, 6.f), *ref = xmalloc(nv * 4), *got = xmalloc(nv * 4), loss_c, loss_g;
            float *d_l = up(logits, nv * 4);
            int32_t *d_t = up(t, (size_t)n * sizeof *t);
            gbuf o = gout(nv, inplace ? logits : NULL), ol = gout(1, NULL);
            int rc_g = GPU->cross_entropy(kc_gpu, ol.p, o.p, inplace ? o.p : d_l, d_t, n, V, cases[c].dloss);
            if (!unsupported("cross_entropy", rc_g)) {
                int rc_c = CPU->cross_entropy(kc_cpu, &loss_c, ref, logits, t, n, V, cases[c].dloss);
                bool g1, g2;
                int rc_f = gfetch(&o, got, &g1);
                gfetch(&ol, &loss_g, &g2);
                char desc[160];
                snprintf(desc, sizeof desc, "cross_entropy(n=%ld, vocab=%ld%s) dlogits", (long)n, (long)V,
                         inplace ? ", in place" : "");
                verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, g1, ref, got, nv, 1e-10);
                snprintf(desc, sizeof desc, "cross_entropy(n=%ld, vocab=%ld%s) loss", (long)n, (long)V,
                         inplace ? ", in place" : "");
                verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, g2, &loss_c, &loss_g, 1, 1e-10);
                t[0] = (int32_t)V; /* refused: the CPU at once, CUDA at the next sync */
                GPU->mem_copy(kc_gpu, d_t, t, sizeof *t, KERN_H2D);
                same_error("cross_entropy target >= vocab", CPU->cross_entropy(kc_cpu, &loss_c, ref, logits, t, n, V, 1.f),
                           GPU->cross_entropy(kc_gpu, ol.p, o.p, d_l, d_t, n, V, 1.f));
            }
            gfree(&o); gfree(&ol); GPU->mem_free(d_l); GPU->mem_free(d_t);
            free(t); free(logits); free(ref); free(got);
            if (rc_g == KERN_EUNSUPPORTED) return;
        }
}

static void test_adamw(void) {
    const int64_t ns[] = {1, 1000, 1000003};
    for (size_t c = 0; c < sizeof ns / sizeof *ns; c++) {
        int64_t n = ns[c];
        float *p = rand_floats((size_t)n, 1.f), *m = xmalloc((size_t)n * 4), *v = xmalloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) m[i] = v[i] = 0.f;
        gbuf op = gout((size_t)n, p), om = gout((size_t)n, m), ov = gout((size_t)n, v);
        float *g = rand_floats((size_t)n, 1.f), *d_g = up(g, (size_t)n * 4);
        int rc_g = KERN_OK, rc_c = KERN_OK;
        for (int64_t step = 1; step <= 3 && rc_g == KERN_OK; step++) {
            rc_g = GPU->adamw(kc_gpu, op.p, om.p, ov.p, d_g, n, 0.5f, 1e-2, 0.9, 0.999, 1e-8, 0.1, step);
            if (rc_c == KERN_OK) rc_c = CPU->adamw(kc_cpu, p, m, v, g, n, 0.5f, 1e-2, 0.9, 0.999, 1e-8, 0.1, step);
        }
        if (!unsupported("adamw", rc_g)) {
            float *gp = xmalloc((size_t)n * 4), *gm = xmalloc((size_t)n * 4), *gv = xmalloc((size_t)n * 4);
            bool g1, g2, g3;
            int rc_f = gfetch(&op, gp, &g1);
            gfetch(&om, gm, &g2);
            gfetch(&ov, gv, &g3);
            char desc[160];
            snprintf(desc, sizeof desc, "adamw(n=%ld, 3 steps) p", (long)n);
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, g1, p, gp, (size_t)n, 1e-12);
            snprintf(desc, sizeof desc, "adamw(n=%ld, 3 steps) m", (long)n);
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, g2, m, gm, (size_t)n, 1e-12);
            snprintf(desc, sizeof desc, "adamw(n=%ld, 3 steps) v", (long)n);
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, g3, v, gv, (size_t)n, 1e-12);
            free(gp); free(gm); free(gv);
        }
        gfree(&op); gfree(&om); gfree(&ov); GPU->mem_free(d_g);
        free(p); free(m); free(v); free(g);
        if (rc_g == KERN_EUNSUPPORTED) return;
    }
    float b[4] = {0};
    float *d = up(b, sizeof b);
    same_error("adamw step 0", CPU->adamw(kc_cpu, b, b, b, b, 1, 1.f, 1e-3, 0.9, 0.999, 1e-8, 0, 0),
               GPU->adamw(kc_gpu, d, d, d, d, 1, 1.f, 1e-3, 0.9, 0.999, 1e-8, 0, 0));
    GPU->mem_free(d);
}

/* axpby: b 0 (y NaN beforehand: never read), b 1, b 0.9, x aliasing y; one rounding per product, FMA allowed */
static void test_axpby(void) {
    const int64_t ns[] = {1, 17, 1000003};
    const float ab[][2] = {{0.25f, 0.f}, {-1e-3f, 1.f}, {1.f, 0.9f}, {0.5f, 0.f}};
    for (size_t c = 0; c < sizeof ns / sizeof *ns; c++)
        for (size_t j = 0; j < sizeof ab / sizeof *ab; j++) {
            int64_t n = ns[c];
            bool alias = j == 3, ignored = ab[j][1] == 0.f && !alias;
            float *y = rand_floats((size_t)n, 2.f), *x = rand_floats((size_t)n, 1.f), *got = xmalloc((size_t)n * 4);
            if (ignored) for (int64_t i = 0; i < n; i++) y[i] = NAN;
            float *dx = up(x, (size_t)n * 4);
            gbuf o = gout((size_t)n, alias ? x : y);
            int rc_c = CPU->axpby(kc_cpu, alias ? x : y, x, n, ab[j][0], ab[j][1]);
            int rc_g = GPU->axpby(kc_gpu, o.p, alias ? o.p : dx, n, ab[j][0], ab[j][1]);
            if (unsupported("axpby", rc_g)) {
                gfree(&o); GPU->mem_free(dx); free(y); free(x); free(got);
                return;
            }
            bool guards;
            int rc_f = gfetch(&o, got, &guards);
            char desc[160];
            snprintf(desc, sizeof desc, "axpby(n=%ld, a=%g, b=%g%s)", (long)n, ab[j][0], ab[j][1], alias ? ", x = y" : "");
            verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, guards, alias ? x : y, got, (size_t)n, 1e-13);
            gfree(&o); GPU->mem_free(dx);
            free(y); free(x); free(got);
        }
}

/* sumsq: accumulated onto a start value, sizes from one element to past a block per SM */
static void test_sumsq(void) {
    const int64_t ns[] = {1, 255, 1000003, 5000000};
    for (size_t c = 0; c < sizeof ns / sizeof *ns; c++) {
        int64_t n = ns[c];
        float *x = rand_floats((size_t)n, 1.f), ref = 3.5f, got = 0;
        float *dx = up(x, (size_t)n * 4);
        gbuf o = gout(1, &ref);
        int rc_c = CPU->sumsq(kc_cpu, &ref, x, n);
        int rc_g = GPU->sumsq(kc_gpu, o.p, dx, n);
        if (unsupported("sumsq", rc_g)) {
            gfree(&o); GPU->mem_free(dx); free(x);
            return;
        }
        bool guards;
        int rc_f = gfetch(&o, &got, &guards);
        char desc[160];
        snprintf(desc, sizeof desc, "sumsq(n=%ld)", (long)n);
        verdict(desc, rc_c, rc_g != KERN_OK ? rc_g : rc_f, guards, &ref, &got, 1, 1e-13);
        gfree(&o); GPU->mem_free(dx);
        free(x);
    }
}

/* ---------------------------------------------------------------- perf mode */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Runs fn reps times after a warm-up, returns seconds per run. */
#define TIME_OP(secs, call)                                                                                     \
    do {                                                                                                        \
        call;                                                                                                   \
        GPU->sync(kc_gpu);                                                                                      \
        int reps_ = 1;                                                                                          \
        double t_;                                                                                              \
        for (;;) { /* grow the repetition count until a batch takes >= 0.2 s */                              \
            t_ = now_s();                                                                                       \
            for (int r_ = 0; r_ < reps_; r_++) call;                                                            \
            GPU->sync(kc_gpu);                                                                                  \
            t_ = now_s() - t_;                                                                                  \
            if (t_ >= 0.2 || reps_ >= 1 << 16) break;                                                           \
            reps_ *= 4;                                                                                         \
        }                                                                                                       \
        secs = t_ / reps_;                                                                                      \
    } while (0)

static void perf_line(const char *desc, double secs, double bytes, double flops) {
    printf("  %-64s %10.1f us/run", desc, secs * 1e6);
    if (bytes > 0) printf("  %8.1f GB/s", bytes / secs * 1e-9);
    if (flops > 0) printf("  %9.1f GFLOP/s", flops / secs * 1e-9);
    printf("\n");
}

static bool want(const char *op, int nops, char **ops);

static void perf(int nops, char **ops) {
    const int64_t d = 3200, ff = 8640, V = 32000, hq = 32, hd = 100;
    const size_t big = (size_t)32 << 20; /* floats per activation buffer: 128 MB */
    float *hbuf = rand_floats(big > (size_t)(512 * ff) ? big : (size_t)(512 * ff), 1.f);
    float *A = up(hbuf, big * 4), *B = up(hbuf, big * 4), *C = up(hbuf, big * 4);
    void *W = GPU->mem_alloc((size_t)V * d * 2); /* bf16 [32000, 3200] = 205 MB; contents irrelevant for timing */
    GPU->mem_set(kc_gpu, W, 0, (size_t)V * d * 2);
    int32_t ids[512], *dids;
    for (int i = 0; i < 512; i++) ids[i] = (i * 7919) % (int32_t)V;
    dids = up(ids, sizeof ids);
    char desc[160];
    double s;
    if (want("embed", nops, ops)) {
        TIME_OP(s, GPU->embed(kc_gpu, A, W, KERN_BF16, V, d, dids, 512));
        perf_line("embed(bf16, n=512, d=3200)", s, 512.0 * d * 6, 0);
    }
    if (want("rmsnorm", nops, ops))
        for (int64_t n = 1; n <= 512; n *= 512) {
            TIME_OP(s, GPU->rmsnorm(kc_gpu, B, NULL, A, W, KERN_BF16, n, d, 1e-6f));
            snprintf(desc, sizeof desc, "rmsnorm(bf16, n=%ld, d=3200)", (long)n);
            perf_line(desc, s, (double)n * d * 8, 0);
        }
    if (want("rope", nops, ops)) {
        TIME_OP(s, GPU->rope(kc_gpu, A, 512, hq, hd, dids, 10000.f, 1.f));
        perf_line("rope(n=512, heads=32, hd=100)", s, 512.0 * hq * hd * 8, 0);
    }
    if (want("swiglu", nops, ops)) {
        TIME_OP(s, GPU->swiglu(kc_gpu, A, B, C, 512 * ff));
        perf_line("swiglu(n=512*8640)", s, 512.0 * ff * 12, 0);
    }
    if (want("add", nops, ops)) {
        TIME_OP(s, GPU->add(kc_gpu, A, B, 512 * d));
        perf_line("add(n=512*3200)", s, 512.0 * d * 12, 0);
    }
    if (want("matmul", nops, ops)) {
        /* m = 1: decode's shapes (d x d: wo; 3d x d: fused q|k|v; 2ff x d: fused gate|up; d x ff: down; lm_head) */
        struct { int64_t m, n, k; } mm[] = {{1, d, d}, {1, 3 * d, d}, {1, 2 * ff, d}, {1, ff, d}, {1, d, ff},
                                            {1, V, d}, {4, ff, d}, {8, ff, d}, {64, ff, d},
                                            {512, ff, d}, {512, d, ff}, {2048, ff, d}};
        for (size_t i = 0; i < sizeof mm / sizeof *mm; i++)
            for (int mode = 0; mode <= 1; mode++) {
                int64_t m = mm[i].m, n = mm[i].n, k = mm[i].k;
                if (mode && m <= 8) continue;
                if ((size_t)(m * k) > big || (size_t)(m * n) > big || n * k > V * d) continue;
                kern_cuda_set_gemm(kc_gpu, mode ? KERN_CUDA_GEMM_FAST : KERN_CUDA_GEMM_SPLIT);
                TIME_OP(s, GPU->matmul(kc_gpu, B, A, W, KERN_BF16, m, n, k, 0.f));
                snprintf(desc, sizeof desc, "matmul(bf16, m=%ld, n=%ld, k=%ld, %s)", (long)m, (long)n, (long)k,
                         m <= 8 ? "gemv" : mode ? "fast" : "split");
                perf_line(desc, s, (double)n * k * 2 + (double)m * (k + n) * 4, 2.0 * m * n * k);
            }
        kern_cuda_set_gemm(kc_gpu, KERN_CUDA_GEMM_SPLIT);
    }
    if (want("attention", nops, ops)) {
        int64_t ctxs[] = {2048, 16384};
        for (int i = 0; i < 2; i++) {
            int64_t nkv = ctxs[i];
            float *K = GPU->mem_alloc((size_t)nkv * hq * hd * 4), *Vv = GPU->mem_alloc((size_t)nkv * hq * hd * 4);
            float *Q = GPU->mem_alloc((size_t)nkv * hq * hd * 4), *O = GPU->mem_alloc((size_t)nkv * hq * hd * 4);
            if (!K || !Vv || !Q || !O) { printf("  attention nkv=%ld: out of device memory\n", (long)nkv); break; }
            GPU->mem_set(kc_gpu, K, 0, (size_t)nkv * hq * hd * 4);
            GPU->mem_set(kc_gpu, Vv, 0, (size_t)nkv * hq * hd * 4);
            GPU->mem_set(kc_gpu, Q, 0, (size_t)nkv * hq * hd * 4);
            float sc = 0.1f;
            TIME_OP(s, GPU->attention(kc_gpu, O, NULL, Q, K, Vv, 1, nkv, nkv - 1, hq, hq, hd, sc));
            snprintf(desc, sizeof desc, "attention(decode, nkv=%ld, 32 heads x 100)", (long)nkv);
            perf_line(desc, s, 2.0 * nkv * hq * hd * 4, 4.0 * nkv * hq * hd);
            int64_t nq = nkv < 4096 ? nkv : 4096; /* the last 4K rows of a nkv prefill */
            TIME_OP(s, GPU->attention(kc_gpu, O, NULL, Q, K, Vv, nq, nkv, nkv - nq, hq, hq, hd, sc));
            snprintf(desc, sizeof desc, "attention(prefill, last %ld of %ld rows, 32 heads x 100)", (long)nq, (long)nkv);
            double pairs = (double)nq * (nkv - nq) + (double)nq * (nq + 1) / 2;
            perf_line(desc, s, 0, 4.0 * pairs * hq * hd);
            GPU->mem_free(K); GPU->mem_free(Vv); GPU->mem_free(Q); GPU->mem_free(O);
        }
    }
    GPU->mem_free(A); GPU->mem_free(B); GPU->mem_free(C); GPU->mem_free(W); GPU->mem_free(dids);
    free(hbuf);
}

/* ---------------------------------------------------------------- the cases, keyed by op id */

/* One case function per op, named test_<op>: an op added to KERN_OPS without its case here fails to compile
 * ('test_<op>' undeclared), so no op ships untested against the CPU. */
#define OP_CASE(name, params, doc) [KERN_OP_##name] = test_##name,
static void (*const CASES[KERN_OP_COUNT])(void) = {KERN_OPS(OP_CASE)};
#undef OP_CASE

/* ---------------------------------------------------------------- main */

static bool want(const char *op, int nops, char **ops) {
    if (nops == 0) return true;
    for (int i = 0; i < nops; i++)
        if (!strcmp(ops[i], op)) return true;
    return false;
}

int main(int argc, char **argv) {
    bool perf_mode = false;
    char *ops[32];
    int nops = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--perf")) perf_mode = true;
        else if (!strcmp(argv[i], "--quiet")) verbose = false;
        else if (!strcmp(argv[i], "--set") && i + 1 < argc) settings = argv[++i];
        else if (!strcmp(argv[i], "--list")) {
            for (int o = 0; o < KERN_OP_COUNT; o++) printf("%-18s %s\n", kern_op_names[o], kern_op_docs[o]);
            return 0;
        } else {
            bool known = false;
            for (int o = 0; o < KERN_OP_COUNT; o++) known |= !strcmp(argv[i], kern_op_names[o]);
            if (!known || nops == 32) {
                fprintf(stderr, "usage: test_ops [--perf] [--quiet] [--list] [--set NAME=VALUE,...] [op ...]\n"
                                "unknown op '%s'\n", argv[i]);
                return 2;
            }
            ops[nops++] = argv[i];
        }
    }
    char info[256];
    if (!kern_cuda_available(info, sizeof info)) {
        printf("SKIP: %s\n", info);
        return 0;
    }
    CPU = kern_cpu_backend();
    GPU = kern_cuda_backend();
    kc_cpu = kern_cpu_ctx_new(0);
    kc_gpu = kern_cuda_ctx_new();
    if (!GPU || !kc_cpu || !kc_gpu) {
        fprintf(stderr, "FAIL: CUDA reported available (%s) but its context could not be created\n", info);
        return 1;
    }
    /* the reference is exact fp32 math: the CPU's FAST bf16 GEMM (activations rounded to bf16) has its own checks
     * in test_kernels_cpu, and CUDA's fast mode is held to the exact reference with its own tolerance below */
    kern_cpu_set_gemm(kc_cpu, KERN_CPU_GEMM_EXACT);
    char why[256];
    if (kern_ctx_settings(GPU, kc_gpu, settings, why, sizeof why) != KERN_OK) {
        fprintf(stderr, "test_ops: --set: %s\n", why);
        return 2;
    }
    printf("test_ops: %s against cpu on %s%s%s\n", GPU->name, info, settings ? ", settings " : "",
           settings ? settings : "");
    if (perf_mode) {
        perf(nops, ops);
    } else {
        for (int o = 0; o < KERN_OP_COUNT; o++) {
            if (!want(kern_op_names[o], nops, ops)) continue;
            printf("%s:\n", kern_op_names[o]);
            CASES[o]();
        }
        report_skips();
    }
    kern_cuda_ctx_free(kc_gpu);
    kern_cpu_ctx_free(kc_cpu);
    return test_summary();
}
