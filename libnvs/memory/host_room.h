/* How much host memory staging may still take without pushing this process, or others beside it
 * in its memory cgroup, toward the OOM killer (README.md, "Out by copy"). */
#ifndef GS_HOST_ROOM_H
#define GS_HOST_ROOM_H

#include <stdbool.h>
#include <stdint.h>

/* What the host and every memory cgroup above this process (cgroup v2 memory.max, v1
 * memory.limit_in_bytes) have free now, less a floor kept for the programs' own growth: 1/16 of
 * the tightest limit (or of the host's memory), at least GS_HOST_FLOOR. UINT64_MAX when nothing
 * can be read. Read afresh at every call: other programs use the same memory. */
uint64_t gs_host_room(void);
#define GS_HOST_FLOOR (128ull << 20)

/* Whether the others' growth has eaten a quarter of the floor since: staging memory that nothing
 * waits in should go back to the host now, before the limit is reached. `*room` gets
 * gs_host_room's figure from the same reading. */
bool gs_host_pressed(uint64_t *room);

/* Between these, one thread of the host at a time reads the room and faults in what it takes
 * (a file lock, GS_HOST_ROOM_LOCK, shared by every program that stages): programs that read the
 * same free memory at once would each take all of it. Waits for the others. A claim for a move
 * that waits (urgent) goes first: claims made ahead, for moves that may come, step aside while
 * one is waiting anywhere on the host (GS_HOST_URGENT_LOCK), for at most GS_HOST_YIELD_MS. */
void gs_host_claim_begin(bool urgent);
void gs_host_claim_end(bool urgent);
#ifndef GS_HOST_ROOM_LOCK /* a check of its own names others */
#define GS_HOST_ROOM_LOCK "/tmp/.gemshare-staging.lock"
#define GS_HOST_URGENT_LOCK "/tmp/.gemshare-staging-urgent.lock"
#endif
#define GS_HOST_YIELD_MS 2000

void gs_host_room_after_fork_child(void);

/* The tightest limit found by the last gs_host_room (the host's memory when no cgroup limits
 * it), and whether it was a cgroup's: for the warning that says why staging stopped. */
uint64_t gs_host_room_limit(void);
int gs_host_room_limit_is_cgroup(void);

#endif
