/*
 * Host memory: pinned, mapped and managed arrays (allocated by the backend, freed
 * through the deallocation queue and bounded by its pinned-bytes limit,
 * closing numba#9507), device views of mapped memory, and scoped
 * registration of existing host memory (gm_pin / gm_map / gm_register).
 *
 * A scope records the page ranges it registered: the byte extents of its
 * arrays, sorted and merged so that overlapping or duplicate arrays are
 * registered once. Ending a scope unregisters them immediately, never
 * through the queue, so the same memory can be registered again at once
 * (numba#3508). Allocation and registration go through the context's memory
 * manager (memhostalloc via array.c, mempin / memunpin here).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ndview_internal.h"
#include "runtime_internal.h"

/* ------------------------------------------------------------- arrays */

/* A C/F-ordered layout for a new host array. */
static gm_status ordered_layout(const char *fn, int ndim, const int64_t *shape, gm_dtype dtype,
                                gm_order order, gm_ndview *layout)
{
    if (order != GM_ORDER_C && order != GM_ORDER_F)
        return gm__error(GM_ERR_INVALID_ARG, "%s: order must be 'C' or 'F', got %d", fn,
                         (int)order);
    return gm__ndview_init(fn, NULL, dtype, ndim, shape, NULL, order, layout);
}

/* Common checks of the allocating calls. */
static gm_status check_alloc(const char *fn, const gm_context *ctx, const void *array_p)
{
    gm_status status = gm__check_context(fn, ctx);

    if (status == GM_OK && array_p == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: array_p is NULL", fn);
    return status;
}

/* Only GM_HOST_PORTABLE and GM_HOST_WRITECOMBINED (GM_HOST_MAPPED is implied). */
static gm_status check_flags(const char *fn, unsigned flags)
{
    unsigned known = GM_HOST_PORTABLE | GM_HOST_WRITECOMBINED | GM_HOST_MAPPED;

    if ((flags & ~known) != 0)
        return gm__error(GM_ERR_INVALID_ARG, "%s: unknown flags %#x", fn, flags & ~known);
    return GM_OK;
}

/* A new C/F array of `memory` kind (host_flags: for mapped memory). */
static gm_status ordered_array(const char *fn, gm_context *ctx, int ndim, const int64_t *shape,
                               gm_dtype dtype, gm_order order, gm_memory_kind memory,
                               unsigned host_flags, gm_array **array_p)
{
    gm_ndview layout;
    gm_status status = check_alloc(fn, ctx, array_p);

    if (status == GM_OK && memory == GM_MEMORY_MAPPED)
        status = check_flags(fn, host_flags);
    if (status == GM_OK)
        status = ordered_layout(fn, ndim, shape, dtype, order, &layout);
    if (status != GM_OK)
        return status;
    return gm__array_create(ctx, fn, &layout, memory, host_flags, array_p);
}

/* A new array of `memory` kind with explicit byte strides (any signs). */
static gm_status strided_array(const char *fn, gm_context *ctx, int ndim, const int64_t *shape,
                               const int64_t *strides, gm_dtype dtype, gm_memory_kind memory,
                               unsigned host_flags, gm_array **array_p)
{
    gm_ndview layout;
    gm_status status = check_alloc(fn, ctx, array_p);

    if (status == GM_OK && strides == NULL && ndim > 0)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: strides is NULL", fn);
    if (status == GM_OK && memory == GM_MEMORY_MAPPED)
        status = check_flags(fn, host_flags);
    if (status == GM_OK)
        status = gm__ndview_init(fn, NULL, dtype, ndim, shape, strides, GM_ORDER_C, &layout);
    if (status != GM_OK)
        return status;
    return gm__array_create(ctx, fn, &layout, memory, host_flags, array_p);
}

/* A new array of `memory` kind with gm_ndview_like()'s layout of `like`. */
static gm_status like_array(const char *fn, gm_context *ctx, const gm_ndview *like,
                            gm_memory_kind memory, unsigned host_flags, gm_array **array_p)
{
    gm_ndview layout;
    gm_status status = check_alloc(fn, ctx, array_p);

    if (status == GM_OK && memory == GM_MEMORY_MAPPED)
        status = check_flags(fn, host_flags);
    if (status == GM_OK)
        status = gm__validate(fn, like);
    if (status == GM_OK)
        status = gm_ndview_like(like, &layout);
    if (status != GM_OK)
        return status;
    return gm__array_create(ctx, fn, &layout, memory, host_flags, array_p);
}

/* A C/F page-locked host array (Numba's pinned_array). */
gm_status gm_pinned_array(gm_context *ctx, int ndim, const int64_t *shape, gm_dtype dtype,
                          gm_order order, gm_array **array_p)
{
    return ordered_array("gm_pinned_array", ctx, ndim, shape, dtype, order, GM_MEMORY_PINNED, 0,
                         array_p);
}

/* A page-locked host array with gm_ndview_like()'s layout. */
gm_status gm_pinned_array_like(gm_context *ctx, const gm_ndview *like, gm_array **array_p)
{
    return like_array("gm_pinned_array_like", ctx, like, GM_MEMORY_PINNED, 0, array_p);
}

/* A page-locked host array with explicit strides (pinned_array's strides argument). */
gm_status gm_pinned_array_strided(gm_context *ctx, int ndim, const int64_t *shape,
                                  const int64_t *strides, gm_dtype dtype, gm_array **array_p)
{
    return strided_array("gm_pinned_array_strided", ctx, ndim, shape, strides, dtype,
                         GM_MEMORY_PINNED, 0, array_p);
}

/* A C/F managed array (Numba's managed_array). */
gm_status gm_managed_array(gm_context *ctx, int ndim, const int64_t *shape, gm_dtype dtype,
                           gm_order order, gm_array **array_p)
{
    return ordered_array("gm_managed_array", ctx, ndim, shape, dtype, order, GM_MEMORY_MANAGED, 0,
                         array_p);
}

/* A managed array with explicit strides (managed_array's strides argument). */
gm_status gm_managed_array_strided(gm_context *ctx, int ndim, const int64_t *shape,
                                   const int64_t *strides, gm_dtype dtype, gm_array **array_p)
{
    return strided_array("gm_managed_array_strided", ctx, ndim, shape, strides, dtype,
                         GM_MEMORY_MANAGED, 0, array_p);
}

/* A managed array with gm_ndview_like()'s layout. */
gm_status gm_managed_array_like(gm_context *ctx, const gm_ndview *like, gm_array **array_p)
{
    return like_array("gm_managed_array_like", ctx, like, GM_MEMORY_MANAGED, 0, array_p);
}

/* A C/F mapped host array (Numba's mapped_array); GM_HOST_MAPPED is implied. */
gm_status gm_mapped_array(gm_context *ctx, int ndim, const int64_t *shape, gm_dtype dtype,
                          gm_order order, unsigned flags, gm_array **array_p)
{
    return ordered_array("gm_mapped_array", ctx, ndim, shape, dtype, order, GM_MEMORY_MAPPED,
                         flags | GM_HOST_MAPPED, array_p);
}

/* A mapped host array with explicit strides (mapped_array's strides argument). */
gm_status gm_mapped_array_strided(gm_context *ctx, int ndim, const int64_t *shape,
                                  const int64_t *strides, gm_dtype dtype, unsigned flags,
                                  gm_array **array_p)
{
    return strided_array("gm_mapped_array_strided", ctx, ndim, shape, strides, dtype,
                         GM_MEMORY_MAPPED, flags | GM_HOST_MAPPED, array_p);
}

/* A mapped host array with gm_ndview_like()'s layout. */
gm_status gm_mapped_array_like(gm_context *ctx, const gm_ndview *like, unsigned flags,
                               gm_array **array_p)
{
    return like_array("gm_mapped_array_like", ctx, like, GM_MEMORY_MAPPED, flags | GM_HOST_MAPPED,
                      array_p);
}

/*
 * The device-side view of mapped host memory: the device address of the
 * view's lowest byte, moved back to where `data` would be.
 */
static gm_status mapped_device_view(gm_context *ctx, const char *fn, const gm_ndview *host,
                                    gm_ndview *out)
{
    int64_t lo = 0, hi = 0;
    gm_devptr dev = 0;
    gm_status status = gm_ndview_extent(host, &lo, &hi);

    *out = *host;
    out->memory = GM_MEMORY_DEVICE;
    out->device_id = ctx->device_id;
    if (status != GM_OK || gm_ndview_size(host) == 0)
        return status;
    status = ctx->ops->host_device_pointer(ctx->bctx, (char *)host->data + lo, &dev);
    if (status != GM_OK)
        return gm__error_within(fn, status);
    out->data = (void *)(uintptr_t)(dev - (uint64_t)lo);
    return GM_OK;
}

/* Device arrays are their own device view; mapped arrays get a device address. */
gm_status gm_array_device_view(gm_array *array, gm_ndview *view_p)
{
    static const char fn[] = "gm_array_device_view";
    gm_ndview view;
    gm_status status = gm__check_array(fn, array, NULL);

    if (status == GM_OK && view_p == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: view_p is NULL", fn);
    if (status != GM_OK)
        return status;
    switch (array->view.memory) {
    case GM_MEMORY_DEVICE:
    case GM_MEMORY_MANAGED:
        *view_p = array->view;
        return GM_OK;
    case GM_MEMORY_MAPPED:
        status = mapped_device_view(array->ctx, fn, &array->view, &view);
        if (status == GM_OK && view.data != NULL) /* for gm_pointer_kind (registry_kind) */
            atomic_store(&array->buffer->device,
                         array->buffer->base - (uintptr_t)array->view.data + (uintptr_t)view.data);
        if (status == GM_OK)
            *view_p = view;
        return status;
    default:
        break;
    }
    return gm__error(GM_ERR_INVALID_ARG,
                     "%s: the array is not mapped into the device (memory "
                     "kind %d)",
                     fn, (int)array->view.memory);
}

/* ------------------------------------------------------- registration */

/* Order ranges by start address (qsort). */
static int range_cmp(const void *a, const void *b)
{
    const gm__host_range *x = a, *y = b;

    return x->start < y->start ? -1 : x->start > y->start ? 1 : 0;
}

/* Sort and merge overlapping or touching ranges; return the new count. */
static int merge_ranges(gm__host_range *ranges, int n)
{
    int out = 0;

    if (n == 0)
        return 0;
    qsort(ranges, (size_t)n, sizeof(*ranges), range_cmp);
    for (int i = 1; i < n; i++) {
        gm__host_range *last = &ranges[out];
        uintptr_t end = last->start + last->bytes;

        if (ranges[i].start <= end) {
            uintptr_t other = ranges[i].start + ranges[i].bytes;

            last->bytes = (other > end ? other : end) - last->start;
        } else {
            ranges[++out] = ranges[i];
        }
    }
    return out + 1;
}

/* Whether an array's memory is registered by a scope (pageable host memory). */
static gm_status classify(const char *fn, bool mapped, int i, const gm_ndview *v, bool *register_p)
{
    *register_p = false;
    switch (v->memory) {
    case GM_MEMORY_HOST:
        *register_p = gm_ndview_size(v) > 0;
        return GM_OK;
    case GM_MEMORY_MAPPED:
        return GM_OK;
    case GM_MEMORY_PINNED:
        if (!mapped)
            return GM_OK;
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: array %d is pinned but not mapped memory; it cannot be mapped", fn,
                         i);
    default:
        break;
    }
    return gm__error(GM_ERR_INVALID_ARG, "%s: array %d is not host memory (memory kind %d)", fn, i,
                     (int)v->memory);
}

/* The byte ranges of the arrays that need registering, merged. */
static gm_status collect_ranges(const char *fn, bool mapped, int narrays, const gm_ndview *arrays,
                                gm__host_range *ranges, int *nranges_p)
{
    int n = 0;

    for (int i = 0; i < narrays; i++) {
        int64_t lo = 0, hi = 0;
        bool reg = false;
        gm_status status = gm__validate(fn, &arrays[i]);

        if (status == GM_OK)
            status = classify(fn, mapped, i, &arrays[i], &reg);
        if (status == GM_OK && reg)
            status = gm_ndview_extent(&arrays[i], &lo, &hi);
        if (status != GM_OK)
            return status;
        if (reg)
            ranges[n++] = (gm__host_range){(uintptr_t)arrays[i].data + (uintptr_t)lo,
                                           (size_t)(hi - lo), 0, NULL};
    }
    *nranges_p = merge_ranges(ranges, n);
    return GM_OK;
}

/*
 * Unregister the first n ranges of a scope, in reverse; returns the first
 * failure, whose message (the manager's or backend's, following `fn`) stays
 * the thread's: each later failure is logged as a warning instead.
 */
static gm_status unregister_ranges(gm_context *ctx, const char *fn, gm__host_range *ranges, int n)
{
    gm__saved_error first;

    first.status = GM_OK;
    for (int i = n - 1; i >= 0; i--) {
        gm_status status =
            gm__mm_memunpin(ctx, (void *)ranges[i].start, ranges[i].bytes, ranges[i].owner);

        if (status == GM_OK)
            continue;
        status = gm__error_within(fn, status);
        if (first.status == GM_OK)
            gm__error_save(&first);
        else
            gm__log(GM_LOG_WARN, "%s", gm_last_error_message());
    }
    if (first.status != GM_OK)
        gm__error_restore(&first);
    return first.status;
}

/* Unregister the first n ranges after a failure `status`, keeping its message. */
static void undo_ranges(gm_context *ctx, const char *fn, gm_status status, gm__host_range *ranges,
                        int n)
{
    char saved[512];

    snprintf(saved, sizeof(saved), "%s", gm_last_error_message());
    if (unregister_ranges(ctx, fn, ranges, n) != GM_OK)
        gm__log(GM_LOG_WARN, "%s", gm_last_error_message());
    (void)gm__error(status, "%s", saved);
}

/*
 * Register every range (with its device address when mapped); undo on
 * failure, the manager's or backend's message following `fn`.
 */
static gm_status register_ranges(gm_context *ctx, const char *fn, gm_host_scope *scope)
{
    gm_status status = GM_OK;
    int registered = 0;

    while (registered < scope->nranges && status == GM_OK) {
        gm__host_range *r = &scope->ranges[registered];

        status = gm__pin_host(ctx, (void *)r->start, r->bytes, scope->mapped, &r->owner);
        if (status != GM_OK)
            break;
        registered++;
        if (scope->mapped)
            status = ctx->ops->host_device_pointer(ctx->bctx, (void *)r->start, &r->device);
    }
    if (status != GM_OK) {
        status = gm__error_within(fn, status);
        undo_ranges(ctx, fn, status, scope->ranges, registered);
    }
    return status;
}

/* The device view of array `v` inside a mapped scope. */
static gm_status scope_device_view(gm_context *ctx, const char *fn, const gm_host_scope *scope,
                                   const gm_ndview *v, gm_ndview *out)
{
    int64_t lo = 0, hi = 0;
    uintptr_t first = 0;

    if (v->memory == GM_MEMORY_MAPPED || gm_ndview_size(v) == 0)
        return mapped_device_view(ctx, fn, v, out);
    (void)gm_ndview_extent(v, &lo, &hi);
    first = (uintptr_t)v->data + (uintptr_t)lo;
    for (int i = 0; i < scope->nranges; i++) {
        const gm__host_range *r = &scope->ranges[i];

        if (first >= r->start && first < r->start + r->bytes) {
            *out = *v;
            out->memory = GM_MEMORY_DEVICE;
            out->device_id = ctx->device_id;
            out->data = (void *)(uintptr_t)(r->device + (uint64_t)((uintptr_t)v->data - r->start));
            return GM_OK;
        }
    }
    return gm__error(GM_ERR_INTERNAL, "%s: array not found in its scope", fn);
}

/* Write the device views of a mapped scope (all or nothing). */
static gm_status write_device_views(gm_context *ctx, const char *fn, const gm_host_scope *scope,
                                    int narrays, const gm_ndview *arrays, gm_ndview *device_views)
{
    gm_ndview *views = NULL;
    gm_status status = GM_OK;

    if (device_views == NULL || narrays == 0)
        return GM_OK;
    views = gm__calloc((size_t)narrays, sizeof(*views));
    if (views == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory", fn);
    for (int i = 0; i < narrays && status == GM_OK; i++) {
        status = scope_device_view(ctx, fn, scope, &arrays[i], &views[i]);
        views[i].reserved = 0; /* ndview.h: gpumem writes zero there */
    }
    if (status == GM_OK)
        memcpy(device_views, views, (size_t)narrays * sizeof(*views));
    gm__free(views);
    return status;
}

/* Allocate a scope with room for n ranges. */
static gm_status scope_alloc(gm_context *ctx, const char *fn, bool mapped, int n,
                             gm_host_scope **scope_p)
{
    gm_host_scope *scope = gm__calloc(1, sizeof(*scope));

    if (scope == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory", fn);
    scope->ranges = gm__calloc(n > 0 ? (size_t)n : 1u, sizeof(*scope->ranges));
    if (scope->ranges == NULL) {
        gm__free(scope);
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory", fn);
    }
    scope->ctx = ctx;
    scope->mapped = mapped;
    *scope_p = scope;
    return GM_OK;
}

/* Free a scope's bookkeeping (not its registrations). */
static void scope_free(gm_host_scope *scope)
{
    gm__free(scope->ranges);
    gm__free(scope);
}

/* Arguments common to gm_pin / gm_map / gm_register. */
static gm_status check_scope_args(const char *fn, const gm_context *ctx, int narrays,
                                  const gm_ndview *arrays, gm_host_scope **scope_p)
{
    gm_status status = gm__check_context(fn, ctx);

    if (status == GM_OK && scope_p == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: scope_p is NULL", fn);
    if (status == GM_OK && narrays < 0)
        status = gm__error(GM_ERR_INVALID_ARG, "%s: narrays must be >= 0, got %d", fn, narrays);
    if (status == GM_OK && narrays > 0 && arrays == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: arrays is NULL", fn);
    return status;
}

/* gm_pin / gm_map / gm_register. */
static gm_status scope_begin(const char *fn, gm_context *ctx, bool mapped, int narrays,
                             const gm_ndview *arrays, gm_ndview *device_views,
                             gm_host_scope **scope_p)
{
    gm_host_scope *scope = NULL;
    gm_status status = check_scope_args(fn, ctx, narrays, arrays, scope_p);

    if (status == GM_OK)
        status = scope_alloc(ctx, fn, mapped, narrays, &scope);
    if (status != GM_OK)
        return status;
    status = collect_ranges(fn, mapped, narrays, arrays, scope->ranges, &scope->nranges);
    if (status != GM_OK)
        goto fail_scope;
    status = register_ranges(ctx, fn, scope);
    if (status != GM_OK)
        goto fail_scope;
    status = write_device_views(ctx, fn, scope, narrays, arrays, device_views);
    if (status != GM_OK)
        goto fail_registered;
    pthread_mutex_lock(&ctx->lock);
    gm__list_push(&ctx->scopes, &scope->link);
    pthread_mutex_unlock(&ctx->lock);
    *scope_p = scope;
    return GM_OK;
fail_registered:
    undo_ranges(ctx, fn, status, scope->ranges, scope->nranges);
fail_scope:
    scope_free(scope);
    return status;
}

/* Numba's `with pinned(*arrays)`. */
gm_status gm_pin(gm_context *ctx, int narrays, const gm_ndview *arrays, gm_host_scope **scope_p)
{
    return scope_begin("gm_pin", ctx, false, narrays, arrays, NULL, scope_p);
}

/* Numba's `with mapped(*arrays)`, with the device views. */
gm_status gm_map(gm_context *ctx, int narrays, const gm_ndview *arrays, gm_ndview *device_views,
                 gm_host_scope **scope_p)
{
    return scope_begin("gm_map", ctx, true, narrays, arrays, device_views, scope_p);
}

/* ROC's register(*arrays): pinning under another name. */
gm_status gm_register(gm_context *ctx, int narrays, const gm_ndview *arrays,
                      gm_host_scope **scope_p)
{
    return scope_begin("gm_register", ctx, false, narrays, arrays, NULL, scope_p);
}

/* Unregister every range now (never queued), freeing the scope even on failure. */
static gm_status scope_end(const char *fn, gm_host_scope **scope_p)
{
    gm_host_scope *scope = NULL;
    gm_status status = GM_OK;

    if (scope_p == NULL || *scope_p == NULL)
        return GM_OK;
    if (gm__in_stream_callback()) /* the unregistration may wait for queued work (HSA, CUDA) */
        return gm__error(GM_ERR_STATE,
                         "%s: not allowed inside a stream callback (the scope stays open)", fn);
    scope = *scope_p;
    *scope_p = NULL;
    pthread_mutex_lock(&scope->ctx->lock);
    gm__list_remove(&scope->link);
    pthread_mutex_unlock(&scope->ctx->lock);
    status = unregister_ranges(scope->ctx, fn, scope->ranges, scope->nranges);
    scope_free(scope);
    return status;
}

/* End a gm_pin / gm_map / gm_register scope. */
gm_status gm_host_scope_end(gm_host_scope **scope_p)
{
    return scope_end("gm_host_scope_end", scope_p);
}

/* ROC's deregister(*arrays). */
gm_status gm_deregister(gm_host_scope **scope_p)
{
    return scope_end("gm_deregister", scope_p);
}

/* End every scope still open, with a warning each. */
void gm__scopes_teardown(gm_context *ctx)
{
    while (!gm__list_empty(&ctx->scopes)) {
        gm_host_scope *scope = GM__CONTAINER_OF(ctx->scopes.next, gm_host_scope, link);

        gm__log(GM_LOG_WARN,
                "gm_context_destroy: a host registration scope (%d ranges) was "
                "not ended; unregistering it",
                scope->nranges);
        if (gm_host_scope_end(&scope) != GM_OK)
            gm__log(GM_LOG_WARN, "gm_context_destroy: unregistering failed: %s",
                    gm_last_error_message());
    }
}
