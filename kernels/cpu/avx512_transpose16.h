/*
 * avx512_transpose16.h — a 16 x 16 dword transpose in AVX-512 registers, shared by the quantized panel packers
 * (quant_panel.c, quant_gemm_vnni.c). Needs avx512f only, so it inlines into callers built for any superset of it.
 */
#ifndef MNEMO_AVX512_TRANSPOSE16_H
#define MNEMO_AVX512_TRANSPOSE16_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* r[i][j] -> r[j][i]: 32-bit then 64-bit unpacks (4 x 4 transposes inside each 128-bit lane, rows in groups of
 * four), then two rounds of lane shuffles gather lane L of the four groups. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) { /* u[4g + e], lane L: element 4L + e of rows 4g .. 4g + 3 */
        u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    for (int e = 0; e < 4; e++) {
        __m512i ab_lo = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x44), ab_hi = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xEE);
        __m512i cd_lo = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x44);
        __m512i cd_hi = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xEE);
        r[0 + e] = _mm512_shuffle_i32x4(ab_lo, cd_lo, 0x88);
        r[4 + e] = _mm512_shuffle_i32x4(ab_lo, cd_lo, 0xDD);
        r[8 + e] = _mm512_shuffle_i32x4(ab_hi, cd_hi, 0x88);
        r[12 + e] = _mm512_shuffle_i32x4(ab_hi, cd_hi, 0xDD);
    }
}
#endif

#endif
