/*
 * memstore.h — long-context memory for Focused Transformer / LongLLaMA memory layers.
 *
 * A mem_store is one memory layer of one session: for each KV head an append-only list of (key, value) rows of
 * head_dim floats, kept in a storage dtype (bf16 by default, as the released checkpoints round their memory).
 * The engine appends whole token rows (all heads), then either reads every row back (dense memory attention)
 * or asks for the top-k rows by inner product for a batch of queries (kNN memory attention). Keys are compared
 * after rounding to the storage dtype, so dense and kNN attention see the same keys.
 *
 * kNN goes through the FAISS C API (an exact inner-product flat index by default; IVF and HNSW selectable), a
 * brute-force top-k in C (MEM_INDEX_NONE), which is also the tests' oracle, or, on a GPU, an exact top-k over a
 * device copy of the rows (mem_device, below), or there through a device mirror of IVF-grow's cells.
 * Thread safety: one writer; searches of different heads may run concurrently.
 */
#ifndef MNEMO_MEMSTORE_H
#define MNEMO_MEMSTORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MEM_DTYPE_F32 = 0, MEM_DTYPE_F16 = 1, MEM_DTYPE_BF16 = 2 } mem_dtype;
typedef enum {
    MEM_INDEX_NONE = 0, /* brute force in C (no index memory) */
    MEM_INDEX_FLAT,     /* FAISS IndexFlatIP: exact */
    MEM_INDEX_IVF,      /* FAISS IVF<nlist>,Flat, inner product: approximate. Trained lazily, on every row stored so
                           far, once 39 * nlist rows exist (FAISS's k-means minimum); until then (and after a clear)
                           searches are exact brute force. */
    MEM_INDEX_HNSW,     /* FAISS HNSW<m>,Flat, inner product: approximate; weak for queries far from the keys
                           (recall@32 ~0.8 at 20K rows with efSearch 512, falling as memory grows): prefer IVF */
    MEM_INDEX_IVF_GROW, /* approximate IVF whose cell count grows with the memory (rows/256 cells, retrained at each
                           doubling from 8192 rows, up to ivf_grow_max_nlist), with a two-level coarse search:
                           a query costs about the same at 10K rows as at 1M, so prefill time is linear in the
                           length. Own spherical k-means and AVX-512/AVX2 scans in the storage dtype; ivf_nprobe
                           cells per query. The index for 100K+ token prefills. Exact below 8192 rows. */
} mem_index_kind;

typedef struct {
    mem_dtype dtype;
    mem_index_kind index;
    int ivf_nlist, ivf_nprobe;   /* IVF: cells, cells visited per query */
    int hnsw_m, hnsw_ef_search;  /* HNSW: graph degree, search beam */
    int ivf_grow_max_nlist;      /* IVF_GROW: most cells it grows to, 256 rows each (nprobe is ivf_nprobe) */
} mem_params;

mem_params mem_default_params(void); /* bf16, MEM_INDEX_FLAT, IVF 256/16, HNSW 32/512, IVF_GROW up to 65536 cells */

typedef struct mem_store mem_store;

/* NULL with a message in err for bad arguments or no memory. */
mem_store *mem_store_new(int n_heads, int head_dim, const mem_params *p, char *err, size_t errlen);
void mem_store_free(mem_store *s); /* NULL is a no-op */
void mem_store_clear(mem_store *s);

/* Append n token rows: k and v are [n][n_heads*head_dim] fp32 with row stride ld floats. Rows are rounded to
 * the storage dtype; the index (if any) receives the rounded keys. 0, or -1 with mem_store_error() set. */
int mem_store_append(mem_store *s, size_t n, const float *k, const float *v, size_t ld);
/* Keeps the first n rows and forgets the rest (n >= size: nothing changes); the index is rebuilt over the rows
 * kept. 0, or -1 with the reason in mem_store_error (the store is then empty). */
int mem_store_truncate(mem_store *s, size_t n);
size_t mem_store_size(const mem_store *s);
int mem_store_n_heads(const mem_store *s);
int mem_store_head_dim(const mem_store *s);
mem_dtype mem_store_dtype(const mem_store *s);
mem_index_kind mem_store_index_kind(const mem_store *s);

/* Rows [first, first+n) of one head widened to fp32 into out[n][head_dim]. */
void mem_store_read_keys(const mem_store *s, int head, size_t first, size_t n, float *out);
void mem_store_read_values(const mem_store *s, int head, size_t first, size_t n, float *out);
/* A head's rows in the storage dtype, contiguous [size][head_dim]; valid until the next append or clear. */
const void *mem_store_raw_keys(const mem_store *s, int head);
const void *mem_store_raw_values(const mem_store *s, int head);

/* For nq queries q[nq][head_dim] (row stride ldq) against one head: the k largest inner products, best first:
 * ids[nq][k], scores[nq][k]; when fewer than k rows exist the tail is id -1, score -INFINITY.
 * 0, or -1 with mem_store_error() set. */
int mem_store_search(mem_store *s, int head, size_t nq, const float *q, size_t ldq, int k, int64_t *ids,
                     float *scores);

typedef struct {
    size_t keys, values, index;
} mem_bytes;
mem_bytes mem_store_bytes(const mem_store *s); /* bytes held (capacity), by kind */
/* What mem_store_bytes would say after appending n more rows (to refuse growth before it happens). */
mem_bytes mem_store_bytes_after(const mem_store *s, size_t n);
const char *mem_store_error(const mem_store *s);

/* Exact top-k by inner product (ties to the lower id), keys [n][d] fp32: the reference search. */
void mem_topk_bruteforce(const float *keys, size_t n, int d, const float *q, size_t nq, size_t ldq, int k,
                         int64_t *ids, float *scores);

/* Serialization (params, shape, rows in the storage dtype; indexes are rebuilt on load): one snapshot section
 * with the given tag. 0, or -1 (the writer holds the message). */
struct snap_writer;
int mem_store_save(const mem_store *s, struct snap_writer *w, uint32_t tag);
/* A new store from a section's bytes; NULL with a message in err when they do not describe a valid store (its
 * sizes, or a key or value that is not finite or beyond +-MEM_VALUE_MAX: no model's memory holds one, and one
 * would turn every attention over the memory into NaN). */
#define MEM_VALUE_MAX 1e8f
mem_store *mem_store_load(const void *data, uint64_t len, char *err, size_t errlen);

/* ---- the device backend (mem_device.c): a store's rows in a kernel backend's memory (kernels.h; a GPU)
 * Memory attention on a GPU reads a device copy of each store, and exact kNN searches it there (the backend's
 * topk_ip op: no host index, no queries or ids crossing the bus). IVF-grow searches there too: the host index
 * trains the cells and assigns the rows, a device mirror of it (centroids, and per cell the ids of its rows; the
 * keys are the copy's) takes the queries' nprobe best cells by topk_ip over every centroid and scans their rows
 * (ivf_scan_topk); before training, below 8192 rows (or with head_dim > 256), the search is exact (see
 * mem_device_ivf.h for how its probing differs from the host's). FAISS IVF and HNSW search the host store. The
 * host store stays the source of truth: mem_device_sync uploads the rows the copy lacks (the tail appended since;
 * for IVF-grow, their cells' new ids, or the whole mirror after a retraining), and after mem_store_clear or a load
 * the copy must be invalidated (mem_device_invalidate) so the next sync uploads it whole. Device buffers grow by
 * half, keeping what is there (device to device). */
struct kern_backend;
struct kern_ctx;
typedef struct mem_device mem_device;

#define MEM_DEVICE_MAX_K 1024 /* the most rows a device search returns (CUDA's k-selection) */

/* 1 when kNN of k rows over an index of this kind runs on be's device: be holds device memory, the index is
 * MEM_INDEX_FLAT, MEM_INDEX_NONE (exact) or MEM_INDEX_IVF_GROW, and 0 < k <= MEM_DEVICE_MAX_K. */
int mem_device_searches(const struct kern_backend *be, mem_index_kind index, int k);
/* The index the host store keeps when the device searches: none for the exact ones, IVF-grow itself (it trains the
 * cells the device mirrors). */
mem_index_kind mem_device_host_index(mem_index_kind index);

/* An empty copy for stores of n_heads x head_dim in dtype dt; NULL when out of host memory. */
mem_device *mem_device_new(const struct kern_backend *be, int n_heads, int head_dim, mem_dtype dt);
void mem_device_free(mem_device *d); /* NULL is a no-op */
void mem_device_invalidate(mem_device *d);
/* Brings the copy up to s's rows (queued on kc). A KERN_* code (kernels.h). */
int mem_device_sync(mem_device *d, const mem_store *s, struct kern_ctx *kc);
/* [n_heads] device rows [rows][head_dim] in the store's dtype, valid until the next sync; mem_device_rows rows. */
const void *const *mem_device_keys(const mem_device *d);
const void *const *mem_device_values(const mem_device *d);
size_t mem_device_rows(const mem_device *d);
/* Top-k by inner product over one head's synced rows, on the device (exact, or IVF-grow's cells once trained): queries q + i*ldq (head_dim floats each)
 * and ids + i*ldo in backend memory; best first, ties to the lower id, -1 past the rows (kernels.h topk_ip).
 * A KERN_* code. */
int mem_device_search(const mem_device *d, struct kern_ctx *kc, int head, const float *q, int64_t nq, int64_t ldq,
                      int k, int64_t *ids, int64_t ldo);

#ifdef __cplusplus
}
#endif

#endif
