/*
 * huge_buffer.h — growable buffers for the memory stores' key/value rows, on 2 MiB pages where the kernel
 * allows (Linux transparent huge pages, "madvise" or "always" mode).
 *
 * Why: a kNN query gathers its selected rows from anywhere in stores of hundreds of MB. With 4 KiB pages
 * every gathered row costs a TLB miss whose page walk itself misses the caches, so the cost of a row grows
 * with the store; with 2 MiB pages one TLB entry covers 16K rows of 128 bytes.
 *
 * Buffers below 2 MiB are plain malloc memory. The size a buffer was made with decides how it is freed, so
 * callers pass it back unchanged (and grow by allocating anew and copying).
 */
#ifndef MNEMO_HUGE_BUFFER_H
#define MNEMO_HUGE_BUFFER_H

#include <stddef.h>

/* An uninitialised buffer of bytes (at least 1), or NULL when out of memory. */
void *huge_buffer_alloc(size_t bytes);
/* The bytes a buffer made with this many bytes reserves: a mapping is whole huge pages, and its last page, partly
 * used, is resident whole once touched. Memory accounting counts this, not the bytes asked for. */
size_t huge_buffer_footprint(size_t bytes);
/* Releases a buffer made by huge_buffer_alloc with this many bytes (NULL is ignored). */
void huge_buffer_free(void *p, size_t bytes);

#endif
