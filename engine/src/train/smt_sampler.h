/*
 * smt_sampler.h — sparse memory training (SMT; the Sparse Memory Training paper §3,
 * Algorithm 1, Table 6): which tokens of a document's memory part a training row keeps, and the row itself.
 *
 * Algorithm 1, "sparse sampling with decay", 0-based over the memory part [0, M):
 *   sample(M, n, W, iters): if M < 2W or iters == 1 (or n < 2, so that no window is left with no token):
 *                             n distinct positions uniformly from [0, M)
 *                           else n/2 (rounded down) uniformly from the nearest window [M-W, M), and
 *                             sample(M-W, n - n/2, 2W, iters - 1) from the rest — half the tokens from each
 *                             window twice as wide as the last: sampling density decays with distance.
 *   iters 0: no limit; W defaults to n (the paper's default).
 * The positions come back sorted; the sampled tokens keep them as their RoPE positions.
 *
 * A training row of T inputs (T + 1 ids) from a document of M + T + 1 - n tokens: the n sampled memory tokens, then
 * the target part (the M+1-th token on), positions = the sampled ones, then M, M+1, ...; the loss counts only the
 * target part's tokens (paper eq. 2). Mixed training (eq. 3) adds beta times the plain loss of the document's first
 * T + 1 tokens at positions 0..T-1 (smt_plain_row).
 */
#ifndef MNEMO_SMT_SAMPLER_H
#define MNEMO_SMT_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

/* The random stream: splitmix64 (tests/reference/make_s2_smt_fixtures.py draws the same numbers). */
uint64_t smt_rand(uint64_t *state);

/* n sorted distinct positions of [0, M) into pos. 0, or -1 with a message (n > M, n < 1, W < 1, iters < 0). */
int smt_sample(uint64_t *rng, int64_t M, int64_t n, int64_t W, int32_t iters, int32_t *pos, char *err,
               size_t errlen);
/* The probability that position p of [0, M) is among the sampled (the same recursion, in closed form). */
double smt_probability(int64_t M, int64_t n, int64_t W, int32_t iters, int64_t p);

/* The SMT row from a document of M + T + 1 - n tokens doc[] with its mask dmask[] (dmask[j]: doc[j+1] counts) and
 * the n sampled positions: tokens[T + 1], mask[T], pos[T]. */
void smt_row(const int32_t *doc, const uint8_t *dmask, int64_t M, int32_t T, const int32_t *sampled, int32_t n,
             int32_t *tokens, uint8_t *mask, int32_t *pos);
/* The plain row of mixed training: the document's first T + 1 tokens, positions 0..T-1. */
void smt_plain_row(const int32_t *doc, const uint8_t *dmask, int32_t T, int32_t *tokens, uint8_t *mask, int32_t *pos);

#endif
