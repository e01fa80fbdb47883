/* The client thread: one per process, started at the first CUDA use. It connects and registers,
 * runs one poll() loop over the socket and the wake-up descriptor, hands each frame to the lock
 * state machine (lock.c), sends memory reports, reaps deferred frees, and fails open whenever the
 * scheduler is gone, retrying in the background. */
#define _GNU_SOURCE
#include "client/client.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/process.h"
#include "client/gang.h"
#include "gate/capture.h"
#include "gate/contexts.h"
#include "gate/gate.h"
#include "gate/mps.h"
#include "gate/registration.h"
#include "gate/wake.h"
#include "lock/identity.h"
#include "lock/liveness.h"
#include "lock/lock.h"
#include "lock/session.h"
#include "memory/memory.h"
#include "memory/migrate.h"

#define GS_MEM_REPORT_INTERVAL_MS 100
#define GS_REAP_INTERVAL_MS 100
#define GS_STRICT_WAIT_MS 3000

/* The client thread's own; a forked child replaces it whole. */
static struct gs_session gs_session = GS_SESSION_INITIAL;

/* Whether this process started its client; application threads read it. */
static struct {
    atomic_int started;
    pthread_mutex_t mu; /* one start at a time */
} gs_start = {0, PTHREAD_MUTEX_INITIALIZER};

/* Fail open: run unscheduled, say so once per outage, and retry with backoff. */
static void gs_disconnect(struct gs_session *s, const char *why)
{
    const struct gs_config *cfg = gs_config();
    bool was_registered = !s->registering;
    gs_conn_close(&s->conn, gs_now_ms());
    s->registering = false;
    gs_lock_connection_lost(s);
    if (!s->outage_reported && !(cfg->require && !s->ever_registered)) {
        if (s->ever_registered && was_registered)
            gs_warn("lost the scheduler at %s (%s); running unscheduled until it is back",
                    cfg->socket_path, why);
        else
            gs_warn("no scheduler at %s (%s); running unscheduled and retrying in the background",
                    cfg->socket_path, why);
        s->outage_reported = true;
    } else {
        gs_debug("scheduler at %s: %s", cfg->socket_path, why);
    }
    gs_registration_attempt_over(false, why);
}

/* A failed send or read, or a frame that ends the conversation, marked the connection broken. */
static void gs_fail_if_broken(struct gs_session *s)
{
    if (s->conn.sock >= 0 && s->conn.broken) {
        char why[sizeof s->conn.failure];
        memcpy(why, s->conn.failure, sizeof why);
        gs_disconnect(s, why);
    }
}

static void gs_connect(struct gs_session *s)
{
    const struct gs_config *cfg = gs_config();
    if (cfg->socket_too_long) {
        s->registering = true;
        gs_disconnect(s, "GEMSHARE_SOCKET is too long for a Unix socket path");
        return;
    }
    char why[128];
    s->registering = true;
    if (!gs_conn_open(&s->conn, cfg->socket_path, why, sizeof why)) {
        gs_disconnect(s, why);
        return;
    }
    for (int d = 0; d < GS_GATED_DEVICES; d++)
        s->devices[d].uuid_sent = false;
    s->limits_heard = false;
    gs_mps_forget();
    gs_liveness_connected(s);
    s->register_deadline = gs_now_ms() + GS_REGISTER_TIMEOUT_MS;
    struct gs_register m = {.device = 0,
                            .flags = (cfg->unified_memory ? GS_REG_UNIFIED_MEMORY : 0) |
                                     (cfg->mps ? 0 : GS_REG_NO_MPS)};
    gs_process_describe(&m);
    gs_conn_send(&s->conn, GS_MSG_REGISTER, &m, sizeof m);
    /* Before any lock request: the scheduler grants a gang member's locks with its gang's. */
    const struct gs_gang *gang = gs_gang();
    if (gang)
        gs_conn_send(&s->conn, GS_MSG_GANG, gang, sizeof *gang);
}

/* How often the host's and the cgroup's free memory is looked at while staging memory sits
 * unused: other programs' growth must find it given back before their limit is reached. */
#define GS_STAGING_WATCH_MS 40
static int64_t gs_last_staging_watch;

static int gs_poll_timeout(const struct gs_session *s, int64_t now)
{
    int64_t due = INT64_MAX;
    if (s->conn.sock < 0)
        due = s->conn.next_retry;
    else if (s->registering)
        due = s->register_deadline;
    if (gs_session_live(s) && gs_memory_has_changes() &&
        s->last_mem_report + GS_MEM_REPORT_INTERVAL_MS < due)
        due = s->last_mem_report + GS_MEM_REPORT_INTERVAL_MS;
    if (s->last_reap + GS_REAP_INTERVAL_MS < due && gs_memory_deferred_pending())
        due = s->last_reap + GS_REAP_INTERVAL_MS;
    if (gs_last_staging_watch + GS_STAGING_WATCH_MS < due && gs_migrate_staging_unused())
        due = gs_last_staging_watch + GS_STAGING_WATCH_MS;
    int64_t idle_due = gs_lock_idle_due(s, now);
    if (idle_due < due)
        due = idle_due;
    int64_t live_due = gs_liveness_due(s);
    if (live_due < due)
        due = live_due;
    if (due == INT64_MAX)
        return -1;
    return due <= now ? 0 : (int)(due - now);
}

/* Frees converted memory whose cuMemFreeAsync its stream has reached. Otherwise only the
 * program's next allocation, free or cuMemGetInfo would, and reports would overstate until then.
 * Never inside a capture: captures wait while it runs. */
static void gs_reap_freed(struct gs_session *s, int64_t now)
{
    if (now - s->last_reap < GS_REAP_INTERVAL_MS || !gs_memory_deferred_pending())
        return;
    s->last_reap = now;
    if (!gs_capture_hold_off(0))
        return;
    gs_memory_reap();
    gs_capture_allow();
}

/* Staging memory faulted in ahead (gs_migrate_prepare) is pinned here, on the client thread,
 * which knows the contexts; never inside a capture. */
static void gs_pin_prepared(void)
{
    if (!gs_migrate_prepared() || !gs_capture_hold_off(0))
        return;
    gs_migrate_pin_prepared();
    gs_capture_allow();
}

static void gs_watch_staging(int64_t now)
{
    if (now - gs_last_staging_watch < GS_STAGING_WATCH_MS || !gs_migrate_staging_unused())
        return;
    gs_last_staging_watch = now;
    if (!gs_capture_hold_off(0))
        return;
    gs_migrate_relieve();
    gs_capture_allow();
}

static void gs_handle_frame(void *arg, const struct gs_header *h, const uint8_t *payload)
{
    struct gs_session *s = arg;
    if (gs_liveness_heard(s, gs_now_ms()))
        gs_lock_handle(s, h, payload);
}

static void gs_check_liveness(struct gs_session *s, int64_t now)
{
    if (!gs_liveness_overdue(s, now))
        return;
    /* Frames may have come while this thread was busy (a drain, a move): heard first. */
    gs_conn_receive(&s->conn, gs_handle_frame, s);
    if (s->conn.sock >= 0 && !s->conn.broken && gs_liveness_overdue(s, now)) {
        gs_liveness_give_up(s, now);
        gs_lock_connection_lost(s);
    }
}

static void gs_service(struct gs_session *s, int64_t now)
{
    gs_reap_freed(s, now); /* before a report, which then has the freed memory gone */
    /* A launch waiting for the lock asks before the next piece of staging memory is pinned: a
     * pin can take over half a second while other programs fault their pools in. (Only a live
     * session sends.) */
    gs_lock_request_wanted(s);
    gs_pin_prepared();
    gs_watch_staging(now);
    if (s->conn.sock < 0) {
        if (now >= s->conn.next_retry || gs_registration_take_retry_now())
            gs_connect(s);
        return;
    }
    if (s->registering) {
        if (now >= s->register_deadline)
            gs_disconnect(s, "no answer to REGISTER");
        return;
    }
    if (gs_memory_has_changes() && now - s->last_mem_report >= GS_MEM_REPORT_INTERVAL_MS) {
        gs_lock_send_mem_reports(s, false);
        s->last_mem_report = now;
    }
    gs_lock_check_idle(s, now);
    gs_check_liveness(s, now);
}

static void *gs_client_main(void *arg)
{
    struct gs_session *s = arg;
    gs_connect(s);
    for (;;) {
        gs_service(s, gs_now_ms());
        gs_fail_if_broken(s);
        struct pollfd fds[2] = {{gs_wake_fd(), POLLIN, 0}, {s->conn.sock, POLLIN, 0}};
        int n = poll(fds, s->conn.sock >= 0 ? 2 : 1, gs_poll_timeout(s, gs_now_ms()));
        if (n <= 0)
            continue;
        if (fds[0].revents & POLLIN)
            gs_wake_drain();
        if (s->conn.sock >= 0 && fds[1].revents)
            gs_conn_receive(&s->conn, gs_handle_frame, s);
        gs_fail_if_broken(s);
    }
    return NULL;
}

static void gs_after_fork_child(void)
{
    /* The child has no client thread and must never use the parent's connection or lock: it
     * starts over at its own first CUDA use. */
    if (gs_session.conn.sock >= 0)
        close(gs_session.conn.sock);
    gs_session = GS_SESSION_INITIAL;
    pthread_mutex_init(&gs_start.mu, NULL);
    atomic_store(&gs_start.started, 0);
    gs_wake_after_fork_child();
    gs_registration_after_fork_child();
    gs_gate_after_fork_child();
    gs_capture_after_fork_child();
    gs_contexts_after_fork_child();
    gs_memory_after_fork_child();
    gs_migrate_after_fork_child();
    gs_identity_after_fork_child();
}

void gs_client_start(void)
{
    if (atomic_load_explicit(&gs_start.started, memory_order_acquire))
        return;
    pthread_mutex_lock(&gs_start.mu);
    if (atomic_load(&gs_start.started)) {
        pthread_mutex_unlock(&gs_start.mu);
        return;
    }
    static bool handlers_registered; /* survives fork: the child inherits the handlers */
    if (!handlers_registered) {
        pthread_atfork(NULL, NULL, gs_after_fork_child);
        /* Runs before the driver's own destructors (registered earlier, run later). */
        atexit(gs_contexts_stop);
        handlers_registered = true;
    }
    const struct gs_config *cfg = gs_config();
    const struct gs_gang *gang = gs_gang();
    int fd = gs_wake_create();
    gs_registration_expect();
    pthread_t thread;
    sigset_t all, old;
    sigfillset(&all);
    /* Our thread blocks every signal: the program's handlers must never run on it. */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    /* Closed until the first connection attempt decides: no work slips out unscheduled. */
    gs_gate_close_all();
    gs_debug("starting the client: socket %s, unified memory %s, idle release %u ms",
             cfg->socket_path, cfg->unified_memory ? "on" : "off", cfg->idle_release_ms);
    if (gang)
        gs_debug("one of %u processes here (%u in all) of job %s: its locks go with theirs",
                 gang->local_size, gang->world_size, gang->name);
    int err = fd < 0 ? errno : pthread_create(&thread, NULL, gs_client_main, &gs_session);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        gs_registration_never();
        gs_gate_open_all();
        gs_warn("cannot start the scheduler client (%s); running unscheduled", strerror(err));
    } else {
        pthread_setname_np(thread, "gemshare");
        pthread_detach(thread);
    }
    atomic_store_explicit(&gs_start.started, 1, memory_order_release);
    pthread_mutex_unlock(&gs_start.mu);
}

bool gs_client_allow_init(void)
{
    gs_client_start();
    const struct gs_config *cfg = gs_config();
    if (!cfg->require) {
        /* The scheduler says at registration whether the program goes through MPS, and the
         * driver reads that when it starts: so it starts once the first attempt is over. */
        gs_registration_wait_first_attempt();
        gs_mps_apply();
        return true;
    }
    char failure[160];
    bool ok = gs_registration_wait_registered(GS_STRICT_WAIT_MS, failure,
                                              sizeof failure);
    if (ok)
        gs_mps_apply();
    else
        gs_warn("GEMSHARE_REQUIRE_SCHEDULER=1 and no gemshare scheduler answers at %s (%s): CUDA "
                "initialization fails with CUDA_ERROR_SYSTEM_NOT_READY. Start gemshare-scheduler, "
                "point GEMSHARE_SOCKET at it, or unset GEMSHARE_REQUIRE_SCHEDULER.",
                cfg->socket_path, failure);
    return ok;
}
