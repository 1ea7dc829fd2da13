/*
 * fuzz_uio_config.c — libFuzzer target: uio_config_parse on arbitrary bytes (a UIO directory's uio_config.json).
 * Accepted configs must give what a UIO context relies on: num_memory, chunk_size, lora_rank >= 1, chunk_size a
 * multiple of num_memory, a finite lora_alpha, dropout in [0, 1); refusals say why, naming the file.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "uio_weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uio_weights u;
    memset(&u, 0, sizeof u);
    char err[512] = "";
    if (uio_config_parse((const char *)data, size, "fuzz/uio_config.json", &u, err, sizeof err) == 0) {
        if (u.num_memory < 1 || u.chunk_size < 1 || u.lora_rank < 1 || u.chunk_size % u.num_memory != 0 ||
            !isfinite(u.lora_alpha) || !(u.lora_dropout >= 0 && u.lora_dropout < 1))
            abort();
    } else if (!strstr(err, "fuzz/uio_config.json: ")) {
        abort();
    }
    return 0;
}
