/*
 * fuzz_safetensors.c — libFuzzer target: safetensors_parse on arbitrary bytes. On success every tensor's
 * first and last byte is read, so ASan flags any entry pointing outside the input.
 */
#include <stdint.h>
#include <stddef.h>

#include "tensor_index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tensor_list l = {0};
    char err[512];
    if (safetensors_parse(data, size, "fuzz.safetensors", &l, err, sizeof err) == 0) {
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < l.count; i++) {
            const uint8_t *p = l.items[i].data;
            if (l.items[i].nbytes) sink ^= p[0] ^ p[l.items[i].nbytes - 1];
        }
        (void)sink;
    }
    tensor_list_free(&l);
    return 0;
}
