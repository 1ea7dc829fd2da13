/*
 * cuda_attention.cu — causal grouped-query attention over a KV cache, fp32 throughout:
 *   out[nq, hq, hd]; query i (absolute position q_pos0 + i) sees keys 0 .. q_pos0 + i of k, v[nkv, hkv, hd];
 *   query head h reads KV head h / (hq / hkv); softmax((q.k) * scale) in fp32, then the weighted sum of v.
 * The CPU reference (kernels/cpu/cpu_attention.c) computes the same with one exact softmax per row; the kernels
 * here use the online (running max) softmax, equal up to fp32 rounding.
 *
 * Two kernels, chosen by the number of query rows:
 *   - nq <= DEC_MAX_Q (decode, short batched steps): split-KV ("flash-decoding"). Grid (split, head, query):
 *     each block scores one chunk of keys (a warp per key, lanes over head_dim, 16-byte loads), takes the chunk's
 *     max and exp-sum, accumulates p.v, and writes (o, m, l) partials; decode_combine_kernel merges the splits
 *     with their max. The chunk size is chosen so that the grid fills the device ~4 times over even for one
 *     query and few heads, which is what makes decode at long context run at memory bandwidth: every K/V byte
 *     of the visible prefix is read exactly once per query row.
 *   - nq > DEC_MAX_Q (prefill): flash-attention-style. Grid (head, query tile of 64 rows), 256 threads as a
 *     16x16 grid. The Q tile stays in shared memory; K/V tiles of 64 keys (32 for head_dim > 128) stream through
 *     shared memory; S = Q.K^T is register-tiled (each thread 4 rows x BK/16 keys, float4 shared loads), the
 *     online softmax keeps (max, sum) per row in registers, P goes through shared memory (transposed, aliasing
 *     the K tile once S is done) and O += P.V is register-tiled as well (4 rows x head_dim/16 columns). Causal
 *     tiles past the last row's position are skipped, and the last query tiles (the heaviest) launch first.
 *     Rows are padded with 4 floats so float4 accesses of a quarter-warp fall in distinct banks.
 *     head_dim is padded to a compiled size HDP in {64, 128, 256} (100 runs as 128, columns past hd are zeros
 *     and the dot-product loop stops at hd rounded up to 4).
 *   This is a SIMT fp32 kernel: exact to the CPU reference's precision, not a tensor-core one. A bf16 tensor-core
 *   variant (mma/wgmma) would be several times faster at long prefill but would round q and k; it is the next
 *   step once the fp32 path is validated on hardware (see tests/bench/RESULTS.md).
 * Limits: head_dim <= 256 (KERN_ESHAPE otherwise). When the device cannot give the prefill kernel its shared
 * memory, the split-KV kernel takes every shape (slower, same result).
 * Training: with lse non-NULL each row's log-sum-exp m + log(l) is written from the running max m and sum l
 * both kernels keep anyway (the combine kernel for split-KV); the opt-in tensor-core prefill does not write it,
 * so a call with lse takes the SIMT kernel. The backward twin is in cuda_attention_backward.cu.
 */
#include <math.h>
#include <stdio.h>

#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

#define DEC_MAX_Q 8     /* query rows at or below which the split-KV kernel runs */
#define DEC_THREADS 128 /* 4 warps */
#define DEC_WARPS (DEC_THREADS / 32)
#define DEC_MIN_CHUNK 64
#define DEC_MAX_CHUNK 8192 /* scores of one chunk live in shared memory: 32 KB */
#define DEC_MAX_SPLITS 1024
#define FA_BQ 64
#define FA_THREADS 256
#define MAX_HD 256

/* ---- split-KV decode */

/* Partials layout: part[((qi * hq + h) * nsplit + split) * (hd + 2) + ...] = o[0..hd) (unnormalised, relative
 * to the chunk max), then m (chunk max, -inf when the chunk is empty), then l (sum of exp(s - m)).
 * VPL: float4s per lane (hd <= 128 * VPL). VEC: hd % 4 == 0 and 16-byte aligned q, k, v; otherwise lane l owns
 * the scalar dims l, l + 32, ... (4 * VPL of them). In both layouts lane-slot e of lane l is dim d(l, e) and the
 * cross-warp buffer is indexed by d. */
template <int VPL, bool VEC> __device__ __forceinline__ int dec_dim(int lane, int e) {
    return VEC ? ((e >> 2) * 32 + lane) * 4 + (e & 3) : lane + 32 * e;
}

template <int VPL, bool VEC>
__device__ __forceinline__ void dec_load(float *r, const float *p, int lane, int hd) {
    if (VEC) {
#pragma unroll
        for (int t = 0; t < VPL; t++) {
            int d = (t * 32 + lane) * 4;
            float4 x = d < hd ? *reinterpret_cast<const float4 *>(p + d) : make_float4(0.f, 0.f, 0.f, 0.f);
            r[4 * t] = x.x; r[4 * t + 1] = x.y; r[4 * t + 2] = x.z; r[4 * t + 3] = x.w;
        }
    } else {
#pragma unroll
        for (int e = 0; e < 4 * VPL; e++) {
            int d = lane + 32 * e;
            r[e] = d < hd ? p[d] : 0.f;
        }
    }
}

template <int VPL, bool VEC>
__global__ void __launch_bounds__(DEC_THREADS)
    decode_partial_kernel(float *__restrict__ part, const float *__restrict__ q, const float *__restrict__ k,
                          const float *__restrict__ v, int q_pos0, int hq, int hkv, int hd, float scale, int chunk,
                          int nsplit) {
    constexpr int E = 4 * VPL;
    MN_DYN_SMEM(float, smem);
    float *sc = smem;                      /* [chunk] scores, then probabilities */
    float *ored = smem + chunk;            /* [DEC_WARPS][128 * VPL] per-warp partial outputs */
    __shared__ float red[32];
    const int split = blockIdx.x, h = blockIdx.y, qi = blockIdx.z;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kvh = h / (hq / hkv);
    const int64_t ks = (int64_t)hkv * hd;
    const int limit = q_pos0 + qi + 1; /* keys this row sees */
    const int k0 = split * chunk, k1 = min(k0 + chunk, limit);
    float *P = part + (((int64_t)qi * hq + h) * nsplit + split) * (hd + 2);
    if (k0 >= k1) { /* nothing visible in this chunk (later rows of a causal step see more keys) */
        for (int d = threadIdx.x; d < hd; d += DEC_THREADS) P[d] = 0.f;
        if (threadIdx.x == 0) {
            P[hd] = -INFINITY;
            P[hd + 1] = 0.f;
        }
        return;
    }
    float qr[E];
    dec_load<VPL, VEC>(qr, q + ((int64_t)qi * hq + h) * hd, lane, hd);
    const float *kb = k + (int64_t)kvh * hd, *vb = v + (int64_t)kvh * hd;

    /* scores: warp per key, two keys in flight per warp */
    int j = k0 + warp;
    for (; j + DEC_WARPS < k1; j += 2 * DEC_WARPS) {
        float ka[E], kb2[E];
        dec_load<VPL, VEC>(ka, kb + (int64_t)j * ks, lane, hd);
        dec_load<VPL, VEC>(kb2, kb + (int64_t)(j + DEC_WARPS) * ks, lane, hd);
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int e = 0; e < E; e++) {
            s0 = fmaf(qr[e], ka[e], s0);
            s1 = fmaf(qr[e], kb2[e], s1);
        }
        s0 = mn_warp_sum(s0);
        s1 = mn_warp_sum(s1);
        if (lane == 0) {
            sc[j - k0] = s0 * scale;
            sc[j + DEC_WARPS - k0] = s1 * scale;
        }
    }
    if (j < k1) {
        float ka[E];
        dec_load<VPL, VEC>(ka, kb + (int64_t)j * ks, lane, hd);
        float s0 = 0.f;
#pragma unroll
        for (int e = 0; e < E; e++) s0 = fmaf(qr[e], ka[e], s0);
        s0 = mn_warp_sum(s0);
        if (lane == 0) sc[j - k0] = s0 * scale;
    }
    __syncthreads();

    /* chunk max and exp-sum */
    const int n = k1 - k0;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < n; i += DEC_THREADS) mx = fmaxf(mx, sc[i]);
    mx = mn_block_max(mx, red);
    float sum = 0.f;
    for (int i = threadIdx.x; i < n; i += DEC_THREADS) {
        float p = expf(sc[i] - mx);
        sc[i] = p;
        sum += p;
    }
    sum = mn_block_sum(sum, red); /* its barriers also publish the sc writes above */

    /* o = sum_j p_j v_j: warp per key, lanes over dims */
    float acc[E];
#pragma unroll
    for (int e = 0; e < E; e++) acc[e] = 0.f;
    int jj = k0 + warp;
    for (; jj + DEC_WARPS < k1; jj += 2 * DEC_WARPS) { /* two value rows in flight per warp, as for the keys */
        float p0 = sc[jj - k0], p1 = sc[jj + DEC_WARPS - k0], va[E], vb2[E];
        dec_load<VPL, VEC>(va, vb + (int64_t)jj * ks, lane, hd);
        dec_load<VPL, VEC>(vb2, vb + (int64_t)(jj + DEC_WARPS) * ks, lane, hd);
#pragma unroll
        for (int e = 0; e < E; e++) acc[e] = fmaf(p1, vb2[e], fmaf(p0, va[e], acc[e]));
    }
    if (jj < k1) {
        float p = sc[jj - k0], vr[E];
        dec_load<VPL, VEC>(vr, vb + (int64_t)jj * ks, lane, hd);
#pragma unroll
        for (int e = 0; e < E; e++) acc[e] = fmaf(p, vr[e], acc[e]);
    }
#pragma unroll
    for (int e = 0; e < E; e++) ored[warp * (128 * VPL) + dec_dim<VPL, VEC>(lane, e)] = acc[e];
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += DEC_THREADS) {
        float o = 0.f;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) o += ored[w * (128 * VPL) + d];
        P[d] = o;
    }
    if (threadIdx.x == 0) {
        P[hd] = mx;
        P[hd + 1] = sum;
    }
}

/* out[qi, h, :] = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s over the splits s (M = max m_s; finite: the
 * split holding key 0 saw it). Shared by decode attention and attention_mem (cuda_split_combine). */
__global__ void decode_combine_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ part,
                                      int hq, int hd, int nsplit) {
    MN_DYN_SMEM(float, wgt); /* [nsplit] */
    __shared__ float red[32];
    const int h = blockIdx.x, qi = blockIdx.y;
    const float *P = part + ((int64_t)qi * hq + h) * nsplit * (hd + 2);
    float M = -INFINITY;
    for (int s = threadIdx.x; s < nsplit; s += blockDim.x) M = fmaxf(M, P[(int64_t)s * (hd + 2) + hd]);
    M = mn_block_max(M, red);
    for (int s = nsplit + threadIdx.x; s < ((nsplit + 3) & ~3) + 4; s += blockDim.x) wgt[s] = 0.f; /* mn_combine_smem */
    float L = 0.f;
    for (int s = threadIdx.x; s < nsplit; s += blockDim.x) {
        float m = P[(int64_t)s * (hd + 2) + hd];
        float wv = m == -INFINITY ? 0.f : expf(m - M);
        wgt[s] = wv;
        L += wv * P[(int64_t)s * (hd + 2) + hd + 1];
    }
    L = mn_block_sum(L, red); /* barriers publish wgt */
    if (lse && threadIdx.x == 0) lse[(int64_t)qi * hq + h] = M + logf(L);
    float inv = 1.0f / L;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.f;
        for (int s = 0; s < nsplit; s++) o = fmaf(wgt[s], P[(int64_t)s * (hd + 2) + d], o);
        out[((int64_t)qi * hq + h) * hd + d] = o * inv;
    }
}

int cuda_split_combine(kern_ctx *kc, float *out, float *lse, const float *part, int64_t nq, int64_t hq, int64_t hd,
                       int nsplit, const char *what) {
    MN_LAUNCH(decode_combine_kernel, dim3((unsigned)hq, (unsigned)nq), 128, mn_combine_smem(nsplit),
              kc->stream)(out, lse, part, (int)hq, (int)hd, nsplit);
    return kc_check_launch(what);
}

/* ---- flash prefill */

template <int HDP> struct fa_cfg {
    static constexpr int BK = HDP > 128 ? 32 : 64; /* keys per tile */
    static constexpr int LD = HDP + 4;             /* Q/K/V smem row stride (floats) */
    static constexpr int NC = BK / 16;             /* S columns per thread */
    static constexpr int NV = HDP / 64;            /* O float4 chunks per thread and row */
    static constexpr int PLD = FA_BQ + 4;          /* P^T row stride */
    static constexpr size_t SMEM = (size_t)(FA_BQ + 2 * BK) * LD * sizeof(float);
};

template <int HDP>
__global__ void __launch_bounds__(FA_THREADS)
    flash_prefill_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ q,
                         const float *__restrict__ k, const float *__restrict__ v, int nq, int nkv, int q_pos0, int hq,
                         int hkv, int hd, float scale) {
    typedef fa_cfg<HDP> C;
    MN_DYN_SMEM(float, smem);
    float *Qs = smem;                /* [FA_BQ][LD] */
    float *Ks = Qs + FA_BQ * C::LD;  /* [BK][LD]; P^T [BK][PLD] reuses it once S is computed */
    float *Vs = Ks + C::BK * C::LD;  /* [BK][LD] */
    float *Pt = Ks;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int h = blockIdx.x, qt = gridDim.y - 1 - blockIdx.y; /* heaviest (last) query tiles first */
    const int kvh = h / (hq / hkv);
    const int q0 = qt * FA_BQ;
    const int64_t qs = (int64_t)hq * hd, ks = (int64_t)hkv * hd;
    const int hd4 = (hd + 3) & ~3;

    for (int idx = tid; idx < FA_BQ * HDP; idx += FA_THREADS) { /* Q tile, zero-padded */
        int r = idx / HDP, d = idx % HDP;
        Qs[r * C::LD + d] = (q0 + r < nq && d < hd) ? q[(int64_t)(q0 + r) * qs + (int64_t)h * hd + d] : 0.f;
    }
    float o[4][C::NV][4], m_i[4], l_i[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m_i[i] = -INFINITY;
        l_i[i] = 0.f;
#pragma unroll
        for (int t = 0; t < C::NV; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[i][t][e] = 0.f;
    }
    const int q_last = min(q0 + FA_BQ, nq) - 1;
    const int kv_end = min(nkv, q_pos0 + q_last + 1); /* keys any row of this tile sees */

    for (int kt = 0; kt < kv_end; kt += C::BK) {
        __syncthreads(); /* the previous tile's P.V is done with Vs and Pt */
        for (int idx = tid; idx < C::BK * HDP; idx += FA_THREADS) {
            int r = idx / HDP, d = idx % HDP, key = kt + r;
            bool ok = key < kv_end && d < hd;
            int64_t off = (int64_t)key * ks + (int64_t)kvh * hd + d;
            Ks[r * C::LD + d] = ok ? k[off] : 0.f;
            Vs[r * C::LD + d] = ok ? v[off] : 0.f;
        }
        __syncthreads();

        /* S[4][NC]: rows ty*4 + i, keys tx + 16*j */
        float s[4][C::NC];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < C::NC; j++) s[i][j] = 0.f;
        for (int d = 0; d < hd4; d += 4) {
            float4 qv[4], kv[C::NC];
#pragma unroll
            for (int i = 0; i < 4; i++) qv[i] = *reinterpret_cast<const float4 *>(&Qs[(ty * 4 + i) * C::LD + d]);
#pragma unroll
            for (int j = 0; j < C::NC; j++) kv[j] = *reinterpret_cast<const float4 *>(&Ks[(tx + 16 * j) * C::LD + d]);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < C::NC; j++) {
                    float a = s[i][j];
                    a = fmaf(qv[i].x, kv[j].x, a);
                    a = fmaf(qv[i].y, kv[j].y, a);
                    a = fmaf(qv[i].z, kv[j].z, a);
                    a = fmaf(qv[i].w, kv[j].w, a);
                    s[i][j] = a;
                }
        }

        /* mask, scale, online softmax; the 16 lanes of one ty share rows (xor 1..8 stays in the half-warp) */
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int qpos = q_pos0 + q0 + ty * 4 + i;
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < C::NC; j++) {
                int key = kt + tx + 16 * j;
                s[i][j] = (key <= qpos && key < kv_end) ? s[i][j] * scale : -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
#pragma unroll
            for (int off = 1; off < 16; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float m_new = fmaxf(m_i[i], mx);
            const float m_use = m_new == -INFINITY ? 0.f : m_new; /* a row with nothing visible yet */
            const float alpha = expf(m_i[i] - m_use);
            float rs = 0.f;
#pragma unroll
            for (int j = 0; j < C::NC; j++) {
                s[i][j] = expf(s[i][j] - m_use);
                rs += s[i][j];
            }
#pragma unroll
            for (int off = 1; off < 16; off <<= 1) rs += __shfl_xor_sync(0xffffffffu, rs, off);
            l_i[i] = l_i[i] * alpha + rs;
            m_i[i] = m_new;
#pragma unroll
            for (int t = 0; t < C::NV; t++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[i][t][e] *= alpha;
        }
        __syncthreads(); /* every thread is done reading Ks: P^T may overwrite it */
#pragma unroll
        for (int j = 0; j < C::NC; j++)
            *reinterpret_cast<float4 *>(&Pt[(tx + 16 * j) * C::PLD + ty * 4]) =
                make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
        __syncthreads();

        /* O[4 rows][NV float4] += P . V over the tile's keys */
        const int kn = min(C::BK, kv_end - kt);
        for (int c = 0; c < kn; c++) {
            const float4 p = *reinterpret_cast<const float4 *>(&Pt[c * C::PLD + ty * 4]);
            const float pr[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
            for (int t = 0; t < C::NV; t++) {
                const int ch = tx + 16 * t;
                if (ch * 4 < hd4) {
                    const float4 vv = *reinterpret_cast<const float4 *>(&Vs[c * C::LD + ch * 4]);
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        o[i][t][0] = fmaf(pr[i], vv.x, o[i][t][0]);
                        o[i][t][1] = fmaf(pr[i], vv.y, o[i][t][1]);
                        o[i][t][2] = fmaf(pr[i], vv.z, o[i][t][2]);
                        o[i][t][3] = fmaf(pr[i], vv.w, o[i][t][3]);
                    }
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = q0 + ty * 4 + i;
        if (r >= nq) continue;
        const float inv = 1.0f / l_i[i];
        if (lse && tx == 0) lse[(int64_t)r * hq + h] = m_i[i] + logf(l_i[i]);
        float *orow = out + (int64_t)r * qs + (int64_t)h * hd;
#pragma unroll
        for (int t = 0; t < C::NV; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int d = (tx + 16 * t) * 4 + e;
                if (d < hd) orow[d] = o[i][t][e] * inv;
            }
    }
}

/* ---- launchers */

/* Split-KV blocks aimed at per SM (q rows x heads x splits): enough 4-warp blocks that the key and value loads
 * in flight cover the memory latency. 8 measured best on an H100 (2026-11-22, 32 heads x 100: 30 us at 2K keys,
 * 162 us at 16K, vs 34 / 200 us with 4; 16 and 32 were no better). The setting cuda.dec_blocks_per_sm overrides it
 * (tuning with test_ops --perf). */
static int dec_blocks_per_sm(const kern_ctx *kc) { return kc->dec_blocks_per_sm ? kc->dec_blocks_per_sm : 8; }

static int attention_decode(kern_ctx *kc, float *out, float *lse, const float *q, const float *k, const float *v,
                            int nq, int q_pos0, int hq, int hkv, int hd, float scale) {
    const int64_t max_lim = (int64_t)q_pos0 + nq; /* keys the last row sees */
    const int64_t base = (int64_t)hq * nq;
    int64_t want = mn_cdiv((int64_t)kc->sm_count * dec_blocks_per_sm(kc), base);
    int64_t chunk = mn_cdiv(max_lim, want < 1 ? 1 : want);
    chunk = mn_cdiv(chunk, DEC_MIN_CHUNK) * DEC_MIN_CHUNK;
    if (chunk < mn_cdiv(max_lim, DEC_MAX_SPLITS)) chunk = mn_cdiv(mn_cdiv(max_lim, DEC_MAX_SPLITS), 32) * 32;
    if (chunk > DEC_MAX_CHUNK) return KERN_ESHAPE; /* more than 8M visible keys */
    const int nsplit = (int)mn_cdiv(max_lim, chunk);
    const int vpl = hd <= 128 ? 1 : 2;
    const bool vec = hd % 4 == 0 && ((uintptr_t)q & 15) == 0 && ((uintptr_t)k & 15) == 0 && ((uintptr_t)v & 15) == 0;
    const size_t part_floats = (size_t)base * (size_t)nsplit * (size_t)(hd + 2);
    float *part = (float *)kc_scratch(kc, part_floats * sizeof(float));
    if (!part) return KERN_ENOMEM;
    void (*kp)(float *, const float *, const float *, const float *, int, int, int, int, float, int, int) =
        vpl == 1 ? (vec ? decode_partial_kernel<1, true> : decode_partial_kernel<1, false>)
                 : (vec ? decode_partial_kernel<2, true> : decode_partial_kernel<2, false>);
    size_t smem = ((size_t)chunk + (size_t)DEC_WARPS * 128 * vpl) * sizeof(float);
    if (smem > 48 * 1024) {
        if (smem > kc->smem_optin) return KERN_ESHAPE;
        if (cudaFuncSetAttribute(kp, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
            return kc_check_launch("attention (decode smem attribute)");
    }
    dim3 grid((unsigned)nsplit, (unsigned)hq, (unsigned)nq);
    MN_LAUNCH(kp, grid, DEC_THREADS, smem, kc->stream)(part, q, k, v, q_pos0, hq, hkv, hd, scale, (int)chunk, nsplit);
    int rc = kc_check_launch("attention (decode partials)");
    if (rc != KERN_OK) return rc;
    return cuda_split_combine(kc, out, lse, part, nq, hq, hd, nsplit, "attention (decode combine)");
}

typedef void (*fa_fn)(float *, float *, const float *, const float *, const float *, int, int, int, int, int, int,
                      float);

/* The prefill kernel for HDP, with its shared-memory limit raised once; NULL when the device cannot give it. */
template <int HDP> static fa_fn prefill_kernel(const kern_ctx *kc, size_t *smem) {
    static int state = 0; /* 0 unknown, 1 ready, -1 impossible (per process: one device) */
    *smem = fa_cfg<HDP>::SMEM;
    if (state == 0) {
        if (fa_cfg<HDP>::SMEM > kc->smem_optin) {
            state = -1;
        } else {
            cudaError_t e = cudaFuncSetAttribute(flash_prefill_kernel<HDP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)fa_cfg<HDP>::SMEM);
            state = e == cudaSuccess ? 1 : -1;
            if (e != cudaSuccess) cudaGetLastError();
        }
    }
    return state == 1 ? flash_prefill_kernel<HDP> : NULL;
}

/* Prefill runs the fp32 SIMT kernel below unless the setting cuda.attn selects a tensor-core one: tc
 * (cuda_attention_tc.cu, TF32 wmma: correct, but measured slower on an H100, 2026-11-22, 32 heads x 100, 16K keys:
 * SIMT 18.3 TFLOP/s, TF32 wmma 12.3 in SPLIT / 16.6 in FAST) or mma (cuda_attention_mma.cu, bf16 mma.sync with
 * FlashAttention-2's register layout; checked on the emulator, not yet measured on a GPU). Tests run all three. */
enum prefill_kernel_kind { PREFILL_SIMT, PREFILL_TC, PREFILL_MMA };
static enum prefill_kernel_kind prefill_kind(const kern_ctx *kc) {
    return kc->attn == CUDA_ATTN_TC ? PREFILL_TC : kc->attn == CUDA_ATTN_MMA ? PREFILL_MMA : PREFILL_SIMT;
}

/* The SIMT flash kernel; KERN_EUNSUPPORTED when the device cannot give its shared memory or the grid is too tall.
 * Query i sees keys j <= q_pos0 + i, j < nkv (the kernel clips at nkv: attention_cross passes q_pos0 = nkv - 1). */
static int flash_prefill(kern_ctx *kc, float *out, float *lse, const float *q, const float *k, const float *v,
                         int64_t nq, int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv, int64_t hd, float scale) {
    size_t smem = 0;
    fa_fn f = hd <= 64 ? prefill_kernel<64>(kc, &smem) : hd <= 128 ? prefill_kernel<128>(kc, &smem)
                                                                     : prefill_kernel<256>(kc, &smem);
    const int64_t tiles = mn_cdiv(nq, FA_BQ);
    if (!f || tiles > 65535) return KERN_EUNSUPPORTED;
    MN_LAUNCH(f, dim3((unsigned)hq, (unsigned)tiles), FA_THREADS, smem, kc->stream)(
        out, lse, q, k, v, (int)nq, (int)nkv, (int)q_pos0, (int)hq, (int)hkv, (int)hd, scale);
    return kc_check_launch("attention (flash prefill)");
}

int kern_cuda_attention(kern_ctx *kc, float *out, float *lse, const float *q, const float *k, const float *v,
                        int64_t nq, int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv, int64_t hd, float scale) {
    if (!kc_ok(kc) || nq < 0 || hq <= 0 || hkv <= 0 || hd <= 0 || hq % hkv != 0 || q_pos0 < 0 || q_pos0 + nq > nkv)
        return KERN_ESHAPE;
    if (hd > MAX_HD || nkv > INT32_MAX || hq > 65535) return KERN_ESHAPE;
    if (nq == 0) return KERN_OK;
    if (nq > DEC_MAX_Q) {
        const enum prefill_kernel_kind kind = prefill_kind(kc);
        if (!lse && kind == PREFILL_TC &&
            cuda_attention_prefill_tc(kc, out, q, k, v, (int)nq, (int)nkv, (int)q_pos0, (int)hq, (int)hkv, (int)hd,
                                      scale) == KERN_OK)
            return KERN_OK;
        if (kind == PREFILL_MMA && cuda_attention_prefill_mma(kc, out, lse, q, k, v, (int)nq, (int)nkv, (int)q_pos0,
                                                              (int)hq, (int)hkv, (int)hd, scale) == KERN_OK)
            return KERN_OK;
        const int rc = flash_prefill(kc, out, lse, q, k, v, nq, nkv, q_pos0, hq, hkv, hd, scale);
        if (rc != KERN_EUNSUPPORTED) return rc;
        if (nq > 65535) return KERN_ESHAPE; /* decode grid z */
    }
    return attention_decode(kc, out, lse, q, k, v, (int)nq, (int)q_pos0, (int)hq, (int)hkv, (int)hd, scale);
}

int kern_cuda_attention_cross(kern_ctx *kc, float *out, float *lse, const float *q, const float *k, const float *v,
                              int64_t nq, int64_t nkv, int64_t hq, int64_t hkv, int64_t hd, float scale) {
    if (!kc_ok(kc) || nq < 0 || nkv < 1 || hq <= 0 || hkv <= 0 || hd <= 0 || hq % hkv != 0) return KERN_ESHAPE;
    if (hd > MAX_HD || nkv > INT32_MAX / 2 || nq > INT32_MAX / 2 || hq > 65535) return KERN_ESHAPE;
    if (nq == 0) return KERN_OK;
    return flash_prefill(kc, out, lse, q, k, v, nq, nkv, nkv - 1, hq, hkv, hd, scale);
}

/* One thread per (row, head): the two softmaxes' weights, then the row's hd outputs. */
__global__ void merge_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ out2,
                             const float *__restrict__ lse2, int64_t rows, int hd) {
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float a = lse[r], b = lse2[r], m = fmaxf(a, b);
    if (m == -INFINITY) return;
    const float wa = expf(a - m), wb = expf(b - m), sum = wa + wb, ca = wa / sum, cb = wb / sum;
    float *o = out + r * hd;
    const float *o2 = out2 + r * hd;
    for (int d = 0; d < hd; d++) o[d] = ca * o[d] + cb * o2[d];
    lse[r] = m + logf(sum);
}

int kern_cuda_attention_merge(kern_ctx *kc, float *out, float *lse, const float *out2, const float *lse2, int64_t n,
                              int64_t hq, int64_t hd) {
    if (!kc_ok(kc) || n < 0 || hq <= 0 || hd <= 0 || hd > INT32_MAX) return KERN_ESHAPE;
    const int64_t rows = n * hq;
    if (rows == 0) return KERN_OK;
    MN_LAUNCH(merge_kernel, (unsigned)mn_cdiv(rows, 128), 128, 0, kc->stream)(out, lse, out2, lse2, rows, (int)hd);
    return kc_check_launch("attention_merge");
}
