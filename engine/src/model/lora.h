/*
 * lora.h — a LoRA adapter in Hugging Face peft's format, applied without merging.
 *
 * A directory holds adapter_config.json (peft_type "LORA", r, lora_alpha, target_modules among q_proj, k_proj,
 * v_proj, o_proj, gate_proj, up_proj, down_proj, use_rslora) and adapter_model.safetensors (or .bin) with, per
 * layer l and target, base_model.model.model.layers.<l>.<self_attn|mlp>.<target>.lora_A.weight [r, in] and
 * lora_B.weight [out, r]. A targeted projection y = x W^T becomes y = x W^T + s (x A^T) B^T with s = lora_alpha / r
 * (lora_alpha / sqrt(r) with use_rslora), exactly as peft's Linear computes it with dropout off; B is stored
 * pre-multiplied by s. The base weights are never touched, so several adapters serve over one model.
 * Options that would change the arithmetic and are not implemented (bias, DoRA, rank/alpha patterns, a subset of
 * layers, modules_to_save, fan_in_fan_out, a regex target) are refused with a message naming them.
 */
#ifndef MNEMO_LORA_H
#define MNEMO_LORA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "model_config.h"

typedef enum { LORA_Q, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN, LORA_N_TARGETS } lora_target;

typedef struct {
    float *a; /* [r, in] fp32 in backend memory; NULL: this projection is not adapted */
    float *b; /* [out, r] fp32, times s */
} lora_pair;

typedef struct lora_adapter {
    int32_t r, n_layer;
    float scale;                  /* s, already folded into every b (lora_load) */
    double alpha;                 /* lora_alpha as the config gives it */
    bool rslora;                  /* s = alpha / sqrt(r) */
    unsigned targets;             /* bit t set: target t is adapted */
    lora_pair *pairs;             /* [n_layer * LORA_N_TARGETS] */
    const kern_backend *be;
    void *block;                  /* the backend allocation every a and b points into */
    uint64_t fingerprint;         /* FNV-1a of r, the scale, the targets and every matrix value (never 0): what a
                                   * session snapshot records, so it never continues under other weights */
} lora_adapter;

/* "q_proj" ... "down_proj" <-> lora_target; -1 for any other name. */
int lora_target_parse(const char *module);
const char *lora_target_name(lora_target t);

/* [out, in] of target t's weight in a model of config cfg. */
void lora_target_shape(const model_config *cfg, lora_target t, int64_t *out, int64_t *in);

/* Checks an adapter_config.json's bytes (dir names it in messages) and fills a's r, scale and targets. 0, or -1
 * with a message in err. The fuzz target's entry. */
int lora_config_parse(const char *json, size_t len, const char *dir, lora_adapter *a, char *err, size_t errlen);

/* Reads an adapter directory for a model of config cfg; its matrices go to backend memory. 0, or -1 with a
 * message in err naming the directory and the problem (a missing or misshapen tensor, an option not supported). */
int lora_load(lora_adapter *a, const char *dir, const model_config *cfg, const kern_backend *be, char *err,
              size_t errlen);
/* The same on the CPU with B as stored, not multiplied by s (a training run starting from the adapter). A LoRA+
 * directory (trainable_params.safetensors beside the adapter) is refused by lora_load: its embeddings and norms
 * cannot be applied unmerged. */
int lora_load_host_unfolded(lora_adapter *a, const char *dir, const model_config *cfg, char *err, size_t errlen);
/* lora_load on the CPU that accepts a LoRA+ directory (the caller merges trainable_params.safetensors itself). */
int lora_load_for_merge(lora_adapter *a, const char *dir, const model_config *cfg, char *err, size_t errlen);
void lora_free(lora_adapter *a);

/* One (layer, target) of an adapter being written: host fp32 matrices, B NOT multiplied by the scale. */
typedef struct {
    int32_t layer;
    lora_target target;
    const float *a; /* [r, in] */
    const float *b; /* [out, r] */
} lora_host_pair;

/* Writes an adapter directory peft loads (PeftModel.from_pretrained): adapter_config.json (peft_type LORA, r,
 * lora_alpha, use_rslora, target_modules, bias "none", lora_dropout 0, base_model_name_or_path, task_type
 * CAUSAL_LM) and adapter_model.safetensors with peft's tensor names. Every (layer, target) the targets name must be
 * given. The directory is created if needed; each file is written to a temp name and renamed. 0, or -1 with a
 * message in err. */
int lora_write_peft(const char *dir, const model_config *cfg, int32_t r, double alpha, bool rslora, unsigned targets,
                    const lora_host_pair *pairs, size_t n_pairs, const char *base_model, char *err, size_t errlen);

static inline const lora_pair *lora_pair_at(const lora_adapter *a, int32_t layer, lora_target t) {
    const lora_pair *p = a ? &a->pairs[(size_t)layer * LORA_N_TARGETS + t] : NULL;
    return p && p->a ? p : NULL;
}

/* y[n, out] += (x[n, in] A^T) B^T for one pair; t: scratch of n * r floats (backend memory). KERN_* code. */
int lora_apply(const lora_pair *p, int32_t r, const kern_backend *be, kern_ctx *kc, float *y, const float *x,
               int64_t n, int64_t out, int64_t in, float *t);

#endif
