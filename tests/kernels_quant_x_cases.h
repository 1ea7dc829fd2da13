/*
 * kernels_quant_x_cases.h — test_kernels_cpu's cases for q4_1, q5_0, q5_1, q2_K, q3_K and q5_K beyond the shared
 * loops of kernels_quant_cases.h (which run their matmuls on every path, panels and backward):
 *   - bit for bit against gguf-py (tests/fixtures/quant/blocks.bin, tests/reference/make_quant_fixtures.py):
 *     random blocks of every quantized type dequantize to gguf-py's float32 values, and q4_0, q4_1, q5_0, q5_1,
 *     q8_0 quantize to gguf-py's (= ggml's reference quantizer's) bytes;
 *   - quantize -> dequantize of Gaussian rows: relative RMS error below what the bit width allows
 *     (round-to-nearest: about step / sqrt(12) over the range of a group, plus the scales' rounding);
 *   - embed gathers dequantized rows.
 * Uses frand, guarded, guards_ok from test_kernels_cpu.c.
 */
#ifndef MNEMO_KERNELS_QUANT_X_CASES_H
#define MNEMO_KERNELS_QUANT_X_CASES_H

static const kern_dtype XTYPES[6] = {KERN_Q4_1, KERN_Q5_0, KERN_Q5_1, KERN_Q2_K, KERN_Q3_K, KERN_Q5_K};

static int qtype_by_name(const char *name, kern_dtype *dt) {
    for (int t = 0; t < N_QTYPES; t++)
        if (!strcmp(kern_dtype_name(QTYPES[t]), name)) return *dt = QTYPES[t], 1;
    return 0;
}

static uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void test_quant_fixtures(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/quant/blocks.bin", test_fixtures());
    size_t len = 0;
    uint8_t *buf = test_slurp(path, &len);
    CHECK(buf && len >= 8 && !memcmp(buf, "MQFX", 4), "quant fixture %s readable", path);
    if (!buf || len < 8) {
        free(buf);
        return;
    }
    uint32_t count = rd_u32(buf + 4), seen_dq = 0, seen_q = 0;
    size_t o = 8;
    for (uint32_t i = 0; i < count && o + 20 <= len; i++) {
        char name[9] = {0};
        memcpy(name, buf + o, 8);
        uint32_t kind = rd_u32(buf + o + 8), n = rd_u32(buf + o + 12), nbytes = rd_u32(buf + o + 16);
        const uint8_t *bytes = buf + o + 20, *vals = bytes + nbytes;
        o += 20 + (size_t)nbytes + 4 * (size_t)n;
        kern_dtype dt;
        if (o > len || !qtype_by_name(name, &dt) || kern_dtype_bytes(dt, n) != nbytes) {
            CHECK(0, "quant fixture entry %u (%s) malformed", i, name);
            break;
        }
        float *want = malloc(4 * (size_t)n), *got = malloc(4 * (size_t)n);
        memcpy(want, vals, 4 * (size_t)n);
        if (kind == 0) {
            kern_dequantize_row(got, bytes, dt, n);
            size_t bad = 0;
            for (uint32_t e = 0; e < n; e++) bad += memcmp(&got[e], &want[e], 4) != 0;
            CHECK(bad == 0, "%s: %u random-block weights dequantize bit for bit as gguf-py's (%zu differ)", name, n, bad);
            seen_dq++;
        } else {
            uint8_t *q = malloc(nbytes);
            kern_quantize_row(q, want, dt, n);
            size_t bad = 0;
            for (uint32_t e = 0; e < nbytes; e++) bad += q[e] != bytes[e];
            CHECK(bad == 0, "%s: quantizing %u floats gives gguf-py's bytes (%zu of %u bytes differ)", name, n, bad,
                  nbytes);
            free(q);
            seen_q++;
        }
        free(want);
        free(got);
    }
    CHECK(seen_dq == 10 && seen_q == 5, "quant fixture: %u dequantize entries (10 types), %u quantize entries (5)",
          seen_dq, seen_q);
    free(buf);
}

/* Relative RMS error of quantize -> dequantize on N(0, 1) + 0.3 rows, per type, against a ceiling a bit above
 * round-to-nearest's (measured: q4_1 0.07, q5_0 0.04, q5_1 0.03, q2_K 0.30, q3_K 0.17, q5_K 0.04). */
static void test_quant_x_roundtrip(void) {
    const double ceiling[6] = {0.09, 0.05, 0.04, 0.38, 0.22, 0.05};
    enum { K = 1024 };
    static float x[K], back[K];
    static uint8_t q[K];
    for (int t = 0; t < 6; t++) {
        kern_dtype dt = XTYPES[t];
        double num = 0, den = 0;
        for (int rep = 0; rep < 8; rep++) {
            for (int i = 0; i < K; i++) { /* sum of uniforms: roughly Gaussian, with an offset so mins matter */
                float g = 0.f;
                for (int u = 0; u < 4; u++) g += frand();
                x[i] = g * 0.87f + 0.3f;
            }
            kern_quantize_row(q, x, dt, K);
            kern_cpu_widen(back, q, dt, K);
            for (int i = 0; i < K; i++) num += (double)(back[i] - x[i]) * (back[i] - x[i]), den += (double)x[i] * x[i];
        }
        double rel = sqrt(num / den);
        CHECK(rel < ceiling[t], "%s: quantize -> dequantize relative RMS error %.3f (ceiling %.2f)",
              kern_dtype_name(dt), rel, ceiling[t]);
    }
    /* NaN and infinite weights quantize to something finite-free of UB; the block stays readable */
    float bad[256];
    for (int i = 0; i < 256; i++) bad[i] = i == 3 ? NAN : i == 77 ? INFINITY : frand();
    for (int t = 0; t < 6; t++) kern_quantize_row(q, bad, XTYPES[t], 256);
    CHECK(1, "quantizing NaN / inf weights completes");
}

static void test_quant_x_embed(const kern_backend *be, kern_ctx *kc) {
    for (int t = 0; t < 6; t++) {
        kern_dtype dt = XTYPES[t];
        int64_t V = 5, d = 256;
        static float tf[5 * 256], want[5 * 256];
        static uint8_t tq[5 * 256];
        for (int i = 0; i < V * d; i++) tf[i] = frand();
        kern_quantize_row(tq, tf, dt, V * d);
        kern_dequantize_row(want, tq, dt, V * d);
        int32_t ids[3] = {4, 0, 4};
        float *out = guarded(3 * 256);
        int rc = be->embed(kc, out, tq, dt, V, d, ids, 3);
        bool same = rc == KERN_OK;
        for (int i = 0; i < 3 && same; i++) same = !memcmp(out + i * d, want + ids[i] * d, (size_t)d * sizeof(float));
        CHECK(same && guards_ok(out, 3 * 256), "embed %s gathers dequantized rows", kern_dtype_name(dt));
        int64_t dbad = kern_dtype_is_kquant(dt) ? 128 : 48;
        CHECK(be->embed(kc, out, tq, dt, V, dbad, ids, 1) == KERN_ESHAPE, "embed %s with d=%ld refused",
              kern_dtype_name(dt), (long)dbad);
        guarded_free(out);
    }
}

static void test_quant_x(const kern_backend *be, kern_ctx *kc) {
    test_quant_fixtures();
    test_quant_x_roundtrip();
    test_quant_x_embed(be, kc);
}

#endif
