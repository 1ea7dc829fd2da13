/*
 * lr_schedule.h — the learning rate of each optimizer step, and global gradient-norm clipping, with the semantics
 * of the PyTorch code users compare against:
 *   - schedules as transformers' get_{constant,linear,cosine}_schedule_with_warmup (a LambdaLR stepped after every
 *     optimizer step, so step s, counted from 0, uses lr * lambda(s)):
 *       warmup   lambda(s) = s / W                                   for s < W
 *       constant lambda(s) = 1
 *       linear   lambda(s) = max(0, (T - s) / (T - W))
 *       cosine   lambda(s) = max(0, 0.5 * (1 + cos(pi * (s - W) / (T - W))))   (half a cycle)
 *     with W warmup steps and T total steps.
 *   - clipping as torch.nn.utils.clip_grad_norm_(max_norm, norm_type=2): the global norm is the 2-norm of every
 *     gradient element together; when it exceeds max_norm every gradient is scaled by max_norm / (norm + 1e-6). The
 *     norm before clipping is what is reported (what clip_grad_norm_ returns).
 */
#ifndef MNEMO_LR_SCHEDULE_H
#define MNEMO_LR_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

typedef enum { LR_CONSTANT = 0, LR_LINEAR = 1, LR_COSINE = 2 } lr_kind;

typedef struct {
    lr_kind kind;
    double lr;          /* peak learning rate */
    int64_t warmup;     /* W: steps of linear warmup from 0 */
    int64_t total;      /* T: steps of the whole run (linear and cosine decay to 0 at T) */
} lr_schedule;

/* "constant" | "linear" | "cosine" -> 0, else -1. */
int lr_kind_parse(const char *name, lr_kind *out);
const char *lr_kind_name(lr_kind k);

/* The learning rate of step s (0-based). */
double lr_at(const lr_schedule *s, int64_t step);

/* One gradient buffer of the global norm. */
typedef struct {
    float *g;
    size_t n;
} grad_span;

/* The global 2-norm over every span (accumulated in double); when max_norm > 0 and the norm exceeds it, scales
 * every gradient by max_norm / (norm + 1e-6). Returns the norm before clipping. */
double clip_grad_norm(const grad_span *spans, size_t n_spans, double max_norm);

#endif
