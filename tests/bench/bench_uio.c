/*
 * bench_uio.c — UIO-LLM compression at length, through the PUBLIC API (mnemo_model_load with
 * uio_dir, mnemo_context_new, mnemo_decode, mnemo_context_memory) on a small random-weight LLaMA with random UIO
 * weights (non-zero LoRA), written to a temp dir.
 *
 * What it measures, for each compression ratio r = chunk_size / num_memory, mode and length N:
 *   - prefill: wall time of one mnemo_decode over N random token ids (the tokenizer is bypassed), and the CPU time
 *     of all the process's threads over it (on a machine shared with other jobs, the work itself);
 *   - decode: per-token latency after the prefill, median and p90 of --decode single-token mnemo_decode calls (2
 *     untimed warm-up steps first). A step that completes a segment also compresses it: the median is the plain
 *     step, the p90 may include one compression;
 *   - KV + memory bytes per token: mnemo_context_memory after the prefill (the cache as allocated, n_ctx rows, +
 *     the stored entries' keys, values and kNN index + the cache entries' pre-RoPE keys), divided by N.
 * Modes (both with option (b), the memory budget, which lifts the reference's n_ctx bound; n_ctx = budget + C):
 *   b     uio_mem_budget = --budget: entries past it in the kNN store (mem_index, --knn-k, --dense-rows), the
 *         prompt segment by segment as the reference does (decoder pass, then compression)
 *   bc    the same with option (c), uio_encode_batch = --encode-batch: the prompt's segments through the encoder in
 *         batches, their decoder passes skipped (only the last token's logits are kept)
 * Every mode runs its lengths in increasing order while the prefill time predicted from the last two (power law,
 * exponent at least 1) fits what is left of --time-budget. At the end, per (ratio, mode): the least-squares line
 * prefill time = a N + b with R² and the log-log exponent (wall and CPU), and the decode latency's spread over the
 * lengths.
 * Also printed: bytes per token for the model's shape (analytic, f32 cache): the full KV cache, UIO at ratios 8
 * and 32 (its memory entries + at most budget + C cache rows), and LongLLaMA's memory (--ll-mem-layers of the
 * layers, bf16 keys + values; its local window and index not counted) — and the same for LongLLaMA-3B's shape
 * (26 layers, kv_dim 3200, 3 memory layers).
 *
 * The model: hidden 128, 2 heads x 64, ffn 344, 2 layers, vocab 32000, f32, random (uniform, scaled 1/sqrt(fan_in);
 * norms 1); UIO: num_memory 16, chunk_size 16 r, LoRA rank 8, alpha 16, A and B uniform, scaled so the LoRA delta
 * is ~0.1 of the base projection. tokenizer.model is copied from tests/fixtures (512 pieces; ids are random).
 *
 * usage: bench_uio [options]
 *   --lengths LIST     comma-separated, K/M suffixes (default 16K,32K,64K,128K,256K,512K,1M)
 *   --ratios LIST      compression ratios (default 8,32)
 *   --modes LIST       b,bc (default both)
 *   --budget N         <mem> entries kept in the cache (default 1024)
 *   --encode-batch N   segments per encoder forward in mode bc (default 8)
 *   --knn-k K          stored entries per query and head (default 128);  --dense-rows N  (default 0)
 *   --index NAME       auto (default: ivf-grow on the CPU), flat, brute, ivf, ivf-grow, hnsw
 *   --decode N         timed decode steps (default 32)
 *   --time-budget S    seconds per (ratio, mode), all lengths (default 300)
 *   --threads N        (default 0: one per core)
 *   --hidden D --heads H --ffn F --layers L --vocab V   model shape
 *   --ll-mem-layers N  LongLLaMA memory layers for the analytic row (default 2: mem_layers L/4, 3L/4 as bench_longctx)
 *   --json             JSON lines on stdout (one per run, one per fit, one for the bytes table); the table on stderr
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "engine.h"
#include "safetensors_write.h"

#define MAX_LENGTHS 16
#define MAX_RATIOS 4
#define WARMUP_STEPS 2
#define NUM_MEMORY 16
#define LORA_RANK 8

typedef struct {
    int64_t lengths[MAX_LENGTHS];
    int n_lengths;
    int ratios[MAX_RATIOS];
    int n_ratios;
    bool mode_b, mode_bc;
    int32_t budget, encode_batch, knn_k, decode, threads;
    int64_t dense_rows;
    mnemo_mem_index index;
    double time_budget;
    int hidden, heads, ffn, layers, vocab, ll_mem_layers;
    bool json;
} options;

static FILE *human;
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_uio: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static int64_t parse_len(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v <= 0) die("bad length '%s'", s);
    if (*end == 'K' || *end == 'k') v *= 1024, end++;
    else if (*end == 'M' || *end == 'm') v *= 1024 * 1024, end++;
    if (*end) die("bad length '%s'", s);
    return (int64_t)v;
}

static int int_arg(const char *name, const char *v, int lo, int hi) {
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > hi) die("%s needs an integer in %d..%d", name, lo, hi);
    return (int)x;
}

static void parse_options(options *o, int argc, char **argv) {
    *o = (options){.mode_b = true, .mode_bc = true, .budget = 1024, .encode_batch = 8, .knn_k = 128, .decode = 32,
                   .index = MNEMO_MEM_INDEX_AUTO, .time_budget = 300, .hidden = 128, .heads = 2, .ffn = 344,
                   .layers = 2, .vocab = 32000, .ll_mem_layers = 2};
    const char *lengths = "16K,32K,64K,128K,256K,512K,1M", *ratios = "8,32";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true;
        if (!strcmp(a, "--lengths")) lengths = v;
        else if (!strcmp(a, "--ratios")) ratios = v;
        else if (!strcmp(a, "--modes")) {
            char mb[64];
            snprintf(mb, sizeof mb, "%s", v ? v : "");
            o->mode_b = o->mode_bc = false;
            for (char *t = strtok(mb, ","); t; t = strtok(NULL, ",")) {
                if (!strcmp(t, "b")) o->mode_b = true;
                else if (!strcmp(t, "bc")) o->mode_bc = true;
                else die("--modes takes b,bc");
            }
        } else if (!strcmp(a, "--budget")) o->budget = int_arg(a, v, 1, 1 << 24);
        else if (!strcmp(a, "--encode-batch")) o->encode_batch = int_arg(a, v, 1, 4096);
        else if (!strcmp(a, "--knn-k")) o->knn_k = int_arg(a, v, 0, 1 << 20);
        else if (!strcmp(a, "--dense-rows")) o->dense_rows = int_arg(a, v, 0, 1 << 30);
        else if (!strcmp(a, "--index")) {
            if (!v || mnemo_mem_index_parse(v, &o->index) != MNEMO_OK)
                die("--index: auto, flat, brute, ivf, ivf-grow, hnsw");
        } else if (!strcmp(a, "--decode")) o->decode = int_arg(a, v, 1, 100000);
        else if (!strcmp(a, "--time-budget")) o->time_budget = int_arg(a, v, 1, 1 << 20);
        else if (!strcmp(a, "--threads")) o->threads = int_arg(a, v, 0, 1024);
        else if (!strcmp(a, "--hidden")) o->hidden = int_arg(a, v, 16, 1 << 14);
        else if (!strcmp(a, "--heads")) o->heads = int_arg(a, v, 1, 256);
        else if (!strcmp(a, "--ffn")) o->ffn = int_arg(a, v, 16, 1 << 16);
        else if (!strcmp(a, "--layers")) o->layers = int_arg(a, v, 1, 256);
        else if (!strcmp(a, "--vocab")) o->vocab = int_arg(a, v, 512, 1 << 20);
        else if (!strcmp(a, "--ll-mem-layers")) o->ll_mem_layers = int_arg(a, v, 1, 256);
        else {
            takes = false;
            if (!strcmp(a, "--json")) o->json = true;
            else die("unknown option '%s' (see the file comment)", a);
        }
        if (takes) i++;
    }
    if (o->hidden % o->heads || (o->hidden / o->heads) % 2) die("hidden / heads must be an even head_dim");
    char buf[512];
    snprintf(buf, sizeof buf, "%s", lengths ? lengths : "");
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        if (o->n_lengths == MAX_LENGTHS) die("at most %d lengths", MAX_LENGTHS);
        o->lengths[o->n_lengths++] = parse_len(t);
    }
    snprintf(buf, sizeof buf, "%s", ratios ? ratios : "");
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        if (o->n_ratios == MAX_RATIOS) die("at most %d ratios", MAX_RATIOS);
        o->ratios[o->n_ratios++] = int_arg("--ratios", t, 1, 4096);
    }
    if (!o->n_lengths || !o->n_ratios) die("no lengths or ratios");
}

/* ------------------------------------------------------------------------------------------ the checkpoint */
static float *rand_floats(size_t n, float scale) {
    float *p = malloc(n * sizeof *p);
    if (!p) die("out of memory");
    for (size_t i = 0; i < n; i++) p[i] = scale == 0.f ? 1.f : bench_frand(&rng_state) * scale;
    return p;
}

typedef struct {
    char name[96];
    int64_t shape[3];
    int ndim;
    float *data;
} tensor_buf;

static void write_tensors(const char *path, tensor_buf *t, size_t n) {
    st_tensor *st = calloc(n, sizeof *st);
    for (size_t i = 0; i < n; i++)
        st[i] = (st_tensor){.name = t[i].name, .dtype = TENSOR_F32, .ndim = t[i].ndim, .shape = t[i].shape,
                            .data = t[i].data};
    char err[512];
    if (safetensors_write(path, st, n, NULL, 0, err, sizeof err) != 0) die("%s", err);
    for (size_t i = 0; i < n; i++) free(t[i].data);
    free(st);
}

static void add(tensor_buf *t, size_t *n, float scale, int ndim, int64_t a, int64_t b, int64_t c, const char *fmt,
                ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t[*n].name, sizeof t[*n].name, fmt, ap);
    va_end(ap);
    t[*n].ndim = ndim;
    t[*n].shape[0] = a;
    t[*n].shape[1] = b;
    t[*n].shape[2] = c;
    size_t cnt = (size_t)a * (size_t)(ndim > 1 ? b : 1) * (size_t)(ndim > 2 ? c : 1);
    t[*n].data = rand_floats(cnt, scale);
    (*n)++;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) die("cannot write %s: %s", path, strerror(errno));
}

static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    if (!a || !b) die("cannot copy %s to %s", from, to);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    fclose(a);
    if (fclose(b) != 0) die("writing %s failed", to);
}

static char g_root[256];

static void make_base(const options *o, const char *dir) {
    const int64_t d = o->hidden, f = o->ffn, V = o->vocab;
    const float sd = 1.f / sqrtf((float)d), sf = 1.f / sqrtf((float)f);
    size_t cap = 3 + 9 * (size_t)o->layers, n = 0;
    tensor_buf *t = calloc(cap, sizeof *t);
    add(t, &n, 1.f, 2, V, d, 0, "model.embed_tokens.weight");
    for (int l = 0; l < o->layers; l++) {
        const char *proj[] = {"q", "k", "v", "o"};
        for (int p = 0; p < 4; p++) add(t, &n, sd, 2, d, d, 0, "model.layers.%d.self_attn.%s_proj.weight", l, proj[p]);
        add(t, &n, sd, 2, f, d, 0, "model.layers.%d.mlp.gate_proj.weight", l);
        add(t, &n, sd, 2, f, d, 0, "model.layers.%d.mlp.up_proj.weight", l);
        add(t, &n, sf, 2, d, f, 0, "model.layers.%d.mlp.down_proj.weight", l);
        add(t, &n, 0.f, 1, d, 0, 0, "model.layers.%d.input_layernorm.weight", l);
        add(t, &n, 0.f, 1, d, 0, 0, "model.layers.%d.post_attention_layernorm.weight", l);
    }
    add(t, &n, 0.f, 1, d, 0, 0, "model.norm.weight");
    add(t, &n, sd, 2, V, d, 0, "lm_head.weight");
    char path[512], cfg[2048];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_tensors(path, t, n);
    free(t);
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": %d, "
             "\"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
             "\"num_key_value_heads\": %d, \"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-06, "
             "\"rope_theta\": 10000.0, \"rope_scaling\": null, \"hidden_act\": \"silu\", \"tie_word_embeddings\": "
             "false, \"bos_token_id\": 1, \"eos_token_id\": 2, \"torch_dtype\": \"float32\"}\n",
             o->vocab, o->hidden, o->ffn, o->layers, o->heads, o->heads);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_file(path, cfg);
    const char *src = __FILE__;
    char tok[1024];
    snprintf(tok, sizeof tok, "%.*s/../fixtures/tokenizer.model", (int)(strrchr(src, '/') - src), src);
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    copy_file(tok, path);
}

static void make_uio(const options *o, const char *dir, int ratio) {
    const int64_t d = o->hidden, r = LORA_RANK, kvd = o->hidden; /* no GQA in the bench model */
    const float sa = 1.f / sqrtf((float)d), sb = 0.1f / (2.f * sqrtf((float)r)); /* delta ~0.1 of the base */
    size_t n = 0;
    tensor_buf *t = calloc(2 + 8 * (size_t)o->layers, sizeof *t);
    add(t, &n, 1.f, 3, 1, 1, d, "encoder.retrieval_token");
    add(t, &n, 1.f, 3, 1, 1, d, "decoder.repeat_token");
    for (int l = 0; l < o->layers; l++) {
        add(t, &n, sa, 2, r, d, 0, "encoder.layers.%d.q_proj.lora_A", l);
        add(t, &n, sb, 2, d, r, 0, "encoder.layers.%d.q_proj.lora_B", l);
        add(t, &n, sa, 2, r, d, 0, "encoder.layers.%d.v_proj.lora_A", l);
        add(t, &n, sb, 2, kvd, r, 0, "encoder.layers.%d.v_proj.lora_B", l);
        add(t, &n, sa, 2, r, d, 0, "decoder.layers.%d.k_proj.lora_A", l);
        add(t, &n, sb, 2, kvd, r, 0, "decoder.layers.%d.k_proj.lora_B", l);
        add(t, &n, sa, 2, r, d, 0, "decoder.layers.%d.v_proj.lora_A", l);
        add(t, &n, sb, 2, kvd, r, 0, "decoder.layers.%d.v_proj.lora_B", l);
    }
    char path[512], cfg[256];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/uio.safetensors", dir);
    write_tensors(path, t, n);
    free(t);
    snprintf(cfg, sizeof cfg,
             "{\"num_memory\": %d, \"lora_rank\": %d, \"lora_alpha\": %d, \"lora_dropout\": 0, \"chunk_size\": %d}\n",
             NUM_MEMORY, LORA_RANK, 2 * LORA_RANK, NUM_MEMORY * ratio);
    snprintf(path, sizeof path, "%s/uio_config.json", dir);
    write_file(path, cfg);
}

static void remove_tree(void) {
    if (!g_root[0]) return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "bench_uio: could not remove %s\n", g_root);
}

/* ------------------------------------------------------------------------------------------ runs */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double load1(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double cpu_s(void) { /* every thread of the process: under contention, the work itself */
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    int64_t n;
    double prefill_cpu_s;
    double prefill_s, decode_ms_median, decode_ms_p90, bytes_per_token, load_before, load_after;
    mnemo_memory_stats ms;
    uint64_t kv_alloc;
} run_result;

static bool run_one(const options *o, mnemo_model *m, int ratio, bool batched, int64_t n, run_result *r) {
    mnemo_context_params cp = mnemo_context_default_params();
    cp.uio_mem_budget = o->budget;
    cp.n_ctx = o->budget + NUM_MEMORY * ratio;
    cp.mem_knn_k = o->knn_k;
    cp.mem_dense_rows = o->dense_rows;
    cp.mem_index = o->index;
    cp.uio_encode_batch = batched ? o->encode_batch : 1;
    mnemo_context *ctx = NULL;
    if (mnemo_context_new(m, &cp, &ctx) != MNEMO_OK) die("context: %s", mnemo_context_error(ctx));
    int32_t *ids = malloc((size_t)(n + WARMUP_STEPS + o->decode) * sizeof *ids);
    if (!ids) die("out of memory for %lld ids", (long long)n);
    for (int64_t i = 0; i < n + WARMUP_STEPS + o->decode; i++) ids[i] = 3 + (int32_t)(bench_next_u64(&rng_state) % 500);
    r->n = n;
    r->load_before = load1();
    double t0 = now_s(), c0 = cpu_s();
    if (n > INT32_MAX || mnemo_decode(ctx, ids, (int32_t)n) != MNEMO_OK) die("prefill: %s", mnemo_context_error(ctx));
    r->prefill_s = now_s() - t0;
    r->prefill_cpu_s = cpu_s() - c0;
    if (mnemo_context_memory(ctx, &r->ms) != MNEMO_OK) die("stats");
    r->kv_alloc = mnemo_context_kv_bytes(ctx);
    double *steps = malloc((size_t)o->decode * sizeof *steps);
    for (int i = 0; i < WARMUP_STEPS + o->decode; i++) {
        double s0 = now_s();
        if (mnemo_decode(ctx, ids + n + i, 1) != MNEMO_OK) die("decode: %s", mnemo_context_error(ctx));
        if (i >= WARMUP_STEPS) steps[i - WARMUP_STEPS] = 1e3 * (now_s() - s0);
    }
    qsort(steps, (size_t)o->decode, sizeof *steps, cmp_double);
    r->decode_ms_median = steps[o->decode / 2];
    r->decode_ms_p90 = steps[(o->decode * 9) / 10];
    r->load_after = load1();
    const mnemo_memory_stats *s = &r->ms;
    r->bytes_per_token =
        (double)(s->local_kv_bytes + s->mem_key_bytes + s->mem_value_bytes + s->mem_index_bytes) / (double)n;
    free(steps);
    free(ids);
    mnemo_context_free(ctx);
    return true;
}

/* ------------------------------------------------------------------------------------------ bytes per token */
static void bytes_table(const options *o, const char *shape, int layers, int kvd, int ll_layers) {
    const double full = 2.0 * layers * kvd * 4.0;       /* f32 keys + values, every layer */
    const double ll = 2.0 * ll_layers * kvd * 2.0;      /* bf16 keys + values, memory layers only */
    fprintf(human, "bytes per token, %s shape (%d layers, kv_dim %d), f32 cache:\n", shape, layers, kvd);
    fprintf(human, "  full KV cache               %10.0f\n", full);
    fprintf(human, "  LongLLaMA memory (%d layers, bf16, no window or index) %10.0f  (%.3fx full)\n", ll_layers, ll,
            ll / full);
    for (int i = 0; i < 2; i++) {
        int ratio = i ? 32 : 8;
        double uio = full / ratio; /* + the cache and the pre-RoPE keys of its entries: bounded, not per token */
        fprintf(human, "  UIO ratio %2d (memory entries)  %10.0f  (%.3fx full, %.2fx LongLLaMA)\n", ratio, uio,
                uio / full, uio / ll);
        if (o->json)
            printf("{\"kind\":\"bytes\",\"shape\":\"%s\",\"layers\":%d,\"kv_dim\":%d,\"ratio\":%d,\"full_cache\":%.0f,"
                   "\"longllama_mem\":%.0f,\"longllama_mem_layers\":%d,\"uio_mem\":%.0f}\n",
                   shape, layers, kvd, ratio, full, ll, ll_layers, uio);
    }
}

/* ------------------------------------------------------------------------------------------ main */
int main(int argc, char **argv) {
    mnemo_threads_prefer_passive(argv); /* a shared machine: idle OpenMP threads sleep */
    options o;
    parse_options(&o, argc, argv);
    human = o.json ? stderr : stdout;
    if (o.threads > 0) omp_set_num_threads(o.threads); /* FAISS's OpenMP team (the engine takes n_threads) */
    snprintf(g_root, sizeof g_root, "/tmp/mnemo-bench-uio-XXXXXX");
    if (!mkdtemp(g_root)) die("mkdtemp: %s", strerror(errno));
    atexit(remove_tree);
    char base[300];
    snprintf(base, sizeof base, "%s/base", g_root);
    mkdir(base, 0755);
    make_base(&o, base);
    fprintf(human, "model: hidden %d, %d heads, ffn %d, %d layers, vocab %d, f32; UIO num_memory %d, LoRA rank %d; "
                   "budget %d entries, knn-k %d, index %s, dense rows %lld, encode batch %d\n",
            o.hidden, o.heads, o.ffn, o.layers, o.vocab, NUM_MEMORY, LORA_RANK, o.budget, o.knn_k,
            mnemo_mem_index_name(o.index), (long long)o.dense_rows, o.encode_batch);
    bytes_table(&o, "bench", o.layers, o.hidden, o.ll_mem_layers);
    bytes_table(&o, "LongLLaMA-3B", 26, 3200, 3);

    for (int ri = 0; ri < o.n_ratios; ri++) {
        int ratio = o.ratios[ri];
        char uio[320];
        snprintf(uio, sizeof uio, "%s/uio_r%d", g_root, ratio);
        make_uio(&o, uio, ratio);
        mnemo_model_params mp = mnemo_model_default_params();
        mp.device = MNEMO_DEVICE_CPU;
        mp.n_threads = o.threads;
        mp.uio_dir = uio;
        mnemo_model *m = NULL;
        if (mnemo_model_load(base, &mp, &m) != MNEMO_OK) die("load: %s", mnemo_model_error(m));
        for (int mode = 0; mode < 2; mode++) {
            if (mode == 0 ? !o.mode_b : !o.mode_bc) continue;
            const char *mname = mode ? "bc" : "b";
            run_result res[MAX_LENGTHS];
            int nr = 0;
            double spent = 0;
            fprintf(human, "ratio %d (chunk_size %d), mode %s:\n%10s %10s %12s %10s %10s %10s %12s %10s %8s\n",
                    ratio, NUM_MEMORY * ratio, mname, "N", "prefill_s", "us/token", "cpu_s", "dec_med_ms",
                    "dec_p90_ms", "bytes/token", "entries", "load1");
            for (int li = 0; li < o.n_lengths; li++) {
                int64_t n = o.lengths[li];
                if (nr >= 2) { /* predict from the last two: t ~ N^max(1, e) */
                    double e = log(res[nr - 1].prefill_s / res[nr - 2].prefill_s) /
                               log((double)res[nr - 1].n / (double)res[nr - 2].n);
                    double pred = res[nr - 1].prefill_s * pow((double)n / (double)res[nr - 1].n, e > 1 ? e : 1);
                    if (spent + pred > o.time_budget) {
                        fprintf(human, "  stopped before N=%lld: predicted %.0f s, %.0f s left of %.0f\n", (long long)n,
                                pred, o.time_budget - spent, o.time_budget);
                        break;
                    }
                }
                double w0 = now_s();
                run_result *r = &res[nr];
                run_one(&o, m, ratio, mode == 1, n, r);
                spent += now_s() - w0;
                nr++;
                fprintf(human, "%10lld %10.2f %12.2f %10.2f %10.3f %10.3f %12.1f %10llu %4.2f/%4.2f\n", (long long)n,
                        r->prefill_s, 1e6 * r->prefill_s / (double)n, r->prefill_cpu_s, r->decode_ms_median,
                        r->decode_ms_p90,
                        r->bytes_per_token, (unsigned long long)r->ms.mem_entries, r->load_before, r->load_after);
                if (o.json)
                    printf("{\"kind\":\"run\",\"ratio\":%d,\"chunk_size\":%d,\"mode\":\"%s\",\"n\":%lld,"
                           "\"prefill_s\":%.4f,\"prefill_cpu_s\":%.4f,"
                           "\"prefill_us_per_token\":%.3f,\"decode_ms_median\":%.4f,\"decode_ms_p90\":%.4f,"
                           "\"decode_steps\":%d,\"mem_entries\":%llu,\"mem_tokens\":%llu,\"local_tokens\":%d,"
                           "\"local_kv_bytes\":%llu,\"mem_key_bytes\":%llu,\"mem_value_bytes\":%llu,"
                           "\"mem_index_bytes\":%llu,\"kv_mem_bytes_per_token\":%.2f,\"budget\":%d,\"knn_k\":%d,"
                           "\"index\":\"%s\",\"encode_batch\":%d,\"load1_before\":%.2f,\"load1_after\":%.2f}\n",
                           ratio, NUM_MEMORY * ratio, mname, (long long)n, r->prefill_s, r->prefill_cpu_s,
                           1e6 * r->prefill_s / (double)n, r->decode_ms_median, r->decode_ms_p90, o.decode,
                           (unsigned long long)r->ms.mem_entries, (unsigned long long)r->ms.mem_tokens,
                           r->ms.local_tokens, (unsigned long long)r->ms.local_kv_bytes,
                           (unsigned long long)r->ms.mem_key_bytes, (unsigned long long)r->ms.mem_value_bytes,
                           (unsigned long long)r->ms.mem_index_bytes, r->bytes_per_token, o.budget, o.knn_k,
                           mnemo_mem_index_name(mnemo_mem_index_resolve(m, o.index)), mode ? o.encode_batch : 1,
                           r->load_before, r->load_after);
                fflush(stdout);
            }
            if (nr < 2) continue;
            /* least squares t = a N + b with R^2, and the log-log exponent, for wall and CPU time */
            for (int which = 0; which < 2; which++) {
                double sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0;
                for (int i = 0; i < nr; i++) {
                    double x = (double)res[i].n, y = which ? res[i].prefill_cpu_s : res[i].prefill_s;
                    sx += x, sy += y, sxx += x * x, sxy += x * y, syy += y * y;
                }
                double k = nr, a = (k * sxy - sx * sy) / (k * sxx - sx * sx), b = (sy - a * sx) / k;
                double ss_res = 0, ss_tot = syy - sy * sy / k;
                for (int i = 0; i < nr; i++) {
                    double e = (which ? res[i].prefill_cpu_s : res[i].prefill_s) - (a * (double)res[i].n + b);
                    ss_res += e * e;
                }
                double r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 1;
                double y0 = which ? res[0].prefill_cpu_s : res[0].prefill_s;
                double y1 = which ? res[nr - 1].prefill_cpu_s : res[nr - 1].prefill_s;
                double expo = log(y1 / y0) / log((double)res[nr - 1].n / (double)res[0].n);
                double dmin = 1e30, dmax = 0;
                for (int i = 0; i < nr; i++) {
                    dmin = fmin(dmin, res[i].decode_ms_median);
                    dmax = fmax(dmax, res[i].decode_ms_median);
                }
                const char *what = which ? "cpu" : "wall";
                fprintf(human, "  fit (%s): prefill = %.4g us/token * N + %.3g s, R^2 = %.5f; log-log exponent %.3f",
                        what, 1e6 * a, b, r2, expo);
                if (!which)
                    fprintf(human, "; decode median %.3f..%.3f ms over N = %lld..%lld (max/min %.2f)", dmin, dmax,
                            (long long)res[0].n, (long long)res[nr - 1].n, dmax / dmin);
                fputc('\n', human);
                if (o.json)
                    printf("{\"kind\":\"fit\",\"time\":\"%s\",\"ratio\":%d,\"mode\":\"%s\",\"n_min\":%lld,"
                           "\"n_max\":%lld,\"runs\":%d,\"slope_us_per_token\":%.4f,\"intercept_s\":%.4f,\"r2\":%.6f,"
                           "\"loglog_exponent\":%.4f,\"decode_ms_min\":%.4f,\"decode_ms_max\":%.4f}\n",
                           what, ratio, mname, (long long)res[0].n, (long long)res[nr - 1].n, nr, 1e6 * a, b, r2, expo,
                           dmin, dmax);
            }
            fflush(stdout);
        }
        mnemo_model_free(m);
    }
    return 0;
}
