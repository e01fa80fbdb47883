/* Bulk moves of managed memory. Each move is cut into chunks spread round robin over
 * GEMSHARE_MOVE_STREAMS non-blocking streams of each context, so that the driver can overlap one
 * prefetch's page-table work with another's copy. An event after each chunk lets the client
 * thread wait chunk by chunk, report progress and know exactly what arrived when the driver
 * refuses part of a move.
 *
 * Converted memory goes to the host by copy: the copy engine fills pinned staging memory at the
 * link's speed and the device pages are then discarded, where a migration of the same pages
 * first has to find fresh host pages (an H100: 44 GB/s against 3 GB/s the first time and 14 to
 * 18 GB/s later). Discarded pages hold nothing until written, so staged memory is always copied
 * back before the program may run again: on the next grant, or before it runs without the lock.
 * The program's own managed memory keeps migrating: its host code may read it any time. */
#include "memory/migrate.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/config.h"
#include "base/log.h"
#include "cuda/impl.h"
#include "gate/capture.h"
#include "gate/contexts.h"
#include "gate/gate.h"
#include "gate/wake.h"
#include "memory/cold.h"
#include "memory/host_room.h"
#include "memory/memory.h"
#include "memory/staging.h"
#include "wire/gemshare_protocol.h"

/* Moves out are rounded up to whole large pages, the driver's unit of migration. */
#define GS_MOVE_ALIGN (2ull << 20)
/* Small enough for progress and an even spread over the streams, large enough that a prefetch
 * and its event cost nothing beside the copy (20 ms at 13 GB/s). */
#define GS_MOVE_CHUNK (256ull << 20)
#define GS_MOVE_POLL_NS 200000
/* The driver's migration to the host until a move measures it here: a process's first on an
 * H100, where it must find new host pages (README.md, "Out by copy"); moves smaller than the
 * sample time the calls, not the link. */
#define GS_MIGRATE_PRIOR_BPS 3.0e9
#define GS_MIGRATE_SAMPLE (64ull << 20)

/* Since the lock was last granted: how much moved to the host, and how far into the device's
 * allocations, oldest first. A move out always takes the oldest first, so what is out is
 * everything allocated before `stamp` and the first `offset` bytes of the allocation `stamp`
 * (new allocations are newer: they never fall inside). */
struct gs_moved_out {
    uint64_t bytes;
    uint64_t stamp;
    uint64_t offset;
    uint64_t cold; /* of bytes, cold memory's: it stays on the host at the grant */
};

/* A piece of an allocation, moved with one call (or a copy and a discard). */
struct gs_chunk {
    CUdeviceptr ptr;
    size_t size;
    CUcontext ctx;
    uint64_t stamp, end; /* its allocation, and how far into it the chunk reaches */
    bool converted;
    void *host; /* its staging memory, when it goes by copy */
    CUevent done;
    bool freed; /* the program freed its allocation while it moved: nothing to move or wait for */
    bool cold;  /* cold memory (cold.h): migrated whatever the rest does, outside the order */
    bool counted; /* its bytes count as moved: on the device as far as we know */
};

/* The chunks that went by copy and wait in staging memory, per device. */
struct gs_staged {
    struct gs_chunk *chunks;
    size_t count, cap;
};

/* Owned by the client thread, the only caller; reset after fork. */
static struct gs_migrate_state {
    int driver_version; /* 0 until asked, -1 when the driver would not say */
    struct gs_moved_out out[GS_MAX_DEVICES];
    struct gs_staged staged[GS_MAX_DEVICES];
    double migrate_bps[GS_MAX_DEVICES]; /* as the last move out with no copy measured it; 0: none */
    /* What may have to leave the device: the scheduler's last word (IDLE_HINT), which counts
     * the most a move out was asked there and keeps within the node's staging budget; until it
     * said one, what a move out took. Staging memory is prepared for that much and kept no
     * larger. */
    uint64_t may_leave[GS_MAX_DEVICES];
    bool told[GS_MAX_DEVICES];
} gs_mig;

/* Devices with converted memory allocated while the process could not run there: set by the
 * program's threads, cleared by the client thread at a grant. */
static atomic_bool gs_unpopulated[GS_MAX_DEVICES];

/* One move in progress. */
struct gs_mover {
    int device;
    bool to_host, wait;
    bool restore; /* staged chunks going back: each is prefetched, then copied in */
    const struct gs_move_progress *progress; /* NULL: none */
    int64_t began_ns, reported_ns;
    struct gs_move result;
    bool in_order;  /* every chunk so far arrived: the oldest-first prefix grows */
    bool unusable;  /* an event reported an error: nothing more is waited for */
    uint64_t freed_bytes; /* of chunks whose allocation the program freed meanwhile */
    uint64_t copied_bytes; /* of chunks that went by copy, not by the driver's migration */
    uint64_t ready_bytes;  /* of those, into staging memory that was ready before the move */
};

static int64_t gs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static bool gs_device_ok(int device)
{
    return device >= 0 && device < GS_MAX_DEVICES;
}

static int gs_oldest_first(const void *x, const void *y)
{
    uint64_t a = ((const struct gs_managed *)x)->stamp;
    uint64_t b = ((const struct gs_managed *)y)->stamp;
    return a < b ? -1 : a > b ? 1 : 0;
}

static int gs_newest_first(const void *x, const void *y)
{
    return gs_oldest_first(y, x);
}

/* Prefetches one range, with the v2 entry point where the driver has it (CUDA 12.2) and the
 * older one otherwise. */
/* Cached on first use; a race between threads writes the same value. */
static int gs_driver_version(void)
{
    if (gs_mig.driver_version == 0 &&
        GS_REAL(cuDriverGetVersion, GS_LEGACY)(&gs_mig.driver_version) != CUDA_SUCCESS)
        gs_mig.driver_version = -1;
    return gs_mig.driver_version;
}

static CUresult gs_prefetch(const struct gs_chunk *c, int device, bool to_host, CUstream stream)
{
    if (gs_driver_version() >= 12020) {
        CUmemLocation where = {to_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE,
                               to_host ? 0 : device};
        return GS_REAL(cuMemPrefetchAsync_v2, GS_LEGACY)(c->ptr, c->size, where, 0, stream);
    }
    const CUdevice cpu = -1; /* CU_DEVICE_CPU */
    return GS_REAL(cuMemPrefetchAsync, GS_LEGACY)(c->ptr, c->size, to_host ? cpu : device,
                                                  stream);
}

static void gs_refused(struct gs_mover *mv, const char *what, const struct gs_chunk *c,
                       CUresult r)
{
    mv->result.failed = true;
    gs_warn("moving memory to the %s: %s for %zu bytes at %#llx failed (error %d); stopping "
            "there, the rest stays where it is and page faults move it",
            mv->to_host ? "host" : "device", what, c->size, (unsigned long long)c->ptr, r);
}

static void gs_tick(struct gs_mover *mv)
{
    int64_t now = gs_now_ns();
    if (mv->progress && now - mv->reported_ns >= GS_MOVE_PROGRESS_MS * 1000000ll) {
        mv->reported_ns = now;
        mv->progress->report(mv->progress->arg, mv->device, mv->result.bytes,
                             (uint64_t)(now - mv->began_ns) / 1000);
    }
}

/* Polls rather than blocks, so that progress goes out on time however long a chunk takes. */
static bool gs_wait_chunk(struct gs_mover *mv, const struct gs_chunk *c)
{
    for (;;) {
        CUresult r = GS_REAL(cuEventQuery, GS_LEGACY)(c->done);
        if (r == CUDA_SUCCESS)
            return true;
        if (r != CUDA_ERROR_NOT_READY) {
            gs_refused(mv, "the prefetch", c, r);
            mv->unusable = true;
            return false;
        }
        gs_tick(mv);
        struct timespec pause = {0, GS_MOVE_POLL_NS};
        nanosleep(&pause, NULL);
    }
}

/* Copies the chunk into its staging memory and discards its device pages, in stream order. */
static CUresult gs_copy_out(const struct gs_chunk *c, CUstream stream)
{
    CUresult r = GS_REAL(cuMemcpyDtoHAsync_v2, GS_LEGACY)(c->host, c->ptr, c->size, stream);
    CUdeviceptr ptr = c->ptr;
    size_t size = c->size;
    return r != CUDA_SUCCESS ? r
                             : GS_REAL(cuMemDiscardBatchAsync, GS_LEGACY)(&ptr, &size, 1, 0,
                                                                          stream);
}

/* Prefetching discarded pages only gives them device pages; the copy then fills them. */
static CUresult gs_copy_in(const struct gs_chunk *c, int device, CUstream stream)
{
    gs_prefetch(c, device, false, stream); /* without it the copy's writes place the pages */
    return GS_REAL(cuMemcpyHtoDAsync_v2, GS_LEGACY)(c->ptr, c->host, c->size, stream);
}

static CUresult gs_move_one(struct gs_mover *mv, struct gs_chunk *c, CUstream stream,
                            const char **what)
{
    if (mv->restore) {
        *what = "the copy back from staging memory";
        return gs_copy_in(c, mv->device, stream);
    }
    *what = "cuMemPrefetchAsync";
    if (c->host && gs_copy_out(c, stream) == CUDA_SUCCESS)
        return CUDA_SUCCESS;
    c->host = NULL; /* the driver migrates it; the staging memory stays unused until a reset */
    return gs_prefetch(c, mv->device, mv->to_host, stream);
}

/* Whether the chunk's allocation is still the program's. cuMemFree is not gated: a program may
 * free memory while the client thread moves it, and the driver then refuses the chunk, which is
 * no failure of the move. Asked only after a refusal. */
static bool gs_still_allocated(int device, const struct gs_chunk *c)
{
    size_t n;
    struct gs_managed *live = gs_memory_managed(device, true, &n);
    bool found = false;
    for (size_t i = 0; live && i < n && !found; i++)
        found = live[i].stamp == c->stamp && live[i].ptr <= c->ptr &&
                c->ptr + c->size <= live[i].ptr + live[i].size;
    free(live);
    return found;
}

/* Queues the chunk with an event after it when the move waits. */
static bool gs_submit_chunk(struct gs_mover *mv, struct gs_chunk *c, CUstream stream)
{
    CUresult r = CUDA_SUCCESS;
    c->done = NULL;
    if (mv->wait)
        r = GS_REAL(cuEventCreate, GS_LEGACY)(&c->done, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) {
        c->done = NULL;
        gs_refused(mv, "cuEventCreate", c, r);
        return false;
    }
    const char *what;
    if ((r = gs_move_one(mv, c, stream, &what)) != CUDA_SUCCESS) {
        if (!gs_still_allocated(mv->device, c)) {
            gs_debug("%zu bytes at %#llx were freed while they moved: skipped", c->size,
                     (unsigned long long)c->ptr);
            if (c->done)
                GS_REAL(cuEventDestroy_v2, GS_LEGACY)(c->done);
            c->done = NULL;
            c->freed = true;
            mv->freed_bytes += c->size;
            return true;
        }
        gs_refused(mv, what, c, r);
        return false;
    }
    if (c->done && (r = GS_REAL(cuEventRecord, GS_LEGACY)(c->done, stream)) != CUDA_SUCCESS) {
        gs_refused(mv, "cuEventRecord", c, r);
        return false;
    }
    return true;
}

static void gs_arrived(struct gs_mover *mv, const struct gs_chunk *c)
{
    if (c->cold) { /* outside the oldest-first order; counted the first time it leaves */
        if (c->counted) {
            mv->result.bytes += c->size;
            gs_mig.out[mv->device].bytes += c->size;
            gs_mig.out[mv->device].cold += c->size;
        }
        gs_cold_sent_away(mv->device, c->stamp);
        return;
    }
    mv->result.bytes += c->size;
    if (!mv->to_host)
        return;
    if (c->host) { /* room for it was made before the move began */
        struct gs_staged *st = &gs_mig.staged[mv->device];
        st->chunks[st->count++] = *c;
        mv->copied_bytes += c->size;
    }
    struct gs_moved_out *out = &gs_mig.out[mv->device];
    out->bytes += c->size;
    if (mv->in_order) {
        out->stamp = c->stamp;
        out->offset = c->end;
    }
}

/* Whether converted memory may go by copy: the driver must have discards (CUDA 12.8). */
static bool gs_copy_usable(void)
{
    return gs_config()->move_copy && gs_config()->staging_max > 0 && gs_driver_version() >= 12080;
}

static double gs_migrate_bps(int device)
{
    return gs_mig.migrate_bps[device] > 0 ? gs_mig.migrate_bps[device] : GS_MIGRATE_PRIOR_BPS;
}

/* A move out that went all by the driver's migration, and large enough to say, gives its rate. */
static void gs_learn_migration(const struct gs_mover *mv)
{
    if (mv->copied_bytes == 0 && !mv->result.failed && mv->result.bytes >= GS_MIGRATE_SAMPLE)
        gs_mig.migrate_bps[mv->device] =
            (double)mv->result.bytes * 1e6 /
            (double)(mv->result.elapsed_us ? mv->result.elapsed_us : 1);
}

/* Gives the run's converted chunks staging memory, all of it pinned before the first copy, and
 * room in the staged list; those that get none migrate: when the host would not give it, or
 * getting it ready would take longer than migrating them. Inside the run's context. */
static void gs_stage(struct gs_mover *mv, struct gs_chunk *chunks, size_t n)
{
    struct gs_staged *st = &gs_mig.staged[mv->device];
    size_t *sizes = gs_copy_usable() ? malloc(n * sizeof *sizes) : NULL;
    size_t count = 0;
    for (size_t i = 0; sizes && i < n; i++)
        if (chunks[i].converted && !chunks[i].cold)
            sizes[count++] = chunks[i].size;
    if (count > 0 && st->count + count > st->cap) {
        size_t cap = st->count + count + 64;
        struct gs_chunk *grown = realloc(st->chunks, cap * sizeof *grown);
        if (grown == NULL)
            count = 0;
        else {
            st->chunks = grown;
            st->cap = cap;
        }
    }
    if (count > 0) {
        size_t ahead = gs_staging_ready_for(mv->device, sizes, count);
        for (size_t i = 0; i < ahead; i++)
            mv->ready_bytes += sizes[i];
        size_t ready = gs_staging_prepare(mv->device, sizes, count, gs_migrate_bps(mv->device));
        if (ready < count)
            gs_debug("staging memory for %zu of %zu pieces moving off device %d: the driver "
                     "migrates the rest (about %.1f GB/s)", ready, count, mv->device,
                     gs_migrate_bps(mv->device) / 1e9);
        for (size_t i = 0, taken = 0; i < n && taken < ready; i++)
            if (chunks[i].converted && !chunks[i].cold) {
                if ((chunks[i].host = gs_staging_take(mv->device, chunks[i].size)) == NULL)
                    break; /* the host gave what it could: the rest migrates */
                taken++;
            }
    }
    free(sizes);
}

/* One context's run of chunks, inside that context: all queued, then awaited in order. The
 * move's last arrival is reported by the frame that says it is done, which follows at once. */
static void gs_move_run(struct gs_mover *mv, struct gs_chunk *chunks, size_t n,
                        const CUstream *streams, int stream_count, bool last_run)
{
    if (mv->to_host) {
        /* Faulting in and pinning new staging memory is the host's cost, paid once by each
         * program: the clock counts the link's time, which the scheduler learns its rates from. */
        int64_t staging = gs_now_ns();
        gs_stage(mv, chunks, n);
        mv->began_ns += gs_now_ns() - staging;
    }
    size_t queued = 0;
    while (queued < n && gs_submit_chunk(mv, &chunks[queued], streams[queued % stream_count]))
        queued++;
    if (queued < n && chunks[queued].done)
        GS_REAL(cuEventDestroy_v2, GS_LEGACY)(chunks[queued].done);
    for (size_t i = 0; i < queued; i++) {
        if (chunks[i].freed)
            continue;
        bool arrived = !mv->wait || (!mv->unusable && gs_wait_chunk(mv, &chunks[i]));
        if (chunks[i].done)
            GS_REAL(cuEventDestroy_v2, GS_LEGACY)(chunks[i].done);
        mv->in_order = mv->in_order && arrived;
        if (arrived) {
            gs_arrived(mv, &chunks[i]);
            if (!last_run || i + 1 < queued)
                gs_tick(mv);
        }
    }
    if (queued < n)
        mv->in_order = false;
}

/* Moves the chunks, a run of one context at a time; a context gone or unusable is skipped (its
 * memory is gone, or page faults move it). */
static void gs_move_chunks(struct gs_mover *mv, struct gs_chunk *chunks, size_t n)
{
    mv->began_ns = mv->reported_ns = gs_now_ns();
    mv->in_order = true;
    for (size_t i = 0; i < n && !mv->result.failed;) {
        size_t end = i;
        while (end < n && chunks[end].ctx == chunks[i].ctx)
            end++;
        CUstream streams[GS_MAX_MOVE_STREAMS];
        int count = (int)gs_config()->move_streams;
        if (chunks[i].ctx != NULL && gs_contexts_enter(chunks[i].ctx, streams, &count)) {
            gs_move_run(mv, chunks + i, end - i, streams, count, end == n);
            gs_contexts_leave();
        } else {
            mv->in_order = false;
        }
        i = end;
    }
    mv->result.elapsed_us = (uint64_t)(gs_now_ns() - mv->began_ns) / 1000;
    mv->result.waited = mv->wait;
}

/* The chunks a move prefetches, in order. */
struct gs_plan {
    struct gs_chunk *chunks;
    size_t count, cap;
    size_t ranges;
};

/* Appends [from, to) of the allocation as chunks; false when out of memory for the list. */
static bool gs_plan_add(struct gs_plan *plan, const struct gs_managed *a, uint64_t from,
                        uint64_t to)
{
    for (uint64_t at = from; at < to;) {
        if (plan->count == plan->cap) {
            size_t more = plan->cap ? plan->cap * 2 : 64;
            struct gs_chunk *grown = realloc(plan->chunks, more * sizeof *grown);
            if (grown == NULL)
                return false; /* move what the plan holds */
            plan->chunks = grown;
            plan->cap = more;
        }
        uint64_t size = to - at < GS_MOVE_CHUNK ? to - at : GS_MOVE_CHUNK;
        plan->chunks[plan->count++] = (struct gs_chunk){
            a->ptr + at, size, a->ctx, a->stamp, at + size, a->converted, NULL, NULL, false,
            false, false};
        at += size;
    }
    plan->ranges++;
    return true;
}

/* The device's managed allocations (the program's own too when own_too), sorted; NULL when
 * there are none. */
static struct gs_managed *gs_sorted(int device, bool own_too,
                                    int (*order)(const void *, const void *), size_t *n)
{
    *n = 0;
    struct gs_managed *list = gs_device_ok(device) ? gs_memory_managed(device, own_too, n) : NULL;
    if (list)
        qsort(list, *n, sizeof *list, order);
    return list;
}

/* Runs the plan and frees it. */
static void gs_plan_run(struct gs_mover *mv, struct gs_plan *plan)
{
    gs_move_chunks(mv, plan->chunks, plan->count);
    free(plan->chunks);
    mv->result.ranges = plan->ranges;
}

static uint64_t gs_round_up(uint64_t bytes)
{
    if (bytes > UINT64_MAX - GS_MOVE_ALIGN)
        return UINT64_MAX; /* GS_EVICT_ALL, or as good as */
    return (bytes + GS_MOVE_ALIGN - 1) / GS_MOVE_ALIGN * GS_MOVE_ALIGN;
}

static uint64_t gs_staged_bytes(int device)
{
    const struct gs_staged *st = &gs_mig.staged[device];
    uint64_t bytes = 0;
    for (size_t i = 0; i < st->count; i++)
        bytes += st->chunks[i].size;
    return bytes;
}

/* The device's converted memory that is not in staging memory now: the most a move out can
 * still need staging memory for. */
static uint64_t gs_unstaged(int device)
{
    size_t n;
    struct gs_managed *list = gs_memory_managed(device, false, &n);
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        if (!gs_cold_is(device, list[i].stamp)) /* never staged */
            bytes += list[i].size;
    free(list);
    uint64_t staged = gs_staged_bytes(device);
    return bytes > staged ? bytes - staged : 0;
}

/* The pool kept for the device: what may have to leave it, and one move's piece more, since a
 * piece never straddles two pinned blocks (a block's tail may stay unused). */
static uint64_t gs_pool_target(int device)
{
    uint64_t bytes = gs_mig.may_leave[device];
    return bytes == 0 ? 0 : bytes > UINT64_MAX - GS_MOVE_CHUNK ? UINT64_MAX : bytes + GS_MOVE_CHUNK;
}

/* Cold memory moves whole, by migration. One that left since it became cold goes first, whatever
 * was asked (`away`): the driver moves only the pages the program faulted back, the rest costs a
 * look at its page tables, and what came back is the driver's to know, so it counts toward
 * neither `left` nor the bytes moved. One still on the device since its clearing goes last and
 * only while `left` is not met by the rest (`!away`), counted: all of it crosses the link then,
 * by the driver's first migration, which ran at 3.2-14 GB/s on an H200 (a server's 24 GB cache
 * held a request 2-9 s) where the memory it would spare goes by copy at 52. Returns the cold
 * bytes planned. */
static uint64_t gs_plan_cold(struct gs_plan *plan, int device, const struct gs_managed *list,
                             size_t n, uint64_t *left, bool away)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < n && (away || *left > 0); i++) {
        if (!gs_cold_is(device, list[i].stamp) || gs_cold_away(device, list[i].stamp) != away)
            continue;
        size_t first = plan->count;
        if (!gs_plan_add(plan, &list[i], 0, list[i].size))
            break;
        for (size_t c = first; c < plan->count; c++) {
            plan->chunks[c].cold = true;
            plan->chunks[c].counted = !away;
        }
        if (!away)
            *left -= list[i].size < *left ? list[i].size : *left;
        bytes += list[i].size;
    }
    return bytes;
}

/* Whether the host (`room`: gs_host_room's) keeps room for another move as large as the
 * device's pool target once `more` is pinned too. Staging memory held for a move that has not
 * come is host memory that the driver's migration of another program's move needs where that
 * move cannot be staged: on an H200 under a cgroup limit that two programs fit without
 * staging, one was killed while the holder kept its pool at its target (docs/benchmarks.md,
 * tenth run). */
static bool gs_room_beside_pool(int device, uint64_t room, uint64_t more)
{
    return room == UINT64_MAX || (room >= more && room - more >= gs_pool_target(device));
}

/* Staging memory for what may still have to leave the device (may_leave, less what is staged
 * already, at most the converted memory still there) is made ready in the background, rather
 * than a move at a time while somebody waits for the move. Never all of the program's memory
 * for its own sake: only the part the scheduler expects to overflow the device, and only while
 * the host keeps room for as much again (else the move stages what it can when it comes). */
static void gs_prepare_ahead(int device)
{
    uint64_t staged = gs_staged_bytes(device), unstaged = gs_unstaged(device);
    uint64_t target = gs_pool_target(device);
    uint64_t want = target > staged ? target - staged : 0;
    if (want > unstaged)
        want = unstaged;
    if (gs_copy_usable() && want > 0 && gs_room_beside_pool(device, gs_host_room(), want))
        gs_staging_prepare_ahead(device, want, gs_wake);
}

/* Inside any of the device's contexts (pinning and unpinning need one); false when it has none. */
static bool gs_enter_device(int device)
{
    size_t n;
    struct gs_managed *list = gs_memory_managed(device, false, &n);
    CUcontext ctx = list ? list[0].ctx : NULL;
    free(list);
    return ctx && gs_contexts_enter(ctx, NULL, NULL);
}


/* Oldest first: libnvs approximates "recently used" by "recently allocated", so what stays on
 * the device is what the program most likely touches first when it returns, and it comes back
 * first too (gs_migrate_in goes newest first). The program's own managed memory goes too: the
 * next holder needs the room whatever made it. */
struct gs_move gs_migrate_out(int device, uint64_t bytes, const struct gs_move_progress *progress)
{
    struct gs_mover mv = {.device = device, .to_host = true, .wait = true, .progress = progress};
    size_t n;
    struct gs_managed *list = gs_sorted(device, true, gs_oldest_first, &n);
    if (list == NULL)
        return mv.result;
    const struct gs_moved_out *out = &gs_mig.out[device];
    struct gs_plan plan = {0};
    uint64_t left = gs_round_up(bytes);
    gs_cold_refresh(device, list, n);
    uint64_t cold = gs_plan_cold(&plan, device, list, n, &left, true);
    for (size_t i = 0; i < n && left > 0; i++) {
        if (gs_cold_is(device, list[i].stamp))
            continue;
        uint64_t from = list[i].stamp < out->stamp    ? list[i].size
                        : list[i].stamp == out->stamp ? out->offset
                                                      : 0;
        if (from >= list[i].size)
            continue; /* out already */
        uint64_t take = list[i].size - from < left ? list[i].size - from : left;
        if (!gs_plan_add(&plan, &list[i], from, from + take))
            break;
        left -= take;
    }
    cold += gs_plan_cold(&plan, device, list, n, &left, false);
    free(list);
    gs_plan_run(&mv, &plan);
    gs_learn_migration(&mv);
    if (!gs_mig.told[device] && out->bytes > gs_mig.may_leave[device]) /* may come again */
        gs_mig.may_leave[device] = out->bytes;
    gs_prepare_ahead(device);
    gs_debug("moved %llu bytes (%zu ranges, oldest first) of managed memory to the host from "
             "device %d in %llu us%s; %llu bytes out since the last grant; %llu bytes of cold "
             "memory migrated (what page faults brought back, or what the rest left short); "
             "by copy %llu bytes, %llu of them into staging memory ready before the move",
             (unsigned long long)mv.result.bytes, mv.result.ranges, device,
             (unsigned long long)mv.result.elapsed_us, mv.result.failed ? ", then failed" : "",
             (unsigned long long)out->bytes, (unsigned long long)cold,
             (unsigned long long)mv.copied_bytes,
             (unsigned long long)(mv.ready_bytes < mv.copied_bytes ? mv.ready_bytes
                                                                   : mv.copied_bytes));
    return mv.result;
}

static int gs_by_stamp(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = ((const struct gs_managed *)y)->stamp;
    return a < b ? -1 : a > b ? 1 : 0;
}

/* Copies the device's staged chunks back, into the allocations that still exist (a freed one's
 * address may belong to a newer allocation now), and frees the staging memory for reuse. */
static struct gs_move gs_restore(int device, const struct gs_move_progress *progress)
{
    struct gs_mover mv = {.device = device, .wait = true, .restore = true, .progress = progress};
    struct gs_staged *st = &gs_mig.staged[device];
    if (st->count == 0)
        return mv.result;
    size_t n, kept = 0;
    struct gs_managed *live = gs_sorted(device, false, gs_oldest_first, &n);
    for (size_t i = 0; i < st->count; i++)
        if (live && bsearch(&st->chunks[i].stamp, live, n, sizeof *live, gs_by_stamp))
            st->chunks[kept++] = st->chunks[i];
    free(live);
    uint64_t staged = 0;
    for (size_t i = 0; i < kept; i++)
        staged += st->chunks[i].size;
    gs_move_chunks(&mv, st->chunks, kept);
    mv.result.ranges = kept;
    if (mv.result.bytes + mv.freed_bytes < staged)
        gs_warn("only %llu of %llu bytes moved off device %d came back from staging memory: the "
                "rest of what the program had there is lost",
                (unsigned long long)mv.result.bytes, (unsigned long long)staged, device);
    st->count = 0;
    gs_staging_reset(device);
    return mv.result;
}

struct gs_move gs_migrate_in(int device, const struct gs_move_progress *progress)
{
    if (!gs_device_ok(device))
        return (struct gs_move){0};
    struct gs_move back = gs_restore(device, progress);
    struct gs_mover mv = {
        .device = device, .wait = gs_config()->swap_in_wait, .progress = progress};
    /* Newest first, what fits in 15/16 of the device (room to work); the program's own managed
     * memory stays where it is, it may be meant for the host. What came back from staging is
     * there already: its prefetch costs nothing. */
    size_t n;
    struct gs_managed *list = gs_sorted(device, false, gs_newest_first, &n);
    struct gs_plan plan = {0};
    uint64_t budget = gs_memory_device_total(device) / 16 * 15, left_out = 0, cold = 0;
    gs_cold_refresh(device, list, n);
    for (size_t i = 0; i < n; i++) {
        if (gs_cold_is(device, list[i].stamp))
            cold += list[i].size; /* page faults bring what the program uses of it */
        else if (list[i].size > budget)
            left_out += list[i].size;
        else if (gs_plan_add(&plan, &list[i], 0, list[i].size))
            budget -= list[i].size;
        else
            break;
    }
    free(list);
    gs_plan_run(&mv, &plan);
    gs_debug("prefetching %llu bytes (%zu allocations, newest first) back to device %d: %s in "
             "%llu us%s; %llu bytes over 15/16 of the device and %llu bytes of cold memory left "
             "to page faults; %llu bytes copied back from staging memory in %llu us",
             (unsigned long long)mv.result.bytes, mv.result.ranges, device,
             mv.wait ? "arrived" : "submitted", (unsigned long long)mv.result.elapsed_us,
             mv.result.failed ? ", then failed" : "", (unsigned long long)left_out,
             (unsigned long long)cold, (unsigned long long)back.bytes,
             (unsigned long long)back.elapsed_us);
    mv.result.bytes += back.bytes;
    mv.result.elapsed_us += back.elapsed_us;
    mv.result.ranges += back.ranges;
    mv.result.failed = mv.result.failed || back.failed;
    mv.result.waited = mv.result.waited || back.ranges > 0;
    return mv.result;
}

void gs_migrate_prepare(int device, uint64_t bytes)
{
    if (!gs_device_ok(device))
        return;
    gs_mig.may_leave[device] = bytes; /* a pool beyond it goes back at gs_migrate_relieve */
    gs_mig.told[device] = true;
    gs_prepare_ahead(device);
}

bool gs_migrate_prepared(void)
{
    for (int d = 0; d < GS_MAX_DEVICES; d++)
        if (gs_staging_has_prepared(d))
            return true;
    return false;
}

void gs_migrate_pin_prepared(void)
{
    for (int d = 0; d < GS_MAX_DEVICES; d++) {
        if (!gs_staging_has_prepared(d))
            continue;
        if (gs_enter_device(d)) {
            if (gs_staging_adopt(d))
                gs_wake(); /* the next piece on the next turn of the client's loop */
            gs_contexts_leave();
        }
        /* Asked for while this was prepared, the program's memory may have grown since. */
        if (!gs_staging_preparing(d))
            gs_prepare_ahead(d);
    }
}

/* Whether the device holds staging memory (pinned or prepared) that nothing waits in. */
static bool gs_idle_pool(int device)
{
    return gs_mig.staged[device].count == 0 &&
           (gs_staging_pinned(device) > 0 || gs_staging_has_prepared(device));
}

/* Whether some of the device's memory waits in its pool while blocks past it hold nothing: a
 * pool is sized to the most a move may ask, and what a move did not ask stays empty until the
 * pool is reset. */
static bool gs_spare_pool(int device)
{
    return gs_mig.staged[device].count > 0 && gs_staging_spare(device) > 0;
}

bool gs_migrate_staging_unused(void)
{
    for (int d = 0; d < GS_MAX_DEVICES; d++)
        if (gs_idle_pool(d) || gs_spare_pool(d))
            return true;
    return false;
}

void gs_migrate_relieve(void)
{
    uint64_t room;
    bool pressed = gs_host_pressed(&room);
    for (int d = 0; d < GS_MAX_DEVICES; d++) {
        /* A pool that something waits in gives back its empty blocks only under pressure: on
         * a GPU the driver's migration of what a pool could not take needs host memory then
         * (on an H200, two programs under a cgroup limit they fit without staging were both
         * killed while such blocks stayed pinned). A pool nothing waits in goes back whole as
         * soon as the host has no room for another move as large beside it. */
        bool idle = gs_idle_pool(d);
        if (!idle && !(pressed && gs_spare_pool(d)))
            continue;
        bool crowded = idle && !gs_room_beside_pool(d, room, 0);
        uint64_t keep = pressed || crowded ? 0 : gs_pool_target(d);
        bool beyond = gs_staging_pinned(d) > keep || (keep == 0 && gs_staging_has_prepared(d));
        if (!beyond || !gs_enter_device(d))
            continue;
        uint64_t given = gs_staging_trim(d, keep);
        gs_contexts_leave();
        if (pressed || crowded)
            gs_debug("host memory %s: %llu MiB of staging memory of device %d given back",
                     pressed ? "runs short" : "has no room for another move as large",
                     (unsigned long long)(given >> 20), d);
    }
}

bool gs_migrate_staged(int device)
{
    return gs_device_ok(device) && gs_mig.staged[device].count > 0;
}

void gs_migrate_restore_all(void)
{
    for (int d = 0; d < GS_MAX_DEVICES; d++) {
        if (!gs_migrate_staged(d))
            continue;
        struct gs_move back = gs_restore(d, NULL);
        gs_debug("copied %llu bytes back to device %d from staging memory in %llu us",
                 (unsigned long long)back.bytes, d, (unsigned long long)back.elapsed_us);
    }
}

/* Fresh managed memory gets its pages on the device by page faults at first touch: 13 GB/s on
 * an H100, where cudaMalloc memory is simply there and a prefetch of fresh pages runs at about
 * 270 GB/s. Queued on the legacy stream, so that the program's work queued after the allocation
 * finds the pages there. Only what fits in 15/16 of the free memory: past that, pages of this
 * process or another would have to leave for it. */
void gs_migrate_populate(CUdeviceptr ptr, size_t size, int device)
{
    /* A capture running would record the prefetch, or be broken by work on the legacy stream. */
    if (!gs_config()->populate || !gs_device_ok(device) || size == 0 || gs_capture_active())
        return;
    if (!gs_gate_is_open(device)) {
        atomic_store(&gs_unpopulated[device], true);
        return;
    }
    size_t free_bytes = 0, total = 0;
    if (GS_REAL(cuMemGetInfo_v2, GS_LEGACY)(&free_bytes, &total) != CUDA_SUCCESS ||
        size > free_bytes / 16 * 15)
        return;
    struct gs_chunk c = {.ptr = ptr, .size = size};
    CUresult r = gs_prefetch(&c, device, false, NULL);
    if (r != CUDA_SUCCESS)
        gs_debug("new allocation of %zu bytes not prefetched to device %d (CUDA error %d): page "
                 "faults bring it", size, device, (int)r);
}

bool gs_migrate_unpopulated(int device)
{
    return gs_device_ok(device) && atomic_load(&gs_unpopulated[device]);
}

uint64_t gs_migrate_moved_out(int device)
{
    return gs_device_ok(device) ? gs_mig.out[device].bytes - gs_mig.out[device].cold : 0;
}

uint64_t gs_migrate_left_on_host(int device)
{
    return gs_device_ok(device) ? gs_mig.out[device].cold : 0;
}

void gs_migrate_granted(int device)
{
    if (gs_device_ok(device)) {
        gs_mig.out[device] = (struct gs_moved_out){0, 0, 0, 0};
        atomic_store(&gs_unpopulated[device], false);
    }
}

void gs_migrate_after_fork_child(void)
{
    memset(&gs_mig, 0, sizeof gs_mig);
    for (int d = 0; d < GS_MAX_DEVICES; d++)
        atomic_store(&gs_unpopulated[d], false);
    gs_staging_after_fork_child();
    gs_cold_after_fork_child();
}
