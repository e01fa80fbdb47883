/* Simulated device memory: device, pitched, managed and pinned host allocations, the registry
 * behind pointer queries, and cuMemGetInfo.
 *
 * Every allocation is real memory (a MAP_NORESERVE mapping, anonymous but for managed memory:
 * fake_map_managed) whose address is the device pointer, so copies and kernels move real bytes
 * while a huge managed allocation costs no RAM until touched. Device allocations count against FAKECUDA_DEVICE_MEM and fail with
 * CUDA_ERROR_OUT_OF_MEMORY past it; managed ones may exceed it, as Unified Memory allows.
 *
 * What each device has in use is fake_gpu.c's (shared between processes through
 * FAKECUDA_SHARED_DEVICE). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_driver.h"

#define PITCH_ALIGN 512

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_alloc *registry;

static size_t page_round(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) / page * page;
}

void *fake_map_bytes(size_t size)
{
    void *p = mmap(NULL, page_round(size), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Managed memory is a memfd's mapping, named so that /proc/PID/maps shows it as
 * "/memfd:nvidia-uvm (deleted)", as a driver's shows /dev/nvidia-uvm for each managed allocation
 * (the scheduler bounds a program's reports by them). Its pages too cost nothing until touched. */
static void *fake_map_managed(size_t size)
{
    int fd = memfd_create("nvidia-uvm", MFD_CLOEXEC);
    if (fd < 0)
        return NULL;
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)page_round(size)) == 0)
        p = mmap(NULL, page_round(size), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    close(fd); /* the mapping keeps the memory */
    return p == MAP_FAILED ? NULL : p;
}

void fake_unmap_bytes(void *p, size_t size)
{
    if (p && size)
        munmap(p, page_round(size));
}

void fake_alloc_insert(const struct fake_alloc *a)
{
    struct fake_alloc *n = malloc(sizeof *n);
    if (!n)
        abort(); /* a test double may not silently lose track of memory */
    *n = *a;
    n->buffer_id = fake_next_id();
    pthread_mutex_lock(&registry_lock);
    n->next = registry;
    registry = n;
    pthread_mutex_unlock(&registry_lock);
}

bool fake_alloc_remove(uintptr_t base, struct fake_alloc *out)
{
    bool found = false;
    pthread_mutex_lock(&registry_lock);
    for (struct fake_alloc **pp = &registry; *pp; pp = &(*pp)->next)
        if ((*pp)->base == base) {
            struct fake_alloc *n = *pp;
            *pp = n->next;
            if (out)
                *out = *n;
            free(n);
            found = true;
            break;
        }
    pthread_mutex_unlock(&registry_lock);
    return found;
}

bool fake_alloc_lookup(uintptr_t p, struct fake_alloc *out)
{
    bool found = false;
    pthread_mutex_lock(&registry_lock);
    for (struct fake_alloc *n = registry; n; n = n->next)
        if (p >= n->base && p < n->base + (n->size ? n->size : 1)) {
            *out = *n;
            found = true;
            break;
        }
    pthread_mutex_unlock(&registry_lock);
    return found;
}

bool fake_is_managed(uintptr_t p)
{
    struct fake_alloc a;
    return fake_alloc_lookup(p, &a) && a.kind == FAKE_MEM_MANAGED;
}

static bool within(_Atomic uint64_t *given, uint64_t limit, size_t count)
{
    if (limit == 0)
        return true;
    uint64_t before = atomic_fetch_add(given, count);
    if (before + count <= limit)
        return true;
    atomic_fetch_sub(given, count);
    return false;
}

bool fake_host_room(size_t count)
{
    static _Atomic uint64_t prefetched;
    return within(&prefetched, fake_config()->host_prefetch_limit, count);
}

/* FAKECUDA_HOST_PIN_LIMIT: pinning runs short after that many bytes. */
static bool pin_room(size_t count)
{
    static _Atomic uint64_t pinned;
    return within(&pinned, fake_config()->host_pin_limit, count);
}

size_t fake_managed_move(uintptr_t p, size_t len, bool to_host)
{
    size_t moved = len;
    pthread_mutex_lock(&registry_lock);
    struct fake_alloc *n = registry;
    while (n && !(p >= n->base && p < n->base + n->size))
        n = n->next;
    if (n && n->kind == FAKE_MEM_MANAGED && p + len <= n->base + n->size) {
        size_t pages = (n->size + FAKE_MIGRATE_PAGE - 1) / FAKE_MIGRATE_PAGE;
        if (!n->on_host && to_host)
            n->on_host = calloc((pages + 7) / 8, 1);
        moved = 0;
        for (uintptr_t at = p; n->on_host && at < p + len;) {
            size_t page = (at - n->base) / FAKE_MIGRATE_PAGE;
            uintptr_t next = n->base + (page + 1) * FAKE_MIGRATE_PAGE;
            uintptr_t end = next < p + len ? next : p + len;
            bool there = n->on_host[page / 8] >> (page % 8) & 1;
            if (there != to_host) {
                moved += end - at;
                n->on_host[page / 8] ^= (uint8_t)(1u << (page % 8));
            }
            at = end;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    return moved;
}

static const char *kind_name(enum fake_mem_kind k)
{
    switch (k) {
    case FAKE_MEM_DEVICE: return "device";
    case FAKE_MEM_MANAGED: return "managed";
    case FAKE_MEM_ASYNC: return "async";
    case FAKE_MEM_HOST: return "host";
    case FAKE_MEM_VMM_RANGE: return "vmm_range";
    case FAKE_MEM_VMM_MAP: return "vmm_map";
    }
    return "?";
}

/* Common start of the allocation calls: initialized, a current context, not forbidden by a
 * capture sequence. */
static CUresult alloc_prologue(const char *api, CUcontext *ctx)
{
    CUresult r = fake_require_ctx(ctx);
    if (r == CUDA_SUCCESS)
        r = fake_capture_check_unsafe(api);
    return r;
}

static CUresult alloc_device(CUdeviceptr *dptr, size_t bytes, const char *api, const char *event)
{
    CUcontext ctx;
    CUresult r = alloc_prologue(api, &ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    if (!fake_device_reserve(ctx->device, bytes))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else if (!(p = fake_map_bytes(bytes))) {
        fake_device_unreserve(ctx->device, bytes);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS) {
        struct fake_alloc a = {.base = (uintptr_t)p, .size = bytes, .mapped = bytes,
                               .kind = FAKE_MEM_DEVICE, .device = ctx->device, .ctx = ctx};
        fake_alloc_insert(&a);
        *dptr = (CUdeviceptr)(uintptr_t)p;
    }
    fake_log(event, "api=%s ptr=0x%llx size=%zu dev=%d result=%d", api,
             (unsigned long long)(uintptr_t)p, bytes, ctx->device, (int)r);
    return r;
}

FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return alloc_device(dptr, bytesize, "cuMemAlloc_v2", "alloc_device");
}

FAKE_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                     size_t Height, unsigned int ElementSizeBytes)
{
    CUresult r = fake_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (WidthInBytes + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
    r = alloc_device(dptr, pitch * Height, "cuMemAllocPitch_v2", "alloc_pitch");
    if (r == CUDA_SUCCESS)
        *pPitch = pitch;
    return r;
}

FAKE_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    CUcontext ctx;
    CUresult r = alloc_prologue("cuMemAllocManaged", &ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || bytesize == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    void *p = fake_map_managed(bytesize);
    if (!p)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else {
        struct fake_alloc a = {.base = (uintptr_t)p, .size = bytesize, .mapped = bytesize,
                               .kind = FAKE_MEM_MANAGED, .device = ctx->device, .ctx = ctx};
        fake_alloc_insert(&a);
        fake_managed_count(ctx->device, (int64_t)bytesize);
        *dptr = (CUdeviceptr)(uintptr_t)p;
    }
    fake_log("alloc_managed", "api=cuMemAllocManaged ptr=0x%llx size=%zu flags=%u dev=%d result=%d",
             (unsigned long long)(uintptr_t)p, bytesize, flags, ctx->device, (int)r);
    return r;
}

FAKE_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CUcontext ctx;
    CUresult r = alloc_prologue("cuMemFree_v2", &ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (dptr == 0)
        return CUDA_SUCCESS;
    struct fake_alloc a;
    if (!fake_alloc_lookup((uintptr_t)dptr, &a) || a.base != (uintptr_t)dptr ||
        a.kind == FAKE_MEM_HOST || a.kind == FAKE_MEM_VMM_RANGE || a.kind == FAKE_MEM_VMM_MAP) {
        fake_log("free", "api=cuMemFree_v2 ptr=0x%llx result=%d", (unsigned long long)dptr,
                 (int)CUDA_ERROR_INVALID_VALUE);
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* cuMemFree synchronizes: queued work may still touch the memory. Out of the registry
     * first, so that work another thread queues meanwhile finds it gone when it runs
     * (fake_execute) rather than touch it after the unmap. */
    if (a.kind == FAKE_MEM_ASYNC) {
        fake_wait_seq(atomic_load(&ctx->last_seq));
        fake_free_async_now(a.base, "cuMemFree_v2");
    } else if (fake_alloc_remove(a.base, &a)) {
        fake_wait_seq(atomic_load(&ctx->last_seq));
        fake_release(&a, "cuMemFree_v2");
    }
    return CUDA_SUCCESS;
}

void fake_release(const struct fake_alloc *a, const char *api)
{
    free(a->on_host);
    fake_unmap_bytes((void *)a->base, a->mapped);
    if (a->kind == FAKE_MEM_MANAGED)
        fake_managed_count(a->device, -(int64_t)a->size);
    else
        fake_device_unreserve(a->device, a->size);
    fake_log("free", "api=%s ptr=0x%llx size=%zu kind=%s result=0", api,
             (unsigned long long)a->base, a->size, kind_name(a->kind));
}

void fake_memory_free_context(CUcontext ctx, const char *api)
{
    /* Device, managed and pool allocations die with their context. VMM handles belong to the
     * device, and pinned host memory is left alone (nothing counts it). */
    struct fake_alloc *dead = NULL;
    pthread_mutex_lock(&registry_lock);
    for (struct fake_alloc **pp = &registry; *pp;) {
        struct fake_alloc *n = *pp;
        if (n->ctx == ctx && (n->kind == FAKE_MEM_DEVICE || n->kind == FAKE_MEM_MANAGED ||
                              n->kind == FAKE_MEM_ASYNC)) {
            *pp = n->next;
            n->next = dead;
            dead = n;
        } else {
            pp = &n->next;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    while (dead) {
        struct fake_alloc *n = dead;
        dead = n->next;
        if (n->kind == FAKE_MEM_ASYNC && n->pool)
            fake_pool_forget(n->pool, n->size);
        fake_release(n, api);
        free(n);
    }
}

FAKE_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    CUcontext ctx;
    FAKE_TRY(fake_require_ctx(&ctx));
    if (!free_bytes || !total_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t total = fake_config()->device_mem, dev_bytes, managed;
    fake_memory_usage(ctx->device, &dev_bytes, &managed);
    /* Managed pages are taken as resident while they fit: they compete for the same memory. */
    uint64_t used = dev_bytes + managed;
    *total_bytes = (size_t)total;
    *free_bytes = (size_t)(used >= total ? 0 : total - used);
    fake_log("mem_get_info", "free=%zu total=%zu dev=%d", *free_bytes, *total_bytes, ctx->device);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    FAKE_TRY(fake_check_init());
    struct fake_alloc a;
    if (!fake_alloc_lookup((uintptr_t)dptr, &a) || a.kind == FAKE_MEM_HOST)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = (CUdeviceptr)a.base;
    if (psize)
        *psize = a.size;
    return CUDA_SUCCESS;
}

/* ---- pointer attributes -------------------------------------------------------------------- */

static CUresult pointer_attribute(void *data, CUpointer_attribute attribute,
                                  const struct fake_alloc *a, uintptr_t ptr)
{
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = a->ctx;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = a->kind == FAKE_MEM_HOST ? CU_MEMORYTYPE_HOST
                                                          : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = (CUdeviceptr)ptr;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (a->kind != FAKE_MEM_HOST && a->kind != FAKE_MEM_MANAGED)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)ptr;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *(unsigned int *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = a->buffer_id;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned int *)data = a->kind == FAKE_MEM_MANAGED;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = a->device;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        /* CUDA IPC works on cuMemAlloc memory only, never on managed memory. */
        *(unsigned int *)data = a->kind == FAKE_MEM_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = (CUdeviceptr)a->base;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = a->size;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned int *)data = a->kind != FAKE_MEM_VMM_RANGE || a->mapped != 0;
        break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned int *)data = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(void **)data = a->pool;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    CUresult r = fake_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_alloc a;
    if (!fake_alloc_lookup((uintptr_t)ptr, &a))
        r = CUDA_ERROR_INVALID_VALUE;
    else
        r = pointer_attribute(data, attribute, &a, (uintptr_t)ptr);
    fake_log("pointer_attribute", "ptr=0x%llx attr=%d result=%d", (unsigned long long)ptr,
             (int)attribute, (int)r);
    return r;
}

/* Unlike the singular call, an unknown pointer is not an error: attributes read as zero. */
FAKE_API CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                         CUpointer_attribute *attributes, void **data,
                                         CUdeviceptr ptr)
{
    FAKE_TRY(fake_check_init());
    if (!attributes || !data)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_alloc a;
    bool known = fake_alloc_lookup((uintptr_t)ptr, &a);
    struct fake_alloc none = {0};
    for (unsigned int i = 0; i < numAttributes; i++) {
        if (!data[i])
            continue;
        if (pointer_attribute(data[i], attributes[i], known ? &a : &none, known ? ptr : 0) !=
            CUDA_SUCCESS) {
            if (attributes[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER)
                *(void **)data[i] = NULL;
            else
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (!known && attributes[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
            *(unsigned int *)data[i] = 0;
    }
    return CUDA_SUCCESS;
}

/* ---- pinned host memory -------------------------------------------------------------------- */

FAKE_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    CUcontext ctx;
    FAKE_TRY(fake_require_ctx(&ctx));
    if (!pp || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = fake_map_bytes(bytesize);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fake_alloc a = {.base = (uintptr_t)p, .size = bytesize, .mapped = bytesize,
                           .kind = FAKE_MEM_HOST, .device = ctx->device, .ctx = ctx};
    fake_alloc_insert(&a);
    *pp = p;
    fake_log("alloc_host", "ptr=%p size=%zu flags=%u", p, bytesize, Flags);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

FAKE_API CUresult cuMemFreeHost(void *p)
{
    FAKE_TRY(fake_check_init());
    struct fake_alloc a;
    if (!fake_alloc_lookup((uintptr_t)p, &a) || a.base != (uintptr_t)p || a.kind != FAKE_MEM_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    fake_alloc_remove(a.base, NULL);
    fake_unmap_bytes(p, a.mapped);
    fake_log("free_host", "ptr=%p size=%zu", p, a.size);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    CUcontext ctx;
    FAKE_TRY(fake_require_ctx(&ctx));
    struct fake_alloc a;
    if (!p || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (fake_alloc_lookup((uintptr_t)p, &a))
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    if (!pin_room(bytesize))
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* The caller owns the bytes: mapped = 0 so nothing is unmapped on unregister. */
    struct fake_alloc n = {.base = (uintptr_t)p, .size = bytesize, .kind = FAKE_MEM_HOST,
                           .device = ctx->device, .ctx = ctx};
    fake_alloc_insert(&n);
    if (fake_config()->pin_gbps > 0) /* a host that finds and locks its pages at that rate */
        fake_sleep_us((uint64_t)((double)bytesize / (fake_config()->pin_gbps * 1e3)));
    fake_log("host_register", "ptr=%p size=%zu flags=%u", p, bytesize, Flags);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemHostUnregister(void *p)
{
    FAKE_TRY(fake_check_init());
    struct fake_alloc a;
    if (!fake_alloc_lookup((uintptr_t)p, &a) || a.base != (uintptr_t)p || a.kind != FAKE_MEM_HOST ||
        a.mapped != 0)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    fake_alloc_remove(a.base, NULL);
    fake_log("host_unregister", "ptr=%p size=%zu", p, a.size);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    FAKE_TRY(fake_check_init());
    struct fake_alloc a;
    if (!pdptr || Flags != 0 || !fake_alloc_lookup((uintptr_t)p, &a) || a.kind != FAKE_MEM_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* Advice changes where managed pages live, which the fake does not model: validated, logged. */
static CUresult mem_advise(CUdeviceptr devPtr, size_t count, int advice, int device,
                           const char *api)
{
    CUresult r = fake_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct fake_alloc a;
    if (!fake_alloc_lookup((uintptr_t)devPtr, &a) || a.kind != FAKE_MEM_MANAGED || count == 0)
        r = CUDA_ERROR_INVALID_VALUE;
    fake_log("advise", "api=%s ptr=0x%llx size=%zu advice=%d dev=%d result=%d", api,
             (unsigned long long)devPtr, count, advice, device, (int)r);
    return r;
}

FAKE_API CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                              CUdevice device)
{
    return mem_advise(devPtr, count, (int)advice, device, "cuMemAdvise");
}

FAKE_API CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                 CUmemLocation location)
{
    return mem_advise(devPtr, count, (int)advice, location.id, "cuMemAdvise_v2");
}
