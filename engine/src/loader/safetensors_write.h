/*
 * safetensors_write.h — writes a .safetensors file (the format safetensors_parse reads; Hugging Face's layout:
 * u64 LE header length, a JSON header padded with spaces to a multiple of 8 bytes, then the tensors' bytes back to
 * back in the order given). Used for LoRA adapters (peft's adapter_model.safetensors) and merged checkpoints.
 */
#ifndef MNEMO_SAFETENSORS_WRITE_H
#define MNEMO_SAFETENSORS_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "tensor_index.h"

typedef struct {
    const char *name;     /* unique within the file, not "__metadata__" */
    tensor_dtype dtype;
    int32_t ndim;         /* 0..TENSOR_MAX_DIMS; 0 = a scalar */
    const int64_t *shape; /* ndim sizes, each >= 0 */
    const void *data;     /* numel * element size bytes, row-major (may be NULL when numel is 0) */
} st_tensor;

/* Writes n tensors and n_meta "__metadata__" string pairs (meta[2i] -> meta[2i+1]; none when n_meta is 0) to
 * path: first to path.tmp, flushed to disk, then renamed, so a crash never leaves half a file under path.
 * 0, or -1 with a message in err naming path and the problem (bad name or shape, duplicate name, I/O error). */
int safetensors_write(const char *path, const st_tensor *t, size_t n, const char *const *meta, size_t n_meta,
                      char *err, size_t errlen);

#endif
