/* Cold memory: allocations cleared whole to zeros. The program's threads note large clearings
 * in a ring without a lock; the client thread takes them in when it moves memory, matches them
 * with the device's allocations by address and size, and keeps the cold ones by allocation
 * stamp, so that a freed and re-made allocation at the same address starts warm. */
#include "memory/cold.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define GS_COLD_RING 64

/* seq is the note's number plus one once ptr and bytes are written: a reader that finds a
 * smaller one waits for it, a larger one skips it (overwritten since). A torn read only makes a
 * wrong guess of what is cold, never loses data: cold memory still moves, by migration. */
static struct gs_cold_slot {
    _Atomic uint64_t seq, ptr, bytes;
} gs_ring[GS_COLD_RING];
static _Atomic uint64_t gs_ring_head;

void gs_cold_note_set(CUdeviceptr dst, bool zero, size_t bytes)
{
    if (!zero || bytes < GS_COLD_MIN_BYTES)
        return;
    uint64_t i = atomic_fetch_add_explicit(&gs_ring_head, 1, memory_order_relaxed);
    struct gs_cold_slot *slot = &gs_ring[i % GS_COLD_RING];
    atomic_store_explicit(&slot->ptr, (uint64_t)dst, memory_order_relaxed);
    atomic_store_explicit(&slot->bytes, (uint64_t)bytes, memory_order_relaxed);
    atomic_store_explicit(&slot->seq, i + 1, memory_order_release);
}

struct gs_cold_one {
    uint64_t stamp;
    bool away;
};

/* Owned by the client thread; reset after fork. */
static struct {
    uint64_t tail; /* the next note to read */
    struct { uint64_t ptr, bytes; } pending[GS_COLD_RING]; /* noted, not matched yet */
    size_t pending_count;
    struct gs_cold_one *cold[GS_MAX_DEVICES];
    size_t count[GS_MAX_DEVICES], cap[GS_MAX_DEVICES];
} gs_cold;

static void gs_cold_read_ring(void)
{
    uint64_t head = atomic_load_explicit(&gs_ring_head, memory_order_acquire);
    if (head - gs_cold.tail > GS_COLD_RING)
        gs_cold.tail = head - GS_COLD_RING; /* older notes were overwritten: a guess lost */
    for (; gs_cold.tail < head; gs_cold.tail++) {
        struct gs_cold_slot *slot = &gs_ring[gs_cold.tail % GS_COLD_RING];
        uint64_t seq = atomic_load_explicit(&slot->seq, memory_order_acquire);
        /* Acquire loads: the second look at seq below cannot come before them. */
        uint64_t ptr = atomic_load_explicit(&slot->ptr, memory_order_acquire);
        uint64_t bytes = atomic_load_explicit(&slot->bytes, memory_order_acquire);
        if (seq < gs_cold.tail + 1)
            break; /* still being written (its call has left the gate): read it next time */
        if (seq > gs_cold.tail + 1 || atomic_load_explicit(&slot->seq, memory_order_relaxed) != seq)
            continue; /* overwritten by a later note */
        if (gs_cold.pending_count == GS_COLD_RING) { /* the oldest unmatched one goes */
            memmove(gs_cold.pending, gs_cold.pending + 1,
                    (GS_COLD_RING - 1) * sizeof gs_cold.pending[0]);
            gs_cold.pending_count--;
        }
        gs_cold.pending[gs_cold.pending_count].ptr = ptr;
        gs_cold.pending[gs_cold.pending_count++].bytes = bytes;
    }
}

static struct gs_cold_one *gs_cold_find(int device, uint64_t stamp)
{
    if (device < 0 || device >= GS_MAX_DEVICES)
        return NULL;
    for (size_t i = 0; i < gs_cold.count[device]; i++)
        if (gs_cold.cold[device][i].stamp == stamp)
            return &gs_cold.cold[device][i];
    return NULL;
}

static void gs_cold_add(int device, uint64_t stamp)
{
    if (gs_cold_find(device, stamp))
        return;
    if (gs_cold.count[device] == gs_cold.cap[device]) {
        size_t cap = gs_cold.cap[device] ? 2 * gs_cold.cap[device] : 16;
        struct gs_cold_one *grown = realloc(gs_cold.cold[device], cap * sizeof *grown);
        if (grown == NULL)
            return; /* it stays warm: moved as before */
        gs_cold.cold[device] = grown;
        gs_cold.cap[device] = cap;
    }
    gs_cold.cold[device][gs_cold.count[device]++] = (struct gs_cold_one){stamp, false};
}

void gs_cold_refresh(int device, const struct gs_managed *list, size_t n)
{
    if (device < 0 || device >= GS_MAX_DEVICES)
        return;
    gs_cold_read_ring();
    size_t kept = 0;
    for (size_t p = 0; p < gs_cold.pending_count; p++) {
        bool matched = false;
        for (size_t i = 0; i < n && !matched; i++)
            if (list[i].converted && list[i].ptr == gs_cold.pending[p].ptr &&
                gs_cold.pending[p].bytes + GS_COLD_SLACK >= list[i].size) {
                gs_cold_add(device, list[i].stamp);
                matched = true;
            }
        if (!matched)
            gs_cold.pending[kept++] = gs_cold.pending[p]; /* another device's, or not yet seen */
    }
    gs_cold.pending_count = kept;
    size_t live = 0; /* freed allocations are forgotten */
    for (size_t c = 0; c < gs_cold.count[device]; c++) {
        bool found = false;
        for (size_t i = 0; i < n && !found; i++)
            found = list[i].stamp == gs_cold.cold[device][c].stamp;
        if (found)
            gs_cold.cold[device][live++] = gs_cold.cold[device][c];
    }
    gs_cold.count[device] = live;
}

bool gs_cold_is(int device, uint64_t stamp)
{
    return gs_cold_find(device, stamp) != NULL;
}

bool gs_cold_away(int device, uint64_t stamp)
{
    struct gs_cold_one *one = gs_cold_find(device, stamp);
    return one != NULL && one->away;
}

void gs_cold_sent_away(int device, uint64_t stamp)
{
    struct gs_cold_one *one = gs_cold_find(device, stamp);
    if (one != NULL)
        one->away = true;
}

void gs_cold_after_fork_child(void)
{
    for (int d = 0; d < GS_MAX_DEVICES; d++)
        free(gs_cold.cold[d]);
    memset(&gs_cold, 0, sizeof gs_cold);
    atomic_store(&gs_ring_head, 0);
    for (int i = 0; i < GS_COLD_RING; i++)
        atomic_store(&gs_ring[i].seq, 0);
}
