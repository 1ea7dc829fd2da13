/*
 * checkpoint_side_files.c — see checkpoint_side_files.h.
 */
#include "checkpoint_side_files.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Copies dir/name to out/name when it exists. 0, or -1 on an I/O error (errno says which). */
static int copy_if_present(const char *dir, const char *out, const char *name) {
    char src[4200], dst[4200];
    snprintf(src, sizeof src, "%s/%s", dir, name);
    snprintf(dst, sizeof dst, "%s/%s", out, name);
    FILE *in = fopen(src, "rb");
    if (!in) return errno == ENOENT ? 0 : -1;
    FILE *o = fopen(dst, "wb");
    int rc = o ? 0 : -1;
    char buf[65536];
    for (size_t n; rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0;) rc = fwrite(buf, 1, n, o) == n ? 0 : -1;
    if (ferror(in)) rc = -1;
    fclose(in);
    if (o && fclose(o) != 0) rc = -1;
    return rc;
}

int checkpoint_copy_side_files(const char *model_dir, const char *out_dir, char *err, size_t errlen) {
    static const char *const side[] = {"config.json", "tokenizer.model", "tokenizer_config.json",
                                       "generation_config.json", "special_tokens_map.json"};
    for (size_t i = 0; i < sizeof side / sizeof *side; i++)
        if (copy_if_present(model_dir, out_dir, side[i]) != 0) {
            snprintf(err, errlen, "%s/%s: cannot copy: %s", out_dir, side[i], strerror(errno));
            return -1;
        }
    return 0;
}
