/*
 * http_door.c — accept, wait for complete headers, judge, hand over or answer (see http_door.h).
 *
 * A connection's bytes stay in its socket buffer until libmicrohttpd reads them, so polling it for input would
 * report the same bytes forever: a connection with a partial request is looked at again after a pause instead
 * (doubling while nothing new arrives), and FIONREAD tells whether anything did before the bytes are peeked
 * again. Meanwhile it is polled only for the peer hanging up.
 */
#define _GNU_SOURCE /* accept4, POLLRDHUP */
#include "http_door.h"

#include "http_framing.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define RECHECK_MIN_S 0.005
#define RECHECK_MAX_S 0.25
#define ADMIT_WAIT_S 1.0 /* a complete request waits this long for room before its 503 */
#define ADMIT_RETRY_S 0.01

#define ERROR_JSON(msg, code)                                                                                     \
    "{\"error\":{\"message\":\"" msg "\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"" code "\"}}"
static const char TOO_SLOW[] = ERROR_JSON(
    "the request headers did not arrive within the connection timeout (--conn-timeout)", "request_timeout");
static const char NOT_HTTP[] = ERROR_JSON("malformed request: the request line is not HTTP", "bad_request");
static const char TOO_BIG[] = ERROR_JSON("the request line and headers exceed 65536 bytes", "headers_too_large");
static const char FULL[] = "{\"error\":{\"message\":\"the server is at its connection limit (--max-conns); retry "
                           "shortly\",\"type\":\"server_error\",\"param\":null,\"code\":\"server_busy\"}}";

typedef struct {
    int fd;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    double accepted;
    double deadline;   /* the headers must be complete by then */
    double recheck;    /* 0: poll for input; else look again at this time */
    double backoff;    /* the current pause between looks */
    size_t seen;       /* bytes looked at so far: no need to peek again until more arrive */
    double full_since; /* > 0: headers complete, waiting for the server to have room */
} pending;

struct http_door {
    int listen_fd;
    int wake[2]; /* a byte here wakes the thread to look at the flags */
    atomic_bool quiesced, stopping;
    pthread_t thread;
    int max_pending;
    double header_timeout_s;
    door_handoff handoff;
    void *cls;
    pending *p;
    int n;
    char *buf; /* DOOR_MAX_HEADERS + 1 bytes: one peek */
    atomic_uint_least64_t refused_full, dropped_oldest, refused_bad;
    atomic_int n_public;
};

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* RFC 9110 tchar: the characters a method token may have. */
static bool is_tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

door_verdict door_judge(const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)bytes[i];
        if (c == ' ') return i > 0 ? DOOR_HTTP : DOOR_BAD;
        if (!is_tchar(c) || i >= DOOR_MAX_METHOD) return DOOR_BAD;
    }
    return DOOR_MORE;
}

size_t door_headers_end(const char *bytes, size_t n, size_t from) {
    for (size_t i = from; i < n; i++) {
        if (bytes[i] != '\n') continue;
        if (i + 1 < n && bytes[i + 1] == '\n') return i + 2;
        if (i + 2 < n && bytes[i + 1] == '\r' && bytes[i + 2] == '\n') return i + 3;
    }
    return 0;
}

void http_send_raw(int fd, const char *status, const char *extra_header, const char *json_body) {
    char buf[1024];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %s\r\nContent-Type: application/json\r\nConnection: close\r\n%s%s"
                     "Content-Length: %zu\r\n\r\n%s",
                     status, extra_header ? extra_header : "", extra_header ? "\r\n" : "", strlen(json_body),
                     json_body);
    if (n <= 0 || (size_t)n >= sizeof buf) return;
    ssize_t w = send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
}

static void drop(http_door *d, int i) {
    d->p[i] = d->p[--d->n];
}

/* Answers and closes. The client's unread bytes are drained first: closing with unread input would reset the
 * connection and could destroy the answer before the client reads it. */
static void refuse(int fd, const char *status, const char *extra_header, const char *json_body) {
    http_send_raw(fd, status, extra_header, json_body);
    shutdown(fd, SHUT_WR);
    char sink[4096];
    /* bounded: a client streaming garbage must not hold the door's one thread */
    for (int i = 0; i < 16 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++) continue;
    close(fd);
}

static void refuse_bad(http_door *d, int fd, const char *status, const char *json_body) {
    atomic_fetch_add(&d->refused_bad, 1);
    refuse(fd, status, NULL, json_body);
}

static void look_later(pending *c, double now, bool progressed) {
    c->backoff = progressed || c->backoff == 0 ? RECHECK_MIN_S : c->backoff * 2;
    if (c->backoff > RECHECK_MAX_S) c->backoff = RECHECK_MAX_S;
    c->recheck = now + c->backoff;
}

/* Offers a complete request to the server; true when it left the door. */
static bool admit(http_door *d, pending *c, double now) {
    if (d->handoff(d->cls, c->fd, (const struct sockaddr *)&c->addr, c->addrlen) == DOOR_TAKEN) return true;
    if (!c->full_since) c->full_since = now;
    if (now - c->full_since >= ADMIT_WAIT_S) {
        atomic_fetch_add(&d->refused_full, 1);
        refuse(c->fd, "503 Service Unavailable", "Retry-After: 1", FULL);
        return true;
    }
    c->recheck = now + ADMIT_RETRY_S;
    return false;
}

/* Looks at pending connection i; true when it left the door (handed over, answered or closed). hup: the peer
 * hung up (nothing more will arrive). */
static bool examine(http_door *d, int i, double now, bool hup) {
    pending *c = &d->p[i];
    if (c->full_since) return admit(d, c, now);
    for (;;) {
        int avail = 0;
        if (ioctl(c->fd, FIONREAD, &avail) != 0 || avail < 0) {
            close(c->fd);
            return true;
        }
        if (avail == 0) { /* nothing yet, or the peer is gone */
            ssize_t k = recv(c->fd, d->buf, 1, MSG_PEEK | MSG_DONTWAIT);
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) && !hup) {
                c->recheck = 0;
                return false;
            }
            if (k <= 0) {
                close(c->fd);
                return true;
            }
            avail = 1;
        }
        if ((size_t)avail <= c->seen) { /* nothing new since the last look */
            if (hup) {
                close(c->fd);
                return true;
            }
            look_later(c, now, false);
            return false;
        }
        size_t want = (size_t)avail < DOOR_MAX_HEADERS + 1 ? (size_t)avail : DOOR_MAX_HEADERS + 1;
        ssize_t k = recv(c->fd, d->buf, want, MSG_PEEK | MSG_DONTWAIT);
        if (k <= 0) {
            close(c->fd);
            return true;
        }
        size_t n = (size_t)k, crlf = 0;
        while (crlf < n && (d->buf[crlf] == '\r' || d->buf[crlf] == '\n')) crlf++;
        if (crlf > 0) { /* empty lines before a request: consumed, then look again */
            if (recv(c->fd, d->buf, crlf, MSG_DONTWAIT) < 0) {
                close(c->fd);
                return true;
            }
            c->seen = 0;
            continue;
        }
        door_verdict v = door_judge(d->buf, n < DOOR_MAX_METHOD + 2 ? n : DOOR_MAX_METHOD + 2);
        if (v == DOOR_BAD) {
            refuse_bad(d, c->fd, "400 Bad Request", NOT_HTTP);
            return true;
        }
        size_t end = v == DOOR_HTTP ? door_headers_end(d->buf, n, c->seen > 2 ? c->seen - 2 : 0) : 0;
        if (!end) {
            if (n > DOOR_MAX_HEADERS) {
                refuse_bad(d, c->fd, "431 Request Header Fields Too Large", TOO_BIG);
                return true;
            }
            if (hup) {
                close(c->fd);
                return true;
            }
            c->seen = n;
            look_later(c, now, true);
            return false;
        }
        const char *line_end = memchr(d->buf, '\n', end);
        size_t block = line_end ? (size_t)(line_end - d->buf) + 1 : end;
        framing_headers fh = {0};
        framing_scan(&fh, d->buf + block, end - block);
        const char *why = framing_judge(&fh);
        if (why) {
            char json[512];
            snprintf(json, sizeof json, ERROR_JSON("%s", "bad_framing"), why);
            refuse_bad(d, c->fd, "400 Bad Request", json);
            return true;
        }
        return admit(d, c, now);
    }
}

/* Makes room for one more: the connection that has waited longest for its headers is closed. false when every
 * connection held is a complete request waiting for room (the new one then waits its turn outside). */
static bool drop_oldest(http_door *d) {
    int oldest = -1;
    for (int i = 0; i < d->n; i++)
        if (!d->p[i].full_since && (oldest < 0 || d->p[i].accepted < d->p[oldest].accepted)) oldest = i;
    if (oldest < 0) return false;
    close(d->p[oldest].fd);
    drop(d, oldest);
    atomic_fetch_add(&d->dropped_oldest, 1);
    return true;
}

static void accept_all(http_door *d, double now) {
    for (;;) {
        if (d->n >= d->max_pending && !drop_oldest(d)) return; /* left in the listen backlog */
        pending c = {.addrlen = sizeof c.addr};
        c.fd = accept4(d->listen_fd, (struct sockaddr *)&c.addr, &c.addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c.fd < 0) return; /* EAGAIN, or an error the next poll retries */
        c.accepted = now;
        c.deadline = now + d->header_timeout_s;
        d->p[d->n++] = c;
    }
}

static void *door_main(void *arg) {
    http_door *d = arg;
    struct pollfd *pf = malloc((size_t)(d->max_pending + 2) * sizeof *pf);
    if (!pf) return NULL;
    while (!atomic_load(&d->stopping)) {
        double now = mono_s(), next = now + 1.0;
        int np = 0;
        pf[np++] = (struct pollfd){.fd = d->wake[0], .events = POLLIN};
        bool room = d->n < d->max_pending; /* or a connection accept_all may drop for a new one */
        for (int i = 0; i < d->n && !room; i++) room = !d->p[i].full_since;
        bool listening = !atomic_load(&d->quiesced) && room;
        if (listening) pf[np++] = (struct pollfd){.fd = d->listen_fd, .events = POLLIN};
        int first = np;
        for (int i = 0; i < d->n; i++) {
            pending *c = &d->p[i];
            pf[np++] = (struct pollfd){.fd = c->fd, .events = c->recheck ? POLLRDHUP : POLLIN | POLLRDHUP};
            if (!c->full_since && c->deadline < next) next = c->deadline;
            if (c->recheck && c->recheck < next) next = c->recheck;
        }
        int ms = next > now ? (int)((next - now) * 1e3) + 1 : 0;
        if (poll(pf, (nfds_t)np, ms) < 0 && errno != EINTR) break;
        if (pf[0].revents) {
            char b[64];
            while (read(d->wake[0], b, sizeof b) > 0) continue;
        }
        now = mono_s();
        /* The pending connections first (their pollfd indexes are those of this round), then new ones. */
        for (int i = d->n - 1; i >= 0; i--) {
            pending *c = &d->p[i];
            short ev = pf[first + i].revents;
            bool hup = (ev & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
            bool due = hup || (c->recheck ? now >= c->recheck : ev != 0);
            if (due && examine(d, i, now, hup)) drop(d, i);
            else if (!c->full_since && now >= c->deadline) { /* part of a request gets a 408; silence is closed */
                if (c->seen) refuse_bad(d, c->fd, "408 Request Timeout", TOO_SLOW);
                else close(c->fd);
                drop(d, i);
            }
        }
        if (listening && pf[1].revents) accept_all(d, now);
        atomic_store(&d->n_public, d->n);
    }
    free(pf);
    return NULL;
}

http_door *door_start(int listen_fd, int max_pending, int header_timeout_s, door_handoff handoff, void *cls) {
    http_door *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->listen_fd = listen_fd;
    d->max_pending = max_pending > 0 ? max_pending : 1;
    d->header_timeout_s = header_timeout_s;
    d->handoff = handoff;
    d->cls = cls;
    d->p = calloc((size_t)d->max_pending, sizeof *d->p);
    d->buf = malloc(DOOR_MAX_HEADERS + 1);
    if (!d->p || !d->buf || pipe2(d->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        free(d->p);
        free(d->buf);
        free(d);
        return NULL;
    }
    if (pthread_create(&d->thread, NULL, door_main, d) != 0) {
        close(d->wake[0]);
        close(d->wake[1]);
        free(d->p);
        free(d->buf);
        free(d);
        return NULL;
    }
    return d;
}

void door_get_stats(http_door *d, door_stats *out) {
    memset(out, 0, sizeof *out);
    if (!d) return;
    out->refused_full = atomic_load(&d->refused_full);
    out->dropped_oldest = atomic_load(&d->dropped_oldest);
    out->refused_bad = atomic_load(&d->refused_bad);
    out->pending = atomic_load(&d->n_public);
}

static void wake(http_door *d) {
    ssize_t w = write(d->wake[1], "w", 1);
    (void)w; /* the pipe full: a wake-up is pending anyway */
}

void door_quiesce(http_door *d) {
    if (!d) return;
    atomic_store(&d->quiesced, true);
    wake(d);
}

void door_stop(http_door *d) {
    if (!d) return;
    atomic_store(&d->stopping, true);
    wake(d);
    pthread_join(d->thread, NULL);
    for (int i = 0; i < d->n; i++) close(d->p[i].fd);
    close(d->wake[0]);
    close(d->wake[1]);
    free(d->p);
    free(d->buf);
    free(d);
}
