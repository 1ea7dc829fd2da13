/*
 * http_door.h — the front door: accepts connections on the listening socket and holds each until its request
 * headers are complete, reading nothing (MSG_PEEK), before handing it to libmicrohttpd.
 *
 * Why: libmicrohttpd 0.9.75 spends a thread on every connection it is given, and past its connection limit it
 * deadlocks for good (the listen thread and every connection thread wait on one mutex). So the door decides
 * admission itself and hands over only connections whose headers are already in the socket buffer: silent
 * connections and clients that drip their headers cost a file descriptor here, never a thread, and the
 * connection count that libmicrohttpd sees stays under the limit the server chose (http.c admits or says full).
 * A connection the server cannot take within a second gets a 503 with Retry-After and is closed; when the door
 * itself is full, the connection that has waited longest without finishing its headers is dropped, so a real
 * client arriving during a flood of idle sockets is served.
 *
 * Also answered here at once, as libmicrohttpd cannot: bytes that can never be HTTP (a TLS handshake, binary,
 * "GARBAGE\r\n") 400; headers past the limit 431; ambiguous body framing 400 (http_framing.h); headers not
 * complete within the connection timeout 408. Empty lines before a request (allowed by RFC 9112) are consumed.
 *
 * Threading: one thread polls the listening socket and the connections not yet handed over.
 */
#ifndef MNEMO_SERVER_HTTP_DOOR_H
#define MNEMO_SERVER_HTTP_DOOR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define DOOR_MAX_METHOD 32         /* longer "methods" are refused: every registered method is far shorter */
#define DOOR_MAX_HEADERS (64 << 10) /* request line + headers; libmicrohttpd's buffer for them is as large */

typedef enum {
    DOOR_MORE = 0, /* a method so far: wait for more bytes */
    DOOR_HTTP = 1, /* a method and a space: an HTTP request line */
    DOOR_BAD = 2,  /* cannot be an HTTP request line: answer 400 */
} door_verdict;

/* The verdict on the first n bytes of a connection (leading CR/LF already removed). */
door_verdict door_judge(const char *bytes, size_t n);

/* Where the header block of bytes[0..n) ends (the offset just past its empty line), or 0 while incomplete.
 * Searching starts at from (bytes before it were searched already). */
size_t door_headers_end(const char *bytes, size_t n, size_t from);

/* Writes a whole JSON error reply with Connection: close straight to a socket, for the cases libmicrohttpd
 * cannot answer (best effort: never blocks, a full socket buffer drops it). status: "400 Bad Request";
 * extra_header: one "Name: value" line without CRLF, or NULL. */
void http_send_raw(int fd, const char *status, const char *extra_header, const char *json_body);

typedef enum {
    DOOR_TAKEN = 0, /* the server owns fd from now on */
    DOOR_FULL = 1,  /* no room now: fd stays the door's (it tries again, then answers 503) */
} door_admit;

/* Offers a socket (non-blocking) whose request headers are complete. */
typedef door_admit (*door_handoff)(void *cls, int fd, const struct sockaddr *addr, socklen_t addrlen);

typedef struct http_door http_door;

typedef struct {
    uint64_t refused_full;   /* 503: the server stayed full */
    uint64_t dropped_oldest; /* the door was full: its longest-waiting connection was closed */
    uint64_t refused_bad;    /* 400 / 408 / 431 answered by the door */
    int pending;             /* connections in the door now */
} door_stats;

/* Starts the door's thread on a listening socket (the door does not own it). max_pending bounds the connections
 * it holds at once. NULL when out of memory or threads. */
http_door *door_start(int listen_fd, int max_pending, int header_timeout_s, door_handoff handoff, void *cls);
void door_get_stats(http_door *d, door_stats *out);
/* Stops accepting; connections already accepted are still judged and handed over. */
void door_quiesce(http_door *d);
/* Stops the thread and closes the connections it still holds. NULL is a no-op. */
void door_stop(http_door *d);

#endif
