/*
 * s2_attn.h — LongLoRA's shifted sparse attention, the training-time attention of one
 * sequence of T rows, in the no-leak form of the current reference code:
 *
 *   group g (T divisible by g, g even); the first half of the query heads attends within groups [0,g), [g,2g), ...;
 *   the second half within groups shifted by g/2: [0,g/2), [g/2,3g/2), ..., [T-g/2,T) — half-size groups at both
 *   ends, never wrapping around; causal within every group. RoPE was applied before, at the global positions.
 *   g >= T is one group for both halves: full causal attention (nothing to shift).
 *
 * Composed from the attention op and its backward: each half's heads are gathered into contiguous buffers and each
 * group is one op call with its own rows as queries and keys. GQA: when a half of the query heads covers whole KV
 * groups, that half reads its own KV heads; otherwise (an odd number of KV heads) each query head gets a copy of its
 * KV head, and the backward sums the copies back. The gathers are the backend's 2-D copies, so every backend runs it
 * (the scratch is in its memory).
 */
#ifndef MNEMO_S2_ATTN_H
#define MNEMO_S2_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

typedef struct s2_attn s2_attn;

/* Scratch and layout for sequences of T rows with groups of g; NULL with a message in err on bad shapes (T not a
 * multiple of g, g odd while g < T, an odd number of query heads) or no memory. */
s2_attn *s2_attn_new(const kern_backend *be, int64_t T, int64_t g, int64_t hq, int64_t hkv, int64_t hd, char *err,
                     size_t errlen);
void s2_attn_free(s2_attn *s);
size_t s2_attn_bytes(const s2_attn *s);

/* out[T, hq, hd], lse[T, hq] (saved for the backward) from q[T, hq, hd], k, v[T, hkv, hd]. KERN_OK or an op's
 * error. */
int s2_attention(s2_attn *s, kern_ctx *kc, float *out, float *lse, const float *q, const float *k, const float *v,
                 float scale);
/* Its backward, with the attention op's rule: dq overwritten, dk and dv accumulated (+=). */
int s2_attention_backward(s2_attn *s, kern_ctx *kc, float *dq, float *dk, float *dv, const float *dout,
                          const float *q, const float *k, const float *v, const float *out, const float *lse,
                          float scale);

#endif
