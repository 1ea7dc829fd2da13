/*
 * router.c — the one HTTP handler: size limit, API key, route table, method check, loading/stopping state,
 * then the route. Order matters: 413 before anything reads the body; 401 before a route's existence is
 * revealed (except /health, which load balancers probe without credentials, and the web page, which holds no
 * data and asks for the key itself).
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
    const char *path;   /* exact, or a prefix when it ends with '/' ("/" itself is exact) */
    route_fn fn;
    bool needs_model;
    const char *shown;  /* how a 404 lists it (prefix routes name what follows); NULL = path */
} route;

static const route ROUTES[] = {
    {"POST", "/v1/completions", route_completions, true, NULL},
    {"POST", "/v1/chat/completions", route_chat_completions, true, NULL},
    {"POST", "/v1/embeddings", route_embeddings, true, NULL},
    {"GET", "/v1/models", route_models, false, NULL},
    {"GET", "/v1/models/", route_model_get, false, "/v1/models/{id}"},
    {"POST", "/completion", route_llama_completion, true, NULL},
    {"POST", "/tokenize", route_tokenize, true, NULL},
    {"POST", "/detokenize", route_detokenize, true, NULL},
    {"GET", "/health", route_health, false, NULL},
    {"GET", "/props", route_props, true, NULL},
    {"GET", "/metrics", route_metrics, false, NULL},
    {"POST", "/v1/sessions", route_sessions_create, true, NULL},
    {"GET", "/v1/sessions", route_sessions_list, true, NULL},
    {"GET", "/v1/sessions/", route_session_get, true, "/v1/sessions/{id}"},
    {"DELETE", "/v1/sessions/", route_session_delete, true, "/v1/sessions/{id}"},
    {"POST", "/v1/sessions/", route_session_action, true, "/v1/sessions/{id}/save|restore"},
    {"GET", "/v1/snapshots", route_snapshots_list, true, NULL},
    {"DELETE", "/v1/snapshots/", route_snapshot_delete, true, "/v1/snapshots/{name}"},
    {"POST", "/v1/files", route_files_create, false, NULL}, /* the files store needs no model */
    {"GET", "/v1/files", route_files_list, false, NULL},
    {"GET", "/v1/files/", route_file_get, false, "/v1/files/{id}[/content]"},
    {"DELETE", "/v1/files/", route_file_delete, false, "/v1/files/{id}"},
    {"POST", "/v1/fine_tuning/jobs", route_ft_jobs_create, true, NULL},
    {"GET", "/v1/fine_tuning/jobs", route_ft_jobs_list, false, NULL},
    {"GET", "/v1/fine_tuning/jobs/", route_ft_job_get, false, "/v1/fine_tuning/jobs/{id}[/events|/checkpoints]"},
    {"POST", "/v1/fine_tuning/jobs/", route_ft_job_action, false, "/v1/fine_tuning/jobs/{id}/cancel"},
    {"GET", "/", route_webui, false, NULL}, /* the web page (routes_webui.c) */
    {"GET", "/webui/", route_webui, false, "/webui/{file}"},
};
#define N_ROUTES (sizeof ROUTES / sizeof ROUTES[0])

static bool path_matches(const route *r, const char *path) {
    size_t n = strlen(r->path);
    if (n > 1 && r->path[n - 1] == '/') return strncmp(path, r->path, n) == 0 && path[n] != '\0'; /* "/" is exact */
    return strcmp(path, r->path) == 0;
}

/* "POST /v1/completions, ..., GET|POST /v1/sessions, ...": every route, methods of one shown path together. */
static void list_routes(char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < N_ROUTES; i++) {
        const char *shown = ROUTES[i].shown ? ROUTES[i].shown : ROUTES[i].path;
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++)
            seen = !strcmp(shown, ROUTES[k].shown ? ROUTES[k].shown : ROUTES[k].path);
        if (seen) continue;
        char methods[32] = "";
        for (size_t k = i; k < N_ROUTES; k++)
            if (!strcmp(shown, ROUTES[k].shown ? ROUTES[k].shown : ROUTES[k].path))
                snprintf(methods + strlen(methods), sizeof methods - strlen(methods), "%s%s", methods[0] ? "|" : "",
                         ROUTES[k].method);
        int w = snprintf(out + n, cap - n, "%s%s %s", n ? ", " : "", methods, shown);
        if (w < 0 || (size_t)w >= cap - n) return;
        n += (size_t)w;
    }
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
    if (strcmp(req->path, "/health") != 0 && !webui_public(app, req->path) && !authorized(app, req)) {
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
        char routes[1536]; /* every route listed (list_routes stops at a route that does not fit) */
        list_routes(routes, sizeof routes);
        reply_error(rep, 404, "not_found", NULL, NULL, "no route %.64s %.128s; the routes are: %s", req->method,
                    req->path, routes);
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
