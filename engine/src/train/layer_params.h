/* A LLaMA decoder layer's parameters in transformers' order: the one table that gradients (model_grad.c) and random
 * initialisation (random_init.c) walk, so the two always name and size the same tensors. */
#ifndef MNEMO_LAYER_PARAMS_H
#define MNEMO_LAYER_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "model_config.h"

/* qk_norm models add the two head norms after the nine every layer has. */
enum { P_NORM1, P_Q, P_K, P_V, P_O, P_NORM2, P_GATE, P_UP, P_DOWN, P_QNORM, P_KNORM, P_MAX_LAYER };

extern const char *const LAYER_PARAM_NAMES[P_MAX_LAYER];

/* How many of the table's parameters a layer of this model has. */
static inline size_t layer_param_count(const model_config *c) { return c->qk_norm ? P_MAX_LAYER : P_QNORM; }

/* Parameter j's shape as {rows, cols}; cols 0 for a vector (the norms). */
void layer_param_shape(const model_config *c, size_t j, int64_t shape[2]);

/* Whether parameter j is an RMSNorm weight (trained with TRAIN_NORMS, initialised to 1). */
static inline int layer_param_is_norm(size_t j) { return j == P_NORM1 || j == P_NORM2 || j == P_QNORM || j == P_KNORM; }

#endif
