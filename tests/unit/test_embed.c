/*
 * test_embed.c — mnemo_embed (mean-pooled, L2-normalised last hidden state after the final RMSNorm).
 *
 * Checked three ways:
 *   1. against tests/fixtures/embeddings/<model>.json (tests/reference/make_embedding_fixtures.py: a float64
 *      forward that reproduces transformers' logits to 2e-5), for mha and gqa;
 *   2. against the model's own logits: lm_head is linear, so the mean of the per-position logits of the same
 *      tokens (mnemo_decode with logits_all) must equal lm_head · (|mean| · embedding) — a second route to the
 *      same pooled state, also for LongLLaMA (one window, empty memory) and a tied-embedding model;
 *   3. chunking (n_batch 5 vs 512) changes nothing, the context is empty afterwards, errors are refused;
 *   4. with CUDA (a GPU, or the emulator build), the device path (rows downloaded after the final norm) gives the
 *      CPU's embedding.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "engine_impl.h"
#include "test_util.h"

static mnemo_model *load_on(const char *sub, mnemo_device device) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", test_fixtures(), sub);
    mnemo_model *m = NULL;
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = device;
    mp.n_threads = 1;
    mnemo_status st = mnemo_model_load(dir, &mp, &m);
    CHECK(st == MNEMO_OK, "load %s: %s", dir, mnemo_model_error(m));
    if (st != MNEMO_OK) {
        mnemo_model_free(m);
        return NULL;
    }
    return m;
}

/* The CPU unless said otherwise: the identity check reads lm_head from host memory. */
static mnemo_model *load(const char *sub) { return load_on(sub, MNEMO_DEVICE_CPU); }

static mnemo_context *context(mnemo_model *m, int32_t n_batch, bool logits_all) {
    mnemo_context_params cp = mnemo_context_default_params();
    cp.n_batch = n_batch;
    cp.logits_all = logits_all;
    mnemo_context *ctx = NULL;
    CHECK(mnemo_context_new(m, &cp, &ctx) == MNEMO_OK, "context: %s", mnemo_context_error(ctx));
    return ctx;
}

static double norm2(const float *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)v[i] * v[i];
    return sqrt(s);
}

/* 1. The reference fixture. */
static void against_reference(const char *name) {
    char path[4096], dir[64];
    snprintf(path, sizeof path, "%s/embeddings/%s.json", test_fixtures(), name);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECK(root != NULL, "%s: %s", path, je.text);
    if (!root) return;
    snprintf(dir, sizeof dir, "models/%s", name);
    mnemo_model *m = load(dir);
    mnemo_context *ctx = m ? context(m, 512, false) : NULL;
    const int d = m ? mnemo_model_n_embd(m) : 0;
    json_t *cases = json_object_get(root, "cases");
    CHECK(json_array_size(cases) >= 3, "%s: cases", name);
    for (size_t c = 0; ctx && c < json_array_size(cases); c++) {
        json_t *ids = json_object_get(json_array_get(cases, c), "ids");
        json_t *want = json_object_get(json_array_get(cases, c), "embedding");
        int n = (int)json_array_size(ids);
        mnemo_token tok[256];
        for (int i = 0; i < n && i < 256; i++) tok[i] = (mnemo_token)json_integer_value(json_array_get(ids, i));
        float got[1024];
        CHECK((int)json_array_size(want) == d, "%s case %zu: %zu floats, n_embd %d", name, c, json_array_size(want), d);
        mnemo_status st = mnemo_embed(ctx, tok, n, got, d);
        CHECK(st == MNEMO_OK, "%s case %zu: %s", name, c, mnemo_context_error(ctx));
        double worst = 0;
        for (int j = 0; j < d; j++) {
            double diff = fabs(got[j] - json_real_value(json_array_get(want, j)));
            if (diff > worst) worst = diff;
        }
        CHECK(worst < 1e-5, "%s case %zu: max |diff| %g vs the reference", name, c, worst);
        CHECK(fabs(norm2(got, d) - 1.0) < 1e-5, "%s case %zu: norm %g", name, c, norm2(got, d));
        CHECK(mnemo_context_n_past(ctx) == 0, "%s: the context is reset afterwards", name);
    }
    mnemo_context_free(ctx);
    mnemo_model_free(m);
    json_decref(root);
}

/* 2. mean_t(logits_t) = lm_head · mean_t(h_t) and embedding = mean_t(h_t) / |mean|: lm_head · embedding is the
 * mean logit row scaled by 1/|mean|. The scale c is fitted, the residual must vanish. */
static void against_logits(const char *sub, int n) {
    mnemo_model *m = load(sub);
    if (!m) return;
    const int d = mnemo_model_n_embd(m), V = mnemo_model_n_vocab(m);
    CHECK(m->w.lm_head.dt == KERN_F32, "%s: f32 lm_head expected", sub);
    const float *W = m->w.lm_head.data; /* (V, d) */
    mnemo_token tok[128];
    for (int i = 0; i < n; i++) tok[i] = i == 0 ? mnemo_model_bos(m) : (mnemo_token)((i * 37 + 11) % V);
    mnemo_context *lc = context(m, 512, true);
    CHECK(mnemo_decode(lc, tok, n) == MNEMO_OK, "%s decode: %s", sub, mnemo_context_error(lc));
    double *mean = calloc((size_t)V, sizeof *mean), *we = calloc((size_t)V, sizeof *we);
    for (int t = 0; t < n; t++) {
        const float *row = mnemo_get_logits(lc, t);
        CHECK(row != NULL, "%s: logits of row %d", sub, t);
        for (int v = 0; row && v < V; v++) mean[v] += row[v] / n;
    }
    float e[1024];
    mnemo_context *ec = context(m, 512, false);
    CHECK(mnemo_embed(ec, tok, n, e, d) == MNEMO_OK, "%s embed: %s", sub, mnemo_context_error(ec));
    double num = 0, den = 0, scale = 0;
    for (int v = 0; v < V; v++) {
        for (int j = 0; j < d; j++) we[v] += (double)W[(size_t)v * d + j] * e[j];
        num += we[v] * mean[v];
        den += we[v] * we[v];
        if (fabs(mean[v]) > scale) scale = fabs(mean[v]);
    }
    double c = num / den, worst = 0;
    for (int v = 0; v < V; v++)
        if (fabs(c * we[v] - mean[v]) > worst) worst = fabs(c * we[v] - mean[v]);
    CHECK(c > 0 && worst < 1e-4 * scale, "%s (%d tokens): lm_head·embedding vs mean logits: max |diff| %g of %g",
          sub, n, worst, scale);
    free(mean);
    free(we);
    mnemo_context_free(lc);
    mnemo_context_free(ec);
    mnemo_model_free(m);
}

/* 3. Chunking, state and errors. */
static void chunks_and_errors(void) {
    mnemo_model *m = load("models/mha");
    if (!m) return;
    const int d = mnemo_model_n_embd(m);
    mnemo_token tok[128];
    for (int i = 0; i < 128; i++) tok[i] = (mnemo_token)(1 + (i * 13) % 500);
    mnemo_context *big = context(m, 512, false), *small = context(m, 5, false);
    float a[1024], b[1024];
    CHECK(mnemo_decode(small, tok, 7) == MNEMO_OK, "decode before embed");
    CHECK(mnemo_embed(big, tok, 128, a, d) == MNEMO_OK, "embed the whole context: %s", mnemo_context_error(big));
    CHECK(mnemo_embed(small, tok, 128, b, d) == MNEMO_OK, "embed in chunks of 5: %s", mnemo_context_error(small));
    double worst = 0;
    for (int j = 0; j < d; j++)
        if (fabs(a[j] - b[j]) > worst) worst = fabs(a[j] - b[j]);
    CHECK(worst < 1e-5, "chunks of 5 vs one step: max |diff| %g", worst);
    CHECK(mnemo_context_n_past(small) == 0, "a context that held tokens is empty after embed");
    CHECK(mnemo_embed(big, tok, 128, b, d) == MNEMO_OK && !memcmp(a, b, sizeof(float) * (size_t)d),
          "the same input twice gives the same bytes");
    mnemo_token bad[2] = {1, 512};
    CHECK(mnemo_embed(big, tok, 0, a, d) == MNEMO_ERR_INVALID_ARG, "no tokens");
    CHECK(mnemo_embed(big, bad, 2, a, d) == MNEMO_ERR_INVALID_ARG && strstr(mnemo_context_error(big), "512"),
          "token outside the vocabulary: %s", mnemo_context_error(big));
    CHECK(mnemo_embed(big, tok, 10, a, d - 1) == MNEMO_ERR_INVALID_ARG, "n_out != n_embd");
    CHECK(mnemo_embed(big, tok, 10, NULL, d) == MNEMO_ERR_INVALID_ARG, "out NULL");
    mnemo_token many[129];
    for (int i = 0; i < 129; i++) many[i] = 5;
    CHECK(mnemo_embed(big, many, 129, a, d) == MNEMO_ERR_CONTEXT_FULL && strstr(mnemo_context_error(big), "128"),
          "longer than n_ctx: %s", mnemo_context_error(big));
    CHECK(mnemo_embed(NULL, tok, 1, a, d) == MNEMO_ERR_MISUSE, "NULL context");
    mnemo_context_free(big);
    mnemo_context_free(small);
    mnemo_model_free(m);

    m = load("longllama/basic"); /* window 64: one window with an empty memory, longer is refused */
    if (!m) return;
    mnemo_context *ll = context(m, 16, false);
    for (int i = 0; i < 65; i++) many[i] = (mnemo_token)(3 + i);
    CHECK(mnemo_embed(ll, many, 64, a, mnemo_model_n_embd(m)) == MNEMO_OK, "LongLLaMA window: %s",
          mnemo_context_error(ll));
    CHECK(fabs(norm2(a, mnemo_model_n_embd(m)) - 1) < 1e-5, "LongLLaMA norm");
    CHECK(mnemo_embed(ll, many, 65, a, mnemo_model_n_embd(m)) == MNEMO_ERR_CONTEXT_FULL &&
              strstr(mnemo_context_error(ll), "64"),
          "LongLLaMA past the window: %s", mnemo_context_error(ll));
    mnemo_memory_stats ms;
    CHECK(mnemo_context_memory(ll, &ms) == MNEMO_OK && ms.local_tokens == 0 && ms.mem_tokens == 0,
          "LongLLaMA context empty afterwards");
    mnemo_context_free(ll);
    mnemo_model_free(m);
}

/* 4. */
static void cuda_matches_cpu(void) {
    char info[256];
    if (!kern_cuda_available(info, sizeof info)) {
        printf("cuda: not run (%s)\n", info);
        return;
    }
    const char *models[] = {"models/mha", "models/gqa", "longllama/basic"};
    mnemo_token tok[60];
    for (int i = 0; i < 60; i++) tok[i] = i == 0 ? 1 : (mnemo_token)(5 + (i * 29) % 500);
    for (int k = 0; k < 3; k++) {
        mnemo_model *cpu = load(models[k]), *gpu = load_on(models[k], MNEMO_DEVICE_CUDA);
        mnemo_context *a = cpu ? context(cpu, 16, false) : NULL, *b = gpu ? context(gpu, 16, false) : NULL;
        float x[1024], y[1024];
        int d = cpu ? mnemo_model_n_embd(cpu) : 0;
        CHECK(a && b && mnemo_embed(a, tok, 60, x, d) == MNEMO_OK && mnemo_embed(b, tok, 60, y, d) == MNEMO_OK,
              "%s: embed on both devices: %s", models[k], b ? mnemo_context_error(b) : "no CUDA context");
        double worst = 0;
        for (int j = 0; a && b && j < d; j++)
            if (fabs(x[j] - y[j]) > worst) worst = fabs(x[j] - y[j]);
        CHECK(worst < 1e-4, "%s: CUDA vs CPU embedding max |diff| %g", models[k], worst);
        printf("cuda %s: max |diff| vs cpu %.2e\n", models[k], worst);
        mnemo_context_free(a);
        mnemo_context_free(b);
        mnemo_model_free(cpu);
        mnemo_model_free(gpu);
    }
}

int main(void) {
    mnemo_log_set_level(MNEMO_LOG_ERROR);
    against_reference("mha");
    against_reference("gqa");
    against_logits("models/mha", 40);
    against_logits("models/gqa", 128);
    against_logits("models/tied", 20);
    against_logits("longllama/basic", 30); /* <= last_context_length 32: decode runs it as one window too */
    chunks_and_errors();
    cuda_matches_cpu();
    return test_summary();
}
