/* How programs reach our wrappers: dlsym, cuGetProcAddress / cuGetProcAddress_v2 and cuInit,
 * whose own wrappers are made here, and the table of every wrapper they hand out. (The other
 * exported symbols are made in hooks.c, the NVML ones in nvml_hooks.c.) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#include "base/log.h"
#include "client/client.h"
#include "entry/nvml_hooks.h"
#include "entry/wrap.h"

/* The lookups' own wrappers: each hands over to its gs_impl_ function below. */
#define GS_ENTRY(kind, symbol, lookup, since, per_thread, stream, params, args)                  \
    GS_BY_##kind(GS_DEFINE_LOOKUP, GS_MAKE_NONE, GS_MAKE_NONE)(symbol, per_thread, stream,      \
                                                               params, args)
#define GS_DEFINE_LOOKUP(symbol, per_thread, stream, params, args)                               \
    GS_MAKE(GS_DELEGATE_HOOK, symbol, per_thread, stream, params, args)
#include "cuda/hooks.def"
#undef GS_ENTRY

/* Our wrappers per (entry, variant): NULL for CALLED entries and missing twins. */
#define GS_TWIN_HOOK_NONE(symbol) NULL
#define GS_TWIN_HOOK_PTSZ(symbol) (void *)gs_hook_##symbol##_ptsz
#define GS_TWIN_HOOK_PTDS(symbol) (void *)gs_hook_##symbol##_ptds
#define GS_HOOKS(symbol, per_thread) {(void *)gs_hook_##symbol, GS_TWIN_HOOK_##per_thread(symbol)}
#define GS_NO_HOOKS(symbol, per_thread) {NULL, NULL}
static void *const gs_hooks[GS_ENTRY_COUNT][GS_VARIANTS] = {
#define GS_ENTRY(kind, symbol, lookup, since, per_thread, stream, params, args)                  \
    [GS_ID_##symbol] = GS_BY_##kind(GS_HOOKS, GS_HOOKS, GS_NO_HOOKS)(symbol, per_thread),
#include "cuda/hooks.def"
#undef GS_ENTRY
};

/* Whether fn is one of our own wrappers. */
static bool gs_is_hook(const void *fn)
{
    for (int id = 0; id < GS_ENTRY_COUNT; id++)
        if (fn == gs_hooks[id][GS_LEGACY] || fn == gs_hooks[id][GS_PER_THREAD])
            return fn != NULL;
    return false;
}

/* dlsym is answered by an assembly trampoline: it asks gs_dlsym_hook first and, for everything
 * that is not ours, jumps to glibc's dlsym with the caller's own return address still on the
 * stack. glibc resolves RTLD_NEXT and RTLD_DEFAULT relative to that caller, so a plain C call
 * from here would answer them as if libnvs had asked. */
#define GS_PASS_THROUGH ((void *)-1)

GS_NO_TSAN void *gs_dlsym_hook(void *handle, const char *name);

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        ".p2align 4\n"
        "dlsym:\n"
        ".cfi_startproc\n"
        "    endbr64\n"
        "    push %rdi\n"
        ".cfi_adjust_cfa_offset 8\n"
        "    push %rsi\n"
        ".cfi_adjust_cfa_offset 8\n"
        "    sub $8, %rsp\n"
        ".cfi_adjust_cfa_offset 8\n"
        "    call gs_dlsym_hook\n"
        "    add $8, %rsp\n"
        ".cfi_adjust_cfa_offset -8\n"
        "    pop %rsi\n"
        ".cfi_adjust_cfa_offset -8\n"
        "    pop %rdi\n"
        ".cfi_adjust_cfa_offset -8\n"
        "    cmp $-1, %rax\n"
        "    je 1f\n"
        "    ret\n"
        "1:  jmp *gs_real_dlsym_fn(%rip)\n"
        ".cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, %function\n"
        ".p2align 2\n"
        "dlsym:\n"
        ".cfi_startproc\n"
        "    hint #34\n" /* bti c */
        "    stp x29, x30, [sp, #-32]!\n"
        ".cfi_def_cfa_offset 32\n"
        ".cfi_offset 29, -32\n"
        ".cfi_offset 30, -24\n"
        "    mov x29, sp\n"
        "    stp x0, x1, [sp, #16]\n"
        "    bl gs_dlsym_hook\n"
        "    mov x2, x0\n"
        "    ldp x0, x1, [sp, #16]\n"
        "    ldp x29, x30, [sp], #32\n"
        ".cfi_restore 29\n"
        ".cfi_restore 30\n"
        ".cfi_def_cfa_offset 0\n"
        "    cmn x2, #1\n"
        "    b.eq 1f\n"
        "    mov x0, x2\n"
        "    ret\n"
        "1:  adrp x16, gs_real_dlsym_fn\n"
        "    ldr x16, [x16, #:lo12:gs_real_dlsym_fn]\n"
        "    br x16\n"
        ".cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#else
#error "libnvs supports x86-64 and aarch64"
#endif

/* An NVML function we answer (nvml_hooks.c): our wrapper, with the one the handle finds kept
 * behind it. Nothing starts: a program that only asks NVML gets no client thread. */
static void *gs_dlsym_nvml(void *handle, const char *name)
{
    int id = gs_nvml_find(name);
    if (id < 0)
        return GS_PASS_THROUGH;
    void *fn = gs_real_dlsym(handle, name);
    if (fn == NULL)
        return GS_PASS_THROUGH; /* let glibc answer, dlerror() included */
    if (fn == gs_nvml_hook(id)) {
        fn = gs_real_dlsym(RTLD_NEXT, name); /* as for the driver's functions below */
        if (fn == NULL)
            return NULL;
    }
    gs_nvml_set_real(id, fn);
    gs_debug("dlsym(%s): wrapped", name);
    return gs_nvml_hook(id);
}

GS_NO_TSAN void *gs_dlsym_hook(void *handle, const char *name)
{
    if (!gs_find_real_dlsym())
        return NULL; /* no glibc dlsym to go to: said so on stderr */
    /* Every dlsym of the process comes here: decide on the first bytes for everything else. */
    if (name != NULL && name[0] == 'n' && !strncmp(name, "nvml", 4))
        return gs_dlsym_nvml(handle, name);
    if (name == NULL || name[0] != 'c' || name[1] != 'u' || name[2] < 'A' || name[2] > 'Z')
        return GS_PASS_THROUGH;
    enum gs_variant variant;
    int id = gs_driver_find_symbol(name, &variant);
    if (id < 0 || gs_hooks[id][variant] == NULL)
        return GS_PASS_THROUGH;
    void *fn = gs_real_dlsym(handle, name);
    if (fn == NULL)
        return GS_PASS_THROUGH; /* let glibc answer, dlerror() included */
    if (gs_is_hook(fn)) {
        /* The handle's search found our own export first (RTLD_DEFAULT, the main program, us):
         * the driver's function is the next one, if the program could see one at all. */
        fn = gs_real_dlsym(RTLD_NEXT, name);
        if (fn == NULL)
            return NULL; /* as without libnvs; dlerror() is set */
    }
    gs_client_start(); /* found a driver entry point: the program really uses CUDA */
    gs_driver_set_real(id, variant, fn);
    gs_debug("dlsym(%s): wrapped", name);
    return gs_hooks[id][variant];
}

/* After the driver answered cuGetProcAddress*(symbol, version, flags) with *pfn: put our wrapper
 * in its place if the table has this symbol at this version. */
static void gs_substitute(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                          CUresult (*lookup_again)(const char *, void **, int, cuuint64_t))
{
    int id = gs_driver_find_lookup(symbol, cuda_version);
    if (id < 0)
        return;
    const struct gs_entry *e = &gs_entries[id];
    /* The row's `since` is at most cuda_version; the twins exist from CUDA 7.0 on. */
    bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && e->twin &&
                      cuda_version >= GS_PER_THREAD_SINCE;
    enum gs_variant variant = per_thread ? GS_PER_THREAD : GS_LEGACY;
    if (gs_hooks[id][variant] == NULL || gs_is_hook(*pfn))
        return;
    if (cuda_version > GS_CUDA_VERSION_CHECKED) {
        /* A newer CUDA may have given this name a new signature: wrap only if the driver hands
         * out the very same function for the version our table knows. */
        void *known = NULL;
        if (lookup_again(symbol, &known, e->since, flags) != CUDA_SUCCESS || known != *pfn) {
            static atomic_int warned;
            if (!atomic_exchange(&warned, 1))
                gs_warn("cuGetProcAddress(%s, %d) returns a function newer than the %s this "
                        "libnvs knows: left unwrapped, so it bypasses gemshare (a libnvs built "
                        "for this CUDA version fixes that); GEMSHARE_DEBUG=1 lists the others",
                        symbol, cuda_version, e->symbol);
            else
                gs_debug("cuGetProcAddress(%s, %d): newer than %s; not wrapped", symbol,
                         cuda_version, e->symbol);
            return;
        }
    }
    gs_driver_set_real(id, variant, *pfn);
    *pfn = gs_hooks[id][variant];
}

static CUresult gs_lookup_again_v2(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return GS_REAL(cuGetProcAddress_v2, GS_LEGACY)(symbol, pfn, version, flags, NULL);
}

static CUresult gs_lookup_again_v1(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return GS_REAL(cuGetProcAddress, GS_LEGACY)(symbol, pfn, version, flags);
}

CUresult gs_impl_cuGetProcAddress_v2(enum gs_variant variant, const char *symbol, void **pfn,
                                     int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *symbolStatus)
{
    gs_client_start();
    /* The driver decides what the version and flags mean; we only swap what it returns. */
    CUresult r =
        GS_REAL(cuGetProcAddress_v2, variant)(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && symbol && pfn && *pfn)
        gs_substitute(symbol, pfn, cudaVersion, flags, gs_lookup_again_v2);
    return r;
}

CUresult gs_impl_cuGetProcAddress(enum gs_variant variant, const char *symbol, void **pfn,
                                  int cudaVersion, cuuint64_t flags)
{
    gs_client_start();
    CUresult r = GS_REAL(cuGetProcAddress, variant)(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && symbol && pfn && *pfn)
        gs_substitute(symbol, pfn, cudaVersion, flags, gs_lookup_again_v1);
    return r;
}

CUresult gs_impl_cuInit(enum gs_variant variant, unsigned int Flags)
{
    /* Strict mode fails here, where the runtime reports it plainly (cudaErrorSystemNotReady):
     * every other driver call needs cuInit first. */
    if (!gs_client_allow_init())
        return CUDA_ERROR_SYSTEM_NOT_READY;
    return GS_REAL(cuInit, variant)(Flags);
}
