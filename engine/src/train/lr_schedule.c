/* lr_schedule.c — see lr_schedule.h. */
#include "lr_schedule.h"

#include <math.h>
#include <string.h>

static const char *const NAMES[] = {"constant", "linear", "cosine"};

int lr_kind_parse(const char *name, lr_kind *out) {
    for (int i = 0; name && i < 3; i++)
        if (!strcmp(name, NAMES[i])) {
            *out = (lr_kind)i;
            return 0;
        }
    return -1;
}

const char *lr_kind_name(lr_kind k) { return (unsigned)k < 3 ? NAMES[k] : "?"; }

double lr_at(const lr_schedule *s, int64_t step) {
    if (step < s->warmup) return s->lr * (double)step / (double)(s->warmup > 1 ? s->warmup : 1);
    if (s->kind == LR_CONSTANT) return s->lr;
    double left = (double)(s->total - s->warmup > 1 ? s->total - s->warmup : 1); /* transformers: max(1, T - W) */
    if (s->kind == LR_LINEAR) return s->lr * fmax(0.0, (double)(s->total - step) / left);
    return s->lr * fmax(0.0, 0.5 * (1.0 + cos(M_PI * (double)(step - s->warmup) / left)));
}

double clip_grad_norm(const grad_span *spans, size_t n_spans, double max_norm) {
    double sq = 0;
    for (size_t i = 0; i < n_spans; i++)
        for (size_t j = 0; j < spans[i].n; j++) sq += (double)spans[i].g[j] * spans[i].g[j];
    double norm = sqrt(sq);
    double coef = max_norm / (norm + 1e-6); /* torch: clamp(max_norm / (norm + 1e-6), max=1), applied always */
    if (max_norm > 0 && coef < 1.0) {
        for (size_t i = 0; i < n_spans; i++)
            for (size_t j = 0; j < spans[i].n; j++) spans[i].g[j] *= (float)coef;
    }
    return norm;
}
