/*
 * widen.h — stored rows (f32 / f16 / bf16) to fp32, shared by the store and the IVF-grow index (memstore-internal;
 * the kernels' vectorised widen is private to kernels/cpu).
 */
#ifndef MNEMO_MEMSTORE_WIDEN_H
#define MNEMO_MEMSTORE_WIDEN_H

#include <stdint.h>
#include <string.h>

#include "kernels.h" /* bf16/f16 conversions */
#include "memstore.h"

static inline void mem_widen(float *dst, const void *src, mem_dtype dt, size_t n) {
    if (n == 0) return; /* src may be NULL (nothing stored yet) */
    if (dt == MEM_DTYPE_F32) memcpy(dst, src, n * 4);
    else if (dt == MEM_DTYPE_BF16) for (size_t i = 0; i < n; i++) dst[i] = kern_bf16_to_f32(((const uint16_t *)src)[i]);
    else for (size_t i = 0; i < n; i++) dst[i] = kern_f16_to_f32(((const uint16_t *)src)[i]);
}

#endif
