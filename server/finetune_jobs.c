/*
 * finetune_jobs.c — the fine-tuning service (see finetune_jobs.h): start and stop, and the job records every part
 * shares — a job's files (job.json, events.jsonl) or its rows in the state database kept in step with its record,
 * its events and status changes. One mutex guards the job table; the supervisor thread (finetune_supervisor.c)
 * does the slow work outside it where it can. The files of the service: finetune_jobs_impl.h.
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

_Thread_local api_error jobs_last_error;

const api_error *ft_jobs_last_error(void) { return &jobs_last_error; }

void job_not_found(const char *id) {
    jobs_last_error = (api_error){.status = 404};
    snprintf(jobs_last_error.code, sizeof jobs_last_error.code, "job_not_found");
    snprintf(jobs_last_error.message, sizeof jobs_last_error.message, "no fine-tuning job '%.100s'", id ? id : "");
}

void job_path(const ft_jobs *J, const ft_job *j, const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s/jobs/%s%s%s", J->jobs_dir, j->id, name ? "/" : "", name ? name : "");
}

/* Writes obj to path through path.tmp + rename. 0, or -1. */
int write_json_atomic(const char *path, json_t *obj) {
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

long long now_unix(void) { return (long long)time(NULL); }

/* An event (OpenAI's fine_tuning.job.event); data may be NULL; stolen. The state database numbers events itself. */
json_t *job_event_json(const ft_job *j, const char *level, const char *type, json_t *data, const char *msg) {
    char eid[64];
    snprintf(eid, sizeof eid, "ftevent-%s-%zu", j->id + 6, json_array_size(j->events));
    json_t *ev = json_pack("{s:s, s:s, s:I, s:s, s:s, s:s}", "object", "fine_tuning.job.event", "id", eid,
                           "created_at", (json_int_t)now_unix(), "level", level, "message", msg, "type", type);
    json_object_set_new(ev, "data", data ? data : json_object());
    return ev;
}

/* Appends an event to memory and events.jsonl (or the state database). data may be NULL; stolen. */
void job_add_event(ft_jobs *J, ft_job *j, const char *level, const char *type, json_t *data, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *ev = job_event_json(j, level, type, data, msg);
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

void job_set_status(ft_jobs *J, ft_job *j, int st) {
    j->status = st;
    json_object_set_new(j->obj, "status", json_string(STATUS[st]));
    if (st >= ST_SUCCEEDED) json_object_set_new(j->obj, "finished_at", json_integer(now_unix()));
    persist(J, j);
    pthread_cond_broadcast(&J->cv);
}

void job_fail(ft_jobs *J, ft_job *j, const char *code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_object_set_new(j->obj, "error", json_pack("{s:s, s:s, s:n}", "code", code, "message", msg, "param"));
    job_add_event(J, j, "error", "message", NULL, "Fine-tuning job failed: %s", msg);
    job_set_status(J, j, ST_FAILED);
}

ft_job *job_find(ft_jobs *J, const char *id) {
    for (size_t i = 0; i < J->n; i++)
        if (!strcmp(J->jobs[i]->id, id)) return J->jobs[i];
    return NULL;
}

int jobs_add(ft_jobs *J, ft_job *j) {
    if (J->n == J->cap) {
        size_t c = J->cap ? 2 * J->cap : 16;
        ft_job **a = realloc(J->jobs, c * sizeof *a);
        if (!a) return -1;
        J->jobs = a, J->cap = c;
    }
    J->jobs[J->n++] = j;
    return 0;
}

void job_free(ft_job *j) {
    if (!j) return;
    json_decref(j->obj), json_decref(j->events), json_decref(j->checkpoints);
    if (j->out_fd >= 0) close(j->out_fd);
    mnemo_adapter_free(j->adapter);
    free(j);
}

ft_job *job_new(void) {
    ft_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->out_fd = -1;
    j->events = json_array();
    j->checkpoints = json_array();
    return j;
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
    if (!J->pg) jobs_reload(J); /* with the state database the jobs are its rows */
    if (pthread_create(&J->thread, NULL, ft_supervise, J) != 0) {
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
    for (size_t i = 0; i < J->n; i++) job_free(J->jobs[i]);
    free(J->jobs);
    for (size_t i = 0; i < J->n_adapters; i++) mnemo_adapter_free(J->adapters[i].a);
    free(J->adapters);
    jpg_free(J->pg);
    free(J->jobs_dir), free(J->model_dir), free(J->base_name), free(J->self_exe);
    pthread_mutex_destroy(&J->mu);
    pthread_cond_destroy(&J->cv);
    free(J);
}
