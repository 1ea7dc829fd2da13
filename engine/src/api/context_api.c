/*
 * context_api.c — mnemo_context_*: a session over a model (KV cache, activations, logits of the last call)
 * and mnemo_decode, which feeds tokens through the forward pass in chunks of at most n_batch. A model with a
 * long-context memory gives each context one (memory.h); the context reaches it only through its table.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "log.h"

mnemo_context_params mnemo_context_default_params(void) {
    mnemo_context_params p = {.n_ctx = 0,
                               .n_batch = 512,
                               .logits_all = false,
                               .mem_knn_k = MNEMO_MEM_KNN_K_DEFAULT,
                               .mem_index = MNEMO_MEM_INDEX_AUTO,
                               .mem_dense_rows = MNEMO_MEM_DENSE_ROWS_DEFAULT,
                               .memory = MNEMO_MEMORY_MODEL,
                               .ret_sinks = MNEMO_RET_SINKS_DEFAULT,
                               .ret_window = MNEMO_RET_WINDOW_DEFAULT,
                               .ret_topk = MNEMO_RET_TOPK_DEFAULT,
                               .ret_block = MNEMO_RET_BLOCK_DEFAULT,
                               .ret_reps = MNEMO_RET_REPS_DEFAULT,
                               .ret_dtype = MNEMO_MEM_F32};
    return p;
}

static const struct {
    const char *name;
    mnemo_mem_index kind;
} MEM_INDEX_NAMES[] = {{"flat", MNEMO_MEM_INDEX_FLAT},
                       {"brute", MNEMO_MEM_INDEX_BRUTE},
                       {"ivf", MNEMO_MEM_INDEX_IVF},
                       {"ivf-grow", MNEMO_MEM_INDEX_IVF_GROW},
                       {"hnsw", MNEMO_MEM_INDEX_HNSW},
                       {"auto", MNEMO_MEM_INDEX_AUTO}};

mnemo_status mnemo_mem_index_parse(const char *name, mnemo_mem_index *out) {
    for (size_t i = 0; name && out && i < sizeof MEM_INDEX_NAMES / sizeof *MEM_INDEX_NAMES; i++)
        if (!strcmp(name, MEM_INDEX_NAMES[i].name)) {
            *out = MEM_INDEX_NAMES[i].kind;
            return MNEMO_OK;
        }
    return MNEMO_ERR_INVALID_ARG;
}

const char *mnemo_mem_index_name(mnemo_mem_index index) {
    for (size_t i = 0; i < sizeof MEM_INDEX_NAMES / sizeof *MEM_INDEX_NAMES; i++)
        if (MEM_INDEX_NAMES[i].kind == index) return MEM_INDEX_NAMES[i].name;
    return "?";
}

mnemo_mem_index mnemo_mem_index_resolve(const mnemo_model *model, mnemo_mem_index index) {
    if (index != MNEMO_MEM_INDEX_AUTO) return index;
    /* a GPU searches its device copy exactly (topk_ip); a host index search would cross the bus every step */
    return model && model->be && !model->be->host_memory ? MNEMO_MEM_INDEX_FLAT : MNEMO_MEM_INDEX_IVF_GROW;
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
    if (model->vocab_only)
        return ctx_fail(ctx, MNEMO_ERR_UNSUPPORTED, "the model was loaded as a vocabulary only: it has no weights");
    mnemo_context_params p = params ? *params : mnemo_context_default_params();
    const memory_ops *mem = memory_for_model(&model->cfg, model->uio, &p);
    int32_t n_ctx = p.n_ctx ? p.n_ctx : model->cfg.max_position_embeddings;
    if (mem) n_ctx = mem->cache_rows(&model->cfg, &p, n_ctx); /* LongLLaMA: the local window */
    int32_t n_batch = p.n_batch ? p.n_batch : 512;
    if (n_ctx < 1 || n_batch < 1)
        return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "n_ctx (%d) and n_batch (%d) must be positive", p.n_ctx, p.n_batch);
    if ((!mem || model->uio) && n_ctx > model->cfg.max_position_embeddings)
        mnemo_log(MNEMO_LOG_WARN, "n_ctx %d exceeds the model's max_position_embeddings %d: quality may drop",
                  n_ctx, model->cfg.max_position_embeddings);
    if (n_batch > n_ctx) n_batch = n_ctx;
    ctx->model = model;
    ctx->n_ctx = n_ctx;
    ctx->n_batch = n_batch;
    ctx->logits_all = p.logits_all;
    const kern_backend *be = model->be;
    ctx->kc = be->ctx_new(model->n_threads);
    if (!ctx->kc || kv_cache_init(&ctx->kv, &model->cfg, n_ctx, be) != 0 ||
        forward_buffers_init(&ctx->fb, &model->cfg, n_batch, be) != 0) {
        size_t kv_bytes = 2 * (size_t)model->cfg.num_hidden_layers * (size_t)n_ctx *
                          (size_t)model->cfg.num_key_value_heads * (size_t)model->cfg.head_dim * sizeof(float);
        return ctx_fail(ctx, MNEMO_ERR_NOMEM, "out of %s memory allocating a %d-token context (%zu MB of KV cache)",
                        be->host_memory ? "host" : "device", n_ctx, kv_bytes >> 20);
    }
    char why[256];
    if (kern_ctx_settings(be, ctx->kc, p.kernel_settings, why, sizeof why) != KERN_OK)
        return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "%s", why);
    if (mem) {
        p.mem_index = mnemo_mem_index_resolve(model, p.mem_index);
        memory_args args = {.cfg = &model->cfg, .be = be, .params = &p, .n_ctx = n_ctx, .w = &model->w,
                            .uio = model->uio};
        mnemo_status st = mem->create(&ctx->mem_state, &args, ctx->err, sizeof ctx->err);
        if (st != MNEMO_OK) return st;
        ctx->mem = mem;
    }
    ctx->failed = false;
    return MNEMO_OK;
}

void mnemo_context_free(mnemo_context *ctx) {
    if (!ctx) return;
    if (ctx->mem) ctx->mem->free(ctx->mem_state);
    kv_cache_free(&ctx->kv);
    forward_buffers_free(&ctx->fb);
    if (ctx->kc) ctx->model->be->ctx_free(ctx->kc);
    free(ctx->logits);
    free(ctx);
}

const char *mnemo_context_error(const mnemo_context *ctx) { return ctx ? ctx->err : "no context (allocation failed)"; }

void mnemo_context_reset(mnemo_context *ctx) {
    if (!ctx || ctx->failed) return;
    ctx->n_past = 0;
    ctx->last_token = -1;
    ctx->logits_rows = ctx->last_n = 0;
    if (ctx->mem) ctx->mem->reset(ctx->mem_state);
}

mnemo_status mnemo_context_keep_prefix(mnemo_context *ctx, const mnemo_token *tokens, int32_t n, int32_t *kept) {
    if (kept) *kept = 0;
    if (!ctx || ctx->failed) return MNEMO_ERR_MISUSE;
    if (n < 0 || n > ctx->n_past || (n > 0 && !tokens))
        return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "keep_prefix: %d tokens asked of the %d the context holds", n,
                        ctx->n_past);
    int64_t k = n;
    if (ctx->mem) {
        if (ctx->mem->keep_prefix) k = ctx->mem->keep_prefix(ctx->mem_state, n);
        else ctx->mem->reset(ctx->mem_state), k = 0;
    }
    ctx->n_past = (int32_t)k;
    ctx->last_token = k > 0 ? tokens[k - 1] : -1;
    ctx->logits_rows = ctx->last_n = 0; /* the next decode computes them again */
    if (kept) *kept = (int32_t)k;
    return MNEMO_OK;
}

int32_t mnemo_context_n_past(const mnemo_context *ctx) { return ctx && !ctx->failed ? ctx->n_past : 0; }
int32_t mnemo_context_n_ctx(const mnemo_context *ctx) { return ctx && !ctx->failed ? ctx->n_ctx : 0; }

uint64_t mnemo_context_kv_bytes(const mnemo_context *ctx) {
    if (!ctx || ctx->failed) return 0;
    return 2ull * (uint64_t)ctx->kv.n_layer * (uint64_t)ctx->kv.n_ctx * (uint64_t)ctx->kv.kv_dim * sizeof(float);
}

static mnemo_status reserve_logits(mnemo_context *ctx, int32_t rows) {
    size_t need = (size_t)rows * (size_t)ctx->model->cfg.vocab_size;
    if (need <= ctx->logits_cap) return MNEMO_OK;
    float *p = realloc(ctx->logits, need * sizeof(float));
    if (!p) return ctx_fail(ctx, MNEMO_ERR_NOMEM, "out of memory for logits of %d positions", rows);
    ctx->logits = p;
    ctx->logits_cap = need;
    return MNEMO_OK;
}

/* Checks one entry without changing anything; sets the context's message on failure. */
static mnemo_status check_entry(mnemo_context *ctx, const mnemo_token *tokens, int32_t n) {
    if (n <= 0 || !tokens) return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "decode needs at least one token (got %d)", n);
    const mnemo_model *m = ctx->model;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
            return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "token %d at index %d is outside the vocabulary [0, %d)",
                            tokens[i], i, m->cfg.vocab_size);
    if (!ctx->mem && (int64_t)ctx->n_past + n > ctx->n_ctx) /* a memory takes what the cache cannot */
        return ctx_fail(ctx, MNEMO_ERR_CONTEXT_FULL,
                        "%d tokens do not fit in the context: it has %d positions, %d in use, %d free", n, ctx->n_ctx,
                        ctx->n_past, ctx->n_ctx - ctx->n_past);
    return reserve_logits(ctx, ctx->logits_all ? n : 1);
}

/* One forward pass over already-checked entries; on success every context advances. */
static mnemo_status forward_entries(const mnemo_batch_entry *e, int32_t n_entries, int32_t total) {
    mnemo_context *lead = e[0].ctx; /* its kernel context and activation buffers serve the whole batch */
    const mnemo_model *m = lead->model;
    if (total > lead->fb.n_batch) {
        forward_buffers_free(&lead->fb);
        if (forward_buffers_init(&lead->fb, &m->cfg, total, m->be) != 0) {
            forward_buffers_init(&lead->fb, &m->cfg, lead->n_batch, m->be); /* best effort back to the usual size */
            return ctx_fail(lead, MNEMO_ERR_NOMEM, "out of memory for a batch of %d tokens", total);
        }
    }
    forward_seq seqs[n_entries];
    for (int32_t i = 0; i < n_entries; i++) {
        mnemo_context *c = e[i].ctx;
        seqs[i] = (forward_seq){.kv = &c->kv, .tokens = e[i].tokens, .n = e[i].n,
                                .pos0 = c->mem ? c->mem->next_row(c->mem_state) : c->n_past,
                                .logits_from = c->logits_all ? 0 : e[i].n - 1, .logits = c->logits, .mem = c->mem,
                                .mem_state = c->mem_state, .lora = c->lora};
    }
    int rc = llama_forward_batch(&m->cfg, &m->w, m->be, lead->kc, &lead->fb, seqs, n_entries);
    if (rc != KERN_OK) {
        for (int32_t i = 0; i < n_entries; i++) e[i].ctx->logits_rows = 0;
        return ctx_fail(lead, rc == KERN_ENOMEM ? MNEMO_ERR_NOMEM : MNEMO_ERR_BACKEND,
                        "forward pass failed (kernel error %d)", rc);
    }
    for (int32_t i = 0; i < n_entries; i++) {
        mnemo_context *c = e[i].ctx;
        c->n_past += e[i].n;
        if (c->mem) c->mem->advance(c->mem_state, e[i].tokens, e[i].n);
        c->last_token = e[i].tokens[e[i].n - 1];
        c->last_n = e[i].n;
        c->logits_rows = c->logits_all ? e[i].n : 1;
        c->logits_first = c->logits_all ? 0 : e[i].n - 1;
    }
    return MNEMO_OK;
}

mnemo_status mnemo_decode_batch(const mnemo_batch_entry *entries, int32_t n_entries) {
    if (!entries || n_entries <= 0 || n_entries > 4096) return MNEMO_ERR_INVALID_ARG;
    int64_t total = 0;
    for (int32_t i = 0; i < n_entries; i++) {
        mnemo_context *c = entries[i].ctx;
        if (!c || c->failed || c->model != entries[0].ctx->model) return MNEMO_ERR_MISUSE;
        for (int32_t j = 0; j < i; j++)
            if (entries[j].ctx == c) return ctx_fail(c, MNEMO_ERR_MISUSE, "a context appears twice in one batch");
        mnemo_status st = check_entry(c, entries[i].tokens, entries[i].n);
        if (st != MNEMO_OK) return st;
        if (c->mem && (st = c->mem->check_step(c->mem_state, entries[i].n, c->err, sizeof c->err)) != MNEMO_OK)
            return st;
        total += entries[i].n;
        if (total > (1 << 20)) return ctx_fail(c, MNEMO_ERR_INVALID_ARG, "batch of more than 2^20 tokens");
    }
    threads_use(entries[0].ctx->model);
    for (int32_t i = 0; i < n_entries; i++) { /* memory makes room first (LongLLaMA: a full window moves to memory) */
        mnemo_context *c = entries[i].ctx;
        if (!c->mem) continue;
        memory_host h = {.kc = c->kc, .kv = &c->kv, .err = c->err, .errlen = sizeof c->err};
        mnemo_status st = c->mem->make_room(c->mem_state, &h, entries[i].n);
        if (st != MNEMO_OK) return st;
    }
    return forward_entries(entries, n_entries, (int32_t)total);
}

/* ---- the context's side of memory_ops.decode: one call of n tokens, run as the memory asks */

typedef struct {
    mnemo_context *ctx;
    int32_t n; /* the call's tokens */
} decode_call;

/* Tokens [first, first + m) of the call at cache rows pos0.., in steps of n_batch; logits as the context keeps them:
 * every row with logits_all, else only the call's last token. */
static mnemo_status host_forward(void *self, const int32_t *tokens, int32_t first, int32_t m, int32_t pos0) {
    const decode_call *call = self;
    mnemo_context *ctx = call->ctx;
    const mnemo_model *mod = ctx->model;
    const size_t V = (size_t)mod->cfg.vocab_size;
    for (int32_t done = 0; done < m;) {
        int32_t nb = m - done < ctx->n_batch ? m - done : ctx->n_batch;
        bool call_last = first + done + nb == call->n;
        int32_t from = ctx->logits_all ? 0 : (call_last ? nb - 1 : nb);
        forward_seq seq = {.kv = &ctx->kv, .tokens = tokens + done, .n = nb, .pos0 = pos0 + done,
                           .logits_from = from,
                           .logits = ctx->logits_all ? ctx->logits + (size_t)(first + done) * V : ctx->logits,
                           .mem = ctx->mem, .mem_state = ctx->mem_state, .lora = ctx->lora};
        int rc = llama_forward_batch(&mod->cfg, &mod->w, mod->be, ctx->kc, &ctx->fb, &seq, 1);
        if (rc != KERN_OK)
            return ctx_fail(ctx, rc == KERN_ENOMEM ? MNEMO_ERR_NOMEM : MNEMO_ERR_BACKEND,
                            "forward pass failed (kernel error %d)", rc);
        done += nb;
    }
    return MNEMO_OK;
}

static bool host_progress(void *self, int64_t done, int64_t total) {
    return ctx_progress(((decode_call *)self)->ctx, done, total);
}

/* mnemo_decode on a context with memory: the memory decides how the input goes through (LongLLaMA: its prefix
 * window by window into memory, the tail local); the context keeps its own bookkeeping. */
static mnemo_status decode_with_memory(mnemo_context *ctx, const mnemo_token *tokens, int32_t n) {
    decode_call call = {.ctx = ctx, .n = n};
    memory_host h = {.kc = ctx->kc, .kv = &ctx->kv, .err = ctx->err, .errlen = sizeof ctx->err, .self = &call,
                     .forward = host_forward, .progress = host_progress};
    bool was_reset = false;
    mnemo_status st = ctx->mem->decode(ctx->mem_state, &h, tokens, n, &was_reset);
    if (st != MNEMO_OK) {
        if (was_reset) { /* the memory forgot the session: so does the context */
            ctx->n_past = 0;
            ctx->last_token = -1;
            ctx->logits_rows = 0;
        }
        return st;
    }
    ctx->n_past += n;
    ctx->last_token = tokens[n - 1];
    ctx->last_n = n;
    ctx->logits_rows = ctx->logits_all ? n : 1;
    ctx->logits_first = ctx->logits_all ? 0 : n - 1;
    return MNEMO_OK;
}

mnemo_status mnemo_decode(mnemo_context *ctx, const mnemo_token *tokens, int32_t n) {
    if (!ctx || ctx->failed) return MNEMO_ERR_MISUSE;
    mnemo_status st = check_entry(ctx, tokens, n);
    if (st != MNEMO_OK) return st;
    threads_use(ctx->model);
    if (ctx->mem) return decode_with_memory(ctx, tokens, n);
    /* Long inputs go through in chunks of n_batch; with logits_all each chunk writes its own rows. */
    const size_t V = (size_t)ctx->model->cfg.vocab_size;
    float *all_logits = ctx->logits;
    int32_t n_past0 = ctx->n_past;
    mnemo_token last0 = ctx->last_token;
    for (int32_t done = 0; done < n;) {
        int32_t nb = n - done < ctx->n_batch ? n - done : ctx->n_batch;
        mnemo_batch_entry e = {.ctx = ctx, .tokens = tokens + done, .n = nb};
        if (ctx->logits_all) ctx->logits = all_logits + (size_t)done * V;
        st = forward_entries(&e, 1, nb);
        ctx->logits = all_logits;
        if (st != MNEMO_OK) {
            ctx->n_past = n_past0; /* all or nothing: earlier chunks' cache rows become unreachable */
            ctx->last_token = last0;
            ctx->logits_rows = 0;
            return st;
        }
        done += nb;
        if (n > ctx->n_batch && !ctx_progress(ctx, done, n) && done < n) {
            ctx->n_past = n_past0;
            ctx->last_token = last0;
            ctx->logits_rows = 0;
            return ctx_fail(ctx, MNEMO_ERR_CANCELLED, "cancelled by the progress callback after %d of %d tokens",
                            done, n);
        }
    }
    ctx->last_n = n;
    ctx->logits_rows = ctx->logits_all ? n : 1;
    ctx->logits_first = ctx->logits_all ? 0 : n - 1;
    return MNEMO_OK;
}

void mnemo_context_set_progress(mnemo_context *ctx, mnemo_progress_fn fn, void *user) {
    if (!ctx) return;
    ctx->progress = fn;
    ctx->progress_user = user;
}

const float *mnemo_get_logits(const mnemo_context *ctx, int32_t i) {
    if (!ctx || ctx->failed || ctx->logits_rows == 0) return NULL;
    if (i == -1) i = ctx->last_n - 1;
    int32_t row = i - ctx->logits_first;
    if (i < 0 || i >= ctx->last_n || row < 0 || row >= ctx->logits_rows) return NULL;
    return ctx->logits + (size_t)row * (size_t)ctx->model->cfg.vocab_size;
}
