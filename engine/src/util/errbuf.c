/*
 * errbuf.c — writes the engine's error messages (see errbuf.h).
 */
#include "errbuf.h"

#include <stdio.h>

void errbuf_vwrite(char *err, size_t errlen, const char *where, const char *fmt, va_list ap) {
    if (!err || !errlen) return;
    if (!where) {
        vsnprintf(err, errlen, fmt, ap);
        return;
    }
    char msg[1024]; /* formatted apart first: an argument may be err itself */
    vsnprintf(msg, sizeof msg, fmt, ap);
    snprintf(err, errlen, "%s: %s", where, msg);
}

int errbuf_fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    errbuf_vwrite(err, errlen, NULL, fmt, ap);
    va_end(ap);
    return -1;
}

int errbuf_fail_at(char *err, size_t errlen, const char *where, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    errbuf_vwrite(err, errlen, where, fmt, ap);
    va_end(ap);
    return -1;
}
