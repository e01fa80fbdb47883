/* The virtual memory management hooks (PyTorch expandable segments, NCCL): a cuMemCreate handle
 * stays counted until it is released and every mapping of it is unmapped, as the driver keeps its
 * physical memory until then. cuMemCreate itself is an allocation (memory.c). */
#include <stdlib.h>

#include "base/log.h"
#include "cuda/impl.h"
#include "memory/records.h"

#define GS_MAP_BUCKETS 4096

/* A cuMemMap of a counted handle, keyed by its address; unmapping ends it. */
struct gs_vmm_map {
    struct gs_vmm_map *next;
    CUdeviceptr ptr;
    size_t size;
    struct gs_alloc *handle;
};

/* The mappings, under the records' lock (a mapping points into the records). */
static struct gs_vmm {
    struct gs_vmm_map *maps[GS_MAP_BUCKETS];
} gs_vmm;

/* Under the records' lock: a VMM handle's bytes stop counting once it is released and unmapped
 * everywhere, when the driver frees the physical memory. */
static void gs_vmm_maybe_end(struct gs_alloc *a)
{
    if (a->refs > 0 || a->maps > 0)
        return;
    gs_records_count(a->device, -(int64_t)a->size, a->kind);
    gs_debug("VMM: %zu bytes on device %d freed (released and unmapped)", a->size, a->device);
    free(a);
}

static size_t gs_map_bucket(CUdeviceptr ptr)
{
    return (size_t)((ptr * 0x9e3779b97f4a7c15ull) >> 52) % GS_MAP_BUCKETS;
}

CUresult gs_impl_cuMemRelease(enum gs_variant variant, CUmemGenericAllocationHandle handle)
{
    (void)variant; /* no per-thread twin */
    /* The last reference leaves the table before the driver call, so that a handle value the
     * driver hands out again at once is never confused with this one; refs stays 1 meanwhile,
     * so that an unmap in between does not end the record under us. */
    gs_records_lock();
    struct gs_alloc **p = handle ? gs_records_find(handle, true) : NULL;
    struct gs_alloc *a = p ? *p : NULL;
    bool last = a && a->refs == 1;
    if (last)
        *p = a->next;
    gs_records_unlock();
    CUresult r = GS_REAL(cuMemRelease, GS_LEGACY)(handle);
    if (a) {
        gs_records_lock();
        if (r != CUDA_SUCCESS) {
            if (last)
                gs_records_link(a);
        } else {
            a->refs--;
            gs_vmm_maybe_end(a); /* or its mappings keep it, as they keep the memory */
        }
        gs_records_unlock();
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
    gs_records_lock();
    struct gs_vmm_map *m = gs_vmm.maps[gs_map_bucket(at)];
    while (m && m->ptr != at)
        m = m->next;
    for (size_t b = 0; m == NULL && b < GS_MAP_BUCKETS; b++)
        for (m = gs_vmm.maps[b]; m && !(at >= m->ptr && at - m->ptr < m->size); m = m->next)
            ;
    if (m) {
        struct gs_alloc *a = m->handle;
        if (a->refs++ == 0) { /* released before: known again by the handle now handed out */
            a->key = *handle;
            gs_records_link(a);
        }
    }
    gs_records_unlock();
    return r;
}

CUresult gs_impl_cuMemMap(enum gs_variant variant, CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult r = GS_REAL(cuMemMap, variant)(ptr, size, offset, handle, flags);
    if (r != CUDA_SUCCESS)
        return r;
    gs_records_lock();
    struct gs_alloc **p = gs_records_find(handle, true); /* none: imported or not ours to count */
    struct gs_vmm_map *m = p ? malloc(sizeof *m) : NULL;
    if (m) {
        *m = (struct gs_vmm_map){.ptr = ptr, .size = size, .handle = *p};
        size_t b = gs_map_bucket(ptr);
        m->next = gs_vmm.maps[b];
        gs_vmm.maps[b] = m;
        (*p)->maps++;
    } else if (p) {
        gs_warn("out of host memory for mapping records; the %zu bytes of VMM handle %#llx "
                "stop counting at its release",
                (*p)->size, (unsigned long long)handle);
    }
    gs_records_unlock();
    return r;
}

/* Under the records' lock: unlinks the mapping starting at ptr, or NULL. */
static struct gs_vmm_map *gs_map_take(CUdeviceptr ptr)
{
    for (struct gs_vmm_map **q = &gs_vmm.maps[gs_map_bucket(ptr)]; *q; q = &(*q)->next) {
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
    gs_records_lock();
    CUdeviceptr at = ptr;
    struct gs_vmm_map *m;
    while (at < end && (m = gs_map_take(at)) != NULL) {
        at = m->ptr + m->size;
        m->next = taken;
        taken = m;
    }
    for (size_t b = 0; at < end && b < GS_MAP_BUCKETS; b++) { /* not back to back after all */
        for (struct gs_vmm_map **q = &gs_vmm.maps[b]; *q;) {
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
    gs_records_unlock();

    CUresult r = GS_REAL(cuMemUnmap, variant)(ptr, size);
    gs_records_lock();
    while (taken) {
        m = taken;
        taken = m->next;
        if (r != CUDA_SUCCESS) { /* still mapped */
            size_t b = gs_map_bucket(m->ptr);
            m->next = gs_vmm.maps[b];
            gs_vmm.maps[b] = m;
            continue;
        }
        m->handle->maps--;
        gs_vmm_maybe_end(m->handle);
        free(m);
    }
    gs_records_unlock();
    return r;
}

void gs_vmm_after_fork_child(void)
{
    /* Dropped, not freed: another thread may have been changing them. */
    gs_vmm = (struct gs_vmm){0};
}
