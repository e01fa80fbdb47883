/* What the client thread knows of its conversation with the scheduler: the connection, the
 * registration, the mode and the lock of each device (lock_core.h), and what it watches of each
 * device. One struct, owned by client.c and handed to lock.c and handoff.c; only the client
 * thread touches it, and a forked child replaces it whole with GS_SESSION_INITIAL. */
#ifndef GS_SESSION_H
#define GS_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "base/device_bounds.h"
#include "lock/liveness.h"
#include "lock/lock_core.h"
#include "wire/conn.h"

/* What the client thread keeps of each device beside its lock's state (lock_core.h). */
struct gs_device_watch {
    bool uuid_sent;     /* DEVICE_UUID for this device went out on this connection */
    unsigned idle_seen; /* the device's submission count when last sampled */
    int64_t idle_since;
    /* When the device was last seen busy (a submission, or a synchronize that had to wait):
     * an early release tells the scheduler how long ago that was (LOCK_RELEASED's idle_us). */
    int64_t busy_seen;
    /* The work submitted before idle_since is known to have finished (a synchronize found it
     * so): idle time counted from then is time the GPU really had nothing to do. */
    bool idle_drained;
    bool keeping_sent; /* the outstanding request said REQUEST_KEEPING */
};

struct gs_session {
    struct gs_conn conn;
    bool registering;          /* REGISTER sent, REGISTERED not come yet */
    int64_t register_deadline;
    bool limits_heard;         /* LIMITS came on this connection */
    bool outage_reported;      /* the warning for this outage went out */
    bool ever_registered;
    struct gs_lock_core lock;  /* the mode and every device's lock */
    struct gs_liveness live;   /* whether the scheduler still answers */
    struct gs_device_watch devices[GS_GATED_DEVICES];
    int64_t last_mem_report;
    int64_t last_reap;
    /* Memory that went to staging memory must be back before the program runs without the lock
     * (mode off, no scheduler). Losing the scheduler while a move holds captures off (a frame
     * that cannot be sent) defers that to the end of the move, once captures are allowed. */
    bool moving;
    bool run_freely_pending;
};

#define GS_SESSION_INITIAL                                                                       \
    ((struct gs_session){.conn = GS_CONN_INITIAL,                                                \
                         .lock = GS_LOCK_CORE_INITIAL,                                           \
                         .last_mem_report = INT64_MIN / 2,                                       \
                         .last_reap = INT64_MIN / 2})

/* Whether frames may go out: connected, registered, the connection not broken, and the
 * scheduler answering. */
static inline bool gs_session_live(const struct gs_session *s)
{
    return s->conn.sock >= 0 && !s->conn.broken && !s->registering && !s->live.unanswered;
}

#endif
