/*
 * Tests for memory managers (src/core/emm.c, gpumem/memory_manager.h): the
 * built-in table; the test plugin (emm_plugin.c, a shared module) given in
 * the options and loaded through GM_MEMORY_MANAGER; every allocation path
 * going through it; immediate and deferred frees; the out-of-memory retry;
 * defer_cleanup hooks; IPC handles; and every validation and failure path.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "emm_plugin.h"
#include "host/emm_plugin_path.h"
#include "rt_helpers.h"

#define MIB ((int64_t)1024 * 1024)
#define BIG (INT64_MAX / 4)

static void *plugin;         /* our own dlopen of the plugin (shares its statics) */
static emm_table_fn full_fn; /* gm_memory_manager_entry */
static emm_table_fn deferred_fn;
static emm_state *static_state;

static int group_setup(void **state)
{
    void *sym[3] = {NULL, NULL, NULL};

    setenv("GM_HOST_DEVICE_MEMORY", "64M", 1);
    setenv("GM_HOST_PINNED_MEMORY", "16M", 1);
    plugin = dlopen(EMM_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (plugin == NULL)
        return -1;
    sym[0] = dlsym(plugin, GM_MEMORY_MANAGER_ENTRY);
    sym[1] = dlsym(plugin, "emm_plugin_deferred");
    sym[2] = dlsym(plugin, "emm_plugin_static_state");
    if (sym[0] == NULL || sym[1] == NULL || sym[2] == NULL)
        return -1;
    memcpy(&full_fn, &sym[0], sizeof(full_fn));
    memcpy(&deferred_fn, &sym[1], sizeof(deferred_fn));
    {
        emm_state_fn state_fn = NULL;

        memcpy(&state_fn, &sym[2], sizeof(state_fn));
        static_state = state_fn();
    }
    return gm_test_use_cmocka_allocator(state);
}

static int group_teardown(void **state)
{
    dlclose(plugin);
    return gm_test_restore_allocator(state);
}

static int test_setup(void **state)
{
    (void)state;
    unsetenv("GM_MEMORY_MANAGER");
    unsetenv("EMM_PLUGIN_ENTRY_NULL");
    memset(static_state, 0, sizeof(*static_state));
    rt_fault_reset();
    return 0;
}

/* A context on `table` with state `s` (queue bounds large unless given). */
static gm_context *mm_context(const gm_memory_manager *table, emm_state *s, int64_t max_count)
{
    gm_context_options o = rt_options(max_count, 10.0, BIG);
    gm_context *ctx = NULL;

    o.memory_manager = table;
    o.memory_manager_user = s;
    assert_ok(gm_context_create(&o, &ctx));
    return ctx;
}

/* A 1-D uint8 device array of n bytes. */
static gm_array *device_bytes(gm_context *ctx, int64_t n)
{
    gm_array *a = NULL;

    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a));
    return a;
}

/* Every allocation freed, every token matched, every pin undone. */
static void assert_balanced(const emm_state *s)
{
    assert_int_equal(s->live_device_bytes, 0);
    assert_int_equal(s->live_host_bytes, 0);
    assert_int_equal(s->live_pins, 0);
    assert_int_equal(s->bad_tokens, 0);
}

/* No manager given: the built-in table, frees through the queue. */
static void test_builtin(void **state)
{
    gm_context_options o = rt_options(100, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a = NULL;
    int64_t free_bytes = 0, total = 0;

    (void)state;
    assert_ok(gm_context_create(&o, &ctx));
    assert_ptr_equal(gm_context_memory_manager(ctx), gm_builtin_memory_manager());
    assert_string_equal(gm_builtin_memory_manager()->name, "builtin");
    assert_int_equal(gm_builtin_memory_manager()->flags, GM_MEMORY_MANAGER_DEFERRED_FREE);
    assert_null(gm_context_memory_manager(NULL));
    a = device_bytes(ctx, 4096);
    gm_array_release(&a);
    assert_int_equal(rt_stats(ctx).pending_count, 1);
    assert_ok(gm_context_memory_info(ctx, &free_bytes, &total));
    assert_int_equal(total, 64 * MIB);
    gm_context_destroy(&ctx);
    /* the built-in table given explicitly, and GM_MEMORY_MANAGER=builtin */
    o.memory_manager = gm_builtin_memory_manager();
    assert_ok(gm_context_create(&o, &ctx));
    assert_ptr_equal(gm_context_memory_manager(ctx), gm_builtin_memory_manager());
    gm_context_destroy(&ctx);
    setenv("GM_MEMORY_MANAGER", "BuiltIn", 1);
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ptr_equal(gm_context_memory_manager(ctx), gm_builtin_memory_manager());
    gm_context_destroy(&ctx);
}

/* The full plugin from the options: every allocation path goes through it, frees at once. */
static void test_plugin_from_options(void **state)
{
    emm_state s;
    int64_t shape = 256, free_bytes = 0, total = 0;
    gm_context *ctx = NULL;
    gm_array *d = NULL, *p = NULL, *m = NULL;
    double host[256];
    gm_ndview hv;
    gm_host_scope *scope = NULL;

    (void)state;
    memset(&s, 0, sizeof(s));
    s.device_budget = 32 * MIB;
    ctx = mm_context(full_fn(), &s, 100);
    assert_ptr_equal(gm_context_memory_manager(ctx), full_fn());
    assert_int_equal(s.initialize, 1);
    assert_int_equal(s.memory_info, 1); /* sizing the queue */
    assert_ok(gm_context_memory_info(ctx, &free_bytes, &total));
    assert_int_equal(total, 32 * MIB);
    assert_ok(gm_device_array(ctx, 1, &shape, GM_FLOAT64, GM_ORDER_C, &d));
    assert_int_equal(s.memalloc, 1);
    assert_int_equal(s.live_device_bytes, 2048);
    assert_ok(gm_pinned_array(ctx, 1, &shape, GM_FLOAT64, GM_ORDER_C, &p));
    assert_false(s.last_mapped);
    assert_ok(gm_mapped_array(ctx, 1, &shape, GM_FLOAT64, GM_ORDER_C,
                              GM_HOST_PORTABLE | GM_HOST_WRITECOMBINED, &m));
    assert_true(s.last_mapped && s.last_portable && s.last_wc);
    assert_int_equal(s.memhostalloc, 2);
    /* the memory works: host -> device -> pinned */
    for (int i = 0; i < 256; i++)
        host[i] = i;
    assert_ok(gm_ndview_init(host, GM_FLOAT64, 1, &shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_array_copy_to_device(d, &hv, NULL));
    assert_ok(gm_array_copy_to_host(d, gm_array_view(p), NULL));
    assert_true(((double *)gm_array_view(p)->data)[255] == 255.0);
    /* registration goes through mempin / memunpin */
    s.last_mapped = false;
    assert_ok(gm_map(ctx, 1, &hv, NULL, &scope));
    assert_int_equal(s.mempin, 1);
    assert_true(s.last_mapped);
    assert_ok(gm_host_scope_end(&scope));
    assert_int_equal(s.memunpin, 1);
    /* frees happen at once, not through the queue */
    gm_array_release(&d);
    gm_array_release(&p);
    assert_int_equal(s.memfree, 1);
    assert_int_equal(s.memhostfree, 1);
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    assert_int_equal(rt_stats(ctx).freed_count, 0);
    gm_context_destroy(&ctx); /* m still alive: freed with the context */
    assert_int_equal(s.memhostfree, 2);
    assert_int_equal(s.reset, 1);
    assert_balanced(&s);
}

/* GM_MEMORY_MANAGER=path loads the plugin (the static state, or the options' user pointer). */
static void test_plugin_from_environment(void **state)
{
    emm_state s;
    gm_context_options o = rt_options(100, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a = NULL;

    (void)state;
    setenv("GM_MEMORY_MANAGER", EMM_PLUGIN_PATH, 1);
    assert_ok(gm_context_create(NULL, &ctx));
    assert_string_equal(gm_context_memory_manager(ctx)->name, EMM_PLUGIN_NAME);
    a = device_bytes(ctx, 1000);
    assert_int_equal(static_state->memalloc, 1);
    gm_array_release(&a);
    assert_int_equal(static_state->memfree, 1);
    gm_context_destroy(&ctx);
    assert_int_equal(static_state->reset, 1);
    assert_balanced(static_state);
    /* options without a table still give the plugin their user pointer */
    memset(&s, 0, sizeof(s));
    o.memory_manager_user = &s;
    assert_ok(gm_context_create(&o, &ctx));
    a = device_bytes(ctx, 1000);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
    assert_int_equal(s.memalloc, 1);
    assert_int_equal(s.initialize, 1);
    assert_balanced(&s);
    /* a table in the options wins over the variable */
    o.memory_manager = gm_builtin_memory_manager();
    assert_ok(gm_context_create(&o, &ctx));
    assert_ptr_equal(gm_context_memory_manager(ctx), gm_builtin_memory_manager());
    gm_context_destroy(&ctx);
}

/* GM_MEMORY_MANAGER_DEFERRED_FREE: device frees go through the queue; gpumem keeps host memory. */
static void test_deferred_plugin(void **state)
{
    emm_state s;
    int64_t n = 4096;
    gm_context *ctx = NULL;
    gm_array *d = NULL, *p = NULL;
    gm_ipc_handle h;
    gm_dealloc_stats st;

    (void)state;
    memset(&s, 0, sizeof(s));
    ctx = mm_context(deferred_fn(), &s, 100);
    d = device_bytes(ctx, n);
    assert_ok(gm_pinned_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &p));
    assert_int_equal(s.memhostalloc, 0);                           /* the built-in host allocator */
    assert_status(gm_array_ipc_handle(d, &h), GM_ERR_UNSUPPORTED); /* built-in: no IPC here */
    gm_array_release(&d);
    gm_array_release(&p);
    st = rt_stats(ctx);
    assert_int_equal(st.pending_count, 2);
    assert_int_equal(st.pending_device_bytes, n);
    assert_int_equal(st.pending_pinned_bytes, n);
    assert_int_equal(s.memfree, 0);
    assert_ok(gm_defer_cleanup_begin(ctx)); /* no hooks: only the queue's scope */
    assert_ok(gm_defer_cleanup_end(ctx));
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(s.memfree, 1);
    gm_context_destroy(&ctx);
    assert_balanced(&s);
}

/* Out of memory from the manager: flush and retry once, whatever the manager. */
static void test_out_of_memory(void **state)
{
    emm_state s;
    gm_context *ctx = NULL;
    gm_array *a = NULL, *b = NULL;
    int64_t n = 3 * MIB;

    (void)state;
    memset(&s, 0, sizeof(s));
    s.device_budget = 4 * MIB;
    ctx = mm_context(deferred_fn(), &s, 100);
    a = device_bytes(ctx, n);
    gm_array_release(&a); /* queued: the budget is still taken */
    b = device_bytes(ctx, n);
    assert_int_equal(s.memalloc, 3); /* ok, out of memory, ok after the flush */
    assert_int_equal(s.memfree, 1);
    gm_array_release(&b);
    gm_context_destroy(&ctx);
    assert_balanced(&s);
    /* an immediate manager: nothing queued, the retry fails too */
    memset(&s, 0, sizeof(s));
    s.device_budget = 4 * MIB;
    ctx = mm_context(full_fn(), &s, 100);
    a = device_bytes(ctx, n);
    assert_status(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &b),
                  GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_message_contains(
        "memory manager 'emm-test': memalloc returned ERR_OUT_OF_DEVICE_MEMORY");
    assert_int_equal(s.memalloc, 3);
    assert_null(b);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
    assert_balanced(&s);
}

/* Failures the manager returns, with messages naming it. */
static void test_manager_failures(void **state)
{
    emm_state s;
    gm_context *ctx = NULL;
    gm_array *a = NULL;
    int64_t n = 64;

    (void)state;
    memset(&s, 0, sizeof(s));
    ctx = mm_context(full_fn(), &s, 100);
    s.fail_memalloc = GM_ERR_DRIVER;
    assert_status(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a), GM_ERR_DRIVER);
    assert_message_contains("memory manager 'emm-test': memalloc returned ERR_DRIVER");
    assert_int_equal(s.memalloc, 1); /* not an out-of-memory status: no retry */
    /* a value that is no gm_status (positive, or unknown) is not passed on as one */
    s.fail_memalloc = (gm_status)7;
    assert_status(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a), GM_ERR_INTERNAL);
    assert_message_contains("memory manager 'emm-test': memalloc returned 7, which is not a "
                            "gm_status");
    assert_null(a);
    s.fail_memalloc = (gm_status)-9999;
    assert_status(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a), GM_ERR_INTERNAL);
    assert_message_contains("memalloc returned -9999, which is not a gm_status");
    s.memalloc = 1;
    s.fail_memalloc = GM_OK;
    s.memalloc_no_address = true;
    assert_status(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a), GM_ERR_INTERNAL);
    assert_message_contains("returned GM_OK and no address");
    s.memalloc_no_address = false;
    s.memalloc = 0;
    /* a failing immediate free is logged and the array is gone anyway */
    a = device_bytes(ctx, n);
    s.lie_memfree = GM_ERR_DRIVER;
    rt_log_capture(GM_LOG_ERROR);
    gm_array_release(&a);
    assert_true(rt_log_contains(GM_LOG_ERROR, "gm_array_release: freeing device memory"));
    assert_true(rt_log_contains(GM_LOG_ERROR, "memfree returned ERR_DRIVER"));
    rt_log_stop();
    s.lie_memfree = GM_OK;
    gm_context_destroy(&ctx);
    assert_balanced(&s);
    /* a base failure keeps the backend's message */
    memset(&s, 0, sizeof(s));
    ctx = mm_context(full_fn(), &s, 100);
    n = 512 * MIB;
    assert_status(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a),
                  GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_null(strstr(gm_last_error_message(), "memory manager 'emm-test'"));
    gm_context_destroy(&ctx);
}

/*
 * Several failing unpins at a scope's end: the status and the message are the
 * first failure's (after the call's name), each later one is logged, and
 * every range is unpinned anyway.
 */
static void test_unpin_failures(void **state)
{
    static _Alignas(4096) unsigned char bufs[3][8192];
    emm_state s;
    gm_context *ctx = NULL;
    gm_host_scope *scope = NULL;
    gm_ndview views[3];
    int64_t n = 100;

    (void)state;
    memset(&s, 0, sizeof(s));
    ctx = mm_context(full_fn(), &s, 100);
    for (int i = 0; i < 3; i++) /* three separate ranges: three unpins */
        assert_ok(gm_ndview_init(bufs[i], GM_UINT8, 1, &n, NULL, GM_ORDER_C, &views[i]));
    assert_ok(gm_pin(ctx, 3, views, &scope));
    assert_int_equal(s.mempin, 3);
    s.lie_memunpin[0] = GM_ERR_DRIVER;
    s.lie_memunpin[1] = GM_ERR_STATE;
    rt_log_capture(GM_LOG_WARN);
    assert_status(gm_host_scope_end(&scope), GM_ERR_DRIVER);
    assert_null(scope);
    assert_message_contains("gm_host_scope_end: memory manager 'emm-test': memunpin returned "
                            "ERR_DRIVER");
    assert_null(strstr(gm_last_error_message(), "ERR_STATE"));
    assert_true(rt_log_contains(GM_LOG_WARN, "memunpin returned ERR_STATE"));
    rt_log_stop();
    assert_int_equal(s.memunpin, 3);
    assert_int_equal(s.live_pins, 0);
    /* the ranges were unpinned: pinning them again works */
    s.lie_memunpin[0] = s.lie_memunpin[1] = GM_OK;
    s.memunpin = 0;
    assert_ok(gm_pin(ctx, 3, views, &scope));
    assert_ok(gm_host_scope_end(&scope));
    gm_context_destroy(&ctx);
    assert_balanced(&s);
}

/* A failing deferred free stops the flush and stays queued. */
static void test_deferred_free_failure(void **state)
{
    emm_state s;
    gm_context *ctx = NULL;
    gm_array *a = NULL;

    (void)state;
    memset(&s, 0, sizeof(s));
    ctx = mm_context(deferred_fn(), &s, 100);
    a = device_bytes(ctx, 100);
    gm_array_release(&a);
    s.fail_memfree = GM_ERR_INVALID_HANDLE;
    assert_status(gm_deallocations_flush(ctx), GM_ERR_INVALID_HANDLE);
    assert_message_contains("freeing device memory");
    assert_message_contains("memfree returned ERR_INVALID_HANDLE");
    assert_int_equal(rt_stats(ctx).pending_count, 1);
    s.fail_memfree = GM_OK;
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    gm_context_destroy(&ctx);
    assert_balanced(&s);
}

/* initialize / reset / get_memory_info failures around context creation and teardown. */
static void test_lifecycle_failures(void **state)
{
    emm_state s;
    gm_context_options o = rt_options(100, 10.0, BIG);
    gm_context *ctx = NULL;

    (void)state;
    memset(&s, 0, sizeof(s));
    o.memory_manager = full_fn();
    o.memory_manager_user = &s;
    s.fail_initialize = GM_ERR_PERMISSION;
    assert_status(gm_context_create(&o, &ctx), GM_ERR_PERMISSION);
    assert_message_contains(
        "gm_context_create: memory manager 'emm-test': initialize returned ERR_PERMISSION");
    assert_int_equal(s.reset, 0);
    assert_null(ctx);
    s.fail_initialize = GM_OK;
    s.fail_memory_info = GM_ERR_DRIVER;
    assert_status(gm_context_create(&o, &ctx), GM_ERR_DRIVER);
    assert_int_equal(s.reset, 1); /* initialize succeeded: reset is its undo */
    s.fail_memory_info = GM_OK;
    s.fail_reset = GM_ERR_DRIVER;
    assert_ok(gm_context_create(&o, &ctx));
    s.fail_memory_info = GM_ERR_NOT_READY;
    assert_status(gm_context_memory_info(ctx, &(int64_t){0}, &(int64_t){0}), GM_ERR_NOT_READY);
    s.fail_memory_info = GM_OK;
    rt_log_capture(GM_LOG_ERROR);
    gm_context_destroy(&ctx);
    assert_true(rt_log_contains(GM_LOG_ERROR, "reset returned ERR_DRIVER"));
    rt_log_stop();
    assert_int_equal(s.reset, 2);
}

/* get_memory_info's figures must not be negative. */
static gm_status negative_info(const gm_memory_manager_base *base, void *user, int64_t *free_p,
                               int64_t *total_p)
{
    (void)base;
    (void)user;
    *free_p = -1;
    *total_p = 100;
    return GM_OK;
}

static void test_negative_memory_info(void **state)
{
    gm_memory_manager table = *gm_builtin_memory_manager();
    gm_context_options o = rt_options(100, 10.0, BIG);
    gm_context *ctx = NULL;

    (void)state;
    table.get_memory_info = negative_info;
    o.memory_manager = &table;
    assert_status(gm_context_create(&o, &ctx), GM_ERR_INTERNAL);
    assert_message_contains("get_memory_info gave free -1");
}

/* defer_cleanup calls the manager's hooks at every level. */
static void test_defer_hooks(void **state)
{
    emm_state s;
    gm_context *ctx = NULL;

    (void)state;
    memset(&s, 0, sizeof(s));
    ctx = mm_context(full_fn(), &s, 100);
    assert_ok(gm_defer_cleanup_begin(ctx));
    assert_ok(gm_defer_cleanup_begin(ctx));
    assert_int_equal(s.defer_begin, 2);
    assert_int_equal(rt_stats(ctx).defer_depth, 2);
    assert_ok(gm_defer_cleanup_end(ctx));
    assert_ok(gm_defer_cleanup_end(ctx));
    assert_int_equal(s.defer_end, 2);
    assert_status(gm_defer_cleanup_end(ctx), GM_ERR_STATE);
    assert_int_equal(s.defer_end, 2); /* no scope: the manager is not called */
    s.fail_defer_begin = GM_ERR_PERMISSION;
    assert_status(gm_defer_cleanup_begin(ctx), GM_ERR_PERMISSION);
    assert_message_contains("gm_defer_cleanup_begin: memory manager 'emm-test': "
                            "defer_cleanup_begin returned ERR_PERMISSION");
    assert_int_equal(rt_stats(ctx).defer_depth, 0); /* the queue's scope closed again */
    s.fail_defer_begin = GM_OK;
    assert_ok(gm_defer_cleanup_begin(ctx));
    s.fail_defer_end = GM_ERR_DRIVER;
    assert_status(gm_defer_cleanup_end(ctx), GM_ERR_DRIVER);
    assert_message_contains("gm_defer_cleanup_end: memory manager 'emm-test': "
                            "defer_cleanup_end returned ERR_DRIVER");
    assert_int_equal(rt_stats(ctx).defer_depth, 0); /* closed anyway */
    gm_context_destroy(&ctx);
}

/*
 * A deferring manager with hooks: ending the last scope flushes when over the
 * bound, and so does a failing begin that closes the queue's scope again.
 */
static void test_defer_scope_flushes(void **state)
{
    emm_state s;
    gm_memory_manager table;
    gm_context *ctx = NULL;
    gm_array *a[3];

    (void)state;
    memset(&s, 0, sizeof(s));
    table = *full_fn();
    table.flags = GM_MEMORY_MANAGER_DEFERRED_FREE;
    ctx = mm_context(&table, &s, 1);
    for (int i = 0; i < 3; i++)
        a[i] = device_bytes(ctx, 10);
    assert_ok(gm_defer_cleanup_begin(ctx));
    for (int i = 0; i < 3; i++)
        gm_array_release(&a[i]);
    assert_int_equal(rt_stats(ctx).pending_count, 3);
    assert_int_equal(s.memfree, 0);
    assert_ok(gm_defer_cleanup_end(ctx)); /* over the bound: flushes */
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    assert_int_equal(s.memfree, 3);
    /* an automatic flush that failed leaves the queue over its bound, is logged, and leaves
     * the thread's error as it was (the release and the scope's end are no failures) ... */
    a[0] = device_bytes(ctx, 10);
    a[1] = device_bytes(ctx, 10);
    a[2] = device_bytes(ctx, 10);
    s.fail_memfree = GM_ERR_DRIVER;
    rt_log_capture(GM_LOG_WARN);
    assert_status(gm_device_array(ctx, 1, NULL, GM_UINT8, GM_ORDER_C, &a[0]),
                  GM_ERR_NULL_POINTER); /* an earlier error the caller has not read yet */
    gm_array_release(&a[0]);
    gm_array_release(&a[1]);
    assert_int_equal(rt_stats(ctx).pending_count, 2);
    assert_true(rt_log_contains(GM_LOG_WARN, "automatic flush stopped"));
    assert_int_equal(gm_last_error(), GM_ERR_NULL_POINTER);
    gm_clear_error();
    assert_ok(gm_defer_cleanup_begin(ctx));
    gm_array_release(&a[2]);
    assert_ok(gm_defer_cleanup_end(ctx)); /* the flush due at the end fails again */
    assert_int_equal(gm_last_error(), GM_OK);
    assert_int_equal(rt_stats(ctx).pending_count, 3);
    rt_log_stop();
    /* ... so a failing begin, which closes the queue's scope again, flushes, and the
     * manager's failure stays the thread's error */
    s.fail_memfree = GM_OK;
    s.fail_defer_begin = GM_ERR_PERMISSION;
    assert_status(gm_defer_cleanup_begin(ctx), GM_ERR_PERMISSION);
    assert_message_contains("defer_cleanup_begin returned ERR_PERMISSION");
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    assert_int_equal(rt_stats(ctx).defer_depth, 0);
    gm_context_destroy(&ctx);
    assert_balanced(&s);
}

/*
 * A manager that tries a base call which fails (a pool asking for a large
 * slab first) and then succeeds: the call returns GM_OK and leaves the
 * thread's error as it was (status.h), here an earlier error not read yet.
 */
static void test_base_failure_then_success(void **state)
{
    emm_state s;
    gm_context *ctx = NULL;
    gm_array *a = NULL;
    gm_array *h = NULL;
    int64_t n = 64;
    char buf[256];
    gm_ndview view;
    gm_host_scope *scope = NULL;

    (void)state;
    memset(&s, 0, sizeof(s));
    ctx = mm_context(full_fn(), &s, 100);
    s.try_base_first = true;
    assert_status(gm_device_array(ctx, 1, &n, GM_UINT8, (gm_order)7, &a), GM_ERR_INVALID_ARG);
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a));
    assert_int_equal(gm_last_error(), GM_ERR_INVALID_ARG);
    assert_ok(gm_pinned_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &h));
    assert_int_equal(gm_last_error(), GM_ERR_INVALID_ARG);
    assert_ok(gm_ndview_init(buf, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &view));
    assert_ok(gm_pin(ctx, 1, &view, &scope));
    assert_int_equal(gm_last_error(), GM_ERR_INVALID_ARG);
    assert_int_equal(s.base_tries, 3); /* each tried the base first, and failed */
    assert_ok(gm_host_scope_end(&scope));
    gm_array_release(&a);
    gm_array_release(&h);
    gm_context_destroy(&ctx);
    assert_balanced(&s);
}

/* A manager that keeps the base it is given, for test_base_messages_name_the_function. */
static const gm_memory_manager_base *kept_base;

static gm_status keep_base(const gm_memory_manager_base *base, void *user)
{
    (void)user;
    kept_base = base;
    return GM_OK;
}

static gm_status keep_memalloc(const gm_memory_manager_base *base, void *user, size_t bytes,
                               uint64_t *ptr_p, void **owner_p)
{
    (void)user;
    *owner_p = NULL;
    return base->memalloc(base, bytes, ptr_p);
}

static gm_status keep_memfree(const gm_memory_manager_base *base, void *user, uint64_t ptr,
                              size_t bytes, void *owner)
{
    (void)user;
    (void)bytes;
    (void)owner;
    return base->memfree(base, ptr);
}

static gm_status keep_memory_info(const gm_memory_manager_base *base, void *user, int64_t *free_p,
                                  int64_t *total_p)
{
    (void)user;
    return base->get_memory_info(base, free_p, total_p);
}

/*
 * memory_manager.h: the base functions record a message when they fail, and
 * status.h: a message names the call. A failing backend step used to leave
 * only the backend's internal op name ("host_register: ...", "mem_alloc: ...").
 * gpumem's own calls through the built-in manager keep naming themselves.
 */
static void test_base_messages_name_the_function(void **state)
{
    static const gm_memory_manager keeper = {
        .interface_version = GM_MEMORY_MANAGER_INTERFACE_VERSION,
        .size = (uint32_t)sizeof(gm_memory_manager),
        .name = "keeper",
        .initialize = keep_base,
        .memalloc = keep_memalloc,
        .memfree = keep_memfree,
        .get_memory_info = keep_memory_info,
    };
    gm_context_options o = rt_options(100, 10.0, BIG);
    gm_context *ctx = NULL;
    char buf[256];
    unsigned char handle[GM_IPC_HANDLE_BYTES];
    uint64_t address = 0;
    gm_ndview view;
    gm_host_scope *scope = NULL;
    int64_t n = 64;

    (void)state;
    o.memory_manager = &keeper;
    assert_ok(gm_context_create(&o, &ctx));
    assert_non_null(kept_base);
    assert_ok(kept_base->mempin(kept_base, buf, sizeof(buf), false));
    assert_status(kept_base->mempin(kept_base, buf, sizeof(buf), false), GM_ERR_STATE);
    assert_message_begins("memory manager base mempin: ");
    assert_status(kept_base->memunpin(kept_base, buf + 1), GM_ERR_INVALID_ARG);
    assert_message_begins("memory manager base memunpin: ");
    assert_ok(kept_base->memunpin(kept_base, buf));
    assert_status(kept_base->memalloc(kept_base, SIZE_MAX / 2, &address),
                  GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_message_begins("memory manager base memalloc: ");
    assert_status(kept_base->memalloc(kept_base, 0, &address), GM_ERR_INVALID_ARG);
    assert_message_begins("memory manager base memalloc: 0 bytes"); /* named once */
    assert_status(kept_base->get_ipc_handle(kept_base, 4096, handle), GM_ERR_UNSUPPORTED);
    assert_message_begins("memory manager base get_ipc_handle: ");
    /* the calls gpumem makes through the built-in functions name the public call */
    assert_ok(gm_ndview_init(buf, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &view));
    assert_ok(gm_pin(ctx, 1, &view, &scope));
    {
        gm_host_scope *again = NULL;

        assert_status(gm_pin(ctx, 1, &view, &again), GM_ERR_STATE);
        assert_message_begins("gm_pin: host_register: ");
    }
    assert_ok(gm_host_scope_end(&scope));
    gm_context_destroy(&ctx);
    kept_base = NULL;
}

/* IPC handles through the manager, and the arrays that have none. */
static void test_ipc(void **state)
{
    emm_state s;
    gm_context *ctx = NULL;
    gm_array *d = NULL, *v = NULL, *p = NULL, *z = NULL, *f = NULL;
    gm_ipc_handle h;
    int64_t n = 1000, zero = 0;
    uint64_t address = 0;

    (void)state;
    memset(&s, 0, sizeof(s));
    ctx = mm_context(full_fn(), &s, 100);
    d = device_bytes(ctx, n);
    assert_ok(gm_array_getitem(d, 1, &GM_IDX_SLICE(100, 200, 1), &v));
    assert_ok(gm_array_ipc_handle(v, &h));
    assert_int_equal(s.ipc, 1);
    memcpy(&address, h.handle + 8, sizeof(address));
    assert_int_equal(address, (uint64_t)(uintptr_t)gm_array_view(d)->data);
    assert_int_equal(h.handle[0], 0xE3);
    assert_int_equal(h.bytes, n);
    assert_int_equal(h.offset + gm_array_view(v)->offset, 100);
    assert_int_equal(h.backend, GM_BACKEND_HOST);
    assert_int_equal(h.device_id, 0);
    /* errors */
    assert_status(gm_array_ipc_handle(NULL, &h), GM_ERR_NULL_POINTER);
    assert_status(gm_array_ipc_handle(d, NULL), GM_ERR_NULL_POINTER);
    assert_ok(gm_pinned_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &p));
    assert_status(gm_array_ipc_handle(p, &h), GM_ERR_INVALID_ARG);
    assert_message_contains("not device memory");
    assert_ok(gm_device_array(ctx, 1, &zero, GM_UINT8, GM_ORDER_C, &z));
    assert_status(gm_array_ipc_handle(z, &h), GM_ERR_INVALID_ARG);
    assert_message_contains("size-0");
    assert_ok(gm_array_from_foreign(ctx, gm_array_view(d), NULL, NULL, NULL, &f));
    assert_status(gm_array_ipc_handle(f, &h), GM_ERR_UNSUPPORTED);
    assert_message_contains("foreign memory");
    gm_array_release(&f);
    gm_array_release(&z);
    gm_array_release(&p);
    gm_array_release(&v);
    gm_array_release(&d);
    gm_context_destroy(&ctx);
    assert_balanced(&s);
    /* the built-in manager asks the driver: the simulator has no IPC */
    assert_ok(gm_context_create(NULL, &ctx));
    d = device_bytes(ctx, n);
    assert_status(gm_array_ipc_handle(d, &h), GM_ERR_UNSUPPORTED);
    assert_message_begins("gm_array_ipc_handle: ipc_get_handle is not supported");
    /* ... nor can it open one; and what is checked before the driver is asked */
    {
        gm_ndview layout = *gm_array_view(d);

        assert_status(gm_array_from_ipc_handle(ctx, &h, &layout, &f), GM_ERR_UNSUPPORTED);
        assert_message_begins("gm_array_from_ipc_handle: ipc_open is not supported");
        assert_null(f);
        assert_status(gm_array_from_ipc_handle(NULL, &h, &layout, &f), GM_ERR_NULL_POINTER);
        assert_status(gm_array_from_ipc_handle(ctx, NULL, &layout, &f), GM_ERR_NULL_POINTER);
        assert_status(gm_array_from_ipc_handle(ctx, &h, NULL, &f), GM_ERR_NULL_POINTER);
        assert_status(gm_array_from_ipc_handle(ctx, &h, &layout, NULL), GM_ERR_NULL_POINTER);
        h.backend = GM_BACKEND_CUDA;
        assert_status(gm_array_from_ipc_handle(ctx, &h, &layout, &f), GM_ERR_INVALID_ARG);
        assert_message_contains("the handle was made by the cuda backend, the context runs host");
        h.backend = GM_BACKEND_HOST;
        h.bytes = 0;
        assert_status(gm_array_from_ipc_handle(ctx, &h, &layout, &f), GM_ERR_INVALID_ARG);
        h.bytes = n;
        layout.dtype.code = 0x77;
        assert_status(gm_array_from_ipc_handle(ctx, &h, &layout, &f), GM_ERR_DTYPE);
    }
    gm_array_release(&d);
    gm_context_destroy(&ctx);
}

/* A release inside a stream callback is queued even for an immediate manager. */
static void release_in_callback(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    gm_array_release((gm_array **)user);
}

static void test_release_in_stream_callback(void **state)
{
    emm_state s;
    gm_context *ctx = NULL;
    gm_stream *st = NULL;
    gm_array *a = NULL;

    (void)state;
    memset(&s, 0, sizeof(s));
    ctx = mm_context(full_fn(), &s, 100);
    a = device_bytes(ctx, 100);
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_stream_add_callback(st, release_in_callback, &a));
    assert_ok(gm_stream_synchronize(st));
    assert_null(a);
    assert_int_equal(s.memfree, 0);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(s.memfree, 1);
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
    assert_balanced(&s);
}

/* A context's table check: version, size, flags, mandatory functions, pairs. */
static void test_validation(void **state)
{
    gm_memory_manager t;
    gm_context_options o = rt_options(100, 10.0, BIG);
    gm_context *ctx = NULL;

    (void)state;
    o.memory_manager = &t;
#define EXPECT(field, value, status, text)                  \
    do {                                                    \
        t = *full_fn();                                     \
        t.field = value;                                    \
        assert_status(gm_context_create(&o, &ctx), status); \
        assert_message_contains(text);                      \
        assert_null(ctx);                                   \
    } while (0)
    EXPECT(interface_version, 2, GM_ERR_VERSION_MISMATCH, "implements interface version 2");
    EXPECT(interface_version, 0, GM_ERR_VERSION_MISMATCH, "this library implements version 1");
    EXPECT(size, 16, GM_ERR_VERSION_MISMATCH, "has a 16-byte table");
    EXPECT(flags, 1u << 5, GM_ERR_INVALID_ARG, "unknown flags 0x20");
    EXPECT(memalloc, NULL, GM_ERR_INVALID_ARG, "memalloc is NULL (it is mandatory)");
    EXPECT(memfree, NULL, GM_ERR_INVALID_ARG, "memfree is NULL");
    EXPECT(get_memory_info, NULL, GM_ERR_INVALID_ARG, "get_memory_info is NULL");
    EXPECT(memhostfree, NULL, GM_ERR_INVALID_ARG, "memhostalloc and memhostfree must be given");
    EXPECT(mempin, NULL, GM_ERR_INVALID_ARG, "mempin and memunpin");
    EXPECT(defer_cleanup_end, NULL, GM_ERR_INVALID_ARG,
           "defer_cleanup_begin and defer_cleanup_end");
#undef EXPECT
    /* the name is optional; an unnamed table is named so in messages */
    t = *full_fn();
    t.name = NULL;
    assert_ok(gm_context_create(&o, &ctx));
    assert_ptr_equal(gm_context_memory_manager(ctx), &t);
    gm_context_destroy(&ctx);
    t.memfree = NULL;
    assert_status(gm_context_create(&o, &ctx), GM_ERR_INVALID_ARG);
    assert_message_contains("'(unnamed)' (given in the options)");
    /* a larger table (a newer plugin's) is read up to this library's size */
    {
        struct {
            gm_memory_manager table;
            void *extra[4];
        } larger = {*gm_builtin_memory_manager(), {NULL, NULL, NULL, NULL}};

        larger.table.size = (uint32_t)sizeof(larger);
        o.memory_manager = &larger.table;
        assert_ok(gm_context_create(&o, &ctx));
        gm_context_destroy(&ctx);
    }
}

/* Plugins that cannot be used: missing file, no entry, NULL table, wrong version. */
static void test_plugin_loading_failures(void **state)
{
    gm_context *ctx = NULL;

    (void)state;
    setenv("GM_MEMORY_MANAGER", "/nonexistent/libemm.so", 1);
    assert_status(gm_context_create(NULL, &ctx), GM_ERR_NOT_FOUND);
    assert_message_contains("GM_MEMORY_MANAGER=/nonexistent/libemm.so: cannot load the plugin");
    setenv("GM_MEMORY_MANAGER", "libm.so.6", 1);
    assert_status(gm_context_create(NULL, &ctx), GM_ERR_NOT_FOUND);
    assert_message_contains("the plugin has no gm_memory_manager_entry()");
    setenv("GM_MEMORY_MANAGER", EMM_PLUGIN_PATH, 1);
    setenv("EMM_PLUGIN_ENTRY_NULL", "1", 1);
    assert_status(gm_context_create(NULL, &ctx), GM_ERR_INVALID_ARG);
    assert_message_contains("gm_memory_manager_entry() returned NULL");
    unsetenv("EMM_PLUGIN_ENTRY_NULL");
    setenv("GM_MEMORY_MANAGER", EMM_PLUGIN_V2_PATH, 1);
    assert_status(gm_context_create(NULL, &ctx), GM_ERR_VERSION_MISMATCH);
    assert_message_contains("the memory manager from GM_MEMORY_MANAGER=");
    assert_message_contains("implements interface version 2; this library implements version 1");
    assert_null(ctx);
    assert_int_equal(static_state->initialize, 0);
}

/* Bookkeeping allocation failures while a plugin is in use free everything. */
static void test_allocation_failures(void **state)
{
    emm_state s;
    gm_context_options o = rt_options(100, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a = NULL;
    int64_t n = 100;
    gm_status status = GM_OK;

    (void)state;
    memset(&s, 0, sizeof(s));
    o.memory_manager = full_fn();
    o.memory_manager_user = &s;
    for (int64_t k = 1; k < 100; k++) {
        rt_alloc_fail_at(k);
        status = gm_context_create(&o, &ctx);
        if (status == GM_OK) {
            status = gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a);
            gm_array_release(&a);
            gm_context_destroy(&ctx);
        }
        assert_true(status == GM_OK || status == GM_ERR_NO_MEMORY);
        if (status == GM_OK && rt_alloc_calls() < k)
            break;
    }
    gm_test_use_cmocka_allocator(NULL);
    assert_balanced(&s);
    assert_int_equal(s.initialize, s.reset);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_builtin, test_setup),
        cmocka_unit_test_setup(test_plugin_from_options, test_setup),
        cmocka_unit_test_setup(test_plugin_from_environment, test_setup),
        cmocka_unit_test_setup(test_deferred_plugin, test_setup),
        cmocka_unit_test_setup(test_out_of_memory, test_setup),
        cmocka_unit_test_setup(test_manager_failures, test_setup),
        cmocka_unit_test_setup(test_unpin_failures, test_setup),
        cmocka_unit_test_setup(test_deferred_free_failure, test_setup),
        cmocka_unit_test_setup(test_lifecycle_failures, test_setup),
        cmocka_unit_test_setup(test_negative_memory_info, test_setup),
        cmocka_unit_test_setup(test_defer_hooks, test_setup),
        cmocka_unit_test_setup(test_defer_scope_flushes, test_setup),
        cmocka_unit_test_setup(test_base_failure_then_success, test_setup),
        cmocka_unit_test_setup(test_base_messages_name_the_function, test_setup),
        cmocka_unit_test_setup(test_ipc, test_setup),
        cmocka_unit_test_setup(test_release_in_stream_callback, test_setup),
        cmocka_unit_test_setup(test_validation, test_setup),
        cmocka_unit_test_setup(test_plugin_loading_failures, test_setup),
        cmocka_unit_test_setup(test_allocation_failures, test_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
