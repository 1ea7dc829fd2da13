/*
 * topk_heap.h — the k best (score, id) pairs of a stream, shared by memstore's searches (brute force, IVF-grow).
 * A min-heap whose root is the worst pair kept; ties go to the lower id, so every search orders equal scores alike.
 */
#ifndef MNEMO_TOPK_HEAP_H
#define MNEMO_TOPK_HEAP_H

#include <math.h>
#include <stdint.h>

/* "a better than b": higher score, or the same score and a lower id. */
static inline int topk_better(float sa, int64_t ia, float sb, int64_t ib) { return sa > sb || (sa == sb && ia < ib); }

static inline void topk_push(float *hs, int64_t *hi, int *n, int k, float s, int64_t id) {
    if (*n < k) {
        int i = (*n)++;
        while (i > 0) {
            int p = (i - 1) / 2;
            if (!topk_better(hs[p], hi[p], s, id)) break;
            hs[i] = hs[p], hi[i] = hi[p], i = p;
        }
        hs[i] = s, hi[i] = id;
        return;
    }
    if (!topk_better(s, id, hs[0], hi[0])) return;
    int i = 0;
    for (;;) { /* sift the new element down from the root */
        int l = 2 * i + 1, r = l + 1, w = i;
        float ws = s;
        int64_t wi = id;
        if (l < k && topk_better(ws, wi, hs[l], hi[l])) w = l, ws = hs[l], wi = hi[l];
        if (r < k && topk_better(ws, wi, hs[r], hi[r])) w = r;
        if (w == i) break;
        hs[i] = hs[w], hi[i] = hi[w], i = w;
    }
    hs[i] = s, hi[i] = id;
}

/* Heap -> ids/scores best first, padded with -1 / -inf up to k. Consumes the heap. */
static inline void topk_out(float *hs, int64_t *hi, int n, int k, int64_t *ids, float *scores) {
    for (int i = 0; i < k; i++) ids[i] = -1, scores[i] = -INFINITY;
    for (int m = n; m > 0; m--) { /* pop the worst into the last free slot */
        ids[m - 1] = hi[0], scores[m - 1] = hs[0];
        float ls = hs[m - 1];
        int64_t li = hi[m - 1];
        int j = 0, sz = m - 1;
        for (;;) {
            int l = 2 * j + 1, r = l + 1, w = j;
            float ws = ls;
            int64_t wi = li;
            if (l < sz && topk_better(ws, wi, hs[l], hi[l])) w = l, ws = hs[l], wi = hi[l];
            if (r < sz && topk_better(ws, wi, hs[r], hi[r])) w = r;
            if (w == j) break;
            hs[j] = hs[w], hi[j] = hi[w], j = w;
        }
        if (sz > 0) hs[j] = ls, hi[j] = li;
    }
}

#endif
