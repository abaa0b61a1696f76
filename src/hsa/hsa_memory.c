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

/*
 * Device memory; OUT_OF_RESOURCES and INVALID_ALLOCATION (above the pool's largest
 * allocation) become GM_ERR_OUT_OF_DEVICE_MEMORY, the deallocation queue's retry cue.
 * Counted (for mem_info without HSA_AMD_AGENT_INFO_MEMORY_AVAIL) with the size
 * hsa_amd_pointer_info reports, which mem_free subtracts: ROCr before ROCm 5.4 reports
 * it rounded up to a page, later ones as requested.
 */
gm_status gm__hsa_mem_alloc(gm_backend_ctx *bctx, size_t bytes, gm_devptr *ptr_p)
{
    void *ptr = NULL;
    size_t known = 0;
    gm_status status = GM_OK;

    if (bytes == 0) {
        *ptr_p = 0; /* nothing to allocate; mem_free(0) is a no-op */
        return GM_OK;
    }
    status = pool_allocate(bctx, bctx->device_pool, bytes, GM_ERR_OUT_OF_DEVICE_MEMORY, "mem_alloc",
                           "GPU's coarse-grained", &ptr);
    if (status != GM_OK)
        return status;
    known = allocation_size(bctx, ptr); /* what mem_free will subtract */
    atomic_fetch_add(&bctx->device_bytes, (int64_t)(known != 0 ? known : bytes));
    *ptr_p = (gm_devptr)(uintptr_t)ptr;
    return GM_OK;
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
 * are the same on HSA (one address for host and device). Both are made
 * reachable by every GPU, PORTABLE or not: any context's copies use pool
 * memory as it is (gm__hsa_host_for_dma), as CUDA's unified addressing lets
 * every context use pinned memory, and a GPU the memory is not mapped for
 * would fault. WRITECOMBINED has no HSA counterpart and is ignored.
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
    (void)flags;
    if (bctx->host_pool_needs_access)
        status = allow(bctx, bctx->ngpus, bctx->gpus, ptr);
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

/* The runtime's record of ptr (type HSA_EXT_POINTER_TYPE_UNKNOWN when it has none). */
static gm_status pointer_info(gm_backend_ctx *bctx, const void *ptr, hsa_amd_pointer_info_t *info)
{
    memset(info, 0, sizeof(*info));
    info->size = sizeof(*info);
    return GM_HSA_CALL(&bctx->api, hsa_amd_pointer_info, (ptr, info, NULL, NULL, NULL));
}

/* The runtime's record of ptr; GM_ERR_INVALID_ARG naming `call` when it has none. */
static gm_status lookup(gm_backend_ctx *bctx, const void *ptr, const char *call,
                        hsa_amd_pointer_info_t *info)
{
    gm_status status = pointer_info(bctx, ptr, info);

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

static bool registered_agent(const char *host, size_t extent, void **agent_p);
static gm_status wait_unsplit(gm_backend_ctx *bctx, const void *host, size_t extent,
                              const char *what);
static bool registered_host(const char *agent, size_t extent);

/*
 * Pool memory or a registered range; not a range a copy locked for itself.
 * Registered memory's device address is the one hsa_amd_memory_lock
 * returned for the registration (ROCr's agent address, in general not the
 * host address); the runtime's pointer info for the host address could name
 * another lock's mapping of the same pages (a copy's temporary lock), which
 * ends with that lock.
 */
gm_status gm__hsa_host_device_pointer(gm_backend_ctx *bctx, void *host, gm_devptr *ptr_p)
{
    hsa_amd_pointer_info_t info;
    void *agent = NULL;
    gm_status status = lookup(bctx, host, "host_device_pointer", &info);

    if (status == GM_OK && info.type == HSA_EXT_POINTER_TYPE_LOCKED &&
        !registered_agent(host, 1, &agent))
        status = gm__error(GM_ERR_INVALID_ARG,
                           "host_device_pointer: %p is not memory the HSA runtime knows as pool "
                           "or registered memory (a copy's temporary lock only, or the device "
                           "address of registered memory, not its host address)",
                           host);
    if (status != GM_OK)
        return status;
    *ptr_p = (gm_devptr)(uintptr_t)(agent != NULL ? agent : agent_address(&info, host));
    return GM_OK;
}

/*
 * Host memory registered through host_register, process-wide: page-locking
 * is the process's (hsa_amd_memory_lock is), so memory one context
 * registered cannot be registered again by any (GM_ERR_STATE, as CUDA's
 * cuMemHostRegister and the simulator refuse it). ROCr would count a second
 * lock of the same range and keep the memory locked past the first
 * deregistration. The backend's own locks of pageable memory for a copy
 * (copy_locks below) are not registrations and are not recorded here.
 */
typedef struct registration {
    struct registration *next;
    const gm_backend_ctx *owner;
    char *base;  /* the host address (the CPU's) */
    char *agent; /* hsa_amd_memory_lock's agent address for base (the GPUs') */
    size_t bytes;
} registration;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static registration *registry; /* under registry_lock */
/* Pageable memory every context locked for its copies (under registry_lock, taken after a
 * context's lock): a lock starts at no address where one of another size does. */
static gm__hsa_lock *copy_locks;

/* A copy lock (of `owner`'s; NULL: any context's) starting at host with another size than
 * extent, or NULL. registry_lock held. */
static const gm__hsa_lock *other_size_lock(const gm_backend_ctx *owner, const char *host,
                                           size_t extent)
{
    for (const gm__hsa_lock *l = copy_locks; l != NULL; l = l->next) {
        if (l->base == host && l->size != extent && (owner == NULL || l->owner == owner))
            return l;
    }
    return NULL;
}

/* Whether [p, p + extent) lies inside [base, base + bytes). */
static bool inside(const char *p, size_t extent, const char *base, size_t bytes)
{
    return p >= base && (size_t)(p - base) <= bytes && extent <= bytes - (size_t)(p - base);
}

/* The first registration meeting [base, base + bytes), or NULL. registry_lock held. */
static registration *registered_overlap(const char *base, size_t bytes)
{
    for (registration *r = registry; r != NULL; r = r->next) {
        if (base < r->base + r->bytes && r->base < base + bytes)
            return r;
    }
    return NULL;
}

/* The link to owner's registration starting at base, or NULL. registry_lock held. */
static registration **registration_at(const gm_backend_ctx *owner, const void *base)
{
    registration **link = &registry;

    while (*link != NULL && ((*link)->owner != owner || (*link)->base != base))
        link = &(*link)->next;
    return *link != NULL ? link : NULL;
}

/* GM_ERR_STATE naming the registration that [ptr, ptr + bytes) meets. */
static gm_status already_registered(const gm_backend_ctx *bctx, const char *ptr, size_t bytes,
                                    const registration *r)
{
    if (r->owner == bctx)
        return gm__error(GM_ERR_STATE,
                         "host_register: [%p, %p) overlaps memory already registered by this "
                         "context ([%p, %p))",
                         (const void *)ptr, (const void *)(ptr + bytes), (void *)r->base,
                         (void *)(r->base + r->bytes));
    return gm__error(GM_ERR_STATE,
                     "host_register: [%p, %p) overlaps memory another context registered "
                     "([%p, %p); page-locking is the process's, as in CUDA)",
                     (const void *)ptr, (const void *)(ptr + bytes), (void *)r->base,
                     (void *)(r->base + r->bytes));
}

/*
 * GM_ERR_STATE when a copy holds pageable memory at ptr locked for a range of
 * another size than a registration's `bytes`: a second registration there
 * could never be unlocked (libhsakmt finds the one to unlock by address
 * alone). This context's own such locks were waited for (wait_unsplit);
 * another context's go only when that context reaps its copies, which
 * waiting here cannot make happen. registry_lock held.
 */
static gm_status copy_lock_conflict(const gm_backend_ctx *bctx, const char *ptr, size_t bytes)
{
    const gm__hsa_lock *l = other_size_lock(NULL, ptr, bytes);

    if (l == NULL)
        return GM_OK;
    return gm__error(GM_ERR_STATE,
                     "host_register: [%p, +%zu): %s context holds %p locked for a "
                     "pending copy of %zu bytes, and a second page lock of another size "
                     "at one address could never be unlocked (libhsakmt finds the one to "
                     "unlock by address alone); synchronize that context's streams first",
                     (const void *)ptr, bytes, l->owner == bctx ? "this" : "another",
                     (const void *)ptr, l->size);
}

/*
 * ROC's register: page-lock existing host memory for every GPU (PORTABLE or
 * not: any context's copies use registered memory as it is, and the kernel
 * driver maps a locked range only for the GPUs it was locked for) with
 * hsa_amd_memory_lock, so copies use it directly and the device can address
 * it, at the agent address the lock returns (kept with the registration:
 * the GPU uses it, the CPU the host address). Memory any context registered
 * (any byte of the range) is GM_ERR_STATE, and so is memory another
 * context's pending copy locked at ptr for a range of another size
 * (copy_lock_conflict); this context's own such copies are waited for.
 */
gm_status gm__hsa_host_register(gm_backend_ctx *bctx, void *ptr, size_t bytes, unsigned flags)
{
    void *agent_ptr = NULL;
    registration *r = NULL;
    const registration *other = NULL;
    gm_status status = GM_OK;

    if (ptr == NULL || bytes == 0 || (uintptr_t)ptr + bytes < (uintptr_t)ptr)
        return gm__error(GM_ERR_INVALID_ARG, "host_register: empty or wrapping range %p + %zu", ptr,
                         bytes);
    r = gm__calloc(1, sizeof(*r));
    if (r == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "host_register: no memory to record the registration");
    /* A pending copy's lock of another size at ptr goes first (libhsakmt could unlock
     * neither); held from the wait to the lock so that no copy locks there meanwhile. */
    pthread_mutex_lock(&bctx->lock);
    status = wait_unsplit(bctx, ptr, bytes, "host_register");
    pthread_mutex_lock(&registry_lock);
    other = status == GM_OK ? registered_overlap(ptr, bytes) : NULL;
    if (other != NULL)
        status = already_registered(bctx, ptr, bytes, other);
    if (status == GM_OK)
        status = copy_lock_conflict(bctx, ptr, bytes);
    if (status == GM_OK)
        status = GM_HSA_CALL(&bctx->api, hsa_amd_memory_lock,
                             (ptr, bytes, bctx->gpus, (int)bctx->ngpus, &agent_ptr));
    if (status == GM_OK) {
        r->owner = bctx;
        r->base = ptr;
        r->agent = agent_ptr;
        r->bytes = bytes;
        r->next = registry;
        registry = r;
    }
    pthread_mutex_unlock(&registry_lock);
    pthread_mutex_unlock(&bctx->lock);
    if (status != GM_OK)
        gm__free(r);
    return status;
}

/*
 * ROC's deregister; immediate, so the same memory can be registered again at
 * once. Registered memory goes to the DMA engine as it is, without a
 * reference (gm__hsa_host_for_dma), and kernels reach it through its device
 * address, which the backend never sees: so the context's queued work is
 * waited for first (device_synchronize, cuMemHostUnregister's behaviour), as
 * unlocking under a pending copy or kernel would let the device touch pages
 * the process may reuse. Not from a stream callback (the wait would wait for
 * it). If the wait fails (the context failed), the memory stays locked and
 * registered until fini.
 */
gm_status gm__hsa_host_unregister(gm_backend_ctx *bctx, void *ptr)
{
    registration **link = NULL;
    registration *r = NULL;
    gm_status status = gm__hsa_device_synchronize(bctx);

    if (status != GM_OK)
        return gm__error_within("host_unregister", status);
    pthread_mutex_lock(&registry_lock);
    link = registration_at(bctx, ptr);
    if (link == NULL)
        status = gm__error(GM_ERR_INVALID_ARG,
                           "host_unregister: %p is not the start of a range registered by this "
                           "context",
                           ptr);
    else
        status = GM_HSA_CALL(&bctx->api, hsa_amd_memory_unlock, (ptr));
    if (status == GM_OK) {
        r = *link;
        *link = r->next;
    }
    pthread_mutex_unlock(&registry_lock);
    gm__free(r);
    return status;
}

/* Unlock what the context still has registered (fini, after its work was drained). */
void gm__hsa_unregister_all(gm_backend_ctx *bctx)
{
    registration **link = &registry;

    pthread_mutex_lock(&registry_lock);
    while (*link != NULL) {
        registration *r = *link;

        if (r->owner != bctx) {
            link = &r->next;
            continue;
        }
        *link = r->next;
        gm__log(GM_LOG_WARN, "HSA backend: host memory %p (%zu bytes) still registered at teardown",
                (void *)r->base, r->bytes);
        (void)bctx->api.hsa_amd_memory_unlock(r->base);
        gm__free(r);
    }
    pthread_mutex_unlock(&registry_lock);
}

/* What the runtime calls a pointer's memory, for messages. */
static const char *memory_name(const gm_backend_ctx *bctx, const hsa_amd_pointer_info_t *info)
{
    switch (info->type) {
    case HSA_EXT_POINTER_TYPE_HSA:
        return info->agentOwner.handle == bctx->cpu.handle ? "host pool allocation"
                                                           : "device allocation";
    case HSA_EXT_POINTER_TYPE_LOCKED:
        return "registered host range";
    case HSA_EXT_POINTER_TYPE_IPC:
        return "IPC import";
    default:
        return "allocation";
    }
}

/*
 * The device side of a copy, memset or strided copy: [addr, addr + bytes)
 * must lie inside one block of memory the runtime knows at its agent
 * address (device or host pool memory, a registered range, an IPC import),
 * as the simulator and CUDA require; the DMA engine and the packing kernel
 * check nothing and would write past the block's end. One
 * hsa_amd_pointer_info: the backend keeps no record of its allocations, and
 * the runtime's also covers memory that other libraries allocated through
 * it. GM_ERR_INVALID_ARG naming the range and the block otherwise.
 */
gm_status gm__hsa_check_device_range(gm_backend_ctx *bctx, gm_devptr addr, size_t bytes,
                                     const char *fn, const char *what)
{
    hsa_amd_pointer_info_t info;
    uintptr_t base = 0, at = (uintptr_t)addr;
    gm_status status = GM_OK;

    if (bytes == 0)
        return GM_OK;
    status = pointer_info(bctx, (const void *)at, &info);
    if (status != GM_OK)
        return status;
    if (info.type == HSA_EXT_POINTER_TYPE_LOCKED && !registered_host((const char *)at, 1) &&
        registered_agent((const char *)at, 1, NULL))
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: %s range [%p, +%zu) is the host address of registered memory; the "
                         "device reaches it at its device address (host_device_pointer)",
                         fn, what, (void *)at, bytes);
    if (info.type == HSA_EXT_POINTER_TYPE_UNKNOWN ||
        (info.type == HSA_EXT_POINTER_TYPE_LOCKED && !registered_host((const char *)at, 1)))
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: %s range [%p, +%zu) is not inside device, pinned, mapped or "
                         "registered memory the HSA runtime knows",
                         fn, what, (void *)at, bytes);
    base = (uintptr_t)info.agentBaseAddress;
    if (at < base || at - base > info.sizeInBytes || bytes > info.sizeInBytes - (at - base))
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: %s range [%p, +%zu) runs past the end of the %s [%p, +%zu) "
                         "holding its start",
                         fn, what, (void *)at, bytes, memory_name(bctx, &info), (void *)base,
                         info.sizeInBytes);
    return GM_OK;
}

/* Classify a pointer: pool memory owned by a GPU is device memory, CPU pool memory
 * is pinned (mapped on HSA), locked memory is pinned, IPC imports are device. */
gm_status gm__hsa_pointer_kind(gm_backend_ctx *bctx, const void *ptr, int *kind_p)
{
    hsa_amd_pointer_info_t info;
    gm_status status = pointer_info(bctx, ptr, &info);

    if (status != GM_OK)
        return status;
    switch (info.type) {
    case HSA_EXT_POINTER_TYPE_HSA:
        *kind_p = info.agentOwner.handle == bctx->cpu.handle ? GM_MEMORY_MAPPED : GM_MEMORY_DEVICE;
        break;
    case HSA_EXT_POINTER_TYPE_LOCKED: /* registered (at its host or device address); a
                                         copy's temporary lock is not */
        *kind_p = registered_agent(ptr, 1, NULL) || registered_host(ptr, 1) ? GM_MEMORY_PINNED
                                                                            : GM_MEMORY_HOST;
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

/* The context's copy lock holding [host, host + extent), or NULL. registry_lock held. */
static gm__hsa_lock *covering_lock(const gm_backend_ctx *bctx, const char *host, size_t extent)
{
    for (gm__hsa_lock *l = copy_locks; l != NULL; l = l->next) {
        if (l->owner == bctx && inside(host, extent, l->base, l->size))
            return l;
    }
    return NULL;
}

/*
 * Whether a lock of another size than `extent` starts at host: any context's
 * copy lock, or a registration. libhsakmt keys a userptr registration by
 * address and size but finds the one hsa_amd_memory_unlock undoes by address
 * alone (ROCT fmm.c: vm_find_object(addr, 0) answers none when two of
 * different sizes start there), and ROCr's MemoryRegion::Unlock ignores the
 * thunk's status, so neither could ever be unlocked. One of the same size is
 * fine (the driver counts it). registry_lock held.
 */
static bool other_size_at(const char *host, size_t extent)
{
    if (other_size_lock(NULL, host, extent) != NULL)
        return true;
    for (const registration *r = registry; r != NULL; r = r->next) {
        if (r->base == host && r->bytes != extent)
            return true;
    }
    return false;
}

/* Lock [host, host + extent) for the context's GPU into a new entry (other_size_at is
 * false). registry_lock held: the check and the lock are one step for the process. */
static gm_status lock_range(gm_backend_ctx *bctx, char *host, size_t extent, gm__hsa_lock **lock_p)
{
    gm__hsa_lock *l = gm__calloc(1, sizeof(*l));
    void *agent = NULL;
    gm_status status = GM_OK;

    if (l == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "copy: no memory to track locked host memory");
    status = GM_HSA_CALL(&bctx->api, hsa_amd_memory_lock, (host, extent, &bctx->gpu, 1, &agent));
    if (status != GM_OK) {
        gm__free(l);
        return status;
    }
    l->owner = bctx;
    l->base = host;
    l->size = extent;
    l->agent = agent;
    l->next = copy_locks;
    copy_locks = l;
    *lock_p = l;
    return GM_OK;
}

/* Whether one of this context's copy locks starts at host with another size than extent. */
static bool own_split(const gm_backend_ctx *bctx, const char *host, size_t extent)
{
    bool split = false;

    pthread_mutex_lock(&registry_lock);
    split = other_size_lock(bctx, host, extent) != NULL;
    pthread_mutex_unlock(&registry_lock);
    return split;
}

/*
 * Wait until registering [host, host + extent) would not add a registration
 * of another size at the address of one of this context's copy locks: until
 * the copies using it are done and reaped. The lock is released while
 * waiting; GM_ERR_STATE inside a stream callback (those copies may wait for
 * it), the context's error when it fails meanwhile. Lock held.
 */
static gm_status wait_unsplit(gm_backend_ctx *bctx, const void *host, size_t extent,
                              const char *what)
{
    unsigned rounds = 0;

    while (own_split(bctx, host, extent)) {
        if (gm__hsa_handler_stream != NULL)
            return gm__error(GM_ERR_STATE,
                             "%s: host memory at %p is locked for a pending copy of another "
                             "length, and inside a stream callback waiting for that copy could "
                             "wait for the callback itself; queue the work from another thread",
                             what, host);
        if (rounds % 256 == 255) /* about every 10 ms: work behind a failed op never ends */
            gm__hsa_check_stuck(bctx);
        if (atomic_load(&bctx->queue_failed) != 0)
            return gm__error((gm_status)atomic_load(&bctx->queue_error),
                             "%s: the context failed while waiting for a pending copy of the "
                             "host memory at %p",
                             what, host);
        pthread_mutex_unlock(&bctx->lock);
        gm__hsa_back_off(&rounds);
        pthread_mutex_lock(&bctx->lock);
        gm__hsa_reap_all(bctx); /* the last reaped user of the lock unlocks it */
    }
    return GM_OK;
}

/* registered_agent with registry_lock held. */
static bool registered_locked(const char *host, size_t extent, void **agent_p)
{
    for (const registration *r = registry; r != NULL; r = r->next) {
        if (inside(host, extent, r->base, r->bytes)) {
            if (agent_p != NULL)
                *agent_p = r->agent + (host - r->base);
            return true;
        }
    }
    return false;
}

/* Whether host range [host, host + extent) lies inside one range a context registered;
 * *agent_p (unless agent_p is NULL): the address at which the GPUs reach host. */
static bool registered_agent(const char *host, size_t extent, void **agent_p)
{
    bool found = false;

    pthread_mutex_lock(&registry_lock);
    found = registered_locked(host, extent, agent_p);
    pthread_mutex_unlock(&registry_lock);
    return found;
}

/* Whether device range [agent, agent + extent) lies inside the agent range of one
 * registration (registered memory at its device address). */
static bool registered_host(const char *agent, size_t extent)
{
    bool found = false;

    pthread_mutex_lock(&registry_lock);
    for (const registration *r = registry; r != NULL && !found; r = r->next)
        found = inside(agent, extent, r->agent, r->bytes);
    pthread_mutex_unlock(&registry_lock);
    return found;
}

/*
 * Host memory no lock of the context's holds: registered memory at its
 * registration's agent address, pool memory as the runtime maps it, other
 * memory locked now (*lock_p), including memory another context locked for
 * a copy of the same range (ROCr counts nested locks) - unless a lock of
 * another size starts at host (*split_p). registry_lock held.
 */
static gm_status host_unlocked(gm_backend_ctx *bctx, char *host, size_t extent, void **agent_p,
                               gm__hsa_lock **lock_p, bool *split_p)
{
    hsa_amd_pointer_info_t info;
    gm_status status = GM_OK;

    if (registered_locked(host, extent, agent_p))
        return GM_OK;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    status = GM_HSA_CALL(&bctx->api, hsa_amd_pointer_info, (host, &info, NULL, NULL, NULL));
    if (status != GM_OK)
        return status;
    if (info.type != HSA_EXT_POINTER_TYPE_UNKNOWN && info.type != HSA_EXT_POINTER_TYPE_LOCKED &&
        (uintptr_t)host + extent <= (uintptr_t)info.hostBaseAddress + info.sizeInBytes) {
        *agent_p = agent_address(&info, host);
        return GM_OK;
    }
    if (other_size_at(host, extent)) {
        *split_p = true;
        return GM_OK;
    }
    return lock_range(bctx, host, extent, lock_p);
}

/*
 * The address a DMA engine uses for host memory (never the host address of
 * locked memory: the GPU reaches locked pages at the agent address
 * hsa_amd_memory_lock returned): pageable memory this context already
 * locked, for a range inside that lock, at that lock's agent address; else
 * host_unlocked. A lock is held (*locked_p, a reference) for the copy's
 * lifetime. Lock held.
 */
gm_status gm__hsa_host_for_dma(gm_backend_ctx *bctx, void *host, size_t extent, void **agent_p,
                               gm__hsa_lock **locked_p, bool *split_p)
{
    gm__hsa_lock *lock = NULL;
    gm_status status = GM_OK;

    *locked_p = NULL;
    *split_p = false;
    pthread_mutex_lock(&registry_lock);
    lock = covering_lock(bctx, host, extent);
    if (lock == NULL)
        status = host_unlocked(bctx, host, extent, agent_p, &lock, split_p);
    if (status == GM_OK && lock != NULL) {
        lock->users++;
        *agent_p = lock->agent + ((char *)host - lock->base);
        *locked_p = lock;
    }
    pthread_mutex_unlock(&registry_lock);
    return status;
}

void gm__hsa_lock_release(gm_backend_ctx *bctx, gm__hsa_lock *lock)
{
    gm__hsa_lock **link = &copy_locks;

    pthread_mutex_lock(&registry_lock);
    if (--lock->users == 0) {
        /* unlocked and unlisted in one step: no lock of another size starts at base between */
        (void)GM_HSA_CALL(&bctx->api, hsa_amd_memory_unlock, (lock->base));
        while (*link != NULL && *link != lock)
            link = &(*link)->next;
        if (*link == lock)
            *link = lock->next;
    } else {
        lock = NULL; /* still used */
    }
    pthread_mutex_unlock(&registry_lock);
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
