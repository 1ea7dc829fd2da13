/*
 * bench_longctx.c — long-context scaling through the PUBLIC API (mnemo_model_load, mnemo_context_new,
 * mnemo_decode, mnemo_context_memory) on a small random-weight model in LongLLaMA layout.
 *
 * What it measures, for each mode and context length N:
 *   - prefill: the wall time of one mnemo_decode over N token ids (the tokenizer is bypassed);
 *   - peak RSS: each (mode, N) runs in a fresh fork()ed child, so getrusage's ru_maxrss (monotone over a
 *     process) is that run's own peak; the parent writes the checkpoint and never touches libengine, OpenMP or
 *     BLAS, so a child starts from a few MiB ("base" in the JSON: the child's VmRSS after model load and context
 *     creation; mmapped weights and the KV allocation count only once touched). The peak covers the prefill,
 *     the decode steps and the caller's own N token ids (4 bytes per token);
 *   - decode: per-token latency after the prefill, median (and p90) of --decode single-token mnemo_decode calls
 *     (2 untimed warm-up steps first);
 *   - KV + memory bytes per token: mnemo_context_memory after the prefill (local window KV + memory keys +
 *     values + kNN index, as allocated), divided by N.
 * Modes:
 *   dense     LongLlamaForCausalLM, dense memory attention (the released LongLLaMA behaviour)
 *   knn-flat  mem_knn_k = --knn-k (default 128) with the exact FAISS flat index
 *   knn-ivf-grow  same with memstore's growing IVF (rows/256 cells, retrained at each doubling from 8192 rows,
 *             two-level coarse search, nprobe 16: a query costs the same at any length; exact before)
 *   knn-ivf   same with FAISS IVF256,Flat (nprobe 16; trained once 9984 rows exist)  [not in the default set]
 *   knn-hnsw  same with FAISS HNSW32,Flat (efSearch 512)   [not in the default set: slow to build]
 *   auto      mnemo_context_default_params() as they are: dense up to 8192 memory rows, then top-128 through
 *             the AUTO index (IVF-grow on the CPU)   [not in the default set]
 *   llama     the same weights as LlamaForCausalLM (no mem_layers), full causal attention, n_ctx = N + decode
 * Every mode runs its lengths in increasing order under a time budget: before each length the prefill time is
 * predicted from the previous two (power law with the measured exponent, at least 1) and the mode stops when the
 * prediction exceeds what is left of its budget, or when the predicted peak RSS exceeds 85% of MemAvailable;
 * a child that runs past its hard limit (1.5x the budget left, at least 30 s) is killed (SIGALRM). Where and
 * why each mode stopped is printed.
 * At the end, per mode: least-squares fits of prefill time and of peak RSS against N (slope, intercept, R²),
 * the log-log exponent of prefill time (1 = linear, 2 = quadratic) with the exponent between successive lengths,
 * and a fit t = a·N + b·N² (no intercept) giving the length where the quadratic term equals the linear one.
 *
 * The model (written to a temp dir, deleted at exit unless --keep): hidden 256, 4 heads x 64, ffn 688, 4 layers,
 * vocab 32000, bf16 weights, random (uniform, scaled 1/sqrt(fan_in); norms 1); LongLLaMA config:
 * max_position_embeddings (the local window) 1024, last_context_length 512, mem_layers [1, 3], mem_dtype
 * bfloat16. The llama config is the same with max_position_embeddings = the longest length (weights are
 * random: RoPE range does not matter for timing). tokenizer.model is copied from tests/fixtures (512 pieces).
 *
 * usage: bench_longctx [options]
 *   --lengths LIST      comma-separated context lengths, K/M suffixes allowed (default 8K,16K,32K,64K,128K,256K)
 *   --1m                append 1M to the lengths
 *   --modes LIST        from dense,knn-flat,knn-ivf,knn-ivf-grow,knn-hnsw,llama,auto
 *                       (default dense,knn-flat,knn-ivf-grow,llama)
 *   --budget LIST       time budget of each mode, all its lengths together (load + prefill + decode), in seconds:
 *                       "S" for every mode or "mode=S,..." (defaults dense=120,knn-flat=150,knn-ivf=600,
 *                       knn-ivf-grow=600,knn-hnsw=300,llama=120,auto=600: about 15 minutes on 2 cores with the default lengths)
 *   --decode N          timed decode steps per run (default 16)
 *   --knn-k K           kNN rows per query and head (default 128)
 *   --threads N         compute threads of the engine, OpenBLAS and FAISS (default 0: one per core)
 *   --device D          cpu (default) or cuda: where the model runs (kNN searches stay on the host)
 *   --batch N           n_batch of the contexts (default 512)
 *   --hidden D --heads H --ffn F --layers L --window W --last-ctx N   model shape (defaults above;
 *                       mem_layers are layers L/4 and 3L/4, rounded)
 *   --dtype bf16|f32    weight dtype (default bf16)
 *   --tokenizer PATH    tokenizer.model to copy (default: tests/fixtures/tokenizer.model next to this source)
 *   --dir DIR           write the checkpoints under DIR instead of a fresh temp dir;  --keep  do not delete them
 *   --trace             also record, inside each prefill, when the tokens done first reach 4K·2^(i/4) (quarter
 *                       octaves): JSON "trace":[[tokens, seconds], ...] and, on the human side, the time per token
 *                       of each octave — the marginal cost as the memory grows, from one run
 *   --json              JSON lines on stdout (one per run, one per fit); the human table then goes to stderr
 *   -v                  say on stderr which run starts
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "engine.h"

#define MAX_LENGTHS 16
#define MAX_TRACE 64 /* quarter octaves from 4K: past 64M tokens */
#define MAX_MODES 7
#define WARMUP_STEPS 2

/* ------------------------------------------------------------------------------------------ options */
typedef enum { MODE_DENSE, MODE_KNN_FLAT, MODE_KNN_IVF, MODE_KNN_HNSW, MODE_LLAMA, MODE_KNN_IVF_GROW, MODE_AUTO } bench_mode;
static const char *const MODE_NAMES[] = {"dense", "knn-flat", "knn-ivf", "knn-hnsw", "llama", "knn-ivf-grow", "auto"};

typedef struct {
    int64_t lengths[MAX_LENGTHS];
    int n_lengths;
    bench_mode modes[MAX_MODES];
    int n_modes;
    double budget_s[MAX_MODES]; /* per mode, seconds */
    int decode_steps, knn_k, threads, batch;
    mnemo_device device;
    int hidden, heads, ffn, layers, window, last_ctx, vocab;
    bool bf16;
    const char *tokenizer, *dir;
    bool keep, json, verbose, trace;
} options;

static FILE *human; /* the table: stdout, or stderr with --json */

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("bench_longctx: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static int64_t parse_len(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (end == s) die("bad length '%s'", s);
    if (*end == 'k' || *end == 'K') v *= 1024, end++;
    else if (*end == 'm' || *end == 'M') v *= 1024 * 1024, end++;
    if ((*end && *end != ',') || v < 1 || v > 16.0 * 1024 * 1024) die("bad length '%s'", s);
    return (int64_t)v;
}

static void parse_lengths(options *o, const char *s) {
    o->n_lengths = 0;
    for (const char *p = s; *p;) {
        if (o->n_lengths == MAX_LENGTHS) die("at most %d lengths", MAX_LENGTHS);
        o->lengths[o->n_lengths++] = parse_len(p);
        const char *c = strchr(p, ',');
        p = c ? c + 1 : p + strlen(p);
    }
}

static void parse_modes(options *o, const char *s) {
    o->n_modes = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int m = -1;
        for (int i = 0; i < MAX_MODES; i++)
            if (!strcmp(t, MODE_NAMES[i])) m = i;
        if (m < 0) die("unknown mode '%s' (dense, knn-flat, knn-ivf, knn-ivf-grow, knn-hnsw, llama)", t);
        if (o->n_modes == MAX_MODES) die("too many modes");
        o->modes[o->n_modes++] = (bench_mode)m;
    }
    if (o->n_modes == 0) die("no modes");
}

/* "S" (every mode) or "mode=S,mode=S,..." */
static void parse_budgets(options *o, const char *s) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        double v = atof(eq ? eq + 1 : t);
        if (!(v > 0)) die("bad budget '%s'", t);
        int m = -1;
        if (eq) {
            *eq = 0;
            for (int i = 0; i < MAX_MODES; i++)
                if (!strcmp(t, MODE_NAMES[i])) m = i;
            if (m < 0) die("unknown mode '%s' in --budget", t);
            o->budget_s[m] = v;
        } else {
            for (int i = 0; i < MAX_MODES; i++) o->budget_s[i] = v;
        }
    }
}

static int int_arg(const char *name, const char *v, int lo, int hi) {
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) die("%s must be an integer in %d..%d (got '%s')", name, lo, hi, v);
    return (int)x;
}

static void parse_options(options *o, int argc, char **argv) {
    *o = (options){.budget_s = {120, 150, 600, 300, 120, 600, 600}, .decode_steps = 16, .knn_k = 128, .threads = 0,
                   .batch = 512, .hidden = 256, .heads = 4, .ffn = 688, .layers = 4, .window = 1024,
                   .last_ctx = 512, .vocab = 32000, .bf16 = true};
    parse_lengths(o, "8K,16K,32K,64K,128K,256K");
    parse_modes(o, "dense,knn-flat,knn-ivf-grow,llama");
    bool add_1m = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--1m")) { add_1m = true; continue; }
        if (!strcmp(a, "--keep")) { o->keep = true; continue; }
        if (!strcmp(a, "--json")) { o->json = true; continue; }
        if (!strcmp(a, "-v")) { o->verbose = true; continue; }
        if (!strcmp(a, "--trace")) { o->trace = true; continue; }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            puts("usage: bench_longctx [--lengths 8K,16K,...] [--1m] [--modes dense,knn-flat,knn-ivf,knn-ivf-grow,knn-hnsw,llama]\n"
                 "       [--budget S|mode=S,...] [--decode N] [--knn-k K] [--threads N] [--batch N] [--device cpu|cuda]\n"
                 "       [--hidden D] [--heads H] [--ffn F] [--layers L] [--window W] [--last-ctx N]\n"
                 "       [--dtype bf16|f32] [--tokenizer PATH] [--dir DIR] [--keep] [--json] [-v]\n"
                 "(see the comment at the top of tests/bench/bench_longctx.c)");
            exit(0);
        }
        if (i + 1 >= argc) die("option %s needs a value (or is unknown)", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--lengths")) parse_lengths(o, v);
        else if (!strcmp(a, "--modes")) parse_modes(o, v);
        else if (!strcmp(a, "--budget")) parse_budgets(o, v);
        else if (!strcmp(a, "--decode")) o->decode_steps = int_arg(a, v, 1, 100000);
        else if (!strcmp(a, "--knn-k")) o->knn_k = int_arg(a, v, 1, 4096);
        else if (!strcmp(a, "--threads")) o->threads = int_arg(a, v, 0, 1024);
        else if (!strcmp(a, "--device")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda")) die("--device must be cpu or cuda (got '%s')", v);
            o->device = strcmp(v, "cuda") ? MNEMO_DEVICE_CPU : MNEMO_DEVICE_CUDA;
        }
        else if (!strcmp(a, "--batch")) o->batch = int_arg(a, v, 1, 1 << 20);
        else if (!strcmp(a, "--hidden")) o->hidden = int_arg(a, v, 8, 1 << 14);
        else if (!strcmp(a, "--heads")) o->heads = int_arg(a, v, 1, 256);
        else if (!strcmp(a, "--ffn")) o->ffn = int_arg(a, v, 8, 1 << 16);
        else if (!strcmp(a, "--layers")) o->layers = int_arg(a, v, 2, 256);
        else if (!strcmp(a, "--window")) o->window = int_arg(a, v, 16, 1 << 20);
        else if (!strcmp(a, "--last-ctx")) o->last_ctx = int_arg(a, v, 1, 1 << 20);
        else if (!strcmp(a, "--dtype")) {
            if (strcmp(v, "bf16") && strcmp(v, "f32")) die("--dtype is bf16 or f32");
            o->bf16 = !strcmp(v, "bf16");
        } else if (!strcmp(a, "--tokenizer")) o->tokenizer = v;
        else if (!strcmp(a, "--dir")) o->dir = v;
        else die("unknown option %s (--help lists them)", a);
    }
    if (add_1m) {
        if (o->n_lengths == MAX_LENGTHS) die("too many lengths");
        o->lengths[o->n_lengths++] = 1024 * 1024;
    }
    for (int i = 1; i < o->n_lengths; i++)
        if (o->lengths[i] <= o->lengths[i - 1]) die("--lengths must increase");
    if (o->hidden % o->heads) die("--hidden must be a multiple of --heads");
    if (o->last_ctx > o->window) die("--last-ctx must be <= --window");
    if (o->lengths[o->n_lengths - 1] + WARMUP_STEPS + o->decode_steps > INT32_MAX) die("length too large");
}

/* ------------------------------------------------------------------------------------------ checkpoint */
static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rng_next(void) { return bench_next_u64(&rng_state); }

static uint16_t f32_to_bf16(float f) { /* round to nearest even (values here are finite) */
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFF + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

typedef struct {
    char name[96];
    int64_t rows, cols; /* cols 0: a vector */
    float scale;        /* uniform in [-scale, scale); 0: all ones (norm weights) */
} tensor_spec;

static int n_tensors(const options *o) { return 3 + 9 * o->layers; }

static void tensor_specs(const options *o, tensor_spec *t) {
    int i = 0;
    int64_t d = o->hidden, f = o->ffn, V = o->vocab;
    float sd = 1.f / sqrtf((float)d), sf = 1.f / sqrtf((float)f);
    t[i++] = (tensor_spec){"model.embed_tokens.weight", V, d, 1.f};
    for (int l = 0; l < o->layers; l++) {
        const char *proj[] = {"q", "k", "v", "o"};
        for (int p = 0; p < 4; p++) {
            t[i] = (tensor_spec){"", d, d, sd};
            snprintf(t[i++].name, 96, "model.layers.%d.self_attn.%s_proj.weight", l, proj[p]);
        }
        t[i] = (tensor_spec){"", f, d, sd};
        snprintf(t[i++].name, 96, "model.layers.%d.mlp.gate_proj.weight", l);
        t[i] = (tensor_spec){"", f, d, sd};
        snprintf(t[i++].name, 96, "model.layers.%d.mlp.up_proj.weight", l);
        t[i] = (tensor_spec){"", d, f, sf};
        snprintf(t[i++].name, 96, "model.layers.%d.mlp.down_proj.weight", l);
        t[i] = (tensor_spec){"", d, 0, 0};
        snprintf(t[i++].name, 96, "model.layers.%d.input_layernorm.weight", l);
        t[i] = (tensor_spec){"", d, 0, 0};
        snprintf(t[i++].name, 96, "model.layers.%d.post_attention_layernorm.weight", l);
    }
    t[i++] = (tensor_spec){"model.norm.weight", d, 0, 0};
    t[i++] = (tensor_spec){"lm_head.weight", V, d, sd};
}

/* model.safetensors: 8-byte header length, JSON header (space-padded to 8 bytes), tensors back to back. */
static void write_safetensors(const options *o, const char *path) {
    int nt = n_tensors(o);
    tensor_spec *t = calloc((size_t)nt, sizeof *t);
    tensor_specs(o, t);
    size_t esz = o->bf16 ? 2 : 4, cap = 256 + (size_t)nt * 192, len = 0;
    char *hdr = malloc(cap);
    len += (size_t)snprintf(hdr + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        uint64_t n = (uint64_t)t[i].rows * (uint64_t)(t[i].cols ? t[i].cols : 1), bytes = n * esz;
        if (t[i].cols)
            len += (size_t)snprintf(hdr + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],"
                                    "\"data_offsets\":[%llu,%llu]}", t[i].name, o->bf16 ? "BF16" : "F32",
                                    (long long)t[i].rows, (long long)t[i].cols, (unsigned long long)off,
                                    (unsigned long long)(off + bytes));
        else
            len += (size_t)snprintf(hdr + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld],"
                                    "\"data_offsets\":[%llu,%llu]}", t[i].name, o->bf16 ? "BF16" : "F32",
                                    (long long)t[i].rows, (unsigned long long)off, (unsigned long long)(off + bytes));
        off += bytes;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8) hdr[len++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) die("cannot write %s: %s", path, strerror(errno));
    uint8_t le[8];
    for (int b = 0; b < 8; b++) le[b] = (uint8_t)((uint64_t)len >> (8 * b));
    fwrite(le, 1, 8, f);
    fwrite(hdr, 1, len, f);
    enum { CHUNK = 1 << 16 };
    uint8_t *buf = malloc(CHUNK * 4);
    for (int i = 0; i < nt; i++) {
        uint64_t n = (uint64_t)t[i].rows * (uint64_t)(t[i].cols ? t[i].cols : 1);
        for (uint64_t done = 0; done < n;) {
            size_t m = n - done < CHUNK ? (size_t)(n - done) : CHUNK;
            for (size_t j = 0; j < m; j++) {
                float v = t[i].scale == 0.f ? 1.f : bench_frand(&rng_state) * t[i].scale;
                if (o->bf16) {
                    uint16_t h = f32_to_bf16(v);
                    memcpy(buf + 2 * j, &h, 2);
                } else {
                    memcpy(buf + 4 * j, &v, 4);
                }
            }
            fwrite(buf, esz, m, f);
            done += m;
        }
    }
    if (fclose(f) != 0) die("writing %s failed", path);
    free(buf);
    free(hdr);
    free(t);
}

static void write_config(const options *o, const char *path, bool longllama, int64_t max_pos) {
    FILE *f = fopen(path, "w");
    if (!f) die("cannot write %s: %s", path, strerror(errno));
    fprintf(f, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n", longllama ? "LongLlamaForCausalLM"
            : "LlamaForCausalLM", longllama ? "longllama" : "llama");
    fprintf(f, "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
               "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n"
               "  \"max_position_embeddings\": %lld,\n  \"rms_norm_eps\": 1e-06,\n  \"rope_theta\": 10000.0,\n"
               "  \"rope_scaling\": null,\n  \"hidden_act\": \"silu\",\n  \"tie_word_embeddings\": false,\n"
               "  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n  \"torch_dtype\": \"%s\"",
            o->vocab, o->hidden, o->ffn, o->layers, o->heads, o->heads, (long long)max_pos,
            o->bf16 ? "bfloat16" : "float32");
    if (longllama)
        fprintf(f, ",\n  \"mem_layers\": [%d, %d],\n  \"mem_dtype\": \"bfloat16\",\n  \"mem_positionals\": true,\n"
                   "  \"mem_attention_grouping\": null,\n  \"last_context_length\": %d,\n"
                   "  \"torch_attention\": false",
                o->layers / 4, (3 * o->layers) / 4, o->last_ctx);
    fprintf(f, "\n}\n");
    if (fclose(f) != 0) die("writing %s failed", path);
}

static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
    if (!a || !b) die("cannot copy %s to %s: %s", from, to, strerror(errno));
    char buf[1 << 14];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    fclose(a);
    if (fclose(b) != 0) die("writing %s failed", to);
}

static char g_root[512], g_dir_ll[600], g_dir_llama[600];
static bool g_made_root;

static void remove_checkpoints(void) {
    const char *files[] = {"config.json", "model.safetensors", "tokenizer.model"};
    char p[700];
    for (int d = 0; d < 2; d++) {
        const char *dir = d ? g_dir_llama : g_dir_ll;
        for (int i = 0; i < 3; i++) {
            snprintf(p, sizeof p, "%s/%s", dir, files[i]);
            unlink(p);
        }
        rmdir(dir);
    }
    if (g_made_root) rmdir(g_root);
}

static void make_checkpoints(const options *o) {
    if (o->dir) {
        snprintf(g_root, sizeof g_root, "%s", o->dir);
        if (mkdir(g_root, 0755) != 0 && errno != EEXIST) die("mkdir %s: %s", g_root, strerror(errno));
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(g_root, sizeof g_root, "%s/bench_longctx.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(g_root)) die("mkdtemp %s: %s", g_root, strerror(errno));
        g_made_root = true;
    }
    snprintf(g_dir_ll, sizeof g_dir_ll, "%s/longllama", g_root);
    snprintf(g_dir_llama, sizeof g_dir_llama, "%s/llama", g_root);
    if ((mkdir(g_dir_ll, 0755) && errno != EEXIST) || (mkdir(g_dir_llama, 0755) && errno != EEXIST))
        die("mkdir under %s: %s", g_root, strerror(errno));
    char p[700], q[700];
    snprintf(p, sizeof p, "%s/model.safetensors", g_dir_ll);
    write_safetensors(o, p);
    snprintf(q, sizeof q, "%s/model.safetensors", g_dir_llama);
    unlink(q);
    if (link(p, q) != 0) copy_file(p, q); /* the same weights for both architectures */
    char tok[1024];
    if (o->tokenizer) snprintf(tok, sizeof tok, "%s", o->tokenizer);
    else { /* __FILE__ is this source's path as the build gave it: tests/bench/../fixtures */
        snprintf(tok, sizeof tok, "%s", __FILE__);
        char *slash = strrchr(tok, '/');
        if (slash) snprintf(slash, sizeof tok - (size_t)(slash - tok), "/../fixtures/tokenizer.model");
        else snprintf(tok, sizeof tok, "tests/fixtures/tokenizer.model");
    }
    snprintf(p, sizeof p, "%s/tokenizer.model", g_dir_ll);
    copy_file(tok, p);
    snprintf(p, sizeof p, "%s/tokenizer.model", g_dir_llama);
    copy_file(tok, p);
    snprintf(p, sizeof p, "%s/config.json", g_dir_ll);
    write_config(o, p, true, o->window);
    int64_t longest = o->lengths[o->n_lengths - 1] + WARMUP_STEPS + o->decode_steps;
    snprintf(p, sizeof p, "%s/config.json", g_dir_llama);
    write_config(o, p, false, longest);
}

/* ------------------------------------------------------------------------------------------ one run (child) */
typedef struct {
    int status; /* 0 ok; else a mnemo_status (or -1 setup) */
    char err[256];
    double prefill_s, prefill_cpu_s; /* wall; CPU time of all the process's threads */
    double decode_med_ms, decode_p90_ms, decode_min_ms, decode_cpu_med_ms;
    int64_t rss_base_kib; /* VmRSS after load + context creation */
    mnemo_memory_stats mem;
    uint64_t kv_bytes;
    int n_trace; /* --trace: (tokens done, seconds since the prefill began) at quarter octaves from 4K */
    int64_t trace_done[MAX_TRACE];
    double trace_s[MAX_TRACE];
} run_result;

/* The progress callback of --trace: a point each time the tokens done pass the next quarter octave, and at the end. */
typedef struct {
    run_result *r;
    double t0, next;
} trace_state;

static bool trace_progress(int64_t done, int64_t total, void *user) {
    trace_state *ts = user;
    if (((double)done >= ts->next || done == total) && ts->r->n_trace < MAX_TRACE) {
        ts->r->trace_done[ts->r->n_trace] = done;
        ts->r->trace_s[ts->r->n_trace++] = bench_now_s() - ts->t0;
        while (ts->next <= (double)done) ts->next *= 1.189207115002721; /* 2^(1/4) */
    }
    return true;
}

static int64_t proc_status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    int64_t v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            v = strtoll(line + kl + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void child_run(const options *o, bench_mode mode, int64_t n, run_result *r) {
    memset(r, 0, sizeof *r);
    mnemo_log_set_level(MNEMO_LOG_ERROR);
    if (o->threads > 0) omp_set_num_threads(o->threads); /* FAISS's OpenMP team (the engine takes n_threads) */
    mnemo_model_params mp = mnemo_model_default_params();
    mp.n_threads = o->threads;
    mp.device = o->device ? o->device : MNEMO_DEVICE_CPU;
    mnemo_model *model = NULL;
    mnemo_context *ctx = NULL;
    mnemo_status st = mnemo_model_load(mode == MODE_LLAMA ? g_dir_llama : g_dir_ll, &mp, &model);
    if (st != MNEMO_OK) {
        r->status = st;
        snprintf(r->err, sizeof r->err, "load: %s", model ? mnemo_model_error(model) : mnemo_status_str(st));
        mnemo_model_free(model);
        return;
    }
    mnemo_context_params cp = mnemo_context_default_params();
    cp.n_batch = o->batch;
    if (mode == MODE_LLAMA) cp.n_ctx = (int32_t)(n + WARMUP_STEPS + o->decode_steps);
    if (mode == MODE_DENSE) cp.mem_knn_k = 0;
    if (mode != MODE_DENSE && mode != MODE_LLAMA && mode != MODE_AUTO) { /* auto: the library's defaults */
        cp.mem_knn_k = o->knn_k;
        cp.mem_dense_rows = 0; /* kNN from the first row, as measured before the dense-then-kNN default */
        cp.mem_index = mode == MODE_KNN_FLAT ? MNEMO_MEM_INDEX_FLAT
                       : mode == MODE_KNN_IVF ? MNEMO_MEM_INDEX_IVF
                       : mode == MODE_KNN_IVF_GROW ? MNEMO_MEM_INDEX_IVF_GROW : MNEMO_MEM_INDEX_HNSW;
    }
    st = mnemo_context_new(model, &cp, &ctx);
    if (st != MNEMO_OK) {
        r->status = st;
        snprintf(r->err, sizeof r->err, "context: %s", ctx ? mnemo_context_error(ctx) : mnemo_status_str(st));
        goto out;
    }
    int32_t V = mnemo_model_n_vocab(model);
    r->rss_base_kib = proc_status_kib("VmRSS");
    mnemo_token *tok = malloc((size_t)n * sizeof *tok);
    if (!tok) {
        r->status = MNEMO_ERR_NOMEM;
        snprintf(r->err, sizeof r->err, "no memory for %lld token ids", (long long)n);
        goto out;
    }
    rng_state = 0x9E3779B97F4A7C15ull; /* the same ids in every mode */
    tok[0] = mnemo_model_bos(model);
    for (int64_t i = 1; i < n; i++) tok[i] = (mnemo_token)(3 + rng_next() % (uint64_t)(V - 3));

    double t = bench_now_s(), c = cpu_s();
    trace_state ts = {r, t, 4096};
    if (o->trace) mnemo_context_set_progress(ctx, trace_progress, &ts);
    st = mnemo_decode(ctx, tok, (int32_t)n);
    mnemo_context_set_progress(ctx, NULL, NULL);
    r->prefill_s = bench_now_s() - t;
    r->prefill_cpu_s = cpu_s() - c;
    if (st != MNEMO_OK) {
        r->status = st;
        snprintf(r->err, sizeof r->err, "prefill: %s", mnemo_context_error(ctx));
        free(tok);
        goto out;
    }
    mnemo_context_memory(ctx, &r->mem);
    r->kv_bytes = mnemo_context_kv_bytes(ctx);

    int steps = o->decode_steps;
    double *lat = malloc((size_t)steps * sizeof *lat), *lat_cpu = malloc((size_t)steps * sizeof *lat_cpu);
    for (int i = 0; i < WARMUP_STEPS + steps && st == MNEMO_OK; i++) {
        mnemo_token x = (mnemo_token)(3 + rng_next() % (uint64_t)(V - 3));
        t = bench_now_s();
        c = cpu_s();
        st = mnemo_decode(ctx, &x, 1);
        if (i >= WARMUP_STEPS) {
            lat[i - WARMUP_STEPS] = (bench_now_s() - t) * 1e3;
            lat_cpu[i - WARMUP_STEPS] = (cpu_s() - c) * 1e3;
        }
    }
    if (st != MNEMO_OK) {
        r->status = st;
        snprintf(r->err, sizeof r->err, "decode: %s", mnemo_context_error(ctx));
    } else {
        r->decode_med_ms = median(lat, steps); /* sorts */
        r->decode_min_ms = lat[0];
        r->decode_p90_ms = lat[(int)ceil(0.9 * steps) - 1];
        r->decode_cpu_med_ms = median(lat_cpu, steps);
    }
    free(lat);
    free(lat_cpu);
    free(tok);
out:
    mnemo_context_free(ctx);
    mnemo_model_free(model);
}

/* ------------------------------------------------------------------------------------------ parent */
typedef struct {
    bench_mode mode;
    int64_t n;
    bool ran, ok;
    run_result r;
    int64_t rss_peak_kib; /* the child's ru_maxrss */
    double load1, wall_s;
    char note[256];
} run_record;

static double meminfo_available_kib(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 1e18;
    char line[256];
    double v = 1e18;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "MemAvailable:", 13)) v = atof(line + 13);
    fclose(f);
    return v;
}

static double load1(void) {
    double l[3] = {0, 0, 0};
    return getloadavg(l, 3) > 0 ? l[0] : -1;
}

/* Forks, runs one (mode, n) in the child with a hard time limit, collects its result and ru_maxrss. */
static void run_one(const options *o, run_record *rec, double limit_s) {
    int fd[2];
    if (pipe(fd) != 0) die("pipe: %s", strerror(errno));
    fflush(NULL);
    rec->load1 = load1();
    double t0 = bench_now_s();
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid == 0) {
        close(fd[0]);
        alarm((unsigned)ceil(limit_s)); /* default action of SIGALRM: terminate */
        run_result r;
        child_run(o, rec->mode, rec->n, &r);
        const char *p = (const char *)&r;
        for (size_t left = sizeof r; left > 0;) {
            ssize_t w = write(fd[1], p, left);
            if (w <= 0) _exit(3);
            p += w;
            left -= (size_t)w;
        }
        _exit(0);
    }
    close(fd[1]);
    size_t got = 0;
    char *p = (char *)&rec->r;
    while (got < sizeof rec->r) {
        ssize_t m = read(fd[0], p + got, sizeof rec->r - got);
        if (m < 0 && errno == EINTR) continue;
        if (m <= 0) break;
        got += (size_t)m;
    }
    close(fd[0]);
    int wst = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &wst, 0, &ru) < 0 && errno == EINTR) {}
    rec->wall_s = bench_now_s() - t0;
    rec->ran = true;
    rec->rss_peak_kib = ru.ru_maxrss;
    if (WIFSIGNALED(wst)) {
        int sig = WTERMSIG(wst);
        if (sig == SIGALRM) snprintf(rec->note, sizeof rec->note, "killed at its time limit (%.0f s)", limit_s);
        else if (sig == SIGKILL) snprintf(rec->note, sizeof rec->note, "killed by SIGKILL (out of memory?)");
        else snprintf(rec->note, sizeof rec->note, "died from signal %d", sig);
        return;
    }
    if (got != sizeof rec->r || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
        snprintf(rec->note, sizeof rec->note, "child failed (exit %d)", WIFEXITED(wst) ? WEXITSTATUS(wst) : -1);
        return;
    }
    if (rec->r.status != 0) {
        snprintf(rec->note, sizeof rec->note, "%s", rec->r.err);
        return;
    }
    rec->ok = true;
}

/* ------------------------------------------------------------------------------------------ fits */
typedef struct {
    double slope, intercept, r2;
} linfit;

static linfit fit_line(const double *x, const double *y, int n) {
    linfit f = {0, 0, 0};
    if (n < 2) return f;
    double mx = 0, my = 0;
    for (int i = 0; i < n; i++) mx += x[i], my += y[i];
    mx /= n;
    my /= n;
    double sxx = 0, sxy = 0, syy = 0;
    for (int i = 0; i < n; i++) {
        sxx += (x[i] - mx) * (x[i] - mx);
        sxy += (x[i] - mx) * (y[i] - my);
        syy += (y[i] - my) * (y[i] - my);
    }
    if (sxx == 0) return f;
    f.slope = sxy / sxx;
    f.intercept = my - f.slope * mx;
    double ss_res = 0;
    for (int i = 0; i < n; i++) {
        double e = y[i] - (f.intercept + f.slope * x[i]);
        ss_res += e * e;
    }
    f.r2 = syy > 0 ? 1 - ss_res / syy : 1;
    return f;
}

/* y = a x + b x^2 by least squares (no intercept); r2 against the mean. */
static void fit_quad(const double *x, const double *y, int n, double *a, double *b, double *r2) {
    double s2 = 0, s3 = 0, s4 = 0, t1 = 0, t2 = 0, my = 0;
    for (int i = 0; i < n; i++) {
        double x2 = x[i] * x[i];
        s2 += x2, s3 += x2 * x[i], s4 += x2 * x2, t1 += x[i] * y[i], t2 += x2 * y[i], my += y[i];
    }
    double det = s2 * s4 - s3 * s3;
    *a = det != 0 ? (t1 * s4 - t2 * s3) / det : 0;
    *b = det != 0 ? (s2 * t2 - s3 * t1) / det : 0;
    my /= n;
    double ss_res = 0, ss_tot = 0;
    for (int i = 0; i < n; i++) {
        double e = y[i] - (*a * x[i] + *b * x[i] * x[i]);
        ss_res += e * e;
        ss_tot += (y[i] - my) * (y[i] - my);
    }
    *r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 1;
}

/* ------------------------------------------------------------------------------------------ output */
static void print_row(const options *o, const run_record *rec) {
    const run_result *r = &rec->r;
    double n = (double)rec->n;
    if (!rec->ran || !rec->ok) {
        fprintf(human, "%-9s %8lld  %s\n", MODE_NAMES[rec->mode], (long long)rec->n, rec->note);
        if (o->json)
            printf("{\"mode\":\"%s\",\"n\":%lld,\"status\":\"%s\",\"note\":\"%s\",\"wall_s\":%.2f,\"load1\":%.2f}\n",
                   MODE_NAMES[rec->mode], (long long)rec->n, rec->ran ? "failed" : "skipped", rec->note,
                   rec->wall_s, rec->load1);
        return;
    }
    uint64_t held = r->mem.local_kv_bytes + r->mem.mem_key_bytes + r->mem.mem_value_bytes + r->mem.mem_index_bytes;
    fprintf(human, "%-9s %8lld %9.2f %9.2f %8.1f %9.1f %9.1f %8.2f %8.2f %8.2f %9.0f %9.0f %6.2f\n",
            MODE_NAMES[rec->mode], (long long)rec->n, r->prefill_s, r->prefill_cpu_s, r->prefill_s / n * 1e6,
            rec->rss_peak_kib / 1024.0, held / 1048576.0, r->decode_med_ms, r->decode_p90_ms, r->decode_cpu_med_ms,
            (double)held / n, (double)(r->mem.mem_key_bytes + r->mem.mem_value_bytes) / n, rec->load1);
    if (o->json)
        printf("{\"mode\":\"%s\",\"n\":%lld,\"status\":\"ok\",\"prefill_s\":%.4f,\"prefill_cpu_s\":%.4f,"
               "\"prefill_us_per_token\":%.3f,\"rss_peak_kib\":%lld,\"rss_base_kib\":%lld,\"decode_ms_median\":%.4f,"
               "\"decode_ms_p90\":%.4f,\"decode_ms_min\":%.4f,\"decode_cpu_ms_median\":%.4f,\"decode_steps\":%d,\"local_tokens\":%d,\"mem_tokens\":%llu,"
               "\"local_kv_bytes\":%llu,\"mem_key_bytes\":%llu,\"mem_value_bytes\":%llu,\"mem_index_bytes\":%llu,"
               "\"kv_mem_bytes_per_token\":%.1f,\"wall_s\":%.2f,\"load1\":%.2f",
               MODE_NAMES[rec->mode], (long long)rec->n, r->prefill_s, r->prefill_cpu_s, r->prefill_s / n * 1e6,
               (long long)rec->rss_peak_kib, (long long)r->rss_base_kib, r->decode_med_ms, r->decode_p90_ms,
               r->decode_min_ms, r->decode_cpu_med_ms, o->decode_steps, r->mem.local_tokens, (unsigned long long)r->mem.mem_tokens,
               (unsigned long long)r->mem.local_kv_bytes, (unsigned long long)r->mem.mem_key_bytes,
               (unsigned long long)r->mem.mem_value_bytes, (unsigned long long)r->mem.mem_index_bytes,
               (double)held / n, rec->wall_s, rec->load1);
    if (o->json) {
        if (r->n_trace) {
            printf(",\"trace\":[");
            for (int i = 0; i < r->n_trace; i++)
                printf("%s[%lld,%.4f]", i ? "," : "", (long long)r->trace_done[i], r->trace_s[i]);
            printf("]");
        }
        printf("}\n");
    }
    /* the marginal cost: time per token between points an octave apart (4 quarter octaves) */
    for (int i = 4; i < r->n_trace; i += 4)
        fprintf(human, "  trace %-9s %8lld -> %8lld tokens: %8.1f us/token\n", MODE_NAMES[rec->mode],
                (long long)r->trace_done[i - 4], (long long)r->trace_done[i],
                (r->trace_s[i] - r->trace_s[i - 4]) / (double)(r->trace_done[i] - r->trace_done[i - 4]) * 1e6);
    fflush(NULL);
}

/* One series against N: linear fit; for times also the log-log exponent, the successive exponents and the
 * a N + b N^2 fit. */
static void fit_series(const options *o, bench_mode mode, const char *what, const double *x, const double *y, int n,
                       bool is_time) {
    linfit fl = fit_line(x, y, n);
    if (!is_time) {
        fprintf(human, "%-9s %-12s RSS = %.0f B x N %+.1f MiB, R2 %.5f\n", MODE_NAMES[mode], what, fl.slope,
                fl.intercept / 1048576.0, fl.r2);
        if (o->json)
            printf("{\"fit\":\"%s\",\"what\":\"%s\",\"points\":%d,\"n_min\":%.0f,\"n_max\":%.0f,"
                   "\"slope_bytes_per_token\":%.2f,\"intercept_mib\":%.3f,\"r2\":%.6f}\n",
                   MODE_NAMES[mode], what, n, x[0], x[n - 1], fl.slope, fl.intercept / 1048576.0, fl.r2);
        return;
    }
    double lx[MAX_LENGTHS], ly[MAX_LENGTHS];
    for (int i = 0; i < n; i++) lx[i] = log(x[i]), ly[i] = log(y[i]);
    linfit fe = fit_line(lx, ly, n);
    double qa, qb, qr2;
    fit_quad(x, y, n, &qa, &qb, &qr2);
    char steps[256] = "";
    size_t sl = 0;
    for (int i = 1; i < n && sl < sizeof steps - 32; i++)
        sl += (size_t)snprintf(steps + sl, sizeof steps - sl, "%s%.2f", i > 1 ? " " : "",
                               log(y[i] / y[i - 1]) / log(x[i] / x[i - 1]));
    double xm = x[n - 1], cross = qb > 0 && qa > 0 ? qa / qb : -1; /* a N = b N^2 */
    double qshare = qb * xm * xm / (qa * xm + qb * xm * xm);
    char cross_s[48];
    if (cross > 0) snprintf(cross_s, sizeof cross_s, "%.0fK", cross / 1024);
    else snprintf(cross_s, sizeof cross_s, "n/a (a or b <= 0)");
    fprintf(human, "%-9s %-12s t = %.1f us x N %+.2f s, R2 %.5f | exponent %.2f (successive %s) | "
                   "t = %.3g N + %.3g N^2 (R2 %.5f): N^2 share %.0f%% at %lldK, = linear term at N = %s\n",
            MODE_NAMES[mode], what, fl.slope * 1e6, fl.intercept, fl.r2, fe.slope, steps, qa, qb, qr2, 100 * qshare,
            (long long)(xm / 1024), cross_s);
    if (o->json)
        printf("{\"fit\":\"%s\",\"what\":\"%s\",\"points\":%d,\"n_min\":%.0f,\"n_max\":%.0f,"
               "\"slope_us_per_token\":%.4f,\"intercept_s\":%.4f,\"r2\":%.6f,\"loglog_exponent\":%.4f,"
               "\"successive_exponents\":\"%s\",\"quad_a_s_per_token\":%.6g,\"quad_b_s_per_token2\":%.6g,"
               "\"quad_r2\":%.6f,\"quad_share_at_max\":%.4f,\"quad_crossover_n\":%.0f}\n",
               MODE_NAMES[mode], what, n, x[0], xm, fl.slope * 1e6, fl.intercept, fl.r2, fe.slope, steps, qa, qb, qr2,
               qshare, cross);
}

static void print_fits(const options *o, bench_mode mode, const run_record *recs, int nrec) {
    double x[MAX_LENGTHS], tw[MAX_LENGTHS], tc[MAX_LENGTHS], rss[MAX_LENGTHS];
    int n = 0;
    for (int i = 0; i < nrec; i++) {
        if (recs[i].mode != mode || !recs[i].ok) continue;
        x[n] = (double)recs[i].n;
        tw[n] = recs[i].r.prefill_s;
        tc[n] = recs[i].r.prefill_cpu_s;
        rss[n] = (double)recs[i].rss_peak_kib * 1024.0;
        n++;
    }
    if (n < 2) {
        fprintf(human, "%-9s fewer than 2 lengths measured: no fit\n", MODE_NAMES[mode]);
        return;
    }
    fit_series(o, mode, "prefill wall", x, tw, n, true);
    fit_series(o, mode, "prefill cpu", x, tc, n, true);
    fit_series(o, mode, "peak RSS", x, rss, n, false);
}

int main(int argc, char **argv) {
    options o;
    parse_options(&o, argc, argv);
    human = o.json ? stderr : stdout;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);

    char cpu[128] = "unknown CPU";
    FILE *ci = fopen("/proc/cpuinfo", "r");
    if (ci) {
        char line[256];
        while (fgets(line, sizeof line, ci))
            if (!strncmp(line, "model name", 10)) {
                char *c = strchr(line, ':');
                if (c) snprintf(cpu, sizeof cpu, "%s", c + 2);
                cpu[strcspn(cpu, "\n")] = 0;
                break;
            }
        fclose(ci);
    }
    char threads_s[32] = "one per core";
    if (o.threads) snprintf(threads_s, sizeof threads_s, "%d", o.threads);
    double t_start = bench_now_s();
    make_checkpoints(&o);
    if (!o.keep) atexit(remove_checkpoints);
    fprintf(human, "machine: %s, %ld cores online, MemAvailable %.1f GiB, load average %.2f at start\n", cpu,
            sysconf(_SC_NPROCESSORS_ONLN), meminfo_available_kib() / 1048576.0, load1());
    fprintf(human, "model: hidden %d, %d heads x %d, ffn %d, %d layers, vocab %d, %s weights; LongLLaMA window %d, "
                   "last_context_length %d, mem_layers [%d, %d], mem bf16; kNN k %d; n_batch %d; threads %s; "
                   "checkpoints in %s\n",
            o.hidden, o.heads, o.hidden / o.heads, o.ffn, o.layers, o.vocab, o.bf16 ? "bf16" : "f32", o.window,
            o.last_ctx, o.layers / 4, 3 * o.layers / 4, o.knn_k, o.batch, threads_s, g_root);
    fprintf(human, "%-9s %8s %9s %9s %8s %9s %9s %8s %8s %8s %9s %9s %6s\n", "mode", "N", "prefill", "prefill",
            "us/tok", "peak RSS", "KV+mem", "decode", "decode", "decode", "B/token", "B/token", "load1");
    fprintf(human, "%-9s %8s %9s %9s %8s %9s %9s %8s %8s %8s %9s %9s %6s\n", "", "", "wall s", "cpu s", "wall",
            "MiB", "MiB", "ms p50", "ms p90", "cpu p50", "KV+mem", "mem K+V", "");

    run_record recs[MAX_MODES * MAX_LENGTHS];
    int nrec = 0;
    for (int mi = 0; mi < o.n_modes; mi++) {
        bench_mode mode = o.modes[mi];
        double budget = o.budget_s[mode], used = 0;
        int first = nrec;
        bool stopped = false;
        for (int li = 0; li < o.n_lengths; li++) {
            run_record *rec = &recs[nrec++];
            memset(rec, 0, sizeof *rec);
            rec->mode = mode;
            rec->n = o.lengths[li];
            int k = nrec - 1 - first; /* runs of this mode before this one */
            if (stopped) {
                snprintf(rec->note, sizeof rec->note, "not run (the mode stopped earlier)");
                print_row(&o, rec);
                continue;
            }
            if (k >= 1 && recs[nrec - 2].ok) { /* predict from the last runs */
                const run_record *a = &recs[nrec - 2];
                double p = 1.0;
                if (k >= 2 && recs[nrec - 3].ok) {
                    const run_record *b = &recs[nrec - 3];
                    p = log(a->wall_s / b->wall_s) / log((double)a->n / (double)b->n);
                    if (!(p >= 1.0)) p = 1.0;
                    if (p > 2.5) p = 2.5;
                }
                double pred = a->wall_s * pow((double)rec->n / (double)a->n, p);
                double pred_rss = (double)a->rss_peak_kib * (double)rec->n / (double)a->n;
                if (pred > budget - used) {
                    snprintf(rec->note, sizeof rec->note, "stopped: predicted %.0f s (exponent %.2f) > %.0f s left "
                             "of the %.0f s budget", pred, p, budget - used, budget);
                    stopped = true;
                } else if (pred_rss > 0.85 * meminfo_available_kib()) {
                    snprintf(rec->note, sizeof rec->note, "stopped: predicted peak RSS %.1f GiB > 85%% of "
                             "MemAvailable", pred_rss / 1048576.0);
                    stopped = true;
                }
                if (stopped) {
                    print_row(&o, rec);
                    continue;
                }
            }
            if (o.verbose) fprintf(stderr, "running %s N=%lld\n", MODE_NAMES[mode], (long long)rec->n);
            /* hard limit: half as much again as the budget left (the prediction may be low), at least 30 s */
            double left = 1.5 * (budget - used);
            run_one(&o, rec, left > 30 ? left : 30);
            used += rec->wall_s;
            print_row(&o, rec);
            if (!rec->ok) stopped = true;
        }
    }
    fprintf(human, "\nfits over the measured lengths (least squares; exponent = slope of log t against log N: 1 "
                   "linear, 2 quadratic)\n");
    for (int mi = 0; mi < o.n_modes; mi++) print_fits(&o, o.modes[mi], recs, nrec);
    fprintf(human, "total %.0f s, load average %.2f at the end\n", bench_now_s() - t_start, load1());
    return 0;
}
