/*
 * bench_engine.c — CPU prefill and decode throughput of the real forward pass (llama_forward) on a random
 * model with LongLLaMA-3B's layer shape (hidden 3200, ffn 8640, 32 heads x 100, vocab 32000), measured against
 * the machine's own limits taken in the same run:
 *   - decode: weight + KV bytes read per token / read-only bandwidth (a vectorised sum over 256 MB, all threads,
 *     measured right after each token)  ->  fraction of the bandwidth bound (copy bandwidth also shown)
 *   - prefill: the time the FLOPs would take at the peak of the instructions the kernels use — the matmuls at
 *     the bf16 dot-product peak (vdpbf16ps) when bf16 weights take that path (FAST mode, the default; see
 *     kernels_cpu_paths.h, --set cpu.gemm), q8_0/q4_0 weights at the int8 dot-product peak (vpdpbusd) of their
 *     VNNI GEMM (or bf16's where they take dequantized bf16 panels), else at the f32 FMA peak; attention
 *     at the f32 FMA peak — over the measured time, the peaks measured (bench_peak.h) right after each of three
 *     timed prefills  ->  fraction of the instruction-set bound
 * Weights live in memory (no checkpoint file), so the run needs no disk; the code path is the engine's.
 *
 * usage: bench_engine [--layers N] [--prompt N] [--decode N] [--threads N]
 *                     [--dtype f32|bf16|both|q8_0|q4_0|q4_1|q5_0|q5_1|q2_K|q3_K|q4_K|q5_K|q6_K] [--shape 3b|k256|tinyllama|llama3-8b]
 *                     [--vocab N] [--json] [--set NAME=VALUE,...]   (kernel settings, kernels.h)
 *                     [--model DIR|FILE.gguf]   (--model: a real checkpoint instead of the random one: its shape and
 *                     dtypes; --shape k256: hidden 3072, ffn 8192, 24 x 128, the default for q4_K / q6_K, whose rows
 *                     must be whole 256-blocks; tinyllama: hidden 2048, ffn 5632, 32 heads x 64 on 4 KV heads;
 *                     llama3-8b: hidden 4096, ffn 14336, 32 x 128 on 8 KV heads)
 * --json adds one JSON object per dtype on its own line (tests/bench/bench_vs_llamacpp.py reads it).
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_peak.h"
#include "engine_impl.h"
#include "kernels.h"
#include "llama_forward.h"
#include "random_model.h"

/* Copy buffers for the bandwidth bound: 2 x 256 MB, far past any cache. */
typedef struct { float *a, *b; size_t n; int threads; } copy_bufs;

static copy_bufs copy_bufs_new(int threads) {
    copy_bufs c = {NULL, NULL, (size_t)1 << 26, threads};
    c.a = bench_alloc(c.n * 4);
    c.b = bench_alloc(c.n * 4);
#pragma omp parallel for num_threads(threads)
    for (size_t i = 0; i < c.n; i++) { c.a[i] = (float)(i & 1023); c.b[i] = 0.f; }
    return c;
}

/* One copy (memcpy per thread slice; glibc streams large copies with non-temporal stores, so bytes read +
 * bytes written is the real traffic), in bytes moved per second. */
static double copy_bw_once(const copy_bufs *c) {
    double t = bench_now_s();
#pragma omp parallel num_threads(c->threads)
    {
        size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
        size_t lo = c->n * id / nt, hi = c->n * (id + 1) / nt;
        memcpy(c->b + lo, c->a + lo, (hi - lo) * 4);
    }
    return 2.0 * (double)c->n * 4 / (bench_now_s() - t);
}

static volatile float read_sink; /* keeps the read loop alive */

/* One read-only pass (a vectorised sum over the copy's destination), in bytes read per second. */
static double read_bw_once(const copy_bufs *c) {
    const float *b = c->b;
    size_t n = c->n;
    float sum = 0.f;
    double t = bench_now_s();
#pragma omp parallel for simd num_threads(c->threads) reduction(+ : sum) schedule(static)
    for (size_t i = 0; i < n; i++) sum += b[i]; /* simd: independent partial sums, not one latency chain */
    t = bench_now_s() - t;
    read_sink = sum;
    return (double)n * 4 / t;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v[0..n) and returns its median (0 when empty): v[0] and v[n-1] are then the range. */
static double sort_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n ? v[n / 2] : 0;
}

static double sgemm_peak(int m) {
    const int shapes[][2] = {{8640, 3200}, {3200, 8640}, {3200, 3200}};
    double best = 0;
    for (int s = 0; s < 3; s++) {
        int n = shapes[s][0], k = shapes[s][1];
        float *x = bench_alloc((size_t)m * k * 4), *w = bench_alloc((size_t)n * k * 4), *y = bench_alloc((size_t)m * n * 4);
        for (size_t i = 0; i < (size_t)m * k; i++) x[i] = 0.001f * (float)(i % 97);
        for (size_t i = 0; i < (size_t)n * k; i++) w[i] = 0.001f * (float)(i % 89);
        for (int r = 0; r < 3; r++) {
            double t = bench_now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.f, x, k, w, k, 0.f, y, n);
            t = bench_now_s() - t;
            double f = 2.0 * m * n * k / t;
            if (f > best) best = f;
        }
        free(x); free(w); free(y);
    }
    return best;
}

/* --set: kernel settings for the contexts (kernels.h), e.g. cpu.gemm=exact,cpu.f32gemm=off. */
static const char *settings;

/* The contexts' GEMM mode (kernels_cpu_paths.h): FAST unless --set cpu.gemm=exact. */
static int gemm_fast(void) { return !(settings && strstr(settings, "cpu.gemm=exact")); }

/* model_path: a checkpoint directory or GGUF file to run instead of the random model (its own shape and dtypes). */
static void run(int layers, int vocab, kern_dtype dt, int n_prompt, int n_decode, int threads, const copy_bufs *cb,
                int json, const char *model_path, bench_shape shape) {
    bench_model bm;
    mnemo_model *file_model = NULL;
    if (model_path) {
        mnemo_model_params mp = mnemo_model_default_params();
        mp.device = MNEMO_DEVICE_CPU;
        if (mnemo_model_load(model_path, &mp, &file_model) != MNEMO_OK) {
            fprintf(stderr, "bench: %s\n", mnemo_model_error(file_model));
            exit(1);
        }
        bm.cfg = file_model->cfg;
        bm.w = file_model->w;
        layers = bm.cfg.num_hidden_layers;
        vocab = bm.cfg.vocab_size;
        dt = bm.w.layers[0].wq.dt;
        if (n_prompt + n_decode > bm.cfg.max_position_embeddings) bm.cfg.max_position_embeddings = n_prompt + n_decode;
    } else {
        bench_model_build_shape(&bm, layers, dt, n_prompt + n_decode > 2048 ? n_prompt + n_decode : 2048, vocab, shape);
    }
    const model_config *c = &bm.cfg;
    kern_ctx *kc = kern_cpu_ctx_new(threads);
    char why[256];
    if (kern_ctx_settings(kern_cpu_backend(), kc, settings, why, sizeof why) != KERN_OK) {
        fprintf(stderr, "bench_engine: --set: %s\n", why);
        exit(2);
    }
    kv_cache kv;
    forward_buffers fb;
    if (kv_cache_init(&kv, c, n_prompt + n_decode, kern_cpu_backend()) ||
        forward_buffers_init(&fb, c, n_prompt, kern_cpu_backend())) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    float *logits = bench_alloc((size_t)c->vocab_size * 4);
    int32_t *tokens = malloc((size_t)n_prompt * sizeof *tokens);
    for (int i = 0; i < n_prompt; i++) tokens[i] = (i * 7919) % c->vocab_size;
    const kern_backend *be = kern_cpu_backend();

    /* prefill: warm once (page faults, scratch), then three timed runs, each paired with the peaks measured
     * right after it (the machine's speed drifts); the headline is the median fraction of the bound. */
    llama_forward(c, &bm.w, be, kc, &kv, &fb, tokens, n_prompt, 0, n_prompt - 1, logits);
    double n = n_prompt, t_prefill = 0, pf_ratio[3];
    double att = bench_prefill_attn_flops(c, n, 0), mm = bench_prefill_flops(c, n, 0) - att, peak_mm = 0;
    const char *isa_f32 = "?", *isa_mm = "?";
    int rc = 0;
    for (int r = 0; r < 3; r++) {
        double t = bench_now_s();
        rc |= llama_forward(c, &bm.w, be, kc, &kv, &fb, tokens, n_prompt, 0, n_prompt - 1, logits);
        t = bench_now_s() - t;
        t_prefill += t / 3;
        double pf32 = bench_peak(threads, 0, &isa_f32);
        /* FAST: bf16 weights use vdpbf16ps; q8_0/q4_0 ones (n_prompt rows) the int8 VNNI GEMM's vpdpbusd, or
         * without VNNI the bf16 panels' vdpbf16ps (kernels_cpu_paths.h); the rest the f32 FMA */
        int quant_gemm = kern_dtype_is_quant(dt) && kern_cpu_qpanel_available();
        /* the int8 GEMM packs q8_0 / q4_0 / q4_K; the other types take the bf16 panels */
        int vnni_gemm = quant_gemm && (dt == KERN_Q8_0 || dt == KERN_Q4_0 || dt == KERN_Q4_K);
        double pmm = 0;
        if (gemm_fast() && vnni_gemm && n_prompt >= KERN_CPU_QGEMM_MIN_ROWS) pmm = bench_peak(threads, 2, &isa_mm);
        if (gemm_fast() && pmm == 0 && (dt == KERN_BF16 || (quant_gemm && n_prompt >= KERN_CPU_QPANEL_BF16_MIN_ROWS)))
            pmm = bench_peak(threads, 1, &isa_mm);
        if (pmm == 0) pmm = pf32, isa_mm = isa_f32;
        peak_mm += pmm / 3;
        pf_ratio[r] = (mm / pmm + att / pf32) / t;
    }
    double pf_med = sort_median(pf_ratio, 3);
    double L = layers, prefill_rate = bench_prefill_flops(c, n, 0) / t_prefill;

    /* decode: one token at a time after the prompt. The memory bandwidth of a shared machine drifts by tens of
     * percent within seconds, so every token is paired with a copy and a read-only pass measured right after it
     * (best of two each), and the headline figure is the median of the per-token ratios. */
    double t_dec = 0, bytes = 0, bw_sum = 0, rd_sum = 0;
    double *ratio = malloc((size_t)n_decode * sizeof *ratio), *ratio_rd = malloc((size_t)n_decode * sizeof *ratio_rd);
    int done = 0;
    for (int i = 0; i < n_decode && rc == 0; i++, done++) {
        int32_t tok = (i * 31) % c->vocab_size;
        double t0 = bench_now_s();
        rc = llama_forward(c, &bm.w, be, kc, &kv, &fb, &tok, 1, n_prompt + i, 0, logits);
        double ti = bench_now_s() - t0;
        double bi = (double)bm.w.bytes_per_token + 2.0 * L * (n_prompt + i + 1) * kv.kv_dim * 4;
        double bw = fmax(copy_bw_once(cb), copy_bw_once(cb)), rd = fmax(read_bw_once(cb), read_bw_once(cb));
        t_dec += ti;
        bytes += bi;
        bw_sum += bw;
        rd_sum += rd;
        ratio[i] = bi / bw / ti;
        ratio_rd[i] = bi / rd / ti;
    }
    double med = sort_median(ratio, done), med_rd = sort_median(ratio_rd, done), tok_s = done / t_dec;
    printf("%-5s layers %d  prefill %4d tok: %7.1f tok/s  %6.1f GFLOP/s = %5.1f%% of the %s bound (matmuls at "
           "%.0f GFLOP/s; median of 3, %.1f-%.1f%%) | decode: %6.2f tok/s  %6.1f GB/s weights+KV = %5.1f%% of "
           "read-only bandwidth %5.1f GB/s (median per token; range %.1f-%.1f%%); copy %5.1f GB/s: %5.1f%%  (rc %d)\n",
           kern_dtype_name(dt), layers, n_prompt, n / t_prefill, prefill_rate * 1e-9, 100 * pf_med, isa_mm,
           peak_mm * 1e-9, 100 * pf_ratio[0], 100 * pf_ratio[2], tok_s, bytes / t_dec * 1e-9, 100 * med_rd,
           rd_sum / done * 1e-9, done ? 100 * ratio_rd[0] : 0, done ? 100 * ratio_rd[done - 1] : 0,
           bw_sum / done * 1e-9, 100 * med, rc);
    if (json)
        printf("{\"bench\":\"bench_engine\",\"dtype\":\"%s\",\"hidden\":%d,\"ffn\":%d,\"layers\":%d,"
               "\"vocab\":%d,\"threads\":%d,"
               "\"prompt\":%d,\"prefill_tok_s\":%.3f,\"prefill_gflop_s\":%.3f,\"prefill_frac\":%.4f,\"prefill_isa\":\"%s\","
               "\"decode_depth\":%d,\"decode_tokens\":%d,\"decode_tok_s\":%.4f,\"decode_gb_s\":%.3f,"
               "\"read_gb_s\":%.3f,\"decode_frac_read\":%.4f,\"rc\":%d}\n",
               kern_dtype_name(dt), c->hidden_size, c->intermediate_size, layers, vocab, threads, n_prompt,
               n / t_prefill, prefill_rate * 1e-9, pf_med,
               isa_mm, n_prompt, done, tok_s, bytes / t_dec * 1e-9, rd_sum / done * 1e-9, med_rd, rc);
    fflush(stdout);
    free(ratio);
    free(ratio_rd);
    free(logits); free(tokens);
    kv_cache_free(&kv); forward_buffers_free(&fb); kern_cpu_ctx_free(kc);
    if (file_model) {
        mnemo_model_free(file_model);
        return;
    }
    bench_model_free_host(&bm, &bm.w);
    free(bm.w.layers);
}

int main(int argc, char **argv) {
    /* measure what mnemo and mnemo-server run: idle OpenMP workers sleep (OMP_WAIT_POLICY=active opts out); with
     * the spinning default a 2-thread decode beside other work fell from 46 to 6 tok/s */
    mnemo_threads_prefer_passive(argv);
    int layers = 4, n_prompt = 512, n_decode = 32, threads = 0, vocab = 32000, json = 0;
    const char *dts = "both", *model_path = NULL, *shape_name = NULL;
    for (int i = 1; i < argc; i += 2) {
        if (!strcmp(argv[i], "--json")) { json = 1; i--; continue; } /* the one flag without a value */
        if (i + 1 >= argc) { fprintf(stderr, "%s needs a value\n", argv[i]); return 2; }
        if (!strcmp(argv[i], "--layers")) layers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--vocab")) vocab = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt")) n_prompt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--decode")) n_decode = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dtype")) dts = argv[i + 1];
        else if (!strcmp(argv[i], "--model")) model_path = argv[i + 1];
        else if (!strcmp(argv[i], "--shape")) shape_name = argv[i + 1];
        else if (!strcmp(argv[i], "--set")) settings = argv[i + 1];
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    if (layers < 1 || n_prompt < 1 || n_decode < 1 || threads < 0 || vocab < 1) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    static const struct { const char *name; kern_dtype dt; } quant[] = {
        {"q8_0", KERN_Q8_0}, {"q4_0", KERN_Q4_0}, {"q4_K", KERN_Q4_K}, {"q6_K", KERN_Q6_K}, {"q4_1", KERN_Q4_1},
        {"q5_0", KERN_Q5_0}, {"q5_1", KERN_Q5_1}, {"q2_K", KERN_Q2_K}, {"q3_K", KERN_Q3_K}, {"q5_K", KERN_Q5_K}};
    int qi = -1;
    for (int i = 0; i < (int)(sizeof quant / sizeof *quant); i++)
        if (!strcmp(dts, quant[i].name)) qi = i;
    if (strcmp(dts, "f32") && strcmp(dts, "bf16") && strcmp(dts, "both") && qi < 0) {
        fprintf(stderr, "unknown --dtype %s (f32, bf16, both, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K "
                "or q6_K)\n", dts);
        return 2;
    }
    /* k-quants need rows of whole 256-blocks: their default shape is k256 */
    int k256 = shape_name ? !strcmp(shape_name, "k256") : qi >= 0 && kern_dtype_is_kquant(quant[qi].dt);
    int gqa = shape_name && (!strcmp(shape_name, "tinyllama") || !strcmp(shape_name, "llama3-8b")); /* 256-multiples */
    if (shape_name && strcmp(shape_name, "k256") && strcmp(shape_name, "3b") && !gqa) {
        fprintf(stderr, "unknown --shape %s (3b, k256, tinyllama or llama3-8b)\n", shape_name);
        return 2;
    }
    if (!k256 && !gqa && qi >= 0 && kern_dtype_is_kquant(quant[qi].dt)) {
        fprintf(stderr, "--dtype %s needs rows of whole 256-blocks: --shape k256, tinyllama or llama3-8b\n", dts);
        return 2;
    }
    bench_shape shape = k256 ? BENCH_SHAPE_K256 : !gqa ? BENCH_SHAPE_3B
                        : !strcmp(shape_name, "tinyllama") ? BENCH_SHAPE_TINYLLAMA : BENCH_SHAPE_LLAMA3_8B;
    kern_ctx *probe = kern_cpu_ctx_new(threads);
    threads = kern_ctx_threads(probe);
    kern_cpu_ctx_free(probe);
    double peak = sgemm_peak(n_prompt);
    copy_bufs cb = copy_bufs_new(threads);
    double bw = 0, rd = 0;
    for (int r = 0; r < 5; r++) bw = fmax(bw, copy_bw_once(&cb)), rd = fmax(rd, read_bw_once(&cb));
    const char *isa = "?";
    double fma = bench_peak(threads, 0, &isa), dot = bench_peak(threads, 1, NULL);
    printf("machine: %d threads, read-only bandwidth %.1f GB/s (best of 5; copy %.1f GB/s); %s peak %.1f GFLOP/s, "
           "AVX512_BF16 dot-product peak %.1f GFLOP/s (0: not used), OpenBLAS sgemm %.1f GFLOP/s (m=%d)\n", threads,
           rd * 1e-9, bw * 1e-9, isa, fma * 1e-9, dot * 1e-9, peak * 1e-9, n_prompt);
    if (!model_path)
        printf("model: %s (hidden %d, ffn %d, %d heads x %d on %d KV heads, vocab %d)\n",
               k256 ? "LongLLaMA-3B's size in multiples of 256" : !gqa ? "LongLLaMA-3B layer shape"
               : shape.kv_heads == 4 ? "TinyLlama-1.1B layer shape" : "Llama-3-8B layer shape", shape.hidden,
               shape.ffn, shape.heads, shape.head_dim, shape.kv_heads, vocab);
    if (model_path) {
        printf("model: %s\n", model_path);
        run(layers, vocab, KERN_F32, n_prompt, n_decode, threads, &cb, json, model_path, shape);
    } else if (qi >= 0) { /* block-quantized weights (quant_matmul.c) */
        run(layers, vocab, quant[qi].dt, n_prompt, n_decode, threads, &cb, json, NULL, shape);
    } else {
        if (strcmp(dts, "bf16")) run(layers, vocab, KERN_F32, n_prompt, n_decode, threads, &cb, json, NULL, shape);
        if (strcmp(dts, "f32")) run(layers, vocab, KERN_BF16, n_prompt, n_decode, threads, &cb, json, NULL, shape);
    }
    free(cb.a);
    free(cb.b);
    return 0;
}
