/*
 * test_threads.c — libengine's threads on a shared machine: mnemo_threads_prefer_passive re-executes the
 * program with OMP_WAIT_POLICY=passive unless the environment already chose a policy, and a decode gives the
 * calling thread the model's thread count for every OpenMP region (FAISS and the IVF-grow index included, which
 * take OpenMP's default team).
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine.h"
#include "test_util.h"

/* Runs this program again in a child with the given environment changes, asking mnemo_threads_prefer_passive
 * to act; returns what the final program image printed: its OMP_WAIT_POLICY ("-" when unset). */
static void child_policy(const char *set_name, const char *set_value, char *out, size_t cap) {
    int fd[2];
    out[0] = '\0';
    if (pipe(fd) != 0) return;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], STDOUT_FILENO);
        close(fd[0]);
        unsetenv("OMP_WAIT_POLICY");
        unsetenv("GOMP_SPINCOUNT");
        if (set_name) setenv(set_name, set_value, 1);
        char *argv[] = {"test_threads", "--report-policy", NULL};
        mnemo_threads_prefer_passive(argv); /* execs, or returns when the environment already chose */
        execv("/proc/self/exe", argv);      /* report as this image */
        _exit(127);
    }
    close(fd[1]);
    ssize_t n = read(fd[0], out, cap - 1);
    out[n > 0 ? n : 0] = '\0';
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
}

static void check_prefer_passive(void) {
    char got[64];
    child_policy(NULL, NULL, got, sizeof got);
    CHECK(!strcmp(got, "passive"), "no policy set: re-executed with passive (got '%s')", got);
    child_policy("OMP_WAIT_POLICY", "active", got, sizeof got);
    CHECK(!strcmp(got, "active"), "an explicit active policy is kept (got '%s')", got);
    child_policy("GOMP_SPINCOUNT", "1000", got, sizeof got);
    CHECK(!strcmp(got, "-"), "GOMP_SPINCOUNT counts as a choice (got '%s')", got);
}

static void check_decode_threads(const char *sub, int n_threads, int want) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", test_fixtures(), sub);
    mnemo_model_params mp = mnemo_model_default_params();
    mp.n_threads = n_threads;
    mp.device = MNEMO_DEVICE_CPU;
    mnemo_model *m = NULL;
    mnemo_context *ctx = NULL;
    if (mnemo_model_load(dir, &mp, &m) != MNEMO_OK || mnemo_context_new(m, NULL, &ctx) != MNEMO_OK) {
        CHECK(0, "load %s: %s", dir, mnemo_model_error(m));
    } else {
        omp_set_num_threads(7); /* whatever the caller had */
        mnemo_token ids[100]; /* within the plain fixtures' 128 positions; 3 windows of the LongLLaMA one */
        for (int i = 0; i < 100; i++) ids[i] = 3 + (i * 37) % 200;
        CHECK(mnemo_decode(ctx, ids, 100) == MNEMO_OK, "decode: %s", mnemo_context_error(ctx));
        CHECK(omp_get_max_threads() == want, "%s, n_threads %d: OpenMP regions after a decode get %d threads (want %d)",
              sub, n_threads, omp_get_max_threads(), want);
    }
    mnemo_context_free(ctx);
    mnemo_model_free(m);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--report-policy")) { /* the re-executed child: what its image sees */
        const char *p = getenv("OMP_WAIT_POLICY");
        printf("%s", p ? p : "-");
        return 0;
    }
    check_prefer_passive();
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    check_decode_threads("models/mha", 1, 1);
    check_decode_threads("models/mha", 3, 3);
    check_decode_threads("models/mha", 0, (int)cores);
    check_decode_threads("longllama/basic", 1, 1); /* memory windows go through the same entry */
    return test_summary();
}
