/*
 * cuda_elementwise.cu — the pointwise ops: SwiGLU h = silu(gate) * up (h may alias gate), its backward twin
 * (dgate, dup from dh, gate, up; the CPU's expression order) and the residual add y += x. Memory-bound: a grid-stride loop, float4 accesses when every pointer is 16-byte aligned (the engine's
 * buffers are), scalar otherwise. silu uses expf (not __expf) and the CPU's expression order.
 */
#include "cuda_common.cuh"

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__global__ void swiglu_kernel(float *h, const float *gate, const float *up, int64_t n, bool vec) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x, i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {
        int64_t n4 = n / 4;
        for (int64_t i = i0; i < n4; i += stride) {
            float4 g = reinterpret_cast<const float4 *>(gate)[i], u = reinterpret_cast<const float4 *>(up)[i];
            reinterpret_cast<float4 *>(h)[i] =
                make_float4(silu_mul(g.x, u.x), silu_mul(g.y, u.y), silu_mul(g.z, u.z), silu_mul(g.w, u.w));
        }
        for (int64_t i = n4 * 4 + i0; i < n; i += stride) h[i] = silu_mul(gate[i], up[i]);
    } else {
        for (int64_t i = i0; i < n; i += stride) h[i] = silu_mul(gate[i], up[i]);
    }
}

__global__ void swiglu_backward_kernel(float *dgate, float *dup, const float *dh, const float *gate, const float *up,
                                       int64_t n) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float g = gate[i], u = up[i], d = dh[i]; /* outputs may alias inputs element for element */
        float sg = 1.0f / (1.0f + expf(-g));
        dgate[i] = d * u * (sg * (1.0f + g * (1.0f - sg)));
        dup[i] = d * (g * sg);
    }
}

__global__ void add_kernel(float *y, const float *x, int64_t n, bool vec) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x, i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {
        int64_t n4 = n / 4;
        for (int64_t i = i0; i < n4; i += stride) {
            float4 a = reinterpret_cast<float4 *>(y)[i], b = reinterpret_cast<const float4 *>(x)[i];
            reinterpret_cast<float4 *>(y)[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
        }
        for (int64_t i = n4 * 4 + i0; i < n; i += stride) y[i] += x[i];
    } else {
        for (int64_t i = i0; i < n; i += stride) y[i] += x[i];
    }
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Enough blocks to fill the device a few times over; the grid-stride loop covers the rest. */
static unsigned grid_for(const kern_ctx *kc, int64_t n) {
    int64_t want = mn_cdiv(n / 4 + 1, 256), cap = (int64_t)kc->sm_count * 8;
    return (unsigned)(want < cap ? want : cap);
}

int kern_cuda_swiglu(kern_ctx *kc, float *h, const float *gate, const float *up, int64_t n) {
    if (!kc_ok(kc) || n < 0) return KERN_ESHAPE;
    if (n == 0) return KERN_OK;
    bool vec = aligned16(h) && aligned16(gate) && aligned16(up);
    MN_LAUNCH(swiglu_kernel, grid_for(kc, n), 256, 0, kc->stream)(h, gate, up, n, vec);
    return kc_check_launch("swiglu");
}

int kern_cuda_swiglu_backward(kern_ctx *kc, float *dgate, float *dup, const float *dh, const float *gate,
                              const float *up, int64_t n) {
    if (!kc_ok(kc) || n < 0) return KERN_ESHAPE;
    if (n == 0) return KERN_OK;
    MN_LAUNCH(swiglu_backward_kernel, grid_for(kc, 4 * n), 256, 0, kc->stream)(dgate, dup, dh, gate, up, n);
    return kc_check_launch("swiglu_backward");
}

int kern_cuda_add(kern_ctx *kc, float *y, const float *x, int64_t n) {
    if (!kc_ok(kc) || n < 0) return KERN_ESHAPE;
    if (n == 0) return KERN_OK;
    bool vec = aligned16(y) && aligned16(x);
    MN_LAUNCH(add_kernel, grid_for(kc, n), 256, 0, kc->stream)(y, x, n, vec);
    return kc_check_launch("add");
}
