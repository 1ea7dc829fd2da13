/*
 * cuda_attention_mma.cu — causal flash-attention prefill on the tensor cores through mma.sync (m16n8k16, bf16
 * operands, fp32 accumulation) in FlashAttention-2's register layout: the contract of the SIMT kernel in
 * cuda_attention.cu (fp32 q, k, v, out and lse; GQA; rows at q_pos0 + i see keys 0 .. q_pos0 + i).
 *
 * Why mma.sync and not wmma: its fragment layout is documented (PTX ISA, "Matrix Fragments for mma.m16n8k16"), so
 * the scores S = Q.K^T stay in registers, the online softmax runs on them there (each row lives in the four lanes
 * of a quad), and the accumulator layout of S is the A-operand layout of P.V: P never goes through shared memory.
 * The TF32 wmma kernel (cuda_attention_tc.cu) round-trips S and O through shared memory, which made it slower than
 * the SIMT kernel on an H100.
 *
 * Precision follows the context's GEMM mode, as the matmuls do: SPLIT (default) splits each operand x = hi + lo
 * into two bf16 and sums lo*hi + hi*lo + hi*hi (~16 significant bits per operand, the SPLIT GEMMs' accuracy);
 * FAST keeps hi*hi (bf16 operands, relative error ~2^-9 each).
 *
 * Layout: a block owns 64 query rows of one head, 4 warps x 16 rows; Q's fragments stay in registers for the
 * whole walk over key tiles of 64. A tile of K (row-major) and of V (transposed, so a B fragment's two keys are
 * adjacent) is converted to bf16 hi (and lo) once per block in shared memory. Head dims up to 128, padded to 64,
 * 112 or 128 with zeros (LongLLaMA-3B's 100 runs as 112).
 *
 * The emulator (tests/cuda/emu) has no PTX: there mnemu::mma_m16n8k16_bf16 computes the same fragments from the
 * same layout, so test_ops checks this kernel's indexing on a CPU. Status: opt-in (kernel setting cuda.attn=mma) until it is
 * measured on a GPU.
 */
#include <math.h>

#include "cuda_common.cuh"

#define MA_BQ 64   /* query rows per block */
#define MA_BK 64   /* keys per tile */
#define MA_WARPS 4 /* 16 query rows each */
#define MA_THREADS (MA_WARPS * 32)

template <int HDP, bool SPLIT> struct ma_cfg {
    static constexpr int KS = HDP / 16;     /* k-steps of Q.K^T */
    static constexpr int NO = HDP / 8;      /* 8-column blocks of O */
    static constexpr int LDK = HDP + 8;     /* bf16 per K row in shared memory (+8: quads hit distinct banks) */
    static constexpr int LDV = MA_BK + 8;   /* bf16 per row of V^T */
    static constexpr int PARTS = SPLIT ? 2 : 1; /* hi, and lo in SPLIT mode */
    static constexpr size_t SMEM = PARTS * ((size_t)MA_BK * LDK + (size_t)HDP * LDV) * sizeof(uint16_t);
};

/* d += a . b for one 16x8x16 block (fragments as in the PTX ISA; see the emulator's twin for the layout) */
__device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#ifdef MNEMO_CUDA_EMU
    mnemu::mma_m16n8k16_bf16(d, a, b0, b1);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* (x, y) as bf16x2: hi = bf16(x), and lo = bf16(x - hi) (the SPLIT mode's second term) */
__device__ __forceinline__ void split_pair(float x, float y, uint32_t &hi, uint32_t &lo) {
    const uint16_t hx = mn_f32_to_bf16(x), hy = mn_f32_to_bf16(y);
    hi = (uint32_t)hx | (uint32_t)hy << 16;
    lo = (uint32_t)mn_f32_to_bf16(x - mn_bf16_to_f32(hx)) | (uint32_t)mn_f32_to_bf16(y - mn_bf16_to_f32(hy)) << 16;
}

/* Two adjacent bf16 of shared memory as one register (even index: 4-byte aligned). */
__device__ __forceinline__ uint32_t ld_pair(const uint16_t *p) { return *reinterpret_cast<const uint32_t *>(p); }

/* d += a . B in one (FAST) or three (SPLIT) products; B's element (k, n) of the 16x8 block is at b[off + n * ld +
 * k] for this lane's off, as K rows and V^T rows are stored. */
template <bool SPLIT>
__device__ __forceinline__ void mma_op(float d[4], const uint32_t a_hi[4], const uint32_t a_lo[4], const uint16_t *b_hi,
                                       const uint16_t *b_lo, int off) {
    const uint32_t h0 = ld_pair(b_hi + off), h1 = ld_pair(b_hi + off + 8);
    if (SPLIT) {
        mma16816(d, a_lo, h0, h1); /* small terms first */
        mma16816(d, a_hi, ld_pair(b_lo + off), ld_pair(b_lo + off + 8));
    }
    mma16816(d, a_hi, h0, h1);
}

template <int HDP, bool SPLIT>
__global__ void __launch_bounds__(MA_THREADS)
    flash_mma_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ q,
                     const float *__restrict__ k, const float *__restrict__ v, int nq, int nkv, int q_pos0, int hq,
                     int hkv, int hd, float scale) {
    typedef ma_cfg<HDP, SPLIT> C;
    MN_DYN_SMEM(uint16_t, smem);
    uint16_t *Kh = smem, *Vh = Kh + MA_BK * C::LDK;  /* K [BK][LDK], V^T [HDP][LDV] */
    uint16_t *Kl = Vh + HDP * C::LDV, *Vl = Kl + MA_BK * C::LDK; /* their lo parts (SPLIT only) */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int h = blockIdx.x, qt = gridDim.y - 1 - blockIdx.y; /* heaviest (last) query tiles first */
    const int kvh = h / (hq / hkv);
    const int q0 = qt * MA_BQ, r0 = q0 + warp * 16; /* block's and warp's first query row */
    const int64_t qs = (int64_t)hq * hd, ks = (int64_t)hkv * hd;

    /* Q fragments, rows r0 + g and r0 + g + 8, zero past nq and hd */
    uint32_t qh[C::KS][4], ql[C::KS][4];
#pragma unroll
    for (int s = 0; s < C::KS; s++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = r0 + g + (i & 1) * 8, col = s * 16 + 2 * t + (i >> 1) * 8;
            const float *qr = q + (int64_t)row * qs + (int64_t)h * hd;
            const float x = row < nq && col < hd ? qr[col] : 0.f, y = row < nq && col + 1 < hd ? qr[col + 1] : 0.f;
            split_pair(x, y, qh[s][i], ql[s][i]); /* FAST: ql unused, dropped by the compiler */
        }
    float o[C::NO][4];
#pragma unroll
    for (int n = 0; n < C::NO; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}; /* rows g, g + 8: running max, this lane's sum */

    const int q_last = min(q0 + MA_BQ, nq) - 1;
    const int kv_end = min(nkv, q_pos0 + q_last + 1); /* keys any row of this block sees */
    for (int kt = 0; kt < kv_end; kt += MA_BK) {
        __syncthreads(); /* the previous tile's products are done with K and V */
        for (int idx = tid; idx < MA_BK * HDP; idx += MA_THREADS) {
            const int r = idx / HDP, d = idx % HDP, key = kt + r;
            const bool ok = key < kv_end && d < hd;
            const int64_t off = (int64_t)key * ks + (int64_t)kvh * hd + d;
            const float xk = ok ? k[off] : 0.f, xv = ok ? v[off] : 0.f;
            const uint16_t hk = mn_f32_to_bf16(xk), hv = mn_f32_to_bf16(xv);
            Kh[r * C::LDK + d] = hk;
            Vh[d * C::LDV + r] = hv;
            if (SPLIT) {
                Kl[r * C::LDK + d] = mn_f32_to_bf16(xk - mn_bf16_to_f32(hk));
                Vl[d * C::LDV + r] = mn_f32_to_bf16(xv - mn_bf16_to_f32(hv));
            }
        }
        __syncthreads();

        /* S[16][64] = Q . K^T: 8 column blocks of 8 keys */
        float sc[MA_BK / 8][4];
#pragma unroll
        for (int n = 0; n < MA_BK / 8; n++) {
            sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
            for (int s = 0; s < C::KS; s++)
                mma_op<SPLIT>(sc[n], qh[s], ql[s], Kh, Kl, (n * 8 + g) * C::LDK + s * 16 + 2 * t);
        }
        /* scale, causal mask, online softmax; a row's 64 scores are spread over its quad's 4 lanes */
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < MA_BK / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = r0 + g + (e >> 1) * 8, key = kt + n * 8 + 2 * t + (e & 1);
                const float x = key <= q_pos0 + row && key < kv_end ? sc[n][e] * scale : -INFINITY;
                sc[n][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        float alpha[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
            const float m_new = fmaxf(m[i], mx[i]); /* finite: every row sees key 0, in the first tile */
            alpha[i] = expf(m[i] - m_new);          /* first tile: exp(-inf) = 0 */
            m[i] = m_new;
            l[i] *= alpha[i];
        }
#pragma unroll
        for (int n = 0; n < MA_BK / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = expf(sc[n][e] - m[e >> 1]); /* masked: exp(-inf) = 0 */
                sc[n][e] = p;
                l[e >> 1] += p;
            }
#pragma unroll
        for (int n = 0; n < C::NO; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[n][e] *= alpha[e >> 1];

        /* O[16][HDP] += P[16][64] . V[64][HDP]: S's accumulator blocks 2j, 2j+1 are P's A fragment for keys 16j.. */
#pragma unroll
        for (int j = 0; j < MA_BK / 16; j++) {
            uint32_t ph[4], pl[4];
            split_pair(sc[2 * j][0], sc[2 * j][1], ph[0], pl[0]);
            split_pair(sc[2 * j][2], sc[2 * j][3], ph[1], pl[1]);
            split_pair(sc[2 * j + 1][0], sc[2 * j + 1][1], ph[2], pl[2]);
            split_pair(sc[2 * j + 1][2], sc[2 * j + 1][3], ph[3], pl[3]);
#pragma unroll
            for (int n = 0; n < C::NO; n++)
                mma_op<SPLIT>(o[n], ph, pl, Vh, Vl, (n * 8 + g) * C::LDV + j * 16 + 2 * t);
        }
    }

#pragma unroll
    for (int i = 0; i < 2; i++) { /* the row sums: this lane's share plus its quad's */
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const int row = r0 + g + (e >> 1) * 8;
        if (row >= nq) continue;
        const float inv = 1.f / l[e >> 1];
        float *orow = out + (int64_t)row * qs + (int64_t)h * hd;
#pragma unroll
        for (int n = 0; n < C::NO; n++) {
            const int col = n * 8 + 2 * t + (e & 1);
            if (col < hd) orow[col] = o[n][e] * inv;
        }
    }
    if (lse && t == 0)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int row = r0 + g + i * 8;
            if (row < nq) lse[(int64_t)row * hq + h] = m[i] + logf(l[i]);
        }
}

typedef void (*ma_fn)(float *, float *, const float *, const float *, const float *, int, int, int, int, int, int,
                      float);

/* The kernel for (HDP, SPLIT) with its shared-memory limit raised once; NULL when the device cannot give it. */
template <int HDP, bool SPLIT> static ma_fn ma_kernel(const kern_ctx *kc, size_t *smem) {
    static int state = 0; /* 0 unknown, 1 ready, -1 impossible (per process: one device) */
    *smem = ma_cfg<HDP, SPLIT>::SMEM;
    if (state == 0) {
        state = -1;
        if (*smem <= kc->smem_optin && cudaFuncSetAttribute(flash_mma_kernel<HDP, SPLIT>,
                                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                            (int)*smem) == cudaSuccess)
            state = 1;
    }
    return state == 1 ? flash_mma_kernel<HDP, SPLIT> : NULL;
}

template <bool SPLIT> static ma_fn ma_kernel_for(const kern_ctx *kc, int hd, size_t *smem) {
    return hd <= 64 ? ma_kernel<64, SPLIT>(kc, smem) : hd <= 112 ? ma_kernel<112, SPLIT>(kc, smem)
                                                                  : ma_kernel<128, SPLIT>(kc, smem);
}

int cuda_attention_prefill_mma(kern_ctx *kc, float *out, float *lse, const float *q, const float *k, const float *v,
                               int nq, int nkv, int q_pos0, int hq, int hkv, int hd, float scale) {
    if (hd > 128) return KERN_ESHAPE;
    size_t smem = 0;
    const bool split = kc->gemm == KERN_CUDA_GEMM_SPLIT;
    ma_fn f = split ? ma_kernel_for<true>(kc, hd, &smem) : ma_kernel_for<false>(kc, hd, &smem);
    int64_t tiles = mn_cdiv(nq, MA_BQ);
    if (!f || tiles > 65535) return KERN_ESHAPE;
    MN_LAUNCH(f, dim3((unsigned)hq, (unsigned)tiles), MA_THREADS, smem, kc->stream)(
        out, lse, q, k, v, nq, nkv, q_pos0, hq, hkv, hd, scale);
    return kc_check_launch("attention (mma.sync flash prefill)");
}
