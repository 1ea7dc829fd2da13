/* cli_args.h — strict parsing of command-line values: every bad value gets one message naming the flag. */
#ifndef MNEMO_CLI_ARGS_H
#define MNEMO_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

/* Each returns true on success; on failure prints "mnemo <cmd>: <flag> expects ..., got '<s>'" to stderr. */
bool cli_int(const char *cmd, const char *flag, const char *s, long min, long max, int32_t *out);
bool cli_float(const char *cmd, const char *flag, const char *s, double min, double max, float *out);
bool cli_u64(const char *cmd, const char *flag, const char *s, uint64_t *out);
/* The value after argv[*i] for a flag that takes one; advances *i. NULL (with a message) when missing. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);
/* The model directory when --model is not given: mnemo_default_model_dir ($MNEMO_MODEL, else the
 * SmolLM2-135M-Instruct default installed beside the executable). NULL after printing "mnemo <cmd>: <where it looked>" when there is none. */
const char *cli_default_model(const char *cmd);
/* For --help's last line: the directory the default names now, or why there is none. */
const char *cli_default_model_help(void);

#endif
