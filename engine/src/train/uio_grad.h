/*
 * uio_grad.h — the forward and backward passes UIO training is made of (uio_grad.c), for the TBPTT driver
 * (uio_tbptt.c). Internal to engine/src/train. The workspace keeps every compressed segment's memory: per layer
 * the leaves h [segments * M, hidden], their keys (rotated at their positions) and values, and the gradient each
 * leaf has accumulated.
 */
#ifndef MNEMO_UIO_GRAD_H
#define MNEMO_UIO_GRAD_H

#include "uio_train.h"

/* Segment seg's ids[C] through the encoder (forward only): its leaves h and, through the transfer head, its memory
 * keys and values go to memory rows seg*M .. seg*M + M - 1; its leaf gradient is zeroed. 0, or -1. */
int uio_grad_compress(uio_train_ws *ws, const mnemo_model *m, uio_train_weights *w, const int32_t *ids, int32_t seg,
                      char *err, size_t errlen);

/* The decoder over n ids (targets tgt[n], -1: not counted) after the memory of segments 0..n_seg-1: *loss = mean
 * cross-entropy; with dloss != 0 its gradient times dloss is added to the transfer head's LoRA gradients and,
 * times factor[s], to the leaf gradient of each segment s with factor[s] != 0. 0, or -1. */
int uio_grad_decoder(uio_train_ws *ws, const mnemo_model *m, uio_train_weights *w, const int32_t *ids,
                     const int32_t *tgt, int32_t n, int32_t n_seg, float dloss, const float *factor, float *loss,
                     char *err, size_t errlen);

/* Backpropagates segment seg's encoder graph (recomputed from ids[C]) with its leaf's accumulated gradient into
 * the encoder LoRA and the <mem> token's gradients. 0, or -1. */
int uio_grad_encoder_backward(uio_train_ws *ws, const mnemo_model *m, uio_train_weights *w, const int32_t *ids,
                              int32_t seg, char *err, size_t errlen);

/* Segments the workspace holds memory for. */
int32_t uio_grad_max_segments(const uio_train_ws *ws);

#endif
