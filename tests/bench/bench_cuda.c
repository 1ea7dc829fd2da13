/*
 * bench_cuda.c — CUDA prefill and decode throughput of the engine's forward pass (llama_forward on the CUDA
 * backend) on a random model with LongLLaMA-3B's full shape (26 layers, hidden 3200, ffn 8640, 32 heads x 100,
 * vocab 32000, bf16 weights), against the GPU's own limits measured in the same run:
 *   - decode (batch 1): bytes of weights + KV read per token / device-to-device copy bandwidth (cudaMemcpy,
 *     bytes read + written)  ->  fraction of the HBM-bandwidth bound
 *   - prefill: matmul + attention FLOPs per second / cuBLAS bf16 GEMM throughput (bf16 inputs, fp32
 *     accumulation and output, as the engine calls it) on the same layer shapes  ->  fraction of the GEMM peak.
 *     Both GEMM modes of the engine are timed: SPLIT (default, fp32-accurate: 3 bf16 GEMMs per matmul) and
 *     FAST (activations rounded to bf16 once, one GEMM).
 * Weights are generated in host memory and uploaded once (no checkpoint file). Prints SKIP and exits 0 when no
 * GPU answers.
 *
 * usage: bench_cuda [--layers N] [--contexts 2048,16384] [--chunk N] [--decode N] [--dtype bf16|f16|f32]
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "llama_forward.h"
#include "random_model.h"

#define MAX_CONTEXTS 16

#define CUDA_OR_DIE(call)                                                                                     \
    do {                                                                                                      \
        cudaError_t e_ = (call);                                                                              \
        if (e_ != cudaSuccess) {                                                                              \
            fprintf(stderr, "bench_cuda: %s failed: %s\n", #call, cudaGetErrorString(e_));                   \
            exit(1);                                                                                          \
        }                                                                                                     \
    } while (0)

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Device-to-device copy of 2 GiB (far past the 50 MB L2), median of 20 after 3 warm-ups; bytes read + written. */
static double copy_bandwidth(void) {
    size_t bytes = (size_t)2 << 30;
    void *a, *b;
    CUDA_OR_DIE(cudaMalloc(&a, bytes));
    CUDA_OR_DIE(cudaMalloc(&b, bytes));
    CUDA_OR_DIE(cudaMemset(a, 0x5a, bytes));
    cudaEvent_t e0, e1;
    CUDA_OR_DIE(cudaEventCreate(&e0));
    CUDA_OR_DIE(cudaEventCreate(&e1));
    double t[20];
    for (int r = -3; r < 20; r++) {
        CUDA_OR_DIE(cudaEventRecord(e0, 0));
        CUDA_OR_DIE(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
        CUDA_OR_DIE(cudaEventRecord(e1, 0));
        CUDA_OR_DIE(cudaEventSynchronize(e1));
        float ms;
        CUDA_OR_DIE(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 0) t[r] = ms * 1e-3;
    }
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    cudaFree(a); cudaFree(b);
    return 2.0 * (double)bytes / median(t, 20);
}

static void fill_random_16(uint16_t *h, size_t n, kern_dtype dt, uint64_t seed) {
    uint64_t s = seed | 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        float v = (float)((s >> 40) * (1.0 / (1 << 24))) * 2.f - 1.f;
        h[i] = dt == KERN_F16 ? kern_f32_to_f16(v) : kern_f32_to_bf16(v);
    }
}

/* cuBLAS throughput on y[m, n] = x[m, k] . w[n, k]^T with 16-bit inputs (random, not zeros), fp32 accumulation and
 * fp32 output: the call the engine makes per split part. Median of 10 after 3 warm-ups, per shape; returns the
 * FLOP-weighted rate over one layer's matmul shapes (q, k, v, o: d x d; gate, up: ff x d; down: d x ff). */
static double gemm_rate(int m, int d, int ff, kern_dtype dt, double *square_rate) {
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "bench_cuda: cublasCreate failed\n"); exit(1); }
    cudaDataType_t ct = dt == KERN_F16 ? CUDA_R_16F : CUDA_R_16BF;
    size_t kmax = (size_t)(d > ff ? d : ff), nmax = kmax, mmax = (size_t)(m > 8192 ? m : 8192);
    size_t xe = mmax * kmax, we = (nmax > 8192 ? nmax : 8192) * kmax, ye = mmax * (nmax > 8192 ? nmax : 8192);
    if (we < (size_t)8192 * 8192) we = (size_t)8192 * 8192;
    if (xe < (size_t)8192 * 8192) xe = (size_t)8192 * 8192;
    uint16_t *hx = bench_alloc(xe * 2), *hw = bench_alloc(we * 2);
    fill_random_16(hx, xe, dt, 1234567);
    fill_random_16(hw, we, dt, 7654321);
    void *x, *w, *y;
    CUDA_OR_DIE(cudaMalloc(&x, xe * 2));
    CUDA_OR_DIE(cudaMalloc(&w, we * 2));
    CUDA_OR_DIE(cudaMalloc(&y, ye * 4));
    CUDA_OR_DIE(cudaMemcpy(x, hx, xe * 2, cudaMemcpyHostToDevice));
    CUDA_OR_DIE(cudaMemcpy(w, hw, we * 2, cudaMemcpyHostToDevice));
    free(hx); free(hw);
    cudaEvent_t e0, e1;
    CUDA_OR_DIE(cudaEventCreate(&e0));
    CUDA_OR_DIE(cudaEventCreate(&e1));
    const float one = 1.f, zero = 0.f;
    /* {n, k, how many per layer}; the last entry is the 8192^3 square for reference */
    const int shapes[4][3] = {{d, d, 4}, {ff, d, 2}, {d, ff, 1}, {8192, 8192, 0}};
    double flops_total = 0, time_total = 0;
    for (int s = 0; s < 4; s++) {
        int n = shapes[s][0], k = shapes[s][1], mm = s == 3 ? 8192 : m;
        double t[10];
        for (int r = -3; r < 10; r++) {
            CUDA_OR_DIE(cudaEventRecord(e0, 0));
            /* row-major y[mm, n] = x[mm, k] w[n, k]^T is column-major y^T[n, mm] = w^T... : op(A)=w (T), B=x (N) */
            cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, mm, k, &one, w, ct, k, x, ct, k, &zero, y,
                                             CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            if (st != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "bench_cuda: cublasGemmEx failed (%d)\n", (int)st); exit(1); }
            CUDA_OR_DIE(cudaEventRecord(e1, 0));
            CUDA_OR_DIE(cudaEventSynchronize(e1));
            float ms;
            CUDA_OR_DIE(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0) t[r] = ms * 1e-3;
        }
        double tm = median(t, 10), f = 2.0 * mm * (double)n * k;
        if (s == 3) *square_rate = f / tm;
        else { flops_total += shapes[s][2] * f; time_total += shapes[s][2] * tm; }
    }
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    cudaFree(x); cudaFree(w); cudaFree(y);
    cublasDestroy(h);
    return flops_total / time_total;
}

/* Prefill tokens [0, n) in chunks of `chunk`, logits of the last row only; returns seconds (synchronised). */
static double prefill(const bench_model *bm, const kern_backend *be, kern_ctx *kc, kv_cache *kv, forward_buffers *fb,
                      const int32_t *tokens, int n, int chunk, float *logits, double *flops, int *rc) {
    const model_config *c = &bm->cfg;
    double t = bench_now_s();
    *flops = 0;
    for (int done = 0; done < n && *rc == 0; done += chunk) {
        int nb = n - done < chunk ? n - done : chunk;
        int last = done + nb == n;
        *rc = llama_forward(c, &bm->w, be, kc, kv, fb, tokens + done, nb, done, last ? nb - 1 : nb, logits);
        *flops += bench_prefill_flops(c, nb, done);
    }
    if (*rc == 0) *rc = be->sync(kc);
    return bench_now_s() - t;
}

int main(int argc, char **argv) {
    int layers = 26, chunk = 512, n_decode = 32, n_ctx_list[MAX_CONTEXTS] = {2048, 16384}, n_contexts = 2;
    kern_dtype dt = KERN_BF16;
    const char *settings = NULL; /* --set: kernel settings (cuda.attn=mma ...) */
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--layers") && v) layers = atoi(v), i++;
        else if (!strcmp(argv[i], "--chunk") && v) chunk = atoi(v), i++;
        else if (!strcmp(argv[i], "--decode") && v) n_decode = atoi(v), i++;
        else if (!strcmp(argv[i], "--set") && v) settings = v, i++;
        else if (!strcmp(argv[i], "--dtype") && v) {
            dt = !strcmp(v, "f32") ? KERN_F32 : !strcmp(v, "f16") ? KERN_F16 : !strcmp(v, "bf16") ? KERN_BF16 : -1;
            i++;
        } else if (!strcmp(argv[i], "--contexts") && v) {
            n_contexts = 0;
            for (const char *p = v; *p && n_contexts < MAX_CONTEXTS; p = strchr(p, ',') ? strchr(p, ',') + 1 : "")
                n_ctx_list[n_contexts++] = atoi(p);
            i++;
        } else {
            fprintf(stderr, "usage: bench_cuda [--layers N] [--contexts 2048,16384] [--chunk N] [--decode N] "
                            "[--dtype bf16|f16|f32] [--set NAME=VALUE,...]\n");
            return 2;
        }
    }
    int max_ctx = 0;
    for (int i = 0; i < n_contexts; i++) {
        if (n_ctx_list[i] < 1) { fprintf(stderr, "bench_cuda: bad context length\n"); return 2; }
        if (n_ctx_list[i] > max_ctx) max_ctx = n_ctx_list[i];
    }
    if (layers < 1 || chunk < 1 || n_decode < 1 || (int)dt < 0) { fprintf(stderr, "bench_cuda: bad arguments\n"); return 2; }

    char info[256];
    if (!kern_cuda_available(info, sizeof info)) {
        printf("SKIP: no CUDA device (%s)\n", info);
        return 0;
    }
    const kern_backend *be = kern_cuda_backend();
    double bw = copy_bandwidth(), square = 0;
    double peak = dt == KERN_F32 ? 0 : gemm_rate(chunk, 3200, 8640, dt, &square);
    printf("device: %s\n", info);
    printf("limits: device-to-device copy %.0f GB/s (read + written); cuBLAS %s GEMM (fp32 accumulate/output) on the "
           "layer shapes at m=%d: %.1f TFLOP/s; 8192^3: %.1f TFLOP/s\n",
           bw * 1e-9, kern_dtype_name(dt), chunk, peak * 1e-12, square * 1e-12);

    bench_model bm;
    double t0 = bench_now_s();
    bench_model_build(&bm, layers, dt, max_ctx + n_decode);
    llama_weights host = bm.w;
    host.layers = malloc((size_t)layers * sizeof *host.layers);
    memcpy(host.layers, bm.w.layers, (size_t)layers * sizeof *host.layers);
    void *block = NULL;
    uint64_t up_bytes = 0;
    if (llama_weights_upload(&bm.w, &bm.cfg, be, &block, &up_bytes) != 0) { fprintf(stderr, "bench_cuda: upload failed\n"); return 1; }
    bench_model_free_host(&bm, &host);
    free(host.layers);
    printf("model: %d layers x (hidden 3200, ffn 8640, 32 heads x 100), vocab 32000, %s; %.2f GB uploaded in %.1f s; "
           "KV cache fp32\n", layers, kern_dtype_name(dt), up_bytes * 1e-9, bench_now_s() - t0);

    const model_config *c = &bm.cfg;
    kern_ctx *kc = kern_cuda_ctx_new();
    kv_cache kv;
    forward_buffers fb;
    if (!kc || kv_cache_init(&kv, c, max_ctx + n_decode, be) || forward_buffers_init(&fb, c, chunk, be)) {
        fprintf(stderr, "bench_cuda: out of device memory\n");
        return 1;
    }
    char why[256];
    if (kern_ctx_settings(be, kc, settings, why, sizeof why) != KERN_OK) {
        fprintf(stderr, "bench_cuda: --set: %s\n", why);
        return 2;
    }
    float *logits = bench_alloc((size_t)c->vocab_size * 4);
    int32_t *tokens = malloc((size_t)max_ctx * sizeof *tokens);
    for (int i = 0; i < max_ctx; i++) tokens[i] = (i * 7919) % c->vocab_size;
    int rc = 0;
    double fl;
    prefill(&bm, be, kc, &kv, &fb, tokens, chunk < max_ctx ? chunk : max_ctx, chunk, logits, &fl, &rc); /* warm-up */

    printf("\n| context | GEMM mode | prefill tok/s | prefill TFLOP/s | of GEMM peak | decode ms/token (median) | "
           "decode GB/s (weights+KV) | of copy bw |\n|---|---|---|---|---|---|---|---|\n");
    for (int ci = 0; ci < n_contexts && rc == 0; ci++) {
        int n = n_ctx_list[ci];
        for (int mode = 0; mode < (dt == KERN_F32 ? 1 : 2) && rc == 0; mode++) {
            kern_cuda_set_gemm(kc, mode ? KERN_CUDA_GEMM_FAST : KERN_CUDA_GEMM_SPLIT);
            double tp = prefill(&bm, be, kc, &kv, &fb, tokens, n, chunk, logits, &fl, &rc);
            double rate = fl / tp;
            if (mode == 0 || dt == KERN_F32) {
                /* decode after the prompt: batch 1, GEMV (the GEMM mode does not apply) */
                double *ts = malloc((size_t)n_decode * sizeof *ts), bytes_sum = 0, t_sum = 0;
                for (int i = 0; i < n_decode && rc == 0; i++) {
                    int32_t tok = (i * 31) % c->vocab_size;
                    double s = bench_now_s();
                    rc = llama_forward(c, &bm.w, be, kc, &kv, &fb, &tok, 1, n + i, 0, logits);
                    ts[i] = bench_now_s() - s;
                    t_sum += ts[i];
                    bytes_sum += (double)bm.w.bytes_per_token + 2.0 * layers * (n + i + 1) * kv.kv_dim * 4;
                }
                double med = median(ts, n_decode), bytes = bytes_sum / n_decode;
                printf("| %d | %s | %.0f | %.1f | %.1f%% | %.3f | %.0f | %.1f%% |\n", n, mode ? "fast" : "split", n / tp,
                       rate * 1e-12, peak > 0 ? 100 * rate / peak : 0, med * 1e3, bytes / med * 1e-9,
                       100 * (bytes / bw) / med);
                free(ts);
            } else {
                printf("| %d | %s | %.0f | %.1f | %.1f%% | | | |\n", n, "fast", n / tp, rate * 1e-12,
                       peak > 0 ? 100 * rate / peak : 0);
            }
        }
    }
    if (rc != 0) { fprintf(stderr, "bench_cuda: forward failed (kernel status %d)\n", rc); return 1; }
    free(logits); free(tokens);
    kv_cache_free(&kv); forward_buffers_free(&fb); kern_cuda_ctx_free(kc);
    be->mem_free(block);
    free(bm.w.layers);
    return 0;
}
