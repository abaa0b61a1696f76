/*
 * Tests for arrays, buffers and transfers (src/core/array.c, src/core/copy.c)
 * on the host backend: allocation layouts (descriptors of reused blocks
 * included), round trips with strided and negative-stride host arrays, F
 * order, size 0, the copy strategies (direct pitched, backend strided, staged
 * through host images), fills, derived views and buffer lifetimes, argument
 * and context checks, and every bookkeeping-allocation failure of a scenario
 * that touches all of it.
 */
#include <stdlib.h>
#include <string.h>

#include "rt_helpers.h"

/* Address of element number k (C order over the shape) of a view. */
static char *elem(const gm_ndview *v, int64_t k)
{
    int64_t off = v->offset;

    for (int i = v->ndim - 1; i >= 0; i--) {
        off += (k % v->shape[i]) * v->strides[i];
        k /= v->shape[i];
    }
    return (char *)v->data + off;
}

/* Write base + k into element k of a float64 host view. */
static void fill_f64(const gm_ndview *v, double base)
{
    for (int64_t k = 0; k < gm_ndview_size(v); k++) {
        double x = base + (double)k;

        memcpy(elem(v, k), &x, sizeof(x));
    }
}

/* Whether element k of a float64 host view is base + k for every k. */
static void check_f64(const gm_ndview *v, double base)
{
    for (int64_t k = 0; k < gm_ndview_size(v); k++) {
        double x = 0.0;

        memcpy(&x, elem(v, k), sizeof(x));
        if (x != base + (double)k)
            fail_msg("element %lld is %g, expected %g", (long long)k, x, base + (double)k);
    }
}

/* A float64 host view over buf with the given shape/strides/offset. */
static gm_ndview host_view(void *buf, int ndim, const int64_t *shape, const int64_t *strides,
                           int64_t offset)
{
    gm_ndview v;

    assert_ok(gm_ndview_init(buf, GM_FLOAT64, ndim, shape, strides, GM_ORDER_C, &v));
    v.offset = offset;
    assert_ok(gm_ndview_validate(&v));
    return v;
}

static int group_setup(void **state)
{
    setenv("GM_HOST_DEVICE_MEMORY", "256M", 1);
    return gm_test_use_cmocka_allocator(state);
}

static int test_setup(void **state)
{
    (void)state;
    rt_fault_reset();
    return 0;
}

/* --------------------------------------------------------------- layouts */

static void test_device_array_layouts(void **state)
{
    int64_t shape[3] = {2, 3, 4};
    gm_context *ctx = NULL;
    gm_array *c = NULL, *f = NULL;
    const gm_ndview *v = NULL;

    (void)state;
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_device_array(ctx, 3, shape, GM_FLOAT32, GM_ORDER_C, &c));
    v = gm_array_view(c);
    assert_non_null(v->data);
    assert_int_equal(v->memory, GM_MEMORY_DEVICE);
    assert_int_equal(v->device_id, 0);
    assert_int_equal(v->offset, 0);
    assert_int_equal(v->strides[0], 48);
    assert_int_equal(v->strides[2], 4);
    assert_ptr_equal(gm_array_context(c), ctx);
    assert_ok(gm_device_array(ctx, 3, shape, GM_FLOAT32, GM_ORDER_F, &f));
    assert_int_equal(gm_array_view(f)->strides[0], 4);
    assert_int_equal(gm_array_view(f)->strides[2], 24);
    assert_true(gm_ndview_is_f_contiguous(gm_array_view(f)));
    assert_status(gm_device_array(ctx, 3, shape, GM_FLOAT32, GM_ORDER_A, &f), GM_ERR_INVALID_ARG);
    assert_non_null(f); /* untouched on failure */
    assert_null(gm_array_view(NULL));
    assert_null(gm_array_context(NULL));
    gm_array_release(&c);
    gm_array_release(&f);
    gm_context_destroy(&ctx);
}

/* gm_device_array's descriptor must be gm_ndview_init's, byte for byte, pointed at the memory. */
static void check_like_init(const gm_array *a, int ndim, const int64_t *shape, gm_dtype dtype,
                            gm_order order)
{
    const gm_ndview *v = gm_array_view(a);
    gm_ndview expected;

    assert_ok(gm_ndview_init(NULL, dtype, ndim, shape, NULL, order, &expected));
    expected.data = v->data;
    expected.memory = GM_MEMORY_DEVICE;
    expected.device_id = 0;
    assert_int_equal(v->offset, 0);
    assert_memory_equal(v, &expected, sizeof(expected));
}

/*
 * Released arrays come back from the pool for the next allocation: the
 * descriptor built in place equals gm_ndview_init's (no stale axes of a
 * bigger predecessor), and invalid shapes fail as gm_ndview_init does.
 */
static void test_reused_descriptors(void **state)
{
    static const int64_t big[4] = {5, 1, 0, 7}, small[1] = {9}, huge[2] = {INT64_MAX / 2, 4};
    static const int64_t negative[2] = {3, -1}, many[GM_MAX_DIMS + 1] = {1};
    static const struct {
        int ndim;
        const int64_t *shape;
        gm_order order;
    } cases[] = {{4, big, GM_ORDER_C},  {1, small, GM_ORDER_F}, {4, big, GM_ORDER_F},
                 {0, NULL, GM_ORDER_C}, {2, big, GM_ORDER_C},   {1, small, GM_ORDER_C}};
    gm_context *ctx = NULL;
    gm_array *a = NULL, *first = NULL;

    (void)state;
    assert_ok(gm_context_create(NULL, &ctx));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_ok(
            gm_device_array(ctx, cases[i].ndim, cases[i].shape, GM_COMPLEX64, cases[i].order, &a));
        check_like_init(a, cases[i].ndim, cases[i].shape, GM_COMPLEX64, cases[i].order);
        first = i == 0 ? a : first;
        assert_true(i == 0 || a == first); /* the same block each time */
        gm_array_release(&a);
        assert_ok(gm_deallocations_flush(ctx));
    }
    assert_status(gm_device_array(ctx, 2, huge, GM_INT64, GM_ORDER_C, &a), GM_ERR_OVERFLOW);
    assert_status(gm_device_array(ctx, 2, negative, GM_INT64, GM_ORDER_C, &a), GM_ERR_INVALID_ARG);
    assert_status(gm_device_array(ctx, GM_MAX_DIMS + 1, many, GM_INT64, GM_ORDER_C, &a),
                  GM_ERR_TOO_MANY_DIMS);
    assert_status(gm_device_array(ctx, 1, NULL, GM_INT64, GM_ORDER_C, &a), GM_ERR_NULL_POINTER);
    assert_status(
        gm_device_array(ctx, 1, small, (gm_dtype)GM_DTYPE_INIT(GM_DTYPE_FLOAT, 8), GM_ORDER_C, &a),
        GM_ERR_DTYPE);
    assert_null(a);
    gm_context_destroy(&ctx);
}

/* Negative strides: the allocation covers the extent and data/offset put every element in it. */
static void test_device_array_strided(void **state)
{
    int64_t shape[2] = {3, 4}, strides[2] = {-32, 8};
    double in[12], out[12];
    int64_t s12 = 12;
    gm_ndview hin = host_view(in, 1, &s12, NULL, 0), hout = host_view(out, 1, &s12, NULL, 0);
    gm_context *ctx = NULL;
    gm_array *a = NULL, *flat = NULL;
    const gm_ndview *v = NULL;
    gm_ndview h2;
    int64_t lo = 0, hi = 0;

    (void)state;
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_device_array_strided(ctx, 2, shape, strides, GM_FLOAT64, &a));
    v = gm_array_view(a);
    assert_int_equal(v->offset, 64);
    assert_ok(gm_ndview_extent(v, &lo, &hi));
    assert_int_equal(lo, 0);
    assert_int_equal(hi, 96);
    fill_f64(&hin, 1.0);
    assert_ok(gm_ndview_reshape(&hin, 2, shape, GM_ORDER_C, &h2));
    assert_ok(gm_array_copy_to_device(a, &h2, NULL));
    memset(out, 0, sizeof(out));
    assert_ok(gm_ndview_reshape(&hout, 2, shape, GM_ORDER_C, &h2));
    assert_ok(gm_array_copy_to_host(a, &h2, NULL));
    check_f64(&hout, 1.0);
    assert_status(gm_array_ravel(a, GM_ORDER_C, &flat), GM_ERR_NEEDS_COPY);
    assert_status(gm_device_array_strided(ctx, 2, shape, NULL, GM_FLOAT64, &a),
                  GM_ERR_NULL_POINTER);
    gm_array_release(&a);
    /* strides whose ends fit in int64_t but whose span (2^63 + 8 bytes) does not */
    strides[0] = -(INT64_C(1) << 62);
    strides[1] = INT64_C(1) << 62;
    shape[0] = shape[1] = 2;
    assert_status(gm_device_array_strided(ctx, 2, shape, strides, GM_FLOAT64, &a), GM_ERR_OVERFLOW);
    assert_message_contains("spans more than");
    assert_null(a);
    assert_status(gm_pinned_array_strided(ctx, 2, shape, strides, GM_FLOAT64, &a), GM_ERR_OVERFLOW);
    assert_null(a);
    gm_context_destroy(&ctx);
}

static void test_device_array_like(void **state)
{
    double buf[24];
    int64_t shape[3] = {2, 3, 4};
    gm_ndview h = host_view(buf, 3, shape, NULL, 0), t;
    gm_context *ctx = NULL;
    gm_array *a = NULL;

    (void)state;
    assert_ok(gm_ndview_transpose(&h, &t));
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_device_array_like(ctx, &t, &a));
    assert_true(gm_ndview_is_f_contiguous(gm_array_view(a)));
    assert_int_equal(gm_array_view(a)->shape[0], 4);
    gm_array_release(&a);
    assert_status(gm_device_array_like(ctx, NULL, &a), GM_ERR_NULL_POINTER);
    gm_context_destroy(&ctx);
}

/* Size-0 arrays allocate nothing and copy nothing. */
static void test_size_zero(void **state)
{
    int64_t shape[2] = {0, 3};
    double dummy = 0.0;
    gm_ndview h = host_view(&dummy, 2, shape, NULL, 0);
    gm_context *ctx = NULL;
    gm_array *a = NULL, *b = NULL, *c = NULL;

    (void)state;
    assert_ok(rt_fault_context(NULL, &ctx));
    assert_ok(gm_device_array(ctx, 2, shape, GM_FLOAT64, GM_ORDER_C, &a));
    assert_null(gm_array_view(a)->data);
    assert_int_equal(gm_ndview_nbytes(gm_array_view(a)), 0);
    assert_ok(gm_to_device(ctx, &h, NULL, &b));
    assert_ok(gm_array_copy_to_host(a, &h, NULL));
    assert_ok(gm_array_copy_to_host_new(a, NULL, &c));
    assert_ok(gm_array_fill(a, &dummy, NULL));
    assert_ok(gm_array_memset(a, 0, NULL));
    assert_int_equal(rt_fault_calls(RT_MEM_ALLOC), 0);
    assert_int_equal(rt_fault_calls(RT_COPY), 0);
    /* Views of an empty array (numpy: a[:, 1], a[:, ::-1]) move the offset and address no byte. */
    {
        gm_index_item col[2] = {GM_IDX_ALL, GM_IDX_INT(1)};
        gm_index_item rev[2] = {GM_IDX_ALL, GM_IDX_SLICE(GM_NONE, GM_NONE, -1)};
        gm_array *v = NULL;

        assert_ok(gm_array_getitem(a, 2, col, &v));
        assert_int_equal(gm_array_view(v)->ndim, 1);
        assert_int_equal(gm_array_view(v)->shape[0], 0);
        assert_int_equal(gm_array_view(v)->offset, 8);
        gm_array_release(&v);
        assert_ok(gm_array_getitem(a, 2, rev, &v));
        assert_int_equal(gm_array_view(v)->strides[1], -8);
        gm_array_release(&v);
    }
    gm_array_release(&a);
    gm_array_release(&b);
    gm_array_release(&c);
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    gm_context_destroy(&ctx);
}

/* ------------------------------------------------------------ round trips */

/* Contiguous host data to the device and back, synchronously and on a stream. */
static void test_round_trip_contiguous(void **state)
{
    double in[24], out[24];
    int64_t shape[3] = {2, 3, 4};
    gm_ndview hin = host_view(in, 3, shape, NULL, 0), hout = host_view(out, 3, shape, NULL, 0);
    gm_context *ctx = NULL;
    gm_stream *st = NULL;
    gm_array *a = NULL;

    (void)state;
    fill_f64(&hin, 10.0);
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_to_device(ctx, &hin, NULL, &a));
    assert_true(gm_ndview_is_c_contiguous(gm_array_view(a)));
    memset(out, 0, sizeof(out));
    assert_ok(gm_array_copy_to_host(a, &hout, NULL));
    check_f64(&hout, 10.0);
    gm_array_release(&a);
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_to_device(ctx, &hin, st, &a));
    memset(out, 0, sizeof(out));
    assert_ok(gm_array_copy_to_host(a, &hout, st));
    assert_ok(gm_stream_synchronize(st));
    check_f64(&hout, 10.0);
    gm_array_release(&a);
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
}

/* A sliced, negative-stride host source is packed; a negative-stride destination is filled. */
static void test_round_trip_strided_host(void **state)
{
    double big[6 * 8], out[6 * 8];
    int64_t shape[2] = {3, 4};
    /* big viewed as 6x8; take rows 5,3,1 and columns 0,2,4,6 */
    int64_t in_strides[2] = {-2 * 8 * 8, 2 * 8};
    gm_ndview hin = host_view(big, 2, shape, in_strides, 5 * 8 * 8);
    int64_t out_strides[2] = {8, -3 * 8}; /* F-like and reversed columns */
    gm_ndview hout = host_view(out, 2, shape, out_strides, 9 * 8 * 3);
    gm_context *ctx = NULL;
    gm_array *a = NULL;

    (void)state;
    fill_f64(&hin, 100.0);
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_to_device(ctx, &hin, NULL, &a));
    assert_true(gm_ndview_is_c_contiguous(gm_array_view(a)));
    memset(out, 0, sizeof(out));
    assert_ok(gm_array_copy_to_host(a, &hout, NULL));
    check_f64(&hout, 100.0);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
}

/* An F-ordered device array filled from C host data and read back into F host memory. */
static void test_f_order(void **state)
{
    double in[12], out[12];
    int64_t shape[2] = {3, 4}, fstrides[2] = {8, 24};
    gm_ndview hin = host_view(in, 2, shape, NULL, 0), hout = host_view(out, 2, shape, fstrides, 0);
    gm_context *ctx = NULL;
    gm_array *a = NULL, *h = NULL;

    (void)state;
    fill_f64(&hin, 0.5);
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_device_array(ctx, 2, shape, GM_FLOAT64, GM_ORDER_F, &a));
    assert_ok(gm_array_copy_to_device(a, &hin, NULL));
    assert_ok(gm_array_copy_to_host(a, &hout, NULL));
    check_f64(&hout, 0.5);
    for (int i = 0; i < 12; i++)
        assert_true(out[i] == in[(i % 3) * 4 + i / 3]);
    assert_ok(gm_array_copy_to_host_new(a, NULL, &h));
    assert_int_equal(gm_array_view(h)->memory, GM_MEMORY_HOST);
    assert_true(gm_ndview_is_f_contiguous(gm_array_view(h)));
    check_f64(gm_array_view(h), 0.5);
    gm_array_release(&h);
    assert_int_equal(rt_stats(ctx).pending_count, 1); /* gpumem's host buffer is queued too */
    assert_int_equal(rt_stats(ctx).pending_device_bytes, 0);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
}

/* Device to device, and the mismatch messages naming both sides. */
static void test_copy_to_device_and_mismatch(void **state)
{
    double in[6];
    float small[6];
    int64_t shape[2] = {2, 3}, other[2] = {3, 2};
    gm_ndview hin = host_view(in, 2, shape, NULL, 0), hbad, hf32;
    gm_context *ctx = NULL;
    gm_array *a = NULL, *b = NULL, *h = NULL;

    (void)state;
    fill_f64(&hin, 7.0);
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_to_device(ctx, &hin, NULL, &a));
    assert_ok(gm_device_array(ctx, 2, shape, GM_FLOAT64, GM_ORDER_F, &b));
    assert_ok(gm_array_copy_to_device(b, gm_array_view(a), NULL));
    assert_ok(gm_array_copy_to_host_new(b, NULL, &h));
    check_f64(gm_array_view(h), 7.0);
    hbad = host_view(in, 2, other, NULL, 0);
    assert_status(gm_array_copy_to_device(b, &hbad, NULL), GM_ERR_SHAPE_MISMATCH);
    assert_message_contains("gm_array_copy_to_device: shape mismatch: destination (2, 3), "
                            "source (3, 2)");
    assert_ok(gm_ndview_init(small, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &hf32));
    assert_status(gm_array_copy_to_host(b, &hf32, NULL), GM_ERR_DTYPE);
    assert_message_contains("gm_array_copy_to_host: dtype mismatch: destination float32, "
                            "source float64");
    gm_array_release(&h);
    gm_array_release(&a);
    gm_array_release(&b);
    gm_context_destroy(&ctx);
}

/*
 * Numba's copy_to_host(ary) / copy_to_device(ary) accept shapes that differ
 * only by axes of extent 1 (check_array_compatibility squeezes both); gm_copy
 * stays strict. A mismatch left after squeezing names the shapes given.
 */
static void test_copy_size_one_axes(void **state)
{
    float in[4] = {1.0f, 2.0f, 3.0f, 4.0f}, out[4] = {0}, back[4] = {0};
    int64_t flat[1] = {4}, row[2] = {1, 4}, col[3] = {4, 1, 1}, wide[2] = {2, 2};
    gm_ndview hrow, hcol, hwide, hflat;
    gm_context *ctx = NULL;
    gm_array *d = NULL;

    (void)state;
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_device_array(ctx, 1, flat, GM_FLOAT32, GM_ORDER_C, &d));
    assert_ok(gm_ndview_init(in, GM_FLOAT32, 2, row, NULL, GM_ORDER_C, &hrow));
    assert_ok(gm_ndview_init(out, GM_FLOAT32, 3, col, NULL, GM_ORDER_F, &hcol));
    assert_ok(gm_array_copy_to_device(d, &hrow, NULL)); /* (4,) <- (1, 4) */
    assert_ok(gm_array_copy_to_host(d, &hcol, NULL));   /* (4, 1, 1) <- (4,) */
    for (int i = 0; i < 4; i++)
        assert_true(out[i] == in[i]);
    /* a reversed size-1 view: the squeezed strides are the ones used */
    assert_ok(gm_ndview_init(back, GM_FLOAT32, 1, flat, NULL, GM_ORDER_C, &hflat));
    assert_ok(gm_ndview_slice(&hflat, 0, GM_SLICE(GM_NONE, GM_NONE, -1), &hflat));
    assert_ok(gm_ndview_expand_dims(&hflat, 0, &hflat));
    assert_ok(gm_array_copy_to_host(d, &hflat, NULL));
    for (int i = 0; i < 4; i++)
        assert_true(back[3 - i] == in[i]);
    assert_status(gm_copy(ctx, &hrow, gm_array_view(d), NULL), GM_ERR_SHAPE_MISMATCH);
    assert_ok(gm_ndview_init(out, GM_FLOAT32, 2, wide, NULL, GM_ORDER_C, &hwide));
    assert_status(gm_array_copy_to_host(d, &hwide, NULL), GM_ERR_SHAPE_MISMATCH);
    assert_message_contains("gm_array_copy_to_host: shape mismatch: destination (2, 2), "
                            "source (4,)");
    assert_status(gm_array_copy_to_device(d, &hwide, NULL), GM_ERR_SHAPE_MISMATCH);
    assert_message_contains("destination (4,), source (2, 2)");
    gm_array_release(&d);
    gm_context_destroy(&ctx);
}

/* ------------------------------------------------------ copy strategies */

/* A transposing host-to-device copy: direct when one pitched copy does, else the options. */
static void test_copy_strategies(void **state)
{
    double in[4 * 5 * 6], out[4 * 5 * 6];
    int64_t shape[3] = {4, 5, 6};
    gm_ndview hin = host_view(in, 3, shape, NULL, 0), hout = host_view(out, 3, shape, NULL, 0);
    gm_ndview t, dt;
    gm_context *ctx = rt_fault_ctx();
    gm_array *a = NULL, *b = NULL;

    (void)state;
    fill_f64(&hin, 3.0);
    assert_ok(gm_to_device(ctx, &hin, NULL, &a)); /* contiguous: one 1-D copy */
    assert_int_equal(rt_fault_calls(RT_COPY), 1);
    assert_int_equal(rt_fault_calls(RT_COPY_STRIDED), 0);
    /* transposed source: the backend's strided copy */
    assert_ok(gm_ndview_transpose(&hin, &t));
    assert_ok(gm_device_array(ctx, 3, t.shape, GM_FLOAT64, GM_ORDER_C, &b));
    assert_ok(gm_array_copy_to_device(b, &t, NULL));
    assert_int_equal(rt_fault_calls(RT_COPY_STRIDED), 1);
    /* without it: staged through a host image of the destination */
    rt_fault_ops()->copy_strided = gm__unsupported_copy_strided;
    assert_ok(gm_array_memset(b, 0, NULL));
    assert_ok(gm_array_copy_to_device(b, &t, NULL));
    assert_int_equal(rt_fault_calls(RT_COPY_STRIDED), 1);
    assert_ok(gm_ndview_transpose(gm_array_view(b), &dt));
    memset(out, 0, sizeof(out));
    assert_ok(gm_copy(ctx, &hout, &dt, NULL)); /* device transposed -> host C: staged again */
    check_f64(&hout, 3.0);
    gm_array_release(&a);
    gm_array_release(&b);
    gm_context_destroy(&ctx);
}

/* A strided copy op that reports UNSUPPORTED falls back to staging. */
static void test_copy_strided_unsupported_falls_back(void **state)
{
    double in[6], out[6];
    int64_t shape[2] = {2, 3};
    gm_ndview hin = host_view(in, 2, shape, NULL, 0), hout = host_view(out, 2, shape, NULL, 0);
    gm_ndview t, to;
    gm_context *ctx = rt_fault_ctx();
    gm_array *a = NULL;

    (void)state;
    fill_f64(&hin, 1.0);
    assert_ok(gm_ndview_transpose(&hin, &t));
    assert_ok(gm_device_array(ctx, 2, t.shape, GM_FLOAT64, GM_ORDER_C, &a));
    rt_fault_fail_at(RT_COPY_STRIDED, 1, GM_ERR_UNSUPPORTED);
    assert_ok(gm_array_copy_to_device(a, &t, NULL));
    assert_ok(gm_ndview_transpose(&hout, &to));
    assert_ok(gm_array_copy_to_host(a, &to, NULL));
    check_f64(&hout, 1.0);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
}

/* Sliced device arrays: 2-D and 3-D pitched copies, and a few pieces for more axes. */
static void test_pitched_and_pieces(void **state)
{
    double in[4 * 5 * 6], out[4 * 5 * 6];
    int64_t shape[3] = {4, 5, 6};
    gm_index_item rows[2] = {GM_IDX_SLICE(GM_NONE, GM_NONE, 2), GM_IDX_ALL};
    gm_index_item box[3] = {GM_IDX_ALL, GM_IDX_SLICE(1, 3, GM_NONE), GM_IDX_SLICE(0, 4, GM_NONE)};
    int64_t shape4[4] = {2, 3, 4, 5};
    gm_index_item gaps[4] = {GM_IDX_ALL, GM_IDX_SLICE(0, 2, GM_NONE), GM_IDX_SLICE(0, 3, GM_NONE),
                             GM_IDX_SLICE(0, 4, GM_NONE)};
    gm_context *ctx = rt_fault_ctx();
    gm_array *a = NULL, *v = NULL;
    gm_ndview h;
    int64_t before = 0;

    (void)state;
    rt_fault_ops()->copy_strided = gm__unsupported_copy_strided;
    /* 2-D: every other row of a (10, 12) array */
    {
        int64_t s2[2] = {10, 12}, sub[2] = {5, 12};

        assert_ok(gm_device_array(ctx, 2, s2, GM_FLOAT64, GM_ORDER_C, &a));
        assert_ok(gm_array_getitem(a, 2, rows, &v));
        h = host_view(in, 2, sub, NULL, 0);
        fill_f64(&h, 2.0);
        before = rt_fault_calls(RT_COPY);
        assert_ok(gm_array_copy_to_device(v, &h, NULL));
        assert_int_equal(rt_fault_calls(RT_COPY) - before, 1);
        h = host_view(out, 2, sub, NULL, 0);
        assert_ok(gm_array_copy_to_host(v, &h, NULL));
        check_f64(&h, 2.0);
        gm_array_release(&v);
        gm_array_release(&a);
    }
    /* 3-D: a[:, 1:3, 0:4] of (4, 5, 6) */
    {
        int64_t sub[3] = {4, 2, 4};

        assert_ok(gm_device_array(ctx, 3, shape, GM_FLOAT64, GM_ORDER_C, &a));
        assert_ok(gm_array_getitem(a, 3, box, &v));
        h = host_view(in, 3, sub, NULL, 0);
        fill_f64(&h, 5.0);
        before = rt_fault_calls(RT_COPY);
        assert_ok(gm_array_copy_to_device(v, &h, NULL));
        assert_int_equal(rt_fault_calls(RT_COPY) - before, 1);
        h = host_view(out, 3, sub, NULL, 0);
        assert_ok(gm_array_copy_to_host(v, &h, NULL));
        check_f64(&h, 5.0);
        gm_array_release(&v);
        gm_array_release(&a);
    }
    /* 4-D with gaps on three axes: a 3-D copy per index of the first axis */
    {
        int64_t sub[4] = {2, 2, 3, 4};

        assert_ok(gm_device_array(ctx, 4, shape4, GM_FLOAT64, GM_ORDER_C, &a));
        assert_ok(gm_array_getitem(a, 4, gaps, &v));
        h = host_view(in, 4, sub, NULL, 0);
        fill_f64(&h, 9.0);
        before = rt_fault_calls(RT_COPY);
        assert_ok(gm_array_copy_to_device(v, &h, NULL));
        assert_int_equal(rt_fault_calls(RT_COPY) - before, 2);
        h = host_view(out, 4, sub, NULL, 0);
        assert_ok(gm_array_copy_to_host(v, &h, NULL));
        check_f64(&h, 9.0);
        gm_array_release(&v);
        gm_array_release(&a);
    }
    gm_context_destroy(&ctx);
}

/* Device to device with different layouts and no strided op: staged through host images. */
static void test_staged_device_to_device(void **state)
{
    static double in[16 * 9 * 10], rev_out[16 * 9 * 10];
    int64_t shape[3] = {16, 9, 10};
    gm_ndview hin = host_view(in, 3, shape, NULL, 0), t, rev, hrev;
    gm_index_item flip[3] = {GM_IDX_SLICE(GM_NONE, GM_NONE, -1), GM_IDX_ALL, GM_IDX_ALL};
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;
    gm_array *a = NULL, *b = NULL, *h = NULL;
    gm_ndview hv;
    int64_t before = 0;

    (void)state;
    rt_fault_ops()->copy_strided = gm__unsupported_copy_strided;
    fill_f64(&hin, 1.0);
    assert_ok(gm_to_device(ctx, &hin, NULL, &a));
    assert_ok(gm_ndview_transpose(gm_array_view(a), &t));
    assert_ok(gm_device_array(ctx, 3, t.shape, GM_FLOAT64, GM_ORDER_C, &b));
    assert_ok(gm_stream_create(ctx, 0, &st));
    before = rt_fault_calls(RT_COPY);
    assert_ok(gm_copy(ctx, gm_array_view(b), &t, st)); /* 90 pieces direct: staged instead */
    assert_int_equal(rt_fault_calls(RT_COPY) - before, 2);
    assert_int_equal(rt_fault_calls(RT_ENQUEUE_HOST), 2);
    assert_ok(gm_stream_synchronize(st));
    assert_ok(gm_array_copy_to_host_new(b, st, &h));
    assert_ok(gm_stream_synchronize(st));
    assert_ok(gm_ndview_transpose(gm_array_view(h), &hv));
    check_f64(&hv, 1.0);
    gm_array_release(&h);
    /* a reversed first axis against a forward one: 16 pieces with a negative source stride */
    assert_ok(gm_ndview_getitem(gm_array_view(a), 3, flip, &rev));
    hrev = host_view(rev_out, 3, shape, NULL, 0);
    before = rt_fault_calls(RT_COPY);
    assert_ok(gm_copy(ctx, &hrev, &rev, NULL));
    assert_int_equal(rt_fault_calls(RT_COPY) - before, 16);
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 90; j++)
            assert_true(rev_out[i * 90 + j] == 1.0 + (15 - i) * 90 + j);
    }
    gm_stream_destroy(&st);
    gm_array_release(&a);
    gm_array_release(&b);
    gm_context_destroy(&ctx);
}

/*
 * A backend whose asynchronous copies read pageable sources when called
 * (host_read_at_call, CUDA's rule): a staged copy to the device on a stream
 * fills its host image before the host-to-device call, after the stream's
 * queued work, instead of in a queued host step; the result is the same.
 */
static void test_staged_host_read_at_call(void **state)
{
    static double in[16 * 9 * 10];
    int64_t shape[3] = {16, 9, 10};
    gm_ndview hin = host_view(in, 3, shape, NULL, 0), t;
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;
    gm_array *a = NULL, *b = NULL, *h = NULL;
    gm_ndview hv;

    (void)state;
    rt_fault_ops()->copy_strided = gm__unsupported_copy_strided;
    rt_fault_ops()->host_read_at_call = true;
    fill_f64(&hin, 1.0);
    assert_ok(gm_ndview_transpose(&hin, &t));
    assert_ok(gm_device_array(ctx, 3, t.shape, GM_FLOAT64, GM_ORDER_C, &b));
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_array_copy_to_device(b, &t, st));        /* host source: image, then one copy */
    assert_int_equal(rt_fault_calls(RT_ENQUEUE_HOST), 1); /* only the job's release */
    assert_ok(gm_array_copy_to_host_new(b, st, &h));
    assert_ok(gm_stream_synchronize(st));
    assert_ok(gm_ndview_transpose(gm_array_view(h), &hv));
    check_f64(&hv, 1.0);
    gm_array_release(&h);
    /* device to device through two images: the same */
    assert_ok(gm_to_device(ctx, &hin, NULL, &a));
    assert_ok(gm_ndview_transpose(gm_array_view(a), &t));
    assert_ok(gm_array_fill(b, &(double){0.0}, NULL));
    rt_fault_reset();
    rt_fault_ops()->copy_strided = gm__unsupported_copy_strided;
    rt_fault_ops()->host_read_at_call = true;
    assert_ok(gm_copy(ctx, gm_array_view(b), &t, st));
    assert_int_equal(rt_fault_calls(RT_ENQUEUE_HOST), 1);
    assert_ok(gm_array_copy_to_host_new(b, st, &h));
    assert_ok(gm_stream_synchronize(st));
    assert_ok(gm_ndview_transpose(gm_array_view(h), &hv));
    check_f64(&hv, 1.0);
    gm_array_release(&h);
    gm_stream_destroy(&st);
    gm_array_release(&a);
    gm_array_release(&b);
    gm_context_destroy(&ctx);
}

/*
 * Strides that validate ((extent - 1) * stride fits) but whose extent *
 * stride does not: the copy planner must not overflow (UBSan) on its way to
 * the backend, which refuses the range.
 */
static void test_copy_huge_strides(void **state)
{
    int64_t shape[2] = {2, 2};
    const int64_t huge[2] = {4, (int64_t)1 << 62};
    gm_context *ctx = NULL;
    gm_array *a = NULL, *b = NULL;
    gm_ndview wild;

    (void)state;
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_device_array(ctx, 2, shape, GM_INT32, GM_ORDER_C, &a));
    assert_ok(gm_device_array(ctx, 2, shape, GM_INT32, GM_ORDER_C, &b));
    wild = *gm_array_view(b);
    wild.strides[0] = huge[0];
    wild.strides[1] = huge[1];
    assert_ok(gm_ndview_validate(&wild));
    assert_status(gm_copy(ctx, gm_array_view(a), &wild, NULL), GM_ERR_INVALID_ARG);
    assert_status(gm_copy(ctx, &wild, gm_array_view(a), NULL), GM_ERR_INVALID_ARG);
    gm_array_release(&a);
    gm_array_release(&b);
    gm_context_destroy(&ctx);
}

/* Host to host copies run on the host engine, in stream order with a stream. */
static void test_host_to_host(void **state)
{
    double in[12], out[12];
    int64_t shape[2] = {3, 4};
    gm_ndview hin = host_view(in, 2, shape, NULL, 0), hout = host_view(out, 2, shape, NULL, 0);
    gm_ndview tin, tout;
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;

    (void)state;
    fill_f64(&hin, 4.0);
    assert_ok(gm_copy(ctx, &hout, &hin, NULL));
    check_f64(&hout, 4.0);
    assert_int_equal(rt_fault_calls(RT_COPY), 0);
    memset(out, 0, sizeof(out));
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_ndview_transpose(&hin, &tin));
    assert_ok(gm_ndview_transpose(&hout, &tout));
    assert_ok(gm_copy(ctx, &tout, &tin, st));
    assert_ok(gm_stream_synchronize(st));
    assert_int_equal(rt_fault_calls(RT_ENQUEUE_HOST), 2); /* the copy, then the cleanup */
    check_f64(&hout, 4.0);
    assert_int_equal(rt_stats(ctx).pending_count, 1); /* the job reached the queue */
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(rt_stats(ctx).freed_count, 1);
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
}

/* A failing step of a staged asynchronous copy waits for queued work and frees the job. */
static void test_staged_failure_paths(void **state)
{
    static double in[16 * 9 * 10];
    int64_t shape[3] = {16, 9, 10};
    gm_ndview hin = host_view(in, 3, shape, NULL, 0), t;
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;
    gm_array *a = NULL;

    (void)state;
    rt_fault_ops()->copy_strided = gm__unsupported_copy_strided;
    fill_f64(&hin, 1.0);
    assert_ok(gm_ndview_transpose(&hin, &t));
    assert_ok(gm_device_array(ctx, 3, t.shape, GM_FLOAT64, GM_ORDER_C, &a));
    assert_ok(gm_stream_create(ctx, 0, &st));
    for (int64_t n = 1; n <= 2; n++) {
        rt_fault_reset();
        rt_fault_ops()->copy_strided = gm__unsupported_copy_strided;
        rt_fault_fail_at(RT_ENQUEUE_HOST, n, GM_ERR_NO_MEMORY);
        assert_status(gm_array_copy_to_device(a, &t, st), GM_ERR_NO_MEMORY);
        assert_message_contains("stream_enqueue_host: injected failure");
    }
    rt_fault_reset();
    rt_fault_ops()->copy_strided = gm__unsupported_copy_strided;
    rt_fault_fail_at(RT_COPY, 1, GM_ERR_DRIVER);
    assert_status(gm_array_copy_to_device(a, &t, st), GM_ERR_DRIVER);
    assert_status(gm_array_copy_to_device(a, &t, NULL), GM_OK);
    /* new arrays whose asynchronous fill fails are released after the stream drains */
    {
        gm_array *b = NULL;

        rt_fault_fail_at(RT_COPY, rt_fault_calls(RT_COPY) + 1, GM_ERR_DRIVER);
        assert_status(gm_to_device(ctx, &hin, st, &b), GM_ERR_DRIVER);
        assert_message_contains("copy: injected failure");
        assert_null(b);
        rt_fault_fail_at(RT_COPY, rt_fault_calls(RT_COPY) + 1, GM_ERR_DRIVER);
        assert_status(gm_array_copy_to_host_new(a, st, &b), GM_ERR_DRIVER);
        assert_message_contains("copy: injected failure");
        assert_null(b);
    }
    gm_stream_destroy(&st);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
}

/* ----------------------------------------------------------------- fills */

static void test_fill(void **state)
{
    int64_t n = 10, shape2[2] = {4, 6};
    double x = 2.5;
    double complex_value[2] = {1.0, -1.0}, cout[2 * 10];
    int16_t i16 = -3, i16out[10];
    gm_index_item cols[2] = {GM_IDX_ALL, GM_IDX_SLICE(GM_NONE, GM_NONE, 2)};
    gm_context *ctx = rt_fault_ctx();
    gm_array *a = NULL, *v = NULL, *h = NULL, *p = NULL;
    gm_ndview hv;

    (void)state;
    assert_ok(gm_device_array(ctx, 1, &n, GM_INT16, GM_ORDER_C, &a));
    assert_ok(gm_array_fill(a, &i16, NULL));
    assert_int_equal(rt_fault_calls(RT_MEMSET), 1);
    assert_ok(gm_ndview_init(i16out, GM_INT16, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_array_copy_to_host(a, &hv, NULL));
    for (int i = 0; i < 10; i++)
        assert_int_equal(i16out[i], -3);
    gm_array_release(&a);
    /* complex128 (16-byte items): through a host image */
    assert_ok(gm_device_array(ctx, 1, &n, GM_COMPLEX128, GM_ORDER_C, &a));
    assert_ok(gm_array_fill(a, complex_value, NULL));
    assert_int_equal(rt_fault_calls(RT_MEMSET), 1);
    assert_ok(gm_ndview_init(cout, GM_COMPLEX128, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_array_copy_to_host(a, &hv, NULL));
    for (int i = 0; i < 10; i++)
        assert_true(cout[2 * i] == 1.0 && cout[2 * i + 1] == -1.0);
    gm_array_release(&a);
    /* a non-contiguous view: only its elements change */
    assert_ok(gm_device_array(ctx, 2, shape2, GM_FLOAT64, GM_ORDER_C, &a));
    assert_ok(gm_array_memset(a, 0, NULL));
    assert_ok(gm_array_getitem(a, 2, cols, &v));
    assert_ok(gm_array_fill(v, &x, NULL));
    assert_ok(gm_array_copy_to_host_new(a, NULL, &h));
    for (int k = 0; k < 24; k++) {
        double y = ((double *)gm_array_view(h)->data)[k];

        assert_true(y == (k % 2 == 0 ? 2.5 : 0.0));
    }
    gm_array_release(&h);
    /* pinned memory is filled on the host, here in stream order */
    assert_ok(gm_pinned_array(ctx, 2, shape2, GM_FLOAT64, GM_ORDER_C, &p));
    {
        gm_stream *st = NULL;

        assert_ok(gm_stream_create(ctx, 0, &st));
        assert_ok(gm_array_fill(p, &x, st));
        assert_ok(gm_stream_synchronize(st));
        gm_stream_destroy(&st);
    }
    for (int k = 0; k < 24; k++)
        assert_true(((double *)gm_array_view(p)->data)[k] == 2.5);
    /* A broadcast (stride-0) view is filled like numpy's on every memory kind, with or
     * without a stream: its one element per broadcast run is written. */
    {
        gm_array *arrays[2] = {p, a}, *b = NULL;
        double y = -7.0;
        gm_stream *st = NULL;

        assert_ok(gm_stream_create(ctx, 0, &st));
        for (int k = 0; k < 2; k++) {
            gm_ndview bv = *gm_array_view(arrays[k]);

            bv.strides[0] = 0; /* 4 rows, all row 0 */
            assert_ok(gm_array_derive(arrays[k], &bv, &b));
            assert_ok(gm_array_fill(b, &y, NULL));
            assert_ok(gm_array_fill(b, &y, st));
            assert_ok(gm_stream_synchronize(st));
            assert_ok(gm_array_memset(b, 0, st));
            assert_ok(gm_stream_synchronize(st));
            assert_ok(gm_array_fill(b, &y, st));
            assert_ok(gm_stream_synchronize(st));
            gm_array_release(&b);
            assert_ok(gm_array_copy_to_host_new(arrays[k], NULL, &h));
            for (int j = 0; j < 24; j++) {
                double z = ((double *)gm_array_view(h)->data)[j];

                assert_true(j < 6 ? z == -7.0 : z != -7.0); /* row 0 only */
            }
            gm_array_release(&h);
        }
        /* A copy into it is refused at the call, before anything is queued. */
        {
            gm_ndview bv = *gm_array_view(p);

            bv.strides[0] = 0;
            assert_status(gm_array_copy_to_host(a, &bv, st), GM_ERR_INVALID_ARG);
            assert_message_begins("gm_array_copy_to_host: destination axis 0 has stride 0");
            assert_status(gm_copy(ctx, &bv, gm_array_view(p), st), GM_ERR_INVALID_ARG);
            assert_ok(gm_stream_synchronize(st));
        }
        gm_stream_destroy(&st);
    }
    assert_status(gm_array_fill(p, NULL, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_array_fill(NULL, &x, NULL), GM_ERR_NULL_POINTER);
    gm_array_release(&p);
    gm_array_release(&v);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
}

/*
 * Strided fills (a[::2]) of every item size the engines special-case and two
 * they do not, many counts (the device side's host image is patterned by
 * doubling copies, which end on a partial copy unless the count is a power
 * of 2; the host side fills from one broadcast item), device and pinned
 * memory, with and without a stream: every element becomes the item, every
 * other element keeps its bytes.
 */
static void test_fill_strided_sizes(void **state)
{
    const gm_dtype dtypes[] = {GM_UINT8,
                               GM_INT16,
                               GM_FLOAT32,
                               GM_FLOAT64,
                               GM_COMPLEX128,
                               {GM_DTYPE_UINT, 8, 3},
                               {GM_DTYPE_FLOAT, 64, 4}};
    static const int64_t counts[] = {1, 2, 3, 5, 17, 64, 100};
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;
    unsigned char item[32];

    (void)state;
    for (int b = 0; b < 32; b++)
        item[b] = (unsigned char)(b + 1);
    assert_ok(gm_stream_create(ctx, 0, &st));
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        int64_t k = (int64_t)gm_dtype_itemsize(dtypes[d]);

        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            for (int kind = 0; kind < 4; kind++) { /* device / pinned, no stream / stream */
                int64_t n = counts[c], wide = 2 * n;
                gm_array *a = NULL, *v = NULL, *h = NULL;
                gm_ndview sv;
                const unsigned char *bytes = NULL;

                assert_ok(kind < 2 ? gm_device_array(ctx, 1, &wide, dtypes[d], GM_ORDER_C, &a)
                                   : gm_pinned_array(ctx, 1, &wide, dtypes[d], GM_ORDER_C, &a));
                assert_ok(gm_array_memset(a, 0xee, NULL));
                sv = *gm_array_view(a);
                sv.shape[0] = n;
                sv.strides[0] = 2 * k;
                assert_ok(gm_array_derive(a, &sv, &v));
                assert_ok(gm_array_fill(v, item, kind % 2 == 1 ? st : NULL));
                assert_ok(gm_stream_synchronize(st));
                assert_ok(gm_array_copy_to_host_new(a, NULL, &h));
                bytes = gm_array_view(h)->data;
                for (int64_t i = 0; i < wide; i++) {
                    for (int64_t b = 0; b < k; b++) {
                        unsigned char want = i % 2 == 0 ? item[b] : 0xee;

                        if (bytes[i * k + b] != want)
                            fail_msg("itemsize %lld, count %lld, %s%s: element %lld byte %lld "
                                     "is 0x%02x, expected 0x%02x",
                                     (long long)k, (long long)n, kind < 2 ? "device" : "pinned",
                                     kind % 2 == 1 ? " on a stream" : "", (long long)i,
                                     (long long)b, bytes[i * k + b], want);
                    }
                }
                gm_array_release(&h);
                gm_array_release(&v);
                gm_array_release(&a);
            }
        }
    }
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
}

static void test_memset(void **state)
{
    int64_t shape[2] = {3, 4};
    gm_index_item row[1] = {GM_IDX_SLICE(1, 2, GM_NONE)};
    gm_index_item col[2] = {GM_IDX_ALL, GM_IDX_INT(1)};
    gm_context *ctx = rt_fault_ctx();
    gm_array *a = NULL, *v = NULL, *h = NULL;
    const unsigned char *bytes = NULL;

    (void)state;
    assert_ok(gm_device_array(ctx, 2, shape, GM_INT32, GM_ORDER_C, &a));
    assert_ok(gm_array_memset(a, 0x11, NULL));
    assert_ok(gm_array_getitem(a, 1, row, &v));
    assert_ok(gm_array_memset(v, 0x22, NULL)); /* contiguous view: the memset op */
    gm_array_release(&v);
    assert_int_equal(rt_fault_calls(RT_MEMSET), 2);
    assert_ok(gm_array_getitem(a, 2, col, &v));
    assert_ok(gm_array_memset(v, 0x33, NULL)); /* a column: through a host image */
    assert_int_equal(rt_fault_calls(RT_MEMSET), 2);
    assert_ok(gm_array_copy_to_host_new(a, NULL, &h));
    bytes = gm_array_view(h)->data;
    for (int r = 0; r < 3; r++) {
        for (int c = 0; c < 4; c++) {
            unsigned char want = c == 1 ? 0x33 : r == 1 ? 0x22 : 0x11;

            for (int b = 0; b < 4; b++)
                assert_int_equal(bytes[(r * 4 + c) * 4 + b], want);
        }
    }
    assert_status(gm_array_memset(a, 256, NULL), GM_ERR_INVALID_ARG);
    assert_status(gm_array_memset(a, -1, NULL), GM_ERR_INVALID_ARG);
    gm_array_release(&h);
    gm_array_release(&v);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
}

/* -------------------------------------------------------- views, buffers */

static void test_derive(void **state)
{
    int64_t n = 10;
    gm_context *ctx = NULL;
    gm_array *a = NULL, *d = NULL;
    gm_ndview v;

    (void)state;
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT64, GM_ORDER_C, &a));
    v = *gm_array_view(a);
    v.shape[0] = 5;
    v.offset = 40;
    assert_ok(gm_array_derive(a, &v, &d));
    assert_int_equal(gm_array_view(d)->offset, 40);
    gm_array_release(&d);
    v.offset = 48; /* one element past the end */
    assert_status(gm_array_derive(a, &v, &d), GM_ERR_OUT_OF_RANGE);
    assert_message_contains("gm_array_derive: the view addresses bytes");
    assert_null(d);
    v.offset = -8;
    assert_status(gm_array_derive(a, &v, &d), GM_ERR_OUT_OF_RANGE);
    v.offset = 80; /* size 0 at the very end is inside */
    v.shape[0] = 0;
    assert_ok(gm_array_derive(a, &v, &d));
    gm_array_release(&d);
    v = *gm_array_view(a);
    v.memory = GM_MEMORY_HOST;
    assert_status(gm_array_derive(a, &v, &d), GM_ERR_INVALID_ARG);
    assert_status(gm_array_derive(NULL, &v, &d), GM_ERR_NULL_POINTER);
    assert_status(gm_array_derive(a, NULL, &d), GM_ERR_NULL_POINTER);
    assert_status(gm_array_derive(a, gm_array_view(a), NULL), GM_ERR_NULL_POINTER);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
}

/* ndview.h: `reserved` is written zero by gpumem; arrays made from a caller's descriptor
 * (gm_array_derive, gm_array_from_foreign) used to keep the caller's value in their view. */
static void test_array_views_have_reserved_zero(void **state)
{
    int64_t n = 10;
    double host[10] = {0};
    gm_context *ctx = NULL;
    gm_array *a = NULL, *d = NULL, *f = NULL, *m = NULL, *h = NULL;
    gm_ndview v, hv, dv;

    (void)state;
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT64, GM_ORDER_C, &a));
    v = *gm_array_view(a);
    v.reserved = 0x5a5a;
    assert_ok(gm_array_derive(a, &v, &d));
    assert_int_equal(gm_array_view(d)->reserved, 0);
    assert_ok(gm_array_copy_to_host_new(d, NULL, &h));
    assert_int_equal(gm_array_view(h)->reserved, 0);
    assert_ok(gm_ndview_init(host, GM_FLOAT64, 1, &n, NULL, GM_ORDER_C, &hv));
    hv.reserved = 0x5a5a;
    assert_ok(gm_array_from_foreign(ctx, &hv, NULL, NULL, NULL, &f));
    assert_int_equal(gm_array_view(f)->reserved, 0);
    gm_array_release(&f);
    assert_ok(gm_mapped_array(ctx, 1, &n, GM_FLOAT64, GM_ORDER_C, 0, &m));
    v = *gm_array_view(m);
    v.reserved = 0x5a5a;
    assert_ok(gm_array_derive(m, &v, &f));
    assert_ok(gm_array_device_view(f, &dv));
    assert_int_equal(dv.reserved, 0);
    gm_array_release(&f);
    gm_array_release(&m);
    gm_array_release(&h);
    gm_array_release(&d);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
}

static void test_view_wrappers(void **state)
{
    double in[6];
    int64_t shape[2] = {2, 3}, reshaped[2] = {3, 2};
    gm_ndview hin = host_view(in, 2, shape, NULL, 0);
    gm_index_item items[2] = {GM_IDX_INT(1), GM_IDX_SLICE(GM_NONE, GM_NONE, -1)};
    gm_context *ctx = NULL;
    gm_array *a = NULL, *r = NULL, *t = NULL, *h = NULL;

    (void)state;
    fill_f64(&hin, 0.0);
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_to_device(ctx, &hin, NULL, &a));
    assert_ok(gm_array_reshape(a, 2, reshaped, GM_ORDER_C, &r));
    assert_int_equal(gm_array_view(r)->shape[0], 3);
    gm_array_release(&r);
    assert_ok(gm_array_ravel(a, GM_ORDER_C, &r));
    assert_ok(gm_array_copy_to_host_new(r, NULL, &h));
    check_f64(gm_array_view(h), 0.0);
    gm_array_release(&h);
    gm_array_release(&r);
    assert_ok(gm_array_transpose(a, &t));
    assert_status(gm_array_ravel(t, GM_ORDER_C, &r), GM_ERR_NEEDS_COPY);
    assert_status(gm_array_reshape(t, 2, shape, GM_ORDER_C, &r), GM_ERR_NEEDS_COPY);
    assert_ok(gm_array_getitem(a, 2, items, &r)); /* a[1, ::-1] = 5, 4, 3 */
    assert_ok(gm_array_copy_to_host_new(r, NULL, &h));
    assert_true(((double *)gm_array_view(h)->data)[0] == 5.0);
    assert_true(((double *)gm_array_view(h)->data)[2] == 3.0);
    assert_status(gm_array_getitem(NULL, 2, items, &r), GM_ERR_NULL_POINTER);
    assert_status(gm_array_transpose(NULL, &r), GM_ERR_NULL_POINTER);
    assert_status(gm_array_reshape(NULL, 2, shape, GM_ORDER_C, &r), GM_ERR_NULL_POINTER);
    assert_status(gm_array_ravel(NULL, GM_ORDER_C, &r), GM_ERR_NULL_POINTER);
    gm_array_release(&h);
    gm_array_release(&r);
    gm_array_release(&t);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
}

/* Views keep the buffer alive after the parent is released. */
static void test_views_keep_buffer_alive(void **state)
{
    double in[8], out[4];
    int64_t n = 8, half = 4;
    gm_ndview hin = host_view(in, 1, &n, NULL, 0), hout = host_view(out, 1, &half, NULL, 0);
    gm_index_item odd[1] = {GM_IDX_SLICE(1, GM_NONE, 2)};
    gm_context *ctx = NULL;
    gm_array *a = NULL, *v = NULL, *w = NULL;

    (void)state;
    fill_f64(&hin, 0.0);
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_to_device(ctx, &hin, NULL, &a));
    assert_ok(gm_array_getitem(a, 1, odd, &v));
    gm_array_release(&a);
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    assert_ptr_equal(gm_array_retain(v), v);
    w = v;
    gm_array_release(&w); /* one of two references */
    assert_ok(gm_array_copy_to_host(v, &hout, NULL));
    for (int i = 0; i < 4; i++)
        assert_true(out[i] == 2.0 * i + 1.0);
    gm_array_release(&v);
    assert_int_equal(rt_stats(ctx).pending_count, 1);
    assert_int_equal(rt_stats(ctx).pending_device_bytes, 64);
    assert_null(gm_array_retain(NULL));
    gm_array_release(NULL);
    gm_array_release(&v);
    gm_context_destroy(&ctx);
}

/* --------------------------------------------------- contexts, arguments */

static void test_wrong_context(void **state)
{
    double in[4];
    int64_t n = 4;
    gm_ndview hin = host_view(in, 1, &n, NULL, 0), dv;
    gm_context *c1 = NULL, *c2 = NULL;
    gm_stream *s2 = NULL;
    gm_array *a = NULL, *b = NULL;

    (void)state;
    fill_f64(&hin, 0.0);
    assert_ok(gm_context_create(NULL, &c1));
    assert_ok(gm_context_create(NULL, &c2));
    assert_ok(gm_stream_create(c2, 0, &s2));
    assert_ok(gm_to_device(c1, &hin, NULL, &a));
    assert_status(gm_to_device(c1, &hin, s2, &b), GM_ERR_WRONG_CONTEXT);
    assert_message_contains("gm_to_device: the stream belongs to another context");
    assert_status(gm_array_copy_to_host(a, &hin, s2), GM_ERR_WRONG_CONTEXT);
    assert_status(gm_array_copy_to_device(a, &hin, s2), GM_ERR_WRONG_CONTEXT);
    assert_status(gm_array_copy_to_host_new(a, s2, &b), GM_ERR_WRONG_CONTEXT);
    assert_status(gm_array_fill(a, in, s2), GM_ERR_WRONG_CONTEXT);
    assert_status(gm_array_memset(a, 0, s2), GM_ERR_WRONG_CONTEXT);
    assert_status(gm_copy(c1, &hin, gm_array_view(a), s2), GM_ERR_WRONG_CONTEXT);
    dv = *gm_array_view(a);
    dv.device_id = 5;
    assert_status(gm_copy(c1, &hin, &dv, NULL), GM_ERR_WRONG_CONTEXT);
    assert_message_contains("the source is memory of device 5");
    /* the simulator: device memory of another context on the same device is refused */
    assert_ok(gm_device_array(c2, 1, &n, GM_FLOAT64, GM_ORDER_C, &b));
    assert_status(gm_copy(c1, &hin, gm_array_view(b), NULL), GM_ERR_INVALID_ARG);
    assert_message_contains("memory of this context");
    assert_status(gm_copy(c1, gm_array_view(b), gm_array_view(a), NULL), GM_ERR_INVALID_ARG);
    gm_array_release(&b);
    assert_null(b);
    gm_stream_destroy(&s2);
    gm_array_release(&a);
    gm_context_destroy(&c2);
    gm_context_destroy(&c1);
}

static void test_null_arguments(void **state)
{
    int64_t n = 4;
    double in[4];
    gm_ndview hin = host_view(in, 1, &n, NULL, 0);
    gm_context *ctx = NULL;
    gm_array *a = NULL;

    (void)state;
    assert_status(gm_device_array(NULL, 1, &n, GM_FLOAT64, GM_ORDER_C, &a), GM_ERR_NULL_POINTER);
    assert_message_contains("gm_device_array: ctx is NULL");
    assert_ok(gm_context_create(NULL, &ctx));
    assert_status(gm_device_array(ctx, 1, &n, GM_FLOAT64, GM_ORDER_C, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_device_array(ctx, 1, NULL, GM_FLOAT64, GM_ORDER_C, &a), GM_ERR_NULL_POINTER);
    assert_status(gm_device_array_strided(NULL, 1, &n, &n, GM_FLOAT64, &a), GM_ERR_NULL_POINTER);
    assert_status(gm_device_array_like(NULL, &hin, &a), GM_ERR_NULL_POINTER);
    assert_status(gm_device_array_like(ctx, &hin, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_to_device(NULL, &hin, NULL, &a), GM_ERR_NULL_POINTER);
    assert_status(gm_to_device(ctx, NULL, NULL, &a), GM_ERR_NULL_POINTER);
    assert_status(gm_to_device(ctx, &hin, NULL, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_copy(NULL, &hin, &hin, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_copy(ctx, NULL, &hin, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_copy(ctx, &hin, NULL, NULL), GM_ERR_NULL_POINTER);
    {
        gm_ndview odd = hin;

        odd.memory = 9;
        assert_status(gm_copy(ctx, &odd, &hin, NULL), GM_ERR_INVALID_ARG);
        assert_message_contains("gm_copy: the destination has an unknown memory kind 9");
    }
    assert_status(gm_array_copy_to_host(NULL, &hin, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_array_copy_to_host_new(NULL, NULL, &a), GM_ERR_NULL_POINTER);
    assert_status(gm_array_copy_to_device(NULL, &hin, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_array_memset(NULL, 0, NULL), GM_ERR_NULL_POINTER);
    assert_ok(gm_to_device(ctx, &hin, NULL, &a));
    assert_status(gm_array_copy_to_host_new(a, NULL, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_array_copy_to_host(a, NULL, NULL), GM_ERR_NULL_POINTER);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
}

/* ----------------------------------------------- injected alloc failures */

static void noop_callback(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    (*(int *)user)++;
}

/* Streams, events, callbacks and a staged asynchronous copy. */
static gm_status scenario_async(gm_context *ctx, gm_array *a, const gm_ndview *t)
{
    gm_stream *st = NULL;
    gm_event *ev = NULL;
    int calls = 0;
    gm_status s = gm_stream_create(ctx, 0, &st);

    if (s == GM_OK)
        s = gm_event_create(ctx, true, &ev);
    if (s == GM_OK)
        s = gm_array_copy_to_device(a, t, st);
    if (s == GM_OK)
        s = gm_stream_add_callback(st, noop_callback, &calls);
    if (s == GM_OK)
        s = gm_event_record(ev, st);
    if (s == GM_OK)
        s = gm_stream_synchronize(st);
    else if (st != NULL)
        (void)gm_stream_synchronize(st); /* a queued callback still reads `calls` */
    gm_event_destroy(&ev);
    gm_stream_destroy(&st);
    return s;
}

/* Host memory: pinned, mapped, a registration scope, and a fill through a host image. */
static gm_status scenario_host(gm_context *ctx, const gm_ndview *hin)
{
    double x[2] = {1.0, 2.0};
    int64_t n = 3;
    gm_array *p = NULL, *m = NULL, *c = NULL;
    gm_host_scope *scope = NULL;
    gm_status s = gm_pinned_array_like(ctx, hin, &p);

    if (s == GM_OK)
        s = gm_mapped_array(ctx, 1, &n, GM_FLOAT64, GM_ORDER_C, 0, &m);
    if (s == GM_OK)
        s = gm_pin(ctx, 1, hin, &scope);
    if (s == GM_OK)
        s = gm_host_scope_end(&scope);
    if (s == GM_OK)
        s = gm_device_array(ctx, 1, &n, GM_COMPLEX128, GM_ORDER_C, &c);
    if (s == GM_OK)
        s = gm_array_fill(c, x, NULL);
    gm_array_release(&c);
    gm_array_release(&m);
    gm_array_release(&p);
    return s;
}

/* Everything the runtime allocates bookkeeping memory for. */
static gm_status scenario(void)
{
    static double in[16 * 9 * 10];
    int64_t shape[3] = {16, 9, 10};
    gm_ndview hin, t;
    gm_context *ctx = NULL;
    gm_array *a = NULL, *b = NULL, *h = NULL;
    gm_status s = gm_ndview_init(in, GM_FLOAT64, 3, shape, NULL, GM_ORDER_C, &hin);

    memset(in, 0, sizeof(in));
    if (s == GM_OK)
        s = rt_fault_context(NULL, &ctx);
    if (s != GM_OK)
        return s;
    rt_fault_ops()->copy_strided = gm__unsupported_copy_strided;
    (void)gm_ndview_transpose(&hin, &t);
    s = gm_to_device(ctx, &t, NULL, &a);
    if (s == GM_OK)
        s = gm_array_transpose(a, &b);
    if (s == GM_OK)
        s = gm_array_copy_to_host_new(b, NULL, &h);
    if (s == GM_OK)
        s = gm_copy(ctx, &hin, gm_array_view(b), NULL);
    if (s == GM_OK)
        s = scenario_async(ctx, a, &t);
    if (s == GM_OK)
        s = scenario_host(ctx, &hin);
    if (s == GM_OK)
        s = gm_deallocations_flush(ctx);
    gm_array_release(&h);
    gm_array_release(&b);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
    return s;
}

/*
 * Messages begin with the public call's name, also when the failure comes
 * from a descriptor helper (gm_ndview_init, reshape, ravel, getitem) or
 * from the backend's allocator, whose own message follows.
 */
static void test_messages_name_the_call(void **state)
{
    int64_t n = 4, negative[2] = {3, -1}, huge = (int64_t)1 << 30, stride = 8, two[2] = {2, 2};
    int64_t unknown[2] = {-1, -1};
    gm_index_item item = GM_IDX_INT(9);
    gm_context *ctx = NULL;
    gm_array *a = NULL, *t = NULL, *r = NULL;

    (void)state;
    assert_ok(rt_fault_context(NULL, &ctx));
    assert_status(gm_device_array(ctx, -1, &n, GM_FLOAT64, GM_ORDER_C, &a), GM_ERR_INVALID_ARG);
    assert_message_begins("gm_device_array: ndim must be >= 0, got -1");
    assert_status(gm_device_array(ctx, 2, negative, GM_FLOAT64, GM_ORDER_C, &a),
                  GM_ERR_INVALID_ARG);
    assert_message_begins("gm_device_array: negative extent -1 on axis 1");
    assert_status(gm_device_array_strided(ctx, -1, &n, &stride, GM_FLOAT64, &a),
                  GM_ERR_INVALID_ARG);
    assert_message_begins("gm_device_array_strided: ndim must be >= 0, got -1");
    assert_status(gm_pinned_array(ctx, -1, &n, GM_FLOAT64, GM_ORDER_C, &a), GM_ERR_INVALID_ARG);
    assert_message_begins("gm_pinned_array: ndim must be >= 0, got -1");
    assert_status(gm_mapped_array(ctx, 1, negative + 1, GM_FLOAT64, GM_ORDER_C, 0, &a),
                  GM_ERR_INVALID_ARG);
    assert_message_begins("gm_mapped_array: negative extent -1 on axis 0");
    /* out of (256 MiB of simulated) device memory: the backend's message follows the call's name */
    assert_status(gm_device_array_strided(ctx, 1, &huge, &stride, GM_FLOAT64, &a),
                  GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_message_begins("gm_device_array_strided: mem_alloc: cannot allocate");
    assert_status(gm_device_array(ctx, 1, &huge, GM_FLOAT64, GM_ORDER_C, &a),
                  GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_message_begins("gm_device_array: mem_alloc: cannot allocate");
    rt_fault_fail_at(RT_HOST_ALLOC, 1, GM_ERR_DRIVER);
    assert_status(gm_pinned_array(ctx, 1, &n, GM_FLOAT64, GM_ORDER_C, &a), GM_ERR_DRIVER);
    assert_message_begins("gm_pinned_array: host_alloc: injected failure on call 1");
    assert_null(a);
    /* the view wrappers */
    assert_ok(gm_device_array(ctx, 2, two, GM_FLOAT64, GM_ORDER_C, &a));
    assert_status(gm_array_reshape(a, 2, unknown, GM_ORDER_C, &r), GM_ERR_INVALID_ARG);
    assert_message_begins("gm_array_reshape: ");
    assert_ok(gm_array_transpose(a, &t));
    assert_status(gm_array_ravel(t, GM_ORDER_C, &r), GM_ERR_NEEDS_COPY);
    assert_message_begins("gm_array_ravel: flattening the array");
    assert_status(gm_array_getitem(a, 1, &item, &r), GM_ERR_OUT_OF_RANGE);
    assert_message_begins("gm_array_getitem: ");
    assert_null(r);
    gm_array_release(&t);
    gm_array_release(&a);
    {
        /* the backend's refusals of device ranges past an allocation, after the call's name */
        float host[20] = {0}, one = 1.0f;
        int64_t shape[2] = {4, 5};
        gm_ndview hv, bad, strided;
        gm_array *f = NULL, *x = NULL;

        assert_ok(gm_device_array(ctx, 2, shape, GM_FLOAT32, GM_ORDER_C, &a));
        assert_ok(gm_ndview_init(host, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &hv));
        bad = *gm_array_view(a);
        bad.offset = 8; /* 8 bytes past the allocation's end */
        strided = *gm_array_view(a);
        strided.strides[1] = 8; /* not dense, and past the end */
        assert_status(gm_copy(ctx, &bad, &hv, NULL), GM_ERR_INVALID_ARG);
        assert_message_begins("gm_copy: copy: destination range");
        assert_status(gm_copy(ctx, &strided, &hv, NULL), GM_ERR_INVALID_ARG);
        assert_message_begins("gm_copy: ");
        assert_status(gm_to_device(ctx, &bad, NULL, &x), GM_ERR_INVALID_ARG);
        assert_message_begins("gm_to_device: ");
        assert_null(x);
        assert_ok(gm_array_from_foreign(ctx, &bad, NULL, NULL, NULL, &f));
        assert_status(gm_array_copy_to_device(f, &hv, NULL), GM_ERR_INVALID_ARG);
        assert_message_begins("gm_array_copy_to_device: copy: destination range");
        assert_status(gm_array_copy_to_host_new(f, NULL, &x), GM_ERR_INVALID_ARG);
        assert_message_begins("gm_array_copy_to_host_new: ");
        assert_null(x);
        assert_status(gm_array_fill(f, &one, NULL), GM_ERR_INVALID_ARG);
        assert_message_begins("gm_array_fill: ");
        assert_status(gm_array_memset(f, 0, NULL), GM_ERR_INVALID_ARG);
        assert_message_begins("gm_array_memset: memset: ");
        gm_array_release(&f);
        gm_array_release(&a);
    }
    gm_context_destroy(&ctx);
}

/* Fail bookkeeping allocation number N for every N the scenario makes: no leak, no crash. */
static void test_injected_alloc_failures(void **state)
{
    int64_t n = 1;

    (void)state;
    for (;; n++) {
        gm_status s = GM_OK;

        rt_fault_reset();
        rt_alloc_fail_at(n);
        s = scenario();
        if (rt_alloc_sweep_done(s, n, 100000))
            break;
    }
    print_message("%lld bookkeeping allocations failed in turn\n", (long long)n);
    assert_true(n > 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_device_array_layouts, test_setup),
        cmocka_unit_test_setup(test_reused_descriptors, test_setup),
        cmocka_unit_test_setup(test_device_array_strided, test_setup),
        cmocka_unit_test_setup(test_device_array_like, test_setup),
        cmocka_unit_test_setup(test_size_zero, test_setup),
        cmocka_unit_test_setup(test_round_trip_contiguous, test_setup),
        cmocka_unit_test_setup(test_round_trip_strided_host, test_setup),
        cmocka_unit_test_setup(test_f_order, test_setup),
        cmocka_unit_test_setup(test_copy_to_device_and_mismatch, test_setup),
        cmocka_unit_test_setup(test_copy_size_one_axes, test_setup),
        cmocka_unit_test_setup(test_copy_strategies, test_setup),
        cmocka_unit_test_setup(test_copy_strided_unsupported_falls_back, test_setup),
        cmocka_unit_test_setup(test_pitched_and_pieces, test_setup),
        cmocka_unit_test_setup(test_staged_device_to_device, test_setup),
        cmocka_unit_test_setup(test_staged_host_read_at_call, test_setup),
        cmocka_unit_test_setup(test_copy_huge_strides, test_setup),
        cmocka_unit_test_setup(test_host_to_host, test_setup),
        cmocka_unit_test_setup(test_staged_failure_paths, test_setup),
        cmocka_unit_test_setup(test_fill, test_setup),
        cmocka_unit_test_setup(test_fill_strided_sizes, test_setup),
        cmocka_unit_test_setup(test_memset, test_setup),
        cmocka_unit_test_setup(test_derive, test_setup),
        cmocka_unit_test_setup(test_array_views_have_reserved_zero, test_setup),
        cmocka_unit_test_setup(test_view_wrappers, test_setup),
        cmocka_unit_test_setup(test_views_keep_buffer_alive, test_setup),
        cmocka_unit_test_setup(test_wrong_context, test_setup),
        cmocka_unit_test_setup(test_null_arguments, test_setup),
        cmocka_unit_test_setup(test_messages_name_the_call, test_setup),
        cmocka_unit_test_setup(test_injected_alloc_failures, test_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, gm_test_restore_allocator);
}
