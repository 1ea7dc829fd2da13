/*
 * train_mem.h — where a training run's fp32 buffers live: host memory, or a device backend's (CUDA). Everything a
 * run keeps between steps - adapter tensors, gradients, fp32 master copies, optimizer moments - goes through these,
 * so the step itself runs on the device and the host touches the values only to start (upload) and to write files
 * (download). be NULL means host memory (calloc/free, values used in place).
 */
#ifndef MNEMO_TRAIN_MEM_H
#define MNEMO_TRAIN_MEM_H

#include <stddef.h>

#include "kernels.h"

/* The backend whose memory a model on be uses for training buffers: NULL for host-memory backends (the CPU). */
static inline const kern_backend *train_mem_backend(const kern_backend *be) { return be && !be->host_memory ? be : NULL; }

/* n zeroed floats; NULL when out of memory. */
float *train_mem_zeros(const kern_backend *be, size_t n);
void train_mem_free(const kern_backend *be, float *p);
/* dst (n floats in be's memory) = src (host). 0, or -1. */
int train_mem_upload(const kern_backend *be, float *dst, const float *src, size_t n);
/* The n floats at p readable on the host: p itself (host memory), or a downloaded copy (malloc). NULL when out of
 * memory or the copy failed. Release with train_mem_host_release(be, copy). */
float *train_mem_host_view(const kern_backend *be, const float *p, size_t n);
void train_mem_host_release(const kern_backend *be, float *view);

#endif
