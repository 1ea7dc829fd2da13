/*
 * stop_strings.c — streaming stop-string matcher (contract in stop_strings.h).
 *
 * State is one buffer, `pending`: the tail of the text that is held back because it is a proper prefix of
 * some stop string. Each push appends the new text to it and then
 *   1. searches the whole buffer for every stop string; if any occurs, the earliest start wins, the text
 *      before it is emitted and the matcher is finished;
 *   2. otherwise emits everything except the longest suffix that is a proper prefix of some stop string.
 * Why searching only `pending` is enough: an occurrence that ends in the new text started either in the new
 * text or inside the previous tail, and in the latter case the part before the new text was a suffix that
 * is a prefix of that stop string, so it was held back (we always hold the longest such suffix). This also
 * handles stop strings that overlap themselves ("aab" in "aaab"): after "aaa" the held suffix is "aa".
 *
 * Semantics note: a match ends generation as soon as it is complete, so when one stop string completes while
 * another, earlier-starting one is still a partial prefix, the completed one wins (as in vLLM / HF).
 *
 * Cost: naive search and suffix tests, O(|pending| * total stop length) per push. Pending text is shorter
 * than the longest stop string plus one token's text, and stop strings are short, so this beats the set-up
 * cost of Aho-Corasick in practice.
 *
 * The emitted text always points into our own buffer (never the caller's), so it stays valid until the
 * next call as the header promises; the bytes handed out are dropped from the buffer at the next call.
 * The header gives push no error channel: if the buffer cannot grow, push reports a stop (emitting the held
 * text) — ending generation is the only safe outcome that loses no already-final text silently.
 */
#include "stop_strings.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct stop_matcher {
    char **stops;
    size_t *lens;
    int n;          /* non-empty stop strings kept */
    char *buf;      /* pending text; never NULL after construction */
    size_t cap;
    size_t len;
    size_t emitted; /* bytes at the front of buf handed out by the last call, dropped by the next */
    bool done;      /* a stop string matched (or the buffer could not grow): emit nothing more */
};

stop_matcher *stop_matcher_new(const char *const *stops, int n) {
    stop_matcher *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    if (stops && n > 0) {
        m->stops = calloc((size_t)n, sizeof *m->stops);
        m->lens = calloc((size_t)n, sizeof *m->lens);
        if (!m->stops || !m->lens) goto fail;
        for (int i = 0; i < n; i++) {
            if (!stops[i] || !stops[i][0]) continue; /* an empty string would match everywhere: ignore */
            size_t l = strlen(stops[i]);
            char *copy = malloc(l + 1);
            if (!copy) goto fail;
            memcpy(copy, stops[i], l + 1);
            m->stops[m->n] = copy;
            m->lens[m->n] = l;
            m->n++;
        }
    }
    size_t maxlen = 0;
    for (int i = 0; i < m->n; i++)
        if (m->lens[i] > maxlen) maxlen = m->lens[i];
    /* Room for a full held tail plus a typical token, so the common case never reallocates. */
    m->cap = 2 * maxlen + 64;
    m->buf = malloc(m->cap);
    if (!m->buf) goto fail;
    return m;
fail:
    stop_matcher_free(m);
    return NULL;
}

void stop_matcher_free(stop_matcher *m) {
    if (!m) return;
    if (m->stops)
        for (int i = 0; i < m->n; i++) free(m->stops[i]);
    free(m->stops);
    free(m->lens);
    free(m->buf);
    free(m);
}

/* Forget the bytes the previous call handed out. */
static void drop_emitted(stop_matcher *m) {
    if (m->emitted == 0) return;
    memmove(m->buf, m->buf + m->emitted, m->len - m->emitted);
    m->len -= m->emitted;
    m->emitted = 0;
}

static bool reserve(stop_matcher *m, size_t need) {
    if (need <= m->cap) return true;
    size_t cap = m->cap * 2;
    if (cap < need) cap = need;
    char *b = realloc(m->buf, cap);
    if (!b) return false;
    m->buf = b;
    m->cap = cap;
    return true;
}

/* First occurrence of needle in hay, or SIZE_MAX. */
static size_t find(const char *hay, size_t hlen, const char *needle, size_t nlen) {
    if (nlen > hlen) return SIZE_MAX;
    const char first = needle[0];
    for (size_t i = 0; i + nlen <= hlen; i++)
        if (hay[i] == first && memcmp(hay + i, needle, nlen) == 0) return i;
    return SIZE_MAX;
}

/* Length of the longest suffix of buf that is a proper prefix of some stop string. */
static size_t held_suffix(const stop_matcher *m) {
    size_t hold = 0;
    for (int j = 0; j < m->n; j++) {
        size_t l = m->lens[j] - 1;
        if (l > m->len) l = m->len;
        for (; l > hold; l--) {
            if (memcmp(m->buf + m->len - l, m->stops[j], l) == 0) {
                hold = l;
                break;
            }
        }
    }
    return hold;
}

bool stop_matcher_push(stop_matcher *m, const char *text, size_t len, const char **emit, size_t *emit_len) {
    static const char empty[1] = "";
    const char *e_ptr = empty;
    size_t e_len = 0;
    bool stopped = false;

    if (!m) goto out;
    drop_emitted(m);
    if (m->done) {
        stopped = true;
        goto out;
    }
    if (!text) len = 0;
    if (!reserve(m, m->len + len)) {
        /* No error channel: end generation, releasing what was held (see file comment). */
        m->done = true;
        e_len = m->len;
        m->len = 0;
        stopped = true;
        goto out;
    }
    if (len) memcpy(m->buf + m->len, text, len);
    m->len += len;

    size_t best = SIZE_MAX;
    for (int j = 0; j < m->n; j++) {
        size_t pos = find(m->buf, m->len, m->stops[j], m->lens[j]);
        if (pos < best) best = pos;
    }
    if (best != SIZE_MAX) {
        m->done = true;
        e_len = best;
        stopped = true;
        goto out;
    }
    e_len = m->len - held_suffix(m);
    m->emitted = e_len;
out:
    if (m) e_ptr = m->buf; /* read only now: reserve() may have moved it */
    if (emit) *emit = e_ptr;
    if (emit_len) *emit_len = e_len;
    return stopped;
}

void stop_matcher_flush(stop_matcher *m, const char **emit, size_t *emit_len) {
    static const char empty[1] = "";
    const char *e_ptr = empty;
    size_t e_len = 0;
    if (m) {
        drop_emitted(m);
        e_ptr = m->buf;
        if (!m->done) { /* no match: everything held back is final text */
            e_len = m->len;
            m->emitted = m->len;
        }
    }
    if (emit) *emit = e_ptr;
    if (emit_len) *emit_len = e_len;
}
