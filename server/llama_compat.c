/*
 * llama_compat.c — llama.cpp /completion requests and responses (see llama_compat.h).
 */
#include "llama_compat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oai_format.h"
#include "text_util.h"

/* Whether v is the value at which a llama.cpp sampler option is off. */
static bool is_off(const json_t *v, double off) {
    return !v || json_is_null(v) || (json_is_number(v) && json_number_value(v) == off) ||
           (json_is_array(v) && json_array_size(v) == 0) || (json_is_object(v) && json_object_size(v) == 0) ||
           json_is_false(v) || (json_is_string(v) && json_string_length(v) == 0);
}

/* Options that would change the result, each with the value that means "off" (json_schema {} means "any
 * JSON", a constraint: only null is off there). */
static const struct {
    const char *name;
    double off;
    bool null_only;
} UNSUPPORTED[] = {
    {"grammar", 0, false},        {"json_schema", 0, true},      {"n_probs", 0, false},
    {"mirostat", 0, false},       {"logit_bias", 0, false},      {"dry_multiplier", 0, false},
    {"xtc_probability", 0, false}, {"typical_p", 1, false},      {"dynatemp_range", 0, false},
    {"image_data", 0, false},     {"lora", 0, false},            {"logprobs", 0, false},
    {"n_indent", 0, false},       {"post_sampling_probs", 0, false},
};

static int translate(json_t *o, bool *until_context_end, api_error *e) {
    for (size_t i = 0; i < sizeof UNSUPPORTED / sizeof *UNSUPPORTED; i++) {
        json_t *v = json_object_get(o, UNSUPPORTED[i].name);
        bool off = UNSUPPORTED[i].null_only ? !v || json_is_null(v) : is_off(v, UNSUPPORTED[i].off);
        if (!off)
            return api_error_set(e, 400, "unsupported_parameter", UNSUPPORTED[i].name,
                                 "'%s' is not supported on /completion (mnemo implements the OpenAI sampling options)",
                                 UNSUPPORTED[i].name);
    }
    json_t *n = json_object_get(o, "n");
    if (n && !json_is_null(n) && !(json_is_integer(n) && json_integer_value(n) == 1))
        return api_error_set(e, 400, "unsupported_parameter", "n",
                             "/completion returns one completion: use /v1/completions for n");
    json_t *p = json_object_get(o, "prompt");
    if (json_is_array(p) && (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))) &&
        json_array_size(p) > 1)
        return api_error_set(e, 400, "invalid_value", "prompt",
                             "/completion takes one prompt (a string or token ids): use /v1/completions for several");
    json_t *np = json_object_get(o, "n_predict");
    *until_context_end = true;
    if (np && !json_is_null(np)) {
        if (!json_is_integer(np) || json_integer_value(np) < -1)
            return api_error_set(e, 400, "invalid_value", "n_predict",
                                 "'n_predict' must be an integer >= -1 (-1: no limit)");
        if (json_integer_value(np) >= 0) {
            json_object_set(o, "max_tokens", np);
            *until_context_end = false;
        }
    }
    json_t *seed = json_object_get(o, "seed");
    if (json_is_integer(seed) && json_integer_value(seed) == -1) json_object_del(o, "seed"); /* -1: random */
    static const char *const DROP[] = {"n_predict", "n", "cache_prompt", "id_slot", "n_keep", "samplers",
                                       "return_tokens", "timings_per_token", "response_fields", "t_max_predict_ms",
                                       "min_keep", "n_cmpl"};
    for (size_t i = 0; i < sizeof DROP / sizeof *DROP; i++) json_object_del(o, DROP[i]);
    return 0;
}

char *llama_completion_to_oai(const char *body, size_t len, bool *until_context_end, api_error *e) {
    memset(e, 0, sizeof *e);
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    *until_context_end = true;
    if (!json_is_object(o)) { /* NULL with no error: the OpenAI parser words JSON errors on the body as it is */
        json_decref(o);
        return NULL;
    }
    char *out = translate(o, until_context_end, e) == 0 ? json_dumps(o, JSON_COMPACT) : NULL;
    if (!out && !e->status) api_error_set(e, 400, "out_of_memory", NULL, "out of memory");
    json_decref(o);
    return out;
}

static const char *stop_type(const ireq_choice *ch) {
    if (ch->end == IREQ_END_OK && ch->finish == MNEMO_FINISH_EOS) return "eos";
    if (ch->end == IREQ_END_OK && ch->finish == MNEMO_FINISH_STOP) return "word";
    return "limit";
}

json_t *llama_result(const char *model, const char *text, size_t len, const ireq *j) {
    const ireq_choice *ch = &j->choices[0];
    json_t *o = json_object();
    json_object_set_new(o, "content", json_text(text, len));
    json_object_set_new(o, "tokens", json_array());
    json_object_set_new(o, "id_slot", json_integer(0));
    json_object_set_new(o, "stop", json_true());
    json_object_set_new(o, "model", json_text(model, strlen(model)));
    json_object_set_new(o, "tokens_predicted", json_integer(ch->n_generated));
    json_object_set_new(o, "tokens_evaluated", json_integer(ch->n_prompt));
    json_object_set_new(o, "tokens_cached", json_integer(0));
    json_object_set_new(o, "truncated", json_boolean(ch->end == IREQ_END_OK && ch->finish == MNEMO_FINISH_CONTEXT));
    json_object_set_new(o, "stop_type", json_string(stop_type(ch)));
    const char *why = oai_stop_reason(ch);
    if (why) json_object_set_new(o, "stop_reason", json_string(why)); /* time_limit / server_shutdown */
    json_object_set_new(o, "timings", oai_timings(j));
    return o;
}

json_t *llama_chunk(const char *text, size_t len, mnemo_token token) {
    json_t *o = json_object();
    json_object_set_new(o, "content", json_text(text, len));
    json_t *t = json_array();
    if (token >= 0) json_array_append_new(t, json_integer(token));
    json_object_set_new(o, "tokens", t);
    json_object_set_new(o, "id_slot", json_integer(0));
    json_object_set_new(o, "stop", json_false());
    return o;
}
