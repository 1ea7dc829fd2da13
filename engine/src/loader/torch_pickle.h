/*
 * torch_pickle.h — turns the data.pkl of a torch.save archive into tensor entries, with the pickle
 * interpreter restricted to what a state dict needs (OrderedDict, _rebuild_tensor_v2, _rebuild_parameter,
 * typed storages). Storage bytes are found through a callback, so this file knows nothing about zip.
 */
#ifndef MNEMO_TORCH_PICKLE_H
#define MNEMO_TORCH_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "tensor_index.h"

/* Bytes of storage `key` (the data/<key> entry). 0, or -1 with msg. */
typedef int (*torch_storage_fn)(void *ctx, const char *key, size_t keylen, const uint8_t **data, uint64_t *size,
                                char *msg, size_t msglen);

/* Appends the tensors of the state dict in pkl to out (nested dicts flattened with '.'), or of a list of tensors
 * (named "0", "1", ... by position: UIO-LLMs' checkpoint), their file set to file. 0, or -1 with msg (no file prefix) and nothing appended. */
int torch_unpickle(const uint8_t *pkl, size_t len, torch_storage_fn storage, void *ctx, const char *file,
                   tensor_list *out, char *msg, size_t msglen);

#endif
