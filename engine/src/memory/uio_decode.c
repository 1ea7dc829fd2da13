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
    uio_knn_clear(s);
}

mnemo_status uio_install(uio_state *s, const memory_host *h, int32_t b) {
    const size_t per_seg = (size_t)s->cfg->num_hidden_layers * (size_t)s->M * (size_t)s->cfg->hidden_size;
    /* option (a) first (nothing when W == 0; W > 0 only with enc_batch 1 and no budget, so b == 0 here) */
    int rc = uio_keep_rows(s, h->kc, h->kv);
    if (rc == KERN_OK) rc = uio_transfer(s, h->kc, h->kv, s->h + (size_t)b * per_seg, s->n_mem);
    if (rc != KERN_OK)
        return fail(h, rc == KERN_ENOMEM ? MNEMO_ERR_NOMEM : MNEMO_ERR_BACKEND,
                    "UIO compression of segment %lld failed (kernel error %d)", (long long)s->segments, rc);
    s->n_mem += s->M;
    s->n_kept = s->W;
    s->n_raw = 0;
    s->segments++;
    return uio_knn_evict(s, h); /* option (b): entries past the budget to the stores */
}

mnemo_status uio_compress(uio_state *s, const memory_host *h) {
    int rc = uio_encode(s, h->kc, s->acc, 1);
    if (rc != KERN_OK)
        return fail(h, rc == KERN_ENOMEM ? MNEMO_ERR_NOMEM : MNEMO_ERR_BACKEND,
                    "UIO compression of segment %lld failed (kernel error %d)", (long long)s->segments, rc);
    return uio_install(s, h, 0);
}

/* Cache rows after a compression: every entry (the reference), or at most the budget. */
static int64_t after_compression(const uio_state *s, int64_t mem) {
    mem += s->M;
    return s->knn.budget && mem > s->knn.budget ? s->knn.budget : mem;
}

mnemo_status uio_fits(const uio_state *s, int64_t n, char *err, size_t errlen) {
    int64_t mem = s->n_mem, kept = s->n_kept, raw = s->n_raw;
    if (raw == s->C) mem = after_compression(s, mem), kept = s->W, raw = 0; /* a compression is due first */
    /* rows peak just before each compression, and at the end; the entries in the cache only grow (or stay at the
     * budget), so the peak is at the last compression or the end: walk the segments until the cache saturates.
     * Option (a) keeps W raw rows after each compression (never with a budget, uio_ops.c) */
    int64_t peak = mem + kept + raw, left = n;
    while (left > 0) {
        int64_t m = left < s->C - raw ? left : s->C - raw;
        left -= m;
        peak = mem + kept + raw + m > peak ? mem + kept + raw + m : peak;
        if (raw + m < s->C || peak > s->n_ctx) break;
        int64_t next = after_compression(s, mem);
        raw = 0;
        kept = s->W;
        if (next == mem && left >= s->C) { /* saturated: every later segment peaks at mem + W + C, the tail below */
            peak = mem + kept + s->C > peak ? mem + kept + s->C : peak;
            break;
        }
        mem = next;
    }
    if (peak <= s->n_ctx) return MNEMO_OK;
    snprintf(err, errlen,
             "%lld tokens do not fit in the UIO context: %d positions (n_ctx) hold %d <mem> entries and %d raw tokens, "
             "and these need %lld (memory + raw <= n_ctx; a segment of %d tokens becomes %d entries%s)",
             (long long)n, s->n_ctx, s->n_mem, s->n_kept + s->n_raw, (long long)peak, s->C, s->M,
             s->knn.budget ? "" : "; a memory budget, uio_mem_budget, lifts the limit");
    return MNEMO_ERR_CONTEXT_FULL;
}

/* Option (c): segments [done, done + K*C) of the call, the raw cache empty, compressed enc_batch at a time: one
 * encoder forward per batch, then segment by segment (in order) the decoder pass when the context keeps every
 * row's logits — none of these segments holds the call's last token, whose logits are all that is kept otherwise,
 * and the decoder's raw K/V of a segment is dropped by its compression anyway — and the transfer head. Memory K/V
 * depend on the segment alone (the encoder never sees memory), so the result is the sequential one. */
static mnemo_status batched_segments(uio_state *s, const memory_host *h, const int32_t *tokens, int32_t done,
                                     int32_t K, int32_t n) {
    mnemo_status st = MNEMO_OK;
    for (int32_t j = 0; j < K && st == MNEMO_OK;) {
        int32_t nb = K - j < s->enc_batch ? K - j : s->enc_batch;
        const int32_t *seg = tokens + done + j * s->C;
        int rc = uio_encode(s, h->kc, seg, nb);
        if (rc != KERN_OK)
            return fail(h, rc == KERN_ENOMEM ? MNEMO_ERR_NOMEM : MNEMO_ERR_BACKEND,
                        "UIO compression of segments %lld..%lld failed (kernel error %d)", (long long)s->segments,
                        (long long)s->segments + nb - 1, rc);
        for (int32_t b = 0; b < nb && st == MNEMO_OK; b++) {
            if (s->logits_all) st = h->forward(h->self, seg + b * s->C, done + (j + b) * s->C, s->C, s->n_mem);
            if (st == MNEMO_OK) st = uio_install(s, h, b);
        }
        j += nb;
        int32_t at = done + j * s->C;
        if (st == MNEMO_OK && !h->progress(h->self, at, n))
            st = fail(h, MNEMO_ERR_CANCELLED, "cancelled by the progress callback after %d of %d tokens", at, n);
    }
    return st;
}

mnemo_status uio_decode(void *state, const memory_host *h, const int32_t *tokens, int32_t n, bool *was_reset) {
    uio_state *s = state;
    *was_reset = false;
    mnemo_status st = uio_fits(s, n, h->err, h->errlen);
    if (st != MNEMO_OK) return st; /* nothing changed */
    if (s->n_raw == s->C) st = uio_compress(s, h); /* due since a mnemo_decode_batch step */
    int32_t done = 0;
    while (st == MNEMO_OK && done < n) {
        /* option (c): whole segments ahead, the last token's segment excepted, go through the batched encoder */
        int32_t K = s->n_raw == 0 ? (n - done - 1) / s->C : 0;
        if (s->enc_batch > 1 && K > 0) {
            st = batched_segments(s, h, tokens, done, K, n);
            done += K * s->C;
            continue;
        }
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
