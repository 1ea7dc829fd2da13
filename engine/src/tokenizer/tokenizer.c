/*
 * tokenizer.c — the tokenizer.h calls that every implementation shares: argument checks and dispatch through
 * the operation table (tokenizer_impl.h), so callers never know which kind of tokenizer they hold.
 */
#include <stdlib.h>

#include "tokenizer_impl.h"

tokenizer *tokenizer_wrap(const tokenizer_ops *ops, void *impl, tokenizer_kind kind) {
    tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return NULL;
    tok->ops = ops;
    tok->impl = impl;
    tok->kind = kind;
    tok->bos = tok->eos = tok->unk = tok->pad = -1;
    tok->add_bos = true;
    return tok;
}

void tokenizer_free(tokenizer *tok) {
    if (!tok) return;
    tok->ops->destroy(tok->impl);
    free(tok);
}

static bool in_range(const tokenizer *tok, int32_t id) { return tok && id >= 0 && id < tok->vocab; }

tokenizer_kind tokenizer_get_kind(const tokenizer *tok) { return tok ? tok->kind : TOKENIZER_SPM; }
int32_t tokenizer_vocab_size(const tokenizer *tok) { return tok ? tok->vocab : 0; }
int32_t tokenizer_bos_id(const tokenizer *tok) { return tok ? tok->bos : -1; }
int32_t tokenizer_eos_id(const tokenizer *tok) { return tok ? tok->eos : -1; }
int32_t tokenizer_unk_id(const tokenizer *tok) { return tok ? tok->unk : -1; }
int32_t tokenizer_pad_id(const tokenizer *tok) { return tok ? tok->pad : -1; }
bool tokenizer_adds_bos(const tokenizer *tok) { return tok && tok->add_bos && tok->bos >= 0; }

static int encode_checked(const tokenizer *tok, const char *text, size_t len, bool add_bos, bool parse_special,
                          size_t piece_bytes, int32_t **ids, size_t *n) {
    if (!tok || !ids || !n || (!text && len)) return -1;
    *ids = NULL;
    *n = 0;
    return tok->ops->encode(tok, text ? text : "", len, add_bos, parse_special, piece_bytes, ids, n);
}

int tokenizer_encode_pieces(const tokenizer *tok, const char *text, size_t len, bool add_bos, size_t piece_bytes,
                            int32_t **ids, size_t *n) {
    return encode_checked(tok, text, len, add_bos, false, piece_bytes, ids, n);
}

int tokenizer_encode(const tokenizer *tok, const char *text, size_t len, bool add_bos, int32_t **ids, size_t *n) {
    return encode_checked(tok, text, len, add_bos, false, TOKENIZER_ENCODE_CHUNK, ids, n);
}

int tokenizer_encode_special(const tokenizer *tok, const char *text, size_t len, bool add_bos, int32_t **ids,
                             size_t *n) {
    return encode_checked(tok, text, len, add_bos, true, TOKENIZER_ENCODE_CHUNK, ids, n);
}

bool tokenizer_encodes_in_pieces(const tokenizer *tok) { return tok && tok->ops->encodes_in_pieces(tok); }

int tokenizer_decode(const tokenizer *tok, const int32_t *ids, size_t n, char **text, size_t *len) {
    if (!tok || !text || !len || (!ids && n)) return -1;
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++)
        if (!in_range(tok, ids[i])) return -1;
    return tok->ops->decode(tok, ids, n, text, len);
}

int tokenizer_id_to_piece(const tokenizer *tok, int32_t id, char **piece, size_t *len) {
    if (!piece || !len) return -1;
    *piece = NULL;
    *len = 0;
    if (!in_range(tok, id)) return -1;
    return tok->ops->id_to_piece(tok, id, piece, len);
}

int32_t tokenizer_piece_to_id(const tokenizer *tok, const char *piece) {
    return tok && piece ? tok->ops->piece_to_id(tok, piece) : -1;
}

bool tokenizer_is_control(const tokenizer *tok, int32_t id) {
    return in_range(tok, id) && tok->ops->is_control(tok, id);
}
bool tokenizer_is_byte(const tokenizer *tok, int32_t id) { return in_range(tok, id) && tok->ops->is_byte(tok, id); }

int tokenizer_piece_info(const tokenizer *tok, int32_t id, float *score, int *type) {
    if (!in_range(tok, id) || !score || !type) return -1;
    return tok->ops->piece_info(tok, id, score, type);
}

int tokenizer_token_bytes(const tokenizer *tok, int32_t id, const char **bytes, size_t *len) {
    if (!in_range(tok, id) || !bytes || !len || !tok->ops->token_bytes) return -1;
    return tok->ops->token_bytes(tok, id, bytes, len);
}
