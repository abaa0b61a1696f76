/*
 * Tests for SmartArray (src/core/smartarray.c): lazy allocation of each
 * side, transfers only when the side asked for is stale (counted),
 * mark_changed, copy and no-copy host sides (strided ones included),
 * concurrent gets, and every error path.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rt_helpers.h"

static int group_setup(void **state)
{
    setenv("GM_HOST_DEVICE_MEMORY", "64M", 1);
    setenv("GM_HOST_PINNED_MEMORY", "16M", 1);
    return gm_test_use_cmocka_allocator(state);
}

static int test_setup(void **state)
{
    (void)state;
    rt_fault_reset();
    return 0;
}

static gm_smart_stats stats(gm_smart_array *sa)
{
    gm_smart_stats s;

    memset(&s, 0, sizeof(s));
    assert_ok(gm_smart_array_stats(sa, &s));
    return s;
}

/* Add `delta` to every element of a float64 device view (through the host). */
static void add_on_device(gm_context *ctx, const gm_ndview *dev, double delta)
{
    int64_t n = gm_ndview_size(dev);
    double *tmp = malloc((size_t)n * sizeof(double));
    gm_ndview tv;

    assert_non_null(tmp);
    assert_ok(gm_ndview_init(tmp, GM_FLOAT64, dev->ndim, dev->shape, NULL, GM_ORDER_C, &tv));
    assert_ok(gm_copy(ctx, &tv, dev, NULL));
    for (int64_t i = 0; i < n; i++)
        tmp[i] += delta;
    assert_ok(gm_copy(ctx, dev, &tv, NULL));
    free(tmp);
}

/* copy=true: transfers happen only for stale sides, and are counted. */
static void test_lazy_transfers(void **state)
{
    int64_t shape[2] = {4, 8};
    double data[32];
    gm_context *ctx = rt_fault_ctx();
    gm_smart_array *sa = NULL;
    gm_ndview hv, host, dev, again;
    gm_smart_stats s;

    (void)state;
    for (int i = 0; i < 32; i++)
        data[i] = i;
    assert_ok(gm_ndview_init(data, GM_FLOAT64, 2, shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_smart_array_from_host(ctx, &hv, true, &sa));
    s = stats(sa);
    assert_true(s.host_allocated && s.host_valid && !s.device_allocated && !s.device_valid);
    assert_ok(gm_smart_array_get(sa, GM_WHERE_HOST, &host));
    assert_true(host.data != (void *)data); /* a copy */
    assert_int_equal(host.memory, GM_MEMORY_HOST);
    assert_true(((double *)host.data)[31] == 31.0);
    assert_int_equal(stats(sa).to_device + stats(sa).to_host, 0);
    assert_ok(gm_smart_array_get(sa, GM_WHERE_DEVICE, &dev));
    assert_int_equal(dev.memory, GM_MEMORY_DEVICE);
    assert_int_equal(stats(sa).to_device, 1);
    assert_ok(gm_smart_array_get(sa, GM_WHERE_DEVICE, &again));
    assert_ptr_equal(again.data, dev.data);
    assert_int_equal(stats(sa).to_device, 1); /* current: nothing moves */
    /* a kernel-like update on the device, then the host catches up once */
    add_on_device(ctx, &dev, 100.0);
    assert_ok(gm_smart_array_mark_changed(sa, GM_WHERE_DEVICE));
    s = stats(sa);
    assert_true(s.device_valid && !s.host_valid);
    assert_ok(gm_smart_array_get(sa, GM_WHERE_HOST, &host));
    assert_true(((double *)host.data)[5] == 105.0);
    assert_ok(gm_smart_array_get(sa, GM_WHERE_HOST, &host));
    s = stats(sa);
    assert_int_equal(s.to_host, 1);
    assert_int_equal(s.to_device, 1);
    assert_true(s.host_valid && s.device_valid);
    assert_true(data[5] == 5.0); /* the caller's array was copied, never written */
    /* host update: the device catches up on its next get */
    ((double *)host.data)[0] = -1.0;
    assert_ok(gm_smart_array_mark_changed(sa, GM_WHERE_HOST));
    assert_ok(gm_smart_array_get(sa, GM_WHERE_DEVICE, &dev));
    assert_int_equal(stats(sa).to_device, 2);
    gm_smart_array_destroy(&sa);
    assert_null(sa);
    gm_context_destroy(&ctx);
}

/* copy=false on a strided host view: the caller's memory is the host side. */
static void test_no_copy_strided(void **state)
{
    double big[6][10];
    int64_t shape[2] = {6, 5}, strides[2] = {10 * 8, 2 * 8};
    gm_context *ctx = rt_fault_ctx();
    gm_smart_array *sa = NULL;
    gm_ndview hv, host, dev;

    (void)state;
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 10; j++)
            big[i][j] = i * 10 + j;
    assert_ok(gm_ndview_init(big, GM_FLOAT64, 2, shape, strides, GM_ORDER_C, &hv));
    assert_ok(gm_smart_array_from_host(ctx, &hv, false, &sa));
    assert_ok(gm_smart_array_get(sa, GM_WHERE_HOST, &host));
    assert_ptr_equal(host.data, big);
    assert_int_equal(host.strides[1], 16);
    assert_ok(gm_smart_array_get(sa, GM_WHERE_DEVICE, &dev));
    assert_true(gm_ndview_is_c_contiguous(&dev)); /* packed on the device */
    add_on_device(ctx, &dev, 0.5);
    assert_ok(gm_smart_array_mark_changed(sa, GM_WHERE_DEVICE));
    assert_ok(gm_smart_array_get(sa, GM_WHERE_HOST, &host));
    assert_true(big[2][4] == 24.5); /* (2, 2) */
    assert_true(big[2][5] == 25.0); /* between the strided elements: untouched */
    big[0][0] = 7.0;
    assert_ok(gm_smart_array_mark_changed(sa, GM_WHERE_HOST));
    assert_ok(gm_smart_array_get(sa, GM_WHERE_DEVICE, &dev));
    assert_int_equal(stats(sa).to_device, 2);
    gm_smart_array_destroy(&sa);
    assert_true(big[0][0] == 7.0); /* the caller's memory is not freed */
    gm_context_destroy(&ctx);
}

/* ndview.h: gpumem writes `reserved` zero; a copy=false host side used to be handed back by
 * gm_smart_array_get with the caller's value. */
static void test_host_view_reserved_zero(void **state)
{
    double data[4] = {0};
    int64_t n = 4;
    gm_context *ctx = rt_fault_ctx();
    gm_smart_array *sa = NULL;
    gm_ndview hv, host;

    (void)state;
    assert_ok(gm_ndview_init(data, GM_FLOAT64, 1, &n, NULL, GM_ORDER_C, &hv));
    hv.reserved = 0x5a5a;
    for (int copy = 0; copy < 2; copy++) {
        assert_ok(gm_smart_array_from_host(ctx, &hv, copy != 0, &sa));
        memset(&host, 0x5a, sizeof(host));
        assert_ok(gm_smart_array_get(sa, GM_WHERE_HOST, &host));
        assert_int_equal(host.reserved, 0);
        gm_smart_array_destroy(&sa);
    }
    gm_context_destroy(&ctx);
}

/* Created by shape on either side; the other side is allocated on first use. */
static void test_create_by_shape(void **state)
{
    int64_t shape[2] = {3, 2};
    gm_context *ctx = rt_fault_ctx();
    gm_smart_array *sa = NULL;
    gm_ndview v;
    gm_smart_stats s;
    int64_t device_allocs = 0;

    (void)state;
    assert_ok(gm_smart_array_create(ctx, 2, shape, GM_FLOAT64, GM_ORDER_F, GM_WHERE_DEVICE, &sa));
    s = stats(sa);
    assert_true(s.device_allocated && s.device_valid && !s.host_allocated);
    assert_status(gm_smart_array_mark_changed(sa, GM_WHERE_HOST), GM_ERR_STATE);
    assert_message_contains("the host side was never allocated");
    assert_ok(gm_smart_array_get(sa, GM_WHERE_DEVICE, &v));
    assert_true(gm_ndview_is_f_contiguous(&v));
    assert_ok(gm_smart_array_get(sa, GM_WHERE_HOST, &v));
    assert_true(gm_ndview_is_f_contiguous(&v));
    assert_int_equal(stats(sa).to_host, 1);
    gm_smart_array_destroy(&sa);
    device_allocs = rt_fault_calls(RT_MEM_ALLOC);
    assert_ok(gm_smart_array_create(ctx, 2, shape, GM_INT32, GM_ORDER_C, GM_WHERE_HOST, &sa));
    assert_int_equal(rt_fault_calls(RT_MEM_ALLOC), device_allocs); /* no device memory yet */
    assert_status(gm_smart_array_mark_changed(sa, GM_WHERE_DEVICE), GM_ERR_STATE);
    assert_ok(gm_smart_array_mark_changed(sa, GM_WHERE_HOST));
    assert_ok(gm_smart_array_get(sa, GM_WHERE_DEVICE, &v));
    assert_int_equal(rt_fault_calls(RT_MEM_ALLOC), device_allocs + 1);
    gm_smart_array_destroy(&sa);
    gm_smart_array_destroy(&sa);
    gm_smart_array_destroy(NULL);
    gm_context_destroy(&ctx);
}

/* Argument checks. */
static void test_arguments(void **state)
{
    int64_t shape[1] = {4};
    double data[4] = {0};
    gm_context *ctx = rt_fault_ctx();
    gm_smart_array *sa = NULL;
    gm_array *d = NULL;
    gm_ndview hv, v;
    gm_smart_stats s;

    (void)state;
    assert_ok(gm_ndview_init(data, GM_FLOAT64, 1, shape, NULL, GM_ORDER_C, &hv));
    assert_status(gm_smart_array_create(NULL, 1, shape, GM_FLOAT64, GM_ORDER_C, GM_WHERE_HOST, &sa),
                  GM_ERR_NULL_POINTER);
    assert_status(gm_smart_array_create(ctx, 1, shape, GM_FLOAT64, GM_ORDER_C, GM_WHERE_HOST, NULL),
                  GM_ERR_NULL_POINTER);
    assert_status(gm_smart_array_create(ctx, 1, shape, GM_FLOAT64, GM_ORDER_A, GM_WHERE_HOST, &sa),
                  GM_ERR_INVALID_ARG);
    assert_status(gm_smart_array_create(ctx, 1, shape, GM_FLOAT64, GM_ORDER_C, (gm_where)3, &sa),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("where must be GM_WHERE_HOST or GM_WHERE_DEVICE, got 3");
    assert_status(gm_smart_array_create(ctx, -1, shape, GM_FLOAT64, GM_ORDER_C, GM_WHERE_HOST, &sa),
                  GM_ERR_INVALID_ARG);
    assert_message_begins("gm_smart_array_create: ndim must be >= 0, got -1");
    assert_status(gm_smart_array_from_host(NULL, &hv, true, &sa), GM_ERR_NULL_POINTER);
    assert_status(gm_smart_array_from_host(ctx, NULL, true, &sa), GM_ERR_NULL_POINTER);
    assert_status(gm_smart_array_from_host(ctx, &hv, true, NULL), GM_ERR_NULL_POINTER);
    assert_ok(gm_device_array(ctx, 1, shape, GM_FLOAT64, GM_ORDER_C, &d));
    assert_status(gm_smart_array_from_host(ctx, gm_array_view(d), true, &sa), GM_ERR_INVALID_ARG);
    assert_message_contains("host must be host memory");
    hv.ndim = GM_MAX_DIMS + 1;
    assert_status(gm_smart_array_from_host(ctx, &hv, false, &sa), GM_ERR_TOO_MANY_DIMS);
    hv.ndim = 1;
    hv.data = NULL; /* elements and no data: refused at once, either copy */
    for (int copy = 0; copy < 2; copy++) {
        assert_status(gm_smart_array_from_host(ctx, &hv, copy == 1, &sa), GM_ERR_NULL_POINTER);
        assert_message_begins("gm_smart_array_from_host: the host view has 4 elements and no data");
        assert_null(sa);
    }
    hv.data = data;
    assert_null(sa);
    assert_ok(gm_smart_array_from_host(ctx, &hv, false, &sa));
    assert_status(gm_smart_array_get(NULL, GM_WHERE_HOST, &v), GM_ERR_NULL_POINTER);
    assert_status(gm_smart_array_get(sa, GM_WHERE_HOST, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_smart_array_get(sa, (gm_where)0, &v), GM_ERR_INVALID_ARG);
    assert_status(gm_smart_array_mark_changed(NULL, GM_WHERE_HOST), GM_ERR_NULL_POINTER);
    assert_status(gm_smart_array_mark_changed(sa, (gm_where)7), GM_ERR_INVALID_ARG);
    assert_status(gm_smart_array_stats(NULL, &s), GM_ERR_NULL_POINTER);
    assert_status(gm_smart_array_stats(sa, NULL), GM_ERR_NULL_POINTER);
    assert_int_equal(stats(sa).to_device, 0);
    gm_smart_array_destroy(&sa);
    gm_array_release(&d);
    gm_context_destroy(&ctx);
}

/* from_host with `host` changed by `change`: refused with `status` and `text`, either copy. */
#define EXPECT_REFUSED(change, status, text)                                              \
    do {                                                                                  \
        for (int copy_ = 0; copy_ < 2; copy_++) {                                         \
            gm_ndview bad_ = hv;                                                          \
                                                                                          \
            change;                                                                       \
            assert_status(gm_smart_array_from_host(ctx, &bad_, copy_ == 1, &sa), status); \
            assert_message_begins(text);                                                  \
            assert_null(sa);                                                              \
        }                                                                                 \
    } while (0)

/*
 * The host side must be host memory described as gpumem's own arrays are: a
 * known host kind, device_id -1 for pageable and pinned memory, the
 * context's device (or -1) for mapped memory; with copy true or false.
 */
static void test_from_host_memory_kinds(void **state)
{
    int64_t shape[1] = {4};
    double data[4] = {1, 2, 3, 4};
    gm_context *ctx = rt_fault_ctx();
    gm_smart_array *sa = NULL;
    gm_array *p = NULL, *m = NULL;
    gm_ndview hv, ok[4];

    (void)state;
    assert_ok(gm_ndview_init(data, GM_FLOAT64, 1, shape, NULL, GM_ORDER_C, &hv));
    EXPECT_REFUSED(bad_.memory = 42, GM_ERR_INVALID_ARG,
                   "gm_smart_array_from_host: host has an unknown memory kind 42");
    EXPECT_REFUSED(bad_.memory = -1, GM_ERR_INVALID_ARG,
                   "gm_smart_array_from_host: host has an unknown memory kind -1");
    EXPECT_REFUSED(bad_.memory = GM_MEMORY_DEVICE, GM_ERR_INVALID_ARG,
                   "gm_smart_array_from_host: host must be host memory (memory kind 1)");
    EXPECT_REFUSED(bad_.memory = GM_MEMORY_MANAGED, GM_ERR_INVALID_ARG,
                   "gm_smart_array_from_host: host must be host memory (memory kind 4)");
    EXPECT_REFUSED(bad_.device_id = 3, GM_ERR_INVALID_ARG,
                   "gm_smart_array_from_host: host pageable memory must have device_id -1, got 3");
    EXPECT_REFUSED(bad_.device_id = 0, GM_ERR_INVALID_ARG,
                   "gm_smart_array_from_host: host pageable memory must have device_id -1, got 0");
    EXPECT_REFUSED((bad_.memory = GM_MEMORY_PINNED, bad_.device_id = 0), GM_ERR_INVALID_ARG,
                   "gm_smart_array_from_host: host pinned memory must have device_id -1, got 0");
    EXPECT_REFUSED((bad_.memory = GM_MEMORY_MAPPED, bad_.device_id = 3), GM_ERR_WRONG_CONTEXT,
                   "gm_smart_array_from_host: host is mapped memory of device 3, the context's "
                   "device is 0");
    /* what gpumem's own host arrays carry is accepted, and a mapped view may say -1 */
    assert_ok(gm_pinned_array(ctx, 1, shape, GM_FLOAT64, GM_ORDER_C, &p));
    assert_ok(gm_mapped_array(ctx, 1, shape, GM_FLOAT64, GM_ORDER_C, 0, &m));
    ok[0] = hv;
    ok[1] = *gm_array_view(p);
    ok[2] = *gm_array_view(m);
    ok[3] = ok[2];
    ok[3].device_id = -1;
    assert_int_equal(ok[1].device_id, -1);
    assert_int_equal(ok[2].device_id, 0);
    for (int i = 0; i < 4; i++) {
        for (int copy = 0; copy < 2; copy++) {
            assert_ok(gm_smart_array_from_host(ctx, &ok[i], copy == 1, &sa));
            gm_smart_array_destroy(&sa);
        }
    }
    gm_array_release(&p);
    gm_array_release(&m);
    gm_context_destroy(&ctx);
}
#undef EXPECT_REFUSED

/* A failing allocation or transfer leaves the side stale; a later get succeeds. */
static void test_transfer_failures(void **state)
{
    int64_t shape[1] = {64};
    double data[64] = {0};
    gm_context *ctx = rt_fault_ctx();
    gm_smart_array *sa = NULL;
    gm_ndview hv, v;
    gm_smart_stats s;

    (void)state;
    data[63] = 3.0;
    assert_ok(gm_ndview_init(data, GM_FLOAT64, 1, shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_smart_array_from_host(ctx, &hv, false, &sa));
    rt_fault_fail_at(RT_MEM_ALLOC, rt_fault_calls(RT_MEM_ALLOC) + 1, GM_ERR_DRIVER);
    assert_status(gm_smart_array_get(sa, GM_WHERE_DEVICE, &v), GM_ERR_DRIVER);
    s = stats(sa);
    assert_false(s.device_allocated);
    rt_fault_fail_at(RT_COPY, rt_fault_calls(RT_COPY) + 1, GM_ERR_DRIVER);
    rt_fault_fail_at(RT_COPY_STRIDED, rt_fault_calls(RT_COPY_STRIDED) + 1, GM_ERR_DRIVER);
    assert_status(gm_smart_array_get(sa, GM_WHERE_DEVICE, &v), GM_ERR_DRIVER);
    s = stats(sa);
    assert_true(s.device_allocated && !s.device_valid);
    assert_int_equal(s.to_device, 0);
    assert_ok(gm_smart_array_get(sa, GM_WHERE_DEVICE, &v));
    assert_int_equal(stats(sa).to_device, 1);
    gm_smart_array_destroy(&sa);
    /* a copy=true creation whose copy fails frees everything */
    hv.data = NULL;
    assert_true(gm_smart_array_from_host(ctx, &hv, true, &sa) != GM_OK);
    assert_null(sa);
    gm_context_destroy(&ctx);
}

/* Bookkeeping allocation failures in creation free everything. */
static void test_allocation_failures(void **state)
{
    int64_t shape[1] = {16};
    double data[16] = {0};
    gm_context *ctx = rt_fault_ctx();
    gm_smart_array *sa = NULL;
    gm_ndview hv;
    gm_status s = GM_OK;

    (void)state;
    assert_ok(gm_ndview_init(data, GM_FLOAT64, 1, shape, NULL, GM_ORDER_C, &hv));
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t k = 1;; k++) {
            rt_alloc_fail_at(k);
            if (pass == 0)
                s = gm_smart_array_from_host(ctx, &hv, true, &sa);
            else
                s = gm_smart_array_create(ctx, 1, shape, GM_FLOAT64, GM_ORDER_C, GM_WHERE_DEVICE,
                                          &sa);
            assert_ok(gm_test_use_cmocka_allocator(NULL));
            if (s == GM_OK)
                break;
            assert_status(s, GM_ERR_NO_MEMORY);
            assert_null(sa);
            assert_true(k < 100);
        }
        gm_smart_array_destroy(&sa);
    }
    gm_context_destroy(&ctx);
}

/*
 * Many threads getting the device side at once: one transfer. cmocka's
 * leak-checking allocator is single-threaded, so this test runs on the C
 * library's allocator (ASan checks it for leaks).
 */
typedef struct getter {
    gm_smart_array *sa;
    gm_status status;
    void *data;
} getter;

static void *get_device(void *arg)
{
    getter *g = arg;
    gm_ndview v;

    g->status = gm_smart_array_get(g->sa, GM_WHERE_DEVICE, &v);
    g->data = v.data;
    return NULL;
}

static void test_concurrent_get(void **state)
{
    int64_t shape[1] = {1 << 16};
    gm_context *ctx = NULL;
    gm_smart_array *sa = NULL;
    pthread_t threads[8];
    getter g[8];

    (void)state;
    assert_ok(gm_set_host_allocator(NULL));
    ctx = rt_fault_ctx();
    assert_ok(gm_smart_array_create(ctx, 1, shape, GM_FLOAT32, GM_ORDER_C, GM_WHERE_HOST, &sa));
    for (int i = 0; i < 8; i++) {
        g[i] = (getter){sa, GM_ERR_INTERNAL, NULL};
        assert_int_equal(pthread_create(&threads[i], NULL, get_device, &g[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        assert_ok(g[i].status);
        assert_ptr_equal(g[i].data, g[0].data);
    }
    assert_int_equal(stats(sa).to_device, 1);
    gm_smart_array_destroy(&sa);
    gm_context_destroy(&ctx);
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_lazy_transfers, test_setup),
        cmocka_unit_test_setup(test_no_copy_strided, test_setup),
        cmocka_unit_test_setup(test_host_view_reserved_zero, test_setup),
        cmocka_unit_test_setup(test_create_by_shape, test_setup),
        cmocka_unit_test_setup(test_arguments, test_setup),
        cmocka_unit_test_setup(test_from_host_memory_kinds, test_setup),
        cmocka_unit_test_setup(test_transfer_failures, test_setup),
        cmocka_unit_test_setup(test_allocation_failures, test_setup),
        cmocka_unit_test_setup(test_concurrent_get, test_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, gm_test_restore_allocator);
}
