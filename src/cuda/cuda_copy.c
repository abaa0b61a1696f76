/*
 * Copies and memset of the CUDA backend.
 *
 * A gm_copy_desc (up to depth planes of height rows of width_bytes bytes)
 * is first reduced to its simplest equivalent: contiguous planes and rows
 * are merged, so a contiguous copy of any rank becomes one linear
 * cuMemcpyHtoD / DtoH / DtoD(Async). What stays pitched goes to
 * cuMemcpy2D(Async) or cuMemcpy3D(Async); host-to-host copies always take
 * the pitched path, which the driver supports for host memory on both sides.
 * Pitches above the device's CU_DEVICE_ATTRIBUTE_MAX_PITCH are copied row by
 * row. Arbitrary strided layouts between device-side descriptors go to the
 * packing kernel (cuda_pack.c, the copy_strided op); the core decomposes the
 * others into pitched copies or stages them through host memory.
 *
 * stream == NULL means synchronous: when the destination is device memory
 * the driver's "synchronous" calls may return before the device has
 * written it (device-to-device, staged pageable sources, memsets), so the
 * op then waits for the legacy default stream those calls were issued to.
 *
 * Asynchronous copies from or to pageable (not page-locked) host memory are
 * legal: the driver stages them through its own pinned buffers, so they do
 * not overlap with the host (a host-to-device call returns once the source
 * has been staged, and the source may be reused at once; a device-to-host
 * call returns once the data has arrived). Only page-locked host memory
 * gives truly asynchronous copies.
 */
#include <stdint.h>
#include <string.h>

#include "cuda_internal.h"

/* Reject descriptors that cannot describe a copy. */
static gm_status check_desc(const gm_copy_desc *d)
{
    int host_sides = (d->src_side == GM_COPY_HOST) + (d->dst_side == GM_COPY_HOST);
    int device_sides = (d->src_side == GM_COPY_DEVICE) + (d->dst_side == GM_COPY_DEVICE);
    int pitched = d->height > 1 || d->depth > 1;

    if (host_sides + device_sides != 2)
        return gm__error(GM_ERR_INVALID_ARG, "cuda copy: unknown copy side (%d, %d)",
                         (int)d->dst_side, (int)d->src_side);
    if (pitched && (d->src_pitch < d->width_bytes || d->dst_pitch < d->width_bytes))
        return gm__error(GM_ERR_INVALID_ARG,
                         "cuda copy: pitches (dst %zu, src %zu) below the row width %zu",
                         d->dst_pitch, d->src_pitch, d->width_bytes);
    if (d->depth > 1 && (d->src_height < d->height || d->dst_height < d->height))
        return gm__error(GM_ERR_INVALID_ARG,
                         "cuda copy: plane heights (dst %zu, src %zu) below the row count %zu",
                         d->dst_height, d->src_height, d->height);
    return GM_OK;
}

/* Multiply two sizes, failing on overflow. */
static gm_status size_mul(size_t a, size_t b, size_t *out)
{
    if (__builtin_mul_overflow(a, b, out))
        return gm__error(GM_ERR_OVERFLOW, "cuda copy: %zu x %zu bytes overflows", a, b);
    return GM_OK;
}

/* Merge contiguous planes into rows and contiguous rows into one line, in place. */
static gm_status simplify(gm_copy_desc *d)
{
    gm_status status = GM_OK;

    if (d->depth > 1 && d->src_height == d->height && d->dst_height == d->height) {
        status = size_mul(d->height, d->depth, &d->height); /* planes are back to back */
        d->depth = 1;
    }
    if (status == GM_OK && d->depth > 1 && d->src_pitch == d->width_bytes &&
        d->dst_pitch == d->width_bytes) {
        status = size_mul(d->width_bytes, d->height, &d->width_bytes); /* a plane is one row */
        if (status == GM_OK)
            status = size_mul(d->src_pitch, d->src_height, &d->src_pitch);
        if (status == GM_OK)
            status = size_mul(d->dst_pitch, d->dst_height, &d->dst_pitch);
        d->height = d->depth;
        d->depth = 1;
    }
    if (status == GM_OK && d->depth == 1 && d->src_pitch == d->width_bytes &&
        d->dst_pitch == d->width_bytes) {
        status = size_mul(d->width_bytes, d->height, &d->width_bytes);
        d->height = 1;
    }
    if (d->height == 1 && d->depth == 1) {
        d->src_pitch = d->dst_pitch = d->width_bytes; /* what the driver checks for one row */
        d->src_height = d->dst_height = 1;
    } else if (d->depth == 1) {
        d->src_height = d->dst_height = d->height;
    }
    return status;
}

/* A copy of `bytes` contiguous bytes between host and device or device and device. */
static gm_status copy_linear(gm_backend_ctx *bctx, gm_copy_side dst_side, gm_devptr dst,
                             gm_copy_side src_side, gm_devptr src, size_t bytes, CUstream h,
                             int async)
{
    gm_cuda_driver *drv = &bctx->drv;
    void *dst_host = (void *)(uintptr_t)dst;
    const void *src_host = (const void *)(uintptr_t)src;

    if (src_side == GM_COPY_HOST)
        return async != 0 ? GM_CUDA_CALL(drv, cuMemcpyHtoDAsync, dst, src_host, bytes, h)
                          : GM_CUDA_CALL(drv, cuMemcpyHtoD, dst, src_host, bytes);
    if (dst_side == GM_COPY_HOST)
        return async != 0 ? GM_CUDA_CALL(drv, cuMemcpyDtoHAsync, dst_host, src, bytes, h)
                          : GM_CUDA_CALL(drv, cuMemcpyDtoH, dst_host, src, bytes);
    return async != 0 ? GM_CUDA_CALL(drv, cuMemcpyDtoDAsync, dst, src, bytes, h)
                      : GM_CUDA_CALL(drv, cuMemcpyDtoD, dst, src, bytes);
}

/* Point one side of a pitched copy at host or device memory. */
static void set_side(gm_copy_side side, gm_devptr address, CUmemorytype *type, const void **host,
                     CUdeviceptr *device)
{
    *type = side == GM_COPY_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    if (side == GM_COPY_HOST)
        *host = (const void *)(uintptr_t)address;
    else
        *device = (CUdeviceptr)address;
}

/* cuMemcpy2D(Async): height rows of width_bytes. */
static gm_status copy_2d(gm_backend_ctx *bctx, const gm_copy_desc *d, CUstream h, int async)
{
    CUDA_MEMCPY2D m;
    const void *dst_host = NULL;

    memset(&m, 0, sizeof(m));
    set_side(d->src_side, d->src, &m.srcMemoryType, &m.srcHost, &m.srcDevice);
    set_side(d->dst_side, d->dst, &m.dstMemoryType, &dst_host, &m.dstDevice);
    m.dstHost = (void *)(uintptr_t)dst_host;
    m.srcPitch = d->src_pitch;
    m.dstPitch = d->dst_pitch;
    m.WidthInBytes = d->width_bytes;
    m.Height = d->height;
    return async != 0 ? GM_CUDA_CALL(&bctx->drv, cuMemcpy2DAsync, &m, h)
                      : GM_CUDA_CALL(&bctx->drv, cuMemcpy2D, &m);
}

/* cuMemcpy3D(Async): depth planes of height rows; reserved fields stay zero. */
static gm_status copy_3d(gm_backend_ctx *bctx, const gm_copy_desc *d, CUstream h, int async)
{
    CUDA_MEMCPY3D m;
    const void *dst_host = NULL;

    memset(&m, 0, sizeof(m));
    set_side(d->src_side, d->src, &m.srcMemoryType, &m.srcHost, &m.srcDevice);
    set_side(d->dst_side, d->dst, &m.dstMemoryType, &dst_host, &m.dstDevice);
    m.dstHost = (void *)(uintptr_t)dst_host;
    m.srcPitch = d->src_pitch;
    m.dstPitch = d->dst_pitch;
    m.srcHeight = d->src_height;
    m.dstHeight = d->dst_height;
    m.WidthInBytes = d->width_bytes;
    m.Height = d->height;
    m.Depth = d->depth;
    return async != 0 ? GM_CUDA_CALL(&bctx->drv, cuMemcpy3DAsync, &m, h)
                      : GM_CUDA_CALL(&bctx->drv, cuMemcpy3D, &m);
}

/*
 * One host-to-host row through cuMemcpy2D, whose pitches may not exceed the
 * device's max pitch: a wider row goes as width / max_pitch rows of
 * max_pitch bytes, then the rest.
 */
static gm_status copy_host_row(gm_backend_ctx *bctx, const gm_copy_desc *row, CUstream h, int async)
{
    size_t p = bctx->max_pitch, rows = 0, rest = 0;
    gm_copy_desc part = *row;
    gm_status status = GM_OK;

    if (p == 0 || row->width_bytes <= p)
        return copy_2d(bctx, row, h, async);
    rows = row->width_bytes / p;
    rest = row->width_bytes % p;
    part.width_bytes = part.src_pitch = part.dst_pitch = p;
    part.height = rows;
    status = copy_2d(bctx, &part, h, async);
    if (status != GM_OK || rest == 0)
        return status;
    part.src = row->src + (gm_devptr)(rows * p);
    part.dst = row->dst + (gm_devptr)(rows * p);
    part.width_bytes = part.src_pitch = part.dst_pitch = rest;
    part.height = 1;
    return copy_2d(bctx, &part, h, async);
}

/* One row at a time, for pitches the driver's 2-D/3-D copies do not accept. */
static gm_status copy_rows(gm_backend_ctx *bctx, const gm_copy_desc *d, CUstream h, int async)
{
    gm_status status = GM_OK;
    gm_copy_desc row = *d;

    row.height = row.depth = row.src_height = row.dst_height = 1;
    row.src_pitch = row.dst_pitch = d->width_bytes;
    for (size_t z = 0; status == GM_OK && z < d->depth; z++) {
        for (size_t y = 0; status == GM_OK && y < d->height; y++) {
            row.src = d->src + (gm_devptr)((z * d->src_height + y) * d->src_pitch);
            row.dst = d->dst + (gm_devptr)((z * d->dst_height + y) * d->dst_pitch);
            if (d->src_side == GM_COPY_HOST && d->dst_side == GM_COPY_HOST)
                status = copy_host_row(bctx, &row, h, async);
            else
                status = copy_linear(bctx, row.dst_side, row.dst, row.src_side, row.src,
                                     row.width_bytes, h, async);
        }
    }
    return status;
}

/* Issue a simplified, non-empty copy with the cheapest driver call that expresses it. */
static gm_status issue_copy(gm_backend_ctx *bctx, const gm_copy_desc *d, CUstream h, int async)
{
    int host_to_host = d->src_side == GM_COPY_HOST && d->dst_side == GM_COPY_HOST;
    int too_wide =
        bctx->max_pitch != 0 && (d->src_pitch > bctx->max_pitch || d->dst_pitch > bctx->max_pitch);
    gm_status status = GM_OK;
    gm__saved_error saved;

    if (d->height == 1 && d->depth == 1 && host_to_host == 0)
        return copy_linear(bctx, d->dst_side, d->dst, d->src_side, d->src, d->width_bytes, h,
                           async);
    if (too_wide != 0)
        return copy_rows(bctx, d, h, async);
    gm__error_save(&saved);
    status = d->depth == 1 ? copy_2d(bctx, d, h, async) : copy_3d(bctx, d, h, async);
    /* cuda.h: a device-to-device cuMemcpy2D "may fail for pitches not computed by
     * cuMemAllocPitch()" (so may the 3-D one); the driver refused it whole: row by row. */
    if (status == GM_ERR_INVALID_ARG && d->src_side == GM_COPY_DEVICE &&
        d->dst_side == GM_COPY_DEVICE) {
        gm__log(GM_LOG_DEBUG,
                "cuda copy: pitches %zu/%zu refused for a device-to-device copy; "
                "copying row by row",
                d->dst_pitch, d->src_pitch);
        status = copy_rows(bctx, d, h, async);
        if (status == GM_OK) /* the refusal is not this call's error */
            gm__error_restore(&saved);
    }
    return status;
}

gm_status gm__cuda_copy(gm_backend_ctx *bctx, const gm_copy_desc *desc, gm_backend_stream *stream)
{
    gm_copy_desc d;
    gm_status status = GM_OK;

    if (desc == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "cuda copy: desc is NULL");
    d = *desc;
    if (d.width_bytes == 0 || d.height == 0 || d.depth == 0)
        return GM_OK;
    status = check_desc(&d);
    if (status == GM_OK)
        status = simplify(&d);
    if (status == GM_OK)
        status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = issue_copy(bctx, &d, gm__cuda_stream_handle(stream), stream != NULL);
    if (status == GM_OK && stream == NULL && d.dst_side == GM_COPY_DEVICE)
        status = gm__cuda_finish_sync(bctx);
    else if (status == GM_OK && stream == NULL) /* the copy waited for the legacy stream */
        gm__cuda_host_calls_seen(bctx);
    return status;
}

/* Whether all `bytes` bytes of the pattern are equal (then a byte memset does it). */
static int pattern_is_bytewise(const unsigned char *pattern, size_t bytes)
{
    for (size_t i = 1; i < bytes; i++) {
        if (pattern[i] != pattern[0])
            return 0;
    }
    return 1;
}

/*
 * An 8-byte pattern: equal halves are a 32-bit memset of 2 * count words;
 * otherwise two strided 32-bit memsets with cuMemsetD2D32(Async), treating
 * the range as `count` rows of pitch 8 and writing one word per row: the low
 * words (offset 0), then the high words (offset 4). No kernel is needed.
 */
static gm_status memset_64(gm_backend_ctx *bctx, gm_devptr dst, const unsigned char *pattern,
                           size_t count, CUstream h, int async)
{
    gm_cuda_driver *drv = &bctx->drv;
    uint32_t half[2] = {0, 0};
    gm_status status = GM_OK;

    memcpy(half, pattern, sizeof(half));
    if (half[0] == half[1])
        return async != 0 ? GM_CUDA_CALL(drv, cuMemsetD32Async, dst, half[0], 2 * count, h)
                          : GM_CUDA_CALL(drv, cuMemsetD32, dst, half[0], 2 * count);
    for (int i = 0; status == GM_OK && i < 2; i++) {
        CUdeviceptr word = (CUdeviceptr)dst + (CUdeviceptr)(4 * i);

        status = async != 0 ? GM_CUDA_CALL(drv, cuMemsetD2D32Async, word, 8, half[i], 1, count, h)
                            : GM_CUDA_CALL(drv, cuMemsetD2D32, word, 8, half[i], 1, count);
    }
    return status;
}

/* Issue a memset of count elements of 1, 2, 4 or 8 bytes. */
static gm_status issue_memset(gm_backend_ctx *bctx, gm_devptr dst, const unsigned char *pattern,
                              size_t size, size_t count, CUstream h, int async)
{
    gm_cuda_driver *drv = &bctx->drv;
    uint16_t u16 = 0;
    uint32_t u32 = 0;

    if (pattern_is_bytewise(pattern, size) != 0)
        return async != 0 ? GM_CUDA_CALL(drv, cuMemsetD8Async, dst, pattern[0], size * count, h)
                          : GM_CUDA_CALL(drv, cuMemsetD8, dst, pattern[0], size * count);
    if (size == 2) {
        memcpy(&u16, pattern, sizeof(u16));
        return async != 0 ? GM_CUDA_CALL(drv, cuMemsetD16Async, dst, u16, count, h)
                          : GM_CUDA_CALL(drv, cuMemsetD16, dst, u16, count);
    }
    if (size == 4) {
        memcpy(&u32, pattern, sizeof(u32));
        return async != 0 ? GM_CUDA_CALL(drv, cuMemsetD32Async, dst, u32, count, h)
                          : GM_CUDA_CALL(drv, cuMemsetD32, dst, u32, count);
    }
    return memset_64(bctx, dst, pattern, count, h, async);
}

/* Validate a memset: known size, aligned destination, no overflow. */
static gm_status check_memset(gm_devptr dst, const void *pattern, size_t size, size_t count)
{
    size_t total = 0;
    size_t align = size < 4 ? size : 4; /* 8-byte patterns are written as 4-byte words */

    if (pattern == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "cuda memset: pattern is NULL");
    if (size != 1 && size != 2 && size != 4 && size != 8)
        return gm__error(GM_ERR_INVALID_ARG, "cuda memset: pattern of %zu bytes (1, 2, 4 or 8)",
                         size);
    if (dst % align != 0 && pattern_is_bytewise(pattern, size) == 0)
        return gm__error(GM_ERR_INVALID_ARG,
                         "cuda memset: destination 0x%llx is not aligned to %zu bytes",
                         (unsigned long long)dst, align);
    if (__builtin_mul_overflow(size, count, &total) || __builtin_mul_overflow(total, 2, &total))
        return gm__error(GM_ERR_OVERFLOW, "cuda memset: %zu elements of %zu bytes overflows", count,
                         size);
    return GM_OK;
}

/* `count` is the number of pattern_bytes-sized elements written from dst. */
gm_status gm__cuda_memset(gm_backend_ctx *bctx, gm_devptr dst, const void *pattern,
                          size_t pattern_bytes, size_t count, gm_backend_stream *stream)
{
    gm_status status = check_memset(dst, pattern, pattern_bytes, count);

    if (status != GM_OK || count == 0)
        return status;
    status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = issue_memset(bctx, dst, pattern, pattern_bytes, count,
                              gm__cuda_stream_handle(stream), stream != NULL);
    if (status == GM_OK && stream == NULL)
        status = gm__cuda_finish_sync(bctx);
    return status;
}
