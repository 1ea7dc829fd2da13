/*
 * uio_trainer.c — see uio_trainer.h.
 */
#include "uio_trainer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct uio_run {
    uio_train_weights w;
    uio_train_ws *ws;
    uio_tbptt_opts o;
    uint64_t seed;
};

int uio_run_init(uio_run **out, trainable *tr, const mnemo_model *m, const mnemo_train_params *p, char *err,
                 size_t errlen) {
    *out = NULL;
    memset(tr, 0, sizeof *tr);
    tr->method = p->method;
    if (p->tbptt_slots < 0) {
        snprintf(err, errlen, "tbptt slots %d: 0 (full BPTT) or more", p->tbptt_slots);
        return -1;
    }
    uio_run *u = calloc(1, sizeof *u);
    if (!u) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    u->o = (uio_tbptt_opts){.slots = p->tbptt_slots, .compensate = p->tbptt_compensation};
    u->seed = p->seed;
    if (uio_train_weights_init(&u->w, m, p->uio_init, p->uio_chunk, p->uio_num_memory, p->uio_init ? 0 : p->lora_rank,
                               p->lora_alpha, p->seed, err, errlen) ||
        !(u->ws = uio_train_ws_new(m, &u->w, p->seq_len, err, errlen))) {
        uio_run_free(u);
        return -1;
    }
    if (p->seq_len <= u->w.C) { /* one segment: no memory is read, nothing trained gets a gradient */
        snprintf(err, errlen, "documents of %d tokens hold one segment of %d: nothing to train (seq_len must exceed "
                 "the chunk size)", p->seq_len, u->w.C);
        uio_run_free(u);
        return -1;
    }
    if (!(tr->items = calloc(u->w.count, sizeof *tr->items))) {
        uio_run_free(u);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    tr->be = u->w.be; /* the optimizer, clipping and checkpoints reach the tensors through the backend */
    for (size_t i = 0; i < u->w.count; i++) {
        if (i == (size_t)(1 + 4 * u->w.n_layer)) continue; /* decoder.repeat_token: kept as read, never trained */
        train_param *it = &tr->items[tr->count++];
        snprintf(it->name, sizeof it->name, "%s", u->w.t[i].name);
        it->p = u->w.t[i].p, it->g = u->w.t[i].g, it->n = u->w.t[i].n;
    }
    *out = u;
    return 0;
}

void uio_run_free(uio_run *u) {
    if (!u) return;
    uio_train_ws_free(u->ws);
    uio_train_weights_free(&u->w);
    free(u);
}

int uio_run_rows(uio_run *u, const mnemo_model *m, const mnemo_token *rows, const uint8_t *masks, int32_t n_rows,
                 int32_t L, int64_t step, double *loss, char *err, size_t errlen) {
    double sum = 0;
    int64_t count = 0;
    for (int32_t r = 0; r < n_rows; r++) {
        uint64_t state = u->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(step + 1)) ^ ((uint64_t)r << 40);
        uio_doc_stats st;
        if (uio_document_grads(u->ws, m, &u->w, rows + (size_t)r * (size_t)(L + 1), masks + (size_t)r * (size_t)L, L,
                               1.0f / (float)n_rows, &u->o, &state, &st, err, errlen))
            return -1;
        sum += st.loss_sum, count += st.n_losses;
    }
    *loss = count ? sum / (double)count : 0;
    return 0;
}

int uio_run_evaluate(uio_run *u, const mnemo_model *m, const train_data *d, mnemo_token *row, uint8_t *mask,
                     int32_t L, double *loss, int64_t *tokens, char *err, size_t errlen) {
    const int64_t n = train_data_examples(d);
    uio_tbptt_opts o = u->o;
    o.forward_only = true;
    double sum = 0;
    int64_t count = 0;
    for (int64_t ex = 0; ex < n; ex++) {
        train_data_row(d, 0, (int32_t)(n < INT32_MAX ? n : INT32_MAX), (int32_t)(ex % INT32_MAX), row, mask);
        uint64_t state = 0;
        uio_doc_stats st;
        if (uio_document_grads(u->ws, m, &u->w, row, mask, L, 0.0f, &o, &state, &st, err, errlen)) return -1;
        sum += st.token_loss, count += st.tokens;
    }
    *loss = count ? sum / (double)count : 0;
    if (tokens) *tokens = count;
    return 0;
}

int uio_run_write(const uio_run *u, const char *out_dir, char *err, size_t errlen) {
    return uio_train_weights_write(&u->w, out_dir, err, errlen);
}

void uio_run_settings(const uio_run *u, char *buf, size_t cap) {
    snprintf(buf, cap, ",\"uio_chunk\":%d,\"uio_num_memory\":%d,\"uio_rank\":%d,\"uio_alpha\":%.17g,"
             "\"tbptt_slots\":%d,\"tbptt_compensation\":%d", u->w.C, u->w.M, u->w.r, u->w.alpha, u->o.slots,
             u->o.compensate);
}

size_t uio_run_ws_bytes(const uio_run *u) { return u ? uio_train_ws_bytes(u->ws) : 0; }
