/*
 * threads_api.c — how libengine's CPU threads behave on a machine shared with other work.
 *
 * Two things went wrong there:
 *   - OpenMP (libgomp) lets a worker that runs out of work spin for up to ~300000 pause loops (milliseconds)
 *     before it sleeps. With another CPU-bound job on the machine, the spinning workers hold the cores that the
 *     one worker still computing — and the other job — wait for, and every parallel step ends late: a long
 *     prompt ran 2-5x (seen up to 30x) slower than with idle workers asleep. libgomp reads its policy
 *     (OMP_WAIT_POLICY) once, in its constructor, before main(): a library cannot change it afterwards, so
 *     mnemo_threads_prefer_passive() re-executes the program with OMP_WAIT_POLICY=passive.
 *   - Parallel regions outside the kernels (FAISS, the IVF-grow index) took OpenMP's default team, one thread
 *     per core, whatever n_threads said; threads_use() gives the calling thread the model's count.
 */
#include <omp.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine_impl.h"
#include "log.h"

void mnemo_threads_prefer_passive(char **argv) {
    if (!argv || !argv[0] || getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return; /* the user chose */
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv); /* returns only on failure: then run on as we are */
    unsetenv("OMP_WAIT_POLICY");
}

void threads_use(const mnemo_model *m) {
    int n = m->n_threads;
    if (n <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = cores > 0 ? (int)cores : 1;
    }
    if (omp_get_max_threads() != n) omp_set_num_threads(n); /* this thread's default team from now on */
}
