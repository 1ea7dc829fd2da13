/*
 * test_sampling.c — unit tests for the sampler (engine/src/sampling/sampler.c, rng.c) and mnemo_logprobs.
 *
 * Expectations are hand-computed or come from an independent double-precision reference of the pipeline
 * in this file that uses a full sort (the library avoids full sorts), so a wrong filter order, a wrong
 * tie-break or a histogram shortcut that drops tokens shows up as a mismatch. mnemo_sampler_probs (the
 * internal hook) exposes the exact final distribution; draws are checked for support (which tokens can
 * appear) and, over 200k draws, against the expected frequencies with a chi-square and a per-bin 5-sigma
 * bound. All randomness is seeded, so the run is deterministic.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "rng.h"
#include "sampler_internal.h"

#include "test_util.h"

/* ---------------------------------------------------------------- helpers */

static uint64_t t_state = 0x9E3779B97F4A7C15ULL;
static double t_uniform(void) { /* test-only generator, independent of the library's */
    t_state = t_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(t_state >> 11) * 0x1.0p-53;
}
static float t_normal(void) {
    double u1 = t_uniform(), u2 = t_uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static mnemo_sampler *mk(mnemo_sampler_params p) {
    mnemo_sampler *s = NULL;
    mnemo_status st = mnemo_sampler_new(&p, &s);
    if (st != MNEMO_OK || !s) {
        fprintf(stderr, "mnemo_sampler_new failed (%d)\n", (int)st);
        exit(2); /* test harness only */
    }
    return s;
}

static mnemo_sampler_params greedy_params(void) {
    mnemo_sampler_params p = mnemo_sampler_default_params();
    p.temperature = 0.0f;
    return p;
}

/* Reference pipeline in double with a full sort. hist/nh: accepted tokens, oldest first. Writes out[0..n).
 * *ambiguous is set when a top-p or min-p cut lies within rounding distance of a token, where float and
 * double may legitimately disagree. */
typedef struct {
    double v;
    int id;
} ref_item;

static int ref_cmp(const void *pa, const void *pb) {
    const ref_item *a = pa, *b = pb;
    if (a->v > b->v) return -1;
    if (a->v < b->v) return 1;
    return a->id - b->id;
}

static void ref_pipeline(const float *logits, int n, const mnemo_sampler_params *p, const int *hist, int nh,
                         double *out, int *ambiguous) {
    double *l = malloc((size_t)n * sizeof *l);
    int *cnt = calloc((size_t)n, sizeof *cnt);
    ref_item *it = malloc((size_t)n * sizeof *it);
    if (!l || !cnt || !it) exit(2);
    *ambiguous = 0;
    for (int i = 0; i < n; i++) {
        l[i] = isnan(logits[i]) ? -INFINITY : logits[i];
        out[i] = 0.0;
    }
    int start = 0;
    if (p->penalty_last_n == 0) start = nh;
    else if (p->penalty_last_n > 0 && nh > p->penalty_last_n) start = nh - p->penalty_last_n;
    for (int i = start; i < nh; i++)
        if (hist[i] >= 0 && hist[i] < n) cnt[hist[i]]++;
    for (int t = 0; t < n; t++) {
        if (!cnt[t]) continue;
        double x = l[t], r = p->repetition_penalty;
        x = x > 0 ? x / r : x * r;
        x -= p->presence_penalty + cnt[t] * (double)p->frequency_penalty;
        l[t] = x;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        it[i].v = l[i];
        it[i].id = i;
    }
    qsort(it, (size_t)n, sizeof *it, ref_cmp);
    while (m < n && it[m].v > -INFINITY) m++;
    if (p->temperature == 0.0f) {
        out[it[0].id] = 1.0;
        goto done;
    }
    if (p->top_k > 0 && p->top_k < m) m = p->top_k;
    double z = 0.0;
    double *w = malloc((size_t)m * sizeof *w);
    if (!w) exit(2);
    for (int i = 0; i < m; i++) {
        w[i] = exp((it[i].v - it[0].v) / p->temperature);
        z += w[i];
    }
    int keep = m;
    if (p->top_p < 1.0f) {
        double cum = 0.0, target = p->top_p * z;
        for (int i = 0; i < m; i++) {
            cum += w[i];
            if (fabs(cum - target) < 1e-6 * z) *ambiguous = 1;
            if (cum >= target) {
                keep = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        int j = 1;
        while (j < keep && w[j] >= p->min_p * w[0]) j++;
        for (int i = 1; i < keep; i++)
            if (fabs(w[i] - p->min_p * w[0]) < 1e-6 * w[0]) *ambiguous = 1;
        keep = j;
    }
    double tot = 0.0;
    for (int i = 0; i < keep; i++) tot += w[i];
    for (int i = 0; i < keep; i++) out[it[i].id] = w[i] / tot;
    free(w);
done:
    free(l);
    free(cnt);
    free(it);
}

/* max over i of |a - b| relative to the larger value, with an absolute floor */
static int probs_close(const double *a, const double *b, int n, double *worst_out, int *worst_i) {
    double worst = 0.0;
    *worst_i = -1;
    for (int i = 0; i < n; i++) {
        double tol = 1e-9 + 2e-5 * fmax(a[i], b[i]);
        double d = fabs(a[i] - b[i]);
        if ((a[i] == 0.0) != (b[i] == 0.0)) d = 1.0; /* support must match exactly */
        if (d > tol && d > worst) {
            worst = d;
            *worst_i = i;
        }
    }
    *worst_out = worst;
    return *worst_i < 0;
}

/* Draw `n_draws` tokens and count them. */
static void draw_counts(mnemo_sampler *s, const float *logits, int n, long n_draws, long *counts) {
    memset(counts, 0, (size_t)n * sizeof *counts);
    for (long k = 0; k < n_draws; k++) {
        mnemo_token t = -1;
        if (mnemo_sampler_sample(s, logits, n, &t) != MNEMO_OK || t < 0 || t >= n) {
            counts[0] = -1000000000L; /* poison */
            return;
        }
        counts[t]++;
    }
}

/* ---------------------------------------------------------------- rng */

static void test_rng_known_answers(void) {
    /* Published xoshiro256** outputs for the state {1, 2, 3, 4}. */
    mnemo_rng r = {{1, 2, 3, 4}};
    const uint64_t want[] = {11520ULL, 0ULL, 1509978240ULL, 1215971899390074240ULL, 1216172134540287360ULL,
                             607988272756665600ULL};
    int ok = 1;
    for (int i = 0; i < 6; i++) ok &= mnemo_rng_next(&r) == want[i];
    CHECK(ok, "xoshiro256** reference vector mismatch");

    /* Published splitmix64 outputs for the seed 0. */
    uint64_t st = 0;
    uint64_t a = mnemo_splitmix64(&st), b = mnemo_splitmix64(&st), c = mnemo_splitmix64(&st);
    CHECK(a == 0xE220A8397B1DCDAFULL && b == 0x6E789E6AA1B965F4ULL && c == 0x06C45D188009454FULL,
          "splitmix64 reference vector mismatch");

    /* Seeding through splitmix64 (the usual scheme): seed 42's first outputs. */
    mnemo_rng_seed(&r, 42);
    uint64_t o1 = mnemo_rng_next(&r), o2 = mnemo_rng_next(&r);
    CHECK(o1 == 1546998764402558742ULL && o2 == 6990951692964543102ULL, "seed 42: %llu %llu",
          (unsigned long long)o1, (unsigned long long)o2);

    mnemo_rng_seed(&r, 7);
    double lo = 1.0, hi = 0.0;
    for (int i = 0; i < 100000; i++) {
        double u = mnemo_rng_uniform(&r);
        if (u < lo) lo = u;
        if (u > hi) hi = u;
    }
    CHECK(lo >= 0.0 && hi < 1.0 && lo < 1e-3 && hi > 1.0 - 1e-3, "uniform range [%g, %g]", lo, hi);
}

/* ---------------------------------------------------------------- params */

static void test_defaults_and_validation(void) {
    mnemo_sampler_params d = mnemo_sampler_default_params();
    CHECK(d.temperature == 1.0f && d.top_k == 0 && d.top_p == 1.0f && d.min_p == 0.0f &&
              d.repetition_penalty == 1.0f && d.presence_penalty == 0.0f && d.frequency_penalty == 0.0f &&
              d.penalty_last_n == 64,
          "defaults");

    mnemo_sampler *s = (mnemo_sampler *)1;
    CHECK(mnemo_sampler_new(NULL, &s) == MNEMO_OK && s, "NULL params = defaults");
    mnemo_sampler_free(s);
    CHECK(mnemo_sampler_new(&d, NULL) == MNEMO_ERR_INVALID_ARG, "NULL out");
    mnemo_sampler_free(NULL); /* no-op */

#define BAD(field, value)                                                                                    \
    do {                                                                                                     \
        mnemo_sampler_params p = mnemo_sampler_default_params();                                             \
        p.field = value;                                                                                     \
        mnemo_sampler *x = (mnemo_sampler *)1;                                                               \
        mnemo_status st = mnemo_sampler_new(&p, &x);                                                         \
        CHECK(st == MNEMO_ERR_INVALID_ARG && x == NULL, "%s = %s accepted", #field, #value);                 \
        if (st == MNEMO_OK) mnemo_sampler_free(x);                                                           \
    } while (0)
#define GOOD(field, value)                                                                                   \
    do {                                                                                                     \
        mnemo_sampler_params p = mnemo_sampler_default_params();                                             \
        p.field = value;                                                                                     \
        mnemo_sampler *x = NULL;                                                                             \
        CHECK(mnemo_sampler_new(&p, &x) == MNEMO_OK && x, "%s = %s rejected", #field, #value);               \
        mnemo_sampler_free(x);                                                                               \
    } while (0)

    BAD(temperature, -0.1f);
    BAD(temperature, NAN);
    BAD(temperature, INFINITY);
    GOOD(temperature, 0.0f);
    GOOD(temperature, 5.0f);
    BAD(top_k, -1);
    GOOD(top_k, 1);
    BAD(top_p, 0.0f);
    BAD(top_p, -0.5f);
    BAD(top_p, 1.01f);
    BAD(top_p, NAN);
    GOOD(top_p, 1.0f);
    GOOD(top_p, 1e-6f);
    BAD(min_p, -0.01f);
    BAD(min_p, 1.01f);
    BAD(min_p, NAN);
    GOOD(min_p, 0.0f);
    GOOD(min_p, 1.0f);
    BAD(repetition_penalty, 0.0f);
    BAD(repetition_penalty, -1.0f);
    BAD(repetition_penalty, INFINITY);
    BAD(repetition_penalty, NAN);
    GOOD(repetition_penalty, 0.5f);
    BAD(presence_penalty, 2.5f);
    BAD(presence_penalty, -2.01f);
    BAD(presence_penalty, NAN);
    GOOD(presence_penalty, -2.0f);
    GOOD(presence_penalty, 2.0f);
    BAD(frequency_penalty, -3.0f);
    BAD(frequency_penalty, INFINITY);
    GOOD(frequency_penalty, 2.0f);
    BAD(penalty_last_n, -2);
    GOOD(penalty_last_n, -1);
    GOOD(penalty_last_n, 0);
#undef BAD
#undef GOOD
}

/* ---------------------------------------------------------------- greedy, NaN, argument errors */

static void test_greedy(void) {
    mnemo_sampler *s = mk(greedy_params());
    mnemo_token t = -1;
    const float a[] = {1.0f, 3.0f, 2.0f, 3.0f};
    CHECK(mnemo_sampler_sample(s, a, 4, &t) == MNEMO_OK && t == 1, "tie must go to the lowest id, got %d", t);
    const float b[] = {-5.0f, -1.0f, -2.0f, -0.5f};
    CHECK(mnemo_sampler_sample(s, b, 4, &t) == MNEMO_OK && t == 3, "all negative: got %d", t);
    const float c[] = {NAN, 0.5f, NAN, 0.25f};
    CHECK(mnemo_sampler_sample(s, c, 4, &t) == MNEMO_OK && t == 1, "NaN is -inf: got %d", t);
    const float d[] = {-INFINITY, -INFINITY, -7.0f};
    CHECK(mnemo_sampler_sample(s, d, 3, &t) == MNEMO_OK && t == 2, "got %d", t);
    const float e[] = {0.0f, INFINITY, 1.0f};
    CHECK(mnemo_sampler_sample(s, e, 3, &t) == MNEMO_OK && t == 1, "+inf wins: got %d", t);
    const float one[] = {42.0f};
    CHECK(mnemo_sampler_sample(s, one, 1, &t) == MNEMO_OK && t == 0, "vocab of one");

    const float all_nan[] = {NAN, NAN, NAN};
    const float all_ninf[] = {-INFINITY, -INFINITY};
    CHECK(mnemo_sampler_sample(s, all_nan, 3, &t) == MNEMO_ERR_INVALID_ARG, "all NaN");
    CHECK(mnemo_sampler_sample(s, all_ninf, 2, &t) == MNEMO_ERR_INVALID_ARG, "all -inf");
    CHECK(mnemo_sampler_sample(s, a, 0, &t) == MNEMO_ERR_INVALID_ARG, "n_vocab 0");
    CHECK(mnemo_sampler_sample(s, a, -3, &t) == MNEMO_ERR_INVALID_ARG, "n_vocab < 0");
    CHECK(mnemo_sampler_sample(s, NULL, 4, &t) == MNEMO_ERR_INVALID_ARG, "NULL logits");
    CHECK(mnemo_sampler_sample(s, a, 4, NULL) == MNEMO_ERR_INVALID_ARG, "NULL out");
    CHECK(mnemo_sampler_sample(NULL, a, 4, &t) == MNEMO_ERR_INVALID_ARG, "NULL sampler");
    mnemo_sampler_free(s);

    /* Stochastic settings: NaN never drawn, all-NaN rejected, +inf takes everything (two +inf split it). */
    mnemo_sampler_params p = mnemo_sampler_default_params();
    s = mk(p);
    const float f[] = {0.1f, NAN, 0.2f, NAN, 0.0f};
    long counts[5];
    draw_counts(s, f, 5, 20000, counts);
    CHECK(counts[0] > 0 && counts[1] == 0 && counts[2] > 0 && counts[3] == 0 && counts[4] > 0,
          "NaN drawn: %ld %ld %ld %ld %ld", counts[0], counts[1], counts[2], counts[3], counts[4]);
    CHECK(mnemo_sampler_sample(s, all_nan, 3, &t) == MNEMO_ERR_INVALID_ARG, "all NaN (stochastic)");
    const float g[] = {5.0f, INFINITY, -INFINITY, INFINITY, 1e30f};
    double pr[5];
    CHECK(mnemo_sampler_probs(s, g, 5, pr) == MNEMO_OK && pr[1] == 0.5 && pr[3] == 0.5 && pr[0] == 0.0 &&
              pr[2] == 0.0 && pr[4] == 0.0,
          "+inf split: %g %g %g %g %g", pr[0], pr[1], pr[2], pr[3], pr[4]);
    /* extreme but finite logits do not overflow */
    const float h[] = {FLT_MAX, -FLT_MAX, FLT_MAX};
    CHECK(mnemo_sampler_probs(s, h, 3, pr) == MNEMO_OK && pr[0] == 0.5 && pr[1] == 0.0 && pr[2] == 0.5,
          "FLT_MAX: %g %g %g", pr[0], pr[1], pr[2]);
    mnemo_sampler_free(s);
}

static void test_tiny_temperature_and_top1(void) {
    enum { N = 64 };
    float lg[N];
    mnemo_sampler *g = mk(greedy_params());
    mnemo_sampler_params p = mnemo_sampler_default_params();
    p.temperature = 1e-3f;
    mnemo_sampler *tiny = mk(p);
    p = mnemo_sampler_default_params();
    p.top_k = 1;
    p.temperature = 1.5f;
    mnemo_sampler *k1 = mk(p);
    int bad_tiny = 0, bad_k1 = 0;
    for (int trial = 0; trial < 300; trial++) {
        /* even trials: distinct values (spaced >= 0.05, so tiny T leaves exp(-50) for the runner-up);
         * odd trials: small integers, so the maximum is usually tied */
        for (int i = 0; i < N; i++)
            lg[i] = trial % 2 == 0 ? (float)((i * 37 + trial * 11) % N) * 0.05f : (float)(int)(t_uniform() * 4);
        mnemo_token tg, tt, tk;
        mnemo_sampler_sample(g, lg, N, &tg);
        mnemo_sampler_sample(tiny, lg, N, &tt);
        mnemo_sampler_sample(k1, lg, N, &tk);
        if (trial % 2 == 0 && tt != tg) bad_tiny++;
        if (tk != tg) bad_k1++;
    }
    CHECK(bad_tiny == 0, "tiny temperature differed from greedy %d times", bad_tiny);
    CHECK(bad_k1 == 0, "top_k = 1 differed from greedy %d times (ties must go to the lowest id)", bad_k1);
    mnemo_sampler_free(g);
    mnemo_sampler_free(tiny);
    mnemo_sampler_free(k1);
}

/* ---------------------------------------------------------------- top-k / top-p / min-p masks */

/* Hand-made distribution, deliberately not in id order:
 *   id:   0       1     2      3       4
 *   p:  0.0625   0.5  0.125  0.0625  0.25     (sorted: 1, 4, 2, then the 0/3 tie → 0 first) */
static const double HAND_P[5] = {0.0625, 0.5, 0.125, 0.0625, 0.25};

typedef struct {
    float temperature;
    int32_t top_k;
    float top_p, min_p;
    double want[5]; /* expected final probabilities */
} mask_case;

static void test_masks(void) {
    float lg[5];
    for (int i = 0; i < 5; i++) lg[i] = (float)log(HAND_P[i]);
    const double s2 = sqrt(0.0625) * 2 + sqrt(0.5) + sqrt(0.125) + sqrt(0.25); /* T = 2 normaliser */
    const mask_case cases[] = {
        {1.0f, 0, 1.0f, 0.0f, {0.0625, 0.5, 0.125, 0.0625, 0.25}},
        {1.0f, 0, 0.7f, 0.0f, {0, 2.0 / 3, 0, 0, 1.0 / 3}},
        {1.0f, 0, 0.8f, 0.0f, {0, 4.0 / 7, 1.0 / 7, 0, 2.0 / 7}},
        /* 0.875 < 0.9: one of the tied 0.0625 tokens joins, the lower id (0) */
        {1.0f, 0, 0.9f, 0.0f, {0.0625 / 0.9375, 0.5 / 0.9375, 0.125 / 0.9375, 0, 0.25 / 0.9375}},
        {1.0f, 0, 0.1f, 0.0f, {0, 1, 0, 0, 0}},
        {1.0f, 0, 0.99f, 0.0f, {0.0625, 0.5, 0.125, 0.0625, 0.25}},
        /* min-p: threshold min_p * 0.5 */
        {1.0f, 0, 1.0f, 0.2f, {0, 4.0 / 7, 1.0 / 7, 0, 2.0 / 7}},
        {1.0f, 0, 1.0f, 0.3f, {0, 2.0 / 3, 0, 0, 1.0 / 3}},
        {1.0f, 0, 1.0f, 0.12f, {0.0625, 0.5, 0.125, 0.0625, 0.25}},
        {1.0f, 0, 1.0f, 1.0f, {0, 1, 0, 0, 0}},
        /* top-p measured before min-p: 0.95 keeps all five, then min-p 0.2 cuts to three */
        {1.0f, 0, 0.95f, 0.2f, {0, 4.0 / 7, 1.0 / 7, 0, 2.0 / 7}},
        {1.0f, 0, 0.7f, 0.4f, {0, 2.0 / 3, 0, 0, 1.0 / 3}},
        /* top-k first: k = 3 leaves {1, 4, 2} = 4/7, 2/7, 1/7; top-p is then measured within them */
        {1.0f, 3, 1.0f, 0.0f, {0, 4.0 / 7, 1.0 / 7, 0, 2.0 / 7}},
        {1.0f, 3, 0.9f, 0.0f, {0, 4.0 / 7, 1.0 / 7, 0, 2.0 / 7}},
        {1.0f, 3, 0.8f, 0.0f, {0, 2.0 / 3, 0, 0, 1.0 / 3}},
        {1.0f, 4, 1.0f, 0.0f, {0.0625 / 0.9375, 0.5 / 0.9375, 0.125 / 0.9375, 0, 0.25 / 0.9375}},
        {1.0f, 5, 1.0f, 0.0f, {0.0625, 0.5, 0.125, 0.0625, 0.25}},
        {1.0f, 100, 1.0f, 0.0f, {0.0625, 0.5, 0.125, 0.0625, 0.25}},
        /* temperature before top-p: T = 2 gives p ∝ sqrt(p) = .343 .243 .172 .121 .121; 0.6 needs three */
        {2.0f, 0, 0.6f, 0.0f,
         {0, sqrt(0.5) / (sqrt(0.5) + sqrt(0.25) + sqrt(0.125)), sqrt(0.125) / (sqrt(0.5) + sqrt(0.25) + sqrt(0.125)),
          0, sqrt(0.25) / (sqrt(0.5) + sqrt(0.25) + sqrt(0.125))}},
        {2.0f, 0, 1.0f, 0.0f, {0.25 / s2, sqrt(0.5) / s2, sqrt(0.125) / s2, 0.25 / s2, 0.5 / s2}},
    };
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    for (int c = 0; c < n_cases; c++) {
        mnemo_sampler_params p = mnemo_sampler_default_params();
        p.temperature = cases[c].temperature;
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        p.seed = 1000 + (uint64_t)c;
        mnemo_sampler *s = mk(p);
        double pr[5];
        int ok = mnemo_sampler_probs(s, lg, 5, pr) == MNEMO_OK;
        for (int i = 0; i < 5; i++) ok &= fabs(pr[i] - cases[c].want[i]) < 1e-6;
        CHECK(ok, "case %d (T %g k %d p %g min_p %g): got %.6f %.6f %.6f %.6f %.6f", c, p.temperature, p.top_k,
              p.top_p, p.min_p, pr[0], pr[1], pr[2], pr[3], pr[4]);

        /* exactly the expected tokens appear over many draws */
        long counts[5];
        draw_counts(s, lg, 5, 20000, counts);
        int support_ok = 1;
        for (int i = 0; i < 5; i++) support_ok &= (counts[i] > 0) == (cases[c].want[i] > 0);
        CHECK(support_ok, "case %d: drawn support %ld %ld %ld %ld %ld", c, counts[0], counts[1], counts[2],
              counts[3], counts[4]);
        mnemo_sampler_free(s);
    }

    /* "mass >= top_p" is inclusive: equal logits give weights of exactly 1, so with four tokens top_p 0.5
     * is reached exactly by two of them (a strict comparison would keep three); ties go to the lower ids.
     * Checked on both the top-k path (k = 4 of 5) and the histogram path (no top-k). */
    const float eq[5] = {0.0f, 0.0f, 0.0f, 0.0f, -INFINITY};
    for (int k = 0; k <= 4; k += 4) {
        mnemo_sampler_params p = mnemo_sampler_default_params();
        p.top_k = k;
        p.top_p = 0.5f;
        mnemo_sampler *s = mk(p);
        double pr[5];
        CHECK(mnemo_sampler_probs(s, eq, 5, pr) == MNEMO_OK && pr[0] == 0.5 && pr[1] == 0.5 && pr[2] == 0.0 &&
                  pr[3] == 0.0 && pr[4] == 0.0,
              "top_p boundary (k %d): %g %g %g %g", k, pr[0], pr[1], pr[2], pr[3]);
        mnemo_sampler_free(s);
    }
}

/* ---------------------------------------------------------------- empirical frequencies */

/* chi-square of counts against probabilities (bins with p > 0), plus the largest per-bin z-score.
 * Counts in zero-probability bins are an automatic failure. */
static int freq_ok(const long *counts, const double *p, int n, long draws, double chi_limit, double *chi_out,
                   double *zmax_out) {
    double chi = 0.0, zmax = 0.0;
    int ok = 1;
    for (int i = 0; i < n; i++) {
        if (p[i] <= 0.0) {
            if (counts[i] != 0) ok = 0;
            continue;
        }
        double e = p[i] * (double)draws;
        double dlt = (double)counts[i] - e;
        chi += dlt * dlt / e;
        double z = fabs(dlt) / sqrt(e * (1.0 - p[i]));
        if (z > zmax) zmax = z;
    }
    *chi_out = chi;
    *zmax_out = zmax;
    return ok && chi < chi_limit && zmax < 5.0;
}

static void test_empirical(void) {
    enum { N = 7 };
    const long DRAWS = 200000;
    const float lg[N] = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f, 2.0f};
    long counts[1000];
    double chi, zmax;

    /* softmax(l / 0.7), computed here in double */
    mnemo_sampler_params p = mnemo_sampler_default_params();
    p.temperature = 0.7f;
    p.seed = 12345;
    mnemo_sampler *s = mk(p);
    double want[N], z = 0.0;
    for (int i = 0; i < N; i++) z += want[i] = exp((double)lg[i] / 0.7);
    for (int i = 0; i < N; i++) want[i] /= z;
    draw_counts(s, lg, N, DRAWS, counts);
    /* chi-square, 6 degrees of freedom: P(chi2 > 36) ~ 3e-6 */
    CHECK(freq_ok(counts, want, N, DRAWS, 36.0, &chi, &zmax), "T=0.7: chi2 %.2f, max z %.2f", chi, zmax);
    mnemo_sampler_free(s);

    /* top-k 3 at T 1.5: ids 4, 1, 6 (1 and 6 tie at 2.0; both are in the top 3) */
    p.temperature = 1.5f;
    p.top_k = 3;
    s = mk(p);
    double w4 = exp(3.0 / 1.5), w1 = exp(2.0 / 1.5);
    double want2[N] = {0, w1, 0, 0, w4, 0, w1};
    for (int i = 0; i < N; i++) want2[i] /= (w4 + 2 * w1);
    draw_counts(s, lg, N, DRAWS, counts);
    CHECK(freq_ok(counts, want2, N, DRAWS, 30.0, &chi, &zmax), "top-k 3: chi2 %.2f, max z %.2f", chi, zmax);
    mnemo_sampler_free(s);

    /* 1000 tokens, top-p 0.9 without top-k (histogram path), frequencies against the double reference */
    enum { M = 1000 };
    float big[M];
    for (int i = 0; i < M; i++) big[i] = t_normal();
    p = mnemo_sampler_default_params();
    p.top_p = 0.9f;
    p.temperature = 0.9f;
    p.seed = 777;
    s = mk(p);
    double ref[M];
    int amb;
    ref_pipeline(big, M, &p, NULL, 0, ref, &amb);
    int kept = 0;
    for (int i = 0; i < M; i++) kept += ref[i] > 0;
    draw_counts(s, big, M, DRAWS, counts);
    /* chi-square with kept-1 dof: mean kept-1, sd sqrt(2(kept-1)); allow 6 sd */
    double lim = (kept - 1) + 6.0 * sqrt(2.0 * (kept - 1));
    CHECK(!amb && freq_ok(counts, ref, M, DRAWS, lim, &chi, &zmax), "1000 tokens top-p: chi2 %.1f (limit %.1f, %d "
          "kept), max z %.2f", chi, lim, kept, zmax);
    mnemo_sampler_free(s);
}

/* ---------------------------------------------------------------- differential vs the reference */

static void test_vs_reference(void) {
    enum { N = 32000 };
    float *lg = malloc(N * sizeof *lg);
    double *got = malloc(N * sizeof *got), *want = malloc(N * sizeof *want);
    int *hist = malloc(300 * sizeof *hist);
    if (!lg || !got || !want || !hist) exit(2);

    typedef struct {
        float scale; /* logit spread: small = flat distribution, large = peaked */
        int quantize;
        float temperature;
        int32_t top_k;
        float top_p, min_p, rep, pres, freq;
        int32_t last_n;
    } dcase;
    const dcase cases[] = {
        {3.0f, 0, 1.0f, 0, 1.0f, 0.0f, 1, 0, 0, 64},      {3.0f, 0, 0.8f, 0, 0.9f, 0.0f, 1, 0, 0, 64},
        {3.0f, 0, 1.0f, 0, 0.5f, 0.0f, 1, 0, 0, 64},      {0.05f, 0, 1.0f, 0, 0.9f, 0.0f, 1, 0, 0, 64},
        {0.0f, 0, 1.0f, 0, 0.3f, 0.0f, 1, 0, 0, 64},      {10.0f, 0, 1.0f, 0, 0.95f, 0.0f, 1, 0, 0, 64},
        {3.0f, 0, 1.3f, 50, 0.95f, 0.0f, 1, 0, 0, 64},    {3.0f, 0, 1.0f, 1000, 1.0f, 0.05f, 1, 0, 0, 64},
        {3.0f, 0, 1.0f, 0, 0.3f, 0.1f, 1, 0, 0, 64},      {3.0f, 0, 0.5f, 0, 0.99f, 0.0f, 1, 0, 0, 64},
        {3.0f, 0, 1.0f, 0, 1.0f, 0.01f, 1, 0, 0, 64},     {3.0f, 0, 1.0f, N, 0.8f, 0.0f, 1, 0, 0, 64},
        {1.0f, 1, 1.0f, 40, 0.9f, 0.0f, 1, 0, 0, 64},     {1.0f, 1, 1.0f, 0, 0.7f, 0.0f, 1, 0, 0, 64},
        {3.0f, 0, 0.0f, 0, 1.0f, 0.0f, 1.3f, 0.5f, 0.2f, 64},
        {3.0f, 0, 0.9f, 40, 0.9f, 0.05f, 1.3f, 0.5f, 0.2f, 64},
        {3.0f, 0, 1.0f, 0, 0.9f, 0.0f, 0.7f, -0.5f, 0.1f, -1},
        {3.0f, 0, 1.0f, 0, 1.0f, 0.0f, 2.0f, 1.0f, 1.0f, 10},
        {3.0f, 0, 1e4f, 0, 0.5f, 0.0f, 1, 0, 0, 64},      {3.0f, 0, 1e-3f, 0, 0.9f, 0.0f, 1, 0, 0, 64},
    };
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    int skipped = 0;
    for (int c = 0; c < n_cases; c++) {
        const dcase *dc = &cases[c];
        mnemo_sampler_params p = mnemo_sampler_default_params();
        p.temperature = dc->temperature;
        p.top_k = dc->top_k;
        p.top_p = dc->top_p;
        p.min_p = dc->min_p;
        p.repetition_penalty = dc->rep;
        p.presence_penalty = dc->pres;
        p.frequency_penalty = dc->freq;
        p.penalty_last_n = dc->last_n;
        int amb = 0, nh = 200;
        /* fresh logits until no cut lies within rounding distance of a token (rarely more than one try) */
        for (int attempt = 0; attempt < 5; attempt++) {
            for (int i = 0; i < N; i++) {
                float x = t_normal() * dc->scale;
                lg[i] = dc->quantize ? floorf(x * 2.0f) : x;
            }
            lg[N / 3] = NAN; /* NaN and -inf are never candidates */
            lg[N / 2] = -INFINITY;
            /* history biased to likely tokens so penalties matter; repeats exercise the counts */
            for (int k = 0; k < nh; k++) {
                int best = 0;
                for (int i = (int)(t_uniform() * 50); i < N; i += 997)
                    if (lg[i] > lg[best]) best = i;
                hist[k] = k % 3 == 0 ? hist[k / 2] : best;
            }
            ref_pipeline(lg, N, &p, hist, nh, want, &amb);
            if (!amb) break;
        }
        mnemo_sampler *s = mk(p);
        for (int k = 0; k < nh; k++) mnemo_sampler_accept(s, hist[k]);
        mnemo_status st = mnemo_sampler_probs(s, lg, N, got);
        if (amb) {
            skipped++;
        } else {
            double worst = 0.0;
            int wi = -1;
            int ok = st == MNEMO_OK && probs_close(got, want, N, &worst, &wi);
            CHECK(ok, "reference case %d: worst |diff| %.3g at id %d (got %.8g want %.8g)", c, worst, wi,
                  wi >= 0 ? got[wi] : 0.0, wi >= 0 ? want[wi] : 0.0);
        }
        mnemo_sampler_free(s);
    }
    CHECK(skipped == 0, "%d of %d reference cases stayed ambiguous (test data too close to a cut)", skipped,
          n_cases);
    free(lg);
    free(got);
    free(want);
    free(hist);
}

/* ---------------------------------------------------------------- penalties by hand */

static int probs_match_logits(mnemo_sampler *s, const float *lg, int n, const double *expect_logits) {
    double pr[16], want[16], z = 0.0, mx = -INFINITY;
    if (mnemo_sampler_probs(s, lg, n, pr) != MNEMO_OK) return 0;
    for (int i = 0; i < n; i++) mx = fmax(mx, expect_logits[i]);
    for (int i = 0; i < n; i++) z += want[i] = exp(expect_logits[i] - mx);
    int ok = 1;
    for (int i = 0; i < n; i++) {
        want[i] /= z;
        if (fabs(pr[i] - want[i]) > 1e-6) ok = 0;
    }
    if (!ok) {
        fprintf(stderr, "  got :");
        for (int i = 0; i < n; i++) fprintf(stderr, " %.6f", pr[i]);
        fprintf(stderr, "\n  want:");
        for (int i = 0; i < n; i++) fprintf(stderr, " %.6f", want[i]);
        fprintf(stderr, "\n");
    }
    return ok;
}

static void test_penalties(void) {
    const float lg[5] = {2.0f, -1.0f, 0.5f, 1.0f, 0.0f};
    mnemo_sampler_params p = mnemo_sampler_default_params();
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.penalty_last_n = -1;
    mnemo_sampler *s = mk(p);
    const int hist[] = {0, 1, 0, 3};
    for (int i = 0; i < 4; i++) mnemo_sampler_accept(s, hist[i]);
    /* 0: count 2: 2/2 - 0.5 - 0.5 = 0.0     1: count 1: -1*2 - 0.5 - 0.25 = -2.75
     * 2: untouched 0.5                       3: count 1: 1/2 - 0.75 = -0.25     4: untouched 0.0 */
    const double e1[5] = {0.0, -2.75, 0.5, -0.25, 0.0};
    CHECK(probs_match_logits(s, lg, 5, e1), "all-history penalties");

    /* ids outside the vocabulary and negative ids in the history are ignored */
    mnemo_sampler_accept(s, 1000);
    mnemo_sampler_accept(s, -5);
    CHECK(probs_match_logits(s, lg, 5, e1), "out-of-vocab history ignored");

    /* greedy flips because of the penalty: raw argmax is 0, penalised argmax is 2 */
    mnemo_sampler_free(s);
    p.temperature = 0.0f;
    s = mk(p);
    for (int i = 0; i < 4; i++) mnemo_sampler_accept(s, hist[i]);
    mnemo_token t = -1;
    CHECK(mnemo_sampler_sample(s, lg, 5, &t) == MNEMO_OK && t == 2, "penalised greedy got %d", t);
    mnemo_sampler_reset(s);
    CHECK(mnemo_sampler_sample(s, lg, 5, &t) == MNEMO_OK && t == 0, "after reset greedy got %d", t);
    mnemo_sampler_free(s);

    /* window of 2: only the last two accepted tokens {0, 3} count */
    p.temperature = 1.0f;
    p.penalty_last_n = 2;
    s = mk(p);
    for (int i = 0; i < 4; i++) mnemo_sampler_accept(s, hist[i]);
    /* 0: count 1: 2/2 - 0.75 = 0.25   1: -1 (left the window)   3: 1/2 - 0.75 = -0.25 */
    const double e2[5] = {0.25, -1.0, 0.5, -0.25, 0.0};
    CHECK(probs_match_logits(s, lg, 5, e2), "window of 2");

    mnemo_sampler_free(s);

    /* a long stream through a window of 3 leaves exactly the last three tokens {4, 2, 2}:
     * 4: 0 * 2 - 0.5 - 0.25 = -0.75     2: 0.5 / 2 - 0.5 - 2 * 0.25 = -0.75 */
    p.penalty_last_n = 3;
    s = mk(p);
    for (int i = 0; i < 1000; i++) mnemo_sampler_accept(s, i % 5);
    mnemo_sampler_accept(s, 4);
    mnemo_sampler_accept(s, 2);
    mnemo_sampler_accept(s, 2);
    const double e3[5] = {2.0, -1.0, -0.75, 1.0, -0.75};
    CHECK(probs_match_logits(s, lg, 5, e3), "window of 3 after 1003 tokens");

    /* reset forgets the history */
    mnemo_sampler_reset(s);
    const double e0[5] = {2.0, -1.0, 0.5, 1.0, 0.0};
    CHECK(probs_match_logits(s, lg, 5, e0), "reset clears history");
    mnemo_sampler_free(s);

    /* penalty_last_n = 0 disables penalties */
    p.penalty_last_n = 0;
    s = mk(p);
    for (int i = 0; i < 4; i++) mnemo_sampler_accept(s, hist[i]);
    CHECK(probs_match_logits(s, lg, 5, e0), "last_n 0");
    mnemo_sampler_free(s);

    /* repetition penalty alone, < 1 (encourages repeats), and negative presence */
    p = mnemo_sampler_default_params();
    p.repetition_penalty = 0.5f;
    p.presence_penalty = -1.0f;
    s = mk(p);
    mnemo_sampler_accept(s, 1);
    mnemo_sampler_accept(s, 3);
    /* 1: -1 * 0.5 + 1 = 0.5     3: 1 / 0.5 + 1 = 3.0 */
    const double e4[5] = {2.0, 0.5, 0.5, 3.0, 0.0};
    CHECK(probs_match_logits(s, lg, 5, e4), "repetition 0.5, presence -1");
    mnemo_sampler_free(s);

    /* a history token with a -inf logit stays impossible */
    p = mnemo_sampler_default_params();
    p.repetition_penalty = 1.5f;
    p.presence_penalty = -2.0f;
    s = mk(p);
    mnemo_sampler_accept(s, 1);
    const float lg2[3] = {0.0f, -INFINITY, 1.0f};
    double pr[3];
    CHECK(mnemo_sampler_probs(s, lg2, 3, pr) == MNEMO_OK && pr[1] == 0.0, "-inf stays -inf: %g", pr[1]);
    mnemo_sampler_free(s);

    /* large token ids grow the count table lazily */
    enum { BIG = 70000 };
    float *lb = calloc(BIG, sizeof *lb);
    double *pb = malloc(BIG * sizeof *pb);
    if (!lb || !pb) exit(2);
    p = mnemo_sampler_default_params();
    p.temperature = 0.0f;
    p.frequency_penalty = 2.0f;
    s = mk(p);
    lb[BIG - 1] = 1.0f;
    lb[5] = 0.5f;
    mnemo_sampler_accept(s, BIG - 1);
    mnemo_token tb = -1;
    CHECK(mnemo_sampler_sample(s, lb, BIG, &tb) == MNEMO_OK && tb == 5, "large id penalised: got %d", tb);
    mnemo_sampler_free(s);
    free(lb);
    free(pb);
}

/* ---------------------------------------------------------------- determinism */

static void test_determinism(void) {
    enum { N = 100, T = 1000 };
    float lg[N];
    for (int i = 0; i < N; i++) lg[i] = t_normal() * 0.5f;
    mnemo_sampler_params p = mnemo_sampler_default_params();
    p.seed = 42;
    p.top_p = 0.95f;
    p.repetition_penalty = 1.1f;
    mnemo_sampler *a = mk(p), *b = mk(p);
    p.seed = 43;
    mnemo_sampler *c = mk(p);
    mnemo_token sa[T], sb[T], sc[T], sr[T];
    for (int k = 0; k < T; k++) {
        mnemo_sampler_sample(a, lg, N, &sa[k]);
        mnemo_sampler_sample(b, lg, N, &sb[k]);
        mnemo_sampler_sample(c, lg, N, &sc[k]);
        mnemo_sampler_accept(a, sa[k]);
        mnemo_sampler_accept(b, sb[k]);
        mnemo_sampler_accept(c, sc[k]);
    }
    mnemo_sampler_reset(a);
    for (int k = 0; k < T; k++) {
        mnemo_sampler_sample(a, lg, N, &sr[k]);
        mnemo_sampler_accept(a, sr[k]);
    }
    CHECK(memcmp(sa, sb, sizeof sa) == 0, "same seed, different sequences");
    CHECK(memcmp(sa, sr, sizeof sa) == 0, "reset did not reproduce the sequence");
    int diff = 0;
    for (int k = 0; k < T; k++) diff += sa[k] != sc[k];
    CHECK(diff > T / 2, "different seeds agree on %d of %d tokens", T - diff, T);

    /* the default seed is fixed: two default samplers agree */
    mnemo_sampler *d1 = NULL, *d2 = NULL;
    mnemo_sampler_new(NULL, &d1);
    mnemo_sampler_new(NULL, &d2);
    int same = 1;
    for (int k = 0; k < 200; k++) {
        mnemo_token x, y;
        mnemo_sampler_sample(d1, lg, N, &x);
        mnemo_sampler_sample(d2, lg, N, &y);
        same &= x == y;
    }
    CHECK(same, "default samplers differ");
    mnemo_sampler_free(a);
    mnemo_sampler_free(b);
    mnemo_sampler_free(c);
    mnemo_sampler_free(d1);
    mnemo_sampler_free(d2);
}

/* ---------------------------------------------------------------- logprobs */

static void test_logprobs(void) {
    enum { N = 5000 };
    float *lg = malloc(N * sizeof *lg);
    double *ref = malloc(N * sizeof *ref);
    if (!lg || !ref) exit(2);
    for (int round = 0; round < 3; round++) {
        /* round 1: a huge offset checks the max-subtraction; round 2: many ties and some NaN / -inf */
        for (int i = 0; i < N; i++) {
            float x = t_normal() * 2.0f;
            lg[i] = round == 0 ? x : round == 1 ? x + 1e4f : floorf(x);
        }
        if (round == 2) {
            lg[7] = NAN;
            lg[8] = -INFINITY;
        }
        /* double reference */
        double mx = -INFINITY, z = 0.0;
        for (int i = 0; i < N; i++)
            if (!isnan(lg[i])) mx = fmax(mx, lg[i]);
        for (int i = 0; i < N; i++)
            if (!isnan(lg[i])) z += exp((double)lg[i] - mx);
        double lse = mx + log(z);
        for (int i = 0; i < N; i++) ref[i] = isnan(lg[i]) ? -INFINITY : (double)lg[i] - lse;

        double sum = 0.0, worst = 0.0;
        int ok = 1;
        for (int i = 0; i < N; i++) {
            float lp = 1.0f;
            if (mnemo_logprobs(lg, N, i, 0, NULL, &lp) != MNEMO_OK) ok = 0;
            sum += exp((double)lp);
            if (isinf(ref[i])) {
                if (!(isinf(lp) && lp < 0)) ok = 0;
            } else if (fabs(lp - ref[i]) > worst) {
                worst = fabs(lp - ref[i]);
            }
        }
        CHECK(ok && fabs(sum - 1.0) < 1e-5 && worst < 2e-5, "round %d: sum exp %.9f, worst |diff| %.3g", round,
              sum, worst);

        /* top list: best first, ties by lower id, same values as the reference */
        mnemo_token_logprob top[MNEMO_MAX_LOGPROBS];
        float chosen;
        CHECK(mnemo_logprobs(lg, N, 3, MNEMO_MAX_LOGPROBS, top, &chosen) == MNEMO_OK, "top call");
        int *idx = malloc(N * sizeof *idx);
        if (!idx) exit(2);
        for (int i = 0; i < N; i++) idx[i] = i;
        /* selection of the true top 20 by (ref desc, id asc) */
        int tok = 1;
        for (int k = 0; k < MNEMO_MAX_LOGPROBS; k++) {
            int b = k;
            for (int i = k + 1; i < N; i++)
                if (ref[idx[i]] > ref[idx[b]] || (ref[idx[i]] == ref[idx[b]] && idx[i] < idx[b])) b = i;
            int tmp = idx[k];
            idx[k] = idx[b];
            idx[b] = tmp;
            if (top[k].id != idx[k] || fabs(top[k].logprob - ref[idx[k]]) > 2e-5) tok = 0;
            if (k > 0 && top[k].logprob > top[k - 1].logprob) tok = 0;
        }
        CHECK(tok, "round %d: top list differs from the reference (first: id %d lp %g vs %d %g)", round,
              top[0].id, top[0].logprob, idx[0], ref[idx[0]]);
        CHECK(fabs(chosen - ref[3]) < 2e-5, "chosen %g vs %g", chosen, ref[3]);
        free(idx);
    }

    /* hand-computed: logits {0, ln 3, ln 3, ln 2, -inf, NaN} → p = 1/9, 3/9, 3/9, 2/9, 0, 0 */
    const float h[6] = {0.0f, (float)log(3.0), (float)log(3.0), (float)log(2.0), -INFINITY, NAN};
    mnemo_token_logprob top[MNEMO_MAX_LOGPROBS];
    float chosen = 0.0f;
    CHECK(mnemo_logprobs(h, 6, 0, 4, top, &chosen) == MNEMO_OK && fabsf(chosen - (float)log(1.0 / 9)) < 1e-6f,
          "chosen %g", chosen);
    CHECK(top[0].id == 1 && top[1].id == 2 && top[2].id == 3 && top[3].id == 0 &&
              fabsf(top[0].logprob - (float)log(1.0 / 3)) < 1e-6f &&
              fabsf(top[2].logprob - (float)log(2.0 / 9)) < 1e-6f,
          "hand top: %d %d %d %d", top[0].id, top[1].id, top[2].id, top[3].id);
    CHECK(mnemo_logprobs(h, 6, 5, 0, NULL, &chosen) == MNEMO_OK && isinf(chosen) && chosen < 0, "NaN token");
    /* n_top beyond the vocabulary: the rest is padded */
    CHECK(mnemo_logprobs(h, 6, 0, 8, top, &chosen) == MNEMO_OK && top[5].id == 5 && top[6].id == -1 &&
              top[7].id == -1 && isinf(top[7].logprob),
          "padding: %d %d", top[6].id, top[7].id);
    /* +inf takes all the mass */
    const float pinf[3] = {1.0f, INFINITY, INFINITY};
    CHECK(mnemo_logprobs(pinf, 3, 1, 1, top, &chosen) == MNEMO_OK && fabsf(chosen - (float)log(0.5)) < 1e-6f &&
              top[0].id == 1,
          "+inf: %g", chosen);

    /* argument errors */
    CHECK(mnemo_logprobs(h, 6, -1, 0, NULL, &chosen) == MNEMO_ERR_INVALID_ARG, "token -1");
    CHECK(mnemo_logprobs(h, 6, 6, 0, NULL, &chosen) == MNEMO_ERR_INVALID_ARG, "token n");
    CHECK(mnemo_logprobs(h, 6, 0, -1, top, &chosen) == MNEMO_ERR_INVALID_ARG, "n_top -1");
    CHECK(mnemo_logprobs(h, 6, 0, MNEMO_MAX_LOGPROBS + 1, top, &chosen) == MNEMO_ERR_INVALID_ARG, "n_top 21");
    CHECK(mnemo_logprobs(h, 6, 0, 2, NULL, &chosen) == MNEMO_ERR_INVALID_ARG, "NULL top");
    CHECK(mnemo_logprobs(NULL, 6, 0, 0, NULL, &chosen) == MNEMO_ERR_INVALID_ARG, "NULL logits");
    CHECK(mnemo_logprobs(h, 0, 0, 0, NULL, &chosen) == MNEMO_ERR_INVALID_ARG, "n_vocab 0");
    const float bad[2] = {NAN, -INFINITY};
    CHECK(mnemo_logprobs(bad, 2, 0, 0, NULL, &chosen) == MNEMO_ERR_INVALID_ARG, "all NaN / -inf");
    free(lg);
    free(ref);
}

int main(void) {
    test_rng_known_answers();
    test_defaults_and_validation();
    test_greedy();
    test_tiny_temperature_and_top1();
    test_masks();
    test_empirical();
    test_vs_reference();
    test_penalties();
    test_determinism();
    test_logprobs();
    return test_summary();
}
