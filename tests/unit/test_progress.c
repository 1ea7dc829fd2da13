/*
 * test_progress.c — mnemo_context_set_progress: a long input reports after every forward step (plain LLaMA:
 * chunks of n_batch; LongLLaMA: memory windows, then the tail), counts rise to the total, reporting changes no
 * logit, and a callback that returns false cancels: a plain context is left as before the call, a LongLLaMA
 * context is reset.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "test_util.h"

#define MAX_REPORTS 64

typedef struct {
    int64_t done[MAX_REPORTS], total[MAX_REPORTS];
    int n;
    int64_t stop_at; /* return false once done >= stop_at (0 = never) */
} reports;

static bool record(int64_t done, int64_t total, void *user) {
    reports *r = user;
    if (r->n < MAX_REPORTS) {
        r->done[r->n] = done;
        r->total[r->n] = total;
    }
    r->n++;
    return !(r->stop_at && done >= r->stop_at);
}

static mnemo_model *load(const char *sub) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", test_fixtures(), sub);
    mnemo_model *m = NULL;
    mnemo_status st = mnemo_model_load(dir, NULL, &m);
    CHECK(st == MNEMO_OK, "load %s: %s", dir, mnemo_model_error(m));
    if (st != MNEMO_OK) {
        mnemo_model_free(m);
        return NULL;
    }
    return m;
}

static mnemo_context *context(mnemo_model *m, int32_t n_batch) {
    mnemo_context_params cp = mnemo_context_default_params();
    cp.n_batch = n_batch;
    mnemo_context *ctx = NULL;
    CHECK(mnemo_context_new(m, &cp, &ctx) == MNEMO_OK, "context: %s", mnemo_context_error(ctx));
    return ctx;
}

static void check_reports(const reports *r, const int64_t *want, int n_want, int64_t total, const char *what) {
    CHECK(r->n == n_want, "%s: %d reports, expected %d", what, r->n, n_want);
    for (int i = 0; i < r->n && i < n_want; i++)
        CHECK(r->done[i] == want[i] && r->total[i] == total, "%s: report %d is %lld/%lld, expected %lld/%lld", what, i,
              (long long)r->done[i], (long long)r->total[i], (long long)want[i], (long long)total);
}

static void plain_llama(void) {
    mnemo_model *m = load("models/mha");
    if (!m) return;
    int32_t V = mnemo_model_n_vocab(m);
    mnemo_token ids[19];
    for (int i = 0; i < 19; i++) ids[i] = 3 + (i * 37) % (V - 3);

    mnemo_context *ref = context(m, 4), *ctx = context(m, 4);
    CHECK(mnemo_decode(ref, ids, 19) == MNEMO_OK, "reference decode");
    reports r = {0};
    mnemo_context_set_progress(ctx, record, &r);
    CHECK(mnemo_decode(ctx, ids, 19) == MNEMO_OK, "decode with progress: %s", mnemo_context_error(ctx));
    const int64_t want[] = {4, 8, 12, 16, 19};
    check_reports(&r, want, 5, 19, "19 tokens in chunks of 4");
    CHECK(!memcmp(mnemo_get_logits(ref, -1), mnemo_get_logits(ctx, -1), (size_t)V * sizeof(float)),
          "reporting changes no logit");

    r.n = 0;
    mnemo_token one = 5;
    CHECK(mnemo_decode(ctx, &one, 1) == MNEMO_OK && r.n == 0, "a one-step call reports nothing (%d reports)", r.n);

    /* cancel after the second chunk: the context is as before the call */
    mnemo_context_reset(ctx);
    CHECK(mnemo_decode(ctx, ids, 3) == MNEMO_OK, "a short first call");
    r = (reports){.stop_at = 8};
    mnemo_status st = mnemo_decode(ctx, ids + 3, 16);
    CHECK(st == MNEMO_ERR_CANCELLED && strstr(mnemo_context_error(ctx), "cancelled"), "cancel: %d %s", st,
          mnemo_context_error(ctx));
    CHECK(r.n == 2 && mnemo_context_n_past(ctx) == 3, "cancelled after %d reports, n_past %d (want 2, 3)", r.n,
          mnemo_context_n_past(ctx));
    mnemo_context_set_progress(ctx, NULL, NULL);
    CHECK(mnemo_decode(ctx, ids + 3, 16) == MNEMO_OK, "the same call again, reporting off");
    CHECK(!memcmp(mnemo_get_logits(ref, -1), mnemo_get_logits(ctx, -1), (size_t)V * sizeof(float)),
          "after a cancelled call the context continues as if it never happened");
    mnemo_context_free(ref);
    mnemo_context_free(ctx);
    mnemo_model_free(m);
}

static void longllama(void) {
    mnemo_model *m = load("longllama/basic");
    if (!m) return;
    int32_t W = mnemo_model_n_ctx_train(m), V = mnemo_model_n_vocab(m);
    mnemo_context *ctx = context(m, 0);
    CHECK(mnemo_context_set_last_context_length(ctx, W / 2) == MNEMO_OK, "lcl");
    int32_t n = 4 * W + 12; /* prefix 3.5 windows + 12 to memory in windows of W, the last W/2 local */
    mnemo_token *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = 3 + (i * 7919) % (V - 3);
    reports r = {0};
    mnemo_context_set_progress(ctx, record, &r);
    CHECK(mnemo_decode(ctx, ids, n) == MNEMO_OK, "long decode: %s", mnemo_context_error(ctx));
    int32_t prefix = n - W / 2;
    int64_t want[16];
    int nw = 0;
    for (int32_t b = 0; b < prefix; b += W) want[nw++] = b + W < prefix ? b + W : prefix;
    want[nw++] = n;
    check_reports(&r, want, nw, n, "LongLLaMA windows");

    r = (reports){.stop_at = 2 * W};
    mnemo_status st = mnemo_decode(ctx, ids, n);
    mnemo_memory_stats ms;
    CHECK(st == MNEMO_ERR_CANCELLED && mnemo_context_n_past(ctx) == 0 && mnemo_context_memory(ctx, &ms) == MNEMO_OK &&
              ms.mem_tokens == 0 && ms.local_tokens == 0,
          "a cancelled LongLLaMA call resets the session (%d, n_past %d)", st, mnemo_context_n_past(ctx));
    free(ids);
    mnemo_context_free(ctx);
    mnemo_model_free(m);
}

int main(void) {
    plain_llama();
    longllama();
    return test_summary();
}
