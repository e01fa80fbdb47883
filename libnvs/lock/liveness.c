/* Liveness of the scheduler (liveness.h; README.md, "Scheduler stops answering"). */
#include "lock/liveness.h"

#include "base/config.h"
#include "base/log.h"
#include "lock/session.h"
#include "wire/conn.h"

static unsigned gs_ping_after_ms(void)
{
    return gs_config()->scheduler_timeout_ms / 4;
}

bool gs_liveness_heard(struct gs_session *s, int64_t now)
{
    struct gs_liveness *l = &s->live;
    l->quiet_since = now;
    l->pinging = false;
    if (!l->unanswered)
        return true;
    /* Whatever the scheduler had queued for the old conversation (a grant, a drop) is stale:
     * it has forgotten nothing, while this side has run unscheduled since. A fresh registration
     * sets both sides straight; the scheduler frees the old connection's locks as it closes. */
    gs_warn("the scheduler at %s answers again after %lld ms running unscheduled; rejoining it",
            gs_config()->socket_path, (long long)(now - l->silent_since));
    l->unanswered = false;
    l->silence_told = false;
    gs_conn_reset_backoff(&s->conn);
    gs_conn_fail(&s->conn, "rejoining a scheduler that answers again");
    return false;
}

static bool gs_owed_an_answer(const struct gs_session *s)
{
    return gs_session_live(s) && gs_lock_core_waits_or_holds(&s->lock);
}

bool gs_liveness_overdue(struct gs_session *s, int64_t now)
{
    struct gs_liveness *l = &s->live;
    if (l->unanswered || !gs_owed_an_answer(s)) {
        l->watching = false;
        return false;
    }
    if (!l->watching) {
        l->watching = true;
        l->quiet_since = now;
        l->pinging = false;
    }
    if (!l->pinging) {
        if (now - l->quiet_since >= gs_ping_after_ms()) {
            struct gs_ping m = {++l->token};
            if (gs_conn_send(&s->conn, GS_MSG_PING, &m, sizeof m)) {
                l->pinging = true;
                l->ping_sent = now;
            }
        }
        return false;
    }
    return now - l->ping_sent >= gs_config()->scheduler_timeout_ms;
}

void gs_liveness_give_up(struct gs_session *s, int64_t now)
{
    struct gs_liveness *l = &s->live;
    gs_warn("the scheduler at %s has not answered for %lld ms (GEMSHARE_SCHEDULER_TIMEOUT_MS=%u); "
            "running unscheduled, still connected, until it answers again",
            gs_config()->socket_path, (long long)(now - l->quiet_since),
            gs_config()->scheduler_timeout_ms);
    l->unanswered = true;
    l->silence_told = true;
    l->silent_since = now; /* the line that it answers again counts the time run unscheduled */
    l->watching = false;
    /* The outage has had its line: a connection that breaks meanwhile adds none. */
    s->outage_reported = true;
}

void gs_liveness_connected(struct gs_session *s)
{
    struct gs_liveness *l = &s->live;
    *l = (struct gs_liveness){.token = l->token, .silence_told = l->silence_told};
}

void gs_liveness_registered(struct gs_session *s)
{
    if (!s->live.silence_told)
        return;
    s->live.silence_told = false;
    gs_warn("a scheduler at %s answers again (the one that stopped answering was replaced); "
            "registered with it", gs_config()->socket_path);
}

int64_t gs_liveness_due(const struct gs_session *s)
{
    const struct gs_liveness *l = &s->live;
    if (l->unanswered || !gs_owed_an_answer(s))
        return INT64_MAX;
    if (!l->watching)
        return 0;
    if (!l->pinging)
        return l->quiet_since + gs_ping_after_ms();
    return l->ping_sent + gs_config()->scheduler_timeout_ms;
}
