/*
 * fot_schedule.c — see fot_schedule.h: parse "F(P,N[,M]),..." and map a batch row to the rows it sees.
 */
#include "fot_schedule.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

static void skip_ws(const char **p) {
    while (isspace((unsigned char)**p)) (*p)++;
}

/* A non-negative integer of at most 6 digits at *p. */
static int read_int(const char **p, int64_t *v) {
    skip_ws(p);
    if (!isdigit((unsigned char)**p)) return -1;
    int64_t x = 0;
    int digits = 0;
    while (isdigit((unsigned char)**p)) {
        if (++digits > 6) return -1;
        x = x * 10 + (**p - '0');
        (*p)++;
    }
    *v = x;
    return 0;
}

static int expect(const char **p, char c) {
    skip_ws(p);
    if (**p != c) return -1;
    (*p)++;
    return 0;
}

int fot_schedule_parse(fot_schedule *s, const char *text, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    enum { MAX_SEG = FOT_MAX_K };
    int64_t num[MAX_SEG], den[MAX_SEG], P[MAX_SEG], N[MAX_SEG], M[MAX_SEG];
    int n = 0;
    const char *p = text ? text : "";
    for (;;) {
        if (n == MAX_SEG) return errbuf_fail(err, errlen, "FoT schedule '%s': more than %d segments", text, MAX_SEG);
        const char *at = p;
        den[n] = 1;
        if (read_int(&p, &num[n])) goto syntax;
        skip_ws(&p);
        if (*p == '/' && (p++, read_int(&p, &den[n]))) goto syntax;
        if (expect(&p, '(') || read_int(&p, &P[n]) || expect(&p, ',') || read_int(&p, &N[n])) goto syntax;
        M[n] = 0;
        skip_ws(&p);
        if (*p == ',' && (p++, read_int(&p, &M[n]))) goto syntax;
        if (expect(&p, ')')) goto syntax;
        if (M[n] > 0 && P[n] == 0)
            return errbuf_fail(err, errlen,
                               "FoT schedule '%s': segment %d mirrors %lld other document(s)' copies of its "
                               "positives, but has none (M needs P >= 1)", text, n + 1, (long long)M[n]);
        if (num[n] < 1 || den[n] < 1 || num[n] > den[n])
            return errbuf_fail(err, errlen, "FoT schedule '%s': the fraction at '%.*s' must be in (0, 1]", text,
                               (int)(p - at), at);
        n++;
        skip_ws(&p);
        if (!*p) break;
        if (*p++ != ',') goto syntax;
    }
    int64_t K = 1; /* least common denominator */
    for (int i = 0; i < n; i++) {
        K = K / gcd64(K, den[i]) * den[i];
        if (K > FOT_MAX_K)
            return errbuf_fail(err, errlen, "FoT schedule '%s': the fractions need more than %d rows per document",
                               text,
                               FOT_MAX_K);
    }
    int64_t row = 0;
    for (int i = 0; i < n; i++) {
        int64_t rows = num[i] * (K / den[i]);
        if (row + rows > K) break;
        if (P[i] > row)
            return errbuf_fail(err, errlen, "FoT schedule '%s': segment %d wants %lld previous context(s) of the same "
                               "document, but its first row is context %lld of %lld (list segments in the order of "
                               "their positives)", text, i + 1, (long long)P[i], (long long)row, (long long)K);
        for (int64_t j = 0; j < rows; j++)
            s->pos[row + j] = (int32_t)P[i], s->neg[row + j] = (int32_t)N[i], s->mir[row + j] = (int32_t)M[i];
        row += rows;
    }
    int64_t sum_num = 0;
    for (int i = 0; i < n; i++) sum_num += num[i] * (K / den[i]);
    if (sum_num != K)
        return errbuf_fail(err, errlen, "FoT schedule '%s': the fractions sum to %lld/%lld, not 1", text,
                           (long long)sum_num,
                           (long long)K);
    s->K = (int32_t)K;
    return 0;
syntax:
    return errbuf_fail(err, errlen,
                       "FoT schedule '%s': expected segments like 1/4(0,0),1/4(1,1),1/4(2,1),1/4(3,0) (fraction of "
                       "the batch, then previous contexts of the same document and contexts of other documents, "
                       "optionally a third number: other documents whose same previous contexts it sees, as in "
                       "1/2(0,0),1/2(1,0,7))",
                       text ? text : "");
}

int32_t fot_schedule_max_extra(const fot_schedule *s) {
    int32_t m = 0;
    for (int32_t j = 0; j < s->K; j++)
        if (s->pos[j] * (1 + s->mir[j]) + s->neg[j] > m) m = s->pos[j] * (1 + s->mir[j]) + s->neg[j];
    return m;
}

int fot_schedule_check_docs(const fot_schedule *s, int32_t docs, char *err, size_t errlen) {
    int32_t need = 0, mirrored = 0;
    for (int32_t j = 0; j < s->K; j++) {
        if (s->neg[j] > need) need = s->neg[j];
        if (s->mir[j] > mirrored) mirrored = s->mir[j];
    }
    if (docs >= 1 && docs - 1 < mirrored)
        return errbuf_fail(err, errlen,
                           "FoT: rows that see %d other documents' copies of their previous contexts need %d "
                           "documents in each micro-batch: raise --batch to %d", mirrored, mirrored + 1, mirrored + 1);
    if (docs < 1 || (int64_t)(docs - 1) * s->K < need)
        return errbuf_fail(err, errlen,
                           "FoT: %d negative context(s) need at least %d other document(s) in each micro-batch "
                           "(%d rows each): raise --batch to %d", need, (need + s->K - 1) / s->K, s->K,
                           1 + (need + s->K - 1) / s->K);
    return 0;
}

int32_t fot_extra_rows(const fot_schedule *s, int32_t docs, int32_t r, int32_t *out) {
    const int32_t K = s->K, rows = docs * K, g = r / K, j = r % K;
    int32_t n = 0;
    for (int32_t i = s->pos[j]; i >= 1; i--) out[n++] = g * K + j - i;
    for (int32_t i = 1; i <= s->neg[j]; i++) out[n++] = ((g * K - i) % rows + rows) % rows;
    const int32_t tail = n;
    for (int32_t m = 1; m <= s->mir[j]; m++) {
        const int32_t h = ((g - m) % docs + docs) % docs; /* another document: m <= docs - 1 */
        for (int32_t i = s->pos[j]; i >= 1; i--) {
            const int32_t row = h * K + j - i;
            bool listed = false; /* a tail negative may be this very row: one copy in the softmax */
            for (int32_t t = s->pos[j]; t < tail && !listed; t++) listed = out[t] == row;
            if (!listed) out[n++] = row;
        }
    }
    return n;
}
