/*
 * test_devices.h — which backends a C test runs on, the same rule for every test that can run on both:
 * MNEMO_TEST_DEVICE = cpu, cuda or all; unset: the CPU, and CUDA as well when a usable backend is present. Asking
 * for CUDA without a usable backend is a failure, not a skip (CI asks for it on the CUDA emulator).
 */
#ifndef MNEMO_TEST_DEVICES_H
#define MNEMO_TEST_DEVICES_H

#include <stdbool.h>
#include <string.h>

#include "kernels.h"
#include "test_util.h"

typedef struct {
    bool cpu, cuda;  /* run on it */
    char info[256];  /* the CUDA backend's description, or why it is not usable */
} test_devices;

static inline test_devices test_pick_devices(void) {
    test_devices d;
    const char *want = getenv("MNEMO_TEST_DEVICE");
    bool cuda_ok = kern_cuda_available(d.info, sizeof d.info);
    d.cpu = !want || !strcmp(want, "cpu") || !strcmp(want, "all");
    d.cuda = want ? !strcmp(want, "cuda") || !strcmp(want, "all") : cuda_ok;
    CHECK(d.cpu || d.cuda, "MNEMO_TEST_DEVICE must be cpu, cuda or all (got '%s')", want);
    CHECK(!d.cuda || cuda_ok, "MNEMO_TEST_DEVICE=%s asks for CUDA, which is not usable: %s", want, d.info);
    d.cuda = d.cuda && cuda_ok;
    printf("cuda: %s (%s)\n", d.cuda ? "run" : "not run", d.info);
    return d;
}

#endif
