/* The allocation records and what they add up to per device: bytes held, the program's own
 * managed part, which devices changed since the last report, the device sizes and the
 * scheduler's limit. Shared by the allocation hooks (memory.c) and the VMM hooks (vmm.c); one
 * mutex guards it, held briefly: allocation is not the hot path. */
#ifndef GS_RECORDS_H
#define GS_RECORDS_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda/cuda_api.h"
#include "memory/memory.h"

/* What an allocation is, and therefore how it must be freed and counted. */
enum gs_alloc_kind {
    GS_ALLOC_CONVERTED, /* cuMemAlloc/Pitch/Async turned into cuMemAllocManaged by us */
    GS_ALLOC_MANAGED,   /* the program's own cuMemAllocManaged */
    GS_ALLOC_DEVICE,    /* ordinary device memory (GEMSHARE_UNIFIED_MEMORY=0) */
    GS_ALLOC_POOL,      /* stream-ordered pool memory, or graph memory allocated in a capture */
    GS_ALLOC_VMM,       /* a cuMemCreate handle */
};

struct gs_alloc {
    struct gs_alloc *next;
    uint64_t key; /* the device pointer, or the VMM handle */
    size_t size;
    CUcontext ctx;
    int device;
    enum gs_alloc_kind kind;
    CUevent free_after; /* cuMemFreeAsync of converted memory: free once this event completes */
    uint64_t stamp;     /* when it was allocated, by the records' clock: the order of bulk moves */
    /* VMM: the driver keeps the physical memory until the handle is released (refs: cuMemCreate
     * and cuMemRetainAllocationHandle less cuMemRelease) and every mapping of it is unmapped.
     * With refs at 0 the record is out of the table (the handle value is dead) and only its
     * mappings point to it. */
    int refs, maps;
};

void gs_records_lock(void);
void gs_records_unlock(void);

/* The rest under the lock, but for gs_records_device_total. */
struct gs_alloc **gs_records_find(uint64_t key, bool vmm);
void gs_records_link(struct gs_alloc *a);
/* Counts bytes of this kind in or out of a device and tells the client thread. */
void gs_records_count(int device, int64_t delta, enum gs_alloc_kind kind);
/* Records an allocation; its bytes were counted already (reserved) unless `count`. */
void gs_records_add(uint64_t key, size_t size, CUcontext ctx, int device,
                    enum gs_alloc_kind kind, bool count);
/* Unlinks *p and uncounts it; the caller frees the record. */
struct gs_alloc *gs_records_take(struct gs_alloc **p);
/* Every record of the context but VMM handles (which belong to the device), unlinked and
 * uncounted, as a list for the caller to free. */
struct gs_alloc *gs_records_take_context(CUcontext ctx);
/* Bytes this process holds on the device, and the part that is the program's own managed
 * memory (held to the scheduler's limit, never to the device's size). */
uint64_t gs_records_held(int device);
uint64_t gs_records_own_managed(int device);
const char *gs_records_kind_name(enum gs_alloc_kind kind);

/* The device's size as the driver reports it (asked once); 0 when unknown. Any time. */
uint64_t gs_records_device_total(int device);
void gs_records_note_device_total(int device, uint64_t total);

void gs_records_after_fork_child(void);

#endif
