/* The host's and the memory cgroups' free memory, from /proc and the cgroup file systems. The
 * cgroup a process is in names the directory of each hierarchy from its root: every directory
 * from there up to the mount's root may carry a limit, and the tightest one counts. Page cache
 * that the kernel drops before it kills anything (inactive file pages) is not counted as used. */
#include "memory/host_room.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#define GS_V1_MOUNT "/sys/fs/cgroup/memory"
#define GS_V2_MOUNT "/sys/fs/cgroup"
/* cgroup v1 writes "no limit" as a huge number (PAGE_COUNTER_MAX pages). */
#define GS_NO_LIMIT (1ull << 62)
#define GS_FLOOR_SHARE 16

static _Atomic uint64_t gs_last_limit;
static atomic_int gs_last_limit_cgroup;

/* The whole of a small file, NUL-terminated; false when it cannot be read. */
static bool gs_read_small(const char *path, char *out, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    size_t got = 0;
    for (ssize_t n; got + 1 < size && (n = read(fd, out + got, size - 1 - got)) > 0;)
        got += (size_t)n;
    close(fd);
    out[got] = '\0';
    return got > 0;
}

/* The number a file holds ("max": no limit). */
static bool gs_read_number(const char *dir, const char *name, uint64_t *out)
{
    char path[4096 + 64], text[64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!gs_read_small(path, text, sizeof text))
        return false;
    if (strncmp(text, "max", 3) == 0) {
        *out = UINT64_MAX;
        return true;
    }
    char *end;
    *out = strtoull(text, &end, 10);
    return end != text;
}

/* A key's value in a "key value" file (memory.stat, /proc/meminfo); 0 when absent. */
static uint64_t gs_read_key(const char *path, const char *key)
{
    static _Thread_local char text[16384];
    if (!gs_read_small(path, text, sizeof text))
        return 0;
    size_t len = strlen(key);
    for (char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1
                                                                     : NULL)
        if (strncmp(line, key, len) == 0 && (line[len] == ' ' || line[len] == ':'))
            return strtoull(line + len + 1 + strspn(line + len + 1, " :"), NULL, 10);
    return 0;
}

/* This process's directory in the hierarchy that has the memory controller: cgroup v2's when
 * its files are there, else v1's. False when neither is found. */
static bool gs_memory_cgroup(char *dir, size_t size, char *mount, size_t mount_size, bool *v2)
{
    static _Thread_local char text[8192];
    if (!gs_read_small("/proc/self/cgroup", text, sizeof text))
        return false;
    const char *v1_path = NULL, *v2_path = NULL;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *controllers = strchr(line, ':');
        char *path = controllers ? strchr(controllers + 1, ':') : NULL;
        if (path == NULL)
            continue;
        *path++ = '\0';
        controllers++;
        if (*controllers == '\0')
            v2_path = path;
        for (char *c = controllers; c && *c; c = strchr(c, ',') ? strchr(c, ',') + 1 : NULL)
            if (strncmp(c, "memory", 6) == 0 && (c[6] == ',' || c[6] == '\0'))
                v1_path = path;
    }
    *v2 = v1_path == NULL && v2_path != NULL && access(GS_V2_MOUNT "/memory.stat", R_OK) == 0;
    const char *root = *v2 ? GS_V2_MOUNT : GS_V1_MOUNT;
    const char *path = *v2 ? v2_path : v1_path;
    if (path == NULL)
        return false;
    snprintf(mount, mount_size, "%s", root);
    snprintf(dir, size, "%s%s", root, path);
    /* In a cgroup namespace the path may not be under this mount: its root is ours then. */
    if (access(dir, R_OK) != 0)
        snprintf(dir, size, "%s", root);
    return true;
}

/* Free memory of one cgroup directory: its limit less what it uses; UINT64_MAX without one. */
static uint64_t gs_cgroup_free(const char *dir, bool v2, uint64_t *limit)
{
    uint64_t used;
    bool read = v2 ? gs_read_number(dir, "memory.max", limit) &&
                         gs_read_number(dir, "memory.current", &used)
                   : gs_read_number(dir, "memory.limit_in_bytes", limit) &&
                         gs_read_number(dir, "memory.usage_in_bytes", &used);
    if (!read || *limit >= GS_NO_LIMIT) {
        *limit = UINT64_MAX;
        return UINT64_MAX;
    }
    char stat[4096 + 64];
    snprintf(stat, sizeof stat, "%s/memory.stat", dir);
    uint64_t dropped = gs_read_key(stat, v2 ? "inactive_file" : "total_inactive_file");
    used = used > dropped ? used - dropped : 0;
    return used < *limit ? *limit - used : 0;
}

/* What is free now under the tightest limit, and the floor kept below it (*floor). */
static uint64_t gs_host_free(uint64_t *floor)
{
    uint64_t free_now = UINT64_MAX, limit = UINT64_MAX;
    bool cgroup_limit = false;
    static _Thread_local char dir[4096], mount[64];
    bool v2;
    if (gs_memory_cgroup(dir, sizeof dir, mount, sizeof mount, &v2)) {
        for (;;) {
            uint64_t here_limit, here = gs_cgroup_free(dir, v2, &here_limit);
            if (here < free_now)
                free_now = here;
            if (here_limit < limit) {
                limit = here_limit;
                cgroup_limit = true;
            }
            char *slash = strrchr(dir, '/');
            if (strcmp(dir, mount) == 0 || slash == NULL || slash - dir < (long)strlen(mount))
                break;
            *slash = '\0';
        }
    }
    uint64_t available = gs_read_key("/proc/meminfo", "MemAvailable") << 10;
    uint64_t total = gs_read_key("/proc/meminfo", "MemTotal") << 10;
    if (available > 0 && available < free_now)
        free_now = available;
    if (total > 0 && total < limit) {
        limit = total;
        cgroup_limit = false;
    }
    atomic_store(&gs_last_limit, limit);
    atomic_store(&gs_last_limit_cgroup, cgroup_limit);
    *floor = limit == UINT64_MAX ? GS_HOST_FLOOR : limit / GS_FLOOR_SHARE;
    if (*floor < GS_HOST_FLOOR)
        *floor = GS_HOST_FLOOR;
    return free_now;
}

static uint64_t gs_room_above(uint64_t free_now, uint64_t floor)
{
    if (free_now == UINT64_MAX)
        return UINT64_MAX;
    return free_now > floor ? free_now - floor : 0;
}

uint64_t gs_host_room(void)
{
    uint64_t floor, free_now = gs_host_free(&floor);
    return gs_room_above(free_now, floor);
}

bool gs_host_pressed(uint64_t *room)
{
    uint64_t floor, free_now = gs_host_free(&floor);
    *room = gs_room_above(free_now, floor);
    return free_now != UINT64_MAX && free_now < floor / 4 * 3;
}

uint64_t gs_host_room_limit(void)
{
    return atomic_load(&gs_last_limit);
}

int gs_host_room_limit_is_cgroup(void)
{
    return atomic_load(&gs_last_limit_cgroup);
}

/* flock() holds per open file: the threads of one process take the mutex first. */
static pthread_mutex_t gs_claim_mu = PTHREAD_MUTEX_INITIALIZER;
static int gs_claim_fd = -1;
/* Urgent claims of this process hold the urgent lock shared, through their own descriptor,
 * while any is under way; claims ahead probe it through another (a second flock on the same
 * descriptor would convert the first), which sees this process's urgent claims as it sees
 * others'. Under gs_urgent_mu: */
static pthread_mutex_t gs_urgent_mu = PTHREAD_MUTEX_INITIALIZER;
static int gs_urgent_count;
static int gs_urgent_fd = -1, gs_probe_fd = -1;

/* Read-only is enough to lock a file; never through a planted link. */
static int gs_open_lock(int *fd, const char *path)
{
    if (*fd < 0)
        *fd = open(path, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    return *fd;
}

static void gs_flock(int fd, int operation)
{
    if (fd >= 0)
        while (flock(fd, operation) != 0 && errno == EINTR)
            ;
}

static void gs_urgent_enter(void)
{
    pthread_mutex_lock(&gs_urgent_mu);
    if (gs_urgent_count++ == 0)
        gs_flock(gs_open_lock(&gs_urgent_fd, GS_HOST_URGENT_LOCK), LOCK_SH);
    pthread_mutex_unlock(&gs_urgent_mu);
}

static void gs_urgent_leave(void)
{
    pthread_mutex_lock(&gs_urgent_mu);
    if (--gs_urgent_count == 0)
        gs_flock(gs_urgent_fd, LOCK_UN);
    pthread_mutex_unlock(&gs_urgent_mu);
}

/* Whether an urgent claim is under way in this process or another. */
static bool gs_urgent_waits(void)
{
    pthread_mutex_lock(&gs_urgent_mu);
    int fd = gs_open_lock(&gs_probe_fd, GS_HOST_URGENT_LOCK);
    bool held = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (fd >= 0 && !held)
        flock(fd, LOCK_UN);
    pthread_mutex_unlock(&gs_urgent_mu);
    return held;
}

void gs_host_claim_begin(bool urgent)
{
    if (urgent)
        gs_urgent_enter();
    pthread_mutex_lock(&gs_claim_mu);
    int fd = gs_open_lock(&gs_claim_fd, GS_HOST_ROOM_LOCK);
    if (urgent || fd < 0) {
        gs_flock(fd, LOCK_EX);
        return;
    }
    /* Ahead of need: never queued in flock, where the kernel may hand the lock to this claim
     * before a waiting move's; it looks again each millisecond, after any urgent claim. */
    struct timespec pause = {0, 1000000};
    for (int waited = 0;; waited++) {
        bool yield = waited < GS_HOST_YIELD_MS && gs_urgent_waits();
        if (!yield && flock(fd, LOCK_EX | LOCK_NB) == 0)
            return;
        if (waited >= GS_HOST_YIELD_MS) {
            gs_flock(fd, LOCK_EX);
            return;
        }
        pthread_mutex_unlock(&gs_claim_mu); /* this process's urgent claims go meanwhile */
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&gs_claim_mu);
    }
}

void gs_host_claim_end(bool urgent)
{
    if (gs_claim_fd >= 0)
        flock(gs_claim_fd, LOCK_UN);
    pthread_mutex_unlock(&gs_claim_mu);
    if (urgent)
        gs_urgent_leave();
}

void gs_host_room_after_fork_child(void)
{
    /* The parent's threads may have held either at the fork; the descriptor's lock is the
     * parent's (flock locks belong to the open file, which the child shares). */
    pthread_mutex_init(&gs_claim_mu, NULL);
    pthread_mutex_init(&gs_urgent_mu, NULL);
    int *fds[] = {&gs_claim_fd, &gs_urgent_fd, &gs_probe_fd};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) {
        if (*fds[i] >= 0)
            close(*fds[i]);
        *fds[i] = -1;
    }
    gs_urgent_count = 0;
}
