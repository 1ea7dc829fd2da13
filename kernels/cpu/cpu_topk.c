/*
 * cpu_topk.c — exact top-k by inner product (the kNN search of FoT memory attention), the reference for the
 * CUDA version. Keys stay in their stored dtype and are widened a tile at a time; each query keeps its k best
 * (score, id) pairs in a min-heap whose root is the worst kept, so memory is O(k) per query whatever n_keys is.
 * Queries are independent: one OpenMP work item each.
 *
 * ivf_scan_topk is the same selection over the rows of a query's probed inverted-file cells (gathered by id)
 * instead of every row: the device twin of memstore's IVF-grow search (memstore/mem_device_ivf.c). Every index is
 * checked before anything is written, so a bad probe, row id or max_scan is refused (KERN_ERANGE) with the
 * outputs untouched.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "cpu_ops.h"

#define TILE 256 /* key rows widened at once */

/* "a better than b": a higher score, or the same score and a lower id. */
static int better(float sa, int64_t ia, float sb, int64_t ib) { return sa > sb || (sa == sb && ia < ib); }

static void sift_down(float *hs, int64_t *hi, int64_t n, int64_t i, float s, int64_t id) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, w = i;
        float ws = s;
        int64_t wi = id;
        if (l < n && better(ws, wi, hs[l], hi[l])) w = l, ws = hs[l], wi = hi[l];
        if (r < n && better(ws, wi, hs[r], hi[r])) w = r;
        if (w == i) break;
        hs[i] = hs[w], hi[i] = hi[w], i = w;
    }
    hs[i] = s, hi[i] = id;
}

/* The n kept of a heap of capacity k, best first, into oi/os[0..k) (os may be NULL), the rest -1 / -inf. */
static void write_sorted(float *hs, int64_t *hi, int64_t n, int64_t k, int64_t *oi, float *os) {
    for (int64_t j = n; j < k; j++) {
        oi[j] = -1;
        if (os) os[j] = -INFINITY;
    }
    for (int64_t m = n; m > 0; m--) { /* pop the worst kept into the last free place */
        oi[m - 1] = hi[0];
        if (os) os[m - 1] = hs[0];
        sift_down(hs, hi, m - 1, 0, hs[m - 1], hi[m - 1]);
    }
}

static void push(float *hs, int64_t *hi, int64_t *n, int64_t k, float s, int64_t id) {
    if (*n < k) { /* sift up */
        int64_t i = (*n)++;
        while (i > 0) {
            int64_t p = (i - 1) / 2;
            if (!better(hs[p], hi[p], s, id)) break;
            hs[i] = hs[p], hi[i] = hi[p], i = p;
        }
        hs[i] = s, hi[i] = id;
    } else if (better(s, id, hs[0], hi[0])) {
        sift_down(hs, hi, k, 0, s, id);
    }
}

int kern_cpu_topk_ip(kern_ctx *kc, int64_t *ids, float *scores, int64_t ldo, const float *q, int64_t nq, int64_t ldq,
                     const void *keys, kern_dtype dt, int64_t n_keys, int64_t hd, int64_t k) {
    if (nq < 0 || n_keys < 0 || hd <= 0 || k <= 0 || ldo < k || ldq < hd || !ids || (nq > 0 && !q) ||
        (n_keys > 0 && !keys))
        return KERN_ESHAPE;
    if (dt != KERN_F32 && dt != KERN_BF16 && dt != KERN_F16) return KERN_ESHAPE;
    const size_t esz = kern_dtype_size(dt);
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(kc ? kc->n_threads : 1) if (nq > 1)
    for (int64_t i = 0; i < nq; i++) {
        float *tile = malloc((size_t)TILE * (size_t)hd * sizeof *tile);
        float *hs = malloc((size_t)k * sizeof *hs);
        int64_t *hi = malloc((size_t)k * sizeof *hi);
        if (!tile || !hs || !hi) {
#pragma omp atomic write
            failed = 1;
        } else {
            const float *qi = q + i * ldq;
            int64_t n = 0;
            for (int64_t j0 = 0; j0 < n_keys; j0 += TILE) {
                int64_t nt = n_keys - j0 < TILE ? n_keys - j0 : TILE;
                kern_cpu_widen(tile, (const char *)keys + (size_t)j0 * (size_t)hd * esz, dt, nt * hd);
                for (int64_t j = 0; j < nt; j++) push(hs, hi, &n, k, kern_dot_f32(qi, tile + j * hd, hd), j0 + j);
            }
            write_sorted(hs, hi, n, k, ids + i * ldo, scores ? scores + i * ldo : NULL);
        }
        free(tile);
        free(hs);
        free(hi);
    }
    return failed ? KERN_ENOMEM : KERN_OK;
}

/* The probed rows of query i, if every probe, cell and row id is in range and they number at most max_scan: their
 * count; else -1. */
static int64_t ivf_probed_rows(const int64_t *probe, int64_t nprobe, const int32_t *cell_start, const int32_t *cell_len,
                               int64_t n_cells, const int32_t *cell_rows, int64_t n_keys, int64_t max_scan) {
    int64_t total = 0;
    for (int64_t p = 0; p < nprobe; p++) {
        int64_t c = probe[p];
        if (c == -1) continue;
        if (c < 0 || c >= n_cells || cell_start[c] < 0 || cell_len[c] < 0) return -1;
        total += cell_len[c];
        if (total > max_scan) return -1;
        for (int32_t r = 0; r < cell_len[c]; r++)
            if (cell_rows[cell_start[c] + r] < 0 || cell_rows[cell_start[c] + r] >= n_keys) return -1;
    }
    return total;
}

int kern_cpu_ivf_scan_topk(kern_ctx *kc, int64_t *ids, float *scores, int64_t ldo, const float *q, int64_t nq,
                           int64_t ldq, const void *keys, kern_dtype dt, int64_t n_keys, int64_t hd,
                           const int64_t *probe, int64_t nprobe, const int32_t *cell_start, const int32_t *cell_len,
                           int64_t n_cells, const int32_t *cell_rows, int64_t max_scan, int64_t k) {
    if (nq < 0 || n_keys < 0 || hd <= 0 || k <= 0 || ldo < k || ldq < hd || nprobe < 0 || n_cells < 0 ||
        max_scan < 0 || !ids || (nq > 0 && (!q || (nprobe > 0 && !probe))) || (n_keys > 0 && !keys) ||
        (n_cells > 0 && (!cell_start || !cell_len || !cell_rows)))
        return KERN_ESHAPE;
    if (dt != KERN_F32 && dt != KERN_BF16 && dt != KERN_F16) return KERN_ESHAPE;
    for (int64_t i = 0; i < nq; i++) /* refuse before writing anything */
        if (ivf_probed_rows(probe + i * nprobe, nprobe, cell_start, cell_len, n_cells, cell_rows, n_keys, max_scan) < 0)
            return KERN_ERANGE;
    const size_t esz = kern_dtype_size(dt);
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(kc ? kc->n_threads : 1) if (nq > 1)
    for (int64_t i = 0; i < nq; i++) {
        float *row = malloc((size_t)hd * sizeof *row), *hs = malloc((size_t)k * sizeof *hs);
        int64_t *hi = malloc((size_t)k * sizeof *hi);
        if (!row || !hs || !hi) {
#pragma omp atomic write
            failed = 1;
        } else {
            const float *qi = q + i * ldq;
            int64_t n = 0;
            for (int64_t p = 0; p < nprobe; p++) {
                int64_t c = probe[i * nprobe + p];
                if (c < 0) continue;
                for (int32_t r = 0; r < cell_len[c]; r++) {
                    int64_t id = cell_rows[cell_start[c] + r];
                    kern_cpu_widen(row, (const char *)keys + (size_t)id * (size_t)hd * esz, dt, hd);
                    push(hs, hi, &n, k, kern_dot_f32(qi, row, hd), id);
                }
            }
            write_sorted(hs, hi, n, k, ids + i * ldo, scores ? scores + i * ldo : NULL);
        }
        free(row), free(hs), free(hi);
    }
    return failed ? KERN_ENOMEM : KERN_OK;
}
