/*
 * gguf_write.h — writes a GGUF v3 file: metadata key/values are serialized as they are added; tensors are declared
 * up front (name, ggml type, dims) and their bytes produced one at a time by a callback while the file is written,
 * so a multi-GB model never sits in memory whole. Data is aligned to 32 bytes (general.alignment's default).
 */
#ifndef MNEMO_GGUF_WRITE_H
#define MNEMO_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void); /* NULL when out of memory */
void gguf_writer_free(gguf_writer *w);

/* Metadata. Keys must be distinct (not checked here: the reader refuses duplicates). Out of memory is remembered
 * and reported by gguf_writer_write. */
void gguf_w_str(gguf_writer *w, const char *key, const char *value);
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t value);
void gguf_w_i32(gguf_writer *w, const char *key, int32_t value);
void gguf_w_f32(gguf_writer *w, const char *key, float value);
void gguf_w_bool(gguf_writer *w, const char *key, bool value);
void gguf_w_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
void gguf_w_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n);
void gguf_w_arr_u8(gguf_writer *w, const char *key, const uint8_t *v, uint64_t n);
/* n strings; lens[i] bytes each (lens NULL: NUL-terminated). */
void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *s, const size_t *lens, uint64_t n);
/* A key/value as gguf_parse read it from another file, copied byte for byte (any type, arrays of strings too). */
void gguf_w_copy(gguf_writer *w, const gguf_kv *kv);

/* Declares a tensor: ne[0] innermost (GGUF order), nbytes its size in type. Tensors are written in this order. */
void gguf_w_tensor(gguf_writer *w, const char *name, uint32_t ggml_type, int32_t ndim, const int64_t *ne,
                   uint64_t nbytes);

/* Produces tensor i's nbytes into dst; 0, or -1 with a message in err. */
typedef int (*gguf_fill_fn)(void *user, size_t i, void *dst, char *err, size_t errlen);

/* Writes everything to path (through path.tmp, renamed when complete). 0, or -1 with a message. */
int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *user, char *err, size_t errlen);

#endif
