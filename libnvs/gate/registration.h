/* Whether the scheduler has registered this process, as application threads need to know it:
 * allocations wait for the first connection attempt to end (a memory limit sent at registration
 * binds them), and cuInit under GEMSHARE_REQUIRE_SCHEDULER=1 waits for a registration. The
 * client thread reports each attempt's end here. */
#ifndef GS_REGISTRATION_H
#define GS_REGISTRATION_H

#include <stdbool.h>
#include <stddef.h>

/* The client is starting: from now on waiting for its first attempt makes sense. */
void gs_registration_expect(void);
/* Whether the client was started (the program uses CUDA): its registration is the process's. */
bool gs_registration_expected(void);
/* Client thread: a connection attempt ended, registered or not (failure: why not, or NULL). */
void gs_registration_attempt_over(bool registered, const char *failure);
/* The client could not start: nobody will attempt anything, so nobody may wait for it. */
void gs_registration_never(void);

/* Until the first connection attempt is over (registered or not, at most as long as one takes):
 * what the scheduler says at registration (a memory limit) then binds the caller. At once when
 * it is over or the client never started. */
void gs_registration_wait_first_attempt(void);
/* Whether registered, after waiting up to timeout_ms for one full attempt that starts now (the
 * client thread is told to try at once: gs_registration_take_retry_now). On false, failure holds
 * why the last attempt failed. */
bool gs_registration_wait_registered(unsigned timeout_ms, char *failure, size_t failure_size);
/* Client thread: whether someone asked for an attempt right away (and clear the ask). */
bool gs_registration_take_retry_now(void);

void gs_registration_after_fork_child(void);

#endif
