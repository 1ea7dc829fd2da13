/*
 * fuzz_gguf.c — libFuzzer target: GGUF bytes through everything that reads them before any weight is used:
 * gguf_parse; on success every tensor's first and last byte is read (ASan flags an entry outside the input), the
 * llama config is built and parsed (model_config_parse), the tokenizer proto is built, and the weight list with
 * its Q/K reordering is made (gguf_weights_parse). The corpus (tests/fuzz/corpus/fuzz_gguf, from
 * tests/reference/make_gguf_fixtures.py --seeds) replays as a ctest.
 */
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "gguf_llama.h"
#include "model_config.h"
#include "tensor_index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file g;
    char err[512];
    if (gguf_parse(data, size, "fuzz.gguf", &g, err, sizeof err) != 0) return 0;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < g.n_tensors; i++)
        if (g.tensors[i].nbytes) sink ^= g.tensors[i].data[0] ^ g.tensors[i].data[g.tensors[i].nbytes - 1];
    (void)sink;
    char *json = NULL;
    if (gguf_llama_config_json(&g, "fuzz.gguf", &json, err, sizeof err) == 0) {
        model_config c;
        model_config_parse(json, strlen(json), "fuzz.gguf", &c, err, sizeof err);
    }
    free(json);
    uint8_t *proto = NULL;
    size_t plen = 0;
    gguf_llama_tokenizer_proto(&g, "fuzz.gguf", &proto, &plen, err, sizeof err);
    free(proto);
    gguf_free(&g);
    tensor_list l = {0};
    gguf_weights_parse(data, size, "fuzz.gguf", &l, err, sizeof err);
    tensor_list_free(&l);
    return 0;
}
