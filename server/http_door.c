/*
 * http_door.c — accept, judge the first bytes, hand over or answer 400 (see http_door.h).
 *
 * A connection whose bytes so far are only part of a method is not polled for input again for RECHECK_S (the
 * peeked bytes stay readable, so polling for them would spin); it is peeked again after that pause.
 */
#define _GNU_SOURCE /* accept4 */
#include "http_door.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RECHECK_S 0.01

static const char TOO_SLOW[] = "{\"error\":{\"message\":\"the request line did not arrive within the connection "
                               "timeout (--conn-timeout)\",\"type\":\"invalid_request_error\",\"param\":null,"
                               "\"code\":\"request_timeout\"}}";
static const char NOT_HTTP[] = "{\"error\":{\"message\":\"malformed request: the request line is not HTTP\","
                               "\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"bad_request\"}}";

typedef struct {
    int fd;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    double deadline; /* closed when nothing decides it by then */
    double recheck;  /* 0: poll for input; else peek again at this time */
} pending;

struct http_door {
    int listen_fd;
    int wake[2]; /* a byte here wakes the thread to look at the flags */
    atomic_bool quiesced, stopping;
    pthread_t thread;
    int max_pending;
    double idle_s;
    door_handoff handoff;
    void *cls;
    pending *p;
    int n;
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

void http_send_raw(int fd, const char *status, const char *json_body) {
    char buf[1024];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %s\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     status, strlen(json_body), json_body);
    if (n <= 0 || (size_t)n >= sizeof buf) return;
    ssize_t w = send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
}

static void drop(http_door *d, int i) {
    d->p[i] = d->p[--d->n];
}

/* Answers and closes. The client's unread bytes are drained first: closing with unread input would reset the
 * connection and could destroy the answer before the client reads it. */
static void refuse(int fd, const char *status, const char *json_body) {
    http_send_raw(fd, status, json_body);
    shutdown(fd, SHUT_WR);
    char sink[4096];
    /* bounded: a client streaming garbage must not hold the door's one thread */
    for (int i = 0; i < 16 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++) continue;
    close(fd);
}

/* Looks at pending connection i; true when it left the door (handed over, refused or closed). */
static bool examine(http_door *d, int i, double now) {
    pending *c = &d->p[i];
    char buf[DOOR_MAX_METHOD + 2];
    for (;;) {
        ssize_t k = recv(c->fd, buf, sizeof buf, MSG_PEEK);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            c->recheck = 0;
            return false;
        }
        if (k <= 0) { /* closed by the client, or a socket error */
            close(c->fd);
            return true;
        }
        size_t crlf = 0;
        while (crlf < (size_t)k && (buf[crlf] == '\r' || buf[crlf] == '\n')) crlf++;
        if (crlf > 0) { /* empty lines before a request: consumed, then look again */
            if (recv(c->fd, buf, crlf, 0) < 0) {
                close(c->fd);
                return true;
            }
            continue;
        }
        switch (door_judge(buf, (size_t)k)) {
        case DOOR_HTTP:
            d->handoff(d->cls, c->fd, (const struct sockaddr *)&c->addr, c->addrlen);
            return true;
        case DOOR_BAD:
            refuse(c->fd, "400 Bad Request", NOT_HTTP);
            return true;
        case DOOR_MORE:
            c->recheck = now + RECHECK_S;
            return false;
        }
    }
}

static void accept_all(http_door *d, double now) {
    for (;;) {
        pending c = {.addrlen = sizeof c.addr};
        c.fd = accept4(d->listen_fd, (struct sockaddr *)&c.addr, &c.addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c.fd < 0) return; /* EAGAIN, or an error the next poll retries */
        if (d->n >= d->max_pending) { /* as libmicrohttpd does past its connection limit */
            close(c.fd);
            continue;
        }
        c.deadline = now + d->idle_s;
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
        bool listening = !atomic_load(&d->quiesced);
        if (listening) pf[np++] = (struct pollfd){.fd = d->listen_fd, .events = POLLIN};
        int first = np;
        for (int i = 0; i < d->n; i++) {
            pf[np++] = (struct pollfd){.fd = d->p[i].fd, .events = d->p[i].recheck ? 0 : POLLIN};
            if (d->p[i].deadline < next) next = d->p[i].deadline;
            if (d->p[i].recheck && d->p[i].recheck < next) next = d->p[i].recheck;
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
            bool due = c->recheck ? now >= c->recheck : pf[first + i].revents != 0;
            if (due && examine(d, i, now)) drop(d, i);
            else if (now >= c->deadline) { /* an idle connection is closed; part of a method gets a 408 */
                if (c->recheck) refuse(c->fd, "408 Request Timeout", TOO_SLOW);
                else close(c->fd);
                drop(d, i);
            }
        }
        if (listening && pf[1].revents) accept_all(d, now);
    }
    free(pf);
    return NULL;
}

http_door *door_start(int listen_fd, int max_pending, int idle_timeout_s, door_handoff handoff, void *cls) {
    http_door *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->listen_fd = listen_fd;
    d->max_pending = max_pending > 0 ? max_pending : 1;
    d->idle_s = idle_timeout_s;
    d->handoff = handoff;
    d->cls = cls;
    d->p = calloc((size_t)d->max_pending, sizeof *d->p);
    if (!d->p || pipe2(d->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        free(d->p);
        free(d);
        return NULL;
    }
    if (pthread_create(&d->thread, NULL, door_main, d) != 0) {
        close(d->wake[0]);
        close(d->wake[1]);
        free(d->p);
        free(d);
        return NULL;
    }
    return d;
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
    free(d);
}
