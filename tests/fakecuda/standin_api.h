/* The driver entry points a stand-in CUDA program uses, and how it finds them.
 *
 * Real programs reach the driver three ways, and so can the stand-in (--resolve):
 *   procaddr     as the CUDA 13 runtime: dlopen("libcuda.so.1"), dlsym cuGetProcAddress_v2, then
 *                every entry point through it, once with flags 0 and once with flags 2
 *                (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
 *   procaddr-v1  the same through the older cuGetProcAddress;
 *   dlsym        as PyTorch's driver wrapper and Triton: dlsym on the libcuda handle;
 *   linked       calls the exported names (only in standin_linked).
 * With --ptsz the program uses the per-thread-default-stream functions: the flags-2 answers, or
 * the _ptsz/_ptds exported names. */
#ifndef STANDIN_API_H
#define STANDIN_API_H

#include <stdbool.h>

#include "fake_cuda.h"

/* X(lookup name, exported symbol, per-thread twin: NONE, PTSZ or PTDS, cudaVersion to ask for)
 * The version is that of the ABI the stand-in calls, as a runtime built against it would ask:
 * e.g. "cuCtxSynchronize" at 13000 is cuCtxSynchronize_v2, which takes a context. */
#define STANDIN_APIS(X)                                                                          \
    X(cuInit, cuInit, NONE, 12000)                                                                 \
    X(cuDriverGetVersion, cuDriverGetVersion, NONE, 12000)                                         \
    X(cuGetErrorName, cuGetErrorName, NONE, 12000)                                                 \
    X(cuDeviceGet, cuDeviceGet, NONE, 12000)                                                       \
    X(cuDeviceGetCount, cuDeviceGetCount, NONE, 12000)                                             \
    X(cuDeviceTotalMem, cuDeviceTotalMem_v2, NONE, 12000)                                          \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, NONE, 12000)                             \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, NONE, 12000)                        \
    X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2, NONE, 12000)                            \
    X(cuCtxCreate, cuCtxCreate_v2, NONE, 11000)                                                    \
    X(cuCtxSetCurrent, cuCtxSetCurrent, NONE, 12000)                                               \
    X(cuCtxGetCurrent, cuCtxGetCurrent, NONE, 12000)                                               \
    X(cuCtxSynchronize, cuCtxSynchronize, NONE, 12000)                                             \
    X(cuMemAlloc, cuMemAlloc_v2, NONE, 12000)                                                      \
    X(cuMemAllocPitch, cuMemAllocPitch_v2, NONE, 12000)                                            \
    X(cuMemAllocManaged, cuMemAllocManaged, NONE, 12000)                                           \
    X(cuMemFree, cuMemFree_v2, NONE, 12000)                                                        \
    X(cuMemGetInfo, cuMemGetInfo_v2, NONE, 12000)                                                  \
    X(cuMemGetAddressRange, cuMemGetAddressRange_v2, NONE, 12000)                                  \
    X(cuPointerGetAttribute, cuPointerGetAttribute, NONE, 12000)                                   \
    X(cuMemAllocAsync, cuMemAllocAsync, PTSZ, 12000)                                               \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, PTSZ, 12000)                               \
    X(cuMemFreeAsync, cuMemFreeAsync, PTSZ, 12000)                                                 \
    X(cuMemPoolCreate, cuMemPoolCreate, NONE, 12000)                                               \
    X(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, NONE, 12000)                   \
    X(cuMemCreate, cuMemCreate, NONE, 12000)                                                       \
    X(cuMemRelease, cuMemRelease, NONE, 12000)                                                     \
    X(cuMemAddressReserve, cuMemAddressReserve, NONE, 12000)                                       \
    X(cuMemAddressFree, cuMemAddressFree, NONE, 12000)                                             \
    X(cuMemMap, cuMemMap, NONE, 12000)                                                             \
    X(cuMemUnmap, cuMemUnmap, NONE, 12000)                                                         \
    X(cuMemSetAccess, cuMemSetAccess, NONE, 12000)                                                 \
    X(cuModuleLoadData, cuModuleLoadData, NONE, 12000)                                             \
    X(cuModuleGetFunction, cuModuleGetFunction, NONE, 12000)                                       \
    X(cuLaunchKernel, cuLaunchKernel, PTSZ, 12000)                                                 \
    X(cuLaunchKernelEx, cuLaunchKernelEx, PTSZ, 12000)                                             \
    X(cuLaunchHostFunc, cuLaunchHostFunc, PTSZ, 12000)                                             \
    X(cuMemcpy, cuMemcpy, PTDS, 12000)                                                             \
    X(cuMemcpyAsync, cuMemcpyAsync, PTSZ, 12000)                                                   \
    X(cuMemcpyHtoD, cuMemcpyHtoD_v2, PTDS, 12000)                                                  \
    X(cuMemcpyDtoH, cuMemcpyDtoH_v2, PTDS, 12000)                                                  \
    X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, PTSZ, 12000)                                        \
    X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, PTSZ, 12000)                                        \
    X(cuMemcpy2D, cuMemcpy2D_v2, PTDS, 12000)                                                      \
    X(cuMemsetD8, cuMemsetD8_v2, PTDS, 12000)                                                      \
    X(cuMemsetD32Async, cuMemsetD32Async, PTSZ, 12000)                                             \
    X(cuMemPrefetchAsync, cuMemPrefetchAsync_v2, PTSZ, 12020)                                      \
    X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, PTSZ, 12000)                           \
    X(cuLaunch, cuLaunch, NONE, 12000)                                                             \
    X(cuLaunchGrid, cuLaunchGrid, NONE, 12000)                                                     \
    X(cuLaunchGridAsync, cuLaunchGridAsync, NONE, 12000)                                           \
    X(cuStreamAddCallback, cuStreamAddCallback, PTSZ, 12000)                                       \
    X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, PTSZ, 12000)                                        \
    X(cuMemcpyDtoD, cuMemcpyDtoD_v2, PTDS, 12000)                                                  \
    X(cuMemcpyPeer, cuMemcpyPeer, PTDS, 12000)                                                     \
    X(cuMemcpy3D, cuMemcpy3D_v2, PTDS, 12000)                                                      \
    X(cuMemcpyBatchAsync, cuMemcpyBatchAsync_v2, PTSZ, 13000)                                      \
    X(cuMemsetD2D8, cuMemsetD2D8_v2, PTDS, 12000)                                                  \
    X(cuMemPrefetchBatchAsync, cuMemPrefetchBatchAsync, PTSZ, 13000)                               \
    X(cuMemDiscardBatchAsync, cuMemDiscardBatchAsync, PTSZ, 13000)                                 \
    X(cuMemDiscardAndPrefetchBatchAsync, cuMemDiscardAndPrefetchBatchAsync, PTSZ, 13000)           \
    X(cuMemBatchDecompressAsync, cuMemBatchDecompressAsync, PTSZ, 12060)                           \
    X(cuMemMapArrayAsync, cuMemMapArrayAsync, PTSZ, 11010)                                         \
    X(cuStreamCreate, cuStreamCreate, NONE, 12000)                                                 \
    X(cuStreamSynchronize, cuStreamSynchronize, PTSZ, 12000)                                       \
    X(cuStreamQuery, cuStreamQuery, PTSZ, 12000)                                                   \
    X(cuStreamBeginCapture, cuStreamBeginCapture_v2, PTSZ, 12000)                                  \
    X(cuStreamEndCapture, cuStreamEndCapture, PTSZ, 12000)                                         \
    X(cuStreamIsCapturing, cuStreamIsCapturing, PTSZ, 12000)                                       \
    X(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode, NONE, 12000)           \
    X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, NONE, 12000)                       \
    X(cuGraphLaunch, cuGraphLaunch, PTSZ, 12000)                                                   \
    X(cuGraphExecDestroy, cuGraphExecDestroy, NONE, 12000)                                         \
    X(cuGraphDestroy, cuGraphDestroy, NONE, 12000)                                                 \
    X(cuEventCreate, cuEventCreate, NONE, 12000)                                                   \
    X(cuEventRecord, cuEventRecord, PTSZ, 12000)                                                   \
    X(cuEventQuery, cuEventQuery, NONE, 12000)                                                     \
    X(cuEventSynchronize, cuEventSynchronize, NONE, 12000)

struct standin_api {
#define STANDIN_FIELD(lookup, symbol, twin, version) __typeof__(&symbol) lookup;
    STANDIN_APIS(STANDIN_FIELD)
#undef STANDIN_FIELD
};

/* Fills api the way `mode` names (procaddr, procaddr-v1, dlsym, linked); false with a message on
 * stderr when the driver or an entry point cannot be found. */
bool standin_resolve(struct standin_api *api, const char *mode, bool per_thread);

#endif
