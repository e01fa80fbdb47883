/* The program's own view of the card through NVML, under the scheduler's memory limit:
 *  - memory: total is the limit (never more than the card), used what this process holds on
 *    that GPU (what the limit counts) plus what the others of its budget hold, free the rest;
 *  - process lists: this process alone, with the memory it holds there, where the driver lists
 *    it; the others are other budgets, or the part of its own budget that `used` shows as a sum
 *    (the scheduler sends the sum, never their pids).
 * Without a limit every answer is the driver's. */
#include "nvml/view.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "lock/identity.h"
#include "memory/memory.h"
#include "nvml/view_only.h"

/* Every entry type begins with the pid, and has the memory at the same offset. */
#define GS_USED_OFFSET offsetof(nvmlProcessInfo_v1_t, usedGpuMemory)
_Static_assert(offsetof(nvmlProcessInfo_v2_t, usedGpuMemory) == GS_USED_OFFSET, "layout");
_Static_assert(offsetof(nvmlProcessDetail_v1_t, usedGpuMemory) == GS_USED_OFFSET, "layout");

/* Asking the driver for its whole list: at most this many times as it grows meanwhile. */
#define GS_LIST_TRIES 8

static uint64_t gs_min(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/* What this process holds on the GPU behind the NVML handle: the CUDA devices it allocated on
 * whose UUID is the handle's (CUDA numbers devices its own way, CUDA_VISIBLE_DEVICES too). */
static uint64_t gs_own_bytes(nvmlDevice_t device)
{
    char nvml_uuid[NVML_DEVICE_UUID_BUFFER_SIZE] = "";
    uint64_t sum = 0;
    for (int d = 0; d < GS_MAX_DEVICES; d++) {
        uint64_t held = gs_memory_held(d);
        if (held == 0)
            continue;
        if (nvml_uuid[0] == '\0' && !gs_nvml_device_uuid(device, nvml_uuid, sizeof nvml_uuid))
            return 0;
        char cuda_uuid[48];
        gs_identity_uuid(d, cuda_uuid, sizeof cuda_uuid);
        if (!strcmp(cuda_uuid, nvml_uuid))
            sum += held;
    }
    return sum;
}

/* What the limit counts on that GPU: this process's bytes and the others' of its budget. */
static uint64_t gs_budget_used(nvmlDevice_t device, struct gs_memory_limit terms)
{
    uint64_t own = gs_own_bytes(device);
    return own > UINT64_MAX - terms.budget_used ? UINT64_MAX : own + terms.budget_used;
}

nvmlReturn_t gs_nvml_memory(nvmlDevice_t device, nvmlMemory_t *memory)
{
    gs_nvml_pfn_nvmlDeviceGetMemoryInfo real = GS_NVML_REAL(nvmlDeviceGetMemoryInfo);
    if (real == NULL)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    struct gs_memory_limit terms = gs_nvml_terms();
    nvmlReturn_t r = real(device, memory);
    if (r != NVML_SUCCESS || terms.limit == 0)
        return r;
    memory->total = gs_min(terms.limit, memory->total);
    memory->used = gs_min(gs_budget_used(device, terms), memory->total);
    memory->free = memory->total - memory->used;
    return r;
}

nvmlReturn_t gs_nvml_memory_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    gs_nvml_pfn_nvmlDeviceGetMemoryInfo_v2 real = GS_NVML_REAL(nvmlDeviceGetMemoryInfo_v2);
    if (real == NULL)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    struct gs_memory_limit terms = gs_nvml_terms();
    nvmlReturn_t r = real(device, memory); /* it checks the struct's version */
    if (r != NVML_SUCCESS || terms.limit == 0)
        return r;
    /* What the driver reserves is no part of a limit smaller than the card: all of the limit
     * may be allocated. */
    if (terms.limit < memory->total) {
        memory->total = terms.limit;
        memory->reserved = 0;
    }
    uint64_t room = memory->total - gs_min(memory->reserved, memory->total);
    memory->used = gs_min(gs_budget_used(device, terms), room);
    memory->free = room - memory->used;
    return r;
}

/* Asks the driver for a list of entries into `buffer` (room for *count); its answer. */
typedef nvmlReturn_t (*gs_list_fn)(const void *how, nvmlDevice_t device, unsigned int *count,
                                   void *buffer);

/* The driver's entry for this process, its memory replaced by what this process holds there;
 * *found false when the driver does not list it. The driver's error, if any. */
static nvmlReturn_t gs_own_entry(gs_list_fn list, const void *how, nvmlDevice_t device,
                                 size_t entry_size, void *entry, bool *found)
{
    *found = false;
    unsigned int room = 16;
    unsigned char *all = NULL;
    nvmlReturn_t r = NVML_ERROR_INSUFFICIENT_SIZE;
    for (int tries = 0; tries < GS_LIST_TRIES && r == NVML_ERROR_INSUFFICIENT_SIZE; tries++) {
        unsigned char *bigger = realloc(all, room * entry_size);
        if (bigger == NULL) {
            free(all);
            return NVML_ERROR_MEMORY;
        }
        all = bigger;
        unsigned int count = room;
        r = list(how, device, &count, all);
        room = count > room ? count + 16 : room * 2;
        if (r == NVML_SUCCESS)
            room = count;
    }
    unsigned int pid = (unsigned int)getpid();
    for (unsigned int i = 0; r == NVML_SUCCESS && i < room && !*found; i++) {
        unsigned int entry_pid;
        memcpy(&entry_pid, all + i * entry_size, sizeof entry_pid);
        if (entry_pid == pid) {
            memcpy(entry, all + i * entry_size, entry_size);
            *found = true;
        }
    }
    free(all);
    if (*found) {
        unsigned long long own = gs_own_bytes(device);
        memcpy((unsigned char *)entry + GS_USED_OFFSET, &own, sizeof own);
    }
    return r;
}

/* The answer of a list call that has room for *count entries at out: this process's entry, or
 * none; NVML_ERROR_INSUFFICIENT_SIZE with the count needed when it does not fit. */
static nvmlReturn_t gs_answer_list(const void *entry, bool found, size_t entry_size,
                                   unsigned int *count, void *out)
{
    unsigned int needed = found ? 1 : 0;
    if (*count < needed) {
        *count = needed;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (found)
        memcpy(out, entry, entry_size);
    *count = needed;
    return NVML_SUCCESS;
}

/* Every version of the three process lists: the entry type is the only difference. */
struct gs_process_list {
    nvmlReturn_t (*real)(nvmlDevice_t device, unsigned int *count, void *infos);
};

static nvmlReturn_t gs_list_processes(const void *how, nvmlDevice_t device, unsigned int *count,
                                      void *buffer)
{
    return ((const struct gs_process_list *)how)->real(device, count, buffer);
}

nvmlReturn_t gs_nvml_processes(enum gs_nvml_id id, nvmlDevice_t device, unsigned int *infoCount,
                               void *infos, size_t entry_size)
{
    struct gs_process_list how = {gs_nvml_real(id)};
    if (how.real == NULL)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    struct gs_memory_limit terms = gs_nvml_terms();
    if (terms.limit == 0 || infoCount == NULL || (infos == NULL && *infoCount > 0) ||
        entry_size > sizeof(nvmlProcessDetail_v1_t))
        return how.real(device, infoCount, infos); /* the driver's answer, errors included */
    unsigned char entry[sizeof(nvmlProcessDetail_v1_t)];
    bool found;
    nvmlReturn_t r = gs_own_entry(gs_list_processes, &how, device, entry_size, entry, &found);
    return r == NVML_SUCCESS ? gs_answer_list(entry, found, entry_size, infoCount, infos) : r;
}

static nvmlReturn_t gs_list_details(const void *how, nvmlDevice_t device, unsigned int *count,
                                    void *buffer)
{
    nvmlProcessDetailList_t list = *(const nvmlProcessDetailList_t *)how;
    list.numProcArrayEntries = *count;
    list.procArray = buffer;
    nvmlReturn_t r = GS_NVML_REAL(nvmlDeviceGetRunningProcessDetailList)(device, &list);
    *count = list.numProcArrayEntries;
    return r;
}

nvmlReturn_t gs_nvml_process_details(nvmlDevice_t device, nvmlProcessDetailList_t *plist)
{
    gs_nvml_pfn_nvmlDeviceGetRunningProcessDetailList real =
        GS_NVML_REAL(nvmlDeviceGetRunningProcessDetailList);
    if (real == NULL)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    struct gs_memory_limit terms = gs_nvml_terms();
    if (terms.limit == 0 || plist == NULL || plist->version != nvmlProcessDetailList_v1 ||
        (plist->procArray == NULL && plist->numProcArrayEntries > 0))
        return real(device, plist);
    nvmlProcessDetail_v1_t entry;
    bool found;
    nvmlReturn_t r = gs_own_entry(gs_list_details, plist, device, sizeof entry, &entry, &found);
    return r == NVML_SUCCESS ? gs_answer_list(&entry, found, sizeof entry,
                                              &plist->numProcArrayEntries, plist->procArray)
                             : r;
}
