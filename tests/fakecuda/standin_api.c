/* How the stand-in finds the driver's entry points (see standin_api.h). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "standin_api.h"

#define PER_THREAD_FLAGS CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM

typedef CUresult (*get_proc_v2_fn)(const char *, void **, int, cuuint64_t,
                                   CUdriverProcAddressQueryResult *);
typedef CUresult (*get_proc_v1_fn)(const char *, void **, int, cuuint64_t);

static void *open_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h)
        fprintf(stderr, "standin: cannot load libcuda.so.1: %s\n", dlerror());
    return h;
}

/* As the runtime does: every entry point with flags 0 and again with flags 2, keeping both. */
static bool resolve_procaddr(struct standin_api *api, bool per_thread, bool v1)
{
    void *h = open_driver();
    if (!h)
        return false;
    const char *getter = v1 ? "cuGetProcAddress" : "cuGetProcAddress_v2";
    void *getter_fn = dlsym(h, getter);
    if (!getter_fn) {
        fprintf(stderr, "standin: libcuda.so.1 has no %s\n", getter);
        return false;
    }
    struct standin_api legacy = {0}, ptds = {0};
    bool ok = true;
#define RESOLVE_BOTH(lookup, symbol, twin, version)                                                \
    for (int pass = 0; pass < 2; pass++) {                                                       \
        void **slot = (void **)(pass ? &ptds.lookup : &legacy.lookup);                           \
        cuuint64_t flags = pass ? PER_THREAD_FLAGS : 0;                                          \
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;                     \
        CUresult r = v1 ? ((get_proc_v1_fn)getter_fn)(#lookup, slot, version, flags)             \
                        : ((get_proc_v2_fn)getter_fn)(#lookup, slot, version, flags, &status);   \
        if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || !*slot) {              \
            fprintf(stderr, "standin: %s(%s, flags %llu) failed: result %d status %d\n", getter,  \
                    #lookup, (unsigned long long)flags, (int)r, (int)status);                    \
            ok = false;                                                                          \
        }                                                                                        \
    }
    STANDIN_APIS(RESOLVE_BOTH)
#undef RESOLVE_BOTH
    *api = per_thread ? ptds : legacy;
    return ok;
}

static bool resolve_dlsym(struct standin_api *api, bool per_thread)
{
    void *h = open_driver();
    if (!h)
        return false;
    bool ok = true;
#define TWIN_SUFFIX_NONE ""
#define TWIN_SUFFIX_PTSZ "_ptsz"
#define TWIN_SUFFIX_PTDS "_ptds"
#define RESOLVE_DLSYM(lookup, symbol, twin, version)                                               \
    {                                                                                            \
        const char *name = per_thread ? #symbol TWIN_SUFFIX_##twin : #symbol;                    \
        *(void **)&api->lookup = dlsym(h, name);                                                 \
        if (!api->lookup) {                                                                      \
            fprintf(stderr, "standin: dlsym(libcuda.so.1, %s) found nothing\n", name);           \
            ok = false;                                                                          \
        }                                                                                        \
    }
    STANDIN_APIS(RESOLVE_DLSYM)
#undef RESOLVE_DLSYM
    return ok;
}

#ifdef STANDIN_LINKED
static bool resolve_linked(struct standin_api *api, bool per_thread)
{
#define TWIN_FN_NONE(symbol) symbol
#define TWIN_FN_PTSZ(symbol) symbol##_ptsz
#define TWIN_FN_PTDS(symbol) symbol##_ptds
#define RESOLVE_LINKED(lookup, symbol, twin, version)                                              \
    api->lookup = per_thread ? (__typeof__(&symbol))TWIN_FN_##twin(symbol) : symbol;
    STANDIN_APIS(RESOLVE_LINKED)
#undef RESOLVE_LINKED
    return true;
}
#endif

bool standin_resolve(struct standin_api *api, const char *mode, bool per_thread)
{
    if (strcmp(mode, "procaddr") == 0)
        return resolve_procaddr(api, per_thread, false);
    if (strcmp(mode, "procaddr-v1") == 0)
        return resolve_procaddr(api, per_thread, true);
    if (strcmp(mode, "dlsym") == 0)
        return resolve_dlsym(api, per_thread);
#ifdef STANDIN_LINKED
    if (strcmp(mode, "linked") == 0)
        return resolve_linked(api, per_thread);
    fprintf(stderr, "standin_linked: --resolve must be linked, procaddr, procaddr-v1 or dlsym\n");
#else
    fprintf(stderr, "standin: --resolve must be procaddr, procaddr-v1 or dlsym "
                    "(use standin_linked for linked)\n");
#endif
    return false;
}
