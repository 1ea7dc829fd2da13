/*
 * bench_attn_cpu.c — the CPU attention ops alone (forward with lse, backward), causal, on each instruction-set
 * path of the blocked tiles (kernels/cpu/cpu_attn_tiles.h), against the FMA peak measured in the same run.
 * FLOPs counted as the tiles' useful work: 2 GEMMs forward, 5 backward (S, dP, dQ, dK, dV) over the causal
 * half, 2 * T^2/2 * hd * hq each; the backward's recomputation (S and dP twice) is not counted as useful.
 *
 *   bench_attn_cpu [--T 2048] [--hq 4] [--hkv 4] [--hd 64] [--threads 2] [--reps 3] [--paths avx512,avx2,scalar]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_peak.h"
#include "bench_util.h"
#include "kernels.h"
#include "kernels_cpu_paths.h"

int main(int argc, char **argv) {
    int64_t T = 2048, hq = 4, hkv = 4, hd = 64;
    int threads = 2, reps = 3;
    const char *paths = "avx512,avx2,scalar";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--T")) T = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--hq")) hq = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--hkv")) hkv = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--hd")) hd = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--paths")) paths = argv[i + 1];
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    if (T < 1 || hq < 1 || hkv < 1 || hq % hkv || hd < 1 || threads < 1 || reps < 1) {
        fprintf(stderr, "bad shape\n");
        return 2;
    }
    const kern_backend *be = kern_cpu_backend();
    kern_ctx *kc = kern_cpu_ctx_new(threads);
    size_t nq = (size_t)(T * hq * hd), nk = (size_t)(T * hkv * hd);
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *o = malloc(nq * 4), *dout = malloc(nq * 4);
    float *lse = malloc((size_t)(T * hq) * 4), *dq = malloc(nq * 4), *dk = calloc(nk, 4), *dv = calloc(nk, 4);
    uint64_t rng = 42;
    for (size_t i = 0; i < nq; i++) q[i] = bench_frand(&rng), dout[i] = bench_frand(&rng);
    for (size_t i = 0; i < nk; i++) k[i] = bench_frand(&rng), v[i] = bench_frand(&rng);
    const char *isa = "";
    double peak = bench_peak(threads, 0, &isa);
    double pairs = (double)T * (double)(T + 1) / 2 * (double)hq, unit = 2 * pairs * (double)hd;
    printf("T %lld, heads %lld/%lld x %lld, %d threads; %s peak %.1f GFLOP/s\n", (long long)T, (long long)hq,
           (long long)hkv, (long long)hd, threads, isa, peak * 1e-9);
    const char *names[3] = {"scalar", "avx2", "avx512"};
    for (int p = 2; p >= 0; p--) {
        if (!strstr(paths, names[p])) continue;
        if ((int)kern_cpu_attn_path((kern_apath)p) != p) {
            printf("%-7s not on this CPU\n", names[p]);
            continue;
        }
        double tf = 1e30, tb = 1e30;
        for (int r = 0; r < reps + 1; r++) { /* the first of each is a warm-up (scratch, page faults) */
            double t0 = bench_now_s();
            be->attention(kc, o, lse, q, k, v, T, T, 0, hq, hkv, hd, 0.125f);
            double t1 = bench_now_s();
            be->attention_backward(kc, dq, dk, dv, dout, q, k, v, o, lse, T, T, 0, hq, hkv, hd, 0.125f);
            double t2 = bench_now_s();
            if (r) tf = t1 - t0 < tf ? t1 - t0 : tf, tb = t2 - t1 < tb ? t2 - t1 : tb;
        }
        printf("%-7s forward %8.2f ms %7.1f GFLOP/s (%4.1f%% of peak) | backward %8.2f ms %7.1f GFLOP/s (%4.1f%%)\n",
               names[p], tf * 1e3, 2 * unit / tf * 1e-9, 100 * 2 * unit / tf / peak, tb * 1e3, 5 * unit / tb * 1e-9,
               100 * 5 * unit / tb / peak);
    }
    kern_cpu_attn_path(KERN_APATH_BEST);
    FILE *la = fopen("/proc/loadavg", "r");
    char load[64] = "?";
    if (la && fgets(load, sizeof load, la)) printf("load average %s", load);
    if (la) fclose(la);
    kern_cpu_ctx_free(kc);
    return 0;
}
