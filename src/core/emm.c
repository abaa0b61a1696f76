/*
 * Memory managers (gpumem/memory_manager.h, Numba's EMM plugin interface):
 * the base allocator every manager is given, the built-in manager, choosing
 * and checking a manager (options or a GM_MEMORY_MANAGER plugin), the calls
 * the runtime makes through it, and IPC handles.
 *
 * The runtime never calls the backend's allocation ops itself: array.c,
 * dealloc.c and hostmem.c go through the gm__mm_* calls here, which call the
 * context's resolved table; the built-in table delegates to the base, whose
 * functions are the backend ops. When a context's device slots are the
 * built-in ones, gm__mm_memalloc / gm__mm_free call the backend op directly
 * (the same result: those slots only forward to it, and the backend's
 * message stays the detail), sparing four calls on every allocation. Optional slots a plugin leaves
 * NULL are filled with the built-in functions (host memory, pinning, IPC) or with no-ops
 * (initialize, reset, defer_cleanup), so every call site is uniform.
 *
 * Error messages: a base function that fails has recorded the backend's
 * detail; a thread-local flag notes that, so a manager failure without such
 * a detail (a plugin cannot record messages) gets one naming the manager.
 */
#define _GNU_SOURCE /* secure_getenv */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime_internal.h"

_Static_assert(sizeof(void *) == sizeof(gm_memory_manager_entry_fn),
               "dlsym's result must hold a function pointer");

/* Set when a base function fails during the current manager call. */
static _Thread_local bool tls_base_failed = false;

/* ------------------------------------------------------- base allocator */

/* The context a base allocator is embedded in. */
static gm_context *base_context(const gm_memory_manager_base *base)
{
    return GM__CONTAINER_OF(base, gm_context, mm.base);
}

/* Note a failing base call (its message is the detail to keep). */
static gm_status base_result(gm_status status)
{
    if (status != GM_OK)
        tls_base_failed = true;
    return status;
}

/* A NULL output pointer given to a base function. */
static gm_status base_null(const char *op, const char *what)
{
    return base_result(
        gm__error(GM_ERR_NULL_POINTER, "memory manager base %s: %s is NULL", op, what));
}

/*
 * A request for 0 bytes: refused alike on every backend (the drivers differ:
 * cuMemAlloc refuses it, HSA's pool allocator returns nothing).
 */
static gm_status base_zero(const char *op)
{
    return base_result(gm__error(GM_ERR_INVALID_ARG,
                                 "memory manager base %s: 0 bytes requested (size-0 arrays "
                                 "allocate nothing)",
                                 op));
}

/* The gm_host_flags of memhostalloc's booleans. */
static unsigned host_flags(bool mapped, bool portable, bool wc)
{
    return (mapped ? (unsigned)GM_HOST_MAPPED : 0u) | (portable ? (unsigned)GM_HOST_PORTABLE : 0u) |
           (wc ? (unsigned)GM_HOST_WRITECOMBINED : 0u);
}

/* Device memory from the backend. */
static gm_status raw_memalloc(const gm_memory_manager_base *base, size_t bytes, uint64_t *ptr_p)
{
    gm_context *ctx = base_context(base);

    if (ptr_p == NULL)
        return base_null("memalloc", "ptr_p");
    if (bytes == 0)
        return base_zero("memalloc");
    return base_result(ctx->ops->mem_alloc(ctx->bctx, bytes, ptr_p));
}

/* Free device memory of the backend. */
static gm_status raw_memfree(const gm_memory_manager_base *base, uint64_t ptr)
{
    gm_context *ctx = base_context(base);

    if (ptr == 0)
        return GM_OK; /* as free(NULL) and cudaFree(0) */
    return base_result(ctx->ops->mem_free(ctx->bctx, ptr));
}

/* Page-locked (and maybe mapped) host memory from the backend. */
static gm_status raw_memhostalloc(const gm_memory_manager_base *base, size_t bytes, bool mapped,
                                  bool portable, bool wc, void **ptr_p)
{
    gm_context *ctx = base_context(base);

    if (ptr_p == NULL)
        return base_null("memhostalloc", "ptr_p");
    if (bytes == 0)
        return base_zero("memhostalloc");
    return base_result(
        ctx->ops->host_alloc(ctx->bctx, bytes, host_flags(mapped, portable, wc), ptr_p));
}

/* Free page-locked host memory of the backend. */
static gm_status raw_memhostfree(const gm_memory_manager_base *base, void *ptr)
{
    gm_context *ctx = base_context(base);

    if (ptr == NULL)
        return GM_OK;
    return base_result(ctx->ops->host_free(ctx->bctx, ptr));
}

/* Register existing host memory with the backend. */
static gm_status raw_mempin(const gm_memory_manager_base *base, void *ptr, size_t bytes,
                            bool mapped)
{
    gm_context *ctx = base_context(base);

    return base_result(
        ctx->ops->host_register(ctx->bctx, ptr, bytes, host_flags(mapped, false, false)));
}

/* Unregister host memory. */
static gm_status raw_memunpin(const gm_memory_manager_base *base, void *ptr)
{
    gm_context *ctx = base_context(base);

    return base_result(ctx->ops->host_unregister(ctx->bctx, ptr));
}

/* The backend's free and total device memory. */
static gm_status raw_get_memory_info(const gm_memory_manager_base *base, int64_t *free_p,
                                     int64_t *total_p)
{
    gm_context *ctx = base_context(base);

    if (free_p == NULL || total_p == NULL)
        return base_null("get_memory_info", free_p == NULL ? "free_p" : "total_p");
    return base_result(ctx->ops->mem_info(ctx->bctx, free_p, total_p));
}

/* The backend's IPC handle of an allocation. */
static gm_status raw_get_ipc_handle(const gm_memory_manager_base *base, uint64_t ptr, void *handle)
{
    gm_context *ctx = base_context(base);

    if (handle == NULL)
        return base_null("get_ipc_handle", "handle");
    return base_result(ctx->ops->ipc_get_handle(ctx->bctx, ptr, handle, GM_IPC_HANDLE_BYTES));
}

/*
 * The base functions a manager calls: the raw_* ones, with a failure's
 * message naming the function (status.h: a message names the call). A
 * backend step's detail would otherwise name only the backend's op
 * ("host_register: ..."). gpumem's own calls use the raw_* functions (the
 * built-in manager's slots), where the public call names itself.
 */
static gm_status base_named(const char *fn, gm_status status)
{
    return gm__error_named(fn, status);
}

static gm_status base_memalloc(const gm_memory_manager_base *base, size_t bytes, uint64_t *ptr_p)
{
    return base_named("memory manager base memalloc", raw_memalloc(base, bytes, ptr_p));
}

static gm_status base_memfree(const gm_memory_manager_base *base, uint64_t ptr)
{
    return base_named("memory manager base memfree", raw_memfree(base, ptr));
}

static gm_status base_memhostalloc(const gm_memory_manager_base *base, size_t bytes, bool mapped,
                                   bool portable, bool wc, void **ptr_p)
{
    return base_named("memory manager base memhostalloc",
                      raw_memhostalloc(base, bytes, mapped, portable, wc, ptr_p));
}

static gm_status base_memhostfree(const gm_memory_manager_base *base, void *ptr)
{
    return base_named("memory manager base memhostfree", raw_memhostfree(base, ptr));
}

static gm_status base_mempin(const gm_memory_manager_base *base, void *ptr, size_t bytes,
                             bool mapped)
{
    return base_named("memory manager base mempin", raw_mempin(base, ptr, bytes, mapped));
}

static gm_status base_memunpin(const gm_memory_manager_base *base, void *ptr)
{
    return base_named("memory manager base memunpin", raw_memunpin(base, ptr));
}

static gm_status base_get_memory_info(const gm_memory_manager_base *base, int64_t *free_p,
                                      int64_t *total_p)
{
    return base_named("memory manager base get_memory_info",
                      raw_get_memory_info(base, free_p, total_p));
}

static gm_status base_get_ipc_handle(const gm_memory_manager_base *base, uint64_t ptr, void *handle)
{
    return base_named("memory manager base get_ipc_handle", raw_get_ipc_handle(base, ptr, handle));
}

/* Fill the context's base allocator. */
static void base_init(gm_context *ctx)
{
    gm_memory_manager_base *base = &ctx->mm.base;

    memset(base, 0, sizeof(*base));
    base->size = (uint32_t)sizeof(*base);
    base->backend = ctx->ops->kind;
    base->device_id = ctx->device_id;
    base->memalloc = base_memalloc;
    base->memfree = base_memfree;
    base->memhostalloc = base_memhostalloc;
    base->memhostfree = base_memhostfree;
    base->mempin = base_mempin;
    base->memunpin = base_memunpin;
    base->get_memory_info = base_get_memory_info;
    base->get_ipc_handle = base_get_ipc_handle;
}

/* ------------------------------------------------------ built-in manager */

/* Device memory: the base's. */
static gm_status builtin_memalloc(const gm_memory_manager_base *base, void *user, size_t bytes,
                                  uint64_t *ptr_p, void **owner_p)
{
    return raw_memalloc(base, bytes, ptr_p);
}

/* Free device memory: the base's. */
static gm_status builtin_memfree(const gm_memory_manager_base *base, void *user, uint64_t ptr,
                                 size_t bytes, void *owner)
{
    return raw_memfree(base, ptr);
}

/* Free and total device memory: the base's. */
static gm_status builtin_get_memory_info(const gm_memory_manager_base *base, void *user,
                                         int64_t *free_p, int64_t *total_p)
{
    return raw_get_memory_info(base, free_p, total_p);
}

/* Host memory: the base's (Numba's HostOnlyCUDAMemoryManager for plugins without it). */
static gm_status builtin_memhostalloc(const gm_memory_manager_base *base, void *user, size_t bytes,
                                      bool mapped, bool portable, bool wc, void **ptr_p,
                                      void **owner_p)
{
    return raw_memhostalloc(base, bytes, mapped, portable, wc, ptr_p);
}

/* Free host memory: the base's. */
static gm_status builtin_memhostfree(const gm_memory_manager_base *base, void *user, void *ptr,
                                     size_t bytes, void *owner)
{
    return raw_memhostfree(base, ptr);
}

/* Registration: the base's. */
static gm_status builtin_mempin(const gm_memory_manager_base *base, void *user, void *ptr,
                                size_t bytes, bool mapped, void **owner_p)
{
    return raw_mempin(base, ptr, bytes, mapped);
}

/* Unregistration: the base's. */
static gm_status builtin_memunpin(const gm_memory_manager_base *base, void *user, void *ptr,
                                  size_t bytes, void *owner)
{
    return raw_memunpin(base, ptr);
}

/* IPC: the driver's handle (Numba's GetIpcHandleMixin for plugins without it). */
static gm_status builtin_get_ipc_handle(const gm_memory_manager_base *base, void *user,
                                        uint64_t ptr, size_t bytes, void *owner, void *handle)
{
    return raw_get_ipc_handle(base, ptr, handle);
}

/* initialize, reset, defer_cleanup of a manager that has nothing to do. */
static gm_status nothing_to_do(const gm_memory_manager_base *base, void *user)
{
    return GM_OK;
}

/* The built-in manager: NumbaCUDAMemoryManager's counterpart. */
static const gm_memory_manager builtin_manager = {
    .interface_version = GM_MEMORY_MANAGER_INTERFACE_VERSION,
    .size = (uint32_t)sizeof(gm_memory_manager),
    .name = "builtin",
    .flags = GM_MEMORY_MANAGER_DEFERRED_FREE,
    .initialize = NULL,
    .reset = NULL,
    .memalloc = builtin_memalloc,
    .memfree = builtin_memfree,
    .get_memory_info = builtin_get_memory_info,
    .memhostalloc = builtin_memhostalloc,
    .memhostfree = builtin_memhostfree,
    .mempin = builtin_mempin,
    .memunpin = builtin_memunpin,
    .get_ipc_handle = builtin_get_ipc_handle,
    .defer_cleanup_begin = NULL,
    .defer_cleanup_end = NULL,
};

/* The built-in table. */
const gm_memory_manager *gm_builtin_memory_manager(void)
{
    return &builtin_manager;
}

/* The table a context runs. */
const gm_memory_manager *gm_context_memory_manager(const gm_context *ctx)
{
    return ctx == NULL ? NULL : ctx->mm.given;
}

/* ------------------------------------------------ choosing and checking */

/* Interface version and table size, read before any other field. */
static gm_status check_version(const gm_memory_manager *mm, const char *source)
{
    static const char fn[] = "gm_context_create";

    if (mm->interface_version != GM_MEMORY_MANAGER_INTERFACE_VERSION)
        return gm__error(GM_ERR_VERSION_MISMATCH,
                         "%s: the memory manager %s implements interface version %" PRIu32
                         "; this library implements version %d",
                         fn, source, mm->interface_version, GM_MEMORY_MANAGER_INTERFACE_VERSION);
    if (mm->size < sizeof(*mm))
        return gm__error(GM_ERR_VERSION_MISMATCH,
                         "%s: the memory manager %s has a %" PRIu32
                         "-byte table; interface version %d needs %zu bytes (set size to "
                         "sizeof(gm_memory_manager) and rebuild)",
                         fn, source, mm->size, GM_MEMORY_MANAGER_INTERFACE_VERSION, sizeof(*mm));
    return GM_OK;
}

/* Flags, mandatory functions, and the optional pairs. */
static gm_status check_functions(const gm_memory_manager *mm, const char *source)
{
    static const char fn[] = "gm_context_create";
    const char *name = mm->name != NULL ? mm->name : "(unnamed)";
    const char *missing = mm->memalloc == NULL          ? "memalloc"
                          : mm->memfree == NULL         ? "memfree"
                          : mm->get_memory_info == NULL ? "get_memory_info"
                                                        : NULL;
    const char *unpaired = (mm->memhostalloc == NULL) != (mm->memhostfree == NULL)
                               ? "memhostalloc and memhostfree"
                           : (mm->mempin == NULL) != (mm->memunpin == NULL) ? "mempin and memunpin"
                           : (mm->defer_cleanup_begin == NULL) != (mm->defer_cleanup_end == NULL)
                               ? "defer_cleanup_begin and defer_cleanup_end"
                               : NULL;

    if ((mm->flags & ~(uint32_t)GM_MEMORY_MANAGER_DEFERRED_FREE) != 0)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: memory manager '%s' (%s): unknown flags %#" PRIx32, fn, name, source,
                         mm->flags & ~(uint32_t)GM_MEMORY_MANAGER_DEFERRED_FREE);
    if (missing != NULL)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: memory manager '%s' (%s): %s is NULL (it is mandatory)", fn, name,
                         source, missing);
    if (unpaired != NULL)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: memory manager '%s' (%s): %s must be given together (both or "
                         "neither)",
                         fn, name, source, unpaired);
    return GM_OK;
}

/* Copy a checked table, filling the optional slots it leaves NULL. */
static void resolve(gm__mm *mm, const gm_memory_manager *given)
{
    gm_memory_manager *t = &mm->table;

    memcpy(t, given, sizeof(*t));
    t->size = (uint32_t)sizeof(*t);
    mm->given = given;
    mm->defer_device = (given->flags & GM_MEMORY_MANAGER_DEFERRED_FREE) != 0;
    mm->defer_host = mm->defer_device || given->memhostalloc == NULL;
    mm->direct_device = t->memalloc == builtin_memalloc && t->memfree == builtin_memfree;
    if (t->initialize == NULL)
        t->initialize = nothing_to_do;
    if (t->reset == NULL)
        t->reset = nothing_to_do;
    if (t->defer_cleanup_begin == NULL) {
        t->defer_cleanup_begin = nothing_to_do;
        t->defer_cleanup_end = nothing_to_do;
    }
    if (t->memhostalloc == NULL) {
        t->memhostalloc = builtin_memhostalloc;
        t->memhostfree = builtin_memhostfree;
    }
    if (t->mempin == NULL) {
        t->mempin = builtin_mempin;
        t->memunpin = builtin_memunpin;
    }
    if (t->get_ipc_handle == NULL)
        t->get_ipc_handle = builtin_get_ipc_handle;
}

/* Whether a GM_MEMORY_MANAGER value selects the built-in manager. */
static bool env_is_builtin(const char *env)
{
    return env == NULL || env[0] == '\0' || strcasecmp(env, "default") == 0 ||
           strcasecmp(env, "builtin") == 0;
}

/* dlopen the GM_MEMORY_MANAGER plugin and take the table its entry returns. */
static gm_status load_plugin(const char *path, void **handle_p, const gm_memory_manager **table_p)
{
    static const char fn[] = "gm_context_create";
    gm_memory_manager_entry_fn entry = NULL;
    const gm_memory_manager *table = NULL;
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    void *symbol = NULL;
    const char *why = NULL;
    gm_status status = GM_OK;

    if (handle == NULL) {
        why = dlerror();
        return gm__error(GM_ERR_NOT_FOUND, "%s: GM_MEMORY_MANAGER=%s: cannot load the plugin: %s",
                         fn, path, why != NULL ? why : "unknown dlopen error");
    }
    symbol = dlsym(handle, GM_MEMORY_MANAGER_ENTRY);
    if (symbol == NULL) {
        status = gm__error(GM_ERR_NOT_FOUND, "%s: GM_MEMORY_MANAGER=%s: the plugin has no %s()", fn,
                           path, GM_MEMORY_MANAGER_ENTRY);
        goto fail_close;
    }
    memcpy(&entry, &symbol, sizeof(entry));
    table = entry();
    if (table == NULL) {
        status = gm__error(GM_ERR_INVALID_ARG, "%s: GM_MEMORY_MANAGER=%s: %s() returned NULL", fn,
                           path, GM_MEMORY_MANAGER_ENTRY);
        goto fail_close;
    }
    *handle_p = handle;
    *table_p = table;
    return GM_OK;
fail_close:
    dlclose(handle);
    return status;
}

/* Options, else the GM_MEMORY_MANAGER plugin, else the built-in manager. */
gm_status gm__mm_open(gm_context *ctx, const gm_context_options *options)
{
    const gm_memory_manager *table = options->memory_manager;
    const char *env = secure_getenv("GM_MEMORY_MANAGER"); /* a library path: not when setuid */
    char source[512];
    void *plugin = NULL;
    gm_status status = GM_OK;

    snprintf(source, sizeof(source), "given in the options");
    if (table == NULL && !env_is_builtin(env)) {
        status = load_plugin(env, &plugin, &table);
        snprintf(source, sizeof(source), "from GM_MEMORY_MANAGER=%s", env);
    }
    if (status != GM_OK)
        return status;
    if (table == NULL)
        table = &builtin_manager;
    status = check_version(table, source);
    if (status == GM_OK)
        status = check_functions(table, source);
    if (status != GM_OK)
        goto fail_unload;
    resolve(&ctx->mm, table);
    ctx->mm.user = options->memory_manager_user;
    ctx->mm.plugin = plugin;
    base_init(ctx);
    return GM_OK;
fail_unload:
    if (plugin != NULL)
        dlclose(plugin);
    return status;
}

/* ----------------------------------------------------------- the calls */

/* The manager's name for messages. */
static const char *manager_name(const gm_context *ctx)
{
    return ctx->mm.table.name != NULL ? ctx->mm.table.name : "(unnamed)";
}

/* Before a manager call: no base failure yet; the thread's error mark (finish). */
static uint64_t call_begin(void)
{
    tls_base_failed = false;
    return gm__error_mark();
}

/*
 * A manager call's status; a failure the base did not describe gets a
 * message. `mark` is gm__error_mark() from before the call: a manager may try
 * a base call that fails and then succeed another way (a pool trying a large
 * slab first), and a call that returns GM_OK leaves the thread's error as it
 * was (status.h).
 */
static gm_status finish(gm_context *ctx, const char *op, uint64_t mark, gm_status status)
{
    if (status == GM_OK)
        gm__error_back_to(mark);
    if (status == GM_OK)
        return status;
    if (status > 0 || strcmp(gm_status_name(status), "UNKNOWN") == 0)
        return gm__error(GM_ERR_INTERNAL,
                         "memory manager '%s': %s returned %d, which is not a gm_status",
                         manager_name(ctx), op, (int)status);
    if (tls_base_failed)
        return status;
    return gm__error(status, "memory manager '%s': %s returned %s", manager_name(ctx), op,
                     gm_status_name(status));
}

/* Initialize once the backend runs; reset becomes due. */
gm_status gm__mm_initialize(gm_context *ctx)
{
    gm_status status = GM_OK;

    const uint64_t mark = call_begin();
    status = finish(ctx, "initialize", mark, ctx->mm.table.initialize(&ctx->mm.base, ctx->mm.user));
    ctx->mm.initialized = status == GM_OK;
    return status;
}

/*
 * The manager's last call for this context. A failure is only logged: on a
 * failing gm_context_create() the creation's own message must stay.
 */
void gm__mm_reset(gm_context *ctx)
{
    gm_status status = GM_OK;

    if (!ctx->mm.initialized)
        return;
    ctx->mm.initialized = false;
    status = ctx->mm.table.reset(&ctx->mm.base, ctx->mm.user);
    if (status != GM_OK)
        gm__log(GM_LOG_ERROR, "memory manager '%s': reset returned %s", manager_name(ctx),
                gm_status_name(status));
}

/* dlclose the plugin. */
void gm__mm_unload(gm_context *ctx)
{
    if (ctx->mm.plugin != NULL)
        dlclose(ctx->mm.plugin);
    ctx->mm.plugin = NULL;
}

/* Device memory through the manager. */
gm_status gm__mm_memalloc(gm_context *ctx, size_t bytes, gm_devptr *ptr_p, void **owner_p)
{
    uint64_t ptr = 0;
    void *owner = NULL;
    gm_status status = GM_OK;

    if (ctx->mm.direct_device) { /* the built-in slots would only forward to the backend */
        status = ctx->ops->mem_alloc(ctx->bctx, bytes, &ptr);
    } else {
        const uint64_t mark = call_begin();
        status = finish(ctx, "memalloc", mark,
                        ctx->mm.table.memalloc(&ctx->mm.base, ctx->mm.user, bytes, &ptr, &owner));
    }
    if (status == GM_OK && ptr == 0)
        status = gm__error(GM_ERR_INTERNAL,
                           "memory manager '%s': memalloc of %zu bytes returned GM_OK and no "
                           "address",
                           manager_name(ctx), bytes);
    if (status == GM_OK) {
        *ptr_p = ptr;
        *owner_p = owner;
    }
    return status;
}

/* Pinned or mapped host memory through the manager. */
gm_status gm__mm_memhostalloc(gm_context *ctx, size_t bytes, unsigned flags, void **ptr_p,
                              void **owner_p)
{
    void *ptr = NULL;
    void *owner = NULL;
    bool mapped = (flags & GM_HOST_MAPPED) != 0, portable = (flags & GM_HOST_PORTABLE) != 0;
    bool wc = (flags & GM_HOST_WRITECOMBINED) != 0;
    gm_status status = GM_OK;

    const uint64_t mark = call_begin();
    status = finish(ctx, "memhostalloc", mark,
                    ctx->mm.table.memhostalloc(&ctx->mm.base, ctx->mm.user, bytes, mapped, portable,
                                               wc, &ptr, &owner));
    if (status == GM_OK && ptr == NULL)
        status = gm__error(GM_ERR_INTERNAL,
                           "memory manager '%s': memhostalloc of %zu bytes returned GM_OK and no "
                           "address",
                           manager_name(ctx), bytes);
    if (status == GM_OK) {
        *ptr_p = ptr;
        *owner_p = owner;
    }
    return status;
}

/* Register host memory through the manager. */
gm_status gm__mm_mempin(gm_context *ctx, void *ptr, size_t bytes, bool mapped, void **owner_p)
{
    void *owner = NULL;
    gm_status status = GM_OK;

    const uint64_t mark = call_begin();
    status = finish(ctx, "mempin", mark,
                    ctx->mm.table.mempin(&ctx->mm.base, ctx->mm.user, ptr, bytes, mapped, &owner));
    if (status == GM_OK)
        *owner_p = owner;
    return status;
}

/* Unregister host memory through the manager (always immediate). */
gm_status gm__mm_memunpin(gm_context *ctx, void *ptr, size_t bytes, void *owner)
{
    const uint64_t mark = call_begin();
    return finish(ctx, "memunpin", mark,
                  ctx->mm.table.memunpin(&ctx->mm.base, ctx->mm.user, ptr, bytes, owner));
}

/* Free the memory of a queue entry: managed memory is always the base's. */
gm_status gm__mm_free(gm_context *ctx, const gm__dealloc_entry *entry)
{
    const gm_memory_manager *t = &ctx->mm.table;
    size_t bytes = (size_t)entry->bytes;

    if (entry->kind == GM__DEALLOC_DEVICE && ctx->mm.direct_device)
        return ctx->ops->mem_free(ctx->bctx, entry->device);
    const uint64_t mark = call_begin();
    switch (entry->kind) {
    case GM__DEALLOC_DEVICE:
        return finish(ctx, "memfree", mark,
                      t->memfree(&ctx->mm.base, ctx->mm.user, entry->device, bytes, entry->owner));
    case GM__DEALLOC_PINNED:
    case GM__DEALLOC_MAPPED:
        return finish(
            ctx, "memhostfree", mark,
            t->memhostfree(&ctx->mm.base, ctx->mm.user, entry->handle, bytes, entry->owner));
    case GM__DEALLOC_MANAGED:
        return ctx->ops->mem_free(ctx->bctx, entry->device);
    default:
        break;
    }
    return gm__error(GM_ERR_INTERNAL, "memory manager: entry kind %d is not memory",
                     (int)entry->kind);
}

/* Free and total device memory through the manager; negative values are refused. */
gm_status gm__mm_memory_info(gm_context *ctx, int64_t *free_p, int64_t *total_p)
{
    int64_t free_bytes = -1, total_bytes = -1;
    gm_status status = GM_OK;

    const uint64_t mark = call_begin();
    status = finish(
        ctx, "get_memory_info", mark,
        ctx->mm.table.get_memory_info(&ctx->mm.base, ctx->mm.user, &free_bytes, &total_bytes));
    if (status == GM_OK && (free_bytes < 0 || total_bytes < 0))
        status = gm__error(GM_ERR_INTERNAL,
                           "memory manager '%s': get_memory_info gave free %" PRId64
                           " and total %" PRId64 " bytes",
                           manager_name(ctx), free_bytes, total_bytes);
    if (status == GM_OK) {
        *free_p = free_bytes;
        *total_p = total_bytes;
    }
    return status;
}

/* The manager's defer_cleanup_begin. */
gm_status gm__mm_defer_begin(gm_context *ctx)
{
    const uint64_t mark = call_begin();
    return finish(ctx, "defer_cleanup_begin", mark,
                  ctx->mm.table.defer_cleanup_begin(&ctx->mm.base, ctx->mm.user));
}

/* The manager's defer_cleanup_end. */
gm_status gm__mm_defer_end(gm_context *ctx)
{
    const uint64_t mark = call_begin();
    return finish(ctx, "defer_cleanup_end", mark,
                  ctx->mm.table.defer_cleanup_end(&ctx->mm.base, ctx->mm.user));
}

/* ------------------------------------------------------------------ IPC */

/* The allocation entry behind a device array, or an error saying why there is none. */
static gm_status ipc_entry(const char *fn, const gm_array *array, const gm__dealloc_entry **entry_p)
{
    const gm__dealloc_entry *entry = array->buffer->entry;

    if (array->view.memory != GM_MEMORY_DEVICE)
        return gm__error(GM_ERR_INVALID_ARG, "%s: the array is not device memory (memory kind %d)",
                         fn, (int)array->view.memory);
    if (array->buffer->bytes == 0)
        return gm__error(GM_ERR_INVALID_ARG, "%s: a size-0 array has no allocation", fn);
    if (entry == NULL || entry->kind != GM__DEALLOC_DEVICE)
        return gm__error(GM_ERR_UNSUPPORTED,
                         "%s: the array's memory was not allocated by the context's memory "
                         "manager (foreign memory)",
                         fn);
    *entry_p = entry;
    return GM_OK;
}

/* Numba's get_ipc_handle: the manager's handle of the array's allocation. */
gm_status gm_array_ipc_handle(gm_array *array, gm_ipc_handle *handle_p)
{
    static const char fn[] = "gm_array_ipc_handle";
    const gm__dealloc_entry *entry = NULL;
    gm_context *ctx = NULL;
    gm_ipc_handle handle;
    gm_status status = gm__check_array(fn, array, NULL);

    if (status == GM_OK && handle_p == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: handle_p is NULL", fn);
    if (status == GM_OK)
        status = ipc_entry(fn, array, &entry);
    if (status != GM_OK)
        return status;
    ctx = array->ctx;
    memset(&handle, 0, sizeof(handle));
    const uint64_t mark = call_begin();
    status =
        finish(ctx, "get_ipc_handle", mark,
               ctx->mm.table.get_ipc_handle(&ctx->mm.base, ctx->mm.user, entry->device,
                                            (size_t)entry->bytes, entry->owner, handle.handle));
    if (status != GM_OK)
        return gm__error_within(fn, status);
    handle.bytes = entry->bytes;
    handle.offset = (int64_t)((uintptr_t)array->view.data - (uintptr_t)entry->device);
    handle.backend = ctx->ops->kind;
    handle.device_id = ctx->device_id;
    *handle_p = handle;
    return GM_OK;
}
