/*
 * tensor_list.c — checkpoint dtypes (size, name, kernel dtype) and the growable tensor_list the parsers fill.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader_util.h"

static const struct {
    const char *name;
    size_t size;
} dtype_info[TENSOR_DTYPE_COUNT] = {
    [TENSOR_F32] = {"F32", 4},      [TENSOR_F16] = {"F16", 2},   [TENSOR_BF16] = {"BF16", 2},
    [TENSOR_F64] = {"F64", 8},      [TENSOR_I64] = {"I64", 8},   [TENSOR_I32] = {"I32", 4},
    [TENSOR_I16] = {"I16", 2},      [TENSOR_I8] = {"I8", 1},     [TENSOR_U8] = {"U8", 1},
    [TENSOR_BOOL] = {"BOOL", 1},    [TENSOR_F8_E4M3] = {"F8_E4M3", 1}, [TENSOR_F8_E5M2] = {"F8_E5M2", 1},
    [TENSOR_Q8_0] = {"Q8_0", 0},    [TENSOR_Q4_0] = {"Q4_0", 0},   [TENSOR_Q4_K] = {"Q4_K", 0},
    [TENSOR_Q6_K] = {"Q6_K", 0},    [TENSOR_Q4_1] = {"Q4_1", 0},   [TENSOR_Q5_0] = {"Q5_0", 0},
    [TENSOR_Q5_1] = {"Q5_1", 0},    [TENSOR_Q2_K] = {"Q2_K", 0},   [TENSOR_Q3_K] = {"Q3_K", 0},
    [TENSOR_Q5_K] = {"Q5_K", 0},
};

size_t tensor_dtype_size(tensor_dtype dt) {
    return (unsigned)dt < TENSOR_DTYPE_COUNT ? dtype_info[dt].size : 0;
}

const char *tensor_dtype_name(tensor_dtype dt) {
    return (unsigned)dt < TENSOR_DTYPE_COUNT ? dtype_info[dt].name : "?";
}

int tensor_dtype_to_kern(tensor_dtype dt, kern_dtype *out) {
    switch (dt) {
    case TENSOR_F32: *out = KERN_F32; return 0;
    case TENSOR_F16: *out = KERN_F16; return 0;
    case TENSOR_BF16: *out = KERN_BF16; return 0;
    case TENSOR_Q8_0: *out = KERN_Q8_0; return 0;
    case TENSOR_Q4_0: *out = KERN_Q4_0; return 0;
    case TENSOR_Q4_K: *out = KERN_Q4_K; return 0;
    case TENSOR_Q6_K: *out = KERN_Q6_K; return 0;
    case TENSOR_Q4_1: *out = KERN_Q4_1; return 0;
    case TENSOR_Q5_0: *out = KERN_Q5_0; return 0;
    case TENSOR_Q5_1: *out = KERN_Q5_1; return 0;
    case TENSOR_Q2_K: *out = KERN_Q2_K; return 0;
    case TENSOR_Q3_K: *out = KERN_Q3_K; return 0;
    case TENSOR_Q5_K: *out = KERN_Q5_K; return 0;
    default: return -1;
    }
}

void tensor_list_free(tensor_list *list) {
    if (!list) return;
    for (size_t i = 0; i < list->count; i++) {
        free(list->items[i].name);
        free(list->items[i].owned);
    }
    free(list->items);
    list->items = NULL;
    list->count = list->cap = 0;
}

bool ld_tensor_nbytes(tensor_dtype dt, int32_t ndim, const int64_t *shape, uint64_t *out) {
    uint64_t n = tensor_dtype_size(dt);
    if (n == 0 || ndim < 0 || ndim > TENSOR_MAX_DIMS) return false;
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] < 0 || !ld_mul_u64(n, (uint64_t)shape[i], &n)) return false;
    }
    *out = n;
    return true;
}

bool ld_shape_fits(int32_t ndim, const int64_t *shape, uint64_t limit) {
    uint64_t n = 1;
    for (int32_t i = 0; i < ndim; i++)
        if (shape[i] < 0 || (shape[i] && !ld_mul_u64(n, (uint64_t)shape[i], &n))) return false;
    return n <= limit;
}

void ld_format_shape(char *buf, size_t n, int32_t ndim, const int64_t *shape) {
    size_t p = 0;
    if (n < 8) { if (n) buf[0] = '\0'; return; }
    buf[p++] = '[';
    for (int32_t i = 0; i < ndim && i < TENSOR_MAX_DIMS; i++) {
        char d[32];
        int k = snprintf(d, sizeof d, "%s%" PRId64, i ? ", " : "", shape[i]);
        if (p + (size_t)k + 5 >= n) { memcpy(buf + p, "...", 3); p += 3; break; }
        memcpy(buf + p, d, (size_t)k);
        p += (size_t)k;
    }
    buf[p++] = ']';
    buf[p] = '\0';
}

int ld_list_push(tensor_list *list, const char *name, size_t namelen, tensor_dtype dt, int32_t ndim,
                 const int64_t *shape, const void *data, uint64_t nbytes, const char *file) {
    if (ndim < 0 || ndim > TENSOR_MAX_DIMS || namelen == SIZE_MAX) return -1;
    if (list->count == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 64;
        if (cap > SIZE_MAX / sizeof *list->items) return -1;
        tensor_entry *p = realloc(list->items, cap * sizeof *p);
        if (!p) return -1;
        list->items = p;
        list->cap = cap;
    }
    char *nm = malloc(namelen + 1);
    if (!nm) return -1;
    memcpy(nm, name, namelen);
    nm[namelen] = '\0';
    tensor_entry *e = &list->items[list->count++];
    memset(e, 0, sizeof *e);
    e->name = nm;
    e->dtype = dt;
    e->ndim = ndim;
    for (int32_t i = 0; i < ndim; i++) e->shape[i] = shape[i];
    e->data = data;
    e->nbytes = nbytes;
    e->file = file;
    return 0;
}

void ld_list_truncate(tensor_list *list, size_t count) {
    while (list->count > count) {
        list->count--;
        free(list->items[list->count].name);
        free(list->items[list->count].owned);
    }
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const tensor_entry *)a)->name, ((const tensor_entry *)b)->name);
}

long ld_list_sort_find_dup(tensor_list *list) {
    if (list->count < 2) return -1;
    qsort(list->items, list->count, sizeof *list->items, cmp_entry);
    for (size_t i = 1; i < list->count; i++)
        if (strcmp(list->items[i - 1].name, list->items[i].name) == 0) return (long)(i - 1);
    return -1;
}
