/*
 * The host simulator backend's module and launch ops: modules are tables of
 * host-compiled kernels (gm_host_table), launches run on the kernel
 * simulator (src/host/sim) in stream order through stream_enqueue_host.
 */
#ifndef GPUMEM_SRC_HOST_HOST_LAUNCH_H
#define GPUMEM_SRC_HOST_HOST_LAUNCH_H

#include "backend.h"

gm_status gm__host_module_load(gm_backend_ctx *bctx, gm_image_kind kind, const void *image,
                               size_t bytes, gm_backend_module **module_p);
gm_status gm__host_module_unload(gm_backend_ctx *bctx, gm_backend_module *module);
gm_status gm__host_module_get_kernel(gm_backend_ctx *bctx, gm_backend_module *module,
                                     const char *name, gm_backend_kernel **kernel_p);
gm_status gm__host_module_get_global(gm_backend_ctx *bctx, gm_backend_module *module,
                                     const char *name, gm_devptr *ptr_p, size_t *bytes_p);
gm_status gm__host_module_set_global(gm_backend_ctx *bctx, gm_backend_module *module,
                                     const char *name, const void *data, size_t bytes);
gm_status gm__host_kernel_attrs(gm_backend_ctx *bctx, gm_backend_kernel *kernel,
                                gm_kernel_attrs *attrs_p);
gm_status gm__host_launch(gm_backend_ctx *bctx, gm_backend_kernel *kernel,
                          const gm_launch_config *config, void **args, const size_t *arg_sizes,
                          int nargs, gm_backend_stream *stream);

#endif /* GPUMEM_SRC_HOST_HOST_LAUNCH_H */
