/* The gate every work submission passes. Open while this process holds the GPU lock, or needs
 * none (mode off, no scheduler); closed otherwise. The open path is two seq_cst atomics on entry
 * and two on exit: no lock, no system call, no clock. */
#ifndef GS_GATE_H
#define GS_GATE_H

#include <stdatomic.h>
#include <stdbool.h>

extern atomic_int gs_gate_is_open;
extern atomic_long gs_gate_inflight;        /* hooked submissions between enter and exit */
extern atomic_ulong gs_gate_submissions;    /* submissions so far, sampled for idle release */

void gs_gate_wait(void);

static inline void gs_gate_enter(void)
{
    atomic_fetch_add(&gs_gate_inflight, 1);
    if (__builtin_expect(atomic_load(&gs_gate_is_open), 1))
        return;
    gs_gate_wait();
}

static inline void gs_gate_exit(void)
{
    /* Counted before the in-flight decrement: whoever sees no call in flight also sees its count. */
    atomic_fetch_add_explicit(&gs_gate_submissions, 1, memory_order_relaxed);
    atomic_fetch_sub(&gs_gate_inflight, 1);
}

/* For the client thread. */
void gs_gate_open(void);
void gs_gate_close(void);
void gs_gate_wait_drained(void); /* until no hooked submission is in flight */
int gs_gate_waiters(void);       /* threads blocked at the closed gate */
bool gs_gate_take_request(void); /* whether a blocked thread asked for the lock (and clear it) */

void gs_gate_after_fork_child(void);

#endif
