/*
 * loader_util.h — helpers shared by the checkpoint parsers: overflow-checked arithmetic, little-endian reads
 * and appending to a tensor_list. Internal to engine/src/loader.
 */
#ifndef MNEMO_LOADER_UTIL_H
#define MNEMO_LOADER_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor_index.h"

/* a*b and a+b on uint64_t; false on overflow (*out untouched). */
static inline bool ld_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (a != 0 && b > UINT64_MAX / a) return false;
    *out = a * b;
    return true;
}
static inline bool ld_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (b > UINT64_MAX - a) return false;
    *out = a + b;
    return true;
}

static inline uint16_t ld_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t ld_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t ld_le64(const uint8_t *p) { return (uint64_t)ld_le32(p) | ((uint64_t)ld_le32(p + 4) << 32); }

/* Byte count of a tensor: product of dims times the element size. false if a dim is negative or it overflows. */
bool ld_tensor_nbytes(tensor_dtype dt, int32_t ndim, const int64_t *shape, uint64_t *out);

/* An empty tensor (a zero dim) has 0 bytes whatever its other dims claim, and code that walks its rows would loop
 * over them: true when the product of the non-zero dims is at most limit (the file's size in bytes). */
bool ld_shape_fits(int32_t ndim, const int64_t *shape, uint64_t limit);

/* Writes "[4, 4]" into buf (truncated with "..." if too long). */
void ld_format_shape(char *buf, size_t n, int32_t ndim, const int64_t *shape);

/* Appends an entry, copying name (namelen bytes, no NUL needed). 0, or -1 when out of memory. */
int ld_list_push(tensor_list *list, const char *name, size_t namelen, tensor_dtype dt, int32_t ndim,
                 const int64_t *shape, const void *data, uint64_t nbytes, const char *file);

/* Frees the entries from index count on (rolls back a failed parse). */
void ld_list_truncate(tensor_list *list, size_t count);

/* Sorts the list by name; returns the index of the first of two equal names, or -1 when all are distinct. */
long ld_list_sort_find_dup(tensor_list *list);

#endif
