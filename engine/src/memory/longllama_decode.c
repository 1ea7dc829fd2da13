/*
 * longllama_decode.c — memory_ops.decode for LongLLaMA: the reference's long-input handling
 * (modeling_longllama.py _handle_long_input, CStanKonrad/long_llama) on top of the local window
 * (the context's kv_cache, W = max_position_embeddings positions) and the memory layers' stores.
 *
 *   prefix = all but the last last_context_length tokens, in windows of W:
 *     local window empty at the start of the call -> each window runs on its own, then moves to memory
 *     ("no local cache" mode: ordinary layers forget it);
 *     otherwise -> each window is a cached call (below), as the reference does when a past is given.
 *   the tail: one cached call.
 *   cached call of m tokens: when n_local + m > W the whole local window moves to memory first; the tokens are
 *   then appended to the window at relative positions n_local.. (the host runs them in forward steps of at most
 *   n_batch rows).
 * The model runs only through the host's forward; the context's bookkeeping (n_past, logits) stays the caller's.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "longllama_memory.h"

static mnemo_status fail(const memory_host *h, mnemo_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->err, h->errlen, fmt, ap);
    va_end(ap);
    return st;
}

/* Appends to the message already in h->err (truncated as a longer message would be). */
static void append(const memory_host *h, const char *suffix) {
    size_t len = strnlen(h->err, h->errlen);
    if (len + 1 < h->errlen) snprintf(h->err + len, h->errlen - len, "%s", suffix);
}

/* Tokens [first, first + m) of the call appended to the local window (flushing it first when they do not fit). */
static mnemo_status cached_call(longllama_state *ll, const memory_host *h, const int32_t *tokens, int32_t first,
                                int32_t m) {
    if (ll->n_local > 0 && ll->n_local + m > ll->window) {
        mnemo_status st = longllama_flush_checked(ll, h);
        if (st != MNEMO_OK) return st;
    }
    mnemo_status st = h->forward(h->self, tokens + first, first, m, ll->n_local);
    if (st == MNEMO_OK) ll->n_local += m;
    return st;
}

mnemo_status longllama_decode(void *state, const memory_host *h, const int32_t *tokens, int32_t n,
                              bool *was_reset) {
    longllama_state *ll = state;
    int32_t W = ll->window, lcl = ll->last_context_length;
    int32_t prefix = n > lcl ? n - lcl : 0;
    bool no_cache = ll->n_local == 0;
    const int32_t local0 = ll->n_local;
    const uint64_t mem0 = longllama_mem_tokens(ll);
    mnemo_status st = MNEMO_OK;
    *was_reset = false;
    for (int32_t b = 0; st == MNEMO_OK && b < prefix; b += W) {
        int32_t m = prefix - b < W ? prefix - b : W;
        st = cached_call(ll, h, tokens, b, m);
        if (st == MNEMO_OK && no_cache) st = longllama_flush_checked(ll, h);
        if (st == MNEMO_OK && !h->progress(h->self, b + m, n))
            st = fail(h, MNEMO_ERR_CANCELLED, "cancelled by the progress callback after %d of %d tokens", b + m, n);
    }
    if (st == MNEMO_OK) st = cached_call(ll, h, tokens, prefix, n - prefix);
    if (st == MNEMO_OK && prefix > 0) h->progress(h->self, n, n); /* the last report: nothing left to stop */
    if (st == MNEMO_ERR_CONTEXT_FULL && ll->n_local == local0 && longllama_mem_tokens(ll) == mem0) {
        /* the memory limit refused the first move, before anything changed: the session stays usable */
        append(h, " (the session is unchanged)");
        return st;
    }
    if (st != MNEMO_OK) {
        /* memory may already hold part of the input: never leave a half-updated session behind */
        longllama_clear(ll);
        *was_reset = true;
        append(h, " (the session was reset)");
    }
    return st;
}
