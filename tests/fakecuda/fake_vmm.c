/* The virtual memory management API (cuMemCreate, cuMemAddressReserve, cuMemMap, ...), used by
 * PyTorch's expandable segments and by NCCL.
 *
 * A physical allocation is a memfd counted against the device; a reserved range is PROT_NONE
 * address space; cuMemMap maps the memfd into the range (still inaccessible) and cuMemSetAccess
 * opens it, so the same bytes appear wherever a handle is mapped, as on the GPU. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_driver.h"

#define GRANULARITY (2u << 20)
#define FAKE_HANDLE_MAGIC 0x564d4d48u

struct vmm_handle {
    uint32_t magic;
    int fd;
    size_t size;
    CUdevice device;
    CUmemAllocationProp prop;
    int refs;  /* cuMemCreate and cuMemRetainAllocationHandle, minus cuMemRelease */
    int maps;  /* live cuMemMap mappings */
};

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;

static struct vmm_handle *handle_of(CUmemGenericAllocationHandle h)
{
    struct vmm_handle *v = (struct vmm_handle *)(uintptr_t)h;
    return v && v->magic == FAKE_HANDLE_MAGIC ? v : NULL;
}

/* Called with vmm_lock held: physical memory goes once nothing refers to it. */
static void handle_maybe_free(struct vmm_handle *v)
{
    if (v->refs > 0 || v->maps > 0)
        return;
    close(v->fd);
    fake_device_unreserve(v->device, v->size);
    v->magic = 0;
    fake_log("vmm_free", "handle=%p size=%zu", (void *)v, v->size);
    free(v);
}

static bool prop_ok(const CUmemAllocationProp *prop)
{
    return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
           prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
           fake_check_device(prop->location.id) == CUDA_SUCCESS;
}

FAKE_API CUresult cuMemGetAllocationGranularity(size_t *granularity,
                                                const CUmemAllocationProp *prop,
                                                CUmemAllocationGranularity_flags option)
{
    (void)option;
    FAKE_TRY(fake_check_init());
    if (!granularity || !prop_ok(prop))
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = GRANULARITY;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                              const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult r = fake_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle || !prop_ok(prop) || flags != 0 || size == 0 || size % GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    CUdevice dev = prop->location.id;
    struct vmm_handle *v = calloc(1, sizeof *v);
    if (!v)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!fake_device_reserve(dev, size))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else if ((v->fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC)) < 0 ||
             ftruncate(v->fd, (off_t)size) != 0) {
        if (v->fd >= 0)
            close(v->fd);
        fake_device_unreserve(dev, size);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r != CUDA_SUCCESS) {
        free(v);
        v = NULL;
    } else {
        v->magic = FAKE_HANDLE_MAGIC;
        v->size = size;
        v->device = dev;
        v->prop = *prop;
        v->refs = 1;
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)v;
    }
    fake_log("vmm_create", "handle=%p size=%zu dev=%d result=%d", (void *)v, size, dev, (int)r);
    return r;
}

FAKE_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult r = fake_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_handle *v = handle_of(handle);
    if (!v || v->refs <= 0)
        r = CUDA_ERROR_INVALID_VALUE;
    else {
        fake_log("vmm_release", "handle=%p size=%zu maps=%d", (void *)v, v->size, v->maps);
        v->refs--;
        handle_maybe_free(v);
    }
    pthread_mutex_unlock(&vmm_lock);
    return r;
}

FAKE_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                      CUdeviceptr addr, unsigned long long flags)
{
    (void)addr; /* a hint only */
    FAKE_TRY(fake_check_init());
    if (!ptr || size == 0 || size % GRANULARITY || flags != 0 ||
        (alignment && (alignment & (alignment - 1))))
        return CUDA_ERROR_INVALID_VALUE;
    size_t align = alignment > GRANULARITY ? alignment : GRANULARITY;
    char *p = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* Trim to an aligned range. */
    uintptr_t start = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    if (start > (uintptr_t)p)
        munmap(p, start - (uintptr_t)p);
    size_t tail = (uintptr_t)p + size + align - (start + size);
    if (tail)
        munmap((void *)(start + size), tail);
    CUcontext ctx = fake_current_ctx();
    struct fake_alloc a = {.base = start, .size = size, .kind = FAKE_MEM_VMM_RANGE,
                           .device = fake_ctx_valid(ctx) ? ctx->device : 0, .ctx = ctx};
    fake_alloc_insert(&a);
    *ptr = (CUdeviceptr)start;
    fake_log("vmm_reserve", "ptr=0x%llx size=%zu", (unsigned long long)start, size);
    return CUDA_SUCCESS;
}

/* The reserved range that holds [p, p+size), or false; false too where p is already mapped,
 * since a mapping's registry entry comes first. */
static bool find_range(uintptr_t p, size_t size, struct fake_alloc *range)
{
    struct fake_alloc a;
    if (!fake_alloc_lookup(p, &a))
        return false;
    if (a.kind != FAKE_MEM_VMM_RANGE || p + size > a.base + a.size)
        return false;
    *range = a;
    return true;
}

FAKE_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    FAKE_TRY(fake_check_init());
    struct fake_alloc a;
    if (!find_range((uintptr_t)ptr, size, &a) || a.base != (uintptr_t)ptr || a.size != size)
        return CUDA_ERROR_INVALID_VALUE;
    fake_alloc_remove(a.base, NULL);
    munmap((void *)a.base, a.size);
    fake_log("vmm_address_free", "ptr=0x%llx size=%zu", (unsigned long long)ptr, size);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                           CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult r = fake_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct fake_alloc range;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_handle *v = handle_of(handle);
    if (!v || flags != 0 || size == 0 || size % GRANULARITY || offset % GRANULARITY ||
        offset + size > v->size || (uintptr_t)ptr % GRANULARITY ||
        !find_range((uintptr_t)ptr, size, &range))
        r = CUDA_ERROR_INVALID_VALUE;
    else if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, v->fd,
                  (off_t)offset) == MAP_FAILED)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else {
        v->maps++;
        struct fake_alloc m = {.base = (uintptr_t)ptr, .size = size, .kind = FAKE_MEM_VMM_MAP,
                               .device = v->device, .ctx = range.ctx, .pool = v};
        fake_alloc_insert(&m);
    }
    pthread_mutex_unlock(&vmm_lock);
    fake_log("vmm_map", "ptr=0x%llx size=%zu offset=%zu handle=%p result=%d",
             (unsigned long long)ptr, size, offset, (void *)v, (int)r);
    return r;
}

FAKE_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult r = fake_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    CUcontext ctx = fake_current_ctx();
    if (fake_ctx_valid(ctx))
        fake_wait_seq(atomic_load(&ctx->last_seq)); /* unmapping synchronizes, as documented */
    struct fake_alloc m;
    pthread_mutex_lock(&vmm_lock);
    if (!fake_alloc_lookup((uintptr_t)ptr, &m) || m.kind != FAKE_MEM_VMM_MAP ||
        m.base != (uintptr_t)ptr || m.size != size)
        r = CUDA_ERROR_INVALID_VALUE;
    else {
        fake_alloc_remove(m.base, NULL);
        /* Back to reserved, inaccessible address space. */
        mmap((void *)m.base, m.size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        struct vmm_handle *v = m.pool;
        v->maps--;
        handle_maybe_free(v);
    }
    pthread_mutex_unlock(&vmm_lock);
    fake_log("vmm_unmap", "ptr=0x%llx size=%zu result=%d", (unsigned long long)ptr, size, (int)r);
    return r;
}

FAKE_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                 size_t count)
{
    FAKE_TRY(fake_check_init());
    if (!desc || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* Every byte must be mapped: walk the mappings covering the range. */
    for (uintptr_t p = (uintptr_t)ptr; p < (uintptr_t)ptr + size;) {
        struct fake_alloc m;
        if (!fake_alloc_lookup(p, &m) || m.kind != FAKE_MEM_VMM_MAP)
            return CUDA_ERROR_INVALID_VALUE;
        p = m.base + m.size;
    }
    int prot = PROT_NONE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            fake_check_device(desc[i].location.id) != CUDA_SUCCESS)
            return CUDA_ERROR_INVALID_VALUE;
        if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            prot = PROT_READ | PROT_WRITE;
        else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
            prot = PROT_READ;
    }
    if (mprotect((void *)(uintptr_t)ptr, size, prot) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    fake_log("vmm_set_access", "ptr=0x%llx size=%zu prot=%d", (unsigned long long)ptr, size, prot);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    FAKE_TRY(fake_check_init());
    struct fake_alloc m;
    if (!handle || !fake_alloc_lookup((uintptr_t)addr, &m) || m.kind != FAKE_MEM_VMM_MAP)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_handle *v = m.pool;
    v->refs++;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)v;
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                         CUmemGenericAllocationHandle handle)
{
    CUresult r = fake_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_handle *v = handle_of(handle);
    if (!prop || !v)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        *prop = v->prop;
    pthread_mutex_unlock(&vmm_lock);
    return r;
}
