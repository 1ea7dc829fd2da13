/*
 * cpu_loss.c — cross-entropy over the vocabulary fused with its softmax and its gradient, fp32 in and out.
 *
 * One pass per row: max, sum of exp(l - max) (the vector exp of cpu_attn_tiles.h, accumulated in double),
 * lse = max + log(sum), row loss lse - l[target]; then the gradient dloss / count * (exp(l - lse) - onehot), as
 * dloss / count / sum * exp(l - max), is written over the row (dlogits may be the logits buffer itself: everything
 * a row needs is read before it is overwritten), so training holds
 * one [tokens, vocab] buffer, never two. Rows whose target is -1 (prompt tokens, padding) count for nothing and
 * get a zero gradient. Row losses go to scratch and are summed in row order, so the loss does not depend on the
 * thread count. loss = mean over counted rows, as torch.nn.functional.cross_entropy(ignore_index=-1).
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "cpu_attn_tiles.h"
#include "cpu_ops.h"

int kern_cpu_cross_entropy(kern_ctx *kc, float *loss, float *dlogits, const float *logits, const int32_t *targets,
                           int64_t n, int64_t vocab, float dloss) {
    if (n < 0 || vocab <= 0 || vocab > INT32_MAX) return KERN_ESHAPE;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        if (targets[i] < -1 || targets[i] >= vocab) return KERN_ERANGE;
        count += targets[i] != -1;
    }
    const int nt = kc->n_threads;
    const size_t lpad = ((size_t)n + 16) & ~(size_t)15; /* row losses, then one exp row per thread without dlogits */
    float *row_loss = kern_cpu_scratch(kc, lpad + (dlogits ? 0 : (size_t)nt * (size_t)vocab));
    if (!row_loss) return KERN_ENOMEM;
    float sc = count ? dloss / (float)count : 0.f;
    const att_tiles *T = att_tiles_get();
#pragma omp parallel for num_threads(nt) if (n * vocab > 65536) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float *l = logits + i * vocab;
        float *d = dlogits ? dlogits + i * vocab : NULL;
        int32_t t = targets[i];
        if (t == -1) {
            row_loss[i] = 0.f;
            if (d) memset(d, 0, (size_t)vocab * sizeof(float));
            continue;
        }
        float mx = -INFINITY, lt = l[t]; /* read before d (which may be l) is overwritten */
        for (int64_t j = 0; j < vocab; j++) mx = l[j] > mx ? l[j] : mx;
        /* e = exp(l - mx) by the vector exp (cpu_attn_tiles.h), into the gradient row itself when there is one */
        float *e = d ? d : row_loss + lpad + (size_t)omp_get_thread_num() * (size_t)vocab;
        for (int64_t j = 0; j < vocab; j++) e[j] = l[j] - mx;
        T->vexp(e, e, vocab);
        double sum = 0;
        for (int64_t j = 0; j < vocab; j++) sum += e[j];
        float lse = mx + (float)log(sum);
        row_loss[i] = lse - lt;
        if (d) { /* sc * exp(l - lse) = sc / sum * e */
            float f = (float)((double)sc / sum);
            for (int64_t j = 0; j < vocab; j++) d[j] *= f;
            d[t] -= sc;
        }
    }
    if (loss) {
        double s = 0;
        for (int64_t i = 0; i < n; i++) s += row_loss[i];
        loss[0] = count ? (float)(s / (double)count) : NAN;
    }
    return KERN_OK;
}
