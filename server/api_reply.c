/*
 * api_reply.c — JSON and error replies (see api_error.h). If even the error body cannot be built (out of memory),
 * the reply keeps its status with an empty body: the client still learns what happened.
 */
#include "api_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void reply_json(http_reply *rep, int status, json_t *obj) {
    rep->status = status;
    rep->content_type = "application/json";
    rep->body = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    rep->body_len = rep->body ? strlen(rep->body) : 0;
    json_decref(obj);
}

void reply_text(http_reply *rep, int status, const char *content_type, const char *text, size_t len) {
    rep->status = status;
    rep->content_type = content_type;
    rep->body = malloc(len + 1);
    if (rep->body) {
        memcpy(rep->body, text, len);
        rep->body[len] = '\0';
    }
    rep->body_len = rep->body ? len : 0;
}

void reply_error(http_reply *rep, int status, const char *code, const char *param, const char *allow,
                 const char *fmt, ...) {
    char msg[2048]; /* room for router.c's 404, which lists every route */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (status == 503) http_reply_header(rep, "Retry-After", "1");
    if (status == 401) http_reply_header(rep, "WWW-Authenticate", "Bearer");
    if (status == 405 && allow) http_reply_header(rep, "Allow", allow);
    reply_json(rep, status, api_error_json(status, code, param, msg));
}

void reply_api_error(http_reply *rep, const api_error *e) {
    reply_error(rep, e->status, e->code[0] ? e->code : NULL, e->param[0] ? e->param : NULL, NULL, "%s", e->message);
}
