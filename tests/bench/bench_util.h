/*
 * bench_util.h — the clock, the seeded random numbers and the clustered keys the benchmarks share. Header-only: each
 * benchmark is one executable.
 */
#ifndef MNEMO_BENCH_UTIL_H
#define MNEMO_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* xorshift64: the next value of the stream *s (seeded non-zero). */
static inline uint64_t bench_next_u64(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Uniform in [-1, 1) from the stream *s. */
static inline float bench_frand(uint64_t *s) {
    return (float)((bench_next_u64(s) >> 40) * (1.0 / (1ull << 24))) * 2.f - 1.f;
}

/* x[n][d]: n/64 clusters around 100 centres, points in random order (kNN keys with the near ties real memory has).
 * 0, or -1 when out of memory. */
static inline int bench_nested_keys(uint64_t *rng, float *x, size_t n, int d) {
    const size_t ns = 100, nc = n / 64 ? n / 64 : 1;
    float *s = malloc(ns * (size_t)d * sizeof *s), *c = malloc(nc * (size_t)d * sizeof *c);
    if (!s || !c) {
        free(s), free(c);
        return -1;
    }
    for (size_t i = 0; i < ns * (size_t)d; i++) s[i] = bench_frand(rng) * 2.f;
    for (size_t i = 0; i < nc; i++) {
        size_t p = (size_t)((bench_frand(rng) + 1.f) * 0.5f * (float)ns) % ns;
        for (int j = 0; j < d; j++) c[i * d + j] = s[p * d + j] + 0.7f * bench_frand(rng);
    }
    for (size_t i = 0; i < n; i++) {
        size_t p = (size_t)((bench_frand(rng) + 1.f) * 0.5f * (float)nc) % nc;
        for (int j = 0; j < d; j++) x[i * d + j] = c[p * d + j] + 0.3f * bench_frand(rng);
    }
    free(s), free(c);
    return 0;
}

#endif
