/*
 * sampler.c — token sampling (mnemo_sampler_*) and log-probabilities (mnemo_logprobs).
 *
 * Pipeline, in the order Hugging Face and vLLM use:
 *   copy logits (NaN → -inf) → penalties over the last penalty_last_n accepted tokens (repetition, then
 *   presence and frequency) → temperature 0: argmax, ties to the lowest id → else top-k → softmax(l/T) →
 *   top-p (smallest sorted prefix with mass >= top_p, at least one token) → min-p (drop p < min_p * p_max)
 *   → renormalise → one draw from xoshiro256** (rng.c).
 *
 * Design choices
 *   - Temperature is applied as d = (l - max) / T, never l / T: the result is <= 0, so it cannot overflow for
 *     tiny T, and exp(d) is the unnormalised weight with the most likely token at exactly 1. That also makes
 *     min-p a plain threshold (p / p_max = w / 1) that needs no sort. +inf logits are clamped to FLT_MAX so
 *     that (l - max) is never inf - inf.
 *   - No full sort per token. top_k uses a size-k heap (O(V log k), and most tokens are rejected after one
 *     comparison with the heap root), then sorts only the k survivors. Without top_k, top-p first bins every
 *     token by d into a fine log-spaced histogram and finds the bin where the cumulative mass reaches top_p:
 *     tokens in higher bins are in the nucleus without sorting, lower bins are out, and only that one bin is
 *     sorted (a few hundred tokens even for a flat 128K distribution). Without top-p nothing is sorted at all.
 *     The draw walks the survivors in that (deterministic) order.
 *   - Sorting and argmax break ties by the lower token id, so every result is a pure function of
 *     (settings, history, logits, RNG state).
 *   - Penalty history: a ring of the last penalty_last_n tokens (none when -1 = all) plus a count table
 *     indexed by token id (grown lazily to the largest id seen) and a list of the distinct tokens with a
 *     non-zero count, so applying penalties costs O(distinct tokens), not O(vocab). When every penalty is
 *     off, no history is kept at all.
 *   - mnemo_sampler_accept returns nothing, so an allocation failure there is remembered and reported as
 *     MNEMO_ERR_NOMEM by the next sample (until reset), rather than silently sampling with a wrong history.
 */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "rng.h"
#include "sampler_internal.h"

#define DEFAULT_SEED 0xC0FFEEULL

/* top-p histogram: bins of width 1/HIST_SCALE in d = ln(w), so one bin spans a probability ratio of
 * e^(1/32) ~ 1.03 and holds few tokens; the last bin collects everything below d = -32 (w < 1.3e-14). */
#define HIST_BINS 1024
#define HIST_SCALE 32.0f

typedef struct {
    int32_t id;
    float v; /* sort key: penalised logit (top-k path) or d = (l - max) / T (top-p path) */
    float w; /* unnormalised probability exp(d) */
} cand_t;

struct mnemo_sampler {
    mnemo_sampler_params p;
    mnemo_rng rng;
    bool track; /* some penalty is active and penalty_last_n != 0: keep a history */
    bool oom;   /* an accept failed to grow the history; reported by sample until reset */

    /* ring of the last penalty_last_n tokens (unused when penalty_last_n == -1); grows up to that size */
    mnemo_token *ring;
    int32_t ring_cap, ring_len, ring_head;

    /* count[t] = occurrences of t in the window; distinct[0..n_distinct) lists the t with count > 0 and
     * dpos[t] is t's index there (valid only while count[t] > 0). All three have count_cap entries. */
    int32_t *count;
    int32_t *dpos;
    mnemo_token *distinct;
    int32_t count_cap, n_distinct;

    /* per-call scratch, sized to the largest vocabulary seen */
    float *logit;
    float *w;
    cand_t *cand;
    int32_t scratch_cap;

    /* result of the last prepare(): the final candidates and their total weight */
    int32_t n_cand;
    double w_total;
};

/* ---------------------------------------------------------------- parameters */

mnemo_sampler_params mnemo_sampler_default_params(void) {
    mnemo_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repetition_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.penalty_last_n = 64;
    p.seed = DEFAULT_SEED;
    return p;
}

/* Comparisons are written so that NaN fails every one of them. */
static bool params_valid(const mnemo_sampler_params *p) {
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature)) return false;
    if (p->top_k < 0) return false;
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) return false;
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) return false;
    if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty)) return false;
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f)) return false;
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f)) return false;
    if (p->penalty_last_n < -1) return false;
    return true;
}

/* ---------------------------------------------------------------- lifetime */

mnemo_status mnemo_sampler_new(const mnemo_sampler_params *params, mnemo_sampler **out) {
    if (!out) return MNEMO_ERR_INVALID_ARG;
    *out = NULL;
    mnemo_sampler_params p = params ? *params : mnemo_sampler_default_params();
    if (!params_valid(&p)) return MNEMO_ERR_INVALID_ARG;

    mnemo_sampler *s = calloc(1, sizeof *s);
    if (!s) return MNEMO_ERR_NOMEM;
    s->p = p;
    s->track = p.penalty_last_n != 0 &&
               (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f);
    mnemo_rng_seed(&s->rng, p.seed);
    *out = s;
    return MNEMO_OK;
}

void mnemo_sampler_free(mnemo_sampler *s) {
    if (!s) return;
    free(s->ring);
    free(s->count);
    free(s->dpos);
    free(s->distinct);
    free(s->logit);
    free(s->w);
    free(s->cand);
    free(s);
}

void mnemo_sampler_reset(mnemo_sampler *s) {
    if (!s) return;
    /* Only the non-zero counts need clearing, and the distinct list names exactly those. */
    for (int32_t i = 0; i < s->n_distinct; i++) s->count[s->distinct[i]] = 0;
    s->n_distinct = 0;
    s->ring_len = 0;
    s->ring_head = 0;
    s->oom = false;
    mnemo_rng_seed(&s->rng, s->p.seed);
}

/* ---------------------------------------------------------------- history */

/* Grow the count tables so that id `t` fits. Each realloc'ed pointer is kept as soon as it succeeds (a
 * larger buffer is always valid); count_cap only moves once all three are large enough. */
static bool grow_counts(mnemo_sampler *s, int32_t t) {
    int64_t want = (int64_t)s->count_cap * 2;
    if (want < 256) want = 256;
    if (want < (int64_t)t + 1) want = (int64_t)t + 1;
    if (want > (int64_t)MNEMO_SAMPLER_MAX_TOKEN_ID + 1) want = (int64_t)MNEMO_SAMPLER_MAX_TOKEN_ID + 1;
    size_t n = (size_t)want;

    int32_t *c = realloc(s->count, n * sizeof *c);
    if (!c) return false;
    s->count = c;
    int32_t *d = realloc(s->dpos, n * sizeof *d);
    if (!d) return false;
    s->dpos = d;
    mnemo_token *l = realloc(s->distinct, n * sizeof *l);
    if (!l) return false;
    s->distinct = l;

    memset(s->count + s->count_cap, 0, (n - (size_t)s->count_cap) * sizeof *c);
    s->count_cap = (int32_t)n;
    return true;
}

static void count_inc(mnemo_sampler *s, mnemo_token t) {
    if (s->count[t]++ == 0) {
        s->dpos[t] = s->n_distinct;
        s->distinct[s->n_distinct++] = t;
    }
}

static void count_dec(mnemo_sampler *s, mnemo_token t) {
    if (--s->count[t] == 0) { /* swap-remove from the distinct list */
        int32_t j = s->dpos[t];
        mnemo_token last = s->distinct[--s->n_distinct];
        s->distinct[j] = last;
        s->dpos[last] = j;
    }
}

void mnemo_sampler_accept(mnemo_sampler *s, mnemo_token token) {
    if (!s || !s->track || s->oom) return;
    /* Negative or absurdly large ids cannot be in any vocabulary; ignoring them beats a huge allocation. */
    if (token < 0 || token > MNEMO_SAMPLER_MAX_TOKEN_ID) return;
    if (token >= s->count_cap && !grow_counts(s, token)) {
        s->oom = true;
        return;
    }

    const int32_t last_n = s->p.penalty_last_n;
    if (last_n == -1) { /* whole history: counts only */
        count_inc(s, token);
        return;
    }
    if (s->ring_len < last_n) {
        if (s->ring_len == s->ring_cap) {
            /* The ring has not wrapped yet (head == 0), so growing it is a plain realloc. */
            int64_t cap = (int64_t)s->ring_cap * 2;
            if (cap < 64) cap = 64;
            if (cap > last_n) cap = last_n;
            mnemo_token *r = realloc(s->ring, (size_t)cap * sizeof *r);
            if (!r) {
                s->oom = true;
                return;
            }
            s->ring = r;
            s->ring_cap = (int32_t)cap;
        }
        s->ring[s->ring_len++] = token;
        count_inc(s, token);
        return;
    }
    /* Full window: the oldest token leaves as the new one arrives. */
    count_dec(s, s->ring[s->ring_head]);
    s->ring[s->ring_head] = token;
    count_inc(s, token);
    s->ring_head = (s->ring_head + 1) % last_n;
}

/* ---------------------------------------------------------------- pipeline */

static bool ensure_scratch(mnemo_sampler *s, int32_t n) {
    if (n <= s->scratch_cap) return true;
    float *l = realloc(s->logit, (size_t)n * sizeof *l);
    if (!l) return false;
    s->logit = l;
    float *w = realloc(s->w, (size_t)n * sizeof *w);
    if (!w) return false;
    s->w = w;
    cand_t *c = realloc(s->cand, (size_t)n * sizeof *c);
    if (!c) return false;
    s->cand = c;
    s->scratch_cap = n;
    return true;
}

static void apply_penalties(const mnemo_sampler *s, float *l, int32_t n) {
    if (!s->track) return;
    const float r = s->p.repetition_penalty;
    const float pres = s->p.presence_penalty;
    const float freq = s->p.frequency_penalty;
    for (int32_t j = 0; j < s->n_distinct; j++) {
        mnemo_token t = s->distinct[j];
        if (t >= n) continue; /* seen, but outside this vocabulary */
        float x = l[t];
        if (r != 1.0f) x = x > 0.0f ? x / r : x * r;
        x -= pres + (float)s->count[t] * freq;
        l[t] = x;
    }
}

/* a ranks before b: larger key, then lower id */
static inline bool better(float av, int32_t aid, float bv, int32_t bid) {
    return av > bv || (av == bv && aid < bid);
}

static int cmp_cand(const void *pa, const void *pb) {
    const cand_t *a = pa, *b = pb;
    if (better(a->v, a->id, b->v, b->id)) return -1;
    if (better(b->v, b->id, a->v, a->id)) return 1;
    return 0;
}

/* Min-heap with the worst candidate at the root. */
static void heap_sift_up(cand_t *h, int32_t i) {
    cand_t x = h[i];
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (!better(h[parent].v, h[parent].id, x.v, x.id)) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = x;
}

static void heap_sift_down(cand_t *h, int32_t n, int32_t i) {
    cand_t x = h[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && better(h[c].v, h[c].id, h[c + 1].v, h[c + 1].id)) c++; /* the worse child */
        if (!better(x.v, x.id, h[c].v, h[c].id)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

/* cand[0..nc) is sorted best first with weights w; z is the softmax denominator top-p is measured against.
 * Applies top-p then min-p, leaving the survivors as a prefix. */
static void finish_sorted(mnemo_sampler *s, int32_t nc, double z) {
    const cand_t *c = s->cand;
    int32_t keep = nc;
    if (s->p.top_p < 1.0f) {
        const double target = (double)s->p.top_p * z;
        double cum = 0.0;
        for (int32_t i = 0; i < nc; i++) {
            cum += c[i].w;
            if (cum >= target) {
                keep = i + 1;
                break;
            }
        }
        /* Not reached (rounding): keep everything, which always includes the prefix that would have been. */
    }
    if (s->p.min_p > 0.0f && keep > 1) {
        const double thr = (double)s->p.min_p * c[0].w; /* c[0] is the most likely token */
        int32_t j = 1;
        while (j < keep && (double)c[j].w >= thr) j++;
        keep = j;
    }
    double total = 0.0;
    for (int32_t i = 0; i < keep; i++) total += c[i].w;
    s->n_cand = keep;
    s->w_total = total;
}

static void prepare_top_k(mnemo_sampler *s, int32_t n, float max) {
    const float *l = s->logit;
    const int32_t k = s->p.top_k;
    cand_t *h = s->cand;
    int32_t hn = 0;
    for (int32_t i = 0; i < n; i++) {
        float x = l[i];
        if (x == -INFINITY) continue;
        if (hn < k) {
            h[hn].id = i;
            h[hn].v = x;
            heap_sift_up(h, hn++);
        } else if (better(x, i, h[0].v, h[0].id)) {
            h[0].id = i;
            h[0].v = x;
            heap_sift_down(h, hn, 0);
        }
    }
    qsort(h, (size_t)hn, sizeof *h, cmp_cand);
    const float t = s->p.temperature;
    double z = 0.0;
    for (int32_t i = 0; i < hn; i++) {
        h[i].w = expf((h[i].v - max) / t);
        z += h[i].w;
    }
    finish_sorted(s, hn, z);
}

static inline int hist_bin(float d) {
    float x = -d * HIST_SCALE; /* >= 0, possibly +inf */
    return x >= (float)(HIST_BINS - 1) ? HIST_BINS - 1 : (int)x;
}

static void prepare_full(mnemo_sampler *s, int32_t n, float max) {
    const float *l = s->logit;
    const float t = s->p.temperature;
    cand_t *c = s->cand;

    if (s->p.top_p >= 1.0f) {
        /* No prefix to find: keep every token with non-zero weight that passes min-p (p / p_max = w, since
         * the most likely token has w = exp(0) = 1), in id order. */
        const double thr = (double)s->p.min_p;
        int32_t nc = 0;
        double total = 0.0;
        for (int32_t i = 0; i < n; i++) {
            if (l[i] == -INFINITY) continue;
            float d = (l[i] - max) / t;
            float w = expf(d);
            if (w <= 0.0f || (double)w < thr) continue;
            c[nc].id = i;
            c[nc].v = d;
            c[nc].w = w;
            nc++;
            total += w;
        }
        s->n_cand = nc;
        s->w_total = total;
        return;
    }

    /* top-p without top-k. One pass bins every token's weight by d. The nucleus is a sorted prefix, so with
     * B the first bin at which the cumulative bin mass reaches the target, every token in a bin above B is in
     * it (its prefix mass is below the target), no token below B is, and only bin B itself needs sorting. */
    float *w = s->w;
    double mass[HIST_BINS] = {0};
    double z = 0.0;
    for (int32_t i = 0; i < n; i++) {
        if (l[i] == -INFINITY) {
            w[i] = 0.0f;
            continue;
        }
        float d = (l[i] - max) / t;
        w[i] = expf(d);
        z += w[i];
        mass[hist_bin(d)] += w[i];
    }
    const double target = (double)s->p.top_p * z;
    double cum = 0.0;
    int edge = HIST_BINS - 1;
    for (int b = 0; b < HIST_BINS; b++) {
        cum += mass[b];
        if (cum >= target) {
            edge = b;
            break;
        }
    }

    /* Sure tokens fill cand from the front in id order; edge-bin tokens fill it from the back. */
    int32_t n_sure = 0, n_edge = 0;
    double cum_sure = 0.0;
    for (int32_t i = 0; i < n; i++) {
        if (l[i] == -INFINITY) continue;
        float d = (l[i] - max) / t;
        int b = hist_bin(d);
        if (b > edge) continue;
        cand_t *dst = b < edge ? &c[n_sure++] : &c[n - 1 - n_edge++];
        dst->id = i;
        dst->v = d;
        dst->w = w[i];
        if (b < edge) cum_sure += w[i];
    }
    memmove(c + n_sure, c + n - n_edge, (size_t)n_edge * sizeof *c);
    qsort(c + n_sure, (size_t)n_edge, sizeof *c, cmp_cand);
    int32_t keep = n_sure + n_edge; /* if rounding keeps the walk short of the target, keep the whole bin */
    cum = cum_sure;
    for (int32_t j = n_sure; j < n_sure + n_edge; j++) {
        cum += c[j].w;
        if (cum >= target) {
            keep = j + 1;
            break;
        }
    }

    /* min-p: p / p_max = w (the most likely token, in bin 0, has w = 1); filter in place, order kept. */
    int32_t nc = keep;
    if (s->p.min_p > 0.0f) {
        const double thr = (double)s->p.min_p;
        nc = 0;
        for (int32_t j = 0; j < keep; j++)
            if ((double)c[j].w >= thr) c[nc++] = c[j];
    }
    double total = 0.0;
    for (int32_t j = 0; j < nc; j++) total += c[j].w;
    s->n_cand = nc;
    s->w_total = total;
}

/* Run the pipeline; on success cand[0..n_cand) holds the tokens that may be drawn and w_total their total
 * weight. */
static mnemo_status prepare(mnemo_sampler *s, const float *logits, int32_t n) {
    if (!s || !logits || n <= 0) return MNEMO_ERR_INVALID_ARG;
    if (s->oom) return MNEMO_ERR_NOMEM;
    if (!ensure_scratch(s, n)) return MNEMO_ERR_NOMEM;

    float *l = s->logit;
    for (int32_t i = 0; i < n; i++) l[i] = isnan(logits[i]) ? -INFINITY : logits[i];
    apply_penalties(s, l, n);

    /* Clamp +inf (from the model or from a penalty < 1 doubling a huge logit) so that l - max stays finite. */
    float max = -INFINITY;
    int32_t arg = -1;
    for (int32_t i = 0; i < n; i++) {
        if (l[i] == INFINITY) l[i] = FLT_MAX;
        if (l[i] > max) { /* strict: the lowest id wins ties */
            max = l[i];
            arg = i;
        }
    }
    if (arg < 0) return MNEMO_ERR_INVALID_ARG; /* every logit is -inf or NaN */

    if (s->p.temperature == 0.0f) {
        s->cand[0].id = arg;
        s->cand[0].v = max;
        s->cand[0].w = 1.0f;
        s->n_cand = 1;
        s->w_total = 1.0;
        return MNEMO_OK;
    }
    if (s->p.top_k > 0 && s->p.top_k < n)
        prepare_top_k(s, n, max);
    else
        prepare_full(s, n, max);
    return MNEMO_OK;
}

mnemo_status mnemo_sampler_sample(mnemo_sampler *s, const float *logits, int32_t n_vocab, mnemo_token *out) {
    if (!out) return MNEMO_ERR_INVALID_ARG;
    mnemo_status st = prepare(s, logits, n_vocab);
    if (st != MNEMO_OK) return st;

    const cand_t *c = s->cand;
    if (s->n_cand == 1) { /* greedy or a single survivor: no need to consume randomness */
        *out = c[0].id;
        return MNEMO_OK;
    }
    const double u = mnemo_rng_uniform(&s->rng) * s->w_total;
    double cum = 0.0;
    mnemo_token pick = c[0].id; /* always a survivor with w = 1 */
    for (int32_t i = 0; i < s->n_cand; i++) {
        if (c[i].w <= 0.0f) continue;
        pick = c[i].id;
        cum += c[i].w;
        if (u < cum) break; /* falls through to the last positive candidate if rounding leaves u >= total */
    }
    *out = pick;
    return MNEMO_OK;
}

mnemo_status mnemo_sampler_probs(mnemo_sampler *s, const float *logits, int32_t n_vocab, double *probs) {
    if (!probs) return MNEMO_ERR_INVALID_ARG;
    mnemo_status st = prepare(s, logits, n_vocab);
    if (st != MNEMO_OK) return st;
    for (int32_t i = 0; i < n_vocab; i++) probs[i] = 0.0;
    for (int32_t i = 0; i < s->n_cand; i++) probs[s->cand[i].id] = s->cand[i].w / s->w_total;
    return MNEMO_OK;
}

/* ---------------------------------------------------------------- log-probabilities */

/* Same sanitising as the sampler: NaN → -inf, +inf → FLT_MAX (a +inf logit then gets all the mass). */
static inline float sane_logit(float x) {
    if (isnan(x)) return -INFINITY;
    if (x == INFINITY) return FLT_MAX;
    return x;
}

mnemo_status mnemo_logprobs(const float *logits, int32_t n_vocab, mnemo_token token, int32_t n_top,
                            mnemo_token_logprob *top, float *chosen_logprob) {
    if (!logits || n_vocab <= 0 || token < 0 || token >= n_vocab) return MNEMO_ERR_INVALID_ARG;
    if (n_top < 0 || n_top > MNEMO_MAX_LOGPROBS || (n_top > 0 && !top)) return MNEMO_ERR_INVALID_ARG;

    float maxf = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) {
        float x = sane_logit(logits[i]);
        if (x > maxf) maxf = x;
    }
    if (maxf == -INFINITY) return MNEMO_ERR_INVALID_ARG;

    /* log-sum-exp around the max: every term is exp(<= 0) so nothing overflows; the terms are computed in
     * float (each is accurate to ~1e-7 relative) and summed in double so 128K of them lose nothing more. */
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) {
        float x = sane_logit(logits[i]);
        if (x != -INFINITY) sum += expf(x - maxf);
    }
    /* logprob = (x - max) - log(sum); subtracting the max first keeps the log(sum) term from being absorbed
     * when the max is huge (a clamped +inf). sum >= 1: the max contributes exp(0). */
    const double log_sum = log(sum);
    const double dmax = (double)maxf;

    if (chosen_logprob) *chosen_logprob = (float)(((double)sane_logit(logits[token]) - dmax) - log_sum);

    /* Top n by one pass of insertion into a short sorted list; ids arrive in increasing order and only a
     * strictly larger value moves ahead, so ties keep the lower id first. */
    const int32_t want = n_top < n_vocab ? n_top : n_vocab;
    float vals[MNEMO_MAX_LOGPROBS];
    mnemo_token ids[MNEMO_MAX_LOGPROBS];
    int32_t filled = 0;
    for (int32_t i = 0; i < n_vocab && want > 0; i++) {
        float x = sane_logit(logits[i]);
        if (filled == want && !(x > vals[want - 1])) continue;
        int32_t pos = filled < want ? filled++ : want - 1;
        while (pos > 0 && x > vals[pos - 1]) {
            vals[pos] = vals[pos - 1];
            ids[pos] = ids[pos - 1];
            pos--;
        }
        vals[pos] = x;
        ids[pos] = i;
    }
    for (int32_t k = 0; k < filled; k++) {
        top[k].id = ids[k];
        top[k].logprob = (float)(((double)vals[k] - dmax) - log_sum);
    }
    /* A vocabulary smaller than n_top: pad so the caller never reads uninitialised entries. */
    for (int32_t k = filled; k < n_top; k++) {
        top[k].id = -1;
        top[k].logprob = -INFINITY;
    }
    return MNEMO_OK;
}
