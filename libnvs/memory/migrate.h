/* Moving a device's managed memory in bulk: to the host to make room for another process, back to
 * the device when the lock returns (README.md, "Moving memory"). For the client thread only,
 * while stream captures are held off, but for gs_migrate_populate and gs_migrate_unpopulated. */
#ifndef GS_MIGRATE_H
#define GS_MIGRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/cuda_api.h"

/* What one move did. */
struct gs_move {
    uint64_t bytes;      /* arrived where they were sent (to the device without waiting: queued) */
    uint64_t elapsed_us; /* from the first prefetch to the last arrival (or the last queued),
                          * less the time staging memory took to pin */
    size_t ranges;       /* prefetched ranges, the split one included */
    bool waited;         /* it waited until the memory arrived */
    bool failed;         /* the driver refused part of it: the rest stays where it was */
};

/* While a move lasts, called at least every GS_MOVE_PROGRESS_MS with what has arrived so far. */
#define GS_MOVE_PROGRESS_MS 250
struct gs_move_progress {
    void (*report)(void *arg, int device, uint64_t bytes, uint64_t elapsed_us);
    void *arg;
};

/* Moves `bytes` (GS_EVICT_ALL: all) of this process's managed memory on the device to the host
 * (converted memory by copy to staging memory where it can), the program's own managed memory
 * included, least recently allocated first, and waits until it is there. What moved out since
 * the lock was last granted is not moved again. Cold memory (cold.h) goes first, all of it, by
 * migration. */
struct gs_move gs_migrate_out(int device, uint64_t bytes, const struct gs_move_progress *progress);

/* Copies what went to staging memory back (always waiting: it is not on the device until then),
 * then brings the converted allocations back, newest first, as many as fit in 15/16 of the
 * device, waiting until they are there unless GEMSHARE_SWAP_IN_WAIT=0. */
struct gs_move gs_migrate_in(int device, const struct gs_move_progress *progress);

/* A move may soon ask for `bytes` (more than 0) out: staging memory for all of the converted
 * memory on the device that is not staged yet is faulted in on a thread of its own, which then
 * wakes the client thread to pin it with gs_migrate_pin_prepared, a piece at a time; the first
 * move out then runs at the copy's speed. A move out does the same for what it left behind, and
 * so does the end of a preparation for memory allocated meanwhile. */
void gs_migrate_prepare(int device, uint64_t bytes);
/* Whether prepared staging memory waits to be pinned. */
bool gs_migrate_prepared(void);
/* Pins it. Client thread, while captures are held off. */
void gs_migrate_pin_prepared(void);

/* Whether some device holds staging memory that nothing waits in, or pinned blocks past what
 * waits (gs_migrate_relieve may give them back). */
bool gs_migrate_staging_unused(void);
/* Staging memory that nothing waits in goes back to the host beyond what may have to leave the
 * device (the last gs_migrate_prepare, or a move out since), and all of it once other programs'
 * growth eats into the memory kept free below the host's or the cgroup's limit: it would be
 * what the OOM killer takes; then too the blocks of a pool that something waits in past what
 * waits there. Client thread, while captures are held off. */
void gs_migrate_relieve(void);

/* Whether some of the device's memory waits in staging memory: the program must not run on that
 * device before gs_migrate_in or gs_migrate_restore_all. */
bool gs_migrate_staged(int device);
/* Copies everything staged back, on every device: before the program runs without the lock. */
void gs_migrate_restore_all(void);

/* A new converted allocation: its pages are asked for on the device at once when the process
 * may run there and it fits in what the device has free; else it is left for the next grant.
 * Any thread (the program's, in its allocation). */
void gs_migrate_populate(CUdeviceptr ptr, size_t size, int device);
/* Whether converted memory allocated while the process could not run on the device waits to be
 * brought there (gs_migrate_in does; gs_migrate_granted forgets it). */
bool gs_migrate_unpopulated(int device);

/* Bytes moved to the host since the lock was last granted that come back at the next grant:
 * cold memory (cold.h) stays on the host. */
uint64_t gs_migrate_moved_out(int device);
/* Bytes of cold memory moved to the host since the lock was last granted, counted (the first
 * time each allocation left): they stay there at the grant. */
uint64_t gs_migrate_left_on_host(int device);
/* The lock is granted again: what moved out is counted from here. */
void gs_migrate_granted(int device);

void gs_migrate_after_fork_child(void);

#endif
