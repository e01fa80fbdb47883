/* CUDA graph stream captures in progress: the drop-lock path must never synchronize inside one,
 * and work for a capturing stream passes the gate (it is recorded, not run). */
#ifndef GS_CAPTURE_H
#define GS_CAPTURE_H

#include <stdbool.h>

#include "cuda/driver.h"

/* Whether work for this stream (as the variant called sees it: 0 is the legacy or the per-thread
 * default stream) would be recorded into a capture rather than run. */
bool gs_capture_stream_is_capturing(enum gs_variant variant, CUstream stream);

/* Waits up to timeout_ms for no capture to be active, then holds captures off (a new
 * cuStreamBeginCapture waits) until gs_capture_allow(). False on timeout, holding nothing. */
bool gs_capture_hold_off(unsigned timeout_ms);
void gs_capture_allow(void);
bool gs_capture_active(void);

void gs_capture_after_fork_child(void);

#endif
