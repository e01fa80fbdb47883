/* Allocations the program cleared whole to zeros, as an inference server clears the KV cache it
 * sized to the card at start: most of such memory is never touched again, so at a grant it
 * stays on the host and page faults bring the parts the program uses; a move out migrates it,
 * which moves only the pages that came back, and never stages it (README.md, "Cold memory"). */
#ifndef GS_COLD_H
#define GS_COLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/cuda_api.h"
#include "memory/memory.h"

/* A clearing smaller than this says nothing: small buffers cost nothing to move back. */
#define GS_COLD_MIN_BYTES (64ull << 20)
/* A clearing counts as whole when it leaves at most this much of the allocation's end out: a
 * caching allocator rounds large blocks up to 2 MiB and clears only the tensor. */
#define GS_COLD_SLACK (2ull << 20)

/* A memset of `bytes` at dst was queued (`zero`: of zeros). Any thread: one comparison, and for
 * a large clearing an atomic add and three stores. */
void gs_cold_note_set(CUdeviceptr dst, bool zero, size_t bytes);

/* Client thread, from here on. Takes in the clearings noted since, against the device's
 * allocations (`list`, `n`: all of them), and forgets allocations no longer in it. */
void gs_cold_refresh(int device, const struct gs_managed *list, size_t n);
/* Whether the allocation (by stamp) is cold. */
bool gs_cold_is(int device, uint64_t stamp);
/* Whether it went to the host since it became cold: its pages there are no longer counted as
 * on the device (those the program faulted back are the driver's to know). */
bool gs_cold_away(int device, uint64_t stamp);
void gs_cold_sent_away(int device, uint64_t stamp);

void gs_cold_after_fork_child(void);

#endif
