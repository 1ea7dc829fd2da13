/*
 * cpu_loss.c — cross-entropy over the vocabulary fused with its softmax and its gradient, fp32 in and out.
 *
 * One pass per row: max, sum of exp(l - max) (accumulated in double), lse = max + log(sum), row loss
 * lse - l[target]; then the gradient dloss / count * (exp(l - lse) - onehot) is written over the row (dlogits
 * may be the logits buffer itself: everything a row needs is read before it is overwritten), so training holds
 * one [tokens, vocab] buffer, never two. Rows whose target is -1 (prompt tokens, padding) count for nothing and
 * get a zero gradient. Row losses go to scratch and are summed in row order, so the loss does not depend on the
 * thread count. loss = mean over counted rows, as torch.nn.functional.cross_entropy(ignore_index=-1).
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "cpu_ops.h"

int kern_cpu_cross_entropy(kern_ctx *kc, float *loss, float *dlogits, const float *logits, const int32_t *targets,
                           int64_t n, int64_t vocab, float dloss) {
    if (n < 0 || vocab <= 0 || vocab > INT32_MAX) return KERN_ESHAPE;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        if (targets[i] < -1 || targets[i] >= vocab) return KERN_ERANGE;
        count += targets[i] != -1;
    }
    float *row_loss = kern_cpu_scratch(kc, (size_t)n + 1);
    if (!row_loss) return KERN_ENOMEM;
    float sc = count ? dloss / (float)count : 0.f;
#pragma omp parallel for num_threads(kc->n_threads) if (n * vocab > 65536) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float *l = logits + i * vocab;
        float *d = dlogits ? dlogits + i * vocab : NULL;
        int32_t t = targets[i];
        if (t == -1) {
            row_loss[i] = 0.f;
            if (d) memset(d, 0, (size_t)vocab * sizeof(float));
            continue;
        }
        float mx = -INFINITY;
        for (int64_t j = 0; j < vocab; j++) mx = l[j] > mx ? l[j] : mx;
        double sum = 0;
        for (int64_t j = 0; j < vocab; j++) sum += expf(l[j] - mx);
        float lse = mx + (float)log(sum), lt = l[t];
        row_loss[i] = lse - lt;
        if (d) {
            for (int64_t j = 0; j < vocab; j++) d[j] = sc * expf(l[j] - lse);
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
