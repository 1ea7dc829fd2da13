/*
 * smt_step.c — see smt_step.h.
 */
#include "smt_step.h"

#include <stdio.h>
#include <stdlib.h>

#include "engine_impl.h"
#include "smt_sampler.h"

int64_t smt_doc_tokens(const smt_settings *s, int32_t T) { return s->memory + T + 1 - s->sampled; }

uint64_t smt_row_seed(uint64_t seed, int64_t row) {
    uint64_t st = seed ^ (0xd1b54a32d192ed03ull * (uint64_t)(row + 1));
    return smt_rand(&st);
}

int smt_microbatch(model_train_ws *w, const mnemo_model *m, const smt_settings *s, uint64_t seed, int64_t row0,
                   const int32_t *docs, const uint8_t *dmasks, float dloss, model_grads *g, unsigned train,
                   lora_train *lora, float *loss, char *err, size_t errlen) {
    const int32_t B = model_train_ws_rows(w), T = model_train_ws_len(w), n = s->sampled;
    const int64_t D = smt_doc_tokens(s, T);
    int32_t *tok = malloc((size_t)B * (size_t)(T + 1) * sizeof *tok), *pos = malloc((size_t)B * (size_t)T * sizeof *pos);
    int32_t *sampled = malloc((size_t)n * sizeof *sampled);
    uint8_t *mask = malloc((size_t)B * (size_t)T);
    int rc = -1;
    float l_smt = 0, l_plain = 0;
    if (!tok || !pos || !sampled || !mask) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (int32_t b = 0; b < B; b++) {
        uint64_t rng = smt_row_seed(seed, row0 + b);
        if (smt_sample(&rng, s->memory, n, s->window, s->decay, sampled, err, errlen)) goto out;
        smt_row(docs + (size_t)b * (size_t)D, dmasks + (size_t)b * (size_t)(D - 1), s->memory, T, sampled, n,
                tok + (size_t)b * (size_t)(T + 1), mask + (size_t)b * (size_t)T, pos + (size_t)b * (size_t)T);
    }
    if (model_train_ws_set_positions(w, pos, err, errlen) ||
        model_loss_and_grads_ws(w, m, tok, mask, dloss, g, train, lora, &l_smt, err, errlen))
        goto out;
    if (s->beta > 0) { /* mixed training: the plain loss of the window the model was trained on */
        for (int32_t b = 0; b < B; b++)
            smt_plain_row(docs + (size_t)b * (size_t)D, dmasks + (size_t)b * (size_t)(D - 1), T,
                          tok + (size_t)b * (size_t)(T + 1), mask + (size_t)b * (size_t)T, pos + (size_t)b * (size_t)T);
        if (model_train_ws_set_positions(w, NULL, err, errlen) ||
            model_loss_and_grads_ws(w, m, tok, mask, (float)(s->beta * dloss), g, train, lora, &l_plain, err, errlen))
            goto out;
    }
    *loss = (float)(l_smt + s->beta * l_plain);
    rc = 0;
out:
    model_train_ws_set_positions(w, NULL, err, 0);
    free(tok), free(pos), free(sampled), free(mask);
    return rc;
}
