/*
 * test_dir_pack.c — server/dir_pack.c and the CRC-32 of server/pg_blob.c without a database: a directory packed and
 * unpacked elsewhere comes back byte for byte (the skipped file and dot files left out); a pack with one flipped
 * byte, cut short, or naming a path ("../x", "a/b") is refused before anything is written; the CRC-32 matches
 * zlib's check value. Exits non-zero on any failure.
 */
#define _DEFAULT_SOURCE /* mkdtemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dir_pack.h"
#include "pg_blob.h"
#include "test_util.h"

static void write_file(const char *dir, const char *name, const void *data, size_t n) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f) fwrite(data, 1, n, f), fclose(f);
}

static size_t read_file(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap, f) : 0;
    if (f) fclose(f);
    return n;
}

static bool exists(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* A pack holding one entry named name, with a valid CRC. */
static void forge(const char *path, const char *name) {
    unsigned char buf[512];
    size_t n = 0, nl = strlen(name);
    memcpy(buf, "MNEMOPK1", 8), n = 8;
    for (int i = 0; i < 4; i++) buf[n++] = (unsigned char)(nl >> (8 * i));
    memcpy(buf + n, name, nl), n += nl;
    for (int i = 0; i < 8; i++) buf[n++] = i == 0 ? 2 : 0;
    buf[n++] = 'h', buf[n++] = 'i';
    for (int i = 0; i < 4; i++) buf[n++] = 0;
    uint32_t crc = pg_blob_crc32(0, buf, n);
    for (int i = 0; i < 4; i++) buf[n++] = (unsigned char)(crc >> (8 * i));
    FILE *f = fopen(path, "wb");
    if (f) fwrite(buf, 1, n, f), fclose(f);
}

int main(void) {
    CHECK(pg_blob_crc32(0, "123456789", 9) == 0xCBF43926u, "CRC-32 check value");
    CHECK(pg_blob_crc32(pg_blob_crc32(0, "1234", 4), "56789", 5) == 0xCBF43926u, "CRC-32 in pieces");

    char root[] = "/tmp/mnemo-test-pack-XXXXXX";
    if (!mkdtemp(root)) return 1;
    char src[4200], dst[4200], pack[4200], err[512];
    snprintf(src, sizeof src, "%s/src", root);
    snprintf(dst, sizeof dst, "%s/dst", root);
    snprintf(pack, sizeof pack, "%s/p.pack", root);
    mkdir(src, 0755);
    static char big[3 << 20];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (char)(i * 2654435761u >> 13);
    write_file(src, "adapter_model.safetensors", big, sizeof big);
    write_file(src, "adapter_config.json", "{\"r\":8}", 7);
    write_file(src, "empty", "", 0);
    write_file(src, "train_state.mnemo", "state", 5);
    write_file(src, ".tmp-partial", "x", 1);
    CHECK(dir_pack(src, "train_state.mnemo", pack, err, sizeof err) == 0, "pack: %s", err);
    CHECK(dir_unpack(pack, dst, err, sizeof err) == 0, "unpack: %s", err);
    static char back[3 << 20];
    char path[4300];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dst);
    CHECK(read_file(path, back, sizeof back) == sizeof big && !memcmp(back, big, sizeof big), "big file byte for byte");
    snprintf(path, sizeof path, "%s/adapter_config.json", dst);
    CHECK(read_file(path, back, sizeof back) == 7 && !memcmp(back, "{\"r\":8}", 7), "small file");
    CHECK(exists(dst, "empty") && !exists(dst, "train_state.mnemo") && !exists(dst, ".tmp-partial"),
          "empty kept, skipped and dot files left out");

    /* one flipped byte, and a pack cut short: refused, nothing written */
    FILE *f = fopen(pack, "r+b");
    fseek(f, 100, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 100, SEEK_SET);
    fputc(c ^ 1, f);
    fclose(f);
    char dst2[4300];
    snprintf(dst2, sizeof dst2, "%s/dst2", root);
    CHECK(dir_unpack(pack, dst2, err, sizeof err) != 0 && strstr(err, "CRC-32") && access(dst2, F_OK) != 0,
          "flipped byte refused: %s", err);
    CHECK(truncate(pack, 40) == 0 && dir_unpack(pack, dst2, err, sizeof err) != 0 && access(dst2, F_OK) != 0,
          "cut short refused");
    const char *bad[] = {"../escape", "a/b", ".hidden"};
    for (int i = 0; i < 3; i++) {
        forge(pack, bad[i]);
        CHECK(dir_unpack(pack, dst2, err, sizeof err) != 0 && access(dst2, F_OK) != 0, "name '%s' refused", bad[i]);
    }
    forge(pack, "fine");
    CHECK(dir_unpack(pack, dst2, err, sizeof err) == 0 && exists(dst2, "fine"), "a forged valid pack: %s", err);
    CHECK(!exists(root, "escape"), "nothing escaped the directory");

    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", root);
    return test_summary();
}
