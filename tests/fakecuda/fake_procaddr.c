/* cuGetProcAddress and cuGetProcAddress_v2, resolving as the real driver does: the newest
 * version of a name not newer than the caller's cudaVersion, its per-thread twin when the flags
 * ask for per-thread default stream semantics, and CUDA_ERROR_NOT_FOUND otherwise.
 *
 * The table holds the fake's own function addresses (the library is linked -Bsymbolic), never a
 * preloaded library's, just as the real driver hands out its own. */
#define _GNU_SOURCE
#include <string.h>

#include "fake_driver.h"

#define FAKE_DRIVER_VERSION 13000
#define PER_THREAD_SINCE 7000 /* CUDA 7.0 introduced the per-thread default stream */

struct entry {
    const char *lookup;
    int since;
    const char *symbol;
    void *fn;
    const char *twin_symbol;
    void *twin;
};

#define TWIN_NONE(symbol) NULL, NULL
#define TWIN_PTSZ(symbol) #symbol "_ptsz", (void *)symbol##_ptsz
#define TWIN_PTDS(symbol) #symbol "_ptds", (void *)symbol##_ptds
#define FAKE_ENTRY(lookup, since, symbol, twin, params)                                          \
    {#lookup, since, #symbol, (void *)symbol, TWIN_##twin(symbol)},
static const struct entry table[] = {
#include "fake_entry_points.def"
};
#undef FAKE_ENTRY

static CUresult resolve(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                        CUdriverProcAddressQueryResult *status, const char *api)
{
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    const char *found = "-";
    if (!symbol || !pfn || cudaVersion <= 0 ||
        (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                               CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
        return CUDA_ERROR_INVALID_VALUE;
    if (cudaVersion > FAKE_DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE; /* newer than this driver, as documented */
    *pfn = NULL;
    const struct entry *best = NULL;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].lookup, symbol) != 0)
            continue;
        st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        if (table[i].since <= cudaVersion && (!best || table[i].since > best->since))
            best = &table[i];
    }
    if (best) {
        bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        int twin_since = best->since > PER_THREAD_SINCE ? best->since : PER_THREAD_SINCE;
        if (per_thread && best->twin && cudaVersion >= twin_since) {
            *pfn = best->twin;
            found = best->twin_symbol;
        } else {
            *pfn = best->fn;
            found = best->symbol;
        }
        st = CU_GET_PROC_ADDRESS_SUCCESS;
        r = CUDA_SUCCESS;
    }
    if (status)
        *status = st;
    fake_log("proc_address", "api=%s symbol=%s version=%d flags=%llu found=%s status=%d result=%d",
             api, symbol, cudaVersion, (unsigned long long)flags, found, (int)st, (int)r);
    return r;
}

FAKE_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                      cuuint64_t flags,
                                      CUdriverProcAddressQueryResult *symbolStatus)
{
    return resolve(symbol, pfn, cudaVersion, flags, symbolStatus, "cuGetProcAddress_v2");
}

FAKE_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                   cuuint64_t flags)
{
    return resolve(symbol, pfn, cudaVersion, flags, NULL, "cuGetProcAddress");
}
