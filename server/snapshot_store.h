/*
 * snapshot_store.h — where session snapshots live: the seam between sessions.c (which makes and reads snapshot
 * bytes through the engine) and the place that keeps them. Two implementations:
 *   local     <dir>/<name>.mnemo files (--session-dir), one machine; the last save of a name wins.
 *   postgres  rows of the state database (--state postgresql://...), shared by every node: each name has a version
 *             that every save increments, so concurrent writers are serialized by compare-and-swap (the loser gets
 *             409); the bytes are chunked blobs checked by CRC-32 on the way back; a node keeps the latest version
 *             it has seen of each name in a local cache, used only when the database says it is still the latest.
 *
 * The engine reads and writes files, so the store hands it a path: save calls write(arg, path) and then keeps what
 * was written; load finds the bytes, gives read(arg, path) a path holding them. Functions return an HTTP status (200
 * on success) and write a message into err; when write/read itself fails, the status is 200 no more: *ms carries the
 * engine's status and err is left for the caller (who has the engine's message).
 */
#ifndef MNEMO_SERVER_SNAPSHOT_STORE_H
#define MNEMO_SERVER_SNAPSHOT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

#define SNAPSHOT_NAME_MAX 128 /* characters of a snapshot name: [A-Za-z0-9_.-], not starting with '.' */
#define SNAPSHOT_ANY_VERSION (-1) /* save without a compare-and-swap */

typedef struct {
    char name[SNAPSHOT_NAME_MAX + 1];
    uint64_t bytes;
    long long modified;
    int64_t version; /* 0 where the store keeps no versions (local) */
} snapshot_info;

typedef mnemo_status (*snapshot_io_fn)(void *arg, const char *path);

typedef struct snapshot_store snapshot_store;
typedef struct {
    /* Saves under name. if_version >= 0: only when the stored version is that one (0: only when there is none),
     * else 409. 200 with *out, 409, 500, 501 (if_version on a store without versions), 503 (database away), or the
     * write's failure in *ms. */
    int (*save)(snapshot_store *s, const char *name, snapshot_io_fn write, void *arg, int64_t if_version,
                snapshot_info *out, mnemo_status *ms, char *err, size_t errlen);
    /* 200 once read(arg, path) has run (its status in *ms; *version the version read), 404, 500, 503. */
    int (*load)(snapshot_store *s, const char *name, snapshot_io_fn read, void *arg, int64_t *version,
                mnemo_status *ms, char *err, size_t errlen);
    /* 200 with *list (malloc'd, NULL when none), 500, 503. */
    int (*list)(snapshot_store *s, snapshot_info **list, int *n, char *err, size_t errlen);
    /* 200, 404, 500, 503. */
    int (*remove)(snapshot_store *s, const char *name, char *err, size_t errlen);
    void (*close)(snapshot_store *s);
} snapshot_store_ops;

struct snapshot_store {
    const snapshot_store_ops *ops;
    bool versioned;     /* saves carry versions (compare-and-swap) */
    char hide[4096];    /* a directory the engine's messages may name: removed from error bodies */
};

/* --session-dir: dir must be a readable, writable directory (sessions_check_dir); stale temporary files of saves a
 * crash interrupted are removed. NULL with a message on failure. */
snapshot_store *snapshot_store_local(const char *dir, char *err, size_t errlen);

struct pg_pool;
/* --state postgresql://...: cache_dir (created if missing) holds saves on their way up and the cache; node names the
 * writer in each row. */
snapshot_store *snapshot_store_pg(struct pg_pool *pool, const char *cache_dir, const char *node, char *err,
                                  size_t errlen);

static inline void snapshot_store_close(snapshot_store *s) {
    if (s) s->ops->close(s);
}

#endif
