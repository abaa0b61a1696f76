/* Helpers for the runtime suites; see rt_helpers.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "rt_helpers.h"

/* ------------------------------------------------------------ fault ops */

static _Atomic int64_t fault_calls[RT_OP_COUNT];
static int64_t fault_at[RT_OP_COUNT];
static gm_status fault_status[RT_OP_COUNT];
static gm_backend_ops fault_ops;

/* Count a call of `op`; return the injected failure for this call, or GM_OK. */
static gm_status fault_hit(rt_fault_op op, const char *name)
{
    int64_t call = atomic_fetch_add(&fault_calls[op], 1) + 1;

    if (fault_at[op] != call)
        return GM_OK;
    return gm__error(fault_status[op], "%s: injected failure on call %lld", name, (long long)call);
}

#define HOST gm__host_backend

static gm_status f_init(const gm_backend_init_args *args, gm_backend_ctx **bctx_p)
{
    gm_status s = fault_hit(RT_INIT, "init");

    return s != GM_OK ? s : HOST.init(args, bctx_p);
}

static gm_status f_mem_alloc(gm_backend_ctx *b, size_t bytes, gm_devptr *ptr_p)
{
    gm_status s = fault_hit(RT_MEM_ALLOC, "mem_alloc");

    return s != GM_OK ? s : HOST.mem_alloc(b, bytes, ptr_p);
}

static gm_status f_mem_free(gm_backend_ctx *b, gm_devptr ptr)
{
    gm_status s = fault_hit(RT_MEM_FREE, "mem_free");

    return s != GM_OK ? s : HOST.mem_free(b, ptr);
}

/*
 * The host's batch free, one allocation at a time, each counted as a
 * mem_free call; it stops before the call an injected failure is set for
 * (mem_free then makes that call and fails it) and where the host declines.
 */
static size_t f_mem_free_batch(gm_backend_ctx *b, const gm_devptr *ptrs, size_t n)
{
    size_t done = 0;

    for (; done < n; done++) {
        if (fault_at[RT_MEM_FREE] == atomic_load(&fault_calls[RT_MEM_FREE]) + 1 ||
            HOST.mem_free_batch(b, &ptrs[done], 1) != 1)
            break;
        atomic_fetch_add(&fault_calls[RT_MEM_FREE], 1);
    }
    return done;
}

static gm_status f_managed_alloc(gm_backend_ctx *b, size_t bytes, gm_devptr *ptr_p)
{
    gm_status s = fault_hit(RT_MANAGED_ALLOC, "managed_alloc");

    return s != GM_OK ? s : HOST.managed_alloc(b, bytes, ptr_p);
}

static gm_status f_host_alloc(gm_backend_ctx *b, size_t bytes, unsigned flags, void **ptr_p)
{
    gm_status s = fault_hit(RT_HOST_ALLOC, "host_alloc");

    return s != GM_OK ? s : HOST.host_alloc(b, bytes, flags, ptr_p);
}

static gm_status f_host_free(gm_backend_ctx *b, void *ptr)
{
    gm_status s = fault_hit(RT_HOST_FREE, "host_free");

    return s != GM_OK ? s : HOST.host_free(b, ptr);
}

static gm_status f_host_register(gm_backend_ctx *b, void *ptr, size_t bytes, unsigned flags)
{
    gm_status s = fault_hit(RT_HOST_REGISTER, "host_register");

    return s != GM_OK ? s : HOST.host_register(b, ptr, bytes, flags);
}

static gm_status f_host_unregister(gm_backend_ctx *b, void *ptr)
{
    gm_status s = fault_hit(RT_HOST_UNREGISTER, "host_unregister");

    return s != GM_OK ? s : HOST.host_unregister(b, ptr);
}

static gm_status f_host_device_pointer(gm_backend_ctx *b, void *host, gm_devptr *ptr_p)
{
    gm_status s = fault_hit(RT_HOST_DEVICE_POINTER, "host_device_pointer");

    return s != GM_OK ? s : HOST.host_device_pointer(b, host, ptr_p);
}

static gm_status f_copy(gm_backend_ctx *b, const gm_copy_desc *d, gm_backend_stream *st)
{
    gm_status s = fault_hit(RT_COPY, "copy");

    return s != GM_OK ? s : HOST.copy(b, d, st);
}

static gm_status f_copy_strided(gm_backend_ctx *b, const gm_ndview *dst, const gm_ndview *src,
                                gm_backend_stream *st)
{
    gm_status s = fault_hit(RT_COPY_STRIDED, "copy_strided");

    return s != GM_OK ? s : HOST.copy_strided(b, dst, src, st);
}

static gm_status f_memset(gm_backend_ctx *b, gm_devptr dst, const void *pattern, size_t k,
                          size_t count, gm_backend_stream *st)
{
    gm_status s = fault_hit(RT_MEMSET, "memset");

    return s != GM_OK ? s : HOST.memset(b, dst, pattern, k, count, st);
}

static gm_status f_stream_create(gm_backend_ctx *b, unsigned flags, gm_backend_stream **p)
{
    gm_status s = fault_hit(RT_STREAM_CREATE, "stream_create");

    return s != GM_OK ? s : HOST.stream_create(b, flags, p);
}

static gm_status f_stream_destroy(gm_backend_ctx *b, gm_backend_stream *st)
{
    gm_status s = fault_hit(RT_STREAM_DESTROY, "stream_destroy");

    return s != GM_OK ? s : HOST.stream_destroy(b, st);
}

static gm_status f_stream_synchronize(gm_backend_ctx *b, gm_backend_stream *st)
{
    gm_status s = fault_hit(RT_STREAM_SYNCHRONIZE, "stream_synchronize");

    return s != GM_OK ? s : HOST.stream_synchronize(b, st);
}

static gm_status f_enqueue_host(gm_backend_ctx *b, gm_backend_stream *st,
                                gm_backend_host_work_fn fn, void *user, void (*cleanup)(void *))
{
    gm_status s = fault_hit(RT_ENQUEUE_HOST, "stream_enqueue_host");

    return s != GM_OK ? s : HOST.stream_enqueue_host(b, st, fn, user, cleanup);
}

static gm_status f_add_callback(gm_backend_ctx *b, gm_backend_stream *st, gm_backend_callback_fn fn,
                                void *user)
{
    gm_status s = fault_hit(RT_ADD_CALLBACK, "stream_add_callback");

    return s != GM_OK ? s : HOST.stream_add_callback(b, st, fn, user);
}

static gm_status f_event_create(gm_backend_ctx *b, unsigned timing, gm_backend_event **p)
{
    gm_status s = fault_hit(RT_EVENT_CREATE, "event_create");

    return s != GM_OK ? s : HOST.event_create(b, timing, p);
}

static gm_status f_event_destroy(gm_backend_ctx *b, gm_backend_event *e)
{
    gm_status s = fault_hit(RT_EVENT_DESTROY, "event_destroy");

    return s != GM_OK ? s : HOST.event_destroy(b, e);
}

static gm_status f_device_synchronize(gm_backend_ctx *b)
{
    gm_status s = fault_hit(RT_DEVICE_SYNCHRONIZE, "device_synchronize");

    return s != GM_OK ? s : HOST.device_synchronize(b);
}

void rt_fault_reset(void)
{
    for (int i = 0; i < RT_OP_COUNT; i++) {
        atomic_store(&fault_calls[i], 0);
        fault_at[i] = 0;
        fault_status[i] = GM_OK;
    }
    fault_ops = HOST;
    fault_ops.name = "host (fault injection)";
    fault_ops.init = f_init;
    fault_ops.mem_alloc = f_mem_alloc;
    fault_ops.mem_free = f_mem_free;
    fault_ops.mem_free_batch = f_mem_free_batch;
    fault_ops.managed_alloc = f_managed_alloc;
    fault_ops.host_alloc = f_host_alloc;
    fault_ops.host_free = f_host_free;
    fault_ops.host_register = f_host_register;
    fault_ops.host_unregister = f_host_unregister;
    fault_ops.host_device_pointer = f_host_device_pointer;
    fault_ops.copy = f_copy;
    fault_ops.copy_strided = f_copy_strided;
    /* every copy planned, through f_copy and f_copy_strided (no shortcut past them) */
    fault_ops.copy_views = gm__unsupported_copy_views;
    fault_ops.memset = f_memset;
    fault_ops.stream_create = f_stream_create;
    fault_ops.stream_destroy = f_stream_destroy;
    fault_ops.stream_synchronize = f_stream_synchronize;
    fault_ops.stream_enqueue_host = f_enqueue_host;
    fault_ops.stream_add_callback = f_add_callback;
    fault_ops.event_create = f_event_create;
    fault_ops.event_destroy = f_event_destroy;
    fault_ops.device_synchronize = f_device_synchronize;
}

void rt_fault_fail_at(rt_fault_op op, int64_t call, gm_status status)
{
    fault_at[op] = call;
    fault_status[op] = status;
}

int64_t rt_fault_calls(rt_fault_op op)
{
    return atomic_load(&fault_calls[op]);
}

gm_backend_ops *rt_fault_ops(void)
{
    return &fault_ops;
}

gm_status rt_fault_context(const gm_context_options *options, gm_context **ctx_p)
{
    return gm__context_create_with_ops(&fault_ops, options, ctx_p);
}

/* ------------------------------------------------------------------ log */

#define LOG_MAX     64
#define LOG_MSG_MAX 512

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static gm_log_level log_levels[LOG_MAX];
static char log_messages[LOG_MAX][LOG_MSG_MAX];
static int log_count;

static void capture_hook(gm_log_level level, const char *message, void *user)
{
    (void)user;
    pthread_mutex_lock(&log_lock);
    if (log_count < LOG_MAX) {
        log_levels[log_count] = level;
        snprintf(log_messages[log_count], LOG_MSG_MAX, "%s", message);
        log_count++;
    }
    pthread_mutex_unlock(&log_lock);
}

void rt_log_capture(gm_log_level level)
{
    pthread_mutex_lock(&log_lock);
    log_count = 0;
    pthread_mutex_unlock(&log_lock);
    gm_set_log_level(level);
    gm_set_log_hook(capture_hook, NULL);
}

void rt_log_stop(void)
{
    gm_set_log_hook(NULL, NULL);
    gm_set_log_level(GM_LOG_WARN);
}

bool rt_log_contains(gm_log_level level, const char *needle)
{
    bool found = false;

    pthread_mutex_lock(&log_lock);
    for (int i = 0; i < log_count && !found; i++)
        found = log_levels[i] == level && strstr(log_messages[i], needle) != NULL;
    pthread_mutex_unlock(&log_lock);
    return found;
}

/* ------------------------------------------------------------ allocator */

static int64_t alloc_fail_at;
static int64_t alloc_calls;

/* Whether this allocator call is the one that fails. */
static bool alloc_fails(void)
{
    alloc_calls++;
    return alloc_calls == alloc_fail_at;
}

static void *failing_malloc(size_t size)
{
    return alloc_fails() ? NULL : test_malloc(size);
}

static void *failing_calloc(size_t count, size_t size)
{
    return alloc_fails() ? NULL : test_calloc(count, size);
}

static void *failing_realloc(void *ptr, size_t size)
{
    return alloc_fails() ? NULL : test_realloc(ptr, size);
}

static void forward_free(void *ptr)
{
    test_free(ptr);
}

void rt_alloc_fail_at(int64_t fail_at)
{
    static const gm_host_allocator allocator = {failing_malloc, failing_calloc, failing_realloc,
                                                forward_free};

    alloc_fail_at = fail_at;
    alloc_calls = 0;
    assert_ok(gm_set_host_allocator(&allocator));
}

int64_t rt_alloc_calls(void)
{
    return alloc_calls;
}

bool rt_alloc_sweep_done(gm_status s, int64_t n, int64_t limit)
{
    assert_ok(gm_test_use_cmocka_allocator(NULL));
    if (s == GM_OK && rt_alloc_calls() < n)
        return true;
    if (s != GM_OK && s != GM_ERR_NO_MEMORY) /* GM_OK: the failure was retried */
        fail_msg("allocation %lld: %s (%s)", (long long)n, gm_status_name(s),
                 gm_last_error_message());
    assert_true(n < limit);
    return false;
}

/* ---------------------------------------------------------------- misc */

gm_context_options rt_options(int64_t max_count, double ratio, int64_t max_pinned)
{
    gm_context_options o;

    gm_context_options_default(&o);
    o.backend = GM_BACKEND_HOST;
    o.max_pending_count = max_count;
    o.max_pending_ratio = ratio;
    o.max_pending_pinned_bytes = max_pinned;
    return o;
}

gm_dealloc_stats rt_stats(gm_context *ctx)
{
    gm_dealloc_stats s;

    memset(&s, 0, sizeof(s));
    assert_ok(gm_deallocations_stats(ctx, &s));
    return s;
}

gm_context *rt_fault_ctx(void)
{
    gm_context_options o = rt_options(1000, 10.0, INT64_MAX / 4);
    gm_context *ctx = NULL;

    assert_ok(rt_fault_context(&o, &ctx));
    return ctx;
}
