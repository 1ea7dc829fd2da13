/*
 * rng.h — the sampler's pseudo-random generator: xoshiro256** (Blackman & Vigna, 2018) seeded through
 * splitmix64. Chosen because it is small, fast, statistically strong for sampling, and — unlike rand() —
 * gives bit-identical streams on every platform and libc, so a seed reproduces the same tokens everywhere.
 * Not cryptographic. The state is a plain struct so tests can set it to known-answer vectors.
 */
#ifndef MNEMO_RNG_H
#define MNEMO_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} mnemo_rng;

/* splitmix64 step: advances *state and returns the next output (used for seeding). */
uint64_t mnemo_splitmix64(uint64_t *state);
/* Fill the xoshiro state from a 64-bit seed (any seed, 0 included, gives a non-zero state). */
void mnemo_rng_seed(mnemo_rng *r, uint64_t seed);
/* Next 64 random bits. */
uint64_t mnemo_rng_next(mnemo_rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
double mnemo_rng_uniform(mnemo_rng *r);

#endif
