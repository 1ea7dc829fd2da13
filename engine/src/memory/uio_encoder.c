/*
 * uio_encoder.c — the UIO encoder pass over one segment (tests/fixtures/uio/README.md, "Encoder"): the base LLaMA
 * with LoRA on q_proj and v_proj (all rows; k plain) over C + M rows,
 *     rows 0..C-1      embed(segment token t)         at RoPE position t
 *     rows C..C+M-1    the learned <mem> vector       <mem> i at position (i+1)c, c = C/M
 * with the mask
 *     ordinary row t   sees ordinary rows 0..t (causal), never a <mem>
 *     <mem> i          sees ordinary rows 0..(i+1)c-1 and itself, no other <mem>
 * and keeps, per layer, the layer's input RMSNorm output at the M <mem> rows (s->h). The encoder never sees memory
 * or another segment. Scores use 1/sqrt(head_dim).
 *
 * Written with the kernel op table only (no op of its own), layer by layer as llama_forward.c is: the mask is
 * composed from the causal `attention` op:
 *   - ordinary rows: one causal attention over rows 0..C-1 (nq = nkv = C);
 *   - <mem> i: a causal attention of its one query over a scratch K/V whose rows 0..(i+1)c-1 are the ordinary
 *     rows and row (i+1)c is its own key (nq = 1, nkv = (i+1)c + 1, q_pos0 = (i+1)c). Taking i from M-1 down to 0,
 *     slot i's key overwrites ordinary row (i+1)c, which only slots after i (done already) needed: one scratch of
 *     C + 1 rows serves every slot, filled by one copy per layer plus one row per slot.
 * The last layer stops after its norm: h of layer L-1 is its attention input, and nothing reads further.
 * Several segments (option (c), enc_batch) run as one forward of nb * (C + M) rows: every projection and the MLP
 * over all rows at once (longer GEMMs), attention segment by segment with the layout above. Rows never mix, so
 * each segment's h equals its own pass's (to the GEMMs' summation order: within 1e-5, tests/unit/test_uio_knn.c).
 */
#include <math.h>
#include <string.h>

#include "lora.h"
#include "uio_memory.h"

#define TRY(call)                                                                                               \
    do {                                                                                                        \
        int rc_ = (call);                                                                                       \
        if (rc_ != KERN_OK) return rc_;                                                                         \
    } while (0)

/* Positions then token ids in the buffers' pos (one upload on device backends): nb segments of C + M rows, each
 * laid out as above. *emb_ids: where embed reads segment b's C ids, at + b * C. */
static int stage_inputs(uio_state *s, kern_ctx *kc, const int32_t *ids, int32_t nb, const int32_t **emb_ids) {
    const kern_backend *be = s->be;
    const int32_t C = s->C, M = s->M, seg = C + M, n = nb * seg;
    int32_t *p = s->fb.staging;
    for (int32_t b = 0; b < nb; b++) {
        for (int32_t t = 0; t < C; t++) p[b * seg + t] = t;
        for (int32_t i = 0; i < M; i++) p[b * seg + C + i] = (i + 1) * s->c;
    }
    if (be->host_memory) { /* staging is pos; embed reads the ids where they are */
        *emb_ids = ids;
        return KERN_OK;
    }
    memcpy(p + n, ids, (size_t)nb * (size_t)C * sizeof(int32_t));
    *emb_ids = s->fb.pos + n;
    return be->mem_copy(kc, s->fb.pos, p, ((size_t)n + (size_t)nb * (size_t)C) * sizeof(int32_t), KERN_H2D);
}

/* Attention of the M <mem> rows (see the file comment). q, k, v: the layer's rows [C + M, ...] after RoPE. */
static int mem_attention(uio_state *s, kern_ctx *kc, float *att, const float *q, const float *k, const float *v,
                         int64_t hq, int64_t hkv, int64_t hd, float scale) {
    const kern_backend *be = s->be;
    const int64_t C = s->C, qd = hq * hd, kvd = hkv * hd;
    const size_t row = (size_t)kvd * sizeof(float);
    TRY(be->mem_copy(kc, s->kscr, k, (size_t)C * row, KERN_D2D));
    TRY(be->mem_copy(kc, s->vscr, v, (size_t)C * row, KERN_D2D));
    for (int64_t i = s->M - 1; i >= 0; i--) {
        int64_t at = (i + 1) * s->c; /* the slot's own row: its position too */
        TRY(be->mem_copy(kc, s->kscr + at * kvd, k + (C + i) * kvd, row, KERN_D2D));
        TRY(be->mem_copy(kc, s->vscr + at * kvd, v + (C + i) * kvd, row, KERN_D2D));
        TRY(be->attention(kc, att + (C + i) * qd, NULL, q + (C + i) * qd, s->kscr, s->vscr, 1, at + 1, at, hq, hkv,
                          hd, scale));
    }
    return KERN_OK;
}

int uio_encode(uio_state *s, kern_ctx *kc, const int32_t *ids, int32_t nb) {
    const model_config *cfg = s->cfg;
    const llama_weights *w = s->w;
    const kern_backend *be = s->be;
    const lora_adapter *enc = &s->u->encoder;
    forward_buffers *fb = &s->fb;
    const int64_t d = cfg->hidden_size, ff = cfg->intermediate_size, hd = cfg->head_dim;
    const int64_t hq = cfg->num_attention_heads, hkv = cfg->num_key_value_heads, V = cfg->vocab_size;
    const int64_t qd = hq * hd, kvd = hkv * hd, C = s->C, M = s->M, seg = C + M, n = nb * seg;
    const int64_t L = cfg->num_hidden_layers;
    const float eps = cfg->rms_norm_eps, theta = cfg->rope_theta, pos_scale = cfg->rope_scaling_factor;
    const float scale = 1.0f / sqrtf((float)hd);
    if (nb < 1 || nb > s->enc_batch) return KERN_ESHAPE;

    const int32_t *emb_ids;
    TRY(stage_inputs(s, kc, ids, nb, &emb_ids));
    for (int64_t b = 0; b < nb; b++) { /* x [nb][C + M, d] */
        float *xb = fb->x + b * seg * d;
        TRY(be->embed(kc, xb, w->tok_embd.data, w->tok_embd.dt, V, d, emb_ids + b * C, C));
        for (int64_t i = 0; i < M; i++)
            TRY(be->mem_copy(kc, xb + (C + i) * d, s->u->retrieval_token, (size_t)d * sizeof(float), KERN_D2D));
    }

    for (int32_t l = 0; l < L; l++) {
        const layer_weights *Lw = &w->layers[l];
        TRY(be->rmsnorm(kc, fb->xn, NULL, fb->x, Lw->attn_norm.data, Lw->attn_norm.dt, n, d, eps));
        for (int64_t b = 0; b < nb; b++) /* h [nb][n_layer][M, d]: what the transfer head reads */
            TRY(be->mem_copy(kc, s->h + (size_t)((b * L + l) * M * d), fb->xn + (b * seg + C) * d,
                             (size_t)(M * d) * sizeof(float), KERN_D2D));
        if (l == L - 1) break;

        /* q, v with the encoder's LoRA (before RoPE, as peft adds it to the projection's output); k plain */
        TRY(be->matmul(kc, fb->q, fb->xn, Lw->wq.data, Lw->wq.dt, n, qd, d, 0.f));
        TRY(be->matmul(kc, fb->k, fb->xn, Lw->wk.data, Lw->wk.dt, n, kvd, d, 0.f));
        TRY(be->matmul(kc, fb->v, fb->xn, Lw->wv.data, Lw->wv.dt, n, kvd, d, 0.f));
        TRY(lora_apply(lora_pair_at(enc, l, LORA_Q), enc->r, be, kc, fb->q, fb->xn, n, qd, d, fb->lora_t));
        TRY(lora_apply(lora_pair_at(enc, l, LORA_V), enc->r, be, kc, fb->v, fb->xn, n, kvd, d, fb->lora_t));
        TRY(be->rope(kc, fb->q, n, hq, hd, fb->pos, theta, pos_scale));
        TRY(be->rope(kc, fb->k, n, hkv, hd, fb->pos, theta, pos_scale));

        /* attention per segment [C + M, qd]: ordinary rows causal among themselves, then the <mem> rows */
        for (int64_t b = 0; b < nb; b++) {
            const int64_t r0 = b * seg;
            float *att = fb->att + r0 * qd;
            const float *q = fb->q + r0 * qd, *k = fb->k + r0 * kvd, *v = fb->v + r0 * kvd;
            TRY(be->attention(kc, att, NULL, q, k, v, C, C, 0, hq, hkv, hd, scale));
            TRY(mem_attention(s, kc, att, q, k, v, hq, hkv, hd, scale));
        }
        TRY(be->matmul(kc, fb->x, fb->att, Lw->wo.data, Lw->wo.dt, n, d, qd, 1.f));

        /* MLP */
        TRY(be->rmsnorm(kc, fb->xn, NULL, fb->x, Lw->ffn_norm.data, Lw->ffn_norm.dt, n, d, eps));
        TRY(be->matmul(kc, fb->gate, fb->xn, Lw->w_gate.data, Lw->w_gate.dt, n, ff, d, 0.f));
        TRY(be->matmul(kc, fb->up, fb->xn, Lw->w_up.data, Lw->w_up.dt, n, ff, d, 0.f));
        TRY(be->swiglu(kc, fb->gate, fb->gate, fb->up, n * ff));
        TRY(be->matmul(kc, fb->x, fb->gate, Lw->w_down.data, Lw->w_down.dt, n, d, ff, 1.f));
    }
    return KERN_OK;
}
