/* stderr logging with a "gemshare[pid]" prefix. */
#include "base/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static bool gs_debug_on;
static pthread_once_t gs_debug_once = PTHREAD_ONCE_INIT;

/* At the first debug line, not in the constructor: like the rest of the environment. */
static void gs_debug_load(void)
{
    const char *debug = getenv("GEMSHARE_DEBUG");
    gs_debug_on = debug != NULL && (!strcmp(debug, "1") || !strcasecmp(debug, "true"));
}

/* Debug lines carry the wall-clock time, to the millisecond, to be read beside the
 * scheduler's log. */
static void gs_vlog(bool stamped, const char *fmt, va_list ap)
{
    int saved_errno = errno;
    char line[1024];
    int n = snprintf(line, sizeof line, "gemshare[%d]: ", (int)getpid());
    struct timespec now;
    struct tm local;
    if (stamped && clock_gettime(CLOCK_REALTIME, &now) == 0 &&
        localtime_r(&now.tv_sec, &local) != NULL)
        n += snprintf(line + n, sizeof line - (size_t)n, "%02d:%02d:%02d.%03ld ", local.tm_hour,
                      local.tm_min, local.tm_sec, now.tv_nsec / 1000000);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    /* One write keeps the line whole; a failed write to stderr has nowhere to be reported. */
    ssize_t written = write(STDERR_FILENO, line, len);
    (void)written;
    errno = saved_errno;
}

void gs_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gs_vlog(false, fmt, ap);
    va_end(ap);
}

bool gs_debug_enabled(void)
{
    pthread_once(&gs_debug_once, gs_debug_load);
    return gs_debug_on;
}

void gs_debug(const char *fmt, ...)
{
    if (!gs_debug_enabled())
        return;
    va_list ap;
    va_start(ap, fmt);
    gs_vlog(true, fmt, ap);
    va_end(ap);
}
