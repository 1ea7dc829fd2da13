/*
 * fot_attention.h — the attention of a LongLLaMA memory layer during FoT cross-batch training,
 * forward and backward, composed from the attention ops of the op table (no op of its own).
 *
 * Row r's queries (T of them, rotated as usual at positions 0..T-1) see, in ONE softmax, the keys of every extra
 * context fot_extra_rows names — whole, unrotated (RoPE position 0 = identity, as the inference path stores memory)
 * — followed by the row's own causal keys (rotated): as the causal op over keys [extra_1 | ... | extra_E | own] with
 * q_pos0 = E*T, computed in two parts merged by log-sum-exp (fot_attention.c: the extras once per group of rows
 * that see the same ones). The extra contexts are computed in the same step and the backward flows into them: their
 * keys' gradient is collected unrotated (dk_raw, added to the key gradient after RoPE's backward), their values'
 * straight into dv.
 *
 * mem_positionals false (memory layers without RoPE): model_grad.c rotates nothing in memory layers; raw and local
 * keys are then the same numbers and everything above still holds.
 */
#ifndef MNEMO_FOT_ATTENTION_H
#define MNEMO_FOT_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fot_schedule.h"
#include "kernels.h"
#include "model_config.h"

typedef struct fot_ws fot_ws;

/* For micro-batches of `docs` documents (docs * s->K rows of T tokens) on a model with mem_layers. recompute: one
 * buffer of raw keys for the layer being worked on instead of one per memory layer. NULL with a message. */
fot_ws *fot_ws_new(const model_config *c, const fot_schedule *s, int32_t docs, int32_t T, bool recompute, char *err,
                   size_t errlen);
/* The same with its buffers in be's memory (a device backend; a host backend or NULL: host memory), for a model
 * on be. */
fot_ws *fot_ws_new_on(const kern_backend *be, const model_config *c, const fot_schedule *s, int32_t docs, int32_t T,
                      bool recompute, char *err, size_t errlen);
void fot_ws_free(fot_ws *f);
/* The device backend whose memory holds f's buffers; NULL: host memory. */
const kern_backend *fot_ws_backend(const fot_ws *f);
size_t fot_ws_bytes(const fot_ws *f);
int32_t fot_ws_rows(const fot_ws *f);

bool fot_is_mem_layer(const fot_ws *f, int64_t l);
/* Whether memory layers rotate their local queries and keys (config mem_positionals). */
bool fot_mem_rotates(const fot_ws *f);
/* [rows*T, kvd]: layer l's keys before RoPE, filled by model_grad.c before it rotates them. */
float *fot_k_raw(fot_ws *f, int64_t l);
/* [rows*T, kvd]: the gradient of layer l's raw keys through their use as extra contexts (fot_attention_backward
 * overwrites it). */
float *fot_dk_raw(fot_ws *f);

/* att [rows*T, hq*hd], lse [rows*T, hq]; q, k: rotated (as the layer uses them locally), v. A kernel status. */
int fot_attention_forward(const kern_backend *be, kern_ctx *kc, fot_ws *f, int64_t l, float *att, float *lse,
                          const float *q, const float *k, const float *v, int64_t hq, int64_t hkv, int64_t hd,
                          float scale);
/* dq overwritten; dk, dv accumulate (the caller zeroes them); fot_dk_raw(f) overwritten. A kernel status. */
int fot_attention_backward(const kern_backend *be, kern_ctx *kc, fot_ws *f, int64_t l, float *dq, float *dk,
                           float *dv, const float *datt, const float *q, const float *k, const float *v,
                           const float *att, const float *lse, int64_t hq, int64_t hkv, int64_t hd, float scale);

#endif
