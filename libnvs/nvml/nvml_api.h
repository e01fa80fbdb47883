/* Our own declarations of the part of NVML (libnvidia-ml.so.1) that gemshare hooks or calls, so
 * that libnvs.so (and the fake NVML library in tests/fakecuda) build without NVIDIA's headers.
 * Every type, constant and prototype here matches nvml.h (NVML API 13, LP64 Linux);
 * libnvs/nvml/nvml_api_check.c proves it wherever nvml.h is found (`make check-nvml-api`).
 *
 * Define GS_NVML_API_TYPES_ONLY before including to get the types without the prototypes, or
 * GS_NVML_LISTS_ONLY for the lists of functions alone. */
#ifndef GS_NVML_API_H
#define GS_NVML_API_H

#ifndef GS_NVML_LISTS_ONLY

/* Results: the codes gemshare produces, tests for, or its fake NVML returns. */
typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;

#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
/* A struct version: its size, and the version number in the top byte (spelt as nvml.h does,
 * so that the two definitions may meet). */
#define NVML_STRUCT_VERSION(data, ver) (unsigned int)(sizeof(nvml ## data ## _v ## ver ## _t) | \
                                                      (ver << 24U))

/* nvmlDeviceGetMemoryInfo: used includes what the driver reserves. */
typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

/* nvmlDeviceGetMemoryInfo_v2: reserved apart; total = reserved + used + free. */
typedef struct nvmlMemory_v2_st {
    unsigned int version; /* nvmlMemory_v2, or the call fails */
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)

/* The process lists: the first call of each version, and the later ones (the _v3 functions take
 * nvmlProcessInfo_t, the layout of _v2). Instance IDs are 0xFFFFFFFF outside MIG. */
typedef struct nvmlProcessInfo_v1_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct nvmlProcessInfo_v2_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t, nvmlProcessInfo_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessDetail_v1_t;

typedef enum nvmlProcessMode_enum {
    NVML_PROCESS_MODE_COMPUTE = 0,
    NVML_PROCESS_MODE_GRAPHICS = 1,
    NVML_PROCESS_MODE_MPS = 2,
    NVML_PROCESS_MODE_ALL = 3,
    NVML_PROCESS_MODE_MAX = NVML_PROCESS_MODE_ALL + 1
} nvmlProcessMode_t;

/* nvmlDeviceGetRunningProcessDetailList: one list of processes of `mode`. */
typedef struct {
    unsigned int version; /* nvmlProcessDetailList_v1, or the call fails */
    unsigned int mode;    /* nvmlProcessMode_t */
    unsigned int numProcArrayEntries;
    nvmlProcessDetail_v1_t *procArray;
} nvmlProcessDetailList_v1_t;
typedef nvmlProcessDetailList_v1_t nvmlProcessDetailList_t;
#define nvmlProcessDetailList_v1 NVML_STRUCT_VERSION(ProcessDetailList, 1)
#endif

/* X(symbol, params, args): what libnvs answers in its own way (entry/nvml_hooks.c). */
#define GS_NVML_HOOKED(X)                                                                        \
    X(nvmlDeviceGetMemoryInfo, (nvmlDevice_t device, nvmlMemory_t * memory), (device, memory))   \
    X(nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t device, nvmlMemory_v2_t * memory),               \
      (device, memory))                                                                          \
    GS_NVML_PROCESS_LISTS(X, Compute)                                                            \
    GS_NVML_PROCESS_LISTS(X, Graphics)                                                           \
    GS_NVML_PROCESS_LISTS(X, MPSCompute)                                                         \
    X(nvmlDeviceGetRunningProcessDetailList,                                                     \
      (nvmlDevice_t device, nvmlProcessDetailList_t * plist), (device, plist))
#define GS_NVML_PROCESS_LISTS(X, kind)                                                           \
    X(nvmlDeviceGet##kind##RunningProcesses,                                                     \
      (nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v1_t *infos),               \
      (device, infoCount, infos))                                                                \
    X(nvmlDeviceGet##kind##RunningProcesses_v2,                                                  \
      (nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v2_t *infos),               \
      (device, infoCount, infos))                                                                \
    X(nvmlDeviceGet##kind##RunningProcesses_v3,                                                  \
      (nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos),                  \
      (device, infoCount, infos))

/* What libnvs only calls: which GPU a handle is. */
#define GS_NVML_CALLED(X)                                                                        \
    X(nvmlDeviceGetUUID, (nvmlDevice_t device, char *uuid, unsigned int length),                 \
      (device, uuid, length))

/* What only the test programs call and the fake NVML library (tests/fakecuda) implements. */
#define GS_NVML_FOR_TESTS(X)                                                                     \
    X(nvmlInit_v2, (void), ())                                                                   \
    X(nvmlInitWithFlags, (unsigned int flags), (flags))                                          \
    X(nvmlShutdown, (void), ())                                                                  \
    X(nvmlDeviceGetCount_v2, (unsigned int *deviceCount), (deviceCount))                         \
    X(nvmlDeviceGetHandleByIndex_v2, (unsigned int index, nvmlDevice_t *device), (index, device)) \
    X(nvmlDeviceGetHandleByUUID, (const char *uuid, nvmlDevice_t *device), (uuid, device))       \
    X(nvmlDeviceGetName, (nvmlDevice_t device, char *name, unsigned int length),                 \
      (device, name, length))

#if !defined(GS_NVML_API_TYPES_ONLY) && !defined(GS_NVML_LISTS_ONLY)
#define GS_NVML_PROTOTYPE(symbol, params, args) nvmlReturn_t symbol params;
GS_NVML_HOOKED(GS_NVML_PROTOTYPE)
GS_NVML_CALLED(GS_NVML_PROTOTYPE)
GS_NVML_FOR_TESTS(GS_NVML_PROTOTYPE)
#undef GS_NVML_PROTOTYPE
const char *nvmlErrorString(nvmlReturn_t result);
#endif

#endif
