/*
 * bpe_model.h — the byte-level BPE model's fields, shared by the files that fill it (bpe_vocab.c), split text
 * with its regexes (bpe_pretok.c) and encode/decode with it (bpe_encode.c, bpe_ops.c). Nothing outside
 * engine/src/tokenizer/bpe_*.c includes it.
 */
#ifndef MNEMO_BPE_MODEL_H
#define MNEMO_BPE_MODEL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "bpe.h"

struct bpe_vocab {
    int32_t n;
    /* token texts in one pool; len UINT32_MAX = id not set yet */
    char *pool;
    size_t pool_len, pool_cap;
    uint64_t *off;
    uint32_t *len;
    uint8_t *type;
    /* merges as strings until build: "left" then "right" in mpool */
    char *mpool;
    size_t mpool_len, mpool_cap;
    uint64_t *m_off;
    uint32_t *m_left, *m_right;
    size_t n_merges, merges_cap;
    /* pre-tokenizer */
    pcre2_code *re[BPE_MAX_REGEXES];
    int n_re;
    /* special ids and behaviour */
    int32_t bos, eos, unk, pad;
    bool add_bos, add_bos_set, ignore_merges, ignore_merges_set;
    /* built: text -> id (open addressing, -1 empty) */
    int32_t *index;
    uint32_t index_mask;
    /* built: merge (left id, right id) -> rank and result */
    uint64_t *mkey; /* UINT64_MAX empty */
    uint32_t *mrank;
    int32_t *mres;
    uint64_t mmask;
    int32_t byte_token[256]; /* the token of each byte's GPT-2 character, -1 if none */
    /* built: pieces split out of the text before pre-tokenization, grouped by first byte, longest first */
    int32_t *special;
    uint32_t special_start[257];
    /* built: the bytes each token adds to a decode */
    char *dec;
    uint64_t *dec_off;
    uint32_t *dec_len;
};

/* FNV-1a: the text index's hash. */
static inline uint32_t bpe_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* The merge table's hash of a (left id, right id) key. */
static inline uint64_t bpe_merge_hash(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return key;
}

static inline const char *bpe_text(const bpe_vocab *v, int32_t id) { return v->pool + v->off[id]; }

/* Looks a text up in the built index; -1 when absent. */
int32_t bpe_lookup(const bpe_vocab *v, const char *s, size_t n);

/* Splits text with the model's regexes, calling word() on each final piece in order; -1 when word() fails. */
typedef int (*bpe_word_fn)(void *ctx, const char *p, size_t n);
int bpe_pretokenize(const bpe_vocab *v, const char *text, size_t len, bpe_word_fn word, void *ctx);

/* tokenizer_ops.encode over a built model (bpe_encode.c). */
int bpe_encode(const tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special, size_t piece_bytes,
               int32_t **ids, size_t *n);

/* The tokenizer seam's operations over a built model (bpe_ops.c). */
extern const struct tokenizer_ops bpe_ops;

#endif
