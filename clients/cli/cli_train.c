/*
 * cli_train.c — `mnemo train`: fine-tune a checkpoint with LoRA, LoRA+ or in full on a text or JSON-lines file
 * (mnemo_trainer_*). A progress line on a terminal; with --json one JSON object per step on stdout and a last one
 * naming what was written. Ctrl-C stops after the current step with a checkpoint that --resume continues.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_args.h"
#include "cli_log.h"
#include "engine.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: mnemo train --model DIR --data FILE --out DIR [options]\n\n"
            "  --model DIR            base checkpoint (Hugging Face LlamaForCausalLM directory)\n"
            "  --data FILE            .txt (one stream, cut into windows of seq-len + 1) or .jsonl (one\n"
            "                         {\"prompt\",\"completion\"} or {\"messages\":[...]} example per line)\n"
            "  --out DIR              adapter (or model, with --full) and train_state.mnemo are written here\n"
            "method (default LoRA r 8, alpha 16 on q,v):\n"
            "  --lora-rank R          --lora-alpha A     --lora-targets q,v (any of q,k,v,o,gate,up,down, or all)\n"
            "  --lora-plus            LoRA + embeddings and every norm trained (LongLoRA)\n"
            "  --full                 every weight trained (writes a whole checkpoint, fp32)\n"
            "  --init-adapter DIR     start LoRA from this peft adapter (its rank, alpha and targets)\n"
            "  --uio DIR              UIO-LLM: train the encoder LoRA (q,v), transfer head LoRA (k,v) and <mem> over the\n"
            "                         frozen base on documents of --seq-len tokens; DIR (instead of --out) receives\n"
            "                         uio_config.json + uio.safetensors for generate --uio (LoRA flags: its rank/alpha)\n"
            "  --uio-chunk C          segment length (required unless --uio-init)\n"
            "  --uio-num-memory M     <mem> entries per segment, C a multiple of M (required unless --uio-init)\n"
            "  --uio-init DIR         start from this UIO directory (its chunk, M, rank and alpha)\n"
            "  --tbptt-slots S        encoder graphs kept by reservoir sampling (default 2; 0: full BPTT)\n"
            "  --no-compensation      without the unbiased factor max(1, (t-1)/S) on memory gradients\n"
            "long context (--fot takes neither --s2-attn nor --smt):\n"
            "  --s2-attn              S2-Attn in training: groups of seq-len/4, half the heads shifted by half a\n"
            "                         group (LongLoRA); served with full attention\n"
            "  --rope-scale F         linear position interpolation F; --out gets a config.json with it and\n"
            "                         max_position_embeddings x F (LongLoRA: --s2-attn --lora-plus --rope-scale F)\n"
            "  --smt                  sparse memory training on a .txt: each row samples --smt-sampled tokens (default\n"
            "                         seq-len/2) of the --smt-memory before it (default 4 x seq-len), decaying with\n"
            "                         distance from --smt-window (default: sampled); --smt-decay K iterations (0: all)\n"
            "  --smt-beta B           weight of the plain loss on each row's first seq-len tokens (default 1)\n"
            "  --fot SCHEDULE         FoT cross-batch training of a LongLLaMA-layout model's memory layers, e.g.\n"
            "                         1/4(0,0),1/4(1,1),1/4(2,1),1/4(3,0): per fraction of the rows, (previous\n"
            "                         contexts of the same document, contexts of other documents) seen; a third\n"
            "                         number M, as in 1/2(0,0),1/2(1,0,7), also shows M other documents' contexts\n"
            "                         at the same place (the paper's cross-batch); --batch counts documents, each\n"
            "                         K rows of --seq-len (K: the fractions' denominator)\n"
            "  --init random          start from random weights (transformers' init, --seed) instead of --model:\n"
            "  --config FILE          ... the config.json to build (LongLLaMA layout with mem_layers, or plain)\n"
            "  --tokenizer FILE|DIR   ... its tokenizer.model, or a directory to copy it (and its settings) from\n"
            "length and batch:\n"
            "  --steps N | --epochs E optimizer steps, or passes over the data (default 1 epoch)\n"
            "  --batch B              rows per micro-batch (default 1)\n"
            "  --seq-len L            tokens per row (default 512)\n"
            "  --grad-accum G         micro-batches per step (default 1)\n"
            "optimizer:\n"
            "  --lr X                 peak learning rate (default 1e-4)\n"
            "  --schedule S           constant | linear | cosine (default constant)   --warmup W  (default 0)\n"
            "  --optimizer O          adamw | sgd (default adamw)\n"
            "  --beta1 --beta2 --eps  AdamW (0.9, 0.999, 1e-8)      --momentum M  SGD (0)\n"
            "  --weight-decay X       (default 0)     --grad-clip C  global norm (default 1; 0: off)\n"
            "run:\n"
            "  --seed S               LoRA init and data order (default 0)     --shuffle 0|1 (default 1)\n"
            "  --checkpoint-every K   also write a checkpoint every K steps (default: only at the end)\n"
            "  --resume               continue the run in --out from its last checkpoint (same settings)\n"
            "  --stop-at S            stop with a checkpoint once S steps are done, the schedule still spanning\n"
            "                         --steps (a long run in pieces, or a stage cut where it was cut); --resume goes on\n"
            "  --recompute            keep one layer's activations, recompute the rest (long seq-len)\n"
            "  --threads N            CPU threads (default: all cores)\n"
            "  --device cpu|auto|cuda where the step runs (default auto = cpu; cuda: the GPU, every method)\n"
            "  --json                 one JSON line per step on stdout: step, loss, grad_norm, lr, tokens, elapsed_s\n"
            "  -v, --verbose          library info lines on stderr\n");
}

static mnemo_trainer *running; /* for the signal handler */

static void on_interrupt(int sig) {
    (void)sig;
    mnemo_trainer_cancel(running);
}

typedef struct {
    bool json, bar;
    long long stop_at; /* --stop-at: 0 = run to the end */
    bool stopped_at;   /* the run stopped there, as asked: exit 0 */
} report_opts;

static bool report(const mnemo_train_progress *p, void *user) {
    report_opts *o = user;
    if (o->json) {
        printf("{\"step\":%lld,\"loss\":%.9g,\"grad_norm\":%.9g,\"lr\":%.9g,\"tokens\":%lld,\"elapsed_s\":%.6f}\n",
               (long long)p->step, p->loss, p->grad_norm, p->lr, (long long)p->tokens, p->elapsed_s);
        fflush(stdout);
    }
    if (o->bar) {
        double rate = p->elapsed_s > 0 ? (double)p->tokens / p->elapsed_s : 0;
        double eta = p->step > 0 ? p->elapsed_s / (double)p->step * (double)(p->total_steps - p->step) : 0;
        fprintf(stderr, "\rstep %lld/%lld  loss %.4f  grad norm %.3f  lr %.2e  %.0f tok/s  ETA %.0f s   ",
                (long long)p->step, (long long)p->total_steps, p->loss, p->grad_norm, p->lr, rate, eta);
        if (p->step == p->total_steps) fputc('\n', stderr);
        fflush(stderr);
    }
    if (o->stop_at > 0 && p->step >= o->stop_at && p->step < p->total_steps) o->stopped_at = true;
    return !o->stopped_at; /* false: a checkpoint, then stop */
}

int cli_train(int argc, char **argv) {
    const char *cmd = "train", *model = NULL, *v, *init = NULL, *config = NULL, *tokenizer = NULL;
    mnemo_train_params tp = mnemo_train_default_params();
    mnemo_model_params mp = mnemo_model_default_params();
    report_opts ro = {0};
    bool verbose = false, rank_set = false, shape_set = false; /* shape: alpha or targets */
    int methods = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define VALUE() if (!(v = cli_value(cmd, argc, argv, &i))) return 2
#define NUM(field, lo, hi) do { VALUE(); char *e_; double d_ = strtod(v, &e_); \
        if (!*v || *e_ || !(d_ >= (lo) && d_ <= (hi))) { \
            fprintf(stderr, "mnemo train: %s expects a number in [%g, %g], got '%s'\n", a, (double)(lo), (double)(hi), v); \
            return 2; } field = d_; } while (0)
#define COUNT(field, lo, hi) do { VALUE(); char *e_; long long n_ = strtoll(v, &e_, 10); \
        if (!*v || *e_ || n_ < (lo) || n_ > (hi)) { \
            fprintf(stderr, "mnemo train: %s expects an integer in [%lld, %lld], got '%s'\n", a, (long long)(lo), \
                    (long long)(hi), v); return 2; } field = n_; } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--model")) { VALUE(); model = v; }
        else if (!strcmp(a, "--data")) { VALUE(); tp.data = v; }
        else if (!strcmp(a, "--out")) { VALUE(); tp.out_dir = v; }
        else if (!strcmp(a, "--lora-rank")) { COUNT(tp.lora_rank, 1, 4096); rank_set = true; }
        else if (!strcmp(a, "--lora-alpha")) { NUM(tp.lora_alpha, -1e6, 1e6); shape_set = true; }
        else if (!strcmp(a, "--lora-targets")) { VALUE(); tp.lora_targets = v; shape_set = true; }
        else if (!strcmp(a, "--lora-plus")) { tp.method = MNEMO_TRAIN_LORA_PLUS; methods++; }
        else if (!strcmp(a, "--full")) { tp.method = MNEMO_TRAIN_FULL; methods++; }
        else if (!strcmp(a, "--init-adapter")) { VALUE(); tp.init_adapter = v; }
        else if (!strcmp(a, "--uio")) { VALUE(); tp.out_dir = v; tp.method = MNEMO_TRAIN_UIO; methods++; }
        else if (!strcmp(a, "--uio-init")) { VALUE(); tp.uio_init = v; }
        else if (!strcmp(a, "--uio-chunk")) { COUNT(tp.uio_chunk, 1, 1 << 20); }
        else if (!strcmp(a, "--uio-num-memory")) { COUNT(tp.uio_num_memory, 1, 1 << 20); }
        else if (!strcmp(a, "--tbptt-slots")) { COUNT(tp.tbptt_slots, 0, 1 << 20); }
        else if (!strcmp(a, "--no-compensation")) tp.tbptt_compensation = false;
        else if (!strcmp(a, "--fot")) { VALUE(); tp.fot_schedule = v; }
        else if (!strcmp(a, "--init")) { VALUE(); init = v; }
        else if (!strcmp(a, "--config")) { VALUE(); config = v; }
        else if (!strcmp(a, "--tokenizer")) { VALUE(); tokenizer = v; }
        else if (!strcmp(a, "--steps")) { COUNT(tp.steps, 1, (long long)1e12); }
        else if (!strcmp(a, "--epochs")) { NUM(tp.epochs, 1e-9, 1e6); }
        else if (!strcmp(a, "--batch")) { COUNT(tp.batch, 1, 4096); }
        else if (!strcmp(a, "--seq-len")) { COUNT(tp.seq_len, 1, 1 << 24); }
        else if (!strcmp(a, "--grad-accum")) { COUNT(tp.grad_accum, 1, 65536); }
        else if (!strcmp(a, "--lr")) { NUM(tp.lr, 0, 1e3); }
        else if (!strcmp(a, "--warmup")) { COUNT(tp.warmup, 0, (long long)1e12); }
        else if (!strcmp(a, "--schedule")) {
            VALUE();
            if (!strcmp(v, "constant")) tp.schedule = MNEMO_LR_CONSTANT;
            else if (!strcmp(v, "linear")) tp.schedule = MNEMO_LR_LINEAR;
            else if (!strcmp(v, "cosine")) tp.schedule = MNEMO_LR_COSINE;
            else { fprintf(stderr, "mnemo train: --schedule expects constant, linear or cosine, got '%s'\n", v); return 2; }
        }
        else if (!strcmp(a, "--optimizer")) {
            VALUE();
            if (!strcmp(v, "adamw")) tp.optimizer = MNEMO_OPTIM_ADAMW;
            else if (!strcmp(v, "sgd")) tp.optimizer = MNEMO_OPTIM_SGD;
            else { fprintf(stderr, "mnemo train: --optimizer expects adamw or sgd, got '%s'\n", v); return 2; }
        }
        else if (!strcmp(a, "--beta1")) { NUM(tp.beta1, 0, 0.999999999); }
        else if (!strcmp(a, "--beta2")) { NUM(tp.beta2, 0, 0.999999999); }
        else if (!strcmp(a, "--eps")) { NUM(tp.eps, 1e-30, 1); }
        else if (!strcmp(a, "--weight-decay")) { NUM(tp.weight_decay, 0, 1e3); }
        else if (!strcmp(a, "--momentum")) { NUM(tp.momentum, 0, 0.999999999); }
        else if (!strcmp(a, "--grad-clip")) { NUM(tp.grad_clip, 0, 1e12); }
        else if (!strcmp(a, "--seed")) { VALUE(); if (!cli_u64(cmd, a, v, &tp.seed)) return 2; }
        else if (!strcmp(a, "--shuffle")) { int32_t s; VALUE(); if (!cli_int(cmd, a, v, 0, 1, &s)) return 2; tp.shuffle = s; }
        else if (!strcmp(a, "--checkpoint-every")) { COUNT(tp.checkpoint_every, 1, (long long)1e12); }
        else if (!strcmp(a, "--resume")) tp.resume = true;
        else if (!strcmp(a, "--stop-at")) { COUNT(ro.stop_at, 1, (long long)1e12); }
        else if (!strcmp(a, "--recompute")) tp.recompute = true;
        else if (!strcmp(a, "--s2-attn")) tp.s2_attn = true;
        else if (!strcmp(a, "--rope-scale")) { NUM(tp.rope_scale, 1, 1024); }
        else if (!strcmp(a, "--smt")) tp.smt = true;
        else if (!strcmp(a, "--smt-memory")) { COUNT(tp.smt_memory, 1, 1 << 28); }
        else if (!strcmp(a, "--smt-sampled")) { COUNT(tp.smt_sampled, 1, 1 << 24); }
        else if (!strcmp(a, "--smt-window")) { COUNT(tp.smt_window, 1, 1 << 28); }
        else if (!strcmp(a, "--smt-decay")) { COUNT(tp.smt_decay, 0, 64); }
        else if (!strcmp(a, "--smt-beta")) { NUM(tp.smt_beta, 0, 1e3); }
        else if (!strcmp(a, "--threads")) { VALUE(); if (!cli_int(cmd, a, v, 1, 1024, &mp.n_threads)) return 2; }
        else if (!strcmp(a, "--device")) {
            VALUE();
            if (!strcmp(v, "cpu")) mp.device = MNEMO_DEVICE_CPU;
            else if (!strcmp(v, "auto")) mp.device = MNEMO_DEVICE_AUTO;
            else if (!strcmp(v, "cuda")) mp.device = MNEMO_DEVICE_CUDA;
            else { fprintf(stderr, "mnemo train: --device expects cpu, auto or cuda, got '%s'\n", v); return 2; }
        }
        else if (!strcmp(a, "--json")) ro.json = true;
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) verbose = true;
        else { fprintf(stderr, "mnemo train: unknown option '%s' (try --help)\n", a); return 2; }
#undef VALUE
#undef NUM
#undef COUNT
    }
    if (!tp.data || !tp.out_dir) {
        fprintf(stderr, "mnemo train: --data and --out (or --uio) are required (try --help)\n");
        return 2;
    }
    if (methods > 1) {
        fprintf(stderr, "mnemo train: --lora-plus, --full and --uio exclude each other\n");
        return 2;
    }
    bool uio = tp.method == MNEMO_TRAIN_UIO;
    if (uio && (tp.init_adapter || (tp.lora_targets && shape_set && strcmp(tp.lora_targets, "q,v")))) {
        fprintf(stderr, "mnemo train: --uio trains fixed targets (encoder q,v; transfer head k,v): no --lora-targets "
                        "or --init-adapter\n");
        return 2;
    }
    if (uio && !tp.uio_init && (!tp.uio_chunk || !tp.uio_num_memory)) {
        fprintf(stderr, "mnemo train: --uio needs --uio-chunk and --uio-num-memory (or --uio-init DIR)\n");
        return 2;
    }
    if (!uio && (tp.uio_init || tp.uio_chunk || tp.uio_num_memory)) {
        fprintf(stderr, "mnemo train: --uio-* options need --uio DIR\n");
        return 2;
    }
    if (uio && tp.uio_init && rank_set) {
        fprintf(stderr, "mnemo train: --uio-init takes its rank and alpha from the UIO directory\n");
        return 2;
    }
    if (tp.method == MNEMO_TRAIN_FULL && (rank_set || shape_set || tp.init_adapter)) {
        fprintf(stderr, "mnemo train: --full trains every weight: --lora-* and --init-adapter do not apply\n");
        return 2;
    }
    if (tp.init_adapter && shape_set) {
        fprintf(stderr, "mnemo train: --init-adapter takes its targets and alpha from the adapter's config\n");
        return 2;
    }
    if (tp.init_adapter && !rank_set) tp.lora_rank = 0; /* the adapter's (a given rank must match it) */
    if (init && strcmp(init, "random")) {
        fprintf(stderr, "mnemo train: --init expects random, got '%s'\n", init);
        return 2;
    }
    if (init && (model || !config || !tokenizer)) {
        fprintf(stderr, "mnemo train: --init random builds the model from --config FILE and --tokenizer FILE|DIR "
                "(no --model)\n");
        return 2;
    }
    if (!init && (config || tokenizer)) {
        fprintf(stderr, "mnemo train: --config and --tokenizer go with --init random\n");
        return 2;
    }
    cli_log_init(verbose);
    char init_dir[4200];
    if (init) { /* the random checkpoint goes beside the run's output; the same seed writes the same weights */
        char err[512] = "";
        snprintf(init_dir, sizeof init_dir, "%s/init", tp.out_dir);
        mnemo_status ist = MNEMO_ERR_IO;
        if (mkdir(tp.out_dir, 0755) != 0 && errno != EEXIST)
            snprintf(err, sizeof err, "%s: cannot create: %s", tp.out_dir, strerror(errno));
        else
            ist = mnemo_init_random_checkpoint(config, tokenizer, tp.seed, init_dir, err, sizeof err);
        if (ist != MNEMO_OK) {
            fprintf(stderr, "mnemo train: %s\n", err);
            return ist == MNEMO_ERR_FORMAT ? 2 : 1;
        }
        fprintf(stderr, "mnemo train: random weights (seed %llu) written to %s\n", (unsigned long long)tp.seed, init_dir);
        model = init_dir;
    }
    if (!model && !(model = cli_default_model(cmd))) return 1;
    ro.bar = isatty(STDERR_FILENO);
    tp.progress = report;
    tp.progress_user = &ro;
    mnemo_trainer *t = NULL;
    mnemo_status st = mnemo_trainer_new(model, &mp, &tp, &t);
    if (st != MNEMO_OK) {
        fprintf(stderr, "mnemo train: %s\n", mnemo_trainer_error(t));
        mnemo_trainer_free(t);
        return st == MNEMO_ERR_INVALID_ARG ? 2 : 1;
    }
    uint64_t act = 0, state = 0;
    mnemo_trainer_memory(t, &act, &state);
    if (!ro.json || verbose)
        fprintf(stderr, "mnemo train: %lld steps%s; activations %.1f MiB, trained tensors + optimizer %.1f MiB\n",
                (long long)mnemo_trainer_total_steps(t), tp.resume ? " (resuming)" : "", (double)act / (1 << 20),
                (double)state / (1 << 20));
    if (ro.stop_at > 0 && mnemo_trainer_steps_done(t) >= ro.stop_at) { /* a resumed run already there */
        fprintf(stderr, "mnemo train: %lld steps done already (--stop-at %lld): nothing to run\n",
                (long long)mnemo_trainer_steps_done(t), ro.stop_at);
        if (ro.json) printf("{\"done\":false,\"stopped_at\":true,\"steps\":%lld}\n", (long long)mnemo_trainer_steps_done(t));
        mnemo_trainer_free(t);
        return 0;
    }
    running = t;
    struct sigaction sa = {0};
    sa.sa_handler = on_interrupt;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    st = mnemo_trainer_run(t);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    int rc = 0;
    if (st != MNEMO_OK && st != MNEMO_ERR_CANCELLED) {
        fprintf(stderr, "%smnemo train: %s\n", ro.bar ? "\n" : "", mnemo_trainer_error(t));
        rc = 1;
    } else {
        char ckpt[4200];
        snprintf(ckpt, sizeof ckpt, "%s/train_state.mnemo", tp.out_dir);
        if (ro.json) {
            json_t *o = json_pack("{s:b, s:b, s:b, s:I, s:I, s:s, s:s, s:s}", "done", st == MNEMO_OK, "cancelled",
                                  st == MNEMO_ERR_CANCELLED && !ro.stopped_at, "stopped_at", ro.stopped_at, "steps", (json_int_t)mnemo_trainer_steps_done(t),
                                  "total_steps", (json_int_t)mnemo_trainer_total_steps(t),
                                  tp.method == MNEMO_TRAIN_FULL ? "model" : uio ? "uio" : "adapter", tp.out_dir,
                                  "checkpoint", ckpt, "method", tp.method == MNEMO_TRAIN_FULL ? "full"
                                            : tp.method == MNEMO_TRAIN_LORA_PLUS ? "lora_plus" : uio ? "uio" : "lora");
            char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
            if (s) printf("%s\n", s);
            free(s);
            json_decref(o);
        }
        fprintf(stderr, "%smnemo train: %s after %lld of %lld steps: %s written to %s (resume state %s)\n",
                ro.bar && st == MNEMO_ERR_CANCELLED ? "\n" : "", st == MNEMO_OK ? "done" : "stopped",
                (long long)mnemo_trainer_steps_done(t), (long long)mnemo_trainer_total_steps(t),
                tp.method == MNEMO_TRAIN_FULL ? "model" : uio ? "UIO directory" : "adapter", tp.out_dir, ckpt);
        rc = st == MNEMO_OK || ro.stopped_at ? 0 : 130;
    }
    mnemo_trainer_free(t);
    return rc;
}
