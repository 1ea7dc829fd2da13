/*
 * uio_tbptt.c — one document's gradient by (unbiased) incremental TBPTT (uio_train.h): the loop over segments,
 * the reservoir, the compensation factor. The passes themselves are uio_grad.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uio_grad.h"
#include "errbuf.h"

uint64_t uio_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int uio_document_grads(uio_train_ws *ws, const mnemo_model *m, uio_train_weights *w, const int32_t *ids,
                       const uint8_t *mask, int64_t n, float dscale, const uio_tbptt_opts *o, uint64_t *rng,
                       uio_doc_stats *st, char *err, size_t errlen) {
    const int32_t C = w->C;
    const int64_t T = (n + C - 1) / C; /* segments; only the last may be short */
    *st = (uio_doc_stats){0};
    if (n < 2) return errbuf_fail(err, errlen, "a document of %lld tokens (at least 2)", (long long)n);
    if (T > uio_grad_max_segments(ws))
        return errbuf_fail(err, errlen, "a document of %lld tokens: the workspace holds %d segments of %d",
                           (long long)n,
                           uio_grad_max_segments(ws), C);
    if (o->slots < 0) return errbuf_fail(err, errlen, "tbptt slots %d (0: full BPTT)", o->slots);
    const int32_t S = o->slots;
    float *factor = calloc((size_t)T, sizeof *factor);      /* per earlier segment: 0 = graph gone */
    float *losses = calloc((size_t)T, sizeof *losses);      /* read back once, at the end */
    int32_t *reservoir = calloc((size_t)(S ? S : T), sizeof *reservoir), *tgt = malloc((size_t)n * sizeof *tgt);
    int32_t *counted = calloc((size_t)T, sizeof *counted); /* per segment: tokens with a target (0: no loss) */
    int32_t in_res = 0, rc = 0;
    bool *alive = calloc((size_t)T, sizeof *alive);
    if (!factor || !losses || !reservoir || !tgt || !counted || !alive) {
        rc = errbuf_fail(err, errlen, "out of memory");
        goto out;
    }
    for (int64_t t = 0; t < T; t++) { /* each segment predicts its own next tokens: its last one has no target */
        const int32_t len = (int32_t)(t + 1 < T ? C : n - t * C);
        for (int32_t i = 0; i < len; i++) {
            bool on = i + 1 < len && (!mask || mask[t * C + i]);
            tgt[t * C + i] = on ? ids[t * C + i + 1] : -1;
            counted[t] += on;
        }
    }
    rc = uio_grad_load_document(ws, ids, tgt, n, err, errlen);
    for (int64_t t = 0; t < T && rc == 0; t++) {
        const int32_t len = (int32_t)(t + 1 < T ? C : n - t * C);
        /* 1. the decoder's loss, backpropagated at once */
        if (counted[t]) {
            float f = S && o->compensate && t > S ? (float)t / (float)S : 1.0f; /* max(1, t/S), 0-based t */
            for (int64_t s = 0; s < t; s++) factor[s] = alive[s] ? f : 0.0f;
            /* segment 0 reads no memory: nothing trained is in its graph, its loss is only reported */
            float dl = t && !o->forward_only ? dscale : 0.0f;
            rc = uio_grad_decoder(ws, m, w, (int32_t)t, len, dl, factor, err, errlen);
        }
        if (rc || t + 1 == T) break; /* the last segment's memory would have no reader */
        /* 2. compress; 3. the reservoir decides whose graph stays */
        if ((rc = uio_grad_compress(ws, m, w, (int32_t)t, err, errlen)) || o->forward_only) continue;
        if (S == 0 || t < S) {
            reservoir[in_res++] = (int32_t)t, alive[t] = true;
            continue;
        }
        uint64_t j = uio_splitmix64(rng) % (uint64_t)(t + 1);
        if (j < (uint64_t)S) {
            int32_t e = reservoir[j];
            rc = uio_grad_encoder_backward(ws, m, w, e, err, errlen);
            alive[e] = false;
            reservoir[j] = (int32_t)t, alive[t] = true;
        } /* else t's graph goes at once: its leaf has no gradient yet */
    }
    for (int32_t k = in_res - 1; k >= 0 && rc == 0; k--) /* what is left, last slot first */
        rc = uio_grad_encoder_backward(ws, m, w, reservoir[k], err, errlen);
    if (rc == 0) rc = uio_grad_losses(ws, losses, (int32_t)T, err, errlen); /* waits for every pass */
    else uio_grad_abandon(ws);
    for (int64_t t = 0; t < T && rc == 0; t++) {
        if (!counted[t]) continue;
        st->loss_sum += losses[t], st->n_losses += 1;
        st->token_loss += (double)losses[t] * counted[t], st->tokens += counted[t];
    }
out:
    free(factor), free(losses), free(reservoir), free(tgt), free(counted), free(alive);
    return rc;
}
