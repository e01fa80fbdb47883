/* The ALLOC, FREE and INFO hooks: conversion to managed memory, the single-process limit and the
 * scheduler's limit, and frees deferred to their stream (see README.md for what each allocation
 * API becomes); and the hooks that end a context, whose allocations end with it. records.c
 * keeps the records and sums; vmm.c the VMM hooks; migrate.c moves the memory, from a copy of
 * the records. */
#include "memory/memory.h"

#include <pthread.h>
#include <stdlib.h>

#include "base/config.h"
#include "base/log.h"
#include "cuda/impl.h"
#include "gate/capture.h"
#include "gate/contexts.h"
#include "gate/registration.h"
#include "gate/wake.h"
#include "memory/migrate.h"
#include "memory/records.h"

/* Deferred frees are done in batches: freeing managed memory may synchronize the device. */
#define GS_DEFERRED_BATCH 64
#define GS_DEFERRED_BATCH_BYTES (256ull << 20)
#define GS_PITCH_ALIGNMENT 512

/* Converted allocations freed with cuMemFreeAsync, waiting for their free event; under the
 * records' lock. */
static struct gs_deferred_frees {
    struct gs_alloc *list;
    int count;
    uint64_t bytes;
} gs_deferred;

/* Held across a reap (before the records' lock), so that a refusal for lack of memory waits for
 * a reap in progress on another thread instead of missing the memory it frees. */
static pthread_mutex_t gs_reap_mu = PTHREAD_MUTEX_INITIALIZER;

/* The current context and its device; false when there is none (the driver call that follows
 * will report the error itself). */
static bool gs_current(CUcontext *ctx, int *device)
{
    CUdevice dev = -1;
    *ctx = NULL;
    if (GS_REAL(cuCtxGetCurrent, GS_LEGACY)(ctx) != CUDA_SUCCESS || *ctx == NULL ||
        GS_REAL(cuCtxGetDevice, GS_LEGACY)(&dev) != CUDA_SUCCESS)
        return false;
    *device = dev;
    gs_contexts_note(*ctx, dev);
    return true;
}

/* Frees deferred allocations whose event completed (every one when wait). The client thread
 * (from_client) holds captures off itself and enters each allocation's context, having none of
 * its own; what it cannot enter is left to the program's next call. */
static void gs_reap_deferred(bool wait, bool from_client)
{
    /* Querying events and freeing managed memory may synchronize: never while a graph capture
     * runs (it would invalidate it); the frees wait until the capture ends. */
    if (!from_client && gs_capture_active())
        return;
    pthread_mutex_lock(&gs_reap_mu);
    gs_records_lock();
    struct gs_alloc *list = gs_deferred.list, *keep = NULL, *done = NULL;
    gs_deferred.list = NULL;
    gs_deferred.count = 0;
    gs_deferred.bytes = 0;
    gs_records_unlock();

    while (list) {
        struct gs_alloc *a = list;
        list = a->next;
        CUresult r = wait ? GS_REAL(cuEventSynchronize, GS_LEGACY)(a->free_after)
                          : GS_REAL(cuEventQuery, GS_LEGACY)(a->free_after);
        if (r == CUDA_ERROR_NOT_READY ||
            (from_client && (a->ctx == NULL || !gs_contexts_enter(a->ctx, NULL, NULL)))) {
            a->next = keep;
            keep = a;
            continue;
        }
        GS_REAL(cuEventDestroy_v2, GS_LEGACY)(a->free_after);
        r = GS_REAL(cuMemFree_v2, GS_LEGACY)((CUdeviceptr)a->key);
        if (from_client)
            gs_contexts_leave();
        if (r != CUDA_SUCCESS)
            gs_debug("deferred free of %#llx failed (error %d)", (unsigned long long)a->key, r);
        a->next = done;
        done = a;
    }

    gs_records_lock();
    while (keep) {
        struct gs_alloc *a = keep;
        keep = a->next;
        a->next = gs_deferred.list;
        gs_deferred.list = a;
        gs_deferred.count++;
        gs_deferred.bytes += a->size;
    }
    while (done) {
        struct gs_alloc *a = done;
        done = a->next;
        gs_records_count(a->device, -(int64_t)a->size, a->kind);
        free(a);
    }
    gs_records_unlock();
    pthread_mutex_unlock(&gs_reap_mu);
}

bool gs_memory_deferred_pending(void)
{
    gs_records_lock();
    bool pending = gs_deferred.list != NULL;
    gs_records_unlock();
    return pending;
}

void gs_memory_reap(void)
{
    gs_reap_deferred(false, true);
}

/* Says once per process on stderr (`said` is the flag of one reason) why the program sees an
 * out-of-memory error on a GPU that may be free: its own error would not name gemshare. */
static void gs_warn_refused_once(atomic_int *said, const char *why)
{
    if (!atomic_exchange(said, 1))
        gs_warn("an allocation was refused with CUDA_ERROR_OUT_OF_MEMORY: %s", why);
}

/* What counts against the limit on a device where this process holds `held` bytes: those and
 * what the others sharing its budget hold (saturating: a bad budget_used cannot wrap). */
static uint64_t gs_budget_taken(uint64_t held, struct gs_memory_limit terms)
{
    return held > UINT64_MAX - terms.budget_used ? UINT64_MAX : held + terms.budget_used;
}

/* Counts `size` bytes of `kind` on the device before the allocation is made, or refuses them:
 * past the scheduler's limit (every kind: what the reports count, with what the others of its
 * budget hold), or, for converted memory,
 * past the whole device for this one process. The program's own managed memory is left out of
 * that second sum: it may exceed the device natively, so it must not crowd out the rest. */
static CUresult gs_reserve(const char *api, int device, size_t size, enum gs_alloc_kind kind)
{
    if (size == 0 || device < 0 || device >= GS_MAX_DEVICES)
        return CUDA_SUCCESS; /* nothing to count: the driver answers */
    gs_registration_wait_first_attempt(); /* a limit sent at registration binds this allocation */
    uint64_t total = gs_records_device_total(device);
    bool whole_device = kind == GS_ALLOC_CONVERTED && !gs_config()->single_oversub && total > 0;
    for (int attempt = 0;; attempt++) {
        struct gs_memory_limit terms = gs_memory_limit();
        gs_records_lock();
        uint64_t held = gs_records_held(device);
        uint64_t own = held - gs_records_own_managed(device);
        uint64_t taken = gs_budget_taken(held, terms);
        bool over_limit = terms.limit > 0 && (size > terms.limit || taken > terms.limit - size);
        bool over_device = whole_device && (size > total || own > total - size);
        if (!over_limit && !over_device) {
            gs_records_count(device, (int64_t)size, kind);
            gs_records_unlock();
            return CUDA_SUCCESS;
        }
        gs_records_unlock();
        if (attempt == 0) {
            /* Memory freed with cuMemFreeAsync may be enough (also one another thread is
             * freeing right now: the reap waits for it). */
            gs_reap_deferred(true, false);
            continue;
        }
        static atomic_int said_limited, said_whole_device;
        if (over_limit) {
            gs_warn_refused_once(&said_limited,
                                 "the gemshare scheduler limits this program's memory per GPU "
                                 "(gemsharectl status shows the limit; GEMSHARE_DEBUG=1 names "
                                 "each refusal)");
            gs_debug("%s of %zu bytes refused with CUDA_ERROR_OUT_OF_MEMORY: the scheduler's "
                     "memory limit is %llu bytes per device and this process holds %llu bytes "
                     "on device %d, the others sharing its budget %llu",
                     api, size, (unsigned long long)terms.limit, (unsigned long long)held, device,
                     (unsigned long long)terms.budget_used);
        } else {
            gs_warn_refused_once(&said_whole_device,
                                 "gemshare keeps one process within its GPU's memory "
                                 "(GEMSHARE_ENABLE_SINGLE_OVERSUB=1 lets it hold more, paged "
                                 "to host memory; GEMSHARE_DEBUG=1 names each refusal)");
            gs_debug("%s of %zu bytes refused with CUDA_ERROR_OUT_OF_MEMORY: this process "
                     "already holds %llu of the %llu bytes of device %d, not counting its own "
                     "managed memory (GEMSHARE_ENABLE_SINGLE_OVERSUB=1 allows one process more "
                     "than the device)",
                     api, size, (unsigned long long)own, (unsigned long long)total, device);
        }
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
}

/* An allocation under way: where it goes and the bytes reserved for it. */
struct gs_pending {
    CUcontext ctx;
    int device;
    size_t reserved;
    enum gs_alloc_kind kind;
};

/* Before the driver allocates: the current context, the device (device_hint when >= 0, else the
 * context's), and `size` bytes reserved there (0: the size is not known yet, nothing limited). */
static CUresult gs_begin_alloc(const char *api, enum gs_alloc_kind kind, size_t size,
                               int device_hint, struct gs_pending *p)
{
    *p = (struct gs_pending){.device = -1, .kind = kind};
    gs_current(&p->ctx, &p->device);
    if (device_hint >= 0)
        p->device = device_hint;
    /* The scheduler's capacity where it has no NVML: in every report. */
    gs_records_device_total(p->device);
    CUresult r = gs_reserve(api, p->device, size, kind);
    if (r == CUDA_SUCCESS && p->device >= 0 && p->device < GS_MAX_DEVICES)
        p->reserved = size;
    return r;
}

/* After the driver answered r: the allocation at *key (a pointer or VMM handle), of `size` bytes
 * (which may differ from the reservation), recorded; or, when the driver failed, the reservation
 * given back. Returns r. */
static CUresult gs_end_alloc(const struct gs_pending *p, CUresult r, const unsigned long long *key,
                             size_t size)
{
    gs_records_lock();
    if (r == CUDA_SUCCESS) {
        if (size != p->reserved)
            gs_records_count(p->device, (int64_t)size - (int64_t)p->reserved, p->kind);
        gs_records_add(*key, size, p->ctx, p->device, p->kind, false);
    } else if (p->reserved > 0) {
        gs_records_count(p->device, -(int64_t)p->reserved, p->kind);
    }
    gs_records_unlock();
    return r;
}

/* A device allocation made managed. Without a context or with bad arguments the driver's own
 * answer comes back. */
static CUresult gs_alloc_converted(const char *api, CUdeviceptr *dptr, size_t size)
{
    struct gs_pending p;
    CUresult r = gs_begin_alloc(api, GS_ALLOC_CONVERTED, size, -1, &p);
    if (r == CUDA_SUCCESS)
        r = gs_end_alloc(
            &p, GS_REAL(cuMemAllocManaged, GS_LEGACY)(dptr, size, CU_MEM_ATTACH_GLOBAL), dptr,
            size);
    if (r == CUDA_SUCCESS)
        gs_migrate_populate(*dptr, size, p.device);
    return r;
}

static void gs_maybe_reap(void)
{
    gs_records_lock();
    bool due = gs_deferred.count >= GS_DEFERRED_BATCH ||
               gs_deferred.bytes >= GS_DEFERRED_BATCH_BYTES;
    gs_records_unlock();
    if (due)
        gs_reap_deferred(false, false);
}

CUresult gs_impl_cuMemAlloc_v2(enum gs_variant variant, CUdeviceptr *dptr, size_t bytesize)
{
    gs_maybe_reap();
    if (gs_config()->unified_memory)
        return gs_alloc_converted("cuMemAlloc", dptr, bytesize);
    struct gs_pending p;
    CUresult r = gs_begin_alloc("cuMemAlloc", GS_ALLOC_DEVICE, bytesize, -1, &p);
    if (r == CUDA_SUCCESS)
        r = gs_end_alloc(&p, GS_REAL(cuMemAlloc_v2, variant)(dptr, bytesize), dptr, bytesize);
    return r;
}

CUresult gs_impl_cuMemAllocPitch_v2(enum gs_variant variant, CUdeviceptr *dptr, size_t *pPitch,
                                    size_t WidthInBytes, size_t Height,
                                    unsigned int ElementSizeBytes)
{
    gs_maybe_reap();
    bool valid = dptr && pPitch && WidthInBytes > 0 && Height > 0 &&
                 (ElementSizeBytes == 4 || ElementSizeBytes == 8 || ElementSizeBytes == 16);
    size_t pitch =
        (WidthInBytes + GS_PITCH_ALIGNMENT - 1) / GS_PITCH_ALIGNMENT * GS_PITCH_ALIGNMENT;
    valid = valid && pitch >= WidthInBytes && Height <= SIZE_MAX / pitch;
    if (gs_config()->unified_memory && valid) {
        CUresult r = gs_alloc_converted("cuMemAllocPitch", dptr, pitch * Height);
        if (r == CUDA_SUCCESS)
            *pPitch = pitch;
        return r;
    }
    /* The driver picks the pitch: the limit is checked with ours (rows of 512 bytes, as drivers
     * pick them) and the count corrected to the driver's. Invalid arguments get its answer. */
    struct gs_pending p;
    CUresult r = gs_begin_alloc("cuMemAllocPitch", GS_ALLOC_DEVICE, valid ? pitch * Height : 0,
                                -1, &p);
    if (r != CUDA_SUCCESS)
        return r;
    r = GS_REAL(cuMemAllocPitch_v2, variant)(dptr, pPitch, WidthInBytes, Height,
                                             ElementSizeBytes);
    return gs_end_alloc(&p, r, dptr, r == CUDA_SUCCESS ? *pPitch * Height : 0);
}

CUresult gs_impl_cuMemAllocManaged(enum gs_variant variant, CUdeviceptr *dptr, size_t bytesize,
                                   unsigned int flags)
{
    /* The program chose managed memory itself, so it may exceed the device: counted, and held
     * to the scheduler's limit only. */
    struct gs_pending p;
    CUresult r = gs_begin_alloc("cuMemAllocManaged", GS_ALLOC_MANAGED, bytesize, -1, &p);
    if (r == CUDA_SUCCESS)
        r = gs_end_alloc(&p, GS_REAL(cuMemAllocManaged, variant)(dptr, bytesize, flags), dptr,
                         bytesize);
    return r;
}

CUresult gs_impl_cuMemAllocAsync(enum gs_variant variant, CUdeviceptr *dptr, size_t bytesize,
                                 CUstream hStream)
{
    gs_maybe_reap();
    /* Inside a graph capture the allocation becomes a graph memory node: leave it to the
     * driver (and count it like pool memory). */
    if (gs_config()->unified_memory && !gs_capture_stream_is_capturing(variant, hStream))
        return gs_alloc_converted("cuMemAllocAsync", dptr, bytesize);
    struct gs_pending p;
    CUresult r = gs_begin_alloc("cuMemAllocAsync", GS_ALLOC_POOL, bytesize, -1, &p);
    if (r == CUDA_SUCCESS)
        r = gs_end_alloc(&p, GS_REAL(cuMemAllocAsync, variant)(dptr, bytesize, hStream), dptr,
                         bytesize);
    return r;
}

CUresult gs_impl_cuMemAllocFromPoolAsync(enum gs_variant variant, CUdeviceptr *dptr,
                                         size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    /* An explicit pool has properties of its own (IPC export, location): kept as it is. */
    struct gs_pending p;
    CUresult r = gs_begin_alloc("cuMemAllocFromPoolAsync", GS_ALLOC_POOL, bytesize, -1, &p);
    if (r == CUDA_SUCCESS)
        r = gs_end_alloc(
            &p, GS_REAL(cuMemAllocFromPoolAsync, variant)(dptr, bytesize, pool, hStream), dptr,
            bytesize);
    return r;
}

CUresult gs_impl_cuMemCreate(enum gs_variant variant, CUmemGenericAllocationHandle *handle,
                             size_t size, const CUmemAllocationProp *prop,
                             unsigned long long flags)
{
    /* Physical memory for the virtual memory API cannot be managed: counted, not converted. */
    int device = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id
                                                                            : -1;
    struct gs_pending p;
    CUresult r = gs_begin_alloc("cuMemCreate", GS_ALLOC_VMM, size, device, &p);
    if (r == CUDA_SUCCESS)
        r = gs_end_alloc(&p, GS_REAL(cuMemCreate, variant)(handle, size, prop, flags), handle,
                         size);
    return r;
}

/* Unlinks the record before the driver frees, so that an address the driver hands out again at
 * once is never confused with the old one; relinks it if the free failed. */
static CUresult gs_free_counted(uint64_t key, CUresult (*free_it)(uint64_t key))
{
    gs_records_lock();
    struct gs_alloc **p = key ? gs_records_find(key, false) : NULL;
    struct gs_alloc *a = p ? *p : NULL;
    if (a)
        *p = a->next;
    gs_records_unlock();
    CUresult r = free_it(key);
    if (a) {
        gs_records_lock();
        if (r == CUDA_SUCCESS)
            gs_records_count(a->device, -(int64_t)a->size, a->kind);
        else
            gs_records_link(a);
        gs_records_unlock();
        if (r == CUDA_SUCCESS)
            free(a);
    }
    return r;
}

static CUresult gs_driver_mem_free(uint64_t key)
{
    return GS_REAL(cuMemFree_v2, GS_LEGACY)((CUdeviceptr)key);
}

CUresult gs_impl_cuMemFree_v2(enum gs_variant variant, CUdeviceptr dptr)
{
    (void)variant; /* no per-thread twin */
    CUresult r = gs_free_counted(dptr, gs_driver_mem_free);
    gs_maybe_reap();
    return r;
}

CUresult gs_impl_cuMemFreeAsync(enum gs_variant variant, CUdeviceptr dptr, CUstream hStream)
{
    gs_records_lock();
    struct gs_alloc **p = dptr ? gs_records_find(dptr, false) : NULL;
    struct gs_alloc *a = p ? *p : NULL;
    if (a) /* unlinked while we free it; still counted */
        *p = a->next;
    gs_records_unlock();

    if (a == NULL || a->kind != GS_ALLOC_CONVERTED) {
        CUresult r = GS_REAL(cuMemFreeAsync, variant)(dptr, hStream);
        gs_records_lock();
        if (a && r == CUDA_SUCCESS)
            gs_records_count(a->device, -(int64_t)a->size, a->kind);
        else if (a)
            gs_records_link(a); /* not freed after all */
        gs_records_unlock();
        if (r == CUDA_SUCCESS)
            free(a);
        return r;
    }

    /* Managed memory has no stream-ordered free: free it once the stream's work so far is done. */
    CUevent event = NULL;
    CUresult r = CUDA_SUCCESS;
    bool capturing = gs_capture_stream_is_capturing(variant, hStream);
    if (!capturing) {
        r = GS_REAL(cuEventCreate, GS_LEGACY)(&event, CU_EVENT_DISABLE_TIMING);
        if (r == CUDA_SUCCESS) {
            r = GS_REAL(cuEventRecord, variant)(event, hStream);
            if (r != CUDA_SUCCESS) {
                GS_REAL(cuEventDestroy_v2, GS_LEGACY)(event);
                event = NULL;
            }
        }
    }
    gs_records_lock();
    if (event) {
        if (gs_deferred.list == NULL)
            gs_wake(); /* its loop may sleep with nothing due: it reaps what is pending */
        a->free_after = event;
        a->next = gs_deferred.list;
        gs_deferred.list = a;
        gs_deferred.count++;
        gs_deferred.bytes += a->size;
    } else {
        /* In a capture the graph would free it on some later launch, which managed memory cannot
         * follow: it stays allocated and counted. Otherwise the stream was bad: nothing freed. */
        gs_records_link(a);
    }
    gs_records_unlock();
    if (capturing) {
        gs_debug("cuMemFreeAsync of managed %#llx inside a stream capture: kept allocated",
                 (unsigned long long)dptr);
        return CUDA_SUCCESS;
    }
    gs_maybe_reap();
    return r;
}

CUresult gs_impl_cuMemGetInfo_v2(enum gs_variant variant, size_t *free_bytes, size_t *total)
{
    gs_registration_wait_first_attempt(); /* a limit sent at registration is the answer's */
    CUresult r = GS_REAL(cuMemGetInfo_v2, variant)(free_bytes, total);
    CUcontext ctx;
    int device;
    if (r != CUDA_SUCCESS || free_bytes == NULL || total == NULL || !gs_current(&ctx, &device) ||
        device >= GS_MAX_DEVICES)
        return r;
    gs_records_note_device_total(device, (uint64_t)*total);
    gs_reap_deferred(false, false);
    struct gs_memory_limit terms = gs_memory_limit();
    uint64_t held = gs_memory_held(device);
    /* With Unified Memory the whole device is this process's while it holds the lock: what is
     * free is what it has not allocated, whatever other processes hold. */
    if (gs_config()->unified_memory)
        *free_bytes = held < *total ? *total - held : 0;
    /* Under a limit the device looks no larger than it, so that frameworks sizing their caches
     * from these numbers stay within it; what the others of the budget hold is not free. */
    if (terms.limit > 0) {
        uint64_t taken = gs_budget_taken(held, terms);
        uint64_t room = taken < terms.limit ? terms.limit - taken : 0;
        if (*total > terms.limit)
            *total = terms.limit;
        if (*free_bytes > room)
            *free_bytes = room;
    }
    return r;
}

CUresult gs_impl_cuDeviceTotalMem_v2(enum gs_variant variant, size_t *bytes, CUdevice dev)
{
    gs_registration_wait_first_attempt();
    CUresult r = GS_REAL(cuDeviceTotalMem_v2, variant)(bytes, dev);
    uint64_t limit = gs_memory_limit().limit;
    if (r == CUDA_SUCCESS && bytes != NULL && limit > 0 && *bytes > limit)
        *bytes = limit;
    return r;
}

/* The context was destroyed or reset: its allocations are gone. */
static void gs_forget_context(CUcontext ctx)
{
    gs_records_lock();
    for (struct gs_alloc *a = gs_records_take_context(ctx), *next; a; a = next) {
        next = a->next;
        free(a);
    }
    /* Deferred frees of that context died with it, events included. */
    struct gs_alloc **p = &gs_deferred.list;
    while (*p) {
        struct gs_alloc *a = *p;
        if (a->ctx == ctx) {
            *p = a->next;
            gs_deferred.count--;
            gs_deferred.bytes -= a->size;
            gs_records_count(a->device, -(int64_t)a->size, a->kind);
            free(a);
        } else {
            p = &a->next;
        }
    }
    gs_records_unlock();
}

/* The hooks that end a context: contexts.c makes the driver call and forgets the context, and
 * the records then forget what was allocated in it. */
#define GS_END_CONTEXT(end, real, handle)                                                        \
    CUcontext gone = NULL;                                                                       \
    CUresult r = end(real, handle, &gone);                                                       \
    if (gone)                                                                                    \
        gs_forget_context(gone);                                                                 \
    return r;

CUresult gs_impl_cuCtxDestroy_v2(enum gs_variant variant, CUcontext ctx)
{
    GS_END_CONTEXT(gs_contexts_destroy, GS_REAL(cuCtxDestroy_v2, variant), ctx)
}

CUresult gs_impl_cuDevicePrimaryCtxRelease(enum gs_variant variant, CUdevice dev)
{
    GS_END_CONTEXT(gs_contexts_primary_release, GS_REAL(cuDevicePrimaryCtxRelease, variant), dev)
}

CUresult gs_impl_cuDevicePrimaryCtxRelease_v2(enum gs_variant variant, CUdevice dev)
{
    GS_END_CONTEXT(gs_contexts_primary_release, GS_REAL(cuDevicePrimaryCtxRelease_v2, variant),
                   dev)
}

CUresult gs_impl_cuDevicePrimaryCtxReset(enum gs_variant variant, CUdevice dev)
{
    GS_END_CONTEXT(gs_contexts_primary_reset, GS_REAL(cuDevicePrimaryCtxReset, variant), dev)
}

CUresult gs_impl_cuDevicePrimaryCtxReset_v2(enum gs_variant variant, CUdevice dev)
{
    GS_END_CONTEXT(gs_contexts_primary_reset, GS_REAL(cuDevicePrimaryCtxReset_v2, variant), dev)
}

void gs_memory_after_fork_child(void)
{
    /* CUDA does not survive fork: the child starts with nothing allocated. The parent's records
     * are dropped, not freed (another thread may have been changing them). */
    pthread_mutex_init(&gs_reap_mu, NULL);
    gs_deferred = (struct gs_deferred_frees){0};
    gs_records_after_fork_child();
    gs_vmm_after_fork_child();
}
