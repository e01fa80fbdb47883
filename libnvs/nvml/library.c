/* The real NVML functions behind our wrappers. A program reaches NVML by dlopen and dlsym
 * (pynvml, nvidia-smi), whose answer we keep when we hand out our wrapper, or by linking
 * libnvidia-ml.so.1, whose functions we then look up ourselves. */
#define _GNU_SOURCE
#include "nvml/library.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#include "base/log.h"
#include "cuda/driver.h"

static const char *const gs_names[GS_NVML_COUNT] = {
#define GS_NVML_NAME(symbol, params, args) [GS_NVML_ID_##symbol] = #symbol,
    GS_NVML_HOOKED(GS_NVML_NAME)
#undef GS_NVML_NAME
};

static _Atomic(void *) gs_real_fns[GS_NVML_COUNT];
/* The libnvidia-ml the program uses, once known. */
static _Atomic(void *) gs_library;

int gs_nvml_find(const char *name)
{
    for (int id = 0; id < GS_NVML_COUNT; id++)
        if (!strcmp(name, gs_names[id]))
            return id;
    return -1;
}

const char *gs_nvml_name(enum gs_nvml_id id)
{
    return gs_names[id];
}

void gs_nvml_set_real(enum gs_nvml_id id, void *fn)
{
    atomic_store_explicit(&gs_real_fns[id], fn, memory_order_release);
}

/* Whether fn lies in this library: one of our wrappers, not NVML's function. */
static bool gs_is_ours(const void *fn)
{
    Dl_info self, found;
    return dladdr((const void *)gs_nvml_find, &self) && dladdr(fn, &found) &&
           found.dli_fbase == self.dli_fbase;
}

/* The library of a real function we were handed, else libnvidia-ml.so.1 if it is loaded: never
 * loaded by us (a program without NVML must stay without it). */
static void *gs_nvml_library(void)
{
    void *h = atomic_load_explicit(&gs_library, memory_order_acquire);
    if (h)
        return h;
    Dl_info found;
    for (int id = 0; id < GS_NVML_COUNT && h == NULL; id++) {
        void *fn = atomic_load_explicit(&gs_real_fns[id], memory_order_acquire);
        if (fn && dladdr(fn, &found) && found.dli_fname)
            h = dlopen(found.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    }
    if (h == NULL)
        h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *expected = NULL;
    if (h && !atomic_compare_exchange_strong(&gs_library, &expected, h))
        dlclose(h); /* another thread won; keep one reference */
    return atomic_load(&gs_library);
}

/* A function of the program's libnvidia-ml: from its library, else the next definition after
 * ours (a library linked to the program and loaded before NVML was known to us). */
static void *gs_nvml_lookup(const char *name)
{
    void *h = gs_nvml_library();
    void *fn = h ? gs_real_dlsym(h, name) : NULL;
    if (fn == NULL || gs_is_ours(fn))
        fn = gs_real_dlsym(RTLD_NEXT, name);
    return fn && !gs_is_ours(fn) ? fn : NULL;
}

void *gs_nvml_real(enum gs_nvml_id id)
{
    void *fn = atomic_load_explicit(&gs_real_fns[id], memory_order_acquire);
    if (fn)
        return fn;
    fn = gs_nvml_lookup(gs_names[id]);
    if (fn == NULL) {
        gs_debug("%s: no libnvidia-ml function of that name", gs_names[id]);
        return NULL;
    }
    void *expected = NULL;
    atomic_compare_exchange_strong(&gs_real_fns[id], &expected, fn);
    return expected ? expected : fn;
}

bool gs_nvml_device_uuid(nvmlDevice_t device, char *out, unsigned int size)
{
    static _Atomic(void *) get_uuid;
    void *fn = atomic_load(&get_uuid);
    if (fn == NULL && (fn = gs_nvml_lookup("nvmlDeviceGetUUID")) != NULL)
        atomic_store(&get_uuid, fn);
    return fn && ((gs_nvml_pfn_nvmlDeviceGetUUID)fn)(device, out, size) == NVML_SUCCESS;
}
