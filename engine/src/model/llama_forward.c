/*
 * llama_forward.c — one batch through a LLaMA decoder:
 *   x = embed(tokens)
 *   per layer: xn = rmsnorm(x); q,k,v = xn.Wq,Wk,Wv; rope(q,k); att = attention(q, K, V); x += att.Wo
 *              xn = rmsnorm(x); x += (silu(xn.Wg) * xn.Wu).Wd
 *   logits = rmsnorm(x).lm_head
 * K and V are written straight into the cache rows of their positions, so attention reads one contiguous
 * history. The residual adds are fused into the output projections (matmul beta = 1).
 */
#include "llama_forward.h"

#include <math.h>
#include <stdlib.h>

static void *alloc_floats(size_t n) {
    void *p = NULL;
    if (n == 0) n = 1;
    if (posix_memalign(&p, 64, n * sizeof(float)) != 0) return NULL;
    return p;
}

int kv_cache_init(kv_cache *kv, const model_config *cfg, int32_t n_ctx) {
    kv->n_layer = cfg->num_hidden_layers;
    kv->n_ctx = n_ctx;
    kv->kv_dim = cfg->num_key_value_heads * cfg->head_dim;
    size_t n = (size_t)kv->n_layer * (size_t)n_ctx * (size_t)kv->kv_dim;
    kv->k = alloc_floats(n);
    kv->v = alloc_floats(n);
    if (!kv->k || !kv->v) {
        kv_cache_free(kv);
        return -1;
    }
    return 0;
}

void kv_cache_free(kv_cache *kv) {
    free(kv->k);
    free(kv->v);
    kv->k = kv->v = NULL;
}

int forward_buffers_init(forward_buffers *fb, const model_config *cfg, int32_t n_batch) {
    size_t nb = (size_t)n_batch, d = (size_t)cfg->hidden_size, ff = (size_t)cfg->intermediate_size;
    size_t qd = (size_t)cfg->num_attention_heads * (size_t)cfg->head_dim;
    fb->n_batch = n_batch;
    fb->x = alloc_floats(nb * d);
    fb->xn = alloc_floats(nb * d);
    fb->q = alloc_floats(nb * qd);
    fb->att = alloc_floats(nb * qd);
    fb->gate = alloc_floats(nb * ff);
    fb->up = alloc_floats(nb * ff);
    fb->pos = malloc(nb * sizeof(int32_t));
    if (!fb->x || !fb->xn || !fb->q || !fb->att || !fb->gate || !fb->up || !fb->pos) {
        forward_buffers_free(fb);
        return -1;
    }
    return 0;
}

void forward_buffers_free(forward_buffers *fb) {
    free(fb->x);
    free(fb->xn);
    free(fb->q);
    free(fb->att);
    free(fb->gate);
    free(fb->up);
    free(fb->pos);
    fb->x = fb->xn = fb->q = fb->att = fb->gate = fb->up = NULL;
    fb->pos = NULL;
}

#define TRY(call)                                                                                               \
    do {                                                                                                        \
        int rc_ = (call);                                                                                       \
        if (rc_ != KERN_OK) return rc_;                                                                         \
    } while (0)

int llama_forward(const model_config *cfg, const llama_weights *w, const kern_backend *be, kern_ctx *kc,
                  kv_cache *kv, forward_buffers *fb, const int32_t *tokens, int32_t n, int32_t pos0,
                  int32_t logits_from, float *logits) {
    if (n <= 0 || n > fb->n_batch || pos0 < 0 || pos0 + n > kv->n_ctx || logits_from < 0 || logits_from > n)
        return KERN_ESHAPE;
    const int64_t d = cfg->hidden_size, ff = cfg->intermediate_size, hd = cfg->head_dim;
    const int64_t hq = cfg->num_attention_heads, hkv = cfg->num_key_value_heads, V = cfg->vocab_size;
    const int64_t qd = hq * hd, kvd = hkv * hd;
    const float eps = cfg->rms_norm_eps, theta = cfg->rope_theta, pos_scale = cfg->rope_scaling_factor;
    const float scale = 1.0f / sqrtf((float)hd);

    for (int32_t i = 0; i < n; i++) fb->pos[i] = pos0 + i;
    TRY(be->embed(kc, fb->x, w->tok_embd.data, w->tok_embd.dt, V, d, tokens, n));

    for (int32_t l = 0; l < cfg->num_hidden_layers; l++) {
        const layer_weights *L = &w->layers[l];
        float *kl = kv->k + (size_t)l * (size_t)kv->n_ctx * (size_t)kvd; /* (n_ctx, kvd) */
        float *vl = kv->v + (size_t)l * (size_t)kv->n_ctx * (size_t)kvd;
        float *knew = kl + (size_t)pos0 * (size_t)kvd, *vnew = vl + (size_t)pos0 * (size_t)kvd;

        /* attention sublayer */
        TRY(be->rmsnorm(kc, fb->xn, NULL, fb->x, L->attn_norm.data, L->attn_norm.dt, n, d, eps));
        TRY(be->matmul(kc, fb->q, fb->xn, L->wq.data, L->wq.dt, n, qd, d, 0.f));
        TRY(be->matmul(kc, knew, fb->xn, L->wk.data, L->wk.dt, n, kvd, d, 0.f));
        TRY(be->matmul(kc, vnew, fb->xn, L->wv.data, L->wv.dt, n, kvd, d, 0.f));
        TRY(be->rope(kc, fb->q, n, hq, hd, fb->pos, theta, pos_scale));
        TRY(be->rope(kc, knew, n, hkv, hd, fb->pos, theta, pos_scale));
        TRY(be->attention(kc, fb->att, fb->q, kl, vl, n, pos0 + n, pos0, hq, hkv, hd, scale));
        TRY(be->matmul(kc, fb->x, fb->att, L->wo.data, L->wo.dt, n, d, qd, 1.f));

        /* MLP sublayer */
        TRY(be->rmsnorm(kc, fb->xn, NULL, fb->x, L->ffn_norm.data, L->ffn_norm.dt, n, d, eps));
        TRY(be->matmul(kc, fb->gate, fb->xn, L->w_gate.data, L->w_gate.dt, n, ff, d, 0.f));
        TRY(be->matmul(kc, fb->up, fb->xn, L->w_up.data, L->w_up.dt, n, ff, d, 0.f));
        TRY(be->swiglu(kc, fb->gate, fb->gate, fb->up, n * ff));
        TRY(be->matmul(kc, fb->x, fb->gate, L->w_down.data, L->w_down.dt, n, d, ff, 1.f));
    }

    int32_t nl = n - logits_from;
    if (nl > 0) {
        float *xs = fb->x + (size_t)logits_from * (size_t)d;
        TRY(be->rmsnorm(kc, fb->xn, NULL, xs, w->out_norm.data, w->out_norm.dt, nl, d, eps));
        TRY(be->matmul(kc, logits, fb->xn, w->lm_head.data, w->lm_head.dt, nl, V, d, 0.f));
    }
    return KERN_OK;
}
