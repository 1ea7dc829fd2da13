/*
 * topk_heap.h — the k best (score, id) pairs of a stream, for mem_topk_bruteforce, the scalar reference search the
 * tests check every index against (kept independent of the kernels' topk_ip op, which the exact store search
 * uses). A min-heap whose root is the worst pair kept; ties go to the lower id, as every search orders them.
 */
#ifndef MNEMO_TOPK_HEAP_H
#define MNEMO_TOPK_HEAP_H

#include <math.h>
#include <stdint.h>

/* "a better than b": higher score, or the same score and a lower id. */
static inline int topk_better(float sa, int64_t ia, float sb, int64_t ib) { return sa > sb || (sa == sb && ia < ib); }

/* Places (s, id) at slot i of a heap of n and sifts it down to where it belongs. */
static inline void topk_sift_down(float *hs, int64_t *hi, int n, int i, float s, int64_t id) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        float ws = s;
        int64_t wi = id;
        if (l < n && topk_better(ws, wi, hs[l], hi[l])) w = l, ws = hs[l], wi = hi[l];
        if (r < n && topk_better(ws, wi, hs[r], hi[r])) w = r;
        if (w == i) break;
        hs[i] = hs[w], hi[i] = hi[w], i = w;
    }
    hs[i] = s, hi[i] = id;
}

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
    if (topk_better(s, id, hs[0], hi[0])) topk_sift_down(hs, hi, k, 0, s, id);
}

/* Heap -> ids/scores best first, padded with -1 / -inf up to k. Consumes the heap. */
static inline void topk_out(float *hs, int64_t *hi, int n, int k, int64_t *ids, float *scores) {
    for (int i = 0; i < k; i++) ids[i] = -1, scores[i] = -INFINITY;
    for (int m = n; m > 0; m--) { /* pop the worst into the last free slot, the last leaf moves to the root */
        ids[m - 1] = hi[0], scores[m - 1] = hs[0];
        if (m > 1) topk_sift_down(hs, hi, m - 1, 0, hs[m - 1], hi[m - 1]);
    }
}

#endif
