/* What the by-hand driver programs of bench/gpu share (move_out_paths.c, first_move_out.c,
 * staging_growth.c):
 * managed memory written in 256 MiB chunks with its own value each, moved in those chunks over
 * STREAMS streams, and checked. Each program is one file and includes this once. */
#ifndef GS_BENCH_MANAGED_MOVES_H
#define GS_BENCH_MANAGED_MOVES_H

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHUNK (256ull << 20)
#define STREAMS 4
#define GIB (1ull << 30)

static CUstream streams[STREAMS];

static inline void check(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        cuGetErrorName(r, &name);
        fprintf(stderr, "%s failed: %s\n", what, name);
        exit(1);
    }
}

static inline double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static inline void sync_all(void)
{
    for (int i = 0; i < STREAMS; i++)
        check(cuStreamSynchronize(streams[i]), "cuStreamSynchronize");
}

struct span {
    char *base;
    size_t size;
};

static inline void *touch_span(void *arg)
{
    struct span *s = arg;
    for (size_t off = 0; off < s->size; off += 4096)
        ((volatile char *)s->base)[off] = 0;
    return NULL;
}

/* Faults host memory in by FAULT_THREADS threads, as libnvs prepares staging memory. */
#define FAULT_THREADS 8
static inline void fault_in(char *base, size_t size)
{
    pthread_t threads[FAULT_THREADS];
    struct span spans[FAULT_THREADS];
    for (int i = 0; i < FAULT_THREADS; i++) {
        spans[i] = (struct span){base + i * (size / FAULT_THREADS), size / FAULT_THREADS};
        pthread_create(&threads[i], NULL, touch_span, &spans[i]);
    }
    for (int i = 0; i < FAULT_THREADS; i++)
        pthread_join(threads[i], NULL);
}

/* Device 0's primary context, current, and the streams. */
static inline void start_cuda(void)
{
    CUdevice dev;
    CUcontext ctx;
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    for (int i = 0; i < STREAMS; i++)
        check(cuStreamCreate(&streams[i], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
}

/* Each chunk gets its own 32-bit value, written by the GPU so the pages start there. */
static inline void fill(CUdeviceptr p, size_t size)
{
    for (size_t off = 0, i = 0; off < size; off += CHUNK, i++)
        check(cuMemsetD32Async(p + off, 0x5eed0000u + (unsigned)i, CHUNK / 4,
                               streams[i % STREAMS]),
              "cuMemsetD32Async");
    sync_all();
}

/* Three words of every chunk (its first, middle and last) hold its value. */
static inline int intact(CUdeviceptr p, size_t size)
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

/* The driver's migration of the whole range to the host or to device 0, chunk by chunk. */
static inline void prefetch(CUdeviceptr p, size_t size, int to_host)
{
    CUmemLocation where = {to_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE, 0};
    for (size_t off = 0, i = 0; off < size; off += CHUNK, i++)
        check(cuMemPrefetchAsync(p + off, CHUNK, where, 0, streams[i % STREAMS]),
              "cuMemPrefetchAsync");
    sync_all();
}

static inline void copy_out(void *host, CUdeviceptr p, size_t size)
{
    for (size_t off = 0, i = 0; off < size; off += CHUNK, i++)
        check(cuMemcpyDtoHAsync((char *)host + off, p + off, CHUNK, streams[i % STREAMS]),
              "cuMemcpyDtoHAsync");
    sync_all();
}

static inline void copy_in(CUdeviceptr p, const void *host, size_t size)
{
    for (size_t off = 0, i = 0; off < size; off += CHUNK, i++)
        check(cuMemcpyHtoDAsync(p + off, (const char *)host + off, CHUNK, streams[i % STREAMS]),
              "cuMemcpyHtoDAsync");
    sync_all();
}

static inline void discard(CUdeviceptr p, size_t size, int then_to_host)
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

#endif
