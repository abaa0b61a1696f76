/*
 * HSA backend lifecycle: load the runtime, hsa_init, find the agents (GPU
 * agents with the kernel-dispatch feature are the devices, in iteration
 * order; the first CPU agent serves host memory), their memory pools, and
 * the device properties.
 */
#include <stdio.h>
#include <string.h>

#include "hsa_internal.h"

/* HSA_AMD_AGENT_INFO_MEMORY_AVAIL (ROCm >= 5.3 headers); older runtimes reject it. */
#define GM_HSA_AGENT_INFO_MEMORY_AVAIL ((hsa_agent_info_t)0xA015)

/* ------------------------------------------------------------- agents */

typedef struct agent_scan {
    gm_backend_ctx *bctx;
    bool have_cpu;
    hsa_status_t failure; /* an agent query failed inside the callback */
} agent_scan;

/* hsa_iterate_agents callback: sort agents into GPUs and the CPU. */
static hsa_status_t scan_agent(hsa_agent_t agent, void *data)
{
    agent_scan *scan = data;
    gm_backend_ctx *bctx = scan->bctx;
    hsa_device_type_t type = HSA_DEVICE_TYPE_DSP;
    uint32_t features = 0;
    hsa_status_t st = bctx->api.hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type);

    if (st == HSA_STATUS_SUCCESS)
        st = bctx->api.hsa_agent_get_info(agent, HSA_AGENT_INFO_FEATURE, &features);
    if (st != HSA_STATUS_SUCCESS) {
        scan->failure = st;
        return st;
    }
    if (type == HSA_DEVICE_TYPE_CPU && !scan->have_cpu) {
        bctx->cpu = agent;
        scan->have_cpu = true;
    } else if (type == HSA_DEVICE_TYPE_GPU && (features & HSA_AGENT_FEATURE_KERNEL_DISPATCH) != 0) {
        if (bctx->ngpus < GM_HSA_MAX_GPUS)
            bctx->gpus[bctx->ngpus++] = agent;
    }
    return HSA_STATUS_SUCCESS;
}

/* Find the CPU agent and GPU number device_id. */
static gm_status find_agents(gm_backend_ctx *bctx, int32_t device_id)
{
    agent_scan scan = {bctx, false, HSA_STATUS_SUCCESS};
    gm_status status = GM_HSA_CALL(&bctx->api, hsa_iterate_agents, (scan_agent, &scan));

    if (status != GM_OK && scan.failure != HSA_STATUS_SUCCESS) /* name the inner call */
        status = gm__hsa_check(scan.failure, &bctx->api, GM_OK, "hsa_agent_get_info", __FILE__,
                               __LINE__);
    if (status != GM_OK)
        return status;
    if (bctx->ngpus == 0)
        return gm__error(GM_ERR_NO_DEVICE, "HSA backend: the runtime reports no GPU agent with "
                                           "the kernel dispatch feature");
    if (!scan.have_cpu)
        return gm__error(GM_ERR_NO_DEVICE, "HSA backend: the runtime reports no CPU agent");
    if (device_id < 0 || (uint32_t)device_id >= bctx->ngpus)
        return gm__error(GM_ERR_NO_DEVICE,
                         "HSA backend: device %d requested, %u GPU agent(s) "
                         "found",
                         (int)device_id, bctx->ngpus);
    bctx->device_id = device_id;
    bctx->gpu = bctx->gpus[device_id];
    return GM_OK;
}

/* -------------------------------------------------------------- pools */

typedef struct pool_scan {
    gm_backend_ctx *bctx;
    bool have_device, have_host, have_kernarg;
    hsa_status_t failure;
} pool_scan;

/* The pool's segment, global flags and whether the runtime allocates from it. */
static hsa_status_t pool_props(const gm__hsa_api *api, hsa_amd_memory_pool_t pool,
                               hsa_amd_segment_t *segment, uint32_t *flags, bool *alloc)
{
    hsa_status_t st =
        api->hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, segment);

    *flags = 0;
    *alloc = false;
    if (st == HSA_STATUS_SUCCESS && *segment == HSA_AMD_SEGMENT_GLOBAL)
        st = api->hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, flags);
    if (st == HSA_STATUS_SUCCESS && *segment == HSA_AMD_SEGMENT_GLOBAL)
        st = api->hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
                                               alloc);
    return st;
}

/* GPU pools: the coarse-grained global pool for arrays, the group segment size. */
static hsa_status_t scan_gpu_pool(hsa_amd_memory_pool_t pool, void *data)
{
    pool_scan *scan = data;
    gm_backend_ctx *bctx = scan->bctx;
    hsa_amd_segment_t segment = HSA_AMD_SEGMENT_PRIVATE;
    uint32_t flags = 0;
    bool alloc = false;
    hsa_status_t st = pool_props(&bctx->api, pool, &segment, &flags, &alloc);

    if (st == HSA_STATUS_SUCCESS && segment == HSA_AMD_SEGMENT_GROUP)
        st = bctx->api.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SIZE,
                                                    &bctx->group_bytes);
    if (st == HSA_STATUS_SUCCESS && segment == HSA_AMD_SEGMENT_GLOBAL && alloc &&
        (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED) != 0 && !scan->have_device) {
        bctx->device_pool = pool;
        scan->have_device = true;
    }
    if (st != HSA_STATUS_SUCCESS)
        scan->failure = st;
    return st;
}

/* CPU pools: fine-grained global for pinned/mapped memory, kernarg-init for arguments. */
static hsa_status_t scan_cpu_pool(hsa_amd_memory_pool_t pool, void *data)
{
    pool_scan *scan = data;
    gm_backend_ctx *bctx = scan->bctx;
    hsa_amd_segment_t segment = HSA_AMD_SEGMENT_PRIVATE;
    uint32_t flags = 0;
    bool alloc = false;
    hsa_status_t st = pool_props(&bctx->api, pool, &segment, &flags, &alloc);

    if (st != HSA_STATUS_SUCCESS) {
        scan->failure = st;
        return st;
    }
    if (segment != HSA_AMD_SEGMENT_GLOBAL || !alloc)
        return HSA_STATUS_SUCCESS;
    if ((flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED) != 0 && !scan->have_host) {
        bctx->host_pool = pool;
        scan->have_host = true;
    }
    if ((flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT) != 0 && !scan->have_kernarg) {
        bctx->kernarg_pool = pool;
        scan->have_kernarg = true;
    }
    return HSA_STATUS_SUCCESS;
}

/* Whether the GPU must be granted access to a CPU pool's allocations. */
static gm_status pool_access(gm_backend_ctx *bctx, hsa_amd_memory_pool_t pool, const char *what,
                             bool *needs_p)
{
    hsa_amd_memory_pool_access_t access = HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED;
    gm_status status =
        GM_HSA_CALL(&bctx->api, hsa_amd_agent_memory_pool_get_info,
                    (bctx->gpu, pool, HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS, &access));

    if (status != GM_OK)
        return status;
    if (access == HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED)
        return gm__error(GM_ERR_NO_DEVICE,
                         "HSA backend: the GPU can never access the CPU's "
                         "%s pool",
                         what);
    *needs_p = access != HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT;
    return GM_OK;
}

static gm_status find_pools(gm_backend_ctx *bctx)
{
    pool_scan scan = {bctx, false, false, false, HSA_STATUS_SUCCESS};
    gm_status status = GM_HSA_CALL(&bctx->api, hsa_amd_agent_iterate_memory_pools,
                                   (bctx->gpu, scan_gpu_pool, &scan));

    if (status == GM_OK)
        status = GM_HSA_CALL(&bctx->api, hsa_amd_agent_iterate_memory_pools,
                             (bctx->cpu, scan_cpu_pool, &scan));
    if (status != GM_OK && scan.failure != HSA_STATUS_SUCCESS) /* name the inner call */
        status = gm__hsa_check(scan.failure, &bctx->api, GM_OK, "hsa_amd_memory_pool_get_info",
                               __FILE__, __LINE__);
    if (status != GM_OK)
        return status;
    if (!scan.have_device || !scan.have_host)
        return gm__error(GM_ERR_NO_DEVICE, "HSA backend: no %s pool the runtime allocates from",
                         !scan.have_device ? "coarse-grained GPU" : "fine-grained CPU");
    if (!scan.have_kernarg)
        bctx->kernarg_pool = bctx->host_pool;
    status = pool_access(bctx, bctx->host_pool, "fine-grained", &bctx->host_pool_needs_access);
    if (status == GM_OK)
        status = pool_access(bctx, bctx->kernarg_pool, "kernarg", &bctx->kernarg_pool_needs_access);
    return status;
}

/* ------------------------------------------------------- device info */

/* The device's name: the marketing name when there is one, else the ISA's (gfx906). */
static gm_status read_name(gm_backend_ctx *bctx, gm_device_info *info)
{
    char product[64] = {0};
    char isa[64] = {0};
    gm_status status =
        GM_HSA_CALL(&bctx->api, hsa_agent_get_info, (bctx->gpu, HSA_AGENT_INFO_NAME, isa));

    if (status != GM_OK)
        return status;
    if (bctx->api.hsa_agent_get_info(bctx->gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_PRODUCT_NAME,
                                     product) != HSA_STATUS_SUCCESS)
        product[0] = '\0';
    product[sizeof(product) - 1] = '\0';
    isa[sizeof(isa) - 1] = '\0';
    snprintf(info->name, sizeof(info->name), "%s", product[0] != '\0' ? product : isa);
    return GM_OK;
}

/* The agent's ISA name, used to pick code objects out of offload bundles. */
static gm_status read_isa(gm_backend_ctx *bctx)
{
    hsa_isa_t isa = {0};
    uint32_t len = 0;
    gm_status status =
        GM_HSA_CALL(&bctx->api, hsa_agent_get_info, (bctx->gpu, HSA_AGENT_INFO_ISA, &isa));

    if (status == GM_OK)
        status =
            GM_HSA_CALL(&bctx->api, hsa_isa_get_info_alt, (isa, HSA_ISA_INFO_NAME_LENGTH, &len));
    if (status == GM_OK && len >= sizeof(bctx->isa_name))
        status = gm__error(GM_ERR_DRIVER, "HSA backend: ISA name of %u bytes", len);
    if (status == GM_OK)
        status =
            GM_HSA_CALL(&bctx->api, hsa_isa_get_info_alt, (isa, HSA_ISA_INFO_NAME, bctx->isa_name));
    return status;
}

/* Limits: wavefront, work-group and grid sizes, queue size, compute units. */
static gm_status read_limits(gm_backend_ctx *bctx, gm_device_info *info)
{
    const gm__hsa_api *api = &bctx->api;
    uint32_t wavefront = 0, wg_max = 0, cus = 0;
    uint16_t wg_dim[3] = {0, 0, 0};
    hsa_dim3_t grid_dim = {0, 0, 0};
    gm_status status = GM_HSA_CALL(api, hsa_agent_get_info,
                                   (bctx->gpu, HSA_AGENT_INFO_WAVEFRONT_SIZE, &wavefront));

    if (status == GM_OK)
        status = GM_HSA_CALL(api, hsa_agent_get_info,
                             (bctx->gpu, HSA_AGENT_INFO_WORKGROUP_MAX_SIZE, &wg_max));
    if (status == GM_OK)
        status = GM_HSA_CALL(api, hsa_agent_get_info,
                             (bctx->gpu, HSA_AGENT_INFO_WORKGROUP_MAX_DIM, wg_dim));
    if (status == GM_OK)
        status = GM_HSA_CALL(api, hsa_agent_get_info,
                             (bctx->gpu, HSA_AGENT_INFO_GRID_MAX_DIM, &grid_dim));
    if (status == GM_OK)
        status = GM_HSA_CALL(api, hsa_agent_get_info,
                             (bctx->gpu, HSA_AGENT_INFO_QUEUE_MAX_SIZE, &bctx->queue_max_size));
    if (status == GM_OK)
        status = GM_HSA_CALL(api, hsa_agent_get_info,
                             (bctx->gpu, HSA_AGENT_INFO_QUEUE_MIN_SIZE, &bctx->queue_min_size));
    if (status == GM_OK)
        status =
            GM_HSA_CALL(api, hsa_agent_get_info,
                        (bctx->gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, &cus));
    if (status == GM_OK)
        status = GM_HSA_CALL(api, hsa_agent_get_info,
                             (bctx->gpu, HSA_AGENT_INFO_PROFILE, &bctx->profile));
    if (status != GM_OK)
        return status;
    info->warp_size = (int32_t)wavefront;
    info->max_threads_per_block = (int32_t)wg_max;
    info->multiprocessor_count = (int32_t)cus;
    for (int i = 0; i < 3; i++)
        info->max_block_dim[i] = wg_dim[i];
    /* HSA grid limits are in work-items; as block counts they hold for 1-wide blocks. */
    info->max_grid_dim[0] = grid_dim.x > INT32_MAX ? INT32_MAX : (int32_t)grid_dim.x;
    info->max_grid_dim[1] = grid_dim.y > INT32_MAX ? INT32_MAX : (int32_t)grid_dim.y;
    info->max_grid_dim[2] = grid_dim.z > INT32_MAX ? INT32_MAX : (int32_t)grid_dim.z;
    return GM_OK;
}

/* Fill bctx->info once at init. */
static gm_status read_device_info(gm_backend_ctx *bctx)
{
    gm_device_info *info = &bctx->info;
    size_t total = 0;
    gm_status status = read_name(bctx, info);

    if (status == GM_OK)
        status = read_limits(bctx, info);
    if (status == GM_OK)
        status = read_isa(bctx);
    if (status == GM_OK)
        status = GM_HSA_CALL(&bctx->api, hsa_amd_memory_pool_get_info,
                             (bctx->device_pool, HSA_AMD_MEMORY_POOL_INFO_SIZE, &total));
    if (status == GM_OK)
        status = GM_HSA_CALL(&bctx->api, hsa_system_get_info,
                             (HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &bctx->timestamp_hz));
    if (status != GM_OK)
        return status;
    if (bctx->timestamp_hz == 0)
        bctx->timestamp_hz = 1000000000u;
    info->backend = GM_BACKEND_HSA;
    info->device_id = bctx->device_id;
    info->total_memory = (int64_t)total;
    info->shared_memory_per_block = (int64_t)bctx->group_bytes;
    return GM_OK;
}

/* --------------------------------------------------------- lifecycle */

/* Undo make_context_objects (whatever part of it was done). */
static void free_context_objects(gm_backend_ctx *bctx)
{
    gm__thread_watch_stop(&bctx->exit_watch); /* no exit notice retires a stream from now on */
    pthread_mutex_lock(&bctx->lock);
    gm__hsa_ipc_detach_all(bctx);
    gm__hsa_stream_free_all(bctx);
    while (bctx->wrappers != NULL) /* held by stream callbacks that never ran */
        gm__hsa_wrapper_free(bctx, bctx->wrappers);
    gm__hsa_sig_unref(bctx, bctx->zero);
    bctx->zero = NULL;
    gm__hsa_sig_cache_drain(bctx);
    while (bctx->nkernargs > 0)
        (void)bctx->api.hsa_amd_memory_pool_free(bctx->kernargs[--bctx->nkernargs]);
    pthread_mutex_unlock(&bctx->lock);
    pthread_mutex_destroy(&bctx->lock);
}

/* Context-wide objects: the lock, the legacy stream, the always-zero signal. */
static gm_status make_context_objects(gm_backend_ctx *bctx)
{
    gm_status status = GM_OK;

    pthread_mutex_init(&bctx->lock, NULL);
    pthread_mutex_init(&bctx->pack_lock, NULL);
    pthread_mutex_lock(&bctx->lock);
    status = gm__hsa_stream_new(bctx, GM_HSA_STREAM_LEGACY, GM_STREAM_DEFAULT, &bctx->legacy);
    if (status == GM_OK)
        status = gm__hsa_sig_new(bctx, 0, &bctx->zero);
    pthread_mutex_unlock(&bctx->lock);
    if (status != GM_OK) {
        free_context_objects(bctx);
        pthread_mutex_destroy(&bctx->pack_lock);
        return status;
    }
    gm__thread_watch_start(&bctx->exit_watch, gm__hsa_thread_exited, bctx);
    return GM_OK;
}

/* Everything after hsa_init succeeded. */
static gm_status open_device(gm_backend_ctx *bctx, int32_t device_id)
{
    gm_status status = find_agents(bctx, device_id);

    if (status == GM_OK)
        status = find_pools(bctx);
    if (status == GM_OK)
        status = read_device_info(bctx);
    if (status == GM_OK)
        status = make_context_objects(bctx);
    return status;
}

gm_status gm__hsa_init(const gm_backend_init_args *args, gm_backend_ctx **bctx_p)
{
    gm_backend_ctx *bctx = gm__calloc(1, sizeof(*bctx));
    gm_status status = GM_OK;
    gm__saved_error saved;

    if (bctx == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "HSA backend: no memory for a context");
    status = gm__hsa_api_load(&bctx->api);
    if (status != GM_OK)
        goto fail_load;
    status = gm__hsa_runtime_open(bctx); /* hsa_init, the memory-fault handler */
    if (status != GM_OK)
        goto fail_init;
    status = open_device(bctx, args != NULL ? args->device_id : 0);
    if (status != GM_OK)
        goto fail_open;
    gm__hsa_fault_watch(bctx);
    gm__log(GM_LOG_INFO, "HSA backend: device %d is %s (%s)", (int)bctx->device_id, bctx->info.name,
            bctx->isa_name);
    *bctx_p = bctx;
    return GM_OK;

fail_open:
    gm__error_save(&saved); /* keep the first error's detail */
    (void)gm__hsa_runtime_close(bctx);
    gm__error_restore(&saved);
fail_init:
    gm__hsa_api_unload(&bctx->api);
fail_load:
    gm__free(bctx);
    return status;
}

void gm__hsa_fini(gm_backend_ctx *bctx)
{
    if (bctx == NULL)
        return;
    free_context_objects(bctx);   /* a memory fault still ends the streams' waits */
    gm__hsa_unregister_all(bctx); /* after the work that may use it was drained */
    gm__hsa_pack_fini(bctx);
    gm__hsa_fault_unwatch(bctx);
    if (gm__hsa_runtime_close(bctx) != GM_OK)
        gm__log(GM_LOG_WARN, "HSA backend: %s", gm_last_error_message());
    gm__hsa_api_unload(&bctx->api);
    gm__free(bctx);
}

gm_status gm__hsa_device_info(gm_backend_ctx *bctx, gm_device_info *info_p)
{
    *info_p = bctx->info;
    return GM_OK;
}

/*
 * Free memory: HSA_AMD_AGENT_INFO_MEMORY_AVAIL where the runtime has it
 * (ROCm >= 5.3); ROCm 5.2 has no query, so there it is the pool size minus
 * what this context allocated (other processes' use is not seen).
 */
gm_status gm__hsa_mem_info(gm_backend_ctx *bctx, int64_t *free_p, int64_t *total_p)
{
    uint64_t avail = 0;
    int64_t total = bctx->info.total_memory;
    int64_t free_bytes = total - atomic_load(&bctx->device_bytes);

    if (bctx->api.hsa_agent_get_info(bctx->gpu, GM_HSA_AGENT_INFO_MEMORY_AVAIL, &avail) ==
            HSA_STATUS_SUCCESS &&
        avail <= (uint64_t)total)
        free_bytes = (int64_t)avail;
    *free_p = free_bytes < 0 ? 0 : free_bytes;
    *total_p = total;
    return GM_OK;
}
