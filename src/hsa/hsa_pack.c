/*
 * copy_strided on HSA: one dispatch of the library's copy_strided kernel
 * (kernels/elementwise.c), whose AMDGPU code object for this GPU comes from
 * the built-in image sets (the kernel registry's images), moves every
 * element of a strided device-to-device copy in stream order.
 *
 * The kernel walks a C-order shape with byte strides on both sides; the
 * layout it gets is simplified first (gm__strided_pack_layout, shared with
 * the CUDA backend): extents of 1 dropped, axes negative on both sides
 * reversed, axes sorted and contiguous neighbours merged, items split into
 * the widest unit of 8, 4, 2 or 1 bytes that every address and stride is
 * aligned to. What the kernel cannot take is GM_ERR_UNSUPPORTED, and the
 * core then decomposes the copy into pitched copies or stages it through
 * the host (src/core/copy.c): a side that is not device memory, more than
 * GM_STRIDED_MAX_DIMS axes after merging, more units than one 32-bit grid
 * covers, or no code object of the kernel for this GPU.
 *
 * The module is loaded on first use (under pack_lock) and unloaded by fini;
 * a GPU without a code object, or one the runtime refuses, is remembered so
 * later copies fall back at once.
 */
#include <string.h>

#include "hsa_internal.h"
#include "kernels_internal.h"

#define PACK_KERNEL  "copy_strided"
#define PACK_THREADS 256u

/* Whether a code object built for `arch` ("gfx90a", "gfx90a:xnack-") is for this GPU. */
static bool arch_is_ours(const gm_backend_ctx *bctx, const char *arch)
{
    const char *proc = strstr(bctx->isa_name, "--");
    size_t n = strcspn(arch, ":");

    if (proc == NULL)
        return false;
    proc += 2;
    return n > 0 && strncmp(proc, arch, n) == 0 && (proc[n] == '\0' || proc[n] == ':');
}

/* The built-in code object holding the packing kernel for this GPU, or NULL. */
static const gm_amdgpu_image *pack_image(const gm_backend_ctx *bctx)
{
    const gm_image_set *set = gm__builtin_set_with_kernel(PACK_KERNEL, NULL);

    for (int32_t i = 0; set != NULL && set->amdgpu != NULL && i < set->amdgpu_count; i++) {
        if (set->amdgpu[i].data != NULL && arch_is_ours(bctx, set->amdgpu[i].arch))
            return &set->amdgpu[i];
    }
    return NULL;
}

/* Load the module and find the kernel (pack_lock held). */
static gm_status pack_load(gm_backend_ctx *bctx)
{
    const gm_amdgpu_image *img = pack_image(bctx);
    gm_backend_module *module = NULL;
    gm_status status = GM_OK;

    if (img == NULL) {
        bctx->pack_state = GM_HSA_PACK_UNAVAILABLE;
        return gm__error(GM_ERR_UNSUPPORTED,
                         "HSA copy_strided: the library has no code object of the packing "
                         "kernel for %s",
                         bctx->isa_name);
    }
    status = gm__hsa_module_load(bctx, GM_IMAGE_AMDGPU, img->data, img->bytes, &module);
    if (status == GM_OK)
        status = gm__hsa_module_get_kernel(bctx, module, PACK_KERNEL, &bctx->pack_kernel);
    if (status != GM_OK) {
        (void)gm__hsa_module_unload(bctx, module);
        bctx->pack_kernel = NULL;
        if (status != GM_ERR_OUT_OF_DEVICE_MEMORY && status != GM_ERR_NO_MEMORY)
            bctx->pack_state = GM_HSA_PACK_UNAVAILABLE; /* the runtime refuses the image */
        gm__log(GM_LOG_INFO, "HSA copy_strided: no packing kernel (%s); falling back",
                gm_last_error_message());
        return gm__error(GM_ERR_UNSUPPORTED, "HSA copy_strided: the packing kernel did not load");
    }
    bctx->pack_module = module;
    bctx->pack_state = GM_HSA_PACK_LOADED;
    return GM_OK;
}

/* The packing kernel, loaded on first use; GM_ERR_UNSUPPORTED when there is none. */
static gm_status pack_kernel(gm_backend_ctx *bctx, gm_backend_kernel **kernel_p)
{
    gm_status status = GM_OK;

    pthread_mutex_lock(&bctx->pack_lock);
    if (bctx->pack_state == GM_HSA_PACK_UNLOADED)
        status = pack_load(bctx);
    else if (bctx->pack_state == GM_HSA_PACK_UNAVAILABLE)
        status = gm__error(GM_ERR_UNSUPPORTED, "HSA copy_strided: no packing kernel");
    *kernel_p = bctx->pack_kernel;
    pthread_mutex_unlock(&bctx->pack_lock);
    return status;
}

void gm__hsa_pack_fini(gm_backend_ctx *bctx)
{
    if (bctx->pack_module != NULL && gm__hsa_module_unload(bctx, bctx->pack_module) != GM_OK)
        gm__log(GM_LOG_WARN, "HSA backend: unloading the packing kernel: %s",
                gm_last_error_message());
    bctx->pack_module = NULL;
    bctx->pack_kernel = NULL;
    pthread_mutex_destroy(&bctx->pack_lock);
}

/* A side's bytes, [data + lo, data + hi), inside memory the runtime knows: the kernel would
 * write past an allocation's end as the DMA engine would (see gm__hsa_copy). */
static gm_status check_view(gm_backend_ctx *bctx, const gm_ndview *v, const char *what)
{
    int64_t lo = 0, hi = 0;
    gm_status status = gm_ndview_extent(v, &lo, &hi);

    if (status == GM_OK)
        status = gm__hsa_check_device_range(bctx, (gm_devptr)(uintptr_t)v->data + (uint64_t)lo,
                                            (size_t)(hi - lo), "HSA copy_strided", what);
    return status;
}

gm_status gm__hsa_copy_strided(gm_backend_ctx *bctx, const gm_ndview *dst, const gm_ndview *src,
                               gm_backend_stream *stream)
{
    gm_strided_layout layout;
    gm_devptr d = 0, s = 0;
    int64_t count = 0;
    gm_backend_kernel *kernel = NULL;
    void *args[4] = {&d, &s, &layout, &count};
    size_t sizes[4] = {sizeof(d), sizeof(s), sizeof(layout), sizeof(count)};
    gm_launch_config cfg;
    gm_status status = GM_OK;

    if (bctx == NULL || dst == NULL || src == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "HSA copy_strided: an argument is NULL");
    if (dst->memory != GM_MEMORY_DEVICE || src->memory != GM_MEMORY_DEVICE)
        return gm__error(GM_ERR_UNSUPPORTED,
                         "HSA copy_strided: the packing kernel copies device memory only");
    status = gm__host_copy_check(dst, src);
    if (status != GM_OK || gm_ndview_size(dst) == 0)
        return status;
    status = check_view(bctx, dst, "destination");
    if (status == GM_OK)
        status = check_view(bctx, src, "source");
    if (status == GM_OK)
        status = gm__strided_pack_layout("HSA copy_strided", dst, src, &layout, &d, &s, &count);
    if (status == GM_OK && (uint64_t)count > (uint64_t)UINT32_MAX - PACK_THREADS)
        status = gm__error(GM_ERR_UNSUPPORTED, "HSA copy_strided: %lld units exceed one grid",
                           (long long)count);
    if (status == GM_OK)
        status = pack_kernel(bctx, &kernel);
    if (status != GM_OK)
        return status;
    memset(&cfg, 0, sizeof(cfg));
    cfg.grid[0] = (uint32_t)(((uint64_t)count + PACK_THREADS - 1) / PACK_THREADS);
    cfg.grid[1] = cfg.grid[2] = 1;
    cfg.block[0] = PACK_THREADS;
    cfg.block[1] = cfg.block[2] = 1;
    return gm__hsa_launch(bctx, kernel, &cfg, args, sizes, 4, stream);
}
