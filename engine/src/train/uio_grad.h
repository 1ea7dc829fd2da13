/*
 * uio_grad.h — the forward and backward passes UIO training is made of (uio_grad.c), for the TBPTT driver
 * (uio_tbptt.c). Internal to engine/src/train. The workspace keeps every compressed segment's memory: per layer
 * the leaves h [segments * M, hidden], their keys (rotated at their positions) and values, and the gradient each
 * leaf has accumulated. Everything lives in the model backend's memory; a document is loaded once (its ids and
 * targets uploaded in one copy), the passes below address its segments by index, and the segment losses come back
 * in one read-back at the end.
 */
#ifndef MNEMO_UIO_GRAD_H
#define MNEMO_UIO_GRAD_H

#include "uio_train.h"

/* The document the passes below read: ids[n] and tgt[n] (host memory; tgt[i] the target of row i, -1: not
 * counted), segment s being rows s*C .. Queued on the workspace's context (device: one upload). 0, or -1. */
int uio_grad_load_document(uio_train_ws *ws, const int32_t *ids, const int32_t *tgt, int64_t n, char *err,
                           size_t errlen);

/* Segment seg of the loaded document (C ids) through the encoder (forward only): its leaves h and, through the
 * transfer head, its memory keys and values go to memory rows seg*M .. seg*M + M - 1; its leaf gradient is zeroed.
 * 0, or -1. */
int uio_grad_compress(uio_train_ws *ws, const mnemo_model *m, uio_train_weights *w, int32_t seg, char *err,
                      size_t errlen);

/* The decoder over segment seg's first n ids (targets from the loaded document) after the memory of segments
 * 0..seg-1: its mean cross-entropy goes to loss slot seg (uio_grad_losses); with dloss != 0 its gradient times
 * dloss is added to the transfer head's LoRA gradients and, times factor[s] (host), to the leaf gradient of each
 * segment s with factor[s] != 0. 0, or -1. */
int uio_grad_decoder(uio_train_ws *ws, const mnemo_model *m, uio_train_weights *w, int32_t seg, int32_t n,
                     float dloss, const float *factor, char *err, size_t errlen);

/* Backpropagates segment seg's encoder graph (recomputed from the loaded document's ids) with its leaf's
 * accumulated gradient into the encoder LoRA and the <mem> token's gradients. 0, or -1. */
int uio_grad_encoder_backward(uio_train_ws *ws, const mnemo_model *m, uio_train_weights *w, int32_t seg, char *err,
                              size_t errlen);

/* Loss slots 0..n-1 into out (host), after everything queued has run: the one read-back of a document (device:
 * it waits for the passes and reports a deferred error, such as an id out of range). 0, or -1. */
int uio_grad_losses(uio_train_ws *ws, float *out, int32_t n, char *err, size_t errlen);
/* After a failed pass: waits for whatever is still queued, so nothing outlives the document. */
void uio_grad_abandon(uio_train_ws *ws);

/* Segments the workspace holds memory for. */
int32_t uio_grad_max_segments(const uio_train_ws *ws);

#endif
