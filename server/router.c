/*
 * router.c — the one HTTP handler: size limit, API key, route table, method check, loading/stopping state,
 * then the route. Order matters: 413 before anything reads the body; 401 before a route's existence is
 * revealed (except /health, which load balancers probe without credentials).
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "api_error.h"
#include "app.h"
#include "text_util.h"

typedef void (*route_fn)(server_app *, const http_request *, http_reply *);

typedef struct {
    const char *method;
    const char *path;   /* exact, or a prefix when it ends with '/' */
    route_fn fn;
    bool needs_model;
} route;

static const route ROUTES[] = {
    {"POST", "/v1/completions", route_completions, true},
    {"POST", "/v1/chat/completions", route_chat_completions, true},
    {"GET", "/v1/models", route_models, false},
    {"GET", "/v1/models/", route_model_get, false},
    {"GET", "/health", route_health, false},
    {"GET", "/props", route_props, true},
    {"GET", "/metrics", route_metrics, false},
    {"POST", "/tokenize", route_tokenize, true},
    {"POST", "/detokenize", route_detokenize, true},
    {"POST", "/v1/sessions", route_sessions_create, true},
    {"GET", "/v1/sessions", route_sessions_list, true},
    {"GET", "/v1/sessions/", route_session_get, true},
    {"DELETE", "/v1/sessions/", route_session_delete, true},
    {"POST", "/v1/sessions/", route_session_action, true},
    {"GET", "/v1/snapshots", route_snapshots_list, true},
    {"DELETE", "/v1/snapshots/", route_snapshot_delete, true},
};
#define N_ROUTES (sizeof ROUTES / sizeof ROUTES[0])

static bool path_matches(const route *r, const char *path) {
    size_t n = strlen(r->path);
    if (r->path[n - 1] == '/') return strncmp(path, r->path, n) == 0 && path[n] != '\0';
    return strcmp(path, r->path) == 0;
}

/* Constant-time comparison of the Authorization header against "Bearer <key>". */
static bool authorized(const server_app *app, const http_request *req) {
    const char *key = app->opts.api_key;
    if (!key) return true;
    const char *h = req->header(req, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    size_t a = strlen(h), b = strlen(key);
    unsigned char diff = (unsigned char)(a != b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned char)(key[i] ^ (i < a ? h[i] : 0));
    return diff == 0;
}

static void handle(server_app *app, const http_request *req, http_reply *rep) {
    if (req->body_too_large) {
        rep->close = true;
        reply_error(rep, 413, "request_too_large", NULL, NULL, "request body exceeds the limit of %zu bytes (--max-body)",
                    app->opts.max_body);
        return;
    }
    const char *method = strcmp(req->method, "HEAD") == 0 ? "GET" : req->method;
    if (strcmp(req->path, "/health") != 0 && !authorized(app, req)) {
        reply_error(rep, 401, "invalid_api_key", NULL, NULL,
                    "missing or wrong API key: send 'Authorization: Bearer <key>'");
        return;
    }
    const route *found = NULL;
    char allow[64] = "";
    for (size_t i = 0; i < N_ROUTES; i++) {
        if (!path_matches(&ROUTES[i], req->path)) continue;
        if (!strcmp(ROUTES[i].method, method)) found = &ROUTES[i];
        else snprintf(allow + strlen(allow), sizeof allow - strlen(allow), "%s%s", allow[0] ? ", " : "",
                      ROUTES[i].method);
    }
    if (!found && allow[0]) {
        reply_error(rep, 405, "method_not_allowed", NULL, allow, "%s is not allowed on %s (allowed: %s)", req->method,
                    req->path, allow);
        return;
    }
    if (!found) {
        reply_error(rep, 404, "not_found", NULL, NULL, "no route %s %s", req->method, req->path);
        return;
    }
    int state = atomic_load(&app->state);
    if (found->needs_model && state == APP_LOADING) {
        reply_error(rep, 503, "loading", NULL, NULL, "the model is still loading");
        return;
    }
    found->fn(app, req, rep);
}

void app_handle(void *arg, const http_request *req, http_reply *rep) {
    server_app *app = arg;
    double t0 = now_s();
    handle(app, req, rep);
    metrics_http_status(app->mx, rep->status);
    if (app->opts.verbose)
        fprintf(stderr, "mnemo-server: %s %s -> %d (%.1f ms%s)\n", req->method, req->path, rep->status,
                (now_s() - t0) * 1e3, rep->read ? ", streaming" : "");
}
