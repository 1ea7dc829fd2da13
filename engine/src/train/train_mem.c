/* train_mem.c — see train_mem.h. Device copies pass kc NULL: they complete before the call returns. */
#include "train_mem.h"

#include <stdlib.h>
#include <string.h>

float *train_mem_zeros(const kern_backend *be, size_t n) {
    if (!be) return calloc(n ? n : 1, sizeof(float));
    float *p = be->mem_alloc((n ? n : 1) * sizeof(float));
    if (p && be->mem_set(NULL, p, 0, n * sizeof(float)) != KERN_OK) {
        be->mem_free(p);
        return NULL;
    }
    return p;
}

void train_mem_free(const kern_backend *be, float *p) {
    if (be) be->mem_free(p);
    else free(p);
}

int train_mem_upload(const kern_backend *be, float *dst, const float *src, size_t n) {
    if (!be) {
        if (dst != src) memmove(dst, src, n * sizeof *dst);
        return 0;
    }
    return be->mem_copy(NULL, dst, src, n * sizeof(float), KERN_H2D) == KERN_OK ? 0 : -1;
}

float *train_mem_host_view(const kern_backend *be, const float *p, size_t n) {
    if (!be) return (float *)p;
    float *h = malloc((n ? n : 1) * sizeof *h);
    if (h && be->mem_copy(NULL, h, p, n * sizeof(float), KERN_D2H) != KERN_OK) {
        free(h);
        return NULL;
    }
    return h;
}

void train_mem_host_release(const kern_backend *be, float *view) {
    if (be) free(view);
}
