/*
 * optimizer.h — one optimizer step over a trainable set, with torch.optim's semantics (issue 18, item 5):
 *   AdamW  torch.optim.AdamW: decoupled weight decay p *= 1 - lr*wd, bias-corrected moments, eps outside the sqrt
 *          (the kernels' adamw op, so a device backend can run it);
 *   SGD    torch.optim.SGD (dampening 0, no Nesterov): g += wd*p; with momentum mu, buf = g on the first step and
 *          mu*buf + g after; p -= lr*buf.
 * Weight decay applies to every trained tensor, as torch does for one parameter group. The moments are named
 * after the tensors ("m/<name>", "v/<name>", "mom/<name>") for the checkpoint.
 */
#ifndef MNEMO_OPTIMIZER_H
#define MNEMO_OPTIMIZER_H

#include "kernels.h"
#include "train_checkpoint.h"
#include "trainable.h"

typedef struct {
    mnemo_optimizer kind;
    double beta1, beta2, eps, weight_decay, momentum;
    float **m, **v;  /* per trained tensor: AdamW's two moments, or SGD's momentum buffer in m (v NULL) */
    size_t count;
} optimizer;

int optimizer_init(optimizer *o, const trainable *t, const mnemo_train_params *p, char *err, size_t errlen);
void optimizer_free(optimizer *o);
size_t optimizer_floats(const optimizer *o, const trainable *t);

/* Step `step` (1-based, AdamW's bias correction) at learning rate lr on the gradients in t. KERN_OK or a code. */
int optimizer_step(optimizer *o, trainable *t, const kern_backend *be, kern_ctx *kc, double lr, int64_t step);

/* The checkpoint's buffers: every trained tensor ("p/<name>") then the optimizer's state. *n receives the count;
 * the caller frees the array and the names (train_ckpt_buffers_free). NULL when out of memory. */
train_ckpt_buffer *optimizer_ckpt_buffers(const optimizer *o, const trainable *t, size_t *n);
void train_ckpt_buffers_free(train_ckpt_buffer *b, size_t n);

#endif
