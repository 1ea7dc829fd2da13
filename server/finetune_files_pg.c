/*
 * finetune_files_pg.c — see finetune_files_pg.h. Each call is one transaction; an upload takes an advisory lock
 * while it counts the files, so --max-files holds across nodes, and writes the bytes and the row together.
 */
#include "finetune_files_pg.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pg_blob.h"

struct ffpg {
    pg_pool *pool;
    char dir[4096]; /* <work_dir>/files: fetched bytes */
    int max_files;
};

static void db_fail(api_error *e, pg_rc rc, const char *what, const char *why) {
    if (rc == PG_UNAVAILABLE)
        api_error_set(e, 503, "state_unavailable", NULL, "the state database is unavailable (%s); retry shortly", why);
    else api_error_set(e, 500, "server_error", NULL, "%s: %s", what, why);
}

ffpg *ffpg_open(pg_pool *pool, const char *work_dir, int max_files, char *err, size_t errlen) {
    ffpg *f = calloc(1, sizeof *f);
    if (!f) return snprintf(err, errlen, "out of memory"), NULL;
    snprintf(f->dir, sizeof f->dir, "%s/files", work_dir);
    if (mkdir(f->dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create %s: %s", f->dir, strerror(errno));
        free(f);
        return NULL;
    }
    f->pool = pool;
    f->max_files = max_files > 0 ? max_files : 1;
    return f;
}

void ffpg_close(ffpg *f) { free(f); }

typedef struct {
    ffpg *f;
    json_t *obj;
    const char *data, *id, *purpose;
    size_t len;
    bool full, found;
    json_t *rows;
    int64_t blob;
    long long count;
} files_arg;

static pg_rc create_work(PGconn *c, void *arg, char *err, size_t errlen) {
    files_arg *a = arg;
    pg_rc rc = pg_simple(c, "BEGIN", err, errlen);
    if (rc == PG_OK) rc = pg_simple(c, "SELECT pg_advisory_xact_lock(7366324462)", err, errlen); /* the file count */
    PGresult *r = rc == PG_OK ? pg_exec(c, "SELECT count(*) FROM mnemo_files", 0, NULL, NULL, NULL, 0, err, errlen)
                              : NULL;
    if (!r) return rc == PG_OK ? pg_last_failure() : rc;
    a->full = strtoll(PQgetvalue(r, 0, 0), NULL, 10) >= a->f->max_files;
    PQclear(r);
    if (a->full) return PG_OK; /* rolled back by the pool */
    int64_t blob;
    if ((rc = pg_blob_put_mem(c, a->data, a->len, &blob, err, errlen)) != PG_OK) return rc;
    char *text = json_dumps(a->obj, JSON_COMPACT);
    char b[24], created[24];
    snprintf(b, sizeof b, "%" PRId64, blob);
    snprintf(created, sizeof created, "%lld", (long long)json_integer_value(json_object_get(a->obj, "created_at")));
    const char *v[5] = {json_string_value(json_object_get(a->obj, "id")), created,
                        json_string_value(json_object_get(a->obj, "purpose")), text, b};
    r = text ? pg_exec(c, "INSERT INTO mnemo_files (id, created_at, purpose, obj, blob) VALUES ($1, $2, $3, $4, $5)", 5,
                       v, NULL, NULL, 0, err, errlen)
             : NULL;
    free(text);
    if (!r) return pg_last_failure();
    PQclear(r);
    return pg_simple(c, "COMMIT", err, errlen);
}

int ffpg_create(ffpg *f, json_t *obj, const char *data, size_t len, api_error *e) {
    files_arg a = {.f = f, .obj = obj, .data = data, .len = len};
    char why[400];
    pg_rc rc = pg_run(f->pool, create_work, &a, why, sizeof why);
    if (rc != PG_OK) return db_fail(e, rc, "cannot store the file", why), -1;
    if (a.full)
        return api_error_set(e, 429, "too_many_files", NULL, "%d files are kept already (--max-files): delete some "
                             "first", f->max_files), -1;
    return 0;
}

/* Every file object, in upload order (the table's insertion order breaks ties of created_at). */
static pg_rc list_work(PGconn *c, void *arg, char *err, size_t errlen) {
    files_arg *a = arg;
    PGresult *r = pg_exec(c, "SELECT obj FROM mnemo_files ORDER BY seq", 0, NULL, NULL,
                          NULL, 0, err, errlen);
    if (!r) return pg_last_failure();
    a->rows = json_array();
    for (int i = 0; i < PQntuples(r); i++) json_array_append_new(a->rows, json_loads(PQgetvalue(r, i, 0), 0, NULL));
    PQclear(r);
    return PG_OK;
}

json_t *ffpg_list(ffpg *f, const char *purpose, const char *after, int limit, bool ascending, api_error *e) {
    files_arg a = {.f = f};
    char why[400];
    pg_rc rc = pg_run(f->pool, list_work, &a, why, sizeof why);
    if (rc != PG_OK) {
        json_decref(a.rows);
        return db_fail(e, rc, "cannot list the files", why), NULL;
    }
    if (limit < 1) limit = 1;
    if (limit > 10000) limit = 10000;
    json_t *data = json_array();
    size_t n = json_array_size(a.rows);
    bool has_more = false, found_after = after == NULL;
    for (size_t k = 0; k < n; k++) {
        json_t *o = json_array_get(a.rows, ascending ? k : n - 1 - k);
        const char *id = json_string_value(json_object_get(o, "id"));
        if (!found_after) {
            found_after = id && !strcmp(id, after);
            continue;
        }
        const char *p = json_string_value(json_object_get(o, "purpose"));
        if (purpose && (!p || strcmp(p, purpose) != 0)) continue;
        if (json_array_size(data) == (size_t)limit) {
            has_more = true;
            break;
        }
        json_array_append(data, o);
    }
    json_decref(a.rows);
    if (!found_after) {
        json_decref(data);
        api_error_set(e, 404, "file_not_found", "after", "no file to list after");
        return NULL;
    }
    size_t m = json_array_size(data);
    json_t *first = m ? json_object_get(json_array_get(data, 0), "id") : NULL;
    json_t *last = m ? json_object_get(json_array_get(data, m - 1), "id") : NULL;
    return json_pack("{s:s, s:o, s:O, s:O, s:b}", "object", "list", "data", data, "first_id",
                     first ? first : json_null(), "last_id", last ? last : json_null(), "has_more", has_more);
}

static pg_rc get_work(PGconn *c, void *arg, char *err, size_t errlen) {
    files_arg *a = arg;
    const char *v[1] = {a->id};
    PGresult *r = pg_exec(c, "SELECT obj, blob FROM mnemo_files WHERE id = $1", 1, v, NULL, NULL, 0, err, errlen);
    if (!r) return pg_last_failure();
    a->found = PQntuples(r) > 0;
    if (a->found) a->obj = json_loads(PQgetvalue(r, 0, 0), 0, NULL), a->blob = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    PQclear(r);
    return PG_OK;
}

json_t *ffpg_get(ffpg *f, const char *id, api_error *e) {
    files_arg a = {.f = f, .id = id};
    char why[400];
    pg_rc rc = pg_run(f->pool, get_work, &a, why, sizeof why);
    if (rc != PG_OK) return db_fail(e, rc, "cannot read the file", why), NULL;
    if (!a.found) api_error_set(e, 404, "file_not_found", "file_id", "No such File object: %s", id);
    return a.obj;
}

static pg_rc delete_work(PGconn *c, void *arg, char *err, size_t errlen) {
    files_arg *a = arg;
    const char *v[1] = {a->id};
    pg_rc rc = pg_simple(c, "BEGIN", err, errlen);
    PGresult *r = rc == PG_OK ? pg_exec(c, "DELETE FROM mnemo_files WHERE id = $1 RETURNING blob", 1, v, NULL, NULL, 0,
                                        err, errlen)
                              : NULL;
    if (!r) return rc == PG_OK ? pg_last_failure() : rc;
    a->found = PQntuples(r) > 0;
    int64_t blob = a->found ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : -1;
    PQclear(r);
    if (blob >= 0 && (rc = pg_blob_delete(c, blob, err, errlen)) != PG_OK) return rc;
    return pg_simple(c, "COMMIT", err, errlen);
}

int ffpg_delete(ffpg *f, const char *id, api_error *e) {
    files_arg a = {.f = f, .id = id};
    char why[400], path[4200];
    pg_rc rc = pg_run(f->pool, delete_work, &a, why, sizeof why);
    if (rc != PG_OK) return db_fail(e, rc, "cannot delete the file", why), -2;
    snprintf(path, sizeof path, "%s/%s.jsonl", f->dir, id);
    unlink(path);
    if (!a.found) return api_error_set(e, 404, "file_not_found", "file_id", "No such File object: %s", id), -1;
    return 0;
}

static pg_rc fetch_work(PGconn *c, void *arg, char *err, size_t errlen) {
    files_arg *a = arg;
    pg_rc rc = get_work(c, arg, err, errlen);
    json_decref(a->obj);
    a->obj = NULL;
    if (rc != PG_OK || !a->found) return rc;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.jsonl", a->f->dir, a->id);
    if (access(path, F_OK) == 0) return PG_OK; /* fetched before: bytes never change under an id */
    uint64_t bytes;
    uint32_t crc;
    return pg_blob_get_file(c, a->blob, path, &bytes, &crc, err, errlen);
}

bool ffpg_path(ffpg *f, const char *id, char *out, size_t cap, api_error *e) {
    files_arg a = {.f = f, .id = id};
    char why[400];
    pg_rc rc = pg_run(f->pool, fetch_work, &a, why, sizeof why);
    if (rc != PG_OK) return db_fail(e, rc, "cannot read the file", why), false;
    if (!a.found) return api_error_set(e, 404, "file_not_found", "file_id", "No such File object: %s", id), false;
    snprintf(out, cap, "%s/%s.jsonl", f->dir, id);
    return true;
}

static pg_rc count_work(PGconn *c, void *arg, char *err, size_t errlen) {
    files_arg *a = arg;
    PGresult *r = pg_exec(c, "SELECT count(*) FROM mnemo_files", 0, NULL, NULL, NULL, 0, err, errlen);
    if (!r) return pg_last_failure();
    a->count = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return PG_OK;
}

size_t ffpg_count(ffpg *f) {
    files_arg a = {.f = f};
    char why[400];
    return pg_run(f->pool, count_work, &a, why, sizeof why) == PG_OK ? (size_t)a.count : 0;
}
