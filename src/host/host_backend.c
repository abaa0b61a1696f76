/*
 * The host simulator backend: lifecycle, device properties, memory and
 * copies. Streams and events are in host_stream.c.
 *
 * Memory model:
 *   - "Device" and managed memory is ordinary host memory, 256-byte aligned,
 *     held apart from user memory and charged against a simulated capacity
 *     (GM_HOST_DEVICE_MEMORY, default half the physical RAM), so running out
 *     of device memory can be tested. A device address is the host address.
 *     Freed device memory is kept for reuse by size class (host_cache.c):
 *     not charged, bounded by GM_HOST_DEVICE_CACHE (when full, the least
 *     recently cached blocks make room), and left in the registry as a
 *     cached region that every lookup treats as absent (freed memory).
 *   - Pinned memory (host_alloc) is page-aligned, page-rounded and mlock'ed,
 *     charged against GM_HOST_PINNED_MEMORY (default device memory / 4).
 *     When mlock fails (RLIMIT_MEMLOCK) or GM_HOST_MLOCK=0, the allocation
 *     still succeeds; an info-level log line says it is not page-locked and
 *     gm__host_is_locked() reports it. MAPPED memory's device pointer is its
 *     host pointer (so is any pinned memory's: unified addressing).
 *     WRITECOMBINED is accepted and has no effect on a CPU.
 *   - host_register mlocks the page-rounded range with the same honesty; it
 *     is not charged against the pinned capacity (it is the user's memory,
 *     bounded by RLIMIT_MEMLOCK). Registering a range that overlaps anything
 *     registered or allocated here fails with GM_ERR_STATE (CUDA's
 *     CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED). Unregistering is immediate
 *     and keeps pages shared with another locked range locked.
 *   - Every allocation and registration is in a registry ordered by address
 *     (a treap, host_registry.c; under mem_lock), which answers pointer_kind
 *     and checks that the device side of every copy and memset lies inside
 *     memory of this context (any kind: the simulator's address space is
 *     unified).
 *
 * Copies run through the strided host copy engine (src/core/hostcopy.c).
 * With a stream they are queued on its worker; without one they run on the
 * caller after waiting as legacy-stream work would (see host_stream.c). A
 * synchronous 1-D copy (what the core issues for dense arrays) takes a
 * shorter path with the same checks: both device sides looked up under one
 * mem_lock, then one memcpy. A synchronous strided copy with a device side
 * reaches the engine on its own views from the core (the copy_views op)
 * instead of through the pitched pieces the core would plan.
 * Overlapping source and destination give undefined results.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "host_backend.h"
#include "host_launch.h"
#include "ndview_internal.h"

/* ------------------------------------------------------------ helpers */

/* The system page size. */
static size_t page_size(void)
{
    long size = sysconf(_SC_PAGESIZE);

    return size > 0 ? (size_t)size : 4096u;
}

/* x rounded up to a multiple of `align` (a power of two); false on overflow. */
static bool round_up(size_t x, size_t align, size_t *out)
{
    if (x > SIZE_MAX - (align - 1))
        return false;
    *out = (x + align - 1) & ~(align - 1);
    return true;
}

/* log2 of the multiplier of a size suffix letter (K, M, G, T, any case), or 0. */
static int unit_shift(char c)
{
    switch (c) {
    case 'K':
    case 'k':
        return 10;
    case 'M':
    case 'm':
        return 20;
    case 'G':
    case 'g':
        return 30;
    case 'T':
    case 't':
        return 40;
    default:
        return 0;
    }
}

/* Parse "64M"-style byte counts: digits, an optional K/M/G/T (powers of 1024)
 * and an optional "B" or "iB". Returns false unless the value is > 0. */
static bool parse_bytes(const char *text, int64_t *out)
{
    char *end = NULL;
    unsigned long long value = 0;
    int shift = 0;

    if (text[0] < '0' || text[0] > '9')
        return false;
    errno = 0;
    value = strtoull(text, &end, 10);
    if (errno != 0 || value == 0)
        return false;
    shift = unit_shift(end[0]);
    end += shift != 0 ? 1 : 0;
    if (strcasecmp(end, "") != 0 && strcasecmp(end, "B") != 0 &&
        !(shift != 0 && strcasecmp(end, "iB") == 0))
        return false;
    if (value > ((unsigned long long)INT64_MAX >> shift))
        return false;
    *out = (int64_t)(value << shift);
    return true;
}

/* A capacity from environment variable `name`, else `fallback`. */
static gm_status env_capacity(const char *name, int64_t fallback, int64_t *out)
{
    const char *text = getenv(name);

    if (text == NULL || text[0] == '\0') {
        *out = fallback;
        return GM_OK;
    }
    if (!parse_bytes(text, out))
        return gm__error(GM_ERR_INVALID_ARG,
                         "init: %s=\"%s\" is not a byte count > 0 (digits with an optional "
                         "K, M, G or T suffix)",
                         name, text);
    return GM_OK;
}

/* Half the physical RAM (the default simulated device memory). */
static int64_t default_device_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES);
    int64_t bytes = 0;

    if (pages <= 0 || gm__mul_overflow((int64_t)pages, (int64_t)page_size(), &bytes))
        return (int64_t)1 << 33;
    return bytes / 2;
}

/* The CPU's model name from /proc/cpuinfo, or "CPU"; false when the file cannot be opened. */
static bool read_cpu_name_file(char *buf, size_t size)
{
    char line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");

    snprintf(buf, size, "CPU");
    if (f == NULL)
        return false;
    while (fgets(line, sizeof line, f) != NULL) {
        char *colon = strchr(line, ':');

        if (strncmp(line, "model name", 10) != 0 || colon == NULL)
            continue;
        colon += strspn(colon + 1, " \t") + 1;
        colon[strcspn(colon, "\n")] = '\0';
        if (colon[0] != '\0')
            snprintf(buf, size, "%s", colon);
        break;
    }
    fclose(f);
    return true;
}

/* The process's CPU model name, once read (cpu_name_lock). */
static pthread_mutex_t cpu_name_lock = PTHREAD_MUTEX_INITIALIZER;
static bool cpu_name_known;
static char cpu_name[128];

/*
 * The CPU's model name into buf. /proc/cpuinfo is read once per process (until
 * a read opens it): the kernel formats every CPU's entry on each read, which
 * took 60% of a host context's creation (about 12 of 19 us on 2 CPUs) and
 * grows with the CPU count.
 */
static void read_cpu_name(char *buf, size_t size)
{
    pthread_mutex_lock(&cpu_name_lock);
    if (!cpu_name_known)
        cpu_name_known = read_cpu_name_file(cpu_name, sizeof cpu_name);
    snprintf(buf, size, "%s", cpu_name);
    pthread_mutex_unlock(&cpu_name_lock);
}

/* --------------------------------------------------------- lifecycle */

/* Whether text is a byte count of zero in parse_bytes's syntax ("0", "00", "0M", "0KiB"). */
static bool zero_bytes(const char *text)
{
    size_t zeros = strspn(text, "0");
    const char *end = text + zeros;

    if (zeros == 0)
        return false;
    end += unit_shift(end[0]) != 0 ? 1 : 0;
    return strcasecmp(end, "") == 0 || strcasecmp(end, "B") == 0 ||
           (end != text + zeros && strcasecmp(end, "iB") == 0);
}

/* The device-memory cache's bound: GM_HOST_DEVICE_CACHE (zero: off), else the default. */
static gm_status cache_limit(int64_t device_total, int64_t *out)
{
    const char *text = getenv(GM_HOST_DEVICE_CACHE_ENV);
    int64_t fallback = device_total / 4;

    if (fallback > ((int64_t)256 << 20))
        fallback = (int64_t)256 << 20;
    if (text != NULL && zero_bytes(text)) {
        *out = 0;
        return GM_OK;
    }
    return env_capacity(GM_HOST_DEVICE_CACHE_ENV, fallback, out);
}

/*
 * The simulator's own variables, read where it runs (fiber.c, sim_pool.c),
 * which cannot report: a malformed value fails the context here instead of
 * being ignored there.
 */
static gm_status check_sim_settings(void)
{
    const char *stack = getenv("GM_SIM_STACK_BYTES");
    const char *threads = getenv("GM_SIM_THREADS");
    int64_t bytes = 0;

    if (stack != NULL && stack[0] != '\0' &&
        (!parse_bytes(stack, &bytes) || bytes < 16384 || bytes > ((int64_t)1 << 30)))
        return gm__error(GM_ERR_INVALID_ARG,
                         "init: GM_SIM_STACK_BYTES=\"%s\" is not a byte count from 16K to 1G "
                         "(digits with an optional K, M or G suffix)",
                         stack);
    if (threads != NULL && threads[0] != '\0') {
        char *end = NULL;
        long n = 0;

        errno = 0;
        n = threads[0] >= '0' && threads[0] <= '9' ? strtol(threads, &end, 10) : 0;
        if (errno != 0 || n <= 0 || end == NULL || *end != '\0')
            return gm__error(GM_ERR_INVALID_ARG,
                             "init: GM_SIM_THREADS=\"%s\" is not a number of threads >= 1",
                             threads);
    }
    return GM_OK;
}

/* Device and pinned capacities, the cache bound and the mlock switch, from the environment. */
static gm_status read_settings(host_ctx *c)
{
    const char *mlock_env = getenv(GM_HOST_MLOCK_ENV);
    gm_status status =
        env_capacity(GM_HOST_DEVICE_MEMORY_ENV, default_device_memory(), &c->device_total);

    if (status == GM_OK)
        status = env_capacity(GM_HOST_PINNED_MEMORY_ENV, c->device_total / 4, &c->pinned_total);
    if (status == GM_OK)
        status = cache_limit(c->device_total, &c->cache.limit);
    if (status == GM_OK)
        status = check_sim_settings();
    c->use_mlock = mlock_env == NULL || strcmp(mlock_env, "0") != 0;
    return status;
}

/* Check init's arguments; the warp size (0 means 32) goes to *warp_p. */
static gm_status check_init_args(const gm_backend_init_args *args, gm_backend_ctx **bctx_p,
                                 int32_t *warp_p)
{
    if (args == NULL || bctx_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "init: %s is NULL", args == NULL ? "args" : "bctx_p");
    if (args->device_id != 0)
        return gm__error(GM_ERR_NO_DEVICE, "init: the host simulator has one device (0), not %d",
                         (int)args->device_id);
    *warp_p = args->host_warp_size == 0 ? 32 : args->host_warp_size;
    if (*warp_p != 32 && *warp_p != 64)
        return gm__error(GM_ERR_INVALID_ARG, "init: host_warp_size must be 32 or 64, got %d",
                         (int)args->host_warp_size);
    return GM_OK;
}

/* Create a host backend context. */
static gm_status host_init(const gm_backend_init_args *args, gm_backend_ctx **bctx_p)
{
    int32_t warp = 32;
    host_ctx *c = NULL;
    gm_status status = check_init_args(args, bctx_p, &warp);

    if (status != GM_OK)
        return status;
    c = gm__calloc(1, sizeof *c);
    if (c == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "init: out of memory");
    c->device_id = args->device_id;
    c->warp_size = warp;
    read_cpu_name(c->cpu_name, sizeof c->cpu_name);
    status = read_settings(c);
    if (status != GM_OK)
        goto free_ctx;
    gm__lock_init(&c->mem_lock);
    status = gm__host_streams_init(c);
    if (status != GM_OK)
        goto free_ctx;
    *bctx_p = (gm_backend_ctx *)(void *)c;
    return GM_OK;

free_ctx:
    gm__free(c);
    return status;
}

/* Undo a region's mlock and, for allocations, free its memory. */
static void release_region(const host_region *r)
{
    if (r->locked)
        (void)munlock((void *)r->lock_base, r->lock_bytes);
    if (!r->registered)
        free((void *)r->base);
}

/* Drain and join every stream, free every allocation still registered and every cached block. */
static void host_fini(gm_backend_ctx *bctx)
{
    host_ctx *c = gm__host_ctx(bctx);
    size_t live = 0;

    if (c == NULL)
        return;
    gm__host_streams_fini(c);
    live = c->registry.count;
    for (int k = 0; k < GM_HOST_CACHE_CLASSES; k++)
        live -= (size_t)c->cache.counts[k];
    if (live > 0)
        gm__log(GM_LOG_DEBUG, "host backend fini: releasing %zu allocations and registrations",
                live);
    /* Cached blocks are regions too: this frees each of them once, with the live ones.
     * Pinned, mapped and registered memory leaves the process's record, its pages unlocked
     * but those another span (of any context, this one's not yet released included)
     * shares. */
    for (host_region *r = gm__host_registry_first(&c->registry); r != NULL;
         r = gm__host_registry_next(r)) {
        if (r->registered || r->kind == GM_MEMORY_PINNED || r->kind == GM_MEMORY_MAPPED) {
            gm__host_span_release(c, r->base, r->locked ? r->lock_base : 0,
                                  r->locked ? r->lock_base + r->lock_bytes : 0);
            if (!r->registered)
                free((void *)r->base);
        } else {
            release_region(r);
        }
    }
    gm__host_registry_free(&c->registry);
    gm__free(c);
}

/* Device properties (CUDA-like for warp 32, HSA-like for wavefront 64). */
static gm_status host_device_info(gm_backend_ctx *bctx, gm_device_info *info_p)
{
    host_ctx *c = gm__host_ctx(bctx);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);

    if (info_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "device_info: info_p is NULL");
    memset(info_p, 0, sizeof *info_p);
    snprintf(info_p->name, sizeof info_p->name, "gpumem host simulator (%s)", c->cpu_name);
    info_p->backend = GM_BACKEND_HOST;
    info_p->device_id = c->device_id;
    info_p->total_memory = c->device_total;
    info_p->warp_size = c->warp_size;
    info_p->max_threads_per_block = 1024;
    info_p->shared_memory_per_block = c->warp_size == 64 ? 64 * 1024 : 48 * 1024;
    info_p->multiprocessor_count = cpus > 0 ? (int32_t)cpus : 1;
    info_p->max_block_dim[0] = 1024;
    info_p->max_block_dim[1] = 1024;
    info_p->max_block_dim[2] = 64;
    info_p->max_grid_dim[0] = INT32_MAX;
    info_p->max_grid_dim[1] = 65535;
    info_p->max_grid_dim[2] = 65535;
    return GM_OK;
}

/* Free and total simulated device memory. */
static gm_status host_mem_info(gm_backend_ctx *bctx, int64_t *free_p, int64_t *total_p)
{
    host_ctx *c = gm__host_ctx(bctx);

    if (free_p == NULL || total_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "mem_info: %s is NULL",
                         free_p == NULL ? "free_p" : "total_p");
    gm__lock_take(&c->mem_lock);
    /* in whole GM_HOST_DEVICE_ALIGNMENT units, the granule allocations are charged in:
     * an allocation of the free bytes fits (a GM_HOST_DEVICE_MEMORY of 1000 has 768) */
    *free_p =
        (c->device_total - c->device_used) / GM_HOST_DEVICE_ALIGNMENT * GM_HOST_DEVICE_ALIGNMENT;
    *total_p = c->device_total;
    gm__lock_give(&c->mem_lock);
    return GM_OK;
}

/* ----------------------------------------------------------- registry */

/*
 * The live region containing [addr, addr + bytes) (bytes may be 0), or NULL
 * (mem_lock held). When the floor is a cached region, no live region can
 * contain addr: one below it would overlap it (see host_region).
 */
static host_region *region_find(host_ctx *c, uintptr_t addr, size_t bytes)
{
    host_region *r = gm__host_registry_floor_hinted(&c->registry, addr);

    if (r == NULL || !gm__host_region_live(r) || addr - r->base >= r->bytes ||
        bytes > r->bytes - (addr - r->base))
        return NULL;
    return r;
}

/* The live region that starts exactly at addr, or NULL (mem_lock held). */
static host_region *region_at(host_ctx *c, uintptr_t addr)
{
    host_region *r = gm__host_registry_find(&c->registry, addr);

    return r != NULL && gm__host_region_live(r) ? r : NULL;
}

/* Whether a region is device-kind and its block, [base, base + capacity), reaches past addr. */
static bool block_reaches(const host_region *r, uintptr_t addr)
{
    return (r->kind == GM_MEMORY_DEVICE || r->kind == GM_MEMORY_MANAGED) &&
           r->base + r->capacity > addr;
}

/*
 * The end of what a live region holds against a registration: a pinned or
 * mapped allocation its whole pages (locked and charged with it, as other
 * contexts see it: host_spans.c), anything else its bytes.
 */
static uintptr_t held_end(const host_region *r)
{
    if (!r->registered && (r->kind == GM_MEMORY_PINNED || r->kind == GM_MEMORY_MAPPED))
        return r->base + r->charged;
    return r->base + r->bytes;
}

/*
 * Make room for a registration of [base, base + bytes) (mem_lock held):
 * false, changing nothing, when it overlaps a live region. Otherwise the
 * cached blocks it meets (the caller registers freed device memory) are
 * evicted onto *evicted_p, to be freed, and a live device region whose
 * block's tail it meets is marked tail_shared, so that its block is freed
 * instead of cached: either way no cached block ever overlaps another region.
 */
static bool register_room(host_ctx *c, uintptr_t base, size_t bytes, void **evicted_p)
{
    host_region *below = gm__host_registry_floor(&c->registry, base);
    host_region *first = NULL;
    uintptr_t end = base + bytes; /* check_register rules out overflow */

    if (below != NULL && below->base < base) {
        if (gm__host_region_live(below) && held_end(below) > base)
            return false;
        first = gm__host_registry_next(below);
    } else {
        first = below != NULL ? below : gm__host_registry_first(&c->registry);
        below = NULL;
    }
    for (host_region *r = first; r != NULL && r->base < end; r = gm__host_registry_next(r))
        if (gm__host_region_live(r))
            return false;
    if (below != NULL && block_reaches(below, base)) {
        if (gm__host_region_live(below))
            below->tail_shared = true;
        else
            gm__host_cache_evict(&c->cache, &c->registry, below, evicted_p);
    }
    for (host_region *r = first, *next = NULL; r != NULL && r->base < end; r = next) {
        next = gm__host_registry_next(r);
        gm__host_cache_evict(&c->cache, &c->registry, r, evicted_p);
    }
    return true;
}

/* Insert r in order (mem_lock held). */
static gm_status region_insert(host_ctx *c, const host_region *r, const char *fn)
{
    if (gm__host_registry_insert(&c->registry, r) == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of memory for the registry", fn);
    return GM_OK;
}

bool gm__host_is_locked(gm_backend_ctx *bctx, const void *ptr)
{
    host_ctx *c = gm__host_ctx(bctx);
    const host_region *r = NULL;
    bool locked = false;

    if (c == NULL)
        return false;
    gm__lock_take(&c->mem_lock);
    r = region_find(c, (uintptr_t)ptr, 0);
    locked = r != NULL && r->locked;
    gm__lock_give(&c->mem_lock);
    return locked;
}

/* ---------------------------------------------------------- page locks */

/* mlock [base, base + bytes), or say honestly (info) why the pages stay pageable. */
static bool lock_pages(const host_ctx *c, uintptr_t base, size_t bytes, const char *fn)
{
    struct rlimit limit = {0, 0};
    char reason[128] = "GM_HOST_MLOCK=0";

    if (c->use_mlock && mlock((void *)base, bytes) == 0)
        return true;
    if (c->use_mlock) {
        int err = errno;

        (void)getrlimit(RLIMIT_MEMLOCK, &limit);
        if (limit.rlim_cur == RLIM_INFINITY)
            snprintf(reason, sizeof reason,
                     "mlock failed with errno %d; RLIMIT_MEMLOCK is unlimited", err);
        else
            snprintf(reason, sizeof reason,
                     "mlock failed with errno %d; RLIMIT_MEMLOCK is %llu bytes", err,
                     (unsigned long long)limit.rlim_cur);
    }
    gm__log(GM_LOG_INFO,
            "%s: %zu bytes at %p are NOT page-locked (%s); they work, but as "
            "pageable memory",
            fn, bytes, (void *)base, reason);
    return false;
}

/* ------------------------------------------------------------ memory */

/* The error of a charge that does not fit. */
static gm_status charge_error(const host_ctx *c, const int64_t *used, int64_t total, int64_t in_use,
                              size_t bytes, gm_status oom, const char *fn)
{
    return gm__error(oom, "%s: cannot allocate %zu bytes: %lld of %lld bytes in use (%s)", fn,
                     bytes, (long long)in_use, (long long)total,
                     used == &c->device_used ? GM_HOST_DEVICE_MEMORY_ENV
                                             : GM_HOST_PINNED_MEMORY_ENV);
}

/* Charge `bytes` against a capacity; GM_OK or `oom` (mem_lock taken here). */
static gm_status charge(host_ctx *c, int64_t *used, int64_t total, size_t bytes, gm_status oom,
                        const char *fn)
{
    gm_status status = GM_OK;
    int64_t in_use = 0;

    gm__lock_take(&c->mem_lock);
    in_use = *used;
    if (bytes > (size_t)INT64_MAX || (int64_t)bytes > total - in_use)
        status = oom;
    else
        *used += (int64_t)bytes;
    gm__lock_give(&c->mem_lock);
    if (status != GM_OK)
        return charge_error(c, used, total, in_use, bytes, status, fn);
    return GM_OK;
}

/* Give back a charge. */
static void uncharge(host_ctx *c, int64_t *used, size_t bytes)
{
    gm__lock_take(&c->mem_lock);
    *used -= (int64_t)bytes;
    gm__lock_give(&c->mem_lock);
}

/* Whether a region kind is charged against the device capacity. */
static bool is_device_kind(int kind)
{
    return kind == GM_MEMORY_DEVICE || kind == GM_MEMORY_MANAGED;
}

/* The counter a region of this kind is charged against. */
static int64_t *used_counter(host_ctx *c, int kind)
{
    return is_device_kind(kind) ? &c->device_used : &c->pinned_used;
}

/*
 * Whether a region inserted at r's place overlaps a neighbour: only when the
 * caller registered memory it did not own (since handed out by the C library
 * as r's block), but such a block must not be cached (mem_lock held).
 */
static bool block_shared(host_region *r)
{
    host_region *prev = gm__host_registry_prev(r);
    host_region *next = gm__host_registry_next(r);

    return (prev != NULL && prev->base + prev->bytes > r->base) ||
           (next != NULL && next->base - r->base < r->capacity);
}

/* Register an allocated region, undoing the allocation if the registry is full. */
static gm_status add_allocation(host_ctx *c, const host_region *r, const char *fn)
{
    host_region *at = NULL;

    gm__lock_take(&c->mem_lock);
    at = gm__host_registry_insert(&c->registry, r);
    if (at == NULL)
        *used_counter(c, r->kind) -= (int64_t)r->charged;
    else if (is_device_kind(r->kind))
        at->tail_shared = block_shared(at);
    gm__lock_give(&c->mem_lock);
    if (at == NULL) {
        release_region(r);
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of memory for the registry", fn);
    }
    return GM_OK;
}

/* The cache class of a device allocation and the capacity to allocate (-1: uncached). */
static int device_class(const host_ctx *c, size_t charged, size_t *capacity_p)
{
    *capacity_p = charged;
    if (c->cache.limit == 0)
        return -1;
    return gm__host_cache_class(charged, capacity_p);
}

/* A device allocation's sizes and class (what device_alloc works out before taking mem_lock). */
typedef struct device_request {
    size_t bytes;
    size_t charged;
    size_t capacity;
    int klass;
    int kind;
} device_request;

/* A cached region just taken made live for a device allocation (mem_lock held). */
static inline void region_reused(host_region *r, size_t bytes, size_t charged, int kind)
{
    r->bytes = bytes;
    r->charged = charged;
    r->kind = kind;
}

/*
 * Charge a device allocation and, when the cache has a block of its class,
 * make that block's region live for it: one mem_lock, no registry insertion,
 * for the common case. *base_p is the block's address, or stays 0 when there
 * was none; a cached block found written after mem_free goes to *bad_p.
 */
static gm_status charge_or_reuse(host_ctx *c, const device_request *q, uintptr_t *base_p,
                                 void **bad_p, const char *fn)
{
    host_region *r = NULL;
    int64_t in_use = 0;
    bool fits = false;

    gm__lock_take(&c->mem_lock);
    in_use = c->device_used;
    fits = q->charged <= (size_t)INT64_MAX && (int64_t)q->charged <= c->device_total - in_use;
    if (fits) {
        c->device_used += (int64_t)q->charged;
        r = gm__host_cache_take(&c->cache, &c->registry, q->klass, q->bytes, bad_p);
        if (r != NULL) {
            region_reused(r, q->bytes, q->charged, q->kind);
            *base_p = r->base;
        }
    }
    gm__lock_give(&c->mem_lock);
    if (!fits)
        return charge_error(c, &c->device_used, c->device_total, in_use, q->charged,
                            GM_ERR_OUT_OF_DEVICE_MEMORY, fn);
    return GM_OK;
}

/* A new 256-aligned block; when the C library has none, the cache is released and it retries. */
static void *fresh_block(host_ctx *c, size_t capacity)
{
    void *p = NULL;
    void *dropped = NULL;

    if (posix_memalign(&p, GM_HOST_DEVICE_ALIGNMENT, capacity) == 0)
        return p;
    gm__lock_take(&c->mem_lock);
    dropped = gm__host_cache_drop(&c->cache, &c->registry);
    gm__lock_give(&c->mem_lock);
    if (dropped == NULL)
        return NULL;
    gm__host_cache_free(dropped);
    return posix_memalign(&p, GM_HOST_DEVICE_ALIGNMENT, capacity) == 0 ? p : NULL;
}

/* A device allocation the cache could not serve (charged already): a new block, registered. */
static gm_status fresh_allocation(host_ctx *c, const device_request *q, gm_devptr *ptr_p,
                                  const char *fn)
{
    host_region r = {0};
    void *p = fresh_block(c, q->capacity);
    gm_status status = GM_OK;

    if (p == NULL) {
        uncharge(c, &c->device_used, q->charged);
        return gm__error(GM_ERR_OUT_OF_DEVICE_MEMORY,
                         "%s: host memory for %zu bytes of "
                         "simulated device memory is exhausted",
                         fn, q->bytes);
    }
    gm__host_poison_tail(p, q->bytes, q->capacity);
    r.base = (uintptr_t)p;
    r.bytes = q->bytes;
    r.charged = q->charged;
    r.capacity = q->capacity;
    r.kind = q->kind;
    r.klass = (int16_t)q->klass;
    status = add_allocation(c, &r, fn);
    if (status == GM_OK)
        *ptr_p = (gm_devptr)r.base;
    return status;
}

/* Device or managed memory: charged, 256-byte aligned, registered; cached blocks first. */
static gm_status device_alloc(host_ctx *c, size_t bytes, int kind, gm_devptr *ptr_p, const char *fn)
{
    device_request q;
    uintptr_t base = 0;
    void *bad = NULL;
    gm_status status = GM_OK;

    if (ptr_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: ptr_p is NULL", fn);
    if (bytes == 0)
        return gm__error(GM_ERR_INVALID_ARG, "%s: cannot allocate 0 bytes", fn);
    if (!round_up(bytes, GM_HOST_DEVICE_ALIGNMENT, &q.charged))
        return gm__error(GM_ERR_OUT_OF_DEVICE_MEMORY, "%s: %zu bytes is too large", fn, bytes);
    q.bytes = bytes;
    q.kind = kind;
    q.klass = device_class(c, q.charged, &q.capacity);
    status = charge_or_reuse(c, &q, &base, &bad, fn);
    if (bad != NULL)
        gm__host_cache_discard(bad, q.capacity);
    if (status != GM_OK)
        return status;
    if (base == 0)
        return fresh_allocation(c, &q, ptr_p, fn);
    *ptr_p = (gm_devptr)base;
    return GM_OK;
}

/*
 * Allocate simulated device memory. The common case first, with no call: a
 * cached size, a charge that fits and an intact cached block of its class,
 * taken under one mem_lock (device_alloc's result for it); anything else
 * (errors, a fresh block, a cached block written after mem_free) is
 * device_alloc's, from the start.
 */
static gm_status host_mem_alloc(gm_backend_ctx *bctx, size_t bytes, gm_devptr *ptr_p)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_region *r = NULL;
    size_t charged = 0, capacity = 0;

    if (ptr_p != NULL && bytes - 1 < GM_HOST_CACHE_MAX_BLOCK && c->cache.limit != 0 &&
        round_up(bytes, GM_HOST_DEVICE_ALIGNMENT, &charged)) {
        int klass = gm__host_cache_class(charged, &capacity);
        uintptr_t base = 0;

        gm__lock_take(&c->mem_lock);
        if ((int64_t)charged <= c->device_total - c->device_used)
            r = gm__host_cache_take_intact(&c->cache, klass, bytes);
        if (r != NULL) {
            c->device_used += (int64_t)charged;
            region_reused(r, bytes, charged, GM_MEMORY_DEVICE);
            base = r->base;
        }
        gm__lock_give(&c->mem_lock);
        if (r != NULL) {
            *ptr_p = (gm_devptr)base;
            return GM_OK;
        }
    }
    return device_alloc(c, bytes, GM_MEMORY_DEVICE, ptr_p, "mem_alloc");
}

/* Allocate managed memory (the same host memory; charged as device memory). */
static gm_status host_managed_alloc(gm_backend_ctx *bctx, size_t bytes, gm_devptr *ptr_p)
{
    return device_alloc(gm__host_ctx(bctx), bytes, GM_MEMORY_MANAGED, ptr_p, "managed_alloc");
}

/*
 * Free the live allocation starting at ptr if it is device-kind (or not):
 * a cacheable device block just becomes a cached region (one lookup, no
 * registry change, beyond the removal of the least recently cached blocks
 * it evicts to make room: those are freed after mem_lock); any other is
 * removed from the registry and released after mem_lock (release_region's
 * work: only its lock range is kept, since the node may be reused at once).
 */
static gm_status free_region(host_ctx *c, uintptr_t ptr, bool device, const char *fn)
{
    host_region *at = NULL;
    uintptr_t lock_base = 0;
    size_t lock_bytes = 0;
    void *evicted = NULL;
    bool found = false, cached = false, locked = false;

    gm__lock_take(&c->mem_lock);
    at = region_at(c, ptr);
    found = at != NULL && !at->registered && is_device_kind(at->kind) == device;
    if (found) {
        *used_counter(c, at->kind) -= (int64_t)at->charged;
        cached = device && !at->tail_shared &&
                 gm__host_cache_keep(&c->cache, &c->registry, at, &evicted);
        if (!cached) {
            locked = at->locked;
            lock_base = at->lock_base;
            lock_bytes = at->lock_bytes;
            gm__host_registry_remove(&c->registry, at);
        }
    }
    gm__lock_give(&c->mem_lock);
    if (evicted != NULL)
        gm__host_cache_free(evicted);
    if (!found)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: %p is not the start of a live %s allocation of this context", fn,
                         (void *)ptr, device ? "device" : "pinned host");
    if (!cached) {
        if (!device) /* out of the record; its pages are its own */
            gm__host_span_release(c, ptr, locked ? lock_base : 0,
                                  locked ? lock_base + lock_bytes : 0);
        else if (locked)
            (void)munlock((void *)lock_base, lock_bytes);
        free((void *)ptr);
    }
    return GM_OK;
}

/* Free device or managed memory. */
static gm_status host_mem_free(gm_backend_ctx *bctx, gm_devptr ptr)
{
    return free_region(gm__host_ctx(bctx), (uintptr_t)ptr, true, "mem_free");
}

/*
 * Free a run of device allocations under one mem_lock while each is a live
 * device block that the cache keeps (free_region's common case, without a
 * call, a lock round trip and the checks of the other cases per block);
 * stops at the first that is anything else, for mem_free.
 */
static size_t host_mem_free_batch(gm_backend_ctx *bctx, const gm_devptr *ptrs, size_t n)
{
    host_ctx *c = gm__host_ctx(bctx);
    void *evicted = NULL;
    size_t done = 0;

    gm__lock_take(&c->mem_lock);
    for (; done < n; done++) {
        host_region *at = region_at(c, (uintptr_t)ptrs[done]);

        /* what gm__host_cache_keep accepts for certain (it may evict to make room) */
        if (at == NULL || at->registered || at->kind != GM_MEMORY_DEVICE || at->tail_shared ||
            at->klass < 0 || (int64_t)at->capacity > c->cache.limit)
            break;
        c->device_used -= (int64_t)at->charged;
        (void)gm__host_cache_keep(&c->cache, &c->registry, at, &evicted);
    }
    gm__lock_give(&c->mem_lock);
    if (evicted != NULL)
        gm__host_cache_free(evicted);
    return done;
}

/* Page-locked (and optionally mapped) host memory. */
static gm_status host_host_alloc(gm_backend_ctx *bctx, size_t bytes, unsigned flags, void **ptr_p)
{
    static const char fn[] = "host_alloc";
    const unsigned known = GM_HOST_PORTABLE | GM_HOST_WRITECOMBINED | GM_HOST_MAPPED;
    host_ctx *c = gm__host_ctx(bctx);
    host_region r = {0};
    void *p = NULL;
    gm_status status = GM_OK;

    if (ptr_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: ptr_p is NULL", fn);
    if (bytes == 0 || (flags & ~known) != 0)
        return gm__error(GM_ERR_INVALID_ARG, "%s: %s", fn,
                         bytes == 0 ? "cannot allocate 0 bytes" : "unknown flags");
    if (!round_up(bytes, page_size(), &r.charged))
        return gm__error(GM_ERR_NO_MEMORY, "%s: %zu bytes is too large", fn, bytes);
    status = charge(c, &c->pinned_used, c->pinned_total, r.charged, GM_ERR_NO_MEMORY, fn);
    if (status != GM_OK)
        return status;
    if (posix_memalign(&p, page_size(), r.charged) != 0) {
        uncharge(c, &c->pinned_used, r.charged);
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory for %zu bytes", fn, bytes);
    }
    gm__host_poison_tail(p, bytes, r.charged);
    r.base = r.lock_base = (uintptr_t)p;
    r.bytes = bytes;
    r.lock_bytes = r.charged;
    r.kind = (flags & GM_HOST_MAPPED) != 0 ? GM_MEMORY_MAPPED : GM_MEMORY_PINNED;
    r.klass = -1;
    status = gm__host_span_claim(c, &r, r.charged, (flags & GM_HOST_PORTABLE) != 0, fn);
    if (status != GM_OK) { /* out of memory for the record */
        free(p);
        uncharge(c, &c->pinned_used, r.charged);
        return status;
    }
    r.locked = lock_pages(c, r.lock_base, r.lock_bytes, fn);
    if (!r.locked)
        gm__host_span_unlocked(c, r.base);
    status = add_allocation(c, &r, fn); /* on failure: unlocked, freed and uncharged */
    if (status != GM_OK)
        gm__host_span_release(c, r.base, 0, 0);
    if (status == GM_OK)
        *ptr_p = p;
    return status;
}

/* Free memory from host_alloc. */
static gm_status host_host_free(gm_backend_ctx *bctx, void *ptr)
{
    return free_region(gm__host_ctx(bctx), (uintptr_t)ptr, false, "host_free");
}

/* Device address of pinned or mapped host memory: the host address itself. */
static gm_status host_host_device_pointer(gm_backend_ctx *bctx, void *host, gm_devptr *ptr_p)
{
    host_ctx *c = gm__host_ctx(bctx);
    const host_region *r = NULL;
    bool ok = false;

    if (host == NULL || ptr_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "host_device_pointer: %s is NULL",
                         host == NULL ? "host" : "ptr_p");
    gm__lock_take(&c->mem_lock);
    r = region_find(c, (uintptr_t)host, 0);
    ok = r != NULL && (r->kind == GM_MEMORY_PINNED || r->kind == GM_MEMORY_MAPPED);
    gm__lock_give(&c->mem_lock);
    if (!ok) /* another context's portable memory is this one's too */
        ok = gm__host_span_portable_kind(c, (uintptr_t)host, 0) != GM_MEMORY_HOST;
    if (!ok)
        return gm__error(GM_ERR_INVALID_ARG,
                         "host_device_pointer: %p is not pinned or mapped "
                         "host memory of this context",
                         host);
    *ptr_p = (gm_devptr)(uintptr_t)host;
    return GM_OK;
}

/* Check host_register's arguments. */
static gm_status check_register(const void *ptr, size_t bytes, unsigned flags)
{
    const unsigned known = GM_HOST_PORTABLE | GM_HOST_MAPPED;

    if (ptr == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "host_register: ptr is NULL");
    if (bytes == 0 || bytes > UINTPTR_MAX - 2 * page_size() ||
        (uintptr_t)ptr > UINTPTR_MAX - 2 * page_size() - bytes)
        return gm__error(GM_ERR_INVALID_ARG, "host_register: bad size %zu", bytes);
    if ((flags & ~known) != 0)
        return gm__error(GM_ERR_INVALID_ARG, "host_register: unknown flags 0x%x", flags);
    return GM_OK;
}

/*
 * Whether every page of [lock_base, lock_base + lock_bytes) (page-aligned) is
 * mapped: mincore fails with ENOMEM on a page that is not. cuMemHostRegister
 * refuses such a range; mlock would lock the mapped part, then fail.
 */
static bool range_mapped(uintptr_t lock_base, size_t lock_bytes)
{
    unsigned char residency[1024];
    size_t ps = page_size(), chunk = sizeof(residency) * ps;

    for (size_t done = 0; done < lock_bytes; done += chunk) {
        size_t n = lock_bytes - done < chunk ? lock_bytes - done : chunk;

        if (mincore((void *)(lock_base + done), n, residency) != 0 && errno == ENOMEM)
            return false;
    }
    return true;
}

/* Page-lock existing user memory. */
static gm_status host_host_register(gm_backend_ctx *bctx, void *ptr, size_t bytes, unsigned flags)
{
    host_ctx *c = gm__host_ctx(bctx);
    size_t ps = page_size();
    host_region r = {0};
    void *evicted = NULL;
    gm_status status = check_register(ptr, bytes, flags);

    if (status != GM_OK)
        return status;
    r.base = (uintptr_t)ptr;
    r.bytes = bytes;
    r.registered = true;
    r.kind = (flags & GM_HOST_MAPPED) != 0 ? GM_MEMORY_MAPPED : GM_MEMORY_PINNED;
    r.klass = -1;
    r.lock_base = r.base & ~(uintptr_t)(ps - 1);
    r.lock_bytes = ((r.base + bytes + ps - 1) & ~(uintptr_t)(ps - 1)) - r.lock_base;
    if (!range_mapped(r.lock_base, r.lock_bytes))
        return gm__error(GM_ERR_INVALID_ARG,
                         "host_register: [%p, %p) is not all mapped memory (freed, or never "
                         "allocated)",
                         ptr, (void *)(r.base + bytes));
    gm__lock_take(&c->mem_lock);
    if (!register_room(c, r.base, bytes, &evicted)) {
        status = gm__error(GM_ERR_STATE,
                           "host_register: [%p, %p) overlaps memory already "
                           "registered or allocated by this context",
                           ptr, (void *)(r.base + bytes));
    } else {
        status =
            gm__host_span_claim(c, &r, bytes, (flags & GM_HOST_PORTABLE) != 0, "host_register");
        if (status == GM_OK) {
            r.locked = lock_pages(c, r.lock_base, r.lock_bytes, "host_register");
            if (!r.locked)
                gm__host_span_unlocked(c, r.base);
            status = region_insert(c, &r, "host_register");
            if (status != GM_OK)
                gm__host_span_release(c, r.base, r.locked ? r.lock_base : 0,
                                      r.locked ? r.lock_base + r.lock_bytes : 0);
        }
    }
    gm__lock_give(&c->mem_lock);
    gm__host_cache_free(evicted);
    return status;
}

/*
 * Undo host_register (pages another locked range shares stay locked), after the
 * context's queued work, which may use the range (cuMemHostUnregister waits too; a
 * copy through gm_map's device view must find it registered).
 */
static gm_status host_host_unregister(gm_backend_ctx *bctx, void *ptr)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_region *at = NULL;
    bool found = false;
    gm_status status = gm__host_device_synchronize(bctx);

    if (status != GM_OK)
        return status;
    gm__lock_take(&c->mem_lock);
    at = region_at(c, (uintptr_t)ptr);
    found = at != NULL && at->registered;
    if (found) { /* its pages unlocked but those another span shares */
        gm__host_span_release(c, at->base, at->locked ? at->lock_base : 0,
                              at->locked ? at->lock_base + at->lock_bytes : 0);
        gm__host_registry_remove(&c->registry, at);
    }
    gm__lock_give(&c->mem_lock);
    if (!found)
        return gm__error(GM_ERR_INVALID_ARG,
                         "host_unregister: %p is not the start of a "
                         "registered range of this context",
                         ptr);
    return GM_OK;
}

/* Which kind of memory of this context ptr lies in (GM_MEMORY_HOST if none). */
static gm_status host_pointer_kind(gm_backend_ctx *bctx, const void *ptr, int *kind_p)
{
    host_ctx *c = gm__host_ctx(bctx);
    const host_region *r = NULL;

    if (kind_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "pointer_kind: kind_p is NULL");
    gm__lock_take(&c->mem_lock);
    r = region_find(c, (uintptr_t)ptr, 0);
    *kind_p = r != NULL                                      ? r->kind
              : gm__host_module_global(c, (uintptr_t)ptr, 0) ? GM_MEMORY_DEVICE
                                                             : GM_MEMORY_HOST;
    gm__lock_give(&c->mem_lock);
    if (*kind_p == GM_MEMORY_HOST && ptr != NULL)
        *kind_p = gm__host_span_portable_kind(c, (uintptr_t)ptr, 0);
    return GM_OK;
}

/* ------------------------------------------------------------- copies */

/* Whether [addr, +bytes) lies inside one live region or one loaded module global of this
 * context (mem_lock held). */
static bool own_range_locked(host_ctx *c, uintptr_t addr, size_t bytes)
{
    return region_find(c, addr, bytes) != NULL || gm__host_module_global(c, addr, bytes);
}

/* GM_OK if [addr, addr + bytes) lies in memory of this context. */
static gm_status check_device_range(host_ctx *c, uintptr_t addr, size_t bytes, const char *what,
                                    const char *fn)
{
    bool ok = false;

    if (bytes == 0)
        return GM_OK;
    gm__lock_take(&c->mem_lock);
    ok = own_range_locked(c, addr, bytes);
    gm__lock_give(&c->mem_lock);
    if (!ok) /* another context's portable memory */
        ok = gm__host_span_portable_kind(c, addr, bytes) != GM_MEMORY_HOST;
    if (!ok)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: %s range [%p, +%zu) is not inside device, "
                         "managed, pinned or mapped memory of this context",
                         fn, what, (void *)addr, bytes);
    return GM_OK;
}

/* Bytes spanned by one side of a pitched copy; false if the layout is invalid. */
static bool pitched_extent(const gm_copy_desc *d, size_t pitch, size_t rows, size_t *out)
{
    size_t plane = 0, last_plane = 0, last_row = 0;

    if (d->height > 1 && pitch < d->width_bytes)
        return false;
    if (d->depth > 1 && rows < d->height)
        return false;
    if (__builtin_mul_overflow(pitch, rows, &plane) ||
        __builtin_mul_overflow(plane, d->depth - 1, &last_plane) ||
        __builtin_mul_overflow(pitch, d->height - 1, &last_row) ||
        __builtin_add_overflow(last_plane, last_row, out) ||
        __builtin_add_overflow(*out, d->width_bytes, out) || *out > (size_t)INT64_MAX)
        return false;
    return true;
}

/* Validate a pitched copy: layouts, and device sides inside this context's memory. */
static gm_status check_copy(host_ctx *c, const gm_copy_desc *d)
{
    size_t dst_bytes = 0, src_bytes = 0;
    gm_status status = GM_OK;

    if (!pitched_extent(d, d->dst_pitch, d->dst_height, &dst_bytes) ||
        !pitched_extent(d, d->src_pitch, d->src_height, &src_bytes))
        return gm__error(GM_ERR_INVALID_ARG,
                         "copy: invalid layout (width %zu, height %zu, "
                         "depth %zu; pitches %zu/%zu, plane rows %zu/%zu)",
                         d->width_bytes, d->height, d->depth, d->dst_pitch, d->src_pitch,
                         d->dst_height, d->src_height);
    if (d->dst == 0 || d->src == 0)
        return gm__error(GM_ERR_NULL_POINTER, "copy: %s address is 0",
                         d->dst == 0 ? "destination" : "source");
    if (d->dst_side == GM_COPY_DEVICE)
        status = check_device_range(c, (uintptr_t)d->dst, dst_bytes, "destination", "copy");
    if (status == GM_OK && d->src_side == GM_COPY_DEVICE)
        status = check_device_range(c, (uintptr_t)d->src, src_bytes, "source", "copy");
    return status;
}

/* One side of a pitched copy as a 3-D byte view. */
static void pitched_view(gm_devptr addr, const gm_copy_desc *d, size_t pitch, size_t rows,
                         gm_ndview *v)
{
    /* The header and three axes only: the axes past ndim are never read, and
     * clearing all GM_MAX_DIMS of them would cost more than a small copy. */
    v->data = (void *)(uintptr_t)addr;
    v->offset = 0;
    v->memory = GM_MEMORY_HOST;
    v->reserved = 0;
    v->dtype = GM_UINT8;
    v->ndim = 3;
    v->device_id = -1;
    v->shape[0] = (int64_t)d->depth;
    v->shape[1] = (int64_t)d->height;
    v->shape[2] = (int64_t)d->width_bytes;
    v->strides[0] = (int64_t)(pitch * rows);
    v->strides[1] = (int64_t)pitch;
    v->strides[2] = 1;
}

/* Run a validated pitched copy. */
static gm_status do_pitched_copy(const gm_copy_desc *d)
{
    gm_ndview views[2];

    /* One contiguous run (a whole 1-D array, or rows with pitch == width): memcpy it. */
    if ((d->height == 1 || (d->dst_pitch == d->width_bytes && d->src_pitch == d->width_bytes)) &&
        (d->depth == 1 || (d->dst_height == d->height && d->src_height == d->height &&
                           d->dst_pitch == d->width_bytes && d->src_pitch == d->width_bytes))) {
        memcpy((void *)(uintptr_t)d->dst, (const void *)(uintptr_t)d->src,
               d->width_bytes * d->height * d->depth);
        return GM_OK;
    }

    pitched_view(d->dst, d, d->dst_pitch, d->dst_height, &views[0]);
    pitched_view(d->src, d, d->src_pitch, d->src_height, &views[1]);
    return gm__host_copy_strided(&views[0], &views[1]);
}

/* Work item body: a pitched copy. */
static gm_status run_pitched_copy(host_work *w)
{
    return do_pitched_copy(&w->desc);
}

/*
 * Whether a copy is one nonempty contiguous run with both addresses set:
 * the 1-D copy the core issues for a dense pair (height and depth 1, the
 * pitches the width, one row per plane). check_copy's layout checks pass for
 * it with width_bytes bytes on each side, and do_pitched_copy is its memcpy.
 */
static bool is_run(const gm_copy_desc *d)
{
    return d->height == 1 && d->depth == 1 && d->dst_pitch == d->width_bytes &&
           d->src_pitch == d->width_bytes && d->dst_height == 1 && d->src_height == 1 &&
           d->width_bytes - 1 < (size_t)INT64_MAX && d->dst != 0 && d->src != 0;
}

/*
 * check_copy's range checks of a run (is_run), both device sides found
 * under one mem_lock; a side not found there goes to check_device_range,
 * which decides (another context's portable memory) and explains.
 */
static gm_status check_run(host_ctx *c, const gm_copy_desc *d)
{
    size_t bytes = d->width_bytes;
    bool dst_ok = d->dst_side != GM_COPY_DEVICE, src_ok = d->src_side != GM_COPY_DEVICE;
    gm_status status = GM_OK;

    if (!dst_ok || !src_ok) {
        gm__lock_take(&c->mem_lock);
        dst_ok = dst_ok || region_find(c, (uintptr_t)d->dst, bytes) != NULL;
        src_ok = src_ok || region_find(c, (uintptr_t)d->src, bytes) != NULL;
        gm__lock_give(&c->mem_lock);
    }
    if (!dst_ok)
        status = check_device_range(c, (uintptr_t)d->dst, bytes, "destination", "copy");
    if (status == GM_OK && !src_ok)
        status = check_device_range(c, (uintptr_t)d->src, bytes, "source", "copy");
    return status;
}

/* A synchronous run (is_run): check_copy's checks, the barrier, one memcpy. */
static gm_status copy_run(host_ctx *c, const gm_copy_desc *d)
{
    gm_status status = check_run(c, d);

    if (status != GM_OK)
        return status;
    gm__host_sync_barrier(c);
    memcpy((void *)(uintptr_t)d->dst, (const void *)(uintptr_t)d->src, d->width_bytes);
    return GM_OK;
}

/* Pitched copy; queued on `stream`, or synchronous when it is NULL. */
static gm_status host_copy(gm_backend_ctx *bctx, const gm_copy_desc *desc,
                           gm_backend_stream *stream)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_work *w = NULL;
    gm_status status = GM_OK;

    if (desc == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "copy: desc is NULL");
    if (stream == NULL && is_run(desc))
        return copy_run(c, desc);
    if (desc->width_bytes == 0 || desc->height == 0 || desc->depth == 0)
        return GM_OK;
    status = check_copy(c, desc);
    if (status != GM_OK)
        return status;
    if (stream == NULL) {
        gm__host_sync_barrier(c);
        return do_pitched_copy(desc);
    }
    w = gm__host_work_new();
    if (w == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "copy: out of memory");
    w->run = run_pitched_copy;
    w->desc = *desc;
    gm__host_submit(c, stream, w);
    return GM_OK;
}

/* Device-side descriptors of a strided copy must lie in this context's memory. */
static gm_status check_view_memory(host_ctx *c, const gm_ndview *v, const char *what)
{
    int64_t lo = 0, hi = 0;
    gm_status status = GM_OK;

    if (v->memory != GM_MEMORY_DEVICE && v->memory != GM_MEMORY_MANAGED)
        return GM_OK;
    status = gm_ndview_extent(v, &lo, &hi);
    if (status == GM_OK && hi > lo)
        status = check_device_range(c, (uintptr_t)v->data + (uintptr_t)lo, (size_t)(hi - lo), what,
                                    "copy_strided");
    return status;
}

/* Work item body: a strided copy. */
static gm_status run_strided_copy(host_work *w)
{
    return gm__host_copy_strided(&w->views[0], &w->views[1]);
}

/* Any-layout copy between two descriptors; queued, or synchronous without a stream. */
static gm_status host_copy_strided(gm_backend_ctx *bctx, const gm_ndview *dst, const gm_ndview *src,
                                   gm_backend_stream *stream)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_work *w = NULL;
    gm_status status = gm__host_copy_check(dst, src);

    if (status == GM_OK)
        status = check_view_memory(c, dst, "destination");
    if (status == GM_OK)
        status = check_view_memory(c, src, "source");
    if (status != GM_OK || gm_ndview_size(dst) == 0)
        return status;
    if (stream == NULL) {
        gm__host_sync_barrier(c);
        return gm__host_copy_strided(dst, src);
    }
    w = gm__host_work_new();
    if (w != NULL)
        w->views = gm__malloc(2 * sizeof(gm_ndview));
    if (w == NULL || w->views == NULL) {
        gm__host_work_free(w);
        return gm__error(GM_ERR_NO_MEMORY, "copy_strided: out of memory");
    }
    w->run = run_strided_copy;
    w->views[0] = *dst;
    w->views[1] = *src;
    gm__host_submit(c, stream, w);
    return GM_OK;
}

/*
 * Whether a device-side view of a copy (device or managed memory; a host-side one
 * passes) lies inside this context's own memory (mem_lock held): what
 * check_device_range accepts without looking at other contexts' portable memory.
 */
static bool view_owned(host_ctx *c, const gm_ndview *v)
{
    int64_t lo = 0, hi = 0;

    if (v->memory != GM_MEMORY_DEVICE && v->memory != GM_MEMORY_MANAGED)
        return true;
    return gm__extent_quick(v, gm__dtype_bytes(v->dtype), &lo, &hi) && hi > lo &&
           own_range_locked(c, (uintptr_t)v->data + (uintptr_t)lo, (size_t)(hi - lo));
}

/* copy_views: a synchronous copy the core has checked, straight to the engine (backend.h). */
static bool host_copy_views(gm_backend_ctx *bctx, const gm_ndview *dst, const gm_ndview *src,
                            gm_status *status_p)
{
    host_ctx *c = gm__host_ctx(bctx);
    bool inside = false;

    gm__lock_take(&c->mem_lock);
    inside = view_owned(c, dst) && view_owned(c, src);
    gm__lock_give(&c->mem_lock);
    if (!inside)
        return false;
    gm__host_sync_barrier(c);
    *status_p = gm__host_copy_strided(dst, src);
    return true;
}

/* Fill count elements of k bytes with a pattern, doubling the filled prefix. */
static void fill_pattern(unsigned char *dst, const unsigned char *pattern, size_t k, size_t count)
{
    size_t total = k * count;
    size_t done = k;

    if (k == 1) {
        memset(dst, pattern[0], count);
        return;
    }
    memcpy(dst, pattern, k);
    while (done < total) {
        size_t n = done < total - done ? done : total - done;

        memcpy(dst + done, dst, n);
        done += n;
    }
}

/* Work item body: a memset. */
static gm_status run_memset(host_work *w)
{
    fill_pattern((unsigned char *)(uintptr_t)w->fill_dst, w->pattern, w->pattern_bytes,
                 w->fill_count);
    return GM_OK;
}

/* Validate a memset. */
static gm_status check_memset(host_ctx *c, gm_devptr dst, const void *pattern, size_t pattern_bytes,
                              size_t count)
{
    size_t bytes = 0;

    if (pattern == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "memset: pattern is NULL");
    if (pattern_bytes != 1 && pattern_bytes != 2 && pattern_bytes != 4 && pattern_bytes != 8)
        return gm__error(GM_ERR_INVALID_ARG, "memset: pattern_bytes must be 1, 2, 4 or 8, got %zu",
                         pattern_bytes);
    if (__builtin_mul_overflow(pattern_bytes, count, &bytes))
        return gm__error(GM_ERR_OVERFLOW, "memset: %zu elements of %zu bytes overflow", count,
                         pattern_bytes);
    return check_device_range(c, (uintptr_t)dst, bytes, "destination", "memset");
}

/* Fill device memory with a 1, 2, 4 or 8-byte pattern. */
static gm_status host_memset(gm_backend_ctx *bctx, gm_devptr dst, const void *pattern,
                             size_t pattern_bytes, size_t count, gm_backend_stream *stream)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_work *w = NULL;
    gm_status status = check_memset(c, dst, pattern, pattern_bytes, count);

    if (status != GM_OK || count == 0)
        return status;
    if (stream == NULL) {
        gm__host_sync_barrier(c);
        fill_pattern((unsigned char *)(uintptr_t)dst, pattern, pattern_bytes, count);
        return GM_OK;
    }
    w = gm__host_work_new();
    if (w == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "memset: out of memory");
    w->run = run_memset;
    w->fill_dst = dst;
    memcpy(w->pattern, pattern, pattern_bytes);
    w->pattern_bytes = pattern_bytes;
    w->fill_count = count;
    gm__host_submit(c, stream, w);
    return GM_OK;
}

/* ------------------------------------------------------------ the table */

const gm_backend_ops gm__host_backend = {
    .size = sizeof(gm_backend_ops),
    .abi_version = GM_BACKEND_ABI_VERSION,
    .name = "host",
    .kind = GM_BACKEND_HOST,
    .init = host_init,
    .fini = host_fini,
    .device_info = host_device_info,
    .mem_info = host_mem_info,
    .mem_alloc = host_mem_alloc,
    .mem_free = host_mem_free,
    .mem_free_batch = host_mem_free_batch,
    .host_alloc = host_host_alloc,
    .host_free = host_host_free,
    .host_device_pointer = host_host_device_pointer,
    .host_register = host_host_register,
    .host_unregister = host_host_unregister,
    .managed_alloc = host_managed_alloc,
    .pointer_kind = host_pointer_kind,
    .copy = host_copy,
    .copy_strided = host_copy_strided,
    .copy_views = host_copy_views,
    .memset = host_memset,
    .stream_create = gm__host_stream_create,
    .stream_destroy = gm__host_stream_destroy,
    .stream_builtin = gm__host_stream_builtin,
    .stream_wrap = gm__host_stream_wrap,
    .stream_unwrap = gm__host_stream_unwrap,
    .stream_native = gm__host_stream_native,
    .stream_synchronize = gm__host_stream_synchronize,
    .stream_query = gm__host_stream_query,
    .stream_add_callback = gm__host_stream_add_callback,
    .stream_enqueue_host = gm__host_stream_enqueue_host,
    .device_synchronize = gm__host_device_synchronize,
    .event_create = gm__host_event_create,
    .event_destroy = gm__host_event_destroy,
    .event_record = gm__host_event_record,
    .stream_wait_event = gm__host_stream_wait_event,
    .event_query = gm__host_event_query,
    .event_synchronize = gm__host_event_synchronize,
    .event_elapsed = gm__host_event_elapsed,
    .module_load = gm__host_module_load,
    .module_unload = gm__host_module_unload,
    .module_get_kernel = gm__host_module_get_kernel,
    .module_get_global = gm__host_module_get_global,
    .kernel_attrs = gm__host_kernel_attrs,
    .launch = gm__host_launch,
    .module_set_global = gm__host_module_set_global,
    /* IPC hands device memory to another process; the simulator's device memory is
     * private memory of this process, so there is nothing another process could open. */
    .ipc_get_handle = gm__unsupported_ipc_get_handle,
    .ipc_open = gm__unsupported_ipc_open,
    .ipc_close = gm__unsupported_ipc_close,
};
