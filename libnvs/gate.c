/* The gates' slow path, finding a call's device, and the client thread's side of the gates. */
#include "gate.h"

#include <pthread.h>
#include <time.h>

#include "capture.h"
#include "impl.h"
#include "log.h"
#include "wake.h"

/* cuda.h's CU_STREAM_LEGACY and CU_STREAM_PER_THREAD: the default streams by name. */
#define GS_STREAM_LEGACY ((CUstream)0x1)
#define GS_STREAM_PER_THREAD ((CUstream)0x2)

/* Open until the first CUDA use starts the client (which closes them while it connects). */
struct gs_gate gs_gates[GS_GATED_DEVICES + 1] = {[0 ... GS_GATED_DEVICES] = {.open = 1}};

/* The slow path's: threads blocked at a closed gate, per gate. One mutex and condition for all
 * gates: waking the threads of another device costs them a look, and only on the slow path. */
static struct gs_gate_waits {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int blocked[GS_GATED_DEVICES + 1];
    bool ungated[GS_GATED_DEVICES]; /* gates that stay open: no lock can be had there */
    atomic_bool warned_ungated;
} gs_waits = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* The context of the call: its stream's (a stream handle of the program's), else the current
 * one; NULL when there is none, and then the driver fails the call itself. */
static CUcontext gs_call_context(enum gs_variant variant, CUstream stream)
{
    CUcontext ctx = NULL;
    if (stream != NULL && stream != GS_STREAM_LEGACY && stream != GS_STREAM_PER_THREAD &&
        GS_REAL(cuStreamGetCtx, variant)(stream, &ctx) == CUDA_SUCCESS && ctx != NULL)
        return ctx;
    if (GS_REAL(cuCtxGetCurrent, GS_LEGACY)(&ctx) != CUDA_SUCCESS)
        return NULL;
    return ctx;
}

/* Which gate the call passes: its device's, or the ungated one. */
static int gs_call_gate(enum gs_variant variant, CUstream stream)
{
    int d = gs_contexts_device(gs_call_context(variant, stream));
    if (d < 0)
        return GS_GATE_UNGATED;
    if (d >= GS_GATED_DEVICES) {
        if (!atomic_exchange(&gs_waits.warned_ungated, true))
            gs_warn("this program uses CUDA device %d; gemshare takes locks for devices 0 to %d "
                    "only, so work on device %d and above runs without the GPU lock, beside "
                    "other processes",
                    d, GS_GATED_DEVICES - 1, GS_GATED_DEVICES);
        return GS_GATE_UNGATED;
    }
    return d;
}

int gs_gate_wait(enum gs_variant variant, CUstream stream)
{
    int d = atomic_load(&gs_contexts_sole_device);
    if (d < 0 || d >= GS_GATED_DEVICES)
        d = gs_call_gate(variant, stream);
    struct gs_gate *g = &gs_gates[d];
    /* Work for a stream that is being captured is recorded into a graph, not run; holding it
     * back would also keep the capture from ever ending, which a drop waits for. */
    if (gs_capture_active() && gs_capture_stream_is_capturing(variant, stream)) {
        atomic_fetch_add(&g->calls, 1);
        return d;
    }
    for (;;) {
        atomic_fetch_add(&g->calls, 1);
        if (atomic_load(&g->open))
            return d;
        atomic_fetch_sub(&g->calls, 1);
        pthread_mutex_lock(&gs_waits.mu);
        gs_waits.blocked[d]++;
        while (!atomic_load(&g->open)) {
            if (!atomic_exchange(&g->requested, 1))
                gs_wake();
            pthread_cond_wait(&gs_waits.cv, &gs_waits.mu);
        }
        gs_waits.blocked[d]--;
        pthread_mutex_unlock(&gs_waits.mu);
    }
}

static void gs_gate_set(int device, int open)
{
    pthread_mutex_lock(&gs_waits.mu);
    atomic_store(&gs_gates[device].open, open || gs_waits.ungated[device]);
    if (open)
        pthread_cond_broadcast(&gs_waits.cv);
    pthread_mutex_unlock(&gs_waits.mu);
}

void gs_gate_open(int device)
{
    gs_gate_set(device, 1);
}

void gs_gate_close(int device)
{
    gs_gate_set(device, 0);
}

void gs_gate_open_all(void)
{
    pthread_mutex_lock(&gs_waits.mu);
    for (int d = 0; d < GS_GATED_DEVICES; d++)
        atomic_store(&gs_gates[d].open, 1);
    pthread_cond_broadcast(&gs_waits.cv);
    pthread_mutex_unlock(&gs_waits.mu);
}

void gs_gate_close_all(void)
{
    pthread_mutex_lock(&gs_waits.mu);
    for (int d = 0; d < GS_GATED_DEVICES; d++)
        atomic_store(&gs_gates[d].open, gs_waits.ungated[d]);
    pthread_mutex_unlock(&gs_waits.mu);
}

void gs_gate_ungate(int device)
{
    pthread_mutex_lock(&gs_waits.mu);
    gs_waits.ungated[device] = true;
    atomic_store(&gs_gates[device].open, 1);
    pthread_cond_broadcast(&gs_waits.cv);
    pthread_mutex_unlock(&gs_waits.mu);
}

bool gs_gate_is_open(int device)
{
    return device < 0 || device >= GS_GATED_DEVICES || atomic_load(&gs_gates[device].open);
}

unsigned gs_gate_in_flight(int device)
{
    return (unsigned)(atomic_load(&gs_gates[device].calls) & 0xffffffffu);
}

unsigned gs_gate_submitted(int device)
{
    return (unsigned)(atomic_load(&gs_gates[device].calls) >> 32);
}

void gs_gate_wait_drained(int device)
{
    /* Calls in flight are short (a launch) or end with the GPU work they wait for (a synchronous
     * copy); poll with a growing pause rather than put a wake-up on the hot path. */
    long pause_ns = 20000;
    while (gs_gate_in_flight(device) > 0) {
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        if (pause_ns < 1000000)
            pause_ns *= 2;
    }
}

bool gs_gate_wanted(int device)
{
    bool asked = atomic_exchange(&gs_gates[device].requested, 0) != 0;
    pthread_mutex_lock(&gs_waits.mu);
    int blocked = gs_waits.blocked[device];
    pthread_mutex_unlock(&gs_waits.mu);
    return asked || blocked > 0;
}

void gs_gate_after_fork_child(void)
{
    /* The child has only the forking thread: nobody waits, nothing is in flight, and it starts
     * ungated like any process before its first CUDA use. */
    gs_waits = (struct gs_gate_waits){.mu = PTHREAD_MUTEX_INITIALIZER,
                                      .cv = PTHREAD_COND_INITIALIZER};
    for (int d = 0; d <= GS_GATED_DEVICES; d++) {
        atomic_store(&gs_gates[d].calls, 0);
        atomic_store(&gs_gates[d].requested, 0);
        atomic_store(&gs_gates[d].open, 1);
    }
}
