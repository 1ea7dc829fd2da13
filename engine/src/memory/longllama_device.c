/*
 * longllama_device.c — LongLLaMA memory on a GPU backend: a device copy of every memory store (memstore's device
 * backend, mem_device: memory attention reads it where it runs, and exact kNN searches it there), plus the two
 * buffers that carry a host search across the bus: the queries down (stage) and the ids up (dev_sel).
 * Which search runs where is memstore's choice (mem_device_searches), made once at create (longllama_ops.c).
 */
#include <stdlib.h>
#include <string.h>

#include "longllama_memory.h"

int longllama_device_init(longllama_state *s, const kern_backend *be, int32_t hkv, int32_t head_dim) {
    if (!be || be->host_memory) return 0;
    s->dev_be = be;
    s->dev = calloc((size_t)s->n_layer, sizeof *s->dev);
    if (!s->dev) return -1;
    for (int32_t l = 0; l < s->n_layer; l++)
        if (s->mem[l] && !(s->dev[l] = mem_device_new(be, hkv, head_dim, mem_store_dtype(s->mem[l])))) return -1;
    return 0;
}

void longllama_device_free(longllama_state *s) {
    if (s->dev_be) s->dev_be->mem_free(s->dev_sel);
    for (int32_t l = 0; s->dev && l < s->n_layer; l++) mem_device_free(s->dev[l]);
    free(s->dev);
    free(s->stage);
}

void longllama_device_invalidate(longllama_state *s) {
    for (int32_t l = 0; s->dev && l < s->n_layer; l++) mem_device_invalidate(s->dev[l]);
}

float *longllama_stage(longllama_state *s, size_t floats) {
    if (floats > s->stage_cap) {
        float *p = realloc(s->stage, floats * sizeof *p);
        if (!p) return NULL;
        s->stage = p;
        s->stage_cap = floats;
    }
    return s->stage;
}

int64_t *longllama_device_sel(longllama_state *s, kern_ctx *kc, size_t n, bool upload) {
    if (n > s->dev_sel_cap) {
        int64_t *p = s->dev_be->mem_alloc(n * sizeof *p);
        if (!p) return NULL;
        s->dev_be->sync(kc); /* the old ids may still be read by a queued kernel */
        s->dev_be->mem_free(s->dev_sel);
        s->dev_sel = p;
        s->dev_sel_cap = n;
    }
    if (upload && s->dev_be->mem_copy(kc, s->dev_sel, s->sel, n * sizeof *s->sel, KERN_H2D) != KERN_OK) return NULL;
    return s->dev_sel;
}
