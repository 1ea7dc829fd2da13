/*
 * engine.h — the public header of libengine (mnemo's inference library); a program includes it alone (it brings
 * engine_train.h, the training API, with it).
 *
 * Objects
 *   mnemo_model    weights + tokenizer of one Hugging Face LLaMA-family checkpoint directory (plus, optionally, the
 *                  UIO weights that make it a UIO-LLM: see "UIO-LLM compression"). Read-only after load: one model
 *                  may be shared by any number of threads and contexts.
 *   mnemo_context  one session over a model: KV cache, position, last logits. A context must be used by one
 *                  thread at a time; different contexts on the same model may run concurrently.
 *   mnemo_sampler  sampling settings plus the token history the penalties need. One thread at a time.
 *   mnemo_trainer  a fine-tuning run over its own copy of a model: engine_train.h, which this header includes.
 *
 * Errors
 *   Every fallible call returns a mnemo_status. mnemo_model_load and mnemo_context_new hand back a handle even
 *   when they fail (as sqlite3_open does) so that mnemo_model_error / mnemo_context_error can say why; such a
 *   handle must still be freed, and any other use of it returns MNEMO_ERR_MISUSE. Calls on a shared model
 *   (tokenize, detokenize) return a status only and never write the model's message, so they stay thread-safe.
 *   The library never calls exit() or abort(). All *_free(NULL) calls are no-ops.
 *
 * Logging
 *   Diagnostics go to a process-wide callback (mnemo_log_set); the default writes warnings and errors to stderr.
 */
#ifndef MNEMO_ENGINE_H
#define MNEMO_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MNEMO_API __attribute__((visibility("default")))
#else
#define MNEMO_API
#endif

/* ---------------------------------------------------------------- status codes */
typedef enum {
    MNEMO_OK = 0,
    MNEMO_ERR_INVALID_ARG = 1,   /* a parameter is NULL, out of range, or a token id is not in the vocabulary */
    MNEMO_ERR_IO = 2,            /* a file is missing or cannot be read */
    MNEMO_ERR_FORMAT = 3,        /* a file's contents are malformed (message names the file and the problem) */
    MNEMO_ERR_UNSUPPORTED = 4,   /* well-formed but not supported (architecture, dtype, rope scaling type) */
    MNEMO_ERR_NOMEM = 5,         /* an allocation failed */
    MNEMO_ERR_CONTEXT_FULL = 6,  /* the tokens do not fit in the context window */
    MNEMO_ERR_CANCELLED = 7,     /* a callback asked to stop */
    MNEMO_ERR_MISUSE = 8,        /* the API was used out of order, or on a handle whose creation failed */
    MNEMO_ERR_TOO_SMALL = 9,     /* an output buffer is too small; the needed size was written */
    MNEMO_ERR_BACKEND = 10,      /* the compute backend failed (e.g. a CUDA error) */
} mnemo_status;

/* A short English name for a status ("invalid argument"). Never NULL. */
MNEMO_API const char *mnemo_status_str(mnemo_status s);

typedef int32_t mnemo_token;

typedef struct mnemo_model mnemo_model;
typedef struct mnemo_context mnemo_context;
typedef struct mnemo_sampler mnemo_sampler;

/* ---------------------------------------------------------------- logging */
typedef enum { MNEMO_LOG_ERROR = 0, MNEMO_LOG_WARN = 1, MNEMO_LOG_INFO = 2, MNEMO_LOG_DEBUG = 3 } mnemo_log_level;
typedef void (*mnemo_log_fn)(mnemo_log_level level, const char *msg, void *user);
/* Replace the process-wide log sink (NULL restores the default stderr sink). max_level filters the default sink. */
MNEMO_API void mnemo_log_set(mnemo_log_fn fn, void *user);
MNEMO_API void mnemo_log_set_level(mnemo_log_level max_level);

/* ---------------------------------------------------------------- model */
typedef enum { MNEMO_DEVICE_AUTO = 0, MNEMO_DEVICE_CPU = 1, MNEMO_DEVICE_CUDA = 2 } mnemo_device;

typedef struct {
    int32_t n_threads;    /* compute threads; 0 = one per core */
    mnemo_device device;  /* AUTO takes a GPU when the CUDA backend is built and a GPU is present */
    const char *uio_dir;  /* NULL: the checkpoint alone; else a UIO directory loaded over it (see "UIO-LLM
                           * compression"): every context of the model compresses segments into <mem> entries */
    bool vocab_only;      /* load the tokenizer only (mnemo tokenize): no weights are read, the model's tokenize /
                           * detokenize / n_vocab / bos / eos work, contexts and adapters are refused
                           * (MNEMO_ERR_UNSUPPORTED). A GGUF file without tensors always loads this way. */
} mnemo_model_params;

MNEMO_API mnemo_model_params mnemo_model_default_params(void);

/* For programs on machines shared with other CPU-bound work: call first thing in main(), before any thread
 * starts. Unless the environment already sets OMP_WAIT_POLICY or GOMP_SPINCOUNT, it sets
 * OMP_WAIT_POLICY=passive and re-executes the program (/proc/self/exe, same argv and pid) so that OpenMP, which
 * reads the policy once at start-up, lets idle compute threads sleep instead of spinning on the cores the busy
 * ones need and that OpenBLAS's GEMM threads share (beside other jobs a long prompt ran 1.8-2.3x faster; alone,
 * prefill on a 3B layer shape 1.85x; see docs/kernels.md, "Threads on a shared machine"). Returns only when nothing was
 * needed or the exec failed. mnemo and mnemo-server call it; OMP_WAIT_POLICY=active opts out. */
MNEMO_API void mnemo_threads_prefer_passive(char **argv);

/* Load a checkpoint directory: config.json, model.safetensors | model.safetensors.index.json + shards |
 * pytorch_model.bin | pytorch_model.bin.index.json + shards, and tokenizer.model (SentencePiece) or, without one,
 * tokenizer.json (byte-level BPE, with tokenizer_config.json's special tokens). Weights are memory-mapped.
 * With params->uio_dir, that UIO directory too: a missing file is MNEMO_ERR_IO, a malformed or mismatched one
 * (bad JSON, chunk_size not a multiple of num_memory, a wrong tensor count, shape or dtype for this base model)
 * MNEMO_ERR_FORMAT, UIO over a LongLLaMA checkpoint MNEMO_ERR_UNSUPPORTED; the message names the file.
 * *out always receives a handle (NULL only when even that allocation failed). */
MNEMO_API mnemo_status mnemo_model_load(const char *dir, const mnemo_model_params *params, mnemo_model **out);
MNEMO_API void mnemo_model_free(mnemo_model *model);
/* Why the load failed ("" after success). Valid until the model is freed. */
MNEMO_API const char *mnemo_model_error(const mnemo_model *model);
/* The model to load when the caller names none (the CLI and server without --model): $MNEMO_MODEL when set (a
 * directory or a GGUF file), else the default beside the running executable (/proc/self/exe): SmolLM2-135M-Instruct
 * (one GGUF file), installed (<exe dir>/../share/mnemo/models/SmolLM2-135M-Instruct.Q4_1.gguf) or in the build tree
 * (<exe dir>/share/mnemo/models/...). MNEMO_OK with the path in out; MNEMO_ERR_IO with a message in out naming every
 * place looked at and how to fetch it (or that the file found is damaged); MNEMO_ERR_TOO_SMALL when cap cannot hold
 * the path (out truncated). */
MNEMO_API mnemo_status mnemo_default_model_dir(char *out, size_t cap);

MNEMO_API int32_t mnemo_model_n_vocab(const mnemo_model *model);
MNEMO_API int32_t mnemo_model_n_ctx_train(const mnemo_model *model); /* max_position_embeddings */
MNEMO_API int32_t mnemo_model_n_layer(const mnemo_model *model);
MNEMO_API int32_t mnemo_model_n_embd(const mnemo_model *model);
MNEMO_API mnemo_token mnemo_model_bos(const mnemo_model *model);
MNEMO_API mnemo_token mnemo_model_eos(const mnemo_model *model);
/* True for every end-of-generation id the config names (eos_token_id may be a list). */
MNEMO_API bool mnemo_model_is_eog(const mnemo_model *model, mnemo_token token);
/* One line: architecture, sizes, dtype, backend. Valid until the model is freed. */
MNEMO_API const char *mnemo_model_desc(const mnemo_model *model);
/* Bytes of weights the forward pass reads per token (all layer weights + lm_head). */
MNEMO_API uint64_t mnemo_model_weight_bytes(const mnemo_model *model);
/* True for LongLLaMA models with memory layers: their contexts have no length limit (see "LongLLaMA memory"). */
MNEMO_API bool mnemo_model_has_memory(const mnemo_model *model);

/* ---- UIO-LLM compression (wenhaoli-xmu/UIO-LLMs)
 * A UIO-LLM is a base LLaMA plus a few weights that compress each segment of chunk_size tokens into num_memory
 * <mem> KV entries per layer: an encoder (the base with LoRA on q_proj, v_proj) reads the segment with num_memory
 * copies of a learned <mem> vector appended, and a transfer head (k_proj, v_proj with their own LoRA) turns the
 * <mem> rows' hidden states into keys and values. A context decodes over [memory | raw tokens | new tokens] at
 * positions 0..N-1; new tokens gather in an accumulator and each full segment is compressed, its raw KV dropped,
 * during prompts and generation alike — as the reference does, so its logits are reproduced (tests/unit/test_uio.c).
 * The UIO directory (mnemo_model_params.uio_dir) holds uio_config.json (the reference's keys: num_memory,
 * lora_rank, lora_alpha, lora_dropout, chunk_size) and either the reference's checkpoint uio.pth (torch.save of a
 * list of tensors) or mnemo's uio.safetensors (named tensors; tests/fixtures/uio/README.md lists both).
 * A context's n_ctx bounds memory + raw positions (the reference: 4096, ~99K tokens at 32x; uio_mem_budget lifts
 * this, see mnemo_context_params); mnemo_decode takes
 * inputs of any length that fit it; a mnemo_decode_batch entry must not cross a segment boundary (the segment it
 * completes is compressed before that context's next step). Snapshots, mnemo_context_memory and the progress
 * callback work as for LongLLaMA; a cancelled or failed decode resets the context. */
typedef struct {
    int32_t chunk_size;   /* C: tokens per compressed segment */
    int32_t num_memory;   /* M: <mem> entries per segment and layer (compression ratio C / M) */
    int32_t lora_rank;    /* r of both LoRAs */
    double lora_alpha;    /* their scale is lora_alpha / lora_rank */
    const char *file;     /* "uio.pth" or "uio.safetensors": the file read */
    uint64_t n_params;    /* UIO parameters loaded */
} mnemo_uio_info;
/* MNEMO_OK with *out filled for a model loaded with a UIO directory; MNEMO_ERR_UNSUPPORTED for any other model. */
MNEMO_API mnemo_status mnemo_model_uio(const mnemo_model *model, mnemo_uio_info *out);

/* ---------------------------------------------------------------- tokenizer (thread-safe on a shared model) */
/* Encode len bytes of UTF-8 text. Writes up to cap ids; *n_out receives the number of ids the text needs.
 * Returns MNEMO_ERR_TOO_SMALL when cap < *n_out. */
MNEMO_API mnemo_status mnemo_tokenize(const mnemo_model *model, const char *text, size_t len, bool add_bos,
                                      mnemo_token *out, int32_t cap, int32_t *n_out);
/* The same, but the vocabulary's control tokens written as text ("<|im_start|>") become their ids, as a chat
 * template's rendered text needs (Hugging Face and llama.cpp tokenize a rendered conversation so). A SentencePiece
 * vocabulary has no such text: the same as mnemo_tokenize. */
MNEMO_API mnemo_status mnemo_tokenize_special(const mnemo_model *model, const char *text, size_t len, bool add_bos,
                                              mnemo_token *out, int32_t cap, int32_t *n_out);
/* Whether the vocabulary starts a sequence with BOS (SentencePiece models with a BOS: yes; byte-level BPE ones as
 * their file says, e.g. Llama 3 yes, SmolLM2 no): chat templates and prompts add it only then. */
MNEMO_API bool mnemo_model_adds_bos(const mnemo_model *model);
/* Decode ids to UTF-8 text (no terminating NUL counted in *len_out; one is written when room allows).
 * MNEMO_ERR_INVALID_ARG for an id outside the vocabulary, MNEMO_ERR_TOO_SMALL when cap is too small. */
MNEMO_API mnemo_status mnemo_detokenize(const mnemo_model *model, const mnemo_token *tokens, int32_t n, char *out,
                                        size_t cap, size_t *len_out);
/* The SentencePiece piece of one id (e.g. "\xe2\x96\x81the", "<0x0A>"), same buffer rules as mnemo_detokenize. */
MNEMO_API mnemo_status mnemo_token_to_piece(const mnemo_model *model, mnemo_token token, char *out, size_t cap,
                                            size_t *len_out);

/* ---------------------------------------------------------------- chat templates
 * Chat messages -> prompt, for the templates mnemo knows by heart (mnemo-server's chat completions and the chat
 * format of training data). A template renders into a sink of text pieces and special tokens (BOS/EOS), so that
 * "<s>" in a message stays text and never becomes a control token; the caller tokenizes the text between specials.
 * Jinja is not interpreted: a checkpoint's tokenizer_config.json chat_template is recognised by its markers.
 *
 *   llama2  <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] {user} [/INST]
 *           (Meta's Llama-2-chat format; contents stripped of surrounding whitespace; after an optional first
 *           system message, roles must alternate user/assistant/user/...)
 *   chatml  <s><|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n   (stop: "<|im_end|>")
 *   plain   <s>{role}: {content}\n ... assistant:                                      (stop: "\nuser:")
 *   llama3  <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|> ...
 *           <|start_header_id|>assistant<|end_header_id|>\n\n       (Meta's Llama 3; contents trimmed; stop: "<|eot_id|>")
 *
 * The sink marks the pieces of each assistant message's answer — what the model produces after a prompt rendered
 * with the generation prompt, up to and including the end of its turn: llama2 " {content} " + EOS, chatml
 * "{content}<|im_end|>", plain " {content}\n" — so that training can put the loss there. Every other piece (the
 * framing, the other roles' contents, chatml's "\n" after "<|im_end|>") is unmarked. */
typedef enum { MNEMO_CHAT_LLAMA2 = 0, MNEMO_CHAT_CHATML = 1, MNEMO_CHAT_PLAIN = 2, MNEMO_CHAT_LLAMA3 = 3 } mnemo_chat_template;
#define MNEMO_CHAT_TEMPLATE_DEFAULT MNEMO_CHAT_LLAMA2 /* when a model names no template mnemo knows */

typedef enum { MNEMO_ROLE_SYSTEM = 0, MNEMO_ROLE_USER = 1, MNEMO_ROLE_ASSISTANT = 2 } mnemo_chat_role;

typedef struct {
    mnemo_chat_role role;
    const char *content; /* len bytes of UTF-8 (need not be NUL-terminated) */
    size_t len;
} mnemo_chat_msg;

typedef enum { MNEMO_CHAT_BOS = 1, MNEMO_CHAT_EOS = 2 } mnemo_chat_special;

/* Receives a render in order. answer: the piece belongs to an assistant message's answer (see above). A nonzero
 * return stops the render (MNEMO_ERR_CANCELLED). */
typedef struct {
    int (*text)(void *user, const char *s, size_t n, bool answer);
    int (*special)(void *user, mnemo_chat_special which, bool answer);
    void *user;
} mnemo_chat_sink;

/* "llama2", "chatml", "plain", "llama3" <-> mnemo_chat_template. parse: MNEMO_OK, or MNEMO_ERR_INVALID_ARG for any other
 * name; name: "?" for an unknown value. */
MNEMO_API mnemo_status mnemo_chat_template_parse(const char *name, mnemo_chat_template *out);
MNEMO_API const char *mnemo_chat_template_name(mnemo_chat_template tmpl);
/* The stop string the template implies, NULL for none (llama2 ends with EOS): generation must end at the next
 * turn's marker. */
MNEMO_API const char *mnemo_chat_template_stop(mnemo_chat_template tmpl);
/* Recognises a Jinja chat template by its markers: "[INST]" -> llama2, "<|im_start|>" -> chatml,
 * "<|start_header_id|>" -> llama3. MNEMO_OK, or MNEMO_ERR_UNSUPPORTED (*out then the default). */
MNEMO_API mnemo_status mnemo_chat_template_classify(const char *jinja, mnemo_chat_template *out);
/* Reads <model_dir>/tokenizer_config.json (at most 64 MiB) and recognises its chat_template, a string or the
 * "default" entry of a list (see mnemo_chat_template_classify); for a GGUF file its tokenizer.chat_template. *out always receives a template: the
 * one recognised, else MNEMO_CHAT_TEMPLATE_DEFAULT. MNEMO_OK when recognised; MNEMO_ERR_IO when there is nothing to
 * recognise (no tokenizer_config.json, or none with a chat_template; why ""); MNEMO_ERR_UNSUPPORTED when the
 * chat_template is not one mnemo knows, MNEMO_ERR_FORMAT when the file is not JSON or too large (why says what
 * was seen, naming the file). */
MNEMO_API mnemo_status mnemo_chat_template_detect(const char *model_dir, mnemo_chat_template *out, char *why,
                                                  size_t whylen);
/* Renders the n messages into sink, then (add_generation_prompt) the opening of the assistant's turn — chatml
 * "<|im_start|>assistant\n", plain "assistant:"; llama2 has none: a user turn ends with " [/INST]". Training data
 * renders without it and ends with an assistant message. MNEMO_OK; MNEMO_ERR_INVALID_ARG when the conversation
 * does not fit the template (checked before anything is sent), with the reason in err and *bad_msg the index of
 * the message whose role is wrong, or -1 when the conversation as a whole is (or msgs, sink or tmpl is invalid);
 * MNEMO_ERR_CANCELLED when a sink callback returned nonzero (nothing more is sent). bad_msg and err may be NULL. */
MNEMO_API mnemo_status mnemo_chat_template_render(mnemo_chat_template tmpl, const mnemo_chat_msg *msgs, int32_t n,
                                                  bool add_generation_prompt, const mnemo_chat_sink *sink,
                                                  int32_t *bad_msg, char *err, size_t errlen);

/* ---------------------------------------------------------------- context */
/* kNN index over a LongLLaMA memory (mem_knn_k > 0): exact inner product (FAISS IndexFlatIP), brute
 * force in C, or approximate: FAISS IVF (256 cells) / HNSW, or IVF_GROW, whose cell count grows with the memory
 * so a query costs the same at any length — the one for 100K+ token prefills (linear time; recall < 1 and falling
 * slowly with length, see tests/bench/RESULTS.md; exact below 8192 rows). AUTO, the default: IVF_GROW when the
 * model runs on the CPU, FLAT on a GPU (there the exact top-k runs on the device, cheaper than a host search). */
typedef enum {
    MNEMO_MEM_INDEX_FLAT = 0,
    MNEMO_MEM_INDEX_BRUTE = 1,
    MNEMO_MEM_INDEX_IVF = 2,
    MNEMO_MEM_INDEX_HNSW = 3,
    MNEMO_MEM_INDEX_IVF_GROW = 4,
    MNEMO_MEM_INDEX_AUTO = 5,
} mnemo_mem_index;

/* Defaults of LongLLaMA memory attention (mnemo_context_default_params): dense while a memory holds at most
 * MNEMO_MEM_DENSE_ROWS_DEFAULT rows — exact, and no slower than a search there — then the top
 * MNEMO_MEM_KNN_K_DEFAULT rows per query and head through the AUTO index, so cost per token stays flat instead of
 * growing with the memory (a 93K-token prompt: 9x faster on the CPU). mem_knn_k = 0 keeps the released
 * checkpoints' dense attention at every length (bit-faithful reproduction). */
#define MNEMO_MEM_KNN_K_DEFAULT 128
#define MNEMO_MEM_DENSE_ROWS_DEFAULT 8192

/* Which memory a context gets. MODEL: the model's own (LongLLaMA memory layers, UIO compression, or none for a
 * plain LLaMA). RETRIEVAL: training-free retrieval memory (InfLLM) for a plain RoPE LLaMA: the first ret_sinks
 * tokens and the last ret_window stay in the KV cache; older tokens move, per layer and KV head, into memory in
 * blocks of ret_block tokens (keys before RoPE), and each forward step attends to the top ret_topk blocks (by
 * ret_reps representative keys per block) in one softmax with the cache. No length limit; n_ctx is ignored (the
 * cache is ret_sinks + ret_window rows, which must fit max_position_embeddings). See docs/retrieval-memory.md. */
typedef enum { MNEMO_MEMORY_MODEL = 0, MNEMO_MEMORY_RETRIEVAL = 1 } mnemo_memory_mode;
/* Storage dtype of retrieval memory's keys and values. */
typedef enum { MNEMO_MEM_F32 = 0, MNEMO_MEM_BF16 = 1, MNEMO_MEM_F16 = 2 } mnemo_mem_dtype;
/* Retrieval defaults (mnemo_context_default_params): InfLLM's proportions fitted to SmolLM2-135M's 8192 positions
 * (first passkey figures in tests/bench/RESULTS.md; not tuned yet). */
#define MNEMO_RET_SINKS_DEFAULT 64
#define MNEMO_RET_WINDOW_DEFAULT 2048
#define MNEMO_RET_TOPK_DEFAULT 16
#define MNEMO_RET_BLOCK_DEFAULT 128
#define MNEMO_RET_REPS_DEFAULT 4

typedef struct {
    int32_t n_ctx;     /* KV cache length in tokens; 0 = the model's max_position_embeddings. LongLLaMA: the local
                        * window is always max_position_embeddings and the context has no length limit. UIO: the
                        * positions of <mem> entries + raw tokens (at least chunk_size + num_memory) */
    int32_t n_batch;   /* most tokens one forward step processes; longer inputs are split; 0 = 512 */
    bool logits_all;   /* keep logits for every position of a mnemo_decode call (else only the last) */
    /* LongLLaMA memory layers (ignored for other models; defaults above) */
    int32_t mem_knn_k;         /* 0: every memory row (dense, as released); k > 0: the top-k rows per query and head
                                * once the memory holds more than mem_dense_rows rows */
    mnemo_mem_index mem_index; /* the kNN index (used when mem_knn_k > 0) */
    uint64_t mem_max_bytes;    /* refuse to grow memory (keys + values + index) past this; 0 = no limit */
    int32_t mem_nprobe;        /* IVF and IVF_GROW: cells a query scans; 0 = 16. More: higher recall, slower
                                * (IVF: at most its 256 cells) */
    int64_t mem_dense_rows;    /* with mem_knn_k > 0: attention stays dense while a memory holds at most this many
                                * rows (0: kNN from the first row) */
    /* UIO models (ignored for others; 0 = the reference's behaviour; see docs/uio-compression.md).
     * uio_keep_raw > 0 is not combined with uio_mem_budget > 0 or uio_encode_batch > 1: mnemo_context_new refuses
     * either pair (MNEMO_ERR_INVALID_ARG, naming both options) */
    int32_t uio_keep_raw;      /* W, 0 .. chunk_size: after a compression the segment's last W tokens stay raw next
                                * to the new memory, so the next token does not see memory only (0 = the reference;
                                * see docs/uio-compression.md for their positions) */
    int32_t uio_mem_budget;    /* N > 0: at most N <mem> entries stay in the KV cache; older ones move to a kNN
                                * memstore (mem_index, mem_knn_k, mem_dense_rows, mem_nprobe, mem_max_bytes as for
                                * LongLLaMA), attended "at position 0" in the same softmax, so n_ctx bounds N + one
                                * segment instead of the whole memory. Needs n_ctx >= N + chunk_size */
    int32_t uio_encode_batch;  /* > 1: whole segments of a mnemo_decode call are compressed this many per encoder
                                * forward, and (without logits_all) the decoder skips them, as only the last token's
                                * logits are kept: the same result (within 1e-5), faster prefill. 0 or 1: one by one */
    /* Retrieval memory (memory = MNEMO_MEMORY_RETRIEVAL; defaults MNEMO_RET_*). mnemo_context_new refuses
     * (MNEMO_ERR_INVALID_ARG, with a message) ret_window < 2 * ret_block, ret_sinks > ret_window, ret_sinks +
     * ret_window past max_position_embeddings, ret_topk or ret_block or ret_reps < 1, ret_reps > ret_block, and
     * retrieval over a LongLLaMA or UIO model. mem_index chooses the block search, mem_max_bytes bounds it. */
    mnemo_memory_mode memory;
    int32_t ret_sinks;         /* S: first tokens kept in the cache for good (attention sinks), 0 .. ret_window */
    int32_t ret_window;        /* W: latest tokens kept in the cache (the local window) */
    int32_t ret_topk;          /* k: memory blocks each forward step retrieves per layer and KV head */
    int32_t ret_block;         /* B: tokens per memory block */
    int32_t ret_reps;          /* r: representative keys per block, 1 .. ret_block */
    mnemo_mem_dtype ret_dtype; /* memory keys and values: f32 (default), bf16 or f16 */
    /* Kernel settings: "name=value,..." (NULL: the defaults), which of several kernel paths this context's forward
     * takes: cpu.gemm=fast|exact, cpu.f32gemm=on|off, cpu.qpanel=on|off, cuda.gemm=split|fast,
     * cuda.attn=simt|tc|mma, cuda.gemv_split=auto|1|2|4, cuda.dec_blocks_per_sm=auto|1..64 (mnemo_kernel_settings
     * lists them; docs/kernel-settings.md says what each does). Each backend applies its own. mnemo_context_new
     * refuses an unknown name or value (MNEMO_ERR_INVALID_ARG, with a message). The string is read only there. */
    const char *kernel_settings;
} mnemo_context_params;

MNEMO_API mnemo_context_params mnemo_context_default_params(void);
/* The kernel settings mnemo_context_params.kernel_settings takes, i in 0 .. mnemo_kernel_setting_count()-1: name
 * ("cpu.gemm"), values ("fast|exact") and what it chooses. false past the end. */
MNEMO_API int mnemo_kernel_setting_count(void);
MNEMO_API bool mnemo_kernel_setting(int i, const char **name, const char **values, const char **doc);
/* "flat", "brute", "ivf", "ivf-grow", "hnsw", "auto" <-> mnemo_mem_index (for command lines and configs).
 * parse: MNEMO_OK, or MNEMO_ERR_INVALID_ARG for any other name; name: "?" for an unknown value. */
MNEMO_API mnemo_status mnemo_mem_index_parse(const char *name, mnemo_mem_index *out);
MNEMO_API const char *mnemo_mem_index_name(mnemo_mem_index index);
/* The index a context of this model gets for `index` (AUTO resolved by the model's backend; others unchanged). */
MNEMO_API mnemo_mem_index mnemo_mem_index_resolve(const mnemo_model *model, mnemo_mem_index index);
/* "model", "retrieval" <-> mnemo_memory_mode; "f32", "bf16", "f16" <-> mnemo_mem_dtype (command lines, configs).
 * parse: MNEMO_OK, or MNEMO_ERR_INVALID_ARG for any other name; name: "?" for an unknown value. */
MNEMO_API mnemo_status mnemo_memory_mode_parse(const char *name, mnemo_memory_mode *out);
MNEMO_API const char *mnemo_memory_mode_name(mnemo_memory_mode mode);
MNEMO_API mnemo_status mnemo_mem_dtype_parse(const char *name, mnemo_mem_dtype *out);
MNEMO_API const char *mnemo_mem_dtype_name(mnemo_mem_dtype dtype);
MNEMO_API mnemo_status mnemo_context_new(mnemo_model *model, const mnemo_context_params *params,
                                         mnemo_context **out);
MNEMO_API void mnemo_context_free(mnemo_context *ctx);
MNEMO_API const char *mnemo_context_error(const mnemo_context *ctx);
/* Forget every token: position back to 0, KV cache emptied. */
MNEMO_API void mnemo_context_reset(mnemo_context *ctx);
/* Prefix reuse (llama.cpp's cache_prompt, vLLM's prefix caching): keeps the first n tokens the context holds and
 * forgets the rest, so that a prompt sharing them decodes only what follows. tokens: those first n tokens, as the
 * caller recorded them (they become the context for detokenization). *kept receives how many were kept: n for a
 * plain LLaMA context; a LongLLaMA context whose memory took tokens past n cuts its memory back to the last window
 * moved at or before n (fewer); a UIO context cannot cut its compressed memory and forgets everything (0). The next
 * decode computes logits again. MNEMO_ERR_INVALID_ARG when n > mnemo_context_n_past (nothing changes). */
MNEMO_API mnemo_status mnemo_context_keep_prefix(mnemo_context *ctx, const mnemo_token *tokens, int32_t n,
                                                 int32_t *kept);
MNEMO_API int32_t mnemo_context_n_past(const mnemo_context *ctx);
MNEMO_API int32_t mnemo_context_n_ctx(const mnemo_context *ctx);
/* Bytes of KV cache this context holds allocated (keys + values, all layers, n_ctx positions). */
MNEMO_API uint64_t mnemo_context_kv_bytes(const mnemo_context *ctx);

/* ---- LongLLaMA memory (models whose config.json has mem_layers)
 * mnemo_decode on such a context follows the reference's long-input handling: all but the last
 * last_context_length tokens go through in windows of max_position_embeddings whose keys and values land in
 * the memory layers' memory; the tail stays in the local window; decoding continues there, and a full window
 * moves to memory. */
/* Tokens of the next mnemo_decode calls kept local: 1 .. max_position_embeddings; 0 = config.json's value. */
MNEMO_API mnemo_status mnemo_context_set_last_context_length(mnemo_context *ctx, int32_t n);
/* The current last_context_length: also the longest entry mnemo_decode_batch accepts for this context (longer
 * inputs go through mnemo_decode). 0 for plain LLaMA contexts. */
MNEMO_API int32_t mnemo_context_last_context_length(const mnemo_context *ctx);
/* The longest entry mnemo_decode_batch accepts for this context now (longer inputs go through mnemo_decode): plain
 * LLaMA n_ctx - n_past, LongLLaMA last_context_length, UIO the tokens until the next compression (an entry must not
 * cross a segment boundary) or fewer when its positions run out. 0: not one more token fits (or ctx is NULL). */
MNEMO_API int32_t mnemo_context_entry_max(const mnemo_context *ctx);
typedef struct {
    int32_t local_tokens;  /* tokens in the local window (UIO: raw tokens not compressed yet) */
    uint64_t mem_tokens;   /* tokens in memory (each memory layer holds them all; UIO: tokens compressed) */
    uint64_t local_kv_bytes, mem_key_bytes, mem_value_bytes, mem_index_bytes;
    uint64_t mem_entries;  /* rows each memory layer holds: LongLLaMA one per token; UIO num_memory per segment */
} mnemo_memory_stats;
/* Memory by kind; for a plain LLaMA context, local_kv_bytes = mnemo_context_kv_bytes and the rest 0. UIO: the
 * <mem> entries (mem_key_bytes + mem_value_bytes) live in the KV cache's first rows; local_kv_bytes is the rest
 * (with uio_mem_budget, mem_* also count the stored entries, their index and the cache entries' pre-RoPE keys). */
MNEMO_API mnemo_status mnemo_context_memory(const mnemo_context *ctx, mnemo_memory_stats *out);

/* ---- progress of long inputs
 * fn is called from inside mnemo_decode (and so mnemo_generate's prompt step) after every forward step of a call
 * that needs more than one — chunks of n_batch tokens, LongLLaMA memory windows, or the pieces of a UIO input cut
 * at segment boundaries — with the call's tokens done so far and its total; the last report has done == total (its
 * return value is ignored). Returning false before that stops the call with MNEMO_ERR_CANCELLED:
 * a plain LLaMA context is then as before the call; a LongLLaMA or UIO context is reset (its memory cannot be
 * rolled back). fn == NULL turns reporting off. It runs on the thread running the decode. */
typedef bool (*mnemo_progress_fn)(int64_t done, int64_t total, void *user);
MNEMO_API void mnemo_context_set_progress(mnemo_context *ctx, mnemo_progress_fn fn, void *user);

/* ---- session snapshots
 * mnemo_context_save writes the context's state — its cached tokens' keys and values, for LongLLaMA the local window
 * and every memory layer's memory, for UIO the <mem> entries, the raw tokens and the accumulator — to one file
 * (versioned, model fingerprint, CRC-32; written to a unique path.tmp.XXXXXX, synced and renamed, so a crash never
 * leaves half a file and two saves to one path each leave a whole one). mnemo_context_load replaces a context's state
 * with a saved one: a long document is ingested once and queried many times. The model must be the same (the
 * fingerprint hashes its config and weight samples, and a UIO model's settings and UIO weight samples) and the state
 * must fit the context (n_ctx; mem_max_bytes); a corrupt, truncated or foreign file is refused with a message
 * (MNEMO_ERR_FORMAT, _INVALID_ARG, _CONTEXT_FULL) and leaves the context as it was. After a load,
 * mnemo_get_logits(ctx, -1) returns the saved context's last logits (when it had them) and every later decode gives
 * what the saved context would have given. The context keeps its own parameters (n_batch, mem_knn_k); a memory's index
 * is rebuilt as it was saved. A UIO snapshot records uio_keep_raw and loads only into a context with the same value
 * (MNEMO_ERR_FORMAT otherwise). */
MNEMO_API mnemo_status mnemo_context_save(mnemo_context *ctx, const char *path);
MNEMO_API mnemo_status mnemo_context_load(mnemo_context *ctx, const char *path);

/* Run the model over n tokens that follow the context's current position, appending them to the KV cache.
 * On failure the context is left as it was before the call. */
MNEMO_API mnemo_status mnemo_decode(mnemo_context *ctx, const mnemo_token *tokens, int32_t n);
/* One entry of a multi-context batch: n tokens appended to ctx. */
typedef struct {
    mnemo_context *ctx;
    const mnemo_token *tokens;
    int32_t n;
} mnemo_batch_entry;

/* Decode several contexts of the same model in ONE forward pass: every weight matrix is read once for all of
 * them, so k sequences decoding together cost about as much as one (continuous batching in a server). Each
 * entry acts as mnemo_decode on its context (same logits rules); contexts must be distinct. Entries are not
 * split: keep the total token count moderate (prefill long prompts in chunks). All-or-nothing: on any error
 * no context changes; the failing entry's context holds the message. */
MNEMO_API mnemo_status mnemo_decode_batch(const mnemo_batch_entry *entries, int32_t n_entries);
/* Logits (n_vocab floats) of position i of the last mnemo_decode call; i = -1 means its last token. NULL when
 * that position's logits were not kept (logits_all off) or i is out of range. Valid until the next decode. */
MNEMO_API const float *mnemo_get_logits(const mnemo_context *ctx, int32_t i);

/* ---------------------------------------------------------------- LoRA adapters
 * A Hugging Face peft LoRA adapter directory (adapter_config.json + adapter_model.safetensors or .bin) applied
 * without merging: each targeted projection (q,k,v,o,gate,up,down) computes x W^T + (alpha/r) (x A^T) B^T over the
 * model's own weights, as peft does. Several adapters can be loaded over one model; each context uses one or none.
 * Options peft has that would change the arithmetic and mnemo lacks (bias, DoRA, per-module ranks, a subset of
 * layers, modules_to_save) are refused with a message. *out always receives a handle (NULL only when even that
 * allocation failed); an adapter must outlive the contexts that use it. */
typedef struct mnemo_adapter mnemo_adapter;
MNEMO_API mnemo_status mnemo_adapter_load(const mnemo_model *model, const char *dir, mnemo_adapter **out);
MNEMO_API const char *mnemo_adapter_error(const mnemo_adapter *adapter); /* "" after success */
MNEMO_API void mnemo_adapter_free(mnemo_adapter *adapter);
/* The adapter a context decodes with from now on (NULL: the base model). The context is reset: its cache was
 * computed with other weights. MNEMO_ERR_MISUSE when the adapter belongs to another model or failed to load. */
MNEMO_API mnemo_status mnemo_context_set_adapter(mnemo_context *ctx, const mnemo_adapter *adapter);

/* Writes out_dir (created if needed; never the model's own directory): the checkpoint of model_dir with the adapter
 * of adapter_dir merged into its weights (W + (alpha/r) B A, each weight in its stored dtype), as one
 * model.safetensors plus the base's config.json and tokenizer files — a plain checkpoint for mnemo or transformers.
 * MNEMO_OK, or an error with the reason in err. */
MNEMO_API mnemo_status mnemo_export_merged(const char *model_dir, const char *adapter_dir, const char *out_dir,
                                           char *err, size_t errlen);

/* Writes the Hugging Face checkpoint in model_dir (LlamaForCausalLM or LongLlamaForCausalLM) as one GGUF file at
 * out_path, matrices in type: "q8_0", "q4_0", "q4_K", "q6_K" (GGML's block formats), "f16", "bf16" or "f32". The
 * file follows llama.cpp's llama architecture (llama.cpp loads it too); LongLLaMA settings and the original
 * tokenizer.model ride along under mnemo.* keys. mnemo_model_load takes the file in place of a directory. Rows that
 * are not whole 32-blocks stay f16 and norms f32, as llama.cpp's converter does; q4_K / q6_K rows that are not
 * whole 256-blocks take q5_0 / q8_0. model_dir may also be a GGUF file (llama architecture): its tensors are
 * dequantized and written in type, its tokenizer metadata (SentencePiece or byte-level BPE, chat template) copied
 * as it is. MNEMO_OK, or an error with the reason in err. */
MNEMO_API mnemo_status mnemo_quantize(const char *model_dir, const char *type, const char *out_path, char *err,
                                      size_t errlen);

/* ---------------------------------------------------------------- embeddings
 * One vector for a sequence of tokens: the context is reset, the n tokens (as given: add BOS yourself, as
 * mnemo_tokenize(add_bos) does) run through the model as one sequence in chunks of n_batch, and the last hidden
 * state after the final RMSNorm is averaged over the n positions and L2-normalised (mean pooling). out receives
 * n_out == mnemo_model_n_embd floats. The context is empty (reset) afterwards.
 * Plain LLaMA: n <= n_ctx. LongLLaMA: n <= max_position_embeddings, the local window, run with an empty memory
 * (a pooled state over memory would depend on how the input was split into windows).
 * MNEMO_ERR_INVALID_ARG: n <= 0, a token outside the vocabulary, out NULL or n_out != n_embd;
 * MNEMO_ERR_CONTEXT_FULL: n past the limit above. */
MNEMO_API mnemo_status mnemo_embed(mnemo_context *ctx, const mnemo_token *tokens, int32_t n, float *out,
                                   int32_t n_out);

/* ---------------------------------------------------------------- sampling */
typedef struct {
    float temperature;        /* 0 = greedy (argmax after penalties) */
    int32_t top_k;            /* keep the k most likely; 0 = off */
    float top_p;              /* nucleus mass; 1 = off */
    float min_p;              /* drop tokens with p < min_p * p_max; 0 = off */
    float repetition_penalty; /* CTRL/HF style: divide positive logits, multiply negative ones; 1 = off */
    float presence_penalty;   /* OpenAI style: subtract once per token seen; 0 = off */
    float frequency_penalty;  /* OpenAI style: subtract count * value; 0 = off */
    int32_t penalty_last_n;   /* how many past tokens the penalties look at; -1 = all */
    uint64_t seed;            /* the same seed, settings and logits give the same tokens */
} mnemo_sampler_params;

typedef struct {
    mnemo_token id;
    float logprob;
} mnemo_token_logprob;

MNEMO_API mnemo_sampler_params mnemo_sampler_default_params(void);
MNEMO_API mnemo_status mnemo_sampler_new(const mnemo_sampler_params *params, mnemo_sampler **out);
MNEMO_API void mnemo_sampler_free(mnemo_sampler *s);
/* Forget the token history (penalties) and re-seed. */
MNEMO_API void mnemo_sampler_reset(mnemo_sampler *s);
/* Record a token as part of the history (prompt tokens and each sampled token). */
MNEMO_API void mnemo_sampler_accept(mnemo_sampler *s, mnemo_token token);
/* Pick a token from n_vocab logits (not modified). */
MNEMO_API mnemo_status mnemo_sampler_sample(mnemo_sampler *s, const float *logits, int32_t n_vocab,
                                            mnemo_token *out);
/* Log-probabilities under the model's own distribution (log_softmax of the raw logits, before any sampling
 * setting): *chosen_logprob for token, and the n_top most likely tokens, best first, into top[0..n_top). */
MNEMO_API mnemo_status mnemo_logprobs(const float *logits, int32_t n_vocab, mnemo_token token, int32_t n_top,
                                      mnemo_token_logprob *top, float *chosen_logprob);

/* ---------------------------------------------------------------- generation */
#define MNEMO_MAX_LOGPROBS 20

typedef enum {
    MNEMO_FINISH_LENGTH = 0,    /* max_tokens reached */
    MNEMO_FINISH_STOP = 1,      /* a stop string matched (it is not part of the text) */
    MNEMO_FINISH_EOS = 2,       /* the model produced an end-of-generation token */
    MNEMO_FINISH_CANCELLED = 3, /* the callback returned false */
    MNEMO_FINISH_CONTEXT = 4,   /* the context window is full */
} mnemo_finish_reason;

typedef struct {
    mnemo_sampler_params sampling;
    int32_t max_tokens;          /* most tokens to generate */
    const char *const *stop;     /* n_stop stop strings; text ends before the first match */
    int32_t n_stop;
    int32_t n_logprobs;          /* 0 = none; else the top-n alternatives per token (<= MNEMO_MAX_LOGPROBS) */
    bool add_bos;                /* prepend BOS when the context is empty */
    bool ignore_eos;             /* keep generating past end-of-generation tokens */
} mnemo_generate_params;

/* One generated token. text holds the UTF-8 text that becomes final with this token: it may be empty while
 * an incomplete UTF-8 character or a possible stop-string prefix is held back, and it is never half a character.
 * The event with is_last set carries whatever was held back (minus a matched stop string). */
typedef struct {
    mnemo_token token;
    const char *text;
    size_t text_len;
    float logprob;                   /* of token under the model's distribution (when n_logprobs > 0) */
    const mnemo_token_logprob *top;  /* n_top alternatives, best first */
    int32_t n_top;
    bool is_last;
} mnemo_token_event;

/* Return false to stop generation (finish reason CANCELLED). */
typedef bool (*mnemo_token_callback)(const mnemo_token_event *ev, void *user);

typedef struct {
    int32_t n_prompt_tokens;
    int32_t n_generated;
    mnemo_finish_reason finish_reason;
    double prefill_ms;
    double decode_ms;
} mnemo_generate_result;

MNEMO_API mnemo_generate_params mnemo_generate_default_params(void);
/* Tokenize prompt, append it to the context, then sample up to max_tokens, calling cb (may be NULL) per token.
 * The context keeps everything (prompt and generated tokens) for a follow-up call. */
MNEMO_API mnemo_status mnemo_generate(mnemo_context *ctx, const char *prompt, const mnemo_generate_params *params,
                                      mnemo_token_callback cb, void *user, mnemo_generate_result *result);
/* Same, from token ids. */
MNEMO_API mnemo_status mnemo_generate_tokens(mnemo_context *ctx, const mnemo_token *prompt, int32_t n_prompt,
                                             const mnemo_generate_params *params, mnemo_token_callback cb,
                                             void *user, mnemo_generate_result *result);

/* ---------------------------------------------------------------- step-wise generation (for schedulers)
 * mnemo_generate is a loop over these. A scheduler that batches many contexts runs the loop itself:
 *     decode the prompt (in chunks, batched with other contexts via mnemo_decode_batch)
 *     g = mnemo_generation_new(ctx, params, prompt, n_prompt)
 *     loop: mnemo_generation_step(g, &ev)  -> stream ev.text;  if ev.is_last: done
 *           decode ev.token into ctx (alone or in a mnemo_decode_batch with other contexts' tokens)
 * A step samples from the context's latest logits, so the caller must decode each non-last token before the
 * next step (the last token may be decoded too, to keep it in the context). */
typedef struct mnemo_generation mnemo_generation;

/* history: the tokens the penalties should already count (normally the prompt); may be NULL/0. */
MNEMO_API mnemo_status mnemo_generation_new(mnemo_context *ctx, const mnemo_generate_params *params,
                                            const mnemo_token *history, int32_t n_history,
                                            mnemo_generation **out);
/* One token. ev stays valid until the next step or free. After the last event, further steps return
 * MNEMO_ERR_MISUSE. */
MNEMO_API mnemo_status mnemo_generation_step(mnemo_generation *g, mnemo_token_event *ev);
MNEMO_API mnemo_finish_reason mnemo_generation_finish_reason(const mnemo_generation *g);
MNEMO_API int32_t mnemo_generation_n_generated(const mnemo_generation *g);
MNEMO_API void mnemo_generation_free(mnemo_generation *g);

#ifdef __cplusplus
}
#endif

/* Training (mnemo_train_params, mnemo_trainer_*), on the types above. */
#include "engine_train.h"

#endif /* MNEMO_ENGINE_H */
