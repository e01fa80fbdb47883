/* The ALLOC, FREE and INFO hooks: conversion to managed memory, the single-process limit and the
 * accounting (see README.md for what each allocation API becomes). A mutex guards the records:
 * allocation is not the hot path. migrate.c moves the memory, from a copy of the records. */
#include "memory.h"

#include <pthread.h>
#include <stdlib.h>

#include "capture.h"
#include "client.h"
#include "config.h"
#include "contexts.h"
#include "impl.h"
#include "log.h"
#include "migrate.h"

/* What an allocation is, and therefore how it must be freed and counted. */
enum gs_alloc_kind {
    GS_ALLOC_CONVERTED, /* cuMemAlloc/Pitch/Async turned into cuMemAllocManaged by us */
    GS_ALLOC_MANAGED,   /* the program's own cuMemAllocManaged */
    GS_ALLOC_DEVICE,    /* ordinary device memory (GEMSHARE_UNIFIED_MEMORY=0) */
    GS_ALLOC_POOL,      /* stream-ordered pool memory, or graph memory allocated in a capture */
    GS_ALLOC_VMM,       /* a cuMemCreate handle */
};

static const char *const gs_alloc_kind_names[] = {"managed (converted)", "managed", "device",
                                                  "pool", "VMM"};

struct gs_alloc {
    struct gs_alloc *next;
    uint64_t key; /* the device pointer, or the VMM handle */
    size_t size;
    CUcontext ctx;
    int device;
    enum gs_alloc_kind kind;
    CUevent free_after; /* cuMemFreeAsync of converted memory: free once this event completes */
    uint64_t stamp;     /* when it was allocated, by gs_alloc_clock: the order of bulk moves */
    /* VMM: the driver keeps the physical memory until the handle is released (refs: cuMemCreate
     * and cuMemRetainAllocationHandle less cuMemRelease) and every mapping of it is unmapped.
     * With refs at 0 the record is out of the table (the handle value is dead) and only its
     * mappings point to it. */
    int refs, maps;
};

/* A cuMemMap of a counted handle, keyed by its address; unmapping ends it. */
struct gs_vmm_map {
    struct gs_vmm_map *next;
    CUdeviceptr ptr;
    size_t size;
    struct gs_alloc *handle;
};

#define GS_BUCKETS 4096
/* Deferred frees are done in batches: freeing managed memory may synchronize the device. */
#define GS_DEFERRED_BATCH 64
#define GS_DEFERRED_BATCH_BYTES (256ull << 20)
#define GS_PITCH_ALIGNMENT 512

static pthread_mutex_t gs_mem_mu = PTHREAD_MUTEX_INITIALIZER;
/* Held across a reap (before gs_mem_mu), so that a refusal for lack of memory waits for a reap
 * in progress on another thread instead of missing the memory it frees. */
static pthread_mutex_t gs_reap_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gs_alloc *gs_buckets[GS_BUCKETS];
static uint64_t gs_allocated[GS_MAX_DEVICES];
/* The part of gs_allocated that is the program's own managed memory: reported, and held to the
 * scheduler's limit, but never to the device's size. */
static uint64_t gs_unlimited[GS_MAX_DEVICES];
static struct gs_vmm_map *gs_maps[GS_BUCKETS];
static bool gs_device_used[GS_MAX_DEVICES];
static bool gs_device_changed[GS_MAX_DEVICES];
static struct gs_alloc *gs_deferred; /* converted allocations waiting for their free event */
static int gs_deferred_count;
static uint64_t gs_deferred_bytes;
static _Atomic uint64_t gs_device_total[GS_MAX_DEVICES];
/* The scheduler's memory limit (LIMITS): bytes this process may hold on each device; 0: none.
 * Kept when the scheduler is lost, and in a forked child: the operator set it, and the next
 * registration replaces it. */
static _Atomic uint64_t gs_limit;
static atomic_int gs_mem_changed;
/* Counts allocations. "Recently used" is approximated by "recently allocated" (README.md): the
 * only use libnvs sees without a lookup on the submission fast path. */
static uint64_t gs_alloc_clock;

static size_t gs_bucket(uint64_t key, enum gs_alloc_kind kind)
{
    uint64_t h = (key ^ (kind == GS_ALLOC_VMM ? 0x9e3779b97f4a7c15ull : 0)) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 52) % GS_BUCKETS;
}

/* Under gs_mem_mu. */
static struct gs_alloc **gs_find(uint64_t key, bool vmm)
{
    struct gs_alloc **p = &gs_buckets[gs_bucket(key, vmm ? GS_ALLOC_VMM : GS_ALLOC_DEVICE)];
    for (; *p; p = &(*p)->next)
        if ((*p)->key == key && ((*p)->kind == GS_ALLOC_VMM) == vmm)
            return p;
    return NULL;
}

/* Under gs_mem_mu. */
static void gs_link(struct gs_alloc *a)
{
    size_t b = gs_bucket(a->key, a->kind);
    a->next = gs_buckets[b];
    gs_buckets[b] = a;
}

/* Under gs_mem_mu: count bytes of this kind in or out of a device and tell the client thread. */
static void gs_count(int device, int64_t delta, enum gs_alloc_kind kind)
{
    if (device < 0 || device >= GS_MAX_DEVICES)
        return;
    gs_allocated[device] += (uint64_t)delta;
    if (kind == GS_ALLOC_MANAGED)
        gs_unlimited[device] += (uint64_t)delta;
    gs_device_used[device] = true;
    gs_device_changed[device] = true;
    if (!atomic_exchange(&gs_mem_changed, 1))
        gs_client_wake();
}

/* Under gs_mem_mu. The bytes were counted already (reserved) unless `count`. */
static void gs_record(uint64_t key, size_t size, CUcontext ctx, int device,
                      enum gs_alloc_kind kind, bool count)
{
    struct gs_alloc *a = calloc(1, sizeof *a);
    if (a == NULL) {
        gs_warn("out of host memory for allocation records; %zu bytes at %#llx go uncounted",
                size, (unsigned long long)key);
        if (!count)
            gs_count(device, -(int64_t)size, kind);
        return;
    }
    *a = (struct gs_alloc){.key = key, .size = size, .ctx = ctx, .device = device, .kind = kind,
                           .stamp = ++gs_alloc_clock, .refs = 1};
    gs_link(a);
    if (count)
        gs_count(device, (int64_t)size, kind);
    gs_debug("%s: %zu bytes on device %d at %#llx (now %llu bytes there)",
             gs_alloc_kind_names[kind], size, device, (unsigned long long)key,
             device >= 0 && device < GS_MAX_DEVICES ? (unsigned long long)gs_allocated[device] : 0);
}

/* Under gs_mem_mu: unlink *p, uncount it, and hand it back to be freed. */
static struct gs_alloc *gs_unrecord(struct gs_alloc **p)
{
    struct gs_alloc *a = *p;
    *p = a->next;
    gs_count(a->device, -(int64_t)a->size, a->kind);
    return a;
}

static uint64_t gs_total_of(int device)
{
    if (device < 0 || device >= GS_MAX_DEVICES)
        return 0;
    uint64_t total = atomic_load(&gs_device_total[device]);
    size_t bytes = 0;
    if (total == 0 && GS_REAL(cuDeviceTotalMem_v2, GS_LEGACY)(&bytes, device) == CUDA_SUCCESS) {
        total = bytes;
        atomic_store(&gs_device_total[device], total);
    }
    return total;
}

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
    pthread_mutex_lock(&gs_mem_mu);
    struct gs_alloc *list = gs_deferred, *keep = NULL, *done = NULL;
    gs_deferred = NULL;
    gs_deferred_count = 0;
    gs_deferred_bytes = 0;
    pthread_mutex_unlock(&gs_mem_mu);

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

    pthread_mutex_lock(&gs_mem_mu);
    while (keep) {
        struct gs_alloc *a = keep;
        keep = a->next;
        a->next = gs_deferred;
        gs_deferred = a;
        gs_deferred_count++;
        gs_deferred_bytes += a->size;
    }
    while (done) {
        struct gs_alloc *a = done;
        done = a->next;
        gs_count(a->device, -(int64_t)a->size, a->kind);
        free(a);
    }
    pthread_mutex_unlock(&gs_mem_mu);
    pthread_mutex_unlock(&gs_reap_mu);
}

bool gs_memory_deferred_pending(void)
{
    pthread_mutex_lock(&gs_mem_mu);
    bool pending = gs_deferred != NULL;
    pthread_mutex_unlock(&gs_mem_mu);
    return pending;
}

void gs_memory_reap(void)
{
    gs_reap_deferred(false, true);
}

void gs_memory_set_limit(uint64_t bytes)
{
    uint64_t old = atomic_exchange(&gs_limit, bytes);
    if (old != bytes)
        gs_debug("memory limit per device: %llu bytes (was %llu; 0: none)",
                 (unsigned long long)bytes, (unsigned long long)old);
}

/* Says once on stderr why the program sees an out-of-memory error on a GPU that may be free. */
static void gs_warn_limited(void)
{
    static atomic_int warned;
    if (!atomic_exchange(&warned, 1))
        gs_warn("an allocation was refused with CUDA_ERROR_OUT_OF_MEMORY: the gemshare scheduler "
                "limits this program's memory per GPU (gemsharectl status shows the limit; "
                "GEMSHARE_DEBUG=1 names each refusal)");
}

/* Counts `size` bytes of `kind` on the device before the allocation is made, or refuses them:
 * past the scheduler's limit (every kind: what the reports count), or, for converted memory,
 * past the whole device for this one process. The program's own managed memory is left out of
 * that second sum: it may exceed the device natively, so it must not crowd out the rest. */
static CUresult gs_reserve(const char *api, int device, size_t size, enum gs_alloc_kind kind)
{
    if (size == 0 || device < 0 || device >= GS_MAX_DEVICES)
        return CUDA_SUCCESS; /* nothing to count: the driver answers */
    gs_client_wait_first_attempt(); /* a limit sent at registration binds this allocation */
    uint64_t total = gs_total_of(device);
    bool whole_device = kind == GS_ALLOC_CONVERTED && !gs_config()->single_oversub && total > 0;
    for (int attempt = 0;; attempt++) {
        pthread_mutex_lock(&gs_mem_mu);
        uint64_t limit = atomic_load(&gs_limit);
        uint64_t held = gs_allocated[device];
        uint64_t own = held - gs_unlimited[device];
        bool over_limit = limit > 0 && (size > limit || held > limit - size);
        bool over_device = whole_device && (size > total || own > total - size);
        if (!over_limit && !over_device) {
            gs_count(device, (int64_t)size, kind);
            pthread_mutex_unlock(&gs_mem_mu);
            return CUDA_SUCCESS;
        }
        pthread_mutex_unlock(&gs_mem_mu);
        if (attempt == 0) {
            /* Memory freed with cuMemFreeAsync may be enough (also one another thread is
             * freeing right now: the reap waits for it). */
            gs_reap_deferred(true, false);
            continue;
        }
        if (over_limit) {
            gs_warn_limited();
            gs_debug("%s of %zu bytes refused with CUDA_ERROR_OUT_OF_MEMORY: the scheduler's "
                     "memory limit is %llu bytes per device and this process holds %llu bytes "
                     "on device %d",
                     api, size, (unsigned long long)limit, (unsigned long long)held, device);
        } else {
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
    gs_total_of(p->device); /* the scheduler's capacity where it has no NVML: in every report */
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
    pthread_mutex_lock(&gs_mem_mu);
    if (r == CUDA_SUCCESS) {
        if (size != p->reserved)
            gs_count(p->device, (int64_t)size - (int64_t)p->reserved, p->kind);
        gs_record(*key, size, p->ctx, p->device, p->kind, false);
    } else if (p->reserved > 0) {
        gs_count(p->device, -(int64_t)p->reserved, p->kind);
    }
    pthread_mutex_unlock(&gs_mem_mu);
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
    pthread_mutex_lock(&gs_mem_mu);
    bool due = gs_deferred_count >= GS_DEFERRED_BATCH ||
               gs_deferred_bytes >= GS_DEFERRED_BATCH_BYTES;
    pthread_mutex_unlock(&gs_mem_mu);
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
    pthread_mutex_lock(&gs_mem_mu);
    struct gs_alloc **p = key ? gs_find(key, false) : NULL;
    struct gs_alloc *a = p ? *p : NULL;
    if (a)
        *p = a->next;
    pthread_mutex_unlock(&gs_mem_mu);
    CUresult r = free_it(key);
    if (a) {
        pthread_mutex_lock(&gs_mem_mu);
        if (r == CUDA_SUCCESS)
            gs_count(a->device, -(int64_t)a->size, a->kind);
        else
            gs_link(a);
        pthread_mutex_unlock(&gs_mem_mu);
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
    pthread_mutex_lock(&gs_mem_mu);
    struct gs_alloc **p = dptr ? gs_find(dptr, false) : NULL;
    struct gs_alloc *a = p ? *p : NULL;
    if (a) /* unlinked while we free it; still counted */
        *p = a->next;
    pthread_mutex_unlock(&gs_mem_mu);

    if (a == NULL || a->kind != GS_ALLOC_CONVERTED) {
        CUresult r = GS_REAL(cuMemFreeAsync, variant)(dptr, hStream);
        pthread_mutex_lock(&gs_mem_mu);
        if (a && r == CUDA_SUCCESS)
            gs_count(a->device, -(int64_t)a->size, a->kind);
        else if (a)
            gs_link(a); /* not freed after all */
        pthread_mutex_unlock(&gs_mem_mu);
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
    pthread_mutex_lock(&gs_mem_mu);
    if (event) {
        if (gs_deferred == NULL)
            gs_client_wake(); /* its loop may sleep with nothing due: it reaps what is pending */
        a->free_after = event;
        a->next = gs_deferred;
        gs_deferred = a;
        gs_deferred_count++;
        gs_deferred_bytes += a->size;
    } else {
        /* In a capture the graph would free it on some later launch, which managed memory cannot
         * follow: it stays allocated and counted. Otherwise the stream was bad: nothing freed. */
        gs_link(a);
    }
    pthread_mutex_unlock(&gs_mem_mu);
    if (capturing) {
        gs_debug("cuMemFreeAsync of managed %#llx inside a stream capture: kept allocated",
                 (unsigned long long)dptr);
        return CUDA_SUCCESS;
    }
    gs_maybe_reap();
    return r;
}

/* Under gs_mem_mu: a VMM handle's bytes stop counting once it is released and unmapped
 * everywhere, when the driver frees the physical memory. */
static void gs_vmm_maybe_end(struct gs_alloc *a)
{
    if (a->refs > 0 || a->maps > 0)
        return;
    gs_count(a->device, -(int64_t)a->size, a->kind);
    gs_debug("VMM: %zu bytes on device %d freed (released and unmapped)", a->size, a->device);
    free(a);
}

static size_t gs_map_bucket(CUdeviceptr ptr)
{
    return (size_t)((ptr * 0x9e3779b97f4a7c15ull) >> 52) % GS_BUCKETS;
}

CUresult gs_impl_cuMemRelease(enum gs_variant variant, CUmemGenericAllocationHandle handle)
{
    (void)variant; /* no per-thread twin */
    /* The last reference leaves the table before the driver call, so that a handle value the
     * driver hands out again at once is never confused with this one; refs stays 1 meanwhile,
     * so that an unmap in between does not end the record under us. */
    pthread_mutex_lock(&gs_mem_mu);
    struct gs_alloc **p = handle ? gs_find(handle, true) : NULL;
    struct gs_alloc *a = p ? *p : NULL;
    bool last = a && a->refs == 1;
    if (last)
        *p = a->next;
    pthread_mutex_unlock(&gs_mem_mu);
    CUresult r = GS_REAL(cuMemRelease, GS_LEGACY)(handle);
    if (a) {
        pthread_mutex_lock(&gs_mem_mu);
        if (r != CUDA_SUCCESS) {
            if (last)
                gs_link(a);
        } else {
            a->refs--;
            gs_vmm_maybe_end(a); /* or its mappings keep it, as they keep the memory */
        }
        pthread_mutex_unlock(&gs_mem_mu);
    }
    return r;
}

CUresult gs_impl_cuMemRetainAllocationHandle(enum gs_variant variant,
                                             CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult r = GS_REAL(cuMemRetainAllocationHandle, variant)(handle, addr);
    if (r != CUDA_SUCCESS || handle == NULL)
        return r;
    /* One more cuMemRelease to come: find the handle by the mapping at addr. */
    CUdeviceptr at = (CUdeviceptr)(uintptr_t)addr;
    pthread_mutex_lock(&gs_mem_mu);
    struct gs_vmm_map *m = gs_maps[gs_map_bucket(at)];
    while (m && m->ptr != at)
        m = m->next;
    for (size_t b = 0; m == NULL && b < GS_BUCKETS; b++)
        for (m = gs_maps[b]; m && !(at >= m->ptr && at - m->ptr < m->size); m = m->next)
            ;
    if (m) {
        struct gs_alloc *a = m->handle;
        if (a->refs++ == 0) { /* released before: known again by the handle now handed out */
            a->key = *handle;
            gs_link(a);
        }
    }
    pthread_mutex_unlock(&gs_mem_mu);
    return r;
}

CUresult gs_impl_cuMemMap(enum gs_variant variant, CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult r = GS_REAL(cuMemMap, variant)(ptr, size, offset, handle, flags);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&gs_mem_mu);
    struct gs_alloc **p = gs_find(handle, true); /* none: imported or not ours to count */
    struct gs_vmm_map *m = p ? malloc(sizeof *m) : NULL;
    if (m) {
        *m = (struct gs_vmm_map){.ptr = ptr, .size = size, .handle = *p};
        size_t b = gs_map_bucket(ptr);
        m->next = gs_maps[b];
        gs_maps[b] = m;
        (*p)->maps++;
    } else if (p) {
        gs_warn("out of host memory for mapping records; the %zu bytes of VMM handle %#llx "
                "stop counting at its release",
                (*p)->size, (unsigned long long)handle);
    }
    pthread_mutex_unlock(&gs_mem_mu);
    return r;
}

/* Under gs_mem_mu: unlinks the mapping starting at ptr, or NULL. */
static struct gs_vmm_map *gs_map_take(CUdeviceptr ptr)
{
    for (struct gs_vmm_map **q = &gs_maps[gs_map_bucket(ptr)]; *q; q = &(*q)->next) {
        if ((*q)->ptr == ptr) {
            struct gs_vmm_map *m = *q;
            *q = m->next;
            return m;
        }
    }
    return NULL;
}

CUresult gs_impl_cuMemUnmap(enum gs_variant variant, CUdeviceptr ptr, size_t size)
{
    /* The range is whole mappings, back to back. They leave the table before the driver call,
     * so that the same addresses mapped again at once are never confused with them. */
    CUdeviceptr end = ptr + size;
    struct gs_vmm_map *taken = NULL;
    pthread_mutex_lock(&gs_mem_mu);
    CUdeviceptr at = ptr;
    struct gs_vmm_map *m;
    while (at < end && (m = gs_map_take(at)) != NULL) {
        at = m->ptr + m->size;
        m->next = taken;
        taken = m;
    }
    for (size_t b = 0; at < end && b < GS_BUCKETS; b++) { /* not back to back after all */
        for (struct gs_vmm_map **q = &gs_maps[b]; *q;) {
            m = *q;
            if (m->ptr >= ptr && m->ptr < end) {
                *q = m->next;
                m->next = taken;
                taken = m;
            } else {
                q = &m->next;
            }
        }
    }
    pthread_mutex_unlock(&gs_mem_mu);

    CUresult r = GS_REAL(cuMemUnmap, variant)(ptr, size);
    pthread_mutex_lock(&gs_mem_mu);
    while (taken) {
        m = taken;
        taken = m->next;
        if (r != CUDA_SUCCESS) { /* still mapped */
            size_t b = gs_map_bucket(m->ptr);
            m->next = gs_maps[b];
            gs_maps[b] = m;
            continue;
        }
        m->handle->maps--;
        gs_vmm_maybe_end(m->handle);
        free(m);
    }
    pthread_mutex_unlock(&gs_mem_mu);
    return r;
}

CUresult gs_impl_cuMemGetInfo_v2(enum gs_variant variant, size_t *free_bytes, size_t *total)
{
    gs_client_wait_first_attempt(); /* a limit sent at registration is the answer's */
    CUresult r = GS_REAL(cuMemGetInfo_v2, variant)(free_bytes, total);
    CUcontext ctx;
    int device;
    if (r != CUDA_SUCCESS || free_bytes == NULL || total == NULL || !gs_current(&ctx, &device) ||
        device >= GS_MAX_DEVICES)
        return r;
    atomic_store(&gs_device_total[device], (uint64_t)*total);
    gs_reap_deferred(false, false);
    uint64_t limit = atomic_load(&gs_limit);
    pthread_mutex_lock(&gs_mem_mu);
    uint64_t held = gs_allocated[device];
    pthread_mutex_unlock(&gs_mem_mu);
    /* With Unified Memory the whole device is this process's while it holds the lock: what is
     * free is what it has not allocated, whatever other processes hold. */
    if (gs_config()->unified_memory)
        *free_bytes = held < *total ? *total - held : 0;
    /* Under a limit the device looks no larger than it, so that frameworks sizing their caches
     * from these numbers stay within it. */
    if (limit > 0) {
        uint64_t room = held < limit ? limit - held : 0;
        if (*total > limit)
            *total = limit;
        if (*free_bytes > room)
            *free_bytes = room;
    }
    return r;
}

CUresult gs_impl_cuDeviceTotalMem_v2(enum gs_variant variant, size_t *bytes, CUdevice dev)
{
    gs_client_wait_first_attempt();
    CUresult r = GS_REAL(cuDeviceTotalMem_v2, variant)(bytes, dev);
    uint64_t limit = atomic_load(&gs_limit);
    if (r == CUDA_SUCCESS && bytes != NULL && limit > 0 && *bytes > limit)
        *bytes = limit;
    return r;
}

void gs_memory_forget_context(CUcontext ctx)
{
    pthread_mutex_lock(&gs_mem_mu);
    for (size_t b = 0; b < GS_BUCKETS; b++) {
        struct gs_alloc **p = &gs_buckets[b];
        while (*p) {
            if ((*p)->ctx == ctx && (*p)->kind != GS_ALLOC_VMM)
                free(gs_unrecord(p));
            else
                p = &(*p)->next;
        }
    }
    /* Deferred frees of that context died with it, events included. */
    struct gs_alloc **p = &gs_deferred;
    while (*p) {
        struct gs_alloc *a = *p;
        if (a->ctx == ctx) {
            *p = a->next;
            gs_deferred_count--;
            gs_deferred_bytes -= a->size;
            gs_count(a->device, -(int64_t)a->size, a->kind);
            free(a);
        } else {
            p = &a->next;
        }
    }
    pthread_mutex_unlock(&gs_mem_mu);
}

uint64_t gs_memory_device_total(int device)
{
    return gs_total_of(device);
}

struct gs_managed *gs_memory_managed(int device, bool own_too, size_t *count)
{
    size_t n = 0, cap = 64;
    struct gs_managed *list = malloc(cap * sizeof *list);
    pthread_mutex_lock(&gs_mem_mu);
    for (size_t b = 0; b < GS_BUCKETS && list; b++) {
        for (struct gs_alloc *a = gs_buckets[b]; a && list; a = a->next) {
            bool wanted = a->kind == GS_ALLOC_CONVERTED || (own_too && a->kind == GS_ALLOC_MANAGED);
            if (!wanted || a->device != device)
                continue;
            if (n == cap) {
                struct gs_managed *more = realloc(list, 2 * cap * sizeof *list);
                if (more == NULL)
                    break; /* the caller moves what the list holds */
                list = more;
                cap *= 2;
            }
            list[n++] = (struct gs_managed){(CUdeviceptr)a->key, a->size, a->ctx, a->stamp,
                                             a->kind == GS_ALLOC_CONVERTED};
        }
    }
    pthread_mutex_unlock(&gs_mem_mu);
    if (list && n == 0) {
        free(list);
        list = NULL;
    }
    *count = list ? n : 0;
    return list;
}

bool gs_memory_has_changes(void)
{
    return atomic_load(&gs_mem_changed) != 0;
}

int gs_memory_changes(struct gs_mem_usage out[GS_MAX_DEVICES], bool all)
{
    int n = 0;
    atomic_store(&gs_mem_changed, 0);
    pthread_mutex_lock(&gs_mem_mu);
    for (int d = 0; d < GS_MAX_DEVICES; d++) {
        if (!gs_device_used[d] || !(all || gs_device_changed[d]))
            continue;
        gs_device_changed[d] = false;
        out[n++] = (struct gs_mem_usage){(uint32_t)d, gs_allocated[d],
                                         atomic_load(&gs_device_total[d])};
    }
    pthread_mutex_unlock(&gs_mem_mu);
    return n;
}

void gs_memory_after_fork_child(void)
{
    /* CUDA does not survive fork: the child starts with nothing allocated. The parent's records
     * are dropped, not freed (another thread may have been changing them). */
    pthread_mutex_init(&gs_mem_mu, NULL);
    pthread_mutex_init(&gs_reap_mu, NULL);
    for (size_t b = 0; b < GS_BUCKETS; b++) {
        gs_buckets[b] = NULL;
        gs_maps[b] = NULL;
    }
    for (int d = 0; d < GS_MAX_DEVICES; d++) {
        gs_allocated[d] = 0;
        gs_unlimited[d] = 0;
        gs_device_used[d] = gs_device_changed[d] = false;
    }
    gs_deferred = NULL;
    gs_deferred_count = 0;
    gs_deferred_bytes = 0;
    atomic_store(&gs_mem_changed, 0);
}
