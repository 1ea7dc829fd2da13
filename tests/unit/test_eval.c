/*
 * test_eval.c — the evals' data and arithmetic (clients/eval) on cases whose answers are known:
 *   - a perfect copier (predicts what followed the longest earlier match of the current suffix) copies with
 *     accuracy 1.0 at every length, so both memory lengths reach the last tested length; a copier that sees only
 *     its last M tokens forgets exactly where the copy distance passes M;
 *   - the same copier answers every dictionary query, the window-limited one fails once definitions leave it;
 *   - the generators (disjoint spans, distinct keys, queries on defined keys) and the perplexity windows (every
 *     token scored once);
 *   - the engine scorer on a real tiny model: chunking does not change a prediction, and a sequence longer than a
 *     model without memory sees is cut to BOS + its tail.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "eval_scorer.h"
#include "eval_tasks.h"
#include "test_util.h"

/* ---------------------------------------------------------------- oracle scorers */

typedef struct {
    eval_scorer base;
    int32_t sight; /* tokens it sees back from the current one (0: all) */
} copier;

/* The token that followed the latest earlier position whose suffix matches the longest suffix ending at t (within
 * sight); -1 when nothing matches. */
static int32_t copier_predict(const copier *c, const int32_t *x, int64_t t) {
    int64_t lo = c->sight ? t - c->sight + 1 : 0;
    if (lo < 0) lo = 0;
    int64_t best_len = 0, best = -1;
    for (int64_t j = t - 1; j >= lo; j--) {
        int64_t k = 0;
        while (j - k >= lo && x[j - k] == x[t - k] && k < 64) k++;
        if (k > best_len) best_len = k, best = j;
    }
    return best >= 0 && best + 1 <= t ? x[best + 1] : -1;
}

static bool copier_score(eval_scorer *s, const int32_t *x, int64_t n, int64_t from, int64_t to, uint8_t *correct,
                         double *logprob, char *err, size_t errlen) {
    (void)n, (void)err, (void)errlen;
    const copier *c = (const copier *)s;
    for (int64_t t = from; t < to; t++) {
        correct[t - from] = copier_predict(c, x, t) == x[t + 1];
        if (logprob) logprob[t - from] = correct[t - from] ? 0.0 : -10.0;
    }
    return true;
}

/* ---------------------------------------------------------------- forgetting curve */

static void fc_curve(eval_scorer *sc, const int32_t *text, int64_t n_text, const int32_t *lengths, int n,
                     double *copy, double *lm) {
    eval_rng r;
    eval_rng_seed(&r, 7);
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)lengths[n - 1]);
    uint8_t *ok = malloc((size_t)lengths[n - 1]);
    char err[64];
    for (int i = 0; i < n; i++) {
        copy[i] = lm[i] = 0;
        for (int k = 0; k < 3; k++) {
            int64_t s, irr;
            CHECK(eval_fc_pick(&r, n_text, eval_fc_span(lengths[i]), &s, &irr), "pick at %d", lengths[i]);
            for (int pass = 0; pass < 2; pass++) {
                int32_t from = eval_fc_input(text, pass ? irr : s, s, lengths[i], 1, buf);
                int32_t to = 2 + 2 * eval_fc_span(lengths[i]) - 1, hits = 0;
                sc->score(sc, buf, lengths[i], from, to, ok, NULL, err, sizeof err);
                for (int32_t t = 0; t < to - from; t++) hits += ok[t];
                (pass ? lm : copy)[i] += (double)hits / (to - from) / 3;
            }
        }
    }
    free(buf);
    free(ok);
}

static void test_forgetting_curve(void) {
    enum { N_TEXT = 20000 };
    int32_t *text = malloc(sizeof(int32_t) * N_TEXT);
    eval_rng r;
    eval_rng_seed(&r, 3);
    for (int i = 0; i < N_TEXT; i++) text[i] = 3 + (int32_t)eval_rng_below(&r, 5000); /* long repeats are rare */
    int32_t lengths[] = {64, 128, 256, 512, 1024};
    double copy[5], lm[5];

    copier perfect = {.base = {.score = copier_score}};
    fc_curve(&perfect.base, text, N_TEXT, lengths, 5, copy, lm);
    for (int i = 0; i < 5; i++) {
        CHECK(copy[i] == 1.0, "a perfect copier copies everything at %d (got %f)", lengths[i], copy[i]);
        CHECK(lm[i] < 0.05, "nothing to copy in the LM input at %d (got %f)", lengths[i], lm[i]);
    }
    eval_fc_lengths ml = eval_fc_memory_lengths(lengths, copy, lm, 5);
    CHECK(ml.fine == 1024 && ml.fine_beyond && ml.coarse == 1024 && ml.coarse_beyond, "perfect: fine %d%s coarse %d",
          ml.fine, ml.fine_beyond ? "+" : "", ml.coarse);

    /* sees 300 tokens: copying needs span + 1 back: 63 (L 128), 127, 255 fit; 511 (L 1024) does not */
    copier limited = {.base = {.score = copier_score}, .sight = 300};
    fc_curve(&limited.base, text, N_TEXT, lengths, 5, copy, lm);
    ml = eval_fc_memory_lengths(lengths, copy, lm, 5);
    CHECK(copy[3] == 1.0 && copy[4] < 0.05, "limited copier: 512 -> %f, 1024 -> %f", copy[3], copy[4]);
    CHECK(ml.fine == 512 && !ml.fine_beyond && ml.coarse == 512, "limited: fine %d coarse %d", ml.fine, ml.coarse);

    /* the rules alone */
    int32_t L[] = {1, 2, 3, 4};
    double c2[] = {1.0, 0.995, 0.5, 0.30}, l2[] = {0.2, 0.2, 0.3, 0.295};
    ml = eval_fc_memory_lengths(L, c2, l2, 4);
    CHECK(ml.fine == 2 && ml.coarse == 3 && !ml.coarse_beyond, "rules: fine %d coarse %d", ml.fine, ml.coarse);

    /* layout: [bos] S [bos] S with the first scored prediction made at the second S's middle, less one */
    int32_t buf[21];
    int32_t from = eval_fc_input(text, 100, 100, 21, 1, buf); /* span 9 */
    CHECK(buf[0] == 1 && buf[10] == 1 && buf[1] == text[100] && buf[11] == text[100] && buf[19] == text[108],
          "copy input layout");
    CHECK(from == 2 + 9 + 4 - 1, "first scored prediction at %d", from);

    /* disjoint spans, inside the text */
    bool ok = true;
    for (int k = 0; k < 2000 && ok; k++) {
        int64_t s, irr;
        eval_rng_seed(&r, (uint64_t)k);
        eval_fc_pick(&r, 100, 30, &s, &irr);
        ok = s >= 0 && irr >= 0 && s + 30 <= 100 && irr + 30 <= 100 && (s + 30 <= irr || irr + 30 <= s);
    }
    CHECK(ok, "spans disjoint and inside the text");
    CHECK(!eval_fc_pick(&r, 59, 30, &(int64_t){0}, &(int64_t){0}), "a text shorter than two spans is refused");
    free(text);
}

/* ---------------------------------------------------------------- dictionary lookup */

static void test_dict(void) {
    enum { N = 4096 };
    int32_t *doc = malloc(sizeof(int32_t) * N);
    uint8_t *score = malloc(N), *ok = malloc(N);
    eval_rng r;
    eval_rng_seed(&r, 11);
    int64_t scored = eval_dict_document(&r, N, 256, doc, score);
    CHECK(scored == 100, "25 queries x 4 values scored (got %lld)", (long long)scored);
    bool ids_ok = doc[0] == 1;
    for (int t = 1; t < N; t++) ids_ok &= doc[t] >= EVAL_DICT_K && doc[t] < EVAL_DICT_VOCAB;
    CHECK(ids_ok, "ids in the task's vocabulary, BOS first");
    /* definitions: distinct keys; queries: a defined key and its value */
    int64_t first_def = 1;
    while (doc[first_def] != EVAL_DICT_K) first_def++;
    int64_t q0 = N - 250;
    CHECK(doc[q0] == EVAL_DICT_Q && doc[q0 - 10] == EVAL_DICT_K, "queries fill the last 250 tokens");
    bool distinct = true, answered = true;
    for (int64_t a = first_def; a < q0 && distinct; a += 10)
        for (int64_t b = a + 10; b < q0; b += 10)
            if (!memcmp(doc + a + 1, doc + b + 1, 16)) { distinct = false; break; }
    for (int64_t q = q0; q < N; q += 10) {
        bool found = false;
        for (int64_t a = first_def; a < q0 && !found; a += 10)
            found = !memcmp(doc + a + 1, doc + q + 1, 16) && !memcmp(doc + a + 6, doc + q + 6, 16);
        answered &= found && score[q + 6] && score[q + 9] && !score[q + 5];
    }
    CHECK(distinct, "keys distinct");
    CHECK(answered, "every query asks a defined key for its value, values scored");

    /* the perfect copier answers every query; one that sees 200 tokens almost none */
    char err[64];
    copier perfect = {.base = {.score = copier_score}}, limited = {.base = {.score = copier_score}, .sight = 200};
    int64_t from = 0;
    while (!score[from + 1]) from++;
    for (int pass = 0; pass < 2; pass++) {
        eval_scorer *sc = pass ? &limited.base : &perfect.base;
        sc->score(sc, doc, N, from, N - 1, ok, NULL, err, sizeof err);
        int64_t hits = 0;
        for (int64_t t = from; t < N - 1; t++)
            if (score[t + 1]) hits += ok[t - from];
        if (pass == 0) CHECK(hits == scored, "perfect copier: %lld of %lld values", (long long)hits, (long long)scored);
        else CHECK(hits < scored / 4, "window-limited copier: %lld of %lld values", (long long)hits, (long long)scored);
    }
    /* training's near misses: keys still distinct, queries still answered, and partial matches now common */
    eval_rng_seed(&r, 12);
    eval_dict_document(&r, N, 256, doc, score);
    eval_dict_confuse(&r, doc, N, 100);
    distinct = true, answered = true;
    int64_t near_keys = 0, near_values = 0;
    for (int64_t a = first_def; a < q0; a += 10)
        for (int64_t b = a + 10; b < q0; b += 10) {
            int same = 0;
            for (int j = 1; j <= 4; j++) same += doc[a + j] == doc[b + j];
            distinct &= same < 4;
            near_keys += same >= 2;
            near_values += doc[a + 6] == doc[b + 6] && doc[a + 7] == doc[b + 7];
        }
    for (int64_t q = q0; q < N; q += 10) {
        bool found = false;
        for (int64_t a = first_def; a < q0 && !found; a += 10)
            found = !memcmp(doc + a + 1, doc + q + 1, 16) && !memcmp(doc + a + 6, doc + q + 6, 16);
        answered &= found && doc[q] == EVAL_DICT_Q && doc[q + 5] == EVAL_DICT_V;
    }
    CHECK(distinct && answered, "confused: keys distinct, every query answered by its definition");
    CHECK(near_keys > 300 && near_values > 300, "confused: %lld keys and %lld value pairs shared of 383 definitions",
          (long long)near_keys, (long long)near_values);
    eval_rng_seed(&r, 11);
    CHECK(eval_dict_document(&r, 100, 256, doc, score) == -1, "too short for a definition and the queries");
    free(doc);
    free(score);
    free(ok);
}

/* ---------------------------------------------------------------- perplexity windows */

static void test_windows(void) {
    int64_t ns[] = {2, 50, 128, 129, 1000, 1001};
    int32_t ws[] = {16, 128, 64}, ss[] = {8, 64, 63};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < 3; b++) {
            int64_t n = ns[a], next = 1; /* the next token to be scored */
            bool ok = true;
            eval_window w;
            for (int64_t i = 0; eval_ppl_window(n, ws[b], ss[b], i, &w); i++) {
                ok &= w.end - w.scored == next && w.end <= n && w.end - w.start + (w.start > 0) <= ws[b];
                ok &= w.start == 0 || w.start >= 1;
                next = w.end;
            }
            CHECK(ok && next == n, "n %lld window %d stride %d: every token once (reached %lld)", (long long)n, ws[b],
                  ss[b], (long long)next);
        }
    eval_window w;
    CHECK(!eval_ppl_window(100, 16, 16, 0, &w), "a stride of the whole window is refused");
}

/* ---------------------------------------------------------------- the engine scorer */

static void test_engine_scorer(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/mha", test_fixtures());
    mnemo_model *m = NULL;
    if (mnemo_model_load(dir, NULL, &m) != MNEMO_OK) {
        CHECK(0, "load %s: %s", dir, mnemo_model_error(m));
        return;
    }
    mnemo_context_params cp = mnemo_context_default_params();
    cp.logits_all = true;
    cp.n_ctx = 64;
    mnemo_context *ctx = NULL;
    CHECK(mnemo_context_new(m, &cp, &ctx) == MNEMO_OK, "context");
    int32_t x[100];
    eval_rng r;
    eval_rng_seed(&r, 5);
    x[0] = 1;
    for (int i = 1; i < 100; i++) x[i] = 3 + (int32_t)eval_rng_below(&r, 500);
    uint8_t ok1[100], ok2[100], ok3[100];
    double lp1[100], lp2[100], lp3[100];
    char err[256];
    eval_engine_scorer s;
    int32_t chunks[] = {60, 7};
    for (int k = 0; k < 2; k++) {
        eval_engine_scorer_init(&s, m, ctx, chunks[k]);
        CHECK(s.base.score(&s.base, x, 60, 0, 59, k ? ok2 : ok1, k ? lp2 : lp1, err, sizeof err), "%s", err);
    }
    bool same = true;
    for (int t = 0; t < 59; t++) same &= ok1[t] == ok2[t] && fabs(lp1[t] - lp2[t]) < 1e-4;
    CHECK(same, "chunks of 7 tokens predict as one call of 60");
    double sum = 0;
    for (int t = 0; t < 59; t++) sum += lp1[t];
    CHECK(sum < 0 && sum > 59 * -20.0 && !s.truncated, "log-probabilities are log-probabilities (%f)", sum);

    /* 100 tokens on a 64-token context: BOS + the last 63; the cut sequence scored directly gives the same */
    eval_engine_scorer_init(&s, m, ctx, 64);
    CHECK(s.base.score(&s.base, x, 100, 10, 99, ok3, lp3, err, sizeof err), "%s", err);
    CHECK(s.truncated, "a long sequence is marked truncated");
    int32_t cut[64];
    cut[0] = 1;
    memcpy(cut + 1, x + 37, 63 * sizeof *cut);
    CHECK(s.base.score(&s.base, cut, 64, 0, 63, ok1, lp1, err, sizeof err), "%s", err);
    same = true;
    for (int t = 10; t <= 36; t++) same &= ok3[t - 10] == 0 && isinf(lp3[t - 10]);
    for (int t = 37; t < 99; t++) same &= ok3[t - 10] == ok1[t - 36] && fabs(lp3[t - 10] - lp1[t - 36]) < 1e-6;
    CHECK(same, "positions cut away count as wrong; the rest as the cut sequence");
    mnemo_context_free(ctx);
    mnemo_model_free(m);
}

int main(void) {
    test_forgetting_curve();
    test_dict();
    test_windows();
    test_engine_scorer();
    return test_summary();
}
