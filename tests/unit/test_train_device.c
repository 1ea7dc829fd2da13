/*
 * test_train_device.c — training on a device backend (CUDA; in CI the CPU emulator, tests/cuda/emu) against the same
 * run on the CPU. Each case trains a tiny fixture model through mnemo_trainer on both backends
 * from the same settings (batch 2 x 8 tokens, 3 steps, AdamW with clipping at 1.0 and a warmup + cosine schedule):
 *   full fine-tuning   bf16 weights widened to fp32 master copies (on the device: from the uploaded weights)
 *   LoRA               r 4 on every projection (q,k,v,o,gate,up,down), fp32 weights, SGD with momentum + decay
 *   LoRA+              r 4 on q,v plus embeddings and norms, gradient accumulation 2, --recompute on the device
 *   SMT                LoRA r 4 on q,v with sparse memory training (sampled memory tokens at their own positions)
 *   FoT                full fine-tuning of the FoT fixture LongLLaMA (tests/fixtures/fot/model), cross-batch: each
 *                      memory-layer row also attends to other rows' contexts (4 contexts per document, 2 documents)
 *   S2-Attn            LoRA+ on the GQA fixture (8 query heads over 2 KV heads) with LongLoRA's shifted groups of 2
 *   UIO                the UIO-LLM tensors over the GQA fixture from tests/fixtures/uio/gqa_c12_m3 (non-zero LoRA A
 *                      and B): documents of 48 tokens = 4 segments of 12 compressed into 3 <mem> entries, 1
 *                      reservoir slot (so graphs are evicted and backpropagated mid-document) with the factor
 *   UIO fresh          a fresh UIO init over the MHA fixture (<mem> = embedding row 2, read from the device; B = 0):
 *                      4 segments of 4 tokens into 2 <mem> entries, full BPTT
 * and passes when every step's loss and pre-clip gradient norm, and the loss mnemo_trainer_evaluate gives after the
 * run (not for SMT and FoT), agree within 1e-5 relative (~4e-7 seen), and every tensor the run writes
 * (model.safetensors, adapter_model.safetensors, trainable_params.safetensors) agrees with the CPU's, relative to the
 * tensor's largest value, within 1e-5 after SGD (~3e-6 seen) and 1e-4 after AdamW (~4e-5 seen: AdamW divides each
 * gradient by its own running RMS, so an element with a tiny gradient - most of a LoRA B right after its zero init -
 * still takes a full lr-sized step, and its last bits of rounding move that step). Both sides compute in fp32 (the
 * CUDA GEMMs at fp32 accuracy: SPLIT mode) and differ by summation order only.
 * Then resume, for LoRA and for UIO: a run on the device stopped after step 2 (its checkpoint written there) and
 * resumed gives the uninterrupted device run's losses, product (adapter / uio.safetensors) and state file bit for
 * bit (the device kernels are deterministic: no float atomics); and across backends: stopped on the CPU after step 2
 * and resumed on the device (the checkpoint's tensors and moments uploaded), it ends as the CPU's uninterrupted run
 * does (step 3's loss within 1e-5, the product within 1e-4).
 *
 * Devices as in test_reference_models: the CPU half always runs (the reference, and alone it checks the runs
 * complete); the device half when a usable CUDA backend is present, or when MNEMO_TEST_DEVICE=cuda asks for it (then
 * its absence is a failure); MNEMO_TEST_DEVICE=cpu runs the CPU half only.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"
#include "kernels.h"
#include "tensor_index.h"
#include "test_devices.h"
#include "test_util.h"

#define STEPS 3
#define TOL 1e-5        /* losses and gradient norms; tensors after SGD */
#define TOL_ADAMW 1e-4  /* tensors after AdamW */

static char tmp_root[256], eval_text[600]; /* eval_text: a few windows of the training text (the emulator is slow) */
static char eval_uio[600];                 /* the same text three times: documents of up to 48 tokens */

typedef struct {
    const char *name, *model; /* model: a directory under tests/fixtures */
    mnemo_train_method method;
    const char *targets;
    int grad_accum;
    bool sgd, smt, recompute_device; /* recompute_device: gradient checkpointing on the device side only */
    const char *fot;                  /* FoT cross-batch schedule (NULL: none) */
    bool s2_attn;                     /* LongLoRA's S2-Attn (groups of seq_len / 4) */
    const char *uio_init;             /* UIO: the initial UIO directory under tests/fixtures (NULL: a fresh init) */
} train_case;

typedef struct {
    double loss[STEPS], norm[STEPS];
    double eval; /* mnemo_trainer_evaluate over eval_text after the last step (SMT and FoT: not run) */
} run_log;

static mnemo_train_params case_params(const train_case *c, const char *data, const char *out) {
    mnemo_train_params p = mnemo_train_default_params();
    p.data = data, p.out_dir = out, p.method = c->method;
    p.steps = STEPS, p.batch = 2, p.seq_len = 8, p.grad_accum = c->grad_accum, p.lr = 1e-2;
    p.schedule = MNEMO_LR_COSINE, p.warmup = 1, p.weight_decay = 0.01, p.grad_clip = 1.0, p.shuffle = false;
    p.lora_rank = 4, p.lora_alpha = 8, p.lora_targets = c->targets, p.seed = 3;
    if (c->sgd) p.optimizer = MNEMO_OPTIM_SGD, p.momentum = 0.9, p.lr = 0.05;
    p.smt = c->smt; /* memory 4 x seq_len, 4 of it sampled per row, as the defaults say */
    p.fot_schedule = c->fot;
    p.s2_attn = c->s2_attn;
    static char init[4600];
    if (c->method == MNEMO_TRAIN_UIO && c->uio_init) { /* 4 segments of the init's 12 tokens; evictions with S = 1 */
        snprintf(init, sizeof init, "%s/%s", test_fixtures(), c->uio_init);
        p.uio_init = init, p.seq_len = 48, p.tbptt_slots = 1, p.tbptt_compensation = true, p.lr = 5e-3;
    } else if (c->method == MNEMO_TRAIN_UIO) { /* fresh (<mem> from the embedding, B = 0): 4 x 4 tokens, full BPTT */
        p.uio_chunk = 4, p.uio_num_memory = 2, p.seq_len = 16, p.tbptt_slots = 0, p.lr = 5e-3;
    }
    return p;
}

static mnemo_model_params on(mnemo_device dev) {
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = dev;
    mp.n_threads = 2;
    return mp;
}

/* p on dev until `stop` steps are done (resuming first when p->resume), logging each step's loss and grad norm,
 * then saving (outputs and train_state.mnemo). MNEMO_OK or the failing status (message in err). */
static mnemo_status train(const char *model, const mnemo_train_params *p, mnemo_device dev, int stop, run_log *log,
                          char *err, size_t errlen) {
    mnemo_model_params mp = on(dev);
    mnemo_trainer *t = NULL;
    mnemo_status st = mnemo_trainer_new(model, &mp, p, &t);
    while (st == MNEMO_OK && mnemo_trainer_steps_done(t) < stop) {
        mnemo_train_progress pr;
        if ((st = mnemo_trainer_step(t, &pr)) != MNEMO_OK) break;
        if (log) log->loss[pr.step - 1] = pr.loss, log->norm[pr.step - 1] = pr.grad_norm;
    }
    if (st == MNEMO_OK) st = mnemo_trainer_save(t);
    const char *ev = p->seq_len > 32 ? eval_uio : eval_text; /* eval_text: too short for a 48-token document */
    if (st == MNEMO_OK && log && !p->smt && !p->fot_schedule) st = mnemo_trainer_evaluate(t, ev, &log->eval, NULL);
    snprintf(err, errlen, "%s", mnemo_trainer_error(t));
    mnemo_trainer_free(t);
    return st;
}

/* Every fp32 tensor of file in dir a against dir b's: the largest |a - b| relative to max |b|, over all tensors
 * (-1 when a file is missing, a tensor is absent or its size differs). exact: byte equality instead (0 or -1). */
static double compare_file(const char *dir_a, const char *dir_b, const char *file, bool exact, size_t *tensors) {
    char pa[700], pb[700], err[512];
    snprintf(pa, sizeof pa, "%s/%s", dir_a, file);
    snprintf(pb, sizeof pb, "%s/%s", dir_b, file);
    size_t la = 0, lb = 0;
    uint8_t *a = test_slurp(pa, &la), *b = test_slurp(pb, &lb);
    tensor_list ta = {0}, tb = {0};
    double worst = -1;
    *tensors = 0;
    if (a && b && exact) worst = la == lb && !memcmp(a, b, la) ? 0 : -1;
    else if (a && b && !safetensors_parse(a, la, pa, &ta, err, sizeof err) &&
             !safetensors_parse(b, lb, pb, &tb, err, sizeof err) && ta.count == tb.count && tb.count > 0) {
        worst = 0;
        for (size_t i = 0; i < tb.count && worst >= 0; i++) {
            const tensor_entry *x = NULL, *y = &tb.items[i];
            for (size_t j = 0; j < ta.count; j++)
                if (!strcmp(ta.items[j].name, y->name)) x = &ta.items[j];
            if (!x || x->nbytes != y->nbytes || x->dtype != y->dtype) {
                worst = -1;
                break;
            }
            if (y->dtype != TENSOR_F32) { /* untrained tensors are copied as stored: identical bytes */
                if (memcmp(x->data, y->data, y->nbytes)) worst = -1;
                continue;
            }
            const float *u = x->data, *v = y->data;
            double top = 1e-30, diff = 0;
            for (size_t k = 0; k < y->nbytes / 4; k++)
                top = fmax(top, fabs(v[k])), diff = fmax(diff, fabs(u[k] - v[k]));
            worst = fmax(worst, diff / top);
            ++*tensors;
        }
    }
    tensor_list_free(&ta), tensor_list_free(&tb);
    free(a), free(b);
    return worst;
}

static const char *outputs(mnemo_train_method m, int i) {
    static const char *full[] = {"model.safetensors", NULL}, *lora[] = {"adapter_model.safetensors", NULL};
    static const char *plus[] = {"adapter_model.safetensors", "trainable_params.safetensors", NULL};
    static const char *uio[] = {"uio.safetensors", NULL};
    return (m == MNEMO_TRAIN_FULL ? full : m == MNEMO_TRAIN_LORA ? lora : m == MNEMO_TRAIN_UIO ? uio : plus)[i];
}

static void check_case(const train_case *c, const char *data, bool device) {
    char model[4600], out_cpu[600], out_dev[600], err[1024];
    snprintf(model, sizeof model, "%s/%s", test_fixtures(), c->model);
    snprintf(out_cpu, sizeof out_cpu, "%s/%s_cpu", tmp_root, c->name);
    snprintf(out_dev, sizeof out_dev, "%s/%s_cuda", tmp_root, c->name);
    run_log cpu, dev;
    memset(&cpu, 0, sizeof cpu), memset(&dev, 0, sizeof dev);
    mnemo_train_params p = case_params(c, data, out_cpu);
    mnemo_status st = train(model, &p, MNEMO_DEVICE_CPU, STEPS, &cpu, err, sizeof err);
    CHECK(st == MNEMO_OK && isfinite(cpu.loss[STEPS - 1]), "%s on the CPU: %s", c->name, err);
    if (!device) {
        printf("%-10s cpu: losses %.6f .. %.6f (device half not run)\n", c->name, cpu.loss[0], cpu.loss[STEPS - 1]);
        return;
    }
    p.out_dir = out_dev;
    p.recompute = c->recompute_device;
    st = train(model, &p, MNEMO_DEVICE_CUDA, STEPS, &dev, err, sizeof err);
    CHECK(st == MNEMO_OK, "%s on cuda: %s", c->name, err);
    double wl = 0, wn = 0;
    for (int s = 0; s < STEPS; s++) {
        double dl = fabs(dev.loss[s] - cpu.loss[s]) / fabs(cpu.loss[s]);
        double dn = fabs(dev.norm[s] - cpu.norm[s]) / cpu.norm[s];
        wl = fmax(wl, isnan(dl) ? INFINITY : dl), wn = fmax(wn, isnan(dn) ? INFINITY : dn);
        CHECK(dl <= TOL && dn <= TOL, "%s step %d: loss %.7f on cuda, %.7f on the CPU; grad norm %.6f vs %.6f", c->name,
              s + 1, dev.loss[s], cpu.loss[s], dev.norm[s], cpu.norm[s]);
    }
    if (!c->smt && !c->fot)
        CHECK(fabs(dev.eval - cpu.eval) <= TOL * cpu.eval, "%s: evaluation loss %.7f on cuda, %.7f on the CPU", c->name,
              dev.eval, cpu.eval);
    double wp = 0, tol = c->sgd ? TOL : TOL_ADAMW;
    size_t tensors = 0;
    for (int i = 0; outputs(c->method, i); i++) {
        size_t n = 0;
        double w = compare_file(out_dev, out_cpu, outputs(c->method, i), false, &n);
        CHECK(w >= 0 && w <= tol, "%s: %s from cuda differs from the CPU's (%.2e relative; -1: missing/mismatched)",
              c->name, outputs(c->method, i), w);
        wp = fmax(wp, w < 0 ? INFINITY : w), tensors += n;
    }
    char ev[32] = "not run";
    if (!c->smt && !c->fot) snprintf(ev, sizeof ev, "%.2e", fabs(dev.eval - cpu.eval) / cpu.eval);
    printf("%-10s cuda vs cpu, %d steps: worst relative loss %.2e, grad norm %.2e, %zu trained tensors %.2e, "
           "evaluation %s\n", c->name, STEPS, wl, wn, tensors, wp, ev);
}

/* c on the device: stopped after step 2 (its checkpoint written then), resumed to the end = never stopped. */
static void check_resume(const train_case *c, const char *data) {
    char model[4600], straight[600], resumed[600], err[1024];
    const char *product = outputs(c->method, 0);
    snprintf(model, sizeof model, "%s/%s", test_fixtures(), c->model);
    snprintf(straight, sizeof straight, "%s/%s_straight", tmp_root, c->name);
    snprintf(resumed, sizeof resumed, "%s/%s_stopped", tmp_root, c->name);
    run_log want, got;
    memset(&want, 0, sizeof want), memset(&got, 0, sizeof got);
    mnemo_train_params p = case_params(c, data, straight);
    CHECK(train(model, &p, MNEMO_DEVICE_CUDA, STEPS, &want, err, sizeof err) == MNEMO_OK, "%s straight: %s", c->name,
          err);
    p.out_dir = resumed;
    CHECK(train(model, &p, MNEMO_DEVICE_CUDA, 2, &got, err, sizeof err) == MNEMO_OK, "%s stopped: %s", c->name, err);
    p.resume = true;
    CHECK(train(model, &p, MNEMO_DEVICE_CUDA, STEPS, &got, err, sizeof err) == MNEMO_OK, "%s resumed: %s", c->name,
          err);
    int differ = 0;
    for (int s = 0; s < STEPS; s++) differ += memcmp(&want.loss[s], &got.loss[s], sizeof(double)) != 0;
    size_t n = 0;
    CHECK(differ == 0, "%s device resume: %d of %d losses differ from the uninterrupted run", c->name, differ, STEPS);
    CHECK(compare_file(resumed, straight, product, true, &n) == 0,
          "%s device resume: the final %s differs from the uninterrupted run's", c->name, product);
    CHECK(compare_file(resumed, straight, "train_state.mnemo", true, &n) == 0,
          "%s device resume: the final train_state.mnemo differs from the uninterrupted run's", c->name);
    printf("%-10s cuda: stopped after step 2 and resumed = uninterrupted (losses, %s, state bit for bit)\n", c->name,
           product);
    /* across backends: the CPU's checkpoint after step 2 resumed on the device */
    char cpu_straight[600], moved[600];
    snprintf(cpu_straight, sizeof cpu_straight, "%s/%s_cpu_straight", tmp_root, c->name);
    snprintf(moved, sizeof moved, "%s/%s_cpu_to_cuda", tmp_root, c->name);
    p = case_params(c, data, cpu_straight);
    CHECK(train(model, &p, MNEMO_DEVICE_CPU, STEPS, &want, err, sizeof err) == MNEMO_OK, "%s CPU straight: %s",
          c->name, err);
    p.out_dir = moved;
    CHECK(train(model, &p, MNEMO_DEVICE_CPU, 2, &got, err, sizeof err) == MNEMO_OK, "%s CPU stopped: %s", c->name, err);
    p.resume = true;
    CHECK(train(model, &p, MNEMO_DEVICE_CUDA, STEPS, &got, err, sizeof err) == MNEMO_OK, "%s resumed on cuda: %s",
          c->name, err);
    double dl = fabs(got.loss[STEPS - 1] - want.loss[STEPS - 1]) / want.loss[STEPS - 1];
    double dp = compare_file(moved, cpu_straight, product, false, &n);
    CHECK(dl <= TOL && dp >= 0 && dp <= TOL_ADAMW, "%s: CPU checkpoint resumed on cuda: step %d loss %.7f (CPU %.7f), "
          "%s %.2e relative", c->name, STEPS, got.loss[STEPS - 1], want.loss[STEPS - 1], product, dp);
    printf("%-10s cpu -> cuda: step %d loss %.2e relative, %s %.2e relative to the CPU's straight run\n", c->name,
           STEPS, dl, product, dp);
}

int main(void) {
    char data[4600];
    test_devices devs = test_pick_devices();
    snprintf(tmp_root, sizeof tmp_root, "/tmp/mnemo_test_train_device_XXXXXX");
    if (!mkdtemp(tmp_root)) return 1;
    snprintf(data, sizeof data, "%s/train/data/train.txt", test_fixtures());
    snprintf(eval_text, sizeof eval_text, "%s/eval.txt", tmp_root);
    snprintf(eval_uio, sizeof eval_uio, "%s/eval_uio.txt", tmp_root);
    const char *speech = "First Citizen:\nBefore we proceed any further, hear me speak.\n";
    FILE *fe = fopen(eval_text, "w"), *fu = fopen(eval_uio, "w");
    CHECK(fe && fputs(speech, fe) >= 0 && !fclose(fe), "cannot write %s", eval_text);
    CHECK(fu && fputs(speech, fu) >= 0 && fputs(speech, fu) >= 0 && fputs(speech, fu) >= 0 && !fclose(fu),
          "cannot write %s", eval_uio);
    const train_case cases[] = {
        {"full_bf16", "models/bf16", MNEMO_TRAIN_FULL, "q,v", 1, false, false, false, NULL},
        {"lora_all", "models/mha", MNEMO_TRAIN_LORA, "all", 1, true, false, false, NULL},
        {"lora_plus", "models/mha", MNEMO_TRAIN_LORA_PLUS, "q,v", 2, false, false, true, NULL},
        {"smt_lora", "models/mha", MNEMO_TRAIN_LORA, "q,v", 1, false, true, false, NULL},
        {"fot_full", "fot/model", MNEMO_TRAIN_FULL, "q,v", 1, false, false, false,
         "1/4(0,0),1/4(1,1),1/4(2,1),1/4(3,0)"},
        {"s2_lora_plus", "models/gqa", MNEMO_TRAIN_LORA_PLUS, "q,v", 1, false, false, false, NULL, true},
        {"uio", "models/gqa", MNEMO_TRAIN_UIO, NULL, 1, false, false, false, NULL, false, "uio/gqa_c12_m3/uio_st"},
        {"uio_fresh", "models/mha", MNEMO_TRAIN_UIO, NULL, 1, false, false, false, NULL, false, NULL},
    };
    const train_case lora_resume = {"resume", "models/mha", MNEMO_TRAIN_LORA, "q,v", 1, false, false, false, NULL, false,
                                    NULL};
    const char *only = getenv("MNEMO_TEST_CASE"); /* one case (and its resume) by name, to debug it alone */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (!only || !strcmp(only, cases[i].name)) check_case(&cases[i], data, devs.cuda);
    if (devs.cuda && (!only || !strcmp(only, "resume"))) check_resume(&lora_resume, data);
    if (devs.cuda && (!only || !strcmp(only, "uio"))) check_resume(&cases[6], data);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return test_summary();
}
