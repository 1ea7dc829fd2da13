/*
 * tensor_index.h — the tensors of a checkpoint, whatever file format they came from.
 *
 * The format parsers (safetensors.c, torch_zip.c) work on a byte image of one file and append entries whose
 * data points INTO that image, so a memory-mapped file is never copied. They never read outside [buf, buf+len)
 * and they are the libFuzzer targets. weight_store opens a checkpoint directory (single file or sharded, with
 * an index JSON), maps the files and answers lookups by name.
 */
#ifndef MNEMO_TENSOR_INDEX_H
#define MNEMO_TENSOR_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

#define TENSOR_MAX_DIMS 8

/* Every dtype a checkpoint file can hold; only F32/F16/BF16 feed the model. */
typedef enum {
    TENSOR_F32, TENSOR_F16, TENSOR_BF16, TENSOR_F64, TENSOR_I64, TENSOR_I32, TENSOR_I16, TENSOR_I8, TENSOR_U8,
    TENSOR_BOOL, TENSOR_F8_E4M3, TENSOR_F8_E5M2,
    TENSOR_Q8_0, TENSOR_Q4_0, /* GGUF only: blocks of 32 (tensor_dtype_size 0; nbytes from the GGUF parser) */
    TENSOR_Q4_K, TENSOR_Q6_K, /* GGUF only: blocks of 256, likewise */
    TENSOR_Q4_1, TENSOR_Q5_0, TENSOR_Q5_1, /* GGUF only: blocks of 32 */
    TENSOR_Q2_K, TENSOR_Q3_K, TENSOR_Q5_K, /* GGUF only: blocks of 256 */
    TENSOR_DTYPE_COUNT
} tensor_dtype;

typedef struct {
    char *name;                      /* owned, NUL-terminated */
    tensor_dtype dtype;
    int32_t ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    const void *data;                /* into the file image; contiguous row-major */
    uint64_t nbytes;                 /* = numel * element size, checked by the parser */
    const char *file;                /* file it came from (for messages); owned by the list/store */
    void *owned;                     /* a heap copy data points into (GGUF Q/K rows reordered), freed with the
                                        list; NULL when data is in the file image */
} tensor_entry;

typedef struct {
    tensor_entry *items;
    size_t count, cap;
} tensor_list;

size_t tensor_dtype_size(tensor_dtype dt);
const char *tensor_dtype_name(tensor_dtype dt);      /* "F32", "BF16", ... */
/* 0 and *out set when dt is one of the weight dtypes kernels accept, else -1. */
int tensor_dtype_to_kern(tensor_dtype dt, kern_dtype *out);

void tensor_list_free(tensor_list *list);            /* frees names and the array, not the image */

/* Parse a whole .safetensors file image. file names the file in error messages. 0 on success; -1 with a
 * message in err (naming the file and the problem) on any malformation: header length past the end, JSON
 * that is not an object of {dtype, shape, data_offsets}, unknown dtype, offsets outside the data area or not
 * matching shape x dtype size, overflowing shapes, empty shapes whose other dims claim more elements than the
 * file has bytes. */
int safetensors_parse(const uint8_t *buf, uint64_t len, const char *file, tensor_list *out, char *err,
                      size_t errlen);

/* Parse a whole PyTorch torch.save file image (zip holding <archive>/data.pkl and <archive>/data/<key>),
 * including ZIP64. The pickle must be a (possibly nested under OrderedDict) state dict of tensors built with
 * torch._utils._rebuild_tensor_v2 over typed storages (nn.Parameters too), or a list of such tensors (entries named
 * "0", "1", ... by position); other content is an error, never executed. Tensors must be contiguous; they may start
 * at an offset into a storage other tensors share. Same error contract as safetensors_parse. */
int torch_zip_parse(const uint8_t *buf, uint64_t len, const char *file, tensor_list *out, char *err,
                    size_t errlen);

/* ---- a checkpoint directory */
typedef struct weight_store weight_store;

/* Finds the weights in dir: model.safetensors, model.safetensors.index.json (+ shards), pytorch_model.bin,
 * pytorch_model.bin.index.json (+ shards), in that order of preference. Shard names from an index must be
 * plain file names inside dir. Every file is mmapped read-only. 0 on success, -1 with a message. */
int weight_store_open(const char *dir, weight_store **out, char *err, size_t errlen);
/* The same for a peft adapter directory: adapter_model.safetensors or adapter_model.bin. */
int weight_store_open_adapter(const char *dir, weight_store **out, char *err, size_t errlen);
void weight_store_close(weight_store *ws);                         /* NULL is a no-op */
const tensor_entry *weight_store_find(const weight_store *ws, const char *name); /* NULL if absent */
size_t weight_store_count(const weight_store *ws);
const tensor_entry *weight_store_at(const weight_store *ws, size_t i);
const char *weight_store_format(const weight_store *ws);          /* "safetensors", "pytorch" or "gguf" */

/* A GGUF file (llama architecture) as a store: tensors under their Hugging Face names, shapes [out, in], Q/K rows
 * put back in Hugging Face's order (gguf_llama.c). 0 on success, -1 with a message. */
int weight_store_open_gguf(const char *path, weight_store **out, char *err, size_t errlen);

#endif
