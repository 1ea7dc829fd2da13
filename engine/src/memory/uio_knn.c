/*
 * uio_knn.c — a kNN memory for UIO, beyond the reference: UIO's compressed memory past a budget moves to a kNN
 * memstore per layer and is retrieved top-k per query, as LongLLaMA's memory is (uio_memory.h, struct uio_knn;
 * tests/fixtures/uio_knn/README.md gives the semantics and the PyTorch statement of them).
 *
 * Positions: the reference's RoPE table bounds memory + raw (4096 positions). Here the cache keeps the B newest
 * <mem> entries at positions 0..B-1 and the raw tokens after them, as the reference lays out [memory | raw]; an
 * entry leaving the cache has no position left in it, so it is stored unrotated — "at position 0", the choice
 * LongLLaMA's memory layers make for their memory keys — and a query at position p
 * scores it as q_p . k. The transfer head produces keys before RoPE, so stored keys are exact (never un-rotated).
 * When entries leave, those staying shift down by as many rows and are rotated again, from their pre-RoPE copies
 * (kpre), at their new positions: the cache always holds what the reference would hold with those entries alone.
 *
 * Attention: every layer of every UIO context has MEMORY_LAYER_ATTEND (uio_ops.c says why); without a budget or
 * with an empty store it is the plain attention op, the same call (so a budget the memory never passes changes no
 * bit), else attention_mem over the store (all rows, or the top-k ids per query
 * and head) and the cache in one fp32 softmax. Stores are fp32 (the cache's dtype): dense over the store equals the
 * dense statement in uio_reference.py. GPU backends read a device copy of each store (memstore's mem_device) and
 * search it there when the index is exact, as longllama_memory.c does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot.h"
#include "snapshot_values.h"
#include "uio_memory.h"

#define TAG_KNN SNAP_TAG('U', 'K', 'N', 'N')                   /* budget, local entries, stored entries, kpre */
#define TAG_STORE(l) SNAP_TAG('U', (l) & 0xff, ((l) >> 8) & 0xff, 0x7e) /* layer l's store */

static size_t kv_dim(const uio_state *s) {
    return (size_t)s->cfg->num_key_value_heads * (size_t)s->cfg->head_dim;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    void *n = realloc(*p, need * elem);
    if (!n) return -1;
    *p = n;
    *cap = need;
    return 0;
}

static float *stage(uio_knn *k, size_t floats) {
    return grow((void **)&k->stage, &k->stage_cap, floats, sizeof(float)) ? NULL : k->stage;
}

mnemo_status uio_knn_init(uio_state *s, const memory_args *a, char *err, size_t errlen) {
    const mnemo_context_params *p = a->params;
    uio_knn *k = &s->knn;
    memset(k, 0, sizeof *k);
    if (p->uio_mem_budget < 0) {
        snprintf(err, errlen, "uio_mem_budget must be >= 0 (got %d)", p->uio_mem_budget);
        return MNEMO_ERR_INVALID_ARG;
    }
    if (p->uio_mem_budget == 0) return MNEMO_OK;
    if (p->uio_mem_budget + s->C > s->n_ctx) {
        snprintf(err, errlen,
                 "uio_mem_budget %d leaves no room for a segment: %d <mem> entries and chunk_size %d raw tokens need "
                 "n_ctx >= %d (got %d)",
                 p->uio_mem_budget, p->uio_mem_budget, s->C, p->uio_mem_budget + s->C, s->n_ctx);
        return MNEMO_ERR_INVALID_ARG;
    }
    if (p->mem_knn_k < 0 || p->mem_dense_rows < 0) {
        snprintf(err, errlen, "mem_knn_k and mem_dense_rows must be >= 0 (got %d, %lld)", p->mem_knn_k,
                 (long long)p->mem_dense_rows);
        return MNEMO_ERR_INVALID_ARG;
    }
    mem_params mp = mem_default_params();
    mp.dtype = MEM_DTYPE_F32;
    switch (p->mem_index) {
    case MNEMO_MEM_INDEX_FLAT: mp.index = MEM_INDEX_FLAT; break;
    case MNEMO_MEM_INDEX_BRUTE: mp.index = MEM_INDEX_NONE; break;
    case MNEMO_MEM_INDEX_IVF: mp.index = MEM_INDEX_IVF; break;
    case MNEMO_MEM_INDEX_HNSW: mp.index = MEM_INDEX_HNSW; break;
    case MNEMO_MEM_INDEX_IVF_GROW: mp.index = MEM_INDEX_IVF_GROW; break;
    default: snprintf(err, errlen, "unknown mem_index %d", (int)p->mem_index); return MNEMO_ERR_INVALID_ARG;
    }
    int max_nprobe = mp.index == MEM_INDEX_IVF ? mp.ivf_nlist : 65536;
    if (p->mem_nprobe < 0 || p->mem_nprobe > max_nprobe) {
        snprintf(err, errlen, "mem_nprobe must be in 0..%d for this index (got %d)", max_nprobe, p->mem_nprobe);
        return MNEMO_ERR_INVALID_ARG;
    }
    if (p->mem_nprobe > 0) mp.ivf_nprobe = p->mem_nprobe;
    if (p->mem_knn_k == 0) mp.index = MEM_INDEX_NONE; /* dense over the store: no index to keep */
    const kern_backend *be = s->be;
    k->knn_on_device = mem_device_searches(be, mp.index, p->mem_knn_k);
    if (k->knn_on_device) mp.index = mem_device_host_index(mp.index);
    k->budget = p->uio_mem_budget;
    k->knn_k = p->mem_knn_k;
    k->dense_rows = p->mem_dense_rows;
    k->max_bytes = p->mem_max_bytes;
    const size_t L = (size_t)s->cfg->num_hidden_layers, kvd = kv_dim(s);
    k->store = calloc(L, sizeof *k->store);
    k->kpre = malloc(L * ((size_t)k->budget + (size_t)s->M) * kvd * sizeof(float));
    k->epos = be->mem_alloc((size_t)k->budget * sizeof(int32_t));
    int32_t *ep = be->host_memory ? k->epos : malloc((size_t)k->budget * sizeof(int32_t));
    bool ok = k->store && k->kpre && k->epos && ep;
    if (ok) {
        for (int32_t i = 0; i < k->budget; i++) ep[i] = i;
        if (!be->host_memory) { /* one upload, kept for good (no kernel context here: a temporary one) */
            kern_ctx *kc = be->ctx_new(1);
            ok = kc && be->mem_copy(kc, k->epos, ep, (size_t)k->budget * sizeof(int32_t), KERN_H2D) == KERN_OK &&
                 be->sync(kc) == KERN_OK;
            if (kc) be->ctx_free(kc);
            free(ep);
        }
    }
    for (size_t l = 0; ok && l < L; l++) {
        char why[200];
        if (!(k->store[l] = mem_store_new(s->cfg->num_key_value_heads, s->cfg->head_dim, &mp, why, sizeof why))) {
            snprintf(err, errlen, "UIO memory store: %s", why);
            return MNEMO_ERR_NOMEM;
        }
    }
    if (ok && !be->host_memory) {
        ok = (k->dev = calloc(L, sizeof *k->dev)) != NULL;
        for (size_t l = 0; ok && l < L; l++)
            ok = (k->dev[l] = mem_device_new(be, s->cfg->num_key_value_heads, s->cfg->head_dim, MEM_DTYPE_F32)) != NULL;
    }
    if (!ok) {
        snprintf(err, errlen, "out of memory for the UIO memory budget (%d entries)", k->budget);
        return MNEMO_ERR_NOMEM;
    }
    return MNEMO_OK;
}

void uio_knn_free(uio_state *s) {
    uio_knn *k = &s->knn;
    const size_t L = (size_t)s->cfg->num_hidden_layers;
    for (size_t l = 0; k->store && l < L; l++) mem_store_free(k->store[l]);
    for (size_t l = 0; k->dev && l < L; l++) mem_device_free(k->dev[l]);
    if (s->be) {
        s->be->mem_free(k->epos);
        if (k->dev_sel) s->be->mem_free(k->dev_sel);
    }
    free(k->store);
    free(k->dev);
    free(k->kpre);
    free(k->sel);
    free(k->ids);
    free(k->scores);
    free(k->stage);
    memset(k, 0, sizeof *k);
}

void uio_knn_clear(uio_state *s) {
    uio_knn *k = &s->knn;
    for (int32_t l = 0; k->budget && l < s->cfg->num_hidden_layers; l++) {
        mem_store_clear(k->store[l]);
        if (k->dev) mem_device_invalidate(k->dev[l]);
    }
}

uint64_t uio_knn_entries(const uio_state *s) {
    return s->knn.budget ? (uint64_t)mem_store_size(s->knn.store[0]) : 0;
}

static mem_bytes bytes_after(const uio_state *s, size_t n) {
    mem_bytes t = {0, 0, 0};
    for (int32_t l = 0; s->knn.budget && l < s->cfg->num_hidden_layers; l++) {
        mem_bytes b = n ? mem_store_bytes_after(s->knn.store[l], n) : mem_store_bytes(s->knn.store[l]);
        t.keys += b.keys;
        t.values += b.values;
        t.index += b.index;
    }
    return t;
}

mem_bytes uio_knn_bytes(const uio_state *s) { return bytes_after(s, 0); }

#define TRYK(call)                                                                                              \
    do {                                                                                                        \
        if ((call) != KERN_OK) goto backend;                                                                    \
    } while (0)

mnemo_status uio_knn_evict(uio_state *s, const memory_host *h) {
    uio_knn *k = &s->knn;
    if (!k->budget || s->n_mem <= k->budget) return MNEMO_OK;
    const kern_backend *be = s->be;
    const size_t kvd = kv_dim(s), row = kvd * sizeof(float), cap = (size_t)k->budget + (size_t)s->M;
    const int32_t E = s->n_mem - k->budget, B = k->budget; /* entries leaving; staying (rows E.. -> 0..) */
    if (k->max_bytes) {
        mem_bytes b = bytes_after(s, (size_t)E);
        uint64_t after = (uint64_t)b.keys + b.values + b.index;
        if (after > k->max_bytes) {
            snprintf(h->err, h->errlen,
                     "memory limit reached: %llu <mem> entries stored; %d more would take the stores to %llu bytes, "
                     "past the limit of %llu",
                     (unsigned long long)uio_knn_entries(s), E, (unsigned long long)after,
                     (unsigned long long)k->max_bytes);
            return MNEMO_ERR_CONTEXT_FULL;
        }
    }
    for (int32_t l = 0; l < s->cfg->num_hidden_layers; l++) {
        float *kp = k->kpre + (size_t)l * cap * kvd; /* host [cap][kvd] */
        const size_t off = (size_t)l * (size_t)h->kv->n_ctx * kvd;
        float *ck = h->kv->k + off, *cv = h->kv->v + off; /* the layer's cache rows (backend memory) */
        const float *vals = cv;
        if (!be->host_memory) {
            float *st = stage(k, (size_t)E * kvd);
            if (!st) goto nomem;
            TRYK(be->mem_copy(h->kc, st, cv, (size_t)E * row, KERN_D2H));
            TRYK(be->sync(h->kc));
            vals = st;
        }
        if (mem_store_append(k->store[l], (size_t)E, kp, vals, kvd) != 0) {
            snprintf(h->err, h->errlen, "UIO memory store of layer %d: %s", l, mem_store_error(k->store[l]));
            return MNEMO_ERR_NOMEM;
        }
        /* shift down by E rows: chunks of at most E rows never overlap their source */
        memmove(kp, kp + (size_t)E * kvd, (size_t)B * row);
        for (int32_t j = 0; j < B; j += E) {
            int32_t m = B - j < E ? B - j : E;
            TRYK(be->mem_copy(h->kc, cv + (size_t)j * kvd, cv + (size_t)(j + E) * kvd, (size_t)m * row, KERN_D2D));
        }
        /* the keys again from their pre-RoPE copies, rotated at their new positions 0..B-1 */
        TRYK(be->mem_copy(h->kc, ck, kp, (size_t)B * row, be->host_memory ? KERN_D2D : KERN_H2D));
        TRYK(be->rope(h->kc, ck, B, s->cfg->num_key_value_heads, s->cfg->head_dim, k->epos, s->cfg->rope_theta,
                      s->cfg->rope_scaling_factor));
    }
    s->n_mem = B;
    return MNEMO_OK;
backend:
    snprintf(h->err, h->errlen, "moving UIO <mem> entries to the memory store failed (backend error)");
    return MNEMO_ERR_BACKEND;
nomem:
    snprintf(h->err, h->errlen, "out of memory moving UIO <mem> entries to the memory store");
    return MNEMO_ERR_NOMEM;
}

/* sel[(i*hq + h)*kk + j]: the kk best stored entries of query i, head h (the GQA heads of a group search the same
 * KV head). */
static int knn_select(uio_knn *k, mem_store *ms, const float *q, int64_t nq, int64_t hq, int64_t hkv, int64_t hd,
                      int64_t kk) {
    size_t ids_cap = k->ids_cap;
    if (grow((void **)&k->sel, &k->sel_cap, (size_t)(nq * hq * kk), sizeof *k->sel) ||
        grow((void **)&k->ids, &k->ids_cap, (size_t)(nq * kk), sizeof *k->ids) ||
        grow((void **)&k->scores, &ids_cap, (size_t)(nq * kk), sizeof *k->scores))
        return KERN_ENOMEM;
    for (int64_t h = 0; h < hq; h++) {
        if (mem_store_search(ms, (int)(h / (hq / hkv)), (size_t)nq, q + h * hd, (size_t)(hq * hd), (int)kk, k->ids,
                             k->scores) != 0)
            return KERN_EBACKEND;
        for (int64_t i = 0; i < nq; i++)
            memcpy(k->sel + (i * hq + h) * kk, k->ids + i * kk, (size_t)kk * sizeof *k->sel);
    }
    return KERN_OK;
}

static int64_t *device_sel(uio_knn *k, const kern_backend *be, kern_ctx *kc, size_t n, bool upload) {
    if (n > k->dev_sel_cap) {
        int64_t *p = be->mem_alloc(n * sizeof *p);
        if (!p) return NULL;
        be->sync(kc); /* the old ids may still be read by a queued kernel */
        be->mem_free(k->dev_sel);
        k->dev_sel = p;
        k->dev_sel_cap = n;
    }
    if (upload && be->mem_copy(kc, k->dev_sel, k->sel, n * sizeof *k->sel, KERN_H2D) != KERN_OK) return NULL;
    return k->dev_sel;
}

int uio_knn_attend(void *st, int32_t l, const kern_backend *be, kern_ctx *kc, float *out, const float *q,
                   const float *k, const float *v, int64_t nq, int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv,
                   int64_t hd, float scale) {
    uio_state *s = st;
    uio_knn *kn = &s->knn;
    mem_store *ms = kn->budget ? kn->store[l] : NULL;
    const int64_t n_st = ms ? (int64_t)mem_store_size(ms) : 0;
    if (n_st == 0) /* no budget, or nothing stored yet: exactly the reference's attention */
        return be->attention(kc, out, NULL, q, k, v, nq, nkv, q_pos0, hq, hkv, hd, scale);
    const void *host_k[hkv], *host_v[hkv];
    const void *const *mk = host_k, *const *mv = host_v;
    if (kn->dev) {
        int rc = mem_device_sync(kn->dev[l], ms, kc);
        if (rc != KERN_OK) return rc;
        mk = mem_device_keys(kn->dev[l]);
        mv = mem_device_values(kn->dev[l]);
    } else {
        for (int64_t g = 0; g < hkv; g++) {
            host_k[g] = mem_store_raw_keys(ms, (int)g);
            host_v[g] = mem_store_raw_values(ms, (int)g);
        }
    }
    const int64_t kk = kn->knn_k;
    if (kk == 0 || n_st <= kn->dense_rows) /* dense: every stored entry */
        return be->attention_mem(kc, out, q, k, v, nq, nkv, q_pos0, hq, hkv, hd, scale, mk, mv, KERN_F32, n_st,
                                 NULL, 0);
    if (kn->knn_on_device) {
        int64_t *dsel = device_sel(kn, be, kc, (size_t)(nq * hq * kk), false);
        if (!dsel) return KERN_ENOMEM;
        for (int64_t h = 0; h < hq; h++) {
            int rc = mem_device_search(kn->dev[l], kc, (int)(h / (hq / hkv)), q + h * hd, nq, hq * hd, (int)kk,
                                       dsel + h * kk, hq * kk);
            if (rc != KERN_OK) return rc;
        }
        return be->attention_mem(kc, out, q, k, v, nq, nkv, q_pos0, hq, hkv, hd, scale, mk, mv, KERN_F32, n_st,
                                 dsel, kk);
    }
    const float *hq_rows = q; /* the search runs on the host */
    if (!be->host_memory) {
        float *hrow = stage(kn, (size_t)(nq * hq * hd));
        if (!hrow) return KERN_ENOMEM;
        int rc = be->mem_copy(kc, hrow, q, (size_t)(nq * hq * hd) * sizeof(float), KERN_D2H);
        if (rc == KERN_OK) rc = be->sync(kc);
        if (rc != KERN_OK) return rc;
        hq_rows = hrow;
    }
    int rc = knn_select(kn, ms, hq_rows, nq, hq, hkv, hd, kk);
    if (rc != KERN_OK) return rc;
    const int64_t *sel = kn->sel;
    if (!be->host_memory && !(sel = device_sel(kn, be, kc, (size_t)(nq * hq * kk), true))) return KERN_ENOMEM;
    return be->attention_mem(kc, out, q, k, v, nq, nkv, q_pos0, hq, hkv, hd, scale, mk, mv, KERN_F32, n_st, sel, kk);
}

/* ---- snapshots: UKNN = {budget, local entries, stored entries} then kpre rows [0, local) of every layer; one
 * store section per layer (mem_store_save: rows; its index is rebuilt on load). */
int uio_knn_save(const uio_state *s, snap_writer *w) {
    const uio_knn *k = &s->knn;
    if (!k->budget) return 0;
    const size_t kvd = kv_dim(s), cap = (size_t)k->budget + (size_t)s->M;
    int64_t head[3] = {k->budget, s->n_mem, (int64_t)uio_knn_entries(s)};
    int rc = snap_section_begin(w, TAG_KNN);
    if (rc == 0) rc = snap_write(w, head, sizeof head);
    for (int32_t l = 0; rc == 0 && l < s->cfg->num_hidden_layers; l++)
        rc = snap_write(w, k->kpre + (size_t)l * cap * kvd, (uint64_t)s->n_mem * kvd * sizeof(float));
    if (rc == 0) rc = snap_section_end(w);
    for (int32_t l = 0; rc == 0 && l < s->cfg->num_hidden_layers; l++)
        rc = mem_store_save(k->store[l], w, TAG_STORE(l));
    return rc;
}

typedef struct {
    mem_store **stores; /* [n_layer] */
    const float *kpre;  /* the section's rows, in the reader's memory (alive until it closes) */
    int32_t n_local;
} knn_staged;

void uio_knn_load_discard(const uio_state *s, void *staged) {
    knn_staged *ks = staged;
    if (!ks) return;
    for (int32_t l = 0; ks->stores && l < s->cfg->num_hidden_layers; l++) mem_store_free(ks->stores[l]);
    free(ks->stores);
    free(ks);
}

mnemo_status uio_knn_load_check(const uio_state *s, const snap_reader *r, int32_t n_mem_local, int64_t n_stored,
                                void **staged, char *err, size_t errlen) {
    const uio_knn *k = &s->knn;
    *staged = NULL;
    const void *data;
    uint64_t len;
    bool has = snap_reader_find(r, TAG_KNN, &data, &len) == 0;
    int64_t head[3] = {0, n_mem_local, 0};
    if (has) {
        if (len < sizeof head) goto format;
        memcpy(head, data, sizeof head);
    }
    if (head[0] != k->budget) {
        snprintf(err, errlen, "it was saved with uio_mem_budget %lld, this context has %d: use the same budget",
                 (long long)head[0], k->budget);
        return MNEMO_ERR_INVALID_ARG;
    }
    if (!k->budget) {
        if (n_stored == 0) return MNEMO_OK;
        goto format;
    }
    const size_t kvd = kv_dim(s), L = (size_t)s->cfg->num_hidden_layers;
    if (head[1] != n_mem_local || head[1] > k->budget || head[2] != n_stored ||
        len != sizeof head + L * (size_t)n_mem_local * kvd * sizeof(float) ||
        !snap_floats_ok((const float *)((const char *)data + sizeof head), L * (size_t)n_mem_local * kvd))
        goto format;
    knn_staged *ks = calloc(1, sizeof *ks);
    if (!ks || !(ks->stores = calloc(L, sizeof *ks->stores))) {
        free(ks);
        snprintf(err, errlen, "out of memory");
        return MNEMO_ERR_NOMEM;
    }
    ks->kpre = (const float *)((const char *)data + sizeof head);
    ks->n_local = n_mem_local;
    *staged = ks;
    for (size_t l = 0; l < L; l++) {
        const void *sd;
        uint64_t sl;
        char why[200];
        if (snap_reader_find(r, TAG_STORE(l), &sd, &sl) != 0 ||
            !(ks->stores[l] = mem_store_load(sd, sl, why, sizeof why)) ||
            mem_store_size(ks->stores[l]) != (size_t)n_stored ||
            mem_store_n_heads(ks->stores[l]) != s->cfg->num_key_value_heads ||
            mem_store_head_dim(ks->stores[l]) != s->cfg->head_dim || mem_store_dtype(ks->stores[l]) != MEM_DTYPE_F32) {
            uio_knn_load_discard(s, ks);
            *staged = NULL;
            goto format;
        }
    }
    return MNEMO_OK;
format:
    snprintf(err, errlen, "its UIO memory store sections are missing, do not match its counts or hold a value out "
                          "of range");
    return MNEMO_ERR_FORMAT;
}

void uio_knn_load_commit(uio_state *s, void *staged) {
    knn_staged *ks = staged;
    uio_knn *k = &s->knn;
    if (!ks) return;
    const size_t kvd = kv_dim(s), cap = (size_t)k->budget + (size_t)s->M;
    for (int32_t l = 0; l < s->cfg->num_hidden_layers; l++) {
        memcpy(k->kpre + (size_t)l * cap * kvd, ks->kpre + (size_t)l * (size_t)ks->n_local * kvd,
               (size_t)ks->n_local * kvd * sizeof(float));
        mem_store_free(k->store[l]);
        k->store[l] = ks->stores[l];
        ks->stores[l] = NULL;
        if (k->dev) mem_device_invalidate(k->dev[l]);
    }
    uio_knn_load_discard(s, ks);
}
