/*
 * embed_api.c — mnemo_embed: mean-pooled, L2-normalised last hidden state (after the final RMSNorm).
 *
 * The forward pass hands back the normed rows instead of running lm_head (forward_seq.hidden), chunk by chunk of
 * n_batch; the rows are summed in double so a long input does not lose the small ones to rounding. A context with
 * memory (LongLLaMA) runs its memory layers with their (empty, just reset) memory, as a fresh context's first
 * window does.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine_impl.h"

mnemo_status mnemo_embed(mnemo_context *ctx, const mnemo_token *tokens, int32_t n, float *out, int32_t n_out) {
    if (!ctx || ctx->failed) return MNEMO_ERR_MISUSE;
    const mnemo_model *m = ctx->model;
    const int32_t d = m->cfg.hidden_size;
    if (!out || n_out != d)
        return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "the embedding needs n_embd = %d floats (got %d)", d, n_out);
    if (n <= 0 || !tokens) return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "an embedding needs at least one token");
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
            return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "token %d at index %d is outside the vocabulary [0, %d)",
                            tokens[i], i, m->cfg.vocab_size);
    if (n > ctx->kv.n_ctx) { /* with memory (LongLLaMA): kv.n_ctx is the local window */
        char what[64] = "the context's n_ctx";
        if (ctx->mem) snprintf(what, sizeof what, "the %s window", ctx->mem->name);
        return ctx_fail(ctx, MNEMO_ERR_CONTEXT_FULL, "%d tokens do not fit: an embedding takes at most %d (%s)", n,
                        ctx->kv.n_ctx, what);
    }
    float *rows = malloc((size_t)ctx->n_batch * (size_t)d * sizeof *rows);
    double *sum = calloc((size_t)d, sizeof *sum);
    if (!rows || !sum) {
        free(rows);
        free(sum);
        return ctx_fail(ctx, MNEMO_ERR_NOMEM, "out of memory for an embedding of %d tokens", n);
    }
    mnemo_context_reset(ctx);
    mnemo_status st = MNEMO_OK;
    for (int32_t done = 0; done < n && st == MNEMO_OK;) {
        int32_t nb = n - done < ctx->n_batch ? n - done : ctx->n_batch;
        forward_seq seq = {.kv = &ctx->kv, .tokens = tokens + done, .n = nb, .pos0 = done, .logits_from = 0,
                           .hidden = rows, .mem = ctx->mem, .mem_state = ctx->mem_state, .lora = ctx->lora};
        int rc = llama_forward_batch(&m->cfg, &m->w, m->be, ctx->kc, &ctx->fb, &seq, 1);
        if (rc != KERN_OK) {
            st = ctx_fail(ctx, rc == KERN_ENOMEM ? MNEMO_ERR_NOMEM : MNEMO_ERR_BACKEND,
                          "forward pass failed (kernel error %d)", rc);
            break;
        }
        for (int32_t i = 0; i < nb; i++)
            for (int32_t j = 0; j < d; j++) sum[j] += rows[(size_t)i * (size_t)d + (size_t)j];
        done += nb;
    }
    mnemo_context_reset(ctx); /* the cache rows written above are not a state a later decode may continue */
    if (st == MNEMO_OK) {
        double norm = 0;
        for (int32_t j = 0; j < d; j++) norm += (sum[j] / n) * (sum[j] / n);
        norm = sqrt(norm);
        for (int32_t j = 0; j < d; j++) out[j] = (float)(norm > 0 ? sum[j] / n / norm : 0.0);
    }
    free(rows);
    free(sum);
    return st;
}
