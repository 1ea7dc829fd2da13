/*
 * multipart.c — see multipart.h.
 */
#define _GNU_SOURCE /* memmem, strncasecmp */
#include "multipart.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

int multipart_boundary(const char *ct, char *out, size_t cap) {
    if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0) return -1;
    const char *b = NULL;
    for (const char *s = ct + 19; (s = strchr(s, ';')) != NULL;) {
        s++;
        while (*s == ' ' || *s == '\t') s++;
        if (!strncasecmp(s, "boundary=", 9)) {
            b = s + 9;
            break;
        }
    }
    if (!b) return -1;
    size_t n;
    if (*b == '"') {
        const char *end = strchr(++b, '"');
        if (!end) return -1;
        n = (size_t)(end - b);
    } else {
        n = strcspn(b, "; \t");
    }
    if (n < 1 || n > 70 || n + 1 > cap) return -1; /* RFC 2046: 1..70 characters */
    memcpy(out, b, n);
    out[n] = 0;
    return 0;
}

/* The value of param (e.g. "name") in a Content-Disposition value [s, e): quoted or a token. */
static bool disposition_param(const char *s, const char *e, const char *param, mp_str *out) {
    size_t pl = strlen(param);
    for (const char *at = s; at < e;) {
        const char *semi = memchr(at, ';', (size_t)(e - at));
        if (!semi) break;
        at = semi + 1;
        while (at < e && (*at == ' ' || *at == '\t')) at++;
        if ((size_t)(e - at) > pl && !strncasecmp(at, param, pl) && at[pl] == '=') {
            const char *v = at + pl + 1;
            if (v < e && *v == '"') {
                const char *q = memchr(v + 1, '"', (size_t)(e - v - 1));
                if (!q) return false;
                *out = (mp_str){v + 1, (size_t)(q - v - 1)};
            } else {
                const char *end = v;
                while (end < e && *end != ';' && *end != ' ' && *end != '\t') end++;
                *out = (mp_str){v, (size_t)(end - v)};
            }
            return true;
        }
    }
    return false;
}

/* The headers of one part, [s, e) without the blank line. */
static int part_headers(const char *s, const char *e, mp_part *p, int index, char *err, size_t errlen) {
    bool disposition = false;
    while (s < e) {
        const char *eol = memmem(s, (size_t)(e - s), "\r\n", 2);
        if (!eol) eol = e;
        const char *colon = memchr(s, ':', (size_t)(eol - s));
        if (!colon) return fail(err, errlen, "part %d: a header line without ':'", index);
        const char *v = colon + 1;
        while (v < eol && (*v == ' ' || *v == '\t')) v++;
        size_t hn = (size_t)(colon - s);
        if (hn == 19 && !strncasecmp(s, "Content-Disposition", 19)) {
            if ((size_t)(eol - v) < 9 || strncasecmp(v, "form-data", 9))
                return fail(err, errlen, "part %d: Content-Disposition is not form-data", index);
            if (!disposition_param(v, eol, "name", &p->name) || p->name.n == 0)
                return fail(err, errlen, "part %d: Content-Disposition has no name", index);
            disposition_param(v, eol, "filename", &p->filename);
            disposition = true;
        } else if (hn == 12 && !strncasecmp(s, "Content-Type", 12)) {
            p->content_type = (mp_str){v, (size_t)(eol - v)};
        }
        s = eol + 2;
    }
    return disposition ? 0 : fail(err, errlen, "part %d has no Content-Disposition header", index);
}

int multipart_parse(const char *body, size_t len, const char *boundary, mp_part parts[MP_MAX_PARTS], int *n_parts,
                    char *err, size_t errlen) {
    *n_parts = 0;
    char delim[80];
    size_t bl = strlen(boundary);
    if (bl < 1 || bl > 70) return fail(err, errlen, "the multipart boundary must have 1 to 70 characters");
    int dl = snprintf(delim, sizeof delim, "\r\n--%s", boundary);
    /* the first delimiter may open the body without the CRLF before it */
    const char *at;
    if (len >= (size_t)dl - 2 && !memcmp(body, delim + 2, (size_t)dl - 2)) at = body + dl - 2;
    else {
        const char *first = memmem(body, len, delim, (size_t)dl);
        if (!first) return fail(err, errlen, "the body holds no '--%s' delimiter", boundary);
        at = first + dl;
    }
    const char *end = body + len;
    for (;;) {
        if (end - at >= 2 && at[0] == '-' && at[1] == '-') return 0; /* the closing delimiter */
        while (at < end && (*at == ' ' || *at == '\t')) at++;          /* transport padding */
        if (end - at < 2 || at[0] != '\r' || at[1] != '\n')
            return fail(err, errlen, "part %d: the delimiter is not followed by CRLF", *n_parts);
        at += 2;
        if (*n_parts == MP_MAX_PARTS) return fail(err, errlen, "more than %d parts", MP_MAX_PARTS);
        const char *hend = memmem(at, (size_t)(end - at), "\r\n\r\n", 4);
        if (at + 2 <= end && at[0] == '\r' && at[1] == '\n') hend = at - 2; /* no headers at all */
        if (!hend) return fail(err, errlen, "part %d: its headers do not end", *n_parts);
        if (hend - at > 8192) return fail(err, errlen, "part %d: headers longer than 8 KiB", *n_parts);
        mp_part *p = &parts[*n_parts];
        memset(p, 0, sizeof *p);
        if (part_headers(at, hend > at ? hend : at, p, *n_parts, err, errlen)) return -1;
        const char *data = hend + 4;
        const char *next = memmem(data, (size_t)(end - data), delim, (size_t)dl);
        if (!next) return fail(err, errlen, "part %d ('%.*s') is not closed by the boundary", *n_parts,
                               (int)(p->name.n < 64 ? p->name.n : 64), p->name.p);
        p->data = (mp_str){data, (size_t)(next - data)};
        (*n_parts)++;
        at = next + dl;
    }
}

const mp_part *multipart_find(const mp_part *parts, int n, const char *name) {
    size_t nl = strlen(name);
    for (int i = 0; i < n; i++)
        if (parts[i].name.n == nl && !memcmp(parts[i].name.p, name, nl)) return &parts[i];
    return NULL;
}
