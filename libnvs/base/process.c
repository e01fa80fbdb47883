/* What this process tells the scheduler about itself: the same for the CUDA client's
 * registration and for a view-only one (an NVML query). */
#define _GNU_SOURCE
#include "base/process.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"

static void gs_process_name(char *out, size_t size)
{
    int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, out, size - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n > 0) {
        out[n] = '\0';
        out[strcspn(out, "\n")] = '\0';
    } else {
        snprintf(out, size, "%s", program_invocation_short_name);
    }
}

void gs_process_describe(struct gs_register *m)
{
    const struct gs_config *cfg = gs_config();
    gs_process_name(m->process_name, sizeof m->process_name);
    strncpy(m->pod_namespace, cfg->pod_namespace, sizeof m->pod_namespace);
    strncpy(m->pod_name, cfg->pod_name, sizeof m->pod_name);
    strncpy(m->label, cfg->label, sizeof m->label);
}
