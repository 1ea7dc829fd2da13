/*
 * llama_weights.h — a LLaMA checkpoint's tensors bound to the roles the forward pass uses, every shape
 * checked against the config. Pointers stay inside the memory-mapped files: nothing is copied.
 */
#ifndef MNEMO_LLAMA_WEIGHTS_H
#define MNEMO_LLAMA_WEIGHTS_H

#include <stddef.h>

#include "kernels.h"
#include "model_config.h"
#include "tensor_index.h"

typedef struct {
    const void *data;
    kern_dtype dt;
} weight_ref;

typedef struct {
    weight_ref attn_norm; /* [d] */
    weight_ref wq;        /* [hq*hd, d] */
    weight_ref wk;        /* [hkv*hd, d] */
    weight_ref wv;        /* [hkv*hd, d] */
    weight_ref wo;        /* [d, hq*hd] */
    weight_ref ffn_norm;  /* [d] */
    weight_ref w_gate;    /* [ff, d] */
    weight_ref w_up;      /* [ff, d] */
    weight_ref w_down;    /* [d, ff] */
    weight_ref q_norm;    /* [hd], qk_norm models only (data NULL otherwise): RMSNorm of each query head */
    weight_ref k_norm;    /* [hd] the same for each key head */
} layer_weights;

typedef struct {
    weight_ref tok_embd;   /* [vocab, d] */
    weight_ref out_norm;   /* [d] */
    weight_ref lm_head;    /* [vocab, d]; the embedding table when tie_word_embeddings */
    layer_weights *layers; /* [n_layer], owned */
    uint64_t bytes_per_token; /* weight bytes one decode step reads (layers + final norm + lm_head) */
} llama_weights;

/* 0 on success; -1 with a message naming the tensor, its file and the problem (missing, wrong shape,
 * unsupported dtype). */
int llama_weights_bind(llama_weights *lw, const model_config *cfg, const weight_store *ws, char *err,
                       size_t errlen);
void llama_weights_free(llama_weights *lw);

#endif
