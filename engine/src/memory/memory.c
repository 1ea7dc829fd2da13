/*
 * memory.c — which memory a model's contexts get, and the names snapshots are refused with. The one file that
 * names the mechanisms: a new one adds its table to MEMORIES and its test to memory_for_model.
 */
#include "memory.h"

#include "longllama_memory.h"
#include "retrieval_memory.h"
#include "uio_memory.h"

static const memory_ops *const MEMORIES[] = {&longllama_memory_ops, &uio_memory_ops, &retrieval_memory_ops};

const memory_ops *memory_for_model(const model_config *cfg, const struct uio_weights *uio,
                                   const mnemo_context_params *p) {
    if (p->memory == MNEMO_MEMORY_RETRIEVAL) return &retrieval_memory_ops; /* its create refuses other models */
    if (uio) return &uio_memory_ops; /* model_api refuses UIO weights over a LongLLaMA model */
    if (cfg->is_longllama) return &longllama_memory_ops;
    return NULL; /* plain LLaMA: the KV cache is all there is */
}

const char *memory_kind_name(uint32_t snapshot_kind) {
    if (snapshot_kind == 0) return "plain LLaMA";
    for (size_t i = 0; i < sizeof MEMORIES / sizeof *MEMORIES; i++)
        if (MEMORIES[i]->snapshot_kind == snapshot_kind) return MEMORIES[i]->name;
    return "?";
}
