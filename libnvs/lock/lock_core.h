/* The lock state machine without I/O: events in (a frame's content, a waiter at a gate, the
 * connection lost, an idle release made), actions out, in the order the client thread must carry
 * them out. No sockets, CUDA, threads or clock: a test drives it alone (tests/libnvs/
 * lock_core_check.c). The state of each device's lock is an entry of an array, so a grant of
 * several devices at once is several events. */
#ifndef GS_LOCK_CORE_H
#define GS_LOCK_CORE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/device_bounds.h"
#include "wire/gemshare_protocol.h"
/* The device named in REGISTER: the one whose lock every scheduler can give. */
#define GS_REGISTERED_DEVICE 0

enum gs_lock_state { GS_LOCK_NONE, GS_LOCK_REQUESTED, GS_LOCK_HELD };

struct gs_lock_device {
    enum gs_lock_state state;
    unsigned idle_hint_ms; /* the scheduler's IDLE_HINT for this grant; 0: none */
    /* The scheduler refused this device's lock by ending the connection (a scheduler that can
     * name only the registered device's GPU): it runs ungated from then on rather than make
     * every reconnection fail the same way. */
    bool refused;
};

struct gs_lock_core {
    uint32_t mode;
    struct gs_lock_device devices[GS_GATED_DEVICES];
};

#define GS_LOCK_CORE_INITIAL {.mode = GS_MODE_ON}

enum gs_lock_action_kind {
    GS_DO_REQUEST,       /* send the device's REQUEST_LOCK (after its DEVICE_UUID and reports) */
    GS_DO_OPEN,          /* bring back what moved out (flags: the grant's), open the gate */
    GS_DO_RELEASE,       /* drain the device, move `bytes` out (0: none), send LOCK_RELEASED */
    GS_DO_EVICT,         /* drain the device, move `bytes` out, answer MOVED */
    GS_DO_EVICT_NOTHING, /* answer MOVED: 0 bytes moved */
    GS_DO_PREPARE,       /* stage memory ahead for moves out of up to `bytes` (0: none) */
    GS_DO_CLOSE_ALL,     /* close every gate: locks are needed from now on */
    GS_DO_RUN_FREELY,    /* no lock applies: open every gate */
    GS_DO_UNGATE,        /* the device's gate stays open for good (and say why) */
    GS_DO_IGNORE,        /* nothing: a frame that crossed our own release (for the debug log) */
};

struct gs_lock_action {
    enum gs_lock_action_kind kind;
    int device;
    uint32_t value; /* OPEN: the grant's flags; RELEASE: the reason */
    uint64_t bytes;
};

#define GS_LOCK_MAX_ACTIONS (GS_GATED_DEVICES + 2)
struct gs_lock_actions {
    int count;
    struct gs_lock_action list[GS_LOCK_MAX_ACTIONS];
};

/* Registration: the mode it says; every lock starts over (a new connection). */
void gs_lock_core_registered(struct gs_lock_core *c, uint32_t mode, struct gs_lock_actions *out);
/* SCHED_MODE. */
void gs_lock_core_mode(struct gs_lock_core *c, uint32_t mode, struct gs_lock_actions *out);
/* A thread waits at the device's closed gate (the connection is up and registered). */
void gs_lock_core_wanted(struct gs_lock_core *c, int device, struct gs_lock_actions *out);
void gs_lock_core_granted(struct gs_lock_core *c, uint32_t device, uint32_t flags,
                          struct gs_lock_actions *out);
/* DROP_LOCK (evict_bytes) or LOCK_REVOKED (revoked). */
void gs_lock_core_drop(struct gs_lock_core *c, uint32_t device, uint64_t evict_bytes,
                       bool revoked, struct gs_lock_actions *out);
/* EVICT; unified: whether allocations are converted (otherwise nothing can move). */
void gs_lock_core_evict(struct gs_lock_core *c, uint32_t device, uint64_t bytes, bool unified,
                        struct gs_lock_actions *out);
void gs_lock_core_idle_hint(struct gs_lock_core *c, uint32_t device, unsigned idle_release_ms,
                            uint64_t evict_bytes, bool unified, struct gs_lock_actions *out);
/* ERROR: the scheduler ends the connection (the connection lost follows). */
void gs_lock_core_error(struct gs_lock_core *c, uint32_t code, struct gs_lock_actions *out);
/* The connection is gone. */
void gs_lock_core_lost(struct gs_lock_core *c, struct gs_lock_actions *out);
/* The client thread released the device early (it was idle) and said so. */
void gs_lock_core_released_idle(struct gs_lock_core *c, int device);

/* How long the device may sit idle before an early release: `own` (GEMSHARE_IDLE_RELEASE_MS; 0:
 * never, whatever the hint), bounded by the grant's hint: one from GS_IDLE_HINT_FLOOR_MS up is a
 * floor (a handoff would swap memory: keep the lock through shorter gaps), a shorter one a
 * ceiling (someone waits and a handoff is cheap: let go sooner). 0 when not held. */
unsigned gs_lock_core_idle_ms(const struct gs_lock_core *c, int device, unsigned own);
bool gs_lock_core_holds(const struct gs_lock_core *c, int device);
bool gs_lock_core_holds_any(const struct gs_lock_core *c);
/* Whether any device's lock is held or asked for: the scheduler owes this process answers. */
bool gs_lock_core_waits_or_holds(const struct gs_lock_core *c);

#endif
