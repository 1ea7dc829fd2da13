/* huge_buffer.c — see huge_buffer.h. */
#define _GNU_SOURCE /* MAP_ANONYMOUS, MADV_HUGEPAGE */
#include "huge_buffer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

static int is_mapped(size_t bytes) { return bytes >= HUGE_PAGE; }
static size_t mapped_len(size_t bytes) { return (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1); }

/* A 2 MiB-aligned anonymous mapping of mapped_len(bytes): map one huge page more, trim both ends. */
static void *map_aligned(size_t bytes) {
    size_t len = mapped_len(bytes);
    if (len < bytes || len + HUGE_PAGE < len) return NULL; /* overflow */
    char *raw = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uintptr_t start = ((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
    size_t head = start - (uintptr_t)raw, tail = HUGE_PAGE - head;
    if (head) munmap(raw, head);
    if (tail) munmap((char *)start + len, tail);
#ifdef MADV_HUGEPAGE
    madvise((void *)start, len, MADV_HUGEPAGE); /* advice only: without THP the buffer still works */
#endif
    return (void *)start;
}

void *huge_buffer_alloc(size_t bytes) {
    return is_mapped(bytes) ? map_aligned(bytes) : malloc(bytes ? bytes : 1);
}

size_t huge_buffer_footprint(size_t bytes) {
    return is_mapped(bytes) && mapped_len(bytes) >= bytes ? mapped_len(bytes) : bytes; /* (>=: no wrap-around) */
}

void huge_buffer_free(void *p, size_t bytes) {
    if (!p) return;
    if (is_mapped(bytes))
        munmap(p, mapped_len(bytes));
    else
        free(p);
}
