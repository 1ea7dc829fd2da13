/*
 * generate.c — generation as a step machine (mnemo_generation_*) and mnemo_generate, the loop over it.
 *
 * One step: sample from the context's last logits -> (logprobs) -> detokenize incrementally (text_stream never
 * splits a UTF-8 character) -> stop-string matcher (holds back a possible stop prefix) -> event. Decoding the
 * sampled token is the caller's part, so a scheduler can batch it with other contexts' tokens.
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

struct mnemo_generation {
    mnemo_context *ctx;
    mnemo_generate_params p;
    mnemo_sampler *sampler;
    text_stream *ts;
    stop_matcher *stops;
    char *text;                /* the current event's text */
    size_t text_len, text_cap;
    mnemo_token_logprob top[MNEMO_MAX_LOGPROBS];
    int32_t n_generated;
    int32_t n_past_seen;       /* the context position at the previous step, to catch a skipped decode */
    mnemo_finish_reason finish;
    bool done;
};

static int text_append(mnemo_generation *g, const char *s, size_t n) {
    if (g->text_len + n + 1 > g->text_cap) {
        size_t cap = (g->text_len + n + 1) * 2;
        char *p = realloc(g->text, cap);
        if (!p) return -1;
        g->text = p;
        g->text_cap = cap;
    }
    if (n) memcpy(g->text + g->text_len, s, n);
    g->text_len += n;
    g->text[g->text_len] = '\0';
    return 0;
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
    /* Sampling settings are checked here too, so a bad request fails before the prompt touches the context. */
    mnemo_sampler *probe = NULL;
    mnemo_status st = mnemo_sampler_new(&p->sampling, &probe);
    mnemo_sampler_free(probe);
    if (st != MNEMO_OK)
        return ctx_fail(ctx, st,
                        "invalid sampling parameters (temperature %g, top_k %d, top_p %g, min_p %g, repetition %g, "
                        "presence %g, frequency %g, penalty_last_n %d)",
                        p->sampling.temperature, p->sampling.top_k, p->sampling.top_p, p->sampling.min_p,
                        p->sampling.repetition_penalty, p->sampling.presence_penalty, p->sampling.frequency_penalty,
                        p->sampling.penalty_last_n);
    return MNEMO_OK;
}

void mnemo_generation_free(mnemo_generation *g) {
    if (!g) return;
    mnemo_sampler_free(g->sampler);
    text_stream_free(g->ts);
    stop_matcher_free(g->stops);
    free(g->text);
    free(g);
}

mnemo_status mnemo_generation_new(mnemo_context *ctx, const mnemo_generate_params *params,
                                  const mnemo_token *history, int32_t n_history, mnemo_generation **out) {
    if (!out) return MNEMO_ERR_INVALID_ARG;
    *out = NULL;
    if (!ctx || ctx->failed) return MNEMO_ERR_MISUSE;
    if (n_history < 0 || (n_history > 0 && !history))
        return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "invalid history (%d tokens)", n_history);
    if (!mnemo_get_logits(ctx, -1))
        return ctx_fail(ctx, MNEMO_ERR_MISUSE, "generation needs the context's last logits: decode the prompt first");
    mnemo_generation *g = calloc(1, sizeof *g);
    if (!g) return ctx_fail(ctx, MNEMO_ERR_NOMEM, "out of memory");
    g->ctx = ctx;
    g->p = params ? *params : mnemo_generate_default_params();
    g->p.stop = NULL; /* copied into the matcher; the caller's array need not outlive this call */
    mnemo_status st = check_params(ctx, params ? params : &g->p);
    if (st == MNEMO_OK && (st = mnemo_sampler_new(&g->p.sampling, &g->sampler)) != MNEMO_OK)
        ctx_fail(ctx, st, "out of memory for the sampler");
    if (st == MNEMO_OK) {
        g->ts = text_stream_new(ctx->model->tok, ctx->last_token);
        g->stops = params ? stop_matcher_new(params->stop, params->n_stop) : stop_matcher_new(NULL, 0);
        if (!g->ts || !g->stops) st = ctx_fail(ctx, MNEMO_ERR_NOMEM, "out of memory");
    }
    if (st != MNEMO_OK) {
        mnemo_generation_free(g);
        return st;
    }
    for (int32_t i = 0; i < n_history; i++) mnemo_sampler_accept(g->sampler, history[i]);
    g->n_past_seen = -1;
    g->finish = MNEMO_FINISH_LENGTH;
    *out = g;
    return MNEMO_OK;
}

/* Whether n more tokens fit the context: its cache (plain LLaMA), or what its memory says (LongLLaMA: always; UIO:
 * memory + raw positions within n_ctx). */
static bool ctx_takes(const mnemo_context *ctx, int32_t n) {
    if (!ctx->mem) return (int64_t)ctx->n_past + n <= ctx->n_ctx;
    char why[256];
    return ctx->mem->check_step(ctx->mem_state, n, why, sizeof why) != MNEMO_ERR_CONTEXT_FULL;
}

mnemo_status mnemo_generation_step(mnemo_generation *g, mnemo_token_event *ev) {
    if (!g || !ev || g->done) return MNEMO_ERR_MISUSE;
    mnemo_context *ctx = g->ctx;
    if (g->n_past_seen >= 0 && ctx->n_past == g->n_past_seen)
        return ctx_fail(ctx, MNEMO_ERR_MISUSE, "the previous token was not decoded before the next step");
    const mnemo_model *m = ctx->model;
    const int32_t V = m->cfg.vocab_size;
    memset(ev, 0, sizeof *ev);
    if (g->p.max_tokens == 0) { /* nothing to generate: an empty last event */
        g->done = true;
        ev->text = "";
        ev->token = -1;
        ev->is_last = true;
        return MNEMO_OK;
    }
    const float *logits = mnemo_get_logits(ctx, -1);
    mnemo_token tok;
    mnemo_status st = logits ? mnemo_sampler_sample(g->sampler, logits, V, &tok) : MNEMO_ERR_MISUSE;
    if (st != MNEMO_OK)
        return ctx_fail(ctx, st, "sampling failed at step %d (no logits, or all NaN/-inf)", g->n_generated);
    mnemo_sampler_accept(g->sampler, tok);
    g->n_generated++;
    g->n_past_seen = ctx->n_past;

    ev->token = tok;
    if (g->p.n_logprobs > 0) {
        mnemo_logprobs(logits, V, tok, g->p.n_logprobs, g->top, &ev->logprob);
        ev->top = g->top;
        ev->n_top = g->p.n_logprobs < V ? g->p.n_logprobs : V;
    }
    bool eog = !g->p.ignore_eos && mnemo_model_is_eog(m, tok);
    bool ctx_full = !ctx_takes(ctx, 1); /* this token cannot join the cache: it is the last */
    bool last = eog || ctx_full || g->n_generated == g->p.max_tokens;
    const char *piece = NULL, *emit = NULL;
    size_t piece_len = 0, emit_len = 0;
    g->text_len = 0;
    /* End-of-generation tokens have no text; neither do ids past the tokenizer (padding rows of the embedding). */
    if (!eog && tok < tokenizer_vocab_size(m->tok) && text_stream_push(g->ts, tok, &piece, &piece_len) != 0)
        return ctx_fail(ctx, MNEMO_ERR_NOMEM, "detokenization failed");
    bool matched = stop_matcher_push(g->stops, piece ? piece : "", piece_len, &emit, &emit_len);
    if (text_append(g, emit, emit_len) != 0) goto oom;
    if (matched) {
        last = true;
    } else if (last) { /* release what both stages held back */
        text_stream_flush(g->ts, &piece, &piece_len);
        matched = stop_matcher_push(g->stops, piece ? piece : "", piece_len, &emit, &emit_len);
        if (text_append(g, emit, emit_len) != 0) goto oom;
        if (!matched) {
            stop_matcher_flush(g->stops, &emit, &emit_len);
            if (text_append(g, emit, emit_len) != 0) goto oom;
        }
    }
    if (matched) g->finish = MNEMO_FINISH_STOP;
    else if (eog) g->finish = MNEMO_FINISH_EOS;
    else if (ctx_full && g->n_generated < g->p.max_tokens) g->finish = MNEMO_FINISH_CONTEXT;
    ev->text = g->text ? g->text : "";
    ev->text_len = g->text_len;
    ev->is_last = last;
    g->done = last;
    return MNEMO_OK;
oom:
    return ctx_fail(ctx, MNEMO_ERR_NOMEM, "out of memory");
}

mnemo_finish_reason mnemo_generation_finish_reason(const mnemo_generation *g) {
    return g ? g->finish : MNEMO_FINISH_LENGTH;
}
int32_t mnemo_generation_n_generated(const mnemo_generation *g) { return g ? g->n_generated : 0; }

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
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
    bool bos = p.add_bos && ctx->n_past == 0 && m->cfg.bos_token_id >= 0 && mnemo_model_adds_bos(m) &&
               (n_prompt == 0 || prompt[0] != m->cfg.bos_token_id);
    int32_t n_in = n_prompt + (bos ? 1 : 0);
    if (n_in == 0 && ctx->n_past == 0)
        return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "empty prompt on an empty context: nothing to continue from");
    const bool bounded = ctx->mem == NULL; /* with memory its decode refuses what does not fit (LongLLaMA: nothing) */
    if (bounded && (int64_t)ctx->n_past + n_in > ctx->n_ctx)
        return ctx_fail(ctx, MNEMO_ERR_CONTEXT_FULL,
                        "a prompt of %d tokens does not fit in the context: it has %d positions, %d in use, %d free",
                        n_in, ctx->n_ctx, ctx->n_past, ctx->n_ctx - ctx->n_past);
    mnemo_token *in = malloc((size_t)(n_in ? n_in : 1) * sizeof *in);
    if (!in) return ctx_fail(ctx, MNEMO_ERR_NOMEM, "out of memory");
    if (bos) in[0] = m->cfg.bos_token_id;
    if (n_prompt) memcpy(in + (bos ? 1 : 0), prompt, (size_t)n_prompt * sizeof *in);

    mnemo_generation *g = NULL;
    double t0 = now_ms();
    st = n_in > 0 ? mnemo_decode(ctx, in, n_in) : MNEMO_OK;
    double t1 = now_ms();
    if (st == MNEMO_OK) st = mnemo_generation_new(ctx, &p, in, n_in, &g);
    free(in);
    res.n_prompt_tokens = n_in;
    res.prefill_ms = t1 - t0;
    while (st == MNEMO_OK) {
        mnemo_token_event ev;
        if ((st = mnemo_generation_step(g, &ev)) != MNEMO_OK) break;
        bool keep_going = cb ? cb(&ev, user) : true;
        bool eog = ev.token >= 0 && !p.ignore_eos && mnemo_model_is_eog(m, ev.token);
        /* Every token but an end-of-generation one joins the cache, so the context holds the whole exchange. */
        if (ev.token >= 0 && !eog && ctx_takes(ctx, 1)) st = mnemo_decode(ctx, &ev.token, 1);
        if (ev.is_last) {
            res.finish_reason = mnemo_generation_finish_reason(g);
            break;
        }
        if (!keep_going) {
            res.finish_reason = MNEMO_FINISH_CANCELLED;
            break;
        }
    }
    res.n_generated = mnemo_generation_n_generated(g);
    res.decode_ms = now_ms() - t1;
    mnemo_generation_free(g);
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
