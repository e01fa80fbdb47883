/* Generated from hooks.def: our wrapper for every hooked entry point and its per-thread twin,
 * the exported symbols that name them, and the table the lookup paths read.
 *
 * A wrapper is the hidden function gs_hook_<symbol>; the exported <symbol> is an alias of it,
 * so that our own references (the table) always mean our code, whatever else the process
 * exports under the driver's names. */
#include "gate.h"
#include "impl.h"

#define GS_EXPORT_ALIAS(name)                                                                    \
    extern __typeof__(gs_hook_##name) name                                                       \
        __attribute__((alias("gs_hook_" #name), visibility("default")));

/* SUBMIT: pass the device's gate, forward to the function the lookup handed out, leave the gate. */
#define GS_SUBMIT_HOOK(entry, name, variant, stream, params, args)                               \
    CUresult gs_hook_##name params;                                                              \
    CUresult gs_hook_##name params                                                               \
    {                                                                                            \
        int gate = gs_gate_enter();                                                              \
        if (gate < 0)                                                                            \
            gate = gs_gate_wait(variant, (CUstream)(stream));                                    \
        CUresult result = GS_REAL(entry, variant) args;                                          \
        gs_gate_exit(gate);                                                                      \
        return result;                                                                           \
    }                                                                                            \
    GS_EXPORT_ALIAS(name)

/* SPAN: the same, when the work may touch two devices. `sides` is (stream, side a, side b), the
 * sides found only on the slow path: in a process on one device, both are that device. */
#define GS_SPAN_STREAM(stream, side_a, side_b) (stream)
#define GS_SPAN_SIDES(stream, side_a, side_b) (side_a), (side_b)
#define GS_SPAN_HOOK(entry, name, variant, sides, params, args)                                  \
    CUresult gs_hook_##name params;                                                              \
    CUresult gs_hook_##name params                                                               \
    {                                                                                            \
        struct gs_gates_entered gates = {1, {gs_gate_enter()}};                                  \
        if (gates.gate[0] < 0)                                                                   \
            gates = gs_gate_wait_span(variant, (CUstream)GS_SPAN_STREAM sides,                   \
                                      GS_SPAN_SIDES sides);                                      \
        CUresult result = GS_REAL(entry, variant) args;                                          \
        gs_gate_exit_span(gates);                                                                \
        return result;                                                                           \
    }                                                                                            \
    GS_EXPORT_ALIAS(name)

/* Every other hooked kind: hand over to the hand-written gs_impl_<entry>. */
#define GS_DELEGATE_HOOK(entry, name, variant, stream, params, args)                             \
    CUresult gs_hook_##name params;                                                              \
    CUresult gs_hook_##name params                                                               \
    {                                                                                            \
        return gs_impl_##entry(variant, GS_UNPAREN args);                                        \
    }                                                                                            \
    GS_EXPORT_ALIAS(name)

#define GS_TWIN_NONE(make, symbol, stream, params, args)
#define GS_TWIN_PTSZ(make, symbol, stream, params, args)                                         \
    make(symbol, symbol##_ptsz, GS_PER_THREAD, stream, params, args)
#define GS_TWIN_PTDS(make, symbol, stream, params, args)                                         \
    make(symbol, symbol##_ptds, GS_PER_THREAD, stream, params, args)

#define GS_MAKE(make, symbol, per_thread, stream, params, args)                                  \
    make(symbol, symbol, GS_LEGACY, stream, params, args)                                        \
    GS_TWIN_##per_thread(make, symbol, stream, params, args)

#define GS_DEFINE_SUBMIT(symbol, per_thread, stream, params, args)                               \
    GS_MAKE(GS_SUBMIT_HOOK, symbol, per_thread, stream, params, args)
#define GS_DEFINE_SPAN(symbol, per_thread, sides, params, args)                                  \
    GS_MAKE(GS_SPAN_HOOK, symbol, per_thread, sides, params, args)
#define GS_DEFINE_CALLED(symbol, per_thread, stream, params, args)
#define GS_DEFINE_INIT(symbol, per_thread, stream, params, args)                                 \
    GS_MAKE(GS_DELEGATE_HOOK, symbol, per_thread, stream, params, args)
#define GS_DEFINE_PROCADDR GS_DEFINE_INIT
#define GS_DEFINE_ALLOC GS_DEFINE_INIT
#define GS_DEFINE_FREE GS_DEFINE_INIT
#define GS_DEFINE_INFO GS_DEFINE_INIT
#define GS_DEFINE_CONTEXT GS_DEFINE_INIT
#define GS_DEFINE_CAPTURE GS_DEFINE_INIT

#define GS_ENTRY(kind, symbol, lookup, since, per_thread, stream, params, args)                  \
    GS_DEFINE_##kind(symbol, per_thread, stream, params, args)
#include "hooks.def"
#undef GS_ENTRY

/* The table. */
#define GS_TWIN_NAME_NONE(symbol) NULL
#define GS_TWIN_NAME_PTSZ(symbol) #symbol "_ptsz"
#define GS_TWIN_NAME_PTDS(symbol) #symbol "_ptds"
#define GS_TWIN_HOOK_NONE(symbol) NULL
#define GS_TWIN_HOOK_PTSZ(symbol) (void *)gs_hook_##symbol##_ptsz
#define GS_TWIN_HOOK_PTDS(symbol) (void *)gs_hook_##symbol##_ptds
#define GS_HOOKS_HOOKED(symbol, per_thread)                                                      \
    {(void *)gs_hook_##symbol, GS_TWIN_HOOK_##per_thread(symbol)}
#define GS_HOOKS_CALLED(symbol, per_thread)                                                      \
    {NULL, NULL}
#define GS_HOOKS_SUBMIT GS_HOOKS_HOOKED
#define GS_HOOKS_SPAN GS_HOOKS_HOOKED
#define GS_HOOKS_INIT GS_HOOKS_HOOKED
#define GS_HOOKS_PROCADDR GS_HOOKS_HOOKED
#define GS_HOOKS_ALLOC GS_HOOKS_HOOKED
#define GS_HOOKS_FREE GS_HOOKS_HOOKED
#define GS_HOOKS_INFO GS_HOOKS_HOOKED
#define GS_HOOKS_CONTEXT GS_HOOKS_HOOKED
#define GS_HOOKS_CAPTURE GS_HOOKS_HOOKED

const struct gs_entry gs_entries[GS_ENTRY_COUNT] = {
#define GS_ENTRY(kind, symbol, lookup, since, per_thread, stream, params, args)                  \
    [GS_ID_##symbol] = {#symbol, GS_TWIN_NAME_##per_thread(symbol), #lookup, since,             \
                        GS_KIND_##kind, GS_HOOKS_##kind(symbol, per_thread)},
#include "hooks.def"
#undef GS_ENTRY
};
