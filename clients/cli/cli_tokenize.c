/* cli_tokenize.c — `mnemo tokenize`: print the token ids (and with --pieces, the pieces) of a text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "cli_log.h"
#include "cli_text_file.h"
#include "engine.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: mnemo tokenize [--model DIR] [--no-bos] [--pieces] (TEXT | -f FILE)\n\n"
            "  --model DIR   checkpoint directory with tokenizer.model, or a GGUF file (default: $MNEMO_MODEL, else\n"
            "                SmolLM2-135M-Instruct)\n"
            "  -f, --file F  tokenize the text of file F (- = standard input) instead of TEXT\n"
            "  --no-bos      do not prepend the BOS id\n"
            "  --pieces      print 'id piece' per line instead of ids on one line\n\n%s\n",
            cli_default_model_help());
}

int cli_tokenize(int argc, char **argv) {
    const char *model_dir = NULL, *text = NULL, *text_file = NULL;
    bool bos = true, pieces = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--model")) { if (!(model_dir = cli_value("tokenize", argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(text_file = cli_value("tokenize", argc, argv, &i))) return 2;
        }
        else if (!strcmp(a, "--no-bos")) bos = false;
        else if (!strcmp(a, "--pieces")) pieces = true;
        else if (a[0] == '-' && a[1] == '-') { fprintf(stderr, "mnemo tokenize: unknown option '%s'\n", a); return 2; }
        else if (text) { fprintf(stderr, "mnemo tokenize: give the text as one argument (quote it)\n"); return 2; }
        else text = a;
    }
    if (text && text_file) {
        fprintf(stderr, "mnemo tokenize: give the text as TEXT or with --file, not both\n");
        return 2;
    }
    if (!text && !text_file) {
        fprintf(stderr, "mnemo tokenize: missing TEXT or --file (try --help)\n");
        return 2;
    }
    cli_log_init(false);
    mnemo_model *model = NULL;
    int rc = 1;
    mnemo_token *ids = NULL;
    size_t len = text ? strlen(text) : 0;
    char *file_text = NULL;
    if (text_file && !(text = file_text = cli_read_text("tokenize", text_file, &len))) goto out;
    if (!model_dir && !(model_dir = cli_default_model("tokenize"))) goto out;
    if (mnemo_model_load(model_dir, NULL, &model) != MNEMO_OK) {
        fprintf(stderr, "mnemo tokenize: cannot load model: %s\n", mnemo_model_error(model));
        goto out;
    }
    int32_t n = 0;
    mnemo_status st = mnemo_tokenize(model, text, len, bos, NULL, 0, &n);
    if (st != MNEMO_OK && st != MNEMO_ERR_TOO_SMALL) goto fail;
    ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids || (st = mnemo_tokenize(model, text, len, bos, ids, n, &n)) != MNEMO_OK) goto fail;
    for (int32_t i = 0; i < n; i++) {
        if (pieces) {
            char piece[256];
            size_t len = 0;
            if (mnemo_token_to_piece(model, ids[i], piece, sizeof piece, &len) != MNEMO_OK) strcpy(piece, "?");
            printf("%d %s\n", ids[i], piece);
        } else {
            printf(i ? " %d" : "%d", ids[i]);
        }
    }
    if (!pieces) putchar('\n');
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "mnemo tokenize: %s\n", mnemo_status_str(st));
out:
    free(file_text);
    free(ids);
    mnemo_model_free(model);
    return rc;
}
