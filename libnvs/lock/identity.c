/* Each device's GPU UUID for DEVICE_UUID, so that the scheduler keys its locks by physical GPU. */
#include "lock/identity.h"

#include <pthread.h>
#include <stdio.h>

#include "cuda/impl.h"
#include "memory/memory.h"

/* Kept once known: a child forked after CUDA started cannot ask the driver again, and it runs
 * on the same GPUs as its parent. The client thread and NVML queries both ask. */
static char gs_uuids[GS_MAX_DEVICES][48];
static pthread_mutex_t gs_uuids_mu = PTHREAD_MUTEX_INITIALIZER;

void gs_identity_uuid(int device, char *out, size_t size)
{
    if (device < 0 || device >= GS_MAX_DEVICES) {
        snprintf(out, size, "%s", "");
        return;
    }
    pthread_mutex_lock(&gs_uuids_mu);
    char *uuid = gs_uuids[device];
    CUdevice dev;
    CUuuid id;
    if (uuid[0] == '\0' && GS_REAL(cuDeviceGet, GS_LEGACY)(&dev, device) == CUDA_SUCCESS &&
        GS_REAL(cuDeviceGetUuid_v2, GS_LEGACY)(&id, dev) == CUDA_SUCCESS) {
        const unsigned char *b = (const unsigned char *)id.bytes;
        snprintf(uuid, sizeof gs_uuids[device],
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
                 b[13], b[14], b[15]);
    }
    snprintf(out, size, "%s", uuid);
    pthread_mutex_unlock(&gs_uuids_mu);
}

void gs_identity_after_fork_child(void)
{
    /* Only the forking thread runs in the child: nobody holds the mutex. */
    pthread_mutex_init(&gs_uuids_mu, NULL);
}
