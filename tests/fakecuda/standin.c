/* A scriptable stand-in for a CUDA program, driven by steps on the command line:
 *
 *   standin [--resolve procaddr|procaddr-v1|dlsym|linked] [--ptsz] STEP...
 *
 * Each step prints one line "<step> key=value ... result=<CUresult>" (stdout, line-buffered) so
 * tests can parse what happened; `standin --help` lists the steps. Exit status: 0 when every step
 * succeeded, 3 when a CUDA call failed, 2 on a usage error. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "standin_api.h"
#include "standin_nvml.h"

#define MAX_BUFFERS 64
#define WAIT_FILE_TIMEOUT_S 60

static const char usage[] =
    "usage: standin [--resolve procaddr|procaddr-v1|dlsym|linked] [--ptsz] STEP...\n"
    "steps (SIZE takes K/M/G suffixes; NAME names a buffer):\n"
    "  init                      cuInit, device 0, retain and set the primary context\n"
    "  alloc NAME SIZE           cuMemAlloc          alloc-managed NAME SIZE   cuMemAllocManaged\n"
    "  alloc-pitch NAME W H      cuMemAllocPitch (4-byte elements)\n"
    "  alloc-async NAME SIZE     cuMemAllocAsync     alloc-pool NAME SIZE      from a new pool\n"
    "  vmm-alloc NAME SIZE       cuMemCreate + cuMemAddressReserve + cuMemMap + cuMemSetAccess\n"
    "  free NAME | free-all      the matching free call(s)\n"
    "  attr NAME | range NAME    pointer attributes / cuMemGetAddressRange\n"
    "  mem-info | total-mem      cuMemGetInfo / cuDeviceTotalMem\n"
    "  write NAME BYTE | check NAME BYTE   copy bytes in / copy out and verify\n"
    "  touch NAME BYTE           write through the pointer from the host (managed memory)\n"
    "  fill NAME BYTE            the fake's \"fill\" kernel over the buffer\n"
    "  fill-part NAME OFFSET SIZE BYTE   the same over a part of it\n"
    "  memset NAME BYTE | memset-async NAME WORD\n"
    "  prefetch NAME | prefetch-host NAME   cuMemPrefetchAsync to this device / to the host\n"
    "  launch US | launch-ex US | launches N US   \"sleep\" kernels of US microseconds\n"
    "  host-func | sync | stream-sync | stream-query\n"
    "  coop-launch US | launch-grid US | launch-grid-async US | launch-plain\n"
    "                            cooperative / deprecated cuLaunchGrid(Async) / cuLaunch sleeps\n"
    "  stream-callback           cuStreamAddCallback\n"
    "  write-async NAME BYTE     cuMemcpyHtoDAsync   memset-2d NAME BYTE   cuMemsetD2D8 (2 rows)\n"
    "  copy-async|copy-peer|copy-dtod|copy-2d|copy-3d|copy-batch DST SRC   device copies of\n"
    "                            min(sizes): cuMemcpyDtoDAsync, cuMemcpyPeer (each buffer's\n"
    "                            context), cuMemcpyDtoD, cuMemcpy2D, cuMemcpy3D,\n"
    "                            cuMemcpyBatchAsync (_v2)\n"
    "  prefetch-batch|discard|discard-prefetch NAME   cuMemPrefetchBatchAsync,\n"
    "                            cuMemDiscardBatchAsync, cuMemDiscardAndPrefetchBatchAsync\n"
    "  decompress | map-array    cuMemBatchDecompressAsync / cuMemMapArrayAsync (dummy blocks)\n"
    "  stream-new | stream-use N | stream-default   create (and use) stream N = 1, 2, ... /\n"
    "                            use stream N again / use the default stream\n"
    "  block-until PATH          queue a host function that waits for PATH to exist\n"
    "  sync-other-thread         cuCtxSynchronize from a new thread\n"
    "  event-record | event-sync | event-query\n"
    "  capture-begin global|thread|relaxed | capture-end | is-capturing | graph-launch\n"
    "  capture-graph N US        capture N launches, instantiate (then graph-launch)\n"
    "  capture-mode global|thread|relaxed   cuThreadExchangeStreamCaptureMode\n"
    "  threads N LAUNCHES US     N threads launching at once, each then synchronizing\n"
    "  thread-start LAUNCHES US | thread-join   one such thread on the current device, in the\n"
    "                            background while the next steps run; then waited for\n"
    "  ctx-create | ctx-primary  a new context / the primary one becomes current\n"
    "  device N                  device N's primary context becomes current (retained, kernels\n"
    "                            loaded there); later steps use its default stream\n"
    "  primary-reset             reset the primary context, then retain it and make it current\n"
    "  primary-release           cuDevicePrimaryCtxRelease (init retains it again)\n"
    "  vmm-release NAME          cuMemRelease of a vmm-alloc's handle, still mapped (free unmaps)\n"
    "  fork STEP... end          run the steps in a forked child and wait for it\n"
    "  get-proc NAME VERSION FLAGS   cuGetProcAddress_v2 through dlopen/dlsym\n"
    "  sleep-ms MS | wait-file PATH | touch-file PATH | pid | exit CODE\n"
    "  clock                     print CLOCK_MONOTONIC in ns (time a stretch of steps)\n"
    "  every-ms MS               sleep until the next multiple of MS since the first every-ms\n"
    "NVML steps (libnvidia-ml.so.1 by dlopen and dlsym; standin_linked: linked to it):\n"
    "  nvml-init                 nvmlInit_v2; NVML device 0 becomes the device\n"
    "  nvml-device N | nvml-device-by-uuid N   NVML device N, by index / by its UUID\n"
    "  nvml-memory 1|2|2-bad     nvmlDeviceGetMemoryInfo / _v2 (2-bad: a wrong struct version)\n"
    "  nvml-processes compute|graphics|mps 1|2|3   the running-process list of that version,\n"
    "                            asked for its count first, as programs do\n"
    "  nvml-details MODE         nvmlDeviceGetRunningProcessDetailList (0 compute, 1 graphics,\n"
    "                            2 MPS, 3 all)\n";

struct buffer {
    char name[32];
    CUdeviceptr ptr;
    size_t size, pitch, width, height;
    enum { B_DEVICE, B_MANAGED, B_PITCH, B_ASYNC, B_VMM } kind;
    CUmemGenericAllocationHandle handle;
    CUcontext ctx; /* current when it was made: its device's */
};

static struct standin_api api;
static const char *resolve_mode = "procaddr";
static bool per_thread;
static CUdevice device;
static CUcontext context;
static CUfunction sleep_fn, fill_fn;
static CUstream stream; /* NULL: the default stream of the chosen variant */
static CUstream streams[16];
static int stream_count;
static CUgraphExec graph_exec;
static CUevent event;
static CUmemoryPool pool;
static struct buffer buffers[MAX_BUFFERS];
static int failures;
static _Atomic int host_func_runs;

/* ---- output -------------------------------------------------------------------------------- */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static const char *error_name(CUresult r)
{
    const char *name = NULL;
    if (api.cuGetErrorName && api.cuGetErrorName(r, &name) == CUDA_SUCCESS && name)
        return name;
    return "unknown";
}

/* Prints "<step> <details> result=N error=NAME" and counts failures. */
static CUresult report(CUresult r, const char *step, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static CUresult report(CUresult r, const char *step, const char *fmt, ...)
{
    char details[512] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(details, sizeof details, fmt, ap);
        va_end(ap);
    }
    say("%s%s%s result=%d error=%s", step, *details ? " " : "", details, (int)r, error_name(r));
    if (r != CUDA_SUCCESS)
        failures++;
    return r;
}

static void die_usage(const char *what)
{
    fprintf(stderr, "standin: %s\n%s", what, usage);
    exit(2);
}

/* ---- argument parsing ---------------------------------------------------------------------- */

static size_t parse_size(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno)
        die_usage("a size must be a number with an optional K, M or G suffix");
    switch (toupper((unsigned char)*end)) {
    case 'K': v <<= 10; end++; break;
    case 'M': v <<= 20; end++; break;
    case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end)
        die_usage("a size must be a number with an optional K, M or G suffix");
    return (size_t)v;
}

static const char *next_arg(int *i, int argc, char **argv, const char *step)
{
    if (*i >= argc) {
        char msg[96];
        snprintf(msg, sizeof msg, "step '%s' needs more arguments", step);
        die_usage(msg);
    }
    return argv[(*i)++];
}

static struct buffer *find_buffer(const char *name)
{
    for (int i = 0; i < MAX_BUFFERS; i++)
        if (buffers[i].ptr && strcmp(buffers[i].name, name) == 0)
            return &buffers[i];
    fprintf(stderr, "standin: no buffer named '%s'\n", name);
    exit(2);
}

static struct buffer *new_buffer(const char *name)
{
    for (int i = 0; i < MAX_BUFFERS; i++)
        if (!buffers[i].ptr) {
            memset(&buffers[i], 0, sizeof buffers[i]);
            snprintf(buffers[i].name, sizeof buffers[i].name, "%s", name);
            buffers[i].ctx = context;
            return &buffers[i];
        }
    die_usage("too many buffers");
    return NULL;
}

static CUstreamCaptureMode parse_mode(const char *s)
{
    if (strcmp(s, "global") == 0)
        return CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (strcmp(s, "thread") == 0)
        return CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    if (strcmp(s, "relaxed") == 0)
        return CU_STREAM_CAPTURE_MODE_RELAXED;
    die_usage("a capture mode is global, thread or relaxed");
    return CU_STREAM_CAPTURE_MODE_GLOBAL;
}

/* ---- steps: setup and memory --------------------------------------------------------------- */

/* Makes device `ordinal` current, as cudaSetDevice does: its primary context and our kernels. */
static CUresult use_device(int ordinal)
{
    static const char image[] = "fake module image";
    CUresult r = api.cuDeviceGet(&device, ordinal);
    if (r == CUDA_SUCCESS)
        r = api.cuDevicePrimaryCtxRetain(&context, device);
    if (r == CUDA_SUCCESS)
        r = api.cuCtxSetCurrent(context);
    CUmodule module;
    if (r == CUDA_SUCCESS)
        r = api.cuModuleLoadData(&module, image);
    if (r == CUDA_SUCCESS)
        r = api.cuModuleGetFunction(&sleep_fn, module, "sleep");
    if (r == CUDA_SUCCESS)
        r = api.cuModuleGetFunction(&fill_fn, module, "fill");
    return r;
}

static void step_init(void)
{
    CUresult r = api.cuInit(0);
    if (r == CUDA_SUCCESS)
        r = use_device(0);
    report(r, "init", "pid=%d resolve=%s ptsz=%d", (int)getpid(), resolve_mode, per_thread);
}

/* Moves the program to device `ordinal`, as cudaSetDevice does: its primary context, its own
 * kernels, its default stream. */
static void step_device(int ordinal)
{
    CUresult r = use_device(ordinal);
    stream = NULL;
    report(r, "device", "device=%d ctx=%p", ordinal, (void *)context);
}

static void step_alloc(const char *kind, const char *name, size_t size)
{
    struct buffer *b = new_buffer(name);
    CUresult r;
    if (strcmp(kind, "alloc") == 0) {
        b->kind = B_DEVICE;
        r = api.cuMemAlloc(&b->ptr, size);
    } else if (strcmp(kind, "alloc-managed") == 0) {
        b->kind = B_MANAGED;
        r = api.cuMemAllocManaged(&b->ptr, size, CU_MEM_ATTACH_GLOBAL);
    } else if (strcmp(kind, "alloc-async") == 0) {
        b->kind = B_ASYNC;
        r = api.cuMemAllocAsync(&b->ptr, size, stream);
    } else {
        b->kind = B_ASYNC;
        r = CUDA_SUCCESS;
        if (!pool) {
            CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                    .location = {CU_MEM_LOCATION_TYPE_DEVICE, device}};
            r = api.cuMemPoolCreate(&pool, &props);
        }
        if (r == CUDA_SUCCESS)
            r = api.cuMemAllocFromPoolAsync(&b->ptr, size, pool, stream);
    }
    if (r == CUDA_SUCCESS)
        b->size = size;
    else
        b->ptr = 0;
    report(r, kind, "name=%s ptr=0x%llx size=%zu", name, (unsigned long long)b->ptr, size);
}

static void step_alloc_pitch(const char *name, size_t width, size_t height)
{
    struct buffer *b = new_buffer(name);
    b->kind = B_PITCH;
    CUresult r = api.cuMemAllocPitch(&b->ptr, &b->pitch, width, height, 4);
    if (r == CUDA_SUCCESS) {
        b->width = width;
        b->height = height;
        b->size = b->pitch * height;
    } else
        b->ptr = 0;
    report(r, "alloc-pitch", "name=%s ptr=0x%llx pitch=%zu width=%zu height=%zu", name,
           (unsigned long long)b->ptr, b->pitch, width, height);
}

static void step_vmm_alloc(const char *name, size_t size)
{
    struct buffer *b = new_buffer(name);
    b->kind = B_VMM;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, device}};
    size_t gran = 0;
    CUresult r = api.cuMemGetAllocationGranularity(&gran, &prop, 0);
    if (r == CUDA_SUCCESS) {
        size = (size + gran - 1) / gran * gran;
        r = api.cuMemCreate(&b->handle, size, &prop, 0);
    }
    if (r == CUDA_SUCCESS && (r = api.cuMemAddressReserve(&b->ptr, size, 0, 0, 0)) != CUDA_SUCCESS)
        api.cuMemRelease(b->handle);
    if (r == CUDA_SUCCESS && (r = api.cuMemMap(b->ptr, size, 0, b->handle, 0)) == CUDA_SUCCESS) {
        CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, device},
                                  CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        r = api.cuMemSetAccess(b->ptr, size, &access, 1);
    }
    if (r == CUDA_SUCCESS)
        b->size = size;
    else
        b->ptr = 0;
    report(r, "vmm-alloc", "name=%s ptr=0x%llx size=%zu", name, (unsigned long long)b->ptr, size);
}

static CUresult free_buffer(struct buffer *b)
{
    CUresult r;
    switch (b->kind) {
    case B_ASYNC: r = api.cuMemFreeAsync(b->ptr, stream); break;
    case B_VMM:
        r = api.cuMemUnmap(b->ptr, b->size);
        if (r == CUDA_SUCCESS && b->handle) /* 0: vmm-release gave it back already */
            r = api.cuMemRelease(b->handle);
        if (r == CUDA_SUCCESS)
            r = api.cuMemAddressFree(b->ptr, b->size);
        break;
    default: r = api.cuMemFree(b->ptr); break;
    }
    report(r, "free", "name=%s ptr=0x%llx", b->name, (unsigned long long)b->ptr);
    b->ptr = 0;
    return r;
}

static void step_attr(struct buffer *b)
{
    unsigned int managed = 7, memtype = 7, ipc = 7;
    CUdeviceptr start = 0;
    size_t range = 0;
    CUresult r = api.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, b->ptr);
    if (r == CUDA_SUCCESS)
        r = api.cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, b->ptr);
    if (r == CUDA_SUCCESS)
        r = api.cuPointerGetAttribute(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                      b->ptr);
    if (r == CUDA_SUCCESS)
        r = api.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, b->ptr);
    if (r == CUDA_SUCCESS)
        r = api.cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, b->ptr);
    report(r, "attr",
           "name=%s is_managed=%u memory_type=%u ipc_capable=%u range_start=0x%llx range_size=%zu",
           b->name, managed, memtype, ipc, (unsigned long long)start, range);
}

static void step_range(struct buffer *b)
{
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult r = api.cuMemGetAddressRange(&base, &size, b->ptr);
    report(r, "range", "name=%s base=0x%llx size=%zu", b->name, (unsigned long long)base, size);
}

static void step_mem_info(void)
{
    size_t free_b = 0, total = 0;
    CUresult r = api.cuMemGetInfo(&free_b, &total);
    report(r, "mem-info", "free=%zu total=%zu", free_b, total);
}

static void step_total_mem(void)
{
    size_t total = 0;
    CUresult r = api.cuDeviceTotalMem(&total, device);
    report(r, "total-mem", "total=%zu", total);
}

/* Copies BYTE into the buffer (row by row for pitched ones) or reads it back and verifies. */
static void step_write_check(struct buffer *b, int value, bool check)
{
    size_t width = b->kind == B_PITCH ? b->width : b->size;
    size_t height = b->kind == B_PITCH ? b->height : 1;
    unsigned char *host = malloc(width * height);
    if (!host)
        die_usage("out of host memory");
    memset(host, check ? ~value : value, width * height);
    CUresult r;
    if (b->kind == B_PITCH) {
        CUDA_MEMCPY2D c = {0};
        c.WidthInBytes = width;
        c.Height = height;
        if (check) {
            c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = b->ptr, c.srcPitch = b->pitch;
            c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = host, c.dstPitch = width;
        } else {
            c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = host, c.srcPitch = width;
            c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = b->ptr, c.dstPitch = b->pitch;
        }
        r = api.cuMemcpy2D(&c);
    } else if (check)
        r = api.cuMemcpyDtoH(host, b->ptr, width);
    else
        r = api.cuMemcpyHtoD(b->ptr, host, width);
    size_t bad = 0;
    if (check && r == CUDA_SUCCESS)
        for (size_t i = 0; i < width * height; i++)
            bad += host[i] != (unsigned char)value;
    free(host);
    if (check) {
        report(r, "check", "name=%s ok=%d mismatches=%zu", b->name, r == CUDA_SUCCESS && !bad, bad);
        if (bad)
            failures++;
    } else
        report(r, "write", "name=%s bytes=%zu", b->name, width * height);
}

/* The fill kernel over [offset, offset + len) of the buffer. */
static void step_fill(struct buffer *b, size_t offset, size_t len, int value, const char *step)
{
    CUdeviceptr at = b->ptr + (offset < b->size ? offset : b->size);
    if (len > b->size - (at - b->ptr))
        len = b->size - (at - b->ptr);
    void *params[] = {&at, &len, &value};
    CUresult r = api.cuLaunchKernel(fill_fn, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL);
    report(r, step, "name=%s value=%d bytes=%zu", b->name, value, len);
}

static void step_prefetch(struct buffer *b, bool to_host)
{
    CUmemLocation loc = {to_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE,
                         to_host ? 0 : device};
    CUresult r = api.cuMemPrefetchAsync(b->ptr, b->size, loc, 0, stream);
    report(r, to_host ? "prefetch-host" : "prefetch", "name=%s size=%zu", b->name, b->size);
}

/* ---- steps: work and synchronization ------------------------------------------------------- */

static CUresult launch_sleep(unsigned int us, bool ex)
{
    if (us == 0)
        us = 1;
    if (ex) {
        CUlaunchConfig cfg = {us, 1, 1, 1, 1, 1, 0, stream, NULL, 0};
        return api.cuLaunchKernelEx(&cfg, sleep_fn, NULL, NULL);
    }
    return api.cuLaunchKernel(sleep_fn, us, 1, 1, 1, 1, 1, 0, stream, NULL, NULL);
}

static void count_host_func(void *arg)
{
    (void)arg;
    atomic_fetch_add(&host_func_runs, 1);
}

/* ---- steps: the other kinds of submission ------------------------------------------------- */

/* Device-to-device copies of the smaller of two buffers, one per copy entry point. */
static void step_copy(const char *step, struct buffer *dst, struct buffer *src)
{
    size_t n = dst->size < src->size ? dst->size : src->size;
    CUresult r;
    if (strcmp(step, "copy-async") == 0)
        r = api.cuMemcpyDtoDAsync(dst->ptr, src->ptr, n, stream);
    else if (strcmp(step, "copy-peer") == 0)
        r = api.cuMemcpyPeer(dst->ptr, dst->ctx, src->ptr, src->ctx, n);
    else if (strcmp(step, "copy-dtod") == 0)
        r = api.cuMemcpyDtoD(dst->ptr, src->ptr, n);
    else if (strcmp(step, "copy-2d") == 0) {
        CUDA_MEMCPY2D c = {0};
        c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = src->ptr, c.srcPitch = n / 2;
        c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = dst->ptr, c.dstPitch = n / 2;
        c.WidthInBytes = n / 2, c.Height = 2;
        r = api.cuMemcpy2D(&c);
    } else if (strcmp(step, "copy-3d") == 0) {
        CUDA_MEMCPY3D c = {0};
        c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = src->ptr, c.srcPitch = n / 4;
        c.srcHeight = 2;
        c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = dst->ptr, c.dstPitch = n / 4;
        c.dstHeight = 2;
        c.WidthInBytes = n / 4, c.Height = 2, c.Depth = 2;
        r = api.cuMemcpy3D(&c);
    } else {
        /* No attributes: the fake ignores them (a real driver wants at least one). */
        CUdeviceptr dsts[] = {dst->ptr}, srcs[] = {src->ptr};
        size_t sizes[] = {n};
        r = api.cuMemcpyBatchAsync(dsts, srcs, sizes, 1, NULL, NULL, 0, stream);
    }
    report(r, step, "dst=%s src=%s bytes=%zu", dst->name, src->name, n);
}

/* Batched prefetch/discard of one managed buffer to this device. */
static void step_batch(const char *step, struct buffer *b)
{
    CUdeviceptr dptrs[] = {b->ptr};
    size_t sizes[] = {b->size}, loc_idx[] = {0};
    CUmemLocation locs[] = {{CU_MEM_LOCATION_TYPE_DEVICE, device}};
    CUresult r;
    if (strcmp(step, "prefetch-batch") == 0)
        r = api.cuMemPrefetchBatchAsync(dptrs, sizes, 1, locs, loc_idx, 1, 0, stream);
    else if (strcmp(step, "discard") == 0)
        r = api.cuMemDiscardBatchAsync(dptrs, sizes, 1, 0, stream);
    else
        r = api.cuMemDiscardAndPrefetchBatchAsync(dptrs, sizes, 1, locs, loc_idx, 1, 0, stream);
    report(r, step, "name=%s size=%zu", b->name, b->size);
}

static void count_stream_callback(CUstream s, CUresult status, void *arg)
{
    (void)s;
    (void)status;
    count_host_func(arg);
}

static void step_write_async(struct buffer *b, int value)
{
    /* Never freed: the copy reads it when the device gets to it, after this step returns. */
    unsigned char *host = malloc(b->size);
    if (!host)
        die_usage("out of host memory");
    memset(host, value, b->size);
    report(api.cuMemcpyHtoDAsync(b->ptr, host, b->size, stream), "write-async", "name=%s bytes=%zu",
           b->name, b->size);
}

/* The fake queues both without reading their parameter blocks (opaque to the stand-in too). */
static void step_opaque_batch(const char *step)
{
    static unsigned char block[256];
    CUresult r;
    if (strcmp(step, "decompress") == 0) {
        size_t error_index = 0;
        r = api.cuMemBatchDecompressAsync((CUmemDecompressParams *)(void *)block, 1, 0,
                                          &error_index, stream);
    } else
        r = api.cuMemMapArrayAsync((CUarrayMapInfo *)(void *)block, 1, stream);
    report(r, step, NULL);
}

/* Captures on a stream of its own, as frameworks do (the legacy stream cannot capture). */
/* A host function that holds the stream until a file appears: asynchrony the test controls. */
static void block_until_file(void *arg)
{
    struct stat st;
    for (int i = 0; i < WAIT_FILE_TIMEOUT_S * 100 && stat((const char *)arg, &st) != 0; i++)
        usleep(10000);
}

static void *sync_thread_main(void *arg)
{
    CUresult *r = arg;
    *r = api.cuCtxSetCurrent(context);
    if (*r == CUDA_SUCCESS)
        *r = api.cuCtxSynchronize();
    return NULL;
}

static void step_sync_other_thread(void)
{
    pthread_t t;
    CUresult r = CUDA_ERROR_UNKNOWN;
    if (pthread_create(&t, NULL, sync_thread_main, &r) != 0)
        die_usage("cannot start a thread");
    pthread_join(t, NULL);
    report(r, "sync-other-thread", NULL);
}

static void step_capture_graph(int n, unsigned int us)
{
    static CUstream capture_stream;
    CUgraph graph = NULL;
    CUresult r = capture_stream ? CUDA_SUCCESS : api.cuStreamCreate(&capture_stream, 0);
    CUstream saved = stream;
    stream = capture_stream;
    if (r == CUDA_SUCCESS)
        r = api.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
    for (int i = 0; i < n && r == CUDA_SUCCESS; i++)
        r = launch_sleep(us, false);
    CUresult end = api.cuStreamEndCapture(stream, &graph);
    stream = saved;
    if (r == CUDA_SUCCESS)
        r = end;
    if (r == CUDA_SUCCESS)
        r = api.cuGraphInstantiateWithFlags(&graph_exec, graph, 0);
    if (graph)
        api.cuGraphDestroy(graph);
    report(r, "capture-graph", "launches=%d", n);
}

struct thread_job {
    CUcontext ctx; /* the current one when the thread was started */
    int launches;
    unsigned int us;
    int failures;
};

static void *thread_main(void *arg)
{
    struct thread_job *job = arg;
    if (api.cuCtxSetCurrent(job->ctx) != CUDA_SUCCESS)
        job->failures++;
    for (int i = 0; i < job->launches; i++)
        if (api.cuLaunchKernel(sleep_fn, job->us, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) !=
            CUDA_SUCCESS)
            job->failures++;
    if (api.cuStreamSynchronize(NULL) != CUDA_SUCCESS)
        job->failures++;
    return NULL;
}

static void step_threads(int n, int launches, unsigned int us)
{
    pthread_t tids[256];
    struct thread_job jobs[256];
    if (n < 1 || n > 256)
        die_usage("threads takes 1 to 256 threads");
    for (int i = 0; i < n; i++) {
        jobs[i] = (struct thread_job){context, launches, us ? us : 1, 0};
        if (pthread_create(&tids[i], NULL, thread_main, &jobs[i]) != 0)
            die_usage("cannot start a thread");
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(tids[i], NULL);
        bad += jobs[i].failures;
    }
    report(bad ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS, "threads", "threads=%d launches=%d failed=%d",
           n, n * launches, bad);
}

/* One thread launching in the background on the current device while the steps go on. */
static pthread_t background;
static struct thread_job background_job;
static bool background_running;

static void step_thread_start(int launches, unsigned int us)
{
    if (background_running)
        die_usage("thread-start: one background thread at a time (thread-join first)");
    background_job = (struct thread_job){context, launches, us ? us : 1, 0};
    if (pthread_create(&background, NULL, thread_main, &background_job) != 0)
        die_usage("cannot start a thread");
    background_running = true;
    report(CUDA_SUCCESS, "thread-start", "launches=%d", launches);
}

static void step_thread_join(void)
{
    if (!background_running)
        die_usage("thread-join: no background thread");
    pthread_join(background, NULL);
    background_running = false;
    report(background_job.failures ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS, "thread-join",
           "failed=%d", background_job.failures);
}

static void step_get_proc(const char *name, int version, unsigned long long flags)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    CUresult (*get)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        h ? (__typeof__(get))dlsym(h, "cuGetProcAddress_v2") : NULL;
    if (!get)
        die_usage("libcuda.so.1 or its cuGetProcAddress_v2 cannot be found");
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult status = 99;
    CUresult r = get(name, &fn, version, flags, &status);
    Dl_info info;
    const char *where = fn && dladdr(fn, &info) && info.dli_sname ? info.dli_sname : "-";
    const char *object = fn && dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "-";
    /* Not a failure of the program: the caller examines the answer. */
    say("get-proc symbol=%s version=%d flags=%llu status=%d found=%d function=%s object=%s "
        "result=%d error=%s",
        name, version, flags, (int)status, fn != NULL, where, object, (int)r, error_name(r));
}

static void wait_for_file(const char *path)
{
    struct stat st;
    for (int i = 0; i < WAIT_FILE_TIMEOUT_S * 100; i++) {
        if (stat(path, &st) == 0) {
            say("wait-file path=%s ok=1", path);
            return;
        }
        usleep(10000);
    }
    say("wait-file path=%s ok=0", path);
    failures++;
}

static void touch_file(const char *path)
{
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
    say("touch-file path=%s ok=%d", path, f != NULL);
}

/* As a program does around cudaDeviceReset: the primary context's state goes (buffers made
 * before must not be used after), and the next use retains it again. */
static void step_primary_reset(void)
{
    CUresult r = api.cuDevicePrimaryCtxReset(device);
    if (r == CUDA_SUCCESS)
        r = api.cuDevicePrimaryCtxRetain(&context, device);
    if (r == CUDA_SUCCESS)
        r = api.cuCtxSetCurrent(context);
    report(r, "primary-reset", "ctx=%p", (void *)context);
}

/* ---- the step interpreter ------------------------------------------------------------------ */

static int run_steps(int i, int argc, char **argv, bool in_child);

/* Runs one step starting at argv[*i]; returns false at "end" (close of a fork block). */
static unsigned long long monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (unsigned long long)now.tv_sec * 1000000000ull + (unsigned long long)now.tv_nsec;
}

/* A program that works at a steady pace (a notebook's cell every few seconds) whatever each
 * stretch of work took: the ticks count from the first call, and a tick already past is
 * skipped rather than made up. */
static void sleep_to_next_tick(unsigned long long ms)
{
    static unsigned long long first;
    unsigned long long now = monotonic_ns(), period = (ms ? ms : 1) * 1000000ull;
    if (!first)
        first = now;
    unsigned long long next = first + ((now - first) / period + 1) * period;
    struct timespec wait = {(time_t)((next - now) / 1000000000ull),
                            (long)((next - now) % 1000000000ull)};
    nanosleep(&wait, NULL);
    say("every-ms ms=%llu", ms);
}

static bool run_step(int *i, int argc, char **argv)
{
    const char *step = argv[(*i)++];
#define ARG() next_arg(i, argc, argv, step)
    if (strcmp(step, "end") == 0)
        return false;
    if (strcmp(step, "init") == 0)
        step_init();
    else if (!strcmp(step, "alloc") || !strcmp(step, "alloc-managed") ||
             !strcmp(step, "alloc-async") || !strcmp(step, "alloc-pool")) {
        const char *name = ARG();
        step_alloc(step, name, parse_size(ARG()));
    } else if (strcmp(step, "alloc-pitch") == 0) {
        const char *name = ARG();
        size_t w = parse_size(ARG());
        step_alloc_pitch(name, w, parse_size(ARG()));
    } else if (strcmp(step, "vmm-alloc") == 0) {
        const char *name = ARG();
        step_vmm_alloc(name, parse_size(ARG()));
    } else if (strcmp(step, "free") == 0)
        free_buffer(find_buffer(ARG()));
    else if (strcmp(step, "free-all") == 0) {
        for (int b = 0; b < MAX_BUFFERS; b++)
            if (buffers[b].ptr)
                free_buffer(&buffers[b]);
    } else if (strcmp(step, "attr") == 0)
        step_attr(find_buffer(ARG()));
    else if (strcmp(step, "range") == 0)
        step_range(find_buffer(ARG()));
    else if (strcmp(step, "mem-info") == 0)
        step_mem_info();
    else if (strcmp(step, "total-mem") == 0)
        step_total_mem();
    else if (strcmp(step, "write") == 0 || strcmp(step, "check") == 0) {
        struct buffer *b = find_buffer(ARG());
        step_write_check(b, (int)strtol(ARG(), NULL, 0), step[0] == 'c');
    } else if (strcmp(step, "touch") == 0) {
        struct buffer *b = find_buffer(ARG());
        int v = (int)strtol(ARG(), NULL, 0);
        memset((void *)(uintptr_t)b->ptr, v, b->size);
        say("touch name=%s bytes=%zu", b->name, b->size);
    } else if (strcmp(step, "fill") == 0) {
        struct buffer *b = find_buffer(ARG());
        step_fill(b, 0, b->size, (int)strtol(ARG(), NULL, 0), "fill");
    } else if (strcmp(step, "fill-part") == 0) {
        struct buffer *b = find_buffer(ARG());
        size_t offset = parse_size(ARG());
        size_t len = parse_size(ARG());
        step_fill(b, offset, len, (int)strtol(ARG(), NULL, 0), "fill-part");
    } else if (strcmp(step, "memset") == 0) {
        struct buffer *b = find_buffer(ARG());
        unsigned char v = (unsigned char)strtol(ARG(), NULL, 0);
        report(api.cuMemsetD8(b->ptr, v, b->size), "memset", "name=%s", b->name);
    } else if (strcmp(step, "memset-async") == 0) {
        struct buffer *b = find_buffer(ARG());
        unsigned int v = (unsigned int)strtoul(ARG(), NULL, 0);
        report(api.cuMemsetD32Async(b->ptr, v, b->size / 4, stream), "memset-async", "name=%s",
               b->name);
    } else if (strcmp(step, "prefetch") == 0 || strcmp(step, "prefetch-host") == 0)
        step_prefetch(find_buffer(ARG()), strcmp(step, "prefetch-host") == 0);
    else if (strcmp(step, "launch") == 0 || strcmp(step, "launch-ex") == 0) {
        unsigned int us = (unsigned int)parse_size(ARG());
        report(launch_sleep(us, step[6] == '-'), step, "us=%u", us);
    } else if (strcmp(step, "launches") == 0) {
        int n = (int)parse_size(ARG());
        unsigned int us = (unsigned int)parse_size(ARG());
        CUresult r = CUDA_SUCCESS;
        for (int k = 0; k < n && r == CUDA_SUCCESS; k++)
            r = launch_sleep(us, false);
        report(r, "launches", "n=%d us=%u", n, us);
    } else if (strcmp(step, "coop-launch") == 0) {
        unsigned int us = (unsigned int)parse_size(ARG());
        report(api.cuLaunchCooperativeKernel(sleep_fn, us ? us : 1, 1, 1, 1, 1, 1, 0, stream,
                                             NULL),
               step, "us=%u", us);
    } else if (strcmp(step, "launch-grid") == 0 || strcmp(step, "launch-grid-async") == 0) {
        int us = (int)parse_size(ARG());
        us = us ? us : 1;
        report(step[11] ? api.cuLaunchGridAsync(sleep_fn, us, 1, stream)
                        : api.cuLaunchGrid(sleep_fn, us, 1),
               step, "us=%d", us);
    } else if (strcmp(step, "launch-plain") == 0)
        report(api.cuLaunch(sleep_fn), step, NULL);
    else if (strcmp(step, "stream-callback") == 0)
        report(api.cuStreamAddCallback(stream, count_stream_callback, NULL, 0), step, "runs=%d",
               atomic_load(&host_func_runs));
    else if (strcmp(step, "write-async") == 0) {
        struct buffer *b = find_buffer(ARG());
        step_write_async(b, (int)strtol(ARG(), NULL, 0));
    } else if (strcmp(step, "memset-2d") == 0) {
        struct buffer *b = find_buffer(ARG());
        unsigned char v = (unsigned char)strtol(ARG(), NULL, 0);
        report(api.cuMemsetD2D8(b->ptr, b->size / 2, v, b->size / 2, 2), step, "name=%s",
               b->name);
    } else if (!strcmp(step, "copy-async") || !strcmp(step, "copy-peer") ||
               !strcmp(step, "copy-dtod") ||
               !strcmp(step, "copy-2d") || !strcmp(step, "copy-3d") ||
               !strcmp(step, "copy-batch")) {
        struct buffer *dst = find_buffer(ARG());
        step_copy(step, dst, find_buffer(ARG()));
    } else if (!strcmp(step, "prefetch-batch") || !strcmp(step, "discard") ||
               !strcmp(step, "discard-prefetch"))
        step_batch(step, find_buffer(ARG()));
    else if (!strcmp(step, "decompress") || !strcmp(step, "map-array")) {
        step_opaque_batch(step);
    } else if (strcmp(step, "host-func") == 0)
        report(api.cuLaunchHostFunc(stream, count_host_func, NULL), "host-func", "runs=%d",
               atomic_load(&host_func_runs));
    else if (strcmp(step, "block-until") == 0) {
        char *path = strdup(ARG());
        report(api.cuLaunchHostFunc(stream, block_until_file, path), "block-until", "path=%s",
               path);
    } else if (strcmp(step, "sync-other-thread") == 0)
        step_sync_other_thread();
    else if (strcmp(step, "sync") == 0)
        report(api.cuCtxSynchronize(), "sync", "host_func_runs=%d", atomic_load(&host_func_runs));
    else if (strcmp(step, "stream-new") == 0) {
        if (stream_count == 16)
            die_usage("at most 16 streams");
        CUresult r = api.cuStreamCreate(&streams[stream_count], CU_STREAM_NON_BLOCKING);
        stream = streams[stream_count++];
        report(r, "stream-new", "index=%d", stream_count);
    } else if (strcmp(step, "stream-use") == 0) {
        int n = (int)parse_size(ARG());
        if (n < 1 || n > stream_count)
            die_usage("stream-use takes the number of a stream made with stream-new");
        stream = streams[n - 1];
        say("stream-use index=%d", n);
    }
    else if (strcmp(step, "stream-default") == 0) {
        stream = NULL;
        say("stream-default");
    } else if (strcmp(step, "stream-sync") == 0)
        report(api.cuStreamSynchronize(stream), "stream-sync", NULL);
    else if (strcmp(step, "stream-query") == 0) {
        CUresult r = api.cuStreamQuery(stream);
        say("stream-query ready=%d result=%d error=%s", r == CUDA_SUCCESS, (int)r, error_name(r));
    } else if (strcmp(step, "event-record") == 0) {
        CUresult r = event ? CUDA_SUCCESS : api.cuEventCreate(&event, 0);
        report(r == CUDA_SUCCESS ? api.cuEventRecord(event, stream) : r, "event-record", NULL);
    } else if (strcmp(step, "event-sync") == 0)
        report(api.cuEventSynchronize(event), "event-sync", NULL);
    else if (strcmp(step, "event-query") == 0) {
        CUresult r = api.cuEventQuery(event);
        say("event-query ready=%d result=%d error=%s", r == CUDA_SUCCESS, (int)r, error_name(r));
    } else if (strcmp(step, "capture-begin") == 0)
        report(api.cuStreamBeginCapture(stream, parse_mode(ARG())), "capture-begin", NULL);
    else if (strcmp(step, "capture-end") == 0) {
        CUgraph graph = NULL;
        CUresult r = api.cuStreamEndCapture(stream, &graph);
        if (r == CUDA_SUCCESS) {
            if (graph_exec)
                api.cuGraphExecDestroy(graph_exec);
            r = api.cuGraphInstantiateWithFlags(&graph_exec, graph, 0);
            api.cuGraphDestroy(graph);
        }
        report(r, "capture-end", "graph=%d", graph != NULL);
    } else if (strcmp(step, "is-capturing") == 0) {
        CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
        CUresult r = api.cuStreamIsCapturing(stream, &st);
        report(r, "is-capturing", "status=%d", (int)st);
    } else if (strcmp(step, "capture-mode") == 0) {
        CUstreamCaptureMode m = parse_mode(ARG());
        report(api.cuThreadExchangeStreamCaptureMode(&m), "capture-mode", "previous=%d", (int)m);
    } else if (strcmp(step, "capture-graph") == 0) {
        int n = (int)parse_size(ARG());
        step_capture_graph(n, (unsigned int)parse_size(ARG()));
    } else if (strcmp(step, "graph-launch") == 0)
        report(api.cuGraphLaunch(graph_exec, stream), "graph-launch", NULL);
    else if (strcmp(step, "device") == 0)
        step_device((int)parse_size(ARG()));
    else if (strcmp(step, "ctx-create") == 0) {
        CUcontext created = NULL;
        CUresult r = api.cuCtxCreate(&created, 0, device);
        report(r, "ctx-create", "ctx=%p", (void *)created);
    } else if (strcmp(step, "ctx-primary") == 0)
        report(api.cuCtxSetCurrent(context), "ctx-primary", "ctx=%p", (void *)context);
    else if (strcmp(step, "primary-reset") == 0)
        step_primary_reset();
    else if (strcmp(step, "primary-release") == 0)
        report(api.cuDevicePrimaryCtxRelease(device), "primary-release", "ctx=%p",
               (void *)context);
    else if (strcmp(step, "vmm-release") == 0) {
        struct buffer *b = find_buffer(ARG());
        report(api.cuMemRelease(b->handle), "vmm-release", "name=%s", b->name);
        b->handle = 0;
    }
    else if (strcmp(step, "thread-start") == 0) {
        int launches = (int)parse_size(ARG());
        step_thread_start(launches, (unsigned int)parse_size(ARG()));
    } else if (strcmp(step, "thread-join") == 0)
        step_thread_join();
    else if (strcmp(step, "threads") == 0) {
        int n = (int)parse_size(ARG());
        int launches = (int)parse_size(ARG());
        step_threads(n, launches, (unsigned int)parse_size(ARG()));
    } else if (strcmp(step, "fork") == 0) {
        fflush(stdout);
        pid_t child = fork();
        if (child < 0)
            die_usage("fork failed");
        if (child == 0)
            _exit(run_steps(*i, argc, argv, true));
        /* The parent skips the child's steps. */
        int depth = 1;
        while (*i < argc && depth) {
            if (strcmp(argv[*i], "fork") == 0)
                depth++;
            else if (strcmp(argv[*i], "end") == 0)
                depth--;
            (*i)++;
        }
        int status = 0;
        waitpid(child, &status, 0);
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        say("fork child=%d status=%d", (int)child, code);
        if (code)
            failures++;
    } else if (strcmp(step, "get-proc") == 0) {
        const char *name = ARG();
        int version = (int)parse_size(ARG());
        step_get_proc(name, version, (unsigned long long)parse_size(ARG()));
    } else if (strcmp(step, "sleep-ms") == 0) {
        unsigned long ms = (unsigned long)parse_size(ARG());
        usleep((useconds_t)(ms * 1000));
        say("sleep-ms ms=%lu", ms);
    } else if (strcmp(step, "wait-file") == 0)
        wait_for_file(ARG());
    else if (strcmp(step, "touch-file") == 0)
        touch_file(ARG());
    else if (strcmp(step, "pid") == 0)
        say("pid pid=%d", (int)getpid());
    else if (strcmp(step, "clock") == 0)
        say("clock ns=%llu", monotonic_ns());
    else if (strcmp(step, "every-ms") == 0)
        sleep_to_next_tick(parse_size(ARG()));
    else if (strcmp(step, "exit") == 0)
        exit(atoi(ARG()));
    else if (standin_nvml_arity(step) >= 0) {
        const char *args[2] = {NULL, NULL};
        for (int k = 0; k < standin_nvml_arity(step); k++)
            args[k] = ARG();
        if (!standin_nvml_run(step, args))
            failures++;
    }
    else {
        char msg[96];
        snprintf(msg, sizeof msg, "unknown step '%s'", step);
        die_usage(msg);
    }
#undef ARG
    return true;
}

static int run_steps(int i, int argc, char **argv, bool in_child)
{
    while (i < argc)
        if (!run_step(&i, argc, argv) && in_child)
            break;
    fflush(stdout);
    return failures ? 3 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        } else if (strcmp(argv[i], "--ptsz") == 0)
            per_thread = true;
        else if (strcmp(argv[i], "--resolve") == 0 && i + 1 < argc)
            resolve_mode = argv[++i];
        else
            die_usage("unknown option");
    }
    if (!standin_resolve(&api, resolve_mode, per_thread))
        return 2;
    return run_steps(i, argc, argv, false);
}
