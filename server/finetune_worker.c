/*
 * finetune_worker.c — the worker process of a fine-tuning job (`mnemo-server --finetune-worker <job dir>`, started
 * by finetune_jobs.c): trains <dir>/train.jsonl with the settings of <dir>/train.json into <dir>/out through
 * mnemo_trainer, resuming from out/train_state.mnemo when a previous worker left one. It speaks to the supervisor
 * in JSON lines on stdout: {"step", "total_steps", "loss", "grad_norm", "lr", "trained_tokens", "tokens_per_s",
 * "eta_s"} per step, {"checkpoint": step, "loss"[, "valid_loss"]} after each checkpoint (the loss over
 * <dir>/valid.jsonl when the job has a validation file), {"error": {"code", "message"}} before a failure. Exit: 0 done, 1 failed, 130 stopped by SIGTERM after a checkpoint (cancel, or the server going away).
 * A lock on <dir>/worker.lock keeps a restarted server's worker from starting before the old one has let go.
 */
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "finetune_jobs.h"

static volatile sig_atomic_t stop_asked;

static void on_term(int sig) {
    (void)sig;
    stop_asked = 1;
}

static int fail(const char *code, const char *msg) {
    json_t *o = json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg);
    char *s = json_dumps(o, JSON_COMPACT);
    if (s) printf("%s\n", s);
    fflush(stdout);
    free(s);
    json_decref(o);
    return 1;
}

int ft_worker_main(const char *dir, int threads, bool cuda) {
    char path[4200], data[4200], out[4200], state[4300];
    snprintf(path, sizeof path, "%s/worker.lock", dir);
    int lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock < 0 || flock(lock, LOCK_EX) != 0) return fail("server_error", "cannot lock the job directory");
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    snprintf(path, sizeof path, "%s/train.json", dir);
    json_t *s = json_load_file(path, 0, NULL);
    if (!json_is_object(s)) return fail("server_error", "the job's settings (train.json) are unreadable");
    snprintf(path, sizeof path, "%s/model_dir", dir);
    char model_dir[4096] = "";
    FILE *f = fopen(path, "r");
    if (!f || !fgets(model_dir, sizeof model_dir, f)) {
        if (f) fclose(f);
        json_decref(s);
        return fail("server_error", "the job's model directory is unknown");
    }
    fclose(f);
    model_dir[strcspn(model_dir, "\n")] = 0;
    snprintf(data, sizeof data, "%s/train.jsonl", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(state, sizeof state, "%s/train_state.mnemo", out);
    char valid[4200];
    snprintf(valid, sizeof valid, "%s/valid.jsonl", dir);
    bool has_valid = access(valid, F_OK) == 0;
    mnemo_train_params tp = mnemo_train_default_params();
    tp.data = data, tp.out_dir = out;
    tp.method = MNEMO_TRAIN_LORA;
    tp.lora_rank = (int32_t)json_integer_value(json_object_get(s, "lora_rank"));
    tp.lora_alpha = json_number_value(json_object_get(s, "lora_alpha"));
    tp.lora_targets = json_string_value(json_object_get(s, "lora_targets"));
    tp.epochs = json_number_value(json_object_get(s, "epochs"));
    tp.steps = json_integer_value(json_object_get(s, "steps"));
    tp.batch = (int32_t)json_integer_value(json_object_get(s, "batch"));
    tp.seq_len = (int32_t)json_integer_value(json_object_get(s, "seq_len"));
    tp.lr = json_number_value(json_object_get(s, "lr"));
    tp.seed = (uint64_t)json_integer_value(json_object_get(s, "seed"));
    tp.checkpoint_every = json_integer_value(json_object_get(s, "checkpoint_every"));
    tp.resume = access(state, F_OK) == 0;
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = cuda ? MNEMO_DEVICE_CUDA : MNEMO_DEVICE_CPU; /* cuda with no usable GPU: the job fails, saying so */
    mp.n_threads = threads;
    mnemo_trainer *t = NULL;
    mnemo_status st = mnemo_trainer_new(model_dir, &mp, &tp, &t);
    json_decref(s); /* tp's strings are copied by the trainer */
    if (st != MNEMO_OK) {
        /* the server's own set-up (no usable GPU for --train-device cuda, a backend failure) is not the file's fault */
        const char *code = st == MNEMO_ERR_NOMEM                                    ? "out_of_memory"
                           : st == MNEMO_ERR_UNSUPPORTED || st == MNEMO_ERR_BACKEND ? "server_error"
                                                                                    : "invalid_training_file";
        int rc = fail(code, mnemo_trainer_error(t));
        mnemo_trainer_free(t);
        return rc;
    }
    int64_t total = mnemo_trainer_total_steps(t), rows = (int64_t)tp.batch * tp.grad_accum;
    int rc = 0;
    while (mnemo_trainer_steps_done(t) < total) {
        mnemo_train_progress p;
        if ((st = mnemo_trainer_step(t, &p)) != MNEMO_OK) {
            rc = fail("training_failed", mnemo_trainer_error(t));
            break;
        }
        double tps = p.elapsed_s > 0 ? (double)p.tokens / p.elapsed_s : 0;
        double eta = p.step > 0 && tps > 0 ? (double)((total - p.step) * rows * tp.seq_len) / tps : 0;
        printf("{\"step\":%lld,\"total_steps\":%lld,\"loss\":%.9g,\"grad_norm\":%.9g,\"lr\":%.9g,\"trained_tokens\":%lld,"
               "\"tokens_per_s\":%.3f,\"eta_s\":%.1f}\n",
               (long long)p.step, (long long)total, p.loss, p.grad_norm, p.lr,
               (long long)(p.step * rows * tp.seq_len), tps, eta);
        fflush(stdout);
        bool due = tp.checkpoint_every && p.step % tp.checkpoint_every == 0;
        if (due || stop_asked || p.step == total) {
            if (mnemo_trainer_save(t) != MNEMO_OK) {
                rc = fail("checkpoint_failed", mnemo_trainer_error(t));
                break;
            }
            double vloss = -1; /* the validation file's loss at each checkpoint, when the job has one */
            if (has_valid && mnemo_trainer_evaluate(t, valid, &vloss, NULL) != MNEMO_OK) {
                rc = fail("invalid_validation_file", mnemo_trainer_error(t));
                break;
            }
            if (has_valid) printf("{\"checkpoint\":%lld,\"loss\":%.9g,\"valid_loss\":%.9g}\n", (long long)p.step, p.loss, vloss);
            else printf("{\"checkpoint\":%lld,\"loss\":%.9g}\n", (long long)p.step, p.loss);
            fflush(stdout);
        }
        if (stop_asked) {
            rc = 130;
            break;
        }
    }
    if (rc == 0 && total == mnemo_trainer_steps_done(t) && access(state, F_OK) != 0 && mnemo_trainer_save(t) != MNEMO_OK)
        rc = fail("checkpoint_failed", mnemo_trainer_error(t));
    mnemo_trainer_free(t);
    close(lock);
    return rc;
}
