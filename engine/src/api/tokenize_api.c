/*
 * tokenize_api.c — mnemo_tokenize / mnemo_detokenize / mnemo_token_to_piece over the SentencePiece binding.
 * These run on a shared, read-only model and never write its error message, so any thread may call them.
 */
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"

static mnemo_status tokenize(const mnemo_model *m, const char *text, size_t len, bool add_bos, bool special,
                             mnemo_token *out, int32_t cap, int32_t *n_out) {
    if (!m || m->failed) return MNEMO_ERR_MISUSE;
    if ((!text && len) || !n_out || cap < 0 || (cap > 0 && !out)) return MNEMO_ERR_INVALID_ARG;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = special ? tokenizer_encode_special(m->tok, text ? text : "", len, add_bos, &ids, &n)
                     : tokenizer_encode(m->tok, text ? text : "", len, add_bos, &ids, &n);
    if (rc != 0) return MNEMO_ERR_NOMEM;
    if (n > INT32_MAX) {
        free(ids);
        return MNEMO_ERR_INVALID_ARG;
    }
    *n_out = (int32_t)n;
    mnemo_status st = MNEMO_OK;
    if ((size_t)cap < n)
        st = MNEMO_ERR_TOO_SMALL;
    else if (n)
        memcpy(out, ids, n * sizeof *ids);
    free(ids);
    return st;
}

mnemo_status mnemo_tokenize(const mnemo_model *m, const char *text, size_t len, bool add_bos, mnemo_token *out,
                            int32_t cap, int32_t *n_out) {
    return tokenize(m, text, len, add_bos, false, out, cap, n_out);
}

mnemo_status mnemo_tokenize_special(const mnemo_model *m, const char *text, size_t len, bool add_bos,
                                    mnemo_token *out, int32_t cap, int32_t *n_out) {
    return tokenize(m, text, len, add_bos, true, out, cap, n_out);
}

bool mnemo_model_adds_bos(const mnemo_model *m) {
    return m && !m->failed && m->tok && tokenizer_adds_bos(m->tok) && tokenizer_bos_id(m->tok) >= 0;
}

/* Copy a malloc'ed result into the caller's buffer with a NUL when room allows. */
static mnemo_status copy_out(char *s, size_t len, char *out, size_t cap, size_t *len_out) {
    if (len_out) *len_out = len;
    mnemo_status st = MNEMO_OK;
    if (cap < len) {
        st = MNEMO_ERR_TOO_SMALL;
    } else {
        if (len) memcpy(out, s, len);
        if (cap > len) out[len] = '\0';
    }
    free(s);
    return st;
}

mnemo_status mnemo_detokenize(const mnemo_model *m, const mnemo_token *tokens, int32_t n, char *out, size_t cap,
                              size_t *len_out) {
    if (!m || m->failed) return MNEMO_ERR_MISUSE;
    if (n < 0 || (n > 0 && !tokens) || (cap > 0 && !out)) return MNEMO_ERR_INVALID_ARG;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= tokenizer_vocab_size(m->tok)) return MNEMO_ERR_INVALID_ARG;
    char *s = NULL;
    size_t len = 0;
    if (tokenizer_decode(m->tok, tokens, (size_t)n, &s, &len) != 0) return MNEMO_ERR_NOMEM;
    return copy_out(s, len, out, cap, len_out);
}

mnemo_status mnemo_token_to_piece(const mnemo_model *m, mnemo_token token, char *out, size_t cap,
                                  size_t *len_out) {
    if (!m || m->failed) return MNEMO_ERR_MISUSE;
    if (token < 0 || token >= tokenizer_vocab_size(m->tok) || (cap > 0 && !out)) return MNEMO_ERR_INVALID_ARG;
    char *s = NULL;
    size_t len = 0;
    if (tokenizer_id_to_piece(m->tok, token, &s, &len) != 0) return MNEMO_ERR_NOMEM;
    return copy_out(s, len, out, cap, len_out);
}
