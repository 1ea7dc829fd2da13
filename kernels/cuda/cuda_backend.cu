/*
 * cuda_backend.cu — the CUDA backend's op table, execution context (stream, cuBLAS handle, scratch, deferred
 * error word), device memory functions and device discovery.
 *
 * Device choice: device 0 of what CUDA_VISIBLE_DEVICES exposes (one GPU per process is the deployment model;
 * multi-GPU is future work). kern_cuda_available() probes once with cudaGetDeviceCount, which returns an error
 * (never aborts) when no driver or no device is present, so a CUDA build runs unchanged on a CPU-only machine.
 *
 * Memory: cudaMalloc/cudaFree (allocation is rare: weights at load, caches and buffers per context). Copies
 * with a context are queued on its stream; D2H copies then synchronise the stream, because the caller reads
 * the result at once (logits), and report deferred errors. Copies without a context (weight upload at model
 * load) are synchronous on the whole device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

/* ---- op table */

#define KERN_CUDA_ENTRY(name, params, doc) /* .name = */ kern_cuda_##name,
static kern_ctx *cuda_ctx_new_threads(int n_threads) {
    (void)n_threads;
    return kern_cuda_ctx_new();
}
static void *cuda_mem_alloc(size_t bytes);
static void cuda_mem_free(void *p);
static int cuda_mem_set(kern_ctx *kc, void *p, int byte, size_t bytes);
static int cuda_mem_copy(kern_ctx *kc, void *dst, const void *src, size_t bytes, kern_copy_dir dir);
static int cuda_mem_copy2d(kern_ctx *kc, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                           size_t rows, kern_copy_dir dir);
static int cuda_sync(kern_ctx *kc);
static int cuda_setting(kern_ctx *kc, const char *name, const char *value);

/* C++ has no designated initialisers in C++17: the ops go in table order (the X-macro order is the field
 * order), then the memory functions; a missing op or a misplaced function is a type error here. */
static const kern_backend cuda_backend = {
    "cuda",
    KERN_OPS(KERN_CUDA_ENTRY)
    0, /* host_memory */
    cuda_ctx_new_threads,
    kern_cuda_ctx_free,
    cuda_mem_alloc,
    cuda_mem_free,
    cuda_mem_set,
    cuda_mem_copy,
    cuda_mem_copy2d,
    cuda_sync,
    cuda_setting,
};
#undef KERN_CUDA_ENTRY

const kern_backend *kern_cuda_backend(void) { return &cuda_backend; }

/* ---- discovery */

int kern_cuda_available(char *info, size_t infolen) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        if (info && infolen)
            snprintf(info, infolen, "no CUDA device (cudaGetDeviceCount: %s)",
                     e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        cudaGetLastError(); /* clear, so later launch checks do not see it */
        return 0;
    }
    cudaDeviceProp p;
    e = cudaGetDeviceProperties(&p, 0);
    if (e != cudaSuccess) {
        if (info && infolen) snprintf(info, infolen, "CUDA device 0 unusable: %s", cudaGetErrorString(e));
        cudaGetLastError();
        return 0;
    }
    if (p.major < 8) {
        if (info && infolen)
            snprintf(info, infolen, "CUDA device 0 (%s) is sm_%d%d; this build targets sm_80 and newer", p.name,
                     p.major, p.minor);
        return 0;
    }
    if (info && infolen)
        snprintf(info, infolen, "%s, sm_%d%d, %d SMs, %.1f GiB", p.name, p.major, p.minor, p.multiProcessorCount,
                 (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return 1;
}

/* ---- context */

kern_ctx *kern_cuda_ctx_new(void) {
    if (!kern_cuda_available(NULL, 0)) return NULL;
    kern_ctx *kc = (kern_ctx *)calloc(1, sizeof *kc);
    if (!kc) return NULL;
    kc->magic = KERN_CUDA_MAGIC;
    kc->device = 0;
    cudaDeviceProp p;
    void *err_word = NULL;
    if (cudaSetDevice(kc->device) != cudaSuccess || cudaGetDeviceProperties(&p, kc->device) != cudaSuccess)
        goto fail;
    kc->sm_count = p.multiProcessorCount;
    kc->smem_optin = p.sharedMemPerBlockOptin;
    /* non-blocking: contexts of one process do not serialise on the legacy default stream */
    if (cudaStreamCreateWithFlags(&kc->stream, cudaStreamNonBlocking) != cudaSuccess) goto fail;
    if (cublasCreate(&kc->blas) != CUBLAS_STATUS_SUCCESS) goto fail;
    if (cublasSetStream(kc->blas, kc->stream) != CUBLAS_STATUS_SUCCESS) goto fail;
    /* CUBLAS_DEFAULT_MATH: fp32 GEMMs stay fp32 (no TF32); precision of 16-bit GEMMs is set per call */
    if (cublasSetMathMode(kc->blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) goto fail;
    if (cudaHostAlloc(&err_word, sizeof(int), cudaHostAllocMapped) != cudaSuccess) goto fail;
    kc->err_host = (volatile int *)err_word;
    *kc->err_host = KERN_OK;
    if (cudaHostGetDevicePointer((void **)&kc->err_dev, err_word, 0) != cudaSuccess) goto fail;
    kc->gemm = KERN_CUDA_GEMM_SPLIT; /* the kernel settings (cuda_setting) choose the rest; 0 is each default */
    return kc;
fail:
    cudaGetLastError();
    kern_cuda_ctx_free(kc);
    return NULL;
}

void kern_cuda_ctx_free(kern_ctx *kc) {
    if (!kc_ok(kc)) return;
    if (kc->stream) cudaStreamSynchronize(kc->stream);
    if (kc->blas) cublasDestroy(kc->blas);
    if (kc->stream) cudaStreamDestroy(kc->stream);
    if (kc->scratch) cudaFree(kc->scratch);
    if (kc->err_host) cudaFreeHost((void *)kc->err_host);
    kc->magic = 0;
    free(kc);
}

/* The CUDA backend's kernel settings (kern_backend.setting; the table is kernels/cpu/kernel_settings.c). */
static int cuda_setting(kern_ctx *kc, const char *name, const char *value) {
    if (!strcmp(name, "cuda.gemm")) {
        if (strcmp(value, "split") && strcmp(value, "fast")) return -1;
        kc->gemm = !strcmp(value, "fast") ? KERN_CUDA_GEMM_FAST : KERN_CUDA_GEMM_SPLIT;
        return 1;
    }
    if (!strcmp(name, "cuda.attn")) {
        int k = !strcmp(value, "simt") ? CUDA_ATTN_SIMT : !strcmp(value, "tc") ? CUDA_ATTN_TC
                : !strcmp(value, "mma") ? CUDA_ATTN_MMA : -1;
        if (k < 0) return -1;
        kc->attn = k;
        return 1;
    }
    if (!strcmp(name, "cuda.gemv_split")) {
        int v = !strcmp(value, "auto") ? 0 : atoi(value);
        if (v != 0 && v != 1 && v != 2 && v != 4) return -1;
        kc->gemv_split = v;
        return 1;
    }
    if (!strcmp(name, "cuda.dec_blocks_per_sm")) {
        int v = !strcmp(value, "auto") ? 0 : atoi(value);
        if (v < 0 || v > 64 || (v == 0 && strcmp(value, "auto"))) return -1;
        kc->dec_blocks_per_sm = v;
        return 1;
    }
    return 0;
}

int kern_cuda_set_gemm(kern_ctx *kc, kern_cuda_gemm mode) {
    if (!kc_ok(kc) || (mode != KERN_CUDA_GEMM_SPLIT && mode != KERN_CUDA_GEMM_FAST)) return KERN_ESHAPE;
    kc->gemm = mode;
    return KERN_OK;
}

void *kc_scratch(kern_ctx *kc, size_t bytes) {
    if (bytes <= kc->scratch_cap) return kc->scratch;
    size_t cap = bytes + bytes / 4;
    /* the old buffer may still be in use by queued work: wait before freeing it */
    if (kc->scratch) {
        cudaStreamSynchronize(kc->stream);
        cudaFree(kc->scratch);
        kc->scratch = NULL;
        kc->scratch_cap = 0;
    }
    if (cudaMalloc(&kc->scratch, cap) != cudaSuccess) {
        cudaGetLastError();
        kc->scratch = NULL;
        return NULL;
    }
    kc->scratch_cap = cap;
    return kc->scratch;
}

int kc_check_launch(const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return KERN_OK;
    fprintf(stderr, "mnemo cuda: %s: launch failed: %s\n", what, cudaGetErrorString(e));
    return KERN_EBACKEND;
}

/* ---- memory */

static void *cuda_mem_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_mem_free(void *p) {
    if (p) cudaFree(p);
}

/* Deferred errors: whatever a kernel stored in the error word since the last check. Call after a sync. */
static int take_deferred(kern_ctx *kc) {
    int e = *kc->err_host;
    if (e != KERN_OK) *kc->err_host = KERN_OK;
    return e;
}

static int cuda_sync(kern_ctx *kc) {
    if (!kc_ok(kc)) return KERN_ESHAPE;
    cudaError_t e = cudaStreamSynchronize(kc->stream);
    if (e != cudaSuccess) {
        fprintf(stderr, "mnemo cuda: stream failed: %s\n", cudaGetErrorString(e));
        return KERN_EBACKEND;
    }
    return take_deferred(kc);
}

static int cuda_mem_set(kern_ctx *kc, void *p, int byte, size_t bytes) {
    if (!bytes) return KERN_OK;
    cudaError_t e = kc_ok(kc) ? cudaMemsetAsync(p, byte, bytes, kc->stream) : cudaMemset(p, byte, bytes);
    if (e == cudaSuccess && !kc_ok(kc)) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        fprintf(stderr, "mnemo cuda: memset of %zu bytes failed: %s\n", bytes, cudaGetErrorString(e));
        return KERN_EBACKEND;
    }
    return KERN_OK;
}

static cudaMemcpyKind copy_kind(kern_copy_dir dir) {
    return dir == KERN_H2D ? cudaMemcpyHostToDevice : dir == KERN_D2H ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
}

static int cuda_mem_copy(kern_ctx *kc, void *dst, const void *src, size_t bytes, kern_copy_dir dir) {
    if (!bytes) return KERN_OK;
    cudaMemcpyKind kind = copy_kind(dir);
    cudaError_t e;
    if (kc_ok(kc)) {
        e = cudaMemcpyAsync(dst, src, bytes, kind, kc->stream);
        if (e == cudaSuccess && dir == KERN_D2H) e = cudaStreamSynchronize(kc->stream);
    } else {
        e = cudaMemcpy(dst, src, bytes, kind);
        if (e == cudaSuccess) e = cudaDeviceSynchronize(); /* pageable H2D may return before the DMA ends */
    }
    if (e != cudaSuccess) {
        fprintf(stderr, "mnemo cuda: copy of %zu bytes failed: %s\n", bytes, cudaGetErrorString(e));
        return KERN_EBACKEND;
    }
    return dir == KERN_D2H && kc_ok(kc) ? take_deferred(kc) : KERN_OK;
}

/* cuda_mem_copy's rules for a strided slice: one cudaMemcpy2D instead of a copy per row. */
static int cuda_mem_copy2d(kern_ctx *kc, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                           size_t rows, kern_copy_dir dir) {
    if (width > dpitch || width > spitch) return KERN_ESHAPE;
    if (!width || !rows) return KERN_OK;
    cudaError_t e;
    if (kc_ok(kc)) {
        e = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, copy_kind(dir), kc->stream);
        if (e == cudaSuccess && dir == KERN_D2H) e = cudaStreamSynchronize(kc->stream);
    } else {
        e = cudaMemcpy2D(dst, dpitch, src, spitch, width, rows, copy_kind(dir));
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
    }
    if (e != cudaSuccess) {
        fprintf(stderr, "mnemo cuda: 2-D copy of %zu rows x %zu bytes failed: %s\n", rows, width,
                cudaGetErrorString(e));
        return KERN_EBACKEND;
    }
    return dir == KERN_D2H && kc_ok(kc) ? take_deferred(kc) : KERN_OK;
}
