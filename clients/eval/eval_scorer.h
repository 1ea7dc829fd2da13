/*
 * eval_scorer.h — teacher forcing: a token sequence goes through a model from an empty state, and each position's
 * next-token prediction is compared with the token that really follows. Every eval reaches its model through this
 * one call, so the evals' arithmetic is tested with scorers whose answers are known (tests/unit/test_eval.c).
 */
#ifndef MNEMO_EVAL_SCORER_H
#define MNEMO_EVAL_SCORER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

typedef struct eval_scorer {
    /* Tokens[0..n) from an empty state. For t in [from, to): correct[t - from] = (argmax of the prediction at t ==
     * tokens[t + 1]); logprob[t - from] (when logprob != NULL) = log p(tokens[t + 1]); 0 <= from < to <= n - 1.
     * Returns false with a message in err. */
    bool (*score)(struct eval_scorer *s, const int32_t *tokens, int64_t n, int64_t from, int64_t to,
                  uint8_t *correct, double *logprob, char *err, size_t errlen);
    /* Tokens scored so far, for a progress bar (may be NULL). */
    void (*progress)(struct eval_scorer *s, int64_t tokens_done);
    void *user;
} eval_scorer;

/* The scorer over a real context: the sequence goes through mnemo_decode in chunks of at most `chunk` tokens (a
 * LongLLaMA context moves full windows to memory, a UIO context compresses full segments, as in generation). A
 * model with no memory takes at most its n_ctx tokens: a longer sequence keeps BOS and its last n_ctx - 1 tokens
 * (what such a model can see; positions cut away count as wrong, logprob -inf) and *truncated is set. */
typedef struct {
    eval_scorer base;
    mnemo_model *model;
    mnemo_context *ctx; /* made with logits_all */
    int32_t chunk;
    bool unbounded;     /* the context takes any length (retrieval memory): nothing is cut; the model's own
                         * memory (LongLLaMA, UIO) counts as such without it */
    bool truncated;     /* some sequence was longer than the model can see */
    int64_t done;       /* tokens through the model so far */
} eval_engine_scorer;

/* ctx must have been created with logits_all = true. */
void eval_engine_scorer_init(eval_engine_scorer *s, mnemo_model *m, mnemo_context *ctx, int32_t chunk);

#endif
