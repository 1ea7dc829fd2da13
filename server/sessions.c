/*
 * sessions.c — the session table and its snapshot files (see sessions.h).
 *
 * Locking: st->mu guards the table and every session's bookkeeping (busy, info). Slow work on a context — load,
 * save, free — happens with the session marked busy and the lock released, so listing never waits for disk.
 */
#include "sessions.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct session {
    session_info info;
    mnemo_context *ctx;
    /* the snapshot this session last restored or saved, and its version (versioned stores: the compare in the
     * compare-and-swap of the next save under that name) */
    char based_on[SNAPSHOT_NAME_MAX + 1];
    int64_t based_version;
};

struct session_store {
    pthread_mutex_t mu;
    mnemo_model *model;
    session_config cfg;
    snapshot_store *snaps; /* NULL: snapshots are off */
    session **v; /* max_sessions entries; NULL = free */
    uint64_t next_id;
};

static int fail(char *err, size_t errlen, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return status;
}

bool session_id_valid(const char *id) {
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > SESSION_ID_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

bool snapshot_name_valid(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > SNAPSHOT_NAME_MAX || name[0] == '.') return false; /* no "..", no hidden files */
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return false;
    }
    return true;
}

static long long now_unix(void) { return (long long)time(NULL); }

int sessions_check_dir(const char *dir, char *err, size_t errlen) {
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return snprintf(err, errlen, "--session-dir '%s' is not a directory", dir), -1;
    if (access(dir, R_OK | W_OK | X_OK) != 0)
        return snprintf(err, errlen, "--session-dir '%s' is not readable and writable", dir), -1;
    if (strlen(dir) + SNAPSHOT_NAME_MAX + 16 > 4096) return snprintf(err, errlen, "--session-dir path is too long"), -1;
    return 0;
}

session_store *sessions_new(mnemo_model *model, const session_config *cfg, char *err, size_t errlen) {
    snapshot_store *snaps = cfg->snapshots;
    if (!snaps && cfg->dir && (sessions_check_dir(cfg->dir, err, errlen) != 0 ||
                               !(snaps = snapshot_store_local(cfg->dir, err, errlen))))
        return NULL;
    session_store *st = calloc(1, sizeof *st);
    if (st) st->v = calloc((size_t)(cfg->max_sessions > 0 ? cfg->max_sessions : 1), sizeof *st->v);
    if (!st || !st->v) {
        free(st);
        snapshot_store_close(snaps);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&st->mu, NULL);
    st->model = model;
    st->cfg = *cfg;
    st->cfg.dir = NULL; /* the store has it */
    st->snaps = snaps;
    st->next_id = (uint64_t)now_unix() << 20;
    return st;
}

void sessions_free(session_store *st) {
    if (!st) return;
    for (int i = 0; i < st->cfg.max_sessions; i++) {
        if (!st->v[i]) continue;
        mnemo_context_free(st->v[i]->ctx);
        free(st->v[i]);
    }
    free(st->v);
    snapshot_store_close(st->snaps);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* Caller holds mu. */
static session *find(session_store *st, const char *id) {
    for (int i = 0; i < st->cfg.max_sessions; i++)
        if (st->v[i] && !strcmp(st->v[i]->info.id, id)) return st->v[i];
    return NULL;
}

static int slot_of(session_store *st, const session *s) {
    for (int i = 0; i < st->cfg.max_sessions; i++)
        if (st->v[i] == s) return i;
    return -1;
}

/* The figures the store reports for an idle session. Caller holds mu or owns the session (busy). */
static void refresh_info(session *s) {
    mnemo_memory_stats m;
    if (mnemo_context_memory(s->ctx, &m) != MNEMO_OK) return;
    s->info.memory = m;
    s->info.tokens = m.mem_tokens > 0 || m.local_tokens > 0 ? (int64_t)m.mem_tokens + m.local_tokens
                                                             : mnemo_context_n_past(s->ctx);
}

/* 200 when snapshots are on and name is a valid snapshot name, else 501 or 400. */
static int check_name(const session_store *st, const char *name, char *err, size_t errlen) {
    if (!st->snaps)
        return fail(err, errlen, 501, "snapshots are off: start the server with --session-dir DIR (or --state "
                    "postgresql://...) to save and restore");
    if (!snapshot_name_valid(name))
        return fail(err, errlen, 400,
                    "invalid snapshot name '%.64s': 1 to %d characters of A-Z a-z 0-9 _ - . not starting with '.'",
                    name, SNAPSHOT_NAME_MAX);
    return 200;
}

/* The context's message with every "<dir>/" removed: error bodies name the snapshot file, never where the
 * server keeps it (the engine's messages carry the path it was given). */
static const char *without_dir(const session_store *st, const mnemo_context *ctx, char *out, size_t cap) {
    const char *msg = mnemo_context_error(ctx);
    char prefix[sizeof st->snaps->hide + 1];
    size_t np = (size_t)snprintf(prefix, sizeof prefix, "%s/", st->snaps->hide);
    size_t n = 0;
    while (*msg && n + 1 < cap) {
        size_t rest = strlen(msg);
        if (rest < np && !strncmp(msg, prefix, rest)) break; /* a path cut short by the engine's buffer */
        if (!strncmp(msg, prefix, np)) msg += np;
        else out[n++] = *msg++;
    }
    out[n] = '\0';
    return out;
}

static mnemo_status read_into(void *ctx, const char *path) { return mnemo_context_load(ctx, path); }
static mnemo_status write_from(void *ctx, const char *path) { return mnemo_context_save(ctx, path); }

/* Loads snapshot `name` into s's context (the caller owns s: it is new, or busy) and remembers what it read. */
static int load_snapshot(session_store *st, session *s, const char *name, char *err, size_t errlen) {
    int rc = check_name(st, name, err, errlen);
    if (rc != 200) return rc;
    mnemo_status ms;
    int64_t version = 0;
    rc = st->snaps->ops->load(st->snaps, name, read_into, s->ctx, &version, &ms, err, errlen);
    if (rc != 200) return rc;
    if (ms == MNEMO_ERR_NOMEM) return fail(err, errlen, 500, "out of memory loading snapshot '%s'", name);
    char why[512];
    if (ms != MNEMO_OK)
        return fail(err, errlen, 422, "snapshot '%s' refused: %s", name, without_dir(st, s->ctx, why, sizeof why));
    snprintf(s->based_on, sizeof s->based_on, "%s", name);
    s->based_version = version;
    return 200;
}

int sessions_create(session_store *st, const char *id, const char *restore, char id_out[SESSION_ID_MAX + 1],
                    char *err, size_t errlen) {
    bool pick = !id || !*id;
    if (!pick && !session_id_valid(id))
        return fail(err, errlen, 400, "invalid session id '%.64s': 1 to %d characters of A-Z a-z 0-9 _ -", id,
                    SESSION_ID_MAX);
    session *s = calloc(1, sizeof *s);
    if (!s) return fail(err, errlen, 500, "out of memory");
    mnemo_context_params cp = st->cfg.ctx;
    cp.n_ctx = st->cfg.n_ctx;
    cp.n_batch = st->cfg.n_batch;
    cp.mem_max_bytes = st->cfg.max_bytes;
    /* Reserve the id and a place first (busy, so nobody uses it while the context is built). */
    pthread_mutex_lock(&st->mu);
    int free_at = -1, n_live = 0;
    for (int i = 0; i < st->cfg.max_sessions; i++) {
        if (st->v[i]) n_live++;
        else if (free_at < 0) free_at = i;
    }
    if (pick) {
        do snprintf(s->info.id, sizeof s->info.id, "sess-%012llx", (unsigned long long)(st->next_id++ & 0xffffffffffffULL));
        while (find(st, s->info.id));
    } else {
        snprintf(s->info.id, sizeof s->info.id, "%s", id);
    }
    int rc = 201;
    if (find(st, s->info.id)) rc = fail(err, errlen, 409, "a session named '%s' exists already", s->info.id);
    else if (free_at < 0)
        rc = fail(err, errlen, 429, "too many sessions: %d live, the limit is %d (--max-sessions); delete one first",
                  n_live, st->cfg.max_sessions);
    if (rc != 201) {
        pthread_mutex_unlock(&st->mu);
        free(s);
        return rc;
    }
    s->info.busy = true;
    s->info.created = s->info.last_used = now_unix();
    st->v[free_at] = s;
    pthread_mutex_unlock(&st->mu);

    if (mnemo_context_new(st->model, &cp, &s->ctx) != MNEMO_OK)
        rc = fail(err, errlen, 500, "cannot create the session's context: %s", mnemo_context_error(s->ctx));
    else if (restore)
        rc = load_snapshot(st, s, restore, err, errlen);
    if (rc == 201 || rc == 200) refresh_info(s);

    pthread_mutex_lock(&st->mu);
    if (rc != 201 && rc != 200) {
        st->v[free_at] = NULL;
        pthread_mutex_unlock(&st->mu);
        mnemo_context_free(s->ctx);
        free(s);
        return rc;
    }
    s->info.busy = false;
    snprintf(id_out, SESSION_ID_MAX + 1, "%s", s->info.id);
    pthread_mutex_unlock(&st->mu);
    return 201;
}

int sessions_delete(session_store *st, const char *id, char *err, size_t errlen) {
    pthread_mutex_lock(&st->mu);
    session *s = find(st, id);
    int rc = 200;
    if (!s) rc = fail(err, errlen, 404, "no session '%.64s'", id);
    else if (s->info.busy) rc = fail(err, errlen, 409, "session '%s' is in use by a request; retry when it ends", id);
    else st->v[slot_of(st, s)] = NULL;
    pthread_mutex_unlock(&st->mu);
    if (rc == 200) {
        mnemo_context_free(s->ctx);
        free(s);
    }
    return rc;
}

int sessions_acquire(session_store *st, const char *id, session **out, char *err, size_t errlen) {
    pthread_mutex_lock(&st->mu);
    session *s = find(st, id);
    int rc = 200;
    if (!s) rc = fail(err, errlen, 404, "no session '%.64s' (create it with POST /v1/sessions)", id);
    else if (s->info.busy)
        rc = fail(err, errlen, 409, "session '%s' is in use by another request; one request at a time per session", id);
    else s->info.busy = true;
    pthread_mutex_unlock(&st->mu);
    *out = rc == 200 ? s : NULL;
    return rc;
}

void sessions_release(session_store *st, session *s, const char *error) {
    if (!s) return;
    refresh_info(s); /* still ours: nobody else touches a busy session */
    pthread_mutex_lock(&st->mu);
    s->info.busy = false;
    s->info.last_used = now_unix();
    s->info.requests++;
    snprintf(s->info.last_error, sizeof s->info.last_error, "%s", error ? error : "");
    pthread_mutex_unlock(&st->mu);
}

mnemo_context *session_context(session *s) { return s->ctx; }

bool session_is_empty(session *s) {
    mnemo_memory_stats m;
    if (mnemo_context_memory(s->ctx, &m) == MNEMO_OK && (m.mem_tokens > 0 || m.local_tokens > 0)) return false;
    return mnemo_context_n_past(s->ctx) == 0;
}

int sessions_get(session_store *st, const char *id, session_info *out, char *err, size_t errlen) {
    pthread_mutex_lock(&st->mu);
    session *s = find(st, id);
    if (s) *out = s->info;
    pthread_mutex_unlock(&st->mu);
    return s ? 200 : fail(err, errlen, 404, "no session '%.64s'", id);
}

static int by_created(const void *a, const void *b) {
    const session_info *x = a, *y = b;
    return x->created < y->created ? -1 : x->created > y->created ? 1 : strcmp(x->id, y->id);
}

session_info *sessions_list(session_store *st, int *n) {
    *n = 0;
    pthread_mutex_lock(&st->mu);
    session_info *out = malloc((size_t)(st->cfg.max_sessions > 0 ? st->cfg.max_sessions : 1) * sizeof *out);
    for (int i = 0; out && i < st->cfg.max_sessions; i++)
        if (st->v[i]) out[(*n)++] = st->v[i]->info;
    pthread_mutex_unlock(&st->mu);
    if (out && *n == 0) {
        free(out);
        out = NULL;
    }
    if (out) qsort(out, (size_t)*n, sizeof *out, by_created);
    return out;
}

void sessions_totals(session_store *st, mnemo_memory_stats *sum, int *n_sessions) {
    memset(sum, 0, sizeof *sum);
    *n_sessions = 0;
    pthread_mutex_lock(&st->mu);
    for (int i = 0; i < st->cfg.max_sessions; i++) {
        if (!st->v[i]) continue;
        const mnemo_memory_stats *m = &st->v[i]->info.memory;
        (*n_sessions)++;
        sum->local_tokens += m->local_tokens;
        sum->mem_tokens += m->mem_tokens;
        sum->local_kv_bytes += m->local_kv_bytes;
        sum->mem_key_bytes += m->mem_key_bytes;
        sum->mem_value_bytes += m->mem_value_bytes;
        sum->mem_index_bytes += m->mem_index_bytes;
        sum->mem_entries += m->mem_entries;
    }
    pthread_mutex_unlock(&st->mu);
}

int sessions_save(session_store *st, const char *id, const char *name, int64_t if_version, snapshot_info *out,
                  char *err, size_t errlen) {
    if (!name) name = id; /* "" is not absent: check_name refuses it */
    int rc = check_name(st, name, err, errlen);
    if (rc != 200) return rc;
    session *s;
    if ((rc = sessions_acquire(st, id, &s, err, errlen)) != 200) return rc;
    if (if_version < 0 && st->snaps->versioned && !strcmp(s->based_on, name)) if_version = s->based_version;
    mnemo_status ms = MNEMO_OK;
    rc = st->snaps->ops->save(st->snaps, name, write_from, s->ctx, if_version, out, &ms, err, errlen);
    char why[512];
    if (ms != MNEMO_OK)
        rc = fail(err, errlen, 500, "cannot save session '%s' as '%s': %s", id, name,
                  without_dir(st, s->ctx, why, sizeof why));
    /* Saving is not a request: keep the count and last error as they were. */
    pthread_mutex_lock(&st->mu);
    if (rc == 200) {
        snprintf(s->based_on, sizeof s->based_on, "%s", name);
        s->based_version = out->version;
    }
    s->info.busy = false;
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int sessions_restore(session_store *st, const char *id, const char *name, char *err, size_t errlen) {
    if (!name) name = id;
    session *s;
    int rc = sessions_acquire(st, id, &s, err, errlen);
    if (rc != 200) return rc;
    rc = load_snapshot(st, s, name, err, errlen); /* a refused snapshot leaves the context as it was */
    refresh_info(s);
    pthread_mutex_lock(&st->mu);
    s->info.busy = false;
    s->info.last_used = now_unix();
    if (rc == 200) s->info.last_error[0] = '\0';
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int sessions_snapshots(session_store *st, snapshot_info **list, int *n, char *err, size_t errlen) {
    *n = 0;
    *list = NULL;
    if (!st->snaps) return fail(err, errlen, 501, "snapshots are off: start the server with --session-dir DIR");
    return st->snaps->ops->list(st->snaps, list, n, err, errlen);
}

int sessions_snapshot_delete(session_store *st, const char *name, char *err, size_t errlen) {
    int rc = check_name(st, name, err, errlen);
    return rc != 200 ? rc : st->snaps->ops->remove(st->snaps, name, err, errlen);
}
