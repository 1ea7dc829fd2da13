/*
 * random_model.h — a model with LongLLaMA-3B's layer shape (hidden 3200, ffn 8640, 32 heads x 100, vocab
 * 32000) and random weights, built in host memory for the benchmarks (no checkpoint file, no disk).
 * Header-only: each benchmark is one executable.
 */
#ifndef MNEMO_BENCH_RANDOM_MODEL_H
#define MNEMO_BENCH_RANDOM_MODEL_H

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "kernels.h"
#include "llama_weights.h"
#include "model_config.h"

static void *bench_alloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0) {
        fprintf(stderr, "bench: out of memory (%zu MB)\n", bytes >> 20);
        exit(1);
    }
    return p;
}

/* Random weights in [-0.05, 0.05), filled in parallel (a xorshift per thread); quantized types are quantized from
 * fp32 in chunks of 102400 weights (whole 32- and 256-blocks; rows of 3200 / 8640 or 3072 / 8192 hold whole
 * blocks of their types). */
static weight_ref bench_random_weight(size_t n, kern_dtype dt) {
    if (kern_dtype_is_quant(dt)) {
        weight_ref f = bench_random_weight(n, KERN_F32);
        void *q = bench_alloc(kern_dtype_bytes(dt, (int64_t)n));
        const size_t chunk = 3200 * 32;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i += chunk)
            kern_quantize_row((char *)q + kern_dtype_bytes(dt, (int64_t)i), (const float *)f.data + i, dt,
                              (int64_t)(n - i < chunk ? n - i : chunk));
        free((void *)f.data);
        return (weight_ref){q, dt};
    }
    void *p = bench_alloc(n * kern_dtype_size(dt));
#pragma omp parallel
    {
        uint64_t s = 0x9E3779B97F4A7C15ull ^ ((uint64_t)omp_get_thread_num() * 0x2545F4914F6CDD1Dull) ^ n;
#pragma omp for schedule(static)
        for (size_t i = 0; i < n; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            float v = (float)((s >> 40) * (1.0 / (1 << 24))) * 0.1f - 0.05f;
            if (dt == KERN_F32) ((float *)p)[i] = v;
            else if (dt == KERN_BF16) ((uint16_t *)p)[i] = kern_f32_to_bf16(v);
            else ((uint16_t *)p)[i] = kern_f32_to_f16(v);
        }
    }
    return (weight_ref){p, dt};
}

typedef struct {
    model_config cfg;
    llama_weights w;
} bench_model;

/* hidden, ffn, heads x head_dim and KV heads of the random model: LongLLaMA-3B's by default; k-quant weights need
 * rows of whole 256-blocks, which 3200 and 8640 are not, so benchmarks of them take BENCH_SHAPE_K256 (hidden 3072,
 * ffn 8192, 24 heads x 128: the nearest multiples of 256, about the same size). The GQA shapes of real models:
 * TinyLlama-1.1B's (32 query heads on 4 KV heads) and Llama-3-8B's (32 on 8). */
typedef struct { int hidden, ffn, heads, head_dim, kv_heads; } bench_shape;
#define BENCH_SHAPE_3B ((bench_shape){3200, 8640, 32, 100, 32})
#define BENCH_SHAPE_K256 ((bench_shape){3072, 8192, 24, 128, 24})
#define BENCH_SHAPE_TINYLLAMA ((bench_shape){2048, 5632, 32, 64, 4})
#define BENCH_SHAPE_LLAMA3_8B ((bench_shape){4096, 14336, 32, 128, 8})

/* vocab: 32000 (LongLLaMA-3B's) unless a benchmark matches another model's (bench_vs_llamacpp.py: 8000). */
static void bench_model_build_shape(bench_model *bm, int layers, kern_dtype dt, int max_pos, int vocab, bench_shape s) {
    memset(bm, 0, sizeof *bm);
    model_config *c = &bm->cfg;
    strcpy(c->architecture, "LlamaForCausalLM");
    c->hidden_size = s.hidden; c->intermediate_size = s.ffn; c->num_hidden_layers = layers;
    c->num_attention_heads = s.heads; c->num_key_value_heads = s.kv_heads; c->head_dim = s.head_dim;
    c->rms_norm_eps = 1e-6f; c->rope_theta = 10000.f; c->rope_scaling_factor = 1.f;
    c->max_position_embeddings = max_pos; c->vocab_size = vocab;
    size_t d = (size_t)s.hidden, ff = (size_t)s.ffn, V = (size_t)vocab, kvd = (size_t)s.kv_heads * (size_t)s.head_dim;
    kern_dtype ndt = kern_dtype_is_quant(dt) ? KERN_F32 : dt; /* norms: plain vectors, as in GGUF files */
    bm->w.tok_embd = bench_random_weight(V * d, dt);
    bm->w.out_norm = bench_random_weight(d, ndt);
    bm->w.lm_head = bench_random_weight(V * d, dt);
    bm->w.layers = calloc((size_t)layers, sizeof(layer_weights));
    for (int l = 0; l < layers; l++) {
        layer_weights *L = &bm->w.layers[l];
        L->attn_norm = bench_random_weight(d, ndt); L->ffn_norm = bench_random_weight(d, ndt);
        L->wq = bench_random_weight(d * d, dt); L->wk = bench_random_weight(kvd * d, dt);
        L->wv = bench_random_weight(kvd * d, dt); L->wo = bench_random_weight(d * d, dt);
        L->w_gate = bench_random_weight(ff * d, dt); L->w_up = bench_random_weight(ff * d, dt);
        L->w_down = bench_random_weight(d * ff, dt);
    }
    bm->w.bytes_per_token = (uint64_t)layers * (kern_dtype_bytes(dt, (int64_t)(2 * d * d + 2 * kvd * d + 3 * ff * d)) +
                                                kern_dtype_bytes(ndt, (int64_t)(2 * d))) +
                            kern_dtype_bytes(dt, (int64_t)(V * d)) + kern_dtype_bytes(ndt, (int64_t)d);
}

static inline void bench_model_build_vocab(bench_model *bm, int layers, kern_dtype dt, int max_pos, int vocab) {
    bench_model_build_shape(bm, layers, dt, max_pos, vocab, BENCH_SHAPE_3B);
}

static inline void bench_model_build(bench_model *bm, int layers, kern_dtype dt, int max_pos) {
    bench_model_build_vocab(bm, layers, dt, max_pos, 32000);
}

/* Frees the host weights (after an upload to a device they are no longer needed). */
static void bench_model_free_host(bench_model *bm, const llama_weights *host) {
    for (int l = 0; l < bm->cfg.num_hidden_layers; l++) {
        const layer_weights *L = &host->layers[l];
        const weight_ref *all[] = {&L->attn_norm, &L->ffn_norm, &L->wq, &L->wk, &L->wv, &L->wo,
                                   &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) free((void *)all[i]->data);
    }
    free((void *)host->tok_embd.data); free((void *)host->out_norm.data); free((void *)host->lm_head.data);
}

/* Attention FLOPs (QK^T and PV) of a prefill of n tokens after `past` cached ones. */
static inline double bench_prefill_attn_flops(const model_config *c, double n, double past) {
    double qd = (double)c->num_attention_heads * c->head_dim;
    /* causal: row i sees past + i + 1 keys; QK^T and PV are 2 FLOPs per (query, key, dim) each */
    double keys = n * past + n * (n + 1) / 2;
    return 4.0 * c->num_hidden_layers * qd * keys;
}

/* Matmul + attention FLOPs of a prefill of n tokens after `past` cached ones, logits for the last row only. */
static double bench_prefill_flops(const model_config *c, double n, double past) {
    double d = c->hidden_size, ff = c->intermediate_size, L = c->num_hidden_layers;
    double qd = (double)c->num_attention_heads * c->head_dim, kvd = (double)c->num_key_value_heads * c->head_dim;
    double mm = 2.0 * n * L * (2 * d * qd + 2 * d * kvd + 3 * ff * d) + 2.0 * d * c->vocab_size;
    return mm + bench_prefill_attn_flops(c, n, past);
}

#endif
