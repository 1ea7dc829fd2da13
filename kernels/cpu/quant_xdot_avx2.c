/*
 * quant_xdot_avx2.c — the AVX2 tile kernel for q4_1, q5_0, q5_1, q2_K, q3_K and q5_K weights against int8
 * activation blocks (quant_xdot_tile.h, with vpmaddubsw + vpmaddwd as the byte dot product). Compiled with a
 * target attribute; quant_matmul.c picks it at run time.
 */
#include "quant.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define XD_TARGET "avx2,fma,f16c"
#define XD_SUFFIX avx2
#define XD_DOT(acc, u, x) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (x)), _mm256_set1_epi16(1)))
#include "quant_xdot_tile.h"
#else
kq_tile_fn kq_xtile_avx2(kern_dtype dt) { (void)dt; return NULL; }
#endif
