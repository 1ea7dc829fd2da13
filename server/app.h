/*
 * app.h — the server's shared state, handed to every route: options, the model (NULL while loading), the
 * scheduler, metrics and what was decided at start (alias, chat template, context size).
 *
 * Lifecycle: LOADING (the port is bound, /health answers 503) -> READY ("listening on ..." is printed) ->
 * STOPPING (SIGINT/SIGTERM: new inference requests get 503, in-flight ones finish within the grace period) ->
 * STOPPED (streams still open are aborted).
 */
#ifndef MNEMO_SERVER_APP_H
#define MNEMO_SERVER_APP_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

#include "args.h"
#include "engine.h"
#include "finetune_files.h"
#include "finetune_jobs.h"
#include "http.h"
#include "metrics.h"
#include "scheduler.h"
#include "sessions.h"
#include "state.h"

typedef enum { APP_LOADING = 0, APP_READY = 1, APP_STOPPING = 2, APP_STOPPED = 3 } app_state;

#define APP_MAX_ALIASES 8

typedef struct server_app {
    server_opts opts;
    atomic_int state;
    mnemo_model *model;
    scheduler *sched;
    session_store *sessions;
    metrics *mx;
    mnemo_chat_template tmpl;
    mnemo_mem_index mem_index; /* --mem-index, parsed */
    mnemo_memory_mode memory;  /* --memory, parsed */
    mnemo_mem_dtype ret_dtype; /* --ret-dtype, parsed */
    char alias[256];  /* the base model's first name (model_names.h) */
    const char *aliases[APP_MAX_ALIASES]; /* every name of the base model, alias first */
    int n_aliases;
    int n_ctx;        /* per slot (LongLLaMA: the local window; such contexts have no length limit) */
    bool unbounded;   /* the model has LongLLaMA memory layers: prompts and generations longer than n_ctx */
    bool uio;         /* a UIO-LLM (--uio): n_ctx bounds memory + raw positions, the engine says what fits */
    bool retrieval;   /* --memory retrieval: no length limit; the cache is --ret-sinks + --ret-window rows */
    mnemo_uio_info uio_info;
    int n_vocab;
    int port;         /* the bound port (--port 0 picks one) */
    http_server *http; /* connection figures for /metrics, through http_stats (http.c is not in the core library) */
    void (*http_stats)(http_server *http, http_stats *out);
    long long created;
    atomic_ullong seq; /* response ids and default seeds */
    pthread_mutex_t embed_mu; /* one /v1/embeddings request computes at a time (routes_embeddings.c) */
    ft_files *files;          /* --jobs-dir or --state postgresql: uploaded files; NULL without either */
    ft_jobs *jobs;            /* --jobs-dir or --state postgresql: fine-tuning jobs and their adapters; NULL without */
    state_backend store;      /* --state: local directories, or the PostgreSQL database shared by several nodes */
} server_app;

/* {"local_kv_bytes", "memory_key_bytes", "memory_value_bytes", "index_bytes", "memory_tokens"} (routes_info.c). */
json_t *memory_json(const mnemo_memory_stats *m);

/* The HTTP handler (router.c). */
void app_handle(void *app, const http_request *req, http_reply *rep);

/* Routes (routes_*.c). */
void route_completions(server_app *app, const http_request *req, http_reply *rep);
void route_chat_completions(server_app *app, const http_request *req, http_reply *rep);
void route_models(server_app *app, const http_request *req, http_reply *rep);
void route_model_get(server_app *app, const http_request *req, http_reply *rep);
void route_health(server_app *app, const http_request *req, http_reply *rep);
void route_props(server_app *app, const http_request *req, http_reply *rep);
void route_metrics(server_app *app, const http_request *req, http_reply *rep);
void route_embeddings(server_app *app, const http_request *req, http_reply *rep);
void route_llama_completion(server_app *app, const http_request *req, http_reply *rep); /* llama.cpp's /completion */
void route_tokenize(server_app *app, const http_request *req, http_reply *rep);
void route_detokenize(server_app *app, const http_request *req, http_reply *rep);
void route_sessions_create(server_app *app, const http_request *req, http_reply *rep);
void route_sessions_list(server_app *app, const http_request *req, http_reply *rep);
void route_session_get(server_app *app, const http_request *req, http_reply *rep);
void route_session_delete(server_app *app, const http_request *req, http_reply *rep);
void route_session_action(server_app *app, const http_request *req, http_reply *rep); /* .../save, .../restore */
void route_snapshots_list(server_app *app, const http_request *req, http_reply *rep);
void route_snapshot_delete(server_app *app, const http_request *req, http_reply *rep);
void route_files_create(server_app *app, const http_request *req, http_reply *rep);  /* routes_files.c */
void route_files_list(server_app *app, const http_request *req, http_reply *rep);
void route_file_get(server_app *app, const http_request *req, http_reply *rep);      /* .../{id}, .../{id}/content */
void route_file_delete(server_app *app, const http_request *req, http_reply *rep);
void route_ft_jobs_create(server_app *app, const http_request *req, http_reply *rep); /* routes_finetune.c */
void route_ft_jobs_list(server_app *app, const http_request *req, http_reply *rep);
void route_ft_job_get(server_app *app, const http_request *req, http_reply *rep);    /* .../{id}, events, checkpoints */
void route_ft_job_action(server_app *app, const http_request *req, http_reply *rep); /* .../{id}/cancel */
void route_webui(server_app *app, const http_request *req, http_reply *rep);        /* routes_webui.c: / and /webui/ */
/* True for the web page's paths while it is on: they load without the API key (the page asks for it). */
bool webui_public(const server_app *app, const char *path);

#endif
