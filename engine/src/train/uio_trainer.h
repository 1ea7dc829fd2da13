/*
 * uio_trainer.h — what mnemo_trainer (api/trainer_api.c) calls for method MNEMO_TRAIN_UIO: the UIO tensors as a
 * `trainable` (so the optimizer, clipping and train_state.mnemo work on them unchanged), one step's documents
 * through uio_document_grads, evaluation (forward only), and the UIO directory written at a checkpoint.
 *
 * A step's rows are documents: row r's first seq_len tokens (mask as train_data gives it), cut into segments of C.
 * Gradient: the mean over the step's documents of each document's summed segment losses (the reference
 * backpropagates every segment's mean loss); the reported loss is the mean segment loss. The reservoir's draw state
 * of row r at step s is a function of (seed, s, r) alone, so a resumed run draws what an unbroken run would.
 */
#ifndef MNEMO_UIO_TRAINER_H
#define MNEMO_UIO_TRAINER_H

#include "train_data.h"
#include "trainable.h"
#include "uio_train.h"

typedef struct uio_run uio_run;

/* Sets up p's UIO tensors for m (p->uio_init or a fresh init from p->seed) and points tr's items at every trained
 * tensor (the repeat token is kept, not trained: nothing reads it). Documents of p->seq_len tokens. 0, or -1. */
int uio_run_init(uio_run **out, trainable *tr, const mnemo_model *m, const mnemo_train_params *p, char *err,
                 size_t errlen);
void uio_run_free(uio_run *u);
/* Adds the gradient of n_rows documents (rows [n_rows][L + 1], masks [n_rows][L]) to the tensors' gradients;
 * *loss = their mean segment loss. 0, or -1. */
int uio_run_rows(uio_run *u, const mnemo_model *m, const mnemo_token *rows, const uint8_t *masks, int32_t n_rows,
                 int32_t L, int64_t step, double *loss, char *err, size_t errlen);
/* The mean cross-entropy over every counted token of d's documents (epoch 0's order, one at a time; row[L + 1],
 * mask[L]: scratch), forward only. 0, or -1. */
int uio_run_evaluate(uio_run *u, const mnemo_model *m, const train_data *d, mnemo_token *row, uint8_t *mask,
                     int32_t L, double *loss, int64_t *tokens, char *err, size_t errlen);
/* out_dir/uio_config.json + uio.safetensors. 0, or -1. */
int uio_run_write(const uio_run *u, const char *out_dir, char *err, size_t errlen);
/* The settings that shape the arithmetic, as JSON members (",\"uio_chunk\":..."), for the checkpoint's settings. */
void uio_run_settings(const uio_run *u, char *buf, size_t cap);
size_t uio_run_ws_bytes(const uio_run *u);

#endif
