/*
 * smt_step.h — one micro-batch of sparse memory training (smt_sampler.h): every document row sampled into an SMT
 * row, the SMT loss's gradient (the target part, the sampled memory at its original positions), then mixed
 * training's beta x the plain loss of each document's first seq_len + 1 tokens.
 */
#ifndef MNEMO_SMT_STEP_H
#define MNEMO_SMT_STEP_H

#include "model_grad.h"

typedef struct {
    int64_t memory;  /* M: tokens of the memory part */
    int32_t sampled; /* n: tokens sampled from it */
    int32_t window;  /* W */
    int32_t decay;   /* iterations, 0: no limit */
    double beta;     /* weight of the plain loss */
} smt_settings;

/* Tokens per document row: M + T + 1 - n (what the data must give, as seq_len + 1). */
int64_t smt_doc_tokens(const smt_settings *s, int32_t T);
/* The sampler's starting state for document row `row` (of the whole run: step x rows + r) under seed. */
uint64_t smt_row_seed(uint64_t seed, int64_t row);

/* For the workspace's B rows of T: docs[B][doc_tokens], dmasks[B][doc_tokens - 1]; row b's sampler state
 * smt_row_seed(seed, row0 + b). Gradients of dloss x (L_smt + beta L_plain) accumulate into g / lora as
 * model_loss_and_grads_ws does; *loss = L_smt + beta L_plain. Leaves the workspace at positions 0..T-1. 0, or -1. */
int smt_microbatch(model_train_ws *w, const mnemo_model *m, const smt_settings *s, uint64_t seed, int64_t row0,
                   const int32_t *docs, const uint8_t *dmasks, float dloss, model_grads *g, unsigned train,
                   lora_train *lora, float *loss, char *err, size_t errlen);

#endif
