/*
 * cpu_ops.h — internals shared by the CPU kernel files: the context layout, the per-op entry points the op
 * table points at, and small vector helpers (AVX-512 or AVX2+FMA when compiled for it, plain C otherwise).
 */
#ifndef MNEMO_CPU_OPS_H
#define MNEMO_CPU_OPS_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

struct kern_ctx {
    int n_threads;
    float *scratch;      /* 64-byte aligned, grown on demand */
    size_t scratch_cap;  /* in floats */
    int gemm_fast;       /* kern_cpu_gemm: bf16-weight GEMMs may round activations to bf16 (kernels_cpu_paths.h) */
    int f32gemm, qpanel; /* 0: the settings cpu.f32gemm=off / cpu.qpanel=off (kernels_cpu_paths.h) */
};

/* Scratch of at least n floats, valid until the next call on this context; NULL when out of memory. */
float *kern_cpu_scratch(kern_ctx *kc, size_t n_floats);

#define KERN_CPU_DECL(name, params, doc) int kern_cpu_##name params;
KERN_OPS(KERN_CPU_DECL)
#undef KERN_CPU_DECL

#if defined(__AVX2__) && defined(__FMA__)
static inline float kern_hsum256(__m256 v) { /* the 8 lanes' sum */
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}
#endif

static inline float kern_dot_f32(const float *a, const float *b, int64_t n) {
    int64_t i = 0;
    float s = 0.f;
#ifdef __AVX512F__
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    }
    for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    if (i < n) { /* masked tail keeps odd head sizes (e.g. 100) vectorised */
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc1);
        i = n;
    }
    s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
#elif defined(__AVX2__) && defined(__FMA__)
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    s = kern_hsum256(_mm256_add_ps(acc0, acc1));
#endif
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y[0..n) += a * x[0..n) */
static inline void kern_axpy_f32(float *y, float a, const float *x, int64_t n) {
    int64_t i = 0;
#ifdef __AVX512F__
    __m512 va = _mm512_set1_ps(a);
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
        i = n;
    }
#elif defined(__AVX2__) && defined(__FMA__)
    __m256 va = _mm256_set1_ps(a);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
    for (; i < n; i++) y[i] += a * x[i];
}

#endif
