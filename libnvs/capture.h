/* CUDA graph stream captures in progress: the drop-lock path must never synchronize inside one,
 * and a capturing thread passes the gate (it records work, it does not run it). */
#ifndef GS_CAPTURE_H
#define GS_CAPTURE_H

#include <stdbool.h>

bool gs_capture_owned_by_this_thread(void);

/* Waits up to timeout_ms for no capture to be active, then holds captures off (a new
 * cuStreamBeginCapture waits) until gs_capture_allow(). False on timeout, holding nothing. */
bool gs_capture_hold_off(unsigned timeout_ms);
void gs_capture_allow(void);
bool gs_capture_active(void);

void gs_capture_after_fork_child(void);

#endif
