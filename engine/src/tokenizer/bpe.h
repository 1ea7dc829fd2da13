/*
 * bpe.h — byte-level BPE behind the tokenizer seam. A source (GGUF metadata in gguf_tokenizer.c, tokenizer.json
 * in bpe_json.c) fills a bpe_vocab: tokens by id with their types, merges by rank, the pre-tokenizer's regexes and
 * the special ids; bpe_vocab_build checks it and turns it into a tokenizer. Every malformed input ends in a
 * message, never in a crash.
 */
#ifndef MNEMO_BPE_H
#define MNEMO_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

/* Token types, GGUF's (SentencePiece's) numbering. */
enum { BPE_NORMAL = 1, BPE_UNKNOWN = 2, BPE_CONTROL = 3, BPE_USER_DEFINED = 4, BPE_UNUSED = 5, BPE_BYTE = 6 };

#define BPE_MAX_TOKENS (1 << 24)
#define BPE_MAX_REGEXES 8

typedef struct bpe_vocab bpe_vocab;

bpe_vocab *bpe_vocab_new(int32_t n_tokens); /* NULL when out of memory or n_tokens outside 1..BPE_MAX_TOKENS */
void bpe_vocab_free(bpe_vocab *v);
/* Sets token id's text and type; -1 (with a message) when id is out of range, already set or the type unknown. */
int bpe_vocab_set_token(bpe_vocab *v, int32_t id, const char *s, size_t n, int type, char *err, size_t errlen);
/* Appends the merge "left right" at the next rank (strings are copied; resolved by bpe_vocab_build). */
int bpe_vocab_add_merge(bpe_vocab *v, const char *left, size_t nl, const char *right, size_t nr);
/* Appends a pre-tokenizer regex (PCRE2 syntax), applied in order: each splits the pieces of the one before, its
 * matches and the text between them both kept. literal: the pattern is a plain string. */
int bpe_vocab_add_regex(bpe_vocab *v, const char *pattern, bool literal, char *err, size_t errlen);
/* The regexes and defaults llama.cpp uses for GGUF tokenizer.ggml.pre; -1 naming an unknown one. */
int bpe_vocab_use_pre(bpe_vocab *v, const char *pre, char *err, size_t errlen);
void bpe_vocab_set_ids(bpe_vocab *v, int32_t bos, int32_t eos, int32_t unk, int32_t pad);
void bpe_vocab_set_add_bos(bpe_vocab *v, bool add_bos);
/* A word that is a whole token is not merged further (Llama 3's ignore_merges). */
void bpe_vocab_set_ignore_merges(bpe_vocab *v, bool on);
int32_t bpe_vocab_find(bpe_vocab *v, const char *s, size_t n); /* after every token is set; -1 if absent */

/* Checks the vocabulary (every id set, merges naming tokens, special ids in range) and builds the tokenizer.
 * Consumes v (freed whatever happens). what names the source in messages. */
int bpe_vocab_build(bpe_vocab *v, const char *what, tokenizer **out, char *err, size_t errlen);

#endif
