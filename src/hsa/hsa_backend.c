/*
 * The HSA backend's ops table (see backend.h for each op's contract and
 * hsa_internal.h for how HSA's queues and signals make CUDA-style streams).
 */
#include "hsa_internal.h"

const gm_backend_ops gm__hsa_backend = {
    .size = sizeof(gm_backend_ops),
    .abi_version = GM_BACKEND_ABI_VERSION,
    .name = "hsa",
    .kind = GM_BACKEND_HSA,
    .init = gm__hsa_init,
    .fini = gm__hsa_fini,
    .device_info = gm__hsa_device_info,
    .mem_info = gm__hsa_mem_info,
    .mem_alloc = gm__hsa_mem_alloc,
    .mem_free = gm__hsa_mem_free,
    .mem_free_batch = gm__unsupported_mem_free_batch,
    .host_alloc = gm__hsa_host_alloc,
    .host_free = gm__hsa_host_free,
    .host_device_pointer = gm__hsa_host_device_pointer,
    .host_register = gm__hsa_host_register,
    .host_unregister = gm__hsa_host_unregister,
    /* ROCm 5.2 has no managed allocation; unified memory there needs HMM/XNACK through
     * hsa_amd_svm_*, which most GPUs and the Debian runtime do not enable. Use mapped memory. */
    .managed_alloc = gm__unsupported_managed_alloc,
    .pointer_kind = gm__hsa_pointer_kind,
    .copy = gm__hsa_copy,
    /* Device-to-device strided copies: one dispatch of the copy_strided kernel (hsa_pack.c);
     * GM_ERR_UNSUPPORTED otherwise, and the core decomposes into pitched copies. */
    .copy_strided = gm__hsa_copy_strided,
    /* Every copy is planned: pitched DMA pieces, the packing kernel or staging. */
    .copy_views = gm__unsupported_copy_views,
    .memset = gm__hsa_memset,
    .stream_create = gm__hsa_stream_create,
    .stream_destroy = gm__hsa_stream_destroy,
    .stream_builtin = gm__hsa_stream_builtin,
    .stream_wrap = gm__hsa_stream_wrap,
    .stream_unwrap = gm__hsa_stream_unwrap,
    .stream_native = gm__hsa_stream_native,
    .stream_synchronize = gm__hsa_stream_synchronize,
    .stream_query = gm__hsa_stream_query,
    .stream_add_callback = gm__hsa_stream_add_callback,
    .stream_enqueue_host = gm__hsa_stream_enqueue_host,
    .device_synchronize = gm__hsa_device_synchronize,
    .event_create = gm__hsa_event_create,
    .event_destroy = gm__hsa_event_destroy,
    .event_record = gm__hsa_event_record,
    .stream_wait_event = gm__hsa_stream_wait_event,
    .event_query = gm__hsa_event_query,
    .event_synchronize = gm__hsa_event_synchronize,
    .event_elapsed = gm__hsa_event_elapsed,
    .module_load = gm__hsa_module_load,
    .module_unload = gm__hsa_module_unload,
    .module_get_kernel = gm__hsa_module_get_kernel,
    .module_get_global = gm__hsa_module_get_global,
    .kernel_attrs = gm__hsa_kernel_attrs,
    .launch = gm__hsa_launch,
    .module_set_global = gm__hsa_module_set_global,
    .ipc_get_handle = gm__hsa_ipc_get_handle,
    .ipc_open = gm__hsa_ipc_open,
    .ipc_close = gm__hsa_ipc_close,
};
