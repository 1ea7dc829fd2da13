/*
 * fuzz_train_data.c — libFuzzer target: train_data_open_bytes on arbitrary bytes, as JSON lines (the first byte
 * odd) or as text, seq_len 1..64 from the second byte. Accepted data must answer every row of a few steps inside
 * its bounds: tokens in the vocabulary, masks 0/1, every token counted in a text window, at least one in a JSON-lines
 * row (an accepted example always has something to learn). Seeds cover text, prompt/completion and chat ({"messages"},
 * llama2: the fixture names no template) lines, accepted and refused. Model: tests/fixtures/models/mha
 * (MNEMO_FIXTURES, else found next to this file).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "train_data.h"

static mnemo_model *model;

static int setup(void) {
    char dir[4096];
    const char *fx = getenv("MNEMO_FIXTURES");
    if (fx) snprintf(dir, sizeof dir, "%s/models/mha", fx);
    else {
        snprintf(dir, sizeof dir, "%s", __FILE__); /* .../tests/fuzz/fuzz_train_data.c */
        char *cut = strstr(dir, "fuzz/fuzz_train_data.c");
        if (!cut) return -1;
        snprintf(cut, sizeof dir - (size_t)(cut - dir), "fixtures/models/mha");
    }
    mnemo_log_set_level(MNEMO_LOG_ERROR);
    return mnemo_model_load(dir, NULL, &model) == MNEMO_OK ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!model && setup() != 0) {
        fprintf(stderr, "fuzz_train_data: cannot load the fixture model\n");
        abort();
    }
    if (size < 2) return 0;
    const char *name = data[0] & 1 ? "fuzz.jsonl" : "fuzz.txt";
    int32_t L = 1 + data[1] % 64;
    char err[512];
    train_data *d = train_data_open_bytes(model, name, (const char *)data + 2, size - 2, L, data[0] & 2, data[0],
                                          err, sizeof err);
    if (!d) {
        if (!err[0]) abort(); /* every refusal says why */
        return 0;
    }
    int64_t n = train_data_examples(d);
    if (n < 1) abort();
    mnemo_token row[65];
    uint8_t mask[64];
    int32_t V = mnemo_model_n_vocab(model);
    for (int64_t step = 0; step < 3; step++)
        for (int32_t r = 0; r < 4; r++) {
            int64_t ex = train_data_row(d, step, 4, r, row, mask);
            if (ex < 0 || ex >= n) abort();
            for (int32_t t = 0; t <= L; t++)
                if (row[t] < 0 || row[t] >= V) abort();
            int32_t counted = 0;
            for (int32_t t = 0; t < L; t++) {
                if (mask[t] > 1) abort();
                counted += mask[t];
            }
            if (train_data_is_text(d) ? counted != L : counted < 1) abort();
        }
    train_data_free(d);
    return 0;
}
