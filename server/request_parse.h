/*
 * request_parse.h — JSON request bodies -> validated C structs, with no model and no I/O (so the libFuzzer target
 * tests/fuzz/fuzz_server_request.c can drive it directly).
 *
 * Every failure yields an api_error whose status, param and message become the OpenAI error reply: 400 for
 * invalid JSON, wrong types, out-of-range values and unsupported options, each naming the offending `param`.
 * Unknown fields are ignored (clients send many), but fields that would change the result and that mnemo does not
 * implement (echo, suffix, logit_bias, tools, response_format json, ...) are refused rather than silently dropped.
 */
#ifndef MNEMO_SERVER_REQUEST_PARSE_H
#define MNEMO_SERVER_REQUEST_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#include "api_error.h"
#include "engine.h"

#define REQ_MAX_CHOICES 16     /* prompts x n in one request */
#define REQ_MAX_STOP 16        /* stop strings */
#define REQ_MAX_STOP_LEN 256   /* bytes per stop string */
#define REQ_MAX_MESSAGES 4096  /* chat messages */
#define REQ_MAX_EMBED_INPUTS 2048 /* inputs of one embeddings request (OpenAI's limit) */

/* One message; its role is the engine's (engine.h "chat templates"): "developer" arrives as system. */
typedef struct {
    mnemo_chat_role role;
    char *content; /* NUL-terminated; text parts joined with "\n" */
    size_t len;
} chat_msg;

typedef struct {
    bool is_tokens;
    char *text; /* text prompt */
    size_t text_len;
    mnemo_token *tokens; /* token prompt */
    int32_t n_tokens;
} prompt_in;

typedef struct {
    int32_t n_vocab; /* token ids in prompts must be in [0, n_vocab); 0 = any non-negative int32 */
} parse_limits;

typedef struct {
    bool chat;
    char *model;              /* NULL when absent */
    prompt_in *prompts;       /* completions: >= 1 */
    int n_prompts;
    chat_msg *messages;       /* chat: >= 1 */
    int n_messages;
    int n;                    /* choices per prompt */
    int32_t max_tokens;       /* -1 = not given */
    const char *max_tokens_param; /* the field it came from: "max_tokens" or "max_completion_tokens" */
    bool to_context_end;      /* max_tokens omitted means until the context is full (chat; llama.cpp's /completion),
                               * else OpenAI's completions default of 16 */
    mnemo_sampler_params sampling;
    bool seed_set;
    char **stop;
    int n_stop;
    int logprobs;             /* -1 = none; else how many alternatives per token (0..MNEMO_MAX_LOGPROBS) */
    bool stream, include_usage, ignore_eos;
    bool include_progress;    /* stream_options.include_progress: prompt progress chunks while prefilling */
    char *session;            /* a session id (NULL: none); the request then has one prompt and n = 1 */
} infer_request;


/* chat selects /v1/chat/completions rules, else /v1/completions. 0 on success (free with infer_request_free,
 * also after a failure), -1 with *err filled. */
int parse_infer_request(const char *body, size_t len, bool chat, const parse_limits *lim, infer_request *out,
                        api_error *err);
void infer_request_free(infer_request *r);

/* POST /v1/embeddings: input (string | strings | token ids | token-id arrays; no empty strings), model,
 * encoding_format ("float" | "base64"), dimensions, user. */
typedef struct {
    char *model;          /* NULL when absent */
    prompt_in *inputs;
    int n_inputs;
    bool base64;
    int32_t dimensions;   /* -1 = not given */
} embeddings_request;
int parse_embeddings_request(const char *body, size_t len, const parse_limits *lim, embeddings_request *out,
                             api_error *err);
void embeddings_request_free(embeddings_request *r);

typedef struct {
    char *content;
    size_t len;
    bool add_special, with_pieces;
} tokenize_request;
int parse_tokenize_request(const char *body, size_t len, tokenize_request *out, api_error *err);
void tokenize_request_free(tokenize_request *r);

typedef struct {
    mnemo_token *tokens;
    int32_t n;
} detokenize_request;
int parse_detokenize_request(const char *body, size_t len, const parse_limits *lim, detokenize_request *out,
                             api_error *err);
void detokenize_request_free(detokenize_request *r);

#endif
