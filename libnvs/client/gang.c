/* The job a process belongs to, from GEMSHARE_GANG or the environment torchrun and
 * torch.distributed launchers set. */
#include "client/gang.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

#define GS_GANG_MAX_SIZE 64u

/* A whole number from 1 to GS_GANG_MAX_SIZE * 1024 (a world may span many nodes), or 0 when
 * unset or unusable (named on stderr). */
static unsigned gs_gang_count(const char *name, const char *text)
{
    if (text == NULL || *text == '\0')
        return 0;
    char *end;
    errno = 0;
    unsigned long n = strtoul(text, &end, 10);
    if (errno || *end != '\0' || text[0] == '-' || n == 0 || n > GS_GANG_MAX_SIZE * 1024u) {
        gs_warn("ignoring %s=%s: expected a number of processes; running without a gang", name,
                text);
        return 0;
    }
    return (unsigned)n;
}

static unsigned gs_gang_env_count(const char *name)
{
    return gs_gang_count(name, getenv(name));
}

/* GEMSHARE_GANG=name:size. */
static bool gs_gang_given(const char *value, struct gs_gang *out)
{
    const char *colon = strrchr(value, ':');
    size_t name_len = colon ? (size_t)(colon - value) : 0;
    unsigned size = colon ? gs_gang_count("GEMSHARE_GANG's size", colon + 1) : 0;
    if (name_len == 0 || size == 0) {
        if (!colon || name_len == 0)
            gs_warn("ignoring GEMSHARE_GANG=%s: expected NAME:SIZE (SIZE: the job's processes "
                    "on this node), or off; running without a gang",
                    value);
        return false;
    }
    if (name_len >= sizeof out->name) {
        gs_warn("ignoring GEMSHARE_GANG: its name is longer than %zu bytes; running without a "
                "gang",
                sizeof out->name - 1);
        return false;
    }
    memcpy(out->name, value, name_len);
    out->local_size = out->world_size = size;
    return true;
}

static bool gs_gang_from_env(struct gs_gang *out)
{
    memset(out, 0, sizeof *out);
    const char *given = getenv("GEMSHARE_GANG");
    const char *run_id = getenv("TORCHELASTIC_RUN_ID");
    const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    if (given != NULL && *given != '\0') {
        if (!strcasecmp(given, "off") || !strcmp(given, "0"))
            return false;
        if (!gs_gang_given(given, out))
            return false;
    } else {
        unsigned world = gs_gang_env_count("WORLD_SIZE");
        if (run_id != NULL && *run_id != '\0')
            snprintf(out->name, sizeof out->name, "torchelastic:%s", run_id);
        else if (addr != NULL && *addr != '\0' && port != NULL && *port != '\0' && world > 0)
            snprintf(out->name, sizeof out->name, "master:%s:%s", addr, port);
        else
            return false;
        unsigned local = gs_gang_env_count("LOCAL_WORLD_SIZE");
        out->world_size = world;
        out->local_size = local ? local : world;
        const char *rank = getenv("RANK");
        out->rank = rank ? (uint32_t)strtoul(rank, NULL, 10) : 0; /* shown in status only */
    }
    /* One process of the job here is no gang; past the cap, the scheduler would refuse it. */
    if (out->local_size < 2)
        return false;
    if (out->local_size > GS_GANG_MAX_SIZE) {
        gs_warn("%u processes of job %s on this node: a gang has at most %u, so each runs on its "
                "own",
                out->local_size, out->name, GS_GANG_MAX_SIZE);
        return false;
    }
    return true;
}

static struct gs_gang gs_gang_read;
static bool gs_gang_member;
static pthread_once_t gs_gang_once = PTHREAD_ONCE_INIT;

static void gs_gang_load(void)
{
    gs_gang_member = gs_gang_from_env(&gs_gang_read);
}

const struct gs_gang *gs_gang(void)
{
    pthread_once(&gs_gang_once, gs_gang_load);
    return gs_gang_member ? &gs_gang_read : NULL;
}
