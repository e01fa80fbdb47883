/* The client thread: one per process, started at the first CUDA use. It owns the scheduler
 * connection (a poll() loop over the socket and an eventfd for wake-ups), the lock state, the
 * drain on drop-lock, the memory moves the scheduler asks for (done by migrate.c), early release
 * and memory reports. Without a scheduler it fails open and keeps trying. */
#define _GNU_SOURCE
#include "client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "capture.h"
#include "config.h"
#include "contexts.h"
#include "gate.h"
#include "identity.h"
#include "log.h"
#include "memory.h"
#include "migrate.h"
#include "wire.h"

#define GS_REGISTER_TIMEOUT_MS 2000
#define GS_SEND_TIMEOUT_MS 5000
#define GS_RETRY_FIRST_MS 100
#define GS_RETRY_MAX_MS 1000
#define GS_MEM_REPORT_INTERVAL_MS 100
#define GS_REAP_INTERVAL_MS 100
#define GS_CAPTURE_WAIT_MS 5000
#define GS_STRICT_WAIT_MS 3000
/* The longest a connection attempt takes: a connect blocked on a full backlog, then no answer. */
#define GS_FIRST_ATTEMPT_MS (GS_SEND_TIMEOUT_MS + GS_REGISTER_TIMEOUT_MS)
/* A synchronization that takes longer than this found the GPU still busy. */
#define GS_BUSY_SYNC_MS 2

enum gs_lock_state { GS_LOCK_NONE, GS_LOCK_REQUESTED, GS_LOCK_HELD };

/* Shared with application threads. */
static atomic_int gs_started;
static atomic_int gs_wake_fd = -1;
static atomic_int gs_retry_now;
static pthread_mutex_t gs_start_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t gs_status_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gs_status_cv = PTHREAD_COND_INITIALIZER;
static bool gs_registered;       /* under gs_status_mu */
static unsigned gs_attempts;     /* connection attempts finished, under gs_status_mu */
static atomic_bool gs_first_attempt_over; /* gs_attempts > 0, or no client thread */
static char gs_failure[160];     /* why the last attempt failed, under gs_status_mu */

/* The client thread's own. */
static int gs_sock = -1;
static bool gs_registering;
static bool gs_uuid_sent; /* DEVICE_UUID went out on this connection */
static bool gs_limits_heard; /* LIMITS came on this connection */
static int64_t gs_register_deadline;
static int64_t gs_next_retry;
static int gs_retry_ms = GS_RETRY_FIRST_MS;
static bool gs_outage_reported;
static bool gs_ever_registered;
static uint32_t gs_seq;
static uint32_t gs_mode = GS_MODE_ON;
static enum gs_lock_state gs_lock = GS_LOCK_NONE;
static int64_t gs_last_mem_report = INT64_MIN / 2;
static int64_t gs_last_reap = INT64_MIN / 2;
static unsigned gs_idle_seen;
static int64_t gs_idle_since;
/* The work submitted before gs_idle_since is known to have finished (a synchronize found it so):
 * idle time counted from then is time the GPU really had nothing to do. */
static bool gs_idle_drained;
static unsigned gs_idle_hint_ms; /* the scheduler's IDLE_HINT for this grant; 0: none */
static uint8_t gs_rbuf[2 * GS_WIRE_MAX_INBOUND];
static size_t gs_rlen;

static int64_t gs_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void gs_client_wake(void)
{
    int fd = atomic_load(&gs_wake_fd);
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t n = write(fd, &one, sizeof one);
        (void)n; /* a full counter already means "wake up" */
    }
}

static void gs_set_status(bool registered, const char *failure)
{
    pthread_mutex_lock(&gs_status_mu);
    gs_registered = registered;
    gs_attempts++;
    atomic_store_explicit(&gs_first_attempt_over, true, memory_order_release);
    if (failure)
        snprintf(gs_failure, sizeof gs_failure, "%s", failure);
    pthread_cond_broadcast(&gs_status_cv);
    pthread_mutex_unlock(&gs_status_mu);
}

static void gs_disconnect(const char *why);

static bool gs_send(uint16_t type, const void *payload, uint32_t len)
{
    uint8_t frame[sizeof(struct gs_header) + sizeof(struct gs_register)];
    size_t n = gs_wire_frame(frame, type, ++gs_seq, payload, len);
    for (size_t off = 0; off < n;) {
        ssize_t w = send(gs_sock, frame + off, n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            char why[96];
            snprintf(why, sizeof why, "sending failed: %s", strerror(errno));
            gs_disconnect(why);
            return false;
        }
        off += (size_t)w;
    }
    return true;
}

/* Once per connection, as soon as CUDA is up and before the first lock request: which physical
 * GPU our device 0 is, so that the scheduler keys us by it whatever CUDA_VISIBLE_DEVICES says. */
static void gs_send_device_uuid(void)
{
    if (gs_uuid_sent || gs_sock < 0 || gs_registering)
        return;
    struct gs_device_uuid m = {0, 0, {0}};
    gs_identity_uuid(m.gpu_uuid, sizeof m.gpu_uuid);
    if (m.gpu_uuid[0] != '\0' && gs_send(GS_MSG_DEVICE_UUID, &m, sizeof m)) {
        gs_uuid_sent = true;
        gs_debug("device 0 is %s", m.gpu_uuid);
    }
}

static void gs_send_mem_reports(bool all)
{
    gs_send_device_uuid();
    struct gs_mem_usage usage[GS_MAX_DEVICES];
    int n = gs_memory_changes(usage, all);
    for (int i = 0; i < n && gs_sock >= 0; i++) {
        struct gs_mem_report m = {usage[i].device, 0, usage[i].allocated, usage[i].total};
        gs_send(GS_MSG_MEM_REPORT, &m, sizeof m);
    }
}

/* Asks for the lock when a thread waits at the gate and nobody asked yet. */
static void gs_maybe_request(void)
{
    bool wanted = gs_gate_take_request() || gs_gate_waiters() > 0;
    if (!wanted || gs_sock < 0 || gs_registering || gs_mode == GS_MODE_OFF ||
        gs_lock != GS_LOCK_NONE)
        return;
    gs_send_device_uuid();
    /* Memory allocated just before the first launch must be known to the scheduler when it
     * decides the grant, or it makes no room for it. */
    if (gs_memory_has_changes()) {
        gs_send_mem_reports(false);
        gs_last_mem_report = gs_now_ms();
    }
    struct gs_request_lock m = {0, 0};
    if (gs_send(GS_MSG_REQUEST_LOCK, &m, sizeof m)) {
        gs_lock = GS_LOCK_REQUESTED;
        gs_debug("requested the GPU lock");
    }
}

/* Closes the gate and lets this process's queued work finish. True with stream captures held
 * off (gs_capture_allow() after): then the memory may move too. False, holding nothing, when a
 * capture still runs after GS_CAPTURE_WAIT_MS: nothing is synchronized inside a capture. */
static bool gs_quiesce(void)
{
    gs_gate_close();
    gs_gate_wait_drained();
    if (!gs_capture_hold_off(GS_CAPTURE_WAIT_MS)) {
        gs_debug("a CUDA graph capture is still running after %d ms; going on without "
                 "synchronizing or moving memory (never inside a capture)",
                 GS_CAPTURE_WAIT_MS);
        return false;
    }
    gs_contexts_synchronize();
    return true;
}

static void gs_send_moved(uint32_t device, uint32_t flags, uint64_t bytes, uint64_t elapsed_us)
{
    struct gs_moved m = {device, flags, bytes, elapsed_us};
    if (gs_sock >= 0)
        gs_send(GS_MSG_MOVED, &m, sizeof m);
}

static void gs_report_progress_out(int device, uint64_t bytes, uint64_t elapsed_us)
{
    gs_send_moved((uint32_t)device, GS_MOVED_TO_HOST, bytes, elapsed_us);
}

/* A drop that comes while memory is still coming back is answered once it is here: progress
 * tells the scheduler the holder is moving, not hung. */
static void gs_report_progress_in(int device, uint64_t bytes, uint64_t elapsed_us)
{
    gs_send_moved((uint32_t)device, 0, bytes, elapsed_us);
}

/* Memory that went to staging memory must be back before the program runs without the lock (mode
 * off, no scheduler). Losing the scheduler while a move holds captures off (a frame that cannot
 * be sent) defers that to the end of the move, once captures are allowed again. */
static bool gs_moving, gs_run_freely_pending;
#define GS_RESTORE_CAPTURE_WAIT_MS 10000

static void gs_restore_staged(void)
{
    bool staged = false;
    for (int d = 0; d < GS_MAX_DEVICES && !staged; d++)
        staged = gs_migrate_staged(d);
    if (!staged)
        return;
    bool quiet = gs_capture_hold_off(GS_RESTORE_CAPTURE_WAIT_MS);
    if (!quiet)
        gs_warn("a CUDA graph capture has run for %d ms: copying memory moved off the GPU back "
                "beside it, before the program's next GPU work",
                GS_RESTORE_CAPTURE_WAIT_MS);
    gs_migrate_restore_all();
    if (quiet)
        gs_capture_allow();
}

static void gs_run_freely(void)
{
    if (gs_moving) {
        gs_run_freely_pending = true;
        return;
    }
    gs_restore_staged();
    gs_gate_open();
}

/* After a move, with captures allowed again. */
static void gs_moved_on(void)
{
    gs_moving = false;
    if (gs_run_freely_pending) {
        gs_run_freely_pending = false;
        if (gs_lock != GS_LOCK_HELD)
            gs_run_freely();
    }
}

/* After gs_quiesce succeeded (quiet), moves `bytes` to the host with progress frames, and says
 * how it went in one MOVED with MOVED_DONE (0 bytes when nothing could move). */
static void gs_move_out(uint32_t device, uint64_t bytes, bool quiet)
{
    struct gs_move done = {0};
    if (quiet && bytes > 0 && gs_config()->unified_memory)
        done = gs_migrate_out((int)device, bytes, gs_report_progress_out);
    gs_send_moved(device, GS_MOVED_TO_HOST | GS_MOVED_DONE | (done.failed ? GS_MOVED_FAILED : 0),
                  done.bytes, done.elapsed_us);
}

/* Stops submissions, lets what is queued finish, moves evict_bytes to the host for the next
 * holder, and hands the lock back. Nothing is submitted after the LOCK_RELEASED frame: the gate
 * stays closed until the next grant. */
static void gs_release(uint32_t device, uint32_t reason, uint64_t evict_bytes)
{
    gs_moving = true;
    bool quiet = gs_quiesce();
    if (evict_bytes > 0)
        gs_move_out(device, evict_bytes, quiet);
    if (quiet)
        gs_capture_allow();
    gs_moved_on();
    struct gs_lock_released m = {device, reason};
    if (gs_send(GS_MSG_LOCK_RELEASED, &m, sizeof m)) {
        gs_lock = GS_LOCK_NONE;
        gs_debug("released the GPU lock (%s)", reason == GS_RELEASE_DROPPED  ? "dropped"
                                               : reason == GS_RELEASE_IDLE  ? "idle"
                                                                            : "revoked");
    }
    gs_maybe_request();
}

/* EVICT comes only while we do not hold the lock, so the gate is closed already (mode off has
 * no lock and no evictions: the program runs freely there). */
static void gs_evict(const struct gs_evict *m)
{
    if (gs_lock == GS_LOCK_HELD || gs_mode == GS_MODE_OFF || !gs_config()->unified_memory ||
        m->bytes == 0) {
        gs_debug("EVICT of %llu bytes: nothing to do here", (unsigned long long)m->bytes);
        gs_send_moved(m->device, GS_MOVED_TO_HOST | GS_MOVED_DONE, 0, 0);
        return;
    }
    gs_moving = true;
    bool quiet = gs_quiesce();
    gs_move_out(m->device, m->bytes, quiet);
    if (quiet)
        gs_capture_allow();
    gs_moved_on();
}

/* Another holder may have pushed our memory out: bring it back in bulk rather than page by page
 * (never into a capture: then faults do it, except for staged memory, which faults cannot bring
 * back). Before the gate opens: by default the program's kernels start once it has arrived, and
 * even with GEMSHARE_SWAP_IN_WAIT=0 the move is queued ahead of them, where a synchronize the
 * program calls covers it. */
static void gs_move_back(uint32_t device, uint32_t flags)
{
    uint64_t out = gs_migrate_moved_out((int)device);
    bool fresh = gs_migrate_unpopulated((int)device); /* allocated while we could not run */
    gs_migrate_granted((int)device);
    bool staged = gs_migrate_staged((int)device);
    if (!staged && ((out == 0 && !fresh && !(flags & GS_GRANT_OTHERS_RAN)) ||
                    !gs_config()->unified_memory))
        return;
    bool quiet = gs_capture_hold_off(staged ? GS_RESTORE_CAPTURE_WAIT_MS : 0);
    if (!quiet && !staged) {
        gs_debug("a CUDA graph capture is running: no prefetch, page faults bring the memory back");
        return;
    }
    gs_moving = true;
    struct gs_move done = gs_migrate_in((int)device, gs_report_progress_in);
    if (quiet)
        gs_capture_allow();
    gs_moved_on();
    /* What we had moved out is what came back. Without it the prefetch covered memory that was
     * there already, and a rate from it would be fiction: the scheduler hears nothing then. */
    if (done.waited && done.ranges > 0 && out > 0)
        gs_send_moved(device, GS_MOVED_DONE | (done.failed ? GS_MOVED_FAILED : 0),
                      done.failed && done.bytes < out ? done.bytes : out, done.elapsed_us);
}

/* Frees converted memory whose cuMemFreeAsync its stream has reached. Otherwise only the
 * program's next allocation, free or cuMemGetInfo would, and reports would overstate until then.
 * Never inside a capture: captures wait while it runs. */
static void gs_reap_freed(int64_t now)
{
    if (now - gs_last_reap < GS_REAP_INTERVAL_MS || !gs_memory_deferred_pending())
        return;
    gs_last_reap = now;
    if (!gs_capture_hold_off(0))
        return;
    gs_memory_reap();
    gs_capture_allow();
}

/* How long a holder waits idle before it releases early: our own setting (0: never, whatever
 * the hint), bounded by the scheduler's hint for this grant. A hint from GS_IDLE_HINT_FLOOR_MS up
 * is a floor (a handoff would swap memory: keep the lock through shorter gaps), a shorter one a
 * ceiling (someone waits and a handoff is cheap: let go sooner). */
static unsigned gs_idle_release_ms(void)
{
    unsigned own = gs_config()->idle_release_ms, hint = gs_idle_hint_ms;
    if (own == 0 || hint == 0)
        return own;
    if (hint >= GS_IDLE_HINT_FLOOR_MS)
        return hint > own ? hint : own;
    return hint < own ? hint : own;
}

/* Early release: nothing submitted for the idle time, nothing in flight, the GPU work done. */
static void gs_check_idle(int64_t now)
{
    unsigned idle_ms = gs_idle_release_ms();
    if (gs_lock != GS_LOCK_HELD || idle_ms == 0)
        return;
    unsigned seen = gs_gate_submitted();
    if (seen != gs_idle_seen || gs_gate_in_flight() > 0) {
        gs_idle_seen = seen;
        gs_idle_since = now;
        gs_idle_drained = false;
        return;
    }
    if (now - gs_idle_since < idle_ms)
        return;
    /* Synchronize with the gate still open (the program may go on), and never in a capture. */
    if (!gs_capture_hold_off(0)) {
        gs_idle_since = now;
        return;
    }
    int64_t start = gs_now_ms();
    gs_contexts_synchronize();
    gs_capture_allow();
    int64_t end = gs_now_ms();
    if (end - start > GS_BUSY_SYNC_MS || gs_gate_submitted() != seen) {
        /* The GPU was busy until just now: idle time counts from here. */
        gs_idle_drained = gs_gate_submitted() == seen;
        gs_idle_seen = gs_gate_submitted();
        gs_idle_since = end;
        return;
    }
    /* Idle time counts from the last submission, but the work queued then may have kept the
     * GPU busy for most of it (a program that queues a pass and sleeps). Where the scheduler
     * hinted that a handoff costs a swap, that is not enough: the idle time starts over from
     * here, where the GPU is known to be done, and only a whole one more releases. */
    if (gs_idle_hint_ms > 0 && !gs_idle_drained) {
        gs_idle_drained = true;
        gs_idle_since = end;
        return;
    }
    gs_gate_close();
    if (gs_gate_in_flight() > 0 || gs_gate_submitted() != seen) {
        gs_gate_open();
        gs_idle_since = end;
        return;
    }
    struct gs_lock_released m = {0, GS_RELEASE_IDLE};
    if (gs_send(GS_MSG_LOCK_RELEASED, &m, sizeof m)) {
        gs_lock = GS_LOCK_NONE;
        gs_debug("released the GPU lock early: idle for %u ms", idle_ms);
    }
    gs_maybe_request();
}

static void gs_apply_mode(uint32_t mode)
{
    uint32_t old = gs_mode;
    gs_mode = mode;
    if (mode == GS_MODE_OFF) {
        /* No lock exists in mode off: any we held or waited for is gone. */
        gs_lock = GS_LOCK_NONE;
        gs_run_freely();
    } else if (old == GS_MODE_OFF || gs_registering) {
        gs_lock = GS_LOCK_NONE;
        gs_gate_close();
        gs_maybe_request();
    }
}

static const char *gs_mode_name(uint32_t mode)
{
    return mode == GS_MODE_OFF ? "off" : mode == GS_MODE_ON ? "on" : "auto";
}

static void gs_handle(const struct gs_header *h, const uint8_t *payload)
{
    switch (h->type) {
    case GS_MSG_REGISTERED: {
        struct gs_registered m;
        memcpy(&m, payload, sizeof m);
        if (!gs_registering) {
            gs_disconnect("a second REGISTERED");
            return;
        }
        /* LIMITS comes before REGISTERED when a limit applies: none means none, also for a
         * limit kept from an earlier connection. */
        if (!gs_limits_heard)
            gs_memory_set_limit(0);
        gs_apply_mode(m.mode);
        gs_registering = false;
        gs_retry_ms = GS_RETRY_FIRST_MS;
        if (gs_outage_reported || gs_ever_registered)
            gs_debug("rejoined the scheduler at %s", gs_config()->socket_path);
        gs_outage_reported = false;
        gs_ever_registered = true;
        gs_debug("registered as client %llu; mode %s, quantum %u s",
                 (unsigned long long)m.client_id, gs_mode_name(m.mode), m.tq_seconds);
        gs_set_status(true, NULL);
        gs_send_mem_reports(true);
        gs_maybe_request();
        break;
    }
    case GS_MSG_LOCK_GRANTED: {
        struct gs_lock_granted m;
        memcpy(&m, payload, sizeof m);
        gs_lock = GS_LOCK_HELD;
        gs_idle_hint_ms = 0;
        gs_debug("granted the GPU lock for %llu ms%s%s%s", (unsigned long long)m.quantum_ms,
                 m.flags & GS_GRANT_AFTER_WAIT ? ", after waiting" : "",
                 m.flags & GS_GRANT_SHARED ? ", shared" : "",
                 m.flags & GS_GRANT_OTHERS_RAN ? ", others ran" : "");
        gs_move_back(m.device, m.flags);
        gs_idle_seen = gs_gate_submitted();
        gs_idle_since = gs_now_ms();
        gs_idle_drained = false;
        gs_gate_open();
        break;
    }
    case GS_MSG_DROP_LOCK:
    case GS_MSG_LOCK_REVOKED: {
        /* LOCK_REVOKED is DROP_LOCK's first 8 bytes: the device and a reserved word. */
        struct gs_drop_lock m = {0};
        memcpy(&m, payload, h->length);
        bool drop = h->type == GS_MSG_DROP_LOCK;
        /* Not holding: it crossed our own release on the wire, and the scheduler has that. */
        if (gs_lock == GS_LOCK_HELD)
            gs_release(m.device, drop ? GS_RELEASE_DROPPED : GS_RELEASE_REVOKED,
                       drop ? m.evict_bytes : 0);
        else
            gs_debug("%s while not holding the lock: ignored",
                     drop ? "DROP_LOCK" : "LOCK_REVOKED");
        break;
    }
    case GS_MSG_EVICT: {
        struct gs_evict m;
        memcpy(&m, payload, sizeof m);
        gs_evict(&m);
        break;
    }
    case GS_MSG_IDLE_HINT: {
        struct gs_idle_hint m;
        memcpy(&m, payload, sizeof m);
        if (gs_lock == GS_LOCK_HELD) {
            gs_idle_hint_ms = m.idle_release_ms;
            if (gs_config()->unified_memory)
                gs_migrate_prepare((int)m.device, m.evict_bytes, gs_client_wake);
        }
        gs_debug("idle hint %u ms, %llu bytes to move out at a drop%s", m.idle_release_ms,
                 (unsigned long long)m.evict_bytes,
                 gs_lock == GS_LOCK_HELD ? "" : " while not holding the lock: ignored");
        break;
    }
    case GS_MSG_LIMITS: {
        struct gs_limits m;
        memcpy(&m, payload, sizeof m);
        gs_limits_heard = true;
        gs_memory_set_limit(m.memory_limit);
        break;
    }
    case GS_MSG_SCHED_MODE: {
        struct gs_sched_mode m;
        memcpy(&m, payload, sizeof m);
        gs_debug("scheduler mode %s, quantum %u s", gs_mode_name(m.mode), m.tq_seconds);
        gs_apply_mode(m.mode);
        break;
    }
    case GS_MSG_ERROR: {
        struct gs_error m;
        memcpy(&m, payload, sizeof m);
        int text_len = (int)(h->length - sizeof m);
        char why[GS_MAX_ERROR_TEXT + 64];
        snprintf(why, sizeof why, "the scheduler said: %.*s (error %u)", text_len,
                 (const char *)payload + sizeof m, m.code);
        gs_disconnect(why);
        break;
    }
    }
}

static void gs_read_socket(void)
{
    ssize_t n = recv(gs_sock, gs_rbuf + gs_rlen, sizeof gs_rbuf - gs_rlen, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        char why[96];
        snprintf(why, sizeof why, "%s", n == 0 ? "the scheduler closed the connection"
                                                : strerror(errno));
        gs_disconnect(why);
        return;
    }
    gs_rlen += (size_t)n;
    size_t off = 0;
    while (gs_sock >= 0 && gs_rlen - off >= sizeof(struct gs_header)) {
        struct gs_header h;
        memcpy(&h, gs_rbuf + off, sizeof h);
        const char *bad = gs_wire_check_header(&h);
        if (bad) {
            char why[128];
            snprintf(why, sizeof why, "protocol error from the scheduler: %s", bad);
            gs_disconnect(why);
            return;
        }
        if (gs_rlen - off < sizeof h + h.length)
            break;
        gs_handle(&h, gs_rbuf + off + sizeof h);
        off += sizeof h + h.length;
    }
    if (gs_sock < 0)
        return;
    memmove(gs_rbuf, gs_rbuf + off, gs_rlen - off);
    gs_rlen -= off;
}

/* Fail open: run unscheduled, say so once per outage, and retry with backoff. */
static void gs_disconnect(const char *why)
{
    const struct gs_config *cfg = gs_config();
    if (gs_sock >= 0)
        close(gs_sock);
    gs_sock = -1;
    gs_rlen = 0;
    bool was_registered = !gs_registering;
    gs_registering = false;
    gs_lock = GS_LOCK_NONE;
    gs_run_freely();
    if (!gs_outage_reported && !(cfg->require && !gs_ever_registered)) {
        if (gs_ever_registered && was_registered)
            gs_warn("lost the scheduler at %s (%s); running unscheduled until it is back",
                    cfg->socket_path, why);
        else
            gs_warn("no scheduler at %s (%s); running unscheduled and retrying in the background",
                    cfg->socket_path, why);
        gs_outage_reported = true;
    } else {
        gs_debug("scheduler at %s: %s", cfg->socket_path, why);
    }
    gs_next_retry = gs_now_ms() + gs_retry_ms;
    gs_retry_ms = gs_retry_ms * 2 > GS_RETRY_MAX_MS ? GS_RETRY_MAX_MS : gs_retry_ms * 2;
    gs_set_status(false, why);
}

static void gs_process_name(char *out, size_t size)
{
    int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, out, size - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n > 0) {
        out[n] = '\0';
        out[strcspn(out, "\n")] = '\0';
    } else {
        snprintf(out, size, "%s", program_invocation_short_name);
    }
}

static void gs_connect(void)
{
    const struct gs_config *cfg = gs_config();
    if (cfg->socket_too_long) {
        gs_disconnect("GEMSHARE_SOCKET is too long for a Unix socket path");
        return;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        char why[96];
        snprintf(why, sizeof why, "cannot create a socket: %s", strerror(errno));
        gs_disconnect(why);
        return;
    }
    /* A scheduler that stops reading (or a full listen backlog) must not hang our thread. */
    struct timeval send_timeout = {GS_SEND_TIMEOUT_MS / 1000, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, cfg->socket_path, strlen(cfg->socket_path));
    int r;
    do
        r = connect(fd, (struct sockaddr *)&addr, sizeof addr);
    while (r < 0 && errno == EINTR);
    gs_sock = fd;
    if (r < 0) {
        char why[96];
        snprintf(why, sizeof why, "%s", strerror(errno));
        gs_registering = true;
        gs_disconnect(why);
        return;
    }
    gs_registering = true;
    gs_uuid_sent = false;
    gs_limits_heard = false;
    gs_register_deadline = gs_now_ms() + GS_REGISTER_TIMEOUT_MS;
    struct gs_register m = {.device = 0,
                            .flags = cfg->unified_memory ? GS_REG_UNIFIED_MEMORY : 0};
    gs_process_name(m.process_name, sizeof m.process_name);
    strncpy(m.pod_namespace, cfg->pod_namespace, sizeof m.pod_namespace);
    strncpy(m.pod_name, cfg->pod_name, sizeof m.pod_name);
    strncpy(m.label, cfg->label, sizeof m.label);
    gs_send(GS_MSG_REGISTER, &m, sizeof m);
}

static int gs_poll_timeout(int64_t now)
{
    int64_t due = INT64_MAX;
    if (gs_sock < 0)
        due = gs_next_retry;
    else if (gs_registering)
        due = gs_register_deadline;
    if (gs_sock >= 0 && !gs_registering && gs_memory_has_changes() &&
        gs_last_mem_report + GS_MEM_REPORT_INTERVAL_MS < due)
        due = gs_last_mem_report + GS_MEM_REPORT_INTERVAL_MS;
    if (gs_last_reap + GS_REAP_INTERVAL_MS < due && gs_memory_deferred_pending())
        due = gs_last_reap + GS_REAP_INTERVAL_MS;
    unsigned idle_ms = gs_idle_release_ms();
    if (gs_lock == GS_LOCK_HELD && idle_ms > 0) {
        int64_t tick = now + (idle_ms / 4 > 50 ? 50 : idle_ms / 4 + 1);
        if (tick < due)
            due = tick;
    }
    if (due == INT64_MAX)
        return -1;
    return due <= now ? 0 : (int)(due - now);
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

static void gs_service(int64_t now)
{
    gs_reap_freed(now); /* before a report, which then has the freed memory gone */
    gs_pin_prepared();
    if (gs_sock < 0) {
        if (now >= gs_next_retry || atomic_exchange(&gs_retry_now, 0))
            gs_connect();
        return;
    }
    if (gs_registering) {
        if (now >= gs_register_deadline)
            gs_disconnect("no answer to REGISTER");
        return;
    }
    gs_maybe_request();
    if (gs_memory_has_changes() && now - gs_last_mem_report >= GS_MEM_REPORT_INTERVAL_MS) {
        gs_send_mem_reports(false);
        gs_last_mem_report = now;
    }
    gs_check_idle(now);
}

static void *gs_client_main(void *arg)
{
    (void)arg;
    gs_connect();
    for (;;) {
        int64_t now = gs_now_ms();
        gs_service(now);
        struct pollfd fds[2] = {{atomic_load(&gs_wake_fd), POLLIN, 0}, {gs_sock, POLLIN, 0}};
        int n = poll(fds, gs_sock >= 0 ? 2 : 1, gs_poll_timeout(gs_now_ms()));
        if (n <= 0)
            continue;
        if (fds[0].revents & POLLIN) {
            uint64_t count;
            ssize_t r = read(fds[0].fd, &count, sizeof count);
            (void)r;
        }
        if (gs_sock >= 0 && fds[1].revents)
            gs_read_socket();
    }
    return NULL;
}

static void gs_after_fork_child(void)
{
    /* The child has no client thread and must never use the parent's connection or lock: it
     * starts over at its own first CUDA use. */
    int fd = atomic_exchange(&gs_wake_fd, -1);
    if (fd >= 0)
        close(fd);
    if (gs_sock >= 0)
        close(gs_sock);
    gs_sock = -1;
    gs_registering = false;
    gs_lock = GS_LOCK_NONE;
    gs_mode = GS_MODE_ON;
    gs_idle_hint_ms = 0;
    gs_idle_drained = false;
    gs_moving = gs_run_freely_pending = false;
    gs_rlen = 0;
    gs_retry_ms = GS_RETRY_FIRST_MS;
    gs_outage_reported = gs_ever_registered = false;
    gs_last_mem_report = INT64_MIN / 2;
    pthread_mutex_init(&gs_start_mu, NULL);
    pthread_mutex_init(&gs_status_mu, NULL);
    pthread_cond_init(&gs_status_cv, NULL);
    gs_registered = false;
    gs_attempts = 0;
    atomic_store(&gs_first_attempt_over, false);
    atomic_store(&gs_retry_now, 0);
    atomic_store(&gs_started, 0);
    gs_gate_after_fork_child();
    gs_capture_after_fork_child();
    gs_contexts_after_fork_child();
    gs_memory_after_fork_child();
    gs_migrate_after_fork_child();
}

void gs_client_start(void)
{
    if (atomic_load_explicit(&gs_started, memory_order_acquire))
        return;
    pthread_mutex_lock(&gs_start_mu);
    if (atomic_load(&gs_started)) {
        pthread_mutex_unlock(&gs_start_mu);
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
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_t thread;
    sigset_t all, old;
    sigfillset(&all);
    /* Our thread blocks every signal: the program's handlers must never run on it. */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    atomic_store(&gs_wake_fd, fd);
    /* Closed until the first connection attempt decides: no work slips out unscheduled. */
    gs_gate_close();
    gs_debug("starting the client: socket %s, unified memory %s, idle release %u ms",
             cfg->socket_path, cfg->unified_memory ? "on" : "off", cfg->idle_release_ms);
    int err = fd < 0 ? errno : pthread_create(&thread, NULL, gs_client_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        atomic_store(&gs_first_attempt_over, true);
        gs_gate_open();
        gs_warn("cannot start the scheduler client (%s); running unscheduled", strerror(err));
    } else {
        pthread_setname_np(thread, "gemshare");
        pthread_detach(thread);
    }
    atomic_store_explicit(&gs_started, 1, memory_order_release);
    pthread_mutex_unlock(&gs_start_mu);
}

void gs_client_wait_first_attempt(void)
{
    if (atomic_load_explicit(&gs_first_attempt_over, memory_order_acquire) ||
        !atomic_load_explicit(&gs_started, memory_order_acquire))
        return;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += GS_FIRST_ATTEMPT_MS / 1000 + 1; /* and a second of slack */
    pthread_mutex_lock(&gs_status_mu);
    while (gs_attempts == 0 &&
           pthread_cond_timedwait(&gs_status_cv, &gs_status_mu, &deadline) != ETIMEDOUT) {
    }
    pthread_mutex_unlock(&gs_status_mu);
}

bool gs_client_allow_init(void)
{
    gs_client_start();
    const struct gs_config *cfg = gs_config();
    if (!cfg->require)
        return true;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += GS_STRICT_WAIT_MS / 1000;
    pthread_mutex_lock(&gs_status_mu);
    if (!gs_registered) {
        /* Wait for one full attempt that starts from now. */
        unsigned target = gs_attempts + 1;
        atomic_store(&gs_retry_now, 1);
        gs_client_wake();
        while (!gs_registered && gs_attempts < target &&
               pthread_cond_timedwait(&gs_status_cv, &gs_status_mu, &deadline) != ETIMEDOUT) {
        }
        if (!gs_registered && gs_attempts < target)
            snprintf(gs_failure, sizeof gs_failure, "no answer within %d ms", GS_STRICT_WAIT_MS);
    }
    bool ok = gs_registered;
    char failure[sizeof gs_failure];
    memcpy(failure, gs_failure, sizeof failure);
    pthread_mutex_unlock(&gs_status_mu);
    if (!ok)
        gs_warn("GEMSHARE_REQUIRE_SCHEDULER=1 and no gemshare scheduler answers at %s (%s): CUDA "
                "initialization fails with CUDA_ERROR_SYSTEM_NOT_READY. Start gemshare-scheduler, "
                "point GEMSHARE_SOCKET at it, or unset GEMSHARE_REQUIRE_SCHEDULER.",
                cfg->socket_path, failure);
    return ok;
}
