/*
 * generate.c — mnemo_generate: prompt in, tokens out through a callback.
 *
 * Per step: sample from the last logits -> (logprobs) -> detokenize incrementally (text_stream never splits a
 * UTF-8 character) -> stop-string matcher (holds back a possible stop prefix) -> callback -> decode the token.
 * Every generated token except an end-of-generation one ends up in the KV cache, so a follow-up call continues
 * the same conversation.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_impl.h"
#include "stop_strings.h"

mnemo_generate_params mnemo_generate_default_params(void) {
    mnemo_generate_params p;
    memset(&p, 0, sizeof p);
    p.sampling = mnemo_sampler_default_params();
    p.max_tokens = 128;
    p.add_bos = true;
    return p;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Concatenate emitted pieces into one reusable buffer. */
typedef struct {
    char *buf;
    size_t len, cap;
} text_buf;

static int text_append(text_buf *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *p = realloc(t->buf, cap);
        if (!p) return -1;
        t->buf = p;
        t->cap = cap;
    }
    if (n) memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
    return 0;
}

typedef struct {
    mnemo_sampler *sampler;
    text_stream *ts;
    stop_matcher *stops;
    text_buf text;
    mnemo_token_logprob top[MNEMO_MAX_LOGPROBS];
} gen_state;

static void gen_state_free(gen_state *g) {
    mnemo_sampler_free(g->sampler);
    text_stream_free(g->ts);
    stop_matcher_free(g->stops);
    free(g->text.buf);
}

static mnemo_status check_params(mnemo_context *ctx, const mnemo_generate_params *p) {
    if (p->max_tokens < 0)
        return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "max_tokens must be >= 0 (got %d)", p->max_tokens);
    if (p->n_logprobs < 0 || p->n_logprobs > MNEMO_MAX_LOGPROBS)
        return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "n_logprobs must be in [0, %d] (got %d)", MNEMO_MAX_LOGPROBS,
                        p->n_logprobs);
    if (p->n_stop < 0 || (p->n_stop > 0 && !p->stop))
        return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "stop list is missing or has a negative count");
    for (int32_t i = 0; i < p->n_stop; i++)
        if (!p->stop[i]) return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "stop string %d is NULL", i);
    return MNEMO_OK;
}

mnemo_status mnemo_generate_tokens(mnemo_context *ctx, const mnemo_token *prompt, int32_t n_prompt,
                                   const mnemo_generate_params *params, mnemo_token_callback cb, void *user,
                                   mnemo_generate_result *result) {
    if (!ctx || ctx->failed) return MNEMO_ERR_MISUSE;
    mnemo_generate_params p = params ? *params : mnemo_generate_default_params();
    mnemo_status st = check_params(ctx, &p);
    if (st != MNEMO_OK) return st;
    if (n_prompt < 0 || (n_prompt > 0 && !prompt))
        return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "invalid prompt (%d tokens)", n_prompt);
    const mnemo_model *m = ctx->model;
    mnemo_generate_result res = {0};

    /* BOS goes first on an empty context, unless the caller's tokens already start with it. */
    bool bos = p.add_bos && ctx->n_past == 0 && m->cfg.bos_token_id >= 0 &&
               (n_prompt == 0 || prompt[0] != m->cfg.bos_token_id);
    int32_t n_in = n_prompt + (bos ? 1 : 0);
    if (n_in == 0 && ctx->n_past == 0)
        return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "empty prompt on an empty context: nothing to continue from");
    if ((int64_t)ctx->n_past + n_in > ctx->n_ctx)
        return ctx_fail(ctx, MNEMO_ERR_CONTEXT_FULL,
                        "prompt of %d tokens does not fit: the context holds %d of %d positions", n_in, ctx->n_past,
                        ctx->n_ctx);

    gen_state g = {0};
    st = mnemo_sampler_new(&p.sampling, &g.sampler);
    if (st != MNEMO_OK) {
        ctx_fail(ctx, st, "invalid sampling parameters");
        goto done;
    }
    mnemo_token *in = malloc((size_t)(n_in ? n_in : 1) * sizeof *in);
    if (!in) {
        st = ctx_fail(ctx, MNEMO_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (bos) in[0] = m->cfg.bos_token_id;
    if (n_prompt) memcpy(in + (bos ? 1 : 0), prompt, (size_t)n_prompt * sizeof *in);
    for (int32_t i = 0; i < n_in; i++) mnemo_sampler_accept(g.sampler, in[i]);

    double t0 = now_ms();
    if (n_in > 0) st = mnemo_decode(ctx, in, n_in);
    free(in);
    if (st != MNEMO_OK) goto done;
    res.n_prompt_tokens = n_in;
    double t1 = now_ms();
    res.prefill_ms = t1 - t0;

    g.ts = text_stream_new(m->tok, ctx->last_token);
    g.stops = stop_matcher_new(p.stop, p.n_stop);
    if (!g.ts || !g.stops) {
        st = ctx_fail(ctx, MNEMO_ERR_NOMEM, "out of memory");
        goto done;
    }
    res.finish_reason = MNEMO_FINISH_LENGTH;
    const int32_t V = m->cfg.vocab_size;
    int32_t tok_vocab = tokenizer_vocab_size(m->tok);
    for (int32_t step = 0; step < p.max_tokens; step++) {
        const float *logits = mnemo_get_logits(ctx, -1);
        mnemo_token tok;
        st = mnemo_sampler_sample(g.sampler, logits, V, &tok);
        if (st != MNEMO_OK) {
            ctx_fail(ctx, st, "sampling failed at step %d (logits are all NaN or -inf)", step);
            goto done;
        }
        mnemo_sampler_accept(g.sampler, tok);
        res.n_generated++;

        mnemo_token_event ev = {.token = tok};
        if (p.n_logprobs > 0) {
            mnemo_logprobs(logits, V, tok, p.n_logprobs, g.top, &ev.logprob);
            ev.top = g.top;
            ev.n_top = p.n_logprobs < V ? p.n_logprobs : V;
        }
        bool eog = !p.ignore_eos && mnemo_model_is_eog(m, tok);
        bool ctx_full = ctx->n_past >= ctx->n_ctx; /* this token cannot join the cache: it is the last */
        bool last = eog || ctx_full || step + 1 == p.max_tokens;
        const char *piece = NULL, *emit = NULL;
        size_t piece_len = 0, emit_len = 0;
        g.text.len = 0;
        bool matched = false;
        /* Pieces of ids the tokenizer does not know (padding rows of a larger embedding) have no text. */
        if (!eog && tok < tok_vocab && text_stream_push(g.ts, tok, &piece, &piece_len) != 0) {
            st = ctx_fail(ctx, MNEMO_ERR_NOMEM, "detokenization failed");
            goto done;
        }
        matched = stop_matcher_push(g.stops, piece ? piece : "", piece_len, &emit, &emit_len);
        if (text_append(&g.text, emit, emit_len) != 0) goto oom;
        if (matched) {
            last = true;
        } else if (last) { /* release what both stages held back */
            text_stream_flush(g.ts, &piece, &piece_len);
            matched = stop_matcher_push(g.stops, piece ? piece : "", piece_len, &emit, &emit_len);
            if (text_append(&g.text, emit, emit_len) != 0) goto oom;
            if (!matched) {
                stop_matcher_flush(g.stops, &emit, &emit_len);
                if (text_append(&g.text, emit, emit_len) != 0) goto oom;
            }
        }
        if (matched) res.finish_reason = MNEMO_FINISH_STOP;
        else if (eog) res.finish_reason = MNEMO_FINISH_EOS;
        else if (ctx_full && step + 1 < p.max_tokens) res.finish_reason = MNEMO_FINISH_CONTEXT;

        bool keep_going = true;
        ev.text = g.text.buf ? g.text.buf : "";
        ev.text_len = g.text.len;
        ev.is_last = last;
        if (cb) keep_going = cb(&ev, user);
        if (!keep_going && !last) res.finish_reason = MNEMO_FINISH_CANCELLED;
        if (eog || ctx_full) break;
        /* The token joins the cache so the context holds the whole exchange. */
        st = mnemo_decode(ctx, &tok, 1);
        if (st != MNEMO_OK) goto done;
        if (last || !keep_going) break;
    }
    res.decode_ms = now_ms() - t1;
    st = MNEMO_OK;
    goto done;
oom:
    st = ctx_fail(ctx, MNEMO_ERR_NOMEM, "out of memory");
done:
    gen_state_free(&g);
    if (result) *result = res;
    return st;
}

mnemo_status mnemo_generate(mnemo_context *ctx, const char *prompt, const mnemo_generate_params *params,
                            mnemo_token_callback cb, void *user, mnemo_generate_result *result) {
    if (!ctx || ctx->failed) return MNEMO_ERR_MISUSE;
    if (!prompt) return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "prompt is NULL");
    int32_t *ids = NULL;
    size_t n = 0;
    /* BOS is added by mnemo_generate_tokens (only on an empty context). */
    if (tokenizer_encode(ctx->model->tok, prompt, strlen(prompt), false, &ids, &n) != 0)
        return ctx_fail(ctx, MNEMO_ERR_NOMEM, "tokenization failed");
    if (n > INT32_MAX) {
        free(ids);
        return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "prompt too long");
    }
    mnemo_status st = mnemo_generate_tokens(ctx, ids, (int32_t)n, params, cb, user, result);
    free(ids);
    return st;
}
