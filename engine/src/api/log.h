/* log.h — the library's internal logging entry point; output goes to the sink set by mnemo_log_set. */
#ifndef MNEMO_LOG_H
#define MNEMO_LOG_H

#include "engine.h"

void mnemo_log(mnemo_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
