/*
 * llama_forward.c — one batch through a LLaMA decoder:
 *   x = embed(tokens)
 *   per layer: xn = rmsnorm(x); q,k,v = xn.Wq,Wk,Wv; rope(q,k); k,v -> each sequence's cache;
 *              att = attention(q, K, V) per sequence; x += att.Wo
 *              xn = rmsnorm(x); x += (silu(xn.Wg) * xn.Wu).Wd
 *   logits = rmsnorm(x).lm_head for the rows that want them
 * The rows of all sequences are stacked, so each weight matrix is streamed once per step however many
 * sequences decode together. The residual adds are fused into the output projections (matmul beta = 1).
 */
#include "llama_forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    size_t kvd = (size_t)cfg->num_key_value_heads * (size_t)cfg->head_dim;
    memset(fb, 0, sizeof *fb);
    fb->n_batch = n_batch;
    fb->x = alloc_floats(nb * d);
    fb->xn = alloc_floats(nb * d);
    fb->q = alloc_floats(nb * qd);
    fb->k = alloc_floats(nb * kvd);
    fb->v = alloc_floats(nb * kvd);
    fb->att = alloc_floats(nb * qd);
    fb->gate = alloc_floats(nb * ff);
    fb->up = alloc_floats(nb * ff);
    fb->pos = malloc(nb * sizeof(int32_t));
    if (!fb->x || !fb->xn || !fb->q || !fb->k || !fb->v || !fb->att || !fb->gate || !fb->up || !fb->pos) {
        forward_buffers_free(fb);
        return -1;
    }
    return 0;
}

void forward_buffers_free(forward_buffers *fb) {
    free(fb->x);
    free(fb->xn);
    free(fb->q);
    free(fb->k);
    free(fb->v);
    free(fb->att);
    free(fb->gate);
    free(fb->up);
    free(fb->pos);
    memset(fb, 0, sizeof *fb);
}

#define TRY(call)                                                                                               \
    do {                                                                                                        \
        int rc_ = (call);                                                                                       \
        if (rc_ != KERN_OK) return rc_;                                                                         \
    } while (0)

/* Final norm + lm_head over the rows that want logits, gathered into one block (one matmul), then scattered. */
static int forward_logits(const model_config *cfg, const llama_weights *w, const kern_backend *be, kern_ctx *kc,
                          forward_buffers *fb, const forward_seq *seqs, int32_t n_seqs) {
    const int64_t d = cfg->hidden_size, V = cfg->vocab_size;
    int32_t rows = 0, r0 = 0;
    for (int32_t s = 0; s < n_seqs; s++) { /* gather into xn (rows wanting logits come first, in order) */
        int32_t nl = seqs[s].n - seqs[s].logits_from;
        if (nl > 0) memmove(fb->xn + (size_t)rows * d, fb->x + (size_t)(r0 + seqs[s].logits_from) * d, (size_t)nl * d * 4);
        rows += nl > 0 ? nl : 0;
        r0 += seqs[s].n;
    }
    if (rows == 0) return KERN_OK;
    TRY(be->rmsnorm(kc, fb->xn, NULL, fb->xn, w->out_norm.data, w->out_norm.dt, rows, d, cfg->rms_norm_eps));
    if (n_seqs == 1) /* straight into the caller's buffer */
        return be->matmul(kc, seqs[0].logits, fb->xn, w->lm_head.data, w->lm_head.dt, rows, V, d, 0.f);
    float *all = malloc((size_t)rows * (size_t)V * sizeof(float));
    if (!all) return KERN_ENOMEM;
    int rc = be->matmul(kc, all, fb->xn, w->lm_head.data, w->lm_head.dt, rows, V, d, 0.f);
    for (int32_t s = 0, r = 0; rc == KERN_OK && s < n_seqs; s++) {
        int32_t nl = seqs[s].n - seqs[s].logits_from;
        if (nl <= 0) continue;
        memcpy(seqs[s].logits, all + (size_t)r * V, (size_t)nl * V * sizeof(float));
        r += nl;
    }
    free(all);
    return rc;
}

int llama_forward_batch(const model_config *cfg, const llama_weights *w, const kern_backend *be, kern_ctx *kc,
                        forward_buffers *fb, const forward_seq *seqs, int32_t n_seqs) {
    const int64_t d = cfg->hidden_size, ff = cfg->intermediate_size, hd = cfg->head_dim;
    const int64_t hq = cfg->num_attention_heads, hkv = cfg->num_key_value_heads, V = cfg->vocab_size;
    const int64_t qd = hq * hd, kvd = hkv * hd;
    const float eps = cfg->rms_norm_eps, theta = cfg->rope_theta, pos_scale = cfg->rope_scaling_factor;
    const float scale = 1.0f / sqrtf((float)hd);

    int64_t n = 0; /* rows of all sequences */
    for (int32_t s = 0; s < n_seqs; s++) {
        const forward_seq *q = &seqs[s];
        if (q->n <= 0 || q->pos0 < 0 || q->pos0 + q->n > q->kv->n_ctx || q->logits_from < 0 || q->logits_from > q->n)
            return KERN_ESHAPE;
        for (int32_t i = 0; i < q->n; i++) fb->pos[n + i] = q->pos0 + i;
        TRY(be->embed(kc, fb->x + n * d, w->tok_embd.data, w->tok_embd.dt, V, d, q->tokens, q->n));
        n += q->n;
        if (n > fb->n_batch) return KERN_ESHAPE;
    }
    if (n_seqs <= 0) return KERN_ESHAPE;

    for (int32_t l = 0; l < cfg->num_hidden_layers; l++) {
        const layer_weights *L = &w->layers[l];

        /* attention sublayer: projections over all rows, attention per sequence over its own cache */
        TRY(be->rmsnorm(kc, fb->xn, NULL, fb->x, L->attn_norm.data, L->attn_norm.dt, n, d, eps));
        TRY(be->matmul(kc, fb->q, fb->xn, L->wq.data, L->wq.dt, n, qd, d, 0.f));
        TRY(be->matmul(kc, fb->k, fb->xn, L->wk.data, L->wk.dt, n, kvd, d, 0.f));
        TRY(be->matmul(kc, fb->v, fb->xn, L->wv.data, L->wv.dt, n, kvd, d, 0.f));
        TRY(be->rope(kc, fb->q, n, hq, hd, fb->pos, theta, pos_scale));
        TRY(be->rope(kc, fb->k, n, hkv, hd, fb->pos, theta, pos_scale));
        int64_t r = 0;
        for (int32_t s = 0; s < n_seqs; s++) {
            const forward_seq *q = &seqs[s];
            size_t layer_off = (size_t)l * (size_t)q->kv->n_ctx * (size_t)kvd; /* cache is (n_ctx, kvd) per layer */
            float *kl = q->kv->k + layer_off, *vl = q->kv->v + layer_off;
            memcpy(kl + (size_t)q->pos0 * kvd, fb->k + r * kvd, (size_t)q->n * kvd * sizeof(float));
            memcpy(vl + (size_t)q->pos0 * kvd, fb->v + r * kvd, (size_t)q->n * kvd * sizeof(float));
            TRY(be->attention(kc, fb->att + r * qd, fb->q + r * qd, kl, vl, q->n, q->pos0 + q->n, q->pos0, hq, hkv, hd,
                              scale));
            r += q->n;
        }
        TRY(be->matmul(kc, fb->x, fb->att, L->wo.data, L->wo.dt, n, d, qd, 1.f));

        /* MLP sublayer */
        TRY(be->rmsnorm(kc, fb->xn, NULL, fb->x, L->ffn_norm.data, L->ffn_norm.dt, n, d, eps));
        TRY(be->matmul(kc, fb->gate, fb->xn, L->w_gate.data, L->w_gate.dt, n, ff, d, 0.f));
        TRY(be->matmul(kc, fb->up, fb->xn, L->w_up.data, L->w_up.dt, n, ff, d, 0.f));
        TRY(be->swiglu(kc, fb->gate, fb->gate, fb->up, n * ff));
        TRY(be->matmul(kc, fb->x, fb->gate, L->w_down.data, L->w_down.dt, n, d, ff, 1.f));
    }
    return forward_logits(cfg, w, be, kc, fb, seqs, n_seqs);
}

int llama_forward(const model_config *cfg, const llama_weights *w, const kern_backend *be, kern_ctx *kc,
                  kv_cache *kv, forward_buffers *fb, const int32_t *tokens, int32_t n, int32_t pos0,
                  int32_t logits_from, float *logits) {
    forward_seq s = {.kv = kv, .tokens = tokens, .n = n, .pos0 = pos0, .logits_from = logits_from, .logits = logits};
    return llama_forward_batch(cfg, w, be, kc, fb, &s, 1);
}
