/*
 * bench_recall.c — what the approximate memstore index gives up for its speed: recall@k of IVF-grow against exact
 * brute force (memstore's MEM_INDEX_NONE, the kernels' top-k) over the same stored bf16 keys, and the time per query
 * of each, as the memory grows.
 *
 * Keys (d 64, one head) come from two synthetic distributions: "200-clusters" (200 tight clusters, the unit test's)
 * and "nested" (n/64 clusters around 100 centres, in random order). Queries are held-out keys ("in") or points
 * around other random centres ("far": the top-k are then each cluster's extreme rows along the query, the hard case).
 * Recall is the share of the exact top-k ids that the index returns.
 *
 *   bench_recall [--sizes 65536,262144,1048576] [--k 128] [--queries 200] [--nprobe 16] [--exact 1]
 *
 * The queries go to the index in one search, as a prefill's chunk does (its n_batch tokens' queries per head): the
 * more queries per search, the more of them share each cell the search reads. --exact 0 skips the brute force
 * (and recall) to time large sizes and query batches quickly.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "memstore.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void) { return bench_frand(&rng); } /* [-1, 1) */

static void die(const char *msg) {
    fprintf(stderr, "bench_recall: %s\n", msg);
    exit(2);
}

/* n points of width d: kind 0 = 200 clusters in turn, kind 1 = n/64 clusters around 100 centres, random order. */
static float *keys_of(size_t n, int d, int kind) {
    float *x = malloc(n * (size_t)d * sizeof *x);
    if (!x) die("out of memory");
    if (kind == 0) {
        const size_t nc = 200;
        float *c = malloc(nc * (size_t)d * sizeof *c);
        for (size_t i = 0; i < nc * (size_t)d; i++) c[i] = frand() * 2.f;
        for (size_t i = 0; i < n; i++)
            for (int j = 0; j < d; j++) x[i * d + j] = c[(i % nc) * d + j] + 0.3f * frand();
        free(c);
    } else if (bench_nested_keys(&rng, x, n, d)) {
        die("out of memory");
    }
    return x;
}

static size_t parse_sizes(const char *arg, size_t *out, size_t cap) {
    size_t n = 0;
    for (const char *p = arg; *p && n < cap;) {
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p || v < 1 || v > (1ull << 26)) die("--sizes takes numbers in 1..67108864, comma separated");
        out[n++] = (size_t)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') die("--sizes takes numbers in 1..67108864, comma separated");
    }
    return n;
}

int main(int argc, char **argv) {
    size_t sizes[16] = {65536, 262144, 1048576}, nsizes = 3;
    int k = 128, nq = 200, nprobe = 16, exact = 1;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--help")) {
            puts("usage: bench_recall [--sizes 65536,262144,1048576] [--k 128] [--queries 200] [--nprobe 16] [--exact 1]");
            return 0;
        } else if (!v) {
            die("every option takes a value (--help)");
        } else if (!strcmp(argv[i], "--sizes")) {
            nsizes = parse_sizes(v, sizes, 16);
        } else if (!strcmp(argv[i], "--k")) {
            k = atoi(v);
        } else if (!strcmp(argv[i], "--queries")) {
            nq = atoi(v);
        } else if (!strcmp(argv[i], "--nprobe")) {
            nprobe = atoi(v);
        } else if (!strcmp(argv[i], "--exact")) {
            exact = !strcmp(v, "1") ? 1 : !strcmp(v, "0") ? 0 : -1; /* anything else is refused below */
        } else {
            die("unknown option (--help)");
        }
        i++;
    }
    if (k < 1 || k > 4096 || nq < 1 || nq > 100000 || nprobe < 1 || nprobe > 65536 || (exact != 0 && exact != 1))
        die("bad --k, --queries, --nprobe or --exact");
    const int d = 64;
    static const char *kinds[] = {"200-clusters", "nested"};
    printf("%-13s %9s %4s %9s %12s %12s %8s\n", "keys", "rows", "q", "recall@k", "ivf ms/q", "exact ms/q", "speedup");
    for (size_t si = 0; si < nsizes; si++)
        for (int kind = 0; kind < 2; kind++) {
            size_t n = sizes[si];
            float *x = keys_of(n + (size_t)nq, d, kind), *far = keys_of((size_t)nq, d, 0);
            mem_params pa = mem_default_params(), pb = pa;
            pa.index = MEM_INDEX_IVF_GROW, pa.ivf_nprobe = nprobe;
            pb.index = MEM_INDEX_NONE;
            char err[256] = "";
            mem_store *a = mem_store_new(1, d, &pa, err, sizeof err), *b = mem_store_new(1, d, &pb, err, sizeof err);
            if (!a || !b) die(err);
            double t0 = bench_now_s();
            for (size_t m = 0; m < n; m += 512) /* as a prefill appends: one chunk at a time */
                if (mem_store_append(a, n - m < 512 ? n - m : 512, x + m * d, x + m * d, (size_t)d) != 0)
                    die(mem_store_error(a));
            double t_add = bench_now_s() - t0;
            if (exact && mem_store_append(b, n, x, x, (size_t)d) != 0) die(mem_store_error(b));
            int64_t *ia = malloc((size_t)nq * k * sizeof *ia), *ib = malloc((size_t)nq * k * sizeof *ib);
            float *sa = malloc((size_t)nq * k * sizeof *sa), *sb = malloc((size_t)nq * k * sizeof *sb);
            for (int far_q = 0; far_q < 2; far_q++) {
                const float *q = far_q ? far : x + n * d;
                t0 = bench_now_s();
                if (mem_store_search(a, 0, (size_t)nq, q, (size_t)d, k, ia, sa) != 0) die(mem_store_error(a));
                double ta = bench_now_s() - t0;
                if (!exact) {
                    printf("%-13s %9zu %4s %9s %12.4f %12s %8s   (IVF-grow build %.1f s)\n", kinds[kind], n,
                           far_q ? "far" : "in", "-", ta * 1e3 / nq, "-", "-", t_add);
                    fflush(stdout);
                    continue;
                }
                t0 = bench_now_s();
                if (mem_store_search(b, 0, (size_t)nq, q, (size_t)d, k, ib, sb) != 0) die(mem_store_error(b));
                double tb = bench_now_s() - t0;
                size_t hit = 0, want = 0; /* |returned ids ∩ exact top-k ids| / |exact top-k| */
                for (int i = 0; i < nq; i++)
                    for (int j = 0; j < k; j++) {
                        int64_t id = ib[(size_t)i * k + j];
                        want += id >= 0;
                        for (int t = 0; id >= 0 && t < k; t++) hit += ia[(size_t)i * k + t] == id;
                    }
                printf("%-13s %9zu %4s %9.3f %12.3f %12.3f %7.1fx   (IVF-grow build %.1f s)\n", kinds[kind], n,
                       far_q ? "far" : "in", (double)hit / (double)(want ? want : 1), ta * 1e3 / nq, tb * 1e3 / nq,
                       tb / (ta > 0 ? ta : 1e-9), t_add);
                fflush(stdout);
            }
            free(ia), free(ib), free(sa), free(sb), free(x), free(far);
            mem_store_free(a), mem_store_free(b);
        }
    return 0;
}
