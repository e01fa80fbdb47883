/* Milliseconds of CLOCK_MONOTONIC (clock.h). */
#include "base/clock.h"

#include <time.h>

int64_t gs_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
