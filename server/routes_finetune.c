/*
 * routes_finetune.c — /v1/fine_tuning/jobs as the OpenAI API shapes it (finetune_jobs.c does the work):
 *   POST /v1/fine_tuning/jobs                       create (model, training_file, validation_file, suffix, seed,
 *                                                   hyperparameters or method.supervised.hyperparameters, extra)
 *   GET  /v1/fine_tuning/jobs?after=&limit=         list, newest first
 *   GET  /v1/fine_tuning/jobs/{id}                  one job
 *   GET  /v1/fine_tuning/jobs/{id}/events?after=&limit=   events newest first; &stream=true: server-sent events,
 *                                                   oldest first, until the job finishes ("data: [DONE]")
 *   GET  /v1/fine_tuning/jobs/{id}/checkpoints      checkpoints newest first
 *   POST /v1/fine_tuning/jobs/{id}/cancel           cancel
 * Without --jobs-dir each answers 501.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api_error.h"
#include "app.h"
#include "model_names.h"
#include "text_util.h"

static bool enabled(server_app *app, http_reply *rep) {
    if (app->jobs) return true;
    reply_error(rep, 501, "not_enabled", NULL, NULL,
                "fine-tuning is off: start mnemo-server with --jobs-dir DIR to keep files, jobs and adapters");
    return false;
}

/* ?limit= within [1, max], default dflt; -1 after a 400 reply. */
static int query_limit(const http_request *req, http_reply *rep, int dflt, int max) {
    const char *v = req->query ? req->query(req, "limit") : NULL;
    if (!v) return dflt;
    char *end;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < 1 || n > max) {
        reply_error(rep, 400, "invalid_value", "limit", NULL, "limit must be an integer in [1, %d]", max);
        return -1;
    }
    return (int)n;
}

static bool valid_job_id(const char *id, size_t n) {
    if (n != 6 + 24 || strncmp(id, "ftjob-", 6) != 0) return false;
    for (size_t i = 6; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) return false;
    return true;
}

void route_ft_jobs_create(server_app *app, const http_request *req, http_reply *rep) {
    if (!enabled(app, rep)) return;
    json_error_t je;
    json_t *body = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!body) {
        reply_error(rep, 400, "invalid_json", NULL, NULL, "the body is not valid JSON: %s (line %d)", je.text, je.line);
        return;
    }
    /* Any name of the base model (or, unless --model-name-strict, a name that is no fine-tuned model's) fine-tunes
     * the base, as completions serve it (model_names.h); the job records the base's first name. */
    json_t *model = json_is_object(body) ? json_object_get(body, "model") : NULL;
    const char *resolved = NULL;
    if (json_is_string(model) && model_resolve(app, json_string_value(model), &resolved) == MODEL_BASE)
        json_object_set_new(body, "model", json_string(app->alias));
    json_t *out = NULL;
    api_error e;
    if (ft_jobs_create(app->jobs, body, &out, &e) != 0) reply_api_error(rep, &e);
    else reply_json(rep, 200, out);
    json_decref(body);
}

void route_ft_jobs_list(server_app *app, const http_request *req, http_reply *rep) {
    if (!enabled(app, rep)) return;
    int limit = query_limit(req, rep, 20, 100);
    if (limit < 0) return;
    const char *after = req->query ? req->query(req, "after") : NULL;
    json_t *list = ft_jobs_list(app->jobs, after, limit);
    if (!list) reply_api_error(rep, ft_jobs_last_error()); /* the state database is away */
    else reply_json(rep, 200, list);
}

typedef struct {
    server_app *app;
    char id[40];
    size_t cursor;
    bool done;
    char *buf;
    size_t len, pos;
} event_stream;

static ssize_t events_read(void *arg, char *out, size_t max) {
    event_stream *s = arg;
    while (s->pos == s->len) {
        if (s->done) return 0;
        free(s->buf);
        s->buf = NULL, s->len = s->pos = 0;
        bool finished = false;
        json_t *evs = ft_jobs_events_since(s->app->jobs, s->id, &s->cursor, &finished);
        if (!evs) return -1;
        size_t cap = 0;
        FILE *f = open_memstream(&s->buf, &cap);
        size_t i;
        json_t *ev;
        json_array_foreach(evs, i, ev) {
            char *t = json_dumps(ev, JSON_COMPACT);
            if (t && f) fprintf(f, "data: %s\n\n", t);
            free(t);
        }
        json_decref(evs);
        if (finished && f) fprintf(f, "data: [DONE]\n\n"), s->done = true;
        if (!f) return -1;
        fclose(f);
        s->len = cap;
        if (!s->len && !s->done) usleep(200000); /* nothing new yet */
        if (atomic_load(&s->app->state) >= APP_STOPPING && !s->len) return 0;
    }
    size_t n = s->len - s->pos < max ? s->len - s->pos : max;
    memcpy(out, s->buf + s->pos, n);
    s->pos += n;
    return (ssize_t)n;
}

static void events_free(void *arg) {
    event_stream *s = arg;
    free(s->buf);
    free(s);
}

void route_ft_job_get(server_app *app, const http_request *req, http_reply *rep) {
    if (!enabled(app, rep)) return;
    const char *id = req->path + strlen("/v1/fine_tuning/jobs/");
    size_t n = strcspn(id, "/");
    const char *sub = id[n] ? id + n + 1 : NULL;
    char jid[40];
    if (!valid_job_id(id, n)) {
        reply_error(rep, 404, "job_not_found", "fine_tuning_job_id", NULL, "no fine-tuning job '%.*s'",
                    (int)(n < 64 ? n : 64), id);
        return;
    }
    memcpy(jid, id, n);
    jid[n] = 0;
    json_t *o = NULL;
    if (!sub) {
        o = ft_jobs_get(app->jobs, jid);
    } else if (!strcmp(sub, "events")) {
        const char *stream = req->query ? req->query(req, "stream") : NULL;
        if (stream && !strcmp(stream, "true")) {
            json_t *exists = ft_jobs_get(app->jobs, jid);
            event_stream *s = exists ? calloc(1, sizeof *s) : NULL;
            json_decref(exists);
            if (s) {
                s->app = app;
                snprintf(s->id, sizeof s->id, "%s", jid);
                rep->status = 200;
                rep->content_type = "text/event-stream";
                http_reply_header(rep, "Cache-Control", "no-cache");
                rep->read = events_read;
                rep->free = events_free;
                rep->stream = s;
                return;
            }
        } else {
            int limit = query_limit(req, rep, 20, 1000);
            if (limit < 0) return;
            o = ft_jobs_events(app->jobs, jid, req->query ? req->query(req, "after") : NULL, limit);
        }
    } else if (!strcmp(sub, "checkpoints")) {
        int limit = query_limit(req, rep, 10, 100);
        if (limit < 0) return;
        o = ft_jobs_checkpoints(app->jobs, jid, req->query ? req->query(req, "after") : NULL, limit);
    } else {
        reply_error(rep, 404, "not_found", NULL, NULL, "no route GET %.200s (a job has /events and /checkpoints)",
                    req->path);
        return;
    }
    if (!o && ft_jobs_last_error()->status >= 500) {
        reply_api_error(rep, ft_jobs_last_error());
        return;
    }
    if (!o) {
        reply_error(rep, 404, "job_not_found", "fine_tuning_job_id", NULL, "no fine-tuning job '%s'", jid);
        return;
    }
    reply_json(rep, 200, o);
}

void route_ft_job_action(server_app *app, const http_request *req, http_reply *rep) {
    if (!enabled(app, rep)) return;
    const char *id = req->path + strlen("/v1/fine_tuning/jobs/");
    size_t n = strcspn(id, "/");
    if (!id[n] || strcmp(id + n, "/cancel") != 0) {
        reply_error(rep, 404, "not_found", NULL, NULL, "no route POST %.200s (POST .../{id}/cancel)", req->path);
        return;
    }
    char jid[40];
    if (!valid_job_id(id, n)) {
        reply_error(rep, 404, "job_not_found", "fine_tuning_job_id", NULL, "no fine-tuning job '%.*s'",
                    (int)(n < 64 ? n : 64), id);
        return;
    }
    memcpy(jid, id, n);
    jid[n] = 0;
    json_t *out = NULL;
    api_error e;
    if (ft_jobs_cancel(app->jobs, jid, &out, &e) != 0) reply_api_error(rep, &e);
    else reply_json(rep, 200, out);
}
