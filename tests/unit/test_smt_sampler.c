/*
 * test_smt_sampler.c — SMT's sparse sampling with decay (engine/src/train/smt_sampler.c, Algorithm 1 of
 * sparse-memory-training.txt):
 *   - the allocations of the paper's Table 6 for M = W..7W (W = N = 64: how many sampled tokens fall in each
 *     span of windows, counted from the target part backwards), every seed;
 *   - the distribution: every position of the memory part has non-zero probability, non-increasing with distance
 *     from the target part, summing to N; empirical frequencies over 4000 draws agree with it;
 *   - samples are sorted, distinct, in range; bad requests refused with a message;
 *   - smt_row: ids, positions (original ones kept) and the loss mask of a training row.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smt_sampler.h"
#include "test_util.h"

/* Table 6: for M = kW, spans of windows (nearest first) and the share of N each receives (N / den). */
typedef struct {
    int spans, width[3], den[3];
} table6_row;
static const table6_row TABLE6[7] = {
    {1, {1}, {1}},             /* M = W:  N */
    {2, {1, 1}, {2, 2}},       /* M = 2W: N/2 | N/2 */
    {2, {1, 2}, {2, 2}},       /* M = 3W: N/2 | N/2 over 2 windows */
    {2, {1, 3}, {2, 2}},       /* M = 4W: N/2 | N/2 over 3 */
    {3, {1, 2, 2}, {2, 4, 4}}, /* M = 5W: N/2 | N/4 over 2 | N/4 over 2 */
    {3, {1, 2, 3}, {2, 4, 4}}, /* M = 6W */
    {3, {1, 2, 4}, {2, 4, 4}}, /* M = 7W */
};

static void check_table6(void) {
    const int64_t N = 64, W = 64;
    int32_t pos[64];
    char err[256];
    for (int k = 1; k <= 7; k++) {
        const int64_t M = k * W;
        const table6_row *r = &TABLE6[k - 1];
        for (uint64_t seed = 1; seed <= 20; seed++) {
            uint64_t rng = seed;
            if (smt_sample(&rng, M, N, W, 0, pos, err, sizeof err)) {
                CHECK(0, "M = %dW: %s", k, err);
                continue;
            }
            int64_t hi = M; /* spans from the target part backwards */
            for (int s = 0; s < r->spans; s++) {
                int64_t lo = hi - r->width[s] * W, got = 0;
                for (int i = 0; i < N; i++) got += pos[i] >= lo && pos[i] < hi;
                CHECK(got == N / r->den[s], "M = %dW seed %llu: %lld tokens in windows %lld..%lld, Table 6 has N/%d",
                      k, (unsigned long long)seed, (long long)got, (long long)(M - hi) / W + 1,
                      (long long)(M - lo) / W, r->den[s]);
                hi = lo;
            }
            CHECK(hi == 0, "Table 6 row %d covers the memory part", k);
            int ok = 1;
            for (int i = 0; i < N; i++) ok &= pos[i] >= 0 && pos[i] < M && (i == 0 || pos[i] > pos[i - 1]);
            CHECK(ok, "M = %dW: positions sorted, distinct, in [0, M)", k);
        }
        printf("M = %dW: Table 6 allocation reproduced over 20 seeds\n", k);
    }
}

static void check_distribution(int64_t M, int64_t N, int64_t W, int32_t iters) {
    double sum = 0, prev = 1;
    int nonzero = 1, decays = 1;
    for (int64_t p = M - 1; p >= 0; p--) { /* from the nearest to the farthest */
        double q = smt_probability(M, N, W, iters, p);
        nonzero &= q > 0;
        decays &= q <= prev + 1e-15;
        prev = q, sum += q;
    }
    CHECK(nonzero, "M %lld N %lld W %lld iters %d: a position with probability 0", (long long)M, (long long)N,
          (long long)W, iters);
    CHECK(decays, "M %lld N %lld: probability grows with distance somewhere", (long long)M, (long long)N);
    CHECK(fabs(sum - (double)N) < 1e-9, "M %lld N %lld: probabilities sum to %.6f", (long long)M, (long long)N, sum);
    /* empirical frequencies of 4000 draws against the probabilities, per window of W positions */
    const int draws = 4000;
    int32_t *pos = malloc((size_t)N * sizeof *pos);
    double *hits = calloc((size_t)M, sizeof *hits), worst = 0;
    char err[256];
    uint64_t rng = 12345;
    for (int d = 0; d < draws; d++) {
        CHECK(smt_sample(&rng, M, N, W, iters, pos, err, sizeof err) == 0, "%s", err);
        for (int64_t i = 0; i < N; i++) hits[pos[i]] += 1.0 / draws;
    }
    for (int64_t lo = 0; lo < M; lo += W) {
        double got = 0, want = 0;
        for (int64_t p = lo; p < lo + W && p < M; p++) got += hits[p], want += smt_probability(M, N, W, iters, p);
        worst = fmax(worst, fabs(got - want) / want);
    }
    CHECK(worst < 0.05, "M %lld N %lld: empirical window counts off by %.3f relative", (long long)M, (long long)N,
          worst);
    printf("M %5lld N %3lld W %3lld iters %d: p(nearest) %.4f p(farthest) %.5f, windows within %.3f of it\n",
           (long long)M, (long long)N, (long long)W, iters, smt_probability(M, N, W, iters, M - 1),
           smt_probability(M, N, W, iters, 0), worst);
    free(pos), free(hits);
}

static void check_row(void) {
    /* a document of M + T + 1 - n = 10 + 8 + 1 - 4 = 15 tokens: doc[j] = 100 + j */
    int32_t doc[15], tokens[9], pos[8], sampled[4] = {1, 4, 8, 9};
    uint8_t dmask[14], mask[8];
    for (int j = 0; j < 15; j++) doc[j] = 100 + j;
    memset(dmask, 1, sizeof dmask);
    dmask[12] = 0; /* doc[13] not counted */
    smt_row(doc, dmask, 10, 8, sampled, 4, tokens, mask, pos);
    const int32_t want_tok[9] = {101, 104, 108, 109, 110, 111, 112, 113, 114};
    const int32_t want_pos[8] = {1, 4, 8, 9, 10, 11, 12, 13};
    const uint8_t want_mask[8] = {0, 0, 0, 1, 1, 1, 0, 1};
    CHECK(!memcmp(tokens, want_tok, sizeof want_tok), "smt_row ids");
    CHECK(!memcmp(pos, want_pos, sizeof want_pos), "smt_row positions");
    CHECK(!memcmp(mask, want_mask, sizeof want_mask), "smt_row mask");
    smt_plain_row(doc, dmask, 8, tokens, mask, pos);
    CHECK(tokens[0] == 100 && tokens[8] == 108 && pos[7] == 7 && mask[7] == 1, "smt_plain_row");
}

int main(void) {
    check_table6();
    check_distribution(7 * 64, 64, 64, 0);
    check_distribution(1000, 50, 50, 0);
    check_distribution(4096, 128, 128, 2); /* two decay iterations: the rest uniform */
    check_distribution(300, 100, 100, 0);  /* M < 2W: uniform */
    char err[256] = "";
    int32_t pos[8];
    uint64_t rng = 1;
    CHECK(smt_sample(&rng, 4, 8, 8, 0, pos, err, sizeof err) == -1 && strstr(err, "cannot sample"), "n > M: %s", err);
    CHECK(smt_sample(&rng, 40, 8, 0, 0, pos, err, sizeof err) == -1, "W 0 refused");
    check_row();
    return test_summary();
}
