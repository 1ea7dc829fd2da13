/*
 * routes_infer.c — POST /v1/completions, POST /v1/chat/completions and llama.cpp's POST /completion (its body is
 * translated into a /v1/completions one, its answers shaped by llama_compat.c).
 *
 * On the connection's thread: parse and validate (request_parse.c), render the chat template, tokenize, check the
 * prompt against the slot's context, build a request (one choice per prompt x n) and submit it. Then either
 *   stream: return a reader that turns request events into SSE chunks as they arrive (blocking in libmicrohttpd's
 *           connection thread, never in the scheduler), ending with "data: [DONE]"; or
 *   wait:   collect every event and answer one JSON object.
 * Errors known before submitting get their status (400/404/503); errors after a stream started become an error
 * event in the stream.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_error.h"
#include "app.h"
#include "model_names.h"
#include "infer_request.h"
#include "llama_compat.h"
#include "oai_format.h"
#include "request_parse.h"
#include "text_util.h"

#define WAIT_SLICE_S 0.5 /* how long a consumer blocks before re-checking the server's state */

/* ---------------------------------------------------------------- building the request */

typedef struct {
    mnemo_token *v;
    int32_t n, cap;
    bool failed;
} tokvec;

static void tv_push(tokvec *t, const mnemo_token *ids, int32_t n) {
    if (t->failed || n <= 0) return;
    if (t->n + n > t->cap) {
        int32_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + n) cap *= 2;
        mnemo_token *p = realloc(t->v, (size_t)cap * sizeof *p);
        if (!p) {
            t->failed = true;
            return;
        }
        t->v = p;
        t->cap = cap;
    }
    memcpy(t->v + t->n, ids, (size_t)n * sizeof *ids);
    t->n += n;
}

/* Chat template sink: text between special tokens is tokenized as one piece, as Hugging Face does. */
typedef struct {
    const mnemo_model *m;
    tokvec toks;
    strbuf text;
} tmpl_tokens;

static int flush_text(tmpl_tokens *t) {
    if (t->text.failed) return -1;
    if (t->text.len == 0) return 0;
    int32_t n = 0;
    mnemo_token *ids = tokenize_special_alloc(t->m, t->text.data, t->text.len, &n);
    if (!ids) return -1;
    tv_push(&t->toks, ids, n);
    free(ids);
    t->text.len = 0;
    return t->toks.failed ? -1 : 0;
}

static int sink_text(void *u, const char *s, size_t n, bool answer) {
    tmpl_tokens *t = u;
    sb_append(&t->text, s, n);
    return t->text.failed ? -1 : 0;
}

static int sink_special(void *u, mnemo_chat_special which, bool answer) {
    tmpl_tokens *t = u;
    if (flush_text(t)) return -1;
    /* BOS only for a vocabulary that starts sequences with it (SmolLM2's ChatML has none) */
    mnemo_token id = which != MNEMO_CHAT_BOS ? mnemo_model_eos(t->m) : mnemo_model_adds_bos(t->m) ? mnemo_model_bos(t->m) : -1;
    if (id >= 0) tv_push(&t->toks, &id, 1);
    return t->toks.failed ? -1 : 0;
}

/* Renders the request's messages and the opening of the assistant's turn into t (the whole prompt is tokenized:
 * the answer marks are not needed). 0, or -1 with err and param: "messages[i].role" for the message whose role the
 * template cannot take, else "messages". */
static int render_messages(mnemo_chat_template tmpl, const infer_request *r, tmpl_tokens *t, char *err,
                           size_t errlen, char *param, size_t paramlen) {
    snprintf(err, errlen, "out of memory rendering the chat template");
    snprintf(param, paramlen, "messages");
    int n = r->n_messages;
    mnemo_chat_msg *m = malloc((n > 0 ? (size_t)n : 1) * sizeof *m);
    if (!m) return -1;
    for (int i = 0; i < n; i++) m[i] = (mnemo_chat_msg){r->messages[i].role, r->messages[i].content, r->messages[i].len};
    mnemo_chat_sink sink = {sink_text, sink_special, t};
    int32_t bad = -1;
    char why[256];
    mnemo_status st = mnemo_chat_template_render(tmpl, m, n, true, &sink, &bad, why, sizeof why);
    free(m);
    if (st == MNEMO_OK) return 0;
    if (st == MNEMO_ERR_CANCELLED) return -1; /* the sink failed: out of memory */
    snprintf(err, errlen, "%s", why);
    if (bad >= 0) snprintf(param, paramlen, "messages[%d].role", (int)bad);
    return -1;
}

/* The prompt of request prompt p as token ids, BOS first. */
static int prompt_tokens(server_app *app, const infer_request *r, int p, tokvec *out, api_error *e) {
    const mnemo_model *m = app->model;
    if (r->chat) {
        tmpl_tokens t = {.m = m};
        char err[256], param[64];
        int rc = render_messages(app->tmpl, r, &t, err, sizeof err, param, sizeof param);
        if (rc == 0) rc = flush_text(&t);
        sb_free(&t.text);
        if (rc != 0 || t.toks.failed) {
            free(t.toks.v);
            if (t.toks.failed || t.text.failed) return api_error_set(e, 500, "out_of_memory", NULL, "out of memory");
            return api_error_set(e, 400, "invalid_value", param, "%s", err);
        }
        *out = t.toks;
        return 0;
    }
    const prompt_in *pi = &r->prompts[p];
    if (pi->is_tokens) {
        mnemo_token bos = mnemo_model_bos(m);
        if (bos >= 0 && mnemo_model_adds_bos(m) && pi->tokens[0] != bos) tv_push(out, &bos, 1); /* as generate does */
        tv_push(out, pi->tokens, pi->n_tokens);
    } else {
        int32_t n = 0;
        mnemo_token *ids = tokenize_alloc(m, pi->text, pi->text_len, true, &n);
        if (!ids) return api_error_set(e, 500, "tokenizer_error", NULL, "tokenization failed");
        tv_push(out, ids, n);
        free(ids);
    }
    if (out->failed) return api_error_set(e, 500, "out_of_memory", NULL, "out of memory");
    return 0;
}

static uint64_t mix64(uint64_t x) { /* splitmix64: a default seed per request */
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* A session that already holds tokens continues them: its prompt must not start a new sequence with BOS. */
static void drop_bos(const server_app *app, tokvec *t) {
    if (t->n > 0 && t->v[0] == mnemo_model_bos(app->model)) memmove(t->v, t->v + 1, (size_t)--t->n * sizeof *t->v);
}

static ireq *build_job(server_app *app, const infer_request *r, session *sess, api_error *e) {
    int n_prompts = r->chat ? 1 : r->n_prompts;
    ireq *j = ireq_new(n_prompts * r->n);
    if (!j) {
        api_error_set(e, 500, "out_of_memory", NULL, "out of memory");
        return NULL;
    }
    mnemo_generate_params gp = mnemo_generate_default_params();
    gp.sampling = r->sampling;
    /* Omitted: chat (and /completion) runs until the context is full (finish_reason "length"; LongLLaMA: n_ctx
     * tokens), completions stop at OpenAI's 16.
     * Given: it must fit with the prompt (checked per prompt below, as OpenAI does). */
    gp.max_tokens = r->max_tokens >= 0 ? r->max_tokens : r->to_context_end ? app->n_ctx : 16;
    gp.n_logprobs = r->logprobs < 0 ? 0 : r->logprobs > 0 ? r->logprobs : 1; /* 1: the chosen token's logprob */
    gp.ignore_eos = r->ignore_eos;
    gp.add_bos = false; /* prompts carry their BOS */
    const char *tmpl_stop = r->chat ? mnemo_chat_template_stop(app->tmpl) : NULL;
    j->stop = calloc((size_t)r->n_stop + 1, sizeof *j->stop);
    if (!j->stop) goto oom;
    for (int i = 0; i < r->n_stop; i++) {
        if (!(j->stop[i] = strdup(r->stop[i]))) goto oom;
        j->n_stop++;
    }
    if (tmpl_stop) {
        if (!(j->stop[j->n_stop] = strdup(tmpl_stop))) goto oom;
        j->n_stop++;
    }
    gp.stop = (const char *const *)j->stop;
    gp.n_stop = j->n_stop;
    j->gp = gp;
    uint64_t seed = r->seed_set ? r->sampling.seed
                                : mix64((uint64_t)time(NULL) ^ ((uint64_t)atomic_fetch_add(&app->seq, 1) << 32));
    /* n_ctx bounds plain LLaMA sequences; LongLLaMA has none; UIO compresses as it goes, so only the engine knows
     * what fits (a prompt past its positions ends with a message naming them, a generation with "length") */
    const bool capped = !app->unbounded && !app->uio && !app->retrieval;
    for (int p = 0; p < n_prompts; p++) {
        tokvec t = {0};
        if (prompt_tokens(app, r, p, &t, e) != 0) {
            ireq_unref(j);
            return NULL;
        }
        if (app->opts.max_prompt_tokens > 0 && t.n > app->opts.max_prompt_tokens) {
            free(t.v);
            ireq_unref(j);
            api_error_set(e, 400, "context_length_exceeded", r->chat ? "messages" : "prompt",
                          "the prompt has %d tokens, more than this server takes in one request "
                          "(--max-prompt-tokens %lld)",
                          t.n, (long long)app->opts.max_prompt_tokens);
            return NULL;
        }
        int32_t held = 0; /* tokens the session holds before this prompt */
        if (sess && !session_is_empty(sess)) {
            drop_bos(app, &t);
            held = mnemo_context_n_past(session_context(sess));
        }
        if (t.n == 0) { /* a session's BOS-only prompt is empty too: it needs a new token to continue */
            free(t.v);
            ireq_unref(j);
            api_error_set(e, 400, "invalid_value", r->chat ? "messages" : "prompt", "the prompt is empty");
            return NULL;
        }
        if (sess && capped && held + t.n > app->n_ctx) {
            free(t.v);
            ireq_unref(j);
            api_error_set(e, 400, "context_length_exceeded", r->chat ? "messages" : "prompt",
                          "session '%s' holds %d tokens; %d more do not fit its context of %d tokens (--ctx); start a "
                          "new session",
                          r->session, held, t.n, app->n_ctx);
            return NULL;
        }
        if (t.n > app->n_ctx && capped) { /* LongLLaMA: the prefix goes to memory window by window */
            free(t.v);
            ireq_unref(j);
            api_error_set(e, 400, "context_length_exceeded", r->chat ? "messages" : "prompt",
                          "the prompt has %d tokens but the context holds %d tokens per request (--ctx); shorten the "
                          "prompt",
                          t.n, app->n_ctx);
            return NULL;
        }
        if (r->max_tokens >= 0 && capped && (int64_t)held + t.n + r->max_tokens > app->n_ctx) {
            int32_t room = app->n_ctx - held - t.n;
            free(t.v);
            ireq_unref(j);
            char holds[96] = "";
            if (held) snprintf(holds, sizeof holds, "the %d tokens session '%s' holds + ", held, r->session);
            api_error_set(e, 400, "context_length_exceeded", r->max_tokens_param,
                          "%s%d prompt tokens + %s %d = %lld tokens, more than the context of %d tokens (--ctx); "
                          "lower %s to at most %d, or omit it to generate until the context is full",
                          holds, t.n, r->max_tokens_param, r->max_tokens, (long long)held + t.n + r->max_tokens,
                          app->n_ctx, r->max_tokens_param, room);
            return NULL;
        }
        for (int k = 0; k < r->n; k++) {
            ireq_choice *c = &j->choices[p * r->n + k];
            c->prompt = malloc((size_t)t.n * sizeof *c->prompt);
            if (!c->prompt) {
                free(t.v);
                goto oom;
            }
            memcpy(c->prompt, t.v, (size_t)t.n * sizeof *t.v);
            c->n_prompt = t.n;
            c->prompt_index = p;
            c->seed = seed + (uint64_t)k; /* the n choices of one prompt differ; the same seed repeats them */
        }
        free(t.v);
    }
    return j;
oom:
    ireq_unref(j);
    api_error_set(e, 500, "out_of_memory", NULL, "out of memory");
    return NULL;
}

/* ---------------------------------------------------------------- consuming the events */

typedef enum { API_COMPLETIONS, API_CHAT, API_LLAMA } infer_api;

typedef struct {
    server_app *app;
    char model_name[256]; /* what the response names (model_names.h) */
    ireq *j;
    oai_ctx oc;
    bool llama;           /* llama.cpp's /completion shapes instead of OpenAI's */
    int n_top;            /* alternatives shown per token (the engine computes >= 1 to get the chosen logprob) */
    bool include_usage;
    /* non-streaming */
    strbuf *text;
    json_t **lp;
    size_t *offset;
    /* streaming */
    strbuf out;
    size_t out_pos;
    bool opened, finished;
} consumer;

static void consumer_free(consumer *c) {
    if (!c) return;
    for (int i = 0; c->text && i < c->j->n_choices; i++) sb_free(&c->text[i]);
    for (int i = 0; c->lp && i < c->j->n_choices; i++) json_decref(c->lp[i]);
    free(c->text);
    free(c->lp);
    free(c->offset);
    sb_free(&c->out);
    ireq_unref(c->j);
    free(c);
}

static consumer *consumer_new(server_app *app, ireq *j, const infer_request *r, const char *model_name) {
    consumer *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->app = app;
    c->j = j;
    c->oc.model = app->model;
    c->oc.chat = r->chat;
    c->oc.logprobs = r->logprobs >= 0;
    snprintf(c->model_name, sizeof c->model_name, "%s", model_name);
    c->oc.model_name = c->model_name;
    c->oc.created = (long long)time(NULL);
    oai_make_id(&c->oc, atomic_fetch_add(&app->seq, 1));
    c->n_top = r->logprobs > 0 ? r->logprobs : 0;
    c->include_usage = r->include_usage;
    int n = j->n_choices;
    c->text = calloc((size_t)n, sizeof *c->text);
    c->lp = calloc((size_t)n, sizeof *c->lp);
    c->offset = calloc((size_t)n, sizeof *c->offset);
    if (!c->text || !c->lp || !c->offset) {
        c->j = NULL;
        free(c->text);
        free(c->lp);
        free(c->offset);
        free(c);
        return NULL;
    }
    return c;
}

static void trim_top(const consumer *c, ireq_event *ev) {
    if (ev->n_top > c->n_top) ev->n_top = c->n_top;
}

/* The outcome of a finished request for metrics: the worst choice's end. */
static const char *outcome(const ireq *j) {
    ireq_end worst = IREQ_END_OK;
    for (int i = 0; i < j->n_choices; i++)
        if (j->choices[i].end > worst) worst = j->choices[i].end;
    static const char *names[] = {"ok", "client_gone", "timeout", "shutdown", "error"};
    return names[worst];
}

/* Why a choice produced nothing (it ended before reaching a slot, or the engine failed): status + message. */
static int choice_failure(const server_app *app, const ireq *j, const ireq_choice *ch, char *msg, size_t n) {
    if (ch->end == IREQ_END_ERROR && j->error_full) { /* found while prefilling (UIO positions) */
        snprintf(msg, n, "%s", j->error);
        return 400;
    }
    if (ch->end == IREQ_END_ERROR) {
        snprintf(msg, n, "generation failed: %s", j->error[0] ? j->error : "engine error");
        return 500;
    }
    if (ch->started) return 0;
    if (ch->end == IREQ_END_TIMEOUT) {
        snprintf(msg, n, "the request waited longer than the time limit (%g s, --timeout) for a free slot",
                 app->opts.timeout_s);
        return 503;
    }
    if (ch->end == IREQ_END_SHUTDOWN) {
        snprintf(msg, n, "the server is shutting down");
        return 503;
    }
    if (ch->end == IREQ_END_CLIENT_GONE) {
        snprintf(msg, n, "the client disconnected");
        return 400;
    }
    return 0;
}

/* The error code of choice_failure's status (a stream's error event has always named one). */
static const char *failure_code(int status, const ireq *j, bool stream) {
    if (status == 400 && j->error_full) return "context_length_exceeded";
    return status == 500 ? "generation_failed" : status == 503 || stream ? "unavailable" : NULL;
}

/* Waits for the next batch of events. Once the server has stopped (STOPPED: the scheduler no longer runs this request)
 * it reports the request done so no connection thread waits forever. */
static size_t wait_events(consumer *c, ireq_event **ev, bool *all_done) {
    size_t n = ireq_take_events(c->j, WAIT_SLICE_S, ev, all_done);
    if (n == 0 && !*all_done && atomic_load(&c->app->state) == APP_STOPPED) {
        ireq_cancel(c->j, IREQ_END_SHUTDOWN);
        *all_done = true; /* the scheduler is gone: nothing more will come */
    }
    return n;
}

static void respond_collected(consumer *c, http_reply *rep) {
    ireq *j = c->j;
    bool all_done = false;
    while (!all_done) {
        ireq_event *ev = NULL;
        size_t n = wait_events(c, &ev, &all_done);
        for (size_t k = 0; k < n; k++) {
            ireq_event *e = &ev[k];
            if (e->kind != IREQ_EV_TOKEN) continue; /* outcomes are read from j->choices at the end */
            sb_append(&c->text[e->choice], e->text, e->text_len);
            if (c->oc.logprobs) {
                if (!c->lp[e->choice]) c->lp[e->choice] = oai_logprobs_new(&c->oc);
                trim_top(c, e);
                oai_logprobs_add(&c->oc, c->lp[e->choice], e, &c->offset[e->choice]);
            }
        }
        ireq_events_free(ev, n);
    }
    metrics_request_end(c->app->mx, outcome(j));
    for (int i = 0; i < j->n_choices; i++) {
        char msg[384];
        int st = choice_failure(c->app, j, &j->choices[i], msg, sizeof msg);
        if (st) {
            reply_error(rep, st, failure_code(st, j, false), NULL, NULL, "%s", msg);
            return;
        }
        if (c->text[i].failed) {
            reply_error(rep, 500, "out_of_memory", NULL, NULL, "out of memory collecting the result");
            return;
        }
    }
    if (c->llama) {
        reply_json(rep, 200, llama_result(c->model_name, c->text[0].data, c->text[0].len, j));
        return;
    }
    json_t *o = oai_envelope(&c->oc, false);
    json_t *choices = json_object_get(o, "choices");
    for (int i = 0; i < j->n_choices; i++) {
        if (c->oc.logprobs && !c->lp[i]) c->lp[i] = oai_logprobs_new(&c->oc);
        json_array_append_new(choices, oai_choice(&c->oc, i, c->text[i].data, c->text[i].len, c->lp[i], &j->choices[i]));
        c->lp[i] = NULL; /* now owned by the response */
    }
    json_object_set_new(o, "usage", oai_usage(j));
    json_object_set_new(o, "timings", oai_timings(j));
    reply_json(rep, 200, o);
}

/* Formats the stream's next events into c->out. */
static void stream_fill_llama(consumer *c) {
    ireq *j = c->j;
    bool all_done = false;
    ireq_event *ev = NULL;
    size_t n = wait_events(c, &ev, &all_done);
    for (size_t k = 0; k < n; k++) {
        ireq_event *e = &ev[k];
        if (e->kind == IREQ_EV_END) {
            char msg[384];
            int st = choice_failure(c->app, j, &j->choices[e->choice], msg, sizeof msg);
            if (st) sse_event(&c->out, api_error_json(st, failure_code(st, j, true), NULL, msg));
        } else if (e->kind == IREQ_EV_TOKEN && (e->text_len > 0 || e->token >= 0)) {
            sse_event(&c->out, llama_chunk(e->text, e->text_len, e->token));
        }
    }
    ireq_events_free(ev, n);
    if (all_done) { /* the closing object; llama.cpp sends no [DONE] here */
        sse_event(&c->out, llama_result(c->model_name, "", 0, j));
        c->finished = true;
        metrics_request_end(c->app->mx, outcome(j));
    }
}

static void stream_fill(consumer *c) {
    ireq *j = c->j;
    if (!c->opened) { /* chat: each choice opens with its role */
        c->opened = true;
        if (c->oc.chat)
            for (int i = 0; i < j->n_choices; i++)
                sse_event(&c->out, oai_chunk(&c->oc, i, "", 0, NULL, NULL, true, c->include_usage));
        if (c->out.len) return;
    }
    bool all_done = false;
    ireq_event *ev = NULL;
    size_t n = wait_events(c, &ev, &all_done);
    for (size_t k = 0; k < n; k++) {
        ireq_event *e = &ev[k];
        if (e->kind == IREQ_EV_PROGRESS) {
            json_t *o = oai_envelope(&c->oc, true);
            json_object_set_new(o, "progress", json_pack("{s:i, s:i, s:i, s:f}", "index", e->choice, "processed",
                                                         (json_int_t)e->done, "total", (json_int_t)e->total,
                                                         "elapsed_ms", e->elapsed_ms));
            sse_event(&c->out, o);
            continue;
        }
        if (e->kind == IREQ_EV_END) {
            char msg[384];
            int st = choice_failure(c->app, j, &j->choices[e->choice], msg, sizeof msg);
            if (st) sse_event(&c->out, api_error_json(st, failure_code(st, j, true), NULL, msg));
            else
                sse_event(&c->out, oai_chunk(&c->oc, e->choice, "", 0, NULL, &j->choices[e->choice], false,
                                             c->include_usage));
            continue;
        }
        json_t *lp = NULL;
        if (c->oc.logprobs && e->token >= 0) {
            lp = oai_logprobs_new(&c->oc);
            trim_top(c, e);
            oai_logprobs_add(&c->oc, lp, e, &c->offset[e->choice]);
        }
        if (e->text_len == 0 && !lp) continue; /* text held back (stop-string prefix, partial character) */
        sse_event(&c->out, oai_chunk(&c->oc, e->choice, e->text, e->text_len, lp, NULL, false, c->include_usage));
    }
    ireq_events_free(ev, n);
    if (all_done) {
        if (c->include_usage) {
            json_t *u = oai_envelope(&c->oc, true);
            json_object_set_new(u, "usage", oai_usage(j));
            json_object_set_new(u, "timings", oai_timings(j));
            sse_event(&c->out, u);
        }
        sse_done(&c->out);
        c->finished = true;
        metrics_request_end(c->app->mx, outcome(j));
    }
}

static ssize_t stream_read(void *arg, char *buf, size_t max) {
    consumer *c = arg;
    while (c->out_pos == c->out.len) {
        if (c->finished) return 0;
        c->out.len = c->out_pos = 0;
        if (c->llama) stream_fill_llama(c);
        else stream_fill(c);
        if (c->out.failed) return -1;
    }
    size_t n = c->out.len - c->out_pos;
    if (n > max) n = max;
    memcpy(buf, c->out.data + c->out_pos, n);
    c->out_pos += n;
    return (ssize_t)n;
}

static void stream_free(void *arg) {
    consumer *c = arg;
    if (!c->finished) { /* the connection ended first: free the slots */
        ireq_cancel(c->j, IREQ_END_CLIENT_GONE);
        metrics_request_end(c->app->mx, "client_gone");
    }
    consumer_free(c);
}

/* ---------------------------------------------------------------- the routes */

static void route_infer(server_app *app, const http_request *req, http_reply *rep, infer_api api) {
    infer_request r;
    api_error pe;
    parse_limits lim = {.n_vocab = app->n_vocab};
    double t_arrival = now_s();
    const bool chat = api == API_CHAT;
    bool to_context_end = false;
    char *translated = NULL; /* /completion: its body as a /v1/completions one */
    memset(&r, 0, sizeof r);
    if (api == API_LLAMA && !(translated = llama_completion_to_oai(req->body, req->body_len, &to_context_end, &pe)) &&
        pe.status) {
        reply_api_error(rep, &pe);
        goto out;
    }
    if (parse_infer_request(translated ? translated : req->body, translated ? strlen(translated) : req->body_len,
                            chat, &lim, &r, &pe) != 0) {
        reply_api_error(rep, &pe);
        goto out;
    }
    if (api == API_LLAMA) { /* its max_tokens is n_predict to the client */
        r.to_context_end = to_context_end;
        r.max_tokens_param = "n_predict";
    }
    const mnemo_adapter *adapter = NULL; /* a fine-tuned model: its adapter over the shared base weights */
    const char *model_name = NULL;      /* what the response names: what was asked for (model_names.h) */
    model_match mm = model_resolve(app, r.model, &model_name);
    if (mm == MODEL_NOT_FOUND || (mm == MODEL_FINETUNED && !app->jobs)) {
        reply_error(rep, 404, "model_not_found", "model", NULL,
                    "the model '%s' does not exist (this server has '%s'%s)", r.model, app->alias,
                    mm == MODEL_NOT_FOUND ? "; it was started with --model-name-strict" : "");
        goto out;
    }
    if (mm == MODEL_FINETUNED) {
        api_error fe;
        if (!(adapter = ft_jobs_adapter(app->jobs, r.model, &fe))) {
            reply_error(rep, fe.status, fe.code, fe.param, NULL, "%s", fe.message);
            goto out;
        }
        if (r.session) {
            reply_error(rep, 400, "unsupported_value", "session", NULL,
                        "sessions run on the base model '%s' so far; a fine-tuned model cannot use one", app->alias);
            goto out;
        }
    }
    if (atomic_load(&app->state) >= APP_STOPPING) {
        rep->close = true;
        reply_error(rep, 503, "shutting_down", NULL, NULL, "the server is shutting down");
        goto out;
    }
    session *sess = NULL;
    if (r.session) {
        char msg[384];
        int st = session_id_valid(r.session) ? sessions_acquire(app->sessions, r.session, &sess, msg, sizeof msg)
                                             : (snprintf(msg, sizeof msg, "invalid session id (A-Z a-z 0-9 _ -, 1 to "
                                                                          "%d characters)", SESSION_ID_MAX), 400);
        if (st != 200) {
            reply_error(rep, st, st == 404 ? "session_not_found" : st == 409 ? "session_busy" : "invalid_value",
                        "session", NULL, "%s", msg);
            goto out;
        }
    }
    api_error be;
    ireq *j = build_job(app, &r, sess, &be);
    if (!j) {
        sessions_release(app->sessions, sess, NULL);
        reply_api_error(rep, &be);
        goto out;
    }
    j->adapter = adapter;
    if (sess) { /* from here the request gives it back, however it ends */
        j->sessions = app->sessions;
        j->session = sess;
    }
    j->progress = r.stream && r.include_progress;
    j->t_arrival = t_arrival;
    j->deadline = app->opts.timeout_s > 0 ? t_arrival + app->opts.timeout_s : 0;
    ireq_watch_fd(j, req->fd);
    consumer *c = consumer_new(app, j, &r, model_name);
    if (c) c->llama = api == API_LLAMA;
    if (!c) {
        ireq_unref(j);
        reply_error(rep, 500, "out_of_memory", NULL, NULL, "out of memory");
        goto out;
    }
    sched_result sr = sched_submit(app->sched, j);
    if (sr != SCHED_OK) {
        consumer_free(c);
        if (sr == SCHED_STOPPING) rep->close = true;
        reply_error(rep, 503, sr == SCHED_FULL ? "overloaded" : "shutting_down", NULL, NULL, "%s",
                    sr == SCHED_FULL ? "the server is busy: every slot is in use and the queue is full (--queue); "
                                       "retry later"
                                     : "the server is shutting down");
        goto out;
    }
    if (r.stream) {
        rep->status = 200;
        rep->content_type = "text/event-stream";
        http_reply_header(rep, "Cache-Control", "no-cache");
        http_reply_header(rep, "X-Accel-Buffering", "no");
        rep->read = stream_read;
        rep->free = stream_free;
        rep->stream = c;
    } else {
        respond_collected(c, rep);
        consumer_free(c);
    }
out:
    infer_request_free(&r);
    free(translated);
}

void route_completions(server_app *app, const http_request *req, http_reply *rep) {
    route_infer(app, req, rep, API_COMPLETIONS);
}

void route_chat_completions(server_app *app, const http_request *req, http_reply *rep) {
    route_infer(app, req, rep, API_CHAT);
}

void route_llama_completion(server_app *app, const http_request *req, http_reply *rep) {
    route_infer(app, req, rep, API_LLAMA);
}
