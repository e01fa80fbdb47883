/* Lines on stderr, "gemshare[pid]: ...", one write(2) each so processes do not interleave. */
#ifndef GS_LOG_H
#define GS_LOG_H

#include <stdbool.h>

/* Always printed: warnings and errors the user must see. */
void gs_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Printed only with GEMSHARE_DEBUG=1 (or true), which is read at the first of them. */
void gs_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool gs_debug_enabled(void);

#endif
