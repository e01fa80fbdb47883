/* The client thread: talks to gemshare-scheduler and opens and closes the gate. */
#ifndef GS_CLIENT_H
#define GS_CLIENT_H

#include <stdbool.h>

/* Starts the client at the process's first real CUDA use; later calls do nothing. */
void gs_client_start(void);
/* Whether cuInit may go ahead: false only under GEMSHARE_REQUIRE_SCHEDULER=1 when no scheduler
 * answers (after saying so on stderr). */
bool gs_client_allow_init(void);
/* Until the first connection attempt is over (registered or not, at most as long as one takes):
 * what the scheduler says at registration (a memory limit) then binds the caller. At once when
 * it is over or the client never started. */
void gs_client_wait_first_attempt(void);
/* Tells the client thread to look at the gate and memory (cheap; safe before start). */
void gs_client_wake(void);

#endif
