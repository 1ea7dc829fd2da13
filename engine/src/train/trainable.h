/*
 * trainable.h — the tensors a training run changes, in one list the optimizer, the gradient norm and the checkpoint
 * walk in the same order:
 *   LoRA   the A and B of every targeted projection (peft's names and layout; B not multiplied by the scale),
 *   LoRA+  the same plus the embeddings and every norm (fp32 copies the model's forward is pointed at),
 *   full   every parameter of the model (fp32 copies; bf16/f16 weights widened once).
 * It also writes what the run produces: a peft adapter directory (and trainable_params.safetensors for LoRA+), or a
 * checkpoint directory for full fine-tuning.
 * On a device backend (train_mem.h) every value and gradient lives in device memory: p and g below are device
 * pointers, set up by one upload and downloaded only to write files.
 */
#ifndef MNEMO_TRAINABLE_H
#define MNEMO_TRAINABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "kernels.h"
#include "model_grad.h"

typedef struct {
    char name[160]; /* as written: peft's name for adapter matrices, the checkpoint's for base parameters */
    float *p, *g;   /* value and gradient, n floats each, in the memory of trainable.be */
    size_t n;
} train_param;

typedef struct {
    const kern_backend *be;   /* device backend holding every buffer; NULL: host memory */
    mnemo_train_method method;
    unsigned base;            /* TRAIN_* groups of the base model trained */
    model_grads params;       /* base: fp32 copies the model runs on (entries outside `base` NULL) */
    model_grads grads;        /* base: their gradients */
    lora_train lora;          /* r 0: no adapter */
    double alpha;
    bool rslora;
    unsigned targets;         /* bit t: lora.h's lora_target t adapted */
    train_param *items;
    size_t count;
} trainable;

/* Sets up what p's method trains on m (whose weights may be rebound to fp32 copies: m must not be used by anyone
 * else). LoRA: from p->init_adapter, or A drawn uniformly in +-1/sqrt(in) from p->seed and B = 0. 0, or -1. */
int trainable_init(trainable *t, mnemo_model *m, const mnemo_train_params *p, char *err, size_t errlen);
void trainable_free(trainable *t);
/* Every gradient to 0, on kc (device: queued, then waited for). KERN_OK or a code. */
int trainable_zero_grads(trainable *t, kern_ctx *kc);
/* Floats held: values (when owned), gradients. */
size_t trainable_floats(const trainable *t);

/* Writes out_dir's product (see engine.h, training). base_model names the base in adapter_config.json. */
int trainable_write(const trainable *t, const mnemo_model *m, const char *model_dir, const char *out_dir,
                    char *err, size_t errlen);

#endif
