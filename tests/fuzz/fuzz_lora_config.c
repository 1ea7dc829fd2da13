/*
 * fuzz_lora_config.c — libFuzzer target: lora_config_parse on arbitrary bytes (a peft adapter_config.json, as
 * downloaded with an adapter). Accepted configs must give what lora_load relies on: r in 1..65536, at least one
 * known target and a finite scale; refusals say why.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lora.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lora_adapter a;
    memset(&a, 0, sizeof a);
    char err[512] = "";
    if (lora_config_parse((const char *)data, size, "fuzz", &a, err, sizeof err) == 0) {
        if (a.r < 1 || a.r > 65536 || a.targets == 0 || a.targets >= 1u << LORA_N_TARGETS || !isfinite(a.scale))
            abort();
    } else if (!err[0]) {
        abort();
    }
    return 0;
}
