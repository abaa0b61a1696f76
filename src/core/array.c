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
 *
 * An allocating call makes one block holding the array, its buffer and the
 * entry (array_block), reused through the queue's pool of spare blocks, and
 * builds the descriptor in place: no 1 KiB descriptor is copied or zeroed
 * whole, and a layout is validated once.
 */
#include <inttypes.h>
#include <stddef.h>
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
 * memory manager; its policy decides whether the free is deferred. The
 * manager's or backend's message of a failure follows `fn`.
 */
static gm_status allocate_memory(gm_context *ctx, const char *fn, gm_memory_kind memory,
                                 unsigned host_flags, size_t bytes, gm__dealloc_entry *entry)
{
    gm_status status = GM_OK;

    entry->bytes = (int64_t)bytes;
    switch (memory) {
    case GM_MEMORY_DEVICE:
        entry->immediate = !ctx->mm.defer_device;
        return gm__error_within(fn, gm__alloc_device(ctx, bytes, &entry->device, &entry->owner));
    case GM_MEMORY_MANAGED:
        return gm__error_within(fn, gm__alloc_managed(ctx, bytes, &entry->device));
    case GM_MEMORY_PINNED:
    case GM_MEMORY_MAPPED:
        entry->immediate = !ctx->mm.defer_host;
        return gm__error_within(
            fn, gm__alloc_host(ctx, bytes, host_flags, &entry->handle, &entry->owner));
    case GM_MEMORY_HOST:
        entry->handle = gm__host_keep_take(&ctx->queue.host_keep, bytes);
        if (entry->handle == NULL)
            entry->handle = gm__host_keep_malloc(&ctx->queue.host_keep, bytes);
        if (entry->handle == NULL)
            status = gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory for %zu bytes", fn, bytes);
        return status;
    }
    return gm__error(GM_ERR_INTERNAL, "%s: unknown memory kind %d", fn, (int)memory);
}

/*
 * One allocation for an array made by gm__array_create: the array, its
 * buffer and the buffer's queue entry (a pooled entry, runtime_internal.h).
 * Its parts end in order: the array (its last release unlists it), the
 * buffer (its last reference releases the entry), then the entry (once the
 * queue has freed the memory), which hands the block back to the pool.
 * Where the memory may wait long in the queue (defer_cleanup, a count bound
 * past the pool's size: gm__dealloc_copy_wanted), a copy of the entry is
 * queued instead and the block goes back to the pool with the buffer. A
 * buffer without memory leaves the entry unused and hands the block back
 * itself. Between uses a block's descriptor keeps zeros past its ndim.
 *
 * A block belongs to one context for its whole life (the pool is the
 * queue's), so what ties its parts together is written once, when it is
 * made (block_init): the buffer's and array's ctx, array->buffer,
 * buffer->block, array->in_block, and the entry's pooled flag and its slots
 * that no array entry uses (unload, release_fn, bookkeeping: NULL). A reuse
 * writes only what differs from one array to the next.
 */
typedef struct array_block {
    gm__dealloc_entry entry; /* first: freeing the entry frees the block */
    gm__buffer buffer;
    gm_array array;
} array_block;

_Static_assert(offsetof(array_block, entry) == 0, "a pooled entry heads its block");

/* Zero the extents and strides a block's descriptor used past `ndim`. */
static void clear_tail(gm_ndview *v, int ndim)
{
    int used = v->ndim > GM_MAX_DIMS ? GM_MAX_DIMS : v->ndim;

    if (used > ndim) {
        memset(&v->shape[ndim], 0, (size_t)(used - ndim) * sizeof(int64_t));
        memset(&v->strides[ndim], 0, (size_t)(used - ndim) * sizeof(int64_t));
    }
}

/* Copy a valid descriptor into a block's: the header and ndim axes only. */
static void view_assign(gm_ndview *dst, const gm_ndview *src)
{
    size_t axes = (size_t)src->ndim * sizeof(int64_t);

    clear_tail(dst, src->ndim);
    memcpy(dst, src, offsetof(gm_ndview, shape));
    memcpy(dst->shape, src->shape, axes);
    memcpy(dst->strides, src->strides, axes);
}

/*
 * Whether a C/F-contiguous layout is valid and its byte size fits (every
 * check of gm_ndview_init then passes); its bytes (0 for size 0) to *nbytes_p.
 */
static bool contiguous_fits(int64_t itemsize, int ndim, const int64_t *shape, int64_t *nbytes_p)
{
    int64_t nbytes = itemsize;
    bool empty = false;

    if (ndim == 1 && itemsize != 0 && shape != NULL) { /* the common case, the same rules */
        if (shape[0] < 0 || (shape[0] > 1 && gm__mul_overflow(nbytes, shape[0], &nbytes)))
            return false;
        *nbytes_p = shape[0] == 0 ? 0 : nbytes;
        return true;
    }
    if (itemsize == 0 || ndim < 0 || ndim > GM_MAX_DIMS || (shape == NULL && ndim > 0))
        return false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] > 1 && gm__mul_overflow(nbytes, shape[i], &nbytes)))
            return false;
        empty = empty || shape[i] == 0;
    }
    *nbytes_p = empty ? 0 : nbytes;
    return true;
}

/* gm_ndview_init's descriptor of a layout that contiguous_fits, built in a block's. */
static void view_contiguous(gm_ndview *v, gm_dtype dtype, int64_t itemsize, int ndim,
                            const int64_t *shape, gm_order order)
{
    int64_t stride = itemsize;

    clear_tail(v, ndim);
    v->dtype = dtype;
    v->ndim = ndim;
    v->reserved = 0;
    if (ndim == 1) { /* the loop's one step, for either order */
        v->shape[0] = shape[0];
        v->strides[0] = itemsize;
        return;
    }
    for (int k = 0; k < ndim; k++) {
        int i = order == GM_ORDER_C ? ndim - 1 - k : k;

        v->shape[i] = shape[i];
        v->strides[i] = stride;
        stride *= shape[i] > 1 ? shape[i] : 1;
    }
}

/* The fields of a new (zeroed) block that stay the same while it is reused in ctx. */
static void block_init(gm_context *ctx, array_block *block)
{
    block->entry.pooled = true;
    block->buffer.ctx = ctx;
    block->buffer.block = &block->entry;
    block->array.ctx = ctx;
    block->array.buffer = &block->buffer;
    block->array.in_block = true;
}

/*
 * Set a (new or reused) block's buffer over `bytes` (0: none) at `base` and
 * list its array, on ctx->arrays_named when `named` (queue lock held).
 */
static void block_list_at(gm_context *ctx, array_block *block, gm_memory_kind memory,
                          uintptr_t base, int64_t bytes, bool named)
{
    gm__buffer *buffer = &block->buffer;

    buffer->memory = memory;
    buffer->named = named;
    buffer->base = base;
    buffer->bytes = bytes;
    atomic_init(&buffer->refcount, 1);
    atomic_init(&buffer->device, 0);
    buffer->entry = bytes > 0 ? &block->entry : NULL;
    atomic_init(&block->array.refcount, 1);
    gm__list_push(named ? &ctx->arrays_named : &ctx->arrays, &block->array.link);
}

/*
 * The same for the memory a filled entry describes: named unless the
 * backend's pointer_kind names it by itself (host memory, the built-in
 * manager's device memory, none).
 */
static void block_list(gm_context *ctx, array_block *block, gm_memory_kind memory,
                       const gm__dealloc_entry *mem)
{
    bool named = mem->bytes > 0 && memory != GM_MEMORY_HOST &&
                 !(memory == GM_MEMORY_DEVICE && ctx->mm.direct_device);

    block_list_at(ctx, block, memory,
                  mem->handle != NULL ? (uintptr_t)mem->handle : (uintptr_t)mem->device, mem->bytes,
                  named);
}

/*
 * The block of an array whose memory is allocated (`mem`, bytes 0: none):
 * taken from the pool and listed under one queue lock, else a new one. When
 * no block can be had, the memory is freed again.
 */
static gm_status block_publish(gm_context *ctx, const char *fn, gm_memory_kind memory,
                               const gm__dealloc_entry *mem, array_block **block_p)
{
    gm__dealloc_entry *spare = NULL;
    array_block *block = NULL;

    gm__lock_take(&ctx->queue.lock);
    spare = gm__dealloc_pool_take_locked(&ctx->queue);
    if (spare != NULL) {
        block = GM__CONTAINER_OF(spare, array_block, entry);
        block_list(ctx, block, memory, mem);
    }
    gm__lock_give(&ctx->queue.lock);
    if (block == NULL) {
        block = gm__calloc(1, sizeof(*block));
        if (block != NULL)
            block_init(ctx, block);
    }
    if (block == NULL) {
        if (mem->bytes > 0 && gm__dealloc_free_now(ctx, mem) != GM_OK)
            gm__log(GM_LOG_ERROR, "%s: freeing the new allocation failed: %s", fn,
                    gm_last_error_message());
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory", fn);
    }
    if (spare == NULL) {
        gm__lock_take(&ctx->queue.lock);
        block_list(ctx, block, memory, mem);
        gm__lock_give(&ctx->queue.lock);
    }
    block->entry = *mem; /* private until the buffer's last reference goes */
    block->entry.pooled = true;
    *block_p = block;
    return GM_OK;
}

/*
 * Allocate `bytes` (0: none) of `memory` kind and get a listed block for
 * them; the caller fills the block's descriptor (finish_view).
 */
static gm_status block_create(gm_context *ctx, const char *fn, gm_memory_kind memory,
                              unsigned host_flags, int64_t bytes, array_block **block_p)
{
    static const gm__dealloc_entry empty; /* copied: cheaper than memset's rep stos */
    gm__dealloc_entry mem = empty;
    gm_status status = GM_OK;

    mem.kind = dealloc_kind(memory);
    if (bytes > 0)
        status = allocate_memory(ctx, fn, memory, host_flags, (size_t)bytes, &mem);
    if (status == GM_OK)
        status = block_publish(ctx, fn, memory, &mem, block_p);
    return status;
}

/* Point a new array's descriptor (layout in place, extent [lo, hi)) at its memory. */
static gm_array *finish_view(array_block *block, gm_memory_kind memory, int64_t lo)
{
    gm_ndview *v = &block->array.view;
    gm_context *ctx = block->buffer.ctx;

    v->data = (void *)block->buffer.base;
    v->offset = block->buffer.bytes > 0 ? -lo : 0;
    v->memory = (int32_t)memory;
    v->device_id = memory == GM_MEMORY_HOST || memory == GM_MEMORY_PINNED ? -1 : ctx->device_id;
    return &block->array;
}

/*
 * The last reference to `buffer` went and its entry (if any) is not queued
 * yet: free its memory at once or queue it, then free the buffer or hand its
 * block back. Nothing of the buffer is touched once the entry is queued.
 */
static void buffer_last(gm__buffer *buffer)
{
    gm_context *ctx = buffer->ctx;
    gm__dealloc_entry *entry = buffer->entry;
    gm__dealloc_entry *block = buffer->block;

    if (entry != NULL)
        gm__dealloc_release(ctx, entry);
    if (block == NULL)
        gm__free(buffer);
    else if (entry == NULL)
        gm__dealloc_pool_put(ctx, block);
}

/*
 * Drop one reference; true when it was the last. A count of 1 is the
 * caller's own reference, which nobody else can copy or drop meanwhile, so
 * the atomic read-modify-write is skipped then (the count is not written:
 * the object is finished or reinitialized by the caller).
 */
static bool ref_drop_last(_Atomic int64_t *refcount)
{
    return atomic_load_explicit(refcount, memory_order_acquire) == 1 ||
           atomic_fetch_sub_explicit(refcount, 1, memory_order_acq_rel) == 1;
}

/* Drop a reference to a buffer that no listed array of the caller holds. */
static void buffer_unref(gm__buffer *buffer)
{
    if (ref_drop_last(&buffer->refcount))
        buffer_last(buffer);
}

/*
 * An array's last reference went: unlist it and drop its buffer reference
 * under one queue lock, queueing the memory in it when that was the last
 * reference (the array leaves the list no later than its buffer's count
 * reaches 0, so a block is never recycled while its array is listed).
 */
static void array_drop(gm_array *array)
{
    gm_context *ctx = array->ctx;
    gm__buffer *buffer = array->buffer;
    gm__dealloc_entry *entry = buffer->entry;
    bool queue = entry != NULL && gm__dealloc_would_queue(entry);
    bool in_block = array->in_block, alone = buffer->block == NULL, last = false, due = false;
    bool kept = true;
    /* A block's entry that may wait long goes as a copy, its block back to the pool at once
     * (gm__dealloc_copy_wanted); a reference count above 1 or no memory: the entry itself. */
    gm__dealloc_entry *copy =
        queue && entry == buffer->block && entry->bookkeeping == NULL &&
                atomic_load_explicit(&buffer->refcount, memory_order_acquire) == 1 &&
                gm__dealloc_copy_wanted(&ctx->queue)
            ? gm__malloc(sizeof(*copy))
            : NULL;

    gm__lock_take(&ctx->queue.lock);
    gm__list_unlink(&array->link); /* the array is relisted or freed next */
    last = ref_drop_last(&buffer->refcount);
    if (last && queue && copy != NULL) {
        due = gm__dealloc_push_copy_locked(&ctx->queue, entry, copy, &kept);
        copy = NULL;
    } else if (last && queue) {
        due = gm__dealloc_push_locked(&ctx->queue, entry);
    }
    gm__lock_give(&ctx->queue.lock);
    gm__free(copy); /* not used */
    if (!kept)
        gm__dealloc_block_free(entry);
    if (due)
        gm__dealloc_flush_due(ctx);
    if (last && queue && alone)
        gm__free(buffer);
    else if (last && !queue)
        buffer_last(buffer);
    if (!in_block)
        gm__free(array);
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
    array->view.reserved = 0; /* ndview.h: gpumem writes zero there */
    atomic_init(&array->refcount, 1);
    gm__lock_take(&ctx->queue.lock);
    gm__list_push(buffer->named ? &ctx->arrays_named : &ctx->arrays, &array->link);
    gm__lock_give(&ctx->queue.lock);
    *array_p = array;
    return GM_OK;
}

/* Allocate the layout's byte extent and wrap it in a new array. */
gm_status gm__array_create(gm_context *ctx, const char *fn, const gm_ndview *layout,
                           gm_memory_kind memory, unsigned host_flags, gm_array **array_p)
{
    gm_ndview view = *layout;
    array_block *block = NULL;
    int64_t lo = 0, hi = 0;
    gm_status status = GM_OK;

    view.data = NULL;
    view.offset = 0;
    status = gm__validate_extent(fn, &view, &lo, &hi);
    if (status == GM_OK)
        status = block_create(ctx, fn, memory, host_flags, hi - lo, &block);
    if (status != GM_OK)
        return status;
    if (memory == GM_MEMORY_MAPPED && block->buffer.bytes > 0) {
        /* its device address, for gm_pointer_kind (registry_kind) however the caller gets it
         * (gm_array_device_view, gm_map, a kernel argument): on CUDA write-combined memory
         * has one of its own. Memory the backend does not know (a memory manager's) has
         * none to find here: left 0, without an error. */
        uint64_t mark = gm__error_mark();
        gm_devptr dev = 0;

        if (ctx->ops->host_device_pointer(ctx->bctx, (void *)block->buffer.base, &dev) == GM_OK)
            atomic_store(&block->buffer.device, (uintptr_t)dev);
        else
            gm__error_back_to(mark);
    }
    view_assign(&block->array.view, &view);
    *array_p = finish_view(block, memory, lo);
    return GM_OK;
}

/*
 * A pooled block's entry for device memory at ptr, written in place (the
 * entry is private until the buffer's last reference goes; its next is
 * written when it is queued or pooled, and its pooled flag and unused slots
 * never change: block_init).
 */
static void device_entry(gm__dealloc_entry *e, gm_devptr ptr, int64_t bytes, void *owner,
                         bool immediate)
{
    e->kind = GM__DEALLOC_DEVICE;
    e->device = ptr;
    e->handle = NULL;
    e->bytes = bytes;
    e->owner = owner;
    e->immediate = immediate;
}

/*
 * The common case of gm_device_array: device memory of at least one byte
 * from the built-in manager, whose slots would only forward to the backend.
 * The backend is called directly (a failure takes gm__alloc_device's
 * out-of-memory rule from there), a pooled block is taken and listed under
 * one queue lock, and its entry is written in place instead of copied.
 */
static gm_status device_block_direct(gm_context *ctx, const char *fn, int64_t nbytes,
                                     array_block **block_p)
{
    gm__dealloc_entry *spare = NULL;
    array_block *block = NULL;
    gm_devptr ptr = 0;
    void *owner = NULL;
    uint64_t mark = gm__error_mark();
    gm_status status = ctx->ops->mem_alloc(ctx->bctx, (size_t)nbytes, &ptr);

    if (status != GM_OK)
        status = gm__alloc_device_failed(ctx, status, mark, (size_t)nbytes, &ptr, &owner);
    if (status == GM_OK && ptr == 0)
        status = gm__error(GM_ERR_INTERNAL,
                           "memory manager 'builtin': memalloc of %" PRId64
                           " bytes returned GM_OK and no address",
                           nbytes);
    if (status != GM_OK)
        return gm__error_within(fn, status);
    gm__lock_take(&ctx->queue.lock);
    spare = gm__dealloc_pool_take_locked(&ctx->queue);
    if (spare != NULL) {
        block = GM__CONTAINER_OF(spare, array_block, entry);
        block_list_at(ctx, block, GM_MEMORY_DEVICE, (uintptr_t)ptr, nbytes, false);
    }
    gm__lock_give(&ctx->queue.lock);
    if (block == NULL) {
        static const gm__dealloc_entry empty;
        gm__dealloc_entry mem = empty;

        mem.kind = GM__DEALLOC_DEVICE;
        mem.device = ptr;
        mem.bytes = nbytes;
        mem.owner = owner;
        mem.immediate = !ctx->mm.defer_device;
        return block_publish(ctx, fn, GM_MEMORY_DEVICE, &mem, block_p);
    }
    device_entry(&block->entry, ptr, nbytes, owner, !ctx->mm.defer_device);
    *block_p = block;
    return GM_OK;
}

/*
 * gm_ndview_init(NULL, dtype, ndim, shape, NULL, order) then
 * gm__array_create, with the same results and errors, but building the
 * descriptor in place (order is GM_ORDER_C or GM_ORDER_F). Inlined into
 * gm_device_array, its one caller, whose common case it is.
 */
static inline __attribute__((always_inline)) gm_status
array_create_contiguous(gm_context *ctx, const char *fn, gm_dtype dtype, int ndim,
                        const int64_t *shape, gm_order order, gm_memory_kind memory,
                        unsigned host_flags, gm_array **array_p)
{
    int64_t itemsize = gm__dtype_bytes(dtype);
    array_block *block = NULL;
    gm_ndview layout;
    int64_t nbytes = 0;
    gm_status status = GM_OK;

    if (!contiguous_fits(itemsize, ndim, shape, &nbytes)) {
        status = gm__ndview_init(fn, NULL, dtype, ndim, shape, NULL, order, &layout);
        if (status == GM_OK)
            status = gm__array_create(ctx, fn, &layout, memory, host_flags, array_p);
        return status;
    }
    if (memory == GM_MEMORY_DEVICE && nbytes > 0 && ctx->mm.direct_device)
        status = device_block_direct(ctx, fn, nbytes, &block);
    else
        status = block_create(ctx, fn, memory, host_flags, nbytes, &block);
    if (status != GM_OK)
        return status;
    view_contiguous(&block->array.view, dtype, itemsize, ndim, shape, order);
    *array_p = finish_view(block, memory, 0);
    return GM_OK;
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
    buffer->named = true; /* the backend may not know foreign memory */
    buffer->base = (uintptr_t)view->data + (uintptr_t)lo;
    buffer->bytes = hi - lo;
    buffer->entry = entry;
    buffer->block = NULL;
    atomic_init(&buffer->refcount, 1);
    atomic_init(&buffer->device, 0);
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

    /* both lists: the plain one first */
    while (!gm__list_empty(&ctx->arrays) || !gm__list_empty(&ctx->arrays_named)) {
        gm__link *list = !gm__list_empty(&ctx->arrays) ? &ctx->arrays : &ctx->arrays_named;
        gm_array *array = GM__CONTAINER_OF(list->next, gm_array, link);
        gm__buffer *buffer = array->buffer;

        gm__list_remove(&array->link);
        arrays++;
        if (atomic_load(&buffer->refcount) == 1) {
            buffers++;
            bytes += buffer->bytes;
        }
        if (!array->in_block)
            gm__free(array);
        buffer_unref(buffer); /* may hand back the block holding `array` */
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
    gm_status status = gm__check_context(fn, ctx);

    if (status != GM_OK)
        return status;
    if (array_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: array_p is NULL", fn);
    if (order != GM_ORDER_C && order != GM_ORDER_F)
        return gm__error(GM_ERR_INVALID_ARG, "%s: order must be 'C' or 'F', got %d", fn,
                         (int)order);
    return array_create_contiguous(ctx, fn, dtype, ndim, shape, order, GM_MEMORY_DEVICE, 0,
                                   array_p);
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
    status = gm__ndview_init(fn, NULL, dtype, ndim, shape, strides, GM_ORDER_C, &layout);
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
        status = gm__sync_allowed(fn, stream);
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
    if (!ref_drop_last(&array->refcount))
        return;
    array_drop(array);
}

/* Whether `view` addresses only bytes of the buffer (a size-0 view addresses none). */
static gm_status check_inside(const char *fn, const gm__buffer *buffer, const gm_ndview *view)
{
    int64_t lo = 0, hi = 0;
    uint64_t start = 0, end = 0;
    gm_status status = gm_ndview_extent(view, &lo, &hi);

    if (status != GM_OK || gm_ndview_size(view) == 0) /* an empty view addresses no byte */
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
        status = gm__ndview_reshape(fn, &array->view, ndim, shape, order, &view);
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
        status = gm__ndview_ravel(fn, &array->view, order, &view);
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
        status = gm__ndview_getitem(fn, &array->view, nitems, items, &view);
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

/* Whether two descriptors have one shape (an ndim out of range counts as equal: gm__copy
 * refuses it). */
static bool same_shape(const gm_ndview *a, const gm_ndview *b)
{
    return a->ndim == b->ndim &&
           (a->ndim <= 0 || a->ndim > GM_MAX_DIMS ||
            memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof(int64_t)) == 0);
}

/*
 * The copies of Numba's copy_to_host(ary) / copy_to_device(ary), whose check
 * (check_array_compatibility) compares the shapes with their axes of extent 1
 * squeezed out: two such sides are copied as their squeezed views; any other
 * pair goes to gm__copy as it is (its checks and messages name the shapes
 * given).
 */
static gm_status copy_compatible(const char *fn, gm_context *ctx, const gm_ndview *dst,
                                 const gm_ndview *src, gm_stream *stream)
{
    gm_ndview d, s;

    if (dst != NULL && src != NULL && !same_shape(dst, src) && gm__validate(fn, dst) == GM_OK &&
        gm__validate(fn, src) == GM_OK && gm_ndview_squeeze(dst, 0, NULL, &d) == GM_OK &&
        gm_ndview_squeeze(src, 0, NULL, &s) == GM_OK && same_shape(&d, &s))
        return gm__copy(fn, ctx, &d, &s, stream);
    return gm__copy(fn, ctx, dst, src, stream);
}

/* Device array into an existing descriptor (any layout). */
gm_status gm_array_copy_to_host(gm_array *array, const gm_ndview *host, gm_stream *stream)
{
    static const char fn[] = "gm_array_copy_to_host";
    gm_status status = gm__check_array(fn, array, NULL);

    if (status != GM_OK)
        return status;
    return copy_compatible(fn, array->ctx, host, &array->view, stream);
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
        status = gm__sync_allowed(fn, stream);
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
    return copy_compatible(fn, array->ctx, &array->view, src, stream);
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
