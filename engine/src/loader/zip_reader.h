/*
 * zip_reader.h — read-only view of a zip archive held in memory (the container of torch.save files):
 * central directory (ZIP64 included), lookup by name, and the bytes of STORED entries. Nothing is copied or
 * decompressed. Messages are written without a file prefix; the caller adds it.
 */
#ifndef MNEMO_ZIP_READER_H
#define MNEMO_ZIP_READER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;        /* into the image, NOT NUL-terminated */
    size_t name_len;
    uint16_t method;         /* 0 = stored */
    uint16_t flags;
    uint64_t comp_size, size;
    uint64_t local_offset;   /* of the local file header */
} zip_entry;

typedef struct {
    const uint8_t *buf;
    uint64_t len;
    zip_entry *entries;      /* sorted by name */
    size_t count;
} zip_archive;

/* Reads the central directory. 0, or -1 with msg (e.g. "not a zip archive: no end of central directory"). */
int zip_open(zip_archive *za, const uint8_t *buf, uint64_t len, char *msg, size_t msglen);
void zip_close(zip_archive *za);
/* Entry named exactly name[0..len), or NULL. */
const zip_entry *zip_find(const zip_archive *za, const char *name, size_t len);
/* The bytes of a STORED entry, checked against its local header and the image bounds. 0 or -1 with msg. */
int zip_entry_data(const zip_archive *za, const zip_entry *e, const uint8_t **data, char *msg, size_t msglen);

#endif
