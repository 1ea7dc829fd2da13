/*
 * text_util.h — small text helpers the JSON layer needs: UTF-8 validation/repair (jansson refuses invalid UTF-8,
 * and a model can emit any bytes), a growable byte buffer, and a token's display text.
 */
#ifndef MNEMO_SERVER_TEXT_UTIL_H
#define MNEMO_SERVER_TEXT_UTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "engine.h"

typedef struct {
    char *data;
    size_t len, cap;
    bool failed; /* an allocation failed: contents are incomplete */
} strbuf;

void sb_append(strbuf *b, const char *s, size_t n);
void sb_puts(strbuf *b, const char *s);
void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_free(strbuf *b);

/* Length of the longest prefix of s that is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
size_t utf8_valid_prefix(const char *s, size_t n);
/* A JSON string of n bytes, each invalid UTF-8 sequence replaced by U+FFFD. NULL only when out of memory. */
json_t *json_text(const char *s, size_t n);

/* The text one token stands for: its SentencePiece piece with U+2581 as a space and <0xNN> as that byte.
 * Writes at most cap-1 bytes plus a NUL; returns the length. */
size_t token_text(const mnemo_model *m, mnemo_token t, char *out, size_t cap);

/* mnemo_tokenize into a malloc'd array of *n_out ids; NULL on failure. */
mnemo_token *tokenize_alloc(const mnemo_model *m, const char *s, size_t n, bool bos, int32_t *n_out);
/* The same for a chat template's rendered text: control tokens written in it become their ids, no BOS. */
mnemo_token *tokenize_special_alloc(const mnemo_model *m, const char *s, size_t n, int32_t *n_out);

/* Standard base64 (RFC 4648, padded) of n bytes, NUL-terminated and malloc'd; NULL when out of memory. */
char *base64_encode(const unsigned char *data, size_t n);

/* Seconds on a monotonic clock. */
double now_s(void);

#endif
