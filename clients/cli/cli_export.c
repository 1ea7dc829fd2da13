/*
 * cli_export.c — `mnemo export --merge`: a checkpoint with a LoRA adapter merged into its weights, loadable by
 * mnemo and transformers as a plain model (mnemo_export_merged).
 */
#include <stdio.h>
#include <string.h>

#include "cli_args.h"
#include "engine.h"

static void usage(FILE *f) {
    fprintf(f, "usage: mnemo export --model DIR --adapter ADAPTER_DIR --merge --out OUT_DIR\n\n"
               "  --model DIR          the base checkpoint directory\n"
               "  --adapter DIR        a peft LoRA adapter (adapter_config.json + adapter_model.safetensors)\n"
               "  --merge              write base + adapter merged: W + (alpha/r) B A, each weight in its dtype\n"
               "  --out DIR            the new checkpoint directory (model.safetensors, config.json, tokenizer)\n");
}

int cli_export(int argc, char **argv) {
    const char *cmd = "export", *model = NULL, *adapter = NULL, *out = NULL, *v;
    bool merge = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define VALUE() if (!(v = cli_value(cmd, argc, argv, &i))) return 2
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--model")) { VALUE(); model = v; }
        else if (!strcmp(a, "--adapter")) { VALUE(); adapter = v; }
        else if (!strcmp(a, "--out")) { VALUE(); out = v; }
        else if (!strcmp(a, "--merge")) merge = true;
        else { fprintf(stderr, "mnemo export: unknown option '%s' (try --help)\n", a); return 2; }
#undef VALUE
    }
    if (!model || !adapter || !out || !merge) {
        fprintf(stderr, "mnemo export: --model, --adapter, --out and --merge are required (the only export so far is "
                        "a merged checkpoint)\n");
        return 2;
    }
    char err[1024];
    if (mnemo_export_merged(model, adapter, out, err, sizeof err) != MNEMO_OK) {
        fprintf(stderr, "mnemo export: %s\n", err);
        return 1;
    }
    fprintf(stderr, "mnemo export: wrote %s\n", out);
    return 0;
}
