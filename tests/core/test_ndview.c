/*
 * Tests for the descriptor basics in src/core/ndview.c: construction,
 * validation, contiguous strides, size, contiguity, extent, formatting.
 *
 * Expected strides, contiguity flags and byte extents in the tables were
 * produced by numpy 1.24 while this file was written and then hard-coded
 * (arrays are np.ndarray(shape, dtype, buffer=buf, offset=offset,
 * strides=strides); extents are numpy.byte_bounds minus the buffer address).
 */
#include <stdbool.h>
#include <string.h>

#include "gm_test.h"

/* Most dimensions of a layout in the tables. */
#define MAXD 6

/* dtype initializers usable in static tables (the GM_FLOAT64 constants are compound literals). */
#define D_F64  GM_DTYPE_INIT(GM_DTYPE_FLOAT, 64)
#define D_F32  GM_DTYPE_INIT(GM_DTYPE_FLOAT, 32)
#define D_I16  GM_DTYPE_INIT(GM_DTYPE_INT, 16)
#define D_I8   GM_DTYPE_INIT(GM_DTYPE_INT, 8)
#define D_C128 GM_DTYPE_INIT(GM_DTYPE_COMPLEX, 128)

/* Shape, strides and byte offset of a view. */
typedef struct layout {
    int ndim;
    int64_t shape[MAXD];
    int64_t strides[MAXD];
    int64_t offset;
} layout;

typedef struct contig_case {
    const char *name;
    layout in;
    gm_dtype dtype;
    bool c_contiguous, f_contiguous;
} contig_case;

typedef struct extent_case {
    const char *name;
    layout in;
    gm_dtype dtype;
    gm_status status;
    int64_t lo, hi;
} extent_case;

typedef struct strides_case {
    int ndim;
    int64_t shape[MAXD];
    int64_t itemsize;
    gm_order order;
    int64_t strides[MAXD];
} strides_case;

/* A host view of `l` (data is a dummy base; nothing dereferences it). */
static gm_ndview make_view(const layout *l, gm_dtype dtype)
{
    static char base[8];
    gm_ndview v;

    memset(&v, 0, sizeof(v));
    v.data = base;
    v.offset = l->offset;
    v.dtype = dtype;
    v.ndim = l->ndim;
    v.device_id = -1;
    for (int i = 0; i < l->ndim; i++) {
        v.shape[i] = l->shape[i];
        v.strides[i] = l->strides[i];
    }
    return v;
}

/* The test dtype of an item size used in strides_cases. */
static gm_dtype dtype_of_size(int64_t itemsize)
{
    static const gm_dtype by_log2[] = {D_I8, D_I16, D_F32, D_F64, D_C128};
    int k = 0;

    while ((INT64_C(1) << k) < itemsize)
        k++;
    return by_log2[k];
}

/* Fail unless strides[0..ndim) equal want. */
static void check_strides(const char *what, int ndim, const int64_t *strides, const int64_t *want)
{
    char got_text[128], want_text[128];

    if (ndim == 0 || memcmp(strides, want, (size_t)ndim * sizeof(int64_t)) == 0)
        return;
    print_error("%s: strides %s, numpy says %s\n", what,
                gm_format_shape(ndim, strides, got_text, sizeof(got_text)),
                gm_format_shape(ndim, want, want_text, sizeof(want_text)));
    fail();
}

/* Generated from numpy 1.24 and hard-coded: one case per line. */
/* clang-format off */
/* C/F contiguity: numpy flags.c_contiguous / flags.f_contiguous of np.ndarray(shape, dtype, buffer, offset, strides) */
static const contig_case contig_cases[] = {
    {"C (2,3,4) f8", {3, {2, 3, 4}, {96, 32, 8}, 0}, D_F64, true, false},
    {"F (2,3,4) f8", {3, {2, 3, 4}, {8, 16, 48}, 0}, D_F64, false, true},
    {"transposed (3,2) f4", {2, {3, 2}, {4, 12}, 0}, D_F32, false, true},
    {"sliced [:, ::2]", {2, {4, 3}, {48, 16}, 0}, D_F64, false, false},
    {"size-1 axis, any stride", {3, {3, 1, 4}, {32, 9992, 8}, 0}, D_F64, true, false},
    {"size-1 axes, F with junk", {4, {1, 3, 1, 4}, {0, 8, -7, 24}, 0}, D_F64, false, true},
    {"(1,1) any strides", {2, {1, 1}, {-5, 3}, 16}, D_F64, true, true},
    {"0-d", {0, {0}, {0}, 0}, D_F64, true, true},
    {"empty, junk strides", {3, {3, 0, 4}, {5, -6, 7}, 64}, D_F64, true, true},
    {"empty, zero strides", {2, {2, 0}, {0, 0}, 0}, D_F64, true, true},
    {"1-D unit stride", {1, {5}, {4}, 0}, D_F32, true, true},
    {"1-D negative", {1, {5}, {-4}, 16}, D_F32, false, false},
    {"1-D stride 0", {1, {4}, {0}, 0}, D_F64, false, false},
    {"(1,) stride 0", {1, {1}, {0}, 0}, D_F64, true, true},
    {"broadcast (3,4)", {2, {3, 4}, {0, 8}, 0}, D_F64, false, false},
    {"broadcast (4,3) F", {2, {4, 3}, {8, 0}, 0}, D_F64, false, false},
    {"(2,3) i2", {2, {2, 3}, {6, 2}, 0}, D_I16, true, false},
    {"reversed rows", {2, {4, 5}, {-40, 8}, 120}, D_F64, false, false},
    {"(2,1,3) C", {3, {2, 1, 3}, {24, 0, 8}, 0}, D_F64, true, false},
    {"(3,1) column of F", {2, {3, 1}, {8, 0}, 0}, D_F64, true, true},
    {"c16 (2,2) F", {2, {2, 2}, {16, 32}, 0}, D_C128, false, true},
    {"1-D wrong stride", {1, {3}, {16}, 0}, D_F64, false, false},
    {"(5,1,1) stride of item", {3, {5, 1, 1}, {8, 8, 8}, 0}, D_F64, true, true},
};

/* gm_ndview_extent: numpy.byte_bounds(a) minus the buffer address (size-0 views: [offset, offset), see below) */
static const extent_case extent_cases[] = {
    {"Numba test_extent_1d: np.empty(4)", {1, {4}, {8}, 0}, D_F64, GM_OK, 0, 32},
    {"Numba test_extent_2d: np.empty((4, 5))", {2, {4, 5}, {40, 8}, 0}, D_F64, GM_OK, 0, 160},
    {"Numba: np.empty((4, 5))[::2]", {2, {2, 5}, {80, 8}, 0}, D_F64, GM_OK, 0, 120},
    {"(4,) stride -8 (Numba says [24, 24))", {1, {4}, {-8}, 24}, D_F64, GM_OK, 0, 32},
    {"(4,5)[::-1, ::-2]", {2, {4, 3}, {-40, -16}, 152}, D_F64, GM_OK, 0, 160},
    {"transposed", {2, {5, 4}, {8, 40}, 0}, D_F64, GM_OK, 0, 160},
    {"broadcast (3,4) stride 0", {2, {3, 4}, {0, 8}, 0}, D_F64, GM_OK, 0, 32},
    {"all-zero strides", {2, {3, 4}, {0, 0}, 8}, D_F32, GM_OK, 8, 12},
    {"0-d", {0, {0}, {0}, 40}, D_F64, GM_OK, 40, 48},
    {"size-1 axis with huge stride", {3, {2, 1, 3}, {24, 1000000000000000, 8}, 0}, D_F64, GM_OK, 0, 48},
    {"mixed signs", {3, {2, 3, 4}, {-96, 32, -8}, 120}, D_F64, GM_OK, 0, 192},
    {"c16 offset 3", {1, {2}, {48}, 3}, D_C128, GM_OK, 3, 67},
    /* size 0: [offset, offset) (numpy.byte_bounds agrees: every empty array is contiguous) */
    {"empty (0,)", {1, {0}, {8}, 16}, D_F64, GM_OK, 16, 16}, /* numpy.byte_bounds: [16, 16) */
    {"empty (3,0,4), negative strides", {3, {3, 0, 4}, {-5, 6, -7}, 64}, D_F64, GM_OK, 64, 64}, /* numpy.byte_bounds: [64, 64) */
    {"np.empty(4)[2:1]", {1, {0}, {8}, 0}, D_F64, GM_OK, 0, 0}, /* numpy.byte_bounds: [0, 0) */
};

/* gm_contiguous_strides: np.ndarray(shape, dtype, buffer=buf, order=order).strides */
static const strides_case strides_cases[] = {
    {3, {2, 3, 4}, 4, GM_ORDER_C, {48, 16, 4}},
    {3, {2, 3, 4}, 4, GM_ORDER_F, {4, 8, 24}},
    {3, {2, 3, 4}, 8, GM_ORDER_C, {96, 32, 8}},
    {3, {2, 3, 4}, 8, GM_ORDER_F, {8, 16, 48}},
    {1, {5}, 8, GM_ORDER_C, {8}},
    {1, {5}, 8, GM_ORDER_F, {8}},
    {0, {0}, 8, GM_ORDER_C, {0}},
    {0, {0}, 8, GM_ORDER_F, {0}},
    {3, {2, 0, 3}, 8, GM_ORDER_C, {24, 24, 8}},
    {3, {2, 0, 3}, 8, GM_ORDER_F, {8, 16, 16}},
    {1, {0}, 2, GM_ORDER_C, {2}},
    {1, {0}, 2, GM_ORDER_F, {2}},
    {3, {1, 1, 1}, 16, GM_ORDER_C, {16, 16, 16}},
    {3, {1, 1, 1}, 16, GM_ORDER_F, {16, 16, 16}},
    {3, {3, 1, 2}, 8, GM_ORDER_C, {16, 16, 8}},
    {3, {3, 1, 2}, 8, GM_ORDER_F, {8, 24, 24}},
    {2, {4, 1}, 1, GM_ORDER_C, {1, 1}},
    {2, {4, 1}, 1, GM_ORDER_F, {1, 4}},
    {2, {0, 0}, 4, GM_ORDER_C, {4, 4}},
    {2, {0, 0}, 4, GM_ORDER_F, {4, 4}},
    {4, {2, 1, 0, 3}, 8, GM_ORDER_C, {24, 24, 24, 8}},
    {4, {2, 1, 0, 3}, 8, GM_ORDER_F, {8, 16, 16, 16}},
};
/* clang-format on */

static void test_contiguous_strides(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(strides_cases) / sizeof(strides_cases[0]); k++) {
        const strides_case *c = &strides_cases[k];
        int64_t strides[MAXD] = {0};

        assert_ok(gm_contiguous_strides(c->ndim, c->shape, c->itemsize, c->order, strides));
        check_strides("gm_contiguous_strides", c->ndim, strides, c->strides);
    }
}

static void test_contiguous_strides_errors(void **state)
{
    static const int64_t shape[] = {2, 3};
    static const int64_t negative[] = {2, -1};
    static const int64_t too_many_bytes[] = {INT64_C(1) << 40, INT64_C(1) << 20};
    static const int64_t too_many_items[] = {INT64_C(1) << 62, 4, 0};
    int64_t strides[3] = {-9, -9, -9};

    (void)state;
    assert_ok(gm_contiguous_strides(0, NULL, 8, GM_ORDER_C, NULL));
    assert_status(gm_contiguous_strides(-1, shape, 8, GM_ORDER_C, strides), GM_ERR_INVALID_ARG);
    assert_message_contains("gm_contiguous_strides: ndim must be >= 0, got -1");
    assert_status(gm_contiguous_strides(65, shape, 8, GM_ORDER_C, strides), GM_ERR_TOO_MANY_DIMS);
    assert_message_contains("ndim 65 exceeds GM_MAX_DIMS (64)");
    assert_status(gm_contiguous_strides(2, NULL, 8, GM_ORDER_C, strides), GM_ERR_NULL_POINTER);
    assert_status(gm_contiguous_strides(2, shape, 8, GM_ORDER_C, NULL), GM_ERR_NULL_POINTER);
    assert_message_contains("shape and strides_out must not be NULL");
    assert_status(gm_contiguous_strides(2, shape, 8, GM_ORDER_A, strides), GM_ERR_INVALID_ARG);
    assert_message_contains("order must be 'C' or 'F', got 65");
    assert_status(gm_contiguous_strides(2, shape, 0, GM_ORDER_C, strides), GM_ERR_INVALID_ARG);
    assert_message_contains("itemsize must be > 0, got 0");
    assert_status(gm_contiguous_strides(2, negative, 8, GM_ORDER_F, strides), GM_ERR_INVALID_ARG);
    assert_message_contains("negative extent -1 on axis 1");
    assert_status(gm_contiguous_strides(2, too_many_bytes, 8, GM_ORDER_C, strides),
                  GM_ERR_OVERFLOW);
    assert_message_contains("gm_contiguous_strides: the byte size of the shape overflows");
    /* numpy: "array is too big" even with an extent of 0 */
    assert_status(gm_contiguous_strides(3, too_many_items, 8, GM_ORDER_C, strides),
                  GM_ERR_OVERFLOW);
    assert_message_contains("overflows");
    assert_int_equal(strides[0], -9); /* written only on success */
    assert_int_equal(strides[1], -9);
    assert_int_equal(strides[2], -9);
}

/* Fail unless v is what gm_ndview_init must produce for these arguments. */
static void check_init(const gm_ndview *v, void *data, gm_dtype dtype, int ndim,
                       const int64_t *shape, const int64_t *strides)
{
    assert_ptr_equal(v->data, data);
    assert_int_equal(v->offset, 0);
    assert_true(gm_dtype_equal(v->dtype, dtype));
    assert_int_equal(v->ndim, ndim);
    assert_int_equal(v->memory, GM_MEMORY_HOST);
    assert_int_equal(v->device_id, -1);
    assert_int_equal(v->reserved, 0);
    if (ndim > 0)
        assert_memory_equal(v->shape, shape, (size_t)ndim * sizeof(int64_t));
    check_strides("gm_ndview_init", ndim, v->strides, strides);
}

/* Strides NULL: numpy's C / F strides (the strides_cases table). */
static void test_init_contiguous(void **state)
{
    static char data[4];

    (void)state;
    for (size_t k = 0; k < sizeof(strides_cases) / sizeof(strides_cases[0]); k++) {
        const strides_case *c = &strides_cases[k];
        gm_dtype dtype = dtype_of_size(c->itemsize);
        gm_ndview v;

        assert_ok(gm_ndview_init(data, dtype, c->ndim, c->shape, NULL, c->order, &v));
        check_init(&v, data, dtype, c->ndim, c->shape, c->strides);
    }
}

/* Strides given: copied as they are (negative and zero included); order is then ignored. */
static void test_init_given_strides(void **state)
{
    static const int64_t shape[] = {4, 1, 3};
    static const int64_t strides[] = {-24, 999, 0};
    gm_ndview v;
    gm_dtype f64 = D_F64;

    (void)state;
    assert_ok(gm_ndview_init(NULL, f64, 3, shape, strides, GM_ORDER_K, &v));
    check_init(&v, NULL, f64, 3, shape, strides);
    assert_ok(gm_ndview_init(NULL, f64, 0, NULL, NULL, GM_ORDER_C, &v));
    check_init(&v, NULL, f64, 0, NULL, NULL);
    assert_int_equal(gm_ndview_size(&v), 1);
}

static void test_init_errors(void **state)
{
    static const int64_t shape[] = {2, 3};
    static const int64_t negative[] = {2, -3};
    static const int64_t huge[] = {INT64_C(1) << 61, 2};
    static const int64_t empty_huge[] = {0, INT64_C(1) << 62};
    static const int64_t four_by_three[] = {4, 3};
    static const int64_t far[] = {INT64_MAX / 2, 8};
    gm_dtype f64 = D_F64, bad = {GM_DTYPE_FLOAT, 24, 1};
    gm_ndview v, sentinel;

    (void)state;
    memset(&v, 0xA5, sizeof(v));
    sentinel = v;
    assert_status(gm_ndview_init(NULL, f64, 2, shape, NULL, GM_ORDER_C, NULL), GM_ERR_NULL_POINTER);
    assert_message_contains("gm_ndview_init: out_p is NULL");
    assert_status(gm_ndview_init(NULL, f64, 2, NULL, NULL, GM_ORDER_C, &v), GM_ERR_NULL_POINTER);
    assert_message_contains("gm_ndview_init: shape is NULL");
    assert_status(gm_ndview_init(NULL, f64, -1, shape, NULL, GM_ORDER_C, &v), GM_ERR_INVALID_ARG);
    assert_message_contains("gm_ndview_init: ndim must be >= 0, got -1");
    assert_status(gm_ndview_init(NULL, f64, 65, shape, NULL, GM_ORDER_C, &v), GM_ERR_TOO_MANY_DIMS);
    assert_message_contains("gm_ndview_init: ndim 65 exceeds GM_MAX_DIMS (64)");
    assert_status(gm_ndview_init(NULL, bad, 2, shape, NULL, GM_ORDER_C, &v), GM_ERR_DTYPE);
    assert_message_contains("gm_ndview_init: invalid dtype {code 2, bits 24, lanes 1}");
    assert_status(gm_ndview_init(NULL, f64, 2, negative, NULL, GM_ORDER_C, &v), GM_ERR_INVALID_ARG);
    assert_message_contains("gm_ndview_init: negative extent -3 on axis 1");
    assert_status(gm_ndview_init(NULL, f64, 2, shape, NULL, GM_ORDER_A, &v), GM_ERR_INVALID_ARG);
    assert_message_contains("gm_ndview_init: order must be 'C' or 'F', got 65");
    assert_status(gm_ndview_init(NULL, f64, 2, huge, NULL, GM_ORDER_F, &v), GM_ERR_OVERFLOW);
    assert_message_contains("gm_ndview_init: the byte size of the shape overflows");
    assert_status(gm_ndview_init(NULL, f64, 2, empty_huge, shape, GM_ORDER_C, &v), GM_ERR_OVERFLOW);
    assert_message_contains("gm_ndview_init: the byte size of shape (0, 4611686018427387904)");
    assert_status(gm_ndview_init(NULL, f64, 2, four_by_three, far, GM_ORDER_C, &v),
                  GM_ERR_OVERFLOW);
    assert_message_contains("gm_ndview_init: the byte extent");
    assert_memory_equal(&v, &sentinel, sizeof(v));
}

/* One gm_ndview_validate failure: status and message fragment. */
static void check_invalid(const gm_ndview *v, gm_status status, const char *fragment)
{
    gm_test_check_status(gm_ndview_validate(v), status, fragment, __FILE__, __LINE__);
    assert_message_contains("gm_ndview_validate: ");
    assert_message_contains(fragment);
}

static void test_validate(void **state)
{
    static const layout two_d = {2, {4, 6}, {48, 8}, 0};
    static const layout odd = {3, {4, 1, 3}, {-40, 0, 0}, 200};
    gm_ndview v = make_view(&two_d, (gm_dtype)D_F64);

    (void)state;
    assert_ok(gm_ndview_validate(&v));
    v = make_view(&odd, (gm_dtype)D_F64);
    assert_ok(gm_ndview_validate(&v));
    check_invalid(NULL, GM_ERR_NULL_POINTER, "view is NULL");
    v.ndim = 65;
    check_invalid(&v, GM_ERR_TOO_MANY_DIMS, "ndim 65 exceeds GM_MAX_DIMS (64)");
    v.ndim = -2;
    check_invalid(&v, GM_ERR_INVALID_ARG, "ndim must be >= 0, got -2");
    v = make_view(&two_d, (gm_dtype)D_F64);
    v.dtype.code = 3;
    check_invalid(&v, GM_ERR_DTYPE, "invalid dtype {code 3, bits 64, lanes 1}");
    v = make_view(&two_d, (gm_dtype)D_F64);
    v.shape[0] = -4;
    check_invalid(&v, GM_ERR_INVALID_ARG, "negative extent -4 on axis 0");
    v.shape[0] = INT64_C(1) << 62;
    check_invalid(&v, GM_ERR_OVERFLOW, "element count of the shape overflows");
    v.shape[0] = INT64_C(1) << 59; /* 2^59 * 6 items fit, * 8 bytes do not */
    check_invalid(&v, GM_ERR_OVERFLOW, "byte size of shape (576460752303423488, 6) overflows");
    v.shape[0] = 0; /* numpy: "array is too big" even when empty */
    v.shape[1] = INT64_C(1) << 61;
    check_invalid(&v, GM_ERR_OVERFLOW, "byte size of shape (0, 2305843009213693952) overflows");
    v = make_view(&two_d, (gm_dtype)D_F64);
    v.strides[1] = INT64_MIN / 4;
    check_invalid(&v, GM_ERR_OVERFLOW, "the byte extent of axis 1 overflows");
    v = make_view(&two_d, (gm_dtype)D_F64);
    v.offset = INT64_MAX - 100; /* the last byte is at offset + 192 */
    check_invalid(&v, GM_ERR_OVERFLOW, "the byte extent overflows");
    /* An empty view reaches no byte, so a stride whose reach would overflow is fine. */
    v = make_view(&two_d, (gm_dtype)D_F64);
    v.shape[0] = 0;
    v.strides[1] = INT64_MAX / 2;
    assert_ok(gm_ndview_validate(&v));
    v.offset = INT64_MAX - 4; /* nor does its offset plus an item */
    assert_ok(gm_ndview_validate(&v));
}

static void test_size_nbytes_itemsize(void **state)
{
    static const struct {
        layout in;
        gm_dtype dtype;
        int64_t size, nbytes, itemsize; /* numpy's a.size, a.nbytes, a.itemsize */
    } cases[] = {
        {{3, {2, 3, 4}, {48, 16, 4}, 0}, D_F32, 24, 96, 4},
        {{0, {0}, {0}, 0}, D_F64, 1, 8, 8},
        {{3, {2, 0, 4}, {0, 0, 0}, 0}, D_F64, 0, 0, 8},
        {{1, {1}, {16}, 0}, D_C128, 1, 16, 16},
        {{2, {5, 3}, {-6, 0}, 24}, D_I16, 15, 30, 2},
        {{1, {3}, {16}, 0}, {GM_DTYPE_FLOAT, 32, 4}, 3, 48, 16}, /* float32x4 */
    };

    (void)state;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        gm_ndview v = make_view(&cases[k].in, cases[k].dtype);

        assert_int_equal(gm_ndview_size(&v), cases[k].size);
        assert_int_equal(gm_ndview_nbytes(&v), cases[k].nbytes);
        assert_int_equal(gm_ndview_itemsize(&v), cases[k].itemsize);
    }
    assert_int_equal(gm_ndview_size(NULL), -1);
    assert_int_equal(gm_ndview_nbytes(NULL), -1);
    assert_int_equal(gm_ndview_itemsize(NULL), 0);
    {
        /* Unvalidated garbage: overflowing or negative extents give -1, never UB. */
        gm_ndview bad = make_view(&cases[0].in, GM_FLOAT64);

        bad.ndim = 2;
        bad.shape[0] = INT64_C(1) << 40;
        bad.shape[1] = INT64_C(1) << 40;
        assert_int_equal(gm_ndview_size(&bad), -1);
        bad.shape[1] = INT64_C(1) << 22;
        assert_int_equal(gm_ndview_size(&bad), INT64_C(1) << 62);
        assert_int_equal(gm_ndview_nbytes(&bad), -1);
        bad.shape[1] = -3;
        assert_int_equal(gm_ndview_size(&bad), -1);
        bad.ndim = GM_MAX_DIMS + 1;
        assert_int_equal(gm_ndview_size(&bad), -1);
    }
}

/* ndview.h: gm_ndview_nbytes is -1 for an invalid descriptor; one with an invalid dtype (which
 * gm_ndview_validate refuses with GM_ERR_DTYPE) gave 0, a size that allocates nothing. */
static void test_nbytes_invalid_dtype(void **state)
{
    static const layout two_d = {2, {2, 3}, {24, 8}, 0};
    gm_ndview v = make_view(&two_d, (gm_dtype)D_F64);

    (void)state;
    v.dtype.code = 9;
    assert_status(gm_ndview_validate(&v), GM_ERR_DTYPE);
    assert_int_equal(gm_ndview_nbytes(&v), -1);
    v.dtype = (gm_dtype){GM_DTYPE_FLOAT, 32, 0}; /* no lanes */
    assert_status(gm_ndview_validate(&v), GM_ERR_DTYPE);
    assert_int_equal(gm_ndview_nbytes(&v), -1);
    v.shape[0] = 0; /* empty, still invalid */
    assert_int_equal(gm_ndview_nbytes(&v), -1);
}

static void test_contiguity(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(contig_cases) / sizeof(contig_cases[0]); k++) {
        const contig_case *c = &contig_cases[k];
        gm_ndview v = make_view(&c->in, c->dtype);
        bool is_c = gm_ndview_is_c_contiguous(&v);
        bool is_f = gm_ndview_is_f_contiguous(&v);

        if (is_c != c->c_contiguous || is_f != c->f_contiguous ||
            gm_ndview_is_contiguous(&v) != (c->c_contiguous || c->f_contiguous)) {
            print_error("%s: C/F contiguous %d/%d, numpy says %d/%d\n", c->name, (int)is_c,
                        (int)is_f, (int)c->c_contiguous, (int)c->f_contiguous);
            fail();
        }
    }
    assert_false(gm_ndview_is_c_contiguous(NULL));
    assert_false(gm_ndview_is_f_contiguous(NULL));
    assert_false(gm_ndview_is_contiguous(NULL));
}

static void test_extent(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(extent_cases) / sizeof(extent_cases[0]); k++) {
        const extent_case *c = &extent_cases[k];
        gm_ndview v = make_view(&c->in, c->dtype);
        int64_t lo = -1, hi = -1;

        assert_status(gm_ndview_extent(&v, &lo, &hi), c->status);
        if (lo != c->lo || hi != c->hi) {
            print_error("%s: extent [%lld, %lld), numpy says [%lld, %lld)\n", c->name,
                        (long long)lo, (long long)hi, (long long)c->lo, (long long)c->hi);
            fail();
        }
    }
}

static void test_extent_errors(void **state)
{
    static const layout one = {1, {1}, {8}, INT64_MAX - 4};
    static const layout far = {1, {4}, {INT64_MIN / 2}, 0};
    /* each end fits in int64_t, hi - lo does not (2^63 + 8 bytes) */
    static const layout span = {2, {2, 2}, {-(INT64_C(1) << 62), INT64_C(1) << 62}, 0};
    gm_ndview v = make_view(&one, (gm_dtype)D_F64);
    int64_t lo = -1, hi = -1;

    (void)state;
    assert_status(gm_ndview_extent(&v, NULL, &hi), GM_ERR_NULL_POINTER);
    assert_status(gm_ndview_extent(&v, &lo, NULL), GM_ERR_NULL_POINTER);
    assert_message_contains("gm_ndview_extent: lo_p and hi_p must not be NULL");
    assert_status(gm_ndview_extent(NULL, &lo, &hi), GM_ERR_NULL_POINTER);
    assert_message_contains("gm_ndview_extent: view is NULL");
    assert_status(gm_ndview_extent(&v, &lo, &hi), GM_ERR_OVERFLOW);
    assert_message_contains("gm_ndview_extent: the byte extent overflows");
    v = make_view(&far, (gm_dtype)D_F64);
    assert_status(gm_ndview_extent(&v, &lo, &hi), GM_ERR_OVERFLOW);
    assert_message_contains("gm_ndview_extent: the byte extent of axis 0 overflows");
    v = make_view(&span, (gm_dtype)D_F64);
    assert_status(gm_ndview_extent(&v, &lo, &hi), GM_ERR_OVERFLOW);
    assert_message_contains("gm_ndview_extent: the byte extent [-4611686018427387904, "
                            "4611686018427387912) spans more than 9223372036854775807 bytes");
    assert_status(gm_ndview_validate(&v), GM_ERR_OVERFLOW);
    v.dtype.lanes = 0;
    assert_status(gm_ndview_extent(&v, &lo, &hi), GM_ERR_DTYPE);
    assert_int_equal(lo, -1); /* written only on success */
    assert_int_equal(hi, -1);
}

static void test_format_shape(void **state)
{
    static const int64_t two[] = {2, 3};
    static const int64_t one[] = {5};
    static const int64_t mixed[] = {2, 0, -1, INT64_MAX};
    int64_t many[GM_MAX_DIMS];
    char buf[64];

    (void)state;
    assert_string_equal(gm_format_shape(0, NULL, buf, sizeof(buf)), "()");
    assert_string_equal(gm_format_shape(1, one, buf, sizeof(buf)), "(5,)");
    assert_string_equal(gm_format_shape(2, two, buf, sizeof(buf)), "(2, 3)");
    assert_string_equal(gm_format_shape(4, mixed, buf, sizeof(buf)),
                        "(2, 0, -1, 9223372036854775807)");
    /* truncation: "(2, 3)" needs 7 bytes */
    assert_string_equal(gm_format_shape(2, two, buf, 7), "(2, 3)");
    assert_string_equal(gm_format_shape(2, two, buf, 6), "(2...");
    assert_string_equal(gm_format_shape(2, two, buf, 4), "...");
    assert_string_equal(gm_format_shape(1, one, buf, 5), "(5,)");
    assert_string_equal(gm_format_shape(1, one, buf, 4), "...");
    assert_string_equal(gm_format_shape(2, two, buf, 1), "");
    for (int i = 0; i < GM_MAX_DIMS; i++)
        many[i] = 1000000;
    gm_format_shape(GM_MAX_DIMS, many, buf, sizeof(buf));
    assert_int_equal(strlen(buf), sizeof(buf) - 1);
    assert_string_equal(buf + sizeof(buf) - 4, "...");
    /* nothing to format into, or nothing valid to format */
    assert_null(gm_format_shape(2, two, NULL, 8));
    buf[0] = 'x';
    assert_ptr_equal(gm_format_shape(2, two, buf, 0), buf);
    assert_int_equal(buf[0], 'x');
    assert_string_equal(gm_format_shape(-1, two, buf, sizeof(buf)), "");
    assert_string_equal(gm_format_shape(65, two, buf, sizeof(buf)), "");
    assert_string_equal(gm_format_shape(2, NULL, buf, sizeof(buf)), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contiguous_strides),
        cmocka_unit_test(test_contiguous_strides_errors),
        cmocka_unit_test(test_init_contiguous),
        cmocka_unit_test(test_init_given_strides),
        cmocka_unit_test(test_init_errors),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_size_nbytes_itemsize),
        cmocka_unit_test(test_nbytes_invalid_dtype),
        cmocka_unit_test(test_contiguity),
        cmocka_unit_test(test_extent),
        cmocka_unit_test(test_extent_errors),
        cmocka_unit_test(test_format_shape),
    };
    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
