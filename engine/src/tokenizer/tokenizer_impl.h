/*
 * tokenizer_impl.h — the seam behind tokenizer.h: a tokenizer is a table of operations over an implementation
 * (SentencePiece in spm_binding.cc, byte-level BPE in bpe_*.c) plus the facts every caller asks for, kept in the
 * shared header so the getters need no dispatch. Only tokenizer implementations include this file.
 */
#ifndef MNEMO_TOKENIZER_IMPL_H
#define MNEMO_TOKENIZER_IMPL_H

#include "tokenizer.h"

typedef struct tokenizer_ops {
    void (*destroy)(void *impl);
    /* parse_special: control/unknown pieces written in the text become their ids (user-defined ones always do) */
    int (*encode)(const tokenizer *tok, const char *text, size_t len, bool add_bos, bool parse_special,
                  size_t piece_bytes, int32_t **ids, size_t *n);
    bool (*encodes_in_pieces)(const tokenizer *tok);
    int (*decode)(const tokenizer *tok, const int32_t *ids, size_t n, char **text, size_t *len);
    int (*id_to_piece)(const tokenizer *tok, int32_t id, char **piece, size_t *len);
    int32_t (*piece_to_id)(const tokenizer *tok, const char *piece);
    bool (*is_control)(const tokenizer *tok, int32_t id);
    bool (*is_byte)(const tokenizer *tok, int32_t id);
    int (*piece_info)(const tokenizer *tok, int32_t id, float *score, int *type);
    /* byte-level tokenizers only (NULL otherwise): the raw bytes one id adds to a decode */
    int (*token_bytes)(const tokenizer *tok, int32_t id, const char **bytes, size_t *len);
} tokenizer_ops;

struct tokenizer {
    const tokenizer_ops *ops;
    void *impl;
    tokenizer_kind kind;
    int32_t vocab;
    int32_t bos, eos, unk, pad; /* -1 when absent */
    bool add_bos;               /* what add_bos = true means: prepend BOS (the model asks for it) */
};

/* A tokenizer shell around impl (malloc'ed; NULL when out of memory). */
tokenizer *tokenizer_wrap(const tokenizer_ops *ops, void *impl, tokenizer_kind kind);

#endif
