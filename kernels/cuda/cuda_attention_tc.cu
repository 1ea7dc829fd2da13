/*
 * cuda_attention_tc.cu — causal flash-attention prefill on the tensor cores: the contract of the SIMT kernel in
 * cuda_attention.cu (fp32 q, k, v and out; GQA; rows at q_pos0 + i see keys 0 .. q_pos0 + i), with Q.K^T and P.V
 * as TF32 wmma products (m16n16k8) accumulating in fp32.
 *
 * Precision follows the context's GEMM mode: SPLIT (default) splits every operand a = hi + lo into TF32 parts and
 * sums lo*hi + hi*lo + hi*hi (3xTF32: ~fp32 accuracy, what the whole-model fixtures need); FAST keeps hi*hi only
 * (relative error ~2^-11 per operand).
 *
 * Layout: a block owns 64 query rows of one head, 4 warps x 16 rows, and walks key tiles of 32. A wmma fragment's
 * distribution over lanes is opaque, so everything row-wise (scale, causal mask, online softmax, rescaling O)
 * happens in shared memory: S goes through shared memory, and O lives there, loaded as the accumulator of each
 * P.V product and stored back. That also keeps the kernel runnable on the CPU emulator (tests/cuda/emu).
 *
 * Status: opt-in (kernel setting cuda.attn=tc). Correct on an H100 (test_ops, memcheck, racecheck, the fixtures) but slower
 * than the SIMT kernel there: 12.3 TFLOP/s in SPLIT and 16.6 in FAST vs 18.3 (32 heads x 100, 4096 rows over 16K
 * keys). The shared-memory round trips of S and O, the per-fragment TF32 splits and 4 warps per block cost more
 * than the products; next: Q fragments split once and kept in registers, K/V split once per tile in shared memory,
 * 64-key tiles, and the accumulator rescaled in registers (mma.sync with a known layout instead of wmma).
 */
#include <math.h>

#include "cuda_common.cuh"

#ifndef MNEMO_CUDA_EMU
#include <mma.h>
#endif

using namespace nvcuda;

#define TC_BQ 64      /* query rows per block */
#define TC_BK 32      /* keys per tile */
#define TC_WARPS 4    /* 16 query rows each */
#define TC_THREADS (TC_WARPS * 32)
#define TC_SLD (TC_BK + 4) /* S/P row stride (floats; a multiple of 4 as wmma needs, +4 against bank conflicts) */

typedef wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> frag_bt; /* K^T */
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> frag_b;  /* V */
typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> frag_c;

template <int HDP> struct tc_cfg {
    static constexpr int LD = HDP + 4; /* Q/K/V/O row stride in floats */
    static constexpr size_t SMEM =
        ((size_t)TC_BQ * LD * 2 + (size_t)TC_BK * LD * 2 + (size_t)TC_BQ * TC_SLD + 3 * TC_BQ) * sizeof(float);
};

/* f = tf32(x) (hi), or x - tf32(x) rounded to tf32 (lo) */
template <class F> __device__ __forceinline__ void to_tf32(F &f, bool lo) {
#pragma unroll
    for (int t = 0; t < f.num_elements; t++) {
        float hi = wmma::__float_to_tf32(f.x[t]);
        f.x[t] = lo ? wmma::__float_to_tf32(f.x[t] - hi) : hi;
    }
}

/* c += a . b over one k-step, in 1 or 3 TF32 products (a_src/b_src: loaded, unconverted fragments) */
template <class FB> __device__ __forceinline__ void mma_split(frag_c &c, const frag_a &a_src, const FB &b_src, bool split) {
    frag_a a_hi = a_src;
    FB b_hi = b_src;
    to_tf32(a_hi, false);
    to_tf32(b_hi, false);
    if (split) {
        frag_a a_lo = a_src;
        FB b_lo = b_src;
        to_tf32(a_lo, true);
        to_tf32(b_lo, true);
        wmma::mma_sync(c, a_lo, b_hi, c); /* small terms first */
        wmma::mma_sync(c, a_hi, b_lo, c);
    }
    wmma::mma_sync(c, a_hi, b_hi, c);
}

template <int HDP>
__global__ void __launch_bounds__(TC_THREADS)
    flash_tc_kernel(float *__restrict__ out, const float *__restrict__ q, const float *__restrict__ k,
                    const float *__restrict__ v, int nq, int nkv, int q_pos0, int hq, int hkv, int hd, float scale,
                    int split) {
    typedef tc_cfg<HDP> C;
    MN_DYN_SMEM(float, smem);
    float *Qs = smem;                  /* [BQ][LD] */
    float *Os = Qs + TC_BQ * C::LD;    /* [BQ][LD] unnormalised output */
    float *Ks = Os + TC_BQ * C::LD;    /* [BK][LD] */
    float *Vs = Ks + TC_BK * C::LD;    /* [BK][LD] */
    float *Ss = Vs + TC_BK * C::LD;    /* [BQ][SLD] scores, then probabilities */
    float *m_row = Ss + TC_BQ * TC_SLD; /* [BQ] running max */
    float *l_row = m_row + TC_BQ;       /* [BQ] running sum */
    float *a_row = l_row + TC_BQ;       /* [BQ] this tile's rescale factor */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int h = blockIdx.x, qt = gridDim.y - 1 - blockIdx.y; /* heaviest (last) query tiles first */
    const int kvh = h / (hq / hkv);
    const int q0 = qt * TC_BQ;
    const int64_t qs = (int64_t)hq * hd, ks = (int64_t)hkv * hd;

    for (int idx = tid; idx < TC_BQ * HDP; idx += TC_THREADS) { /* Q tile zero-padded; O = 0 */
        int r = idx / HDP, d = idx % HDP;
        Qs[r * C::LD + d] = (q0 + r < nq && d < hd) ? q[(int64_t)(q0 + r) * qs + (int64_t)h * hd + d] : 0.f;
        Os[r * C::LD + d] = 0.f;
    }
    for (int r = tid; r < TC_BQ; r += TC_THREADS) {
        m_row[r] = -INFINITY;
        l_row[r] = 0.f;
    }
    const int q_last = min(q0 + TC_BQ, nq) - 1;
    const int kv_end = min(nkv, q_pos0 + q_last + 1); /* keys any row of this tile sees */
    const int r0 = warp * 16;                         /* this warp's rows */
    float *Sw = Ss + r0 * TC_SLD;

    for (int kt = 0; kt < kv_end; kt += TC_BK) {
        __syncthreads(); /* previous tile's P.V done with Ks/Vs; first pass: Q, O, stats written */
        for (int idx = tid; idx < TC_BK * HDP; idx += TC_THREADS) {
            int r = idx / HDP, d = idx % HDP, key = kt + r;
            bool ok = key < kv_end && d < hd;
            int64_t off = (int64_t)key * ks + (int64_t)kvh * hd + d;
            Ks[r * C::LD + d] = ok ? k[off] : 0.f;
            Vs[r * C::LD + d] = ok ? v[off] : 0.f;
        }
        __syncthreads();

        /* S_w[16][BK] = Q_w . K^T */
#pragma unroll
        for (int nb = 0; nb < TC_BK / 16; nb++) {
            frag_c c;
            wmma::fill_fragment(c, 0.f);
#pragma unroll 2
            for (int kk = 0; kk < HDP; kk += 8) {
                frag_a a;
                frag_bt b;
                wmma::load_matrix_sync(a, Qs + r0 * C::LD + kk, C::LD);
                wmma::load_matrix_sync(b, Ks + nb * 16 * C::LD + kk, C::LD);
                mma_split(c, a, b, split);
            }
            wmma::store_matrix_sync(Sw + nb * 16, c, TC_SLD, wmma::mem_row_major);
        }
        __syncwarp();

        /* scale, mask, online softmax: two lanes per row, 16 keys each */
        {
            const int r = r0 + (lane >> 1), c0 = (lane & 1) * (TC_BK / 2);
            const int qpos = q_pos0 + q0 + r;
            float *srow = Ss + r * TC_SLD;
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < TC_BK / 2; c++) {
                int key = kt + c0 + c;
                float s = (key <= qpos && key < kv_end) ? srow[c0 + c] * scale : -INFINITY;
                srow[c0 + c] = s;
                mx = fmaxf(mx, s);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            const float m_old = m_row[r];
            const float m_new = fmaxf(m_old, mx); /* finite: key 0 is in the first tile and every row sees it */
            float sum = 0.f;
#pragma unroll
            for (int c = 0; c < TC_BK / 2; c++) {
                float p = expf(srow[c0 + c] - m_new); /* masked: exp(-inf) = 0 */
                srow[c0 + c] = p;
                sum += p;
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            __syncwarp(); /* both lanes of the row read m_old before it is replaced */
            if ((lane & 1) == 0) {
                float alpha = expf(m_old - m_new); /* m_old = -inf on the first tile: 0 */
                a_row[r] = alpha;
                l_row[r] = l_row[r] * alpha + sum;
                m_row[r] = m_new;
            }
        }
        __syncwarp();
        for (int idx = lane; idx < 16 * HDP; idx += 32) { /* O_w *= alpha per row */
            int r = r0 + idx / HDP, d = idx % HDP;
            Os[r * C::LD + d] *= a_row[r];
        }
        __syncwarp();

        /* O_w[16][HDP] += P_w[16][BK] . V[BK][HDP] */
#pragma unroll 1
        for (int nb = 0; nb < HDP / 16; nb++) {
            frag_c c;
            wmma::load_matrix_sync(c, Os + r0 * C::LD + nb * 16, C::LD, wmma::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < TC_BK; kk += 8) {
                frag_a a;
                frag_b b;
                wmma::load_matrix_sync(a, Sw + kk, TC_SLD);
                wmma::load_matrix_sync(b, Vs + kk * C::LD + nb * 16, C::LD);
                mma_split(c, a, b, split);
            }
            wmma::store_matrix_sync(Os + r0 * C::LD + nb * 16, c, C::LD, wmma::mem_row_major);
        }
        __syncwarp();
    }

    for (int idx = lane; idx < 16 * HDP; idx += 32) { /* out = O / l, this warp's rows */
        int r = r0 + idx / HDP, d = idx % HDP;
        if (q0 + r < nq && d < hd)
            out[(int64_t)(q0 + r) * qs + (int64_t)h * hd + d] = Os[r * C::LD + d] / l_row[r];
    }
}

typedef void (*tc_fn)(float *, const float *, const float *, const float *, int, int, int, int, int, int, float, int);

/* The kernel for HDP with its shared-memory limit raised once; NULL when the device cannot give it. */
template <int HDP> static tc_fn tc_kernel(const kern_ctx *kc, size_t *smem) {
    static int state = 0; /* 0 unknown, 1 ready, -1 impossible (per process: one device) */
    *smem = tc_cfg<HDP>::SMEM;
    if (state == 0) {
        state = -1;
        if (*smem <= kc->smem_optin &&
            cudaFuncSetAttribute(flash_tc_kernel<HDP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)*smem) ==
                cudaSuccess)
            state = 1;
    }
    return state == 1 ? flash_tc_kernel<HDP> : NULL;
}

/* KERN_OK after a launch, KERN_ESHAPE when this kernel does not apply (the caller falls back to the SIMT one). */
int cuda_attention_prefill_tc(kern_ctx *kc, float *out, const float *q, const float *k, const float *v, int nq,
                              int nkv, int q_pos0, int hq, int hkv, int hd, float scale) {
    if (hd > 128) return KERN_ESHAPE;
    size_t smem = 0;
    tc_fn f = hd <= 64 ? tc_kernel<64>(kc, &smem) : hd <= 112 ? tc_kernel<112>(kc, &smem) : tc_kernel<128>(kc, &smem);
    int64_t tiles = mn_cdiv(nq, TC_BQ);
    if (!f || tiles > 65535) return KERN_ESHAPE;
    MN_LAUNCH(f, dim3((unsigned)hq, (unsigned)tiles), TC_THREADS, smem, kc->stream)(
        out, q, k, v, nq, nkv, q_pos0, hq, hkv, hd, scale, kc->gemm == KERN_CUDA_GEMM_SPLIT);
    return kc_check_launch("attention (tensor-core flash prefill)");
}
