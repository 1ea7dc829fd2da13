/*
 * quant_kpair_avx512.h — two consecutive 32-blocks of a q4_K / q6_K row as 64 unsigned bytes in element order, the
 * operand vpdpbusd takes (q4_K: the nibble q, 0..15; q6_K: q + 32, 0..63; the layouts of kq_kblock_ints). Shared
 * by the tile kernel (quant_kdot_avx512.c) and the int8 GEMM's packer (quant_gemm_vnni.c); included inside their
 * target("avx512...") code.
 */
#ifndef MNEMO_QUANT_KPAIR_AVX512_H
#define MNEMO_QUANT_KPAIR_AVX512_H

#include <immintrin.h>

#include "quant.h"

/* 32-blocks 2p and 2p + 1 of super-block blk (p = 0..3), block 2p in the low 256 bits. */
__attribute__((target("avx512f,avx512bw"))) static inline __attribute__((always_inline)) __m512i
kq_pair_u8(const char *blk, kern_dtype dt, int p) {
    if (dt == KERN_Q4_K) { /* 32 bytes of qs: block 2p in the low nibbles, 2p + 1 in the high ones */
        __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * p)), m4 = _mm256_set1_epi8(15);
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    int h = p / 2, t = 2 * (p % 2); /* blocks t and t + 1 of half h: ql bytes 0-31 and 32-63, same nibble */
    __m512i l = _mm512_loadu_si512(blk + 64 * h);
    l = _mm512_and_si512(_mm512_srl_epi16(l, _mm_cvtsi32_si128(2 * t)), _mm512_set1_epi8(15)); /* t/2 * 4 = 2t */
    __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
    __m256i h0 = _mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * t)), h1 = _mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * t + 2));
    __m512i hb = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1), _mm512_set1_epi8(3));
    return _mm512_or_si512(l, _mm512_slli_epi16(hb, 4)); /* bytes <= 3 shifted by 4 stay in their byte */
}

#endif
