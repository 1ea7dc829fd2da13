/*
 * bench_gemm_quant.c — y[m,n] = x[m,k] . w[n,k]^T for q8_0 / q4_0 weights, on each path the CPU backend has, over
 * a range of m: where the int8 GEMM and the dequantized-panel GEMMs overtake the integer tiles (quant_dot_*.c),
 * which sets the thresholds in kernels_cpu_paths.h, and how they compare with bf16 weights' own GEMM.
 *   int         the integer tiles (AVX-512 VNNI where present): activations rounded to int8 per block
 *   int-gemm    the int8 VNNI GEMM on weights packed per call (quant_gemm_vnni.c), activation rounding timed too
 *   panel-bf16  panels dequantized to bf16, AVX512_BF16 tiles (FAST contexts without VNNI)
 *   panel-f32   panels dequantized to fp32, AVX-512 FMA tiles (EXACT contexts)
 *   bf16        bf16 weights on the same AVX512_BF16 tiles (the speed the panel-bf16 path aims at)
 * The panel GEMMs are called directly, so they are timed below the threshold too. Shapes: LongLLaMA-3B's
 * projections (3200 x 3200, 8640 x 3200, 3200 x 8640). Each figure: best of --reps after one warm-up, GFLOP/s =
 * 2 m n k / s by the wall clock, or with --cpu-time by the process's CPU time (robust on a shared machine, where
 * a descheduled OpenMP worker stalls every parallel region; use it with --threads 1, as spinning workers count
 * too); the load average is printed first.
 *
 * usage: bench_gemm_quant [--threads 2] [--reps 3] [--ms 1,4,8,12,16,24,32,64,512] [--dtype q8_0|q4_0|both]
 *                         [--cpu-time 0|1]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../kernels/cpu/cpu_gemm_bf16dot.h"
#include "../../kernels/cpu/cpu_gemm_f32.h"
#include "../../kernels/cpu/quant.h"
#include "bench_util.h"
#include "kernels.h"
#include "kernels_cpu_paths.h"

typedef struct {
    int64_t m, n, k;
    kern_dtype dt;
    float *x, *y;
    void *wq;
    uint16_t *wb;
    kern_ctx *kc;
} prob;

static int threads_g = 1;

static void *xalloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) {
        fprintf(stderr, "bench_gemm_quant: out of memory\n");
        exit(1);
    }
    return p;
}

static int run_int(prob *p) {
    kern_cpu_qpanel_allow(0);
    int rc = kern_cpu_backend()->matmul(p->kc, p->y, p->x, p->wq, p->dt, p->m, p->n, p->k, 0.f);
    kern_cpu_qpanel_allow(1);
    return rc;
}
static int run_panel_bf16(prob *p) {
    kern_cpu_set_gemm(p->kc, KERN_CPU_GEMM_FAST);
    return kern_cpu_gemm_bf16dot(p->kc, p->y, p->x, p->wq, p->dt, p->m, p->n, p->k, 0.f);
}
static int run_panel_f32(prob *p) {
    return kern_cpu_gemm_f32(p->kc, p->y, p->x, p->wq, p->dt, p->m, p->n, p->k, 0.f);
}
static int run_int_gemm(prob *p) { /* activations quantized inside the timing, as the matmul op does */
    int64_t nb = p->k / KERN_QBLOCK;
    static void *buf;
    static size_t cap;
    size_t panel = (kq_gemm_vnni_panel_bytes(p->k) + 63) / 64 * 64; /* quant_matmul.c's spacing */
    size_t need = (size_t)(p->m * p->k) + (size_t)(p->m * nb) * 8 + panel * (size_t)threads_g + 256;
    if (need > cap) {
        free(buf);
        buf = xalloc(need);
        cap = need;
    }
    char *c = buf;
    kq_act a = {.qs = (int8_t *)c, .d = (float *)(c + p->m * p->k),
                .sum = (int32_t *)(c + p->m * p->k + p->m * nb * 4)};
    void *panels = (void *)(((uintptr_t)(c + p->m * p->k + p->m * nb * 8) + 63) & ~(uintptr_t)63);
    kq_quantize_act(&a, p->x, p->m, p->k, threads_g);
    return kq_gemm_vnni(p->y, &a, p->wq, p->dt, p->m, p->n, p->k, 0.f, panels, threads_g);
}
static int run_bf16(prob *p) {
    kern_cpu_set_gemm(p->kc, KERN_CPU_GEMM_FAST);
    return kern_cpu_gemm_bf16dot(p->kc, p->y, p->x, p->wb, KERN_BF16, p->m, p->n, p->k, 0.f);
}

static int use_cpu_time; /* --cpu-time 1: the process's CPU seconds instead of the wall clock */

static double now_s(void) {
    if (!use_cpu_time) return bench_now_s();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* GFLOP/s, best of reps; 0 when the path is not on this CPU. */
static double time_best(int (*fn)(prob *), prob *p, int reps) {
    if (fn(p) != KERN_OK) return 0; /* warm-up: page faults, scratch */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = now_s();
        fn(p);
        t = now_s() - t;
        if (t < best) best = t;
    }
    return 2.0 * (double)p->m * (double)p->n * (double)p->k / best * 1e-9;
}

int main(int argc, char **argv) {
    int threads = 2, reps = 3;
    const char *ms_arg = "1,4,8,12,16,24,32,64,512", *dts = "both";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = threads_g = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ms")) ms_arg = argv[i + 1];
        else if (!strcmp(argv[i], "--dtype")) dts = argv[i + 1];
        else if (!strcmp(argv[i], "--cpu-time")) use_cpu_time = atoi(argv[i + 1]);
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    int64_t ms[32];
    int n_ms = 0;
    for (const char *s = ms_arg; *s && n_ms < 32;) {
        ms[n_ms] = atoll(s);
        if (ms[n_ms] < 1) { fprintf(stderr, "--ms: positive row counts, comma-separated\n"); return 2; }
        n_ms++;
        const char *c = strchr(s, ',');
        if (!c) break;
        s = c + 1;
    }
    if (threads < 1 || reps < 1 || (strcmp(dts, "both") && strcmp(dts, "q8_0") && strcmp(dts, "q4_0"))) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    FILE *la = fopen("/proc/loadavg", "r");
    char load[64] = "?";
    if (la) {
        if (!fgets(load, sizeof load, la)) strcpy(load, "?");
        fclose(la);
        load[strcspn(load, "\n")] = 0;
    }
    printf("bench_gemm_quant: %d threads, best of %d by the %s; AVX512_BF16 %s, panels %s; load %s\n", threads,
           reps, use_cpu_time ? "process CPU time" : "wall clock",
           kern_cpu_bf16dot_available() ? "yes" : "no", kern_cpu_qpanel_available() ? "yes" : "no", load);
    printf("GFLOP/s (0: path not on this CPU)\n%-5s %5s %5s %5s %9s %9s %11s %10s %9s\n", "dtype", "n", "k", "m",
           "int", "int-gemm", "panel-bf16", "panel-f32", "bf16");
    const int64_t shapes[][2] = {{3200, 3200}, {8640, 3200}, {3200, 8640}};
    int64_t mmax = 1;
    for (int i = 0; i < n_ms; i++) mmax = ms[i] > mmax ? ms[i] : mmax;
    for (int d = 0; d < 2; d++) {
        kern_dtype dt = d ? KERN_Q4_0 : KERN_Q8_0;
        if (strcmp(dts, "both") && strcmp(dts, kern_dtype_name(dt))) continue;
        for (int s = 0; s < 3; s++) {
            prob p = {0, shapes[s][0], shapes[s][1], dt, NULL, NULL, NULL, NULL, kern_cpu_ctx_new(threads)};
            size_t rb = kern_dtype_bytes(dt, p.k);
            p.x = xalloc((size_t)(mmax * p.k) * 4);
            p.y = xalloc((size_t)(mmax * p.n) * 4);
            p.wq = xalloc(rb * (size_t)p.n);
            p.wb = xalloc((size_t)(p.n * p.k) * 2);
            float *row = xalloc((size_t)p.k * 4);
            uint64_t st = 0x9E3779B9u + (uint64_t)s;
            for (int64_t i = 0; i < mmax * p.k; i++) p.x[i] = bench_frand(&st);
            for (int64_t j = 0; j < p.n; j++) {
                for (int64_t i = 0; i < p.k; i++) row[i] = 0.05f * bench_frand(&st);
                kern_quantize_row((char *)p.wq + (size_t)j * rb, row, dt, p.k);
                for (int64_t i = 0; i < p.k; i++) p.wb[j * p.k + i] = kern_f32_to_bf16(row[i]);
            }
            for (int i = 0; i < n_ms; i++) {
                p.m = ms[i];
                double gi = time_best(run_int, &p, reps), gb = time_best(run_panel_bf16, &p, reps);
                double gf = time_best(run_panel_f32, &p, reps), g16 = time_best(run_bf16, &p, reps);
                double gg = time_best(run_int_gemm, &p, reps);
                printf("%-5s %5ld %5ld %5ld %9.1f %9.1f %11.1f %10.1f %9.1f\n", kern_dtype_name(dt), (long)p.n,
                       (long)p.k, (long)p.m, gi, gg, gb, gf, g16);
                fflush(stdout);
            }
            free(p.x); free(p.y); free(p.wq); free(p.wb); free(row);
            kern_cpu_ctx_free(p.kc);
        }
    }
    return 0;
}
