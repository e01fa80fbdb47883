/* What this process tells the scheduler about itself when it registers. */
#ifndef GS_PROCESS_H
#define GS_PROCESS_H

#include "wire/gemshare_protocol.h"

/* Fills REGISTER's process name (/proc/self/comm), pod namespace and name (POD_NAMESPACE,
 * POD_NAME) and label (GEMSHARE_LABEL); the device and flags are the caller's. */
void gs_process_describe(struct gs_register *m);

#endif
