/* Driver-wide state of the fake: cuInit, fork, devices and contexts (the configuration is
 * fake_gpu.c's). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_driver.h"

#define FAKE_DRIVER_VERSION 13000
#define FAKE_CTX_STACK 16

/* ---- cuInit and fork ----------------------------------------------------------------------- */

static _Atomic bool initialized;
/* A child forked after cuInit cannot use the driver, as with the real one. */
static _Atomic bool forked_after_init;
static _Atomic uint64_t id_counter;

uint64_t fake_next_id(void)
{
    return atomic_fetch_add(&id_counter, 1) + 1;
}

static void at_fork_child(void)
{
    if (atomic_load(&initialized))
        atomic_store(&forked_after_init, true);
}

__attribute__((constructor)) static void fake_state_setup(void)
{
    pthread_atfork(NULL, NULL, at_fork_child);
}

CUresult fake_check_init(void)
{
    if (!atomic_load(&initialized) || atomic_load(&forked_after_init))
        return CUDA_ERROR_NOT_INITIALIZED;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuInit(unsigned int flags)
{
    const struct fake_config *c = fake_config();
    CUresult r = CUDA_SUCCESS;
    if (atomic_load(&forked_after_init))
        r = CUDA_ERROR_NOT_INITIALIZED;
    else if (flags != 0)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (c->config_error) {
        fprintf(stderr, "fakecuda: %s\n", c->config_error);
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (c->init_error)
        r = c->init_error;
    if (r == CUDA_SUCCESS)
        atomic_store(&initialized, true);
    /* What the real driver reads here to become an MPS client ("-": unset). */
    const char *mps_pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
    const char *mps_share = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    const char *mps_priority = getenv("CUDA_MPS_CLIENT_PRIORITY");
    fake_log("init", "flags=%u result=%d mps_pipe=%s mps_share=%s mps_priority=%s", flags,
             (int)r, mps_pipe ? mps_pipe : "-", mps_share ? mps_share : "-",
             mps_priority ? mps_priority : "-");
    return r;
}

FAKE_API CUresult cuDriverGetVersion(int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = FAKE_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

/* ---- devices ------------------------------------------------------------------------------- */

CUresult fake_check_device(CUdevice dev)
{
    FAKE_TRY(fake_check_init());
    if (dev < 0 || dev >= fake_config()->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetCount(int *count)
{
    FAKE_TRY(fake_check_init());
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = fake_config()->device_count;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    FAKE_TRY(fake_check_init());
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= fake_config()->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    FAKE_TRY(fake_check_device(dev));
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "gemshare fake GPU %d", dev);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    FAKE_TRY(fake_check_device(dev));
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = (size_t)fake_config()->device_mem;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    FAKE_TRY(fake_check_device(dev));
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    fake_gpu_uuid(dev, (unsigned char *)uuid->bytes);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid_v2(uuid, dev);
}

FAKE_API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    FAKE_TRY(fake_check_device(dev));
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(pciBusId, (size_t)len, "00000000:%02X:00.0", 0x10 + dev);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    FAKE_TRY(fake_check_device(dev));
    if (!major || !minor)
        return CUDA_ERROR_INVALID_VALUE;
    *major = 9;
    *minor = 0;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    FAKE_TRY(fake_check_device(dev));
    if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    /* An H100-like device; attributes not listed read as 0 (unsupported). */
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *pi = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = 0x10 + dev; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *pi = 5120; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *pi = 1; break;
    default: *pi = 0; break;
    }
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    CUresult r = fake_check_device(dev);
    if (r == CUDA_SUCCESS)
        r = fake_check_device(peerDev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!canAccessPeer)
        return CUDA_ERROR_INVALID_VALUE;
    *canAccessPeer = 0;
    return CUDA_SUCCESS;
}

/* ---- contexts ------------------------------------------------------------------------------ */

struct primary {
    struct CUctx_st *ctx;
    int retain;
    unsigned int flags;
};
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct primary primaries[FAKE_MAX_DEVICES];

/* The calling thread's context stack; the current context is its top. */
static __thread struct CUctx_st *ctx_stack[FAKE_CTX_STACK];
static __thread int ctx_depth;

static struct CUctx_st *ctx_new(CUdevice dev, unsigned int flags, bool primary)
{
    struct CUctx_st *c = calloc(1, sizeof *c);
    struct CUstream_st *legacy = calloc(1, sizeof *legacy);
    if (!c || !legacy) {
        free(c);
        free(legacy);
        return NULL;
    }
    c->magic = FAKE_CTX_MAGIC;
    c->device = dev;
    c->flags = flags;
    c->primary = primary;
    c->id = fake_next_id();
    legacy->magic = FAKE_STREAM_MAGIC;
    legacy->id = 0;
    legacy->ctx = c;
    legacy->legacy = true;
    c->legacy = legacy;
    fake_process_on_device(dev);
    return c;
}

bool fake_ctx_valid(CUcontext ctx)
{
    return ctx && ctx->magic == FAKE_CTX_MAGIC;
}

CUcontext fake_current_ctx(void)
{
    return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
}

CUresult fake_require_ctx(CUcontext *out)
{
    FAKE_TRY(fake_check_init());
    CUcontext c = fake_current_ctx();
    if (!fake_ctx_valid(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

CUcontext fake_primary_ctx(CUdevice dev)
{
    pthread_mutex_lock(&ctx_lock);
    CUcontext c = primaries[dev].retain > 0 ? primaries[dev].ctx : NULL;
    pthread_mutex_unlock(&ctx_lock);
    return c;
}

FAKE_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult r = fake_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ctx_lock);
    struct primary *p = &primaries[dev];
    if (!p->ctx)
        p->ctx = ctx_new(dev, p->flags, true);
    if (p->ctx) {
        p->ctx->magic = FAKE_CTX_MAGIC;
        p->retain++;
        *pctx = p->ctx;
    } else
        r = CUDA_ERROR_OUT_OF_MEMORY;
    int retain = p->retain;
    pthread_mutex_unlock(&ctx_lock);
    fake_log("primary_retain", "dev=%d ctx=%p refs=%d result=%d", dev,
             r == CUDA_SUCCESS ? (void *)*pctx : NULL, retain, (int)r);
    return r;
}

FAKE_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult r = fake_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&ctx_lock);
    struct primary *p = &primaries[dev];
    struct CUctx_st *gone = NULL;
    if (p->retain <= 0)
        r = CUDA_ERROR_INVALID_CONTEXT;
    else if (--p->retain == 0 && p->ctx) {
        atomic_fetch_add(&p->ctx->generation, 1); /* the driver destroys the context */
        gone = p->ctx;
    }
    int retain = p->retain;
    pthread_mutex_unlock(&ctx_lock);
    fake_log("primary_release", "dev=%d refs=%d result=%d", dev, retain, (int)r);
    if (gone) { /* its work finishes, then its memory goes, as the driver resets it */
        fake_wait_seq(atomic_load(&gone->last_seq));
        fake_memory_free_context(gone, "cuDevicePrimaryCtxRelease");
    }
    return r;
}

FAKE_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

FAKE_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    FAKE_TRY(fake_check_device(dev));
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ctx_lock);
    *flags = primaries[dev].flags;
    *active = primaries[dev].retain > 0;
    pthread_mutex_unlock(&ctx_lock);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    FAKE_TRY(fake_check_device(dev));
    pthread_mutex_lock(&ctx_lock);
    primaries[dev].flags = flags;
    if (primaries[dev].ctx)
        primaries[dev].ctx->flags = flags;
    pthread_mutex_unlock(&ctx_lock);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    FAKE_TRY(fake_check_device(dev));
    pthread_mutex_lock(&ctx_lock);
    struct CUctx_st *ctx = primaries[dev].ctx;
    primaries[dev].retain = 0;
    if (ctx)
        atomic_fetch_add(&ctx->generation, 1);
    pthread_mutex_unlock(&ctx_lock);
    fake_log("primary_reset", "dev=%d", dev);
    if (ctx) {
        fake_wait_seq(atomic_load(&ctx->last_seq));
        fake_memory_free_context(ctx, "cuDevicePrimaryCtxReset");
    }
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

FAKE_API CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev, const char *api)
{
    FAKE_TRY(fake_check_device(dev));
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (ctx_depth >= FAKE_CTX_STACK)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c = ctx_new(dev, flags, false);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = c;
    *pctx = c;
    fake_log("ctx_create", "api=%s dev=%d ctx=%p", api, dev, (void *)c);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev, "cuCtxCreate_v2");
}

FAKE_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                 unsigned int flags, CUdevice dev)
{
    (void)paramsArray; /* execution affinity is not simulated */
    (void)numParams;
    return ctx_create(pctx, flags, dev, "cuCtxCreate_v3");
}

FAKE_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                                 CUdevice dev)
{
    (void)params; /* execution affinity and CIG are not simulated */
    return ctx_create(pctx, flags, dev, "cuCtxCreate_v4");
}

FAKE_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    FAKE_TRY(fake_check_init());
    if (!fake_ctx_valid(ctx) || ctx->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    /* Outstanding work finishes before the context goes away. */
    fake_wait_seq(atomic_load(&ctx->last_seq));
    fake_memory_free_context(ctx, "cuCtxDestroy_v2");
    ctx->magic = 0;
    atomic_fetch_add(&ctx->generation, 1);
    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] == ctx)
            ctx_stack[i] = NULL;
    while (ctx_depth > 0 && ctx_stack[ctx_depth - 1] == NULL)
        ctx_depth--;
    fake_log("ctx_destroy", "ctx=%p", (void *)ctx);
    return CUDA_SUCCESS; /* the struct is kept so stale handles stay detectable */
}

FAKE_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    FAKE_TRY(fake_check_init());
    if (ctx && !fake_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == 0) {
        if (ctx)
            ctx_stack[ctx_depth++] = ctx;
    } else
        ctx_stack[ctx_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    FAKE_TRY(fake_check_init());
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = fake_current_ctx();
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    FAKE_TRY(fake_check_init());
    if (!fake_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth >= FAKE_CTX_STACK)
        return CUDA_ERROR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    FAKE_TRY(fake_check_init());
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext c = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = c;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxGetDevice(CUdevice *device)
{
    CUcontext c;
    FAKE_TRY(fake_require_ctx(&c));
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = c->device;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    FAKE_TRY(fake_check_init());
    if (!ctx)
        ctx = fake_current_ctx();
    if (!fake_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = ctx->device;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxGetFlags(unsigned int *flags)
{
    CUcontext c;
    FAKE_TRY(fake_require_ctx(&c));
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    FAKE_TRY(fake_check_init());
    if (!ctx)
        ctx = fake_current_ctx();
    if (!fake_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = 3020;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    FAKE_TRY(fake_check_init());
    if (!ctx)
        ctx = fake_current_ctx();
    if (!fake_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctxId)
        return CUDA_ERROR_INVALID_VALUE;
    *ctxId = ctx->id;
    return CUDA_SUCCESS;
}

/* ---- error strings ------------------------------------------------------------------------- */

static const struct {
    CUresult code;
    const char *name;
    const char *text;
} error_table[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed "
                                                          "in the present state"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
     "capture was not initiated in this stream"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {CUDA_ERROR_CAPTURED_EVENT, "CUDA_ERROR_CAPTURED_EVENT",
     "operation not permitted on an event last recorded in a capturing stream"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
};

FAKE_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++)
        if (error_table[i].code == error) {
            *pStr = error_table[i].name;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

FAKE_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++)
        if (error_table[i].code == error) {
            *pStr = error_table[i].text;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}
