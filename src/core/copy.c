/*
 * The transfer engine behind gm_copy, the array copy calls, gm_array_fill
 * and gm_array_memset.
 *
 * A copy between two descriptors is normalised into a plan: extents of 1
 * dropped, axes negative on both sides walked backwards, axes sorted by
 * decreasing destination stride, and neighbours contiguous on both sides
 * merged. The innermost (up to) three axes that a pitched copy can express
 * (a contiguous run, rows at a pitch, planes at a multiple of the pitch)
 * become one gm_copy_desc; any other axes are looped over, one ops->copy per
 * index ("pieces"). The strategy, cheapest first:
 *
 *   1. host to host: gm__host_copy_strided (in stream order with a stream);
 *   1b. without a stream, the backend's ops->copy_views when it has one
 *      (the simulator: its engine on the views, before any plan); it
 *      declines when a device side is not plainly its memory, and the steps
 *      below decide and explain;
 *   2. one piece: a single 1-D/2-D/3-D pitched ops->copy;
 *   3. the backend's ops->copy_strided, when it has one;
 *   4. at most GM__DIRECT_MAX_PIECES pieces: that many ops->copy calls;
 *   5. staging: each device side is copied to or from a host temporary that
 *      mirrors its layout (same axis order and signs, packed), which takes
 *      few pieces, and the rearrangement runs on the host with
 *      gm__host_copy_strided.
 *
 * Two sides in one address space (both device-side or both host-side
 * memory) whose byte extents intersect are refused before anything moves:
 * an extent test (so interleaved views such as d[0::2] and d[1::2] are
 * refused too), which costs the common case, disjoint extents, one or two
 * compares.
 *
 * The common case is recognised before any plan is made: both descriptors
 * valid (one pass over each, which also gives its byte extent), alike in
 * dtype and shape, and each one dense byte range with the same element order
 * (equal strides, the elements tiling the range, e.g. both C-contiguous).
 * Such a copy is the one 1-D ops->copy that its plan would be, or host to
 * host without a stream the one memcpy the host engine would do; checks,
 * errors and stream semantics are those of the general path. The commonest
 * of them, two C-contiguous sides alike (whole arrays to and from the
 * device), is recognised first, in one pass over both descriptors at once
 * (c_dense_pair), and goes to the same checks and copy.
 *
 * Temporaries and the descriptors of the host step live in one gm__malloc'd
 * block (a "job"). Without a stream everything is synchronous and the job is
 * freed before returning. With a stream the host step runs in stream order
 * (stream_enqueue_host), and a last stream-ordered cleanup hands the job to
 * the deallocation queue without flushing (no bookkeeping memory is freed on
 * a backend worker thread); the next flush frees it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ndview_internal.h"
#include "runtime_internal.h"

/* Most ops->copy calls a direct (unstaged) copy may take. */
#define GM__DIRECT_MAX_PIECES 64
/* Alignment of the temporaries inside a job block. */
#define GM__JOB_ALIGN 64

/* One axis of a plan: extent and byte strides on both sides. */
typedef struct copy_axis {
    int64_t extent;
    int64_t dst_stride;
    int64_t src_stride;
} copy_axis;

/* A copy as one pitched descriptor repeated over outer axes. */
typedef struct copy_plan {
    gm_copy_desc desc; /* dst / src filled per piece */
    uintptr_t dst_base;
    uintptr_t src_base;
    int nouter;
    copy_axis outer[GM_MAX_DIMS]; /* outermost first */
    int64_t pieces;
} copy_plan;

/* A staging block: header, then temporaries. */
typedef struct copy_job {
    gm_context *ctx;
    gm__dealloc_entry *entry; /* HOST_COPY entry that frees this block */
    gm_ndview host_dst;       /* the host step: host_dst <- host_src */
    gm_ndview host_src;
    unsigned char *temp[2];
    bool queued; /* a stream-ordered step that uses it was queued (it may run later) */
} copy_job;

/* Which side of a copy memory of this kind is on. */
static gm_copy_side side_of(const gm_ndview *view)
{
    return view->memory == GM_MEMORY_DEVICE || view->memory == GM_MEMORY_MANAGED ? GM_COPY_DEVICE
                                                                                 : GM_COPY_HOST;
}

/* Absolute value (strides are far from INT64_MIN). */
static int64_t abs64(int64_t v)
{
    return v < 0 ? -v : v;
}

/* ---------------------------------------------------------------- plans */

/* Axes that matter, with axes negative on both sides reversed. */
static int collect_axes(const gm_ndview *dst, const gm_ndview *src, copy_axis *axes,
                        uintptr_t *dst_base, uintptr_t *src_base)
{
    int n = 0;

    *dst_base = (uintptr_t)dst->data + (uintptr_t)dst->offset;
    *src_base = (uintptr_t)src->data + (uintptr_t)src->offset;
    for (int i = 0; i < dst->ndim; i++) {
        copy_axis a = {dst->shape[i], dst->strides[i], src->strides[i]};

        if (a.extent == 1)
            continue;
        if (a.dst_stride < 0 && a.src_stride < 0) {
            *dst_base += (uintptr_t)((a.extent - 1) * a.dst_stride);
            *src_base += (uintptr_t)((a.extent - 1) * a.src_stride);
            a.dst_stride = -a.dst_stride;
            a.src_stride = -a.src_stride;
        }
        axes[n++] = a;
    }
    return n;
}

/* Whether axis a should come before (outside) axis b. */
static bool outer_than(const copy_axis *a, const copy_axis *b)
{
    if (abs64(a->dst_stride) != abs64(b->dst_stride))
        return abs64(a->dst_stride) > abs64(b->dst_stride);
    return abs64(a->src_stride) > abs64(b->src_stride);
}

/* Stable insertion sort, outermost first. */
static void sort_axes(copy_axis *axes, int n)
{
    for (int i = 1; i < n; i++) {
        copy_axis a = axes[i];
        int j = i;

        while (j > 0 && outer_than(&a, &axes[j - 1])) {
            axes[j] = axes[j - 1];
            j--;
        }
        axes[j] = a;
    }
}

/* Merge each axis into its inner neighbour when both sides are contiguous across them. */
static int coalesce(copy_axis *axes, int n)
{
    int out = 0;

    for (int i = 0; i < n; i++) {
        copy_axis *prev = out > 0 ? &axes[out - 1] : NULL;
        int64_t dst_span = 0, src_span = 0; /* an overflow (strides no memory has) merges not */

        if (prev != NULL && !gm__mul_overflow(axes[i].dst_stride, axes[i].extent, &dst_span) &&
            !gm__mul_overflow(axes[i].src_stride, axes[i].extent, &src_span) &&
            prev->dst_stride == dst_span && prev->src_stride == src_span) {
            prev->extent *= axes[i].extent;
            prev->dst_stride = axes[i].dst_stride;
            prev->src_stride = axes[i].src_stride;
        } else {
            axes[out++] = axes[i];
        }
    }
    return out;
}

/* The widest unit (8, 4, 2 or 1 bytes) dividing the item size, both bases and every stride. */
static int64_t unit_bytes(uintptr_t dst_base, uintptr_t src_base, const copy_axis *axes, int n,
                          int64_t itemsize)
{
    uint64_t bits = (uint64_t)dst_base | (uint64_t)src_base | (uint64_t)itemsize;
    int64_t unit = 8;

    for (int i = 0; i < n; i++)
        bits |= (uint64_t)axes[i].dst_stride | (uint64_t)axes[i].src_stride;
    while (unit > 1 && bits % (uint64_t)unit != 0)
        unit /= 2;
    return unit;
}

/* The packing kernel's layout for a checked copy (see backend.h). */
gm_status gm__strided_pack_layout(const char *fn, const gm_ndview *dst, const gm_ndview *src,
                                  gm_strided_layout *layout, gm_devptr *dst_p, gm_devptr *src_p,
                                  int64_t *count_p)
{
    copy_axis axes[GM_MAX_DIMS + 1];
    uintptr_t dst_base = 0, src_base = 0;
    int64_t itemsize = gm_ndview_itemsize(dst), unit = 1, count = 1;
    int n = 0;

    memset(layout, 0, sizeof(*layout));
    if (dst->ndim < 0 || dst->ndim > GM_MAX_DIMS || itemsize <= 0)
        return gm__error(GM_ERR_INVALID_ARG, "%s: unchecked descriptor", fn);
    n = collect_axes(dst, src, axes, &dst_base, &src_base);
    unit = unit_bytes(dst_base, src_base, axes, n, itemsize);
    if (itemsize > unit)
        axes[n++] = (copy_axis){itemsize / unit, unit, unit};
    sort_axes(axes, n);
    n = coalesce(axes, n);
    if (n > GM_STRIDED_MAX_DIMS)
        return gm__error(GM_ERR_UNSUPPORTED, "%s: %d axes after merging, the kernel walks %d", fn,
                         n, GM_STRIDED_MAX_DIMS);
    for (int i = 0; i < n; i++) {
        layout->shape[i] = axes[i].extent;
        layout->dst_strides[i] = axes[i].dst_stride;
        layout->src_strides[i] = axes[i].src_stride;
        count *= axes[i].extent; /* no overflow: the checked views' byte sizes fit */
    }
    if (n == 0) { /* a single unit */
        layout->shape[0] = 1;
        n = 1;
    }
    layout->ndim = n;
    layout->itemsize = (int32_t)unit;
    *dst_p = (gm_devptr)dst_base;
    *src_p = (gm_devptr)src_base;
    *count_p = count;
    return GM_OK;
}

/* Whether an axis can be the rows of a pitched copy of runs of `width` bytes. */
static bool fits_rows(const copy_axis *a, size_t width)
{
    return a->dst_stride > 0 && a->src_stride > 0 && (size_t)a->dst_stride >= width &&
           (size_t)a->src_stride >= width;
}

/* Whether an axis can be the planes of a pitched copy with rows `d`. */
static bool fits_planes(const copy_axis *a, const gm_copy_desc *d)
{
    return a->dst_stride > 0 && a->src_stride > 0 && a->dst_stride % (int64_t)d->dst_pitch == 0 &&
           a->src_stride % (int64_t)d->src_pitch == 0 &&
           (size_t)(a->dst_stride / (int64_t)d->dst_pitch) >= d->height &&
           (size_t)(a->src_stride / (int64_t)d->src_pitch) >= d->height;
}

/* Take the innermost axes into the pitched descriptor; return how many are left. */
static int build_desc(copy_axis *axes, int n, int64_t itemsize, gm_copy_desc *d)
{
    d->width_bytes = (size_t)itemsize;
    d->height = d->depth = 1;
    if (n > 0 && axes[n - 1].dst_stride == itemsize && axes[n - 1].src_stride == itemsize)
        d->width_bytes = (size_t)(axes[--n].extent * itemsize);
    d->dst_pitch = d->src_pitch = d->width_bytes;
    if (n > 0 && fits_rows(&axes[n - 1], d->width_bytes)) {
        n--;
        d->height = (size_t)axes[n].extent;
        d->dst_pitch = (size_t)axes[n].dst_stride;
        d->src_pitch = (size_t)axes[n].src_stride;
        if (n > 0 && fits_planes(&axes[n - 1], d)) {
            n--;
            d->depth = (size_t)axes[n].extent;
            d->dst_height = (size_t)(axes[n].dst_stride / (int64_t)d->dst_pitch);
            d->src_height = (size_t)(axes[n].src_stride / (int64_t)d->src_pitch);
            return n;
        }
    }
    d->dst_height = d->src_height = d->height;
    return n;
}

/* Plan dst <- src (equal shape and dtype, size > 0). */
static void plan_build(const gm_ndview *dst, const gm_ndview *src, copy_plan *plan)
{
    copy_axis axes[GM_MAX_DIMS];
    int n = collect_axes(dst, src, axes, &plan->dst_base, &plan->src_base);

    sort_axes(axes, n);
    n = coalesce(axes, n);
    memset(&plan->desc, 0, sizeof(plan->desc));
    plan->desc.dst_side = side_of(dst);
    plan->desc.src_side = side_of(src);
    plan->nouter = build_desc(axes, n, gm_ndview_itemsize(dst), &plan->desc);
    plan->pieces = 1;
    for (int i = 0; i < plan->nouter; i++) {
        plan->outer[i] = axes[i];
        plan->pieces *= axes[i].extent;
    }
}

/* Step the outer index like an odometer, updating both byte offsets. */
static void advance(const copy_plan *plan, int64_t *index, int64_t *dst_off, int64_t *src_off)
{
    for (int k = plan->nouter - 1; k >= 0; k--) {
        const copy_axis *a = &plan->outer[k];

        /* In uint64_t: past an axis's last index the offset may leave int64 for a moment
         * (validation bounds (extent - 1) * stride, not extent * stride). */
        index[k]++;
        *dst_off = (int64_t)((uint64_t)*dst_off + (uint64_t)a->dst_stride);
        *src_off = (int64_t)((uint64_t)*src_off + (uint64_t)a->src_stride);
        if (index[k] < a->extent)
            return;
        *dst_off = (int64_t)((uint64_t)*dst_off - (uint64_t)a->extent * (uint64_t)a->dst_stride);
        *src_off = (int64_t)((uint64_t)*src_off - (uint64_t)a->extent * (uint64_t)a->src_stride);
        index[k] = 0;
    }
}

/* Issue every piece of a plan; stops at the first failure. */
static gm_status emit(gm_context *ctx, const copy_plan *plan, gm_backend_stream *bs, bool *queued_p)
{
    int64_t index[GM_MAX_DIMS];
    int64_t dst_off = 0, src_off = 0;
    gm_copy_desc desc = plan->desc;
    gm_status status = GM_OK;

    /* Only the outer axes' counters are used; a full clear would cost as much as a small copy. */
    if (plan->nouter > 0)
        memset(index, 0, (size_t)plan->nouter * sizeof index[0]);

    for (int64_t piece = 0; piece < plan->pieces && status == GM_OK; piece++) {
        desc.dst = (gm_devptr)(plan->dst_base + (uintptr_t)dst_off);
        desc.src = (gm_devptr)(plan->src_base + (uintptr_t)src_off);
        if (bs != NULL && queued_p != NULL)
            *queued_p = true; /* even a failing copy may have queued part of itself */
        status = ctx->ops->copy(ctx->bctx, &desc, bs);
        advance(plan, index, &dst_off, &src_off);
    }
    return status;
}

/* Plan and issue dst <- src, which uses job's temporaries, whatever the number of pieces. */
static gm_status emit_views(gm_context *ctx, copy_job *job, const gm_ndview *dst,
                            const gm_ndview *src, gm_backend_stream *bs)
{
    copy_plan plan;

    plan_build(dst, src, &plan);
    return emit(ctx, &plan, bs, &job->queued);
}

/* ------------------------------------------------------------------ jobs */

/* Round up to the job alignment. */
static size_t align_up(size_t n)
{
    return (n + GM__JOB_ALIGN - 1) / GM__JOB_ALIGN * GM__JOB_ALIGN;
}

/*
 * A job block with two temporaries of the given sizes (0: none), for work on
 * bs. Refused inside a stream callback of this backend where its driver
 * allows no call: its steps would all be refused, and the job could not be
 * freed.
 */
static gm_status job_create(gm_context *ctx, const char *fn, gm_backend_stream *bs, int64_t bytes0,
                            int64_t bytes1, copy_job **job_p)
{
    size_t head = align_up(sizeof(copy_job));
    size_t size0 = align_up((size_t)bytes0); /* bytes are int64: no wrap here */
    size_t total = 0;
    copy_job *job = NULL;
    gm_status status = GM_OK;

    if (bs != NULL && ctx->ops->in_driverless_callback != NULL &&
        ctx->ops->in_driverless_callback())
        return gm__error(GM_ERR_STATE,
                         "%s: stream-ordered work is not allowed inside a stream callback on the "
                         "%s backend (its driver allows no call there)",
                         fn, ctx->ops->name);
    if (__builtin_add_overflow(head, size0, &total) ||
        __builtin_add_overflow(total, (size_t)bytes1, &total))
        return gm__error(GM_ERR_OVERFLOW, "%s: staging buffers too large", fn);
    job = gm__host_keep_malloc(&ctx->queue.host_keep, total);
    if (job == NULL)
        return gm__error(GM_ERR_NO_MEMORY,
                         "%s: out of host memory for %" PRId64 " bytes of staging buffers", fn,
                         bytes0 + bytes1);
    memset(job, 0, sizeof(*job));
    status = gm__dealloc_entry_create(fn, GM__DEALLOC_HOST_COPY, &job->entry);
    if (status != GM_OK) {
        gm__free(job);
        return status;
    }
    job->ctx = ctx;
    job->entry->handle = job;
    job->temp[0] = bytes0 > 0 ? (unsigned char *)job + head : NULL;
    job->temp[1] = bytes1 > 0 ? (unsigned char *)job + head + size0 : NULL;
    *job_p = job;
    return GM_OK;
}

/* Free a job now (synchronous copies, or after synchronizing on failure). */
static void job_free(copy_job *job)
{
    gm__dealloc_entry_discard(job->entry);
    gm__free(job);
}

/* Stream-ordered cleanup: hand the job to the queue (runs on a worker thread). */
static void job_release_cb(void *user)
{
    copy_job *job = user;

    gm__dealloc_enqueue_no_flush(job->ctx, job->entry);
}

/* Stream-ordered host step. */
static gm_status job_host_step_cb(void *user)
{
    copy_job *job = user;

    return gm__host_copy_strided(&job->host_dst, &job->host_src);
}

/* Stream-ordered marker that only carries the cleanup. */
static gm_status job_noop_cb(void *user)
{
    (void)user;
    return GM_OK;
}

/*
 * Wait for the work queued on stream bs so far (NULL: what a synchronous
 * operation waits for, the legacy stream's rule) without taking the
 * stream's error, which stays for the user's synchronize: an event recorded
 * there and waited for; stream_synchronize only when no event can be had.
 */
static gm_status wait_queued(gm_context *ctx, gm_backend_stream *bs)
{
    gm_backend_event *event = NULL;
    gm_status status = GM_OK;

    if (bs == NULL)
        status = ctx->ops->stream_builtin(ctx->bctx, GM_BUILTIN_STREAM_LEGACY, &bs);
    if (status == GM_OK)
        status = ctx->ops->event_create(ctx->bctx, 0, &event);
    if (status == GM_OK) {
        status = ctx->ops->event_record(ctx->bctx, event, bs);
        if (status == GM_OK)
            status = ctx->ops->event_synchronize(ctx->bctx, event);
        (void)ctx->ops->event_destroy(ctx->bctx, event);
        return status;
    }
    return bs != NULL ? ctx->ops->stream_synchronize(ctx->bctx, bs) : status;
}

/*
 * Run the job's host step in stream order on bs, or now (bs NULL) after the
 * work queued on `after` so far (NULL: what a synchronous operation waits
 * for, as the backends' synchronous copies do), so that a staged copy reads
 * a host source, or a host fill writes, only after earlier queued work on
 * it; not inside a stream callback, whose own stream that wait would wait
 * for.
 */
static gm_status job_host_step(gm_context *ctx, copy_job *job, gm_backend_stream *bs,
                               gm_backend_stream *after)
{
    gm_status status = GM_OK;

    if (bs != NULL) {
        status = ctx->ops->stream_enqueue_host(ctx->bctx, bs, job_host_step_cb, job, NULL);
        job->queued = job->queued || status == GM_OK;
        return status;
    }
    if (!gm__in_stream_callback())
        status = gm__error_within("synchronous host step", wait_queued(ctx, after));
    return status == GM_OK ? gm__host_copy_strided(&job->host_dst, &job->host_src) : status;
}

/*
 * End a job: free it now without a stream; with one, queue its release in
 * stream order (after a failed step too: behind what was queued). If that
 * cannot be queued, free it now when no queued step uses it, else wait for
 * the work already queued (it may use the temporaries) before freeing,
 * without taking the stream's error; inside a stream callback that wait
 * could wait for the callback itself, so the job is left (logged) instead.
 */
static gm_status job_finish(gm_context *ctx, copy_job *job, gm_backend_stream *bs, gm_status status)
{
    char saved[512];
    gm_status queued = GM_OK;

    if (bs == NULL) {
        job_free(job);
        return status;
    }
    snprintf(saved, sizeof(saved), "%s", gm_last_error_message());
    queued = ctx->ops->stream_enqueue_host(ctx->bctx, bs, job_noop_cb, job, job_release_cb);
    if (queued == GM_OK) {
        if (status != GM_OK)
            (void)gm__error(status, "%s", saved);
        return status;
    }
    if (status == GM_OK) {
        status = queued;
        snprintf(saved, sizeof(saved), "%s", gm_last_error_message());
    }
    if (!job->queued) { /* nothing queued uses it */
        (void)gm__error(status, "%s", saved);
        job_free(job);
        return status;
    }
    if (gm__in_stream_callback()) {
        gm__log(GM_LOG_ERROR,
                "copy: a failed stream-ordered copy inside a stream callback cannot wait for its "
                "queued steps; its temporaries are not freed");
        (void)gm__error(status, "%s", saved);
        return status;
    }
    (void)wait_queued(ctx, bs);
    (void)gm__error(status, "%s", saved);
    job_free(job);
    return status;
}

/* --------------------------------------------------------------- staging */

/* A packed host layout with the axis order and stride signs of `view`. */
static gm_status mirror_layout(const gm_ndview *view, gm_ndview *out)
{
    gm_status status = gm_ndview_like(view, out);

    if (status != GM_OK)
        return status;
    out->memory = GM_MEMORY_HOST;
    out->device_id = -1;
    for (int i = 0; i < view->ndim; i++) {
        if (view->strides[i] < 0 && view->shape[i] > 1) {
            out->offset += (view->shape[i] - 1) * out->strides[i];
            out->strides[i] = -out->strides[i];
        }
    }
    return GM_OK;
}

/* Layouts of a staged copy: the host image of each device side, when used. */
typedef struct staging {
    gm_ndview src_image; /* src itself if on the host */
    gm_ndview dst_image; /* used when dst is on the device and `use_dst_image` */
    bool use_dst_image;
    int64_t src_bytes; /* temp[0]: image of a device source */
    int64_t dst_bytes; /* temp[1]: image of a device destination */
} staging;

/* Decide the temporaries of dst <- src. */
static gm_status staging_plan(const gm_ndview *dst, const gm_ndview *src, staging *s)
{
    copy_plan plan;
    gm_status status = GM_OK;

    memset(s, 0, sizeof(*s));
    s->src_image = *src;
    if (side_of(src) == GM_COPY_DEVICE) {
        status = mirror_layout(src, &s->src_image);
        s->src_bytes = gm_ndview_nbytes(src);
    }
    if (status != GM_OK || side_of(dst) == GM_COPY_HOST)
        return status;
    plan_build(dst, &s->src_image, &plan);
    if (plan.pieces > GM__DIRECT_MAX_PIECES) {
        s->use_dst_image = true;
        s->dst_bytes = gm_ndview_nbytes(dst);
        status = mirror_layout(dst, &s->dst_image);
    }
    return status;
}

/* Issue the steps of a staged copy into an allocated job. */
static gm_status staged_steps(gm_context *ctx, copy_job *job, staging *s, const gm_ndview *dst,
                              const gm_ndview *src, gm_backend_stream *bs)
{
    gm_status status = GM_OK;

    if (side_of(src) == GM_COPY_DEVICE) {
        s->src_image.data = job->temp[0];
        status = emit_views(ctx, job, &s->src_image, src, bs);
    }
    if (status != GM_OK)
        return status;
    if (side_of(dst) == GM_COPY_HOST || s->use_dst_image) {
        s->dst_image.data = job->temp[1];
        job->host_dst = side_of(dst) == GM_COPY_HOST ? *dst : s->dst_image;
        job->host_src = s->src_image;
        /* The image feeds a copy to the device that may read it when called (CUDA):
         * fill it now, after the work queued on the stream so far (which may write the
         * source), instead of in a host step that might run after the read. */
        if (bs != NULL && side_of(dst) == GM_COPY_DEVICE && ctx->ops->host_read_at_call &&
            !gm__in_stream_callback())
            status = job_host_step(ctx, job, NULL, bs);
        else
            status = job_host_step(ctx, job, bs, NULL);
    }
    if (status != GM_OK || side_of(dst) == GM_COPY_HOST)
        return status;
    return emit_views(ctx, job, dst, s->use_dst_image ? &s->dst_image : &s->src_image, bs);
}

/* Copy through host images of the device sides. */
static gm_status copy_staged(gm_context *ctx, const char *fn, const gm_ndview *dst,
                             const gm_ndview *src, gm_backend_stream *bs)
{
    staging s;
    copy_job *job = NULL;
    gm_status status = staging_plan(dst, src, &s);

    if (status == GM_OK)
        status = job_create(ctx, fn, bs, s.src_bytes, s.dst_bytes, &job);
    if (status != GM_OK)
        return status;
    status = staged_steps(ctx, job, &s, dst, src, bs);
    return job_finish(ctx, job, bs, status);
}

/* Host to host: the host engine, in stream order with a stream. */
static gm_status copy_host(gm_context *ctx, const char *fn, const gm_ndview *dst,
                           const gm_ndview *src, gm_backend_stream *bs)
{
    copy_job *job = NULL;
    gm_status status = GM_OK;

    if (bs == NULL)
        return gm__host_copy_strided(dst, src);
    status = job_create(ctx, fn, bs, 0, 0, &job);
    if (status != GM_OK)
        return status;
    job->host_dst = *dst;
    job->host_src = *src;
    status = job_host_step(ctx, job, bs, NULL);
    return job_finish(ctx, job, bs, status);
}

/* ------------------------------------------------------------ validation */

/* A known memory kind, and a device-side view must be on the context's device. */
static gm_status check_device(const char *fn, const gm_context *ctx, const gm_ndview *v,
                              const char *which)
{
    if (v->memory < GM_MEMORY_HOST || v->memory > GM_MEMORY_MANAGED)
        return gm__error(GM_ERR_INVALID_ARG, "%s: the %s has an unknown memory kind %" PRId32, fn,
                         which, v->memory);
    if (side_of(v) == GM_COPY_DEVICE && v->device_id >= 0 && v->device_id != ctx->device_id)
        return gm__error(GM_ERR_WRONG_CONTEXT,
                         "%s: the %s is memory of device %" PRId32 ", the context's device is "
                         "%" PRId32,
                         fn, which, v->device_id, ctx->device_id);
    return GM_OK;
}

/* Both descriptors valid, same dtype, same shape. */
static gm_status check_pair(const char *fn, const gm_context *ctx, const gm_ndview *dst,
                            const gm_ndview *src)
{
    char a[GM_DTYPE_NAME_MAX], b[GM_DTYPE_NAME_MAX], sa[256], sb[256];
    gm_status status = gm__validate(fn, dst);

    if (status == GM_OK)
        status = gm__validate(fn, src);
    if (status != GM_OK)
        return status;
    if (!gm_dtype_equal(dst->dtype, src->dtype)) {
        (void)gm_dtype_name(dst->dtype, a, sizeof(a));
        (void)gm_dtype_name(src->dtype, b, sizeof(b));
        return gm__error(GM_ERR_DTYPE, "%s: dtype mismatch: destination %s, source %s", fn, a, b);
    }
    if (dst->ndim != src->ndim ||
        (dst->ndim > 0 && memcmp(dst->shape, src->shape, (size_t)dst->ndim * sizeof(int64_t)) != 0))
        return gm__error(GM_ERR_SHAPE_MISMATCH, "%s: shape mismatch: destination %s, source %s", fn,
                         gm_format_shape(dst->ndim, dst->shape, sa, sizeof(sa)),
                         gm_format_shape(src->ndim, src->shape, sb, sizeof(sb)));
    status = check_device(fn, ctx, dst, "destination");
    if (status == GM_OK)
        status = check_device(fn, ctx, src, "source");
    return status;
}

/*
 * GM_ERR_INVALID_ARG when the byte extents [lo, hi) of the two sides
 * (relative to their data) intersect, a view copied onto itself included.
 * The memory kinds do not matter: device and host addresses share one
 * virtual address space on every supported backend (the simulator's device
 * memory is host memory; CUDA's unified addressing; HSA's flat addressing),
 * so any numeric intersection is the same bytes. That covers mapped memory
 * and its device view where the backend gives the host address (the
 * simulator; CUDA with unified addressing) and managed memory. An alias at
 * another address (HSA's agent address of locked memory, a registered range
 * on a device that cannot use the host pointer) is not seen. Both sides have
 * data (check_data came first).
 */
static gm_status check_overlap(const char *fn, const gm_ndview *dst, int64_t dst_lo, int64_t dst_hi,
                               const gm_ndview *src, int64_t src_lo, int64_t src_hi)
{
    uintptr_t d_lo = (uintptr_t)dst->data + (uintptr_t)dst_lo;
    uintptr_t d_hi = (uintptr_t)dst->data + (uintptr_t)dst_hi;
    uintptr_t s_lo = (uintptr_t)src->data + (uintptr_t)src_lo;
    uintptr_t s_hi = (uintptr_t)src->data + (uintptr_t)src_hi;

    if (d_lo >= s_hi || s_lo >= d_hi)
        return GM_OK;
    return gm__error(GM_ERR_INVALID_ARG,
                     "%s: the source and destination overlap: destination bytes [%#" PRIxPTR
                     ", %#" PRIxPTR "), source bytes [%#" PRIxPTR ", %#" PRIxPTR ")",
                     fn, d_lo, d_hi, s_lo, s_hi);
}

/* What pair_quick learns about a copy whose checks pass. */
typedef struct quick_pair {
    int64_t dst_lo, src_lo; /* lowest byte of each side, relative to its data */
    int64_t dst_hi, src_hi; /* one past the highest byte of each side */
    int64_t bytes;          /* dense: the bytes of each side's range; else 0 */
    bool empty;             /* no elements */
} quick_pair;

/*
 * Bytes of a valid nonempty view whose elements tile one byte range walking
 * its axes in F order, each axis of either sign (extents of 1 ignored); 0
 * when they do not. (pair_quick sees C order in its own pass.)
 */
static int64_t f_dense_bytes(const gm_ndview *v, int64_t itemsize)
{
    int64_t expect = itemsize;

    for (int i = 0; i < v->ndim; i++) {
        if (v->shape[i] == 1)
            continue;
        if (v->strides[i] != expect && v->strides[i] != -expect)
            return 0;
        expect *= v->shape[i]; /* no overflow: the view's byte size fits */
    }
    return expect;
}

/*
 * check_pair's descriptor, dtype and shape checks for the common valid case:
 * the dtypes compared, each descriptor validated in one pass that gives its
 * byte extent (gm__extent_quick), then one pass over the axes of both. True
 * only when the checks would all pass (check_pair would go on to
 * check_device); false on any doubt, and check_pair decides and explains.
 * q->bytes is set when both sides cover one dense byte range with the same
 * element order (equal strides on every axis of extent > 1, the elements
 * tiling the range): the copy is then one 1-D copy of q->bytes from the
 * lowest byte of src to that of dst, the single piece plan_build would make
 * of it.
 */
static bool pair_quick(const gm_ndview *dst, const gm_ndview *src, quick_pair *q)
{
    int64_t itemsize = 0, dense = 0;
    bool same_strides = true;

    if (dst->ndim != src->ndim || !gm__dtype_same(dst->dtype, src->dtype))
        return false;
    itemsize = dense = gm__dtype_bytes(dst->dtype); /* 0 when invalid: no extent */
    if (!gm__extent_quick(dst, itemsize, &q->dst_lo, &q->dst_hi) ||
        !gm__extent_quick(src, itemsize, &q->src_lo, &q->src_hi))
        return false;
    q->empty = q->dst_hi == q->dst_lo; /* a nonempty view spans at least one item */
    q->bytes = 0;
    /* Innermost axis first: the same pass sees C-order density (dense > 0). */
    for (int i = dst->ndim - 1; i >= 0; i--) {
        int64_t n = dst->shape[i], stride = dst->strides[i];

        if (n != src->shape[i])
            return false;
        if (n > 1) {
            same_strides = same_strides && stride == src->strides[i];
            /* no overflow: gm__extent_quick bounded the nonzero extents' bytes */
            dense = stride == dense || stride == -dense ? dense * n : 0;
        }
    }
    if (!q->empty && same_strides)
        q->bytes = dense > 0 || dst->ndim < 2 ? dense : f_dense_bytes(dst, itemsize);
    return true;
}

/* ------------------------------------------------------------- entries */

/* A device copy that the host engine cannot do: choose a strategy (see the file comment). */
static gm_status copy_device(gm_context *ctx, const char *fn, const gm_ndview *dst,
                             const gm_ndview *src, gm_backend_stream *bs)
{
    copy_plan plan;
    gm_status status = GM_OK;

    /* A backend engine that takes any layout (the simulator's): no pitched pieces to plan. */
    if (bs == NULL && ctx->ops->copy_views != gm__unsupported_copy_views &&
        ctx->ops->copy_views(ctx->bctx, dst, src, &status))
        return status;
    plan_build(dst, src, &plan);
    if (plan.pieces == 1)
        return emit(ctx, &plan, bs, NULL);
    if (ctx->ops->copy_strided != gm__unsupported_copy_strided) {
        gm__saved_error saved;

        gm__error_save(&saved);
        status = ctx->ops->copy_strided(ctx->bctx, dst, src, bs);
        if (status != GM_ERR_UNSUPPORTED)
            return status;
        gm__error_restore(&saved); /* not this copy's error: another way follows */
    }
    if (plan.pieces <= GM__DIRECT_MAX_PIECES)
        return emit(ctx, &plan, bs, NULL);
    return copy_staged(ctx, fn, dst, src, bs);
}

/*
 * Both sides one dense byte range in the same element order (pair_quick):
 * the single 1-D ops->copy that copy_device's plan would issue, or, host to
 * host without a stream, the memcpy gm__host_copy_strided would do. Inlined
 * into the fast paths (a call here measured 1.4 ns of a 17 ns transfer).
 */
static inline __attribute__((always_inline)) gm_status
copy_dense(gm_context *ctx, const char *fn, const gm_ndview *dst, const gm_ndview *src,
           const quick_pair *q, gm_backend_stream *bs)
{
    gm_copy_desc desc;

    if (side_of(dst) == GM_COPY_HOST && side_of(src) == GM_COPY_HOST) {
        if (bs != NULL) /* a stream needs a job: the usual path */
            return copy_host(ctx, fn, dst, src, bs);
        memcpy((char *)dst->data + q->dst_lo, (const char *)src->data + q->src_lo,
               (size_t)q->bytes);
        return GM_OK;
    }
    memset(&desc, 0, sizeof(desc));
    desc.dst_side = side_of(dst);
    desc.src_side = side_of(src);
    desc.dst = (gm_devptr)((uintptr_t)dst->data + (uintptr_t)q->dst_lo);
    desc.src = (gm_devptr)((uintptr_t)src->data + (uintptr_t)q->src_lo);
    desc.width_bytes = desc.dst_pitch = desc.src_pitch = (size_t)q->bytes;
    desc.height = desc.depth = desc.dst_height = desc.src_height = 1;
    return ctx->ops->copy(ctx->bctx, &desc, bs);
}

/*
 * GM_ERR_INVALID_ARG for a destination with a stride-0 axis of extent > 1
 * (numpy's broadcast views are read-only): its elements share bytes, so
 * what they would hold depends on the copy's order.
 */
static gm_status check_not_broadcast(const char *fn, const gm_ndview *dst)
{
    for (int i = 0; i < dst->ndim; i++) {
        if (dst->strides[i] == 0 && dst->shape[i] > 1)
            return gm__error(GM_ERR_INVALID_ARG,
                             "%s: destination axis %d has stride 0 and extent %" PRId64
                             " (a broadcast destination is not writable)",
                             fn, i, dst->shape[i]);
    }
    return GM_OK;
}

/* GM_ERR_NULL_POINTER when a side of a nonempty copy has no data (whatever its offset). */
static gm_status check_data(const char *fn, const gm_ndview *dst, const gm_ndview *src)
{
    if (dst->data == NULL || src->data == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: %s data pointer is NULL", fn,
                         dst->data == NULL ? "destination" : "source");
    return GM_OK;
}

/* check_pair, then check_overlap for a nonempty copy; *empty_p when there are no elements. */
static gm_status check_pair_full(const char *fn, const gm_context *ctx, const gm_ndview *dst,
                                 const gm_ndview *src, bool *empty_p)
{
    int64_t dst_lo = 0, dst_hi = 0, src_lo = 0, src_hi = 0;
    gm_status status = check_pair(fn, ctx, dst, src);

    *empty_p = status == GM_OK && gm_ndview_size(dst) == 0;
    if (status != GM_OK || *empty_p)
        return status;
    status = check_data(fn, dst, src);
    if (status != GM_OK)
        return status;
    (void)gm_ndview_extent(dst, &dst_lo, &dst_hi); /* validated: cannot fail */
    (void)gm_ndview_extent(src, &src_lo, &src_hi);
    return check_overlap(fn, dst, dst_lo, dst_hi, src, src_lo, src_hi);
}

/*
 * The copy of two C-contiguous arrays alike (the array calls' H2D and D2H,
 * gm_copy between whole arrays), recognised in one pass over both
 * descriptors: equal ndim (0 ..= GM_MAX_DIMS) and dtype (a valid one), equal
 * shapes with no extent 0, every axis of extent > 1 packed in C order with
 * the same positive stride on both sides, and each side's byte range
 * [offset, offset + bytes) free of overflow. False for anything else.
 *
 * Then pair_quick would pass with q->bytes == bytes and the extents
 * [offset, offset + bytes): the byte count is the same product of extents
 * >= 1 (a partial product fits when the whole does, in any order), every
 * reach (n - 1) * stride is below it and >= 0, so the extent sums stay
 * between offset and offset + bytes. The checks that follow are pair_quick's
 * path's; only the passes over the axes are fused into one.
 */
static bool c_dense_pair(const gm_ndview *dst, const gm_ndview *src, quick_pair *q)
{
    int64_t bytes = 0;

    if (dst->ndim != src->ndim || dst->ndim < 0 || dst->ndim > GM_MAX_DIMS ||
        !gm__dtype_same(dst->dtype, src->dtype))
        return false;
    bytes = gm__dtype_bytes(dst->dtype); /* 0 when invalid */
    for (int i = dst->ndim - 1; i >= 0 && bytes > 0; i--) {
        int64_t n = dst->shape[i];

        if (n < 1 || n != src->shape[i])
            return false;
        if (n > 1 && (dst->strides[i] != bytes || src->strides[i] != bytes ||
                      gm__mul_overflow(bytes, n, &bytes)))
            return false;
    }
    q->dst_lo = dst->offset;
    q->src_lo = src->offset;
    q->bytes = bytes;
    q->empty = false;
    return bytes > 0 && !gm__add_overflow(dst->offset, bytes, &q->dst_hi) &&
           !gm__add_overflow(src->offset, bytes, &q->src_hi);
}

/* gm__copy's argument checks; *bs_p the stream's driver stream (NULL without one). */
static gm_status check_args(const char *fn, gm_context *ctx, const gm_ndview *dst,
                            const gm_ndview *src, gm_stream *stream, gm_backend_stream **bs_p)
{
    gm_status status = gm__check_context(fn, ctx);

    if (status == GM_OK && stream != NULL)
        status = gm__stream_backend(fn, ctx, stream, bs_p);
    if (status == GM_OK && (dst == NULL || src == NULL))
        status = gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn,
                           dst == NULL ? "destination" : "source");
    /* a host-to-host copy waits for nothing: allowed inside a stream callback */
    if (status == GM_OK && (side_of(dst) == GM_COPY_DEVICE || side_of(src) == GM_COPY_DEVICE))
        status = gm__sync_allowed(fn, stream);
    return status;
}

/*
 * The checks of a pair pair_quick (or c_dense_pair) passed: both sides'
 * memory, then, unless the pair is empty, their data and overlap.
 */
static inline gm_status check_quick(const char *fn, gm_context *ctx, const gm_ndview *dst,
                                    const gm_ndview *src, const quick_pair *q)
{
    gm_status status = check_device(fn, ctx, dst, "destination");

    if (status == GM_OK)
        status = check_device(fn, ctx, src, "source");
    if (status != GM_OK || q->empty)
        return status;
    status = check_data(fn, dst, src);
    if (status == GM_OK)
        status = check_overlap(fn, dst, q->dst_lo, q->dst_hi, src, q->src_lo, q->src_hi);
    return status;
}

/* A pair c_dense_pair passed (never empty): check_quick, then its one copy. */
static gm_status copy_checked_dense(gm_context *ctx, const char *fn, const gm_ndview *dst,
                                    const gm_ndview *src, const quick_pair *q,
                                    gm_backend_stream *bs)
{
    gm_status status = check_quick(fn, ctx, dst, src, q);

    if (status != GM_OK)
        return status;
    return copy_dense(ctx, fn, dst, src, q, bs);
}

/*
 * Check both sides, then copy host-to-host or through the device strategies.
 * The common case (both descriptors valid and alike, each one dense byte
 * range) is checked in one pass per side and issued as one copy.
 */
static gm_status copy_pair(const char *fn, gm_context *ctx, const gm_ndview *dst,
                           const gm_ndview *src, gm_backend_stream *bs)
{
    quick_pair q;
    bool empty = false;
    gm_status status = GM_OK;

    if (pair_quick(dst, src, &q)) {
        status = check_quick(fn, ctx, dst, src, &q);
        if (status != GM_OK || q.empty)
            return status;
        if (q.bytes > 0)
            return copy_dense(ctx, fn, dst, src, &q, bs);
    } else {
        status = check_pair_full(fn, ctx, dst, src, &empty);
        if (status != GM_OK || empty)
            return status;
    }
    /* Not dense: refused here, before any stream work, whichever way it would go. */
    status = check_not_broadcast(fn, dst);
    if (status != GM_OK)
        return status;
    if (side_of(dst) == GM_COPY_HOST && side_of(src) == GM_COPY_HOST)
        return copy_host(ctx, fn, dst, src, bs);
    return copy_device(ctx, fn, dst, src, bs);
}

/*
 * Two C-contiguous sides alike (c_dense_pair) go straight to their one copy;
 * anything else, or any doubt, takes copy_pair.
 */
gm_status gm__copy(const char *fn, gm_context *ctx, const gm_ndview *dst, const gm_ndview *src,
                   gm_stream *stream)
{
    gm_backend_stream *bs = NULL; /* what gm__stream_backend gives for no stream */
    quick_pair q;
    gm_status status = check_args(fn, ctx, dst, src, stream, &bs);

    if (status != GM_OK)
        return status;
    if (c_dense_pair(dst, src, &q))
        status = copy_checked_dense(ctx, fn, dst, src, &q, bs);
    else
        status = copy_pair(fn, ctx, dst, src, bs);
    return status == GM_OK ? status : gm__error_named(fn, status); /* the backend's failures */
}

/* gm__copy without c_dense_pair (see runtime_internal.h). */
gm_status gm__copy_general(const char *fn, gm_context *ctx, const gm_ndview *dst,
                           const gm_ndview *src, gm_stream *stream)
{
    gm_backend_stream *bs = NULL;
    gm_status status = check_args(fn, ctx, dst, src, stream, &bs);

    if (status != GM_OK)
        return status;
    return gm__error_named(fn, copy_pair(fn, ctx, dst, src, bs));
}

/* ---------------------------------------------------------------- fills */

/*
 * `bytes` (a multiple of itemsize) of dst patterned with the item `value`:
 * one item, then copies of what is written, doubling (a memcpy per item cost
 * ten times a C loop's fill).
 */
static void pattern_fill(unsigned char *dst, size_t bytes, const void *value, size_t itemsize)
{
    size_t done = itemsize < bytes ? itemsize : bytes;

    memcpy(dst, value, done);
    while (done < bytes) {
        size_t n = done < bytes - done ? done : bytes - done;

        memcpy(dst + done, dst, n);
        done += n;
    }
}

/*
 * Fill a view that the backend's memset cannot: host-side memory straight
 * from one item with the host engine (a broadcast source, every stride 0);
 * device-side memory through a host image of its layout, patterned and then
 * copied in (few pieces by construction). The job holds the item or the
 * image until the stream has run the step.
 */
static gm_status fill_staged(gm_context *ctx, const char *fn, const gm_ndview *view,
                             const void *value, gm_backend_stream *bs)
{
    size_t itemsize = (size_t)gm_ndview_itemsize(view);
    bool host = side_of(view) == GM_COPY_HOST;
    copy_job *job = NULL;
    gm_ndview image;
    gm_status status = host ? GM_OK : mirror_layout(view, &image);

    if (status == GM_OK)
        status =
            job_create(ctx, fn, bs, host ? (int64_t)itemsize : gm_ndview_nbytes(view), 0, &job);
    if (status != GM_OK)
        return status;
    if (host) {
        memcpy(job->temp[0], value, itemsize);
        job->host_dst = *view;
        job->host_src = *view;
        job->host_src.data = job->temp[0];
        job->host_src.offset = 0;
        for (int i = 0; i < view->ndim; i++)
            job->host_src.strides[i] = 0;
        status = job_host_step(ctx, job, bs, NULL);
    } else {
        pattern_fill(job->temp[0], (size_t)gm_ndview_nbytes(view), value, itemsize);
        image.data = job->temp[0];
        status = emit_views(ctx, job, view, &image, bs);
    }
    return job_finish(ctx, job, bs, status);
}

/* Common checks of fill and memset; *skip_p when there is nothing to do. */
static gm_status fill_checks(const char *fn, gm_context *ctx, const gm_ndview *view,
                             gm_stream *stream, gm_backend_stream **bs_p)
{
    gm_status status = gm__check_context(fn, ctx);

    if (status == GM_OK)
        status = gm__stream_backend(fn, ctx, stream, bs_p);
    if (status == GM_OK)
        status = gm__validate(fn, view);
    if (status == GM_OK)
        status = check_device(fn, ctx, view, "array");
    if (status == GM_OK && side_of(view) == GM_COPY_DEVICE) /* a host fill waits for nothing */
        status = gm__sync_allowed(fn, stream);
    return status;
}

/*
 * The view with every stride-0 axis (a broadcast, numpy's as_strided or
 * broadcast_to) cut to extent 1: the same bytes, each written once, so a fill
 * takes the same path on every memory kind. Returns view itself when it has
 * no such axis, else *out.
 */
static const gm_ndview *unbroadcast(const gm_ndview *view, gm_ndview *out)
{
    bool any = false;

    for (int i = 0; i < view->ndim && !any; i++)
        any = view->strides[i] == 0 && view->shape[i] > 1;
    if (!any)
        return view;
    *out = *view;
    for (int i = 0; i < out->ndim; i++) {
        if (out->strides[i] == 0)
            out->shape[i] = 1;
    }
    return out;
}

/* Address of the lowest byte of a contiguous view. */
static gm_devptr lowest_byte(const gm_ndview *view)
{
    int64_t lo = 0, hi = 0;

    (void)gm_ndview_extent(view, &lo, &hi);
    return (gm_devptr)((uintptr_t)view->data + (uintptr_t)lo);
}

/* Backend memset for contiguous device arrays of 1/2/4/8-byte items, else a host image. */
static gm_status fill(const char *fn, gm_context *ctx, const gm_ndview *view, const void *value,
                      gm_stream *stream)
{
    gm_backend_stream *bs = NULL;
    int64_t itemsize = 0;
    gm_ndview once;
    gm_status status = fill_checks(fn, ctx, view, stream, &bs);

    if (status != GM_OK || gm_ndview_size(view) == 0)
        return status;
    view = unbroadcast(view, &once);
    itemsize = gm_ndview_itemsize(view);
    if (side_of(view) == GM_COPY_DEVICE && gm_ndview_is_contiguous(view) &&
        (itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8)) {
        gm_devptr at = lowest_byte(view);

        /* drivers write 2-byte patterns as aligned shorts and wider ones as aligned words */
        if (at % (gm_devptr)(itemsize < 4 ? itemsize : 4) == 0)
            return ctx->ops->memset(ctx->bctx, at, value, (size_t)itemsize,
                                    (size_t)gm_ndview_size(view), bs);
    }
    return fill_staged(ctx, fn, view, value, bs);
}

gm_status gm__fill(const char *fn, gm_context *ctx, const gm_ndview *view, const void *value,
                   gm_stream *stream)
{
    return gm__error_named(fn, fill(fn, ctx, view, value, stream)); /* the backend's failures */
}

/* Backend byte memset for contiguous device arrays, else a fill with a byte pattern. */
static gm_status memset_view(const char *fn, gm_context *ctx, const gm_ndview *view,
                             unsigned char byte, gm_stream *stream)
{
    gm_backend_stream *bs = NULL;
    unsigned char *pattern = NULL;
    gm_ndview once;
    gm_status status = fill_checks(fn, ctx, view, stream, &bs);

    if (status != GM_OK || gm_ndview_size(view) == 0)
        return status;
    view = unbroadcast(view, &once);
    if (side_of(view) == GM_COPY_DEVICE && gm_ndview_is_contiguous(view))
        return ctx->ops->memset(ctx->bctx, lowest_byte(view), &byte, 1,
                                (size_t)gm_ndview_nbytes(view), bs);
    pattern = gm__malloc((size_t)gm_ndview_itemsize(view));
    if (pattern == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory", fn);
    memset(pattern, byte, (size_t)gm_ndview_itemsize(view));
    status = fill_staged(ctx, fn, view, pattern, bs);
    gm__free(pattern);
    return status;
}

gm_status gm__memset(const char *fn, gm_context *ctx, const gm_ndview *view, unsigned char byte,
                     gm_stream *stream)
{
    return gm__error_named(fn, memset_view(fn, ctx, view, byte, stream));
}
