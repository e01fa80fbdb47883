/* The gate every work submission passes. Open while this process holds the GPU lock, or needs
 * none (mode off, no scheduler); closed otherwise. The open path is an atomic add and a load on
 * entry and one atomic add on exit: no lock, no system call, no clock. */
#ifndef GS_GATE_H
#define GS_GATE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "driver.h"

extern atomic_int gs_gate_is_open;
/* Hooked submissions: the low 32 bits count those between enter and exit, the high 32 bits those
 * done so far (sampled for idle release; only compared, so wrapping is harmless). One word lets
 * exit count and leave in one atomic add. */
extern atomic_ullong gs_gate_calls;
#define GS_GATE_LEAVE_AND_COUNT ((1ull << 32) - 1)

/* Enters; true if the gate was open. Otherwise the caller must call gs_gate_wait (kept apart so
 * that the call's stream is worked out on the slow path only). */
static inline bool gs_gate_enter(void)
{
    atomic_fetch_add(&gs_gate_calls, 1);
    return __builtin_expect(atomic_load(&gs_gate_is_open), 1);
}

/* The slow path: returns once the call may go ahead, entered. */
void gs_gate_wait(enum gs_variant variant, CUstream stream);

static inline void gs_gate_exit(void)
{
    atomic_fetch_add(&gs_gate_calls, GS_GATE_LEAVE_AND_COUNT);
}

static inline unsigned gs_gate_in_flight(void)
{
    return (unsigned)(atomic_load(&gs_gate_calls) & 0xffffffffu);
}

static inline unsigned gs_gate_submitted(void)
{
    return (unsigned)(atomic_load(&gs_gate_calls) >> 32);
}

/* For the client thread. */
void gs_gate_open(void);
void gs_gate_close(void);
void gs_gate_wait_drained(void); /* until no hooked submission is in flight */
int gs_gate_waiters(void);       /* threads blocked at the closed gate */
bool gs_gate_take_request(void); /* whether a blocked thread asked for the lock (and clear it) */

void gs_gate_after_fork_child(void);

#endif
