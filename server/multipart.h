/*
 * multipart.h — the parts of a multipart/form-data body (RFC 7578), as the OpenAI client uploads files: every part
 * with its form field name, optional filename and content type, and its bytes (pointers into the body, which may
 * hold NUL bytes). Untrusted input: every length is checked, nothing is copied, and a malformed body (no boundary,
 * a part without Content-Disposition or name, no closing delimiter, too many parts, oversized headers) is an error
 * whose message says what was wrong. Fuzzed by tests/fuzz/fuzz_multipart.c.
 */
#ifndef MNEMO_SERVER_MULTIPART_H
#define MNEMO_SERVER_MULTIPART_H

#include <stddef.h>

typedef struct {
    const char *p;
    size_t n;
} mp_str; /* not NUL-terminated */

typedef struct {
    mp_str name;          /* form field name (Content-Disposition name="...") */
    mp_str filename;      /* filename="..." (n 0 when absent) */
    mp_str content_type;  /* the part's Content-Type (n 0 when absent) */
    mp_str data;          /* the part's bytes */
} mp_part;

#define MP_MAX_PARTS 16

/* The boundary parameter of a Content-Type header value ("multipart/form-data; boundary=XYZ", quoted or not) into
 * out (NUL-terminated). 0, or -1 when the type is not multipart/form-data or has no usable boundary (1..70 chars). */
int multipart_boundary(const char *content_type, char *out, size_t cap);

/* Splits body into at most MP_MAX_PARTS parts. 0 with *n_parts set, or -1 with a message in err. */
int multipart_parse(const char *body, size_t len, const char *boundary, mp_part parts[MP_MAX_PARTS], int *n_parts,
                    char *err, size_t errlen);

/* The first part whose field name is name, or NULL. */
const mp_part *multipart_find(const mp_part *parts, int n, const char *name);

#endif
