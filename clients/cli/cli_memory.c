/* cli_memory.c — LongLLaMA and UIO memory options (see cli_memory.h); defaults are the engine's
 * (mnemo_context_default_params), so the CLI, the server and the C API behave alike. */
#include "cli_memory.h"

#include <string.h>

#include "cli_args.h"

void cli_memory_usage(FILE *f, int col) {
    char knn[160], dense[160];
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
        {"", "(default 0, as the reference; at most chunk_size)"},
    };
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
        fprintf(f, "  %-*s %s\n", col - 3, lines[i][0], lines[i][1]);
}

int cli_memory_option(const char *cmd, int argc, char **argv, int *i, mnemo_context_params *cp) {
    const char *a = argv[*i], *v;
    /* --knn: the name `mnemo passkey` had before the options were shared */
    bool knn = !strcmp(a, "--mem-knn") || !strcmp(a, "--knn"), index = !strcmp(a, "--mem-index");
    bool nprobe = !strcmp(a, "--mem-nprobe"), dense = !strcmp(a, "--mem-dense-rows");
    bool keep = !strcmp(a, "--uio-keep-raw");
    if (!knn && !index && !nprobe && !dense && !keep) return 0;
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
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
