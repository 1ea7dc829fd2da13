/*
 * errbuf.h — the engine's error messages. A function that can fail takes (char *err, size_t errlen) and on failure
 * writes one line there for its caller to show, then returns its failure value; these write that line. A NULL err
 * or a zero errlen is allowed (the message is dropped). Internal to libengine.
 */
#ifndef MNEMO_ERRBUF_H
#define MNEMO_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>

/* Writes the message; returns -1. */
int errbuf_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Writes "<where>: <message>" (where: the file or object the message is about); returns -1. */
int errbuf_fail_at(char *err, size_t errlen, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The writer under both, for wrappers with their own arguments; where may be NULL (no prefix). With a where, an
 * argument may point into err itself (a message re-prefixed). */
void errbuf_vwrite(char *err, size_t errlen, const char *where, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

#endif
