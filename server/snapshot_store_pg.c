/*
 * snapshot_store_pg.c — snapshots in the state database (see snapshot_store.h).
 *
 * Save: the engine writes the snapshot into the cache directory; one transaction then checks the version (a fast 409
 * before any byte moves), uploads the bytes as a new blob, locks the name's row (SELECT ... FOR UPDATE), checks the
 * version again, points the row at the new blob with version + 1, and deletes the old blob. A concurrent writer
 * either waits for the lock and then finds the version moved (409) or, for a new name, hits the primary key (409):
 * nothing is half-written, whatever fails. Load: one REPEATABLE READ transaction reads the row and then the blob's
 * chunks, so a save committing meanwhile cannot mix two versions; the bytes are checked against the row's size and
 * CRC-32 and the snapshot magic before the engine (which checks the format's own trailer CRC) reads them.
 *
 * The cache keeps "<name>.v<version>.mnemo" for the last version of each name this node saved or read; a load uses
 * it only when the row says that version is still the latest, so no node ever serves a stale snapshot.
 */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pg_blob.h"
#include "pg_pool.h"
#include "snapshot_store.h"

typedef struct {
    snapshot_store base;
    pg_pool *pool;
    char dir[4096];
    char node[128];
} pg_store;

static void cache_path(const pg_store *s, const char *name, int64_t version, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s.v%" PRId64 ".mnemo", s->dir, name, version);
}

/* Drops every cached version of name but keep (-1: all). */
static void cache_forget(const pg_store *s, const char *name, int64_t keep) {
    DIR *d = opendir(s->dir);
    size_t n = strlen(name);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, name, n) != 0 || strncmp(e->d_name + n, ".v", 2) != 0) continue;
        char *end;
        long long v = strtoll(e->d_name + n + 2, &end, 10);
        if (strcmp(end, ".mnemo") != 0 || v == keep) continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", s->dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
}

static int db_status(pg_rc rc, const char *what, char *err, size_t errlen) {
    if (rc == PG_UNAVAILABLE) {
        char why[384];
        snprintf(why, sizeof why, "%s", err);
        snprintf(err, errlen, "the state database is unavailable (%s); retry shortly", why);
    } else if (rc == PG_ERROR && what) {
        char why[384];
        snprintf(why, sizeof why, "%s", err);
        snprintf(err, errlen, "%s: %s", what, why);
    }
    return pg_http_status(rc);
}

/* ------------------------------------------------------------------ save */

typedef struct {
    pg_store *s;
    const char *name, *path;
    int64_t if_version, version;
    uint64_t bytes;
} save_arg;

/* The row's version and blob (version 0 when there is no row). for_update: lock it. */
static pg_rc current(PGconn *c, const char *name, bool for_update, int64_t *version, int64_t *blob, char *err,
                     size_t errlen) {
    const char *v[1] = {name};
    PGresult *r = pg_exec(c, for_update ? "SELECT version, blob FROM mnemo_snapshots WHERE name = $1 FOR UPDATE"
                                        : "SELECT version, blob FROM mnemo_snapshots WHERE name = $1",
                          1, v, NULL, NULL, 0, err, errlen);
    if (!r) return pg_last_failure();
    *version = PQntuples(r) ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
    *blob = PQntuples(r) ? strtoll(PQgetvalue(r, 0, 1), NULL, 10) : -1;
    PQclear(r);
    return PG_OK;
}

static pg_rc cas_failed(save_arg *a, int64_t found, char *err, size_t errlen) {
    snprintf(err, errlen, "snapshot '%s' is at version %" PRId64 ", not %" PRId64 ": another writer saved it first; "
             "restore it and save again", a->name, found, a->if_version);
    return PG_CONFLICT;
}

static pg_rc save_work(PGconn *c, void *arg, char *err, size_t errlen) {
    save_arg *a = arg;
    int64_t version, old_blob, blob;
    uint32_t crc;
    pg_rc rc = pg_simple(c, "BEGIN", err, errlen);
    if (rc == PG_OK) rc = current(c, a->name, false, &version, &old_blob, err, errlen);
    if (rc == PG_OK && a->if_version >= 0 && version != a->if_version) return cas_failed(a, version, err, errlen);
    if (rc == PG_OK) rc = pg_blob_put_file(c, a->path, &blob, &a->bytes, &crc, err, errlen);
    if (rc == PG_OK) rc = current(c, a->name, true, &version, &old_blob, err, errlen);
    if (rc == PG_OK && a->if_version >= 0 && version != a->if_version) return cas_failed(a, version, err, errlen);
    if (rc != PG_OK) return rc;
    char ver[24], bl[24], by[24], cr[16], mod[24];
    a->version = version + 1;
    snprintf(ver, sizeof ver, "%" PRId64, a->version);
    snprintf(bl, sizeof bl, "%" PRId64, blob);
    snprintf(by, sizeof by, "%" PRIu64, a->bytes);
    snprintf(cr, sizeof cr, "%u", crc);
    snprintf(mod, sizeof mod, "%lld", (long long)time(NULL));
    const char *v[7] = {a->name, ver, bl, by, cr, mod, a->s->node};
    PGresult *r = pg_exec(c, version ? "UPDATE mnemo_snapshots SET version = $2, blob = $3, bytes = $4, crc32 = $5, "
                                       "modified = $6, saved_by = $7 WHERE name = $1"
                                     : "INSERT INTO mnemo_snapshots (name, version, blob, bytes, crc32, modified, "
                                       "saved_by) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                          7, v, NULL, NULL, 0, err, errlen);
    if (!r) {
        rc = pg_last_failure();
        if (rc == PG_CONFLICT) /* a new name that another writer created meanwhile */
            snprintf(err, errlen, "snapshot '%s' was created by another writer meanwhile; restore it and save again",
                     a->name);
        return rc;
    }
    PQclear(r);
    if (old_blob >= 0) rc = pg_blob_delete(c, old_blob, err, errlen);
    if (rc == PG_OK) rc = pg_simple(c, "COMMIT", err, errlen);
    return rc;
}

static int pg_save(snapshot_store *base, const char *name, snapshot_io_fn write, void *arg, int64_t if_version,
                   snapshot_info *out, mnemo_status *ms, char *err, size_t errlen) {
    pg_store *s = (pg_store *)base;
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s/.save-XXXXXX", s->dir);
    int fd = mkstemp(tmp);
    if (fd < 0) return snprintf(err, errlen, "cannot write in the snapshot cache: %s", strerror(errno)), 500;
    close(fd);
    if ((*ms = write(arg, tmp)) != MNEMO_OK) {
        unlink(tmp);
        return 500;
    }
    save_arg a = {.s = s, .name = name, .path = tmp, .if_version = if_version};
    pg_rc rc = pg_run(s->pool, save_work, &a, err, errlen);
    if (rc != PG_OK) {
        unlink(tmp);
        return db_status(rc, "cannot save the snapshot", err, errlen);
    }
    char path[4400];
    cache_path(s, name, a.version, path, sizeof path);
    if (rename(tmp, path) != 0) unlink(tmp);
    cache_forget(s, name, a.version);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    out->bytes = a.bytes, out->version = a.version, out->modified = (long long)time(NULL);
    return 200;
}

/* ------------------------------------------------------------------ load */

typedef struct {
    pg_store *s;
    const char *name;
    char path[4400];
    int64_t version;
    bool found, corrupt;
} load_arg;

static bool file_size_is(const char *path, uint64_t bytes) {
    struct stat sb;
    return stat(path, &sb) == 0 && (uint64_t)sb.st_size == bytes;
}

static pg_rc load_work(PGconn *c, void *arg, char *err, size_t errlen) {
    load_arg *a = arg;
    a->found = a->corrupt = false;
    pg_rc rc = pg_simple(c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", err, errlen);
    const char *v[1] = {a->name};
    PGresult *r = rc == PG_OK ? pg_exec(c, "SELECT version, blob, bytes, crc32 FROM mnemo_snapshots WHERE name = $1",
                                        1, v, NULL, NULL, 0, err, errlen)
                              : NULL;
    if (!r) return rc == PG_OK ? pg_last_failure() : rc;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return pg_simple(c, "COMMIT", err, errlen);
    }
    a->found = true;
    a->version = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    int64_t blob = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    uint64_t bytes = strtoull(PQgetvalue(r, 0, 2), NULL, 10);
    uint32_t crc = (uint32_t)strtoul(PQgetvalue(r, 0, 3), NULL, 10);
    PQclear(r);
    cache_path(a->s, a->name, a->version, a->path, sizeof a->path);
    if (!file_size_is(a->path, bytes)) { /* not cached (or cut short): fetch it */
        uint64_t got;
        uint32_t got_crc;
        rc = pg_blob_get_file(c, blob, a->path, &got, &got_crc, err, errlen);
        if (rc != PG_OK) return rc;
        if (got != bytes || got_crc != crc) {
            unlink(a->path);
            a->corrupt = true;
            snprintf(err, errlen, "snapshot '%s' version %" PRId64 " is damaged in the database: %" PRIu64 " bytes, "
                     "CRC-32 %08x read; %" PRIu64 " bytes, CRC-32 %08x written", a->name, a->version, got, got_crc,
                     bytes, crc);
        }
    }
    return pg_simple(c, "COMMIT", err, errlen);
}

static int pg_load(snapshot_store *base, const char *name, snapshot_io_fn read, void *arg, int64_t *version,
                   mnemo_status *ms, char *err, size_t errlen) {
    pg_store *s = (pg_store *)base;
    load_arg a = {.s = s, .name = name};
    *ms = MNEMO_OK;
    pg_rc rc = pg_run(s->pool, load_work, &a, err, errlen);
    if (rc != PG_OK) return db_status(rc, "cannot read the snapshot", err, errlen);
    if (!a.found) return snprintf(err, errlen, "no snapshot named '%s'", name), 404;
    if (a.corrupt) return 500;
    FILE *f = fopen(a.path, "rb");
    char magic[8] = {0};
    bool ok = f && fread(magic, 1, 8, f) == 8 && !memcmp(magic, "MNEMOSN1", 8);
    if (f) fclose(f);
    if (!ok) {
        unlink(a.path);
        return snprintf(err, errlen, "snapshot '%s' in the database is not a mnemo snapshot", name), 500;
    }
    cache_forget(s, name, a.version);
    *version = a.version;
    *ms = read(arg, a.path);
    return 200;
}

/* ------------------------------------------------------------------ list, remove */

typedef struct {
    snapshot_info *v;
    int n;
    const char *name;
    bool found;
} list_arg;

static pg_rc list_work(PGconn *c, void *arg, char *err, size_t errlen) {
    list_arg *a = arg;
    PGresult *r = pg_exec(c, "SELECT name, bytes, modified, version FROM mnemo_snapshots ORDER BY name", 0, NULL, NULL,
                          NULL, 0, err, errlen);
    if (!r) return pg_last_failure();
    int n = PQntuples(r);
    a->v = n ? calloc((size_t)n, sizeof *a->v) : NULL;
    for (int i = 0; a->v && i < n; i++) {
        snapshot_info *si = &a->v[a->n++];
        snprintf(si->name, sizeof si->name, "%s", PQgetvalue(r, i, 0));
        si->bytes = strtoull(PQgetvalue(r, i, 1), NULL, 10);
        si->modified = strtoll(PQgetvalue(r, i, 2), NULL, 10);
        si->version = strtoll(PQgetvalue(r, i, 3), NULL, 10);
    }
    PQclear(r);
    return PG_OK;
}

static int pg_list(snapshot_store *base, snapshot_info **list, int *n, char *err, size_t errlen) {
    pg_store *s = (pg_store *)base;
    list_arg a = {0};
    pg_rc rc = pg_run(s->pool, list_work, &a, err, errlen);
    *list = a.v, *n = a.n;
    if (rc != PG_OK) {
        free(a.v);
        *list = NULL, *n = 0;
        return db_status(rc, "cannot list the snapshots", err, errlen);
    }
    return 200;
}

static pg_rc remove_work(PGconn *c, void *arg, char *err, size_t errlen) {
    list_arg *a = arg;
    const char *v[1] = {a->name};
    pg_rc rc = pg_simple(c, "BEGIN", err, errlen);
    PGresult *r = rc == PG_OK ? pg_exec(c, "DELETE FROM mnemo_snapshots WHERE name = $1 RETURNING blob", 1, v, NULL,
                                        NULL, 0, err, errlen)
                              : NULL;
    if (!r) return rc == PG_OK ? pg_last_failure() : rc;
    a->found = PQntuples(r) > 0;
    int64_t blob = a->found ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : -1;
    PQclear(r);
    if (blob >= 0) rc = pg_blob_delete(c, blob, err, errlen);
    return rc == PG_OK ? pg_simple(c, "COMMIT", err, errlen) : rc;
}

static int pg_remove(snapshot_store *base, const char *name, char *err, size_t errlen) {
    pg_store *s = (pg_store *)base;
    list_arg a = {.name = name};
    pg_rc rc = pg_run(s->pool, remove_work, &a, err, errlen);
    if (rc != PG_OK) return db_status(rc, "cannot delete the snapshot", err, errlen);
    cache_forget(s, name, -1);
    return a.found ? 200 : (snprintf(err, errlen, "no snapshot named '%s'", name), 404);
}

static void pg_close(snapshot_store *base) { free(base); }

static const snapshot_store_ops PG_OPS = {pg_save, pg_load, pg_list, pg_remove, pg_close};

snapshot_store *snapshot_store_pg(pg_pool *pool, const char *cache_dir, const char *node, char *err, size_t errlen) {
    pg_store *s = calloc(1, sizeof *s);
    if (!s) return snprintf(err, errlen, "out of memory"), NULL;
    snprintf(s->dir, sizeof s->dir, "%s", cache_dir);
    if (mkdir(s->dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create the snapshot cache %s: %s", s->dir, strerror(errno));
        free(s);
        return NULL;
    }
    DIR *d = opendir(s->dir); /* saves on their way up when a node stopped: never committed */
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, ".save-", 6)) {
            char path[4400];
            snprintf(path, sizeof path, "%s/%s", s->dir, e->d_name);
            unlink(path);
        }
    if (d) closedir(d);
    s->base.ops = &PG_OPS;
    s->base.versioned = true;
    snprintf(s->base.hide, sizeof s->base.hide, "%s", s->dir);
    snprintf(s->node, sizeof s->node, "%s", node);
    s->pool = pool;
    return &s->base;
}
