/*
 * cpu_attn_tiles.h — the tile primitives of the CPU's blocked (flash-style) attention, one set per instruction set
 * (cpu_attn_tiles_avx512.c, cpu_attn_tiles_avx2.c, cpu_attn_tiles_scalar.c), chosen at run time; the drivers
 * (cpu_attention.c, cpu_attention_backward.c) hold the blocking, the masks and the threads, and never branch on
 * the instruction set.
 *
 * Every score tile is ATT_BK = 64 columns wide (keys in the forward and dq passes, queries in the dk/dv pass) and
 * at most ATT_BK rows tall, row-major with a row stride of ATT_BK. The right-hand operand of a score tile is
 * packed k-major, bt[d * ATT_BK + c] (one 64-byte load = 16 columns of one d), zeros in columns that do not exist.
 *
 * Vector exp (att_exp in each file): Cody-Waite reduction x = n ln2 + r (FMA), Cephes' degree-7 polynomial for
 * e^r on |r| <= ln2/2, then 2^n built in the exponent field. Measured against fp64 exp rounded to fp32 over
 * [-87.3, 88] by test_attention_tiles: at most 2 ulp. Inputs below -87.33 (where expf turns subnormal, < 1.2e-38)
 * give exactly 0, -inf included: every softmax row holds a term of 1, next to which such terms are below fp32
 * resolution. Inputs above 88 are taken as 88 (softmax arguments are <= 0 up to rounding). NaN stays NaN.
 */
#ifndef MNEMO_CPU_ATTN_TILES_H
#define MNEMO_CPU_ATTN_TILES_H

#include <stdint.h>

#include "kernels_cpu_paths.h"

#define ATT_BK 64 /* columns of a score tile; keys per key block and queries per query block */

/* The exp's constants, shared by every path so they cannot drift apart. */
#define ATT_EXP_LO (-87.3365f) /* below: 0 (ln FLT_MIN = -87.33654) */
#define ATT_EXP_HI 88.0f       /* above: taken as 88 (2^127 is the largest exponent built) */
#define ATT_LOG2E 1.44269504088896341f
#define ATT_LN2_HI 0.693359375f        /* ln 2 = HI + LO, HI with few mantissa bits so n * HI is exact */
#define ATT_LN2_LO (-2.12194440e-4f)
#define ATT_P0 1.9875691500e-4f /* Cephes expf: e^r ~ 1 + r + r^2 (P5 + r (P4 + ... r P0)) */
#define ATT_P1 1.3981999507e-3f
#define ATT_P2 8.3334519073e-3f
#define ATT_P3 4.1665795894e-2f
#define ATT_P4 1.6666665459e-1f
#define ATT_P5 5.0000001201e-1f

typedef struct {
    /* s[r * ATT_BK + c] = sum_d a[r * lda + d] * bt[d * ATT_BK + c], r < rows <= ATT_BK, all ATT_BK columns. */
    void (*scores)(float *s, const float *a, int64_t lda, int rows, const float *bt, int64_t hd);
    /* o[r * ldo + d] = c[r] * o[r * ldo + d] + sum_{j < n} p[r * ATT_BK + j] * v[j * ldv + d] (c NULL: 1), d < hd. */
    void (*pv)(float *o, int64_t ldo, const float *c, const float *p, int rows, int n, const float *v, int64_t ldv,
               int64_t hd);
    /* Online softmax step on one score row: t = scale * s[c] for the nv visible columns c < nv (the rest are masked);
     * m' = max(*m, max t); s[c] = exp(t - m') (0 where masked); *l = *l * exp(*m - m') + sum s; *m = m'. Returns
     * the factor exp(*m - m') by which the row's accumulated output must be rescaled (1 when nothing is visible). */
    float (*fold)(float *s, int nv, float scale, float *m, float *l);
    /* Backward on one row of ATT_BK columns, visible where lo <= c < hi: p = exp(scale * s[c] - lse_c), s[c] = p,
     * dp[c] = scale * p * (dp[c] - D_c) (both 0 where masked). lse_c, D_c: lse[0], D[0] (stride 0: one query per
     * row) or lse[c], D[c] (stride 1: one query per column; ATT_BK readable entries). */
    void (*p_ds)(float *s, float *dp, float scale, const float *lse, const float *D, int stride, int lo, int hi);
    /* y[i] = exp(x[i]) as above (y may be x). */
    void (*vexp)(float *y, const float *x, int64_t n);
} att_tiles;

const att_tiles *att_tiles_scalar(void);
const att_tiles *att_tiles_avx2(void);   /* NULL when not compiled in */
const att_tiles *att_tiles_avx512(void); /* NULL when not compiled in */
/* Packs x[n, heads, hd] (rows heads * hd apart) per head into panels of ATT_BK rows, k-major:
 * pt[g][b][d][c] = x[b * ATT_BK + c, g, d], zeros past row n; ceil(n / ATT_BK) panels of hd * ATT_BK floats per
 * head. nt threads. */
void att_pack(float *pt, const float *x, int64_t n, int64_t heads, int64_t hd, int nt);

/* dst[g][j][:] = x[j, g, :] for j < n: each head's rows contiguous (hd floats apart), so a block of rows spans a few
 * pages instead of one page per row. nt threads. */
void att_gather_heads(float *dst, const float *x, int64_t n, int64_t heads, int64_t hd, int nt);

/* Queries from which attention and attention_mem take the tiles (kern_cpu_attn_tile_min). */
int att_tile_min_q(void);

/* The set in force (kern_cpu_attn_path; the best this CPU runs by default). */
const att_tiles *att_tiles_get(void);

#endif
