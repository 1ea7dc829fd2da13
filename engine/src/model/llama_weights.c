/*
 * llama_weights.c — binds Hugging Face LLaMA tensor names (model.layers.N.self_attn.q_proj.weight, ...) to
 * layer_weights, checking each shape and dtype. Tensors the model does not use (rotary_emb.inv_freq, ...)
 * are simply never looked up.
 */
#include "llama_weights.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Looks up, checks and binds one tensor; adds its size to *bytes when bytes is not NULL. */
static int bind(weight_ref *out, const weight_store *ws, const char *name, int ndim, int64_t d0, int64_t d1,
                uint64_t *bytes, char *err, size_t errlen) {
    const tensor_entry *t = weight_store_find(ws, name);
    if (!t) {
        snprintf(err, errlen, "missing tensor '%s' in the checkpoint", name);
        return -1;
    }
    bool ok = t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1);
    if (!ok) {
        char got[128] = "", want[64];
        size_t p = 0;
        for (int i = 0; i < t->ndim && p < sizeof got - 24; i++)
            p += (size_t)snprintf(got + p, sizeof got - p, "%s%" PRId64, i ? ", " : "", t->shape[i]);
        if (ndim == 1)
            snprintf(want, sizeof want, "%" PRId64, d0);
        else
            snprintf(want, sizeof want, "%" PRId64 ", %" PRId64, d0, d1);
        snprintf(err, errlen, "%s: tensor '%s' has shape [%s], the config needs [%s]", t->file, name, got, want);
        return -1;
    }
    if (tensor_dtype_to_kern(t->dtype, &out->dt) != 0) {
        snprintf(err, errlen,
                 "%s: tensor '%s' has dtype %s; mnemo reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, "
                 "Q4_K, Q5_K and Q6_K weights",
                 t->file, name, tensor_dtype_name(t->dtype));
        return -1;
    }
    /* quantized blocks are rows of whole blocks (32, k-quants 256); norms are read as plain vectors */
    if (kern_dtype_is_quant(out->dt) && (ndim != 2 || d1 % kern_dtype_block(out->dt))) {
        snprintf(err, errlen, "%s: tensor '%s' has dtype %s, which mnemo reads only for matrices with rows of whole "
                 "%d-blocks", t->file, name, tensor_dtype_name(t->dtype), (int)kern_dtype_block(out->dt));
        return -1;
    }
    /* Kernels read weights as float / uint16_t arrays (quantized blocks start with an f16): a tensor at an odd
     * offset would be undefined behaviour. */
    size_t align = kern_dtype_is_quant(out->dt) ? 2 : kern_dtype_size(out->dt);
    if ((uintptr_t)t->data % align != 0) {
        snprintf(err, errlen, "%s: tensor '%s' starts at a byte offset that is not a multiple of its %zu-byte "
                 "elements; re-save the checkpoint (e.g. with the safetensors library)", t->file, name, align);
        return -1;
    }
    out->data = t->data;
    if (bytes) *bytes += t->nbytes;
    return 0;
}

int llama_weights_bind(llama_weights *lw, const model_config *cfg, const weight_store *ws, char *err,
                       size_t errlen) {
    memset(lw, 0, sizeof *lw);
    int64_t d = cfg->hidden_size, ff = cfg->intermediate_size, V = cfg->vocab_size;
    int64_t qd = (int64_t)cfg->num_attention_heads * cfg->head_dim;
    int64_t kvd = (int64_t)cfg->num_key_value_heads * cfg->head_dim;
    lw->layers = calloc((size_t)cfg->num_hidden_layers, sizeof *lw->layers);
    if (!lw->layers) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    uint64_t *bytes = &lw->bytes_per_token;
    /* the embedding is gathered, not streamed: it does not count per token */
    if (bind(&lw->tok_embd, ws, "model.embed_tokens.weight", 2, V, d, NULL, err, errlen)) goto fail;
    if (bind(&lw->out_norm, ws, "model.norm.weight", 1, d, 0, bytes, err, errlen)) goto fail;
    if (cfg->tie_word_embeddings) {
        lw->lm_head = lw->tok_embd;
        *bytes += kern_dtype_bytes(lw->tok_embd.dt, V * d);
    } else if (bind(&lw->lm_head, ws, "lm_head.weight", 2, V, d, bytes, err, errlen)) {
        goto fail;
    }
    for (int32_t l = 0; l < cfg->num_hidden_layers; l++) {
        layer_weights *L = &lw->layers[l];
        char n[128];
#define BIND(field, suffix, nd, a, b)                                                                           \
    snprintf(n, sizeof n, "model.layers.%d.%s", (int)l, suffix);                                              \
    if (bind(&L->field, ws, n, nd, a, b, bytes, err, errlen)) goto fail;
        BIND(attn_norm, "input_layernorm.weight", 1, d, 0)
        BIND(wq, "self_attn.q_proj.weight", 2, qd, d)
        BIND(wk, "self_attn.k_proj.weight", 2, kvd, d)
        BIND(wv, "self_attn.v_proj.weight", 2, kvd, d)
        BIND(wo, "self_attn.o_proj.weight", 2, d, qd)
        BIND(ffn_norm, "post_attention_layernorm.weight", 1, d, 0)
        BIND(w_gate, "mlp.gate_proj.weight", 2, ff, d)
        BIND(w_up, "mlp.up_proj.weight", 2, ff, d)
        BIND(w_down, "mlp.down_proj.weight", 2, d, ff)
        if (cfg->qk_norm) {
            BIND(q_norm, "self_attn.q_norm.weight", 1, cfg->head_dim, 0)
            BIND(k_norm, "self_attn.k_norm.weight", 1, cfg->head_dim, 0)
        }
#undef BIND
    }
    return 0;
fail:
    llama_weights_free(lw);
    return -1;
}

void llama_weights_free(llama_weights *lw) {
    if (!lw) return;
    free(lw->layers);
    lw->layers = NULL;
}
