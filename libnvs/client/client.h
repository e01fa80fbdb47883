/* The client thread: talks to gemshare-scheduler and opens and closes the gate. */
#ifndef GS_CLIENT_H
#define GS_CLIENT_H

#include <stdbool.h>

/* Starts the client at the process's first real CUDA use; later calls do nothing. */
void gs_client_start(void);
/* Whether cuInit may go ahead: false only under GEMSHARE_REQUIRE_SCHEDULER=1 when no scheduler
 * answers (after saying so on stderr). */
bool gs_client_allow_init(void);

#endif
