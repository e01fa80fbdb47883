/* Device memory: allocations turned into Unified Memory, and the per-device accounting. */
#ifndef GS_MEMORY_H
#define GS_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda_api.h"

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

/* Moves this process's managed memory on the device in bulk, one prefetch per allocation, most
 * recently allocated first, on each context's own non-blocking stream: to the host every managed
 * allocation, waiting until it is there (DROP_EVICT), or back to the device the converted ones
 * that fit in 15/16 of it (a grant after a wait), waiting for them too unless
 * GEMSHARE_SWAP_IN_WAIT=0. For the client thread, while stream captures are held off. */
void gs_memory_migrate(int device, bool to_host);

/* Whether converted memory freed with cuMemFreeAsync still waits to be freed. */
bool gs_memory_deferred_pending(void);
/* Frees what of it the stream has reached, in each allocation's own context. For the client
 * thread, while stream captures are held off. */
void gs_memory_reap(void);

/* The context was destroyed or reset: its allocations are gone. */
void gs_memory_forget_context(CUcontext ctx);

void gs_memory_after_fork_child(void);

#endif
