/*
 * uio_transfer.c — the UIO transfer head (tests/fixtures/uio/README.md, "Transfer head"): once per compressed
 * segment, layer l's memory keys and values from the encoder's <mem> attention inputs h_l [M, hidden],
 *     K_l = h_l Wk^T + s (h_l Ak^T) Bk^T      V_l = h_l Wv^T + s (h_l Av^T) Bv^T
 * with the base model's k_proj / v_proj and the decoder LoRA. They go straight into the context's cache at rows
 * row0 .. row0+M-1 (uio_memory.h: the cache is [memory | raw]); the keys are then rotated at those rows' positions,
 * where they stay for good. With a memory budget (uio_knn.c) the keys before RoPE are also kept (host, kpre): a
 * shift re-rotates them and a move to the store takes them unrotated.
 */
#include "lora.h"
#include "uio_memory.h"

#define TRY(call)                                                                                               \
    do {                                                                                                        \
        int rc_ = (call);                                                                                       \
        if (rc_ != KERN_OK) return rc_;                                                                         \
    } while (0)

int uio_transfer(uio_state *s, kern_ctx *kc, const kv_cache *kv, const float *hseg, int32_t row0) {
    const model_config *cfg = s->cfg;
    const kern_backend *be = s->be;
    const lora_adapter *tr = &s->u->transfer;
    const int64_t d = cfg->hidden_size, hd = cfg->head_dim, hkv = cfg->num_key_value_heads;
    const int64_t kvd = hkv * hd, M = s->M;
    if (row0 < 0 || row0 + M > kv->n_ctx) return KERN_ESHAPE;
    for (int32_t i = 0; i < M; i++) s->tpos_host[i] = row0 + i;
    if (!be->host_memory) TRY(be->mem_copy(kc, s->tpos, s->tpos_host, (size_t)M * sizeof(int32_t), KERN_H2D));
    for (int32_t l = 0; l < cfg->num_hidden_layers; l++) {
        const layer_weights *L = &s->w->layers[l];
        const float *h = hseg + (size_t)l * (size_t)(M * d);
        size_t off = ((size_t)l * (size_t)kv->n_ctx + (size_t)row0) * (size_t)kvd; /* cache: (n_layer, n_ctx, kvd) */
        float *k = kv->k + off, *v = kv->v + off;
        TRY(be->matmul(kc, k, h, L->wk.data, L->wk.dt, M, kvd, d, 0.f));
        TRY(lora_apply(lora_pair_at(tr, l, LORA_K), tr->r, be, kc, k, h, M, kvd, d, s->fb.lora_t));
        TRY(be->matmul(kc, v, h, L->wv.data, L->wv.dt, M, kvd, d, 0.f));
        TRY(lora_apply(lora_pair_at(tr, l, LORA_V), tr->r, be, kc, v, h, M, kvd, d, s->fb.lora_t));
        if (s->knn.budget) { /* kpre: [n_layer][budget + M][kvd], host */
            float *kp = s->knn.kpre + ((size_t)l * (size_t)(s->knn.budget + M) + (size_t)row0) * (size_t)kvd;
            TRY(be->mem_copy(kc, kp, k, (size_t)(M * kvd) * sizeof(float), be->host_memory ? KERN_D2D : KERN_D2H));
        }
        TRY(be->rope(kc, k, M, hkv, hd, s->tpos, cfg->rope_theta, cfg->rope_scaling_factor));
    }
    return KERN_OK;
}
