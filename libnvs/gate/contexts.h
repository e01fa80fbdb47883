/* The CUDA contexts this process uses, so that a drop can wait for all of their work. */
#ifndef GS_CONTEXTS_H
#define GS_CONTEXTS_H

#include <stdatomic.h>
#include <stdbool.h>

#include "cuda/cuda_api.h"

/* The device of every context this process has, while they are all on one device (the gate's
 * hot path then needs no lookup); -1 with contexts on several devices, or none known. */
extern atomic_int gs_contexts_sole_device;

/* The device of a context (NULL or unknown to the driver: -1). Cached per thread; a context not
 * seen before is asked about and remembered. Any thread. */
int gs_contexts_device(CUcontext ctx);

/* Remember a context seen in use (e.g. current during an allocation). */
void gs_contexts_note(CUcontext ctx, CUdevice dev);
/* The driver calls that end a context (destroy, reset, the release that resets), passed in as
 * the function the hook forwards to. Each runs under the lock a drain synchronizes under, so
 * that no drain synchronizes a context while it ends, and sets *gone to the context whose
 * allocations went with it (NULL: none), for the hook to forget them. */
CUresult gs_contexts_destroy(CUresult (*destroy)(CUcontext), CUcontext ctx, CUcontext *gone);
/* The last release resets the primary context. The driver's own state decides which release
 * was the last (a retain we did not see must not end it early); our count only where the
 * driver cannot say. */
CUresult gs_contexts_primary_release(CUresult (*release)(CUdevice), CUdevice dev,
                                     CUcontext *gone);
/* A reset frees every allocation of the primary context; the context itself stays retained. */
CUresult gs_contexts_primary_reset(CUresult (*reset)(CUdevice), CUdevice dev, CUcontext *gone);

/* Waits for all work of every known context on the device (every device when device < 0): push,
 * cuCtxSynchronize, pop. Client thread only, and never while a stream capture is active. */
void gs_contexts_synchronize(int device);

/* Makes a known context current on this thread and, when count is given, fills streams[] with up
 * to *count of its streams for moving memory (made on first use, non-blocking) and sets *count
 * to how many; keeps the context from being destroyed until gs_contexts_leave(). False, holding
 * nothing, when the context is unknown or gone, or no stream can be made. Client thread only,
 * never while a stream capture is active. */
bool gs_contexts_enter(CUcontext ctx, CUstream *streams, int *count);
void gs_contexts_leave(void);

/* At exit, before the driver tears itself down: no synchronization from our thread after this. */
void gs_contexts_stop(void);

void gs_contexts_after_fork_child(void);

#endif
