/*
 * gguf_kquants.c — dequantization of a GGML-typed row for the loader and tests: every block type the kernels
 * read (q8_0, q4_0, q4_1, q5_0, q5_1, q2_K .. q6_K) through kern_dequantize_row, whose arithmetic is ggml-quants.c's
 * dequantize_row_* (checked bit for bit against gguf-py's numpy port in test_kernels_cpu).
 */
#include "gguf.h"
#include "kernels.h"

static int kern_type_of(uint32_t ggml_type, kern_dtype *dt) {
    switch (ggml_type) {
    case GGML_Q8_0: *dt = KERN_Q8_0; return 0;
    case GGML_Q4_0: *dt = KERN_Q4_0; return 0;
    case GGML_Q4_1: *dt = KERN_Q4_1; return 0;
    case GGML_Q5_0: *dt = KERN_Q5_0; return 0;
    case GGML_Q5_1: *dt = KERN_Q5_1; return 0;
    case GGML_Q2_K: *dt = KERN_Q2_K; return 0;
    case GGML_Q3_K: *dt = KERN_Q3_K; return 0;
    case GGML_Q4_K: *dt = KERN_Q4_K; return 0;
    case GGML_Q5_K: *dt = KERN_Q5_K; return 0;
    case GGML_Q6_K: *dt = KERN_Q6_K; return 0;
    default: return -1;
    }
}

int gguf_dequantize_row(uint32_t ggml_type, const void *src, float *dst, int64_t n) {
    kern_dtype dt;
    if (kern_type_of(ggml_type, &dt) || n <= 0 || n % kern_dtype_block(dt)) return -1;
    kern_dequantize_row(dst, src, dt, n);
    return 0;
}
