/* The gate's slow path and the client thread's side of it. */
#include "gate.h"

#include <pthread.h>
#include <time.h>

#include "capture.h"
#include "client.h"

/* Open until the first CUDA use starts the client (which closes it while it connects). */
atomic_int gs_gate_is_open = 1;
atomic_ullong gs_gate_calls;

static pthread_mutex_t gs_gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gs_gate_cv = PTHREAD_COND_INITIALIZER;
static int gs_gate_blocked;           /* under gs_gate_mu */
static atomic_int gs_gate_requested;  /* a blocked thread wants the lock */

void gs_gate_wait(enum gs_variant variant, CUstream stream)
{
    /* Work for a stream that is being captured is recorded into a graph, not run; holding it
     * back would also keep the capture from ever ending, which a drop waits for. */
    if (gs_capture_active() && gs_capture_stream_is_capturing(variant, stream))
        return;
    for (;;) {
        atomic_fetch_sub(&gs_gate_calls, 1);
        pthread_mutex_lock(&gs_gate_mu);
        gs_gate_blocked++;
        while (!atomic_load(&gs_gate_is_open)) {
            if (!atomic_exchange(&gs_gate_requested, 1))
                gs_client_wake();
            pthread_cond_wait(&gs_gate_cv, &gs_gate_mu);
        }
        gs_gate_blocked--;
        pthread_mutex_unlock(&gs_gate_mu);
        atomic_fetch_add(&gs_gate_calls, 1);
        if (atomic_load(&gs_gate_is_open))
            return;
    }
}

void gs_gate_open(void)
{
    pthread_mutex_lock(&gs_gate_mu);
    atomic_store(&gs_gate_is_open, 1);
    pthread_cond_broadcast(&gs_gate_cv);
    pthread_mutex_unlock(&gs_gate_mu);
}

void gs_gate_close(void)
{
    pthread_mutex_lock(&gs_gate_mu);
    atomic_store(&gs_gate_is_open, 0);
    pthread_mutex_unlock(&gs_gate_mu);
}

void gs_gate_wait_drained(void)
{
    /* Calls in flight are short (a launch) or end with the GPU work they wait for (a synchronous
     * copy); poll with a growing pause rather than put a wake-up on the hot path. */
    long pause_ns = 20000;
    while (gs_gate_in_flight() > 0) {
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        if (pause_ns < 1000000)
            pause_ns *= 2;
    }
}

int gs_gate_waiters(void)
{
    pthread_mutex_lock(&gs_gate_mu);
    int n = gs_gate_blocked;
    pthread_mutex_unlock(&gs_gate_mu);
    return n;
}

bool gs_gate_take_request(void)
{
    return atomic_exchange(&gs_gate_requested, 0) != 0;
}

void gs_gate_after_fork_child(void)
{
    /* The child has only the forking thread: nobody waits, nothing is in flight, and it starts
     * ungated like any process before its first CUDA use. */
    pthread_mutex_init(&gs_gate_mu, NULL);
    pthread_cond_init(&gs_gate_cv, NULL);
    gs_gate_blocked = 0;
    atomic_store(&gs_gate_requested, 0);
    atomic_store(&gs_gate_calls, 0);
    atomic_store(&gs_gate_is_open, 1);
}
