/*
 * uio_decode.c — the UIO accumulator and when compression runs (tests/fixtures/uio/README.md, "Accumulator and
 * compression", "A call of any length"):
 *   feeding tokens: 1. the decoder runs on them over [memory | raw | new] and their K/V join the raw cache;
 *                   2. they join the accumulator; when it holds C tokens they are compressed (encoder -> transfer
 *                      head -> M entries per layer) and leave it, their raw K/V with them.
 *   a call of any length is cut where the accumulator reaches C: first min(n, C - acc) tokens, then C at a time, so
 *   one call, token by token and any split into calls give the same logits, and the token that completes a segment
 *   is still decoded over the raw cache while the next one sees the new memory only.
 * memory_ops.decode runs the pieces through the host's forward at cache rows n_mem + n_kept + n_raw ..; the context
 * keeps its own bookkeeping (n_past, logits).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "uio_memory.h"

static mnemo_status fail(const memory_host *h, mnemo_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->err, h->errlen, fmt, ap);
    va_end(ap);
    return st;
}

void uio_clear(uio_state *s) {
    s->n_mem = s->n_kept = s->n_raw = 0;
    s->segments = 0;
}

mnemo_status uio_compress(uio_state *s, const memory_host *h) {
    int rc = uio_encode(s, h->kc);
    if (rc == KERN_OK) rc = uio_keep_rows(s, h->kc, h->kv); /* option (a); nothing when W == 0 */
    if (rc == KERN_OK) rc = uio_transfer(s, h->kc, h->kv, s->n_mem);
    if (rc != KERN_OK)
        return fail(h, rc == KERN_ENOMEM ? MNEMO_ERR_NOMEM : MNEMO_ERR_BACKEND,
                    "UIO compression of segment %lld failed (kernel error %d)", (long long)s->segments, rc);
    s->n_mem += s->M;
    s->n_kept = s->W;
    s->n_raw = 0;
    s->segments++;
    return MNEMO_OK;
}

mnemo_status uio_fits(const uio_state *s, int64_t n, char *err, size_t errlen) {
    int64_t mem = s->n_mem, kept = s->n_kept, raw = s->n_raw;
    if (raw == s->C) mem += s->M, kept = s->W, raw = 0; /* a compression is due first */
    /* rows peak just before each compression: check the first piece, then whole segments (W kept after each) */
    int64_t first = n < s->C - raw ? n : s->C - raw, rest = n - first;
    int64_t peak = mem + kept + raw + first;
    if (rest > 0) {
        int64_t full = rest / s->C, tail = rest % s->C;
        mem += s->M; /* after the first piece's compression */
        if (full > 0 && mem + (full - 1) * s->M + s->W + s->C > peak) peak = mem + (full - 1) * s->M + s->W + s->C;
        if (tail > 0 && mem + full * s->M + s->W + tail > peak) peak = mem + full * s->M + s->W + tail;
    }
    if (peak <= s->n_ctx) return MNEMO_OK;
    snprintf(err, errlen,
             "%lld tokens do not fit in the UIO context: %d positions (n_ctx) hold %d <mem> entries and %d raw tokens, "
             "and these need %lld (memory + raw <= n_ctx; a segment of %d tokens becomes %d entries)",
             (long long)n, s->n_ctx, s->n_mem, s->n_kept + s->n_raw, (long long)peak, s->C, s->M);
    return MNEMO_ERR_CONTEXT_FULL;
}

mnemo_status uio_decode(void *state, const memory_host *h, const int32_t *tokens, int32_t n, bool *was_reset) {
    uio_state *s = state;
    *was_reset = false;
    mnemo_status st = uio_fits(s, n, h->err, h->errlen);
    if (st != MNEMO_OK) return st; /* nothing changed */
    if (s->n_raw == s->C) st = uio_compress(s, h); /* due since a mnemo_decode_batch step */
    int32_t done = 0;
    while (st == MNEMO_OK && done < n) {
        int32_t m = n - done < s->C - s->n_raw ? n - done : s->C - s->n_raw;
        st = h->forward(h->self, tokens + done, done, m, s->n_mem + s->n_kept + s->n_raw);
        if (st != MNEMO_OK) break;
        memcpy(s->acc + s->n_raw, tokens + done, (size_t)m * sizeof(int32_t));
        s->n_raw += m;
        done += m;
        if (s->n_raw == s->C) st = uio_compress(s, h);
        if (st == MNEMO_OK && m < n && !h->progress(h->self, done, n) && done < n)
            st = fail(h, MNEMO_ERR_CANCELLED, "cancelled by the progress callback after %d of %d tokens", done, n);
    }
    if (st != MNEMO_OK) {
        /* the cache may hold part of the input or a half-written segment: never leave such a session behind */
        uio_clear(s);
        *was_reset = true;
        size_t len = strnlen(h->err, h->errlen);
        if (len + 1 < h->errlen) snprintf(h->err + len, h->errlen - len, " (the session was reset)");
    }
    return st;
}
