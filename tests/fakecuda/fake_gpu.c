/* The simulated GPU as both of the fake's libraries see it, the driver (libcuda.so.1) and NVML
 * (libnvidia-ml.so.1): its configuration, the memory each device has in use, and the devices'
 * UUIDs.
 *
 * Each process has a device of its own, unless FAKECUDA_SHARED_DEVICE names a file: processes
 * naming the same file count their memory on one shared device, as processes on one GPU do
 * (a killed process's memory is not given back, unlike on the GPU), and NVML reads it there,
 * with each process that made a context on a device and its own device memory (the table of
 * FAKE_MAX_PROCESSES below; a dead process's entry is taken by the next that needs one). */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_driver.h"

/* ---- configuration ------------------------------------------------------------------------- */

static struct fake_config config;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;

/* "1073741824", "1G", "512M", "64k": binary multiples. */
static bool parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return false;
    uint64_t mult = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1ull << 10; end++; break;
    case 'M': mult = 1ull << 20; end++; break;
    case 'G': mult = 1ull << 30; end++; break;
    case 'T': mult = 1ull << 40; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B' || *end == 'b')
        end++;
    if (*end == 'B')
        end++;
    if (*end != '\0' || v == 0)
        return false;
    *out = (uint64_t)v * mult;
    return true;
}

static bool parse_uint(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end != '\0')
        return false;
    *out = v;
    return true;
}

/* A byte count from the environment, when set; a bad one is reported as `error`. */
static void env_bytes(const char *name, uint64_t *out, const char *error)
{
    const char *v = getenv(name);
    if (v && *v && !parse_bytes(v, out))
        config.config_error = error;
}

/* A rate in GB/s from the environment, when set; a bad one is reported as `error`. */
static void env_rate(const char *name, double *out, const char *error)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return;
    char *end;
    double rate = strtod(v, &end);
    if (end != v && *end == '\0' && rate > 0 && rate < 1e6)
        *out = rate;
    else
        config.config_error = error;
}

static void config_load(void)
{
    config.device_mem = 16ull << 30;
    config.device_count = 1;
    config.kernel_us = 20;
    const char *v;
    uint64_t n;
    env_bytes("FAKECUDA_DEVICE_MEM", &config.device_mem,
              "FAKECUDA_DEVICE_MEM must be a positive byte count such as 1073741824 or 1G");
    if ((v = getenv("FAKECUDA_DEVICE_COUNT")) && *v) {
        if (parse_uint(v, &n) && n >= 1 && n <= FAKE_MAX_DEVICES)
            config.device_count = (int)n;
        else
            config.config_error = "FAKECUDA_DEVICE_COUNT must be a whole number from 1 to 64";
    }
    if ((v = getenv("FAKECUDA_KERNEL_US")) && *v) {
        if (parse_uint(v, &n))
            config.kernel_us = n;
        else
            config.config_error = "FAKECUDA_KERNEL_US must be a whole number of microseconds";
    }
    if ((v = getenv("FAKECUDA_GPU_SET")) && *v) {
        if (parse_uint(v, &n) && n <= 255)
            config.gpu_set = (int)n;
        else
            config.config_error = "FAKECUDA_GPU_SET must be a whole number from 0 to 255";
    }
    if ((v = getenv("FAKECUDA_PREFETCH_HOLD")) && *v)
        config.prefetch_hold = v;
    env_rate("FAKECUDA_MIGRATE_GBPS", &config.migrate_gbps,
             "FAKECUDA_MIGRATE_GBPS must be a positive rate in GB/s such as 12 or 0.05");
    env_rate("FAKECUDA_PIN_GBPS", &config.pin_gbps,
             "FAKECUDA_PIN_GBPS must be a positive rate in GB/s such as 12 or 0.05");
    env_bytes("FAKECUDA_HOST_PREFETCH_LIMIT", &config.host_prefetch_limit,
              "FAKECUDA_HOST_PREFETCH_LIMIT must be a positive byte count such as 8M");
    env_bytes("FAKECUDA_HOST_PIN_LIMIT", &config.host_pin_limit,
              "FAKECUDA_HOST_PIN_LIMIT must be a positive byte count such as 8M");
    if ((v = getenv("FAKECUDA_INIT_ERROR")) && *v) {
        if (parse_uint(v, &n) && n > 0)
            config.init_error = (CUresult)n;
        else
            config.config_error = "FAKECUDA_INIT_ERROR must be a non-zero CUresult number";
    }
}

const struct fake_config *fake_config(void)
{
    pthread_once(&config_once, config_load);
    return &config;
}

/* ---- memory in use ------------------------------------------------------------------------ */

#define FAKE_MAX_PROCESSES 64

/* One process of the device's: its pid (0: a free entry), the devices it made a context on (a
 * bit each) and its device memory on each, outside managed memory. */
struct process_entry {
    _Atomic int32_t pid;
    _Atomic uint64_t on_devices;
    _Atomic uint64_t device[FAKE_MAX_DEVICES];
};

/* Bytes in use per device; lock-free atomics, so they work in a shared mapping too. */
struct usage {
    _Atomic uint64_t device[FAKE_MAX_DEVICES];
    _Atomic uint64_t managed[FAKE_MAX_DEVICES];
    struct process_entry processes[FAKE_MAX_PROCESSES];
};
static struct usage private_usage;
static struct usage *usage = &private_usage;
static pthread_once_t usage_once = PTHREAD_ONCE_INIT;

static void usage_open(void)
{
    const char *path = getenv("FAKECUDA_SHARED_DEVICE");
    if (!path || !*path)
        return;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct stat st;
    void *p = MAP_FAILED;
    /* Growing an existing file to the same size changes nothing: no race between processes. */
    if (fd >= 0 && fstat(fd, &st) == 0 &&
        (st.st_size >= (off_t)sizeof *usage || ftruncate(fd, sizeof *usage) == 0))
        p = mmap(NULL, sizeof *usage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0)
        close(fd);
    if (p == MAP_FAILED)
        fprintf(stderr, "fakecuda: cannot share device memory through FAKECUDA_SHARED_DEVICE=%s; "
                        "this process gets a device of its own\n", path);
    else
        usage = p;
}

static struct usage *usage_of(void)
{
    pthread_once(&usage_once, usage_open);
    return usage;
}


static bool alive(int32_t pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

/* This process's entry in the table, taken on first use (a free one, or a dead process's);
 * NULL when every entry belongs to a live process. */
static struct process_entry *own_entry(void)
{
    static struct process_entry *mine;
    static pthread_mutex_t taking = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&taking);
    int32_t me = (int32_t)getpid();
    if (mine && atomic_load(&mine->pid) != me)
        mine = NULL; /* a child forked after it was taken */
    for (int i = 0; !mine && i < FAKE_MAX_PROCESSES; i++) {
        struct process_entry *e = &usage_of()->processes[i];
        int32_t was = atomic_load(&e->pid);
        if ((was == 0 || !alive(was)) && atomic_compare_exchange_strong(&e->pid, &was, me)) {
            atomic_store(&e->on_devices, 0);
            for (int d = 0; d < FAKE_MAX_DEVICES; d++)
                atomic_store(&e->device[d], 0);
            mine = e;
        }
    }
    pthread_mutex_unlock(&taking);
    return mine;
}

void fake_process_on_device(CUdevice dev)
{
    struct process_entry *e = own_entry();
    if (e)
        atomic_fetch_or(&e->on_devices, 1ull << dev);
}

unsigned int fake_device_processes(CUdevice dev, unsigned int *pids, uint64_t *used,
                                   unsigned int max)
{
    unsigned int n = 0;
    for (int i = 0; i < FAKE_MAX_PROCESSES && n < max; i++) {
        struct process_entry *e = &usage_of()->processes[i];
        int32_t pid = atomic_load(&e->pid);
        if (alive(pid) && (atomic_load(&e->on_devices) >> dev & 1)) {
            pids[n] = (unsigned int)pid;
            used[n++] = atomic_load(&e->device[dev]);
        }
    }
    return n;
}

bool fake_device_reserve(CUdevice dev, uint64_t bytes)
{
    uint64_t limit = fake_config()->device_mem;
    _Atomic uint64_t *used = &usage_of()->device[dev];
    uint64_t cur = atomic_load(used);
    do {
        if (bytes > limit || cur > limit - bytes)
            return false;
    } while (!atomic_compare_exchange_weak(used, &cur, cur + bytes));
    struct process_entry *e = own_entry();
    if (e)
        atomic_fetch_add(&e->device[dev], bytes);
    return true;
}

void fake_device_unreserve(CUdevice dev, uint64_t bytes)
{
    atomic_fetch_sub(&usage_of()->device[dev], bytes);
    struct process_entry *e = own_entry();
    if (e)
        atomic_fetch_sub(&e->device[dev], bytes);
}

void fake_memory_usage(CUdevice dev, uint64_t *device_bytes, uint64_t *managed_bytes)
{
    *device_bytes = atomic_load(&usage_of()->device[dev]);
    *managed_bytes = atomic_load(&usage_of()->managed[dev]);
}

void fake_managed_count(CUdevice dev, int64_t delta)
{
    atomic_fetch_add(&usage_of()->managed[dev], (uint64_t)delta);
}

/* ---- identity ------------------------------------------------------------------------------ */

void fake_gpu_uuid(CUdevice dev, unsigned char out[16])
{
    memset(out, 0, 16);
    memcpy(out, "gemsharefake", 12);
    out[14] = (unsigned char)fake_config()->gpu_set;
    out[15] = (unsigned char)dev;
}
