/*
 * kernels_quant_cases.h — test_kernels_cpu's cases for the block-quantized weights (q8_0, q4_0), kept in their own
 * file. For every vector path the CPU has (AVX-512 VNNI, AVX2, scalar, forced in turn with kern_cpu_quant_path):
 *   - matmul against an fp64 reference over the dequantized weights and the activations rounded to int8 per
 *     32-block exactly as the contract says: the integer part is exact, so only fp32 summation differs (1e-6 of
 *     the sum of the terms' magnitudes);
 *   - matmul against plain dequantized-f32 math (weights dequantized, x in fp32) within the bound the activation
 *     rounding allows: |err| <= sum_i |w_i| * d_x(block of i) / 2, per output;
 *   - guards around y, beta 1 accumulation, shapes with an odd block count and partial tiles, k % 32 refused;
 * the VNNI path once more with the int8 GEMM on packed panels on (from KERN_CPU_QGEMM_MIN_ROWS rows; same
 * contract, same checks), then the dequantized panel paths (test_quant_panel: bf16 and fp32 panels, m around their
 * thresholds),
 * plus quantize -> dequantize error bounds (q8_0: d/2, q4_0: |d|, plus the scale's f16 rounding), embed gathering
 * dequantized rows, and matmul_backward_x equal to the dequantized matrix's.
 * Uses frand, guarded, guards_ok from test_kernels_cpu.c.
 */
#ifndef MNEMO_KERNELS_QUANT_CASES_H
#define MNEMO_KERNELS_QUANT_CASES_H

/* x rounded as the quantized matmul rounds it: per 32-block, scale amax/127, round to nearest (even). */
static void act_round(double *xr, double *dx, const float *x, int64_t k) {
    for (int64_t b = 0; b < k / 32; b++) {
        float amax = 0.f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        float d = amax / 127.f, id = d ? 1.f / d : 0.f;
        dx[b] = d;
        for (int j = 0; j < 32; j++) xr[b * 32 + j] = (double)d * (double)lrintf(x[b * 32 + j] * id);
    }
}

static void test_quant_roundtrip(void) {
    const kern_dtype dts[2] = {KERN_Q8_0, KERN_Q4_0};
    for (int t = 0; t < 2; t++) {
        int64_t k = 256;
        float x[256], back[256];
        for (int i = 0; i < k; i++) x[i] = frand() * (i < 32 ? 0.f : 3.f); /* first block all zero: scale 0 */
        uint8_t q[34 * 8];
        CHECK(kern_dtype_bytes(dts[t], k) == (size_t)(t ? 18 : 34) * 8, "%s: 8 blocks are %zu bytes",
              kern_dtype_name(dts[t]), kern_dtype_bytes(dts[t], k));
        CHECK(kern_dtype_bytes(dts[t], 33) == 0, "%s: 33 elements are no whole blocks", kern_dtype_name(dts[t]));
        kern_quantize_row(q, x, dts[t], k);
        kern_cpu_widen(back, q, dts[t], k);
        bool ok = true;
        for (int64_t b = 0; b < k / 32; b++) {
            float amax = 0.f;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
            /* half a step (q8_0) or a step (q4_0: the side opposite the max is clipped at 7), plus the f16 rounding
             * of the scale, at most 2^-11 relative, times the largest level (127 or 8) */
            float bound = (t ? amax / 8.f : amax / 127.f / 2.f) * 1.001f + amax * 0x1p-11f + 1e-7f;
            for (int j = 0; j < 32; j++) ok = ok && fabsf(back[b * 32 + j] - x[b * 32 + j]) <= bound;
        }
        CHECK(ok, "%s: quantize -> dequantize within the block's step", kern_dtype_name(dts[t]));
    }
}

static void test_quant_matmul_path(const kern_backend *be, kern_ctx *kc, kern_qpath path) {
    static const int64_t shapes[][3] = {{1, 37, 64}, {1, 5, 96}, {2, 9, 32}, {3, 9, 160}, {8, 64, 320},
                                        {13, 11, 96}, {70, 33, 224}, {9, 4, 4096}, {23, 100, 1120}};
    const kern_dtype dts[2] = {KERN_Q8_0, KERN_Q4_0};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int t = 0; t < 2; t++)
            for (int bi = 0; bi < 2; bi++) {
                int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                kern_dtype dt = dts[t];
                float beta = (float)bi;
                float *wf = malloc((size_t)(n * k) * sizeof(float)), *x = malloc((size_t)(m * k) * sizeof(float));
                uint8_t *wq = malloc(kern_dtype_bytes(dt, n * k));
                for (int64_t i = 0; i < n * k; i++) wf[i] = frand() * 0.5f;
                for (int64_t i = 0; i < m * k; i++) x[i] = frand() * (i % 7 == 0 ? 4.f : 1.f);
                for (int64_t j = 0; j < n; j++) {
                    kern_quantize_row(wq + (size_t)j * kern_dtype_bytes(dt, k), wf + j * k, dt, k);
                    kern_cpu_widen(wf + j * k, wq + (size_t)j * kern_dtype_bytes(dt, k), dt, k); /* exact values */
                }
                float *y = guarded((size_t)(m * n));
                for (int64_t i = 0; i < m * n; i++) y[i] = frand();
                double *y0 = malloc((size_t)(m * n) * sizeof(double)), *want = malloc((size_t)(m * n) * sizeof(double));
                for (int64_t i = 0; i < m * n; i++) y0[i] = beta * y[i];
                int rc = be->matmul(kc, y, x, wq, dt, m, n, k, beta);
                double *xr = malloc((size_t)k * sizeof(double)), *dx = malloc((size_t)(k / 32) * sizeof(double));
                bool within = true;
                double worst = 0;
                for (int64_t r = 0; r < m; r++) {
                    act_round(xr, dx, x + r * k, k);
                    for (int64_t j = 0; j < n; j++) {
                        double exact = 0, plain = 0, bound = 0, mag = fabs(y0[r * n + j]);
                        for (int64_t i = 0; i < k; i++) {
                            exact += (double)wf[j * k + i] * xr[i];
                            mag += fabs((double)wf[j * k + i] * xr[i]);
                            plain += (double)wf[j * k + i] * x[r * k + i];
                            bound += fabs(wf[j * k + i]) * dx[i / 32] / 2;
                        }
                        want[r * n + j] = exact + y0[r * n + j];
                        double got = y[r * n + j] - y0[r * n + j];
                        if (fabs(got - plain) > bound * 1.0001 + 1e-5) within = false;
                        /* fp32 sums of k terms: error relative to the sum of the terms' magnitudes */
                        double e = fabs(y[r * n + j] - want[r * n + j]) / (mag + 1e-30);
                        worst = e > worst ? e : worst;
                    }
                }
                CHECK(rc == KERN_OK && worst < 1e-6 && within && guards_ok(y, (size_t)(m * n)),
                      "matmul %s%s %s m=%ld n=%ld k=%ld beta=%g: rc %d, err vs int8-rounded x (rel to sum |terms|) "
                      "%.2e, within the rounding bound of f32 x: %d",
                      kern_qpath_name(path), kern_cpu_qpanel_available() ? " (+ VNNI GEMM)" : "", kern_dtype_name(dt),
                      (long)m, (long)n, (long)k, beta, rc, worst, within);
                free(wf); free(x); free(wq); guarded_free(y); free(y0); free(want); free(xr); free(dx);
            }
    float b[64] = {0};
    CHECK(be->matmul(kc, b, b, b, KERN_Q8_0, 1, 1, 48, 0.f) == KERN_ESHAPE,
          "q8_0 matmul k=48 (not whole blocks) refused");
    CHECK(be->matmul_backward_x(kc, b, b, b, KERN_Q4_0, 1, 1, 48, 0.f) == KERN_ESHAPE,
          "matmul_backward_x q4_0 with k=48 (not whole blocks) refused");
    CHECK(be->rmsnorm(kc, b, NULL, b, b, KERN_Q8_0, 1, 32, 1e-6f) == KERN_ESHAPE, "rmsnorm q8_0 weight refused");
}

static void test_quant_embed(const kern_backend *be, kern_ctx *kc) {
    int64_t V = 7, d = 64;
    float tf[7 * 64], want[7 * 64];
    for (int i = 0; i < V * d; i++) tf[i] = frand();
    uint8_t tq[7 * 2 * 34];
    kern_quantize_row(tq, tf, KERN_Q8_0, V * d);
    kern_dequantize_row(want, tq, KERN_Q8_0, V * d);
    int32_t ids[3] = {6, 0, 6};
    float *out = guarded(3 * 64);
    int rc = be->embed(kc, out, tq, KERN_Q8_0, V, d, ids, 3);
    bool same = rc == KERN_OK;
    for (int i = 0; i < 3 && same; i++) same = !memcmp(out + i * d, want + ids[i] * d, (size_t)d * sizeof(float));
    CHECK(same && guards_ok(out, 3 * 64), "embed q8_0 gathers dequantized rows");
    CHECK(be->embed(kc, out, tq, KERN_Q8_0, V, 40, ids, 1) == KERN_ESHAPE, "embed q8_0 with d=40 refused");
    guarded_free(out);
}

/* matmul_backward_x on quantized weights (LoRA over a quantized base): dx = dy . dequant(w) (+ dx), exactly as with
 * the dequantized f32 matrix (the weights are widened panel by panel; nothing is rounded). */
static void test_quant_backward_x(const kern_backend *be, kern_ctx *kc) {
    const kern_dtype dts[2] = {KERN_Q8_0, KERN_Q4_0};
    for (int t = 0; t < 2; t++)
        for (int bi = 0; bi < 2; bi++) {
            int64_t m = 13, n = 37, k = 96;
            float wf[37 * 96], dy[13 * 37];
            uint8_t wq[37 * 3 * 34];
            for (int i = 0; i < n * k; i++) wf[i] = frand();
            for (int i = 0; i < m * n; i++) dy[i] = frand();
            size_t rb = kern_dtype_bytes(dts[t], k);
            for (int64_t j = 0; j < n; j++) {
                kern_quantize_row(wq + j * rb, wf + j * k, dts[t], k);
                kern_dequantize_row(wf + j * k, wq + j * rb, dts[t], k);
            }
            float *dx = guarded((size_t)(m * k));
            double want[13 * 96];
            for (int64_t i = 0; i < m * k; i++) dx[i] = frand();
            for (int64_t r = 0; r < m; r++)
                for (int64_t c = 0; c < k; c++) {
                    double s = bi ? dx[r * k + c] : 0.0;
                    for (int64_t j = 0; j < n; j++) s += (double)dy[r * n + j] * wf[j * k + c];
                    want[r * k + c] = s;
                }
            int rc = be->matmul_backward_x(kc, dx, dy, wq, dts[t], m, n, k, (float)bi);
            double e = rel_err(dx, want, (size_t)(m * k));
            CHECK(rc == KERN_OK && e < 1e-6 && guards_ok(dx, (size_t)(m * k)),
                  "matmul_backward_x %s beta %d: rc %d rel err %.2e", kern_dtype_name(dts[t]), bi, rc, e);
            guarded_free(dx);
        }
}

/* The prefill panel paths (kernels_cpu_paths.h): each weight panel is dequantized into the bf16 tiles (FAST,
 * AVX512_BF16, from KERN_CPU_QPANEL_BF16_MIN_ROWS rows) or the fp32 tiles (EXACT, from KERN_CPU_QPANEL_F32_MIN_ROWS
 * rows). Checked against fp64 math on the
 * dequantized weights and the fp32 activations, elementwise:
 *   fp32 panel: the weights are exact (d * q fits fp32), so only fp32 summation differs: |err| <= k 2^-24 sum|x w|
 *               (the worst case of k fp32 additions), and the RMS error over the RMS of sum|x w| below 1e-6 as
 *               for the other fp32 GEMMs;
 *   bf16 panel: x and w each rounded to bf16 (<= 2^-9 relative each), products exact in fp32, so
 *               |err| <= (2^-8 + 2^-18 + k 2^-24) sum|x w|; that worst case is loose for large k (one wrong
 *               block among 130 could hide in it), so also: the roundings are independent and unbiased, their
 *               sum grows as sqrt(k) where sum|x w| grows as k, and the RMS error over the RMS of sum|x w| must
 *               stay below 2^-7 / sqrt(k) (measured 0.45-0.5 of that for k = 32 .. 4160); and some rounding must
 *               show (the path really ran).
 * Below the threshold the integer tiles must still run: the result is that of int8-rounded activations (1e-6).
 * Shapes: m below, at and above the threshold (row tails of the 6-row tile), n not a multiple of the 16-column
 * groups or the 64-column panel, k of one block, odd block counts, and k past one K block of each GEMM (fp32:
 * 1024, bf16: 4096), so a K block ends inside the weights. */
static void test_quant_panel(const kern_backend *be, kern_ctx *kc) {
    if (!kern_cpu_qpanel_available()) {
        printf("note: no AVX-512 on this CPU: quantized panel paths not tested (the integer tiles are)\n");
        return;
    }
    enum { B = KERN_CPU_QPANEL_BF16_MIN_ROWS, F = KERN_CPU_QPANEL_F32_MIN_ROWS };
    static const int64_t shapes[][3] = {{B - 1, 37, 96}, {B, 37, 96},        {B + 1, 64, 32},     {F - 1, 37, 96},
                                        {F, 37, 96},     {F + 6, 100, 224},  {B + 7, 131, 1120}, {F + 3, 131, 1120},
                                        {B + 3, 37, 4160}, {F + 1, 37, 4160}, {130, 200, 96}};
    const kern_dtype dts[2] = {KERN_Q8_0, KERN_Q4_0};
    kern_cpu_quant_path(KERN_QPATH_AVX2); /* with VNNI, FAST prefill takes the int8 GEMM instead (checked apart) */
    for (int fast = 0; fast <= 1; fast++) {
        kern_cpu_set_gemm(kc, fast ? KERN_CPU_GEMM_FAST : KERN_CPU_GEMM_EXACT);
        int bf16 = fast && kern_cpu_bf16dot_available();
        if (fast && !bf16) printf("note: no AVX512_BF16 on this CPU: FAST takes the fp32 panels\n");
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int t = 0; t < 2; t++)
                for (int bi = 0; bi < 2; bi++) {
                    int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                    kern_dtype dt = dts[t];
                    size_t rb = kern_dtype_bytes(dt, k);
                    float *wf = malloc((size_t)(n * k) * sizeof(float)), *x = malloc((size_t)(m * k) * sizeof(float));
                    uint8_t *wq = malloc(rb * (size_t)n);
                    for (int64_t i = 0; i < n * k; i++) wf[i] = frand() * 0.5f;
                    for (int64_t i = 0; i < m * k; i++) x[i] = frand() * (i % 7 == 0 ? 4.f : 1.f);
                    for (int64_t j = 0; j < n; j++) {
                        kern_quantize_row(wq + (size_t)j * rb, wf + j * k, dt, k);
                        kern_dequantize_row(wf + j * k, wq + (size_t)j * rb, dt, k); /* the exact values */
                    }
                    float *y = guarded((size_t)(m * n));
                    for (int64_t i = 0; i < m * n; i++) y[i] = bi ? frand() : NAN; /* beta 0 must ignore y */
                    double *y0 = malloc((size_t)(m * n) * sizeof(double));
                    for (int64_t i = 0; i < m * n; i++) y0[i] = bi ? y[i] : 0.0;
                    int rc = be->matmul(kc, y, x, wq, dt, m, n, k, (float)bi);
                    int panel = m >= (bf16 ? KERN_CPU_QPANEL_BF16_MIN_ROWS : KERN_CPU_QPANEL_F32_MIN_ROWS);
                    double *xr = malloc((size_t)k * sizeof(double)), *dx = malloc((size_t)(k / 32) * sizeof(double));
                    double worst = 0, diff = 0, num = 0, den = 1e-30, unit = 0x1p-24 * (double)k;
                    double rel = !panel ? 1e-6 : bf16 ? 0x1p-8 + 0x1p-18 + unit : unit;
                    for (int64_t r = 0; r < m; r++) {
                        act_round(xr, dx, x + r * k, k);
                        for (int64_t j = 0; j < n; j++) {
                            double want = y0[r * n + j], mag = fabs(want);
                            for (int64_t i = 0; i < k; i++) {
                                double xi = panel ? (double)x[r * k + i] : xr[i], p = (double)wf[j * k + i] * xi;
                                want += p;
                                mag += fabs(p);
                            }
                            double got = y[r * n + j], e = isnan(got) ? INFINITY : fabs(got - want);
                            worst = fmax(worst, e / (rel * mag + 1e-30));
                            diff = fmax(diff, e);
                            num += e * e;
                            den += mag * mag;
                        }
                    }
                    const char *path = !panel ? "integer tiles" : bf16 ? "bf16 panel" : "fp32 panel";
                    double rms = sqrt(num / den);
                    double rms_max = !panel ? INFINITY : bf16 ? 0x1p-7 / sqrt((double)k) : 1e-6;
                    CHECK(rc == KERN_OK && worst <= 1.0 && rms < rms_max &&
                              guards_ok(y, (size_t)(m * n)),
                          "matmul %s %s %s m=%ld n=%ld k=%ld beta=%d: rc %d, error %.2f of the bound, rms %.1e of "
                          "sum|x w| (at most %.1e)",
                          fast ? "FAST" : "EXACT", path, kern_dtype_name(dt), (long)m, (long)n, (long)k, bi, rc,
                          worst, rms, rms_max);
                    CHECK(!panel || !bf16 || diff > 1e-7,
                          "matmul %s %s m=%ld n=%ld k=%ld: no bf16 rounding seen, path not taken?", path,
                          kern_dtype_name(dt), (long)m, (long)n, (long)k);
                    free(wf); free(x); free(wq); guarded_free(y); free(y0); free(xr); free(dx);
                }
    }
    kern_cpu_set_gemm(kc, KERN_CPU_GEMM_FAST);
    kern_cpu_quant_path(KERN_QPATH_BEST);
}

/* Every path this CPU has, then back to the best; the integer tiles for every m (panels off), then the panels. */
static void test_quant(const kern_backend *be, kern_ctx *kc) {
    uint64_t rng_saved = rng_state; /* its own random stream: adding cases here leaves the other tests' inputs */
    test_quant_roundtrip();
    test_quant_embed(be, kc);
    test_quant_backward_x(be, kc);
    kern_cpu_qpanel_allow(0);
    for (int p = KERN_QPATH_SCALAR; p <= KERN_QPATH_AVX512_VNNI; p++) {
        if (kern_cpu_quant_path((kern_qpath)p) != (kern_qpath)p) {
            printf("quantized matmul: path %s not on this CPU, skipped\n", kern_qpath_name((kern_qpath)p));
            continue;
        }
        test_quant_matmul_path(be, kc, (kern_qpath)p);
        kern_cpu_qpanel_allow(1);
        if (p == KERN_QPATH_AVX512_VNNI && kern_cpu_qpanel_available()) /* AVX-512: the VNNI GEMM from
                                                                            * KERN_CPU_QGEMM_MIN_ROWS rows on, same
                                                                            * contract as the tiles */
            test_quant_matmul_path(be, kc, (kern_qpath)p);
        kern_cpu_qpanel_allow(0);
    }
    kern_cpu_quant_path(KERN_QPATH_BEST);
    kern_cpu_qpanel_allow(1);
    test_quant_panel(be, kc);
    rng_state = rng_saved;
}

#endif
