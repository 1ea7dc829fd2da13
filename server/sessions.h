/*
 * sessions.h — named sessions: a mnemo_context that outlives requests, so what one request put into it (a plain
 * LLaMA KV cache, or a LongLLaMA local window plus memory) is there for the next request that names the session.
 *
 * A session is used by one request at a time: acquire marks it busy (a second request gets 409), release puts it
 * back. Snapshots are files `<dir>/<name>.mnemo` (mnemo_context_save/load); names are checked so that nothing is
 * read or written outside the directory; concurrent saves of one name each write their own temporary file and the
 * last to finish replaces the snapshot whole. With the state database (snapshot_store.h) snapshots are rows shared
 * by every node instead, versioned. Limits: at most max_sessions live sessions; each session's memory stops
 * growing at max_bytes (the engine's mem_max_bytes: the request that would pass it fails with a clear error).
 *
 * Thread safety: every function may be called from any thread. A busy session's context belongs to whoever
 * acquired it; the store reads its memory figures only while it is idle (they are cached at release).
 *
 * Functions that can fail return an HTTP status (200/201 on success) and write a message into err.
 */
#ifndef MNEMO_SERVER_SESSIONS_H
#define MNEMO_SERVER_SESSIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "snapshot_store.h"

#define SESSION_ID_MAX 64     /* characters of an id: [A-Za-z0-9_-] */

typedef struct session_store session_store;
typedef struct session session;

typedef struct {
    int max_sessions;
    uint64_t max_bytes;   /* per session: memory keys + values + index (LongLLaMA); 0 = no limit */
    const char *dir;      /* snapshot directory, when snapshots is NULL; both NULL = save/restore disabled */
    snapshot_store *snapshots; /* where snapshots live (taken over by the store, even on failure); NULL = dir */
    int32_t n_ctx, n_batch;
    mnemo_context_params ctx;  /* every context's parameters (memory attention included), as main.c built them */
} session_config;

typedef struct {
    char id[SESSION_ID_MAX + 1];
    bool busy;
    long long created, last_used; /* unix seconds */
    int64_t requests;             /* requests that ran on it */
    int64_t tokens;               /* tokens it holds (local + memory), as of the last release */
    mnemo_memory_stats memory;    /* as of the last release */
    char last_error[256];         /* why its last request ended early ("" when it did not) */
} session_info;

/* 0 when dir is a readable, writable directory; else -1 and a message naming --session-dir. */
int sessions_check_dir(const char *dir, char *err, size_t errlen);
/* Removes the temporary files of saves a crash interrupted ("<name>.mnemo.tmp.XXXXXX") from cfg->dir. */
session_store *sessions_new(mnemo_model *model, const session_config *cfg, char *err, size_t errlen);
void sessions_free(session_store *st);

/* New empty session; id NULL or "" picks one. With restore != NULL it starts from that snapshot ("" is 400). The id is
 * written to id_out. 201, or 400 (bad id/name), 409 (id taken), 429 (max_sessions), 404 (no such snapshot),
 * 422 (snapshot refused), 500. */
int sessions_create(session_store *st, const char *id, const char *restore, char id_out[SESSION_ID_MAX + 1],
                    char *err, size_t errlen);
/* 200, 404, 409 (busy). */
int sessions_delete(session_store *st, const char *id, char *err, size_t errlen);
/* Marks the session busy and hands it out. 200, 404, 409 (busy: another request runs on it). */
int sessions_acquire(session_store *st, const char *id, session **out, char *err, size_t errlen);
/* Gives a session back. error: why its request ended early, or NULL. */
void sessions_release(session_store *st, session *s, const char *error);
mnemo_context *session_context(session *s);
/* True when the session holds no token yet (its first request's prompt keeps its BOS). */
bool session_is_empty(session *s);

/* 200 with *out filled, or 404. */
int sessions_get(session_store *st, const char *id, session_info *out, char *err, size_t errlen);
/* Every session, oldest first; *n receives the count. NULL with *n = 0 when there are none (or out of memory). */
session_info *sessions_list(session_store *st, int *n);
/* Memory summed over every session (as of their last release) and the session count. */
void sessions_totals(session_store *st, mnemo_memory_stats *sum, int *n_sessions);

/* Snapshots. name NULL = the session's id ("" is 400). 200, 400, 404, 409, 422 (refused), 500, 501 (no
 * --session-dir), 503 (the state database is away). Messages name snapshots, never the directory's path.
 * On a versioned store (snapshot_store.h) a save is a compare-and-swap: against if_version when it is >= 0, else
 * against the version this session last restored or saved under that name (when it did; otherwise the save
 * replaces whatever is there), so two nodes that continued one snapshot cannot overwrite each other: the second
 * gets 409. *out: the saved snapshot (name, bytes, version). */
int sessions_save(session_store *st, const char *id, const char *name, int64_t if_version, snapshot_info *out,
                  char *err, size_t errlen);
int sessions_restore(session_store *st, const char *id, const char *name, char *err, size_t errlen);
/* The snapshots kept (*list malloc'd, NULL when none). 200, 500, 501, 503. */
int sessions_snapshots(session_store *st, snapshot_info **list, int *n, char *err, size_t errlen);
int sessions_snapshot_delete(session_store *st, const char *name, char *err, size_t errlen);

bool session_id_valid(const char *id);
bool snapshot_name_valid(const char *name);

#endif
