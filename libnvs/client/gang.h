/* Which distributed job this process is one of, read from its launcher's environment, so that
 * the scheduler grants the job's locks together (GANG, docs/protocol.md). */
#ifndef GS_GANG_H
#define GS_GANG_H

#include "wire/gemshare_protocol.h"

/* The job of 2 or more processes on this node that the process belongs to, read once (at the
 * client's start, never in the constructor); NULL when none: GEMSHARE_GANG=name:size (size: the
 * job's processes on this node; GEMSHARE_GANG=off: no gang whatever the launcher says), else
 * torchrun's TORCHELASTIC_RUN_ID, else MASTER_ADDR and MASTER_PORT with WORLD_SIZE;
 * LOCAL_WORLD_SIZE gives the size on this node where set. A value that cannot be used is named
 * on stderr once, and the process runs without a gang. */
const struct gs_gang *gs_gang(void);

#endif
