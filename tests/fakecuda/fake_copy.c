/* The memcpy, memset and prefetch families, plain and per-thread (_ptds/_ptsz).
 *
 * Copies and sets are queued like kernels and move real bytes when the simulated device reaches
 * them. The synchronous forms queue on the legacy (or per-thread) default stream and wait, so they
 * also wait for earlier work, as the real ones do. Device ranges are checked against the
 * allocation registry so a bad pointer is an error here, not a crash in the device thread. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_driver.h"

#define FAKE_ARRAY_MAGIC 0x41525259u

struct CUarray_st {
    uint32_t magic;
    uintptr_t data;
    size_t pitch, height, bytes;
    CUdevice device;
};

/* ---- arrays (linear storage) --------------------------------------------------------------- */

static size_t format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    }
    return 0;
}

FAKE_API CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    CUcontext ctx;
    FAKE_TRY(fake_require_ctx(&ctx));
    size_t elem = desc ? format_bytes(desc->Format) : 0;
    if (!pHandle || !elem || !desc->Width || !desc->NumChannels ||
        (desc->NumChannels != 1 && desc->NumChannels != 2 && desc->NumChannels != 4))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUarray_st *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->pitch = desc->Width * elem * desc->NumChannels;
    a->height = desc->Height ? desc->Height : 1;
    a->bytes = a->pitch * a->height;
    a->device = ctx->device;
    void *p = NULL;
    if (!fake_device_reserve(ctx->device, a->bytes)) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!(p = fake_map_bytes(a->bytes))) {
        fake_device_unreserve(ctx->device, a->bytes);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->data = (uintptr_t)p;
    a->magic = FAKE_ARRAY_MAGIC;
    *pHandle = a;
    fake_log("alloc_array", "array=%p size=%zu", (void *)a, a->bytes);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuArrayDestroy(CUarray hArray)
{
    FAKE_TRY(fake_check_init());
    if (!hArray || hArray->magic != FAKE_ARRAY_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    CUcontext ctx = fake_current_ctx();
    if (fake_ctx_valid(ctx))
        fake_wait_seq(atomic_load(&ctx->last_seq)); /* queued copies may still use it */
    hArray->magic = 0;
    fake_unmap_bytes((void *)hArray->data, hArray->bytes);
    fake_device_unreserve(hArray->device, hArray->bytes);
    return CUDA_SUCCESS;
}

/* ---- address checks ------------------------------------------------------------------------ */

/* [p, p+len) must lie inside one device-visible allocation. */
static bool device_range_ok(uintptr_t p, size_t len)
{
    struct fake_alloc a;
    return fake_alloc_lookup(p, &a) && a.kind != FAKE_MEM_VMM_RANGE && p + len <= a.base + a.size;
}

/* Unified addressing: a known pointer is checked, any other is pageable host memory. */
static bool unified_range_ok(uintptr_t p, size_t len)
{
    struct fake_alloc a;
    return !fake_alloc_lookup(p, &a) || p + len <= a.base + a.size;
}

static bool array_range_ok(CUarray a, size_t offset, size_t len)
{
    return a && a->magic == FAKE_ARRAY_MAGIC && offset + len <= a->bytes;
}

/* ---- linear copies ------------------------------------------------------------------------- */

enum side { HOST, DEVICE, UNIFIED };

static bool side_ok(enum side k, uintptr_t p, size_t n)
{
    if (n == 0)
        return true;
    switch (k) {
    case HOST: return p != 0;
    case DEVICE: return device_range_ok(p, n);
    case UNIFIED: return p != 0 && unified_range_ok(p, n);
    }
    return false;
}

static CUresult copy_linear(const struct fake_call *call, uintptr_t dst, enum side dk,
                            uintptr_t src, enum side sk, size_t n, CUstream hStream, bool sync,
                            const char *dir)
{
    struct CUstream_st *s;
    FAKE_TRY(fake_stream_resolve(hStream, call->per_thread, &s));
    if (!side_ok(dk, dst, n) || !side_ok(sk, src, n))
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_op op = {.kind = FAKE_OP_COPY, .what = "copy",
                         .u.copy = {.dst = dst, .src = src, .width = n}};
    char details[96];
    snprintf(details, sizeof details, "dir=%s dst=0x%llx src=0x%llx size=%zu", dir,
             (unsigned long long)dst, (unsigned long long)src, n);
    return sync ? fake_submit_sync(call, "memcpy", s, &op, details)
                : fake_submit(call, "memcpy", s, &op, details);
}

#define U(p) ((uintptr_t)(p))

static CUresult cuMemcpy_impl(const struct fake_call *call, CUdeviceptr dst, CUdeviceptr src,
                              size_t n)
{
    return copy_linear(call, U(dst), UNIFIED, U(src), UNIFIED, n, NULL, true, "any");
}
FAKE_PTDS_PAIR(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), dst, src, ByteCount)

static CUresult cuMemcpyAsync_impl(const struct fake_call *call, CUdeviceptr dst, CUdeviceptr src,
                                   size_t n, CUstream hStream)
{
    return copy_linear(call, U(dst), UNIFIED, U(src), UNIFIED, n, hStream, false, "any");
}
FAKE_PTSZ_PAIR(cuMemcpyAsync,
               (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream), dst, src,
               ByteCount, hStream)

static CUresult check_peer(CUcontext a, CUcontext b)
{
    CUresult r = fake_check_init();
    if (r == CUDA_SUCCESS && (!fake_ctx_valid(a) || !fake_ctx_valid(b)))
        r = CUDA_ERROR_INVALID_CONTEXT;
    return r;
}

static CUresult cuMemcpyPeer_impl(const struct fake_call *call, CUdeviceptr dst, CUcontext dctx,
                                  CUdeviceptr src, CUcontext sctx, size_t n)
{
    CUresult r = check_peer(dctx, sctx);
    return r != CUDA_SUCCESS ? r
                             : copy_linear(call, U(dst), DEVICE, U(src), DEVICE, n, NULL, true,
                                           "peer");
}
FAKE_PTDS_PAIR(cuMemcpyPeer,
               (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                CUcontext srcContext, size_t ByteCount),
               dstDevice, dstContext, srcDevice, srcContext, ByteCount)

static CUresult cuMemcpyPeerAsync_impl(const struct fake_call *call, CUdeviceptr dst,
                                       CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
                                       CUstream hStream)
{
    CUresult r = check_peer(dctx, sctx);
    return r != CUDA_SUCCESS ? r
                             : copy_linear(call, U(dst), DEVICE, U(src), DEVICE, n, hStream,
                                           false, "peer");
}
FAKE_PTSZ_PAIR(cuMemcpyPeerAsync,
               (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                CUcontext srcContext, size_t ByteCount, CUstream hStream),
               dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream)

static CUresult cuMemcpyHtoD_v2_impl(const struct fake_call *call, CUdeviceptr dst,
                                     const void *src, size_t n)
{
    return copy_linear(call, U(dst), DEVICE, U(src), HOST, n, NULL, true, "HtoD");
}
FAKE_PTDS_PAIR(cuMemcpyHtoD_v2, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount),
               dstDevice, srcHost, ByteCount)

static CUresult cuMemcpyDtoH_v2_impl(const struct fake_call *call, void *dst, CUdeviceptr src,
                                     size_t n)
{
    return copy_linear(call, U(dst), HOST, U(src), DEVICE, n, NULL, true, "DtoH");
}
FAKE_PTDS_PAIR(cuMemcpyDtoH_v2, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount), dstHost,
               srcDevice, ByteCount)

static CUresult cuMemcpyDtoD_v2_impl(const struct fake_call *call, CUdeviceptr dst,
                                     CUdeviceptr src, size_t n)
{
    return copy_linear(call, U(dst), DEVICE, U(src), DEVICE, n, NULL, true, "DtoD");
}
FAKE_PTDS_PAIR(cuMemcpyDtoD_v2, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),
               dstDevice, srcDevice, ByteCount)

static CUresult cuMemcpyHtoDAsync_v2_impl(const struct fake_call *call, CUdeviceptr dst,
                                          const void *src, size_t n, CUstream hStream)
{
    return copy_linear(call, U(dst), DEVICE, U(src), HOST, n, hStream, false, "HtoD");
}
FAKE_PTSZ_PAIR(cuMemcpyHtoDAsync_v2,
               (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream),
               dstDevice, srcHost, ByteCount, hStream)

static CUresult cuMemcpyDtoHAsync_v2_impl(const struct fake_call *call, void *dst,
                                          CUdeviceptr src, size_t n, CUstream hStream)
{
    return copy_linear(call, U(dst), HOST, U(src), DEVICE, n, hStream, false, "DtoH");
}
FAKE_PTSZ_PAIR(cuMemcpyDtoHAsync_v2,
               (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
               dstHost, srcDevice, ByteCount, hStream)

static CUresult cuMemcpyDtoDAsync_v2_impl(const struct fake_call *call, CUdeviceptr dst,
                                          CUdeviceptr src, size_t n, CUstream hStream)
{
    return copy_linear(call, U(dst), DEVICE, U(src), DEVICE, n, hStream, false, "DtoD");
}
FAKE_PTSZ_PAIR(cuMemcpyDtoDAsync_v2,
               (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
               dstDevice, srcDevice, ByteCount, hStream)

/* Array copies address the array's linear storage at a byte offset. */
static CUresult array_copy(const struct fake_call *call, uintptr_t dst, uintptr_t src, size_t n,
                           bool ok, CUstream hStream, bool sync, const char *dir)
{
    if (!ok)
        return fake_check_init() != CUDA_SUCCESS ? fake_check_init() : CUDA_ERROR_INVALID_VALUE;
    return copy_linear(call, dst, HOST, src, HOST, n, hStream, sync, dir);
}

static CUresult cuMemcpyDtoA_v2_impl(const struct fake_call *call, CUarray dst, size_t off,
                                     CUdeviceptr src, size_t n)
{
    bool ok = array_range_ok(dst, off, n) && device_range_ok(U(src), n);
    return array_copy(call, ok ? dst->data + off : 0, U(src), n, ok, NULL, true, "DtoA");
}
FAKE_PTDS_PAIR(cuMemcpyDtoA_v2,
               (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount),
               dstArray, dstOffset, srcDevice, ByteCount)

static CUresult cuMemcpyAtoD_v2_impl(const struct fake_call *call, CUdeviceptr dst, CUarray src,
                                     size_t off, size_t n)
{
    bool ok = array_range_ok(src, off, n) && device_range_ok(U(dst), n);
    return array_copy(call, U(dst), ok ? src->data + off : 0, n, ok, NULL, true, "AtoD");
}
FAKE_PTDS_PAIR(cuMemcpyAtoD_v2,
               (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount),
               dstDevice, srcArray, srcOffset, ByteCount)

static CUresult cuMemcpyHtoA_v2_impl(const struct fake_call *call, CUarray dst, size_t off,
                                     const void *src, size_t n)
{
    bool ok = array_range_ok(dst, off, n) && src;
    return array_copy(call, ok ? dst->data + off : 0, U(src), n, ok, NULL, true, "HtoA");
}
FAKE_PTDS_PAIR(cuMemcpyHtoA_v2,
               (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount),
               dstArray, dstOffset, srcHost, ByteCount)

static CUresult cuMemcpyAtoH_v2_impl(const struct fake_call *call, void *dst, CUarray src,
                                     size_t off, size_t n)
{
    bool ok = array_range_ok(src, off, n) && dst;
    return array_copy(call, U(dst), ok ? src->data + off : 0, n, ok, NULL, true, "AtoH");
}
FAKE_PTDS_PAIR(cuMemcpyAtoH_v2,
               (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount), dstHost,
               srcArray, srcOffset, ByteCount)

static CUresult cuMemcpyAtoA_v2_impl(const struct fake_call *call, CUarray dst, size_t doff,
                                     CUarray src, size_t soff, size_t n)
{
    bool ok = array_range_ok(dst, doff, n) && array_range_ok(src, soff, n);
    return array_copy(call, ok ? dst->data + doff : 0, ok ? src->data + soff : 0, n, ok, NULL,
                      true, "AtoA");
}
FAKE_PTDS_PAIR(cuMemcpyAtoA_v2,
               (CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset,
                size_t ByteCount),
               dstArray, dstOffset, srcArray, srcOffset, ByteCount)

static CUresult cuMemcpyHtoAAsync_v2_impl(const struct fake_call *call, CUarray dst, size_t off,
                                          const void *src, size_t n, CUstream hStream)
{
    bool ok = array_range_ok(dst, off, n) && src;
    return array_copy(call, ok ? dst->data + off : 0, U(src), n, ok, hStream, false, "HtoA");
}
FAKE_PTSZ_PAIR(cuMemcpyHtoAAsync_v2,
               (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount,
                CUstream hStream),
               dstArray, dstOffset, srcHost, ByteCount, hStream)

static CUresult cuMemcpyAtoHAsync_v2_impl(const struct fake_call *call, void *dst, CUarray src,
                                          size_t off, size_t n, CUstream hStream)
{
    bool ok = array_range_ok(src, off, n) && dst;
    return array_copy(call, U(dst), ok ? src->data + off : 0, n, ok, hStream, false, "AtoH");
}
FAKE_PTSZ_PAIR(cuMemcpyAtoHAsync_v2,
               (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount,
                CUstream hStream),
               dstHost, srcArray, srcOffset, ByteCount, hStream)

/* ---- 2D and 3D copies ---------------------------------------------------------------------- */

struct side3d {
    CUmemorytype type;
    uintptr_t host, device;
    CUarray array;
    size_t x, y, z, pitch, height;
};

/* Start address and pitch of one side; checks the whole region when it is device memory. */
static CUresult locate(const struct side3d *sd, size_t width, size_t height, size_t depth,
                       uintptr_t *start, size_t *pitch, size_t *slice)
{
    uintptr_t base;
    size_t p = sd->pitch, h = sd->height ? sd->height : height;
    switch (sd->type) {
    case CU_MEMORYTYPE_HOST: base = sd->host; break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: base = sd->device; break;
    case CU_MEMORYTYPE_ARRAY:
        if (!sd->array || sd->array->magic != FAKE_ARRAY_MAGIC)
            return CUDA_ERROR_INVALID_VALUE;
        base = sd->array->data;
        p = sd->array->pitch;
        h = sd->array->height;
        break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    if (!base || (height > 1 && p < width) || (depth > 1 && h < height))
        return CUDA_ERROR_INVALID_VALUE;
    *pitch = p;
    *slice = p * h;
    *start = base + sd->z * *slice + sd->y * p + sd->x;
    size_t extent = (depth - 1) * *slice + (height - 1) * p + width;
    if (sd->type == CU_MEMORYTYPE_DEVICE && !device_range_ok(*start, extent))
        return CUDA_ERROR_INVALID_VALUE;
    if (sd->type == CU_MEMORYTYPE_UNIFIED && !unified_range_ok(*start, extent))
        return CUDA_ERROR_INVALID_VALUE;
    if (sd->type == CU_MEMORYTYPE_ARRAY && *start + extent > base + sd->array->bytes)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult copy_3d(const struct fake_call *call, const struct side3d *dst,
                        const struct side3d *src, size_t width, size_t height, size_t depth,
                        CUstream hStream, bool sync)
{
    struct CUstream_st *s;
    CUresult r = fake_stream_resolve(hStream, call->per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    height = height ? height : 1;
    depth = depth ? depth : 1;
    struct fake_op op = {.kind = FAKE_OP_COPY, .what = "copy",
                         .u.copy = {.width = width, .height = height, .depth = depth}};
    if (width == 0)
        return CUDA_SUCCESS;
    if ((r = locate(dst, width, height, depth, &op.u.copy.dst, &op.u.copy.dst_pitch,
                    &op.u.copy.dst_slice)) != CUDA_SUCCESS ||
        (r = locate(src, width, height, depth, &op.u.copy.src, &op.u.copy.src_pitch,
                    &op.u.copy.src_slice)) != CUDA_SUCCESS)
        return r;
    char details[128];
    snprintf(details, sizeof details, "dst=0x%llx src=0x%llx width=%zu height=%zu depth=%zu",
             (unsigned long long)op.u.copy.dst, (unsigned long long)op.u.copy.src, width, height,
             depth);
    return sync ? fake_submit_sync(call, "memcpy", s, &op, details)
                : fake_submit(call, "memcpy", s, &op, details);
}

static CUresult copy_2d(const struct fake_call *call, const CUDA_MEMCPY2D *c, CUstream hStream,
                        bool sync)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    struct side3d dst = {c->dstMemoryType, U(c->dstHost), U(c->dstDevice), c->dstArray,
                         c->dstXInBytes, c->dstY, 0, c->dstPitch, 0};
    struct side3d src = {c->srcMemoryType, U(c->srcHost), U(c->srcDevice), c->srcArray,
                         c->srcXInBytes, c->srcY, 0, c->srcPitch, 0};
    return copy_3d(call, &dst, &src, c->WidthInBytes, c->Height, 1, hStream, sync);
}

static CUresult cuMemcpy2D_v2_impl(const struct fake_call *call, const CUDA_MEMCPY2D *c)
{
    return copy_2d(call, c, NULL, true);
}
FAKE_PTDS_PAIR(cuMemcpy2D_v2, (const CUDA_MEMCPY2D *pCopy), pCopy)

static CUresult cuMemcpy2DUnaligned_v2_impl(const struct fake_call *call, const CUDA_MEMCPY2D *c)
{
    return copy_2d(call, c, NULL, true);
}
FAKE_PTDS_PAIR(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D *pCopy), pCopy)

static CUresult cuMemcpy2DAsync_v2_impl(const struct fake_call *call, const CUDA_MEMCPY2D *c,
                                        CUstream hStream)
{
    return copy_2d(call, c, hStream, false);
}
FAKE_PTSZ_PAIR(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *pCopy, CUstream hStream), pCopy, hStream)

#define SIDE3D(c, p)                                                                             \
    {                                                                                            \
        (c)->p##MemoryType, U((c)->p##Host), U((c)->p##Device), (c)->p##Array,                   \
            (c)->p##XInBytes, (c)->p##Y, (c)->p##Z, (c)->p##Pitch, (c)->p##Height                \
    }

static CUresult cuMemcpy3D_v2_impl(const struct fake_call *call, const CUDA_MEMCPY3D *c)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    struct side3d dst = SIDE3D(c, dst), src = SIDE3D(c, src);
    return copy_3d(call, &dst, &src, c->WidthInBytes, c->Height, c->Depth, NULL, true);
}
FAKE_PTDS_PAIR(cuMemcpy3D_v2, (const CUDA_MEMCPY3D *pCopy), pCopy)

static CUresult cuMemcpy3DAsync_v2_impl(const struct fake_call *call, const CUDA_MEMCPY3D *c,
                                        CUstream hStream)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    struct side3d dst = SIDE3D(c, dst), src = SIDE3D(c, src);
    return copy_3d(call, &dst, &src, c->WidthInBytes, c->Height, c->Depth, hStream, false);
}
FAKE_PTSZ_PAIR(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *pCopy, CUstream hStream), pCopy, hStream)

static CUresult cuMemcpy3DPeer_impl(const struct fake_call *call, const CUDA_MEMCPY3D_PEER *c)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_peer(c->dstContext, c->srcContext);
    if (r != CUDA_SUCCESS)
        return r;
    struct side3d dst = SIDE3D(c, dst), src = SIDE3D(c, src);
    return copy_3d(call, &dst, &src, c->WidthInBytes, c->Height, c->Depth, NULL, true);
}
FAKE_PTDS_PAIR(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER *pCopy), pCopy)

static CUresult cuMemcpy3DPeerAsync_impl(const struct fake_call *call,
                                         const CUDA_MEMCPY3D_PEER *c, CUstream hStream)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_peer(c->dstContext, c->srcContext);
    if (r != CUDA_SUCCESS)
        return r;
    struct side3d dst = SIDE3D(c, dst), src = SIDE3D(c, src);
    return copy_3d(call, &dst, &src, c->WidthInBytes, c->Height, c->Depth, hStream, false);
}
FAKE_PTSZ_PAIR(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream), pCopy,
               hStream)

/* ---- batched copies ------------------------------------------------------------------------ */

static CUresult copy_batch(const struct fake_call *call, CUdeviceptr *dsts, CUdeviceptr *srcs,
                           size_t *sizes, size_t count, size_t *failIdx, CUstream hStream)
{
    struct CUstream_st *s;
    CUresult r = fake_stream_resolve(hStream, call->per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (failIdx)
        *failIdx = SIZE_MAX;
    if (!dsts || !srcs || !sizes || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_op *ops = calloc(count, sizeof *ops);
    if (!ops)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < count; i++) {
        if (!unified_range_ok(U(dsts[i]), sizes[i]) || !unified_range_ok(U(srcs[i]), sizes[i])) {
            if (failIdx)
                *failIdx = i;
            free(ops);
            return CUDA_ERROR_INVALID_VALUE;
        }
        ops[i] = (struct fake_op){.kind = FAKE_OP_COPY, .what = "copy",
                                  .u.copy = {.dst = U(dsts[i]), .src = U(srcs[i]),
                                             .width = sizes[i]}};
    }
    char details[48];
    snprintf(details, sizeof details, "count=%zu", count);
    r = fake_submit_ops(call, "memcpy_batch", s, ops, count, details, NULL);
    free(ops);
    return r;
}

static CUresult cuMemcpyBatchAsync_impl(const struct fake_call *call, CUdeviceptr *dsts,
                                        CUdeviceptr *srcs, size_t *sizes, size_t count,
                                        CUmemcpyAttributes *attrs, size_t *attrsIdxs,
                                        size_t numAttrs, size_t *failIdx, CUstream hStream)
{
    (void)attrs; /* access-order hints do not change the bytes moved */
    (void)attrsIdxs;
    (void)numAttrs;
    return copy_batch(call, dsts, srcs, sizes, count, failIdx, hStream);
}
FAKE_PTSZ_PAIR(cuMemcpyBatchAsync,
               (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx,
                CUstream hStream),
               dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream)

static CUresult cuMemcpyBatchAsync_v2_impl(const struct fake_call *call, CUdeviceptr *dsts,
                                           CUdeviceptr *srcs, size_t *sizes, size_t count,
                                           CUmemcpyAttributes *attrs, size_t *attrsIdxs,
                                           size_t numAttrs, CUstream hStream)
{
    (void)attrs;
    (void)attrsIdxs;
    (void)numAttrs;
    return copy_batch(call, dsts, srcs, sizes, count, NULL, hStream);
}
FAKE_PTSZ_PAIR(cuMemcpyBatchAsync_v2,
               (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream hStream),
               dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream)

/* 3D batches use operand descriptors the fake does not model: refused, visibly. */
static CUresult batch3d_refused(const struct fake_call *call, size_t numOps, CUstream hStream)
{
    struct CUstream_st *s;
    CUresult r = fake_stream_resolve(hStream, call->per_thread, &s);
    if (r == CUDA_SUCCESS)
        r = CUDA_ERROR_NOT_SUPPORTED;
    char name[48];
    fake_log(fake_event_name("memcpy3d_batch", call->api, name, sizeof name),
             "api=%s count=%zu result=%d", call->api, numOps, (int)r);
    return r;
}

static CUresult cuMemcpy3DBatchAsync_impl(const struct fake_call *call, size_t numOps,
                                          CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx,
                                          unsigned long long flags, CUstream hStream)
{
    (void)opList;
    (void)flags;
    if (failIdx)
        *failIdx = 0;
    return batch3d_refused(call, numOps, hStream);
}
FAKE_PTSZ_PAIR(cuMemcpy3DBatchAsync,
               (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx,
                unsigned long long flags, CUstream hStream),
               numOps, opList, failIdx, flags, hStream)

static CUresult cuMemcpy3DBatchAsync_v2_impl(const struct fake_call *call, size_t numOps,
                                             CUDA_MEMCPY3D_BATCH_OP *opList,
                                             unsigned long long flags, CUstream hStream)
{
    (void)opList;
    (void)flags;
    return batch3d_refused(call, numOps, hStream);
}
FAKE_PTSZ_PAIR(cuMemcpy3DBatchAsync_v2,
               (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags,
                CUstream hStream),
               numOps, opList, flags, hStream)

/* ---- memsets ------------------------------------------------------------------------------- */

static CUresult memset_2d(const struct fake_call *call, CUdeviceptr dst, size_t pitch,
                          unsigned int value, int elem, size_t width, size_t height,
                          CUstream hStream, bool sync)
{
    struct CUstream_st *s;
    FAKE_TRY(fake_stream_resolve(hStream, call->per_thread, &s));
    if (width == 0 || height == 0)
        return CUDA_SUCCESS;
    size_t row = width * (size_t)elem;
    if ((height > 1 && pitch < row) || U(dst) % (size_t)elem ||
        !unified_range_ok(U(dst), (height - 1) * pitch + row) || !dst)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_op op = {.kind = FAKE_OP_SET, .what = "set",
                         .u.set = {.dst = U(dst), .pitch = pitch, .width = width,
                                   .height = height, .value = value, .elem = elem}};
    char details[96];
    snprintf(details, sizeof details, "dst=0x%llx elem=%d width=%zu height=%zu",
             (unsigned long long)dst, elem, width, height);
    return sync ? fake_submit_sync(call, "memset", s, &op, details)
                : fake_submit(call, "memset", s, &op, details);
}

#define MEMSET_1D(name, type, elem, sync)                                                        \
    static CUresult name##_impl(const struct fake_call *call, CUdeviceptr dst, type v, size_t n) \
    {                                                                                            \
        return memset_2d(call, dst, n * elem, v, elem, n, 1, NULL, sync);                        \
    }                                                                                            \
    FAKE_PTDS_PAIR(name, (CUdeviceptr dstDevice, type value, size_t N), dstDevice, value, N)
MEMSET_1D(cuMemsetD8_v2, unsigned char, 1, true)
MEMSET_1D(cuMemsetD16_v2, unsigned short, 2, true)
MEMSET_1D(cuMemsetD32_v2, unsigned int, 4, true)

#define MEMSET_1D_ASYNC(name, type, elem)                                                        \
    static CUresult name##_impl(const struct fake_call *call, CUdeviceptr dst, type v, size_t n, \
                                CUstream hStream)                                                \
    {                                                                                            \
        return memset_2d(call, dst, n * elem, v, elem, n, 1, hStream, false);                    \
    }                                                                                            \
    FAKE_PTSZ_PAIR(name, (CUdeviceptr dstDevice, type value, size_t N, CUstream hStream),        \
                   dstDevice, value, N, hStream)
MEMSET_1D_ASYNC(cuMemsetD8Async, unsigned char, 1)
MEMSET_1D_ASYNC(cuMemsetD16Async, unsigned short, 2)
MEMSET_1D_ASYNC(cuMemsetD32Async, unsigned int, 4)

#define MEMSET_2D(name, type, elem)                                                              \
    static CUresult name##_impl(const struct fake_call *call, CUdeviceptr dst, size_t pitch,     \
                                type v, size_t w, size_t h)                                      \
    {                                                                                            \
        return memset_2d(call, dst, pitch, v, elem, w, h, NULL, true);                           \
    }                                                                                            \
    FAKE_PTDS_PAIR(name,                                                                         \
                   (CUdeviceptr dstDevice, size_t dstPitch, type value, size_t Width,            \
                    size_t Height),                                                              \
                   dstDevice, dstPitch, value, Width, Height)
MEMSET_2D(cuMemsetD2D8_v2, unsigned char, 1)
MEMSET_2D(cuMemsetD2D16_v2, unsigned short, 2)
MEMSET_2D(cuMemsetD2D32_v2, unsigned int, 4)

#define MEMSET_2D_ASYNC(name, type, elem)                                                        \
    static CUresult name##_impl(const struct fake_call *call, CUdeviceptr dst, size_t pitch,     \
                                type v, size_t w, size_t h, CUstream hStream)                    \
    {                                                                                            \
        return memset_2d(call, dst, pitch, v, elem, w, h, hStream, false);                       \
    }                                                                                            \
    FAKE_PTSZ_PAIR(name,                                                                         \
                   (CUdeviceptr dstDevice, size_t dstPitch, type value, size_t Width,            \
                    size_t Height, CUstream hStream),                                            \
                   dstDevice, dstPitch, value, Width, Height, hStream)
MEMSET_2D_ASYNC(cuMemsetD2D8Async, unsigned char, 1)
MEMSET_2D_ASYNC(cuMemsetD2D16Async, unsigned short, 2)
MEMSET_2D_ASYNC(cuMemsetD2D32Async, unsigned int, 4)

/* ---- prefetches ---------------------------------------------------------------------------- */

#define CU_DEVICE_CPU (-1)

/* Prefetching needs managed memory; the fake does not move pages, but the call is queued work. */
static CUresult prefetch(const struct fake_call *call, CUdeviceptr ptr, size_t count, int dst,
                         CUstream hStream)
{
    struct CUstream_st *s;
    FAKE_TRY(fake_stream_resolve(hStream, call->per_thread, &s));
    struct fake_alloc a;
    if (!fake_alloc_lookup(U(ptr), &a) || a.kind != FAKE_MEM_MANAGED ||
        U(ptr) + count > a.base + a.size || count == 0 ||
        (dst != -1 && fake_check_device(dst) != CUDA_SUCCESS))
        return CUDA_ERROR_INVALID_VALUE;
    char details[96];
    snprintf(details, sizeof details, "ptr=0x%llx size=%zu dst=%d", (unsigned long long)ptr, count,
             dst);
    if (dst == CU_DEVICE_CPU && !fake_host_room(count)) {
        fake_log("prefetch_refused", "api=%s %s result=%d", call->api, details,
                 CUDA_ERROR_OUT_OF_MEMORY);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct fake_op op = {.kind = FAKE_OP_PREFETCH, .what = "prefetch",
                         .u.prefetch = {.ptr = U(ptr), .len = count, .dst = dst}};
    return fake_submit(call, "prefetch", s, &op, details);
}

static CUresult cuMemPrefetchAsync_impl(const struct fake_call *call, CUdeviceptr devPtr,
                                        size_t count, CUdevice dstDevice, CUstream hStream)
{
    return prefetch(call, devPtr, count, dstDevice, hStream);
}
FAKE_PTSZ_PAIR(cuMemPrefetchAsync,
               (CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream), devPtr,
               count, dstDevice, hStream)

static int location_device(CUmemLocation loc)
{
    return loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? loc.id : CU_DEVICE_CPU;
}

static CUresult cuMemPrefetchAsync_v2_impl(const struct fake_call *call, CUdeviceptr devPtr,
                                           size_t count, CUmemLocation location,
                                           unsigned int flags, CUstream hStream)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return prefetch(call, devPtr, count, location_device(location), hStream);
}
FAKE_PTSZ_PAIR(cuMemPrefetchAsync_v2,
               (CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                CUstream hStream),
               devPtr, count, location, flags, hStream)

static CUresult cuMemPrefetchBatchAsync_impl(const struct fake_call *call, CUdeviceptr *dptrs,
                                             size_t *sizes, size_t count,
                                             CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
                                             size_t numPrefetchLocs, unsigned long long flags,
                                             CUstream hStream)
{
    if (!dptrs || !sizes || !prefetchLocs || !prefetchLocIdxs || count == 0 ||
        numPrefetchLocs == 0 || flags != 0 || prefetchLocIdxs[0] != 0)
        return fake_check_init() != CUDA_SUCCESS ? fake_check_init() : CUDA_ERROR_INVALID_VALUE;
    /* prefetchLocs[j] applies from operation prefetchLocIdxs[j] on. */
    size_t loc = 0;
    for (size_t i = 0; i < count; i++) {
        while (loc + 1 < numPrefetchLocs && prefetchLocIdxs[loc + 1] <= i)
            loc++;
        CUresult r = prefetch(call, dptrs[i], sizes[i], location_device(prefetchLocs[loc]),
                              hStream);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}
FAKE_PTSZ_PAIR(cuMemPrefetchBatchAsync,
               (CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *prefetchLocs,
                size_t *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
                CUstream hStream),
               dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream)

/* Discarding drops managed pages' contents: the fake overwrites them (FAKE_DISCARDED_BYTE), so
 * that a test sees a program read what was never brought back, and takes them off the device at
 * no cost. One op per range. */
static CUresult discard_batch(const struct fake_call *call, CUdeviceptr *dptrs, size_t *sizes,
                              size_t count, unsigned long long flags, CUstream hStream)
{
    struct CUstream_st *s;
    FAKE_TRY(fake_stream_resolve(hStream, call->per_thread, &s));
    if (!dptrs || !sizes || count == 0 || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        struct fake_alloc a;
        if (!fake_alloc_lookup(U(dptrs[i]), &a) || a.kind != FAKE_MEM_MANAGED || sizes[i] == 0 ||
            U(dptrs[i]) + sizes[i] > a.base + a.size)
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < count; i++) {
        struct fake_op op = {.kind = FAKE_OP_DISCARD, .what = "discard",
                             .u.prefetch = {.ptr = U(dptrs[i]), .len = sizes[i]}};
        char details[80];
        snprintf(details, sizeof details, "count=%zu ptr=0x%llx size=%zu", count,
                 (unsigned long long)dptrs[i], sizes[i]);
        FAKE_TRY(fake_submit(call, "discard", s, &op, details));
    }
    return CUDA_SUCCESS;
}

static CUresult cuMemDiscardBatchAsync_impl(const struct fake_call *call, CUdeviceptr *dptrs,
                                            size_t *sizes, size_t count, unsigned long long flags,
                                            CUstream hStream)
{
    return discard_batch(call, dptrs, sizes, count, flags, hStream);
}
FAKE_PTSZ_PAIR(cuMemDiscardBatchAsync,
               (CUdeviceptr *dptrs, size_t *sizes, size_t count, unsigned long long flags,
                CUstream hStream),
               dptrs, sizes, count, flags, hStream)

/* A discard followed by a batch prefetch: logged as the discard, then one prefetch per range. */
static CUresult cuMemDiscardAndPrefetchBatchAsync_impl(
    const struct fake_call *call, CUdeviceptr *dptrs, size_t *sizes, size_t count,
    CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs, size_t numPrefetchLocs,
    unsigned long long flags, CUstream hStream)
{
    if (!prefetchLocs || !prefetchLocIdxs || numPrefetchLocs == 0 || prefetchLocIdxs[0] != 0)
        return fake_check_init() != CUDA_SUCCESS ? fake_check_init() : CUDA_ERROR_INVALID_VALUE;
    FAKE_TRY(discard_batch(call, dptrs, sizes, count, flags, hStream));
    return cuMemPrefetchBatchAsync_impl(call, dptrs, sizes, count, prefetchLocs, prefetchLocIdxs,
                                        numPrefetchLocs, flags, hStream);
}
FAKE_PTSZ_PAIR(cuMemDiscardAndPrefetchBatchAsync,
               (CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *prefetchLocs,
                size_t *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
                CUstream hStream),
               dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream)

/* ---- decompression and array mappings ------------------------------------------------------ */

/* Neither is modelled (the parameter blocks stay opaque here): each call queues one marker, so
 * it is ordered and logged as the stream work it is. */
static CUresult stream_marker(const struct fake_call *call, const char *event, bool ok,
                              size_t count, CUstream hStream)
{
    struct CUstream_st *s;
    FAKE_TRY(fake_stream_resolve(hStream, call->per_thread, &s));
    if (!ok || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_op op = {.kind = FAKE_OP_NOP, .what = event};
    char details[48];
    snprintf(details, sizeof details, "count=%zu", count);
    return fake_submit(call, event, s, &op, details);
}

static CUresult cuMemBatchDecompressAsync_impl(const struct fake_call *call,
                                               CUmemDecompressParams *paramsArray, size_t count,
                                               unsigned int flags, size_t *errorIndex,
                                               CUstream stream)
{
    if (errorIndex)
        *errorIndex = SIZE_MAX;
    return stream_marker(call, "decompress", paramsArray && flags == 0, count, stream);
}
FAKE_PTSZ_PAIR(cuMemBatchDecompressAsync,
               (CUmemDecompressParams *paramsArray, size_t count, unsigned int flags,
                size_t *errorIndex, CUstream stream),
               paramsArray, count, flags, errorIndex, stream)

static CUresult cuMemMapArrayAsync_impl(const struct fake_call *call, CUarrayMapInfo *mapInfoList,
                                        unsigned int count, CUstream hStream)
{
    return stream_marker(call, "map_array", mapInfoList != NULL, count, hStream);
}
FAKE_PTSZ_PAIR(cuMemMapArrayAsync, (CUarrayMapInfo *mapInfoList, unsigned int count,
                                    CUstream hStream),
               mapInfoList, count, hStream)
