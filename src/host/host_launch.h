/*
 * The host simulator backend's module and launch ops: modules are tables of
 * host-compiled kernels (gm_host_table), launches run on the kernel
 * simulator (src/host/sim) in stream order through stream_enqueue_host.
 */
#ifndef GPUMEM_SRC_HOST_HOST_LAUNCH_H
#define GPUMEM_SRC_HOST_HOST_LAUNCH_H

#include "backend.h"

struct host_ctx;

gm_op_module_load gm__host_module_load;
gm_op_module_unload gm__host_module_unload;
gm_op_module_get_kernel gm__host_module_get_kernel;
gm_op_module_get_global gm__host_module_get_global;
gm_op_module_set_global gm__host_module_set_global;
gm_op_kernel_attrs gm__host_kernel_attrs;
gm_op_launch gm__host_launch;

/*
 * Whether [addr, addr + bytes) lies in a global (GM_CONSTANT_ARRAY) of a
 * module loaded in the context: device memory of the context, as the
 * address gm_module_get_global gives is on a GPU (mem_lock held).
 */
bool gm__host_module_global(const struct host_ctx *c, uintptr_t addr, size_t bytes);

#endif /* GPUMEM_SRC_HOST_HOST_LAUNCH_H */
