/*
 * quant_gemv_vbmi.c — the decode GEMV (one activation row) for q4_0, q4_1, q5_0, q5_1 and q8_0 weights in GGML's
 * own block layout, on AVX-512 VBMI + VNNI.
 *
 * Why: the tile kernels (quant_dot_avx512.c, quant_xdot_tile.h) take one or two 32-blocks per step, so every block
 * pays for its own scale conversion, nibble shuffle and offset correction, and decode ran compute-bound at about
 * half the memory bandwidth. Here a step takes a group of four blocks as they lie in memory: one 64-byte load plus
 * a masked one, and vpermt2b picks the group's quant bytes (and its scales) out of the interleaved blocks in one
 * instruction each, so no repacked copy of the weights is needed. What the weights' layout would cost per block is
 * moved to the activation row, once per call (kq_gemv_prepare):
 *   - q4_0 / q4_1 / q5_0 / q5_1: a group's 64 quant bytes hold the low nibbles (elements 0-15) and high nibbles
 *     (16-31) of each block; the activation's group is stored in that order too (lo of blocks 0-3, then hi of
 *     blocks 0-3), so the nibbles need only an and / shift; q5's fifth bits (32 per block) become two 64-bit byte
 *     masks, one per half, that add 16 where set;
 *   - the offset (q4_0's 8, q5_0's 16, q8_0's 128 after a sign flip into unsigned bytes) and q4_1 / q5_1's min
 *     become one term per block, coef_b * c_b with c_b = off * dx_b * sum_b (with a min: dx_b * sum_b), summed in a
 *     separate accumulator.
 * Lanes of the integer dot: dword lane i sums bytes 4i..4i+3, so a group's 16 lanes are four per block (q4) or
 * eight per block over two registers (q8_0); each lane is scaled by d_w * d_x of its block. Blocks past the last
 * whole group (at most three) take one 256-bit step each.
 * The integer dots are exact; the fp32 sums differ from the tiles' only in order.
 */
#include "quant.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define GV_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c"
#define GV_FN __attribute__((target(GV_TARGET))) static inline __attribute__((always_inline))
/* Groups read ahead by software prefetch, two groups' lines per step (past a row's end lies the next row: rows
 * are contiguous). 40 (~3 KB of q4_0) measured ~10% less CPU per decoded token than none on a TinyLlama-shaped
 * q4_0 file, one thread; 16 half of that. */
#ifndef GV_PARALLEL_MIN_BYTES
#define GV_PARALLEL_MIN_BYTES (512.0 * 1024)
#endif
#ifndef GV_PREFETCH_GROUPS
#define GV_PREFETCH_GROUPS 40
#endif

int kq_gemv_vbmi_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi");
}

int kq_gemv_vbmi_supports(kern_dtype dt) {
    return dt == KERN_Q4_0 || dt == KERN_Q4_1 || dt == KERN_Q5_0 || dt == KERN_Q5_1 || dt == KERN_Q8_0;
}

/* A block's layout: its bytes, where its quants start, where q5's 32 fifth bits lie; d first, a min right after. */
static size_t block_bytes(kern_dtype dt) {
    switch (dt) {
    case KERN_Q4_0: return 18;
    case KERN_Q4_1: return 20;
    case KERN_Q5_0: return 22;
    case KERN_Q5_1: return 24;
    default: return 34;
    }
}
static int quant_at(kern_dtype dt) { return dt == KERN_Q4_1 ? 4 : dt == KERN_Q5_0 ? 6 : dt == KERN_Q5_1 ? 8 : 2; }
static int qh_at(kern_dtype dt) { return dt == KERN_Q5_0 ? 2 : 4; }
static int has_min(kern_dtype dt) { return dt == KERN_Q4_1 || dt == KERN_Q5_1; }

/* The vpermt2b indices of one type: quants of the group (q8_0: two registers), then its d (and m) as f16. */
typedef struct {
    uint8_t q0[64], q1[64], s[64];
} gv_index;

static void make_index(gv_index *ix, kern_dtype dt) {
    size_t bs = block_bytes(dt);
    int qa = quant_at(dt);
    memset(ix, 0, sizeof *ix);
    if (dt == KERN_Q8_0) { /* blocks 0, 1 into q0 (from z0:z1); blocks 2, 3 into q1 (from z1:z2, offset 64) */
        for (int j = 0; j < 2; j++)
            for (int e = 0; e < 32; e++) {
                ix->q0[32 * j + e] = (uint8_t)(bs * (size_t)j + (size_t)qa + (size_t)e);
                ix->q1[32 * j + e] = (uint8_t)(bs * (size_t)(j + 2) + (size_t)qa + (size_t)e - 64);
            }
    } else {
        for (int j = 0; j < 4; j++)
            for (int e = 0; e < 16; e++) ix->q0[16 * j + e] = (uint8_t)(bs * (size_t)j + (size_t)qa + (size_t)e);
    }
    for (int j = 0; j < 4; j++) { /* d of block j at f16 slot j; q4_1's m at slot 4 + j */
        ix->s[2 * j] = (uint8_t)(bs * (size_t)j);
        ix->s[2 * j + 1] = (uint8_t)(bs * (size_t)j + 1);
        if (has_min(dt)) {
            ix->s[8 + 2 * j] = (uint8_t)(bs * (size_t)j + 2);
            ix->s[8 + 2 * j + 1] = (uint8_t)(bs * (size_t)j + 3);
        }
    }
}

void kq_gemv_prepare(kq_gemv_act *g, const kq_act *a, kern_dtype dt, int64_t nb) {
    int64_t ng = nb / 4;
    const float off = dt == KERN_Q4_0 ? 8.f : dt == KERN_Q5_0 ? 16.f : dt == KERN_Q8_0 ? 128.f : 1.f;
    if (dt == KERN_Q8_0) {
        memcpy(g->xp, a->qs, (size_t)nb * KERN_QBLOCK);
    } else {
        for (int64_t gi = 0; gi < ng; gi++)
            for (int j = 0; j < 4; j++) {
                const int8_t *xb = a->qs + (gi * 4 + j) * KERN_QBLOCK;
                memcpy(g->xp + gi * 128 + 16 * j, xb, 16);
                memcpy(g->xp + gi * 128 + 64 + 16 * j, xb + 16, 16);
            }
        memcpy(g->xp + ng * 128, a->qs + ng * 4 * KERN_QBLOCK, (size_t)(nb - ng * 4) * KERN_QBLOCK);
    }
    for (int64_t b = 0; b < nb; b++) g->c[b] = off * a->d[b] * (float)a->sum[b];
    g->d = a->d;
}

/* One group of four blocks at wb: acc += the 16 lanes' scaled dots; cacc += coef * c (4 lanes). */
GV_FN void group_q4(__m512 *acc, __m128 *cacc, const char *wb, const int8_t *xg, const float *dx, const float *c,
                    __m512i qidx, __m512i sidx, size_t tail_mask_bytes, int mins, int qh_off, size_t bs) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i lanes = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512i z0 = _mm512_loadu_si512(wb);
    __m512i z1 = _mm512_maskz_loadu_epi8(((__mmask64)1 << tail_mask_bytes) - 1, wb + 64);
    __m512i v = _mm512_permutex2var_epi8(z0, qidx, z1);
    __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    if (qh_off >= 0) { /* q5: bit e of a block's 32 adds 16 to element e (lo: e < 16, hi: e >= 16) */
        uint64_t mlo = 0, mhi = 0;
        for (int j = 0; j < 4; j++) {
            uint32_t h;
            memcpy(&h, wb + bs * (size_t)j + (size_t)qh_off, 4);
            mlo |= (uint64_t)(h & 0xFFFFu) << (16 * j);
            mhi |= (uint64_t)(h >> 16) << (16 * j);
        }
        const __m512i sixteen = _mm512_set1_epi8(16);
        lo = _mm512_mask_add_epi8(lo, (__mmask64)mlo, lo, sixteen);
        hi = _mm512_mask_add_epi8(hi, (__mmask64)mhi, hi, sixteen);
    }
    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xg));
    p = _mm512_dpbusd_epi32(p, hi, _mm512_loadu_si512(xg + 64));
    __m256 s = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutex2var_epi8(z0, sidx, z1))); /* d0-3, m0-3 */
    __m128 d = _mm256_castps256_ps128(s);
    __m512 sd = _mm512_castps128_ps512(_mm_mul_ps(d, _mm_loadu_ps(dx)));
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(lanes, sd), *acc);
    __m128 coef = mins ? _mm256_extractf128_ps(s, 1) : d;
    *cacc = _mm_fmadd_ps(coef, _mm_loadu_ps(c), *cacc);
}

GV_FN void group_q8(__m512 *acc, __m128 *cacc, const char *wb, const int8_t *xg, const float *dx, const float *c,
                    __m512i qidx0, __m512i qidx1, __m512i sidx) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const __m512i lanes0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i lanes1 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    __m512i z0 = _mm512_loadu_si512(wb), z1 = _mm512_loadu_si512(wb + 64);
    __m512i z2 = _mm512_maskz_loadu_epi8(((__mmask64)1 << 8) - 1, wb + 128); /* 136 bytes per group */
    __m512i w0 = _mm512_xor_si512(_mm512_permutex2var_epi8(z0, qidx0, z1), flip);
    __m512i w1 = _mm512_xor_si512(_mm512_permutex2var_epi8(z1, qidx1, z2), flip);
    __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w0, _mm512_loadu_si512(xg));
    __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w1, _mm512_loadu_si512(xg + 64));
    __m128 d = _mm_cvtph_ps(_mm512_castsi512_si128(_mm512_permutex2var_epi8(z0, sidx, z1)));
    __m512 sd = _mm512_castps128_ps512(_mm_mul_ps(d, _mm_loadu_ps(dx)));
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0), _mm512_permutexvar_ps(lanes0, sd), *acc);
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), _mm512_permutexvar_ps(lanes1, sd), *acc);
    *cacc = _mm_fmadd_ps(d, _mm_loadu_ps(c), *cacc);
}

/* A block past the last whole group, one 256-bit step (x in element order). */
GV_FN void single_block(__m256 *acc, float *cs, const char *wb, kern_dtype dt, const int8_t *xb, float dx, float c) {
    __m256i u;
    float d = _cvtsh_ss(*(const uint16_t *)wb), coef = d;
    if (dt == KERN_Q8_0) {
        u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(wb + 2)), _mm256_set1_epi8((char)0x80));
    } else {
        __m128i q = _mm_loadu_si128((const __m128i *)(wb + quant_at(dt))), m4 = _mm_set1_epi8(15);
        u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
        if (dt == KERN_Q5_0 || dt == KERN_Q5_1) {
            uint32_t h;
            memcpy(&h, wb + qh_at(dt), 4);
            u = _mm256_mask_add_epi8(u, (__mmask32)h, u, _mm256_set1_epi8(16));
        }
        if (has_min(dt)) coef = _cvtsh_ss(*(const uint16_t *)(wb + 2)); /* the min: added, not subtracted */
    }
    __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, _mm256_loadu_si256((const __m256i *)xb));
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * dx), *acc);
    *cs += coef * c;
}

GV_FN float hsum128(__m128 h) {
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* y[j] = row j . x (+ beta y[j]) for rows [r0, r1). */
__attribute__((target(GV_TARGET))) static void rows_kernel(float *y, const char *w, size_t wrb, const kq_gemv_act *g,
                                                           kern_dtype dt, int64_t r0, int64_t r1, int64_t nb,
                                                           float beta, const gv_index *ix) {
    const size_t bs = block_bytes(dt), gb = 4 * bs;
    const int64_t ng = nb / 4;
    const __m512i q0 = _mm512_loadu_si512(ix->q0), q1 = _mm512_loadu_si512(ix->q1), s = _mm512_loadu_si512(ix->s);
    const size_t tail = 4 * bs - 64; /* bytes of a q4 group past its first 64 */
    const int mins = has_min(dt), qh_off = dt == KERN_Q5_0 || dt == KERN_Q5_1 ? qh_at(dt) : -1;
    for (int64_t r = r0; r < r1; r++) {
        const char *row = w + (size_t)r * wrb;
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        __m128 cacc0 = _mm_setzero_ps(), cacc1 = _mm_setzero_ps();
        int64_t gi = 0;
        if (dt == KERN_Q8_0) {
            for (; gi + 1 < ng; gi += 2) { /* two groups per step: two independent accumulator chains */
                _mm_prefetch(row + (gi + GV_PREFETCH_GROUPS) * gb, _MM_HINT_T0);
                _mm_prefetch(row + (gi + GV_PREFETCH_GROUPS) * gb + 64, _MM_HINT_T0);
                _mm_prefetch(row + (gi + GV_PREFETCH_GROUPS) * gb + 128, _MM_HINT_T0);
                _mm_prefetch(row + (gi + GV_PREFETCH_GROUPS) * gb + 192, _MM_HINT_T0);
                _mm_prefetch(row + (gi + GV_PREFETCH_GROUPS) * gb + 256, _MM_HINT_T0);
                group_q8(&acc0, &cacc0, row + gi * gb, g->xp + gi * 128, g->d + gi * 4, g->c + gi * 4, q0, q1, s);
                group_q8(&acc1, &cacc1, row + (gi + 1) * gb, g->xp + (gi + 1) * 128, g->d + (gi + 1) * 4,
                         g->c + (gi + 1) * 4, q0, q1, s);
            }
            if (gi < ng) group_q8(&acc0, &cacc0, row + gi * gb, g->xp + gi * 128, g->d + gi * 4, g->c + gi * 4, q0, q1, s);
        } else {
            for (; gi + 1 < ng; gi += 2) {
                _mm_prefetch(row + (gi + GV_PREFETCH_GROUPS) * gb, _MM_HINT_T0);
                _mm_prefetch(row + (gi + GV_PREFETCH_GROUPS) * gb + 64, _MM_HINT_T0);
                _mm_prefetch(row + (gi + GV_PREFETCH_GROUPS) * gb + 128, _MM_HINT_T0);
                group_q4(&acc0, &cacc0, row + gi * gb, g->xp + gi * 128, g->d + gi * 4, g->c + gi * 4, q0, s, tail,
                         mins, qh_off, bs);
                group_q4(&acc1, &cacc1, row + (gi + 1) * gb, g->xp + (gi + 1) * 128, g->d + (gi + 1) * 4,
                         g->c + (gi + 1) * 4, q0, s, tail, mins, qh_off, bs);
            }
            if (gi < ng)
                group_q4(&acc0, &cacc0, row + gi * gb, g->xp + gi * 128, g->d + gi * 4, g->c + gi * 4, q0, s, tail,
                         mins, qh_off, bs);
        }
        __m256 acc_t = _mm256_setzero_ps();
        float cs = 0.f;
        for (int64_t b = ng * 4; b < nb; b++)
            single_block(&acc_t, &cs, row + (size_t)b * bs, dt, g->xp + b * KERN_QBLOCK, g->d[b], g->c[b]);
        __m512 acc = _mm512_add_ps(acc0, acc1);
        float dot = _mm512_reduce_add_ps(acc) + hsum128(_mm_add_ps(_mm256_castps256_ps128(acc_t),
                                                                   _mm256_extractf128_ps(acc_t, 1)));
        float corr = hsum128(_mm_add_ps(cacc0, cacc1)) + cs;
        float v = mins ? dot + corr : dot - corr;
        y[r] = beta != 0.f ? v + y[r] : v;
    }
}

void kq_gemv_vbmi(float *y, const void *w, kern_dtype dt, int64_t n, int64_t nb, const kq_gemv_act *g, float beta,
                  int threads) {
    static gv_index ix4_0, ix4_1, ix5_0, ix5_1, ix8_0;
    static int ready; /* the tables are pure functions of the type: a race only writes the same bytes */
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        make_index(&ix4_0, KERN_Q4_0);
        make_index(&ix4_1, KERN_Q4_1);
        make_index(&ix5_0, KERN_Q5_0);
        make_index(&ix5_1, KERN_Q5_1);
        make_index(&ix8_0, KERN_Q8_0);
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    const gv_index *ix = dt == KERN_Q4_0 ? &ix4_0 : dt == KERN_Q4_1 ? &ix4_1 : dt == KERN_Q5_0 ? &ix5_0
                         : dt == KERN_Q5_1 ? &ix5_1 : &ix8_0;
    size_t wrb = (size_t)nb * block_bytes(dt);
    /* rows in chunks of 16 so a thread's rows are one sequential stream and the split stays even. A matrix under
     * GV_PARALLEL_MIN_BYTES is read by the calling thread alone: waking a sleeping worker (mnemo's passive OpenMP
     * wait) costs more than reading it (SmolLM2's q, k, v, o: 69-207 KB, ~10-20 us on one core) */
    int64_t chunks = (n + 15) / 16;
    const int par = threads > 1 && (double)wrb * (double)n >= GV_PARALLEL_MIN_BYTES;
#pragma omp parallel for num_threads(threads) schedule(static) if (par)
    for (int64_t ci = 0; ci < chunks; ci++) {
        int64_t r0 = ci * 16, r1 = r0 + 16 < n ? r0 + 16 : n;
        rows_kernel(y, (const char *)w, wrb, g, dt, r0, r1, nb, beta, ix);
    }
}
#else
int kq_gemv_vbmi_available(void) { return 0; }
int kq_gemv_vbmi_supports(kern_dtype dt) { (void)dt; return 0; }
void kq_gemv_prepare(kq_gemv_act *g, const kq_act *a, kern_dtype dt, int64_t nb) { (void)g, (void)a, (void)dt, (void)nb; }
void kq_gemv_vbmi(float *y, const void *w, kern_dtype dt, int64_t n, int64_t nb, const kq_gemv_act *g, float beta,
                  int threads) {
    (void)y, (void)w, (void)dt, (void)n, (void)nb, (void)g, (void)beta, (void)threads;
}
#endif
