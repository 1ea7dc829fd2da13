/*
 * cuda_emu.cc — the CPU emulator's runtime: fiber scheduler for blocks, barriers and shuffles, protected
 * device memory, copies, and the cuBLAS GEMM subset. See cuda_emu.h for what is modelled and why.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <map>
#include <vector>

#include "cuda_emu.h"
#include "kernels.h"

namespace mnemu {

/* ---------------------------------------------------------------- errors */

static cudaError_t g_last = cudaSuccess;   /* returned (and cleared) by cudaGetLastError */
static cudaError_t g_sticky = cudaSuccess; /* a failed kernel: reported by every later synchronisation */

static cudaError_t fail(cudaError_t e, const char *fmt, const char *detail = "") {
    fprintf(stderr, "cuda-emu: ");
    fprintf(stderr, fmt, detail);
    fputc('\n', stderr);
    g_last = e;
    return e;
}

/* ---------------------------------------------------------------- device memory */

struct region {
    char *map;     /* mmap base */
    size_t maplen; /* data pages + one guard page */
    char *data;    /* what cudaMalloc returned */
    size_t bytes;
};
static std::map<uintptr_t, region> g_regions; /* keyed by data address */
static std::map<uintptr_t, size_t> g_pinned;  /* mapped pinned host memory: data -> bytes */
static bool g_protect = true;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull; /* scheduling order (MNEMO_EMU_SEED) */
static bool g_open = false; /* device memory currently readable/writable */
static const size_t PAGE = 4096;

static void init_env() {
    static bool done = false;
    if (done) return;
    done = true;
    const char *p = getenv("MNEMO_EMU_PROTECT");
    g_protect = !(p && !strcmp(p, "0"));
    const char *seed = getenv("MNEMO_EMU_SEED"); /* another seed, another interleaving of threads */
    if (seed && strtoull(seed, NULL, 0)) g_rng = strtoull(seed, NULL, 0);
}

static void set_open(bool open) {
    if (!g_protect || open == g_open) return;
    for (auto &kv : g_regions)
        mprotect(kv.second.map, kv.second.maplen - PAGE, open ? PROT_READ | PROT_WRITE : PROT_NONE);
    g_open = open;
}

/* Opens device memory for the lifetime of a runtime call that touches it. */
struct device_open {
    bool was;
    device_open() : was(g_open) { set_open(true); }
    ~device_open() { set_open(was); }
};

static const region *find_region(const void *p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    auto it = g_regions.upper_bound(a);
    if (it == g_regions.begin()) return NULL;
    --it;
    const region &r = it->second;
    if (a >= (uintptr_t)r.data && a + bytes <= (uintptr_t)r.data + r.bytes) return &r;
    return NULL;
}

static bool in_pinned(const void *p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    auto it = g_pinned.upper_bound(a);
    if (it == g_pinned.begin()) return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
}

bool device_accessible(const void *p) { return find_region(p, 1) || in_pinned(p, 1); }

void bad_kernel_pointer(const char *what, int index, const void *p) {
    char buf[160];
    snprintf(buf, sizeof buf, "%s: pointer argument %d (%p) is not device memory", what, index, p);
    fail(cudaErrorInvalidDevicePointer, "%s", buf);
}

/* ---------------------------------------------------------------- fibers */

enum fstate { F_RUN, F_BAR_BLOCK, F_BAR_WARP, F_DONE };
struct fiber {
    ucontext_t ctx;
    uint3 tid;
    unsigned linear;
    fstate st;
    char *stack;
};

static const size_t STACK = 256 * 1024;
static std::vector<fiber> g_fibers;
static ucontext_t g_sched;
static fiber *g_cur;
static const std::function<void()> *g_body;
static const uint3 g_zero_tid = {0, 0, 0};
const uint3 *g_tid = &g_zero_tid;
uint3 g_block_idx;
dim3 g_block_dim, g_grid_dim;
static unsigned g_nthreads;
static unsigned char g_slot[32][2][32][16]; /* [warp][generation parity][lane][value bytes] */
static unsigned g_slot_gen[32][2][32];        /* generation + 1 that wrote each slot, 0 = never */
static unsigned g_warp_gen[32];
static std::vector<unsigned char> g_smem;
static size_t g_smem_bytes;
static std::map<const void *, int> g_smem_limit; /* cudaFuncSetAttribute(MaxDynamicSharedMemorySize) */
static const size_t SMEM_DEFAULT = 48 * 1024, SMEM_OPTIN = 166912; /* A100's opt-in limit */
static const size_t SMEM_GUARD = 64;

static void fiber_main() {
    (*g_body)();
    g_cur->st = F_DONE; /* returning resumes the scheduler through uc_link */
}

static void yield(fstate st) {
    fiber *f = g_cur;
    f->st = st;
    swapcontext(&f->ctx, &g_sched);
    g_cur = f;
    g_tid = &f->tid;
}

void syncthreads() { yield(F_BAR_BLOCK); }

unsigned lane_id() { return g_cur->linear & 31; }

void syncwarp() { yield(F_BAR_WARP); }

void shuffle(const void *mine, void *out, size_t size, int src) {
    fiber *f = g_cur;
    unsigned w = f->linear >> 5, lane = f->linear & 31, gen = g_warp_gen[w], par = gen & 1;
    memcpy(g_slot[w][par][lane], mine, size);
    g_slot_gen[w][par][lane] = gen + 1;
    yield(F_BAR_WARP);
    unsigned s = (unsigned)src & 31;
    if (g_slot_gen[w][par][s] != gen + 1)
        memset(out, 0xff, size); /* the source lane exited or does not exist: garbage (NaN here), as on hardware */
    else
        memcpy(out, g_slot[w][par][s], size);
}

unsigned char *dyn_smem() { return g_smem.data(); }

static uint64_t rnd() {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

/* Runs one block to completion; false on a barrier deadlock.
 * Scheduling: after every __syncthreads the warps get a fresh random priority order, and the highest-priority
 * warp with work runs first, as far as it can (through its shuffles) before the next warp starts; within a
 * warp, lanes run in random order between warp barriers. So between two __syncthreads one warp completes its
 * whole segment before another begins, in an order that changes every time: a missing barrier between a write
 * by one warp and a read by another shows up as a wrong result. */
static bool run_block(const std::function<void()> &body) {
    g_body = &body;
    const unsigned nwarps = (g_nthreads + 31) / 32;
    unsigned live_total = g_nthreads, at_block = 0;
    unsigned live[32], wwait[32], prio[32];
    bool releasable[32];
    std::vector<unsigned> rq[32]; /* runnable lanes per warp */
    for (unsigned w = 0; w < nwarps; w++) {
        live[w] = std::min(32u, g_nthreads - w * 32);
        wwait[w] = 0;
        releasable[w] = false;
        prio[w] = w;
    }
    for (unsigned i = 0; i < g_nthreads; i++) {
        fiber &f = g_fibers[i];
        f.linear = i;
        f.tid = uint3{i % g_block_dim.x, (i / g_block_dim.x) % g_block_dim.y, i / (g_block_dim.x * g_block_dim.y)};
        f.st = F_RUN;
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = &g_sched;
        makecontext(&f.ctx, fiber_main, 0);
        rq[i / 32].push_back(i);
    }
    memset(g_warp_gen, 0, sizeof g_warp_gen);
    memset(g_slot_gen, 0, sizeof g_slot_gen);
    for (unsigned w = nwarps; w > 1; w--) std::swap(prio[w - 1], prio[rnd() % w]);
    for (;;) {
        int pick = -1;
        for (unsigned k = 0; k < nwarps && pick < 0; k++)
            if (releasable[prio[k]] || !rq[prio[k]].empty()) pick = (int)prio[k];
        if (pick < 0) {
            if (live_total == 0) break;
            if (at_block == live_total) { /* __syncthreads: every live thread arrived */
                for (unsigned i = 0; i < g_nthreads; i++)
                    if (g_fibers[i].st == F_BAR_BLOCK) {
                        g_fibers[i].st = F_RUN;
                        rq[i / 32].push_back(i);
                    }
                at_block = 0;
                for (unsigned w = nwarps; w > 1; w--) std::swap(prio[w - 1], prio[rnd() % w]);
                continue;
            }
            fprintf(stderr, "cuda-emu: block (%u,%u,%u) deadlocked: %u of %u live threads at __syncthreads, the rest "
                            "at a warp barrier (divergent barrier or shuffle)\n",
                    g_block_idx.x, g_block_idx.y, g_block_idx.z, at_block, live_total);
            return false;
        }
        const unsigned w = (unsigned)pick;
        if (releasable[w]) { /* the warp barrier completes */
            for (unsigned i = w * 32; i < std::min(g_nthreads, w * 32 + 32); i++)
                if (g_fibers[i].st == F_BAR_WARP) {
                    g_fibers[i].st = F_RUN;
                    rq[w].push_back(i);
                }
            wwait[w] = 0;
            releasable[w] = false;
            g_warp_gen[w]++;
            continue;
        }
        size_t r = rnd() % rq[w].size();
        unsigned i = rq[w][r];
        rq[w][r] = rq[w].back();
        rq[w].pop_back();
        fiber &f = g_fibers[i];
        g_cur = &f;
        g_tid = &f.tid;
        swapcontext(&g_sched, &f.ctx);
        if (f.st == F_DONE) {
            live[w]--;
            live_total--;
            if (live[w] && wwait[w] == live[w]) releasable[w] = true; /* the exit completes the warp */
        } else if (f.st == F_BAR_BLOCK) {
            at_block++;
        } else if (f.st == F_BAR_WARP) {
            if (++wwait[w] == live[w]) releasable[w] = true;
        }
    }
    g_tid = &g_zero_tid;
    return true;
}

void launch(dim3 grid, dim3 block, size_t smem, const void *fn, const std::function<void()> &body) {
    init_env();
    unsigned nt = block.x * block.y * block.z;
    if (nt == 0 || nt > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
        grid.z > 65535 || grid.x > 0x7fffffffu) {
        fail(cudaErrorInvalidConfiguration, "%s", "invalid launch configuration");
        return;
    }
    auto lim = g_smem_limit.find(fn);
    size_t limit = lim == g_smem_limit.end() ? SMEM_DEFAULT : (size_t)lim->second;
    if (smem > limit) {
        char buf[128];
        snprintf(buf, sizeof buf, "%zu bytes of dynamic shared memory over the kernel's limit of %zu", smem, limit);
        fail(cudaErrorInvalidValue, "%s", buf);
        return;
    }
    if (g_sticky != cudaSuccess) return; /* a failed context runs nothing more */
    if (g_fibers.size() < nt) {
        size_t old = g_fibers.size();
        g_fibers.resize(nt);
        for (size_t i = old; i < nt; i++) {
            void *s = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (s == MAP_FAILED) {
                fail(cudaErrorMemoryAllocation, "%s", "no memory for fiber stacks");
                g_fibers.resize(old);
                return;
            }
            g_fibers[i].stack = (char *)s;
        }
    }
    g_nthreads = nt;
    g_block_dim = block;
    g_grid_dim = grid;
    g_smem_bytes = smem;
    g_smem.assign(smem + SMEM_GUARD, 0xff);
    device_open open;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                g_block_idx = uint3{x, y, z};
                memset(g_smem.data(), 0xff, smem); /* uninitialised shared memory reads back as NaN */
                if (!run_block(body)) {
                    g_sticky = fail(cudaErrorLaunchFailure, "%s", "kernel failed (deadlock)");
                    return;
                }
                for (size_t i = smem; i < smem + SMEM_GUARD; i++)
                    if (g_smem[i] != 0xff) {
                        g_sticky = fail(cudaErrorLaunchFailure, "%s", "write past the end of dynamic shared memory");
                        return;
                    }
            }
}

} // namespace mnemu

using namespace mnemu;

/* ---------------------------------------------------------------- runtime API */

cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev) {
    if (dev != 0) return cudaErrorInvalidValue;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "mnemo CUDA emulator (CPU)");
    p->totalGlobalMem = (size_t)8 << 30;
    p->sharedMemPerBlock = SMEM_DEFAULT;
    p->sharedMemPerBlockOptin = SMEM_OPTIN;
    p->multiProcessorCount = 4;
    p->major = 8;
    p->minor = 0;
    p->l2CacheSize = 4 << 20;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : cudaErrorInvalidValue; }

struct mnemu_stream {
    int unused;
};

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    (void)flags;
    *s = new mnemu_stream();
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    (void)s;
    return g_sticky;
}
cudaError_t cudaDeviceSynchronize(void) { return g_sticky; }

cudaError_t cudaMalloc(void **p, size_t bytes) {
    init_env();
    *p = NULL;
    if (bytes == 0) bytes = 1;
    size_t aligned = (bytes + 255) & ~(size_t)255;
    size_t data_pages = (aligned + PAGE - 1) / PAGE * PAGE;
    size_t maplen = data_pages + PAGE;
    char *m = (char *)mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return g_last = cudaErrorMemoryAllocation;
    mprotect(m + data_pages, PAGE, PROT_NONE); /* guard page right after the buffer */
    char *data = m + data_pages - aligned;     /* end of the buffer (256-aligned) touches the guard */
    if (g_protect && !g_open) mprotect(m, data_pages, PROT_NONE);
    g_regions[(uintptr_t)data] = region{m, maplen, data, bytes};
    *p = data;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    auto it = g_regions.find((uintptr_t)p);
    if (it == g_regions.end()) return fail(cudaErrorInvalidDevicePointer, "%s", "cudaFree of a non-device pointer");
    munmap(it->second.map, it->second.maplen);
    g_regions.erase(it);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags) {
    (void)flags;
    *p = calloc(1, bytes ? bytes : 1);
    if (!*p) return g_last = cudaErrorMemoryAllocation;
    g_pinned[(uintptr_t)*p] = bytes ? bytes : 1;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p) {
    g_pinned.erase((uintptr_t)p);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **dev, void *host, unsigned flags) {
    (void)flags;
    *dev = host;
    return cudaSuccess;
}

static bool is_dev(const void *p, size_t bytes) { return find_region(p, bytes) != NULL; }

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    if (!bytes) return cudaSuccess;
    bool dd = is_dev(dst, bytes), sd = is_dev(src, bytes);
    bool ok = kind == cudaMemcpyHostToDevice   ? dd && !sd
              : kind == cudaMemcpyDeviceToHost ? !dd && sd
              : kind == cudaMemcpyDeviceToDevice ? dd && sd
                                                 : kind == cudaMemcpyDefault;
    if (!ok) {
        char buf[200];
        snprintf(buf, sizeof buf, "cudaMemcpy kind %d of %zu bytes: dst is %s, src is %s", (int)kind, bytes,
                 dd ? "device" : "host (or out of bounds)", sd ? "device" : "host (or out of bounds)");
        return fail(cudaErrorInvalidValue, "%s", buf);
    }
    device_open open;
    memmove(dst, src, bytes);
    return g_sticky;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    (void)s;
    return cudaMemcpy(dst, src, bytes, kind);
}

/* Row by row through cudaMemcpy, so each row's ends are checked against the device regions as a 1-D copy's are;
 * CUDA refuses a width past either pitch. */
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind) {
    if (width > dpitch || width > spitch) return fail(cudaErrorInvalidValue, "%s", "cudaMemcpy2D: width > pitch");
    for (size_t r = 0; r < height; r++) {
        cudaError_t e = cudaMemcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width, kind);
        if (e != cudaSuccess) return e;
    }
    return g_sticky;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s) {
    (void)s;
    return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}

cudaError_t cudaMemset(void *p, int v, size_t bytes) {
    if (!bytes) return cudaSuccess;
    if (!is_dev(p, bytes)) return fail(cudaErrorInvalidValue, "%s", "cudaMemset outside device memory");
    device_open open;
    memset(p, v, bytes);
    return g_sticky;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s) {
    (void)s;
    return cudaMemset(p, v, bytes);
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = g_last != cudaSuccess ? g_last : g_sticky;
    g_last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return g_last != cudaSuccess ? g_last : g_sticky; }

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error (emulator)";
    case cudaErrorInvalidValue: return "invalid argument (emulator)";
    case cudaErrorMemoryAllocation: return "out of memory (emulator)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument (emulator)";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer (emulator)";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected (emulator)";
    case cudaErrorLaunchFailure: return "unspecified launch failure (emulator)";
    }
    return "unknown error (emulator)";
}

cudaError_t mnemu_func_set_attr(const void *fn, cudaFuncAttribute a, int v) {
    if (a != cudaFuncAttributeMaxDynamicSharedMemorySize || v < 0 || (size_t)v > SMEM_OPTIN)
        return fail(cudaErrorInvalidValue, "%s", "cudaFuncSetAttribute: value over the device's opt-in limit");
    g_smem_limit[fn] = v;
    return cudaSuccess;
}

/* ---------------------------------------------------------------- cuBLAS */

struct mnemu_blas {
    int unused;
};

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = new mnemu_blas();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    (void)h;
    (void)s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
    (void)h;
    (void)m;
    return CUBLAS_STATUS_SUCCESS;
}

static float elem(const void *p, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == CUDA_R_16BF ? kern_bf16_to_f32(h) : kern_f16_to_f32(h);
}

/* Column-major C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C; beta == 0 never reads C (it may hold NaN). */
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t comp,
                            cublasGemmAlgo_t algo) {
    (void)algo;
    if (!h || m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (at != bt || ct != CUDA_R_32F || comp != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
        return CUBLAS_STATUS_INVALID_VALUE;
    size_t es = at == CUDA_R_32F ? 4 : 2;
    size_t a_span = ((size_t)(ta == CUBLAS_OP_N ? k : m) - 1) * lda + (ta == CUBLAS_OP_N ? m : k);
    size_t b_span = ((size_t)(tb == CUBLAS_OP_N ? n : k) - 1) * ldb + (tb == CUBLAS_OP_N ? k : n);
    size_t c_span = ((size_t)n - 1) * ldc + m;
    if (m && n && k && (!is_dev(A, a_span * es) || !is_dev(B, b_span * es) || !is_dev(C, c_span * 4))) {
        fail(cudaErrorInvalidDevicePointer, "%s", "cublasGemmEx: an operand is not (all) device memory");
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    const float al = *(const float *)alpha, be = *(const float *)beta;
    device_open open;
    float *c = (float *)C;
    std::vector<float> arow(k), bcol(k);
    for (int j = 0; j < n; j++) {
        for (int l = 0; l < k; l++) bcol[l] = elem(B, bt, tb == CUBLAS_OP_N ? (size_t)l + (size_t)j * ldb : (size_t)j + (size_t)l * ldb);
        for (int i = 0; i < m; i++) {
            float s = 0.f;
            for (int l = 0; l < k; l++) {
                float a = elem(A, at, ta == CUBLAS_OP_N ? (size_t)i + (size_t)l * lda : (size_t)l + (size_t)i * lda);
                s = fmaf(a, bcol[l], s);
            }
            float *cij = c + (size_t)i + (size_t)j * ldc;
            *cij = al * s + (be != 0.f ? be * *cij : 0.f);
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}
