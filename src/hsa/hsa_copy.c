/*
 * Copies and memset on HSA. Device-side work is hsa_amd_memory_async_copy:
 * every piece of one operation waits on the stream's frontier (dependency
 * signals) and decrements the operation's completion signal, which starts at
 * the number of pieces. A pitched copy is one hsa_amd_memory_async_copy_rect
 * (an SDMA rectangle copy) where the runtime offers it and the copy meets its
 * rules (see use_rect), else it is cut into as few contiguous pieces as the
 * pitches allow (rows, planes or one block). Host-to-host copies run as host
 * work in stream order. Pageable host memory is locked for a copy, unless a
 * lock of another size starts at its address: then the copy is staged
 * through a buffer from the CPU's pool (staged_copy). memset copies a
 * pattern-filled staging buffer from the CPU's fine-grained pool, chunk by
 * chunk. A NULL stream is the synchronous form: the legacy default stream,
 * then a wait. The device side of a copy or memset must lie inside memory
 * the runtime knows (gm__hsa_check_device_range), checked before anything
 * is issued.
 */
#include <stdio.h>
#include <string.h>

#include "hsa_internal.h"

/* How a pitched copy is cut into contiguous pieces. */
typedef struct copy_plan {
    size_t count;     /* pieces */
    size_t width;     /* bytes per piece */
    size_t per_plane; /* pieces per plane (1 when a piece is a whole plane) */
    size_t dst_row, src_row, dst_plane, src_plane; /* strides in bytes */
} copy_plan;

/* Reject pitches under the width (rows would overlap) and plane heights under the height. */
static gm_status check_desc(const gm_copy_desc *d)
{
    size_t total = 0, extent = 0;

    if (__builtin_mul_overflow(d->width_bytes, d->height, &total) ||
        __builtin_mul_overflow(total, d->depth, &total) ||
        __builtin_mul_overflow(d->dst_pitch, d->dst_height, &extent) ||
        __builtin_mul_overflow(extent, d->depth, &extent) ||
        __builtin_mul_overflow(d->src_pitch, d->src_height, &extent) ||
        __builtin_mul_overflow(extent, d->depth, &extent))
        return gm__error(GM_ERR_OVERFLOW, "copy: %zu x %zu x %zu bytes overflow", d->width_bytes,
                         d->height, d->depth);
    if (d->height > 1 && (d->dst_pitch < d->width_bytes || d->src_pitch < d->width_bytes))
        return gm__error(GM_ERR_INVALID_ARG, "copy: pitches %zu/%zu below the row width %zu",
                         d->dst_pitch, d->src_pitch, d->width_bytes);
    if (d->depth > 1 && (d->dst_height < d->height || d->src_height < d->height))
        return gm__error(GM_ERR_INVALID_ARG, "copy: plane heights %zu/%zu below the height %zu",
                         d->dst_height, d->src_height, d->height);
    return GM_OK;
}

static void make_plan(const gm_copy_desc *d, copy_plan *plan)
{
    /* rows touch within a plane; planes touch (a plane of one row too: its stride is the
     * pitch times the plane height, which can exceed the row) */
    bool rows_packed =
        d->height == 1 || (d->dst_pitch == d->width_bytes && d->src_pitch == d->width_bytes);
    bool planes_packed =
        d->depth == 1 || (d->dst_pitch * d->dst_height == d->width_bytes * d->height &&
                          d->src_pitch * d->src_height == d->width_bytes * d->height);

    plan->dst_row = d->dst_pitch;
    plan->src_row = d->src_pitch;
    plan->dst_plane = d->dst_pitch * d->dst_height;
    plan->src_plane = d->src_pitch * d->src_height;
    if (rows_packed && planes_packed) {
        plan->count = 1;
        plan->width = d->width_bytes * d->height * d->depth;
        plan->per_plane = 1;
    } else if (rows_packed) {
        plan->count = d->depth;
        plan->width = d->width_bytes * d->height;
        plan->per_plane = 1;
    } else {
        plan->count = d->height * d->depth;
        plan->width = d->width_bytes;
        plan->per_plane = d->height;
    }
}

static size_t dst_offset(const copy_plan *p, size_t i)
{
    return (i / p->per_plane) * p->dst_plane + (i % p->per_plane) * p->dst_row;
}

static size_t src_offset(const copy_plan *p, size_t i)
{
    return (i / p->per_plane) * p->src_plane + (i % p->per_plane) * p->src_row;
}

/* The dependency handles of an operation as the copy API wants them (NULL when none). */
static gm_status dep_handles(const gm__hsa_op *op, hsa_signal_t **handles_p)
{
    hsa_signal_t *handles = NULL;

    *handles_p = NULL;
    if (op->ndeps == 0)
        return GM_OK;
    handles = gm__calloc(op->ndeps, sizeof(*handles));
    if (handles == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "copy: no memory for dependency signals");
    for (size_t i = 0; i < op->ndeps; i++)
        handles[i] = op->deps[i]->handle;
    *handles_p = handles;
    return GM_OK;
}

/* Which agent stands for one side of a copy. */
static hsa_agent_t side_agent(const gm_backend_ctx *bctx, gm_copy_side side)
{
    return side == GM_COPY_HOST ? bctx->cpu : bctx->gpu;
}

/* One DMA piece source/destination pair. */
typedef struct dma_side {
    char *addr;
    hsa_agent_t agent;
} dma_side;

/*
 * Issue `count` async copies of `width` bytes; piece i goes from src + soff(i)
 * to dst + doff(i). Returns how many were issued in *issued_p.
 */
static gm_status issue_pieces(gm_backend_ctx *bctx, gm__hsa_op *op, dma_side dst, dma_side src,
                              const copy_plan *plan, size_t *issued_p)
{
    hsa_signal_t *deps = NULL;
    gm_status status = dep_handles(op, &deps);

    for (size_t i = 0; i < plan->count && status == GM_OK; i++) {
        status =
            GM_HSA_CALL(&bctx->api, hsa_amd_memory_async_copy,
                        (dst.addr + dst_offset(plan, i), dst.agent, src.addr + src_offset(plan, i),
                         src.agent, plan->width, (uint32_t)op->ndeps, deps, op->done->handle));
        if (status == GM_OK)
            (*issued_p)++;
    }
    gm__free(deps);
    return status;
}

/*
 * Commit an operation of `planned` pieces of which `issued` reached the
 * runtime: the missing ones are subtracted from its signal so it completes
 * with the issued ones. sync: wait for it. Lock held.
 */
static gm_status finish(gm_backend_ctx *bctx, gm_backend_stream *stream, gm__hsa_op *op,
                        size_t planned, size_t issued, gm_status status, bool sync)
{
    gm_status waited = GM_OK;

    if (issued == 0 && status != GM_OK) {
        gm__hsa_op_abort(bctx, op);
        return status;
    }
    if (issued < planned)
        bctx->api.hsa_signal_subtract_screlease(op->done->handle,
                                                (hsa_signal_value_t)(planned - issued));
    if (!sync) {
        gm__hsa_op_commit(bctx, stream, op);
        return status;
    }
    waited = gm__hsa_op_finish_sync(bctx, stream, op);
    return status != GM_OK ? status : waited;
}

/* Resolve the host side of a DMA (locking pageable memory for the operation); *split_p:
 * it cannot be locked and the copy must be staged (gm__hsa_host_for_dma). */
static gm_status dma_endpoint(gm_backend_ctx *bctx, gm_copy_side side, gm_devptr addr,
                              size_t extent, gm__hsa_lock **locked_p, bool *split_p, dma_side *out)
{
    void *agent_addr = (void *)(uintptr_t)addr;
    gm_status status = GM_OK;

    out->agent = side_agent(bctx, side);
    if (side == GM_COPY_HOST)
        status = gm__hsa_host_for_dma(bctx, (void *)(uintptr_t)addr, extent, &agent_addr, locked_p,
                                      split_p);
    out->addr = agent_addr;
    return status;
}

/* Rows per plane of one side as the rect copy sees it (a 2-D copy's plane is its rows). */
static size_t plane_rows(const gm_copy_desc *d, size_t side_height)
{
    return d->depth > 1 ? side_height : d->height;
}

/* Bytes from the first to one past the last byte a side touches. */
static size_t side_span(const gm_copy_desc *d, size_t pitch, size_t side_height)
{
    return (d->depth - 1) * pitch * plane_rows(d, side_height) + (d->height - 1) * pitch +
           d->width_bytes;
}

/*
 * Whether a copy of more than one piece can be one
 * hsa_amd_memory_async_copy_rect, within ROCr's rules for it: the runtime has
 * the call and an SDMA engine (no_copy_rect), dword-aligned start addresses,
 * pitches and plane sizes, extents that fit hsa_dim3_t's 32 bits, pitches and
 * plane sizes within what the SDMA rectangle packet encodes even in 1-byte
 * elements (pitch < 2^19 bytes; plane < 2^28 bytes), and no overlap between
 * the two sides (the runtime forbids it). Recent ROCr turns a 2-D copy of a
 * wider pitch into an X-Z rectangle (the slice takes the pitch's place), but
 * whether ROCm 5.2 does is not known here, so wider pitches go as pieces.
 * Lock held.
 */
static bool use_rect(const gm_backend_ctx *bctx, const gm_copy_desc *d, const copy_plan *plan,
                     dma_side dst, dma_side src)
{
    size_t dslice = d->dst_pitch * plane_rows(d, d->dst_height);
    size_t sslice = d->src_pitch * plane_rows(d, d->src_height);
    size_t max_pitch = (size_t)1 << 19;
    uintptr_t da = (uintptr_t)dst.addr, sa = (uintptr_t)src.addr;
    size_t dspan = side_span(d, d->dst_pitch, d->dst_height);
    size_t sspan = side_span(d, d->src_pitch, d->src_height);

    if (bctx->api.hsa_amd_memory_async_copy_rect == NULL || bctx->no_copy_rect || plan->count < 2)
        return false;
    if (((da | sa | d->dst_pitch | d->src_pitch | dslice | sslice) & 3u) != 0)
        return false;
    if (d->width_bytes > UINT32_MAX || d->height > UINT32_MAX || d->depth > UINT32_MAX ||
        d->dst_pitch >= max_pitch || d->src_pitch >= max_pitch || dslice >= ((size_t)1 << 28) ||
        sslice >= ((size_t)1 << 28))
        return false;
    return da + dspan <= sa || sa + sspan <= da;
}

/*
 * Whether a side is GPU memory, not host memory the GPU reaches (pinned or
 * mapped pool memory, registered memory at its agent address: a descriptor's
 * device side may be either). When the runtime cannot say, the side says.
 */
static bool gpu_memory(gm_backend_ctx *bctx, gm_copy_side side, const void *addr)
{
    int kind = GM_MEMORY_HOST;
    gm__saved_error saved;

    if (side == GM_COPY_HOST)
        return false;
    gm__error_save(&saved);
    if (gm__hsa_pointer_kind(bctx, addr, &kind) != GM_OK) {
        gm__error_restore(&saved);
        return true;
    }
    return kind == GM_MEMORY_DEVICE;
}

/*
 * The direction argument of the rect copy, by the memory of each side (ROCr
 * picks the host-to-device, device-to-host or device-to-device engine by it);
 * false when both sides are host memory (no rectangle: ROCr refuses
 * host-to-host).
 */
static bool rect_direction(gm_backend_ctx *bctx, const gm_copy_desc *d, dma_side dst, dma_side src,
                           hsa_amd_copy_direction_t *dir_p)
{
    bool dst_gpu = gpu_memory(bctx, d->dst_side, dst.addr);
    bool src_gpu = gpu_memory(bctx, d->src_side, src.addr);

    if (!dst_gpu && !src_gpu)
        return false;
    *dir_p = !src_gpu ? hsaHostToDevice : !dst_gpu ? hsaDeviceToHost : hsaDeviceToDevice;
    return true;
}

/*
 * Issue the copy as one rectangle on the context's GPU (the copy agent must
 * be a GPU). *refused_p is set when the runtime cannot do rectangles here:
 * HSA_STATUS_ERROR_OUT_OF_RESOURCES from this call means no SDMA engine (not
 * memory), HSA_STATUS_ERROR_INVALID_AGENT a GPU older than gfx9.
 */
static gm_status issue_rect(gm_backend_ctx *bctx, gm__hsa_op *op, const gm_copy_desc *d,
                            dma_side dst, dma_side src, hsa_amd_copy_direction_t dir,
                            bool *refused_p)
{
    hsa_pitched_ptr_t dp = {dst.addr, d->dst_pitch, d->dst_pitch * plane_rows(d, d->dst_height)};
    hsa_pitched_ptr_t sp = {src.addr, d->src_pitch, d->src_pitch * plane_rows(d, d->src_height)};
    hsa_dim3_t origin = {0, 0, 0};
    hsa_dim3_t range = {(uint32_t)d->width_bytes, (uint32_t)d->height, (uint32_t)d->depth};
    hsa_signal_t *deps = NULL;
    hsa_status_t hs = HSA_STATUS_SUCCESS;
    gm_status status = dep_handles(op, &deps);

    if (status != GM_OK)
        return status;
    hs = bctx->api.hsa_amd_memory_async_copy_rect(&dp, &origin, &sp, &origin, &range, bctx->gpu,
                                                  dir, (uint32_t)op->ndeps, deps, op->done->handle);
    gm__free(deps);
    *refused_p = hs == HSA_STATUS_ERROR_OUT_OF_RESOURCES || hs == HSA_STATUS_ERROR_INVALID_AGENT;
    if (*refused_p)
        return GM_OK;
    return gm__hsa_check(hs, &bctx->api, GM_OK, "hsa_amd_memory_async_copy_rect", __FILE__,
                         __LINE__);
}

/*
 * Try the pitched copy as one rectangle: GM_OK with *done_p set when it was
 * issued (the operation's signal then counts 1), or not tried / refused
 * (*done_p false, the signal back at the piece count). Lock held.
 */
static gm_status try_rect(gm_backend_ctx *bctx, gm__hsa_op *op, const gm_copy_desc *d,
                          const copy_plan *plan, dma_side dst, dma_side src, bool *done_p)
{
    hsa_amd_copy_direction_t dir = hsaHostToDevice;
    bool refused = false;
    gm_status status = GM_OK;

    *done_p = false;
    if (!use_rect(bctx, d, plan, dst, src) || !rect_direction(bctx, d, dst, src, &dir))
        return GM_OK;
    bctx->api.hsa_signal_store_screlease(op->done->handle, 1); /* not yet visible to anyone */
    status = issue_rect(bctx, op, d, dst, src, dir, &refused);
    if (refused) {
        bctx->no_copy_rect = true;
        bctx->api.hsa_signal_store_screlease(op->done->handle, (hsa_signal_value_t)plan->count);
        return GM_OK;
    }
    *done_p = true;
    return status;
}

/*
 * Begin a DMA operation for d and resolve both sides into *dst and *src.
 * *split_p: a pageable host side cannot be locked (the copy is to be
 * staged); no operation is left then. Lock held, never released.
 */
static gm_status dma_begin(gm_backend_ctx *bctx, gm_backend_stream *stream, const gm_copy_desc *d,
                           const copy_plan *plan, dma_side *dst, dma_side *src, bool *split_p,
                           gm__hsa_op **op_p)
{
    size_t last = plan->count - 1;
    gm__hsa_op *op = NULL;
    gm_status status = gm__hsa_op_begin(bctx, stream, (hsa_signal_value_t)plan->count, false,
                                        "hsa_amd_memory_async_copy", &op);

    *split_p = false;
    if (status != GM_OK)
        return status;
    status = dma_endpoint(bctx, d->dst_side, d->dst, dst_offset(plan, last) + plan->width,
                          &op->locked[0], split_p, dst);
    if (status == GM_OK && !*split_p)
        status = dma_endpoint(bctx, d->src_side, d->src, src_offset(plan, last) + plan->width,
                              &op->locked[1], split_p, src);
    if (status != GM_OK || *split_p) {
        gm__hsa_op_abort(bctx, op);
        return status;
    }
    *op_p = op;
    return GM_OK;
}

static gm_status staged_copy(gm_backend_ctx *bctx, gm_backend_stream *stream, const gm_copy_desc *d,
                             bool sync);

/*
 * A copy with at least one device side: one rectangle, or DMA pieces;
 * staged when its pageable host side cannot be locked. stage: the staging
 * buffer of staged_copy's own DMA (pool memory, never staged again), which
 * the operation holds. Lock held.
 */
static gm_status dma_copy(gm_backend_ctx *bctx, gm_backend_stream *stream, const gm_copy_desc *d,
                          bool sync, gm__hsa_stage *stage)
{
    copy_plan plan;
    dma_side dst, src;
    gm__hsa_op *op = NULL;
    size_t issued = 0;
    bool rect = false, split = false;
    gm_status status = GM_OK;

    make_plan(d, &plan);
    status = dma_begin(bctx, stream, d, &plan, &dst, &src, &split, &op);
    if (status == GM_OK && split && stage == NULL)
        return staged_copy(bctx, stream, d, sync);
    if (status == GM_OK && split)
        status = gm__error(GM_ERR_INTERNAL, "copy: the staging buffer %p would need staging",
                           stage->buf);
    if (status != GM_OK)
        return status;
    if (stage != NULL) {
        op->stage = stage;
        stage->refs++;
    }
    status = try_rect(bctx, op, d, &plan, dst, src, &rect);
    if (rect)
        return finish(bctx, stream, op, 1, status == GM_OK ? 1 : 0, status, sync);
    if (status == GM_OK)
        status = issue_pieces(bctx, op, dst, src, &plan, &issued);
    return finish(bctx, stream, op, plan.count, issued, status, sync);
}

/*
 * A host-to-host copy as host work in stream order. stage: the staging
 * buffer it reads or writes (staged_copy), held by the operation;
 * pass_failure: a failed dependency fails it too (see gm__hsa_work). Lock
 * held.
 */
static gm_status host_copy(gm_backend_ctx *bctx, gm_backend_stream *stream, const gm_copy_desc *d,
                           bool sync, gm__hsa_stage *stage, bool pass_failure)
{
    gm__hsa_work *work = gm__calloc(1, sizeof(*work));
    gm__hsa_op *op = NULL;
    gm_status status = GM_OK;

    if (work == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "copy: no memory");
    work->kind = GM_HSA_WORK_MEMCPY;
    work->copy = *d;
    work->sync = sync;
    work->pass_failure = pass_failure;
    status = gm__hsa_op_begin(bctx, stream, 1, true, "host copy", &op);
    if (status != GM_OK) {
        gm__free(work);
        return status;
    }
    if (stage != NULL) {
        op->stage = stage;
        stage->refs++;
    }
    status = gm__hsa_host_work(bctx, stream, work, op);
    return finish(bctx, stream, op, 1, status == GM_OK ? 1 : 0, status, sync);
}

/* A staging buffer of `bytes` from the CPU's pool, reachable by the GPU; one reference, for
 * pageable memory at host. */
static gm_status stage_new(gm_backend_ctx *bctx, size_t bytes, const void *host,
                           gm__hsa_stage **stage_p)
{
    gm__hsa_stage *stage = gm__calloc(1, sizeof(*stage));
    char detail[GM_HSA_ERROR_TEXT];
    gm_status status = GM_OK;

    if (stage == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "copy: no memory for a staging buffer");
    status = gm__hsa_host_pool_alloc(bctx, bctx->host_pool, bctx->host_pool_needs_access, bytes,
                                     &stage->buf);
    if (status != GM_OK) {
        snprintf(detail, sizeof(detail), "%s", gm_last_error_message());
        gm__free(stage);
        return gm__error(status,
                         "copy: no staging buffer of %zu bytes for pageable memory at %p, which "
                         "cannot be locked (a lock of another size starts there): %s",
                         bytes, host, detail);
    }
    stage->refs = 1;
    *stage_p = stage;
    return GM_OK;
}

void gm__hsa_stage_unref(gm_backend_ctx *bctx, gm__hsa_stage *stage)
{
    if (stage == NULL || --stage->refs > 0)
        return;
    (void)GM_HSA_CALL(&bctx->api, hsa_amd_memory_pool_free, (stage->buf));
    gm__free(stage);
}

/*
 * A copy whose pageable host side cannot be locked: a lock of another size
 * starts at its address (another context's pending copy, a registration
 * the range runs past, a pending copy of this context's of another length),
 * and a second registration there could never be unlocked (libhsakmt finds
 * the one to unlock by address alone). Nothing waits for that lock to go
 * (here, possibly in a stream callback, the copies holding it may wait for
 * the caller): the host side goes through a packed staging buffer from the
 * CPU's pool, in stream order, both operations holding it. To the device:
 * host work copies the rows into it (a failed dependency fails that work,
 * so the DMA does not start, as it would not have unstaged), then the DMA.
 * From the device: the DMA, then host work copies the rows out (a failure
 * of the DMA skips it; a synchronous caller gets that failure, not the
 * stream). Lock held (released only while host work waits for queue room).
 */
static gm_status staged_copy(gm_backend_ctx *bctx, gm_backend_stream *stream, const gm_copy_desc *d,
                             bool sync)
{
    bool to_host = d->dst_side == GM_COPY_HOST;
    gm_copy_desc dma = *d, rows = *d;
    gm__hsa_stage *stage = NULL;
    gm_status status = stage_new(bctx, d->width_bytes * d->height * d->depth,
                                 (const void *)(uintptr_t)(to_host ? d->dst : d->src), &stage);

    if (status != GM_OK)
        return status;
    if (to_host) {
        dma.dst = (gm_devptr)(uintptr_t)stage->buf;
        dma.dst_pitch = d->width_bytes;
        dma.dst_height = d->height;
        rows.src = dma.dst;
        rows.src_side = GM_COPY_HOST;
        rows.src_pitch = d->width_bytes;
        rows.src_height = d->height;
        status = dma_copy(bctx, stream, &dma, false, stage);
        if (status == GM_OK) /* the DMA is the stream's last operation: the lock was held */
            stream->ops_tail->reported = sync;
        if (status == GM_OK)
            status = host_copy(bctx, stream, &rows, sync, stage, false);
    } else {
        rows.dst = (gm_devptr)(uintptr_t)stage->buf;
        rows.dst_side = GM_COPY_HOST;
        rows.dst_pitch = d->width_bytes;
        rows.dst_height = d->height;
        dma.src = rows.dst;
        dma.src_pitch = d->width_bytes;
        dma.src_height = d->height;
        status = host_copy(bctx, stream, &rows, false, stage, true);
        if (status == GM_OK)
            status = dma_copy(bctx, stream, &dma, sync, stage);
    }
    gm__hsa_stage_unref(bctx, stage);
    return status;
}

/* Issue a checked, non-empty copy on its stream (NULL: synchronously). */
static gm_status issue_copy(gm_backend_ctx *bctx, const gm_copy_desc *desc,
                            gm_backend_stream *stream)
{
    gm_status status = GM_OK;
    bool sync = stream == NULL;

    pthread_mutex_lock(&bctx->lock);
    stream = gm__hsa_stream_resolve(bctx, stream);
    if (desc->dst_side == GM_COPY_HOST && desc->src_side == GM_COPY_HOST)
        status = host_copy(bctx, stream, desc, sync, NULL, false);
    else
        status = dma_copy(bctx, stream, desc, sync, NULL);
    pthread_mutex_unlock(&bctx->lock);
    return status;
}

gm_status gm__hsa_copy_unchecked(gm_backend_ctx *bctx, const gm_copy_desc *desc,
                                 gm_backend_stream *stream)
{
    gm_status status = check_desc(desc);

    if (status != GM_OK || desc->width_bytes == 0 || desc->height == 0 || desc->depth == 0)
        return status;
    return issue_copy(bctx, desc, stream);
}

/* One device side of a copy inside memory the runtime knows (its span checked for overflow). */
static gm_status check_side(gm_backend_ctx *bctx, const gm_copy_desc *d, gm_devptr addr,
                            size_t pitch, size_t side_height, const char *what)
{
    size_t span = 0, rows = 0;

    if (__builtin_mul_overflow(d->depth - 1, plane_rows(d, side_height), &span) ||
        __builtin_add_overflow(span, d->height - 1, &rows) ||
        __builtin_mul_overflow(rows, pitch, &span) ||
        __builtin_add_overflow(span, d->width_bytes, &span))
        return gm__error(GM_ERR_OVERFLOW, "copy: the %s side's extent overflows", what);
    return gm__hsa_check_device_range(bctx, addr, span, "copy", what);
}

/*
 * A copy whose device sides lie inside memory the runtime knows: the DMA
 * engine would write past an allocation's end (the simulator and CUDA refuse
 * such a copy with GM_ERR_INVALID_ARG; so does this, before anything is
 * issued).
 */
gm_status gm__hsa_copy(gm_backend_ctx *bctx, const gm_copy_desc *desc, gm_backend_stream *stream)
{
    gm_status status = check_desc(desc);

    if (status != GM_OK || desc->width_bytes == 0 || desc->height == 0 || desc->depth == 0)
        return status;
    if (desc->dst_side == GM_COPY_DEVICE)
        status =
            check_side(bctx, desc, desc->dst, desc->dst_pitch, desc->dst_height, "destination");
    if (status == GM_OK && desc->src_side == GM_COPY_DEVICE)
        status = check_side(bctx, desc, desc->src, desc->src_pitch, desc->src_height, "source");
    if (status != GM_OK)
        return status;
    return issue_copy(bctx, desc, stream);
}

/* ------------------------------------------------------------- memset */

/* A staging buffer of `bytes` filled with the pattern. */
static gm_status pattern_buffer(gm_backend_ctx *bctx, const void *pattern, size_t pattern_bytes,
                                size_t bytes, void **buf_p)
{
    char *buf = NULL;
    gm_status status = gm__hsa_host_pool_alloc(bctx, bctx->host_pool, bctx->host_pool_needs_access,
                                               bytes, (void **)&buf);

    if (status != GM_OK)
        return status;
    for (size_t at = 0; at < bytes; at += pattern_bytes)
        memcpy(buf + at, pattern, pattern_bytes);
    *buf_p = buf;
    return GM_OK;
}

/* Copy the staging buffer over [dst, dst + total). Lock held. */
static gm_status fill(gm_backend_ctx *bctx, gm_backend_stream *stream, gm_devptr dst,
                      const void *pattern, size_t pattern_bytes, size_t total, bool sync)
{
    size_t chunk = total < GM_HSA_MEMSET_CHUNK ? total : GM_HSA_MEMSET_CHUNK;
    copy_plan plan = {total / chunk, chunk, 1, 0, 0, chunk, 0};
    dma_side to = {(char *)(uintptr_t)dst, bctx->gpu};
    dma_side from = {NULL, bctx->cpu};
    size_t issued = 0, tail = total - plan.count * chunk;
    gm__hsa_op *op = NULL;
    gm_status status = gm__hsa_op_begin(
        bctx, stream, (hsa_signal_value_t)(plan.count + (tail != 0 ? 1 : 0)), false, "memset", &op);

    if (status != GM_OK)
        return status;
    status = pattern_buffer(bctx, pattern, pattern_bytes, chunk, &op->staging);
    from.addr = op->staging;
    if (status == GM_OK)
        status = issue_pieces(bctx, op, to, from, &plan, &issued);
    if (status == GM_OK && tail != 0) {
        copy_plan last = {1, tail, 1, 0, 0, 0, 0};

        to.addr += plan.count * chunk;
        status = issue_pieces(bctx, op, to, from, &last, &issued);
    }
    return finish(bctx, stream, op, plan.count + (tail != 0 ? 1 : 0), issued, status, sync);
}

gm_status gm__hsa_memset(gm_backend_ctx *bctx, gm_devptr dst, const void *pattern,
                         size_t pattern_bytes, size_t count, gm_backend_stream *stream)
{
    size_t total = 0;
    gm_status status = GM_OK;

    if (pattern_bytes != 1 && pattern_bytes != 2 && pattern_bytes != 4 && pattern_bytes != 8)
        return gm__error(GM_ERR_INVALID_ARG, "memset: pattern of %zu bytes (1, 2, 4 or 8)",
                         pattern_bytes);
    if (__builtin_mul_overflow(count, pattern_bytes, &total))
        return gm__error(GM_ERR_OVERFLOW, "memset: %zu elements of %zu bytes", count,
                         pattern_bytes);
    if (total == 0)
        return GM_OK;
    status = gm__hsa_check_device_range(bctx, dst, total, "memset", "destination");
    if (status != GM_OK)
        return status;
    pthread_mutex_lock(&bctx->lock);
    status = fill(bctx, gm__hsa_stream_resolve(bctx, stream), dst, pattern, pattern_bytes, total,
                  stream == NULL);
    pthread_mutex_unlock(&bctx->lock);
    return status;
}
