/*
 * oai_format.c — JSON builders for the OpenAI response shapes (see oai_format.h).
 */
#include "oai_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void oai_make_id(oai_ctx *c, unsigned long long seq) {
    snprintf(c->id, sizeof c->id, "%s-%llx%08llx", c->chat ? "chatcmpl" : "cmpl", (unsigned long long)c->created,
             seq);
}

json_t *oai_envelope(const oai_ctx *c, bool chunk) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(c->id));
    json_object_set_new(o, "object", json_string(c->chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                         : "text_completion"));
    json_object_set_new(o, "created", json_integer(c->created));
    json_object_set_new(o, "model", json_text(c->model_name, strlen(c->model_name)));
    json_object_set_new(o, "system_fingerprint", json_string("mnemo"));
    json_object_set_new(o, "choices", json_array());
    return o;
}

json_t *oai_logprobs_new(const oai_ctx *c) {
    json_t *lp = json_object();
    if (c->chat) {
        json_object_set_new(lp, "content", json_array());
    } else {
        json_object_set_new(lp, "tokens", json_array());
        json_object_set_new(lp, "token_logprobs", json_array());
        json_object_set_new(lp, "top_logprobs", json_array());
        json_object_set_new(lp, "text_offset", json_array());
    }
    return lp;
}

static json_t *bytes_array(const char *s, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

/* {token, logprob, bytes} for the chat format. */
static json_t *chat_token(const oai_ctx *c, mnemo_token t, float logprob) {
    char txt[256];
    size_t n = token_text(c->model, t, txt, sizeof txt);
    json_t *o = json_object();
    json_object_set_new(o, "token", json_text(txt, n));
    json_object_set_new(o, "logprob", json_real(logprob));
    json_object_set_new(o, "bytes", bytes_array(txt, n));
    return o;
}

void oai_logprobs_add(const oai_ctx *c, json_t *lp, const ireq_event *ev, size_t *offset) {
    if (!lp || ev->token < 0) return;
    if (c->chat) {
        json_t *o = chat_token(c, ev->token, ev->logprob);
        json_t *top = json_array();
        for (int k = 0; k < ev->n_top; k++) json_array_append_new(top, chat_token(c, ev->top[k].id, ev->top[k].logprob));
        json_object_set_new(o, "top_logprobs", top);
        json_array_append_new(json_object_get(lp, "content"), o);
        return;
    }
    char txt[256];
    size_t n = token_text(c->model, ev->token, txt, sizeof txt);
    json_array_append_new(json_object_get(lp, "tokens"), json_text(txt, n));
    json_array_append_new(json_object_get(lp, "token_logprobs"), json_real(ev->logprob));
    json_t *top = json_object();
    for (int k = 0; k < ev->n_top; k++) {
        char alt[256];
        size_t an = token_text(c->model, ev->top[k].id, alt, sizeof alt);
        json_t *key = json_text(alt, an); /* object keys must be valid UTF-8 too */
        if (json_is_string(key) && !json_object_get(top, json_string_value(key)))
            json_object_set_new(top, json_string_value(key), json_real(ev->top[k].logprob));
        json_decref(key);
    }
    json_array_append_new(json_object_get(lp, "top_logprobs"), top);
    json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)*offset));
    *offset += n;
}

const char *oai_finish_reason(const ireq_choice *ch) {
    if (ch->end == IREQ_END_OK && (ch->finish == MNEMO_FINISH_STOP || ch->finish == MNEMO_FINISH_EOS)) return "stop";
    return "length";
}

const char *oai_stop_reason(const ireq_choice *ch) {
    if (ch->end == IREQ_END_TIMEOUT) return "time_limit";
    if (ch->end == IREQ_END_SHUTDOWN) return "server_shutdown";
    return NULL;
}

static void set_finish(json_t *choice, const ireq_choice *ch) {
    json_object_set_new(choice, "finish_reason", json_string(oai_finish_reason(ch)));
    const char *sr = oai_stop_reason(ch);
    if (sr) json_object_set_new(choice, "stop_reason", json_string(sr));
}

json_t *oai_choice(const oai_ctx *c, int index, const char *text, size_t len, json_t *lp, const ireq_choice *ch) {
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(index));
    if (c->chat) {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("assistant"));
        json_object_set_new(m, "content", json_text(text, len));
        json_object_set_new(o, "message", m);
    } else {
        json_object_set_new(o, "text", json_text(text, len));
    }
    json_object_set_new(o, "logprobs", lp ? lp : json_null());
    set_finish(o, ch);
    return o;
}

json_t *oai_chunk(const oai_ctx *c, int index, const char *text, size_t len, json_t *lp, const ireq_choice *finished,
                  bool role_opener, bool with_usage_null) {
    json_t *env = oai_envelope(c, true);
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(index));
    if (c->chat) {
        json_t *d = json_object();
        if (role_opener) {
            json_object_set_new(d, "role", json_string("assistant"));
            json_object_set_new(d, "content", json_string(""));
        } else if (len || !finished) {
            json_object_set_new(d, "content", json_text(text, len));
        }
        json_object_set_new(o, "delta", d);
    } else {
        json_object_set_new(o, "text", json_text(text, len));
    }
    json_object_set_new(o, "logprobs", lp ? lp : json_null());
    if (finished) set_finish(o, finished);
    else json_object_set_new(o, "finish_reason", json_null());
    json_array_append_new(json_object_get(env, "choices"), o);
    if (with_usage_null) json_object_set_new(env, "usage", json_null());
    return env;
}

json_t *oai_usage(const ireq *j) {
    long long prompt = 0, gen = 0, cached = 0;
    for (int i = 0; i < j->n_choices; i++) {
        const ireq_choice *ch = &j->choices[i];
        bool first_of_prompt = true; /* each prompt counts once, however many choices continue it */
        for (int k = 0; k < i; k++)
            if (j->choices[k].prompt_index == ch->prompt_index) first_of_prompt = false;
        if (first_of_prompt) prompt += ch->n_prompt, cached += ch->n_cached;
        gen += ch->n_generated;
    }
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(prompt));
    json_object_set_new(u, "completion_tokens", json_integer(gen));
    json_object_set_new(u, "total_tokens", json_integer(prompt + gen));
    json_t *d = json_object();
    json_object_set_new(d, "cached_tokens", json_integer(cached));
    json_object_set_new(u, "prompt_tokens_details", d);
    return u;
}

json_t *oai_timings(const ireq *j) {
    long long pn = 0, gn = 0;
    double pms = 0, gms = 0, qms = 0;
    for (int i = 0; i < j->n_choices; i++) {
        const ireq_choice *ch = &j->choices[i];
        pn += ch->n_prompt;
        gn += ch->n_generated;
        pms += ch->prefill_ms;
        gms += ch->decode_ms;
        if (ch->queue_ms > qms) qms = ch->queue_ms;
    }
    json_t *t = json_object();
    json_object_set_new(t, "queue_ms", json_real(qms));
    json_object_set_new(t, "prompt_n", json_integer(pn));
    json_object_set_new(t, "prompt_ms", json_real(pms));
    json_object_set_new(t, "prompt_per_second", json_real(pms > 0 ? pn * 1e3 / pms : 0));
    json_object_set_new(t, "predicted_n", json_integer(gn));
    json_object_set_new(t, "predicted_ms", json_real(gms));
    json_object_set_new(t, "predicted_per_token_ms", json_real(gn > 0 ? gms / (double)gn : 0));
    json_object_set_new(t, "predicted_per_second", json_real(gms > 0 ? gn * 1e3 / gms : 0));
    json_object_set_new(t, "cache_n", json_integer(0));
    return t;
}

void sse_event(strbuf *b, json_t *obj) {
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!s) {
        b->failed = true;
        return;
    }
    sb_puts(b, "data: ");
    sb_puts(b, s);
    sb_puts(b, "\n\n");
    free(s);
}

void sse_done(strbuf *b) { sb_puts(b, "data: [DONE]\n\n"); }
