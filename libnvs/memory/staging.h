/* Pinned host memory that a move to the host copies device pages into (README.md, "Moving
 * memory"): a copy engine fills it at the link's speed, where the driver's own migration first
 * has to find and map fresh host pages. One pool per device, kept for the next move. For the
 * client thread only. */
#ifndef GS_STAGING_H
#define GS_STAGING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Grows the device's pool, if needed, so that pieces of these sizes can then be taken in this
 * order without growing it again (new pages are faulted in by several threads, then pinned),
 * as far as that is quicker than the driver migrating them at `migrate_bps` (0: always).
 * Returns how many of the pieces, from the first, can be taken; fewer when the host would not
 * give that much. A CUDA context must be current. */
size_t gs_staging_prepare(int device, const size_t *sizes, size_t n, double migrate_bps);

/* Starts faulting in, on a thread of its own, the host memory that `bytes` more would need
 * beyond the pool's free room, unless that is running or waiting already (or the driver
 * refused to pin such memory); `prepared` is called (on that thread) as each piece of it is
 * ready for gs_staging_adopt. Any thread that owns the pool. */
void gs_staging_prepare_ahead(int device, uint64_t bytes, void (*prepared)(void));
/* Whether memory is being prepared ahead, or waits to be pinned. */
bool gs_staging_preparing(int device);
/* Whether prepared memory waits to be pinned. */
bool gs_staging_has_prepared(int device);
/* Pins a piece of what was prepared ahead into the pool (nothing when it is not ready); true
 * while more waits to be pinned. A CUDA context must be current. */
bool gs_staging_adopt(int device);

/* The next `size` contiguous bytes of the device's pool (size at most GS_STAGING_PIECE), growing
 * it if needed; NULL when the host has no more to give. */
void *gs_staging_take(int device, size_t size);
#define GS_STAGING_PIECE (256ull << 20)

/* Everything taken from the device's pool is free again (its contents are back on the device). */
void gs_staging_reset(int device);

/* How many of these pieces, from the first, fit in what the pool has ready now (pinned and
 * free), without growing it: the part of a move that finds staging memory prepared ahead. */
size_t gs_staging_ready_for(int device, const size_t *sizes, size_t n);

/* Gives pinned blocks back to the host, the newest first, as long as at least `keep` bytes stay
 * pinned and no piece taken since the last gs_staging_reset lies in the block; and memory
 * prepared ahead that is not pinned yet, while nothing waits in the pool. Returns the bytes
 * given back. A CUDA context must be current. */
uint64_t gs_staging_trim(int device, uint64_t keep);

/* Bytes pinned for the device in blocks no piece has been taken from since the last reset. */
uint64_t gs_staging_spare(int device);

/* Bytes pinned for the device. */
uint64_t gs_staging_pinned(int device);

void gs_staging_after_fork_child(void);

#endif
