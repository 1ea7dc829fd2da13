/*
 * uio_snapshot.c — UIO's part of a context snapshot. context_snapshot.c saves the cache rows [0, next_row), which
 * here are the whole state the decoder reads: the <mem> entries, then the raw tokens (uio_memory.h). What is left:
 *   header settings  chunk_size, num_memory, segments compressed, raw tokens, lora_rank
 *   UACC  the accumulator's token ids (int32, one per raw token): the encoder input of the next compression
 *   UKPT  only with uio_keep_raw W > 0 (option (a)): int32 W and the raw rows kept from the last compression (W, or
 *         0 before the first). A snapshot loads only into a context with the same W (absent: W = 0).
 * The model fingerprint covers the UIO weights, so a snapshot never loads over other UIO weights.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot.h"
#include "uio_memory.h"

#define TAG_ACC SNAP_TAG('U', 'A', 'C', 'C')
#define TAG_KEEP SNAP_TAG('U', 'K', 'P', 'T')

enum { SET_CHUNK, SET_NUM_MEMORY, SET_SEGMENTS, SET_RAW, SET_RANK }; /* memory_snap.settings[] */

void uio_snapshot_settings(const void *st, int32_t out[MEMORY_SNAP_SETTINGS]) {
    const uio_state *s = st;
    memset(out, 0, MEMORY_SNAP_SETTINGS * sizeof *out);
    out[SET_CHUNK] = s->C;
    out[SET_NUM_MEMORY] = s->M;
    out[SET_SEGMENTS] = (int32_t)s->segments; /* <= n_ctx / M: cache rows bound it */
    out[SET_RAW] = s->n_raw;
    out[SET_RANK] = s->u->lora_rank;
}

int uio_save(const void *st, snap_writer *w, int32_t n_rows) {
    const uio_state *s = st;
    (void)n_rows; /* = n_mem + n_kept + n_raw */
    if (snap_section(w, TAG_ACC, s->acc, (uint64_t)s->n_raw * sizeof(int32_t)) != 0) return -1;
    const int32_t keep[2] = {s->W, s->n_kept};
    return s->W > 0 ? snap_section(w, TAG_KEEP, keep, sizeof keep) : 0; /* W = 0: the file as before option (a) */
}

typedef struct {
    int32_t segments, n_kept, n_raw;
    const int32_t *acc; /* in the reader's memory, alive until it closes (after load_commit) */
} staged_load;

static mnemo_status refuse(char *err, size_t errlen, const char *fmt, int a, int b, int c, int d) {
    snprintf(err, errlen, fmt, a, b, c, d);
    return MNEMO_ERR_FORMAT;
}

mnemo_status uio_load_check(const void *st, const snap_reader *r, const memory_snap *sn, void **staged, char *err,
                            size_t errlen) {
    const uio_state *s = st;
    const int32_t *set = sn->settings;
    *staged = NULL;
    if (set[SET_CHUNK] != s->C || set[SET_NUM_MEMORY] != s->M || set[SET_RANK] != s->u->lora_rank)
        return refuse(err, errlen,
                      "it was saved with chunk_size %d and num_memory %d; this UIO model has %d and %d",
                      set[SET_CHUNK], set[SET_NUM_MEMORY], s->C, s->M);
    int64_t segs = set[SET_SEGMENTS], raw = set[SET_RAW];
    const void *data;
    uint64_t len;
    int32_t keep[2] = {0, 0}; /* W and the kept rows; absent: W = 0 */
    if (snap_reader_find(r, TAG_KEEP, &data, &len) == 0) {
        if (len != sizeof keep) return refuse(err, errlen, "its kept-raw section has the wrong size", 0, 0, 0, 0);
        memcpy(keep, data, sizeof keep);
    }
    if (keep[0] != s->W)
        return refuse(err, errlen,
                      "it was saved keeping %d raw tokens after each compression (uio_keep_raw); this context keeps "
                      "%d: its later tokens would differ",
                      keep[0], s->W, 0, 0);
    if (keep[1] != (segs > 0 ? s->W : 0))
        return refuse(err, errlen, "its kept raw rows (%d) do not match uio_keep_raw %d after %d segments", keep[1],
                      s->W, (int)segs, 0);
    if (segs < 0 || raw < 0 || raw > s->C || segs * s->M + keep[1] + raw != sn->n_rows ||
        segs * s->C + raw != sn->n_past)
        return refuse(err, errlen, "its UIO counts (%d segments, %d raw tokens) do not match its %d rows and %d tokens",
                      (int)segs, (int)raw, sn->n_rows, sn->n_past);
    if (snap_reader_find(r, TAG_ACC, &data, &len) != 0 || len != (uint64_t)raw * sizeof(int32_t))
        return refuse(err, errlen, "its accumulator section is missing or has the wrong size (%d tokens expected)",
                      (int)raw, 0, 0, 0);
    const int32_t *ids = data;
    for (int64_t i = 0; i < raw; i++)
        if (ids[i] < 0 || ids[i] >= s->cfg->vocab_size)
            return refuse(err, errlen, "its accumulator holds token %d, outside the vocabulary [0, %d)", ids[i],
                          s->cfg->vocab_size, 0, 0);
    staged_load *sl = malloc(sizeof *sl);
    if (!sl) {
        snprintf(err, errlen, "out of memory");
        return MNEMO_ERR_NOMEM;
    }
    *sl = (staged_load){.segments = (int32_t)segs, .n_kept = keep[1], .n_raw = (int32_t)raw, .acc = ids};
    *staged = sl;
    return MNEMO_OK;
}

void uio_load_commit(void *st, void *staged, const memory_snap *sn) {
    uio_state *s = st;
    const staged_load *sl = staged;
    (void)sn;
    memcpy(s->acc, sl->acc, (size_t)sl->n_raw * sizeof(int32_t));
    s->segments = sl->segments;
    s->n_mem = sl->segments * s->M;
    s->n_kept = sl->n_kept;
    s->n_raw = sl->n_raw;
    uio_load_discard(st, staged);
}

void uio_load_discard(const void *st, void *staged) {
    (void)st;
    free(staged);
}
