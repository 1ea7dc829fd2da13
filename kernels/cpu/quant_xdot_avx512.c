/*
 * quant_xdot_avx512.c — the AVX-512 VNNI tile kernel for q4_1, q5_0, q5_1, q2_K, q3_K and q5_K weights against
 * int8 activation blocks (quant_xdot_tile.h, with one 256-bit vpdpbusd as the byte dot product, accumulating
 * straight onto the offset's correction). Compiled with a target attribute; quant_matmul.c calls it only when the
 * CPU has AVX512F/BW/VL/DQ + VNNI.
 */
#include "quant.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define XD_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#define XD_SUFFIX avx512vnni
#define XD_DOT(acc, u, x) _mm256_dpbusd_epi32((acc), (u), (x))
#include "quant_xdot_tile.h"
#else
kq_tile_fn kq_xtile_avx512vnni(kern_dtype dt) { (void)dt; return NULL; }
#endif
