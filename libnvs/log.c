/* stderr logging with a "gemshare[pid]" prefix. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "config.h"

static void gs_vlog(const char *fmt, va_list ap)
{
    int saved_errno = errno;
    char line[1024];
    int n = snprintf(line, sizeof line, "gemshare[%d]: ", (int)getpid());
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
    gs_vlog(fmt, ap);
    va_end(ap);
}

bool gs_debug_enabled(void)
{
    return gs_config()->debug;
}

void gs_debug(const char *fmt, ...)
{
    if (!gs_debug_enabled())
        return;
    va_list ap;
    va_start(ap, fmt);
    gs_vlog(fmt, ap);
    va_end(ap);
}
