/*
 * smt_sampler.c — see smt_sampler.h. Uniform draws of k distinct positions use Floyd's algorithm (k draws, no
 * rejection loop over the range), then the whole set is sorted.
 */
#include "smt_sampler.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t smt_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* k distinct positions of [lo, lo + r) appended to out (Floyd: for j = r-k .. r-1 draw t in [0, j]; take t unless
 * taken, else j). seen: r zeroed bytes, zeroed again on return. */
static void floyd(uint64_t *rng, int64_t lo, int64_t r, int64_t k, int32_t *out, uint8_t *seen) {
    for (int64_t j = r - k, got = 0; j < r; j++, got++) {
        int64_t t = (int64_t)(smt_rand(rng) % (uint64_t)(j + 1));
        if (seen[t]) t = j;
        seen[t] = 1;
        out[got] = (int32_t)(lo + t);
    }
    for (int64_t i = 0; i < k; i++) seen[out[i] - lo] = 0;
}

static bool last_level(int64_t M, int64_t n, int64_t W, int32_t iters) { return M < 2 * W || iters == 1 || n < 2; }

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int smt_sample(uint64_t *rng, int64_t M, int64_t n, int64_t W, int32_t iters, int32_t *pos, char *err,
               size_t errlen) {
    if (n < 1 || n > M || W < 1 || iters < 0 || M > INT32_MAX) {
        snprintf(err, errlen, "SMT: cannot sample %lld of %lld memory tokens (window %lld, %d decay iterations)",
                 (long long)n, (long long)M, (long long)W, iters);
        return -1;
    }
    uint8_t *seen = calloc((size_t)M, 1);
    if (!seen) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int64_t at = 0;
    while (!last_level(M, n, W, iters)) {
        int64_t near = n / 2; /* n/2 <= W: n <= M < ... and W doubles while n halves */
        if (near > W) near = W;
        floyd(rng, M - W, W, near, pos + at, seen);
        at += near, n -= near, M -= W, W *= 2;
        if (iters > 0) iters--;
    }
    floyd(rng, 0, M, n, pos + at, seen);
    free(seen);
    qsort(pos, (size_t)(at + n), sizeof *pos, cmp_i32);
    return 0;
}

double smt_probability(int64_t M, int64_t n, int64_t W, int32_t iters, int64_t p) {
    if (p < 0 || p >= M || n < 1 || n > M) return 0;
    while (!last_level(M, n, W, iters)) {
        int64_t near = n / 2 > W ? W : n / 2;
        if (p >= M - W) return (double)near / (double)W;
        n -= near, M -= W, W *= 2;
        if (iters > 0) iters--;
    }
    return (double)n / (double)M;
}

void smt_row(const int32_t *doc, const uint8_t *dmask, int64_t M, int32_t T, const int32_t *sampled, int32_t n,
             int32_t *tokens, uint8_t *mask, int32_t *pos) {
    for (int32_t t = 0; t <= T; t++) {
        int64_t j = t < n ? sampled[t] : M + (t - n); /* the document index of id t */
        tokens[t] = doc[j];
        if (t == T) break;
        pos[t] = (int32_t)j;
        /* id t+1 is predicted from row t; only the target part (ids n.. = doc[M..]) counts */
        mask[t] = t + 1 >= n && dmask[M + (t - n)];
    }
}

void smt_plain_row(const int32_t *doc, const uint8_t *dmask, int32_t T, int32_t *tokens, uint8_t *mask, int32_t *pos) {
    memcpy(tokens, doc, (size_t)(T + 1) * sizeof *tokens);
    memcpy(mask, dmask, (size_t)T);
    for (int32_t t = 0; t < T; t++) pos[t] = t;
}
