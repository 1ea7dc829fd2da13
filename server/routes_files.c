/*
 * routes_files.c — the OpenAI files API over HTTP (the store is finetune_files.c):
 *   POST   /v1/files               multipart/form-data: file (with its filename), purpose ("fine-tune") -> the file
 *   GET    /v1/files               ?purpose=&after=&limit=(1..10000, 10000)&order=(desc|asc) -> {"object": "list", ...}
 *   GET    /v1/files/{id}          -> the file object
 *   GET    /v1/files/{id}/content  -> the bytes as uploaded (application/octet-stream)
 *   DELETE /v1/files/{id}          -> {"id", "object": "file", "deleted": true}
 * Without --jobs-dir or --state postgresql://... (where files are rows shared by every node) every one answers 501;
 * with the state database away, 503 with Retry-After. An id that is not "file-" + 24 hex digits is a 404 like an
 * unknown one, and is never turned into a path. Upload size is bounded by --max-body (router.c answers 413).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api_error.h"
#include "app.h"
#include "multipart.h"

#define FILES_PREFIX "/v1/files/"
#define ID_MAX 64 /* longer than any valid id: a longer path segment is not an id */

/* false after answering 501 (no --jobs-dir). */
static bool files_enabled(server_app *app, http_reply *rep) {
    if (app->files) return true;
    reply_error(rep, 501, "jobs_dir_not_set", NULL, NULL,
                "the files API is off: start mnemo-server with --jobs-dir DIR to upload and keep files");
    return false;
}

static void reply_no_file(http_reply *rep, const char *id) {
    const api_error *le = ft_files_last_error(); /* the state database failing is not "no such file" */
    if (ft_files_valid_id(id) && le->status >= 500) { /* a valid id was looked up: le is that lookup's */
        reply_api_error(rep, le);
        return;
    }
    if (ft_files_valid_id(id)) reply_error(rep, 404, "file_not_found", "file_id", NULL, "No such File object: %s", id);
    else reply_error(rep, 404, "file_not_found", "file_id", NULL, "No such File object: '%.64s' (file ids are "
                     "\"file-\" and 24 hex digits)", id);
}

/* "/v1/files/<id>[/<action>]" -> id (copied, at most ID_MAX bytes; longer ones are cut and then match no file) and
 * action ("" when none). */
static void split_path(const char *path, char id[ID_MAX + 1], const char **action) {
    const char *p = path + strlen(FILES_PREFIX);
    const char *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    *action = slash ? slash + 1 : "";
    if (n > ID_MAX) n = ID_MAX;
    memcpy(id, p, n);
    id[n] = '\0';
}

void route_files_create(server_app *app, const http_request *req, http_reply *rep) {
    if (!files_enabled(app, rep)) return;
    const char *ct = req->header(req, "Content-Type");
    char boundary[80];
    if (multipart_boundary(ct, boundary, sizeof boundary) != 0) {
        reply_error(rep, 400, "invalid_content_type", NULL, NULL,
                    "POST /v1/files takes multipart/form-data with the fields 'file' and 'purpose' (got Content-Type: "
                    "%.100s)", ct ? ct : "none");
        return;
    }
    mp_part parts[MP_MAX_PARTS];
    int n = 0;
    char err[256];
    if (multipart_parse(req->body, req->body_len, boundary, parts, &n, err, sizeof err) != 0) {
        reply_error(rep, 400, "invalid_multipart", NULL, NULL, "malformed multipart/form-data body: %s", err);
        return;
    }
    const mp_part *file = multipart_find(parts, n, "file"), *purpose = multipart_find(parts, n, "purpose");
    if (!file) {
        reply_error(rep, 400, "missing_required_parameter", "file", NULL,
                    "'file' is required: the form field with the file's bytes (curl -F file=@train.jsonl)");
        return;
    }
    if (!purpose) {
        reply_error(rep, 400, "missing_required_parameter", "purpose", NULL,
                    "'purpose' is required: the form field purpose=fine-tune");
        return;
    }
    char pv[64];
    if (purpose->data.n >= sizeof pv || memchr(purpose->data.p, '\0', purpose->data.n)) {
        reply_error(rep, 400, "invalid_value", "purpose", NULL, "purpose must be \"fine-tune\"");
        return;
    }
    memcpy(pv, purpose->data.p, purpose->data.n);
    pv[purpose->data.n] = '\0';
    const char *fname = file->filename.n ? file->filename.p : "upload.jsonl";
    size_t fname_len = file->filename.n ? file->filename.n : strlen(fname);
    if (fname_len > 1024) {
        reply_error(rep, 400, "invalid_value", "file", NULL, "the filename is longer than 1024 bytes");
        return;
    }
    json_t *out;
    api_error e;
    if (ft_files_create(app->files, fname, fname_len, pv, file->data.p, file->data.n, &out, &e) != 0)
        reply_api_error(rep, &e);
    else
        reply_json(rep, 200, out);
}

/* A query argument, or NULL (also when the request has no query lookup). */
static const char *query(const http_request *req, const char *name) {
    return req->query ? req->query(req, name) : NULL;
}

void route_files_list(server_app *app, const http_request *req, http_reply *rep) {
    if (!files_enabled(app, rep)) return;
    const char *purpose = query(req, "purpose"), *after = query(req, "after"), *lim = query(req, "limit"),
               *order = query(req, "order");
    long limit = 10000;
    if (lim) {
        char *end;
        errno = 0;
        limit = strtol(lim, &end, 10);
        if (errno || end == lim || *end || limit < 1 || limit > 10000) {
            reply_error(rep, 400, "invalid_value", "limit", NULL, "limit must be an integer from 1 to 10000 (got "
                        "'%.32s')", lim);
            return;
        }
    }
    if (order && strcmp(order, "asc") != 0 && strcmp(order, "desc") != 0) {
        reply_error(rep, 400, "invalid_value", "order", NULL, "order must be \"asc\" or \"desc\" (got '%.32s')", order);
        return;
    }
    if (purpose && !*purpose) purpose = NULL;
    if (after && !*after) after = NULL;
    json_t *list = ft_files_list(app->files, purpose, after, (int)limit, order && !strcmp(order, "asc"));
    if (!list) {
        if (ft_files_last_error()->status >= 500)
            reply_api_error(rep, ft_files_last_error());
        else if (after)
            reply_error(rep, 400, "invalid_value", "after", NULL, "no file '%.64s' to list after (after takes the id "
                        "of the last file of the previous page)", after);
        else reply_error(rep, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    reply_json(rep, 200, list);
}

/* The file's bytes as the body. */
static void reply_content(server_app *app, const char *id, http_reply *rep) {
    char path[4096];
    if (!ft_files_path(app->files, id, path, sizeof path)) {
        reply_no_file(rep, id);
        return;
    }
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int saved = errno;
        if (fd >= 0) close(fd);
        if (saved == ENOENT) reply_no_file(rep, id); /* deleted meanwhile */
        else reply_error(rep, 500, "server_error", NULL, NULL, "cannot read the file %s: %s", id, strerror(saved));
        return;
    }
    size_t size = (size_t)sb.st_size, got = 0;
    char *buf = malloc(size + 1);
    while (buf && got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf || got != size) {
        free(buf);
        reply_error(rep, 500, "server_error", NULL, NULL, "cannot read the file %s", id);
        return;
    }
    rep->status = 200;
    rep->content_type = "application/octet-stream";
    rep->body = buf;
    rep->body_len = size;
}

void route_file_get(server_app *app, const http_request *req, http_reply *rep) {
    if (!files_enabled(app, rep)) return;
    char id[ID_MAX + 1];
    const char *action;
    split_path(req->path, id, &action);
    if (!ft_files_valid_id(id)) {
        reply_no_file(rep, id);
        return;
    }
    if (!strcmp(action, "content")) {
        reply_content(app, id, rep);
        return;
    }
    if (*action) {
        reply_error(rep, 404, "not_found", NULL, NULL, "no route GET %.200s (GET /v1/files/{id} or "
                    "/v1/files/{id}/content)", req->path);
        return;
    }
    json_t *o = ft_files_get(app->files, id);
    if (!o) reply_no_file(rep, id);
    else reply_json(rep, 200, o);
}

void route_file_delete(server_app *app, const http_request *req, http_reply *rep) {
    if (!files_enabled(app, rep)) return;
    char id[ID_MAX + 1];
    const char *action;
    split_path(req->path, id, &action);
    if (!ft_files_valid_id(id)) {
        reply_no_file(rep, id);
        return;
    }
    if (*action) {
        reply_error(rep, 404, "not_found", NULL, NULL, "no route DELETE %.200s (DELETE /v1/files/{id})", req->path);
        return;
    }
    int rc = ft_files_delete(app->files, id);
    if (rc == -1) reply_no_file(rep, id);
    else if (rc != 0 && ft_files_last_error()->status >= 500) reply_api_error(rep, ft_files_last_error());
    else if (rc != 0) reply_error(rep, 500, "server_error", NULL, NULL, "cannot delete the file %s", id);
    else reply_json(rep, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object", "file", "deleted", 1));
}
