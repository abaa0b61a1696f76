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
    };

    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
