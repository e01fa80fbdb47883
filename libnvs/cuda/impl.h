/* Hand-written behaviour behind the hooks that are not plain submissions: one
 * gs_impl_<symbol>(variant, parameters...) per INIT, PROCADDR, ALLOC, FREE, INFO, CONTEXT and
 * CAPTURE entry of hooks.def. The exported wrappers that call them are made in entry/. */
#ifndef GS_IMPL_H
#define GS_IMPL_H

#include "cuda/driver.h"

#define GS_IMPL_DECL(symbol, params)                                                             \
    CUresult gs_impl_##symbol(enum gs_variant variant, GS_UNPAREN params);
#define GS_IMPL_INIT(symbol, params) GS_IMPL_DECL(symbol, params)
#define GS_IMPL_PROCADDR(symbol, params) GS_IMPL_DECL(symbol, params)
#define GS_IMPL_ALLOC(symbol, params) GS_IMPL_DECL(symbol, params)
#define GS_IMPL_FREE(symbol, params) GS_IMPL_DECL(symbol, params)
#define GS_IMPL_INFO(symbol, params) GS_IMPL_DECL(symbol, params)
#define GS_IMPL_CONTEXT(symbol, params) GS_IMPL_DECL(symbol, params)
#define GS_IMPL_CAPTURE(symbol, params) GS_IMPL_DECL(symbol, params)
#define GS_IMPL_SUBMIT(symbol, params)
#define GS_IMPL_SPAN(symbol, params)
#define GS_IMPL_SET(symbol, params)
#define GS_IMPL_CALLED(symbol, params)
#define GS_ENTRY(kind, symbol, lookup, since, per_thread, stream, params, args)                  \
    GS_IMPL_##kind(symbol, params)
#include "cuda/hooks.def"
#undef GS_ENTRY

#endif
