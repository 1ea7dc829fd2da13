/*
 * ivf_grow.h — memstore's growing inverted-file index (MEM_INDEX_IVF_GROW): approximate top-k by inner product at a
 * cost per query that stays bounded as the memory grows, so a long prefill stays linear in its length.
 *
 * Why not FAISS's IVF: its cell count is fixed at creation (a query then scans a share of a growing memory:
 * quadratic prefill), and Debian's FAISS is built without SIMD (its list scan runs a scalar dot product, ~20x the
 * cost per row of the blocked scan here). FAISS's k-means was used for training at first and dropped: at 256 cells
 * and up its per-call overhead made retraining take longer than the scans it served (measured 2026-11-23).
 *
 * Layout: cells hold copies of the stored keys, in the store's dtype, in blocks of 16 rows transposed so one
 * AVX-512 FMA (two AVX2 FMAs) scores 16 rows. The cell centroids are grouped: a query scores the group centroids,
 * then the cells of its GROUP_PROBES best groups, then the rows of its nprobe best cells.
 *
 * Growth: c = rows / 256 cells, retrained at each doubling from 8192 rows (32 cells at 8192 rows, 64 at 16384, ...
 * up to max_nlist), so a cell holds ~256-512 rows and a query scans ~nprobe x 256-512 rows whatever the length; the coarse search costs ~c/32 + 16 x 32 centroid products. Cells c are trained by
 * spherical k-means: c/32 groups on a sample of the rows [0, T(c)), then each group's share of the sample into
 * cells, in proportion to its size; then every row is reassigned. Training depends only on the first T(c) rows, so
 * a store rebuilt from a snapshot, whatever the append sizes were, holds the same index as the live one. Below
 * 8192 rows every row sits in one list that each query scans whole: exact.
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

/* What a query costs: cells and groups trained (0 before training), and the rows of the largest cell. */
void ivf_grow_shape(const ivf_grow *g, int *cells, int *groups, size_t *largest_cell);

/* ---- the view a device mirror needs (memstore/mem_device_ivf.c): cells and their rows, nothing it could change.
 * The epoch changes at every training and reset, so a mirror that saw the same epoch only lacks the rows appended
 * since: a cell's rows are kept in store order, so those are the tail of each cell's list. */
uint64_t ivf_grow_epoch(const ivf_grow *g);
int ivf_grow_nprobe(const ivf_grow *g);
int ivf_grow_cells(const ivf_grow *g);   /* cells trained (0 before training: searches are exact) */
size_t ivf_grow_rows(const ivf_grow *g); /* store rows indexed */
void ivf_grow_centroids(const ivf_grow *g, float *out); /* the cells' unit centroids into out[cells][d], fp32 */
/* Cell `cell`'s store rows, ascending, *n of them; valid until the next add or reset. */
const uint32_t *ivf_grow_cell_rows(const ivf_grow *g, int cell, size_t *n);
/* A store's index of one head (memstore.c): NULL unless the store is MEM_INDEX_IVF_GROW. */
const ivf_grow *mem_store_ivf_grow(const mem_store *s, int head);

size_t ivf_grow_bytes(const ivf_grow *g);                        /* centroids + lists (codes, ids, padding) */
size_t ivf_grow_bytes_for(int d, mem_dtype dt, int max_nlist, size_t rows); /* upper bound at `rows` rows */

#endif
