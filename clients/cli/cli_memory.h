/* cli_memory.h — the context options shared by `mnemo generate`, `mnemo eval` and `mnemo passkey`: LongLLaMA, UIO
 * and retrieval memory, and the kernel settings. */
#ifndef MNEMO_CLI_MEMORY_H
#define MNEMO_CLI_MEMORY_H

#include <stdio.h>

#include "engine.h"

/* 1: argv[*i] was a memory option, its value parsed into cp (*i moved past it); 0: not one; -1: a bad value
 * (the message is printed). */
int cli_memory_option(const char *cmd, int argc, char **argv, int *i, mnemo_context_params *cp);
/* The options' --help lines, descriptions starting at column col (as the command's other options). */
void cli_memory_usage(FILE *f, int col);

#endif
