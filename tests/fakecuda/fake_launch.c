/* Modules, kernels and the launch calls.
 *
 * A module image is opaque to the fake; a kernel's behaviour comes from its name:
 *   "sleep"  runs for gridDimX microseconds (a per-launch simulated time);
 *   "fill"   takes (CUdeviceptr ptr, size_t bytes, int value) and memsets the range on the device;
 *   other    runs for FAKECUDA_KERNEL_US microseconds. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_driver.h"

#define FAKE_MODULE_MAGIC 0x4d4f4455u
#define CUDA_ERROR_FILE_NOT_FOUND ((CUresult)301)

struct CUmod_st {
    uint32_t magic;
};

static CUresult module_new(CUmodule *module, const void *image)
{
    CUcontext ctx;
    FAKE_TRY(fake_require_ctx(&ctx));
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUmod_st *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->magic = FAKE_MODULE_MAGIC;
    *module = m;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    return module_new(module, image);
}

FAKE_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                     CUjit_option *options, void **optionValues)
{
    (void)numOptions; /* JIT options do not change a fake kernel */
    (void)options;
    (void)optionValues;
    return module_new(module, image);
}

FAKE_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    if (fname && access(fname, R_OK) != 0)
        return fake_check_init() != CUDA_SUCCESS ? fake_check_init() : CUDA_ERROR_FILE_NOT_FOUND;
    return module_new(module, fname);
}

FAKE_API CUresult cuModuleUnload(CUmodule hmod)
{
    FAKE_TRY(fake_check_init());
    if (!hmod || hmod->magic != FAKE_MODULE_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    hmod->magic = 0;
    return CUDA_SUCCESS;
}

static CUresult function_new(CUfunction *hfunc, const char *name)
{
    if (!hfunc || !name || !*name || strlen(name) >= sizeof((struct CUfunc_st *)0)->name)
        return CUDA_ERROR_NOT_FOUND;
    struct CUfunc_st *f = calloc(1, sizeof *f);
    if (!f)
        return CUDA_ERROR_OUT_OF_MEMORY;
    f->magic = FAKE_FUNC_MAGIC;
    strcpy(f->name, name);
    *hfunc = f;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    FAKE_TRY(fake_check_init());
    if (!hmod || hmod->magic != FAKE_MODULE_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    return function_new(hfunc, name);
}

/* Libraries are context-independent modules; their kernels double as functions. */
FAKE_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                    void **jitOptionsValues, unsigned int numJitOptions,
                                    CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                    unsigned int numLibraryOptions)
{
    (void)jitOptions;
    (void)jitOptionsValues;
    (void)numJitOptions;
    (void)libraryOptions;
    (void)libraryOptionValues;
    (void)numLibraryOptions;
    FAKE_TRY(fake_check_init());
    if (!library || !code)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUmod_st *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->magic = FAKE_MODULE_MAGIC;
    *library = (CUlibrary)(void *)m;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuLibraryUnload(CUlibrary library)
{
    return cuModuleUnload((CUmodule)(void *)library);
}

FAKE_API CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    CUfunction f;
    CUresult r = cuModuleGetFunction(&f, (CUmodule)(void *)library, name);
    if (r == CUDA_SUCCESS && pKernel)
        *pKernel = (CUkernel)(void *)f;
    return r;
}

FAKE_API CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    FAKE_TRY(fake_check_init());
    struct CUfunc_st *f = (struct CUfunc_st *)(void *)kernel;
    if (!pFunc || !f || f->magic != FAKE_FUNC_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    *pFunc = f;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    FAKE_TRY(fake_check_init());
    if (!pi || !hfunc || hfunc->magic != FAKE_FUNC_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    *pi = attrib == 0 ? 1024 : 0; /* MAX_THREADS_PER_BLOCK; the rest (sizes, regs) are 0 */
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    (void)attrib;
    (void)value;
    FAKE_TRY(fake_check_init());
    return hfunc && hfunc->magic == FAKE_FUNC_MAGIC ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ---- launches ------------------------------------------------------------------------------ */

struct launch {
    CUfunction f;
    unsigned int grid[3], block[3];
    unsigned int shared;
    CUstream stream;
    void **params;
};

static CUresult launch(const struct fake_call *call, const char *event, const struct launch *l)
{
    struct CUstream_st *s;
    FAKE_TRY(fake_stream_resolve(l->stream, call->per_thread, &s));
    if (!l->f || l->f->magic != FAKE_FUNC_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!l->grid[0] || !l->grid[1] || !l->grid[2] || !l->block[0] || !l->block[1] ||
        !l->block[2] || (uint64_t)l->block[0] * l->block[1] * l->block[2] > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_op op = {.kind = FAKE_OP_KERNEL, .what = "kernel"};
    snprintf(op.u.kernel.name, sizeof op.u.kernel.name, "%s", l->f->name);
    if (strcmp(l->f->name, "sleep") == 0)
        op.duration_us = l->grid[0];
    else
        op.duration_us = fake_config()->kernel_us;
    if (strcmp(l->f->name, "fill") == 0) {
        /* Parameters are copied at launch, as the driver does. */
        if (!l->params || !l->params[0] || !l->params[1] || !l->params[2])
            return CUDA_ERROR_INVALID_VALUE;
        CUdeviceptr ptr = *(CUdeviceptr *)l->params[0];
        size_t len = *(size_t *)l->params[1];
        struct fake_alloc a;
        if (!fake_alloc_lookup((uintptr_t)ptr, &a) || (uintptr_t)ptr + len > a.base + a.size)
            return CUDA_ERROR_INVALID_VALUE;
        op.u.kernel.fill_ptr = (uintptr_t)ptr;
        op.u.kernel.fill_len = len;
        op.u.kernel.fill_value = *(int *)l->params[2];
    }
    char details[128];
    snprintf(details, sizeof details, "fn=%s grid=%u block=%u us=%llu", l->f->name, l->grid[0],
             l->block[0], (unsigned long long)op.duration_us);
    return fake_submit(call, event, s, &op, details);
}

static CUresult cuLaunchKernel_impl(const struct fake_call *call, CUfunction f,
                                    unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX,
                                    unsigned int blockDimY, unsigned int blockDimZ,
                                    unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra)
{
    (void)extra; /* parameter buffers are only read for "fill", through kernelParams */
    struct launch l = {f, {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ},
                       sharedMemBytes, hStream, kernelParams};
    return launch(call, "launch", &l);
}
FAKE_PTSZ_PAIR(cuLaunchKernel,
               (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra),
               f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
               hStream, kernelParams, extra)

static CUresult cuLaunchKernelEx_impl(const struct fake_call *call, const CUlaunchConfig *config,
                                      CUfunction f, void **kernelParams, void **extra)
{
    (void)extra;
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    struct launch l = {f,
                       {config->gridDimX, config->gridDimY, config->gridDimZ},
                       {config->blockDimX, config->blockDimY, config->blockDimZ},
                       config->sharedMemBytes,
                       config->hStream,
                       kernelParams};
    return launch(call, "launch", &l);
}
FAKE_PTSZ_PAIR(cuLaunchKernelEx,
               (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),
               config, f, kernelParams, extra)

static CUresult cuLaunchCooperativeKernel_impl(const struct fake_call *call, CUfunction f,
                                               unsigned int gridDimX, unsigned int gridDimY,
                                               unsigned int gridDimZ, unsigned int blockDimX,
                                               unsigned int blockDimY, unsigned int blockDimZ,
                                               unsigned int sharedMemBytes, CUstream hStream,
                                               void **kernelParams)
{
    struct launch l = {f, {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ},
                       sharedMemBytes, hStream, kernelParams};
    return launch(call, "launch", &l);
}
FAKE_PTSZ_PAIR(cuLaunchCooperativeKernel,
               (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams),
               f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
               hStream, kernelParams)

FAKE_API CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList,
                                                       unsigned int numDevices, unsigned int flags)
{
    static const struct fake_call call = {"cuLaunchCooperativeKernelMultiDevice", false};
    (void)flags;
    CUresult r = fake_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!launchParamsList || numDevices == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < numDevices && r == CUDA_SUCCESS; i++) {
        const CUDA_LAUNCH_PARAMS *p = &launchParamsList[i];
        struct launch l = {p->function,
                           {p->gridDimX, p->gridDimY, p->gridDimZ},
                           {p->blockDimX, p->blockDimY, p->blockDimZ},
                           p->sharedMemBytes,
                           p->hStream,
                           p->kernelParams};
        r = launch(&call, "launch", &l);
    }
    return r;
}

/* The deprecated launches take the block shape from cuFuncSetBlockShape, which the fake does not
 * model: one thread per block. cuLaunch is a grid of one block. No per-thread twins exist. */
FAKE_API CUresult cuLaunch(CUfunction f)
{
    static const struct fake_call call = {"cuLaunch", false};
    struct launch l = {f, {1, 1, 1}, {1, 1, 1}, 0, NULL, NULL};
    return launch(&call, "launch", &l);
}

static CUresult launch_grid(const struct fake_call *call, CUfunction f, int width, int height,
                            CUstream hStream)
{
    if (width <= 0 || height <= 0)
        return fake_check_init() != CUDA_SUCCESS ? fake_check_init() : CUDA_ERROR_INVALID_VALUE;
    struct launch l = {f, {(unsigned int)width, (unsigned int)height, 1}, {1, 1, 1}, 0, hStream,
                       NULL};
    return launch(call, "launch", &l);
}

FAKE_API CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
{
    static const struct fake_call call = {"cuLaunchGrid", false};
    return launch_grid(&call, f, grid_width, grid_height, NULL);
}

FAKE_API CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height,
                                    CUstream hStream)
{
    static const struct fake_call call = {"cuLaunchGridAsync", false};
    return launch_grid(&call, f, grid_width, grid_height, hStream);
}

static CUresult cuLaunchHostFunc_impl(const struct fake_call *call, CUstream hStream, CUhostFn fn,
                                      void *userData)
{
    struct CUstream_st *s;
    FAKE_TRY(fake_stream_resolve(hStream, call->per_thread, &s));
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_op op = {.kind = FAKE_OP_HOST_FN, .u.host = {.fn = fn, .user = userData}};
    return fake_submit(call, "host_func", s, &op, NULL);
}
FAKE_PTSZ_PAIR(cuLaunchHostFunc, (CUstream hStream, CUhostFn fn, void *userData), hStream, fn,
               userData)

static CUresult cuStreamAddCallback_impl(const struct fake_call *call, CUstream hStream,
                                         CUstreamCallback callback, void *userData,
                                         unsigned int flags)
{
    struct CUstream_st *s;
    FAKE_TRY(fake_stream_resolve(hStream, call->per_thread, &s));
    if (!callback || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_op op = {.kind = FAKE_OP_HOST_FN,
                         .u.host = {.cb = callback, .user = userData, .cb_stream = hStream}};
    return fake_submit(call, "stream_callback", s, &op, NULL);
}
FAKE_PTSZ_PAIR(cuStreamAddCallback,
               (CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags),
               hStream, callback, userData, flags)
