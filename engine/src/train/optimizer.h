/*
 * optimizer.h — one optimizer step over a trainable set, with torch.optim's semantics:
 *   AdamW  torch.optim.AdamW: decoupled weight decay p *= 1 - lr*wd, bias-corrected moments, eps outside the sqrt
 *          (the kernels' adamw op, so a device backend can run it);
 *   SGD    torch.optim.SGD (dampening 0, no Nesterov): g += wd*p; with momentum mu, buf = g on the first step and
 *          mu*buf + g after; p -= lr*buf.
 * Weight decay applies to every trained tensor, as torch does for one parameter group. The moments are named
 * after the tensors ("m/<name>", "v/<name>", "mom/<name>") for the checkpoint.
 * On a device backend (trainable.be) the moments live in device memory too and every update is an op (adamw,
 * axpby); the checkpoint's buffers are host copies made here.
 */
#ifndef MNEMO_OPTIMIZER_H
#define MNEMO_OPTIMIZER_H

#include "kernels.h"
#include "train_checkpoint.h"
#include "trainable.h"

typedef struct {
    const kern_backend *be; /* the trainable's: device memory for m, v and norm_sq; NULL: host */
    mnemo_optimizer kind;
    double beta1, beta2, eps, weight_decay, momentum;
    float **m, **v;  /* per trained tensor: AdamW's two moments, or SGD's momentum buffer in m (v NULL) */
    size_t count;
    float *norm_sq;  /* device: the squared gradient norm, summed by sumsq and read back (1 float) */
} optimizer;

int optimizer_init(optimizer *o, const trainable *t, const mnemo_train_params *p, char *err, size_t errlen);
void optimizer_free(optimizer *o);
size_t optimizer_floats(const optimizer *o, const trainable *t);

/* torch.nn.utils.clip_grad_norm_ over every gradient of t: returns the global 2-norm before clipping, and scales
 * the gradients by max_norm / (norm + 1e-6) when that is below 1 (max_norm 0: measured only). Host: clip_grad_norm
 * (lr_schedule.h); device: sumsq per tensor into one float, read back once, axpby to scale. *rc: KERN_OK or a
 * code (the norm is then NaN). */
double optimizer_clip_grad_norm(optimizer *o, trainable *t, kern_ctx *kc, double max_norm, int *rc);

/* Step `step` (1-based, AdamW's bias correction) at learning rate lr on the gradients in t. KERN_OK or a code. */
int optimizer_step(optimizer *o, trainable *t, const kern_backend *be, kern_ctx *kc, double lr, int64_t step);

/* The checkpoint's buffers: every trained tensor ("p/<name>") then the optimizer's state. *n receives the count;
 * free with optimizer_ckpt_buffers_free. On the host they are the tensors themselves; on a device they are host
 * copies, downloaded when `download` (to save), else left for train_ckpt_load to fill and optimizer_ckpt_upload to
 * send back. NULL when out of memory or a download failed. */
train_ckpt_buffer *optimizer_ckpt_buffers(const optimizer *o, const trainable *t, bool download, size_t *n);
/* Device: b's host copies (from optimizer_ckpt_buffers, same o and t) into the tensors. 0, or -1. Host: no-op. */
int optimizer_ckpt_upload(const optimizer *o, const trainable *t, const train_ckpt_buffer *b, size_t n);
void optimizer_ckpt_buffers_free(const optimizer *o, train_ckpt_buffer *b, size_t n);
void train_ckpt_buffers_free(train_ckpt_buffer *b, size_t n); /* the array and names only */

#endif
