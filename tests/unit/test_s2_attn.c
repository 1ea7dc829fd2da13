/*
 * test_s2_attn.c — S²-Attn (engine/src/train/s2_attn.c, LongLoRA's shifted sparse attention in the no-leak form):
 *   - outputs, log-sum-exp and all three gradients equal a brute-force masked softmax written from the spec
 *     (first half of the heads in groups [0,g), [g,2g), ...; second half in [0,g/2), [g/2,3g/2), ..., [T-g/2,T);
 *     causal within a group; no wrap-around) within 2e-6, for MHA, GQA with whole KV groups per half, and GQA
 *     whose halves share a KV head (odd number of KV heads);
 *   - the same inputs against the leaky roll-based form (the last half group sharing the first's) differ, so the
 *     check can tell the two apart;
 *   - group = seq_len is full causal attention, bit for bit (values and gradients), op level and whole model
 *     (loss and every gradient of a training step through model_grad);
 *   - shapes S²-Attn cannot split are refused with a message;
 *   - the mask checks again on the CUDA backend (its memory, its attention ops, its 2-D copies) when it is usable
 *     or MNEMO_TEST_DEVICE=cuda asks for it (CI: the emulator).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "kernels.h"
#include "model_grad.h"
#include "s2_attn.h"
#include "test_devices.h"
#include "test_util.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
static float *randv(size_t n) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = frand();
    return x;
}

/* Whether query row i of head h may see key row j: the spec's mask, written independently of s2_attn.c. leak:
 * the roll-based form whose last shifted half group joins the first. */
static int allowed(int64_t T, int64_t g, int64_t hq, int64_t h, int64_t i, int64_t j, int leak) {
    if (j > i) return 0;
    if (g >= T) return 1;
    if (h < hq / 2) return i / g == j / g;
    int64_t gi = (i + g / 2) / g, gj = (j + g / 2) / g, n = T / g;
    if (leak) gi %= n, gj %= n;
    return gi == gj;
}

typedef struct {
    float *out, *lse, *dq, *dk, *dv;
} result;

/* Brute-force masked attention and its backward, in double. */
static result brute(const float *q, const float *k, const float *v, const float *dout, int64_t T, int64_t g,
                    int64_t hq, int64_t hkv, int64_t hd, float scale, int leak) {
    result r = {calloc((size_t)(T * hq * hd), 4), calloc((size_t)(T * hq), 4), calloc((size_t)(T * hq * hd), 4),
                calloc((size_t)(T * hkv * hd), 4), calloc((size_t)(T * hkv * hd), 4)};
    double *p = malloc((size_t)T * sizeof *p);
    for (int64_t h = 0; h < hq; h++) {
        int64_t kh = h / (hq / hkv);
        for (int64_t i = 0; i < T; i++) {
            const float *qi = q + (i * hq + h) * hd;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < T; j++) {
                p[j] = -INFINITY;
                if (!allowed(T, g, hq, h, i, j, leak)) continue;
                double s = 0;
                for (int64_t c = 0; c < hd; c++) s += (double)qi[c] * k[(j * hkv + kh) * hd + c];
                p[j] = s * scale;
                mx = fmax(mx, p[j]);
            }
            for (int64_t j = 0; j < T; j++) sum += p[j] == -INFINITY ? 0 : exp(p[j] - mx);
            r.lse[i * hq + h] = (float)(mx + log(sum));
            for (int64_t j = 0; j < T; j++) p[j] = p[j] == -INFINITY ? 0 : exp(p[j] - mx) / sum;
            const float *dy = dout + (i * hq + h) * hd;
            double o[256] = {0}, dpo = 0;
            for (int64_t j = 0; j < T; j++)
                for (int64_t c = 0; c < hd; c++) o[c] += p[j] * v[(j * hkv + kh) * hd + c];
            for (int64_t c = 0; c < hd; c++) r.out[(i * hq + h) * hd + c] = (float)o[c], dpo += o[c] * dy[c];
            for (int64_t j = 0; j < T; j++) {
                if (p[j] == 0) continue;
                double dp = 0;
                for (int64_t c = 0; c < hd; c++) dp += (double)dy[c] * v[(j * hkv + kh) * hd + c];
                double ds = p[j] * (dp - dpo) * scale;
                for (int64_t c = 0; c < hd; c++) {
                    r.dq[(i * hq + h) * hd + c] += (float)(ds * k[(j * hkv + kh) * hd + c]);
                    r.dk[(j * hkv + kh) * hd + c] += (float)(ds * qi[c]);
                    r.dv[(j * hkv + kh) * hd + c] += (float)(p[j] * dy[c]);
                }
            }
        }
    }
    free(p);
    return r;
}

static void result_free(result *r) { free(r->out), free(r->lse), free(r->dq), free(r->dk), free(r->dv); }

static double maxdiff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* A copy of x[n] in be's memory (NULL when out of memory). */
static float *upload(const kern_backend *be, const float *x, size_t n) {
    float *d = be->mem_alloc(n * sizeof *d);
    if (d && be->mem_copy(NULL, d, x, n * sizeof *d, KERN_H2D) != KERN_OK) be->mem_free(d), d = NULL;
    return d;
}

/* S²-Attn through s2_attn.c on random inputs, on backend be (inputs and outputs through its memory). */
static result run_s2(const kern_backend *be, const float *q, const float *k, const float *v, const float *dout,
                     int64_t T, int64_t g, int64_t hq, int64_t hkv, int64_t hd, float scale) {
    kern_ctx *kc = be->ctx_new(2);
    char err[256];
    const size_t nq = (size_t)(T * hq * hd), nk = (size_t)(T * hkv * hd), nl = (size_t)(T * hq);
    result r = {calloc(nq, 4), calloc(nl, 4), calloc(nq, 4), calloc(nk, 4), calloc(nk, 4)};
    /* device copies: inputs, then out lse dq dk dv (dk, dv start at zero: the backward adds to them) */
    float *d[9] = {upload(be, q, nq), upload(be, k, nk), upload(be, v, nk), upload(be, dout, nq), upload(be, r.out, nq),
                   upload(be, r.lse, nl), upload(be, r.dq, nq), upload(be, r.dk, nk), upload(be, r.dv, nk)};
    int ok = kc != NULL;
    for (int i = 0; i < 9; i++) ok &= d[i] != NULL;
    s2_attn *s = ok ? s2_attn_new(be, T, g, hq, hkv, hd, err, sizeof err) : NULL;
    CHECK(s, "%s: s2_attn_new: %s", be->name, ok ? err : "no memory");
    if (s) {
        CHECK(s2_attention(s, kc, d[4], d[5], d[0], d[1], d[2], scale) == KERN_OK, "%s: s2_attention", be->name);
        CHECK(s2_attention_backward(s, kc, d[6], d[7], d[8], d[3], d[0], d[1], d[2], d[4], d[5], scale) == KERN_OK,
              "%s: s2_attention_backward", be->name);
        float *host[5] = {r.out, r.lse, r.dq, r.dk, r.dv};
        const size_t n[5] = {nq, nl, nq, nk, nk};
        for (int i = 0; i < 5; i++)
            CHECK(be->mem_copy(kc, host[i], d[4 + i], n[i] * sizeof(float), KERN_D2H) == KERN_OK, "%s: download",
                  be->name);
    }
    s2_attn_free(s);
    for (int i = 0; i < 9; i++) be->mem_free(d[i]);
    if (kc) be->ctx_free(kc);
    return r;
}

/* tol: 2e-6 on the CPU; the device's attention kernels sum in another order (CUDA: 1e-5). */
static void check_against_mask(const kern_backend *be, int64_t T, int64_t g, int64_t hq, int64_t hkv, int64_t hd) {
    const size_t nq = (size_t)(T * hq * hd), nk = (size_t)(T * hkv * hd);
    float *q = randv(nq), *k = randv(nk), *v = randv(nk), *dout = randv(nq);
    const float scale = 1.0f / sqrtf((float)hd);
    result s = run_s2(be, q, k, v, dout, T, g, hq, hkv, hd, scale);
    const double tol = be->host_memory ? 2e-6 : 1e-5;
    result b = brute(q, k, v, dout, T, g, hq, hkv, hd, scale, 0);
    double e[5] = {maxdiff(s.out, b.out, nq), maxdiff(s.lse, b.lse, (size_t)(T * hq)), maxdiff(s.dq, b.dq, nq),
                   maxdiff(s.dk, b.dk, nk), maxdiff(s.dv, b.dv, nk)};
    const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++)
        CHECK(e[i] <= tol, "%s, T %lld g %lld heads %lld/%lld: %s differs from the brute-force mask by %.2e",
              be->name, (long long)T, (long long)g, (long long)hq, (long long)hkv, names[i], e[i]);
    printf("%s, T %3lld g %3lld heads %lld/%lld: max |S2 - mask| out %.1e lse %.1e dq %.1e dk %.1e dv %.1e\n",
           be->name, (long long)T, (long long)g, (long long)hq, (long long)hkv, e[0], e[1], e[2], e[3], e[4]);
    if (g < T) { /* the leaky roll-based pattern gives other values: the check above can tell */
        result l = brute(q, k, v, dout, T, g, hq, hkv, hd, scale, 1);
        CHECK(maxdiff(s.out, l.out, nq) > 1e-3, "S2 equals the wrap-around pattern (T %lld g %lld)", (long long)T,
              (long long)g);
        result_free(&l);
    }
    result_free(&s), result_free(&b);
    free(q), free(k), free(v), free(dout);
}

/* group = T through s2_attn.c against the plain attention op: identical bits. */
static void check_full_equals_op(int64_t T, int64_t hq, int64_t hkv, int64_t hd) {
    const size_t nq = (size_t)(T * hq * hd), nk = (size_t)(T * hkv * hd);
    float *q = randv(nq), *k = randv(nk), *v = randv(nk), *dout = randv(nq);
    const float scale = 1.0f / sqrtf((float)hd);
    const kern_backend *be = kern_cpu_backend();
    result s = run_s2(be, q, k, v, dout, T, T, hq, hkv, hd, scale);
    kern_ctx *kc = kern_cpu_ctx_new(2);
    result f = {calloc(nq, 4), calloc((size_t)(T * hq), 4), calloc(nq, 4), calloc(nk, 4), calloc(nk, 4)};
    be->attention(kc, f.out, f.lse, q, k, v, T, T, 0, hq, hkv, hd, scale);
    be->attention_backward(kc, f.dq, f.dk, f.dv, dout, q, k, v, f.out, f.lse, T, T, 0, hq, hkv, hd, scale);
    int same = !memcmp(s.out, f.out, nq * 4) && !memcmp(s.lse, f.lse, (size_t)(T * hq) * 4) &&
               !memcmp(s.dq, f.dq, nq * 4);
    /* dk, dv: bit for bit when each half has its own KV heads; when a KV head serves both halves its two halves'
     * sums are added in another order (one rounding) */
    double dkv = fmax(maxdiff(s.dk, f.dk, nk), maxdiff(s.dv, f.dv, nk));
    int whole = (hq / 2) % (hq / hkv) == 0;
    CHECK(same && (whole ? dkv == 0 : dkv <= 1e-6), "group = T (%lld, heads %lld/%lld) is not the full attention op "
          "(out/lse/dq identical: %d, dk/dv differ by %.1e)", (long long)T, (long long)hq, (long long)hkv, same, dkv);
    be->ctx_free(kc);
    result_free(&s), result_free(&f);
    free(q), free(k), free(v), free(dout);
}

/* A whole training step (LoRA+ shape: every base weight trained) with group = T against the plain step. */
static void check_model_step(void) {
    char dir[4200], err[512];
    snprintf(dir, sizeof dir, "%s/models/mha", test_fixtures());
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = MNEMO_DEVICE_CPU;
    mnemo_model *m = NULL;
    model_grads g0 = {0}, g1 = {0};
    const int B = 2, T = 16;
    model_train_ws *w0 = NULL, *w1 = NULL;
    if (mnemo_model_load(dir, &mp, &m) != MNEMO_OK || model_grads_init(&g0, m, err, sizeof err) ||
        model_grads_init(&g1, m, err, sizeof err)) {
        CHECK(0, "setup: %s %s", mnemo_model_error(m), err);
        goto out;
    }
    w0 = model_train_ws_new(m, B, T, 0, false, err, sizeof err);
    w1 = model_train_ws_new(m, B, T, 0, true, err, sizeof err);
    CHECK(w0 && w1 && model_train_ws_set_s2(w1, m, T, err, sizeof err) == 0, "workspaces: %s", err);
    if (!w0 || !w1) goto out;
    int32_t tokens[2 * 17];
    for (int i = 0; i < 2 * 17; i++) tokens[i] = 1 + (i * 37) % 300;
    float l0 = 0, l1 = 0;
    CHECK(model_loss_and_grads_ws(w0, m, tokens, NULL, 1.0f, &g0, TRAIN_ALL, NULL, &l0, err, sizeof err) == 0, "%s", err);
    CHECK(model_loss_and_grads_ws(w1, m, tokens, NULL, 1.0f, &g1, TRAIN_ALL, NULL, &l1, err, sizeof err) == 0, "%s", err);
    int same = l0 == l1;
    for (size_t i = 0; i < g0.count; i++) same &= !memcmp(g0.p[i].g, g1.p[i].g, g0.p[i].n * sizeof(float));
    CHECK(same, "a model step with S2 group = seq_len (and --recompute) differs from the full-attention step");
    printf("model step, group = seq_len: loss %.7f == %.7f, %zu gradients identical: %s\n", l0, l1, g0.count,
           same ? "yes" : "no");
    /* refused shapes leave a message */
    err[0] = 0;
    CHECK(model_train_ws_set_s2(w1, m, 6, err, sizeof err) == -1 && strstr(err, "multiple"), "group 6 of 16: %s", err);
out:
    model_train_ws_free(w0), model_train_ws_free(w1);
    model_grads_free(&g0), model_grads_free(&g1);
    mnemo_model_free(m);
}

int main(void) {
    const kern_backend *cpu = kern_cpu_backend(), *cuda = NULL;
    test_devices devs = test_pick_devices();
    if (devs.cuda) cuda = kern_cuda_backend();
    for (int pass = 0; pass < (cuda ? 2 : 1); pass++) {
        const kern_backend *be = pass ? cuda : cpu;
        check_against_mask(be, 32, 8, 4, 4, 8);  /* MHA */
        check_against_mask(be, 32, 8, 4, 2, 8);  /* GQA, each half its own KV head */
        check_against_mask(be, 48, 12, 6, 3, 4); /* GQA, 3 KV heads: the middle one serves both halves */
        check_against_mask(be, 16, 4, 2, 1, 8);  /* MQA */
        check_against_mask(be, 24, 24, 4, 2, 8); /* one group: full attention */
    }
    check_full_equals_op(32, 4, 2, 8);
    check_full_equals_op(20, 6, 3, 4);
    char err[256] = "";
    CHECK(!s2_attn_new(cpu, 30, 8, 4, 4, 8, err, sizeof err) && strstr(err, "multiple"), "T 30 g 8: %s", err);
    CHECK(!s2_attn_new(cpu, 30, 5, 4, 4, 8, err, sizeof err) && strstr(err, "even"), "g 5: %s", err);
    CHECK(!s2_attn_new(cpu, 32, 8, 3, 3, 8, err, sizeof err) && strstr(err, "odd"), "3 heads: %s", err);
    check_model_step();
    return test_summary();
}
