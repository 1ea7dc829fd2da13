/*
 * uio_keep.c — raw tokens kept beside the compressed memory, beyond the reference (mnemo_context_params.uio_keep_raw = W > 0): when a
 * segment is compressed, the raw K/V of its last W tokens stay in the cache right after the new memory instead of
 * leaving with the rest, so the token after a compression still sees the segment's end verbatim.
 *
 * Positions stay the reference's rule, key j at position j over [memory | raw | new]: the kept rows move from
 * rows n_mem + n_kept + C - W .. (the segment's end) down to n_mem + M .. (right after the new memory), and their
 * keys, cached after RoPE here (uio_memory.h), are turned by the difference of the two positions (one rope or
 * rope_backward: rotations compose), as the reference would rotate its pre-RoPE keys at the new positions.
 * Runs after the encoder (it reads only the accumulator) and before the transfer head writes rows n_mem .. n_mem+M-1,
 * which may overlap the kept rows' old place: the rows go through the encoder's scratch (kscr, vscr: C + 1 rows).
 */
#include "uio_memory.h"

#define TRY(call)                                                                                               \
    do {                                                                                                        \
        int rc_ = (call);                                                                                       \
        if (rc_ != KERN_OK) return rc_;                                                                         \
    } while (0)

int uio_keep_rows(uio_state *s, kern_ctx *kc, const kv_cache *kv) {
    const model_config *cfg = s->cfg;
    const kern_backend *be = s->be;
    const int64_t W = s->W, kvd = (int64_t)cfg->num_key_value_heads * cfg->head_dim;
    const int64_t from = (int64_t)s->n_mem + s->n_kept + s->C - W, to = (int64_t)s->n_mem + s->M;
    const int64_t delta = to - from; /* < 0 unless W > C - M + n_kept */
    if (W == 0 || delta == 0) return KERN_OK;
    if (from + W > kv->n_ctx || W > s->C + 1) return KERN_ESHAPE;
    for (int64_t i = 0; i < W; i++) s->kpos_host[i] = (int32_t)(delta < 0 ? -delta : delta);
    if (!be->host_memory) TRY(be->mem_copy(kc, s->kpos, s->kpos_host, (size_t)W * sizeof(int32_t), KERN_H2D));
    const size_t bytes = (size_t)(W * kvd) * sizeof(float);
    for (int32_t l = 0; l < cfg->num_hidden_layers; l++) {
        const size_t base = (size_t)l * (size_t)kv->n_ctx * (size_t)kvd; /* cache: (n_layer, n_ctx, kvd) */
        float *k = kv->k + base, *v = kv->v + base;
        TRY(be->mem_copy(kc, s->kscr, k + from * kvd, bytes, KERN_D2D));
        TRY(be->mem_copy(kc, s->vscr, v + from * kvd, bytes, KERN_D2D));
        if (delta > 0)
            TRY(be->rope(kc, s->kscr, W, cfg->num_key_value_heads, cfg->head_dim, s->kpos, cfg->rope_theta,
                         cfg->rope_scaling_factor));
        else
            TRY(be->rope_backward(kc, s->kscr, W, cfg->num_key_value_heads, cfg->head_dim, s->kpos, cfg->rope_theta,
                                  cfg->rope_scaling_factor));
        TRY(be->mem_copy(kc, k + to * kvd, s->kscr, bytes, KERN_D2D));
        TRY(be->mem_copy(kc, v + to * kvd, s->vscr, bytes, KERN_D2D));
    }
    return KERN_OK;
}
