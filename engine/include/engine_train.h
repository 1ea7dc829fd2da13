/*
 * engine_train.h — libengine's training API: fine-tuning settings (mnemo_train_params), the trainer
 * (mnemo_trainer_*), a training file's check and a randomly initialised checkpoint. engine.h includes it, so a
 * program includes engine.h alone; it stands apart so that inference's header is not half training settings.
 */
#ifndef MNEMO_ENGINE_TRAIN_H
#define MNEMO_ENGINE_TRAIN_H

#include "engine.h" /* mnemo_status, mnemo_model, mnemo_model_params, MNEMO_API */

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- training
 * Fine-tuning a LLaMA (or LongLLaMA: fot_schedule) checkpoint on the CPU or a CUDA GPU (every method): LoRA (peft's
 * arithmetic and file format), LoRA+ (LongLoRA: the adapter plus the embeddings and every norm) or every weight,
 * AdamW or SGD, checkpoints that resume bit for bit.
 * A trainer owns its own copy of the model (full fine-tuning rewrites the weights in fp32).
 *
 * Data (.txt: one stream of BOS + ids cut into windows of seq_len + 1 overlapping by one; .jsonl: one
 * {"prompt","completion"} or {"messages":[...]} example per line, the loss on the completion / assistant tokens
 * only, one example per row padded at its end). Every step takes batch * grad_accum rows; the loss is the mean
 * cross-entropy over every counted token of the step. Schedules and clipping are transformers' and torch's.
 *
 * out_dir receives, at every checkpoint and at the end:
 *   LoRA:  adapter_config.json + adapter_model.safetensors (peft; mnemo_adapter_load, --adapter, PeftModel load it)
 *   LoRA+: the same + trainable_params.safetensors (the trained embeddings and norms, fp32; merge it to serve:
 *          mnemo_export_merged)
 *   full:  model.safetensors (trained tensors fp32, the rest as stored) + config.json + tokenizer files
 *   always: train_state.mnemo, what --resume needs: the trained tensors, the optimizer's moments, the step, in a
 *          checksummed file tied to the model, the data and the settings (written to a temp name and renamed, so
 *          a run killed at any moment resumes from its last checkpoint and gives the same losses and final
 *          weights, bit for bit, as a run never stopped — with the same number of threads). */
/* UIO: a UIO-LLM's encoder LoRA (q, v), transfer-head LoRA (k, v) and <mem> token over the frozen base
 * (lora_rank / lora_alpha their rank and alpha), trained over documents of seq_len tokens cut into uio_chunk-token
 * segments with the paper's unbiased incremental TBPTT (engine/src/train/uio_train.h); out_dir receives a UIO
 * directory (uio_config.json + uio.safetensors) that mnemo_model_params.uio_dir loads. */
typedef enum { MNEMO_TRAIN_LORA = 0, MNEMO_TRAIN_LORA_PLUS = 1, MNEMO_TRAIN_FULL = 2, MNEMO_TRAIN_UIO = 3 } mnemo_train_method;
typedef enum { MNEMO_OPTIM_ADAMW = 0, MNEMO_OPTIM_SGD = 1 } mnemo_optimizer;
typedef enum { MNEMO_LR_CONSTANT = 0, MNEMO_LR_LINEAR = 1, MNEMO_LR_COSINE = 2 } mnemo_lr_schedule;

typedef struct {
    int64_t step;        /* optimizer steps done (1 after the first) */
    int64_t total_steps;
    double loss;         /* the step's mean cross-entropy */
    double grad_norm;    /* global 2-norm of the gradient before clipping (what clip_grad_norm_ returns) */
    double lr;           /* the learning rate the step used */
    int64_t tokens;      /* positions trained on so far in this process (rows x seq_len per step) */
    double elapsed_s;    /* seconds of training so far in this process */
} mnemo_train_progress;

/* Called after every step; returning false cancels the run (it stops after saving a checkpoint). */
typedef bool (*mnemo_train_progress_fn)(const mnemo_train_progress *p, void *user);

typedef struct {
    const char *data;           /* training file (.txt or .jsonl) */
    const char *out_dir;        /* created if needed; never the model's own directory */
    mnemo_train_method method;  /* LoRA */
    int32_t lora_rank;          /* 8; 0 with init_adapter: the adapter's */
    double lora_alpha;          /* 16 (scale alpha / r) */
    const char *lora_targets;   /* "q,v": any of q,k,v,o,gate,up,down (or q_proj, ...), or "all" */
    const char *init_adapter;   /* NULL: A ~ U(-1/sqrt(in), 1/sqrt(in)) from seed, B = 0 (peft's init); else a peft
                                 * adapter directory to start from (its rank, alpha and targets) */
    int64_t steps;              /* optimizer steps; 0: from epochs */
    double epochs;              /* 1 (used when steps is 0): ceil(epochs * examples / (batch * grad_accum)) steps */
    int32_t batch;              /* 1 */
    int32_t seq_len;            /* 512 (at most the model's max_position_embeddings) */
    int32_t grad_accum;         /* 1 */
    double lr;                  /* 1e-4 */
    mnemo_lr_schedule schedule; /* constant */
    int64_t warmup;             /* 0: steps of linear warmup */
    mnemo_optimizer optimizer;  /* AdamW */
    double beta1, beta2, eps;   /* 0.9, 0.999, 1e-8 (AdamW) */
    double weight_decay;        /* 0: decoupled (AdamW) / L2 (SGD), on every trained tensor */
    double momentum;            /* 0 (SGD) */
    double grad_clip;           /* 1.0; 0: no clipping */
    uint64_t seed;              /* 0: the LoRA init and the shuffled order */
    bool shuffle;               /* true: each epoch in an order drawn from (seed, epoch) */
    int64_t checkpoint_every;   /* 0: only at the end (and when cancelled) */
    bool resume;                /* continue from out_dir's train_state.mnemo (settings must match) */
    bool recompute;             /* false: keep every layer's activations; true: recompute them in the backward */
    /* Long-context training. LongLoRA's recipe: s2_attn + LoRA+ + rope_scale. SMT: text data only. */
    bool s2_attn;               /* false; true: S²-Attn in training (groups of seq_len/4, half the heads shifted by
                                 * half a group, no wrap-around); inference keeps full attention */
    double rope_scale;          /* 0: the model's RoPE; F >= 1: linear position interpolation F in training, and
                                 * out_dir/config.json written with it and max_position_embeddings scaled to match
                                 * (mnemo_export_merged takes that config) */
    bool smt;                   /* false; true: sparse memory training: every row is seq_len + 1 - smt_sampled target
                                 * tokens after smt_sampled tokens sampled (with decay) from the smt_memory before
                                 * them, at their original positions; plus smt_beta x the plain loss of the row's
                                 * first seq_len + 1 tokens; out_dir/config.json gets max_position_embeddings
                                 * raised to the document length when that is longer */
    int64_t smt_memory;         /* 0: 4 x seq_len */
    int32_t smt_sampled;        /* 0: seq_len / 2 */
    int32_t smt_window;         /* initial sampling window W; 0: smt_sampled */
    int32_t smt_decay;          /* decay iterations; 0: no limit */
    double smt_beta;            /* 1 (mixed training); 0: SMT loss alone */
    const char *fot_schedule;   /* NULL: none. FoT cross-batch training of a LongLLaMA-layout model (mem_layers):
                                 * "1/4(0,0),1/4(1,1),1/4(2,1),1/4(3,0)" = per fraction of the rows, (previous
                                 * contexts of the same document, contexts of other documents) its memory layers see.
                                 * batch then counts documents of K rows of seq_len (K: the fractions' denominator),
                                 * each cut from K * seq_len + 1 tokens of the data (a .txt stream runs on into the
                                 * next document when one is shorter; a .jsonl line is one document, padded).
                                 * Refused with smt (SMT rows are sampled memory + target at their original
                                 * positions, FoT rows are consecutive contexts) and with s2_attn (FoT's memory
                                 * layers attend across rows; S²-Attn is not defined over that) */
    mnemo_train_progress_fn progress;
    void *progress_user;
    /* method UIO only */
    const char *uio_init;       /* NULL: fresh (A ~ U(+-1/sqrt(in)) from seed, B = 0, <mem> = embedding row 2); else
                                 * a UIO directory to start from (its chunk, memory count, rank and alpha) */
    int32_t uio_chunk;          /* C: tokens per segment (0 with uio_init: its own) */
    int32_t uio_num_memory;     /* M: <mem> entries per segment, C a multiple of M (0 with uio_init: its own) */
    int32_t tbptt_slots;        /* S: 2 (the paper's); encoder graphs kept by reservoir sampling; 0: full BPTT */
    bool tbptt_compensation;    /* true: memory gradients times max(1, (t-1)/S), the paper's unbiased factor */
} mnemo_train_params;

MNEMO_API mnemo_train_params mnemo_train_default_params(void);

/* Writes out_dir (created if needed): a checkpoint with config_path's config.json, randomly initialised weights as
 * transformers initialises a LLaMA (projections, embeddings and lm_head ~ N(0, initializer_range^2), default 0.02;
 * the pad_token_id embedding row 0; norms 1) drawn from seed (the same seed, the same file on every machine), one
 * fp32 model.safetensors, and the tokenizer: a tokenizer.model file, or a directory's tokenizer.model with its
 * tokenizer_config.json and the like. A LongLLaMA-layout config (mem_layers) gives a LongLLaMA checkpoint, e.g. to
 * train from scratch with fot_schedule. MNEMO_OK, or an error with the reason (file named) in err. */
MNEMO_API mnemo_status mnemo_init_random_checkpoint(const char *config_path, const char *tokenizer, uint64_t seed,
                                                    const char *out_dir, char *err, size_t errlen);

/* Reads and checks a training file for model as mnemo_trainer_new would (every line; every example within seq_len +
 * 1 tokens), without training: MNEMO_OK with *examples (may be NULL), or MNEMO_ERR_FORMAT / _IO with the message
 * (file and line) in err. Safe on a model other threads decode with (it only tokenizes). */
MNEMO_API mnemo_status mnemo_train_data_check(const mnemo_model *model, const char *path, int32_t seq_len,
                                              int64_t *examples, char *err, size_t errlen);

/* Loads model_dir (params: threads; device: the CPU unless CUDA is asked for), checks the settings, reads and checks
 * the whole data file (any problem named with file and line), sets up the trained tensors, and with resume loads the
 * checkpoint. Nothing is written yet. Refused: out_dir holding a train_state.mnemo without resume (it would be
 * overwritten), resume with none, a checkpoint of another model, data or settings. *out always receives a handle
 * (NULL only when even that allocation failed); on an error it holds the message (mnemo_trainer_error) and must
 * still be freed. */
typedef struct mnemo_trainer mnemo_trainer;
MNEMO_API mnemo_status mnemo_trainer_new(const char *model_dir, const mnemo_model_params *model_params,
                                         const mnemo_train_params *params, mnemo_trainer **out);
/* One optimizer step (grad_accum micro-batches). p (may be NULL) receives its figures. MNEMO_ERR_MISUSE past the
 * last step. */
MNEMO_API mnemo_status mnemo_trainer_step(mnemo_trainer *t, mnemo_train_progress *p);
/* The mean cross-entropy of the model as trained so far over every counted token of a data file (same formats and
 * checks as the training data; e.g. an OpenAI validation_file), in rows of batch x seq_len, without changing
 * anything. MNEMO_OK with *loss and *tokens (counted tokens; may be NULL), or an error (mnemo_trainer_error). */
MNEMO_API mnemo_status mnemo_trainer_evaluate(mnemo_trainer *t, const char *path, double *loss, int64_t *tokens);
/* Writes out_dir's outputs and train_state.mnemo for the steps done so far. */
MNEMO_API mnemo_status mnemo_trainer_save(mnemo_trainer *t);
/* Steps to the end: the progress callback after each step, a checkpoint every checkpoint_every steps and at the
 * end. MNEMO_ERR_CANCELLED (after a checkpoint) when the callback returned false or mnemo_trainer_cancel was
 * called. */
MNEMO_API mnemo_status mnemo_trainer_run(mnemo_trainer *t);
/* Asks a running mnemo_trainer_run to stop after its current step; safe from another thread or a signal handler. */
MNEMO_API void mnemo_trainer_cancel(mnemo_trainer *t);
MNEMO_API int64_t mnemo_trainer_steps_done(const mnemo_trainer *t);
MNEMO_API int64_t mnemo_trainer_total_steps(const mnemo_trainer *t);
/* Bytes of the activation workspace and of the trained tensors with their gradients and optimizer state. */
MNEMO_API void mnemo_trainer_memory(const mnemo_trainer *t, uint64_t *activation_bytes, uint64_t *state_bytes);
MNEMO_API const char *mnemo_trainer_error(const mnemo_trainer *t); /* "" after success */
MNEMO_API void mnemo_trainer_free(mnemo_trainer *t);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_ENGINE_TRAIN_H */
