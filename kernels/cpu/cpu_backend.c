/*
 * cpu_backend.c — the CPU backend's execution context (threads, scratch) and its op table.
 *
 * The CPU backend is the reference every other backend is checked against. Ops parallelise with OpenMP over
 * kc->n_threads; GEMMs go to OpenBLAS (its own threads, set to the same count). Scratch is one growable buffer
 * per context, so a context never allocates in the decode loop once warmed up.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_ops.h"
#include "kernels_cpu_paths.h"

#include <cblas.h>

/* OpenBLAS thread control; declared here because Debian's cblas.h variants differ in what they expose. */
void openblas_set_num_threads(int num_threads);

#define KERN_OP_NAME(name, params, doc) #name,
const char *const kern_op_names[KERN_OP_COUNT] = {KERN_OPS(KERN_OP_NAME)};
#undef KERN_OP_NAME
#define KERN_OP_DOC(name, params, doc) doc,
const char *const kern_op_docs[KERN_OP_COUNT] = {KERN_OPS(KERN_OP_DOC)};
#undef KERN_OP_DOC

/* Backend memory is host memory: the functions are malloc/memset/memcpy, and sync has nothing to wait for. */
static kern_ctx *cpu_ctx_new(int n_threads) { return kern_cpu_ctx_new(n_threads); }

static void *cpu_mem_alloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0) return NULL;
    return p;
}

static void cpu_mem_free(void *p) { free(p); }

static int cpu_mem_set(kern_ctx *kc, void *p, int byte, size_t bytes) {
    (void)kc;
    if (bytes) memset(p, byte, bytes);
    return KERN_OK;
}

static int cpu_mem_copy(kern_ctx *kc, void *dst, const void *src, size_t bytes, kern_copy_dir dir) {
    (void)kc;
    (void)dir;
    if (bytes) memcpy(dst, src, bytes);
    return KERN_OK;
}

static int cpu_mem_copy2d(kern_ctx *kc, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                          size_t rows, kern_copy_dir dir) {
    (void)kc;
    (void)dir;
    if (width > dpitch || width > spitch) return KERN_ESHAPE;
    for (size_t r = 0; r < rows && width; r++) memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return KERN_OK;
}

static int cpu_sync(kern_ctx *kc) {
    (void)kc;
    return KERN_OK;
}

/* The CPU's kernel settings (kern_backend.setting; the table is kernel_settings.c). */
static int on_off(const char *v) { return !strcmp(v, "on") ? 1 : !strcmp(v, "off") ? 0 : -1; }

static int cpu_setting(kern_ctx *kc, const char *name, const char *value) {
    if (!strcmp(name, "cpu.gemm")) {
        if (strcmp(value, "fast") && strcmp(value, "exact")) return -1;
        kc->gemm_fast = !strcmp(value, "fast");
        return 1;
    }
    int *flag = !strcmp(name, "cpu.f32gemm") ? &kc->f32gemm : !strcmp(name, "cpu.qpanel") ? &kc->qpanel : NULL;
    if (!flag) return 0;
    int v = on_off(value);
    if (v < 0) return -1;
    *flag = v;
    return 1;
}

#define KERN_CPU_ENTRY(name, params, doc) .name = kern_cpu_##name,
static const kern_backend cpu_backend = {
    .name = "cpu",
    KERN_OPS(KERN_CPU_ENTRY)
    .host_memory = 1,
    .ctx_new = cpu_ctx_new,
    .ctx_free = kern_cpu_ctx_free,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .mem_set = cpu_mem_set,
    .mem_copy = cpu_mem_copy,
    .mem_copy2d = cpu_mem_copy2d,
    .sync = cpu_sync,
    .setting = cpu_setting,
};
#undef KERN_CPU_ENTRY

const kern_backend *kern_cpu_backend(void) { return &cpu_backend; }

kern_ctx *kern_cpu_ctx_new(int n_threads) {
    kern_ctx *kc = calloc(1, sizeof *kc);
    if (!kc) return NULL;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    kc->n_threads = n_threads;
    kc->gemm_fast = 1; /* cpu.gemm=fast, see kernels_cpu_paths.h */
    kc->f32gemm = kc->qpanel = 1;
    openblas_set_num_threads(n_threads);
    return kc;
}

int kern_cpu_set_gemm(kern_ctx *kc, kern_cpu_gemm mode) {
    if (!kc || (mode != KERN_CPU_GEMM_EXACT && mode != KERN_CPU_GEMM_FAST)) return KERN_ESHAPE;
    kc->gemm_fast = mode == KERN_CPU_GEMM_FAST;
    return KERN_OK;
}

void kern_cpu_ctx_free(kern_ctx *kc) {
    if (!kc) return;
    free(kc->scratch);
    free(kc);
}

int kern_ctx_threads(const kern_ctx *kc) { return kc ? kc->n_threads : 1; }

float *kern_cpu_scratch(kern_ctx *kc, size_t n_floats) {
    if (n_floats > kc->scratch_cap) {
        size_t cap = n_floats + n_floats / 4;
        float *p = NULL;
        if (posix_memalign((void **)&p, 64, cap * sizeof(float)) != 0) return NULL;
        free(kc->scratch);
        kc->scratch = p;
        kc->scratch_cap = cap;
    }
    return kc->scratch;
}

size_t kern_dtype_size(kern_dtype dt) { return dt == KERN_F32 ? 4 : kern_dtype_is_quant(dt) ? 0 : 2; }

const char *kern_dtype_name(kern_dtype dt) {
    switch (dt) {
    case KERN_F32: return "f32";
    case KERN_F16: return "f16";
    case KERN_BF16: return "bf16";
    case KERN_Q8_0: return "q8_0";
    case KERN_Q4_0: return "q4_0";
    case KERN_Q4_K: return "q4_K";
    case KERN_Q6_K: return "q6_K";
    case KERN_Q4_1: return "q4_1";
    case KERN_Q5_0: return "q5_0";
    case KERN_Q5_1: return "q5_1";
    case KERN_Q2_K: return "q2_K";
    case KERN_Q3_K: return "q3_K";
    case KERN_Q5_K: return "q5_K";
    }
    return "?";
}

float kern_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    union { uint32_t u; float f; } c = {.u = u};
    return c.f;
}

uint16_t kern_f32_to_f16(float f) {
    return _cvtss_sh(f, 0); /* F16C: round to nearest even */
}

/* Widen n elements of a weight row to fp32. */
void kern_cpu_widen(float *dst, const void *src, kern_dtype dt, int64_t n) {
    if (kern_dtype_is_quant(dt)) {
        kern_dequantize_row(dst, src, dt, n);
        return;
    }
    if (dt == KERN_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    const uint16_t *s = src;
    int64_t i = 0;
#ifdef __AVX512F__
    if (dt == KERN_BF16) {
        for (; i + 16 <= n; i += 16) {
            __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + i)));
            _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
        }
    } else {
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
    }
#elif defined(__AVX2__)
    if (dt == KERN_BF16) {
        for (; i + 8 <= n; i += 8) {
            __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
        }
    } else {
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    }
#endif
    if (dt == KERN_BF16)
        for (; i < n; i++) dst[i] = kern_bf16_to_f32(s[i]);
    else
        for (; i < n; i++) dst[i] = kern_f16_to_f32(s[i]);
}
