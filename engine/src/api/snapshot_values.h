/*
 * snapshot_values.h — the check every float a snapshot loads passes (cache rows, pre-RoPE keys, logits): finite
 * and within MEM_VALUE_MAX, the bound memstore applies to memory rows. A checksum only proves the file is what was
 * written, not that a model wrote it; one NaN or huge value accepted would make every later decode NaN.
 */
#ifndef MNEMO_SNAPSHOT_VALUES_H
#define MNEMO_SNAPSHOT_VALUES_H

#include <stdbool.h>
#include <stddef.h>

bool snap_floats_ok(const float *v, size_t n);

#endif
