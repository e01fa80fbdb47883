/* The pinned staging pools. A pool is a list of pinned blocks and a cursor; a piece never
 * straddles two blocks, so the tail of a block may go unused until the next reset. */
#include "memory/staging.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/log.h"
#include "cuda/impl.h"
#include "memory/memory.h"

#define GS_STAGING_MAX_BLOCKS 1024
/* Growing on the spot, where a prepare did not foresee a take: at least this much at once. */
#define GS_STAGING_GROW (64ull << 20)
#define GS_FAULT_THREADS 8
#define GS_STAGING_ALIGN (2ull << 20)

struct gs_block {
    char *base;
    size_t size;
};

struct gs_pool {
    struct gs_block blocks[GS_STAGING_MAX_BLOCKS];
    size_t count;
    size_t block, offset; /* the cursor: where the next piece is taken */
    uint64_t pinned;
    /* Host memory faulted in ahead by a thread of its own, pinned by the client thread (pinning
     * needs a CUDA context). Under mu: */
    pthread_mutex_t mu;
    pthread_cond_t done;
    bool preparing;
    struct gs_block ready;
};

/* Owned by the client thread; reset after fork (the child never had the pins). */
static struct gs_pool *gs_pools[GS_MAX_DEVICES];

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
    }
    return gs_pools[device];
}

/* Fresh host memory with every page faulted in; NULL when the host has none. */
static char *gs_map_faulted(size_t size)
{
    char *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    gs_fault_in_parallel(base, size);
    return base;
}

/* Pins the mapped memory and adds it to the pool as a block; unmaps it on failure. */
static bool gs_pin(struct gs_pool *pool, int device, char *base, size_t size)
{
    if (pool->count == GS_STAGING_MAX_BLOCKS) {
        munmap(base, size);
        return false;
    }
    CUresult r = GS_REAL(cuMemHostRegister_v2, GS_LEGACY)(base, size,
                                                          CU_MEMHOSTREGISTER_PORTABLE);
    if (r != CUDA_SUCCESS) {
        munmap(base, size);
        gs_warn("cannot pin %zu MiB of host memory to stage moves off device %d (error %d); "
                "the driver migrates the memory instead",
                size >> 20, device, r);
        return false;
    }
    pool->blocks[pool->count++] = (struct gs_block){base, size};
    pool->pinned += size;
    gs_debug("pinned %zu MiB more to stage moves off device %d (%llu MiB in all)", size >> 20,
             device, (unsigned long long)(pool->pinned >> 20));
    return true;
}

/* Adds one pinned block of `size` bytes. */
static bool gs_grow(struct gs_pool *pool, int device, size_t size)
{
    char *base = gs_map_faulted(size);
    if (base == NULL) {
        gs_warn("no host memory to stage %zu MiB moved off device %d; the driver migrates it "
                "instead", size >> 20, device);
        return false;
    }
    return gs_pin(pool, device, base, size);
}

/* Pins what the background thread prepared, waiting for it first when `wait`. */
static void gs_adopt(struct gs_pool *pool, int device, bool wait)
{
    pthread_mutex_lock(&pool->mu);
    while (wait && pool->preparing)
        pthread_cond_wait(&pool->done, &pool->mu);
    struct gs_block ready = pool->ready;
    pool->ready = (struct gs_block){0};
    pthread_mutex_unlock(&pool->mu);
    if (ready.base)
        gs_pin(pool, device, ready.base, ready.size);
}

struct gs_ahead {
    struct gs_pool *pool;
    size_t size;
    void (*prepared)(void);
};

static void *gs_prepare_in_background(void *arg)
{
    struct gs_ahead *job = arg;
    char *base = gs_map_faulted(job->size);
    pthread_mutex_lock(&job->pool->mu);
    job->pool->ready = (struct gs_block){base, base ? job->size : 0};
    job->pool->preparing = false;
    pthread_cond_broadcast(&job->pool->done);
    pthread_mutex_unlock(&job->pool->mu);
    if (base)
        job->prepared();
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
    bool busy = pool->preparing || pool->ready.base != NULL;
    struct gs_ahead *job = busy ? NULL : malloc(sizeof *job);
    if (job) {
        *job = (struct gs_ahead){pool, (size_t)((bytes - room + GS_STAGING_ALIGN - 1) /
                                                GS_STAGING_ALIGN * GS_STAGING_ALIGN),
                                 prepared};
        pthread_t thread;
        pool->preparing = pthread_create(&thread, NULL, gs_prepare_in_background, job) == 0;
        if (pool->preparing)
            pthread_detach(thread);
        else
            free(job);
    }
    pthread_mutex_unlock(&pool->mu);
}

void gs_staging_adopt(int device)
{
    struct gs_pool *pool = device >= 0 && device < GS_MAX_DEVICES ? gs_pools[device] : NULL;
    if (pool)
        gs_adopt(pool, device, false);
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

bool gs_staging_prepare(int device, const size_t *sizes, size_t n)
{
    struct gs_pool *pool = gs_pool(device);
    if (pool == NULL)
        return false;
    gs_adopt(pool, device, true); /* faulting in again beside the thread would be slower */
    /* Takes them as gs_staging_take will, in the blocks there are; what is left over gets one
     * new block of exactly its size. */
    size_t block = pool->block, offset = pool->offset, i = 0;
    for (; i < n && block < pool->count; i++) {
        while (block < pool->count && pool->blocks[block].size - offset < sizes[i]) {
            block++;
            offset = 0;
        }
        if (block < pool->count)
            offset += sizes[i];
    }
    size_t more = 0;
    for (; i < n; i++)
        more += sizes[i];
    return more == 0 || gs_grow(pool, device, more);
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
    if (pool->block == pool->count && !gs_grow(pool, device, grow))
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
}
