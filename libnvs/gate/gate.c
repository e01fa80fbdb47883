/* The gates' slow path, finding a call's device, and the client thread's side of the gates. */
#include "gate/gate.h"

#include <pthread.h>
#include <time.h>

#include "base/log.h"
#include "cuda/impl.h"
#include "gate/capture.h"
#include "gate/wake.h"

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

/* The gate of work on a device: its own, or the ungated one (no device, or past the gated). */
static int gs_gate_of(int d)
{
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

/* Which gate the call passes: its device's, or the ungated one. */
static int gs_call_gate(enum gs_variant variant, CUstream stream)
{
    return gs_gate_of(gs_contexts_device(gs_call_context(variant, stream)));
}

/* Enters the gate if it is open. */
static bool gs_gate_try(int d)
{
    struct gs_gate *g = &gs_gates[d];
    atomic_fetch_add(&g->calls, 1);
    if (atomic_load(&g->open))
        return true;
    atomic_fetch_sub(&g->calls, 1);
    return false;
}

/* Whether the first n gates of a set are all open. */
static bool gs_gates_open(const int *gates, int n)
{
    for (int i = 0; i < n; i++)
        if (!atomic_load(&gs_gates[gates[i]].open))
            return false;
    return true;
}

/* Blocks until the gate is open (true), asking for its lock, or until one of the n gates kept
 * entered meanwhile closes (false); does not enter it. */
static bool gs_gate_block(int d, const int *kept, int n)
{
    struct gs_gate *g = &gs_gates[d];
    pthread_mutex_lock(&gs_waits.mu);
    gs_waits.blocked[d]++;
    if (n > 0) /* before the request goes out, which says so */
        atomic_fetch_add(&g->keeping, 1);
    while (!atomic_load(&g->open) && gs_gates_open(kept, n)) {
        if (!atomic_exchange(&g->requested, 1))
            gs_wake();
        pthread_cond_wait(&gs_waits.cv, &gs_waits.mu);
    }
    if (n > 0)
        atomic_fetch_sub(&g->keeping, 1);
    gs_waits.blocked[d]--;
    bool open = atomic_load(&g->open);
    pthread_mutex_unlock(&gs_waits.mu);
    return open;
}

/* Work for a stream that is being captured is recorded into a graph, not run; holding it back
 * would also keep the capture from ever ending, which a drop waits for. */
static bool gs_call_is_captured(enum gs_variant variant, CUstream stream)
{
    return gs_capture_active() && gs_capture_stream_is_capturing(variant, stream);
}

int gs_gate_wait(enum gs_variant variant, CUstream stream)
{
    int d = atomic_load(&gs_contexts_sole_device);
    if (d < 0 || d >= GS_GATED_DEVICES)
        d = gs_call_gate(variant, stream);
    if (gs_call_is_captured(variant, stream)) {
        atomic_fetch_add(&gs_gates[d].calls, 1);
        return d;
    }
    while (!gs_gate_try(d))
        gs_gate_block(d, NULL, 0);
    return d;
}

/* Adds a gate to a set kept in ascending order, once. */
static void gs_gates_add(struct gs_gates_entered *set, int gate)
{
    int i = 0;
    while (i < set->count && set->gate[i] < gate)
        i++;
    if (i < set->count && set->gate[i] == gate)
        return;
    for (int j = set->count; j > i; j--)
        set->gate[j] = set->gate[j - 1];
    set->gate[i] = gate;
    set->count++;
}

struct gs_gates_entered gs_gate_wait_span(enum gs_variant variant, CUstream stream, int side_a,
                                          int side_b)
{
    struct gs_gates_entered set = {0};
    gs_gates_add(&set, gs_call_gate(variant, stream));
    if (gs_call_is_captured(variant, stream)) {
        atomic_fetch_add(&gs_gates[set.gate[0]].calls, 1);
        return set;
    }
    gs_gates_add(&set, gs_gate_of(side_a));
    gs_gates_add(&set, gs_gate_of(side_b));
    /* In device order, each gate kept while waiting for the next, so that two copies in
     * opposite directions cannot each keep what the other waits for. The scheduler keeps a
     * lock whose holder waits for a higher device (docs/scheduling.md), so the first device
     * stays while the next comes. A drop that closes a kept gate anyway (another numbering of
     * the GPUs, a limit, a revocation) must be able to drain: let go of all, start over. */
    for (;;) {
        int entered = 0;
        while (entered < set.count) {
            if (gs_gate_try(set.gate[entered]))
                entered++;
            else if (!gs_gate_block(set.gate[entered], set.gate, entered))
                break;
        }
        if (entered == set.count)
            return set;
        for (int i = 0; i < entered; i++)
            atomic_fetch_sub(&gs_gates[set.gate[i]].calls, 1);
    }
}

void gs_gate_exit_span(struct gs_gates_entered entered)
{
    for (int i = 0; i < entered.count; i++)
        gs_gate_exit(entered.gate[i]);
}

int gs_side_context(CUcontext ctx)
{
    return ctx == NULL ? -1 : gs_contexts_device(ctx);
}

int gs_side_pointer(CUdeviceptr ptr)
{
    unsigned type = 0;
    int ordinal = -1;
    if (ptr == 0 ||
        GS_REAL(cuPointerGetAttribute, GS_LEGACY)(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                  ptr) != CUDA_SUCCESS ||
        type == CU_MEMORYTYPE_HOST ||
        GS_REAL(cuPointerGetAttribute, GS_LEGACY)(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                                  ptr) != CUDA_SUCCESS)
        return -1;
    return ordinal;
}

int gs_side_typed(CUmemorytype type, CUdeviceptr ptr)
{
    return type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED ? gs_side_pointer(ptr)
                                                                         : -1;
}

/* Opening wakes the threads waiting for the gate; closing, those that keep it entered while
 * they wait for another (gs_gate_wait_span). */
static void gs_gate_set(int device, int open)
{
    pthread_mutex_lock(&gs_waits.mu);
    atomic_store(&gs_gates[device].open, open || gs_waits.ungated[device]);
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
    pthread_cond_broadcast(&gs_waits.cv);
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

bool gs_gate_keeping(int device)
{
    return atomic_load(&gs_gates[device].keeping) > 0;
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
        atomic_store(&gs_gates[d].keeping, 0);
        atomic_store(&gs_gates[d].open, 1);
    }
}
