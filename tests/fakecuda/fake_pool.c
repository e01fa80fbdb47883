/* Stream-ordered allocation: memory pools, cuMemAllocAsync / cuMemAllocFromPoolAsync and
 * cuMemFreeAsync.
 *
 * An allocation is made (and counted against the device) when the call is made; its free is a
 * queued op, so the memory comes back when the device reaches it in stream order. Pools do not
 * cache freed memory (a release threshold of 0, the driver's default). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include "fake_driver.h"

#define FAKE_POOL_MAGIC 0x504f4f4cu
#define CU_MEMPOOL_ATTR_RELEASE_THRESHOLD 4
#define CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT 5
#define CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH 6
#define CU_MEMPOOL_ATTR_USED_MEM_CURRENT 7
#define CU_MEMPOOL_ATTR_USED_MEM_HIGH 8

struct CUmemPoolHandle_st {
    uint32_t magic;
    CUdevice device;
    _Atomic uint64_t used, high;
    uint64_t release_threshold;
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUmemPoolHandle_st default_pools[FAKE_MAX_DEVICES];
static struct CUmemPoolHandle_st *current_pools[FAKE_MAX_DEVICES];

static CUmemoryPool default_pool(CUdevice dev)
{
    pthread_mutex_lock(&pool_lock);
    struct CUmemPoolHandle_st *p = &default_pools[dev];
    p->magic = FAKE_POOL_MAGIC;
    p->device = dev;
    pthread_mutex_unlock(&pool_lock);
    return p;
}

static CUmemoryPool current_pool(CUdevice dev)
{
    pthread_mutex_lock(&pool_lock);
    CUmemoryPool p = current_pools[dev];
    pthread_mutex_unlock(&pool_lock);
    return p ? p : default_pool(dev);
}

static bool pool_valid(CUmemoryPool p)
{
    return p && p->magic == FAKE_POOL_MAGIC;
}

FAKE_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    FAKE_TRY(fake_check_device(dev));
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    *pool_out = default_pool(dev);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    FAKE_TRY(fake_check_device(dev));
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    *pool = current_pool(dev);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    FAKE_TRY(fake_check_device(dev));
    if (!pool_valid(pool) || pool->device != dev)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    current_pools[dev] = pool;
    pthread_mutex_unlock(&pool_lock);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    FAKE_TRY(fake_check_init());
    if (!pool || !poolProps || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        fake_check_device(poolProps->location.id) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->magic = FAKE_POOL_MAGIC;
    p->device = poolProps->location.id;
    *pool = p;
    fake_log("pool_create", "pool=%p dev=%d", (void *)p, p->device);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    FAKE_TRY(fake_check_init());
    if (!pool_valid(pool) || pool == &default_pools[pool->device])
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    if (current_pools[pool->device] == pool)
        current_pools[pool->device] = NULL;
    pool->magic = 0; /* outstanding allocations stay valid until freed, as documented */
    pthread_mutex_unlock(&pool_lock);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    (void)minBytesToKeep; /* nothing is cached, so nothing to trim */
    FAKE_TRY(fake_check_init());
    return pool_valid(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKE_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    FAKE_TRY(fake_check_init());
    if (!pool_valid(pool) || !value)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: pool->release_threshold = *(cuuint64_t *)value; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0)
            return CUDA_ERROR_INVALID_VALUE;
        atomic_store(&pool->high, atomic_load(&pool->used));
        break;
    case 1: case 2: case 3: break; /* reuse policies: the fake never reuses */
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    FAKE_TRY(fake_check_init());
    if (!pool_valid(pool) || !value)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = pool->release_threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = atomic_load(&pool->used); break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = atomic_load(&pool->high); break;
    case 1: case 2: case 3: *(int *)value = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* ---- allocation and free ------------------------------------------------------------------- */

static CUresult alloc_async(const struct fake_call *call, CUdeviceptr *dptr, size_t bytesize,
                            CUmemoryPool pool, CUstream hStream)
{
    struct CUstream_st *s;
    CUresult r = fake_stream_resolve(hStream, call->per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pool)
        pool = current_pool(s->ctx->device);
    if (!dptr || bytesize == 0 || !pool_valid(pool))
        return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    if (!fake_device_reserve(pool->device, bytesize))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else if (!(p = fake_map_bytes(bytesize))) {
        fake_device_unreserve(pool->device, bytesize);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS) {
        struct fake_alloc a = {.base = (uintptr_t)p, .size = bytesize, .mapped = bytesize,
                               .kind = FAKE_MEM_ASYNC, .device = pool->device, .ctx = s->ctx,
                               .pool = pool};
        fake_alloc_insert(&a);
        uint64_t used = atomic_fetch_add(&pool->used, bytesize) + bytesize;
        uint64_t high = atomic_load(&pool->high);
        while (used > high && !atomic_compare_exchange_weak(&pool->high, &high, used))
            ;
        *dptr = (CUdeviceptr)(uintptr_t)p;
    }
    char name[32];
    fake_log(fake_event_name("alloc_async", call->api, name, sizeof name),
             "api=%s ptr=0x%llx size=%zu stream=%llu pool=%p dev=%d result=%d", call->api,
             (unsigned long long)(uintptr_t)p, bytesize, (unsigned long long)s->id, (void *)pool,
             pool->device, (int)r);
    return r;
}

static CUresult cuMemAllocAsync_impl(const struct fake_call *call, CUdeviceptr *dptr,
                                     size_t bytesize, CUstream hStream)
{
    return alloc_async(call, dptr, bytesize, NULL, hStream);
}
FAKE_PTSZ_PAIR(cuMemAllocAsync, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream), dptr,
               bytesize, hStream)

static CUresult cuMemAllocFromPoolAsync_impl(const struct fake_call *call, CUdeviceptr *dptr,
                                             size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream)
{
    if (!pool)
        return fake_check_init() != CUDA_SUCCESS ? fake_check_init() : CUDA_ERROR_INVALID_VALUE;
    return alloc_async(call, dptr, bytesize, pool, hStream);
}
FAKE_PTSZ_PAIR(cuMemAllocFromPoolAsync,
               (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream), dptr,
               bytesize, pool, hStream)

void fake_pool_forget(void *pool, size_t size)
{
    atomic_fetch_sub(&((struct CUmemPoolHandle_st *)pool)->used, size);
}

void fake_free_async_now(uintptr_t base, const char *api)
{
    struct fake_alloc a;
    if (!fake_alloc_remove(base, &a))
        return; /* freed twice: the second free was refused when it was made */
    if (a.pool)
        fake_pool_forget(a.pool, a.size);
    fake_release(&a, api);
}

static CUresult cuMemFreeAsync_impl(const struct fake_call *call, CUdeviceptr dptr,
                                    CUstream hStream)
{
    struct CUstream_st *s;
    FAKE_TRY(fake_stream_resolve(hStream, call->per_thread, &s));
    struct fake_alloc a;
    char details[64];
    snprintf(details, sizeof details, "ptr=0x%llx", (unsigned long long)dptr);
    if (!fake_alloc_lookup((uintptr_t)dptr, &a) || a.base != (uintptr_t)dptr ||
        a.kind != FAKE_MEM_ASYNC) {
        char name[32];
        fake_log(fake_event_name("free_async", call->api, name, sizeof name),
                 "api=%s %s result=%d", call->api, details, (int)CUDA_ERROR_INVALID_VALUE);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct fake_op op = {.kind = FAKE_OP_FREE_ASYNC, .u.free_async.ptr = (uintptr_t)dptr};
    return fake_submit(call, "free_async", s, &op, details);
}
FAKE_PTSZ_PAIR(cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream), dptr, hStream)
