/* The fake GPU's NVML library (libnvidia-ml.so.1): what NVML says of the simulated GPU, for the
 * tests of libnvs's NVML view. (tests/fake_nvml/pynvml.py is another thing: a stand-in for the
 * pynvml module, for the scheduler's tests.)
 *
 * It sees the devices of fake_gpu.c: FAKECUDA_DEVICE_COUNT devices of FAKECUDA_DEVICE_MEM bytes,
 * the memory every process of the shared device (FAKECUDA_SHARED_DEVICE) has in use, and the
 * UUIDs the driver gives. NVML numbers GPUs its own way (by PCI bus, where CUDA puts the fastest
 * first): FAKECUDA_NVML_REVERSED=1 numbers them in the reverse of the driver's order. Of each
 * device's memory, FAKE_NVML_RESERVED bytes are the driver's own. The running processes are
 * FAKECUDA_NVML_PROCESSES, a comma-separated list of KIND:PID:BYTES (KIND compute, graphics or
 * mps; PID a number, or `self` for the process that asks), the same for every device; without
 * it, the compute processes are those that made a context on the device (fake_gpu.c), each with
 * its own device memory outside managed memory, as a driver counts them. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_driver.h"
#include "nvml/nvml_api.h"

#define FAKE_NVML_RESERVED (1ull << 20)
#define FAKE_NVML_MAX_PROCESSES 64
#define FAKE_NVML_NO_INSTANCE 0xFFFFFFFFu

struct nvmlDevice_st {
    CUdevice dev; /* the driver's ordinal of this GPU */
};

static struct nvmlDevice_st devices[FAKE_MAX_DEVICES];
static _Atomic int initialized; /* nvmlInit calls less nvmlShutdown calls */

static nvmlReturn_t check_device(nvmlDevice_t device)
{
    if (atomic_load(&initialized) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (device < devices || device >= devices + fake_config()->device_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    const struct fake_config *c = fake_config();
    if (c->config_error) {
        fprintf(stderr, "fakecuda NVML: %s\n", c->config_error);
        return NVML_ERROR_UNKNOWN;
    }
    bool reversed = getenv("FAKECUDA_NVML_REVERSED") && !strcmp(getenv("FAKECUDA_NVML_REVERSED"),
                                                                "1");
    for (int i = 0; i < c->device_count; i++)
        devices[i].dev = reversed ? c->device_count - 1 - i : i;
    atomic_fetch_add(&initialized, 1);
    return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

FAKE_API nvmlReturn_t nvmlShutdown(void)
{
    if (atomic_load(&initialized) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    atomic_fetch_sub(&initialized, 1);
    return NVML_SUCCESS;
}

FAKE_API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    default: return "Unknown Error";
    }
}

FAKE_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (atomic_load(&initialized) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned int)fake_config()->device_count;
    return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (atomic_load(&initialized) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned int)fake_config()->device_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

static void format_uuid(CUdevice dev, char *out, size_t size)
{
    unsigned char b[16];
    fake_gpu_uuid(dev, b);
    snprintf(out, size,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

FAKE_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    nvmlReturn_t r = check_device(device);
    if (r != NVML_SUCCESS)
        return r;
    char text[NVML_DEVICE_UUID_BUFFER_SIZE];
    format_uuid(device->dev, text, sizeof text);
    if (!uuid)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (length <= strlen(text))
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(uuid, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    if (atomic_load(&initialized) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < fake_config()->device_count; i++) {
        char text[NVML_DEVICE_UUID_BUFFER_SIZE];
        format_uuid(devices[i].dev, text, sizeof text);
        if (!strcmp(text, uuid)) {
            *device = &devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

FAKE_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    nvmlReturn_t r = check_device(device);
    if (r != NVML_SUCCESS)
        return r;
    if (!name || length == 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(name, length, "gemshare fake GPU");
    return NVML_SUCCESS;
}

/* What the device's processes have allocated, as the driver's cuMemGetInfo counts it. */
static uint64_t allocated(CUdevice dev)
{
    uint64_t device_bytes, managed_bytes;
    fake_memory_usage(dev, &device_bytes, &managed_bytes);
    return device_bytes + managed_bytes;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

FAKE_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    nvmlReturn_t r = check_device(device);
    if (r != NVML_SUCCESS)
        return r;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = fake_config()->device_mem;
    memory->reserved = min_u64(FAKE_NVML_RESERVED, memory->total);
    memory->used = min_u64(allocated(device->dev), memory->total - memory->reserved);
    memory->free = memory->total - memory->reserved - memory->used;
    return NVML_SUCCESS;
}

/* The first version counts the driver's reserve as used. */
FAKE_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    nvmlMemory_v2_t v2 = {.version = nvmlMemory_v2};
    nvmlReturn_t r = memory ? nvmlDeviceGetMemoryInfo_v2(device, &v2)
                            : NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *memory = (nvmlMemory_t){.total = v2.total, .free = v2.free, .used = v2.reserved + v2.used};
    return r;
}

/* FAKECUDA_NVML_PROCESSES entries of one mode (NVML_PROCESS_MODE_ALL: every one), as details. */
static unsigned int running(CUdevice dev, unsigned int mode,
                            nvmlProcessDetail_v1_t out[FAKE_NVML_MAX_PROCESSES])
{
    static const char *const kinds[] = {"compute", "graphics", "mps"};
    const char *list = getenv("FAKECUDA_NVML_PROCESSES");
    if (!list) {
        unsigned int pids[FAKE_NVML_MAX_PROCESSES];
        uint64_t used[FAKE_NVML_MAX_PROCESSES];
        unsigned int n = mode == NVML_PROCESS_MODE_COMPUTE || mode == NVML_PROCESS_MODE_ALL
                             ? fake_device_processes(dev, pids, used, FAKE_NVML_MAX_PROCESSES)
                             : 0;
        for (unsigned int i = 0; i < n; i++)
            out[i] = (nvmlProcessDetail_v1_t){.pid = pids[i], .usedGpuMemory = used[i],
                                              .gpuInstanceId = FAKE_NVML_NO_INSTANCE,
                                              .computeInstanceId = FAKE_NVML_NO_INSTANCE};
        return n;
    }
    char copy[2048];
    snprintf(copy, sizeof copy, "%s", list ? list : "");
    unsigned int n = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item && n < FAKE_NVML_MAX_PROCESSES;
         item = strtok_r(NULL, ",", &save)) {
        char kind[16], pid[16];
        unsigned long long bytes;
        if (sscanf(item, "%15[^:]:%15[^:]:%llu", kind, pid, &bytes) != 3) {
            fprintf(stderr, "fakecuda NVML: bad FAKECUDA_NVML_PROCESSES entry '%s'\n", item);
            continue;
        }
        if (mode != NVML_PROCESS_MODE_ALL && strcmp(kind, kinds[mode]) != 0)
            continue;
        out[n++] = (nvmlProcessDetail_v1_t){
            .pid = strcmp(pid, "self") ? (unsigned int)strtoul(pid, NULL, 10)
                                       : (unsigned int)getpid(),
            .usedGpuMemory = bytes,
            .gpuInstanceId = FAKE_NVML_NO_INSTANCE,
            .computeInstanceId = FAKE_NVML_NO_INSTANCE};
    }
    return n;
}

/* A list call's answer: the entries if *count has room for them (copied into infos with
 * `copy`), else NVML_ERROR_INSUFFICIENT_SIZE with the count needed. */
static nvmlReturn_t answer(CUdevice dev, unsigned int mode, unsigned int *count, void *infos,
                           void (*copy)(void *infos, unsigned int i,
                                        const nvmlProcessDetail_v1_t *p))
{
    if (!count || (!infos && *count > 0))
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlProcessDetail_v1_t found[FAKE_NVML_MAX_PROCESSES];
    unsigned int n = running(dev, mode, found);
    if (n > *count) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++)
        copy(infos, i, &found[i]);
    *count = n;
    return NVML_SUCCESS;
}

static void copy_v1(void *infos, unsigned int i, const nvmlProcessDetail_v1_t *p)
{
    ((nvmlProcessInfo_v1_t *)infos)[i] = (nvmlProcessInfo_v1_t){p->pid, p->usedGpuMemory};
}

static void copy_v2(void *infos, unsigned int i, const nvmlProcessDetail_v1_t *p)
{
    ((nvmlProcessInfo_v2_t *)infos)[i] = (nvmlProcessInfo_v2_t){
        p->pid, p->usedGpuMemory, p->gpuInstanceId, p->computeInstanceId};
}

static void copy_detail(void *infos, unsigned int i, const nvmlProcessDetail_v1_t *p)
{
    ((nvmlProcessDetail_v1_t *)infos)[i] = *p;
}

#define FAKE_PROCESS_LIST(symbol, entry_type, mode, copy)                                        \
    FAKE_API nvmlReturn_t symbol(nvmlDevice_t device, unsigned int *infoCount,                  \
                                 entry_type *infos)                                              \
    {                                                                                            \
        nvmlReturn_t r = check_device(device);                                                   \
        return r != NVML_SUCCESS ? r : answer(device->dev, mode, infoCount, infos, copy);        \
    }
#define FAKE_PROCESS_LISTS(kind, mode)                                                           \
    FAKE_PROCESS_LIST(nvmlDeviceGet##kind##RunningProcesses, nvmlProcessInfo_v1_t, mode, copy_v1)\
    FAKE_PROCESS_LIST(nvmlDeviceGet##kind##RunningProcesses_v2, nvmlProcessInfo_v2_t, mode,      \
                      copy_v2)                                                                   \
    FAKE_PROCESS_LIST(nvmlDeviceGet##kind##RunningProcesses_v3, nvmlProcessInfo_t, mode, copy_v2)
FAKE_PROCESS_LISTS(Compute, NVML_PROCESS_MODE_COMPUTE)
FAKE_PROCESS_LISTS(Graphics, NVML_PROCESS_MODE_GRAPHICS)
FAKE_PROCESS_LISTS(MPSCompute, NVML_PROCESS_MODE_MPS)

FAKE_API nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device,
                                                            nvmlProcessDetailList_t *plist)
{
    nvmlReturn_t r = check_device(device);
    if (r != NVML_SUCCESS)
        return r;
    if (!plist || plist->mode >= NVML_PROCESS_MODE_MAX)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (plist->version != nvmlProcessDetailList_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    return answer(device->dev, plist->mode, &plist->numProcArrayEntries, plist->procArray,
                  copy_detail);
}
