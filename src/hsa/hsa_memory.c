/*
 * Memory on HSA: device arrays from the GPU's coarse-grained pool; pinned
 * and mapped host memory from the CPU's fine-grained pool, made reachable by
 * the GPU with hsa_amd_agents_allow_access; registration of existing host
 * memory with hsa_amd_memory_lock / hsa_amd_memory_unlock (ROC's register /
 * deregister; hsa_memory_register is a no-op in ROCr and is not used);
 * pointer queries through hsa_amd_pointer_info; IPC through
 * hsa_amd_ipc_memory_*.
 */
#include <stdio.h>
#include <string.h>

#include "hsa_internal.h"

/* What an IPC handle carries (fits the 64 bytes CUDA's handle has). */
typedef struct hsa_ipc_blob {
    hsa_amd_ipc_memory_t handle;
    uint64_t bytes;  /* the whole allocation */
    uint64_t offset; /* of the exported pointer inside it */
} hsa_ipc_blob;

/* Let `count` GPU agents reach ptr (allocated from a CPU pool). */
static gm_status allow(gm_backend_ctx *bctx, uint32_t count, const hsa_agent_t *agents, void *ptr)
{
    return GM_HSA_CALL(&bctx->api, hsa_amd_agents_allow_access, (count, agents, NULL, ptr));
}

/*
 * hsa_amd_memory_pool_allocate. ROCr refuses a request above the pool's
 * largest allocation (HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE, at most the
 * pool's size) with HSA_STATUS_ERROR_INVALID_ALLOCATION: for gpumem that is
 * running out of memory, `oom` (GM_ERR_OUT_OF_DEVICE_MEMORY for device
 * memory, GM_ERR_NO_MEMORY for host memory), not a bad argument. `call` and
 * `pool_name` name the request in that message.
 */
static gm_status pool_allocate(gm_backend_ctx *bctx, hsa_amd_memory_pool_t pool, size_t bytes,
                               gm_status oom, const char *call, const char *pool_name, void **ptr_p)
{
    hsa_status_t hs = bctx->api.hsa_amd_memory_pool_allocate(pool, bytes, 0, ptr_p);
    char detail[GM_HSA_ERROR_TEXT];
    size_t max = 0;

    if (hs != HSA_STATUS_ERROR_INVALID_ALLOCATION)
        return gm__hsa_check(hs, &bctx->api, GM_OK, "hsa_amd_memory_pool_allocate", __FILE__,
                             __LINE__);
    (void)gm__hsa_check(hs, &bctx->api, oom, "hsa_amd_memory_pool_allocate", __FILE__, __LINE__);
    snprintf(detail, sizeof(detail), "%s", gm_last_error_message());
    if (bctx->api.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE,
                                               &max) != HSA_STATUS_SUCCESS ||
        max == 0)
        return gm__error(oom, "%s: %zu bytes exceed the largest allocation of the %s pool: %s",
                         call, bytes, pool_name, detail);
    return gm__error(oom,
                     "%s: %zu bytes exceed the largest allocation of the %s pool (%zu bytes): %s",
                     call, bytes, pool_name, max, detail);
}

gm_status gm__hsa_host_pool_alloc(gm_backend_ctx *bctx, hsa_amd_memory_pool_t pool, bool needs,
                                  size_t bytes, void **ptr_p)
{
    void *ptr = NULL;
    gm_status status = pool_allocate(bctx, pool, bytes, GM_ERR_NO_MEMORY, "HSA backend",
                                     "CPU's kernarg or fine-grained", &ptr);

    if (status != GM_OK)
        return status;
    if (needs) {
        status = allow(bctx, 1, &bctx->gpu, ptr);
        if (status != GM_OK)
            goto fail_allow;
    }
    *ptr_p = ptr;
    return GM_OK;

fail_allow:
    (void)bctx->api.hsa_amd_memory_pool_free(ptr);
    return status;
}

/* Device memory; OUT_OF_RESOURCES and INVALID_ALLOCATION (above the pool's largest
 * allocation) become GM_ERR_OUT_OF_DEVICE_MEMORY, the deallocation queue's retry cue. */
gm_status gm__hsa_mem_alloc(gm_backend_ctx *bctx, size_t bytes, gm_devptr *ptr_p)
{
    void *ptr = NULL;
    gm_status status = GM_OK;

    if (bytes == 0) {
        *ptr_p = 0; /* nothing to allocate; mem_free(0) is a no-op */
        return GM_OK;
    }
    status = pool_allocate(bctx, bctx->device_pool, bytes, GM_ERR_OUT_OF_DEVICE_MEMORY, "mem_alloc",
                           "GPU's coarse-grained", &ptr);
    if (status != GM_OK)
        return status;
    atomic_fetch_add(&bctx->device_bytes, (int64_t)bytes);
    *ptr_p = (gm_devptr)(uintptr_t)ptr;
    return GM_OK;
}

/* The size of a runtime allocation starting at ptr, for accounting (0 if unknown). */
static size_t allocation_size(gm_backend_ctx *bctx, const void *ptr)
{
    hsa_amd_pointer_info_t info;

    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    if (bctx->api.hsa_amd_pointer_info(ptr, &info, NULL, NULL, NULL) != HSA_STATUS_SUCCESS)
        return 0;
    return info.sizeInBytes;
}

gm_status gm__hsa_mem_free(gm_backend_ctx *bctx, gm_devptr ptr)
{
    void *p = (void *)(uintptr_t)ptr;
    size_t bytes = 0;
    gm_status status = GM_OK;

    if (ptr == 0)
        return GM_OK;
    bytes = allocation_size(bctx, p);
    status = GM_HSA_CALL(&bctx->api, hsa_amd_memory_pool_free, (p));
    if (status == GM_OK)
        atomic_fetch_sub(&bctx->device_bytes, (int64_t)bytes);
    return status;
}

/*
 * Pinned host memory (fine-grained CPU pool). MAPPED and plain pinned memory
 * are the same on HSA (one address for host and device); both are made
 * reachable by this GPU, PORTABLE by every GPU. WRITECOMBINED has no HSA
 * counterpart and is ignored.
 */
gm_status gm__hsa_host_alloc(gm_backend_ctx *bctx, size_t bytes, unsigned flags, void **ptr_p)
{
    void *ptr = NULL;
    gm_status status = GM_OK;

    if (bytes == 0)
        return gm__error(GM_ERR_INVALID_ARG, "host_alloc: zero bytes");
    status = pool_allocate(bctx, bctx->host_pool, bytes, GM_ERR_NO_MEMORY, "host_alloc",
                           "CPU's fine-grained", &ptr);
    if (status != GM_OK)
        return status;
    if ((flags & GM_HOST_PORTABLE) != 0)
        status = allow(bctx, bctx->ngpus, bctx->gpus, ptr);
    else if (bctx->host_pool_needs_access)
        status = allow(bctx, 1, &bctx->gpu, ptr);
    if (status != GM_OK)
        goto fail_allow;
    *ptr_p = ptr;
    return GM_OK;

fail_allow:
    (void)bctx->api.hsa_amd_memory_pool_free(ptr);
    return status;
}

gm_status gm__hsa_host_free(gm_backend_ctx *bctx, void *ptr)
{
    if (ptr == NULL)
        return GM_OK;
    return GM_HSA_CALL(&bctx->api, hsa_amd_memory_pool_free, (ptr));
}

/* The runtime's record of ptr; GM_ERR_INVALID_ARG naming `call` when it has none. */
static gm_status lookup(gm_backend_ctx *bctx, const void *ptr, const char *call,
                        hsa_amd_pointer_info_t *info)
{
    gm_status status = GM_OK;

    memset(info, 0, sizeof(*info));
    info->size = sizeof(*info);
    status = GM_HSA_CALL(&bctx->api, hsa_amd_pointer_info, (ptr, info, NULL, NULL, NULL));
    if (status == GM_OK && info->type == HSA_EXT_POINTER_TYPE_UNKNOWN)
        status = gm__error(GM_ERR_INVALID_ARG,
                           "%s: %p is not memory the HSA runtime knows "
                           "(allocate it mapped or register it first)",
                           call, ptr);
    return status;
}

/* The agent-side address of a host address inside a known allocation. */
static void *agent_address(const hsa_amd_pointer_info_t *info, const void *host)
{
    uintptr_t offset = (uintptr_t)host - (uintptr_t)info->hostBaseAddress;

    return (char *)info->agentBaseAddress + offset;
}

gm_status gm__hsa_host_device_pointer(gm_backend_ctx *bctx, void *host, gm_devptr *ptr_p)
{
    hsa_amd_pointer_info_t info;
    gm_status status = lookup(bctx, host, "host_device_pointer", &info);

    if (status != GM_OK)
        return status;
    *ptr_p = (gm_devptr)(uintptr_t)agent_address(&info, host);
    return GM_OK;
}

/*
 * ROC's register: page-lock existing host memory for this GPU (every GPU
 * when PORTABLE) with hsa_amd_memory_lock, so copies use it directly and the
 * device can address it.
 */
gm_status gm__hsa_host_register(gm_backend_ctx *bctx, void *ptr, size_t bytes, unsigned flags)
{
    void *agent_ptr = NULL;
    bool portable = (flags & GM_HOST_PORTABLE) != 0;

    if (ptr == NULL || bytes == 0)
        return gm__error(GM_ERR_INVALID_ARG, "host_register: empty range %p + %zu", ptr, bytes);
    return GM_HSA_CALL(&bctx->api, hsa_amd_memory_lock,
                       (ptr, bytes, portable ? bctx->gpus : &bctx->gpu,
                        portable ? (int)bctx->ngpus : 1, &agent_ptr));
}

/* ROC's deregister; immediate, so the same memory can be registered again at once. */
gm_status gm__hsa_host_unregister(gm_backend_ctx *bctx, void *ptr)
{
    return GM_HSA_CALL(&bctx->api, hsa_amd_memory_unlock, (ptr));
}

/* Classify a pointer: pool memory owned by a GPU is device memory, CPU pool memory
 * is pinned (mapped on HSA), locked memory is pinned, IPC imports are device. */
gm_status gm__hsa_pointer_kind(gm_backend_ctx *bctx, const void *ptr, int *kind_p)
{
    hsa_amd_pointer_info_t info;
    gm_status status = GM_OK;

    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    status = GM_HSA_CALL(&bctx->api, hsa_amd_pointer_info, (ptr, &info, NULL, NULL, NULL));
    if (status != GM_OK)
        return status;
    switch (info.type) {
    case HSA_EXT_POINTER_TYPE_HSA:
        *kind_p = info.agentOwner.handle == bctx->cpu.handle ? GM_MEMORY_MAPPED : GM_MEMORY_DEVICE;
        break;
    case HSA_EXT_POINTER_TYPE_LOCKED:
        *kind_p = GM_MEMORY_PINNED;
        break;
    case HSA_EXT_POINTER_TYPE_IPC:
    case HSA_EXT_POINTER_TYPE_GRAPHICS:
        *kind_p = GM_MEMORY_DEVICE;
        break;
    default:
        *kind_p = GM_MEMORY_HOST;
        break;
    }
    return GM_OK;
}

/* The context's lock entry holding [host, host + extent), or NULL. Lock held. */
static gm__hsa_lock *covering_lock(const gm_backend_ctx *bctx, const char *host, size_t extent)
{
    for (gm__hsa_lock *l = bctx->locks; l != NULL; l = l->next) {
        if (host >= l->base && (size_t)(host - l->base) <= l->size &&
            extent <= l->size - (size_t)(host - l->base))
            return l;
    }
    return NULL;
}

/* Lock [host, host + extent) for the context's GPU into a new or the same-address entry. */
static gm_status lock_range(gm_backend_ctx *bctx, char *host, size_t extent, gm__hsa_lock **lock_p)
{
    gm__hsa_lock *l = bctx->locks;
    void *agent = NULL;
    bool fresh = false;
    gm_status status = GM_OK;

    while (l != NULL && l->base != host)
        l = l->next;
    if (l == NULL) {
        l = gm__calloc(1, sizeof(*l));
        if (l == NULL)
            return gm__error(GM_ERR_NO_MEMORY, "copy: no memory to track locked host memory");
        fresh = true;
    }
    status = GM_HSA_CALL(&bctx->api, hsa_amd_memory_lock, (host, extent, &bctx->gpu, 1, &agent));
    if (status != GM_OK) {
        if (fresh)
            gm__free(l);
        return status;
    }
    if (fresh) {
        l->base = host;
        l->next = bctx->locks;
        bctx->locks = l;
    }
    if (extent > l->size) { /* new operations use the longest registration */
        l->size = extent;
        l->agent = agent;
    }
    l->nlocks++;
    *lock_p = l;
    return GM_OK;
}

/*
 * The address a DMA engine uses for host memory: pageable memory this
 * context already locked, for a range inside that lock, or pool or
 * registered memory as the runtime maps it; other pageable memory is locked
 * now. A lock is held (*locked_p, a reference) for the copy's lifetime.
 * Lock held.
 */
gm_status gm__hsa_host_for_dma(gm_backend_ctx *bctx, void *host, size_t extent, void **agent_p,
                               gm__hsa_lock **locked_p)
{
    hsa_amd_pointer_info_t info;
    gm__hsa_lock *lock = covering_lock(bctx, host, extent);
    gm_status status = GM_OK;

    *locked_p = NULL;
    if (lock == NULL) {
        memset(&info, 0, sizeof(info));
        info.size = sizeof(info);
        status = GM_HSA_CALL(&bctx->api, hsa_amd_pointer_info, (host, &info, NULL, NULL, NULL));
        if (status != GM_OK)
            return status;
        if (info.type != HSA_EXT_POINTER_TYPE_UNKNOWN &&
            (uintptr_t)host + extent <= (uintptr_t)info.hostBaseAddress + info.sizeInBytes) {
            *agent_p = agent_address(&info, host);
            return GM_OK;
        }
        status = lock_range(bctx, host, extent, &lock);
        if (status != GM_OK)
            return status;
    }
    lock->users++;
    *agent_p = lock->agent + ((char *)host - lock->base);
    *locked_p = lock;
    return GM_OK;
}

void gm__hsa_lock_release(gm_backend_ctx *bctx, gm__hsa_lock *lock)
{
    gm__hsa_lock **link = &bctx->locks;

    if (--lock->users > 0)
        return;
    while (lock->nlocks > 0) { /* every registration at base; any order is fine now */
        (void)GM_HSA_CALL(&bctx->api, hsa_amd_memory_unlock, (lock->base));
        lock->nlocks--;
    }
    while (*link != NULL && *link != lock)
        link = &(*link)->next;
    if (*link == lock)
        *link = lock->next;
    gm__free(lock);
}

/* ---------------------------------------------------------------- IPC */

/* The runtime lacks the IPC entry points (they are optional in the symbol list). */
static gm_status ipc_missing(const gm_backend_ctx *bctx, const char *call)
{
    if (bctx->api.hsa_amd_ipc_memory_create != NULL &&
        bctx->api.hsa_amd_ipc_memory_attach != NULL && bctx->api.hsa_amd_ipc_memory_detach != NULL)
        return GM_OK;
    return gm__error(GM_ERR_UNSUPPORTED, "%s: this HSA runtime has no hsa_amd_ipc_memory_* API",
                     call);
}

/* Export the allocation holding ptr; the handle also carries its size and ptr's offset. */
gm_status gm__hsa_ipc_get_handle(gm_backend_ctx *bctx, gm_devptr ptr, void *handle,
                                 size_t handle_bytes)
{
    hsa_amd_pointer_info_t info;
    hsa_ipc_blob blob;
    gm_status status = ipc_missing(bctx, "ipc_get_handle");

    if (status == GM_OK && handle_bytes < sizeof(blob))
        status = gm__error(GM_ERR_INVALID_ARG,
                           "ipc_get_handle: HSA IPC handles need %zu "
                           "bytes, %zu given",
                           sizeof(blob), handle_bytes);
    if (status == GM_OK)
        status = lookup(bctx, (void *)(uintptr_t)ptr, "ipc_get_handle", &info);
    if (status != GM_OK)
        return status;
    memset(&blob, 0, sizeof(blob));
    blob.bytes = info.sizeInBytes;
    blob.offset = (uint64_t)((uintptr_t)ptr - (uintptr_t)info.agentBaseAddress);
    status = GM_HSA_CALL(&bctx->api, hsa_amd_ipc_memory_create,
                         (info.agentBaseAddress, info.sizeInBytes, &blob.handle));
    if (status != GM_OK)
        return status;
    memset(handle, 0, handle_bytes);
    memcpy(handle, &blob, sizeof(blob));
    return GM_OK;
}

gm_status gm__hsa_ipc_open(gm_backend_ctx *bctx, const void *handle, size_t handle_bytes,
                           gm_devptr *ptr_p)
{
    hsa_ipc_blob blob;
    gm__hsa_ipc_map *map = NULL;
    gm_status status = ipc_missing(bctx, "ipc_open");

    if (status == GM_OK && handle_bytes < sizeof(blob))
        status = gm__error(GM_ERR_INVALID_ARG,
                           "ipc_open: HSA IPC handles are %zu bytes, %zu "
                           "given",
                           sizeof(blob), handle_bytes);
    if (status != GM_OK)
        return status;
    memcpy(&blob, handle, sizeof(blob));
    if (blob.offset >= blob.bytes)
        return gm__error(GM_ERR_INVALID_ARG,
                         "ipc_open: malformed handle (offset %llu of %llu "
                         "bytes)",
                         (unsigned long long)blob.offset, (unsigned long long)blob.bytes);
    map = gm__calloc(1, sizeof(*map));
    if (map == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "ipc_open: no memory");
    status = GM_HSA_CALL(&bctx->api, hsa_amd_ipc_memory_attach,
                         (&blob.handle, (size_t)blob.bytes, 1, &bctx->gpu, &map->mapped));
    if (status != GM_OK) {
        gm__free(map);
        return status;
    }
    map->ptr = (gm_devptr)(uintptr_t)map->mapped + blob.offset;
    pthread_mutex_lock(&bctx->lock);
    map->next = bctx->ipc_maps;
    bctx->ipc_maps = map;
    pthread_mutex_unlock(&bctx->lock);
    *ptr_p = map->ptr;
    return GM_OK;
}

/* Detach the import ipc_open returned as ptr. */
gm_status gm__hsa_ipc_close(gm_backend_ctx *bctx, gm_devptr ptr)
{
    gm__hsa_ipc_map **link = &bctx->ipc_maps;
    gm__hsa_ipc_map *map = NULL;
    gm_status status = ipc_missing(bctx, "ipc_close");

    if (status != GM_OK)
        return status;
    pthread_mutex_lock(&bctx->lock);
    while (*link != NULL && (*link)->ptr != ptr)
        link = &(*link)->next;
    map = *link;
    if (map != NULL)
        *link = map->next;
    pthread_mutex_unlock(&bctx->lock);
    if (map == NULL)
        return gm__error(GM_ERR_INVALID_HANDLE, "ipc_close: 0x%llx was not opened by ipc_open",
                         (unsigned long long)ptr);
    status = GM_HSA_CALL(&bctx->api, hsa_amd_ipc_memory_detach, (map->mapped));
    gm__free(map);
    return status;
}

void gm__hsa_ipc_detach_all(gm_backend_ctx *bctx)
{
    while (bctx->ipc_maps != NULL) {
        gm__hsa_ipc_map *map = bctx->ipc_maps;

        bctx->ipc_maps = map->next;
        gm__log(GM_LOG_WARN, "HSA backend: IPC import 0x%llx still open at teardown",
                (unsigned long long)map->ptr);
        (void)bctx->api.hsa_amd_ipc_memory_detach(map->mapped);
        gm__free(map);
    }
}
