/*
 * llama_forward.c — one batch through a LLaMA decoder:
 *   x = embed(tokens)
 *   per layer: xn = rmsnorm(x); q,k,v = xn.Wq,Wk,Wv; rope(q,k); k,v -> each sequence's cache;
 *              att = attention(q, K, V) per sequence; x += att.Wo
 *              xn = rmsnorm(x); x += (silu(xn.Wg) * xn.Wu).Wd
 *   logits = rmsnorm(x).lm_head for the rows that want them (or rmsnorm(x) itself, for embeddings)
 * The rows of all sequences are stacked, so each weight matrix is streamed once per step however many
 * sequences decode together. The residual adds are fused into the output projections (matmul beta = 1).
 *
 * Memory goes through the backend (kern_backend mem_*): on the CPU these are malloc/memcpy, so the host path is
 * unchanged; on CUDA the weights, KV caches and activations stay on the device and only token ids/positions
 * (up, one copy per step) and the wanted logits (down, after lm_head) cross the bus.
 */
#include "llama_forward.h"

#include "lora.h"
#include "memory.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int kv_cache_init(kv_cache *kv, const model_config *cfg, int32_t n_ctx, const kern_backend *be) {
    kv->be = be;
    kv->n_layer = cfg->num_hidden_layers;
    kv->n_ctx = n_ctx;
    kv->kv_dim = cfg->num_key_value_heads * cfg->head_dim;
    size_t bytes = (size_t)kv->n_layer * (size_t)n_ctx * (size_t)kv->kv_dim * sizeof(float);
    kv->k = be->mem_alloc(bytes);
    kv->v = be->mem_alloc(bytes);
    if (!kv->k || !kv->v) {
        kv_cache_free(kv);
        return -1;
    }
    return 0;
}

void kv_cache_free(kv_cache *kv) {
    if (kv->be) {
        kv->be->mem_free(kv->k);
        kv->be->mem_free(kv->v);
    }
    kv->k = kv->v = NULL;
}

int forward_buffers_init(forward_buffers *fb, const model_config *cfg, int32_t n_batch, const kern_backend *be) {
    size_t nb = (size_t)n_batch, d = (size_t)cfg->hidden_size, ff = (size_t)cfg->intermediate_size;
    size_t qd = (size_t)cfg->num_attention_heads * (size_t)cfg->head_dim;
    size_t kvd = (size_t)cfg->num_key_value_heads * (size_t)cfg->head_dim;
    memset(fb, 0, sizeof *fb);
    fb->be = be;
    fb->n_batch = n_batch;
    fb->x = be->mem_alloc(nb * d * sizeof(float));
    fb->xn = be->mem_alloc(nb * d * sizeof(float));
    /* q and gate also hold a one-row step's fused q|k|v and gate|up outputs (see llama_forward_batch) */
    fb->q = be->mem_alloc((nb * qd > qd + 2 * kvd ? nb * qd : qd + 2 * kvd) * sizeof(float));
    fb->k = be->mem_alloc(nb * kvd * sizeof(float));
    fb->v = be->mem_alloc(nb * kvd * sizeof(float));
    fb->att = be->mem_alloc(nb * qd * sizeof(float));
    fb->gate = be->mem_alloc((nb > 2 ? nb : 2) * ff * sizeof(float));
    fb->up = be->mem_alloc(nb * ff * sizeof(float));
    fb->pos = be->mem_alloc(2 * nb * sizeof(int32_t));
    fb->staging = be->host_memory ? fb->pos : malloc(2 * nb * sizeof(int32_t));
    if (!fb->x || !fb->xn || !fb->q || !fb->k || !fb->v || !fb->att || !fb->gate || !fb->up || !fb->pos ||
        !fb->staging) {
        forward_buffers_free(fb);
        return -1;
    }
    return 0;
}

void forward_buffers_free(forward_buffers *fb) {
    const kern_backend *be = fb->be;
    if (be) {
        float *bufs[] = {fb->x, fb->xn, fb->q, fb->k, fb->v, fb->att, fb->gate, fb->up, fb->logits, fb->lora_t};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) be->mem_free(bufs[i]);
        if (fb->staging != fb->pos) free(fb->staging);
        be->mem_free(fb->pos);
    }
    memset(fb, 0, sizeof *fb);
}

/* ---- weights on a device backend */

typedef struct {
    const void *host;
    void *dev;
    size_t bytes;      /* on the device */
    kern_dtype host_dt; /* quantized weights go up dequantized to bf16: the CUDA kernels have no quantized paths */
    size_t elems;
} upload_item;

static void collect(upload_item *items, size_t *n, const weight_ref *r, size_t elems) {
    for (size_t i = 0; i < *n; i++)
        if (items[i].host == r->data) return; /* tied lm_head: same tensor, copied once */
    kern_dtype dev_dt = kern_dtype_is_quant(r->dt) ? KERN_BF16 : r->dt;
    items[(*n)++] = (upload_item){.host = r->data, .bytes = kern_dtype_bytes(dev_dt, (int64_t)elems),
                                  .host_dt = r->dt, .elems = elems};
}

/* One item to the device; quantized weights are dequantized to bf16 on the host in slices first. */
static int upload_item_copy(const kern_backend *be, const upload_item *it) {
    if (!kern_dtype_is_quant(it->host_dt))
        return be->mem_copy(NULL, it->dev, it->host, it->bytes, KERN_H2D) == KERN_OK ? 0 : -1;
    const size_t slice = 1u << 20; /* elements per slice, a multiple of every block (32, k-quants 256) */
    float *f = malloc(slice * sizeof(float));
    uint16_t *h = malloc(slice * sizeof(uint16_t));
    int rc = f && h ? 0 : -1;
    for (size_t e0 = 0; rc == 0 && e0 < it->elems; e0 += slice) {
        size_t ne = it->elems - e0 < slice ? it->elems - e0 : slice;
        kern_cpu_widen(f, (const char *)it->host + kern_dtype_bytes(it->host_dt, (int64_t)e0), it->host_dt, (int64_t)ne);
        for (size_t i = 0; i < ne; i++) h[i] = kern_f32_to_bf16(f[i]);
        if (be->mem_copy(NULL, (uint16_t *)it->dev + e0, h, ne * sizeof(uint16_t), KERN_H2D) != KERN_OK) rc = -1;
    }
    free(f);
    free(h);
    return rc;
}

static const void *device_ptr(const upload_item *items, size_t n, const void *host) {
    for (size_t i = 0; i < n; i++)
        if (items[i].host == host) return items[i].dev;
    return NULL;
}

int llama_weights_upload(llama_weights *w, const model_config *cfg, const kern_backend *be, void **block,
                         uint64_t *bytes) {
    *block = NULL;
    if (bytes) *bytes = 0;
    if (be->host_memory) return 0;
    size_t d = (size_t)cfg->hidden_size, ff = (size_t)cfg->intermediate_size, V = (size_t)cfg->vocab_size;
    size_t qd = (size_t)cfg->num_attention_heads * (size_t)cfg->head_dim;
    size_t kvd = (size_t)cfg->num_key_value_heads * (size_t)cfg->head_dim;
    size_t n_layer = (size_t)cfg->num_hidden_layers, n = 0;
    upload_item *items = malloc((3 + 11 * n_layer) * sizeof *items);
    if (!items) return -1;
    collect(items, &n, &w->tok_embd, V * d);
    collect(items, &n, &w->out_norm, d);
    collect(items, &n, &w->lm_head, V * d);
    for (size_t l = 0; l < n_layer; l++) {
        const layer_weights *L = &w->layers[l];
        collect(items, &n, &L->attn_norm, d);
        collect(items, &n, &L->wq, qd * d);
        collect(items, &n, &L->wk, kvd * d);
        collect(items, &n, &L->wv, kvd * d);
        collect(items, &n, &L->wo, d * qd);
        collect(items, &n, &L->ffn_norm, d);
        collect(items, &n, &L->w_gate, ff * d);
        collect(items, &n, &L->w_up, ff * d);
        collect(items, &n, &L->w_down, d * ff);
        if (L->q_norm.data) collect(items, &n, &L->q_norm, (size_t)cfg->head_dim);
        if (L->k_norm.data) collect(items, &n, &L->k_norm, (size_t)cfg->head_dim);
    }
    size_t total = 0; /* one allocation, every tensor 256-byte aligned (vector loads, cuBLAS) */
    for (size_t i = 0; i < n; i++) total += (items[i].bytes + 255) & ~(size_t)255;
    char *dev = be->mem_alloc(total);
    int rc = dev ? 0 : -1;
    for (size_t i = 0, off = 0; rc == 0 && i < n; i++) {
        items[i].dev = dev + off;
        if (upload_item_copy(be, &items[i])) rc = -1;
        off += (items[i].bytes + 255) & ~(size_t)255;
    }
    if (rc != 0) {
        be->mem_free(dev);
        free(items);
        return -1;
    }
#define REBIND(ref) ((ref).data = device_ptr(items, n, (ref).data), (ref).dt = kern_dtype_is_quant((ref).dt) ? KERN_BF16 : (ref).dt)
    REBIND(w->tok_embd);
    REBIND(w->out_norm);
    REBIND(w->lm_head);
    for (size_t l = 0; l < n_layer; l++) {
        layer_weights *L = &w->layers[l];
        REBIND(L->attn_norm); REBIND(L->wq); REBIND(L->wk); REBIND(L->wv); REBIND(L->wo);
        REBIND(L->ffn_norm); REBIND(L->w_gate); REBIND(L->w_up); REBIND(L->w_down);
        if (L->q_norm.data) REBIND(L->q_norm);
        if (L->k_norm.data) REBIND(L->k_norm);
    }
#undef REBIND
    free(items);
    *block = dev;
    if (bytes) *bytes = total;
    return 0;
}

#define TRY(call)                                                                                               \
    do {                                                                                                        \
        int rc_ = (call);                                                                                       \
        if (rc_ != KERN_OK) return rc_;                                                                         \
    } while (0)

/* Final norm + lm_head over the rows that want logits, gathered into one block (one matmul), then scattered.
 * Rows of sequences that want hidden states instead are gathered after them, normed with them and downloaded.
 * Host backends write straight into the caller's buffer when there is one sequence; device backends compute
 * into fb->logits and download each sequence's rows (the download waits for the step to finish). */
static int forward_logits(const model_config *cfg, const llama_weights *w, const kern_backend *be, kern_ctx *kc,
                          forward_buffers *fb, const forward_seq *seqs, int32_t n_seqs) {
    const int64_t d = cfg->hidden_size, V = cfg->vocab_size;
    int32_t rows = 0, hrows = 0, r0 = 0;
    for (int32_t s = 0; s < n_seqs; s++) {
        int32_t nl = seqs[s].n - seqs[s].logits_from;
        if (nl > 0 && seqs[s].hidden) hrows += nl;
        else if (nl > 0) rows += nl;
    }
    for (int32_t s = 0, lr = 0, hr = rows; s < n_seqs; s++) { /* gather into xn: logits rows, then hidden rows */
        int32_t nl = seqs[s].n - seqs[s].logits_from;
        int32_t *at = seqs[s].hidden ? &hr : &lr;
        if (nl > 0)
            TRY(be->mem_copy(kc, fb->xn + (size_t)*at * d, fb->x + (size_t)(r0 + seqs[s].logits_from) * d,
                             (size_t)nl * d * sizeof(float), KERN_D2D));
        *at += nl > 0 ? nl : 0;
        r0 += seqs[s].n;
    }
    if (rows + hrows == 0) return be->sync(kc);
    TRY(be->rmsnorm(kc, fb->xn, NULL, fb->xn, w->out_norm.data, w->out_norm.dt, rows + hrows, d, cfg->rms_norm_eps));
    for (int32_t s = 0, hr = rows; s < n_seqs; s++) {
        int32_t nl = seqs[s].n - seqs[s].logits_from;
        if (nl <= 0 || !seqs[s].hidden) continue;
        TRY(be->mem_copy(kc, seqs[s].hidden, fb->xn + (size_t)hr * d, (size_t)nl * d * sizeof(float), KERN_D2H));
        hr += nl;
    }
    if (rows == 0) return be->sync(kc);
    if (n_seqs == 1 && be->host_memory) /* straight into the caller's buffer */
        return be->matmul(kc, seqs[0].logits, fb->xn, w->lm_head.data, w->lm_head.dt, rows, V, d, 0.f);
    size_t need = (size_t)rows * (size_t)V;
    float *all;
    if (be->host_memory) {
        all = malloc(need * sizeof(float));
    } else {
        if (need > fb->logits_cap) { /* grown rarely: only logits_all prefills need more than a few rows */
            TRY(be->sync(kc));
            be->mem_free(fb->logits);
            fb->logits_cap = 0;
            fb->logits = be->mem_alloc(need * sizeof(float));
            if (fb->logits) fb->logits_cap = need;
        }
        all = fb->logits;
    }
    if (!all) return KERN_ENOMEM;
    int rc = be->matmul(kc, all, fb->xn, w->lm_head.data, w->lm_head.dt, rows, V, d, 0.f);
    for (int32_t s = 0, r = 0; rc == KERN_OK && s < n_seqs; s++) {
        int32_t nl = seqs[s].n - seqs[s].logits_from;
        if (nl <= 0 || seqs[s].hidden) continue;
        rc = be->mem_copy(kc, seqs[s].logits, all + (size_t)r * V, (size_t)nl * V * sizeof(float), KERN_D2H);
        r += nl;
    }
    if (be->host_memory) free(all);
    return rc;
}

/* Whether weight b starts right where a (a_elems elements) ends, in the same dtype: then a and b can be read as one
 * matrix. The device upload lays a layer's wq|wk|wv and w_gate|w_up out back to back (256-byte aligned, which
 * LLaMA shapes already are); host checkpoints usually are not. */
static bool adjacent(const weight_ref *a, int64_t a_elems, const weight_ref *b) {
    return a->dt == b->dt && (const char *)a->data + kern_dtype_bytes(a->dt, a_elems) == (const char *)b->data;
}

int forward_buffers_reserve_lora(forward_buffers *fb, int32_t r) {
    size_t need = (size_t)fb->n_batch * (size_t)r;
    if (need <= fb->lora_cap) return 0;
    float *t = fb->be->mem_alloc(need * sizeof(float));
    if (!t) return -1;
    fb->be->mem_free(fb->lora_t);
    fb->lora_t = t;
    fb->lora_cap = need;
    return 0;
}

/* y[rows, out] += each sequence's adapter delta at (layer l, target t) over its own rows of x[rows, in]. */
static int add_lora(const forward_seq *seqs, int32_t n_seqs, int32_t l, lora_target t, const kern_backend *be,
                    kern_ctx *kc, forward_buffers *fb, float *y, const float *x, int64_t out, int64_t in) {
    int64_t r0 = 0;
    for (int32_t s = 0; s < n_seqs; r0 += seqs[s].n, s++) {
        const lora_pair *p = lora_pair_at(seqs[s].lora, l, t);
        if (!p) continue;
        if ((size_t)seqs[s].n * (size_t)seqs[s].lora->r > fb->lora_cap) return KERN_ESHAPE; /* not reserved */
        TRY(lora_apply(p, seqs[s].lora->r, be, kc, y + r0 * out, x + r0 * in, seqs[s].n, out, in, fb->lora_t));
    }
    return KERN_OK;
}

int llama_forward_batch(const model_config *cfg, const llama_weights *w, const kern_backend *be, kern_ctx *kc,
                        forward_buffers *fb, const forward_seq *seqs, int32_t n_seqs) {
    const int64_t d = cfg->hidden_size, ff = cfg->intermediate_size, hd = cfg->head_dim;
    const int64_t hq = cfg->num_attention_heads, hkv = cfg->num_key_value_heads, V = cfg->vocab_size;
    const int64_t qd = hq * hd, kvd = hkv * hd;
    const float eps = cfg->rms_norm_eps, theta = cfg->rope_theta, pos_scale = cfg->rope_scaling_factor;
    const float scale = 1.0f / sqrtf((float)hd);

    if (n_seqs <= 0) return KERN_ESHAPE;
    bool any_lora = false; /* adapted projections are separate matmuls: no fused q|k|v or gate|up GEMV */
    for (int32_t s = 0; s < n_seqs; s++) any_lora |= seqs[s].lora != NULL;
    /* What each layer does with memory: asked once per call (one model, one kind: the first memory answers) */
    const memory_ops *mem = NULL;
    const uint8_t *mem_layers = NULL; /* [n_layer] MEMORY_LAYER_* flags, NULL: no sequence has memory */
    for (int32_t s = 0; s < n_seqs; s++) {
        if (!seqs[s].mem) continue;
        if (mem && seqs[s].mem != mem) return KERN_ESHAPE;
        if (!mem) mem_layers = (mem = seqs[s].mem)->layers(seqs[s].mem_state);
    }
    int64_t n = 0; /* rows of all sequences */
    for (int32_t s = 0; s < n_seqs; s++) {
        const forward_seq *q = &seqs[s];
        if (q->n <= 0 || q->pos0 < 0 || q->pos0 + q->n > q->kv->n_ctx || q->logits_from < 0 || q->logits_from > q->n)
            return KERN_ESHAPE;
        if (n + q->n > fb->n_batch) return KERN_ESHAPE;
        for (int32_t i = 0; i < q->n; i++) fb->staging[n + i] = q->pos0 + i;
        n += q->n;
    }
    if (be->host_memory) { /* ids straight from the caller, positions already in place (staging == pos) */
        for (int32_t s = 0, r = 0; s < n_seqs; r += seqs[s].n, s++)
            TRY(be->embed(kc, fb->x + r * d, w->tok_embd.data, w->tok_embd.dt, V, d, seqs[s].tokens, seqs[s].n));
    } else { /* positions then ids, one upload */
        int32_t *ids = fb->staging + n;
        for (int32_t s = 0, r = 0; s < n_seqs; r += seqs[s].n, s++)
            memcpy(ids + r, seqs[s].tokens, (size_t)seqs[s].n * sizeof(int32_t));
        TRY(be->mem_copy(kc, fb->pos, fb->staging, 2 * (size_t)n * sizeof(int32_t), KERN_H2D));
        TRY(be->embed(kc, fb->x, w->tok_embd.data, w->tok_embd.dt, V, d, fb->pos + n, n));
    }

    for (int32_t l = 0; l < cfg->num_hidden_layers; l++) {
        const layer_weights *L = &w->layers[l];

        /* attention sublayer: projections over all rows, attention per sequence over its own cache */
        TRY(be->rmsnorm(kc, fb->xn, NULL, fb->x, L->attn_norm.data, L->attn_norm.dt, n, d, eps));
        /* A one-row step (batch-1 decode) reads wq|wk|wv as one matrix when they are adjacent: one GEMV streaming
         * a longer matrix instead of three short ones, and q|k (contiguous then) get RoPE in one call. */
        float *qb = fb->q, *kb = fb->k, *vb = fb->v;
        const bool fused_qkv = n == 1 && !any_lora && adjacent(&L->wq, qd * d, &L->wk) &&
                               adjacent(&L->wk, kvd * d, &L->wv);
        if (fused_qkv) {
            kb = qb + qd;
            vb = kb + kvd;
            TRY(be->matmul(kc, qb, fb->xn, L->wq.data, L->wq.dt, 1, qd + 2 * kvd, d, 0.f));
        } else {
            TRY(be->matmul(kc, qb, fb->xn, L->wq.data, L->wq.dt, n, qd, d, 0.f));
            TRY(be->matmul(kc, kb, fb->xn, L->wk.data, L->wk.dt, n, kvd, d, 0.f));
            TRY(be->matmul(kc, vb, fb->xn, L->wv.data, L->wv.dt, n, kvd, d, 0.f));
            if (any_lora) { /* before RoPE, as peft adds the delta to the projection's output */
                TRY(add_lora(seqs, n_seqs, l, LORA_Q, be, kc, fb, qb, fb->xn, qd, d));
                TRY(add_lora(seqs, n_seqs, l, LORA_K, be, kc, fb, kb, fb->xn, kvd, d));
                TRY(add_lora(seqs, n_seqs, l, LORA_V, be, kc, fb, vb, fb->xn, kvd, d));
            }
        }
        if (L->q_norm.data) { /* qk_norm: each head of q and k RMS-normalized (rows of hd) before RoPE and memory */
            TRY(be->rmsnorm(kc, qb, NULL, qb, L->q_norm.data, L->q_norm.dt, n * hq, hd, eps));
            TRY(be->rmsnorm(kc, kb, NULL, kb, L->k_norm.data, L->k_norm.dt, n * hkv, hd, eps));
        }
        const unsigned mflags = mem_layers ? mem_layers[l] : 0;
        if (mflags & MEMORY_LAYER_KV) /* keys before RoPE (LongLLaMA: what a flush moves to memory) */
            for (int32_t s = 0, r0 = 0; s < n_seqs; r0 += seqs[s].n, s++)
                if (seqs[s].mem)
                    TRY(mem->on_layer_kv(seqs[s].mem_state, l, be, kc, kb + (size_t)r0 * kvd, vb + (size_t)r0 * kvd,
                                         seqs[s].pos0, seqs[s].n));
        if (!(mflags & MEMORY_LAYER_NO_ROPE)) { /* LongLLaMA with mem_positionals false: no RoPE in memory layers */
            if (fused_qkv) {
                TRY(be->rope(kc, qb, 1, hq + hkv, hd, fb->pos, theta, pos_scale));
            } else {
                TRY(be->rope(kc, qb, n, hq, hd, fb->pos, theta, pos_scale));
                TRY(be->rope(kc, kb, n, hkv, hd, fb->pos, theta, pos_scale));
            }
        }
        int64_t r = 0;
        for (int32_t s = 0; s < n_seqs; s++) {
            const forward_seq *q = &seqs[s];
            size_t layer_off = (size_t)l * (size_t)q->kv->n_ctx * (size_t)kvd; /* cache is (n_ctx, kvd) per layer */
            float *kl = q->kv->k + layer_off, *vl = q->kv->v + layer_off;
            TRY(be->mem_copy(kc, kl + (size_t)q->pos0 * kvd, kb + r * kvd, (size_t)q->n * kvd * sizeof(float),
                             KERN_D2D));
            TRY(be->mem_copy(kc, vl + (size_t)q->pos0 * kvd, vb + r * kvd, (size_t)q->n * kvd * sizeof(float),
                             KERN_D2D));
            if ((mflags & MEMORY_LAYER_ATTEND) && q->mem)
                TRY(mem->attend(q->mem_state, l, be, kc, fb->att + r * qd, qb + r * qd, kl, vl, q->n, q->pos0 + q->n,
                                q->pos0, hq, hkv, hd, scale));
            else
                TRY(be->attention(kc, fb->att + r * qd, NULL, qb + r * qd, kl, vl, q->n, q->pos0 + q->n, q->pos0,
                                  hq, hkv, hd, scale));
            r += q->n;
        }
        TRY(be->matmul(kc, fb->x, fb->att, L->wo.data, L->wo.dt, n, d, qd, 1.f));
        if (any_lora) TRY(add_lora(seqs, n_seqs, l, LORA_O, be, kc, fb, fb->x, fb->att, d, qd));

        /* MLP sublayer */
        TRY(be->rmsnorm(kc, fb->xn, NULL, fb->x, L->ffn_norm.data, L->ffn_norm.dt, n, d, eps));
        if (n == 1 && !any_lora && adjacent(&L->w_gate, ff * d, &L->w_up)) { /* gate|up as one GEMV, as q|k|v */
            TRY(be->matmul(kc, fb->gate, fb->xn, L->w_gate.data, L->w_gate.dt, 1, 2 * ff, d, 0.f));
            TRY(be->swiglu(kc, fb->gate, fb->gate, fb->gate + ff, ff));
        } else {
            TRY(be->matmul(kc, fb->gate, fb->xn, L->w_gate.data, L->w_gate.dt, n, ff, d, 0.f));
            TRY(be->matmul(kc, fb->up, fb->xn, L->w_up.data, L->w_up.dt, n, ff, d, 0.f));
            if (any_lora) {
                TRY(add_lora(seqs, n_seqs, l, LORA_GATE, be, kc, fb, fb->gate, fb->xn, ff, d));
                TRY(add_lora(seqs, n_seqs, l, LORA_UP, be, kc, fb, fb->up, fb->xn, ff, d));
            }
            TRY(be->swiglu(kc, fb->gate, fb->gate, fb->up, n * ff));
        }
        TRY(be->matmul(kc, fb->x, fb->gate, L->w_down.data, L->w_down.dt, n, d, ff, 1.f));
        if (any_lora) TRY(add_lora(seqs, n_seqs, l, LORA_DOWN, be, kc, fb, fb->x, fb->gate, d, ff));
    }
    return forward_logits(cfg, w, be, kc, fb, seqs, n_seqs);
}

int llama_forward(const model_config *cfg, const llama_weights *w, const kern_backend *be, kern_ctx *kc,
                  kv_cache *kv, forward_buffers *fb, const int32_t *tokens, int32_t n, int32_t pos0,
                  int32_t logits_from, float *logits) {
    forward_seq s = {.kv = kv, .tokens = tokens, .n = n, .pos0 = pos0, .logits_from = logits_from, .logits = logits};
    return llama_forward_batch(cfg, w, be, kc, fb, &s, 1);
}
