/*
 * memstore.c — per-head append-only (key, value) rows in a storage dtype, with kNN by inner product through
 * the FAISS C API or a brute-force top-k in C. See include/memstore.h.
 */
#include "memstore.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <faiss/c_api/AutoTune_c.h>
#include <faiss/c_api/Index_c.h>
#include <faiss/c_api/error_c.h>
#include <faiss/c_api/index_factory_c.h>

#include "kernels.h" /* fp16/bf16 conversions (round to nearest even, as torch) */
#include "huge_buffer.h"
#include "ivf_grow.h"
#include "snapshot.h"
#include "widen.h"

struct mem_store {
    int n_heads, hd;
    mem_params p;
    size_t size, cap, esz;
    void **k, **v;          /* [n_heads] -> [head_cap[h]][hd] in dtype (huge_buffer) */
    size_t *head_cap;       /* [n_heads] rows k[h] and v[h] hold: cap, or more after a growth that failed midway */
    FaissIndex **index;     /* [n_heads], NULL for MEM_INDEX_NONE and MEM_INDEX_IVF_GROW */
    ivf_grow **grow;        /* [n_heads], MEM_INDEX_IVF_GROW only */
    int trained;            /* IVF: trained (before that, searches are exact brute force) */
    char err[256];
};

mem_params mem_default_params(void) {
    mem_params p = {.dtype = MEM_DTYPE_BF16, .index = MEM_INDEX_FLAT, .ivf_nlist = 256, .ivf_nprobe = 16,
                    .hnsw_m = 32, .hnsw_ef_search = 512, .ivf_grow_max_nlist = 65536};
    return p;
}

static void set_err(mem_store *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
}

static size_t dtype_size(mem_dtype dt) { return dt == MEM_DTYPE_F32 ? 4 : 2; }

static void store_row(void *dst, const float *src, mem_dtype dt, int n) {
    if (dt == MEM_DTYPE_F32) memcpy(dst, src, (size_t)n * 4);
    else if (dt == MEM_DTYPE_BF16) for (int i = 0; i < n; i++) ((uint16_t *)dst)[i] = kern_f32_to_bf16(src[i]);
    else for (int i = 0; i < n; i++) ((uint16_t *)dst)[i] = kern_f32_to_f16(src[i]);
}

static int make_index(mem_store *s, int h) {
    char desc[64];
    switch (s->p.index) {
    case MEM_INDEX_FLAT: snprintf(desc, sizeof desc, "Flat"); break;
    case MEM_INDEX_IVF: snprintf(desc, sizeof desc, "IVF%d,Flat", s->p.ivf_nlist); break;
    case MEM_INDEX_HNSW: snprintf(desc, sizeof desc, "HNSW%d,Flat", s->p.hnsw_m); break;
    case MEM_INDEX_IVF_GROW:
        s->grow[h] = ivf_grow_new(s->hd, s->p.dtype, s->p.ivf_nprobe, s->p.ivf_grow_max_nlist);
        if (!s->grow[h]) set_err(s, "out of memory");
        return s->grow[h] ? 0 : -1;
    default: return 0;
    }
    if (faiss_index_factory(&s->index[h], s->hd, desc, METRIC_INNER_PRODUCT) != 0) {
        s->index[h] = NULL;
        set_err(s, "faiss index_factory(\"%s\"): %s", desc, faiss_get_last_error());
        return -1;
    }
    const char *param = s->p.index == MEM_INDEX_IVF ? "nprobe" : s->p.index == MEM_INDEX_HNSW ? "efSearch" : NULL;
    if (param) {
        FaissParameterSpace *ps = NULL;
        int rc = faiss_ParameterSpace_new(&ps);
        if (rc == 0)
            rc = faiss_ParameterSpace_set_index_parameter(ps, s->index[h], param, s->p.index == MEM_INDEX_IVF
                                                                                      ? s->p.ivf_nprobe
                                                                                      : s->p.hnsw_ef_search);
        faiss_ParameterSpace_free(ps);
        if (rc != 0) {
            set_err(s, "faiss set %s: %s", param, faiss_get_last_error());
            return -1;
        }
    }
    return 0;
}

mem_store *mem_store_new(int n_heads, int head_dim, const mem_params *p, char *err, size_t errlen) {
    mem_params mp = p ? *p : mem_default_params();
    const char *bad = n_heads <= 0 || n_heads > 4096 ? "n_heads must be in 1..4096"
                      : head_dim <= 0 || head_dim > 4096 ? "head_dim must be in 1..4096"
                      : mp.dtype != MEM_DTYPE_F32 && mp.dtype != MEM_DTYPE_F16 && mp.dtype != MEM_DTYPE_BF16
                          ? "unknown dtype"
                      : mp.index < MEM_INDEX_NONE || mp.index > MEM_INDEX_IVF_GROW ? "unknown index kind"
                      : mp.index == MEM_INDEX_IVF && (mp.ivf_nlist < 1 || mp.ivf_nlist > 65536 ||
                                                      mp.ivf_nprobe < 1 || mp.ivf_nprobe > mp.ivf_nlist)
                          ? "IVF needs 1 <= nlist <= 65536 and 1 <= nprobe <= nlist"
                      : mp.index == MEM_INDEX_HNSW && (mp.hnsw_m < 2 || mp.hnsw_m > 256 || mp.hnsw_ef_search < 1 ||
                                                       mp.hnsw_ef_search > 65536)
                          ? "HNSW needs 2 <= m <= 256 and 1 <= ef_search <= 65536"
                      : mp.index == MEM_INDEX_IVF_GROW && (mp.ivf_grow_max_nlist < 1 || mp.ivf_grow_max_nlist > (1 << 20) ||
                                                           mp.ivf_nprobe < 1 || mp.ivf_nprobe > 65536)
                          ? "IVF-grow needs 1 <= max nlist <= 1048576 and 1 <= nprobe <= 65536"
                          : NULL;
    if (bad) {
        if (err && errlen) snprintf(err, errlen, "memstore: %s", bad);
        return NULL;
    }
    mem_store *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->n_heads = n_heads;
    s->hd = head_dim;
    s->p = mp;
    s->esz = dtype_size(mp.dtype);
    s->k = calloc((size_t)n_heads, sizeof *s->k);
    s->v = calloc((size_t)n_heads, sizeof *s->v);
    s->head_cap = calloc((size_t)n_heads, sizeof *s->head_cap);
    s->index = calloc((size_t)n_heads, sizeof *s->index);
    s->grow = calloc((size_t)n_heads, sizeof *s->grow);
    if (!s->k || !s->v || !s->head_cap || !s->index || !s->grow) goto oom;
    for (int h = 0; h < n_heads; h++)
        if (make_index(s, h) != 0) {
            if (err && errlen) snprintf(err, errlen, "memstore: %s", s->err);
            mem_store_free(s);
            return NULL;
        }
    return s;
oom:
    if (err && errlen) snprintf(err, errlen, "memstore: out of memory");
    mem_store_free(s);
    return NULL;
}

void mem_store_free(mem_store *s) {
    if (!s) return;
    for (int h = 0; h < s->n_heads; h++) {
        size_t bytes = s->head_cap ? s->head_cap[h] * (size_t)s->hd * s->esz : 0;
        if (s->k) huge_buffer_free(s->k[h], bytes);
        if (s->v) huge_buffer_free(s->v[h], bytes);
        if (s->index && s->index[h]) faiss_Index_free(s->index[h]);
        if (s->grow) ivf_grow_free(s->grow[h]);
    }
    free(s->k);
    free(s->v);
    free(s->head_cap);
    free(s->index);
    free(s->grow);
    free(s);
}

/* Keeps the rows' buffers: mem_store_truncate re-indexes the rows it keeps from them. */
static void forget_rows(mem_store *s) {
    s->size = 0;
    s->trained = 0;
    for (int h = 0; h < s->n_heads; h++)
        if (s->p.index == MEM_INDEX_IVF_GROW) ivf_grow_reset(s->grow[h]);
        else if (s->p.index != MEM_INDEX_NONE) { /* a fresh index: IVF must forget its training too */
            if (s->index[h]) faiss_Index_free(s->index[h]);
            s->index[h] = NULL;
            if (make_index(s, h) != 0) s->p.index = MEM_INDEX_NONE; /* cannot happen twice; stay usable */
        }
}

void mem_store_clear(mem_store *s) {
    if (!s) return;
    forget_rows(s);
    for (int h = 0; h < s->n_heads; h++) { /* an emptied memory gives its memory back (an idle server holds none) */
        size_t bytes = s->head_cap[h] * (size_t)s->hd * s->esz;
        huge_buffer_free(s->k[h], bytes);
        huge_buffer_free(s->v[h], bytes);
        s->k[h] = s->v[h] = NULL;
        s->head_cap[h] = 0;
    }
    s->cap = 0;
}

/* Rows allocated once `need` rows are stored: grows by half (amortized appends), 256 at first. */
static size_t grown_cap(size_t cap, size_t need) {
    if (need <= cap) return cap;
    size_t c = cap ? cap + cap / 2 : 256;
    return c < need ? need : c;
}

static int reserve(mem_store *s, size_t need) {
    if (need <= s->cap) return 0;
    size_t cap = grown_cap(s->cap, need);
    size_t row = (size_t)s->hd * s->esz, bytes = cap * row;
    if (bytes / row != cap) {
        set_err(s, "memory of %zu rows is too large", cap);
        return -1;
    }
    for (int h = 0; h < s->n_heads; h++) { /* a head grows whole or not at all */
        if (s->head_cap[h] >= cap) continue;
        void *nk = huge_buffer_alloc(bytes), *nv = nk ? huge_buffer_alloc(bytes) : NULL;
        if (!nk || !nv) {
            huge_buffer_free(nk, bytes);
            set_err(s, "out of memory growing memory to %zu rows", cap);
            return -1;
        }
        if (s->size) {
            memcpy(nk, s->k[h], s->size * row);
            memcpy(nv, s->v[h], s->size * row);
        }
        huge_buffer_free(s->k[h], s->head_cap[h] * row);
        huge_buffer_free(s->v[h], s->head_cap[h] * row);
        s->k[h] = nk;
        s->v[h] = nv;
        s->head_cap[h] = cap;
    }
    s->cap = cap;
    return 0;
}

/* Adds rows [first, first+n) of every head to the indexes (rounded keys, widened). IVF trains once it has
 * 39 * nlist rows (FAISS's own minimum for a stable k-means), on everything stored so far. */
static int index_rows(mem_store *s, size_t first, size_t n) {
    if (s->p.index == MEM_INDEX_NONE || n == 0) return 0;
    if (s->p.index == MEM_INDEX_IVF_GROW) {
        for (int h = 0; h < s->n_heads; h++) {
            char err[200];
            if (ivf_grow_add(s->grow[h], s->k[h], s->size, err, sizeof err) != 0) {
                set_err(s, "IVF-grow (head %d): %s", h, err);
                for (int r = 0; r < s->n_heads; r++) ivf_grow_reset(s->grow[r]); /* rebuilt at the next append */
                return -1;
            }
        }
        return 0;
    }
    if (s->p.index == MEM_INDEX_IVF && !s->trained) {
        if (s->size < (size_t)39 * (size_t)s->p.ivf_nlist) return 0;
        first = 0, n = s->size; /* train on all rows, then add them all */
    }
    float *buf = malloc(n * (size_t)s->hd * sizeof(float));
    if (!buf) {
        set_err(s, "out of memory indexing %zu rows", n);
        return -1;
    }
    int rc = 0;
    for (int h = 0; h < s->n_heads && rc == 0; h++) {
        mem_widen(buf, (const char *)s->k[h] + first * (size_t)s->hd * s->esz, s->p.dtype, n * (size_t)s->hd);
        if (s->p.index == MEM_INDEX_IVF && !s->trained && faiss_Index_train(s->index[h], (int64_t)n, buf) != 0) {
            set_err(s, "faiss train (head %d): %s", h, faiss_get_last_error());
            rc = -1;
        } else if (faiss_Index_add(s->index[h], (int64_t)n, buf) != 0) {
            set_err(s, "faiss add (head %d): %s", h, faiss_get_last_error());
            rc = -1;
        }
    }
    if (rc == 0 && s->p.index == MEM_INDEX_IVF) s->trained = 1;
    free(buf);
    return rc;
}

int mem_store_append(mem_store *s, size_t n, const float *k, const float *v, size_t ld) {
    if (n == 0) return 0;
    if (!k || !v || ld < (size_t)s->n_heads * (size_t)s->hd) {
        set_err(s, "append: bad arguments (row stride %zu < %d heads x %d)", ld, s->n_heads, s->hd);
        return -1;
    }
    if (reserve(s, s->size + n) != 0) return -1;
    size_t row = (size_t)s->hd * s->esz;
    for (int h = 0; h < s->n_heads; h++)
        for (size_t i = 0; i < n; i++) {
            store_row((char *)s->k[h] + (s->size + i) * row, k + i * ld + (size_t)h * s->hd, s->p.dtype, s->hd);
            store_row((char *)s->v[h] + (s->size + i) * row, v + i * ld + (size_t)h * s->hd, s->p.dtype, s->hd);
        }
    size_t first = s->size;
    s->size += n;
    if (index_rows(s, first, n) != 0) { /* keep rows and index in step: forget the rows */
        s->size = first;
        return -1;
    }
    return 0;
}

int mem_store_truncate(mem_store *s, size_t n) {
    if (n >= s->size) return 0;
    forget_rows(s); /* the index forgets every row (IVF its training too); the rows stay in the buffers */
    if (n == 0) return 0;
    s->size = n;
    if (index_rows(s, 0, n) != 0) {
        s->size = 0;
        return -1;
    }
    return 0;
}

size_t mem_store_size(const mem_store *s) { return s->size; }
int mem_store_n_heads(const mem_store *s) { return s->n_heads; }
int mem_store_head_dim(const mem_store *s) { return s->hd; }
mem_dtype mem_store_dtype(const mem_store *s) { return s->p.dtype; }
mem_index_kind mem_store_index_kind(const mem_store *s) { return s->p.index; }
const ivf_grow *mem_store_ivf_grow(const mem_store *s, int head) {
    return s->p.index == MEM_INDEX_IVF_GROW && head >= 0 && head < s->n_heads ? s->grow[head] : NULL;
}
const char *mem_store_error(const mem_store *s) { return s ? s->err : "no store"; }

void mem_store_read_keys(const mem_store *s, int head, size_t first, size_t n, float *out) {
    if (n == 0) return; /* (no buffer before the first append) */
    mem_widen(out, (const char *)s->k[head] + first * (size_t)s->hd * s->esz, s->p.dtype, n * (size_t)s->hd);
}

void mem_store_read_values(const mem_store *s, int head, size_t first, size_t n, float *out) {
    if (n == 0) return;
    mem_widen(out, (const char *)s->v[head] + first * (size_t)s->hd * s->esz, s->p.dtype, n * (size_t)s->hd);
}

const void *mem_store_raw_keys(const mem_store *s, int head) { return s->k[head]; }
const void *mem_store_raw_values(const mem_store *s, int head) { return s->v[head]; }

/* ---------------------------------------------------------------- brute force */

static float dot(const float *a, const float *b, int d) {
    float s = 0.f;
    for (int i = 0; i < d; i++) s += a[i] * b[i];
    return s;
}

/* Best first: the higher score, or the same score and the lower id (the order every memstore search returns). */
typedef struct { float s; int64_t id; } scored_row;
static int scored_row_cmp(const void *a, const void *b) {
    const scored_row *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The reference: every row scored with a plain sequential dot product, then sorted — no heap, nothing shared
 * with the searches it checks. */
void mem_topk_bruteforce(const float *keys, size_t n, int d, const float *q, size_t nq, size_t ldq, int k,
                         int64_t *ids, float *scores) {
    scored_row *rows = malloc((n ? n : 1) * sizeof *rows);
    for (size_t i = 0; i < nq && rows; i++) {
        for (size_t j = 0; j < n; j++) rows[j] = (scored_row){dot(q + i * ldq, keys + j * (size_t)d, d), (int64_t)j};
        qsort(rows, n, sizeof *rows, scored_row_cmp);
        for (size_t j = 0; j < (size_t)k; j++) {
            ids[i * (size_t)k + j] = j < n ? rows[j].id : -1;
            scores[i * (size_t)k + j] = j < n ? rows[j].s : -INFINITY;
        }
    }
    free(rows);
}

/* Exact search over a head's stored rows: the kernels' topk_ip op (CPU), keys widened from the store's dtype
 * tile by tile inside it. Same order as every other path (higher score, ties to the lower id). */
static int search_brute(mem_store *s, int head, size_t nq, const float *q, size_t ldq, int k, int64_t *ids,
                        float *scores) {
    kern_dtype dt = s->p.dtype == MEM_DTYPE_F32 ? KERN_F32 : s->p.dtype == MEM_DTYPE_F16 ? KERN_F16 : KERN_BF16;
    int rc = kern_cpu_backend()->topk_ip(NULL, ids, scores, k, q, (int64_t)nq, (int64_t)ldq, s->k[head], dt,
                                         (int64_t)s->size, s->hd, k);
    if (rc != KERN_OK) {
        set_err(s, rc == KERN_ENOMEM ? "out of memory in search" : "search: kernel error %d", rc);
        return -1;
    }
    return 0;
}

int mem_store_search(mem_store *s, int head, size_t nq, const float *q, size_t ldq, int k, int64_t *ids,
                     float *scores) {
    if (head < 0 || head >= s->n_heads || k <= 0 || (nq && !q) || ldq < (size_t)s->hd) {
        set_err(s, "search: bad arguments (head %d of %d, k %d, query stride %zu)", head, s->n_heads, k, ldq);
        return -1;
    }
    if (nq == 0) return 0;
    if (s->p.index == MEM_INDEX_IVF_GROW && s->grow[head] && s->size > 0) {
        char err[200];
        if (ivf_grow_search(s->grow[head], nq, q, ldq, k, ids, scores, err, sizeof err) == 0) return 0;
        set_err(s, "IVF-grow search (head %d): %s", head, err);
        return -1;
    }
    if (s->p.index == MEM_INDEX_NONE || s->p.index == MEM_INDEX_IVF_GROW || (s->p.index == MEM_INDEX_IVF && !s->trained) || s->size == 0 ||
        !s->index[head]) /* (no index only after a failed re-creation in mem_store_clear: stay correct) */
        return search_brute(s, head, nq, q, ldq, k, ids, scores);
    const float *qc = q;
    float *packed = NULL;
    if (ldq != (size_t)s->hd) { /* FAISS takes packed queries */
        packed = malloc(nq * (size_t)s->hd * sizeof(float));
        if (!packed) {
            set_err(s, "out of memory in search");
            return -1;
        }
        for (size_t i = 0; i < nq; i++) memcpy(packed + i * (size_t)s->hd, q + i * ldq, (size_t)s->hd * 4);
        qc = packed;
    }
    int rc = faiss_Index_search(s->index[head], (int64_t)nq, qc, k, scores, ids);
    free(packed);
    if (rc != 0) {
        set_err(s, "faiss search (head %d): %s", head, faiss_get_last_error());
        return -1;
    }
    for (size_t i = 0; i < nq * (size_t)k; i++) /* FAISS pads with -1 ids and -FLT_MAX-like scores */
        if (ids[i] < 0) scores[i] = -INFINITY;
    return 0;
}

static mem_bytes bytes_for(const mem_store *s, size_t cap, size_t index_rows) {
    size_t per_head = huge_buffer_footprint(cap * (size_t)s->hd * s->esz); /* whole huge pages from 2 MiB */
    mem_bytes b = {per_head * (size_t)s->n_heads, per_head * (size_t)s->n_heads, 0};
    if (s->p.index != MEM_INDEX_NONE && s->p.index != MEM_INDEX_IVF_GROW) {
        size_t vec = (size_t)s->hd * sizeof(float) + (s->p.index == MEM_INDEX_HNSW ? 2u * (size_t)s->p.hnsw_m * 4u : 0u) +
                     (s->p.index == MEM_INDEX_IVF ? 8u : 0u); /* codes (+ graph links / ids) per row */
        b.index = index_rows * vec;
    }
    return b;
}

mem_bytes mem_store_bytes(const mem_store *s) {
    size_t rows = 0;
    for (int h = 0; s->p.index != MEM_INDEX_NONE && s->p.index != MEM_INDEX_IVF_GROW && h < s->n_heads; h++)
        rows += s->index[h] ? (size_t)faiss_Index_ntotal(s->index[h]) : 0;
    mem_bytes b = bytes_for(s, s->cap, rows);
    for (int h = 0; s->p.index == MEM_INDEX_IVF_GROW && h < s->n_heads; h++) b.index += ivf_grow_bytes(s->grow[h]);
    return b;
}

mem_bytes mem_store_bytes_after(const mem_store *s, size_t n) {
    mem_bytes b = bytes_for(s, grown_cap(s->cap, s->size + n), (s->size + n) * (size_t)s->n_heads);
    if (s->p.index == MEM_INDEX_IVF_GROW)
        b.index = (size_t)s->n_heads * ivf_grow_bytes_for(s->hd, s->p.dtype, s->p.ivf_grow_max_nlist, s->size + n);
    return b;
}

/* ---------------------------------------------------------------- serialization */

typedef struct {
    uint32_t version, n_heads, head_dim, dtype, index, ivf_nlist, ivf_nprobe, hnsw_m, hnsw_ef_search;
    uint32_t ivf_grow_max_nlist; /* (was padding, 0, before IVF-grow existed) */
    uint64_t rows;
} store_header;

int mem_store_save(const mem_store *s, snap_writer *w, uint32_t tag) {
    store_header h = {1, (uint32_t)s->n_heads, (uint32_t)s->hd, (uint32_t)s->p.dtype, (uint32_t)s->p.index,
                      (uint32_t)s->p.ivf_nlist, (uint32_t)s->p.ivf_nprobe, (uint32_t)s->p.hnsw_m,
                      (uint32_t)s->p.hnsw_ef_search, (uint32_t)s->p.ivf_grow_max_nlist, s->size};
    if (snap_section_begin(w, tag) != 0 || snap_write(w, &h, sizeof h) != 0) return -1;
    size_t bytes = s->size * (size_t)s->hd * s->esz;
    for (int i = 0; i < s->n_heads; i++)
        if (snap_write(w, s->k[i], bytes) != 0 || snap_write(w, s->v[i], bytes) != 0) return -1;
    return snap_section_end(w);
}

/* Every value finite and within MEM_VALUE_MAX: one NaN or huge row poisons every attention over the memory (and
 * the index built from it), so a file holding one is refused rather than loaded. */
static bool values_ok(const void *data, size_t n, mem_dtype dt) {
    float buf[256];
    for (size_t at = 0; at < n; at += 256) {
        size_t m = n - at < 256 ? n - at : 256;
        mem_widen(buf, (const char *)data + at * dtype_size(dt), dt, m);
        for (size_t i = 0; i < m; i++)
            if (!(fabsf(buf[i]) <= MEM_VALUE_MAX)) return false; /* false for NaN too */
    }
    return true;
}

mem_store *mem_store_load(const void *data, uint64_t len, char *err, size_t errlen) {
    store_header h;
    if (len < sizeof h) {
        if (err && errlen) snprintf(err, errlen, "memory section too short (%llu bytes)", (unsigned long long)len);
        return NULL;
    }
    memcpy(&h, data, sizeof h);
    if (h.version != 1 || h.dtype > MEM_DTYPE_BF16 || h.index > MEM_INDEX_IVF_GROW) {
        if (err && errlen) snprintf(err, errlen, "memory section: unknown version, dtype or index kind");
        return NULL;
    }
    mem_params p = {(mem_dtype)h.dtype, (mem_index_kind)h.index, (int)h.ivf_nlist, (int)h.ivf_nprobe, (int)h.hnsw_m,
                    (int)h.hnsw_ef_search, h.ivf_grow_max_nlist ? (int)h.ivf_grow_max_nlist : 4096};
    /* sizes first, before anything is allocated for them */
    uint64_t row = (uint64_t)(h.head_dim ? h.head_dim : 1) * dtype_size(p.dtype), per = h.rows * row;
    if (h.n_heads == 0 || h.n_heads > 4096 || h.head_dim > 4096 || h.rows > (len - sizeof h) / row ||
        per * 2 * h.n_heads != len - sizeof h) {
        if (err && errlen)
            snprintf(err, errlen, "memory section: %llu rows of %u heads x %u do not match its %llu bytes",
                     (unsigned long long)h.rows, h.n_heads, h.head_dim, (unsigned long long)len);
        return NULL;
    }
    if (!values_ok((const char *)data + sizeof h, (size_t)(2 * per * h.n_heads / dtype_size(p.dtype)), p.dtype)) {
        if (err && errlen) snprintf(err, errlen, "memory section: a key or value is not finite or beyond %g",
                                    (double)MEM_VALUE_MAX);
        return NULL;
    }
    mem_store *s = mem_store_new((int)h.n_heads, (int)h.head_dim, &p, err, errlen);
    if (!s) return NULL;
    if (reserve(s, (size_t)h.rows) != 0) {
        if (err && errlen) snprintf(err, errlen, "%s", s->err);
        mem_store_free(s);
        return NULL;
    }
    const char *p8 = (const char *)data + sizeof h;
    for (uint32_t i = 0; i < h.n_heads && per > 0; i++) { /* (an empty store has no buffers) */
        memcpy(s->k[i], p8 + (2 * (uint64_t)i) * per, (size_t)per);
        memcpy(s->v[i], p8 + (2 * (uint64_t)i + 1) * per, (size_t)per);
    }
    s->size = (size_t)h.rows;
    if (index_rows(s, 0, s->size) != 0) {
        if (err && errlen) snprintf(err, errlen, "%s", s->err);
        mem_store_free(s);
        return NULL;
    }
    return s;
}
