/*
 * bpe_ops.c — the byte-level BPE side of the tokenizer seam: everything but encoding (bpe_encode.c). Ids reach
 * these functions already range-checked by tokenizer.c.
 */
#include <stdlib.h>
#include <string.h>

#include "bpe_model.h"
#include "byte_unicode.h"
#include "tokenizer_impl.h"

static void bpe_destroy(void *impl) { bpe_vocab_free(impl); }

static bool bpe_in_pieces(const tokenizer *t) {
    (void)t;
    return false;
}

static int bpe_decode(const tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len) {
    const bpe_vocab *v = t->impl;
    size_t raw_len = 0;
    for (size_t i = 0; i < n; i++) raw_len += v->dec_len[ids[i]];
    unsigned char *raw = malloc(raw_len ? raw_len : 1);
    char *out = raw ? malloc(3 * raw_len + 1) : NULL; /* U+FFFD for every byte at worst */
    if (!out) {
        free(raw);
        return -1;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(raw + o, v->dec + v->dec_off[ids[i]], v->dec_len[ids[i]]);
        o += v->dec_len[ids[i]];
    }
    *len = utf8_lossy(raw, raw_len, out);
    out[*len] = '\0';
    free(raw);
    *text = out;
    return 0;
}

static int bpe_id_to_piece(const tokenizer *t, int32_t id, char **piece, size_t *len) {
    const bpe_vocab *v = t->impl;
    char *s = malloc((size_t)v->len[id] + 1);
    if (!s) return -1;
    memcpy(s, bpe_text(v, id), (size_t)v->len[id] + 1);
    *piece = s;
    *len = v->len[id];
    return 0;
}

static int32_t bpe_piece_to_id(const tokenizer *t, const char *piece) {
    return bpe_lookup(t->impl, piece, strlen(piece));
}

static bool bpe_is_control(const tokenizer *t, int32_t id) {
    return ((const bpe_vocab *)t->impl)->type[id] == BPE_CONTROL;
}
static bool bpe_is_byte(const tokenizer *t, int32_t id) { return ((const bpe_vocab *)t->impl)->type[id] == BPE_BYTE; }

static int bpe_piece_info(const tokenizer *t, int32_t id, float *score, int *type) {
    *score = 0.f;
    *type = ((const bpe_vocab *)t->impl)->type[id];
    return 0;
}

static int bpe_token_bytes(const tokenizer *t, int32_t id, const char **bytes, size_t *len) {
    const bpe_vocab *v = t->impl;
    *bytes = v->dec + v->dec_off[id];
    *len = v->dec_len[id];
    return 0;
}

const tokenizer_ops bpe_ops = {
    .destroy = bpe_destroy,
    .encode = bpe_encode,
    .encodes_in_pieces = bpe_in_pieces,
    .decode = bpe_decode,
    .id_to_piece = bpe_id_to_piece,
    .piece_to_id = bpe_piece_to_id,
    .is_control = bpe_is_control,
    .is_byte = bpe_is_byte,
    .piece_info = bpe_piece_info,
    .token_bytes = bpe_token_bytes,
};
