/*
 * http_framing.h — how a request's body is delimited, judged before anyone reads it (RFC 9112 section 6.3).
 *
 * Why here and not in libmicrohttpd: 0.9.75 reads a chunked body when Content-Length is also present, takes the
 * first of two different Content-Length values, and answers "Content-Length: -1" with its status line twice, all
 * without closing the connection; behind a proxy that frames the same bytes differently, the rest of the body is
 * then read as a second request (request smuggling). A request whose framing is ambiguous gets a 400 and its
 * connection is closed.
 */
#ifndef MNEMO_SERVER_HTTP_FRAMING_H
#define MNEMO_SERVER_HTTP_FRAMING_H

#include <stddef.h>

#define FRAMING_MAX_VALUES 8 /* more Content-Length or Transfer-Encoding lines than this are refused */

typedef struct {
    const char *p;
    size_t n;
} framing_value;

typedef struct {
    framing_value content_length[FRAMING_MAX_VALUES];
    framing_value transfer_encoding[FRAMING_MAX_VALUES];
    int n_content_length, n_transfer_encoding; /* may exceed FRAMING_MAX_VALUES: the values past it are dropped */
} framing_headers;

/* Records one header line if it is Content-Length or Transfer-Encoding (name case-insensitive). */
void framing_add(framing_headers *h, const char *name, size_t name_len, const char *value, size_t value_len);

/* NULL when the framing is unambiguous; else why not (a constant string for the 400's message). */
const char *framing_judge(const framing_headers *h);

/* Collects the framing headers of a raw header block (the bytes after the request line, up to the empty line). */
void framing_scan(framing_headers *h, const char *block, size_t n);

#endif
