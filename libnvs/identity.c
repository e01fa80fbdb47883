/* Device 0's GPU UUID for DEVICE_UUID, so that the scheduler keys its lock by physical GPU. */
#include "identity.h"

#include <stdio.h>

#include "impl.h"

/* Kept once known: a child forked after CUDA started cannot ask the driver again, and it runs
 * on the same GPU as its parent. */
static char gs_uuid[48];

void gs_identity_uuid(char *out, size_t size)
{
    CUdevice dev;
    CUuuid id;
    if (gs_uuid[0] == '\0' && GS_REAL(cuDeviceGet, GS_LEGACY)(&dev, 0) == CUDA_SUCCESS &&
        GS_REAL(cuDeviceGetUuid_v2, GS_LEGACY)(&id, dev) == CUDA_SUCCESS) {
        const unsigned char *b = (const unsigned char *)id.bytes;
        snprintf(gs_uuid, sizeof gs_uuid,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
                 b[13], b[14], b[15]);
    }
    snprintf(out, size, "%s", gs_uuid);
}
