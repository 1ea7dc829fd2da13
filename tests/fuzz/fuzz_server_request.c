/*
 * fuzz_server_request.c — libFuzzer target for mnemo-server's request parser (server/request_parse.c): arbitrary
 * bytes as the body of /v1/completions, /v1/chat/completions, /tokenize and /detokenize. Every input must give
 * either a parsed request or a 4xx/5xx error with a message — never a crash, leak or hang — and a success must
 * hold only values inside the documented ranges (checked here, so a validation gap is a finding too).
 * The first byte picks the endpoint, so one corpus covers all four. Every body is also tried as a /v1/embeddings
 * body and as a llama.cpp /completion body (translated, then parsed as /v1/completions).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "llama_compat.h"
#include "request_parse.h"

static void check(int ok) {
    if (!ok) abort();
}

static void check_infer(const infer_request *r, const parse_limits *lim) {
    check(r->n >= 1 && r->n <= REQ_MAX_CHOICES);
    check(r->n * (r->chat ? 1 : r->n_prompts) <= REQ_MAX_CHOICES);
    check(r->chat ? r->n_messages >= 1 : r->n_prompts >= 1);
    for (int i = 0; i < r->n_prompts; i++) {
        const prompt_in *p = &r->prompts[i];
        if (!p->is_tokens) {
            check(p->text != NULL && strlen(p->text) <= p->text_len);
            continue;
        }
        check(p->n_tokens >= 1);
        for (int32_t k = 0; k < p->n_tokens; k++) check(p->tokens[k] >= 0 && p->tokens[k] < lim->n_vocab);
    }
    for (int i = 0; i < r->n_messages; i++) check(r->messages[i].content && r->messages[i].role <= MNEMO_ROLE_ASSISTANT);
    check(r->n_stop >= 0 && r->n_stop <= REQ_MAX_STOP);
    for (int i = 0; i < r->n_stop; i++) check(r->stop[i] && strlen(r->stop[i]) >= 1);
    check(r->logprobs >= -1 && r->logprobs <= MNEMO_MAX_LOGPROBS);
    check(r->max_tokens >= -1);
    const mnemo_sampler_params *s = &r->sampling;
    check(s->temperature >= 0 && s->temperature <= 2);
    check(s->top_p > 0 && s->top_p <= 1);
    check(s->min_p >= 0 && s->min_p <= 1);
    check(s->top_k >= 0 && s->penalty_last_n >= -1);
    check(s->repetition_penalty > 0 && s->presence_penalty >= -2 && s->presence_penalty <= 2);
    check(s->frequency_penalty >= -2 && s->frequency_penalty <= 2);
    check(!r->include_usage || r->stream);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    parse_limits lim = {.n_vocab = 512};
    api_error e;
    switch (data[0] % 4) {
    case 0:
    case 1: {
        infer_request r;
        if (parse_infer_request(body, len, data[0] % 4 == 1, &lim, &r, &e) == 0) check_infer(&r, &lim);
        else check(e.status >= 400 && e.message[0]);
        infer_request_free(&r);
        break;
    }
    case 2: {
        tokenize_request r;
        if (parse_tokenize_request(body, len, &r, &e) == 0) check(r.content != NULL);
        else check(e.status >= 400 && e.message[0]);
        tokenize_request_free(&r);
        break;
    }
    default: {
        detokenize_request r;
        if (parse_detokenize_request(body, len, &lim, &r, &e) == 0)
            for (int32_t k = 0; k < r.n; k++) check(r.tokens[k] >= 0 && r.tokens[k] < lim.n_vocab);
        else check(e.status >= 400 && e.message[0]);
        detokenize_request_free(&r);
        break;
    }
    }
    embeddings_request er;
    if (parse_embeddings_request(body, len, &lim, &er, &e) == 0) {
        check(er.n_inputs >= 1 && er.n_inputs <= REQ_MAX_EMBED_INPUTS && er.dimensions >= -1);
        for (int i = 0; i < er.n_inputs; i++)
            check(er.inputs[i].is_tokens ? er.inputs[i].n_tokens >= 1 : er.inputs[i].text_len >= 1);
    } else {
        check(e.status >= 400 && e.message[0]);
    }
    embeddings_request_free(&er);
    bool to_end;
    char *oai = llama_completion_to_oai(body, len, &to_end, &e);
    if (oai) {
        infer_request r;
        if (parse_infer_request(oai, strlen(oai), false, &lim, &r, &e) == 0) check_infer(&r, &lim);
        else check(e.status >= 400 && e.message[0]);
        infer_request_free(&r);
        free(oai);
    } else {
        check(e.status == 0 || (e.status >= 400 && e.message[0])); /* 0: not an object, parsed as it is */
    }
    return 0;
}
