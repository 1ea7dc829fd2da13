/*
 * fuzz_tokenizer_json.c — libFuzzer target: the tokenizer.json reader (tokenizer_load_hf_json) on arbitrary
 * bytes. The input is tokenizer.json, optionally followed by a NUL byte and a tokenizer_config.json. A load either
 * fails with a message or gives a tokenizer whose encodings hold ids in range and decode to valid text, with the
 * streaming detokenizer agreeing with the one-shot decode.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stream_check.h"
#include "tokenizer.h"

static const char *const TEXTS[] = {"Hello world", "  3333 ied 4 \xc2\xbd months\n\n", "<|im_start|>x<|im_end|>",
                                    "\xf0\x9f\xa6\x99 \xe4\xb8\xad\xe6\x96\x87 \xff\xfe"};

static void exercise(const tokenizer *tok, const char *text, size_t len) {
    int32_t *ids;
    size_t n;
    int32_t V = tokenizer_vocab_size(tok);
    for (int special = 0; special < 2; special++) {
        if ((special ? tokenizer_encode_special : tokenizer_encode)(tok, text, len, true, &ids, &n) != 0) abort();
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= V) abort();
        char *out;
        size_t ol;
        if (tokenizer_decode(tok, ids, n, &out, &ol) != 0 || out[ol] != '\0') abort();
        stream_equals_decode(tok, ids, n, out, ol);
        free(out);
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *json = (const char *)data, *config = NULL;
    size_t len = size, clen = 0;
    const uint8_t *nul = memchr(data, 0, size);
    if (nul) {
        len = (size_t)(nul - data);
        config = (const char *)nul + 1;
        clen = size - len - 1;
    }
    tokenizer *tok = NULL;
    char err[512];
    if (tokenizer_load_hf_json(json, len, config, clen, "fuzz", &tok, err, sizeof err) != 0) {
        if (tok || !err[0]) abort(); /* a failure always says why */
        return 0;
    }
    for (size_t i = 0; i < sizeof TEXTS / sizeof TEXTS[0]; i++) exercise(tok, TEXTS[i], strlen(TEXTS[i]));
    exercise(tok, json, len > 256 ? 256 : len);
    tokenizer_free(tok);
    return 0;
}
