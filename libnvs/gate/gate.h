/* The gates work submissions pass, one per device. A device's gate is open while this process
 * holds that device's lock, or needs none (mode off, no scheduler); closed otherwise. While all
 * of the process's contexts are on one device (the common case) the open path is one atomic load
 * of that device, an atomic add and a load on entry and one atomic add on exit: no lock, no
 * system call, no clock, no lookup. Only a process with contexts on several devices finds each
 * call's device (its stream's context, else the current one), on the slow path. */
#ifndef GS_GATE_H
#define GS_GATE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "base/device_bounds.h"
#include "cuda/driver.h"
#include "gate/contexts.h"
/* The gate of work on a device past GS_GATED_DEVICES, or on none the driver can name: always
 * open, so that it only counts. */
#define GS_GATE_UNGATED GS_GATED_DEVICES

struct gs_gate {
    /* Hooked submissions: the low 32 bits count those between enter and exit, the high 32 bits
     * those done so far (sampled for idle release; only compared, so wrapping is harmless). One
     * word lets exit count and leave in one atomic add. */
    atomic_ullong calls;
    atomic_int open;
    atomic_int requested; /* a blocked thread wants the lock */
    atomic_int keeping;   /* threads blocked here keep gates of lower devices entered */
} __attribute__((aligned(64)));

extern struct gs_gate gs_gates[GS_GATED_DEVICES + 1];
#define GS_GATE_LEAVE_AND_COUNT ((1ull << 32) - 1)

/* Enters the gate of the process's only device; that device if it was open. Otherwise -1: the
 * caller must call gs_gate_wait (kept apart so that the call's stream is worked out on the slow
 * path only). */
static inline int gs_gate_enter(void)
{
    int d = atomic_load(&gs_contexts_sole_device);
    if (__builtin_expect(d >= 0 && d < GS_GATED_DEVICES, 1)) {
        atomic_fetch_add(&gs_gates[d].calls, 1);
        if (__builtin_expect(atomic_load(&gs_gates[d].open), 1))
            return d;
        atomic_fetch_sub(&gs_gates[d].calls, 1);
    }
    return -1;
}

/* The slow path: finds the device of the call, waits for its gate, and returns it entered. */
int gs_gate_wait(enum gs_variant variant, CUstream stream);

/* Work that may touch two devices (a copy between them): the gates of the call's device and of
 * both sides, entered in device order, each kept while waiting for the next unless a drop
 * closes it. */
struct gs_gates_entered {
    int count;
    int gate[3];
};
struct gs_gates_entered gs_gate_wait_span(enum gs_variant variant, CUstream stream, int side_a,
                                          int side_b);
void gs_gate_exit_span(struct gs_gates_entered entered);
/* The device a side of a copy is on, for gs_gate_wait_span: that of a context, or of device
 * memory (-1 for host memory, a pointer the driver does not know, or none). */
int gs_side_context(CUcontext ctx);
int gs_side_pointer(CUdeviceptr ptr);
/* A side of a copy that names its kind of memory: a pointer's device for device or unified
 * memory, none for host memory and arrays. */
int gs_side_typed(CUmemorytype type, CUdeviceptr ptr);
/* The side `side` (src or dst) of a CUDA_MEMCPY2D/3D structure, which may be NULL. */
#define GS_SIDE_OF(copy, side)                                                                   \
    ((copy) ? gs_side_typed((copy)->side##MemoryType, (copy)->side##Device) : -1)

static inline void gs_gate_exit(int gate)
{
    atomic_fetch_add(&gs_gates[gate].calls, GS_GATE_LEAVE_AND_COUNT);
}

/* For the client thread; device < GS_GATED_DEVICES. */
void gs_gate_open(int device);
void gs_gate_close(int device);
void gs_gate_open_all(void);
void gs_gate_close_all(void);
/* From now on the device's gate stays open: no lock can be had for it. */
void gs_gate_ungate(int device);
bool gs_gate_is_open(int device); /* any device; true past the gated ones */
void gs_gate_wait_drained(int device); /* until no hooked submission is in flight there */
unsigned gs_gate_in_flight(int device);
unsigned gs_gate_submitted(int device);
/* Whether a thread waits at the device's closed gate, or asked for the lock since the last call
 * (the ask is cleared). */
bool gs_gate_wanted(int device);
/* Whether a thread waits for the device keeping lower devices' gates (REQUEST_KEEPING). */
bool gs_gate_keeping(int device);

void gs_gate_after_fork_child(void);

#endif
