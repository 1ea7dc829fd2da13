/*
 * finetune_jobs_reload.c — a restarted server finds its jobs again: each <jobs-dir>/jobs/<id>/ with its job.json,
 * events and checkpoints, in creation order; jobs that were queued or running are queued again to resume from their
 * last checkpoint.
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

void jobs_reload(ft_jobs *J) {
    char path[4200];
    snprintf(path, sizeof path, "%s/jobs", J->jobs_dir);
    DIR *d = opendir(path);
    for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
        if (strncmp(de->d_name, "ftjob-", 6) != 0 || strlen(de->d_name) >= sizeof ((ft_job *)0)->id) continue;
        ft_job *j = job_new();
        if (!j) break;
        snprintf(j->id, sizeof j->id, "%s", de->d_name);
        job_path(J, j, "job.json", path, sizeof path);
        j->obj = json_load_file(path, 0, NULL);
        const char *st = json_str_or(j->obj, "status", "");
        j->status = -1;
        for (int s = 0; s < ST_COUNT; s++)
            if (!strcmp(st, STATUS[s])) j->status = s;
        if (!json_is_object(j->obj) || j->status < 0 || strcmp(json_str_or(j->obj, "id", ""), j->id) != 0 ||
            jobs_add(J, j)) {
            fprintf(stderr, "mnemo-server: warning: %s is not a readable job; skipped\n", path);
            job_free(j);
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
            job_add_event(J, j, "info", "message", NULL, "Server restarted: the job resumes from its last checkpoint");
            job_set_status(J, j, ST_QUEUED);
        }
    }
}
