/* Wakes the client thread: the gate's slow path, the memory code and the staging threads tell it
 * that something needs its attention (a lock to ask for, usage to report, memory to reap or to
 * pin). Kept apart from the client so that those parts depend on this small file only. */
#ifndef GS_WAKE_H
#define GS_WAKE_H

/* Makes the wake-up descriptor (before the client thread starts); -1 with errno on failure. */
int gs_wake_create(void);
/* The descriptor the client thread polls; -1 before gs_wake_create. */
int gs_wake_fd(void);
/* Clears pending wake-ups: for the client thread, after poll() said the descriptor is ready. */
void gs_wake_drain(void);
/* Tells the client thread to look at the gate and memory: one write, from any thread; nothing
 * before the client starts. */
void gs_wake(void);

/* In a forked child: the parent's descriptor is closed, and none exists until the child starts
 * a client of its own. */
void gs_wake_after_fork_child(void);

#endif
