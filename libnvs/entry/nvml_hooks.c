/* The NVML functions libnvs answers (nvml/view.c), exported under NVML's own names for programs
 * linked to libnvidia-ml.so.1; our dlsym (interpose.c) hands the same wrappers to programs that
 * look NVML up, as pynvml and nvidia-smi do. Each wrapper is the hidden gs_nvml_hook_<symbol>,
 * and the exported name an alias of it, as for the driver's entry points (wrap.h). */
#include "entry/nvml_hooks.h"

#include "nvml/view.h"

#define GS_NVML_EXPORT(symbol)                                                                   \
    extern __typeof__(gs_nvml_hook_##symbol) symbol                                              \
        __attribute__((alias("gs_nvml_hook_" #symbol), visibility("default")));

nvmlReturn_t gs_nvml_hook_nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t gs_nvml_hook_nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    return gs_nvml_memory(device, memory);
}
GS_NVML_EXPORT(nvmlDeviceGetMemoryInfo)

nvmlReturn_t gs_nvml_hook_nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                      nvmlMemory_v2_t *memory);
nvmlReturn_t gs_nvml_hook_nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    return gs_nvml_memory_v2(device, memory);
}
GS_NVML_EXPORT(nvmlDeviceGetMemoryInfo_v2)

#define GS_PROCESS_LIST_HOOK(symbol, entry_type)                                                 \
    nvmlReturn_t gs_nvml_hook_##symbol(nvmlDevice_t device, unsigned int *infoCount,             \
                                       entry_type *infos);                                       \
    nvmlReturn_t gs_nvml_hook_##symbol(nvmlDevice_t device, unsigned int *infoCount,             \
                                       entry_type *infos)                                        \
    {                                                                                            \
        return gs_nvml_processes(GS_NVML_ID_##symbol, device, infoCount, infos,                  \
                                 sizeof(entry_type));                                            \
    }                                                                                            \
    GS_NVML_EXPORT(symbol)
#define GS_PROCESS_LIST_HOOKS(kind)                                                              \
    GS_PROCESS_LIST_HOOK(nvmlDeviceGet##kind##RunningProcesses, nvmlProcessInfo_v1_t)            \
    GS_PROCESS_LIST_HOOK(nvmlDeviceGet##kind##RunningProcesses_v2, nvmlProcessInfo_v2_t)         \
    GS_PROCESS_LIST_HOOK(nvmlDeviceGet##kind##RunningProcesses_v3, nvmlProcessInfo_t)
GS_PROCESS_LIST_HOOKS(Compute)
GS_PROCESS_LIST_HOOKS(Graphics)
GS_PROCESS_LIST_HOOKS(MPSCompute)

nvmlReturn_t gs_nvml_hook_nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device,
                                                                 nvmlProcessDetailList_t *plist);
nvmlReturn_t gs_nvml_hook_nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device,
                                                                 nvmlProcessDetailList_t *plist)
{
    return gs_nvml_process_details(device, plist);
}
GS_NVML_EXPORT(nvmlDeviceGetRunningProcessDetailList)

static void *const gs_nvml_hooks[GS_NVML_COUNT] = {
#define GS_NVML_HOOK_OF(symbol, params, args) [GS_NVML_ID_##symbol] = (void *)gs_nvml_hook_##symbol,
    GS_NVML_HOOKED(GS_NVML_HOOK_OF)
#undef GS_NVML_HOOK_OF
};

void *gs_nvml_hook(enum gs_nvml_id id)
{
    return gs_nvml_hooks[id];
}
