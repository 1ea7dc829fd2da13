/*
 * finetune_supervisor.c — the fine-tuning supervisor thread: it validates a job's data with the model's tokenizer,
 * starts at most max_jobs workers (this executable re-run as --finetune-worker), turns their step lines into
 * events, and reaps, restarts (up to MAX_RESTARTS) or fails them; with the state database it claims queued jobs
 * and renews their leases. It holds the job table's mutex except around the slow work.
 */
#define _GNU_SOURCE /* pipe2, dirfd */
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
    job_add_event(J, j, "info", "message",
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
    if ((j = job_find(J, id)) != NULL && j->status == ST_VALIDATING) {
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
            job_fail(J, j, valid_bad ? "invalid_validation_file" : "invalid_training_file", "%s file %s%s: %s",
                     valid_bad ? "validation" : "training",
                     json_str_or(j->obj, valid_bad ? "validation_file" : "training_file", "?"), at, rest);
        } else {
            job_add_event(J, j, "info", "message", json_pack("{s:I}", "examples", (json_int_t)examples),
                      "Files validated: %lld examples; queued", (long long)examples);
            choose_hyperparameters(J, j, examples);
            job_set_status(J, j, ST_QUEUED);
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
        job_fail(J, j, "server_error", "cannot create a pipe for the worker: %s", strerror(errno));
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
        job_fail(J, j, "server_error", "cannot start the worker: %s", strerror(errno));
        return;
    }
    fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
    j->pid = pid, j->out_fd = p[0], j->line_len = 0;
    if (j->status != ST_RUNNING) {
        job_add_event(J, j, "info", "message", NULL, "Fine-tuning job started");
        job_set_status(J, j, ST_RUNNING);
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
        job_add_event(J, j, "info", "metrics", data, "Step %lld/%lld: training loss=%.4f", s, total, loss);
    } else if (json_is_integer(json_object_get(o, "checkpoint"))) {
        long long s = json_integer_value(json_object_get(o, "checkpoint"));
        char cid[80], name[400];
        snprintf(cid, sizeof cid, "ftckpt-%s-%lld", j->id + 6, s);
        snprintf(name, sizeof name, "%s:ckpt-step-%lld", json_str_or(j->obj, "model", "?"), s);
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
        if (vl) job_add_event(J, j, "info", "metrics", json_pack("{s:I, s:O, s:O}", "step", (json_int_t)s, "train_loss",
                                                             json_object_get(o, "loss"), "valid_loss", vl),
                          "Step %lld: validation loss=%.4f", s, json_number_value(vl));
        job_add_event(J, j, "info", "message", NULL, "Checkpoint saved at step %lld", s);
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
        snprintf(name, sizeof name, "ft:%s:%s:%s", J->base_name, json_str_or(j->obj, "user_provided_suffix", ""),
                 j->id);
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
        job_add_event(J, j, "info", "message", json_pack("{s:s}", "fine_tuned_model", name),
                  "The job has successfully completed: %s", name);
        job_set_status(J, j, ST_SUCCEEDED);
    } else if (j->cancel) {
        if (j->status != ST_CANCELLED) job_add_event(J, j, "info", "message", NULL, "Fine-tuning job cancelled");
        else job_add_event(J, j, "info", "message", NULL, "The worker has stopped");
        job_set_status(J, j, ST_CANCELLED);
    } else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 1) {
        json_t *err = json_object_get(j->obj, "error");
        job_fail(J, j, json_str_or(err, "code", "training_failed"), "%s",
                 json_str_or(err, "message", "the worker failed"));
    } else if (j->restarts < MAX_RESTARTS) {
        j->restarts++;
        job_add_event(J, j, "warn", "message", NULL, "The worker stopped (%s %d); resuming from the last checkpoint "
                  "(restart %d of %d)", WIFSIGNALED(wstatus) ? "signal" : "exit status",
                  WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : WEXITSTATUS(wstatus), j->restarts, MAX_RESTARTS);
        spawn(J, j);
    } else {
        job_fail(J, j, "worker_crashed", "the worker stopped %d times (last: %s %d)", MAX_RESTARTS + 1,
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
    job_free(J->jobs[i]);
    memmove(&J->jobs[i], &J->jobs[i + 1], (J->n - i - 1) * sizeof *J->jobs);
    J->n--;
}

/* A job claimed from the state database, as this node's own (J->mu held). */
static ft_job *adopt(ft_jobs *J, jpg_claimed *c, int status) {
    ft_job *j = job_new();
    if (!j || jobs_add(J, j) != 0) {
        job_free(j);
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
        job_add_event(J, j, "warn", "message", NULL, "Node %s stopped renewing its lease; node %s resumes the job from "
                  "the checkpoint at step %lld", c.prev_node, J->cfg.node, (long long)c.ckpt_step);
    else
        job_add_event(J, j, "warn", "message", NULL, "Node %s stopped renewing its lease; node %s starts the job over "
                  "(no checkpoint was stored)", c.prev_node, J->cfg.node);
    spawn(J, j);
    *running += j->pid != 0;
}

void *ft_supervise(void *arg) {
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
