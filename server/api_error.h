/*
 * api_error.h — replies in the OpenAI shapes: a JSON body with a status, and the error object
 * {"error": {"message", "type", "code", "param"}} that every client knows how to read; api_error carries one such
 * error from the parser or store that found it to the route that replies.
 *
 * Types follow OpenAI: invalid_request_error (400, 404, 405, 413), authentication_error (401), server_error (500,
 * 503). code is a short machine-readable reason ("context_length_exceeded", "model_not_found", ...) or null.
 */
#ifndef MNEMO_SERVER_API_ERROR_H
#define MNEMO_SERVER_API_ERROR_H

#include <jansson.h>

#include "http.h"

/* One OpenAI error on its way to a reply. */
typedef struct {
    int status;        /* HTTP status */
    char code[48];     /* OpenAI error code, or "" */
    char param[64];    /* the offending field, or "" */
    char message[512];
} api_error;

/* Fills e (code and param may be NULL: none); returns -1, a failing parser's value. */
int api_error_set(api_error *e, int status, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The error reply for e (an empty code or param is null in the body). */
void reply_api_error(http_reply *rep, const api_error *e);

/* The error object alone (for SSE error events). */
json_t *api_error_json(int status, const char *code, const char *param, const char *message);
/* A full error reply; type derives from status. 503s carry Retry-After, 401 WWW-Authenticate, 405 Allow
 * (pass it as allow, else NULL). */
void reply_error(http_reply *rep, int status, const char *code, const char *param, const char *allow,
                 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* 200-style JSON reply; steals obj. */
void reply_json(http_reply *rep, int status, json_t *obj);
/* Plain text reply (copies text). */
void reply_text(http_reply *rep, int status, const char *content_type, const char *text, size_t len);

#endif
