/* Ways to get managed memory off the GPU and back, timed on a real card: UVM prefetch to the
 * host (what libnvs does), and copy-out to pinned host memory followed by a discard of the
 * device pages. Prints one JSON object per measurement; every round trip checks the contents.
 *
 *   cc -O2 -I/usr/local/cuda/include move_out_paths.c -o move_out_paths -lcuda -lpthread
 *   ./move_out_paths GIB          (the managed memory it asks for: keep it far below free)
 */
#include <string.h>

#include "managed_moves.h"

static size_t free_mib(void)
{
    size_t free_b, total;
    check(cuMemGetInfo(&free_b, &total), "cuMemGetInfo");
    return free_b >> 20;
}

static void report(const char *path, const char *step, size_t bytes, double seconds)
{
    printf("{\"path\": \"%s\", \"step\": \"%s\", \"gib\": %.2f, \"seconds\": %.3f, "
           "\"gb_per_s\": %.2f, \"device_free_mib\": %zu}\n",
           path, step, bytes / (double)GIB, seconds, bytes / seconds / 1e9, free_mib());
    fflush(stdout);
}

/* What libnvs does today: UVM moves the pages, twice (the first move meets new host pages). */
static void uvm_path(size_t size)
{
    CUdeviceptr p;
    check(cuMemAllocManaged(&p, size, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
    fill(p, size);
    for (int round = 1; round <= 3; round++) {
        double t = now_s();
        prefetch(p, size, 1);
        report("uvm", round == 1 ? "out_first" : "out_again", size, now_s() - t);
        t = now_s();
        prefetch(p, size, 0);
        report("uvm", "in", size, now_s() - t);
    }
    printf("{\"path\": \"uvm\", \"intact\": %d}\n", intact(p, size));
    check(cuMemFree(p), "cuMemFree");
}

/* Copy the device pages to pinned host memory, then discard them (optionally with a prefetch
 * to the host, which frees the device pages for certain); back: prefetch to the device, which
 * only populates discarded pages, then copy in. */
static void pinned_path(size_t size, int then_to_host)
{
    const char *name = then_to_host ? "pinned_discard_to_host" : "pinned_discard";
    CUdeviceptr p;
    check(cuMemAllocManaged(&p, size, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
    fill(p, size);
    void *host;
    double t = now_s();
    check(cuMemHostAlloc(&host, size, 0), "cuMemHostAlloc");
    report(name, "pin_host_alloc", size, now_s() - t);
    int ok = 1;
    for (int round = 1; round <= 3; round++) {
        t = now_s();
        copy_out(host, p, size);
        double copied = now_s() - t;
        discard(p, size, then_to_host);
        report(name, round == 1 ? "out_first" : "out_again", size, now_s() - t);
        report(name, "copy_only", size, copied);
        t = now_s();
        prefetch(p, size, 0);
        copy_in(p, host, size);
        report(name, "in", size, now_s() - t);
        ok = ok && intact(p, size);
    }
    printf("{\"path\": \"%s\", \"intact\": %d}\n", name, ok);
    check(cuMemFreeHost(host), "cuMemFreeHost");
    check(cuMemFree(p), "cuMemFree");
}

/* Host memory prepared by several threads (pages faulted in), then registered: what a
 * background preparation would cost, against cuMemHostAlloc above. */
static void prepared_host(size_t size)
{
    char *base = aligned_alloc(4096, size);
    if (base == NULL)
        return;
    double t = now_s();
    fault_in(base, size);
    report("prepared_host", "fault_in_8_threads", size, now_s() - t);
    t = now_s();
    check(cuMemHostRegister(base, size, 0), "cuMemHostRegister");
    report("prepared_host", "register", size, now_s() - t);
    check(cuMemHostUnregister(base), "cuMemHostUnregister");
    free(base);
}

int main(int argc, char **argv)
{
    size_t size = (size_t)(argc > 1 ? atof(argv[1]) : 8) * GIB;
    size -= size % CHUNK;
    start_cuda();
    uvm_path(size);
    pinned_path(size, 0);
    pinned_path(size, 1);
    prepared_host(size);
    return 0;
}
