/*
 * args.c — command line parsing for mnemo-server (see args.h). A table of options keeps the parser, the
 * range checks and --help in one place.
 */
#include "args.h"

#include <engine.h>

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

typedef enum { OPT_STR, OPT_INT, OPT_DBL, OPT_SIZE, OPT_I64, OPT_NAMES, OPT_FLAG } opt_kind;

typedef struct {
    const char *name;
    opt_kind kind;
    size_t off;
    double lo, hi;
    const char *help;
} opt_def;

#define OFF(f) offsetof(server_opts, f)
static const opt_def OPTS[] = {
    {"--model", OPT_STR, OFF(model_dir), 0, 0,
     "checkpoint directory or GGUF file (default: $MNEMO_MODEL, else SmolLM2-135M-Instruct, installed with mnemo)"},
    {"--host", OPT_STR, OFF(host), 0, 0, "bind address (default 127.0.0.1; 0.0.0.0 exposes the server)"},
    {"--port", OPT_INT, OFF(port), 0, 65535, "TCP port (default 8080; 0 picks a free port)"},
    {"--alias", OPT_NAMES, OFF(alias), 0, 0,
     "a name of the model for clients, repeatable (up to 8; the first is listed first; default: the model "
     "directory's or GGUF file's name, without .gguf)"},
    {"--served-model-name", OPT_NAMES, OFF(alias), 0, 0, "the same as --alias (vLLM's name for it)"},
    {"--model-name-strict", OPT_FLAG, OFF(model_name_strict), 0, 0,
     "answer 404 to a model name that is not the model's (default: any other name that is not a fine-tuned "
     "'ft:' one is served by the model, as llama.cpp does, and the response names the model)"},
    {"--api-key", OPT_STR, OFF(api_key), 0, 0, "require 'Authorization: Bearer KEY' (also $MNEMO_API_KEY)"},
    {"--chat-template", OPT_STR, OFF(chat_template), 0, 0,
     "auto | llama2 | chatml | llama3 | plain (default auto: tokenizer_config.json or the GGUF's, else llama2)"},
    {"--device", OPT_STR, OFF(device), 0, 0, "auto | cpu | cuda (default auto)"},
    {"--parallel", OPT_INT, OFF(parallel), 1, 256, "slots decoded together in one batch (default 4)"},
    {"--queue", OPT_INT, OFF(queue), 0, 100000, "requests waiting for a slot before 503 (default 64)"},
    {"--ctx", OPT_INT, OFF(ctx), 0, 1 << 24, "KV positions per slot (default min(model window, 4096))"},
    {"--batch", OPT_INT, OFF(batch), 1, 1 << 16, "most tokens per forward step, prefill chunks included (512)"},
    {"--threads", OPT_INT, OFF(threads), 0, 1024, "compute threads (default 0 = one per core)"},
    {"--timeout", OPT_DBL, OFF(timeout_s), 0, 1e7, "per-request limit in seconds, queue included (600; 0 none)"},
    {"--grace", OPT_DBL, OFF(grace_s), 0, 3600, "seconds in-flight requests get on SIGINT/SIGTERM (10)"},
    {"--max-body", OPT_SIZE, OFF(max_body), 64, 1 << 30, "largest request body in bytes (8388608)"},
    {"--cache-ram", OPT_I64, OFF(cache_ram_mib), -1, 1e9,
     "MiB of memory (LongLLaMA memory rows and indexes) idle slots keep for prefix reuse; past it the slot idle "
     "longest forgets (default 1024; 0 = none; -1 = no limit)"},
    {"--max-conns", OPT_INT, OFF(max_conns), 1, 10000,
     "connections served at once, keep-alive ones included (default 128); past it the longest-idle keep-alive "
     "connection is closed, else a new one waits up to 1 s, then gets 503"},
    {"--max-pending", OPT_INT, OFF(max_pending), 1, 1000000,
     "connections still sending their request headers, held without a thread (default 1024; past it the one "
     "waiting longest is closed)"},
    {"--max-body-inflight", OPT_SIZE, OFF(max_body_inflight), 0, 1e15,
     "request body bytes held at once over all connections (default 4 x --max-body); past it 503"},
    {"--max-prompt-tokens", OPT_I64, OFF(max_prompt_tokens), 0, 1e12,
     "tokens one request may send: a prompt (400) or /tokenize text (413) (default 1048576; 0 = no limit)"},
    {"--session-dir", OPT_STR, OFF(session_dir), 0, 0, "directory for session snapshots, created if missing (default: none, save off)"},
    {"--max-sessions", OPT_INT, OFF(max_sessions), 0, 100000, "live sessions at once (default 16; 0 = no sessions)"},
    {"--session-max-bytes", OPT_SIZE, OFF(session_max_bytes), 0, 1e15,
     "memory per session, keys + values + index (4294967296; 0 = no limit)"},
    {"--mem-knn", OPT_INT, OFF(mem_knn), 0, 1 << 20,
     "LongLLaMA: past --mem-dense-rows, attend to the top-K memory rows per query (default 128; 0 = every row "
     "at every length, as released)"},
    {"--mem-dense-rows", OPT_I64, OFF(mem_dense_rows), 0, 1e15,
     "LongLLaMA: memory rows read densely (exact) before kNN takes over (default 8192; 0 = kNN from the start)"},
    {"--mem-index", OPT_STR, OFF(mem_index), 0, 0,
     "kNN index: auto (default: ivf-grow on the CPU, exact on a GPU) | flat (exact) | brute | ivf | ivf-grow | "
     "hnsw"},
    {"--mem-nprobe", OPT_INT, OFF(mem_nprobe), 0, 65536,
     "ivf / ivf-grow: cells each query scans (default 0 = 16; more: higher recall, slower; ivf: <= 256)"},
    {"--uio", OPT_STR, OFF(uio_dir), 0, 0,
     "UIO-LLM: UIO weights over --model (uio_config.json + uio.pth or uio.safetensors); each chunk_size tokens "
     "are compressed into num_memory <mem> entries, and --ctx bounds memory + raw positions"},
    {"--uio-keep-raw", OPT_INT, OFF(uio_keep_raw), 0, 1 << 20,
     "UIO: the last W tokens of a compressed segment stay raw beside the new memory (default 0, as the reference; "
     "at most chunk_size; not with the two below)"},
    {"--uio-mem-budget", OPT_INT, OFF(uio_mem_budget), 0, 1 << 30,
     "UIO: at most N <mem> entries per slot stay in the KV cache, older ones move to a kNN memory (--mem-index, "
     "--mem-knn, --mem-dense-rows, --mem-nprobe) attended at position 0, so --ctx needs N + chunk_size positions "
     "and no longer bounds a prompt (default 0 = off, the reference)"},
    {"--uio-encode-batch", OPT_INT, OFF(uio_encode_batch), 1, 4096,
     "UIO: whole segments of one mnemo_decode call compressed N per encoder forward (default 1 = one by one, the "
     "reference's order); the server prefills through mnemo_decode_batch, one segment per step, so it changes "
     "no result or speed here yet"},
    {"--memory", OPT_STR, OFF(memory), 0, 0,
     "model (default: the model's own memory, if any) | retrieval: training-free retrieval memory for a plain RoPE "
     "LLaMA (InfLLM): the first --ret-sinks and last --ret-window tokens stay in the cache, older ones move to memory "
     "in blocks, and each step attends to the top --ret-topk blocks; no prompt length limit"},
    {"--ret-sinks", OPT_INT, OFF(ret_sinks), 0, 1 << 24, "retrieval: first tokens kept for good (default 64)"},
    {"--ret-window", OPT_INT, OFF(ret_window), 1, 1 << 24,
     "retrieval: latest tokens kept (default 2048; sinks + window within the model's positions)"},
    {"--ret-topk", OPT_INT, OFF(ret_topk), 0, 1 << 20, "retrieval: memory blocks per step, layer and KV head (16)"},
    {"--ret-block", OPT_INT, OFF(ret_block), 0, 1 << 20, "retrieval: tokens per memory block (128)"},
    {"--ret-reps", OPT_INT, OFF(ret_reps), 0, 1 << 20, "retrieval: representative keys per block (4)"},
    {"--ret-dtype", OPT_STR, OFF(ret_dtype), 0, 0, "retrieval: memory keys and values in f32 (default), bf16 or f16"},
    {"--kernel-settings", OPT_STR, OFF(kernel_settings), 0, 0,
     "kernel paths for every slot, NAME=VALUE,... (cpu.gemm=fast|exact, cuda.attn=simt|tc|mma, ...; "
     "docs/kernel-settings.md)"},
    {"--jobs-dir", OPT_STR, OFF(jobs_dir), 0, 0,
     "directory for uploaded files, fine-tuning jobs, their checkpoints and adapters, created if missing (default: "
     "none, the /v1/files "
     "and /v1/fine_tuning endpoints answer 501); uploads are bounded by --max-body"},
    {"--train-threads", OPT_INT, OFF(train_threads), 0, 1024,
     "threads of each fine-tuning worker process (default 1; 0 = one per core)"},
    {"--train-device", OPT_STR, OFF(train_device), 0, 0,
     "cpu | cuda: where fine-tuning workers train (default cpu; cuda shares the GPU with serving)"},
    {"--max-jobs", OPT_INT, OFF(max_jobs), 0, 64,
     "fine-tuning jobs running at once; the rest wait queued (1; 0 = this node trains none, another node does)"},
    {"--max-files", OPT_INT, OFF(max_files), 1, 1000000, "uploaded files kept in --jobs-dir (1000)"},
    {"--max-pending-jobs", OPT_INT, OFF(max_pending_jobs), 1, 1000000,
     "fine-tuning jobs validating, queued or running before new ones get 429 (100)"},
    {"--no-webui", OPT_FLAG, OFF(no_webui), 0, 0,
     "serve no web page at / (default: a page for chat, documents, sessions, fine-tuning and metrics)"},
    {"--state", OPT_STR, OFF(state), 0, 0,
     "where sessions' snapshots, files, jobs and adapters live: local (default: --session-dir, --jobs-dir) or a "
     "PostgreSQL conninfo (postgresql://user@host/db?sslmode=...) shared by several nodes"},
    {"--state-pool", OPT_INT, OFF(state_pool), 1, 256, "connections to the state database (4)"},
    {"--state-wait", OPT_DBL, OFF(state_wait_s), 0, 86400,
     "seconds to wait for an unreachable state database at start (default 0: exit 1 at once)"},
    {"--node-id", OPT_STR, OFF(node_id), 0, 0, "this node's name in the state database (default: host name and pid)"},
    {"--lease", OPT_DBL, OFF(lease_s), 0.5, 3600,
     "seconds a node holds a fine-tuning job without renewing before another node resumes it (15)"},
    {"--conn-timeout", OPT_INT, OFF(conn_timeout_s), 1, 86400,
     "seconds idle, or sending headers or body, before a connection is closed (10)"},
};
#undef OFF

void server_opts_defaults(server_opts *o) {
    memset(o, 0, sizeof *o);
    o->model_dir = NULL; /* main resolves it: mnemo_default_model_dir */
    o->host = "127.0.0.1";
    o->port = 8080;
    o->chat_template = "auto";
    o->device = "auto";
    o->parallel = 4;
    o->queue = 64;
    o->batch = 512;
    o->timeout_s = 600;
    o->grace_s = 10;
    o->max_body = 8u << 20;
    o->max_conns = 128;
    o->max_pending = 1024;
    o->cache_ram_mib = 1024;
    o->max_prompt_tokens = 1 << 20;
    o->conn_timeout_s = 10;
    o->max_sessions = 16;
    o->train_threads = 1;
    o->train_device = "cpu";
    o->max_jobs = 1;
    o->max_files = 1000;
    o->max_pending_jobs = 100;
    o->state = "local";
    o->state_pool = 4;
    o->lease_s = 15;
    o->session_max_bytes = (size_t)4 << 30;
    o->uio_encode_batch = 1;
    o->mem_index = "auto"; /* the engine's defaults (engine.h mnemo_context_default_params) */
    o->mem_knn = MNEMO_MEM_KNN_K_DEFAULT;
    o->mem_dense_rows = MNEMO_MEM_DENSE_ROWS_DEFAULT;
    o->memory = "model";
    o->ret_sinks = MNEMO_RET_SINKS_DEFAULT;
    o->ret_window = MNEMO_RET_WINDOW_DEFAULT;
    o->ret_topk = MNEMO_RET_TOPK_DEFAULT;
    o->ret_block = MNEMO_RET_BLOCK_DEFAULT;
    o->ret_reps = MNEMO_RET_REPS_DEFAULT;
    o->ret_dtype = "f32";
    const char *key = getenv("MNEMO_API_KEY");
    if (key && *key) o->api_key = key;
}

void server_opts_usage(FILE *f, const char *prog) {
    fprintf(f,
            "usage: %s [options]\n"
            "OpenAI-compatible HTTP server for mnemo (POST /v1/completions, /v1/chat/completions, /v1/embeddings,\n"
            "/completion (llama.cpp), /tokenize, /detokenize; GET /v1/models, /health, /props, /metrics; sessions\n"
            "under /v1/sessions).\n\noptions:\n",
            prog);
    for (size_t i = 0; i < sizeof OPTS / sizeof OPTS[0]; i++) {
        const char *arg = OPTS[i].kind == OPT_STR || OPTS[i].kind == OPT_NAMES ? " TEXT"
                          : OPTS[i].kind == OPT_DBL                          ? " SEC"
                          : OPTS[i].kind == OPT_FLAG                         ? ""
                                                                             : " N";
        fprintf(f, "  %s%-*s %s\n", OPTS[i].name, (int)(22 - strlen(OPTS[i].name)), arg, OPTS[i].help);
    }
    fprintf(f, "  -v, --verbose            log every request\n  -h, --help               this text\n");
    char dir[4096];
    bool found = mnemo_default_model_dir(dir, sizeof dir) == MNEMO_OK;
    fprintf(f, "\n%s: %s\n", found ? "default model (no --model) now" : "no default model", dir);
}

static int set_value(server_opts *o, const opt_def *d, const char *v, char *err, size_t errlen) {
    char *p = (char *)o + d->off;
    if (d->kind == OPT_NAMES) {
        if (!*v) {
            snprintf(err, errlen, "%s needs a non-empty value", d->name);
            return ARGS_ERROR;
        }
        if (o->n_alias >= 8) {
            snprintf(err, errlen, "%s: at most 8 names", d->name);
            return ARGS_ERROR;
        }
        o->alias[o->n_alias++] = v;
        return ARGS_OK;
    }
    if (d->kind == OPT_STR) {
        if (!*v) {
            snprintf(err, errlen, "%s needs a non-empty value", d->name);
            return ARGS_ERROR;
        }
        *(const char **)p = v;
        return ARGS_OK;
    }
    errno = 0;
    char *end = NULL;
    double x = strtod(v, &end);
    if (errno || end == v || *end || x != x || x < d->lo || x > d->hi ||
        (d->kind != OPT_DBL && x != (double)(long long)x)) {
        snprintf(err, errlen, "%s expects %s in [%g, %g], got '%s'", d->name,
                 d->kind == OPT_DBL ? "a number" : "an integer", d->lo, d->hi, v);
        return ARGS_ERROR;
    }
    if (d->kind == OPT_INT) *(int *)p = (int)x;
    else if (d->kind == OPT_SIZE) *(size_t *)p = (size_t)x;
    else if (d->kind == OPT_I64) *(int64_t *)p = (int64_t)x;
    else *(double *)p = x;
    return ARGS_OK;
}

int server_opts_parse(server_opts *o, int argc, char **argv, char *err, size_t errlen) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return ARGS_HELP;
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o->verbose = 1;
            continue;
        }
        const opt_def *d = NULL;
        const char *val = NULL;
        for (size_t k = 0; k < sizeof OPTS / sizeof OPTS[0] && !d; k++) {
            size_t n = strlen(OPTS[k].name);
            if (!strncmp(a, OPTS[k].name, n) && (a[n] == '\0' || a[n] == '=')) {
                d = &OPTS[k];
                if (a[n] == '=') val = a + n + 1;
            }
        }
        if (!d) {
            snprintf(err, errlen, "unknown option '%s' (see --help)", a);
            return ARGS_ERROR;
        }
        if (d->kind == OPT_FLAG) {
            if (val) {
                snprintf(err, errlen, "%s takes no value", d->name);
                return ARGS_ERROR;
            }
            *(int *)((char *)o + d->off) = 1;
            continue;
        }
        if (!val) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "%s needs a value", d->name);
                return ARGS_ERROR;
            }
            val = argv[++i];
        }
        int rc = set_value(o, d, val, err, errlen);
        if (rc != ARGS_OK) return rc;
    }
    if (o->parallel > o->batch) {
        snprintf(err, errlen, "--parallel (%d) must not exceed --batch (%d): every slot needs a token per step",
                 o->parallel, o->batch);
        return ARGS_ERROR;
    }
    return ARGS_OK;
}
