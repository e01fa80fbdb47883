/* The stand-in's NVML steps (`standin --help`). Each works on the device chosen last
 * (nvml-device, nvml-device-by-uuid; NVML index 0 before that). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvml/nvml_api.h"
#include "standin_nvml.h"

static struct {
#define STANDIN_NVML_FIELD(symbol, params, args) nvmlReturn_t(*symbol) params;
    GS_NVML_HOOKED(STANDIN_NVML_FIELD)
    GS_NVML_CALLED(STANDIN_NVML_FIELD)
    GS_NVML_FOR_TESTS(STANDIN_NVML_FIELD)
#undef STANDIN_NVML_FIELD
    const char *(*nvmlErrorString)(nvmlReturn_t result);
} nvml;
static nvmlDevice_t device;

static bool nvml_resolve(void)
{
#ifdef STANDIN_LINKED
#define STANDIN_NVML_LINK(symbol, params, args) nvml.symbol = symbol;
    GS_NVML_HOOKED(STANDIN_NVML_LINK)
    GS_NVML_CALLED(STANDIN_NVML_LINK)
    GS_NVML_FOR_TESTS(STANDIN_NVML_LINK)
    nvml.nvmlErrorString = nvmlErrorString;
    return true;
#else
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (h == NULL) {
        fprintf(stderr, "standin: cannot load libnvidia-ml.so.1: %s\n", dlerror());
        return false;
    }
    bool ok = true;
#define STANDIN_NVML_LOOKUP(symbol, params, args)                                                \
    ok = ok && (*(void **)&nvml.symbol = dlsym(h, #symbol)) != NULL;
    GS_NVML_HOOKED(STANDIN_NVML_LOOKUP)
    GS_NVML_CALLED(STANDIN_NVML_LOOKUP)
    GS_NVML_FOR_TESTS(STANDIN_NVML_LOOKUP)
    ok = ok && (*(void **)&nvml.nvmlErrorString = dlsym(h, "nvmlErrorString")) != NULL;
    if (!ok)
        fprintf(stderr, "standin: libnvidia-ml.so.1 lacks a function: %s\n", dlerror());
    return ok;
#endif
}

/* Prints "<step> <details> result=N error=NAME"; whether the call succeeded. */
static bool report(nvmlReturn_t r, const char *step, const char *details)
{
    printf("%s%s%s result=%d error=%s\n", step, *details ? " " : "", details, (int)r,
           nvml.nvmlErrorString ? nvml.nvmlErrorString(r) : "unknown");
    fflush(stdout);
    return r == NVML_SUCCESS;
}

static bool step_init(void)
{
    if (!nvml_resolve())
        return report(NVML_ERROR_LIBRARY_NOT_FOUND, "nvml-init", "");
    nvmlReturn_t r = nvml.nvmlInit_v2();
    if (r == NVML_SUCCESS)
        r = nvml.nvmlDeviceGetHandleByIndex_v2(0, &device);
    return report(r, "nvml-init", "");
}

static bool step_device(const char *step, unsigned int index, bool by_uuid)
{
    char uuid[NVML_DEVICE_UUID_BUFFER_SIZE] = "";
    nvmlReturn_t r = nvml.nvmlDeviceGetHandleByIndex_v2(index, &device);
    if (r == NVML_SUCCESS)
        r = nvml.nvmlDeviceGetUUID(device, uuid, sizeof uuid);
    if (r == NVML_SUCCESS && by_uuid)
        r = nvml.nvmlDeviceGetHandleByUUID(uuid, &device);
    char details[160];
    snprintf(details, sizeof details, "index=%u uuid=%s", index, uuid);
    return report(r, step, details);
}

static bool step_memory(const char *step, const char *version)
{
    char details[256];
    nvmlReturn_t r;
    if (!strcmp(version, "1")) {
        nvmlMemory_t m = {0};
        r = nvml.nvmlDeviceGetMemoryInfo(device, &m);
        snprintf(details, sizeof details, "version=1 total=%llu free=%llu used=%llu", m.total,
                 m.free, m.used);
    } else {
        /* "2", or "2-bad": a struct version the library must refuse. */
        nvmlMemory_v2_t m = {.version = strcmp(version, "2") ? nvmlMemory_v2 + 1 : nvmlMemory_v2};
        r = nvml.nvmlDeviceGetMemoryInfo_v2(device, &m);
        snprintf(details, sizeof details,
                 "version=%s total=%llu reserved=%llu free=%llu used=%llu", version, m.total,
                 m.reserved, m.free, m.used);
    }
    return report(r, step, details);
}

/* "pid:bytes;..." of n entries of entry_size bytes (every layout starts with pid, then the
 * memory 8 bytes in). */
static void list_entries(const unsigned char *entries, unsigned int n, size_t entry_size,
                         char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (unsigned int i = 0; i < n && used < size; i++) {
        const nvmlProcessInfo_v1_t *e = (const void *)(entries + i * entry_size);
        used += (size_t)snprintf(out + used, size - used, "%s%u:%llu", i ? ";" : "", e->pid,
                                 e->usedGpuMemory);
    }
}

/* One list call: into `infos`, with room for *count entries. */
typedef nvmlReturn_t (*list_call)(const void *how, unsigned int *count, void *infos);

/* A list as programs read it: a first call with no room asks how many there are, a second one
 * with room fetches them. Prints "<step> <what> first= needed= count= processes=pid:bytes;...". */
static bool read_list(const char *step, const char *what, list_call call, const void *how,
                      size_t entry_size)
{
    unsigned int needed = 0;
    nvmlReturn_t first = call(how, &needed, NULL);
    unsigned int count = needed + 2;
    unsigned char *entries = calloc(count, entry_size);
    nvmlReturn_t r = first == NVML_ERROR_INSUFFICIENT_SIZE || first == NVML_SUCCESS
                         ? call(how, &count, entries)
                         : first;
    if (r != NVML_SUCCESS)
        count = 0;
    char found[1024], details[1200];
    list_entries(entries, count, entry_size, found, sizeof found);
    free(entries);
    snprintf(details, sizeof details, "%s first=%d needed=%u count=%u processes=%s", what,
             (int)first, needed, count, found);
    return report(r, step, details);
}

typedef nvmlReturn_t (*process_list_fn)(nvmlDevice_t device, unsigned int *count, void *infos);

static nvmlReturn_t call_process_list(const void *how, unsigned int *count, void *infos)
{
    return (*(const process_list_fn *)how)(device, count, infos);
}

static bool step_processes(const char *step, const char *kind, const char *version)
{
#define STANDIN_NVML_LISTS(name, Kind)                                                           \
    {name, "1", offsetof(__typeof__(nvml), nvmlDeviceGet##Kind##RunningProcesses),               \
     sizeof(nvmlProcessInfo_v1_t)},                                                              \
        {name, "2", offsetof(__typeof__(nvml), nvmlDeviceGet##Kind##RunningProcesses_v2),        \
         sizeof(nvmlProcessInfo_v2_t)},                                                          \
        {name, "3", offsetof(__typeof__(nvml), nvmlDeviceGet##Kind##RunningProcesses_v3),        \
         sizeof(nvmlProcessInfo_t)},
    static const struct {
        const char *kind, *version;
        size_t offset, entry_size;
    } lists[] = {STANDIN_NVML_LISTS("compute", Compute) STANDIN_NVML_LISTS("graphics", Graphics)
                     STANDIN_NVML_LISTS("mps", MPSCompute)};
    for (size_t k = 0; k < sizeof lists / sizeof lists[0]; k++) {
        if (strcmp(lists[k].kind, kind) || strcmp(lists[k].version, version))
            continue;
        char what[64];
        snprintf(what, sizeof what, "kind=%s version=%s", kind, version);
        return read_list(step, what, call_process_list, (const char *)&nvml + lists[k].offset,
                         lists[k].entry_size);
    }
    fprintf(stderr, "standin: nvml-processes takes compute|graphics|mps and 1|2|3\n");
    exit(2);
}

static nvmlReturn_t call_details(const void *how, unsigned int *count, void *infos)
{
    nvmlProcessDetailList_t list = {.version = nvmlProcessDetailList_v1,
                                    .mode = *(const unsigned int *)how,
                                    .numProcArrayEntries = *count,
                                    .procArray = infos};
    nvmlReturn_t r = nvml.nvmlDeviceGetRunningProcessDetailList(device, &list);
    *count = list.numProcArrayEntries;
    return r;
}

static bool step_details(const char *step, unsigned int mode)
{
    char what[32];
    snprintf(what, sizeof what, "mode=%u", mode);
    return read_list(step, what, call_details, &mode, sizeof(nvmlProcessDetail_v1_t));
}

static const struct {
    const char *step;
    int arity;
} steps[] = {{"nvml-init", 0},   {"nvml-device", 1},    {"nvml-device-by-uuid", 1},
             {"nvml-memory", 1}, {"nvml-processes", 2}, {"nvml-details", 1}};

int standin_nvml_arity(const char *step)
{
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++)
        if (!strcmp(step, steps[k].step))
            return steps[k].arity;
    return -1;
}

bool standin_nvml_run(const char *step, const char *const *args)
{
    if (!strcmp(step, "nvml-init"))
        return step_init();
    if (nvml.nvmlInit_v2 == NULL) {
        fprintf(stderr, "standin: %s needs nvml-init first\n", step);
        exit(2);
    }
    if (!strcmp(step, "nvml-device") || !strcmp(step, "nvml-device-by-uuid"))
        return step_device(step, (unsigned int)strtoul(args[0], NULL, 10), step[11] == '-');
    if (!strcmp(step, "nvml-memory"))
        return step_memory(step, args[0]);
    if (!strcmp(step, "nvml-processes"))
        return step_processes(step, args[0], args[1]);
    return step_details(step, (unsigned int)strtoul(args[0], NULL, 10));
}
