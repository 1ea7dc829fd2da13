/*
 * fuzz_snapshot.c — libFuzzer target: the snapshot reader and mem_store_load on arbitrary bytes. The input is
 * tried as is, then with its checksum and fingerprint patched to be right, so the fuzzer also reaches the
 * section walk and the memory-store parser behind the CRC check. Whatever is accepted must be readable in full.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <faiss/c_api/utils/distances_c.h>
#include <omp.h>

#include "memstore.h"
#include "snapshot.h"

static void consume(const uint8_t *data, size_t size, uint64_t fp) {
    char err[256];
    snap_reader *r = snap_reader_from_memory(data, size, fp, err, sizeof err);
    if (!r) return;
    uint32_t tag;
    const void *p;
    uint64_t len;
    volatile uint8_t sink = 0;
    for (size_t i = 0; snap_reader_section(r, i, &tag, &p, &len) == 0; i++) {
        for (uint64_t j = 0; j < len; j++) sink ^= ((const uint8_t *)p)[j]; /* every byte handed out is readable */
        mem_store *s = mem_store_load(p, len, err, sizeof err);
        if (s && mem_store_size(s) > 0) {
            float q[64] = {0};
            int64_t id[2];
            float sc[2];
            if (mem_store_head_dim(s) <= 64) mem_store_search(s, 0, 1, q, (size_t)mem_store_head_dim(s), 2, id, sc);
        }
        mem_store_free(s);
    }
    (void)sink;
    snap_reader_close(r);
}

/* Before OpenMP starts (FAISS and the IVF-grow index use it): one thread, asleep when idle, since a worker
 * team spinning between inputs took a third of the time. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    setenv("OMP_NUM_THREADS", "1", 0);
    setenv("OMP_WAIT_POLICY", "passive", 0);
    omp_set_num_threads(1); /* the runtime may have read the environment before this ran */
    /* FAISS's BLAS search path takes a 16 MiB tile per call whatever the size: for the few rows a fuzz input holds
     * (IVF training searches on every k-means iteration) the direct loop is the same answer at a fraction of it */
    faiss_set_distance_compute_blas_threshold(1 << 30);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    consume(data, size, 0);
    if (size < 48 || size > (1u << 20)) return 0;
    uint8_t *fixed = malloc(size);
    memcpy(fixed, data, size);
    uint64_t fp;
    memcpy(&fp, fixed + 16, 8);
    uint32_t crc = snap_crc32(0, fixed, size - 8);
    memcpy(fixed + size - 8, &crc, 4);
    memset(fixed + size - 4, 0, 4);
    consume(fixed, size, fp);
    free(fixed);
    return 0;
}
