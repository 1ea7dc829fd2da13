/*
 * request_parse.c — body parsing and validation for the inference, embeddings, tokenize and detokenize endpoints
 * (see request_parse.h). Pattern: one small getter per JSON kind that reports "wrong type" and "out of range"
 * with the parameter's name; null counts as absent, as OpenAI clients send nulls for unset options.
 */
#include "request_parse.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(e, param, ...) api_error_set(e, 400, "invalid_value", param, __VA_ARGS__)
#define BAD_TYPE(e, param, ...) api_error_set(e, 400, "invalid_type", param, __VA_ARGS__)
#define UNSUPPORTED(e, param, ...) api_error_set(e, 400, "unsupported_parameter", param, __VA_ARGS__)

static json_t *load_object(const char *body, size_t len, api_error *e) {
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        api_error_set(e, 400, "invalid_json", NULL, "invalid JSON in request body at line %d, column %d: %s", je.line,
                      je.column, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        api_error_set(e, 400, "invalid_json", NULL, "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

static bool absent(const json_t *v) { return !v || json_is_null(v); }

static char *dup_mem(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static int oom(api_error *e) { return api_error_set(e, 500, "out_of_memory", NULL, "out of memory"); }

static int get_bool(json_t *o, const char *key, bool *out, api_error *e) {
    json_t *v = json_object_get(o, key);
    if (absent(v)) return 0;
    if (!json_is_boolean(v)) return BAD_TYPE(e, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

/* Integers; an integral real (5.0) is accepted too. *given tells whether the field was there. */
static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, bool *given,
                   api_error *e) {
    json_t *v = json_object_get(o, key);
    if (given) *given = false;
    if (absent(v)) return 0;
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9.0e15) {
        x = (long long)json_real_value(v);
    } else {
        return BAD_TYPE(e, key, "'%s' must be an integer", key);
    }
    if (x < lo || x > hi) return BAD(e, key, "'%s' must be between %lld and %lld (got %lld)", key, lo, hi, x);
    *out = x;
    if (given) *given = true;
    return 0;
}

/* Numbers in [lo, hi], or (lo, hi] when lo_open. */
static int get_num(json_t *o, const char *key, double lo, double hi, bool lo_open, float *out, api_error *e) {
    json_t *v = json_object_get(o, key);
    if (absent(v)) return 0;
    if (!json_is_number(v)) return BAD_TYPE(e, key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(lo_open ? x > lo : x >= lo) || !(x <= hi))
        return BAD(e, key, "'%s' must be %s %g and <= %g (got %g)", key, lo_open ? ">" : ">=", lo, hi, x);
    *out = (float)x;
    return 0;
}

static int check_token(json_t *v, const parse_limits *lim, const char *param, mnemo_token *out, api_error *e) {
    if (!json_is_integer(v)) return BAD_TYPE(e, param, "'%s' token ids must be integers", param);
    json_int_t t = json_integer_value(v);
    json_int_t hi = lim && lim->n_vocab > 0 ? lim->n_vocab : INT32_MAX;
    if (t < 0 || t >= hi)
        return BAD(e, param, "'%s' contains token id %lld outside the vocabulary [0, %lld)", param, (long long)t,
                   (long long)hi);
    *out = (mnemo_token)t;
    return 0;
}

static int token_array(json_t *arr, const parse_limits *lim, const char *param, mnemo_token **out, int32_t *n,
                       api_error *e) {
    size_t cnt = json_array_size(arr);
    if (cnt == 0) return BAD(e, param, "'%s' must not be an empty token array", param);
    if (cnt > INT32_MAX) return BAD(e, param, "'%s' has too many tokens", param);
    *out = malloc(cnt * sizeof **out);
    if (!*out) return oom(e);
    *n = (int32_t)cnt;
    for (size_t i = 0; i < cnt; i++)
        if (check_token(json_array_get(arr, i), lim, param, &(*out)[i], e)) return -1;
    return 0;
}

/* string | array of strings | array of token ids | array of token-id arrays -> *out (n_max entries at most). */
static int parse_inputs(json_t *p, const char *param, int n_max, const parse_limits *lim, prompt_in **out, int *n,
                        api_error *e) {
    if (absent(p)) return BAD(e, param, "'%s' is required", param);
    char shape[160];
    snprintf(shape, sizeof shape, "'%s' must be a string, an array of strings, an array of token ids, or an array "
             "of token-id arrays", param);
    if (json_is_string(p)) {
        *out = calloc(1, sizeof **out);
        if (!*out) return oom(e);
        *n = 1;
        (*out)[0].text = dup_mem(json_string_value(p), json_string_length(p));
        (*out)[0].text_len = json_string_length(p);
        return (*out)[0].text ? 0 : oom(e);
    }
    if (!json_is_array(p)) return BAD_TYPE(e, param, "%s", shape);
    size_t cnt = json_array_size(p);
    if (cnt == 0) return BAD(e, param, "'%s' must not be an empty array", param);
    json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) { /* one input of token ids */
        *out = calloc(1, sizeof **out);
        if (!*out) return oom(e);
        *n = 1;
        (*out)[0].is_tokens = true;
        return token_array(p, lim, param, &(*out)[0].tokens, &(*out)[0].n_tokens, e);
    }
    if (cnt > (size_t)n_max)
        return BAD(e, param, "'%s' has %zu entries; at most %d are allowed per request", param, cnt, n_max);
    *out = calloc(cnt, sizeof **out);
    if (!*out) return oom(e);
    *n = (int)cnt;
    for (size_t i = 0; i < cnt; i++) {
        json_t *v = json_array_get(p, i);
        prompt_in *pi = &(*out)[i];
        if (json_is_string(first) && json_is_string(v)) {
            pi->text = dup_mem(json_string_value(v), json_string_length(v));
            pi->text_len = json_string_length(v);
            if (!pi->text) return oom(e);
        } else if (json_is_array(first) && json_is_array(v)) {
            pi->is_tokens = true;
            if (token_array(v, lim, param, &pi->tokens, &pi->n_tokens, e)) return -1;
        } else {
            return BAD_TYPE(e, param, "%s (element %zu does not match)", shape, i);
        }
    }
    return 0;
}

static int parse_prompt(json_t *root, const parse_limits *lim, infer_request *r, api_error *e) {
    return parse_inputs(json_object_get(root, "prompt"), "prompt", REQ_MAX_CHOICES, lim, &r->prompts, &r->n_prompts,
                        e);
}

static int parse_role(json_t *v, const char *param, mnemo_chat_role *out, api_error *e) {
    if (!json_is_string(v)) return BAD_TYPE(e, param, "'%s' must be a string", param);
    const char *s = json_string_value(v);
    if (!strcmp(s, "system") || !strcmp(s, "developer")) *out = MNEMO_ROLE_SYSTEM;
    else if (!strcmp(s, "user")) *out = MNEMO_ROLE_USER;
    else if (!strcmp(s, "assistant")) *out = MNEMO_ROLE_ASSISTANT;
    else if (!strcmp(s, "tool") || !strcmp(s, "function"))
        return UNSUPPORTED(e, param, "'%s': tool and function messages are not supported", param);
    else
        return BAD(e, param, "'%s' must be one of system, developer, user, assistant", param);
    return 0;
}

static int parse_content(json_t *v, chat_msg *m, const char *param, api_error *e) {
    if (json_is_string(v)) {
        m->len = json_string_length(v);
        m->content = dup_mem(json_string_value(v), m->len);
        return m->content ? 0 : oom(e);
    }
    if (absent(v)) {
        if (m->role != MNEMO_ROLE_ASSISTANT) return BAD(e, param, "'%s' is required", param);
        m->content = dup_mem("", 0); /* an assistant turn without text */
        return m->content ? 0 : oom(e);
    }
    if (!json_is_array(v))
        return BAD_TYPE(e, param, "'%s' must be a string or an array of content parts", param);
    size_t total = 0, cnt = json_array_size(v);
    for (size_t i = 0; i < cnt; i++) {
        json_t *part = json_array_get(v, i), *type = json_object_get(part, "type"),
               *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type))
            return BAD_TYPE(e, param, "'%s' parts must be objects with a 'type'", param);
        if (strcmp(json_string_value(type), "text") != 0)
            return UNSUPPORTED(e, param, "'%s': content parts of type '%s' are not supported (text only)", param,
                               json_string_value(type));
        if (!json_is_string(text)) return BAD_TYPE(e, param, "'%s' text parts need a string 'text'", param);
        total += json_string_length(text) + 1;
    }
    m->content = malloc(total + 1);
    if (!m->content) return oom(e);
    m->len = 0;
    for (size_t i = 0; i < cnt; i++) {
        json_t *text = json_object_get(json_array_get(v, i), "text");
        if (i) m->content[m->len++] = '\n';
        memcpy(m->content + m->len, json_string_value(text), json_string_length(text));
        m->len += json_string_length(text);
    }
    m->content[m->len] = '\0';
    return 0;
}

static int parse_messages(json_t *root, infer_request *r, api_error *e) {
    json_t *msgs = json_object_get(root, "messages");
    if (absent(msgs)) return BAD(e, "messages", "'messages' is required");
    if (!json_is_array(msgs)) return BAD_TYPE(e, "messages", "'messages' must be an array");
    size_t cnt = json_array_size(msgs);
    if (cnt == 0) return BAD(e, "messages", "'messages' must not be empty");
    if (cnt > REQ_MAX_MESSAGES)
        return BAD(e, "messages", "'messages' has %zu entries; at most %d are allowed", cnt, REQ_MAX_MESSAGES);
    r->messages = calloc(cnt, sizeof *r->messages);
    if (!r->messages) return oom(e);
    for (size_t i = 0; i < cnt; i++) {
        json_t *m = json_array_get(msgs, i);
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) return BAD_TYPE(e, param, "'%s' must be an object", param);
        r->n_messages = (int)i + 1; /* so a failure frees what was built */
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (parse_role(json_object_get(m, "role"), param, &r->messages[i].role, e)) return -1;
        json_t *calls = json_object_get(m, "tool_calls");
        if (!absent(calls) && !(json_is_array(calls) && json_array_size(calls) == 0)) {
            snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
            return UNSUPPORTED(e, param, "'%s': tool calls are not supported", param);
        }
        snprintf(param, sizeof param, "messages[%zu].content", i);
        if (parse_content(json_object_get(m, "content"), &r->messages[i], param, e)) return -1;
    }
    return 0;
}

static int parse_stop(json_t *root, infer_request *r, api_error *e) {
    json_t *s = json_object_get(root, "stop");
    if (absent(s)) return 0;
    size_t cnt = json_is_string(s) ? 1 : json_is_array(s) ? json_array_size(s) : 0;
    if (!json_is_string(s) && !json_is_array(s))
        return BAD_TYPE(e, "stop", "'stop' must be a string or an array of strings");
    if (cnt > REQ_MAX_STOP) return BAD(e, "stop", "'stop' has %zu strings; at most %d are allowed", cnt, REQ_MAX_STOP);
    r->stop = calloc(cnt ? cnt : 1, sizeof *r->stop);
    if (!r->stop) return oom(e);
    for (size_t i = 0; i < cnt; i++) {
        json_t *v = json_is_string(s) ? s : json_array_get(s, i);
        if (!json_is_string(v)) return BAD_TYPE(e, "stop", "'stop' must contain only strings");
        size_t n = json_string_length(v);
        if (n == 0 || n > REQ_MAX_STOP_LEN)
            return BAD(e, "stop", "stop strings must be 1 to %d bytes long (got %zu)", REQ_MAX_STOP_LEN, n);
        r->stop[i] = dup_mem(json_string_value(v), n);
        if (!r->stop[i]) return oom(e);
        r->n_stop = (int)i + 1;
    }
    return 0;
}

/* Options that would change the result and are not implemented: refused, never silently ignored. */
static int refuse_unsupported(json_t *root, bool chat, api_error *e) {
    json_t *v;
    if (!absent(v = json_object_get(root, "echo")) && !json_is_false(v))
        return UNSUPPORTED(e, "echo", "'echo' is not supported");
    if (!absent(v = json_object_get(root, "suffix")) && !(json_is_string(v) && json_string_length(v) == 0))
        return UNSUPPORTED(e, "suffix", "'suffix' (insertion) is not supported");
    if (!absent(v = json_object_get(root, "best_of")) &&
        !(json_is_integer(v) && json_integer_value(v) == 1))
        return UNSUPPORTED(e, "best_of", "'best_of' other than 1 is not supported");
    if (!absent(v = json_object_get(root, "logit_bias")) && !(json_is_object(v) && json_object_size(v) == 0))
        return UNSUPPORTED(e, "logit_bias", "'logit_bias' is not supported");
    const char *lists[] = {"tools", "functions"};
    for (int i = 0; i < 2; i++)
        if (!absent(v = json_object_get(root, lists[i])) && !(json_is_array(v) && json_array_size(v) == 0))
            return UNSUPPORTED(e, lists[i], "'%s' (tool calling) is not supported", lists[i]);
    if (!absent(v = json_object_get(root, "response_format"))) {
        json_t *t = json_object_get(v, "type");
        if (!json_is_object(v) || !json_is_string(t))
            return BAD_TYPE(e, "response_format", "'response_format' must be an object with a 'type'");
        if (strcmp(json_string_value(t), "text") != 0)
            return UNSUPPORTED(e, "response_format", "'response_format' type '%s' is not supported (text only)",
                               json_string_value(t));
    }
    (void)chat;
    return 0;
}

static int parse_logprobs(json_t *root, bool chat, infer_request *r, api_error *e) {
    long long x;
    bool given;
    r->logprobs = -1;
    if (!chat) { /* completions: logprobs is the number of alternatives */
        if (get_int(root, "logprobs", 0, MNEMO_MAX_LOGPROBS, &x, &given, e)) return -1;
        if (given) r->logprobs = (int)x;
        return 0;
    }
    bool want = false;
    if (get_bool(root, "logprobs", &want, e)) return -1;
    if (get_int(root, "top_logprobs", 0, MNEMO_MAX_LOGPROBS, &x, &given, e)) return -1;
    if (given && !want) return BAD(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (want) r->logprobs = given ? (int)x : 0;
    return 0;
}

int parse_infer_request(const char *body, size_t len, bool chat, const parse_limits *lim, infer_request *r,
                        api_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    r->chat = chat;
    r->n = 1;
    r->max_tokens = -1;
    r->to_context_end = chat;
    r->logprobs = -1;
    r->sampling = mnemo_sampler_default_params();
    json_t *root = load_object(body, len, e);
    if (!root) return -1;
    int rc = -1;
    long long x;
    bool given;
    json_t *v = json_object_get(root, "model");
    if (!absent(v)) {
        if (!json_is_string(v)) {
            BAD_TYPE(e, "model", "'model' must be a string");
            goto out;
        }
        if (!(r->model = dup_mem(json_string_value(v), json_string_length(v)))) {
            oom(e);
            goto out;
        }
    }
    if (chat ? parse_messages(root, r, e) : parse_prompt(root, lim, r, e)) goto out;
    if (get_int(root, "n", 1, REQ_MAX_CHOICES, &x, &given, e)) goto out;
    if (given) r->n = (int)x;
    if ((long long)r->n * (chat ? 1 : r->n_prompts) > REQ_MAX_CHOICES) {
        BAD(e, "n", "%d prompts x n=%d choices exceed the limit of %d per request", chat ? 1 : r->n_prompts, r->n,
            REQ_MAX_CHOICES);
        goto out;
    }
    /* max_completion_tokens is the newer name of max_tokens in the chat API; it wins when both are given. */
    r->max_tokens_param = "max_tokens";
    if (get_int(root, "max_tokens", 0, 1 << 24, &x, &given, e)) goto out;
    if (given) r->max_tokens = (int32_t)x;
    if (get_int(root, "max_completion_tokens", 0, 1 << 24, &x, &given, e)) goto out;
    if (given) {
        r->max_tokens = (int32_t)x;
        r->max_tokens_param = "max_completion_tokens";
    }
    mnemo_sampler_params *s = &r->sampling;
    if (get_num(root, "temperature", 0, 2, false, &s->temperature, e) ||
        get_num(root, "top_p", 0, 1, true, &s->top_p, e) || get_num(root, "min_p", 0, 1, false, &s->min_p, e) ||
        get_num(root, "presence_penalty", -2, 2, false, &s->presence_penalty, e) ||
        get_num(root, "frequency_penalty", -2, 2, false, &s->frequency_penalty, e) ||
        get_num(root, "repetition_penalty", 0, 10, true, &s->repetition_penalty, e) ||
        get_num(root, "repeat_penalty", 0, 10, true, &s->repetition_penalty, e))
        goto out;
    if (get_int(root, "top_k", 0, 1 << 24, &x, &given, e)) goto out;
    if (given) s->top_k = (int32_t)x;
    if (get_int(root, "penalty_last_n", -1, 1 << 24, &x, &given, e)) goto out;
    if (given) s->penalty_last_n = (int32_t)x;
    if (get_int(root, "repeat_last_n", -1, 1 << 24, &x, &given, e)) goto out;
    if (given) s->penalty_last_n = (int32_t)x;
    if (get_int(root, "seed", INT64_MIN, INT64_MAX, &x, &r->seed_set, e)) goto out;
    if (r->seed_set) s->seed = (uint64_t)x;
    if (parse_stop(root, r, e) || parse_logprobs(root, chat, r, e)) goto out;
    if (get_bool(root, "stream", &r->stream, e) || get_bool(root, "ignore_eos", &r->ignore_eos, e)) goto out;
    v = json_object_get(root, "stream_options");
    if (!absent(v)) {
        if (!json_is_object(v)) {
            BAD_TYPE(e, "stream_options", "'stream_options' must be an object");
            goto out;
        }
        if (!r->stream) {
            BAD(e, "stream_options", "'stream_options' is only allowed when 'stream' is true");
            goto out;
        }
        if (get_bool(v, "include_usage", &r->include_usage, e)) {
            snprintf(e->param, sizeof e->param, "stream_options.include_usage");
            goto out;
        }
        if (get_bool(v, "include_progress", &r->include_progress, e)) {
            snprintf(e->param, sizeof e->param, "stream_options.include_progress");
            goto out;
        }
    }
    v = json_object_get(root, "session");
    if (!absent(v)) {
        if (!json_is_string(v)) {
            BAD_TYPE(e, "session", "'session' must be a string (a session id from POST /v1/sessions)");
            goto out;
        }
        if (r->n * (chat ? 1 : r->n_prompts) != 1) {
            BAD(e, "session", "a request on a session has one prompt and n = 1 (a session holds one sequence)");
            goto out;
        }
        if (!(r->session = dup_mem(json_string_value(v), json_string_length(v)))) {
            oom(e);
            goto out;
        }
    }
    v = json_object_get(root, "user");
    if (!absent(v) && !json_is_string(v)) {
        BAD_TYPE(e, "user", "'user' must be a string");
        goto out;
    }
    if (refuse_unsupported(root, chat, e)) goto out;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

void infer_request_free(infer_request *r) {
    if (!r) return;
    free(r->model);
    free(r->session);
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].tokens);
    }
    free(r->prompts);
    for (int i = 0; i < r->n_messages; i++) free(r->messages[i].content);
    free(r->messages);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    memset(r, 0, sizeof *r);
}

int parse_tokenize_request(const char *body, size_t len, tokenize_request *r, api_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    json_t *root = load_object(body, len, e);
    if (!root) return -1;
    int rc = -1;
    json_t *c = json_object_get(root, "content");
    if (absent(c)) BAD(e, "content", "'content' is required");
    else if (!json_is_string(c)) BAD_TYPE(e, "content", "'content' must be a string");
    else if (!get_bool(root, "add_special", &r->add_special, e) && !get_bool(root, "with_pieces", &r->with_pieces, e)) {
        r->len = json_string_length(c);
        r->content = dup_mem(json_string_value(c), r->len);
        rc = r->content ? 0 : oom(e);
    }
    json_decref(root);
    return rc;
}

void tokenize_request_free(tokenize_request *r) {
    if (r) free(r->content);
}

int parse_detokenize_request(const char *body, size_t len, const parse_limits *lim, detokenize_request *r,
                             api_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    json_t *root = load_object(body, len, e);
    if (!root) return -1;
    int rc = -1;
    json_t *t = json_object_get(root, "tokens");
    if (absent(t)) BAD(e, "tokens", "'tokens' is required");
    else if (!json_is_array(t)) BAD_TYPE(e, "tokens", "'tokens' must be an array of token ids");
    else if (json_array_size(t) == 0) rc = 0; /* nothing to decode: "" */
    else rc = token_array(t, lim, "tokens", &r->tokens, &r->n, e);
    json_decref(root);
    return rc;
}

void detokenize_request_free(detokenize_request *r) {
    if (r) free(r->tokens);
}

int parse_embeddings_request(const char *body, size_t len, const parse_limits *lim, embeddings_request *r,
                             api_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    r->dimensions = -1;
    json_t *root = load_object(body, len, e);
    if (!root) return -1;
    int rc = -1;
    long long x;
    bool given;
    json_t *v = json_object_get(root, "model");
    if (!absent(v) && !json_is_string(v)) {
        BAD_TYPE(e, "model", "'model' must be a string");
        goto out;
    }
    if (!absent(v) && !(r->model = dup_mem(json_string_value(v), json_string_length(v)))) {
        oom(e);
        goto out;
    }
    if (parse_inputs(json_object_get(root, "input"), "input", REQ_MAX_EMBED_INPUTS, lim, &r->inputs, &r->n_inputs, e))
        goto out;
    for (int i = 0; i < r->n_inputs; i++)
        if (!r->inputs[i].is_tokens && r->inputs[i].text_len == 0) {
            BAD(e, "input", "'input' must not contain empty strings (entry %d is empty)", i);
            goto out;
        }
    v = json_object_get(root, "encoding_format");
    if (!absent(v)) {
        if (!json_is_string(v)) {
            BAD_TYPE(e, "encoding_format", "'encoding_format' must be a string");
            goto out;
        }
        if (!strcmp(json_string_value(v), "base64")) r->base64 = true;
        else if (strcmp(json_string_value(v), "float") != 0) {
            BAD(e, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
            goto out;
        }
    }
    if (get_int(root, "dimensions", 1, 1 << 20, &x, &given, e)) goto out;
    if (given) r->dimensions = (int32_t)x;
    v = json_object_get(root, "user");
    if (!absent(v) && !json_is_string(v)) {
        BAD_TYPE(e, "user", "'user' must be a string");
        goto out;
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

void embeddings_request_free(embeddings_request *r) {
    if (!r) return;
    free(r->model);
    for (int i = 0; i < r->n_inputs; i++) {
        free(r->inputs[i].text);
        free(r->inputs[i].tokens);
    }
    free(r->inputs);
    memset(r, 0, sizeof *r);
}
