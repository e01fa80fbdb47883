/* The library's environment, read once at the first CUDA use (never in the constructor). */
#ifndef GS_CONFIG_H
#define GS_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#define GS_MAX_MOVE_STREAMS 16

struct gs_config {
    bool single_oversub; /* GEMSHARE_ENABLE_SINGLE_OVERSUB=1 */
    bool require;        /* GEMSHARE_REQUIRE_SCHEDULER=1 */
    bool unified_memory; /* GEMSHARE_UNIFIED_MEMORY (default 1) */
    bool swap_in_wait;   /* GEMSHARE_SWAP_IN_WAIT (default 1) */
    bool move_copy;      /* GEMSHARE_MOVE_COPY (default 1): moves out copy to pinned memory */
    bool populate;       /* GEMSHARE_POPULATE (default 1): new converted memory is prefetched */
    unsigned idle_release_ms; /* GEMSHARE_IDLE_RELEASE_MS (default 250; 0 disables) */
    /* GEMSHARE_STAGING_MAX_MIB: the most host memory pinned to stage moves out, all devices
     * together (0: none, moves go by the driver's migration); UINT64_MAX when unset. */
    uint64_t staging_max;
    unsigned move_streams;    /* GEMSHARE_MOVE_STREAMS (default 4, 1 to GS_MAX_MOVE_STREAMS) */
    unsigned scheduler_timeout_ms; /* GEMSHARE_SCHEDULER_TIMEOUT_MS (default 10000) */
    char socket_path[108];    /* GEMSHARE_SOCKET, else the default path */
    bool socket_too_long;     /* GEMSHARE_SOCKET does not fit a Unix socket address */
    char pod_name[256];       /* POD_NAME */
    char pod_namespace[64];   /* POD_NAMESPACE */
    char label[64];           /* GEMSHARE_LABEL, for the scheduler's rules */
    bool mps;                 /* GEMSHARE_MPS (default 1): 0 keeps the program out of MPS */
};

const struct gs_config *gs_config(void);

#endif
