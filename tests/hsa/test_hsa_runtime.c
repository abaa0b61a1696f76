/*
 * The core runtime on the HSA backend (runtime double underneath):
 * Numba's out-of-memory rule (an allocation that fails for lack of device
 * memory flushes the deallocation queue and retries once) proven with the
 * HSA pool's real OUT_OF_RESOURCES status, a public-API round trip, a
 * flush that waits for the work still using the memory it frees, and one
 * that keeps the caller's last error while that work failed on the device.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/gm_test_producer.h"
#include "hsa_internal.h"
#include "hsa_test_util.h"
#include "runtime_internal.h"

static gm_context *open_context(double ratio, int64_t count)
{
    gm_context_options opts;
    gm_context *ctx = NULL;

    hsa_double_reset(NULL);
    gm_context_options_default(&opts);
    opts.max_pending_ratio = ratio;
    opts.max_pending_count = count;
    assert_ok(gm__context_create_with_ops(&gm__hsa_backend, &opts, &ctx));
    assert_int_equal(gm_context_backend(ctx), GM_BACKEND_HSA);
    return ctx;
}

static void close_context(gm_context *ctx)
{
    gm_context_destroy(&ctx);
    hsa_test_assert_nothing_live();
    hsa_test_assert_no_violations();
}

/* 40 MiB pending on a 64 MiB device, then 40 MiB more: OOM, flush, retry, success. */
static void test_oom_flush_and_retry(void **state)
{
    gm_context *ctx = open_context(1.0, 100);
    int64_t shape[1] = {10 << 20}; /* float32: 40 MiB */
    gm_array *a = NULL, *b = NULL;
    gm_dealloc_stats stats;
    long allocs = 0;

    (void)state;
    assert_ok(gm_device_array(ctx, 1, shape, GM_FLOAT32, GM_ORDER_C, &a));
    gm_array_release(&a);
    assert_ok(gm_deallocations_stats(ctx, &stats));
    assert_int_equal(stats.pending_count, 1);
    assert_int_equal(stats.pending_device_bytes, 40 << 20);
    allocs = hsa_double_calls("hsa_amd_memory_pool_allocate");
    assert_ok(gm_device_array(ctx, 1, shape, GM_FLOAT32, GM_ORDER_C, &b));
    /* the pool refused once (OUT_OF_RESOURCES), the queue flushed, the retry succeeded */
    assert_int_equal(hsa_double_calls("hsa_amd_memory_pool_allocate") - allocs, 2);
    assert_ok(gm_deallocations_stats(ctx, &stats));
    assert_true(stats.flushes >= 1);
    assert_int_equal(stats.pending_count, 0);
    assert_int_equal(stats.freed_count, 1);
    /* inside defer_cleanup there is no retry: the OOM is reported */
    assert_ok(gm_defer_cleanup_begin(ctx));
    gm_array_release(&b);
    assert_status(gm_device_array(ctx, 1, shape, GM_FLOAT32, GM_ORDER_C, &a),
                  GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_message_contains("HSA_STATUS_ERROR_OUT_OF_RESOURCES");
    assert_ok(gm_defer_cleanup_end(ctx));
    close_context(ctx);
}

/* to_device / copy_to_host with a strided host view, on a stream, plus fill. */
static void test_public_round_trip(void **state)
{
    gm_context *ctx = open_context(0.2, 10);
    enum { R = 64, C = 48 };
    float *host = malloc(R * C * sizeof(float)), *back = calloc(R * C, sizeof(float));
    int64_t shape[2] = {R, C / 2}, strides[2] = {C * 4, 8}; /* every other column */
    gm_ndview hv, bv;
    gm_array *dev = NULL;
    gm_stream *s = NULL;
    gm_event *e = NULL;
    float seven = 7.0f;

    (void)state;
    for (int i = 0; i < R * C; i++)
        host[i] = (float)i;
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 2, shape, strides, GM_ORDER_C, &hv));
    assert_ok(gm_ndview_init(back, GM_FLOAT32, 2, shape, strides, GM_ORDER_C, &bv));
    assert_ok(gm_stream_create(ctx, GM_STREAM_DEFAULT, &s));
    assert_ok(gm_event_create(ctx, true, &e));
    assert_ok(gm_to_device(ctx, &hv, s, &dev));
    assert_ok(gm_event_record(e, s));
    assert_ok(gm_array_copy_to_host(dev, &bv, s));
    assert_ok(gm_stream_synchronize(s));
    assert_ok(gm_event_query(e));
    for (int r = 0; r < R; r++) {
        for (int c = 0; c < C; c += 2)
            assert_true(back[r * C + c] == host[r * C + c]);
    }
    assert_ok(gm_array_fill(dev, &seven, NULL));
    assert_ok(gm_array_copy_to_host(dev, &bv, NULL));
    assert_true(back[C + 2] == 7.0f);
    gm_array_release(&dev);
    gm_event_destroy(&e);
    gm_stream_destroy(&s);
    close_context(ctx);
    free(host);
    free(back);
}

/* A flush on its own thread; `done` says when it returned. */
typedef struct flush_job {
    gm_context *ctx;
    gm_status status;
    atomic_bool done;
    bool synchronize; /* gm_context_synchronize instead of a flush */
} flush_job;

static void *run_flush(void *user)
{
    flush_job *job = user;

    job->status =
        job->synchronize ? gm_context_synchronize(job->ctx) : gm_deallocations_flush(job->ctx);
    atomic_store(&job->done, true);
    return NULL;
}

/*
 * With the DMA engine held and a copy out of a device array pending on a
 * stream, run a flush (the array released first: its block must not be
 * freed under the copy) or gm_context_synchronize on another thread: it does
 * not return until the engine runs the copy, and the host then has the
 * array's bytes.
 */
static void check_waits_for_pending_copy(bool synchronize)
{
    gm_context *ctx = open_context(1.0, 100);
    int64_t n = 1 << 16;
    unsigned char *host = calloc((size_t)n, 1);
    struct timespec pause = {0, 50 * 1000 * 1000};
    flush_job job = {NULL, GM_OK, false, synchronize};
    hsa_double_live live;
    uint64_t held_bytes = 0;
    bool returned_early = false;
    gm_array *dev = NULL;
    gm_stream *s = NULL;
    gm_ndview hv;
    pthread_t thread;

    assert_non_null(host);
    job.ctx = ctx;
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &dev));
    assert_ok(gm_array_memset(dev, 0x77, NULL));
    assert_ok(gm_ndview_init(host, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s));
    hsa_double_pause(1);
    assert_ok(gm_array_copy_to_host(dev, &hv, s));
    if (!synchronize)
        gm_array_release(&dev);
    hsa_double_get_live(&live);
    assert_true(live.device_bytes >= (uint64_t)n);
    assert_int_equal(pthread_create(&thread, NULL, run_flush, &job), 0);
    nanosleep(&pause, NULL);
    returned_early = atomic_load(&job.done); /* held: the copy has not run */
    hsa_double_get_live(&live);
    held_bytes = live.device_bytes; /* not freed under the pending copy */
    hsa_double_pause(0);            /* before any assert: a failure must not hang */
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_false(returned_early);
    assert_true(held_bytes >= (uint64_t)n);
    assert_ok(job.status);
    hsa_double_get_live(&live);
    assert_true(synchronize || live.device_bytes < (uint64_t)n); /* the flush freed it */
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(host[i], 0x77);
    assert_ok(gm_stream_query(s));
    gm_array_release(&dev);
    gm_stream_destroy(&s);
    close_context(ctx);
    free(host);
}

/* hsa_amd_memory_pool_free does not wait for queued work (unlike cuMemFree): the queue's
 * flush does. */
static void test_flush_waits_for_pending_copy(void **state)
{
    (void)state;
    check_waits_for_pending_copy(false);
}

/* gm_context_synchronize returns only once the engine has run a copy queued on a stream. */
static void test_context_synchronize_waits(void **state)
{
    (void)state;
    check_waits_for_pending_copy(true);
}

/* No managed memory on HSA: a clear GM_ERR_UNSUPPORTED, nothing allocated or leaked. */
static void test_managed_array_unsupported(void **state)
{
    gm_context *ctx = open_context(1.0, 100);
    int64_t n = 64;
    gm_array *m = NULL;

    (void)state;
    assert_int_equal(gm_managed_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &m), GM_ERR_UNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(gm_last_error_message(),
                           "gm_managed_array: managed_alloc is not supported by this backend"));
    close_context(ctx);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* The last operation pending on a stream (the test's own thread only touches the list). */
static gm__hsa_op *last_op(const gm_stream *stream)
{
    gm__hsa_op *op = stream->bstream->ops_tail;

    assert_non_null(op);
    return op;
}

/*
 * A flush waits for the context's queued work (device_synchronize), which
 * reaps a stream operation that failed on the device and records that
 * failure for the stream: the flush returns GM_OK and the caller's last
 * error (status and message) is what it was before; the stream reports the
 * failure on its next synchronize. The device failure is a copy's
 * completion signal left negative, as the runtime reports a failed copy.
 */
static void test_flush_keeps_last_error(void **state)
{
    gm_context *ctx = open_context(1.0, 100);
    int64_t n = 4096;
    gm_array *a = NULL, *b = NULL;
    gm_stream *s = NULL;
    gm__hsa_op *op = NULL;
    gm_dealloc_stats stats;
    char before[512];
    int spins = 0;

    (void)state;
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &b));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s));
    assert_ok(gm_copy(ctx, gm_array_view(b), gm_array_view(a), s));
    op = last_op(s);
    while (hsa_signal_load_scacquire(op->done->handle) != 0 && spins++ < 10000)
        sleep_ms(1);
    assert_int_equal(hsa_signal_load_scacquire(op->done->handle), 0);
    hsa_signal_store_screlease(op->done->handle, -1); /* the copy failed on the device */
    gm_array_release(&b);
    assert_status(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, NULL), GM_ERR_NULL_POINTER);
    snprintf(before, sizeof(before), "%s", gm_last_error_message());
    assert_ok(gm_deallocations_flush(ctx));
    assert_ok(gm_deallocations_stats(ctx, &stats));
    assert_int_equal(stats.pending_count, 0);
    assert_int_equal(stats.freed_count, 1);
    assert_int_equal(gm_last_error(), GM_ERR_NULL_POINTER);
    assert_string_equal(gm_last_error_message(), before);
    assert_status(gm_stream_synchronize(s), GM_ERR_DRIVER);
    assert_message_contains("failed on the device");
    gm_array_release(&a);
    gm_stream_destroy(&s);
    close_context(ctx);
}

/* Host work that fails, as a failed operation on the device would. */
static gm_status failing_work(void *user)
{
    (void)user;
    return gm__error(GM_ERR_DRIVER, "injected host-work failure");
}

/*
 * A stream whose work failed, destroyed through the queue: the destroy frees
 * the stream and logs the failure instead of returning it (a returned failure
 * would keep the entry queued, and the next flush would destroy the freed
 * stream again).
 */
static void test_failed_stream_destroyed_once(void **state)
{
    gm_context *ctx = open_context(1.0, 100);
    gm_stream *s = NULL;
    gm_dealloc_stats stats;

    (void)state;
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s));
    assert_ok(ctx->ops->stream_enqueue_host(ctx->bctx, s->bstream, failing_work, NULL, NULL));
    gm_stream_destroy(&s);
    assert_ok(gm_deallocations_flush(ctx));
    assert_ok(gm_deallocations_stats(ctx, &stats));
    assert_int_equal(stats.pending_count, 0);
    assert_ok(gm_deallocations_flush(ctx));
    close_context(ctx);
}

/* ------------------------------------------- host registration scopes */

typedef enum scope_kind { SCOPE_PIN = 0, SCOPE_REGISTER = 1, SCOPE_MAP = 2 } scope_kind;

/* A scope ended on its own thread; `done` says when the call returned. */
typedef struct scope_job {
    gm_host_scope *scope;
    scope_kind kind;
    gm_status status;
    atomic_bool done;
} scope_job;

static void *run_scope_end(void *user)
{
    scope_job *job = user;

    job->status =
        job->kind == SCOPE_REGISTER ? gm_deregister(&job->scope) : gm_host_scope_end(&job->scope);
    atomic_store(&job->done, true);
    return NULL;
}

static long live_locks(void)
{
    hsa_double_live live;

    hsa_double_get_live(&live);
    return live.locks;
}

/*
 * With the DMA engine held and a copy using the scope's memory pending on a
 * stream (gm_pin: host to device; gm_register: device to host; gm_map:
 * device to the mapped pages through their device view), end the scope on
 * another thread: the registration is handed to the DMA engine without a
 * reference, so the end waits for the queued work before
 * hsa_amd_memory_unlock (the double records an unlock under a pending copy
 * as a violation), and the data arrive whole.
 */
static void check_scope_end_waits(scope_kind kind)
{
    gm_context *ctx = open_context(1.0, 100);
    int64_t n = 1 << 16;
    unsigned char *host = aligned_alloc(4096, (size_t)n), *back = calloc((size_t)n, 1);
    struct timespec pause = {0, 50 * 1000 * 1000};
    scope_job job = {NULL, kind, GM_OK, false};
    gm_array *dev = NULL;
    gm_stream *s = NULL;
    gm_ndview hv, mapped, bv;
    bool returned_early = false;
    long held = 0;
    pthread_t thread;

    assert_non_null(host);
    assert_non_null(back);
    memset(host, 0x11, (size_t)n);
    assert_ok(gm_ndview_init(host, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_ndview_init(back, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &bv));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &dev));
    assert_ok(gm_array_memset(dev, 0x77, NULL));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s));
    if (kind == SCOPE_PIN)
        assert_ok(gm_pin(ctx, 1, &hv, &job.scope));
    else if (kind == SCOPE_REGISTER)
        assert_ok(gm_register(ctx, 1, &hv, &job.scope));
    else
        assert_ok(gm_map(ctx, 1, &hv, &mapped, &job.scope));
    assert_int_equal(live_locks(), 1);
    hsa_double_pause(1);
    if (kind == SCOPE_PIN)
        assert_ok(gm_array_copy_to_device(dev, &hv, s));
    else if (kind == SCOPE_REGISTER)
        assert_ok(gm_array_copy_to_host(dev, &hv, s));
    else
        assert_ok(gm_copy(ctx, &mapped, gm_array_view(dev), s));
    assert_int_equal(live_locks(), 1); /* registered memory is used as it is: no lock of its own */
    assert_int_equal(pthread_create(&thread, NULL, run_scope_end, &job), 0);
    nanosleep(&pause, NULL);
    returned_early = atomic_load(&job.done); /* held: the copy has not run */
    held = live_locks();                     /* still locked under the pending copy */
    hsa_double_pause(0);                     /* before any assert: a failure must not hang */
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_false(returned_early);
    assert_int_equal(held, 1);
    assert_ok(job.status);
    assert_null(job.scope);
    assert_int_equal(live_locks(), 0);
    hsa_test_assert_no_violations();
    assert_ok(gm_stream_query(s)); /* the end waited for the stream's work */
    if (kind == SCOPE_PIN) {
        assert_ok(gm_array_copy_to_host(dev, &bv, NULL));
        for (int64_t i = 0; i < n; i++)
            assert_int_equal(back[i], 0x11);
    } else {
        for (int64_t i = 0; i < n; i++)
            assert_int_equal(host[i], 0x77);
    }
    gm_array_release(&dev);
    gm_stream_destroy(&s);
    close_context(ctx);
    free(host);
    free(back);
}

static void test_pin_end_waits_for_pending_copy(void **state)
{
    (void)state;
    check_scope_end_waits(SCOPE_PIN);
}

static void test_deregister_waits_for_pending_copy(void **state)
{
    (void)state;
    check_scope_end_waits(SCOPE_REGISTER);
}

static void test_map_end_waits_for_pending_copy(void **state)
{
    (void)state;
    check_scope_end_waits(SCOPE_MAP);
}

/*
 * Memory an open scope registered cannot be registered again, in whole or in
 * part, by this context or another (GM_ERR_STATE, as the simulator and CUDA
 * answer; hsa_amd_memory_lock alone would count the second lock and keep
 * the memory locked past the first scope's end). Ended scopes leave nothing
 * behind: the same memory is pinned again at once (numba#3508).
 */
static void test_register_twice_refused(void **state)
{
    gm_context *ctx = open_context(1.0, 100), *other = NULL;
    int64_t n = 3 * 4096, part = 2000;
    unsigned char *host = aligned_alloc(4096, (size_t)n);
    gm_host_scope *scope = NULL, *again = NULL;
    gm_ndview hv, sub;

    (void)state;
    assert_non_null(host);
    assert_ok(gm_ndview_init(host, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_ndview_init(host + 4000, GM_UINT8, 1, &part, NULL, GM_ORDER_C, &sub));
    assert_ok(gm_pin(ctx, 1, &hv, &scope));
    assert_status(gm_pin(ctx, 1, &hv, &again), GM_ERR_STATE);
    assert_message_contains("overlaps memory already registered by this context");
    assert_null(again);
    assert_status(gm_register(ctx, 1, &sub, &again), GM_ERR_STATE);
    assert_status(gm_map(ctx, 1, &sub, NULL, &again), GM_ERR_STATE);
    assert_null(again);
    assert_int_equal(hsa_double_calls("hsa_amd_memory_lock"), 1);
    assert_int_equal(live_locks(), 1);
    assert_ok(gm_host_scope_end(&scope));
    assert_int_equal(live_locks(), 0);
    for (int round = 0; round < 2; round++) { /* sequential scopes are fine */
        assert_ok(gm_pin(ctx, 1, &hv, &scope));
        assert_ok(gm_host_scope_end(&scope));
    }
    /* page-locking is the process's: another context is refused too */
    assert_ok(gm__context_create_with_ops(&gm__hsa_backend, NULL, &other));
    assert_ok(gm_register(ctx, 1, &sub, &scope));
    assert_status(gm_pin(other, 1, &hv, &again), GM_ERR_STATE);
    assert_message_contains("overlaps memory another context registered");
    assert_ok(gm_deregister(&scope));
    assert_ok(gm_pin(other, 1, &hv, &again));
    assert_ok(gm_host_scope_end(&again));
    gm_context_destroy(&other);
    assert_int_equal(live_locks(), 0);
    close_context(ctx);
    free(host);
}

/*
 * The backend's own lock of pageable memory for a pending copy is no user
 * registration: registering that memory meanwhile succeeds (a second
 * registration at the address, as src/hsa/README.md says), the copy's lock
 * goes when the copy is reaped, the user's at the scope's end.
 */
static void test_register_over_pageable_copy(void **state)
{
    gm_context *ctx = open_context(1.0, 100);
    int64_t n = 1 << 16;
    unsigned char *host = aligned_alloc(4096, (size_t)n);
    gm_host_scope *scope = NULL;
    gm_array *dev = NULL;
    gm_stream *s = NULL;
    gm_ndview hv;
    long copy_locked = 0, both_locked = 0;
    gm_status registered = GM_OK;

    (void)state;
    assert_non_null(host);
    memset(host, 0, (size_t)n);
    assert_ok(gm_ndview_init(host, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &dev));
    assert_ok(gm_array_memset(dev, 0x77, NULL));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s));
    hsa_double_pause(1);
    assert_ok(gm_array_copy_to_host(dev, &hv, s)); /* pageable: locked for the copy */
    copy_locked = live_locks();
    registered = gm_register(ctx, 1, &hv, &scope);
    both_locked = live_locks();
    hsa_double_pause(0);
    assert_int_equal(copy_locked, 1);
    assert_ok(registered);
    assert_int_equal(both_locked, 2);
    assert_ok(gm_stream_synchronize(s));
    assert_int_equal(live_locks(), 1); /* the copy's lock went with the copy */
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(host[i], 0x77);
    assert_ok(gm_deregister(&scope));
    assert_int_equal(live_locks(), 0);
    gm_array_release(&dev);
    gm_stream_destroy(&s);
    close_context(ctx);
    free(host);
}

/* Resume the paused DMA engine after 50 ms (the main thread is blocked by then or not). */
static void *unpause_later(void *arg)
{
    (void)arg;
    sleep_ms(50);
    hsa_double_pause(0);
    return NULL;
}

/*
 * Registering half of the pageable memory a pending copy locked whole: a
 * second registration at that address, of another size, could never be
 * unlocked (libhsakmt finds the one to unlock by address alone and finds
 * none of two; ROCr's hsa_amd_memory_unlock still returns success, and the
 * double, like it, unlocks nothing and records it). So gm_register waits
 * until the copy is done and its lock gone, then locks its own range.
 */
static void test_register_part_of_pageable_copy(void **state)
{
    gm_context *ctx = open_context(1.0, 100);
    int64_t n = 1 << 16, half = 1 << 15;
    unsigned char *host = aligned_alloc(4096, (size_t)n);
    gm_host_scope *scope = NULL;
    gm_array *dev = NULL;
    gm_stream *s = NULL;
    gm_ndview hv, part;
    pthread_t thread;
    long copy_locked = 0, after_register = 0;

    (void)state;
    assert_non_null(host);
    memset(host, 0, (size_t)n);
    assert_ok(gm_ndview_init(host, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_ndview_init(host, GM_UINT8, 1, &half, NULL, GM_ORDER_C, &part));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &dev));
    assert_ok(gm_array_memset(dev, 0x5a, NULL));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s));
    hsa_double_pause(1);
    assert_ok(gm_array_copy_to_host(dev, &hv, s)); /* pageable: locked whole for the copy */
    copy_locked = live_locks();
    assert_int_equal(pthread_create(&thread, NULL, unpause_later, NULL), 0);
    assert_ok(gm_register(ctx, 1, &part, &scope)); /* waits for the copy */
    after_register = live_locks();
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_int_equal(copy_locked, 1);
    assert_int_equal(after_register, 1); /* the copy's lock went first */
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(host[i], 0x5a);
    assert_ok(gm_stream_synchronize(s));
    assert_ok(gm_deregister(&scope));
    assert_int_equal(live_locks(), 0);
    gm_array_release(&dev);
    gm_stream_destroy(&s);
    close_context(ctx);
    free(host);
}

/*
 * Copies that start where gm_register registered half of a buffer and run
 * past it (the whole buffer), both ways, on a stream and synchronously: a
 * lock of the copy's own there would be a second registration of another
 * size at one address, which libhsakmt could never unlock (the double
 * records it), so the copies are staged; the registration stays the only
 * lock and the data arrive.
 */
static void test_copy_past_registration(void **state)
{
    gm_context *ctx = open_context(1.0, 100);
    int64_t n = 1 << 16, half = 1 << 15;
    unsigned char *host = aligned_alloc(4096, (size_t)n), *back = aligned_alloc(4096, (size_t)n);
    gm_host_scope *scope = NULL, *back_scope = NULL;
    gm_array *dev = NULL;
    gm_stream *s = NULL;
    gm_ndview hv, bv, part, back_part;
    long during = 0;

    (void)state;
    assert_non_null(host);
    assert_non_null(back);
    for (int64_t i = 0; i < n; i++)
        host[i] = (unsigned char)(i * 7 + 1);
    memset(back, 0, (size_t)n);
    assert_ok(gm_ndview_init(host, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_ndview_init(back, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &bv));
    assert_ok(gm_ndview_init(host, GM_UINT8, 1, &half, NULL, GM_ORDER_C, &part));
    assert_ok(gm_ndview_init(back, GM_UINT8, 1, &half, NULL, GM_ORDER_C, &back_part));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &dev));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s));
    assert_ok(gm_register(ctx, 1, &part, &scope));
    assert_ok(gm_register(ctx, 1, &back_part, &back_scope));
    assert_ok(gm_array_copy_to_device(dev, &hv, s));
    assert_ok(gm_array_copy_to_host(dev, &bv, s));
    during = live_locks();
    assert_ok(gm_stream_synchronize(s));
    assert_int_equal(during, 2); /* the two registrations only */
    assert_memory_equal(back, host, (size_t)n);
    hsa_test_assert_no_violations();

    memset(back, 0, (size_t)n);
    assert_ok(gm_array_memset(dev, 0, NULL));
    assert_ok(gm_array_copy_to_device(dev, &hv, NULL));
    assert_ok(gm_array_copy_to_host(dev, &bv, NULL));
    assert_memory_equal(back, host, (size_t)n);
    assert_int_equal(live_locks(), 2);
    hsa_test_assert_no_violations();
    assert_ok(gm_deregister(&scope));
    assert_ok(gm_deregister(&back_scope));
    assert_int_equal(live_locks(), 0);
    gm_array_release(&dev);
    gm_stream_destroy(&s);
    close_context(ctx);
    free(host);
    free(back);
}

/*
 * gm_copy to and from a device view running 512 bytes past a 1 KiB device
 * array, synchronously and on a stream: GM_ERR_INVALID_ARG naming the range
 * and the allocation, as on the simulator and CUDA; nothing is written.
 */
static void test_copy_past_allocation_refused(void **state)
{
    gm_context *ctx = open_context(1.0, 100);
    int64_t n = 256;
    float host[256], back[256];
    gm_array *dev = NULL;
    gm_stream *s = NULL;
    gm_ndview hv, bv, dv;
    long copies = 0;

    (void)state;
    for (int i = 0; i < 256; i++)
        host[i] = (float)i;
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_ndview_init(back, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &bv));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &dev));
    assert_ok(gm_array_memset(dev, 0, NULL));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s));
    dv = *gm_array_view(dev);
    dv.data = (char *)dv.data + 512;
    copies = hsa_double_copy_count();
    assert_status(gm_copy(ctx, &dv, &hv, NULL), GM_ERR_INVALID_ARG);
    assert_message_contains("runs past the end of the device allocation");
    assert_status(gm_copy(ctx, &dv, &hv, s), GM_ERR_INVALID_ARG);
    assert_status(gm_copy(ctx, &bv, &dv, s), GM_ERR_INVALID_ARG);
    assert_message_contains("source range");
    assert_ok(gm_stream_synchronize(s));
    assert_int_equal(hsa_double_copy_count(), copies); /* nothing reached the DMA engine */
    assert_ok(gm_array_copy_to_host(dev, &bv, NULL));
    for (int i = 0; i < 256; i++)
        assert_true(back[i] == 0.0f);
    gm_array_release(&dev);
    gm_stream_destroy(&s);
    close_context(ctx);
}

/*
 * A staged fill on a stream whose device step issued a DMA piece and then
 * failed, and whose stream-ordered release could not be queued either: the
 * job (the fill's host image) stays until the issued piece has run. It was
 * freed at once, and the piece read freed memory (ASan; here also the row it
 * wrote, from a freed and overwritten image).
 */
static void test_failed_staged_fill_keeps_its_job(void **state)
{
    const int64_t shape[2] = {8, 16}, strides[2] = {256, 4};
    const float value = 1.5f;
    bool found = false;

    (void)state;
    for (long k = 1; k <= 80 && !found; k++) {
        hsa_double_config cfg;
        gm_context_options opts;
        gm_context *ctx = NULL;
        gm_stream *st = NULL;
        gm_array *a = NULL, *warm = NULL;
        gm_event *ev = NULL;
        int64_t n = 4096;
        float back[8][16];
        long copies = 0;
        gm_status status = GM_OK;

        hsa_double_config_default(&cfg);
        cfg.no_sdma = 1;            /* rows go as separate DMA pieces */
        cfg.copy_delay_us = 100000; /* each runs 100 ms after it is issued */
        hsa_double_reset(&cfg);
        gm_context_options_default(&opts);
        assert_ok(gm__context_create_with_ops(&gm__hsa_backend, &opts, &ctx));
        assert_ok(gm_stream_create(ctx, 0, &st));
        assert_ok(gm_device_array_strided(ctx, 2, shape, strides, GM_FLOAT32, &a));
        /* the stream gets its queue and the signal cache spares: a wait on it then makes
         * no runtime call that the failure below could refuse */
        assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &warm));
        assert_ok(gm_event_create(ctx, false, &ev));
        for (int r = 0; r < 4; r++) {
            assert_ok(gm_array_memset(warm, r, st));
            assert_ok(gm_array_memset(warm, r, st));
            assert_ok(gm_event_record(ev, st));
        }
        assert_ok(gm_stream_synchronize(st));
        gm_event_destroy(&ev);
        gm_array_release(&warm);
        assert_ok(gm_deallocations_flush(ctx));
        assert_ok(gm_context_synchronize(ctx));
        copies = hsa_double_calls("hsa_amd_memory_async_copy");
        hsa_double_fail(NULL, k, HSA_STATUS_ERROR_OUT_OF_RESOURCES, 1); /* call k and later */
        status = gm_array_fill(a, &value, st);
        hsa_double_fail_clear();
        copies = hsa_double_calls("hsa_amd_memory_async_copy") - copies;
        found = status != GM_OK && copies >= 2; /* the first piece was issued */
        (void)gm_stream_synchronize(st);
        if (found) { /* the piece issued first wrote row 0 from the image */
            gm_ndview hv;

            assert_ok(gm_ndview_init(back, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &hv));
            assert_ok(gm_array_copy_to_host(a, &hv, NULL));
            for (int i = 0; i < 16; i++)
                assert_true(back[0][i] == value);
        }
        gm_array_release(&a);
        gm_stream_destroy(&st);
        gm_context_destroy(&ctx);
    }
    assert_true(found);
    /* no hsa_test_assert_nothing_live: the injected failure also refuses unlocks */
}

static void never_runs(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    *(int *)user += 1;
}

/*
 * A callback queued behind a copy that can never start (it waits for one
 * that failed on the DMA engine, and the context fails): it never runs, and
 * gm_context_destroy does not wait for it (it waited 60 s for it).
 */
static void test_destroy_with_callback_that_never_runs(void **state)
{
    gm_context *ctx = open_context(0.2, 10);
    gm_stream *st = NULL;
    gm_array *a = NULL;
    int64_t n = 1024;
    float host[1024] = {0};
    gm_ndview hv;
    struct timespec t0, t1;
    int ran = 0;

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &a));
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &hv));
    hsa_double_fail_copies(1, NULL, -1);
    hsa_double_pause(1); /* all queued before the first fails: the rest depend on it */
    (void)gm_array_copy_to_device(a, &hv, st);
    (void)gm_array_copy_to_device(a, &hv, st);
    assert_ok(gm_stream_add_callback(st, never_runs, &ran));
    hsa_double_pause(0);
    assert_int_not_equal(gm_stream_synchronize(st), GM_OK); /* the copy's, or the context's */
    gm_array_release(&a);
    gm_stream_destroy(&st);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    gm_context_destroy(&ctx);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_int_equal(ran, 0);
    assert_true(t1.tv_sec - t0.tv_sec < 20); /* a hang check, not a speed test */
}

/* The same through a wrapper of the stream, the wrapper and the stream destroyed first. */
static void test_destroy_with_wrapped_callback_that_never_runs(void **state)
{
    gm_context *ctx = open_context(0.2, 10);
    gm_stream *st = NULL;
    gm_stream *ws = NULL;
    gm_array *a = NULL;
    int64_t n = 1024;
    float host[1024] = {0};
    gm_ndview hv;
    int ran = 0;

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_stream_wrap_external(ctx, gm_stream_native(st), &ws));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &a));
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &hv));
    hsa_double_fail_copies(1, NULL, -1);
    hsa_double_pause(1);
    (void)gm_array_copy_to_device(a, &hv, st);
    (void)gm_array_copy_to_device(a, &hv, st);
    assert_ok(gm_stream_add_callback(ws, never_runs, &ran));
    hsa_double_pause(0);
    assert_int_not_equal(gm_stream_synchronize(st), GM_OK);
    gm_array_release(&a);
    gm_stream_destroy(&ws);
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
    assert_int_equal(ran, 0);
}

static _Atomic int chain_ran, chain_added;
static _Atomic gm_status chained_status = GM_ERR_INTERNAL;

static void chain_leaf(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    (void)user;
    atomic_fetch_add(&chain_ran, 1);
}

/* Gives the main thread time to fill the queue, then queues one more through its stream. */
static void chain_more(gm_stream *stream, gm_status status, void *user)
{
    gm_status st = GM_OK;

    (void)status;
    (void)user;
    atomic_fetch_add(&chain_ran, 1);
    sleep_ms(300);
    st = gm_stream_add_callback(stream, chain_leaf, NULL);
    if (st == GM_OK)
        atomic_fetch_add(&chain_added, 1);
    atomic_store(&chained_status, st);
}

/*
 * A callback that queues another (each needs barrier packets on the legacy
 * stream, as a blocking stream has work) while the main thread has filled
 * the stream's AQL queue: it used to wait for room that only its own return
 * could make, and every thread hung. Now it gets GM_ERR_STATE at once (or
 * room), the main thread's work goes on, and every callback queued runs.
 */
static void test_callback_does_not_wait_for_queue_room(void **state)
{
    gm_context *ctx = open_context(0.2, 10);
    gm_stream *s = NULL, *w = NULL;
    struct timespec t0, t1;

    (void)state;
    atomic_store(&chain_ran, 0);
    atomic_store(&chain_added, 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_ok(gm_stream_create(ctx, 0, &s));
    assert_ok(gm_stream_wrap_external(ctx, gm_stream_native(gm_legacy_default_stream(ctx)), &w));
    assert_ok(gm_stream_add_callback(s, chain_leaf, NULL)); /* a blocking stream with work */
    atomic_fetch_add(&chain_added, 1);
    assert_ok(gm_stream_add_callback(w, chain_more, NULL));
    atomic_fetch_add(&chain_added, 1);
    for (int i = 0; i < 100; i++) { /* 64 packets: the queue fills behind chain_more */
        assert_ok(gm_stream_add_callback(s, chain_leaf, NULL));
        atomic_fetch_add(&chain_added, 1);
        assert_ok(gm_stream_add_callback(w, chain_leaf, NULL));
        atomic_fetch_add(&chain_added, 1);
    }
    assert_ok(gm_stream_synchronize(w));
    assert_ok(gm_stream_synchronize(s));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_true(t1.tv_sec - t0.tv_sec < 20); /* a hang check, not a speed test */
    assert_true(atomic_load(&chained_status) == GM_OK ||
                atomic_load(&chained_status) == GM_ERR_STATE);
    assert_int_equal(atomic_load(&chain_ran), atomic_load(&chain_added));
    gm_stream_destroy(&w);
    gm_stream_destroy(&s);
    close_context(ctx);
}

/* gm_test_producer.h's scenario on the HSA backend. */
static void test_wrapper_producer_does_not_starve(void **state)
{
    gm_context *ctx = NULL;

    (void)state;
    assert_int_equal(gm_test_restore_allocator(NULL), 0); /* threads allocate: not cmocka's */
    ctx = open_context(0.2, 10);
    gm_test_wrapper_producer(ctx);
    close_context(ctx);
    assert_int_equal(gm_test_use_cmocka_allocator(NULL), 0);
}

/* gm_test_producer.h's destroy scenario on the HSA backend. */
static void test_destroy_waits_for_callbacks_own_work(void **state)
{
    gm_context *ctx = NULL;

    (void)state;
    assert_int_equal(gm_test_restore_allocator(NULL), 0); /* threads allocate: not cmocka's */
    ctx = open_context(0.2, 10);
    gm_test_destroy_waits_for_callbacks(ctx);
    close_context(ctx);
    assert_int_equal(gm_test_use_cmocka_allocator(NULL), 0);
}

/* A mapped scope's memory is MAPPED by its host address and by its device address alike. */
static void test_map_scope_kinds(void **state)
{
    gm_context *ctx = open_context(0.2, 10);
    float *x = aligned_alloc(4096, 4096);
    int64_t n = 1024;
    gm_ndview hv, dv;
    gm_host_scope *scope = NULL;
    gm_memory_kind kh = GM_MEMORY_HOST, kd = GM_MEMORY_HOST;

    (void)state;
    assert_ok(gm_ndview_init(x, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_map(ctx, 1, &hv, &dv, &scope));
    assert_ptr_not_equal(dv.data, (void *)x); /* the double's agent address */
    assert_ok(gm_pointer_kind(ctx, x, &kh));
    assert_ok(gm_pointer_kind(ctx, dv.data, &kd));
    assert_int_equal(kh, GM_MEMORY_MAPPED);
    assert_int_equal(kd, GM_MEMORY_MAPPED);
    assert_ok(gm_host_scope_end(&scope));
    close_context(ctx);
    free(x);
}

static _Atomic int frontier_gate1, frontier_gate2, frontier_synced;
static gm_stream *frontier_s;

static void frontier_block(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    while (!atomic_load((_Atomic int *)user))
        sleep_ms(1);
}

static void frontier_nothing(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    (void)user;
}

static void *frontier_syncer(void *arg)
{
    (void)arg;
    if (gm_stream_synchronize(frontier_s) == GM_OK)
        atomic_store(&frontier_synced, 1);
    return NULL;
}

/*
 * A synchronize of a stream made to wait for two events waits for both, even
 * when another thread queues later work on the stream meanwhile (which takes
 * the events over as its dependencies): it returned once the first was done.
 */
static void test_synchronize_waits_for_waited_events(void **state)
{
    gm_context *ctx = NULL;
    gm_stream *t1 = NULL, *t2 = NULL;
    gm_event *e1 = NULL, *e2 = NULL;
    pthread_t syncer;

    (void)state;
    assert_int_equal(gm_test_restore_allocator(NULL), 0); /* threads allocate: not cmocka's */
    ctx = open_context(0.2, 10);
    atomic_store(&frontier_gate1, 0);
    atomic_store(&frontier_gate2, 0);
    atomic_store(&frontier_synced, 0);
    assert_ok(gm_stream_create(ctx, 0, &frontier_s));
    assert_ok(gm_stream_create(ctx, 0, &t1));
    assert_ok(gm_stream_create(ctx, 0, &t2));
    assert_ok(gm_event_create(ctx, false, &e1));
    assert_ok(gm_event_create(ctx, false, &e2));
    assert_ok(gm_stream_add_callback(t1, frontier_block, (void *)&frontier_gate1));
    assert_ok(gm_event_record(e1, t1));
    assert_ok(gm_stream_wait_event(t2, e1)); /* one handler thread: t2's gate runs after t1's */
    assert_ok(gm_stream_add_callback(t2, frontier_block, (void *)&frontier_gate2));
    assert_ok(gm_event_record(e2, t2));
    assert_ok(gm_stream_wait_event(frontier_s, e1));
    assert_ok(gm_stream_wait_event(frontier_s, e2));
    assert_int_equal(pthread_create(&syncer, NULL, frontier_syncer, NULL), 0);
    sleep_ms(100); /* the synchronize waits for e1 */
    assert_ok(gm_stream_add_callback(frontier_s, frontier_nothing, NULL)); /* later work */
    atomic_store(&frontier_gate1, 1);
    sleep_ms(300);
    assert_int_equal(atomic_load(&frontier_synced), 0); /* e2 is still pending */
    assert_status(gm_event_query(e2), GM_ERR_NOT_READY);
    atomic_store(&frontier_gate2, 1);
    assert_int_equal(pthread_join(syncer, NULL), 0);
    assert_int_equal(atomic_load(&frontier_synced), 1);
    gm_event_destroy(&e1);
    gm_event_destroy(&e2);
    gm_stream_destroy(&frontier_s);
    gm_stream_destroy(&t1);
    gm_stream_destroy(&t2);
    close_context(ctx);
    assert_int_equal(gm_test_use_cmocka_allocator(NULL), 0);
}

/* A callback of the reuse test: the copies completed when it ran. */
static void count_copies(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    *(long *)user = status == GM_OK ? hsa_double_copy_count() : -1;
}

/* The index of the newest completed copy whose destination is dst (its device address). */
static long copy_index(const void *dst)
{
    hsa_double_copy c;

    for (long i = hsa_double_copy_count() - 1; i >= 0; i--) {
        if (hsa_double_get_copy(i, &c) && (c.dst == dst || c.host_dst == dst))
            return i;
    }
    fail_msg("no copy to %p recorded", dst);
    return -1;
}

/*
 * The double hands destroyed signals', queues' and pool blocks' handles out
 * again (newest first), as ROCr does. Events and streams are made, completed
 * and destroyed round after round while 100 copies at a time overflow the
 * backend's signal cache (so it destroys signals and creates new ones at the
 * same handles): each round's copies are held in the paused DMA engine
 * (newest ready first: a dependency lost to a reused handle reorders them)
 * and chained across three streams by events (waited for twice), a callback
 * and the legacy stream; every result and order holds.
 */
static void test_event_chains_over_reused_handles(void **state)
{
    enum { N = 4096, ROUNDS = 12, CHURN = 100 };
    gm_context *ctx = open_context(0.2, 10);
    int64_t n = N, one = 1;
    float *in = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
    float tiny[CHURN];
    gm_array *a = NULL, *b = NULL, *c = NULL, *t = NULL;
    gm_ndview iv, ov, tv;
    hsa_double_reuse reuse;

    (void)state;
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &a));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &b));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &c));
    assert_ok(gm_device_array(ctx, 1, &one, GM_FLOAT32, GM_ORDER_C, &t));
    assert_ok(gm_ndview_init(in, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &iv));
    assert_ok(gm_ndview_init(out, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &ov));
    for (int r = 0; r < ROUNDS; r++) {
        gm_stream *s1 = NULL, *s2 = NULL, *s3 = NULL, *churn = NULL;
        gm_event *e1 = NULL, *e2 = NULL;
        hsa_double_reuse before;
        long at_callback = 0;

        /* CHURN signals live at once, then released: the cache keeps 64 and the rest are
         * destroyed; then 70 held copies empty the cache, so the chain below gets new
         * signals at the handles just destroyed */
        assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &churn));
        for (int phase = 0; phase < 2; phase++) {
            hsa_double_pause(1);
            for (int i = 0; i < (phase == 0 ? CHURN : 70); i++) {
                assert_ok(gm_ndview_init(&tiny[i], GM_FLOAT32, 1, &one, NULL, GM_ORDER_C, &tv));
                assert_ok(gm_array_copy_to_device(t, &tv, churn));
            }
            if (phase == 0) {
                hsa_double_pause(0);
                assert_ok(gm_stream_synchronize(churn));
            }
        }
        hsa_double_get_reuse(&before);
        for (int i = 0; i < N; i++)
            in[i] = (float)(r * N + i);
        memset(out, 0, N * sizeof(float));
        assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s1));
        assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s2));
        assert_ok(gm_stream_create(ctx, GM_STREAM_DEFAULT, &s3));
        assert_ok(gm_event_create(ctx, r % 2 == 0, &e1));
        assert_ok(gm_event_create(ctx, false, &e2));
        assert_ok(gm_array_copy_to_device(a, &iv, s1));
        assert_ok(gm_event_record(e1, s1));
        assert_ok(gm_stream_wait_event(s2, e1));
        assert_ok(gm_stream_wait_event(s2, e1)); /* a second wait adds nothing */
        assert_ok(gm_copy(ctx, gm_array_view(b), gm_array_view(a), s2));
        assert_ok(gm_stream_add_callback(s2, count_copies, &at_callback));
        assert_ok(gm_copy(ctx, gm_array_view(c), gm_array_view(b), s2));
        assert_ok(gm_event_record(e2, s2));
        assert_ok(gm_stream_wait_event(s3, e2));
        assert_ok(gm_stream_wait_event(s3, e1));
        assert_ok(gm_array_copy_to_host(c, &ov, s3));
        assert_int_equal(gm_event_query(e2), GM_ERR_NOT_READY);
        hsa_double_get_reuse(&reuse);
        assert_true(reuse.signals - before.signals >= 6); /* the chain's are reused handles */
        hsa_double_pause(0);
        assert_ok(gm_stream_synchronize(s3));
        assert_ok(gm_stream_synchronize(churn));
        assert_memory_equal(in, out, N * sizeof(float));
        assert_ok(gm_event_query(e1));
        assert_ok(gm_event_query(e2));
        assert_true(copy_index(gm_array_view(a)->data) < copy_index(gm_array_view(b)->data));
        assert_true(copy_index(gm_array_view(b)->data) < at_callback);
        assert_true(at_callback <= copy_index(gm_array_view(c)->data));
        assert_true(copy_index(gm_array_view(c)->data) < copy_index(out));
        gm_event_destroy(&e1);
        gm_event_destroy(&e2);
        gm_stream_destroy(&s1);
        gm_stream_destroy(&s2);
        gm_stream_destroy(&s3);
        gm_stream_destroy(&churn);
    }
    assert_ok(gm_context_synchronize(ctx));
    gm_array_release(&a);
    gm_array_release(&b);
    gm_array_release(&c);
    gm_array_release(&t);
    close_context(ctx);
    free(in);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oom_flush_and_retry),
        cmocka_unit_test(test_public_round_trip),
        cmocka_unit_test(test_flush_waits_for_pending_copy),
        cmocka_unit_test(test_context_synchronize_waits),
        cmocka_unit_test(test_managed_array_unsupported),
        cmocka_unit_test(test_failed_stream_destroyed_once),
        cmocka_unit_test(test_flush_keeps_last_error),
        cmocka_unit_test(test_pin_end_waits_for_pending_copy),
        cmocka_unit_test(test_deregister_waits_for_pending_copy),
        cmocka_unit_test(test_map_end_waits_for_pending_copy),
        cmocka_unit_test(test_register_twice_refused),
        cmocka_unit_test(test_register_over_pageable_copy),
        cmocka_unit_test(test_register_part_of_pageable_copy),
        cmocka_unit_test(test_copy_past_registration),
        cmocka_unit_test(test_copy_past_allocation_refused),
        cmocka_unit_test(test_failed_staged_fill_keeps_its_job),
        cmocka_unit_test(test_destroy_with_callback_that_never_runs),
        cmocka_unit_test(test_destroy_with_wrapped_callback_that_never_runs),
        cmocka_unit_test(test_callback_does_not_wait_for_queue_room),
        cmocka_unit_test(test_wrapper_producer_does_not_starve),
        cmocka_unit_test(test_destroy_waits_for_callbacks_own_work),
        cmocka_unit_test(test_map_scope_kinds),
        cmocka_unit_test(test_synchronize_waits_for_waited_events),
        cmocka_unit_test(test_event_chains_over_reused_handles),
    };

    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
