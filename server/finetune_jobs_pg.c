/*
 * finetune_jobs_pg.c — see finetune_jobs_pg.h. Each function is one unit of work for pg_run (one transaction where it
 * writes more than one row); the supervisor's writes carry "AND lease_owner = <this node>".
 */
#include "finetune_jobs_pg.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dir_pack.h"
#include "pg_blob.h"

struct jpg {
    pg_pool *pool;
    char node[128];
    char lease[32]; /* seconds, as text for make_interval */
    char dir[4096];
};

jpg *jpg_new(pg_pool *pool, const char *node, double lease_s, const char *jobs_dir) {
    jpg *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->pool = pool;
    snprintf(p->node, sizeof p->node, "%s", node);
    snprintf(p->lease, sizeof p->lease, "%.3f", lease_s);
    snprintf(p->dir, sizeof p->dir, "%s", jobs_dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/adapters", jobs_dir);
    mkdir(path, 0755);
    return p;
}

void jpg_free(jpg *p) { free(p); }

static void db_e(api_error *e, pg_rc rc, const char *why) {
    if (rc == PG_UNAVAILABLE)
        api_error_set(e, 503, "state_unavailable", NULL, "the state database is unavailable (%s); retry shortly", why);
    else api_error_set(e, 500, "server_error", NULL, "the state database failed: %s", why);
}

static void warn(const char *what, const char *id, const char *why) {
    fprintf(stderr, "mnemo-server: warning: job %s: %s: %s\n", id, what, why);
}

/* One statement; its result (caller clears) or NULL with the failure in *rc. */
static PGresult *q(PGconn *c, pg_rc *rc, const char *sql, int n, const char *const *v, char *err, size_t errlen) {
    if (*rc != PG_OK) return NULL;
    PGresult *r = pg_exec(c, sql, n, v, NULL, NULL, 0, err, errlen);
    if (!r) *rc = pg_last_failure();
    return r;
}

static void q0(PGconn *c, pg_rc *rc, const char *sql, int n, const char *const *v, char *err, size_t errlen) {
    PQclear(q(c, rc, sql, n, v, err, errlen));
}

static void begin(PGconn *c, pg_rc *rc, char *err, size_t errlen) {
    if (*rc == PG_OK) *rc = pg_simple(c, "BEGIN", err, errlen);
}

static void commit(PGconn *c, pg_rc *rc, char *err, size_t errlen) {
    if (*rc == PG_OK) *rc = pg_simple(c, "COMMIT", err, errlen);
}

static pg_rc insert_event(PGconn *c, const char *job_id, json_t *ev, char *err, size_t errlen) {
    char *text = json_dumps(ev, JSON_COMPACT);
    if (!text) return snprintf(err, errlen, "out of memory"), PG_ERROR;
    const char *v[3] = {job_id, text, job_id + 6};
    pg_rc rc = PG_OK;
    q0(c, &rc, "INSERT INTO mnemo_job_events (seq, job_id, ev) SELECT n, $1, jsonb_set($2::jsonb, '{id}', "
               "to_jsonb('ftevent-' || $3 || '-' || n)) FROM (SELECT nextval('mnemo_job_events_seq_seq') AS n) s",
       3, v, err, errlen);
    free(text);
    return rc;
}

static json_t *load_json(const char *text) { return json_loads(text, JSON_DECODE_ANY, NULL); }

/* ------------------------------------------------------------------ creation */

typedef struct {
    jpg *p;
    json_t *obj, *settings, *event, *out, *data;
    const char *id, *tf, *vf, *after, *name;
    int max_pending, limit, by_status[6];
    size_t *cursor;
    bool finished, found, missing_file, full, more, cancel;
    char status[32], dir[4200];
    int64_t step;
} job_arg;

static const char *const STATUS6[6] = {"validating_files", "queued", "running", "succeeded", "failed", "cancelled"};

static pg_rc create_work(PGconn *c, void *arg, char *err, size_t errlen) {
    job_arg *a = arg;
    pg_rc rc = PG_OK;
    begin(c, &rc, err, errlen);
    q0(c, &rc, "SELECT pg_advisory_xact_lock(7366324463)", 0, NULL, err, errlen); /* the pending count */
    PGresult *r = q(c, &rc, "SELECT count(*) FROM mnemo_jobs WHERE status IN ('validating_files', 'queued', "
                            "'running')", 0, NULL, err, errlen);
    if (!r) return rc;
    a->full = strtoll(PQgetvalue(r, 0, 0), NULL, 10) >= a->max_pending;
    PQclear(r);
    if (a->full) return PG_OK;
    int64_t blobs[2] = {-1, -1};
    const char *files[2] = {a->tf, a->vf};
    for (int k = 0; k < 2 && files[k]; k++) {
        const char *v[1] = {files[k]};
        r = q(c, &rc, "SELECT blob FROM mnemo_files WHERE id = $1", 1, v, err, errlen);
        if (!r) return rc;
        int64_t b = PQntuples(r) ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : -1;
        PQclear(r);
        if (b < 0) {
            a->missing_file = true;
            a->name = k ? "validation_file" : "training_file";
            return PG_OK;
        }
        if ((rc = pg_blob_copy(c, b, &blobs[k], err, errlen)) != PG_OK) return rc;
    }
    char *obj = json_dumps(a->obj, JSON_COMPACT), *settings = json_dumps(a->settings, JSON_COMPACT);
    char created[24], tb[24], vb[24];
    snprintf(created, sizeof created, "%lld", (long long)json_integer_value(json_object_get(a->obj, "created_at")));
    snprintf(tb, sizeof tb, "%" PRId64, blobs[0]);
    snprintf(vb, sizeof vb, "%" PRId64, blobs[1]);
    const char *v[7] = {json_string_value(json_object_get(a->obj, "id")), created,
                        json_string_value(json_object_get(a->obj, "status")), obj, settings, tb,
                        blobs[1] >= 0 ? vb : NULL};
    if (obj && settings)
        q0(c, &rc, "INSERT INTO mnemo_jobs (id, created_at, status, obj, settings, train_blob, valid_blob) VALUES "
                   "($1, $2, $3, $4, $5, $6, $7)", 7, v, err, errlen);
    else rc = PG_ERROR, snprintf(err, errlen, "out of memory");
    free(obj), free(settings);
    if (rc == PG_OK) rc = insert_event(c, v[0], a->event, err, errlen);
    commit(c, &rc, err, errlen);
    return rc;
}

int jpg_create(jpg *p, json_t *obj, json_t *settings, const char *tf, const char *vf, int max_pending, json_t *event,
               api_error *e) {
    job_arg a = {.p = p, .obj = obj, .settings = settings, .tf = tf, .vf = vf, .max_pending = max_pending,
                 .event = event};
    char why[400];
    pg_rc rc = pg_run(p->pool, create_work, &a, why, sizeof why);
    if (rc != PG_OK) return db_e(e, rc, why), -1;
    if (a.full)
        return api_error_set(e, 429, "too_many_jobs", NULL,
                             "%d fine-tuning jobs are already pending (--max-pending-jobs); "
                             "retry when some have finished", max_pending), -1;
    if (a.missing_file)
        return api_error_set(e, 404, "file_not_found", a.name, "no file '%.100s'",
                             !strcmp(a.name, "training_file") ? tf : vf),
               -1;
    return 0;
}

/* ------------------------------------------------------------------ queries */

/* "list" pages: {"object": "list", "data": rows[0..limit), "has_more"} from rows of one JSON column. */
static json_t *page(PGresult *r, int limit) {
    json_t *data = json_array();
    int n = PQntuples(r);
    for (int i = 0; i < n && i < limit; i++) json_array_append_new(data, load_json(PQgetvalue(r, i, 0)));
    return json_pack("{s:s, s:o, s:b}", "object", "list", "data", data, "has_more", n > limit);
}

static bool job_exists(PGconn *c, pg_rc *rc, const char *id, char status[32], char *err, size_t errlen) {
    const char *v[1] = {id};
    PGresult *r = q(c, rc, "SELECT status FROM mnemo_jobs WHERE id = $1", 1, v, err, errlen);
    bool found = r && PQntuples(r) > 0;
    if (found && status) snprintf(status, 32, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    return found;
}

static pg_rc list_work(PGconn *c, void *arg, char *err, size_t errlen) {
    job_arg *a = arg;
    char lim[16];
    snprintf(lim, sizeof lim, "%d", a->limit + 1);
    const char *v[2] = {a->after, lim};
    pg_rc rc = PG_OK;
    PGresult *r = q(c, &rc, "SELECT obj FROM mnemo_jobs WHERE $1::text IS NULL OR NOT EXISTS (SELECT 1 FROM "
                            "mnemo_jobs WHERE id = $1) OR (created_at, id) < (SELECT created_at, id FROM mnemo_jobs "
                            "WHERE id = $1) ORDER BY created_at DESC, id DESC LIMIT $2", 2, v, err, errlen);
    if (r) a->out = page(r, a->limit);
    PQclear(r);
    return rc;
}

json_t *jpg_list(jpg *p, const char *after, int limit, api_error *e) {
    job_arg a = {.p = p, .after = after, .limit = limit};
    char why[400];
    pg_rc rc = pg_run(p->pool, list_work, &a, why, sizeof why);
    if (rc != PG_OK) return json_decref(a.out), db_e(e, rc, why), NULL;
    return a.out;
}

static pg_rc get_work(PGconn *c, void *arg, char *err, size_t errlen) {
    job_arg *a = arg;
    const char *v[1] = {a->id};
    pg_rc rc = PG_OK;
    PGresult *r = q(c, &rc, "SELECT obj FROM mnemo_jobs WHERE id = $1", 1, v, err, errlen);
    if (r && PQntuples(r)) a->out = load_json(PQgetvalue(r, 0, 0));
    PQclear(r);
    return rc;
}

static json_t *no_job(api_error *e, const char *id) {
    api_error_set(e, 404, "job_not_found", "fine_tuning_job_id", "no fine-tuning job '%.100s'", id);
    return NULL;
}

json_t *jpg_get(jpg *p, const char *id, api_error *e) {
    job_arg a = {.p = p, .id = id};
    char why[400];
    pg_rc rc = pg_run(p->pool, get_work, &a, why, sizeof why);
    if (rc != PG_OK) return json_decref(a.out), db_e(e, rc, why), NULL;
    return a.out ? a.out : no_job(e, id);
}

/* Events or checkpoints of a job, newest first, after the row whose "id" is `after`. */
static pg_rc rows_work(PGconn *c, void *arg, char *err, size_t errlen, bool events) {
    job_arg *a = arg;
    pg_rc rc = PG_OK;
    if (!job_exists(c, &rc, a->id, NULL, err, errlen)) return rc;
    a->found = true;
    char lim[16];
    snprintf(lim, sizeof lim, "%d", a->limit + 1);
    const char *v[3] = {a->id, a->after, lim};
    PGresult *r = q(c, &rc,
                    events ? "SELECT ev FROM mnemo_job_events WHERE job_id = $1 AND seq < coalesce((SELECT seq FROM "
                             "mnemo_job_events WHERE job_id = $1 AND ev->>'id' = $2), 9223372036854775807) ORDER BY "
                             "seq DESC LIMIT $3"
                           : "SELECT obj FROM mnemo_job_checkpoints WHERE job_id = $1 AND seq < coalesce((SELECT seq "
                             "FROM mnemo_job_checkpoints WHERE job_id = $1 AND obj->>'id' = $2), 9223372036854775807) "
                             "ORDER BY seq DESC LIMIT $3",
                    3, v, err, errlen);
    if (r) a->out = page(r, a->limit);
    PQclear(r);
    return rc;
}

static pg_rc events_work(PGconn *c, void *arg, char *err, size_t errlen) {
    return rows_work(c, arg, err, errlen, true);
}

static pg_rc ckpts_work(PGconn *c, void *arg, char *err, size_t errlen) {
    return rows_work(c, arg, err, errlen, false);
}

static json_t *rows(jpg *p, const char *id, const char *after, int limit, api_error *e, pg_work w) {
    job_arg a = {.p = p, .id = id, .after = after, .limit = limit};
    char why[400];
    pg_rc rc = pg_run(p->pool, w, &a, why, sizeof why);
    if (rc != PG_OK) return json_decref(a.out), db_e(e, rc, why), NULL;
    return a.found ? a.out : no_job(e, id);
}

json_t *jpg_events(jpg *p, const char *id, const char *after, int limit, api_error *e) {
    return rows(p, id, after, limit, e, events_work);
}

json_t *jpg_checkpoints(jpg *p, const char *id, const char *after, int limit, api_error *e) {
    return rows(p, id, after, limit, e, ckpts_work);
}

static pg_rc since_work(PGconn *c, void *arg, char *err, size_t errlen) {
    job_arg *a = arg;
    pg_rc rc = PG_OK;
    if (!job_exists(c, &rc, a->id, a->status, err, errlen)) return rc;
    a->found = true;
    a->finished = !strcmp(a->status, "succeeded") || !strcmp(a->status, "failed") || !strcmp(a->status, "cancelled");
    char cur[24];
    snprintf(cur, sizeof cur, "%zu", *a->cursor);
    const char *v[2] = {a->id, cur};
    PGresult *r = q(c, &rc, "SELECT seq, ev FROM mnemo_job_events WHERE job_id = $1 AND seq > $2 ORDER BY seq", 2, v,
                    err, errlen);
    if (!r) return rc;
    a->out = json_array();
    for (int i = 0; i < PQntuples(r); i++) {
        json_array_append_new(a->out, load_json(PQgetvalue(r, i, 1)));
        *a->cursor = (size_t)strtoull(PQgetvalue(r, i, 0), NULL, 10);
    }
    PQclear(r);
    return rc;
}

json_t *jpg_events_since(jpg *p, const char *id, size_t *cursor, bool *finished, api_error *e) {
    job_arg a = {.p = p, .id = id, .cursor = cursor};
    char why[400];
    pg_rc rc = pg_run(p->pool, since_work, &a, why, sizeof why);
    if (rc != PG_OK) return json_decref(a.out), db_e(e, rc, why), NULL;
    *finished = a.finished;
    return a.found ? a.out : no_job(e, id);
}

static pg_rc cancel_work(PGconn *c, void *arg, char *err, size_t errlen) {
    job_arg *a = arg;
    pg_rc rc = PG_OK;
    begin(c, &rc, err, errlen);
    const char *v[2] = {a->id, NULL};
    PGresult *r = q(c, &rc, "SELECT status FROM mnemo_jobs WHERE id = $1 FOR UPDATE", 1, v, err, errlen);
    a->found = r && PQntuples(r) > 0;
    if (a->found) snprintf(a->status, sizeof a->status, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    if (!a->found || !strcmp(a->status, "succeeded") || !strcmp(a->status, "failed") ||
        !strcmp(a->status, "cancelled"))
        return rc;
    char now[24];
    snprintf(now, sizeof now, "%lld", (long long)time(NULL));
    v[1] = now;
    r = q(c, &rc, "UPDATE mnemo_jobs SET cancel = true, status = 'cancelled', obj = obj || "
                  "jsonb_build_object('status', 'cancelled', 'finished_at', $2::bigint) WHERE id = $1 RETURNING obj",
          2, v, err, errlen);
    if (r) a->out = load_json(PQgetvalue(r, 0, 0));
    PQclear(r);
    if (rc == PG_OK) rc = insert_event(c, a->id, a->event, err, errlen);
    commit(c, &rc, err, errlen);
    return rc;
}

int jpg_cancel(jpg *p, const char *id, json_t **out, api_error *e) {
    json_t *ev = json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:{}}", "object", "fine_tuning.job.event", "id", "",
                           "created_at", (json_int_t)time(NULL), "level", "info", "message",
                           "Fine-tuning job cancelled", "type", "message", "data");
    job_arg a = {.p = p, .id = id, .event = ev};
    char why[400];
    pg_rc rc = pg_run(p->pool, cancel_work, &a, why, sizeof why);
    json_decref(ev);
    if (rc != PG_OK) return json_decref(a.out), db_e(e, rc, why), -1;
    if (!a.found) return no_job(e, id), -1;
    if (!a.out)
        return api_error_set(e, 409, "job_finished", "fine_tuning_job_id", "the job %s",
                             !strcmp(a.status, "cancelled") ? "was already cancelled"
                             : !strcmp(a.status, "failed")  ? "has already failed"
                                                    : "has already succeeded"), -1;
    *out = a.out;
    return 0;
}

static pg_rc adapter_work(PGconn *c, void *arg, char *err, size_t errlen) {
    job_arg *a = arg;
    const char *v[1] = {a->name};
    pg_rc rc = PG_OK;
    PGresult *r = q(c, &rc, "SELECT job_id, blob FROM mnemo_adapters WHERE name = $1", 1, v, err, errlen);
    if (!r || PQntuples(r) == 0) return PQclear(r), rc;
    a->found = true;
    snprintf(a->dir, sizeof a->dir, "%s/adapters/%s", a->p->dir, PQgetvalue(r, 0, 0));
    int64_t blob = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    PQclear(r);
    char done[4300], pack[4300];
    snprintf(done, sizeof done, "%s/adapter_config.json", a->dir);
    if (access(done, F_OK) == 0) return PG_OK; /* fetched before: an adapter never changes under its name */
    snprintf(pack, sizeof pack, "%s.pack", a->dir);
    uint64_t bytes;
    uint32_t crc;
    if ((rc = pg_blob_get_file(c, blob, pack, &bytes, &crc, err, errlen)) != PG_OK) return rc;
    if (dir_unpack(pack, a->dir, err, errlen) != 0) rc = PG_ERROR;
    unlink(pack);
    return rc;
}

int jpg_adapter_dir(jpg *p, const char *name, char *dir, size_t cap, api_error *e) {
    job_arg a = {.p = p, .name = name};
    char why[400];
    pg_rc rc = pg_run(p->pool, adapter_work, &a, why, sizeof why);
    if (rc != PG_OK) return db_e(e, rc, why), -1;
    if (!a.found) return api_error_set(e, 404, "model_not_found", "model", "the model '%.200s' does not exist",
                                       name), -1;
    snprintf(dir, cap, "%s", a.dir);
    return 0;
}

static pg_rc models_work(PGconn *c, void *arg, char *err, size_t errlen) {
    job_arg *a = arg;
    pg_rc rc = PG_OK;
    PGresult *r = q(c, &rc, "SELECT a.name, coalesce((j.obj->>'finished_at')::bigint, a.created_at) FROM "
                            "mnemo_adapters a JOIN mnemo_jobs j ON j.id = a.job_id ORDER BY j.created_at, j.id",
                    0, NULL, err, errlen);
    for (int i = 0; r && i < PQntuples(r); i++)
        json_array_append_new(a->data, json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", PQgetvalue(r, i, 0), "object",
                                                 "model", "created", (json_int_t)strtoll(PQgetvalue(r, i, 1), NULL, 10),
                                                 "owned_by", "mnemo", "parent", a->name));
    PQclear(r);
    return rc;
}

void jpg_models(jpg *p, json_t *arr, const char *base_name) {
    job_arg a = {.p = p, .data = arr, .name = base_name};
    char why[400];
    pg_run(p->pool, models_work, &a, why, sizeof why); /* the database away: the base model alone is listed */
}

static pg_rc stats_work(PGconn *c, void *arg, char *err, size_t errlen) {
    job_arg *a = arg;
    pg_rc rc = PG_OK;
    PGresult *r = q(c, &rc, "SELECT status, count(*) FROM mnemo_jobs GROUP BY status", 0, NULL, err, errlen);
    for (int i = 0; r && i < PQntuples(r); i++)
        for (int s = 0; s < 6; s++)
            if (!strcmp(PQgetvalue(r, i, 0), STATUS6[s])) a->by_status[s] = atoi(PQgetvalue(r, i, 1));
    PQclear(r);
    return rc;
}

void jpg_stats(jpg *p, int by_status[6]) {
    job_arg a = {.p = p};
    char why[400];
    pg_run(p->pool, stats_work, &a, why, sizeof why);
    memcpy(by_status, a.by_status, sizeof a.by_status);
}

/* ------------------------------------------------------------------ the supervisor's side */

typedef struct {
    jpg *p;
    bool validating, got;
    jpg_claimed *c;
    int64_t train_blob, valid_blob, ckpt_blob;
    char *settings;
} claim_arg;

static pg_rc claim_work(PGconn *c, void *arg, char *err, size_t errlen) {
    claim_arg *a = arg;
    const char *v[2] = {a->p->node, a->p->lease};
    pg_rc rc = PG_OK;
    PGresult *r = q(c, &rc, a->validating
        ? "WITH c AS (SELECT id, status, lease_owner FROM mnemo_jobs WHERE status = 'validating_files' AND NOT cancel "
          "AND (lease_until IS NULL OR lease_until < now()) ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) "
          "UPDATE mnemo_jobs j SET lease_owner = $1, lease_until = now() + make_interval(secs => $2::float8) FROM c "
          "WHERE j.id = c.id RETURNING j.id, c.status, coalesce(c.lease_owner, ''), j.obj, j.settings, j.train_blob, "
          "coalesce(j.valid_blob, -1), coalesce(j.ckpt_blob, -1), coalesce(j.ckpt_step, -1)"
        : "WITH c AS (SELECT id, status, lease_owner FROM mnemo_jobs WHERE NOT cancel AND (status = 'queued' OR "
          "(status = 'running' AND lease_until < now())) ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) "
          "UPDATE mnemo_jobs j SET lease_owner = $1, lease_until = now() + make_interval(secs => $2::float8), "
          "status = 'running', obj = j.obj || '{\"status\": \"running\"}' FROM c WHERE j.id = c.id RETURNING j.id, "
          "c.status, coalesce(c.lease_owner, ''), j.obj, j.settings, j.train_blob, coalesce(j.valid_blob, -1), "
          "coalesce(j.ckpt_blob, -1), coalesce(j.ckpt_step, -1)",
        2, v, err, errlen);
    if (!r || PQntuples(r) == 0) return PQclear(r), rc;
    a->got = true;
    jpg_claimed *cl = a->c;
    snprintf(cl->id, sizeof cl->id, "%s", PQgetvalue(r, 0, 0));
    cl->was_running = !strcmp(PQgetvalue(r, 0, 1), "running");
    snprintf(cl->prev_node, sizeof cl->prev_node, "%s", PQgetvalue(r, 0, 2));
    cl->obj = load_json(PQgetvalue(r, 0, 3));
    a->settings = strdup(PQgetvalue(r, 0, 4));
    a->train_blob = strtoll(PQgetvalue(r, 0, 5), NULL, 10);
    a->valid_blob = strtoll(PQgetvalue(r, 0, 6), NULL, 10);
    a->ckpt_blob = strtoll(PQgetvalue(r, 0, 7), NULL, 10);
    cl->ckpt_step = strtoll(PQgetvalue(r, 0, 8), NULL, 10);
    PQclear(r);
    return rc;
}

typedef struct {
    jpg *p;
    const char *id;
    int64_t blobs[3];
    const char *paths[3];
} fetch_arg;

static pg_rc fetch_work(PGconn *c, void *arg, char *err, size_t errlen) {
    fetch_arg *a = arg;
    pg_rc rc = pg_simple(c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", err, errlen);
    for (int k = 0; k < 3 && rc == PG_OK; k++) {
        uint64_t bytes;
        uint32_t crc;
        if (a->blobs[k] >= 0) rc = pg_blob_get_file(c, a->blobs[k], a->paths[k], &bytes, &crc, err, errlen);
    }
    commit(c, &rc, err, errlen);
    return rc;
}

/* Lays out jobs/<id>/: the data, the settings, and out/ as of the last checkpoint (nothing left of an older run). */
static int lay_out(jpg *p, claim_arg *a, char *err, size_t errlen) {
    char dir[4200], out[4300], train[4300], valid[4300], pack[4300], path[4400];
    snprintf(dir, sizeof dir, "%s/jobs/%s", p->dir, a->c->id);
    snprintf(out, sizeof out, "%s/out", dir);
    mkdir(dir, 0755);
    mkdir(out, 0755);
    static const char *const OUT_FILES[] = {"train_state.mnemo", "adapter_config.json", "adapter_model.safetensors",
                                            "trainable_params.safetensors", NULL};
    for (int i = 0; OUT_FILES[i]; i++) snprintf(path, sizeof path, "%s/%s", out, OUT_FILES[i]), unlink(path);
    snprintf(train, sizeof train, "%s/train.jsonl", dir);
    snprintf(valid, sizeof valid, "%s/valid.jsonl", dir);
    snprintf(pack, sizeof pack, "%s/checkpoint.pack", dir);
    unlink(valid);
    fetch_arg f = {.p = p, .id = a->c->id, .blobs = {a->train_blob, a->valid_blob, a->ckpt_blob},
                   .paths = {train, valid, pack}};
    if (pg_run(p->pool, fetch_work, &f, err, errlen) != PG_OK) return -1;
    if (a->ckpt_blob >= 0) {
        int rc = dir_unpack(pack, out, err, errlen);
        unlink(pack);
        if (rc != 0) return -1;
    }
    snprintf(path, sizeof path, "%s/train.json", dir);
    FILE *fs = fopen(path, "w");
    bool ok = fs && fputs(a->settings, fs) >= 0;
    if (fs && fclose(fs) != 0) ok = false;
    if (!ok) return snprintf(err, errlen, "cannot write %s", path), -1;
    return 0;
}

static pg_rc unclaim_work(PGconn *c, void *arg, char *err, size_t errlen) {
    claim_arg *a = arg;
    const char *v[2] = {a->c->id, a->p->node};
    pg_rc rc = PG_OK;
    q0(c, &rc, "UPDATE mnemo_jobs SET lease_until = now() WHERE id = $1 AND lease_owner = $2", 2, v, err, errlen);
    return rc;
}

int jpg_claim(jpg *p, bool validating, jpg_claimed *c) {
    memset(c, 0, sizeof *c);
    claim_arg a = {.p = p, .validating = validating, .c = c};
    char why[400];
    pg_rc rc = pg_run(p->pool, claim_work, &a, why, sizeof why);
    if (rc != PG_OK || !a.got) {
        free(a.settings);
        json_decref(c->obj);
        c->obj = NULL;
        return rc == PG_OK ? 0 : -1;
    }
    if (lay_out(p, &a, why, sizeof why) != 0) { /* let another node (or a later try) have it */
        warn("cannot lay out its directory", c->id, why);
        pg_run(p->pool, unclaim_work, &a, why, sizeof why);
        free(a.settings);
        json_decref(c->obj);
        c->obj = NULL;
        return -1;
    }
    free(a.settings);
    return 1;
}

typedef struct {
    jpg *p;
    const char *id, *status, *name;
    json_t *obj, *ckpt, *event;
    char *settings;
    int64_t step;
    bool ours, cancel;
    const char *pack;
} write_arg;

static pg_rc persist_work(PGconn *c, void *arg, char *err, size_t errlen) {
    write_arg *a = arg;
    char *obj = json_dumps(a->obj, JSON_COMPACT);
    if (!obj) return snprintf(err, errlen, "out of memory"), PG_ERROR;
    const char *v[5] = {a->id, a->status, obj, a->p->node, a->settings};
    pg_rc rc = PG_OK;
    PGresult *r = q(c, &rc, "UPDATE mnemo_jobs SET status = $2, obj = $3, settings = coalesce($5::jsonb, settings), "
                            "lease_owner = CASE WHEN $2 IN ('running', 'validating_files') THEN lease_owner END, "
                            "lease_until = CASE WHEN $2 IN ('running', 'validating_files') THEN lease_until END "
                            "WHERE id = $1 AND lease_owner = $4 AND (NOT cancel OR $2 = 'cancelled')",
                    5, v, err, errlen);
    a->ours = r && atoi(PQcmdTuples(r)) > 0;
    PQclear(r);
    free(obj);
    return rc;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0;
    FILE *m = open_memstream(&buf, &cap);
    char chunk[4096];
    for (size_t n; m && (n = fread(chunk, 1, sizeof chunk, f)) > 0;) fwrite(chunk, 1, n, m);
    fclose(f);
    if (m) fclose(m);
    return buf;
}

bool jpg_persist(jpg *p, const char *id, const char *status, json_t *obj) {
    char path[4300], why[400];
    snprintf(path, sizeof path, "%s/jobs/%s/train.json", p->dir, id);
    write_arg a = {.p = p, .id = id, .status = status, .obj = obj, .settings = read_text(path)};
    pg_rc rc = pg_run(p->pool, persist_work, &a, why, sizeof why);
    free(a.settings);
    if (rc != PG_OK) warn("cannot write its status", id, why);
    return rc == PG_OK && a.ours;
}

static pg_rc event_work(PGconn *c, void *arg, char *err, size_t errlen) {
    write_arg *a = arg;
    return insert_event(c, a->id, a->event, err, errlen);
}

void jpg_event(jpg *p, const char *id, json_t *event) {
    write_arg a = {.p = p, .id = id, .event = event};
    char why[400];
    if (pg_run(p->pool, event_work, &a, why, sizeof why) != PG_OK) warn("an event was not stored", id, why);
}

/* The row locked if this node holds the lease; *old_blob its checkpoint blob (-1 none). */
static bool lock_ours(PGconn *c, pg_rc *rc, write_arg *a, int64_t *old_blob, char *err, size_t errlen) {
    const char *v[2] = {a->id, a->p->node};
    PGresult *r = q(c, rc, "SELECT coalesce(ckpt_blob, -1) FROM mnemo_jobs WHERE id = $1 AND lease_owner = $2 FOR "
                           "UPDATE", 2, v, err, errlen);
    a->ours = r && PQntuples(r) > 0;
    *old_blob = a->ours ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : -1;
    PQclear(r);
    return a->ours;
}

/* Opens the transaction of a write that stores a->pack: the job must still be this node's (else false), then the
 * pack goes in as a blob, its id in *blob. *old_blob: the checkpoint blob it replaces (-1: none). */
static bool begin_pack_write(PGconn *c, pg_rc *rc, write_arg *a, int64_t *old_blob, int64_t *blob, char *err,
                             size_t errlen) {
    uint64_t bytes;
    uint32_t crc;
    *blob = -1;
    begin(c, rc, err, errlen);
    if (!lock_ours(c, rc, a, old_blob, err, errlen)) return false;
    if (*rc == PG_OK) *rc = pg_blob_put_file(c, a->pack, blob, &bytes, &crc, err, errlen);
    return true;
}

static pg_rc checkpoint_work(PGconn *c, void *arg, char *err, size_t errlen) {
    write_arg *a = arg;
    pg_rc rc = PG_OK;
    int64_t old_blob, blob;
    if (!begin_pack_write(c, &rc, a, &old_blob, &blob, err, errlen)) return rc;
    char b[24], s[24];
    snprintf(b, sizeof b, "%" PRId64, blob);
    snprintf(s, sizeof s, "%" PRId64, a->step);
    char *ck = json_dumps(a->ckpt, JSON_COMPACT);
    const char *v[3] = {a->id, b, s};
    q0(c, &rc, "UPDATE mnemo_jobs SET ckpt_blob = $2, ckpt_step = $3 WHERE id = $1", 3, v, err, errlen);
    const char *vc[2] = {a->id, ck};
    if (ck) q0(c, &rc, "INSERT INTO mnemo_job_checkpoints (job_id, obj) VALUES ($1, $2)", 2, vc, err, errlen);
    free(ck);
    if (rc == PG_OK && old_blob >= 0) rc = pg_blob_delete(c, old_blob, err, errlen);
    commit(c, &rc, err, errlen);
    return rc;
}

bool jpg_checkpoint(jpg *p, const char *id, int64_t step, json_t *ckpt) {
    char out[4300], pack[4300], why[400];
    snprintf(out, sizeof out, "%s/jobs/%s/out", p->dir, id);
    snprintf(pack, sizeof pack, "%s/jobs/%s/upload.pack", p->dir, id);
    if (dir_pack(out, NULL, pack, why, sizeof why) != 0) return warn("cannot pack its checkpoint", id, why), false;
    write_arg a = {.p = p, .id = id, .step = step, .ckpt = ckpt, .pack = pack};
    pg_rc rc = pg_run(p->pool, checkpoint_work, &a, why, sizeof why);
    unlink(pack);
    if (rc != PG_OK) warn("a checkpoint was not stored", id, why);
    return rc == PG_OK && a.ours;
}

static pg_rc renew_work(PGconn *c, void *arg, char *err, size_t errlen) {
    write_arg *a = arg;
    const char *v[3] = {a->id, a->p->node, a->p->lease};
    pg_rc rc = PG_OK;
    PGresult *r = q(c, &rc, "UPDATE mnemo_jobs SET lease_until = now() + make_interval(secs => $3::float8) WHERE id = "
                            "$1 AND lease_owner = $2 RETURNING cancel", 3, v, err, errlen);
    a->ours = r && PQntuples(r) > 0;
    a->cancel = a->ours && !strcmp(PQgetvalue(r, 0, 0), "t");
    PQclear(r);
    return rc;
}

bool jpg_renew(jpg *p, const char *id, bool *cancel) {
    write_arg a = {.p = p, .id = id};
    char why[400];
    pg_rc rc = pg_run(p->pool, renew_work, &a, why, sizeof why);
    *cancel = a.cancel;
    /* the database away is not a lost lease: the lease runs out only if it stays away, and then writes fail */
    return rc != PG_OK || a.ours;
}

static pg_rc finish_work(PGconn *c, void *arg, char *err, size_t errlen) {
    write_arg *a = arg;
    pg_rc rc = PG_OK;
    int64_t old_blob, blob;
    if (!begin_pack_write(c, &rc, a, &old_blob, &blob, err, errlen)) return rc;
    char b[24], now[24];
    snprintf(b, sizeof b, "%" PRId64, blob);
    snprintf(now, sizeof now, "%lld", (long long)time(NULL));
    const char *v[4] = {a->name, a->id, b, now};
    q0(c, &rc, "INSERT INTO mnemo_adapters (name, job_id, blob, created_at) VALUES ($1, $2, $3, $4)", 4, v, err,
       errlen);
    if (rc != PG_OK) return rc;
    rc = persist_work(c, a, err, errlen);
    commit(c, &rc, err, errlen);
    return rc;
}

bool jpg_finish(jpg *p, const char *id, const char *name, json_t *obj) {
    char out[4300], pack[4300], why[400];
    snprintf(out, sizeof out, "%s/jobs/%s/out", p->dir, id);
    snprintf(pack, sizeof pack, "%s/jobs/%s/adapter.pack", p->dir, id);
    if (dir_pack(out, "train_state.mnemo", pack, why, sizeof why) != 0)
        return warn("cannot pack its adapter", id, why), false;
    write_arg a = {.p = p, .id = id, .name = name, .obj = obj, .status = "succeeded", .pack = pack};
    pg_rc rc = pg_run(p->pool, finish_work, &a, why, sizeof why);
    unlink(pack);
    if (rc != PG_OK) warn("its adapter was not stored", id, why);
    return rc == PG_OK && a.ours;
}

void jpg_release(jpg *p, const char *id, json_t *obj) {
    json_t *o = json_deep_copy(obj);
    json_object_set_new(o, "status", json_string("queued"));
    jpg_persist(p, id, "queued", o);
    json_decref(o);
}
