/* The client thread's wake-up: an eventfd, since writes from many threads collapse into one
 * readable counter and a full counter still means "wake up". */
#include "gate/wake.h"

#include <stdatomic.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

static atomic_int gs_wake_descriptor = -1;

int gs_wake_create(void)
{
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd >= 0)
        atomic_store(&gs_wake_descriptor, fd);
    return fd;
}

int gs_wake_fd(void)
{
    return atomic_load(&gs_wake_descriptor);
}

void gs_wake_drain(void)
{
    uint64_t count;
    ssize_t r = read(atomic_load(&gs_wake_descriptor), &count, sizeof count);
    (void)r; /* EAGAIN: another drain took it, which is as good */
}

void gs_wake(void)
{
    int fd = atomic_load(&gs_wake_descriptor);
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t n = write(fd, &one, sizeof one);
        (void)n; /* a full counter already means "wake up" */
    }
}

void gs_wake_after_fork_child(void)
{
    int fd = atomic_exchange(&gs_wake_descriptor, -1);
    if (fd >= 0)
        close(fd);
}
