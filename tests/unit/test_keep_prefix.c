/*
 * test_keep_prefix.c — mnemo_context_keep_prefix (prefix reuse): a context cut back to a prefix and continued gives
 * exactly the logits of a fresh context fed the same tokens in the same steps.
 *
 * Plain LLaMA (tests/fixtures/models/gqa): any cut. LongLLaMA (tests/fixtures/longllama/basic, window 64, dense
 * memory so that no approximate index stands between the two runs): a cut inside the local window keeps it; a cut
 * before the memory's end goes back to the last window moved at or before it (kept <= asked, on a flush boundary),
 * and a cut before the first window forgets everything. Out-of-range requests are refused and change nothing.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "test_util.h"

#define N_TOK 400
#define STEP 10

static mnemo_token toks[N_TOK];

/* Feeds tokens [from, to) in steps of STEP (a step never crosses a multiple of STEP, so two runs that agree on
 * where they start agree on every step). Returns the last step's logits copied into out. */
static int feed(mnemo_context *c, int from, int to, float *out, int n_vocab) {
    for (int i = from; i < to;) {
        int n = STEP - i % STEP;
        if (i + n > to) n = to - i;
        mnemo_batch_entry e = {.ctx = c, .tokens = toks + i, .n = n};
        if (mnemo_decode_batch(&e, 1) != MNEMO_OK) return -1;
        i += n;
    }
    memcpy(out, mnemo_get_logits(c, -1), (size_t)n_vocab * sizeof *out);
    return 0;
}

static float max_diff(const float *a, const float *b, int n) {
    float d = 0;
    for (int i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
    return d;
}

/* Cuts a context that saw `seen` tokens back to `keep`, continues both it and a fresh one to `end`. */
static void check_cut(mnemo_model *m, const mnemo_context_params *cp, int seen, int keep, int end,
                      int expect_kept_at_most, bool expect_exact) {
    int nv = mnemo_model_n_vocab(m);
    float *a = malloc((size_t)nv * sizeof *a), *b = malloc((size_t)nv * sizeof *b);
    mnemo_context *c = NULL, *fresh = NULL;
    CHECK(mnemo_context_new(m, cp, &c) == MNEMO_OK, "context");
    CHECK(mnemo_context_new(m, cp, &fresh) == MNEMO_OK, "context");
    CHECK(feed(c, 0, seen, a, nv) == 0, "feed %d", seen);
    int32_t kept = -1;
    CHECK(mnemo_context_keep_prefix(c, toks, keep, &kept) == MNEMO_OK, "keep %d", keep);
    CHECK(kept >= 0 && kept <= keep && kept <= expect_kept_at_most, "kept %d of %d (at most %d)", kept, keep,
          expect_kept_at_most);
    if (expect_exact) CHECK(kept == keep, "kept %d, asked %d", kept, keep);
    CHECK(mnemo_context_n_past(c) == kept, "n_past %d after keeping %d", mnemo_context_n_past(c), kept);
    CHECK(feed(c, kept, end, a, nv) == 0, "continue from %d", kept);
    CHECK(feed(fresh, 0, end, b, nv) == 0, "fresh run");
    float d = max_diff(a, b, nv);
    CHECK(d == 0.0f, "seen %d, keep %d (kept %d), end %d: logits differ by %g", seen, keep, kept, end, d);
    mnemo_context_free(c);
    mnemo_context_free(fresh);
    free(a);
    free(b);
}

static mnemo_model *load(const char *rel) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", test_fixtures(), rel);
    mnemo_model_params mp = mnemo_model_default_params();
    mp.n_threads = 1;
    mnemo_model *m = NULL;
    if (mnemo_model_load(dir, &mp, &m) != MNEMO_OK) {
        CHECK(0, "load %s: %s", dir, mnemo_model_error(m));
        mnemo_model_free(m);
        return NULL;
    }
    return m;
}

static void test_plain(void) {
    mnemo_model *m = load("models/gqa");
    if (!m) return;
    mnemo_context_params cp = mnemo_context_default_params();
    cp.n_ctx = 128;
    check_cut(m, &cp, 100, 60, 120, 60, true);
    check_cut(m, &cp, 100, 100, 110, 100, true);
    check_cut(m, &cp, 50, 0, 70, 0, true);
    mnemo_context *c = NULL;
    mnemo_context_new(m, &cp, &c);
    int32_t kept = -1;
    CHECK(mnemo_context_keep_prefix(c, toks, 5, &kept) == MNEMO_ERR_INVALID_ARG && kept == 0, "past n_past");
    CHECK(mnemo_context_keep_prefix(c, toks, -1, &kept) == MNEMO_ERR_INVALID_ARG, "negative");
    mnemo_context_free(c);
    mnemo_model_free(m);
}

static void test_longllama(void) {
    mnemo_model *m = load("longllama/basic");
    if (!m) return;
    mnemo_context_params cp = mnemo_context_default_params();
    cp.mem_knn_k = 0; /* dense: exact, no index between the runs */
    /* Steps of 10 in a window of 64: flushes after 60, 120, 180, 240, 300, 360 tokens. */
    check_cut(m, &cp, 395, 380, 400, 380, true);  /* inside the local window (memory holds 360) */
    check_cut(m, &cp, 395, 250, 400, 240, false); /* back to the flush at 240 */
    check_cut(m, &cp, 395, 240, 400, 240, true);  /* on a flush */
    check_cut(m, &cp, 395, 59, 400, 0, false);    /* before the first flush: everything forgotten */
    mnemo_model_free(m);
}

int main(void) {
    for (int i = 0; i < N_TOK; i++) toks[i] = 3 + (int)((i * 2654435761u) % 500u);
    test_plain();
    test_longllama();
    return test_summary();
}
