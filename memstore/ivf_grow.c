/*
 * ivf_grow.c — the growing inverted-file index; design and growth rule in ivf_grow.h.
 *
 * Everything here is one scan: k-means assignment, coarse search and the final row scan all score packed fp32
 * queries against lists of transposed 16-row blocks and keep each query's best few.
 *
 * A query is answered by three scans of one kind: the group centroids (its GROUP_PROBES best groups), the cell
 * centroids of those groups (its nprobe best cells), the rows of those cells (its k best). Every level is a list of
 * 16-row blocks stored transposed ([d][16] per block) and scored by scoreq_block_* — QB queries against 16 rows,
 * widened from the storage dtype in registers: d FMAs per 16 rows, no horizontal sums. A query keeps the rows that
 * beat its running k-th best in a 2k buffer, cut back by quickselect when full (k <= 16: a sorted buffer, by
 * insertion); the final k are sorted. A batch is scanned list by list (its (query, list) pairs bucketed by list),
 * so each list comes from memory once per batch.
 */
#include "ivf_grow.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kernels.h" /* bf16/f16 conversions */
#include "widen.h"

#define BLK 16              /* rows per transposed block: one AVX-512 register of scores */
#define FIRST_ROWS 8192     /* the first training; below, one exact list */
#define ROWS_PER_CELL 256   /* each training: rows / 256 cells, so a cell holds ~256-512 rows until the next */
#define FIRST_NLIST (FIRST_ROWS / ROWS_PER_CELL)
#define CELLS_PER_GROUP 32  /* the coarse search's upper level: one group per 32 cells */
#define GROUP_PROBES 16     /* groups whose cells a query scores: 16 x ~32 candidate cells for its nprobe */
#define SAMPLE_PER_CELL 64  /* k-means sample: at most 64 rows per cell */
#define TOP_SAMPLE_PER_GROUP 256 /* of which the groups' k-means takes at most 256 per group */
#define KMEANS_ITERS 10     /* Lloyd iterations (FAISS's IVF training uses 10 too) */
#define ASSIGN_CHUNK 4096   /* rows widened and assigned at a time */

typedef struct {
    void *codes;   /* (cap/BLK, d, BLK) in the list's dtype */
    uint32_t *ids; /* (cap) what a row stands for: store row, cell or group */
    size_t n, cap; /* rows held, rows allocated (a multiple of BLK) */
} ivf_list;

struct ivf_grow {
    int d, nprobe, max_nlist;
    mem_dtype dt;
    size_t esz;
    int target;        /* cells asked for at the last training; 0 = not trained yet */
    int nlist, ngroup; /* cells and groups that training produced */
    ivf_list top;      /* the group centroids (f32), ids = group */
    ivf_list *groups;  /* (ngroup) each group's cell centroids (f32), ids = cell */
    ivf_list *lists;   /* (nlist) each cell's rows (storage dtype), ids = store row */
    ivf_list pending;  /* before training: every row, in one list scanned exactly */
    size_t ntotal;     /* store rows indexed so far */
    uint64_t epoch;    /* +1 at every training and reset: a device mirror's cue to rebuild (ivf_grow_epoch) */
};

/* Rows at which c cells are trained. */
static size_t threshold(int c) { return c <= FIRST_NLIST ? (size_t)FIRST_ROWS : (size_t)c * ROWS_PER_CELL; }
/* (c below FIRST_NLIST only when max_nlist is: trained at FIRST_ROWS all the same) */

/* Cells the index should have at n rows: the largest c in 32, 64, ... (capped) with T(c) <= n; 0 if none. */
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

static int groups_for(int c) { return c / CELLS_PER_GROUP > 1 ? c / CELLS_PER_GROUP : 1; }

ivf_grow *ivf_grow_new(int d, mem_dtype dt, int nprobe, int max_nlist) {
    ivf_grow *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->d = d, g->dt = dt, g->nprobe = nprobe, g->max_nlist = max_nlist;
    g->esz = dt == MEM_DTYPE_F32 ? 4 : 2;
    return g;
}

static void list_free(ivf_list *l) {
    free(l->codes), free(l->ids);
    memset(l, 0, sizeof *l);
}

static void lists_free(ivf_list *ls, int n) {
    for (int i = 0; ls && i < n; i++) list_free(&ls[i]);
    free(ls);
}

static void drop_lists(ivf_grow *g) {
    lists_free(g->lists, g->nlist);
    lists_free(g->groups, g->ngroup);
    list_free(&g->top);
    list_free(&g->pending);
    g->lists = g->groups = NULL;
    g->target = g->nlist = g->ngroup = 0;
    g->ntotal = 0;
    g->epoch++;
}

void ivf_grow_reset(ivf_grow *g) {
    if (g) drop_lists(g);
}

void ivf_grow_free(ivf_grow *g) {
    if (!g) return;
    drop_lists(g);
    free(g);
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
    if (esz == 4)
        for (int j = 0; j < d; j++) ((float *)blk)[(size_t)j * BLK + lane] = ((const float *)row)[j];
    else
        for (int j = 0; j < d; j++) ((uint16_t *)blk)[(size_t)j * BLK + lane] = ((const uint16_t *)row)[j];
    l->ids[l->n++] = id;
    return 0;
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

/* ---------------------------------------------------------------- search */

/* One lane group of a block, widened to fp32 (AVX-512: 16 lanes at once). */
#ifdef __AVX512F__
static inline __m512 ld_f32(const char *p) { return _mm512_loadu_ps((const float *)p); }
static inline __m512 ld_bf16(const char *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
static inline __m512 ld_f16(const char *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
#elif defined(__AVX2__) && defined(__FMA__) /* 8 lanes: a block is two of these */
static inline __m256 ld_f32(const char *p) { return _mm256_loadu_ps((const float *)p); }
static inline __m256 ld_bf16(const char *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline __m256 ld_f16(const char *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
#else
static inline float ld_f32(const char *p) { float f; memcpy(&f, p, 4); return f; }
static inline float ld_bf16(const char *p) { uint16_t h; memcpy(&h, p, 2); return kern_bf16_to_f32(h); }
static inline float ld_f16(const char *p) { uint16_t h; memcpy(&h, p, 2); return kern_f16_to_f32(h); }
#endif

/* NQ queries against one block: each row of the block is loaded and widened once for all of them. Every score is
 * summed the same way (four partial chains over j mod 4, then (0+1)+(2+3); AVX2: two over j mod 2) whichever
 * kernel computed it, so a query scores the same alone or in a batch; the chains also hide the FMA latency when
 * NQ is 1. QB queries per pass: as many as keep the accumulators in registers. */
typedef void (*scoreq_fn)(float *out, const float *const *q, const char *blk, int d);
#ifdef __AVX512F__
#define QB 4
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
#elif defined(__AVX2__) && defined(__FMA__)
#define QB 2
#define SCORE_BLOCKQ(NAME, LOAD, ESZ, NQ)                                                                         \
    static void NAME(float *out, const float *const *q, const char *blk, int d) {                                \
        __m256 lo[NQ][2], hi[NQ][2]; /* lanes 0-7 and 8-15, chains j mod 2 */                                     \
        for (int u = 0; u < NQ; u++) lo[u][0] = lo[u][1] = hi[u][0] = hi[u][1] = _mm256_setzero_ps();             \
        int j = 0;                                                                                                 \
        for (; j + 2 <= d; j += 2)                                                                                 \
            for (int c = 0; c < 2; c++) { /* c constant after unrolling: the accumulators stay in registers */    \
                const char *p = blk + (size_t)(j + c) * BLK * ESZ;                                                 \
                __m256 wl = LOAD(p), wh = LOAD(p + 8 * ESZ);                                                       \
                for (int u = 0; u < NQ; u++) {                                                                     \
                    __m256 b = _mm256_set1_ps(q[u][j + c]);                                                        \
                    lo[u][c] = _mm256_fmadd_ps(b, wl, lo[u][c]);                                                   \
                    hi[u][c] = _mm256_fmadd_ps(b, wh, hi[u][c]);                                                   \
                }                                                                                                  \
            }                                                                                                      \
        for (; j < d; j++) {                                                                                       \
            const char *p = blk + (size_t)j * BLK * ESZ;                                                           \
            __m256 wl = LOAD(p), wh = LOAD(p + 8 * ESZ);                                                           \
            for (int u = 0; u < NQ; u++) {                                                                         \
                __m256 b = _mm256_set1_ps(q[u][j]);                                                                \
                lo[u][0] = _mm256_fmadd_ps(b, wl, lo[u][0]);                                                       \
                hi[u][0] = _mm256_fmadd_ps(b, wh, hi[u][0]);                                                       \
            }                                                                                                      \
        }                                                                                                          \
        for (int u = 0; u < NQ; u++) {                                                                             \
            _mm256_storeu_ps(out + u * BLK, _mm256_add_ps(lo[u][0], lo[u][1]));                                   \
            _mm256_storeu_ps(out + u * BLK + 8, _mm256_add_ps(hi[u][0], hi[u][1]));                               \
        }                                                                                                          \
    }
#else
#define QB 4
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

/* k <= SMALL_K (the coarse levels, k-means): the buffer is kept sorted, best first, by insertion; a cut after
 * nearly every block would cost more than the scan. */
#define SMALL_K 16
static inline void acc_insert(topk_acc *a, cand c) {
    size_t m = a->m;
    if (m == a->k) {
        if (c <= a->buf[m - 1]) return;
        m--; /* the worst drops out */
    }
    size_t i = m;
    for (; i > 0 && a->buf[i - 1] < c; i--) a->buf[i] = a->buf[i - 1];
    a->buf[i] = c;
    a->m = m + 1;
    if (a->m == a->k) a->thr = cand_score(a->buf[a->k - 1]);
}

static inline void acc_add(topk_acc *a, cand c) {
    if (a->k <= SMALL_K) acc_insert(a, c);
    else a->buf[a->m++] = c;
}

/* Keeps the rows of one scored block that beat the query's running k-th best. */
static inline void acc_take(topk_acc *a, const float *sc, const uint32_t *ids, size_t lanes) {
#ifdef __AVX512F__
    __mmask16 keep = _mm512_cmp_ps_mask(_mm512_loadu_ps(sc), _mm512_set1_ps(a->thr), _CMP_GE_OQ) &
                     (__mmask16)((1u << lanes) - 1u); /* most blocks: none */
    for (; keep; keep &= (__mmask16)(keep - 1)) {
        int t = __builtin_ctz(keep);
        acc_add(a, cand_make(sc[t], ids[t]));
    }
#elif defined(__AVX2__)
    __m256 thr = _mm256_set1_ps(a->thr);
    unsigned keep = ((unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(sc), thr, _CMP_GE_OQ)) |
                     (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(sc + 8), thr, _CMP_GE_OQ)) << 8) &
                    ((1u << lanes) - 1u); /* most blocks: none */
    for (; keep; keep &= keep - 1) {
        int t = __builtin_ctz(keep);
        acc_add(a, cand_make(sc[t], ids[t]));
    }
#else
    for (size_t t = 0; t < lanes; t++)
        if (sc[t] >= a->thr) acc_add(a, cand_make(sc[t], ids[t]));
#endif
    if (a->k > SMALL_K && a->m >= 2 * a->k) acc_cut(a);
}

/* How one list is scored: its width, element size and block kernels. Queries come packed, d floats each. */
typedef struct {
    int d;
    size_t esz;
    scoreq_fn q4, q1; /* QB queries per pass, one */
} scorer;

static scorer row_scorer(const ivf_grow *g) {
    return g->dt == MEM_DTYPE_F32    ? (scorer){g->d, 4, scoreq_block_f32, score1_block_f32}
           : g->dt == MEM_DTYPE_BF16 ? (scorer){g->d, 2, scoreq_block_bf16, score1_block_bf16}
                                     : (scorer){g->d, 2, scoreq_block_f16, score1_block_f16};
}
static scorer centroid_scorer(int d) { return (scorer){d, 4, scoreq_block_f32, score1_block_f32}; }

/* The hot loop: every 16-row block of one list scored against each query that probes the list, QB queries per
 * pass — the block is read from memory once and widened once per QB queries. */
static void scan_list(const scorer *s, const float *qp, const uint32_t *who, size_t nwho, const ivf_list *l,
                      topk_acc *accs) {
    float sc[QB * BLK];
    size_t blk_bytes = (size_t)s->d * BLK * s->esz;
    for (size_t b = 0; b * BLK < l->n; b++) {
        const char *blk = (const char *)l->codes + b * blk_bytes;
        size_t lanes = l->n - b * BLK < BLK ? l->n - b * BLK : BLK;
        const uint32_t *ids = l->ids + b * BLK;
        size_t w = 0;
        for (; w + QB <= nwho; w += QB) {
            const float *qs[QB];
            for (int u = 0; u < QB; u++) qs[u] = qp + who[w + u] * (size_t)s->d;
            s->q4(sc, qs, blk, s->d);
            for (int u = 0; u < QB; u++) acc_take(&accs[who[w + u]], sc + u * BLK, ids, lanes);
        }
        for (; w < nwho; w++) {
            const float *q1 = qp + who[w] * (size_t)s->d;
            s->q1(sc, &q1, blk, s->d);
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

/* The k best rows for each of nq packed queries over the lists it probes: probe[q*np .. q*np+np) name lists
 * (negative: none), or probe NULL: every query scans lists[0]. The (query, list) pairs are bucketed by list first,
 * so a batch reads each list once however many of its queries probe it; the result does not depend on the batch
 * (one total order, score then id, and one summation order for every score). 0, or -1 out of memory. */
static int scan_queries(const scorer *s, const ivf_list *lists, size_t nlists, const int64_t *probe, int np,
                        const float *qp, size_t nq, int k, int64_t *ids, float *scores) {
    size_t npairs = probe ? nq * (size_t)np : nq;
    size_t *start = calloc(nlists + 1, sizeof *start);
    uint32_t *who = calloc(npairs + 1, sizeof *who);
    topk_acc *accs = malloc((nq + 1) * sizeof *accs);
    size_t cap = 2 * (size_t)k + BLK;
    cand *bufs = malloc((nq * cap + 1) * sizeof *bufs);
    int rc = start && who && accs && bufs ? 0 : -1;
    if (rc == 0) {
        for (size_t i = 0; i < nq; i++)
            accs[i] = (topk_acc){bufs + i * cap, 0, (size_t)k, -INFINITY};
        if (!probe) {
            for (size_t i = 0; i < nq; i++) who[i] = (uint32_t)i;
            scan_list(s, qp, who, nq, &lists[0], accs);
        } else {
            for (size_t p = 0; p < npairs; p++)
                if (probe[p] >= 0 && (size_t)probe[p] < nlists) start[probe[p] + 1]++;
            for (size_t c = 0; c < nlists; c++) start[c + 1] += start[c];
            for (size_t p = 0; p < npairs; p++)
                if (probe[p] >= 0 && (size_t)probe[p] < nlists) who[start[probe[p]]++] = (uint32_t)(p / (size_t)np);
            for (size_t c = nlists; c > 0; c--) start[c] = start[c - 1]; /* back to bucket starts */
            start[0] = 0;
            for (size_t c = 0; c < nlists; c++)
                if (start[c + 1] > start[c]) scan_list(s, qp, who + start[c], start[c + 1] - start[c], &lists[c], accs);
        }
        for (size_t i = 0; i < nq; i++) acc_finish(&accs[i], ids + i * (size_t)k, scores + i * (size_t)k);
    }
    free(start), free(who), free(accs), free(bufs);
    return rc;
}

/* The np best cells (-1 past the last) of nq packed queries: their GROUP_PROBES best groups first, then the best
 * cells of those groups, by inner product with the (unit) centroids. */
static int coarse(const ivf_grow *g, const float *qp, size_t nq, int np, int64_t *cells, float *cell_scores) {
    int gp = GROUP_PROBES < g->ngroup ? GROUP_PROBES : g->ngroup;
    int64_t *grp = malloc((nq * (size_t)gp + 1) * sizeof *grp);
    float *gs = malloc((nq * (size_t)gp + 1) * sizeof *gs);
    scorer s = centroid_scorer(g->d);
    int rc = grp && gs ? 0 : -1;
    if (rc == 0) rc = scan_queries(&s, &g->top, 1, NULL, 1, qp, nq, gp, grp, gs);
    if (rc == 0) rc = scan_queries(&s, g->groups, (size_t)g->ngroup, grp, gp, qp, nq, np, cells, cell_scores);
    free(grp), free(gs);
    return rc;
}

/* Inside a parallel region: this thread's contiguous share [*r0, *r1) of n items. */
static void thread_share(size_t n, size_t *r0, size_t *r1) {
    size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    *r0 = n * t / nt, *r1 = n * (t + 1) / nt;
}

/* ---------------------------------------------------------------- building */

/* Rows [g->ntotal, n) to their nearest cell. */
static int assign(ivf_grow *g, const void *keys, size_t n, char *err, size_t errlen) {
    size_t d = (size_t)g->d, row = d * g->esz;
    float *x = malloc((size_t)ASSIGN_CHUNK * d * sizeof *x), *score = malloc(ASSIGN_CHUNK * sizeof *score);
    int64_t *cell = malloc(ASSIGN_CHUNK * sizeof *cell);
    int rc = x && score && cell ? 0 : -1;
    if (rc) snprintf(err, errlen, "out of memory assigning rows");
    while (rc == 0 && g->ntotal < n) {
        size_t m = n - g->ntotal < ASSIGN_CHUNK ? n - g->ntotal : ASSIGN_CHUNK;
        const char *src = (const char *)keys + g->ntotal * row;
        mem_widen(x, src, g->dt, m * d);
        int oom = 0;
#pragma omp parallel reduction(| : oom)
        {
            size_t r0, r1;
            thread_share(m, &r0, &r1);
            if (r1 > r0 && coarse(g, x + r0 * d, r1 - r0, 1, cell + r0, score + r0) != 0) oom = 1;
        }
        for (size_t i = 0; i < m && !oom; i++) /* in row order: a list's rows stay in store order */
            oom = cell[i] < 0 || cell[i] >= g->nlist ||
                  list_push(&g->lists[cell[i]], src + i * row, (uint32_t)(g->ntotal + i), g->d, g->esz) != 0;
        if (oom) {
            snprintf(err, errlen, "out of memory growing an inverted list");
            rc = -1;
        } else {
            g->ntotal += m;
        }
    }
    free(x), free(score), free(cell);
    return rc;
}

/* A fixed hash of i in [0, n): the sample depends on the rows only, never on a clock or a global RNG. */
static size_t sample_offset(size_t i, size_t n) {
    uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (size_t)((z ^ (z >> 31)) % n);
}

/* Appends centroids c[0..k) (k x d) to a centroid list, ids first_id, first_id + 1, ... */
static int push_centroids(ivf_list *l, const float *c, int k, int d, uint32_t first_id) {
    for (int i = 0; i < k; i++)
        if (list_push(l, (const char *)(c + (size_t)i * d), first_id + (uint32_t)i, d, 4) != 0) return -1;
    return 0;
}

/* Nearest (largest inner product) of a list's centroids for each of n packed points, in parallel over the points. */
static int nearest(const ivf_list *cl, int d, const float *x, size_t n, int64_t *label, float *score) {
    scorer s = centroid_scorer(d);
    int oom = 0;
#pragma omp parallel reduction(| : oom)
    {
        size_t r0, r1;
        thread_share(n, &r0, &r1);
        if (r1 > r0 && scan_queries(&s, cl, 1, NULL, 1, x + r0 * (size_t)d, r1 - r0, 1, label + r0,
                                    score + r0) != 0)
            oom = 1;
    }
    return oom ? -1 : 0;
}

/* Scales each of k centroids to unit length (a zero one stays zero). */
static void normalize(float *cent, int k, int d) {
    for (int c = 0; c < k; c++) {
        double nn = 0;
        for (int j = 0; j < d; j++) nn += (double)cent[(size_t)c * d + j] * cent[(size_t)c * d + j];
        for (int j = 0; j < d && nn > 0; j++) cent[(size_t)c * d + j] = (float)(cent[(size_t)c * d + j] / sqrt(nn));
    }
}

/* Spherical k-means (Lloyd's, inner-product assignment, unit centroids — FAISS's choice for inner-product IVF: with
 * free norms the longest centroids win every row and cells empty) of n packed points (n >= k) into cent (k x d),
 * started from k points spread over the sample (whose order is already a seeded shuffle of the sequence); an
 * emptied centroid takes over half of the largest cluster (a copy nudged apart, as FAISS does). Sums in double, in
 * point order: the result depends on the points only. With label: every point's centroid after the last update. */
static int kmeans(int d, int k, const float *x, size_t n, float *cent, int64_t *label) {
    double *sum = malloc((size_t)k * (size_t)d * sizeof *sum);
    size_t *cnt = malloc((size_t)k * sizeof *cnt);
    int64_t *lab = label ? label : malloc(n * sizeof *lab);
    float *score = malloc(n * sizeof *score);
    int rc = sum && cnt && lab && score ? 0 : -1;
    for (int i = 0; rc == 0 && i < k; i++) /* k points spread over the sample */
        memcpy(cent + (size_t)i * d, x + (size_t)i * n / (size_t)k * (size_t)d, (size_t)d * sizeof *cent);
    normalize(cent, k, d);
    for (int it = 0; rc == 0 && it <= KMEANS_ITERS; it++) {
        ivf_list cl = {0};
        rc = push_centroids(&cl, cent, k, d, 0);
        if (rc == 0) rc = nearest(&cl, d, x, n, lab, score);
        list_free(&cl);
        if (rc != 0 || it == KMEANS_ITERS) break;
        memset(sum, 0, (size_t)k * (size_t)d * sizeof *sum);
        memset(cnt, 0, (size_t)k * sizeof *cnt);
        for (size_t i = 0; i < n; i++) {
            cnt[lab[i]]++;
            for (int j = 0; j < d; j++) sum[(size_t)lab[i] * d + j] += x[i * (size_t)d + j];
        }
        for (int c = 0; c < k; c++)
            for (int j = 0; j < d && cnt[c]; j++) cent[(size_t)c * d + j] = (float)(sum[(size_t)c * d + j] / (double)cnt[c]);
        for (int c = 0; c < k; c++) {
            if (cnt[c]) continue;
            int big = 0;
            for (int o = 1; o < k; o++) big = cnt[o] > cnt[big] ? o : big;
            for (int j = 0; j < d; j++) {
                float v = cent[(size_t)big * d + j], e = (j & 1) ? 1.f / 1024 : -1.f / 1024;
                cent[(size_t)c * d + j] = v * (1 + e);
                cent[(size_t)big * d + j] = v * (1 - e);
            }
            cnt[c] = cnt[big] / 2, cnt[big] -= cnt[c];
        }
        normalize(cent, k, d);
    }
    free(sum), free(cnt), free(score);
    if (!label) free(lab);
    return rc;
}

/* Two-level k-means of c cells on a sample of rows [0, T(c)): groups_for(c) groups first, then each group's share
 * of the sample clustered into cells in proportion to its size (at least one). Then every row is reassigned. */
static int train(ivf_grow *g, const void *keys, size_t n, int c, char *err, size_t errlen) {
    size_t t = threshold(c), ns = t < (size_t)SAMPLE_PER_CELL * (size_t)c ? t : (size_t)SAMPLE_PER_CELL * (size_t)c;
    size_t stride = t / ns, row = (size_t)g->d * g->esz, d = (size_t)g->d;
    int ng = groups_for(c);
    float *x = malloc(ns * d * sizeof *x), *xs = malloc(ns * d * sizeof *xs), *gcent = malloc((size_t)ng * d * 4);
    int64_t *label = malloc(ns * sizeof *label);
    size_t *first = calloc((size_t)ng + 1, sizeof *first);
    int *cells_of = calloc((size_t)ng, sizeof *cells_of);
    float *cent = NULL;
    ivf_list top = {0}, *groups = NULL, *lists = NULL;
    int ncell = 0, ngroup = 0, rc = -1;
    if (!x || !xs || !gcent || !label || !first || !cells_of) goto oom;
    for (size_t i = 0; i < ns; i++) /* one row from each stride-long stretch, at a seeded random offset: a plain
                                         stride would alias with periodic structure in the sequence */
        mem_widen(x + i * d, (const char *)keys + (i * stride + sample_offset(i, stride)) * row, g->dt, d);
    /* groups from every (ns / (TOP_SAMPLE_PER_GROUP * ng))-th sampled row, then every sampled row labelled */
    size_t ntop = ns < (size_t)TOP_SAMPLE_PER_GROUP * (size_t)ng ? ns : (size_t)TOP_SAMPLE_PER_GROUP * (size_t)ng;
    for (size_t i = 0; i < ntop; i++) memcpy(xs + i * d, x + i * (ns / ntop) * d, d * sizeof *x);
    ivf_list gl = {0};
    if (kmeans(g->d, ng, xs, ntop, gcent, NULL) != 0 || push_centroids(&gl, gcent, ng, g->d, 0) != 0 ||
        nearest(&gl, g->d, x, ns, label, (float *)xs /* scores: scratch */) != 0) {
        list_free(&gl);
        goto oom;
    }
    list_free(&gl);
    for (size_t i = 0; i < ns; i++) first[label[i] + 1]++; /* the sample sorted by group, stable */
    for (int j = 0; j < ng; j++) first[j + 1] += first[j];
    for (size_t i = 0; i < ns; i++) memcpy(xs + first[label[i]]++ * d, x + i * d, d * sizeof *x);
    for (int j = ng; j > 0; j--) first[j] = first[j - 1];
    first[0] = 0;
    for (int j = 0; j < ng; j++) {
        size_t nj = first[j + 1] - first[j], cj = ((size_t)c * nj + ns / 2) / ns;
        cells_of[j] = nj == 0 ? 0 : (int)(cj < 1 ? 1 : cj > nj ? nj : cj);
        ncell += cells_of[j];
        ngroup += cells_of[j] > 0;
    }
    cent = malloc((size_t)ncell * d * sizeof *cent);
    groups = calloc((size_t)ngroup, sizeof *groups);
    lists = calloc((size_t)ncell, sizeof *lists);
    if (!cent || !groups || !lists) goto oom;
    for (int j = 0, cell = 0, gi = 0; j < ng; j++) {
        if (!cells_of[j]) continue; /* an empty group would only waste a probe */
        if (kmeans(g->d, cells_of[j], xs + first[j] * d, first[j + 1] - first[j], cent + (size_t)cell * d, NULL) != 0 ||
            push_centroids(&top, gcent + (size_t)j * d, 1, g->d, (uint32_t)gi) != 0 ||
            push_centroids(&groups[gi], cent + (size_t)cell * d, cells_of[j], g->d, (uint32_t)cell) != 0)
            goto oom;
        cell += cells_of[j], gi++;
    }
    drop_lists(g);
    g->top = top, g->groups = groups, g->lists = lists;
    g->target = c, g->nlist = ncell, g->ngroup = ngroup;
    g->epoch++;
    memset(&top, 0, sizeof top), groups = lists = NULL;
    rc = assign(g, keys, n, err, errlen);
    if (rc != 0) drop_lists(g); /* untrained again: rebuilt at the next append */
    goto done;
oom:
    snprintf(err, errlen, "out of memory training %d cells", c);
done:
    list_free(&top);
    lists_free(groups, ngroup);
    free(lists); /* (empty until installed) */
    free(x), free(xs), free(gcent), free(label), free(first), free(cells_of), free(cent);
    return rc;
}

int ivf_grow_add(ivf_grow *g, const void *keys, size_t n_total, char *err, size_t errlen) {
    if (n_total > UINT32_MAX) { /* list ids are 32-bit */
        snprintf(err, errlen, "IVF-grow holds at most %u rows", UINT32_MAX);
        return -1;
    }
    int c = nlist_for(g->max_nlist, n_total);
    if (c > g->target) return train(g, keys, n_total, c, err, errlen);
    return g->target ? assign(g, keys, n_total, err, errlen) : hold(g, keys, n_total, err, errlen);
}

/* ---------------------------------------------------------------- search */

/* Queries [q0, q1) of the packed qp: their cells, then the rows of those cells (or, untrained, every row). */
static int search_range(const ivf_grow *g, const float *qp, size_t q0, size_t q1, int k, int64_t *ids,
                        float *scores) {
    size_t nq = q1 - q0;
    scorer s = row_scorer(g);
    qp += q0 * (size_t)g->d, ids += q0 * (size_t)k, scores += q0 * (size_t)k;
    if (!g->target) return scan_queries(&s, &g->pending, 1, NULL, 1, qp, nq, k, ids, scores);
    int np = g->nprobe < g->nlist ? g->nprobe : g->nlist;
    int64_t *cells = malloc((nq * (size_t)np + 1) * sizeof *cells);
    float *cs = malloc((nq * (size_t)np + 1) * sizeof *cs);
    int rc = cells && cs ? coarse(g, qp, nq, np, cells, cs) : -1;
    if (rc == 0) rc = scan_queries(&s, g->lists, (size_t)g->nlist, cells, np, qp, nq, k, ids, scores);
    free(cells), free(cs);
    return rc;
}

int ivf_grow_search(const ivf_grow *g, size_t nq, const float *q, size_t ldq, int k, int64_t *ids, float *scores,
                    char *err, size_t errlen) {
    size_t d = (size_t)g->d;
    float *qp = malloc(nq * d * sizeof *qp + 1);
    if (!qp) {
        snprintf(err, errlen, "out of memory in search");
        return -1;
    }
    for (size_t i = 0; i < nq; i++) memcpy(qp + i * d, q + i * ldq, d * sizeof *qp); /* packed rows */
    int oom = 0;
#pragma omp parallel reduction(| : oom)
    { /* each thread its own contiguous run of queries: their lists are shared, their accumulators are not */
        size_t q0, q1;
        thread_share(nq, &q0, &q1);
        if (q1 > q0 && search_range(g, qp, q0, q1, k, ids, scores) != 0) oom = 1;
    }
    free(qp);
    if (oom) snprintf(err, errlen, "out of memory in search");
    return oom ? -1 : 0;
}

/* ---------------------------------------------------------------- bytes */

static size_t list_bytes(const ivf_list *l, int d, size_t esz) { return l->cap * ((size_t)d * esz + sizeof(uint32_t)); }

size_t ivf_grow_bytes(const ivf_grow *g) {
    if (!g) return 0;
    size_t b = list_bytes(&g->pending, g->d, g->esz) + list_bytes(&g->top, g->d, 4);
    for (int j = 0; j < g->ngroup; j++) b += list_bytes(&g->groups[j], g->d, 4);
    for (int c = 0; c < g->nlist; c++) b += list_bytes(&g->lists[c], g->d, g->esz);
    return b;
}

size_t ivf_grow_bytes_for(int d, mem_dtype dt, int max_nlist, size_t rows) {
    size_t c = (size_t)nlist_for(max_nlist, rows), ng = (size_t)groups_for((int)c), cells = c + ng;
    size_t row = (size_t)d * (dt == MEM_DTYPE_F32 ? 4 : 2) + sizeof(uint32_t), crow = (size_t)d * 4 + sizeof(uint32_t);
    if (!c) return (2 * rows + BLK) * row; /* the one exact list */
    /* a list's capacity doubles from BLK: at most 2x its rows + BLK. Rounding may give up to c + ng cells. */
    return (2 * rows + cells * BLK) * row + (2 * ng + BLK + 2 * cells + ng * BLK) * crow;
}

void ivf_grow_shape(const ivf_grow *g, int *cells, int *groups, size_t *largest_cell) {
    size_t big = 0;
    for (int c = 0; c < g->nlist; c++) big = g->lists[c].n > big ? g->lists[c].n : big;
    *cells = g->nlist, *groups = g->ngroup, *largest_cell = g->target ? big : g->pending.n;
}

/* ---------------------------------------------------------------- the view a device mirror reads */

uint64_t ivf_grow_epoch(const ivf_grow *g) { return g->epoch; }
int ivf_grow_nprobe(const ivf_grow *g) { return g->nprobe; }
int ivf_grow_cells(const ivf_grow *g) { return g->target ? g->nlist : 0; }
size_t ivf_grow_rows(const ivf_grow *g) { return g->ntotal; }

void ivf_grow_centroids(const ivf_grow *g, float *out) {
    const size_t d = (size_t)g->d;
    for (int j = 0; g->target && j < g->ngroup; j++) { /* each group's cells, stored transposed in 16-row blocks */
        const ivf_list *l = &g->groups[j];
        for (size_t r = 0; r < l->n; r++) {
            const float *blk = (const float *)l->codes + (r / BLK) * d * BLK;
            for (size_t e = 0; e < d; e++) out[(size_t)l->ids[r] * d + e] = blk[e * BLK + r % BLK];
        }
    }
}

const uint32_t *ivf_grow_cell_rows(const ivf_grow *g, int cell, size_t *n) {
    if (!g->target || cell < 0 || cell >= g->nlist) {
        *n = 0;
        return NULL;
    }
    *n = g->lists[cell].n;
    return g->lists[cell].ids;
}
