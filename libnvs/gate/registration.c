/* Registration status shared between the client thread and application threads. */
#include "gate/registration.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "gate/wake.h"
#include "wire/conn.h"

/* The longest a connection attempt takes (a connect blocked on a full backlog, then no answer
 * to REGISTER), and a second of slack. */
#define GS_FIRST_ATTEMPT_WAIT_MS (GS_CONN_SEND_TIMEOUT_MS + GS_REGISTER_TIMEOUT_MS + 1000)

static struct gs_registration {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool registered;          /* under mu */
    unsigned attempts;        /* attempts over, under mu */
    char failure[160];        /* why the last attempt failed, under mu */
    atomic_bool expected;     /* a client was started */
    atomic_bool first_over;   /* attempts > 0, or no client thread: the fast check */
    atomic_bool retry_now;    /* an application thread wants an attempt at once */
} gs_reg = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static struct timespec gs_deadline(unsigned timeout_ms)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += timeout_ms / 1000;
    t.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (t.tv_nsec >= 1000000000) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000;
    }
    return t;
}

void gs_registration_expect(void)
{
    atomic_store_explicit(&gs_reg.expected, true, memory_order_release);
}

bool gs_registration_expected(void)
{
    return atomic_load_explicit(&gs_reg.expected, memory_order_acquire);
}

void gs_registration_attempt_over(bool registered, const char *failure)
{
    pthread_mutex_lock(&gs_reg.mu);
    gs_reg.registered = registered;
    gs_reg.attempts++;
    atomic_store_explicit(&gs_reg.first_over, true, memory_order_release);
    if (failure)
        snprintf(gs_reg.failure, sizeof gs_reg.failure, "%s", failure);
    pthread_cond_broadcast(&gs_reg.cv);
    pthread_mutex_unlock(&gs_reg.mu);
}

void gs_registration_never(void)
{
    atomic_store(&gs_reg.first_over, true);
}

void gs_registration_wait_first_attempt(void)
{
    if (atomic_load_explicit(&gs_reg.first_over, memory_order_acquire) ||
        !atomic_load_explicit(&gs_reg.expected, memory_order_acquire))
        return;
    struct timespec deadline = gs_deadline(GS_FIRST_ATTEMPT_WAIT_MS);
    pthread_mutex_lock(&gs_reg.mu);
    while (gs_reg.attempts == 0 &&
           pthread_cond_timedwait(&gs_reg.cv, &gs_reg.mu, &deadline) != ETIMEDOUT) {
    }
    pthread_mutex_unlock(&gs_reg.mu);
}

bool gs_registration_wait_registered(unsigned timeout_ms, char *failure, size_t failure_size)
{
    struct timespec deadline = gs_deadline(timeout_ms);
    pthread_mutex_lock(&gs_reg.mu);
    if (!gs_reg.registered) {
        unsigned target = gs_reg.attempts + 1;
        atomic_store(&gs_reg.retry_now, true);
        gs_wake();
        while (!gs_reg.registered && gs_reg.attempts < target &&
               pthread_cond_timedwait(&gs_reg.cv, &gs_reg.mu, &deadline) != ETIMEDOUT) {
        }
        if (!gs_reg.registered && gs_reg.attempts < target)
            snprintf(gs_reg.failure, sizeof gs_reg.failure, "no answer within %u ms",
                     timeout_ms);
    }
    bool ok = gs_reg.registered;
    snprintf(failure, failure_size, "%s", gs_reg.failure);
    pthread_mutex_unlock(&gs_reg.mu);
    return ok;
}

bool gs_registration_take_retry_now(void)
{
    return atomic_exchange(&gs_reg.retry_now, false);
}

void gs_registration_after_fork_child(void)
{
    /* Only the forking thread runs in the child: nobody holds the mutex or waits. */
    gs_reg = (struct gs_registration){.mu = PTHREAD_MUTEX_INITIALIZER,
                                      .cv = PTHREAD_COND_INITIALIZER};
}
