/*
 * test_lr_schedule.c — learning-rate schedules as transformers' get_*_schedule_with_warmup (values computed from
 * its lambdas: warmup s/max(1,W); linear max(0,(T-s)/max(1,T-W)); cosine max(0, 0.5(1+cos(pi*2*0.5*progress))),
 * including its quirks: cosine rises again past T, and T <= W), and clip_grad_norm as torch's clip_grad_norm_.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lr_schedule.h"
#include "test_util.h"

static void expect_lr(lr_kind k, int64_t W, int64_t T, int64_t s, double want) {
    lr_schedule sc = {.kind = k, .lr = 1e-3, .warmup = W, .total = T};
    double got = lr_at(&sc, s);
    CHECK(fabs(got - want) <= 1e-15 + 1e-12 * fabs(want), "%s W=%lld T=%lld step %lld: %.17g, want %.17g",
          lr_kind_name(k), (long long)W, (long long)T, (long long)s, got, want);
}

int main(void) {
    for (lr_kind k = LR_CONSTANT; k <= LR_COSINE; k++) { /* warmup is the same for all three */
        expect_lr(k, 10, 100, 0, 0.0);
        expect_lr(k, 10, 100, 5, 5e-4);
        expect_lr(k, 10, 100, 10, 1e-3);
    }
    expect_lr(LR_CONSTANT, 10, 100, 99, 1e-3);
    expect_lr(LR_CONSTANT, 0, 100, 0, 1e-3);
    expect_lr(LR_LINEAR, 10, 100, 55, 5e-4);
    expect_lr(LR_LINEAR, 10, 100, 100, 0.0);
    expect_lr(LR_LINEAR, 10, 100, 150, 0.0);
    expect_lr(LR_LINEAR, 0, 100, 0, 1e-3);
    expect_lr(LR_LINEAR, 10, 5, 10, 0.0); /* T <= W: transformers divides by max(1, T - W) */
    expect_lr(LR_COSINE, 10, 100, 55, 5e-4);
    expect_lr(LR_COSINE, 10, 100, 32, 0.0008596699001693256);
    expect_lr(LR_COSINE, 10, 100, 77, 0.00015267081477050133);
    expect_lr(LR_COSINE, 10, 100, 100, 0.0);
    expect_lr(LR_COSINE, 10, 100, 150, 0.00058682408883346535); /* half a cycle, then up again as transformers */
    expect_lr(LR_COSINE, 10, 5, 10, 1e-3);
    lr_kind k;
    CHECK(lr_kind_parse("cosine", &k) == 0 && k == LR_COSINE && lr_kind_parse("exp", &k) == -1, "parse");

    float a[2] = {3, 0}, b[1] = {4};
    grad_span sp[2] = {{a, 2}, {b, 1}};
    double norm = clip_grad_norm(sp, 2, 1.0);
    CHECK(norm == 5.0 && fabsf(a[0] - 0.6f) < 1e-6f && fabsf(b[0] - 0.8f) < 1e-6f && a[1] == 0,
          "norm 5 clipped to 1 over two spans: %g -> %g %g", norm, a[0], b[0]);
    float c[2] = {3, 4};
    grad_span one = {c, 2};
    CHECK(clip_grad_norm(&one, 1, 10.0) == 5.0 && c[0] == 3 && c[1] == 4, "below max_norm: unchanged");
    CHECK(clip_grad_norm(&one, 1, 5.0) == 5.0 && c[0] == 3.0f * (float)(5.0 / (5.0 + 1e-6)),
          "norm == max_norm: torch still scales by max/(norm + 1e-6): %.9g", c[0]);
    float d[2] = {3, 4};
    one.g = d;
    CHECK(clip_grad_norm(&one, 1, 0) == 5.0 && d[0] == 3, "max_norm 0: only measured");
    return test_summary();
}
