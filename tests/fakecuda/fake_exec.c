/* The simulated device: one worker thread runs queued work in submission order, each op taking
 * its simulated time, so that asynchrony is real and synchronization has something to wait for.
 * Also streams, events and the synchronization calls.
 *
 * Running every stream's work in one FIFO is a legal schedule for a real GPU (streams may, not
 * must, overlap) and keeps every ordering rule true: in-stream order, the legacy stream's
 * implicit barrier, and event waits (the recorded work always precedes the waiting work). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fake_driver.h"

struct queued {
    struct fake_op op;
    uint64_t seq;
    uint64_t stream_id;
    CUdevice device; /* of the stream's context: tests tell the work of several devices apart */
    struct queued *next;
};

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t q_done = PTHREAD_COND_INITIALIZER;
static struct queued *q_head, *q_tail;
static uint64_t next_seq;
static _Atomic uint64_t completed_seq;
static bool worker_started;

void fake_sleep_us(uint64_t us)
{
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

uint64_t fake_completed_seq(void)
{
    return atomic_load(&completed_seq);
}

static const char *op_name(const struct fake_op *op)
{
    if (op->what)
        return op->what;
    switch (op->kind) {
    case FAKE_OP_KERNEL: return "kernel";
    case FAKE_OP_COPY: return "copy";
    case FAKE_OP_SET: return "set";
    case FAKE_OP_HOST_FN: return "host_fn";
    case FAKE_OP_EVENT: return "event";
    case FAKE_OP_FREE_ASYNC: return "free_async";
    case FAKE_OP_PREFETCH: return "prefetch";
    case FAKE_OP_NOP: return "nop";
    case FAKE_OP_DISCARD: return "discard";
    }
    return "?";
}

/* With FAKECUDA_MIGRATE_GBPS, a copy out of managed memory into other memory takes the time a
 * move of its bytes would: copying out is one way to move memory off the device. */
static void run_copy(const struct fake_op *op)
{
    const typeof(op->u.copy) *c = &op->u.copy;
    for (size_t z = 0; z < (c->depth ? c->depth : 1); z++)
        for (size_t y = 0; y < (c->height ? c->height : 1); y++)
            memmove((void *)(c->dst + z * c->dst_slice + y * c->dst_pitch),
                    (const void *)(c->src + z * c->src_slice + y * c->src_pitch), c->width);
    double gbps = fake_config()->migrate_gbps;
    if (gbps > 0 && fake_is_managed(c->src) && !fake_is_managed(c->dst)) {
        size_t bytes = c->width * (c->height ? c->height : 1) * (c->depth ? c->depth : 1);
        fake_sleep_us((uint64_t)((double)bytes / (gbps * 1e3)));
    }
}

static void run_set(const struct fake_op *op)
{
    const typeof(op->u.set) *s = &op->u.set;
    for (size_t y = 0; y < (s->height ? s->height : 1); y++) {
        unsigned char *row = (unsigned char *)(s->dst + y * s->pitch);
        for (size_t i = 0; i < s->width; i++) {
            if (s->elem == 1)
                row[i] = (unsigned char)s->value;
            else if (s->elem == 2)
                ((uint16_t *)row)[i] = (uint16_t)s->value;
            else
                ((uint32_t *)row)[i] = (uint32_t)s->value;
        }
    }
}

/* FAKECUDA_PREFETCH_HOLD: a migration that takes as long as a test wants. */
static void hold_prefetch(void)
{
    const char *path = fake_config()->prefetch_hold;
    struct stat st;
    for (int ms = 0; path && ms < FAKE_PREFETCH_HOLD_S * 1000 && stat(path, &st) != 0; ms++)
        fake_sleep_us(1000);
}

/* FAKECUDA_MIGRATE_GBPS: a migration takes the time its bytes need at that rate; pages already
 * where it sends them cost nothing, as on the driver. Returns the bytes it moved. */
static size_t migrate(const struct fake_op *op)
{
    const typeof(op->u.prefetch) *m = &op->u.prefetch;
    size_t moved = fake_managed_move(m->ptr, m->len, m->dst < 0);
    double gbps = fake_config()->migrate_gbps;
    if (gbps > 0)
        fake_sleep_us((uint64_t)((double)moved / (gbps * 1e3)));
    return moved;
}

/* Page faults: a kernel (the fill kernel, a memset) that touches managed pages on the host
 * brings them to the device first, at FAKECUDA_MIGRATE_GBPS, as the driver's faults do. Returns
 * the bytes it brought. */
static size_t fault_in(uintptr_t p, size_t len)
{
    if (len == 0 || !fake_is_managed(p))
        return 0;
    size_t faulted = fake_managed_move(p, len, false);
    double gbps = fake_config()->migrate_gbps;
    if (gbps > 0 && faulted > 0)
        fake_sleep_us((uint64_t)((double)faulted / (gbps * 1e3)));
    return faulted;
}

/* The base of the allocation that holds p, or 0. */
static uintptr_t alloc_base(uintptr_t p)
{
    struct fake_alloc a;
    return p && fake_alloc_lookup(p, &a) ? a.base : 0;
}

/* Notes the allocations the op touches: a free that comes between queueing and running it
 * (another thread's cuMemFree, which waits only for what was queued before it) is seen then. */
static void note_allocs(struct fake_op *op)
{
    op->allocs[0] = op->allocs[1] = 0;
    if (op->kind == FAKE_OP_COPY) {
        op->allocs[0] = alloc_base(op->u.copy.dst);
        op->allocs[1] = alloc_base(op->u.copy.src);
    } else if (op->kind == FAKE_OP_DISCARD || op->kind == FAKE_OP_PREFETCH) {
        op->allocs[0] = alloc_base(op->u.prefetch.ptr);
    }
}

static bool allocs_gone(const struct fake_op *op)
{
    for (int i = 0; i < 2; i++)
        if (op->allocs[i] && alloc_base(op->allocs[i]) != op->allocs[i])
            return true;
    return false;
}

void fake_execute(const struct fake_op *op, uint64_t seq, uint64_t stream_id, CUdevice device)
{
    fake_log("exec_begin", "seq=%llu op=%s stream=%llu device=%d", (unsigned long long)seq,
             op_name(op), (unsigned long long)stream_id, (int)device);
    if (allocs_gone(op)) {
        fake_log("exec_end", "seq=%llu op=%s stream=%llu device=%d freed=1",
                 (unsigned long long)seq, op_name(op), (unsigned long long)stream_id,
                 (int)device);
        return;
    }
    size_t moved = 0; /* bytes a prefetch moved: a test tells moves from no-ops by it, not by time */
    size_t faulted = 0; /* bytes a kernel's page faults brought to the device */
    switch (op->kind) {
    case FAKE_OP_KERNEL:
        if (op->u.kernel.fill_len) {
            faulted = fault_in(op->u.kernel.fill_ptr, op->u.kernel.fill_len);
            memset((void *)op->u.kernel.fill_ptr, op->u.kernel.fill_value, op->u.kernel.fill_len);
        }
        break;
    case FAKE_OP_COPY: run_copy(op); break;
    case FAKE_OP_SET:
        faulted = fault_in(op->u.set.dst, op->u.set.height > 1
                                              ? op->u.set.pitch * (op->u.set.height - 1) +
                                                    op->u.set.width * (size_t)op->u.set.elem
                                              : op->u.set.width * (size_t)op->u.set.elem);
        run_set(op);
        break;
    case FAKE_OP_HOST_FN:
        if (op->u.host.fn)
            op->u.host.fn(op->u.host.user);
        else if (op->u.host.cb)
            op->u.host.cb(op->u.host.cb_stream, CUDA_SUCCESS, op->u.host.user);
        break;
    case FAKE_OP_EVENT: atomic_store(&op->u.event.event->done_ns, fake_now_ns()); break;
    case FAKE_OP_FREE_ASYNC: fake_free_async_now(op->u.free_async.ptr, "cuMemFreeAsync"); break;
    case FAKE_OP_PREFETCH:
        hold_prefetch();
        moved = migrate(op);
        break;
    case FAKE_OP_NOP: break;
    case FAKE_OP_DISCARD:
        memset((void *)op->u.prefetch.ptr, FAKE_DISCARDED_BYTE, op->u.prefetch.len);
        fake_managed_move(op->u.prefetch.ptr, op->u.prefetch.len, true);
        break;
    }
    if (op->duration_us)
        fake_sleep_us(op->duration_us);
    fake_log("exec_end", "seq=%llu op=%s stream=%llu device=%d moved=%zu faulted=%zu",
             (unsigned long long)seq, op_name(op), (unsigned long long)stream_id, (int)device,
             moved, faulted);
}

static void *worker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&q_lock);
    for (;;) {
        while (!q_head)
            pthread_cond_wait(&q_work, &q_lock);
        struct queued *item = q_head;
        pthread_mutex_unlock(&q_lock);
        fake_execute(&item->op, item->seq, item->stream_id, item->device);
        pthread_mutex_lock(&q_lock);
        q_head = item->next;
        if (!q_head)
            q_tail = NULL;
        atomic_store(&completed_seq, item->seq);
        pthread_cond_broadcast(&q_done);
        free(item);
    }
    return NULL;
}

/* Called with q_lock held. */
static void start_worker_locked(void)
{
    if (worker_started)
        return;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, worker_main, NULL) != 0) {
        fprintf(stderr, "fakecuda: cannot start the simulated device thread\n");
        abort();
    }
    pthread_attr_destroy(&attr);
    worker_started = true;
}

static const char *stream_kind(const struct CUstream_st *s)
{
    return s->legacy ? "legacy" : s->per_thread ? "per_thread" : "created";
}

CUresult fake_submit_ops(const struct fake_call *call, const char *event, struct CUstream_st *s,
                         const struct fake_op *ops, size_t n, const char *details,
                         uint64_t *last_seq)
{
    char name[48];
    fake_event_name(event, call->api, name, sizeof name);
    if (!details)
        details = "";
    if (last_seq)
        *last_seq = 0;
    bool captured = false;
    CUresult r = fake_capture_record(s, ops, n, &captured);
    if (captured || r != CUDA_SUCCESS) {
        fake_log(name, "api=%s stream=%llu stream_kind=%s captured=1 %s result=%d", call->api,
                 (unsigned long long)s->id, stream_kind(s), details, (int)r);
        return r;
    }
    if (s->legacy && fake_capture_blocks_legacy(s->ctx)) {
        /* Work on the legacy stream would depend on a capturing blocking stream. */
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        fake_log(name, "api=%s stream=0 stream_kind=legacy %s result=%d", call->api, details,
                 (int)r);
        return r;
    }
    /* Made before taking the lock, chained in order. */
    struct queued *chain = NULL, *chain_end = NULL, **link = &chain;
    for (size_t i = 0; i < n; i++) {
        struct queued *item = malloc(sizeof *item);
        if (!item) {
            while (chain) {
                struct queued *next = chain->next;
                free(chain);
                chain = next;
            }
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        item->op = ops[i];
        note_allocs(&item->op);
        item->stream_id = s->id;
        item->device = s->ctx->device;
        item->next = NULL;
        *link = chain_end = item;
        link = &item->next;
    }
    pthread_mutex_lock(&q_lock);
    uint64_t first = next_seq + 1;
    for (struct queued *item = chain; item; item = item->next) {
        item->seq = ++next_seq;
        if (item->op.kind == FAKE_OP_EVENT) {
            atomic_store(&item->op.u.event.event->done_ns, 0);
            atomic_store(&item->op.u.event.event->seq, item->seq);
        }
    }
    if (chain) {
        if (q_tail)
            q_tail->next = chain;
        else
            q_head = chain;
        q_tail = chain_end;
    }
    uint64_t last = next_seq;
    atomic_store(&s->last_seq, last);
    atomic_store(&s->ctx->last_seq, last);
    /* Logged before the worker can see it, so the submission precedes its exec_begin. */
    fake_log(name, "api=%s stream=%llu stream_kind=%s device=%d seq=%llu ops=%zu %s result=0",
             call->api, (unsigned long long)s->id, stream_kind(s), (int)s->ctx->device,
             (unsigned long long)first, n, details);
    if (n) {
        start_worker_locked();
        pthread_cond_signal(&q_work);
    }
    pthread_mutex_unlock(&q_lock);
    if (last_seq)
        *last_seq = last;
    return CUDA_SUCCESS;
}

CUresult fake_submit(const struct fake_call *call, const char *event, struct CUstream_st *s,
                     const struct fake_op *op, const char *details)
{
    return fake_submit_ops(call, event, s, op, 1, details, NULL);
}

CUresult fake_submit_sync(const struct fake_call *call, const char *event, struct CUstream_st *s,
                          const struct fake_op *op, const char *details)
{
    uint64_t seq;
    CUresult r = fake_submit_ops(call, event, s, op, 1, details, &seq);
    if (r == CUDA_SUCCESS && seq)
        fake_wait_seq(seq);
    return r;
}

void fake_wait_seq(uint64_t seq)
{
    if (atomic_load(&completed_seq) >= seq)
        return;
    pthread_mutex_lock(&q_lock);
    while (atomic_load(&completed_seq) < seq)
        pthread_cond_wait(&q_done, &q_lock);
    pthread_mutex_unlock(&q_lock);
}

/* ---- streams ------------------------------------------------------------------------------- */

static __thread struct CUstream_st *ptds_stream;

static struct CUstream_st *per_thread_stream(CUcontext ctx)
{
    if (!ptds_stream || ptds_stream->ctx != ctx) {
        struct CUstream_st *s = calloc(1, sizeof *s);
        if (!s)
            return NULL;
        s->magic = FAKE_STREAM_MAGIC;
        s->id = fake_next_id();
        s->ctx = ctx;
        s->per_thread = true;
        ptds_stream = s; /* the previous one (another context) lives on, as on the driver */
    }
    return ptds_stream;
}

/* A created stream whose context was destroyed or reset since: the driver destroyed it too. */
static bool stream_is_dead(const struct CUstream_st *s)
{
    if (s->legacy || s->per_thread || s->ctx_generation == atomic_load(&s->ctx->generation))
        return false;
    fake_log("stream_dead", "stream=%llu", (unsigned long long)s->id);
    return true;
}

CUresult fake_stream_resolve(CUstream h, bool per_thread, struct CUstream_st **out)
{
    CUcontext ctx;
    FAKE_TRY(fake_require_ctx(&ctx));
    if (h == NULL)
        *out = per_thread ? per_thread_stream(ctx) : ctx->legacy;
    else if (h == CU_STREAM_LEGACY)
        *out = ctx->legacy;
    else if (h == CU_STREAM_PER_THREAD)
        *out = per_thread_stream(ctx);
    else if (h->magic == FAKE_STREAM_MAGIC && !stream_is_dead(h))
        *out = h;
    else
        return CUDA_ERROR_INVALID_HANDLE;
    return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FAKE_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    CUcontext ctx;
    FAKE_TRY(fake_require_ctx(&ctx));
    if (!phStream || (flags & ~(unsigned int)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->magic = FAKE_STREAM_MAGIC;
    s->id = fake_next_id();
    s->ctx = ctx;
    s->flags = flags;
    s->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority;
    s->ctx_generation = atomic_load(&ctx->generation);
    *phStream = s;
    fake_log("stream_create", "stream=%llu flags=%u", (unsigned long long)s->id, flags);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return cuStreamCreateWithPriority(phStream, Flags, 0);
}

FAKE_API CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    FAKE_TRY(fake_check_init());
    if (leastPriority)
        *leastPriority = 0;
    if (greatestPriority)
        *greatestPriority = -5;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
    FAKE_TRY(fake_check_init());
    if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
        hStream->magic != FAKE_STREAM_MAGIC || hStream->legacy || hStream->per_thread ||
        stream_is_dead(hStream))
        return CUDA_ERROR_INVALID_HANDLE;
    /* Queued work still completes; the struct is kept so stale handles stay detectable. */
    hStream->magic = 0;
    fake_log("stream_destroy", "stream=%llu", (unsigned long long)hStream->id);
    return CUDA_SUCCESS;
}

/* Synchronizing or querying a capturing stream is illegal and ruins the capture. */
static CUresult capture_conflict(struct CUstream_st *s)
{
    if (fake_capture_invalidate_stream(s))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (s->legacy && fake_capture_blocks_legacy(s->ctx))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    return CUDA_SUCCESS;
}

static CUresult cuStreamSynchronize_impl(const struct fake_call *call, CUstream hStream)
{
    struct CUstream_st *s;
    CUresult r = fake_stream_resolve(hStream, call->per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    char name[32];
    if ((r = capture_conflict(s)) == CUDA_SUCCESS)
        fake_wait_seq(atomic_load(&s->last_seq));
    fake_log(fake_event_name("stream_sync", call->api, name, sizeof name),
             "api=%s stream=%llu result=%d", call->api, (unsigned long long)s->id, (int)r);
    return r;
}
FAKE_PTSZ_PAIR(cuStreamSynchronize, (CUstream hStream), hStream)

static CUresult cuStreamQuery_impl(const struct fake_call *call, CUstream hStream)
{
    struct CUstream_st *s;
    CUresult r = fake_stream_resolve(hStream, call->per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if ((r = capture_conflict(s)) == CUDA_SUCCESS &&
        fake_completed_seq() < atomic_load(&s->last_seq))
        r = CUDA_ERROR_NOT_READY;
    char name[32];
    fake_log(fake_event_name("stream_query", call->api, name, sizeof name),
             "api=%s stream=%llu result=%d", call->api, (unsigned long long)s->id, (int)r);
    return r;
}
FAKE_PTSZ_PAIR(cuStreamQuery, (CUstream hStream), hStream)

static CUresult cuStreamGetCtx_impl(const struct fake_call *call, CUstream hStream,
                                    CUcontext *pctx)
{
    struct CUstream_st *s;
    CUresult r = fake_stream_resolve(hStream, call->per_thread, &s);
    if (r == CUDA_SUCCESS && !pctx)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *pctx = s->ctx;
    return r;
}
FAKE_PTSZ_PAIR(cuStreamGetCtx, (CUstream hStream, CUcontext *pctx), hStream, pctx)

static CUresult cuStreamGetCtx_v2_impl(const struct fake_call *call, CUstream hStream,
                                       CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    CUresult r = cuStreamGetCtx_impl(call, hStream, pCtx);
    if (r == CUDA_SUCCESS && pGreenCtx)
        *pGreenCtx = NULL; /* green contexts are not simulated */
    return r;
}
FAKE_PTSZ_PAIR(cuStreamGetCtx_v2, (CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx),
               hStream, pCtx, pGreenCtx)

static CUresult cuStreamGetFlags_impl(const struct fake_call *call, CUstream hStream,
                                      unsigned int *flags)
{
    struct CUstream_st *s;
    CUresult r = fake_stream_resolve(hStream, call->per_thread, &s);
    if (r == CUDA_SUCCESS && !flags)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *flags = s->flags;
    return r;
}
FAKE_PTSZ_PAIR(cuStreamGetFlags, (CUstream hStream, unsigned int *flags), hStream, flags)

static CUresult cuStreamGetPriority_impl(const struct fake_call *call, CUstream hStream,
                                         int *priority)
{
    struct CUstream_st *s;
    CUresult r = fake_stream_resolve(hStream, call->per_thread, &s);
    if (r == CUDA_SUCCESS && !priority)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *priority = s->priority;
    return r;
}
FAKE_PTSZ_PAIR(cuStreamGetPriority, (CUstream hStream, int *priority), hStream, priority)

static CUresult cuStreamGetId_impl(const struct fake_call *call, CUstream hStream,
                                   unsigned long long *streamId)
{
    struct CUstream_st *s;
    CUresult r = fake_stream_resolve(hStream, call->per_thread, &s);
    if (r == CUDA_SUCCESS && !streamId)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *streamId = s->id;
    return r;
}
FAKE_PTSZ_PAIR(cuStreamGetId, (CUstream hStream, unsigned long long *streamId), hStream,
                  streamId)

/* ---- context synchronization --------------------------------------------------------------- */

static CUresult ctx_synchronize(CUcontext c, const char *api)
{
    CUresult r = fake_capture_check_unsafe(api);
    if (r == CUDA_SUCCESS)
        fake_wait_seq(atomic_load(&c->last_seq));
    fake_log("ctx_sync", "api=%s ctx=%p waited_seq=%llu result=%d", api, (void *)c,
             (unsigned long long)atomic_load(&c->last_seq), (int)r);
    return r;
}

FAKE_API CUresult cuCtxSynchronize(void)
{
    CUcontext c;
    FAKE_TRY(fake_require_ctx(&c));
    return ctx_synchronize(c, "cuCtxSynchronize");
}

FAKE_API CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    FAKE_TRY(fake_check_init());
    if (!ctx)
        ctx = fake_current_ctx();
    if (!fake_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    return ctx_synchronize(ctx, "cuCtxSynchronize_v2");
}

/* ---- events -------------------------------------------------------------------------------- */

static bool event_valid(CUevent e)
{
    return e && e->magic == FAKE_EVENT_MAGIC;
}

FAKE_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    CUcontext ctx;
    FAKE_TRY(fake_require_ctx(&ctx));
    if (!phEvent || (Flags & ~0x7u))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = FAKE_EVENT_MAGIC;
    e->flags = Flags;
    e->ctx = ctx;
    *phEvent = e;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
    FAKE_TRY(fake_check_init());
    if (!event_valid(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    hEvent->magic = 0; /* a pending record still completes; the struct stays for it */
    return CUDA_SUCCESS;
}

static CUresult event_record(const struct fake_call *call, CUevent hEvent, CUstream hStream)
{
    struct CUstream_st *s;
    FAKE_TRY(fake_stream_resolve(hStream, call->per_thread, &s));
    if (!event_valid(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    /* Recorded inside a capture it marks a point of the graph, not of the device. */
    if (fake_capture_event_record(hEvent, s))
        return CUDA_SUCCESS;
    struct fake_op op = {.kind = FAKE_OP_EVENT, .u.event.event = hEvent};
    char details[40];
    snprintf(details, sizeof details, "event=%p", (void *)hEvent);
    return fake_submit(call, "event_record", s, &op, details);
}

static CUresult cuEventRecord_impl(const struct fake_call *call, CUevent hEvent, CUstream hStream)
{
    return event_record(call, hEvent, hStream);
}
FAKE_PTSZ_PAIR(cuEventRecord, (CUevent hEvent, CUstream hStream), hEvent, hStream)

static CUresult cuEventRecordWithFlags_impl(const struct fake_call *call, CUevent hEvent,
                                            CUstream hStream, unsigned int flags)
{
    (void)flags; /* external events are not simulated */
    return event_record(call, hEvent, hStream);
}
FAKE_PTSZ_PAIR(cuEventRecordWithFlags, (CUevent hEvent, CUstream hStream, unsigned int flags),
                  hEvent, hStream, flags)

static CUresult event_state(CUevent hEvent)
{
    FAKE_TRY(fake_check_init());
    if (!event_valid(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    if (fake_capture_event_captured(hEvent))
        return CUDA_ERROR_CAPTURED_EVENT;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuEventQuery(CUevent hEvent)
{
    CUresult r = event_state(hEvent);
    if (r == CUDA_SUCCESS && fake_completed_seq() < atomic_load(&hEvent->seq))
        r = CUDA_ERROR_NOT_READY;
    fake_log("event_query", "event=%p result=%d", (void *)hEvent, (int)r);
    return r;
}

FAKE_API CUresult cuEventSynchronize(CUevent hEvent)
{
    CUresult r = event_state(hEvent);
    if (r == CUDA_SUCCESS)
        fake_wait_seq(atomic_load(&hEvent->seq));
    fake_log("event_sync", "event=%p result=%d", (void *)hEvent, (int)r);
    return r;
}

FAKE_API CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    CUresult r = event_state(hStart);
    if (r == CUDA_SUCCESS)
        r = event_state(hEnd);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pMilliseconds)
        return CUDA_ERROR_INVALID_VALUE;
    if ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING || !atomic_load(&hStart->seq) ||
        !atomic_load(&hEnd->seq))
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t a = atomic_load(&hStart->done_ns), b = atomic_load(&hEnd->done_ns);
    if (!a || !b)
        return CUDA_ERROR_NOT_READY;
    *pMilliseconds = (float)((double)((int64_t)b - (int64_t)a) / 1e6);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

static CUresult cuStreamWaitEvent_impl(const struct fake_call *call, CUstream hStream,
                                       CUevent hEvent, unsigned int Flags)
{
    struct CUstream_st *s;
    FAKE_TRY(fake_stream_resolve(hStream, call->per_thread, &s));
    if (!event_valid(hEvent) || Flags > 1)
        return CUDA_ERROR_INVALID_HANDLE;
    /* Device order already puts the recorded work first; a captured event joins the capture. */
    fake_capture_join(s, hEvent);
    return CUDA_SUCCESS;
}
FAKE_PTSZ_PAIR(cuStreamWaitEvent, (CUstream hStream, CUevent hEvent, unsigned int Flags),
                  hStream, hEvent, Flags)
