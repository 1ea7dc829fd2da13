/*
 * test_retrieval_memory.c — retrieval memory (engine/src/memory/retrieval_*.c) on a tiny random GQA LLaMA:
 *   - its logits at every position of a prompt decoded in steps, then of tokens decoded one by one, equal the
 *     float64 statement's (tests/reference/retrieval_ref.py; fixture tests/fixtures/retrieval) within the
 *     tolerance reference.json states: a wrong block retrieved, a wrong representative or a wrong position moves
 *     them far past it;
 *   - a prompt that fits sinks + window gives the plain model's logits, bit for bit;
 *   - a snapshot reloads into a context that then decodes as the saved one would; one written under another
 *     memory mode, or other retrieval settings, is refused naming both;
 *   - options that do not fit (window past the model's positions, top-k 0, sinks > window, block 0, ...) are refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "fixture_logits.h"
#include "test_util.h"

static char ref_json[1 << 16];

/* The integer after "key": in reference.json (-1 when absent). */
static long json_int(const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(ref_json, pat);
    return p ? strtol(p + strlen(pat), NULL, 10) : -1;
}

static double json_double(const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(ref_json, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

/* The "ids" array into ids (at most max); how many. */
static int json_ids(mnemo_token *ids, int max) {
    const char *p = strstr(ref_json, "\"ids\":");
    if (!p || !(p = strchr(p, '['))) return 0;
    int n = 0;
    for (p++; n < max;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        ids[n++] = (mnemo_token)v;
        p = end;
        while (*p == ',' || *p == ' ' || *p == '\n') p++;
    }
    return n;
}

static mnemo_context_params retrieval_params(void) {
    mnemo_context_params cp = mnemo_context_default_params();
    cp.memory = MNEMO_MEMORY_RETRIEVAL;
    cp.ret_sinks = (int32_t)json_int("sinks");
    cp.ret_window = (int32_t)json_int("window");
    cp.ret_topk = (int32_t)json_int("topk");
    cp.ret_block = (int32_t)json_int("block");
    cp.ret_reps = (int32_t)json_int("reps");
    cp.n_batch = (int32_t)json_int("n_batch");
    cp.mem_index = MNEMO_MEM_INDEX_FLAT;
    return cp;
}

static double max_diff(const float *a, const float *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN counts as the largest */
    }
    return m;
}

/* The fixture's prompt and generation through a retrieval context: every row within the tolerance. */
static void test_reference(mnemo_model *m, const mnemo_token *ids, int n_prompt, int n_gen, const logit_block *ref,
                           double tol) {
    mnemo_context_params cp = retrieval_params();
    cp.logits_all = true;
    mnemo_context *ctx;
    mnemo_status st = mnemo_context_new(m, &cp, &ctx);
    CHECK(st == MNEMO_OK, "retrieval context: %s", mnemo_context_error(ctx));
    if (st != MNEMO_OK) return mnemo_context_free(ctx);
    const int V = ref->n_vocab;
    CHECK(mnemo_decode(ctx, ids, n_prompt) == MNEMO_OK, "prompt: %s", mnemo_context_error(ctx));
    double worst = 0;
    int worst_at = -1;
    for (int i = 0; i < n_prompt; i++) {
        const float *lg = mnemo_get_logits(ctx, i);
        double d = lg ? max_diff(lg, ref->data + (size_t)i * V, V) : INFINITY;
        if (!(d <= worst)) worst = d, worst_at = i;
    }
    for (int i = 0; i < n_gen; i++) {
        CHECK(mnemo_decode(ctx, ids + n_prompt + i, 1) == MNEMO_OK, "token %d: %s", i, mnemo_context_error(ctx));
        const float *lg = mnemo_get_logits(ctx, -1);
        double d = lg ? max_diff(lg, ref->data + (size_t)(n_prompt + i) * V, V) : INFINITY;
        if (!(d <= worst)) worst = d, worst_at = n_prompt + i;
    }
    printf("retrieval vs float64 reference: max |logit diff| %.3g at position %d (tolerance %.3g)\n", worst, worst_at,
           tol);
    CHECK(worst <= tol, "logits differ from the reference by %.3g at position %d (tolerance %.3g)", worst, worst_at,
          tol);
    mnemo_memory_stats ms;
    CHECK(mnemo_context_memory(ctx, &ms) == MNEMO_OK, "stats");
    long mem_tokens = json_int("mem_tokens");
    CHECK((long)ms.mem_tokens == mem_tokens, "memory holds %llu tokens, the reference %ld",
          (unsigned long long)ms.mem_tokens, mem_tokens);
    CHECK(ms.local_tokens + (int64_t)ms.mem_tokens == n_prompt + n_gen, "local %d + memory %llu != %d tokens",
          ms.local_tokens, (unsigned long long)ms.mem_tokens, n_prompt + n_gen);
    /* f32: keys and values of every token in memory, per layer and KV head (2 layers x 2 x 12) */
    CHECK(ms.mem_key_bytes >= ms.mem_tokens * 2 * 24 * 4 && ms.mem_value_bytes >= ms.mem_tokens * 2 * 24 * 4,
          "memory bytes %llu + %llu too small for %llu f32 tokens", (unsigned long long)ms.mem_key_bytes,
          (unsigned long long)ms.mem_value_bytes, (unsigned long long)ms.mem_tokens);
    mnemo_context_free(ctx);
}

/* A prompt that fits sinks + window: no block ever moves, so the logits are the plain model's, bit for bit. */
static void test_reduces_to_plain(mnemo_model *m, const mnemo_token *ids) {
    mnemo_context_params rp = retrieval_params(), pp = mnemo_context_default_params();
    rp.logits_all = pp.logits_all = true;
    pp.n_batch = rp.n_batch;
    const int n = rp.ret_sinks + rp.ret_window;
    mnemo_context *rc, *pc;
    CHECK(mnemo_context_new(m, &rp, &rc) == MNEMO_OK && mnemo_context_new(m, &pp, &pc) == MNEMO_OK, "contexts");
    CHECK(mnemo_decode(rc, ids, n) == MNEMO_OK && mnemo_decode(pc, ids, n) == MNEMO_OK, "decode");
    int differ = 0;
    for (int i = 0; i < n; i++) {
        const float *a = mnemo_get_logits(rc, i), *b = mnemo_get_logits(pc, i);
        differ += !a || !b || memcmp(a, b, (size_t)mnemo_model_n_vocab(m) * sizeof(float)) != 0;
    }
    CHECK(differ == 0, "%d of %d positions differ from the plain model within sinks + window", differ, n);
    mnemo_memory_stats ms;
    mnemo_context_memory(rc, &ms);
    CHECK(ms.mem_tokens == 0 && ms.local_tokens == n, "nothing in memory yet (%llu)",
          (unsigned long long)ms.mem_tokens);
    /* one more token pushes a block out: from there on it is no longer the plain attention (n_ctx is full anyway) */
    CHECK(mnemo_decode(rc, ids + n, 1) == MNEMO_OK, "past the window: %s", mnemo_context_error(rc));
    mnemo_context_memory(rc, &ms);
    CHECK(ms.mem_tokens == (uint64_t)rp.ret_block, "one block in memory (%llu tokens)",
          (unsigned long long)ms.mem_tokens);
    mnemo_context_free(rc);
    mnemo_context_free(pc);
}

static void test_snapshots(mnemo_model *m, const mnemo_token *ids, int n_prompt, int n_gen) {
    char path[] = "/tmp/mnemo_retrieval_snapXXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    mnemo_context_params cp = retrieval_params();
    mnemo_context *a, *b;
    CHECK(mnemo_context_new(m, &cp, &a) == MNEMO_OK && mnemo_context_new(m, &cp, &b) == MNEMO_OK, "contexts");
    CHECK(mnemo_decode(a, ids, n_prompt) == MNEMO_OK, "prompt");
    CHECK(mnemo_context_save(a, path) == MNEMO_OK, "save: %s", mnemo_context_error(a));
    CHECK(mnemo_context_load(b, path) == MNEMO_OK, "load: %s", mnemo_context_error(b));
    CHECK(mnemo_context_n_past(b) == n_prompt, "n_past %d after load", mnemo_context_n_past(b));
    int differ = 0;
    for (int i = 0; i < n_gen; i++) {
        mnemo_decode(a, ids + n_prompt + i, 1);
        mnemo_decode(b, ids + n_prompt + i, 1);
        const float *x = mnemo_get_logits(a, -1), *y = mnemo_get_logits(b, -1);
        differ += !x || !y || memcmp(x, y, (size_t)mnemo_model_n_vocab(m) * sizeof(float)) != 0;
    }
    CHECK(differ == 0, "%d generated tokens differ after a snapshot round trip", differ);

    /* under another memory mode: refused, naming both */
    mnemo_context *plain;
    mnemo_context_params pp = mnemo_context_default_params();
    CHECK(mnemo_context_new(m, &pp, &plain) == MNEMO_OK, "plain context");
    CHECK(mnemo_context_load(plain, path) == MNEMO_ERR_INVALID_ARG, "a retrieval snapshot loaded into a plain context");
    const char *e = mnemo_context_error(plain);
    CHECK(strstr(e, "retrieval memory") && strstr(e, "plain LLaMA"), "message names both modes: %s", e);
    CHECK(mnemo_decode(plain, ids, 4) == MNEMO_OK && mnemo_context_save(plain, path) == MNEMO_OK, "plain snapshot");
    mnemo_context_reset(b);
    CHECK(mnemo_context_load(b, path) == MNEMO_ERR_INVALID_ARG, "a plain snapshot loaded into a retrieval context");
    e = mnemo_context_error(b);
    CHECK(strstr(e, "retrieval memory") && strstr(e, "plain LLaMA"), "message names both modes: %s", e);
    CHECK(mnemo_context_n_past(b) == 0, "a refused load leaves the context as it was");

    /* other retrieval settings: refused, naming both */
    CHECK(mnemo_context_save(a, path) == MNEMO_OK, "save");
    mnemo_context_params wp = retrieval_params();
    wp.ret_window += wp.ret_block;
    mnemo_context *w;
    CHECK(mnemo_context_new(m, &wp, &w) == MNEMO_OK, "wider context");
    CHECK(mnemo_context_load(w, path) == MNEMO_ERR_INVALID_ARG, "a snapshot with another window loaded");
    e = mnemo_context_error(w);
    char want[64];
    snprintf(want, sizeof want, "window %d", wp.ret_window);
    CHECK(strstr(e, "window") && strstr(e, want), "message names both windows: %s", e);
    mnemo_context_free(w);
    mnemo_context_free(plain);
    mnemo_context_free(a);
    mnemo_context_free(b);
    unlink(path);
}

/* Each bad option: refused with INVALID_ARG and a message holding `says`. */
static void refused(mnemo_model *m, mnemo_context_params cp, const char *what, const char *says) {
    mnemo_context *ctx;
    mnemo_status st = mnemo_context_new(m, &cp, &ctx);
    const char *e = mnemo_context_error(ctx);
    CHECK(st == MNEMO_ERR_INVALID_ARG && strstr(e, says), "%s: status %d, message '%s' (want '%s')", what, st, e,
          says);
    mnemo_context_free(ctx);
}

static void test_bad_options(mnemo_model *m) {
    mnemo_context_params cp = retrieval_params();
    cp.ret_window = 128; /* + 4 sinks > max_position_embeddings 128 */
    refused(m, cp, "window past the model's positions", "past the 128 this model was trained on");
    cp = retrieval_params(), cp.ret_topk = 0;
    refused(m, cp, "top-k 0", "top-k 0");
    cp = retrieval_params(), cp.ret_sinks = cp.ret_window + 1;
    refused(m, cp, "sinks > window", "sink tokens");
    cp = retrieval_params(), cp.ret_block = 0;
    refused(m, cp, "block size 0", "block size 0");
    cp = retrieval_params(), cp.ret_reps = cp.ret_block + 1;
    refused(m, cp, "more representatives than tokens in a block", "representatives per block");
    cp = retrieval_params(), cp.ret_window = 2 * cp.ret_block - 1;
    refused(m, cp, "window under two blocks", "shorter than two blocks");
    cp = retrieval_params(), cp.ret_dtype = (mnemo_mem_dtype)7;
    refused(m, cp, "unknown dtype", "dtype");

    /* a step longer than the window allows goes through mnemo_decode, not one batch entry */
    cp = retrieval_params();
    cp.n_batch = 64;
    mnemo_context *ctx;
    CHECK(mnemo_context_new(m, &cp, &ctx) == MNEMO_OK, "context");
    mnemo_token ids[32] = {1};
    for (int i = 1; i < 32; i++) ids[i] = 3 + i;
    mnemo_batch_entry e = {.ctx = ctx, .tokens = ids, .n = 32};
    CHECK(mnemo_decode_batch(&e, 1) == MNEMO_ERR_INVALID_ARG &&
              strstr(mnemo_context_error(ctx), "longer than one step"),
          "a 32-token batch entry over a 24-token window: %s", mnemo_context_error(ctx));
    CHECK(mnemo_decode(ctx, ids, 32) == MNEMO_OK, "the same through mnemo_decode: %s", mnemo_context_error(ctx));
    mnemo_context_free(ctx);
}

/* bf16 memory: half the bytes of f32 for the same tokens, logits close to f32's. */
static void test_bf16(mnemo_model *m, const mnemo_token *ids, int n) {
    mnemo_context_params fp = retrieval_params(), bp = retrieval_params();
    bp.ret_dtype = MNEMO_MEM_BF16;
    mnemo_context *f, *b;
    CHECK(mnemo_context_new(m, &fp, &f) == MNEMO_OK && mnemo_context_new(m, &bp, &b) == MNEMO_OK, "contexts");
    CHECK(mnemo_decode(f, ids, n) == MNEMO_OK && mnemo_decode(b, ids, n) == MNEMO_OK, "decode");
    mnemo_memory_stats sf, sb;
    mnemo_context_memory(f, &sf);
    mnemo_context_memory(b, &sb);
    printf("memory after %d tokens: f32 %llu + %llu bytes, bf16 %llu + %llu bytes (%llu tokens)\n", n,
           (unsigned long long)sf.mem_key_bytes, (unsigned long long)sf.mem_value_bytes,
           (unsigned long long)sb.mem_key_bytes, (unsigned long long)sb.mem_value_bytes,
           (unsigned long long)sf.mem_tokens);
    CHECK(sb.mem_tokens == sf.mem_tokens && sb.mem_value_bytes < sf.mem_value_bytes, "bf16 holds fewer bytes");
    double d = max_diff(mnemo_get_logits(f, -1), mnemo_get_logits(b, -1), mnemo_model_n_vocab(m));
    CHECK(d < 0.5, "bf16 memory moves the last logits by %.3g (bf16 keeps 3 significant digits)", d);
    mnemo_context_free(f);
    mnemo_context_free(b);
}

int main(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/retrieval/reference.json", test_fixtures());
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(ref_json, 1, sizeof ref_json - 1, f) : 0;
    if (f) fclose(f);
    CHECK(got > 0, "cannot read %s", path);
    if (!got) return test_summary();
    mnemo_token ids[512];
    const int n_ids = json_ids(ids, 512), n_prompt = (int)json_int("n_prompt"), n_gen = (int)json_int("n_gen");
    const double tol = json_double("tolerance");
    CHECK(n_ids == n_prompt + n_gen && n_ids > 0 && tol > 0, "reference.json: %d ids, tolerance %g", n_ids, tol);
    logit_block ref[1];
    snprintf(path, sizeof path, "%s/retrieval/logits.bin", test_fixtures());
    CHECK(read_logits(path, ref, 1) == 1 && ref->n_tokens == n_ids, "cannot read %s", path);
    snprintf(path, sizeof path, "%s/models/gqa", test_fixtures());
    mnemo_model *m;
    mnemo_model_params mp = mnemo_model_default_params();
    mp.n_threads = 1;
    CHECK(mnemo_model_load(path, &mp, &m) == MNEMO_OK, "load %s: %s", path, mnemo_model_error(m));
    if (test_failed) return test_summary();
    test_reference(m, ids, n_prompt, n_gen, ref, tol);
    test_reduces_to_plain(m, ids);
    test_snapshots(m, ids, n_prompt, n_gen);
    test_bad_options(m);
    test_bf16(m, ids, n_ids);
    free(ref->data);
    mnemo_model_free(m);
    return test_summary();
}
