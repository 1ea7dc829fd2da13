/*
 * cuda_attention_mem.cu — FoT memory attention on the GPU: one fp32 softmax over a query's causal local keys and
 * its KV head's memory rows (all of them, or the selected ids of a kNN search; -1 skipped). Semantics as the CPU
 * reference (kernels/cpu/cpu_attention_mem.c); the softmax is online here, equal up to fp32 rounding.
 *
 * Split-KV for every shape ("flash-decoding" over a virtual key list). For query i and head h the keys are
 *   [0, n_local)            local keys 0 .. q_pos0 + i of k, v (fp32, stride hkv * hd)
 *   [n_local, n_local + M)  memory keys: rows 0 .. n_mem - 1 (dense, M = n_mem) or sel[(i*hq+h)*n_sel + j]
 *                           (M = n_sel), read from mem_k[g], mem_v[g] in mem_dt and widened as they are loaded.
 * Grid (split, head, query): each block takes one chunk of that list, 128 threads = 4 warps, a warp per key
 * (lanes over head_dim, lane l owns dims l, l + 32, ...), sub-chunks of SUB keys whose scores sit in shared
 * memory and fold into an online softmax (running max m, sum l, per-warp accumulators in registers). A block
 * writes its (o, m, l) partial to device scratch and cuda_split_combine (cuda_attention.cu) merges the splits;
 * with one split the block normalises and writes out directly. The chunk size is chosen so the grid fills the device ~4x over, so a
 * single decode query over a 256K-row memory runs on ~4 * SMs blocks, each streaming its part of the memory once.
 * Prefill (many queries) gets one split per (query, head) as soon as those blocks fill the device; each block then
 * streams the whole memory of its head. A query-tiled variant sharing memory tiles across queries (as the CPU's
 * QB blocks do) would cut that traffic for long prefill with dense memory; it is the next step.
 *
 * The per-head memory pointers: mem_k and mem_v are HOST arrays of hkv device pointers. They travel to the
 * kernel by value in a small struct (mem_ptrs, 2 KB of launch parameters for MEM_MAX_HEADS = 128) instead of
 * being copied to device scratch: no extra H2D copy ordered on the stream, no pinned staging buffer whose
 * lifetime would have to outlive the asynchronous launch. hkv > MEM_MAX_HEADS is refused (KERN_ESHAPE).
 *
 * Selected ids outside [-1, n_mem) cannot be checked on the host (sel is device memory): the block that reads
 * one writes KERN_ERANGE to the context's deferred-error word (reported by the next sync / D2H copy, see
 * cuda_common.cuh) and skips it. The output is then unspecified, as with every deferred error.
 * Limits (KERN_ESHAPE): head_dim <= 256, hkv <= 128, nq <= 65535 (grid z), hq <= 65535, nkv < 2^31.
 */
#include <math.h>

#include "cuda_common.cuh"

#define MEM_THREADS 128 /* 4 warps */
#define MEM_WARPS (MEM_THREADS / 32)
#define MEM_SUB 128 /* keys scored per sub-chunk (shared memory) */
#define MEM_MIN_CHUNK 256
#define MEM_MAX_SPLITS 1024
#define MEM_MAX_HEADS 128
#define MEM_MAX_HD 256

struct mem_ptrs {
    const void *k[MEM_MAX_HEADS];
    const void *v[MEM_MAX_HEADS];
};

/* Partials layout: part[((qi * hq + h) * nsplit + split) * (hd + 2) + ...] = o[0..hd) (unnormalised, relative
 * to m), then m (-inf when the split saw no key), then l (sum of exp(s - m)). E: dims per lane, hd <= 32 * E. */
template <int DT, int E>
__global__ void __launch_bounds__(MEM_THREADS)
    mem_partial_kernel(float *__restrict__ out, float *__restrict__ part, const float *__restrict__ q,
                       const float *__restrict__ k, const float *__restrict__ v, int q_pos0, int hq, int hkv, int hd,
                       float scale, mem_ptrs mem, int64_t n_mem, const int64_t *__restrict__ sel, int64_t n_sel,
                       int64_t chunk, int nsplit, int *err) {
    __shared__ float sc[MEM_SUB];        /* scores, then probabilities */
    __shared__ int64_t rowid[MEM_SUB];   /* >= 0: local row; -1: skipped; <= -2: memory row -(row + 2) */
    __shared__ float ored[MEM_WARPS][32 * E];
    __shared__ float red[32];
    const int split = blockIdx.x, h = blockIdx.y, qi = blockIdx.z;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = h / (hq / hkv);
    const int64_t ks = (int64_t)hkv * hd;
    const int64_t n_local = (int64_t)q_pos0 + qi + 1;
    const int64_t total = n_local + (sel ? n_sel : n_mem);
    const int64_t k0 = (int64_t)split * chunk, k1 = k0 + chunk < total ? k0 + chunk : total;
    const int64_t *my_sel = sel ? sel + ((int64_t)qi * hq + h) * n_sel : NULL;
    const size_t esz = DT == KERN_F32 ? 4 : 2;
    const float *kb = k + (int64_t)g * hd, *vb = v + (int64_t)g * hd;
    const char *mk = static_cast<const char *>(mem.k[g]), *mv = static_cast<const char *>(mem.v[g]);

    float qr[E], acc[E];
    const float *qp = q + ((int64_t)qi * hq + h) * hd;
#pragma unroll
    for (int e = 0; e < E; e++) {
        int d = lane + 32 * e;
        qr[e] = d < hd ? qp[d] : 0.f;
        acc[e] = 0.f;
    }
    float m = -INFINITY, l = 0.f;

    for (int64_t c0 = k0; c0 < k1; c0 += MEM_SUB) {
        const int cn = (int)(k1 - c0 < MEM_SUB ? k1 - c0 : MEM_SUB);
        /* scores: warp per key; j is warp-uniform, so the shuffles see all 32 lanes */
        for (int jj = warp; jj < cn; jj += MEM_WARPS) {
            const int64_t j = c0 + jj;
            float s = -INFINITY;
            int64_t row;
            if (j < n_local) {
                row = j;
                const float *kr = kb + j * ks;
                float a = 0.f;
#pragma unroll
                for (int e = 0; e < E; e++) {
                    int d = lane + 32 * e;
                    if (d < hd) a = fmaf(qr[e], kr[d], a);
                }
                s = mn_warp_sum(a) * scale;
            } else {
                int64_t id = my_sel ? my_sel[j - n_local] : j - n_local;
                if (id < -1 || id >= n_mem) {
                    if (lane == 0) *err = KERN_ERANGE; /* deferred: reported by the next sync */
                    id = -1;
                }
                row = id >= 0 ? -(id + 2) : -1;
                if (id >= 0) {
                    const void *kr = mk + (size_t)id * (size_t)hd * esz;
                    float a = 0.f;
#pragma unroll
                    for (int e = 0; e < E; e++) {
                        int d = lane + 32 * e;
                        if (d < hd) a = fmaf(qr[e], mn_load_w<DT>(kr, d), a);
                    }
                    s = mn_warp_sum(a) * scale;
                }
            }
            if (lane == 0) {
                sc[jj] = s;
                rowid[jj] = row;
            }
        }
        __syncthreads();
        float mx = (int)threadIdx.x < cn ? sc[threadIdx.x] : -INFINITY;
        mx = mn_block_max(mx, red);
        const float m_new = fmaxf(m, mx);
        if (m_new == -INFINITY) { /* only skipped ids so far (block-uniform) */
            __syncthreads();      /* sc is rewritten by the next sub-chunk */
            continue;
        }
        const float corr = m == -INFINITY ? 0.f : expf(m - m_new);
        float p = 0.f;
        if ((int)threadIdx.x < cn) {
            float sv = sc[threadIdx.x];
            p = sv == -INFINITY ? 0.f : expf(sv - m_new);
        }
        __syncthreads(); /* every thread has read its score before the probabilities overwrite them */
        if ((int)threadIdx.x < cn) sc[threadIdx.x] = p;
        l = l * corr + mn_block_sum(p, red); /* its barriers publish the sc writes */
#pragma unroll
        for (int e = 0; e < E; e++) acc[e] *= corr;
        for (int jj = warp; jj < cn; jj += MEM_WARPS) {
            const int64_t row = rowid[jj];
            const float pj = sc[jj];
            if (row >= 0) {
                const float *vr = vb + row * ks;
#pragma unroll
                for (int e = 0; e < E; e++) {
                    int d = lane + 32 * e;
                    if (d < hd) acc[e] = fmaf(pj, vr[d], acc[e]);
                }
            } else if (row <= -2) {
                const void *vr = mv + (size_t)(-(row + 2)) * (size_t)hd * esz;
#pragma unroll
                for (int e = 0; e < E; e++) {
                    int d = lane + 32 * e;
                    if (d < hd) acc[e] = fmaf(pj, mn_load_w<DT>(vr, d), acc[e]);
                }
            }
        }
        m = m_new;
        __syncthreads(); /* sc and rowid are rewritten by the next sub-chunk */
    }

#pragma unroll
    for (int e = 0; e < E; e++) ored[warp][lane + 32 * e] = acc[e];
    __syncthreads();
    if (nsplit == 1) { /* the only split holds every local key, so l > 0 */
        const float inv = 1.0f / l;
        float *o = out + ((int64_t)qi * hq + h) * hd;
        for (int d = threadIdx.x; d < hd; d += MEM_THREADS) {
            float a = 0.f;
#pragma unroll
            for (int w = 0; w < MEM_WARPS; w++) a += ored[w][d];
            o[d] = a * inv;
        }
        return;
    }
    float *P = part + (((int64_t)qi * hq + h) * nsplit + split) * (hd + 2);
    for (int d = threadIdx.x; d < hd; d += MEM_THREADS) {
        float a = 0.f;
#pragma unroll
        for (int w = 0; w < MEM_WARPS; w++) a += ored[w][d];
        P[d] = a;
    }
    if (threadIdx.x == 0) {
        P[hd] = m;
        P[hd + 1] = l;
    }
}

typedef void (*mem_fn)(float *, float *, const float *, const float *, const float *, int, int, int, int, float,
                       mem_ptrs, int64_t, const int64_t *, int64_t, int64_t, int, int *);

template <int DT> static mem_fn mem_kernel_for(int64_t hd) {
    return hd <= 32 ? mem_partial_kernel<DT, 1> : hd <= 64 ? mem_partial_kernel<DT, 2>
                      : hd <= 128 ? mem_partial_kernel<DT, 4> : mem_partial_kernel<DT, 8>;
}

int kern_cuda_attention_mem(kern_ctx *kc, float *out, const float *q, const float *k, const float *v, int64_t nq,
                            int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv, int64_t hd, float scale,
                            const void *const *mem_k, const void *const *mem_v, kern_dtype mem_dt, int64_t n_mem,
                            const int64_t *sel, int64_t n_sel) {
    if (!kc_ok(kc) || nq < 0 || hq <= 0 || hkv <= 0 || hd <= 0 || hq % hkv != 0 || q_pos0 < 0 || q_pos0 + nq > nkv ||
        n_mem < 0 || n_sel < 0 || (n_mem > 0 && (!mem_k || !mem_v)) || (sel && n_sel == 0 && n_mem > 0))
        return KERN_ESHAPE;
    if (mem_dt != KERN_F32 && mem_dt != KERN_BF16 && mem_dt != KERN_F16) return KERN_ESHAPE;
    if (hd > MEM_MAX_HD || hkv > MEM_MAX_HEADS || nkv > INT32_MAX || nq > 65535 || hq > 65535) return KERN_ESHAPE;
    if (nq == 0) return KERN_OK;
    mem_ptrs mp = {};
    for (int64_t g = 0; n_mem > 0 && g < hkv; g++) mp.k[g] = mem_k[g], mp.v[g] = mem_v[g];

    /* keys of the longest list (the last query's); with sel, every id is read (and checked) even if n_mem == 0 */
    const int64_t n_mk = sel ? n_sel : n_mem;
    const int64_t max_total = q_pos0 + nq + n_mk;
    const int64_t base = hq * nq;
    int64_t want = mn_cdiv((int64_t)kc->sm_count * 4, base);
    int64_t chunk = mn_cdiv(max_total, want < 1 ? 1 : want);
    chunk = mn_cdiv(chunk, MEM_MIN_CHUNK) * MEM_MIN_CHUNK;
    if (chunk < mn_cdiv(max_total, MEM_MAX_SPLITS)) chunk = mn_cdiv(max_total, MEM_MAX_SPLITS);
    const int nsplit = (int)mn_cdiv(max_total, chunk);

    float *part = NULL;
    if (nsplit > 1) {
        part = (float *)kc_scratch(kc, (size_t)base * (size_t)nsplit * (size_t)(hd + 2) * sizeof(float));
        if (!part) return KERN_ENOMEM;
    }
    mem_fn f = mem_dt == KERN_F32 ? mem_kernel_for<KERN_F32>(hd)
               : mem_dt == KERN_BF16 ? mem_kernel_for<KERN_BF16>(hd) : mem_kernel_for<KERN_F16>(hd);
    MN_LAUNCH(f, dim3((unsigned)nsplit, (unsigned)hq, (unsigned)nq), MEM_THREADS, 0, kc->stream)(
        out, part, q, k, v, (int)q_pos0, (int)hq, (int)hkv, (int)hd, scale, mp, n_mem, sel, n_sel, chunk, nsplit,
        kc->err_dev);
    int rc = kc_check_launch("attention_mem (partials)");
    if (rc != KERN_OK || nsplit == 1) return rc;
    return cuda_split_combine(kc, out, NULL, part, nq, hq, hd, nsplit, "attention_mem (combine)");
}
