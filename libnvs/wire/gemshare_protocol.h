/* The gemshare wire protocol, version 8: the C definition of docs/protocol.md.
 * nvs/protocol.py is the Python one; tests/protocol/test_c_header_agrees.py checks they agree.
 * All integers travel little-endian; the structs below are the payloads byte for byte on the
 * little-endian machines gemshare supports (x86-64, aarch64). */
#ifndef GEMSHARE_PROTOCOL_H
#define GEMSHARE_PROTOCOL_H

#include <stdint.h>

#define GS_MAGIC 0x52485347u /* "GSHR" */
#define GS_VERSION 8u
#define GS_MAX_PAYLOAD (1u << 20)
#define GS_MAX_ERROR_TEXT 1024u
#define GS_DEFAULT_SOCKET "/var/run/gemshare/scheduler.sock"

enum gs_msg_type {
    GS_MSG_REGISTER = 1,
    GS_MSG_REGISTERED = 2,
    GS_MSG_REQUEST_LOCK = 3,
    GS_MSG_LOCK_GRANTED = 4,
    GS_MSG_DROP_LOCK = 5,
    GS_MSG_LOCK_RELEASED = 6,
    GS_MSG_LOCK_REVOKED = 7,
    GS_MSG_SCHED_MODE = 8,
    GS_MSG_MEM_REPORT = 9,
    GS_MSG_CONTROL = 10,
    GS_MSG_CONTROL_REPLY = 11,
    GS_MSG_ERROR = 12,
    GS_MSG_DEVICE_UUID = 13,
    GS_MSG_EVICT = 14,
    GS_MSG_MOVED = 15,
    GS_MSG_IDLE_HINT = 16,
    GS_MSG_LIMITS = 17,
    GS_MSG_GANG = 18,
    GS_MSG_PING = 19,
    GS_MSG_PONG = 20,
    GS_MSG_MPS = 21,
};

enum gs_mode { GS_MODE_OFF = 0, GS_MODE_ON = 1, GS_MODE_AUTO = 2 };

enum gs_release_reason {
    GS_RELEASE_DROPPED = 1,
    GS_RELEASE_IDLE = 2,
    GS_RELEASE_REVOKED = 3,
};

/* MPS's client_priority: what CUDA_MPS_CLIENT_PRIORITY takes (any other value is malformed). */
enum gs_mps_priority { GS_MPS_PRIORITY_NORMAL = 0, GS_MPS_PRIORITY_LOW = 1 };

enum gs_error_code {
    GS_ERROR_PROTOCOL = 1,
    GS_ERROR_TOO_MANY_CLIENTS = 2,
    GS_ERROR_VERSION = 3,
    GS_ERROR_PERMISSION = 4,
};

#define GS_REG_UNIFIED_MEMORY (1u << 0)
/* REGISTER: the program's owner keeps it out of MPS (GEMSHARE_MPS=0). */
#define GS_REG_NO_MPS (1u << 1)
/* REGISTER: the program only looks at the device (NVML); it wants LIMITS, never a lock. */
#define GS_REG_VIEW_ONLY (1u << 2)
/* REQUEST_LOCK: the work waiting keeps this client's lower devices until granted. */
#define GS_REQUEST_KEEPING (1u << 0)
#define GS_GRANT_AFTER_WAIT (1u << 0)
#define GS_GRANT_SHARED (1u << 1)
#define GS_GRANT_OTHERS_RAN (1u << 2)
/* DROP_LOCK's evict_bytes or EVICT's bytes: every managed byte on the device. */
#define GS_EVICT_ALL UINT64_MAX
/* IDLE_HINT's idle_release_ms from here up is a floor, below it a ceiling (docs/protocol.md). */
#define GS_IDLE_HINT_FLOOR_MS 250u
#define GS_MOVED_TO_HOST (1u << 0)
#define GS_MOVED_DONE (1u << 1)
#define GS_MOVED_FAILED (1u << 2)

struct gs_header {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t length;
    uint32_t seq;
};

struct gs_register {
    uint32_t device;
    uint32_t flags;
    char process_name[64];
    char pod_namespace[64];
    char pod_name[256];
    char label[64]; /* GEMSHARE_LABEL */
};

struct gs_registered {
    uint64_t client_id;
    uint32_t mode;
    uint32_t tq_seconds;
};

struct gs_request_lock {
    uint32_t device;
    uint32_t flags; /* GS_REQUEST_KEEPING */
};

struct gs_lock_granted {
    uint32_t device;
    uint32_t flags;
    uint64_t quantum_ms;
};

struct gs_drop_lock {
    uint32_t device;
    uint32_t reserved;
    uint64_t evict_bytes; /* move this much to the host before answering */
};

struct gs_evict {
    uint32_t device;
    uint32_t reserved;
    uint64_t bytes;
};

struct gs_moved {
    uint32_t device;
    uint32_t flags;
    uint64_t bytes;      /* moved so far, or in all with GS_MOVED_DONE */
    uint64_t elapsed_us; /* since the move began */
};

struct gs_idle_hint {
    uint32_t device;
    uint32_t idle_release_ms;
    uint64_t evict_bytes; /* what a drop now would ask to move out: prepare for it */
};

struct gs_limits {
    uint64_t memory_limit; /* bytes per device the client may allocate; 0: no limit */
    uint64_t budget_used;  /* what the others sharing that budget (its container) allocated */
};

/* Before REGISTERED: go through the MPS control daemon at pipe_directory. */
struct gs_mps {
    uint32_t active_thread_percentage; /* 1 to 100; 0: all */
    uint32_t client_priority; /* enum gs_mps_priority; a reserved zero early in version 7 */
    char pipe_directory[256];
};

struct gs_gang {
    uint32_t local_size; /* processes of the job on this node: the gang's size */
    uint32_t world_size; /* processes of the whole job */
    uint32_t rank;
    uint32_t reserved;
    char name[128]; /* the job, the same for all its processes */
};

/* PING (client to scheduler) and PONG (its answer, the same token). */
struct gs_ping {
    uint64_t token;
};

struct gs_pong {
    uint64_t token;
};

struct gs_lock_released {
    uint32_t device;
    uint32_t reason;
    uint64_t idle_us; /* GS_RELEASE_IDLE: how long the device had been idle; else 0 */
};

struct gs_lock_revoked {
    uint32_t device;
    uint32_t reserved;
};

struct gs_sched_mode {
    uint32_t mode;
    uint32_t tq_seconds;
};

struct gs_device_uuid {
    uint32_t device;
    uint32_t reserved;
    char gpu_uuid[48]; /* "GPU-" and the UUID as NVML writes it */
};

struct gs_mem_report {
    uint32_t device;
    uint32_t reserved;
    uint64_t allocated_bytes;
    uint64_t device_total_bytes;
};

/* Followed by up to GS_MAX_ERROR_TEXT bytes of UTF-8 text. */
struct gs_error {
    uint32_t code;
    uint32_t reserved;
};

_Static_assert(sizeof(struct gs_header) == 16, "gs_header layout");
_Static_assert(sizeof(struct gs_register) == 456, "gs_register layout");
_Static_assert(sizeof(struct gs_mem_report) == 24, "gs_mem_report layout");
_Static_assert(sizeof(struct gs_device_uuid) == 56, "gs_device_uuid layout");
_Static_assert(sizeof(struct gs_drop_lock) == 16, "gs_drop_lock layout");
_Static_assert(sizeof(struct gs_evict) == 16, "gs_evict layout");
_Static_assert(sizeof(struct gs_moved) == 24, "gs_moved layout");
_Static_assert(sizeof(struct gs_idle_hint) == 16, "gs_idle_hint layout");
_Static_assert(sizeof(struct gs_limits) == 16, "gs_limits layout");
_Static_assert(sizeof(struct gs_lock_released) == 16, "gs_lock_released layout");
_Static_assert(sizeof(struct gs_gang) == 144, "gs_gang layout");
_Static_assert(sizeof(struct gs_mps) == 264, "gs_mps layout");
_Static_assert(sizeof(struct gs_ping) == 8, "gs_ping layout");
_Static_assert(sizeof(struct gs_pong) == 8, "gs_pong layout");

#endif
