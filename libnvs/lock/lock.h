/* The lock's side of the client thread: each frame from the scheduler becomes an event of the
 * state machine (lock_core.h), whose actions it carries out; the requests the gates' waiters call
 * for; early release. Every device's lock is its own. Client thread only; a step that cannot
 * send marks the connection broken and the client thread fails open right after it. */
#ifndef GS_LOCK_H
#define GS_LOCK_H

#include "lock/session.h"
#include "wire/wire.h"

/* Handles one well-formed frame from the scheduler. */
void gs_lock_handle(struct gs_session *s, const struct gs_header *h, const uint8_t *payload);

/* Asks for each device whose gate has waiters and whose lock nobody asked for yet. */
void gs_lock_request_wanted(struct gs_session *s);
/* Early release of every device held and idle for long enough (README.md, "Early release"). */
void gs_lock_check_idle(struct gs_session *s, int64_t now);
/* The soonest time (ms) gs_lock_check_idle wants to run again; INT64_MAX: never. */
int64_t gs_lock_idle_due(const struct gs_session *s, int64_t now);

/* The connection is gone: no lock is held or asked for, and the program runs freely. */
void gs_lock_connection_lost(struct gs_session *s);
/* Reports memory usage of the devices that changed since the last report (all: every device
 * used), each device's DEVICE_UUID first. */
void gs_lock_send_mem_reports(struct gs_session *s, bool all);

#endif
