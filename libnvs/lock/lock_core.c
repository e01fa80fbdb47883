/* The lock state machine's rules (README.md, "The gate and the lock"). */
#include "lock/lock_core.h"

static void gs_do(struct gs_lock_actions *out, enum gs_lock_action_kind kind, int device,
                  uint32_t value, uint64_t bytes)
{
    if (out->count < GS_LOCK_MAX_ACTIONS)
        out->list[out->count++] = (struct gs_lock_action){kind, device, value, bytes};
}

static bool gs_lockable(uint32_t device)
{
    return device < GS_GATED_DEVICES;
}

static void gs_forget_locks(struct gs_lock_core *c)
{
    for (int d = 0; d < GS_GATED_DEVICES; d++)
        c->devices[d].state = GS_LOCK_NONE;
}

static void gs_apply_mode(struct gs_lock_core *c, uint32_t mode, bool fresh,
                          struct gs_lock_actions *out)
{
    uint32_t old = c->mode;
    c->mode = mode;
    if (mode == GS_MODE_OFF) {
        /* No lock exists in mode off: any we held or waited for is gone. */
        gs_forget_locks(c);
        gs_do(out, GS_DO_RUN_FREELY, -1, 0, 0);
    } else if (old == GS_MODE_OFF || fresh) {
        gs_forget_locks(c);
        gs_do(out, GS_DO_CLOSE_ALL, -1, 0, 0);
    }
}

void gs_lock_core_registered(struct gs_lock_core *c, uint32_t mode, struct gs_lock_actions *out)
{
    gs_apply_mode(c, mode, true, out);
}

void gs_lock_core_mode(struct gs_lock_core *c, uint32_t mode, struct gs_lock_actions *out)
{
    gs_apply_mode(c, mode, false, out);
}

void gs_lock_core_wanted(struct gs_lock_core *c, int device, struct gs_lock_actions *out)
{
    if (device < 0 || device >= GS_GATED_DEVICES || c->mode == GS_MODE_OFF)
        return;
    struct gs_lock_device *d = &c->devices[device];
    if (d->refused || d->state != GS_LOCK_NONE)
        return;
    d->state = GS_LOCK_REQUESTED;
    gs_do(out, GS_DO_REQUEST, device, 0, 0);
}

void gs_lock_core_granted(struct gs_lock_core *c, uint32_t device, uint32_t flags,
                          struct gs_lock_actions *out)
{
    if (!gs_lockable(device)) {
        gs_do(out, GS_DO_IGNORE, (int)device, GS_MSG_LOCK_GRANTED, 0);
        return;
    }
    c->devices[device].state = GS_LOCK_HELD;
    c->devices[device].idle_hint_ms = 0; /* each grant starts without a hint */
    gs_do(out, GS_DO_OPEN, (int)device, flags, 0);
}

void gs_lock_core_drop(struct gs_lock_core *c, uint32_t device, uint64_t evict_bytes,
                       bool revoked, struct gs_lock_actions *out)
{
    /* Not holding: it crossed our own release on the wire, and the scheduler has that;
     * answering could release a lock granted since. */
    if (!gs_lockable(device) || c->devices[device].state != GS_LOCK_HELD) {
        gs_do(out, GS_DO_IGNORE, (int)device,
              revoked ? GS_MSG_LOCK_REVOKED : GS_MSG_DROP_LOCK, 0);
        return;
    }
    /* Released once the frame goes out; a frame that cannot go out ends the connection, and
     * with it every lock. */
    c->devices[device].state = GS_LOCK_NONE;
    gs_do(out, GS_DO_RELEASE, (int)device, revoked ? GS_RELEASE_REVOKED : GS_RELEASE_DROPPED,
          revoked ? 0 : evict_bytes);
}

void gs_lock_core_evict(struct gs_lock_core *c, uint32_t device, uint64_t bytes, bool unified,
                        struct gs_lock_actions *out)
{
    /* EVICT comes only while we do not hold the device's lock, so its gate is closed already
     * (mode off has no lock and no evictions: the program runs freely there). */
    if (!gs_lockable(device) || c->devices[device].state == GS_LOCK_HELD ||
        c->mode == GS_MODE_OFF || !unified || bytes == 0) {
        gs_do(out, GS_DO_EVICT_NOTHING, (int)device, 0, bytes);
        return;
    }
    gs_do(out, GS_DO_EVICT, (int)device, 0, bytes);
}

void gs_lock_core_idle_hint(struct gs_lock_core *c, uint32_t device, unsigned idle_release_ms,
                            uint64_t evict_bytes, bool unified, struct gs_lock_actions *out)
{
    if (!gs_lockable(device)) {
        gs_do(out, GS_DO_IGNORE, (int)device, GS_MSG_IDLE_HINT, 0);
        return;
    }
    /* To a process that does not hold the device, only the move it may be asked for counts:
     * memory it left there may have to go when somebody else asks, and 0 says none will (its
     * staging memory can go back to the host). */
    if (c->devices[device].state == GS_LOCK_HELD)
        c->devices[device].idle_hint_ms = idle_release_ms;
    else if (!unified) {
        gs_do(out, GS_DO_IGNORE, (int)device, GS_MSG_IDLE_HINT, 0);
        return;
    }
    if (unified)
        gs_do(out, GS_DO_PREPARE, (int)device, 0, evict_bytes);
}

void gs_lock_core_error(struct gs_lock_core *c, uint32_t code, struct gs_lock_actions *out)
{
    /* A protocol error while a request for another device than the registered one waits is
     * that request refused. */
    for (int d = 0; d < GS_GATED_DEVICES && code == GS_ERROR_PROTOCOL; d++) {
        if (d == GS_REGISTERED_DEVICE || c->devices[d].state != GS_LOCK_REQUESTED)
            continue;
        c->devices[d].refused = true;
        gs_do(out, GS_DO_UNGATE, d, 0, 0);
    }
}

void gs_lock_core_lost(struct gs_lock_core *c, struct gs_lock_actions *out)
{
    gs_forget_locks(c);
    gs_do(out, GS_DO_RUN_FREELY, -1, 0, 0);
}

void gs_lock_core_released_idle(struct gs_lock_core *c, int device)
{
    if (device >= 0 && device < GS_GATED_DEVICES)
        c->devices[device].state = GS_LOCK_NONE;
}

unsigned gs_lock_core_idle_ms(const struct gs_lock_core *c, int device, unsigned own)
{
    if (!gs_lock_core_holds(c, device))
        return 0;
    unsigned hint = c->devices[device].idle_hint_ms;
    if (own == 0 || hint == 0)
        return own;
    if (hint >= GS_IDLE_HINT_FLOOR_MS)
        return hint > own ? hint : own;
    return hint < own ? hint : own;
}

bool gs_lock_core_holds(const struct gs_lock_core *c, int device)
{
    return device >= 0 && device < GS_GATED_DEVICES &&
           c->devices[device].state == GS_LOCK_HELD;
}

bool gs_lock_core_holds_any(const struct gs_lock_core *c)
{
    for (int d = 0; d < GS_GATED_DEVICES; d++)
        if (c->devices[d].state == GS_LOCK_HELD)
            return true;
    return false;
}

bool gs_lock_core_waits_or_holds(const struct gs_lock_core *c)
{
    for (int d = 0; d < GS_GATED_DEVICES; d++)
        if (c->devices[d].state != GS_LOCK_NONE)
            return true;
    return false;
}
