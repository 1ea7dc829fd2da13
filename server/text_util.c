/*
 * text_util.c — byte buffer, UTF-8 repair and token display text (see text_util.h).
 */
#include "text_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>

static bool sb_reserve(strbuf *b, size_t extra) {
    if (b->failed) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void sb_append(strbuf *b, const char *s, size_t n) {
    if (!sb_reserve(b, n)) return;
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void sb_puts(strbuf *b, const char *s) { sb_append(b, s, strlen(s)); }

void sb_printf(strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !sb_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void sb_free(strbuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* Length of the valid UTF-8 sequence starting at s[0], or 0 when it is invalid or truncated. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned min;
    if (c >= 0xC2 && c <= 0xDF) len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    unsigned cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

size_t utf8_valid_prefix(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (!k) break;
        i += k;
    }
    return i;
}

json_t *json_text(const char *s, size_t n) {
    if (!s) return json_string("");
    if (utf8_valid_prefix(s, n) == n) return json_stringn(s, n); /* NUL is fine: jansson writes \u0000 */
    strbuf b = {0};
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (k) {
            sb_append(&b, s + i, k);
            i += k;
        } else {
            sb_append(&b, "\xEF\xBF\xBD", 3); /* U+FFFD for each byte that starts no valid character */
            i++;
        }
    }
    json_t *j = b.failed ? NULL : json_stringn(b.data ? b.data : "", b.len);
    sb_free(&b);
    return j;
}

size_t token_text(const mnemo_model *m, mnemo_token t, char *out, size_t cap) {
    char piece[256];
    size_t n = 0, o = 0;
    if (cap == 0) return 0;
    if (mnemo_token_to_piece(m, t, piece, sizeof piece, &n) != MNEMO_OK) n = 0;
    if (n >= sizeof piece) n = sizeof piece - 1;
    unsigned byte;
    char tail;
    piece[n] = '\0';
    if (n == 6 && sscanf(piece, "<0x%2X>%c", &byte, &tail) == 1) { /* byte-fallback piece */
        if (cap > 1) out[o++] = (char)byte;
        out[o] = '\0';
        return o;
    }
    for (size_t i = 0; i < n && o + 1 < cap;) {
        if (i + 2 < n && (unsigned char)piece[i] == 0xE2 && (unsigned char)piece[i + 1] == 0x96 &&
            (unsigned char)piece[i + 2] == 0x81) { /* U+2581 LOWER ONE EIGHTH BLOCK: SentencePiece's space */
            out[o++] = ' ';
            i += 3;
        } else {
            out[o++] = piece[i++];
        }
    }
    out[o] = '\0';
    return o;
}

static mnemo_token *tokenize_with(const mnemo_model *m, const char *s, size_t n, bool bos, bool special,
                                  int32_t *n_out) {
    int32_t cap = n + 2 < (size_t)INT32_MAX ? (int32_t)(n + 2) : INT32_MAX, need = 0;
    mnemo_token *t = malloc((size_t)cap * sizeof *t);
    if (!t) return NULL;
    mnemo_status st = special ? mnemo_tokenize_special(m, s, n, bos, t, cap, &need)
                              : mnemo_tokenize(m, s, n, bos, t, cap, &need);
    if (st == MNEMO_ERR_TOO_SMALL) {
        mnemo_token *p = realloc(t, (size_t)need * sizeof *t);
        if (!p) {
            free(t);
            return NULL;
        }
        t = p;
        st = special ? mnemo_tokenize_special(m, s, n, bos, t, need, &need) : mnemo_tokenize(m, s, n, bos, t, need, &need);
    }
    if (st != MNEMO_OK) {
        free(t);
        return NULL;
    }
    *n_out = need;
    return t;
}

mnemo_token *tokenize_alloc(const mnemo_model *m, const char *s, size_t n, bool bos, int32_t *n_out) {
    return tokenize_with(m, s, n, bos, false, n_out);
}

mnemo_token *tokenize_special_alloc(const mnemo_model *m, const char *s, size_t n, int32_t *n_out) {
    return tokenize_with(m, s, n, false, true, n_out);
}

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

char *base64_encode(const unsigned char *data, size_t n) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)data[i] << 16 | (i + 1 < n ? (unsigned)data[i + 1] << 8 : 0) |
                     (i + 2 < n ? data[i + 2] : 0);
        *o++ = abc[v >> 18 & 63];
        *o++ = abc[v >> 12 & 63];
        *o++ = i + 1 < n ? abc[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? abc[v & 63] : '=';
    }
    *o = '\0';
    return out;
}
