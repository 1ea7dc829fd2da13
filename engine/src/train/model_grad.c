/*
 * model_grad.c — see model_grad.h. The forward mirrors llama_forward.c row for row (the same ops in the same
 * order, so the loss is the inference path's), keeping one activations struct per layer.
 */
#include "model_grad.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "s2_attn.h"
#include "fot_attention.h"
#include "kernels_cpu_paths.h"
#include "train_mem.h"
#include "layer_params.h"
#include "errbuf.h"

static bool tied(const mnemo_model *m) { return m->w.lm_head.data == m->w.tok_embd.data; }

/* Whether parameter i (model_grads_init's order) belongs to the groups in train. */
static bool in_groups(const mnemo_model *m, size_t i, unsigned train) {
    const size_t L = (size_t)m->cfg.num_hidden_layers, PL = layer_param_count(&m->cfg);
    if (i == 0) return (train & TRAIN_EMBED) || (tied(m) && (train & TRAIN_HEAD));
    if (i == 1 + L * PL) return train & TRAIN_NORMS;
    if (i == 2 + L * PL) return train & TRAIN_HEAD;
    size_t j = (i - 1) % PL;
    return layer_param_is_norm(j) ? (train & TRAIN_NORMS) : (train & TRAIN_LINEAR);
}

int model_grads_init(model_grads *g, const mnemo_model *m, char *err, size_t errlen) {
    return model_grads_init_for(g, m, TRAIN_ALL, err, errlen);
}

int model_grads_init_for(model_grads *g, const mnemo_model *m, unsigned train, char *err, size_t errlen) {
    memset(g, 0, sizeof *g);
    const model_config *c = &m->cfg;
    const size_t d = (size_t)c->hidden_size, V = (size_t)c->vocab_size;
    const size_t PL = layer_param_count(c);
    size_t L = (size_t)c->num_hidden_layers;
    g->count = 1 + L * PL + 1 + (tied(m) ? 0 : 1);
    g->p = calloc(g->count, sizeof *g->p);
    if (!g->p) return errbuf_fail(err, errlen, "out of memory");
    size_t k = 0;
    snprintf(g->p[k].name, sizeof g->p[k].name, "model.embed_tokens.weight");
    g->p[k++].n = V * d;
    for (size_t l = 0; l < L; l++)
        for (size_t j = 0; j < PL; j++) {
            int64_t sh[2];
            layer_param_shape(c, j, sh);
            snprintf(g->p[k].name, sizeof g->p[k].name, "model.layers.%zu.%s", l, LAYER_PARAM_NAMES[j]);
            g->p[k++].n = (size_t)sh[0] * (size_t)(sh[1] ? sh[1] : 1);
        }
    snprintf(g->p[k].name, sizeof g->p[k].name, "model.norm.weight");
    g->p[k++].n = d;
    if (!tied(m)) {
        snprintf(g->p[k].name, sizeof g->p[k].name, "lm_head.weight");
        g->p[k++].n = V * d;
    }
    g->be = train_mem_backend(m->be);
    for (size_t i = 0; i < g->count; i++)
        if (in_groups(m, i, train) && !(g->p[i].g = train_mem_zeros(g->be, g->p[i].n))) {
            model_grads_free(g);
            return errbuf_fail(err, errlen, "out of memory for the gradients");
        }
    return 0;
}

void model_grads_free(model_grads *g) {
    for (size_t i = 0; g->p && i < g->count; i++) train_mem_free(g->be, g->p[i].g);
    free(g->p);
    memset(g, 0, sizeof *g);
}

void model_grads_zero(model_grads *g) {
    for (size_t i = 0; i < g->count; i++)
        if (g->p[i].g && !g->be) memset(g->p[i].g, 0, g->p[i].n * sizeof(float));
        else if (g->p[i].g) g->be->mem_set(NULL, g->p[i].g, 0, g->p[i].n * sizeof(float));
}

param_grad *model_grads_find(model_grads *g, const char *name) {
    for (size_t i = 0; i < g->count; i++)
        if (!strcmp(g->p[i].name, name)) return &g->p[i];
    return NULL;
}

int model_params_bind_fp32(model_grads *p, mnemo_model *m, char *err, size_t errlen) {
    return model_params_bind_fp32_for(p, m, TRAIN_ALL, err, errlen);
}

/* dst (n fp32, device) = src (n in dt, device) widened: through the host, once per run, with the CPU's widening. */
static int widen_on_device(const kern_backend *be, float *dst, const void *src, kern_dtype dt, size_t n) {
    size_t bytes = kern_dtype_bytes(dt, (int64_t)n);
    void *raw = malloc(bytes ? bytes : 1);
    float *f = malloc(n * sizeof *f);
    int rc = raw && f && bytes ? 0 : -1;
    if (rc == 0 && be->mem_copy(NULL, raw, src, bytes, KERN_D2H) != KERN_OK) rc = -1;
    if (rc == 0) kern_cpu_widen(f, raw, dt, (int64_t)n);
    if (rc == 0 && be->mem_copy(NULL, dst, f, n * sizeof *f, KERN_H2D) != KERN_OK) rc = -1;
    free(raw), free(f);
    return rc;
}

int model_params_bind_fp32_for(model_grads *p, mnemo_model *m, unsigned train, char *err, size_t errlen) {
    if (model_grads_init_for(p, m, train, err, errlen)) return -1;
    llama_weights *w = &m->w;
    const int64_t L = m->cfg.num_hidden_layers;
    weight_ref **refs = malloc(p->count * sizeof *refs);
    if (!refs) {
        model_grads_free(p);
        return errbuf_fail(err, errlen, "out of memory");
    }
    size_t k = 0;
    refs[k++] = &w->tok_embd;
    for (int64_t l = 0; l < L; l++) {
        layer_weights *W = &w->layers[l];
        weight_ref *lr[P_MAX_LAYER] = {&W->attn_norm, &W->wq,     &W->wk,   &W->wv,     &W->wo,    &W->ffn_norm,
                                       &W->w_gate,    &W->w_up,   &W->w_down, &W->q_norm, &W->k_norm};
        for (size_t j = 0; j < layer_param_count(&m->cfg); j++) refs[k++] = lr[j];
    }
    refs[k++] = &w->out_norm;
    bool is_tied = tied(m);
    if (!is_tied) refs[k++] = &w->lm_head;
    if (k != p->count) { /* model_grads_init and this list name the same parameters */
        free(refs);
        model_grads_free(p);
        return errbuf_fail(err, errlen, "internal: %zu weights for %zu parameters", k, p->count);
    }
    int rc = 0;
    for (size_t i = 0; i < k && rc == 0; i++) {
        if (!p->p[i].g) continue; /* not trained: stays as loaded */
        rc = p->be ? widen_on_device(p->be, p->p[i].g, refs[i]->data, refs[i]->dt, p->p[i].n)
                   : (kern_cpu_widen(p->p[i].g, refs[i]->data, refs[i]->dt, (int64_t)p->p[i].n), 0);
        refs[i]->data = p->p[i].g;
        refs[i]->dt = KERN_F32;
    }
    if (is_tied) w->lm_head = w->tok_embd; /* one tensor, as before */
    free(refs);
    bool all = rc == 0;
    for (size_t i = 0; i < k; i++) all = all && p->p[i].g;
    if (all && m->dev_weights) { /* every weight now reads its fp32 copy: the uploaded ones are dead weight */
        m->be->mem_free(m->dev_weights);
        m->dev_weights = NULL;
    }
    if (rc) { /* the model's weights may point at p's buffers now: leave them bound; the caller frees both */
        return errbuf_fail(err, errlen, "out of memory (or a %s copy failed) making fp32 copies of the weights",
                           m->be->name);
    }
    return 0;
}

enum { T_Q, T_K, T_V, T_O, T_GATE, T_UP, T_DOWN };

/* y[n, out] += scale (x A^T) B^T, keeping t = x A^T. ts: scratch [n, r]. */
static int lora_fwd(const kern_backend *be, kern_ctx *kc, const lora_train *lt, int64_t l, int t_, float *y,
                    const float *x, int64_t n, int64_t out, int64_t in, float *t, float *ts) {
    int rc = be->matmul(kc, t, x, lt->a[l][t_], KERN_F32, n, lt->r, in, 0.f);
    if (rc == KERN_OK) rc = be->axpby(kc, ts, t, n * lt->r, lt->scale, 0.f); /* ts = scale t */
    return rc != KERN_OK ? rc : be->matmul(kc, y, ts, lt->b[l][t_], KERN_F32, n, out, lt->r, 1.f);
}

/* The adapter's part of the backward of y = x W^T + scale (x A^T) B^T given dy: dA, dB accumulate, dx += its share.
 * u, us: scratch [n, r]. */
static int lora_bwd(const kern_backend *be, kern_ctx *kc, lora_train *lt, int64_t l, int t_, const float *dy,
                    const float *x, const float *t, float *dx, int64_t n, int64_t out, int64_t in, float *u, float *us) {
    const int64_t r = lt->r;
    int rc = be->matmul_backward_x(kc, u, dy, lt->b[l][t_], KERN_F32, n, out, r, 0.f); /* dy B [n, r] */
    if (rc == KERN_OK) rc = be->axpby(kc, u, u, n * r, lt->scale, 0.f);   /* u = scale dy B */
    if (rc == KERN_OK) rc = be->axpby(kc, us, t, n * r, lt->scale, 0.f);  /* us = scale t */
    if (rc == KERN_OK) rc = be->matmul_backward_w(kc, lt->ga[l][t_], u, x, n, r, in);  /* dA += (s dy B)^T x */
    if (rc == KERN_OK) rc = be->matmul_backward_w(kc, lt->gb[l][t_], dy, us, n, out, r); /* dB += dy^T (s t) */
    return rc != KERN_OK ? rc : be->matmul_backward_x(kc, dx, u, lt->a[l][t_], KERN_F32, n, r, in, 1.f);
}

/* What the backward of one layer needs, per row (n = B*T rows): shapes in floats. */
typedef struct {
    float *x_in;                 /* [n, d] the layer's input (the residual stream) */
    float *xn1, *rstd1;          /* [n, d], [n] attention norm output and its 1/rms */
    float *q, *k, *v;            /* [n, qd] q after RoPE, [n, kvd] k after RoPE, [n, kvd] v */
    float *q_pre, *k_pre;        /* qk_norm: [n, qd], [n, kvd] the projections before the head norms (else NULL) */
    float *rstd_q, *rstd_k;      /* qk_norm: [n, hq], [n, hkv] their 1/rms per head */
    float *att, *lse;            /* [n, qd] attention output, [n, hq] its log-sum-exp */
    float *x_mid;                /* [n, d] residual after attention */
    float *xn2, *rstd2;          /* [n, d], [n] MLP norm output and its 1/rms */
    float *gate, *up, *h;        /* [n, ff] gate and up projections, silu(gate) * up */
    float *lt[7];                /* LoRA: x A^T of each target [n, r] (NULL without an adapter) */
} layer_acts;

struct model_train_ws {
    int32_t B, T, r;
    bool recompute;
    layer_acts *a;       /* [L]: every field kept, or (recompute) x_in only, the rest in `one` */
    layer_acts one;      /* recompute: the activations of the layer being worked on */
    const kern_backend *be;
    kern_ctx *kc;        /* device backends: one context for every step (a CUDA stream + cuBLAS handle) */
    int32_t *ids, *tgt, *pos;        /* [n] each, in the backend's memory (one allocation: idx) */
    int32_t *h_ids, *h_tgt, *h_pos;  /* [n] each, host staging filled per step (one allocation: h_idx) */
    int32_t *idx, *h_idx;
    float *loss_dev;     /* device backends: where cross_entropy writes the loss (in block) */
    float *x_last, *xnf, *rstdf, *logits, *dres, *dxn, *dff1, *dff2, *dq, *dk, *dv, *datt, *u, *us, *x_spare;
    float *block;        /* every float buffer above points into this one allocation */
    size_t floats;
    s2_attn *s2;         /* S2-Attn (LongLoRA) instead of full causal attention; NULL: full */
    int32_t *pos_in;     /* [B*T] positions given (sparse memory training); NULL: 0..T-1 in every row */
    fot_ws *fot;         /* FoT cross-batch (not owned): memory layers attend to other rows too; NULL: none */
};

int model_train_ws_set_fot(model_train_ws *w, fot_ws *f, char *err, size_t errlen) {
    if (f && fot_ws_rows(f) != w->B)
        return errbuf_fail(err, errlen, "FoT buffers for %d rows, workspace for %d", fot_ws_rows(f), w->B);
    if (f && fot_ws_backend(f) != train_mem_backend(w->be))
        return errbuf_fail(err, errlen, "FoT buffers in %s memory for a workspace on %s (fot_ws_new_on)",
                           fot_ws_backend(f) ? fot_ws_backend(f)->name : "host", w->be->name);
    if (f && (w->s2 || w->pos_in)) /* FoT rows are whole contexts at 0..T-1 with full local attention */
        return errbuf_fail(err, errlen, "FoT cross-batch training does not combine with %s",
                           w->s2 ? "S2-Attn" : "given positions (sparse memory training)");
    w->fot = f;
    return 0;
}

/* LongLLaMA memory layers with mem_positionals false apply no RoPE at all (spec §1). */
static bool rotates(const model_config *c, int64_t l) {
    if (c->mem_positionals) return true;
    for (int32_t i = 0; i < c->n_mem_layers; i++)
        if (c->mem_layers[i] == l) return false;
    return true;
}

/* Two passes over the same list: the first counts floats, the second hands them out. */
typedef struct {
    float *base;
    size_t at;
} carve;
static float *take(carve *c, size_t n) {
    float *p = c->base ? c->base + c->at : NULL;
    c->at += (n + 15) & ~(size_t)15; /* 64-byte aligned pieces */
    return p;
}

static void carve_layer(carve *c, layer_acts *A, const model_config *cfg, size_t n, int32_t r, bool x_in_only,
                        bool skip_x_in) {
    const size_t d = (size_t)cfg->hidden_size, ff = (size_t)cfg->intermediate_size, hq = (size_t)cfg->num_attention_heads;
    const size_t qd = hq * (size_t)cfg->head_dim, kvd = (size_t)cfg->num_key_value_heads * (size_t)cfg->head_dim;
    if (!skip_x_in) A->x_in = take(c, n * d);
    if (x_in_only) return;
    A->xn1 = take(c, n * d), A->rstd1 = take(c, n), A->q = take(c, n * qd), A->k = take(c, n * kvd);
    A->v = take(c, n * kvd), A->att = take(c, n * qd), A->lse = take(c, n * hq), A->x_mid = take(c, n * d);
    A->xn2 = take(c, n * d), A->rstd2 = take(c, n), A->gate = take(c, n * ff), A->up = take(c, n * ff);
    A->h = take(c, n * ff);
    if (cfg->qk_norm) {
        const size_t hkv = (size_t)cfg->num_key_value_heads;
        A->q_pre = take(c, n * qd), A->k_pre = take(c, n * kvd), A->rstd_q = take(c, n * hq), A->rstd_k = take(c, n * hkv);
    }
    for (int t = 0; t < 7; t++) A->lt[t] = r ? take(c, n * (size_t)r) : NULL;
}

static void carve_all(carve *c, model_train_ws *w, const model_config *cfg) {
    const size_t n = (size_t)w->B * (size_t)w->T, d = (size_t)cfg->hidden_size, ff = (size_t)cfg->intermediate_size;
    const size_t V = (size_t)cfg->vocab_size, qd = (size_t)cfg->num_attention_heads * (size_t)cfg->head_dim;
    const size_t kvd = (size_t)cfg->num_key_value_heads * (size_t)cfg->head_dim;
    for (int32_t l = 0; l < cfg->num_hidden_layers; l++) carve_layer(c, &w->a[l], cfg, n, w->r, w->recompute, false);
    if (w->recompute) carve_layer(c, &w->one, cfg, n, w->r, false, true);
    w->x_last = take(c, n * d), w->xnf = take(c, n * d), w->rstdf = take(c, n), w->logits = take(c, n * V);
    w->dres = take(c, n * d), w->dxn = take(c, n * d), w->dff1 = take(c, n * ff), w->dff2 = take(c, n * ff);
    w->dq = take(c, n * qd), w->dk = take(c, n * kvd), w->dv = take(c, n * kvd), w->datt = take(c, n * qd);
    w->u = w->r ? take(c, n * (size_t)w->r) : NULL, w->us = take(c, n * (size_t)(w->r ? w->r : 1));
    w->x_spare = w->recompute ? take(c, n * d) : NULL;
    w->loss_dev = w->be->host_memory ? NULL : take(c, 1);
}

model_train_ws *model_train_ws_new(const mnemo_model *m, int32_t B, int32_t T, int32_t lora_r, bool recompute,
                                   char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    if (B < 1 || T < 1 || T > c->max_position_embeddings || lora_r < 0) {
        errbuf_fail(err, errlen, "a batch of %d x %d tokens (T at most %d)", B, T, c->max_position_embeddings);
        return NULL;
    }
    model_train_ws *w = calloc(1, sizeof *w);
    const kern_backend *be = m->be;
    size_t n = (size_t)B * (size_t)T;
    if (w) *w = (model_train_ws){.B = B, .T = T, .r = lora_r, .recompute = recompute, .be = be};
    if (!w || !(w->a = calloc((size_t)c->num_hidden_layers, sizeof *w->a)) ||
        !(w->h_idx = malloc(3 * n * sizeof *w->h_idx)) ||
        !(w->idx = be->host_memory ? w->h_idx : be->mem_alloc(3 * n * sizeof *w->idx)) ||
        (!be->host_memory && !(w->kc = be->ctx_new(m->n_threads)))) {
        errbuf_fail(err, errlen, "out of %s memory", w && w->h_idx && !be->host_memory ? be->name : "host");
        model_train_ws_free(w);
        return NULL;
    }
    w->h_ids = w->h_idx, w->h_tgt = w->h_idx + n, w->h_pos = w->h_idx + 2 * n;
    w->ids = w->idx, w->tgt = w->idx + n, w->pos = w->idx + 2 * n;
    carve count = {0};
    carve_all(&count, w, c);
    w->floats = count.at;
    if (!(w->block = be->host_memory ? aligned_alloc(64, w->floats * sizeof(float))
                                     : be->mem_alloc(w->floats * sizeof(float)))) {
        errbuf_fail(err, errlen, "out of memory for the activations of %d x %d tokens (%.1f GiB%s)", B, T,
                    (double)w->floats * 4 / (1 << 30), recompute ? "" : "; --recompute keeps one layer's");
        model_train_ws_free(w);
        return NULL;
    }
    carve fill = {.base = w->block};
    carve_all(&fill, w, c);
    return w;
}

void model_train_ws_free(model_train_ws *w) {
    if (!w) return;
    if (w->be && !w->be->host_memory) {
        if (w->kc) w->be->ctx_free(w->kc);
        w->be->mem_free(w->idx), w->be->mem_free(w->block);
    } else {
        free(w->block);
    }
    free(w->a), free(w->h_idx), free(w->pos_in);
    s2_attn_free(w->s2);
    free(w);
}

size_t model_train_ws_bytes(const model_train_ws *w) {
    return w ? w->floats * sizeof(float) + s2_attn_bytes(w->s2) : 0;
}

int32_t model_train_ws_rows(const model_train_ws *w) { return w->B; }
int32_t model_train_ws_len(const model_train_ws *w) { return w->T; }

int model_train_ws_set_s2(model_train_ws *w, const mnemo_model *m, int32_t group, char *err, size_t errlen) {
    if (group > 0 && w->fot) return errbuf_fail(err, errlen, "S2-Attn does not combine with FoT cross-batch training");
    s2_attn_free(w->s2);
    w->s2 = NULL;
    const model_config *c = &m->cfg;
    if (group > 0 && !(w->s2 = s2_attn_new(w->be, w->T, group, c->num_attention_heads, c->num_key_value_heads,
                                           c->head_dim, err, errlen)))
        return -1;
    return 0;
}

int model_train_ws_set_positions(model_train_ws *w, const int32_t *pos, char *err, size_t errlen) {
    const size_t n = (size_t)w->B * (size_t)w->T;
    if (!pos) {
        free(w->pos_in);
        w->pos_in = NULL;
        return 0;
    }
    if (w->fot) return errbuf_fail(err, errlen, "given positions do not combine with FoT cross-batch training");
    for (size_t i = 0; i < n; i++)
        if (pos[i] < 0) return errbuf_fail(err, errlen, "position %d of row %zu is negative", pos[i], i);
    if (!w->pos_in && !(w->pos_in = malloc(n * sizeof *w->pos_in))) return errbuf_fail(err, errlen, "out of memory");
    memcpy(w->pos_in, pos, n * sizeof *pos);
    return 0;
}

#define TRY(call)                                                                                               \
    do {                                                                                                        \
        int rc_ = (call);                                                                                       \
        if (rc_ != KERN_OK) return errbuf_fail(err, errlen, "kernel error %d in %s", rc_, #call);                      \
    } while (0)

#define ADAPTED(t) (lt && lt->a[l][t])

/* One layer's forward from A->x_in to x_out, filling A. */
static int layer_forward(const mnemo_model *m, kern_ctx *kc, model_train_ws *w, int64_t l, layer_acts *A,
                         float *x_out, const lora_train *lt, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    const kern_backend *be = m->be;
    const layer_weights *W = &m->w.layers[l];
    const int64_t d = c->hidden_size, ff = c->intermediate_size, hd = c->head_dim, hq = c->num_attention_heads;
    const int64_t hkv = c->num_key_value_heads, qd = hq * hd, kvd = hkv * hd, T = w->T, n = (int64_t)w->B * T;
    const float eps = c->rms_norm_eps, scale = 1.0f / sqrtf((float)hd);
    float *qp = c->qk_norm ? A->q_pre : A->q, *kp = c->qk_norm ? A->k_pre : A->k; /* the projections */
    TRY(be->rmsnorm(kc, A->xn1, A->rstd1, A->x_in, W->attn_norm.data, W->attn_norm.dt, n, d, eps));
    TRY(be->matmul(kc, qp, A->xn1, W->wq.data, W->wq.dt, n, qd, d, 0.f));
    TRY(be->matmul(kc, kp, A->xn1, W->wk.data, W->wk.dt, n, kvd, d, 0.f));
    TRY(be->matmul(kc, A->v, A->xn1, W->wv.data, W->wv.dt, n, kvd, d, 0.f));
    if (ADAPTED(T_Q)) TRY(lora_fwd(be, kc, lt, l, T_Q, qp, A->xn1, n, qd, d, A->lt[T_Q], w->us));
    if (ADAPTED(T_K)) TRY(lora_fwd(be, kc, lt, l, T_K, kp, A->xn1, n, kvd, d, A->lt[T_K], w->us));
    if (ADAPTED(T_V)) TRY(lora_fwd(be, kc, lt, l, T_V, A->v, A->xn1, n, kvd, d, A->lt[T_V], w->us));
    if (c->qk_norm) { /* as llama_forward.c: each head normalized, before RoPE and before a memory layer's copy */
        TRY(be->rmsnorm(kc, A->q, A->rstd_q, qp, W->q_norm.data, W->q_norm.dt, n * hq, hd, eps));
        TRY(be->rmsnorm(kc, A->k, A->rstd_k, kp, W->k_norm.data, W->k_norm.dt, n * hkv, hd, eps));
    }
    const bool fot = w->fot && fot_is_mem_layer(w->fot, l), rot = rotates(c, l);
    if (fot) /* extra contexts: unrotated */
        TRY(be->mem_copy(kc, fot_k_raw(w->fot, l), A->k, (size_t)(n * kvd) * sizeof(float), KERN_D2D));
    if (rot) TRY(be->rope(kc, A->q, n, hq, hd, w->pos, c->rope_theta, c->rope_scaling_factor));
    if (rot) TRY(be->rope(kc, A->k, n, hkv, hd, w->pos, c->rope_theta, c->rope_scaling_factor));
    if (fot) TRY(fot_attention_forward(be, kc, w->fot, l, A->att, A->lse, A->q, A->k, A->v, hq, hkv, hd, scale));
    for (int32_t b = 0; !fot && b < w->B; b++) {
        int64_t r = (int64_t)b * T;
        if (w->s2)
            TRY(s2_attention(w->s2, kc, A->att + r * qd, A->lse + r * hq, A->q + r * qd, A->k + r * kvd,
                             A->v + r * kvd, scale));
        else
            TRY(be->attention(kc, A->att + r * qd, A->lse + r * hq, A->q + r * qd, A->k + r * kvd, A->v + r * kvd, T,
                              T, 0, hq, hkv, hd, scale));
    }
    TRY(be->mem_copy(kc, A->x_mid, A->x_in, (size_t)(n * d) * sizeof(float), KERN_D2D));
    TRY(be->matmul(kc, A->x_mid, A->att, W->wo.data, W->wo.dt, n, d, qd, 1.f));
    if (ADAPTED(T_O)) TRY(lora_fwd(be, kc, lt, l, T_O, A->x_mid, A->att, n, d, qd, A->lt[T_O], w->us));
    TRY(be->rmsnorm(kc, A->xn2, A->rstd2, A->x_mid, W->ffn_norm.data, W->ffn_norm.dt, n, d, eps));
    TRY(be->matmul(kc, A->gate, A->xn2, W->w_gate.data, W->w_gate.dt, n, ff, d, 0.f));
    TRY(be->matmul(kc, A->up, A->xn2, W->w_up.data, W->w_up.dt, n, ff, d, 0.f));
    if (ADAPTED(T_GATE)) TRY(lora_fwd(be, kc, lt, l, T_GATE, A->gate, A->xn2, n, ff, d, A->lt[T_GATE], w->us));
    if (ADAPTED(T_UP)) TRY(lora_fwd(be, kc, lt, l, T_UP, A->up, A->xn2, n, ff, d, A->lt[T_UP], w->us));
    TRY(be->swiglu(kc, A->h, A->gate, A->up, n * ff));
    TRY(be->mem_copy(kc, x_out, A->x_mid, (size_t)(n * d) * sizeof(float), KERN_D2D));
    TRY(be->matmul(kc, x_out, A->h, W->w_down.data, W->w_down.dt, n, d, ff, 1.f));
    if (ADAPTED(T_DOWN)) TRY(lora_fwd(be, kc, lt, l, T_DOWN, x_out, A->h, n, d, ff, A->lt[T_DOWN], w->us));
    return 0;
}

/* One layer's backward: w->dres holds d(loss)/d(x_out) and receives d(loss)/d(x_in). G: the layer's nine
 * parameter gradients (NULL when no base parameter is trained). */
static int layer_backward(const mnemo_model *m, kern_ctx *kc, model_train_ws *w, int64_t l, const layer_acts *A,
                          param_grad *G, bool t_lin, bool t_norm, lora_train *lt, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    const kern_backend *be = m->be;
    const layer_weights *W = &m->w.layers[l];
    const int64_t d = c->hidden_size, ff = c->intermediate_size, hd = c->head_dim, hq = c->num_attention_heads;
    const int64_t hkv = c->num_key_value_heads, qd = hq * hd, kvd = hkv * hd, T = w->T, n = (int64_t)w->B * T;
    const float scale = 1.0f / sqrtf((float)hd);
    float *dres = w->dres, *dxn = w->dxn, *dff1 = w->dff1, *dff2 = w->dff2, *dq = w->dq, *dk = w->dk, *dv = w->dv;
    float *datt = w->datt, *u = w->u, *us = w->us;
    /* MLP: x_out = x_mid + (silu(gate) * up) . Wd^T, gate/up = xn2 . Wg^T / Wu^T, xn2 = rmsnorm(x_mid) */
    if (t_lin) TRY(be->matmul_backward_w(kc, G[P_DOWN].g, dres, A->h, n, d, ff));
    TRY(be->matmul_backward_x(kc, dff1, dres, W->w_down.data, W->w_down.dt, n, d, ff, 0.f)); /* dh */
    if (ADAPTED(T_DOWN)) TRY(lora_bwd(be, kc, lt, l, T_DOWN, dres, A->h, A->lt[T_DOWN], dff1, n, d, ff, u, us));
    TRY(be->swiglu_backward(kc, dff1, dff2, dff1, A->gate, A->up, n * ff)); /* dgate, dup */
    if (t_lin) TRY(be->matmul_backward_w(kc, G[P_GATE].g, dff1, A->xn2, n, ff, d));
    if (t_lin) TRY(be->matmul_backward_w(kc, G[P_UP].g, dff2, A->xn2, n, ff, d));
    TRY(be->matmul_backward_x(kc, dxn, dff1, W->w_gate.data, W->w_gate.dt, n, ff, d, 0.f));
    TRY(be->matmul_backward_x(kc, dxn, dff2, W->w_up.data, W->w_up.dt, n, ff, d, 1.f));
    if (ADAPTED(T_GATE)) TRY(lora_bwd(be, kc, lt, l, T_GATE, dff1, A->xn2, A->lt[T_GATE], dxn, n, ff, d, u, us));
    if (ADAPTED(T_UP)) TRY(lora_bwd(be, kc, lt, l, T_UP, dff2, A->xn2, A->lt[T_UP], dxn, n, ff, d, u, us));
    TRY(be->rmsnorm_backward(kc, dres, t_norm ? G[P_NORM2].g : NULL, dxn, A->x_mid, W->ffn_norm.data, W->ffn_norm.dt,
                             A->rstd2, n, d, 1.f));
    /* attention: x_mid = x_in + att . Wo^T */
    if (t_lin) TRY(be->matmul_backward_w(kc, G[P_O].g, dres, A->att, n, d, qd));
    TRY(be->matmul_backward_x(kc, datt, dres, W->wo.data, W->wo.dt, n, d, qd, 0.f));
    if (ADAPTED(T_O)) TRY(lora_bwd(be, kc, lt, l, T_O, dres, A->att, A->lt[T_O], datt, n, d, qd, u, us));
    TRY(be->mem_set(kc, dk, 0, (size_t)(n * kvd) * sizeof(float))); /* attention_backward accumulates dk, dv */
    TRY(be->mem_set(kc, dv, 0, (size_t)(n * kvd) * sizeof(float)));
    const bool fot = w->fot && fot_is_mem_layer(w->fot, l), rot = rotates(c, l);
    if (fot)
        TRY(fot_attention_backward(be, kc, w->fot, l, dq, dk, dv, datt, A->q, A->k, A->v, A->att, A->lse, hq, hkv, hd,
                                   scale));
    for (int32_t b = 0; !fot && b < w->B; b++) {
        int64_t r = (int64_t)b * T;
        if (w->s2)
            TRY(s2_attention_backward(w->s2, kc, dq + r * qd, dk + r * kvd, dv + r * kvd, datt + r * qd,
                                      A->q + r * qd, A->k + r * kvd, A->v + r * kvd, A->att + r * qd, A->lse + r * hq,
                                      scale));
        else
            TRY(be->attention_backward(kc, dq + r * qd, dk + r * kvd, dv + r * kvd, datt + r * qd, A->q + r * qd,
                                       A->k + r * kvd, A->v + r * kvd, A->att + r * qd, A->lse + r * hq, T, T, 0, hq,
                                       hkv, hd, scale));
    }
    if (rot) TRY(be->rope_backward(kc, dq, n, hq, hd, w->pos, c->rope_theta, c->rope_scaling_factor));
    if (rot) TRY(be->rope_backward(kc, dk, n, hkv, hd, w->pos, c->rope_theta, c->rope_scaling_factor));
    if (fot) TRY(be->add(kc, dk, fot_dk_raw(w->fot), n * kvd)); /* other rows' share of the unrotated keys */
    if (c->qk_norm) { /* through the head norms, in place: dq, dk become the projections' gradients */
        TRY(be->rmsnorm_backward(kc, dq, t_norm ? G[P_QNORM].g : NULL, dq, A->q_pre, W->q_norm.data, W->q_norm.dt,
                                 A->rstd_q, n * hq, hd, 0.f));
        TRY(be->rmsnorm_backward(kc, dk, t_norm ? G[P_KNORM].g : NULL, dk, A->k_pre, W->k_norm.data, W->k_norm.dt,
                                 A->rstd_k, n * hkv, hd, 0.f));
    }
    if (t_lin) TRY(be->matmul_backward_w(kc, G[P_Q].g, dq, A->xn1, n, qd, d));
    if (t_lin) TRY(be->matmul_backward_w(kc, G[P_K].g, dk, A->xn1, n, kvd, d));
    if (t_lin) TRY(be->matmul_backward_w(kc, G[P_V].g, dv, A->xn1, n, kvd, d));
    TRY(be->matmul_backward_x(kc, dxn, dq, W->wq.data, W->wq.dt, n, qd, d, 0.f));
    TRY(be->matmul_backward_x(kc, dxn, dk, W->wk.data, W->wk.dt, n, kvd, d, 1.f));
    TRY(be->matmul_backward_x(kc, dxn, dv, W->wv.data, W->wv.dt, n, kvd, d, 1.f));
    if (ADAPTED(T_Q)) TRY(lora_bwd(be, kc, lt, l, T_Q, dq, A->xn1, A->lt[T_Q], dxn, n, qd, d, u, us));
    if (ADAPTED(T_K)) TRY(lora_bwd(be, kc, lt, l, T_K, dk, A->xn1, A->lt[T_K], dxn, n, kvd, d, u, us));
    if (ADAPTED(T_V)) TRY(lora_bwd(be, kc, lt, l, T_V, dv, A->xn1, A->lt[T_V], dxn, n, kvd, d, u, us));
    TRY(be->rmsnorm_backward(kc, dres, t_norm ? G[P_NORM1].g : NULL, dxn, A->x_in, W->attn_norm.data,
                             W->attn_norm.dt, A->rstd1, n, d, 1.f));
    return 0;
}

static size_t n_params(const mnemo_model *m) {
    return 1 + (size_t)m->cfg.num_hidden_layers * layer_param_count(&m->cfg) + 1 + (tied(m) ? 0 : 1);
}

int model_loss_and_grads(const mnemo_model *m, const int32_t *tokens, const uint8_t *mask, int32_t B, int32_t T,
                         float dloss, model_grads *g, float *loss, char *err, size_t errlen) {
    return model_loss_and_grads_ex(m, tokens, mask, B, T, dloss, g, TRAIN_ALL, NULL, loss, err, errlen);
}

int model_loss_and_grads_ex(const mnemo_model *m, const int32_t *tokens, const uint8_t *mask, int32_t B, int32_t T,
                            float dloss, model_grads *g, unsigned train, lora_train *lt, float *loss, char *err,
                            size_t errlen) {
    model_train_ws *w = model_train_ws_new(m, B, T, lt ? lt->r : 0, false, err, errlen);
    int rc = w ? model_loss_and_grads_ws(w, m, tokens, mask, dloss, g, train, lt, loss, err, errlen) : -1;
    model_train_ws_free(w);
    return rc;
}

int model_loss_and_grads_ws(model_train_ws *w, const mnemo_model *m, const int32_t *tokens, const uint8_t *mask,
                            float dloss, model_grads *g, unsigned train, lora_train *lt, float *loss, char *err,
                            size_t errlen) {
    const model_config *c = &m->cfg;
    const kern_backend *be = m->be;
    const llama_weights *wt = &m->w;
    const int32_t B = w->B, T = w->T;
    const int64_t d = c->hidden_size, V = c->vocab_size, n = (int64_t)B * T, L = c->num_hidden_layers;
    const float eps = c->rms_norm_eps;
    if (train && (!g || g->count != n_params(m) || g->be != (be->host_memory ? NULL : be)))
        return errbuf_fail(err, errlen, "gradients not made for this model (model_grads_init) or not on its backend");
    if (be != w->be) return errbuf_fail(err, errlen, "a workspace made for the %s backend used on %s", w->be->name,
                                        be->name);
    if (lt && (lt->r != w->r || L > LORA_TRAIN_MAX_LAYERS))
        return errbuf_fail(err, errlen, "an adapter of rank %d on %lld layers (workspace for rank %d)", lt->r,
                           (long long)L,
                           w->r);
    for (size_t i = 0; train && i < g->count; i++)
        if (in_groups(m, i, train) && !g->p[i].g) return errbuf_fail(err, errlen, "no gradient buffer for %s",
                                                                     g->p[i].name);
    kern_ctx *kc = w->kc ? w->kc : be->ctx_new(m->n_threads); /* host: a context per call, as before */
    if (!kc) return errbuf_fail(err, errlen, "out of memory");
    if (be == kern_cpu_backend()) kern_cpu_set_gemm(kc, KERN_CPU_GEMM_EXACT); /* fp32 forward for fp32 gradients */
    int rc = -1;
    float *loss_out = w->loss_dev ? w->loss_dev : loss; /* device: cross_entropy writes device memory */
    for (int32_t b = 0; b < B; b++)
        for (int32_t t = 0; t < T; t++) {
            int64_t i = (int64_t)b * T + t;
            w->h_ids[i] = tokens[(size_t)b * (T + 1) + t];
            w->h_tgt[i] = !mask || mask[i] ? tokens[(size_t)b * (T + 1) + t + 1] : -1;
            w->h_pos[i] = w->pos_in ? w->pos_in[i] : t;
        }
    /* ---- forward: with recompute only each layer's input is kept; `one` holds the layer being computed */
#define CALL(x)                                                                                                 \
    do {                                                                                                        \
        if ((x) != 0) goto out;                                                                                 \
    } while (0)
#define KCALL(x)                                                                                                \
    do {                                                                                                        \
        int rc_ = (x);                                                                                          \
        if (rc_ != KERN_OK) {                                                                                   \
            errbuf_fail(err, errlen, "kernel error %d in %s", rc_, #x);                                                \
            goto out;                                                                                           \
        }                                                                                                       \
    } while (0)
    if (!be->host_memory) /* ids, targets, positions: one upload */
        KCALL(be->mem_copy(kc, w->idx, w->h_idx, 3 * (size_t)n * sizeof *w->idx, KERN_H2D));
    KCALL(be->embed(kc, w->a[0].x_in, wt->tok_embd.data, wt->tok_embd.dt, V, d, w->ids, n));
    for (int64_t l = 0; l < L; l++) {
        layer_acts *A = &w->a[l];
        if (w->recompute) w->one.x_in = A->x_in;
        CALL(layer_forward(m, kc, w, l, w->recompute ? &w->one : A, l + 1 < L ? w->a[l + 1].x_in : w->x_last, lt, err,
                           errlen));
    }
    KCALL(be->rmsnorm(kc, w->xnf, w->rstdf, w->x_last, wt->out_norm.data, wt->out_norm.dt, n, d, eps));
    KCALL(be->matmul(kc, w->logits, w->xnf, wt->lm_head.data, wt->lm_head.dt, n, V, d, 0.f));
    KCALL(be->cross_entropy(kc, loss_out, w->logits, w->logits, w->tgt, n, V, dloss)); /* logits become dlogits */
    if (dloss == 0.0f) { /* the loss alone (evaluation): no backward */
        rc = 0;
        goto out;
    }
    /* ---- backward */
    param_grad *P = g ? g->p : NULL;
    const bool t_lin = train & TRAIN_LINEAR, t_norm = train & TRAIN_NORMS;
    const int64_t PL = (int64_t)layer_param_count(c);
    float *g_embd = train & TRAIN_EMBED ? P[0].g : NULL, *g_norm = t_norm ? P[1 + L * PL].g : NULL;
    float *g_head = tied(m) ? ((train & (TRAIN_EMBED | TRAIN_HEAD)) ? P[0].g : NULL)
                            : (train & TRAIN_HEAD ? P[2 + L * PL].g : NULL);
    if (g_head) KCALL(be->matmul_backward_w(kc, g_head, w->logits, w->xnf, n, V, d));
    KCALL(be->matmul_backward_x(kc, w->dxn, w->logits, wt->lm_head.data, wt->lm_head.dt, n, V, d, 0.f));
    KCALL(be->rmsnorm_backward(kc, w->dres, g_norm, w->dxn, w->x_last, wt->out_norm.data, wt->out_norm.dt, w->rstdf,
                               n, d, 0.f));
    for (int64_t l = L - 1; l >= 0; l--) {
        layer_acts *A = &w->a[l];
        if (w->recompute) { /* the same ops on the same input: bit for bit the activations the forward had */
            w->one.x_in = A->x_in;
            A = &w->one;
            CALL(layer_forward(m, kc, w, l, A, w->x_spare, lt, err, errlen));
        }
        CALL(layer_backward(m, kc, w, l, A, P ? &P[1 + l * PL] : NULL, t_lin, t_norm, lt, err, errlen));
    }
    if (g_embd) KCALL(be->embed_backward(kc, g_embd, w->dres, V, d, w->ids, n));
    rc = 0;
out:
    if (rc == 0 && w->loss_dev) { /* the one read-back: waits for the step and reports deferred errors */
        int rc_ = be->mem_copy(kc, loss, w->loss_dev, sizeof *loss, KERN_D2H);
        if (rc_ != KERN_OK) rc = errbuf_fail(err, errlen, "kernel error %d on %s (a token id out of range?)", rc_,
                                             be->name);
    } else if (rc != 0 && w->kc) {
        be->sync(kc); /* nothing queued may outlive a failed step */
    }
    if (kc != w->kc) be->ctx_free(kc);
    return rc;
}
