/*
 * Modules, kernels and launches of the CUDA backend.
 *
 * Images are fatbins, cubins or PTX text, loaded with cuModuleLoadDataEx
 * (cuModuleLoadData plus an error-log buffer, so a PTX JIT failure names its
 * cause). PTX must be NUL-terminated for the driver; an image that is
 * neither an ELF cubin nor a fatbin and does not end in NUL is copied once
 * with a terminator. Kernels are CUfunctions (owned by their module, no
 * release of their own), globals and __constant__ arrays come from
 * cuModuleGetGlobal_v2, launches go to cuLaunchKernel, and dynamic shared
 * memory above the function's limit (by default the 48 KiB of a block less
 * its static shared memory) is opted into with cuFuncSetAttribute
 * (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) before the launch.
 */
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "cuda_internal.h"

/* More parameters than any kernel has (CUDA allows 32764 bytes of them). */
#define MAX_KERNEL_PARAMS 32768

/* Bytes of JIT error log kept for the error message. */
#define JIT_LOG_BYTES 512

/* Whether the image starts like a cubin (ELF) or a fatbin; otherwise it is PTX text. */
static int is_binary_image(const unsigned char *image, size_t bytes)
{
    static const unsigned char elf[4] = {0x7f, 'E', 'L', 'F'};
    static const unsigned char fatbin[4] = {0x50, 0xed, 0x55, 0xba};  /* 0xba55ed50, LE */
    static const unsigned char wrapper[4] = {0xb1, 0x43, 0x62, 0x46}; /* 0x466243b1, LE */

    if (bytes < 4)
        return 0;
    return memcmp(image, elf, 4) == 0 || memcmp(image, fatbin, 4) == 0 ||
           memcmp(image, wrapper, 4) == 0;
}

/* The image as the driver must see it: PTX without a terminating NUL is copied with one. */
static gm_status terminated_image(const void *image, size_t bytes, const void **out, char **copy_p)
{
    const unsigned char *data = image;
    char *copy = NULL;

    *copy_p = NULL;
    *out = image;
    if (is_binary_image(data, bytes) != 0 || data[bytes - 1] == '\0')
        return GM_OK;
    copy = gm__malloc(bytes + 1);
    if (copy == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "cuda module_load: out of host memory for %zu bytes",
                         bytes + 1);
    memcpy(copy, image, bytes);
    copy[bytes] = '\0';
    *copy_p = copy;
    *out = copy;
    return GM_OK;
}

/* cuModuleLoadDataEx with an error-log buffer; the log joins the error detail. */
static gm_status load_data(gm_backend_ctx *bctx, const void *image, CUmodule *module)
{
    char log[JIT_LOG_BYTES];
    CUjit_option options[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[2] = {log, (void *)(uintptr_t)sizeof(log)};
    gm_status status = GM_OK;

    log[0] = '\0';
    status = GM_CUDA_CALL(&bctx->drv, cuModuleLoadDataEx, module, image, 2, options, values);
    if (status != GM_OK) {
        log[sizeof(log) - 1] = '\0';
        return gm__cuda_annotate(status, "cuda module_load%s%s",
                                 log[0] != '\0' ? ": JIT log: " : "", log);
    }
    return GM_OK;
}

gm_status gm__cuda_module_load(gm_backend_ctx *bctx, gm_image_kind kind, const void *image,
                               size_t bytes, gm_backend_module **module_p)
{
    const void *data = NULL;
    char *copy = NULL;
    CUmodule module = NULL;
    gm_status status = GM_OK;

    if (kind != GM_IMAGE_CUDA)
        return gm__error(GM_ERR_UNSUPPORTED,
                         "cuda module_load: image kind %d is not a CUDA image (fatbin, cubin, PTX)",
                         (int)kind);
    if (image == NULL || bytes == 0)
        return gm__error(GM_ERR_INVALID_ARG, "cuda module_load: empty image");
    status = terminated_image(image, bytes, &data, &copy);
    if (status != GM_OK)
        return status;
    status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = load_data(bctx, data, &module);
    gm__free(copy); /* the driver keeps its own copy of the image */
    if (status != GM_OK)
        return status;
    *module_p = (gm_backend_module *)module;
    return GM_OK;
}

gm_status gm__cuda_module_unload(gm_backend_ctx *bctx, gm_backend_module *module)
{
    gm_status status = GM_OK;

    if (module == NULL)
        return GM_OK;
    status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuModuleUnload, (CUmodule)module);
    return status;
}

gm_status gm__cuda_module_get_kernel(gm_backend_ctx *bctx, gm_backend_module *module,
                                     const char *name, gm_backend_kernel **kernel_p)
{
    CUfunction function = NULL;
    gm_status status = GM_OK;

    if (name == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "cuda module_get_kernel: name is NULL");
    status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuModuleGetFunction, &function, (CUmodule)module, name);
    if (status != GM_OK)
        return gm__cuda_annotate(status, "cuda module_get_kernel: no kernel \"%s\"", name);
    *kernel_p = (gm_backend_kernel *)function;
    return GM_OK;
}

gm_status gm__cuda_module_get_global(gm_backend_ctx *bctx, gm_backend_module *module,
                                     const char *name, gm_devptr *ptr_p, size_t *bytes_p)
{
    CUdeviceptr ptr = 0;
    size_t bytes = 0;
    gm_status status = GM_OK;

    if (name == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "cuda module_get_global: name is NULL");
    status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuModuleGetGlobal, &ptr, &bytes, (CUmodule)module, name);
    if (status != GM_OK)
        return gm__cuda_annotate(status, "cuda module_get_global: no global \"%s\"", name);
    *ptr_p = (gm_devptr)ptr;
    *bytes_p = bytes;
    return GM_OK;
}

/*
 * Size of the kernel's parameter block: end of its last parameter, from
 * cuFuncGetParamInfo (drivers >= 12.4); 0 when the driver cannot tell.
 */
static gm_status kernarg_bytes(gm_backend_ctx *bctx, CUfunction function, size_t *bytes_p)
{
    size_t offset = 0;
    size_t size = 0;
    size_t end = 0;
    gm_status status = GM_OK;

    *bytes_p = 0;
    if (bctx->drv.cuFuncGetParamInfo == NULL)
        return GM_OK;
    for (size_t i = 0; status == GM_OK && i < MAX_KERNEL_PARAMS; i++) {
        status = GM_CUDA_CALL_QUIET(&bctx->drv, CUDA_ERROR_INVALID_VALUE, cuFuncGetParamInfo,
                                    function, i, &offset, &size);
        if (status == GM_OK && offset + size > end)
            end = offset + size;
    }
    if (status != GM_ERR_INVALID_ARG) /* INVALID_VALUE: past the last parameter */
        return status;
    *bytes_p = end;
    return GM_OK;
}

gm_status gm__cuda_kernel_attrs(gm_backend_ctx *bctx, gm_backend_kernel *kernel,
                                gm_kernel_attrs *attrs_p)
{
    CUfunction function = (CUfunction)kernel;
    int shared = 0;
    int local = 0;
    int threads = 0;
    size_t params = 0;
    gm_status status = gm__cuda_enter(bctx);

    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuFuncGetAttribute, &shared,
                              CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuFuncGetAttribute, &local,
                              CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, function);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuFuncGetAttribute, &threads,
                              CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function);
    if (status == GM_OK)
        status = kernarg_bytes(bctx, function, &params);
    if (status != GM_OK)
        return status;
    attrs_p->static_shared_bytes = (size_t)shared;
    attrs_p->private_bytes = (size_t)local;
    attrs_p->kernarg_bytes = params;
    attrs_p->kernarg_align = 0; /* the driver lays the parameters out itself */
    attrs_p->max_threads_per_block = threads;
    return GM_OK;
}

/* Reject launches the driver would refuse for shape reasons, with a precise message. */
static gm_status check_launch(const gm_launch_config *config, void **args, int nargs)
{
    if (config == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "cuda launch: config is NULL");
    for (int i = 0; i < 3; i++) {
        if (config->grid[i] == 0 || config->block[i] == 0)
            return gm__error(GM_ERR_INVALID_ARG,
                             "cuda launch: empty grid (%u,%u,%u) or block "
                             "(%u,%u,%u)",
                             config->grid[0], config->grid[1], config->grid[2], config->block[0],
                             config->block[1], config->block[2]);
    }
    if (nargs < 0 || (nargs > 0 && args == NULL))
        return gm__error(GM_ERR_INVALID_ARG, "cuda launch: %d arguments at %p", nargs,
                         (void *)args);
    if (config->dynamic_shared_bytes > (size_t)INT_MAX)
        return gm__error(GM_ERR_INVALID_ARG, "cuda launch: %zu bytes of dynamic shared memory",
                         config->dynamic_shared_bytes);
    return GM_OK;
}

/* Serializes raising a function's dynamic shared memory limit (shared by every thread). */
static pthread_mutex_t dynamic_shared_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * Make the function accept `bytes` of dynamic shared memory. Its limit
 * (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) defaults to what the
 * block's default shared memory leaves beside the kernel's static shared
 * memory, so a kernel with static arrays needs it raised below 48 KiB of
 * dynamic memory too. It is only ever raised, under a lock: a launch on
 * another thread needing less must not lower it before this one launches.
 */
static gm_status allow_dynamic_shared(gm_backend_ctx *bctx, CUfunction function, size_t bytes)
{
    int limit = 0;
    gm_status status = GM_CUDA_CALL(&bctx->drv, cuFuncGetAttribute, &limit,
                                    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, function);

    if (status != GM_OK || (size_t)limit >= bytes)
        return status;
    pthread_mutex_lock(&dynamic_shared_lock);
    status = GM_CUDA_CALL(&bctx->drv, cuFuncGetAttribute, &limit,
                          CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, function);
    if (status == GM_OK && (size_t)limit < bytes)
        status = GM_CUDA_CALL(&bctx->drv, cuFuncSetAttribute, function,
                              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)bytes);
    pthread_mutex_unlock(&dynamic_shared_lock);
    return status;
}

/* arg_sizes is not needed: the driver knows each parameter's size from the image. */
gm_status gm__cuda_launch(gm_backend_ctx *bctx, gm_backend_kernel *kernel,
                          const gm_launch_config *config, void **args, const size_t *arg_sizes,
                          int nargs, gm_backend_stream *stream)
{
    CUfunction function = (CUfunction)kernel;
    gm_status status = check_launch(config, args, nargs);

    (void)arg_sizes;
    if (status == GM_OK)
        status = gm__cuda_enter(bctx);
    if (status == GM_OK && config->dynamic_shared_bytes > 0)
        status = allow_dynamic_shared(bctx, function, config->dynamic_shared_bytes);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuLaunchKernel, function, config->grid[0],
                              config->grid[1], config->grid[2], config->block[0], config->block[1],
                              config->block[2], (unsigned)config->dynamic_shared_bytes,
                              gm__cuda_stream_handle(stream), nargs > 0 ? args : NULL, NULL);
    /* No stream: synchronous, as gm_launch promises (the kernel has finished and its
     * failure, e.g. an illegal address, is this call's); the launch went to the legacy
     * stream (handle 0: the driver entry points are not the per-thread-stream variants),
     * so synchronizing that stream waits for exactly it and what came before. */
    if (status == GM_OK && stream == NULL)
        status = gm__cuda_finish_sync(bctx);
    return status;
}
