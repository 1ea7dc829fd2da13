/*
 * uio_train.h — training a UIO-LLM: the encoder LoRA (q, v), the transfer head's LoRA (k, v)
 * and the <mem> embedding, trained end to end over long documents segment by segment with the paper's unbiased
 * incremental TBPTT. The base
 * model is frozen. Semantics are those of inference (tests/fixtures/uio/README.md); the PyTorch twin is
 * tests/reference/uio_train_reference.py.
 *
 * A document of n tokens is cut into segments of C (the last may be shorter). For segment t (0-based):
 *   1. the decoder reads it over the memory of segments 0..t-1 (positions: memory slot j at j, token i at tM + i)
 *      and its loss J_t = mean cross-entropy of tokens[i+1] from tokens[0..i] inside the segment (the reference's
 *      language-modelling task: a segment's first token is not predicted); J_t (times dscale) is backpropagated
 *      at once: into the transfer head's LoRA directly, and into the memory leaves h_s (the encoder's <mem>
 *      attention inputs, per layer [M, hidden]) of the earlier segments still alive, each such gradient
 *      multiplied by the compensation factor max(1, t/S) (the paper's max(1, (t-1)/S) with 1-based t; option);
 *   2. unless it is the document's last segment (whose memory nobody reads), the encoder compresses it into h_t;
 *   3. reservoir sampling over the compressed segments with S slots (Vitter's algorithm R, as the reference's
 *      train.py): segment t < S joins the reservoir; otherwise j = draw % (t + 1) and if j < S the segment in
 *      slot j is evicted — its encoder graph backpropagated with the gradient its leaf accumulated — and t takes
 *      the slot, else t's graph is dropped at once (its leaf never reaches the encoder).
 *   At the end the reservoir's segments are backpropagated, last slot first. S = 0 means full BPTT: every graph
 *   kept to the end, no factor. The draws are the 64-bit outputs of splitmix64 (state += 0x9E3779B97F4A7C15; z =
 *   state; z = (z ^ z>>30) * 0xBF58476D1CE4E5B9; z = (z ^ z>>27) * 0x94D049BB133111EB; z ^ z>>31) from the
 *   state the caller passes, one draw per compressed segment t >= S, in order — the same sequence in torch.
 *
 * An "encoder graph kept" is the segment's ids plus its leaf's gradient: the encoder's activations are recomputed
 * when the graph is backpropagated (the same ops on the same inputs and weights: the same numbers), so at most
 * one encoder's activations exist at a time and the S + 1 live graphs cost S + 1 leaf gradients.
 */
#ifndef MNEMO_UIO_TRAIN_H
#define MNEMO_UIO_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

/* The trained tensors in the reference checkpoint's order (uio_weights.h): 0 retrieval_token [hidden]; per layer l
 * 1 + 4l + {0: q.A [r, hidden], 1: q.B [q_dim, r], 2: v.A, 3: v.B [kv_dim, r]}; 1 + 4L repeat_token [hidden] (kept,
 * unused: no gradient); per layer 2 + 4L + 4l + {0: k.A, 1: k.B, 2: v.A, 3: v.B}. B is NOT multiplied by the scale
 * (peft's layout): a LoRA'd projection is x W^T + scale (x A^T) B^T, scale = alpha / r. */
typedef struct {
    char name[64];   /* mnemo's uio.safetensors name (encoder.layers.0.q_proj.lora_A, ...) */
    float *p, *g;    /* value and gradient (accumulated), n floats each, in the memory of uio_train_weights.be */
    int64_t rows, cols; /* shape; the tokens are (1, 1, hidden) on disk */
    size_t n;
} uio_tensor;

typedef struct {
    int32_t n_layer, hidden, q_dim, kv_dim;
    int32_t C, M, r;     /* chunk_size, num_memory, lora_rank */
    double alpha;        /* lora_alpha */
    float scale;         /* alpha / r */
    uio_tensor *t;       /* 2 + 8 n_layer */
    size_t count;
    const struct kern_backend *be; /* device backend holding every p and g (train_mem.h); NULL: host memory */
} uio_train_weights;

enum { UIO_Q = 0, UIO_K = 0, UIO_V = 1 }; /* which projection: encoder q/v, transfer head k/v */
static inline uio_tensor *uio_enc(uio_train_weights *w, int32_t l, int which, int is_b) {
    return &w->t[1 + 4 * l + 2 * which + is_b];
}
static inline uio_tensor *uio_dec(uio_train_weights *w, int32_t l, int which, int is_b) {
    return &w->t[2 + 4 * w->n_layer + 4 * l + 2 * which + is_b];
}

/* New tensors for model m: from init_dir (a UIO directory, either checkpoint format; its C, M, r, alpha are taken
 * and C/M/r given non-zero must agree), or else LoRA A ~ U(-1/sqrt(in), 1/sqrt(in)) from seed, B = 0 (peft's
 * init) and both tokens = embedding row 2 (</s>), as the reference initialises its <mem> token. Made on the host,
 * then (a device model: CUDA) uploaded once into the backend's memory, where p and g stay. 0, or -1. */
int uio_train_weights_init(uio_train_weights *w, const mnemo_model *m, const char *init_dir, int32_t C, int32_t M,
                           int32_t r, double alpha, uint64_t seed, char *err, size_t errlen);
void uio_train_weights_free(uio_train_weights *w);
void uio_train_weights_zero_grads(uio_train_weights *w);
/* Writes dir/uio_config.json (num_memory, lora_rank, lora_alpha, lora_dropout 0, chunk_size) and dir/uio.safetensors
 * (mnemo's names, fp32, metadata format mnemo-uio/1) that mnemo generate --uio loads (device: downloaded). 0, or -1. */
int uio_train_weights_write(const uio_train_weights *w, const char *dir, char *err, size_t errlen);

/* Workspace for documents of up to max_tokens tokens (activations of one decoder segment and one encoder pass,
 * and every segment's memory), in the memory of m's backend: on a device every pass runs there, the document's ids
 * and targets go up in one copy and its segment losses come back in one (the only read-back). */
typedef struct uio_train_ws uio_train_ws;
uio_train_ws *uio_train_ws_new(const mnemo_model *m, const uio_train_weights *w, int64_t max_tokens, char *err,
                               size_t errlen);
void uio_train_ws_free(uio_train_ws *ws);
size_t uio_train_ws_bytes(const uio_train_ws *ws);

typedef struct {
    int32_t slots;     /* S: reservoir slots; 0 = full BPTT */
    bool compensate;   /* multiply memory gradients by max(1, t/S) (default on; ignored with S = 0) */
    bool forward_only; /* the losses alone (evaluation): segments compressed, nothing backpropagated, no draws */
} uio_tbptt_opts;

typedef struct {
    double loss_sum;   /* the segments' mean losses, summed */
    int32_t n_losses;  /* segments that had a loss */
    double token_loss; /* cross-entropy summed over every counted token */
    int64_t tokens;    /* counted tokens */
} uio_doc_stats;

/* Adds to w's gradients dscale times the gradient of the document's segment losses (see above) over ids[0..n-1]
 * (host memory; mask NULL: every token predicted; else mask[i] = 1: ids[i + 1] counts). *rng: the draw state,
 * advanced. *st receives the losses. On return every pass has finished (device: the losses' read-back waited for
 * them), so another context may read the gradients. 0, or -1. */
int uio_document_grads(uio_train_ws *ws, const mnemo_model *m, uio_train_weights *w, const int32_t *ids,
                       const uint8_t *mask, int64_t n, float dscale, const uio_tbptt_opts *o, uint64_t *rng,
                       uio_doc_stats *st, char *err, size_t errlen);

/* One splitmix64 draw (the reservoir's). */
uint64_t uio_splitmix64(uint64_t *state);

#endif
