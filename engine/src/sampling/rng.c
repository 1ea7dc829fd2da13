/*
 * rng.c — xoshiro256** with splitmix64 seeding, transcribed from the public-domain reference code at
 * https://prng.di.unimi.it/ (xoshiro256starstar.c, splitmix64.c). Only fixed-width unsigned arithmetic is
 * used, so the stream is identical on every platform.
 */
#include "rng.h"

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t mnemo_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void mnemo_rng_seed(mnemo_rng *r, uint64_t seed) {
    /* splitmix64 is what the xoshiro authors recommend for expanding one word: its outputs are never all
     * zero for four consecutive calls, so the xoshiro state is always valid. */
    uint64_t st = seed;
    for (int i = 0; i < 4; i++) r->s[i] = mnemo_splitmix64(&st);
}

uint64_t mnemo_rng_next(mnemo_rng *r) {
    uint64_t *s = r->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double mnemo_rng_uniform(mnemo_rng *r) {
    /* Top 53 bits → exactly representable multiples of 2^-53 in [0, 1). */
    return (double)(mnemo_rng_next(r) >> 11) * 0x1.0p-53;
}
