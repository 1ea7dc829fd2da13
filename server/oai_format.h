/*
 * oai_format.h — OpenAI response shapes built from request events: the completion and chat.completion objects, their
 * streaming chunks, logprobs in both APIs' formats, usage and llama.cpp-style timings, and SSE framing.
 *
 *   completion  {id, object:"text_completion", created, model, choices:[{index, text, logprobs, finish_reason}],
 *                usage, timings}
 *   chat        {id, object:"chat.completion", ..., choices:[{index, message:{role, content}, logprobs, finish_reason}]}
 *   chunks      object "text_completion" / "chat.completion.chunk"; choices carry text / delta; the last chunk of a
 *               choice has its finish_reason; with include_usage every chunk has "usage": null and a final chunk
 *               with "choices": [] carries the usage; the stream ends with "data: [DONE]".
 * Choices cut short by the time limit or a shutdown say finish_reason "length" and stop_reason "time_limit" /
 * "server_shutdown" (vLLM's stop_reason field), so a client can tell them from a max_tokens stop.
 */
#ifndef MNEMO_SERVER_OAI_FORMAT_H
#define MNEMO_SERVER_OAI_FORMAT_H

#include <jansson.h>
#include <stdbool.h>

#include "engine.h"
#include "infer_request.h"
#include "text_util.h"

typedef struct {
    const mnemo_model *model;
    bool chat;
    bool logprobs;          /* the request asked for logprobs */
    char id[48];            /* cmpl-... / chatcmpl-... */
    const char *model_name;
    long long created;
} oai_ctx;

void oai_make_id(oai_ctx *c, unsigned long long seq);

/* {id, object, created, model, system_fingerprint, choices: []} */
json_t *oai_envelope(const oai_ctx *c, bool chunk);
/* Logprobs container for one choice: completions {tokens, token_logprobs, top_logprobs, text_offset}, chat
 * {content: []}. */
json_t *oai_logprobs_new(const oai_ctx *c);
/* Appends one token event; *offset tracks text_offset for completions. */
void oai_logprobs_add(const oai_ctx *c, json_t *lp, const ireq_event *ev, size_t *offset);

const char *oai_finish_reason(const ireq_choice *ch);
/* NULL unless the choice was cut short (time_limit / server_shutdown). */
const char *oai_stop_reason(const ireq_choice *ch);

/* One complete choice (non-streaming). text is the choice's whole text; lp may be NULL (then null). */
json_t *oai_choice(const oai_ctx *c, int index, const char *text, size_t len, json_t *lp, const ireq_choice *ch);
/* One streaming chunk for one choice: a delta (text may be empty), the role opener (chat), or the finish. */
json_t *oai_chunk(const oai_ctx *c, int index, const char *text, size_t len, json_t *lp, const ireq_choice *finished,
                  bool role_opener, bool with_usage_null);

json_t *oai_usage(const ireq *j);
json_t *oai_timings(const ireq *j);

/* "data: <compact json>\n\n" (steals obj), and the terminator. */
void sse_event(strbuf *b, json_t *obj);
void sse_done(strbuf *b);

#endif
