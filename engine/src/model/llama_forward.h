/*
 * llama_forward.h — the LLaMA forward pass over one batch of tokens, written out layer by layer (llama2.c /
 * llm.c style) on top of the kernel op table, plus the per-context state it needs: the KV cache and the
 * activation buffers.
 */
#ifndef MNEMO_LLAMA_FORWARD_H
#define MNEMO_LLAMA_FORWARD_H

#include <stdint.h>

#include "kernels.h"
#include "llama_weights.h"
#include "model_config.h"

/* Every buffer below lives in the memory of the backend `be` (device memory on CUDA), allocated and freed
 * through be->mem_alloc / be->mem_free. */
typedef struct {
    const kern_backend *be;
    int32_t n_layer, n_ctx, kv_dim; /* kv_dim = num_key_value_heads * head_dim */
    float *k;                       /* (n_layer, n_ctx, kv_dim), keys after RoPE */
    float *v;                       /* (n_layer, n_ctx, kv_dim) */
} kv_cache;

typedef struct {
    const kern_backend *be;
    int32_t n_batch;  /* most tokens (all sequences together) one call processes */
    float *x;         /* (n_batch, d) residual stream */
    float *xn;        /* (n_batch, d) normalised input of a sublayer */
    float *q;         /* (n_batch, hq*hd) */
    float *k;         /* (n_batch, hkv*hd) new keys, before they are copied into their sequence's cache */
    float *v;         /* (n_batch, hkv*hd) new values */
    float *att;       /* (n_batch, hq*hd) attention output */
    float *gate;      /* (n_batch, ff) gate projection, then silu(gate)*up */
    float *up;        /* (n_batch, ff) */
    int32_t *pos;     /* (2*n_batch) backend memory: absolute positions of the step's rows, then (device
                       * backends) their token ids; host backends read token ids straight from the caller */
    int32_t *staging; /* (2*n_batch) host: positions and ids assembled here, uploaded in one copy; on host
                       * backends this IS pos */
    float *logits;    /* device backends: lm_head output before it is downloaded, logits_cap floats */
    size_t logits_cap;
    float *lora_t;    /* (n_batch, r) an adapter's x A^T (forward_buffers_reserve_lora), lora_cap floats */
    size_t lora_cap;
} forward_buffers;

/* 0, or -1 when the backend is out of memory. */
int kv_cache_init(kv_cache *kv, const model_config *cfg, int32_t n_ctx, const kern_backend *be);
void kv_cache_free(kv_cache *kv);
int forward_buffers_init(forward_buffers *fb, const model_config *cfg, int32_t n_batch, const kern_backend *be);
void forward_buffers_free(forward_buffers *fb);
/* Room for adapters of rank r in lora_t. 0, or -1 when out of memory. */
int forward_buffers_reserve_lora(forward_buffers *fb, int32_t r);

/* Device backends: copies every weight (in its stored dtype) into one backend allocation and points w at it;
 * *block receives that allocation (free it with be->mem_free after the last forward). Tied embeddings are
 * copied once. Host backends: nothing to do, *block = NULL. 0, or -1 when the device is out of memory (w is
 * then unchanged). *bytes receives the size uploaded. */
int llama_weights_upload(llama_weights *w, const model_config *cfg, const kern_backend *be, void **block,
                         uint64_t *bytes);

struct memory_ops;
struct lora_adapter;

/* One sequence of a batch: n tokens at positions pos0 .. pos0+n-1 of its own KV cache (pos0 + n <= n_ctx).
 * The logits of its rows logits_from .. n-1 go to logits ((n - logits_from) x vocab); logits_from == n keeps
 * none. hidden (host memory, NULL = off): those rows' last hidden state after the final RMSNorm go there instead
 * ((n - logits_from) x hidden_size), lm_head is skipped for them and logits is unused (embeddings).
 * mem, mem_state: the context's long-context memory (memory.h), NULL for plain LLaMA. The layers it flags hand it
 * their keys before RoPE and attend through it; every sequence of a batch with a memory must have the same kind
 * (one model: one kind). */
typedef struct {
    kv_cache *kv;
    const int32_t *tokens;
    int32_t n, pos0, logits_from;
    float *logits;
    float *hidden;
    const struct memory_ops *mem;
    void *mem_state;
    const struct lora_adapter *lora; /* NULL: the base weights alone; else added at its targets (lora.h) */
} forward_seq;

/* Run several sequences through the model together: every matmul sees the rows of all of them (weights are
 * read once per step, which is what makes batched decode fast), attention runs per sequence over its own cache.
 * The total row count must be <= fb->n_batch, each cache distinct; caches, buffers, weights and the backend
 * must agree (device memory on CUDA). Token ids, logits and hidden rows are host memory whatever the backend: they
 * are downloaded after the final norm / lm_head, and on device backends the call returns only once they are on the
 * host.
 * Returns a KERN_* code. */
int llama_forward_batch(const model_config *cfg, const llama_weights *w, const kern_backend *be, kern_ctx *kc,
                        forward_buffers *fb, const forward_seq *seqs, int32_t n_seqs);

/* The one-sequence case. */
int llama_forward(const model_config *cfg, const llama_weights *w, const kern_backend *be, kern_ctx *kc,
                  kv_cache *kv, forward_buffers *fb, const int32_t *tokens, int32_t n, int32_t pos0,
                  int32_t logits_from, float *logits);

#endif
