/*
 * Buffers and arrays: allocation of device / pinned / mapped / gpumem-owned
 * host arrays, reference counting, derived views, and the public wrappers of
 * the transfers (copy.c does the work).
 *
 * A buffer is one allocation, refcounted by the gm_array objects that view
 * it; a gm_array is a descriptor plus one buffer reference, refcounted by its
 * own users (gm_array_retain). When the last array of a buffer goes, the
 * buffer's preallocated queue entry is released: through the deallocation
 * queue, or at once for memory whose manager frees immediately and for
 * foreign memory (gm__dealloc_release).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ndview_internal.h"
#include "runtime_internal.h"

/* The queue entry kind that frees memory of a given kind. */
static gm__dealloc_kind dealloc_kind(gm_memory_kind memory)
{
    switch (memory) {
    case GM_MEMORY_DEVICE:
        return GM__DEALLOC_DEVICE;
    case GM_MEMORY_PINNED:
        return GM__DEALLOC_PINNED;
    case GM_MEMORY_MAPPED:
        return GM__DEALLOC_MAPPED;
    case GM_MEMORY_MANAGED:
        return GM__DEALLOC_MANAGED;
    case GM_MEMORY_HOST:
        break;
    }
    return GM__DEALLOC_HOST_COPY;
}

/*
 * Allocate `bytes` of `memory` kind into a filled queue entry, through the
 * memory manager; its policy decides whether the free is deferred.
 */
static gm_status allocate_memory(gm_context *ctx, const char *fn, gm_memory_kind memory,
                                 unsigned host_flags, size_t bytes, gm__dealloc_entry *entry)
{
    gm_status status = GM_OK;

    entry->bytes = (int64_t)bytes;
    switch (memory) {
    case GM_MEMORY_DEVICE:
        entry->immediate = !ctx->mm.defer_device;
        return gm__alloc_device(ctx, bytes, &entry->device, &entry->owner);
    case GM_MEMORY_MANAGED:
        return gm__alloc_managed(ctx, bytes, &entry->device);
    case GM_MEMORY_PINNED:
    case GM_MEMORY_MAPPED:
        entry->immediate = !ctx->mm.defer_host;
        return gm__alloc_host(ctx, bytes, host_flags, &entry->handle, &entry->owner);
    case GM_MEMORY_HOST:
        entry->handle = gm__malloc(bytes);
        if (entry->handle == NULL)
            status = gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory for %zu bytes", fn, bytes);
        return status;
    }
    return gm__error(GM_ERR_INTERNAL, "%s: unknown memory kind %d", fn, (int)memory);
}

/* A buffer of `bytes` (0: no memory) with refcount 1. */
static gm_status buffer_create(gm_context *ctx, const char *fn, gm_memory_kind memory,
                               unsigned host_flags, int64_t bytes, gm__buffer **buffer_p)
{
    gm__buffer *buffer = gm__calloc(1, sizeof(*buffer));
    gm_status status = GM_OK;

    if (buffer == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory", fn);
    buffer->ctx = ctx;
    buffer->memory = memory;
    atomic_init(&buffer->refcount, 1);
    if (bytes > 0) {
        status = gm__dealloc_entry_create(fn, dealloc_kind(memory), &buffer->entry);
        if (status != GM_OK)
            goto fail_buffer;
        status = allocate_memory(ctx, fn, memory, host_flags, (size_t)bytes, buffer->entry);
        if (status != GM_OK)
            goto fail_entry;
        buffer->bytes = bytes;
        buffer->base = buffer->entry->handle != NULL ? (uintptr_t)buffer->entry->handle
                                                     : (uintptr_t)buffer->entry->device;
    }
    *buffer_p = buffer;
    return GM_OK;
fail_entry:
    gm__dealloc_entry_discard(buffer->entry);
fail_buffer:
    gm__free(buffer);
    return status;
}

/* Drop a buffer reference; the last one releases the memory (queued or at once). */
static void buffer_unref(gm__buffer *buffer)
{
    if (atomic_fetch_sub(&buffer->refcount, 1) != 1)
        return;
    if (buffer->entry != NULL)
        gm__dealloc_release(buffer->ctx, buffer->entry);
    gm__free(buffer);
}

/* Wrap a descriptor and a buffer reference (taken over) into a new array. */
static gm_status array_wrap(gm_context *ctx, const char *fn, gm__buffer *buffer,
                            const gm_ndview *view, gm_array **array_p)
{
    gm_array *array = gm__calloc(1, sizeof(*array));

    if (array == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory", fn);
    array->ctx = ctx;
    array->buffer = buffer;
    array->view = *view;
    atomic_init(&array->refcount, 1);
    pthread_mutex_lock(&ctx->lock);
    gm__list_push(&ctx->arrays, &array->link);
    pthread_mutex_unlock(&ctx->lock);
    *array_p = array;
    return GM_OK;
}

/* Allocate the layout's byte extent and wrap it in a new array. */
gm_status gm__array_create(gm_context *ctx, const char *fn, const gm_ndview *layout,
                           gm_memory_kind memory, unsigned host_flags, gm_array **array_p)
{
    gm_ndview view = *layout;
    gm__buffer *buffer = NULL;
    int64_t lo = 0, hi = 0;
    gm_status status = GM_OK;

    view.data = NULL;
    view.offset = 0;
    status = gm__validate(fn, &view);
    if (status == GM_OK)
        status = gm_ndview_extent(&view, &lo, &hi);
    if (status == GM_OK)
        status = buffer_create(ctx, fn, memory, host_flags, hi - lo, &buffer);
    if (status != GM_OK)
        return status;
    view.data = (void *)buffer->base;
    view.offset = buffer->bytes > 0 ? -lo : 0;
    view.memory = (int32_t)memory;
    view.device_id = memory == GM_MEMORY_HOST || memory == GM_MEMORY_PINNED ? -1 : ctx->device_id;
    status = array_wrap(ctx, fn, buffer, &view, array_p);
    if (status != GM_OK)
        buffer_unref(buffer);
    return status;
}

/* A buffer over the extent of foreign memory, holding `entry`, wrapped in a new array. */
gm_status gm__array_wrap_foreign(gm_context *ctx, const char *fn, const gm_ndview *view,
                                 gm__dealloc_entry *entry, gm_array **array_p)
{
    gm__buffer *buffer = NULL;
    int64_t lo = 0, hi = 0;
    gm_status status = gm_ndview_extent(view, &lo, &hi);

    if (status != GM_OK)
        return status;
    buffer = gm__calloc(1, sizeof(*buffer));
    if (buffer == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory", fn);
    buffer->ctx = ctx;
    buffer->memory = (gm_memory_kind)view->memory;
    buffer->base = (uintptr_t)view->data + (uintptr_t)lo;
    buffer->bytes = hi - lo;
    buffer->entry = entry;
    atomic_init(&buffer->refcount, 1);
    status = array_wrap(ctx, fn, buffer, view, array_p);
    if (status != GM_OK)
        gm__free(buffer); /* the caller keeps `entry` */
    return status;
}

/* NULL and context checks of an array argument. */
gm_status gm__check_array(const char *fn, const gm_array *array, const gm_context *ctx)
{
    if (array == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: array is NULL", fn);
    if (ctx != NULL && array->ctx != ctx)
        return gm__error(GM_ERR_WRONG_CONTEXT, "%s: the array belongs to another context", fn);
    return GM_OK;
}

/* Free every listed array, counting arrays, the buffers they held and those bytes. */
void gm__arrays_teardown(gm_context *ctx, int64_t *arrays_p, int64_t *buffers_p, int64_t *bytes_p)
{
    int64_t arrays = 0, buffers = 0, bytes = 0;

    while (!gm__list_empty(&ctx->arrays)) {
        gm_array *array = GM__CONTAINER_OF(ctx->arrays.next, gm_array, link);
        gm__buffer *buffer = array->buffer;

        gm__list_remove(&array->link);
        arrays++;
        if (atomic_load(&buffer->refcount) == 1) {
            buffers++;
            bytes += buffer->bytes;
        }
        buffer_unref(buffer);
        gm__free(array);
    }
    *arrays_p = arrays;
    *buffers_p = buffers;
    *bytes_p = bytes;
}

/*
 * Release a new array whose asynchronous fill failed part-way: wait for the
 * work already queued on the stream (it may still write the array) first,
 * keeping the caller's error message.
 */
static void release_failed(gm_array **array_p, gm_stream *stream, gm_status status)
{
    char saved[512];

    if (stream != NULL) {
        snprintf(saved, sizeof(saved), "%s", gm_last_error_message());
        (void)gm_stream_synchronize(stream);
        (void)gm__error(status, "%s", saved);
    }
    gm_array_release(array_p);
}

/* ------------------------------------------------------------ allocation */

/* A C- or F-contiguous device array (Numba's device_array). */
gm_status gm_device_array(gm_context *ctx, int ndim, const int64_t *shape, gm_dtype dtype,
                          gm_order order, gm_array **array_p)
{
    static const char fn[] = "gm_device_array";
    gm_ndview layout;
    gm_status status = gm__check_context(fn, ctx);

    if (status != GM_OK)
        return status;
    if (array_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: array_p is NULL", fn);
    if (order != GM_ORDER_C && order != GM_ORDER_F)
        return gm__error(GM_ERR_INVALID_ARG, "%s: order must be 'C' or 'F', got %d", fn,
                         (int)order);
    status = gm_ndview_init(NULL, dtype, ndim, shape, NULL, order, &layout);
    if (status != GM_OK)
        return status;
    return gm__array_create(ctx, fn, &layout, GM_MEMORY_DEVICE, 0, array_p);
}

/* A device array with explicit byte strides (any signs). */
gm_status gm_device_array_strided(gm_context *ctx, int ndim, const int64_t *shape,
                                  const int64_t *strides, gm_dtype dtype, gm_array **array_p)
{
    static const char fn[] = "gm_device_array_strided";
    gm_ndview layout;
    gm_status status = gm__check_context(fn, ctx);

    if (status != GM_OK)
        return status;
    if (array_p == NULL || (strides == NULL && ndim > 0))
        return gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn,
                         array_p == NULL ? "array_p" : "strides");
    status = gm_ndview_init(NULL, dtype, ndim, shape, strides, GM_ORDER_C, &layout);
    if (status != GM_OK)
        return status;
    return gm__array_create(ctx, fn, &layout, GM_MEMORY_DEVICE, 0, array_p);
}

/* A device array with gm_ndview_like()'s layout of `like`. */
gm_status gm_device_array_like(gm_context *ctx, const gm_ndview *like, gm_array **array_p)
{
    static const char fn[] = "gm_device_array_like";
    gm_ndview layout;
    gm_status status = gm__check_context(fn, ctx);

    if (status != GM_OK)
        return status;
    if (array_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: array_p is NULL", fn);
    status = gm__validate(fn, like);
    if (status == GM_OK)
        status = gm_ndview_like(like, &layout);
    if (status != GM_OK)
        return status;
    return gm__array_create(ctx, fn, &layout, GM_MEMORY_DEVICE, 0, array_p);
}

/* A like-layout device array filled from `host` (packs non-contiguous input). */
gm_status gm_to_device(gm_context *ctx, const gm_ndview *host, gm_stream *stream,
                       gm_array **array_p)
{
    static const char fn[] = "gm_to_device";
    gm_backend_stream *bs = NULL;
    gm_ndview layout;
    gm_array *array = NULL;
    gm_status status = gm__check_context(fn, ctx);

    if (status == GM_OK && array_p == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: array_p is NULL", fn);
    if (status == GM_OK)
        status = gm__stream_backend(fn, ctx, stream, &bs);
    if (status == GM_OK)
        status = gm__validate(fn, host);
    if (status == GM_OK)
        status = gm_ndview_like(host, &layout);
    if (status == GM_OK)
        status = gm__array_create(ctx, fn, &layout, GM_MEMORY_DEVICE, 0, &array);
    if (status != GM_OK)
        return status;
    status = gm__copy(fn, ctx, &array->view, host, stream);
    if (status != GM_OK) {
        release_failed(&array, stream, status);
        return status;
    }
    *array_p = array;
    return GM_OK;
}

/* ---------------------------------------------------- references, views */

/* The array's descriptor; NULL for NULL. */
const gm_ndview *gm_array_view(const gm_array *array)
{
    return array == NULL ? NULL : &array->view;
}

/* The array's context; NULL for NULL. */
gm_context *gm_array_context(const gm_array *array)
{
    return array == NULL ? NULL : array->ctx;
}

/* One more reference (atomic). */
gm_array *gm_array_retain(gm_array *array)
{
    if (array != NULL)
        atomic_fetch_add(&array->refcount, 1);
    return array;
}

/* Drop a reference; the last one unlists the array and drops its buffer reference. */
void gm_array_release(gm_array **array_p)
{
    gm_array *array = NULL;

    if (array_p == NULL || *array_p == NULL)
        return;
    array = *array_p;
    *array_p = NULL;
    if (atomic_fetch_sub(&array->refcount, 1) != 1)
        return;
    pthread_mutex_lock(&array->ctx->lock);
    gm__list_remove(&array->link);
    pthread_mutex_unlock(&array->ctx->lock);
    buffer_unref(array->buffer);
    gm__free(array);
}

/* Whether `view` addresses only bytes of the buffer (size-0 views: a point inside or at the end).
 */
static gm_status check_inside(const char *fn, const gm__buffer *buffer, const gm_ndview *view)
{
    int64_t lo = 0, hi = 0;
    uint64_t start = 0, end = 0;
    gm_status status = gm_ndview_extent(view, &lo, &hi);

    if (status != GM_OK)
        return status;
    start = (uint64_t)(uintptr_t)view->data + (uint64_t)lo;
    end = (uint64_t)(uintptr_t)view->data + (uint64_t)hi;
    if (start < (uint64_t)buffer->base || end > (uint64_t)buffer->base + (uint64_t)buffer->bytes ||
        end < start)
        return gm__error(GM_ERR_OUT_OF_RANGE,
                         "%s: the view addresses bytes [%#" PRIx64 ", %#" PRIx64
                         ") outside its buffer [%#" PRIx64 ", %#" PRIx64 ")",
                         fn, start, end, (uint64_t)buffer->base,
                         (uint64_t)buffer->base + (uint64_t)buffer->bytes);
    return GM_OK;
}

/* gm_array_derive with the caller's name in messages. */
static gm_status derive(const char *fn, gm_array *array, const gm_ndview *view, gm_array **array_p)
{
    gm_ndview copy;
    gm_status status = gm__check_array(fn, array, NULL);

    if (status == GM_OK && array_p == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: array_p is NULL", fn);
    if (status == GM_OK)
        status = gm__validate(fn, view);
    if (status != GM_OK)
        return status;
    if (view->memory != array->view.memory)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: the view's memory kind %d differs from the "
                         "array's (%d)",
                         fn, (int)view->memory, (int)array->view.memory);
    status = check_inside(fn, array->buffer, view);
    if (status != GM_OK)
        return status;
    copy = *view;
    copy.device_id = array->view.device_id;
    atomic_fetch_add(&array->buffer->refcount, 1);
    status = array_wrap(array->ctx, fn, array->buffer, &copy, array_p);
    if (status != GM_OK)
        buffer_unref(array->buffer);
    return status;
}

/* A new array on the same buffer; the view must stay inside the buffer. */
gm_status gm_array_derive(gm_array *array, const gm_ndview *view, gm_array **array_p)
{
    return derive("gm_array_derive", array, view, array_p);
}

/* Reshape as a view (numpy's rules) sharing the buffer. */
gm_status gm_array_reshape(gm_array *array, int ndim, const int64_t *shape, gm_order order,
                           gm_array **array_p)
{
    static const char fn[] = "gm_array_reshape";
    gm_ndview view;
    gm_status status = gm__check_array(fn, array, NULL);

    if (status == GM_OK)
        status = gm_ndview_reshape(&array->view, ndim, shape, order, &view);
    if (status != GM_OK)
        return status;
    return derive(fn, array, &view, array_p);
}

/* Flatten as a view sharing the buffer. */
gm_status gm_array_ravel(gm_array *array, gm_order order, gm_array **array_p)
{
    static const char fn[] = "gm_array_ravel";
    gm_ndview view;
    gm_status status = gm__check_array(fn, array, NULL);

    if (status == GM_OK)
        status = gm_ndview_ravel(&array->view, order, &view);
    if (status != GM_OK)
        return status;
    return derive(fn, array, &view, array_p);
}

/* Basic indexing as a view sharing the buffer. */
gm_status gm_array_getitem(gm_array *array, int nitems, const gm_index_item *items,
                           gm_array **array_p)
{
    static const char fn[] = "gm_array_getitem";
    gm_ndview view;
    gm_status status = gm__check_array(fn, array, NULL);

    if (status == GM_OK)
        status = gm_ndview_getitem(&array->view, nitems, items, &view);
    if (status != GM_OK)
        return status;
    return derive(fn, array, &view, array_p);
}

/* Reversed axes as a view sharing the buffer. */
gm_status gm_array_transpose(gm_array *array, gm_array **array_p)
{
    static const char fn[] = "gm_array_transpose";
    gm_ndview view;
    gm_status status = gm__check_array(fn, array, NULL);

    if (status == GM_OK)
        status = gm_ndview_transpose(&array->view, &view);
    if (status != GM_OK)
        return status;
    return derive(fn, array, &view, array_p);
}

/* ------------------------------------------------------------- transfers */

/* Any-layout copy between two descriptors (see copy.c for the strategy). */
gm_status gm_copy(gm_context *ctx, const gm_ndview *dst, const gm_ndview *src, gm_stream *stream)
{
    return gm__copy("gm_copy", ctx, dst, src, stream);
}

/* Device array into an existing descriptor (any layout). */
gm_status gm_array_copy_to_host(gm_array *array, const gm_ndview *host, gm_stream *stream)
{
    static const char fn[] = "gm_array_copy_to_host";
    gm_status status = gm__check_array(fn, array, NULL);

    if (status != GM_OK)
        return status;
    return gm__copy(fn, array->ctx, host, &array->view, stream);
}

/* Device array into new gpumem-owned host memory of like layout. */
gm_status gm_array_copy_to_host_new(gm_array *array, gm_stream *stream, gm_array **host_p)
{
    static const char fn[] = "gm_array_copy_to_host_new";
    gm_backend_stream *bs = NULL;
    gm_ndview layout;
    gm_array *host = NULL;
    gm_status status = gm__check_array(fn, array, NULL);

    if (status == GM_OK && host_p == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: host_p is NULL", fn);
    if (status == GM_OK)
        status = gm__stream_backend(fn, array->ctx, stream, &bs);
    if (status == GM_OK)
        status = gm_ndview_like(&array->view, &layout);
    if (status == GM_OK)
        status = gm__array_create(array->ctx, fn, &layout, GM_MEMORY_HOST, 0, &host);
    if (status != GM_OK)
        return status;
    status = gm__copy(fn, array->ctx, &host->view, &array->view, stream);
    if (status != GM_OK) {
        release_failed(&host, stream, status);
        return status;
    }
    *host_p = host;
    return GM_OK;
}

/* Fill a device array from a host or device descriptor. */
gm_status gm_array_copy_to_device(gm_array *array, const gm_ndview *src, gm_stream *stream)
{
    static const char fn[] = "gm_array_copy_to_device";
    gm_status status = gm__check_array(fn, array, NULL);

    if (status != GM_OK)
        return status;
    return gm__copy(fn, array->ctx, &array->view, src, stream);
}

/* Set every element to an itemsize-byte value. */
gm_status gm_array_fill(gm_array *array, const void *value, gm_stream *stream)
{
    static const char fn[] = "gm_array_fill";
    gm_status status = gm__check_array(fn, array, NULL);

    if (status != GM_OK)
        return status;
    if (value == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: value is NULL", fn);
    return gm__fill(fn, array->ctx, &array->view, value, stream);
}

/* Set every byte of every element. */
gm_status gm_array_memset(gm_array *array, int byte, gm_stream *stream)
{
    static const char fn[] = "gm_array_memset";
    gm_status status = gm__check_array(fn, array, NULL);

    if (status != GM_OK)
        return status;
    if (byte < 0 || byte > 255)
        return gm__error(GM_ERR_INVALID_ARG, "%s: byte must be in 0..255, got %d", fn, byte);
    return gm__memset(fn, array->ctx, &array->view, (unsigned char)byte, stream);
}
