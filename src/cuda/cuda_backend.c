/*
 * The CUDA backend's lifecycle and its ops table: init loads the driver
 * (cuda_driver.c), initializes it, picks the device and retains its primary
 * context; fini undoes that in reverse. The other ops live in
 * cuda_memory.c, cuda_copy.c, cuda_stream.c and cuda_module.c.
 *
 * Contexts: every gpumem context on a device shares the device's primary
 * context (as the CUDA runtime and Numba do), retained once per gpumem
 * context. Each op of the table runs with it current on the calling thread,
 * so any thread may call in: when the thread has no current context, the
 * primary one is made current and stays so (as the CUDA runtime does); when
 * the caller has another context current (its own, or another device's
 * primary one), the primary one is pushed for the op and popped after it, so
 * the caller's context is current again when the op returns (scoped_*).
 */
#include <string.h>

#include "cuda_internal.h"

gm_status gm__cuda_enter(gm_backend_ctx *bctx)
{
    CUcontext current = NULL;
    gm_status status = GM_CUDA_CALL(&bctx->drv, cuCtxGetCurrent, &current);

    if (status == GM_OK && current != bctx->context)
        status = GM_CUDA_CALL(&bctx->drv, cuCtxSetCurrent, bctx->context);
    return status;
}

CUstream gm__cuda_stream_handle(const gm_backend_stream *stream)
{
    return stream != NULL ? stream->handle : NULL;
}

gm_status gm__cuda_finish_sync(gm_backend_ctx *bctx)
{
    gm_status status = GM_CUDA_CALL(&bctx->drv, cuStreamSynchronize, CU_STREAM_LEGACY);

    if (status == GM_OK)
        gm__cuda_host_calls_seen(bctx);
    return status;
}

/* cuInit, the driver version and the device: NO_DEVICE for every way this fails. */
static gm_status open_device(gm_backend_ctx *bctx, int32_t device_id)
{
    gm_cuda_driver *drv = &bctx->drv;
    int count = 0;

    if (GM_CUDA_CALL(drv, cuInit, 0) != GM_OK)
        return gm__cuda_annotate(GM_ERR_NO_DEVICE, "cuda: the driver did not initialize");
    if (GM_CUDA_CALL(drv, cuDriverGetVersion, &drv->driver_version) != GM_OK ||
        GM_CUDA_CALL(drv, cuDeviceGetCount, &count) != GM_OK)
        return gm__cuda_annotate(GM_ERR_NO_DEVICE, "cuda: cannot count devices");
    if (count <= 0)
        return gm__error(GM_ERR_NO_DEVICE, "cuda: the driver %s reports no CUDA device", drv->path);
    if (device_id < 0 || device_id >= count)
        return gm__error(GM_ERR_NO_DEVICE, "cuda: device %d requested, the driver reports %d",
                         (int)device_id, count);
    if (GM_CUDA_CALL(drv, cuDeviceGet, &bctx->device, (int)device_id) != GM_OK)
        return gm__cuda_annotate(GM_ERR_NO_DEVICE, "cuda: cannot open the device");
    bctx->device_id = device_id;
    return GM_OK;
}

/* Retain the device's primary context (made current by each op's scope). */
static gm_status retain_context(gm_backend_ctx *bctx)
{
    return GM_CUDA_CALL(&bctx->drv, cuDevicePrimaryCtxRetain, &bctx->context, bctx->device);
}

/* How an op's scope found the thread's current context. */
typedef struct cuda_scope {
    bool pushed; /* the caller's context was current: ours was pushed, pop it at the end */
} cuda_scope;

/*
 * Begin an op: ours current for it. No context current: set ours (it stays).
 * Ours already: nothing. Another: push ours (scope_end pops it). Inside a
 * stream callback or host step, where the driver allows no call: refused.
 */
static gm_status scope_begin(gm_backend_ctx *bctx, const char *what, cuda_scope *scope)
{
    CUcontext current = NULL;
    gm_status status = GM_OK;

    scope->pushed = false;
    if (gm__cuda_in_host_call())
        return gm__error(GM_ERR_STATE,
                         "cuda %s: not allowed inside a stream callback (the CUDA driver allows "
                         "no call there)",
                         what);
    status = GM_CUDA_CALL(&bctx->drv, cuCtxGetCurrent, &current);
    if (status != GM_OK || current == bctx->context)
        return status;
    if (current == NULL)
        return GM_CUDA_CALL(&bctx->drv, cuCtxSetCurrent, bctx->context);
    status = GM_CUDA_CALL(&bctx->drv, cuCtxPushCurrent, bctx->context);
    scope->pushed = status == GM_OK;
    return status;
}

/* End an op: pop ours if scope_begin pushed it; the op's status and message are kept. */
static void scope_end(gm_backend_ctx *bctx, const cuda_scope *scope)
{
    CUcontext popped = NULL;

    if (scope->pushed && bctx->drv.cuCtxPopCurrent(&popped) != CUDA_SUCCESS)
        gm__log(GM_LOG_ERROR, "cuda: cannot give the caller its current context back");
}

/*
 * Undo retain_context. The thread's current context is left alone: the
 * primary context is shared by the whole process (the CUDA runtime, Numba,
 * CuPy), so gpumem cannot tell whether the caller made it current, and
 * cuCtxSetCurrent(NULL) would pop the caller's context stack. Releasing
 * never pops it (cuDevicePrimaryCtxRelease), and a later retain reactivates
 * the same handle.
 */
static void release_context(gm_backend_ctx *bctx)
{
    if (GM_CUDA_CALL(&bctx->drv, cuDevicePrimaryCtxRelease, bctx->device) != GM_OK)
        gm__log(GM_LOG_WARN, "cuda: releasing the primary context failed: %s",
                gm_last_error_message());
    bctx->context = NULL;
}

/* The integer attributes of the device that gm_device_info and the copies need. */
static gm_status read_attributes(gm_backend_ctx *bctx, int *shared, int *optin, int *pitch)
{
    gm_device_info *info = &bctx->info;
    const struct {
        CUdevice_attribute attribute;
        int *value;
    } attributes[] = {
        {CU_DEVICE_ATTRIBUTE_WARP_SIZE, &info->warp_size},
        {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &info->max_threads_per_block},
        {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info->multiprocessor_count},
        {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, &info->max_block_dim[0]},
        {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, &info->max_block_dim[1]},
        {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, &info->max_block_dim[2]},
        {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, &info->max_grid_dim[0]},
        {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, &info->max_grid_dim[1]},
        {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, &info->max_grid_dim[2]},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, shared},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, optin},
        {CU_DEVICE_ATTRIBUTE_MAX_PITCH, pitch},
    };
    gm_status status = GM_OK;

    for (size_t i = 0; status == GM_OK && i < sizeof(attributes) / sizeof(attributes[0]); i++)
        status = GM_CUDA_CALL(&bctx->drv, cuDeviceGetAttribute, attributes[i].value,
                              attributes[i].attribute, bctx->device);
    return status;
}

/* Fill bctx->info and bctx->max_pitch (cuDeviceGetName, cuDeviceTotalMem, cuDeviceGetAttribute). */
static gm_status read_device_info(gm_backend_ctx *bctx)
{
    gm_device_info *info = &bctx->info;
    size_t total = 0;
    int shared = 0;
    int optin = 0;
    int pitch = 0;
    gm_status status = GM_CUDA_CALL(&bctx->drv, cuDeviceGetName, info->name,
                                    (int)sizeof(info->name), bctx->device);

    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuDeviceTotalMem, &total, bctx->device);
    if (status == GM_OK)
        status = read_attributes(bctx, &shared, &optin, &pitch);
    if (status != GM_OK)
        return status; /* the caller says what failed */
    info->backend = GM_BACKEND_CUDA;
    info->device_id = bctx->device_id;
    info->total_memory = (int64_t)total;
    info->shared_memory_per_block = shared;
    info->shared_memory_per_block_optin = optin; /* the core raises 0 to `shared` */
    bctx->max_pitch = pitch > 0 ? (size_t)pitch : 0;
    return GM_OK;
}

/* init: load, initialize, open the device, retain its primary context, read its properties. */
static gm_status cuda_init(const gm_backend_init_args *args, gm_backend_ctx **bctx_p)
{
    gm_backend_ctx *bctx = NULL;
    gm_status status = GM_OK;

    if (args == NULL || bctx_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "cuda init: args and bctx_p are required");
    bctx = gm__calloc(1, sizeof(*bctx));
    if (bctx == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "cuda init: out of host memory");
    status = gm__cuda_driver_load(&bctx->drv);
    if (status != GM_OK)
        goto free_bctx;
    status = open_device(bctx, args->device_id);
    if (status != GM_OK)
        goto unload_driver;
    /* A device whose context cannot be had is no usable device (GM_BACKEND=auto then falls
     * back to the simulator); the driver's reason stays in the message. */
    status = retain_context(bctx);
    if (status != GM_OK) {
        status = gm__cuda_annotate(GM_ERR_NO_DEVICE, "cuda: cannot use the device's primary "
                                                     "context");
        goto unload_driver;
    }
    status = read_device_info(bctx);
    if (status != GM_OK) {
        status = gm__cuda_annotate(GM_ERR_NO_DEVICE, "cuda: cannot read the device's properties");
        goto release_primary;
    }
    status = gm__cuda_pack_init(bctx);
    if (status != GM_OK)
        goto release_primary;
    gm__cuda_streams_init(bctx);
    gm__log(GM_LOG_INFO, "cuda: device %d \"%s\", driver %s (CUDA %d.%d)", (int)bctx->device_id,
            bctx->info.name, bctx->drv.path, bctx->drv.driver_version / 1000,
            bctx->drv.driver_version % 1000 / 10);
    *bctx_p = bctx;
    return GM_OK;

release_primary:
    release_context(bctx);
unload_driver:
    gm__cuda_driver_unload(&bctx->drv);
free_bctx:
    gm__free(bctx);
    return status;
}

/* fini: release the primary context and close the driver. The core has destroyed the streams. */
static void cuda_fini(gm_backend_ctx *bctx)
{
    cuda_scope scope;

    if (bctx == NULL)
        return;
    /* They still touch bctx (its streams, its count): if some never ran, bctx must stay. */
    if (!gm__cuda_wait_host_calls(bctx, "fini")) {
        gm__log(GM_LOG_ERROR, "cuda fini: the backend context is left allocated (and the driver "
                              "loaded) for the stream callbacks still to run");
        return;
    }
    if (scope_begin(bctx, "fini", &scope) == GM_OK)
        gm__cuda_pack_fini(bctx);
    scope_end(bctx, &scope);
    gm__cuda_streams_fini(bctx);
    release_context(bctx);
    gm__cuda_driver_unload(&bctx->drv);
    gm__free(bctx);
}

static gm_status cuda_device_info(gm_backend_ctx *bctx, gm_device_info *info_p)
{
    *info_p = bctx->info;
    return GM_OK;
}

static gm_status cuda_mem_info(gm_backend_ctx *bctx, int64_t *free_p, int64_t *total_p)
{
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    gm_status status = gm__cuda_enter(bctx);

    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuMemGetInfo, &free_bytes, &total_bytes);
    if (status != GM_OK)
        return status;
    *free_p = (int64_t)free_bytes;
    *total_p = (int64_t)total_bytes;
    return GM_OK;
}

/*
 * The ops that reach the driver, each run inside a scope (scope_begin /
 * scope_end above): scoped_NAME calls NAME with the primary context current
 * and the caller's current context restored after.
 */
#define SCOPED(name, impl, params, args)                     \
    static gm_status scoped_##name params                    \
    {                                                        \
        cuda_scope scope;                                    \
        gm_status status = scope_begin(bctx, #name, &scope); \
                                                             \
        if (status == GM_OK)                                 \
            status = impl args;                              \
        scope_end(bctx, &scope);                             \
        return status;                                       \
    }
SCOPED(mem_info, cuda_mem_info, (gm_backend_ctx * bctx, int64_t *free_p, int64_t *total_p),
       (bctx, free_p, total_p))
SCOPED(mem_alloc, gm__cuda_mem_alloc, (gm_backend_ctx * bctx, size_t bytes, gm_devptr *ptr_p),
       (bctx, bytes, ptr_p))
SCOPED(mem_free, gm__cuda_mem_free, (gm_backend_ctx * bctx, gm_devptr ptr), (bctx, ptr))
SCOPED(host_alloc, gm__cuda_host_alloc,
       (gm_backend_ctx * bctx, size_t bytes, unsigned flags, void **ptr_p),
       (bctx, bytes, flags, ptr_p))
SCOPED(host_free, gm__cuda_host_free, (gm_backend_ctx * bctx, void *ptr), (bctx, ptr))
SCOPED(host_device_pointer, gm__cuda_host_device_pointer,
       (gm_backend_ctx * bctx, void *host, gm_devptr *ptr_p), (bctx, host, ptr_p))
SCOPED(host_register, gm__cuda_host_register,
       (gm_backend_ctx * bctx, void *ptr, size_t bytes, unsigned flags), (bctx, ptr, bytes, flags))
SCOPED(host_unregister, gm__cuda_host_unregister, (gm_backend_ctx * bctx, void *ptr), (bctx, ptr))
SCOPED(managed_alloc, gm__cuda_managed_alloc,
       (gm_backend_ctx * bctx, size_t bytes, gm_devptr *ptr_p), (bctx, bytes, ptr_p))
SCOPED(pointer_kind, gm__cuda_pointer_kind, (gm_backend_ctx * bctx, const void *ptr, int *kind_p),
       (bctx, ptr, kind_p))
SCOPED(copy, gm__cuda_copy,
       (gm_backend_ctx * bctx, const gm_copy_desc *desc, gm_backend_stream *stream),
       (bctx, desc, stream))
SCOPED(copy_strided, gm__cuda_copy_strided,
       (gm_backend_ctx * bctx, const gm_ndview *dst, const gm_ndview *src,
        gm_backend_stream *stream),
       (bctx, dst, src, stream))
SCOPED(memset, gm__cuda_memset,
       (gm_backend_ctx * bctx, gm_devptr dst, const void *pattern, size_t pattern_bytes,
        size_t count, gm_backend_stream *stream),
       (bctx, dst, pattern, pattern_bytes, count, stream))
SCOPED(stream_create, gm__cuda_stream_create,
       (gm_backend_ctx * bctx, unsigned flags, gm_backend_stream **stream_p),
       (bctx, flags, stream_p))
SCOPED(stream_destroy, gm__cuda_stream_destroy, (gm_backend_ctx * bctx, gm_backend_stream *stream),
       (bctx, stream))
SCOPED(stream_synchronize, gm__cuda_stream_synchronize,
       (gm_backend_ctx * bctx, gm_backend_stream *stream), (bctx, stream))
SCOPED(stream_query, gm__cuda_stream_query, (gm_backend_ctx * bctx, gm_backend_stream *stream),
       (bctx, stream))
SCOPED(stream_add_callback, gm__cuda_stream_add_callback,
       (gm_backend_ctx * bctx, gm_backend_stream *stream, gm_backend_callback_fn fn, void *user),
       (bctx, stream, fn, user))
SCOPED(stream_enqueue_host, gm__cuda_stream_enqueue_host,
       (gm_backend_ctx * bctx, gm_backend_stream *stream, gm_backend_host_work_fn fn, void *user,
        void (*cleanup)(void *user)),
       (bctx, stream, fn, user, cleanup))
SCOPED(device_synchronize, gm__cuda_device_synchronize, (gm_backend_ctx * bctx), (bctx))
SCOPED(event_create, gm__cuda_event_create,
       (gm_backend_ctx * bctx, unsigned timing, gm_backend_event **event_p),
       (bctx, timing, event_p))
SCOPED(event_destroy, gm__cuda_event_destroy, (gm_backend_ctx * bctx, gm_backend_event *event),
       (bctx, event))
SCOPED(event_record, gm__cuda_event_record,
       (gm_backend_ctx * bctx, gm_backend_event *event, gm_backend_stream *stream),
       (bctx, event, stream))
SCOPED(stream_wait_event, gm__cuda_stream_wait_event,
       (gm_backend_ctx * bctx, gm_backend_stream *stream, gm_backend_event *event),
       (bctx, stream, event))
SCOPED(event_query, gm__cuda_event_query, (gm_backend_ctx * bctx, gm_backend_event *event),
       (bctx, event))
SCOPED(event_synchronize, gm__cuda_event_synchronize,
       (gm_backend_ctx * bctx, gm_backend_event *event), (bctx, event))
SCOPED(event_elapsed, gm__cuda_event_elapsed,
       (gm_backend_ctx * bctx, gm_backend_event *start, gm_backend_event *end, float *ms_p),
       (bctx, start, end, ms_p))
SCOPED(ipc_get_handle, gm__cuda_ipc_get_handle,
       (gm_backend_ctx * bctx, gm_devptr ptr, void *handle, size_t handle_bytes),
       (bctx, ptr, handle, handle_bytes))
SCOPED(ipc_open, gm__cuda_ipc_open,
       (gm_backend_ctx * bctx, const void *handle, size_t handle_bytes, gm_devptr *ptr_p),
       (bctx, handle, handle_bytes, ptr_p))
SCOPED(ipc_close, gm__cuda_ipc_close, (gm_backend_ctx * bctx, gm_devptr ptr), (bctx, ptr))
SCOPED(module_load, gm__cuda_module_load,
       (gm_backend_ctx * bctx, gm_image_kind kind, const void *image, size_t bytes,
        gm_backend_module **module_p),
       (bctx, kind, image, bytes, module_p))
SCOPED(module_unload, gm__cuda_module_unload, (gm_backend_ctx * bctx, gm_backend_module *module),
       (bctx, module))
SCOPED(module_get_kernel, gm__cuda_module_get_kernel,
       (gm_backend_ctx * bctx, gm_backend_module *module, const char *name,
        gm_backend_kernel **kernel_p),
       (bctx, module, name, kernel_p))
SCOPED(module_get_global, gm__cuda_module_get_global,
       (gm_backend_ctx * bctx, gm_backend_module *module, const char *name, gm_devptr *ptr_p,
        size_t *bytes_p),
       (bctx, module, name, ptr_p, bytes_p))
SCOPED(kernel_attrs, gm__cuda_kernel_attrs,
       (gm_backend_ctx * bctx, gm_backend_kernel *kernel, gm_kernel_attrs *attrs_p),
       (bctx, kernel, attrs_p))
SCOPED(launch, gm__cuda_launch,
       (gm_backend_ctx * bctx, gm_backend_kernel *kernel, const gm_launch_config *config,
        void **args, const size_t *arg_sizes, int nargs, gm_backend_stream *stream),
       (bctx, kernel, config, args, arg_sizes, nargs, stream))
#undef SCOPED

const gm_backend_ops gm__cuda_backend = {
    .size = sizeof(gm_backend_ops),
    .abi_version = GM_BACKEND_ABI_VERSION,
    .name = "cuda",
    .kind = GM_BACKEND_CUDA,
    .host_read_at_call = true, /* cuMemcpyHtoDAsync from pageable memory may stage at once */
    .in_driverless_callback = gm__cuda_in_host_call, /* cuStreamAddCallback's rule */
    .init = cuda_init,
    .fini = cuda_fini,
    .device_info = cuda_device_info,
    .mem_info = scoped_mem_info,
    .mem_alloc = scoped_mem_alloc,
    .mem_free = scoped_mem_free,
    .mem_free_batch = gm__unsupported_mem_free_batch,
    .host_alloc = scoped_host_alloc,
    .host_free = scoped_host_free,
    .host_device_pointer = scoped_host_device_pointer,
    .host_register = scoped_host_register,
    .host_unregister = scoped_host_unregister,
    .managed_alloc = scoped_managed_alloc,
    .pointer_kind = scoped_pointer_kind,
    .copy = scoped_copy,
    /* The packing kernel between device-side layouts that no pitched copy expresses;
     * GM_ERR_UNSUPPORTED otherwise, and the core uses pitched copies or staging. */
    .copy_strided = scoped_copy_strided,
    /* Every copy is planned: pitched DMA pieces, the packing kernel or staging. */
    .copy_views = gm__unsupported_copy_views,
    .memset = scoped_memset,
    .stream_create = scoped_stream_create,
    .stream_destroy = scoped_stream_destroy,
    .stream_builtin = gm__cuda_stream_builtin,
    .stream_wrap = gm__cuda_stream_wrap,
    .stream_unwrap = gm__cuda_stream_unwrap,
    .stream_native = gm__cuda_stream_native,
    .stream_synchronize = scoped_stream_synchronize,
    .stream_query = scoped_stream_query,
    .stream_add_callback = scoped_stream_add_callback,
    .stream_enqueue_host = scoped_stream_enqueue_host,
    .device_synchronize = scoped_device_synchronize,
    .event_create = scoped_event_create,
    .event_destroy = scoped_event_destroy,
    .event_record = scoped_event_record,
    .stream_wait_event = scoped_stream_wait_event,
    .event_query = scoped_event_query,
    .event_synchronize = scoped_event_synchronize,
    .event_elapsed = scoped_event_elapsed,
    .module_load = scoped_module_load,
    .module_unload = scoped_module_unload,
    .module_get_kernel = scoped_module_get_kernel,
    .module_get_global = scoped_module_get_global,
    /* The core writes constant memory through module_get_global plus an ordinary
     * host-to-device copy, which is what cuModuleGetGlobal + cuMemcpyHtoD would do. */
    .module_set_global = gm__unsupported_module_set_global,
    .kernel_attrs = scoped_kernel_attrs,
    .launch = scoped_launch,
    .ipc_get_handle = scoped_ipc_get_handle,
    .ipc_open = scoped_ipc_open,
    .ipc_close = scoped_ipc_close,
};
