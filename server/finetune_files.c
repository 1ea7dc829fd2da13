/*
 * finetune_files.c — the files API store (see finetune_files.h).
 *
 * On disk, in <jobs-dir>/files (mode 0700, files 0600):
 *   <id>.jsonl           the bytes as uploaded
 *   <id>.json            the file object
 *   .tmp-<id>.jsonl/json a write in progress (removed at the next open: such an upload was never acknowledged)
 * An upload writes the content first and the object last, each to its temp name, fsync, rename, fsync of the
 * directory; the object's rename is the commit point. A delete removes the object first, so a crash in between
 * leaves only an unacknowledged .jsonl, which the next open removes. Open loads every <id>.json whose <id>.jsonl
 * exists with the recorded size; one that does not match is skipped with a warning and left on disk. Only names of
 * exactly these shapes are ever created, read or removed: other files in the directory are left alone.
 *
 * Memory: the table holds every file object, oldest first (the upload order; after a restart, created_at, then the
 * object file's modification time, then the id). Locking: mu guards the table and the count of uploads in flight;
 * validation and the writes run without it, a reserved place (pending) keeping --max-files exact.
 */
#define _DEFAULT_SOURCE /* DT_* in dirent */
#include "finetune_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "finetune_files_pg.h"
#include "text_util.h"

#define ID_PREFIX "file-"
#define ID_HEX 24
#define ID_LEN (sizeof ID_PREFIX - 1 + ID_HEX) /* 29 */
#define TMP_PREFIX ".tmp-"
#define DIR_MAX 4000 /* <jobs-dir>/files; leaves room for "/.tmp-<id>.jsonl" in a 4096-byte path */

typedef struct {
    char id[ID_LEN + 1];
    json_t *obj;        /* the file object (owned; never modified once in the table) */
    long long created;  /* created_at */
    long long mtime_ns; /* of <id>.json at open: orders files created in the same second */
} entry;

struct ft_files {
    pthread_mutex_t mu;
    char dir[DIR_MAX];  /* <jobs-dir>/files */
    int max_files;
    int pending;        /* uploads validated and being written: they hold a place */
    entry *v;           /* oldest first */
    size_t n, cap;
    long long last_stamp; /* the newest <id>.json mtime (ns): each upload's is set past it, so order survives a
                           * restart even when the filesystem's clock ticks coarser than the uploads */
    ffpg *pg;             /* --state postgresql: every call goes to finetune_files_pg.c */
};

/* Why this thread's last lookup found nothing (ft_files_last_error). */
static _Thread_local api_error last_error;

const api_error *ft_files_last_error(void) { return &last_error; }

static void not_found(const char *id) {
    last_error = (api_error){.status = 404};
    snprintf(last_error.code, sizeof last_error.code, "file_not_found");
    snprintf(last_error.message, sizeof last_error.message, "No such File object: %.64s", id ? id : "");
}


bool ft_files_valid_id(const char *id) {
    if (!id || strncmp(id, ID_PREFIX, sizeof ID_PREFIX - 1) != 0) return false;
    const char *h = id + sizeof ID_PREFIX - 1;
    for (int i = 0; i < ID_HEX; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f'))) return false;
    return h[ID_HEX] == '\0';
}

/* ---------------------------------------------------------------------------------------------- validation */

static const char *const ROLES[] = {"system", "user", "assistant"}; /* as engine/src/train/train_data.c takes them */

/* One JSON line's example, checked without a model (train_data.c checks the rest when a job reads it). NULL when
 * it is fine, else what is wrong (written to why). */
static const char *check_example(json_t *o, char *why, size_t cap) {
    json_t *jm = json_object_get(o, "messages");
    if (!jm) {
        json_t *jp = json_object_get(o, "prompt"), *jc = json_object_get(o, "completion");
        if (!json_is_string(jp) || !json_is_string(jc))
            return "an example is {\"prompt\": string, \"completion\": string} or {\"messages\": [{\"role\", "
                   "\"content\"}, ...]}";
        if (json_string_length(jc) == 0) return "the completion is empty: nothing to learn";
        return NULL;
    }
    if (json_object_get(o, "prompt") || json_object_get(o, "completion"))
        return "an example is {\"prompt\", \"completion\"} or {\"messages\"}, not both";
    size_t n = json_array_size(jm);
    if (!json_is_array(jm) || n == 0) return "\"messages\" must be a non-empty array of {\"role\", \"content\"}";
    int last = -1;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(jm, i), *jr = json_object_get(m, "role"), *jc = json_object_get(m, "content");
        if (!json_is_object(m))
            return snprintf(why, cap, "messages[%zu] must be an object {\"role\", \"content\"}", i), why;
        last = -1;
        for (int r = 0; json_is_string(jr) && r < 3; r++)
            if (!strcmp(json_string_value(jr), ROLES[r])) last = r;
        if (last < 0)
            return snprintf(why, cap, "messages[%zu].role must be \"system\", \"user\" or \"assistant\"", i), why;
        if (!json_is_string(jc)) return snprintf(why, cap, "messages[%zu].content must be a string", i), why;
    }
    if (last != 2)
        return snprintf(why, cap, "the last message must be the assistant's (messages[%zu] is a %s message)", n - 1,
                        ROLES[last]),
               why;
    return NULL;
}

int ft_files_validate(const char *data, size_t len, api_error *e) {
    if (len == 0) {
        api_error_set(e, 400, "invalid_file", "file", "the file is empty: a training file has one example per line");
        return -1;
    }
    long line = 0, examples = 0;
    size_t first = len >= 3 && !memcmp(data, "\xEF\xBB\xBF", 3) ? 3 : 0; /* a UTF-8 BOM, as JSON readers take it */
    for (size_t at = first; at < len;) {
        const char *nl = memchr(data + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - data) : len;
        line++;
        size_t a = at, b = end;
        while (a < b && (data[a] == ' ' || data[a] == '\t' || data[a] == '\r')) a++;
        while (b > a && (data[b - 1] == ' ' || data[b - 1] == '\t' || data[b - 1] == '\r')) b--;
        at = end + 1;
        if (a == b) continue; /* blank lines are allowed, as mnemo train allows them */
        json_error_t je;
        json_t *o = json_loadb(data + a, b - a, JSON_REJECT_DUPLICATES, &je);
        char why[256];
        const char *bad = !o ? je.text : !json_is_object(o) ? "a line must be a JSON object" :
                                                              check_example(o, why, sizeof why);
        if (bad) {
            api_error_set(e, 400, "invalid_file", "file", "training file line %ld: %s", line, bad);
            json_decref(o);
            return -1;
        }
        json_decref(o);
        examples++;
    }
    if (examples == 0) {
        api_error_set(e, 400, "invalid_file", "file", "the file has only blank lines: a training file has one example "
                      "per line");
        return -1;
    }
    return 0;
}

/* ----------------------------------------------------------------------------------------------- disk */

/* <dir>/<prefix><id><ext>; the id is always a valid one (checked by every caller). */
static void path_of(const ft_files *f, char *out, size_t cap, const char *prefix, const char *id, const char *ext) {
    snprintf(out, cap, "%s/%s%s%s", f->dir, prefix, id, ext);
}

static int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Writes bytes to tmp (created, never followed through a link), syncs it and renames it to final. 0, or -1 with
 * errno set (tmp removed). */
static int write_atomic(const char *tmp, const char *final, const char *data, size_t len) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    for (size_t done = 0; done < len;) {
        ssize_t w = write(fd, data + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) goto fail;
        done += (size_t)w;
    }
    if (fsync(fd) != 0) goto fail;
    if (close(fd) != 0) {
        fd = -1;
        goto fail;
    }
    fd = -1;
    if (rename(tmp, final) != 0) goto fail;
    return 0;
fail:;
    int saved = errno ? errno : EIO;
    if (fd >= 0) close(fd);
    unlink(tmp);
    errno = saved;
    return -1;
}

/* The file object of an upload: id, object, bytes, created_at, filename, purpose, status. */
json_t *ft_files_object(const char *id, size_t bytes, long long created, const char *filename, size_t fn_len,
                        const char *purpose) {
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "object", json_string("file"));
    json_object_set_new(o, "bytes", json_integer((json_int_t)bytes));
    json_object_set_new(o, "created_at", json_integer(created));
    json_object_set_new(o, "filename", json_text(filename, fn_len));
    json_object_set_new(o, "purpose", json_string(purpose));
    json_object_set_new(o, "status", json_string("processed"));
    if (json_object_size(o) != 7) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Caller holds mu. The index of id, or -1. */
static long find(const ft_files *f, const char *id) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->v[i].id, id)) return (long)i;
    return -1;
}

/* Caller holds mu. Takes obj. 0, or -1 when out of memory (obj freed). */
static int append_entry(ft_files *f, const char *id, json_t *obj, long long created, long long mtime_ns) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 64;
        entry *v = realloc(f->v, cap * sizeof *v);
        if (!v) {
            json_decref(obj);
            return -1;
        }
        f->v = v;
        f->cap = cap;
    }
    entry *e = &f->v[f->n++];
    snprintf(e->id, sizeof e->id, "%s", id);
    e->obj = obj;
    e->created = created;
    e->mtime_ns = mtime_ns;
    return 0;
}

/* A fresh id from /dev/urandom, unused in the table (caller holds mu). 0, or -1. */
static int new_id(const ft_files *f, char out[ID_LEN + 1]) {
    for (int attempt = 0; attempt < 8; attempt++) {
        if (ft_files_new_id(out) != 0) return -1;
        if (find(f, out) < 0) return 0;
    }
    return -1;
}

static int entry_order(const void *pa, const void *pb) {
    const entry *a = pa, *b = pb;
    if (a->created != b->created) return a->created < b->created ? -1 : 1;
    if (a->mtime_ns != b->mtime_ns) return a->mtime_ns < b->mtime_ns ? -1 : 1;
    return strcmp(a->id, b->id);
}

/* "<id><ext>" exactly, with a valid id -> id copied; false otherwise. */
static bool name_is(const char *name, const char *ext, char id[ID_LEN + 1]) {
    size_t n = strlen(name), el = strlen(ext);
    if (n != ID_LEN + el || strcmp(name + ID_LEN, ext) != 0) return false;
    memcpy(id, name, ID_LEN);
    id[ID_LEN] = '\0';
    return ft_files_valid_id(id);
}

static void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("mnemo-server: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Loads <id>.json into the table if it and its content agree; warns and skips it otherwise. */
static void load_one(ft_files *f, const char *id) {
    char meta[4096], data[4096];
    path_of(f, meta, sizeof meta, "", id, ".json");
    path_of(f, data, sizeof data, "", id, ".jsonl");
    struct stat ms, ds;
    json_error_t je;
    if (lstat(meta, &ms) != 0 || !S_ISREG(ms.st_mode)) {
        warn("%s: not a regular file; skipped", meta);
        return;
    }
    json_t *o = json_load_file(meta, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!o) {
        warn("%s: %s (line %d); skipped", meta, je.text, je.line);
        return;
    }
    json_t *jid = json_object_get(o, "id"), *jb = json_object_get(o, "bytes"), *jc = json_object_get(o, "created_at"),
           *jf = json_object_get(o, "filename"), *jp = json_object_get(o, "purpose");
    const char *why = NULL;
    if (!json_is_string(jid) || strcmp(json_string_value(jid), id) != 0) why = "its id is not its name";
    else if (!json_is_integer(jb) || json_integer_value(jb) <= 0) why = "no valid \"bytes\"";
    else if (!json_is_integer(jc)) why = "no valid \"created_at\"";
    else if (!json_is_string(jf) || !json_is_string(jp)) why = "no \"filename\" or \"purpose\"";
    else if (lstat(data, &ds) != 0 || !S_ISREG(ds.st_mode)) why = "its content (.jsonl) is missing";
    else if ((long long)ds.st_size != (long long)json_integer_value(jb)) why = "its content's size differs";
    if (why) {
        json_decref(o);
        warn("%s: %s; skipped", meta, why);
        return;
    }
    long long mt = (long long)ms.st_mtim.tv_sec * 1000000000LL + ms.st_mtim.tv_nsec;
    if (mt > f->last_stamp) f->last_stamp = mt;
    if (append_entry(f, id, o, (long long)json_integer_value(jc), mt) != 0) warn("out of memory; %s skipped", meta);
}

ft_files *ft_files_open(const char *jobs_dir, int max_files, char *err, size_t errlen) {
    ft_files *f = calloc(1, sizeof *f);
    if (!f) return snprintf(err, errlen, "out of memory"), NULL;
    int w = snprintf(f->dir, sizeof f->dir, "%s/files", jobs_dir);
    if (w < 0 || (size_t)w >= sizeof f->dir) {
        free(f);
        return snprintf(err, errlen, "--jobs-dir path is too long"), NULL;
    }
    if (mkdir(f->dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create %s: %s", f->dir, strerror(errno));
        free(f);
        return NULL;
    }
    struct stat sb;
    if (lstat(f->dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(f->dir, R_OK | W_OK | X_OK) != 0) {
        snprintf(err, errlen, "%s is not a readable and writable directory", f->dir);
        free(f);
        return NULL;
    }
    DIR *d = opendir(f->dir);
    if (!d) {
        snprintf(err, errlen, "cannot read %s: %s", f->dir, strerror(errno));
        free(f);
        return NULL;
    }
    pthread_mutex_init(&f->mu, NULL);
    f->max_files = max_files > 0 ? max_files : 1;
    /* Pass 1: objects, and the leftovers of writes that never committed. */
    struct dirent *de;
    char id[ID_LEN + 1], p[4096];
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        if (name_is(name, ".json", id)) {
            load_one(f, id);
        } else if (!strncmp(name, TMP_PREFIX, sizeof TMP_PREFIX - 1) &&
                   (name_is(name + sizeof TMP_PREFIX - 1, ".json", id) ||
                    name_is(name + sizeof TMP_PREFIX - 1, ".jsonl", id))) {
            snprintf(p, sizeof p, "%s/%s", f->dir, name);
            unlink(p);
        }
    }
    /* Pass 2: content without an object (an upload or a delete interrupted) was never acknowledged, or no more. */
    rewinddir(d);
    while ((de = readdir(d)) != NULL) {
        if (!name_is(de->d_name, ".jsonl", id) || find(f, id) >= 0) continue;
        path_of(f, p, sizeof p, "", id, ".json");
        if (access(p, F_OK) == 0) continue; /* an object that was skipped with a warning: left for a person */
        path_of(f, p, sizeof p, "", id, ".jsonl");
        unlink(p);
    }
    closedir(d);
    if (f->n > 1) qsort(f->v, f->n, sizeof *f->v, entry_order);
    return f;
}

ft_files *ft_files_open_pg(struct pg_pool *pool, const char *work_dir, int max_files, char *err, size_t errlen) {
    ft_files *f = calloc(1, sizeof *f);
    if (!f) return snprintf(err, errlen, "out of memory"), NULL;
    if (!(f->pg = ffpg_open(pool, work_dir, max_files, err, errlen))) {
        free(f);
        return NULL;
    }
    pthread_mutex_init(&f->mu, NULL);
    f->max_files = max_files;
    return f;
}

void ft_files_close(ft_files *f) {
    if (!f) return;
    ffpg_close(f->pg);
    for (size_t i = 0; i < f->n; i++) json_decref(f->v[i].obj);
    free(f->v);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

size_t ft_files_count(ft_files *f) {
    if (f->pg) return ffpg_count(f->pg);
    pthread_mutex_lock(&f->mu);
    size_t n = f->n;
    pthread_mutex_unlock(&f->mu);
    return n;
}

int ft_files_create(ft_files *f, const char *filename, size_t filename_len, const char *purpose, const char *data,
                    size_t len, json_t **out, api_error *e) {
    *out = NULL;
    if (!purpose || strcmp(purpose, "fine-tune") != 0) {
        api_error_set(e, 400, "invalid_value", "purpose", "purpose must be \"fine-tune\" (got \"%.64s\"): this server "
                      "keeps files for fine-tuning only", purpose ? purpose : "");
        return -1;
    }
    if (ft_files_validate(data, len, e) != 0) return -1;
    if (f->pg) {
        char pid[64];
        if (ft_files_new_id(pid) != 0)
            return api_error_set(e, 500, "server_error", NULL, "cannot read /dev/urandom for a file id"), -1;
        json_t *obj = ft_files_object(pid, len, (long long)time(NULL), filename, filename_len, purpose);
        if (!obj) return api_error_set(e, 500, "server_error", NULL, "out of memory"), -1;
        int rc = ffpg_create(f->pg, obj, data, len, e);
        if (rc == 0) *out = obj;
        else json_decref(obj);
        return rc;
    }

    char id[ID_LEN + 1];
    pthread_mutex_lock(&f->mu);
    if (f->n + (size_t)f->pending >= (size_t)f->max_files) {
        pthread_mutex_unlock(&f->mu);
        api_error_set(e, 429, "too_many_files", NULL, "%d files are kept already (--max-files): delete some first",
                      f->max_files);
        return -1;
    }
    if (new_id(f, id) != 0) {
        pthread_mutex_unlock(&f->mu);
        api_error_set(e, 500, "server_error", NULL, "cannot read /dev/urandom for a file id");
        return -1;
    }
    f->pending++;
    pthread_mutex_unlock(&f->mu);

    long long created = (long long)time(NULL);
    json_t *obj = ft_files_object(id, len, created, filename, filename_len, purpose);
    char *meta = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    char tmp[4096], fin[4096], tmeta[4096], fmeta[4096];
    path_of(f, tmp, sizeof tmp, TMP_PREFIX, id, ".jsonl");
    path_of(f, fin, sizeof fin, "", id, ".jsonl");
    path_of(f, tmeta, sizeof tmeta, TMP_PREFIX, id, ".json");
    path_of(f, fmeta, sizeof fmeta, "", id, ".json");
    int rc = -1;
    if (!meta) {
        api_error_set(e, 500, "server_error", NULL, "out of memory");
    } else if (write_atomic(tmp, fin, data, len) != 0) {
        api_error_set(e, 500, "server_error", NULL, "cannot write the file: %s", strerror(errno));
    } else if (write_atomic(tmeta, fmeta, meta, strlen(meta)) != 0 || fsync_dir(f->dir) != 0) {
        api_error_set(e, 500, "server_error", NULL, "cannot write the file: %s", strerror(errno));
        unlink(fmeta);
        unlink(fin);
    } else {
        rc = 0;
    }
    free(meta);

    pthread_mutex_lock(&f->mu);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long mt = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
    if (mt <= f->last_stamp) mt = f->last_stamp + 1000;
    struct timespec ts[2] = {{mt / 1000000000LL, mt % 1000000000LL}, {mt / 1000000000LL, mt % 1000000000LL}};
    if (rc == 0 && utimensat(AT_FDCWD, fmeta, ts, 0) == 0) f->last_stamp = mt;
    f->pending--;
    if (rc == 0 && append_entry(f, id, json_incref(obj), created, mt) != 0) {
        /* Written but not listed: take it back so disk and table agree. */
        unlink(fmeta);
        unlink(fin);
        api_error_set(e, 500, "server_error", NULL, "out of memory");
        rc = -1;
    }
    pthread_mutex_unlock(&f->mu);
    if (rc == 0) *out = json_deep_copy(obj);
    json_decref(obj);
    if (rc == 0 && !*out) {
        api_error_set(e, 500, "server_error", NULL, "out of memory (the file %s was stored)", id);
        rc = -1;
    }
    return rc;
}

json_t *ft_files_list(ft_files *f, const char *purpose, const char *after, int limit, bool ascending) {
    not_found(after);
    if (f->pg) return ffpg_list(f->pg, purpose, after, limit, ascending, &last_error);
    if (limit < 1) limit = 1;
    if (limit > 10000) limit = 10000;
    json_t *data = json_array();
    if (!data) return NULL;
    bool has_more = false, found_after = after == NULL;
    pthread_mutex_lock(&f->mu);
    for (size_t k = 0; k < f->n; k++) {
        const entry *en = &f->v[ascending ? k : f->n - 1 - k];
        if (!found_after) {
            found_after = !strcmp(en->id, after);
            continue;
        }
        if (purpose && strcmp(json_string_value(json_object_get(en->obj, "purpose")), purpose) != 0) continue;
        if (json_array_size(data) == (size_t)limit) {
            has_more = true;
            break;
        }
        json_array_append_new(data, json_deep_copy(en->obj));
    }
    pthread_mutex_unlock(&f->mu);
    if (!found_after) {
        json_decref(data);
        return NULL;
    }
    size_t n = json_array_size(data);
    json_t *first = n ? json_object_get(json_array_get(data, 0), "id") : NULL;
    json_t *last = n ? json_object_get(json_array_get(data, n - 1), "id") : NULL;
    return json_pack("{s:s, s:o, s:O, s:O, s:b}", "object", "list", "data", data, "first_id",
                     first ? first : json_null(), "last_id", last ? last : json_null(), "has_more", has_more);
}

json_t *ft_files_get(ft_files *f, const char *id) {
    not_found(id);
    if (!ft_files_valid_id(id)) return NULL;
    if (f->pg) return ffpg_get(f->pg, id, &last_error);
    pthread_mutex_lock(&f->mu);
    long i = find(f, id);
    json_t *o = i >= 0 ? json_deep_copy(f->v[i].obj) : NULL;
    pthread_mutex_unlock(&f->mu);
    return o;
}

int ft_files_delete(ft_files *f, const char *id) {
    not_found(id);
    if (!ft_files_valid_id(id)) return -1;
    if (f->pg) return ffpg_delete(f->pg, id, &last_error);
    char meta[4096], data[4096];
    path_of(f, meta, sizeof meta, "", id, ".json");
    path_of(f, data, sizeof data, "", id, ".jsonl");
    pthread_mutex_lock(&f->mu);
    long i = find(f, id);
    int rc = -1;
    if (i >= 0) {
        if (unlink(meta) != 0 && errno != ENOENT) {
            rc = -2; /* still there: stays listed */
        } else {
            unlink(data);
            fsync_dir(f->dir);
            json_decref(f->v[i].obj);
            memmove(&f->v[i], &f->v[i + 1], (f->n - (size_t)i - 1) * sizeof *f->v);
            f->n--;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

bool ft_files_path(ft_files *f, const char *id, char *out, size_t cap) {
    not_found(id);
    if (!ft_files_valid_id(id)) return false;
    if (f->pg) return ffpg_path(f->pg, id, out, cap, &last_error);
    pthread_mutex_lock(&f->mu);
    bool ok = find(f, id) >= 0;
    pthread_mutex_unlock(&f->mu);
    if (ok) path_of(f, out, cap, "", id, ".jsonl");
    return ok;
}

int ft_files_new_id(char out[64]) {
    unsigned char r[ID_HEX / 2];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t got = read(fd, r, sizeof r);
    close(fd);
    if (got != (ssize_t)sizeof r) return -1;
    memcpy(out, ID_PREFIX, sizeof ID_PREFIX - 1);
    for (size_t i = 0; i < sizeof r; i++) snprintf(out + sizeof ID_PREFIX - 1 + 2 * i, 3, "%02x", r[i]);
    return 0;
}

bool ft_files_remote(const ft_files *f) { return f->pg != NULL; }
