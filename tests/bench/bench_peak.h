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
 * All threads run the loop at once (as the kernels do); the figure is the best of 6 runs of a few ms (8, 12 and 16
 * chains, twice each).
 * Header-only: each benchmark is one executable.
 */
#ifndef MNEMO_BENCH_PEAK_H
#define MNEMO_BENCH_PEAK_H

#include <immintrin.h>
#include <omp.h>

#include "bench_util.h"
#include "kernels_cpu_paths.h"

#define PEAK_ITERS 200000 /* per chain count: ~1-2 ms a thread */

static volatile float peak_sink;

/* One loop per (instruction, number of independent accumulator chains), all in registers (unrolled). How many
 * chains reach the peak depends on the core and on how the compiler schedules them, not only on latency x
 * throughput: on the Zen 5 EPYC here (-O3 -march=native, one thread, 2026-11-25) vpdpbusd gave 1000 GOPS with 8
 * chains, 1071 with 12 and 570 with 16; vdpbf16ps 361 / 497 / 540 GFLOP/s — and the 16-chain loop alone read the
 * q8_0 GEMM as 109% of "the peak". So every loop runs at 8, 12 and 16 chains and the best counts. OP(acc) is one
 * instruction on accumulator acc; FLOPS the operations it counts. */
#define PEAK_LOOP(fn, flags, vec, init, OP, FLOPS, fold)                                                       \
    __attribute__((target(flags), unused)) static double fn(float seed, int chains) {                              \
        vec acc[16];                                                                                          \
        for (int i = 0; i < 16; i++) acc[i] = init;                                                           \
        if (chains == 8)                                                                                      \
            for (int it = 0; it < PEAK_ITERS; it++) _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) OP;   \
        else if (chains == 12)                                                                                \
            for (int it = 0; it < PEAK_ITERS; it++) _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) OP; \
        else                                                                                                  \
            for (int it = 0; it < PEAK_ITERS; it++) _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) OP; \
        _Pragma("GCC unroll 16") for (int i = 1; i < 16; i++) fold;                                          \
        return (double)(FLOPS) * chains * PEAK_ITERS;                                                         \
    }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
PEAK_LOOP(peak_fma512, "avx512f", __m512, _mm512_set1_ps(seed + (float)i),
          acc[i] = _mm512_fmadd_ps(acc[i], _mm512_set1_ps(0.999f), _mm512_set1_ps(seed * 1e-3f)), 2 * 16,
          (acc[0] = _mm512_add_ps(acc[0], acc[i]), peak_sink = _mm512_reduce_add_ps(acc[0])))
PEAK_LOOP(peak_fma256, "avx2,fma", __m256, _mm256_set1_ps(seed + (float)i),
          acc[i] = _mm256_fmadd_ps(acc[i], _mm256_set1_ps(0.999f), _mm256_set1_ps(seed * 1e-3f)), 2 * 8,
          (acc[0] = _mm256_add_ps(acc[0], acc[i]), peak_sink = acc[0][0]))
PEAK_LOOP(peak_bf16dot, "avx512f,avx512bw,avx512bf16", __m512, _mm512_set1_ps(seed + (float)i),
          acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_set1_epi32(0x3f7f3f7f),
                                    (__m512bh)_mm512_set1_epi32(0x3a833a83)),
          64, (acc[0] = _mm512_add_ps(acc[0], acc[i]), peak_sink = _mm512_reduce_add_ps(acc[0])))
PEAK_LOOP(peak_vnni, "avx512f,avx512bw,avx512vnni", __m512i, _mm512_set1_epi32((int)seed + i),
          acc[i] = _mm512_dpbusd_epi32(acc[i], _mm512_set1_epi8(3), _mm512_set1_epi8((char)-2)), 128,
          (acc[0] = _mm512_add_epi32(acc[0], acc[i]), peak_sink = (float)_mm512_reduce_add_epi32(acc[0])))
#endif

/* FLOPs one thread did in one run of the f32 loop at `chains`; isa names the instruction used: zmm where the
 * kernels were compiled for AVX-512, ymm for AVX2+FMA, scalar otherwise. */
static double peak_f32_loop(float seed, int chains, const char **isa) {
#if defined(__AVX512F__)
    *isa = "AVX-512 FMA";
    return peak_fma512(seed, chains);
#elif defined(__AVX2__) && defined(__FMA__)
    *isa = "AVX2 FMA";
    return peak_fma256(seed, chains > 12 ? 12 : chains); /* 16 ymm registers */
#else
    float acc[8];
    for (int i = 0; i < 8; i++) acc[i] = seed + (float)i;
    for (int it = 0; it < PEAK_ITERS; it++)
        for (int i = 0; i < 8; i++) acc[i] = acc[i] * 0.999f + seed;
    peak_sink = acc[0];
    *isa = "scalar";
    return 2.0 * 8 * PEAK_ITERS;
#endif
}

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
    for (int r = 0; r < 6; r++) {
        const int chains = r % 3 == 0 ? 8 : r % 3 == 1 ? 12 : 16; /* each count twice */
        double flops = 0, t = bench_now_s();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
        {
            float seed = 1.f + (float)omp_get_thread_num();
            const char *nm = "?";
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
            if (bf16 == 2) flops += peak_vnni(seed, chains), nm = "AVX-512 VNNI vpdpbusd";
            else if (bf16) flops += peak_bf16dot(seed, chains), nm = "AVX512_BF16 vdpbf16ps";
            else
#endif
                flops += peak_f32_loop(seed, chains, &nm);
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
