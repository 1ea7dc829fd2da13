/*
 * test_snapshot_writer.c — the snapshot writer under concurrency and failure: writers of one path at once each
 * succeed or fail whole, every successful close leaves a file that reads back complete (the last rename wins), no
 * temporary file is left, the final file keeps the umask's permissions, and a failing step's message carries the
 * errno of that step (never "Success").
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snapshot.h"
#include "test_util.h"

#define WRITERS 4
#define ROUNDS 40
#define FP 0x5eed

static char tmpdir[] = "/tmp/mnemo_snapwXXXXXX";
static char path[300];

/* Writer i's file: one section of (i + 1) * 48 KiB of the byte i, so sizes differ and a mix is visible. */
static size_t payload_len(int i) { return (size_t)(i + 1) * 48 * 1024; }

/* 0 when path holds one writer's whole file. */
static int check_whole(const char *p, char *why, size_t cap) {
    char err[256];
    snap_reader *r = snap_reader_open(p, FP, err, sizeof err);
    if (!r) return snprintf(why, cap, "%s", err), -1;
    uint32_t tag;
    const void *data;
    uint64_t len;
    int rc = snap_reader_count(r) == 1 && snap_reader_section(r, 0, &tag, &data, &len) == 0 ? 0 : -1;
    const unsigned char *b = data;
    int who = rc == 0 && len ? b[0] : -1;
    if (rc == 0 && (who < 0 || who >= WRITERS || len != payload_len(who))) rc = -1;
    for (uint64_t j = 0; rc == 0 && j < len; j++)
        if (b[j] != who) rc = -1;
    if (rc != 0) snprintf(why, cap, "sections of a mix of writers");
    snap_reader_close(r);
    return rc;
}

static int failures; /* checks that failed in writer threads (CHECK itself is not thread safe) */

static void *writer(void *arg) {
    int id = (int)(intptr_t)arg;
    size_t n = payload_len(id);
    unsigned char *buf = malloc(n);
    memset(buf, id, n);
    for (int round = 0; round < ROUNDS; round++) {
        char err[256] = "", why[256] = "";
        snap_writer *w = snap_writer_open(path, FP, err, sizeof err);
        int ok = w && snap_section(w, SNAP_TAG('D', 'A', 'T', 'A'), buf, n) == 0 &&
                 snap_writer_close(w, 1, err, sizeof err) == 0;
        if (!ok || check_whole(path, why, sizeof why) != 0) {
            fprintf(stderr, "writer %d round %d: %s %s\n", id, round, ok ? "ok but" : err, why);
            __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
        }
    }
    free(buf);
    return NULL;
}

static int temp_files_left(void) {
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp")) n++;
    if (d) closedir(d);
    return n;
}

static void concurrent_writers(void) {
    pthread_t t[WRITERS];
    for (int i = 0; i < WRITERS; i++) pthread_create(&t[i], NULL, writer, (void *)(intptr_t)i);
    for (int i = 0; i < WRITERS; i++) pthread_join(t[i], NULL);
    CHECK(failures == 0, "%d of %d concurrent saves failed or left a file that is not whole", failures,
          WRITERS * ROUNDS);
    char why[256] = "";
    CHECK(check_whole(path, why, sizeof why) == 0, "the last save is whole: %s", why);
    CHECK(temp_files_left() == 0, "no temporary file is left (%d)", temp_files_left());
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0644, "the file has the umask's mode (%o)",
          (unsigned)(sb.st_mode & 0777));
}

static void failures_name_their_cause(void) {
    char err[256] = "", target[320];
    snprintf(target, sizeof target, "%s/dir.snap", tmpdir);
    CHECK(mkdir(target, 0755) == 0, "mkdir");
    snap_writer *w = snap_writer_open(target, FP, err, sizeof err);
    int rc = w ? snap_writer_close(w, 1, err, sizeof err) : -1;
    CHECK(rc != 0 && strstr(err, "Is a directory") && !strstr(err, "Success"), "rename over a directory: '%s'", err);
    CHECK(temp_files_left() == 0, "the failed save removed its temporary file");
    rmdir(target);
    w = snap_writer_open("/nonexistent-dir/x.snap", FP, err, sizeof err);
    CHECK(!w && strstr(err, "No such file or directory"), "create in a missing directory: '%s'", err);
    /* an abandoned writer (commit = 0) leaves nothing either */
    w = snap_writer_open(path, FP, err, sizeof err);
    CHECK(w && snap_writer_close(w, 0, NULL, 0) == 0 && temp_files_left() == 0, "abandoned save cleaned up");
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    umask(022);
    snprintf(path, sizeof path, "%s/race.snap", tmpdir);
    concurrent_writers();
    failures_name_their_cause();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_summary();
}
