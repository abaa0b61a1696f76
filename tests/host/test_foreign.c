/*
 * Tests for foreign memory (src/core/foreign.c): wrapping memory gpumem did
 * not allocate (Numba's as_cuda_array), the release callback's timing, the
 * producer stream's synchronization, pointer queries (is_cuda_array) with
 * the registry fallback, and every error path.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt_helpers.h"

static int releases;    /* calls of count_release */
static void *last_user; /* its last argument */

static void count_release(void *user)
{
    releases++;
    last_user = user;
}

/* A release callback that drops the gm_array the foreign memory came from. */
static void release_array(void *user)
{
    gm_array *a = user;

    releases++;
    gm_array_release(&a);
}

static int group_setup(void **state)
{
    setenv("GM_HOST_DEVICE_MEMORY", "64M", 1);
    setenv("GM_HOST_PINNED_MEMORY", "16M", 1);
    return gm_test_use_cmocka_allocator(state);
}

static int test_setup(void **state)
{
    (void)state;
    releases = 0;
    last_user = NULL;
    rt_fault_reset();
    return 0;
}

/* Device memory wrapped without copying; views share it; release runs when the last goes. */
static void test_wrap_device(void **state)
{
    int64_t shape[2] = {4, 5};
    float host[20], back[20];
    gm_context *ctx = rt_fault_ctx();
    gm_array *owner = NULL, *f = NULL, *row = NULL;
    gm_ndview hv, bv;
    int64_t copies = 0;

    (void)state;
    for (int i = 0; i < 20; i++)
        host[i] = (float)i;
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_to_device(ctx, &hv, NULL, &owner));
    assert_ok(gm_array_from_foreign(ctx, gm_array_view(owner), release_array, owner, NULL, &f));
    assert_ptr_equal(gm_array_view(f)->data, gm_array_view(owner)->data);
    assert_int_equal(gm_array_view(f)->memory, GM_MEMORY_DEVICE);
    assert_int_equal(gm_array_view(f)->device_id, 0);
    assert_ptr_equal(gm_array_context(f), ctx);
    owner = NULL; /* the foreign array's release callback owns it now */
    copies = rt_fault_calls(RT_COPY) + rt_fault_calls(RT_COPY_STRIDED);
    assert_ok(gm_array_getitem(f, 1, &GM_IDX_INT(2), &row));
    assert_int_equal(rt_fault_calls(RT_COPY) + rt_fault_calls(RT_COPY_STRIDED), copies);
    assert_ok(gm_ndview_init(back, GM_FLOAT32, 1, &shape[1], NULL, GM_ORDER_C, &bv));
    assert_ok(gm_array_copy_to_host(row, &bv, NULL));
    assert_true(back[0] == 10.0f && back[4] == 14.0f);
    gm_array_release(&f);
    assert_int_equal(releases, 0); /* the row still views it */
    gm_array_release(&row);
    assert_int_equal(releases, 1);                    /* at once, not through the queue */
    assert_int_equal(rt_stats(ctx).pending_count, 1); /* the owner array's own memory */
    gm_context_destroy(&ctx);
}

/* Memory kinds and devices of foreign views. */
static void test_placement(void **state)
{
    int64_t n = 16;
    double *buf = malloc(16 * sizeof(double));
    gm_context *ctx = rt_fault_ctx();
    gm_array *a = NULL;
    gm_ndview v;

    (void)state;
    assert_non_null(buf);
    assert_ok(gm_ndview_init(buf, GM_FLOAT64, 1, &n, NULL, GM_ORDER_C, &v));
    assert_ok(gm_array_from_foreign(ctx, &v, count_release, buf, NULL, &a));
    assert_int_equal(gm_array_view(a)->memory, GM_MEMORY_HOST);
    assert_int_equal(gm_array_view(a)->device_id, -1);
    gm_array_release(&a);
    assert_int_equal(releases, 1);
    assert_ptr_equal(last_user, buf);
    v.memory = GM_MEMORY_MAPPED;
    assert_ok(gm_array_from_foreign(ctx, &v, NULL, NULL, NULL, &a));
    assert_int_equal(gm_array_view(a)->device_id, 0); /* -1 means the context's device */
    gm_array_release(&a);
    v.memory = 7;
    assert_status(gm_array_from_foreign(ctx, &v, count_release, NULL, NULL, &a),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("unknown memory kind 7");
    v.memory = GM_MEMORY_PINNED;
    v.device_id = 0;
    assert_status(gm_array_from_foreign(ctx, &v, count_release, NULL, NULL, &a),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("device_id -1");
    v.memory = GM_MEMORY_DEVICE;
    v.device_id = 3;
    assert_status(gm_array_from_foreign(ctx, &v, count_release, NULL, NULL, &a),
                  GM_ERR_WRONG_CONTEXT);
    assert_message_contains("on device 3");
    assert_null(a);
    assert_int_equal(releases, 1); /* failures never call release */
    gm_context_destroy(&ctx);
    free(buf);
}

/* A callback that takes a while before setting its flag. */
static void slow_callback(gm_stream *stream, gm_status status, void *user)
{
    struct timespec ts = {0, 30 * 1000000L};

    (void)stream;
    (void)status;
    nanosleep(&ts, NULL);
    atomic_store((atomic_int *)user, 1);
}

/* The producer's stream is synchronized before wrapping (Numba's sync=True). */
static void test_stream_sync(void **state)
{
    int64_t n = 8;
    gm_context *ctx = rt_fault_ctx(), *other = rt_fault_ctx();
    gm_stream *st = NULL, *foreign_st = NULL;
    gm_array *d = NULL, *f = NULL;
    atomic_int done;

    (void)state;
    atomic_init(&done, 0);
    assert_ok(gm_device_array(ctx, 1, &n, GM_INT32, GM_ORDER_C, &d));
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_stream_add_callback(st, slow_callback, &done));
    assert_ok(gm_array_from_foreign(ctx, gm_array_view(d), count_release, NULL, st, &f));
    assert_int_equal(atomic_load(&done), 1);
    gm_array_release(&f);
    assert_ok(gm_stream_create(other, 0, &foreign_st));
    assert_status(gm_array_from_foreign(ctx, gm_array_view(d), count_release, NULL, foreign_st, &f),
                  GM_ERR_WRONG_CONTEXT);
    rt_fault_fail_at(RT_STREAM_SYNCHRONIZE, rt_fault_calls(RT_STREAM_SYNCHRONIZE) + 1,
                     GM_ERR_LAUNCH);
    assert_status(gm_array_from_foreign(ctx, gm_array_view(d), count_release, NULL, st, &f),
                  GM_ERR_LAUNCH);
    assert_message_begins("gm_array_from_foreign: ");
    assert_message_contains("injected failure");
    assert_null(f);
    assert_int_equal(releases, 1);
    gm_stream_destroy(&foreign_st);
    gm_stream_destroy(&st);
    gm_array_release(&d);
    gm_context_destroy(&other);
    gm_context_destroy(&ctx);
}

/* Argument checks. */
static void test_arguments(void **state)
{
    int64_t n = 4;
    gm_context *ctx = rt_fault_ctx();
    gm_array *a = NULL;
    gm_ndview v;

    (void)state;
    assert_ok(gm_ndview_init(NULL, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &v));
    assert_status(gm_array_from_foreign(NULL, &v, NULL, NULL, NULL, &a), GM_ERR_NULL_POINTER);
    assert_status(gm_array_from_foreign(ctx, NULL, NULL, NULL, NULL, &a), GM_ERR_NULL_POINTER);
    assert_message_contains("view is NULL");
    assert_status(gm_array_from_foreign(ctx, &v, NULL, NULL, NULL, NULL), GM_ERR_NULL_POINTER);
    assert_message_contains("array_p is NULL");
    assert_status(gm_array_from_foreign(ctx, &v, NULL, NULL, NULL, &a), GM_ERR_NULL_POINTER);
    assert_message_contains("view->data is NULL in a non-empty view");
    v.ndim = GM_MAX_DIMS + 1;
    assert_status(gm_array_from_foreign(ctx, &v, NULL, NULL, NULL, &a), GM_ERR_TOO_MANY_DIMS);
    v.ndim = 1;
    v.shape[0] = -2;
    assert_status(gm_array_from_foreign(ctx, &v, NULL, NULL, NULL, &a), GM_ERR_INVALID_ARG);
    /* an empty view needs no data; its release still runs */
    n = 0;
    assert_ok(gm_ndview_init(NULL, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &v));
    assert_ok(gm_array_from_foreign(ctx, &v, count_release, NULL, NULL, &a));
    gm_array_release(&a);
    assert_int_equal(releases, 1);
    gm_context_destroy(&ctx);
}

/* Releasing the last reference inside a stream callback queues the release. */
static void release_in_callback(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    gm_array_release((gm_array **)user);
}

static void test_release_in_stream_callback(void **state)
{
    int64_t n = 32;
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;
    gm_array *d = NULL, *f = NULL;
    int64_t pending = 0;

    (void)state;
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &d));
    assert_ok(gm_array_from_foreign(ctx, gm_array_view(d), count_release, &n, NULL, &f));
    assert_ok(gm_stream_create(ctx, 0, &st));
    pending = rt_stats(ctx).pending_count;
    assert_ok(gm_stream_add_callback(st, release_in_callback, &f));
    assert_ok(gm_stream_synchronize(st));
    assert_null(f);
    assert_int_equal(releases, 0);
    assert_true(rt_stats(ctx).pending_count > pending);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(releases, 1);
    assert_ptr_equal(last_user, &n);
    gm_stream_destroy(&st);
    gm_array_release(&d);
    gm_context_destroy(&ctx);
}

/* A foreign array still alive at context teardown is released with it. */
static void test_teardown_releases(void **state)
{
    int64_t n = 32;
    gm_context *ctx = rt_fault_ctx();
    gm_array *d = NULL, *f = NULL;

    (void)state;
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &d));
    assert_ok(gm_array_from_foreign(ctx, gm_array_view(d), count_release, NULL, NULL, &f));
    gm_array_release(&d);
    gm_context_destroy(&ctx);
    assert_int_equal(releases, 1);
}

/* Bookkeeping allocation failures: nothing leaks, release is never called. */
static void test_allocation_failures(void **state)
{
    int64_t n = 64;
    gm_context *ctx = rt_fault_ctx();
    gm_array *d = NULL, *f = NULL;
    gm_status s = GM_OK;
    int64_t k = 1;

    (void)state;
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &d));
    for (;; k++) {
        rt_alloc_fail_at(k);
        s = gm_array_from_foreign(ctx, gm_array_view(d), count_release, NULL, NULL, &f);
        assert_ok(gm_test_use_cmocka_allocator(NULL));
        if (s == GM_OK)
            break;
        assert_status(s, GM_ERR_NO_MEMORY);
        assert_null(f);
        assert_int_equal(releases, 0);
    }
    assert_true(k > 2);
    gm_array_release(&f);
    assert_int_equal(releases, 1);
    gm_array_release(&d);
    gm_context_destroy(&ctx);
}

/* Pointer kinds from the simulator's registry. */
static void test_pointer_kind(void **state)
{
    int64_t n = 64;
    gm_context *ctx = rt_fault_ctx();
    gm_array *d = NULL, *p = NULL, *m = NULL;
    char stack[16];
    gm_memory_kind kind = GM_MEMORY_DEVICE;
    bool is = true;

    (void)state;
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &d));
    assert_ok(gm_pinned_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &p));
    assert_ok(gm_mapped_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, 0, &m));
    assert_ok(gm_pointer_kind(ctx, (char *)gm_array_view(d)->data + 10, &kind));
    assert_int_equal(kind, GM_MEMORY_DEVICE);
    assert_ok(gm_pointer_kind(ctx, gm_array_view(p)->data, &kind));
    assert_int_equal(kind, GM_MEMORY_PINNED);
    assert_ok(gm_pointer_kind(ctx, gm_array_view(m)->data, &kind));
    assert_int_equal(kind, GM_MEMORY_MAPPED);
    assert_ok(gm_pointer_kind(ctx, stack, &kind));
    assert_int_equal(kind, GM_MEMORY_HOST);
    assert_ok(gm_pointer_kind(ctx, NULL, &kind));
    assert_int_equal(kind, GM_MEMORY_HOST);
    assert_ok(gm_is_device_pointer(ctx, gm_array_view(d)->data, &is));
    assert_true(is);
    assert_ok(gm_is_device_pointer(ctx, gm_array_view(m)->data, &is));
    assert_false(is);
    assert_ok(gm_is_device_pointer(ctx, stack, &is));
    assert_false(is);
    assert_status(gm_pointer_kind(NULL, stack, &kind), GM_ERR_NULL_POINTER);
    assert_status(gm_pointer_kind(ctx, stack, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_is_device_pointer(NULL, stack, &is), GM_ERR_NULL_POINTER);
    assert_message_contains("gm_is_device_pointer: ctx is NULL");
    assert_status(gm_is_device_pointer(ctx, stack, NULL), GM_ERR_NULL_POINTER);
    gm_array_release(&m);
    gm_array_release(&p);
    gm_array_release(&d);
    gm_context_destroy(&ctx);
}

/* A pointer_kind op that fails like a driver would. */
static gm_status failing_pointer_kind(gm_backend_ctx *bctx, const void *ptr, int *kind_p)
{
    (void)bctx;
    (void)ptr;
    (void)kind_p;
    return gm__error(GM_ERR_DRIVER, "pointer_kind: injected failure");
}

/* Without the backend's answer, the context's arrays answer (foreign ones included). */
static void test_pointer_kind_fallback(void **state)
{
    int64_t n = 64;
    char *buf = malloc(64);
    gm_context *ctx = NULL;
    gm_array *d = NULL, *p = NULL, *f = NULL;
    gm_memory_kind kind = GM_MEMORY_HOST;
    gm_ndview v;
    bool is = false;

    (void)state;
    assert_non_null(buf);
    rt_fault_ops()->pointer_kind = gm__unsupported_pointer_kind;
    ctx = rt_fault_ctx();
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &d));
    assert_ok(gm_pinned_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &p));
    assert_ok(gm_pointer_kind(ctx, (char *)gm_array_view(d)->data + 63, &kind));
    assert_int_equal(kind, GM_MEMORY_DEVICE);
    assert_ok(gm_pointer_kind(ctx, (char *)gm_array_view(d)->data + 64, &kind));
    assert_int_equal(kind == GM_MEMORY_DEVICE, false); /* one past the end */
    assert_ok(gm_pointer_kind(ctx, gm_array_view(p)->data, &kind));
    assert_int_equal(kind, GM_MEMORY_PINNED);
    /* foreign memory declared as device memory is device memory to this context */
    assert_ok(gm_ndview_init(buf, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &v));
    v.memory = GM_MEMORY_DEVICE;
    assert_ok(gm_is_device_pointer(ctx, buf, &is));
    assert_false(is);
    assert_ok(gm_array_from_foreign(ctx, &v, NULL, NULL, NULL, &f));
    assert_ok(gm_is_device_pointer(ctx, buf + 5, &is));
    assert_true(is);
    gm_array_release(&f);
    gm_array_release(&p);
    gm_array_release(&d);
    gm_context_destroy(&ctx);
    /* the simulator's answer "host" is completed the same way */
    rt_fault_reset();
    ctx = rt_fault_ctx();
    assert_ok(gm_array_from_foreign(ctx, &v, NULL, NULL, NULL, &f));
    assert_ok(gm_is_device_pointer(ctx, buf, &is));
    assert_true(is);
    gm_array_release(&f);
    gm_context_destroy(&ctx);
    /* a driver failure is returned */
    rt_fault_ops()->pointer_kind = failing_pointer_kind;
    ctx = rt_fault_ctx();
    assert_status(gm_pointer_kind(ctx, buf, &kind), GM_ERR_DRIVER);
    assert_status(gm_is_device_pointer(ctx, buf, &is), GM_ERR_DRIVER);
    gm_context_destroy(&ctx);
    free(buf);
}

/* A memory manager whose device memory is plain malloc memory: the backend knows none of it. */
static gm_status malloc_memalloc(const gm_memory_manager_base *base, void *user, size_t bytes,
                                 uint64_t *ptr_p, void **owner_p)
{
    void *p = malloc(bytes);

    (void)base;
    (void)user;
    *owner_p = NULL;
    *ptr_p = (uint64_t)(uintptr_t)p;
    return p != NULL ? GM_OK : GM_ERR_OUT_OF_DEVICE_MEMORY;
}

static gm_status malloc_memfree(const gm_memory_manager_base *base, void *user, uint64_t ptr,
                                size_t bytes, void *owner)
{
    (void)base;
    (void)user;
    (void)bytes;
    (void)owner;
    free((void *)(uintptr_t)ptr);
    return GM_OK;
}

static gm_status malloc_memory_info(const gm_memory_manager_base *base, void *user, int64_t *free_p,
                                    int64_t *total_p)
{
    (void)user;
    return base->get_memory_info(base, free_p, total_p);
}

/* The backend's pointer_kind as CUDA answers: all page-locked memory is "pinned". */
static gm_status pinned_for_mapped_pointer_kind(gm_backend_ctx *bctx, const void *ptr, int *kind_p)
{
    gm_status status = gm__host_backend.pointer_kind(bctx, ptr, kind_p);

    if (status == GM_OK && *kind_p == GM_MEMORY_MAPPED)
        *kind_p = GM_MEMORY_PINNED;
    return status;
}

/*
 * gm_pointer_kind looks only through the arrays whose memory the backend
 * cannot name by itself (runtime_internal.h, ctx->arrays_named): a memory
 * manager's device memory, and views that outlive the array they came from
 * (listed where that array was), are still found among many device arrays.
 */
static void test_pointer_kind_named_arrays(void **state)
{
    static const gm_memory_manager mallocs = {
        .interface_version = GM_MEMORY_MANAGER_INTERFACE_VERSION,
        .size = (uint32_t)sizeof(gm_memory_manager),
        .name = "malloc",
        .memalloc = malloc_memalloc,
        .memfree = malloc_memfree,
        .get_memory_info = malloc_memory_info,
    };
    int64_t n = 64, half = 32;
    gm_context_options o;
    gm_context *ctx = NULL;
    gm_array *plain[8] = {NULL}, *d = NULL, *m = NULL, *view = NULL, *mview = NULL;
    gm_memory_kind kind = GM_MEMORY_HOST;
    gm_ndview v;
    char *data = NULL;

    (void)state;
    /* device memory the manager took from malloc: the simulator calls it host memory */
    gm_context_options_default(&o);
    o.memory_manager = &mallocs;
    assert_ok(gm_context_create(&o, &ctx));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &d));
    data = gm_array_view(d)->data;
    assert_ok(gm_pointer_kind(ctx, data + 63, &kind));
    assert_int_equal(kind, GM_MEMORY_DEVICE);
    v = *gm_array_view(d); /* its second half */
    v.shape[0] = half;
    v.offset += half;
    assert_ok(gm_array_derive(d, &v, &view));
    gm_array_release(&d);
    assert_ok(gm_pointer_kind(ctx, data + 40, &kind)); /* the view holds the memory */
    assert_int_equal(kind, GM_MEMORY_DEVICE);
    gm_array_release(&view);
    assert_ok(gm_deallocations_flush(ctx));
    gm_context_destroy(&ctx);

    /* a view of mapped memory outliving its array, where the backend says only "pinned" */
    rt_fault_ops()->pointer_kind = pinned_for_mapped_pointer_kind;
    ctx = rt_fault_ctx();
    for (int i = 0; i < 8; i++)
        assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &plain[i]));
    assert_ok(gm_mapped_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, 0, &m));
    data = gm_array_view(m)->data;
    assert_ok(gm_array_derive(m, gm_array_view(m), &mview));
    gm_array_release(&m);
    assert_ok(gm_pointer_kind(ctx, data + 1, &kind));
    assert_int_equal(kind, GM_MEMORY_MAPPED);
    assert_ok(gm_pointer_kind(ctx, gm_array_view(plain[3])->data, &kind));
    assert_int_equal(kind, GM_MEMORY_DEVICE);
    gm_array_release(&mview);
    for (int i = 0; i < 8; i++)
        gm_array_release(&plain[i]);
    gm_context_destroy(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_wrap_device, test_setup),
        cmocka_unit_test_setup(test_placement, test_setup),
        cmocka_unit_test_setup(test_stream_sync, test_setup),
        cmocka_unit_test_setup(test_arguments, test_setup),
        cmocka_unit_test_setup(test_release_in_stream_callback, test_setup),
        cmocka_unit_test_setup(test_teardown_releases, test_setup),
        cmocka_unit_test_setup(test_allocation_failures, test_setup),
        cmocka_unit_test_setup(test_pointer_kind, test_setup),
        cmocka_unit_test_setup(test_pointer_kind_fallback, test_setup),
        cmocka_unit_test_setup(test_pointer_kind_named_arrays, test_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, gm_test_restore_allocator);
}
