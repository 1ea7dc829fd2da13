/*
 * bench_knn_device.c — kNN memory searched on the device: top-k over one head's keys by
 * memstore's IVF-grow mirror (mem_device_ivf.c: topk_ip over every centroid, then ivf_scan_topk over the nprobe
 * best cells) against the exact flat search (topk_ip: GEMM + k-selection over every key), with recall@k of both
 * approximate searches (device mirror, host IVF-grow) against the exact one. Target: top-128 over 1M
 * keys per head <= 1 ms.
 *
 * Keys (bf16, one head) are "nested" clusters as bench_recall's (rows/64 clusters around 100 centres, random
 * order), appended to a store in chunks of 4096 with the device copy synced after each, as a prefill does (so the
 * mirror is built as the engine builds it: rebuilt at each training, appended to in between). Queries: held-out
 * keys ("in") or random points ("far": the hard case). A search is timed from its launch to the end of a sync,
 * median of --reps after two warm-ups.
 *
 *   bench_knn_device [--rows 1048576] [--hd 100] [--k 128] [--queries 1,512] [--nprobe 16] [--reps 20]
 *                    [--device cuda|cpu]
 *
 * --device cpu runs the same code on the CPU backend posing as a device (a check of the benchmark itself, not a
 * measurement); cuda needs a GPU, or the CPU emulator build (-DMNEMO_CUDA_EMU=ON) at a small size, e.g.
 * --rows 20000 --queries 1,8 --reps 1 (emulator timings mean nothing).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "kernels.h"
#include "mem_device_ivf.h"
#include "memstore.h"

#define MAX_NQ_LIST 8

static uint64_t rng = 88172645463325252ull;
static float frand(void) { return bench_frand(&rng); }

static void die(const char *msg) {
    fprintf(stderr, "bench_knn_device: %s\n", msg);
    exit(2);
}

/* n nested-cluster points of width d (bench_recall's "nested"). */
static float *nested_keys(size_t n, int d) {
    float *x = malloc(n * (size_t)d * sizeof *x);
    if (!x || bench_nested_keys(&rng, x, n, d)) die("out of memory");
    return x;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* |got ∩ want| / |want| over nq rows of k ids (want's -1 entries do not count). */
static double recall(const int64_t *got, const int64_t *want, int nq, int k) {
    size_t hit = 0, n = 0;
    for (int i = 0; i < nq; i++)
        for (int j = 0; j < k; j++) {
            int64_t id = want[(size_t)i * k + j];
            n += id >= 0;
            for (int t = 0; id >= 0 && t < k; t++) hit += got[(size_t)i * k + t] == id;
        }
    return n ? (double)hit / (double)n : 1.0;
}

typedef struct {
    const kern_backend *be;
    kern_ctx *kc;
    const mem_device *dev;
    const void *keys;
    int64_t n;
    int hd, k, nq;
    const float *dq;
    int64_t *dids;
} search_args;

/* One search, flat (topk_ip) or through the mirror (mem_device_search), to its sync. KERN_* code. */
static int search(const search_args *a, int flat) {
    int rc = flat ? a->be->topk_ip(a->kc, a->dids, NULL, a->k, a->dq, a->nq, a->hd, a->keys, KERN_BF16, a->n, a->hd,
                                   a->k)
                  : mem_device_search(a->dev, a->kc, 0, a->dq, a->nq, a->hd, a->k, a->dids, a->k);
    return rc == KERN_OK ? a->be->sync(a->kc) : rc;
}

static double time_search(const search_args *a, int flat, int reps) {
    double t[256];
    if (reps > 256) reps = 256;
    for (int r = -2; r < reps; r++) {
        double t0 = bench_now_s();
        if (search(a, flat) != KERN_OK) die("search failed");
        if (r >= 0) t[r] = bench_now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    return reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
}

int main(int argc, char **argv) {
    long rows = 1048576, hd = 100, k = 128, nprobe = 16, reps = 20;
    int nqs[MAX_NQ_LIST] = {1, 512}, n_nqs = 2;
    const char *device = "cuda";
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--help")) {
            puts("usage: bench_knn_device [--rows 1048576] [--hd 100] [--k 128] [--queries 1,512] [--nprobe 16] "
                 "[--reps 20] [--device cuda|cpu]");
            return 0;
        }
        if (!v) die("every option takes a value (--help)");
        if (!strcmp(argv[i], "--rows")) rows = atol(v);
        else if (!strcmp(argv[i], "--hd")) hd = atol(v);
        else if (!strcmp(argv[i], "--k")) k = atol(v);
        else if (!strcmp(argv[i], "--nprobe")) nprobe = atol(v);
        else if (!strcmp(argv[i], "--reps")) reps = atol(v);
        else if (!strcmp(argv[i], "--device")) device = v;
        else if (!strcmp(argv[i], "--queries")) {
            n_nqs = 0;
            for (const char *p = v; *p && n_nqs < MAX_NQ_LIST;) {
                char *end;
                long q = strtol(p, &end, 10);
                if (end == p || q < 1 || q > 65535 || (*end && *end != ','))
                    die("--queries takes 1..65535, comma separated");
                nqs[n_nqs++] = (int)q;
                p = *end ? end + 1 : end;
            }
        } else die("unknown option (--help)");
        i++;
    }
    if (rows < 1 || rows > (1L << 28) || hd < 1 || hd > 256 || k < 1 || k > MEM_DEVICE_MAX_K || nprobe < 1 ||
        nprobe > 65536 || reps < 1 || reps > 256)
        die("--rows 1..2^28, --hd 1..256, --k 1..1024, --nprobe 1..65536, --reps 1..256");

    kern_backend posing;
    const kern_backend *be;
    kern_ctx *kc;
    char info[256] = "CPU backend posing as a device";
    if (!strcmp(device, "cpu")) {
        posing = *kern_cpu_backend();
        posing.host_memory = 0;
        be = &posing;
        kc = be->ctx_new(0);
    } else if (!strcmp(device, "cuda")) {
        if (!kern_cuda_available(info, sizeof info)) {
            printf("SKIP: %s\n", info);
            return 0;
        }
        be = kern_cuda_backend();
        kc = kern_cuda_ctx_new();
    } else {
        die("--device takes cuda or cpu");
    }
    if (!kc) die("no context");
    double load[3] = {0, 0, 0};
    FILE *fl = fopen("/proc/loadavg", "r");
    if (fl) {
        if (fscanf(fl, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
        fclose(fl);
    }
    printf("device: %s; load average %.2f %.2f %.2f\n", info, load[0], load[1], load[2]);
    printf("keys: %ld nested-cluster rows x %ld (bf16, one head), top-%ld, nprobe %ld\n", rows, hd, k, nprobe);

    /* the store and its device copy, built as a prefill builds them */
    int max_nq = 0;
    for (int i = 0; i < n_nqs; i++) max_nq = nqs[i] > max_nq ? nqs[i] : max_nq;
    float *x = nested_keys((size_t)rows + (size_t)max_nq, (int)hd);
    mem_params p = mem_default_params();
    p.index = MEM_INDEX_IVF_GROW, p.ivf_nprobe = (int)nprobe;
    char err[256] = "";
    mem_store *s = mem_store_new(1, (int)hd, &p, err, sizeof err);
    mem_device *dev = s ? mem_device_new(be, 1, (int)hd, MEM_DTYPE_BF16) : NULL;
    if (!s || !dev) die(err[0] ? err : "out of memory");
    double t0 = bench_now_s(), t_sync = 0;
    for (long m = 0; m < rows; m += 4096) {
        size_t n = (size_t)(rows - m < 4096 ? rows - m : 4096);
        if (mem_store_append(s, n, x + (size_t)m * hd, x + (size_t)m * hd, (size_t)hd) != 0) die(mem_store_error(s));
        double ts = bench_now_s();
        if (mem_device_sync(dev, s, kc) != KERN_OK || be->sync(kc) != KERN_OK) die("device sync failed");
        t_sync += bench_now_s() - ts;
    }
    double t_build = bench_now_s() - t0;
    int cells, groups;
    size_t largest;
    ivf_grow_shape(mem_store_ivf_grow(s, 0), &cells, &groups, &largest);
    const mem_device_ivf *mirror = mem_device_ivf_of(dev, 0);
    mem_device_ivf_stats st = mirror ? mem_device_ivf_stats_of(mirror) : (mem_device_ivf_stats){0};
    printf("built in %.1f s (device syncs %.2f s): %d cells in %d groups, largest %zu rows; mirror: %zu rebuilds, "
           "%zu appends, %zu relayouts, %.1f MB on the device\n",
           t_build, t_sync, cells, groups, largest, st.rebuilds, st.appends, st.relayouts, st.device_bytes / 1e6);

    printf("%-5s %6s %12s %12s %12s %8s %10s %10s\n", "q", "nq", "ivf ms", "flat ms", "ivf us/q", "speedup",
           "recall dev", "recall host");
    float *far = malloc((size_t)max_nq * hd * sizeof *far);
    for (size_t i = 0; i < (size_t)max_nq * hd; i++) far[i] = 2.f * frand();
    float *dq = be->mem_alloc((size_t)max_nq * hd * sizeof *dq);
    int64_t *dids = be->mem_alloc((size_t)max_nq * k * sizeof *dids);
    int64_t *ivf = malloc((size_t)max_nq * k * sizeof *ivf), *flat = malloc((size_t)max_nq * k * sizeof *flat),
            *host = malloc((size_t)max_nq * k * sizeof *host);
    float *hs = malloc((size_t)max_nq * k * sizeof *hs);
    if (!dq || !dids || !ivf || !flat || !host || !hs || !far) die("out of memory");
    for (int far_q = 0; far_q < 2; far_q++)
        for (int qi = 0; qi < n_nqs; qi++) {
            int nq = nqs[qi];
            const float *q = far_q ? far : x + (size_t)rows * hd;
            if (be->mem_copy(kc, dq, q, (size_t)nq * hd * sizeof *dq, KERN_H2D) != KERN_OK) die("upload failed");
            search_args a = {be, kc, dev, mem_device_keys(dev)[0], (int64_t)mem_device_rows(dev), (int)hd, (int)k, nq,
                             dq, dids};
            double t_ivf = time_search(&a, 0, (int)reps);
            if (be->mem_copy(kc, ivf, dids, (size_t)nq * k * sizeof *ivf, KERN_D2H) != KERN_OK) die("download failed");
            double t_flat = time_search(&a, 1, (int)reps);
            if (be->mem_copy(kc, flat, dids, (size_t)nq * k * sizeof *flat, KERN_D2H) != KERN_OK)
                die("download failed");
            if (mem_store_search(s, 0, (size_t)nq, q, (size_t)hd, (int)k, host, hs) != 0) die(mem_store_error(s));
            printf("%-5s %6d %12.3f %12.3f %12.2f %7.1fx %10.3f %10.3f\n", far_q ? "far" : "in", nq, t_ivf * 1e3,
                   t_flat * 1e3, t_ivf * 1e6 / nq, t_flat / (t_ivf > 0 ? t_ivf : 1e-12), recall(ivf, flat, nq, (int)k),
                   recall(host, flat, nq, (int)k));
            fflush(stdout);
        }
    be->mem_free(dq), be->mem_free(dids);
    free(x), free(far), free(ivf), free(flat), free(host), free(hs);
    mem_device_free(dev);
    mem_store_free(s);
    if (!strcmp(device, "cuda")) kern_cuda_ctx_free(kc);
    else be->ctx_free(kc);
    return 0;
}
