/*
 * dir_pack.h — the regular files of one directory (not its subdirectories) as one file, so a trainer's output
 * (adapter_config.json, adapter_model.safetensors, train_state.mnemo) travels to the state database as one blob and
 * comes back whole on another node.
 *
 * Layout (little-endian): char[8] "MNEMOPK1"; per file: u32 name length (1..255), the name (no '/', not "." nor
 * ".."), u64 size, the bytes; u32 0 (the end); u32 CRC-32 of every byte before it. Unpacking checks every length, name
 * and the CRC before it writes anything, then writes each file through a temporary name and a rename.
 */
#ifndef MNEMO_SERVER_DIR_PACK_H
#define MNEMO_SERVER_DIR_PACK_H

#include <stddef.h>

/* Packs dir's regular files into out_path, leaving out the file named skip (NULL: none). 0, or -1 with a message. */
int dir_pack(const char *dir, const char *skip, const char *out_path, char *err, size_t errlen);
/* Unpacks pack_path into dir (created if missing; files of the same names replaced). 0, or -1 with a message. */
int dir_unpack(const char *pack_path, const char *dir, char *err, size_t errlen);

#endif
