/*
 * The core runtime on the CUDA backend, over the driver test double
 * (gm__context_create_with_ops with gm__cuda_backend): Numba's
 * out-of-memory rule (a device or pinned allocation that fails with
 * CUDA_ERROR_OUT_OF_MEMORY flushes the deallocation queue and retries
 * once), defer_cleanup, copies between strided host and device views,
 * fills, host memory and streams / events, and a teardown that leaves the
 * driver holding nothing.
 */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "cuda_test_util.h"
#include "runtime_internal.h"

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
    assert_int_equal(gm_context_backend(ctx), GM_BACKEND_CUDA);
    return ctx;
}

static void close_context(gm_context *ctx)
{
    gm_context_destroy(&ctx);
    assert_null(ctx);
    assert_int_equal(gm_cuda_double_live_objects(), 0);
    assert_no_violations();
}

/* Device memory: the failed cuMemAlloc flushes the queued free, and the retry succeeds. */
static void test_device_oom_flushes_and_retries(void **state)
{
    const int64_t shape[1] = {600 * 1024};
    gm_context *ctx = NULL;
    gm_array *a = NULL;
    gm_array *b = NULL;
    gm_dealloc_stats stats;
    long first = 0;

    (void)state;
    gm_cuda_double_set_device_memory(1 << 20);
    ctx = open_context();
    assert_ok(gm_device_array(ctx, 1, shape, GM_UINT8, GM_ORDER_C, &a));
    gm_array_release(&a);
    assert_ok(gm_deallocations_stats(ctx, &stats));
    assert_int_equal(stats.pending_count, 1);
    assert_int_equal(stats.pending_device_bytes, shape[0]);

    gm_cuda_double_clear_calls();
    assert_ok(gm_device_array(ctx, 1, shape, GM_UINT8, GM_ORDER_C, &b));
    first = gm_cuda_double_find_call("cuMemAlloc_v2", 0);
    assert_true(first >= 0);
    assert_true(gm_cuda_double_find_call("cuMemFree_v2", first) > first);
    assert_true(gm_cuda_double_find_call("cuMemAlloc_v2", first + 1) >
                gm_cuda_double_find_call("cuMemFree_v2", first));
    assert_ok(gm_deallocations_stats(ctx, &stats));
    assert_int_equal(stats.pending_count, 0);
    assert_true(stats.flushes >= 1);

    /* inside defer_cleanup nothing may be freed: the out-of-memory error stands */
    gm_array_release(&b);
    assert_ok(gm_defer_cleanup_begin(ctx));
    assert_status(gm_device_array(ctx, 1, shape, GM_UINT8, GM_ORDER_C, &a),
                  GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_message_contains("CUDA_ERROR_OUT_OF_MEMORY");
    assert_ok(gm_defer_cleanup_end(ctx));
    assert_ok(gm_device_array(ctx, 1, shape, GM_UINT8, GM_ORDER_C, &a));
    gm_array_release(&a);
    close_context(ctx);
}

/* Pinned memory follows the same rule. */
static void test_pinned_oom_flushes_and_retries(void **state)
{
    const int64_t shape[1] = {600 * 1024};
    gm_context *ctx = NULL;
    gm_array *a = NULL;
    gm_dealloc_stats stats;

    (void)state;
    gm_cuda_double_set_pinned_memory(1 << 20);
    ctx = open_context();
    assert_ok(gm_pinned_array(ctx, 1, shape, GM_UINT8, GM_ORDER_C, &a));
    gm_array_release(&a);
    assert_ok(gm_deallocations_stats(ctx, &stats));
    assert_int_equal(stats.pending_pinned_bytes, shape[0]);
    gm_cuda_double_clear_calls();
    assert_ok(gm_pinned_array(ctx, 1, shape, GM_UINT8, GM_ORDER_C, &a));
    assert_int_equal(gm_cuda_double_count_calls("cuMemHostAlloc"), 2);
    assert_int_equal(gm_cuda_double_count_calls("cuMemFreeHost"), 1);
    gm_array_release(&a);
    close_context(ctx);
}

/* Strided host views to and from the device, and fills, through the core's copy engine. */
static void test_copies_through_core(void **state)
{
    enum { R = 6, C = 5 };
    const int64_t shape[2] = {R, C};
    const int64_t transposed[2] = {C, R};
    float host[R][C];
    float back[C][R];
    gm_context *ctx = NULL;
    gm_array *dev = NULL;
    gm_array *host_copy = NULL;
    gm_ndview src;
    gm_ndview dst;
    const float seven = 7.0f;

    (void)state;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            host[i][j] = (float)(10 * i + j);
    ctx = open_context();
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &src));
    assert_ok(gm_to_device(ctx, &src, NULL, &dev));
    /* the device array into a transposed (F-ordered view of a C) host buffer */
    assert_ok(gm_ndview_init(back, GM_FLOAT32, 2, transposed, NULL, GM_ORDER_C, &dst));
    assert_ok(gm_ndview_transpose(&dst, &dst));
    assert_ok(gm_array_copy_to_host(dev, &dst, NULL));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            assert_float_equal(back[j][i], host[i][j], 0.0f);
    /* A strided host source: the packing kernel refuses host sides, another way copies
     * it, and the refusal is not left as the thread's error. */
    gm_clear_error();
    assert_ok(gm_array_copy_to_device(dev, &dst, NULL));
    assert_int_equal(gm_last_error(), GM_OK);
    assert_ok(gm_array_fill(dev, &seven, NULL));
    assert_ok(gm_array_copy_to_host_new(dev, NULL, &host_copy));
    assert_float_equal(((const float *)gm_array_view(host_copy)->data)[R * C - 1], 7.0f, 0.0f);
    gm_array_release(&host_copy);
    gm_array_release(&dev);
    close_context(ctx);
}

/* Mapped arrays, host registration scopes, streams and events; teardown releases everything. */
static void test_host_memory_streams_events(void **state)
{
    const int64_t shape[1] = {256};
    uint32_t user[256];
    gm_context *ctx = NULL;
    gm_array *mapped = NULL;
    gm_ndview device_view;
    gm_ndview user_view;
    gm_host_scope *scope = NULL;
    gm_stream *stream = NULL;
    gm_event *start = NULL;
    gm_event *end = NULL;
    float ms = 0.0f;

    (void)state;
    ctx = open_context();
    assert_ok(gm_mapped_array(ctx, 1, shape, GM_UINT32, GM_ORDER_C, GM_HOST_PORTABLE, &mapped));
    assert_ok(gm_array_device_view(mapped, &device_view));
    assert_int_equal(device_view.memory, GM_MEMORY_DEVICE); /* device side of mapped memory */
    assert_ptr_equal(device_view.data, gm_array_view(mapped)->data); /* unified addressing */
    assert_ok(gm_ndview_init(user, GM_UINT32, 1, shape, NULL, GM_ORDER_C, &user_view));
    assert_ok(gm_pin(ctx, 1, &user_view, &scope));
    assert_ok(gm_host_scope_end(&scope));
    assert_ok(gm_pin(ctx, 1, &user_view, &scope)); /* pinning again at once works */
    assert_ok(gm_host_scope_end(&scope));

    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &stream));
    assert_ok(gm_event_create(ctx, true, &start));
    assert_ok(gm_event_create(ctx, true, &end));
    assert_ok(gm_event_record(start, stream));
    assert_ok(gm_event_record(end, stream));
    assert_ok(gm_event_synchronize(end));
    assert_ok(gm_event_elapsed_ms(start, end, &ms));
    assert_true(ms > 0.0f);
    assert_ok(gm_stream_synchronize(gm_default_stream(ctx)));
    assert_ok(gm_stream_synchronize(gm_legacy_default_stream(ctx)));
    assert_ok(gm_stream_synchronize(gm_per_thread_default_stream(ctx)));
    gm_event_destroy(&start);
    gm_event_destroy(&end);
    gm_stream_destroy(&stream);
    gm_array_release(&mapped);
    close_context(ctx);
}

/*
 * A write-combined mapped array has a device address of its own (cuda.h's
 * "Disjoint Addressing"): its device view uses it for copies, fills and
 * kernels, and gm_pointer_kind names the memory MAPPED by either address, as
 * it names gm_map's. Before, the device address was PINNED: only the host
 * address was looked for among the context's arrays.
 */
static void test_write_combined_device_view(void **state)
{
    const int64_t shape[1] = {64};
    gm_context *ctx = open_context();
    gm_array *mapped = NULL;
    gm_array *dev = NULL;
    gm_array *view_array = NULL;
    gm_kernel *fill = NULL;
    gm_ndview device_view;
    gm_memory_kind kind = GM_MEMORY_HOST;
    const int32_t seven = 7;
    int32_t *host = NULL;
    gm_status status = GM_OK;

    (void)state;
    assert_ok(gm_mapped_array(ctx, 1, shape, GM_INT32, GM_ORDER_C, GM_HOST_WRITECOMBINED, &mapped));
    host = gm_array_view(mapped)->data;
    /* its device address is MAPPED from the start, whoever hands it out (gm_map here) */
    assert_ok(gm_pointer_kind(ctx, (void *)(uintptr_t)gm_cuda_double_device_address(host), &kind));
    assert_int_equal(kind, GM_MEMORY_MAPPED);
    {
        gm_host_scope *scope = NULL;
        gm_ndview mapped_view;

        assert_ok(gm_map(ctx, 1, gm_array_view(mapped), &mapped_view, &scope));
        assert_ptr_equal(mapped_view.data, (void *)(uintptr_t)gm_cuda_double_device_address(host));
        assert_ok(gm_pointer_kind(ctx, (int32_t *)mapped_view.data + 63, &kind));
        assert_int_equal(kind, GM_MEMORY_MAPPED);
        assert_ok(gm_host_scope_end(&scope));
    }
    assert_ok(gm_array_device_view(mapped, &device_view));
    assert_ptr_not_equal(device_view.data, host);
    assert_ptr_equal(device_view.data, (void *)(uintptr_t)gm_cuda_double_device_address(host));
    assert_ok(gm_pointer_kind(ctx, host + 1, &kind));
    assert_int_equal(kind, GM_MEMORY_MAPPED);
    assert_ok(gm_pointer_kind(ctx, (int32_t *)device_view.data + 1, &kind));
    assert_int_equal(kind, GM_MEMORY_MAPPED);

    /* a fill through the device view, copied to a device array and back into the host side */
    assert_ok(gm_array_from_foreign(ctx, &device_view, NULL, NULL, NULL, &view_array));
    assert_ok(gm_array_fill(view_array, &seven, NULL));
    assert_int_equal(host[63], 7);
    assert_ok(gm_device_array(ctx, 1, shape, GM_INT32, GM_ORDER_C, &dev));
    assert_ok(gm_copy(ctx, gm_array_view(dev), &device_view, NULL));
    memset(host, 0, 64 * sizeof(int32_t));
    assert_ok(gm_copy(ctx, &device_view, gm_array_view(dev), NULL));
    assert_int_equal(host[0], 7);
    status = gm_kernel_find(ctx, "fill_i32", &fill);
    if (status != GM_ERR_NOT_FOUND) { /* built with the CUDA kernel images */
        gm_arg args[] = {gm_arg_view(&device_view), gm_arg_i32(-42), gm_arg_i64(shape[0])};

        assert_ok(status);
        assert_ok(gm_launch(fill, (gm_dim3){1, 1, 1}, (gm_dim3){64, 1, 1}, 0, NULL, 3, args));
        assert_int_equal(host[0], -42);
        assert_int_equal(host[63], -42);
    }
    gm_array_release(&view_array);
    gm_array_release(&dev);
    gm_array_release(&mapped);
    close_context(ctx);
}

/*
 * A flush waits for the context's queued work (cuCtxSynchronize) once per
 * batch, before the first free; streams and events alone need no wait.
 */
static void test_flush_synchronizes_before_freeing(void **state)
{
    gm_context *ctx = open_context();
    int64_t n = 1024;
    gm_array *a = NULL, *b = NULL;
    gm_stream *s = NULL;
    long sync = 0, before = 0;

    (void)state;
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &a));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &b));
    gm_array_release(&a);
    gm_array_release(&b);
    before = gm_cuda_double_count_calls("cuCtxSynchronize");
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(gm_cuda_double_count_calls("cuCtxSynchronize") - before, 1);
    sync = gm_cuda_double_find_call("cuCtxSynchronize", 0);
    assert_true(sync >= 0);
    while (gm_cuda_double_find_call("cuCtxSynchronize", sync + 1) >= 0)
        sync = gm_cuda_double_find_call("cuCtxSynchronize", sync + 1);
    assert_true(gm_cuda_double_find_call("cuMemFree_v2", sync) > sync);
    assert_ok(gm_stream_create(ctx, GM_STREAM_DEFAULT, &s));
    gm_stream_destroy(&s);
    before = gm_cuda_double_count_calls("cuCtxSynchronize");
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(gm_cuda_double_count_calls("cuCtxSynchronize"), before);
    close_context(ctx);
}

/*
 * A caller with another context current (here device 1's primary context, as
 * after cudaSetDevice(1)): every gpumem call runs with device 0's pushed and
 * gives the caller's back, context creation and teardown included.
 */
static void test_caller_context_restored(void **state)
{
    CUcontext mine = NULL, current = NULL;
    gm_context *ctx = NULL;
    gm_array *a = NULL;
    gm_stream *s = NULL;
    gm_event *e = NULL;
    int64_t n = 64;
    float host[64] = {0};
    gm_ndview hv;
    long push = 0;

    (void)state;
    gm_cuda_double_set_device_count(2);
    assert_int_equal(cuInit(0), CUDA_SUCCESS);
    assert_int_equal(cuDevicePrimaryCtxRetain(&mine, 1), CUDA_SUCCESS);
    assert_int_equal(cuCtxSetCurrent(mine), CUDA_SUCCESS);
#define ASSERT_MINE()                                              \
    do {                                                           \
        assert_int_equal(cuCtxGetCurrent(&current), CUDA_SUCCESS); \
        assert_ptr_equal(current, mine);                           \
    } while (0)
    ctx = open_context();
    ASSERT_MINE();
    gm_cuda_double_clear_calls();
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &a));
    ASSERT_MINE();
    push = gm_cuda_double_find_call("cuCtxPushCurrent_v2", 0);
    assert_true(push >= 0);
    assert_true(gm_cuda_double_find_call("cuMemAlloc_v2", push) > push);
    assert_true(gm_cuda_double_find_call("cuCtxPopCurrent_v2", push) >
                gm_cuda_double_find_call("cuMemAlloc_v2", push));
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_array_copy_to_device(a, &hv, NULL));
    ASSERT_MINE();
    assert_ok(gm_stream_create(ctx, 0, &s));
    assert_ok(gm_event_create(ctx, false, &e));
    assert_ok(gm_array_copy_to_host(a, &hv, s));
    assert_ok(gm_event_record(e, s));
    assert_ok(gm_stream_synchronize(s));
    ASSERT_MINE();
    assert_ok(gm_context_synchronize(ctx));
    ASSERT_MINE();
    /* A failing call gives it back too, and keeps its own message. */
    gm_cuda_double_fail("cuStreamSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED);
    assert_int_equal(gm_stream_synchronize(s), GM_ERR_CONTEXT_LOST);
    assert_non_null(strstr(gm_last_error_message(), "CUDA_ERROR_LAUNCH_FAILED"));
    ASSERT_MINE();
    gm_event_destroy(&e);
    gm_stream_destroy(&s);
    gm_array_release(&a);
    assert_ok(gm_deallocations_flush(ctx));
    ASSERT_MINE();
    gm_context_destroy(&ctx);
    ASSERT_MINE();
#undef ASSERT_MINE
    assert_int_equal(cuCtxSetCurrent(NULL), CUDA_SUCCESS);
    assert_int_equal(cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
    assert_int_equal(gm_cuda_double_live_objects(), 0);
    assert_no_violations();
}

/*
 * The caller made the same primary context current (as the CUDA runtime,
 * Numba or CuPy do): ending a gpumem context leaves it current, and the
 * caller's own driver calls keep working.
 */
static void test_caller_primary_context_kept(void **state)
{
    CUcontext mine = NULL, current = NULL;
    CUdeviceptr p = 0;
    gm_context *ctx = NULL;
    gm_array *a = NULL;
    int64_t n = 64;

    (void)state;
    assert_int_equal(cuInit(0), CUDA_SUCCESS);
    assert_int_equal(cuDevicePrimaryCtxRetain(&mine, 0), CUDA_SUCCESS);
    assert_int_equal(cuCtxSetCurrent(mine), CUDA_SUCCESS);
    ctx = open_context();
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &a));
    gm_array_release(&a);
    gm_context_destroy(&ctx);
    assert_int_equal(cuCtxGetCurrent(&current), CUDA_SUCCESS);
    assert_ptr_equal(current, mine);
    assert_int_equal(cuMemAlloc(&p, 256), CUDA_SUCCESS);
    assert_int_equal(cuMemFree(p), CUDA_SUCCESS);
    assert_int_equal(cuCtxSetCurrent(NULL), CUDA_SUCCESS);
    assert_int_equal(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
    assert_int_equal(gm_cuda_double_live_objects(), 0);
    assert_no_violations();
}

/*
 * IPC round trip (the double maps a handle in the process that made it; a
 * real driver wants another process): the opened array views the exporter's
 * elements through the same descriptor; its last release closes the mapping
 * after the queued work; a layout outside the allocation closes it at once.
 */
static void test_ipc_round_trip(void **state)
{
    gm_context *ctx = open_context();
    int64_t n = 100;
    float host[100], back[40];
    gm_array *d = NULL, *v = NULL, *o = NULL, *row = NULL;
    gm_ipc_handle h;
    gm_ndview hv, bv, layout;
    long sync = 0;

    (void)state;
    for (int i = 0; i < 100; i++)
        host[i] = (float)i;
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_to_device(ctx, &hv, NULL, &d));
    assert_ok(gm_array_getitem(d, 1, &GM_IDX_SLICE(10, 90, 2), &v)); /* 40 elements */
    assert_ok(gm_array_ipc_handle(v, &h));
    assert_int_equal(h.backend, GM_BACKEND_CUDA);
    layout = *gm_array_view(v);
    layout.data = NULL; /* what the other process knows: the descriptor */
    assert_ok(gm_array_from_ipc_handle(ctx, &h, &layout, &o));
    assert_int_equal(gm_cuda_double_count_calls("cuIpcOpenMemHandle_v2"), 1);
    assert_int_equal(gm_array_view(o)->memory, GM_MEMORY_DEVICE);
    assert_ok(gm_ndview_init(back, GM_FLOAT32, 1, &(int64_t){40}, NULL, GM_ORDER_C, &bv));
    assert_ok(gm_array_copy_to_host(o, &bv, NULL));
    for (int i = 0; i < 40; i++)
        assert_true(back[i] == (float)(10 + 2 * i));
    assert_ok(gm_array_getitem(o, 1, &GM_IDX_INT(3), &row)); /* a view shares the mapping */
    gm_array_release(&o);
    assert_int_equal(gm_cuda_double_count_calls("cuIpcCloseMemHandle"), 0);
    gm_cuda_double_clear_calls();
    gm_array_release(&row);
    sync = gm_cuda_double_find_call("cuCtxSynchronize", 0);
    assert_true(sync >= 0);
    assert_true(gm_cuda_double_find_call("cuIpcCloseMemHandle", sync) > sync);
    /* a layout reaching past the allocation: refused, the mapping closed again */
    layout.shape[0] = 50; /* 10 + 2 * 49 = 108 > 100 elements */
    gm_cuda_double_clear_calls();
    assert_int_equal(gm_array_from_ipc_handle(ctx, &h, &layout, &o), GM_ERR_INVALID_ARG);
    assert_non_null(strstr(gm_last_error_message(), "of an allocation of 400 bytes"));
    assert_null(o);
    assert_int_equal(gm_cuda_double_count_calls("cuIpcCloseMemHandle"), 1);
    gm_array_release(&v);
    gm_array_release(&d);
    close_context(ctx);
}

/* gm_managed_array is cuMemAllocManaged (attached globally), freed with cuMemFree. */
static void test_managed_array(void **state)
{
    gm_context *ctx = open_context();
    int64_t n = 256;
    gm_array *m = NULL;
    long before = gm_cuda_double_count_calls("cuMemAllocManaged");

    (void)state;
    assert_ok(gm_managed_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &m));
    assert_int_equal(gm_cuda_double_count_calls("cuMemAllocManaged") - before, 1);
    assert_int_equal(gm_array_view(m)->memory, GM_MEMORY_MANAGED);
    ((float *)gm_array_view(m)->data)[255] = 1.5f; /* the double's managed memory is host memory */
    before = gm_cuda_double_count_calls("cuMemFree_v2");
    gm_array_release(&m);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(gm_cuda_double_count_calls("cuMemFree_v2") - before, 1);
    gm_cuda_double_fail("cuMemAllocManaged", 1, CUDA_ERROR_NOT_SUPPORTED);
    assert_int_not_equal(gm_managed_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &m), GM_OK);
    assert_null(m);
    assert_non_null(strstr(gm_last_error_message(), "gm_managed_array: "));
    close_context(ctx);
}

/* gm_context_synchronize is cuCtxSynchronize, whose error for earlier work comes back. */
static void test_context_synchronize(void **state)
{
    gm_context *ctx = open_context();
    long before = gm_cuda_double_count_calls("cuCtxSynchronize");

    (void)state;
    assert_ok(gm_context_synchronize(ctx));
    assert_int_equal(gm_cuda_double_count_calls("cuCtxSynchronize") - before, 1);
    gm_cuda_double_fail("cuCtxSynchronize", 1, CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(gm_context_synchronize(ctx), GM_ERR_CONTEXT_LOST); /* a kernel fault */
    assert_non_null(strstr(gm_last_error_message(), "gm_context_synchronize: "));
    assert_non_null(strstr(gm_last_error_message(), "cuCtxSynchronize"));
    assert_non_null(strstr(gm_last_error_message(), "the error is sticky")); /* cuda.h says so */
    gm_cuda_double_fail("cuCtxSynchronize", 1, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    assert_int_equal(gm_context_synchronize(ctx), GM_ERR_LAUNCH);
    assert_null(strstr(gm_last_error_message(), "sticky")); /* a launch the driver refused */
    close_context(ctx);
}

/*
 * A context destroyed with a module still loaded (a kernel found through the
 * registry) waits for its work before it unloads the module: streams already
 * destroyed are no longer listed, so the teardown synchronizes the context.
 */
static void test_teardown_synchronizes_before_unloading(void **state)
{
    gm_context *ctx = open_context();
    gm_kernel *add = NULL;
    long start = 0, sync = 0;
    gm_status status = GM_OK;

    (void)state;
    status = gm_kernel_find(ctx, "add_f32", &add);
    if (status == GM_ERR_NOT_FOUND) { /* built without the CUDA kernel images */
        close_context(ctx);
        skip();
    }
    assert_ok(status);
    start = gm_cuda_double_call_count();
    close_context(ctx);
    sync = gm_cuda_double_find_call("cuCtxSynchronize", start);
    assert_true(sync >= start);
    assert_true(gm_cuda_double_find_call("cuModuleUnload", start) > sync);
}

/* What a user callback on the CUDA backend got from calls that need the driver. */
typedef struct callback_calls {
    gm_context *ctx;
    gm_stream *other;
    gm_event *event;
    gm_array *doomed; /* released inside: queued */
    gm_status copy_on_stream, copy_now, add_callback, record, allocate, memory_info;
    float a[16], b[16];
} callback_calls;

static void never_called(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    (void)user;
    fail_msg("a callback added inside a callback was queued");
}

static void call_everything(gm_stream *stream, gm_status status, void *user)
{
    callback_calls *c = user;
    const int64_t shape[1] = {16};
    gm_ndview va, vb;
    gm_array *made = NULL;
    int64_t free_bytes = 0, total_bytes = 0;

    (void)stream;
    (void)status;
    (void)gm_ndview_init(c->a, GM_FLOAT32, 1, shape, NULL, GM_ORDER_C, &va);
    (void)gm_ndview_init(c->b, GM_FLOAT32, 1, shape, NULL, GM_ORDER_C, &vb);
    c->copy_on_stream = gm_copy(c->ctx, &va, &vb, c->other); /* its job must not leak (ASan) */
    c->copy_now = gm_copy(c->ctx, &va, &vb, NULL);           /* waits for nothing */
    c->add_callback = gm_stream_add_callback(c->other, never_called, NULL);
    c->record = gm_event_record(c->event, c->other);
    c->allocate = gm_device_array(c->ctx, 1, shape, GM_FLOAT32, GM_ORDER_C, &made);
    c->memory_info = gm_context_memory_info(c->ctx, &free_bytes, &total_bytes);
    gm_array_release(&c->doomed);
}

/*
 * A stream callback runs where the CUDA driver allows no call: what needs
 * the driver returns GM_ERR_STATE without calling it (the double counts any
 * call there as a violation), a synchronous host-to-host copy works, and a
 * release is queued.
 */
static void test_callback_calls_that_need_the_driver(void **state)
{
    gm_context *ctx = open_context();
    callback_calls c;
    gm_stream *s = NULL;
    const int64_t shape[1] = {16};

    (void)state;
    memset(&c, 0, sizeof(c));
    c.ctx = ctx;
    for (int i = 0; i < 16; i++)
        c.b[i] = (float)i;
    assert_ok(gm_stream_create(ctx, 0, &s));
    assert_ok(gm_stream_create(ctx, 0, &c.other));
    assert_ok(gm_event_create(ctx, false, &c.event));
    assert_ok(gm_device_array(ctx, 1, shape, GM_FLOAT32, GM_ORDER_C, &c.doomed));
    assert_ok(gm_stream_add_callback(s, call_everything, &c));
    assert_ok(gm_stream_synchronize(s));
    assert_ok(gm_stream_synchronize(c.other));
    assert_int_equal(c.copy_on_stream, GM_ERR_STATE);
    assert_ok(c.copy_now);
    assert_true(c.a[15] == 15.0f);
    assert_int_equal(c.add_callback, GM_ERR_STATE);
    assert_int_equal(c.record, GM_ERR_STATE);
    assert_int_equal(c.allocate, GM_ERR_STATE);
    assert_int_equal(c.memory_info, GM_ERR_STATE);
    assert_null(c.doomed);
    {
        gm_dealloc_stats stats;

        assert_ok(gm_deallocations_stats(ctx, &stats));
        assert_int_equal(stats.pending_count, 1);
    }
    gm_event_destroy(&c.event);
    gm_stream_destroy(&c.other);
    gm_stream_destroy(&s);
    close_context(ctx); /* no violation */
}

/* What a host-backend callback did on a CUDA stream. */
typedef struct cross_fill {
    gm_array *array;
    gm_stream *stream;
    gm_status status;
} cross_fill;

static void fill_on_cuda(gm_stream *stream, gm_status status, void *user)
{
    cross_fill *c = user;
    const float value = 1.5f;

    (void)stream;
    (void)status;
    c->status = gm_array_fill(c->array, &value, c->stream);
}

/*
 * A callback of another backend (the simulator's worker thread) may queue
 * CUDA work: only CUDA's own callbacks forbid driver calls (a staged fill on
 * a CUDA stream there was refused as if it were inside one).
 */
static void test_other_backend_callback_queues_cuda_work(void **state)
{
    const int64_t shape[2] = {8, 16}, strides[2] = {256, 4};
    gm_context_options options;
    gm_context *host_ctx = NULL, *ctx = open_context();
    gm_stream *host_stream = NULL;
    cross_fill c = {NULL, NULL, GM_ERR_INTERNAL};
    float back[8][16];
    gm_ndview hv;

    (void)state;
    gm_context_options_default(&options);
    assert_ok(gm__context_create_with_ops(&gm__host_backend, &options, &host_ctx));
    assert_ok(gm_stream_create(host_ctx, 0, &host_stream));
    assert_ok(gm_stream_create(ctx, 0, &c.stream));
    assert_ok(gm_device_array_strided(ctx, 2, shape, strides, GM_FLOAT32, &c.array));
    assert_ok(gm_stream_add_callback(host_stream, fill_on_cuda, &c));
    assert_ok(gm_stream_synchronize(host_stream));
    assert_ok(c.status);
    assert_ok(gm_stream_synchronize(c.stream));
    assert_ok(gm_ndview_init(back, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_array_copy_to_host(c.array, &hv, NULL));
    assert_true(back[0][0] == 1.5f && back[7][15] == 1.5f);
    gm_array_release(&c.array);
    gm_stream_destroy(&c.stream);
    gm_stream_destroy(&host_stream);
    gm_context_destroy(&host_ctx);
    close_context(ctx);
}

/*
 * Teardown when the driver refuses to destroy a stream (a sticky error fails
 * every later call): the backend's record of it still goes (cmocka reports a
 * leak if not), and the refusal is logged.
 */
static void test_teardown_after_refused_stream_destroy(void **state)
{
    gm_context *ctx = open_context();
    gm_stream *s = NULL;

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &s));
    gm_stream_destroy(&s); /* queued */
    gm_cuda_double_fail("cuStreamDestroy_v2", 1, CUDA_ERROR_ILLEGAL_ADDRESS);
    gm_context_destroy(&ctx);
    assert_null(ctx);
    assert_int_equal(gm_cuda_double_count_calls("cuStreamDestroy_v2"), 1);
    assert_no_violations();
}

/* Driver failures of gm_pointer_kind name the call; NOT_READY is an error outside queries. */
static void test_failure_messages(void **state)
{
    gm_context *ctx = open_context();
    gm_memory_kind kind = GM_MEMORY_HOST;
    gm_array *a = NULL;
    int64_t n = 16;
    int x = 0;

    (void)state;
    gm_cuda_double_fail("cuPointerGetAttribute", 1, CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_status(gm_pointer_kind(ctx, &x, &kind), GM_ERR_CONTEXT_LOST);
    assert_message_contains("gm_pointer_kind: ");
    assert_message_contains("cuPointerGetAttribute failed");
    gm_clear_error();
    gm_cuda_double_fail("cuMemAlloc_v2", 1, CUDA_ERROR_NOT_READY);
    assert_status(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a), GM_ERR_NOT_READY);
    assert_message_contains("gm_device_array: ");
    assert_message_contains("failed: CUDA_ERROR_NOT_READY");
    assert_null(a);
    close_context(ctx);
}

/*
 * A sticky error (a kernel fault): every later driver call in the context
 * fails, frees and destroys included. Everything is still released, the
 * teardown ends in bounded time, the library's own memory is freed (cmocka's
 * leak check) and no driver rule is broken. The driver's objects are the
 * driver's to drop with the context.
 */
static void test_sticky_error_releases_everything(void **state)
{
    static _Alignas(4096) unsigned char buf[8192];
    gm_context *ctx = open_context();
    gm_array *kept = NULL, *queued = NULL, *pinned = NULL, *mapped = NULL;
    gm_stream *s = NULL, *ext = NULL;
    gm_event *e = NULL;
    gm_host_scope *scope = NULL;
    gm_ndview v;
    int64_t n = 1024, bytes = sizeof buf;
    struct timespec t0, t1;

    (void)state;
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &kept));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &queued));
    assert_ok(gm_pinned_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &pinned));
    assert_ok(gm_mapped_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, 0, &mapped));
    assert_ok(gm_stream_create(ctx, 0, &s));
    assert_ok(gm_stream_wrap_external(ctx, gm_stream_native(s), &ext));
    assert_ok(gm_event_create(ctx, true, &e));
    assert_ok(gm_event_record(e, s));
    assert_ok(gm_ndview_init(buf, GM_UINT8, 1, &bytes, NULL, GM_ORDER_C, &v));
    assert_ok(gm_pin(ctx, 1, &v, &scope));
    gm_array_release(&queued);
    gm_cuda_double_set_sticky(CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_status(gm_context_synchronize(ctx), GM_ERR_CONTEXT_LOST);
    assert_status(gm_array_memset(kept, 0, s), GM_ERR_CONTEXT_LOST);
    assert_status(gm_stream_synchronize(ext), GM_ERR_CONTEXT_LOST);
    assert_status(gm_event_synchronize(e), GM_ERR_CONTEXT_LOST);
    assert_status(gm_host_scope_end(&scope), GM_ERR_CONTEXT_LOST);
    assert_null(scope);
    gm_event_destroy(&e);
    gm_stream_destroy(&ext);
    gm_stream_destroy(&s);
    gm_array_release(&kept);
    gm_array_release(&pinned);
    gm_array_release(&mapped);
    assert_status(gm_deallocations_flush(ctx), GM_ERR_CONTEXT_LOST);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    gm_context_destroy(&ctx);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_null(ctx);
    assert_true(t1.tv_sec - t0.tv_sec < 20); /* a hang check, not a speed test */
    assert_no_violations();
    gm_cuda_double_set_sticky(CUDA_SUCCESS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_device_oom_flushes_and_retries, cuda_test_setup),
        cmocka_unit_test_setup(test_pinned_oom_flushes_and_retries, cuda_test_setup),
        cmocka_unit_test_setup(test_copies_through_core, cuda_test_setup),
        cmocka_unit_test_setup(test_host_memory_streams_events, cuda_test_setup),
        cmocka_unit_test_setup(test_write_combined_device_view, cuda_test_setup),
        cmocka_unit_test_setup(test_flush_synchronizes_before_freeing, cuda_test_setup),
        cmocka_unit_test_setup(test_teardown_synchronizes_before_unloading, cuda_test_setup),
        cmocka_unit_test_setup(test_context_synchronize, cuda_test_setup),
        cmocka_unit_test_setup(test_managed_array, cuda_test_setup),
        cmocka_unit_test_setup(test_caller_context_restored, cuda_test_setup),
        cmocka_unit_test_setup(test_caller_primary_context_kept, cuda_test_setup),
        cmocka_unit_test_setup(test_ipc_round_trip, cuda_test_setup),
        cmocka_unit_test_setup(test_callback_calls_that_need_the_driver, cuda_test_setup),
        cmocka_unit_test_setup(test_other_backend_callback_queues_cuda_work, cuda_test_setup),
        cmocka_unit_test_setup(test_teardown_after_refused_stream_destroy, cuda_test_setup),
        cmocka_unit_test_setup(test_failure_messages, cuda_test_setup),
        cmocka_unit_test_setup(test_sticky_error_releases_everything, cuda_test_setup),
    };

    return cmocka_run_group_tests_name("cuda/runtime", tests, cuda_test_group_setup,
                                       cuda_test_group_teardown);
}
