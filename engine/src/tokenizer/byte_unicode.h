/*
 * byte_unicode.h — GPT-2's byte-to-unicode map (every byte becomes a printable character, so byte-level BPE
 * vocabularies are text), its inverse, and UTF-8 helpers shared by the BPE tokenizer and the streaming decoder.
 */
#ifndef MNEMO_BYTE_UNICODE_H
#define MNEMO_BYTE_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The UTF-8 spelling (1 or 2 bytes) of byte b's character; returns its length. */
size_t byte_to_unicode_utf8(uint8_t b, char out[2]);
/* The byte whose character is code point cp, or -1 when cp is not one of the 256. */
int unicode_to_byte(uint32_t cp);

/* Decodes one UTF-8 character at s[0..n): its code point and length, or length 0 when s does not start with a
 * complete valid character (no overlongs, no surrogates, nothing above U+10FFFF). */
size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
/* True when b[0..n) (1 <= n <= 3) is a proper prefix of a valid UTF-8 character: more bytes could complete it. */
bool utf8_proper_prefix(const unsigned char *b, size_t n);
/* Copies s[0..n) to out, each maximal invalid subsequence replaced by U+FFFD (Unicode's "maximal subpart"
 * practice, as Rust's from_utf8_lossy and SentencePiece). out must hold 3 * n bytes; returns the length. */
size_t utf8_lossy(const unsigned char *s, size_t n, char *out);

#endif
