/* Whether the program goes through the scheduler's MPS server: the scheduler says so (MPS,
 * before REGISTERED) on the client thread, and cuInit acts on it before the driver starts,
 * which is when the driver reads CUDA_MPS_PIPE_DIRECTORY. */
#ifndef GS_MPS_H
#define GS_MPS_H

#include <stddef.h>

/* Client thread: a registration begins; what an earlier one said no longer holds. */
void gs_mps_forget(void);
/* Client thread: the scheduler sends the program through the daemon at pipe_directory (a
 * field of pipe_size bytes, not always terminated), with this share of the SMs (0: all) and
 * this client priority (GS_MPS_PRIORITY_*). */
void gs_mps_offer(const char *pipe_directory, size_t pipe_size, unsigned percentage,
                  unsigned priority);
/* Before the real cuInit, once the first registration attempt is over: put the program's own
 * environment in line with the offer, once; later calls change nothing. */
void gs_mps_apply(void);

#endif
