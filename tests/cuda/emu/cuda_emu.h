/*
 * cuda_emu.h — a CPU emulator for the subset of CUDA that kernels/cuda uses, so the CUDA backend's own source
 * runs (slowly) on a machine without a GPU: configure with -DMNEMO_CUDA_EMU=ON (a separate build directory; it
 * replaces the CUDA runtime, so it never ships). It is a test tool, not a simulator of performance.
 *
 * What it models, and what it catches:
 *   - Every thread of a block is a fiber (ucontext); blocks run one after another. __syncthreads and warp
 *     operations (__shfl_*_sync, __syncwarp) are real barriers; threads between two barriers run in a fresh
 *     pseudo-random order each time (MNEMO_EMU_SEED), so a missing barrier shows up as a wrong result. A block
 *     whose threads wait at different barriers (divergent __syncthreads, a shuffle some lanes skip) is reported
 *     as a launch failure instead of hanging.
 *   - __shared__ variables are function statics (one block at a time, shared by its fibers); dynamic shared
 *     memory is poisoned with NaN bytes before each block, guarded after its end, and limited to 48 KB unless
 *     cudaFuncSetAttribute raised the kernel's limit (up to an A100-like 163 KB opt-in).
 *   - Device memory (cudaMalloc) is mmap'ed with a guard page after each buffer and is PROT_NONE while host code
 *     runs (MNEMO_EMU_PROTECT=0 turns this off): host code that dereferences a device pointer faults at once,
 *     as it would on a GPU. Copies check that each side is in the memory its direction says, and kernel
 *     launches and cuBLAS calls check that every pointer argument is device memory (or mapped pinned memory).
 *   - Launch configuration limits (threads per block, grid sizes) as on sm_80/sm_90.
 * What it does not model: timing, warp-synchronous execution without explicit sync, memory consistency
 * between blocks of one launch, atomics (fibers are cooperative, so plain read-modify-write is atomic here:
 * atomicAdd is one), __ballot_sync built from shuffles.
 * cuBLAS GemmEx/Sgemm are plain loops with fp32 accumulation over exact 16-bit products, as tensor cores do.
 */
#ifndef MNEMO_CUDA_EMU_H
#define MNEMO_CUDA_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <functional>
#include <type_traits>

/* ---- language */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) alignas(n)

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
    unsigned x, y, z;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return float2{x, y}; }

using std::max;
using std::min;

/* ---- runtime types */
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorNoDevice = 100,
    cudaErrorLaunchFailure = 719,
} cudaError_t;
typedef struct mnemu_stream *cudaStream_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    int multiProcessorCount;
    int major, minor;
    int l2CacheSize;
};
#define cudaStreamNonBlocking 0x01
#define cudaHostAllocMapped 0x02

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **p, size_t bytes);
template <class T> cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaHostGetDevicePointer(void **dev, void *host, unsigned flags);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemset(void *p, int v, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t mnemu_func_set_attr(const void *fn, cudaFuncAttribute a, int v);
template <class F> cudaError_t cudaFuncSetAttribute(F *fn, cudaFuncAttribute a, int v) {
    return mnemu_func_set_attr((const void *)fn, a, v);
}

/* ---- cuBLAS subset */
typedef struct mnemu_blas *cublasHandle_t;
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_PEDANTIC_MATH = 2 } cublasMath_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t comp,
                            cublasGemmAlgo_t algo);

/* ---- execution model */
namespace mnemu {
struct fiber;
extern const uint3 *g_tid;
extern uint3 g_block_idx;
extern dim3 g_block_dim, g_grid_dim;
void syncthreads();
void syncwarp();
unsigned lane_id();
void shuffle(const void *mine, void *out, size_t size, int src_lane);
unsigned char *dyn_smem();
/* 1 when p is inside a device allocation or mapped pinned memory (kernels may touch it). */
bool device_accessible(const void *p);
void bad_kernel_pointer(const char *what, int index, const void *p);
void launch(dim3 grid, dim3 block, size_t smem, const void *fn, const std::function<void()> &body);

template <class A> void check_arg(const A &a, int i, bool &ok) {
    if constexpr (std::is_pointer<A>::value) {
        if (a && !device_accessible((const void *)a)) {
            bad_kernel_pointer("kernel launch", i, (const void *)a);
            ok = false;
        }
    }
}

template <class F> struct bound_launch {
    F *fn;
    dim3 grid, block;
    size_t smem;
    template <class... A> void operator()(A... a) const {
        bool ok = true;
        int i = 0;
        (check_arg(a, i++, ok), ...);
        if (!ok) return;
        F *f = fn;
        launch(grid, block, smem, (const void *)fn, [=]() { f(a...); });
    }
};
template <class F> bound_launch<F> make_launch(F *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t) {
    return bound_launch<F>{fn, grid, block, smem};
}
} // namespace mnemu

#define threadIdx (*::mnemu::g_tid)
#define blockIdx (::mnemu::g_block_idx)
#define blockDim (::mnemu::g_block_dim)
#define gridDim (::mnemu::g_grid_dim)
#define warpSize 32

#define MN_LAUNCH(kernel, grid, block, smem, stream) ::mnemu::make_launch(kernel, (grid), (block), (smem), (stream))
#define MN_DYN_SMEM(T, name) T *name = reinterpret_cast<T *>(::mnemu::dyn_smem())

static inline void __syncthreads() { mnemu::syncthreads(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    (void)mask;
    mnemu::syncwarp();
}

template <class T> T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    (void)mask;
    int lane = (int)mnemu::lane_id(), base = lane & ~(width - 1);
    T out;
    mnemu::shuffle(&v, &out, sizeof(T), base + (src & (width - 1)));
    return out;
}
template <class T> T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    (void)mask;
    int lane = (int)mnemu::lane_id(), base = lane & ~(width - 1), s = lane ^ lane_mask;
    if ((s & ~(width - 1)) != base) s = lane;
    T out;
    mnemu::shuffle(&v, &out, sizeof(T), s);
    return out;
}
template <class T> T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    (void)mask;
    int lane = (int)mnemu::lane_id(), base = lane & ~(width - 1), s = lane + (int)delta;
    if ((s & ~(width - 1)) != base) s = lane;
    T out;
    mnemu::shuffle(&v, &out, sizeof(T), s);
    return out;
}

/* A warp vote from shuffles (a barrier, as __ballot_sync is): bit l is lane l's predicate. */
static inline unsigned __ballot_sync(unsigned mask, int pred) {
    unsigned r = 0;
    for (int l = 0; l < 32; l++) r |= (unsigned)(__shfl_sync(mask, pred ? 1 : 0, l) & 1) << l;
    return r;
}
/* Atomics: fibers are cooperative, so a plain read-modify-write is atomic. */
template <class T> static inline T atomicAdd(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}
static inline int __popc(unsigned x) { return __builtin_popcount(x); }

/* ---- device intrinsics */
static inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline int __float_as_int(float f) {
    int i;
    memcpy(&i, &f, 4);
    return i;
}
static inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
#define __expf expf /* glibc already declares a __expf */
static inline float __fdividef(float a, float b) { return a / b; }
template <class T> static inline T __ldg(const T *p) { return *p; }


/* ---- mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, PTX's fragment layout (g = lane / 4, t = lane % 4):
 *   a (A 16x16): {A[g][2t,2t+1], A[g+8][2t,2t+1], A[g][2t+8,2t+9], A[g+8][2t+8,2t+9]}
 *   b (B 16x8):  {B[2t,2t+1][g], B[2t+8,2t+9][g]}
 *   c, d (16x8): {C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]}
 * a bf16x2 register holds the lower index in its low half. Every lane publishes its fragments to its warp's
 * scratch, a warp barrier, then each computes its four outputs (bf16 products are exact in fp32; accumulation in k
 * order), and a barrier before the scratch is used again. Kernels call it where the device code has the asm. */
namespace mnemu {
static inline void mma_m16n8k16_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    struct frag {
        uint32_t a[4], b[2];
    };
    static frag warp_frags[32][32]; /* [warp][lane]: one block runs at a time, at most 1024 threads */
    const unsigned lin = g_tid->x + g_block_dim.x * (g_tid->y + g_block_dim.y * g_tid->z);
    const unsigned w = lin / 32, lane = lin % 32, g = lane / 4, t = lane % 4;
    frag *f = warp_frags[w];
    for (int i = 0; i < 4; i++) f[lane].a[i] = a[i];
    f[lane].b[0] = b0, f[lane].b[1] = b1;
    syncwarp();
    auto bf = [](uint32_t reg, int half) {
        uint32_t u = (half ? reg >> 16 : reg & 0xffffu) << 16;
        float x;
        memcpy(&x, &u, 4);
        return x;
    };
    float d[4];
    for (int e = 0; e < 4; e++) {
        const int row = (int)g + (e >= 2 ? 8 : 0), col = 2 * (int)t + (e & 1);
        float acc = c[e];
        for (int k = 0; k < 16; k++) {
            float av = bf(f[4 * (row % 8) + (k % 8) / 2].a[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k % 2);
            float bv = bf(f[4 * col + (k % 8) / 2].b[k >= 8 ? 1 : 0], k % 2);
            acc = fmaf(av, bv, acc);
        }
        d[e] = acc;
    }
    syncwarp();
    for (int e = 0; e < 4; e++) c[e] = d[e];
}
} // namespace mnemu

/* ---- nvcuda::wmma, the TF32 subset (m16n16k8) kernels/cuda uses. A fragment's layout across a warp's lanes is
 * opaque in CUDA, so kernels may only touch its elements uniformly (convert, scale); here every thread holds the
 * whole tile (row-major), loads and stores it whole and computes the whole product, which equals what the warp
 * computes together. TF32 operands are exact in fp32 products; accumulation is fp32 in k order. */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision {
struct tf32 {};
} // namespace precision
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment;
template <int M, int N, int K, class Layout> struct fragment<matrix_a, M, N, K, precision::tf32, Layout> {
    enum { num_elements = M * K, rows = M, cols = K };
    float x[M * K]; /* [m][k] */
};
template <int M, int N, int K, class Layout> struct fragment<matrix_b, M, N, K, precision::tf32, Layout> {
    enum { num_elements = K * N, rows = K, cols = N };
    float x[K * N]; /* [k][n] */
};
template <int M, int N, int K> struct fragment<accumulator, M, N, K, float, void> {
    enum { num_elements = M * N, rows = M, cols = N };
    float x[M * N]; /* [m][n] */
};

/* cvt.rna.tf32.f32: round to nearest, ties away from zero, to 10 mantissa bits (low 13 bits zero) */
static inline float __float_to_tf32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&f, &u, 4);
    return f;
}

template <class Frag> static inline void fill_fragment(Frag &f, float v) {
    for (int i = 0; i < Frag::num_elements; i++) f.x[i] = v;
}
/* Every lane holds the whole tile here, so a load followed by a store of the same tile (O += P.V in place) would
 * let a late lane read what an early lane already stored: loads end, and stores begin, at a warp barrier (the
 * _sync ops need the whole warp anyway). */
template <class Frag> static inline void load_tile(Frag &f, const float *p, unsigned ldm, bool row_major_mem) {
    for (int r = 0; r < Frag::rows; r++)
        for (int c = 0; c < Frag::cols; c++)
            f.x[r * Frag::cols + c] = row_major_mem ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
    mnemu::syncwarp();
}
template <class Use, int M, int N, int K>
static inline void load_matrix_sync(fragment<Use, M, N, K, precision::tf32, row_major> &f, const float *p, unsigned ldm) {
    load_tile(f, p, ldm, true);
}
template <class Use, int M, int N, int K>
static inline void load_matrix_sync(fragment<Use, M, N, K, precision::tf32, col_major> &f, const float *p, unsigned ldm) {
    load_tile(f, p, ldm, false);
}
template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p, unsigned ldm, layout_t l) {
    load_tile(f, p, ldm, l == mem_row_major);
}
template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm, layout_t l) {
    mnemu::syncwarp();
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) (l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.x[r * N + c];
}
template <int M, int N, int K, class LA, class LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, precision::tf32, LA> &a,
                            const fragment<matrix_b, M, N, K, precision::tf32, LB> &b,
                            const fragment<accumulator, M, N, K, float> &c) {
    float t[M * N];
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float acc = c.x[m * N + n];
            for (int k = 0; k < K; k++) acc = fmaf(a.x[m * K + k], b.x[k * N + n], acc);
            t[m * N + n] = acc;
        }
    memcpy(d.x, t, sizeof t);
}
} // namespace wmma
} // namespace nvcuda

#endif
