/* The cost of one cuLaunchKernel call on the fake driver, with or without libnvs.so preloaded.
 *
 * usage: launch_cost rejected|queued LAUNCHES
 *   rejected  launches with gridDimX 0, which the fake driver refuses (CUDA_ERROR_INVALID_VALUE)
 *             after its argument checks and before queueing anything: the call costs the
 *             driver almost nothing, so a difference between two runs is what sits in front of
 *             the driver (libnvs's gate);
 *   queued    real launches of a zero-length kernel that the fake queues for its device thread
 *             (a malloc, a mutex and a wake-up per call: noisier, closer to a real launch).
 * The driver is found as the CUDA runtime finds it: dlopen("libcuda.so.1"), then every entry
 * point through cuGetProcAddress_v2. One real launch first takes the GPU lock when libnvs.so is
 * there; the timed calls then all run with the lock held.
 * Prints one JSON line: {"mode", "launches", "ns_per_launch" (median over chunks), "pid"}. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"

#define CHUNKS 21
#define WARMUP_LAUNCHES 10000
#define QUEUED_SYNC_EVERY 4096 /* keeps the fake's queue (one malloc per launch) bounded */

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);

static struct {
    __typeof__(&cuInit) init;
    __typeof__(&cuDeviceGet) device_get;
    __typeof__(&cuDevicePrimaryCtxRetain) retain;
    __typeof__(&cuCtxSetCurrent) set_current;
    __typeof__(&cuModuleLoadData) load;
    __typeof__(&cuModuleGetFunction) get_function;
    __typeof__(&cuLaunchKernel) launch;
    __typeof__(&cuCtxSynchronize) sync;
} api;

static void fail(const char *what, int code)
{
    fprintf(stderr, "launch_cost: %s failed (CUresult %d)\n", what, code);
    exit(1);
}

static void check(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS)
        fail(what, (int)r);
}

static void resolve(void)
{
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!driver) {
        fprintf(stderr, "launch_cost: cannot load libcuda.so.1: %s (set LD_LIBRARY_PATH to the "
                        "fake driver's folder)\n", dlerror());
        exit(2);
    }
    get_proc_fn get_proc = (get_proc_fn)dlsym(driver, "cuGetProcAddress_v2");
    if (!get_proc) {
        fprintf(stderr, "launch_cost: libcuda.so.1 has no cuGetProcAddress_v2\n");
        exit(2);
    }
    struct { const char *name; void **slot; } wanted[] = {
        {"cuInit", (void **)&api.init},
        {"cuDeviceGet", (void **)&api.device_get},
        {"cuDevicePrimaryCtxRetain", (void **)&api.retain},
        {"cuCtxSetCurrent", (void **)&api.set_current},
        {"cuModuleLoadData", (void **)&api.load},
        {"cuModuleGetFunction", (void **)&api.get_function},
        {"cuLaunchKernel", (void **)&api.launch},
        {"cuCtxSynchronize", (void **)&api.sync},
    };
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        CUdriverProcAddressQueryResult status;
        /* 12000: the ABI this program calls (cuCtxSynchronize without a context argument). */
        CUresult r = get_proc(wanted[i].name, wanted[i].slot, 12000, 0, &status);
        if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || !*wanted[i].slot)
            fail(wanted[i].name, (int)r);
    }
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* n launches; every result must be `expected` (the loop must measure what it claims). */
static void launches(CUfunction f, unsigned int grid, long n, CUresult expected, bool sync)
{
    for (long i = 0; i < n; i++) {
        CUresult r = api.launch(f, grid, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        if (__builtin_expect(r != expected, 0))
            fail("cuLaunchKernel", (int)r);
        if (sync && (i + 1) % QUEUED_SYNC_EVERY == 0)
            check(api.sync(), "cuCtxSynchronize");
    }
}

int main(int argc, char **argv)
{
    bool queued = argc == 3 && strcmp(argv[1], "queued") == 0;
    long total = argc == 3 ? strtol(argv[2], NULL, 10) : 0;
    if (argc != 3 || (!queued && strcmp(argv[1], "rejected") != 0) || total < CHUNKS) {
        fprintf(stderr, "usage: launch_cost rejected|queued LAUNCHES (at least %d)\n", CHUNKS);
        return 2;
    }
    /* "noop" runs for FAKECUDA_KERNEL_US: zero, so the device thread keeps up. */
    setenv("FAKECUDA_KERNEL_US", "0", 1);
    resolve();
    CUdevice device;
    CUcontext context;
    CUmodule module;
    CUfunction noop;
    check(api.init(0), "cuInit");
    check(api.device_get(&device, 0), "cuDeviceGet");
    check(api.retain(&context, device), "cuDevicePrimaryCtxRetain");
    check(api.set_current(context), "cuCtxSetCurrent");
    check(api.load(&module, "launch_cost module"), "cuModuleLoadData");
    check(api.get_function(&noop, module, "noop"), "cuModuleGetFunction");

    unsigned int grid = queued ? 1 : 0;
    CUresult expected = queued ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    launches(noop, 1, 1, CUDA_SUCCESS, false); /* under libnvs.so: waits for the GPU lock */
    launches(noop, grid, WARMUP_LAUNCHES, expected, queued);
    check(api.sync(), "cuCtxSynchronize");

    long per_chunk = total / CHUNKS;
    double chunk_ns[CHUNKS];
    for (int c = 0; c < CHUNKS; c++) {
        uint64_t start = now_ns();
        launches(noop, grid, per_chunk, expected, queued);
        chunk_ns[c] = (double)(now_ns() - start) / (double)per_chunk;
    }
    check(api.sync(), "cuCtxSynchronize");
    qsort(chunk_ns, CHUNKS, sizeof chunk_ns[0], compare_doubles);
    printf("{\"mode\": \"%s\", \"launches\": %ld, \"ns_per_launch\": %.3f, \"pid\": %d}\n",
           argv[1], per_chunk * CHUNKS, chunk_ns[CHUNKS / 2], (int)getpid());
    return 0;
}
