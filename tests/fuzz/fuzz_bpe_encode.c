/*
 * fuzz_bpe_encode.c — libFuzzer target: byte-level BPE encoding of arbitrary bytes with a fixed small vocabulary
 * (the 256 byte characters, a few dozen merges, control and user-defined pieces) under each supported
 * pre-tokenizer, chosen by the first input byte. Ids must be in range; decode must give the input back (invalid
 * UTF-8 as U+FFFD, exactly where a lossy conversion puts it); the streaming detokenizer must agree.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "byte_unicode.h"
#include "stream_check.h"
#include "tokenizer.h"

static const char *const PRES[] = {"llama-bpe", "gpt-2", "smollm", "qwen2", "deepseek-llm", "default"};
#define N_PRES (sizeof PRES / sizeof PRES[0])

/* Merges over GPT-2 characters (Ġ is the space); each result becomes a token. */
static const char *const MERGES[][2] = {
    {"\xc4\xa0", "t"},
    {"h", "e"},
    {"\xc4\xa0t", "he"},
    {"i", "n"},
    {"\xc4\xa0", "a"},
    {"e", "r"},
    {"o", "n"},
    {"\xc4\xa0", "s"},
    {"e", "s"},
    {"\xc4\xa0", "w"},
    {"o", "r"},
    {"l", "l"},
    {"\xc4\xa0", "\xc4\xa0"},
    {"\xc4\xa0\xc4\xa0", "\xc4\xa0\xc4\xa0"},
    {"\xc4\x8a", "\xc4\x8a"},
    {"1", "2"},
    {"12", "3"},
    {"\xc3\x83", "\xc2\xa4"},
    {"\xc3\xb0", "\xc5\x81"},
    {"\xc3\xb0\xc5\x81", "\xc2\xa6"},
    {"\xc4\xa0w", "or"},
    {"\xc4\xa0wor", "ll"},
    {"H", "e"},
    {"He", "ll"},
    {"Hell", "o"},
    {"in", "g"},
    {"\xc4\xa0", "in"},
    {"'", "s"},
};
static const char *const SPECIALS[][2] = {
    {"<|begin_of_text|>", "3"}, {"<|im_end|>", "3"}, {"<tool>", "4"}, {"<|im", "4"}};

static tokenizer *TOK[N_PRES];

static tokenizer *build(const char *pre) {
    size_t n_merges = sizeof MERGES / sizeof MERGES[0], n_special = sizeof SPECIALS / sizeof SPECIALS[0];
    bpe_vocab *v = bpe_vocab_new((int32_t)(256 + n_merges + n_special));
    char err[256];
    int32_t id = 0;
    for (int b = 0; b < 256; b++) {
        char s[2];
        size_t n = byte_to_unicode_utf8((uint8_t)b, s);
        if (bpe_vocab_set_token(v, id++, s, n, BPE_NORMAL, err, sizeof err)) abort();
    }
    for (size_t i = 0; i < n_merges; i++) {
        char s[64];
        snprintf(s, sizeof s, "%s%s", MERGES[i][0], MERGES[i][1]);
        if (bpe_vocab_set_token(v, id++, s, strlen(s), BPE_NORMAL, err, sizeof err) ||
            bpe_vocab_add_merge(v, MERGES[i][0], strlen(MERGES[i][0]), MERGES[i][1], strlen(MERGES[i][1])))
            abort();
    }
    for (size_t i = 0; i < n_special; i++)
        if (bpe_vocab_set_token(v, id++, SPECIALS[i][0], strlen(SPECIALS[i][0]), SPECIALS[i][1][0] - '0', err,
                                sizeof err))
            abort();
    if (bpe_vocab_use_pre(v, pre, err, sizeof err)) abort();
    bpe_vocab_set_ids(v, 256 + (int32_t)n_merges, 257 + (int32_t)n_merges, -1, -1);
    tokenizer *tok;
    if (bpe_vocab_build(v, pre, &tok, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        abort();
    }
    return tok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    size_t which = data[0] % N_PRES;
    if (!TOK[which]) TOK[which] = build(PRES[which]);
    const tokenizer *tok = TOK[which];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids;
    size_t n;
    if (tokenizer_encode(tok, text, len, false, &ids, &n) != 0) abort();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(tok) || tokenizer_is_control(tok, ids[i])) abort();
    char *out, *want = malloc(3 * len + 1);
    size_t ol, wl = utf8_lossy((const unsigned char *)text, len, want);
    if (!want || tokenizer_decode(tok, ids, n, &out, &ol) != 0) abort();
    if (ol != wl || memcmp(out, want, wl) != 0) abort(); /* every byte has a token: nothing is lost */
    stream_equals_decode(tok, ids, n, out, ol);
    free(out);
    free(want);
    free(ids);
    if (tokenizer_encode_special(tok, text, len, true, &ids, &n) != 0) abort();
    free(ids);
    return 0;
}
