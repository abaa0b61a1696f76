/*
 * Contexts: options and their environment defaults, backend selection,
 * creation on an ops table, teardown, device queries; plus the intrusive
 * list helpers the runtime's object lists use.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels_internal.h"
#include "runtime_internal.h"

#ifndef GM_DEFAULT_BACKEND
#define GM_DEFAULT_BACKEND GM_BACKEND_HOST
#endif

#define GM__DEFAULT_MAX_PENDING_COUNT  10
#define GM__DEFAULT_MAX_PENDING_RATIO  0.2
#define GM__DEFAULT_MAX_PENDING_PINNED ((int64_t)256 * 1024 * 1024)

/* ---------------------------------------------------------------- options */

/* Parse a whole decimal integer; false if `text` is not one. */
static bool parse_int64(const char *text, int64_t *value_p, const char **end_p)
{
    char *end = NULL;
    long long value = 0;

    errno = 0;
    value = strtoll(text, &end, 10);
    if (errno != 0 || end == text)
        return false;
    *value_p = (int64_t)value;
    *end_p = end;
    return true;
}

/* A non-negative integer environment variable, else `fallback` (logged if malformed). */
static int64_t env_count(const char *name, int64_t fallback)
{
    const char *text = getenv(name);
    const char *end = NULL;
    int64_t value = 0;

    if (text == NULL || text[0] == '\0')
        return fallback;
    if (!parse_int64(text, &value, &end) || *end != '\0' || value < 0) {
        gm__log(GM_LOG_WARN, "ignoring %s=\"%s\": not an integer >= 0", name, text);
        return fallback;
    }
    return value;
}

/* A byte count with an optional K/M/G/T suffix (powers of 1024), else `fallback`. */
static int64_t env_bytes(const char *name, int64_t fallback)
{
    const char *text = getenv(name);
    const char *end = NULL;
    const char *suffixes = "KMGT";
    int64_t value = 0;
    int shift = 0;

    if (text == NULL || text[0] == '\0')
        return fallback;
    if (!parse_int64(text, &value, &end) || value < 0)
        goto malformed;
    if (*end != '\0') {
        const char *found = strchr(suffixes, toupper((unsigned char)*end));

        if (found == NULL ||
            (end[1] != '\0' && strcasecmp(end + 1, "iB") != 0 && strcasecmp(end + 1, "B") != 0))
            goto malformed;
        shift = 10 * (int)(found - suffixes + 1);
    }
    if (value > (INT64_MAX >> shift))
        goto malformed;
    return value << shift;
malformed:
    gm__log(GM_LOG_WARN, "ignoring %s=\"%s\": not a byte count like 256M", name, text);
    return fallback;
}

/* A finite non-negative ratio environment variable, else `fallback`. */
static double env_ratio(const char *name, double fallback)
{
    const char *text = getenv(name);
    char *end = NULL;
    double value = 0.0;

    if (text == NULL || text[0] == '\0')
        return fallback;
    errno = 0;
    value = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(value) || value < 0.0) {
        gm__log(GM_LOG_WARN, "ignoring %s=\"%s\": not a number >= 0", name, text);
        return fallback;
    }
    return value;
}

/* Defaults, with the queue bounds read from the GM_MAX_PENDING_* variables. */
void gm_context_options_default(gm_context_options *options)
{
    if (options == NULL)
        return;
    memset(options, 0, sizeof(*options));
    options->struct_size = (uint32_t)sizeof(*options);
    options->backend = GM_BACKEND_DEFAULT;
    options->device_id = 0;
    options->max_pending_count =
        env_count("GM_MAX_PENDING_DEALLOCS_COUNT", GM__DEFAULT_MAX_PENDING_COUNT);
    options->max_pending_ratio =
        env_ratio("GM_MAX_PENDING_DEALLOCS_RATIO", GM__DEFAULT_MAX_PENDING_RATIO);
    options->max_pending_pinned_bytes =
        env_bytes("GM_MAX_PENDING_PINNED_BYTES", GM__DEFAULT_MAX_PENDING_PINNED);
    options->host_warp_size = 32;
}

/*
 * Copy the caller's options over the defaults. A smaller struct_size (an
 * older caller) reads only the fields it has; reserved bytes must be zero.
 */
static gm_status read_options(const gm_context_options *given, gm_context_options *out)
{
    static const char fn[] = "gm_context_create";

    if (given == NULL) {
        gm_context_options_default(out);
        return GM_OK;
    }
    if (given->struct_size < offsetof(gm_context_options, reserved) ||
        given->struct_size > sizeof(*given))
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: options->struct_size is %" PRIu32 " (expected %zu): fill the "
                         "options with gm_context_options_default() first",
                         fn, given->struct_size, sizeof(*given));
    /* The caller's defaults were read when it filled them (the environment once, its
     * warnings once); only fields past an older, smaller struct need ours. */
    if (given->struct_size < sizeof(*out))
        gm_context_options_default(out);
    memcpy(out, given, given->struct_size);
    out->struct_size = (uint32_t)sizeof(*out);
    for (size_t i = 0; i < sizeof(out->reserved); i++) {
        if (out->reserved[i] != 0)
            return gm__error(GM_ERR_INVALID_ARG, "%s: options->reserved must be zero", fn);
    }
    return GM_OK;
}

/* Range checks of every numeric option. */
static gm_status check_options(const gm_context_options *o)
{
    static const char fn[] = "gm_context_create";

    if (o->device_id < 0)
        return gm__error(GM_ERR_INVALID_ARG, "%s: device_id must be >= 0, got %" PRId32, fn,
                         o->device_id);
    if (o->max_pending_count < 0)
        return gm__error(GM_ERR_INVALID_ARG, "%s: max_pending_count must be >= 0, got %" PRId64, fn,
                         o->max_pending_count);
    if (!isfinite(o->max_pending_ratio) || o->max_pending_ratio < 0.0)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: max_pending_ratio must be finite and >= 0, got %g", fn,
                         o->max_pending_ratio);
    if (o->max_pending_pinned_bytes < 0)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: max_pending_pinned_bytes must be >= 0, got %" PRId64, fn,
                         o->max_pending_pinned_bytes);
    if (o->host_warp_size != 32 && o->host_warp_size != 64)
        return gm__error(GM_ERR_INVALID_ARG, "%s: host_warp_size must be 32 or 64, got %" PRId32,
                         fn, o->host_warp_size);
    return GM_OK;
}

/* ------------------------------------------------------ backend selection */

/* Static name of a backend kind; "unknown" for other values. */
const char *gm_backend_name(gm_backend_kind kind)
{
    switch (kind) {
    case GM_BACKEND_DEFAULT:
        return "default";
    case GM_BACKEND_HOST:
        return "host";
    case GM_BACKEND_CUDA:
        return "cuda";
    case GM_BACKEND_HSA:
        return "hsa";
    case GM_BACKEND_AUTO:
        return "auto";
    }
    return "unknown";
}

/* GM_BACKEND_DEFAULT resolved: the GM_BACKEND variable, else the build's default. */
static gm_status resolve_default(gm_backend_kind *kind_p)
{
    static const gm_backend_kind kinds[] = {GM_BACKEND_HOST, GM_BACKEND_CUDA, GM_BACKEND_HSA,
                                            GM_BACKEND_AUTO};
    const char *env = getenv("GM_BACKEND");

    if (env == NULL || env[0] == '\0' || strcasecmp(env, "default") == 0) {
        *kind_p = GM_DEFAULT_BACKEND;
        return GM_OK;
    }
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (strcasecmp(env, gm_backend_name(kinds[i])) == 0) {
            *kind_p = kinds[i];
            return GM_OK;
        }
    }
    return gm__error(GM_ERR_INVALID_ARG,
                     "gm_context_create: GM_BACKEND=%s is not one of host, cuda, hsa, auto", env);
}

/*
 * The ops table of a backend compiled into this build, or NULL. GPU
 * backends add their tables here (gm__cuda_backend, gm__hsa_backend).
 */
static const gm_backend_ops *compiled_backend(gm_backend_kind kind)
{
    if (kind == GM_BACKEND_HOST)
        return &gm__host_backend;
#ifdef GM_HAVE_CUDA
    if (kind == GM_BACKEND_CUDA)
        return &gm__cuda_backend;
#endif
#ifdef GM_HAVE_HSA
    if (kind == GM_BACKEND_HSA)
        return &gm__hsa_backend;
#endif
    return NULL;
}

int gm__backend_compiled(gm_backend_kind kind)
{
    return compiled_backend(kind) != NULL;
}

/* GM_BACKEND_AUTO: the build's GPU backend if it initializes, else the host simulator. */
static gm_status create_auto(const gm_context_options *options, gm_context **ctx_p)
{
    gm_backend_kind gpu = GM_DEFAULT_BACKEND;
    const gm_backend_ops *ops = compiled_backend(gpu);
    gm_status status = GM_OK;

    if (gpu != GM_BACKEND_HOST && ops != NULL) {
        gm__saved_error saved;

        gm__error_save(&saved);
        status = gm__context_create_with_ops(ops, options, ctx_p);
        if (status != GM_ERR_NO_DRIVER && status != GM_ERR_NO_DEVICE)
            return status;
        gm__log(GM_LOG_INFO,
                "GM_BACKEND_AUTO: %s backend unavailable (%s); using the host "
                "simulator",
                gm_backend_name(gpu), gm_last_error_message());
        gm__error_restore(&saved); /* said in the log; not this call's error */
    } else {
        gm__log(GM_LOG_INFO,
                "GM_BACKEND_AUTO: this build has no %s backend (-Dgpu_backend=%s); "
                "using the host simulator",
                gpu == GM_BACKEND_HOST ? "GPU" : gm_backend_name(gpu), gm_backend_name(gpu));
    }
    return gm__context_create_with_ops(&gm__host_backend, options, ctx_p);
}

/* Resolve the backend (options, GM_BACKEND, build default), then create on its ops. */
gm_status gm_context_create(const gm_context_options *options, gm_context **ctx_p)
{
    static const char fn[] = "gm_context_create";
    gm_context_options resolved;
    gm_backend_kind kind = GM_BACKEND_DEFAULT;
    const gm_backend_ops *ops = NULL;
    gm_status status = GM_OK;

    if (ctx_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: ctx_p is NULL", fn);
    if (gm__in_stream_callback()) /* a driver's init there is refused (CUDA) */
        return gm__error(GM_ERR_STATE, "%s: not allowed inside a stream callback", fn);
    status = read_options(options, &resolved);
    if (status == GM_OK)
        status = check_options(&resolved);
    if (status != GM_OK)
        return status;
    if (resolved.log_hook != NULL) /* before anything about this context is logged */
        gm_set_log_hook(resolved.log_hook, resolved.log_user);
    kind = resolved.backend;
    if (kind == GM_BACKEND_DEFAULT)
        status = resolve_default(&kind);
    if (status != GM_OK)
        return status;
    if (kind == GM_BACKEND_AUTO)
        return create_auto(&resolved, ctx_p);
    if (kind != GM_BACKEND_HOST && kind != GM_BACKEND_CUDA && kind != GM_BACKEND_HSA)
        return gm__error(GM_ERR_INVALID_ARG, "%s: unknown backend kind %d", fn, (int)kind);
    ops = compiled_backend(kind);
    if (ops == NULL)
        return gm__error(GM_ERR_NO_DRIVER,
                         "%s: this build has no %s backend (built with "
                         "-Dgpu_backend=%s)",
                         fn, gm_backend_name(kind), gm_backend_name(GM_DEFAULT_BACKEND));
    return gm__context_create_with_ops(ops, &resolved, ctx_p);
}

/* ------------------------------------------------------ creation on ops */

/* Every function slot of gm_backend_ops, for the NULL check (its size is checked below). */
#define GM__SLOT(name) #name, offsetof(gm_backend_ops, name)
static const struct ops_slot {
    const char *name;
    size_t offset;
} ops_slots[] = {
    {GM__SLOT(init)},
    {GM__SLOT(fini)},
    {GM__SLOT(device_info)},
    {GM__SLOT(mem_info)},
    {GM__SLOT(mem_alloc)},
    {GM__SLOT(mem_free)},
    {GM__SLOT(mem_free_batch)},
    {GM__SLOT(host_alloc)},
    {GM__SLOT(host_free)},
    {GM__SLOT(host_device_pointer)},
    {GM__SLOT(host_register)},
    {GM__SLOT(host_unregister)},
    {GM__SLOT(managed_alloc)},
    {GM__SLOT(pointer_kind)},
    {GM__SLOT(copy)},
    {GM__SLOT(copy_strided)},
    {GM__SLOT(copy_views)},
    {GM__SLOT(memset)},
    {GM__SLOT(stream_create)},
    {GM__SLOT(stream_destroy)},
    {GM__SLOT(stream_builtin)},
    {GM__SLOT(stream_wrap)},
    {GM__SLOT(stream_unwrap)},
    {GM__SLOT(stream_native)},
    {GM__SLOT(stream_synchronize)},
    {GM__SLOT(stream_query)},
    {GM__SLOT(stream_add_callback)},
    {GM__SLOT(stream_enqueue_host)},
    {GM__SLOT(device_synchronize)},
    {GM__SLOT(event_create)},
    {GM__SLOT(event_destroy)},
    {GM__SLOT(event_record)},
    {GM__SLOT(stream_wait_event)},
    {GM__SLOT(event_query)},
    {GM__SLOT(event_synchronize)},
    {GM__SLOT(event_elapsed)},
    {GM__SLOT(module_load)},
    {GM__SLOT(module_unload)},
    {GM__SLOT(module_get_kernel)},
    {GM__SLOT(module_get_global)},
    {GM__SLOT(kernel_attrs)},
    {GM__SLOT(launch)},
    {GM__SLOT(module_set_global)},
    {GM__SLOT(ipc_get_handle)},
    {GM__SLOT(ipc_open)},
    {GM__SLOT(ipc_close)},
};
#undef GM__SLOT
_Static_assert(sizeof(gm_backend_ops) == offsetof(gm_backend_ops, init) + sizeof(ops_slots) /
                                                                              sizeof(ops_slots[0]) *
                                                                              sizeof(gm_op_init *),
               "ops_slots must list every function slot of gm_backend_ops");

/* Every slot of an ops table must be filled (optional ones with the stubs). */
static gm_status check_ops(const gm_backend_ops *ops)
{
    static const char fn[] = "gm_context_create";
    const char *name = ops->name != NULL ? ops->name : "?";

    if (ops->size != sizeof(*ops) || ops->abi_version != GM_BACKEND_ABI_VERSION)
        return gm__error(GM_ERR_VERSION_MISMATCH,
                         "%s: backend %s was built for ops ABI %" PRIu32 " (size %zu); this "
                         "library expects ABI %d (size %zu)",
                         fn, name, ops->abi_version, ops->size, GM_BACKEND_ABI_VERSION,
                         sizeof(*ops));
    for (size_t i = 0; i < sizeof(ops_slots) / sizeof(ops_slots[0]); i++) {
        void (*slot)(void) = NULL;

        memcpy(&slot, (const char *)ops + ops_slots[i].offset, sizeof(slot));
        if (slot == NULL)
            return gm__error(GM_ERR_INTERNAL, "%s: backend %s leaves ops->%s NULL", fn, name,
                             ops_slots[i].name);
    }
    return GM_OK;
}

/* Allocate the context shell: lists and lock, no backend yet. */
static gm_status context_alloc(const gm_backend_ops *ops, const gm_context_options *options,
                               gm_context **ctx_p)
{
    gm_context *ctx = gm__calloc(1, sizeof(*ctx));

    if (ctx == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "gm_context_create: out of host memory");
    if (pthread_mutex_init(&ctx->lock, NULL) != 0) {
        gm__free(ctx);
        return gm__error(GM_ERR_NO_MEMORY, "gm_context_create: cannot create the context lock");
    }
    atomic_init(&ctx->closing, false);
    gm__list_init(&ctx->pending_callbacks);
    atomic_init(&ctx->callbacks_running, 0);
    atomic_init(&ctx->callbacks_entered, 0);
    atomic_init(&ctx->callbacks_abandoned, false);
    ctx->ops = ops;
    ctx->options = *options;
    ctx->options.backend = ops->kind;
    ctx->device_id = options->device_id;
    gm__list_init(&ctx->arrays);
    gm__list_init(&ctx->arrays_named);
    gm__list_init(&ctx->streams);
    gm__list_init(&ctx->dying);
    gm__list_init(&ctx->events);
    gm__list_init(&ctx->scopes);
    gm__list_init(&ctx->exports);
    *ctx_p = ctx;
    return GM_OK;
}

/* The device-byte bound: ratio x total memory, saturated to int64. */
static int64_t device_bound(double ratio, int64_t total)
{
    double bound = ratio * (double)total;

    if (bound >= 9.2e18)
        return INT64_MAX;
    return (int64_t)bound;
}

/* Start the backend and the memory manager, and size the queue by the manager's total. */
static gm_status context_start(gm_context *ctx)
{
    gm_backend_init_args args = {ctx->options.device_id, ctx->options.host_warp_size};
    int64_t free_bytes = 0;
    gm_status status = gm__error_within("gm_context_create", ctx->ops->init(&args, &ctx->bctx));

    if (status != GM_OK)
        return status;
    status = gm__error_within("gm_context_create", gm__mm_initialize(ctx));
    if (status != GM_OK)
        goto fail_fini;
    status = gm__error_within("gm_context_create",
                              gm__mm_memory_info(ctx, &free_bytes, &ctx->total_memory));
    if (status != GM_OK)
        goto fail_reset;
    status = gm__dealloc_queue_init(&ctx->queue, ctx->options.max_pending_count,
                                    device_bound(ctx->options.max_pending_ratio, ctx->total_memory),
                                    ctx->options.max_pending_pinned_bytes);
    if (status != GM_OK)
        goto fail_reset;
    return GM_OK;
fail_reset:
    gm__mm_reset(ctx);
fail_fini:
    ctx->ops->fini(ctx->bctx);
    ctx->bctx = NULL;
    return status;
}

/* Validate options and ops, choose the memory manager, start the backend, size the queue. */
gm_status gm__context_create_with_ops(const gm_backend_ops *ops, const gm_context_options *options,
                                      gm_context **ctx_p)
{
    static const char fn[] = "gm_context_create";
    gm_context_options resolved;
    gm_context *ctx = NULL;
    gm_status status = GM_OK;

    if (ops == NULL || ctx_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn, ops == NULL ? "ops" : "ctx_p");
    status = read_options(options, &resolved);
    if (status == GM_OK)
        status = check_options(&resolved);
    if (status == GM_OK)
        status = check_ops(ops);
    if (status != GM_OK)
        return status;
    if (resolved.log_hook != NULL)
        gm_set_log_hook(resolved.log_hook, resolved.log_user);
    status = context_alloc(ops, &resolved, &ctx);
    if (status != GM_OK)
        return status;
    status = gm__mm_open(ctx, &resolved);
    if (status != GM_OK)
        goto fail_free;
    status = context_start(ctx);
    if (status != GM_OK)
        goto fail_unload;
    gm__log(GM_LOG_DEBUG,
            "context created on the %s backend, device %" PRId32 ", memory manager %s", ops->name,
            ctx->device_id, ctx->mm.table.name != NULL ? ctx->mm.table.name : "(unnamed)");
    *ctx_p = ctx;
    return GM_OK;
fail_unload:
    gm__mm_unload(ctx);
fail_free:
    pthread_mutex_destroy(&ctx->lock);
    gm__free(ctx);
    return status;
}

/* The NULL check every entry point starts with. */
gm_status gm__check_context(const char *fn, const gm_context *ctx)
{
    if (ctx == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: ctx is NULL", fn);
    return GM_OK;
}

/* ---------------------------------------------------------------- destroy */

/* Warn about arrays the application did not release, then free them. */
static void release_live_arrays(gm_context *ctx)
{
    int64_t arrays = 0, buffers = 0, bytes = 0;

    gm__arrays_teardown(ctx, &arrays, &buffers, &bytes);
    if (arrays > 0)
        gm__log(GM_LOG_WARN,
                "gm_context_destroy: %" PRId64 " arrays still alive (%" PRId64 " buffers, %" PRId64
                " bytes); their memory is freed with the context",
                arrays, buffers, bytes);
}

/*
 * Detach the DLPack exports still alive: their deleters may run after the
 * context is gone. Their arrays stay referenced and are reported with the
 * live arrays.
 */
static void detach_live_exports(gm_context *ctx)
{
    int64_t exports = gm__dlpack_detach_exports(ctx);

    if (exports > 0)
        gm__log(GM_LOG_WARN,
                "gm_context_destroy: %" PRId64 " DLPack exports still alive; their data pointers "
                "dangle from now on (their deleters stay safe to call)",
                exports);
}

/*
 * Teardown order: stream work, DLPack exports, registrations, arrays, events,
 * streams, queue, the memory manager's reset, backend, plugin.
 */
void gm_context_destroy(gm_context **ctx_p)
{
    gm_context *ctx = NULL;

    if (ctx_p == NULL || *ctx_p == NULL)
        return;
    if (gm__in_stream_callback()) { /* the callback's own return touches the context */
        gm__error(GM_ERR_STATE, "gm_context_destroy: not allowed inside a stream callback; the "
                                "context is left alive");
        gm__log(GM_LOG_ERROR, "%s", gm_last_error_message());
        return;
    }
    ctx = *ctx_p;
    *ctx_p = NULL;
    /* From here a callback still running cannot queue more stream work (a callback it
     * adds would run during, or after, the teardown below): GM_ERR_STATE. */
    atomic_store(&ctx->closing, true);
    /* Wait for every stream's work: listed streams, streams destroyed but still queued, and
     * those a callback destroys meanwhile (a walk of ctx->streams raced such a callback and
     * spun on a stream it unlinked), before modules still loaded are unloaded (directly,
     * below); then log the errors the listed streams still hold. Twice: a callback running
     * as `closing` was set may have passed its check of it just before, and queue work after
     * the first wait took its mark; that work starts after the callback it came from, so it
     * sees `closing` and queues nothing more, and the second wait covers it (it ran during
     * the teardown, on what the teardown had freed). */
    if (ctx->ops->device_synchronize(ctx->bctx) != GM_OK ||
        ctx->ops->device_synchronize(ctx->bctx) != GM_OK) {
        gm__log(GM_LOG_WARN, "gm_context_destroy: waiting for queued device work failed: %s",
                gm_last_error_message());
        gm__streams_wait_callbacks(ctx); /* they may release what the teardown frees */
    }
    /* After that wait: the callbacks it waited for may have exported arrays or opened
     * registration scopes (detached and ended before it, those were missed: an export's
     * deleter then released an array the teardown had freed). */
    detach_live_exports(ctx);
    gm__scopes_teardown(ctx);
    gm__streams_report_errors(ctx);
    gm__kernels_context_teardown(ctx);
    release_live_arrays(ctx);
    gm__events_teardown(ctx);
    gm__streams_teardown(ctx);
    gm__dealloc_queue_teardown(ctx);
    gm__mm_reset(ctx);
    ctx->ops->fini(ctx->bctx);
    /* When the device wait above failed, callbacks the fini ran may have queued more
     * (a wrapper they held, a release): freed now, with no backend to call. */
    gm__streams_free_callbacks(ctx);
    gm__streams_free_unrun(ctx);
    gm__dealloc_queue_orphans(ctx);
    gm__mm_unload(ctx);
    pthread_mutex_destroy(&ctx->lock);
    gm__free(ctx);
}

/* ---------------------------------------------------------------- queries */

/* The backend's properties, with backend and device_id filled by the core. */
gm_status gm_context_device_info(gm_context *ctx, gm_device_info *info_p)
{
    static const char fn[] = "gm_context_device_info";
    gm_device_info info;
    gm_status status = gm__check_context(fn, ctx);

    if (status != GM_OK)
        return status;
    if (info_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: info_p is NULL", fn);
    memset(&info, 0, sizeof(info));
    status = ctx->ops->device_info(ctx->bctx, &info);
    if (status != GM_OK)
        return status;
    gm__device_info_complete(&info);
    info.backend = ctx->ops->kind;
    info.device_id = ctx->device_id;
    *info_p = info;
    return GM_OK;
}

/* Free and total device memory from the memory manager (Numba's get_memory_info). */
gm_status gm_context_memory_info(gm_context *ctx, int64_t *free_p, int64_t *total_p)
{
    static const char fn[] = "gm_context_memory_info";
    int64_t free_bytes = 0, total_bytes = 0;
    gm_status status = gm__check_context(fn, ctx);

    if (status != GM_OK)
        return status;
    if (free_p == NULL || total_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn,
                         free_p == NULL ? "free_p" : "total_p");
    status = gm__mm_memory_info(ctx, &free_bytes, &total_bytes);
    if (status != GM_OK)
        return status;
    *free_p = free_bytes;
    *total_p = total_bytes;
    return GM_OK;
}

/* Wait for the work queued on every stream so far (the backend's device_synchronize). */
gm_status gm_context_synchronize(gm_context *ctx)
{
    static const char fn[] = "gm_context_synchronize";
    gm_status status = gm__check_context(fn, ctx);

    if (status != GM_OK)
        return status;
    if (gm__in_stream_callback())
        return gm__error(GM_ERR_STATE, "%s: not allowed inside a stream callback", fn);
    return gm__error_within(fn, ctx->ops->device_synchronize(ctx->bctx));
}

/* The kind of the ops table the context runs on. */
gm_backend_kind gm_context_backend(const gm_context *ctx)
{
    return ctx == NULL ? GM_BACKEND_DEFAULT : ctx->ops->kind;
}
