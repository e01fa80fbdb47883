/* Which physical GPU this process means by a device ordinal: ordinals depend on the process's
 * CUDA_VISIBLE_DEVICES, UUIDs do not. */
#ifndef GS_IDENTITY_H
#define GS_IDENTITY_H

#include <stddef.h>

/* The UUID of device `ordinal` as NVML writes it ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"),
 * into out (at least 41 bytes); "" when the driver cannot say, e.g. before the program has
 * initialized CUDA. Never initializes it: a program may still fork children that will. */
void gs_identity_uuid(int ordinal, char *out, size_t size);

#endif
