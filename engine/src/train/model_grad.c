/*
 * model_grad.c — see model_grad.h. The forward mirrors llama_forward.c row for row (the same ops in the same
 * order, so the loss is the inference path's), keeping one activations struct per layer.
 */
#include "model_grad.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"

enum { P_NORM1, P_Q, P_K, P_V, P_O, P_NORM2, P_GATE, P_UP, P_DOWN, P_PER_LAYER };
static const char *const LAYER_NAMES[P_PER_LAYER] = {
    "input_layernorm.weight",   "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",  "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",     "mlp.up_proj.weight",      "mlp.down_proj.weight"};

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static bool tied(const mnemo_model *m) { return m->w.lm_head.data == m->w.tok_embd.data; }

int model_grads_init(model_grads *g, const mnemo_model *m, char *err, size_t errlen) {
    memset(g, 0, sizeof *g);
    const model_config *c = &m->cfg;
    if (c->is_longllama) return fail(err, errlen, "training LongLLaMA memory layers is not supported yet");
    if (!m->be->host_memory) return fail(err, errlen, "training runs on the CPU backend so far (got %s)", m->be->name);
    size_t d = (size_t)c->hidden_size, ff = (size_t)c->intermediate_size, V = (size_t)c->vocab_size;
    size_t qd = (size_t)c->num_attention_heads * (size_t)c->head_dim, kvd = (size_t)c->num_key_value_heads * (size_t)c->head_dim;
    size_t sizes[P_PER_LAYER] = {d, qd * d, kvd * d, kvd * d, d * qd, d, ff * d, ff * d, d * ff};
    size_t L = (size_t)c->num_hidden_layers;
    g->count = 1 + L * P_PER_LAYER + 1 + (tied(m) ? 0 : 1);
    g->p = calloc(g->count, sizeof *g->p);
    if (!g->p) return fail(err, errlen, "out of memory");
    size_t k = 0;
    snprintf(g->p[k].name, sizeof g->p[k].name, "model.embed_tokens.weight");
    g->p[k++].n = V * d;
    for (size_t l = 0; l < L; l++)
        for (int j = 0; j < P_PER_LAYER; j++) {
            snprintf(g->p[k].name, sizeof g->p[k].name, "model.layers.%zu.%s", l, LAYER_NAMES[j]);
            g->p[k++].n = sizes[j];
        }
    snprintf(g->p[k].name, sizeof g->p[k].name, "model.norm.weight");
    g->p[k++].n = d;
    if (!tied(m)) {
        snprintf(g->p[k].name, sizeof g->p[k].name, "lm_head.weight");
        g->p[k++].n = V * d;
    }
    for (size_t i = 0; i < g->count; i++)
        if (!(g->p[i].g = calloc(g->p[i].n, sizeof(float)))) {
            model_grads_free(g);
            return fail(err, errlen, "out of memory for the gradients");
        }
    return 0;
}

void model_grads_free(model_grads *g) {
    for (size_t i = 0; g->p && i < g->count; i++) free(g->p[i].g);
    free(g->p);
    memset(g, 0, sizeof *g);
}

void model_grads_zero(model_grads *g) {
    for (size_t i = 0; i < g->count; i++) memset(g->p[i].g, 0, g->p[i].n * sizeof(float));
}

param_grad *model_grads_find(model_grads *g, const char *name) {
    for (size_t i = 0; i < g->count; i++)
        if (!strcmp(g->p[i].name, name)) return &g->p[i];
    return NULL;
}

int model_params_bind_fp32(model_grads *p, mnemo_model *m, char *err, size_t errlen) {
    if (model_grads_init(p, m, err, errlen)) return -1;
    llama_weights *w = &m->w;
    const int64_t L = m->cfg.num_hidden_layers;
    weight_ref **refs = malloc(p->count * sizeof *refs);
    if (!refs) {
        model_grads_free(p);
        return fail(err, errlen, "out of memory");
    }
    size_t k = 0;
    refs[k++] = &w->tok_embd;
    for (int64_t l = 0; l < L; l++) {
        layer_weights *W = &w->layers[l];
        weight_ref *lr[P_PER_LAYER] = {&W->attn_norm, &W->wq, &W->wk, &W->wv, &W->wo,
                                       &W->ffn_norm,  &W->w_gate, &W->w_up, &W->w_down};
        for (int j = 0; j < P_PER_LAYER; j++) refs[k++] = lr[j];
    }
    refs[k++] = &w->out_norm;
    bool is_tied = tied(m);
    if (!is_tied) refs[k++] = &w->lm_head;
    if (k != p->count) { /* model_grads_init and this list name the same parameters */
        free(refs);
        model_grads_free(p);
        return fail(err, errlen, "internal: %zu weights for %zu parameters", k, p->count);
    }
    for (size_t i = 0; i < k; i++) {
        kern_cpu_widen(p->p[i].g, refs[i]->data, refs[i]->dt, (int64_t)p->p[i].n);
        refs[i]->data = p->p[i].g;
        refs[i]->dt = KERN_F32;
    }
    if (is_tied) w->lm_head = w->tok_embd; /* one tensor, as before */
    free(refs);
    return 0;
}

typedef struct {
    float *x_in, *xn1, *rstd1, *q, *k, *v, *att, *lse, *x_mid, *xn2, *rstd2, *gate, *up, *h;
    float *lt[7]; /* LoRA: x A^T of each targeted projection [n, r] */
} layer_acts;

enum { T_Q, T_K, T_V, T_O, T_GATE, T_UP, T_DOWN };

/* y[n, out] += scale (x A^T) B^T, keeping t = x A^T. ts: scratch [n, r]. */
static int lora_fwd(const kern_backend *be, kern_ctx *kc, const lora_train *lt, int64_t l, int t_, float *y,
                    const float *x, int64_t n, int64_t out, int64_t in, float *t, float *ts) {
    int rc = be->matmul(kc, t, x, lt->a[l][t_], KERN_F32, n, lt->r, in, 0.f);
    for (int64_t i = 0; rc == KERN_OK && i < n * lt->r; i++) ts[i] = lt->scale * t[i];
    return rc != KERN_OK ? rc : be->matmul(kc, y, ts, lt->b[l][t_], KERN_F32, n, out, lt->r, 1.f);
}

/* The adapter's part of the backward of y = x W^T + scale (x A^T) B^T given dy: dA, dB accumulate, dx += its share.
 * u, us: scratch [n, r]. */
static int lora_bwd(const kern_backend *be, kern_ctx *kc, lora_train *lt, int64_t l, int t_, const float *dy,
                    const float *x, const float *t, float *dx, int64_t n, int64_t out, int64_t in, float *u, float *us) {
    const int64_t r = lt->r;
    int rc = be->matmul_backward_x(kc, u, dy, lt->b[l][t_], KERN_F32, n, out, r, 0.f); /* dy B [n, r] */
    for (int64_t i = 0; rc == KERN_OK && i < n * r; i++) u[i] *= lt->scale, us[i] = lt->scale * t[i];
    if (rc == KERN_OK) rc = be->matmul_backward_w(kc, lt->ga[l][t_], u, x, n, r, in);  /* dA += (s dy B)^T x */
    if (rc == KERN_OK) rc = be->matmul_backward_w(kc, lt->gb[l][t_], dy, us, n, out, r); /* dB += dy^T (s t) */
    return rc != KERN_OK ? rc : be->matmul_backward_x(kc, dx, u, lt->a[l][t_], KERN_F32, n, r, in, 1.f);
}

#define TRY(call)                                                                                               \
    do {                                                                                                        \
        int rc_ = (call);                                                                                       \
        if (rc_ != KERN_OK) {                                                                                   \
            fail(err, errlen, "kernel error %d in %s", rc_, #call);                                             \
            goto out;                                                                                           \
        }                                                                                                       \
    } while (0)

int model_loss_and_grads(const mnemo_model *m, const int32_t *tokens, const uint8_t *mask, int32_t B, int32_t T,
                         float dloss, model_grads *g, float *loss, char *err, size_t errlen) {
    return model_loss_and_grads_ex(m, tokens, mask, B, T, dloss, g, TRAIN_ALL, NULL, loss, err, errlen);
}

int model_loss_and_grads_ex(const mnemo_model *m, const int32_t *tokens, const uint8_t *mask, int32_t B, int32_t T,
                            float dloss, model_grads *g, unsigned train, lora_train *lt, float *loss, char *err,
                            size_t errlen) {
    const model_config *c = &m->cfg;
    const kern_backend *be = m->be;
    const llama_weights *w = &m->w;
    const int64_t d = c->hidden_size, ff = c->intermediate_size, hd = c->head_dim, hq = c->num_attention_heads;
    const int64_t hkv = c->num_key_value_heads, V = c->vocab_size, qd = hq * hd, kvd = hkv * hd;
    const int64_t n = (int64_t)B * T, L = c->num_hidden_layers;
    const float eps = c->rms_norm_eps, scale = 1.0f / sqrtf((float)hd);
    if (B < 1 || T < 1 || T > c->max_position_embeddings)
        return fail(err, errlen, "a batch of %d x %d tokens (T at most %d)", B, T, c->max_position_embeddings);
    if (!be->host_memory || (train && (!g || g->count != 1 + (size_t)L * P_PER_LAYER + 1 + (tied(m) ? 0 : 1))))
        return fail(err, errlen, "gradients not made for this model (model_grads_init) or not on the CPU");
    if (lt && (lt->r < 1 || L > LORA_TRAIN_MAX_LAYERS))
        return fail(err, errlen, "an adapter of rank %d on %lld layers", lt ? lt->r : 0, (long long)L);
    int rc = -1;
    kern_ctx *kc = be->ctx_new(m->n_threads);
    layer_acts *a = calloc((size_t)L, sizeof *a);
    int32_t *ids = malloc((size_t)n * sizeof *ids), *tgt = malloc((size_t)n * sizeof *tgt), *pos = malloc((size_t)n * sizeof *pos);
    float *x_last = malloc((size_t)(n * d) * sizeof(float)), *xnf = malloc((size_t)(n * d) * sizeof(float));
    float *rstdf = malloc((size_t)n * sizeof(float)), *logits = malloc((size_t)(n * V) * sizeof(float));
    float *dres = malloc((size_t)(n * d) * sizeof(float)), *dxn = malloc((size_t)(n * d) * sizeof(float));
    float *dff1 = malloc((size_t)(n * ff) * sizeof(float)), *dff2 = malloc((size_t)(n * ff) * sizeof(float));
    float *dq = malloc((size_t)(n * qd) * sizeof(float)), *dk = malloc((size_t)(n * kvd) * sizeof(float));
    float *dv = malloc((size_t)(n * kvd) * sizeof(float)), *datt = malloc((size_t)(n * qd) * sizeof(float));
    float *u = lt ? malloc((size_t)(n * lt->r) * sizeof(float)) : NULL, *us = lt ? malloc((size_t)(n * lt->r) * sizeof(float)) : NULL;
    bool ok = kc && a && ids && tgt && pos && x_last && xnf && rstdf && logits && dres && dxn && dff1 && dff2 && dq &&
              dk && dv && datt && (!lt || (u && us));
    for (int64_t l = 0; ok && l < L; l++) {
        layer_acts *A = &a[l];
        float **bufs[] = {&A->x_in, &A->xn1, &A->x_mid, &A->xn2};
        for (int i = 0; i < 4; i++) ok &= (*bufs[i] = malloc((size_t)(n * d) * sizeof(float))) != NULL;
        ok &= (A->rstd1 = malloc((size_t)n * sizeof(float))) && (A->rstd2 = malloc((size_t)n * sizeof(float))) &&
              (A->q = malloc((size_t)(n * qd) * sizeof(float))) && (A->att = malloc((size_t)(n * qd) * sizeof(float))) &&
              (A->k = malloc((size_t)(n * kvd) * sizeof(float))) && (A->v = malloc((size_t)(n * kvd) * sizeof(float))) &&
              (A->lse = malloc((size_t)(n * hq) * sizeof(float))) && (A->gate = malloc((size_t)(n * ff) * sizeof(float))) &&
              (A->up = malloc((size_t)(n * ff) * sizeof(float))) && (A->h = malloc((size_t)(n * ff) * sizeof(float)));
        for (int t = 0; lt && t < 7; t++)
            if (lt->a[l][t]) ok &= (A->lt[t] = malloc((size_t)(n * lt->r) * sizeof(float))) != NULL;
    }
    if (!ok) {
        fail(err, errlen, "out of memory for the activations of %d x %d tokens", B, T);
        goto out;
    }
    for (int32_t b = 0; b < B; b++)
        for (int32_t t = 0; t < T; t++) {
            int64_t i = (int64_t)b * T + t;
            ids[i] = tokens[(size_t)b * (T + 1) + t];
            tgt[i] = !mask || mask[i] ? tokens[(size_t)b * (T + 1) + t + 1] : -1;
            pos[i] = t;
        }
    /* ---- forward */
    TRY(be->embed(kc, a[0].x_in, w->tok_embd.data, w->tok_embd.dt, V, d, ids, n));
    for (int64_t l = 0; l < L; l++) {
        const layer_weights *W = &w->layers[l];
        layer_acts *A = &a[l];
        TRY(be->rmsnorm(kc, A->xn1, A->rstd1, A->x_in, W->attn_norm.data, W->attn_norm.dt, n, d, eps));
        TRY(be->matmul(kc, A->q, A->xn1, W->wq.data, W->wq.dt, n, qd, d, 0.f));
        TRY(be->matmul(kc, A->k, A->xn1, W->wk.data, W->wk.dt, n, kvd, d, 0.f));
        TRY(be->matmul(kc, A->v, A->xn1, W->wv.data, W->wv.dt, n, kvd, d, 0.f));
        if (lt && lt->a[l][T_Q]) TRY(lora_fwd(be, kc, lt, l, T_Q, A->q, A->xn1, n, qd, d, A->lt[T_Q], us));
        if (lt && lt->a[l][T_K]) TRY(lora_fwd(be, kc, lt, l, T_K, A->k, A->xn1, n, kvd, d, A->lt[T_K], us));
        if (lt && lt->a[l][T_V]) TRY(lora_fwd(be, kc, lt, l, T_V, A->v, A->xn1, n, kvd, d, A->lt[T_V], us));
        TRY(be->rope(kc, A->q, n, hq, hd, pos, c->rope_theta, c->rope_scaling_factor));
        TRY(be->rope(kc, A->k, n, hkv, hd, pos, c->rope_theta, c->rope_scaling_factor));
        for (int32_t b = 0; b < B; b++) {
            int64_t r = (int64_t)b * T;
            TRY(be->attention(kc, A->att + r * qd, A->lse + r * hq, A->q + r * qd, A->k + r * kvd, A->v + r * kvd, T,
                              T, 0, hq, hkv, hd, scale));
        }
        memcpy(A->x_mid, A->x_in, (size_t)(n * d) * sizeof(float));
        TRY(be->matmul(kc, A->x_mid, A->att, W->wo.data, W->wo.dt, n, d, qd, 1.f));
        if (lt && lt->a[l][T_O]) TRY(lora_fwd(be, kc, lt, l, T_O, A->x_mid, A->att, n, d, qd, A->lt[T_O], us));
        TRY(be->rmsnorm(kc, A->xn2, A->rstd2, A->x_mid, W->ffn_norm.data, W->ffn_norm.dt, n, d, eps));
        TRY(be->matmul(kc, A->gate, A->xn2, W->w_gate.data, W->w_gate.dt, n, ff, d, 0.f));
        TRY(be->matmul(kc, A->up, A->xn2, W->w_up.data, W->w_up.dt, n, ff, d, 0.f));
        if (lt && lt->a[l][T_GATE]) TRY(lora_fwd(be, kc, lt, l, T_GATE, A->gate, A->xn2, n, ff, d, A->lt[T_GATE], us));
        if (lt && lt->a[l][T_UP]) TRY(lora_fwd(be, kc, lt, l, T_UP, A->up, A->xn2, n, ff, d, A->lt[T_UP], us));
        TRY(be->swiglu(kc, A->h, A->gate, A->up, n * ff));
        float *x_out = l + 1 < L ? a[l + 1].x_in : x_last;
        memcpy(x_out, A->x_mid, (size_t)(n * d) * sizeof(float));
        TRY(be->matmul(kc, x_out, A->h, W->w_down.data, W->w_down.dt, n, d, ff, 1.f));
        if (lt && lt->a[l][T_DOWN]) TRY(lora_fwd(be, kc, lt, l, T_DOWN, x_out, A->h, n, d, ff, A->lt[T_DOWN], us));
    }
    TRY(be->rmsnorm(kc, xnf, rstdf, x_last, w->out_norm.data, w->out_norm.dt, n, d, eps));
    TRY(be->matmul(kc, logits, xnf, w->lm_head.data, w->lm_head.dt, n, V, d, 0.f));
    TRY(be->cross_entropy(kc, loss, logits, logits, tgt, n, V, dloss)); /* logits become dlogits */
    /* ---- backward */
    param_grad *P = g ? g->p : NULL;
    const bool t_lin = train & TRAIN_LINEAR, t_norm = train & TRAIN_NORMS;
    float *g_embd = train & TRAIN_EMBED ? P[0].g : NULL, *g_norm = t_norm ? P[1 + L * P_PER_LAYER].g : NULL;
    float *g_head = tied(m) ? ((train & (TRAIN_EMBED | TRAIN_HEAD)) ? P[0].g : NULL)
                            : (train & TRAIN_HEAD ? P[2 + L * P_PER_LAYER].g : NULL);
    if (g_head) TRY(be->matmul_backward_w(kc, g_head, logits, xnf, n, V, d));
    TRY(be->matmul_backward_x(kc, dxn, logits, w->lm_head.data, w->lm_head.dt, n, V, d, 0.f));
    TRY(be->rmsnorm_backward(kc, dres, g_norm, dxn, x_last, w->out_norm.data, w->out_norm.dt, rstdf, n, d, 0.f));
    for (int64_t l = L - 1; l >= 0; l--) {
        const layer_weights *W = &w->layers[l];
        layer_acts *A = &a[l];
        param_grad *G = P ? &P[1 + l * P_PER_LAYER] : NULL;
        /* MLP: x_out = x_mid + (silu(gate) * up) . Wd^T, gate/up = xn2 . Wg^T / Wu^T, xn2 = rmsnorm(x_mid) */
        if (t_lin) TRY(be->matmul_backward_w(kc, G[P_DOWN].g, dres, A->h, n, d, ff));
        TRY(be->matmul_backward_x(kc, dff1, dres, W->w_down.data, W->w_down.dt, n, d, ff, 0.f)); /* dh */
        if (lt && lt->a[l][T_DOWN]) TRY(lora_bwd(be, kc, lt, l, T_DOWN, dres, A->h, A->lt[T_DOWN], dff1, n, d, ff, u, us));
        TRY(be->swiglu_backward(kc, dff1, dff2, dff1, A->gate, A->up, n * ff));                  /* dgate, dup */
        if (t_lin) TRY(be->matmul_backward_w(kc, G[P_GATE].g, dff1, A->xn2, n, ff, d));
        if (t_lin) TRY(be->matmul_backward_w(kc, G[P_UP].g, dff2, A->xn2, n, ff, d));
        TRY(be->matmul_backward_x(kc, dxn, dff1, W->w_gate.data, W->w_gate.dt, n, ff, d, 0.f));
        TRY(be->matmul_backward_x(kc, dxn, dff2, W->w_up.data, W->w_up.dt, n, ff, d, 1.f));
        if (lt && lt->a[l][T_GATE]) TRY(lora_bwd(be, kc, lt, l, T_GATE, dff1, A->xn2, A->lt[T_GATE], dxn, n, ff, d, u, us));
        if (lt && lt->a[l][T_UP]) TRY(lora_bwd(be, kc, lt, l, T_UP, dff2, A->xn2, A->lt[T_UP], dxn, n, ff, d, u, us));
        TRY(be->rmsnorm_backward(kc, dres, t_norm ? G[P_NORM2].g : NULL, dxn, A->x_mid, W->ffn_norm.data,
                                 W->ffn_norm.dt, A->rstd2, n, d, 1.f));
        /* attention: x_mid = x_in + att . Wo^T */
        if (t_lin) TRY(be->matmul_backward_w(kc, G[P_O].g, dres, A->att, n, d, qd));
        TRY(be->matmul_backward_x(kc, datt, dres, W->wo.data, W->wo.dt, n, d, qd, 0.f));
        if (lt && lt->a[l][T_O]) TRY(lora_bwd(be, kc, lt, l, T_O, dres, A->att, A->lt[T_O], datt, n, d, qd, u, us));
        memset(dk, 0, (size_t)(n * kvd) * sizeof(float)); /* attention_backward accumulates dk, dv */
        memset(dv, 0, (size_t)(n * kvd) * sizeof(float));
        for (int32_t b = 0; b < B; b++) {
            int64_t r = (int64_t)b * T;
            TRY(be->attention_backward(kc, dq + r * qd, dk + r * kvd, dv + r * kvd, datt + r * qd, A->q + r * qd,
                                       A->k + r * kvd, A->v + r * kvd, A->att + r * qd, A->lse + r * hq, T, T, 0, hq,
                                       hkv, hd, scale));
        }
        TRY(be->rope_backward(kc, dq, n, hq, hd, pos, c->rope_theta, c->rope_scaling_factor));
        TRY(be->rope_backward(kc, dk, n, hkv, hd, pos, c->rope_theta, c->rope_scaling_factor));
        if (t_lin) TRY(be->matmul_backward_w(kc, G[P_Q].g, dq, A->xn1, n, qd, d));
        if (t_lin) TRY(be->matmul_backward_w(kc, G[P_K].g, dk, A->xn1, n, kvd, d));
        if (t_lin) TRY(be->matmul_backward_w(kc, G[P_V].g, dv, A->xn1, n, kvd, d));
        TRY(be->matmul_backward_x(kc, dxn, dq, W->wq.data, W->wq.dt, n, qd, d, 0.f));
        TRY(be->matmul_backward_x(kc, dxn, dk, W->wk.data, W->wk.dt, n, kvd, d, 1.f));
        TRY(be->matmul_backward_x(kc, dxn, dv, W->wv.data, W->wv.dt, n, kvd, d, 1.f));
        if (lt && lt->a[l][T_Q]) TRY(lora_bwd(be, kc, lt, l, T_Q, dq, A->xn1, A->lt[T_Q], dxn, n, qd, d, u, us));
        if (lt && lt->a[l][T_K]) TRY(lora_bwd(be, kc, lt, l, T_K, dk, A->xn1, A->lt[T_K], dxn, n, kvd, d, u, us));
        if (lt && lt->a[l][T_V]) TRY(lora_bwd(be, kc, lt, l, T_V, dv, A->xn1, A->lt[T_V], dxn, n, kvd, d, u, us));
        TRY(be->rmsnorm_backward(kc, dres, t_norm ? G[P_NORM1].g : NULL, dxn, A->x_in, W->attn_norm.data,
                                 W->attn_norm.dt, A->rstd1, n, d, 1.f));
    }
    if (g_embd) TRY(be->embed_backward(kc, g_embd, dres, V, d, ids, n));
    rc = 0;
out:
    for (int64_t l = 0; a && l < L; l++) {
        layer_acts *A = &a[l];
        float *bufs[] = {A->x_in, A->xn1, A->rstd1, A->q, A->k, A->v, A->att, A->lse, A->x_mid, A->xn2, A->rstd2,
                         A->gate, A->up, A->h};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
        for (int t = 0; t < 7; t++) free(A->lt[t]);
    }
    free(a);
    free(ids), free(tgt), free(pos), free(x_last), free(xnf), free(rstdf), free(logits), free(dres), free(dxn);
    free(dff1), free(dff2), free(dq), free(dk), free(dv), free(datt), free(u), free(us);
    if (kc) be->ctx_free(kc);
    return rc;
}
