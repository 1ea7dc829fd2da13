/*
 * mnemo_main.c — the `mnemo` command: dispatches to its subcommands. Each subcommand lives in its own file
 * and uses only engine.h. Exit codes: 0 success, 1 runtime failure (model load, generation), 2 bad usage.
 */
#include <stdio.h>
#include <string.h>

#include "engine.h"

int cli_generate(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_passkey(int argc, char **argv);
int cli_export(int argc, char **argv);
int cli_train(int argc, char **argv);
int cli_quantize(int argc, char **argv);
int cli_chat(int argc, char **argv);
int cli_eval(int argc, char **argv);

static void usage(FILE *f) {
    fprintf(f,
            "mnemo — long-context LLaMA inference\n\n"
            "usage: mnemo <command> [options]\n\n"
            "commands:\n"
            "  generate   stream a completion for a prompt\n"
            "  chat       talk with a model through its chat template, one message per line\n"
            "  tokenize   print the token ids of a text\n"
            "  eval       what a model remembers: perplexity, forgetting-curve, dict-lookup, passkey\n"
            "  passkey    passkey retrieval accuracy at chosen prompt lengths (= 'mnemo eval passkey')\n"
            "  train      fine-tune a checkpoint (LoRA, LoRA+ or full) on a text or JSON-lines file\n"
            "  export     write a checkpoint with a LoRA adapter merged into its weights\n"
            "  quantize   write a checkpoint as one GGUF file: q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K,\n"
            "             f16, bf16 or f32 weights\n\n"
            "Run 'mnemo <command> --help' for its options.\n");
}

int main(int argc, char **argv) {
    mnemo_threads_prefer_passive(argv); /* idle OpenMP workers sleep instead of spinning (docs/kernels.md, "Threads on a shared machine") */
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "generate")) return cli_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat")) return cli_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cli_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "passkey")) return cli_passkey(argc - 1, argv + 1);
    if (!strcmp(cmd, "export")) return cli_export(argc - 1, argv + 1);
    if (!strcmp(cmd, "train")) return cli_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "quantize")) return cli_quantize(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval")) return cli_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "mnemo: unknown command '%s' (try 'mnemo --help')\n", cmd);
    return 2;
}
