/* Generated from hooks.def: our wrapper for every hooked entry point but the lookups' (made in
 * interpose.c) and its per-thread twin, and the exported symbols that name them (wrap.h). */
#include "entry/wrap.h"
#include "gate/gate.h"
#include "memory/cold.h"

/* SUBMIT: pass the device's gate, forward to the function the lookup handed out, leave the gate. */
#define GS_SUBMIT_HOOK(entry, name, variant, stream, params, args)                               \
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

/* SET: a SUBMIT that tells the memory code what it cleared, once the driver took it. `fill` is
 * (stream, destination, value, bytes). */
#define GS_SET_STREAM(stream, dst, value, bytes) (stream)
#define GS_SET_NOTE(stream, dst, value, bytes) gs_cold_note_set((dst), (value) == 0, (bytes))
#define GS_SET_HOOK(entry, name, variant, fill, params, args)                                    \
    CUresult gs_hook_##name params                                                               \
    {                                                                                            \
        int gate = gs_gate_enter();                                                              \
        if (gate < 0)                                                                            \
            gate = gs_gate_wait(variant, (CUstream)GS_SET_STREAM fill);                          \
        CUresult result = GS_REAL(entry, variant) args;                                          \
        gs_gate_exit(gate);                                                                      \
        if (result == CUDA_SUCCESS)                                                              \
            GS_SET_NOTE fill;                                                                    \
        return result;                                                                           \
    }                                                                                            \
    GS_EXPORT_ALIAS(name)

#define GS_DEFINE_SUBMIT(symbol, per_thread, stream, params, args)                               \
    GS_MAKE(GS_SUBMIT_HOOK, symbol, per_thread, stream, params, args)
#define GS_DEFINE_SPAN(symbol, per_thread, sides, params, args)                                  \
    GS_MAKE(GS_SPAN_HOOK, symbol, per_thread, sides, params, args)
#define GS_DEFINE_SET(symbol, per_thread, fill, params, args)                                    \
    GS_MAKE(GS_SET_HOOK, symbol, per_thread, fill, params, args)
/* Every other kind hands over to its gs_impl_ function. */
#define GS_DEFINE_ALLOC(symbol, per_thread, stream, params, args)                                \
    GS_MAKE(GS_DELEGATE_HOOK, symbol, per_thread, stream, params, args)
#define GS_DEFINE_FREE GS_DEFINE_ALLOC
#define GS_DEFINE_INFO GS_DEFINE_ALLOC
#define GS_DEFINE_CONTEXT GS_DEFINE_ALLOC
#define GS_DEFINE_CAPTURE GS_DEFINE_ALLOC

#define GS_ENTRY(kind, symbol, lookup, since, per_thread, stream, params, args)                  \
    GS_BY_##kind(GS_MAKE_NONE, GS_DEFINE_##kind, GS_MAKE_NONE)(symbol, per_thread, stream,      \
                                                               params, args)
#include "cuda/hooks.def"
#undef GS_ENTRY
