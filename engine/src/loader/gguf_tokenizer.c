/*
 * gguf_tokenizer.c — a GGUF file's tokenizer as a serialized SentencePiece ModelProto (gguf_llama.h), so the same
 * SentencePiece library that reads tokenizer.model loads it (LoadFromSerializedProto). The proto is written by hand
 * in protobuf's wire format; only the fields SentencePiece reads at run time are set:
 *   ModelProto      1 pieces {1 piece, 2 score (float), 3 type}, 2 trainer_spec, 3 normalizer_spec
 *   TrainerSpec     3 model_type (2 = BPE), 35 byte_fallback, 40 unk_id, 41 bos_id, 42 eos_id, 43 pad_id
 *   NormalizerSpec  1 name ("identity"), 3 add_dummy_prefix, 4 remove_extra_whitespaces, 5 escape_whitespaces
 * which is what LLaMA's tokenizer.model holds. GGUF token types use SentencePiece's numbering (1 normal, 2 unknown,
 * 3 control, 4 user defined, 5 unused, 6 byte).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_llama.h"
#include "loader_util.h"
#include "errbuf.h"

typedef struct {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} pbuf;

static void put(pbuf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void varint(pbuf *b, uint64_t v) {
    uint8_t t[10];
    size_t n = 0;
    do {
        t[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put(b, t, n);
}
static void field_varint(pbuf *b, uint32_t f, int64_t v) { varint(b, (uint64_t)f << 3); varint(b, (uint64_t)v); }
static void field_bytes(pbuf *b, uint32_t f, const void *s, size_t n) {
    varint(b, (uint64_t)f << 3 | 2);
    varint(b, n);
    put(b, s, n);
}
static void field_float(pbuf *b, uint32_t f, float x) {
    uint8_t t[4];
    memcpy(t, &x, 4); /* little-endian host, as the rest of the loader assumes */
    varint(b, (uint64_t)f << 3 | 5);
    put(b, t, 4);
}

static int64_t id_or(const gguf_file *g, const char *key, int64_t dflt) {
    int64_t v;
    return gguf_get_i64(g, key, &v) ? v : dflt;
}

int gguf_llama_tokenizer_proto(const gguf_file *g, const char *file, uint8_t **proto, size_t *len, char *err,
                               size_t errlen) {
    *proto = NULL;
    *len = 0;
    const gguf_kv *orig = gguf_find(g, "mnemo.tokenizer.spm_model");
    if (orig) {
        if (orig->type != GGUF_ARRAY || (orig->arr_type != GGUF_U8 && orig->arr_type != GGUF_I8) || orig->n == 0)
            return errbuf_fail_at(err, errlen, file,
                                  "tokenizer: mnemo.tokenizer.spm_model must be a non-empty byte array");
        if (!(*proto = malloc((size_t)orig->n))) return errbuf_fail_at(err, errlen, file, "tokenizer: out of memory");
        memcpy(*proto, orig->p, (size_t)orig->n);
        *len = (size_t)orig->n;
        return 0;
    }
    const gguf_kv *tokens = gguf_find(g, "tokenizer.ggml.tokens");
    if (!tokens) return 1;
    const char *model;
    uint64_t mlen;
    if (!gguf_get_str(g, "tokenizer.ggml.model", &model, &mlen) || mlen != 5 || memcmp(model, "llama", 5))
        return errbuf_fail_at(err, errlen, file,
                              "tokenizer: tokenizer.ggml.model must be \"llama\" (SentencePiece) or \"gpt2\" "
                              "(byte-level BPE); other tokenizers are not supported");
    if (tokens->type != GGUF_ARRAY || tokens->arr_type != GGUF_STRING || tokens->n == 0 || tokens->n > (1u << 24))
        return errbuf_fail_at(err, errlen, file,
                              "tokenizer: tokenizer.ggml.tokens must be a list of 1 to 2^24 strings");
    const gguf_kv *scores = gguf_find(g, "tokenizer.ggml.scores"), *types = gguf_find(g, "tokenizer.ggml.token_type");
    if (scores && (scores->type != GGUF_ARRAY || scores->arr_type != GGUF_F32 || scores->n != tokens->n))
        return errbuf_fail_at(err, errlen, file, "tokenizer: tokenizer.ggml.scores must be one f32 per token");
    if (types && (types->type != GGUF_ARRAY || types->n != tokens->n))
        return errbuf_fail_at(err, errlen, file, "tokenizer: tokenizer.ggml.token_type must be one integer per token");
    pbuf b = {0}, piece = {0};
    const uint8_t *pos = tokens->p;
    bool bytes_seen = false;
    for (uint64_t i = 0; i < tokens->n; i++) {
        const char *s;
        uint64_t n;
        gguf_arr_next_str(&pos, &s, &n);
        int64_t type = 1;
        if (types && (!gguf_arr_i64(types, i, &type) || type < 1 || type > 6)) {
            free(b.p);
            free(piece.p);
            return errbuf_fail_at(err, errlen, file, "tokenizer: tokenizer.ggml.token_type holds a value outside 1..6");
        }
        bytes_seen |= type == 6;
        float score = 0.f;
        if (scores) memcpy(&score, scores->p + 4 * i, 4);
        piece.len = 0;
        field_bytes(&piece, 1, s, (size_t)n);
        field_float(&piece, 2, score);
        if (type != 1) field_varint(&piece, 3, type);
        field_bytes(&b, 1, piece.p, piece.len);
        if (piece.oom) b.oom = true;
    }
    pbuf t = {0};
    field_varint(&t, 3, 2); /* BPE */
    if (bytes_seen) field_varint(&t, 35, 1);
    field_varint(&t, 40, id_or(g, "tokenizer.ggml.unknown_token_id", 0));
    field_varint(&t, 41, id_or(g, "tokenizer.ggml.bos_token_id", 1));
    field_varint(&t, 42, id_or(g, "tokenizer.ggml.eos_token_id", 2));
    field_varint(&t, 43, id_or(g, "tokenizer.ggml.padding_token_id", -1));
    field_bytes(&b, 2, t.p, t.len);
    bool prefix = true;
    gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &prefix);
    pbuf nz = {0};
    field_bytes(&nz, 1, "identity", 8);
    field_varint(&nz, 3, prefix);
    field_varint(&nz, 4, 0);
    field_varint(&nz, 5, 1);
    field_bytes(&b, 3, nz.p, nz.len);
    bool oom = b.oom || t.oom || nz.oom || piece.oom;
    free(piece.p);
    free(t.p);
    free(nz.p);
    if (oom) {
        free(b.p);
        return errbuf_fail_at(err, errlen, file, "tokenizer: out of memory");
    }
    *proto = b.p;
    *len = b.len;
    return 0;
}
