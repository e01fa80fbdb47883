/* Proves that libnvs/nvml/nvml_api.h agrees with NVIDIA's nvml.h. Only compiled, never linked or
 * run: `make check-nvml-api` (each check is a _Static_assert), as cuda/cuda_api_check.c does for
 * the driver API.
 *
 * nvml.h is read with NVML_NO_UNVERSIONED_FUNC_DEFS, so that every version of a function is
 * declared under its own name (otherwise nvmlDeviceGetComputeRunningProcesses is a macro for
 * its _v3). Its facts are captured at file scope under nvmlh_* names; our header is then
 * included inside a function body, where its types and constants shadow nvml.h's, and compared
 * against the captured ones. Add a line below when you add something to nvml_api.h. */
#include <stddef.h>

#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include "base/api_check.h"

#define GS_CONSTANTS(X)                                                                          \
    X(NVML_SUCCESS) X(NVML_ERROR_UNINITIALIZED) X(NVML_ERROR_INVALID_ARGUMENT)                   \
    X(NVML_ERROR_NOT_SUPPORTED) X(NVML_ERROR_NOT_FOUND) X(NVML_ERROR_INSUFFICIENT_SIZE)          \
    X(NVML_ERROR_LIBRARY_NOT_FOUND) X(NVML_ERROR_FUNCTION_NOT_FOUND) X(NVML_ERROR_GPU_IS_LOST)   \
    X(NVML_ERROR_MEMORY) X(NVML_ERROR_ARGUMENT_VERSION_MISMATCH) X(NVML_ERROR_UNKNOWN)           \
    X(NVML_DEVICE_UUID_BUFFER_SIZE) X(NVML_DEVICE_NAME_V2_BUFFER_SIZE) X(nvmlMemory_v2)          \
    X(nvmlProcessDetailList_v1) X(NVML_PROCESS_MODE_COMPUTE) X(NVML_PROCESS_MODE_GRAPHICS)       \
    X(NVML_PROCESS_MODE_MPS) X(NVML_PROCESS_MODE_ALL) X(NVML_PROCESS_MODE_MAX)

/* Same size and alignment, and every field at the same offset with the same size (F fields the
 * same type too; the detail list's array points to a struct that has no tag on either side). */
#define GS_STRUCTS(X)                                                                            \
    X(nvmlMemory_t) X(nvmlMemory_v2_t) X(nvmlProcessInfo_v1_t) X(nvmlProcessInfo_v2_t)           \
    X(nvmlProcessInfo_t) X(nvmlProcessDetail_v1_t) X(nvmlProcessDetailList_t)

#define GS_FIELDS(F, L)                                                                          \
    F(nvmlMemory_t, total) F(nvmlMemory_t, free) F(nvmlMemory_t, used)                           \
    F(nvmlMemory_v2_t, version) F(nvmlMemory_v2_t, total) F(nvmlMemory_v2_t, reserved)           \
    F(nvmlMemory_v2_t, free) F(nvmlMemory_v2_t, used)                                            \
    F(nvmlProcessInfo_v1_t, pid) F(nvmlProcessInfo_v1_t, usedGpuMemory)                          \
    F(nvmlProcessInfo_v2_t, pid) F(nvmlProcessInfo_v2_t, usedGpuMemory)                          \
    F(nvmlProcessInfo_v2_t, gpuInstanceId) F(nvmlProcessInfo_v2_t, computeInstanceId)            \
    F(nvmlProcessInfo_t, pid) F(nvmlProcessInfo_t, usedGpuMemory)                                \
    F(nvmlProcessInfo_t, gpuInstanceId) F(nvmlProcessInfo_t, computeInstanceId)                  \
    F(nvmlProcessDetail_v1_t, pid) F(nvmlProcessDetail_v1_t, usedGpuMemory)                      \
    F(nvmlProcessDetail_v1_t, gpuInstanceId) F(nvmlProcessDetail_v1_t, computeInstanceId)        \
    F(nvmlProcessDetail_v1_t, usedGpuCcProtectedMemory)                                          \
    F(nvmlProcessDetailList_t, version) F(nvmlProcessDetailList_t, mode)                         \
    F(nvmlProcessDetailList_t, numProcArrayEntries) L(nvmlProcessDetailList_t, procArray)

/* 1. Capture nvml.h's types and constants at file scope under nvmlh_* names. */
#define GS_CAPTURE_TYPE(T) typedef T nvmlh_##T;
GS_STRUCTS(GS_CAPTURE_TYPE)
typedef nvmlReturn_t nvmlh_nvmlReturn_t;
typedef nvmlProcessMode_t nvmlh_nvmlProcessMode_t;
typedef nvmlDevice_t nvmlh_nvmlDevice_t;
#define GS_CAPTURE_CONSTANT(C) enum { nvmlh_##C = C };
GS_CONSTANTS(GS_CAPTURE_CONSTANT)

/* 2. Every function we declare against nvml.h's declaration, the parameter lists read with
 *    nvml.h's types; part 3 proves ours are the same, so our prototypes match as well. */
#define GS_CHECK_FUNCTION(symbol, params, args)                                                  \
    GS_SAME_TYPE(__typeof__(&symbol), nvmlReturn_t(*) params, #symbol " prototype")

/* Our lists of functions only: our types come in part 3. */
#define GS_NVML_LISTS_ONLY
#include "nvml/nvml_api.h"
#undef GS_NVML_LISTS_ONLY
#undef GS_NVML_API_H
GS_NVML_HOOKED(GS_CHECK_FUNCTION)
GS_NVML_CALLED(GS_CHECK_FUNCTION)
GS_NVML_FOR_TESTS(GS_CHECK_FUNCTION)
GS_SAME_TYPE(__typeof__(&nvmlErrorString), const char *(*)(nvmlReturn_t), "nvmlErrorString")

/* 3. Our header, in a scope of its own, against the captured facts. */
void gs_nvml_api_check(void);
void gs_nvml_api_check(void)
{
#define GS_NVML_API_TYPES_ONLY
#include "nvml/nvml_api.h"

    _Static_assert(sizeof(nvmlReturn_t) == sizeof(nvmlh_nvmlReturn_t), "nvmlReturn_t size");
    GS_SAME_TYPE(__typeof__(+(nvmlReturn_t)0), __typeof__(+(nvmlh_nvmlReturn_t)0),
                 "nvmlReturn_t: underlying type differs")
    _Static_assert(sizeof(nvmlProcessMode_t) == sizeof(nvmlh_nvmlProcessMode_t),
                   "nvmlProcessMode_t size");
    _Static_assert(sizeof(nvmlDevice_t) == sizeof(nvmlh_nvmlDevice_t), "nvmlDevice_t size");
#define GS_CHECK_CONSTANT(C)                                                                     \
    _Static_assert((long long)C == (long long)nvmlh_##C, #C " differs from nvml.h");
    GS_CONSTANTS(GS_CHECK_CONSTANT)
#define GS_CHECK_STRUCT(T) GS_API_CHECK_STRUCT(nvmlh_, T, "nvml.h")
    GS_STRUCTS(GS_CHECK_STRUCT)
#define GS_CHECK_FIELD_LAYOUT(T, f) GS_API_CHECK_FIELD_LAYOUT(nvmlh_, T, f)
#define GS_CHECK_FIELD(T, f) GS_API_CHECK_FIELD(nvmlh_, T, f)
    GS_FIELDS(GS_CHECK_FIELD, GS_CHECK_FIELD_LAYOUT)
}
