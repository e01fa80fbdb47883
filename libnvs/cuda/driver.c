/* The table of entry points as data, and finding the real driver functions behind our wrappers. */
#define _GNU_SOURCE
#include "cuda/driver.h"

#include <dlfcn.h>
#include <string.h>

#include "base/log.h"

#define GS_TWIN_NAME_NONE(symbol) NULL
#define GS_TWIN_NAME_PTSZ(symbol) #symbol "_ptsz"
#define GS_TWIN_NAME_PTDS(symbol) #symbol "_ptds"

const struct gs_entry gs_entries[GS_ENTRY_COUNT] = {
#define GS_ENTRY(kind, symbol, lookup, since, per_thread, stream, params, args)                  \
    [GS_ID_##symbol] = {#symbol, GS_TWIN_NAME_##per_thread(symbol), #lookup, since,             \
                        GS_KIND_##kind},
#include "cuda/hooks.def"
#undef GS_ENTRY
};

_Atomic(void *) gs_real_fn[GS_ENTRY_COUNT][GS_VARIANTS];

static _Atomic(void *) gs_libcuda;

_Atomic(gs_dlsym_fn) gs_real_dlsym_fn;

GS_NO_TSAN static gs_dlsym_fn gs_dlsym_function(void)
{
    gs_dlsym_fn fn = atomic_load_explicit(&gs_real_dlsym_fn, memory_order_acquire);
    if (fn)
        return fn;
    /* dlsym got a new symbol version in glibc 2.34; older ones have the architecture's base. */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0] && !fn; i++)
        fn = (gs_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    if (fn)
        atomic_store_explicit(&gs_real_dlsym_fn, fn, memory_order_release);
    else
        gs_warn("cannot find glibc's dlsym (tried GLIBC_2.34, 2.2.5, 2.17); dlsym lookups fail");
    return fn;
}

GS_NO_TSAN bool gs_find_real_dlsym(void)
{
    return gs_dlsym_function() != NULL;
}

GS_NO_TSAN void *gs_real_dlsym(void *handle, const char *name)
{
    gs_dlsym_fn fn = gs_dlsym_function();
    return fn ? fn(handle, name) : NULL;
}

/* The libcuda.so.1 the program uses (already loaded), else the one the loader finds. */
static void *gs_libcuda_handle(void)
{
    void *h = atomic_load_explicit(&gs_libcuda, memory_order_acquire);
    if (h)
        return h;
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL)
        h = dlopen("libcuda.so.1", RTLD_NOW);
    if (h == NULL) {
        const char *why = dlerror();
        gs_warn("cannot load libcuda.so.1 (%s); CUDA calls fail", why ? why : "not found");
        return NULL;
    }
    void *expected = NULL;
    if (!atomic_compare_exchange_strong(&gs_libcuda, &expected, h))
        dlclose(h); /* another thread won; keep one reference */
    return atomic_load(&gs_libcuda);
}

/* Stands in for a symbol the driver lacks. Every driver entry point returns CUresult and, on
 * x86-64 and aarch64, a callee may ignore arguments its caller passed. */
static CUresult gs_missing_symbol(void)
{
    return CUDA_ERROR_NOT_FOUND;
}

/* Whether fn lies in this library: found under a driver entry point's name, it is one of our
 * wrappers, exported under that name, and not the driver's function. */
static bool gs_is_ours(const void *fn)
{
    Dl_info self, found;
    return dladdr((const void *)gs_driver_resolve, &self) && dladdr(fn, &found) &&
           found.dli_fbase == self.dli_fbase;
}

void *gs_driver_resolve(enum gs_entry_id id, enum gs_variant variant)
{
    const struct gs_entry *e = &gs_entries[id];
    const char *name = variant == GS_PER_THREAD ? e->twin : e->symbol;
    void *h = gs_libcuda_handle();
    void *fn = h && name ? gs_real_dlsym(h, name) : NULL;
    if (fn == NULL || gs_is_ours(fn)) {
        gs_warn("libcuda.so.1 has no %s; calls to it fail with CUDA_ERROR_NOT_FOUND",
                name ? name : e->symbol);
        fn = (void *)gs_missing_symbol;
    }
    void *expected = NULL;
    atomic_compare_exchange_strong_explicit(&gs_real_fn[id][variant], &expected, fn,
                                            memory_order_acq_rel, memory_order_acquire);
    return expected ? expected : fn;
}

void gs_driver_set_real(enum gs_entry_id id, enum gs_variant variant, void *fn)
{
    void *old = atomic_exchange_explicit(&gs_real_fn[id][variant], fn, memory_order_acq_rel);
    if (old && old != fn && old != (void *)gs_missing_symbol)
        gs_debug("%s%s: lookups returned two different functions (%p, now %p)",
                 gs_entries[id].symbol, variant == GS_PER_THREAD ? " (per-thread)" : "", old, fn);
}

int gs_driver_find_symbol(const char *name, enum gs_variant *variant)
{
    for (int id = 0; id < GS_ENTRY_COUNT; id++) {
        const struct gs_entry *e = &gs_entries[id];
        if (!strcmp(name, e->symbol)) {
            *variant = GS_LEGACY;
            return id;
        }
        if (e->twin && !strcmp(name, e->twin)) {
            *variant = GS_PER_THREAD;
            return id;
        }
    }
    return -1;
}

int gs_driver_find_lookup(const char *lookup, int cuda_version)
{
    int best = -1;
    for (int id = 0; id < GS_ENTRY_COUNT; id++) {
        const struct gs_entry *e = &gs_entries[id];
        if (e->since <= cuda_version && (best < 0 || e->since > gs_entries[best].since) &&
            !strcmp(lookup, e->lookup))
            best = id;
    }
    return best;
}
