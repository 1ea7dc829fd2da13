/*
 * llama_compat.h — llama.cpp's native POST /completion on the OpenAI machinery: its request is translated into a
 * /v1/completions body (then parsed and run as one), and its response shapes are built from the same request.
 *
 *   request   prompt (string or token ids; one prompt), n_predict (-1 or absent: until the context is full),
 *             temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, presence_penalty,
 *             frequency_penalty, seed (-1: random), stop, stream, ignore_eos. Fields that would change the result
 *             and are not implemented (grammar, json_schema, n_probs > 0, mirostat, logit_bias, dry_*, xtc_*,
 *             typical_p, image_data, lora, n > 1, logprobs) are refused with a 400 naming them; bookkeeping
 *             fields (cache_prompt, id_slot, n_keep, samplers, ...) are ignored.
 *   response  {"content", "tokens": [], "stop": true, "model", "tokens_predicted", "tokens_evaluated",
 *              "tokens_cached", "truncated", "stop_type": "eos"|"word"|"limit", "timings"}
 *   stream    data: {"content": "...", "tokens": [id], "stop": false} per token, then one data: object like the
 *             response with "content": "" and "stop": true; no [DONE] (llama.cpp sends none on /completion).
 */
#ifndef MNEMO_SERVER_LLAMA_COMPAT_H
#define MNEMO_SERVER_LLAMA_COMPAT_H

#include <jansson.h>
#include <stdbool.h>

#include "infer_request.h"
#include "request_parse.h"

/* The /v1/completions body (malloc'd JSON text) for a /completion body; NULL with err filled (400 naming the
 * field), or NULL with err->status 0 when the body is not a JSON object (parse it as it is for the error).
 * *until_context_end: n_predict was omitted or -1. */
char *llama_completion_to_oai(const char *body, size_t len, bool *until_context_end, api_error *err);

/* The final object of a finished one-choice request: content is the whole text (non-streaming) or "" (stream end). */
json_t *llama_result(const char *model, const char *text, size_t len, const ireq *j);
/* One streamed piece. token < 0: none. */
json_t *llama_chunk(const char *text, size_t len, mnemo_token token);

#endif
