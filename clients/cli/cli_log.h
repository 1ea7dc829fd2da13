/* cli_log.h — the library's log lines as the CLI shows them. */
#ifndef MNEMO_CLI_LOG_H
#define MNEMO_CLI_LOG_H

#include <stdbool.h>

/* Routes libengine's log to stderr: warnings always, info too when verbose. Library errors are dropped: each one
 * also comes back as a status with a message (mnemo_*_error) that the command prints itself, once. */
void cli_log_init(bool verbose);

#endif
