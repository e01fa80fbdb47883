/* The table of driver entry points (hooks.def) as data, and the real driver functions behind it:
 * one slot per (entry, variant) holding the pointer our wrapper forwards to. The wrappers
 * themselves, and the lookups that hand them out, are entry/'s. */
#ifndef GS_DRIVER_H
#define GS_DRIVER_H

#include <stdatomic.h>
#include <stdbool.h>

#include "cuda/cuda_api.h"

#define GS_UNPAREN(...) __VA_ARGS__
/* For code that runs inside every dlsym of the process, even before ThreadSanitizer's runtime
 * (which looks up its own functions with dlsym) is ready. */
#define GS_NO_TSAN __attribute__((no_sanitize("thread")))

/* The newest CUDA version whose cuda.h the table was checked against: for a cudaVersion above
 * it, cuGetProcAddress may hand out a signature we do not know, so we verify before wrapping. */
#define GS_CUDA_VERSION_CHECKED 13000
/* The cudaVersion from which cuGetProcAddress hands out _ptsz/_ptds functions. */
#define GS_PER_THREAD_SINCE 7000

enum gs_kind {
    GS_KIND_INIT,
    GS_KIND_PROCADDR,
    GS_KIND_ALLOC,
    GS_KIND_FREE,
    GS_KIND_INFO,
    GS_KIND_CONTEXT,
    GS_KIND_CAPTURE,
    GS_KIND_SUBMIT,
    GS_KIND_SPAN,
    GS_KIND_SET,
    GS_KIND_CALLED,
};

/* LEGACY: the plain symbol; PER_THREAD: its _ptsz/_ptds twin (per-thread default stream). */
enum gs_variant { GS_LEGACY = 0, GS_PER_THREAD = 1, GS_VARIANTS = 2 };

enum gs_entry_id {
#define GS_ENTRY(kind, symbol, lookup, since, per_thread, stream, params, args) GS_ID_##symbol,
#include "cuda/hooks.def"
#undef GS_ENTRY
    GS_ENTRY_COUNT
};

/* Pointer types of the real functions, gs_pfn_<symbol>. */
#define GS_ENTRY(kind, symbol, lookup, since, per_thread, stream, params, args)                  \
    typedef CUresult(*gs_pfn_##symbol) params;
#include "cuda/hooks.def"
#undef GS_ENTRY

struct gs_entry {
    const char *symbol;
    const char *twin; /* the per-thread symbol, or NULL */
    const char *lookup;
    int since;
    enum gs_kind kind;
};

extern const struct gs_entry gs_entries[GS_ENTRY_COUNT];
extern _Atomic(void *) gs_real_fn[GS_ENTRY_COUNT][GS_VARIANTS];

/* Slow path of gs_real: find the symbol in libcuda.so.1. Never returns NULL: a missing symbol
 * yields a stand-in that answers CUDA_ERROR_NOT_FOUND (after one stderr line). */
void *gs_driver_resolve(enum gs_entry_id id, enum gs_variant variant);

static inline void *gs_real(enum gs_entry_id id, enum gs_variant variant)
{
    void *fn = atomic_load_explicit(&gs_real_fn[id][variant], memory_order_acquire);
    return fn ? fn : gs_driver_resolve(id, variant);
}

#define GS_REAL(symbol, variant) ((gs_pfn_##symbol)gs_real(GS_ID_##symbol, variant))

/* Record the function a lookup (dlsym, cuGetProcAddress) handed out for an entry. */
void gs_driver_set_real(enum gs_entry_id id, enum gs_variant variant, void *fn);

/* The entry exported under `name` (plain or twin); -1 if none. */
int gs_driver_find_symbol(const char *name, enum gs_variant *variant);
/* The entry cuGetProcAddress(lookup, cudaVersion) answers with; -1 if none. */
int gs_driver_find_lookup(const char *lookup, int cuda_version);

/* glibc's dlsym, found with dlvsym (ours replaces it). gs_real_dlsym_fn is also read by the
 * dlsym trampoline; gs_find_real_dlsym() sets it (false if glibc has none we know). */
typedef void *(*gs_dlsym_fn)(void *, const char *);
extern _Atomic(gs_dlsym_fn) gs_real_dlsym_fn;
GS_NO_TSAN bool gs_find_real_dlsym(void);
GS_NO_TSAN void *gs_real_dlsym(void *handle, const char *name);

#endif
