/* eval_tasks.c — see eval_tasks.h. */
#include "eval_tasks.h"

#include <string.h>

void eval_rng_seed(eval_rng *r, uint64_t seed) {
    /* splitmix64 of the seed: nearby seeds give unrelated streams, and the state is never 0 */
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    r->s = z ? z : 1;
}

uint64_t eval_rng_next(eval_rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}

uint64_t eval_rng_below(eval_rng *r, uint64_t n) {
    /* rejection keeps it unbiased for any n */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n, x;
    do x = eval_rng_next(r);
    while (x >= limit);
    return x % n;
}

/* ---------------------------------------------------------------- forgetting curve */

int32_t eval_fc_span(int32_t length) { return (length - 2) / 2; }

bool eval_fc_pick(eval_rng *r, int64_t n_text, int32_t span, int64_t *s_start, int64_t *i_start) {
    if (span < 1 || n_text < 2 * (int64_t)span) return false;
    /* I and S are disjoint: draw the pair's layout on a text shortened by one span, then push the later one past
     * the earlier one's end (every disjoint placement is reachable) */
    int64_t room = n_text - 2 * (int64_t)span + 1;
    int64_t a = (int64_t)eval_rng_below(r, (uint64_t)room), b = (int64_t)eval_rng_below(r, (uint64_t)room);
    if (a <= b) {
        *s_start = a;
        *i_start = b + span;
    } else {
        *i_start = b;
        *s_start = a + span;
    }
    return true;
}

int32_t eval_fc_input(const int32_t *text, int64_t first_start, int64_t s_start, int32_t length, int32_t bos,
                      int32_t *out) {
    int32_t span = eval_fc_span(length);
    out[0] = bos;
    memcpy(out + 1, text + first_start, (size_t)span * sizeof *out);
    out[1 + span] = bos;
    memcpy(out + 2 + span, text + s_start, (size_t)span * sizeof *out);
    for (int32_t t = 2 + 2 * span; t < length; t++) out[t] = text[s_start + span - 1]; /* odd L: never scored */
    /* the second S starts at 2 + span; its second half at 2 + span + span / 2; the prediction of token q is made
     * at q - 1. Scored predictions end with the second S (2 + 2 * span - 1), the caller stops there. */
    return 2 + span + span / 2 - 1;
}

eval_fc_lengths eval_fc_memory_lengths(const int32_t *lengths, const double *copy_acc, const double *lm_acc, int n) {
    eval_fc_lengths out = {0};
    for (int i = 0; i < n; i++) {
        if (copy_acc[i] >= 0.99) {
            out.fine = lengths[i];
            out.fine_beyond = i == n - 1;
        }
        if (copy_acc[i] > lm_acc[i] + 0.01) {
            out.coarse = lengths[i];
            out.coarse_beyond = i == n - 1;
        }
    }
    return out;
}

/* ---------------------------------------------------------------- dictionary lookup */

#define KEY_SPACE ((uint64_t)EVAL_DICT_SYMBOLS * EVAL_DICT_SYMBOLS * EVAL_DICT_SYMBOLS * EVAL_DICT_SYMBOLS)

static void put_symbols(uint64_t code, int32_t *out) {
    for (int j = 0; j < 4; j++) {
        out[j] = EVAL_DICT_FIRST_SYMBOL + (int32_t)(code % EVAL_DICT_SYMBOLS);
        code /= EVAL_DICT_SYMBOLS;
    }
}

static uint64_t gcd64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int64_t eval_dict_document(eval_rng *r, int64_t n, int64_t query_tokens, int32_t *tokens, uint8_t *score) {
    int64_t n_query = query_tokens / EVAL_DICT_RECORD;
    if (n_query < 1) n_query = 1;
    int64_t body = n - 1 - n_query * EVAL_DICT_RECORD, n_def = body / EVAL_DICT_RECORD;
    if (n_def < 1) return -1;
    if ((uint64_t)n_def > KEY_SPACE) n_def = (int64_t)KEY_SPACE;
    /* distinct keys: definition i has key (a * i + c) mod 58^4, a bijection when gcd(a, 58) = 1 */
    uint64_t a, c = eval_rng_below(r, KEY_SPACE);
    do a = 1 + eval_rng_below(r, KEY_SPACE - 1);
    while (gcd64(a, EVAL_DICT_SYMBOLS) != 1);
    memset(score, 0, (size_t)n);
    int64_t t = 0;
    tokens[t++] = 1; /* BOS */
    /* whatever whole records do not fill: tails of extra values, never scored, so the queries end the document */
    int64_t pad = body - n_def * EVAL_DICT_RECORD;
    for (int64_t i = 0; i < pad; i++) tokens[t++] = EVAL_DICT_FIRST_SYMBOL + (int32_t)eval_rng_below(r, EVAL_DICT_SYMBOLS);
    int64_t first_def = t;
    for (int64_t i = 0; i < n_def; i++) {
        tokens[t++] = EVAL_DICT_K;
        put_symbols((a * (uint64_t)i + c) % KEY_SPACE, tokens + t);
        t += 4;
        tokens[t++] = EVAL_DICT_V;
        put_symbols(eval_rng_below(r, KEY_SPACE), tokens + t);
        t += 4;
    }
    int64_t scored = 0;
    for (int64_t q = 0; q < n_query; q++) {
        int64_t def = first_def + (int64_t)eval_rng_below(r, (uint64_t)n_def) * EVAL_DICT_RECORD;
        tokens[t++] = EVAL_DICT_Q;
        memcpy(tokens + t, tokens + def + 1, 4 * sizeof *tokens);
        t += 4;
        tokens[t++] = EVAL_DICT_V;
        memcpy(tokens + t, tokens + def + 6, 4 * sizeof *tokens);
        for (int j = 0; j < 4; j++) score[t + j] = 1;
        t += 4;
        scored += 4;
    }
    return t == n ? scored : -1;
}

/* ---------------------------------------------------------------- perplexity */

bool eval_ppl_window(int64_t n, int32_t window, int32_t stride, int64_t i, eval_window *out) {
    if (window < 2 || stride < 1 || stride > window - 1 || n < 2) return false;
    int64_t first_end = n < window ? n : window;
    if (i == 0) {
        *out = (eval_window){.start = 0, .end = first_end, .scored = first_end - 1};
        return true;
    }
    int64_t prev_end = window + (i - 1) * (int64_t)stride;
    if (prev_end >= n) return false;
    int64_t end = prev_end + stride < n ? prev_end + stride : n;
    /* BOS + window - 1 text tokens ending at end */
    int64_t start = end - (window - 1);
    if (start < 1) start = 1;
    *out = (eval_window){.start = start, .end = end, .scored = end - prev_end};
    return true;
}
