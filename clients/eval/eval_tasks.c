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

static bool key_taken(const int32_t *tokens, int64_t first_def, int64_t end, int64_t self, const int32_t *key) {
    for (int64_t d = first_def; d < end; d += EVAL_DICT_RECORD)
        if (d != self && !memcmp(tokens + d + 1, key, 4 * sizeof *key)) return true;
    return false;
}

void eval_dict_confuse(eval_rng *r, int32_t *tokens, int64_t n, int percent) {
    int64_t first_def = 1, first_query = n;
    while (first_def < n && tokens[first_def] != EVAL_DICT_K) first_def++;
    for (int64_t t = first_def; t < n; t += EVAL_DICT_RECORD)
        if (tokens[t] == EVAL_DICT_Q) { first_query = t; break; }
    int64_t n_def = (first_query - first_def) / EVAL_DICT_RECORD;
    if (n_def < 2) return;
    /* each query's definition, found before keys move */
    for (int64_t q = first_query; q < n; q += EVAL_DICT_RECORD)
        for (int64_t d = first_def; d < first_query; d += EVAL_DICT_RECORD)
            if (!memcmp(tokens + d + 1, tokens + q + 1, 4 * sizeof *tokens)) {
                tokens[q + 1] = (int32_t)((d - first_def) / EVAL_DICT_RECORD); /* its index, for now */
                break;
            }
    for (int64_t i = 1; i < n_def; i++) {
        int32_t *def = tokens + first_def + i * EVAL_DICT_RECORD;
        if ((int)eval_rng_below(r, 100) < percent) {
            const int32_t *other = tokens + first_def + (int64_t)eval_rng_below(r, (uint64_t)i) * EVAL_DICT_RECORD;
            int32_t key[4];
            memcpy(key, def + 1, sizeof key);
            int shared = 2 + (int)eval_rng_below(r, 2), keep = (int)eval_rng_below(r, 4);
            for (int j = 0, taken = 0; j < 4 && taken < shared; j++) /* shared positions: all but `keep`, in order */
                if (j != keep) key[j] = other[1 + j], taken++;
            if (key[keep] == other[1 + keep]) /* differ from the definition it imitates */
                key[keep] = EVAL_DICT_FIRST_SYMBOL + (key[keep] - EVAL_DICT_FIRST_SYMBOL + 1) % EVAL_DICT_SYMBOLS;
            if (!key_taken(tokens, first_def, first_query, first_def + i * EVAL_DICT_RECORD, key))
                memcpy(def + 1, key, sizeof key);
        }
        if ((int)eval_rng_below(r, 100) < percent) {
            const int32_t *other = tokens + first_def + (int64_t)eval_rng_below(r, (uint64_t)i) * EVAL_DICT_RECORD;
            int prefix = 2 + (int)eval_rng_below(r, 2);
            memcpy(def + 6, other + 6, (size_t)prefix * sizeof *def);
        }
    }
    for (int64_t q = first_query; q < n; q += EVAL_DICT_RECORD) {
        const int32_t *def = tokens + first_def + (int64_t)tokens[q + 1] * EVAL_DICT_RECORD;
        memcpy(tokens + q + 1, def + 1, 4 * sizeof *tokens);
        memcpy(tokens + q + 6, def + 6, 4 * sizeof *tokens);
    }
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
