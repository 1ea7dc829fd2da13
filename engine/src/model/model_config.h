/*
 * model_config.h — config.json of a LlamaForCausalLM / LongLlamaForCausalLM checkpoint, parsed and validated.
 * The LongLLaMA fields are kept for LongLLaMA checkpoints (CStanKonrad/long_llama's config.json).
 */
#ifndef MNEMO_MODEL_CONFIG_H
#define MNEMO_MODEL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

#define MODEL_MAX_EOS 8
#define MODEL_MAX_MEM_LAYERS 256

typedef enum { ROPE_SCALING_NONE = 0, ROPE_SCALING_LINEAR = 1 } rope_scaling_type;

typedef struct {
    char architecture[64];            /* "LlamaForCausalLM" or "LongLlamaForCausalLM" */
    bool is_longllama;
    int32_t hidden_size;
    int32_t intermediate_size;
    int32_t num_hidden_layers;
    int32_t num_attention_heads;
    int32_t num_key_value_heads;      /* absent in the file = num_attention_heads (MHA) */
    int32_t head_dim;                 /* absent = hidden_size / num_attention_heads */
    float rms_norm_eps;               /* default 1e-6 */
    float rope_theta;                 /* default 10000 */
    rope_scaling_type rope_scaling;   /* null/absent = NONE; {"type"|"rope_type": "linear", "factor": f} */
    float rope_scaling_factor;        /* 1 when NONE */
    int32_t max_position_embeddings;  /* default 2048 */
    int32_t vocab_size;
    bool tie_word_embeddings;         /* default false */
    int32_t bos_token_id;             /* default 1 */
    int32_t eos_token_ids[MODEL_MAX_EOS]; /* int or list in the file; default {2} */
    int32_t n_eos;
    int32_t pad_token_id;             /* -1 when absent/null */
    char torch_dtype[16];             /* "float32", "bfloat16", "float16" or "" */
    bool qk_norm;                     /* default false; true: every layer RMS-normalizes each head of q and k
                                       * (self_attn.q_norm / k_norm [head_dim], as Qwen3) before RoPE: cosine
                                       * attention with a learned temperature, the FoT paper's small models */
    /* LongLLaMA */
    int32_t mem_layers[MODEL_MAX_MEM_LAYERS];
    int32_t n_mem_layers;
    kern_dtype mem_dtype;             /* default BF16 */
    int32_t last_context_length;      /* default 1024 */
    int32_t mem_attention_grouping[2];/* {0,0} = null */
    bool mem_positionals;             /* default true */
} model_config;

/* Parse config.json text. file names it in messages. 0 on success; -1 with a message naming the field and
 * the problem: not JSON, wrong JSON type, missing required field, non-positive sizes, hidden_size not
 * divisible by heads when head_dim is absent, heads not divisible by kv heads, unsupported architecture or
 * rope_scaling type, mem_layers index out of range, unknown mem_dtype. */
int model_config_parse(const char *json, size_t len, const char *file, model_config *out, char *err,
                       size_t errlen);
/* Read <dir>/config.json and parse it. */
int model_config_load(const char *dir, model_config *out, char *err, size_t errlen);

#endif
