/*
 * Tests for the deallocation queue (src/core/dealloc.c), one rule at a time,
 * on the host backend with a 64 MiB simulated device and 16 MiB of pinned
 * memory. Failures are injected with the fault table of rt_helpers.c.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt_helpers.h"

#define MIB ((int64_t)1024 * 1024)
#define BIG (INT64_MAX / 4)

/* A 1-D uint8 device array of n bytes. */
static gm_array *device_bytes(gm_context *ctx, int64_t n)
{
    gm_array *a = NULL;

    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a));
    return a;
}

/* A 1-D uint8 pinned array of n bytes. */
static gm_array *pinned_bytes(gm_context *ctx, int64_t n)
{
    gm_array *a = NULL;

    assert_ok(gm_pinned_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a));
    return a;
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
    rt_fault_reset();
    return 0;
}

/* The count bound: a flush happens exactly when the count exceeds max_pending_count. */
static void test_count_bound(void **state)
{
    gm_context_options o = rt_options(3, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a[5];
    gm_dealloc_stats s;

    (void)state;
    assert_ok(gm_context_create(&o, &ctx));
    for (int i = 0; i < 5; i++)
        a[i] = device_bytes(ctx, 1000);
    for (int i = 0; i < 3; i++) {
        gm_array_release(&a[i]);
        assert_null(a[i]);
        s = rt_stats(ctx);
        assert_int_equal(s.pending_count, i + 1);
        assert_int_equal(s.pending_device_bytes, 1000 * (i + 1));
        assert_int_equal(s.flushes, 0);
    }
    gm_array_release(&a[3]);
    s = rt_stats(ctx);
    assert_int_equal(s.pending_count, 0);
    assert_int_equal(s.pending_device_bytes, 0);
    assert_int_equal(s.flushes, 1);
    assert_int_equal(s.freed_count, 4);
    assert_int_equal(s.peak_pending_bytes, 4000);
    gm_array_release(&a[4]);
    assert_int_equal(rt_stats(ctx).pending_count, 1);
    gm_context_destroy(&ctx);
    assert_null(ctx);
}

/* max_pending_count 0: every release flushes at once. */
static void test_count_bound_zero(void **state)
{
    gm_context_options o = rt_options(0, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a = NULL;

    (void)state;
    assert_ok(gm_context_create(&o, &ctx));
    a = device_bytes(ctx, 10);
    gm_array_release(&a);
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    assert_int_equal(rt_stats(ctx).freed_count, 1);
    gm_context_destroy(&ctx);
}

/* The device-byte bound: ratio x total device memory, exceeded strictly. */
static void test_device_byte_bound(void **state)
{
    gm_context_options o = rt_options(1000, 0.25, BIG); /* 16 MiB of 64 MiB */
    gm_context *ctx = NULL;
    gm_array *a = NULL, *b = NULL, *c = NULL;
    gm_dealloc_stats s;

    (void)state;
    assert_ok(gm_context_create(&o, &ctx));
    a = device_bytes(ctx, 10 * MIB);
    b = device_bytes(ctx, 6 * MIB);
    c = device_bytes(ctx, 1);
    gm_array_release(&a);
    gm_array_release(&b);
    s = rt_stats(ctx);
    assert_int_equal(s.pending_device_bytes, 16 * MIB); /* equal: not exceeded */
    assert_int_equal(s.flushes, 0);
    gm_array_release(&c);
    s = rt_stats(ctx);
    assert_int_equal(s.pending_device_bytes, 0);
    assert_int_equal(s.pending_count, 0);
    assert_int_equal(s.flushes, 1);
    assert_int_equal(s.peak_pending_bytes, 16 * MIB + 1);
    gm_context_destroy(&ctx);
}

/* Pinned and mapped bytes have their own bound, and do not count as device bytes. */
static void test_pinned_byte_bound(void **state)
{
    gm_context_options o = rt_options(1000, 0.0001, 1 * MIB);
    gm_context *ctx = NULL;
    gm_array *p = NULL, *m = NULL, *d = NULL;
    int64_t n = 600 * 1024;
    gm_dealloc_stats s;

    (void)state;
    o.max_pending_ratio = 1.0;
    assert_ok(gm_context_create(&o, &ctx));
    p = pinned_bytes(ctx, n);
    assert_ok(gm_mapped_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, 0, &m));
    d = device_bytes(ctx, 2 * MIB);
    gm_array_release(&d);
    gm_array_release(&p);
    s = rt_stats(ctx);
    assert_int_equal(s.pending_device_bytes, 2 * MIB);
    assert_int_equal(s.pending_pinned_bytes, n);
    assert_int_equal(s.flushes, 0);
    gm_array_release(&m);
    s = rt_stats(ctx);
    assert_int_equal(s.pending_pinned_bytes, 0);
    assert_int_equal(s.pending_device_bytes, 0);
    assert_int_equal(s.flushes, 1);
    assert_int_equal(s.freed_count, 3);
    gm_context_destroy(&ctx);
}

/* Streams and events count toward the count bound only. */
static void test_streams_events_count_only(void **state)
{
    gm_context_options o = rt_options(2, 0.0, 0);
    gm_context *ctx = NULL;
    gm_stream *st[2] = {NULL, NULL};
    gm_event *ev = NULL;
    gm_dealloc_stats s;

    (void)state;
    assert_ok(gm_context_create(&o, &ctx));
    assert_ok(gm_stream_create(ctx, GM_STREAM_DEFAULT, &st[0]));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &st[1]));
    assert_ok(gm_event_create(ctx, false, &ev));
    gm_stream_destroy(&st[0]);
    gm_event_destroy(&ev);
    assert_null(st[0]);
    assert_null(ev);
    s = rt_stats(ctx);
    assert_int_equal(s.pending_count, 2);
    assert_int_equal(s.pending_device_bytes, 0);
    assert_int_equal(s.flushes, 0);
    gm_stream_destroy(&st[1]);
    s = rt_stats(ctx);
    assert_int_equal(s.pending_count, 0);
    assert_int_equal(s.freed_count, 3);
    gm_context_destroy(&ctx);
}

/* An allocation that runs out of device memory flushes the queue and retries once. */
static void test_oom_flush_and_retry(void **state)
{
    gm_context_options o = rt_options(1000, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a = NULL, *b = NULL;
    gm_dealloc_stats s;

    (void)state;
    assert_ok(rt_fault_context(&o, &ctx));
    a = device_bytes(ctx, 40 * MIB);
    gm_array_release(&a);
    assert_int_equal(rt_stats(ctx).pending_count, 1);
    /* An earlier error the caller has not looked at yet survives the retry. */
    assert_status(gm_deallocations_stats(ctx, NULL), GM_ERR_NULL_POINTER);
    b = device_bytes(ctx, 40 * MIB); /* fails once for lack of memory, then succeeds */
    assert_int_equal(rt_fault_calls(RT_MEM_ALLOC), 3);
    assert_int_equal(rt_fault_calls(RT_MEM_FREE), 1);
    assert_int_equal(gm_last_error(), GM_ERR_NULL_POINTER);
    assert_message_contains("gm_deallocations_stats");
    s = rt_stats(ctx);
    assert_int_equal(s.pending_count, 0);
    assert_int_equal(s.flushes, 1);
    assert_int_equal(s.freed_count, 1);
    /* And with none: the out-of-memory error of the first attempt is not left behind. */
    gm_array_release(&b);
    gm_clear_error();
    b = device_bytes(ctx, 40 * MIB);
    assert_int_equal(rt_stats(ctx).flushes, 2);
    assert_int_equal(gm_last_error(), GM_OK);
    gm_array_release(&b);
    gm_context_destroy(&ctx);
}

/* With nothing to free, the retry fails too and the error is reported. */
static void test_oom_without_pending(void **state)
{
    gm_context *ctx = NULL;
    gm_array *a = NULL;
    int64_t n = 100 * MIB;

    (void)state;
    assert_ok(rt_fault_context(NULL, &ctx));
    assert_status(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a),
                  GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_null(a);
    assert_message_contains("cannot allocate");
    assert_int_equal(rt_fault_calls(RT_MEM_ALLOC), 2);
    gm_context_destroy(&ctx);
}

/* Pinned and mapped allocations follow the same rule. */
static void test_oom_pinned_and_mapped(void **state)
{
    gm_context_options o = rt_options(1000, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a = NULL, *b = NULL;
    int64_t n = 10 * MIB;

    (void)state;
    assert_ok(rt_fault_context(&o, &ctx));
    a = pinned_bytes(ctx, n);
    gm_array_release(&a);
    b = pinned_bytes(ctx, n);
    assert_int_equal(rt_fault_calls(RT_HOST_ALLOC), 3);
    assert_int_equal(rt_stats(ctx).freed_count, 1);
    gm_array_release(&b);
    assert_ok(gm_mapped_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, GM_HOST_PORTABLE, &a));
    assert_int_equal(rt_fault_calls(RT_HOST_ALLOC), 5);
    assert_int_equal(rt_stats(ctx).freed_count, 2);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
}

/* Inside defer_cleanup nothing is freed, not even to retry an allocation. */
static void test_oom_inside_defer(void **state)
{
    gm_context_options o = rt_options(1000, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a = NULL, *b = NULL;
    int64_t n = 40 * MIB;

    (void)state;
    assert_ok(rt_fault_context(&o, &ctx));
    a = device_bytes(ctx, n);
    assert_ok(gm_defer_cleanup_begin(ctx));
    gm_array_release(&a);
    assert_status(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &b),
                  GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_int_equal(rt_fault_calls(RT_MEM_ALLOC), 2); /* no retry */
    assert_message_contains("gm_device_array: ");
    assert_message_contains("(inside defer_cleanup, which keeps 1 queued deallocations, "
                            "41943040 device and 0 pinned bytes, until its scope ends)");
    assert_int_equal(rt_stats(ctx).pending_count, 1);
    assert_ok(gm_defer_cleanup_end(ctx));
    assert_int_equal(rt_stats(ctx).pending_count, 1); /* still within the bounds */
    b = device_bytes(ctx, n);                         /* now the retry rule applies */
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    gm_array_release(&b);
    gm_context_destroy(&ctx);
}

/*
 * Registration (gm_pin, gm_map, gm_register) out of memory flushes and retries
 * once too, as Numba's mapped mempin does: a flush may unpin queued memory.
 */
static void test_oom_registration(void **state)
{
    static _Alignas(4096) unsigned char buf[3][8192];
    gm_context_options o = rt_options(1000, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a = NULL;
    gm_host_scope *scope = NULL;
    gm_ndview v[3];
    int64_t n = 8192, calls = 0;

    (void)state;
    for (int i = 0; i < 3; i++)
        assert_ok(gm_ndview_init(buf[i], GM_UINT8, 1, &n, NULL, GM_ORDER_C, &v[i]));
    assert_ok(rt_fault_context(&o, &ctx));
    for (int i = 0; i < 3; i++) {
        a = pinned_bytes(ctx, MIB);
        gm_array_release(&a);
        assert_int_equal(rt_stats(ctx).pending_count, 1);
        calls = rt_fault_calls(RT_HOST_REGISTER);
        rt_fault_fail_at(RT_HOST_REGISTER, calls + 1, GM_ERR_NO_MEMORY);
        if (i == 0)
            assert_ok(gm_pin(ctx, 1, &v[i], &scope));
        else if (i == 1)
            assert_ok(gm_map(ctx, 1, &v[i], NULL, &scope));
        else
            assert_ok(gm_register(ctx, 1, &v[i], &scope));
        assert_int_equal(rt_fault_calls(RT_HOST_REGISTER), calls + 2); /* failed, retried */
        assert_int_equal(rt_stats(ctx).pending_count, 0);              /* after a flush */
        assert_ok(gm_host_scope_end(&scope));
    }
    /* inside defer_cleanup: no flush, no retry, and the message says why */
    a = pinned_bytes(ctx, MIB);
    assert_ok(gm_defer_cleanup_begin(ctx));
    gm_array_release(&a);
    calls = rt_fault_calls(RT_HOST_REGISTER);
    rt_fault_fail_at(RT_HOST_REGISTER, calls + 1, GM_ERR_NO_MEMORY);
    assert_status(gm_pin(ctx, 1, &v[0], &scope), GM_ERR_NO_MEMORY);
    assert_null(scope);
    assert_int_equal(rt_fault_calls(RT_HOST_REGISTER), calls + 1);
    assert_message_contains("gm_pin: ");
    assert_message_contains("inside defer_cleanup, which keeps 1 queued deallocations");
    assert_ok(gm_defer_cleanup_end(ctx));
    /* another failure is not retried */
    calls = rt_fault_calls(RT_HOST_REGISTER);
    rt_fault_fail_at(RT_HOST_REGISTER, calls + 1, GM_ERR_DRIVER);
    assert_status(gm_pin(ctx, 1, &v[0], &scope), GM_ERR_DRIVER);
    assert_int_equal(rt_fault_calls(RT_HOST_REGISTER), calls + 1);
    assert_int_equal(rt_stats(ctx).pending_count, 1);
    gm_context_destroy(&ctx);
}

/* defer_cleanup scopes nest; the limits apply again when the last one ends. */
static void test_defer_nesting(void **state)
{
    gm_context_options o = rt_options(2, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a[4];
    gm_dealloc_stats s;

    (void)state;
    assert_ok(gm_context_create(&o, &ctx));
    for (int i = 0; i < 4; i++)
        a[i] = device_bytes(ctx, 100);
    assert_ok(gm_defer_cleanup_begin(ctx));
    assert_ok(gm_defer_cleanup_begin(ctx));
    assert_int_equal(rt_stats(ctx).defer_depth, 2);
    for (int i = 0; i < 4; i++)
        gm_array_release(&a[i]);
    assert_ok(gm_deallocations_flush(ctx)); /* explicit flushes wait too */
    s = rt_stats(ctx);
    assert_int_equal(s.pending_count, 4);
    assert_int_equal(s.flushes, 0);
    assert_ok(gm_defer_cleanup_end(ctx));
    s = rt_stats(ctx);
    assert_int_equal(s.defer_depth, 1);
    assert_int_equal(s.pending_count, 4);
    assert_ok(gm_defer_cleanup_end(ctx));
    s = rt_stats(ctx);
    assert_int_equal(s.defer_depth, 0);
    assert_int_equal(s.pending_count, 0);
    assert_int_equal(s.flushes, 1);
    assert_status(gm_defer_cleanup_end(ctx), GM_ERR_STATE);
    assert_message_contains("no defer_cleanup scope");
    gm_context_destroy(&ctx);
}

/* Release a new array of n1 bytes from make, then make one of n2: whether it took the same
 * block (the same gm_array) is `same`. */
static void check_next_takes_block(gm_context *ctx, gm_array *(*make)(gm_context *, int64_t),
                                   int64_t n1, int64_t n2, bool same)
{
    gm_array *a = make(ctx, n1), *b = NULL;
    void *was = a;

    gm_array_release(&a);
    b = make(ctx, n2);
    assert_true((b == was) == same);
    gm_array_release(&b);
}

/*
 * An array's memory that waits long in the queue (inside defer_cleanup, or
 * under a count bound past the 64 spare blocks kept) is queued without its
 * array's block, which the next array takes at once: device and pinned
 * arrays, the last reference being a view's, more releases than the pool
 * keeps; the counts and bytes pending stay exact, and every byte comes back
 * when the scope ends. Outside those cases the block waits with its memory.
 */
static void test_waiting_memory_frees_its_block(void **state)
{
    gm_context_options o = rt_options(2, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a = NULL, *b = NULL, *view = NULL, *many[70];
    gm_index_item half = GM_IDX_SLICE(0, 50, 1);
    int64_t free0 = 0, free1 = 0, total = 0;
    gm_dealloc_stats s;
    void *was = NULL;

    (void)state;
    assert_ok(gm_context_create(&o, &ctx));
    assert_ok(gm_context_memory_info(ctx, &free0, &total));
    /* outside: the block waits with its memory (a count bound of 2) */
    check_next_takes_block(ctx, device_bytes, 100, 100, false);
    assert_ok(gm_deallocations_flush(ctx));

    assert_ok(gm_defer_cleanup_begin(ctx));
    check_next_takes_block(ctx, device_bytes, 100, 200, true);
    check_next_takes_block(ctx, pinned_bytes, 4096, 4096, true);
    /* the last reference a view's */
    a = device_bytes(ctx, 100);
    was = a;
    assert_ok(gm_array_getitem(a, 1, &half, &view));
    gm_array_release(&a);
    gm_array_release(&view);
    b = device_bytes(ctx, 300);
    assert_ptr_equal(b, was);
    gm_array_release(&b);
    s = rt_stats(ctx);
    assert_int_equal(s.pending_count, 6);
    assert_int_equal(s.pending_device_bytes, 100 + 200 + 100 + 300);
    assert_int_equal(s.pending_pinned_bytes, 2 * 4096);
    /* more than the pool keeps */
    for (int i = 0; i < 70; i++)
        many[i] = device_bytes(ctx, 1000 + i);
    for (int i = 0; i < 70; i++)
        gm_array_release(&many[i]);
    s = rt_stats(ctx);
    assert_int_equal(s.pending_count, 76);
    assert_int_equal(s.pending_device_bytes, 700 + 70 * 1000 + 69 * 70 / 2);
    assert_ok(gm_defer_cleanup_end(ctx));
    s = rt_stats(ctx);
    assert_int_equal(s.pending_count, 0);
    assert_int_equal(s.pending_device_bytes, 0);
    assert_int_equal(s.pending_pinned_bytes, 0);
    assert_ok(gm_context_memory_info(ctx, &free1, &total));
    assert_int_equal(free1, free0);
    gm_context_destroy(&ctx);

    /* a count bound past the pool: the same without a scope */
    o = rt_options(100, 10.0, BIG);
    assert_ok(gm_context_create(&o, &ctx));
    check_next_takes_block(ctx, device_bytes, 100, 100, true);
    assert_int_equal(rt_stats(ctx).pending_count, 2);
    gm_context_destroy(&ctx);
}

/* A flush stops at the first failing deallocation and keeps exact accounting. */
static void test_flush_stops_at_failure(void **state)
{
    gm_context_options o = rt_options(1000, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a[4];
    gm_dealloc_stats s;

    (void)state;
    assert_ok(rt_fault_context(&o, &ctx));
    for (int i = 0; i < 4; i++)
        a[i] = device_bytes(ctx, 1000 * (i + 1));
    for (int i = 0; i < 4; i++)
        gm_array_release(&a[i]);
    rt_fault_fail_at(RT_MEM_FREE, 2, GM_ERR_DRIVER);
    assert_status(gm_deallocations_flush(ctx), GM_ERR_DRIVER);
    assert_message_contains("gm_deallocations_flush: freeing device memory");
    assert_message_contains("(2000 bytes) failed: mem_free: injected failure on call 2");
    s = rt_stats(ctx);
    assert_int_equal(s.pending_count, 3);
    assert_int_equal(s.pending_device_bytes, 2000 + 3000 + 4000);
    assert_int_equal(s.freed_count, 1);
    assert_int_equal(s.flushes, 1);
    assert_ok(gm_deallocations_flush(ctx)); /* the failed entry is retried first */
    s = rt_stats(ctx);
    assert_int_equal(s.pending_count, 0);
    assert_int_equal(s.pending_device_bytes, 0);
    assert_int_equal(s.freed_count, 4);
    assert_int_equal(rt_fault_calls(RT_MEM_FREE), 5);
    gm_context_destroy(&ctx);
}

/* A flush whose first deallocation fails freed nothing: it is not counted (runtime.h). */
static void test_failed_flush_not_counted(void **state)
{
    gm_context_options o = rt_options(1000, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a = NULL;
    gm_dealloc_stats s;

    (void)state;
    assert_ok(rt_fault_context(&o, &ctx));
    a = device_bytes(ctx, 1000);
    gm_array_release(&a);
    rt_fault_fail_at(RT_MEM_FREE, 1, GM_ERR_DRIVER);
    assert_status(gm_deallocations_flush(ctx), GM_ERR_DRIVER);
    s = rt_stats(ctx);
    assert_int_equal(s.freed_count, 0);
    assert_int_equal(s.flushes, 0);
    assert_int_equal(s.pending_count, 1);
    assert_ok(gm_deallocations_flush(ctx));
    s = rt_stats(ctx);
    assert_int_equal(s.freed_count, 1);
    assert_int_equal(s.flushes, 1);
    gm_context_destroy(&ctx);
}

/*
 * A flush uncounts what it freed by sums and pools the blocks of a batch at
 * once when they fit: a batch of mixed kinds, larger than the pool of spare
 * blocks (64), ends with exact counters and nothing leaked, and the blocks
 * come back for the next arrays, batch after batch.
 */
static void test_flush_settles_large_mixed_batch(void **state)
{
    gm_context_options o = rt_options(1000, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a[150];
    gm_dealloc_stats s;
    int64_t device = 0, pinned = 0;

    (void)state;
    assert_ok(gm_context_create(&o, &ctx));
    for (int round = 0; round < 3; round++) {
        int n =
            round == 1 ? 5 : 150; /* a batch that fits the pool whole, between two that do not */

        device = pinned = 0;
        for (int i = 0; i < n; i++) {
            int64_t bytes = 100 + i;

            a[i] = i % 3 == 2 ? pinned_bytes(ctx, bytes) : device_bytes(ctx, bytes);
            *(i % 3 == 2 ? &pinned : &device) += bytes;
        }
        for (int i = 0; i < n; i++)
            gm_array_release(&a[i]);
        s = rt_stats(ctx);
        assert_int_equal(s.pending_count, n);
        assert_int_equal(s.pending_device_bytes, device);
        assert_int_equal(s.pending_pinned_bytes, pinned);
        assert_ok(gm_deallocations_flush(ctx));
        s = rt_stats(ctx);
        assert_int_equal(s.pending_count, 0);
        assert_int_equal(s.pending_device_bytes, 0);
        assert_int_equal(s.pending_pinned_bytes, 0);
        assert_true(s.peak_pending_bytes >= device + pinned);
    }
    assert_int_equal(s.freed_count, 150 + 5 + 150);
    assert_int_equal(s.flushes, 3);
    gm_context_destroy(&ctx); /* the cmocka allocator reports a block leaked or freed twice */
}

/* A failing automatic flush is logged and the entries stay queued. */
static void test_auto_flush_failure_logged(void **state)
{
    gm_context_options o = rt_options(1, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a = NULL, *b = NULL;

    (void)state;
    assert_ok(rt_fault_context(&o, &ctx));
    a = device_bytes(ctx, 64);
    b = device_bytes(ctx, 64);
    rt_fault_fail_at(RT_MEM_FREE, 1, GM_ERR_DRIVER);
    rt_log_capture(GM_LOG_WARN);
    gm_array_release(&a);
    gm_array_release(&b);
    rt_log_stop();
    assert_true(rt_log_contains(GM_LOG_WARN, "automatic flush stopped"));
    assert_int_equal(rt_stats(ctx).pending_count, 2);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    gm_context_destroy(&ctx);
}

/* Teardown frees everything, ignoring defer_cleanup, and logs failures. */
static void test_teardown(void **state)
{
    gm_context_options o = rt_options(1000, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a = NULL, *b = NULL;

    (void)state;
    assert_ok(rt_fault_context(&o, &ctx));
    a = device_bytes(ctx, 64);
    b = device_bytes(ctx, 64);
    assert_ok(gm_defer_cleanup_begin(ctx));
    gm_array_release(&a);
    gm_array_release(&b);
    rt_fault_fail_at(RT_MEM_FREE, 1, GM_ERR_DRIVER);
    rt_log_capture(GM_LOG_WARN);
    gm_context_destroy(&ctx);
    rt_log_stop();
    assert_true(rt_log_contains(GM_LOG_ERROR, "gm_context_destroy: freeing device memory"));
    assert_int_equal(rt_fault_calls(RT_MEM_FREE), 2);
}

/* Module entries call their unload function; gpumem host buffers count only. */
static int unloads;

static gm_status unload_module(gm_context *ctx, void *module)
{
    (void)ctx;
    unloads += module == (void *)&unloads ? 1 : 100;
    return GM_OK;
}

static void test_internal_kinds(void **state)
{
    gm_context_options o = rt_options(1000, 10.0, BIG);
    gm_context *ctx = NULL;
    gm__dealloc_entry *e = NULL;
    gm_dealloc_stats s;

    (void)state;
    unloads = 0;
    assert_ok(gm_context_create(&o, &ctx));
    assert_ok(gm__dealloc_entry_create("test", GM__DEALLOC_MODULE, &e));
    e->handle = &unloads;
    e->unload = unload_module;
    gm__dealloc_enqueue(ctx, e);
    assert_ok(gm__dealloc_entry_create("test", GM__DEALLOC_HOST_COPY, &e));
    e->handle = test_malloc(32);
    e->bytes = 32;
    gm__dealloc_enqueue_no_flush(ctx, e);
    s = rt_stats(ctx);
    assert_int_equal(s.pending_count, 2);
    assert_int_equal(s.pending_device_bytes + s.pending_pinned_bytes, 0);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(unloads, 1);
    assert_ok(gm__dealloc_entry_create("test", GM__DEALLOC_DEVICE, &e));
    gm__dealloc_entry_discard(e);
    gm__dealloc_entry_discard(NULL);
    gm_context_destroy(&ctx);
}

/* Argument checks of the public queue calls. */
static void test_queue_arguments(void **state)
{
    gm_context *ctx = NULL;
    gm_dealloc_stats s;

    (void)state;
    assert_status(gm_defer_cleanup_begin(NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_defer_cleanup_end(NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_deallocations_flush(NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_deallocations_stats(NULL, &s), GM_ERR_NULL_POINTER);
    assert_ok(gm_context_create(NULL, &ctx));
    assert_status(gm_deallocations_stats(ctx, NULL), GM_ERR_NULL_POINTER);
    assert_message_contains("gm_deallocations_stats: stats_p is NULL");
    assert_ok(gm_deallocations_flush(ctx)); /* empty queue */
    assert_int_equal(rt_stats(ctx).flushes, 0);
    gm_context_destroy(&ctx);
}

/* The bounds come from the environment when the options are defaulted. */
static void test_bounds_from_environment(void **state)
{
    gm_context *ctx = NULL;
    gm_array *a[3];

    (void)state;
    setenv("GM_MAX_PENDING_DEALLOCS_COUNT", "1", 1);
    assert_ok(gm_context_create(NULL, &ctx));
    unsetenv("GM_MAX_PENDING_DEALLOCS_COUNT");
    for (int i = 0; i < 3; i++)
        a[i] = device_bytes(ctx, 8);
    gm_array_release(&a[0]);
    assert_int_equal(rt_stats(ctx).pending_count, 1);
    gm_array_release(&a[1]);
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    gm_array_release(&a[2]);
    gm_context_destroy(&ctx);
}

/* ---- frees wait for the work queued on the streams (cuMemFree's implicit synchronization) */

/* What a callback queued behind an asynchronous copy saw of the queue. */
typedef struct seen_by_work {
    gm_context *ctx;
    int64_t freed; /* entries freed when the work before this callback had finished */
} seen_by_work;

/* Stream callback: hold the stream ~100 ms, so that the copies behind it are still queued. */
static void hold_stream(gm_stream *stream, gm_status status, void *user)
{
    struct timespec pause = {0, 100 * 1000 * 1000};

    (void)stream;
    (void)status;
    (void)user;
    nanosleep(&pause, NULL);
}

/*
 * Fill `a` with `byte` and queue its copy into `view` (host bytes) on a new
 * non-blocking stream held ~100 ms first, so the copy is still queued when
 * the caller goes on.
 */
static gm_stream *held_copy_to_host(gm_context *ctx, gm_array *a, unsigned char *host, int64_t n,
                                    int byte, gm_ndview *view)
{
    gm_stream *stream = NULL;

    assert_ok(gm_array_memset(a, byte, NULL));
    assert_ok(gm_ndview_init(host, GM_UINT8, 1, &n, NULL, GM_ORDER_C, view));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &stream));
    assert_ok(gm_stream_add_callback(stream, hold_stream, NULL));
    assert_ok(gm_array_copy_to_host(a, view, stream));
    return stream;
}

/* Stream callback: note how many entries the queue had freed by now. */
static void note_freed(gm_stream *stream, gm_status status, void *user)
{
    seen_by_work *seen = user;

    (void)stream;
    (void)status;
    seen->freed = rt_stats(seen->ctx).freed_count;
}

/*
 * A device array released while a copy from it is still queued (the stream
 * held): the flush, explicit or automatic, waits for that work before it
 * frees the memory, so the callback behind the copy sees nothing freed yet
 * and the host receives the array's bytes.
 */
static void check_flush_waits(bool automatic)
{
    gm_context_options o = rt_options(automatic ? 0 : 100, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_stream *stream = NULL;
    gm_array *a = NULL;
    seen_by_work seen = {NULL, -1};
    unsigned char *host = calloc(4096, 1);
    int64_t n = 4096, freed = 0;
    gm_ndview view;

    assert_non_null(host);
    assert_ok(gm_context_create(&o, &ctx));
    seen.ctx = ctx;
    a = device_bytes(ctx, n);
    stream = held_copy_to_host(ctx, a, host, n, 0x5a, &view);
    assert_ok(gm_stream_add_callback(stream, note_freed, &seen));
    freed = rt_stats(ctx).freed_count;
    gm_array_release(&a); /* automatic: the count bound 0 flushes here */
    if (!automatic)
        assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(gm_stream_query(stream), GM_OK); /* the flush waited for it */
    assert_int_equal(seen.freed, freed);
    assert_true(rt_stats(ctx).freed_count > freed); /* the array (and the callbacks' records) */
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(host[i], 0x5a);
    gm_stream_destroy(&stream);
    gm_context_destroy(&ctx);
    free(host);
}

static void test_flush_waits_for_queued_work(void **state)
{
    (void)state;
    check_flush_waits(false);
    check_flush_waits(true);
}

/* The host array of gm_array_copy_to_host_new is not freed while the copy into it is queued. */
static void test_host_copy_freed_after_its_copy(void **state)
{
    gm_context_options o = rt_options(100, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_stream *stream = NULL;
    gm_array *a = NULL, *host = NULL;
    seen_by_work seen = {NULL, -1};
    int64_t freed = 0;

    (void)state;
    assert_ok(gm_context_create(&o, &ctx));
    seen.ctx = ctx;
    a = device_bytes(ctx, 1 << 16);
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &stream));
    assert_ok(gm_stream_add_callback(stream, hold_stream, NULL));
    assert_ok(gm_array_copy_to_host_new(a, stream, &host));
    assert_ok(gm_stream_add_callback(stream, note_freed, &seen));
    freed = rt_stats(ctx).freed_count;
    gm_array_release(&host);
    gm_array_release(&a);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(gm_stream_query(stream), GM_OK);
    assert_int_equal(seen.freed, freed);
    assert_true(rt_stats(ctx).freed_count >= freed + 2);
    gm_stream_destroy(&stream);
    gm_context_destroy(&ctx);
}

/*
 * The usual teardown order with work still queued: release the array,
 * destroy the stream, destroy the context. The stream's destruction waits in
 * the queue behind the memory, so the teardown's drain must wait for the
 * stream's work before it frees the memory: the copy lands (and ASan sees no
 * use after free, the simulator's cache being off).
 */
static void test_teardown_waits_for_destroyed_stream(void **state)
{
    gm_context *ctx = NULL;
    gm_stream *stream = NULL;
    gm_array *a = NULL;
    unsigned char *host = calloc(1 << 16, 1);
    int64_t n = 1 << 16;
    gm_ndview view;

    (void)state;
    assert_non_null(host);
    setenv("GM_HOST_DEVICE_CACHE", "0", 1);
    assert_ok(gm_context_create(NULL, &ctx));
    unsetenv("GM_HOST_DEVICE_CACHE");
    a = device_bytes(ctx, n);
    stream = held_copy_to_host(ctx, a, host, n, 0xc3, &view);
    gm_array_release(&a);
    gm_stream_destroy(&stream);
    gm_context_destroy(&ctx);
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(host[i], 0xc3);
    free(host);
}

/* What end_defer was given and what gm_defer_cleanup_end returned on the worker. */
typedef struct defer_end_job {
    gm_context *ctx;
    gm_status status;
} defer_end_job;

/* A stream callback that closes the last defer_cleanup scope (checked on the main thread). */
static void end_defer(gm_stream *stream, gm_status status, void *user)
{
    defer_end_job *job = user;

    (void)stream;
    (void)status;
    job->status = gm_defer_cleanup_end(job->ctx);
}

/*
 * Closing the last defer_cleanup scope inside a stream callback with the
 * bounds exceeded queues nothing more and frees nothing on the worker: the
 * flush runs at the next release on an ordinary thread.
 */
static void test_defer_end_in_callback_does_not_flush(void **state)
{
    gm_context_options o = rt_options(3, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_stream *stream = NULL;
    gm_array *a[6];
    defer_end_job job = {NULL, GM_ERR_INTERNAL};

    (void)state;
    assert_ok(gm_context_create(&o, &ctx));
    job.ctx = ctx;
    for (int i = 0; i < 6; i++)
        a[i] = device_bytes(ctx, 64);
    assert_ok(gm_defer_cleanup_begin(ctx));
    for (int i = 0; i < 5; i++)
        gm_array_release(&a[i]);
    assert_int_equal(rt_stats(ctx).pending_count, 5);
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &stream));
    assert_ok(gm_stream_add_callback(stream, end_defer, &job));
    assert_ok(gm_stream_synchronize(stream));
    assert_ok(job.status);
    assert_int_equal(rt_stats(ctx).defer_depth, 0);
    assert_true(rt_stats(ctx).pending_count >= 5); /* the arrays and the callback's record */
    assert_int_equal(rt_stats(ctx).flushes, 0);
    gm_array_release(&a[5]);
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    assert_int_equal(rt_stats(ctx).flushes, 1);
    gm_stream_destroy(&stream);
    gm_context_destroy(&ctx);
}

/*
 * Bookkeeping frees on the flusher's thread (below): the first one, which
 * comes after its drain has settled (device memory is the backend's, the
 * entries are freed last), waits until the main thread has done its
 * releases; all take 2 ms.
 */
static _Thread_local bool slow_frees;
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_state; /* 0: closed, 1: the flusher is in its first free, 2: released */

static void *plain_malloc(size_t size)
{
    return test_malloc(size);
}

static void *plain_calloc(size_t count, size_t size)
{
    return test_calloc(count, size);
}

static void *plain_realloc(void *ptr, size_t size)
{
    return test_realloc(ptr, size);
}

static void slow_free(void *ptr)
{
    struct timespec ts = {0, 2 * 1000 * 1000};

    if (slow_frees && ptr != NULL) {
        pthread_mutex_lock(&gate_lock);
        if (gate_state == 0) {
            gate_state = 1;
            pthread_cond_broadcast(&gate_cond);
            while (gate_state != 2)
                pthread_cond_wait(&gate_cond, &gate_lock);
        }
        pthread_mutex_unlock(&gate_lock);
        nanosleep(&ts, NULL);
    }
    test_free(ptr);
}

typedef struct flush_result {
    gm_context *ctx;
    gm_status status;
} flush_result;

static void *slow_flush(void *user)
{
    flush_result *r = user;

    slow_frees = true;
    r->status = gm_deallocations_flush(r->ctx);
    slow_frees = false;
    return NULL;
}

/*
 * Releases that push the queue over its bound while an explicit flush is
 * finishing (after its drain settled, freeing bookkeeping) leave their flush
 * to that flush, whose thread must look again: the queue ends within its
 * bound once every thread is idle (it stayed 101 over a bound of 100).
 */
static void test_flush_rechecks_bounds(void **state)
{
    static const gm_host_allocator slow = {plain_malloc, plain_calloc, plain_realloc, slow_free};
    gm_context_options o = rt_options(100, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_array *a[100], *b[101];
    int64_t n = 4096;
    flush_result r = {NULL, GM_ERR_INTERNAL};
    pthread_t flusher;

    (void)state;
    gate_state = 0;
    assert_ok(gm_set_host_allocator(&slow));
    assert_ok(gm_context_create(&o, &ctx));
    for (int i = 0; i < 100; i++)
        assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a[i]));
    for (int i = 0; i < 101; i++)
        assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &b[i]));
    for (int i = 0; i < 100; i++)
        gm_array_release(&a[i]); /* 100 pending: at the bound, not over it */
    assert_int_equal(rt_stats(ctx).pending_count, 100);
    r.ctx = ctx;
    assert_int_equal(pthread_create(&flusher, NULL, slow_flush, &r), 0);
    pthread_mutex_lock(&gate_lock);
    while (gate_state != 1) /* the flusher is past its drain, in its first free */
        pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
    for (int i = 0; i < 101; i++)
        gm_array_release(&b[i]); /* each finds flush_lock taken */
    pthread_mutex_lock(&gate_lock);
    gate_state = 2;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
    assert_int_equal(pthread_join(flusher, NULL), 0);
    assert_ok(r.status);
    assert_true(rt_stats(ctx).pending_count <= 100);
    gm_context_destroy(&ctx);
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/* ------------------------------------------------- kept host-array memory */

/* An allocator that watches the blocks of one size: which were made, how many freed. */
static size_t watch_size;
static void *watched[64];
static int watched_made, watched_freed;
static bool fail_next_of_size;
static size_t fail_size;
static bool fail_next_large; /* fail the next malloc of at least fail_large bytes */
static size_t fail_large;

static void *watch_malloc(size_t size)
{
    void *p = NULL;

    if (fail_next_of_size && size == fail_size) {
        fail_next_of_size = false;
        return NULL;
    }
    if (fail_next_large && size >= fail_large) {
        fail_next_large = false;
        return NULL;
    }
    p = test_malloc(size);
    if (p != NULL && size == watch_size && watched_made < 64)
        watched[watched_made++] = p;
    return p;
}

static void *watch_calloc(size_t count, size_t size)
{
    return test_calloc(count, size);
}

static void *watch_realloc(void *ptr, size_t size)
{
    return test_realloc(ptr, size);
}

static void watch_free(void *ptr)
{
    for (int i = 0; ptr != NULL && i < watched_made; i++) {
        if (watched[i] == ptr) {
            watched[i] = NULL;
            watched_freed++;
        }
    }
    test_free(ptr);
}

static void watch_blocks_of(size_t size)
{
    static const gm_host_allocator watch = {watch_malloc, watch_calloc, watch_realloc, watch_free};

    watch_size = size;
    watched_made = watched_freed = 0;
    fail_next_of_size = false;
    fail_next_large = false;
    assert_ok(gm_set_host_allocator(&watch));
}

/* n new host arrays copied from dev (copy_to_host_new), their data pointers in data[]. */
static void host_copies(gm_array *dev, int n, gm_array **out, void **data)
{
    for (int i = 0; i < n; i++) {
        assert_ok(gm_array_copy_to_host_new(dev, NULL, &out[i]));
        data[i] = gm_array_view(out[i])->data;
    }
}

/*
 * Host arrays the queue frees are kept for the next ones of their size (the
 * newest 16): new arrays take them without a malloc and are whole copies;
 * the rest are freed, and the kept ones with the context.
 */
static void test_host_arrays_kept_for_reuse(void **state)
{
    gm_context_options o = rt_options(100, 10.0, BIG);
    gm_context *ctx = NULL;
    int64_t n = 256 << 10;
    gm_array *dev = NULL, *h[20];
    void *data[20], *again[16];

    (void)state;
    watch_blocks_of((size_t)n);
    assert_ok(gm_context_create(&o, &ctx));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &dev));
    assert_ok(gm_array_memset(dev, 0x5a, NULL));
    host_copies(dev, 20, h, data);
    assert_int_equal(watched_made, 20);
    for (int i = 0; i < 20; i++)
        gm_array_release(&h[i]);
    assert_int_equal(watched_freed, 0); /* pending: the queue frees them */
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(watched_freed, 4); /* the 4 oldest; 16 kept */
    assert_ok(gm_array_memset(dev, 0xa5, NULL));
    host_copies(dev, 16, h, again);
    assert_int_equal(watched_made, 20); /* no new block */
    for (int i = 0; i < 16; i++) {
        bool kept = false;

        for (int j = 4; j < 20; j++)
            kept = kept || again[i] == data[j];
        assert_true(kept);
        for (int64_t b = 0; b < n; b++)
            assert_int_equal(((unsigned char *)again[i])[b], 0xa5);
    }
    for (int i = 0; i < 16; i++)
        gm_array_release(&h[i]);
    gm_array_release(&dev);
    gm_context_destroy(&ctx);
    assert_int_equal(watched_freed, 20); /* the kept ones went with the context */
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/* At most 128 MiB are kept (the oldest go), and blocks under 64 KiB are not kept at all. */
static void test_host_keep_bounds(void **state)
{
    gm_context_options o = rt_options(100, 10.0, BIG);
    gm_context *ctx = NULL;
    int64_t big = 16 << 20, small = 60 << 10;
    gm_array *dev = NULL, *h[9];
    void *data[9];

    (void)state;
    watch_blocks_of((size_t)big);
    assert_ok(gm_context_create(&o, &ctx));
    assert_ok(gm_device_array(ctx, 1, &big, GM_UINT8, GM_ORDER_C, &dev));
    host_copies(dev, 9, h, data);
    for (int i = 0; i < 9; i++)
        gm_array_release(&h[i]);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(watched_freed, 1); /* 8 x 16 MiB kept */
    gm_array_release(&dev);
    gm_context_destroy(&ctx);
    assert_int_equal(watched_freed, 9);

    watch_blocks_of((size_t)small);
    assert_ok(gm_context_create(&o, &ctx));
    assert_ok(gm_device_array(ctx, 1, &small, GM_UINT8, GM_ORDER_C, &dev));
    host_copies(dev, 3, h, data);
    for (int i = 0; i < 3; i++)
        gm_array_release(&h[i]);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(watched_freed, 3); /* too small to keep */
    gm_array_release(&dev);
    gm_context_destroy(&ctx);
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/* A host allocation that fails frees the kept blocks and tries again. */
static void test_host_keep_freed_when_memory_is_short(void **state)
{
    gm_context_options o = rt_options(100, 10.0, BIG);
    gm_context *ctx = NULL;
    int64_t n = 256 << 10, other = 512 << 10;
    gm_array *dev = NULL, *dev2 = NULL, *h[3], *x = NULL;
    void *data[3];

    (void)state;
    watch_blocks_of((size_t)n);
    assert_ok(gm_context_create(&o, &ctx));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &dev));
    assert_ok(gm_device_array(ctx, 1, &other, GM_UINT8, GM_ORDER_C, &dev2));
    host_copies(dev, 3, h, data);
    for (int i = 0; i < 3; i++)
        gm_array_release(&h[i]);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(watched_freed, 0); /* all 3 kept */
    fail_size = (size_t)other;
    fail_next_of_size = true;
    assert_ok(gm_array_copy_to_host_new(dev2, NULL, &x)); /* failed once, then succeeded */
    assert_false(fail_next_of_size);
    assert_int_equal(watched_freed, 3); /* the kept blocks went first */
    gm_array_release(&x);
    gm_array_release(&dev2);
    gm_array_release(&dev);
    gm_context_destroy(&ctx);
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/*
 * A staging buffer that cannot be had frees the kept blocks and tries again,
 * as a host array's allocation does: a fill of complex128 items (no backend
 * memset) patterns a host image of the whole array, and that allocation
 * failed with GM_ERR_NO_MEMORY while the kept blocks (up to 128 MiB) stayed
 * held, memory the queue's flush used to give back.
 */
static void test_host_keep_freed_when_staging_is_short(void **state)
{
    gm_context_options o = rt_options(100, 10.0, BIG);
    gm_context *ctx = NULL;
    int64_t n = 256 << 10, items = 1 << 16; /* 1 MiB of complex128 */
    gm_array *dev = NULL, *big = NULL, *h[3];
    void *data[3];
    unsigned char value[16];

    (void)state;
    memset(value, 0x3c, sizeof value);
    watch_blocks_of((size_t)n);
    assert_ok(gm_context_create(&o, &ctx));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &dev));
    assert_ok(gm_device_array(ctx, 1, &items, GM_COMPLEX128, GM_ORDER_C, &big));
    host_copies(dev, 3, h, data);
    for (int i = 0; i < 3; i++)
        gm_array_release(&h[i]);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(watched_freed, 0); /* all 3 kept */
    fail_large = (size_t)items * 16;
    fail_next_large = true;
    assert_ok(gm_array_fill(big, value, NULL)); /* its image failed once, then succeeded */
    assert_false(fail_next_large);
    assert_int_equal(watched_freed, 3); /* the kept blocks went first */
    gm_array_release(&big);
    gm_array_release(&dev);
    gm_context_destroy(&ctx);
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/* An allocation's out-of-memory retry frees the kept host blocks too (pinned memory is host
 * memory): a pinned array that does not fit the simulated budget, retried. */
static void test_host_keep_freed_by_oom_retry(void **state)
{
    gm_context_options o = rt_options(100, 10.0, BIG);
    gm_context *ctx = NULL;
    int64_t n = 256 << 10, too_big = 32 * MIB; /* the group's pinned budget is 16M */
    gm_array *dev = NULL, *h[3], *p = NULL;
    void *data[3];
    gm_status s = GM_OK;

    (void)state;
    watch_blocks_of((size_t)n);
    assert_ok(gm_context_create(&o, &ctx));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &dev));
    host_copies(dev, 3, h, data);
    for (int i = 0; i < 3; i++)
        gm_array_release(&h[i]);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(watched_freed, 0); /* all 3 kept */
    s = gm_pinned_array(ctx, 1, &too_big, GM_UINT8, GM_ORDER_C, &p);
    assert_true(s == GM_ERR_NO_MEMORY || s == GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_null(p);
    assert_int_equal(watched_freed, 3); /* the retry let them go */
    gm_array_release(&dev);
    gm_context_destroy(&ctx);
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_count_bound, test_setup),
        cmocka_unit_test_setup(test_count_bound_zero, test_setup),
        cmocka_unit_test_setup(test_flush_rechecks_bounds, test_setup),
        cmocka_unit_test_setup(test_device_byte_bound, test_setup),
        cmocka_unit_test_setup(test_pinned_byte_bound, test_setup),
        cmocka_unit_test_setup(test_streams_events_count_only, test_setup),
        cmocka_unit_test_setup(test_oom_flush_and_retry, test_setup),
        cmocka_unit_test_setup(test_oom_without_pending, test_setup),
        cmocka_unit_test_setup(test_oom_pinned_and_mapped, test_setup),
        cmocka_unit_test_setup(test_oom_inside_defer, test_setup),
        cmocka_unit_test_setup(test_oom_registration, test_setup),
        cmocka_unit_test_setup(test_defer_nesting, test_setup),
        cmocka_unit_test_setup(test_waiting_memory_frees_its_block, test_setup),
        cmocka_unit_test_setup(test_flush_stops_at_failure, test_setup),
        cmocka_unit_test_setup(test_failed_flush_not_counted, test_setup),
        cmocka_unit_test_setup(test_flush_settles_large_mixed_batch, test_setup),
        cmocka_unit_test_setup(test_auto_flush_failure_logged, test_setup),
        cmocka_unit_test_setup(test_teardown, test_setup),
        cmocka_unit_test_setup(test_internal_kinds, test_setup),
        cmocka_unit_test_setup(test_queue_arguments, test_setup),
        cmocka_unit_test_setup(test_bounds_from_environment, test_setup),
        cmocka_unit_test_setup(test_flush_waits_for_queued_work, test_setup),
        cmocka_unit_test_setup(test_host_copy_freed_after_its_copy, test_setup),
        cmocka_unit_test_setup(test_teardown_waits_for_destroyed_stream, test_setup),
        cmocka_unit_test_setup(test_defer_end_in_callback_does_not_flush, test_setup),
        cmocka_unit_test_setup(test_host_arrays_kept_for_reuse, test_setup),
        cmocka_unit_test_setup(test_host_keep_bounds, test_setup),
        cmocka_unit_test_setup(test_host_keep_freed_when_memory_is_short, test_setup),
        cmocka_unit_test_setup(test_host_keep_freed_by_oom_retry, test_setup),
        cmocka_unit_test_setup(test_host_keep_freed_when_staging_is_short, test_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, gm_test_restore_allocator);
}
