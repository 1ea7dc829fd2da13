/*
 * gguf.h — a GGUF file (v2/v3, the format of llama.cpp/ggml) parsed from its bytes: header, metadata key/values of
 * every type, tensor infos, alignment. The parser treats the bytes as untrusted: every count, length, offset and
 * size is checked against the image before use (tests/fuzz/fuzz_gguf.c), and nothing is copied except names and
 * keys: values and tensor data are pointers into the image.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv; n_kv x (string key, u32 type, value);
 * n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset); padding to general.alignment
 * (default 32); the data area, each tensor at its offset (a multiple of the alignment). string = u64 len + bytes.
 */
#ifndef MNEMO_GGUF_H
#define MNEMO_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7,
    GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12, GGUF_TYPE_COUNT
};

/* ggml tensor types mnemo knows the size of (others are refused by the parser). */
enum {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7, GGML_Q8_0 = 8,
    GGML_Q8_1 = 9, GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14, GGML_Q8_K = 15,
    GGML_I8 = 24, GGML_I16 = 25, GGML_I32 = 26, GGML_I64 = 27, GGML_F64 = 28, GGML_BF16 = 30, GGML_TYPE_LIMIT = 40
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct {
    char *key;                 /* owned, NUL-terminated */
    uint32_t type;             /* GGUF_* */
    uint32_t arr_type;         /* element type when type == GGUF_ARRAY */
    uint64_t n;                /* array length (1 for scalars) */
    const uint8_t *p;          /* the value's bytes in the image (an array: its first element) */
    uint64_t nbytes;           /* bytes the value spans from p */
} gguf_kv;

typedef struct {
    char *name;                /* owned */
    uint32_t type;             /* GGML_* */
    int32_t ndim;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (innermost) dimension */
    uint64_t offset;           /* from the start of the data area */
    const uint8_t *data;       /* into the image */
    uint64_t nbytes;
} gguf_tensor;

typedef struct {
    uint32_t version;
    uint64_t alignment;
    gguf_kv *kv;
    size_t n_kv;
    gguf_tensor *tensors;
    size_t n_tensors;
    uint64_t data_offset;      /* start of the data area in the file */
} gguf_file;

/* Parse a whole image. file names it in messages. 0 on success; -1 with a message naming the file and the
 * problem (bad magic, version not 2 or 3, truncated, a length or count past the end, unknown value or tensor type,
 * duplicate key or tensor name, a zero dim, dims that overflow or do not hold whole blocks, offsets misaligned or
 * past the data). Every dim being at least 1, a tensor's element count is bounded by its bytes, so by the file size.
 * On failure *g is left empty (gguf_free is still allowed). */
int gguf_parse(const uint8_t *buf, uint64_t len, const char *file, gguf_file *g, char *err, size_t errlen);
void gguf_free(gguf_file *g);

/* Bytes of n elements of a ggml type (0 when unknown or n is not whole blocks); its name ("q8_0", ...). */
uint64_t gguf_type_bytes(uint32_t ggml_type, uint64_t n);
const char *gguf_type_name(uint32_t ggml_type);

/* Lookups. NULL / false when the key is absent or of an incompatible type (an integer out of range counts as
 * incompatible). Integers of any width and sign convert when the value fits. */
const gguf_kv *gguf_find(const gguf_file *g, const char *key);
bool gguf_get_i64(const gguf_file *g, const char *key, int64_t *out);
bool gguf_get_f64(const gguf_file *g, const char *key, double *out);  /* float or integer values */
bool gguf_get_bool(const gguf_file *g, const char *key, bool *out);
/* A string value: pointer into the image (not NUL-terminated) and its length. */
bool gguf_get_str(const gguf_file *g, const char *key, const char **s, uint64_t *len);
/* Element i of an integer array as int64 (false when out of range or not integers). */
bool gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out);
/* Walks a string array: *pos starts at kv->p; each call yields the next string and advances. Bounds were checked
 * by the parser. */
void gguf_arr_next_str(const uint8_t **pos, const char **s, uint64_t *len);
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name);

/* n weights of a block-quantized tensor (q8_0, q4_0, q4_1, q5_0, q5_1: n a multiple of 32; q2_K .. q6_K: of 256) to
 * fp32 (gguf_kquants.c); -1 for other types or sizes. */
int gguf_dequantize_row(uint32_t ggml_type, const void *src, float *dst, int64_t n);

#endif
