/*
 * api_error.c — the OpenAI error object and the api_error that carries one (see api_error.h); api_reply.c sends
 * them. Kept apart from the replies so that the parsers and stores that fill an api_error link without the HTTP
 * layer.
 */
#include "api_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "text_util.h"

static const char *error_type(int status) {
    if (status == 401) return "authentication_error";
    if (status == 403) return "permission_error";
    if (status >= 500) return "server_error";
    return "invalid_request_error";
}

json_t *api_error_json(int status, const char *code, const char *param, const char *message) {
    json_t *e = json_object();
    json_object_set_new(e, "message", json_text(message, strlen(message)));
    json_object_set_new(e, "type", json_string(error_type(status)));
    json_object_set_new(e, "param", param ? json_text(param, strlen(param)) : json_null());
    json_object_set_new(e, "code", code ? json_string(code) : json_null());
    json_t *o = json_object();
    json_object_set_new(o, "error", e);
    return o;
}

int api_error_set(api_error *e, int status, const char *code, const char *param, const char *fmt, ...) {
    e->status = status;
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}
