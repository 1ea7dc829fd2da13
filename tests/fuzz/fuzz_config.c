/*
 * fuzz_config.c — libFuzzer target: model_config_parse on arbitrary bytes; on success the invariants later
 * code relies on (positive sizes, heads divisible by kv heads, in-range memory layers) must hold.
 */
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>

#include "model_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    model_config c;
    char err[512];
    if (model_config_parse((const char *)data, size, "config.json", &c, err, sizeof err) == 0) {
        if (c.hidden_size <= 0 || c.head_dim <= 0 || c.num_key_value_heads <= 0 ||
            c.num_attention_heads % c.num_key_value_heads != 0 || c.n_eos < 1 || c.n_eos > MODEL_MAX_EOS ||
            c.n_mem_layers < 0 || c.n_mem_layers > MODEL_MAX_MEM_LAYERS)
            abort();
        for (int i = 0; i < c.n_mem_layers; i++)
            if (c.mem_layers[i] < 0 || c.mem_layers[i] >= c.num_hidden_layers) abort();
    }
    return 0;
}
