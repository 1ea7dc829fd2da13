/*
 * ivf_grow.h — memstore's growing inverted-file index (MEM_INDEX_IVF_GROW): approximate top-k by inner product
 * whose cost per query stays near sqrt(N) rows as the memory grows, so a long prefill stays close to linear.
 *
 * Why not FAISS's IVF alone: its cell count is fixed at creation (the scan share of a growing memory then grows
 * with N: quadratic prefill), and Debian's FAISS is built without SIMD (its list scan runs a scalar dot
 * product, ~20x the cost per row of a BLAS scan). Here FAISS does what it does well — k-means (Clustering over an
 * IndexFlatIP) and the coarse search over the centroids (IndexFlatIP, BLAS) — and the lists hold copies of the
 * stored keys, in the store's dtype, in blocks of 16 rows transposed so one AVX-512 FMA scores 16 rows.
 *
 * Growth: nlist c takes the values 128, 256, ... (capped by max_nlist). Cells c are trained once the memory holds
 * T(c) = max(c^2/4, 64c) rows, on a strided sample of at most 64c of the rows [0, T(c)), then every row is
 * reassigned. Training depends only on the first T(c) rows, so a store rebuilt from a snapshot, whatever the
 * append sizes were, holds the same index as the live one. Below T(first c) = 8192 rows every row sits in one
 * list that each query scans whole: exact. Rows per cell ~ sqrt(N)/2 .. sqrt(N); nprobe cells per query.
 */
#ifndef MNEMO_IVF_GROW_H
#define MNEMO_IVF_GROW_H

#include <stddef.h>
#include <stdint.h>

#include "memstore.h"

typedef struct ivf_grow ivf_grow;

ivf_grow *ivf_grow_new(int d, mem_dtype dt, int nprobe, int max_nlist); /* NULL: no memory */
void ivf_grow_free(ivf_grow *g);                                         /* NULL is a no-op */
void ivf_grow_reset(ivf_grow *g);                                        /* forget rows and training */

/* The store now holds n_total rows, keys [n_total][d] in dt (the store's own buffer): index the new ones,
 * retraining first when n_total reaches the next T(c). 0, or -1 with a message. */
int ivf_grow_add(ivf_grow *g, const void *keys, size_t n_total, char *err, size_t errlen);

/* Top-k of nq queries (row stride ldq) over the nprobe best cells, or over every row before training; same
 * output contract as mem_store_search. */
int ivf_grow_search(const ivf_grow *g, size_t nq, const float *q, size_t ldq, int k, int64_t *ids, float *scores,
                    char *err, size_t errlen);

size_t ivf_grow_bytes(const ivf_grow *g);                        /* centroids + lists (codes, ids, padding) */
size_t ivf_grow_bytes_for(int d, mem_dtype dt, int max_nlist, size_t rows); /* upper bound at `rows` rows */

#endif
