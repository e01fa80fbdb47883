/* Ways to get managed memory off the GPU and back, timed on a real card: UVM prefetch to the
 * host (what libnvs does), and copy-out to pinned host memory followed by a discard of the
 * device pages. Prints one JSON object per measurement; every round trip checks the contents.
 *
 *   cc -O2 -I/usr/local/cuda/include move_out_paths.c -o move_out_paths -lcuda -lpthread
 *   ./move_out_paths GIB          (the managed memory it asks for: keep it far below free)
 */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHUNK (256ull << 20)
#define STREAMS 4
#define GIB (1ull << 30)

static CUstream streams[STREAMS];
static int device_ordinal;

static void check(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        cuGetErrorName(r, &name);
        fprintf(stderr, "%s failed: %s\n", what, name);
        exit(1);
    }
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void sync_all(void)
{
    for (int i = 0; i < STREAMS; i++)
        check(cuStreamSynchronize(streams[i]), "cuStreamSynchronize");
}

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

/* Each chunk gets its own 32-bit value, written by the GPU so the pages start there. */
static void fill(CUdeviceptr p, size_t size)
{
    for (size_t off = 0, i = 0; off < size; off += CHUNK, i++)
        check(cuMemsetD32Async(p + off, 0x5eed0000u + (unsigned)i, CHUNK / 4,
                               streams[i % STREAMS]),
              "cuMemsetD32Async");
    sync_all();
}

static int intact(CUdeviceptr p, size_t size)
{
    for (size_t off = 0, i = 0; off < size; off += CHUNK, i++) {
        uint32_t words[3];
        size_t at[3] = {0, CHUNK / 2, CHUNK - 4};
        for (int k = 0; k < 3; k++)
            check(cuMemcpyDtoH(&words[k], p + off + at[k], 4), "cuMemcpyDtoH");
        for (int k = 0; k < 3; k++)
            if (words[k] != 0x5eed0000u + (unsigned)i)
                return 0;
    }
    return 1;
}

static void prefetch(CUdeviceptr p, size_t size, int to_host)
{
    CUmemLocation where = {to_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE,
                           to_host ? 0 : device_ordinal};
    for (size_t off = 0, i = 0; off < size; off += CHUNK, i++)
        check(cuMemPrefetchAsync(p + off, CHUNK, where, 0, streams[i % STREAMS]),
              "cuMemPrefetchAsync");
    sync_all();
}

static void copy_out(void *host, CUdeviceptr p, size_t size)
{
    for (size_t off = 0, i = 0; off < size; off += CHUNK, i++)
        check(cuMemcpyDtoHAsync((char *)host + off, p + off, CHUNK, streams[i % STREAMS]),
              "cuMemcpyDtoHAsync");
    sync_all();
}

static void copy_in(CUdeviceptr p, const void *host, size_t size)
{
    for (size_t off = 0, i = 0; off < size; off += CHUNK, i++)
        check(cuMemcpyHtoDAsync(p + off, (const char *)host + off, CHUNK, streams[i % STREAMS]),
              "cuMemcpyHtoDAsync");
    sync_all();
}

static void discard(CUdeviceptr p, size_t size, int then_to_host)
{
    CUdeviceptr ptrs[1] = {p};
    size_t sizes[1] = {size};
    if (then_to_host) {
        CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
        size_t first = 0;
        check(cuMemDiscardAndPrefetchBatchAsync(ptrs, sizes, 1, &host, &first, 1, 0, streams[0]),
              "cuMemDiscardAndPrefetchBatchAsync");
    } else {
        check(cuMemDiscardBatchAsync(ptrs, sizes, 1, 0, streams[0]), "cuMemDiscardBatchAsync");
    }
    sync_all();
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

struct pin_job {
    char *base;
    size_t size;
};

static void *touch_and_pin(void *arg)
{
    struct pin_job *job = arg;
    for (size_t off = 0; off < job->size; off += 4096)
        job->base[off] = 0;
    return NULL;
}

/* Host memory prepared by several threads (pages faulted in), then registered: what a
 * background preparation would cost, against cuMemHostAlloc above. */
static void prepared_host(size_t size)
{
    enum { THREADS = 8 };
    char *base = aligned_alloc(4096, size);
    if (base == NULL)
        return;
    pthread_t threads[THREADS];
    struct pin_job jobs[THREADS];
    double t = now_s();
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (struct pin_job){base + i * (size / THREADS), size / THREADS};
        pthread_create(&threads[i], NULL, touch_and_pin, &jobs[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
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
    CUdevice dev;
    CUcontext ctx;
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    device_ordinal = 0;
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    for (int i = 0; i < STREAMS; i++)
        check(cuStreamCreate(&streams[i], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    uvm_path(size);
    pinned_path(size, 0);
    pinned_path(size, 1);
    prepared_host(size);
    return 0;
}
