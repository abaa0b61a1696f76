/*
 * The CUDA backend's lifecycle and its ops table: init loads the driver
 * (cuda_driver.c), initializes it, picks the device and retains its primary
 * context; fini undoes that in reverse. The other ops live in
 * cuda_memory.c, cuda_copy.c, cuda_stream.c and cuda_module.c.
 *
 * Contexts: every gpumem context on a device shares the device's primary
 * context (as the CUDA runtime and Numba do), retained once per gpumem
 * context. Each op first makes it current on the calling thread
 * (gm__cuda_enter), so any thread may call in; it stays current afterwards.
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
    return GM_CUDA_CALL(&bctx->drv, cuStreamSynchronize, CU_STREAM_LEGACY);
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

/* Retain the device's primary context and make it current here. */
static gm_status retain_context(gm_backend_ctx *bctx)
{
    gm_status status =
        GM_CUDA_CALL(&bctx->drv, cuDevicePrimaryCtxRetain, &bctx->context, bctx->device);

    if (status != GM_OK)
        return status;
    status = GM_CUDA_CALL(&bctx->drv, cuCtxSetCurrent, bctx->context);
    if (status != GM_OK) {
        (void)GM_CUDA_CALL(&bctx->drv, cuDevicePrimaryCtxRelease, bctx->device);
        bctx->context = NULL;
    }
    return status;
}

/* Undo retain_context; the calling thread is left with no context if it had ours. */
static void release_context(gm_backend_ctx *bctx)
{
    CUcontext current = NULL;

    if (GM_CUDA_CALL(&bctx->drv, cuCtxGetCurrent, &current) == GM_OK && current == bctx->context)
        (void)GM_CUDA_CALL(&bctx->drv, cuCtxSetCurrent, NULL);
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
        return gm__cuda_annotate(status, "cuda: cannot read the device's properties");
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
    status = retain_context(bctx);
    if (status != GM_OK)
        goto unload_driver;
    status = read_device_info(bctx);
    if (status != GM_OK)
        goto release_primary;
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
    if (bctx == NULL)
        return;
    gm__cuda_wait_host_calls(bctx, "fini"); /* they still touch bctx's streams */
    gm__cuda_pack_fini(bctx);
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

const gm_backend_ops gm__cuda_backend = {
    .size = sizeof(gm_backend_ops),
    .abi_version = GM_BACKEND_ABI_VERSION,
    .name = "cuda",
    .kind = GM_BACKEND_CUDA,
    .init = cuda_init,
    .fini = cuda_fini,
    .device_info = cuda_device_info,
    .mem_info = cuda_mem_info,
    .mem_alloc = gm__cuda_mem_alloc,
    .mem_free = gm__cuda_mem_free,
    .mem_free_batch = gm__unsupported_mem_free_batch,
    .host_alloc = gm__cuda_host_alloc,
    .host_free = gm__cuda_host_free,
    .host_device_pointer = gm__cuda_host_device_pointer,
    .host_register = gm__cuda_host_register,
    .host_unregister = gm__cuda_host_unregister,
    .managed_alloc = gm__cuda_managed_alloc,
    .pointer_kind = gm__cuda_pointer_kind,
    .copy = gm__cuda_copy,
    /* The packing kernel between device-side layouts that no pitched copy expresses;
     * GM_ERR_UNSUPPORTED otherwise, and the core uses pitched copies or staging. */
    .copy_strided = gm__cuda_copy_strided,
    .memset = gm__cuda_memset,
    .stream_create = gm__cuda_stream_create,
    .stream_destroy = gm__cuda_stream_destroy,
    .stream_builtin = gm__cuda_stream_builtin,
    .stream_wrap = gm__cuda_stream_wrap,
    .stream_unwrap = gm__cuda_stream_unwrap,
    .stream_native = gm__cuda_stream_native,
    .stream_synchronize = gm__cuda_stream_synchronize,
    .stream_query = gm__cuda_stream_query,
    .stream_add_callback = gm__cuda_stream_add_callback,
    .stream_enqueue_host = gm__cuda_stream_enqueue_host,
    .device_synchronize = gm__cuda_device_synchronize,
    .event_create = gm__cuda_event_create,
    .event_destroy = gm__cuda_event_destroy,
    .event_record = gm__cuda_event_record,
    .stream_wait_event = gm__cuda_stream_wait_event,
    .event_query = gm__cuda_event_query,
    .event_synchronize = gm__cuda_event_synchronize,
    .event_elapsed = gm__cuda_event_elapsed,
    .module_load = gm__cuda_module_load,
    .module_unload = gm__cuda_module_unload,
    .module_get_kernel = gm__cuda_module_get_kernel,
    .module_get_global = gm__cuda_module_get_global,
    /* The core writes constant memory through module_get_global plus an ordinary
     * host-to-device copy, which is what cuModuleGetGlobal + cuMemcpyHtoD would do. */
    .module_set_global = gm__unsupported_module_set_global,
    .kernel_attrs = gm__cuda_kernel_attrs,
    .launch = gm__cuda_launch,
    .ipc_get_handle = gm__cuda_ipc_get_handle,
    .ipc_open = gm__cuda_ipc_open,
    .ipc_close = gm__cuda_ipc_close,
};
