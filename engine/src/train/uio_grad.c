/*
 * uio_grad.c — see uio_grad.h. Written on the kernel op table only (no op of its own), layer by layer as
 * model_grad.c is, with the two UIO shapes of attention composed from the causal `attention` op and its backward:
 *   decoder  n queries at positions P..P+n-1 over keys [memory rows 0..P-1 | the n tokens] (q_pos0 = P);
 *   encoder  ordinary rows causal among themselves; <mem> slot i over ordinary rows 0..(i+1)c-1 and itself, one
 *            query over a scratch K/V whose row (i+1)c is the slot's own key (uio_encoder.c's trick, taking the
 *            slots from M-1 down so one scratch serves them all); the backward scatters the scratch's dk, dv back.
 * Gradient rule (llm.c's): parameter gradients accumulate, activation gradients are overwritten. Base weights are
 * frozen: no base gradient is computed. Shapes in comments: [rows, width].
 * Any backend: every buffer (activations, memory, ids, targets, positions, losses) lives in the backend's memory and
 * every move is a backend copy (mem_copy / mem_set / axpby), so on CUDA the host only uploads a document's ids and
 * targets (uio_grad_load_document) and reads back its losses (uio_grad_losses); on the CPU these are plain memcpy.
 */
#include "uio_grad.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "log.h"
#include "errbuf.h"

/* What one layer's backward needs (rows n). The encoder's LoRA keeps x A^T of q and v (ltq, ltv). */
typedef struct {
    float *x_in, *xn1, *rstd1, *q, *k, *v, *att, *lse, *x_mid, *xn2, *rstd2, *gate, *up, *h, *ltq, *ltv;
} acts;

struct uio_train_ws {
    int32_t L, d, ff, hq, hkv, hd, qd, kvd, V, C, M, c, r, nE, Tmax, Pmax;
    acts *enc, *dec;          /* [L] each: the encoder over C + M rows, the decoder over C rows */
    float *Kf, *Vf;           /* [L][Pmax + C, kvd] the decoder's keys (rotated) and values: [memory | tokens] */
    float *memH, *memK, *memV, *dH; /* [L][Pmax, hidden | kvd]: leaves, their keys (rotated) and values, leaf grads */
    float *x_last, *xnf, *rstdf, *logits, *dres, *dxn, *dff1, *dff2, *dq, *dk, *dv, *datt, *dKf, *dVf, *dhrows;
    float *u, *us, *tt, *kscr, *vscr, *dkscr, *dvscr;
    float *losses;            /* [Tmax] each decoder segment's mean loss, read back once per document */
    /* ints in the backend's memory (one allocation, idx), staged in h_idx with the same layout:
     * pos_enc [nE] the encoder's positions; pos [Pmax + C] 0, 1, ...: memory rows at 0..P-1, a decoder segment after
     * P memories at P..; ids [Tmax * C] then tgt [Tmax * C]: the loaded document's n ids, then its n targets (-1:
     * not counted) right after them (tgt = ids + n), so one copy uploads both */
    int32_t *pos_enc, *pos, *ids, *tgt, *idx, *h_idx;
    size_t n_idx;
    const kern_backend *be;
    kern_ctx *kc;             /* one execution context for every pass (its threads and scratch live as long) */
    float *block;
    size_t floats;
};

typedef struct {
    float *base;
    size_t at;
} carve;
static float *take(carve *c, size_t n) {
    float *p = c->base ? c->base + c->at : NULL;
    c->at += (n + 15) & ~(size_t)15;
    return p;
}

static void carve_acts(carve *c, acts *A, const uio_train_ws *w, size_t n, bool lora, bool norm_only) {
    const size_t d = (size_t)w->d, ff = (size_t)w->ff, qd = (size_t)w->qd, kvd = (size_t)w->kvd, r = (size_t)w->r;
    A->x_in = take(c, n * d), A->xn1 = take(c, n * d), A->rstd1 = take(c, n);
    if (norm_only) return;
    A->q = take(c, n * qd), A->k = take(c, n * kvd), A->v = take(c, n * kvd), A->att = take(c, n * qd);
    A->lse = take(c, n * (size_t)w->hq), A->x_mid = take(c, n * d), A->xn2 = take(c, n * d), A->rstd2 = take(c, n);
    A->gate = take(c, n * ff), A->up = take(c, n * ff), A->h = take(c, n * ff);
    if (lora) A->ltq = take(c, n * r), A->ltv = take(c, n * r);
}

static void carve_all(carve *c, uio_train_ws *w) {
    const size_t L = (size_t)w->L, d = (size_t)w->d, ff = (size_t)w->ff, qd = (size_t)w->qd, kvd = (size_t)w->kvd;
    const size_t nE = (size_t)w->nE, C = (size_t)w->C, P = (size_t)w->Pmax, r = (size_t)w->r;
    const size_t big = nE > P ? nE : P;
    for (size_t l = 0; l < L; l++) {
        carve_acts(c, &w->enc[l], w, nE, true, l + 1 == L); /* the last layer: its norm gives h, nothing after */
        carve_acts(c, &w->dec[l], w, C, false, false);
    }
    w->Kf = take(c, L * (P + C) * kvd), w->Vf = take(c, L * (P + C) * kvd);
    w->memH = take(c, L * P * d), w->memK = take(c, L * P * kvd), w->memV = take(c, L * P * kvd);
    w->dH = take(c, L * P * d);
    w->x_last = take(c, C * d), w->xnf = take(c, C * d), w->rstdf = take(c, C), w->logits = take(c, C * (size_t)w->V);
    w->dres = take(c, nE * d), w->dxn = take(c, nE * d), w->dff1 = take(c, nE * ff), w->dff2 = take(c, nE * ff);
    w->dq = take(c, nE * qd), w->dk = take(c, nE * kvd), w->dv = take(c, nE * kvd), w->datt = take(c, nE * qd);
    w->dKf = take(c, (P + C) * kvd), w->dVf = take(c, (P + C) * kvd), w->dhrows = take(c, (P ? P : 1) * d);
    w->u = take(c, big * r), w->us = take(c, big * r), w->tt = take(c, big * r);
    w->kscr = take(c, (C + 1) * kvd), w->vscr = take(c, (C + 1) * kvd);
    w->dkscr = take(c, (C + 1) * kvd), w->dvscr = take(c, (C + 1) * kvd);
    w->losses = take(c, (size_t)w->Tmax);
}

uio_train_ws *uio_train_ws_new(const mnemo_model *m, const uio_train_weights *uw, int64_t max_tokens, char *err,
                               size_t errlen) {
    const model_config *cfg = &m->cfg;
    if (uw->be != (m->be->host_memory ? NULL : m->be)) {
        errbuf_fail(err, errlen, "UIO tensors in %s memory for a model on %s", uw->be ? uw->be->name : "host",
                    m->be->name);
        return NULL;
    }
    if (max_tokens < 2) {
        errbuf_fail(err, errlen, "a UIO document needs at least 2 tokens (got %lld)", (long long)max_tokens);
        return NULL;
    }
    uio_train_ws *w = calloc(1, sizeof *w);
    if (!w) {
        errbuf_fail(err, errlen, "out of memory");
        return NULL;
    }
    w->L = cfg->num_hidden_layers, w->d = cfg->hidden_size, w->ff = cfg->intermediate_size;
    w->hq = cfg->num_attention_heads, w->hkv = cfg->num_key_value_heads, w->hd = cfg->head_dim;
    w->qd = w->hq * w->hd, w->kvd = w->hkv * w->hd, w->V = cfg->vocab_size;
    w->C = uw->C, w->M = uw->M, w->c = uw->C / uw->M, w->r = uw->r, w->nE = uw->C + uw->M;
    w->Tmax = (int32_t)((max_tokens + w->C - 1) / w->C);
    w->Pmax = (w->Tmax - 1) * w->M;
    if ((int64_t)w->Pmax + w->C > cfg->max_position_embeddings)
        mnemo_log(MNEMO_LOG_WARN, "UIO training: %d memory slots + %d tokens pass max_position_embeddings %d "
                  "(positions beyond what the base saw)", w->Pmax, w->C, cfg->max_position_embeddings);
    const size_t n_pos = (size_t)w->Pmax + (size_t)w->C, n_doc = (size_t)w->Tmax * (size_t)w->C;
    w->n_idx = (size_t)w->nE + n_pos + 2 * n_doc;
    const kern_backend *be = w->be = m->be;
    w->enc = calloc((size_t)w->L, sizeof *w->enc), w->dec = calloc((size_t)w->L, sizeof *w->dec);
    w->h_idx = malloc(w->n_idx * sizeof *w->h_idx);
    w->idx = be->host_memory ? w->h_idx : be->mem_alloc(w->n_idx * sizeof *w->idx);
    w->kc = be->ctx_new(m->n_threads);
    if (!w->enc || !w->dec || !w->h_idx || !w->idx || !w->kc) {
        uio_train_ws_free(w);
        errbuf_fail(err, errlen, "out of %s memory", w->h_idx && !be->host_memory ? be->name : "host");
        return NULL;
    }
    carve count = {0};
    carve_all(&count, w);
    w->floats = count.at;
    if (!(w->block = be->host_memory ? aligned_alloc(64, w->floats * sizeof(float))
                                     : be->mem_alloc(w->floats * sizeof(float)))) {
        errbuf_fail(err, errlen, "out of %s memory for the UIO training workspace (%.2f GiB for %lld-token documents)",
                    be->name, (double)w->floats * 4 / (1 << 30), (long long)max_tokens);
        uio_train_ws_free(w);
        return NULL;
    }
    carve fill = {.base = w->block};
    carve_all(&fill, w);
    w->pos_enc = w->idx, w->pos = w->idx + w->nE, w->ids = w->tgt = w->pos + n_pos;
    int32_t *h_enc = w->h_idx, *h_pos = w->h_idx + w->nE; /* the positions never change: uploaded once, here */
    for (int32_t t = 0; t < w->C; t++) h_enc[t] = t;
    for (int32_t i = 0; i < w->M; i++) h_enc[w->C + i] = (i + 1) * w->c;
    for (size_t j = 0; j < n_pos; j++) h_pos[j] = (int32_t)j;
    if (!be->host_memory &&
        be->mem_copy(NULL, w->idx, w->h_idx, ((size_t)w->nE + n_pos) * sizeof *w->idx, KERN_H2D) != KERN_OK) {
        errbuf_fail(err, errlen, "uploading the UIO positions to %s failed", be->name);
        uio_train_ws_free(w);
        return NULL;
    }
    return w;
}

void uio_train_ws_free(uio_train_ws *w) {
    if (!w) return;
    if (w->kc) w->be->ctx_free(w->kc);
    if (w->be && !w->be->host_memory) {
        w->be->mem_free(w->block);
        w->be->mem_free(w->idx);
    } else {
        free(w->block);
    }
    free(w->enc), free(w->dec), free(w->h_idx);
    free(w);
}

size_t uio_train_ws_bytes(const uio_train_ws *w) { return w ? w->floats * sizeof(float) : 0; }
int32_t uio_grad_max_segments(const uio_train_ws *w) { return w->Tmax; }

#define TRY(call)                                                                                               \
    do {                                                                                                        \
        int rc_ = (call);                                                                                       \
        if (rc_ != KERN_OK) return errbuf_fail(err, errlen, "kernel error %d in %s", rc_, #call);                      \
    } while (0)

/* Backend moves of n floats (D2D: memcpy on the CPU, the context's stream on a device). */
static int copy_f(const kern_backend *be, kern_ctx *kc, float *dst, const float *src, int64_t n) {
    return n > 0 ? be->mem_copy(kc, dst, src, (size_t)n * sizeof(float), KERN_D2D) : KERN_OK;
}
static int zero_f(const kern_backend *be, kern_ctx *kc, float *dst, int64_t n) {
    return n > 0 ? be->mem_set(kc, dst, 0, (size_t)n * sizeof(float)) : KERN_OK;
}

/* y[n, out] += s (x A^T) B^T keeping t = x A^T [n, r]; ts: scratch [n, r]. */
static int lora_fwd(const kern_backend *be, kern_ctx *kc, float *y, const float *x, const uio_tensor *A,
                    const uio_tensor *B, float s, int64_t n, float *t, float *ts) {
    const int64_t r = A->rows, in = A->cols, out = B->rows;
    int rc = be->matmul(kc, t, x, A->p, KERN_F32, n, r, in, 0.f);
    if (rc == KERN_OK) rc = be->axpby(kc, ts, t, n * r, s, 0.f); /* ts = s t */
    return rc != KERN_OK ? rc : be->matmul(kc, y, ts, B->p, KERN_F32, n, out, r, 1.f);
}

/* Backward of the LoRA part of y = x W^T + s (x A^T) B^T given dy and t = x A^T: A, B's gradients accumulate,
 * dx += its share (dx NULL: not wanted). u, us: scratch [n, r]. */
static int lora_bwd(const kern_backend *be, kern_ctx *kc, const float *dy, const float *x, const float *t,
                    uio_tensor *A, uio_tensor *B, float s, float *dx, int64_t n, float *u, float *us) {
    const int64_t r = A->rows, in = A->cols, out = B->rows;
    int rc = be->matmul_backward_x(kc, u, dy, B->p, KERN_F32, n, out, r, 0.f); /* dy B [n, r] */
    if (rc == KERN_OK) rc = be->axpby(kc, u, u, n * r, s, 0.f);   /* u = s dy B */
    if (rc == KERN_OK) rc = be->axpby(kc, us, t, n * r, s, 0.f);  /* us = s t */
    if (rc == KERN_OK) rc = be->matmul_backward_w(kc, A->g, u, x, n, r, in);   /* dA += (s dy B)^T x */
    if (rc == KERN_OK) rc = be->matmul_backward_w(kc, B->g, dy, us, n, out, r); /* dB += dy^T (s t) */
    return rc != KERN_OK || !dx ? rc : be->matmul_backward_x(kc, dx, u, A->p, KERN_F32, n, r, in, 1.f);
}

/* The MLP half of a layer: x_out = x_mid + swiglu(rmsnorm(x_mid)) . Wd^T. */
static int mlp_fwd(const mnemo_model *m, kern_ctx *kc, const layer_weights *W, acts *A, float *x_out, int64_t n,
                   char *err, size_t errlen) {
    const kern_backend *be = m->be;
    const int64_t d = m->cfg.hidden_size, ff = m->cfg.intermediate_size;
    TRY(be->rmsnorm(kc, A->xn2, A->rstd2, A->x_mid, W->ffn_norm.data, W->ffn_norm.dt, n, d, m->cfg.rms_norm_eps));
    TRY(be->matmul(kc, A->gate, A->xn2, W->w_gate.data, W->w_gate.dt, n, ff, d, 0.f));
    TRY(be->matmul(kc, A->up, A->xn2, W->w_up.data, W->w_up.dt, n, ff, d, 0.f));
    TRY(be->swiglu(kc, A->h, A->gate, A->up, n * ff));
    TRY(copy_f(be, kc, x_out, A->x_mid, n * d));
    TRY(be->matmul(kc, x_out, A->h, W->w_down.data, W->w_down.dt, n, d, ff, 1.f));
    return 0;
}

/* Its backward: ws->dres holds d/dx_out and receives d/dx_mid. */
static int mlp_bwd(const mnemo_model *m, kern_ctx *kc, uio_train_ws *w, const layer_weights *W, const acts *A,
                   int64_t n, char *err, size_t errlen) {
    const kern_backend *be = m->be;
    const int64_t d = m->cfg.hidden_size, ff = m->cfg.intermediate_size;
    TRY(be->matmul_backward_x(kc, w->dff1, w->dres, W->w_down.data, W->w_down.dt, n, d, ff, 0.f));
    TRY(be->swiglu_backward(kc, w->dff1, w->dff2, w->dff1, A->gate, A->up, n * ff));
    TRY(be->matmul_backward_x(kc, w->dxn, w->dff1, W->w_gate.data, W->w_gate.dt, n, ff, d, 0.f));
    TRY(be->matmul_backward_x(kc, w->dxn, w->dff2, W->w_up.data, W->w_up.dt, n, ff, d, 1.f));
    TRY(be->rmsnorm_backward(kc, w->dres, NULL, w->dxn, A->x_mid, W->ffn_norm.data, W->ffn_norm.dt, A->rstd2, n, d,
                             1.f));
    return 0;
}

/* ------------------------------------------------------------------------------------------ encoder, transfer head */

/* The encoder over ids[C] + M <mem> rows, keeping every activation in w->enc; h of layer l = enc[l].xn1 rows C... */
static int encoder_forward(uio_train_ws *w, const mnemo_model *m, kern_ctx *kc, uio_train_weights *uw,
                           const int32_t *ids, char *err, size_t errlen) {
    const kern_backend *be = m->be;
    const model_config *cfg = &m->cfg;
    const int64_t d = w->d, C = w->C, M = w->M, n = w->nE, qd = w->qd, kvd = w->kvd, hq = w->hq, hkv = w->hkv;
    const int64_t hd = w->hd;
    const float scale = 1.0f / sqrtf((float)hd);
    TRY(be->embed(kc, w->enc[0].x_in, m->w.tok_embd.data, m->w.tok_embd.dt, w->V, d, ids, C));
    for (int64_t i = 0; i < M; i++) TRY(copy_f(be, kc, w->enc[0].x_in + (C + i) * d, uw->t[0].p, d));
    for (int32_t l = 0; l < w->L; l++) {
        const layer_weights *W = &m->w.layers[l];
        acts *A = &w->enc[l];
        TRY(be->rmsnorm(kc, A->xn1, A->rstd1, A->x_in, W->attn_norm.data, W->attn_norm.dt, n, d, cfg->rms_norm_eps));
        if (l + 1 == w->L) break;
        TRY(be->matmul(kc, A->q, A->xn1, W->wq.data, W->wq.dt, n, qd, d, 0.f));
        TRY(be->matmul(kc, A->k, A->xn1, W->wk.data, W->wk.dt, n, kvd, d, 0.f));
        TRY(be->matmul(kc, A->v, A->xn1, W->wv.data, W->wv.dt, n, kvd, d, 0.f));
        TRY(lora_fwd(be, kc, A->q, A->xn1, uio_enc(uw, l, UIO_Q, 0), uio_enc(uw, l, UIO_Q, 1), uw->scale, n, A->ltq,
                     w->us));
        TRY(lora_fwd(be, kc, A->v, A->xn1, uio_enc(uw, l, UIO_V, 0), uio_enc(uw, l, UIO_V, 1), uw->scale, n, A->ltv,
                     w->us));
        TRY(be->rope(kc, A->q, n, hq, hd, w->pos_enc, cfg->rope_theta, cfg->rope_scaling_factor));
        TRY(be->rope(kc, A->k, n, hkv, hd, w->pos_enc, cfg->rope_theta, cfg->rope_scaling_factor));
        TRY(be->attention(kc, A->att, A->lse, A->q, A->k, A->v, C, C, 0, hq, hkv, hd, scale));
        TRY(copy_f(be, kc, w->kscr, A->k, C * kvd));
        TRY(copy_f(be, kc, w->vscr, A->v, C * kvd));
        for (int64_t i = M - 1; i >= 0; i--) {
            const int64_t at = (i + 1) * w->c; /* the slot's own row and position */
            TRY(copy_f(be, kc, w->kscr + at * kvd, A->k + (C + i) * kvd, kvd));
            TRY(copy_f(be, kc, w->vscr + at * kvd, A->v + (C + i) * kvd, kvd));
            TRY(be->attention(kc, A->att + (C + i) * qd, A->lse + (C + i) * hq, A->q + (C + i) * qd, w->kscr, w->vscr,
                              1, at + 1, at, hq, hkv, hd, scale));
        }
        TRY(copy_f(be, kc, A->x_mid, A->x_in, n * d));
        TRY(be->matmul(kc, A->x_mid, A->att, W->wo.data, W->wo.dt, n, d, qd, 1.f));
        if (mlp_fwd(m, kc, W, A, w->enc[l + 1].x_in, n, err, errlen)) return -1;
    }
    return 0;
}

int uio_grad_compress(uio_train_ws *w, const mnemo_model *m, uio_train_weights *uw, int32_t seg, char *err,
                      size_t errlen) {
    if (seg < 0 || seg >= w->Tmax - 1) return errbuf_fail(err, errlen, "segment %d outside the workspace's memory",
                                                          seg);
    const kern_backend *be = m->be;
    const model_config *cfg = &m->cfg;
    const int64_t d = w->d, M = w->M, kvd = w->kvd, P = w->Pmax, row0 = (int64_t)seg * M;
    kern_ctx *kc = w->kc;
    int rc = encoder_forward(w, m, kc, uw, w->ids + (size_t)seg * (size_t)w->C, err, errlen);
    for (int32_t l = 0; rc == 0 && l < w->L; l++) {
        const layer_weights *W = &m->w.layers[l];
        float *h = w->memH + ((size_t)l * P + row0) * d, *k = w->memK + ((size_t)l * P + row0) * kvd;
        float *v = w->memV + ((size_t)l * P + row0) * kvd;
        int k_rc = copy_f(be, kc, h, w->enc[l].xn1 + (size_t)w->C * d, M * d);
        if (!k_rc) k_rc = zero_f(be, kc, w->dH + ((size_t)l * P + row0) * d, M * d);
        if (!k_rc) k_rc = be->matmul(kc, k, h, W->wk.data, W->wk.dt, M, kvd, d, 0.f);
        if (!k_rc) k_rc = lora_fwd(be, kc, k, h, uio_dec(uw, l, UIO_K, 0), uio_dec(uw, l, UIO_K, 1), uw->scale, M, w->u,
                                   w->us);
        if (!k_rc) k_rc = be->matmul(kc, v, h, W->wv.data, W->wv.dt, M, kvd, d, 0.f);
        if (!k_rc) k_rc = lora_fwd(be, kc, v, h, uio_dec(uw, l, UIO_V, 0), uio_dec(uw, l, UIO_V, 1), uw->scale, M, w->u,
                                   w->us);
        if (!k_rc)
            k_rc = be->rope(kc, k, M, w->hkv, w->hd, w->pos + row0, cfg->rope_theta, cfg->rope_scaling_factor);
        if (k_rc) rc = errbuf_fail(err, errlen, "kernel error %d in the transfer head", k_rc);
    }
    return rc;
}

/* ------------------------------------------------------------------------------------------ decoder */

static int decoder_run(uio_train_ws *w, const mnemo_model *m, kern_ctx *kc, uio_train_weights *uw, int32_t n,
                       int32_t n_seg, float dloss, const float *factor, char *err, size_t errlen) {
    const kern_backend *be = m->be;
    const model_config *cfg = &m->cfg;
    const llama_weights *wt = &m->w;
    const int64_t d = w->d, qd = w->qd, kvd = w->kvd, hq = w->hq, hkv = w->hkv, hd = w->hd, V = w->V;
    const int64_t P = (int64_t)n_seg * w->M, Pm = w->Pmax, L = w->L;
    const float scale = 1.0f / sqrtf((float)hd), eps = cfg->rms_norm_eps;
    const int32_t *ids = w->ids + (size_t)n_seg * (size_t)w->C, *tgt = w->tgt + (size_t)n_seg * (size_t)w->C;
    const int32_t *pos_dec = w->pos + P; /* the segment's tokens sit after the P memory slots */
    TRY(be->embed(kc, w->dec[0].x_in, wt->tok_embd.data, wt->tok_embd.dt, V, d, ids, n));
    for (int64_t l = 0; l < L; l++) {
        const layer_weights *W = &wt->layers[l];
        acts *A = &w->dec[l];
        float *Kf = w->Kf + (size_t)l * (size_t)(Pm + w->C) * kvd, *Vf = w->Vf + (size_t)l * (size_t)(Pm + w->C) * kvd;
        TRY(be->rmsnorm(kc, A->xn1, A->rstd1, A->x_in, W->attn_norm.data, W->attn_norm.dt, n, d, eps));
        TRY(be->matmul(kc, A->q, A->xn1, W->wq.data, W->wq.dt, n, qd, d, 0.f));
        TRY(be->matmul(kc, Kf + P * kvd, A->xn1, W->wk.data, W->wk.dt, n, kvd, d, 0.f));
        TRY(be->matmul(kc, Vf + P * kvd, A->xn1, W->wv.data, W->wv.dt, n, kvd, d, 0.f));
        TRY(be->rope(kc, A->q, n, hq, hd, pos_dec, cfg->rope_theta, cfg->rope_scaling_factor));
        TRY(be->rope(kc, Kf + P * kvd, n, hkv, hd, pos_dec, cfg->rope_theta, cfg->rope_scaling_factor));
        TRY(copy_f(be, kc, Kf, w->memK + (size_t)l * Pm * kvd, P * kvd));
        TRY(copy_f(be, kc, Vf, w->memV + (size_t)l * Pm * kvd, P * kvd));
        TRY(be->attention(kc, A->att, A->lse, A->q, Kf, Vf, n, P + n, P, hq, hkv, hd, scale));
        TRY(copy_f(be, kc, A->x_mid, A->x_in, n * d));
        TRY(be->matmul(kc, A->x_mid, A->att, W->wo.data, W->wo.dt, n, d, qd, 1.f));
        if (mlp_fwd(m, kc, W, A, l + 1 < L ? w->dec[l + 1].x_in : w->x_last, n, err, errlen)) return -1;
    }
    TRY(be->rmsnorm(kc, w->xnf, w->rstdf, w->x_last, wt->out_norm.data, wt->out_norm.dt, n, d, eps));
    TRY(be->matmul(kc, w->logits, w->xnf, wt->lm_head.data, wt->lm_head.dt, n, V, d, 0.f));
    TRY(be->cross_entropy(kc, w->losses + n_seg, w->logits, w->logits, tgt, n, V, dloss));
    if (dloss == 0.0f) return 0;
    /* backward: nothing of the base is trained; what flows back reaches the memory rows' keys and values */
    TRY(be->matmul_backward_x(kc, w->dxn, w->logits, wt->lm_head.data, wt->lm_head.dt, n, V, d, 0.f));
    TRY(be->rmsnorm_backward(kc, w->dres, NULL, w->dxn, w->x_last, wt->out_norm.data, wt->out_norm.dt, w->rstdf, n, d,
                             0.f));
    for (int64_t l = L - 1; l >= 0; l--) {
        const layer_weights *W = &wt->layers[l];
        const acts *A = &w->dec[l];
        const float *Kf = w->Kf + (size_t)l * (size_t)(Pm + w->C) * kvd;
        const float *Vf = w->Vf + (size_t)l * (size_t)(Pm + w->C) * kvd;
        if (mlp_bwd(m, kc, w, W, A, n, err, errlen)) return -1;
        TRY(be->matmul_backward_x(kc, w->datt, w->dres, W->wo.data, W->wo.dt, n, d, qd, 0.f));
        TRY(zero_f(be, kc, w->dKf, (P + n) * kvd)); /* attention_backward accumulates dk, dv */
        TRY(zero_f(be, kc, w->dVf, (P + n) * kvd));
        TRY(be->attention_backward(kc, w->dq, w->dKf, w->dVf, w->datt, A->q, Kf, Vf, A->att, A->lse, n, P + n, P, hq,
                                   hkv, hd, scale));
        if (l > 0) { /* the tokens' path on to the layer below (layer 0's input is the frozen embedding) */
            float *dk = w->dKf + P * kvd, *dv = w->dVf + P * kvd;
            TRY(be->rope_backward(kc, w->dq, n, hq, hd, pos_dec, cfg->rope_theta, cfg->rope_scaling_factor));
            TRY(be->rope_backward(kc, dk, n, hkv, hd, pos_dec, cfg->rope_theta, cfg->rope_scaling_factor));
            TRY(be->matmul_backward_x(kc, w->dxn, w->dq, W->wq.data, W->wq.dt, n, qd, d, 0.f));
            TRY(be->matmul_backward_x(kc, w->dxn, dk, W->wk.data, W->wk.dt, n, kvd, d, 1.f));
            TRY(be->matmul_backward_x(kc, w->dxn, dv, W->wv.data, W->wv.dt, n, kvd, d, 1.f));
            TRY(be->rmsnorm_backward(kc, w->dres, NULL, w->dxn, A->x_in, W->attn_norm.data, W->attn_norm.dt, A->rstd1,
                                     n, d, 1.f));
        }
        if (P == 0) continue;
        /* memory rows: K = h Wk^T + s (h Ak^T) Bk^T rotated at 0..P-1, V likewise; h the leaves */
        const float *H = w->memH + (size_t)l * Pm * d;
        TRY(be->rope_backward(kc, w->dKf, P, hkv, hd, w->pos, cfg->rope_theta, cfg->rope_scaling_factor));
        TRY(be->matmul_backward_x(kc, w->dhrows, w->dKf, W->wk.data, W->wk.dt, P, kvd, d, 0.f));
        TRY(be->matmul_backward_x(kc, w->dhrows, w->dVf, W->wv.data, W->wv.dt, P, kvd, d, 1.f));
        for (int which = UIO_K; which <= UIO_V; which++) {
            uio_tensor *Aw = uio_dec(uw, (int32_t)l, which, 0), *Bw = uio_dec(uw, (int32_t)l, which, 1);
            TRY(be->matmul(kc, w->tt, H, Aw->p, KERN_F32, P, uw->r, d, 0.f)); /* t = h A^T (recomputed) */
            TRY(lora_bwd(be, kc, which == UIO_K ? w->dKf : w->dVf, H, w->tt, Aw, Bw, uw->scale, w->dhrows, P, w->u,
                         w->us));
        }
        for (int32_t s = 0; s < n_seg; s++) { /* dH_s += factor_s dh_s */
            if (factor[s] == 0.0f) continue;
            float *dst = w->dH + ((size_t)l * Pm + (size_t)s * w->M) * d;
            TRY(be->axpby(kc, dst, w->dhrows + (size_t)s * w->M * d, (int64_t)w->M * d, factor[s], 1.f));
        }
    }
    return 0;
}

int uio_grad_decoder(uio_train_ws *w, const mnemo_model *m, uio_train_weights *uw, int32_t seg, int32_t n,
                     float dloss, const float *factor, char *err, size_t errlen) {
    if (n < 1 || n > w->C || seg < 0 || seg > w->Tmax - 1)
        return errbuf_fail(err, errlen, "a decoder segment of %d tokens after %d memories (workspace: %d, %d)", n, seg,
                           w->C, w->Tmax - 1);
    return decoder_run(w, m, w->kc, uw, n, seg, dloss, factor, err, errlen);
}

int uio_grad_load_document(uio_train_ws *w, const int32_t *ids, const int32_t *tgt, int64_t n, char *err,
                           size_t errlen) {
    const size_t cap = (size_t)w->Tmax * (size_t)w->C;
    if (n < 1 || (size_t)n > cap) return errbuf_fail(err, errlen, "a document of %lld tokens (workspace: %zu)",
                                                     (long long)n, cap);
    int32_t *h_doc = w->h_idx + (w->ids - w->idx); /* staging in the device layout: [n ids | n targets] */
    memcpy(h_doc, ids, (size_t)n * sizeof *ids);
    memcpy(h_doc + n, tgt, (size_t)n * sizeof *tgt);
    w->tgt = w->ids + n;
    if (w->be->host_memory) return 0;
    int rc = w->be->mem_copy(w->kc, w->ids, h_doc, 2 * (size_t)n * sizeof *ids, KERN_H2D); /* one copy */
    return rc == KERN_OK ? 0 : errbuf_fail(err, errlen, "uploading a document's ids to %s: kernel error %d",
                                           w->be->name, rc);
}

int uio_grad_losses(uio_train_ws *w, float *out, int32_t n, char *err, size_t errlen) {
    if (n < 0 || n > w->Tmax) return errbuf_fail(err, errlen, "%d losses (workspace: %d)", n, w->Tmax);
    int rc = n ? w->be->mem_copy(w->kc, out, w->losses, (size_t)n * sizeof *out, KERN_D2H) : w->be->sync(w->kc);
    return rc == KERN_OK ? 0 : errbuf_fail(err, errlen, "kernel error %d on %s (a token id out of range?)", rc,
                                           w->be->name);
}

void uio_grad_abandon(uio_train_ws *w) { w->be->sync(w->kc); }

/* ------------------------------------------------------------------------------------------ encoder backward */

static int encoder_backward(uio_train_ws *w, const mnemo_model *m, kern_ctx *kc, uio_train_weights *uw, int32_t seg,
                            char *err, size_t errlen) {
    const kern_backend *be = m->be;
    const model_config *cfg = &m->cfg;
    const int64_t d = w->d, C = w->C, M = w->M, n = w->nE, qd = w->qd, kvd = w->kvd, hq = w->hq, hkv = w->hkv;
    const int64_t hd = w->hd, Pm = w->Pmax, L = w->L;
    const float scale = 1.0f / sqrtf((float)hd);
    /* the last layer: only its norm's output at the <mem> rows is read */
    TRY(zero_f(be, kc, w->dxn, C * d));
    TRY(copy_f(be, kc, w->dxn + C * d, w->dH + ((size_t)(L - 1) * Pm + (size_t)seg * M) * d, M * d));
    TRY(be->rmsnorm_backward(kc, w->dres, NULL, w->dxn, w->enc[L - 1].x_in, m->w.layers[L - 1].attn_norm.data,
                             m->w.layers[L - 1].attn_norm.dt, w->enc[L - 1].rstd1, n, d, 0.f));
    for (int64_t l = L - 2; l >= 0; l--) {
        const layer_weights *W = &m->w.layers[l];
        const acts *A = &w->enc[l];
        if (mlp_bwd(m, kc, w, W, A, n, err, errlen)) return -1;
        TRY(be->matmul_backward_x(kc, w->datt, w->dres, W->wo.data, W->wo.dt, n, d, qd, 0.f));
        TRY(zero_f(be, kc, w->dk, n * kvd));
        TRY(zero_f(be, kc, w->dv, n * kvd));
        TRY(be->attention_backward(kc, w->dq, w->dk, w->dv, w->datt, A->q, A->k, A->v, A->att, A->lse, C, C, 0, hq, hkv,
                                   hd, scale));
        TRY(copy_f(be, kc, w->kscr, A->k, C * kvd));
        TRY(copy_f(be, kc, w->vscr, A->v, C * kvd));
        for (int64_t i = M - 1; i >= 0; i--) {
            const int64_t at = (i + 1) * w->c;
            TRY(copy_f(be, kc, w->kscr + at * kvd, A->k + (C + i) * kvd, kvd));
            TRY(copy_f(be, kc, w->vscr + at * kvd, A->v + (C + i) * kvd, kvd));
            TRY(zero_f(be, kc, w->dkscr, (at + 1) * kvd));
            TRY(zero_f(be, kc, w->dvscr, (at + 1) * kvd));
            TRY(be->attention_backward(kc, w->dq + (C + i) * qd, w->dkscr, w->dvscr, w->datt + (C + i) * qd,
                                       A->q + (C + i) * qd, w->kscr, w->vscr, A->att + (C + i) * qd,
                                       A->lse + (C + i) * hq, 1, at + 1, at, hq, hkv, hd, scale));
            TRY(be->add(kc, w->dk, w->dkscr, at * kvd)); /* ordinary rows 0..at-1 */
            TRY(be->add(kc, w->dv, w->dvscr, at * kvd));
            TRY(be->add(kc, w->dk + (C + i) * kvd, w->dkscr + at * kvd, kvd)); /* the slot's own key and value */
            TRY(be->add(kc, w->dv + (C + i) * kvd, w->dvscr + at * kvd, kvd));
        }
        TRY(be->rope_backward(kc, w->dq, n, hq, hd, w->pos_enc, cfg->rope_theta, cfg->rope_scaling_factor));
        TRY(be->rope_backward(kc, w->dk, n, hkv, hd, w->pos_enc, cfg->rope_theta, cfg->rope_scaling_factor));
        TRY(be->matmul_backward_x(kc, w->dxn, w->dq, W->wq.data, W->wq.dt, n, qd, d, 0.f));
        TRY(be->matmul_backward_x(kc, w->dxn, w->dk, W->wk.data, W->wk.dt, n, kvd, d, 1.f));
        TRY(be->matmul_backward_x(kc, w->dxn, w->dv, W->wv.data, W->wv.dt, n, kvd, d, 1.f));
        const int32_t li = (int32_t)l;
        TRY(lora_bwd(be, kc, w->dq, A->xn1, A->ltq, uio_enc(uw, li, UIO_Q, 0), uio_enc(uw, li, UIO_Q, 1), uw->scale,
                     w->dxn, n, w->u, w->us));
        TRY(lora_bwd(be, kc, w->dv, A->xn1, A->ltv, uio_enc(uw, li, UIO_V, 0), uio_enc(uw, li, UIO_V, 1), uw->scale,
                     w->dxn, n, w->u, w->us));
        /* the leaf: this layer's norm output at the <mem> rows also went to the transfer head */
        TRY(be->add(kc, w->dxn + C * d, w->dH + ((size_t)l * Pm + (size_t)seg * M) * d, M * d));
        TRY(be->rmsnorm_backward(kc, w->dres, NULL, w->dxn, A->x_in, W->attn_norm.data, W->attn_norm.dt, A->rstd1, n,
                                 d, 1.f));
    }
    float *g = uw->t[0].g; /* the <mem> token: one vector repeated over the M slots */
    for (int64_t i = 0; i < M; i++) TRY(be->add(kc, g, w->dres + (C + i) * d, d));
    return 0;
}

int uio_grad_encoder_backward(uio_train_ws *w, const mnemo_model *m, uio_train_weights *uw, int32_t seg, char *err,
                              size_t errlen) {
    if (seg < 0 || seg >= w->Tmax - 1) return errbuf_fail(err, errlen, "segment %d outside the workspace's memory",
                                                          seg);
    int rc = encoder_forward(w, m, w->kc, uw, w->ids + (size_t)seg * (size_t)w->C, err, errlen);
    return rc ? rc : encoder_backward(w, m, w->kc, uw, seg, err, errlen);
}
