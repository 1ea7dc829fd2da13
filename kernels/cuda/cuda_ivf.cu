/*
 * cuda_ivf.cu — inverted-file kNN on the GPU (ivf_scan_topk: the row scan of memstore's IVF-grow device mirror,
 * memstore/mem_device_ivf.c) and the scatter that appends new entries to its lists (scatter_i32). Semantics as the
 * CPU reference (kernels/cpu/cpu_topk.c, cpu_elementwise.c).
 *
 * ivf_scan_topk, per chunk of queries (scratch: max_scan 64-bit candidates per query, ~256 MB at most):
 *   1. scan: one block per (probe, query), or a few splitting a cell's rows when there are too few of those to
 *      fill the GPU (decode: one query). A query's probed cells are laid out in probe order in its candidate row
 *      (a block finds its offset by summing the lengths of the probes before it: nprobe is small). Each warp
 *      scores one row at a time, lanes striding over head_dim with the query in registers, and stores the
 *      candidate as one 64-bit key: the score's order-preserving 32-bit image above ~id. Keys are then distinct and
 *      order exactly as the contract does (higher score, then lower id), so selection needs no tie rule.
 *   2. select: one block per query: a radix select finds the k-th largest key in eight 8-bit passes (a shared
 *      histogram per pass), one pass gathers the keys at or above it, a bitonic sort in shared memory orders them.
 * Bad indexes (a probe outside [-1, n_cells), a row id outside [0, n_keys), cells past max_scan) cannot be refused
 * before the launch: they are skipped and reported as a deferred KERN_ERANGE, as embed does.
 * Limits (KERN_ESHAPE): k <= 1024, hd <= 256, nprobe <= 65535, n_keys < 2^31, max_scan < 2^31.
 *
 * scatter_i32: one thread per entry; a bad index is skipped and reported the same way.
 */
#include <math.h>

#include "cuda_common.cuh"

#define IVF_SCAN_WARPS 4
#define IVF_SEL_THREADS 256
#define IVF_K_MAX 1024
#define IVF_HD_MAX 256
#define IVF_SCRATCH_BYTES ((size_t)256 << 20)

/* Rows of probe c as scanned (0 for -1 or an out-of-range cell). */
__device__ __forceinline__ int64_t ivf_probe_len(int64_t c, const int32_t *cell_len, int64_t n_cells) {
    return c >= 0 && c < n_cells && cell_len[c] > 0 ? cell_len[c] : 0;
}

template <int DT>
__global__ void __launch_bounds__(IVF_SCAN_WARPS * 32)
    ivf_scan_kernel(uint64_t *cand, const float *q, int64_t ldq, const void *keys, int64_t n_keys, int hd,
                    const int64_t *probe, int64_t nprobe, const int32_t *cell_start, const int32_t *cell_len,
                    int64_t n_cells, const int32_t *cell_rows, int64_t max_scan, int *err) {
    const int64_t p = blockIdx.x, i = blockIdx.y;
    const int64_t *pr = probe + i * nprobe;
    const int64_t c = pr[p];
    if (c == -1) return;
    if (c < -1 || c >= n_cells || cell_start[c] < 0 || cell_len[c] < 0) {
        if (threadIdx.x == 0) *err = KERN_ERANGE;
        return;
    }
    int64_t off = 0;
    for (int64_t b = 0; b < p; b++) off += ivf_probe_len(pr[b], cell_len, n_cells);
    const int64_t len = cell_len[c];
    if (off + len > max_scan) { /* the caller's bound was wrong: those rows are not scanned */
        if (threadIdx.x == 0) *err = KERN_ERANGE;
        return;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float qr[IVF_HD_MAX / 32];
#pragma unroll
    for (int t = 0; t < IVF_HD_MAX / 32; t++) qr[t] = lane + 32 * t < hd ? q[i * ldq + lane + 32 * t] : 0.f;
    uint64_t *out = cand + i * max_scan + off;
    const int32_t *rows = cell_rows + cell_start[c];
    const int64_t step = (int64_t)gridDim.z * IVF_SCAN_WARPS;
    for (int64_t r = (int64_t)blockIdx.z * IVF_SCAN_WARPS + warp; r < len; r += step) {
        const int32_t id = rows[r];
        if (id < 0 || id >= n_keys) {
            if (lane == 0) *err = KERN_ERANGE, out[r] = 0; /* the lowest key: never better than a real row */
            continue;
        }
        const int64_t base = (int64_t)id * hd;
        float s = 0.f;
#pragma unroll
        for (int t = 0; t < IVF_HD_MAX / 32; t++)
            if (lane + 32 * t < hd) s += qr[t] * mn_load_w<DT>(keys, base + lane + 32 * t);
        s = mn_warp_sum(s);
        if (lane == 0) out[r] = ((uint64_t)mn_order_bits(s) << 32) | (uint64_t)(~(uint32_t)id);
    }
}

__global__ void __launch_bounds__(IVF_SEL_THREADS)
    ivf_select_kernel(int64_t *ids, float *scores, int64_t ldo, const uint64_t *cand, const int64_t *probe,
                      int64_t nprobe, const int32_t *cell_len, int64_t n_cells, int64_t max_scan, int k) {
    __shared__ uint32_t hist[256];
    __shared__ uint64_t sh_prefix;
    __shared__ uint32_t sh_need, sh_gt, sh_eq;
    __shared__ uint64_t sk[IVF_K_MAX];
    const int tid = threadIdx.x;
    const int64_t i = blockIdx.x;
    const int64_t *pr = probe + i * nprobe;
    /* the rows the scan wrote: its probes in order, up to the first that did not fit in max_scan */
    int64_t n = 0;
    for (int64_t b = 0; b < nprobe; b++) {
        int64_t len = ivf_probe_len(pr[b], cell_len, n_cells);
        if (n + len > max_scan) break;
        n += len;
    }
    const uint64_t *s = cand + i * max_scan;
    const int kk = (int64_t)k < n ? k : (int)n;

    /* 1. the kk-th largest key T, 8 bits at a time from the top */
    uint64_t prefix = 0, mask = 0;
    uint32_t need = (uint32_t)kk;
    for (int shift = 56; kk > 0 && shift >= 0; shift -= 8) {
        for (int b = tid; b < 256; b += IVF_SEL_THREADS) hist[b] = 0;
        __syncthreads();
        for (int64_t j = tid; j < n; j += IVF_SEL_THREADS) {
            uint64_t u = s[j];
            if ((u & mask) == prefix) atomicAdd(&hist[(uint32_t)(u >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            uint32_t above = 0;
            int b = 255;
            for (; b > 0 && above + hist[b] < need; b--) above += hist[b];
            sh_prefix = prefix | ((uint64_t)b << shift);
            sh_need = need - above;
        }
        __syncthreads();
        prefix = sh_prefix;
        need = sh_need;
        mask |= (uint64_t)255u << shift;
    }

    /* 2. gather every key > T and `need` keys == T (equal keys are the same row: any of them will do) */
    if (tid == 0) sh_gt = 0, sh_eq = 0;
    __syncthreads();
    const uint32_t n_gt = (uint32_t)kk - need;
    for (int64_t j = tid; kk > 0 && j < n; j += IVF_SEL_THREADS) {
        uint64_t u = s[j];
        if (u > prefix) {
            sk[atomicAdd(&sh_gt, 1u)] = u;
        } else if (u == prefix) {
            uint32_t at = atomicAdd(&sh_eq, 1u);
            if (at < need) sk[n_gt + at] = u;
        }
    }
    __syncthreads();

    /* 3. bitonic sort of the kk taken (padded to a power of two with 0, the lowest key), largest first */
    int p2 = 1;
    while (p2 < kk) p2 <<= 1;
    for (int j = kk + tid; j < p2; j += IVF_SEL_THREADS) sk[j] = 0;
    __syncthreads();
    for (int size = 2; size <= p2; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int a = tid; a < p2; a += IVF_SEL_THREADS) {
                int b = a ^ stride;
                if (b > a) {
                    bool desc = (a & size) == 0;
                    if (desc ? sk[b] > sk[a] : sk[a] > sk[b]) {
                        uint64_t t = sk[a];
                        sk[a] = sk[b], sk[b] = t;
                    }
                }
            }
            __syncthreads();
        }
    }
    int64_t *oi = ids + i * ldo;
    float *os = scores ? scores + i * ldo : NULL;
    for (int j = tid; j < k; j += IVF_SEL_THREADS) {
        oi[j] = j < kk ? (int64_t)(~(uint32_t)sk[j]) : -1;
        if (os) os[j] = j < kk ? mn_order_bits_inv((uint32_t)(sk[j] >> 32)) : -INFINITY;
    }
}

int kern_cuda_ivf_scan_topk(kern_ctx *kc, int64_t *ids, float *scores, int64_t ldo, const float *q, int64_t nq,
                            int64_t ldq, const void *keys, kern_dtype dt, int64_t n_keys, int64_t hd,
                            const int64_t *probe, int64_t nprobe, const int32_t *cell_start, const int32_t *cell_len,
                            int64_t n_cells, const int32_t *cell_rows, int64_t max_scan, int64_t k) {
    if (!kc_ok(kc) || nq < 0 || n_keys < 0 || hd <= 0 || k <= 0 || ldo < k || ldq < hd || nprobe < 0 || n_cells < 0 ||
        max_scan < 0 || !ids || (nq > 0 && (!q || (nprobe > 0 && !probe))) || (n_keys > 0 && !keys) ||
        (n_cells > 0 && (!cell_start || !cell_len || !cell_rows)))
        return KERN_ESHAPE;
    if (dt != KERN_F32 && dt != KERN_BF16 && dt != KERN_F16) return KERN_ESHAPE;
    if (k > IVF_K_MAX || hd > IVF_HD_MAX || nprobe > 65535 || n_keys > INT32_MAX || max_scan > INT32_MAX)
        return KERN_ESHAPE;
    if (nq == 0) return KERN_OK;
    int64_t rows = max_scan > 0 ? (int64_t)(IVF_SCRATCH_BYTES / ((size_t)max_scan * sizeof(uint64_t))) : nq;
    if (rows < 1) rows = 1;
    if (rows > nq) rows = nq;
    if (rows > 65535) rows = 65535;
    uint64_t *cand = (uint64_t *)kc_scratch(kc, (size_t)rows * (size_t)(max_scan > 0 ? max_scan : 1) * 8);
    if (!cand) return KERN_ENOMEM;
    void (*scan)(uint64_t *, const float *, int64_t, const void *, int64_t, int, const int64_t *, int64_t,
                 const int32_t *, const int32_t *, int64_t, const int32_t *, int64_t, int *) =
        dt == KERN_F32 ? ivf_scan_kernel<KERN_F32> : dt == KERN_BF16 ? ivf_scan_kernel<KERN_BF16>
                                                                     : ivf_scan_kernel<KERN_F16>;
    for (int64_t r0 = 0; r0 < nq; r0 += rows) {
        int64_t m = nq - r0 < rows ? nq - r0 : rows;
        if (nprobe > 0) { /* blocks per cell: enough for ~8 blocks per SM, at most 16 */
            int64_t split = mn_cdiv((int64_t)kc->sm_count * 8, nprobe * m);
            split = split < 1 ? 1 : split > 16 ? 16 : split;
            MN_LAUNCH(scan, dim3((unsigned)nprobe, (unsigned)m, (unsigned)split), IVF_SCAN_WARPS * 32, 0, kc->stream)(
                cand, q + r0 * ldq, ldq, keys, n_keys, (int)hd, probe + r0 * nprobe, nprobe, cell_start, cell_len,
                n_cells, cell_rows, max_scan, kc->err_dev);
            int rc = kc_check_launch("ivf_scan_topk (scan)");
            if (rc != KERN_OK) return rc;
        }
        MN_LAUNCH(ivf_select_kernel, (unsigned)m, IVF_SEL_THREADS, 0, kc->stream)(
            ids + r0 * ldo, scores ? scores + r0 * ldo : NULL, ldo, cand, nprobe > 0 ? probe + r0 * nprobe : probe,
            nprobe, cell_len, n_cells, max_scan, (int)k);
        int rc = kc_check_launch("ivf_scan_topk (select)");
        if (rc != KERN_OK) return rc;
    }
    return KERN_OK;
}

__global__ void scatter_i32_kernel(int32_t *dst, int64_t n_dst, const int32_t *idx, const int32_t *src, int64_t n,
                                   int *err) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int32_t at = idx[i];
    if (at < 0 || at >= n_dst) *err = KERN_ERANGE;
    else dst[at] = src[i];
}

int kern_cuda_scatter_i32(kern_ctx *kc, int32_t *dst, int64_t n_dst, const int32_t *idx, const int32_t *src,
                          int64_t n) {
    if (!kc_ok(kc) || n_dst < 0 || n < 0 || (n > 0 && (!dst || !idx || !src))) return KERN_ESHAPE;
    if (n == 0) return KERN_OK;
    MN_LAUNCH(scatter_i32_kernel, (unsigned)mn_cdiv(n, 256), 256, 0, kc->stream)(dst, n_dst, idx, src, n,
                                                                                 kc->err_dev);
    return kc_check_launch("scatter_i32");
}
