/*
 * Tests for host memory (src/core/hostmem.c): pinned and mapped arrays,
 * device views of mapped memory, and registration scopes (gm_pin / gm_map /
 * gm_register): overlapping arrays registered once, immediate undo so the
 * same memory can be pinned again (numba#3508), and every failure path.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

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

/* A 1-D float64 host view of n elements of buf starting at element `first`, step `step`. */
static gm_ndview slice_of(double *buf, int64_t first, int64_t n, int64_t step)
{
    gm_ndview v;
    int64_t stride = step * 8;

    assert_ok(gm_ndview_init(buf, GM_FLOAT64, 1, &n, &stride, GM_ORDER_C, &v));
    v.offset = first * 8;
    return v;
}

static void test_pinned_array(void **state)
{
    int64_t shape[2] = {3, 4};
    gm_context *ctx = NULL;
    gm_array *p = NULL, *f = NULL, *d = NULL, *like = NULL;
    double *data = NULL;
    gm_ndview t;

    (void)state;
    assert_ok(rt_fault_context(NULL, &ctx));
    assert_ok(gm_pinned_array(ctx, 2, shape, GM_FLOAT64, GM_ORDER_C, &p));
    assert_int_equal(gm_array_view(p)->memory, GM_MEMORY_PINNED);
    assert_int_equal(gm_array_view(p)->device_id, -1);
    assert_int_equal(rt_fault_calls(RT_HOST_ALLOC), 1);
    data = gm_array_view(p)->data;
    for (int i = 0; i < 12; i++)
        data[i] = i;
    assert_ok(gm_to_device(ctx, gm_array_view(p), NULL, &d));
    assert_ok(gm_pinned_array(ctx, 2, shape, GM_FLOAT64, GM_ORDER_F, &f));
    assert_true(gm_ndview_is_f_contiguous(gm_array_view(f)));
    assert_ok(gm_array_copy_to_host(d, gm_array_view(f), NULL));
    assert_true(((double *)gm_array_view(f)->data)[1] == 4.0); /* (1, 0) */
    assert_ok(gm_ndview_transpose(gm_array_view(p), &t));
    assert_ok(gm_pinned_array_like(ctx, &t, &like));
    assert_true(gm_ndview_is_f_contiguous(gm_array_view(like)));
    assert_status(gm_pinned_array(ctx, 2, shape, GM_FLOAT64, GM_ORDER_K, &like),
                  GM_ERR_INVALID_ARG);
    assert_status(gm_pinned_array(NULL, 2, shape, GM_FLOAT64, GM_ORDER_C, &like),
                  GM_ERR_NULL_POINTER);
    assert_status(gm_pinned_array(ctx, 2, shape, GM_FLOAT64, GM_ORDER_C, NULL),
                  GM_ERR_NULL_POINTER);
    assert_status(gm_pinned_array_like(ctx, NULL, &like), GM_ERR_NULL_POINTER);
    gm_array_release(&like);
    gm_array_release(&f);
    gm_array_release(&d);
    gm_array_release(&p);
    gm_context_destroy(&ctx);
}

static void test_mapped_array(void **state)
{
    int64_t shape[2] = {2, 5};
    double out[10];
    gm_context *ctx = NULL;
    gm_array *m = NULL, *like = NULL, *d = NULL, *z = NULL;
    gm_ndview dv, hv;
    int64_t zero = 0;

    (void)state;
    assert_ok(rt_fault_context(NULL, &ctx));
    assert_ok(gm_mapped_array(ctx, 2, shape, GM_FLOAT64, GM_ORDER_C,
                              GM_HOST_PORTABLE | GM_HOST_WRITECOMBINED, &m));
    assert_int_equal(gm_array_view(m)->memory, GM_MEMORY_MAPPED);
    assert_int_equal(gm_array_view(m)->device_id, 0);
    for (int i = 0; i < 10; i++)
        ((double *)gm_array_view(m)->data)[i] = 2.0 * i;
    assert_ok(gm_array_device_view(m, &dv));
    assert_int_equal(dv.memory, GM_MEMORY_DEVICE);
    assert_ptr_equal(dv.data, gm_array_view(m)->data); /* the simulator maps 1:1 */
    assert_ok(gm_ndview_init(out, GM_FLOAT64, 2, shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_copy(ctx, &hv, &dv, NULL));
    assert_true(out[9] == 18.0);
    assert_ok(gm_mapped_array_like(ctx, gm_array_view(m), 0, &like));
    assert_int_equal(gm_array_view(like)->memory, GM_MEMORY_MAPPED);
    assert_status(gm_mapped_array(ctx, 2, shape, GM_FLOAT64, GM_ORDER_C, 1u << 8, &d),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("unknown flags");
    assert_status(gm_mapped_array_like(ctx, gm_array_view(m), 1u << 9, &d), GM_ERR_INVALID_ARG);
    assert_status(gm_mapped_array_like(NULL, gm_array_view(m), 0, &d), GM_ERR_NULL_POINTER);
    /* device views: device arrays are their own; pinned memory has none; size 0 has no address */
    assert_ok(gm_device_array(ctx, 2, shape, GM_FLOAT64, GM_ORDER_C, &d));
    assert_ok(gm_array_device_view(d, &dv));
    assert_ptr_equal(dv.data, gm_array_view(d)->data);
    gm_array_release(&d);
    assert_ok(gm_pinned_array(ctx, 2, shape, GM_FLOAT64, GM_ORDER_C, &d));
    assert_status(gm_array_device_view(d, &dv), GM_ERR_INVALID_ARG);
    assert_message_contains("not mapped");
    assert_ok(gm_mapped_array(ctx, 1, &zero, GM_FLOAT64, GM_ORDER_C, 0, &z));
    assert_ok(gm_array_device_view(z, &dv));
    assert_null(dv.data);
    assert_status(gm_array_device_view(m, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_array_device_view(NULL, &dv), GM_ERR_NULL_POINTER);
    rt_fault_fail_at(RT_HOST_DEVICE_POINTER, rt_fault_calls(RT_HOST_DEVICE_POINTER) + 1,
                     GM_ERR_DRIVER);
    assert_status(gm_array_device_view(m, &dv), GM_ERR_DRIVER);
    assert_message_begins("gm_array_device_view: host_device_pointer: injected failure");
    gm_array_release(&z);
    gm_array_release(&d);
    gm_array_release(&like);
    gm_array_release(&m);
    gm_context_destroy(&ctx);
}

/*
 * Fill a strided host-memory array from a C-contiguous 3 x 2 host array and
 * check each element at the address its strides give (rows of 4 elements,
 * the first row last when the row stride is negative).
 */
static void check_strided_fill(gm_context *ctx, gm_array *a, const int64_t *strides)
{
    static const double src[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {3, 2};
    const gm_ndview *v = gm_array_view(a);
    const char *base = NULL;
    gm_ndview hv;

    assert_int_equal(v->strides[0], strides[0]);
    assert_int_equal(v->strides[1], strides[1]);
    assert_ok(gm_ndview_init((void *)src, GM_FLOAT64, 2, shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_copy(ctx, v, &hv, NULL));
    base = (const char *)v->data + v->offset;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            double x = 0.0;

            memcpy(&x, base + i * strides[0] + j * strides[1], sizeof(x));
            assert_true(x == src[2 * i + j]);
        }
}

/* Pinned, mapped and managed arrays with explicit strides (Numba's strides argument). */
static void test_strided_host_arrays(void **state)
{
    int64_t shape[2] = {3, 2}, padded[2] = {32, 8}, reversed[2] = {-32, 8};
    double out[6] = {0};
    gm_context *ctx = NULL;
    gm_array *p = NULL, *m = NULL, *g = NULL, *x = NULL;
    gm_ndview dv, hv;
    int64_t lo = 0, hi = 0;

    (void)state;
    assert_ok(rt_fault_context(NULL, &ctx));
    assert_ok(gm_pinned_array_strided(ctx, 2, shape, padded, GM_FLOAT64, &p));
    assert_int_equal(gm_array_view(p)->memory, GM_MEMORY_PINNED);
    assert_ok(gm_ndview_extent(gm_array_view(p), &lo, &hi));
    assert_int_equal(hi - lo, 2 * 32 + 8 + 8); /* the strides' extent, gaps included */
    assert_false(gm_ndview_is_c_contiguous(gm_array_view(p)));
    check_strided_fill(ctx, p, padded);

    assert_ok(gm_mapped_array_strided(ctx, 2, shape, reversed, GM_FLOAT64, GM_HOST_PORTABLE, &m));
    assert_int_equal(gm_array_view(m)->memory, GM_MEMORY_MAPPED);
    assert_int_equal(gm_array_view(m)->offset, 64); /* row 0 is the last in memory */
    check_strided_fill(ctx, m, reversed);
    assert_ok(gm_array_device_view(m, &dv)); /* the device side has the same layout */
    assert_int_equal(dv.strides[0], -32);
    assert_ok(gm_ndview_init(out, GM_FLOAT64, 2, shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_copy(ctx, &hv, &dv, NULL));
    for (int i = 0; i < 6; i++)
        assert_true(out[i] == (double)(i + 1));

    assert_ok(gm_managed_array_strided(ctx, 2, shape, padded, GM_FLOAT64, &g));
    assert_int_equal(gm_array_view(g)->memory, GM_MEMORY_MANAGED);
    check_strided_fill(ctx, g, padded);

    assert_status(gm_pinned_array_strided(ctx, 2, shape, NULL, GM_FLOAT64, &x),
                  GM_ERR_NULL_POINTER);
    assert_message_begins("gm_pinned_array_strided: strides is NULL");
    assert_status(gm_mapped_array_strided(ctx, 2, shape, padded, GM_FLOAT64, 1u << 8, &x),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("gm_mapped_array_strided: unknown flags");
    assert_status(gm_managed_array_strided(NULL, 2, shape, padded, GM_FLOAT64, &x),
                  GM_ERR_NULL_POINTER);
    assert_status(gm_pinned_array_strided(ctx, 2, shape, padded, GM_FLOAT64, NULL),
                  GM_ERR_NULL_POINTER);
    shape[0] = INT64_C(1) << 60; /* an extent past what int64 bytes can hold */
    assert_status(gm_pinned_array_strided(ctx, 2, shape, padded, GM_FLOAT64, &x), GM_ERR_OVERFLOW);
    assert_null(x);
    gm_array_release(&g);
    gm_array_release(&m);
    gm_array_release(&p);
    gm_context_destroy(&ctx);
}

/* Managed arrays: one address for host and device, charged as device memory, queued frees. */
static void test_managed_array(void **state)
{
    int64_t shape[2] = {3, 4}, zero = 0, free0 = 0, free1 = 0, total = 0;
    int64_t huge = 48 * 1024 * 1024;
    gm_context_options o;
    gm_context *ctx = NULL;
    gm_array *m = NULL, *f = NULL, *d = NULL, *z = NULL, *big = NULL, *big2 = NULL;
    gm_kernel *add = NULL;
    gm_ndview dv;
    float *x = NULL, out[12];
    gm_ndview hv;

    (void)state;
    gm_context_options_default(&o);
    o.max_pending_count = 100;
    o.max_pending_ratio = 10.0;
    assert_ok(rt_fault_context(&o, &ctx));
    assert_ok(gm_context_memory_info(ctx, &free0, &total));
    assert_ok(gm_managed_array(ctx, 2, shape, GM_FLOAT32, GM_ORDER_C, &m));
    assert_int_equal(rt_fault_calls(RT_MANAGED_ALLOC), 1);
    assert_int_equal(rt_fault_calls(RT_MEM_ALLOC), 0);
    assert_int_equal(gm_array_view(m)->memory, GM_MEMORY_MANAGED);
    assert_int_equal(gm_array_view(m)->device_id, 0);
    assert_ok(gm_context_memory_info(ctx, &free1, &total));
    assert_true(free1 <= free0 - 48); /* charged as device memory */
    x = gm_array_view(m)->data;
    for (int i = 0; i < 12; i++)
        x[i] = (float)i; /* the host writes it directly */
    assert_ok(gm_array_device_view(m, &dv));
    assert_ptr_equal(dv.data, x);
    /* A kernel reads and writes it through the same address. */
    assert_ok(gm_kernel_find(ctx, "add_f32", &add));
    {
        int64_t n = 12;
        gm_arg args[4] = {gm_arg_array(m), gm_arg_array(m), gm_arg_array(m), gm_arg_i64(n)};

        assert_ok(gm_launch(add, gm_dim3_make(1, 1, 1), gm_dim3_make(32, 1, 1), 0, NULL, 4, args));
        assert_ok(gm_context_synchronize(ctx));
        assert_true(x[11] == 22.0f);
    }
    /* Copies treat it as device memory. */
    assert_ok(gm_ndview_init(out, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_array_copy_to_host(m, &hv, NULL));
    assert_true(out[5] == x[5]);
    assert_ok(gm_to_device(ctx, &hv, NULL, &d));
    assert_ok(gm_copy(ctx, gm_array_view(m), gm_array_view(d), NULL));
    assert_ok(gm_managed_array_like(ctx, gm_array_view(m), &f));
    assert_int_equal(gm_array_view(f)->memory, GM_MEMORY_MANAGED);
    assert_true(gm_ndview_is_c_contiguous(gm_array_view(f)));
    gm_array_release(&f);
    assert_ok(gm_managed_array(ctx, 2, shape, GM_FLOAT32, GM_ORDER_F, &f));
    assert_true(gm_ndview_is_f_contiguous(gm_array_view(f)));
    assert_ok(gm_managed_array(ctx, 1, &zero, GM_FLOAT32, GM_ORDER_C, &z)); /* nothing */
    assert_int_equal(rt_fault_calls(RT_MANAGED_ALLOC), 3);
    /* Released through the queue; out of memory flushes it and retries once. */
    assert_ok(gm_managed_array(ctx, 1, &huge, GM_UINT8, GM_ORDER_C, &big));
    assert_int_equal(rt_stats(ctx).pending_count, 1); /* the first _like array */
    gm_array_release(&big);
    assert_int_equal(rt_stats(ctx).pending_count, 2);
    assert_int_equal(rt_stats(ctx).pending_device_bytes, 48 + huge);
    assert_ok(gm_managed_array(ctx, 1, &huge, GM_UINT8, GM_ORDER_C, &big2));
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    assert_int_equal(rt_fault_calls(RT_MANAGED_ALLOC), 6); /* 4, then 5 failed, 6 retried */
    gm_array_release(&big2);
    /* Errors. */
    rt_fault_fail_at(RT_MANAGED_ALLOC, rt_fault_calls(RT_MANAGED_ALLOC) + 1, GM_ERR_UNSUPPORTED);
    assert_status(gm_managed_array(ctx, 2, shape, GM_FLOAT32, GM_ORDER_C, &big),
                  GM_ERR_UNSUPPORTED);
    assert_message_begins("gm_managed_array: managed_alloc: injected failure");
    assert_null(big);
    assert_status(gm_managed_array(ctx, 2, shape, GM_FLOAT32, GM_ORDER_K, &big),
                  GM_ERR_INVALID_ARG);
    assert_status(gm_managed_array(NULL, 2, shape, GM_FLOAT32, GM_ORDER_C, &big),
                  GM_ERR_NULL_POINTER);
    assert_status(gm_managed_array(ctx, 2, shape, GM_FLOAT32, GM_ORDER_C, NULL),
                  GM_ERR_NULL_POINTER);
    assert_status(gm_managed_array_like(ctx, NULL, &big), GM_ERR_NULL_POINTER);
    gm_array_release(&z);
    gm_array_release(&f);
    gm_array_release(&d);
    gm_array_release(&m);
    gm_context_destroy(&ctx);
}

/* Memory that is not all mapped (a hole, or freed) is refused, as cuMemHostRegister does. */
static void test_register_unmapped(void **state)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    int64_t n = (int64_t)(32 * ps);
    unsigned char *p =
        mmap(NULL, (size_t)n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    gm_context *ctx = NULL;
    gm_host_scope *scope = NULL;
    gm_memory_kind kind = GM_MEMORY_DEVICE;
    gm_ndview v;

    (void)state;
    assert_true(p != MAP_FAILED);
    assert_ok(rt_fault_context(NULL, &ctx));
    assert_int_equal(munmap(p + n / 2, (size_t)n / 2), 0); /* the second half: a hole */
    assert_ok(gm_ndview_init(p, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &v));
    assert_status(gm_pin(ctx, 1, &v, &scope), GM_ERR_INVALID_ARG);
    assert_message_contains("is not all mapped memory");
    assert_null(scope);
    assert_status(gm_register(ctx, 1, &v, &scope), GM_ERR_INVALID_ARG);
    assert_ok(gm_pointer_kind(ctx, p, &kind));
    assert_int_equal(kind, GM_MEMORY_HOST); /* nothing was registered */
    n /= 2;                                 /* the mapped half alone is fine */
    assert_ok(gm_ndview_init(p, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &v));
    assert_ok(gm_pin(ctx, 1, &v, &scope));
    assert_ok(gm_host_scope_end(&scope));
    assert_int_equal(munmap(p, (size_t)n), 0);
    gm_context_destroy(&ctx);
}

/*
 * Page-locking is the process's: memory one context registered or allocated
 * cannot be registered by another (GM_ERR_STATE, as cuMemHostRegister), a
 * page two contexts' ranges share stays locked until both are gone, and
 * portable memory is every context's.
 */
static void test_registration_across_contexts(void **state)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    int64_t n = (int64_t)(16 * ps), first = 100, second = 100, shape = 64;
    unsigned char *p = aligned_alloc(ps, (size_t)n);
    gm_context *a = NULL, *b = NULL;
    gm_host_scope *sa = NULL, *sb = NULL;
    gm_array *pinned = NULL, *mapped = NULL, *portable = NULL, *d = NULL;
    gm_ndview v, w, dv;
    long before = 0;

    (void)state;
    assert_non_null(p);
    assert_ok(rt_fault_context(NULL, &a));
    assert_ok(gm_context_create(NULL, &b));
    assert_ok(gm_ndview_init(p, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &v));
    assert_ok(gm_pin(a, 1, &v, &sa));
    assert_status(gm_pin(b, 1, &v, &sb), GM_ERR_STATE);
    assert_message_contains("overlaps memory another context registered or allocated");
    assert_null(sb);
    assert_ok(gm_host_scope_end(&sa));
    assert_ok(gm_pin(b, 1, &v, &sb)); /* free again */
    assert_ok(gm_host_scope_end(&sb));
    /* a pinned array of a is a's, the rest of its last page too: b cannot register them */
    assert_ok(gm_pinned_array(a, 1, &first, GM_UINT8, GM_ORDER_C, &pinned));
    w = *gm_array_view(pinned);
    w.memory = GM_MEMORY_HOST;
    w.device_id = -1;
    assert_status(gm_register(b, 1, &w, &sb), GM_ERR_STATE);
    w.data = (unsigned char *)w.data + 200; /* past its 100 bytes, in its page */
    assert_status(gm_register(b, 1, &w, &sb), GM_ERR_STATE);
    gm_array_release(&pinned);
    assert_ok(gm_deallocations_flush(a));
    /* two contexts' ranges in one page: the page stays locked while either is */
    before = gm_test_vmlck_kb();
    assert_ok(gm_ndview_init(p, GM_UINT8, 1, &first, NULL, GM_ORDER_C, &v));
    assert_ok(gm_ndview_init(p + 200, GM_UINT8, 1, &second, NULL, GM_ORDER_C, &w));
    assert_ok(gm_pin(a, 1, &v, &sa));
    assert_ok(gm_pin(b, 1, &w, &sb));
    if (before >= 0 && gm_test_vmlck_kb() > before) { /* mlock works here (not under ASan) */
        assert_ok(gm_host_scope_end(&sa));
        assert_true(gm_test_vmlck_kb() > before); /* b's range keeps the page */
        assert_ok(gm_host_scope_end(&sb));
        assert_int_equal(gm_test_vmlck_kb(), before);
    } else {
        assert_ok(gm_host_scope_end(&sa));
        assert_ok(gm_host_scope_end(&sb));
    }
    /* portable mapped memory of a is memory of b too; other mapped memory is not */
    assert_ok(gm_mapped_array(a, 1, &shape, GM_FLOAT32, GM_ORDER_C, GM_HOST_PORTABLE, &portable));
    assert_ok(gm_mapped_array(a, 1, &shape, GM_FLOAT32, GM_ORDER_C, 0, &mapped));
    assert_ok(gm_device_array(b, 1, &shape, GM_FLOAT32, GM_ORDER_C, &d));
    assert_ok(gm_array_device_view(portable, &dv));
    assert_ok(gm_copy(b, gm_array_view(d), &dv, NULL));
    {
        gm_memory_kind kind = GM_MEMORY_HOST;
        const char *start = gm_array_view(portable)->data;

        assert_ok(gm_pointer_kind(b, start + 255, &kind));
        assert_int_equal(kind, GM_MEMORY_MAPPED);
        assert_ok(gm_pointer_kind(b, start + ps, &kind)); /* one past its page: not it */
        assert_int_equal(kind, GM_MEMORY_HOST);
    }
    assert_ok(gm_array_device_view(mapped, &dv));
    assert_status(gm_copy(b, gm_array_view(d), &dv, NULL), GM_ERR_INVALID_ARG);
    gm_array_release(&d);
    gm_array_release(&mapped);
    gm_array_release(&portable);
    gm_context_destroy(&b);
    gm_context_destroy(&a);
    free(p);
}

/* Two contexts registering the same memory at once: exactly one of them gets it. */
typedef struct pin_race {
    gm_context *ctx;
    gm_ndview v;
    pthread_barrier_t *start;
    gm_host_scope *scope;
    gm_status status;
} pin_race;

static void *race_pin(void *user)
{
    pin_race *r = user;

    pthread_barrier_wait(r->start);
    r->status = gm_pin(r->ctx, 1, &r->v, &r->scope);
    return NULL;
}

static void test_registration_race(void **state)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    int64_t n = (int64_t)ps;
    unsigned char *p = aligned_alloc(ps, ps);
    pthread_barrier_t start;
    pin_race r[2];

    (void)state;
    assert_non_null(p);
    memset(r, 0, sizeof(r));
    for (int k = 0; k < 2; k++) {
        assert_ok(gm_context_create(NULL, &r[k].ctx));
        assert_ok(gm_ndview_init(p, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &r[k].v));
        r[k].start = &start;
    }
    for (int round = 0; round < 400; round++) {
        pthread_t t[2];

        assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
        for (int k = 0; k < 2; k++)
            assert_int_equal(pthread_create(&t[k], NULL, race_pin, &r[k]), 0);
        for (int k = 0; k < 2; k++)
            assert_int_equal(pthread_join(t[k], NULL), 0);
        pthread_barrier_destroy(&start);
        if ((r[0].status == GM_OK) == (r[1].status == GM_OK))
            fail_msg("round %d: statuses %s and %s; exactly one pin may succeed", round,
                     gm_status_name(r[0].status), gm_status_name(r[1].status));
        for (int k = 0; k < 2; k++) {
            if (r[k].status == GM_OK)
                assert_ok(gm_host_scope_end(&r[k].scope));
            else
                assert_int_equal(r[k].status, GM_ERR_STATE);
        }
    }
    for (int k = 0; k < 2; k++)
        gm_context_destroy(&r[k].ctx);
    free(p);
}

/* Overlapping and duplicate arrays are registered once; undo is immediate. */
static void test_pin_overlapping_and_repin(void **state)
{
    double buf[64];
    gm_ndview arrays[4];
    gm_context *ctx = NULL;
    gm_host_scope *scope = NULL, *again = NULL;

    (void)state;
    arrays[0] = slice_of(buf, 0, 32, 1);
    arrays[1] = slice_of(buf, 16, 32, 1);
    arrays[2] = arrays[0];
    arrays[3] = slice_of(buf, 47, 16, -1); /* elements 47 .. 32, negative stride */
    assert_ok(rt_fault_context(NULL, &ctx));
    assert_ok(gm_pin(ctx, 4, arrays, &scope));
    assert_int_equal(rt_fault_calls(RT_HOST_REGISTER), 1);
    assert_status(gm_pin(ctx, 1, &arrays[1], &again), GM_ERR_STATE); /* already registered */
    assert_message_begins("gm_pin: host_register: ");
    assert_message_contains("overlaps memory already");
    assert_null(again);
    assert_status(gm_register(ctx, 1, &arrays[1], &again), GM_ERR_STATE);
    assert_message_begins("gm_register: host_register: ");
    assert_ok(gm_host_scope_end(&scope));
    assert_null(scope);
    assert_int_equal(rt_fault_calls(RT_HOST_UNREGISTER), 1);
    assert_ok(gm_pin(ctx, 1, &arrays[1], &again)); /* numba#3508: pinning again works */
    assert_ok(gm_deregister(&again));
    assert_ok(gm_register(ctx, 2, arrays, &scope));
    assert_ok(gm_deregister(&scope));
    /* disjoint arrays: one registration each */
    arrays[1] = slice_of(buf, 40, 8, 1);
    assert_ok(gm_register(ctx, 2, arrays, &scope));
    assert_int_equal(rt_fault_calls(RT_HOST_REGISTER), 7); /* 2 refused above */
    assert_ok(gm_host_scope_end(&scope));
    assert_ok(gm_host_scope_end(&scope));
    assert_ok(gm_host_scope_end(NULL));
    gm_context_destroy(&ctx);
}

/* Which arrays a scope registers: pageable host memory only. */
static void test_pin_memory_kinds(void **state)
{
    double buf[8];
    int64_t n = 8, zero = 0;
    gm_ndview arrays[3];
    gm_context *ctx = NULL;
    gm_array *p = NULL, *m = NULL, *d = NULL;
    gm_host_scope *scope = NULL;
    gm_ndview views[2];

    (void)state;
    assert_ok(rt_fault_context(NULL, &ctx));
    assert_ok(gm_pinned_array(ctx, 1, &n, GM_FLOAT64, GM_ORDER_C, &p));
    assert_ok(gm_mapped_array(ctx, 1, &n, GM_FLOAT64, GM_ORDER_C, 0, &m));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT64, GM_ORDER_C, &d));
    arrays[0] = *gm_array_view(p);
    arrays[1] = *gm_array_view(m);
    assert_ok(gm_ndview_init(buf, GM_FLOAT64, 1, &zero, NULL, GM_ORDER_C, &arrays[2]));
    assert_ok(gm_pin(ctx, 3, arrays, &scope)); /* already pinned, mapped, empty: nothing to do */
    assert_int_equal(rt_fault_calls(RT_HOST_REGISTER), 0);
    assert_ok(gm_host_scope_end(&scope));
    assert_status(gm_map(ctx, 1, &arrays[0], NULL, &scope), GM_ERR_INVALID_ARG);
    assert_message_contains("pinned but not mapped");
    assert_ok(gm_map(ctx, 1, &arrays[1], views, &scope)); /* mapped: its own device view */
    assert_ptr_equal(views[0].data, arrays[1].data);
    assert_ok(gm_host_scope_end(&scope));
    arrays[0] = *gm_array_view(d);
    assert_status(gm_pin(ctx, 1, arrays, &scope), GM_ERR_INVALID_ARG);
    assert_message_contains("gm_pin: array 0 is not host memory");
    (void)buf;
    gm_array_release(&p);
    gm_array_release(&m);
    gm_array_release(&d);
    gm_context_destroy(&ctx);
}

/* gm_map gives device views that transfers accept. */
static void test_map(void **state)
{
    double buf[16], out[8];
    gm_ndview arrays[2], views[2], hout;
    int64_t n = 8;
    gm_context *ctx = NULL;
    gm_host_scope *scope = NULL;
    gm_array *d = NULL;

    (void)state;
    for (int i = 0; i < 16; i++)
        buf[i] = i;
    arrays[0] = slice_of(buf, 15, 8, -1); /* 15, 14, ..., 8 */
    arrays[1] = slice_of(buf, 0, 8, 2);   /* 0, 2, ..., 14 */
    memset(views, 0, sizeof(views));
    assert_ok(rt_fault_context(NULL, &ctx));
    assert_ok(gm_map(ctx, 2, arrays, views, &scope));
    assert_int_equal(rt_fault_calls(RT_HOST_REGISTER), 1);
    assert_int_equal(views[0].memory, GM_MEMORY_DEVICE);
    assert_int_equal(views[0].offset, arrays[0].offset);
    assert_ptr_equal(views[0].data, buf);
    assert_ok(gm_to_device(ctx, &views[0], NULL, &d));
    assert_ok(gm_ndview_init(out, GM_FLOAT64, 1, &n, NULL, GM_ORDER_C, &hout));
    assert_ok(gm_array_copy_to_host(d, &hout, NULL));
    assert_true(out[0] == 15.0 && out[7] == 8.0);
    assert_ok(gm_host_scope_end(&scope));
    assert_ok(gm_map(ctx, 2, arrays, NULL, &scope));
    assert_ok(gm_host_scope_end(&scope));
    gm_array_release(&d);
    gm_context_destroy(&ctx);
}

/* ndview.h: gpumem writes `reserved` zero; gm_map's device views used to carry the value of
 * the host descriptors they were made from. */
static void test_map_views_reserved_zero(void **state)
{
    double buf[8];
    gm_ndview arrays[2], views[2];
    int64_t n = 8;
    gm_context *ctx = NULL;
    gm_host_scope *scope = NULL;
    gm_array *m = NULL;

    (void)state;
    assert_ok(rt_fault_context(NULL, &ctx));
    assert_ok(gm_mapped_array(ctx, 1, &n, GM_FLOAT64, GM_ORDER_C, 0, &m));
    assert_ok(gm_ndview_init(buf, GM_FLOAT64, 1, &n, NULL, GM_ORDER_C, &arrays[0]));
    arrays[1] = *gm_array_view(m); /* used as it is */
    arrays[0].reserved = arrays[1].reserved = 0x5a5a;
    memset(views, 0x5a, sizeof(views));
    assert_ok(gm_map(ctx, 2, arrays, views, &scope));
    assert_int_equal(views[0].reserved, 0);
    assert_int_equal(views[1].reserved, 0);
    assert_ok(gm_host_scope_end(&scope));
    gm_array_release(&m);
    gm_context_destroy(&ctx);
}

/* A stream callback that holds its stream until released, or for 300 ms at most. */
static void hold_stream(gm_stream *stream, gm_status status, void *user)
{
    const atomic_bool *go = user;
    struct timespec tick = {0, 1000000};

    (void)stream;
    (void)status;
    for (int i = 0; i < 300 && !atomic_load(go); i++)
        nanosleep(&tick, NULL);
}

/*
 * Ending a scope waits for the queued work that may use its memory (runtime.h;
 * HSA and CUDA do): a copy into a mapped range through its device view, queued
 * behind a callback that holds the stream, has landed when gm_host_scope_end
 * returns, and did not fail. Found by fuzz_streams: the simulator unregistered
 * at once, and the copy ran later, outside memory of the context.
 */
static void test_scope_end_waits_for_work(void **state)
{
    double buf[8], src[8];
    gm_ndview host, view;
    int64_t n = 8;
    gm_context_options o;
    gm_context *ctx = NULL;
    gm_stream *stream = NULL;
    gm_host_scope *scope = NULL;
    gm_array *d = NULL;
    atomic_bool go = false;

    (void)state;
    for (int i = 0; i < 8; i++) {
        src[i] = 1.5 * i;
        buf[i] = -1;
    }
    gm_context_options_default(&o);
    o.backend = GM_BACKEND_HOST;
    assert_ok(gm_context_create(&o, &ctx));
    assert_ok(gm_ndview_init(src, GM_FLOAT64, 1, &n, NULL, GM_ORDER_C, &host));
    assert_ok(gm_to_device(ctx, &host, NULL, &d));
    assert_ok(gm_ndview_init(buf, GM_FLOAT64, 1, &n, NULL, GM_ORDER_C, &host));
    assert_ok(gm_map(ctx, 1, &host, &view, &scope));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &stream));
    assert_ok(gm_stream_add_callback(stream, hold_stream, &go));
    assert_ok(gm_copy(ctx, &view, gm_array_view(d), stream));
    assert_ok(gm_host_scope_end(&scope));
    for (int i = 0; i < 8; i++)
        assert_true(buf[i] == 1.5 * i);
    atomic_store(&go, true);
    assert_ok(gm_stream_synchronize(stream));
    gm_stream_destroy(&stream);
    gm_array_release(&d);
    gm_context_destroy(&ctx);
}

/* A callback that pins a buffer once gm_context_destroy, which waits for it, has begun. */
typedef struct late_pin {
    gm_context *ctx;
    gm_ndview host;
    gm_host_scope *scope;
    gm_status status;
} late_pin;

static void pin_late(gm_stream *stream, gm_status status, void *user)
{
    late_pin *job = user;
    struct timespec pause = {0, 100 * 1000 * 1000}; /* the teardown has begun meanwhile */

    (void)stream;
    (void)status;
    nanosleep(&pause, NULL);
    job->status = gm_pin(job->ctx, 1, &job->host, &job->scope);
}

/*
 * A scope opened by a callback that the teardown waits for is ended with the
 * context (the teardown ended the open scopes before waiting for the
 * streams: this one stayed registered and its bookkeeping leaked).
 */
static void test_scope_opened_by_callback_during_teardown(void **state)
{
    double buf[16];
    int64_t n = 16;
    gm_context *ctx = NULL;
    gm_stream *stream = NULL;
    late_pin job;

    (void)state;
    memset(&job, 0, sizeof(job));
    job.status = GM_ERR_INTERNAL;
    assert_ok(gm_set_host_allocator(NULL)); /* the callback allocates on a worker thread */
    assert_ok(rt_fault_context(NULL, &ctx));
    job.ctx = ctx; /* the callback's copy: the destroy below sets ctx to NULL at once */
    assert_ok(gm_ndview_init(buf, GM_FLOAT64, 1, &n, NULL, GM_ORDER_C, &job.host));
    assert_ok(gm_stream_create(ctx, 0, &stream));
    assert_ok(gm_stream_add_callback(stream, pin_late, &job));
    rt_log_capture(GM_LOG_WARN);
    gm_context_destroy(&ctx);
    rt_log_stop();
    assert_ok(job.status);
    assert_true(rt_log_contains(GM_LOG_WARN, "a host registration scope (1 ranges) was not ended"));
    assert_int_equal(rt_fault_calls(RT_HOST_REGISTER), 1);
    assert_int_equal(rt_fault_calls(RT_HOST_UNREGISTER), 1);
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/* Failures while registering undo what was done; ending reports the first failure. */
static void test_scope_failures(void **state)
{
    double buf[64];
    gm_ndview arrays[2];
    gm_ndview views[2];
    gm_context *ctx = NULL;
    gm_host_scope *scope = NULL;

    (void)state;
    arrays[0] = slice_of(buf, 0, 8, 1);
    arrays[1] = slice_of(buf, 32, 8, 1);
    assert_ok(rt_fault_context(NULL, &ctx));
    rt_fault_fail_at(RT_HOST_REGISTER, 2, GM_ERR_PERMISSION);
    assert_status(gm_pin(ctx, 2, arrays, &scope), GM_ERR_PERMISSION);
    assert_message_begins("gm_pin: host_register: injected failure on call 2");
    assert_null(scope);
    assert_int_equal(rt_fault_calls(RT_HOST_UNREGISTER), 1);
    rt_fault_reset();
    rt_fault_fail_at(RT_HOST_DEVICE_POINTER, 2, GM_ERR_DRIVER);
    assert_status(gm_map(ctx, 2, arrays, views, &scope), GM_ERR_DRIVER);
    assert_message_begins("gm_map: host_device_pointer: injected failure on call 2");
    assert_int_equal(rt_fault_calls(RT_HOST_UNREGISTER), 2);
    rt_fault_reset();
    assert_ok(gm_pin(ctx, 2, arrays, &scope));
    rt_fault_fail_at(RT_HOST_UNREGISTER, 1, GM_ERR_DRIVER);
    assert_status(gm_host_scope_end(&scope), GM_ERR_DRIVER);
    assert_message_begins("gm_host_scope_end: host_unregister: injected failure");
    assert_null(scope);
    assert_int_equal(rt_fault_calls(RT_HOST_UNREGISTER), 2);
    rt_fault_reset();
    assert_ok(gm_pin(ctx, 1, &arrays[0], &scope)); /* the other range is still registered */
    rt_fault_fail_at(RT_HOST_UNREGISTER, 1, GM_ERR_DRIVER);
    assert_status(gm_deregister(&scope), GM_ERR_DRIVER);
    assert_message_begins("gm_deregister: host_unregister: injected failure");
    /* a failing undo is logged; the registration's failure stays the message */
    arrays[0] = slice_of(buf, 16, 8, 1);
    arrays[1] = slice_of(buf, 48, 8, 1);
    rt_fault_reset();
    rt_fault_fail_at(RT_HOST_REGISTER, 2, GM_ERR_PERMISSION);
    rt_fault_fail_at(RT_HOST_UNREGISTER, 1, GM_ERR_DRIVER);
    rt_log_capture(GM_LOG_WARN);
    assert_status(gm_pin(ctx, 2, arrays, &scope), GM_ERR_PERMISSION);
    assert_message_begins("gm_pin: host_register: injected failure on call 2");
    assert_true(rt_log_contains(GM_LOG_WARN, "gm_pin: host_unregister: injected failure"));
    rt_log_stop();
    gm_context_destroy(&ctx); /* the leftover registration goes with the backend */
}

static void test_scope_arguments(void **state)
{
    double buf[4];
    gm_ndview a = slice_of(buf, 0, 4, 1);
    gm_context *ctx = NULL;
    gm_host_scope *scope = NULL;

    (void)state;
    assert_status(gm_pin(NULL, 1, &a, &scope), GM_ERR_NULL_POINTER);
    assert_ok(gm_context_create(NULL, &ctx));
    assert_status(gm_pin(ctx, 1, &a, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_pin(ctx, -1, &a, &scope), GM_ERR_INVALID_ARG);
    assert_status(gm_pin(ctx, 1, NULL, &scope), GM_ERR_NULL_POINTER);
    a.ndim = -1;
    assert_status(gm_map(ctx, 1, &a, NULL, &scope), GM_ERR_INVALID_ARG);
    assert_ok(gm_pin(ctx, 0, NULL, &scope));
    assert_non_null(scope);
    assert_ok(gm_host_scope_end(&scope));
    gm_context_destroy(&ctx);
}

/* Every bookkeeping allocation of the host-memory calls may fail. */
static void test_injected_alloc_failures(void **state)
{
    double buf[32];
    gm_ndview arrays[2] = {slice_of(buf, 0, 16, 1), slice_of(buf, 16, 16, 1)};
    gm_ndview views[2];
    int64_t n = 1, four = 4;

    (void)state;
    for (;; n++) {
        gm_context *ctx = NULL;
        gm_host_scope *scope = NULL;
        gm_array *m = NULL;
        gm_status s = GM_OK;

        rt_fault_reset();
        rt_alloc_fail_at(n);
        s = rt_fault_context(NULL, &ctx);
        if (s == GM_OK)
            s = gm_map(ctx, 2, arrays, views, &scope);
        if (s == GM_OK)
            s = gm_host_scope_end(&scope);
        if (s == GM_OK)
            s = gm_mapped_array(ctx, 1, &four, GM_FLOAT64, GM_ORDER_C, 0, &m);
        if (s == GM_OK)
            s = gm_array_device_view(m, &views[0]);
        gm_array_release(&m);
        gm_context_destroy(&ctx);
        if (rt_alloc_sweep_done(s, n, 1000))
            break;
    }
    print_message("%lld bookkeeping allocations failed in turn\n", (long long)n);
    assert_true(n > 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_pinned_array, test_setup),
        cmocka_unit_test_setup(test_mapped_array, test_setup),
        cmocka_unit_test_setup(test_managed_array, test_setup),
        cmocka_unit_test_setup(test_strided_host_arrays, test_setup),
        cmocka_unit_test_setup(test_register_unmapped, test_setup),
        cmocka_unit_test_setup(test_registration_across_contexts, test_setup),
        cmocka_unit_test_setup(test_registration_race, test_setup),
        cmocka_unit_test_setup(test_pin_overlapping_and_repin, test_setup),
        cmocka_unit_test_setup(test_pin_memory_kinds, test_setup),
        cmocka_unit_test_setup(test_map, test_setup),
        cmocka_unit_test_setup(test_map_views_reserved_zero, test_setup),
        cmocka_unit_test_setup(test_scope_end_waits_for_work, test_setup),
        cmocka_unit_test_setup(test_scope_opened_by_callback_during_teardown, test_setup),
        cmocka_unit_test_setup(test_scope_failures, test_setup),
        cmocka_unit_test_setup(test_scope_arguments, test_setup),
        cmocka_unit_test_setup(test_injected_alloc_failures, test_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, gm_test_restore_allocator);
}
