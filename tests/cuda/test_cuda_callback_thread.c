/*
 * The CUDA backend with stream callbacks run later on a driver thread (the
 * test driver cuda_callback_thread_shim.c in front of the double): each wait
 * the API offers (stream, event and context synchronize, a synchronous copy
 * to the host, a stream-ordered copy's host step) must wait for a callback
 * queued before it, and what the callback wrote must be visible after it.
 * The callback sleeps first, so a wait that does not wait reads the old
 * value; under ThreadSanitizer (CI) a wait without an acquire of the
 * callback's writes is a reported race, since the shim's own waiting is
 * invisible to TSan, as libcuda's is.
 */
#include <string.h>

#include "gm_test.h"

static gm_context *g_ctx = NULL;

static void set_int(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    *(int *)user = status == GM_OK ? 42 : -1;
}

/* A stream of `flags` with set_int(written) queued on it (run later by the shim). */
static gm_stream *stream_with_callback(unsigned flags, int *written)
{
    gm_stream *s = NULL;

    assert_ok(gm_stream_create(g_ctx, flags, &s));
    assert_ok(gm_stream_add_callback(s, set_int, written));
    return s;
}

static int setup(void **state)
{
    gm_context_options o;

    (void)state;
    gm_context_options_default(&o);
    o.backend = GM_BACKEND_CUDA;
    if (gm_context_create(&o, &g_ctx) == GM_OK)
        return 0;
    print_error("gm_context_create: %s\n", gm_last_error_message());
    return -1;
}

static int teardown(void **state)
{
    (void)state;
    gm_context_destroy(&g_ctx);
    return 0;
}

static void test_stream_synchronize(void **state)
{
    int written = 0;
    gm_stream *s = stream_with_callback(GM_STREAM_NON_BLOCKING, &written);

    (void)state;
    assert_ok(gm_stream_synchronize(s));
    assert_int_equal(written, 42);
    gm_stream_destroy(&s);
}

static void test_event_synchronize(void **state)
{
    int written = 0;
    gm_stream *s = stream_with_callback(GM_STREAM_NON_BLOCKING, &written);
    gm_event *e = NULL;

    (void)state;
    assert_ok(gm_event_create(g_ctx, false, &e));
    assert_ok(gm_event_record(e, s));
    assert_ok(gm_event_synchronize(e));
    assert_int_equal(written, 42);
    gm_event_destroy(&e);
    gm_stream_destroy(&s);
}

static void test_context_synchronize(void **state)
{
    int written = 0;
    gm_stream *s = stream_with_callback(GM_STREAM_NON_BLOCKING, &written);

    (void)state;
    assert_ok(gm_context_synchronize(g_ctx));
    assert_int_equal(written, 42);
    gm_stream_destroy(&s);
}

/* A synchronous copy to the host waits for the legacy stream, so for a blocking stream. */
static void test_sync_copy_to_host(void **state)
{
    float host[16] = {0}, back[16];
    int64_t n = 16;
    int written = 0;
    gm_ndview hv, bv;
    gm_array *dev = NULL;
    gm_stream *s = NULL;

    (void)state;
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_ndview_init(back, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &bv));
    assert_ok(gm_to_device(g_ctx, &hv, NULL, &dev));
    s = stream_with_callback(GM_STREAM_DEFAULT, &written);
    assert_ok(gm_copy(g_ctx, &bv, gm_array_view(dev), NULL));
    assert_int_equal(written, 42);
    gm_stream_destroy(&s);
    gm_array_release(&dev);
}

/*
 * A stream-ordered copy into a transposed host view: no pitched copy expresses
 * it, so the device data is staged and a host step (a callback) writes the
 * view. (The host step is the copy's last item: the shim runs device work at
 * once and callbacks later, so only a trailing callback keeps stream order.)
 */
static void test_host_step_result(void **state)
{
    enum { R = 32, C = 24 };
    static float src[R][C], dst[C][R];
    const int64_t shape[2] = {R, C}, tshape[2] = {C, R};
    gm_ndview hv, tv;
    gm_array *dev = NULL;
    gm_stream *s = NULL;

    (void)state;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            src[i][j] = (float)(100 * i + j);
    memset(dst, 0, sizeof(dst));
    assert_ok(gm_ndview_init(src, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_to_device(g_ctx, &hv, NULL, &dev));
    assert_ok(gm_ndview_init(dst, GM_FLOAT32, 2, tshape, NULL, GM_ORDER_C, &tv));
    assert_ok(gm_ndview_transpose(&tv, &tv));
    assert_ok(gm_stream_create(g_ctx, GM_STREAM_NON_BLOCKING, &s));
    assert_ok(gm_array_copy_to_host(dev, &tv, s));
    assert_ok(gm_stream_synchronize(s));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            assert_float_equal(dst[j][i], src[i][j], 0.0f);
    gm_array_release(&dev);
    gm_stream_destroy(&s);
}

/*
 * A stream-ordered copy from a transposed pageable host view to the device:
 * the core packs the source into a host image (a host step), then copies the
 * image to the device. libcuda may stage a pageable source when the call is
 * made instead of in stream order (the shim's copies run at once, the
 * callbacks later), so the image must be complete before the host-to-device
 * call, not merely queued before it.
 */
static void test_host_step_feeds_device(void **state)
{
    enum { R = 96, C = 80 }; /* over 64 pitched pieces either way: staged */
    static float src[C][R], back[R][C];
    const int64_t shape[2] = {R, C}, tshape[2] = {C, R};
    gm_ndview tv, bv;
    gm_array *dev = NULL;
    gm_stream *s = NULL;

    (void)state;
    for (int j = 0; j < C; j++)
        for (int i = 0; i < R; i++)
            src[j][i] = (float)(100 * i + j);
    memset(back, 0, sizeof(back));
    assert_ok(gm_ndview_init(src, GM_FLOAT32, 2, tshape, NULL, GM_ORDER_C, &tv));
    assert_ok(gm_ndview_transpose(&tv, &tv)); /* R x C, element (i, j) = src[j][i] */
    assert_ok(gm_device_array(g_ctx, 2, shape, GM_FLOAT32, GM_ORDER_C, &dev));
    assert_ok(gm_stream_create(g_ctx, GM_STREAM_NON_BLOCKING, &s));
    assert_ok(gm_array_copy_to_device(dev, &tv, s));
    assert_ok(gm_stream_synchronize(s));
    assert_ok(gm_ndview_init(back, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &bv));
    assert_ok(gm_array_copy_to_host(dev, &bv, NULL));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            assert_float_equal(back[i][j], (float)(100 * i + j), 0.0f);
    gm_array_release(&dev);
    gm_stream_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_synchronize),  cmocka_unit_test(test_event_synchronize),
        cmocka_unit_test(test_context_synchronize), cmocka_unit_test(test_sync_copy_to_host),
        cmocka_unit_test(test_host_step_result),    cmocka_unit_test(test_host_step_feeds_device),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
