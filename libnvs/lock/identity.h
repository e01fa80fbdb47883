/* Which physical GPU each of this process's devices is: ordinals depend on the process's
 * CUDA_VISIBLE_DEVICES, UUIDs do not. */
#ifndef GS_IDENTITY_H
#define GS_IDENTITY_H

#include <stddef.h>

/* The device's UUID as NVML writes it ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"), into out (at
 * least 41 bytes); "" when the driver cannot say, e.g. before the program has initialized CUDA.
 * Never initializes it: a program may still fork children that will. Any thread. */
void gs_identity_uuid(int device, char *out, size_t size);
void gs_identity_after_fork_child(void);

#endif
