/* The event log: FAKECUDA_LOG=path appends one line per event.
 *
 * Each line is built in a buffer and written with a single write(2) on an O_APPEND descriptor, so
 * lines from several threads and processes never interleave inside a line. Timestamps are
 * CLOCK_MONOTONIC nanoseconds, which every process on the machine shares. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fake_driver.h"

static int log_fd = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_open(void)
{
    const char *path = getenv("FAKECUDA_LOG");
    if (!path || !*path)
        return;
    log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (log_fd < 0)
        fprintf(stderr, "fakecuda: cannot open FAKECUDA_LOG=%s: %s\n", path, strerror(errno));
}

uint64_t fake_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void fake_log(const char *event, const char *fmt, ...)
{
    pthread_once(&log_once, log_open);
    if (log_fd < 0)
        return;
    char line[1024];
    /* getpid() every time: a forked child must log its own pid. */
    int n = snprintf(line, sizeof line, "%llu %d %ld %s", (unsigned long long)fake_now_ns(),
                     (int)getpid(), (long)syscall(SYS_gettid), event);
    if (fmt && *fmt && n < (int)sizeof line - 2) {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
        va_end(ap);
        n += m < 0 ? 0 : m;
    }
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t ignored = write(log_fd, line, (size_t)n);
    (void)ignored;
}

const char *fake_event_name(const char *base, const char *api, char *buf, size_t len)
{
    size_t n = strlen(api);
    const char *suffix = "";
    if (n > 5 && (strcmp(api + n - 5, "_ptsz") == 0 || strcmp(api + n - 5, "_ptds") == 0))
        suffix = api + n - 5;
    snprintf(buf, len, "%s%s", base, suffix);
    return buf;
}
