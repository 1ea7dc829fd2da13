/*
 * cuda_attention_mem.cu — FoT memory attention on the GPU: one fp32 softmax over a query's causal local keys and
 * its KV head's memory rows (all of them, or the selected ids of a kNN search). Semantics as the CPU reference
 * (kernels/cpu/cpu_attention_mem.c).
 *
 * One block per (query, head), MEM_THREADS threads. Keys go by in chunks of MEM_THREADS: each thread scores one
 * key into shared memory, the block folds the chunk into an online softmax (running max m, sum l, and the
 * rescaled accumulator acc[hd] with one dimension per thread), so shared memory is O(hd + chunk) whatever the
 * memory size. Memory rows are widened from their stored dtype as they are read.
 * The per-head memory pointers arrive by value in a small struct (at most MEM_MAX_HEADS KV heads), so no device
 * copy of the host pointer arrays is needed. This is the straightforward form: a single decode query over a
 * very large memory runs on hq blocks only (a split-memory variant is the next step for GPU decode speed).
 */
#include "cuda_common.cuh"

#define MEM_THREADS 128
#define MEM_MAX_HEADS 64
#define MEM_MAX_HD 256

struct mem_ptrs {
    const void *k[MEM_MAX_HEADS];
    const void *v[MEM_MAX_HEADS];
};

template <int DT>
__global__ void __launch_bounds__(MEM_THREADS)
    attention_mem_kernel(float *__restrict__ out, const float *__restrict__ q, const float *__restrict__ k,
                         const float *__restrict__ v, int nkv, int q_pos0, int hq, int hkv, int hd, float scale,
                         mem_ptrs mem, int64_t n_mem, const int64_t *__restrict__ sel, int64_t n_sel, int *err) {
    __shared__ float qs[MEM_MAX_HD], acc[MEM_MAX_HD], s[MEM_THREADS], red[32];
    __shared__ int64_t rows[MEM_THREADS];
    const int i = blockIdx.x, h = blockIdx.y, g = h / (hq / hkv), t = threadIdx.x;
    const float *qv = q + ((int64_t)i * hq + h) * hd;
    for (int d = t; d < hd; d += MEM_THREADS) qs[d] = qv[d], acc[d] = 0.f;
    float m = -INFINITY, l = 0.f;
    const int64_t n_local = (int64_t)q_pos0 + i + 1, kv_stride = (int64_t)hkv * hd;
    const int64_t n_memkeys = n_mem == 0 ? 0 : sel ? n_sel : n_mem;
    const int64_t total = n_local + n_memkeys;
    const int64_t *my_sel = sel ? sel + ((int64_t)i * hq + h) * n_sel : NULL;
    __syncthreads();
    for (int64_t c0 = 0; c0 < total; c0 += MEM_THREADS) {
        int64_t j = c0 + t;
        float sc = -INFINITY;
        int64_t row = -1; /* >= 0: local row; <= -2: memory row -(row + 2) */
        if (j < n_local) {
            row = j;
            const float *kr = k + j * kv_stride + (int64_t)g * hd;
            float a = 0.f;
            for (int d = 0; d < hd; d++) a += qs[d] * kr[d];
            sc = a * scale;
        } else if (j < total) {
            int64_t id = my_sel ? my_sel[j - n_local] : j - n_local;
            if (id < -1 || id >= n_mem) {
                *err = KERN_ERANGE; /* reported by the next sync */
                id = -1;
            }
            if (id >= 0) {
                row = -(id + 2);
                const void *kr = static_cast<const char *>(mem.k[g]) + id * hd * (DT == KERN_F32 ? 4 : 2);
                float a = 0.f;
                for (int d = 0; d < hd; d++) a += qs[d] * mn_load_w<DT>(kr, d);
                sc = a * scale;
            }
        }
        s[t] = sc;
        rows[t] = row;
        float cmax = mn_block_max(sc, red); /* contains the barriers that publish s and rows */
        float m_new = fmaxf(m, cmax);
        if (m_new == -INFINITY) continue; /* nothing visible in this chunk yet (only skipped ids) */
        float corr = m == -INFINITY ? 0.f : expf(m - m_new);
        float p = sc == -INFINITY ? 0.f : expf(sc - m_new);
        l = l * corr + mn_block_sum(p, red);
        s[t] = p;
        __syncthreads();
        int64_t cn = total - c0 < MEM_THREADS ? total - c0 : MEM_THREADS;
        for (int d = t; d < hd; d += MEM_THREADS) {
            float a = acc[d] * corr;
            for (int64_t c = 0; c < cn; c++) {
                int64_t r = rows[c];
                if (r >= 0) a += s[c] * v[r * kv_stride + (int64_t)g * hd + d];
                else if (r <= -2) a += s[c] * mn_load_w<DT>(mem.v[g], (-(r + 2)) * hd + d);
            }
            acc[d] = a;
        }
        m = m_new;
        __syncthreads();
    }
    float inv = 1.f / l;
    for (int d = t; d < hd; d += MEM_THREADS) out[((int64_t)i * hq + h) * hd + d] = acc[d] * inv;
}

int kern_cuda_attention_mem(kern_ctx *kc, float *out, const float *q, const float *k, const float *v, int64_t nq,
                            int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv, int64_t hd, float scale,
                            const void *const *mem_k, const void *const *mem_v, kern_dtype mem_dt, int64_t n_mem,
                            const int64_t *sel, int64_t n_sel) {
    if (!kc_ok(kc) || nq < 0 || hq <= 0 || hkv <= 0 || hd <= 0 || hq % hkv != 0 || q_pos0 < 0 || q_pos0 + nq > nkv ||
        n_mem < 0 || n_sel < 0 || (n_mem > 0 && (!mem_k || !mem_v)) || (sel && n_sel == 0 && n_mem > 0))
        return KERN_ESHAPE;
    if (mem_dt != KERN_F32 && mem_dt != KERN_BF16 && mem_dt != KERN_F16) return KERN_ESHAPE;
    if (hd > MEM_MAX_HD || hkv > MEM_MAX_HEADS || nkv > INT32_MAX || nq > INT32_MAX || hq > 65535) return KERN_ESHAPE;
    if (nq == 0) return KERN_OK;
    mem_ptrs mp = {};
    for (int64_t g = 0; n_mem > 0 && g < hkv; g++) mp.k[g] = mem_k[g], mp.v[g] = mem_v[g];
    typedef void (*fn)(float *, const float *, const float *, const float *, int, int, int, int, int, float, mem_ptrs,
                       int64_t, const int64_t *, int64_t, int *);
    fn f = mem_dt == KERN_F32 ? attention_mem_kernel<KERN_F32>
           : mem_dt == KERN_BF16 ? attention_mem_kernel<KERN_BF16> : attention_mem_kernel<KERN_F16>;
    MN_LAUNCH(f, dim3((unsigned)nq, (unsigned)hq), MEM_THREADS, 0, kc->stream)(
        out, q, k, v, (int)nkv, (int)q_pos0, (int)hq, (int)hkv, (int)hd, scale, mp, n_mem, sel, n_sel, kc->err_dev);
    return kc_check_launch("attention_mem");
}
