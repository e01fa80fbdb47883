/* Internal declarations shared by the fake libcuda.so.1 (a test double of the CUDA driver).
 *
 * The fake simulates one process's view of a GPU: device memory that can run out, a worker thread
 * that "executes" queued work in submission order taking simulated time, streams, events, stream
 * capture and graphs, and an event log other processes can interleave with. */
#ifndef FAKE_DRIVER_H
#define FAKE_DRIVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fake_cuda.h"

/* Only the CUDA entry points leave the library; everything else stays internal. */
#define FAKE_API __attribute__((visibility("default")))
/* As many devices as libnvs keeps memory records for, past the ones it gates (16). */
#define FAKE_MAX_DEVICES 64

/* ---- configuration (environment, read once) ------------------------------------------------ */
struct fake_config {
    uint64_t device_mem;     /* FAKECUDA_DEVICE_MEM: bytes of simulated device memory */
    int device_count;        /* FAKECUDA_DEVICE_COUNT */
    uint64_t kernel_us;      /* FAKECUDA_KERNEL_US: simulated time of an ordinary kernel */
    CUresult init_error;     /* FAKECUDA_INIT_ERROR: make cuInit fail with this code */
    int gpu_set;             /* FAKECUDA_GPU_SET: which physical GPUs this process sees (UUIDs) */
    const char *prefetch_hold; /* FAKECUDA_PREFETCH_HOLD: prefetches last until this file
                                  exists (at most FAKE_PREFETCH_HOLD_S seconds) */
    double migrate_gbps;     /* FAKECUDA_MIGRATE_GBPS: a prefetch lasts its bytes at this rate
                                (GB/s); 0: no time */
    double pin_gbps;         /* FAKECUDA_PIN_GBPS: cuMemHostRegister lasts its bytes at this rate
                                (GB/s); 0: no time */
    uint64_t host_prefetch_limit; /* FAKECUDA_HOST_PREFETCH_LIMIT: prefetches to the host past
                                     this many bytes in all are refused; 0: no limit */
    uint64_t host_pin_limit; /* FAKECUDA_HOST_PIN_LIMIT: cuMemHostRegister past that many bytes
                                in all is refused (CUDA_ERROR_OUT_OF_MEMORY) */
    const char *config_error;/* set when an environment value could not be parsed */
};
const struct fake_config *fake_config(void);
#define FAKE_PREFETCH_HOLD_S 60

/* ---- the event log (FAKECUDA_LOG) ---------------------------------------------------------- */
/* One line per event: "<monotonic ns> <pid> <tid> <event> key=value ...", one write(2) each. */
void fake_log(const char *event, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The event name for a call: base plus "_ptsz"/"_ptds" when the called variant has that suffix. */
const char *fake_event_name(const char *base, const char *api, char *buf, size_t len);

/* Returns from the calling entry point with the check's error when it failed. */
#define FAKE_TRY(check)                                                                          \
    do {                                                                                         \
        CUresult fake_try_result = (check);                                                      \
        if (fake_try_result != CUDA_SUCCESS)                                                     \
            return fake_try_result;                                                              \
    } while (0)

/* ---- state, devices, contexts -------------------------------------------------------------- */
/* CUDA_SUCCESS once cuInit succeeded in this process (not in a child forked after that). */
CUresult fake_check_init(void);
CUresult fake_check_device(CUdevice dev);

#define FAKE_CTX_MAGIC 0x46414b45u
struct CUctx_st {
    uint32_t magic;
    CUdevice device;
    unsigned int flags;
    bool primary;
    uint64_t id;
    _Atomic uint64_t last_seq;     /* seq of the newest op submitted in this context */
    struct CUstream_st *legacy;    /* the NULL/legacy stream of this context */
    /* Counts the times the driver destroyed the context's streams (destroy, reset, last primary
     * release): a created stream of an older generation is a dead handle. */
    _Atomic uint32_t generation;
};
/* The calling thread's current context, or NULL. */
CUcontext fake_current_ctx(void);
/* Current context or CUDA_ERROR_INVALID_CONTEXT. */
CUresult fake_require_ctx(CUcontext *out);
bool fake_ctx_valid(CUcontext ctx);
CUcontext fake_primary_ctx(CUdevice dev);

/* ---- memory -------------------------------------------------------------------------------- */
enum fake_mem_kind {
    FAKE_MEM_DEVICE,     /* cuMemAlloc, pitch: counts against the device */
    FAKE_MEM_MANAGED,    /* cuMemAllocManaged: may exceed the device */
    FAKE_MEM_ASYNC,      /* stream-ordered (pool) allocation: counts against the device */
    FAKE_MEM_HOST,       /* pinned host memory */
    FAKE_MEM_VMM_RANGE,  /* cuMemAddressReserve: virtual range, no memory of its own */
    FAKE_MEM_VMM_MAP,    /* cuMemMap of a cuMemCreate handle into a range (pool = handle) */
};
struct fake_alloc {
    uintptr_t base;
    size_t size;          /* bytes the caller asked for (the range it may use) */
    size_t mapped;        /* bytes mapped with mmap */
    enum fake_mem_kind kind;
    CUdevice device;
    CUcontext ctx;
    uint64_t buffer_id;
    void *pool;           /* FAKE_MEM_ASYNC: its pool; FAKE_MEM_VMM_MAP: its handle */
    uint8_t *on_host;     /* FAKE_MEM_MANAGED: a bit per FAKE_MIGRATE_PAGE, set while a prefetch
                             left it on the host; NULL: all on the device */
    struct fake_alloc *next;
};
/* Managed memory is placed by prefetches in pages of this size. */
#define FAKE_MIGRATE_PAGE (2u << 20)
/* Records that [p, p + len) of a managed allocation is now on the host (or a device), and returns
 * how many of its bytes were elsewhere: what the prefetch moves. All of len when p is unknown. */
size_t fake_managed_move(uintptr_t p, size_t len, bool to_host);
/* Whether the address lies in managed memory. */
bool fake_is_managed(uintptr_t p);
/* FAKECUDA_HOST_PREFETCH_LIMIT: whether the host still has `count` bytes for prefetches to it
 * (counted once given). */
bool fake_host_room(size_t count);
/* Copy of the registry entry holding address p (any byte inside it); false when none does. */
bool fake_alloc_lookup(uintptr_t p, struct fake_alloc *out);
/* Device memory bytes in use on dev (device + async + VMM physical; managed counted apart). */
void fake_memory_usage(CUdevice dev, uint64_t *device_bytes, uint64_t *managed_bytes);
/* Reserve/return simulated device memory; reserve fails (false) past the device size. */
bool fake_device_reserve(CUdevice dev, uint64_t bytes);
void fake_device_unreserve(CUdevice dev, uint64_t bytes);
/* Managed bytes allocated (delta > 0) or freed on dev: never limited. */
void fake_managed_count(CUdevice dev, int64_t delta);
/* This process made a context on dev: from now on NVML lists it there (fake_gpu.c). */
void fake_process_on_device(CUdevice dev);
/* The processes NVML lists on dev, as a driver counts them: each live process that made a
 * context there, with the device memory it has in use outside managed memory (which the driver
 * does not count per process). Returns how many were written, at most `max`. */
unsigned int fake_device_processes(CUdevice dev, unsigned int *pids, uint64_t *used,
                                   unsigned int max);
/* The device's UUID bytes ("gemsharefake", FAKECUDA_GPU_SET, the ordinal), as the driver's
 * cuDeviceGetUuid and NVML's nvmlDeviceGetUUID both give them. */
void fake_gpu_uuid(CUdevice dev, unsigned char out[16]);
/* Anonymous, lazily backed memory: huge sizes cost no RAM until touched. */
void *fake_map_bytes(size_t size);
void fake_unmap_bytes(void *p, size_t size);
/* Register/unregister an allocation in the registry (the registry owns no memory). */
void fake_alloc_insert(const struct fake_alloc *a);
bool fake_alloc_remove(uintptr_t base, struct fake_alloc *out);
/* Gives a removed registry entry's memory back (bytes, device accounting) and logs "free". */
void fake_release(const struct fake_alloc *a, const char *api);
/* Frees the pool allocation at base: a stream-ordered free reached on the device, or cuMemFree. */
void fake_free_async_now(uintptr_t base, const char *api);
/* A pool allocation of `size` bytes is gone: the pool no longer holds it. */
void fake_pool_forget(void *pool, size_t size);
/* The context was destroyed, reset or released for the last time: its device, managed and pool
 * allocations are freed (logged as "free" with api=). Its work must have finished. */
void fake_memory_free_context(CUcontext ctx, const char *api);

/* ---- streams, the simulated device, events ------------------------------------------------- */
#define FAKE_STREAM_MAGIC 0x5354524du
struct fake_capture;
struct CUstream_st {
    uint32_t magic;
    uint64_t id;
    CUcontext ctx;
    unsigned int flags;
    int priority;
    bool legacy;                  /* the context's NULL stream */
    bool per_thread;              /* a thread's per-thread default stream */
    uint32_t ctx_generation;      /* created streams: the context's generation at creation */
    _Atomic uint64_t last_seq;    /* seq of the newest op submitted to it */
    struct fake_capture *capture; /* non-NULL while capturing; only under the capture lock */
};

/* How the caller named the stream: the legacy function or its _ptsz/_ptds twin. */
struct fake_call {
    const char *api;     /* exact entry point name, for the log */
    bool per_thread;     /* NULL stream means the per-thread default stream */
};

/* Define an entry point and its per-thread twin, both calling name##_impl(&call, args...). */
#define FAKE_TWIN_PAIR(suffix, name, params, ...)                                                \
    FAKE_API CUresult name params                                                               \
    {                                                                                            \
        static const struct fake_call call = {#name, false};                                     \
        return name##_impl(&call, __VA_ARGS__);                                                  \
    }                                                                                            \
    FAKE_API CUresult name##suffix params                                                       \
    {                                                                                            \
        static const struct fake_call call = {#name #suffix, true};                              \
        return name##_impl(&call, __VA_ARGS__);                                                  \
    }
#define FAKE_PTSZ_PAIR(name, params, ...) FAKE_TWIN_PAIR(_ptsz, name, params, __VA_ARGS__)
#define FAKE_PTDS_PAIR(name, params, ...) FAKE_TWIN_PAIR(_ptds, name, params, __VA_ARGS__)

/* Resolve a CUstream argument (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a handle). */
CUresult fake_stream_resolve(CUstream h, bool per_thread, struct CUstream_st **out);

enum fake_op_kind {
    FAKE_OP_KERNEL,
    FAKE_OP_COPY,       /* memcpy of a contiguous or 2D/3D region */
    FAKE_OP_SET,        /* memset of 1/2/4-byte values, optionally 2D */
    FAKE_OP_HOST_FN,
    FAKE_OP_EVENT,      /* event record */
    FAKE_OP_FREE_ASYNC,
    FAKE_OP_PREFETCH,
    FAKE_OP_NOP,        /* a marker with no effect (e.g. attach, advise-like stream ops) */
    FAKE_OP_DISCARD,    /* managed pages lose their contents (u.prefetch: ptr and len) */
};
/* What discarded managed memory reads as. */
#define FAKE_DISCARDED_BYTE 0xdb
struct fake_op {
    enum fake_op_kind kind;
    uint64_t duration_us;
    const char *what;    /* short label for exec_begin/exec_end */
    union {
        struct { char name[48]; uintptr_t fill_ptr; size_t fill_len; int fill_value; } kernel;
        struct { uintptr_t dst, src; size_t width, height, depth;
                 size_t dst_pitch, src_pitch, dst_slice, src_slice; } copy;
        struct { uintptr_t dst; size_t pitch, width, height; unsigned int value; int elem; } set;
        struct { CUhostFn fn; void *user; CUstreamCallback cb; CUstream cb_stream; } host;
        struct { struct CUevent_st *event; } event;
        struct { uintptr_t ptr; } free_async;
        struct { uintptr_t ptr; size_t len; int dst; } prefetch;
    } u;
    /* The allocations a copy, prefetch or discard touches, as they were when it was queued
     * (filled in by the queue). One freed since is not touched: the driver refuses work on
     * memory being freed, or finishes it before the free returns, never writes to it after. */
    uintptr_t allocs[2];
};

/* Submit an op on a stream (or record it into the stream's capture). Returns the error a real
 * driver would give (capture invalidated, implicit dependency on a capture). */
CUresult fake_submit(const struct fake_call *call, const char *event, struct CUstream_st *s,
                     const struct fake_op *op, const char *details);
/* Submit n ops as one call (a graph launch); *last_seq gets the seq of the last, or 0 when
 * they were captured instead of queued. */
CUresult fake_submit_ops(const struct fake_call *call, const char *event, struct CUstream_st *s,
                         const struct fake_op *ops, size_t n, const char *details,
                         uint64_t *last_seq);
/* Submit and wait for it to finish: the synchronous memcpy/memset behaviour. */
CUresult fake_submit_sync(const struct fake_call *call, const char *event, struct CUstream_st *s,
                          const struct fake_op *op, const char *details);
/* Wait until the simulated device has finished every op up to seq. */
void fake_wait_seq(uint64_t seq);
uint64_t fake_completed_seq(void);
/* Run one op (on the worker thread); used for queued ops and graph nodes. */
void fake_execute(const struct fake_op *op, uint64_t seq, uint64_t stream_id, CUdevice device);

#define FAKE_EVENT_MAGIC 0x45564e54u
struct CUevent_st {
    uint32_t magic;
    unsigned int flags;
    CUcontext ctx;
    _Atomic uint64_t seq;            /* seq of the latest record, 0 when never recorded */
    _Atomic uint64_t done_ns;        /* when the device reached the record */
    struct fake_capture *capture;    /* last recorded inside this capture; capture lock */
};

/* ---- stream capture and graphs ------------------------------------------------------------- */
/* Whether a capture sequence forbids a "potentially unsafe" call (cuCtxSynchronize, cuMemAlloc,
 * ...) on this thread; if so the conflicting captures are invalidated, as the driver does. */
CUresult fake_capture_check_unsafe(const char *api);
/* Records ops into the capture of s when s is capturing: sets *captured. */
CUresult fake_capture_record(struct CUstream_st *s, const struct fake_op *ops, size_t n,
                             bool *captured);
/* Whether any blocking stream of ctx is capturing (legacy stream use then conflicts). */
bool fake_capture_blocks_legacy(CUcontext ctx);
/* Invalidates the capture of s if it is capturing; returns whether it was. */
bool fake_capture_invalidate_stream(struct CUstream_st *s);
/* Event record: when s is capturing the event marks that capture (returns true), else it is
 * cleared of any earlier capture (returns false) and recorded on the device. */
bool fake_capture_event_record(struct CUevent_st *e, struct CUstream_st *s);
/* Whether e was last recorded inside a capture that is still going on. */
bool fake_capture_event_captured(struct CUevent_st *e);
/* cuStreamWaitEvent on an event recorded in a capture: s joins that capture (fork/join). */
void fake_capture_join(struct CUstream_st *s, struct CUevent_st *e);

/* ---- kernels ------------------------------------------------------------------------------- */
/* Handles returned by cuModuleGetFunction / cuLibraryGetKernel (a CUkernel works as a CUfunction,
 * as on the real driver). */
#define FAKE_FUNC_MAGIC 0x46554e43u
struct CUfunc_st {
    uint32_t magic;
    char name[48];
};

/* ---- helpers ------------------------------------------------------------------------------- */
uint64_t fake_now_ns(void);
void fake_sleep_us(uint64_t us);
/* A process-wide counter for handle ids, buffer ids, capture ids. */
uint64_t fake_next_id(void);

#endif
