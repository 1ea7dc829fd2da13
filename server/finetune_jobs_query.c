/*
 * finetune_jobs_query.c — what the routes ask of the fine-tuning service: jobs, events and checkpoints (from memory,
 * or from the state database), cancelling a job, and the adapters of succeeded jobs served by name.
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

json_t *ft_jobs_list(ft_jobs *J, const char *after, int limit) {
    if (J->pg) return jpg_list(J->pg, after, limit, &jobs_last_error);
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
    job_not_found(id);
    if (J->pg) return jpg_get(J->pg, id, &jobs_last_error);
    pthread_mutex_lock(&J->mu);
    ft_job *j = job_find(J, id);
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
            if (!strcmp(json_str_or(json_array_get(arr, i), "id", ""), after)) start = i;
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
    job_not_found(id);
    if (J->pg) return jpg_events(J->pg, id, after, limit, &jobs_last_error);
    pthread_mutex_lock(&J->mu);
    ft_job *j = job_find(J, id);
    json_t *o = j ? page_desc(j->events, after, limit) : NULL;
    pthread_mutex_unlock(&J->mu);
    return o;
}

json_t *ft_jobs_events_since(ft_jobs *J, const char *id, size_t *cursor, bool *finished) {
    job_not_found(id);
    if (J->pg) return jpg_events_since(J->pg, id, cursor, finished, &jobs_last_error);
    pthread_mutex_lock(&J->mu);
    ft_job *j = job_find(J, id);
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
    job_not_found(id);
    if (J->pg) return jpg_checkpoints(J->pg, id, after, limit, &jobs_last_error);
    pthread_mutex_lock(&J->mu);
    ft_job *j = job_find(J, id);
    json_t *o = j ? page_desc(j->checkpoints, after, limit) : NULL;
    pthread_mutex_unlock(&J->mu);
    return o;
}

int ft_jobs_cancel(ft_jobs *J, const char *id, json_t **out, api_error *e) {
    if (J->pg) return jpg_cancel(J->pg, id, out, e); /* the node running it stops its worker at its next renewal */
    pthread_mutex_lock(&J->mu);
    ft_job *j = job_find(J, id);
    int rc = 0;
    if (!j) {
        api_error_set(e, 404, "job_not_found", "fine_tuning_job_id", "no fine-tuning job '%.100s'", id);
        rc = -1;
    } else if (j->status >= ST_SUCCEEDED) {
        api_error_set(e, 409, "job_finished", "fine_tuning_job_id", "the job %s",
                      j->status == ST_CANCELLED ? "was already cancelled"
                      : j->status == ST_FAILED  ? "has already failed"
                                                : "has already succeeded");
        rc = -1;
    } else if (j->status == ST_RUNNING && j->pid > 0) {
        /* cancelled from now on, as OpenAI answers; the worker saves a checkpoint and stops (its place is held,
         * through its pid, until it has) */
        j->cancel = true;
        kill(j->pid, SIGTERM);
        job_add_event(J, j, "info", "message", NULL, "Fine-tuning job cancelled; the worker is saving a checkpoint and "
                  "stopping");
        job_set_status(J, j, ST_CANCELLED);
    } else {
        j->cancel = true;
        job_add_event(J, j, "info", "message", NULL, "Fine-tuning job cancelled");
        job_set_status(J, j, ST_CANCELLED);
    }
    if (rc == 0) *out = json_deep_copy(j->obj);
    pthread_mutex_unlock(&J->mu);
    return rc;
}

/* With the state database: the adapter of fine_tuned_model `name`, fetched and loaded here on first use. */
static const mnemo_adapter *adapter_pg(ft_jobs *J, const char *name, api_error *e) {
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
            api_error_set(e, 404, "model_not_found", "model",
                          "the model '%.200s' does not exist (this server has '%s' and "
                          "the fine_tuned_model of its succeeded jobs, GET /v1/models)", name, J->base_name);
        return NULL;
    }
    mnemo_adapter *ad = NULL;
    if (mnemo_adapter_load(J->cfg.model, dir, &ad) != MNEMO_OK) {
        api_error_set(e, 500, "adapter_unavailable", "model", "the adapter of '%.200s' cannot be loaded: %s", name,
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
    if (a == ad && !grown) api_error_set(e, 500, "server_error", "model", "out of memory");
    return a == ad && !grown ? NULL : a;
}

const mnemo_adapter *ft_jobs_adapter(ft_jobs *J, const char *name, api_error *e) {
    if (J->pg) return adapter_pg(J, name, e);
    pthread_mutex_lock(&J->mu);
    ft_job *j = NULL;
    for (size_t i = 0; i < J->n && !j; i++)
        if (J->jobs[i]->status == ST_SUCCEEDED && !strcmp(json_str_or(J->jobs[i]->obj, "fine_tuned_model", ""), name))
            j = J->jobs[i];
    const mnemo_adapter *a = NULL;
    if (!j) {
        api_error_set(e, 404, "model_not_found", "model",
                      "the model '%.200s' does not exist (this server has '%s' and the "
                      "fine_tuned_model of its succeeded jobs, GET /v1/models)", name, J->base_name);
    } else if (j->adapter) {
        a = j->adapter;
    } else {
        char dir[4200];
        job_path(J, j, "out", dir, sizeof dir);
        mnemo_adapter *ad = NULL;
        if (mnemo_adapter_load(J->cfg.model, dir, &ad) != MNEMO_OK) {
            api_error_set(e, 500, "adapter_unavailable", "model", "the adapter of '%.200s' cannot be loaded: %s", name,
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
        json_array_append_new(arr, json_pack("{s:s, s:s, s:O, s:s, s:s}", "id",
                                             json_str_or(j->obj, "fine_tuned_model", ""), "object", "model",
                                             "created_at", json_object_get(j->obj, "finished_at"), "owned_by", "mnemo",
                                             "parent", J->base_name));
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
