/* What a change of lock does to this process's work and memory: the drain before a device is
 * handed on, the bulk moves a drop, an eviction or a grant asks for, and running freely when no
 * lock applies. Client thread only. */
#ifndef GS_HANDOFF_H
#define GS_HANDOFF_H

#include <stdbool.h>
#include <stdint.h>

#include "lock/session.h"

/* Closes the device's gate and lets this process's queued work there finish. True with stream
 * captures held off (gs_capture_allow() after): then the memory may move too. False, holding
 * nothing, when a capture still runs after a while: nothing is synchronized inside a capture. */
bool gs_handoff_quiesce(int device);

/* After gs_handoff_quiesce (quiet: what it said), moves `bytes` of the device's memory to the
 * host with progress frames, and says how it went in one MOVED with MOVED_DONE (0 bytes when
 * nothing could move). */
void gs_handoff_move_out(struct gs_session *s, int device, uint64_t bytes, bool quiet);

/* Drains the device and moves `bytes` out (none when 0): the whole of a drop or an eviction
 * before its answer. The gate of the device stays closed. */
void gs_handoff_drain(struct gs_session *s, int device, uint64_t bytes);

/* A grant: brings back what another holder may have pushed out, before the gate opens. */
void gs_handoff_move_back(struct gs_session *s, int device, uint32_t grant_flags);

/* No lock applies (mode off, no scheduler): staged memory comes back and every gate opens, at
 * the end of the move in progress if there is one. */
void gs_handoff_run_freely(struct gs_session *s);

#endif
