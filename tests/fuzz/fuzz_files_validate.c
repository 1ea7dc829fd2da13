/*
 * fuzz_files_validate.c — libFuzzer target: ft_files_validate (server/finetune_files.c) on arbitrary bytes, the
 * upload check of POST /v1/files. A refusal must be a 400 naming the param "file" and either a line that exists in
 * the input ("training file line N: ...", 1 <= N <= the input's lines) or an empty input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "finetune_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    api_error e;
    memset(&e, 0, sizeof e);
    int rc = ft_files_validate((const char *)data, size, &e);
    if (rc == 0) return 0;
    if (rc != -1 || e.status != 400 || strcmp(e.param, "file") != 0) abort();
    long lines = 1;
    for (size_t i = 0; i + 1 < size; i++) lines += data[i] == '\n';
    long n = 0;
    if (sscanf(e.message, "training file line %ld: ", &n) == 1) {
        if (n < 1 || n > lines) abort();
    } else if (!strstr(e.message, "empty") && !strstr(e.message, "blank")) {
        abort();
    }
    return 0;
}
