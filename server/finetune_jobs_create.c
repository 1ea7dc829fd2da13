/*
 * finetune_jobs_create.c — a fine-tuning job from a request (ft_jobs_create): the body's settings checked (unknown
 * keys refused by name) and resolved against the server's defaults, the training and validation files copied into
 * the job's directory, and the job recorded as validating_files for the supervisor.
 */
#include "finetune_jobs_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "text_util.h"

/* "auto" or a number within [lo, hi] -> *out (auto keeps *out). 0, or -1 with e naming param. */
static int hp_number(json_t *hp, const char *key, double lo, double hi, bool integer, double *out, api_error *e) {
    json_t *v = hp ? json_object_get(hp, key) : NULL;
    if (!v || json_is_null(v) || (json_is_string(v) && !strcmp(json_string_value(v), "auto"))) return 0;
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!(x >= lo && x <= hi) || (integer && x != floor(x))) {
        api_error_set(e, 400, "invalid_value", key, "hyperparameters.%s must be \"auto\" or a%s number in [%g, %g]",
                      key,
                      integer ? "n integer" : "", lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

const char *json_str_or(json_t *o, const char *key, const char *dflt) {
    json_t *v = o ? json_object_get(o, key) : NULL;
    return json_is_string(v) ? json_string_value(v) : dflt;
}

/* The LoRA learning rate at learning_rate_multiplier 1: small LoRA adapters need a rate well above the 1e-4 .. 2e-4
 * of full fine-tuning to move a model within the hundred-odd steps a small file gives. */
#define LORA_BASE_LR 1e-3

/* OpenAI's rule for n_epochs "auto" (its fine-tuning data-preparation guide): 3 epochs, raised so that a small file
 * is seen at least 100 times in all (at most 25 epochs), lowered so that a large one is seen at most 25000 times (at
 * least 1 epoch). */
double auto_epochs(int64_t examples) {
    if (examples <= 0) return 3;
    if (examples * 3 < 100) return fmin(25, ceil(100.0 / (double)examples));
    if (examples * 3 > 25000) return fmax(1, floor(25000.0 / (double)examples));
    return 3;
}

/* The keys each part of a request may have: others are refused by name, as completions do. */
static const char *const BODY_KEYS[] = {"model", "training_file", "validation_file", "suffix", "seed",
                                        "hyperparameters", "method", "extra", "metadata", NULL};
static const char *const HP_KEYS[] = {"n_epochs", "batch_size", "learning_rate_multiplier", "lora_rank", "lora_alpha",
                                      "lora_targets", "seq_len", "steps", "checkpoint_every", "method", NULL};
static const char *const UNSUPPORTED_KEYS[] = {"fot", "fot_schedule", "s2_attn", "method_full", "full", NULL};

static bool listed(const char *const *keys, const char *k) {
    for (; *keys; keys++)
        if (!strcmp(*keys, k)) return true;
    return false;
}

/* 0, or -1 with e naming the first key of o that is not in keys (where: "hyperparameters."). */
static int only_known(json_t *o, const char *const *keys, const char *where, api_error *e) {
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        (void)v;
        if (listed(UNSUPPORTED_KEYS, k))
            return api_error_set(e, 400, "unsupported_value", k, "%s is not supported over HTTP yet", k), -1;
        if (!listed(keys, k)) {
            char param[160];
            snprintf(param, sizeof param, "%s%.100s", where, k);
            return api_error_set(e, 400, "unknown_parameter", param, "unknown parameter '%s'", param), -1;
        }
    }
    return 0;
}

/* The trainer settings (train.json) from the request: OpenAI's hyperparameters plus mnemo's own (LoRA shape,
 * seq_len, steps, checkpoint_every) found under method.supervised.hyperparameters or "extra". n_epochs "auto" (or
 * omitted, with no steps) is decided when the file's examples are counted (epochs_auto; see auto_epochs). */
static json_t *resolve_settings(ft_jobs *J, json_t *body, api_error *e) {
    if (only_known(body, BODY_KEYS, "", e)) return NULL;
    json_t *hp = json_object_get(body, "hyperparameters");
    json_t *method = json_object_get(body, "method");
    if (method && !json_is_object(method)) return api_error_set(e, 400, "invalid_type", "method",
                                                                "method must be an object"), NULL;
    const char *mtype = json_str_or(method, "type", "supervised");
    if (strcmp(mtype, "supervised") != 0)
        return api_error_set(e, 400, "invalid_value", "method.type",
                             "method.type '%s' is not supported (only \"supervised\")",
                             mtype), NULL;
    json_t *sup = method ? json_object_get(json_object_get(method, "supervised"), "hyperparameters") : NULL;
    if (sup) hp = sup; /* the newer shape wins */
    if (hp && !json_is_object(hp)) return api_error_set(e, 400, "invalid_type", "hyperparameters",
                                                        "hyperparameters must be an object"), NULL;
    json_t *extra = json_object_get(body, "extra");
    if (extra && !json_is_object(extra)) return api_error_set(e, 400, "invalid_type", "extra",
                                                              "extra must be an object"), NULL;
    if ((hp && only_known(hp, HP_KEYS, "hyperparameters.", e)) || (extra && only_known(extra, HP_KEYS, "extra.", e)))
        return NULL;
    int32_t n_ctx = mnemo_model_n_ctx_train(J->cfg.model);
    double epochs = 0, batch = 1, lr_mult = 1, rank = 8, alpha = 16, seq_len = n_ctx < 512 ? n_ctx : 512, steps = 0;
    double every = 10, seed = 0;
    json_t *srcs[2] = {hp, extra};
    for (int k = 0; k < 2; k++) {
        json_t *h = srcs[k];
        if (hp_number(h, "n_epochs", 1, 1000, true, &epochs, e) || hp_number(h, "batch_size", 1, 256, true, &batch, e) ||
            hp_number(h, "learning_rate_multiplier", 1e-6, 1e4, false, &lr_mult, e) ||
            hp_number(h, "lora_rank", 1, 1024, true, &rank, e) || hp_number(h, "lora_alpha", 1e-3, 1e6, false, &alpha, e) ||
            hp_number(h, "seq_len", 2, n_ctx, true, &seq_len, e) || hp_number(h, "steps", 1, 1e7, true, &steps, e) ||
            hp_number(h, "checkpoint_every", 1, 1e7, true, &every, e))
            return NULL;
    }
    json_t *js = json_object_get(body, "seed");
    if (js && !json_is_null(js)) {
        if (!json_is_integer(js) || json_integer_value(js) < 0 || json_integer_value(js) > 2147483647)
            return api_error_set(e, 400, "invalid_value", "seed", "seed must be an integer in [0, 2147483647]"), NULL;
        seed = (double)json_integer_value(js);
    }
    const char *targets = "q,v";
    for (int k = 0; k < 2; k++) targets = json_str_or(srcs[k], "lora_targets", targets);
    const char *mth = "lora";
    for (int k = 0; k < 2; k++) mth = json_str_or(srcs[k], "method", mth);
    if (strcmp(mth, "lora") != 0)
        return api_error_set(e, 400, "unsupported_value", "method",
                             "training method '%s' is not served over HTTP yet (lora)",
                             mth), NULL;
    bool epochs_auto = epochs == 0 && steps == 0;
    return json_pack("{s:s, s:i, s:f, s:s, s:f, s:b, s:I, s:i, s:i, s:f, s:f, s:I, s:I}", "method", "lora",
                     "lora_rank", (int)rank, "lora_alpha", alpha, "lora_targets", targets, "epochs",
                     epochs ? epochs : 3, "epochs_auto", epochs_auto, "steps", (json_int_t)steps, "batch",
                     (int)batch, "seq_len", (int)seq_len, "lr", LORA_BASE_LR * lr_mult, "lr_multiplier", lr_mult,
                     "checkpoint_every", (json_int_t)every, "seed", (json_int_t)seed);
}

/* The hyperparameters a job reports: n_epochs "auto" until the examples are counted. */
json_t *hp_echo(json_t *settings, json_t *n_epochs) {
    return json_pack("{s:o, s:i, s:f}", "n_epochs", n_epochs, "batch_size",
                     (int)json_integer_value(json_object_get(settings, "batch")), "learning_rate_multiplier",
                     json_real_value(json_object_get(settings, "lr_multiplier")));
}

void set_hyperparameters(ft_job *j, json_t *hp) {
    json_object_set(j->obj, "hyperparameters", hp);
    json_object_set_new(j->obj, "method", json_pack("{s:s, s:{s:O}}", "type", "supervised", "supervised",
                                                    "hyperparameters", hp));
    json_decref(hp);
}

static int copy_file(const char *src, const char *dst) {
    if (link(src, dst) == 0) return 0;
    FILE *in = fopen(src, "rb"), *out = in ? fopen(dst, "wb") : NULL;
    int rc = in && out ? 0 : -1;
    char buf[65536];
    for (size_t n; rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0;) rc = fwrite(buf, 1, n, out) == n ? 0 : -1;
    if (in) fclose(in);
    if (out && fclose(out) != 0) rc = -1;
    return rc;
}

static int count_pending(ft_jobs *J) {
    int n = 0;
    for (size_t i = 0; i < J->n; i++) n += J->jobs[i]->status <= ST_RUNNING;
    return n;
}

static void random_hex(char *out, int digits) {
    unsigned char b[32];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, b, (size_t)(digits + 1) / 2) : -1;
    if (fd >= 0) close(fd);
    for (int i = 0; i < digits; i++) {
        unsigned v = got > i / 2 ? b[i / 2] : (unsigned)rand();
        out[i] = "0123456789abcdef"[(i & 1 ? v : v >> 4) & 15];
    }
    out[digits] = 0;
}

int ft_jobs_create(ft_jobs *J, json_t *body, json_t **out, api_error *e) {
    if (!json_is_object(body)) return api_error_set(e, 400, "invalid_type", NULL, "the body must be a JSON object"), -1;
    const char *model = json_str_or(body, "model", NULL), *tf = json_str_or(body, "training_file", NULL);
    const char *vf = json_str_or(body, "validation_file", NULL), *suffix = json_str_or(body, "suffix", NULL);
    if (!model) return api_error_set(e, 400, "missing_required_parameter", "model", "model is required"), -1;
    if (strcmp(model, J->base_name) != 0)
        return api_error_set(e, 404, "model_not_found", "model",
                             "the model '%.200s' cannot be fine-tuned here (this server has "
                             "'%s')", model, J->base_name), -1;
    if (!tf) return api_error_set(e, 400, "missing_required_parameter", "training_file",
                                  "training_file is required"), -1;
    char src[4200], vsrc[4200];
    /* with the state database the files are copied inside it (jpg_create), never through this node */
    if (!ft_files_valid_id(tf) || (!J->pg && !ft_files_path(J->cfg.files, tf, src, sizeof src)))
        return api_error_set(e, 404, "file_not_found", "training_file", "no file '%.100s'", tf), -1;
    if (vf && (!ft_files_valid_id(vf) || (!J->pg && !ft_files_path(J->cfg.files, vf, vsrc, sizeof vsrc))))
        return api_error_set(e, 404, "file_not_found", "validation_file", "no file '%.100s'", vf), -1;
    if (suffix) {
        size_t n = strlen(suffix);
        bool ok = n >= 1 && n <= 64;
        for (size_t i = 0; ok && i < n; i++)
            ok = (suffix[i] >= 'a' && suffix[i] <= 'z') || (suffix[i] >= 'A' && suffix[i] <= 'Z') ||
                 (suffix[i] >= '0' && suffix[i] <= '9') || suffix[i] == '-' || suffix[i] == '_';
        if (!ok) return api_error_set(e, 400, "invalid_value", "suffix", "suffix: 1 to 64 of A-Z a-z 0-9 - _"), -1;
    }
    json_t *settings = resolve_settings(J, body, e);
    if (!settings) return -1;
    ft_job *j = job_new();
    if (!j) {
        json_decref(settings);
        return api_error_set(e, 500, "server_error", NULL, "out of memory"), -1;
    }
    char hex[25];
    random_hex(hex, 24);
    snprintf(j->id, sizeof j->id, "ftjob-%s", hex);
    long long now = now_unix();
    bool auto_n = json_is_true(json_object_get(settings, "epochs_auto"));
    json_t *hp = hp_echo(settings, auto_n || json_integer_value(json_object_get(settings, "steps"))
                                      ? json_string("auto")
                                      : json_real(json_real_value(json_object_get(settings, "epochs"))));
    j->obj = json_pack("{s:s, s:s, s:s, s:I, s:n, s:n, s:s, s:s, s:n, s:o, s:o, s:n, s:I, s:n}", "object",
                       "fine_tuning.job", "id", j->id, "model", model, "created_at", (json_int_t)now, "finished_at",
                       "fine_tuned_model", "organization_id", "mnemo", "status", STATUS[ST_VALIDATING],
                       "validation_file", "training_file", json_string(tf), "result_files", json_array(),
                       "trained_tokens", "seed", json_integer_value(json_object_get(settings, "seed")), "error");
    set_hyperparameters(j, hp);
    json_t *meta = json_object_get(body, "metadata");
    if (json_is_object(meta)) json_object_set(j->obj, "metadata", meta);
    if (vf) json_object_set_new(j->obj, "validation_file", json_string(vf));
    if (suffix) json_object_set_new(j->obj, "user_provided_suffix", json_string(suffix));
    json_object_set_new(j->obj, "estimated_finish", json_null());
    if (J->pg) {
        char msg[160];
        snprintf(msg, sizeof msg, "Validating training file: %s", tf);
        json_t *ev = job_event_json(j, "info", "message", NULL, msg);
        int rc = jpg_create(J->pg, j->obj, settings, tf, vf, J->cfg.max_pending, ev, e);
        if (rc == 0) *out = json_deep_copy(j->obj);
        json_decref(ev);
        json_decref(settings);
        job_free(j);
        return rc;
    }
    char dir[4200], path[4200];
    pthread_mutex_lock(&J->mu);
    if (count_pending(J) >= J->cfg.max_pending) {
        pthread_mutex_unlock(&J->mu);
        job_free(j);
        json_decref(settings);
        return api_error_set(e, 429, "too_many_jobs", NULL,
                             "%d fine-tuning jobs are already pending (--max-pending-jobs); "
                             "retry when some have finished", J->cfg.max_pending), -1;
    }
    job_path(J, j, NULL, dir, sizeof dir);
    bool ok = mkdir(dir, 0755) == 0;
    job_path(J, j, "train.jsonl", path, sizeof path);
    ok = ok && copy_file(src, path) == 0;
    job_path(J, j, "valid.jsonl", path, sizeof path);
    ok = ok && (!vf || copy_file(vsrc, path) == 0);
    job_path(J, j, "train.json", path, sizeof path);
    ok = ok && write_json_atomic(path, settings) == 0;
    job_path(J, j, "model_dir", path, sizeof path);
    FILE *mf = ok ? fopen(path, "w") : NULL;
    ok = mf && fprintf(mf, "%s\n", J->model_dir) > 0;
    if (mf && fclose(mf) != 0) ok = false;
    json_decref(settings);
    if (!ok || jobs_add(J, j) != 0) {
        pthread_mutex_unlock(&J->mu);
        job_free(j);
        return api_error_set(e, 500, "server_error", NULL, "cannot create the job's directory under --jobs-dir: %s",
                             strerror(errno)), -1;
    }
    job_add_event(J, j, "info", "message", NULL, "Validating training file: %s", tf);
    job_set_status(J, j, ST_VALIDATING);
    *out = json_deep_copy(j->obj);
    pthread_mutex_unlock(&J->mu);
    return 0;
}
