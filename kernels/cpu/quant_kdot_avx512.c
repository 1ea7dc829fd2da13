/*
 * quant_kdot_avx512.c — the AVX-512 VNNI tile kernel for q4_K / q6_K weights against int8 activation blocks (the
 * contract of quant_kdot_scalar.c): two 32-blocks per register, one vpdpbusd (unsigned weights x signed x, summed
 * into 16 int32 lanes of 4 elements) per weight row x activation row pair.
 *   - weights as unsigned bytes: q4_K the nibbles (32 bytes of qs hold a sub-block pair, low then high nibbles),
 *     q6_K q + 32 (64 bytes of ql and 32 of qh hold a pair); q6_K's +32 is taken out by starting the accumulator
 *     at minus 32 * sum(x) per lane (one vpdpbusd of 32s with x per activation pair, shared by the weight rows);
 *   - scales per lane: the super-block's scales unpacked to fp32 once per weight row and multiplied by d_x of
 *     their activation blocks once per super-block, then spread to the pair's lanes by one vpermps (q4_K: 8 lanes
 *     per sub-block, q6_K: 4 lanes per 16-element group);
 *   - q4_K's min term: one 8-wide FMA per super-block (mins times d_x * sum(x) of the 8 activation blocks).
 * Compiled with a target attribute; quant_matmul.c calls it only when the CPU has AVX512F/BW/VL/DQ + VNNI.
 */
#include "quant.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "quant_kpair_avx512.h"

#define Z_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#define Z_FN __attribute__((target(Z_TARGET))) static inline __attribute__((always_inline))

/* One weight row's super-block scales: sc lanes 0-15 per 16-element group (q4_K: lanes 0-7 per sub-block), and
 * for q4_K its 8 mins dmin * m_j. */
Z_FN void unpack_scales(const char *blk, kern_dtype dt, __m512 *sc, __m256 *mn) {
    if (dt == KERN_Q4_K) {
        uint8_t s[8], m[8];
        kq_q4k_scales((const uint8_t *)blk + 4, s, m);
        __m256 sf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)s)));
        __m256 mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)m)));
        *sc = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(*(const uint16_t *)blk)), sf));
        *mn = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(*(const uint16_t *)(blk + 2))), mf);
        return;
    }
    __m512 sf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 192))));
    *sc = _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(*(const uint16_t *)(blk + 208))), sf);
    *mn = _mm256_setzero_ps();
}

Z_FN void tile_fixed(float *out, int64_t ldo, const char *w, size_t wrb, const kq_act *a, int64_t x0, int64_t nb,
                     kern_dtype dt, const int NW, const int NX) {
    const size_t bs = dt == KERN_Q4_K ? sizeof(kq_block_q4_K) : sizeof(kq_block_q6_K);
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i half = _mm512_srli_epi32(lane, 3), quarter = _mm512_srli_epi32(lane, 2), c32 = _mm512_set1_epi8(32);
    __m512 acc[KQ_TILE][KQ_TILE];
    __m256 macc[KQ_TILE][KQ_TILE];
    for (int i = 0; i < NW; i++)
        for (int j = 0; j < NX; j++) acc[i][j] = _mm512_setzero_ps(), macc[i][j] = _mm256_setzero_ps();
    /* 1 x 1 (decode): one accumulator per pair of the super-block, so the FMAs do not wait on each other */
    const int single = NW == 1 && NX == 1;
    __m512 accp[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t sb = 0; sb < nb / 8; sb++) {
        __m512 sc[KQ_TILE];
        __m256 mn[KQ_TILE];
        const char *blk[KQ_TILE];
        for (int i = 0; i < NW; i++) {
            blk[i] = w + (size_t)i * wrb + (size_t)sb * bs;
            unpack_scales(blk[i], dt, &sc[i], &mn[i]);
        }
        /* sd[i][j]: weight scale times d_x, per sub-block (q4_K, lanes 0-7) or 16-element group (q6_K, 16 lanes;
         * group g is in activation block g / 2), so a pair needs one permute of it */
        __m512 sd[KQ_TILE][KQ_TILE];
        for (int j = 0; j < NX; j++) {
            int64_t o = (x0 + j) * nb + sb * 8;
            __m256 d8 = _mm256_loadu_ps(a->d + o);
            __m512 dx = _mm512_castps256_ps512(d8);
            if (dt == KERN_Q6_K) dx = _mm512_permutexvar_ps(_mm512_srli_epi32(lane, 1), dx);
            for (int i = 0; i < NW; i++) sd[i][j] = _mm512_mul_ps(sc[i], dx);
            if (dt == KERN_Q4_K) {
                __m256 xs = _mm256_mul_ps(d8, _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(a->sum + o))));
                for (int i = 0; i < NW; i++) macc[i][j] = _mm256_fmadd_ps(mn[i], xs, macc[i][j]);
            }
        }
        for (int p = 0; p < 4; p++) {
            const __m512i ib = _mm512_add_epi32(half, _mm512_set1_epi32(2 * p)); /* lanes -> block 2p or 2p+1 */
            const __m512i is = dt == KERN_Q4_K ? ib : _mm512_add_epi32(quarter, _mm512_set1_epi32(4 * p));
            __m512i u[KQ_TILE];
            for (int i = 0; i < NW; i++) u[i] = kq_pair_u8(blk[i], dt, p);
            for (int j = 0; j < NX; j++) {
                int64_t o = (x0 + j) * nb + sb * 8 + 2 * p;
                __m512i xv = _mm512_loadu_si512(a->qs + o * KERN_QBLOCK);
                __m512i start = dt == KERN_Q6_K
                                    ? _mm512_sub_epi32(_mm512_setzero_si512(),
                                                       _mm512_dpbusd_epi32(_mm512_setzero_si512(), c32, xv))
                                    : _mm512_setzero_si512();
                for (int i = 0; i < NW; i++) {
                    __m512i q = _mm512_dpbusd_epi32(start, u[i], xv);
                    __m512 f = _mm512_cvtepi32_ps(q), s = _mm512_permutexvar_ps(is, sd[i][j]);
                    if (single) accp[p] = _mm512_fmadd_ps(f, s, accp[p]);
                    else acc[i][j] = _mm512_fmadd_ps(f, s, acc[i][j]);
                }
            }
        }
    }
    if (single) acc[0][0] = _mm512_add_ps(_mm512_add_ps(accp[0], accp[1]), _mm512_add_ps(accp[2], accp[3]));
    for (int i = 0; i < NW; i++)
        for (int j = 0; j < NX; j++) {
            __m256 m = macc[i][j];
            __m128 h = _mm_add_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            out[j * ldo + i] = _mm512_reduce_add_ps(acc[i][j]) - _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
        }
}

__attribute__((target(Z_TARGET))) static void tile(float *out, int64_t ldo, const void *w, size_t wrb, int nw,
                                                   const kq_act *a, int64_t x0, int nx, int64_t nb, kern_dtype dt) {
    if (nw == KQ_TILE && nx == KQ_TILE) {
        tile_fixed(out, ldo, w, wrb, a, x0, nb, dt, KQ_TILE, KQ_TILE);
        return;
    }
    /* decode (nx == 1) and partial tiles: one weight row at a time, one sequential stream per thread */
    for (int i = 0; i < nw; i++)
        for (int j = 0; j < nx; j++)
            tile_fixed(out + j * ldo + i, ldo, (const char *)w + (size_t)i * wrb, wrb, a, x0 + j, nb, dt, 1, 1);
}

static void tile_q4k(float *out, int64_t ldo, const void *w, size_t wrb, int nw, const kq_act *a, int64_t x0, int nx,
                     int64_t nb) {
    tile(out, ldo, w, wrb, nw, a, x0, nx, nb, KERN_Q4_K);
}
static void tile_q6k(float *out, int64_t ldo, const void *w, size_t wrb, int nw, const kq_act *a, int64_t x0, int nx,
                     int64_t nb) {
    tile(out, ldo, w, wrb, nw, a, x0, nx, nb, KERN_Q6_K);
}

kq_tile_fn kq_ktile_avx512vnni(kern_dtype dt) {
    return dt == KERN_Q4_K ? tile_q4k : dt == KERN_Q6_K ? tile_q6k : NULL;
}
#else
kq_tile_fn kq_ktile_avx512vnni(kern_dtype dt) { (void)dt; return NULL; }
#endif
