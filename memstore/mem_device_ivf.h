/*
 * mem_device_ivf.h — the device mirror of one head's IVF-grow index (memstore's internal header; mem_device.c is
 * its one user). The host index (ivf_grow.c) trains the cells and assigns every row; the mirror keeps, in the
 * backend's memory, what a search needs beside the keys mem_device already holds: the cell centroids and, per cell,
 * the ids of its rows. A search then runs on the device: the queries' nprobe best cells by topk_ip over the
 * centroids, then ivf_scan_topk over those cells' rows. Before the index is trained the mirror is empty and the
 * caller searches exactly (topk_ip over every key), as the host does.
 *
 * Probing differs from the host's on purpose: the host reaches cells through group centroids (its 16 best groups'
 * cells), the device scores every centroid (one small GEMM) and takes the true nprobe best, so it probes at least
 * as well; the probed sets may differ, and recall is compared, not the ids (tests/unit/test_mem_device_ivf.c).
 */
#ifndef MNEMO_MEM_DEVICE_IVF_H
#define MNEMO_MEM_DEVICE_IVF_H

#include <stddef.h>
#include <stdint.h>

#include "ivf_grow.h"
#include "kernels.h"

typedef struct mem_device_ivf mem_device_ivf;

#define MEM_DEVICE_IVF_MAX_HD 256 /* ivf_scan_topk's CUDA limit: wider heads are searched exactly (topk_ip) */

mem_device_ivf *mem_device_ivf_new(const kern_backend *be, int head_dim); /* NULL: no host memory */
void mem_device_ivf_free(mem_device_ivf *m);                              /* NULL is a no-op */
void mem_device_ivf_invalidate(mem_device_ivf *m); /* the next sync rebuilds it whole */

/* Brings the mirror up to g: rebuilt (centroids and lists) when g was trained or reset since, else only the ids of
 * the rows assigned since are uploaded (one copy) and scattered into their cells' room. A KERN_* code. */
int mem_device_ivf_sync(mem_device_ivf *m, const ivf_grow *g, kern_ctx *kc);
int mem_device_ivf_cells(const mem_device_ivf *m); /* 0 before training: search exactly instead */

/* Top-k of nq queries (q + i*ldq, device memory) over the mirrored cells' rows of keys[n_keys][head_dim] (dt,
 * device): ids + i*ldo, best first, -1 past the rows found. A KERN_* code. */
int mem_device_ivf_search(mem_device_ivf *m, kern_ctx *kc, const void *keys, kern_dtype dt, int64_t n_keys,
                          const float *q, int64_t nq, int64_t ldq, int k, int64_t *ids, int64_t ldo);

typedef struct {
    size_t rebuilds, relayouts, appends; /* whole uploads (trainings), id-list regrowths, tail-only syncs */
    size_t device_bytes;                 /* centroids + lists + scratch held on the device */
} mem_device_ivf_stats;
mem_device_ivf_stats mem_device_ivf_stats_of(const mem_device_ivf *m);
/* The mirror of one head of a device copy (mem_device.c), NULL before an IVF-grow store was synced: for tests. */
struct mem_device;
const mem_device_ivf *mem_device_ivf_of(const struct mem_device *d, int head);

#endif
