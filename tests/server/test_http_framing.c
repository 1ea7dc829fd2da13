/*
 * test_http_framing.c — the front door's judgements without sockets: which request lines it hands over, where a
 * header block ends, and which body framings are refused (RFC 9112 section 6.3).
 */
#include <string.h>

#include "http_door.h"
#include "http_framing.h"
#include "test_util.h"

static const char *judge(const char *block) {
    framing_headers h = {0};
    framing_scan(&h, block, strlen(block));
    return framing_judge(&h);
}

static void test_framing(void) {
    CHECK(!judge(""), "no body headers");
    CHECK(!judge("Host: x\r\nContent-Length: 12\r\n"), "one length");
    CHECK(!judge("content-length:  007 \r\nContent-Length: 7\r\n"), "the same length twice");
    CHECK(!judge("Transfer-Encoding: Chunked\r\n"), "chunked");
    CHECK(judge("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n") != NULL, "both");
    CHECK(judge("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n") != NULL, "both, other order");
    CHECK(judge("Content-Length: 5\r\nContent-Length: 6\r\n") != NULL, "two lengths");
    CHECK(judge("Content-Length: -1\r\n") != NULL, "negative");
    CHECK(judge("Content-Length: +5\r\n") != NULL, "signed");
    CHECK(judge("Content-Length: 5, 5\r\n") != NULL, "a list");
    CHECK(judge("Content-Length:\r\n") != NULL, "empty");
    CHECK(judge("Content-Length: 99999999999999999999999\r\n") != NULL, "past 18 digits");
    CHECK(judge("Transfer-Encoding: gzip, chunked\r\n") != NULL, "a coding before chunked");
    CHECK(judge("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n") != NULL, "chunked twice");
    CHECK(judge("Transfer-Encoding: identity\r\n") != NULL, "not chunked");
    char many[1024] = "";
    for (int i = 0; i < 12; i++) strcat(many, "Content-Length: 1\r\n");
    CHECK(judge(many) != NULL, "too many lines");
    CHECK(!judge("X-Content-Length: 5\r\nTransfer-Encoding-X: gzip\r\n"), "other names");
}

static void test_door(void) {
    CHECK(door_judge("GET", 3) == DOOR_MORE, "a method so far");
    CHECK(door_judge("GET /", 5) == DOOR_HTTP, "a request line");
    CHECK(door_judge("\x16\x03\x01", 3) == DOOR_BAD, "TLS");
    CHECK(door_judge(" GET", 4) == DOOR_BAD, "space first");
    const char *req = "GET / HTTP/1.1\r\nHost: x\r\n\r\nBODY";
    CHECK(door_headers_end(req, strlen(req), 0) == strlen(req) - 4, "end of headers");
    CHECK(door_headers_end(req, strlen(req) - 6, 0) == 0, "incomplete");
    const char *lf = "GET / HTTP/1.1\nHost: x\n\nB";
    CHECK(door_headers_end(lf, strlen(lf), 0) == strlen(lf) - 1, "bare LF");
    const char *bare = "GET / HTTP/1.0\r\n\r\n";
    CHECK(door_headers_end(bare, strlen(bare), 0) == strlen(bare), "no headers");
    CHECK(door_headers_end(req, strlen(req), 20) == strlen(req) - 4, "resumed search");
}

int main(void) {
    test_framing();
    test_door();
    return test_summary();
}
