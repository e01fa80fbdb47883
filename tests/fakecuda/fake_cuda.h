/* CUDA declarations for the fake driver and the stand-in programs.
 *
 * The shared ones come from libnvs/cuda/cuda_api.h (one definition, checked against cuda.h by the
 * libnvs work). This file adds only what the fake needs beyond what libnvs hooks or calls: codes,
 * device attributes and parameter blocks of entry points libnvs leaves alone. Values are those of
 * CUDA 13's cuda.h. */
#ifndef FAKE_CUDA_H
#define FAKE_CUDA_H

#include "cuda/cuda_api.h"

/* Results cuda_api.h does not list (macros, so they stay correct if it gains them). */
#define CUDA_ERROR_INVALID_IMAGE ((CUresult)200)
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED ((CUresult)712)
#define CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED ((CUresult)713)
#define CUDA_ERROR_STREAM_CAPTURE_UNMATCHED ((CUresult)903)
#define CUDA_ERROR_STREAM_CAPTURE_IMPLICIT ((CUresult)906)
#define CUDA_ERROR_CAPTURED_EVENT ((CUresult)907)

#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUgreenCtx_st *CUgreenCtx;
typedef int CUjit_option;
typedef int CUlibraryOption;
typedef int CUfunction_attribute;
typedef int CUmem_advise;
typedef int CUstreamAttrID;

typedef enum CUdevice_attribute_enum {
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
    CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
    CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
    CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
    CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37,
    CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
    CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT = 51,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 83,
    CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 89,
    CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
    CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
    CU_DEVICE_ATTRIBUTE_MAX = 146
} CUdevice_attribute;

#define CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE 0x3

/* Arrays (only what linear-storage arrays need). */
typedef enum CUarray_format_enum {
    CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
    CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
    CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
    CU_AD_FORMAT_SIGNED_INT8 = 0x08,
    CU_AD_FORMAT_SIGNED_INT16 = 0x09,
    CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
    CU_AD_FORMAT_HALF = 0x10,
    CU_AD_FORMAT_FLOAT = 0x20
} CUarray_format;
typedef struct CUDA_ARRAY_DESCRIPTOR_st {
    size_t Width;
    size_t Height;
    CUarray_format Format;
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

/* cuLaunchCooperativeKernelMultiDevice's parameter block (declared, not completed, upstream). */
struct CUDA_LAUNCH_PARAMS_st {
    CUfunction function;
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    void **kernelParams;
};

/* Memory pools and the virtual memory API. */
typedef enum CUmemAllocationGranularity_flags_enum {
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1
} CUmemAllocationGranularity_flags;

typedef struct CUmemPoolProps_st {
    CUmemAllocationType allocType;
    CUmemAllocationHandleType handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

typedef int CUmemPool_attribute;

/* Graph instantiation. */
typedef struct CUDA_GRAPH_INSTANTIATE_PARAMS_st {
    cuuint64_t flags;
    CUstream hUploadStream;
    CUgraphNode hErrNode_out;
    int result_out;
} CUDA_GRAPH_INSTANTIATE_PARAMS;

/* Prototypes of everything the fake exports, from its entry-point table. */
#define FAKE_PROTO_TWIN_NONE(symbol, params)
#define FAKE_PROTO_TWIN_PTSZ(symbol, params) CUresult symbol##_ptsz params;
#define FAKE_PROTO_TWIN_PTDS(symbol, params) CUresult symbol##_ptds params;
#define FAKE_ENTRY(lookup, since, symbol, twin, params)                                          \
    CUresult symbol params;                                                                      \
    FAKE_PROTO_TWIN_##twin(symbol, params)
#include "fake_entry_points.def"
#undef FAKE_ENTRY
#undef FAKE_PROTO_TWIN_NONE
#undef FAKE_PROTO_TWIN_PTSZ
#undef FAKE_PROTO_TWIN_PTDS

#endif
