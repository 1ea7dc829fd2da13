/*
 * uio_weights.h — a UIO-LLM's own weights: what turns a
 * base LLaMA into a compressor of segments into <mem> KV entries. A UIO directory holds
 *   uio_config.json   the reference's keys: num_memory M, lora_rank r, lora_alpha, lora_dropout (unused at
 *                     inference), chunk_size C (a multiple of M)
 *   uio.safetensors   mnemo's format: encoder.retrieval_token, encoder.layers.{l}.{q,v}_proj.lora_{A,B},
 *                     decoder.repeat_token, decoder.layers.{l}.{k,v}_proj.lora_{A,B}; metadata format mnemo-uio/1
 *   or uio.pth        the reference's format: torch.save of a list of 2 + 8 n_layer tensors by position —
 *                     retrieval_token, per encoder layer q.A, q.B, v.A, v.B, repeat_token, per decoder layer k.A,
 *                     k.B, v.A, v.B (tests/fixtures/uio/README.md); nn.Parameters and views into shared storage read
 * (uio.safetensors is taken when both are present). Shapes: the tokens (1, 1, hidden); lora_A [r, hidden]; lora_B
 * [out, r] with out the projection's output width. F32, F16 or BF16, widened to fp32; every lora_B is stored times
 * the scale lora_alpha / r, as lora.c does for peft adapters, so lora_apply adds s (x A^T) B^T.
 */
#ifndef MNEMO_UIO_WEIGHTS_H
#define MNEMO_UIO_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "lora.h"
#include "model_config.h"

typedef struct uio_weights {
    int32_t chunk_size;         /* C: tokens per compressed segment */
    int32_t num_memory;         /* M: <mem> entries a segment becomes, per layer (compression ratio C / M) */
    int32_t lora_rank;          /* r */
    double lora_alpha;          /* scale = lora_alpha / r */
    double lora_dropout;        /* as the config gives it; dropout is off at inference */
    const char *file;           /* "uio.safetensors" or "uio.pth": what was read */
    float *retrieval_token;     /* [hidden] fp32, backend memory: the learned <mem> embedding */
    float *repeat_token;        /* [hidden] fp32, backend memory: checked and kept, unused by inference */
    lora_adapter encoder;       /* LoRA on q_proj and v_proj of the encoder (B times the scale) */
    lora_adapter transfer;      /* the transfer head's LoRA on k_proj and v_proj (B times the scale) */
    const kern_backend *be;
    void *block;                /* the one backend allocation everything above points into */
    uint64_t block_bytes;
    uint64_t n_params;          /* values read */
} uio_weights;

/* The tensors of a UIO checkpoint for n_layer layers: 2 + 8 n_layer. */
static inline int32_t uio_tensor_count(int32_t n_layer) { return 2 + 8 * n_layer; }

/* mnemo's name of the tensor at position i of the reference's list (encoder.layers.0.q_proj.lora_A, ...) into buf. */
void uio_tensor_name(int32_t i, int32_t n_layer, char *buf, size_t cap);

/* Checks a uio_config.json's bytes (file names it in messages) and fills u's C, M, r, alpha, dropout. 0, or -1 with
 * a message in err naming file. */
int uio_config_parse(const char *json, size_t len, const char *file, uio_weights *u, char *err, size_t errlen);

/* Reads a UIO directory for a base model of config cfg; the weights go to backend memory. 0, or -1 with a message
 * in err naming the file and the problem (missing, bad JSON, a wrong tensor count, shape or dtype); *io is set
 * when the problem is a missing or unreadable file (else a malformed one). */
int uio_weights_load(uio_weights *u, const char *dir, const model_config *cfg, const kern_backend *be, int *io,
                     char *err, size_t errlen);
void uio_weights_free(uio_weights *u); /* NULL and a zeroed struct are no-ops */

#endif
