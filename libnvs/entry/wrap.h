/* How our wrappers are made from hooks.def, for the two units that make them: interpose.c those
 * of the lookups (INIT, PROCADDR), which hand out the others, and hooks.c the rest.
 *
 * A wrapper is the hidden function gs_hook_<symbol>; the exported <symbol> is an alias of it,
 * so that our own references (the table of wrappers) always mean our code, whatever else the
 * process exports under the driver's names. */
#ifndef GS_WRAP_H
#define GS_WRAP_H

#include "cuda/impl.h"

/* Who makes the wrappers of an entry of each kind: GS_BY_<kind>(lookup, rest, none) is `lookup`
 * for interpose.c's, `rest` for hooks.c's, `none` where there are none (CALLED). */
#define GS_BY_INIT(lookup, rest, none) lookup
#define GS_BY_PROCADDR(lookup, rest, none) lookup
#define GS_BY_ALLOC(lookup, rest, none) rest
#define GS_BY_FREE(lookup, rest, none) rest
#define GS_BY_INFO(lookup, rest, none) rest
#define GS_BY_CONTEXT(lookup, rest, none) rest
#define GS_BY_CAPTURE(lookup, rest, none) rest
#define GS_BY_SUBMIT(lookup, rest, none) rest
#define GS_BY_SPAN(lookup, rest, none) rest
#define GS_BY_SET(lookup, rest, none) rest
#define GS_BY_CALLED(lookup, rest, none) none

/* make(entry, name, variant, stream, params, args) for the entry's wrapper and its twin's. */
#define GS_TWIN_NONE(make, symbol, stream, params, args)
#define GS_TWIN_PTSZ(make, symbol, stream, params, args)                                         \
    make(symbol, symbol##_ptsz, GS_PER_THREAD, stream, params, args)
#define GS_TWIN_PTDS(make, symbol, stream, params, args)                                         \
    make(symbol, symbol##_ptds, GS_PER_THREAD, stream, params, args)
#define GS_MAKE(make, symbol, per_thread, stream, params, args)                                  \
    make(symbol, symbol, GS_LEGACY, stream, params, args)                                        \
    GS_TWIN_##per_thread(make, symbol, stream, params, args)
#define GS_MAKE_NONE(symbol, per_thread, stream, params, args)

/* Every wrapper, declared here: the table of wrappers names hooks.c's too. */
#define GS_DECLARE_HOOK(entry, name, variant, stream, params, args) CUresult gs_hook_##name params;
#define GS_DECLARE_HOOKS(symbol, per_thread, stream, params, args)                               \
    GS_MAKE(GS_DECLARE_HOOK, symbol, per_thread, stream, params, args)
#define GS_ENTRY(kind, symbol, lookup, since, per_thread, stream, params, args)                  \
    GS_BY_##kind(GS_DECLARE_HOOKS, GS_DECLARE_HOOKS, GS_MAKE_NONE)(symbol, per_thread, stream,  \
                                                                   params, args)
#include "cuda/hooks.def"
#undef GS_ENTRY

#define GS_EXPORT_ALIAS(name)                                                                    \
    extern __typeof__(gs_hook_##name) name                                                       \
        __attribute__((alias("gs_hook_" #name), visibility("default")));

/* A wrapper that hands over to the hand-written gs_impl_<entry> (impl.h). */
#define GS_DELEGATE_HOOK(entry, name, variant, stream, params, args)                             \
    CUresult gs_hook_##name params                                                               \
    {                                                                                            \
        return gs_impl_##entry(variant, GS_UNPAREN args);                                        \
    }                                                                                            \
    GS_EXPORT_ALIAS(name)

#endif
