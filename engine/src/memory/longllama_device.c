/*
 * longllama_device.c — LongLLaMA memory on a GPU backend: a device copy of every memory store, for memory
 * attention to read where it runs.
 *
 * The host stores (memstore/) stay the source of truth: they take the rows at flush (rounded to mem_dtype), answer
 * kNN searches (FAISS), are saved in snapshots and counted in statistics. Before a memory layer attends, its device
 * copy is brought up to date by uploading the rows it lacks (appends only add rows, so that is the new tail); a
 * clear or a snapshot load invalidates every copy (longllama_device_invalidate) and the next attention uploads the
 * whole store. Device buffers grow by half, like the host ones, keeping the rows already there (D2D).
 * Exact kNN (flat or brute-force index, k <= 1024) then searches there too (kern topk_ip: cuBLAS GEMM + k-selection)
 * and the host stores keep no FAISS index; approximate indexes (IVF, HNSW) search on the host.
 */
#include <stdlib.h>
#include <string.h>

#include "longllama_memory.h"

int longllama_device_init(longllama_state *s, const kern_backend *be, int32_t hkv, int32_t head_dim) {
    if (!be || be->host_memory) return 0;
    s->dev_be = be;
    s->hkv = hkv;
    s->head_dim = head_dim;
    s->dev_k = calloc((size_t)s->n_layer * (size_t)hkv, sizeof *s->dev_k);
    s->dev_v = calloc((size_t)s->n_layer * (size_t)hkv, sizeof *s->dev_v);
    s->dev_rows = calloc((size_t)s->n_layer, sizeof *s->dev_rows);
    s->dev_cap = calloc((size_t)s->n_layer, sizeof *s->dev_cap);
    return s->dev_k && s->dev_v && s->dev_rows && s->dev_cap ? 0 : -1;
}

void longllama_device_free(longllama_state *s) {
    if (s->dev_be) {
        for (size_t i = 0; s->dev_k && i < (size_t)s->n_layer * (size_t)s->hkv; i++) {
            s->dev_be->mem_free(s->dev_k[i]);
            s->dev_be->mem_free(s->dev_v[i]);
        }
        s->dev_be->mem_free(s->dev_sel);
    }
    free(s->dev_k);
    free(s->dev_v);
    free(s->dev_rows);
    free(s->dev_cap);
    free(s->stage);
}

void longllama_device_invalidate(longllama_state *s) {
    if (s->dev_rows) memset(s->dev_rows, 0, (size_t)s->n_layer * sizeof *s->dev_rows);
}

float *longllama_stage(longllama_state *s, size_t floats) {
    if (floats > s->stage_cap) {
        float *p = realloc(s->stage, floats * sizeof *p);
        if (!p) return NULL;
        s->stage = p;
        s->stage_cap = floats;
    }
    return s->stage;
}

/* Room for `rows` rows in layer l's device buffers, keeping the first `keep` rows. */
static int reserve(longllama_state *s, int32_t l, size_t rows, size_t keep, kern_ctx *kc) {
    if (rows <= s->dev_cap[l]) return KERN_OK;
    const kern_backend *be = s->dev_be;
    size_t cap = s->dev_cap[l] ? s->dev_cap[l] + s->dev_cap[l] / 2 : 256;
    if (cap < rows) cap = rows;
    const size_t row = (size_t)s->head_dim * kern_dtype_size(s->mem_dt);
    for (int32_t g = 0; g < s->hkv; g++) {
        void **slot[2] = {&s->dev_k[(size_t)l * s->hkv + g], &s->dev_v[(size_t)l * s->hkv + g]};
        for (int kv = 0; kv < 2; kv++) {
            void *p = be->mem_alloc(cap * row);
            if (!p) return KERN_ENOMEM;
            int rc = keep ? be->mem_copy(kc, p, *slot[kv], keep * row, KERN_D2D) : KERN_OK;
            if (rc == KERN_OK && keep) rc = be->sync(kc); /* the old buffer is freed next */
            if (rc != KERN_OK) {
                be->mem_free(p);
                return rc;
            }
            be->mem_free(*slot[kv]);
            *slot[kv] = p;
        }
    }
    s->dev_cap[l] = cap;
    return KERN_OK;
}

int longllama_device_sync(longllama_state *s, int32_t l, kern_ctx *kc) {
    const mem_store *ms = s->mem[l];
    size_t n = mem_store_size(ms), have = s->dev_rows[l];
    if (have > n) have = 0; /* cannot happen (clears invalidate); never trust a stale tail */
    if (have == n) return KERN_OK;
    int rc = reserve(s, l, n, have, kc);
    if (rc != KERN_OK) return rc;
    const size_t row = (size_t)s->head_dim * kern_dtype_size(s->mem_dt);
    for (int32_t g = 0; g < s->hkv && rc == KERN_OK; g++) {
        size_t i = (size_t)l * s->hkv + g;
        rc = s->dev_be->mem_copy(kc, (char *)s->dev_k[i] + have * row,
                                 (const char *)mem_store_raw_keys(ms, g) + have * row, (n - have) * row, KERN_H2D);
        if (rc == KERN_OK)
            rc = s->dev_be->mem_copy(kc, (char *)s->dev_v[i] + have * row,
                                     (const char *)mem_store_raw_values(ms, g) + have * row, (n - have) * row,
                                     KERN_H2D);
    }
    if (rc == KERN_OK) s->dev_rows[l] = n;
    return rc;
}

int64_t *longllama_device_sel(longllama_state *s, kern_ctx *kc, size_t n, bool upload) {
    if (n > s->dev_sel_cap) {
        int64_t *p = s->dev_be->mem_alloc(n * sizeof *p);
        if (!p) return NULL;
        s->dev_be->sync(kc); /* the old ids may still be read by a queued kernel */
        s->dev_be->mem_free(s->dev_sel);
        s->dev_sel = p;
        s->dev_sel_cap = n;
    }
    if (upload && s->dev_be->mem_copy(kc, s->dev_sel, s->sel, n * sizeof *s->sel, KERN_H2D) != KERN_OK) return NULL;
    return s->dev_sel;
}
