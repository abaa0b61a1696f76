/*
 * Device conformance of the CUDA backend: allocations, copies (1-D, 2-D,
 * 3-D, sync and async), memsets, pinned / mapped / registered / managed
 * memory, streams, host functions, events and kernel launches, checked by
 * their results only, so the same cases run on a real GPU (libcuda.so.1)
 * and, as a second meson test, on the driver test double
 * (GM_CUDA_DRIVER_PATH). Exits 77 (meson's skip) when no driver or device
 * is found.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gm_test.h"
#include "test_kernels.h"

#define SKIP 77

static const gm_backend_ops *const ops = &gm__cuda_backend;
static gm_backend_ctx *bctx = NULL;

static gm_devptr addr(const void *p)
{
    return (gm_devptr)(uintptr_t)p;
}

static gm_copy_desc pitched(gm_copy_side dst_side, gm_devptr dst, size_t dst_pitch,
                            gm_copy_side src_side, gm_devptr src, size_t src_pitch, size_t width,
                            size_t height)
{
    gm_copy_desc d = {dst_side, src_side,  dst,    src,       width, height,
                      1,        dst_pitch, height, src_pitch, height};

    return d;
}

static void test_device_properties(void **state)
{
    gm_device_info info;
    int64_t free_bytes = 0;
    int64_t total = 0;

    (void)state;
    memset(&info, 0, sizeof(info));
    assert_ok(ops->device_info(bctx, &info));
    assert_true(strlen(info.name) > 0);
    assert_int_equal(info.backend, GM_BACKEND_CUDA);
    assert_int_equal(info.warp_size, 32);
    assert_true(info.max_threads_per_block >= 256);
    assert_true(info.multiprocessor_count > 0);
    assert_ok(ops->mem_info(bctx, &free_bytes, &total));
    assert_true(total > 0 && free_bytes > 0 && free_bytes <= total);
    assert_int_equal(total, info.total_memory);
}

/* Host -> device -> device -> host, synchronous. */
static void test_round_trip(void **state)
{
    const size_t n = (size_t)1 << 20;
    unsigned char *src = malloc(n);
    unsigned char *dst = calloc(1, n);
    gm_devptr a = 0;
    gm_devptr b = 0;
    gm_copy_desc d;

    (void)state;
    assert_true(src != NULL && dst != NULL);
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 31 + 7);
    assert_ok(ops->mem_alloc(bctx, n, &a));
    assert_ok(ops->mem_alloc(bctx, n, &b));
    d = pitched(GM_COPY_DEVICE, a, n, GM_COPY_HOST, addr(src), n, n, 1);
    assert_ok(ops->copy(bctx, &d, NULL));
    d = pitched(GM_COPY_DEVICE, b, n, GM_COPY_DEVICE, a, n, n, 1);
    assert_ok(ops->copy(bctx, &d, NULL));
    d = pitched(GM_COPY_HOST, addr(dst), n, GM_COPY_DEVICE, b, n, n, 1);
    assert_ok(ops->copy(bctx, &d, NULL));
    assert_memory_equal(dst, src, n);
    assert_ok(ops->mem_free(bctx, a));
    assert_ok(ops->mem_free(bctx, b));
    free(src);
    free(dst);
}

/* Pitched 2-D and 3-D copies through device memory with a wider pitch. */
static void test_pitched_copies(void **state)
{
    enum { W = 300, H = 64, DEV_PITCH = 512, D = 3, PLANE = 70 };
    unsigned char *host = malloc(D * H * W);
    unsigned char *back = calloc(1, D * H * W);
    gm_devptr dev = 0;
    gm_copy_desc d;

    (void)state;
    assert_true(host != NULL && back != NULL);
    for (size_t i = 0; i < (size_t)D * H * W; i++)
        host[i] = (unsigned char)(i ^ (i >> 8));
    assert_ok(ops->mem_alloc(bctx, (size_t)D * PLANE * DEV_PITCH, &dev));
    d = pitched(GM_COPY_DEVICE, dev, DEV_PITCH, GM_COPY_HOST, addr(host), W, W, H);
    assert_ok(ops->copy(bctx, &d, NULL));
    d = pitched(GM_COPY_HOST, addr(back), W, GM_COPY_DEVICE, dev, DEV_PITCH, W, H);
    assert_ok(ops->copy(bctx, &d, NULL));
    assert_memory_equal(back, host, (size_t)H * W);

    memset(back, 0, (size_t)D * H * W);
    d = pitched(GM_COPY_DEVICE, dev, DEV_PITCH, GM_COPY_HOST, addr(host), W, W, H);
    d.depth = D;
    d.dst_height = PLANE;
    assert_ok(ops->copy(bctx, &d, NULL));
    d = pitched(GM_COPY_HOST, addr(back), W, GM_COPY_DEVICE, dev, DEV_PITCH, W, H);
    d.depth = D;
    d.src_height = PLANE;
    assert_ok(ops->copy(bctx, &d, NULL));
    assert_memory_equal(back, host, (size_t)D * H * W);
    assert_ok(ops->mem_free(bctx, dev));
    free(host);
    free(back);
}

/* memset with every pattern size, checked on the host. */
static void test_memsets(void **state)
{
    const uint8_t b = 0x5a;
    const uint16_t h = 0xbeef;
    const uint32_t w = 0x01020304;
    const uint64_t q = 0x1122334455667788u;
    uint64_t back[512];
    gm_devptr dev = 0;
    gm_copy_desc down;

    (void)state;
    assert_ok(ops->mem_alloc(bctx, sizeof(back), &dev));
    down = pitched(GM_COPY_HOST, addr(back), sizeof(back), GM_COPY_DEVICE, dev, sizeof(back),
                   sizeof(back), 1);
    assert_ok(ops->memset(bctx, dev, &b, 1, sizeof(back), NULL));
    assert_ok(ops->copy(bctx, &down, NULL));
    assert_int_equal(((uint8_t *)back)[sizeof(back) - 1], b);
    assert_ok(ops->memset(bctx, dev, &h, 2, sizeof(back) / 2, NULL));
    assert_ok(ops->copy(bctx, &down, NULL));
    assert_int_equal(((uint16_t *)back)[7], h);
    assert_ok(ops->memset(bctx, dev, &w, 4, sizeof(back) / 4, NULL));
    assert_ok(ops->copy(bctx, &down, NULL));
    assert_int_equal(((uint32_t *)back)[100], w);
    assert_ok(ops->memset(bctx, dev, &q, 8, 512, NULL));
    assert_ok(ops->copy(bctx, &down, NULL));
    for (int i = 0; i < 512; i++)
        assert_int_equal(back[i], q);
    assert_ok(ops->mem_free(bctx, dev));
}

/* Asynchronous copies from pinned memory on a stream, timed by events. */
static void test_async_pinned_and_events(void **state)
{
    const size_t n = (size_t)4 << 20;
    gm_backend_stream *stream = NULL;
    gm_backend_event *start = NULL;
    gm_backend_event *end = NULL;
    gm_backend_event *untimed = NULL;
    unsigned char *pinned = NULL;
    unsigned char *back = NULL;
    gm_devptr dev = 0;
    gm_copy_desc d;
    float ms = -1.0f;
    gm_status query = GM_OK;

    (void)state;
    assert_ok(ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &stream));
    assert_ok(ops->event_create(bctx, 1, &start));
    assert_ok(ops->event_create(bctx, 1, &end));
    assert_ok(ops->event_create(bctx, 0, &untimed));
    assert_ok(ops->host_alloc(bctx, n, GM_HOST_PORTABLE, (void **)&pinned));
    assert_ok(ops->host_alloc(bctx, n, 0, (void **)&back));
    for (size_t i = 0; i < n; i++)
        pinned[i] = (unsigned char)(i * 13);
    assert_ok(ops->mem_alloc(bctx, n, &dev));
    assert_ok(ops->event_record(bctx, start, stream));
    d = pitched(GM_COPY_DEVICE, dev, n, GM_COPY_HOST, addr(pinned), n, n, 1);
    assert_ok(ops->copy(bctx, &d, stream));
    d = pitched(GM_COPY_HOST, addr(back), n, GM_COPY_DEVICE, dev, n, n, 1);
    assert_ok(ops->copy(bctx, &d, stream));
    assert_ok(ops->event_record(bctx, end, stream));
    assert_ok(ops->event_record(bctx, untimed, stream));
    query = ops->stream_query(bctx, stream);
    assert_true(query == GM_OK || query == GM_ERR_NOT_READY);
    assert_ok(ops->event_synchronize(bctx, end));
    assert_ok(ops->stream_wait_event(bctx, stream, end));
    assert_ok(ops->stream_synchronize(bctx, stream));
    assert_ok(ops->event_query(bctx, end));
    assert_ok(ops->event_elapsed(bctx, start, end, &ms));
    assert_true(ms >= 0.0f);
    assert_int_not_equal(ops->event_elapsed(bctx, start, untimed, &ms), GM_OK);
    assert_memory_equal(back, pinned, n);
    assert_ok(ops->mem_free(bctx, dev));
    assert_ok(ops->host_free(bctx, pinned));
    assert_ok(ops->host_free(bctx, back));
    assert_ok(ops->event_destroy(bctx, start));
    assert_ok(ops->event_destroy(bctx, end));
    assert_ok(ops->event_destroy(bctx, untimed));
    assert_ok(ops->stream_destroy(bctx, stream));
}

static int callbacks_seen;

static void count_callback(gm_status status, void *user)
{
    (void)user;
    if (status == GM_OK)
        callbacks_seen++;
}

static gm_status failing_work(void *user)
{
    (void)user;
    return GM_ERR_INTERNAL;
}

/* Host functions on built-in and created streams. */
static void test_host_functions(void **state)
{
    gm_backend_stream *stream = NULL;
    gm_backend_stream *legacy = NULL;

    (void)state;
    callbacks_seen = 0;
    assert_ok(ops->stream_create(bctx, 0, &stream));
    assert_ok(ops->stream_builtin(bctx, GM_BUILTIN_STREAM_LEGACY, &legacy));
    assert_ok(ops->stream_add_callback(bctx, stream, count_callback, NULL));
    assert_ok(ops->stream_add_callback(bctx, legacy, count_callback, NULL));
    assert_ok(ops->stream_enqueue_host(bctx, stream, failing_work, NULL, NULL));
    assert_status(ops->stream_synchronize(bctx, stream), GM_ERR_INTERNAL);
    assert_ok(ops->stream_synchronize(bctx, legacy));
    assert_int_equal(callbacks_seen, 2);
    assert_ok(ops->stream_destroy(bctx, stream));
}

/* Load the test kernels and set the constant coefficients. */
static gm_backend_module *load_kernels(gm_backend_kernel **fill, gm_backend_kernel **scale)
{
    const float coeffs[4] = {2.0f, -1.0f, 0.0f, 0.0f};
    gm_backend_module *module = NULL;
    gm_devptr global = 0;
    size_t bytes = 0;
    gm_copy_desc d;

    assert_ok(ops->module_load(bctx, GM_IMAGE_CUDA, gm_test_kernels_ptx,
                               sizeof(gm_test_kernels_ptx), &module));
    assert_ok(ops->module_get_kernel(bctx, module, "gm_test_fill_u32", fill));
    assert_ok(ops->module_get_kernel(bctx, module, "gm_test_scale_f32", scale));
    assert_ok(ops->module_get_global(bctx, module, "gm_test_coeffs", &global, &bytes));
    assert_int_equal(bytes, sizeof(coeffs));
    d = pitched(GM_COPY_DEVICE, global, bytes, GM_COPY_HOST, addr(coeffs), bytes, bytes, 1);
    assert_ok(ops->copy(bctx, &d, NULL));
    return module;
}

/* Kernels: fill through device, mapped and managed memory; scale with dynamic shared memory. */
static void test_kernels(void **state)
{
    enum { N = 5000 };
    gm_backend_kernel *fill = NULL;
    gm_backend_kernel *scale = NULL;
    gm_backend_module *module = load_kernels(&fill, &scale);
    gm_backend_stream *stream = NULL;
    gm_kernel_attrs attrs;
    gm_devptr dev = 0;
    gm_devptr target = 0;
    float *mapped = NULL;
    float back[N];
    uint32_t one = 0x3f800000; /* 1.0f */
    uint64_t n = N;
    void *fill_args[3] = {&target, &one, &n};
    const size_t fill_sizes[3] = {8, 4, 8};
    void *scale_args[2] = {&target, &n};
    const size_t scale_sizes[2] = {8, 8};
    gm_launch_config config = {{(N + 255) / 256, 1, 1}, {256, 1, 1}, 256 * sizeof(float)};
    gm_copy_desc d;
    gm_status big = GM_OK;

    (void)state;
    assert_ok(ops->kernel_attrs(bctx, fill, &attrs));
    assert_true(attrs.max_threads_per_block >= 256);
    assert_ok(ops->stream_create(bctx, 0, &stream));
    assert_ok(ops->mem_alloc(bctx, sizeof(back), &dev));
    target = dev;
    assert_ok(ops->launch(bctx, fill, &config, fill_args, fill_sizes, 3, stream));
    assert_ok(ops->launch(bctx, scale, &config, scale_args, scale_sizes, 2, stream));
    assert_ok(ops->stream_synchronize(bctx, stream));
    d = pitched(GM_COPY_HOST, addr(back), sizeof(back), GM_COPY_DEVICE, dev, sizeof(back),
                sizeof(back), 1);
    assert_ok(ops->copy(bctx, &d, NULL));
    for (int i = 0; i < N; i++)
        assert_float_equal(back[i], 1.0f, 0.0f); /* 1 * 2 - 1 */

    /* above 48 KiB of dynamic shared memory (opt-in; absent before Volta) */
    config.dynamic_shared_bytes = 64 * 1024;
    big = ops->launch(bctx, scale, &config, scale_args, scale_sizes, 2, stream);
    if (big != GM_OK)
        printf("note: 64 KiB of dynamic shared memory refused: %s\n", gm_last_error_message());
    assert_ok(ops->stream_synchronize(bctx, stream));
    config.dynamic_shared_bytes = 256 * sizeof(float);

    /* mapped host memory written by a kernel through its device address */
    assert_ok(ops->host_alloc(bctx, sizeof(back), GM_HOST_MAPPED, (void **)&mapped));
    assert_ok(ops->host_device_pointer(bctx, mapped, &target));
    assert_ok(ops->launch(bctx, fill, &config, fill_args, fill_sizes, 3, stream));
    assert_ok(ops->stream_synchronize(bctx, stream));
    assert_float_equal(mapped[N - 1], 1.0f, 0.0f);
    assert_ok(ops->host_free(bctx, mapped));

    assert_ok(ops->stream_destroy(bctx, stream));
    assert_ok(ops->mem_free(bctx, dev));
    assert_ok(ops->module_unload(bctx, module));
}

/* Managed memory written by a kernel and read on the host after a synchronize. */
static void test_managed(void **state)
{
    enum { N = 1024 };
    gm_backend_kernel *fill = NULL;
    gm_backend_kernel *scale = NULL;
    gm_backend_module *module = load_kernels(&fill, &scale);
    gm_devptr managed = 0;
    uint32_t value = 0xcafe;
    uint64_t n = N;
    void *args[3] = {&managed, &value, &n};
    const size_t sizes[3] = {8, 4, 8};
    gm_launch_config config = {{N / 128, 1, 1}, {128, 1, 1}, 0};
    gm_status status = ops->managed_alloc(bctx, N * 4, &managed);
    int kind = -1;

    (void)state;
    if (status == GM_ERR_UNSUPPORTED) {
        printf("note: no managed memory on this device\n");
        assert_ok(ops->module_unload(bctx, module));
        return;
    }
    assert_ok(status);
    assert_ok(ops->pointer_kind(bctx, (void *)(uintptr_t)managed, &kind));
    assert_int_equal(kind, GM_MEMORY_MANAGED);
    assert_ok(ops->launch(bctx, fill, &config, args, sizes, 3, NULL));
    assert_ok(ops->stream_synchronize(bctx, NULL));
    assert_int_equal(((uint32_t *)(uintptr_t)managed)[N - 1], 0xcafe);
    assert_ok(ops->mem_free(bctx, managed));
    assert_ok(ops->module_unload(bctx, module));
}

/* Registered user memory, pointer kinds, and an IPC handle. */
static void test_registration_and_queries(void **state)
{
    const size_t n = 1 << 16;
    unsigned char *user = malloc(n);
    unsigned char handle[64];
    gm_backend_stream *stream = NULL;
    gm_devptr dev = 0;
    gm_copy_desc d;
    int kind = -1;

    (void)state;
    assert_non_null(user);
    memset(user, 0x42, n);
    assert_ok(ops->host_register(bctx, user, n, GM_HOST_PORTABLE));
    assert_ok(ops->pointer_kind(bctx, user, &kind));
    assert_int_equal(kind, GM_MEMORY_PINNED);
    assert_ok(ops->mem_alloc(bctx, n, &dev));
    assert_ok(ops->pointer_kind(bctx, (void *)(uintptr_t)dev, &kind));
    assert_int_equal(kind, GM_MEMORY_DEVICE);
    assert_ok(ops->stream_create(bctx, 0, &stream));
    d = pitched(GM_COPY_DEVICE, dev, n, GM_COPY_HOST, addr(user), n, n, 1);
    assert_ok(ops->copy(bctx, &d, stream));
    assert_ok(ops->stream_synchronize(bctx, stream));
    assert_ok(ops->host_unregister(bctx, user));
    assert_ok(ops->host_register(bctx, user, n, 0)); /* again at once */
    assert_ok(ops->host_unregister(bctx, user));
    assert_ok(ops->pointer_kind(bctx, user, &kind));
    assert_int_equal(kind, GM_MEMORY_HOST);
    assert_ok(ops->ipc_get_handle(bctx, dev, handle, sizeof(handle)));
    assert_ok(ops->stream_destroy(bctx, stream));
    assert_ok(ops->mem_free(bctx, dev));
    free(user);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_properties),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_pitched_copies),
        cmocka_unit_test(test_memsets),
        cmocka_unit_test(test_async_pinned_and_events),
        cmocka_unit_test(test_host_functions),
        cmocka_unit_test(test_kernels),
        cmocka_unit_test(test_managed),
        cmocka_unit_test(test_registration_and_queries),
    };
    gm_backend_init_args args = {0, 32};
    gm_status status = ops->init(&args, &bctx);
    int failed = 0;

    if (status == GM_ERR_NO_DRIVER || status == GM_ERR_NO_DEVICE) {
        printf("no CUDA device (%s: %s): skipped\n", gm_status_name(status),
               gm_last_error_message());
        return SKIP;
    }
    if (status != GM_OK) {
        printf("CUDA backend init failed: %s: %s\n", gm_status_name(status),
               gm_last_error_message());
        return 1;
    }
    failed = cmocka_run_group_tests_name("cuda/device", tests, NULL, NULL);
    ops->fini(bctx);
    return failed;
}
