/*
 * model_grad.h — the loss of a LLaMA model on a batch and the gradient of every parameter,
 * written out layer by layer on the op table as karpathy/llm.c does: a forward that keeps what the backward needs
 * (per layer: the residual input, both norms' inputs and rstd, q and k after RoPE, v, the attention output and its
 * log-sum-exp, the MLP's gate, up and product), cross-entropy fused with its softmax over the vocabulary (one
 * [rows, vocab] buffer, overwritten by its gradient), then the backward through every op in reverse.
 *
 * A batch is B independent sequences of T+1 ids: rows tokens[b][0..T-1] are read, tokens[b][1..T] predicted; loss
 * = mean cross-entropy over the predicted tokens whose mask is 1 (mask NULL: all). Gradients are fp32, one buffer
 * per parameter named as in the Hugging Face checkpoint (model.layers.0.self_attn.q_proj.weight, ...; tied
 * embeddings: one model.embed_tokens.weight), and accumulate (+=) so micro-batches add up. Any backend: on a device
 * backend (CUDA) every buffer here - gradients, fp32 master copies, the workspace, the adapter - lives in device
 * memory (the backend's mem_alloc), a step uploads its ids, targets and positions in one copy and reads back only
 * the loss. The model's weights may be f32, f16 or bf16 (widened by the kernels). LongLLaMA layouts too: memory
 * layers attend locally (their keys unrotated when mem_positionals is false), or cross-batch with a FoT workspace
 * (fot_ws_new_on the same backend). S2-Attn runs on host backends only.
 */
#ifndef MNEMO_MODEL_GRAD_H
#define MNEMO_MODEL_GRAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

typedef struct {
    char name[96];
    float *g;   /* fp32, the parameter's shape */
    size_t n;
} param_grad;

struct kern_backend;
typedef struct model_grads {
    param_grad *p;
    size_t count;
    const struct kern_backend *be; /* device backend whose memory holds every g; NULL: host memory (calloc) */
} model_grads;

/* Zeroed gradient buffers for every parameter of m, in the memory of m's backend. 0, or -1 (out of memory). */
int model_grads_init(model_grads *g, const mnemo_model *m, char *err, size_t errlen);
/* The same list of names and sizes, with buffers only for the parameter groups in train (TRAIN_*; the others'
 * g is NULL), so LoRA+ does not hold a gradient the size of the model. */
int model_grads_init_for(model_grads *g, const mnemo_model *m, unsigned train, char *err, size_t errlen);
void model_grads_free(model_grads *g);
void model_grads_zero(model_grads *g);
param_grad *model_grads_find(model_grads *g, const char *name);

/* Full fine-tuning: p receives an fp32 copy of every parameter (names and sizes as model_grads_init; bf16/f16
 * widened once) and the model's forward is pointed at those copies, so updating p updates the model. The model
 * must not be decoding in another thread meanwhile; p must outlive every use of the model. On a device backend the
 * copies are made from the uploaded weights, which are freed once every weight has its copy (full fine-tuning). 0,
 * or -1. */
int model_params_bind_fp32(model_grads *p, mnemo_model *m, char *err, size_t errlen);
/* The same for the groups in train only; the other weights stay as loaded (p's entries NULL). */
int model_params_bind_fp32_for(model_grads *p, mnemo_model *m, unsigned train, char *err, size_t errlen);

/* Adds the gradient of the batch's loss (times dloss) to g; *loss receives the loss. mask[b*T + t] (NULL: all 1)
 * marks tokens[b][t+1] as counted. 0, or -1 with a message in err. */
int model_loss_and_grads(const mnemo_model *m, const int32_t *tokens, const uint8_t *mask, int32_t B, int32_t T,
                         float dloss, model_grads *g, float *loss, char *err, size_t errlen);

/* Which base parameters get gradients: full fine-tuning all; LoRA none (frozen base); LoRA+ (LongLoRA) the
 * embeddings and every norm. */
enum { TRAIN_EMBED = 1, TRAIN_NORMS = 2, TRAIN_LINEAR = 4, TRAIN_HEAD = 8, TRAIN_ALL = 15 };

#define LORA_TRAIN_MAX_LAYERS 64
/* A LoRA adapter being trained (fp32 in the model backend's memory, peft's layout): each targeted projection y = x W^T + scale (x A^T) B^T.
 * a/b: [layer][target] parameters (NULL where not targeted), ga/gb: their gradients (accumulated). Targets in the
 * order q, k, v, o, gate, up, down (lora.h's lora_target). */
typedef struct {
    int32_t r;
    float scale;
    float *a[LORA_TRAIN_MAX_LAYERS][7], *b[LORA_TRAIN_MAX_LAYERS][7];
    float *ga[LORA_TRAIN_MAX_LAYERS][7], *gb[LORA_TRAIN_MAX_LAYERS][7];
} lora_train;

/* The general form: base gradients into g for the parameter groups in train (g may be NULL when train is 0), and
 * the adapter's into lora (NULL: no adapter). */
int model_loss_and_grads_ex(const mnemo_model *m, const int32_t *tokens, const uint8_t *mask, int32_t B, int32_t T,
                            float dloss, model_grads *g, unsigned train, lora_train *lora, float *loss, char *err,
                            size_t errlen);

/* Everything one batch's forward and backward need, allocated once for (B, T) and reused by every step (one
 * allocation: no page faults per step). recompute (gradient checkpointing): keep only each layer's input and
 * recompute the layer's activations in the backward — one layer's activations instead of L, about a third more
 * compute; the gradients are bit-identical either way. lora_r: the rank of the adapter trained with it (0: none). */
typedef struct model_train_ws model_train_ws;
model_train_ws *model_train_ws_new(const mnemo_model *m, int32_t B, int32_t T, int32_t lora_r, bool recompute,
                                   char *err, size_t errlen);
void model_train_ws_free(model_train_ws *w);
size_t model_train_ws_bytes(const model_train_ws *w);

/* Long-context training. S2-Attn (LongLoRA, s2_attn.h) with groups of `group` rows in every step of
 * this workspace instead of full causal attention; group 0: full attention again. 0, or -1 (a shape S2-Attn cannot
 * split; the workspace keeps full attention). */
int model_train_ws_set_s2(model_train_ws *w, const mnemo_model *m, int32_t group, char *err, size_t errlen);
/* The RoPE position of every row (pos[b*T + t], >= 0; sparse memory training keeps the sampled tokens' original
 * positions) for the following steps; NULL: 0..T-1 in every row again. 0, or -1. */
int model_train_ws_set_positions(model_train_ws *w, const int32_t *pos, char *err, size_t errlen);

int32_t model_train_ws_rows(const model_train_ws *w); /* B */
int32_t model_train_ws_len(const model_train_ws *w);  /* T */

/* FoT cross-batch training (fot_attention.h): the workspace's memory layers attend to other rows as f's schedule
 * says; f (NULL: none) must have w's B rows and outlive its use. 0, or -1 with a message. */
struct fot_ws;
int model_train_ws_set_fot(model_train_ws *w, struct fot_ws *f, char *err, size_t errlen);

/* model_loss_and_grads_ex over a workspace (its B and T). dloss 0: the loss alone, no backward (evaluation). */
int model_loss_and_grads_ws(model_train_ws *w, const mnemo_model *m, const int32_t *tokens, const uint8_t *mask,
                            float dloss, model_grads *g, unsigned train, lora_train *lora, float *loss, char *err,
                            size_t errlen);

#endif
