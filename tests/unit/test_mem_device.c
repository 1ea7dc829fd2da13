/*
 * test_mem_device.c — memstore's device backend (mem_device: a store's rows in a kernel backend's memory, exact
 * kNN there; IVF-grow's mirror has test_mem_device_ivf) without a GPU: a "device" that is the CPU backend with
 * host_memory cleared, so every byte goes through the backend's mem_alloc / mem_copy / topk_ip exactly as on CUDA. Checks the choice (mem_device_searches), the copy
 * after appends that grow it (rows kept across growth), invalidation after a clear, and the search against the
 * brute-force oracle with strided queries and ids, for every storage dtype. CUDA's own topk_ip is checked against
 * the CPU's by test_ops.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "memstore.h"
#include "test_util.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1ull << 24))) * 2.f - 1.f;
}

static void test_choice(const kern_backend *dev) {
    const kern_backend *cpu = kern_cpu_backend();
    CHECK(!mem_device_searches(cpu, MEM_INDEX_FLAT, 8), "host memory: the host store searches");
    CHECK(!mem_device_searches(NULL, MEM_INDEX_FLAT, 8), "no backend");
    CHECK(mem_device_searches(dev, MEM_INDEX_FLAT, 8) && mem_device_searches(dev, MEM_INDEX_NONE, 1) &&
              mem_device_searches(dev, MEM_INDEX_NONE, MEM_DEVICE_MAX_K),
          "device memory, exact index: the device searches");
    CHECK(!mem_device_searches(dev, MEM_INDEX_IVF, 8) && !mem_device_searches(dev, MEM_INDEX_HNSW, 8),
          "FAISS's approximate indexes search the host store");
    CHECK(mem_device_searches(dev, MEM_INDEX_IVF_GROW, 8), "IVF-grow searches its device mirror "
          "(test_mem_device_ivf)");
    CHECK(!mem_device_searches(dev, MEM_INDEX_FLAT, 0) && !mem_device_searches(dev, MEM_INDEX_FLAT, MEM_DEVICE_MAX_K + 1),
          "k outside 1..%d", MEM_DEVICE_MAX_K);
}

/* The copy holds exactly the store's rows, head by head. */
static bool same_rows(const mem_device *d, const mem_store *s) {
    size_t n = mem_store_size(s), row = (size_t)mem_store_head_dim(s) * (mem_store_dtype(s) == MEM_DTYPE_F32 ? 4 : 2);
    if (mem_device_rows(d) != n) return false;
    for (int h = 0; h < mem_store_n_heads(s); h++)
        if (n && (memcmp(mem_device_keys(d)[h], mem_store_raw_keys(s, h), n * row) ||
                  memcmp(mem_device_values(d)[h], mem_store_raw_values(s, h), n * row)))
            return false;
    return true;
}

static void test_copy_and_search(const kern_backend *dev, kern_ctx *kc, mem_dtype dt) {
    enum { H = 3, D = 20, K = 7, NQ = 9, LDQ = H * D + 4, LDO = K + 3 };
    mem_params p = mem_default_params();
    p.dtype = dt;
    p.index = MEM_INDEX_NONE;
    mem_store *s = mem_store_new(H, D, &p, NULL, 0);
    mem_device *d = mem_device_new(dev, H, D, dt);
    CHECK(s && d, "dtype %d: store and copy", dt);
    CHECK(mem_device_sync(d, s, kc) == KERN_OK && mem_device_rows(d) == 0, "dtype %d: an empty store syncs", dt);
    const size_t rounds[] = {5, 120, 200, 1, 300}; /* past 256 rows, then past 384: the copy grows twice */
    for (size_t r = 0; r < sizeof rounds / sizeof *rounds; r++) {
        size_t n = rounds[r];
        float *k = malloc(n * H * D * sizeof *k), *v = malloc(n * H * D * sizeof *v);
        for (size_t i = 0; i < n * H * D; i++) k[i] = frand(), v[i] = frand();
        CHECK(mem_store_append(s, n, k, v, H * D) == 0, "append");
        free(k);
        free(v);
        CHECK(mem_device_sync(d, s, kc) == KERN_OK && same_rows(d, s), "dtype %d round %zu: the copy holds the %zu rows",
              dt, r, mem_store_size(s));
    }
    /* exact search on the copy = the brute-force oracle over the rounded keys */
    size_t n = mem_store_size(s);
    float q[NQ * LDQ], *keys = malloc(n * D * sizeof *keys), want_s[NQ * K];
    int64_t ids[NQ * LDO], want[NQ * K];
    for (int i = 0; i < NQ * LDQ; i++) q[i] = frand();
    bool ok = true;
    for (int h = 0; h < H; h++) {
        memset(ids, 0x55, sizeof ids);
        const float *qh = q + h * D;
        ok &= mem_device_search(d, kc, h, qh, NQ, LDQ, K, ids, LDO) == KERN_OK;
        mem_store_read_keys(s, h, 0, n, keys);
        mem_topk_bruteforce(keys, n, D, qh, NQ, LDQ, K, want, want_s);
        for (int i = 0; i < NQ; i++)
            ok &= !memcmp(ids + i * LDO, want + i * K, K * sizeof *ids) && ids[i * LDO + K] == 0x5555555555555555ll;
    }
    CHECK(ok, "dtype %d: device search = brute force, strided queries and ids, nothing written past k", dt);
    CHECK(mem_device_search(d, kc, H, q, NQ, LDQ, K, ids, LDO) == KERN_ESHAPE &&
              mem_device_search(d, kc, 0, q, NQ, LDQ, MEM_DEVICE_MAX_K + 1, ids, LDO) == KERN_ESHAPE,
          "bad head or k refused");
    /* a clear makes the copy stale: invalidated, the next sync uploads the new rows whole */
    mem_store_clear(s);
    float k2[10 * H * D], v2[10 * H * D];
    for (int i = 0; i < 10 * H * D; i++) k2[i] = frand(), v2[i] = frand();
    CHECK(mem_store_append(s, 10, k2, v2, H * D) == 0, "append after clear");
    mem_device_invalidate(d);
    CHECK(mem_device_sync(d, s, kc) == KERN_OK && same_rows(d, s), "dtype %d: after clear + invalidate", dt);
    free(keys);
    mem_device_free(d);
    mem_store_free(s);
}

int main(void) {
    kern_backend dev = *kern_cpu_backend(); /* the CPU backend posing as a device: nothing may touch it directly */
    dev.host_memory = 0;
    kern_ctx *kc = dev.ctx_new(1);
    test_choice(&dev);
    for (int dt = 0; dt <= 2; dt++) test_copy_and_search(&dev, kc, (mem_dtype)dt);
    mem_device_free(NULL);
    dev.ctx_free(kc);
    return test_summary();
}
