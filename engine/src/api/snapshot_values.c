/*
 * snapshot_values.c — see snapshot_values.h.
 */
#include "snapshot_values.h"

#include <math.h>

#include "memstore.h"

bool snap_floats_ok(const float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(v[i]) <= MEM_VALUE_MAX)) return false; /* false for NaN too */
    return true;
}
