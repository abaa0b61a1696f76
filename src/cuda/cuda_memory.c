/*
 * Memory ops of the CUDA backend: device memory (cuMemAlloc), page-locked
 * host memory (cuMemHostAlloc, cuMemHostRegister) and its device mapping,
 * managed memory, pointer queries and IPC handles.
 *
 * Every op either succeeds and has taken / released exactly what it says,
 * or fails and leaves everything as it was, so the deallocation queue can
 * keep a failed free queued and retry it. CUDA_ERROR_OUT_OF_MEMORY becomes
 * GM_ERR_OUT_OF_DEVICE_MEMORY, and GM_ERR_NO_MEMORY for page-locked host
 * allocations (as on the other backends: it is host memory); either makes
 * the queue flush and retry once.
 */
#include <stdint.h>
#include <string.h>

#include "cuda_internal.h"

gm_status gm__cuda_mem_alloc(gm_backend_ctx *bctx, size_t bytes, gm_devptr *ptr_p)
{
    CUdeviceptr ptr = 0;
    gm_status status = GM_OK;

    if (bytes == 0) {
        *ptr_p = 0;
        return GM_OK;
    }
    status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuMemAlloc, &ptr, bytes);
    if (status != GM_OK)
        return gm__cuda_annotate(status, "cuda mem_alloc of %zu bytes", bytes);
    *ptr_p = (gm_devptr)ptr;
    return GM_OK;
}

gm_status gm__cuda_mem_free(gm_backend_ctx *bctx, gm_devptr ptr)
{
    gm_status status = GM_OK;

    if (ptr == 0)
        return GM_OK;
    status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuMemFree, (CUdeviceptr)ptr);
    return status;
}

/* gm_host_flags -> CU_MEMHOSTALLOC_* (PORTABLE, DEVICEMAP, WRITECOMBINED). */
static gm_status host_alloc_flags(unsigned flags, unsigned *cu_flags)
{
    const unsigned known = GM_HOST_PORTABLE | GM_HOST_WRITECOMBINED | GM_HOST_MAPPED;

    if ((flags & ~known) != 0)
        return gm__error(GM_ERR_INVALID_ARG, "cuda host_alloc: unknown flags 0x%x", flags & ~known);
    *cu_flags = 0;
    if ((flags & GM_HOST_PORTABLE) != 0)
        *cu_flags |= CU_MEMHOSTALLOC_PORTABLE;
    if ((flags & GM_HOST_MAPPED) != 0)
        *cu_flags |= CU_MEMHOSTALLOC_DEVICEMAP;
    if ((flags & GM_HOST_WRITECOMBINED) != 0)
        *cu_flags |= CU_MEMHOSTALLOC_WRITECOMBINED;
    return GM_OK;
}

gm_status gm__cuda_host_alloc(gm_backend_ctx *bctx, size_t bytes, unsigned flags, void **ptr_p)
{
    unsigned cu_flags = 0;
    void *ptr = NULL;
    gm_status status = host_alloc_flags(flags, &cu_flags);

    if (status != GM_OK)
        return status;
    if (bytes == 0) {
        *ptr_p = NULL;
        return GM_OK;
    }
    status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuMemHostAlloc, &ptr, bytes, cu_flags);
    if (status == GM_ERR_OUT_OF_DEVICE_MEMORY)
        return gm__cuda_annotate(GM_ERR_NO_MEMORY,
                                 "cuda host_alloc of %zu bytes: out of page-locked host memory",
                                 bytes);
    if (status != GM_OK)
        return gm__cuda_annotate(status, "cuda host_alloc of %zu bytes", bytes);
    *ptr_p = ptr;
    return GM_OK;
}

gm_status gm__cuda_host_free(gm_backend_ctx *bctx, void *ptr)
{
    gm_status status = GM_OK;

    if (ptr == NULL)
        return GM_OK;
    status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuMemFreeHost, ptr);
    return status;
}

gm_status gm__cuda_host_device_pointer(gm_backend_ctx *bctx, void *host, gm_devptr *ptr_p)
{
    CUdeviceptr ptr = 0;
    gm_status status = gm__cuda_enter(bctx);

    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuMemHostGetDevicePointer, &ptr, host, 0);
    if (status != GM_OK)
        return status;
    *ptr_p = (gm_devptr)ptr;
    return GM_OK;
}

/* gm_host_flags -> CU_MEMHOSTREGISTER_* (PORTABLE, DEVICEMAP). */
static gm_status host_register_flags(unsigned flags, unsigned *cu_flags)
{
    const unsigned known = GM_HOST_PORTABLE | GM_HOST_MAPPED;

    if ((flags & ~known) != 0)
        return gm__error(GM_ERR_INVALID_ARG,
                         "cuda host_register: flags 0x%x do not apply to registration (only "
                         "PORTABLE and MAPPED do)",
                         flags & ~known);
    *cu_flags = 0;
    if ((flags & GM_HOST_PORTABLE) != 0)
        *cu_flags |= CU_MEMHOSTREGISTER_PORTABLE;
    if ((flags & GM_HOST_MAPPED) != 0)
        *cu_flags |= CU_MEMHOSTREGISTER_DEVICEMAP;
    return GM_OK;
}

gm_status gm__cuda_host_register(gm_backend_ctx *bctx, void *ptr, size_t bytes, unsigned flags)
{
    unsigned cu_flags = 0;
    gm_status status = host_register_flags(flags, &cu_flags);

    if (status != GM_OK)
        return status;
    if (ptr == NULL || bytes == 0)
        return gm__error(GM_ERR_INVALID_ARG, "cuda host_register: nothing to register (%p, %zu)",
                         ptr, bytes);
    status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuMemHostRegister, ptr, bytes, cu_flags);
    if (status != GM_OK)
        return gm__cuda_annotate(status, "cuda host_register of %zu bytes at %p", bytes, ptr);
    return GM_OK;
}

gm_status gm__cuda_host_unregister(gm_backend_ctx *bctx, void *ptr)
{
    gm_status status = gm__cuda_enter(bctx);

    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuMemHostUnregister, ptr);
    return status;
}

gm_status gm__cuda_managed_alloc(gm_backend_ctx *bctx, size_t bytes, gm_devptr *ptr_p)
{
    CUdeviceptr ptr = 0;
    gm_status status = GM_OK;

    if (bytes == 0) {
        *ptr_p = 0;
        return GM_OK;
    }
    status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuMemAllocManaged, &ptr, bytes, CU_MEM_ATTACH_GLOBAL);
    if (status != GM_OK)
        return gm__cuda_annotate(status, "cuda managed_alloc of %zu bytes", bytes);
    *ptr_p = (gm_devptr)ptr;
    return GM_OK;
}

/*
 * One pointer attribute; *known_p = 0 when the driver does not know the
 * address (CUDA_ERROR_INVALID_VALUE: ordinary pageable memory), which is
 * an answer, not an error.
 */
static gm_status pointer_attribute(gm_backend_ctx *bctx, CUpointer_attribute attribute,
                                   const void *ptr, unsigned *value, int *known_p)
{
    gm_status status =
        GM_CUDA_CALL_QUIET(&bctx->drv, CUDA_ERROR_INVALID_VALUE, cuPointerGetAttribute, value,
                           attribute, (CUdeviceptr)(uintptr_t)ptr);

    *known_p = status == GM_OK;
    return status == GM_ERR_INVALID_ARG ? GM_OK : status;
}

/*
 * Managed memory is GM_MEMORY_MANAGED, device memory GM_MEMORY_DEVICE,
 * page-locked host memory (allocated or registered) GM_MEMORY_PINNED:
 * with unified addressing all of it is mapped, so the driver does not
 * tell pinned from mapped. Anything the driver does not know is
 * GM_MEMORY_HOST. The device is not compared: memory of another device
 * is still reported as device memory.
 */
gm_status gm__cuda_pointer_kind(gm_backend_ctx *bctx, const void *ptr, int *kind_p)
{
    unsigned managed = 0;
    unsigned type = 0;
    int known = 0;
    gm_status status = gm__cuda_enter(bctx);

    if (status == GM_OK)
        status = pointer_attribute(bctx, CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr, &managed, &known);
    if (status == GM_OK && known != 0 && managed == 0)
        status = pointer_attribute(bctx, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr, &type, &known);
    if (status != GM_OK)
        return status;
    if (known == 0)
        *kind_p = GM_MEMORY_HOST;
    else if (managed != 0)
        *kind_p = GM_MEMORY_MANAGED;
    else if (type == CU_MEMORYTYPE_DEVICE)
        *kind_p = GM_MEMORY_DEVICE;
    else if (type == CU_MEMORYTYPE_HOST)
        *kind_p = GM_MEMORY_PINNED;
    else
        *kind_p = GM_MEMORY_HOST;
    return GM_OK;
}

/* The handle names the whole allocation containing ptr (cuIpcGetMemHandle's rule). */
gm_status gm__cuda_ipc_get_handle(gm_backend_ctx *bctx, gm_devptr ptr, void *handle,
                                  size_t handle_bytes)
{
    CUipcMemHandle ipc;
    CUdeviceptr base = 0;
    size_t size = 0;
    gm_status status = GM_OK;

    if (handle == NULL || handle_bytes < sizeof(ipc))
        return gm__error(GM_ERR_INVALID_ARG,
                         "cuda ipc_get_handle: a handle needs %zu bytes, got %zu", sizeof(ipc),
                         handle == NULL ? (size_t)0 : handle_bytes);
    memset(&ipc, 0, sizeof(ipc));
    status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuMemGetAddressRange, &base, &size, (CUdeviceptr)ptr);
    /* The handle names the whole driver allocation and opens at its start: a pointer inside
     * one (a memory manager's suballocation) would open at the wrong address. */
    if (status == GM_OK && base != (CUdeviceptr)ptr)
        return gm__error(GM_ERR_UNSUPPORTED,
                         "cuda ipc_get_handle: 0x%llx is %llu bytes into a driver allocation of "
                         "%zu bytes at 0x%llx; its handle would open at the allocation's start "
                         "(a memory manager that suballocates must make its own IPC handles)",
                         (unsigned long long)ptr, (unsigned long long)(ptr - base), size,
                         (unsigned long long)base);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuIpcGetMemHandle, &ipc, (CUdeviceptr)ptr);
    if (status != GM_OK)
        return status;
    memcpy(handle, &ipc, sizeof(ipc));
    return GM_OK;
}

/* Opens a handle made by another process (the driver refuses the process's own handles). */
gm_status gm__cuda_ipc_open(gm_backend_ctx *bctx, const void *handle, size_t handle_bytes,
                            gm_devptr *ptr_p)
{
    CUipcMemHandle ipc;
    CUdeviceptr ptr = 0;
    gm_status status = GM_OK;

    if (handle == NULL || handle_bytes < sizeof(ipc))
        return gm__error(GM_ERR_INVALID_ARG, "cuda ipc_open: a handle has %zu bytes, got %zu",
                         sizeof(ipc), handle == NULL ? (size_t)0 : handle_bytes);
    memcpy(&ipc, handle, sizeof(ipc));
    status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuIpcOpenMemHandle, &ptr, ipc,
                              CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (status != GM_OK)
        return status;
    *ptr_p = (gm_devptr)ptr;
    return GM_OK;
}

gm_status gm__cuda_ipc_close(gm_backend_ctx *bctx, gm_devptr ptr)
{
    gm_status status = gm__cuda_enter(bctx);

    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuIpcCloseMemHandle, (CUdeviceptr)ptr);
    return status;
}
