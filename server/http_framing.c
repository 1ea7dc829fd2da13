/*
 * http_framing.c — the body framing rules (see http_framing.h).
 */
#include "http_framing.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

static bool is_ows(char c) { return c == ' ' || c == '\t'; }

static framing_value trim(const char *p, size_t n) {
    while (n && is_ows(*p)) p++, n--;
    while (n && is_ows(p[n - 1])) n--;
    return (framing_value){p, n};
}

static bool name_is(const char *name, size_t n, const char *want) {
    return n == strlen(want) && !strncasecmp(name, want, n);
}

void framing_add(framing_headers *h, const char *name, size_t name_len, const char *value, size_t value_len) {
    framing_value v = trim(value, value_len);
    if (name_is(name, name_len, "Content-Length")) {
        if (h->n_content_length < FRAMING_MAX_VALUES) h->content_length[h->n_content_length] = v;
        h->n_content_length++;
    } else if (name_is(name, name_len, "Transfer-Encoding")) {
        if (h->n_transfer_encoding < FRAMING_MAX_VALUES) h->transfer_encoding[h->n_transfer_encoding] = v;
        h->n_transfer_encoding++;
    }
}

static bool all_digits(framing_value v) {
    if (v.n == 0 || v.n > 18) return false; /* 18 digits: far past any body limit, and no overflow */
    for (size_t i = 0; i < v.n; i++)
        if (v.p[i] < '0' || v.p[i] > '9') return false;
    return true;
}

static bool same_number(framing_value a, framing_value b) {
    while (a.n > 1 && *a.p == '0') a.p++, a.n--;
    while (b.n > 1 && *b.p == '0') b.p++, b.n--;
    return a.n == b.n && !memcmp(a.p, b.p, a.n);
}

const char *framing_judge(const framing_headers *h) {
    if (h->n_content_length > FRAMING_MAX_VALUES || h->n_transfer_encoding > FRAMING_MAX_VALUES)
        return "malformed request: too many Content-Length or Transfer-Encoding header lines";
    if (h->n_content_length && h->n_transfer_encoding)
        return "malformed request: both Content-Length and Transfer-Encoding are present (ambiguous body length)";
    for (int i = 0; i < h->n_content_length; i++) {
        if (!all_digits(h->content_length[i]))
            return "malformed request: Content-Length must be a non-negative decimal integer";
        if (!same_number(h->content_length[i], h->content_length[0]))
            return "malformed request: Content-Length header lines disagree (ambiguous body length)";
    }
    if (h->n_transfer_encoding > 1 ||
        (h->n_transfer_encoding == 1 && !(h->transfer_encoding[0].n == 7 &&
                                          !strncasecmp(h->transfer_encoding[0].p, "chunked", 7))))
        return "malformed request: the only Transfer-Encoding accepted is a single 'chunked'";
    return NULL;
}

void framing_scan(framing_headers *h, const char *block, size_t n) {
    const char *p = block, *end = block + n;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = eol ? eol : end;
        size_t len = (size_t)(line_end - p);
        if (len && p[len - 1] == '\r') len--;
        const char *colon = memchr(p, ':', len);
        /* A name with whitespace before the colon is not a header libmicrohttpd would take for this one either. */
        if (colon) framing_add(h, p, (size_t)(colon - p), colon + 1, len - (size_t)(colon - p) - 1);
        if (!eol) break;
        p = eol + 1;
    }
}
