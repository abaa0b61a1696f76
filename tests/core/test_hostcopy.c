/*
 * The strided host copy engine (src/core/hostcopy.c), checked against a
 * naive element-by-element reference loop on random layouts: 1-5 dims with 0
 * and 1 extents, random steps (negative too), permuted axes, gaps and
 * broadcast sources, every item size; plus contiguous, transpose, 0-d and
 * error cases. Whole buffers are compared, so bytes outside the destination
 * view must stay untouched.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "gm_test.h"

#include "backend.h"

#define MAX_TEST_DIMS 5

/* A view over its own buffer. */
typedef struct side {
    gm_ndview view;
    unsigned char *buf;
    size_t bytes;
} side;

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

/* xorshift64*: deterministic across runs. */
static uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717u;
}

/* A uniform integer in [lo, hi]. */
static int64_t rnd_range(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

/* dtypes of every item size the engine specialises, and two it does not. */
static gm_dtype dtype_of_size(size_t k)
{
    gm_dtype odd = {GM_DTYPE_UINT, 8, 3};
    gm_dtype wide = {GM_DTYPE_FLOAT, 64, 4};

    switch (k) {
    case 1:
        return GM_UINT8;
    case 2:
        return GM_FLOAT16;
    case 4:
        return GM_FLOAT32;
    case 8:
        return GM_INT64;
    case 16:
        return GM_COMPLEX128;
    case 3:
        return odd;
    default:
        return wide;
    }
}

static const size_t item_sizes[] = {1, 2, 4, 8, 16, 3, 32};
#define N_ITEM_SIZES (sizeof item_sizes / sizeof item_sizes[0])

/* Fill a buffer with random bytes. */
static void fill_random(unsigned char *buf, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (unsigned char)rnd();
}

/* A random permutation of 0..n-1. */
static void random_perm(int n, int *perm)
{
    for (int i = 0; i < n; i++)
        perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rnd_range(0, i);
        int t = perm[i];

        perm[i] = perm[j];
        perm[j] = t;
    }
}

/*
 * A random view of `shape` over a fresh buffer: a parent array with permuted
 * axis order and an optional gap between items, sliced with steps 1-3, each
 * axis reversed at random, and (when allowed) some axes broadcast (stride 0).
 */
static void make_side(int ndim, const int64_t *shape, gm_dtype dtype, bool broadcast, side *s)
{
    int64_t k = (int64_t)gm_dtype_itemsize(dtype);
    int64_t step[MAX_TEST_DIMS], parent[MAX_TEST_DIMS], pstride[MAX_TEST_DIMS];
    int perm[MAX_TEST_DIMS];
    int64_t stride = k * rnd_range(1, 2);

    memset(&s->view, 0, sizeof s->view);
    random_perm(ndim, perm);
    for (int i = 0; i < ndim; i++) {
        step[i] = rnd_range(1, 3);
        parent[i] = shape[i] == 0 ? 1 : (shape[i] - 1) * step[i] + 1 + rnd_range(0, 1);
    }
    for (int j = ndim - 1; j >= 0; j--) {
        pstride[perm[j]] = stride;
        stride *= parent[perm[j]];
    }
    for (int i = 0; i < ndim; i++) {
        bool reverse = rnd() % 3 == 0;
        bool zero = broadcast && rnd() % 5 == 0;

        s->view.shape[i] = shape[i];
        s->view.strides[i] = zero ? 0 : (reverse ? -1 : 1) * step[i] * pstride[i];
        if (reverse && !zero && shape[i] > 0)
            s->view.offset += (shape[i] - 1) * step[i] * pstride[i];
    }
    s->bytes = (size_t)(stride + k);
    s->buf = test_malloc(s->bytes);
    fill_random(s->buf, s->bytes);
    s->view.data = s->buf;
    s->view.dtype = dtype;
    s->view.ndim = ndim;
    s->view.device_id = -1;
}

/* The naive reference: every element by index, one memcpy each. */
static void reference_copy(const gm_ndview *dst, const gm_ndview *src)
{
    int64_t idx[GM_MAX_DIMS] = {0};
    size_t k = gm_dtype_itemsize(dst->dtype);
    int64_t n = gm_ndview_size(dst);

    for (int64_t e = 0; e < n; e++) {
        int64_t doff = dst->offset;
        int64_t soff = src->offset;

        for (int i = 0; i < dst->ndim; i++) {
            doff += idx[i] * dst->strides[i];
            soff += idx[i] * src->strides[i];
        }
        memcpy((char *)dst->data + doff, (const char *)src->data + soff, k);
        for (int i = dst->ndim - 1; i >= 0; i--) {
            if (++idx[i] < dst->shape[i])
                break;
            idx[i] = 0;
        }
    }
}

/* Copy with the engine and with the reference; the whole buffers must agree. */
static void check_against_reference(const side *dst, const side *src)
{
    unsigned char *expect = test_malloc(dst->bytes);
    gm_ndview ref = dst->view;

    memcpy(expect, dst->buf, dst->bytes);
    ref.data = expect;
    reference_copy(&ref, &src->view);
    assert_ok(gm__host_copy_strided(&dst->view, &src->view));
    assert_memory_equal(dst->buf, expect, dst->bytes);
    test_free(expect);
}

/* Free a side's buffer. */
static void free_side(side *s)
{
    test_free(s->buf);
    s->buf = NULL;
}

/* A random shape of 1-5 dims, extents 0-6 (0 rarely), at most ~4096 elements. */
static int random_shape(int64_t *shape)
{
    int ndim = (int)rnd_range(1, MAX_TEST_DIMS);

    for (int i = 0; i < ndim; i++) {
        shape[i] = rnd_range(1, ndim <= 2 ? 40 : 7);
        if (rnd() % 25 == 0)
            shape[i] = 0;
        else if (rnd() % 5 == 0)
            shape[i] = 1;
    }
    return ndim;
}

/* Thousands of random layouts on both sides, every item size. */
static void test_random_layouts(void **state)
{
    int64_t shape[MAX_TEST_DIMS];

    for (int iter = 0; iter < 3000; iter++) {
        int ndim = random_shape(shape);
        gm_dtype dtype = dtype_of_size(item_sizes[iter % N_ITEM_SIZES]);
        side dst, src;

        make_side(ndim, shape, dtype, false, &dst);
        make_side(ndim, shape, dtype, true, &src);
        check_against_reference(&dst, &src);
        free_side(&dst);
        free_side(&src);
    }
}

/* Describe a C-contiguous array of `shape` in buf. */
static gm_ndview c_view(void *buf, int ndim, const int64_t *shape, gm_dtype dtype)
{
    gm_ndview v;

    assert_ok(gm_ndview_init(buf, dtype, ndim, shape, NULL, GM_ORDER_C, &v));
    return v;
}

/* Swap the last two axes of a view (a transposed view of the same bytes). */
static gm_ndview swap_last(gm_ndview v)
{
    int a = v.ndim - 2;
    int64_t t = v.shape[a];

    v.shape[a] = v.shape[a + 1];
    v.shape[a + 1] = t;
    t = v.strides[a];
    v.strides[a] = v.strides[a + 1];
    v.strides[a + 1] = t;
    return v;
}

/* A C-contiguous side of `shape` over a fresh random buffer. */
static side side_for(int ndim, const int64_t *shape, gm_dtype dtype)
{
    side s;

    s.bytes = gm_dtype_itemsize(dtype);
    for (int i = 0; i < ndim; i++)
        s.bytes *= (size_t)(shape[i] > 0 ? shape[i] : 1);
    s.buf = test_malloc(s.bytes);
    fill_random(s.buf, s.bytes);
    s.view = c_view(s.buf, ndim, shape, dtype);
    return s;
}

/* Transposes (tile kernel, with ragged edge tiles) for every item size, both directions. */
static void test_transpose_2d_3d(void **state)
{
    static const int64_t shapes[][3] = {{1, 133, 70}, {3, 67, 129},  {2, 5, 300},
                                        {4, 64, 64},  {1, 130, 197}, {1, 256, 3}};

    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        for (size_t i = 0; i < N_ITEM_SIZES; i++) {
            gm_dtype dtype = dtype_of_size(item_sizes[i]);
            int64_t tshape[3] = {shapes[t][0], shapes[t][2], shapes[t][1]};
            side src = side_for(3, shapes[t], dtype);
            side dst = side_for(3, tshape, dtype);

            src.view = swap_last(src.view); /* now of shape tshape, transposed */
            check_against_reference(&dst, &src);
            dst.view = swap_last(dst.view); /* transposed destination, contiguous source */
            src.view = swap_last(src.view);
            check_against_reference(&dst, &src);
            free_side(&src);
            free_side(&dst);
        }
    }
}

/* Every other 4-byte item (a[::2]) gathered and scattered, odd and even lengths. */
static void test_every_other_4(void **state)
{
    static const int64_t lengths[] = {1, 2, 3, 7, 8, 1001};

    (void)state;
    for (size_t t = 0; t < sizeof lengths / sizeof lengths[0]; t++) {
        int64_t n = lengths[t], wide = 2 * n, step = 8;
        side packed = side_for(1, &n, GM_INT32);
        side strided = side_for(1, &wide, GM_INT32);

        strided.view.shape[0] = n; /* every other item of the 2n-item buffer */
        strided.view.strides[0] = step;
        check_against_reference(&packed, &strided); /* gather */
        check_against_reference(&strided, &packed); /* scatter: odd items untouched */
        free_side(&packed);
        free_side(&strided);
    }
}

/* 4-byte items reversed (a[::-1]) on either side, odd and even lengths. */
static void test_reversed_4(void **state)
{
    static const int64_t lengths[] = {1, 2, 3, 5, 8, 1001};

    (void)state;
    for (size_t t = 0; t < sizeof lengths / sizeof lengths[0]; t++) {
        int64_t n = lengths[t];
        side a = side_for(1, &n, GM_FLOAT32);
        side b = side_for(1, &n, GM_FLOAT32);

        b.view.offset = (n - 1) * 4; /* b[::-1] */
        b.view.strides[0] = -4;
        check_against_reference(&a, &b);
        check_against_reference(&b, &a);
        for (int64_t i = 0; i < n; i++) /* the reference agrees with what reversal means */
            assert_memory_equal(a.buf + 4 * i, b.buf + 4 * (n - 1 - i), 4);
        free_side(&a);
        free_side(&b);
    }
}

/*
 * Narrow runs contiguous on both sides under a strided axis: the rows of a
 * pitched copy seen as uint8 (how a backend's 2-D copy reaches the engine),
 * every width from 1 to 17 bytes, so runs of 2, 4, 8 and 16 bytes go through
 * the widened-item kernels and the others through memcpy runs; with the rows
 * reversed, a broadcast source row, and a transposed outer pair of axes.
 */
static void test_narrow_rows(void **state)
{
    (void)state;
    for (int64_t width = 1; width <= 17; width++) {
        int64_t rows = 37, pitch = width * 2 + 3;
        int64_t wide[2] = {rows, pitch}, packed_shape[2] = {rows, width};
        side padded = side_for(2, wide, GM_UINT8);
        side packed = side_for(2, packed_shape, GM_UINT8);

        padded.view.shape[1] = width; /* the first `width` bytes of each row */
        check_against_reference(&packed, &padded);
        check_against_reference(&padded, &packed); /* the gaps stay untouched */
        padded.view.offset = (rows - 1) * pitch;   /* rows reversed */
        padded.view.strides[0] = -pitch;
        check_against_reference(&packed, &padded);
        check_against_reference(&padded, &packed);
        padded.view.offset = 0;
        padded.view.strides[0] = 0; /* one row broadcast to every row */
        check_against_reference(&packed, &padded);
        free_side(&padded);
        free_side(&packed);
    }
    for (int64_t width = 2; width <= 16; width *= 2) {
        int64_t shape[3] = {70, 65, width}, tshape[3] = {65, 70, width};
        side src = side_for(3, shape, GM_UINT8);
        side dst = side_for(3, tshape, GM_UINT8);
        gm_ndview t = src.view; /* src with its outer axes swapped: a transpose of runs */

        t.shape[0] = 65;
        t.shape[1] = 70;
        t.strides[0] = src.view.strides[1];
        t.strides[1] = src.view.strides[0];
        src.view = t;
        check_against_reference(&dst, &src);
        free_side(&src);
        free_side(&dst);
    }
}

/* A contiguous copy, reversed on both sides too; 0-d copies one item. */
static void test_contiguous_and_0d(void **state)
{
    int64_t shape[2] = {37, 41};
    side src = side_for(2, shape, GM_FLOAT64);
    side dst = side_for(2, shape, GM_FLOAT64);
    gm_ndview d0, s0;

    check_against_reference(&dst, &src);
    assert_memory_equal(dst.buf, src.buf, dst.bytes);
    for (int i = 0; i < 2; i++) {
        dst.view.offset += (shape[i] - 1) * dst.view.strides[i];
        dst.view.strides[i] = -dst.view.strides[i];
        src.view.offset += (shape[i] - 1) * src.view.strides[i];
        src.view.strides[i] = -src.view.strides[i];
    }
    check_against_reference(&dst, &src);
    d0 = c_view(dst.buf + 8, 0, NULL, GM_FLOAT64);
    s0 = c_view(src.buf + 16, 0, NULL, GM_FLOAT64);
    assert_ok(gm__host_copy_strided(&d0, &s0));
    assert_memory_equal(dst.buf + 8, src.buf + 16, 8);
    free_side(&src);
    free_side(&dst);
}

/* Empty arrays copy nothing, even with NULL data; size-1 axes are ignored. */
static void test_empty_and_unit_axes(void **state)
{
    int64_t empty[3] = {4, 0, 5};
    int64_t unit[4] = {1, 6, 1, 5};
    gm_ndview d = c_view(NULL, 3, empty, GM_INT32);
    gm_ndview s = c_view(NULL, 3, empty, GM_INT32);
    side src = side_for(4, unit, GM_INT32);
    side dst = side_for(4, unit, GM_INT32);

    assert_ok(gm__host_copy_strided(&d, &s));
    dst.view.strides[0] = 12345; /* strides of extent-1 axes do not matter */
    src.view.strides[2] = -999;
    check_against_reference(&dst, &src);
    free_side(&src);
    free_side(&dst);
}

/* A broadcast source (stride 0) fills the destination. */
static void test_broadcast_source(void **state)
{
    int64_t shape[2] = {50, 9};
    int32_t row[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    int32_t out[50][9];
    gm_ndview d = c_view(out, 2, shape, GM_INT32);
    gm_ndview s = c_view(row, 2, shape, GM_INT32);

    s.strides[0] = 0;
    assert_ok(gm__host_copy_strided(&d, &s));
    for (int i = 0; i < 50; i++)
        assert_memory_equal(out[i], row, sizeof row);
}

/* Errors: NULLs, mismatched shapes and dtypes (both named), broadcast destinations. */
static void test_errors(void **state)
{
    int64_t a[2] = {2, 3}, b[2] = {3, 2}, c[3] = {2, 3, 1};
    float buf[8] = {0};
    gm_ndview d = c_view(buf, 2, a, GM_FLOAT32);
    gm_ndview s = c_view(buf, 2, b, GM_FLOAT32);
    gm_ndview s3 = c_view(buf, 3, c, GM_FLOAT32);
    gm_ndview si = c_view(buf, 2, a, GM_INT32);
    gm_ndview bad = d;

    assert_status(gm__host_copy_strided(NULL, &s), GM_ERR_NULL_POINTER);
    assert_status(gm__host_copy_strided(&d, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm__host_copy_strided(&d, &s), GM_ERR_SHAPE_MISMATCH);
    assert_message_contains("(2, 3)");
    assert_message_contains("(3, 2)");
    assert_status(gm__host_copy_strided(&d, &s3), GM_ERR_SHAPE_MISMATCH);
    assert_message_contains("(2, 3, 1)");
    assert_status(gm__host_copy_strided(&d, &si), GM_ERR_DTYPE);
    assert_message_contains("float32");
    assert_message_contains("int32");
    bad.data = NULL;
    assert_status(gm__host_copy_strided(&bad, &d), GM_ERR_NULL_POINTER);
    assert_status(gm__host_copy_check(&d, &bad), GM_ERR_NULL_POINTER);
    bad = d;
    bad.strides[0] = 0;
    assert_status(gm__host_copy_strided(&bad, &d), GM_ERR_INVALID_ARG);
    assert_message_contains("stride 0");
    assert_ok(gm__host_copy_strided(&d, &bad)); /* broadcast sources are fine */
    bad = d;
    bad.strides[0] = INT64_MIN; /* a valid descriptor, but no copy can walk it */
    assert_status(gm__host_copy_strided(&bad, &d), GM_ERR_OVERFLOW);
    assert_status(gm__host_copy_strided(&d, &bad), GM_ERR_OVERFLOW);
    bad = d;
    bad.ndim = GM_MAX_DIMS + 1;
    assert_status(gm__host_copy_strided(&bad, &d), GM_ERR_TOO_MANY_DIMS);
    bad = d;
    bad.shape[1] = -3;
    assert_status(gm__host_copy_check(&d, &bad), GM_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_layouts),
        cmocka_unit_test(test_transpose_2d_3d),
        cmocka_unit_test(test_every_other_4),
        cmocka_unit_test(test_narrow_rows),
        cmocka_unit_test(test_reversed_4),
        cmocka_unit_test(test_contiguous_and_0d),
        cmocka_unit_test(test_empty_and_unit_axes),
        cmocka_unit_test(test_broadcast_source),
        cmocka_unit_test(test_errors),
    };

    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
