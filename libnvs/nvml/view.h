/* What a program sees through NVML under a memory limit: its own view of the card, as
 * cuMemGetInfo shows it (README.md, *NVML*). Each function calls the real one first and keeps
 * its answer (and errors) where no limit applies. */
#ifndef GS_NVML_VIEW_H
#define GS_NVML_VIEW_H

#include <stddef.h>

#include "nvml/library.h"

nvmlReturn_t gs_nvml_memory(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t gs_nvml_memory_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);
/* One of the running-process lists (compute, graphics, MPS; any version): `infos` holds
 * *infoCount entries of entry_size bytes. */
nvmlReturn_t gs_nvml_processes(enum gs_nvml_id id, nvmlDevice_t device, unsigned int *infoCount,
                               void *infos, size_t entry_size);
nvmlReturn_t gs_nvml_process_details(nvmlDevice_t device, nvmlProcessDetailList_t *plist);

#endif
