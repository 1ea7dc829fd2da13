/*
 * context_api.c — mnemo_context_*: a session over a model (KV cache, activations, logits of the last call)
 * and mnemo_decode, which feeds tokens through the forward pass in chunks of at most n_batch.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "log.h"

mnemo_context_params mnemo_context_default_params(void) {
    mnemo_context_params p = {.n_ctx = 0, .n_batch = 512, .logits_all = false};
    return p;
}

mnemo_status ctx_fail(mnemo_context *ctx, mnemo_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    va_end(ap);
    return st;
}

mnemo_status mnemo_context_new(mnemo_model *model, const mnemo_context_params *params, mnemo_context **out) {
    if (!out) return MNEMO_ERR_INVALID_ARG;
    mnemo_context *ctx = calloc(1, sizeof *ctx);
    *out = ctx;
    if (!ctx) return MNEMO_ERR_NOMEM;
    ctx->failed = true; /* until fully built */
    ctx->last_token = -1;
    if (!model || model->failed)
        return ctx_fail(ctx, MNEMO_ERR_MISUSE, "context needs a successfully loaded model");
    mnemo_context_params p = params ? *params : mnemo_context_default_params();
    int32_t n_ctx = p.n_ctx ? p.n_ctx : model->cfg.max_position_embeddings;
    int32_t n_batch = p.n_batch ? p.n_batch : 512;
    if (n_ctx < 1 || n_batch < 1)
        return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "n_ctx (%d) and n_batch (%d) must be positive", p.n_ctx, p.n_batch);
    if (n_ctx > model->cfg.max_position_embeddings)
        mnemo_log(MNEMO_LOG_WARN, "n_ctx %d exceeds the model's max_position_embeddings %d: quality may drop",
                  n_ctx, model->cfg.max_position_embeddings);
    if (n_batch > n_ctx) n_batch = n_ctx;
    ctx->model = model;
    ctx->n_ctx = n_ctx;
    ctx->n_batch = n_batch;
    ctx->logits_all = p.logits_all;
    ctx->kc = kern_cpu_ctx_new(model->n_threads);
    if (!ctx->kc || kv_cache_init(&ctx->kv, &model->cfg, n_ctx) != 0 ||
        forward_buffers_init(&ctx->fb, &model->cfg, n_batch) != 0) {
        size_t kv_bytes = 2 * (size_t)model->cfg.num_hidden_layers * (size_t)n_ctx *
                          (size_t)model->cfg.num_key_value_heads * (size_t)model->cfg.head_dim * sizeof(float);
        return ctx_fail(ctx, MNEMO_ERR_NOMEM, "out of memory allocating a %d-token context (%zu MB of KV cache)",
                        n_ctx, kv_bytes >> 20);
    }
    ctx->failed = false;
    return MNEMO_OK;
}

void mnemo_context_free(mnemo_context *ctx) {
    if (!ctx) return;
    kv_cache_free(&ctx->kv);
    forward_buffers_free(&ctx->fb);
    kern_cpu_ctx_free(ctx->kc);
    free(ctx->logits);
    free(ctx);
}

const char *mnemo_context_error(const mnemo_context *ctx) { return ctx ? ctx->err : "no context (allocation failed)"; }

void mnemo_context_reset(mnemo_context *ctx) {
    if (!ctx || ctx->failed) return;
    ctx->n_past = 0;
    ctx->last_token = -1;
    ctx->logits_rows = ctx->last_n = 0;
}

int32_t mnemo_context_n_past(const mnemo_context *ctx) { return ctx && !ctx->failed ? ctx->n_past : 0; }
int32_t mnemo_context_n_ctx(const mnemo_context *ctx) { return ctx && !ctx->failed ? ctx->n_ctx : 0; }

static mnemo_status reserve_logits(mnemo_context *ctx, int32_t rows) {
    size_t need = (size_t)rows * (size_t)ctx->model->cfg.vocab_size;
    if (need <= ctx->logits_cap) return MNEMO_OK;
    float *p = realloc(ctx->logits, need * sizeof(float));
    if (!p) return ctx_fail(ctx, MNEMO_ERR_NOMEM, "out of memory for logits of %d positions", rows);
    ctx->logits = p;
    ctx->logits_cap = need;
    return MNEMO_OK;
}

mnemo_status mnemo_decode(mnemo_context *ctx, const mnemo_token *tokens, int32_t n) {
    if (!ctx || ctx->failed) return MNEMO_ERR_MISUSE;
    if (n <= 0 || !tokens) return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "decode needs at least one token (got %d)", n);
    const mnemo_model *m = ctx->model;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
            return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "token %d at index %d is outside the vocabulary [0, %d)",
                            tokens[i], i, m->cfg.vocab_size);
    if ((int64_t)ctx->n_past + n > ctx->n_ctx)
        return ctx_fail(ctx, MNEMO_ERR_CONTEXT_FULL,
                        "%d tokens do not fit: the context holds %d of %d positions (%d free)", n, ctx->n_past,
                        ctx->n_ctx, ctx->n_ctx - ctx->n_past);
    mnemo_status st = reserve_logits(ctx, ctx->logits_all ? n : 1);
    if (st != MNEMO_OK) return st;

    const int64_t V = m->cfg.vocab_size;
    int32_t done = 0;
    while (done < n) {
        int32_t nb = n - done < ctx->n_batch ? n - done : ctx->n_batch;
        bool last_chunk = done + nb == n;
        int32_t from = ctx->logits_all ? 0 : (last_chunk ? nb - 1 : nb);
        float *dst = ctx->logits + (ctx->logits_all ? (size_t)done * (size_t)V : 0);
        int rc = llama_forward(&m->cfg, &m->w, m->be, ctx->kc, &ctx->kv, &ctx->fb, tokens + done, nb,
                               ctx->n_past + done, from, dst);
        if (rc != KERN_OK) {
            ctx->logits_rows = 0; /* the cache rows past n_past are garbage but unreachable */
            return ctx_fail(ctx, rc == KERN_ENOMEM ? MNEMO_ERR_NOMEM : MNEMO_ERR_BACKEND,
                            "forward pass failed at position %d (kernel error %d)", ctx->n_past + done, rc);
        }
        done += nb;
    }
    ctx->n_past += n;
    ctx->last_token = tokens[n - 1];
    ctx->last_n = n;
    ctx->logits_rows = ctx->logits_all ? n : 1;
    ctx->logits_first = ctx->logits_all ? 0 : n - 1;
    return MNEMO_OK;
}

const float *mnemo_get_logits(const mnemo_context *ctx, int32_t i) {
    if (!ctx || ctx->failed || ctx->logits_rows == 0) return NULL;
    if (i == -1) i = ctx->last_n - 1;
    int32_t row = i - ctx->logits_first;
    if (i < 0 || i >= ctx->last_n || row < 0 || row >= ctx->logits_rows) return NULL;
    return ctx->logits + (size_t)row * (size_t)ctx->model->cfg.vocab_size;
}
