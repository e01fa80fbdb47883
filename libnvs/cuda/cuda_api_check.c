/* Proves that libnvs/cuda/cuda_api.h and the hooks.def table agree with the installed CUDA headers.
 * Only compiled, never linked or run: `make check-cuda-api` (each check is a _Static_assert).
 *
 * cuda.h is read with __CUDA_API_VERSION_INTERNAL so that it declares every exported symbol,
 * the legacy and _v2 names and their _ptsz/_ptds twins alike.
 *
 * How both headers fit in one file: cuda.h's facts are captured at file scope under cudah_*
 * names; our header is then included inside a function body, where its types and constants
 * shadow cuda.h's, and compared against the captured ones. The lists below name everything
 * cuda_api.h defines; add a line here when you add something there. */
#include <stddef.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "base/api_check.h"

/* Plain types and handles: must be the very same C type. */
#define GS_TYPES(X)                                                                              \
    X(cuuint32_t) X(cuuint64_t) X(CUdevice) X(CUdeviceptr) X(CUmemGenericAllocationHandle)       \
    X(CUcontext) X(CUmodule) X(CUfunction) X(CUarray) X(CUevent) X(CUstream) X(CUgraph)          \
    X(CUgraphNode) X(CUgraphExec) X(CUmemoryPool) X(CUhostFn) X(CUlaunchAttribute)               \
    X(CUexecAffinityParam) X(CUctxCreateParams) X(CUgraphEdgeData) X(CUDA_LAUNCH_PARAMS)         \
    X(CUmemcpyAttributes) X(CUDA_MEMCPY3D_BATCH_OP) X(CUarrayMapInfo) X(CUmemDecompressParams)

/* Enumerations: same size and signedness (their constants are checked one by one). */
#define GS_ENUMS(X)                                                                              \
    X(CUresult) X(CUdriverProcAddress_flags) X(CUdriverProcAddressQueryResult)                   \
    X(CUmemAttach_flags) X(CUevent_flags) X(CUstream_flags) X(CUstreamCaptureStatus)             \
    X(CUstreamCaptureMode) X(CUpointer_attribute) X(CUmemorytype) X(CUmemLocationType)           \
    X(CUmemAllocationType) X(CUmemAllocationHandleType) X(CUmemAccess_flags)

#define GS_CONSTANTS(X)                                                                          \
    X(CUDA_SUCCESS) X(CUDA_ERROR_INVALID_VALUE) X(CUDA_ERROR_OUT_OF_MEMORY)                      \
    X(CUDA_ERROR_NOT_INITIALIZED) X(CUDA_ERROR_DEINITIALIZED) X(CUDA_ERROR_NO_DEVICE)            \
    X(CUDA_ERROR_INVALID_DEVICE) X(CUDA_ERROR_INVALID_CONTEXT) X(CUDA_ERROR_INVALID_HANDLE)      \
    X(CUDA_ERROR_ILLEGAL_STATE) X(CUDA_ERROR_NOT_FOUND) X(CUDA_ERROR_NOT_READY)                  \
    X(CUDA_ERROR_ILLEGAL_ADDRESS) X(CUDA_ERROR_CONTEXT_IS_DESTROYED)                             \
    X(CUDA_ERROR_NOT_PERMITTED) X(CUDA_ERROR_NOT_SUPPORTED) X(CUDA_ERROR_SYSTEM_NOT_READY)       \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)            \
    X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD) X(CUDA_ERROR_UNKNOWN)                              \
    X(CU_GET_PROC_ADDRESS_DEFAULT) X(CU_GET_PROC_ADDRESS_LEGACY_STREAM)                          \
    X(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) X(CU_GET_PROC_ADDRESS_SUCCESS)              \
    X(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) X(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)        \
    X(CU_MEM_ATTACH_GLOBAL) X(CU_MEM_ATTACH_HOST) X(CU_MEM_ATTACH_SINGLE)                        \
    X(CU_MEMHOSTREGISTER_PORTABLE)                                                               \
    X(CU_EVENT_DEFAULT) X(CU_EVENT_BLOCKING_SYNC) X(CU_EVENT_DISABLE_TIMING)                     \
    X(CU_EVENT_INTERPROCESS) X(CU_STREAM_DEFAULT) X(CU_STREAM_NON_BLOCKING)                      \
    X(CU_STREAM_CAPTURE_STATUS_NONE) X(CU_STREAM_CAPTURE_STATUS_ACTIVE)                          \
    X(CU_STREAM_CAPTURE_STATUS_INVALIDATED) X(CU_STREAM_CAPTURE_MODE_GLOBAL)                     \
    X(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) X(CU_STREAM_CAPTURE_MODE_RELAXED)                     \
    X(CU_POINTER_ATTRIBUTE_CONTEXT) X(CU_POINTER_ATTRIBUTE_MEMORY_TYPE)                          \
    X(CU_POINTER_ATTRIBUTE_DEVICE_POINTER) X(CU_POINTER_ATTRIBUTE_HOST_POINTER)                  \
    X(CU_POINTER_ATTRIBUTE_P2P_TOKENS) X(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)                       \
    X(CU_POINTER_ATTRIBUTE_BUFFER_ID) X(CU_POINTER_ATTRIBUTE_IS_MANAGED)                         \
    X(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) X(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE)    \
    X(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) X(CU_POINTER_ATTRIBUTE_RANGE_SIZE)                  \
    X(CU_POINTER_ATTRIBUTE_MAPPED) X(CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES)                  \
    X(CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE) X(CU_POINTER_ATTRIBUTE_ACCESS_FLAGS)      \
    X(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE) X(CU_POINTER_ATTRIBUTE_MAPPING_SIZE)                  \
    X(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR) X(CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID)            \
    X(CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE) X(CU_MEMORYTYPE_HOST)                       \
    X(CU_MEMORYTYPE_DEVICE) X(CU_MEMORYTYPE_ARRAY) X(CU_MEMORYTYPE_UNIFIED)                      \
    X(CU_MEM_LOCATION_TYPE_INVALID) X(CU_MEM_LOCATION_TYPE_NONE) X(CU_MEM_LOCATION_TYPE_DEVICE)  \
    X(CU_MEM_LOCATION_TYPE_HOST) X(CU_MEM_LOCATION_TYPE_HOST_NUMA)                               \
    X(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) X(CU_MEM_LOCATION_TYPE_MAX)                        \
    X(CU_MEM_ALLOCATION_TYPE_INVALID) X(CU_MEM_ALLOCATION_TYPE_PINNED)                           \
    X(CU_MEM_ALLOCATION_TYPE_MANAGED) X(CU_MEM_ALLOCATION_TYPE_MAX) X(CU_MEM_HANDLE_TYPE_NONE)   \
    X(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) X(CU_MEM_HANDLE_TYPE_WIN32)                      \
    X(CU_MEM_HANDLE_TYPE_WIN32_KMT) X(CU_MEM_HANDLE_TYPE_FABRIC) X(CU_MEM_HANDLE_TYPE_MAX)       \
    X(CU_MEM_ACCESS_FLAGS_PROT_NONE) X(CU_MEM_ACCESS_FLAGS_PROT_READ)                            \
    X(CU_MEM_ACCESS_FLAGS_PROT_READWRITE) X(CU_MEM_ACCESS_FLAGS_PROT_MAX)

/* Structures: same size and alignment, and every field at the same offset with the same size;
 * F fields must also have the same type, E fields are enumerations (checked above) or, for
 * allocFlags, an unnamed struct whose members follow as their own lines. */
#define GS_STRUCTS(X)                                                                            \
    X(CUuuid) X(CUmemLocation) X(CUmemAllocationProp) X(CUmemAccessDesc) X(CUlaunchConfig)       \
    X(CUDA_MEMCPY2D) X(CUDA_MEMCPY3D) X(CUDA_MEMCPY3D_PEER)

#define GS_MEMCPY_SIDE(F, E, T, side)                                                            \
    F(T, side##XInBytes) F(T, side##Y) E(T, side##MemoryType) F(T, side##Device)                 \
    F(T, side##Array) F(T, side##Pitch)
#define GS_MEMCPY_3D_SIDE(F, E, T, side)                                                         \
    GS_MEMCPY_SIDE(F, E, T, side) F(T, side##Z) F(T, side##LOD) F(T, side##Height)

#define GS_FIELDS(F, E)                                                                          \
    F(CUuuid, bytes) E(CUmemLocation, type) F(CUmemLocation, id)                                 \
    E(CUmemAllocationProp, type) E(CUmemAllocationProp, requestedHandleTypes)                    \
    E(CUmemAllocationProp, location) F(CUmemAllocationProp, win32HandleMetaData)                 \
    E(CUmemAllocationProp, allocFlags) F(CUmemAllocationProp, allocFlags.compressionType)        \
    F(CUmemAllocationProp, allocFlags.gpuDirectRDMACapable)                                      \
    F(CUmemAllocationProp, allocFlags.usage) F(CUmemAllocationProp, allocFlags.reserved)         \
    E(CUmemAccessDesc, location) E(CUmemAccessDesc, flags)                                       \
    F(CUlaunchConfig, gridDimX) F(CUlaunchConfig, gridDimY) F(CUlaunchConfig, gridDimZ)          \
    F(CUlaunchConfig, blockDimX) F(CUlaunchConfig, blockDimY) F(CUlaunchConfig, blockDimZ)       \
    F(CUlaunchConfig, sharedMemBytes) F(CUlaunchConfig, hStream) F(CUlaunchConfig, attrs)        \
    F(CUlaunchConfig, numAttrs)                                                                  \
    GS_MEMCPY_SIDE(F, E, CUDA_MEMCPY2D, src) F(CUDA_MEMCPY2D, srcHost)                           \
    GS_MEMCPY_SIDE(F, E, CUDA_MEMCPY2D, dst) F(CUDA_MEMCPY2D, dstHost)                           \
    F(CUDA_MEMCPY2D, WidthInBytes) F(CUDA_MEMCPY2D, Height)                                      \
    GS_MEMCPY_3D_SIDE(F, E, CUDA_MEMCPY3D, src) F(CUDA_MEMCPY3D, srcHost)                        \
    GS_MEMCPY_3D_SIDE(F, E, CUDA_MEMCPY3D, dst) F(CUDA_MEMCPY3D, dstHost)                        \
    F(CUDA_MEMCPY3D, reserved0) F(CUDA_MEMCPY3D, reserved1) F(CUDA_MEMCPY3D, WidthInBytes)       \
    F(CUDA_MEMCPY3D, Height) F(CUDA_MEMCPY3D, Depth)                                             \
    GS_MEMCPY_3D_SIDE(F, E, CUDA_MEMCPY3D_PEER, src) F(CUDA_MEMCPY3D_PEER, srcHost)              \
    GS_MEMCPY_3D_SIDE(F, E, CUDA_MEMCPY3D_PEER, dst) F(CUDA_MEMCPY3D_PEER, dstHost)              \
    F(CUDA_MEMCPY3D_PEER, srcContext) F(CUDA_MEMCPY3D_PEER, dstContext)                          \
    F(CUDA_MEMCPY3D_PEER, WidthInBytes) F(CUDA_MEMCPY3D_PEER, Height)                            \
    F(CUDA_MEMCPY3D_PEER, Depth)

/* 1. Capture cuda.h's types and constants at file scope under cudah_* names. */
#define GS_CAPTURE_TYPE(T) typedef T cudah_##T;
GS_TYPES(GS_CAPTURE_TYPE)
GS_ENUMS(GS_CAPTURE_TYPE)
GS_STRUCTS(GS_CAPTURE_TYPE)
typedef CUstreamCallback cudah_CUstreamCallback;
#define GS_CAPTURE_CONSTANT(C) enum { cudah_##C = C };
GS_CONSTANTS(GS_CAPTURE_CONSTANT)

/* 2. Check every entry of the table against cuda.h's declaration of the exported symbol (and
 *    its per-thread twin) and against cudaTypedefs.h's PFN_<lookup>_v<since>, which proves the
 *    cudaVersion column too. This reads the parameter lists with cuda.h's types; part 3 proves
 *    our types are the same, so cuda_api.h's prototypes (the same lists) match as well. */
#define GS_TWIN_NONE(symbol, params)
#define GS_TWIN_PTSZ(symbol, params)                                                             \
    GS_SAME_TYPE(__typeof__(&symbol##_ptsz), CUresult(*) params, #symbol "_ptsz prototype")
#define GS_TWIN_PTDS(symbol, params)                                                             \
    GS_SAME_TYPE(__typeof__(&symbol##_ptds), CUresult(*) params, #symbol "_ptds prototype")
#define GS_ENTRY(kind, symbol, lookup, since, per_thread, stream, params, args)                  \
    GS_SAME_TYPE(__typeof__(&symbol), CUresult(*) params, #symbol " prototype")                  \
    GS_SAME_TYPE(PFN_##lookup##_v##since, CUresult(*) params,                                    \
                 #symbol ": signature of cuGetProcAddress(\"" #lookup "\", " #since ")")         \
    GS_TWIN_##per_thread(symbol, params)
#include "cuda/hooks.def"
#undef GS_ENTRY

/* 3. Our header, in a scope of its own, against the captured facts. */
void gs_cuda_api_check(void);
void gs_cuda_api_check(void)
{
#define GS_CUDA_API_TYPES_ONLY
#include "cuda/cuda_api.h"

#define GS_CHECK_TYPE(T) GS_SAME_TYPE(T, cudah_##T, #T " differs from cuda.h")
    GS_TYPES(GS_CHECK_TYPE)
#define GS_CHECK_ENUM(T)                                                                         \
    _Static_assert(sizeof(T) == sizeof(cudah_##T), #T ": size differs from cuda.h");             \
    GS_SAME_TYPE(__typeof__(+(T)0), __typeof__(+(cudah_##T)0), #T ": underlying type differs")
    GS_ENUMS(GS_CHECK_ENUM)
#define GS_CHECK_CONSTANT(C)                                                                     \
    _Static_assert((long long)C == (long long)cudah_##C, #C " differs from cuda.h");
    GS_CONSTANTS(GS_CHECK_CONSTANT)
#define GS_CHECK_STRUCT(T) GS_API_CHECK_STRUCT(cudah_, T, "cuda.h")
    GS_STRUCTS(GS_CHECK_STRUCT)
#define GS_CHECK_FIELD_LAYOUT(T, f) GS_API_CHECK_FIELD_LAYOUT(cudah_, T, f)
#define GS_CHECK_FIELD(T, f) GS_API_CHECK_FIELD(cudah_, T, f)
    GS_FIELDS(GS_CHECK_FIELD, GS_CHECK_FIELD_LAYOUT)
    /* Our CUresult is a type of its own in this scope (checked above as an enumeration), so a
     * function type that takes one is compared shape for shape, with cuda.h's CUresult put in
     * its place on cuda.h's side. */
    GS_SAME_TYPE(CUstreamCallback, void (*)(CUstream, CUresult, void *), "CUstreamCallback shape")
    GS_SAME_TYPE(void (*)(CUstream, cudah_CUresult, void *), cudah_CUstreamCallback,
                 "CUstreamCallback differs from cuda.h")
}
