/*
 * bench_memattn.c — what kNN memory attention costs as its store grows: the CPU attention_mem op with each query's
 * top-k rows selected from a store of 4K to 4M rows, against the same op with no memory, in one run.
 *
 * kNN attention gathers k rows of keys and values per query and head from anywhere in a store that, at 1M tokens,
 * is 128 MB per head and K/V in the benchmark model's shape; a gather that waits for one DRAM miss at a time costs
 * more per token the larger the store. This bench isolates that cost from the search and the rest of the model.
 *
 * Shape: the bench_longctx model's memory layer (4 query heads = 4 KV heads, head_dim 64, bf16 memory in a real
 * mem_store, 512 queries against 1024 local keys, k 128). Ids are uniform over the store: the worst case for the
 * caches (real kNN ids cluster). Per size: the op with no memory and with the selection, alternated, best of
 * --reps each; "memory" is the difference, per token (all heads); "x floor" is it over the smallest size's.
 *
 *   bench_memattn [--sizes 4096,65536,262144,1048576,4194304] [--reps 7] [--threads 1]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "kernels.h"
#include "memstore.h"

enum { HEADS = 4, HD = 64, NQ = 512, NKV = 1024, K = 128 };

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { return bench_frand(&rng); } /* [-1, 1) */

static void die(const char *msg) {
    fprintf(stderr, "bench_memattn: %s\n", msg);
    exit(2);
}

/* A store of n rows (all heads), filled in chunks of random keys and values. */
static mem_store *store_of(size_t n) {
    mem_params p = mem_default_params();
    p.index = MEM_INDEX_NONE; /* rows only: the search is not measured here */
    char err[256];
    mem_store *s = mem_store_new(HEADS, HD, &p, err, sizeof err);
    if (!s) die(err);
    enum { CHUNK = 8192 };
    float *k = malloc((size_t)CHUNK * HEADS * HD * sizeof *k), *v = malloc((size_t)CHUNK * HEADS * HD * sizeof *v);
    if (!k || !v) die("out of memory");
    for (size_t i = 0; i < (size_t)CHUNK * HEADS * HD; i++) k[i] = frand(), v[i] = frand();
    for (size_t done = 0; done < n; done += CHUNK) {
        size_t m = n - done < CHUNK ? n - done : CHUNK;
        if (mem_store_append(s, m, k, v, HEADS * HD) != 0) die(mem_store_error(s));
    }
    free(k), free(v);
    return s;
}

static size_t parse_size(const char *t) {
    char *end;
    unsigned long long v = strtoull(t, &end, 10);
    if (*end == 'K' || *end == 'k') v <<= 10, end++;
    else if (*end == 'M' || *end == 'm') v <<= 20, end++;
    if (end == t || (*end && *end != ',') || v < 1 || v > (1ull << 26)) die("sizes: rows from 1 to 64M, e.g. 4K,1M");
    return (size_t)v;
}

int main(int argc, char **argv) {
    const char *sizes = "4096,65536,262144,1048576,4194304";
    int reps = 7, threads = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else die("usage: bench_memattn [--sizes 4096,65536,...] [--reps 7] [--threads 1]");
    }
    if (reps < 1 || reps > 1000 || threads < 1 || threads > 1024) die("--reps 1..1000, --threads 1..1024");
    const kern_backend *be = kern_cpu_backend();
    kern_ctx *kc = kern_cpu_ctx_new(threads);
    float *q = malloc((size_t)NQ * HEADS * HD * sizeof *q), *out = malloc((size_t)NQ * HEADS * HD * sizeof *out);
    float *lk = malloc((size_t)NKV * HEADS * HD * sizeof *lk), *lv = malloc((size_t)NKV * HEADS * HD * sizeof *lv);
    int64_t *sel = malloc((size_t)NQ * HEADS * K * sizeof *sel);
    if (!kc || !q || !out || !lk || !lv || !sel) die("out of memory");
    for (size_t i = 0; i < (size_t)NQ * HEADS * HD; i++) q[i] = frand() * 0.3f;
    for (size_t i = 0; i < (size_t)NKV * HEADS * HD; i++) lk[i] = frand(), lv[i] = frand();
    printf("# bench_memattn: %d heads x head_dim %d, bf16 memory, %d queries vs %d local keys, k %d, uniform ids, "
           "threads %d, best of %d\n", HEADS, HD, NQ, NKV, K, threads, reps);
    printf("%10s %12s %14s %14s %12s %10s\n", "rows", "store MB", "local us/tok", "memory us/tok", "ns/row", "x floor");
    double floor_us = 0;
    for (const char *t = sizes; *t;) {
        size_t n = parse_size(t);
        mem_store *ms = store_of(n);
        const void *mk[HEADS], *mv[HEADS];
        for (int h = 0; h < HEADS; h++) mk[h] = mem_store_raw_keys(ms, h), mv[h] = mem_store_raw_values(ms, h);
        double best_local = 1e30, best_mem = 1e30;
        for (int r = 0; r < reps; r++) {
            for (size_t i = 0; i < (size_t)NQ * HEADS * K; i++) /* fresh rows */
                sel[i] = (int64_t)(bench_next_u64(&rng) % n);
            double t0 = bench_now_s();
            if (be->attention_mem(kc, out, q, lk, lv, NQ, NKV, NKV - NQ, HEADS, HEADS, HD, 0.125f, mk, mv, KERN_BF16,
                                  0, NULL, 0) != KERN_OK)
                die("attention_mem failed");
            double t1 = bench_now_s();
            if (be->attention_mem(kc, out, q, lk, lv, NQ, NKV, NKV - NQ, HEADS, HEADS, HD, 0.125f, mk, mv, KERN_BF16,
                                  (int64_t)n, sel, K) != KERN_OK)
                die("attention_mem failed");
            double t2 = bench_now_s();
            best_local = t1 - t0 < best_local ? t1 - t0 : best_local;
            best_mem = t2 - t1 < best_mem ? t2 - t1 : best_mem;
        }
        double local_us = best_local * 1e6 / NQ, mem_us = (best_mem - best_local) * 1e6 / NQ;
        if (floor_us == 0) floor_us = mem_us > 0 ? mem_us : 1e-9;
        printf("%10zu %12.1f %14.1f %14.1f %12.1f %10.2f\n", n, 2.0 * HEADS * (double)n * HD * 2 / 1e6, local_us,
               mem_us, mem_us * 1e3 / (HEADS * K), mem_us / floor_us);
        fflush(stdout);
        mem_store_free(ms);
        t = strchr(t, ',');
        t = t ? t + 1 : "";
    }
    free(q), free(out), free(lk), free(lv), free(sel);
    kern_cpu_ctx_free(kc);
    return 0;
}
