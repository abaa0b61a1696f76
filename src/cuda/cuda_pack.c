/*
 * copy_strided of the CUDA backend: the packing kernel.
 *
 * The core asks for this op when a device copy does not reduce to a single
 * cuMemcpy2D / cuMemcpy3D (src/core/copy.c). When both descriptors are on
 * the device (device or managed memory), one launch of the library's
 * copy_strided kernel (kernels/elementwise.c, embedded in the built-in
 * fatbin and found through the kernel registry's image sets) moves every
 * element: transposed, reversed, broadcast-free permuted layouts of any
 * strides, on the stream and in order with the other work queued there.
 *
 * The layout handed to the kernel is simplified first (gm__strided_pack_layout,
 * shared with the HSA backend): extents of 1
 * dropped, axes negative on both sides reversed, axes sorted by destination
 * stride and contiguous neighbours merged, and each element split into
 * units of 8, 4, 2 or 1 bytes (the widest that every address and stride is
 * aligned to). What does not fit the kernel is GM_ERR_UNSUPPORTED, and the
 * core then falls back to pitched copies or host staging: a host-side
 * descriptor (pageable, pinned or mapped memory), more than
 * GM_STRIDED_MAX_DIMS axes after simplification, more elements than one
 * grid covers, or a library built without nvcc (no CUDA image) or a device
 * that cannot load it.
 *
 * The module is loaded on first use, once per context (under pack_lock),
 * and unloaded by fini. An image the device cannot run is remembered so
 * later copies fall back at once; other load failures (out of memory) fall
 * back for that copy only.
 */
#include <stdint.h>

#include "cuda_internal.h"
#include "kernels_internal.h"

/* The kernel and its threads per block. */
#define PACK_KERNEL  "copy_strided"
#define PACK_THREADS 256u

/* A launch of the packing kernel. */
typedef struct pack_plan {
    CUdeviceptr dst; /* element (0, ..., 0) of each side */
    CUdeviceptr src;
    gm_strided_layout layout;
    int64_t count; /* units to copy */
} pack_plan;

gm_status gm__cuda_pack_init(gm_backend_ctx *bctx)
{
    bctx->pack_state = GM_CUDA_PACK_UNLOADED;
    bctx->pack_module = NULL;
    bctx->pack_function = NULL;
    if (pthread_mutex_init(&bctx->pack_lock, NULL) != 0)
        return gm__error(GM_ERR_NO_MEMORY, "cuda init: cannot create the packing kernel's lock");
    return GM_OK;
}

void gm__cuda_pack_fini(gm_backend_ctx *bctx)
{
    if (bctx->pack_module != NULL &&
        gm__cuda_module_unload(bctx, (gm_backend_module *)bctx->pack_module) != GM_OK)
        gm__log(GM_LOG_WARN, "cuda: unloading the packing kernel failed: %s",
                gm_last_error_message());
    bctx->pack_module = NULL;
    bctx->pack_function = NULL;
    pthread_mutex_destroy(&bctx->pack_lock);
}

/* The built-in image set holding the packing kernel with a CUDA image, or NULL. */
static const gm_image_set *pack_image_set(void)
{
    const gm_image_set *set = gm__builtin_set_with_kernel(PACK_KERNEL, NULL);

    return set != NULL && set->cuda != NULL && set->cuda_bytes > 0 ? set : NULL;
}

/* Load the module and find the kernel (pack_lock held). */
static gm_status pack_load(gm_backend_ctx *bctx)
{
    const gm_image_set *set = pack_image_set();
    gm_backend_module *module = NULL;
    gm_backend_kernel *kernel = NULL;
    gm_status status = GM_OK;

    if (set == NULL) {
        bctx->pack_state = GM_CUDA_PACK_UNAVAILABLE;
        return gm__error(GM_ERR_UNSUPPORTED,
                         "cuda copy_strided: the library was built without CUDA kernels");
    }
    status = gm__cuda_module_load(bctx, GM_IMAGE_CUDA, set->cuda, set->cuda_bytes, &module);
    if (status == GM_OK)
        status = gm__cuda_module_get_kernel(bctx, module, PACK_KERNEL, &kernel);
    if (status != GM_OK) {
        if (module != NULL)
            (void)gm__cuda_module_unload(bctx, module);
        if (status == GM_ERR_UNSUPPORTED || status == GM_ERR_INVALID_ARG)
            bctx->pack_state = GM_CUDA_PACK_UNAVAILABLE; /* this device cannot run the image */
        gm__log(GM_LOG_INFO,
                "cuda copy_strided: no packing kernel (%s); strided copies fall "
                "back to pitched copies",
                gm_last_error_message());
        return gm__error(GM_ERR_UNSUPPORTED, "cuda copy_strided: the packing kernel did not load");
    }
    bctx->pack_module = (CUmodule)module;
    bctx->pack_function = (CUfunction)kernel;
    bctx->pack_state = GM_CUDA_PACK_LOADED;
    return GM_OK;
}

/* The packing kernel, loaded on first use; GM_ERR_UNSUPPORTED when there is none. */
static gm_status pack_function(gm_backend_ctx *bctx, CUfunction *function_p)
{
    gm_status status = GM_OK;

    pthread_mutex_lock(&bctx->pack_lock);
    if (bctx->pack_state == GM_CUDA_PACK_UNLOADED)
        status = pack_load(bctx);
    else if (bctx->pack_state == GM_CUDA_PACK_UNAVAILABLE)
        status = gm__error(GM_ERR_UNSUPPORTED, "cuda copy_strided: no packing kernel");
    *function_p = bctx->pack_function;
    pthread_mutex_unlock(&bctx->pack_lock);
    return status;
}

/* ---------------------------------------------------------------- plans */

static int on_device(const gm_ndview *v)
{
    return v->memory == GM_MEMORY_DEVICE || v->memory == GM_MEMORY_MANAGED;
}

/* The kernel's layout for dst <- src; GM_ERR_UNSUPPORTED when it does not fit the kernel. */
static gm_status pack_plan_build(const gm_ndview *dst, const gm_ndview *src, pack_plan *plan)
{
    gm_devptr d = 0, s = 0;
    gm_status status =
        gm__strided_pack_layout("cuda copy_strided", dst, src, &plan->layout, &d, &s, &plan->count);

    plan->dst = (CUdeviceptr)d;
    plan->src = (CUdeviceptr)s;
    return status;
}

/* ---------------------------------------------------------------- the op */

/* One launch over plan->count units, on the stream (the default stream when NULL). */
static gm_status pack_launch(gm_backend_ctx *bctx, CUfunction function, pack_plan *plan,
                             gm_backend_stream *stream)
{
    uint64_t blocks = ((uint64_t)plan->count + PACK_THREADS - 1u) / PACK_THREADS;
    void *params[4] = {&plan->dst, &plan->src, &plan->layout, &plan->count};
    gm_status status = GM_OK;

    if (blocks > (uint64_t)bctx->info.max_grid_dim[0])
        return gm__error(GM_ERR_UNSUPPORTED,
                         "cuda copy_strided: %lld elements need more blocks than a grid has",
                         (long long)plan->count);
    status = GM_CUDA_CALL(&bctx->drv, cuLaunchKernel, function, (unsigned)blocks, 1, 1,
                          PACK_THREADS, 1, 1, 0, gm__cuda_stream_handle(stream), params, NULL);
    if (status == GM_OK && stream == NULL)
        status = gm__cuda_finish_sync(bctx);
    return status;
}

gm_status gm__cuda_copy_strided(gm_backend_ctx *bctx, const gm_ndview *dst, const gm_ndview *src,
                                gm_backend_stream *stream)
{
    CUfunction function = NULL;
    pack_plan plan;
    gm_status status = GM_OK;

    if (bctx == NULL || dst == NULL || src == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "cuda copy_strided: an argument is NULL");
    if (!on_device(dst) || !on_device(src))
        return gm__error(GM_ERR_UNSUPPORTED,
                         "cuda copy_strided: the packing kernel copies between device-side "
                         "descriptors only");
    status = gm__host_copy_check(dst, src);
    if (status != GM_OK || gm_ndview_size(dst) == 0)
        return status;
    status = pack_plan_build(dst, src, &plan);
    if (status == GM_OK)
        status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = pack_function(bctx, &function);
    if (status == GM_OK)
        status = pack_launch(bctx, function, &plan, stream);
    return status;
}
