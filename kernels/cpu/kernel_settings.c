/*
 * kernel_settings.c — the table of kernel settings (kernels.h) and the parser of a settings list. Each backend
 * applies its own names (cpu_backend.c, cuda_backend.cu: kern_backend.setting); a name in this table that the
 * context's backend does not know is another backend's and is skipped, so one list serves CPU and GPU contexts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static const kern_setting_info SETTINGS[] = {
    {"cpu.gemm", "fast|exact",
     "bf16 weights, prefill: fast rounds activations to bf16 for the AVX512_BF16 dot products (~2x; error <= 2^-9 "
     "sum|x w|, as llama.cpp and PyTorch do); exact widens the weights to fp32 (training and the whole-model tests)"},
    {"cpu.f32gemm", "on|off", "fp32 weights: mnemo's AVX-512 FMA tiles (on) or OpenBLAS sgemm (off)"},
    {"cpu.qpanel", "on|off",
     "quantized weights, prefill: dequantized panels and the int8 GEMM (on) or the integer tiles for every row "
     "count (off)"},
    {"cuda.gemm", "split|fast",
     "bf16/f16 weights, more than 8 rows: split keeps fp32 accuracy with 2-3 tensor-core GEMMs; fast rounds "
     "activations once (~2x, normalized MSE ~1e-6)"},
    {"cuda.attn", "simt|tc|mma",
     "prefill attention: the fp32 SIMT flash kernel (default), TF32 wmma (tc) or bf16 mma.sync (mma)"},
    {"cuda.gemv_split", "auto|1|2|4", "decode GEMV: warps per row group (auto: 1 below 6 rows, else 2)"},
    {"cuda.dec_blocks_per_sm", "auto|1..64", "decode attention: split-KV blocks aimed at per SM (auto: 8)"},
};

const kern_setting_info *kern_settings_table(int *n) {
    *n = (int)(sizeof SETTINGS / sizeof SETTINGS[0]);
    return SETTINGS;
}

static const kern_setting_info *find(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof SETTINGS / sizeof SETTINGS[0]; i++)
        if (strlen(SETTINGS[i].name) == len && !strncmp(SETTINGS[i].name, name, len)) return &SETTINGS[i];
    return NULL;
}

/* Whether value is one of a "a|b|1..64" list (so a setting is checked also on a context of the other backend). */
static int value_ok(const char *values, const char *value) {
    const char *p = values;
    for (;;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        const char *dots = strstr(p, "..");
        if (dots && dots < p + n) {
            long lo = strtol(p, NULL, 10), hi = strtol(dots + 2, NULL, 10);
            char *e;
            long v = strtol(value, &e, 10);
            if (*value && !*e && v >= lo && v <= hi) return 1;
        } else if (strlen(value) == n && !strncmp(p, value, n)) {
            return 1;
        }
        if (!bar) return 0;
        p = bar + 1;
    }
}

int kern_ctx_settings(const kern_backend *be, kern_ctx *kc, const char *list, char *err, size_t errlen) {
    if (!list) return KERN_OK;
    const char *p = list;
    while (*p) {
        const char *end = strchr(p, ','), *eq = strchr(p, '=');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0) { /* tolerate "a=b," and ",," */
            p += end ? 1 : 0;
            if (!end) break;
            continue;
        }
        if (!eq || eq >= p + len) {
            snprintf(err, errlen, "kernel setting '%.*s' is not NAME=VALUE", (int)len, p);
            return KERN_ESHAPE;
        }
        const kern_setting_info *s = find(p, (size_t)(eq - p));
        char value[64];
        size_t vlen = (size_t)(p + len - eq - 1);
        if (!s) { /* the names, from the table */
            int n = snprintf(err, errlen, "unknown kernel setting '%.*s' (known:", (int)(eq - p), p);
            for (size_t i = 0; i < sizeof SETTINGS / sizeof SETTINGS[0] && n >= 0 && (size_t)n < errlen; i++)
                n += snprintf(err + n, errlen - (size_t)n, "%s %s", i ? "," : "", SETTINGS[i].name);
            if (n >= 0 && (size_t)n < errlen) snprintf(err + n, errlen - (size_t)n, ")");
            return KERN_ESHAPE;
        }
        if (vlen == 0 || vlen >= sizeof value) {
            snprintf(err, errlen, "kernel setting %s: the value must be one of %s", s->name, s->values);
            return KERN_ESHAPE;
        }
        memcpy(value, eq + 1, vlen);
        value[vlen] = '\0';
        if (!value_ok(s->values, value) || (be && be->setting && be->setting(kc, s->name, value) < 0)) {
            snprintf(err, errlen, "kernel setting %s: '%s' is not one of %s", s->name, value, s->values);
            return KERN_ESHAPE;
        }
        if (!end) break;
        p = end + 1;
    }
    return KERN_OK;
}
