/*
 * args.h — mnemo-server's command line: every option with its default, parsed into one struct.
 *
 * Parsing never exits: it returns a code and a message, main decides what to print. Defaults are chosen to be safe
 * on a shared machine: loopback only, a bounded per-slot context (not the model's full window), bounded bodies,
 * connections and time.
 */
#ifndef MNEMO_SERVER_ARGS_H
#define MNEMO_SERVER_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    const char *model_dir;     /* --model: checkpoint directory; NULL = mnemo_default_model_dir, resolved by main */
    const char *host;          /* --host: bind address (IPv4 or IPv6 literal) */
    int port;                  /* --port: 0 = pick a free one (printed on stderr) */
    const char *alias[8];      /* --alias (repeatable): the base model's names; default: the directory's basename */
    int n_alias;
    int model_name_strict;     /* --model-name-strict: unknown model names are 404 (default: served by the base) */
    const char *api_key;       /* --api-key or $MNEMO_API_KEY: Bearer token required on all but /health */
    const char *chat_template; /* --chat-template: auto | llama2 | chatml | llama3 | plain */
    const char *device;        /* --device: auto | cpu | cuda */
    int parallel;              /* --parallel: slots (sequences decoded together) */
    int queue;                 /* --queue: requests waiting for a slot before 503 */
    int ctx;                   /* --ctx: KV positions per slot; 0 = min(model window, 4096) */
    int batch;                 /* --batch: most tokens one forward step processes (decode + prefill chunks) */
    int threads;               /* --threads: compute threads; 0 = one per core */
    double timeout_s;          /* --timeout: per-request limit in seconds (queue + generation); 0 = none */
    double grace_s;            /* --grace: on SIGINT/SIGTERM, how long in-flight requests may finish */
    size_t max_body;           /* --max-body: bytes of request body */
    int max_conns;             /* --max-conns: connections served at once (each holds a thread) */
    int64_t cache_ram_mib;     /* --cache-ram: MiB of memory idle slots keep for prefix reuse; -1 = no limit */
    int max_pending;           /* --max-pending: connections sending their headers, held by the front door */
    size_t max_body_inflight;  /* --max-body-inflight: body bytes held at once; 0 = 4 x max_body */
    int64_t max_prompt_tokens; /* --max-prompt-tokens: tokens a prompt or /tokenize text may have; 0 = no limit */
    int conn_timeout_s;        /* --conn-timeout: seconds idle (or stalled in headers/body) before it is closed */
    const char *session_dir;   /* --session-dir: where session snapshots are saved and restored; NULL = off */
    int max_sessions;          /* --max-sessions: live sessions */
    size_t session_max_bytes;  /* --session-max-bytes: memory (keys + values + index) per session; 0 = no limit */
    int mem_knn;               /* --mem-knn: LongLLaMA memory layers attend to the top-K rows; 0 = every row (dense) */
    const char *mem_index;     /* --mem-index: the kNN index (flat | brute | ivf | ivf-grow | hnsw) */
    int mem_nprobe;            /* --mem-nprobe: ivf / ivf-grow cells a query scans; 0 = the engine's default */
    int64_t mem_dense_rows;    /* --mem-dense-rows: with --mem-knn, memory layers stay dense up to this many rows */
    const char *uio_dir;       /* --uio: UIO weights over --model (a UIO-LLM); NULL = none */
    int uio_keep_raw;          /* --uio-keep-raw: raw tokens kept after each compression (option (a)); 0 = reference */
    int uio_mem_budget;        /* --uio-mem-budget: <mem> entries kept in the cache, older to a kNN store; 0 = off */
    int uio_encode_batch;      /* --uio-encode-batch: segments per encoder forward (option (c)); 1 = one by one */
    const char *memory;        /* --memory: model (the model's own) | retrieval (training-free, any plain LLaMA) */
    int ret_sinks, ret_window, ret_topk, ret_block, ret_reps; /* --ret-*: retrieval memory's settings (engine.h) */
    const char *ret_dtype;     /* --ret-dtype: f32 | bf16 | f16 */
    const char *kernel_settings; /* --kernel-settings: NAME=VALUE,... for every context (kernels.h) */
    const char *jobs_dir;      /* --jobs-dir: files, fine-tuning jobs, checkpoints, adapters; NULL = endpoints 501 */
    int train_threads;         /* --train-threads: threads of each fine-tuning worker process; 0 = one per core */
    const char *train_device;  /* --train-device: cpu (default) or cuda, where fine-tuning workers train */
    int max_jobs;              /* --max-jobs: fine-tuning jobs running at once (the rest queue) */
    int max_files;             /* --max-files: uploaded files kept */
    int max_pending_jobs;      /* --max-pending-jobs: jobs validating, queued or running before 429 */
    int no_webui;              /* --no-webui: no web page at / (the API alone) */
    const char *state;         /* --state: "local" or a PostgreSQL conninfo shared by several nodes */
    int state_pool;            /* --state-pool: connections to the state database */
    double state_wait_s;       /* --state-wait: seconds to wait for the database at start; 0 = exit 1 at once */
    const char *node_id;       /* --node-id: this node's name in the database; NULL = host name and pid */
    double lease_s;            /* --lease: seconds a claimed job stays this node's without a renewal */
    int verbose;               /* -v: log each request */
} server_opts;

enum { ARGS_OK = 0, ARGS_HELP = 1, ARGS_ERROR = 2 };

void server_opts_defaults(server_opts *o);
/* ARGS_OK, ARGS_HELP (--help seen) or ARGS_ERROR with a message naming the option in err. */
int server_opts_parse(server_opts *o, int argc, char **argv, char *err, size_t errlen);
void server_opts_usage(FILE *f, const char *prog);

#endif
