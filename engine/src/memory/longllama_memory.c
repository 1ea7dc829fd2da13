/*
 * longllama_memory.c — LongLLaMA memory layers: moving the local cache into memory, and memory attention
 * (dense, or the top-k rows a memstore search returns). See longllama_memory.h for the semantics.
 */
#include "longllama_memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool longllama_is_mem_layer(const model_config *cfg, int32_t l) {
    for (int32_t i = 0; i < cfg->n_mem_layers; i++)
        if (cfg->mem_layers[i] == l) return true;
    return false;
}

int longllama_init(longllama_state *s, const model_config *cfg, const mem_params *mp, int32_t knn_k, char *err,
                   size_t errlen) {
    memset(s, 0, sizeof *s);
    s->n_layer = cfg->num_hidden_layers;
    s->window = cfg->max_position_embeddings;
    s->last_context_length = cfg->last_context_length < s->window ? cfg->last_context_length : s->window;
    s->config_last_context_length = s->last_context_length;
    s->knn_k = knn_k;
    s->kv_dim = cfg->num_key_value_heads * cfg->head_dim;
    s->mem_dt = cfg->mem_dtype; /* memory is rounded to the checkpoint's mem_dtype, whatever the caller asks */
    mem_params p = *mp;
    p.dtype = cfg->mem_dtype == KERN_BF16 ? MEM_DTYPE_BF16 : cfg->mem_dtype == KERN_F16 ? MEM_DTYPE_F16 : MEM_DTYPE_F32;
    s->mem = calloc((size_t)s->n_layer, sizeof *s->mem);
    s->raw_k = calloc((size_t)s->n_layer, sizeof *s->raw_k);
    s->layer_flags = calloc((size_t)s->n_layer, sizeof *s->layer_flags);
    if (!s->mem || !s->raw_k || !s->layer_flags) goto oom;
    for (int32_t l = 0; l < s->n_layer; l++) {
        if (!longllama_is_mem_layer(cfg, l)) continue;
        /* memory layers keep their keys before RoPE and attend to memory; mem_positionals false: no RoPE there */
        s->layer_flags[l] = MEMORY_LAYER_KV | MEMORY_LAYER_ATTEND | (cfg->mem_positionals ? 0 : MEMORY_LAYER_NO_ROPE);
        s->n_mem_layers++;
        s->mem[l] = mem_store_new(cfg->num_key_value_heads, cfg->head_dim, &p, err, errlen);
        if (!s->mem[l]) {
            longllama_free(s);
            return -1;
        }
        s->raw_k[l] = malloc((size_t)s->window * (size_t)s->kv_dim * sizeof(float));
        if (!s->raw_k[l]) goto oom;
    }
    return 0;
oom:
    longllama_free(s);
    snprintf(err, errlen, "out of memory for the LongLLaMA memory state");
    return -1;
}

void longllama_free(longllama_state *s) {
    longllama_device_free(s);
    free(s->marks);
    s->marks = NULL;
    for (int32_t l = 0; l < s->n_layer; l++) {
        if (s->mem) mem_store_free(s->mem[l]);
        if (s->raw_k) free(s->raw_k[l]);
    }
    free(s->mem);
    free(s->raw_k);
    free(s->layer_flags);
    free(s->sel);
    free(s->ids);
    free(s->scores);
    memset(s, 0, sizeof *s);
}

void longllama_clear(longllama_state *s) {
    for (int32_t l = 0; l < s->n_layer; l++)
        if (s->mem[l]) mem_store_clear(s->mem[l]);
    s->n_local = 0;
    s->n_marks = 0;
    longllama_device_invalidate(s);
}

/* Records the memory's size after a flush (out of memory: the mark is lost, and a later cut goes back further). */
static void add_mark(longllama_state *s) {
    if (s->n_marks == s->marks_cap) {
        int32_t cap = s->marks_cap ? s->marks_cap * 2 : 64;
        int64_t *p = realloc(s->marks, (size_t)cap * sizeof *p);
        if (!p) return;
        s->marks = p;
        s->marks_cap = cap;
    }
    s->marks[s->n_marks++] = (int64_t)longllama_mem_tokens(s);
}

int64_t longllama_keep_prefix(longllama_state *s, int64_t keep) {
    const int64_t mem = (int64_t)longllama_mem_tokens(s);
    if (keep >= mem) {
        if (keep - mem < s->n_local) s->n_local = (int32_t)(keep - mem);
        return mem + s->n_local;
    }
    /* The marks describe this memory only if the last one is its size (a snapshot load replaces the stores). */
    int64_t cut = 0;
    if (s->n_marks > 0 && s->marks[s->n_marks - 1] == mem)
        for (int32_t i = s->n_marks - 1; i >= 0 && !cut; i--)
            if (s->marks[i] <= keep) cut = s->marks[i];
    if (cut == 0) {
        longllama_clear(s);
        return 0;
    }
    for (int32_t l = 0; l < s->n_layer; l++)
        if (s->mem[l] && mem_store_truncate(s->mem[l], (size_t)cut) != 0) {
            longllama_clear(s);
            return 0;
        }
    while (s->n_marks > 0 && s->marks[s->n_marks - 1] > cut) s->n_marks--;
    s->n_local = 0;
    longllama_device_invalidate(s);
    return cut;
}

int longllama_flush(longllama_state *s, kern_ctx *kc, const float *v_cache, int32_t cache_ctx) {
    const size_t rows = (size_t)s->n_local * (size_t)s->kv_dim;
    for (int32_t l = 0; l < s->n_layer && s->n_local > 0; l++) {
        if (!s->mem[l]) continue;
        const float *v = v_cache + (size_t)l * (size_t)cache_ctx * (size_t)s->kv_dim;
        if (s->dev_be) { /* the values live on the device: read them back */
            float *h = longllama_stage(s, rows);
            if (!h || s->dev_be->mem_copy(kc, h, v, rows * sizeof(float), KERN_D2H) != KERN_OK) {
                snprintf(s->err, sizeof s->err, "memory of layer %d: cannot read the local values back from the "
                         "device", l);
                return -1;
            }
            v = h;
        }
        if (mem_store_append(s->mem[l], (size_t)s->n_local, s->raw_k[l], v, (size_t)s->kv_dim) != 0) {
            snprintf(s->err, sizeof s->err, "memory of layer %d: %s", l, mem_store_error(s->mem[l]));
            return -1;
        }
    }
    if (s->n_local > 0) add_mark(s);
    s->n_local = 0;
    return 0;
}

static uint64_t mem_total(const longllama_state *s) {
    mem_bytes b = longllama_mem_bytes(s);
    return (uint64_t)b.keys + b.values + b.index;
}

mnemo_status longllama_flush_checked(longllama_state *s, const memory_host *h) {
    if (s->n_local == 0) return MNEMO_OK;
    if (s->mem_max_bytes) {
        mem_bytes b = longllama_mem_bytes_after(s, (size_t)s->n_local);
        uint64_t after = (uint64_t)b.keys + b.values + b.index;
        if (after > s->mem_max_bytes) {
            snprintf(h->err, h->errlen,
                     "memory limit reached: %llu tokens held in %llu bytes; %d more would take it to %llu bytes, past "
                     "the limit of %llu",
                     (unsigned long long)longllama_mem_tokens(s), (unsigned long long)mem_total(s), s->n_local,
                     (unsigned long long)after, (unsigned long long)s->mem_max_bytes);
            return MNEMO_ERR_CONTEXT_FULL;
        }
    }
    if (longllama_flush(s, h->kc, h->kv->v, h->kv->n_ctx) != 0) {
        snprintf(h->err, h->errlen, "%s", s->err);
        return MNEMO_ERR_NOMEM;
    }
    return MNEMO_OK;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    void *n = realloc(*p, need * elem);
    if (!n) return -1;
    *p = n;
    *cap = need;
    return 0;
}

/* sel[(i*hq + h)*k + j]: the k best memory rows of query i, head h (one search per query head; GQA heads of
 * a group search the same KV-head store). */
static int knn_select(longllama_state *s, mem_store *ms, const float *q, int64_t nq, int64_t hq, int64_t hkv,
                      int64_t hd, int64_t k) {
    size_t ids_cap = s->ids_cap;
    if (grow((void **)&s->sel, &s->sel_cap, (size_t)(nq * hq * k), sizeof *s->sel) ||
        grow((void **)&s->ids, &s->ids_cap, (size_t)(nq * k), sizeof *s->ids) ||
        grow((void **)&s->scores, &ids_cap, (size_t)(nq * k), sizeof *s->scores))
        return KERN_ENOMEM;
    for (int64_t h = 0; h < hq; h++) {
        if (mem_store_search(ms, (int)(h / (hq / hkv)), (size_t)nq, q + h * hd, (size_t)(hq * hd), (int)k, s->ids,
                             s->scores) != 0)
            return KERN_EBACKEND;
        for (int64_t i = 0; i < nq; i++)
            memcpy(s->sel + (i * hq + h) * k, s->ids + i * k, (size_t)k * sizeof *s->sel);
    }
    return KERN_OK;
}

int longllama_attention(longllama_state *s, int32_t l, const kern_backend *be, kern_ctx *kc, float *out,
                        const float *q, const float *k, const float *v, int64_t nq, int64_t nkv, int64_t q_pos0,
                        int64_t hq, int64_t hkv, int64_t hd, float scale) {
    mem_store *ms = s->mem[l];
    int64_t n_mem = (int64_t)mem_store_size(ms);
    const void *host_k[hkv], *host_v[hkv];
    const void *const *mk = host_k, *const *mv = host_v; /* [hkv] memory rows where attention runs */
    if (s->dev_be) { /* the device copy, brought up to date */
        int rc = mem_device_sync(s->dev[l], ms, kc);
        if (rc != KERN_OK) return rc;
        mk = mem_device_keys(s->dev[l]);
        mv = mem_device_values(s->dev[l]);
    } else {
        for (int64_t g = 0; g < hkv; g++) {
            host_k[g] = mem_store_raw_keys(ms, (int)g);
            host_v[g] = mem_store_raw_values(ms, (int)g);
        }
    }
    kern_dtype dt = s->mem_dt;
    bool knn = s->knn_k > 0 && n_mem > 0 && n_mem > s->dense_rows; /* dense while the memory is small */
    if (knn && s->knn_on_device) { /* keys already there: memstore's device search (GEMM + k-selection) per head */
        int64_t *dsel = longllama_device_sel(s, kc, (size_t)(nq * hq * s->knn_k), false);
        if (!dsel) return KERN_ENOMEM;
        for (int64_t h = 0; h < hq; h++) {
            int rc = mem_device_search(s->dev[l], kc, (int)(h / (hq / hkv)), q + h * hd, nq, hq * hd, s->knn_k,
                                       dsel + h * s->knn_k, hq * s->knn_k);
            if (rc != KERN_OK) return rc;
        }
        return be->attention_mem(kc, out, q, k, v, nq, nkv, q_pos0, hq, hkv, hd, scale, mk, mv, dt, n_mem, dsel,
                                 s->knn_k);
    }
    if (knn) {
        const float *hq_rows = q; /* the search runs on the host (FAISS) */
        if (s->dev_be) {
            float *h = longllama_stage(s, (size_t)(nq * hq * hd));
            if (!h) return KERN_ENOMEM;
            int rc = be->mem_copy(kc, h, q, (size_t)(nq * hq * hd) * sizeof(float), KERN_D2H);
            if (rc != KERN_OK) return rc;
            hq_rows = h;
        }
        int rc = knn_select(s, ms, hq_rows, nq, hq, hkv, hd, s->knn_k);
        if (rc != KERN_OK) return rc;
        const int64_t *sel = s->sel;
        if (s->dev_be && !(sel = longllama_device_sel(s, kc, (size_t)(nq * hq * s->knn_k), true))) return KERN_ENOMEM;
        return be->attention_mem(kc, out, q, k, v, nq, nkv, q_pos0, hq, hkv, hd, scale, mk, mv, dt, n_mem, sel,
                                 s->knn_k);
    }
    return be->attention_mem(kc, out, q, k, v, nq, nkv, q_pos0, hq, hkv, hd, scale, mk, mv, dt, n_mem, NULL, 0);
}

uint64_t longllama_mem_tokens(const longllama_state *s) {
    for (int32_t l = 0; l < s->n_layer; l++)
        if (s->mem[l]) return mem_store_size(s->mem[l]);
    return 0;
}

mem_bytes longllama_mem_bytes(const longllama_state *s) { return longllama_mem_bytes_after(s, 0); }

mem_bytes longllama_mem_bytes_after(const longllama_state *s, size_t n) {
    mem_bytes t = {0, 0, 0};
    for (int32_t l = 0; l < s->n_layer; l++) {
        if (!s->mem[l]) continue;
        mem_bytes b = n ? mem_store_bytes_after(s->mem[l], n) : mem_store_bytes(s->mem[l]);
        t.keys += b.keys;
        t.values += b.values;
        t.index += b.index;
    }
    return t;
}
