/* The monotonic clock the client thread measures intervals and deadlines with. */
#ifndef GS_CLOCK_H
#define GS_CLOCK_H

#include <stdint.h>

/* Milliseconds of CLOCK_MONOTONIC. */
int64_t gs_now_ms(void);

#endif
