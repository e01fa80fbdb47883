/* Tracks stream captures through the cuStreamBeginCapture* / cuStreamEndCapture hooks. */
#define _GNU_SOURCE
#include "gate/capture.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "base/log.h"
#include "cuda/impl.h"

#define GS_MAX_CAPTURES 256

struct gs_capture {
    CUstream stream;
    pthread_t owner;
};

static pthread_mutex_t gs_capture_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gs_capture gs_captures[GS_MAX_CAPTURES]; /* under gs_capture_mu */
static int gs_capture_count;
static int gs_capture_untracked; /* captures begun while the table was full */
/* Their sum, written under gs_capture_mu and read without it: every launch asks, and the
 * client thread holds the mutex through whole moves (gs_capture_hold_off), which must not keep
 * a launch from asking for the lock meanwhile. A capture's own launches come after its begin
 * hook stored the count, on the same thread. */
static _Atomic int gs_capture_live;

static void gs_capture_count_changed(void)
{
    atomic_store_explicit(&gs_capture_live, gs_capture_count + gs_capture_untracked,
                          memory_order_release);
}

static void gs_capture_add(CUstream stream)
{
    if (gs_capture_count < GS_MAX_CAPTURES) {
        gs_captures[gs_capture_count++] = (struct gs_capture){stream, pthread_self()};
    } else {
        gs_capture_untracked++;
        gs_debug("more than %d stream captures at once; the surplus is counted, not owned",
                 GS_MAX_CAPTURES);
    }
    gs_capture_count_changed();
}

static void gs_capture_remove(CUstream stream)
{
    int found = -1;
    for (int i = 0; i < gs_capture_count; i++) {
        if (gs_captures[i].stream != stream)
            continue;
        found = i;
        /* The per-thread default stream is handle 0 in every thread: prefer this thread's. */
        if (pthread_equal(gs_captures[i].owner, pthread_self()))
            break;
    }
    if (found >= 0)
        gs_captures[found] = gs_captures[--gs_capture_count];
    else if (gs_capture_untracked > 0)
        gs_capture_untracked--;
    gs_capture_count_changed();
}

/* Begin hooks: hold the lock across the driver call so that a drop cannot synchronize between
 * the capture starting and us knowing about it. */
#define GS_BEGIN_CAPTURE(call, stream)                                                           \
    pthread_mutex_lock(&gs_capture_mu);                                                          \
    CUresult r = call;                                                                           \
    if (r == CUDA_SUCCESS)                                                                       \
        gs_capture_add(stream);                                                                  \
    pthread_mutex_unlock(&gs_capture_mu);                                                        \
    return r;

CUresult gs_impl_cuStreamBeginCapture(enum gs_variant variant, CUstream hStream)
{
    GS_BEGIN_CAPTURE(GS_REAL(cuStreamBeginCapture, variant)(hStream), hStream)
}

CUresult gs_impl_cuStreamBeginCapture_v2(enum gs_variant variant, CUstream hStream,
                                         CUstreamCaptureMode mode)
{
    GS_BEGIN_CAPTURE(GS_REAL(cuStreamBeginCapture_v2, variant)(hStream, mode), hStream)
}

CUresult gs_impl_cuStreamBeginCaptureToGraph(enum gs_variant variant, CUstream hStream,
                                             CUgraph hGraph, const CUgraphNode *dependencies,
                                             const CUgraphEdgeData *dependencyData,
                                             size_t numDependencies, CUstreamCaptureMode mode)
{
    GS_BEGIN_CAPTURE(GS_REAL(cuStreamBeginCaptureToGraph, variant)(
                         hStream, hGraph, dependencies, dependencyData, numDependencies, mode),
                     hStream)
}

CUresult gs_impl_cuStreamEndCapture(enum gs_variant variant, CUstream hStream, CUgraph *phGraph)
{
    CUresult r = GS_REAL(cuStreamEndCapture, variant)(hStream, phGraph);
    /* Success and the invalidated/unmatched errors all end the capture; the wrong thread or a
     * stream that was not capturing leave things as they were. */
    if (r != CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD && r != CUDA_ERROR_ILLEGAL_STATE &&
        r != CUDA_ERROR_INVALID_VALUE && r != CUDA_ERROR_INVALID_HANDLE) {
        pthread_mutex_lock(&gs_capture_mu);
        gs_capture_remove(hStream);
        pthread_mutex_unlock(&gs_capture_mu);
    }
    return r;
}

bool gs_capture_stream_is_capturing(enum gs_variant variant, CUstream stream)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = GS_REAL(cuStreamIsCapturing, variant)(stream, &status);
    return r == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool gs_capture_active(void)
{
    return atomic_load_explicit(&gs_capture_live, memory_order_acquire) > 0;
}

bool gs_capture_hold_off(unsigned timeout_ms)
{
    struct timespec pause = {0, 1000000};
    for (unsigned waited = 0;; waited++) {
        pthread_mutex_lock(&gs_capture_mu);
        if (gs_capture_count + gs_capture_untracked == 0)
            return true; /* keeps the lock until gs_capture_allow */
        pthread_mutex_unlock(&gs_capture_mu);
        if (waited >= timeout_ms)
            return false;
        nanosleep(&pause, NULL);
    }
}

void gs_capture_allow(void)
{
    pthread_mutex_unlock(&gs_capture_mu);
}

void gs_capture_after_fork_child(void)
{
    pthread_mutex_init(&gs_capture_mu, NULL);
    gs_capture_count = 0;
    gs_capture_untracked = 0;
    gs_capture_count_changed();
}
