/*
 * sampler_internal.h — test/diagnostic hooks into the sampler that the public API does not expose.
 * sampler_probs runs exactly the pipeline mnemo_sampler_sample draws from (penalties, temperature, top-k,
 * top-p, min-p, renormalisation) and writes the resulting distribution, so tests can compare it with
 * hand-computed values instead of only with empirical draw frequencies.
 */
#ifndef MNEMO_SAMPLER_INTERNAL_H
#define MNEMO_SAMPLER_INTERNAL_H

#include "engine.h"

/* probs[0..n_vocab) receives the final probability of every token (0 for tokens the filters removed; a
 * one-hot vector when temperature is 0). Does not touch the RNG or the history. Same errors as
 * mnemo_sampler_sample. */
mnemo_status mnemo_sampler_probs(mnemo_sampler *s, const float *logits, int32_t n_vocab, double *probs);

/* Largest token id the history accepts; larger (and negative) ids are ignored by mnemo_sampler_accept. */
#define MNEMO_SAMPLER_MAX_TOKEN_ID ((1 << 24) - 1)

#endif
