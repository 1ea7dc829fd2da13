/*
 * fuzz_http_framing.c — libFuzzer target: the front door's reading of a request's first bytes (http_door.h) and
 * the body framing judge (http_framing.h) on arbitrary bytes. The end of the header block must lie inside the
 * input and be the same however the search is resumed; every recorded header value must lie inside the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_door.h"
#include "http_framing.h"

static void inside(const framing_value *v, const char *lo, size_t n) {
    if (v->n && (v->p < lo || v->p + v->n > lo + n)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *bytes = (const char *)data;
    door_verdict v = door_judge(bytes, size < DOOR_MAX_METHOD + 2 ? size : DOOR_MAX_METHOD + 2);
    if (v != DOOR_MORE && v != DOOR_HTTP && v != DOOR_BAD) abort();
    size_t end = door_headers_end(bytes, size, 0);
    if (end > size) abort();
    size_t half = door_headers_end(bytes, size / 2, 0);
    /* A search resumed two bytes before where an earlier one stopped finds the same end. */
    if (!half && door_headers_end(bytes, size, size / 2 > 2 ? size / 2 - 2 : 0) != end) abort();
    framing_headers h = {0};
    framing_scan(&h, bytes, end ? end : size);
    int ncl = h.n_content_length < FRAMING_MAX_VALUES ? h.n_content_length : FRAMING_MAX_VALUES;
    int nte = h.n_transfer_encoding < FRAMING_MAX_VALUES ? h.n_transfer_encoding : FRAMING_MAX_VALUES;
    for (int i = 0; i < ncl; i++) inside(&h.content_length[i], bytes, size);
    for (int i = 0; i < nte; i++) inside(&h.transfer_encoding[i], bytes, size);
    const char *why = framing_judge(&h);
    if (h.n_content_length && h.n_transfer_encoding && !why) abort();
    return 0;
}
