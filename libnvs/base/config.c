/* Parses GEMSHARE_* once (but GEMSHARE_DEBUG, which log.c reads, and the gang, gang.c). A bad
 * value is named on stderr with what is accepted, and the default is used: a typo must not take
 * down the user's training run. */
#include "base/config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "wire/gemshare_protocol.h"

#define GS_DEFAULT_IDLE_RELEASE_MS 250u
#define GS_MAX_IDLE_RELEASE_MS 3600000u
#define GS_DEFAULT_MOVE_STREAMS 4u
#define GS_MAX_STAGING_MIB (1ull << 30) /* 1 PiB: past any host */
#define GS_DEFAULT_SCHEDULER_TIMEOUT_MS 10000u
/* Below this a busy host's scheduling delays alone would look like a stopped scheduler. */
#define GS_MIN_SCHEDULER_TIMEOUT_MS 100u
#define GS_MAX_SCHEDULER_TIMEOUT_MS 3600000u

static struct gs_config gs_cfg;
static pthread_once_t gs_cfg_once = PTHREAD_ONCE_INIT;

static bool gs_env_bool(const char *name, bool fallback)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return fallback;
    if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"))
        return true;
    if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off"))
        return false;
    gs_warn("ignoring %s=%s: expected 1 or 0; using %d", name, v, fallback ? 1 : 0);
    return fallback;
}

/* A whole number from min to max; `what` says what is accepted, e.g. "whole milliseconds". */
static unsigned gs_env_uint(const char *name, unsigned fallback, unsigned min, unsigned max,
                            const char *what)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return fallback;
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (errno || *end != '\0' || v[0] == '-' || n < min || n > max) {
        gs_warn("ignoring %s=%s: expected %s from %u to %u; using %u", name, v, what, min, max,
                fallback);
        return fallback;
    }
    return (unsigned)n;
}

/* GEMSHARE_STAGING_MAX_MIB: whole MiB, or unset for no cap of its own. */
static uint64_t gs_env_staging_max(void)
{
    const char *v = getenv("GEMSHARE_STAGING_MAX_MIB");
    if (v == NULL || *v == '\0')
        return UINT64_MAX;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || *end != '\0' || v[0] == '-' || n > GS_MAX_STAGING_MIB) {
        gs_warn("ignoring GEMSHARE_STAGING_MAX_MIB=%s: expected whole MiB from 0 to %llu; staging "
                "memory is then bounded only by the host's and the cgroup's free memory",
                v, (unsigned long long)GS_MAX_STAGING_MIB);
        return UINT64_MAX;
    }
    return (uint64_t)n << 20;
}

static void gs_env_text(const char *name, char *out, size_t size)
{
    const char *v = getenv(name);
    if (v != NULL)
        strncpy(out, v, size - 1);
}

static void gs_config_load(void)
{
    gs_cfg.single_oversub = gs_env_bool("GEMSHARE_ENABLE_SINGLE_OVERSUB", false);
    gs_cfg.require = gs_env_bool("GEMSHARE_REQUIRE_SCHEDULER", false);
    gs_cfg.unified_memory = gs_env_bool("GEMSHARE_UNIFIED_MEMORY", true);
    gs_cfg.mps = gs_env_bool("GEMSHARE_MPS", true);
    gs_cfg.swap_in_wait = gs_env_bool("GEMSHARE_SWAP_IN_WAIT", true);
    gs_cfg.move_copy = gs_env_bool("GEMSHARE_MOVE_COPY", true);
    gs_cfg.populate = gs_env_bool("GEMSHARE_POPULATE", true);
    gs_cfg.staging_max = gs_env_staging_max();
    gs_cfg.idle_release_ms = gs_env_uint("GEMSHARE_IDLE_RELEASE_MS", GS_DEFAULT_IDLE_RELEASE_MS, 0,
                                         GS_MAX_IDLE_RELEASE_MS, "whole milliseconds");
    gs_cfg.move_streams = gs_env_uint("GEMSHARE_MOVE_STREAMS", GS_DEFAULT_MOVE_STREAMS, 1,
                                      GS_MAX_MOVE_STREAMS, "a number of streams");
    gs_cfg.scheduler_timeout_ms =
        gs_env_uint("GEMSHARE_SCHEDULER_TIMEOUT_MS", GS_DEFAULT_SCHEDULER_TIMEOUT_MS,
                    GS_MIN_SCHEDULER_TIMEOUT_MS, GS_MAX_SCHEDULER_TIMEOUT_MS, "whole milliseconds");

    const char *socket = getenv("GEMSHARE_SOCKET");
    if (socket == NULL || *socket == '\0')
        socket = GS_DEFAULT_SOCKET;
    if (strlen(socket) >= sizeof gs_cfg.socket_path) {
        gs_cfg.socket_too_long = true;
        gs_warn("GEMSHARE_SOCKET=%s is longer than a Unix socket path may be (%zu bytes); "
                "use a shorter path",
                socket, sizeof gs_cfg.socket_path - 1);
    }
    strncpy(gs_cfg.socket_path, socket, sizeof gs_cfg.socket_path - 1);

    gs_env_text("POD_NAME", gs_cfg.pod_name, sizeof gs_cfg.pod_name);
    gs_env_text("POD_NAMESPACE", gs_cfg.pod_namespace, sizeof gs_cfg.pod_namespace);
    gs_env_text("GEMSHARE_LABEL", gs_cfg.label, sizeof gs_cfg.label);
}

const struct gs_config *gs_config(void)
{
    pthread_once(&gs_cfg_once, gs_config_load);
    return &gs_cfg;
}
