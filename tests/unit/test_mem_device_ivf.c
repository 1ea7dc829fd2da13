/*
 * test_mem_device_ivf.c — IVF-grow searched on the device (memstore's mirror of the host index, mem_device_ivf.c)
 * against the host IVF-grow search and exact kNN.
 *
 * A store of 2 heads x 64 dims (bf16, IVF-grow, nprobe 16) takes 20000 rows of clustered random keys (200 clusters,
 * as bench_recall's) in appends of uneven sizes, a device copy synced after each (as the engine does), so the index
 * trains at 8192 rows (32 cells), takes appends, retrains at 16384 (64 cells) and takes appends again. At 6000,
 * 12000 and 20000 rows, for 48 held-out queries per head:
 *   - before training the device search is exact: its ids are brute force's;
 *   - after: the mirror kept by appends gives the same ids as a mirror built at once from the same store (a second
 *     device copy synced only now): appends and relayouts lose nothing;
 *   - the view's centroids are those the host assigned each row by (its cell's centroid scores highest);
 *   - that mirror gives the ids a host re-statement of the method gives (the CPU reference ops over the host
 *     index's view: every centroid scored, the nprobe best cells, their rows), all of them on the CPU device, and
 *     on CUDA all but near-tied ones (>= 99.5%);
 *   - recall@32 against exact brute force, half the queries held-out keys and half "far" points: both the device's
 *     and the host IVF-grow's >= 0.78, the device's no lower than the host's less 0.02 (identical up to 512 cells,
 *     where the host's group level still reaches every cell);
 *   - the mirror was rebuilt at each training (2) and otherwise appended to, with a relayout or so when rows
 *     [10000, 14000) all fall in 10 clusters and their cells outgrow their room.
 * Then a clear + invalidate empties the mirror and the search is exact again. Last, a store of 270000 rows (1024
 * cells in 32 groups): there the host probes through its 16 best groups and the device scores every centroid, so
 * the ids may differ; the same checks hold (seen: recall@32 device 0.93-0.94, host 0.89).
 *
 * Devices as in test_train_device: the CPU half (the CPU backend posing as a device: host_memory cleared, so every
 * byte goes through the backend's memory functions and ops) always runs; the CUDA half when a usable CUDA backend
 * is present, or when MNEMO_TEST_DEVICE=cuda asks for it (then its absence is a failure; in CI the emulator);
 * MNEMO_TEST_DEVICE=cpu runs the CPU half only.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ivf_grow.h"
#include "kernels.h"
#include "mem_device_ivf.h"
#include "memstore.h"
#include "test_devices.h"
#include "test_util.h"

enum { H = 2, D = 64, NQ = 48, K = 32, NPROBE = 8, NCLUSTERS = 200, TOTAL = 20000 };
enum { SHIFT0 = 10000, SHIFT1 = 14000, SHIFT_CLUSTERS = 10 };
#define RECALL_DEVICE 0.78 /* seen 0.82-0.91 at 20000 rows (the far queries miss most), 0.93 at 270000 */
#define RECALL_HOST 0.78
#define RECALL_SLACK 0.02
enum { LARGE = 270000 }; /* 1024 cells in 32 groups: the host probes through 16 groups, the device every cell */

static uint64_t rng;
static float frand(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1ull << 24))) * 2.f - 1.f;
}

static float centres[NCLUSTERS * H * D];

/* The cluster of store row i: all in turn, but rows [SHIFT0, SHIFT1) only SHIFT_CLUSTERS of them (a change of
 * topic after the first training: their cells outgrow the room the mirror gave them). */
static size_t cluster_of(size_t i) { return i >= SHIFT0 && i < SHIFT1 ? i % SHIFT_CLUSTERS : i % NCLUSTERS; }

/* n rows [n][H*D] from row `first` on: each head's row near its cluster's centre in that head. */
static void clustered(float *x, size_t n, size_t first) {
    for (size_t i = 0; i < n; i++)
        for (int j = 0; j < H * D; j++) x[i * H * D + j] = centres[cluster_of(first + i) * H * D + j] + 0.3f * frand();
}

/* NQ queries: the first half held-out draws around the centres, the second half "far" points (random directions at
 * twice the centres' scale: their top-k are the rows furthest along them, spread over clusters and cells). */
static void queries(float *q) {
    clustered(q, NQ / 2, 7);
    for (int i = NQ / 2 * H * D; i < NQ * H * D; i++) q[i] = 4.f * frand();
}

/* Device search of head h for host queries q[NQ][H*D]: ids[NQ][K] on the host. */
static int device_search(const kern_backend *be, kern_ctx *kc, const mem_device *d, int h, const float *q,
                         int64_t *ids) {
    float *dq = be->mem_alloc(NQ * H * D * sizeof *dq);
    int64_t *di = be->mem_alloc(NQ * K * sizeof *di);
    int rc = dq && di ? KERN_OK : KERN_ENOMEM;
    if (rc == KERN_OK) rc = be->mem_copy(kc, dq, q, NQ * H * D * sizeof *dq, KERN_H2D);
    if (rc == KERN_OK) rc = mem_device_search(d, kc, h, dq + h * D, NQ, H * D, K, di, K);
    if (rc == KERN_OK) rc = be->mem_copy(kc, ids, di, NQ * K * sizeof *di, KERN_D2H);
    be->mem_free(dq), be->mem_free(di);
    return rc;
}

/* The method restated on the host with the CPU reference ops, over the host index's view of head h. */
static void host_method(const mem_store *s, int h, const float *q, int64_t *ids) {
    const ivf_grow *g = mem_store_ivf_grow(s, h);
    const kern_backend *cpu = kern_cpu_backend();
    int cells = ivf_grow_cells(g), np = ivf_grow_nprobe(g) < cells ? ivf_grow_nprobe(g) : cells;
    float *cent = malloc((size_t)cells * D * sizeof *cent);
    int64_t *probe = malloc((size_t)NQ * np * sizeof *probe), max_scan = 0;
    int32_t *start = malloc((size_t)cells * 4), *len = malloc((size_t)cells * 4), *rows = malloc(mem_store_size(s) * 4);
    ivf_grow_centroids(g, cent);
    size_t at = 0;
    for (int c = 0; c < cells; c++) {
        size_t n;
        const uint32_t *r = ivf_grow_cell_rows(g, c, &n);
        start[c] = (int32_t)at, len[c] = (int32_t)n;
        for (size_t j = 0; j < n; j++) rows[at++] = (int32_t)r[j];
        max_scan += (int64_t)n; /* every row: a safe bound */
    }
    CHECK(cpu->topk_ip(NULL, probe, NULL, np, q + h * D, NQ, H * D, cent, KERN_F32, cells, D, np) == KERN_OK &&
              cpu->ivf_scan_topk(NULL, ids, NULL, K, q + h * D, NQ, H * D, mem_store_raw_keys(s, h), KERN_BF16,
                                 (int64_t)mem_store_size(s), D, probe, np, start, len, cells, rows, max_scan,
                                 K) == KERN_OK,
          "host restatement of the method");
    free(cent), free(probe), free(start), free(len), free(rows);
}

/* The view's centroids are the ones the host assigned rows by: with at most 16 groups (every cell a candidate) each
 * row's cell scores highest (within rounding) among all centroids for that row. Returns the rows that do not. */
static size_t misassigned(const mem_store *s, int h) {
    const ivf_grow *g = mem_store_ivf_grow(s, h);
    int cells = ivf_grow_cells(g);
    float *cent = malloc((size_t)cells * D * sizeof *cent), key[D];
    ivf_grow_centroids(g, cent);
    size_t bad = 0;
    for (int c = 0; c < cells; c++) {
        size_t n;
        const uint32_t *rows = ivf_grow_cell_rows(g, c, &n);
        for (size_t r = 0; r < n; r += 7) { /* a sample */
            mem_store_read_keys(s, h, rows[r], 1, key);
            float best = -INFINITY, mine = 0;
            for (int o = 0; o < cells; o++) {
                float dot = 0;
                for (int j = 0; j < D; j++) dot += key[j] * cent[(size_t)o * D + j];
                best = dot > best ? dot : best;
                if (o == c) mine = dot;
            }
            bad += mine < best - 1e-4f * fabsf(best);
        }
    }
    free(cent);
    return bad;
}

static double recall(const int64_t *got, const int64_t *want) {
    size_t hit = 0;
    for (int i = 0; i < NQ; i++)
        for (int a = 0; a < K; a++)
            for (int b = 0; b < K; b++)
                if (got[i * K + a] == want[i * K + b] && want[i * K + b] >= 0) {
                    hit++;
                    break;
                }
    return (double)hit / (NQ * K);
}

static size_t same_ids(const int64_t *a, const int64_t *b) {
    size_t n = 0;
    for (int i = 0; i < NQ * K; i++) n += a[i] == b[i];
    return n;
}

/* The checks at one size of the store (see the file comment). */
static void check_at(const char *dev_name, const kern_backend *be, kern_ctx *kc, const mem_store *s,
                     const mem_device *d, bool strict) {
    size_t n = mem_store_size(s);
    float *q = malloc(NQ * H * D * sizeof *q), *keys = malloc(n * D * sizeof *keys), *ws = malloc(NQ * K * sizeof *ws);
    int64_t dev[NQ * K], fresh_ids[NQ * K], exact[NQ * K], host[NQ * K], method[NQ * K];
    queries(q);
    mem_device *fresh = mem_device_new(be, H, D, MEM_DTYPE_BF16);
    CHECK(fresh && mem_device_sync(fresh, s, kc) == KERN_OK, "%s %zu rows: a fresh copy syncs", dev_name, n);
    for (int h = 0; h < H; h++) {
        int cells = ivf_grow_cells(mem_store_ivf_grow(s, h));
        mem_store_read_keys(s, h, 0, n, keys);
        mem_topk_bruteforce(keys, n, D, q + h * D, NQ, H * D, K, exact, ws);
        CHECK(device_search(be, kc, d, h, q, dev) == KERN_OK, "%s %zu rows head %d: device search", dev_name, n, h);
        if (!cells) {
            CHECK(same_ids(dev, exact) == NQ * K, "%s %zu rows head %d: untrained, the device search is exact "
                  "(%zu of %d ids)", dev_name, n, h, same_ids(dev, exact), NQ * K);
            continue;
        }
        int n_cells, groups;
        size_t largest;
        ivf_grow_shape(mem_store_ivf_grow(s, h), &n_cells, &groups, &largest);
        if (groups <= 16)
            CHECK(misassigned(s, h) == 0, "%s %zu rows head %d: the view's centroids are those the rows were "
                  "assigned by (%zu rows not)", dev_name, n, h, misassigned(s, h));
        CHECK(device_search(be, kc, fresh, h, q, fresh_ids) == KERN_OK, "fresh search");
        CHECK(same_ids(dev, fresh_ids) == NQ * K, "%s %zu rows head %d: the appended-to mirror = one built at once "
              "(%zu of %d ids)", dev_name, n, h, same_ids(dev, fresh_ids), NQ * K);
        host_method(s, h, q, method);
        size_t agree = same_ids(dev, method);
        CHECK(strict ? agree == NQ * K : agree >= (size_t)(0.995 * NQ * K), "%s %zu rows head %d: device = the method "
              "restated on the host (%zu of %d ids)", dev_name, n, h, agree, NQ * K);
        CHECK(mem_store_search((mem_store *)s, h, NQ, q + h * D, H * D, K, host, ws) == 0, "host search");
        double rd = recall(dev, exact), rh = recall(host, exact);
        printf("  %s %5zu rows head %d: %d cells, recall@%d vs exact: device %.3f, host IVF-grow %.3f\n", dev_name, n,
               h, cells, K, rd, rh);
        CHECK(rd >= RECALL_DEVICE && rh >= RECALL_HOST && rd >= rh - RECALL_SLACK,
              "%s %zu rows head %d: recall device %.3f (>= %.2f), host %.3f (>= %.2f), device >= host - %.2f", dev_name,
              n, h, rd, RECALL_DEVICE, rh, RECALL_HOST, RECALL_SLACK);
    }
    mem_device_free(fresh);
    free(q), free(keys), free(ws);
}

/* New cluster centres from seed, an empty IVF-grow store (nprobe NPROBE) and its device copy on be (bf16). */
static void start(uint64_t seed, const kern_backend *be, mem_store **s, mem_device **d) {
    rng = seed;
    for (int i = 0; i < NCLUSTERS * H * D; i++) centres[i] = 2.f * frand();
    mem_params p = mem_default_params();
    p.index = MEM_INDEX_IVF_GROW;
    p.ivf_nprobe = NPROBE;
    *s = mem_store_new(H, D, &p, NULL, 0);
    *d = mem_device_new(be, H, D, MEM_DTYPE_BF16);
}

static void run(const char *dev_name, const kern_backend *be, kern_ctx *kc, bool strict) {
    CHECK(mem_device_searches(be, MEM_INDEX_IVF_GROW, K) && mem_device_host_index(MEM_INDEX_IVF_GROW) ==
              MEM_INDEX_IVF_GROW && mem_device_host_index(MEM_INDEX_FLAT) == MEM_INDEX_NONE,
          "%s: IVF-grow searches on the device, its host index kept", dev_name);
    mem_store *s;
    mem_device *d;
    start(0x9E3779B97F4A7C15ull, be, &s, &d);
    CHECK(s && d, "store and device copy");
    const size_t chunks[] = {700, 2500, 1300, 999}, checks[] = {6000, SHIFT1, TOTAL};
    float *k = malloc(2500 * H * D * sizeof *k), *v = calloc(2500 * H * D, sizeof *v);
    size_t n = 0, next = 0;
    for (size_t c = 0; n < TOTAL; c++) {
        size_t m = chunks[c % 4] < TOTAL - n ? chunks[c % 4] : TOTAL - n;
        if (next < 3 && n + m > checks[next]) m = checks[next] - n; /* stop at each checkpoint */
        clustered(k, m, n);
        CHECK(mem_store_append(s, m, k, v, H * D) == 0 && mem_device_sync(d, s, kc) == KERN_OK, "%s: append %zu rows",
              dev_name, m);
        n += m;
        if (n == checks[next]) check_at(dev_name, be, kc, s, d, strict), next++;
    }
    for (int h = 0; h < H; h++) {
        const mem_device_ivf *m = mem_device_ivf_of(d, h);
        mem_device_ivf_stats st = m ? mem_device_ivf_stats_of(m) : (mem_device_ivf_stats){0};
        printf("  %s head %d: mirror rebuilt %zu times, %zu appends, %zu relayouts, %zu device bytes\n", dev_name, h,
               st.rebuilds, st.appends, st.relayouts, st.device_bytes);
        CHECK(m && st.rebuilds == 2 && st.appends > 5 && st.relayouts <= st.appends / 2,
              "%s head %d: rebuilt at the two trainings only (%zu), appended otherwise (%zu, %zu relayouts)", dev_name,
              h, st.rebuilds, st.appends, st.relayouts);
    }
    /* a clear: invalidated, the mirror empties and the search is exact again */
    mem_store_clear(s);
    clustered(k, 500, 0);
    CHECK(mem_store_append(s, 500, k, v, H * D) == 0, "append after clear");
    mem_device_invalidate(d);
    CHECK(mem_device_sync(d, s, kc) == KERN_OK && mem_device_ivf_cells(mem_device_ivf_of(d, 0)) == 0,
          "%s: after clear + invalidate the mirror is untrained", dev_name);
    check_at(dev_name, be, kc, s, d, strict);
    free(k), free(v);
    mem_device_free(d);
    mem_store_free(s);
}

/* Past 262144 rows (1024 cells, 32 groups) the host reaches cells through its 16 best groups while the device
 * scores every centroid: the probed sets differ, and so may the ids; the recalls must stay comparable. */
static void run_large(const char *dev_name, const kern_backend *be, kern_ctx *kc, bool strict) {
    mem_store *s;
    mem_device *d;
    start(0x2545F4914F6CDD1Dull, be, &s, &d);
    enum { CHUNK = 16384 };
    float *k = malloc(CHUNK * H * D * sizeof *k), *v = calloc(CHUNK * H * D, sizeof *v);
    bool ok = s && d && k && v;
    for (size_t n = 0; ok && n < LARGE; n += CHUNK) {
        size_t m = LARGE - n < CHUNK ? LARGE - n : CHUNK;
        clustered(k, m, n);
        ok = mem_store_append(s, m, k, v, H * D) == 0 && mem_device_sync(d, s, kc) == KERN_OK;
    }
    CHECK(ok, "%s: %d rows stored and synced", dev_name, LARGE);
    int cells, groups;
    size_t largest;
    ivf_grow_shape(mem_store_ivf_grow(s, 0), &cells, &groups, &largest);
    CHECK(groups > 16, "%s: %d cells in %d groups: the host probes through groups", dev_name, cells, groups);
    if (ok) check_at(dev_name, be, kc, s, d, strict);
    free(k), free(v);
    mem_device_free(d);
    mem_store_free(s);
}

int main(void) {
    kern_backend posing = *kern_cpu_backend(); /* the CPU backend as a device: nothing may touch it directly */
    posing.host_memory = 0;
    kern_ctx *kc = posing.ctx_new(2);
    run("cpu", &posing, kc, true);
    run_large("cpu", &posing, kc, true);
    posing.ctx_free(kc);

    test_devices devs = test_pick_devices();
    if (devs.cuda) {
        kern_ctx *kg = kern_cuda_ctx_new();
        CHECK(kg != NULL, "cuda context");
        if (kg) run("cuda", kern_cuda_backend(), kg, false);
        if (kg) run_large("cuda", kern_cuda_backend(), kg, false);
        kern_cuda_ctx_free(kg);
    }
    return test_summary();
}
