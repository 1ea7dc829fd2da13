/*
 * mem_device_ivf.c — the device mirror of one head's IVF-grow index; what it holds and why in mem_device_ivf.h.
 *
 * Layout on the device: centroids [cells][d] fp32; the inverted lists as capacity blocks in one int32 array of row
 * ids, cell c owning slots [start[c], start[c] + cap[c]) of which the first len[c] are used (start and len are
 * device arrays too, read by ivf_scan_topk; cap stays on the host). A training rebuilds all of it, giving each cell
 * room for twice its rows plus ROOM. Between trainings new rows only append: a cell's rows are kept in store
 * order by the host index, so the new ones are the tail of each list; their (slot, id) pairs go up in one copy and
 * scatter_i32 puts them in place, then the len array (4 bytes a cell) is re-sent. A cell that outgrows its room
 * forces a relayout of the id lists (ids only; keys never move, centroids stay) with every cell's room reset to
 * twice its rows: rows at most double between trainings, so that is rare (counted in the stats).
 * max_scan, the most rows a query's probed cells can hold, is bounded by nprobe x the largest cell (exact enough:
 * it sizes scratch only).
 */
#include "mem_device_ivf.h"

#include <stdlib.h>
#include <string.h>

#define ROOM 64 /* extra slots per cell at a layout, so small cells take appends without a relayout */

struct mem_device_ivf {
    const kern_backend *be;
    int d;
    int synced;                   /* 0: nothing mirrored yet (or invalidated) */
    uint64_t epoch;               /* the index's epoch mirrored */
    size_t indexed;               /* store rows mirrored */
    int cells, nprobe;
    float *cent;                  /* device [cells][d] */
    int32_t *start_d, *len_d;     /* device [cells] */
    int32_t *rows_d;              /* device [slots] */
    int32_t *start, *len, *cap;   /* host [cells] */
    size_t slots;                 /* sum of cap */
    int32_t largest;              /* rows of the largest cell */
    int64_t *probe;               /* device scratch [probe_cap] for the coarse search's cell ids */
    size_t probe_cap;
    int32_t *stage_d, *stage_h;   /* device / host [2][stage_cap]: slots then ids of an append */
    size_t stage_cap;
    mem_device_ivf_stats stats;
};

mem_device_ivf *mem_device_ivf_new(const kern_backend *be, int head_dim) {
    mem_device_ivf *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->be = be;
    m->d = head_dim;
    return m;
}

/* Drops the lists and centroids (not the scratch). */
static void drop(mem_device_ivf *m) {
    const kern_backend *be = m->be;
    be->mem_free(m->cent), be->mem_free(m->start_d), be->mem_free(m->len_d), be->mem_free(m->rows_d);
    free(m->start), free(m->len), free(m->cap);
    m->cent = NULL, m->start_d = m->len_d = m->rows_d = NULL, m->start = m->len = m->cap = NULL;
    m->cells = 0, m->slots = 0, m->largest = 0;
}

void mem_device_ivf_free(mem_device_ivf *m) {
    if (!m) return;
    drop(m);
    m->be->mem_free(m->probe), m->be->mem_free(m->stage_d);
    free(m->stage_h);
    free(m);
}

void mem_device_ivf_invalidate(mem_device_ivf *m) {
    if (m) m->synced = 0;
}

int mem_device_ivf_cells(const mem_device_ivf *m) { return m->cells; }

mem_device_ivf_stats mem_device_ivf_stats_of(const mem_device_ivf *m) {
    mem_device_ivf_stats s = m->stats;
    s.device_bytes = (size_t)m->cells * ((size_t)m->d * 4 + 8) + m->slots * 4 + m->probe_cap * 8 + m->stage_cap * 8;
    return s;
}

/* The id lists of g laid out afresh (room: twice each cell's rows + ROOM) and uploaded whole. */
static int layout(mem_device_ivf *m, const ivf_grow *g, kern_ctx *kc) {
    const kern_backend *be = m->be;
    size_t slots = 0;
    m->largest = 0;
    for (int c = 0; c < m->cells; c++) {
        size_t n;
        ivf_grow_cell_rows(g, c, &n);
        m->len[c] = (int32_t)n;
        m->cap[c] = (int32_t)(2 * n + ROOM);
        m->start[c] = (int32_t)slots;
        slots += (size_t)m->cap[c];
        if (m->len[c] > m->largest) m->largest = m->len[c];
    }
    if (slots > INT32_MAX) return KERN_ESHAPE;
    int32_t *host = malloc(slots * sizeof *host);
    if (!host) return KERN_ENOMEM;
    for (int c = 0; c < m->cells; c++) {
        size_t n;
        const uint32_t *ids = ivf_grow_cell_rows(g, c, &n);
        for (size_t r = 0; r < n; r++) host[(size_t)m->start[c] + r] = (int32_t)ids[r];
        for (size_t r = n; r < (size_t)m->cap[c]; r++) host[(size_t)m->start[c] + r] = -1; /* room: never read */
    }
    int rc = KERN_OK;
    if (slots > m->slots || !m->rows_d) { /* grow: the old ids are replaced whole anyway */
        be->mem_free(m->rows_d);
        m->rows_d = be->mem_alloc(slots * sizeof *m->rows_d);
        if (!m->rows_d) rc = KERN_ENOMEM;
        else m->slots = slots;
    }
    if (rc == KERN_OK) rc = be->mem_copy(kc, m->rows_d, host, slots * sizeof *host, KERN_H2D);
    if (rc == KERN_OK) rc = be->mem_copy(kc, m->start_d, m->start, (size_t)m->cells * sizeof *m->start, KERN_H2D);
    if (rc == KERN_OK) rc = be->mem_copy(kc, m->len_d, m->len, (size_t)m->cells * sizeof *m->len, KERN_H2D);
    if (rc == KERN_OK) rc = be->sync(kc); /* host is freed next (a pinned copy could still be reading it) */
    free(host);
    return rc;
}

/* After a training (or the first sync): centroids and lists from scratch. */
static int rebuild(mem_device_ivf *m, const ivf_grow *g, kern_ctx *kc) {
    const kern_backend *be = m->be;
    drop(m);
    int cells = ivf_grow_cells(g);
    m->nprobe = ivf_grow_nprobe(g);
    if (cells == 0) return KERN_OK; /* untrained: exact search over the keys */
    m->cells = cells;
    size_t cb = (size_t)cells * (size_t)m->d * sizeof(float);
    float *cent = malloc(cb);
    m->start = malloc((size_t)cells * sizeof *m->start);
    m->len = malloc((size_t)cells * sizeof *m->len);
    m->cap = malloc((size_t)cells * sizeof *m->cap);
    m->cent = be->mem_alloc(cb);
    m->start_d = be->mem_alloc((size_t)cells * sizeof *m->start_d);
    m->len_d = be->mem_alloc((size_t)cells * sizeof *m->len_d);
    int rc = cent && m->start && m->len && m->cap && m->cent && m->start_d && m->len_d ? KERN_OK : KERN_ENOMEM;
    if (rc == KERN_OK) {
        ivf_grow_centroids(g, cent);
        rc = be->mem_copy(kc, m->cent, cent, cb, KERN_H2D);
    }
    if (rc == KERN_OK) rc = layout(m, g, kc); /* (syncs before cent is freed) */
    free(cent);
    if (rc != KERN_OK) drop(m);
    m->stats.rebuilds++;
    return rc;
}

/* Same training as mirrored: the rows assigned since, appended to their cells (a relayout if one is full). */
static int append(mem_device_ivf *m, const ivf_grow *g, kern_ctx *kc) {
    const kern_backend *be = m->be;
    size_t n_new = 0;
    if (ivf_grow_cells(g) != m->cells) return rebuild(m, g, kc); /* not the index mirrored: never trust a tail */
    for (int c = 0; c < m->cells; c++) {
        size_t n;
        ivf_grow_cell_rows(g, c, &n);
        if (n < (size_t)m->len[c]) return rebuild(m, g, kc);
        if (n > (size_t)m->cap[c]) {
            m->stats.relayouts++;
            return layout(m, g, kc);
        }
        n_new += n - (size_t)m->len[c];
    }
    if (n_new == 0) return KERN_OK;
    if (n_new > m->stage_cap) {
        size_t cap = n_new + n_new / 2;
        int32_t *h = malloc(2 * cap * sizeof *h), *dv = be->mem_alloc(2 * cap * sizeof *dv);
        if (!h || !dv) {
            free(h), be->mem_free(dv);
            return KERN_ENOMEM;
        }
        int rc = be->sync(kc); /* the old staging may still be in flight */
        free(m->stage_h), be->mem_free(m->stage_d);
        m->stage_h = h, m->stage_d = dv, m->stage_cap = cap;
        if (rc != KERN_OK) return rc;
    }
    int32_t *slot = m->stage_h, *id = m->stage_h + n_new;
    size_t at = 0;
    for (int c = 0; c < m->cells; c++) {
        size_t n;
        const uint32_t *ids = ivf_grow_cell_rows(g, c, &n);
        for (size_t r = (size_t)m->len[c]; r < n; r++, at++)
            slot[at] = m->start[c] + (int32_t)r, id[at] = (int32_t)ids[r];
        m->len[c] = (int32_t)n;
        if (m->len[c] > m->largest) m->largest = m->len[c];
    }
    int rc = be->mem_copy(kc, m->stage_d, m->stage_h, 2 * n_new * sizeof *slot, KERN_H2D);
    if (rc == KERN_OK)
        rc = be->scatter_i32(kc, m->rows_d, (int64_t)m->slots, m->stage_d, m->stage_d + n_new, (int64_t)n_new);
    /* no sync: a host-to-device copy from pageable memory has read its source when it returns (mem_device_sync's
     * uploads rely on it too), so the staging and len may be rewritten at the next sync while the GPU runs on */
    if (rc == KERN_OK) rc = be->mem_copy(kc, m->len_d, m->len, (size_t)m->cells * sizeof *m->len, KERN_H2D);
    m->stats.appends++;
    return rc;
}

int mem_device_ivf_sync(mem_device_ivf *m, const ivf_grow *g, kern_ctx *kc) {
    if (ivf_grow_rows(g) > INT32_MAX) return KERN_ESHAPE; /* row ids are int32 on the device */
    if (m->synced && m->epoch == ivf_grow_epoch(g) && m->indexed == ivf_grow_rows(g)) return KERN_OK;
    int rc = m->synced && m->epoch == ivf_grow_epoch(g) ? (m->cells ? append(m, g, kc) : KERN_OK) : rebuild(m, g, kc);
    m->synced = rc == KERN_OK;
    m->epoch = ivf_grow_epoch(g);
    m->indexed = ivf_grow_rows(g);
    return rc;
}

int mem_device_ivf_search(mem_device_ivf *m, kern_ctx *kc, const void *keys, kern_dtype dt, int64_t n_keys,
                          const float *q, int64_t nq, int64_t ldq, int k, int64_t *ids, int64_t ldo) {
    const kern_backend *be = m->be;
    if (!m->cells || nq < 0) return KERN_ESHAPE;
    int np = m->nprobe < m->cells ? m->nprobe : m->cells;
    if (np < 1) np = 1;
    size_t need = (size_t)nq * (size_t)np;
    if (need > m->probe_cap) {
        int rc = be->sync(kc); /* a queued search may still read the old scratch */
        if (rc != KERN_OK) return rc;
        be->mem_free(m->probe);
        m->probe_cap = need + need / 2;
        m->probe = be->mem_alloc(m->probe_cap * sizeof *m->probe);
        if (!m->probe) {
            m->probe_cap = 0;
            return KERN_ENOMEM;
        }
    }
    /* coarse: every centroid scored, the np best cells per query */
    int rc = be->topk_ip(kc, m->probe, NULL, np, q, nq, ldq, m->cent, KERN_F32, m->cells, m->d, np);
    if (rc != KERN_OK) return rc;
    return be->ivf_scan_topk(kc, ids, NULL, ldo, q, nq, ldq, keys, dt, n_keys, m->d, m->probe, np, m->start_d,
                             m->len_d, m->cells, m->rows_d, (int64_t)np * m->largest, k);
}
