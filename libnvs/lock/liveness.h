/* Whether the scheduler still answers. A connection that stays open tells nothing: a scheduler
 * stopped (SIGSTOP, a deadlock, a host stuck in I/O) keeps its socket, and a client waiting for
 * a grant would wait forever. So while this process waits for a grant or holds a lock, a quarter
 * of GEMSHARE_SCHEDULER_TIMEOUT_MS without a frame sends PING, and a PING that no frame follows
 * within the whole timeout makes the client run unscheduled. It keeps the connection: the first
 * frame that comes later means the scheduler answers again, and the client starts a fresh
 * connection (a new registration; its locks asked for again) rather than guess which of the
 * stale conversation's frames still hold. Client thread only; part of the session. */
#ifndef GS_LIVENESS_H
#define GS_LIVENESS_H

#include <stdbool.h>
#include <stdint.h>

struct gs_session;

struct gs_liveness {
    bool watching;      /* waiting for a grant or holding a lock: an answer is owed */
    int64_t quiet_since; /* the last frame heard, or when watching began if later */
    bool pinging;       /* a PING went out after the last frame heard */
    int64_t ping_sent;
    uint64_t token;
    bool unanswered;    /* the scheduler stopped answering: running unscheduled */
    int64_t silent_since; /* when this side gave up on it (its "has not answered" line) */
    /* The outage had its "not answered" line and awaits its "answers again" one, over a new
     * connection if this one broke meanwhile (a scheduler killed by its watchdog). */
    bool silence_told;
};

/* A frame came from the scheduler. False when it must not be acted on: it is the first after
 * the scheduler stopped answering, and the connection is being replaced. */
bool gs_liveness_heard(struct gs_session *s, int64_t now);
/* Sends PING when the time since the last frame calls for one; true once a PING has gone
 * unanswered for the whole timeout. The caller then reads what may have come meanwhile (the
 * client thread may have been busy draining or moving) and asks again before giving up. */
bool gs_liveness_overdue(struct gs_session *s, int64_t now);
/* The scheduler stopped answering: one stderr line, and the session marked unanswered. The
 * caller then lets every lock go (gs_lock_connection_lost): the program runs unscheduled. */
void gs_liveness_give_up(struct gs_session *s, int64_t now);
/* A new connection: nothing is owed on it yet. */
void gs_liveness_connected(struct gs_session *s);
/* Registered: closes an outage that began with silence, in one line. */
void gs_liveness_registered(struct gs_session *s);
/* The soonest time (ms) gs_liveness_overdue wants to run again; INT64_MAX: never. */
int64_t gs_liveness_due(const struct gs_session *s);

#endif
