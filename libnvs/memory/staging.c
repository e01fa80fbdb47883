/* The pinned staging pools. A pool is a list of pinned blocks and a cursor; a piece never
 * straddles two blocks, so the tail of a block may go unused until the next reset. */
#include "memory/staging.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "cuda/impl.h"
#include "memory/host_room.h"
#include "memory/memory.h"

#define GS_STAGING_MAX_BLOCKS 1024
/* Growing on the spot, where a prepare did not foresee a take: at least this much at once. */
#define GS_STAGING_GROW (64ull << 20)
#define GS_FAULT_THREADS 8
#define GS_STAGING_ALIGN (2ull << 20)
/* Memory is faulted in ahead a piece (a move's chunk) at a time, and pinned in pieces of about
 * GS_PIN_STEP_S at the measured rate (the smallest until measured), so that the client thread
 * hears the scheduler between pieces, and a move that waits for them soon learns whether
 * waiting pays: on an H200 running four notebooks 1 GiB once took 1 s to pin, where alone it
 * takes 35 ms. */
#define GS_PIN_STEP_MIN (256ull << 20)
#define GS_PIN_STEP_MAX (1ull << 30)
#define GS_PIN_STEP_S 0.1
/* How fast this host faults in and pins, until measured: an H100 host with no other program
 * doing the same (README.md, "Out by copy"). Smaller pieces time the calls, not the host. */
#define GS_FAULT_PRIOR_BPS 13.7e9
#define GS_PIN_PRIOR_BPS 29.5e9
#define GS_RATE_SAMPLE (64ull << 20)

struct gs_block {
    char *base;
    size_t size;
};

struct gs_pool {
    struct gs_block blocks[GS_STAGING_MAX_BLOCKS];
    size_t count;
    size_t block, offset; /* the cursor: where the next piece is taken */
    uint64_t pinned;
    double pin_bps; /* as last measured; 0 until then */
    /* Host memory faulted in ahead by a thread of its own, pinned by the client thread (pinning
     * needs a CUDA context). Under mu: */
    pthread_mutex_t mu;
    pthread_cond_t done;
    bool preparing;
    bool awaited; /* a move waits for what it prepares: its claims are urgent */
    struct gs_block ready;
    bool pin_refused; /* the driver refused to pin prepared memory: it is given back */
    double fault_bps; /* as last measured, by either thread */
};

/* Owned by the client thread; reset after fork (the child never had the pins). */
static struct gs_pool *gs_pools[GS_MAX_DEVICES];

/* Host memory staging holds in this process, all devices together: faulted in (or about to be)
 * and not given back yet. Both threads that fault memory in count it here first. */
static _Atomic uint64_t gs_taken;
static atomic_bool gs_short_said;

/* How much of `size` more bytes of host memory may be faulted in for staging, in whole
 * GS_STAGING_ALIGN units, at least `least` (else none): within GEMSHARE_STAGING_MAX_MIB and
 * within what the host and the process's memory cgroups have free, read now, before a page is
 * touched (the OOM killer takes a program that faults in past its cgroup's limit, without a
 * word). What it returns is counted as taken. What does not fit the driver migrates instead,
 * which takes host pages only for what is out, and only while it is; one stderr line says so. */
static size_t gs_may_take(int device, size_t size, size_t least)
{
    uint64_t cap = gs_config()->staging_max, taken = atomic_load(&gs_taken);
    uint64_t room = gs_host_room();
    uint64_t allowed = cap > taken ? cap - taken : 0;
    bool capped = allowed < size;
    if (room < allowed)
        allowed = room;
    if (allowed >= size)
        allowed = size;
    allowed = allowed / GS_STAGING_ALIGN * GS_STAGING_ALIGN;
    if (allowed >= least && allowed > 0) {
        atomic_fetch_add(&gs_taken, allowed);
        if (allowed == size)
            return allowed;
    }
    if (!atomic_exchange(&gs_short_said, true)) {
        if (capped)
            gs_warn("staging memory for moves off device %d stops at %llu MiB "
                    "(GEMSHARE_STAGING_MAX_MIB=%llu): the driver migrates the rest",
                    device, (unsigned long long)(taken >> 20),
                    (unsigned long long)(cap >> 20));
        else
            gs_warn("host memory is short for staging moves off device %d (%s of %llu MiB, "
                    "%llu MiB of staging memory held): the driver migrates the rest",
                    device, gs_host_room_limit_is_cgroup() ? "memory cgroup limit" : "host memory",
                    (unsigned long long)(gs_host_room_limit() >> 20),
                    (unsigned long long)(taken >> 20));
    }
    gs_debug("no staging memory for %zu MiB more off device %d: %llu MiB held, %llu MiB may be "
             "taken", size >> 20, device, (unsigned long long)(taken >> 20),
             (unsigned long long)((room == UINT64_MAX ? 0 : room) >> 20));
    return allowed >= least && allowed > 0 ? (size_t)allowed : 0;
}

/* Host memory staging had taken is unmapped. */
static void gs_give_back(char *base, size_t size)
{
    munmap(base, size);
    atomic_fetch_sub(&gs_taken, size);
}

struct gs_fault_job {
    char *from;
    size_t size;
};

/* The kernel hands out zeroed pages one fault at a time: several threads get them faster than
 * cuMemHostRegister alone (an H100 host: 13.7 GB/s with 8 threads, then 29.5 GB/s to pin). */
static void *gs_fault_in(void *arg)
{
    const struct gs_fault_job *job = arg;
    long page = sysconf(_SC_PAGESIZE);
    for (size_t off = 0; off < job->size; off += (size_t)page)
        ((volatile char *)job->from)[off] = 0;
    return NULL;
}

static void gs_fault_in_parallel(char *base, size_t size)
{
    pthread_t threads[GS_FAULT_THREADS];
    struct gs_fault_job jobs[GS_FAULT_THREADS];
    bool started[GS_FAULT_THREADS] = {false};
    size_t share = (size / GS_FAULT_THREADS + 4095) & ~(size_t)4095;
    for (int i = 0; i < GS_FAULT_THREADS && (size_t)i * share < size; i++) {
        size_t from = (size_t)i * share;
        jobs[i] = (struct gs_fault_job){base + from, size - from < share ? size - from : share};
        started[i] = pthread_create(&threads[i], NULL, gs_fault_in, &jobs[i]) == 0;
        if (!started[i])
            gs_fault_in(&jobs[i]);
    }
    for (int i = 0; i < GS_FAULT_THREADS; i++)
        if (started[i])
            pthread_join(threads[i], NULL);
}

static struct gs_pool *gs_pool(int device)
{
    if (device < 0 || device >= GS_MAX_DEVICES)
        return NULL;
    if (gs_pools[device] == NULL && (gs_pools[device] = calloc(1, sizeof *gs_pools[device]))) {
        pthread_mutex_init(&gs_pools[device]->mu, NULL);
        pthread_cond_init(&gs_pools[device]->done, NULL);
        gs_pools[device]->fault_bps = GS_FAULT_PRIOR_BPS;
    }
    return gs_pools[device];
}

/* Fresh host memory, not faulted in yet; NULL when the host has none. `size` is a multiple of
 * GS_STAGING_ALIGN. The mapping starts on a huge-page boundary and asks for huge pages: where
 * the host allows them, one fault brings 2 MiB instead of 4 KiB (on an H200 host, 6 GiB
 * faulted in and pinned in 0.34 s instead of 0.92, and in 1.0 s instead of 1.8 while three
 * other programs did the same). */
static char *gs_map(size_t size)
{
    size_t span = size + GS_STAGING_ALIGN;
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *base = (char *)(((uintptr_t)raw + GS_STAGING_ALIGN - 1) &
                          ~(uintptr_t)(GS_STAGING_ALIGN - 1));
    size_t head = (size_t)(base - raw);
    if (head > 0)
        munmap(raw, head);
    if (span - head - size > 0)
        munmap(base + size, span - head - size);
    (void)madvise(base, size, MADV_HUGEPAGE); /* a hint: without it, small pages */
    return base;
}

/* The rate `bytes` in `ms` show, or `was` when they are too few to say. */
static double gs_rate(size_t bytes, int64_t ms, double was)
{
    return bytes < GS_RATE_SAMPLE ? was : (double)bytes * 1000.0 / (double)(ms > 0 ? ms : 1);
}

/* Faults the memory in and takes the pool's fault_bps from how long that took. */
static void gs_fault_in_timed(struct gs_pool *pool, char *base, size_t size)
{
    int64_t began = gs_now_ms();
    gs_fault_in_parallel(base, size);
    int64_t ms = gs_now_ms() - began;
    pthread_mutex_lock(&pool->mu);
    pool->fault_bps = gs_rate(size, ms, pool->fault_bps);
    pthread_mutex_unlock(&pool->mu);
    gs_debug("faulted in %zu MiB of host memory in %lld ms", size >> 20, (long long)ms);
}

static size_t gs_aligned(uint64_t bytes)
{
    return (size_t)((bytes + GS_STAGING_ALIGN - 1) / GS_STAGING_ALIGN * GS_STAGING_ALIGN);
}

/* Pins the mapped memory and adds it to the pool as a block; unmaps it on failure. */
static bool gs_pin(struct gs_pool *pool, int device, char *base, size_t size)
{
    if (pool->count == GS_STAGING_MAX_BLOCKS) {
        gs_give_back(base, size);
        return false;
    }
    int64_t began = gs_now_ms();
    CUresult r = GS_REAL(cuMemHostRegister_v2, GS_LEGACY)(base, size,
                                                          CU_MEMHOSTREGISTER_PORTABLE);
    if (r != CUDA_SUCCESS) {
        gs_give_back(base, size);
        gs_warn("cannot pin %zu MiB of host memory to stage moves off device %d (error %d); "
                "the driver migrates the memory instead",
                size >> 20, device, r);
        return false;
    }
    int64_t ms = gs_now_ms() - began;
    pool->blocks[pool->count++] = (struct gs_block){base, size};
    pool->pinned += size;
    pool->pin_bps = gs_rate(size, ms, pool->pin_bps);
    gs_debug("pinned %zu MiB more in %lld ms to stage moves off device %d (%llu MiB in all)",
             size >> 20, (long long)ms, device, (unsigned long long)(pool->pinned >> 20));
    return true;
}

/* Adds one pinned block of `size` bytes, or of as much as staging may take, at least `least`. */
static bool gs_grow(struct gs_pool *pool, int device, size_t size, size_t least)
{
    gs_host_claim_begin(true); /* a move waits for it */
    size = gs_may_take(device, gs_aligned(size), gs_aligned(least));
    char *base = size ? gs_map(size) : NULL;
    if (base)
        gs_fault_in_timed(pool, base, size);
    gs_host_claim_end(true);
    if (size == 0)
        return false;
    if (base == NULL) {
        atomic_fetch_sub(&gs_taken, size);
        gs_warn("no host memory to stage %zu MiB moved off device %d; the driver migrates it "
                "instead", size >> 20, device);
        return false;
    }
    return gs_pin(pool, device, base, size);
}

/* Pins what the background thread has prepared, at most `most` bytes of it, the rest left
 * ready for the next call; first waits, while it prepares more, until `wanted` bytes are
 * ready. Returns the bytes pinned. After the driver refused to pin some, what was prepared is
 * given back unpinned. */
static size_t gs_adopt(struct gs_pool *pool, int device, size_t wanted, size_t most)
{
    pthread_mutex_lock(&pool->mu);
    while (pool->preparing && pool->ready.size < wanted) {
        pool->awaited = true;
        pthread_cond_wait(&pool->done, &pool->mu);
    }
    pool->awaited = false;
    struct gs_block piece = pool->ready;
    if (piece.size > most)
        piece.size = most;
    pool->ready = piece.size == pool->ready.size
                      ? (struct gs_block){0}
                      : (struct gs_block){pool->ready.base + piece.size,
                                          pool->ready.size - piece.size};
    bool refused = pool->pin_refused;
    pthread_mutex_unlock(&pool->mu);
    if (piece.base == NULL)
        return 0;
    if (refused) {
        gs_give_back(piece.base, piece.size);
        return 0;
    }
    if (gs_pin(pool, device, piece.base, piece.size))
        return piece.size;
    pthread_mutex_lock(&pool->mu);
    pool->pin_refused = true;
    pthread_mutex_unlock(&pool->mu);
    return 0;
}

/* How much to pin at once: about GS_PIN_STEP_S at the rate last measured, in whole chunks. */
static size_t gs_pin_step(const struct gs_pool *pool)
{
    double chunks = pool->pin_bps * GS_PIN_STEP_S / (double)GS_PIN_STEP_MIN;
    size_t most = GS_PIN_STEP_MAX / GS_PIN_STEP_MIN;
    return GS_PIN_STEP_MIN * (chunks >= (double)most ? most : chunks >= 1 ? (size_t)chunks : 1);
}

struct gs_ahead {
    struct gs_pool *pool;
    int device;
    size_t size;
    void (*prepared)(void);
};

/* Faults the memory in a piece at a time, each ready to be pinned as soon as it is: a move out
 * that comes meanwhile waits only for the pieces it needs. */
static void *gs_prepare_in_background(void *arg)
{
    struct gs_ahead *job = arg;
    struct gs_pool *pool = job->pool;
    char *base = gs_map(job->size);
    for (size_t done = 0; base && done < job->size;) {
        size_t step = job->size - done < GS_PIN_STEP_MIN ? job->size - done : GS_PIN_STEP_MIN;
        pthread_mutex_lock(&pool->mu);
        bool urgent = pool->awaited;
        pthread_mutex_unlock(&pool->mu);
        gs_host_claim_begin(urgent);
        size_t allowed = gs_may_take(job->device, step, GS_STAGING_ALIGN);
        if (allowed > 0)
            gs_fault_in_timed(pool, base + done, allowed);
        gs_host_claim_end(urgent);
        if (allowed < step) { /* what is past it was never touched */
            munmap(base + done + allowed, job->size - done - allowed);
            job->size = done + allowed;
            if ((step = allowed) == 0)
                break;
        }
        pthread_mutex_lock(&pool->mu);
        if (pool->ready.base == NULL)
            pool->ready = (struct gs_block){base + done, step};
        else
            pool->ready.size += step; /* the pieces are contiguous: taken from the front */
        done += step;
        pool->preparing = done < job->size;
        pthread_cond_broadcast(&pool->done);
        pthread_mutex_unlock(&pool->mu);
        job->prepared();
    }
    pthread_mutex_lock(&pool->mu); /* done, cut short, or nothing mapped */
    pool->preparing = false;
    pthread_cond_broadcast(&pool->done);
    pthread_mutex_unlock(&pool->mu);
    free(job);
    return NULL;
}

/* Bytes that can be taken from the cursor on without growing, each block's tail counted whole. */
static uint64_t gs_room(const struct gs_pool *pool)
{
    uint64_t room = 0;
    for (size_t b = pool->block; b < pool->count; b++)
        room += pool->blocks[b].size - (b == pool->block ? pool->offset : 0);
    return room;
}

void gs_staging_prepare_ahead(int device, uint64_t bytes, void (*prepared)(void))
{
    struct gs_pool *pool = gs_pool(device);
    uint64_t room = pool ? gs_room(pool) : UINT64_MAX;
    if (room >= bytes)
        return;
    pthread_mutex_lock(&pool->mu);
    bool busy = pool->preparing || pool->ready.base != NULL || pool->pin_refused;
    struct gs_ahead *job = busy ? NULL : malloc(sizeof *job);
    if (job) {
        *job = (struct gs_ahead){pool, device, gs_aligned(bytes - room), prepared};
        pthread_t thread;
        pool->preparing = pthread_create(&thread, NULL, gs_prepare_in_background, job) == 0;
        if (pool->preparing)
            pthread_detach(thread);
        else
            free(job);
    }
    pthread_mutex_unlock(&pool->mu);
}

bool gs_staging_adopt(int device)
{
    struct gs_pool *pool = device >= 0 && device < GS_MAX_DEVICES ? gs_pools[device] : NULL;
    size_t pinned = pool ? gs_adopt(pool, device, 0, gs_pin_step(pool)) : 0;
    if (pinned > 0) /* apart from what a move pins as it goes: what the hints asked for */
        gs_debug("pinned %zu MiB prepared ahead for moves off device %d", pinned >> 20, device);
    return gs_staging_has_prepared(device);
}

bool gs_staging_preparing(int device)
{
    struct gs_pool *pool = device >= 0 && device < GS_MAX_DEVICES ? gs_pools[device] : NULL;
    if (pool == NULL)
        return false;
    pthread_mutex_lock(&pool->mu);
    bool preparing = pool->preparing || pool->ready.base != NULL;
    pthread_mutex_unlock(&pool->mu);
    return preparing;
}

bool gs_staging_has_prepared(int device)
{
    struct gs_pool *pool = device >= 0 && device < GS_MAX_DEVICES ? gs_pools[device] : NULL;
    if (pool == NULL)
        return false;
    pthread_mutex_lock(&pool->mu);
    bool ready = pool->ready.base != NULL;
    pthread_mutex_unlock(&pool->mu);
    return ready;
}

/* How many of these pieces, taken in this order as gs_staging_take will, fit in the pool's
 * blocks; the ones after them would need more. */
static size_t gs_within_blocks(const struct gs_pool *pool, const size_t *sizes, size_t n)
{
    size_t block = pool->block, offset = pool->offset;
    for (size_t i = 0; i < n; i++) {
        while (block < pool->count && pool->blocks[block].size - offset < sizes[i]) {
            block++;
            offset = 0;
        }
        if (block == pool->count)
            return i;
        offset += sizes[i];
    }
    return n;
}

/* Whether pinning `bytes` more is quicker, at the rates last measured here, than the driver
 * migrating them at `migrate_bps`: what is faulted in already only needs pinning. A host where
 * every program prepares at once can get that slow: on an H200 running four notebooks, 5 GiB
 * took 2.5 s to fault in and 4.8 s to pin, where the driver's first migration out finds host
 * pages at about 3 GB/s. */
static bool gs_quicker_to_pin(struct gs_pool *pool, uint64_t bytes, double migrate_bps)
{
    pthread_mutex_lock(&pool->mu);
    uint64_t unfaulted = bytes > pool->ready.size ? bytes - pool->ready.size : 0;
    double fault_bps = pool->fault_bps;
    pthread_mutex_unlock(&pool->mu);
    double pin_bps = pool->pin_bps > 0 ? pool->pin_bps : GS_PIN_PRIOR_BPS;
    double seconds = (double)bytes / pin_bps + (double)unfaulted / fault_bps;
    return migrate_bps <= 0 || seconds <= (double)bytes / migrate_bps;
}

static uint64_t gs_total(const size_t *sizes, size_t n)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += sizes[i];
    return total;
}

size_t gs_staging_prepare(int device, const size_t *sizes, size_t n, double migrate_bps)
{
    struct gs_pool *pool = gs_pool(device);
    if (pool == NULL)
        return 0;
    /* A piece at a time, what was prepared ahead first (faulting in again beside the thread
     * would be slower), else a new block; each only while pinning the rest still looks quicker
     * than migrating it: each piece teaches the rates. */
    size_t fit = gs_within_blocks(pool, sizes, n);
    while (fit < n) {
        uint64_t more = gs_aligned(gs_total(sizes + fit, n - fit));
        if (!gs_quicker_to_pin(pool, more, migrate_bps))
            break;
        size_t step = more < gs_pin_step(pool) ? (size_t)more : gs_pin_step(pool);
        if (gs_adopt(pool, device, step, step) == 0 && !gs_grow(pool, device, step, sizes[fit]))
            break; /* the host gave what it could */
        fit = gs_within_blocks(pool, sizes, n);
    }
    return fit;
}

void *gs_staging_take(int device, size_t size)
{
    struct gs_pool *pool = gs_pool(device);
    if (pool == NULL || size == 0 || size > GS_STAGING_PIECE)
        return NULL;
    while (pool->block < pool->count &&
           pool->blocks[pool->block].size - pool->offset < size) {
        pool->block++;
        pool->offset = 0;
    }
    size_t grow = size > GS_STAGING_GROW ? size : GS_STAGING_GROW;
    if (pool->block == pool->count && !gs_grow(pool, device, grow, size))
        return NULL;
    char *at = pool->blocks[pool->block].base + pool->offset;
    pool->offset += size;
    return at;
}

void gs_staging_reset(int device)
{
    struct gs_pool *pool = gs_pool(device);
    if (pool)
        pool->block = pool->offset = 0;
}

size_t gs_staging_ready_for(int device, const size_t *sizes, size_t n)
{
    struct gs_pool *pool = device >= 0 && device < GS_MAX_DEVICES ? gs_pools[device] : NULL;
    return pool ? gs_within_blocks(pool, sizes, n) : 0;
}

/* Memory prepared ahead and not pinned yet is given back, unless the thread still prepares it. */
static uint64_t gs_drop_prepared(struct gs_pool *pool)
{
    pthread_mutex_lock(&pool->mu);
    struct gs_block ready = pool->preparing ? (struct gs_block){0} : pool->ready;
    if (ready.base)
        pool->ready = (struct gs_block){0};
    pthread_mutex_unlock(&pool->mu);
    if (ready.base)
        gs_give_back(ready.base, ready.size);
    return ready.size;
}

/* The first block no piece has been taken from since the last reset. */
static size_t gs_first_untaken(const struct gs_pool *pool)
{
    return pool->offset > 0 ? pool->block + 1 : pool->block;
}

uint64_t gs_staging_spare(int device)
{
    struct gs_pool *pool = device >= 0 && device < GS_MAX_DEVICES ? gs_pools[device] : NULL;
    uint64_t spare = 0;
    for (size_t b = pool ? gs_first_untaken(pool) : 0; pool && b < pool->count; b++)
        spare += pool->blocks[b].size;
    return spare;
}

uint64_t gs_staging_trim(int device, uint64_t keep)
{
    struct gs_pool *pool = device >= 0 && device < GS_MAX_DEVICES ? gs_pools[device] : NULL;
    if (pool == NULL)
        return 0;
    size_t untaken = gs_first_untaken(pool); /* the blocks before it hold what waits */
    uint64_t given = untaken == 0 && pool->pinned >= keep ? gs_drop_prepared(pool) : 0;
    while (pool->count > untaken && pool->pinned - pool->blocks[pool->count - 1].size >= keep) {
        struct gs_block *last = &pool->blocks[pool->count - 1];
        CUresult r = GS_REAL(cuMemHostUnregister, GS_LEGACY)(last->base);
        if (r != CUDA_SUCCESS) {
            gs_debug("staging memory of device %d not unpinned (error %d): kept", device, r);
            break;
        }
        gs_give_back(last->base, last->size);
        pool->pinned -= last->size;
        given += last->size;
        pool->count--;
    }
    if (given > 0)
        gs_debug("gave back %llu MiB of staging memory of device %d (%llu MiB kept)",
                 (unsigned long long)(given >> 20), device,
                 (unsigned long long)(pool->pinned >> 20));
    return given;
}

uint64_t gs_staging_pinned(int device)
{
    struct gs_pool *pool = device >= 0 && device < GS_MAX_DEVICES ? gs_pools[device] : NULL;
    return pool ? pool->pinned : 0;
}

void gs_staging_after_fork_child(void)
{
    /* The child's copies of the blocks are not pinned, and CUDA is unusable there anyway: it
     * keeps nothing (the pool structs leak, once per fork). */
    memset(gs_pools, 0, sizeof gs_pools);
    atomic_store(&gs_taken, 0);
    atomic_store(&gs_short_said, false);
    gs_host_room_after_fork_child();
}
