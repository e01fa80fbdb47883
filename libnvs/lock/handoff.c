/* The drain and the bulk moves around a change of lock (README.md, "Moving memory"). */
#include "lock/handoff.h"

#include "base/config.h"
#include "base/log.h"
#include "gate/capture.h"
#include "gate/contexts.h"
#include "gate/gate.h"
#include "memory/memory.h"
#include "memory/migrate.h"

#define GS_CAPTURE_WAIT_MS 5000
/* Staged memory cannot come back by page faults: a grant or running freely waits this long for
 * a capture to end before copying it back beside the capture. */
#define GS_RESTORE_CAPTURE_WAIT_MS 10000

bool gs_handoff_quiesce(int device)
{
    gs_gate_close(device);
    gs_gate_wait_drained(device);
    if (!gs_capture_hold_off(GS_CAPTURE_WAIT_MS)) {
        gs_debug("a CUDA graph capture is still running after %d ms; going on without "
                 "synchronizing or moving memory (never inside a capture)",
                 GS_CAPTURE_WAIT_MS);
        return false;
    }
    gs_contexts_synchronize(device);
    return true;
}

static void gs_send_moved(struct gs_session *s, int device, uint32_t flags, uint64_t bytes,
                          uint64_t elapsed_us)
{
    struct gs_moved m = {(uint32_t)device, flags, bytes, elapsed_us};
    gs_conn_send(&s->conn, GS_MSG_MOVED, &m, sizeof m);
}

static void gs_report_progress_out(void *arg, int device, uint64_t bytes, uint64_t elapsed_us)
{
    gs_send_moved(arg, device, GS_MOVED_TO_HOST, bytes, elapsed_us);
}

/* A drop that comes while memory is still coming back is answered once it is here: progress
 * tells the scheduler the holder is moving, not hung. */
static void gs_report_progress_in(void *arg, int device, uint64_t bytes, uint64_t elapsed_us)
{
    gs_send_moved(arg, device, 0, bytes, elapsed_us);
}

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

void gs_handoff_run_freely(struct gs_session *s)
{
    if (s->moving) {
        s->run_freely_pending = true;
        return;
    }
    gs_restore_staged();
    gs_gate_open_all();
}

/* After a move, with captures allowed again. */
static void gs_moved_on(struct gs_session *s)
{
    s->moving = false;
    if (s->run_freely_pending) {
        s->run_freely_pending = false;
        if (!gs_lock_core_holds_any(&s->lock))
            gs_handoff_run_freely(s);
    }
}

void gs_handoff_move_out(struct gs_session *s, int device, uint64_t bytes, bool quiet)
{
    struct gs_move done = {0};
    struct gs_move_progress progress = {gs_report_progress_out, s};
    if (quiet && bytes > 0 && gs_config()->unified_memory)
        done = gs_migrate_out(device, bytes, &progress);
    gs_send_moved(s, device,
                  GS_MOVED_TO_HOST | GS_MOVED_DONE | (done.failed ? GS_MOVED_FAILED : 0),
                  done.bytes, done.elapsed_us);
}

void gs_handoff_drain(struct gs_session *s, int device, uint64_t bytes)
{
    s->moving = true;
    bool quiet = gs_handoff_quiesce(device);
    if (bytes > 0)
        gs_handoff_move_out(s, device, bytes, quiet);
    if (quiet)
        gs_capture_allow();
    gs_moved_on(s);
}

/* Never into a capture (then faults bring the memory back), except for staged memory, which
 * faults cannot bring back. Before the gate opens: by default the program's kernels start once
 * the memory has arrived, and even with GEMSHARE_SWAP_IN_WAIT=0 the move is queued ahead of them,
 * where a synchronize the program calls covers it. */
void gs_handoff_move_back(struct gs_session *s, int device, uint32_t grant_flags)
{
    uint64_t out = gs_migrate_moved_out(device);
    uint64_t left = gs_migrate_left_on_host(device); /* cold memory: it stays there */
    bool fresh = gs_migrate_unpopulated(device); /* allocated while we could not run */
    gs_migrate_granted(device);
    bool staged = gs_migrate_staged(device);
    if (!staged && ((out == 0 && !fresh && !(grant_flags & GS_GRANT_OTHERS_RAN)) ||
                    !gs_config()->unified_memory)) {
        if (left > 0) /* nothing comes back: the scheduler hears that none of it did */
            gs_send_moved(s, device, GS_MOVED_DONE, 0, 0);
        return;
    }
    bool quiet = gs_capture_hold_off(staged ? GS_RESTORE_CAPTURE_WAIT_MS : 0);
    if (!quiet && !staged) {
        gs_debug("a CUDA graph capture is running: no prefetch, page faults bring the memory back");
        return;
    }
    s->moving = true;
    struct gs_move_progress progress = {gs_report_progress_in, s};
    struct gs_move done = gs_migrate_in(device, &progress);
    if (quiet)
        gs_capture_allow();
    gs_moved_on(s);
    /* What we had moved out is what came back, but for cold memory, which stays on the host.
     * Without either the prefetch covered memory that was there already, and a rate from it
     * would be fiction: the scheduler hears nothing then. With cold memory out it always hears
     * what came back, 0 bytes when nothing was waited for. */
    bool arrived = done.waited && done.ranges > 0 && out > 0;
    if (arrived || left > 0)
        gs_send_moved(s, device, GS_MOVED_DONE | (done.failed ? GS_MOVED_FAILED : 0),
                      !arrived ? 0 : done.failed && done.bytes < out ? done.bytes : out,
                      arrived ? done.elapsed_us : 0);
}
