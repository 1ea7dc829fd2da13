/*
 * bench_gemm_bf16.c — the prefill GEMMs of bf16 weights, y[m,n] = x[m,k] . w[n,k]^T with x fp32, on each way
 * this machine can do them, to pick the fastest:
 *   sgemm-f32      OpenBLAS sgemm on fp32 weights (the fallback)
 *   f32-tiles      mnemo's AVX-512 FMA tiles on fp32 weights (kernels/cpu/cpu_gemm_f32.c, through the matmul op)
 *   widen+sgemm    bf16 weights widened to fp32 panels + sgemm (mnemo's EXACT mode)
 *   bf16dot        mnemo's AVX512_BF16 tiles (FAST mode: kernels/cpu/cpu_gemm_bf16dot.c, through the matmul op)
 *   onednn         oneDNN (libdnnl, Debian 2.6) bf16 x bf16 -> f32 matmul, x rounded to bf16 inside the timing
 *   libxsmm        libxsmm (Debian 1.17) libxsmm_xgemm_omp, bf16 in, f32 out, x rounded inside the timing
 * oneDNN and libxsmm are measured when the build found them (MNEMO_HAVE_DNNL, MNEMO_HAVE_XSMM: libdnnl-dev,
 * libxsmm-dev), never needed by the engine. Each figure is the best of --reps runs after one warm-up, GFLOP/s =
 * 2 m n k / s.
 *
 * usage: bench_gemm_bf16 [--m 512] [--threads 2] [--reps 5] [--only sgemm-f32|f32-tiles|widen+sgemm|bf16dot|onednn|
 *                        libxsmm]
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "kernels.h"
#include "kernels_cpu_paths.h"
#ifdef MNEMO_HAVE_DNNL
#include <dnnl.h>
#endif
#ifdef MNEMO_HAVE_XSMM
#include <libxsmm.h>
#endif

static void *xalloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes)) {
        fprintf(stderr, "bench_gemm_bf16: out of memory\n");
        exit(1);
    }
    return p;
}

typedef struct {
    int64_t m, n, k;
    int threads;
    float *x, *wf, *y;
    uint16_t *wb, *xb;
    kern_ctx *kc;
} prob;

static void round_x(prob *p) { /* x -> bf16, as the bf16dot path does inside its timing */
#pragma omp parallel for num_threads(p->threads)
    for (int64_t i = 0; i < p->m * p->k; i++) p->xb[i] = kern_f32_to_bf16(p->x[i]);
}

static void run_sgemm(prob *p) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)p->m, (int)p->n, (int)p->k, 1.f, p->x, (int)p->k,
                p->wf, (int)p->k, 0.f, p->y, (int)p->n);
}
static void run_f32tiles(prob *p) {
    int rc = kern_cpu_backend()->matmul(p->kc, p->y, p->x, p->wf, KERN_F32, p->m, p->n, p->k, 0.f);
    if (rc) fprintf(stderr, "f32 tiles: rc %d\n", rc);
}
static void run_widen(prob *p) {
    kern_cpu_set_gemm(p->kc, KERN_CPU_GEMM_EXACT);
    kern_cpu_backend()->matmul(p->kc, p->y, p->x, p->wb, KERN_BF16, p->m, p->n, p->k, 0.f);
    kern_cpu_set_gemm(p->kc, KERN_CPU_GEMM_FAST);
}
static void run_bf16dot(prob *p) {
    kern_cpu_set_gemm(p->kc, KERN_CPU_GEMM_FAST);
    int rc = kern_cpu_backend()->matmul(p->kc, p->y, p->x, p->wb, KERN_BF16, p->m, p->n, p->k, 0.f);
    if (rc) fprintf(stderr, "bf16dot: rc %d\n", rc);
}

#ifdef MNEMO_HAVE_DNNL
typedef struct { dnnl_engine_t eng; dnnl_stream_t st; dnnl_primitive_t prim; dnnl_memory_t a, b, c; } dnnl_state;
static dnnl_state dn;
#define DN(call) do { if ((call) != dnnl_success) { fprintf(stderr, "oneDNN: %s failed\n", #call); exit(1); } } while (0)
static void dnnl_setup(prob *p) {
    DN(dnnl_engine_create(&dn.eng, dnnl_cpu, 0));
    DN(dnnl_stream_create(&dn.st, dn.eng, dnnl_stream_default_flags));
    dnnl_memory_desc_t a_md, b_md, c_md;
    dnnl_dims_t ad = {p->m, p->k}, bd = {p->k, p->n}, cd = {p->m, p->n};
    DN(dnnl_memory_desc_init_by_tag(&a_md, 2, ad, dnnl_bf16, dnnl_ab));
    DN(dnnl_memory_desc_init_by_tag(&b_md, 2, bd, dnnl_bf16, dnnl_ba)); /* w[n,k] row-major = (k x n) "ba" */
    DN(dnnl_memory_desc_init_by_tag(&c_md, 2, cd, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t md;
    DN(dnnl_matmul_desc_init(&md, &a_md, &b_md, NULL, &c_md));
    dnnl_primitive_desc_t pd;
    DN(dnnl_primitive_desc_create(&pd, &md, NULL, dn.eng, NULL));
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    printf("  oneDNN %d.%d matmul implementation: %s\n", dnnl_version()->major, dnnl_version()->minor,
           impl ? impl : "?");
    DN(dnnl_primitive_create(&dn.prim, pd));
    DN(dnnl_memory_create(&dn.a, &a_md, dn.eng, p->xb));
    DN(dnnl_memory_create(&dn.b, &b_md, dn.eng, p->wb));
    DN(dnnl_memory_create(&dn.c, &c_md, dn.eng, p->y));
    dnnl_primitive_desc_destroy(pd);
}
static void run_dnnl(prob *p) {
    round_x(p);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, dn.a}, {DNNL_ARG_WEIGHTS, dn.b}, {DNNL_ARG_DST, dn.c}};
    DN(dnnl_primitive_execute(dn.prim, dn.st, 3, args));
    DN(dnnl_stream_wait(dn.st));
}
static void dnnl_teardown(void) {
    dnnl_primitive_destroy(dn.prim);
    dnnl_memory_destroy(dn.a); dnnl_memory_destroy(dn.b); dnnl_memory_destroy(dn.c);
    dnnl_stream_destroy(dn.st); dnnl_engine_destroy(dn.eng);
}
#endif

#ifdef MNEMO_HAVE_XSMM
static void run_xsmm(prob *p) {
    /* column-major: y^T[n,m] = w[n,k] (col-major k x n, so "T") . x^T (col-major k x m) */
    round_x(p);
    /* libxsmm_xgemm_omp writes nothing for bf16 in 1.17: each thread runs libxsmm_bsgemm on its columns */
#pragma omp parallel num_threads(p->threads)
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t j0 = p->n * id / nt, j1 = p->n * (id + 1) / nt;
        libxsmm_blasint M = (libxsmm_blasint)(j1 - j0), N = (libxsmm_blasint)p->m, K = (libxsmm_blasint)p->k;
        libxsmm_blasint ldc = (libxsmm_blasint)p->n;
        float alpha = 1.f, beta = 0.f;
        libxsmm_bsgemm("T", "N", &M, &N, &K, &alpha, (const libxsmm_bfloat16 *)p->wb + j0 * p->k, &K,
                       (const libxsmm_bfloat16 *)p->xb, &K, &beta, p->y + j0, &ldc);
    }
}
#endif

/* Best GFLOP/s over reps by the wall clock, and by the process's CPU time (*cpu_gflops: per core busy, robust to
 * a loaded machine descheduling the threads; with more than one thread it counts spin-waits too). */
static double time_best(void (*fn)(prob *), prob *p, int reps, double *cpu_gflops) {
    for (int64_t i = 0; i < p->m * p->n; i++) p->y[i] = NAN; /* a method that writes nothing shows err nan */
    fn(p); /* warm-up: page faults, packing buffers, JIT */
    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r < reps; r++) {
        struct timespec c0, c1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
        double t = bench_now_s();
        fn(p);
        t = bench_now_s() - t;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
        double c = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
        if (t < best) best = t;
        if (c < best_cpu) best_cpu = c;
    }
    double flop = 2.0 * (double)p->m * (double)p->n * (double)p->k;
    *cpu_gflops = flop / best_cpu * 1e-9 * p->threads;
    return flop / best * 1e-9;
}

/* Largest |y - ref| / sum|x w| over a few sampled rows, ref in fp64 from the exact bf16 weights. */
static double sampled_err(const prob *p) {
    double worst = 0;
    for (int64_t i = 0; i < p->m; i += p->m / 4 + 1)
        for (int64_t j = 0; j < p->n; j += p->n / 16 + 1) {
            double s = 0, t = 0;
            for (int64_t q = 0; q < p->k; q++) {
                double v = (double)p->x[i * p->k + q] * kern_bf16_to_f32(p->wb[j * p->k + q]);
                s += v;
                t += fabs(v);
            }
            double e = fabs(p->y[i * p->n + j] - s) / t;
            worst = isnan(e) || e > worst ? e : worst;
        }
    return worst;
}

static const char *only_method;

static void report(const char *name, void (*fn)(prob *), prob *p, int reps) {
    if (only_method && strcmp(only_method, name)) return;
    double cpu, gflops = time_best(fn, p, reps, &cpu); /* first: the error is of this method's output */
    printf("  %-12s %7.1f GFLOP/s  (%7.1f by CPU time x threads)  error %.1e of sum|x w|\n", name, gflops, cpu,
           sampled_err(p));
}

int main(int argc, char **argv) {
    int64_t m = 512;
    int threads = 2, reps = 5;
    const char *only = NULL; /* --only NAME: one method (profiling) */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--m")) m = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--only")) only = argv[i + 1];
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    if (m < 9 || threads < 1 || reps < 1) { fprintf(stderr, "bad arguments (m >= 9)\n"); return 2; }
    only_method = only;
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
#ifdef MNEMO_HAVE_XSMM
    libxsmm_init();
#endif
    printf("bench_gemm_bf16: m %ld, %d threads, best of %d; AVX512_BF16 path %s; load %s\n", (long)m, threads, reps,
           kern_cpu_bf16dot_available() ? "available" : "unavailable", "see /proc/loadavg");
    const int64_t shapes[][2] = {{3200, 3200}, {8640, 3200}, {3200, 8640}, {9600, 3200}};
    for (int s = 0; s < 4; s++) {
        prob p = {m, shapes[s][0], shapes[s][1], threads, NULL, NULL, NULL, NULL, NULL, kern_cpu_ctx_new(threads)};
        p.x = xalloc((size_t)(m * p.k) * 4);
        p.wf = xalloc((size_t)(p.n * p.k) * 4);
        p.y = xalloc((size_t)(m * p.n) * 4);
        p.wb = xalloc((size_t)(p.n * p.k) * 2);
        p.xb = xalloc((size_t)(m * p.k) * 2);
        uint64_t st = 0x1234567u + (uint64_t)s;
        for (int64_t i = 0; i < m * p.k; i++) p.x[i] = bench_frand(&st);
        for (int64_t i = 0; i < p.n * p.k; i++) {
            p.wb[i] = kern_f32_to_bf16(0.05f * bench_frand(&st));
            p.wf[i] = kern_bf16_to_f32(p.wb[i]);
        }
        printf("m %ld n %ld k %ld:\n", (long)m, (long)p.n, (long)p.k);
        report("sgemm-f32", run_sgemm, &p, reps);
        if (kern_cpu_f32gemm_available()) report("f32-tiles", run_f32tiles, &p, reps);
        report("widen+sgemm", run_widen, &p, reps);
        if (kern_cpu_bf16dot_available()) report("bf16dot", run_bf16dot, &p, reps);
#ifdef MNEMO_HAVE_DNNL
        dnnl_setup(&p);
        report("onednn", run_dnnl, &p, reps);
        dnnl_teardown();
#endif
#ifdef MNEMO_HAVE_XSMM
        report("libxsmm", run_xsmm, &p, reps);
#endif
        fflush(stdout);
        free(p.x); free(p.wf); free(p.y); free(p.wb); free(p.xb);
        kern_cpu_ctx_free(p.kc);
    }
    return 0;
}
