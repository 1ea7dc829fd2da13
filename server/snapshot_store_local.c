/*
 * snapshot_store_local.c — snapshots as <dir>/<name>.mnemo files (see snapshot_store.h). The engine writes each save
 * to a temporary file of its own and renames it into place, so concurrent saves of one name each leave a whole file
 * and the last to finish wins; there are no versions.
 */
#define _DEFAULT_SOURCE /* DT_REG in dirent */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snapshot_store.h"

#define SNAPSHOT_EXT ".mnemo"

typedef struct {
    snapshot_store base;
    char dir[4096];
} local_store;

/* A save's temporary file: "<name>.mnemo.tmp.XXXXXX" (container/snapshot.c, X alphanumeric), or the
 * "<name>.mnemo.tmp" that saves used before. */
static bool is_temp_name(const char *name) {
    static const char tmp[] = SNAPSHOT_EXT ".tmp";
    size_t n = strlen(name), t = sizeof tmp - 1;
    if (n > t && !strcmp(name + n - t, tmp)) return true;
    if (n <= t + 7 || strncmp(name + n - 7 - t, tmp, t) != 0 || name[n - 7] != '.') return false;
    for (size_t i = n - 6; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) return false;
    }
    return true;
}

/* At start no save of ours is running: a temporary file is what a crash left (never listed, never deletable
 * through the API, as big as a snapshot). */
static void remove_stale_temps(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!is_temp_name(e->d_name)) continue;
        char path[4352];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &sb) == 0 && S_ISREG(sb.st_mode)) unlink(path);
    }
    if (d) closedir(d);
}

static void path_of(const local_store *s, const char *name, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s%s", s->dir, name, SNAPSHOT_EXT);
}

static int local_save(snapshot_store *base, const char *name, snapshot_io_fn write, void *arg, int64_t if_version,
                      snapshot_info *out, mnemo_status *ms, char *err, size_t errlen) {
    local_store *s = (local_store *)base;
    *ms = MNEMO_OK;
    if (if_version >= 0)
        return snprintf(err, errlen, "if_version needs versioned snapshots: start the server with --state "
                        "postgresql://..."), 501;
    char path[4352];
    path_of(s, name, path, sizeof path);
    if ((*ms = write(arg, path)) != MNEMO_OK) return 500;
    struct stat sb;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    if (stat(path, &sb) == 0) out->bytes = (uint64_t)sb.st_size, out->modified = (long long)sb.st_mtime;
    return 200;
}

static int local_load(snapshot_store *base, const char *name, snapshot_io_fn read, void *arg, int64_t *version,
                      mnemo_status *ms, char *err, size_t errlen) {
    local_store *s = (local_store *)base;
    char path[4352];
    struct stat sb;
    path_of(s, name, path, sizeof path);
    *version = 0;
    *ms = MNEMO_OK;
    if (stat(path, &sb) != 0) return snprintf(err, errlen, "no snapshot named '%s'", name), 404;
    *ms = read(arg, path);
    return 200;
}

static bool name_ok(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > SNAPSHOT_NAME_MAX || name[0] == '.') return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return false;
    }
    return true;
}

static int local_list(snapshot_store *base, snapshot_info **list, int *n, char *err, size_t errlen) {
    local_store *s = (local_store *)base;
    *n = 0;
    *list = NULL;
    DIR *d = opendir(s->dir);
    if (!d) return snprintf(err, errlen, "cannot list --session-dir: %s", strerror(errno)), 500;
    snapshot_info *out = NULL;
    int cap = 0;
    const size_t ext = strlen(SNAPSHOT_EXT);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= ext || strcmp(e->d_name + len - ext, SNAPSHOT_EXT) != 0 || len - ext > SNAPSHOT_NAME_MAX) continue;
        char name[SNAPSHOT_NAME_MAX + 1];
        memcpy(name, e->d_name, len - ext);
        name[len - ext] = '\0';
        if (!name_ok(name)) continue;
        char path[4352];
        snprintf(path, sizeof path, "%s/%s", s->dir, e->d_name);
        struct stat sb;
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            snapshot_info *p = realloc(out, (size_t)cap * sizeof *p);
            if (!p) break;
            out = p;
        }
        snapshot_info *si = &out[(*n)++];
        memset(si, 0, sizeof *si);
        snprintf(si->name, sizeof si->name, "%s", name);
        si->bytes = (uint64_t)sb.st_size;
        si->modified = (long long)sb.st_mtime;
    }
    closedir(d);
    *list = out;
    return 200;
}

static int local_remove(snapshot_store *base, const char *name, char *err, size_t errlen) {
    local_store *s = (local_store *)base;
    char path[4352];
    path_of(s, name, path, sizeof path);
    if (unlink(path) != 0)
        return errno == ENOENT ? (snprintf(err, errlen, "no snapshot named '%s'", name), 404)
                               : (snprintf(err, errlen, "cannot delete snapshot '%s': %s", name, strerror(errno)), 500);
    return 200;
}

static void local_close(snapshot_store *base) { free(base); }

static const snapshot_store_ops LOCAL_OPS = {local_save, local_load, local_list, local_remove, local_close};

snapshot_store *snapshot_store_local(const char *dir, char *err, size_t errlen) {
    local_store *s = calloc(1, sizeof *s);
    if (!s) return snprintf(err, errlen, "out of memory"), NULL;
    if (strlen(dir) + SNAPSHOT_NAME_MAX + 16 > sizeof s->dir) {
        free(s);
        return snprintf(err, errlen, "--session-dir path is too long"), NULL;
    }
    s->base.ops = &LOCAL_OPS;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    snprintf(s->base.hide, sizeof s->base.hide, "%s", dir);
    remove_stale_temps(s->dir);
    return &s->base;
}
