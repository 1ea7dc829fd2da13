/*
 * http_door.h — the front door: accepts connections on the listening socket and reads nothing but looks at the
 * first bytes of each (MSG_PEEK) before handing it to libmicrohttpd.
 *
 * Why: libmicrohttpd 0.9.75 waits for a line end before it judges a request line, so bytes that can never be
 * HTTP (a TLS handshake, binary data, a NUL before the line end) hold a connection thread until the connection
 * timeout, and a request line that ends before its method does ("GARBAGE\r\n") is closed without an answer. The
 * door answers those 400 at once and closes them; a connection whose first bytes are an HTTP method and a space
 * is handed over unread, so libmicrohttpd sees exactly what the client sent. Empty lines before a request
 * (allowed by RFC 9112) are consumed here. A connection that sends nothing for the idle timeout is closed.
 *
 * Threading: one thread polls the listening socket and the connections not yet handed over.
 */
#ifndef MNEMO_SERVER_HTTP_DOOR_H
#define MNEMO_SERVER_HTTP_DOOR_H

#include <stddef.h>
#include <sys/socket.h>

#define DOOR_MAX_METHOD 32 /* longer "methods" are refused: every registered method is far shorter */

typedef enum {
    DOOR_MORE = 0, /* a method so far: wait for more bytes */
    DOOR_HTTP = 1, /* a method and a space: hand it over */
    DOOR_BAD = 2,  /* cannot be an HTTP request line: answer 400 */
} door_verdict;

/* The verdict on the first n bytes of a connection (leading CR/LF already removed). */
door_verdict door_judge(const char *bytes, size_t n);

/* Writes a whole JSON error reply with Connection: close straight to a socket, for the cases libmicrohttpd
 * cannot answer (best effort: never blocks, a full socket buffer drops it). status: "400 Bad Request". */
void http_send_raw(int fd, const char *status, const char *json_body);

/* Hands an accepted socket (non-blocking) over; it owns fd from then on, whatever it returns. */
typedef void (*door_handoff)(void *cls, int fd, const struct sockaddr *addr, socklen_t addrlen);

typedef struct http_door http_door;

/* Starts the door's thread on a listening socket (the door does not own it). max_pending bounds the connections
 * it holds at once (more are closed at once). NULL when out of memory or threads. */
http_door *door_start(int listen_fd, int max_pending, int idle_timeout_s, door_handoff handoff, void *cls);
/* Stops accepting; connections already accepted are still judged and handed over. */
void door_quiesce(http_door *d);
/* Stops the thread and closes the connections it still holds. NULL is a no-op. */
void door_stop(http_door *d);

#endif
