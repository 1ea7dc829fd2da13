/*
 * gguf_bpe.c — reads a byte-level BPE vocabulary from GGUF metadata the way llama.cpp's llama-vocab.cpp does:
 * tokens in id order, their types (GGUF numbering: 1 normal, 3 control, 4 user defined, ...), merges as "left right"
 * strings in rank order (split at the first space after the first byte), the pre-tokenizer named by
 * tokenizer.ggml.pre ("default" when absent, as llama.cpp falls back), the special ids and add_bos_token.
 */
#include <stdio.h>
#include <string.h>

#include "bpe.h"
#include "gguf_bpe.h"
#include "errbuf.h"

bool gguf_has_bpe_tokenizer(const gguf_file *g) {
    const char *model;
    uint64_t n;
    return gguf_get_str(g, "tokenizer.ggml.model", &model, &n) && n == 4 && !memcmp(model, "gpt2", 4);
}

static int32_t id_or_none(const gguf_file *g, const char *key) {
    int64_t v;
    return gguf_get_i64(g, key, &v) && v >= -1 && v <= INT32_MAX ? (int32_t)v : -1;
}

static int read_tokens(const gguf_file *g, const char *file, bpe_vocab *v, const gguf_kv *tokens, char *err,
                       size_t errlen) {
    const gguf_kv *types = gguf_find(g, "tokenizer.ggml.token_type");
    if (types && (types->type != GGUF_ARRAY || types->n != tokens->n))
        return errbuf_fail_at(err, errlen, file, "tokenizer: tokenizer.ggml.token_type must be one integer per token");
    const uint8_t *pos = tokens->p;
    char msg[256];
    for (uint64_t i = 0; i < tokens->n; i++) {
        const char *s;
        uint64_t n;
        gguf_arr_next_str(&pos, &s, &n);
        int64_t type = BPE_NORMAL;
        if (types && (!gguf_arr_i64(types, i, &type) || type < 1 || type > 6))
            return errbuf_fail_at(err, errlen, file, "tokenizer: tokenizer.ggml.token_type holds a value outside 1..6");
        if (bpe_vocab_set_token(v, (int32_t)i, s, (size_t)n, (int)type, msg, sizeof msg))
            return errbuf_fail_at(err, errlen, file, "tokenizer: %s", msg);
    }
    return 0;
}

static int read_merges(const char *file, bpe_vocab *v, const gguf_kv *merges, char *err, size_t errlen) {
    const uint8_t *pos = merges->p;
    for (uint64_t i = 0; i < merges->n; i++) {
        const char *s;
        uint64_t n;
        gguf_arr_next_str(&pos, &s, &n);
        const char *sp = n > 1 ? memchr(s + 1, ' ', (size_t)n - 1) : NULL;
        if (!sp || sp + 1 == s + n) {
            char msg[160];
            snprintf(msg, sizeof msg, "tokenizer.ggml.merges[%llu] \"%.40s\" is not two tokens separated by a space",
                     (unsigned long long)i, n ? s : "");
            return errbuf_fail_at(err, errlen, file, "tokenizer: %s", msg);
        }
        if (bpe_vocab_add_merge(v, s, (size_t)(sp - s), sp + 1, (size_t)(s + n - sp - 1)))
            return errbuf_fail_at(err, errlen, file, "tokenizer: out of memory");
    }
    return 0;
}

int gguf_bpe_tokenizer(const gguf_file *g, const char *file, tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    const gguf_kv *tokens = gguf_find(g, "tokenizer.ggml.tokens"), *merges = gguf_find(g, "tokenizer.ggml.merges");
    if (!tokens || tokens->type != GGUF_ARRAY || tokens->arr_type != GGUF_STRING || tokens->n == 0 ||
        tokens->n > BPE_MAX_TOKENS)
        return errbuf_fail_at(err, errlen, file,
                              "tokenizer: tokenizer.ggml.tokens must be a list of 1 to 2^24 strings");
    if (!merges || merges->type != GGUF_ARRAY || merges->arr_type != GGUF_STRING || merges->n > BPE_MAX_TOKENS)
        return errbuf_fail_at(err, errlen, file,
                              "tokenizer: tokenizer.ggml.merges must be a list of at most 2^24 strings (a gpt2 "
                              "tokenizer needs its merges)");
    char pre[128] = "default";
    const char *ps;
    uint64_t pn;
    if (gguf_find(g, "tokenizer.ggml.pre")) {
        if (!gguf_get_str(g, "tokenizer.ggml.pre", &ps, &pn) || pn >= sizeof pre)
            return errbuf_fail_at(err, errlen, file, "tokenizer: tokenizer.ggml.pre must be a short string");
        if (pn) { /* an empty name is llama.cpp's "default" too */
            memcpy(pre, ps, (size_t)pn);
            pre[pn] = '\0';
        }
    }
    bpe_vocab *v = bpe_vocab_new((int32_t)tokens->n);
    if (!v) return errbuf_fail_at(err, errlen, file, "tokenizer: out of memory");
    char msg[400];
    bool add_bos;
    if (gguf_find(g, "tokenizer.ggml.add_bos_token")) {
        if (!gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos)) {
            bpe_vocab_free(v);
            return errbuf_fail_at(err, errlen, file, "tokenizer: tokenizer.ggml.add_bos_token must be a bool");
        }
        bpe_vocab_set_add_bos(v, add_bos);
    }
    if (read_tokens(g, file, v, tokens, err, errlen) || read_merges(file, v, merges, err, errlen)) {
        bpe_vocab_free(v);
        return -1;
    }
    if (bpe_vocab_use_pre(v, pre, msg, sizeof msg)) {
        bpe_vocab_free(v);
        return errbuf_fail_at(err, errlen, file, "tokenizer: %s", msg);
    }
    bpe_vocab_set_ids(v, id_or_none(g, "tokenizer.ggml.bos_token_id"), id_or_none(g, "tokenizer.ggml.eos_token_id"),
                      id_or_none(g, "tokenizer.ggml.unknown_token_id"),
                      id_or_none(g, "tokenizer.ggml.padding_token_id"));
    char what[600];
    snprintf(what, sizeof what, "%s: tokenizer", file);
    return bpe_vocab_build(v, what, out, err, errlen);
}
