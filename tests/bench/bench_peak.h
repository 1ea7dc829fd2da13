/*
 * bench_peak.h — the machine's arithmetic peaks, measured in-process, as the prefill bound of bench_engine: the
 * peak of the instruction the kernel uses, not a library's GEMM speed (a GEMM that beats OpenBLAS would read as
 * >100%).
 *   f32 FMA peak      independent vfmadd231ps chains on registers: zmm where the kernels were compiled for
 *                     AVX-512, ymm for AVX2+FMA, scalar otherwise (2 FLOPs per lane)
 *   bf16 dot peak     independent vdpbf16ps chains (AVX512_BF16: 32 pairs, 64 FLOPs per instruction); 0 when
 *                     the CPU lacks it (kern_cpu_bf16dot_available)
 *   int8 dot peak     independent vpdpbusd chains (AVX-512 VNNI: 64 byte products summed into 16 int32, counted
 *                     as 128 ops per instruction, like FLOPs), the q8_0/q4_0 prefill GEMM's instruction; 0
 *                     without VNNI
 * All threads run the loop at once (as the kernels do); the figure is the best of 5 runs of a few ms.
 * Header-only: each benchmark is one executable.
 */
#ifndef MNEMO_BENCH_PEAK_H
#define MNEMO_BENCH_PEAK_H

#include <immintrin.h>
#include <omp.h>

#include "bench_util.h"
#include "kernels_cpu_paths.h"

#define PEAK_CHAINS 16 /* independent accumulators: more than latency x throughput on current cores */
#define PEAK_ITERS 400000 /* 6.4M instructions a thread: ~2-4 ms */

static volatile float peak_sink;

/* FLOPs one thread did in one run of the f32 loop; isa names the instruction used. */
static double peak_f32_loop(float seed, const char **isa) {
#if defined(__AVX512F__)
    __m512 acc[PEAK_CHAINS], a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(seed * 1e-3f);
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_set1_ps(seed + (float)i);
    for (int it = 0; it < PEAK_ITERS; it++)
        for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    for (int i = 1; i < PEAK_CHAINS; i++) acc[0] = _mm512_add_ps(acc[0], acc[i]);
    peak_sink = _mm512_reduce_add_ps(acc[0]);
    *isa = "AVX-512 FMA";
    return 2.0 * 16 * PEAK_CHAINS * PEAK_ITERS;
#elif defined(__AVX2__) && defined(__FMA__)
    __m256 acc[PEAK_CHAINS], a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(seed * 1e-3f);
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm256_set1_ps(seed + (float)i);
    for (int it = 0; it < PEAK_ITERS; it++)
        for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    float out[8];
    for (int i = 1; i < PEAK_CHAINS; i++) acc[0] = _mm256_add_ps(acc[0], acc[i]);
    _mm256_storeu_ps(out, acc[0]);
    peak_sink = out[0];
    *isa = "AVX2 FMA";
    return 2.0 * 8 * PEAK_CHAINS * PEAK_ITERS;
#else
    float acc[PEAK_CHAINS];
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = seed + (float)i;
    for (int it = 0; it < PEAK_ITERS; it++)
        for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = acc[i] * 0.999f + seed;
    peak_sink = acc[0];
    *isa = "scalar";
    return 2.0 * PEAK_CHAINS * PEAK_ITERS;
#endif
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static double peak_bf16_loop(float seed) {
    __m512 acc[PEAK_CHAINS];
    __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f), b = (__m512bh)_mm512_set1_epi32(0x3a833a83);
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_set1_ps(seed + (float)i);
    for (int it = 0; it < PEAK_ITERS; it++)
        for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    for (int i = 1; i < PEAK_CHAINS; i++) acc[0] = _mm512_add_ps(acc[0], acc[i]);
    peak_sink = _mm512_reduce_add_ps(acc[0]);
    return 64.0 * PEAK_CHAINS * PEAK_ITERS;
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double peak_vnni_loop(float seed) {
    __m512i acc[PEAK_CHAINS], a = _mm512_set1_epi8(3), b = _mm512_set1_epi8((char)-2);
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_set1_epi32((int)seed + i);
    for (int it = 0; it < PEAK_ITERS; it++)
        for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
    for (int i = 1; i < PEAK_CHAINS; i++) acc[0] = _mm512_add_epi32(acc[0], acc[i]);
    peak_sink = (float)_mm512_reduce_add_epi32(acc[0]);
    return 128.0 * PEAK_CHAINS * PEAK_ITERS;
}
#endif

/* FLOP/s of all threads running the loop at once, best of 5. bf16: 0 the f32 FMA loop, 1 the bf16 dot-product
 * loop, 2 the int8 dot-product loop (0 if unavailable). */
static double bench_peak(int threads, int bf16, const char **isa) {
    const char *name = "?";
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (bf16 == 1 && !kern_cpu_bf16dot_available()) return 0;
    __builtin_cpu_init();
    if (bf16 == 2 && !__builtin_cpu_supports("avx512vnni")) return 0;
#else
    if (bf16) return 0;
#endif
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double flops = 0, t = bench_now_s();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
        {
            float seed = 1.f + (float)omp_get_thread_num();
            const char *nm = "?";
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
            if (bf16 == 2) flops += peak_vnni_loop(seed), nm = "AVX-512 VNNI vpdpbusd";
            else if (bf16) flops += peak_bf16_loop(seed), nm = "AVX512_BF16 vdpbf16ps";
            else
#endif
                flops += peak_f32_loop(seed, &nm);
#pragma omp master
            name = nm;
        }
        t = bench_now_s() - t;
        if (flops / t > best) best = flops / t;
    }
    if (isa) *isa = name;
    return best;
}

#endif
