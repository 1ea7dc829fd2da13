/* cli_text_file.h — text given as a file (-f/--file), so prompts are not bounded by the argument list (128 KiB). */
#ifndef MNEMO_CLI_TEXT_FILE_H
#define MNEMO_CLI_TEXT_FILE_H

#include <stddef.h>

/* The whole of path ("-" = stdin) in a NUL-terminated malloc'ed buffer, its byte count in *len. NULL, after one
 * message "mnemo <cmd>: ..." on stderr, when it cannot be read or holds a NUL byte (the text would end there).
 * Text that is not valid UTF-8 is returned with a warning naming the first bad byte: the tokenizer reads each
 * such byte as U+FFFD. */
char *cli_read_text(const char *cmd, const char *path, size_t *len);

#endif
