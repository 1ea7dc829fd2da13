/*
 * mem_device.c — memstore's device backend: a copy of a store's rows in a kernel backend's memory (a GPU), read
 * there by memory attention and searched there for exact kNN (the backend's topk_ip: cuBLAS GEMM + k-selection on
 * CUDA), and for IVF-grow stores approximately there, through a mirror of the host index (mem_device_ivf.c). See
 * include/memstore.h.
 *
 * The host store stays the source of truth: it takes the rows (rounded to its dtype), is saved in snapshots and
 * counted in statistics. A sync uploads the rows the copy lacks — appends only add rows, so that is the new tail;
 * after a clear or a load the copy is invalidated and the next sync uploads the whole store. Device buffers grow by
 * half, like the host ones, keeping the rows already there (device to device).
 */
#include <stdlib.h>
#include <string.h>

#include "ivf_grow.h"
#include "kernels.h"
#include "mem_device_ivf.h"
#include "memstore.h"

struct mem_device {
    const kern_backend *be;
    int n_heads, hd;
    kern_dtype dt;
    size_t row;            /* bytes of one head's row */
    void **k, **v;         /* [n_heads] device rows [cap][hd] in dt */
    size_t rows, cap;      /* rows uploaded, rows allocated */
    mem_device_ivf **ivf;  /* [n_heads] mirrors of an IVF-grow store's index, made at its first sync; else NULL */
};

static kern_dtype kern_dt(mem_dtype dt) {
    return dt == MEM_DTYPE_F32 ? KERN_F32 : dt == MEM_DTYPE_F16 ? KERN_F16 : KERN_BF16;
}

int mem_device_searches(const kern_backend *be, mem_index_kind index, int k) {
    return be && !be->host_memory && k > 0 && k <= MEM_DEVICE_MAX_K &&
           (index == MEM_INDEX_FLAT || index == MEM_INDEX_NONE || index == MEM_INDEX_IVF_GROW);
}

mem_index_kind mem_device_host_index(mem_index_kind index) {
    return index == MEM_INDEX_IVF_GROW ? index : MEM_INDEX_NONE;
}

mem_device *mem_device_new(const kern_backend *be, int n_heads, int head_dim, mem_dtype dt) {
    mem_device *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->be = be;
    d->n_heads = n_heads;
    d->hd = head_dim;
    d->dt = kern_dt(dt);
    d->row = (size_t)head_dim * kern_dtype_size(d->dt);
    d->k = calloc((size_t)n_heads, sizeof *d->k);
    d->v = calloc((size_t)n_heads, sizeof *d->v);
    if (!d->k || !d->v) {
        mem_device_free(d);
        return NULL;
    }
    return d;
}

void mem_device_free(mem_device *d) {
    if (!d) return;
    for (int h = 0; h < d->n_heads; h++) {
        if (d->k) d->be->mem_free(d->k[h]);
        if (d->v) d->be->mem_free(d->v[h]);
        if (d->ivf) mem_device_ivf_free(d->ivf[h]);
    }
    free(d->ivf);
    free(d->k);
    free(d->v);
    free(d);
}

void mem_device_invalidate(mem_device *d) {
    if (!d) return;
    d->rows = 0;
    for (int h = 0; d->ivf && h < d->n_heads; h++) mem_device_ivf_invalidate(d->ivf[h]);
}

/* The mirrors of an IVF-grow store's index brought up to it (made at the first sync). */
static int sync_ivf(mem_device *d, const mem_store *s, kern_ctx *kc) {
    if (mem_store_index_kind(s) != MEM_INDEX_IVF_GROW) return KERN_OK;
    if (!d->ivf && !(d->ivf = calloc((size_t)d->n_heads, sizeof *d->ivf))) return KERN_ENOMEM;
    for (int h = 0; h < d->n_heads; h++) {
        if (!d->ivf[h] && !(d->ivf[h] = mem_device_ivf_new(d->be, d->hd))) return KERN_ENOMEM;
        int rc = mem_device_ivf_sync(d->ivf[h], mem_store_ivf_grow(s, h), kc);
        if (rc != KERN_OK) return rc;
    }
    return KERN_OK;
}

/* Room for `rows` rows, keeping the first `keep`. */
static int reserve(mem_device *d, size_t rows, size_t keep, kern_ctx *kc) {
    if (rows <= d->cap) return KERN_OK;
    const kern_backend *be = d->be;
    size_t cap = d->cap ? d->cap + d->cap / 2 : 256;
    if (cap < rows) cap = rows;
    for (int h = 0; h < d->n_heads; h++) {
        void **slot[2] = {&d->k[h], &d->v[h]};
        for (int kv = 0; kv < 2; kv++) {
            void *p = be->mem_alloc(cap * d->row);
            if (!p) return KERN_ENOMEM;
            int rc = keep ? be->mem_copy(kc, p, *slot[kv], keep * d->row, KERN_D2D) : KERN_OK;
            if (rc == KERN_OK && keep) rc = be->sync(kc); /* the old buffer is freed next */
            if (rc != KERN_OK) {
                be->mem_free(p);
                return rc;
            }
            be->mem_free(*slot[kv]);
            *slot[kv] = p;
        }
    }
    d->cap = cap;
    return KERN_OK;
}

int mem_device_sync(mem_device *d, const mem_store *s, kern_ctx *kc) {
    size_t n = mem_store_size(s), have = d->rows;
    if (have > n) have = 0; /* cannot happen (clears invalidate); never trust a stale tail */
    if (have == n) return sync_ivf(d, s, kc);
    int rc = reserve(d, n, have, kc);
    if (rc != KERN_OK) return rc;
    const size_t off = have * d->row, bytes = (n - have) * d->row;
    for (int h = 0; h < d->n_heads && rc == KERN_OK; h++) {
        rc = d->be->mem_copy(kc, (char *)d->k[h] + off, (const char *)mem_store_raw_keys(s, h) + off, bytes,
                             KERN_H2D);
        if (rc == KERN_OK)
            rc = d->be->mem_copy(kc, (char *)d->v[h] + off, (const char *)mem_store_raw_values(s, h) + off, bytes,
                                 KERN_H2D);
    }
    if (rc == KERN_OK) d->rows = n;
    return rc == KERN_OK ? sync_ivf(d, s, kc) : rc;
}

const mem_device_ivf *mem_device_ivf_of(const mem_device *d, int head) {
    return d->ivf && head >= 0 && head < d->n_heads ? d->ivf[head] : NULL;
}

const void *const *mem_device_keys(const mem_device *d) { return (const void *const *)d->k; }
const void *const *mem_device_values(const mem_device *d) { return (const void *const *)d->v; }
size_t mem_device_rows(const mem_device *d) { return d->rows; }

int mem_device_search(const mem_device *d, kern_ctx *kc, int head, const float *q, int64_t nq, int64_t ldq, int k,
                      int64_t *ids, int64_t ldo) {
    if (head < 0 || head >= d->n_heads || k <= 0 || k > MEM_DEVICE_MAX_K) return KERN_ESHAPE;
    /* trained IVF-grow: its cells (heads past the scan's width limit: exact, as before training) */
    if (d->ivf && d->ivf[head] && mem_device_ivf_cells(d->ivf[head]) > 0 && d->hd <= MEM_DEVICE_IVF_MAX_HD)
        return mem_device_ivf_search(d->ivf[head], kc, d->k[head], d->dt, (int64_t)d->rows, q, nq, ldq, k, ids, ldo);
    return d->be->topk_ip(kc, ids, NULL, ldo, q, nq, ldq, d->k[head], d->dt, (int64_t)d->rows, d->hd, k);
}
