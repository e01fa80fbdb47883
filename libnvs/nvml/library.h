/* The real NVML functions behind our wrappers: one slot per hooked function, filled by the
 * lookup that handed our wrapper out (dlsym) or found in the libnvidia-ml the program uses. */
#ifndef GS_NVML_LIBRARY_H
#define GS_NVML_LIBRARY_H

#include <stdbool.h>

#include "nvml/nvml_api.h"

enum gs_nvml_id {
#define GS_NVML_ID(symbol, params, args) GS_NVML_ID_##symbol,
    GS_NVML_HOOKED(GS_NVML_ID)
#undef GS_NVML_ID
    GS_NVML_COUNT
};

/* Pointer types of the real functions, gs_nvml_pfn_<symbol>. */
#define GS_NVML_PFN(symbol, params, args) typedef nvmlReturn_t(*gs_nvml_pfn_##symbol) params;
GS_NVML_HOOKED(GS_NVML_PFN)
GS_NVML_CALLED(GS_NVML_PFN)
#undef GS_NVML_PFN

/* The hooked function named `name`; -1 if none. Any name, from any dlsym of the process. */
int gs_nvml_find(const char *name);
const char *gs_nvml_name(enum gs_nvml_id id);
/* Record the function a lookup handed out for an entry. */
void gs_nvml_set_real(enum gs_nvml_id id, void *fn);
/* The real function of an entry; NULL when the program has no libnvidia-ml that has it. */
void *gs_nvml_real(enum gs_nvml_id id);

#define GS_NVML_REAL(symbol) ((gs_nvml_pfn_##symbol)gs_nvml_real(GS_NVML_ID_##symbol))

/* The device's UUID ("GPU-..."), asked of the libnvidia-ml the program uses; false when it
 * cannot say. */
bool gs_nvml_device_uuid(nvmlDevice_t device, char *out, unsigned int size);

#endif
