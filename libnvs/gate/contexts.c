/* Tracks contexts through the primary-context and cuCtxCreate hooks and the driver calls that
 * end a context (their hooks are memory.c's, which forgets the context's allocations), and the
 * streams of our own that each one's bulk memory moves go on. */
#include "gate/contexts.h"

#include <pthread.h>

#include "base/config.h"
#include "base/log.h"
#include "cuda/impl.h"

#define GS_MAX_CONTEXTS 128

struct gs_context {
    CUcontext ctx;
    CUdevice dev;
    int primary_retains; /* retains of a primary context through us; 0 for others */
    bool primary;
    /* Ours, for prefetches: made on first use, and destroyed by the driver with the context
     * (destroy, reset or last primary release), after which we only forget them. */
    CUstream move_streams[GS_MAX_MOVE_STREAMS];
    int move_stream_count;
};

/* The contexts this process has; a forked child starts over with none (CUDA does not survive
 * fork). `mu` guards the table (held briefly). `life_mu` is held across a drain's
 * synchronization and across the driver calls that end a context, so that a drain never
 * synchronizes a context while it is being destroyed. Order: life, then table. */
static struct gs_context_table {
    pthread_mutex_t life_mu;
    pthread_mutex_t mu;
    struct gs_context list[GS_MAX_CONTEXTS];
    int count;
    bool overflowed; /* a context went untracked: which devices are used is unknown */
    bool exiting;    /* under life_mu */
} gs_ctx = {.life_mu = PTHREAD_MUTEX_INITIALIZER, .mu = PTHREAD_MUTEX_INITIALIZER};

atomic_int gs_contexts_sole_device = -1;
/* Counts contexts forgotten: a handle seen before may name another context since. */
static atomic_uint gs_ctx_generation;
/* This thread's last answer of gs_contexts_device, valid while the generation is the same. */
static _Thread_local struct gs_last_context {
    CUcontext ctx;
    int device;
    unsigned generation;
} gs_last_context;

/* Under gs_ctx.mu: the hot path's device, after the table changed. */
static void gs_ctx_update_sole(void)
{
    int sole = gs_ctx.count > 0 && !gs_ctx.overflowed ? gs_ctx.list[0].dev : -1;
    for (int i = 1; i < gs_ctx.count && sole >= 0; i++)
        if (gs_ctx.list[i].dev != sole)
            sole = -1;
    atomic_store(&gs_contexts_sole_device, sole);
}

static struct gs_context *gs_ctx_find(CUcontext ctx)
{
    for (int i = 0; i < gs_ctx.count; i++)
        if (gs_ctx.list[i].ctx == ctx)
            return &gs_ctx.list[i];
    return NULL;
}

static struct gs_context *gs_ctx_find_primary(CUdevice dev)
{
    for (int i = 0; i < gs_ctx.count; i++)
        if (gs_ctx.list[i].primary && gs_ctx.list[i].dev == dev)
            return &gs_ctx.list[i];
    return NULL;
}

static struct gs_context *gs_ctx_add(CUcontext ctx, CUdevice dev, bool primary)
{
    struct gs_context *c = gs_ctx_find(ctx);
    if (c)
        return c;
    if (gs_ctx.count == GS_MAX_CONTEXTS) {
        if (!gs_ctx.overflowed)
            gs_warn("more than %d CUDA contexts; a drop will not wait for the work of the rest",
                    GS_MAX_CONTEXTS);
        gs_ctx.overflowed = true;
        gs_ctx_update_sole();
        return NULL;
    }
    gs_ctx.list[gs_ctx.count] = (struct gs_context){.ctx = ctx, .dev = dev, .primary = primary};
    gs_debug("tracking %s context %p on device %d", primary ? "primary" : "created", (void *)ctx,
             dev);
    c = &gs_ctx.list[gs_ctx.count++];
    gs_ctx_update_sole();
    return c;
}

static void gs_ctx_remove(struct gs_context *c)
{
    gs_debug("no longer tracking context %p", (void *)c->ctx);
    *c = gs_ctx.list[--gs_ctx.count];
    atomic_fetch_add(&gs_ctx_generation, 1);
    gs_ctx_update_sole();
}

void gs_contexts_note(CUcontext ctx, CUdevice dev)
{
    if (ctx == NULL)
        return;
    pthread_mutex_lock(&gs_ctx.mu);
    gs_ctx_add(ctx, dev, false);
    pthread_mutex_unlock(&gs_ctx.mu);
}

int gs_contexts_device(CUcontext ctx)
{
    if (ctx == NULL)
        return -1;
    unsigned generation = atomic_load(&gs_ctx_generation);
    if (gs_last_context.ctx == ctx && gs_last_context.generation == generation)
        return gs_last_context.device;
    pthread_mutex_lock(&gs_ctx.mu);
    struct gs_context *c = gs_ctx_find(ctx);
    int device = c ? c->dev : -1;
    pthread_mutex_unlock(&gs_ctx.mu);
    if (c == NULL) {
        /* Made where we did not see it (a green context's, say): the driver knows. */
        CUdevice dev;
        CUcontext popped;
        if (GS_REAL(cuCtxPushCurrent_v2, GS_LEGACY)(ctx) == CUDA_SUCCESS) {
            if (GS_REAL(cuCtxGetDevice, GS_LEGACY)(&dev) == CUDA_SUCCESS)
                device = dev;
            GS_REAL(cuCtxPopCurrent_v2, GS_LEGACY)(&popped);
        }
        if (device >= 0)
            gs_contexts_note(ctx, device);
    }
    gs_last_context = (struct gs_last_context){ctx, device, generation};
    return device;
}

CUresult gs_impl_cuDevicePrimaryCtxRetain(enum gs_variant variant, CUcontext *pctx, CUdevice dev)
{
    CUresult r = GS_REAL(cuDevicePrimaryCtxRetain, variant)(pctx, dev);
    pthread_mutex_lock(&gs_ctx.mu);
    if (r == CUDA_SUCCESS && pctx) {
        struct gs_context *c = gs_ctx_add(*pctx, dev, true);
        if (c) {
            c->primary = true;
            c->primary_retains++;
        }
    }
    pthread_mutex_unlock(&gs_ctx.mu);
    return r;
}

CUresult gs_contexts_primary_release(CUresult (*release)(CUdevice), CUdevice dev,
                                     CUcontext *gone)
{
    pthread_mutex_lock(&gs_ctx.life_mu);
    CUresult r = release(dev);
    unsigned int flags;
    int active = -1;
    if (r == CUDA_SUCCESS &&
        GS_REAL(cuDevicePrimaryCtxGetState, GS_LEGACY)(dev, &flags, &active) != CUDA_SUCCESS)
        active = -1;
    pthread_mutex_lock(&gs_ctx.mu);
    struct gs_context *c = gs_ctx_find_primary(dev);
    *gone = NULL;
    if (r == CUDA_SUCCESS && c) {
        c->primary_retains--;
        if (active == 0 || (active < 0 && c->primary_retains <= 0)) {
            *gone = c->ctx;
            gs_ctx_remove(c);
        } else if (c->primary_retains < 0) {
            c->primary_retains = 0; /* retained where we did not see it */
        }
    }
    pthread_mutex_unlock(&gs_ctx.mu);
    pthread_mutex_unlock(&gs_ctx.life_mu);
    return r;
}

CUresult gs_contexts_primary_reset(CUresult (*reset)(CUdevice), CUdevice dev, CUcontext *gone)
{
    pthread_mutex_lock(&gs_ctx.life_mu);
    CUresult r = reset(dev);
    pthread_mutex_lock(&gs_ctx.mu);
    struct gs_context *c = gs_ctx_find_primary(dev);
    CUcontext ctx = c ? c->ctx : NULL;
    if (r == CUDA_SUCCESS && c)
        c->move_stream_count = 0; /* the reset destroyed them */
    pthread_mutex_unlock(&gs_ctx.mu);
    pthread_mutex_unlock(&gs_ctx.life_mu);
    *gone = r == CUDA_SUCCESS ? ctx : NULL;
    return r;
}

#define GS_CREATE_CONTEXT(call, pctx, dev)                                                       \
    CUresult r = call;                                                                           \
    pthread_mutex_lock(&gs_ctx.mu);                                                              \
    if (r == CUDA_SUCCESS && pctx)                                                               \
        gs_ctx_add(*pctx, dev, false);                                                           \
    pthread_mutex_unlock(&gs_ctx.mu);                                                            \
    return r;

CUresult gs_impl_cuCtxCreate_v2(enum gs_variant variant, CUcontext *pctx, unsigned int flags,
                                CUdevice dev)
{
    GS_CREATE_CONTEXT(GS_REAL(cuCtxCreate_v2, variant)(pctx, flags, dev), pctx, dev)
}

CUresult gs_impl_cuCtxCreate_v3(enum gs_variant variant, CUcontext *pctx,
                                CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev)
{
    GS_CREATE_CONTEXT(
        GS_REAL(cuCtxCreate_v3, variant)(pctx, paramsArray, numParams, flags, dev), pctx, dev)
}

CUresult gs_impl_cuCtxCreate_v4(enum gs_variant variant, CUcontext *pctx,
                                CUctxCreateParams *ctxCreateParams, unsigned int flags,
                                CUdevice dev)
{
    GS_CREATE_CONTEXT(GS_REAL(cuCtxCreate_v4, variant)(pctx, ctxCreateParams, flags, dev), pctx,
                      dev)
}

CUresult gs_contexts_destroy(CUresult (*destroy)(CUcontext), CUcontext ctx, CUcontext *gone)
{
    pthread_mutex_lock(&gs_ctx.life_mu);
    CUresult r = destroy(ctx);
    pthread_mutex_lock(&gs_ctx.mu);
    struct gs_context *c = gs_ctx_find(ctx);
    if (r == CUDA_SUCCESS && c)
        gs_ctx_remove(c);
    pthread_mutex_unlock(&gs_ctx.mu);
    pthread_mutex_unlock(&gs_ctx.life_mu);
    *gone = r == CUDA_SUCCESS ? ctx : NULL;
    return r;
}

void gs_contexts_synchronize(int device)
{
    CUcontext ctxs[GS_MAX_CONTEXTS];
    int n = 0;
    pthread_mutex_lock(&gs_ctx.life_mu);
    pthread_mutex_lock(&gs_ctx.mu);
    for (int i = 0; i < gs_ctx.count && !gs_ctx.exiting; i++)
        if (device < 0 || gs_ctx.list[i].dev == device)
            ctxs[n++] = gs_ctx.list[i].ctx;
    pthread_mutex_unlock(&gs_ctx.mu);
    for (int i = 0; i < n; i++) {
        CUcontext ctx = ctxs[i], popped = NULL;
        CUresult r = GS_REAL(cuCtxPushCurrent_v2, GS_LEGACY)(ctx);
        if (r != CUDA_SUCCESS) {
            gs_debug("drain: cannot make context %p current (error %d)", (void *)ctx, r);
            continue;
        }
        r = GS_REAL(cuCtxSynchronize, GS_LEGACY)();
        if (r != CUDA_SUCCESS)
            gs_debug("drain: synchronizing context %p failed (error %d)", (void *)ctx, r);
        GS_REAL(cuCtxPopCurrent_v2, GS_LEGACY)(&popped);
    }
    pthread_mutex_unlock(&gs_ctx.life_mu);
}

/* Under the life lock, with ctx current: makes streams until c has `wanted` (some may exist). */
static void gs_ctx_make_streams(struct gs_context *c, int wanted)
{
    while (c->move_stream_count < wanted) {
        CUstream stream;
        /* Non-blocking: the program's legacy-stream work must never queue behind our moves. */
        CUresult r = GS_REAL(cuStreamCreate, GS_LEGACY)(&stream, CU_STREAM_NON_BLOCKING);
        if (r != CUDA_SUCCESS) {
            gs_debug("cannot create a stream in context %p for moving memory (error %d)",
                     (void *)c->ctx, r);
            return;
        }
        pthread_mutex_lock(&gs_ctx.mu);
        c->move_streams[c->move_stream_count++] = stream; /* c stays: see gs_contexts_enter */
        pthread_mutex_unlock(&gs_ctx.mu);
        gs_debug("created stream %p of context %p for moving memory", (void *)stream,
                 (void *)c->ctx);
    }
}

bool gs_contexts_enter(CUcontext ctx, CUstream *streams, int *count)
{
    pthread_mutex_lock(&gs_ctx.life_mu);
    pthread_mutex_lock(&gs_ctx.mu);
    struct gs_context *c = gs_ctx.exiting ? NULL : gs_ctx_find(ctx);
    pthread_mutex_unlock(&gs_ctx.mu);
    if (c == NULL) {
        pthread_mutex_unlock(&gs_ctx.life_mu); /* gone, or the program is exiting */
        return false;
    }
    CUresult r = GS_REAL(cuCtxPushCurrent_v2, GS_LEGACY)(ctx);
    if (r != CUDA_SUCCESS) {
        gs_debug("cannot make context %p current (error %d)", (void *)ctx, r);
        pthread_mutex_unlock(&gs_ctx.life_mu);
        return false;
    }
    if (count == NULL || *count <= 0)
        return true; /* the context alone */
    /* Entries of the table move only under the life lock, which we hold: c stays ours. */
    gs_ctx_make_streams(c, *count < GS_MAX_MOVE_STREAMS ? *count : GS_MAX_MOVE_STREAMS);
    if (c->move_stream_count == 0) {
        gs_debug("cannot move memory of context %p in bulk; page faults will", (void *)ctx);
        gs_contexts_leave();
        return false;
    }
    if (*count > c->move_stream_count)
        *count = c->move_stream_count;
    for (int i = 0; i < *count; i++)
        streams[i] = c->move_streams[i];
    return true;
}

void gs_contexts_leave(void)
{
    CUcontext popped;
    GS_REAL(cuCtxPopCurrent_v2, GS_LEGACY)(&popped);
    pthread_mutex_unlock(&gs_ctx.life_mu);
}

void gs_contexts_stop(void)
{
    /* Taking the lock waits for a synchronization in progress to end. */
    pthread_mutex_lock(&gs_ctx.life_mu);
    gs_ctx.exiting = true;
    pthread_mutex_unlock(&gs_ctx.life_mu);
}

void gs_contexts_after_fork_child(void)
{
    gs_ctx = (struct gs_context_table){.life_mu = PTHREAD_MUTEX_INITIALIZER,
                                       .mu = PTHREAD_MUTEX_INITIALIZER};
    atomic_store(&gs_contexts_sole_device, -1);
    atomic_fetch_add(&gs_ctx_generation, 1);
}
