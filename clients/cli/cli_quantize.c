/*
 * cli_quantize.c — `mnemo quantize`: a Hugging Face checkpoint (or a GGUF file, re-quantized) written as one GGUF
 * file with block-quantized (q8_0, q4_0, q4_1, q5_0, q5_1, q2_K .. q6_K) or f16/bf16/f32 matrices, for mnemo
 * (--model FILE.gguf) and llama.cpp alike (mnemo_quantize).
 */
#include <stdio.h>
#include <string.h>

#include "cli_args.h"
#include "engine.h"

static void usage(FILE *f) {
    fprintf(f, "usage: mnemo quantize --model DIR --type TYPE --out FILE.gguf\n\n"
               "  --model DIR   a Hugging Face LLaMA or LongLLaMA checkpoint directory, or a GGUF file to re-quantize\n"
               "                (its vocabulary and chat template are copied as they are)\n"
               "  --type T      the matrices' type: q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, f16,\n"
               "                bf16 or f32 (norms stay f32; rows that are not whole 32-blocks stay f16; k-quant rows\n"
               "                that are not whole 256-blocks take q4_0, q5_0 (q4_K), q5_1 (q5_K) or q8_0 (q6_K);\n"
               "                the k-quants round to nearest, without llama-quantize's search)\n"
               "  --out FILE    the GGUF file to write (llama architecture: llama.cpp loads it too)\n");
}

int cli_quantize(int argc, char **argv) {
    const char *cmd = "quantize", *model = NULL, *type = NULL, *out = NULL, *v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define VALUE() if (!(v = cli_value(cmd, argc, argv, &i))) return 2
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--model")) { VALUE(); model = v; }
        else if (!strcmp(a, "--type")) { VALUE(); type = v; }
        else if (!strcmp(a, "--out")) { VALUE(); out = v; }
        else { fprintf(stderr, "mnemo quantize: unknown option '%s' (try --help)\n", a); return 2; }
#undef VALUE
    }
    if (!model || !type || !out) {
        fprintf(stderr, "mnemo quantize: --model, --type and --out are required (try --help)\n");
        return 2;
    }
    char err[1024] = "";
    mnemo_status st = mnemo_quantize(model, type, out, err, sizeof err);
    if (st != MNEMO_OK) {
        fprintf(stderr, "mnemo quantize: %s\n", err);
        return st == MNEMO_ERR_INVALID_ARG ? 2 : 1;
    }
    fprintf(stderr, "mnemo quantize: wrote %s\n", out);
    return 0;
}
