/*
 * fuzz_multipart.c — libFuzzer target: multipart_parse on arbitrary bytes (a POST /v1/files body). The first line of
 * the input is the Content-Type header value, the rest the body. Accepted bodies must give parts that lie inside the
 * body with a non-empty field name; refusals say why.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "multipart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nl = memchr(data, '\n', size);
    size_t hl = nl ? (size_t)(nl - data) : size;
    char *ct = malloc(hl + 1);
    if (!ct) return 0;
    memcpy(ct, data, hl);
    ct[hl] = 0;
    const char *body = nl ? (const char *)nl + 1 : "";
    size_t len = nl ? size - hl - 1 : 0;
    char boundary[80];
    if (multipart_boundary(ct, boundary, sizeof boundary) == 0) {
        mp_part parts[MP_MAX_PARTS];
        int n = 0;
        char err[256] = "";
        if (multipart_parse(body, len, boundary, parts, &n, err, sizeof err) == 0) {
            if (n < 0 || n > MP_MAX_PARTS) abort();
            for (int i = 0; i < n; i++) {
                const mp_str *s[] = {&parts[i].name, &parts[i].filename, &parts[i].content_type, &parts[i].data};
                for (int k = 0; k < 4; k++)
                    if (s[k]->n && (s[k]->p < body || s[k]->p + s[k]->n > body + len)) abort();
                if (!parts[i].name.n) abort();
            }
        } else if (!err[0]) {
            abort();
        }
    }
    free(ct);
    return 0;
}
