/*
 * http.h — the boundary between libmicrohttpd (http.c, the only file that includes microhttpd.h) and the rest of
 * the server. http.c turns a finished HTTP request into an http_request, calls one handler, and sends the
 * http_reply it fills: either a complete body or a stream that the handler's reader produces piece by piece.
 *
 * Threading: libmicrohttpd runs one thread per connection, so a handler may block (a non-streaming completion
 * waits for its result) and a stream reader may block until it has bytes. Connection count, idle time, header
 * memory, body size and the bodies held at once are all bounded here.
 */
#ifndef MNEMO_SERVER_HTTP_H
#define MNEMO_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct http_request http_request;
struct http_request {
    const char *method;    /* "GET", "POST", ... */
    const char *path;      /* without the query string */
    const char *body;      /* NUL-terminated copy of the body ("" when none) */
    size_t body_len;
    bool body_too_large;   /* the body exceeded the limit: answer 413 */
    int fd;                /* the client socket, for liveness checks only (-1 when unknown) */
    /* Case-insensitive header lookup; NULL when absent. */
    const char *(*header)(const http_request *req, const char *name);
    /* A query-string argument (?name=value, URL-decoded); NULL when absent. May be NULL itself (tests). */
    const char *(*query)(const http_request *req, const char *name);
    void *impl;
};

#define HTTP_MAX_HEADERS 4

/* Streaming body: read blocks until it can return > 0 bytes (at most max), 0 at the end, -1 to abort the
 * connection. free is called exactly once when the connection is done with the stream (finished, failed or the
 * client went away). */
typedef ssize_t (*http_stream_read)(void *stream, char *buf, size_t max);
typedef void (*http_stream_free)(void *stream);

typedef struct {
    int status;
    const char *content_type;
    char *body;            /* malloc'd; http.c frees it */
    size_t body_len;
    struct {
        const char *name;
        char value[96];
    } headers[HTTP_MAX_HEADERS];
    int n_headers;
    bool close;            /* ask the client to close the connection after this reply */
    http_stream_read read; /* non-NULL: the body is streamed */
    http_stream_free free;
    void *stream;
} http_reply;

void http_reply_header(http_reply *rep, const char *name, const char *value);

typedef void (*http_handler)(void *app, const http_request *req, http_reply *rep);

typedef struct {
    const char *host;
    int port;
    size_t max_body;
    int max_conns;      /* connections handed to libmicrohttpd at once (each holds a thread) */
    int max_pending;    /* connections held by the front door while their headers arrive */
    size_t max_inflight; /* request body bytes held at once over all connections (at least max_body) */
    int conn_timeout_s;
} http_config;

typedef struct {
    int open;                    /* connections being served (keep-alive ones between requests included) */
    int waiting_headers;         /* connections in the front door */
    uint64_t refused_full;       /* answered 503: no room within a second */
    uint64_t dropped_waiting;    /* closed to make room in the front door (the longest waiting) */
    uint64_t refused_at_door;    /* answered 400 / 408 / 431 before a request reached a route */
    uint64_t evicted_idle;       /* idle keep-alive connections closed to make room */
    size_t body_bytes_inflight;  /* request bodies held now */
} http_stats;

typedef struct http_server http_server;

/* Binds and starts serving. NULL on failure with the reason in err. */
http_server *http_start(const http_config *cfg, http_handler handler, void *app, char *err, size_t errlen);
int http_port(const http_server *s);
void http_get_stats(http_server *s, http_stats *out);
/* Requests received and not yet fully answered (keep-alive connections waiting for one do not count). */
int http_active_requests(const http_server *s);
/* Stop accepting new connections (existing ones go on). */
void http_quiesce(http_server *s);
/* Close every connection and join the connection threads; handlers and streams must be able to finish. */
void http_stop(http_server *s);

#endif
