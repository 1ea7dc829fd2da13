/* cli_text_file.c — see cli_text_file.h. */
#include "cli_text_file.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Offset of the first byte that does not start a well-formed UTF-8 character (RFC 3629: no overlong forms, no
 * surrogates, nothing past U+10FFFF), or len when all of it is well-formed. */
static size_t utf8_bad_offset(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        size_t n;
        unsigned lo = 0x80, hi = 0xBF; /* the range of the byte after the lead byte */
        if (c < 0x80) { i++; continue; }
        else if (c >= 0xC2 && c <= 0xDF) n = 1;
        else if (c >= 0xE0 && c <= 0xEF) { n = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { n = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else return i;
        if (n >= len - i) return i; /* cut short by the end of the text */
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k <= n; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += n + 1;
    }
    return len;
}

char *cli_read_text(const char *cmd, const char *path, size_t *len) {
    bool is_stdin = !strcmp(path, "-");
    const char *name = is_stdin ? "standard input" : path;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "mnemo %s: cannot open '%s': %s\n", cmd, name, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    int read_errno = 0;
    while (buf) {
        if (n + 1 == cap) {
            char *bigger = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!bigger) { free(buf); buf = NULL; break; }
            buf = bigger;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) read_errno = errno ? errno : EIO;
            break;
        }
    }
    if (!is_stdin) fclose(f);
    if (!buf) {
        fprintf(stderr, "mnemo %s: out of memory reading '%s'\n", cmd, name);
        return NULL;
    }
    if (read_errno) {
        fprintf(stderr, "mnemo %s: cannot read '%s': %s\n", cmd, name, strerror(read_errno));
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    const char *nul = memchr(buf, '\0', n);
    if (nul) {
        fprintf(stderr, "mnemo %s: '%s' holds a NUL byte at offset %zu: not text\n", cmd, name, (size_t)(nul - buf));
        free(buf);
        return NULL;
    }
    size_t bad = utf8_bad_offset((const unsigned char *)buf, n);
    if (bad < n)
        fprintf(stderr, "mnemo %s: warning: '%s' is not valid UTF-8 (first bad byte 0x%02X at offset %zu); each bad "
                "byte reads as U+FFFD\n", cmd, name, (unsigned char)buf[bad], bad);
    *len = n;
    return buf;
}
