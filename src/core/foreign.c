/*
 * Foreign memory (Numba's as_cuda_array / is_cuda_array and the CUDA Array
 * Interface): arrays over memory gpumem did not allocate, and pointer
 * queries.
 *
 * A foreign array's buffer covers the view's byte extent and carries a
 * GM__DEALLOC_FOREIGN entry marked immediate: when the last array goes, the
 * owner's release callback runs at once on the releasing thread, or through
 * the deallocation queue when that happens inside a stream callback (no user
 * code that may call the driver runs on a driver thread). gpumem never frees
 * the memory itself.
 */
#include <inttypes.h>

#include "ndview_internal.h"
#include "runtime_internal.h"

/* Check the memory kind and device of a foreign view; fill in a device id of -1. */
static gm_status check_placement(const char *fn, const gm_context *ctx, gm_ndview *view)
{
    bool on_device = view->memory == GM_MEMORY_DEVICE || view->memory == GM_MEMORY_MAPPED ||
                     view->memory == GM_MEMORY_MANAGED;

    if (view->memory < GM_MEMORY_HOST || view->memory > GM_MEMORY_MANAGED)
        return gm__error(GM_ERR_INVALID_ARG, "%s: unknown memory kind %" PRId32, fn, view->memory);
    if (!on_device && view->device_id != -1)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: host or pinned memory has device_id -1, got %" PRId32, fn,
                         view->device_id);
    if (on_device && view->device_id == -1)
        view->device_id = ctx->device_id;
    if (view->device_id != -1 && view->device_id != ctx->device_id)
        return gm__error(GM_ERR_WRONG_CONTEXT,
                         "%s: the memory is on device %" PRId32 ", the context on device %" PRId32,
                         fn, view->device_id, ctx->device_id);
    return GM_OK;
}

/* Arguments of gm_array_from_foreign, and the view to wrap. */
static gm_status check_foreign(const char *fn, gm_context *ctx, const gm_ndview *view,
                               gm_array **array_p, gm_ndview *out)
{
    gm_status status = gm__check_context(fn, ctx);

    if (status == GM_OK && (view == NULL || array_p == NULL))
        status =
            gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn, view == NULL ? "view" : "array_p");
    if (status == GM_OK)
        status = gm__validate(fn, view);
    if (status != GM_OK)
        return status;
    if (view->data == NULL && gm_ndview_size(view) > 0)
        return gm__error(GM_ERR_NULL_POINTER, "%s: view->data is NULL in a non-empty view", fn);
    *out = *view;
    return check_placement(fn, ctx, out);
}

/* Wrap foreign memory; the release callback runs when the last array goes. */
gm_status gm__array_from_foreign(const char *fn, gm_context *ctx, const gm_ndview *view,
                                 gm_foreign_release_fn release, void *release_user,
                                 gm_stream *stream, gm_array **array_p)
{
    gm_backend_stream *bs = NULL;
    gm__dealloc_entry *entry = NULL;
    gm_ndview wrapped;
    gm_status status = check_foreign(fn, ctx, view, array_p, &wrapped);

    if (status == GM_OK)
        status = gm__stream_backend(fn, ctx, stream, &bs);
    if (status == GM_OK && stream != NULL)
        status = gm__error_within(fn, gm_stream_synchronize(stream));
    if (status == GM_OK && release != NULL)
        status = gm__dealloc_entry_create(fn, GM__DEALLOC_FOREIGN, &entry);
    if (status != GM_OK)
        return status;
    if (entry != NULL) {
        entry->immediate = true;
        entry->release_fn = release;
        entry->handle = release_user;
    }
    status = gm__array_wrap_foreign(ctx, fn, &wrapped, entry, array_p);
    if (status != GM_OK)
        gm__dealloc_entry_discard(entry);
    return status;
}

/* ---------------------------------------------------------------- IPC */

/* An opened IPC mapping, closed when its last array goes. */
typedef struct ipc_mapping {
    gm_context *ctx;
    gm_devptr ptr;
} ipc_mapping;

/* The foreign release of an IPC array: close the mapping (after the queued work: the
 * release of foreign memory waits for it). */
static void ipc_close(void *user)
{
    ipc_mapping *m = user;

    if (m->ctx->ops->ipc_close(m->ctx->bctx, m->ptr) != GM_OK)
        gm__log(GM_LOG_WARN,
                "gm_array_from_ipc_handle: closing the mapping at %#" PRIx64 " failed: %s",
                (uint64_t)m->ptr, gm_last_error_message());
    gm__free(m);
}

/* The handle's array in `layout`, checked against the handle's allocation. */
static gm_status ipc_view(const char *fn, const gm_ipc_handle *handle, const gm_ndview *layout,
                          gm_devptr base, gm_ndview *out)
{
    int64_t lo = 0, hi = 0, start = 0, end = 0;
    gm_status status = gm__validate_extent(fn, layout, &lo, &hi);

    if (status != GM_OK)
        return status;
    if (gm__add_overflow(handle->offset, lo, &start) ||
        gm__add_overflow(handle->offset, hi, &end) || start < 0 || end > handle->bytes)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: the layout addresses bytes [%" PRId64 ", %" PRId64
                         ") of an allocation of %" PRId64 " bytes",
                         fn, handle->offset + lo, handle->offset + hi, handle->bytes);
    *out = *layout;
    out->data = (void *)(uintptr_t)(base + (gm_devptr)handle->offset);
    out->memory = GM_MEMORY_DEVICE;
    out->device_id = -1;
    return GM_OK;
}

/* Open another process's allocation and view it as an array. */
gm_status gm_array_from_ipc_handle(gm_context *ctx, const gm_ipc_handle *handle,
                                   const gm_ndview *layout, gm_array **array_p)
{
    static const char fn[] = "gm_array_from_ipc_handle";
    ipc_mapping *m = NULL;
    gm_ndview view;
    gm_status status = gm__check_context(fn, ctx);

    if (status == GM_OK && (handle == NULL || layout == NULL || array_p == NULL))
        status = gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn,
                           handle == NULL   ? "handle"
                           : layout == NULL ? "layout"
                                            : "array_p");
    if (status == GM_OK && handle->backend != ctx->ops->kind)
        status = gm__error(GM_ERR_INVALID_ARG,
                           "%s: the handle was made by the %s backend, the context runs %s", fn,
                           gm_backend_name(handle->backend), ctx->ops->name);
    if (status == GM_OK && (handle->bytes <= 0 || handle->offset < 0))
        status = gm__error(GM_ERR_INVALID_ARG,
                           "%s: the handle describes %" PRId64 " bytes at offset %" PRId64, fn,
                           handle->bytes, handle->offset);
    if (status == GM_OK)
        status = gm__validate(fn, layout);
    if (status != GM_OK)
        return status;
    m = gm__malloc(sizeof(*m));
    if (m == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory", fn);
    m->ctx = ctx;
    m->ptr = 0;
    status = gm__error_within(
        fn, ctx->ops->ipc_open(ctx->bctx, handle->handle, sizeof(handle->handle), &m->ptr));
    if (status == GM_OK)
        status = ipc_view(fn, handle, layout, m->ptr, &view);
    if (status == GM_OK)
        status = gm__array_from_foreign(fn, ctx, &view, ipc_close, m, NULL, array_p);
    if (status == GM_OK)
        return GM_OK;
    if (m->ptr != 0) { /* opened: close it again, keeping this call's message */
        gm__saved_error saved;

        gm__error_save(&saved);
        (void)ctx->ops->ipc_close(ctx->bctx, m->ptr);
        gm__error_restore(&saved);
    }
    gm__free(m);
    return status;
}

/* Public form of gm__array_from_foreign. */
gm_status gm_array_from_foreign(gm_context *ctx, const gm_ndview *view,
                                gm_foreign_release_fn release, void *release_user,
                                gm_stream *stream, gm_array **array_p)
{
    return gm__array_from_foreign("gm_array_from_foreign", ctx, view, release, release_user, stream,
                                  array_p);
}

/* The kind of the memory of an array on `list` containing ptr; GM_MEMORY_HOST if none. */
static gm_memory_kind list_kind(const gm__link *list, uintptr_t p)
{
    for (const gm__link *l = list->next; l != list; l = l->next) {
        const gm__buffer *b = GM__CONTAINER_OF(l, gm_array, link)->buffer;
        uintptr_t device = b->memory == GM_MEMORY_MAPPED ? atomic_load(&b->device) : 0;

        if ((p >= b->base && p - b->base < (uintptr_t)b->bytes) ||
            (device != 0 && p >= device && p - device < (uintptr_t)b->bytes))
            return b->memory;
    }
    return GM_MEMORY_HOST;
}

/*
 * The kind of the array memory of this context containing ptr; GM_MEMORY_HOST
 * if none. Mapped memory is found by its host address or by the device
 * address its device view got (on CUDA another one for write-combined memory).
 * Only the named arrays are looked through (runtime_internal.h, ctx->arrays)
 * unless `all`: the others' memory the backend names by itself, so a host
 * pointer costs a walk of the pinned, mapped and foreign arrays, not of every
 * device array.
 */
static gm_memory_kind registry_kind(gm_context *ctx, const void *ptr, bool all)
{
    gm_memory_kind kind = GM_MEMORY_HOST;

    gm__lock_take(&ctx->queue.lock);
    kind = list_kind(&ctx->arrays_named, (uintptr_t)ptr);
    if (kind == GM_MEMORY_HOST && all)
        kind = list_kind(&ctx->arrays, (uintptr_t)ptr);
    gm__lock_give(&ctx->queue.lock);
    return kind;
}

/*
 * The kind of the page-locked memory of this context's registration scopes
 * containing ptr (gm_map: MAPPED; gm_pin / gm_register: PINNED); HOST if none.
 * A mapped range is found by its host address or by its device address (on
 * HSA the agent address of locked memory is in general another one).
 */
static gm_memory_kind scope_kind(gm_context *ctx, const void *ptr)
{
    uintptr_t p = (uintptr_t)ptr;
    gm_memory_kind kind = GM_MEMORY_HOST;

    pthread_mutex_lock(&ctx->lock);
    for (gm__link *l = ctx->scopes.next; l != &ctx->scopes && kind == GM_MEMORY_HOST; l = l->next) {
        const gm_host_scope *scope = GM__CONTAINER_OF(l, gm_host_scope, link);

        for (int i = 0; i < scope->nranges; i++) {
            const gm__host_range *r = &scope->ranges[i];
            uintptr_t device = (uintptr_t)r->device;

            if ((p >= r->start && p - r->start < r->bytes) ||
                (scope->mapped && device != 0 && p >= device && p - device < r->bytes)) {
                kind = scope->mapped ? GM_MEMORY_MAPPED : GM_MEMORY_PINNED;
                break;
            }
        }
    }
    pthread_mutex_unlock(&ctx->lock);
    return kind;
}

/*
 * The backend's answer, completed by the context's own records; messages
 * name `fn`. The backend cannot tell every kind apart: CUDA reports all
 * page-locked memory as pinned, HSA all of its host pool as mapped, so for
 * page-locked memory the arrays and scopes that made it decide.
 */
static gm_status pointer_kind(const char *fn, gm_context *ctx, const void *ptr,
                              gm_memory_kind *kind_p)
{
    int kind = GM_MEMORY_HOST;
    gm_status status = gm__check_context(fn, ctx);

    if (status != GM_OK)
        return status;
    if (ptr != NULL) {
        gm__saved_error saved;

        gm__error_save(&saved);
        status = ctx->ops->pointer_kind(ctx->bctx, ptr, &kind);
        if (status == GM_ERR_UNSUPPORTED) /* the registry answers instead: no error */
            gm__error_restore(&saved);
    }
    if (status != GM_OK && status != GM_ERR_UNSUPPORTED)
        return gm__error_within(fn, status);
    if (ptr != NULL && (status == GM_ERR_UNSUPPORTED || kind == GM_MEMORY_HOST)) {
        /* page-locked memory is named by its array here */
        kind = registry_kind(ctx, ptr, status == GM_ERR_UNSUPPORTED);
    } else if (ptr != NULL && (kind == GM_MEMORY_PINNED || kind == GM_MEMORY_MAPPED)) {
        gm_memory_kind own = registry_kind(ctx, ptr, false);

        if (own != GM_MEMORY_PINNED && own != GM_MEMORY_MAPPED)
            own = scope_kind(ctx, ptr);
        if (own == GM_MEMORY_PINNED || own == GM_MEMORY_MAPPED)
            kind = own;
    }
    *kind_p = (gm_memory_kind)kind;
    return GM_OK;
}

/* What kind of memory ptr is in, as the context sees it. */
gm_status gm_pointer_kind(gm_context *ctx, const void *ptr, gm_memory_kind *kind_p)
{
    static const char fn[] = "gm_pointer_kind";

    if (kind_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: kind_p is NULL", fn);
    return pointer_kind(fn, ctx, ptr, kind_p);
}

/* Device or managed memory per gm_pointer_kind (Numba's is_cuda_array). */
gm_status gm_is_device_pointer(gm_context *ctx, const void *ptr, bool *is_p)
{
    static const char fn[] = "gm_is_device_pointer";
    gm_memory_kind kind = GM_MEMORY_HOST;
    gm_status status = GM_OK;

    if (is_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: is_p is NULL", fn);
    status = pointer_kind(fn, ctx, ptr, &kind);
    if (status == GM_OK)
        *is_p = kind == GM_MEMORY_DEVICE || kind == GM_MEMORY_MANAGED;
    return status;
}
