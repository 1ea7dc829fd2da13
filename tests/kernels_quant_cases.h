/*
 * kernels_quant_cases.h — test_kernels_cpu's cases for the block-quantized weights (q8_0, q4_0, q4_K, q6_K, and
 * q4_1, q5_0, q5_1, q2_K, q3_K, q5_K: every loop runs all ten), kept in their own file. For every vector path the CPU has (AVX-512 VNNI, AVX2, scalar, forced in turn with
 * kern_cpu_quant_path):
 *   - matmul against an fp64 reference over the dequantized weights and the activations rounded to int8 per
 *     32-block exactly as the contract says (k-quants too: a 256-block is 8 such blocks): the integer part is
 *     exact, so only fp32 summation differs (1e-6 of the sum of the terms' magnitudes);
 *   - matmul against plain dequantized-f32 math (weights dequantized, x in fp32) within the bound the activation
 *     rounding allows: |err| <= sum_i |w_i| * d_x(block of i) / 2, per output;
 *   - guards around y, beta 1 accumulation, shapes with an odd block count and partial tiles, k % 32 (k-quants:
 *     k % 256) refused;
 * the VNNI path once more with the int8 GEMM on packed panels on (from KERN_CPU_QGEMM_MIN_ROWS rows; same
 * contract, same checks; q8_0 / q4_0 / q4_K), then the dequantized panel paths (test_quant_panel: bf16 and fp32
 * panels, m around their thresholds, every type),
 * plus quantize -> dequantize error bounds (q8_0: d/2, q4_0: |d|, plus the scale's f16 rounding; q4_K / q6_K: one
 * step), k-quant dequantization against ggml's own code on random blocks, embed gathering dequantized rows, and
 * matmul_backward_x equal to the dequantized matrix's.
 * k-quant weights are random bytes (fill_qweights), so every bit of the packed scales and mins is exercised.
 * Uses frand, guarded, guards_ok from test_kernels_cpu.c.
 */
#ifndef MNEMO_KERNELS_QUANT_CASES_H
#define MNEMO_KERNELS_QUANT_CASES_H

static void test_quant_x(const kern_backend *be, kern_ctx *kc);

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

/* Every quantized type, for the loops below; QTYPES_VNNI of them the int8 GEMM packs (the rest take the float
 * panels from KERN_CPU_QGEMM_MIN_ROWS rows on AVX-512). */
#define N_QTYPES 10
static const kern_dtype QTYPES[N_QTYPES] = {KERN_Q8_0, KERN_Q4_0, KERN_Q4_K, KERN_Q6_K, KERN_Q4_1,
                                            KERN_Q5_0, KERN_Q5_1, KERN_Q2_K, KERN_Q3_K, KERN_Q5_K};
static int qtype_vnni_gemm(kern_dtype dt) { return dt == KERN_Q8_0 || dt == KERN_Q4_0 || dt == KERN_Q4_K; }

/* Byte offsets of a block's f16 scale (d) and second f16 field (dmin or m; -1 when none). */
static void qtype_f16_fields(kern_dtype dt, int *d, int *m) {
    *m = -1;
    switch (dt) {
    case KERN_Q6_K: *d = 208; break;
    case KERN_Q2_K: *d = 80, *m = 82; break;
    case KERN_Q3_K: *d = 108; break;
    case KERN_Q4_K: case KERN_Q5_K: case KERN_Q4_1: case KERN_Q5_1: *d = 0, *m = 2; break;
    default: *d = 0; break;
    }
}

/* Weights for the matmul cases: q8_0 / q4_0 quantized from random floats; the others as random bytes (every bit
 * of the packed scales, mins, masks and quants takes both values) with sane f16 scales (q4_1 / q5_1 offsets of
 * either sign). wf receives the dequantized values, the exact weights the kernels must use. */
static void fill_qweights(uint8_t *wq, float *wf, kern_dtype dt, int64_t n, int64_t k) {
    size_t rb = kern_dtype_bytes(dt, k);
    for (int64_t j = 0; j < n; j++) {
        uint8_t *row = wq + (size_t)j * rb;
        if (dt == KERN_Q8_0 || dt == KERN_Q4_0) {
            for (int64_t i = 0; i < k; i++) wf[j * k + i] = frand() * 0.5f;
            kern_quantize_row(row, wf + j * k, dt, k);
        } else {
            for (size_t i = 0; i < rb; i++) row[i] = (uint8_t)((frand() + 1.f) * 128.f); /* [0, 256) */
            size_t bs = kern_dtype_bytes(dt, kern_dtype_block(dt));
            int od, om;
            qtype_f16_fields(dt, &od, &om);
            for (size_t sb = 0; sb < rb / bs; sb++) {
                uint16_t d = kern_f32_to_f16(0.001f + 0.01f * fabsf(frand()));
                uint16_t dm = kern_f32_to_f16(0.02f * (kern_dtype_is_kquant(dt) ? fabsf(frand()) : frand()));
                memcpy(row + sb * bs + od, &d, 2);
                if (om >= 0) memcpy(row + sb * bs + om, &dm, 2);
            }
        }
        kern_dequantize_row(wf + j * k, row, dt, k);
    }
}

/* ggml's get_scale_min_k4: 6-bit scale and min of q4_K sub-block j. */
static void ref_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63, *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* ggml's dequantize_row_q4_K / q6_K as ggml-quants.c writes them (get_scale_min_k4, the ql/qh walk): an independent
 * reference for kq_kblock_ints, which every k-quant kernel path and kern_dequantize_row share. */
static void ggml_ref_dequant_k(float *y, const uint8_t *b, kern_dtype dt, int64_t n) {
    for (int64_t i = 0; i < n / 256; i++) {
        uint16_t h;
        if (dt == KERN_Q4_K) {
            const uint8_t *x = b + i * 144, *sc = x + 4, *q = x + 16;
            memcpy(&h, x, 2);
            float d = kern_f16_to_f32(h);
            memcpy(&h, x + 2, 2);
            float min = kern_f16_to_f32(h);
            for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
                uint8_t s[2], m[2];
                for (int u = 0; u < 2; u++) ref_scale_min_k4(is + u, sc, &s[u], &m[u]);
                for (int l = 0; l < 32; l++) *y++ = d * s[0] * (float)(q[l] & 0xF) - min * m[0];
                for (int l = 0; l < 32; l++) *y++ = d * s[1] * (float)(q[l] >> 4) - min * m[1];
            }
        } else {
            const uint8_t *x = b + i * 210, *ql = x, *qh = x + 128;
            const int8_t *sc = (const int8_t *)(x + 192);
            memcpy(&h, x + 208, 2);
            float d = kern_f16_to_f32(h);
            for (int nn = 0; nn < 256; nn += 128, y += 128, ql += 64, qh += 32, sc += 8)
                for (int l = 0; l < 32; l++) {
                    int is = l / 16;
                    y[l] = d * sc[is] * (float)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
                    y[l + 32] = d * sc[is + 2] * (float)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                    y[l + 64] = d * sc[is + 4] * (float)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                    y[l + 96] = d * sc[is + 6] * (float)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
                }
        }
    }
}

/* q4_K / q6_K: random blocks dequantize as ggml's own code does (bit for bit: the same fp32 products), and the
 * simple quantizer's error stays within what its stored scales allow: half a level (0.5 d sc; q6_K a whole one, as
 * q4_0: the largest magnitude maps to -32, so the opposite side is clipped at 31), plus the rounding of
 * the sub-block scale to an integer multiple of the super-block's d (at most d/2, and d's f16 rounding, 2^-11 of
 * up to 63 or 127 d: 0.031 d / 0.062 d) times the levels it spans (q4_K: 15, q6_K: 32), plus for q4_K the same
 * rounding of the min (0.531 dmin). */
static void test_kquant_roundtrip(void) {
    const kern_dtype dts[2] = {KERN_Q4_K, KERN_Q6_K};
    for (int t = 0; t < 2; t++) {
        kern_dtype dt = dts[t];
        int64_t k = 512, n = 3;
        uint8_t *wq = malloc(kern_dtype_bytes(dt, n * k));
        float *got = malloc((size_t)(n * k) * sizeof(float)), *want = malloc((size_t)(n * k) * sizeof(float));
        CHECK(kern_dtype_bytes(dt, k) == (size_t)(t ? 420 : 288) && kern_dtype_bytes(dt, 224) == 0,
              "%s: 2 super-blocks are %zu bytes, 224 elements none", kern_dtype_name(dt), kern_dtype_bytes(dt, k));
        fill_qweights(wq, got, dt, n, k);
        ggml_ref_dequant_k(want, wq, dt, n * k);
        CHECK(!memcmp(got, want, (size_t)(n * k) * sizeof(float)), "%s: random blocks dequantize as ggml's code",
              kern_dtype_name(dt));
        float x[512], back[512];
        for (int i = 0; i < k; i++) x[i] = frand() * 2.f + (t ? 0.f : 0.3f); /* q4_K: an offset, so mins matter */
        kern_quantize_row(wq, x, dt, k);
        kern_cpu_widen(back, wq, dt, k);
        double worst = 0;
        uint16_t hd, hm;
        for (int sb = 0; sb < k / 256; sb++) {
            const uint8_t *blk = wq + sb * (t ? 210 : 144);
            memcpy(&hd, blk + (t ? 208 : 0), 2);
            memcpy(&hm, blk + 2, 2);
            float d = kern_f16_to_f32(hd), dmin = t ? 0.f : kern_f16_to_f32(hm);
            for (int e = 0; e < 256; e++) {
                float bound;
                if (t) {
                    bound = fabsf(d * (float)(int8_t)blk[192 + e / 16]) + 32 * 0.563f * fabsf(d);
                } else {
                    uint8_t ls, lm;
                    ref_scale_min_k4(e / 32, blk + 4, &ls, &lm);
                    bound = 0.5f * d * ls + 15 * 0.531f * d + 0.531f * dmin;
                }
                worst = fmax(worst, fabsf(back[sb * 256 + e] - x[sb * 256 + e]) / (bound * 1.0001f + 1e-7f));
            }
        }
        CHECK(worst <= 1.0, "%s: quantize -> dequantize within the stored scales' bound (worst %.2f of it)",
              kern_dtype_name(dt), worst);
        free(wq); free(got); free(want);
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
    static const int64_t shapes[][3] = {{1, 37, 64},   {1, 5, 96},     {2, 9, 32},    {3, 9, 160},   {8, 64, 320},
                                        {13, 11, 96},  {70, 33, 224},  {9, 4, 4096},  {23, 100, 1120}, {1, 37, 256},
                                        {2, 9, 512},   {13, 11, 768},  {70, 33, 256}, {23, 100, 1280},
                                        /* decode rows: whole groups of four blocks, an odd count of them, tails */
                                        {1, 37, 576},  {1, 70, 800},   {1, 19, 384},  {1, 130, 1024},
                                        /* past the GEMV's one-thread size: rows split over the threads */
                                        {1, 1100, 1024}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int t = 0; t < N_QTYPES; t++)
            for (int bi = 0; bi < 2; bi++) {
                int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                kern_dtype dt = QTYPES[t];
                /* k-quants: whole 256-blocks; with the panels on, the types the int8 GEMM does not pack take the
                 * float panels (test_quant_panel) */
                if (k % kern_dtype_block(dt) || (!qtype_vnni_gemm(dt) && kern_cpu_qpanel_available())) continue;
                float beta = (float)bi;
                float *wf = malloc((size_t)(n * k) * sizeof(float)), *x = malloc((size_t)(m * k) * sizeof(float));
                uint8_t *wq = malloc(kern_dtype_bytes(dt, n * k));
                fill_qweights(wq, wf, dt, n, k); /* wf: the exact dequantized values */
                for (int64_t i = 0; i < m * k; i++) x[i] = frand() * (i % 7 == 0 ? 4.f : 1.f);
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
    CHECK(be->matmul(kc, b, b, b, KERN_Q4_K, 1, 1, 224, 0.f) == KERN_ESHAPE,
          "q4_K matmul k=224 (whole 32-blocks, not whole 256-blocks) refused");
    CHECK(be->matmul_backward_x(kc, b, b, b, KERN_Q6_K, 1, 1, 32, 0.f) == KERN_ESHAPE,
          "matmul_backward_x q6_K with k=32 refused");
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
    /* q4_K: rows of 256 */
    float kf[3 * 256], kwant[3 * 256];
    uint8_t kq[3 * 144];
    for (int i = 0; i < 3 * 256; i++) kf[i] = frand();
    kern_quantize_row(kq, kf, KERN_Q4_K, 3 * 256);
    kern_dequantize_row(kwant, kq, KERN_Q4_K, 3 * 256);
    int32_t kid[2] = {2, 1};
    out = guarded(2 * 256);
    rc = be->embed(kc, out, kq, KERN_Q4_K, 3, 256, kid, 2);
    same = rc == KERN_OK;
    for (int i = 0; i < 2 && same; i++) same = !memcmp(out + i * 256, kwant + kid[i] * 256, 256 * sizeof(float));
    CHECK(same && guards_ok(out, 2 * 256), "embed q4_K gathers dequantized rows");
    CHECK(be->embed(kc, out, kq, KERN_Q4_K, 6, 128, kid, 1) == KERN_ESHAPE, "embed q4_K with d=128 refused");
    guarded_free(out);
}

/* matmul_backward_x on quantized weights (LoRA over a quantized base): dx = dy . dequant(w) (+ dx), exactly as with
 * the dequantized f32 matrix (the weights are widened panel by panel; nothing is rounded). */
static void test_quant_backward_x(const kern_backend *be, kern_ctx *kc) {
    const kern_dtype *dts = QTYPES;
    for (int t = 0; t < N_QTYPES; t++)
        for (int bi = 0; bi < 2; bi++) {
            int64_t m = 13, n = 37, k = kern_dtype_is_kquant(dts[t]) ? 256 : 96;
            float wf[37 * 256], dy[13 * 37];
            uint8_t wq[37 * 210];
            for (int i = 0; i < n * k; i++) wf[i] = frand();
            for (int i = 0; i < m * n; i++) dy[i] = frand();
            size_t rb = kern_dtype_bytes(dts[t], k);
            for (int64_t j = 0; j < n; j++) {
                kern_quantize_row(wq + j * rb, wf + j * k, dts[t], k);
                kern_dequantize_row(wf + j * k, wq + j * rb, dts[t], k);
            }
            float *dx = guarded((size_t)(m * k));
            double want[13 * 256];
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
                                        {B + 3, 37, 4160}, {F + 1, 37, 4160}, {130, 200, 96},
                                        {B - 1, 37, 256},  {B + 1, 37, 256},  {F, 64, 512},     {F + 3, 131, 1280},
                                        {B + 3, 37, 4352}, {F + 1, 37, 1280}};
    kern_cpu_quant_path(KERN_QPATH_AVX2); /* with VNNI, FAST prefill takes the int8 GEMM instead (checked apart) */
    for (int fast = 0; fast <= 1; fast++) {
        kern_cpu_set_gemm(kc, fast ? KERN_CPU_GEMM_FAST : KERN_CPU_GEMM_EXACT);
        int bf16 = fast && kern_cpu_bf16dot_available();
        if (fast && !bf16) printf("note: no AVX512_BF16 on this CPU: FAST takes the fp32 panels\n");
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int t = 0; t < N_QTYPES; t++)
                for (int bi = 0; bi < 2; bi++) {
                    int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                    kern_dtype dt = QTYPES[t];
                    if (k % kern_dtype_block(dt)) continue;
                    size_t rb = kern_dtype_bytes(dt, k);
                    float *wf = malloc((size_t)(n * k) * sizeof(float)), *x = malloc((size_t)(m * k) * sizeof(float));
                    uint8_t *wq = malloc(rb * (size_t)n);
                    fill_qweights(wq, wf, dt, n, k); /* wf: the exact dequantized values */
                    for (int64_t i = 0; i < m * k; i++) x[i] = frand() * (i % 7 == 0 ? 4.f : 1.f);
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
    test_kquant_roundtrip();
    test_quant_x(be, kc); /* kernels_quant_x_cases.h */
    test_quant_embed(be, kc);
    test_quant_backward_x(be, kc);
    kern_cpu_qpanel_allow(0);
    for (int p = KERN_QPATH_SCALAR; p < KERN_QPATH_BEST; p++) {
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

#include "kernels_quant_x_cases.h"

#endif
