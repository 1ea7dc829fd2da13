/*
 * memory_names.c — the names command lines and configs use for a context's memory mode and retrieval memory's
 * storage dtype (engine.h mnemo_memory_mode, mnemo_mem_dtype).
 */
#include <string.h>

#include "engine.h"

static const char *const MODE_NAMES[] = {[MNEMO_MEMORY_MODEL] = "model", [MNEMO_MEMORY_RETRIEVAL] = "retrieval"};
static const char *const DTYPE_NAMES[] = {[MNEMO_MEM_F32] = "f32", [MNEMO_MEM_BF16] = "bf16", [MNEMO_MEM_F16] = "f16"};

static int find(const char *const *names, int n, const char *name) {
    for (int i = 0; name && i < n; i++)
        if (!strcmp(names[i], name)) return i;
    return -1;
}

mnemo_status mnemo_memory_mode_parse(const char *name, mnemo_memory_mode *out) {
    int i = find(MODE_NAMES, 2, name);
    if (i < 0 || !out) return MNEMO_ERR_INVALID_ARG;
    *out = (mnemo_memory_mode)i;
    return MNEMO_OK;
}

const char *mnemo_memory_mode_name(mnemo_memory_mode mode) {
    return (unsigned)mode < 2 ? MODE_NAMES[mode] : "?";
}

mnemo_status mnemo_mem_dtype_parse(const char *name, mnemo_mem_dtype *out) {
    int i = find(DTYPE_NAMES, 3, name);
    if (i < 0 || !out) return MNEMO_ERR_INVALID_ARG;
    *out = (mnemo_mem_dtype)i;
    return MNEMO_OK;
}

const char *mnemo_mem_dtype_name(mnemo_mem_dtype dtype) {
    return (unsigned)dtype < 3 ? DTYPE_NAMES[dtype] : "?";
}
