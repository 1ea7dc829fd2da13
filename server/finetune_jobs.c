/*
 * finetune_jobs.c — see finetune_jobs.h. One mutex guards the job table; the supervisor thread does the slow work
 * (validating data with the tokenizer, starting and reaping workers, reading their pipes) outside it where it can.
 */
#define _GNU_SOURCE /* pipe2, dirfd */
#include "finetune_jobs.h"

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

#include "finetune_jobs_pg.h"
#include "text_util.h"

enum { ST_VALIDATING, ST_QUEUED, ST_RUNNING, ST_SUCCEEDED, ST_FAILED, ST_CANCELLED, ST_COUNT };
static const char *const STATUS[ST_COUNT] = {"validating_files", "queued",  "running",
                                             "succeeded",        "failed",  "cancelled"};
#define MAX_RESTARTS 3

typedef struct {
    char id[40];
    json_t *obj;        /* the OpenAI job object (what GET returns), persisted as job.json */
    int status;
    json_t *events;     /* array, oldest first */
    json_t *checkpoints;
    pid_t pid;          /* running worker, 0 when none */
    int out_fd;         /* its stdout (pipe), -1 when none */
    char line[4096];    /* a partial line read from the pipe */
    size_t line_len;
    int restarts;
    bool cancel;        /* cancel asked: the worker was sent SIGTERM */
    bool lost;          /* with the state database: another node holds the job's lease now */
    mnemo_adapter *adapter; /* succeeded: loaded on first use */
    double tokens_per_s;
} ft_job;

struct ft_jobs {
    ft_jobs_config cfg;
    char *jobs_dir, *model_dir, *base_name, *self_exe;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ft_job **jobs;      /* creation order */
    size_t n, cap;
    bool stop;
    pthread_t thread;
    long long steps;
    double tokens_per_s;
    long long adapters_loaded;
    jpg *pg;            /* the state database (NULL: jobs-dir only); jobs[] holds the jobs this node works on */
    struct { char name[512]; mnemo_adapter *a; } *adapters; /* with pg: fine-tuned models loaded here */
    size_t n_adapters;
    double renewed_at;  /* with pg: when the leases were last renewed (monotonic seconds) */
    double polled_at;   /* with pg: when the queue was last looked at */
};

static _Thread_local ft_error last_error;

const ft_error *ft_jobs_last_error(void) { return &last_error; }

static void not_found(const char *id) {
    last_error = (ft_error){.status = 404};
    snprintf(last_error.code, sizeof last_error.code, "job_not_found");
    snprintf(last_error.message, sizeof last_error.message, "no fine-tuning job '%.100s'", id ? id : "");
}

static void set_err(ft_error *e, int status, const char *code, const char *param, const char *fmt, ...) {
    e->status = status;
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

static void job_path(const ft_jobs *J, const ft_job *j, const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s/jobs/%s%s%s", J->jobs_dir, j->id, name ? "/" : "", name ? name : "");
}

/* Writes obj to path through path.tmp + rename. 0, or -1. */
static int write_json_atomic(const char *path, json_t *obj) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (json_dump_file(obj, tmp, JSON_INDENT(1) | JSON_SORT_KEYS) != 0) return -1;
    int fd = open(tmp, O_RDONLY);
    if (fd >= 0) fsync(fd), close(fd);
    return rename(tmp, path);
}

static void persist(ft_jobs *J, ft_job *j) {
    if (J->pg) {
        jpg_persist(J->pg, j->id, STATUS[j->status], j->obj);
        return;
    }
    char path[4200];
    job_path(J, j, "job.json", path, sizeof path);
    if (write_json_atomic(path, j->obj) != 0) fprintf(stderr, "mnemo-server: warning: cannot write %s\n", path);
}

static long long now_unix(void) { return (long long)time(NULL); }

/* An event (OpenAI's fine_tuning.job.event); data may be NULL; stolen. The state database numbers events itself. */
static json_t *event_json(const ft_job *j, const char *level, const char *type, json_t *data, const char *msg) {
    char eid[64];
    snprintf(eid, sizeof eid, "ftevent-%s-%zu", j->id + 6, json_array_size(j->events));
    json_t *ev = json_pack("{s:s, s:s, s:I, s:s, s:s, s:s}", "object", "fine_tuning.job.event", "id", eid,
                           "created_at", (json_int_t)now_unix(), "level", level, "message", msg, "type", type);
    json_object_set_new(ev, "data", data ? data : json_object());
    return ev;
}

/* Appends an event to memory and events.jsonl (or the state database). data may be NULL; stolen. */
static void add_event(ft_jobs *J, ft_job *j, const char *level, const char *type, json_t *data, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *ev = event_json(j, level, type, data, msg);
    json_array_append(j->events, ev);
    if (J->pg) {
        jpg_event(J->pg, j->id, ev);
        json_decref(ev);
        return;
    }
    char path[4200];
    job_path(J, j, "events.jsonl", path, sizeof path);
    char *line = json_dumps(ev, JSON_COMPACT);
    FILE *f = line ? fopen(path, "a") : NULL;
    if (f) fprintf(f, "%s\n", line), fclose(f);
    free(line);
    json_decref(ev);
}

static void set_status(ft_jobs *J, ft_job *j, int st) {
    j->status = st;
    json_object_set_new(j->obj, "status", json_string(STATUS[st]));
    if (st >= ST_SUCCEEDED) json_object_set_new(j->obj, "finished_at", json_integer(now_unix()));
    persist(J, j);
    pthread_cond_broadcast(&J->cv);
}

static void fail_job(ft_jobs *J, ft_job *j, const char *code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_object_set_new(j->obj, "error", json_pack("{s:s, s:s, s:n}", "code", code, "message", msg, "param"));
    add_event(J, j, "error", "message", NULL, "Fine-tuning job failed: %s", msg);
    set_status(J, j, ST_FAILED);
}

static ft_job *find(ft_jobs *J, const char *id) {
    for (size_t i = 0; i < J->n; i++)
        if (!strcmp(J->jobs[i]->id, id)) return J->jobs[i];
    return NULL;
}

static int add_job(ft_jobs *J, ft_job *j) {
    if (J->n == J->cap) {
        size_t c = J->cap ? 2 * J->cap : 16;
        ft_job **a = realloc(J->jobs, c * sizeof *a);
        if (!a) return -1;
        J->jobs = a, J->cap = c;
    }
    J->jobs[J->n++] = j;
    return 0;
}

static void free_job(ft_job *j) {
    if (!j) return;
    json_decref(j->obj), json_decref(j->events), json_decref(j->checkpoints);
    if (j->out_fd >= 0) close(j->out_fd);
    mnemo_adapter_free(j->adapter);
    free(j);
}

static ft_job *new_job(void) {
    ft_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->out_fd = -1;
    j->events = json_array();
    j->checkpoints = json_array();
    return j;
}

/* ------------------------------------------------------------------ creation: the request's settings */

/* "auto" or a number within [lo, hi] -> *out (auto keeps *out). 0, or -1 with e naming param. */
static int hp_number(json_t *hp, const char *key, double lo, double hi, bool integer, double *out, ft_error *e) {
    json_t *v = hp ? json_object_get(hp, key) : NULL;
    if (!v || json_is_null(v) || (json_is_string(v) && !strcmp(json_string_value(v), "auto"))) return 0;
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!(x >= lo && x <= hi) || (integer && x != floor(x))) {
        set_err(e, 400, "invalid_value", key, "hyperparameters.%s must be \"auto\" or a%s number in [%g, %g]", key,
                integer ? "n integer" : "", lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static const char *str_or(json_t *o, const char *key, const char *dflt) {
    json_t *v = o ? json_object_get(o, key) : NULL;
    return json_is_string(v) ? json_string_value(v) : dflt;
}

/* The LoRA learning rate at learning_rate_multiplier 1: small LoRA adapters need a rate well above the 1e-4 .. 2e-4
 * of full fine-tuning to move a model within the hundred-odd steps a small file gives. */
#define LORA_BASE_LR 1e-3

/* OpenAI's rule for n_epochs "auto" (its fine-tuning data-preparation guide): 3 epochs, raised so that a small file
 * is seen at least 100 times in all (at most 25 epochs), lowered so that a large one is seen at most 25000 times (at
 * least 1 epoch). */
static double auto_epochs(int64_t examples) {
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
static int only_known(json_t *o, const char *const *keys, const char *where, ft_error *e) {
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        (void)v;
        if (listed(UNSUPPORTED_KEYS, k))
            return set_err(e, 400, "unsupported_value", k, "%s is not supported over HTTP yet", k), -1;
        if (!listed(keys, k)) {
            char param[160];
            snprintf(param, sizeof param, "%s%.100s", where, k);
            return set_err(e, 400, "unknown_parameter", param, "unknown parameter '%s'", param), -1;
        }
    }
    return 0;
}

/* The trainer settings (train.json) from the request: OpenAI's hyperparameters plus mnemo's own (LoRA shape,
 * seq_len, steps, checkpoint_every) found under method.supervised.hyperparameters or "extra". n_epochs "auto" (or
 * omitted, with no steps) is decided when the file's examples are counted (epochs_auto; see auto_epochs). */
static json_t *resolve_settings(ft_jobs *J, json_t *body, ft_error *e) {
    if (only_known(body, BODY_KEYS, "", e)) return NULL;
    json_t *hp = json_object_get(body, "hyperparameters");
    json_t *method = json_object_get(body, "method");
    if (method && !json_is_object(method)) return set_err(e, 400, "invalid_type", "method", "method must be an object"), NULL;
    const char *mtype = str_or(method, "type", "supervised");
    if (strcmp(mtype, "supervised") != 0)
        return set_err(e, 400, "invalid_value", "method.type", "method.type '%s' is not supported (only \"supervised\")",
                       mtype), NULL;
    json_t *sup = method ? json_object_get(json_object_get(method, "supervised"), "hyperparameters") : NULL;
    if (sup) hp = sup; /* the newer shape wins */
    if (hp && !json_is_object(hp)) return set_err(e, 400, "invalid_type", "hyperparameters", "hyperparameters must be an object"), NULL;
    json_t *extra = json_object_get(body, "extra");
    if (extra && !json_is_object(extra)) return set_err(e, 400, "invalid_type", "extra", "extra must be an object"), NULL;
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
            return set_err(e, 400, "invalid_value", "seed", "seed must be an integer in [0, 2147483647]"), NULL;
        seed = (double)json_integer_value(js);
    }
    const char *targets = "q,v";
    for (int k = 0; k < 2; k++) targets = str_or(srcs[k], "lora_targets", targets);
    const char *mth = "lora";
    for (int k = 0; k < 2; k++) mth = str_or(srcs[k], "method", mth);
    if (strcmp(mth, "lora") != 0)
        return set_err(e, 400, "unsupported_value", "method", "training method '%s' is not served over HTTP yet (lora)",
                       mth), NULL;
    bool epochs_auto = epochs == 0 && steps == 0;
    return json_pack("{s:s, s:i, s:f, s:s, s:f, s:b, s:I, s:i, s:i, s:f, s:f, s:I, s:I}", "method", "lora",
                     "lora_rank", (int)rank, "lora_alpha", alpha, "lora_targets", targets, "epochs",
                     epochs ? epochs : 3, "epochs_auto", epochs_auto, "steps", (json_int_t)steps, "batch",
                     (int)batch, "seq_len", (int)seq_len, "lr", LORA_BASE_LR * lr_mult, "lr_multiplier", lr_mult,
                     "checkpoint_every", (json_int_t)every, "seed", (json_int_t)seed);
}

/* The hyperparameters a job reports: n_epochs "auto" until the examples are counted. */
static json_t *hp_echo(json_t *settings, json_t *n_epochs) {
    return json_pack("{s:o, s:i, s:f}", "n_epochs", n_epochs, "batch_size",
                     (int)json_integer_value(json_object_get(settings, "batch")), "learning_rate_multiplier",
                     json_real_value(json_object_get(settings, "lr_multiplier")));
}

static void set_hyperparameters(ft_job *j, json_t *hp) {
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

int ft_jobs_create(ft_jobs *J, json_t *body, json_t **out, ft_error *e) {
    if (!json_is_object(body)) return set_err(e, 400, "invalid_type", NULL, "the body must be a JSON object"), -1;
    const char *model = str_or(body, "model", NULL), *tf = str_or(body, "training_file", NULL);
    const char *vf = str_or(body, "validation_file", NULL), *suffix = str_or(body, "suffix", NULL);
    if (!model) return set_err(e, 400, "missing_required_parameter", "model", "model is required"), -1;
    if (strcmp(model, J->base_name) != 0)
        return set_err(e, 404, "model_not_found", "model", "the model '%.200s' cannot be fine-tuned here (this server has "
                       "'%s')", model, J->base_name), -1;
    if (!tf) return set_err(e, 400, "missing_required_parameter", "training_file", "training_file is required"), -1;
    char src[4200], vsrc[4200];
    /* with the state database the files are copied inside it (jpg_create), never through this node */
    if (!ft_files_valid_id(tf) || (!J->pg && !ft_files_path(J->cfg.files, tf, src, sizeof src)))
        return set_err(e, 404, "file_not_found", "training_file", "no file '%.100s'", tf), -1;
    if (vf && (!ft_files_valid_id(vf) || (!J->pg && !ft_files_path(J->cfg.files, vf, vsrc, sizeof vsrc))))
        return set_err(e, 404, "file_not_found", "validation_file", "no file '%.100s'", vf), -1;
    if (suffix) {
        size_t n = strlen(suffix);
        bool ok = n >= 1 && n <= 64;
        for (size_t i = 0; ok && i < n; i++)
            ok = (suffix[i] >= 'a' && suffix[i] <= 'z') || (suffix[i] >= 'A' && suffix[i] <= 'Z') ||
                 (suffix[i] >= '0' && suffix[i] <= '9') || suffix[i] == '-' || suffix[i] == '_';
        if (!ok) return set_err(e, 400, "invalid_value", "suffix", "suffix: 1 to 64 of A-Z a-z 0-9 - _"), -1;
    }
    json_t *settings = resolve_settings(J, body, e);
    if (!settings) return -1;
    ft_job *j = new_job();
    if (!j) {
        json_decref(settings);
        return set_err(e, 500, "server_error", NULL, "out of memory"), -1;
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
        json_t *ev = event_json(j, "info", "message", NULL, msg);
        int rc = jpg_create(J->pg, j->obj, settings, tf, vf, J->cfg.max_pending, ev, e);
        if (rc == 0) *out = json_deep_copy(j->obj);
        json_decref(ev);
        json_decref(settings);
        free_job(j);
        return rc;
    }
    char dir[4200], path[4200];
    pthread_mutex_lock(&J->mu);
    if (count_pending(J) >= J->cfg.max_pending) {
        pthread_mutex_unlock(&J->mu);
        free_job(j);
        json_decref(settings);
        return set_err(e, 429, "too_many_jobs", NULL, "%d fine-tuning jobs are already pending (--max-pending-jobs); "
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
    if (!ok || add_job(J, j) != 0) {
        pthread_mutex_unlock(&J->mu);
        free_job(j);
        return set_err(e, 500, "server_error", NULL, "cannot create the job's directory under --jobs-dir: %s",
                       strerror(errno)), -1;
    }
    add_event(J, j, "info", "message", NULL, "Validating training file: %s", tf);
    set_status(J, j, ST_VALIDATING);
    *out = json_deep_copy(j->obj);
    pthread_mutex_unlock(&J->mu);
    return 0;
}

/* ------------------------------------------------------------------ queries */

json_t *ft_jobs_list(ft_jobs *J, const char *after, int limit) {
    if (J->pg) return jpg_list(J->pg, after, limit, &last_error);
    json_t *data = json_array();
    pthread_mutex_lock(&J->mu);
    size_t start = J->n; /* newest first */
    if (after) {
        for (size_t i = J->n; i-- > 0;)
            if (!strcmp(J->jobs[i]->id, after)) start = i;
    }
    bool more = false;
    for (size_t i = start; i-- > 0;) {
        if ((int)json_array_size(data) == limit) {
            more = true;
            break;
        }
        json_array_append_new(data, json_deep_copy(J->jobs[i]->obj));
    }
    pthread_mutex_unlock(&J->mu);
    return json_pack("{s:s, s:o, s:b}", "object", "list", "data", data, "has_more", more);
}

json_t *ft_jobs_get(ft_jobs *J, const char *id) {
    not_found(id);
    if (J->pg) return jpg_get(J->pg, id, &last_error);
    pthread_mutex_lock(&J->mu);
    ft_job *j = find(J, id);
    json_t *o = j ? json_deep_copy(j->obj) : NULL;
    pthread_mutex_unlock(&J->mu);
    return o;
}

/* A page of arr newest first after the element whose "id" is after. */
static json_t *page_desc(json_t *arr, const char *after, int limit) {
    json_t *data = json_array();
    size_t n = json_array_size(arr), start = n;
    if (after)
        for (size_t i = 0; i < n; i++)
            if (!strcmp(str_or(json_array_get(arr, i), "id", ""), after)) start = i;
    bool more = false;
    for (size_t i = start; i-- > 0;) {
        if ((int)json_array_size(data) == limit) {
            more = true;
            break;
        }
        json_array_append(data, json_array_get(arr, i));
    }
    return json_pack("{s:s, s:o, s:b}", "object", "list", "data", data, "has_more", more);
}

json_t *ft_jobs_events(ft_jobs *J, const char *id, const char *after, int limit) {
    not_found(id);
    if (J->pg) return jpg_events(J->pg, id, after, limit, &last_error);
    pthread_mutex_lock(&J->mu);
    ft_job *j = find(J, id);
    json_t *o = j ? page_desc(j->events, after, limit) : NULL;
    pthread_mutex_unlock(&J->mu);
    return o;
}

json_t *ft_jobs_events_since(ft_jobs *J, const char *id, size_t *cursor, bool *finished) {
    not_found(id);
    if (J->pg) return jpg_events_since(J->pg, id, cursor, finished, &last_error);
    pthread_mutex_lock(&J->mu);
    ft_job *j = find(J, id);
    json_t *o = NULL;
    if (j) {
        o = json_array();
        for (size_t i = *cursor; i < json_array_size(j->events); i++) json_array_append(o, json_array_get(j->events, i));
        *cursor = json_array_size(j->events);
        *finished = j->status >= ST_SUCCEEDED;
    }
    pthread_mutex_unlock(&J->mu);
    return o;
}

json_t *ft_jobs_checkpoints(ft_jobs *J, const char *id, const char *after, int limit) {
    not_found(id);
    if (J->pg) return jpg_checkpoints(J->pg, id, after, limit, &last_error);
    pthread_mutex_lock(&J->mu);
    ft_job *j = find(J, id);
    json_t *o = j ? page_desc(j->checkpoints, after, limit) : NULL;
    pthread_mutex_unlock(&J->mu);
    return o;
}

int ft_jobs_cancel(ft_jobs *J, const char *id, json_t **out, ft_error *e) {
    if (J->pg) return jpg_cancel(J->pg, id, out, e); /* the node running it stops its worker at its next renewal */
    pthread_mutex_lock(&J->mu);
    ft_job *j = find(J, id);
    int rc = 0;
    if (!j) {
        set_err(e, 404, "job_not_found", "fine_tuning_job_id", "no fine-tuning job '%.100s'", id);
        rc = -1;
    } else if (j->status >= ST_SUCCEEDED) {
        set_err(e, 409, "job_finished", "fine_tuning_job_id", "the job %s",
                j->status == ST_CANCELLED ? "was already cancelled" : j->status == ST_FAILED ? "has already failed"
                                                                                           : "has already succeeded");
        rc = -1;
    } else if (j->status == ST_RUNNING && j->pid > 0) {
        /* cancelled from now on, as OpenAI answers; the worker saves a checkpoint and stops (its place is held,
         * through its pid, until it has) */
        j->cancel = true;
        kill(j->pid, SIGTERM);
        add_event(J, j, "info", "message", NULL, "Fine-tuning job cancelled; the worker is saving a checkpoint and "
                  "stopping");
        set_status(J, j, ST_CANCELLED);
    } else {
        j->cancel = true;
        add_event(J, j, "info", "message", NULL, "Fine-tuning job cancelled");
        set_status(J, j, ST_CANCELLED);
    }
    if (rc == 0) *out = json_deep_copy(j->obj);
    pthread_mutex_unlock(&J->mu);
    return rc;
}

/* With the state database: the adapter of fine_tuned_model `name`, fetched and loaded here on first use. */
static const mnemo_adapter *adapter_pg(ft_jobs *J, const char *name, ft_error *e) {
    pthread_mutex_lock(&J->mu);
    for (size_t i = 0; i < J->n_adapters; i++)
        if (!strcmp(J->adapters[i].name, name)) {
            const mnemo_adapter *a = J->adapters[i].a;
            pthread_mutex_unlock(&J->mu);
            return a;
        }
    pthread_mutex_unlock(&J->mu);
    char dir[4200];
    if (strlen(name) >= sizeof J->adapters[0].name || jpg_adapter_dir(J->pg, name, dir, sizeof dir, e) != 0) {
        if (e->status == 404 || strlen(name) >= sizeof J->adapters[0].name)
            set_err(e, 404, "model_not_found", "model", "the model '%.200s' does not exist (this server has '%s' and "
                    "the fine_tuned_model of its succeeded jobs, GET /v1/models)", name, J->base_name);
        return NULL;
    }
    mnemo_adapter *ad = NULL;
    if (mnemo_adapter_load(J->cfg.model, dir, &ad) != MNEMO_OK) {
        set_err(e, 500, "adapter_unavailable", "model", "the adapter of '%.200s' cannot be loaded: %s", name,
                mnemo_adapter_error(ad));
        mnemo_adapter_free(ad);
        return NULL;
    }
    pthread_mutex_lock(&J->mu);
    const mnemo_adapter *a = ad;
    for (size_t i = 0; i < J->n_adapters; i++) /* another thread loaded it meanwhile: keep one */
        if (!strcmp(J->adapters[i].name, name)) a = J->adapters[i].a;
    void *grown = a == ad ? realloc(J->adapters, (J->n_adapters + 1) * sizeof *J->adapters) : NULL;
    if (grown) {
        J->adapters = grown;
        snprintf(J->adapters[J->n_adapters].name, sizeof J->adapters[0].name, "%s", name);
        J->adapters[J->n_adapters++].a = ad;
        J->adapters_loaded++;
    }
    pthread_mutex_unlock(&J->mu);
    if (a != ad || !grown) mnemo_adapter_free(ad);
    if (a == ad && !grown) set_err(e, 500, "server_error", "model", "out of memory");
    return a == ad && !grown ? NULL : a;
}

const mnemo_adapter *ft_jobs_adapter(ft_jobs *J, const char *name, ft_error *e) {
    if (J->pg) return adapter_pg(J, name, e);
    pthread_mutex_lock(&J->mu);
    ft_job *j = NULL;
    for (size_t i = 0; i < J->n && !j; i++)
        if (J->jobs[i]->status == ST_SUCCEEDED && !strcmp(str_or(J->jobs[i]->obj, "fine_tuned_model", ""), name))
            j = J->jobs[i];
    const mnemo_adapter *a = NULL;
    if (!j) {
        set_err(e, 404, "model_not_found", "model", "the model '%.200s' does not exist (this server has '%s' and the "
                "fine_tuned_model of its succeeded jobs, GET /v1/models)", name, J->base_name);
    } else if (j->adapter) {
        a = j->adapter;
    } else {
        char dir[4200];
        job_path(J, j, "out", dir, sizeof dir);
        mnemo_adapter *ad = NULL;
        if (mnemo_adapter_load(J->cfg.model, dir, &ad) != MNEMO_OK) {
            set_err(e, 500, "adapter_unavailable", "model", "the adapter of '%.200s' cannot be loaded: %s", name,
                    mnemo_adapter_error(ad));
            mnemo_adapter_free(ad);
        } else {
            a = j->adapter = ad;
            J->adapters_loaded++;
        }
    }
    pthread_mutex_unlock(&J->mu);
    return a;
}

void ft_jobs_models(ft_jobs *J, json_t *arr, long long created) {
    (void)created;
    if (J->pg) {
        jpg_models(J->pg, arr, J->base_name);
        return;
    }
    pthread_mutex_lock(&J->mu);
    for (size_t i = 0; i < J->n; i++) {
        ft_job *j = J->jobs[i];
        if (j->status != ST_SUCCEEDED) continue;
        json_array_append_new(arr, json_pack("{s:s, s:s, s:O, s:s, s:s}", "id", str_or(j->obj, "fine_tuned_model", ""),
                                             "object", "model", "created_at", json_object_get(j->obj, "finished_at"),
                                             "owned_by", "mnemo", "parent", J->base_name));
        json_t *m = json_array_get(arr, json_array_size(arr) - 1);
        json_object_set(m, "created", json_object_get(j->obj, "finished_at"));
        json_object_del(m, "created_at");
    }
    pthread_mutex_unlock(&J->mu);
}

void ft_jobs_get_stats(ft_jobs *J, ft_jobs_stats *s) {
    memset(s, 0, sizeof *s);
    if (J->pg) jpg_stats(J->pg, s->by_status);
    pthread_mutex_lock(&J->mu);
    for (size_t i = 0; i < J->n && !J->pg; i++) s->by_status[J->jobs[i]->status]++;
    s->tokens_per_s = J->tokens_per_s;
    s->steps = J->steps;
    s->adapters_loaded = J->adapters_loaded;
    pthread_mutex_unlock(&J->mu);
}

/* ------------------------------------------------------------------ the supervisor */

/* Once the examples are counted: n_epochs "auto" becomes a number (train.json and the job say which), and an
 * event says what the job will run with (J->mu held). */
static void choose_hyperparameters(ft_jobs *J, ft_job *j, int64_t examples) {
    char path[4200];
    job_path(J, j, "train.json", path, sizeof path);
    json_t *s = json_load_file(path, 0, NULL);
    if (!s) return;
    bool auto_n = json_is_true(json_object_get(s, "epochs_auto"));
    double epochs = auto_n ? auto_epochs(examples) : json_real_value(json_object_get(s, "epochs"));
    int64_t steps = json_integer_value(json_object_get(s, "steps"));
    int batch = (int)json_integer_value(json_object_get(s, "batch"));
    if (auto_n) {
        json_object_set_new(s, "epochs", json_real(epochs));
        json_object_set_new(s, "epochs_auto", json_false());
        if (write_json_atomic(path, s) != 0) fprintf(stderr, "mnemo-server: warning: cannot write %s\n", path);
    }
    /* given steps, the epochs they make */
    double shown = steps && examples ? round((double)steps * batch / (double)examples * 100) / 100 : epochs;
    if (!steps) steps = (int64_t)ceil(epochs * (double)examples / batch);
    set_hyperparameters(j, hp_echo(s, json_real(shown)));
    add_event(J, j, "info", "message",
              json_pack("{s:f, s:b, s:i, s:f, s:f, s:I}", "n_epochs", shown, "n_epochs_auto", auto_n, "batch_size",
                        batch, "learning_rate_multiplier", json_real_value(json_object_get(s, "lr_multiplier")),
                        "learning_rate", json_real_value(json_object_get(s, "lr")), "steps", (json_int_t)steps),
              "Hyperparameters: n_epochs=%g%s, batch_size=%d, learning_rate_multiplier=%g (learning rate %g), about "
              "%lld steps",
              shown, auto_n ? " (auto: 3, raised to reach 100 examples seen in all or lowered to stay under 25000; "
                              "1 to 25)" : "",
              batch, json_real_value(json_object_get(s, "lr_multiplier")), json_real_value(json_object_get(s, "lr")),
              (long long)steps);
    json_decref(s);
}

/* validating_files -> queued | failed: the data read with the model's tokenizer at the job's seq_len. */
static void validate_one(ft_jobs *J) {
    pthread_mutex_lock(&J->mu);
    ft_job *j = NULL;
    for (size_t i = 0; i < J->n && !j; i++)
        if (J->jobs[i]->status == ST_VALIDATING && !J->jobs[i]->cancel) j = J->jobs[i];
    char data[4200], settings[4200], id[40];
    if (j) {
        job_path(J, j, "train.jsonl", data, sizeof data);
        job_path(J, j, "train.json", settings, sizeof settings);
        snprintf(id, sizeof id, "%s", j->id);
    }
    pthread_mutex_unlock(&J->mu);
    if (!j) return;
    json_t *s = json_load_file(settings, 0, NULL);
    int32_t seq_len = (int32_t)json_integer_value(json_object_get(s, "seq_len"));
    json_decref(s);
    char err[1024] = "", valid[4200];
    int64_t examples = 0;
    mnemo_status st = seq_len > 0 ? mnemo_train_data_check(J->cfg.model, data, seq_len, &examples, err, sizeof err)
                                  : MNEMO_ERR_FORMAT;
    if (seq_len <= 0) snprintf(err, sizeof err, "the job's settings are unreadable");
    snprintf(valid, sizeof valid, "%.*s/valid.jsonl", (int)(strrchr(data, '/') - data), data);
    bool valid_bad = false;
    if (st == MNEMO_OK && access(valid, F_OK) == 0)
        valid_bad = (st = mnemo_train_data_check(J->cfg.model, valid, seq_len, NULL, err, sizeof err)) != MNEMO_OK;
    pthread_mutex_lock(&J->mu);
    if ((j = find(J, id)) != NULL && j->status == ST_VALIDATING) {
        if (st != MNEMO_OK) {
            /* name the upload and its line, not the job's private copy: ".../train.jsonl:3: why" */
            const char *copy = valid_bad ? "valid.jsonl" : "train.jsonl";
            char *where = strstr(err, copy), *rest = where ? where + strlen(copy) : err;
            long line = 0;
            int used = 0;
            if (where && sscanf(rest, ":%ld:%n", &line, &used) == 1 && used > 0) rest += used;
            else if (where && *rest == ':') rest++;
            while (*rest == ' ') rest++;
            char at[32] = "";
            if (line > 0) snprintf(at, sizeof at, ", line %ld", line);
            fail_job(J, j, valid_bad ? "invalid_validation_file" : "invalid_training_file", "%s file %s%s: %s",
                     valid_bad ? "validation" : "training",
                     str_or(j->obj, valid_bad ? "validation_file" : "training_file", "?"), at, rest);
        } else {
            add_event(J, j, "info", "message", json_pack("{s:I}", "examples", (json_int_t)examples),
                      "Files validated: %lld examples; queued", (long long)examples);
            choose_hyperparameters(J, j, examples);
            set_status(J, j, ST_QUEUED);
        }
    }
    pthread_mutex_unlock(&J->mu);
}

/* Starts j's worker (J->mu held). */
static void spawn(ft_jobs *J, ft_job *j) {
    char dir[4200], log[4200], threads[16];
    job_path(J, j, NULL, dir, sizeof dir);
    job_path(J, j, "worker.log", log, sizeof log);
    snprintf(threads, sizeof threads, "%d", J->cfg.train_threads);
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        fail_job(J, j, "server_error", "cannot create a pipe for the worker: %s", strerror(errno));
        return;
    }
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) { /* the child: only async-signal-safe calls until exec */
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* the server gone: checkpoint and stop */
        if (getppid() != parent) _exit(70);
        dup2(p[1], STDOUT_FILENO);
        int lf = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (lf >= 0) dup2(lf, STDERR_FILENO);
        for (int fd = 3; fd < 1024; fd++) close(fd);
        char *argv[] = {J->self_exe, "--finetune-worker", dir, "--threads", threads, "--device",
                        (char *)J->cfg.train_device, NULL};
        execv(J->self_exe, argv);
        _exit(71);
    }
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        fail_job(J, j, "server_error", "cannot start the worker: %s", strerror(errno));
        return;
    }
    fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
    j->pid = pid, j->out_fd = p[0], j->line_len = 0;
    if (j->status != ST_RUNNING) {
        add_event(J, j, "info", "message", NULL, "Fine-tuning job started");
        set_status(J, j, ST_RUNNING);
    }
}

/* One line from a worker (J->mu held). */
static void worker_line(ft_jobs *J, ft_job *j, const char *line) {
    json_t *o = json_loads(line, 0, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        return;
    }
    json_t *step = json_object_get(o, "step");
    if (json_is_integer(step) && json_object_get(o, "loss")) {
        long long s = json_integer_value(step), total = json_integer_value(json_object_get(o, "total_steps"));
        double loss = json_number_value(json_object_get(o, "loss")), tps = json_number_value(json_object_get(o, "tokens_per_s"));
        json_object_set(j->obj, "trained_tokens", json_object_get(o, "trained_tokens"));
        j->tokens_per_s = tps;
        J->tokens_per_s = tps;
        J->steps++;
        json_t *data = json_pack("{s:I, s:I, s:f, s:O, s:O, s:f, s:O}", "step", (json_int_t)s, "total_steps",
                                 (json_int_t)total, "train_loss", loss, "grad_norm", json_object_get(o, "grad_norm"),
                                 "learning_rate", json_object_get(o, "lr"), "tokens_per_s", tps, "eta_s",
                                 json_object_get(o, "eta_s"));
        add_event(J, j, "info", "metrics", data, "Step %lld/%lld: training loss=%.4f", s, total, loss);
    } else if (json_is_integer(json_object_get(o, "checkpoint"))) {
        long long s = json_integer_value(json_object_get(o, "checkpoint"));
        char cid[80], name[400];
        snprintf(cid, sizeof cid, "ftckpt-%s-%lld", j->id + 6, s);
        snprintf(name, sizeof name, "%s:ckpt-step-%lld", str_or(j->obj, "model", "?"), s);
        json_t *ck = json_pack("{s:s, s:s, s:I, s:s, s:I, s:s, s:{s:O}}", "object", "fine_tuning.job.checkpoint", "id",
                               cid, "created_at", (json_int_t)now_unix(), "fine_tuned_model_checkpoint", name,
                               "step_number", (json_int_t)s, "fine_tuning_job_id", j->id, "metrics", "train_loss",
                               json_object_get(o, "loss"));
        json_t *vl = json_object_get(o, "valid_loss");
        if (vl) json_object_set(json_object_get(ck, "metrics"), "valid_loss", vl);
        json_array_append_new(j->checkpoints, ck);
        if (J->pg) jpg_checkpoint(J->pg, j->id, s, ck); /* out/ as of this checkpoint: where another node resumes */
        char path[4200];
        job_path(J, j, "checkpoints.jsonl", path, sizeof path);
        char *text = J->pg ? NULL : json_dumps(ck, JSON_COMPACT);
        FILE *f = text ? fopen(path, "a") : NULL;
        if (f) fprintf(f, "%s\n", text), fclose(f);
        free(text);
        if (vl) add_event(J, j, "info", "metrics", json_pack("{s:I, s:O, s:O}", "step", (json_int_t)s, "train_loss",
                                                             json_object_get(o, "loss"), "valid_loss", vl),
                          "Step %lld: validation loss=%.4f", s, json_number_value(vl));
        add_event(J, j, "info", "message", NULL, "Checkpoint saved at step %lld", s);
    } else if (json_is_object(json_object_get(o, "error"))) {
        json_object_set(j->obj, "error", json_object_get(o, "error"));
    }
    json_decref(o);
}

static void read_worker(ft_jobs *J, ft_job *j) {
    for (;;) {
        ssize_t n = read(j->out_fd, j->line + j->line_len, sizeof j->line - 1 - j->line_len);
        if (n <= 0) return;
        j->line_len += (size_t)n;
        j->line[j->line_len] = 0;
        char *start = j->line, *nl;
        while ((nl = strchr(start, '\n')) != NULL) {
            *nl = 0;
            worker_line(J, j, start);
            start = nl + 1;
        }
        j->line_len = strlen(start);
        memmove(j->line, start, j->line_len + 1);
        if (j->line_len == sizeof j->line - 1) j->line_len = 0; /* an overlong line: dropped */
    }
}

/* A worker has exited (J->mu held): the job's next status. */
static void reap(ft_jobs *J, ft_job *j, int wstatus) {
    read_worker(J, j);
    close(j->out_fd);
    j->out_fd = -1, j->pid = 0;
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0 && !j->cancel) {
        char name[512];
        snprintf(name, sizeof name, "ft:%s:%s:%s", J->base_name, str_or(j->obj, "user_provided_suffix", ""), j->id);
        json_object_set_new(j->obj, "fine_tuned_model", json_string(name));
        json_object_set_new(j->obj, "error", json_null());
        if (J->pg) { /* the adapter and the status in one transaction; failing that, the job resumes (lease) */
            json_object_set_new(j->obj, "status", json_string(STATUS[ST_SUCCEEDED]));
            json_object_set_new(j->obj, "finished_at", json_integer(now_unix()));
            if (!jpg_finish(J->pg, j->id, name, j->obj)) {
                j->lost = true;
                return;
            }
        }
        add_event(J, j, "info", "message", json_pack("{s:s}", "fine_tuned_model", name),
                  "The job has successfully completed: %s", name);
        set_status(J, j, ST_SUCCEEDED);
    } else if (j->cancel) {
        if (j->status != ST_CANCELLED) add_event(J, j, "info", "message", NULL, "Fine-tuning job cancelled");
        else add_event(J, j, "info", "message", NULL, "The worker has stopped");
        set_status(J, j, ST_CANCELLED);
    } else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 1) {
        json_t *err = json_object_get(j->obj, "error");
        fail_job(J, j, str_or(err, "code", "training_failed"), "%s", str_or(err, "message", "the worker failed"));
    } else if (j->restarts < MAX_RESTARTS) {
        j->restarts++;
        add_event(J, j, "warn", "message", NULL, "The worker stopped (%s %d); resuming from the last checkpoint "
                  "(restart %d of %d)", WIFSIGNALED(wstatus) ? "signal" : "exit status",
                  WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : WEXITSTATUS(wstatus), j->restarts, MAX_RESTARTS);
        spawn(J, j);
    } else {
        fail_job(J, j, "worker_crashed", "the worker stopped %d times (last: %s %d)", MAX_RESTARTS + 1,
                 WIFSIGNALED(wstatus) ? "signal" : "exit status",
                 WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : WEXITSTATUS(wstatus));
    }
}

static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void remove_job(ft_jobs *J, size_t i) {
    free_job(J->jobs[i]);
    memmove(&J->jobs[i], &J->jobs[i + 1], (J->n - i - 1) * sizeof *J->jobs);
    J->n--;
}

/* A job claimed from the state database, as this node's own (J->mu held). */
static ft_job *adopt(ft_jobs *J, jpg_claimed *c, int status) {
    ft_job *j = new_job();
    if (!j || add_job(J, j) != 0) {
        free_job(j);
        json_decref(c->obj);
        return NULL;
    }
    snprintf(j->id, sizeof j->id, "%s", c->id);
    j->obj = c->obj;
    j->status = status;
    char path[4200];
    job_path(J, j, "model_dir", path, sizeof path);
    FILE *mf = fopen(path, "w");
    if (mf) fprintf(mf, "%s\n", J->model_dir), fclose(mf);
    return j;
}

/* With the state database (J->mu held): renew the leases of this node's jobs, stop the workers of jobs cancelled
 * elsewhere or taken over, forget jobs that are no longer this node's, claim a job to validate and, while *running
 * is under --max-jobs, one to train. */
static void supervise_pg(ft_jobs *J, int *running) {
    if (mono_s() - J->renewed_at >= J->cfg.lease_s / 3) {
        J->renewed_at = mono_s();
        for (size_t i = 0; i < J->n; i++) {
            ft_job *j = J->jobs[i];
            if (!j->pid && j->status != ST_VALIDATING) continue;
            bool cancel = false;
            if (!jpg_renew(J->pg, j->id, &cancel)) j->lost = true;
            else if (cancel && !j->cancel) {
                j->cancel = true;
                if (j->pid) kill(j->pid, SIGTERM); /* it checkpoints and stops; reap marks it cancelled */
                else j->status = ST_CANCELLED;
            }
        }
    }
    for (size_t i = J->n; i-- > 0;) {
        ft_job *j = J->jobs[i];
        if (j->lost && j->pid) {
            fprintf(stderr, "mnemo-server: job %s: another node holds its lease now; stopping this node's worker\n",
                    j->id);
            kill(j->pid, SIGKILL), waitpid(j->pid, NULL, 0), j->pid = 0, (*running)--;
        }
        if (j->lost || (!j->pid && j->status != ST_VALIDATING && j->status != ST_QUEUED)) remove_job(J, i);
        else if (!j->pid && j->status == ST_QUEUED && j->restarts < 0) remove_job(J, i); /* validated here */
    }
    /* the queue is looked at twice a second: 2 x 2 queries per node and second, whatever the number of nodes */
    if (mono_s() - J->polled_at < 0.5) return;
    J->polled_at = mono_s();
    bool validating = false;
    for (size_t i = 0; i < J->n; i++) validating |= J->jobs[i]->status == ST_VALIDATING;
    jpg_claimed c;
    if (!validating && jpg_claim(J->pg, true, &c) == 1) {
        ft_job *j = adopt(J, &c, ST_VALIDATING);
        if (j) j->restarts = -1; /* not trained here: forgotten once queued */
    }
    if (*running >= J->cfg.max_jobs || jpg_claim(J->pg, false, &c) != 1) return;
    ft_job *j = adopt(J, &c, c.was_running ? ST_RUNNING : ST_QUEUED);
    if (!j || !c.was_running) return; /* a queued one: the loop below starts it */
    if (c.ckpt_step >= 0)
        add_event(J, j, "warn", "message", NULL, "Node %s stopped renewing its lease; node %s resumes the job from "
                  "the checkpoint at step %lld", c.prev_node, J->cfg.node, (long long)c.ckpt_step);
    else
        add_event(J, j, "warn", "message", NULL, "Node %s stopped renewing its lease; node %s starts the job over "
                  "(no checkpoint was stored)", c.prev_node, J->cfg.node);
    spawn(J, j);
    *running += j->pid != 0;
}

static void *supervise(void *arg) {
    ft_jobs *J = arg;
    for (;;) {
        validate_one(J);
        pthread_mutex_lock(&J->mu);
        if (J->stop) break;
        int running = 0;
        for (size_t i = 0; i < J->n; i++) {
            ft_job *j = J->jobs[i];
            if (!j->pid) continue;
            read_worker(J, j);
            int ws;
            if (waitpid(j->pid, &ws, WNOHANG) == j->pid) reap(J, j, ws);
            running += j->pid != 0;
        }
        if (J->pg) supervise_pg(J, &running);
        for (size_t i = 0; i < J->n && running < J->cfg.max_jobs; i++) /* oldest queued first */
            if (J->jobs[i]->status == ST_QUEUED && !J->jobs[i]->cancel) {
                spawn(J, J->jobs[i]);
                running += J->jobs[i]->pid != 0;
            }
        bool validating = false;
        for (size_t i = 0; i < J->n && !validating; i++) validating = J->jobs[i]->status == ST_VALIDATING;
        if (!validating) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&J->cv, &J->mu, &ts);
        }
        pthread_mutex_unlock(&J->mu);
    }
    /* stopping: workers checkpoint and exit; their jobs stay "running" on disk and resume at the next start */
    for (size_t i = 0; i < J->n; i++)
        if (J->jobs[i]->pid) kill(J->jobs[i]->pid, SIGTERM);
    for (size_t i = 0; i < J->n; i++) {
        ft_job *j = J->jobs[i];
        for (int t = 0; j->pid && t < 300; t++) { /* up to 30 s for a checkpoint */
            int ws;
            if (waitpid(j->pid, &ws, WNOHANG) == j->pid) j->pid = 0;
            else {
                pthread_mutex_unlock(&J->mu);
                usleep(100000);
                pthread_mutex_lock(&J->mu);
            }
        }
        if (j->pid) kill(j->pid, SIGKILL), waitpid(j->pid, NULL, 0), j->pid = 0;
    }
    for (size_t i = 0; J->pg && i < J->n; i++) { /* the last checkpoint up, then the job back to the queue */
        ft_job *j = J->jobs[i];
        if (j->out_fd >= 0) read_worker(J, j);
        if (j->status == ST_RUNNING && !j->lost) jpg_release(J->pg, j->id, j->obj);
    }
    pthread_mutex_unlock(&J->mu);
    return NULL;
}

/* ------------------------------------------------------------------ start, stop, reload */

static json_t *load_lines(const char *path) {
    json_t *arr = json_array();
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    while (f && getline(&line, &cap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        if (json_is_object(o)) json_array_append(arr, o);
        json_decref(o);
    }
    free(line);
    if (f) fclose(f);
    return arr;
}

static int by_created(const void *a, const void *b) {
    const ft_job *x = *(ft_job *const *)a, *y = *(ft_job *const *)b;
    json_int_t cx = json_integer_value(json_object_get(x->obj, "created_at"));
    json_int_t cy = json_integer_value(json_object_get(y->obj, "created_at"));
    return cx < cy ? -1 : cx > cy ? 1 : strcmp(x->id, y->id);
}

static void reload(ft_jobs *J) {
    char path[4200];
    snprintf(path, sizeof path, "%s/jobs", J->jobs_dir);
    DIR *d = opendir(path);
    for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
        if (strncmp(de->d_name, "ftjob-", 6) != 0 || strlen(de->d_name) >= sizeof ((ft_job *)0)->id) continue;
        ft_job *j = new_job();
        if (!j) break;
        snprintf(j->id, sizeof j->id, "%s", de->d_name);
        job_path(J, j, "job.json", path, sizeof path);
        j->obj = json_load_file(path, 0, NULL);
        const char *st = str_or(j->obj, "status", "");
        j->status = -1;
        for (int s = 0; s < ST_COUNT; s++)
            if (!strcmp(st, STATUS[s])) j->status = s;
        if (!json_is_object(j->obj) || j->status < 0 || strcmp(str_or(j->obj, "id", ""), j->id) != 0 || add_job(J, j)) {
            fprintf(stderr, "mnemo-server: warning: %s is not a readable job; skipped\n", path);
            free_job(j);
            continue;
        }
        job_path(J, j, "events.jsonl", path, sizeof path);
        json_decref(j->events);
        j->events = load_lines(path);
        job_path(J, j, "checkpoints.jsonl", path, sizeof path);
        json_decref(j->checkpoints);
        j->checkpoints = load_lines(path);
    }
    if (d) closedir(d);
    qsort(J->jobs, J->n, sizeof *J->jobs, by_created);
    for (size_t i = 0; i < J->n; i++) { /* unfinished work goes on: running jobs resume from their checkpoints */
        ft_job *j = J->jobs[i];
        if (j->status == ST_RUNNING) {
            add_event(J, j, "info", "message", NULL, "Server restarted: the job resumes from its last checkpoint");
            set_status(J, j, ST_QUEUED);
        }
    }
}

ft_jobs *ft_jobs_start(const ft_jobs_config *cfg, char *err, size_t errlen) {
    ft_jobs *J = calloc(1, sizeof *J);
    if (!J) return snprintf(err, errlen, "out of memory"), NULL;
    J->cfg = *cfg;
    J->jobs_dir = strdup(cfg->jobs_dir), J->model_dir = strdup(cfg->model_dir), J->base_name = strdup(cfg->base_name);
    J->self_exe = strdup(cfg->self_exe);
    pthread_mutex_init(&J->mu, NULL);
    pthread_cond_init(&J->cv, NULL);
    char path[4200];
    snprintf(path, sizeof path, "%s/jobs", cfg->jobs_dir);
    if (!J->jobs_dir || !J->model_dir || !J->base_name || !J->self_exe || (mkdir(path, 0755) != 0 && errno != EEXIST)) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        ft_jobs_stop(J);
        return NULL;
    }
    if (cfg->pg) J->pg = jpg_new(cfg->pg, cfg->node ? cfg->node : "node", cfg->lease_s > 0 ? cfg->lease_s : 15,
                                 J->jobs_dir);
    if (cfg->pg && !J->pg) {
        snprintf(err, errlen, "out of memory");
        ft_jobs_stop(J);
        return NULL;
    }
    if (!J->pg) reload(J); /* with the state database the jobs are its rows */
    if (pthread_create(&J->thread, NULL, supervise, J) != 0) {
        snprintf(err, errlen, "cannot start the fine-tuning supervisor thread");
        J->thread = 0;
        ft_jobs_stop(J);
        return NULL;
    }
    return J;
}

void ft_jobs_stop(ft_jobs *J) {
    if (!J) return;
    if (J->thread) {
        pthread_mutex_lock(&J->mu);
        J->stop = true;
        pthread_cond_broadcast(&J->cv);
        pthread_mutex_unlock(&J->mu);
        pthread_join(J->thread, NULL);
    }
    for (size_t i = 0; i < J->n; i++) free_job(J->jobs[i]);
    free(J->jobs);
    for (size_t i = 0; i < J->n_adapters; i++) mnemo_adapter_free(J->adapters[i].a);
    free(J->adapters);
    jpg_free(J->pg);
    free(J->jobs_dir), free(J->model_dir), free(J->base_name), free(J->self_exe);
    pthread_mutex_destroy(&J->mu);
    pthread_cond_destroy(&J->cv);
    free(J);
}
