/*
 * http.c — the listening socket and libmicrohttpd's callbacks (see http.h).
 *
 * Mode: MHD_USE_THREAD_PER_CONNECTION, so handlers and stream readers may block. The server owns the listening
 * socket: the front door (http_door.c) accepts, holds a connection until its headers are complete, and offers it
 * here; admit() takes it only while fewer than --max-conns connections are open (closing the longest-idle
 * keep-alive connection to make room when every slot is taken), so libmicrohttpd never reaches its own
 * connection limit, where 0.9.75 deadlocks. Each request's body is collected into a bounded buffer: a
 * Content-Length over the limit is answered 413 before the body is read, and one that does not fit in what all
 * requests together may hold (--max-body-inflight) 503; a chunked body that grows past either closes the
 * connection (libmicrohttpd cannot queue a reply mid-upload). A body that stops arriving before its
 * Content-Length is complete gets a 408 when the connection timeout ends it. A request with ambiguous framing
 * (http_framing.h) is answered 400 and its connection closed. Headers, the URL and the read buffer are bounded
 * by MHD_OPTION_CONNECTION_MEMORY_LIMIT.
 */
#include "http.h"

#include "http_door.h"
#include "http_framing.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* One connection handed to libmicrohttpd, from admit() until it closes. */
typedef struct conn_entry {
    int fd;
    bool started;      /* libmicrohttpd has set it up (NOTIFY_CONNECTION STARTED) */
    bool idle;         /* between requests on a keep-alive connection */
    bool evicted;      /* shut down by admit() to make room: no longer counted */
    double since;      /* handed over, or idle since */
    struct conn_entry *next;
} conn_entry;

struct http_server {
    struct MHD_Daemon *d;
    http_handler handler;
    void *app;
    size_t max_body;
    int port;
    int listen_fd;
    http_door *door;
    atomic_int active; /* requests between their headers and their completion */
    pthread_mutex_t conns_mu; /* guards the fields below */
    conn_entry *conns;
    int max_conns, mhd_limit;
    int n_open;     /* admitted and not evicted: what --max-conns bounds */
    int n_evicting; /* shut down, not yet closed by libmicrohttpd */
    uint64_t evicted_total;
    size_t max_inflight;
    size_t inflight; /* body bytes reserved by requests in progress */
};

typedef struct {
    struct MHD_Connection *conn;
    conn_entry *entry; /* NULL when libmicrohttpd gave none */
    char *body;
    size_t len, cap;
    size_t reserved; /* bytes of the in-flight budget this request holds */
    bool too_large;
    bool busy;         /* the in-flight budget had no room: answer 503 */
    const char *bad_framing;
    bool dispatched; /* the handler ran: a reply is queued or being sent */
} req_state;

static double now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void http_reply_header(http_reply *rep, const char *name, const char *value) {
    if (rep->n_headers >= HTTP_MAX_HEADERS) return;
    rep->headers[rep->n_headers].name = name;
    snprintf(rep->headers[rep->n_headers].value, sizeof rep->headers[0].value, "%s", value);
    rep->n_headers++;
}

static const char *lookup_header(const http_request *req, const char *name) {
    return MHD_lookup_connection_value(((req_state *)req->impl)->conn, MHD_HEADER_KIND, name);
}

static const char *lookup_query(const http_request *req, const char *name) {
    return MHD_lookup_connection_value(((req_state *)req->impl)->conn, MHD_GET_ARGUMENT_KIND, name);
}

static ssize_t stream_cb(void *cls, uint64_t pos, char *buf, size_t max) {
    http_reply *rep = cls;
    ssize_t n = rep->read(rep->stream, buf, max);
    if (n > 0) return n;
    return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_free_cb(void *cls) {
    http_reply *rep = cls;
    if (rep->free) rep->free(rep->stream);
    free(rep);
}

static enum MHD_Result send_reply(struct MHD_Connection *conn, http_reply *rep) {
    struct MHD_Response *resp;
    if (rep->read) {
        http_reply *owned = malloc(sizeof *owned); /* lives until libmicrohttpd frees the stream */
        if (!owned) {
            if (rep->free) rep->free(rep->stream);
            return MHD_NO;
        }
        *owned = *rep;
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_cb, owned, stream_free_cb);
        if (!resp) {
            stream_free_cb(owned);
            return MHD_NO;
        }
    } else {
        resp = MHD_create_response_from_buffer(rep->body_len, rep->body ? rep->body : (char *)"",
                                               rep->body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
        if (!resp) {
            free(rep->body);
            return MHD_NO;
        }
        rep->body = NULL;
    }
    if (rep->content_type) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, rep->content_type);
    for (int i = 0; i < rep->n_headers; i++)
        MHD_add_response_header(resp, rep->headers[i].name, rep->headers[i].value);
    if (rep->close) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result r = MHD_queue_response(conn, (unsigned)rep->status, resp);
    MHD_destroy_response(resp);
    return r;
}

static const char BUSY[] = "{\"error\":{\"message\":\"the server holds as many request bodies as it may "
                           "(--max-body-inflight); retry shortly\",\"type\":\"server_error\",\"param\":null,"
                           "\"code\":\"server_busy\"}}";

/* Answers without the application: the request never reached a route. */
static enum MHD_Result reply_here(struct MHD_Connection *conn, int status, const char *json, bool close) {
    http_reply rep;
    memset(&rep, 0, sizeof rep);
    rep.status = status;
    rep.content_type = "application/json";
    rep.body = strdup(json);
    rep.body_len = rep.body ? strlen(json) : 0;
    rep.close = close;
    if (status == 503) http_reply_header(&rep, "Retry-After", "1");
    return send_reply(conn, &rep);
}

static enum MHD_Result dispatch(http_server *s, struct MHD_Connection *conn, req_state *st, const char *url,
                                const char *method) {
    st->dispatched = true;
    if (st->bad_framing) {
        char json[512];
        snprintf(json, sizeof json,
                 "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\",\"param\":null,"
                 "\"code\":\"bad_framing\"}}",
                 st->bad_framing);
        return reply_here(conn, 400, json, true);
    }
    if (st->busy) return reply_here(conn, 503, BUSY, true);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    http_request req = {.method = method, .path = url, .body = st->body ? st->body : "", .body_len = st->len,
                        .body_too_large = st->too_large, .fd = ci ? ci->connect_fd : -1,
                        .header = lookup_header, .query = lookup_query, .impl = st};
    http_reply rep;
    memset(&rep, 0, sizeof rep);
    s->handler(s->app, &req, &rep);
    return send_reply(conn, &rep);
}

/* Raises what the request holds of the in-flight budget to total bytes; false when the budget has no room. */
static bool reserve(http_server *s, req_state *st, size_t total) {
    if (total <= st->reserved) return true;
    pthread_mutex_lock(&s->conns_mu);
    bool ok = s->inflight + (total - st->reserved) <= s->max_inflight;
    if (ok) {
        s->inflight += total - st->reserved;
        st->reserved = total;
    }
    pthread_mutex_unlock(&s->conns_mu);
    return ok;
}

static enum MHD_Result collect_framing(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    framing_add(cls, key, strlen(key), value ? value : "", value ? strlen(value) : 0);
    return MHD_YES;
}

static void set_idle(http_server *s, conn_entry *e, bool idle) {
    if (!e) return;
    pthread_mutex_lock(&s->conns_mu);
    e->idle = idle;
    if (idle) e->since = now_mono();
    pthread_mutex_unlock(&s->conns_mu);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size,
                                  void **con_cls) {
    http_server *s = cls;
    req_state *st = *con_cls;
    if (!st) { /* headers are in; the body (if any) follows in later calls */
        st = calloc(1, sizeof *st);
        if (!st) return MHD_NO;
        st->conn = conn;
        *con_cls = st;
        atomic_fetch_add(&s->active, 1);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        st->entry = ci ? ci->socket_context : NULL;
        set_idle(s, st->entry, false);
        /* The door judged the first request's framing; later ones on a keep-alive connection come straight here. */
        framing_headers fh = {0};
        MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_framing, &fh);
        st->bad_framing = framing_judge(&fh);
        if (st->bad_framing) return dispatch(s, conn, st, url, method);
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long want = cl ? strtoull(cl, NULL, 10) : 0;
        if (want > s->max_body) {
            st->too_large = true; /* answered now, before the client sends the body */
            return dispatch(s, conn, st, url, method);
        }
        if (want && !reserve(s, st, (size_t)want + 1)) {
            st->busy = true;
            return dispatch(s, conn, st, url, method);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (st->len + n > s->max_body) return MHD_NO; /* chunked body past the limit: drop the connection */
        if (st->len + n + 1 > st->cap) {
            size_t cap = st->cap ? st->cap : 4096;
            while (cap < st->len + n + 1) cap *= 2;
            if (cap > s->max_body + 1) cap = s->max_body + 1;
            if (!reserve(s, st, cap)) return MHD_NO; /* chunked body past the in-flight budget: the same */
            char *p = realloc(st->body, cap);
            if (!p) return MHD_NO;
            st->body = p;
            st->cap = cap;
        }
        memcpy(st->body + st->len, upload_data, n);
        st->len += n;
        st->body[st->len] = '\0';
        return MHD_YES;
    }
    return dispatch(s, conn, st, url, method);
}

static const char BODY_TIMEOUT[] =
    "{\"error\":{\"message\":\"the request body stopped before its Content-Length within the connection timeout "
    "(--conn-timeout)\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"request_timeout\"}}";

/* A request whose body stopped before its Content-Length: libmicrohttpd closes it at the timeout without a word;
 * it tells us first, while the socket is still open, so the client learns why (best effort, never blocks). */
static void answer_timeout(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) http_send_raw(ci->connect_fd, "408 Request Timeout", NULL, BODY_TIMEOUT);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    http_server *s = cls;
    req_state *st = *con_cls;
    if (!st) return;
    if (toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED && !st->dispatched) answer_timeout(conn);
    atomic_fetch_sub(&s->active, 1);
    if (st->reserved) {
        pthread_mutex_lock(&s->conns_mu);
        s->inflight -= st->reserved;
        pthread_mutex_unlock(&s->conns_mu);
    }
    set_idle(s, st->entry, true);
    free(st->body);
    free(st);
    *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    fputs("mnemo-server: http: ", stderr);
    vfprintf(stderr, fmt, ap);
}

/* A bound, listening, non-blocking socket for host:port; -1 with the reason in err. */
static int listen_on(const char *host, int port, char *err, size_t errlen) {
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        len = sizeof *a4;
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        len = sizeof *a6;
    } else {
        snprintf(err, errlen, "--host '%s' is not an IPv4 or IPv6 address", host);
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int on = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on); /* restart while old peers linger */
    if (fd >= 0 && ss.ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 128) != 0) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s (address in use or not allowed?)", host, port,
                 strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

static int bound_port(int fd) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) return 0;
    return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
}

static void unlink_entry(http_server *s, conn_entry *e) {
    for (conn_entry **pp = &s->conns; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            return;
        }
}

/* Makes room by shutting down the keep-alive connection idle longest (its client reconnects, as HTTP allows);
 * libmicrohttpd's thread then sees the end of the stream and closes it. Called with conns_mu held. */
static bool evict_idle(http_server *s) {
    conn_entry *oldest = NULL;
    for (conn_entry *e = s->conns; e; e = e->next)
        if (e->started && e->idle && !e->evicted && (!oldest || e->since < oldest->since)) oldest = e;
    if (!oldest) return false;
    oldest->evicted = true;
    s->n_open--;
    s->n_evicting++;
    s->evicted_total++;
    shutdown(oldest->fd, SHUT_RDWR);
    return true;
}

/* Connections handed over that libmicrohttpd never started (it refused them later): forgotten after a while. */
static void forget_unstarted(http_server *s, double now) {
    for (conn_entry **pp = &s->conns; *pp;) {
        conn_entry *e = *pp;
        if (!e->started && now - e->since > 10.0) {
            *pp = e->next;
            s->n_open--;
            free(e);
        } else {
            pp = &e->next;
        }
    }
}

static door_admit admit(void *cls, int fd, const struct sockaddr *addr, socklen_t addrlen) {
    http_server *s = cls;
    double now = now_mono();
    pthread_mutex_lock(&s->conns_mu);
    forget_unstarted(s, now);
    if (s->n_open >= s->max_conns) evict_idle(s);
    conn_entry *e = NULL;
    if (s->n_open < s->max_conns && s->n_open + s->n_evicting < s->mhd_limit && (e = calloc(1, sizeof *e))) {
        e->fd = fd;
        e->since = now;
        e->next = s->conns;
        s->conns = e;
        s->n_open++;
    }
    pthread_mutex_unlock(&s->conns_mu);
    if (!e) return DOOR_FULL;
    if (MHD_add_connection(s->d, fd, addr, addrlen) != MHD_YES) { /* it closed fd itself */
        pthread_mutex_lock(&s->conns_mu);
        for (conn_entry *x = s->conns; x; x = x->next) /* only this thread adds entries: e cannot be reused */
            if (x == e && !e->started) {
                unlink_entry(s, e);
                s->n_open--;
                free(e);
                break;
            }
        pthread_mutex_unlock(&s->conns_mu);
    }
    return DOOR_TAKEN;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    http_server *s = cls;
    pthread_mutex_lock(&s->conns_mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        int fd = ci ? ci->connect_fd : -1;
        conn_entry *e = s->conns;
        while (e && (e->started || e->fd != fd)) e = e->next;
        if (!e && (e = calloc(1, sizeof *e))) { /* forgotten meanwhile: counted again */
            e->fd = fd;
            e->next = s->conns;
            s->conns = e;
            s->n_open++;
        }
        if (e) {
            e->started = true;
            e->since = now_mono();
        }
        *socket_context = e;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        conn_entry *e = *socket_context;
        unlink_entry(s, e);
        if (e->evicted) s->n_evicting--;
        else s->n_open--;
        free(e);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&s->conns_mu);
}

http_server *http_start(const http_config *cfg, http_handler handler, void *app, char *err, size_t errlen) {
    http_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->handler = handler;
    s->app = app;
    s->max_body = cfg->max_body;
    s->listen_fd = listen_on(cfg->host, cfg->port, err, errlen);
    if (s->listen_fd < 0) {
        free(s);
        return NULL;
    }
    s->port = bound_port(s->listen_fd);
    pthread_mutex_init(&s->conns_mu, NULL);
    s->max_conns = cfg->max_conns;
    /* libmicrohttpd's own limit is never reached: admit() counts evicted connections still closing too */
    s->mhd_limit = cfg->max_conns * 2 + 16;
    s->max_inflight = cfg->max_inflight > cfg->max_body + 1 ? cfg->max_inflight : cfg->max_body + 1;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, /* first, or libmicrohttpd complains */
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->mhd_limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->conn_timeout_s,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)DOOR_MAX_HEADERS + 4096,
                            MHD_OPTION_THREAD_STACK_SIZE, (size_t)1 << 20,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_END);
    if (s->d) s->door = door_start(s->listen_fd, cfg->max_pending, cfg->conn_timeout_s, admit, s);
    if (!s->d || !s->door) {
        snprintf(err, errlen, "cannot start the HTTP server (out of memory or threads)");
        if (s->d) MHD_stop_daemon(s->d);
        close(s->listen_fd);
        pthread_mutex_destroy(&s->conns_mu);
        free(s);
        return NULL;
    }
    return s;
}

void http_get_stats(http_server *s, http_stats *out) {
    memset(out, 0, sizeof *out);
    if (!s) return;
    door_stats ds;
    door_get_stats(s->door, &ds);
    out->waiting_headers = ds.pending;
    out->refused_full = ds.refused_full;
    out->dropped_waiting = ds.dropped_oldest;
    out->refused_at_door = ds.refused_bad;
    pthread_mutex_lock(&s->conns_mu);
    out->open = s->n_open;
    out->evicted_idle = s->evicted_total;
    out->body_bytes_inflight = s->inflight;
    pthread_mutex_unlock(&s->conns_mu);
}

int http_port(const http_server *s) { return s ? s->port : 0; }

int http_active_requests(const http_server *s) { return s ? atomic_load(&((http_server *)s)->active) : 0; }

void http_quiesce(http_server *s) {
    if (!s || !s->door) return;
    door_quiesce(s->door);
    /* Shut down, not closed (the door may be polling it): new connections now fail at once instead of waiting
     * in the backlog. */
    shutdown(s->listen_fd, SHUT_RDWR);
}

void http_stop(http_server *s) {
    if (!s) return;
    door_stop(s->door); /* first: nothing is handed to libmicrohttpd after this */
    if (s->d) MHD_stop_daemon(s->d);
    close(s->listen_fd);
    for (conn_entry *e = s->conns, *next; e; e = next) { /* never started: libmicrohttpd dropped them */
        next = e->next;
        free(e);
    }
    pthread_mutex_destroy(&s->conns_mu);
    free(s);
}
