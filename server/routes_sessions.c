/*
 * routes_sessions.c — sessions and their snapshots over HTTP:
 *   POST   /v1/sessions                  {"id"?, "restore"?}  -> 201 the session (restore: start from a snapshot)
 *   GET    /v1/sessions                                       -> {"object": "list", "data": [sessions]}
 *   GET    /v1/sessions/{id}                                  -> the session
 *   DELETE /v1/sessions/{id}                                  -> {"id", "object": "session.deleted", "deleted"}
 *   POST   /v1/sessions/{id}/save        {"name"?, "if_version"?} -> {"id", "snapshot", "bytes"[, "version"]}
 *   POST   /v1/sessions/{id}/restore     {"name"?}            -> the session, its state replaced by the snapshot
 *   GET    /v1/snapshots                                      -> {"object": "list", "data": [{name, bytes, modified}]}
 * Snapshots are files in --session-dir, or versioned rows of the state database (--state postgresql://...: "version"
 * in replies; a save that lost its compare-and-swap is 409 snapshot_version_conflict).
 *   DELETE /v1/snapshots/{name}                               -> {"name", "object": "snapshot.deleted", "deleted"}
 * Completions and chat completions name a session with "session": "<id>" (routes_infer.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_error.h"
#include "app.h"

static json_t *session_json(const session_info *si) {
    json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:b, s:I, s:I, s:o}", "id", si->id, "object", "session", "created",
                          (json_int_t)si->created, "last_used", (json_int_t)si->last_used, "busy", si->busy,
                          "requests", (json_int_t)si->requests, "tokens", (json_int_t)si->tokens, "memory",
                          memory_json(&si->memory));
    if (o) json_object_set_new(o, "last_error", si->last_error[0] ? json_string(si->last_error) : json_null());
    return o;
}

static const char *status_code(int status) {
    switch (status) {
    case 400: return "invalid_value";
    case 404: return "not_found";
    case 409: return "session_busy";
    case 422: return "snapshot_refused";
    case 429: return "too_many_sessions";
    case 501: return "snapshots_disabled";
    case 503: return "state_unavailable";
    default: return "server_error";
    }
}

static void reply_status(http_reply *rep, int status, const char *msg) {
    reply_error(rep, status, status_code(status), NULL, NULL, "%s", msg);
}

/* The optional JSON object body; NULL after replying 400. An empty body is {}. */
static json_t *body_object(const http_request *req, http_reply *rep) {
    if (req->body_len == 0) return json_object();
    json_error_t je;
    json_t *o = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        reply_error(rep, 400, "invalid_json", NULL, NULL, "the body must be a JSON object%s%s", o ? "" : ": ",
                    o ? "" : je.text);
        return NULL;
    }
    return o;
}

/* An optional string field; -1 after replying 400. */
static int opt_string(json_t *o, const char *key, const char **out, http_reply *rep) {
    json_t *v = json_object_get(o, key);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
        reply_error(rep, 400, "invalid_type", key, NULL, "'%s' must be a string", key);
        return -1;
    }
    *out = json_string_value(v);
    return 0;
}

/* An optional snapshot name; "" is refused rather than read as absent (it used to save under the session id). */
static int opt_name(json_t *o, const char *key, const char **out, http_reply *rep) {
    if (opt_string(o, key, out, rep) != 0) return -1;
    if (*out && !**out) {
        reply_error(rep, 400, "invalid_value", key, NULL, "'%s' must not be empty (omit it to use %s)", key,
                    !strcmp(key, "restore") ? "no snapshot" : "the session id");
        return -1;
    }
    return 0;
}

static void reply_session(server_app *app, const char *id, int status, http_reply *rep) {
    session_info si;
    char msg[384];
    int st = sessions_get(app->sessions, id, &si, msg, sizeof msg);
    if (st != 200) reply_status(rep, st, msg);
    else reply_json(rep, status, session_json(&si));
}

void route_sessions_create(server_app *app, const http_request *req, http_reply *rep) {
    json_t *b = body_object(req, rep);
    if (!b) return;
    const char *id, *restore;
    if (opt_string(b, "id", &id, rep) == 0 && opt_name(b, "restore", &restore, rep) == 0) {
        char out[SESSION_ID_MAX + 1], msg[384];
        int st = sessions_create(app->sessions, id, restore, out, msg, sizeof msg);
        if (st != 201) reply_status(rep, st, msg);
        else reply_session(app, out, 201, rep);
    }
    json_decref(b);
}

void route_sessions_list(server_app *app, const http_request *req, http_reply *rep) {
    (void)req;
    int n = 0;
    session_info *v = sessions_list(app->sessions, &n);
    json_t *data = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(data, session_json(&v[i]));
    free(v);
    reply_json(rep, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

/* "/v1/sessions/<id>[/<action>]" -> id (copied) and action ("" when none); false when the id is malformed. */
static bool split_path(const char *path, char id[SESSION_ID_MAX + 1], const char **action) {
    const char *p = path + strlen("/v1/sessions/");
    const char *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    *action = slash ? slash + 1 : "";
    if (n == 0 || n > SESSION_ID_MAX) return false;
    memcpy(id, p, n);
    id[n] = '\0';
    return session_id_valid(id);
}

static bool bad_path(const http_request *req, http_reply *rep, char id[SESSION_ID_MAX + 1], const char **action) {
    if (split_path(req->path, id, action)) return false;
    reply_error(rep, 404, "not_found", NULL, NULL, "no route %s %s (session ids are 1 to %d of A-Z a-z 0-9 _ -)",
                req->method, req->path, SESSION_ID_MAX);
    return true;
}

void route_session_get(server_app *app, const http_request *req, http_reply *rep) {
    char id[SESSION_ID_MAX + 1];
    const char *action;
    if (bad_path(req, rep, id, &action)) return;
    if (*action) {
        reply_error(rep, 404, "not_found", NULL, NULL, "no route GET %s", req->path);
        return;
    }
    reply_session(app, id, 200, rep);
}

void route_session_delete(server_app *app, const http_request *req, http_reply *rep) {
    char id[SESSION_ID_MAX + 1], msg[384];
    const char *action;
    if (bad_path(req, rep, id, &action)) return;
    if (*action) {
        reply_error(rep, 404, "not_found", NULL, NULL, "no route DELETE %s", req->path);
        return;
    }
    int st = sessions_delete(app->sessions, id, msg, sizeof msg);
    if (st != 200) reply_status(rep, st, msg);
    else reply_json(rep, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object", "session.deleted", "deleted", 1));
}

static void save(server_app *app, const char *id, const char *name, int64_t if_version, http_reply *rep) {
    snapshot_info out;
    char msg[384];
    int st = sessions_save(app->sessions, id, name, if_version, &out, msg, sizeof msg);
    if (st == 409 && strstr(msg, "snapshot '")) { /* a compare-and-swap lost, not a busy session */
        reply_error(rep, 409, "snapshot_version_conflict", "if_version", NULL, "%s", msg);
        return;
    }
    if (st != 200) {
        reply_status(rep, st, msg);
        return;
    }
    json_t *o = json_pack("{s:s, s:s, s:I}", "id", id, "snapshot", out.name, "bytes", (json_int_t)out.bytes);
    if (out.version > 0) json_object_set_new(o, "version", json_integer(out.version));
    reply_json(rep, 200, o);
}

/* The optional "if_version" of a save: an integer >= 0, or absent (-1). -2 after replying 400. */
static int64_t opt_version(json_t *o, http_reply *rep) {
    json_t *v = json_object_get(o, "if_version");
    if (!v || json_is_null(v)) return SNAPSHOT_ANY_VERSION;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        reply_error(rep, 400, "invalid_value", "if_version", NULL,
                    "'if_version' must be an integer >= 0 (0: only when the snapshot does not exist yet)");
        return -2;
    }
    return json_integer_value(v);
}

void route_session_action(server_app *app, const http_request *req, http_reply *rep) {
    char id[SESSION_ID_MAX + 1], msg[384];
    const char *action;
    if (bad_path(req, rep, id, &action)) return;
    bool is_save = !strcmp(action, "save"), is_restore = !strcmp(action, "restore");
    if (!is_save && !is_restore) {
        reply_error(rep, 404, "not_found", NULL, NULL, "no route POST %s (actions: save, restore)", req->path);
        return;
    }
    json_t *b = body_object(req, rep);
    if (!b) return;
    const char *name;
    if (opt_name(b, "name", &name, rep) == 0) {
        if (is_save) {
            int64_t v = opt_version(b, rep);
            if (v != -2) save(app, id, name, v, rep);
        } else {
            int st = sessions_restore(app->sessions, id, name, msg, sizeof msg);
            if (st != 200) reply_status(rep, st, msg);
            else reply_session(app, id, 200, rep);
        }
    }
    json_decref(b);
}

void route_snapshots_list(server_app *app, const http_request *req, http_reply *rep) {
    (void)req;
    snapshot_info *v;
    int n;
    char msg[384];
    int st = sessions_snapshots(app->sessions, &v, &n, msg, sizeof msg);
    if (st != 200) {
        reply_status(rep, st, msg);
        return;
    }
    json_t *data = json_array();
    for (int i = 0; i < n; i++)
    {
        json_t *o = json_pack("{s:s, s:s, s:I, s:I}", "name", v[i].name, "object", "snapshot", "bytes",
                              (json_int_t)v[i].bytes, "modified", (json_int_t)v[i].modified);
        if (v[i].version > 0) json_object_set_new(o, "version", json_integer(v[i].version));
        json_array_append_new(data, o);
    }
    free(v);
    reply_json(rep, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

void route_snapshot_delete(server_app *app, const http_request *req, http_reply *rep) {
    const char *name = req->path + strlen("/v1/snapshots/");
    char msg[384];
    int st = sessions_snapshot_delete(app->sessions, name, msg, sizeof msg);
    if (st != 200) reply_status(rep, st, msg);
    else reply_json(rep, 200, json_pack("{s:s, s:s, s:b}", "name", name, "object", "snapshot.deleted", "deleted", 1));
}
