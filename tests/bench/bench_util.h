/*
 * bench_util.h — the clock and the seeded random numbers the benchmarks share. Header-only: each benchmark is one
 * executable.
 */
#ifndef MNEMO_BENCH_UTIL_H
#define MNEMO_BENCH_UTIL_H

#include <stdint.h>
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

#endif
