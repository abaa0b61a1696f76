/*
 * The CUDA backend's copies, memsets, streams, events, modules and launches
 * against the driver test double: the data that arrives, and which driver
 * calls were made with which arguments (the double checks pitches,
 * reserved fields, alignment, parameter arrays and shared memory limits).
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_test_util.h"
#include "test_kernels.h"

/* A copy descriptor for `bytes` contiguous bytes. */
static gm_copy_desc linear(gm_copy_side dst_side, gm_devptr dst, gm_copy_side src_side,
                           gm_devptr src, size_t bytes)
{
    gm_copy_desc d = {dst_side, src_side, dst, src, bytes, 1, 1, bytes, 1, bytes, 1};

    return d;
}

static gm_devptr host_address(const void *p)
{
    return (gm_devptr)(uintptr_t)p;
}

/* 1-D copies: HtoD / DtoH / DtoD, synchronous and on a stream; sync ones finish the device. */
static void test_linear_copies(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *stream = NULL;
    gm_devptr a = 0;
    gm_devptr b = 0;
    char src[256];
    char dst[256];
    gm_copy_desc d;

    (void)state;
    for (int i = 0; i < 256; i++)
        src[i] = (char)i;
    assert_ok(CUDA_OPS->mem_alloc(bctx, 256, &a));
    assert_ok(CUDA_OPS->mem_alloc(bctx, 256, &b));
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &stream));
    gm_cuda_double_clear_calls();

    d = linear(GM_COPY_DEVICE, a, GM_COPY_HOST, host_address(src), 256);
    assert_ok(CUDA_OPS->copy(bctx, &d, NULL));
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpyHtoD_v2"), 1);
    /* the synchronous copy to the device waited for the legacy stream */
    assert_true(gm_cuda_double_find_call("cuStreamSynchronize",
                                         gm_cuda_double_find_call("cuMemcpyHtoD_v2", 0)) > 0);
    d = linear(GM_COPY_DEVICE, b, GM_COPY_DEVICE, a, 256);
    assert_ok(CUDA_OPS->copy(bctx, &d, stream));
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpyDtoDAsync_v2"), 1);
    memset(dst, 0, sizeof(dst));
    d = linear(GM_COPY_HOST, host_address(dst), GM_COPY_DEVICE, b, 256);
    assert_ok(CUDA_OPS->copy(bctx, &d, stream));
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpyDtoHAsync_v2"), 1);
    assert_memory_equal(dst, src, 256);
    memset(dst, 0, sizeof(dst));
    d = linear(GM_COPY_HOST, host_address(dst), GM_COPY_DEVICE, a + 16, 100);
    assert_ok(CUDA_OPS->copy(bctx, &d, NULL));
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpyDtoH_v2"), 1);
    assert_memory_equal(dst, src + 16, 100);

    /* empty copies make no call; a host-to-host copy takes the pitched path */
    gm_cuda_double_clear_calls();
    d = linear(GM_COPY_DEVICE, a, GM_COPY_HOST, host_address(src), 0);
    assert_ok(CUDA_OPS->copy(bctx, &d, NULL));
    assert_int_equal(cuda_test_work_calls(), 0);
    d = linear(GM_COPY_HOST, host_address(dst), GM_COPY_HOST, host_address(src), 64);
    assert_ok(CUDA_OPS->copy(bctx, &d, stream));
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpy2DAsync_v2"), 1);
    assert_status(CUDA_OPS->copy(bctx, NULL, NULL), GM_ERR_NULL_POINTER);
    d.src_side = (gm_copy_side)7;
    assert_status(CUDA_OPS->copy(bctx, &d, NULL), GM_ERR_INVALID_ARG);

    assert_ok(CUDA_OPS->stream_destroy(bctx, stream));
    assert_ok(CUDA_OPS->mem_free(bctx, a));
    assert_ok(CUDA_OPS->mem_free(bctx, b));
    cuda_test_close(bctx);
}

/* 2-D: pitched copies go to cuMemcpy2D with the descriptor's pitches; contiguous ones are 1-D. */
static void test_pitched_2d(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_devptr dev = 0;
    unsigned char host[5 * 48];
    unsigned char back[5 * 40];
    gm_copy_desc up = {GM_COPY_DEVICE, GM_COPY_HOST, 0, host_address(host), 40, 5, 1, 64, 0, 48, 0};
    gm_copy_desc down = {
        GM_COPY_HOST, GM_COPY_DEVICE, host_address(back), 0, 40, 5, 1, 40, 0, 64, 0};

    (void)state;
    for (size_t i = 0; i < sizeof(host); i++)
        host[i] = (unsigned char)(i * 7);
    assert_ok(CUDA_OPS->mem_alloc(bctx, 5 * 64, &dev));
    up.dst = down.src = dev;
    gm_cuda_double_clear_calls();
    assert_ok(CUDA_OPS->copy(bctx, &up, NULL));
    assert_ok(CUDA_OPS->copy(bctx, &down, NULL));
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpy2D_v2"), 2);
    for (int row = 0; row < 5; row++)
        assert_memory_equal(back + 40 * row, host + 48 * row, 40);

    /* equal pitch and width on both sides: one linear copy of 5 rows */
    gm_cuda_double_clear_calls();
    up.src_pitch = up.dst_pitch = 40;
    assert_ok(CUDA_OPS->copy(bctx, &up, NULL));
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpyHtoD_v2"), 1);
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpy2D_v2"), 0);

    /* a pitch below the width would overlap rows */
    up.src_pitch = 32;
    assert_status(CUDA_OPS->copy(bctx, &up, NULL), GM_ERR_INVALID_ARG);
    assert_message_contains("below the row width");
    assert_ok(CUDA_OPS->mem_free(bctx, dev));
    cuda_test_close(bctx);
}

/*
 * A device-to-device 2-D or 3-D copy whose pitches the driver refuses (it may,
 * for pitches not from cuMemAllocPitch) is done row by row instead, on a stream
 * too; other failures are not retried.
 */
static void test_dtod_pitch_refused(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *stream = NULL;
    gm_devptr a = 0, b = 0;
    unsigned char host[6 * 48], back[6 * 48];
    gm_copy_desc up = linear(GM_COPY_DEVICE, 0, GM_COPY_HOST, host_address(host), sizeof(host));
    gm_copy_desc down = linear(GM_COPY_HOST, host_address(back), GM_COPY_DEVICE, 0, sizeof(back));
    /* 3 planes of 2 rows of 40 bytes, pitch 48, each plane 2 rows */
    gm_copy_desc dd = {GM_COPY_DEVICE, GM_COPY_DEVICE, 0, 0, 40, 2, 3, 48, 2, 48, 2};

    (void)state;
    for (size_t i = 0; i < sizeof(host); i++)
        host[i] = (unsigned char)(i * 13 + 1);
    assert_ok(CUDA_OPS->mem_alloc(bctx, sizeof(host), &a));
    assert_ok(CUDA_OPS->mem_alloc(bctx, sizeof(host), &b));
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &stream));
    up.dst = a;
    assert_ok(CUDA_OPS->copy(bctx, &up, NULL));
    gm_cuda_double_set_dtod_pitch_align(512);
    for (int async = 0; async < 2; async++) {
        for (int depth = 1; depth <= 3; depth += 2) {
            memset(back, 0, sizeof(back));
            down.dst = host_address(back);
            down.src = b;
            up.dst = b;
            up.src = host_address(back);
            assert_ok(CUDA_OPS->copy(bctx, &up, NULL)); /* b cleared */
            dd.dst = b;
            dd.src = a;
            dd.depth = (size_t)depth;
            gm_cuda_double_clear_calls();
            gm_clear_error();
            assert_ok(CUDA_OPS->copy(bctx, &dd, async != 0 ? stream : NULL));
            assert_int_equal(gm_last_error(), GM_OK); /* the refusal left no message */
            assert_true(gm_cuda_double_count_calls(async != 0 ? "cuMemcpyDtoDAsync_v2"
                                                              : "cuMemcpyDtoD_v2") ==
                        2 * depth); /* one per row, after the refused pitched call */
            assert_ok(CUDA_OPS->stream_synchronize(bctx, stream));
            assert_ok(CUDA_OPS->copy(bctx, &down, NULL));
            for (int z = 0; z < depth; z++)
                for (int y = 0; y < 2; y++)
                    assert_memory_equal(back + (z * 2 + y) * 48, host + (z * 2 + y) * 48, 40);
            up.src = host_address(host);
        }
    }
    /* a host side is never retried row by row */
    gm_cuda_double_fail("cuMemcpy2D_v2", 1, CUDA_ERROR_INVALID_VALUE);
    {
        gm_copy_desc h2d = {
            GM_COPY_DEVICE, GM_COPY_HOST, a, host_address(host), 40, 2, 1, 48, 0, 48, 0};

        gm_cuda_double_clear_calls();
        assert_status(CUDA_OPS->copy(bctx, &h2d, NULL), GM_ERR_INVALID_ARG);
        assert_int_equal(gm_cuda_double_count_calls("cuMemcpyHtoD_v2"), 0);
    }
    gm_cuda_double_set_dtod_pitch_align(0);
    assert_ok(CUDA_OPS->stream_destroy(bctx, stream));
    assert_ok(CUDA_OPS->mem_free(bctx, a));
    assert_ok(CUDA_OPS->mem_free(bctx, b));
    cuda_test_close(bctx);
}

/* 3-D: padded planes go to cuMemcpy3D; contiguous planes or rows are merged into 2-D. */
static void test_pitched_3d(void **state)
{
    enum { W = 8, H = 3, D = 4, PITCH = 16, PLANE_ROWS = 5 };
    gm_backend_ctx *bctx = cuda_test_open();
    gm_devptr dev = 0;
    unsigned char host[D * H * W];
    unsigned char back[D * H * W];
    gm_copy_desc up = {
        GM_COPY_DEVICE, GM_COPY_HOST, 0, host_address(host), W, H, D, PITCH, PLANE_ROWS, W, H};
    gm_copy_desc down = {GM_COPY_HOST, GM_COPY_DEVICE, host_address(back), 0, W, H, D, W, H,
                         PITCH,        PLANE_ROWS};

    (void)state;
    for (size_t i = 0; i < sizeof(host); i++)
        host[i] = (unsigned char)(i + 1);
    assert_ok(CUDA_OPS->mem_alloc(bctx, D * PLANE_ROWS * PITCH, &dev));
    up.dst = down.src = dev;
    gm_cuda_double_clear_calls();
    assert_ok(CUDA_OPS->copy(bctx, &up, NULL));
    memset(back, 0, sizeof(back));
    assert_ok(CUDA_OPS->copy(bctx, &down, NULL));
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpy3D_v2"), 2);
    assert_memory_equal(back, host, sizeof(host));

    /* planes back to back (plane height == rows): one 2-D copy of D * H rows */
    gm_cuda_double_clear_calls();
    up.dst_height = H;
    assert_ok(CUDA_OPS->copy(bctx, &up, NULL));
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpy2D_v2"), 1);
    /* rows back to back, planes padded: one 2-D copy of D rows of a plane each */
    gm_cuda_double_clear_calls();
    up.dst_pitch = W;
    up.dst_height = PLANE_ROWS;
    assert_ok(CUDA_OPS->copy(bctx, &up, NULL));
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpy2D_v2"), 1);
    up.dst_height = 2;
    assert_status(CUDA_OPS->copy(bctx, &up, NULL), GM_ERR_INVALID_ARG);
    assert_ok(CUDA_OPS->mem_free(bctx, dev));
    cuda_test_close(bctx);
}

/* 3-D copies with padded planes on a stream: cuMemcpy3DAsync with the stream, both ways. */
static void test_pitched_3d_async(void **state)
{
    enum { W = 8, H = 3, D = 4, PITCH = 16, PLANE_ROWS = 5 };
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *stream = NULL;
    gm_devptr dev = 0;
    unsigned char host[D * H * W];
    unsigned char back[D * H * W];
    gm_copy_desc up = {
        GM_COPY_DEVICE, GM_COPY_HOST, 0, host_address(host), W, H, D, PITCH, PLANE_ROWS, W, H};
    gm_copy_desc down = {GM_COPY_HOST, GM_COPY_DEVICE, host_address(back), 0, W, H, D, W, H,
                         PITCH,        PLANE_ROWS};

    (void)state;
    for (size_t i = 0; i < sizeof(host); i++)
        host[i] = (unsigned char)(3 * i + 2);
    memset(back, 0, sizeof(back));
    assert_ok(CUDA_OPS->mem_alloc(bctx, D * PLANE_ROWS * PITCH, &dev));
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &stream));
    up.dst = down.src = dev;
    gm_cuda_double_clear_calls();
    assert_ok(CUDA_OPS->copy(bctx, &up, stream));
    assert_ok(CUDA_OPS->copy(bctx, &down, stream));
    assert_ok(CUDA_OPS->stream_synchronize(bctx, stream));
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpy3DAsync_v2"), 2);
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpy3D_v2"), 0);
    assert_memory_equal(back, host, sizeof(host));
    assert_ok(CUDA_OPS->stream_destroy(bctx, stream));
    assert_ok(CUDA_OPS->mem_free(bctx, dev));
    cuda_test_close(bctx);
}

/* Pitches above CU_DEVICE_ATTRIBUTE_MAX_PITCH are copied one row at a time. */
static void test_pitch_above_device_limit(void **state)
{
    gm_backend_ctx *bctx = NULL;
    gm_devptr dev = 0;
    unsigned char host[4 * 100] = {0};
    unsigned char back[4 * 100];
    gm_copy_desc up = {
        GM_COPY_DEVICE, GM_COPY_HOST, 0, host_address(host), 20, 4, 1, 100, 0, 100, 0};
    gm_copy_desc down = {
        GM_COPY_HOST, GM_COPY_DEVICE, host_address(back), 0, 20, 4, 1, 100, 0, 100, 0};

    (void)state;
    gm_cuda_double_set_max_pitch(64);
    bctx = cuda_test_open();
    for (size_t i = 0; i < sizeof(host); i++)
        host[i] = (unsigned char)(3 * i);
    memset(back, 0, sizeof(back));
    assert_ok(CUDA_OPS->mem_alloc(bctx, 400, &dev));
    up.dst = down.src = dev;
    assert_ok(CUDA_OPS->copy(bctx, &up, NULL));
    assert_ok(CUDA_OPS->copy(bctx, &down, NULL));
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpyHtoD_v2"), 4);
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpyDtoH_v2"), 4);
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpy2D_v2"), 0);
    for (int row = 0; row < 4; row++)
        assert_memory_equal(back + 100 * row, host + 100 * row, 20);
    /* host to host too: one cuMemcpy2D of a single row each, the gaps untouched */
    memset(back, 0, sizeof(back));
    up.dst_side = GM_COPY_HOST;
    up.dst = host_address(back);
    gm_cuda_double_clear_calls();
    assert_ok(CUDA_OPS->copy(bctx, &up, NULL));
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpy2D_v2"), 4);
    for (int i = 0; i < (int)sizeof(back); i++)
        assert_int_equal(back[i], i % 100 < 20 ? host[i] : 0);
    assert_ok(CUDA_OPS->mem_free(bctx, dev));
    cuda_test_close(bctx);
}

/*
 * A contiguous host-to-host copy wider than the max pitch (over 2 GiB on a
 * GPU; 4 KiB here): cuMemcpy2D refuses a pitch above the limit, so it goes
 * as rows of max_pitch bytes and the rest, synchronously and on a stream.
 */
static void test_host_row_above_device_limit(void **state)
{
    enum { W = 3 * 4096 + 100 };
    gm_backend_ctx *bctx = NULL;
    gm_backend_stream *stream = NULL;
    unsigned char *src = malloc(W), *dst = malloc(W);
    gm_copy_desc d = {
        GM_COPY_HOST, GM_COPY_HOST, host_address(dst), host_address(src), W, 1, 1, W, 1, W, 1};

    (void)state;
    assert_non_null(src);
    assert_non_null(dst);
    gm_cuda_double_set_max_pitch(4096);
    bctx = cuda_test_open();
    for (int i = 0; i < W; i++)
        src[i] = (unsigned char)(i * 13 + i / 4096);
    memset(dst, 0, W);
    gm_cuda_double_clear_calls();
    assert_ok(CUDA_OPS->copy(bctx, &d, NULL));
    assert_memory_equal(dst, src, W);
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpy2D_v2"), 2); /* 3 rows, then 100 bytes */
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &stream));
    memset(dst, 0, W);
    assert_ok(CUDA_OPS->copy(bctx, &d, stream));
    assert_ok(CUDA_OPS->stream_synchronize(bctx, stream));
    assert_memory_equal(dst, src, W);
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpy2DAsync_v2"), 2);
    d.width_bytes = d.src_pitch = d.dst_pitch = 2 * 4096; /* a whole number of rows */
    memset(dst, 0, W);
    gm_cuda_double_clear_calls();
    assert_ok(CUDA_OPS->copy(bctx, &d, NULL));
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpy2D_v2"), 1);
    assert_memory_equal(dst, src, 2 * 4096);
    assert_int_equal(dst[2 * 4096], 0);
    assert_ok(CUDA_OPS->stream_destroy(bctx, stream));
    free(src);
    free(dst);
    cuda_test_close(bctx);
}

/* memset of 1, 2, 4 and 8-byte patterns, synchronous and on a stream. */
static void test_memset(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *stream = NULL;
    gm_devptr dev = 0;
    const uint8_t b = 0xab;
    const uint16_t h = 0x1234;
    const uint32_t w = 0xdeadbeef;
    const uint64_t q = 0x0123456789abcdefu;
    const uint64_t q_equal = 0x5555aaaa5555aaaau;
    const uint32_t bytewise = 0x07070707;
    uint64_t back[16];
    gm_copy_desc down;

    (void)state;
    assert_ok(CUDA_OPS->mem_alloc(bctx, sizeof(back), &dev));
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &stream));
    down = linear(GM_COPY_HOST, host_address(back), GM_COPY_DEVICE, dev, sizeof(back));
    gm_cuda_double_clear_calls();

    assert_ok(CUDA_OPS->memset(bctx, dev, &b, 1, 128, NULL));
    assert_int_equal(gm_cuda_double_count_calls("cuMemsetD8_v2"), 1);
    assert_true(gm_cuda_double_find_call("cuStreamSynchronize", 0) >
                gm_cuda_double_find_call("cuMemsetD8_v2", 0));
    assert_ok(CUDA_OPS->copy(bctx, &down, NULL));
    assert_int_equal(((uint8_t *)back)[127], 0xab);

    assert_ok(CUDA_OPS->memset(bctx, dev, &h, 2, 64, stream));
    assert_int_equal(gm_cuda_double_count_calls("cuMemsetD16Async"), 1);
    assert_ok(CUDA_OPS->copy(bctx, &down, NULL));
    assert_int_equal(((uint16_t *)back)[63], 0x1234);

    assert_ok(CUDA_OPS->memset(bctx, dev, &w, 4, 32, NULL));
    assert_int_equal(gm_cuda_double_count_calls("cuMemsetD32_v2"), 1);
    assert_ok(CUDA_OPS->copy(bctx, &down, NULL));
    assert_int_equal(((uint32_t *)back)[31], 0xdeadbeef);

    /* distinct halves: two strided 32-bit memsets, low words then high words */
    assert_ok(CUDA_OPS->memset(bctx, dev, &q, 8, 16, stream));
    assert_int_equal(gm_cuda_double_count_calls("cuMemsetD2D32Async"), 2);
    assert_ok(CUDA_OPS->copy(bctx, &down, NULL));
    for (int i = 0; i < 16; i++)
        assert_int_equal(back[i], q);
    /* equal halves: one 32-bit memset of twice the count */
    assert_ok(CUDA_OPS->memset(bctx, dev, &q_equal, 8, 16, NULL));
    assert_int_equal(gm_cuda_double_count_calls("cuMemsetD32_v2"), 2);
    assert_ok(CUDA_OPS->copy(bctx, &down, NULL));
    assert_int_equal(back[15], q_equal);
    /* on a stream: 4-byte words, and 8-byte patterns of equal halves, as cuMemsetD32Async */
    assert_ok(CUDA_OPS->memset(bctx, dev, &w, 4, 32, stream));
    assert_int_equal(gm_cuda_double_count_calls("cuMemsetD32Async"), 1);
    assert_ok(CUDA_OPS->stream_synchronize(bctx, stream));
    assert_ok(CUDA_OPS->copy(bctx, &down, NULL));
    for (int i = 0; i < 32; i++)
        assert_int_equal(((uint32_t *)back)[i], 0xdeadbeef);
    assert_ok(CUDA_OPS->memset(bctx, dev, &q_equal, 8, 16, stream));
    assert_int_equal(gm_cuda_double_count_calls("cuMemsetD32Async"), 2);
    assert_ok(CUDA_OPS->stream_synchronize(bctx, stream));
    assert_ok(CUDA_OPS->copy(bctx, &down, NULL));
    for (int i = 0; i < 16; i++)
        assert_int_equal(back[i], q_equal);
    /* every byte equal: a byte memset, any alignment */
    assert_ok(CUDA_OPS->memset(bctx, dev + 1, &bytewise, 4, 8, NULL));
    assert_int_equal(gm_cuda_double_count_calls("cuMemsetD8_v2"), 2);

    assert_status(CUDA_OPS->memset(bctx, dev + 2, &w, 4, 4, NULL), GM_ERR_INVALID_ARG);
    assert_message_contains("not aligned");
    assert_status(CUDA_OPS->memset(bctx, dev, &w, 3, 4, NULL), GM_ERR_INVALID_ARG);
    assert_status(CUDA_OPS->memset(bctx, dev, NULL, 4, 4, NULL), GM_ERR_NULL_POINTER);
    assert_ok(CUDA_OPS->memset(bctx, dev, &w, 4, 0, NULL));

    assert_ok(CUDA_OPS->stream_destroy(bctx, stream));
    assert_ok(CUDA_OPS->mem_free(bctx, dev));
    cuda_test_close(bctx);
}

/* Built-in, created and wrapped streams: handles, flags, ownership. */
static void test_streams(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *def = NULL;
    gm_backend_stream *legacy = NULL;
    gm_backend_stream *per_thread = NULL;
    gm_backend_stream *blocking = NULL;
    gm_backend_stream *non_blocking = NULL;
    gm_backend_stream *wrapped = NULL;
    CUstream external = NULL;

    (void)state;
    assert_ok(CUDA_OPS->stream_builtin(bctx, GM_BUILTIN_STREAM_DEFAULT, &def));
    assert_ok(CUDA_OPS->stream_builtin(bctx, GM_BUILTIN_STREAM_LEGACY, &legacy));
    assert_ok(CUDA_OPS->stream_builtin(bctx, GM_BUILTIN_STREAM_PER_THREAD, &per_thread));
    assert_status(CUDA_OPS->stream_builtin(bctx, (gm_builtin_stream)9, &def), GM_ERR_INVALID_ARG);
    assert_null(CUDA_OPS->stream_native(bctx, def));
    assert_ptr_equal(CUDA_OPS->stream_native(bctx, legacy), CU_STREAM_LEGACY);
    assert_ptr_equal(CUDA_OPS->stream_native(bctx, per_thread), CU_STREAM_PER_THREAD);
    assert_ok(CUDA_OPS->stream_synchronize(bctx, legacy));
    assert_ok(CUDA_OPS->stream_query(bctx, per_thread));
    assert_ok(CUDA_OPS->stream_destroy(bctx, def)); /* built-ins are not destroyed */

    assert_ok(CUDA_OPS->stream_create(bctx, GM_STREAM_DEFAULT, &blocking));
    assert_ok(CUDA_OPS->stream_create(bctx, GM_STREAM_NON_BLOCKING, &non_blocking));
    assert_int_equal(gm_cuda_double_stream_flags(CUDA_OPS->stream_native(bctx, blocking)), 0);
    assert_int_equal(gm_cuda_double_stream_flags(CUDA_OPS->stream_native(bctx, non_blocking)),
                     CU_STREAM_NON_BLOCKING);
    assert_status(CUDA_OPS->stream_create(bctx, 0x80, &blocking), GM_ERR_INVALID_ARG);

    /* an external stream: wrapped, used, unwrapped or "destroyed", never destroyed */
    assert_int_equal(cuStreamCreate(&external, 0), CUDA_SUCCESS);
    assert_ok(CUDA_OPS->stream_wrap(bctx, external, &wrapped));
    assert_ptr_equal(CUDA_OPS->stream_native(bctx, wrapped), external);
    assert_ok(CUDA_OPS->stream_synchronize(bctx, wrapped));
    CUDA_OPS->stream_unwrap(bctx, wrapped);
    assert_ok(CUDA_OPS->stream_wrap(bctx, external, &wrapped));
    assert_ok(CUDA_OPS->stream_destroy(bctx, wrapped));
    assert_int_equal(gm_cuda_double_stream_flags(external), 0); /* still alive */
    assert_int_equal(cuStreamDestroy(external), CUDA_SUCCESS);

    /* pending work: GM_ERR_NOT_READY, and no error recorded for it */
    gm_clear_error();
    gm_cuda_double_fail("cuStreamQuery", 1, CUDA_ERROR_NOT_READY);
    assert_status(CUDA_OPS->stream_query(bctx, blocking), GM_ERR_NOT_READY);
    assert_int_equal(gm_last_error(), GM_OK);

    /* a failing cuStreamDestroy keeps the stream, so the queue can retry */
    gm_cuda_double_fail("cuStreamDestroy_v2", 1, CUDA_ERROR_UNKNOWN);
    assert_status(CUDA_OPS->stream_destroy(bctx, blocking), GM_ERR_DRIVER);
    assert_ok(CUDA_OPS->stream_destroy(bctx, blocking));
    /* its work failing is logged, not returned nor left as the thread's error */
    gm_clear_error();
    gm_cuda_double_fail("cuStreamSynchronize", 1, CUDA_ERROR_UNKNOWN);
    assert_ok(CUDA_OPS->stream_destroy(bctx, non_blocking));
    assert_int_equal(gm_last_error(), GM_OK);
    cuda_test_close(bctx);
}

static int callback_status = 1;
static int work_runs;
static int cleanup_runs;
static gm_status work_result;

static void on_callback(gm_status status, void *user)
{
    callback_status = status;
    *(int *)user += 1;
}

/* What a callback that calls an op and the driver saw. */
typedef struct call_inside {
    gm_backend_ctx *bctx;
    gm_status status;
    char message[256];
    CUresult direct;
} call_inside;

static void alloc_in_callback(gm_status status, void *user)
{
    call_inside *c = user;
    gm_devptr ptr = 0;
    CUcontext current = NULL;

    (void)status;
    c->status = CUDA_OPS->mem_alloc(c->bctx, 64, &ptr);
    snprintf(c->message, sizeof(c->message), "%s", gm_last_error_message());
    c->direct = cuCtxGetCurrent(&current);
}

/*
 * Inside a stream callback an op that needs the driver refuses without
 * calling it (the driver allows no call there). The double refuses driver
 * calls made there, as the driver does (CUDA_ERROR_NOT_PERMITTED), so that
 * every other test proves the backend's callbacks and host work never call
 * the driver.
 */
static void test_double_refuses_calls_in_callbacks(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *stream = NULL;
    call_inside c = {bctx, GM_OK, "", CUDA_SUCCESS};
    long violations = gm_cuda_double_violations();

    (void)state;
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &stream));
    assert_ok(CUDA_OPS->stream_add_callback(bctx, stream, alloc_in_callback, &c));
    assert_int_equal(c.status, GM_ERR_STATE);
    assert_non_null(strstr(c.message, "cuda mem_alloc: not allowed inside a stream callback"));
    assert_int_equal(c.direct, CUDA_ERROR_NOT_PERMITTED);
    assert_int_equal(gm_cuda_double_violations(), violations + 1); /* the direct call only */
    violations++;
    assert_non_null(strstr(gm_cuda_double_last_violation(), "inside a stream callback"));
    assert_ok(CUDA_OPS->stream_destroy(bctx, stream));
    CUDA_OPS->fini(bctx);
    assert_int_equal(gm_cuda_double_live_objects(), 0);
    assert_int_equal(gm_cuda_double_violations(), violations);
    gm_cuda_double_reset(); /* the next test starts with none counted */
}

/* Make the primary context of device 0 current for direct driver calls; returns it. */
static CUcontext direct_context(void)
{
    CUcontext ctx = NULL;

    assert_int_equal(cuInit(0), CUDA_SUCCESS);
    assert_int_equal(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    assert_int_equal(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    return ctx;
}

static void direct_context_done(void)
{
    assert_int_equal(cuCtxSetCurrent(NULL), CUDA_SUCCESS);
    assert_int_equal(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
    assert_int_equal(gm_cuda_double_live_objects(), 0);
}

/* The call returned `result` and counted one violation whose text contains `text`. */
#define assert_violation(call, result, text)                              \
    do {                                                                  \
        long before_ = gm_cuda_double_violations();                       \
                                                                          \
        assert_int_equal((call), (result));                               \
        assert_int_equal(gm_cuda_double_violations(), before_ + 1);       \
        assert_non_null(strstr(gm_cuda_double_last_violation(), (text))); \
    } while (0)

/*
 * The double refuses what the driver documents as undefined or invalid:
 * overlapping copies ("The memory areas may not overlap", cudaMemcpy2D /
 * cudaMemcpyAsync / cudaMemcpy3D), and a 2-D memset pitch that is not a
 * multiple of the element ("dstPitch offset must be four byte aligned").
 * Interleaved rows that share no byte are no overlap.
 */
static void test_double_refuses_overlap_and_memset_pitch(void **state)
{
    CUdeviceptr d = 0;
    unsigned char host[256];
    CUDA_MEMCPY2D m;
    CUDA_MEMCPY3D m3;

    (void)state;
    direct_context();
    assert_int_equal(cuMemAlloc(&d, 4096), CUDA_SUCCESS);
    assert_violation(cuMemcpyDtoD(d + 8, d, 64), CUDA_ERROR_INVALID_VALUE, "overlap");
    assert_violation(cuMemcpyDtoDAsync(d, d + 63, 64, NULL), CUDA_ERROR_INVALID_VALUE, "overlap");
    assert_int_equal(cuMemcpyDtoD(d + 64, d, 64), CUDA_SUCCESS); /* adjacent */
    /* 2-D: rows of 16 bytes at pitch 32; the destination's rows between the source's */
    memset(&m, 0, sizeof(m));
    m.srcMemoryType = m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    m.srcDevice = d;
    m.dstDevice = d + 16;
    m.srcPitch = m.dstPitch = 32;
    m.WidthInBytes = 16;
    m.Height = 8;
    assert_int_equal(cuMemcpy2D(&m), CUDA_SUCCESS);
    m.dstDevice = d + 8; /* now each destination row covers half of a source row */
    assert_violation(cuMemcpy2D(&m), CUDA_ERROR_INVALID_VALUE, "overlap");
    m.dstDevice = d + 32 * 7; /* the last source row is the first destination row */
    assert_violation(cuMemcpy2DAsync(&m, NULL), CUDA_ERROR_INVALID_VALUE, "overlap");
    /* host to host */
    memset(&m, 0, sizeof(m));
    m.srcMemoryType = m.dstMemoryType = CU_MEMORYTYPE_HOST;
    m.srcHost = host;
    m.dstHost = host + 4;
    m.srcPitch = m.dstPitch = 64;
    m.WidthInBytes = 16;
    m.Height = 2;
    assert_violation(cuMemcpy2D(&m), CUDA_ERROR_INVALID_VALUE, "overlap");
    /* 3-D: two planes of two rows; the destination's second plane is the source's first */
    memset(&m3, 0, sizeof(m3));
    m3.srcMemoryType = m3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    m3.srcDevice = d + 1024;
    m3.dstDevice = d + 1024 - 128;
    m3.srcPitch = m3.dstPitch = 64;
    m3.srcHeight = m3.dstHeight = 2;
    m3.WidthInBytes = 64;
    m3.Height = 2;
    m3.Depth = 2;
    assert_violation(cuMemcpy3D(&m3), CUDA_ERROR_INVALID_VALUE, "overlap");
    m3.dstDevice = d + 2048;
    assert_int_equal(cuMemcpy3D(&m3), CUDA_SUCCESS);
    /* 2-D memsets */
    assert_violation(cuMemsetD2D32(d, 10, 1, 2, 4), CUDA_ERROR_INVALID_VALUE, "not aligned");
    assert_violation(cuMemsetD2D32Async(d, 6, 1, 1, 2, NULL), CUDA_ERROR_INVALID_VALUE,
                     "not aligned");
    assert_int_equal(cuMemsetD2D32(d, 10, 1, 2, 1), CUDA_SUCCESS); /* one row: pitch unused */
    assert_int_equal(cuMemsetD2D32(d, 8, 1, 1, 4), CUDA_SUCCESS);
    /* read-only registration needs CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED */
    assert_int_equal(cuMemHostRegister(host, sizeof(host), CU_MEMHOSTREGISTER_READ_ONLY),
                     CUDA_ERROR_NOT_SUPPORTED);
    assert_int_equal(cuMemFree(d), CUDA_SUCCESS);
    direct_context_done();
    gm_cuda_double_reset(); /* the next test starts with none counted */
}

/*
 * Handles and device addresses the double does not hand out again at once
 * once destroyed or freed (a stale one is refused, even after a new object
 * of the kind), and cuEventRecord's rule:
 * "hEvent and hStream must be from the same context otherwise
 * CUDA_ERROR_INVALID_HANDLE is returned" (the NULL stream is the current
 * context's).
 */
static void test_double_refuses_stale_and_foreign_handles(void **state)
{
    CUcontext other = NULL;
    CUstream stream = NULL, again = NULL, foreign = NULL;
    CUevent event = NULL, event_again = NULL;
    CUdeviceptr freed[2] = {0, 0}, fresh = 0;

    (void)state;
    gm_cuda_double_set_reuse_handles(0); /* the default mode (GM_CUDA_DOUBLE_REUSE_HANDLES) */
    gm_cuda_double_set_device_count(2);
    direct_context();
    assert_int_equal(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
    assert_int_equal(cuEventCreate(&event, 0), CUDA_SUCCESS);
    assert_int_equal(cuEventRecord(event, stream), CUDA_SUCCESS);
    assert_int_equal(cuStreamDestroy(stream), CUDA_SUCCESS);
    assert_int_equal(cuEventDestroy(event), CUDA_SUCCESS);
    assert_int_equal(cuStreamCreate(&again, 0), CUDA_SUCCESS);
    assert_int_equal(cuEventCreate(&event_again, 0), CUDA_SUCCESS);
    assert_ptr_not_equal(again, stream);
    assert_ptr_not_equal(event_again, event);
    assert_violation(cuStreamSynchronize(stream), CUDA_ERROR_INVALID_HANDLE, "not live");
    assert_violation(cuEventQuery(event), CUDA_ERROR_INVALID_HANDLE, "not live");
    /* freed device memory is not where the next allocation goes: a stale address is refused */
    for (int i = 0; i < 2; i++)
        assert_int_equal(cuMemAlloc(&freed[i], 256), CUDA_SUCCESS);
    assert_int_equal(cuMemFree(freed[0]), CUDA_SUCCESS);
    assert_int_equal(cuMemAlloc(&fresh, 256), CUDA_SUCCESS);
    assert_true(fresh != freed[0]);
    assert_violation(cuMemsetD8(freed[0], 0, 256), CUDA_ERROR_INVALID_VALUE, "outside");
    assert_violation(cuMemcpyDtoD(freed[1], freed[0], 256), CUDA_ERROR_INVALID_VALUE, "outside");
    assert_int_equal(cuMemFree(fresh), CUDA_SUCCESS);
    assert_int_equal(cuMemFree(freed[1]), CUDA_SUCCESS);
    /* an event of device 1's context recorded on device 0's streams */
    assert_int_equal(cuDevicePrimaryCtxRetain(&other, 1), CUDA_SUCCESS);
    assert_int_equal(cuCtxPushCurrent(other), CUDA_SUCCESS);
    assert_int_equal(cuStreamCreate(&foreign, 0), CUDA_SUCCESS);
    assert_int_equal(cuEventDestroy(event_again), CUDA_SUCCESS);
    assert_int_equal(cuEventCreate(&event, 0), CUDA_SUCCESS);
    assert_int_equal(cuEventRecord(event, NULL), CUDA_SUCCESS); /* its own context's */
    assert_int_equal(cuEventRecord(event, foreign), CUDA_SUCCESS);
    assert_violation(cuEventRecord(event, again), CUDA_ERROR_INVALID_HANDLE, "context");
    assert_int_equal(cuCtxPopCurrent(NULL), CUDA_SUCCESS);
    assert_violation(cuEventRecord(event, NULL), CUDA_ERROR_INVALID_HANDLE, "context");
    assert_violation(cuEventRecord(event, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_HANDLE, "context");
    assert_int_equal(cuStreamWaitEvent(again, event, 0), CUDA_SUCCESS); /* allowed across */
    assert_int_equal(cuEventDestroy(event), CUDA_SUCCESS);
    assert_int_equal(cuStreamDestroy(foreign), CUDA_SUCCESS);
    assert_int_equal(cuStreamDestroy(again), CUDA_SUCCESS);
    assert_int_equal(cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
    direct_context_done();
    gm_cuda_double_reset(); /* the next test starts with none counted */
}

static gm_status host_work(void *user)
{
    (void)user;
    work_runs++;
    return work_result;
}

static void host_cleanup(void *user)
{
    (void)user;
    cleanup_runs++;
}

/* On another thread: a failing host step on the per-thread stream, later its synchronize. */
typedef struct per_thread_failure {
    gm_backend_ctx *bctx;
    gm_backend_stream *per_thread;
    atomic_int phase; /* 1: the step failed; 2: the main thread has looked */
    gm_status enqueued, synced, synced_again;
} per_thread_failure;

static gm_status failing_work(void *user)
{
    (void)user;
    return GM_ERR_LAUNCH;
}

static void *fail_on_per_thread(void *arg)
{
    per_thread_failure *f = arg;
    const struct timespec tick = {0, 1000 * 1000};

    f->enqueued = CUDA_OPS->stream_enqueue_host(f->bctx, f->per_thread, failing_work, NULL, NULL);
    atomic_store(&f->phase, 1);
    while (atomic_load(&f->phase) != 2)
        nanosleep(&tick, NULL);
    f->synced = CUDA_OPS->stream_synchronize(f->bctx, f->per_thread);
    f->synced_again = CUDA_OPS->stream_synchronize(f->bctx, f->per_thread);
    return NULL;
}

/*
 * The per-thread stream is one handle for each thread's own stream: a failed
 * host step on one thread's is that thread's error, not another's. The same
 * through a wrapped CU_STREAM_PER_THREAD handle (CuPy's Stream.ptds).
 */
static void per_thread_errors_per_thread(void **state, bool wrapped)
{
    const struct timespec tick = {0, 1000 * 1000};
    gm_backend_ctx *bctx = NULL;
    per_thread_failure f;
    pthread_t thread;
    int calls = 0;

    assert_int_equal(gm_test_restore_allocator(state), 0); /* a second thread allocates */
    bctx = cuda_test_open();
    memset(&f, 0, sizeof(f));
    f.bctx = bctx;
    atomic_init(&f.phase, 0);
    if (wrapped)
        assert_ok(CUDA_OPS->stream_wrap(bctx, (void *)CU_STREAM_PER_THREAD, &f.per_thread));
    else
        assert_ok(CUDA_OPS->stream_builtin(bctx, GM_BUILTIN_STREAM_PER_THREAD, &f.per_thread));
    assert_int_equal(pthread_create(&thread, NULL, fail_on_per_thread, &f), 0);
    while (atomic_load(&f.phase) != 1)
        nanosleep(&tick, NULL);
    callback_status = 1;
    assert_ok(CUDA_OPS->stream_add_callback(bctx, f.per_thread, on_callback, &calls));
    assert_int_equal(callback_status, GM_OK);                    /* not the other thread's error */
    assert_ok(CUDA_OPS->stream_synchronize(bctx, f.per_thread)); /* nor here */
    atomic_store(&f.phase, 2);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_ok(f.enqueued);
    assert_int_equal(f.synced, GM_ERR_LAUNCH); /* its own thread gets it */
    assert_ok(f.synced_again);                 /* once */
    if (wrapped)
        CUDA_OPS->stream_unwrap(bctx, f.per_thread);
    cuda_test_close(bctx);
    assert_int_equal(gm_test_use_cmocka_allocator(state), 0);
}

static void test_per_thread_errors_per_thread(void **state)
{
    per_thread_errors_per_thread(state, false);
}

static void test_wrapped_per_thread_errors_per_thread(void **state)
{
    per_thread_errors_per_thread(state, true);
}

/* Warnings logged about per-thread error slots that went with an error in them. */
static atomic_int slot_warnings;

static void count_slot_warnings(gm_log_level level, const char *message, void *user)
{
    (void)user;
    if (level == GM_LOG_WARN && strstr(message, "per-thread stream: ERR_LAUNCH") != NULL)
        atomic_fetch_add(&slot_warnings, 1);
}

/* On another thread: a failing host step on its per-thread stream, then exit at once. */
static void *fail_and_exit(void *arg)
{
    per_thread_failure *f = arg;

    f->enqueued = CUDA_OPS->stream_enqueue_host(f->bctx, f->per_thread, failing_work, NULL, NULL);
    return NULL;
}

/*
 * A thread's error slot of the per-thread stream goes when the thread has
 * exited and the host calls queued with it have run; the error left in it,
 * which nobody can take any more, is logged then. The context's end logs
 * the slots left (here this thread's). The driver holds the second thread's
 * call until after its exit: the slot must stay until then (it is written by
 * the call; a use after free under ASan otherwise).
 */
static void test_per_thread_slots_go_with_threads(void **state)
{
    gm_backend_ctx *bctx = NULL;
    per_thread_failure f;
    pthread_t thread;

    assert_int_equal(gm_test_restore_allocator(state), 0); /* a second thread allocates */
    bctx = cuda_test_open();
    memset(&f, 0, sizeof(f));
    f.bctx = bctx;
    assert_ok(CUDA_OPS->stream_builtin(bctx, GM_BUILTIN_STREAM_PER_THREAD, &f.per_thread));
    atomic_store(&slot_warnings, 0);
    gm_set_log_hook(count_slot_warnings, NULL);
    /* the call runs inside the enqueue (the double's default): the slot goes at the exit */
    assert_int_equal(pthread_create(&thread, NULL, fail_and_exit, &f), 0);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_ok(f.enqueued);
    assert_int_equal(atomic_load(&slot_warnings), 1);
    /* the call is held past the exit: the slot goes when it has run */
    gm_cuda_double_hold_callbacks(1);
    assert_int_equal(pthread_create(&thread, NULL, fail_and_exit, &f), 0);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_ok(f.enqueued);
    assert_int_equal(atomic_load(&slot_warnings), 1);
    gm_cuda_double_hold_callbacks(0);
    assert_int_equal(gm_cuda_double_run_held_callbacks(CUDA_SUCCESS), 1);
    assert_int_equal(atomic_load(&slot_warnings), 2);
    /* this thread's slot, with an error in it, goes with the context */
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, f.per_thread, failing_work, NULL, NULL));
    cuda_test_close(bctx);
    assert_int_equal(atomic_load(&slot_warnings), 3);
    gm_set_log_hook(NULL, NULL);
    assert_int_equal(gm_test_use_cmocka_allocator(state), 0);
}

/* Warnings logged about created or wrapped streams that went with an error of their host work. */
static atomic_int stream_warnings;

static void count_stream_warnings(gm_log_level level, const char *message, void *user)
{
    (void)user;
    if (level == GM_LOG_WARN && strstr(message, "discarding the unreported error of host work") &&
        strstr(message, "per-thread") == NULL)
        atomic_fetch_add(&stream_warnings, 1);
}

/*
 * A failed host step queued through a wrapper of a stream this context
 * created is that stream's error (as on the other backends; the wrapper kept
 * its own). A created stream destroyed, or a wrapper of someone else's
 * CUstream unwrapped, with such an error untaken: logged as it goes (it was
 * dropped silently).
 */
static void test_stream_errors_of_wrappers_and_streams_that_go(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *created = NULL, *wrapped = NULL;
    CUstream theirs = NULL;

    (void)state;
    atomic_store(&stream_warnings, 0);
    gm_set_log_hook(count_stream_warnings, NULL);
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &created));
    assert_ok(CUDA_OPS->stream_wrap(bctx, CUDA_OPS->stream_native(bctx, created), &wrapped));
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, wrapped, failing_work, NULL, NULL));
    assert_status(CUDA_OPS->stream_synchronize(bctx, created), GM_ERR_LAUNCH);
    assert_ok(CUDA_OPS->stream_synchronize(bctx, wrapped)); /* reported once */
    CUDA_OPS->stream_unwrap(bctx, wrapped);
    assert_int_equal(atomic_load(&stream_warnings), 0);
    /* the wrapper outlives its owner's destroy: the error still lands on the owner */
    assert_ok(CUDA_OPS->stream_wrap(bctx, CUDA_OPS->stream_native(bctx, created), &wrapped));
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, created, failing_work, NULL, NULL));
    assert_ok(CUDA_OPS->stream_destroy(bctx, created));
    assert_int_equal(atomic_load(&stream_warnings), 0); /* the wrapper still holds it */
    CUDA_OPS->stream_unwrap(bctx, wrapped);
    assert_int_equal(atomic_load(&stream_warnings), 1); /* as the created stream goes */
    /* someone else's CUstream: the wrapper keeps the error */
    assert_int_equal(cuStreamCreate(&theirs, CU_STREAM_DEFAULT), CUDA_SUCCESS);
    assert_ok(CUDA_OPS->stream_wrap(bctx, theirs, &wrapped));
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, wrapped, failing_work, NULL, NULL));
    CUDA_OPS->stream_unwrap(bctx, wrapped);
    assert_int_equal(atomic_load(&stream_warnings), 2);
    assert_int_equal(cuStreamDestroy(theirs), CUDA_SUCCESS);
    gm_set_log_hook(NULL, NULL);
    cuda_test_close(bctx);
}

/*
 * While a blocking stream captures into a graph the legacy stream is
 * unusable (cuStreamIsCapturing: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT): host
 * work on it is refused before cuStreamAddCallback, as on a capturing stream.
 */
static void test_legacy_refused_during_implicit_capture(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *legacy = NULL, *created = NULL;
    long before = 0;

    (void)state;
    assert_ok(CUDA_OPS->stream_builtin(bctx, GM_BUILTIN_STREAM_LEGACY, &legacy));
    assert_ok(CUDA_OPS->stream_create(bctx, GM_STREAM_NON_BLOCKING, &created));
    work_runs = 0;
    work_result = GM_OK;
    gm_cuda_double_set_capturing(2);
    before = gm_cuda_double_count_calls("cuStreamAddCallback");
    assert_status(CUDA_OPS->stream_enqueue_host(bctx, legacy, host_work, NULL, NULL),
                  GM_ERR_UNSUPPORTED);
    assert_message_contains("a blocking stream is");
    assert_int_equal(gm_cuda_double_count_calls("cuStreamAddCallback"), before);
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, created, host_work, NULL, NULL));
    assert_int_equal(work_runs, 1);
    gm_cuda_double_set_capturing(0);
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, legacy, host_work, NULL, NULL));
    assert_int_equal(work_runs, 2);
    assert_ok(CUDA_OPS->stream_destroy(bctx, created));
    cuda_test_close(bctx);
}

/*
 * A wrapped CU_STREAM_LEGACY or NULL handle is the legacy stream: a host step
 * that failed there is reported once, by whichever handle of the legacy
 * stream synchronizes first (the built-in default stream here); one left
 * untaken is logged at the context's end.
 */
static void test_wrapped_legacy_shares_errors(void **state)
{
    void *const natives[2] = {(void *)CU_STREAM_LEGACY, NULL};
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *wrapped = NULL, *legacy = NULL;

    (void)state;
    assert_ok(CUDA_OPS->stream_builtin(bctx, GM_BUILTIN_STREAM_DEFAULT, &legacy));
    for (int i = 0; i < 2; i++) {
        assert_ok(CUDA_OPS->stream_wrap(bctx, natives[i], &wrapped));
        assert_ok(CUDA_OPS->stream_enqueue_host(bctx, wrapped, failing_work, NULL, NULL));
        assert_status(CUDA_OPS->stream_synchronize(bctx, legacy), GM_ERR_LAUNCH);
        assert_ok(CUDA_OPS->stream_synchronize(bctx, wrapped)); /* taken already */
        CUDA_OPS->stream_unwrap(bctx, wrapped);
    }
    /* left untaken: the context's end logs it */
    atomic_store(&stream_warnings, 0);
    gm_set_log_hook(count_stream_warnings, NULL);
    assert_ok(CUDA_OPS->stream_wrap(bctx, NULL, &wrapped));
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, wrapped, failing_work, NULL, NULL));
    CUDA_OPS->stream_unwrap(bctx, wrapped);
    assert_int_equal(atomic_load(&stream_warnings), 0);
    cuda_test_close(bctx);
    assert_int_equal(atomic_load(&stream_warnings), 1);
    gm_set_log_hook(NULL, NULL);
}

/*
 * Callbacks and host work through cuStreamAddCallback; a failing work status
 * reaches synchronize. After a context error the callback gets the error,
 * and host work is skipped with its cleanup still run.
 */
static void test_host_functions(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *stream = NULL;
    gm_backend_stream *def = NULL;
    int calls = 0;
    long before = 0;

    (void)state;
    work_runs = cleanup_runs = 0;
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &stream));
    assert_ok(CUDA_OPS->stream_builtin(bctx, GM_BUILTIN_STREAM_DEFAULT, &def));
    assert_ok(CUDA_OPS->stream_add_callback(bctx, stream, on_callback, &calls));
    assert_ok(CUDA_OPS->stream_add_callback(bctx, def, on_callback, &calls));
    assert_int_equal(calls, 2);
    assert_int_equal(callback_status, GM_OK);
    assert_int_equal(gm_cuda_double_count_calls("cuStreamAddCallback"), 2);

    work_result = GM_OK;
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, stream, host_work, NULL, host_cleanup));
    assert_ok(CUDA_OPS->stream_synchronize(bctx, stream));
    work_result = GM_ERR_LAUNCH;
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, stream, host_work, NULL, host_cleanup));
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, stream, host_work, NULL, NULL));
    assert_int_equal(work_runs, 3);
    assert_int_equal(cleanup_runs, 2);
    assert_ok(CUDA_OPS->stream_query(bctx, stream)); /* a query only asks: the error stays */
    assert_ok(CUDA_OPS->stream_add_callback(bctx, stream, on_callback, &calls));
    assert_int_equal(calls, 3);
    assert_int_equal(callback_status, GM_ERR_LAUNCH); /* a later callback sees it, as elsewhere */
    assert_status(CUDA_OPS->stream_synchronize(bctx, stream), GM_ERR_LAUNCH);
    assert_message_contains("host work enqueued on the stream failed with ERR_LAUNCH");
    assert_ok(CUDA_OPS->stream_synchronize(bctx, stream)); /* reported once */

    /* the default stream is the legacy one: one FIFO, one error */
    {
        gm_backend_stream *legacy = NULL;

        assert_ok(CUDA_OPS->stream_builtin(bctx, GM_BUILTIN_STREAM_LEGACY, &legacy));
        assert_ok(CUDA_OPS->stream_enqueue_host(bctx, def, host_work, NULL, NULL));
        assert_status(CUDA_OPS->stream_synchronize(bctx, legacy), GM_ERR_LAUNCH);
        assert_ok(CUDA_OPS->stream_synchronize(bctx, def)); /* reported once */
    }
    work_result = GM_OK;

    /* refused by the driver: nothing runs, nothing is cleaned up, nothing leaks */
    gm_cuda_double_fail("cuStreamAddCallback", 1, CUDA_ERROR_INVALID_VALUE);
    assert_status(CUDA_OPS->stream_enqueue_host(bctx, stream, host_work, NULL, host_cleanup),
                  GM_ERR_INVALID_ARG);
    assert_int_equal(work_runs, 4);
    assert_int_equal(cleanup_runs, 2);
    assert_status(CUDA_OPS->stream_add_callback(bctx, stream, NULL, NULL), GM_ERR_NULL_POINTER);

    /* after a context error: the callback gets it; the work is skipped, its cleanup runs */
    gm_cuda_double_set_callback_status(CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_ok(CUDA_OPS->stream_add_callback(bctx, stream, on_callback, &calls));
    assert_int_equal(calls, 4);
    assert_int_equal(callback_status, GM_ERR_CONTEXT_LOST); /* a kernel fault */
    work_result = GM_OK;
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, stream, host_work, NULL, host_cleanup));
    assert_int_equal(work_runs, 4);
    assert_int_equal(cleanup_runs, 3);
    gm_cuda_double_set_callback_status(CUDA_SUCCESS);
    assert_status(CUDA_OPS->stream_synchronize(bctx, stream), GM_ERR_CONTEXT_LOST);

    /* a stream capturing into a graph: refused before the driver is asked, nothing runs */
    gm_cuda_double_set_capturing(1);
    before = gm_cuda_double_count_calls("cuStreamAddCallback");
    assert_status(CUDA_OPS->stream_add_callback(bctx, stream, on_callback, &calls),
                  GM_ERR_UNSUPPORTED);
    assert_message_contains("captured into a CUDA graph");
    assert_status(CUDA_OPS->stream_enqueue_host(bctx, stream, host_work, NULL, host_cleanup),
                  GM_ERR_UNSUPPORTED);
    assert_int_equal(gm_cuda_double_count_calls("cuStreamAddCallback"), before);
    assert_int_equal(calls, 4);
    assert_int_equal(cleanup_runs, 3);
    gm_cuda_double_set_capturing(0);
    assert_ok(CUDA_OPS->stream_destroy(bctx, stream));
    cuda_test_close(bctx);
}

/*
 * Host work still queued when its stream goes (a created stream destroyed
 * after a context error, whose synchronize returns at once; a wrapped
 * stream, which is never synchronized): the driver runs it later, and its
 * failure status is written to the stream's wrapper, which must still be
 * there (ASan: a heap-use-after-free without the references).
 */
static void test_host_work_outlives_stream(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *created = NULL, *wrapped = NULL, *owner = NULL;

    (void)state;
    work_runs = cleanup_runs = 0;
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &created));
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &owner)); /* stands for the user's CUstream */
    assert_ok(CUDA_OPS->stream_wrap(bctx, CUDA_OPS->stream_native(bctx, owner), &wrapped));
    gm_cuda_double_hold_callbacks(1);
    work_result = GM_ERR_LAUNCH;
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, created, host_work, NULL, host_cleanup));
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, wrapped, host_work, NULL, host_cleanup));
    assert_ok(CUDA_OPS->stream_destroy(bctx, created));
    CUDA_OPS->stream_unwrap(bctx, wrapped);
    assert_int_equal(work_runs, 0);
    assert_int_equal(gm_cuda_double_run_held_callbacks(CUDA_SUCCESS), 2);
    assert_int_equal(work_runs, 2); /* each wrote ERR_LAUNCH into its wrapper, then freed it */
    assert_int_equal(cleanup_runs, 2);
    gm_cuda_double_hold_callbacks(0);
    work_result = GM_OK;
    assert_ok(CUDA_OPS->stream_destroy(bctx, owner));
    cuda_test_close(bctx);
}

/* A thread in device_synchronize; `done` says when it returned. */
typedef struct sync_job {
    gm_backend_ctx *bctx;
    gm_status status;
    atomic_int done;
} sync_job;

static void *run_device_synchronize(void *user)
{
    sync_job *job = user;

    job->status = CUDA_OPS->device_synchronize(job->bctx);
    atomic_store(&job->done, 1);
    return NULL;
}

/*
 * After a context error cuCtxSynchronize returns at once while the driver
 * may still run queued callbacks (with the error): device_synchronize then
 * waits for them, since its caller frees what they use; it returns the
 * error. When cuCtxSynchronize succeeds, everything has run: no wait.
 */
static void test_device_synchronize_waits_for_callbacks(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *stream = NULL;
    sync_job job = {NULL, GM_OK, 0};
    struct timespec pause = {0, 50 * 1000 * 1000};
    int calls = 0, returned_early = 0;
    pthread_t thread;

    (void)state;
    job.bctx = bctx;
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &stream));
    gm_cuda_double_hold_callbacks(1);
    assert_ok(CUDA_OPS->stream_add_callback(bctx, stream, on_callback, &calls));
    gm_cuda_double_fail("cuCtxSynchronize", 1, CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(pthread_create(&thread, NULL, run_device_synchronize, &job), 0);
    nanosleep(&pause, NULL);
    returned_early = atomic_load(&job.done);
    assert_int_equal(gm_cuda_double_run_held_callbacks(CUDA_ERROR_ILLEGAL_ADDRESS), 1);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_false(returned_early);
    assert_int_equal(job.status, GM_ERR_CONTEXT_LOST);
    assert_int_equal(calls, 1);
    assert_int_equal(callback_status, GM_ERR_CONTEXT_LOST);
    gm_cuda_double_hold_callbacks(0);
    assert_ok(CUDA_OPS->device_synchronize(bctx));
    assert_ok(CUDA_OPS->stream_destroy(bctx, stream));
    cuda_test_close(bctx);
}

/* Events with and without timing; record, wait, query, synchronize, elapsed. */
static void test_events(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *stream = NULL;
    gm_backend_event *start = NULL;
    gm_backend_event *end = NULL;
    gm_backend_event *untimed = NULL;
    float ms = -1.0f;

    (void)state;
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &stream));
    assert_ok(CUDA_OPS->event_create(bctx, 1, &start));
    assert_ok(CUDA_OPS->event_create(bctx, 1, &end));
    assert_ok(CUDA_OPS->event_create(bctx, 0, &untimed));
    assert_int_equal(gm_cuda_double_event_flags((CUevent)start), CU_EVENT_DEFAULT);
    assert_int_equal(gm_cuda_double_event_flags((CUevent)untimed), CU_EVENT_DISABLE_TIMING);

    assert_ok(CUDA_OPS->event_record(bctx, start, stream));
    assert_ok(CUDA_OPS->event_record(bctx, untimed, NULL));
    assert_ok(CUDA_OPS->stream_wait_event(bctx, stream, untimed));
    assert_ok(CUDA_OPS->event_record(bctx, end, stream));
    assert_ok(CUDA_OPS->event_query(bctx, end));
    assert_ok(CUDA_OPS->event_synchronize(bctx, end));
    assert_ok(CUDA_OPS->event_elapsed(bctx, start, end, &ms));
    assert_float_equal(ms, 3.0f, 1e-6f);
    assert_status(CUDA_OPS->event_elapsed(bctx, start, untimed, &ms), GM_ERR_INVALID_HANDLE);
    assert_message_contains("cuEventElapsedTime failed: CUDA_ERROR_INVALID_HANDLE");
    /* an event not completed yet: NOT_READY with a message of its own, not an older one */
    gm_cuda_double_fail("cuEventElapsedTime_v2", 1, CUDA_ERROR_NOT_READY);
    assert_status(CUDA_OPS->event_elapsed(bctx, start, end, &ms), GM_ERR_NOT_READY);
    assert_message_contains("an event has not completed yet");

    gm_clear_error();
    gm_cuda_double_fail("cuEventQuery", 1, CUDA_ERROR_NOT_READY);
    assert_status(CUDA_OPS->event_query(bctx, end), GM_ERR_NOT_READY);
    assert_int_equal(gm_last_error(), GM_OK);

    assert_ok(CUDA_OPS->event_destroy(bctx, start));
    assert_ok(CUDA_OPS->event_destroy(bctx, end));
    assert_ok(CUDA_OPS->event_destroy(bctx, untimed));
    assert_ok(CUDA_OPS->event_destroy(bctx, NULL));
    assert_ok(CUDA_OPS->stream_destroy(bctx, stream));
    cuda_test_close(bctx);
}

/*
 * Work behind a stream callback the driver has not run yet is not done: the
 * stream's query, and those of an event recorded after it, say NOT_READY
 * (as does the elapsed time with such an event), until it has run; other
 * streams are not held up.
 */
static void test_queries_wait_for_held_callbacks(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *stream = NULL;
    gm_backend_stream *other = NULL;
    gm_backend_stream *legacy = NULL;
    gm_backend_event *start = NULL;
    gm_backend_event *end = NULL;
    float ms = -1.0f;

    (void)state;
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &stream));
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &other));
    assert_ok(CUDA_OPS->stream_builtin(bctx, GM_BUILTIN_STREAM_LEGACY, &legacy));
    assert_ok(CUDA_OPS->event_create(bctx, 1, &start));
    assert_ok(CUDA_OPS->event_create(bctx, 1, &end));
    assert_ok(CUDA_OPS->event_record(bctx, start, stream));
    gm_cuda_double_hold_callbacks(1);
    work_runs = 0;
    assert_ok(CUDA_OPS->stream_enqueue_host(bctx, stream, host_work, NULL, NULL));
    assert_ok(CUDA_OPS->event_record(bctx, end, stream));
    assert_status(CUDA_OPS->stream_query(bctx, stream), GM_ERR_NOT_READY);
    assert_status(CUDA_OPS->event_query(bctx, end), GM_ERR_NOT_READY);
    assert_status(CUDA_OPS->event_elapsed(bctx, start, end, &ms), GM_ERR_NOT_READY);
    assert_ok(CUDA_OPS->event_query(bctx, start)); /* recorded before */
    assert_ok(CUDA_OPS->stream_query(bctx, other));
    assert_ok(CUDA_OPS->stream_query(bctx, legacy));
    assert_int_equal(work_runs, 0);
    assert_int_equal(gm_cuda_double_run_held_callbacks(CUDA_SUCCESS), 1);
    gm_cuda_double_hold_callbacks(0);
    assert_int_equal(work_runs, 1);
    assert_ok(CUDA_OPS->stream_query(bctx, stream));
    assert_ok(CUDA_OPS->event_query(bctx, end));
    assert_ok(CUDA_OPS->event_elapsed(bctx, start, end, &ms));
    assert_ok(CUDA_OPS->event_destroy(bctx, start));
    assert_ok(CUDA_OPS->event_destroy(bctx, end));
    assert_ok(CUDA_OPS->stream_destroy(bctx, other));
    assert_ok(CUDA_OPS->stream_destroy(bctx, stream));
    cuda_test_close(bctx);
}

/* Modules: PTX with or without its NUL, other kinds refused, JIT errors with their log. */
static void test_module_load(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_module *module = NULL;
    gm_backend_kernel *kernel = NULL;
    size_t bytes = strlen(gm_test_kernels_ptx);
    char *unterminated = malloc(bytes);
    static const char bad[] = ".version 7.0\n.target sm_52\n// GM_DOUBLE_JIT_ERROR\n";
    gm_devptr coeffs = 0;
    size_t coeff_bytes = 0;
    gm_kernel_attrs attrs;

    (void)state;
    assert_non_null(unterminated);
    memcpy(unterminated, gm_test_kernels_ptx, bytes); /* no NUL: ASan sees any overread */
    assert_ok(CUDA_OPS->module_load(bctx, GM_IMAGE_CUDA, unterminated, bytes, &module));
    free(unterminated);
    assert_ok(CUDA_OPS->module_get_kernel(bctx, module, "gm_test_fill_u32", &kernel));
    assert_status(CUDA_OPS->module_get_kernel(bctx, module, "no_such_kernel", &kernel),
                  GM_ERR_NOT_FOUND);
    assert_message_contains("no kernel \"no_such_kernel\"");
    assert_message_contains("CUDA_ERROR_NOT_FOUND");
    assert_ok(CUDA_OPS->module_get_global(bctx, module, "gm_test_coeffs", &coeffs, &coeff_bytes));
    assert_int_equal(coeff_bytes, 16);
    assert_status(CUDA_OPS->module_get_global(bctx, module, "nope", &coeffs, &coeff_bytes),
                  GM_ERR_NOT_FOUND);
    assert_ok(CUDA_OPS->module_get_kernel(bctx, module, "gm_test_fill_u32", &kernel));
    assert_ok(CUDA_OPS->kernel_attrs(bctx, kernel, &attrs));
    assert_int_equal(attrs.max_threads_per_block, 1024);
    assert_int_equal(attrs.static_shared_bytes, 0);
    assert_int_equal(attrs.kernarg_bytes, 24); /* u64, u32, (pad), u64 */
    assert_ok(CUDA_OPS->module_unload(bctx, module));

    assert_status(CUDA_OPS->module_load(bctx, GM_IMAGE_HOST, gm_test_kernels_ptx, 10, &module),
                  GM_ERR_UNSUPPORTED);
    assert_status(CUDA_OPS->module_load(bctx, GM_IMAGE_CUDA, gm_test_kernels_ptx, 0, &module),
                  GM_ERR_INVALID_ARG);
    assert_status(CUDA_OPS->module_load(bctx, GM_IMAGE_CUDA, bad, sizeof(bad), &module),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("CUDA_ERROR_INVALID_PTX");
    assert_message_contains("JIT log: ptxas fatal: GM_DOUBLE_JIT_ERROR requested");
    cuda_test_close(bctx);
}

/* Launches: parameters by pointer, grid and block, dynamic shared memory, opt-in above 48 KiB. */
static void test_launch(void **state)
{
    enum { N = 1000 };
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_module *module = NULL;
    gm_backend_kernel *fill = NULL;
    gm_backend_kernel *scale = NULL;
    gm_backend_stream *stream = NULL;
    gm_devptr data = 0;
    gm_devptr coeffs = 0;
    size_t coeff_bytes = 0;
    uint32_t value = 0x3f800000; /* 1.0f */
    uint64_t n = N;
    const float factors[4] = {3.0f, 0.5f, 0.0f, 0.0f};
    float back[N];
    void *fill_args[3] = {&data, &value, &n};
    const size_t fill_sizes[3] = {8, 4, 8};
    void *scale_args[2] = {&data, &n};
    const size_t scale_sizes[2] = {8, 8};
    gm_launch_config config = {{4, 1, 1}, {256, 1, 1}, 0};
    gm_copy_desc to_const;
    gm_copy_desc down;

    (void)state;
    assert_ok(CUDA_OPS->module_load(bctx, GM_IMAGE_CUDA, gm_test_kernels_ptx,
                                    sizeof(gm_test_kernels_ptx), &module));
    assert_ok(CUDA_OPS->module_get_kernel(bctx, module, "gm_test_fill_u32", &fill));
    assert_ok(CUDA_OPS->module_get_kernel(bctx, module, "gm_test_scale_f32", &scale));
    assert_ok(CUDA_OPS->module_get_global(bctx, module, "gm_test_coeffs", &coeffs, &coeff_bytes));
    assert_ok(CUDA_OPS->mem_alloc(bctx, N * 4, &data));
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &stream));
    to_const = linear(GM_COPY_DEVICE, coeffs, GM_COPY_HOST, host_address(factors), 16);
    assert_ok(CUDA_OPS->copy(bctx, &to_const, NULL)); /* constant memory */

    assert_ok(CUDA_OPS->launch(bctx, fill, &config, fill_args, fill_sizes, 3, stream));
    config.dynamic_shared_bytes = 256 * 4;
    assert_ok(CUDA_OPS->launch(bctx, scale, &config, scale_args, scale_sizes, 2, stream));
    assert_int_equal(gm_cuda_double_last_launch_shared(), 1024);
    assert_int_equal(gm_cuda_double_count_calls("cuFuncSetAttribute"), 0);
    assert_ok(CUDA_OPS->stream_synchronize(bctx, stream));
    down = linear(GM_COPY_HOST, host_address(back), GM_COPY_DEVICE, data, sizeof(back));
    assert_ok(CUDA_OPS->copy(bctx, &down, NULL));
    for (int i = 0; i < N; i++)
        assert_float_equal(back[i], 3.5f, 0.0f);

    /* above 48 KiB: opt in with cuFuncSetAttribute first, then launch */
    gm_cuda_double_clear_calls();
    config.dynamic_shared_bytes = 100 * 1024;
    assert_ok(CUDA_OPS->launch(bctx, scale, &config, scale_args, scale_sizes, 2, NULL));
    assert_true(gm_cuda_double_find_call("cuFuncSetAttribute", 0) <
                gm_cuda_double_find_call("cuLaunchKernel", 0));
    assert_int_equal(gm_cuda_double_function_max_dynamic_shared((CUfunction)scale), 100 * 1024);
    assert_int_equal(gm_cuda_double_last_launch_shared(), 100 * 1024);

    /* shapes the driver refuses are refused before it */
    gm_cuda_double_clear_calls();
    config.grid[1] = 0;
    assert_status(CUDA_OPS->launch(bctx, fill, &config, fill_args, fill_sizes, 3, NULL),
                  GM_ERR_INVALID_ARG);
    config.grid[1] = 1;
    assert_status(CUDA_OPS->launch(bctx, fill, &config, NULL, fill_sizes, 3, NULL),
                  GM_ERR_INVALID_ARG);
    assert_status(CUDA_OPS->launch(bctx, fill, NULL, fill_args, fill_sizes, 3, NULL),
                  GM_ERR_NULL_POINTER);
    config.dynamic_shared_bytes = (size_t)INT_MAX + 1; /* cuLaunchKernel takes an unsigned */
    assert_status(CUDA_OPS->launch(bctx, scale, &config, scale_args, scale_sizes, 2, NULL),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("bytes of dynamic shared memory");
    assert_int_equal(cuda_test_work_calls(), 0);
    /* more shared memory than the device has: the driver's refusal, translated */
    config.dynamic_shared_bytes = 300 * 1024;
    assert_status(CUDA_OPS->launch(bctx, scale, &config, scale_args, scale_sizes, 2, NULL),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("cuFuncSetAttribute");

    assert_ok(CUDA_OPS->stream_destroy(bctx, stream));
    assert_ok(CUDA_OPS->mem_free(bctx, data));
    assert_ok(CUDA_OPS->module_unload(bctx, module));
    cuda_test_close(bctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_linear_copies, cuda_test_setup),
        cmocka_unit_test_setup(test_pitched_2d, cuda_test_setup),
        cmocka_unit_test_setup(test_pitched_3d, cuda_test_setup),
        cmocka_unit_test_setup(test_pitched_3d_async, cuda_test_setup),
        cmocka_unit_test_setup(test_dtod_pitch_refused, cuda_test_setup),
        cmocka_unit_test_setup(test_pitch_above_device_limit, cuda_test_setup),
        cmocka_unit_test_setup(test_host_row_above_device_limit, cuda_test_setup),
        cmocka_unit_test_setup(test_memset, cuda_test_setup),
        cmocka_unit_test_setup(test_streams, cuda_test_setup),
        cmocka_unit_test_setup(test_host_functions, cuda_test_setup),
        cmocka_unit_test_setup(test_double_refuses_calls_in_callbacks, cuda_test_setup),
        cmocka_unit_test_setup(test_double_refuses_overlap_and_memset_pitch, cuda_test_setup),
        cmocka_unit_test_setup(test_double_refuses_stale_and_foreign_handles, cuda_test_setup),
        cmocka_unit_test(test_per_thread_errors_per_thread),
        cmocka_unit_test(test_wrapped_per_thread_errors_per_thread),
        cmocka_unit_test(test_per_thread_slots_go_with_threads),
        cmocka_unit_test(test_wrapped_legacy_shares_errors),
        cmocka_unit_test_setup(test_stream_errors_of_wrappers_and_streams_that_go, cuda_test_setup),
        cmocka_unit_test_setup(test_legacy_refused_during_implicit_capture, cuda_test_setup),
        cmocka_unit_test_setup(test_host_work_outlives_stream, cuda_test_setup),
        cmocka_unit_test_setup(test_device_synchronize_waits_for_callbacks, cuda_test_setup),
        cmocka_unit_test_setup(test_events, cuda_test_setup),
        cmocka_unit_test_setup(test_queries_wait_for_held_callbacks, cuda_test_setup),
        cmocka_unit_test_setup(test_module_load, cuda_test_setup),
        cmocka_unit_test_setup(test_launch, cuda_test_setup),
    };

    return cmocka_run_group_tests_name("cuda/ops", tests, cuda_test_group_setup,
                                       cuda_test_group_teardown);
}
