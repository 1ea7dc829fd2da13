/*
 * cuda_stub.c — the CUDA entry points of kernels.h for a libengine built without CUDA (no nvcc found, or
 * -DMNEMO_CUDA=OFF). They report "not built" instead of leaving callers to #ifdef, so the engine and the tests
 * compile the same way with or without the CUDA backend.
 */
#include <stdio.h>

#include "kernels.h"

const kern_backend *kern_cuda_backend(void) { return NULL; }

int kern_cuda_available(char *info, size_t infolen) {
    if (info && infolen)
        snprintf(info, infolen, "this build of libengine has no CUDA backend (configured without nvcc or with "
                                "-DMNEMO_CUDA=OFF)");
    return 0;
}

kern_ctx *kern_cuda_ctx_new(void) { return NULL; }
void kern_cuda_ctx_free(kern_ctx *kc) { (void)kc; }
int kern_cuda_set_gemm(kern_ctx *kc, kern_cuda_gemm mode) {
    (void)kc;
    (void)mode;
    return KERN_ESHAPE;
}
