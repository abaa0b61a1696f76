/*
 * DLPack export and import (gpumem/dlpack.h).
 *
 * Export: one bookkeeping allocation holds the DLManagedTensorVersioned, its
 * shape and strides, and a reference to the array, which the deleter
 * releases; manager_ctx points at that block. Live exports are listed in
 * their context, so that context teardown can detach them (see
 * gm__dlpack_detach_exports). Import: the DLTensor is turned into a
 * descriptor (element strides to bytes, byte_offset as the descriptor's
 * offset, the DLDevice to a memory kind) and wrapped by
 * gm_array_from_foreign(), whose release callback calls the producer's
 * deleter.
 */
#include <inttypes.h>
#include <string.h>

#include "gpumem/dlpack.h"
#include "ndview_internal.h"
#include "runtime_internal.h"

/*
 * The exported tensor followed by its shape and strides (2 x ndim).
 *
 * Detach protocol: the deleter may run on any thread, during or after the
 * context's teardown, and a consumer cannot know the context died. One
 * process-wide lock, which outlives every context, guards every context's
 * export list and the blocks' link, array and deleting fields:
 *   - the deleter takes `array` under the lock and, if it was still attached,
 *     sets `deleting`, releases the array outside the lock (the release may
 *     flush the queue and run other deleters), then unlinks the block under
 *     the lock and wakes a waiting teardown;
 *   - teardown, under the lock, unlinks every block not being deleted and
 *     clears its `array` (detached: its deleter frees only the block), then
 *     waits until the deleters in progress have unlinked theirs. The context
 *     is thus alive for as long as any deleter uses it.
 */
typedef struct export_block {
    gm__link link;   /* in ctx->exports while attached */
    gm_array *array; /* the reference the export holds; NULL once detached */
    bool deleting;   /* a deleter is releasing `array` */
    DLManagedTensorVersioned tensor;
    int64_t dims[];
} export_block;

static pthread_mutex_t export_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t export_unlinked = PTHREAD_COND_INITIALIZER; /* a deleter unlinked a block */

/* ---------------------------------------------------------------- export */

/* DLDevice of an array: see gpumem/dlpack.h for the mapping. */
static DLDevice export_device(const gm_array *array)
{
    gm_backend_kind backend = array->ctx->ops->kind;
    int32_t memory = array->view.memory;
    bool device = memory == GM_MEMORY_DEVICE || memory == GM_MEMORY_MANAGED;
    DLDevice dev = {kDLCPU, 0};

    if (backend == GM_BACKEND_HOST || memory == GM_MEMORY_HOST)
        return dev;
    if (backend == GM_BACKEND_CUDA)
        dev.device_type = memory == GM_MEMORY_DEVICE    ? kDLCUDA
                          : memory == GM_MEMORY_MANAGED ? kDLCUDAManaged
                                                        : kDLCUDAHost;
    else if (backend == GM_BACKEND_HSA)
        dev.device_type = device ? kDLROCM : kDLROCMHost;
    if (dev.device_type == kDLCUDA || dev.device_type == kDLROCM)
        dev.device_id = array->ctx->device_id;
    return dev;
}

/* Element strides of a descriptor; a byte stride that is not a multiple of the item size
 * (on an axis longer than 1) cannot be expressed. */
static gm_status export_strides(const char *fn, const gm_ndview *v, int64_t *strides)
{
    int64_t itemsize = gm_ndview_itemsize(v);

    for (int i = 0; i < v->ndim; i++) {
        if (v->strides[i] % itemsize != 0 && v->shape[i] > 1)
            return gm__error(GM_ERR_INVALID_ARG,
                             "%s: stride %" PRId64 " of axis %d is not a multiple of the item "
                             "size %" PRId64 "; DLPack strides count elements",
                             fn, v->strides[i], i, itemsize);
        strides[i] = v->strides[i] / itemsize;
    }
    return GM_OK;
}

/*
 * Release the exported array's reference and free the block; after the
 * context's teardown detached the export, only free the block.
 */
static void export_deleter(DLManagedTensorVersioned *self)
{
    export_block *block = self->manager_ctx;
    gm_array *array = NULL;

    pthread_mutex_lock(&export_lock);
    array = block->array;
    block->array = NULL;
    block->deleting = array != NULL;
    pthread_mutex_unlock(&export_lock);
    if (array != NULL) {
        gm_array_release(&array);
        pthread_mutex_lock(&export_lock);
        gm__list_remove(&block->link);
        pthread_cond_broadcast(&export_unlinked);
        pthread_mutex_unlock(&export_lock);
    }
    gm__free(block);
}

/* Attach an export to its array's context. */
static void export_attach(export_block *block, gm_array *array)
{
    block->array = gm_array_retain(array);
    pthread_mutex_lock(&export_lock);
    gm__list_push(&array->ctx->exports, &block->link);
    pthread_mutex_unlock(&export_lock);
}

/* Context teardown: detach the exports (the protocol is at export_block). */
int64_t gm__dlpack_detach_exports(gm_context *ctx)
{
    int64_t detached = 0;
    gm__link *link = NULL, *next = NULL;

    pthread_mutex_lock(&export_lock);
    for (link = ctx->exports.next; link != &ctx->exports; link = next) {
        export_block *block = GM__CONTAINER_OF(link, export_block, link);

        next = link->next;
        if (block->deleting)
            continue;
        gm__list_remove(link);
        block->array = NULL; /* its reference goes with the context's live arrays */
        detached++;
    }
    while (!gm__list_empty(&ctx->exports))
        pthread_cond_wait(&export_unlinked, &export_lock);
    pthread_mutex_unlock(&export_lock);
    return detached;
}

/* Fill the DLTensor of an exported array (shape and strides point into the block). */
static void export_fill(export_block *block, gm_array *array, DLDevice dev)
{
    const gm_ndview *v = &array->view;
    DLTensor *t = &block->tensor.dl_tensor;

    memcpy(block->dims, v->shape, (size_t)v->ndim * sizeof(int64_t));
    t->device = dev;
    t->ndim = v->ndim;
    t->dtype.code = v->dtype.code;
    t->dtype.bits = v->dtype.bits;
    t->dtype.lanes = v->dtype.lanes;
    t->shape = block->dims;
    t->strides = block->dims + v->ndim;
    if (gm_ndview_size(v) > 0) {
        t->data = (void *)array->buffer->base;
        t->byte_offset =
            (uint64_t)((uintptr_t)v->data + (uintptr_t)v->offset - array->buffer->base);
    }
}

/* Export without copying: the tensor holds a reference to the array. */
gm_status gm_array_to_dlpack(gm_array *array, DLManagedTensorVersioned **tensor_p)
{
    static const char fn[] = "gm_array_to_dlpack";
    export_block *block = NULL;
    size_t dims = 0;
    gm_status status = gm__check_array(fn, array, NULL);

    if (status == GM_OK && tensor_p == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: tensor_p is NULL", fn);
    if (status != GM_OK)
        return status;
    dims = 2 * (size_t)array->view.ndim;
    block = gm__calloc(1, sizeof(*block) + dims * sizeof(int64_t));
    if (block == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory", fn);
    status = export_strides(fn, &array->view, block->dims + array->view.ndim);
    if (status != GM_OK) {
        gm__free(block);
        return status;
    }
    export_fill(block, array, export_device(array));
    block->tensor.version.major = DLPACK_MAJOR_VERSION;
    block->tensor.version.minor = 0;
    block->tensor.manager_ctx = block;
    block->tensor.deleter = export_deleter;
    block->tensor.flags = 0;
    export_attach(block, array);
    *tensor_p = &block->tensor;
    return GM_OK;
}

/* ---------------------------------------------------------------- import */

/*
 * A GPU device type of the context's backend: check the ordinal of device
 * memory (pinned and managed memory carry 0, dlpack.h: they belong to no
 * one device).
 */
static gm_status import_gpu(const char *fn, const gm_context *ctx, DLDevice dev,
                            gm_backend_kind needs, int32_t memory, gm_ndview *out)
{
    if (ctx->ops->kind != needs)
        return gm__error(GM_ERR_UNSUPPORTED,
                         "%s: DLPack device type %d needs the %s backend; the context runs %s", fn,
                         (int)dev.device_type, gm_backend_name(needs),
                         gm_backend_name(ctx->ops->kind));
    if (memory == GM_MEMORY_DEVICE && dev.device_id != ctx->device_id)
        return gm__error(GM_ERR_WRONG_CONTEXT,
                         "%s: the tensor is on device %" PRId32 ", the context on device %" PRId32,
                         fn, dev.device_id, ctx->device_id);
    out->memory = memory;
    out->device_id = memory == GM_MEMORY_PINNED ? -1 : ctx->device_id;
    return GM_OK;
}

/* kDLCPU: host memory; on the simulator, whatever kind of its memory the pointer is in. */
static gm_status import_cpu(gm_context *ctx, gm_ndview *out)
{
    gm_memory_kind kind = GM_MEMORY_HOST;
    gm_status status = GM_OK;

    if (ctx->ops->kind == GM_BACKEND_HOST && gm_ndview_size(out) > 0)
        status = gm_pointer_kind(ctx, (const char *)out->data + out->offset, &kind);
    if (status != GM_OK)
        return status;
    out->memory = (int32_t)kind;
    out->device_id = kind == GM_MEMORY_HOST || kind == GM_MEMORY_PINNED ? -1 : ctx->device_id;
    return GM_OK;
}

/* The memory kind and device of a DLDevice (see gpumem/dlpack.h). */
static gm_status import_device(const char *fn, gm_context *ctx, DLDevice dev, gm_ndview *out)
{
    bool on_host = ctx->ops->kind == GM_BACKEND_HOST;

    switch (dev.device_type) {
    case kDLCPU:
        return import_cpu(ctx, out);
    case kDLCUDA:
        return import_gpu(fn, ctx, dev, GM_BACKEND_CUDA, GM_MEMORY_DEVICE, out);
    case kDLCUDAManaged:
        return import_gpu(fn, ctx, dev, GM_BACKEND_CUDA, GM_MEMORY_MANAGED, out);
    case kDLCUDAHost:
        return import_gpu(fn, ctx, dev, on_host ? GM_BACKEND_HOST : GM_BACKEND_CUDA,
                          GM_MEMORY_PINNED, out);
    case kDLROCM:
        return import_gpu(fn, ctx, dev, GM_BACKEND_HSA, GM_MEMORY_DEVICE, out);
    case kDLROCMHost:
        return import_gpu(fn, ctx, dev, on_host ? GM_BACKEND_HOST : GM_BACKEND_HSA,
                          GM_MEMORY_PINNED, out);
    default:
        break;
    }
    return gm__error(GM_ERR_UNSUPPORTED, "%s: DLPack device type %d is not supported", fn,
                     (int)dev.device_type);
}

/* Byte strides from element strides (NULL stays NULL: C-contiguous). */
static gm_status import_strides(const char *fn, const DLTensor *t, int64_t itemsize,
                                int64_t *strides)
{
    for (int i = 0; i < t->ndim; i++) {
        if (gm__mul_overflow(t->strides[i], itemsize, &strides[i]))
            return gm__error(GM_ERR_OVERFLOW,
                             "%s: stride %" PRId64 " of axis %d overflows in bytes", fn,
                             t->strides[i], i);
    }
    return GM_OK;
}

/* A descriptor for a DLTensor. */
static gm_status import_view(const char *fn, gm_context *ctx, const DLTensor *t, gm_ndview *out)
{
    gm_dtype dtype = {t->dtype.code, t->dtype.bits, t->dtype.lanes};
    int64_t strides[GM_MAX_DIMS];
    gm_status status = gm__check_ndim(fn, t->ndim);

    if (status == GM_OK && !gm_dtype_is_valid(dtype))
        status = gm__error(GM_ERR_DTYPE,
                           "%s: DLPack dtype {code %u, bits %u, lanes %u} is not "
                           "supported",
                           fn, t->dtype.code, t->dtype.bits, t->dtype.lanes);
    if (status == GM_OK && t->ndim > 0 && t->shape == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: dl_tensor.shape is NULL", fn);
    if (status == GM_OK && t->strides != NULL)
        status = import_strides(fn, t, (int64_t)gm_dtype_itemsize(dtype), strides);
    if (status == GM_OK && t->byte_offset > (uint64_t)INT64_MAX)
        status = gm__error(GM_ERR_OVERFLOW, "%s: byte_offset %" PRIu64 " is too large", fn,
                           t->byte_offset);
    if (status == GM_OK)
        status = gm__ndview_init(fn, t->data, dtype, t->ndim, t->shape,
                                 t->strides != NULL ? strides : NULL, GM_ORDER_C, out);
    if (status != GM_OK)
        return status;
    out->offset = (int64_t)t->byte_offset;
    return import_device(fn, ctx, t->device, out);
}

/* NULL checks of the import calls. */
static gm_status check_import(const char *fn, const gm_context *ctx, const void *tensor,
                              gm_array **array_p)
{
    gm_status status = gm__check_context(fn, ctx);

    if (status == GM_OK && (tensor == NULL || array_p == NULL))
        status = gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn,
                           tensor == NULL ? "tensor" : "array_p");
    return status;
}

/* Release callback of a versioned import: the producer's deleter. */
static void release_versioned(void *user)
{
    DLManagedTensorVersioned *tensor = user;

    tensor->deleter(tensor);
}

/* Release callback of a legacy import. */
static void release_legacy(void *user)
{
    DLManagedTensor *tensor = user;

    tensor->deleter(tensor);
}

/* Import a DLPack 1.x tensor; ownership passes on success. */
gm_status gm_array_from_dlpack(gm_context *ctx, DLManagedTensorVersioned *tensor,
                               gm_array **array_p)
{
    static const char fn[] = "gm_array_from_dlpack";
    gm_ndview view;
    gm_status status = check_import(fn, ctx, tensor, array_p);

    if (status != GM_OK)
        return status;
    if (tensor->version.major != DLPACK_MAJOR_VERSION)
        return gm__error(GM_ERR_VERSION_MISMATCH,
                         "%s: the tensor is DLPack %" PRIu32 ".%" PRIu32
                         "; this library reads major version %d (the caller must call its "
                         "deleter)",
                         fn, tensor->version.major, tensor->version.minor, DLPACK_MAJOR_VERSION);
    if ((tensor->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0)
        return gm__error(GM_ERR_PERMISSION,
                         "%s: the tensor is read-only; gm_array has no read-only mode", fn);
    status = import_view(fn, ctx, &tensor->dl_tensor, &view);
    if (status != GM_OK)
        return status;
    return gm__array_from_foreign(
        fn, ctx, &view, tensor->deleter != NULL ? release_versioned : NULL, tensor, NULL, array_p);
}

/* Import a legacy unversioned tensor; ownership passes on success. */
gm_status gm_array_from_dlpack_legacy(gm_context *ctx, DLManagedTensor *tensor, gm_array **array_p)
{
    static const char fn[] = "gm_array_from_dlpack_legacy";
    gm_ndview view;
    gm_status status = check_import(fn, ctx, tensor, array_p);

    if (status == GM_OK)
        status = import_view(fn, ctx, &tensor->dl_tensor, &view);
    if (status != GM_OK)
        return status;
    return gm__array_from_foreign(fn, ctx, &view, tensor->deleter != NULL ? release_legacy : NULL,
                                  tensor, NULL, array_p);
}
