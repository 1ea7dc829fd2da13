/*
 * test_uio_knn.c — UIO options beyond the reference, on the CPU:
 * (b) uio_mem_budget: <mem> entries past the budget in a kNN memstore, attended at position 0
 *   - tests/fixtures/uio_knn/gqa_c12_m3_b7 (make_uio_knn_fixtures.py, the extended statement in uio_reference.py:
 *     budget 7, 8 compressions, 17 entries stored): logits of every fed token within 1e-4 with dense store attention
 *     (mem_knn_k 0) and with top-k = all entries through the flat (FAISS) and brute indexes; one call, token by
 *     token and decode_batch; greedy ids; entry counts; n_ctx = budget + chunk_size is enough for 100 tokens,
 *     which without a budget are refused;
 *   - budgets 1 (below num_memory) and 3 (equal to it), every 5th row of the same feed within 1e-4;
 *   - contexts with and without a budget in one mnemo_decode_batch, either first; mem_max_bytes refusing a move;
 *   - a budget larger than the memory gives exactly (bitwise) the logits of no budget, for every UIO fixture case;
 *   - top-k below the store: flat equals brute (both exact) and differs from dense (the selection is used);
 *   - snapshots keep it: saved with entries stored, loaded, continued: the fixture's logits; refused under another
 *     budget;
 * (c) uio_encode_batch: segments of a >= 6-segment prompt through the encoder several at a time: logits within 1e-5
 *   of the sequential path (last token, and every row with logits_all), the same memory sizes and the same greedy
 *   continuation; with a budget too;
 * and bad parameters refused with a message.
 * The budget checks run on the CPU and, when usable, on CUDA (MNEMO_TEST_DEVICE=cpu|cuda|all, as test_uio; the CPU
 * emulator build counts); the batched-encoder and unreached-budget checks on the CPU.
 */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "engine_impl.h"
#include "fixture_logits.h"
#include "kernels.h"
#include "test_devices.h"
#include "test_util.h"
#include "uio_memory.h"

#define LOGIT_TOL 1e-4f /* against the fp64 reference rounded to fp32 (as test_uio) */
/* Batched encoder vs sequential: the same arithmetic up to the GEMMs' summation order (OpenBLAS blocks a 15-row and
 * a 60-row product differently). The memory K/V entries, what compression produces, within 1e-5; logits (up to
 * |20| here) within 1e-5 relative to the largest. */
#define BATCH_TOL 1e-5f

static const char *const UIO_CASES[] = {"mha_c16_m4", "mha_c16_m2_bf16", "gqa_c12_m3"};

typedef struct {
    json_t *ref;
    char base[4096], uio[4096];
    int32_t *fed, n_fed, P, n_greedy, C, M, budget;
    const int32_t *greedy;
    logit_block lg; /* only for the uio_knn fixture */
} fixture;

static float max_diff(const float *a, const float *b, int64_t n) {
    float m = 0.f;
    for (int64_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN counts as the worst */
    }
    return m;
}

static void fixture_path(char *out, size_t len, const char *rel) { /* "tests/fixtures/x" -> $MNEMO_FIXTURES/x */
    snprintf(out, len, "%s/%s", test_fixtures(), rel && !strncmp(rel, "tests/fixtures/", 15) ? rel + 15 : "");
}

/* dir: "uio/<case>" or "uio_knn/<case>" under the fixtures. */
static bool load_fixture(const char *dir, fixture *f) {
    memset(f, 0, sizeof *f);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s/reference.json", test_fixtures(), dir);
    json_error_t je;
    f->ref = json_load_file(path, 0, &je);
    CHECK(f->ref != NULL, "%s: %s", path, je.text);
    if (!f->ref) return false;
    fixture_path(f->base, sizeof f->base, json_string_value(json_object_get(f->ref, "base")));
    json_t *ud = json_object_get(f->ref, "uio_dir");
    if (ud) {
        fixture_path(f->uio, sizeof f->uio, json_string_value(ud));
    } else {
        snprintf(f->uio, sizeof f->uio, "%s/%s/%s", test_fixtures(), dir,
                 json_string_value(json_object_get(json_object_get(f->ref, "uio_dirs"), "safetensors")));
    }
    json_t *prompt = json_object_get(json_object_get(f->ref, "prompt"), "ids");
    json_t *greedy = json_object_get(f->ref, "greedy");
    f->P = (int32_t)json_array_size(prompt);
    f->n_greedy = (int32_t)json_array_size(greedy);
    f->n_fed = f->P + f->n_greedy - 1;
    f->fed = malloc((size_t)(f->P + f->n_greedy) * sizeof *f->fed);
    for (int32_t i = 0; i < f->P; i++) f->fed[i] = (int32_t)json_integer_value(json_array_get(prompt, (size_t)i));
    for (int32_t i = 0; i < f->n_greedy; i++)
        f->fed[f->P + i] = (int32_t)json_integer_value(json_array_get(greedy, (size_t)i));
    f->greedy = f->fed + f->P;
    json_t *uc = json_object_get(f->ref, "uio_config");
    f->C = (int32_t)json_integer_value(json_object_get(uc, "chunk_size"));
    f->M = (int32_t)json_integer_value(json_object_get(uc, "num_memory"));
    f->budget = (int32_t)json_integer_value(json_object_get(f->ref, "budget"));
    if (f->budget) {
        snprintf(path, sizeof path, "%s/%s/logits.bin", test_fixtures(), dir);
        int nb = read_logits(path, &f->lg, 1);
        CHECK(nb == 1 && f->lg.n_tokens == f->n_fed, "%s: logits.bin holds %d rows for %d fed tokens", dir,
              nb == 1 ? f->lg.n_tokens : -1, f->n_fed);
        if (nb != 1 || f->lg.n_tokens != f->n_fed) return false;
    }
    return f->P > 0 && f->C > 0 && f->M > 0;
}

static void free_fixture(fixture *f) {
    json_decref(f->ref);
    free(f->fed);
    free(f->lg.data);
}

static mnemo_model *load_model(const fixture *f, mnemo_device dev) {
    mnemo_model_params mp = mnemo_model_default_params();
    mp.n_threads = 1;
    mp.device = dev;
    mp.uio_dir = f->uio;
    mnemo_model *m = NULL;
    mnemo_status st = mnemo_model_load(f->base, &mp, &m);
    CHECK(st == MNEMO_OK, "load %s + %s: %s", f->base, f->uio, mnemo_model_error(m));
    if (st != MNEMO_OK) {
        mnemo_model_free(m);
        return NULL;
    }
    return m;
}

/* Context parameters: budget (0: none), kNN k (0: dense over the store), index, logits_all, encode batch. */
static mnemo_context_params params(int32_t budget, int32_t k, mnemo_mem_index index, bool all, int32_t batch) {
    mnemo_context_params cp = mnemo_context_default_params();
    cp.uio_mem_budget = budget;
    cp.mem_knn_k = k;
    cp.mem_dense_rows = 0;
    cp.mem_index = index;
    cp.logits_all = all;
    cp.uio_encode_batch = batch;
    return cp;
}

static mnemo_context *new_ctx(mnemo_model *m, const mnemo_context_params *cp) {
    mnemo_context *ctx = NULL;
    mnemo_status st = mnemo_context_new(m, cp, &ctx);
    CHECK(st == MNEMO_OK, "context: %s", mnemo_context_error(ctx));
    if (st != MNEMO_OK) {
        mnemo_context_free(ctx);
        return NULL;
    }
    return ctx;
}

/* Every row's logits of tokens fed in one call (cp.logits_all) into out [n][V]; false on failure. */
static bool feed_all(mnemo_context *ctx, const int32_t *tok, int32_t n, float *out, int32_t V) {
    mnemo_status st = mnemo_decode(ctx, tok, n);
    CHECK(st == MNEMO_OK, "decode %d tokens: %s", n, mnemo_context_error(ctx));
    if (st != MNEMO_OK) return false;
    for (int32_t t = 0; t < n; t++) {
        const float *lg = mnemo_get_logits(ctx, t);
        if (!lg) return false;
        memcpy(out + (size_t)t * V, lg, (size_t)V * sizeof(float));
    }
    return true;
}

static float rows_diff(const float *a, const float *b, int32_t rows, int32_t V) {
    return max_diff(a, b, (int64_t)rows * V);
}

static void stats(const mnemo_context *ctx, mnemo_memory_stats *ms) {
    CHECK(mnemo_context_memory(ctx, ms) == MNEMO_OK, "memory stats");
}

/* ---- (b) against the fixture */
static void test_budget_fixture(const fixture *f, mnemo_model *m) {
    const int32_t V = f->lg.n_vocab, n = f->n_fed;
    float *got = malloc((size_t)n * V * sizeof(float)), *dense = malloc((size_t)n * V * sizeof(float));
    struct {
        const char *name;
        int32_t k;
        mnemo_mem_index index;
    } ways[] = {{"dense store", 0, MNEMO_MEM_INDEX_FLAT},
                {"top-k = all, flat", 4096, MNEMO_MEM_INDEX_FLAT},
                {"top-k = all, brute", 4096, MNEMO_MEM_INDEX_BRUTE}};
    for (size_t w = 0; w < sizeof ways / sizeof *ways; w++) {
        mnemo_context_params cp = params(f->budget, ways[w].k, ways[w].index, true, 1);
        cp.n_ctx = f->budget + f->C; /* the least a budget needs: 100 tokens in 19 positions */
        mnemo_context *ctx = new_ctx(m, &cp);
        if (!ctx || !feed_all(ctx, f->fed, n, got, V)) {
            mnemo_context_free(ctx);
            continue;
        }
        float d = rows_diff(got, f->lg.data, n, V);
        printf("  budget %d, %-20s vs reference: max |dlogit| %.3g over %d rows\n", f->budget, ways[w].name, d, n);
        CHECK(d <= LOGIT_TOL, "budget %d, %s: max |dlogit| %g > %g", f->budget, ways[w].name, d, LOGIT_TOL);
        if (w == 0) memcpy(dense, got, (size_t)n * V * sizeof(float));
        else {
            float dd = rows_diff(got, dense, n, V);
            CHECK(dd <= LOGIT_TOL, "%s vs dense store attention: %g", ways[w].name, dd);
        }
        json_t *fin = json_object_get(f->ref, "final_state");
        mnemo_memory_stats ms;
        stats(ctx, &ms);
        int64_t want = json_integer_value(json_object_get(fin, "mem_slots")) +
                       json_integer_value(json_object_get(fin, "store_slots"));
        int64_t raw = json_integer_value(json_object_get(fin, "raw_tokens"));
        CHECK((int64_t)ms.mem_entries == want && ms.local_tokens == raw,
              "%s: %llu entries, %d raw; expected %lld", ways[w].name, (unsigned long long)ms.mem_entries,
              ms.local_tokens, (long long)want);
        mnemo_context_free(ctx);
    }
    /* the same n_ctx without a budget cannot hold these tokens */
    mnemo_context_params cp = params(0, 0, MNEMO_MEM_INDEX_FLAT, true, 1);
    cp.n_ctx = f->budget + f->C;
    mnemo_context *ctx = new_ctx(m, &cp);
    if (ctx) {
        mnemo_status st = mnemo_decode(ctx, f->fed, n);
        CHECK(st == MNEMO_ERR_CONTEXT_FULL && strstr(mnemo_context_error(ctx), "uio_mem_budget"),
              "no budget, n_ctx %d: %d tokens should not fit (status %d: %s)", cp.n_ctx, n, st,
              mnemo_context_error(ctx));
        mnemo_context_free(ctx);
    }

    /* token by token (compression and the move to the store between calls) and decode_batch (make_room) */
    for (int way = 0; way < 2; way++) {
        cp = params(f->budget, 0, MNEMO_MEM_INDEX_FLAT, false, 1);
        cp.n_ctx = f->budget + f->C;
        ctx = new_ctx(m, &cp);
        float worst = 0.f;
        for (int32_t t = 0; ctx && t < n; t++) {
            mnemo_batch_entry e = {.ctx = ctx, .tokens = f->fed + t, .n = 1};
            mnemo_status st = way == 0 ? mnemo_decode(ctx, f->fed + t, 1) : mnemo_decode_batch(&e, 1);
            const float *lg = mnemo_get_logits(ctx, -1);
            if (st != MNEMO_OK || !lg) {
                CHECK(false, "%s at %d: %s", way ? "decode_batch" : "token by token", t, mnemo_context_error(ctx));
                break;
            }
            float d = max_diff(lg, f->lg.data + (size_t)t * V, V);
            worst = d > worst ? d : worst;
        }
        printf("  budget %d, %-20s vs reference: max |dlogit| %.3g\n", f->budget,
               way ? "decode_batch" : "token by token", worst);
        CHECK(worst <= LOGIT_TOL, "%s: %g", way ? "decode_batch" : "token by token", worst);
        mnemo_context_free(ctx);
    }

    /* top-k below the store (4 of 17 entries): both exact indexes agree, and the selection changes the logits */
    float *brute = malloc((size_t)n * V * sizeof(float));
    cp = params(f->budget, 4, MNEMO_MEM_INDEX_FLAT, true, 1);
    mnemo_context *a = new_ctx(m, &cp);
    cp.mem_index = MNEMO_MEM_INDEX_BRUTE;
    mnemo_context *b = new_ctx(m, &cp);
    if (a && b && feed_all(a, f->fed, n, got, V) && feed_all(b, f->fed, n, brute, V)) {
        float d_ab = rows_diff(got, brute, n, V), d_dense = rows_diff(got, dense, n, V);
        printf("  top-4 of the store: flat vs brute %.3g, vs dense %.3g\n", d_ab, d_dense);
        CHECK(d_ab <= 1e-5f, "top-4, flat vs brute: %g", d_ab);
        CHECK(d_dense > 1e-3f, "top-4 should differ from dense store attention (%g)", d_dense);
    }
    mnemo_context_free(a);
    mnemo_context_free(b);
    free(brute);
    free(got);
    free(dense);
}

/* A greedy continuation with a budget: the fixture's ids (generate() under the same budget). */
typedef struct {
    int32_t ids[256];
    int32_t n;
} collected;

static bool collect(const mnemo_token_event *ev, void *user) {
    collected *c = user;
    if (c->n < 256) c->ids[c->n++] = ev->token;
    return true;
}

static int32_t greedy_run(mnemo_model *m, const mnemo_context_params *cp, const int32_t *prompt, int32_t P,
                          int32_t n_new, collected *out) {
    mnemo_context *ctx = new_ctx(m, cp);
    if (!ctx) return -1;
    mnemo_generate_params gp = mnemo_generate_default_params();
    gp.max_tokens = n_new;
    gp.sampling.temperature = 0.f;
    gp.add_bos = false; /* the fixtures' prompts start with BOS */
    gp.ignore_eos = true;
    out->n = 0;
    mnemo_status st = mnemo_generate_tokens(ctx, prompt, P, &gp, collect, out, NULL);
    CHECK(st == MNEMO_OK, "generate: %s", mnemo_context_error(ctx));
    mnemo_context_free(ctx);
    return out->n;
}

static void test_budget_greedy(const fixture *f, mnemo_model *m) {
    mnemo_context_params cp = params(f->budget, 4096, MNEMO_MEM_INDEX_FLAT, false, 1);
    cp.n_ctx = f->budget + f->C;
    collected got;
    greedy_run(m, &cp, f->fed, f->P, f->n_greedy, &got);
    int same = got.n == f->n_greedy;
    for (int32_t i = 0; same && i < got.n; i++) same = got.ids[i] == f->greedy[i];
    CHECK(same, "greedy ids under budget %d differ from the reference's (%d tokens)", f->budget, got.n);
}

/* ---- (b) a budget the memory never passes changes nothing, bit for bit */
static void test_budget_unreached(const fixture *f, mnemo_model *m) {
    const int32_t n = f->n_fed, V = mnemo_model_n_vocab(m);
    float *a = malloc((size_t)n * V * sizeof(float)), *b = malloc((size_t)n * V * sizeof(float));
    mnemo_context_params cp = params(0, 0, MNEMO_MEM_INDEX_FLAT, true, 1);
    mnemo_context *c0 = new_ctx(m, &cp);
    cp.uio_mem_budget = 64; /* > the 8 compressions' 32 entries at most; + chunk_size <= n_ctx 128 */
    mnemo_context *c1 = new_ctx(m, &cp);
    if (c0 && c1 && feed_all(c0, f->fed, n, a, V) && feed_all(c1, f->fed, n, b, V)) {
        float d = rows_diff(a, b, n, V);
        printf("  budget 64 (never reached) vs none: max |dlogit| %g\n", d);
        CHECK(d == 0.f, "budget 64 (never reached) vs none: max |dlogit| %g, expected exactly 0", d);
        mnemo_memory_stats s0, s1;
        stats(c0, &s0);
        stats(c1, &s1);
        CHECK(s0.mem_entries == s1.mem_entries && s0.mem_entries > 0, "unreached budget: entries %llu vs %llu",
              (unsigned long long)s0.mem_entries, (unsigned long long)s1.mem_entries);
    }
    mnemo_context_free(c0);
    mnemo_context_free(c1);
    free(a);
    free(b);
}

/* ---- (b) budgets below num_memory (1: a segment's entries leave as they come) and equal to it (3), every 5th row
 * (other_budgets.bin) */
static void test_other_budgets(const fixture *f, mnemo_model *m) {
    char path[4200];
    snprintf(path, sizeof path, "%s/uio_knn/gqa_c12_m3_b7/other_budgets.bin", test_fixtures());
    logit_block blk[2] = {{0}};
    json_t *bs = json_object_get(f->ref, "other_budgets");
    int nb = read_logits(path, blk, 2);
    CHECK(nb == 2 && json_array_size(bs) == 2, "%s: %d records", path, nb);
    const int32_t V = f->lg.n_vocab, n = f->n_fed;
    float *got = malloc((size_t)n * V * sizeof(float));
    for (int i = 0; i < nb && i < 2; i++) {
        int32_t budget = (int32_t)json_integer_value(json_array_get(bs, (size_t)i));
        for (int k = 0; k < 2; k++) {
            mnemo_context_params cp = params(budget, k ? 4096 : 0, MNEMO_MEM_INDEX_FLAT, true, 1);
            cp.n_ctx = budget + f->C;
            mnemo_context *ctx = new_ctx(m, &cp);
            if (ctx && feed_all(ctx, f->fed, n, got, V)) {
                float d = 0.f;
                CHECK(blk[i].n_tokens == n / 5, "budget %d: %d rows", budget, blk[i].n_tokens);
                for (int32_t r = 0; r < blk[i].n_tokens && 5 * r + 4 < n; r++)
                    d = fmaxf(d, max_diff(got + (size_t)(5 * r + 4) * V, blk[i].data + (size_t)r * V, V));
                printf("  budget %d, %-20s vs reference: max |dlogit| %.3g (every 5th row)\n", budget,
                       k ? "top-k = all, flat" : "dense store", d);
                CHECK(d <= LOGIT_TOL, "budget %d (%s): %g", budget, k ? "top-k" : "dense", d);
            }
            mnemo_context_free(ctx);
        }
    }
    for (int i = 0; i < nb; i++) free(blk[i].data);
    free(got);
}

/* ---- (b) contexts with and without a budget in one mnemo_decode_batch, either first: each as alone */
static void test_budget_mixed_batch(const fixture *f, mnemo_model *m) {
    const int32_t V = f->lg.n_vocab, n = f->P;
    mnemo_context_params cb = params(f->budget, 0, MNEMO_MEM_INDEX_FLAT, false, 1);
    mnemo_context_params c0 = params(0, 0, MNEMO_MEM_INDEX_FLAT, false, 1);
    mnemo_context *a = new_ctx(m, &cb), *b = new_ctx(m, &c0), *alone = new_ctx(m, &c0);
    float wa = 0.f, wb = 0.f;
    for (int32_t t = 0; a && b && alone && t < n; t++) {
        mnemo_batch_entry e[2] = {{.ctx = a, .tokens = f->fed + t, .n = 1}, {.ctx = b, .tokens = f->fed + t, .n = 1}};
        if (t % 2) { /* the context without a budget first every other step */
            mnemo_batch_entry x = e[0];
            e[0] = e[1];
            e[1] = x;
        }
        mnemo_status st = mnemo_decode_batch(e, 2);
        mnemo_status st1 = mnemo_decode(alone, f->fed + t, 1);
        if (st != MNEMO_OK || st1 != MNEMO_OK) {
            CHECK(false, "mixed batch at %d: %s / %s", t, mnemo_context_error(a), mnemo_context_error(alone));
            break;
        }
        wa = fmaxf(wa, max_diff(mnemo_get_logits(a, -1), f->lg.data + (size_t)t * V, V));
        wb = fmaxf(wb, max_diff(mnemo_get_logits(b, -1), mnemo_get_logits(alone, -1), V)); /* 2-row vs 1-row GEMMs */
    }
    printf("  budget %d, %-20s vs reference: max |dlogit| %.3g; its no-budget partner vs alone %.3g\n", f->budget,
           "mixed decode_batch", wa, wb);
    CHECK(wa <= LOGIT_TOL && wb <= LOGIT_TOL,  "mixed batch: budget context %g, no-budget context %g", wa, wb);
    mnemo_context_free(a);
    mnemo_context_free(b);
    mnemo_context_free(alone);
}

/* ---- (b) snapshots */
static void test_budget_snapshot(const fixture *f, mnemo_model *m) {
    const int32_t V = f->lg.n_vocab, n = f->n_fed, cut = 50; /* 4 compressions: 5 entries stored */
    char path[] = "/tmp/mnemo-uio-knn-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "temp file");
    if (fd < 0) return;
    close(fd);
    mnemo_context_params cp = params(f->budget, 0, MNEMO_MEM_INDEX_FLAT, true, 1);
    mnemo_context *a = new_ctx(m, &cp), *b = new_ctx(m, &cp);
    float *rows = malloc((size_t)n * V * sizeof(float));
    if (a && b && feed_all(a, f->fed, cut, rows, V)) {
        mnemo_memory_stats ms;
        stats(a, &ms);
        CHECK(ms.mem_entries == 12 && ms.mem_entries > (uint64_t)f->budget, "entries at the cut: %llu",
              (unsigned long long)ms.mem_entries);
        mnemo_status st = mnemo_context_save(a, path);
        CHECK(st == MNEMO_OK, "save: %s", mnemo_context_error(a));
        st = mnemo_context_load(b, path);
        CHECK(st == MNEMO_OK, "load: %s", mnemo_context_error(b));
        if (st == MNEMO_OK && feed_all(b, f->fed + cut, n - cut, rows, V)) {
            float d = rows_diff(rows, f->lg.data + (size_t)cut * V, n - cut, V);
            printf("  budget %d, %-20s vs reference: max |dlogit| %.3g\n", f->budget, "snapshot, continued", d);
            CHECK(d <= LOGIT_TOL, "continued after a snapshot: %g", d);
        }
        int32_t others[] = {f->budget + 1, 0};
        for (int i = 0; i < 2; i++) {
            mnemo_context_params oc = params(others[i], 0, MNEMO_MEM_INDEX_FLAT, true, 1);
            mnemo_context *c = new_ctx(m, &oc);
            if (!c) continue;
            st = mnemo_context_load(c, path);
            CHECK(st != MNEMO_OK && (others[i] == 0 || strstr(mnemo_context_error(c), "uio_mem_budget")),
                  "a snapshot under budget %d must not load under %d (status %d: %s)", f->budget, others[i], st,
                  mnemo_context_error(c));
            mnemo_context_free(c);
        }
    }
    free(rows);
    mnemo_context_free(a);
    mnemo_context_free(b);
    unlink(path);
}

/* ---- (c) the batched encoder against the sequential path */
static void test_batched(const fixture *f, mnemo_model *m, int32_t budget, const char *name) {
    const int32_t n = f->P, V = mnemo_model_n_vocab(m);
    CHECK(n / f->C >= 6, "%s: the prompt should span >= 6 segments (%d tokens, chunk_size %d)", name, n, f->C);
    float *seq = malloc((size_t)n * V * sizeof(float)), *bat = malloc((size_t)n * V * sizeof(float));
    const int32_t batches[] = {2, 4, 64};
    for (int all = 0; all < 2; all++) {
        mnemo_context_params cp = params(budget, 0, MNEMO_MEM_INDEX_FLAT, all, 1);
        mnemo_context *c0 = new_ctx(m, &cp);
        bool ok0 = c0 && (all ? feed_all(c0, f->fed, n, seq, V) : mnemo_decode(c0, f->fed, n) == MNEMO_OK);
        if (ok0 && !all) memcpy(seq, mnemo_get_logits(c0, -1), (size_t)V * sizeof(float));
        mnemo_memory_stats s0 = {0};
        if (ok0) stats(c0, &s0);
        for (size_t i = 0; ok0 && i < sizeof batches / sizeof *batches; i++) {
            cp.uio_encode_batch = batches[i];
            mnemo_context *c1 = new_ctx(m, &cp);
            bool ok1 = c1 && (all ? feed_all(c1, f->fed, n, bat, V) : mnemo_decode(c1, f->fed, n) == MNEMO_OK);
            if (ok1 && !all) memcpy(bat, mnemo_get_logits(c1, -1), (size_t)V * sizeof(float));
            CHECK(ok1, "%s, batch %d: %s", name, batches[i], c1 ? mnemo_context_error(c1) : "no context");
            if (ok1) {
                float scale = 1.f;
                for (int64_t j = 0; j < (int64_t)(all ? n : 1) * V; j++) scale = fmaxf(scale, fabsf(seq[j]));
                float d = rows_diff(seq, bat, all ? n : 1, V) / scale;
                const uio_state *u0 = c0->mem_state, *u1 = c1->mem_state;
                const kv_cache *k0 = &c0->kv, *k1 = &c1->kv;
                float dkv = u0->n_mem == u1->n_mem ? 0.f : INFINITY;
                for (int32_t l = 0; l < k0->n_layer && u0->n_mem == u1->n_mem; l++) {
                    size_t off = (size_t)l * (size_t)k0->n_ctx * (size_t)k0->kv_dim;
                    int64_t cnt = (int64_t)u0->n_mem * k0->kv_dim;
                    dkv = fmaxf(dkv, fmaxf(max_diff(k0->k + off, k1->k + off, cnt),
                                           max_diff(k0->v + off, k1->v + off, cnt)));
                }
                printf("  %-16s budget %d, encode batch %2d, %s: vs sequential max |dlogit|/max|logit| %.3g, "
                       "memory K/V %.3g\n", name, budget, batches[i], all ? "every row" : "last token", d, dkv);
                CHECK(dkv <= BATCH_TOL, "%s batch %d: memory K/V differ by %g > %g", name, batches[i], dkv, BATCH_TOL);
                CHECK(d <= BATCH_TOL, "%s batch %d (%s): %g > %g", name, batches[i], all ? "all rows" : "last", d,
                      BATCH_TOL);
                mnemo_memory_stats s1;
                stats(c1, &s1);
                CHECK(s1.mem_entries == s0.mem_entries && s1.local_tokens == s0.local_tokens &&
                          s1.mem_tokens == s0.mem_tokens && mnemo_context_n_past(c1) == mnemo_context_n_past(c0),
                      "%s batch %d: memory sizes differ from the sequential path", name, batches[i]);
            }
            mnemo_context_free(c1);
        }
        mnemo_context_free(c0);
    }
    /* and the continuation: greedy from both */
    collected g0, g1;
    mnemo_context_params cp = params(budget, 0, MNEMO_MEM_INDEX_FLAT, false, 1);
    greedy_run(m, &cp, f->fed, n, 2 * f->C, &g0);
    cp.uio_encode_batch = 4;
    greedy_run(m, &cp, f->fed, n, 2 * f->C, &g1);
    CHECK(g0.n == g1.n && !memcmp(g0.ids, g1.ids, (size_t)g0.n * sizeof(int32_t)),
          "%s: greedy continuation differs with the batched encoder", name);
    free(seq);
    free(bat);
}

/* ---- bad parameters */
static void test_refusals(const fixture *f, mnemo_model *m) {
    struct {
        int32_t budget, n_ctx, batch, keep;
        const char *says, *also;
    } bad[] = {{-1, 0, 1, 0, "uio_mem_budget", ""},
               {f->budget, f->budget + f->C - 1, 1, 0, "n_ctx", ""},
               {0, 0, -2, 0, "uio_encode_batch", ""},
               /* option (a) is not combined with (b) or (c) (engine.h) */
               {f->budget, 0, 1, 2, "uio_keep_raw (2) cannot be combined", "uio_mem_budget"},
               {0, 0, 4, 2, "uio_keep_raw (2) cannot be combined", "uio_encode_batch"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mnemo_context_params cp = params(bad[i].budget, 0, MNEMO_MEM_INDEX_FLAT, false, bad[i].batch);
        cp.n_ctx = bad[i].n_ctx;
        cp.uio_keep_raw = bad[i].keep;
        mnemo_context *ctx = NULL;
        mnemo_status st = mnemo_context_new(m, &cp, &ctx);
        CHECK(st == MNEMO_ERR_INVALID_ARG && strstr(mnemo_context_error(ctx), bad[i].says) &&
                  strstr(mnemo_context_error(ctx), bad[i].also),
              "bad parameters %zu: status %d, message '%s' (should name %s %s)", i, st, mnemo_context_error(ctx),
              bad[i].says, bad[i].also);
        mnemo_context_free(ctx);
    }
    /* each alone is fine: keep_raw with batch 1 (or 0) and no budget */
    for (int32_t batch = 0; batch <= 1; batch++) {
        mnemo_context_params cp = params(0, 0, MNEMO_MEM_INDEX_FLAT, false, batch);
        cp.uio_keep_raw = 2;
        mnemo_context *ctx = new_ctx(m, &cp);
        mnemo_context_free(ctx);
    }
}

/* ---- (b) mem_max_bytes bounds the stores: the move that would pass it is refused */
static void test_store_limit(const fixture *f, mnemo_model *m) {
    mnemo_context_params cp = params(f->budget, 0, MNEMO_MEM_INDEX_FLAT, false, 1);
    cp.mem_max_bytes = 1; /* no entry fits */
    mnemo_context *ctx = new_ctx(m, &cp);
    if (!ctx) return;
    mnemo_status st = mnemo_decode(ctx, f->fed, f->n_fed);
    CHECK(st == MNEMO_ERR_CONTEXT_FULL && strstr(mnemo_context_error(ctx), "memory limit"),
          "mem_max_bytes 1: status %d (%s)", st, mnemo_context_error(ctx));
    mnemo_context_free(ctx);
}

int main(void) {
    test_devices devs = test_pick_devices();
    fixture kf;
    if (load_fixture("uio_knn/gqa_c12_m3_b7", &kf)) {
        for (int d = 0; d < 2; d++) {
            if (d == 0 ? !devs.cpu : !devs.cuda) continue;
            mnemo_model *m = load_model(&kf, d ? MNEMO_DEVICE_CUDA : MNEMO_DEVICE_CPU);
            if (m) {
                printf("[%s] (b) compressed memory past a budget, retrieved by kNN (gqa_c12_m3, budget %d)\n",
                       d ? "cuda" : "cpu", kf.budget);
                test_budget_fixture(&kf, m);
                test_budget_greedy(&kf, m);
                test_budget_snapshot(&kf, m);
                test_budget_mixed_batch(&kf, m);
                test_other_budgets(&kf, m);
                test_store_limit(&kf, m);
                test_refusals(&kf, m);
                if (d == 0) { /* compares cache rows in host memory */
                    printf("[cpu] (c) batched encoder with a budget\n");
                    test_batched(&kf, m, kf.budget, "gqa_c12_m3_b7");
                }
            }
            mnemo_model_free(m);
        }
    }
    free_fixture(&kf);
    for (size_t c = 0; devs.cpu && c < sizeof UIO_CASES / sizeof *UIO_CASES; c++) {
        char dir[64];
        snprintf(dir, sizeof dir, "uio/%s", UIO_CASES[c]);
        fixture f;
        if (load_fixture(dir, &f)) {
            mnemo_model *m = load_model(&f, MNEMO_DEVICE_CPU);
            if (m) {
                printf("[cpu] %s\n", UIO_CASES[c]);
                test_budget_unreached(&f, m);
                test_batched(&f, m, 0, UIO_CASES[c]);
            }
            mnemo_model_free(m);
        }
        free_fixture(&f);
    }
    return test_summary();
}
