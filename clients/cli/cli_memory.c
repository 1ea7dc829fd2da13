/* cli_memory.c — LongLLaMA, UIO and retrieval memory options and kernel settings (see cli_memory.h); defaults are the engine's
 * (mnemo_context_default_params), so the CLI, the server and the C API behave alike. */
#include "cli_memory.h"

#include <string.h>

#include "cli_args.h"

void cli_memory_usage(FILE *f, int col) {
    char knn[160], dense[160], ret[2][160];
    snprintf(ret[0], sizeof ret[0], "(defaults: sinks %d, window %d, top-k %d, block %d, reps %d, dtype f32)",
             MNEMO_RET_SINKS_DEFAULT, MNEMO_RET_WINDOW_DEFAULT, MNEMO_RET_TOPK_DEFAULT, MNEMO_RET_BLOCK_DEFAULT,
             MNEMO_RET_REPS_DEFAULT);
    snprintf(ret[1], sizeof ret[1], "sinks + window must fit the model's positions; window >= 2 blocks");
    snprintf(knn, sizeof knn, "rows per query (default %d; 0 = every row at every length, as released)",
             MNEMO_MEM_KNN_K_DEFAULT);
    snprintf(dense, sizeof dense, "(default %d; 0 = kNN from the first row)", MNEMO_MEM_DENSE_ROWS_DEFAULT);
    const char *lines[][2] = {
        {"--mem-knn K", "LongLLaMA: once the memory passes --mem-dense-rows, attend to the top-K memory"},
        {"", knn},
        {"--mem-dense-rows N", "LongLLaMA: memory rows read densely (exact) before kNN takes over"},
        {"", dense},
        {"--mem-index KIND", "kNN index: auto (default: ivf-grow on the CPU, exact on a GPU), flat (exact),"},
        {"", "brute, ivf, ivf-grow (approximate, cells grow with the memory), hnsw"},
        {"--mem-nprobe N", "ivf, ivf-grow: cells a query scans (default 16; more: higher recall, slower)"},
        {"--uio-keep-raw W", "UIO (--uio): the last W tokens of a compressed segment stay raw beside its memory"},
        {"", "(default 0, as the reference; at most chunk_size; not with the two below)"},
        {"--uio-mem-budget N", "UIO: keep at most N <mem> entries in the cache, older ones in the kNN memory"},
        {"", "above (--mem-*), attended at position 0: no n_ctx limit (default 0 = off)"},
        {"--uio-encode-batch N", "UIO: compress a prompt's segments N per encoder forward (default 1)"},
        {"--memory MODE", "model (default: the model's own memory, if any) or retrieval: training-free"},
        {"", "retrieval memory for a plain RoPE LLaMA (InfLLM): no length limit"},
        {"--ret-sinks S", "retrieval: first tokens kept for good (attention sinks)"},
        {"--ret-window W", "retrieval: latest tokens kept (local window)"},
        {"--ret-topk K", "retrieval: memory blocks each step attends to, per layer and KV head"},
        {"--ret-block B", "retrieval: tokens per memory block"},
        {"--ret-reps R", "retrieval: representative keys per block"},
        {"--ret-dtype T", "retrieval: memory keys and values in f32, bf16 or f16"},
        {"", ret[0]},
        {"", ret[1]},
        {"--kernel-settings L", "kernel paths, NAME=VALUE,... (e.g. cpu.gemm=exact; docs/kernel-settings.md)"},
    };
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
        fprintf(f, "  %-*s %s\n", col - 3, lines[i][0], lines[i][1]);
}

int cli_memory_option(const char *cmd, int argc, char **argv, int *i, mnemo_context_params *cp) {
    const char *a = argv[*i], *v;
    /* --knn: the name `mnemo passkey` had before the options were shared */
    bool knn = !strcmp(a, "--mem-knn") || !strcmp(a, "--knn"), index = !strcmp(a, "--mem-index");
    bool nprobe = !strcmp(a, "--mem-nprobe"), dense = !strcmp(a, "--mem-dense-rows");
    bool budget = !strcmp(a, "--uio-mem-budget"), batch = !strcmp(a, "--uio-encode-batch");
    bool keep = !strcmp(a, "--uio-keep-raw");
    int32_t *ret = !strcmp(a, "--ret-sinks")    ? &cp->ret_sinks
                   : !strcmp(a, "--ret-window") ? &cp->ret_window
                   : !strcmp(a, "--ret-topk")   ? &cp->ret_topk
                   : !strcmp(a, "--ret-block")  ? &cp->ret_block
                   : !strcmp(a, "--ret-reps")   ? &cp->ret_reps
                                                : NULL;
    bool mode = !strcmp(a, "--memory"), dtype = !strcmp(a, "--ret-dtype"), kset = !strcmp(a, "--kernel-settings");
    if (!knn && !index && !nprobe && !dense && !budget && !batch && !keep && !ret && !mode && !dtype && !kset) return 0;
    /* `mnemo eval perplexity --memory on|off` is the command's own switch: left to it */
    if (mode && *i + 1 < argc && (!strcmp(argv[*i + 1], "on") || !strcmp(argv[*i + 1], "off"))) return 0;
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    if (kset) { /* mnemo_context_new checks the names and values, with the message */
        cp->kernel_settings = v;
        return 1;
    }
    /* the engine checks the retrieval options against each other and the model, with the message */
    if (ret) return cli_int(cmd, a, v, 0, 1 << 24, ret) ? 1 : -1;
    if (mode) {
        if (mnemo_memory_mode_parse(v, &cp->memory) == MNEMO_OK) return 1;
        fprintf(stderr, "mnemo %s: --memory must be model or retrieval (got '%s')\n", cmd, v);
        return -1;
    }
    if (dtype) {
        if (mnemo_mem_dtype_parse(v, &cp->ret_dtype) == MNEMO_OK) return 1;
        fprintf(stderr, "mnemo %s: --ret-dtype must be f32, bf16 or f16 (got '%s')\n", cmd, v);
        return -1;
    }
    if (budget) return cli_int(cmd, a, v, 0, 1 << 30, &cp->uio_mem_budget) ? 1 : -1;
    if (batch) return cli_int(cmd, a, v, 1, 4096, &cp->uio_encode_batch) ? 1 : -1;
    if (keep) return cli_int(cmd, a, v, 0, 1 << 20, &cp->uio_keep_raw) ? 1 : -1; /* the model checks chunk_size */
    if (knn) return cli_int(cmd, a, v, 0, 1 << 20, &cp->mem_knn_k) ? 1 : -1;
    if (nprobe) return cli_int(cmd, a, v, 1, 65536, &cp->mem_nprobe) ? 1 : -1;
    if (dense) {
        uint64_t rows;
        if (!cli_u64(cmd, a, v, &rows)) return -1;
        cp->mem_dense_rows = rows > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)rows;
        return 1;
    }
    if (mnemo_mem_index_parse(v, &cp->mem_index) == MNEMO_OK) return 1;
    fprintf(stderr, "mnemo %s: --mem-index must be auto, flat, brute, ivf, ivf-grow or hnsw (got '%s')\n", cmd, v);
    return -1;
}
