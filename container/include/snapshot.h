/*
 * snapshot.h — a versioned, checksummed, sectioned file: how a session's memory is saved and restored, and (issue
 * 18) what training checkpoints are written in. A leaf module: it depends on nothing in the project.
 *
 * Layout (little-endian):
 *   header   char[8] "MNEMOSN1", u32 version (1), u32 0, u64 fingerprint (the caller's: e.g. of the model)
 *   sections u32 tag, u32 0, u64 length, bytes, zero padding to a multiple of 8
 *   trailer  u32 SNAP_TAG_END, u32 0, u64 0, u32 CRC-32 (IEEE, as zlib's crc32) of every byte before it, u32 0
 * A reader checks magic, version, fingerprint, every length against the file size, the end marker and the
 * checksum before it hands out a single section. Writers write to "<path>.tmp.XXXXXX" (unique to the writer),
 * fsync it and rename on success, so a crash never leaves a half-written snapshot under the final name and two
 * writers of one path each rename a whole file (the last one wins). A crash can leave the temporary file behind
 * (X: six of A-Z a-z 0-9) for whoever owns the directory to remove.
 */
#ifndef MNEMO_SNAPSHOT_H
#define MNEMO_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SNAP_VERSION 1
#define SNAP_TAG(a, b, c, d) ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)
#define SNAP_TAG_END SNAP_TAG('E', 'N', 'D', '!')

typedef struct snap_writer snap_writer;
typedef struct snap_reader snap_reader;

#define SNAP_TMP_SUFFIX ".tmp."

/* NULL with a message in err (cannot create the file). */
snap_writer *snap_writer_open(const char *path, uint64_t fingerprint, char *err, size_t errlen);
/* A whole section at once, or in pieces: begin, write..., end. 0, or -1 (message: snap_writer_error). */
int snap_section(snap_writer *w, uint32_t tag, const void *data, uint64_t len);
int snap_section_begin(snap_writer *w, uint32_t tag);
int snap_write(snap_writer *w, const void *data, uint64_t len);
int snap_section_end(snap_writer *w);
const char *snap_writer_error(const snap_writer *w);
/* Writes the trailer, flushes and renames into place (commit = 1) or deletes the temporary file (commit = 0).
 * Frees w. 0, or -1 with a message in err. */
int snap_writer_close(snap_writer *w, int commit, char *err, size_t errlen);

/* Opens and fully validates a snapshot; NULL with a message in err naming the problem. */
snap_reader *snap_reader_open(const char *path, uint64_t fingerprint, char *err, size_t errlen);
/* The same checks over bytes in memory (the fuzz target's entry); data must outlive the reader. */
snap_reader *snap_reader_from_memory(const void *data, size_t len, uint64_t fingerprint, char *err, size_t errlen);
/* Section i (0-based, file order); 0, or -1 past the last one. */
int snap_reader_section(const snap_reader *r, size_t i, uint32_t *tag, const void **data, uint64_t *len);
/* The first section with this tag; 0, or -1 when absent. */
int snap_reader_find(const snap_reader *r, uint32_t tag, const void **data, uint64_t *len);
size_t snap_reader_count(const snap_reader *r);
void snap_reader_close(snap_reader *r);

uint32_t snap_crc32(uint32_t crc, const void *data, size_t len);

#ifdef __cplusplus
}
#endif

#endif
