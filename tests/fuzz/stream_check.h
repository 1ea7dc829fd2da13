/*
 * stream_check.h — for the tokenizer fuzz targets: the streaming detokenizer, fed ids one by one, hands out exactly
 * the one-shot decode `out` (ol bytes) in order; aborts otherwise.
 */
#ifndef MNEMO_FUZZ_STREAM_CHECK_H
#define MNEMO_FUZZ_STREAM_CHECK_H

#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static void stream_equals_decode(const tokenizer *tok, const int32_t *ids, size_t n, const char *out, size_t ol) {
    text_stream *ts = text_stream_new(tok, -1);
    if (!ts) abort();
    size_t at = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *s;
        size_t sl;
        if ((i < n ? text_stream_push(ts, ids[i], &s, &sl) : text_stream_flush(ts, &s, &sl)) != 0) abort();
        if (at + sl > ol || memcmp(out + at, s, sl) != 0) abort();
        at += sl;
    }
    if (at != ol) abort();
    text_stream_free(ts);
}

#endif
