/* eval_scorer.c — the teacher-forcing scorer over a real context (see eval_scorer.h). */
#include "eval_scorer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* argmax and log-softmax of one row of logits at target */
static void judge(const float *lg, int32_t V, int32_t target, uint8_t *correct, double *logprob) {
    int32_t best = 0;
    float mx = lg[0];
    for (int32_t v = 1; v < V; v++)
        if (lg[v] > mx) mx = lg[v], best = v;
    *correct = best == target;
    if (logprob) {
        double sum = 0;
        for (int32_t v = 0; v < V; v++) sum += exp((double)lg[v] - mx);
        *logprob = (double)lg[target] - mx - log(sum);
    }
}

static bool engine_score(eval_scorer *base, const int32_t *tokens, int64_t n, int64_t from, int64_t to,
                         uint8_t *correct, double *logprob, char *err, size_t errlen) {
    eval_engine_scorer *s = (eval_engine_scorer *)base;
    mnemo_uio_info uio;
    bool unbounded = s->unbounded || mnemo_model_has_memory(s->model) || mnemo_model_uio(s->model, &uio) == MNEMO_OK;
    int32_t n_ctx = mnemo_context_n_ctx(s->ctx), V = mnemo_model_n_vocab(s->model);
    /* a model without memory sees BOS and the last n_ctx - 1 tokens; offset maps a position of the cut sequence
     * back to the caller's: position p of the cut sequence (p >= 1) is the caller's p + offset */
    int64_t offset = 0;
    int32_t *cut = NULL;
    const int32_t *seq = tokens;
    int64_t len = n;
    if (!unbounded && n > n_ctx) {
        offset = n - n_ctx;
        if (!(cut = malloc((size_t)n_ctx * sizeof *cut))) {
            snprintf(err, errlen, "out of memory");
            return false;
        }
        cut[0] = tokens[0];
        for (int32_t p = 1; p < n_ctx; p++) cut[p] = tokens[p + offset];
        seq = cut;
        len = n_ctx;
        s->truncated = true;
        for (int64_t t = from; t < to && t < offset + 1; t++) { /* seen by the model only through their absence */
            correct[t - from] = 0;
            if (logprob) logprob[t - from] = -INFINITY;
        }
    }
    mnemo_context_reset(s->ctx);
    bool ok = true;
    for (int64_t p0 = 0; p0 < len && ok; p0 += s->chunk) {
        int32_t m = (int32_t)(len - p0 < s->chunk ? len - p0 : s->chunk);
        if (mnemo_decode(s->ctx, seq + p0, m) != MNEMO_OK) {
            snprintf(err, errlen, "%s", mnemo_context_error(s->ctx));
            ok = false;
            break;
        }
        for (int32_t i = 0; i < m; i++) {
            int64_t p = p0 + i, t = p == 0 ? 0 : p + offset; /* the caller's position of this prediction */
            if (p + 1 >= len || t < from || t >= to || (offset && p == 0)) continue;
            const float *lg = mnemo_get_logits(s->ctx, i);
            if (!lg) {
                snprintf(err, errlen, "the context kept no logits for position %lld", (long long)p);
                ok = false;
                break;
            }
            judge(lg, V, seq[p + 1], &correct[t - from], logprob ? &logprob[t - from] : NULL);
        }
        s->done += m;
        if (base->progress) base->progress(base, s->done);
    }
    free(cut);
    return ok;
}

void eval_engine_scorer_init(eval_engine_scorer *s, mnemo_model *m, mnemo_context *ctx, int32_t chunk) {
    *s = (eval_engine_scorer){.base = {.score = engine_score}, .model = m, .ctx = ctx, .chunk = chunk > 0 ? chunk : 256};
}
