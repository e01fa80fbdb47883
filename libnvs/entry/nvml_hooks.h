/* Our NVML wrappers, exported under NVML's names (entry/nvml_hooks.c). */
#ifndef GS_NVML_HOOKS_H
#define GS_NVML_HOOKS_H

#include "nvml/library.h"

/* The wrapper that stands for a hooked NVML function. */
void *gs_nvml_hook(enum gs_nvml_id id);

#endif
