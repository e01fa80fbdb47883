/* The stand-in's NVML steps: NVML found as pynvml and nvidia-smi find it (dlopen of
 * libnvidia-ml.so.1, then dlsym), or, in standin_linked, called by its exported names. */
#ifndef STANDIN_NVML_H
#define STANDIN_NVML_H

/* How many arguments the NVML step takes; -1 when there is no such step. */
int standin_nvml_arity(const char *step);
/* Runs it, printing one line "<step> key=value ... result=N error=NAME"; false when an NVML call
 * failed. */
bool standin_nvml_run(const char *step, const char *const *args);

#endif
