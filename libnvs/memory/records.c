/* The allocation records: a hash table by device pointer (or VMM handle), and the per-device
 * sums the limits, cuMemGetInfo, the NVML view and the memory reports read. */
#include "memory/records.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/log.h"
#include "cuda/impl.h"
#include "gate/wake.h"

#define GS_BUCKETS 4096

static const char *const gs_kind_names[] = {"managed (converted)", "managed", "device", "pool",
                                            "VMM"};

/* One per process; a forked child starts over with nothing (CUDA does not survive fork). The
 * device sizes and the limit are read without the mutex. */
static struct gs_records {
    pthread_mutex_t mu;
    struct gs_alloc *buckets[GS_BUCKETS];
    uint64_t held[GS_MAX_DEVICES];
    /* The part of held that is the program's own managed memory: reported, and held to the
     * scheduler's limit, but never to the device's size. */
    uint64_t own_managed[GS_MAX_DEVICES];
    bool used[GS_MAX_DEVICES];
    bool changed[GS_MAX_DEVICES];
    atomic_int any_changed;
    /* Counts allocations. "Recently used" is approximated by "recently allocated" (README.md):
     * the only use libnvs sees without a lookup on the submission fast path. */
    uint64_t clock;
    _Atomic uint64_t device_total[GS_MAX_DEVICES];
    /* The scheduler's memory limit (LIMITS): bytes this process may hold on each device; 0:
     * none. And what the others sharing that budget (its container) hold there, counted
     * against the limit too. Kept when the scheduler is lost, and in a forked child: the
     * operator set it, and the next registration replaces it. */
    _Atomic uint64_t limit;
    _Atomic uint64_t budget_used;
} gs_rec = {.mu = PTHREAD_MUTEX_INITIALIZER};

static bool gs_device_ok(int device)
{
    return device >= 0 && device < GS_MAX_DEVICES;
}

static size_t gs_bucket(uint64_t key, enum gs_alloc_kind kind)
{
    uint64_t h = (key ^ (kind == GS_ALLOC_VMM ? 0x9e3779b97f4a7c15ull : 0)) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 52) % GS_BUCKETS;
}

void gs_records_lock(void)
{
    pthread_mutex_lock(&gs_rec.mu);
}

void gs_records_unlock(void)
{
    pthread_mutex_unlock(&gs_rec.mu);
}

struct gs_alloc **gs_records_find(uint64_t key, bool vmm)
{
    struct gs_alloc **p = &gs_rec.buckets[gs_bucket(key, vmm ? GS_ALLOC_VMM : GS_ALLOC_DEVICE)];
    for (; *p; p = &(*p)->next)
        if ((*p)->key == key && ((*p)->kind == GS_ALLOC_VMM) == vmm)
            return p;
    return NULL;
}

void gs_records_link(struct gs_alloc *a)
{
    size_t b = gs_bucket(a->key, a->kind);
    a->next = gs_rec.buckets[b];
    gs_rec.buckets[b] = a;
}

void gs_records_count(int device, int64_t delta, enum gs_alloc_kind kind)
{
    if (!gs_device_ok(device))
        return;
    gs_rec.held[device] += (uint64_t)delta;
    if (kind == GS_ALLOC_MANAGED)
        gs_rec.own_managed[device] += (uint64_t)delta;
    gs_rec.used[device] = true;
    gs_rec.changed[device] = true;
    if (!atomic_exchange(&gs_rec.any_changed, 1))
        gs_wake();
}

void gs_records_add(uint64_t key, size_t size, CUcontext ctx, int device,
                    enum gs_alloc_kind kind, bool count)
{
    struct gs_alloc *a = calloc(1, sizeof *a);
    if (a == NULL) {
        gs_warn("out of host memory for allocation records; %zu bytes at %#llx go uncounted",
                size, (unsigned long long)key);
        if (!count)
            gs_records_count(device, -(int64_t)size, kind);
        return;
    }
    *a = (struct gs_alloc){.key = key, .size = size, .ctx = ctx, .device = device, .kind = kind,
                           .stamp = ++gs_rec.clock, .refs = 1};
    gs_records_link(a);
    if (count)
        gs_records_count(device, (int64_t)size, kind);
    gs_debug("%s: %zu bytes on device %d at %#llx (now %llu bytes there)", gs_kind_names[kind],
             size, device, (unsigned long long)key,
             gs_device_ok(device) ? (unsigned long long)gs_rec.held[device] : 0);
}

struct gs_alloc *gs_records_take(struct gs_alloc **p)
{
    struct gs_alloc *a = *p;
    *p = a->next;
    gs_records_count(a->device, -(int64_t)a->size, a->kind);
    return a;
}

struct gs_alloc *gs_records_take_context(CUcontext ctx)
{
    struct gs_alloc *taken = NULL;
    for (size_t b = 0; b < GS_BUCKETS; b++) {
        struct gs_alloc **p = &gs_rec.buckets[b];
        while (*p) {
            if ((*p)->ctx == ctx && (*p)->kind != GS_ALLOC_VMM) {
                struct gs_alloc *a = gs_records_take(p);
                a->next = taken;
                taken = a;
            } else {
                p = &(*p)->next;
            }
        }
    }
    return taken;
}

uint64_t gs_records_held(int device)
{
    return gs_device_ok(device) ? gs_rec.held[device] : 0;
}

uint64_t gs_records_own_managed(int device)
{
    return gs_device_ok(device) ? gs_rec.own_managed[device] : 0;
}

const char *gs_records_kind_name(enum gs_alloc_kind kind)
{
    return gs_kind_names[kind];
}

uint64_t gs_records_device_total(int device)
{
    if (!gs_device_ok(device))
        return 0;
    uint64_t total = atomic_load(&gs_rec.device_total[device]);
    size_t bytes = 0;
    if (total == 0 && GS_REAL(cuDeviceTotalMem_v2, GS_LEGACY)(&bytes, device) == CUDA_SUCCESS) {
        total = bytes;
        atomic_store(&gs_rec.device_total[device], total);
    }
    return total;
}

void gs_records_note_device_total(int device, uint64_t total)
{
    if (gs_device_ok(device))
        atomic_store(&gs_rec.device_total[device], total);
}

struct gs_memory_limit gs_memory_limit(void)
{
    return (struct gs_memory_limit){atomic_load(&gs_rec.limit), atomic_load(&gs_rec.budget_used)};
}

void gs_memory_set_limit(struct gs_memory_limit terms)
{
    uint64_t old = atomic_exchange(&gs_rec.limit, terms.limit);
    uint64_t old_used = atomic_exchange(&gs_rec.budget_used, terms.budget_used);
    if (old != terms.limit)
        gs_debug("memory limit per device: %llu bytes (was %llu; 0: none)",
                 (unsigned long long)terms.limit, (unsigned long long)old);
    if (old_used != terms.budget_used)
        gs_debug("the others sharing that budget hold %llu bytes (was %llu)",
                 (unsigned long long)terms.budget_used, (unsigned long long)old_used);
}

uint64_t gs_memory_held(int device)
{
    gs_records_lock();
    uint64_t held = gs_records_held(device);
    gs_records_unlock();
    return held;
}

uint64_t gs_memory_device_total(int device)
{
    return gs_records_device_total(device);
}

struct gs_managed *gs_memory_managed(int device, bool own_too, size_t *count)
{
    size_t n = 0, cap = 64;
    struct gs_managed *list = malloc(cap * sizeof *list);
    gs_records_lock();
    for (size_t b = 0; b < GS_BUCKETS && list; b++) {
        for (struct gs_alloc *a = gs_rec.buckets[b]; a && list; a = a->next) {
            bool wanted = a->kind == GS_ALLOC_CONVERTED || (own_too && a->kind == GS_ALLOC_MANAGED);
            if (!wanted || a->device != device)
                continue;
            if (n == cap) {
                struct gs_managed *more = realloc(list, 2 * cap * sizeof *list);
                if (more == NULL)
                    break; /* the caller moves what the list holds */
                list = more;
                cap *= 2;
            }
            list[n++] = (struct gs_managed){(CUdeviceptr)a->key, a->size, a->ctx, a->stamp,
                                             a->kind == GS_ALLOC_CONVERTED};
        }
    }
    gs_records_unlock();
    if (list && n == 0) {
        free(list);
        list = NULL;
    }
    *count = list ? n : 0;
    return list;
}

bool gs_memory_has_changes(void)
{
    return atomic_load(&gs_rec.any_changed) != 0;
}

int gs_memory_changes(struct gs_mem_usage out[GS_MAX_DEVICES], bool all)
{
    int n = 0;
    atomic_store(&gs_rec.any_changed, 0);
    gs_records_lock();
    for (int d = 0; d < GS_MAX_DEVICES; d++) {
        if (!gs_rec.used[d] || !(all || gs_rec.changed[d]))
            continue;
        gs_rec.changed[d] = false;
        out[n++] = (struct gs_mem_usage){(uint32_t)d, gs_rec.held[d],
                                         atomic_load(&gs_rec.device_total[d])};
    }
    gs_records_unlock();
    return n;
}

void gs_records_after_fork_child(void)
{
    /* The parent's records are dropped, not freed (another thread may have been changing
     * them); the device sizes and the limit stay true in the child. */
    uint64_t totals[GS_MAX_DEVICES];
    for (int d = 0; d < GS_MAX_DEVICES; d++)
        totals[d] = atomic_load(&gs_rec.device_total[d]);
    uint64_t limit = atomic_load(&gs_rec.limit), budget_used = atomic_load(&gs_rec.budget_used);
    gs_rec = (struct gs_records){.mu = PTHREAD_MUTEX_INITIALIZER, .limit = limit,
                                 .budget_used = budget_used};
    for (int d = 0; d < GS_MAX_DEVICES; d++)
        atomic_store(&gs_rec.device_total[d], totals[d]);
}
