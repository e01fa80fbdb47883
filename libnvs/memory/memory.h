/* Device memory: allocations turned into Unified Memory, and the per-device accounting. */
#ifndef GS_MEMORY_H
#define GS_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda/cuda_api.h"

#define GS_MAX_DEVICES 64

struct gs_mem_usage {
    uint32_t device;
    uint64_t allocated; /* bytes this process holds on the device */
    uint64_t total;     /* the device's size as the driver reports it; 0 if not yet known */
};

/* Whether some device's usage changed since gs_memory_changes last ran. */
bool gs_memory_has_changes(void);
/* Fills out[] with the devices whose usage changed since the last call (every device ever
 * used when all is true) and clears their marks; returns how many. */
int gs_memory_changes(struct gs_mem_usage out[GS_MAX_DEVICES], bool all);

/* A managed allocation, as gs_memory_managed copies it out of the records. */
struct gs_managed {
    CUdeviceptr ptr;
    size_t size;
    CUcontext ctx;
    uint64_t stamp; /* allocation order: larger is newer */
    bool converted; /* turned into managed memory by libnvs: the program never reads it on the
                       host, so its contents may leave the device other than by migration */
};

/* A copy of the device's converted allocations, and of the program's own managed ones too when
 * own_too, in no order; free() it. NULL (count 0) when there are none or no memory for the
 * copy. */
struct gs_managed *gs_memory_managed(int device, bool own_too, size_t *count);
/* The device's size as the driver reports it (asked once); 0 when unknown. */
uint64_t gs_memory_device_total(int device);

/* Whether converted memory freed with cuMemFreeAsync still waits to be freed. */
bool gs_memory_deferred_pending(void);
/* Frees what of it the stream has reached, in each allocation's own context. For the client
 * thread, while stream captures are held off. */
void gs_memory_reap(void);

/* The scheduler's memory terms (LIMITS), the same for every device: the most this process may
 * hold on each (0: none), and what the other programs sharing that budget (its container's)
 * hold there. Allocations that would take what this process holds plus budget_used past the
 * limit fail with CUDA_ERROR_OUT_OF_MEMORY; cuMemGetInfo, cuDeviceTotalMem and the NVML view
 * show a device no larger than the limit. */
struct gs_memory_limit {
    uint64_t limit;
    uint64_t budget_used;
};
void gs_memory_set_limit(struct gs_memory_limit terms);
/* Any time, from any thread. */
struct gs_memory_limit gs_memory_limit(void);
/* Bytes this process holds on the device: what its memory reports and the limit count. */
uint64_t gs_memory_held(int device);

void gs_memory_after_fork_child(void); /* records and VMM mappings too */
void gs_vmm_after_fork_child(void);

#endif
