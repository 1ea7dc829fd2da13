/*
 * context_memory.c — the mnemo_context_* calls about a context's long-context memory (engine.h "LongLLaMA
 * memory"): the tail of a long input kept local, and the memory's size by kind. Each asks the memory's table.
 */
#include <string.h>

#include "engine_impl.h"

mnemo_status mnemo_context_set_last_context_length(mnemo_context *ctx, int32_t n) {
    if (!ctx || ctx->failed) return MNEMO_ERR_MISUSE;
    if (!ctx->mem || !ctx->mem->set_local_tail)
        return ctx_fail(ctx, MNEMO_ERR_UNSUPPORTED, "last_context_length applies to LongLLaMA models only");
    return ctx->mem->set_local_tail(ctx->mem_state, n, ctx->err, sizeof ctx->err);
}

int32_t mnemo_context_last_context_length(const mnemo_context *ctx) {
    return ctx && !ctx->failed && ctx->mem && ctx->mem->local_tail ? ctx->mem->local_tail(ctx->mem_state) : 0;
}

/* Asked of the memory's check_step, which is monotone in n (a shorter step fits whenever a longer one does). */
int32_t mnemo_context_entry_max(const mnemo_context *ctx) {
    if (!ctx || ctx->failed) return 0;
    if (!ctx->mem) return ctx->n_ctx - ctx->n_past;
    char why[256];
    int32_t ok = 0, bad = ctx->n_ctx + 1; /* check_step(ok) passes, check_step(bad) fails: n_ctx bounds a step */
    while (bad - ok > 1) {
        int32_t mid = ok + (bad - ok) / 2;
        if (ctx->mem->check_step(ctx->mem_state, mid, why, sizeof why) == MNEMO_OK) ok = mid;
        else bad = mid;
    }
    return ok;
}

mnemo_status mnemo_context_memory(const mnemo_context *ctx, mnemo_memory_stats *out) {
    if (!ctx || ctx->failed || !out) return MNEMO_ERR_MISUSE;
    memset(out, 0, sizeof *out);
    out->local_kv_bytes = mnemo_context_kv_bytes(ctx);
    if (!ctx->mem) {
        out->local_tokens = ctx->n_past;
        return MNEMO_OK;
    }
    ctx->mem->stats(ctx->mem_state, out);
    return MNEMO_OK;
}
