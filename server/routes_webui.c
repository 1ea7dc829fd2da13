/*
 * routes_webui.c — the web page: GET / sends index.html, GET /webui/{name} the page's other files (scripts,
 * styles), all compiled in (webui_assets.h). A file goes gzip-compressed when the client accepts it, with a strong
 * ETag per representation ("<hash>" or "<hash>-gz") so If-None-Match gets a 304, and "Cache-Control: no-cache":
 * the browser keeps its copy but asks each time, so a new server never leaves an old page behind. The page holds
 * no data, so it loads without the API key (router.c); it asks for the key itself. --no-webui turns it off.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_error.h"
#include "app.h"
#include "webui_assets.h"
#include "webui_negotiate.h"

static const webui_asset *find_asset(const char *path) {
    const char *name = !strcmp(path, "/") ? "index.html"
                       : !strncmp(path, "/webui/", 7) ? path + 7
                       : NULL;
    if (!name) return NULL;
    for (size_t i = 0; i < WEBUI_N_ASSETS; i++)
        if (!strcmp(WEBUI_ASSETS[i].name, name)) return &WEBUI_ASSETS[i];
    return NULL;
}

bool webui_public(const server_app *app, const char *path) {
    return !app->opts.no_webui && (!strcmp(path, "/") || !strncmp(path, "/webui/", 7));
}

void route_webui(server_app *app, const http_request *req, http_reply *rep) {
    const webui_asset *a = app->opts.no_webui ? NULL : find_asset(req->path);
    if (!a) {
        reply_error(rep, 404, "not_found", NULL, NULL, "no route GET %.128s%s", req->path,
                    app->opts.no_webui ? " (the web page is off: --no-webui)" : "");
        return;
    }
    bool gz = webui_accepts_gzip(req->header(req, "Accept-Encoding"));
    char etag[40];
    snprintf(etag, sizeof etag, "\"%s%s\"", a->hash, gz ? "-gz" : "");
    http_reply_header(rep, "ETag", etag);
    http_reply_header(rep, "Cache-Control", "no-cache");
    http_reply_header(rep, "Vary", "Accept-Encoding");
    if (webui_etag_matches(req->header(req, "If-None-Match"), etag)) {
        rep->status = 304; /* no body, no Content-Type: the client's copy stands */
        return;
    }
    if (gz) http_reply_header(rep, "Content-Encoding", "gzip");
    reply_text(rep, 200, a->content_type, (const char *)(gz ? a->gz : a->raw), gz ? a->gz_len : a->raw_len);
}
