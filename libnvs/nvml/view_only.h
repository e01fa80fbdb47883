/* The memory terms an NVML query shows: those the CUDA client learned when it registered, or,
 * in a program that only asks NVML (nvidia-smi, a pynvml script), those a view-only
 * registration (REG_VIEW_ONLY) learns. */
#ifndef GS_NVML_VIEW_ONLY_H
#define GS_NVML_VIEW_ONLY_H

#include "memory/memory.h"

/* The limit and what the others of the budget hold, once known. A program with a CUDA client
 * waits for its first connection attempt, as cuMemGetInfo does. Otherwise the first call
 * registers view-only and waits for the answer, at most GEMSHARE_SCHEDULER_TIMEOUT_MS; later
 * calls take what the scheduler sent since without waiting, and register again (without
 * waiting) after the connection was lost. No scheduler: no limit, so the card as it is. */
struct gs_memory_limit gs_nvml_terms(void);

#endif
