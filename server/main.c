/*
 * main.c — mnemo-server: command line, start-up order and shutdown.
 *
 * Start-up: bind first (so a taken port fails at once and /health answers 503 while the model loads), then the
 * model, the chat template, the slots; READY is published last, and only then "listening on ..." is printed: a
 * server that cannot load its model says so in one line and exits 1 without ever claiming to listen. With
 * --jobs-dir, the directory is checked (created if missing) and the files store opened before the bind, since the
 * files API needs no model; an unusable directory is exit status 2, like a bad option.
 * Signals: libraries start threads before main runs (OpenBLAS), so blocking SIGINT/SIGTERM cannot cover every
 * thread; instead their handler only writes the signal number to a self-pipe (async-signal-safe in whichever thread
 * runs it) and main waits on that pipe.
 * Shutdown: stop accepting (listening socket closed, new inference requests 503), let in-flight requests finish
 * for --grace seconds (a second signal cuts it short), cancel the rest (they end within one step), let responses
 * drain briefly, close everything, exit 0. A signal while the model loads stops the server once the load returns
 * (exit 0).
 */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "http.h"
#include "text_util.h"

static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("mnemo-server: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Engine diagnostics with the server's prefix. Errors are dropped while the model loads: the load's status
 * carries the same message, which load() prints once. */
static atomic_bool loading_model;
static int engine_log_max = MNEMO_LOG_WARN;

static void engine_log(mnemo_log_level level, const char *msg, void *user) {
    (void)user;
    static const char *names[] = {"error", "warning", "info", "debug"};
    if ((level == MNEMO_LOG_ERROR && atomic_load(&loading_model)) || (int)level > engine_log_max) return;
    fprintf(stderr, "mnemo-server: engine %s: %s\n", names[level], msg);
}

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig) {
    int saved = errno;
    unsigned char c = (unsigned char)sig;
    if (write(sig_pipe[1], &c, 1) < 0) { /* pipe full: a signal is already pending, nothing lost */ }
    errno = saved;
}

static int install_signals(void) {
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

/* Waits up to seconds for SIGINT/SIGTERM; returns the signal or 0. */
static int wait_signal(double seconds) {
    struct pollfd p = {.fd = sig_pipe[0], .events = POLLIN};
    int ms = seconds > 1e6 ? 1000000000 : (int)(seconds * 1e3);
    if (poll(&p, 1, ms) <= 0) return 0;
    unsigned char c = 0;
    return read(sig_pipe[0], &c, 1) == 1 ? c : 0;
}

/* --jobs-dir: an existing directory we can read and write, or one we create (its parent must exist). 0, or -1
 * with the reason in err. */
/* Every connection the server holds is a file descriptor: raise the soft limit toward the hard one so that
 * --max-conns + --max-pending (+ models, sessions, files) fit; says so when it cannot. */
static void raise_fd_limit(int max_conns, int max_pending) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    rlim_t want = (rlim_t)max_conns * 2 + (rlim_t)max_pending + 256;
    if (rl.rlim_cur >= want) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want)
        log_line("warning: open files limited to %llu (ulimit -n); --max-conns %d + --max-pending %d want %llu",
                 (unsigned long long)rl.rlim_cur, max_conns, max_pending, (unsigned long long)want);
}

/* A directory option: created (one level) when missing, as a reader of the README expects. */
static int dir_prepare(const char *opt, const char *dir, char *err, size_t errlen) {
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        if (errno != ENOENT || mkdir(dir, 0700) != 0)
            return snprintf(err, errlen, "%s '%s' does not exist and cannot be created: %s", opt, dir,
                            strerror(errno)), -1;
        log_line("created %s %s", opt, dir);
    } else if (!S_ISDIR(sb.st_mode)) {
        return snprintf(err, errlen, "%s '%s' is not a directory", opt, dir), -1;
    }
    if (access(dir, R_OK | W_OK | X_OK) != 0)
        return snprintf(err, errlen, "%s '%s' is not readable and writable", opt, dir), -1;
    return 0;
}

static int start_jobs(server_app *app, char *err, size_t errlen);

static int load(server_app *app) {
    const server_opts *o = &app->opts;
    mnemo_model_params mp = mnemo_model_default_params();
    mp.n_threads = o->threads;
    mp.uio_dir = o->uio_dir;
    if (!strcmp(o->device, "cpu")) mp.device = MNEMO_DEVICE_CPU;
    else if (!strcmp(o->device, "cuda")) mp.device = MNEMO_DEVICE_CUDA;
    mnemo_model *m = NULL;
    atomic_store(&loading_model, true);
    mnemo_status ms = mnemo_model_load(o->model_dir, &mp, &m);
    atomic_store(&loading_model, false);
    if (wait_signal(0.0)) { /* SIGINT/SIGTERM while the model loaded (it cannot be interrupted): stop now */
        log_line("stopped while loading");
        mnemo_model_free(m);
        return 1;
    }
    if (ms != MNEMO_OK) {
        log_line("error: cannot load the model: %s", m ? mnemo_model_error(m) : "out of memory");
        mnemo_model_free(m);
        return -1;
    }
    int n_train = mnemo_model_n_ctx_train(m);
    app->n_ctx = o->ctx ? o->ctx : (n_train < 4096 ? n_train : 4096);
    app->unbounded = mnemo_model_has_memory(m);
    app->uio = mnemo_model_uio(m, &app->uio_info) == MNEMO_OK;
    app->n_vocab = mnemo_model_n_vocab(m);
    if (!strcmp(o->chat_template, "auto")) {
        char why[512];
        mnemo_status st = mnemo_chat_template_detect(o->model_dir, &app->tmpl, why, sizeof why);
        if (st != MNEMO_OK && st != MNEMO_ERR_IO)
            log_line("warning: %s; using llama2 (choose with --chat-template)", why);
        if (st != MNEMO_OK) app->tmpl = MNEMO_CHAT_LLAMA2;
    }
    mnemo_context_params cp = mnemo_context_default_params(); /* one struct for slots and sessions */
    cp.n_ctx = app->n_ctx;
    cp.n_batch = o->batch;
    cp.mem_knn_k = o->mem_knn;
    cp.mem_index = app->mem_index;
    cp.mem_nprobe = o->mem_nprobe;
    cp.mem_dense_rows = o->mem_dense_rows;
    cp.uio_keep_raw = o->uio_keep_raw;
    cp.uio_mem_budget = o->uio_mem_budget;
    cp.uio_encode_batch = o->uio_encode_batch;
    cp.memory = app->memory;
    cp.ret_sinks = o->ret_sinks;
    cp.ret_window = o->ret_window;
    cp.ret_topk = o->ret_topk;
    cp.ret_block = o->ret_block;
    cp.ret_reps = o->ret_reps;
    cp.ret_dtype = app->ret_dtype;
    cp.kernel_settings = o->kernel_settings;
    app->retrieval = app->memory == MNEMO_MEMORY_RETRIEVAL;
    sched_config sc = {.parallel = o->parallel, .queue = o->queue, .n_ctx = app->n_ctx, .batch = o->batch,
                       .cache_bytes = o->cache_ram_mib < 0 ? -1 : o->cache_ram_mib << 20, .ctx = cp};
    char err[512];
    app->sched = sched_new(m, &sc, app->mx, err, sizeof err);
    if (!app->sched) {
        log_line("error: cannot create %d slots of %d tokens: %s (lower --parallel or --ctx)", o->parallel, app->n_ctx,
                 err);
        mnemo_model_free(m);
        return -1;
    }
    if (app->retrieval)
        log_line("retrieval memory: sinks %d + window %d in the cache, blocks of %d tokens (%d representatives), top "
                 "%d per step, %s", o->ret_sinks, o->ret_window, o->ret_block, o->ret_reps, o->ret_topk, o->ret_dtype);
    session_config scfg = {.max_sessions = o->max_sessions, .max_bytes = o->session_max_bytes,
                           .dir = o->session_dir, .n_ctx = app->n_ctx, .n_batch = o->batch,
                           .ctx = cp};
    if (app->store.pg) { /* snapshots are rows of the state database, shared by every node */
        char cache[4200];
        snprintf(cache, sizeof cache, "%s/snapshots", app->store.work_dir);
        scfg.snapshots = snapshot_store_pg(app->store.pg, cache, app->store.node, err, sizeof err);
    }
    app->sessions = app->store.pg && !scfg.snapshots ? NULL : sessions_new(m, &scfg, err, sizeof err);
    if (!app->sessions) {
        log_line("error: %s", err);
        sched_free(app->sched);
        app->sched = NULL;
        mnemo_model_free(m);
        return -1;
    }
    app->model = m;
    if (app->files && start_jobs(app, err, sizeof err) != 0) {
        log_line("error: %s", err);
        return -1;
    }
    atomic_store(&app->state, APP_READY); /* publishes model and sched to the HTTP threads */
    log_line("ready: model '%s' (%s), %d slots x %d tokens, batch %d, chat template %s", app->alias,
             mnemo_model_desc(m), o->parallel, app->n_ctx, o->batch, mnemo_chat_template_name(app->tmpl));
    if (app->uio)
        log_line("UIO: %s, chunk_size %d -> %d <mem> entries (ratio %d), %d raw tokens kept after a compression; "
                 "memory + raw within %d positions per slot; memory budget %d (0 = off), %d segments per encoder "
                 "forward",
                 app->uio_info.file, app->uio_info.chunk_size, app->uio_info.num_memory,
                 app->uio_info.chunk_size / app->uio_info.num_memory, o->uio_keep_raw, app->n_ctx, o->uio_mem_budget,
                 o->uio_encode_batch);
    log_line("sessions: up to %d, %zu bytes of memory each%s, snapshots %s%s", o->max_sessions, o->session_max_bytes,
             o->session_max_bytes ? "" : " (no limit)",
             app->store.pg ? "in the state database" : o->session_dir ? "in " : "off (no --session-dir)",
             !app->store.pg && o->session_dir ? o->session_dir : "");
    bool v6 = strchr(o->host, ':') != NULL;
    log_line("listening on http://%s%s%s:%d%s", v6 ? "[" : "", o->host, v6 ? "]" : "", app->port,
             o->api_key ? " (API key required)" : "");
    return 0;
}

/* The fine-tuning supervisor (--jobs-dir): workers are this executable re-run with --finetune-worker. */
static int start_jobs(server_app *app, char *err, size_t errlen) {
    static char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        snprintf(err, errlen, "cannot find this executable (/proc/self/exe) to run fine-tuning workers");
        return -1;
    }
    self[n] = 0;
    const server_opts *o = &app->opts;
    ft_jobs_config jc = {.jobs_dir = app->store.pg ? app->store.work_dir : o->jobs_dir, .model_dir = o->model_dir,
                         .base_name = app->alias, .self_exe = self,
                         .max_jobs = o->max_jobs, .max_pending = o->max_pending_jobs,
                         .train_threads = o->train_threads, .train_device = o->train_device, .model = app->model,
                         .files = app->files, .pg = app->store.pg, .node = app->store.node,
                         .lease_s = o->lease_s};
    app->jobs = ft_jobs_start(&jc, err, errlen);
    if (!app->jobs) return -1;
    ft_jobs_stats st;
    ft_jobs_get_stats(app->jobs, &st);
    log_line("fine-tuning: jobs in %s%s/jobs, %d at a time on %s (%d threads each); %d queued or resuming",
             app->store.pg ? "the state database, run in " : "", jc.jobs_dir, o->max_jobs, o->train_device,
             o->train_threads, st.by_status[0] + st.by_status[1]);
    return 0;
}

static void shutdown_gracefully(server_app *app, http_server *http) {
    atomic_store(&app->state, APP_STOPPING);
    http_quiesce(http);
    if (app->sched) {
        sched_stop_accepting(app->sched);
        sched_stats ss;
        sched_get_stats(app->sched, &ss);
        log_line("stopping: %d running, %d waiting; up to %g s to finish (signal again to cancel now)", ss.slots_busy,
                 ss.waiting, app->opts.grace_s);
        double end = now_s() + app->opts.grace_s;
        bool idle = false;
        while (!(idle = sched_wait_idle(app->sched, 0.1)) && now_s() < end)
            if (wait_signal(0.0)) break;
        if (!idle) {
            log_line("cancelling the requests still running");
            sched_cancel_all(app->sched, IREQ_END_SHUTDOWN);
            sched_wait_idle(app->sched, 5.0);
        }
    }
    /* Let the last responses reach their clients before the connections are closed. */
    double drain_end = now_s() + 2.0;
    while (http_active_requests(http) > 0 && now_s() < drain_end) wait_signal(0.02);
    atomic_store(&app->state, APP_STOPPED);
    http_stop(http);
}

int main(int argc, char **argv) {
    mnemo_threads_prefer_passive(argv); /* idle OpenMP workers sleep: the server shares its machine */
    if (argc >= 3 && !strcmp(argv[1], "--finetune-worker")) { /* a fine-tuning job's process (finetune_jobs.c) */
        int threads = argc >= 5 && !strcmp(argv[3], "--threads") ? atoi(argv[4]) : 1;
        bool cuda = argc >= 7 && !strcmp(argv[5], "--device") && !strcmp(argv[6], "cuda");
        return ft_worker_main(argv[2], threads < 0 ? 1 : threads, cuda);
    }
    static server_app app;
    server_opts_defaults(&app.opts);
    char err[512];
    int rc = server_opts_parse(&app.opts, argc, argv, err, sizeof err);
    if (rc == ARGS_HELP) {
        server_opts_usage(stdout, argv[0]);
        return 0;
    }
    if (rc != ARGS_OK) {
        fprintf(stderr, "mnemo-server: %s\n", err);
        return 2;
    }
    const server_opts *o = &app.opts;
    if (strcmp(o->chat_template, "auto") != 0 && mnemo_chat_template_parse(o->chat_template, &app.tmpl) != MNEMO_OK) {
        fprintf(stderr, "mnemo-server: --chat-template must be auto, llama2, chatml, llama3 or plain (got '%s')\n",
                o->chat_template);
        return 2;
    }
    if (mnemo_mem_index_parse(o->mem_index, &app.mem_index) != MNEMO_OK) {
        fprintf(stderr, "mnemo-server: --mem-index must be auto, flat, brute, ivf, ivf-grow or hnsw (got '%s')\n",
                o->mem_index);
        return 2;
    }
    if (mnemo_memory_mode_parse(o->memory, &app.memory) != MNEMO_OK) {
        fprintf(stderr, "mnemo-server: --memory must be model or retrieval (got '%s')\n", o->memory);
        return 2;
    }
    if (mnemo_mem_dtype_parse(o->ret_dtype, &app.ret_dtype) != MNEMO_OK) {
        fprintf(stderr, "mnemo-server: --ret-dtype must be f32, bf16 or f16 (got '%s')\n", o->ret_dtype);
        return 2;
    }
    if (app.mem_index == MNEMO_MEM_INDEX_IVF && o->mem_nprobe > 256) { /* engine.h: IVF has 256 cells */
        fprintf(stderr, "mnemo-server: --mem-nprobe must be at most 256 with --mem-index ivf (got %d)\n",
                o->mem_nprobe);
        return 2;
    }
    if ((o->uio_keep_raw || o->uio_mem_budget || o->uio_encode_batch > 1) && !o->uio_dir) {
        fprintf(stderr, "mnemo-server: %s applies to a UIO model: give --uio DIR\n",
                o->uio_keep_raw ? "--uio-keep-raw" : o->uio_mem_budget ? "--uio-mem-budget" : "--uio-encode-batch");
        return 2;
    }
    if (o->uio_keep_raw && (o->uio_mem_budget || o->uio_encode_batch > 1)) { /* the engine refuses it too */
        fprintf(stderr, "mnemo-server: --uio-keep-raw cannot be combined with %s (use one or the other)\n",
                o->uio_mem_budget ? "--uio-mem-budget" : "--uio-encode-batch > 1");
        return 2;
    }
    if (strcmp(o->device, "auto") && strcmp(o->device, "cpu") && strcmp(o->device, "cuda")) {
        fprintf(stderr, "mnemo-server: --device must be auto, cpu or cuda (got '%s')\n", o->device);
        return 2;
    }
    if (strcmp(o->train_device, "cpu") && strcmp(o->train_device, "cuda")) {
        fprintf(stderr, "mnemo-server: --train-device must be cpu or cuda (got '%s')\n", o->train_device);
        return 2;
    }

    static char default_model[4096]; /* no --model: $MNEMO_MODEL or the demo installed beside this binary */
    if (!o->model_dir) {
        if (mnemo_default_model_dir(default_model, sizeof default_model) != MNEMO_OK) {
            fprintf(stderr, "mnemo-server: %s\n", default_model);
            return 1;
        }
        app.opts.model_dir = default_model;
    }
    if (o->session_dir && (dir_prepare("--session-dir", o->session_dir, err, sizeof err) != 0 ||
                           sessions_check_dir(o->session_dir, err, sizeof err) != 0)) {
        fprintf(stderr, "mnemo-server: %s\n", err);
        return 2;
    }
    if (o->jobs_dir && dir_prepare("--jobs-dir", o->jobs_dir, err, sizeof err) != 0) {
        fprintf(stderr, "mnemo-server: %s\n", err);
        return 2;
    }
    if (state_open(&app.store, o, err, sizeof err) != 0) { /* --state: an unreachable database is exit status 1 */
        fprintf(stderr, "mnemo-server: error: %s\n", err);
        return 1;
    }
    if (app.store.pg) log_line("state: %s", app.store.desc);
    if (app.store.pg && o->session_dir)
        log_line("warning: --session-dir is not used with --state postgresql: snapshots are rows of the database");

    if (install_signals() != 0) {
        fprintf(stderr, "mnemo-server: cannot create the signal pipe\n");
        return 1;
    }
    json_object_seed(0); /* before any thread hashes a key */
    engine_log_max = o->verbose ? MNEMO_LOG_INFO : MNEMO_LOG_WARN;
    mnemo_log_set(engine_log, NULL);

    if (o->n_alias) {
        snprintf(app.alias, sizeof app.alias, "%s", o->alias[0]);
    } else {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", o->model_dir);
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/') dir[--n] = '\0';
        snprintf(app.alias, sizeof app.alias, "%s", basename(dir));
        size_t an = strlen(app.alias); /* a GGUF file is named without its extension */
        if (an > 5 && !strcmp(app.alias + an - 5, ".gguf")) app.alias[an - 5] = '\0';
    }
    app.aliases[app.n_aliases++] = app.alias;
    for (int i = 1; i < o->n_alias; i++) app.aliases[app.n_aliases++] = o->alias[i];
    app.created = (long long)time(NULL);
    pthread_mutex_init(&app.embed_mu, NULL);
    app.mx = metrics_new();
    if (!app.mx) {
        fprintf(stderr, "mnemo-server: out of memory\n");
        return 1;
    }
    atomic_store(&app.state, APP_LOADING);
    if (o->jobs_dir || app.store.pg) { /* the files API answers from the start: it needs no model */
        app.files = app.store.pg ? ft_files_open_pg(app.store.pg, app.store.work_dir, o->max_files, err, sizeof err)
                                 : ft_files_open(o->jobs_dir, o->max_files, err, sizeof err);
        if (!app.files) {
            fprintf(stderr, "mnemo-server: --jobs-dir: %s\n", err);
            metrics_free(app.mx);
            return 2;
        }
        log_line("files: %zu in %s%s (up to %d, --max-files; uploads up to --max-body %zu bytes)",
                 ft_files_count(app.files), app.store.pg ? "the state database" : o->jobs_dir,
                 app.store.pg ? "" : "/files", o->max_files, o->max_body);
    }

    raise_fd_limit(o->max_conns, o->max_pending);
    http_config hc = {.host = o->host, .port = o->port, .max_body = o->max_body, .max_conns = o->max_conns,
                      .max_pending = o->max_pending,
                      .max_inflight = o->max_body_inflight ? o->max_body_inflight : 4 * o->max_body,
                      .conn_timeout_s = o->conn_timeout_s};
    http_server *http = http_start(&hc, app_handle, &app, err, sizeof err);
    if (!http) {
        log_line("error: %s", err);
        ft_files_close(app.files);
        state_close(&app.store);
        metrics_free(app.mx);
        return 1;
    }
    app.port = http_port(http);
    app.http = http;
    app.http_stats = http_get_stats;
    log_line("loading the model from %s (port %d bound; /health answers 503 until it is ready)", o->model_dir,
             app.port);

    rc = load(&app);
    if (rc == 0) {
        int sig;
        while (!(sig = wait_signal(3600.0))) continue;
        log_line("%s received", sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    shutdown_gracefully(&app, http);
    sched_free(app.sched);
    sessions_free(app.sessions);
    ft_jobs_stop(app.jobs); /* after the slots (they point at its adapters); workers checkpoint and resume later */
    mnemo_model_free(app.model);
    ft_files_close(app.files); /* after http_stop: no route uses it any more */
    state_close(&app.store);
    metrics_free(app.mx);
    if (rc < 0) return 1; /* load() said why */
    log_line("stopped");
    return 0;
}
