/* The lock's I/O shell: decodes each frame into an event of the state machine (lock_core.c) and
 * carries out the actions it returns, in order: frames, gates, drains and moves (handoff.c). Also
 * the requests the gates' waiters call for, memory reports, and early release, which needs the
 * GPU's answer (a synchronize) before the core hears of it. */
#include "lock/lock.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "gate/capture.h"
#include "gate/contexts.h"
#include "gate/gate.h"
#include "gate/mps.h"
#include "gate/registration.h"
#include "lock/handoff.h"
#include "lock/identity.h"
#include "lock/liveness.h"
#include "memory/memory.h"
#include "memory/migrate.h"

/* A synchronization that takes longer than this found the GPU still busy. */
#define GS_BUSY_SYNC_MS 2
/* How soon into an idle gap a floor hint's idle time is checked against the GPU (below). */
#define GS_IDLE_PROBE_MS 100

static const char *gs_mode_name(uint32_t mode)
{
    return mode == GS_MODE_OFF ? "off" : mode == GS_MODE_ON ? "on" : "auto";
}

static const char *gs_frame_name(uint32_t type)
{
    return type == GS_MSG_LOCK_GRANTED  ? "LOCK_GRANTED"
           : type == GS_MSG_DROP_LOCK   ? "DROP_LOCK"
           : type == GS_MSG_LOCK_REVOKED ? "LOCK_REVOKED"
                                         : "IDLE_HINT";
}

/* Once per connection and device, as soon as CUDA is up and before the device's first lock
 * request or report: which physical GPU it is, so that the scheduler can key it by that GPU
 * whatever CUDA_VISIBLE_DEVICES says. */
static void gs_send_device_uuid(struct gs_session *s, int device)
{
    struct gs_device_watch *w = &s->devices[device];
    if (w->uuid_sent || !gs_session_live(s))
        return;
    struct gs_device_uuid m = {(uint32_t)device, 0, {0}};
    gs_identity_uuid(device, m.gpu_uuid, sizeof m.gpu_uuid);
    if (m.gpu_uuid[0] != '\0' && gs_conn_send(&s->conn, GS_MSG_DEVICE_UUID, &m, sizeof m)) {
        w->uuid_sent = true;
        gs_debug("device %d is %s", device, m.gpu_uuid);
    }
}

/* The registered device's UUID goes first, whichever device is named first: the scheduler
 * renumbers the process by it only before its first lock request. */
static void gs_identify(struct gs_session *s, int device)
{
    gs_send_device_uuid(s, GS_REGISTERED_DEVICE);
    if (device < GS_GATED_DEVICES)
        gs_send_device_uuid(s, device);
}

void gs_lock_send_mem_reports(struct gs_session *s, bool all)
{
    struct gs_mem_usage usage[GS_MAX_DEVICES];
    int n = gs_memory_changes(usage, all);
    for (int i = 0; i < n && gs_session_live(s); i++) {
        gs_identify(s, (int)usage[i].device);
        struct gs_mem_report m = {usage[i].device, 0, usage[i].allocated, usage[i].total};
        gs_conn_send(&s->conn, GS_MSG_MEM_REPORT, &m, sizeof m);
    }
}

static void gs_send_request(struct gs_session *s, int device)
{
    gs_identify(s, device);
    /* Memory allocated just before the first launch must be known to the scheduler when it
     * decides the grant, or it makes no room for it. */
    if (gs_memory_has_changes()) {
        gs_lock_send_mem_reports(s, false);
        s->last_mem_report = gs_now_ms();
    }
    bool keeping = gs_gate_keeping(device);
    struct gs_request_lock m = {(uint32_t)device, keeping ? GS_REQUEST_KEEPING : 0};
    s->devices[device].keeping_sent = keeping;
    if (gs_conn_send(&s->conn, GS_MSG_REQUEST_LOCK, &m, sizeof m))
        gs_debug("requested the lock of device %d%s", device,
                 keeping ? ", keeping lower devices for a copy between them" : "");
}

static void gs_open(struct gs_session *s, int device, uint32_t grant_flags)
{
    gs_handoff_move_back(s, device, grant_flags);
    struct gs_device_watch *w = &s->devices[device];
    w->idle_seen = gs_gate_submitted(device);
    w->idle_since = w->busy_seen = gs_now_ms();
    w->idle_drained = false;
    gs_gate_open(device);
}

/* Nothing is submitted to the device after the LOCK_RELEASED frame: its gate stays closed until
 * the next grant. */
static void gs_release(struct gs_session *s, int device, uint32_t reason, uint64_t bytes)
{
    gs_handoff_drain(s, device, bytes);
    struct gs_lock_released m = {(uint32_t)device, reason, 0};
    if (gs_conn_send(&s->conn, GS_MSG_LOCK_RELEASED, &m, sizeof m))
        gs_debug("released the lock of device %d (%s)", device,
                 reason == GS_RELEASE_DROPPED ? "dropped" : "revoked");
}

static void gs_carry_out(struct gs_session *s, const struct gs_lock_actions *todo)
{
    for (int i = 0; i < todo->count; i++) {
        const struct gs_lock_action *a = &todo->list[i];
        switch (a->kind) {
        case GS_DO_REQUEST:
            gs_send_request(s, a->device);
            break;
        case GS_DO_OPEN:
            gs_open(s, a->device, a->value);
            break;
        case GS_DO_RELEASE:
            gs_release(s, a->device, a->value, a->bytes);
            break;
        case GS_DO_EVICT:
            gs_handoff_drain(s, a->device, a->bytes);
            break;
        case GS_DO_EVICT_NOTHING: {
            gs_debug("EVICT of %llu bytes on device %d: nothing to do here",
                     (unsigned long long)a->bytes, a->device);
            struct gs_moved m = {(uint32_t)a->device, GS_MOVED_TO_HOST | GS_MOVED_DONE, 0, 0};
            gs_conn_send(&s->conn, GS_MSG_MOVED, &m, sizeof m);
            break;
        }
        case GS_DO_PREPARE:
            gs_migrate_prepare(a->device, a->bytes);
            break;
        case GS_DO_CLOSE_ALL:
            gs_gate_close_all();
            break;
        case GS_DO_RUN_FREELY:
            gs_handoff_run_freely(s);
            break;
        case GS_DO_UNGATE:
            gs_gate_ungate(a->device);
            gs_warn("the scheduler at %s refused the lock of CUDA device %d (%s); work on that "
                    "device runs without the GPU lock, beside other processes",
                    gs_config()->socket_path, a->device, s->conn.failure);
            break;
        case GS_DO_IGNORE:
            gs_debug("%s for device %d, whose lock this process does not hold: ignored",
                     gs_frame_name(a->value), a->device);
            break;
        }
    }
}

void gs_lock_request_wanted(struct gs_session *s)
{
    struct gs_lock_actions todo = {0};
    for (int d = 0; d < GS_GATED_DEVICES; d++) {
        if (!gs_gate_wanted(d) || !gs_session_live(s))
            continue;
        /* A copy between devices came to wait behind a plain request: say it keeps its lower
         * devices now (the scheduler takes a repeat with the flag as that). */
        if (s->lock.devices[d].state == GS_LOCK_REQUESTED && gs_gate_keeping(d) &&
            !s->devices[d].keeping_sent)
            gs_send_request(s, d);
        else
            gs_lock_core_wanted(&s->lock, d, &todo);
    }
    gs_carry_out(s, &todo);
}

static void gs_on_registered(struct gs_session *s, const struct gs_registered *m)
{
    if (!s->registering) {
        gs_conn_fail(&s->conn, "a second REGISTERED");
        return;
    }
    /* LIMITS comes before REGISTERED when a limit applies: none means none, also for a limit
     * kept from an earlier connection. */
    if (!s->limits_heard)
        gs_memory_set_limit((struct gs_memory_limit){0, 0});
    struct gs_lock_actions todo = {0};
    gs_lock_core_registered(&s->lock, m->mode, &todo);
    gs_carry_out(s, &todo);
    s->registering = false;
    gs_conn_reset_backoff(&s->conn);
    if (s->outage_reported || s->ever_registered)
        gs_debug("rejoined the scheduler at %s", gs_config()->socket_path);
    s->outage_reported = false;
    s->ever_registered = true;
    gs_liveness_registered(s);
    gs_debug("registered as client %llu; mode %s, quantum %u s",
             (unsigned long long)m->client_id, gs_mode_name(m->mode), m->tq_seconds);
    gs_registration_attempt_over(true, NULL);
    gs_lock_send_mem_reports(s, true);
    gs_lock_request_wanted(s);
}

static void gs_on_error(struct gs_session *s, const struct gs_header *h, const uint8_t *payload)
{
    struct gs_error m;
    memcpy(&m, payload, sizeof m);
    int text_len = (int)(h->length - sizeof m);
    char why[GS_MAX_ERROR_TEXT + 64];
    snprintf(why, sizeof why, "the scheduler said: %.*s (error %u)", text_len,
             (const char *)payload + sizeof m, m.code);
    gs_conn_fail(&s->conn, why);
    struct gs_lock_actions todo = {0};
    gs_lock_core_error(&s->lock, m.code, &todo);
    gs_carry_out(s, &todo);
}

void gs_lock_handle(struct gs_session *s, const struct gs_header *h, const uint8_t *payload)
{
    /* Fixed-size payloads are copied out: the receive buffer need not be aligned for them. */
    union {
        struct gs_registered registered;
        struct gs_lock_granted granted;
        struct gs_drop_lock drop; /* LOCK_REVOKED is its first 8 bytes */
        struct gs_evict evict;
        struct gs_idle_hint idle_hint;
        struct gs_limits limits;
        struct gs_mps mps;
        struct gs_sched_mode mode;
    } m;
    memset(&m, 0, sizeof m);
    size_t fixed = gs_wire_fixed_size(h->type);
    if (fixed > 0 && fixed <= sizeof m)
        memcpy(&m, payload, fixed);
    bool unified = gs_config()->unified_memory;
    struct gs_lock_actions todo = {0};
    switch (h->type) {
    case GS_MSG_REGISTERED:
        gs_on_registered(s, &m.registered);
        return;
    case GS_MSG_LOCK_GRANTED:
        gs_debug("granted the lock of device %u for %llu ms%s%s%s", m.granted.device,
                 (unsigned long long)m.granted.quantum_ms,
                 m.granted.flags & GS_GRANT_AFTER_WAIT ? ", after waiting" : "",
                 m.granted.flags & GS_GRANT_SHARED ? ", shared" : "",
                 m.granted.flags & GS_GRANT_OTHERS_RAN ? ", others ran" : "");
        gs_lock_core_granted(&s->lock, m.granted.device, m.granted.flags, &todo);
        break;
    case GS_MSG_DROP_LOCK:
    case GS_MSG_LOCK_REVOKED:
        gs_lock_core_drop(&s->lock, m.drop.device, m.drop.evict_bytes,
                          h->type == GS_MSG_LOCK_REVOKED, &todo);
        break;
    case GS_MSG_EVICT:
        gs_lock_core_evict(&s->lock, m.evict.device, m.evict.bytes, unified, &todo);
        break;
    case GS_MSG_IDLE_HINT:
        gs_debug("idle hint %u ms for device %u, %llu bytes to move out at a drop",
                 m.idle_hint.idle_release_ms, m.idle_hint.device,
                 (unsigned long long)m.idle_hint.evict_bytes);
        gs_lock_core_idle_hint(&s->lock, m.idle_hint.device, m.idle_hint.idle_release_ms,
                               m.idle_hint.evict_bytes, unified, &todo);
        break;
    case GS_MSG_LIMITS:
        s->limits_heard = true;
        gs_memory_set_limit((struct gs_memory_limit){m.limits.memory_limit,
                                                     m.limits.budget_used});
        return;
    case GS_MSG_MPS:
        if (!s->registering) {
            gs_conn_fail(&s->conn, "MPS after REGISTERED");
            return;
        }
        gs_debug("through MPS at %.*s, SM share %u%%, priority %u",
                 (int)sizeof m.mps.pipe_directory, m.mps.pipe_directory,
                 m.mps.active_thread_percentage, m.mps.client_priority);
        gs_mps_offer(m.mps.pipe_directory, sizeof m.mps.pipe_directory,
                     m.mps.active_thread_percentage, m.mps.client_priority);
        return;
    case GS_MSG_SCHED_MODE:
        gs_debug("scheduler mode %s, quantum %u s", gs_mode_name(m.mode.mode),
                 m.mode.tq_seconds);
        gs_lock_core_mode(&s->lock, m.mode.mode, &todo);
        break;
    case GS_MSG_ERROR:
        gs_on_error(s, h, payload);
        return;
    }
    gs_carry_out(s, &todo);
    /* A lock given back, or a mode that needs locks, may leave waiters to ask for. */
    if (h->type == GS_MSG_DROP_LOCK || h->type == GS_MSG_LOCK_REVOKED ||
        h->type == GS_MSG_SCHED_MODE)
        gs_lock_request_wanted(s);
}

void gs_lock_connection_lost(struct gs_session *s)
{
    struct gs_lock_actions todo = {0};
    gs_lock_core_lost(&s->lock, &todo);
    gs_carry_out(s, &todo);
}

/* Early release of one device: nothing submitted there for the idle time, nothing in flight,
 * its GPU work done. */
static void gs_check_idle_device(struct gs_session *s, int d, int64_t now)
{
    struct gs_device_watch *w = &s->devices[d];
    unsigned idle_ms = gs_lock_core_idle_ms(&s->lock, d, gs_config()->idle_release_ms);
    if (idle_ms == 0)
        return;
    unsigned seen = gs_gate_submitted(d);
    if (seen != w->idle_seen || gs_gate_in_flight(d) > 0) {
        w->idle_seen = seen;
        w->idle_since = w->busy_seen = now;
        w->idle_drained = false;
        return;
    }
    /* Idle time counts from the last submission, but the work queued then may have kept the
     * GPU busy for most of it (a program that queues a pass and sleeps). Where the scheduler
     * hinted that a handoff costs a swap (a hint from the floor up), that is not enough: the
     * idle time must run from a moment the GPU is known to be done. A synchronize early in the
     * gap finds that moment, and the idle time starts over from there; were it made only once
     * the idle time had passed, the gap would have to last twice the hint to be let go. */
    bool floor = s->lock.devices[d].idle_hint_ms >= GS_IDLE_HINT_FLOOR_MS;
    unsigned due = floor && !w->idle_drained && idle_ms > GS_IDLE_PROBE_MS ? GS_IDLE_PROBE_MS
                                                                           : idle_ms;
    if (now - w->idle_since < due)
        return;
    /* Synchronize with the gate still open (the program may go on), and never in a capture. */
    if (!gs_capture_hold_off(0)) {
        w->idle_since = now;
        return;
    }
    int64_t start = gs_now_ms();
    gs_contexts_synchronize(d);
    gs_capture_allow();
    int64_t end = gs_now_ms();
    if (end - start > GS_BUSY_SYNC_MS || gs_gate_submitted(d) != seen) {
        /* The GPU was busy until just now: idle time counts from here. */
        w->idle_drained = gs_gate_submitted(d) == seen;
        w->idle_seen = gs_gate_submitted(d);
        w->idle_since = w->busy_seen = end;
        return;
    }
    /* A hint below the floor says the handoff is cheap and someone waits: idle time since the
     * last submission is enough. */
    if (floor && !w->idle_drained) {
        w->idle_drained = true;
        w->idle_since = end;
        return;
    }
    gs_gate_close(d);
    if (gs_gate_in_flight(d) > 0 || gs_gate_submitted(d) != seen) {
        gs_gate_open(d);
        w->idle_since = w->busy_seen = end;
        return;
    }
    /* The idle time the scheduler dates the gap from: since the device was last seen busy,
     * which the double wait above does not reset. */
    uint64_t idle_us = (uint64_t)(end - w->busy_seen) * 1000u;
    struct gs_lock_released m = {(uint32_t)d, GS_RELEASE_IDLE, idle_us};
    if (gs_conn_send(&s->conn, GS_MSG_LOCK_RELEASED, &m, sizeof m)) {
        gs_lock_core_released_idle(&s->lock, d);
        gs_debug("released the lock of device %d early: idle for %llu ms (hint %u ms)", d,
                 (unsigned long long)(idle_us / 1000u), idle_ms);
    }
    gs_lock_request_wanted(s);
}

void gs_lock_check_idle(struct gs_session *s, int64_t now)
{
    for (int d = 0; d < GS_GATED_DEVICES && gs_session_live(s); d++)
        gs_check_idle_device(s, d, now);
}

int64_t gs_lock_idle_due(const struct gs_session *s, int64_t now)
{
    int64_t due = INT64_MAX;
    for (int d = 0; d < GS_GATED_DEVICES; d++) {
        unsigned idle_ms = gs_lock_core_idle_ms(&s->lock, d, gs_config()->idle_release_ms);
        if (idle_ms == 0)
            continue;
        int64_t tick = now + (idle_ms / 4 > 50 ? 50 : idle_ms / 4 + 1);
        if (tick < due)
            due = tick;
    }
    return due;
}
