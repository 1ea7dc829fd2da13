/*
 * train_checkpoint.h — a training run's state in one file: what a resumed run needs to continue
 * bit for bit. The file is the checksummed container (container/include/snapshot.h: magic, version, the model's
 * fingerprint, CRC-32, written to a unique path.tmp.XXXXXX and renamed), with sections:
 *   TRNM  u32 version (1), u32 0, i64 step, u64 data_seed, u64 rng[4]
 *   TRNS  the run's settings as the trainer serialises them (e.g. JSON): a resume with other settings is refused
 *   TRNB  one per buffer: u32 name length, name, zero padding to 8, u64 floats, fp32 values (parameters being
 *         trained, AdamW's first and second moments, ...)
 * Loading checks everything — the fingerprint, the checksum, the settings, every buffer's name and size, no buffer
 * missing or extra — before it writes a single value into the caller's buffers, so a corrupt or foreign file
 * leaves the run as it was.
 */
#ifndef MNEMO_TRAIN_CHECKPOINT_H
#define MNEMO_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t step;       /* optimizer steps done */
    uint64_t data_seed; /* the data order's key (train_data: the order is a function of seed and step) */
    uint64_t rng[4];    /* any other random state the run carries */
} train_ckpt_meta;

typedef struct {
    const char *name;
    float *data;
    size_t n; /* floats */
} train_ckpt_buffer;

int train_ckpt_save(const char *path, uint64_t fingerprint, const train_ckpt_meta *meta, const char *settings,
                    const train_ckpt_buffer *bufs, size_t n_bufs, char *err, size_t errlen);
/* settings: what this run would write; bufs: names and sizes expected, filled only when everything checks. */
int train_ckpt_load(const char *path, uint64_t fingerprint, train_ckpt_meta *meta, const char *settings,
                    const train_ckpt_buffer *bufs, size_t n_bufs, char *err, size_t errlen);

#endif
