/* What new pinned staging memory costs a program on this host: host pages faulted in by 8
 * threads, then registered with the driver (what libnvs does before its first moves out), in
 * PROCESSES programs at once, with 4 KiB pages or transparent huge pages; and, against it, the
 * driver's first migration of as much managed memory, written on the device, to the host (what
 * libnvs lets the driver do when pinning would take longer). Each program asks for GIB of
 * managed memory: keep PROCESSES x GIB under half of the device's free memory. Prints one JSON
 * object per program.
 *
 *   cc -O2 -I/usr/local/cuda/include staging_growth.c -o staging_growth -lcuda -lpthread
 *   ./staging_growth GIB PROCESSES HUGE     (HUGE: 1 for madvise(MADV_HUGEPAGE), 0 for none)
 */
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "managed_moves.h"

#define HUGE_PAGE (2ull << 20)

/* Seconds the driver takes to migrate `size` bytes of managed memory, just written on the
 * device, to the host for the first time; negative when the driver refused. */
static double first_migration_out(size_t size)
{
    CUdeviceptr managed;
    if (cuMemAllocManaged(&managed, size, CU_MEM_ATTACH_GLOBAL))
        return -1;
    double took = -1;
    CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
    if (cuMemsetD8(managed, 1, size) == CUDA_SUCCESS && cuCtxSynchronize() == CUDA_SUCCESS) {
        double t = now_s();
        if (cuMemPrefetchAsync(managed, size, host, 0, NULL) == CUDA_SUCCESS &&
            cuCtxSynchronize() == CUDA_SUCCESS)
            took = now_s() - t;
    }
    cuMemFree(managed);
    return took;
}

static int one_program(size_t size, int huge, int index)
{
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx)) {
        fprintf(stderr, "no CUDA context\n");
        return 1;
    }
    char *raw = mmap(NULL, size + HUGE_PAGE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return 1;
    char *base = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (huge)
        madvise(base, size, MADV_HUGEPAGE);
    double t = now_s();
    fault_in(base, size);
    double faulted = now_s() - t;
    t = now_s();
    CUresult r = cuMemHostRegister(base, size, CU_MEMHOSTREGISTER_PORTABLE);
    double registered = now_s() - t;
    double migrated = first_migration_out(size);
    printf("{\"program\": %d, \"huge\": %d, \"gib\": %.2f, \"fault_in_s\": %.3f, "
           "\"register_s\": %.3f, \"register_ok\": %s, \"gb_per_s\": %.2f, "
           "\"migrate_out_s\": %.3f, \"migrate_gb_per_s\": %.2f}\n",
           index, huge, size / (double)(1ull << 30), faulted, registered,
           r == CUDA_SUCCESS ? "true" : "false", size / (faulted + registered) / 1e9, migrated,
           migrated > 0 ? size / migrated / 1e9 : 0.0);
    fflush(stdout);
    if (r == CUDA_SUCCESS)
        cuMemHostUnregister(base);
    munmap(raw, size + HUGE_PAGE);
    return r == CUDA_SUCCESS ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s GIB PROCESSES HUGE\n", argv[0]);
        return 2;
    }
    size_t size = (size_t)(atof(argv[1]) * (1ull << 30)) / HUGE_PAGE * HUGE_PAGE;
    int processes = atoi(argv[2]), huge = atoi(argv[3]), failed = 0;
    for (int i = 0; i < processes; i++)
        if (fork() == 0)
            return one_program(size, huge, i);
    for (int i = 0; i < processes; i++) {
        int status = 0;
        wait(&status);
        failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    return failed ? 1 : 0;
}
