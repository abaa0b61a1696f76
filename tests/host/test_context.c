/*
 * Tests for contexts (src/core/context.c): options and their environment
 * defaults, backend selection, validation, device queries, teardown of
 * objects still alive, the ops-table checks, and bookkeeping-allocation
 * failures during creation.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "rt_helpers.h"
#include "../../src/host/sim/fiber.h"

#define MIB ((int64_t)1024 * 1024)

static const char *const env_names[] = {"GM_BACKEND", "GM_MAX_PENDING_DEALLOCS_COUNT",
                                        "GM_MAX_PENDING_DEALLOCS_RATIO",
                                        "GM_MAX_PENDING_PINNED_BYTES", "GM_MEMORY_MANAGER"};

static int group_setup(void **state)
{
    setenv("GM_HOST_DEVICE_MEMORY", "64M", 1);
    return gm_test_use_cmocka_allocator(state);
}

static int test_setup(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(env_names) / sizeof(env_names[0]); i++)
        unsetenv(env_names[i]);
    setenv("GM_BACKEND", "host", 1); /* this suite tests the simulator in every build */
    rt_fault_reset();
    return 0;
}

static void test_options_default(void **state)
{
    gm_context_options o;

    (void)state;
    gm_context_options_default(&o);
    assert_int_equal(o.struct_size, sizeof(o));
    assert_int_equal(o.backend, GM_BACKEND_DEFAULT);
    assert_int_equal(o.device_id, 0);
    assert_int_equal(o.max_pending_count, 10);
    assert_true(o.max_pending_ratio == 0.2);
    assert_int_equal(o.max_pending_pinned_bytes, 256 * MIB);
    assert_null(o.memory_manager);
    assert_null(o.log_hook);
    assert_int_equal(o.host_warp_size, 32);
    for (size_t i = 0; i < sizeof(o.reserved); i++)
        assert_int_equal(o.reserved[i], 0);
    gm_context_options_default(NULL);
}

static void test_options_environment(void **state)
{
    static const struct {
        const char *text;
        int64_t bytes;
    } sizes[] = {{"64M", 64 * MIB}, {"1G", 1024 * MIB}, {"512KiB", 512 * 1024},
                 {"100", 100},      {"2mb", 2 * MIB},   {"bogus", 256 * MIB},
                 {"-1", 256 * MIB}, {"3X", 256 * MIB},  {"99999999999T", 256 * MIB}};
    gm_context_options o;

    (void)state;
    setenv("GM_MAX_PENDING_DEALLOCS_COUNT", "20", 1);
    setenv("GM_MAX_PENDING_DEALLOCS_RATIO", "0.5", 1);
    gm_context_options_default(&o);
    assert_int_equal(o.max_pending_count, 20);
    assert_true(o.max_pending_ratio == 0.5);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        setenv("GM_MAX_PENDING_PINNED_BYTES", sizes[i].text, 1);
        gm_context_options_default(&o);
        assert_int_equal(o.max_pending_pinned_bytes, sizes[i].bytes);
    }
    rt_log_capture(GM_LOG_WARN);
    setenv("GM_MAX_PENDING_DEALLOCS_COUNT", "ten", 1);
    setenv("GM_MAX_PENDING_DEALLOCS_RATIO", "-0.5", 1);
    gm_context_options_default(&o);
    rt_log_stop();
    assert_int_equal(o.max_pending_count, 10);
    assert_true(o.max_pending_ratio == 0.2);
    assert_true(rt_log_contains(GM_LOG_WARN, "ignoring GM_MAX_PENDING_DEALLOCS_COUNT=\"ten\""));
    assert_true(rt_log_contains(GM_LOG_WARN, "ignoring GM_MAX_PENDING_DEALLOCS_RATIO"));
    setenv("GM_MAX_PENDING_DEALLOCS_COUNT", "", 1);
    gm_context_options_default(&o);
    assert_int_equal(o.max_pending_count, 10);
}

static void test_create_destroy(void **state)
{
    gm_context *ctx = NULL;

    (void)state;
    assert_ok(gm_context_create(NULL, &ctx));
    assert_non_null(ctx);
    assert_int_equal(gm_context_backend(ctx), GM_BACKEND_HOST);
    gm_context_destroy(&ctx);
    assert_null(ctx);
    gm_context_destroy(&ctx);
    gm_context_destroy(NULL);
    assert_status(gm_context_create(NULL, NULL), GM_ERR_NULL_POINTER);
}

/*
 * A GPU backend chosen explicitly: without it in the build, GM_ERR_NO_DRIVER
 * saying so; with it, whatever this machine has (a context on a GPU machine,
 * GM_ERR_NO_DRIVER / GM_ERR_NO_DEVICE elsewhere), never a silent fallback.
 */
static void check_gpu_choice(gm_context_options *o, gm_backend_kind kind)
{
    gm_context *ctx = NULL;
    gm_status status = gm_context_create(o, &ctx);

    if (!gm__backend_compiled(kind)) {
        assert_status(status, GM_ERR_NO_DRIVER);
        assert_message_contains(kind == GM_BACKEND_CUDA ? "this build has no cuda backend"
                                                        : "this build has no hsa backend");
        assert_null(ctx);
    } else if (status == GM_OK) {
        assert_int_equal(gm_context_backend(ctx), kind);
        gm_context_destroy(&ctx);
    } else {
        assert_true(status == GM_ERR_NO_DRIVER || status == GM_ERR_NO_DEVICE);
        assert_null(ctx);
    }
}

static void test_backend_selection(void **state)
{
    gm_context_options o;
    gm_context *ctx = NULL;

    (void)state;
    gm_context_options_default(&o);
    setenv("GM_BACKEND", "cuda", 1);
    check_gpu_choice(&o, GM_BACKEND_CUDA);
    setenv("GM_BACKEND", "hsa", 1);
    check_gpu_choice(&o, GM_BACKEND_HSA);
    setenv("GM_BACKEND", "tpu", 1);
    assert_status(gm_context_create(&o, &ctx), GM_ERR_INVALID_ARG);
    assert_message_contains("GM_BACKEND=tpu is not one of host, cuda, hsa, auto");
    assert_null(ctx);
    setenv("GM_BACKEND", "HOST", 1);
    assert_ok(gm_context_create(&o, &ctx));
    gm_context_destroy(&ctx);
    setenv("GM_BACKEND", "auto", 1);
    rt_log_capture(GM_LOG_INFO);
    gm_clear_error();
    assert_ok(gm_context_create(&o, &ctx));
    rt_log_stop();
    if (gm_context_backend(ctx) == GM_BACKEND_HOST)
        assert_true(rt_log_contains(GM_LOG_INFO, "GM_BACKEND_AUTO"));
    assert_int_equal(gm_last_error(), GM_OK); /* a GPU backend's refusal is logged only */
    gm_context_destroy(&ctx);
    /* an explicit backend ignores GM_BACKEND */
    setenv("GM_BACKEND", "tpu", 1);
    o.backend = GM_BACKEND_HOST;
    assert_ok(gm_context_create(&o, &ctx));
    assert_int_equal(gm_context_backend(ctx), GM_BACKEND_HOST);
    gm_context_destroy(&ctx);
    unsetenv("GM_BACKEND");
    o.backend = GM_BACKEND_CUDA;
    check_gpu_choice(&o, GM_BACKEND_CUDA);
    o.backend = GM_BACKEND_HSA;
    check_gpu_choice(&o, GM_BACKEND_HSA);
    o.backend = GM_BACKEND_AUTO;
    assert_ok(gm_context_create(&o, &ctx));
    gm_context_destroy(&ctx);
    o.backend = (gm_backend_kind)42;
    assert_status(gm_context_create(&o, &ctx), GM_ERR_INVALID_ARG);
    assert_null(ctx);
}

static void test_invalid_options(void **state)
{
    static const gm_memory_manager bad_manager = {.interface_version = 99};
    gm_context_options o;
    gm_context *ctx = NULL;

    (void)state;
    memset(&o, 0, sizeof(o));
    assert_status(gm_context_create(&o, &ctx), GM_ERR_INVALID_ARG);
    assert_message_contains("gm_context_options_default");
    gm_context_options_default(&o);
    o.struct_size = sizeof(o) + 8;
    assert_status(gm_context_create(&o, &ctx), GM_ERR_INVALID_ARG);
    gm_context_options_default(&o);
    o.reserved[3] = 1;
    assert_status(gm_context_create(&o, &ctx), GM_ERR_INVALID_ARG);
    assert_message_contains("reserved");
#define EXPECT_INVALID(field, value, text)                              \
    do {                                                                \
        gm_context_options_default(&o);                                 \
        o.field = (value);                                              \
        assert_status(gm_context_create(&o, &ctx), GM_ERR_INVALID_ARG); \
        assert_message_contains(text);                                  \
    } while (0)
    EXPECT_INVALID(device_id, -1, "device_id must be >= 0");
    EXPECT_INVALID(max_pending_count, -1, "max_pending_count must be >= 0");
    EXPECT_INVALID(max_pending_ratio, -0.1, "max_pending_ratio");
    EXPECT_INVALID(max_pending_ratio, NAN, "max_pending_ratio");
    EXPECT_INVALID(max_pending_pinned_bytes, -1, "max_pending_pinned_bytes");
    EXPECT_INVALID(host_warp_size, 48, "host_warp_size must be 32 or 64");
#undef EXPECT_INVALID
    /* memory managers: tests/host/test_emm.c has the rest */
    gm_context_options_default(&o);
    o.memory_manager = &bad_manager;
    assert_status(gm_context_create(&o, &ctx), GM_ERR_VERSION_MISMATCH);
    assert_message_contains("interface version 99");
    o.memory_manager = NULL;
    setenv("GM_MEMORY_MANAGER", "rmm", 1);
    assert_status(gm_context_create(&o, &ctx), GM_ERR_NOT_FOUND);
    assert_message_contains("GM_MEMORY_MANAGER=rmm: cannot load the plugin");
    setenv("GM_MEMORY_MANAGER", "default", 1);
    assert_ok(gm_context_create(&o, &ctx));
    gm_context_destroy(&ctx);
    /* an older, shorter options struct is read up to its size */
    o.struct_size = (uint32_t)offsetof(gm_context_options, reserved);
    assert_ok(gm_context_create(&o, &ctx));
    gm_context_destroy(&ctx);
    /* the host simulator has one device */
    gm_context_options_default(&o);
    o.device_id = 1;
    assert_status(gm_context_create(&o, &ctx), GM_ERR_NO_DEVICE);
    assert_null(ctx);
}

static int hook_calls;

static void counting_hook(gm_log_level level, const char *message, void *user)
{
    (void)level;
    (void)message;
    *(int *)user += 1;
}

/* options.log_hook is installed as the process log hook. */
static void test_log_hook_option(void **state)
{
    gm_context_options o;
    gm_context *ctx = NULL;
    gm_array *a = NULL;
    int64_t n = 4;

    (void)state;
    hook_calls = 0;
    gm_context_options_default(&o);
    o.log_hook = counting_hook;
    o.log_user = &hook_calls;
    assert_ok(gm_context_create(&o, &ctx));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a));
    gm_context_destroy(&ctx); /* warns about the live array */
    gm_set_log_hook(NULL, NULL);
    assert_true(hook_calls >= 1);
    /* It hears what is said about the creation itself (GM_BACKEND_AUTO's choice), the
     * first time too. */
    hook_calls = 0;
    gm_set_log_level(GM_LOG_INFO);
    o.backend = GM_BACKEND_AUTO;
    assert_ok(gm_context_create(&o, &ctx));
    gm_set_log_hook(NULL, NULL);
    gm_set_log_level(GM_LOG_WARN);
    assert_true(hook_calls >= 1);
    gm_context_destroy(&ctx);
    /* Options refused: their hook is not installed (its user data may be gone by then). */
    o.backend = GM_BACKEND_DEFAULT;
    o.host_warp_size = 48;
    assert_status(gm_context_create(&o, &ctx), GM_ERR_INVALID_ARG);
    hook_calls = 0;
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a));
    gm_context_destroy(&ctx); /* warns about the live array: to no hook */
    assert_int_equal(hook_calls, 0);
}

/* The simulator's variables: a malformed one fails the context, naming it; sizes take units. */
static void test_simulator_environment(void **state)
{
    static const struct {
        const char *name, *value;
        gm_status expect;
    } cases[] = {
        {"GM_SIM_STACK_BYTES", "4M", GM_OK},
        {"GM_SIM_STACK_BYTES", "4MiB", GM_OK},
        {"GM_SIM_STACK_BYTES", "4mb", GM_OK},
        {"GM_SIM_STACK_BYTES", "65536", GM_OK},
        {"GM_SIM_STACK_BYTES", "8388608x", GM_ERR_INVALID_ARG},
        {"GM_SIM_STACK_BYTES", "2G", GM_ERR_INVALID_ARG},
        {"GM_SIM_STACK_BYTES", "4K", GM_ERR_INVALID_ARG},
        {"GM_SIM_THREADS", "3", GM_OK},
        {"GM_SIM_THREADS", "abc", GM_ERR_INVALID_ARG},
        {"GM_SIM_THREADS", "0", GM_ERR_INVALID_ARG},
        {"GM_HOST_DEVICE_CACHE", "0M", GM_OK},
        {"GM_HOST_DEVICE_CACHE", "00", GM_OK},
        {"GM_HOST_DEVICE_CACHE", "0x", GM_ERR_INVALID_ARG},
    };
    gm_context *ctx = NULL;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        setenv(cases[i].name, cases[i].value, 1);
        assert_status(gm_context_create(NULL, &ctx), cases[i].expect);
        /* what the simulator's fibers then use: the size asked for, read the same way */
        if (cases[i].expect == GM_OK && strcmp(cases[i].name, "GM_SIM_STACK_BYTES") == 0)
            assert_int_equal(gm__fiber_default_stack_bytes(),
                             strcmp(cases[i].value, "65536") == 0 ? 65536 : 4 << 20);
        if (cases[i].expect != GM_OK) {
            assert_message_begins("gm_context_create: init: ");
            assert_message_contains(cases[i].name);
            assert_null(ctx);
        }
        gm_context_destroy(&ctx);
        unsetenv(cases[i].name);
    }
}

static void test_device_info(void **state)
{
    gm_context_options o;
    gm_context *ctx = NULL;
    gm_device_info info;

    (void)state;
    gm_context_options_default(&o);
    o.host_warp_size = 64;
    assert_ok(gm_context_create(&o, &ctx));
    assert_ok(gm_context_device_info(ctx, &info));
    assert_true(strlen(info.name) > 0);
    assert_int_equal(info.backend, GM_BACKEND_HOST);
    assert_int_equal(info.device_id, 0);
    assert_int_equal(info.warp_size, 64);
    assert_int_equal(info.total_memory, 64 * MIB);
    /* No opt-in on the simulator: the opt-in limit is the default one. */
    assert_true(info.shared_memory_per_block > 0);
    assert_int_equal(info.shared_memory_per_block_optin, info.shared_memory_per_block);
    assert_status(gm_context_device_info(ctx, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_context_device_info(NULL, &info), GM_ERR_NULL_POINTER);
    gm_context_destroy(&ctx);
}

static void test_memory_info(void **state)
{
    gm_context *ctx = NULL;
    gm_array *a = NULL;
    int64_t free_bytes = 0, total = 0, after = 0, n = MIB;

    (void)state;
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_context_memory_info(ctx, &free_bytes, &total));
    assert_int_equal(total, 64 * MIB);
    assert_int_equal(free_bytes, total);
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a));
    assert_ok(gm_context_memory_info(ctx, &after, &total));
    assert_int_equal(after, free_bytes - MIB);
    assert_status(gm_context_memory_info(ctx, NULL, &total), GM_ERR_NULL_POINTER);
    assert_status(gm_context_memory_info(ctx, &after, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_context_memory_info(NULL, &after, &total), GM_ERR_NULL_POINTER);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
}

static void test_backend_names(void **state)
{
    (void)state;
    assert_string_equal(gm_backend_name(GM_BACKEND_DEFAULT), "default");
    assert_string_equal(gm_backend_name(GM_BACKEND_HOST), "host");
    assert_string_equal(gm_backend_name(GM_BACKEND_CUDA), "cuda");
    assert_string_equal(gm_backend_name(GM_BACKEND_HSA), "hsa");
    assert_string_equal(gm_backend_name(GM_BACKEND_AUTO), "auto");
    assert_string_equal(gm_backend_name((gm_backend_kind)42), "unknown");
    assert_int_equal(gm_context_backend(NULL), GM_BACKEND_DEFAULT);
}

/* Destroy frees everything still alive, warning about arrays with count and bytes. */
static void test_destroy_live_objects(void **state)
{
    double host[8];
    int64_t n = 8;
    gm_ndview hv;
    gm_index_item half[1] = {GM_IDX_SLICE(0, 4, GM_NONE)};
    gm_context *ctx = NULL;
    gm_array *a = NULL, *v = NULL, *b = NULL, *p = NULL;
    gm_stream *st = NULL, *ext = NULL;
    gm_event *ev = NULL;
    gm_host_scope *scope = NULL;

    (void)state;
    assert_ok(gm_ndview_init(host, GM_FLOAT64, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(rt_fault_context(NULL, &ctx));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT64, GM_ORDER_C, &a));
    assert_ok(gm_array_getitem(a, 1, half, &v));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &b));
    assert_ok(gm_pinned_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &p));
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_stream_wrap_external(ctx, gm_stream_native(st), &ext));
    assert_non_null(gm_default_stream(ctx));
    assert_non_null(gm_per_thread_default_stream(ctx));
    assert_ok(gm_event_create(ctx, true, &ev));
    assert_ok(gm_event_record(ev, st));
    assert_ok(gm_pin(ctx, 1, &hv, &scope));
    rt_log_capture(GM_LOG_INFO);
    gm_context_destroy(&ctx);
    rt_log_stop();
    assert_true(rt_log_contains(GM_LOG_WARN, "4 arrays still alive (3 buffers, 80 bytes)"));
    assert_true(rt_log_contains(GM_LOG_WARN, "host registration scope"));
    assert_true(rt_log_contains(GM_LOG_INFO, "destroying 1 streams still alive"));
    assert_true(rt_log_contains(GM_LOG_INFO, "destroying 1 events still alive"));
    assert_int_equal(rt_fault_calls(RT_MEM_FREE), 2);
    assert_int_equal(rt_fault_calls(RT_HOST_FREE), 1);
    assert_int_equal(rt_fault_calls(RT_STREAM_DESTROY), 1);
    assert_int_equal(rt_fault_calls(RT_EVENT_DESTROY), 1);
    assert_int_equal(rt_fault_calls(RT_HOST_UNREGISTER), 1);
}

/* What a callback saw when it tried to destroy its context. */
typedef struct destroy_attempt {
    gm_context *ctx;
    gm_context *after;
    gm_status status;
} destroy_attempt;

static void destroy_in_callback(gm_stream *stream, gm_status status, void *user)
{
    destroy_attempt *d = user;
    gm_context *ctx = d->ctx;

    (void)stream;
    (void)status;
    gm_clear_error();
    gm_context_destroy(&ctx);
    d->after = ctx;
    d->status = gm_last_error();
}

/*
 * gm_context_destroy inside a stream callback is refused (the callback's own
 * return uses the context: a use after free): GM_ERR_STATE recorded and
 * logged, the context alive and usable, destroyed later as usual.
 */
static void test_destroy_inside_callback(void **state)
{
    gm_context *ctx = NULL;
    gm_stream *st = NULL;
    destroy_attempt d = {NULL, NULL, GM_OK};
    int64_t n = 8;
    gm_array *a = NULL;

    (void)state;
    assert_ok(rt_fault_context(NULL, &ctx));
    assert_ok(gm_stream_create(ctx, 0, &st));
    d.ctx = ctx;
    rt_log_capture(GM_LOG_ERROR);
    assert_ok(gm_stream_add_callback(st, destroy_in_callback, &d));
    assert_ok(gm_stream_synchronize(st));
    rt_log_stop();
    assert_int_equal(d.status, GM_ERR_STATE);
    assert_ptr_equal(d.after, ctx);
    assert_true(rt_log_contains(GM_LOG_ERROR, "not allowed inside a stream callback"));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a)); /* still alive */
    gm_array_release(&a);
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
    assert_null(ctx);
}

/* The ops table is checked before use; a failing init leaves nothing behind. */
static void test_ops_checks(void **state)
{
    gm_backend_ops ops = gm__host_backend;
    gm_context *ctx = NULL;

    (void)state;
    assert_status(gm__context_create_with_ops(NULL, NULL, &ctx), GM_ERR_NULL_POINTER);
    assert_status(gm__context_create_with_ops(&ops, NULL, NULL), GM_ERR_NULL_POINTER);
    ops.abi_version = GM_BACKEND_ABI_VERSION + 1;
    assert_status(gm__context_create_with_ops(&ops, NULL, &ctx), GM_ERR_VERSION_MISMATCH);
    assert_message_contains("expects ABI");
    ops = gm__host_backend;
    ops.size = sizeof(ops) - 8;
    assert_status(gm__context_create_with_ops(&ops, NULL, &ctx), GM_ERR_VERSION_MISMATCH);
    ops = gm__host_backend;
    ops.copy = NULL;
    assert_status(gm__context_create_with_ops(&ops, NULL, &ctx), GM_ERR_INTERNAL);
    assert_message_contains("leaves ops->copy NULL");
    ops = gm__host_backend; /* the module and launch slots too (their users do not check) */
    ops.module_load = NULL;
    assert_status(gm__context_create_with_ops(&ops, NULL, &ctx), GM_ERR_INTERNAL);
    assert_message_contains("leaves ops->module_load NULL");
    ops = gm__host_backend;
    ops.launch = NULL;
    assert_status(gm__context_create_with_ops(&ops, NULL, &ctx), GM_ERR_INTERNAL);
    rt_fault_fail_at(RT_INIT, 1, GM_ERR_NO_DEVICE);
    assert_status(rt_fault_context(NULL, &ctx), GM_ERR_NO_DEVICE);
    assert_null(ctx);
}

/* Every bookkeeping allocation of create + destroy may fail. */
static void test_injected_alloc_failures(void **state)
{
    int64_t n = 1;

    (void)state;
    for (;; n++) {
        gm_context *ctx = NULL;
        gm_status s = GM_OK;

        rt_alloc_fail_at(n);
        s = gm_context_create(NULL, &ctx);
        gm_context_destroy(&ctx);
        if (rt_alloc_sweep_done(s, n, 1000))
            break;
    }
    print_message("%lld bookkeeping allocations failed in turn\n", (long long)n);
    assert_true(n > 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_options_default, test_setup),
        cmocka_unit_test_setup(test_options_environment, test_setup),
        cmocka_unit_test_setup(test_create_destroy, test_setup),
        cmocka_unit_test_setup(test_backend_selection, test_setup),
        cmocka_unit_test_setup(test_invalid_options, test_setup),
        cmocka_unit_test_setup(test_log_hook_option, test_setup),
        cmocka_unit_test_setup(test_destroy_inside_callback, test_setup),
        cmocka_unit_test_setup(test_simulator_environment, test_setup),
        cmocka_unit_test_setup(test_device_info, test_setup),
        cmocka_unit_test_setup(test_memory_info, test_setup),
        cmocka_unit_test_setup(test_backend_names, test_setup),
        cmocka_unit_test_setup(test_destroy_live_objects, test_setup),
        cmocka_unit_test_setup(test_ops_checks, test_setup),
        cmocka_unit_test_setup(test_injected_alloc_failures, test_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, gm_test_restore_allocator);
}
