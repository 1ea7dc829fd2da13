/*
 * ivf_grow.c — the growing inverted-file index; design and growth rule in ivf_grow.h.
 *
 * Hot loop: scoreq_block_* — QB queries against 16 rows stored transposed ([d][16] per block), widened from the
 * storage dtype in registers: d FMAs per 16 rows, no horizontal sums. A query keeps the rows that beat its
 * running k-th best score in a 2k buffer, cut back by quickselect when full; the final k are sorted. A batch of
 * queries is scanned cell by cell (its (query, cell) pairs bucketed by cell), so each list comes from memory once
 * per batch: per query the scan would stream nprobe lists from DRAM once the lists outgrow the caches.
 */
#include "ivf_grow.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <faiss/c_api/Clustering_c.h>
#include <faiss/c_api/Index_c.h>
#include <faiss/c_api/error_c.h>
#include <faiss/c_api/index_factory_c.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "kernels.h" /* bf16/f16 conversions */

#define BLK 16              /* rows per transposed block: one AVX-512 register of scores */
#define FIRST_NLIST 128     /* cells at the first training */
#define SAMPLE_PER_CELL 64  /* k-means sample: at most 64 rows per cell */
#define KMEANS_ITERS 10     /* FAISS's default is 25; 10 keeps retraining a few % of a long prefill */
#define ASSIGN_CHUNK 4096   /* rows widened and assigned per coarse search */

typedef struct {
    void *codes;   /* (cap/BLK, d, BLK) in the storage dtype */
    uint32_t *ids; /* (cap) store row ids */
    size_t n, cap; /* rows held, rows allocated (a multiple of BLK) */
} ivf_list;

struct ivf_grow {
    int d, nprobe, max_nlist;
    mem_dtype dt;
    size_t esz;
    int nlist;          /* 0 = not trained yet */
    FaissIndex *quant;  /* IndexFlatIP over the nlist centroids */
    ivf_list *lists;    /* (nlist) */
    ivf_list pending;   /* before training: every row, in one list scanned exactly */
    size_t ntotal;      /* store rows indexed so far */
};

static size_t threshold(int c) {
    size_t a = (size_t)c * (size_t)c / 4, b = (size_t)SAMPLE_PER_CELL * (size_t)c;
    return a > b ? a : b;
}

/* Cells the index should have at n rows: the largest c in 128, 256, ... (capped) with T(c) <= n; 0 if none. */
static int nlist_for(int max_nlist, size_t n) {
    int best = 0;
    for (int c = FIRST_NLIST < max_nlist ? FIRST_NLIST : max_nlist;; c *= 2) {
        if (c > max_nlist) c = max_nlist;
        if (threshold(c) > n) break;
        best = c;
        if (c == max_nlist) break;
    }
    return best;
}

static void widen(float *dst, const void *src, mem_dtype dt, size_t n) {
    if (dt == MEM_DTYPE_F32) memcpy(dst, src, n * 4);
    else if (dt == MEM_DTYPE_BF16) for (size_t i = 0; i < n; i++) dst[i] = kern_bf16_to_f32(((const uint16_t *)src)[i]);
    else for (size_t i = 0; i < n; i++) dst[i] = kern_f16_to_f32(((const uint16_t *)src)[i]);
}

ivf_grow *ivf_grow_new(int d, mem_dtype dt, int nprobe, int max_nlist) {
    ivf_grow *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->d = d, g->dt = dt, g->nprobe = nprobe, g->max_nlist = max_nlist;
    g->esz = dt == MEM_DTYPE_F32 ? 4 : 2;
    return g;
}

static int list_push(ivf_list *l, const char *row, uint32_t id, int d, size_t esz);

static void drop_lists(ivf_grow *g) {
    for (int c = 0; g->lists && c < g->nlist; c++) free(g->lists[c].codes), free(g->lists[c].ids);
    free(g->lists);
    g->lists = NULL;
    if (g->quant) faiss_Index_free(g->quant);
    g->quant = NULL;
    g->nlist = 0;
    g->ntotal = 0;
    free(g->pending.codes), free(g->pending.ids);
    memset(&g->pending, 0, sizeof g->pending);
}

void ivf_grow_reset(ivf_grow *g) {
    if (g) drop_lists(g);
}

void ivf_grow_free(ivf_grow *g) {
    if (!g) return;
    drop_lists(g);
    free(g);
}


/* Before training: rows [g->ntotal, n) into the one exact list. */
static int hold(ivf_grow *g, const void *keys, size_t n, char *err, size_t errlen) {
    size_t row = (size_t)g->d * g->esz;
    for (; g->ntotal < n; g->ntotal++)
        if (list_push(&g->pending, (const char *)keys + g->ntotal * row, (uint32_t)g->ntotal, g->d, g->esz) != 0) {
            snprintf(err, errlen, "out of memory holding rows");
            return -1;
        }
    return 0;
}

static int list_push(ivf_list *l, const char *row, uint32_t id, int d, size_t esz) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : BLK, bytes = cap * (size_t)d * esz;
        void *nc = realloc(l->codes, bytes);
        if (nc) l->codes = nc;
        uint32_t *ni = nc ? realloc(l->ids, cap * sizeof *ni) : NULL;
        if (ni) l->ids = ni;
        if (!nc || !ni) return -1;
        memset((char *)l->codes + l->cap * (size_t)d * esz, 0, bytes - l->cap * (size_t)d * esz); /* pad lanes */
        l->cap = cap;
    }
    char *blk = (char *)l->codes + (l->n / BLK) * (size_t)d * BLK * esz;
    size_t lane = l->n % BLK;
    for (int j = 0; j < d; j++) memcpy(blk + ((size_t)j * BLK + lane) * esz, row + (size_t)j * esz, esz);
    l->ids[l->n++] = id;
    return 0;
}

/* Rows [g->ntotal, n) to their nearest cell by inner product. */
static int assign(ivf_grow *g, const void *keys, size_t n, char *err, size_t errlen) {
    float *x = malloc((size_t)ASSIGN_CHUNK * (size_t)g->d * sizeof *x), *dist = malloc(ASSIGN_CHUNK * sizeof *dist);
    idx_t *cell = malloc(ASSIGN_CHUNK * sizeof *cell);
    int rc = x && dist && cell ? 0 : -1;
    if (rc) snprintf(err, errlen, "out of memory assigning rows");
    size_t row = (size_t)g->d * g->esz;
    while (rc == 0 && g->ntotal < n) {
        size_t m = n - g->ntotal < ASSIGN_CHUNK ? n - g->ntotal : ASSIGN_CHUNK;
        const char *src = (const char *)keys + g->ntotal * row;
        widen(x, src, g->dt, m * (size_t)g->d);
        if (faiss_Index_search(g->quant, (idx_t)m, x, 1, dist, cell) != 0) {
            snprintf(err, errlen, "faiss coarse search: %s", faiss_get_last_error());
            rc = -1;
            break;
        }
        for (size_t i = 0; i < m && rc == 0; i++)
            if (cell[i] < 0 || cell[i] >= g->nlist ||
                list_push(&g->lists[cell[i]], src + i * row, (uint32_t)(g->ntotal + i), g->d, g->esz) != 0) {
                snprintf(err, errlen, "out of memory growing an inverted list");
                rc = -1;
            }
        if (rc == 0) g->ntotal += m;
    }
    free(x), free(dist), free(cell);
    return rc;
}

/* A fixed hash of i in [0, n): the sample depends on the rows only, never on a clock or a global RNG. */
static size_t sample_offset(size_t i, size_t n) {
    uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (size_t)((z ^ (z >> 31)) % n);
}

/* k-means (FAISS Clustering, inner-product assignment) of c cells on rows [0, T(c)), then every row reassigned. */
static int train(ivf_grow *g, const void *keys, size_t n, int c, char *err, size_t errlen) {
    size_t t = threshold(c), ns = t < (size_t)SAMPLE_PER_CELL * (size_t)c ? t : (size_t)SAMPLE_PER_CELL * (size_t)c;
    size_t stride = t / ns, row = (size_t)g->d * g->esz;
    float *x = malloc(ns * (size_t)g->d * sizeof *x);
    ivf_list *lists = calloc((size_t)c, sizeof *lists);
    FaissIndex *quant = NULL;
    FaissClustering *km = NULL;
    int rc = -1;
    if (!x || !lists) {
        snprintf(err, errlen, "out of memory training %d cells", c);
        goto done;
    }
    for (size_t i = 0; i < ns; i++) /* one row from each stride-long stretch, at a seeded random offset: a plain
                                         stride would alias with periodic structure in the sequence */
        widen(x + i * (size_t)g->d, (const char *)keys + (i * stride + sample_offset(i, stride)) * row, g->dt,
              (size_t)g->d);
    FaissClusteringParameters cp;
    faiss_ClusteringParameters_init(&cp);
    cp.niter = KMEANS_ITERS;
    cp.min_points_per_centroid = 1;         /* the sample is sized here; no FAISS warnings */
    cp.max_points_per_centroid = 1 << 30;   /* and never resampled: training depends on the rows only */
    float *cent = NULL;
    size_t ncent = 0;
    if (faiss_index_factory(&quant, g->d, "Flat", METRIC_INNER_PRODUCT) != 0 ||
        faiss_Clustering_new_with_params(&km, g->d, c, &cp) != 0 || faiss_Clustering_train(km, (idx_t)ns, x, quant) != 0) {
        snprintf(err, errlen, "faiss k-means (%d cells): %s", c, faiss_get_last_error());
        goto done;
    }
    faiss_Clustering_centroids(km, &cent, &ncent);
    if (ncent != (size_t)c * (size_t)g->d || faiss_Index_reset(quant) != 0 || faiss_Index_add(quant, c, cent) != 0) {
        snprintf(err, errlen, "faiss k-means (%d cells): no centroids: %s", c, faiss_get_last_error());
        goto done;
    }
    drop_lists(g);
    g->quant = quant, g->lists = lists, g->nlist = c;
    quant = NULL, lists = NULL;
    rc = assign(g, keys, n, err, errlen);
    if (rc != 0) drop_lists(g); /* untrained again: the caller's searches stay exact */
done:
    if (km) faiss_Clustering_free(km);
    if (quant) faiss_Index_free(quant);
    free(lists);
    free(x);
    return rc;
}

int ivf_grow_add(ivf_grow *g, const void *keys, size_t n_total, char *err, size_t errlen) {
    if (n_total > UINT32_MAX) { /* list ids are 32-bit */
        snprintf(err, errlen, "IVF-grow holds at most %u rows", UINT32_MAX);
        return -1;
    }
    int c = nlist_for(g->max_nlist, n_total);
    if (c > g->nlist) return train(g, keys, n_total, c, err, errlen);
    return g->nlist ? assign(g, keys, n_total, err, errlen) : hold(g, keys, n_total, err, errlen);
}

/* ---------------------------------------------------------------- search */

/* One lane group of a block, widened to fp32 (AVX-512: 16 lanes at once). */
#ifdef __AVX512F__
static inline __m512 ld_f32(const char *p) { return _mm512_loadu_ps((const float *)p); }
static inline __m512 ld_bf16(const char *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
static inline __m512 ld_f16(const char *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
#else
static inline float ld_f32(const char *p) { float f; memcpy(&f, p, 4); return f; }
static inline float ld_bf16(const char *p) { uint16_t h; memcpy(&h, p, 2); return kern_bf16_to_f32(h); }
static inline float ld_f16(const char *p) { uint16_t h; memcpy(&h, p, 2); return kern_f16_to_f32(h); }
#endif

/* NQ queries against one block: each row of the block is loaded and widened once for all of them. Every score is
 * summed the same way (four partial chains over j mod 4, then (0+1)+(2+3)) whichever kernel computed it, so a
 * query scores the same alone or in a batch; four chains also hide the FMA latency when NQ is 1. */
#define QB 4
typedef void (*scoreq_fn)(float *out, const float *const *q, const char *blk, int d);
#ifdef __AVX512F__
#define SCORE_BLOCKQ(NAME, LOAD, ESZ, NQ)                                                                         \
    static void NAME(float *out, const float *const *q, const char *blk, int d) {                                \
        __m512 a[NQ][4];                                                                                           \
        for (int u = 0; u < NQ; u++) a[u][0] = a[u][1] = a[u][2] = a[u][3] = _mm512_setzero_ps();                  \
        int j = 0;                                                                                                 \
        for (; j + 4 <= d; j += 4)                                                                                 \
            for (int c = 0; c < 4; c++) {                                                                          \
                __m512 w = LOAD(blk + (size_t)(j + c) * BLK * ESZ);                                                \
                for (int u = 0; u < NQ; u++) a[u][c] = _mm512_fmadd_ps(_mm512_set1_ps(q[u][j + c]), w, a[u][c]);   \
            }                                                                                                      \
        for (; j < d; j++) {                                                                                       \
            __m512 w = LOAD(blk + (size_t)j * BLK * ESZ);                                                          \
            for (int u = 0; u < NQ; u++) a[u][0] = _mm512_fmadd_ps(_mm512_set1_ps(q[u][j]), w, a[u][0]);           \
        }                                                                                                          \
        for (int u = 0; u < NQ; u++)                                                                               \
            _mm512_storeu_ps(out + u * BLK,                                                                        \
                             _mm512_add_ps(_mm512_add_ps(a[u][0], a[u][1]), _mm512_add_ps(a[u][2], a[u][3])));     \
    }
#else
#define SCORE_BLOCKQ(NAME, LOAD, ESZ, NQ)                                                                         \
    static void NAME(float *out, const float *const *q, const char *blk, int d) {                                \
        int d4 = d / 4 * 4;                                                                                        \
        for (int u = 0; u < NQ; u++)                                                                               \
            for (int l = 0; l < BLK; l++) {                                                                        \
                float a[4] = {0.f, 0.f, 0.f, 0.f};                                                                 \
                for (int j = 0; j < d; j++)                                                                        \
                    a[j < d4 ? j % 4 : 0] += q[u][j] * LOAD(blk + ((size_t)j * BLK + (size_t)l) * ESZ);            \
                out[u * BLK + l] = (a[0] + a[1]) + (a[2] + a[3]);                                                  \
            }                                                                                                      \
    }
#endif
SCORE_BLOCKQ(scoreq_block_f32, ld_f32, 4, QB)
SCORE_BLOCKQ(scoreq_block_bf16, ld_bf16, 2, QB)
SCORE_BLOCKQ(scoreq_block_f16, ld_f16, 2, QB)
SCORE_BLOCKQ(score1_block_f32, ld_f32, 4, 1)
SCORE_BLOCKQ(score1_block_bf16, ld_bf16, 2, 1)
SCORE_BLOCKQ(score1_block_f16, ld_f16, 2, 1)

/* A scored row as one integer that sorts in memstore's order (higher score first, ties to the lower id): the score's
 * bits mapped to an order-preserving uint32 above (UINT32_MAX - id). Selection then compares integers only. */
typedef uint64_t cand;

static inline cand cand_make(float s, uint32_t id) {
    uint32_t u;
    memcpy(&u, &s, 4);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((uint64_t)u << 32) | (uint64_t)(UINT32_MAX - id);
}
static inline float cand_score(cand c) {
    uint32_t u = (uint32_t)(c >> 32);
    u = (u & 0x80000000u) ? (u & 0x7FFFFFFFu) : ~u;
    float s;
    memcpy(&s, &u, 4);
    return s;
}
static inline int64_t cand_id(cand c) { return (int64_t)(UINT32_MAX - (uint32_t)c); }
static inline void cand_swap(cand *a, cand *b) { cand t = *a; *a = *b; *b = t; }

/* One quicksort step on c[lo..hi), hi - lo >= 2: a median-of-three pivot ends at the returned index p, with
 * c[lo..p) larger and c(p..hi) not larger. Lomuto without a branch: [store, i) holds rows <= pivot. */
static size_t partition_desc(cand *c, size_t lo, size_t hi) {
    size_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (c[mid] > c[lo]) cand_swap(&c[mid], &c[lo]);
    if (c[last] > c[lo]) cand_swap(&c[last], &c[lo]);
    if (c[mid] > c[last]) cand_swap(&c[mid], &c[last]);
    cand pv = c[last];
    size_t store = lo;
    for (size_t i = lo; i < last; i++) {
        cand v = c[i];
        c[i] = c[store], c[store] = v;
        store += v > pv;
    }
    cand_swap(&c[last], &c[store]);
    return store;
}

/* Reorders c[0..n) so that its k best (largest) come first, in any order: quickselect, O(n). */
static void select_best(cand *c, size_t n, size_t k) {
    size_t lo = 0, hi = n; /* the k-th best lies in [lo, hi) */
    while (hi - lo > 1) {
        size_t p = partition_desc(c, lo, hi);
        if (p == k || p + 1 == k) return;
        if (p > k) hi = p;
        else lo = p + 1;
    }
}

/* Sorts c[0..n) largest first (n <= k: a few hundred). */
static void sort_desc(cand *c, size_t n) {
    while (n > 16) {
        size_t p = partition_desc(c, 0, n);
        sort_desc(c + p + 1, n - p - 1); /* recurse on one side, loop on the other */
        n = p;
    }
    for (size_t i = 1; i < n; i++) { /* insertion sort of the last few */
        cand v = c[i];
        size_t j = i;
        for (; j > 0 && c[j - 1] < v; j--) c[j] = c[j - 1];
        c[j] = v;
    }
}

/* The k best of the rows seen so far, in buf[0..*m) (capacity 2k + BLK): rows below the current k-th best score
 * are dropped on arrival; when the buffer fills, it is cut back to its k best. With rows in random order only
 * ~k·ln(n/k) rows ever enter, so selection stays a small part of the scan. */
typedef struct {
    cand *buf;
    size_t m, k;
    float thr; /* the k-th best score so far (-inf until k rows were seen) */
} topk_acc;

static void acc_cut(topk_acc *a) {
    select_best(a->buf, a->m, a->k);
    cand worst = a->buf[0];
    for (size_t i = 1; i < a->k; i++) worst = a->buf[i] < worst ? a->buf[i] : worst;
    a->thr = cand_score(worst);
    a->m = a->k;
}

/* Keeps the rows of one scored block that beat the query's running k-th best. */
static inline void acc_take(topk_acc *a, const float *sc, const uint32_t *ids, size_t lanes) {
#ifdef __AVX512F__
    __mmask16 keep = _mm512_cmp_ps_mask(_mm512_loadu_ps(sc), _mm512_set1_ps(a->thr), _CMP_GE_OQ) &
                     (__mmask16)((1u << lanes) - 1u); /* most blocks: none */
    for (; keep; keep &= (__mmask16)(keep - 1)) {
        int t = __builtin_ctz(keep);
        a->buf[a->m++] = cand_make(sc[t], ids[t]);
    }
#else
    for (size_t t = 0; t < lanes; t++)
        if (sc[t] >= a->thr) a->buf[a->m++] = cand_make(sc[t], ids[t]);
#endif
    if (a->m >= 2 * a->k) acc_cut(a);
}

/* The hot loop: every 16-row block of one list scored against each query that probes the list, QB queries per
 * pass — the block is read from memory once and widened once per QB queries. */
static void scan_list(const ivf_grow *g, scoreq_fn scoreq, scoreq_fn score1, const float *qp, const uint32_t *who,
                      size_t nwho, const ivf_list *l, topk_acc *accs) {
    float sc[QB * BLK];
    size_t blk_bytes = (size_t)g->d * BLK * g->esz, d = (size_t)g->d;
    for (size_t b = 0; b * BLK < l->n; b++) {
        const char *blk = (const char *)l->codes + b * blk_bytes;
        size_t lanes = l->n - b * BLK < BLK ? l->n - b * BLK : BLK;
        const uint32_t *ids = l->ids + b * BLK;
        size_t w = 0;
        for (; w + QB <= nwho; w += QB) {
            const float *qs[QB];
            for (int u = 0; u < QB; u++) qs[u] = qp + who[w + u] * d;
            scoreq(sc, qs, blk, g->d);
            for (int u = 0; u < QB; u++) acc_take(&accs[who[w + u]], sc + u * BLK, ids, lanes);
        }
        for (; w < nwho; w++) {
            const float *q1 = qp + who[w] * d;
            score1(sc, &q1, blk, g->d);
            acc_take(&accs[who[w]], sc, ids, lanes);
        }
    }
}

/* A query's k best, best first, into ids/scores (-1 / -inf past the rows it saw). */
static void acc_finish(topk_acc *a, int64_t *ids, float *scores) {
    size_t k = a->k, m = a->m < k ? a->m : k;
    if (a->m > m) select_best(a->buf, a->m, m);
    sort_desc(a->buf, m);
    for (size_t i = 0; i < k; i++) {
        ids[i] = i < m ? cand_id(a->buf[i]) : -1;
        scores[i] = i < m ? cand_score(a->buf[i]) : -INFINITY;
    }
}

/* Queries [q0, q1) over their probed cells (or, untrained, over every row), cell by cell: the (query, cell)
 * pairs are bucketed by cell first, so a batch reads each list once however many of its queries probe it. */
static int scan_queries(const ivf_grow *g, scoreq_fn scoreq, scoreq_fn score1, const float *qp, const idx_t *cells,
                        int np, int k, size_t q0, size_t q1, int64_t *ids, float *scores) {
    size_t nq = q1 - q0, nc = g->nlist ? (size_t)g->nlist : 1, npairs = g->nlist ? nq * (size_t)np : nq;
    size_t *start = calloc(nc + 1, sizeof *start);
    uint32_t *who = malloc((npairs + 1) * sizeof *who);
    topk_acc *accs = malloc(nq * sizeof *accs);
    cand *bufs = malloc(nq * (2 * (size_t)k + BLK) * sizeof *bufs);
    int rc = start && who && accs && bufs ? 0 : -1;
    if (rc == 0) {
        for (size_t i = 0; i < nq; i++)
            accs[i] = (topk_acc){bufs + i * (2 * (size_t)k + BLK), 0, (size_t)k, -INFINITY};
        if (!g->nlist) { /* one exact list */
            for (size_t i = 0; i < nq; i++) who[i] = (uint32_t)i;
            scan_list(g, scoreq, score1, qp + q0 * (size_t)g->d, who, nq, &g->pending, accs);
        } else {
            const idx_t *cq = cells + q0 * (size_t)np;
            for (size_t p = 0; p < nq * (size_t)np; p++) /* FAISS pads missing cells with -1 */
                if (cq[p] >= 0 && cq[p] < g->nlist) start[cq[p] + 1]++;
            for (size_t c = 0; c < nc; c++) start[c + 1] += start[c];
            for (size_t p = 0; p < nq * (size_t)np; p++)
                if (cq[p] >= 0 && cq[p] < g->nlist) who[start[cq[p]]++] = (uint32_t)(p / (size_t)np);
            for (size_t c = nc; c > 0; c--) start[c] = start[c - 1]; /* back to bucket starts */
            start[0] = 0;
            for (size_t c = 0; c < nc; c++)
                if (start[c + 1] > start[c])
                    scan_list(g, scoreq, score1, qp + q0 * (size_t)g->d, who + start[c], start[c + 1] - start[c],
                              &g->lists[c], accs);
        }
        for (size_t i = 0; i < nq; i++)
            acc_finish(&accs[i], ids + (q0 + i) * (size_t)k, scores + (q0 + i) * (size_t)k);
    }
    free(start), free(who), free(accs), free(bufs);
    return rc;
}

int ivf_grow_search(const ivf_grow *g, size_t nq, const float *q, size_t ldq, int k, int64_t *ids, float *scores,
                    char *err, size_t errlen) {
    int np = g->nprobe < g->nlist ? g->nprobe : g->nlist;
    size_t d = (size_t)g->d;
    float *qp = malloc(nq * d * sizeof *qp), *cd = malloc((nq * (size_t)np + 1) * sizeof *cd);
    idx_t *cells = malloc((nq * (size_t)np + 1) * sizeof *cells);
    int rc = 0;
    if (!qp || !cd || !cells) {
        snprintf(err, errlen, "out of memory in search");
        rc = -1;
        goto done;
    }
    for (size_t i = 0; i < nq; i++) memcpy(qp + i * d, q + i * ldq, d * sizeof *qp); /* FAISS takes packed rows */
    if (np && faiss_Index_search(g->quant, (idx_t)nq, qp, np, cd, cells) != 0) {
        snprintf(err, errlen, "faiss coarse search: %s", faiss_get_last_error());
        rc = -1;
        goto done;
    }
    scoreq_fn scoreq = g->dt == MEM_DTYPE_F32    ? scoreq_block_f32
                       : g->dt == MEM_DTYPE_BF16 ? scoreq_block_bf16
                                                 : scoreq_block_f16;
    scoreq_fn score1 = g->dt == MEM_DTYPE_F32    ? score1_block_f32
                       : g->dt == MEM_DTYPE_BF16 ? score1_block_bf16
                                                 : score1_block_f16;
    int oom = 0;
#pragma omp parallel reduction(| : oom)
    { /* each thread its own contiguous run of queries: their lists are shared, their accumulators are not */
        size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
        size_t q0 = nq * t / nt, q1 = nq * (t + 1) / nt;
        if (q1 > q0 && scan_queries(g, scoreq, score1, qp, cells, np, k, q0, q1, ids, scores) != 0) oom = 1;
    }
    if (oom) {
        snprintf(err, errlen, "out of memory in search");
        rc = -1;
    }
done:
    free(qp), free(cd), free(cells);
    return rc;
}

/* ---------------------------------------------------------------- bytes */

size_t ivf_grow_bytes(const ivf_grow *g) {
    if (!g) return 0;
    size_t row = (size_t)g->d * g->esz + sizeof(uint32_t), b = (size_t)g->nlist * (size_t)g->d * sizeof(float);
    b += g->pending.cap * row;
    for (int c = 0; c < g->nlist; c++) b += g->lists[c].cap * row;
    return b;
}

size_t ivf_grow_bytes_for(int d, mem_dtype dt, int max_nlist, size_t rows) {
    int c = nlist_for(max_nlist, rows);
    size_t row = (size_t)d * (dt == MEM_DTYPE_F32 ? 4 : 2) + sizeof(uint32_t);
    /* lists double their capacity: at most 2x their rows, plus one block each */
    return (size_t)c * (size_t)d * sizeof(float) + (2 * rows + (size_t)c * BLK) * row;
}
