/* GPU UUIDs for REGISTER, so that the scheduler keys its locks by physical GPU. */
#include "identity.h"

#include <stdio.h>
#include <string.h>

#include "impl.h"

/* Ordinal 0's UUID, kept once known: a child forked after CUDA started cannot initialize the
 * driver again, and it runs on the same GPU as its parent. */
static char gs_uuid_of_first[48];

void gs_identity_uuid(int ordinal, char *out, size_t size)
{
    if (size == 0)
        return;
    out[0] = '\0';
    if (ordinal == 0 && gs_uuid_of_first[0] != '\0') {
        snprintf(out, size, "%s", gs_uuid_of_first);
        return;
    }
    CUdevice dev;
    CUuuid id;
    if (GS_REAL(cuDeviceGet, GS_LEGACY)(&dev, ordinal) != CUDA_SUCCESS ||
        GS_REAL(cuDeviceGetUuid_v2, GS_LEGACY)(&id, dev) != CUDA_SUCCESS)
        return;
    const unsigned char *b = (const unsigned char *)id.bytes;
    snprintf(out, size,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
    if (ordinal == 0)
        snprintf(gs_uuid_of_first, sizeof gs_uuid_of_first, "%s", out);
}
