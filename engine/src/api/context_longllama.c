/*
 * context_longllama.c — mnemo_decode for LongLLaMA contexts: the reference's long-input handling
 * (modeling_longllama.py _handle_long_input, shared/specs/longllama.md §4) on top of the local window
 * (the context's kv_cache, W = max_position_embeddings positions) and the memory layers' stores.
 *
 *   prefix = all but the last last_context_length tokens, in windows of W:
 *     local window empty at the start of the call -> each window runs on its own, then moves to memory
 *     ("no local cache" mode: ordinary layers forget it);
 *     otherwise -> each window is a cached call (below), as the reference does when a past is given.
 *   the tail: one cached call.
 *   cached call of m tokens: when n_local + m > W the whole local window moves to memory first; the tokens are
 *   then appended to the window at relative positions n_local.. (forward steps of at most n_batch rows).
 */
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "log.h"

mnemo_status context_longllama_init(mnemo_context *ctx, const mnemo_context_params *p) {
    const model_config *cfg = &ctx->model->cfg;
    if (p->mem_knn_k < 0) {
        ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "mem_knn_k must be >= 0 (got %d)", p->mem_knn_k);
        return MNEMO_ERR_INVALID_ARG;
    }
    if (p->mem_dense_rows < 0) {
        ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "mem_dense_rows must be >= 0 (got %lld)", (long long)p->mem_dense_rows);
        return MNEMO_ERR_INVALID_ARG;
    }
    mem_params mp = mem_default_params();
    switch (mnemo_mem_index_resolve(ctx->model, p->mem_index)) {
    case MNEMO_MEM_INDEX_FLAT: mp.index = MEM_INDEX_FLAT; break;
    case MNEMO_MEM_INDEX_BRUTE: mp.index = MEM_INDEX_NONE; break;
    case MNEMO_MEM_INDEX_IVF: mp.index = MEM_INDEX_IVF; break;
    case MNEMO_MEM_INDEX_HNSW: mp.index = MEM_INDEX_HNSW; break;
    case MNEMO_MEM_INDEX_IVF_GROW: mp.index = MEM_INDEX_IVF_GROW; break;
    default: ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "unknown mem_index %d", (int)p->mem_index); return MNEMO_ERR_INVALID_ARG;
    }
    int max_nprobe = mp.index == MEM_INDEX_IVF ? mp.ivf_nlist : 65536; /* IVF: its cells; memstore's own bound */
    if (p->mem_nprobe < 0 || p->mem_nprobe > max_nprobe) {
        ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "mem_nprobe must be in 0..%d for this index (got %d)", max_nprobe,
                 p->mem_nprobe);
        return MNEMO_ERR_INVALID_ARG;
    }
    if (p->mem_nprobe > 0) mp.ivf_nprobe = p->mem_nprobe;
    if (p->mem_knn_k == 0) mp.index = MEM_INDEX_NONE; /* dense attention never searches: no index to keep */
    /* On a GPU exact kNN searches the device copy of the keys (topk_ip, k <= 1024): no host index either */
    const kern_backend *be = ctx->model->be;
    bool knn_on_device = !be->host_memory && p->mem_knn_k > 0 && p->mem_knn_k <= 1024 &&
                         (mp.index == MEM_INDEX_FLAT || mp.index == MEM_INDEX_NONE);
    if (knn_on_device) mp.index = MEM_INDEX_NONE;
    ctx->ll = calloc(1, sizeof *ctx->ll);
    if (!ctx->ll) {
        ctx_fail(ctx, MNEMO_ERR_NOMEM, "out of memory");
        return MNEMO_ERR_NOMEM;
    }
    char err[256];
    if (longllama_init(ctx->ll, cfg, &mp, p->mem_knn_k, err, sizeof err) != 0) {
        free(ctx->ll);
        ctx->ll = NULL;
        ctx_fail(ctx, MNEMO_ERR_NOMEM, "LongLLaMA memory: %s", err);
        return MNEMO_ERR_NOMEM;
    }
    ctx->ll->knn_on_device = knn_on_device;
    ctx->ll->dense_rows = p->mem_dense_rows;
    if (longllama_device_init(ctx->ll, ctx->model->be, cfg->num_key_value_heads, cfg->head_dim) != 0) {
        context_longllama_free(ctx);
        ctx_fail(ctx, MNEMO_ERR_NOMEM, "out of memory");
        return MNEMO_ERR_NOMEM;
    }
    ctx->mem_max_bytes = p->mem_max_bytes;
    return MNEMO_OK;
}

void context_longllama_free(mnemo_context *ctx) {
    if (!ctx->ll) return;
    longllama_free(ctx->ll);
    free(ctx->ll);
    ctx->ll = NULL;
}

static uint64_t mem_total(const longllama_state *ll) {
    mem_bytes b = longllama_mem_bytes(ll);
    return (uint64_t)b.keys + b.values + b.index;
}

/* Local window -> memory; refuses (before moving anything) when it would pass mem_max_bytes. */
mnemo_status context_longllama_flush(mnemo_context *ctx) {
    longllama_state *ll = ctx->ll;
    if (ll->n_local == 0) return MNEMO_OK;
    if (ctx->mem_max_bytes) {
        mem_bytes b = longllama_mem_bytes_after(ll, (size_t)ll->n_local);
        uint64_t after = (uint64_t)b.keys + b.values + b.index;
        if (after > ctx->mem_max_bytes)
            return ctx_fail(ctx, MNEMO_ERR_CONTEXT_FULL,
                            "memory limit reached: %llu tokens held in %llu bytes; %d more would take it to %llu "
                            "bytes, past the limit of %llu",
                            (unsigned long long)longllama_mem_tokens(ll), (unsigned long long)mem_total(ll),
                            ll->n_local, (unsigned long long)after, (unsigned long long)ctx->mem_max_bytes);
    }
    if (longllama_flush(ll, ctx->kc, ctx->kv.v, ctx->kv.n_ctx) != 0) return ctx_fail(ctx, MNEMO_ERR_NOMEM, "%s", ll->err);
    return MNEMO_OK;
}

/* m tokens appended to the local window (flushing it first when they do not fit). logits: with logits_all,
 * m rows; else the last row only when want_last (NULL otherwise). */
static mnemo_status cached_call(mnemo_context *ctx, const mnemo_token *tokens, int32_t m, float *logits,
                                bool want_last) {
    longllama_state *ll = ctx->ll;
    const mnemo_model *mod = ctx->model;
    const size_t V = (size_t)mod->cfg.vocab_size;
    if (ll->n_local > 0 && ll->n_local + m > ll->window) {
        mnemo_status st = context_longllama_flush(ctx);
        if (st != MNEMO_OK) return st;
    }
    for (int32_t done = 0; done < m;) {
        int32_t nb = m - done < ctx->n_batch ? m - done : ctx->n_batch;
        bool last = done + nb == m;
        int32_t from = ctx->logits_all ? 0 : (last && want_last ? nb - 1 : nb);
        forward_seq seq = {.kv = &ctx->kv, .tokens = tokens + done, .n = nb, .pos0 = ll->n_local,
                           .logits_from = from, .logits = ctx->logits_all ? logits + (size_t)done * V : logits,
                           .ll = ll, .lora = ctx->lora};
        int rc = llama_forward_batch(&mod->cfg, &mod->w, mod->be, ctx->kc, &ctx->fb, &seq, 1);
        if (rc != KERN_OK)
            return ctx_fail(ctx, rc == KERN_ENOMEM ? MNEMO_ERR_NOMEM : MNEMO_ERR_BACKEND,
                            "forward pass failed (kernel error %d)", rc);
        ll->n_local += nb;
        done += nb;
    }
    return MNEMO_OK;
}

mnemo_status context_longllama_decode(mnemo_context *ctx, const mnemo_token *tokens, int32_t n) {
    longllama_state *ll = ctx->ll;
    const size_t V = (size_t)ctx->model->cfg.vocab_size;
    int32_t W = ll->window, lcl = ll->last_context_length;
    int32_t prefix = n > lcl ? n - lcl : 0;
    bool no_cache = ll->n_local == 0;
    const int32_t local0 = ll->n_local;
    const uint64_t mem0 = longllama_mem_tokens(ll);
    mnemo_status st = MNEMO_OK;
    for (int32_t b = 0; st == MNEMO_OK && b < prefix; b += W) {
        int32_t m = prefix - b < W ? prefix - b : W;
        st = cached_call(ctx, tokens + b, m, ctx->logits_all ? ctx->logits + (size_t)b * V : NULL, false);
        if (st == MNEMO_OK && no_cache) st = context_longllama_flush(ctx);
        if (st == MNEMO_OK && !ctx_progress(ctx, b + m, n))
            st = ctx_fail(ctx, MNEMO_ERR_CANCELLED, "cancelled by the progress callback after %d of %d tokens", b + m,
                          n);
    }
    if (st == MNEMO_OK)
        st = cached_call(ctx, tokens + prefix, n - prefix,
                         ctx->logits_all ? ctx->logits + (size_t)prefix * V : ctx->logits, true);
    if (st == MNEMO_OK && prefix > 0) ctx_progress(ctx, n, n); /* the last report: nothing left to stop */
    if (st == MNEMO_ERR_CONTEXT_FULL && ll->n_local == local0 && longllama_mem_tokens(ll) == mem0) {
        /* the memory limit refused the first move, before anything changed: the session stays usable */
        char msg[sizeof ctx->err];
        memcpy(msg, ctx->err, sizeof msg);
        ctx_fail(ctx, st, "%s (the session is unchanged)", msg);
        return st;
    }
    if (st != MNEMO_OK) {
        /* memory may already hold part of the input: never leave a half-updated session behind */
        char msg[sizeof ctx->err];
        memcpy(msg, ctx->err, sizeof msg);
        longllama_clear(ll);
        ctx->n_past = 0;
        ctx->last_token = -1;
        ctx->logits_rows = 0;
        ctx_fail(ctx, st, "%s (the session was reset)", msg);
        return st;
    }
    ctx->n_past += n;
    ctx->last_token = tokens[n - 1];
    ctx->last_n = n;
    ctx->logits_rows = ctx->logits_all ? n : 1;
    ctx->logits_first = ctx->logits_all ? 0 : n - 1;
    return MNEMO_OK;
}

mnemo_status mnemo_context_set_last_context_length(mnemo_context *ctx, int32_t n) {
    if (!ctx || ctx->failed) return MNEMO_ERR_MISUSE;
    if (!ctx->ll) return ctx_fail(ctx, MNEMO_ERR_UNSUPPORTED, "last_context_length applies to LongLLaMA models only");
    const model_config *cfg = &ctx->model->cfg;
    if (n == 0) n = cfg->last_context_length < ctx->ll->window ? cfg->last_context_length : ctx->ll->window;
    if (n < 1 || n > ctx->ll->window)
        return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "last_context_length %d outside 1..%d (max_position_embeddings)",
                        n, ctx->ll->window);
    ctx->ll->last_context_length = n;
    return MNEMO_OK;
}

int32_t mnemo_context_last_context_length(const mnemo_context *ctx) {
    return ctx && !ctx->failed && ctx->ll ? ctx->ll->last_context_length : 0;
}

mnemo_status mnemo_context_memory(const mnemo_context *ctx, mnemo_memory_stats *out) {
    if (!ctx || ctx->failed || !out) return MNEMO_ERR_MISUSE;
    memset(out, 0, sizeof *out);
    out->local_kv_bytes = mnemo_context_kv_bytes(ctx);
    if (!ctx->ll) {
        out->local_tokens = ctx->n_past;
        return MNEMO_OK;
    }
    mem_bytes b = longllama_mem_bytes(ctx->ll);
    out->local_tokens = ctx->ll->n_local;
    out->mem_tokens = longllama_mem_tokens(ctx->ll);
    out->mem_key_bytes = b.keys;
    out->mem_value_bytes = b.values;
    out->mem_index_bytes = b.index;
    /* memory layers also keep their local keys before RoPE */
    int32_t n_mem_layers = ctx->model->cfg.n_mem_layers;
    out->local_kv_bytes += (uint64_t)n_mem_layers * (uint64_t)ctx->ll->window * (uint64_t)ctx->ll->kv_dim * 4u;
    return MNEMO_OK;
}
