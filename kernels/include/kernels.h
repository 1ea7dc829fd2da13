/*
 * kernels.h — mnemo's op interface: stateless ops on raw buffers and shapes, listed ONCE in KERN_OPS.
 *
 * Every op is a function `int op(kern_ctx *kc, ...)` returning 0 on success or a KERN_E* code (bad shape,
 * out-of-range id, backend failure). A backend (kernels/cpu, later kernels/cuda) fills a kern_backend whose
 * fields come from the same table, so adding an op touches the table and each backend's file, nothing else;
 * the op-count check in each backend catches a missed entry.
 *
 * Conventions
 *   - Activations are fp32, row-major, the last dimension contiguous. Shapes are written [rows, cols].
 *   - Weights keep their stored dtype (kern_dtype) and the Hugging Face layout [out_features, in_features].
 *   - Pointers are host pointers on the CPU backend and device pointers on the CUDA backend. Buffers an op
 *     reads or writes come from the same backend's mem_alloc (see "Memory" below); token ids and positions
 *     too. kern_backend.host_memory tells the caller whether it may touch them directly.
 *   - Device backends run ops asynchronously on the context's stream. Shape errors come back from the op
 *     itself; errors only the device can see (a token id or position out of range) are reported by the next
 *     synchronising call on that context (sync, or a device-to-host mem_copy) as KERN_ERANGE.
 *   - Backward twins (training) sit beside their forward in the table (name_backward) and in each backend's
 *     file; they take the forward's saved values (rmsnorm's rstd, attention's log-sum-exp) as explicit arguments.
 *     Gradient rule, as in llm.c: parameter grads accumulate (+=, fp32), activation grads are overwritten (=)
 *     except where an op says otherwise: ops that feed the residual stream take beta (0: =, 1: +=), and
 *     attention_backward's dk, dv accumulate (keys are shared by every query head of a group and every chunk of
 *     queries). `add` needs no twin: its backward is the identity (the residual grad flows on unchanged), and
 *     `add` itself sums gradient contributions. Parameters, moments and grads of adamw are fp32.
 *   - A backend that does not implement an op (yet) returns KERN_EUNSUPPORTED from it, before touching memory;
 *     the CPU backend implements every op.
 */
#ifndef MNEMO_KERNELS_H
#define MNEMO_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Weight dtypes. Q8_0 .. Q5_K are GGML's block-quantized types (32 or 256 weights per block; see
 * "block-quantized weights" below): only the CPU backend's matmul, matmul_backward_x and embed take them (the engine
 * dequantizes them to bf16 when it uploads weights to CUDA). matmul with them rounds each 32-block of x to int8 with
 * its own fp32 scale and sums integer products, as llama.cpp does; matmul_backward_x and embed use the dequantized
 * values exactly; every other op refuses them with KERN_ESHAPE. */
typedef enum {
    KERN_F32 = 0, KERN_F16 = 1, KERN_BF16 = 2, KERN_Q8_0 = 3, KERN_Q4_0 = 4, KERN_Q4_K = 5, KERN_Q6_K = 6,
    KERN_Q4_1 = 7, KERN_Q5_0 = 8, KERN_Q5_1 = 9, KERN_Q2_K = 10, KERN_Q3_K = 11, KERN_Q5_K = 12
} kern_dtype;

enum {
    KERN_OK = 0,
    KERN_ESHAPE = 1,   /* a size or stride is invalid for the op */
    KERN_ERANGE = 2,   /* an index (token id, position) is out of range */
    KERN_ENOMEM = 3,   /* scratch allocation failed */
    KERN_EBACKEND = 4, /* the backend failed (launch error, BLAS error) */
    KERN_EUNSUPPORTED = 5, /* this backend does not implement the op (or this use of it) yet */
};

/* Per-backend execution state: thread count, scratch memory. Created by the backend. */
typedef struct kern_ctx kern_ctx;

/* The op table. X(name, parameter list after kern_ctx *, one-line contract).
 * Shapes: n = rows (tokens), d = row width, hq/hkv = query/key-value heads, hd = head_dim. */
#define KERN_OPS(X)                                                                                              \
    X(embed,                                                                                                     \
      (kern_ctx * kc, float *out, const void *table, kern_dtype dt, int64_t vocab, int64_t d, const int32_t *ids, \
       int64_t n),                                                                                               \
      "out[n,d] = table[ids[i], :] widened to fp32; KERN_ERANGE if an id is outside [0, vocab)")              \
    X(embed_backward,                                                                                            \
      (kern_ctx * kc, float *dtable, const float *dout, int64_t vocab, int64_t d, const int32_t *ids, int64_t n), \
      "dtable[vocab,d] (fp32) += dout[i,:] at row ids[i], repeated ids summed in order i = 0..n-1; KERN_ERANGE " \
      "if an id is outside [0, vocab) (nothing written)")                                                      \
    X(rmsnorm,                                                                                                   \
      (kern_ctx * kc, float *y, float *rstd, const float *x, const void *w, kern_dtype wdt, int64_t n,         \
       int64_t d, float eps),                                                                                    \
      "y[n,d] = x * rstd * w, rstd[n] = 1/sqrt(mean(x^2) + eps) (saved for backward; may be NULL); y may be x") \
    X(rmsnorm_backward,                                                                                          \
      (kern_ctx * kc, float *dx, float *dw, const float *dy, const float *x, const void *w, kern_dtype wdt,    \
       const float *rstd, int64_t n, int64_t d, float beta),                                                    \
      "dx[n,d] = dy . dy/dx + beta * dx (beta 0 or 1: 1 accumulates into the residual stream's grad), dw[d] " \
      "(fp32) += sum_i dy * x * rstd (dw NULL: frozen weight); rstd[n] from the forward; dx may alias dy (beta 0)") \
    X(matmul,                                                                                                    \
      (kern_ctx * kc, float *y, const float *x, const void *w, kern_dtype wdt, int64_t m, int64_t n, int64_t k, \
       float beta),                                                                                              \
      "y[m,n] = x[m,k] . w[n,k]^T + beta * y (beta 0 or 1; 1 fuses a residual add)")                          \
    X(matmul_backward_x,                                                                                         \
      (kern_ctx * kc, float *dx, const float *dy, const void *w, kern_dtype wdt, int64_t m, int64_t n, int64_t k, \
       float beta),                                                                                              \
      "dx[m,k] = dy[m,n] . w[n,k] + beta * dx (beta 0 or 1: 1 accumulates, e.g. into the residual stream's grad)") \
    X(matmul_backward_w,                                                                                         \
      (kern_ctx * kc, float *dw, const float *dy, const float *x, int64_t m, int64_t n, int64_t k),             \
      "dw[n,k] (fp32) += dy[m,n]^T . x[m,k]: the weight gradient of matmul, accumulated")                     \
    X(rope,                                                                                                      \
      (kern_ctx * kc, float *x, int64_t n, int64_t heads, int64_t hd, const int32_t *pos, float theta,        \
       float pos_scale),                                                                                         \
      "in place on x[n,heads,hd]: HF rotate_half RoPE at angle pos[i]/pos_scale * theta^(-2j/hd)")            \
    X(rope_backward,                                                                                             \
      (kern_ctx * kc, float *dx, int64_t n, int64_t heads, int64_t hd, const int32_t *pos, float theta,       \
       float pos_scale),                                                                                         \
      "in place on dx[n,heads,hd]: the transposed (= inverse) rotation of rope, same angles")                  \
    X(attention,                                                                                                 \
      (kern_ctx * kc, float *out, float *lse, const float *q, const float *k, const float *v, int64_t nq,      \
       int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv, int64_t hd, float scale),                         \
      "causal GQA attention: out[nq,hq,hd]; query i sees keys 0..q_pos0+i of k,v[nkv,hkv,hd]; one fp32 softmax; " \
      "lse[nq,hq] = log sum_j exp(scale * q.k_j) (natural log, saved for backward; may be NULL)")             \
    X(attention_backward,                                                                                        \
      (kern_ctx * kc, float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,      \
       const float *v, const float *out, const float *lse, int64_t nq, int64_t nkv, int64_t q_pos0, int64_t hq, \
       int64_t hkv, int64_t hd, float scale),                                                                    \
      "backward of attention from its inputs, out and lse: dq[nq,hq,hd] = (overwritten); dk, dv[nkv,hkv,hd] += " \
      "(summed over the query heads of a group and every query; zero them before the first chunk of queries)") \
    X(attention_cross,                                                                                           \
      (kern_ctx * kc, float *out, float *lse, const float *q, const float *k, const float *v, int64_t nq,      \
       int64_t nkv, int64_t hq, int64_t hkv, int64_t hd, float scale),                                          \
      "attention without a mask: every query of q[nq,hq,hd] sees all nkv keys of k,v[nkv,hkv,hd] (FoT's extra " \
      "contexts, shared by many rows); out and lse (may be NULL) as attention's")                              \
    X(attention_cross_backward,                                                                                  \
      (kern_ctx * kc, float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,      \
       const float *v, const float *out, const float *lse, int64_t nq, int64_t nkv, int64_t hq, int64_t hkv,   \
       int64_t hd, float scale),                                                                                 \
      "backward of attention_cross as attention_backward's (dq =, dk dv +=); out, lse may be those of a softmax " \
      "over more keys (merged by attention_merge): then it is the share of these keys, the others' from their call") \
    X(attention_merge,                                                                                           \
      (kern_ctx * kc, float *out, float *lse, const float *out2, const float *lse2, int64_t n, int64_t hq,     \
       int64_t hd),                                                                                              \
      "out[n,hq,hd], lse[n,hq] := one softmax over both key sets, from attention over one set (out, lse) and " \
      "over the other (out2, lse2): lse = log(e^lse + e^lse2), out = out e^(lse_old - lse) + out2 e^(lse2 - lse)") \
    X(attention_mem,                                                                                             \
      (kern_ctx * kc, float *out, const float *q, const float *k, const float *v, int64_t nq, int64_t nkv,     \
       int64_t q_pos0, int64_t hq, int64_t hkv, int64_t hd, float scale, const void *const *mem_k,             \
       const void *const *mem_v, kern_dtype mem_dt, int64_t n_mem, const int64_t *sel, int64_t n_sel),         \
      "FoT memory attention: as attention, plus for KV head g the memory rows mem_k[g], mem_v[g] ([n_mem,hd] in " \
      "mem_dt, no mask) - all (sel NULL) or sel[(i*hq+h)*n_sel+j] (-1: none) - in the same fp32 softmax")     \
    X(topk_ip,                                                                                                   \
      (kern_ctx * kc, int64_t *ids, float *scores, int64_t ldo, const float *q, int64_t nq, int64_t ldq,       \
       const void *keys, kern_dtype dt, int64_t n_keys, int64_t hd, int64_t k),                                 \
      "exact kNN by inner product: for query i (q + i*ldq, hd floats) the k rows of keys[n_keys,hd] (in dt, "     \
      "widened) with the largest dot product, best first, ties to the lower id, into ids/scores + i*ldo (scores " \
      "may be NULL); past n_keys the tail is id -1, score -inf")                                               \
    X(ivf_scan_topk,                                                                                             \
      (kern_ctx * kc, int64_t *ids, float *scores, int64_t ldo, const float *q, int64_t nq, int64_t ldq,       \
       const void *keys, kern_dtype dt, int64_t n_keys, int64_t hd, const int64_t *probe, int64_t nprobe,      \
       const int32_t *cell_start, const int32_t *cell_len, int64_t n_cells, const int32_t *cell_rows,          \
       int64_t max_scan, int64_t k),                                                                             \
      "inverted-file kNN by inner product: for query i the k rows with the largest dot product among the rows "  \
      "of its probed cells probe[i*nprobe + p] (-1: none; distinct), cell c holding the rows (ids into "          \
      "keys[n_keys,hd], in dt) cell_rows[cell_start[c] .. + cell_len[c]); best first, ties to the lower id, "     \
      "-1/-inf past the rows found, into ids/scores + i*ldo (scores may be NULL). max_scan bounds the rows one " \
      "query's cells hold; KERN_ERANGE when a probe, a row id or that bound is out of range")                 \
    X(scatter_i32, (kern_ctx * kc, int32_t *dst, int64_t n_dst, const int32_t *idx, const int32_t *src, int64_t n), \
      "dst[idx[i]] = src[i] for i < n (idx distinct): an inverted list's new entries in one upload; "          \
      "KERN_ERANGE if an idx is outside [0, n_dst)")                                                           \
    X(swiglu, (kern_ctx * kc, float *h, const float *gate, const float *up, int64_t n),                         \
      "h[n] = silu(gate) * up; h may alias gate")                                                              \
    X(swiglu_backward,                                                                                           \
      (kern_ctx * kc, float *dgate, float *dup, const float *dh, const float *gate, const float *up, int64_t n), \
      "dgate[n] = dh * up * silu'(gate), dup[n] = dh * silu(gate) (overwritten); either may alias dh, gate or " \
      "up element for element, not each other")                                                                \
    X(add, (kern_ctx * kc, float *y, const float *x, int64_t n), "y[n] += x[n]")                                \
    X(cross_entropy,                                                                                             \
      (kern_ctx * kc, float *loss, float *dlogits, const float *logits, const int32_t *targets, int64_t n,     \
       int64_t vocab, float dloss),                                                                              \
      "softmax + loss + grad over logits[n,vocab]: loss[0] = mean over rows with targets[i] != -1 of "          \
      "-log softmax(logits[i])[targets[i]] (NaN when none counts, as torch; loss may be NULL); dlogits[n,vocab] " \
      "= dloss / count * (softmax - onehot), 0 on ignored rows (NULL: loss only; may alias logits: in place); " \
      "KERN_ERANGE if a target is outside [-1, vocab) (nothing written)")                                      \
    X(adamw,                                                                                                     \
      (kern_ctx * kc, float *p, float *m, float *v, const float *g, int64_t n, float grad_scale, double lr,    \
       double beta1, double beta2, double eps, double weight_decay, int64_t step),                              \
      "torch.optim.AdamW step t = step (>= 1) on fp32 p, m, v[n] with grads g * grad_scale (clipping; 1: "   \
      "none): p *= 1 - lr*wd; m += (1-b1)(g - m); v = b2 v + (1-b2) g^2; p -= lr/(1-b1^t) * m / "               \
      "(sqrt(v)/sqrt(1-b2^t) + eps)")                                                                         \
    X(axpby, (kern_ctx * kc, float *y, const float *x, int64_t n, float a, float b),                            \
      "y[n] = a * x + b * y (b 0: y = a * x, y never read); x may be y. Training's vector updates: LoRA's "    \
      "scale, gradient clipping, SGD")                                                                         \
    X(sumsq, (kern_ctx * kc, float *out, const float *x, int64_t n),                                            \
      "out[0] += sum x^2, summed in double in a fixed order (deterministic) and rounded once: the squared "     \
      "gradient norm without a download per tensor")

/* Op ids (KERN_OP_embed, ...) and their count. */
#define KERN_OP_ID(name, params, doc) KERN_OP_##name,
typedef enum { KERN_OPS(KERN_OP_ID) KERN_OP_COUNT } kern_op_id;
#undef KERN_OP_ID

/* Direction of a backend copy. "Device" means the backend's memory (host memory on the CPU backend). */
typedef enum { KERN_H2D = 0, KERN_D2H = 1, KERN_D2D = 2 } kern_copy_dir;

/* A backend: its name, one function pointer per op (generated from the table), then its execution context and
 * memory functions. These sit outside KERN_OPS on purpose: they are not ops (no CPU reference to check against,
 * no backward twin), and test_ops iterates over the ops only.
 *
 * Memory contract (every backend):
 *   mem_alloc(bytes)      backend memory, at least 64-byte aligned (CUDA: 256); NULL when out of memory. Not
 *                         tied to a context, so model weights can be uploaded before any context exists.
 *   mem_free(p)           NULL is a no-op.
 *   mem_set(kc, p, b, n)  n bytes of p to the byte value b.
 *   mem_copy(kc, d, s, n, dir)  n bytes; regions must not overlap. H2D/D2D are ordered on kc's stream (kc may be
 *                         NULL: then the copy completes before the call returns); D2H always completes before
 *                         the call returns, so the host may read dst at once, and it reports deferred errors.
 *   mem_copy2d(kc, d, dpitch, s, spitch, width, rows, dir)  `rows` rows of `width` bytes, row r from s + r * spitch
 *                         to d + r * dpitch (pitches >= width); ordered and completed as mem_copy. One call moves a
 *                         strided slice (some heads of every row) where a loop of mem_copy would launch per row.
 *   sync(kc)              waits for everything queued on kc and reports deferred errors (KERN_ERANGE) or a
 *                         device failure (KERN_EBACKEND).
 * All return KERN_OK or a KERN_E* code. On the CPU backend they are malloc/memset/memcpy and sync is a no-op, so
 * the engine's host path costs what it did before buffers went through the backend. */
#define KERN_OP_FIELD(name, params, doc) int(*name) params;
typedef struct kern_backend {
    const char *name;
    KERN_OPS(KERN_OP_FIELD)
    int host_memory; /* 1: buffers are plain host memory the caller may read and write directly (CPU) */
    kern_ctx *(*ctx_new)(int n_threads); /* n_threads: CPU worker count, 0 = one per core; ignored by CUDA */
    void (*ctx_free)(kern_ctx *kc);
    void *(*mem_alloc)(size_t bytes);
    void (*mem_free)(void *p);
    int (*mem_set)(kern_ctx *kc, void *p, int byte, size_t bytes);
    int (*mem_copy)(kern_ctx *kc, void *dst, const void *src, size_t bytes, kern_copy_dir dir);
    int (*mem_copy2d)(kern_ctx *kc, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                      size_t rows, kern_copy_dir dir);
    int (*sync)(kern_ctx *kc);
    /* One kernel setting (below) for this context: 1 applied, 0 another backend's setting (ignored), -1 a value
     * this setting does not take. */
    int (*setting)(kern_ctx *kc, const char *name, const char *value);
} kern_backend;
#undef KERN_OP_FIELD

/* ---- kernel settings: which of several paths a context's kernels take where each gives results within its own
 * stated precision (docs/kernel-settings.md has the table; kern_settings_table lists it for help texts). A list of
 * them ("cpu.gemm=exact,cuda.attn=tc") may be given to any context: each backend applies its own and ignores the
 * other's, so one list serves both. */
typedef struct {
    const char *name;   /* "cpu.gemm" */
    const char *values; /* "fast|exact" */
    const char *doc;    /* what it chooses and why one would */
} kern_setting_info;
const kern_setting_info *kern_settings_table(int *n);
/* Applies "name=value[,name=value...]" (NULL or "" applies nothing) to kc of backend be. KERN_OK, or KERN_ESHAPE
 * with the reason in err (an unknown name, a value the setting does not take, a malformed list). */
int kern_ctx_settings(const kern_backend *be, kern_ctx *kc, const char *list, char *err, size_t errlen);

/* Names and contracts of the ops, indexed by kern_op_id (for tests and logs). */
extern const char *const kern_op_names[KERN_OP_COUNT];
extern const char *const kern_op_docs[KERN_OP_COUNT];

/* Bytes per element of a weight dtype (0 for the block-quantized ones: use kern_dtype_bytes), and its name ("f32",
 * "f16", "bf16", "q8_0", "q4_0"). */
size_t kern_dtype_size(kern_dtype dt);
const char *kern_dtype_name(kern_dtype dt);

/* ---- block-quantized weights (GGML's layouts, so GGUF files map directly)
 *   q8_0: 34 bytes per 32 weights: f16 scale d, int8 q[32];            w[i] = d * q[i]
 *   q4_0: 18 bytes per 32 weights: f16 scale d, uint8 q[16] (nibbles); w[i] = d * ((q[i] & 15) - 8) and
 *         w[i + 16] = d * ((q[i] >> 4) - 8), i < 16
 *   q4_K: 144 bytes per 256 ("k-quants", super-blocks of 8 sub-blocks of 32): f16 d, f16 dmin, 6-bit scale and
 *         min per sub-block (12 bytes), nibbles; w = d * sc_j * q - dmin * m_j, q in [0, 15]
 *   q6_K: 210 bytes per 256: 6-bit q (low nibbles, then high 2-bit pairs), int8 scale per 16, f16 d;
 *         w = d * sc_g * (q - 32)
 *   q4_1: 20 bytes per 32: f16 d, f16 m, nibbles as q4_0;              w = d * q + m, q in [0, 15]
 *   q5_0: 22 bytes per 32: f16 d, 32 fifth bits, nibbles;              w = d * (q - 16)
 *   q5_1: 24 bytes per 32: f16 d, f16 m, 32 fifth bits, nibbles;       w = d * q + m, q in [0, 31]
 *   q2_K: 84 bytes per 256: 4-bit scale and min per 16, 2-bit q, f16 d, dmin; w = d * sc_g * q - dmin * m_g
 *   q3_K: 110 bytes per 256: high-bit mask, 2-bit q, 6-bit scale per 16, f16 d; w = d * (sc_g - 32) * q, q in [-4, 3]
 *   q5_K: 176 bytes per 256: q4_K's scales and mins, fifth bits, nibbles; w = d * sc_j * q - dmin * m_j, q in [0, 31]
 * A row of a quantized matrix holds k / kern_dtype_block(dt) blocks (k must be a multiple of it). The matmul's
 * activation rounding is per 32 elements for all of them (see kq_quantize_act), a 256-block being 8 sub-blocks. */
#define KERN_QBLOCK 32
#define KERN_QK_K 256
static inline int kern_dtype_is_quant(kern_dtype dt) { return dt >= KERN_Q8_0 && dt <= KERN_Q5_K; }
static inline int kern_dtype_is_kquant(kern_dtype dt) {
    return dt == KERN_Q4_K || dt == KERN_Q6_K || dt == KERN_Q2_K || dt == KERN_Q3_K || dt == KERN_Q5_K;
}
/* Elements per block: 256 for the k-quants, 32 for q8_0 / q4_0 / q4_1 / q5_0 / q5_1, 1 for float types. */
static inline int64_t kern_dtype_block(kern_dtype dt) {
    return kern_dtype_is_kquant(dt) ? KERN_QK_K : kern_dtype_is_quant(dt) ? KERN_QBLOCK : 1;
}
/* Bytes of n consecutive elements of dt (quantized: n a multiple of kern_dtype_block, else 0). */
size_t kern_dtype_bytes(kern_dtype dt, int64_t n);
/* Quantize n floats (a multiple of kern_dtype_block) as GGML's reference quantize_row_q8_0 / q4_0 / q4_1 / q5_0 /
 * q5_1 do (the k-quants: simpler quantizers than ggml's, see quant_kblocks.c and quant_xquantize.c; the blocks are
 * GGML's); dequantize back (bit for bit ggml's and gguf-py's values). */
void kern_quantize_row(void *dst, const float *src, kern_dtype dt, int64_t n);
void kern_dequantize_row(float *dst, const void *src, kern_dtype dt, int64_t n);
/* Which vector path the CPU's quantized matmul uses: the best this CPU has (default), or a lower one (tests run
 * every path: AVX512_VBMI, AVX512_VNNI, AVX2, scalar). AVX512_VBMI is AVX512_VNNI plus the one-row GEMV of decode
 * for q4_0 / q4_1 / q5_0 / q5_1 / q8_0 weights. Returns the level now in force (a level the CPU lacks is
 * lowered). */
typedef enum {
    KERN_QPATH_SCALAR = 0,
    KERN_QPATH_AVX2 = 1,
    KERN_QPATH_AVX512_VNNI = 2,
    KERN_QPATH_AVX512_VBMI = 3,
    KERN_QPATH_BEST = 4
} kern_qpath;
kern_qpath kern_cpu_quant_path(kern_qpath want);
const char *kern_qpath_name(kern_qpath p);

/* ---- the CPU backend (reference) */
const kern_backend *kern_cpu_backend(void);
/* n_threads 0 = one per core. NULL when out of memory. */
kern_ctx *kern_cpu_ctx_new(int n_threads);
void kern_cpu_ctx_free(kern_ctx *kc);
int kern_ctx_threads(const kern_ctx *kc);

/* ---- the CUDA backend (kernels/cuda; a stub that reports "not built" when libengine has no CUDA)
 * Ops follow the CPU backend's contracts with these CUDA-specific limits, each reported as KERN_ESHAPE:
 * head_dim <= 256 for rope, attention, attention_cross and their backwards; cross_entropy n <= 2^24 rows. GEMM
 * precision for bf16/f16 weights (matmul with m > 8 rows, matmul_backward_x) is chosen per context (see
 * kern_cuda_gemm); every other path computes in fp32. Ids and targets live in device memory, so embed_backward and
 * cross_entropy skip a bad one (its row gets no update / a zero gradient) and report KERN_ERANGE at the next sync,
 * where the CPU refuses before writing anything. */
const kern_backend *kern_cuda_backend(void); /* NULL when libengine was built without CUDA */
/* 1 when the backend is built and a CUDA device answers; info receives the device's description ("NVIDIA H100
 * 80GB HBM3, sm_90, 132 SMs, 79.1 GiB"). 0 otherwise, info receives why (not built, no driver, no device).
 * Never aborts, also without a driver installed. info may be NULL. */
int kern_cuda_available(char *info, size_t infolen);
/* How matmul treats bf16/f16 weights when m > 8 (m <= 8 always runs the fp32 GEMV kernel):
 *   SPLIT (default): activations split into parts in the weights' 16-bit type (3 for bf16, 2 for f16) that
 *                    sum to the fp32 value, one tensor-core GEMM per part with fp32 accumulation; products are
 *                    exact, so the result is fp32-accurate at 3x (bf16) / 2x (f16) the tensor-core work.
 *   FAST:            activations rounded once to the weights' type, one tensor-core GEMM: ~2x faster prefill,
 *                    relative error ~2^-9 per activation (bf16), normalized MSE ~1e-6.
 * The kernel setting cuda.gemm=split|fast chooses it per context (SPLIT by default). */
typedef enum { KERN_CUDA_GEMM_SPLIT = 0, KERN_CUDA_GEMM_FAST = 1 } kern_cuda_gemm;
kern_ctx *kern_cuda_ctx_new(void); /* NULL when no device or out of memory */
void kern_cuda_ctx_free(kern_ctx *kc);
int kern_cuda_set_gemm(kern_ctx *kc, kern_cuda_gemm mode); /* KERN_OK, or KERN_ESHAPE for a non-CUDA ctx */

/* Scalar conversions, shared by backends, loaders and tests. bf16/f16 -> f32 is exact. */
static inline float kern_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } c;
    c.u = (uint32_t)h << 16;
    return c.f;
}
static inline uint16_t kern_f32_to_bf16(float f) { /* round to nearest even, NaN stays NaN */
    union { uint32_t u; float f; } c;
    c.f = f;
    if ((c.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((c.u >> 16) | 0x40u);
    c.u += 0x7fffu + ((c.u >> 16) & 1u);
    return (uint16_t)(c.u >> 16);
}
float kern_f16_to_f32(uint16_t h);
uint16_t kern_f32_to_f16(float f);
/* n stored values (F32, F16, BF16, or quantized with n whole blocks) widened to fp32 in host memory
 * (vectorised), for any host code. */
void kern_cpu_widen(float *dst, const void *src, kern_dtype dt, int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_KERNELS_H */
