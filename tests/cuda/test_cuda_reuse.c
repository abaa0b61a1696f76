/*
 * Handle and address reuse (ABA) on the CUDA backend: the real driver hands
 * a destroyed stream's, event's or module's handle value, and a freed
 * allocation's address, out again, so a new object may arrive under a dead
 * one's key. The double's reuse mode (gm_cuda_double_set_reuse_handles) does
 * that deterministically: the next creation gets the newest handle or
 * address given up. Each test cycles create / destroy / create through the
 * backend or the public API, checks that the reuse happened (else the test
 * proves nothing) and that the new object behaves as new: no stale error,
 * no stale record, callbacks, queries and elapsed times right, nothing
 * refused.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_util.h"
#include "kernels_internal.h"
#include "runtime_internal.h"
#include "test_kernels.h"

static int reuse_setup(void **state)
{
    (void)state;
    gm_cuda_double_reset();
    gm_cuda_double_set_reuse_handles(1);
    gm_clear_error();
    return 0;
}

/* A context on the CUDA backend whose queue never flushes by itself. */
static gm_context *open_context(void)
{
    gm_context_options options;
    gm_context *ctx = NULL;

    gm_context_options_default(&options);
    options.max_pending_count = 1000;
    options.max_pending_ratio = 1.0;
    options.max_pending_pinned_bytes = (int64_t)1 << 40;
    assert_ok(gm__context_create_with_ops(CUDA_OPS, &options, &ctx));
    return ctx;
}

static void close_context(gm_context *ctx)
{
    gm_context_destroy(&ctx);
    assert_null(ctx);
    assert_int_equal(gm_cuda_double_live_objects(), 0);
    assert_no_violations();
}

/* ------------------------------------------------------------ the double */

/* The mode itself: each kind comes back to the next creation, newest first. */
static void test_double_hands_handles_back(void **state)
{
    CUdevice device = 0;
    CUcontext context = NULL;
    CUstream s1 = NULL, s2 = NULL, s3 = NULL;
    CUevent e1 = NULL, e2 = NULL;
    CUmodule m1 = NULL, m2 = NULL;
    CUfunction f1 = NULL, f2 = NULL;
    CUdeviceptr d1 = 0, d2 = 0, d3 = 0, d4 = 0;
    void *p1 = NULL, *p2 = NULL;
    static char user[2][8192] __attribute__((aligned(4096)));
    CUdeviceptr r1 = 0, r2 = 0;

    (void)state;
    assert_int_equal(gm_cuda_double_reuse_handles(), 1);
    assert_int_equal(cuInit(0), CUDA_SUCCESS);
    assert_int_equal(cuDeviceGet(&device, 0), CUDA_SUCCESS);
    assert_int_equal(cuDevicePrimaryCtxRetain(&context, device), CUDA_SUCCESS);
    assert_int_equal(cuCtxSetCurrent(context), CUDA_SUCCESS);
    assert_int_equal(cuStreamCreate(&s1, 0), CUDA_SUCCESS);
    assert_int_equal(cuStreamCreate(&s2, 0), CUDA_SUCCESS);
    assert_int_equal(cuStreamDestroy(s1), CUDA_SUCCESS);
    assert_int_equal(cuStreamDestroy(s2), CUDA_SUCCESS);
    assert_int_equal(cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_ptr_equal(s3, s2); /* newest first */
    assert_int_equal(gm_cuda_double_stream_flags(s3), CU_STREAM_NON_BLOCKING);
    assert_int_equal(cuStreamQuery(s3), CUDA_SUCCESS);
    assert_int_equal(cuStreamDestroy(s3), CUDA_SUCCESS);
    assert_int_equal(cuEventCreate(&e1, 0), CUDA_SUCCESS);
    assert_int_equal(cuEventRecord(e1, NULL), CUDA_SUCCESS);
    assert_int_equal(cuEventDestroy(e1), CUDA_SUCCESS);
    assert_int_equal(cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    assert_ptr_equal(e2, e1);
    assert_int_equal(gm_cuda_double_event_flags(e2), CU_EVENT_DISABLE_TIMING);
    assert_int_equal(cuEventDestroy(e2), CUDA_SUCCESS);
    assert_int_equal(cuModuleLoadDataEx(&m1, gm_test_kernels_ptx, 0, NULL, NULL), CUDA_SUCCESS);
    assert_int_equal(cuModuleGetFunction(&f1, m1, "gm_test_scale_f32"), CUDA_SUCCESS);
    assert_int_equal(cuModuleUnload(m1), CUDA_SUCCESS);
    assert_int_equal(cuModuleLoadDataEx(&m2, gm_test_kernels_ptx, 0, NULL, NULL), CUDA_SUCCESS);
    assert_ptr_equal(m2, m1);
    assert_int_equal(cuModuleGetFunction(&f2, m2, "gm_test_scale_f32"), CUDA_SUCCESS);
    assert_ptr_equal(f2, f1);
    assert_int_equal(cuModuleUnload(m2), CUDA_SUCCESS);
    /* memory: the same size comes back, another size does not */
    assert_int_equal(cuMemAlloc(&d1, 256), CUDA_SUCCESS);
    assert_int_equal(cuMemsetD8(d1, 0xab, 256), CUDA_SUCCESS);
    assert_int_equal(cuMemFree(d1), CUDA_SUCCESS);
    assert_int_equal(cuMemAlloc(&d2, 512), CUDA_SUCCESS);
    assert_true(d2 != d1);
    assert_int_equal(cuMemAlloc(&d3, 256), CUDA_SUCCESS);
    assert_true(d3 == d1);
    /* neither the old contents nor zeros (the driver promises none): the double's pattern */
    assert_int_equal(((unsigned char *)(uintptr_t)d3)[255], 0xa5);
    assert_int_equal(cuMemFree(d3), CUDA_SUCCESS);
    assert_int_equal(cuMemFree(d2), CUDA_SUCCESS);
    assert_int_equal(cuMemAllocManaged(&d4, 256, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    assert_true(d4 != d3); /* another kind */
    assert_int_equal(cuMemFree(d4), CUDA_SUCCESS);
    assert_int_equal(cuMemHostAlloc(&p1, 4096, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
    assert_int_equal(cuMemFreeHost(p1), CUDA_SUCCESS);
    assert_int_equal(cuMemHostAlloc(&p2, 4096, 0), CUDA_SUCCESS);
    assert_ptr_equal(p2, p1);
    assert_int_equal(cuMemFreeHost(p2), CUDA_SUCCESS);
    /* a registration's distinct device address comes back to the next one like it */
    assert_int_equal(cuMemHostRegister(user[0], 8192, CU_MEMHOSTREGISTER_DEVICEMAP), CUDA_SUCCESS);
    assert_int_equal(cuMemHostGetDevicePointer(&r1, user[0], 0), CUDA_SUCCESS);
    assert_int_equal(cuMemHostUnregister(user[0]), CUDA_SUCCESS);
    assert_int_equal(cuMemHostRegister(user[1], 8192, CU_MEMHOSTREGISTER_DEVICEMAP), CUDA_SUCCESS);
    assert_int_equal(cuMemHostGetDevicePointer(&r2, user[1], 0), CUDA_SUCCESS);
    assert_true(r2 == r1);
    assert_ptr_equal(gm_cuda_double_host_address(r2), user[1]);
    assert_int_equal(cuMemHostUnregister(user[1]), CUDA_SUCCESS);
    assert_int_equal(cuDevicePrimaryCtxRelease(device), CUDA_SUCCESS);
    assert_int_equal(gm_cuda_double_live_objects(), 0);
    assert_no_violations();
    gm_cuda_double_reset(); /* the environment's default again */
    assert_int_equal(gm_cuda_double_reuse_handles(),
                     getenv("GM_CUDA_DOUBLE_REUSE_HANDLES") != NULL &&
                         strcmp(getenv("GM_CUDA_DOUBLE_REUSE_HANDLES"), "0") != 0);
}

/* --------------------------------------------------------------- backend */

static gm_status failing_work(void *user)
{
    (void)user;
    return GM_ERR_LAUNCH;
}

static void on_callback(gm_status status, void *user)
{
    *(gm_status *)user = status;
}

/*
 * A created stream whose host work failed goes; the next created stream
 * gets its handle: it has no error, its callbacks get GM_OK, and a wrapper of
 * the handle is the new stream's (its errors are the new stream's).
 */
static void test_backend_stream_error_stays_with_dead_stream(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *old = NULL, *fresh = NULL, *wrap = NULL;
    gm_status seen = GM_ERR_INTERNAL;
    void *handle = NULL;

    (void)state;
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &old));
    handle = CUDA_OPS->stream_native(bctx, old);
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, old, failing_work, NULL, NULL));
    assert_ok(CUDA_OPS->stream_destroy(bctx, old)); /* its error is logged */
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &fresh));
    assert_ptr_equal(CUDA_OPS->stream_native(bctx, fresh), handle); /* the mode reused it */
    assert_ok(CUDA_OPS->stream_add_callback(bctx, fresh, on_callback, &seen));
    assert_int_equal(seen, GM_OK);
    assert_ok(CUDA_OPS->stream_query(bctx, fresh));
    assert_ok(CUDA_OPS->stream_synchronize(bctx, fresh));
    /* a wrapper of the handle is the new stream: an error through it is the new stream's */
    assert_ok(CUDA_OPS->stream_wrap(bctx, handle, &wrap));
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, wrap, failing_work, NULL, NULL));
    assert_status(CUDA_OPS->stream_synchronize(bctx, fresh), GM_ERR_LAUNCH);
    assert_ok(CUDA_OPS->stream_synchronize(bctx, wrap));
    CUDA_OPS->stream_unwrap(bctx, wrap);
    assert_ok(CUDA_OPS->stream_destroy(bctx, fresh));
    cuda_test_close(bctx);
}

/*
 * The same with the host work still queued (held) when the stream goes: the
 * handle comes back only once it ran, and the late error is the dead
 * stream's, not the new one's.
 */
static void test_backend_late_error_of_dead_stream(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *old = NULL, *fresh = NULL;
    gm_status seen = GM_ERR_INTERNAL;
    void *handle = NULL;

    (void)state;
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &old));
    handle = CUDA_OPS->stream_native(bctx, old);
    gm_cuda_double_hold_callbacks(1);
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, old, failing_work, NULL, NULL));
    assert_ok(CUDA_OPS->stream_destroy(bctx, old));
    gm_cuda_double_hold_callbacks(0);
    assert_int_equal(gm_cuda_double_run_held_callbacks(CUDA_SUCCESS), 1);
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &fresh));
    assert_ptr_equal(CUDA_OPS->stream_native(bctx, fresh), handle);
    assert_ok(CUDA_OPS->stream_add_callback(bctx, fresh, on_callback, &seen));
    assert_int_equal(seen, GM_OK);
    assert_ok(CUDA_OPS->stream_synchronize(bctx, fresh));
    assert_ok(CUDA_OPS->stream_destroy(bctx, fresh));
    cuda_test_close(bctx);
}

/* On its own thread: a failing host step on the per-thread stream, never synchronized. */
typedef struct per_thread_job {
    gm_backend_ctx *bctx;
    gm_backend_stream *per_thread;
    gm_status enqueued, synced;
    bool fail;
} per_thread_job;

static void *per_thread_run(void *arg)
{
    per_thread_job *job = arg;

    if (job->fail)
        job->enqueued =
            CUDA_OPS->stream_enqueue_host(job->bctx, job->per_thread, failing_work, NULL, NULL);
    else
        job->synced = CUDA_OPS->stream_synchronize(job->bctx, job->per_thread);
    return NULL;
}

/*
 * A thread leaves a failed host step's error on its per-thread stream and
 * exits; the next thread (often the same pthread_t, stack and TLS) gets a
 * clean per-thread stream.
 */
static void test_backend_per_thread_error_of_exited_thread(void **state)
{
    gm_backend_ctx *bctx = NULL;
    per_thread_job job;
    pthread_t thread;

    assert_int_equal(gm_test_restore_allocator(state), 0); /* other threads allocate */
    bctx = cuda_test_open();
    for (int round = 0; round < 3; round++) {
        memset(&job, 0, sizeof(job));
        job.bctx = bctx;
        assert_ok(CUDA_OPS->stream_builtin(bctx, GM_BUILTIN_STREAM_PER_THREAD, &job.per_thread));
        job.fail = true;
        gm_cuda_double_hold_callbacks(round == 1); /* its step runs after it exited */
        assert_int_equal(pthread_create(&thread, NULL, per_thread_run, &job), 0);
        assert_int_equal(pthread_join(thread, NULL), 0);
        gm_cuda_double_hold_callbacks(0);
        assert_int_equal(gm_cuda_double_run_held_callbacks(CUDA_SUCCESS), round == 1);
        assert_ok(job.enqueued);
        job.fail = false;
        job.synced = GM_ERR_INTERNAL;
        assert_int_equal(pthread_create(&thread, NULL, per_thread_run, &job), 0);
        assert_int_equal(pthread_join(thread, NULL), 0);
        assert_ok(job.synced);
    }
    assert_ok(CUDA_OPS->stream_synchronize(bctx, job.per_thread)); /* nor this thread's */
    cuda_test_close(bctx);
    assert_int_equal(gm_test_use_cmocka_allocator(state), 0);
}

/* ------------------------------------------------------------ public API */

static void on_stream_callback(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    *(gm_status *)user = status;
}

/*
 * gm_stream_create / gm_stream_destroy / flush cycles: each new stream has
 * the dead one's handle, is wrappable, runs callbacks with GM_OK, and
 * reports no stale error; the same for a user's CUstream wrapped.
 */
static void test_stream_cycles_through_flushes(void **state)
{
    gm_context *ctx = open_context();
    void *handle = NULL;

    (void)state;
    for (int round = 0; round < 4; round++) {
        gm_stream *stream = NULL, *wrapped = NULL;
        gm_status seen = GM_ERR_INTERNAL;

        assert_ok(gm_stream_create(ctx, round % 2 != 0 ? GM_STREAM_NON_BLOCKING : 0, &stream));
        if (round > 0)
            assert_ptr_equal(gm_stream_native(stream), handle); /* the mode reused it */
        handle = gm_stream_native(stream);
        assert_ok(gm_stream_wrap_external(ctx, handle, &wrapped));
        assert_ok(gm_stream_add_callback(wrapped, on_stream_callback, &seen));
        assert_int_equal(seen, GM_OK);
        assert_ok(gm_stream_query(stream));
        assert_ok(gm_stream_synchronize(stream));
        assert_ok(gm_stream_synchronize(wrapped));
        gm_stream_destroy(&wrapped);
        gm_stream_destroy(&stream);
        if (round % 2 == 0) {
            /* queued: a wrap of the handle is refused until the destroy ran */
            assert_status(gm_stream_wrap_external(ctx, handle, &wrapped), GM_ERR_INVALID_HANDLE);
        }
        assert_ok(gm_deallocations_flush(ctx));
    }
    /* a user's CUstream at the handle of a gm stream that went is wrappable */
    {
        CUstream user = NULL;
        gm_stream *wrapped = NULL;
        gm_status seen = GM_ERR_INTERNAL;

        assert_int_equal(cuStreamCreate(&user, 0), CUDA_SUCCESS);
        assert_ptr_equal(user, handle);
        assert_ok(gm_stream_wrap_external(ctx, user, &wrapped));
        assert_ok(gm_stream_add_callback(wrapped, on_stream_callback, &seen));
        assert_int_equal(seen, GM_OK);
        assert_ok(gm_stream_synchronize(wrapped));
        gm_stream_destroy(&wrapped);
        assert_ok(gm_deallocations_flush(ctx));
        assert_int_equal(cuStreamDestroy(user), CUDA_SUCCESS);
        /* and a gm stream at the handle of the user's that went */
        {
            gm_stream *stream = NULL;

            assert_ok(gm_stream_create(ctx, 0, &stream));
            assert_ptr_equal(gm_stream_native(stream), handle);
            assert_ok(gm_stream_wrap_external(ctx, handle, &wrapped));
            assert_ok(gm_stream_synchronize(wrapped));
            gm_stream_destroy(&wrapped);
            gm_stream_destroy(&stream);
        }
    }
    close_context(ctx);
}

/*
 * Events through destroy / flush / create: the new event at a dead one's
 * handle is unrecorded (elapsed time refused), its own records are timed
 * right, a timing event after a non-timing one times.
 */
static void test_event_cycles(void **state)
{
    gm_context *ctx = open_context();
    gm_stream *stream = NULL;
    gm_event *a = NULL, *b = NULL, *c = NULL;
    void *old = NULL;
    float ms = 0.0f;

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &stream));
    assert_ok(gm_event_create(ctx, true, &a));
    assert_ok(gm_event_create(ctx, false, &b));
    assert_ok(gm_event_record(a, stream));
    assert_ok(gm_event_record(b, stream));
    old = a->bevent;
    gm_event_destroy(&a);
    assert_ok(gm_deallocations_flush(ctx));
    assert_ok(gm_event_create(ctx, true, &c));
    assert_ptr_equal(c->bevent, old);
    assert_ok(gm_event_query(c)); /* never recorded: complete */
    assert_ok(gm_event_create(ctx, true, &a));
    assert_ok(gm_event_record(a, stream));
    assert_true(gm_event_elapsed_ms(a, c, &ms) != GM_OK); /* c was never recorded */
    assert_ok(gm_event_record(c, stream));
    assert_ok(gm_event_synchronize(c));
    assert_ok(gm_event_elapsed_ms(a, c, &ms));
    assert_true(ms > 0.0f);
    old = b->bevent; /* a non-timing event's handle becomes a timing one */
    gm_event_destroy(&b);
    assert_ok(gm_deallocations_flush(ctx));
    assert_ok(gm_event_create(ctx, true, &b));
    assert_ptr_equal(b->bevent, old);
    assert_ok(gm_event_record(b, stream));
    assert_ok(gm_event_elapsed_ms(c, b, &ms));
    assert_true(ms > 0.0f);
    gm_event_destroy(&a);
    gm_event_destroy(&b);
    gm_event_destroy(&c);
    gm_stream_destroy(&stream);
    close_context(ctx);
}

/*
 * A stream and an event destroyed (and flushed) with a callback still queued
 * (held): their handles come back once it ran; the new stream and event
 * start clean (no work left, nothing recorded), and the late callback got
 * its own status.
 */
static void test_handles_back_after_queued_callbacks(void **state)
{
    gm_context *ctx = open_context();
    gm_stream *stream = NULL, *wrapped = NULL;
    gm_event *event = NULL, *start = NULL;
    gm_status late = GM_ERR_INTERNAL, seen = GM_ERR_INTERNAL;
    void *handle = NULL, *old_event = NULL;
    float ms = 0.0f;

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &stream));
    assert_ok(gm_event_create(ctx, true, &event));
    handle = gm_stream_native(stream);
    old_event = event->bevent;
    gm_cuda_double_hold_callbacks(1);
    assert_ok(gm_stream_add_callback(stream, on_stream_callback, &late));
    assert_ok(gm_event_record(event, stream));
    assert_status(gm_event_query(event), GM_ERR_NOT_READY);
    gm_cuda_double_hold_callbacks(0);
    gm_event_destroy(&event);
    gm_stream_destroy(&stream);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(late, GM_ERR_INTERNAL); /* not run yet */
    assert_int_equal(gm_cuda_double_run_held_callbacks(CUDA_SUCCESS), 1);
    assert_int_equal(late, GM_OK);
    assert_ok(gm_stream_create(ctx, 0, &stream));
    assert_ptr_equal(gm_stream_native(stream), handle);
    assert_ok(gm_event_create(ctx, true, &event));
    assert_ptr_equal(event->bevent, old_event);
    assert_ok(gm_stream_query(stream));
    assert_ok(gm_event_query(event));
    assert_ok(gm_stream_wrap_external(ctx, handle, &wrapped));
    assert_ok(gm_stream_add_callback(wrapped, on_stream_callback, &seen));
    assert_int_equal(seen, GM_OK);
    assert_ok(gm_event_create(ctx, true, &start));
    assert_ok(gm_event_record(start, stream));
    assert_ok(gm_event_record(event, wrapped));
    assert_ok(gm_event_synchronize(event));
    assert_ok(gm_event_elapsed_ms(start, event, &ms));
    assert_true(ms > 0.0f);
    assert_ok(gm_stream_synchronize(stream));
    gm_event_destroy(&start);
    gm_event_destroy(&event);
    gm_stream_destroy(&wrapped);
    gm_stream_destroy(&stream);
    close_context(ctx);
}

/* Modules load / unload / load: the new module's kernels launch and write. */
static void test_module_cycles(void **state)
{
    const int64_t shape[1] = {64};
    gm_context *ctx = open_context();
    gm_array *out = NULL;
    uint32_t host[64];
    gm_ndview host_view;
    void *old_module = NULL, *old_kernel = NULL;

    (void)state;
    assert_ok(gm_device_array(ctx, 1, shape, GM_UINT32, GM_ORDER_C, &out));
    assert_ok(gm_ndview_init(host, GM_UINT32, 1, shape, NULL, GM_ORDER_C, &host_view));
    for (uint32_t round = 0; round < 3; round++) {
        gm_module *module = NULL;
        gm_kernel *fill = NULL;
        gm_kernel_info info;
        gm_arg args[3] = {gm_arg_array(out), gm_arg_u32(100 + round), gm_arg_u64(64)};

        assert_ok(gm_module_load_image(ctx, GM_IMAGE_FORMAT_CUDA, gm_test_kernels_ptx,
                                       sizeof(gm_test_kernels_ptx), &module));
        assert_ok(gm_module_get_kernel(module, "gm_test_fill_u32", &fill));
        if (round > 0) {
            assert_ptr_equal(module->bmodule, old_module);
            assert_ptr_equal(fill->bkernel, old_kernel);
        }
        old_module = module->bmodule;
        old_kernel = fill->bkernel;
        assert_ok(gm_kernel_get_info(fill, &info));
        assert_ok(gm_launch(fill, gm_dim3_make(1, 1, 1), gm_dim3_make(64, 1, 1), 0, NULL, 3, args));
        assert_ok(gm_array_copy_to_host(out, &host_view, NULL));
        assert_int_equal(host[0], 100 + round);
        assert_int_equal(host[63], 100 + round);
        gm_module_unload(&module);
        assert_ok(gm_deallocations_flush(ctx));
    }
    gm_array_release(&out);
    close_context(ctx);
}

/*
 * Device, pinned and mapped arrays released through the deallocation queue:
 * the next array of the size gets the address; it is the kind it is, its
 * contents are its own, an IPC handle names it.
 */
static void test_array_address_cycles(void **state)
{
    const int64_t shape[1] = {256};
    const uint32_t seven = 7, nine = 9;
    gm_context *ctx = open_context();
    gm_array *a = NULL;
    gm_memory_kind kind = GM_MEMORY_HOST;
    uint32_t host[256];
    gm_ndview host_view;
    void *old = NULL;

    (void)state;
    assert_ok(gm_ndview_init(host, GM_UINT32, 1, shape, NULL, GM_ORDER_C, &host_view));
    /* device -> device */
    assert_ok(gm_device_array(ctx, 1, shape, GM_UINT32, GM_ORDER_C, &a));
    assert_ok(gm_array_fill(a, &seven, NULL));
    old = gm_array_view(a)->data;
    gm_array_release(&a);
    assert_ok(gm_deallocations_flush(ctx));
    assert_ok(gm_device_array(ctx, 1, shape, GM_UINT32, GM_ORDER_C, &a));
    assert_ptr_equal(gm_array_view(a)->data, old);
    assert_ok(gm_pointer_kind(ctx, old, &kind));
    assert_int_equal(kind, GM_MEMORY_DEVICE);
    assert_ok(gm_array_fill(a, &nine, NULL));
    assert_ok(gm_array_copy_to_host(a, &host_view, NULL));
    assert_int_equal(host[255], 9);
    {
        gm_ipc_handle ipc;

        assert_ok(gm_array_ipc_handle(a, &ipc));
    }
    gm_array_release(&a);
    assert_ok(gm_deallocations_flush(ctx));
    /* write-combined mapped -> pinned at the same host address, then mapped again */
    assert_ok(gm_mapped_array(ctx, 1, shape, GM_UINT32, GM_ORDER_C, GM_HOST_WRITECOMBINED, &a));
    old = gm_array_view(a)->data;
    {
        gm_ndview device_view;
        void *device = NULL;

        assert_ok(gm_array_device_view(a, &device_view));
        device = device_view.data;
        assert_ptr_not_equal(device, old);
        gm_array_release(&a);
        assert_ok(gm_deallocations_flush(ctx));
        assert_ok(gm_pinned_array(ctx, 1, shape, GM_UINT32, GM_ORDER_C, &a));
        assert_ptr_equal(gm_array_view(a)->data, old);
        assert_ok(gm_pointer_kind(ctx, old, &kind));
        assert_int_equal(kind, GM_MEMORY_PINNED);
        assert_ok(gm_pointer_kind(ctx, device, &kind)); /* that address is nobody's now */
        assert_int_equal(kind, GM_MEMORY_HOST);
        gm_array_release(&a);
        assert_ok(gm_deallocations_flush(ctx));
        assert_ok(gm_mapped_array(ctx, 1, shape, GM_UINT32, GM_ORDER_C, GM_HOST_WRITECOMBINED, &a));
        assert_ptr_equal(gm_array_view(a)->data, old);
        assert_ok(gm_array_device_view(a, &device_view));
        assert_ptr_equal(device_view.data, device);
        assert_ok(gm_pointer_kind(ctx, device, &kind));
        assert_int_equal(kind, GM_MEMORY_MAPPED);
        assert_ok(gm_array_fill(a, &seven, NULL));
        assert_int_equal(((uint32_t *)old)[255], 7);
        gm_array_release(&a);
    }
    close_context(ctx);
}

/*
 * gm_map of user memory after another mapping went: the device address
 * comes back; the device view, pointer kinds and copies use the new memory.
 */
static void test_registration_cycles(void **state)
{
    static uint32_t user[2][1024] __attribute__((aligned(4096)));
    const int64_t shape[1] = {1024};
    gm_context *ctx = open_context();
    gm_memory_kind kind = GM_MEMORY_HOST;
    gm_ndview views[2], device_views[2];
    gm_host_scope *scope = NULL;
    gm_array *dev = NULL;
    const uint32_t five = 5;

    (void)state;
    for (int i = 0; i < 2; i++)
        assert_ok(gm_ndview_init(user[i], GM_UINT32, 1, shape, NULL, GM_ORDER_C, &views[i]));
    assert_ok(gm_map(ctx, 1, &views[0], &device_views[0], &scope));
    assert_ok(gm_host_scope_end(&scope));
    assert_ok(gm_map(ctx, 1, &views[1], &device_views[1], &scope));
    assert_ptr_equal(device_views[1].data, device_views[0].data); /* the mode reused it */
    assert_ok(gm_pointer_kind(ctx, device_views[1].data, &kind));
    assert_int_equal(kind, GM_MEMORY_MAPPED);
    assert_ok(gm_pointer_kind(ctx, user[0], &kind));
    assert_int_equal(kind, GM_MEMORY_HOST);
    assert_ok(gm_device_array(ctx, 1, shape, GM_UINT32, GM_ORDER_C, &dev));
    assert_ok(gm_array_fill(dev, &five, NULL));
    assert_ok(gm_copy(ctx, &device_views[1], gm_array_view(dev), NULL));
    assert_int_equal(user[1][1023], 5);
    assert_int_equal(user[0][1023], 0);
    assert_ok(gm_host_scope_end(&scope));
    /* pinned after mapped, at the same user memory */
    assert_ok(gm_pin(ctx, 1, &views[1], &scope));
    assert_ok(gm_pointer_kind(ctx, user[1], &kind));
    assert_int_equal(kind, GM_MEMORY_PINNED);
    assert_ok(gm_host_scope_end(&scope));
    gm_array_release(&dev);
    close_context(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_double_hands_handles_back, reuse_setup),
        cmocka_unit_test_setup(test_backend_stream_error_stays_with_dead_stream, reuse_setup),
        cmocka_unit_test_setup(test_backend_late_error_of_dead_stream, reuse_setup),
        cmocka_unit_test_setup(test_backend_per_thread_error_of_exited_thread, reuse_setup),
        cmocka_unit_test_setup(test_stream_cycles_through_flushes, reuse_setup),
        cmocka_unit_test_setup(test_event_cycles, reuse_setup),
        cmocka_unit_test_setup(test_handles_back_after_queued_callbacks, reuse_setup),
        cmocka_unit_test_setup(test_module_cycles, reuse_setup),
        cmocka_unit_test_setup(test_array_address_cycles, reuse_setup),
        cmocka_unit_test_setup(test_registration_cycles, reuse_setup),
    };

    return cmocka_run_group_tests_name("cuda/reuse", tests, cuda_test_group_setup,
                                       cuda_test_group_teardown);
}
