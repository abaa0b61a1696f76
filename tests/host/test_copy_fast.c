/*
 * Tests for the copy engine's fast path (src/core/copy.c, gm__copy): a copy
 * whose two descriptors are valid, alike in dtype and shape, and each one
 * dense byte range with the same element order is checked in one pass per
 * side and issued as one 1-D ops->copy (host to host: one memcpy). Every
 * test here holds for the general path too (they pass against the engine
 * without the fast path): results equal to an element-by-element copy for
 * dense, offset, reversed, extent-1, 0-d, empty, strided, broadcast and
 * mismatched-order layouts in every direction (a seeded randomized sweep
 * and named cases), exactly one 1-D copy for dense pairs, the same statuses
 * and messages for every error, and asynchronous copies on a stream.
 * Overlapping sides in one address space are refused on either path. The
 * first fast path (two C-contiguous sides alike) is also compared with the
 * path without it (gm__copy_general) on the same random inputs, good and
 * bad: statuses, messages, ops->copy calls and bytes.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt_helpers.h"
#include "rt_layout.h"

#define MAXD    4
#define N_CASES 3000

/* -------------------------------------------------------- recorded copies */

static gm_op_copy *next_copy; /* the fault table's copy (counts, injects failures) */
static int64_t rec_calls;
static gm_copy_desc rec_desc; /* the last call's */
static bool rec_stream;       /* whether the last call had a stream */

static gm_status rec_copy(gm_backend_ctx *b, const gm_copy_desc *d, gm_backend_stream *st)
{
    rec_calls++;
    rec_desc = *d;
    rec_stream = st != NULL;
    return next_copy(b, d, st);
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
    next_copy = rt_fault_ops()->copy;
    rt_fault_ops()->copy = rec_copy;
    rec_calls = 0;
    return 0;
}

/* ------------------------------------------------------------- reference */

/* Address of element number e (C order over the shape) of a view. */
static unsigned char *elem(const gm_ndview *v, int64_t e)
{
    int64_t off = v->offset;

    for (int i = v->ndim - 1; i >= 0; i--) {
        off += (e % v->shape[i]) * v->strides[i];
        e /= v->shape[i];
    }
    return (unsigned char *)v->data + off;
}

/* Address of the lowest byte of a nonempty view's elements. */
static uintptr_t lowest(const gm_ndview *v)
{
    int64_t off = v->offset;

    for (int i = 0; i < v->ndim; i++) {
        if (v->strides[i] < 0)
            off += (v->shape[i] - 1) * v->strides[i];
    }
    return (uintptr_t)v->data + (uintptr_t)off;
}

/*
 * gm_copy(dst <- src) against an element-by-element copy: the source region
 * patterned, the destination region cleared, and afterwards every byte of
 * the destination region what the reference says (nothing outside the
 * destination's elements written). Returns the ops->copy calls it made.
 */
static int64_t run_case(gm_context *ctx, const gm_ndview *dst, const region *dr,
                        const gm_ndview *src, const region *sr, gm_stream *st)
{
    int64_t k = gm_ndview_itemsize(dst), size = gm_ndview_size(dst), before = rec_calls;
    unsigned char *want = malloc(dr->bytes);

    assert_non_null(want);
    for (size_t i = 0; i < sr->bytes; i++)
        sr->base[i] = (unsigned char)(i * 7 + 1);
    memset(dr->base, 0xEE, dr->bytes);
    memcpy(want, dr->base, dr->bytes);
    for (int64_t e = 0; e < size; e++)
        memcpy(want + (elem(dst, e) - dr->base), elem(src, e), (size_t)k);
    assert_ok(gm_copy(ctx, dst, src, st));
    if (st != NULL)
        assert_ok(gm_stream_synchronize(st));
    assert_memory_equal(dr->base, want, dr->bytes);
    free(want);
    return rec_calls - before;
}

/* The last ops->copy was the single 1-D copy of a dense pair. */
static void assert_one_1d_copy(const gm_ndview *dst, const gm_ndview *src, int64_t calls)
{
    size_t bytes = (size_t)gm_ndview_nbytes(dst);

    assert_int_equal(calls, 1);
    assert_int_equal(rec_desc.dst, lowest(dst));
    assert_int_equal(rec_desc.src, lowest(src));
    assert_int_equal(rec_desc.width_bytes, bytes);
    assert_int_equal(rec_desc.height, 1);
    assert_int_equal(rec_desc.depth, 1);
    assert_int_equal(rec_desc.dst_pitch, bytes);
    assert_int_equal(rec_desc.src_pitch, bytes);
    assert_int_equal(rec_desc.dst_height, 1);
    assert_int_equal(rec_desc.src_height, 1);
    assert_int_equal(rec_desc.dst_side, dst->memory == GM_MEMORY_DEVICE ? 1 : 0);
    assert_int_equal(rec_desc.src_side, src->memory == GM_MEMORY_DEVICE ? 1 : 0);
}

/* ------------------------------------------------------- random layouts */

static uint64_t rng = 0x9E3779B97F4A7C15u;

static int64_t pick(int64_t n)
{
    return rt_pick(&rng, n);
}

typedef rt_layout layout;
_Static_assert(MAXD == RT_LAYOUT_MAXD, "the layouts' axes");

/* rt_random_layout with this file's random state. */
static void random_layout(int ndim, const int64_t *shape, int64_t k, bool gaps, bool zeros,
                          layout *l)
{
    rt_random_layout(&rng, ndim, shape, k, gaps, zeros, l);
}

/*
 * Random pairs in every direction, a quarter on a stream: half the sources
 * with the destination's strides (dense pairs when the destination is
 * dense: one 1-D copy, or none host to host), the rest any layout.
 */
static void test_random_pairs(void **state)
{
    const gm_dtype dtypes[] = {
        GM_UINT8, GM_INT16, GM_FLOAT32, GM_FLOAT64, GM_COMPLEX128, {GM_DTYPE_FLOAT, 32, 3},
    };
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;
    int64_t dense_pairs = 0, one_copy = 0;

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &st));
    for (int c = 0; c < N_CASES; c++) {
        int ndim = (int)pick(MAXD + 1);
        gm_dtype dtype = dtypes[pick(sizeof dtypes / sizeof dtypes[0])];
        int64_t k = (int64_t)gm_dtype_itemsize(dtype), shape[MAXD], size = 1, calls = 0;
        bool dst_gaps = pick(3) == 0, same = pick(2) == 0;
        bool dst_dev = pick(2) == 0, src_dev = pick(2) == 0;
        layout dl, sl;
        region dr, sr;
        gm_ndview dst, src;

        for (int i = 0; i < ndim; i++) {
            shape[i] = pick(16) == 0 ? 0 : 1 + pick(4);
            size *= shape[i];
        }
        random_layout(ndim, shape, k, dst_gaps, false, &dl);
        random_layout(ndim, shape, k, pick(2) == 0, true, &sl);
        if (same) {
            memcpy(sl.strides, dl.strides, sizeof(sl.strides));
            sl.offset = dl.offset + pick(3);
            sl.bytes = dl.bytes + pick(3) + (sl.offset - dl.offset);
        }
        dr = region_new(ctx, dst_dev ? DEVICE : PAGEABLE, dl.bytes);
        sr = region_new(ctx, src_dev ? DEVICE : PAGEABLE, sl.bytes);
        dst = view_in(&dr, dtype, ndim, shape, dl.strides, dl.offset);
        src = view_in(&sr, dtype, ndim, shape, sl.strides, sl.offset);
        calls = run_case(ctx, &dst, &dr, &src, &sr, pick(4) == 0 ? st : NULL);
        if (size == 0) {
            assert_int_equal(calls, 0);
        } else if (same && !dst_gaps) {
            dense_pairs++;
            if (dst_dev || src_dev) {
                assert_one_1d_copy(&dst, &src, calls);
                one_copy++;
            } else {
                assert_int_equal(calls, 0);
            }
        }
        region_free(&dr);
        region_free(&sr);
    }
    assert_true(dense_pairs > N_CASES / 5 && one_copy > N_CASES / 10);
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
}

/* --------------------------------------------------------- named layouts */

/* One named pair: a layout per side over its own region. */
typedef struct pair_case {
    const char *name;
    gm_dtype dtype;
    int ndim;
    int64_t shape[MAXD];
    int64_t dst_strides[MAXD], src_strides[MAXD];
    int64_t dst_offset, src_offset;
    int64_t dst_bytes, src_bytes;
    bool dense; /* one 1-D copy when a side is on the device */
} pair_case;

/* Every named pair in all four directions, without and with a stream. */
static void test_named_pairs(void **state)
{
    const pair_case cases[] = {
        {"1-D uint8 dense", GM_UINT8, 1, {4096}, {1}, {1}, 0, 0, 4096, 4096, true},
        {"1-D offsets", GM_FLOAT64, 1, {100}, {8}, {8}, 24, 8, 832, 816, true},
        {"1-D reversed both", GM_INT32, 1, {50}, {-4}, {-4}, 196, 200, 200, 204, true},
        {"0-d", GM_FLOAT64, 0, {0}, {0}, {0}, 8, 0, 16, 8, true},
        {"2-D C", GM_INT16, 2, {3, 5}, {10, 2}, {10, 2}, 0, 2, 30, 32, true},
        {"2-D F", GM_INT16, 2, {3, 5}, {2, 6}, {2, 6}, 0, 0, 30, 30, true},
        {"3-D C, extent-1 axis with odd strides",
         GM_FLOAT32,
         3,
         {4, 1, 6},
         {24, 7, 4},
         {24, -99, 4},
         0,
         0,
         96,
         96,
         true},
        {"2-D reversed rows both", GM_UINT8, 2, {4, 8}, {-8, 1}, {-8, 1}, 24, 24, 32, 32, true},
        {"3-D permuted alike",
         GM_FLOAT32,
         3,
         {2, 3, 4},
         {4, 32, 8},
         {4, 32, 8},
         0,
         0,
         96,
         96,
         true},
        {"one item of 12 bytes",
         {GM_DTYPE_FLOAT, 32, 3},
         2,
         {1, 1},
         {5, 9},
         {12, 12},
         0,
         0,
         12,
         12,
         true},
        {"C from F", GM_FLOAT64, 2, {3, 4}, {32, 8}, {8, 24}, 0, 0, 96, 96, false},
        {"rows with gaps", GM_FLOAT32, 2, {3, 4}, {32, 4}, {32, 4}, 0, 0, 80, 80, false},
        {"reversed on one side", GM_INT32, 1, {10}, {4}, {-4}, 0, 36, 40, 40, false},
        {"broadcast source", GM_FLOAT64, 2, {3, 4}, {32, 8}, {0, 8}, 0, 0, 96, 32, false},
        {"strided both alike", GM_INT16, 1, {10}, {4}, {4}, 0, 0, 40, 40, false},
        {"empty", GM_FLOAT32, 2, {3, 0}, {0, 4}, {4, 12}, 0, 0, 1, 1, false},
    };
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &st));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const pair_case *p = &cases[c];

        for (int dir = 0; dir < 8; dir++) {
            bool dst_dev = (dir & 1) != 0, src_dev = (dir & 2) != 0;
            region dr = region_new(ctx, dst_dev ? DEVICE : PAGEABLE, p->dst_bytes);
            region sr = region_new(ctx, src_dev ? DEVICE : PAGEABLE, p->src_bytes);
            gm_ndview dst =
                view_in(&dr, p->dtype, p->ndim, p->shape, p->dst_strides, p->dst_offset);
            gm_ndview src =
                view_in(&sr, p->dtype, p->ndim, p->shape, p->src_strides, p->src_offset);
            int64_t calls = 0;

            print_message("%s, %s <- %s%s\n", p->name, dst_dev ? "device" : "host",
                          src_dev ? "device" : "host", dir >= 4 ? ", stream" : "");
            assert_ok(gm_ndview_validate(&dst));
            assert_ok(gm_ndview_validate(&src));
            calls = run_case(ctx, &dst, &dr, &src, &sr, dir >= 4 ? st : NULL);
            if (gm_ndview_size(&dst) == 0 || (!dst_dev && !src_dev))
                assert_int_equal(calls, 0);
            else if (p->dense)
                assert_one_1d_copy(&dst, &src, calls);
            region_free(&dr);
            region_free(&sr);
        }
    }
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
}

/*
 * Equal strides with a broadcast (stride 0) axis on both sides are not one
 * range, and the destination is not writable: the core refuses it, with the
 * backend's strided copy or without (pieces would write it in some order),
 * and on a stream before anything is queued.
 */
static void test_broadcast_pairs(void **state)
{
    int64_t shape[2] = {3, 4}, strides[2] = {0, 8};
    gm_context *ctx = rt_fault_ctx();
    gm_stream *stream = NULL;

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &stream));
    for (int src_dev = 0; src_dev < 2; src_dev++) {
        region dr = region_new(ctx, true ? DEVICE : PAGEABLE, 32),
               sr = region_new(ctx, src_dev != 0 ? DEVICE : PAGEABLE, 32);
        gm_ndview dst = view_in(&dr, GM_FLOAT64, 2, shape, strides, 0);
        gm_ndview src = view_in(&sr, GM_FLOAT64, 2, shape, strides, 0);

        rt_fault_ops()->copy_strided = gm__host_backend.copy_strided;
        assert_status(gm_copy(ctx, &dst, &src, NULL), GM_ERR_INVALID_ARG);
        assert_message_contains("a broadcast destination is not writable");
        rt_fault_ops()->copy_strided = gm__unsupported_copy_strided;
        assert_status(gm_copy(ctx, &dst, &src, NULL), GM_ERR_INVALID_ARG);
        assert_message_begins("gm_copy: destination axis 0 has stride 0 and extent 3");
        assert_status(gm_copy(ctx, &dst, &src, stream), GM_ERR_INVALID_ARG);
        assert_int_equal(rt_fault_calls(RT_COPY), 0);
        assert_int_equal(rt_fault_calls(RT_ENQUEUE_HOST), 0);
        region_free(&dr);
        region_free(&sr);
    }
    gm_stream_destroy(&stream);
    gm_context_destroy(&ctx);
}

/* --------------------------------------------------------------- errors */

/* Expect `expr` to fail with `status`, a message containing `needle`, and no ops->copy call. */
#define assert_fails(expr, status, needle)          \
    do {                                            \
        int64_t calls_before_ = rec_calls;          \
        assert_status((expr), (status));            \
        assert_message_contains(needle);            \
        assert_int_equal(rec_calls, calls_before_); \
    } while (0)

/* Descriptor, dtype, shape, memory-kind, device and argument errors: the general path's. */
static void test_errors(void **state)
{
    int64_t n = 4096, n2[2] = {4096, 1};
    gm_context *ctx = rt_fault_ctx(), *other = rt_fault_ctx();
    gm_stream *foreign = NULL;
    gm_array *a = NULL;
    /* hv is the middle of a larger buffer: the byte past the device array's end can then
     * never be hv's first byte, whatever the allocator puts next to what */
    unsigned char *hbuf = malloc(3 * 4096), *h = hbuf + 4096;
    gm_ndview d, hv, bad, bad2;

    (void)state;
    assert_non_null(hbuf);
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a));
    d = *gm_array_view(a);
    assert_ok(gm_ndview_init(h, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_stream_create(other, 0, &foreign));

    /* arguments */
    assert_fails(gm_copy(NULL, &d, &hv, NULL), GM_ERR_NULL_POINTER, "gm_copy: ctx is NULL");
    assert_fails(gm_copy(ctx, NULL, &hv, NULL), GM_ERR_NULL_POINTER,
                 "gm_copy: destination is NULL");
    assert_fails(gm_copy(ctx, &d, NULL, NULL), GM_ERR_NULL_POINTER, "gm_copy: source is NULL");
    assert_fails(gm_copy(ctx, &d, &hv, foreign), GM_ERR_WRONG_CONTEXT,
                 "gm_copy: the stream belongs to another context");
    assert_fails(gm_copy(ctx, NULL, NULL, foreign), GM_ERR_WRONG_CONTEXT, "another context");

    /* dtype and shape */
    bad = hv;
    bad.dtype = GM_INT8;
    assert_fails(gm_copy(ctx, &d, &bad, NULL), GM_ERR_DTYPE,
                 "gm_copy: dtype mismatch: destination uint8, source int8");
    assert_fails(gm_array_copy_to_host(a, &bad, NULL), GM_ERR_DTYPE,
                 "gm_array_copy_to_host: dtype mismatch: destination int8, source uint8");
    bad = hv;
    bad.shape[0] = 4095;
    assert_fails(gm_array_copy_to_device(a, &bad, NULL), GM_ERR_SHAPE_MISMATCH,
                 "gm_array_copy_to_device: shape mismatch: destination (4096,), source (4095,)");
    assert_ok(gm_ndview_init(h, GM_UINT8, 2, n2, NULL, GM_ORDER_C, &bad));
    assert_fails(gm_copy(ctx, &d, &bad, NULL), GM_ERR_SHAPE_MISMATCH,
                 "gm_copy: shape mismatch: destination (4096,), source (4096, 1)");

    /* invalid descriptors, the destination checked first */
    bad = d;
    bad.ndim = -1;
    assert_fails(gm_copy(ctx, &bad, &hv, NULL), GM_ERR_INVALID_ARG,
                 "gm_copy: ndim must be >= 0, got -1");
    bad.ndim = GM_MAX_DIMS + 1;
    assert_fails(gm_copy(ctx, &bad, &hv, NULL), GM_ERR_TOO_MANY_DIMS, "exceeds GM_MAX_DIMS");
    bad = hv;
    bad.dtype.bits = 12;
    assert_fails(gm_copy(ctx, &d, &bad, NULL), GM_ERR_DTYPE, "gm_copy: invalid dtype");
    bad2 = d;
    bad2.shape[0] = -1;
    assert_fails(gm_copy(ctx, &bad2, &bad, NULL), GM_ERR_INVALID_ARG,
                 "gm_copy: negative extent -1 on axis 0");
    bad = hv;
    bad.dtype = GM_FLOAT64;
    bad.ndim = 2;
    bad.shape[0] = INT64_MAX / 2;
    bad.shape[1] = 4;
    bad.strides[0] = 0;
    bad.strides[1] = 0;
    assert_fails(gm_copy(ctx, &bad, &bad, NULL), GM_ERR_OVERFLOW, "overflows");
    bad = hv;
    bad.strides[0] = INT64_MAX / 2; /* the byte extent overflows */
    assert_fails(gm_copy(ctx, &d, &bad, NULL), GM_ERR_OVERFLOW, "gm_copy: the byte extent");

    /* memory kinds and devices, checked after the layouts (even when empty) */
    bad = d;
    bad.memory = 9;
    assert_fails(gm_copy(ctx, &bad, &hv, NULL), GM_ERR_INVALID_ARG,
                 "gm_copy: the destination has an unknown memory kind 9");
    bad = d;
    bad.device_id = 7;
    assert_fails(gm_copy(ctx, &hv, &bad, NULL), GM_ERR_WRONG_CONTEXT,
                 "gm_copy: the source is memory of device 7, the context's device is 0");
    bad2 = hv;
    bad2.dtype = GM_INT8;
    assert_fails(gm_copy(ctx, &bad, &bad2, NULL), GM_ERR_DTYPE, "dtype mismatch");
    bad.shape[0] = 0;
    bad2 = hv;
    bad2.shape[0] = 0;
    assert_fails(gm_copy(ctx, &bad, &bad2, NULL), GM_ERR_WRONG_CONTEXT, "memory of device 7");
    bad.device_id = 0;
    assert_ok(gm_copy(ctx, &bad, &bad2, NULL)); /* empty: nothing to do */
    bad.device_id = -1;
    assert_ok(gm_copy(ctx, &bad2, &bad, NULL));
    assert_int_equal(rec_calls, 0);

    /* a device side without data is NULL whatever its offset, before the backend is asked */
    bad = d;
    bad.data = NULL;
    bad.offset = 64;
    assert_fails(gm_copy(ctx, &bad, &hv, NULL), GM_ERR_NULL_POINTER,
                 "gm_copy: destination data pointer is NULL");
    assert_fails(gm_array_copy_to_device(a, &bad, NULL), GM_ERR_NULL_POINTER,
                 "gm_array_copy_to_device: source data pointer is NULL");
    assert_int_equal(rec_calls, 0);

    /* a dense copy the backend refuses (one byte past the allocation): its one call */
    bad = d;
    bad.offset = 1;
    assert_status(gm_copy(ctx, &bad, &hv, NULL), GM_ERR_INVALID_ARG);
    assert_message_contains("copy: destination range");
    assert_int_equal(rec_calls, 1);
    assert_int_equal(rec_desc.dst, (uintptr_t)d.data + 1);
    rt_fault_fail_at(RT_COPY, 2, GM_ERR_DRIVER);
    assert_status(gm_array_copy_to_host(a, &hv, NULL), GM_ERR_DRIVER);
    assert_message_contains("copy: injected failure on call 2");
    assert_int_equal(rec_calls, 2);

    /* layouts the host engine refuses */
    bad = hv;
    bad.data = NULL;
    bad2 = hv;
    assert_fails(gm_copy(ctx, &bad2, &bad, NULL), GM_ERR_NULL_POINTER,
                 "gm_copy: source data pointer is NULL");
    bad2.data = NULL; /* both at the same (missing) bytes: not reported as overlap */
    assert_fails(gm_copy(ctx, &bad2, &bad, NULL), GM_ERR_NULL_POINTER,
                 "gm_copy: destination data pointer is NULL");
    bad2.shape[0] = 2;
    bad2.strides[0] = INT64_MIN; /* ends that fit in int64, a span (2^63 + 1) that does not */
    bad2.offset = INT64_MAX - 1;
    bad2.data = h + 64;
    bad = hv;
    bad.shape[0] = 2;
    assert_fails(gm_copy(ctx, &bad, &bad2, NULL), GM_ERR_OVERFLOW, "spans more than");
    bad = hv;
    bad.shape[0] = 64;
    bad.strides[0] = 0;
    bad2 = hv;
    bad2.shape[0] = 64;
    bad2.data = h + 64; /* not overlapping */
    assert_fails(gm_copy(ctx, &bad, &bad2, NULL), GM_ERR_INVALID_ARG,
                 "a broadcast destination is not writable");

    free(hbuf);
    gm_array_release(&a);
    gm_stream_destroy(&foreign);
    gm_context_destroy(&other);
    gm_context_destroy(&ctx);
}

/* ---------------------------------------------------------------- streams */

static void sleep_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};

    nanosleep(&ts, NULL);
}

/* A stream callback that holds its stream until released. */
typedef struct gate {
    atomic_int release;
} gate;

static void gate_callback(gm_stream *stream, gm_status status, void *user)
{
    gate *g = user;

    (void)stream;
    (void)status;
    while (atomic_load(&g->release) == 0)
        sleep_ms(1);
}

/*
 * Dense copies on a held stream return at once, with their copy queued
 * (device sides: the one ops->copy, given the stream; host to host: the
 * engine's job in stream order), and land once the stream runs.
 */
static void test_async_dense(void **state)
{
    int64_t n = 1 << 16, shape2[2] = {256, 256};
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;
    gm_array *a = NULL, *b = NULL;
    unsigned char *h = malloc((size_t)n), *h2 = malloc((size_t)n);
    gm_ndview hv, hv2, d2;

    (void)state;
    assert_non_null(h);
    assert_non_null(h2);
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a));
    assert_ok(gm_device_array(ctx, 2, shape2, GM_UINT8, GM_ORDER_F, &b));
    assert_ok(gm_ndview_init(h, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_ndview_init(h2, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &hv2));
    assert_ok(gm_ndview_reshape(gm_array_view(a), 2, shape2, GM_ORDER_F, &d2));
    memset(h, 1, (size_t)n);
    memset(h2, 2, (size_t)n);
    assert_ok(gm_array_memset(a, 0, NULL));
    assert_ok(gm_array_memset(b, 0, NULL));

    for (int step = 0; step < 4; step++) {
        gate g;
        unsigned char *watch = NULL, want = 0;
        unsigned char seen_before = 0;
        int64_t calls = rec_calls, enqueued = rt_fault_calls(RT_ENQUEUE_HOST);
        gm_status s = GM_OK;

        atomic_init(&g.release, 0);
        assert_ok(gm_stream_add_callback(st, gate_callback, &g));
        switch (step) {
        case 0: /* host to device */
            s = gm_array_copy_to_device(a, &hv, st);
            watch = gm_array_view(a)->data;
            want = 1;
            break;
        case 1: /* device to host */
            s = gm_array_copy_to_host(a, &hv2, st);
            watch = h2;
            want = 1;
            break;
        case 2: /* device to device, 2-D F-ordered on both sides */
            s = gm_copy(ctx, gm_array_view(b), &d2, st);
            watch = gm_array_view(b)->data;
            want = 1;
            break;
        default: /* host to host */
            memset(h2, 3, (size_t)n);
            s = gm_copy(ctx, &hv, &hv2, st);
            watch = h;
            want = 3;
            break;
        }
        seen_before = watch[n - 1];
        atomic_store(&g.release, 1);
        assert_ok(s);
        assert_ok(gm_stream_synchronize(st));
        assert_int_not_equal(seen_before, want); /* not copied while the stream was held */
        assert_int_equal(watch[0], want);
        assert_int_equal(watch[n - 1], want);
        if (step < 3) {
            assert_int_equal(rec_calls - calls, 1);
            assert_true(rec_stream);
            assert_int_equal(rec_desc.width_bytes, (size_t)n);
        } else {
            assert_int_equal(rec_calls - calls, 0);
            assert_int_equal(rt_fault_calls(RT_ENQUEUE_HOST) - enqueued, 2); /* copy, cleanup */
        }
    }
    /* without a stream the op is synchronous */
    assert_ok(gm_array_copy_to_device(a, &hv2, NULL));
    assert_false(rec_stream);
    free(h);
    free(h2);
    gm_array_release(&a);
    gm_array_release(&b);
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
}

/* ------------------------------------------ first fast path vs general */

/* What one copy did: status, message, ops->copy calls and the last call's descriptor. */
typedef struct outcome {
    gm_status status;
    char message[512];
    int64_t calls;
    gm_copy_desc desc;
} outcome;

typedef gm_status copy_entry(const char *fn, gm_context *ctx, const gm_ndview *dst,
                             const gm_ndview *src, gm_stream *stream);

/* Pattern every region the same way for each run of one case. */
static void pattern_regions(region *const *rs, int n, int64_t seed)
{
    for (int r = 0; r < n; r++) {
        for (size_t i = 0; i < rs[r]->bytes; i++)
            rs[r]->base[i] = (unsigned char)((int64_t)i * 13 + seed + r * 101);
    }
}

/* Run `entry` from patterned regions; *after (one buffer per region) receives their bytes. */
static outcome run_entry(copy_entry *entry, gm_context *ctx, const gm_ndview *dst,
                         const gm_ndview *src, gm_stream *st, region *const *rs, int n,
                         int64_t seed, unsigned char **after)
{
    outcome o;
    int64_t before = rec_calls;

    memset(&o, 0, sizeof(o));
    memset(&rec_desc, 0, sizeof(rec_desc));
    pattern_regions(rs, n, seed);
    o.status = entry("gm_copy", ctx, dst, src, st);
    if (o.status != GM_OK)
        snprintf(o.message, sizeof(o.message), "%s", gm_last_error_message());
    if (st != NULL)
        assert_ok(gm_stream_synchronize(st));
    o.calls = rec_calls - before;
    o.desc = rec_desc;
    for (int r = 0; r < n; r++)
        memcpy(after[r], rs[r]->base, rs[r]->bytes);
    return o;
}

/* How a random case departs from two C-contiguous sides alike (the fast path's). */
enum {
    BEND_NONE = 0,
    BEND_SHAPE,      /* the source one longer on an axis */
    BEND_DTYPE,      /* another dtype on the source */
    BEND_NDIM,       /* the source with one more axis of extent 1 */
    BEND_LAYOUT,     /* any layouts (often dense in another order) */
    BEND_EMPTY,      /* an extent 0 on both sides */
    BEND_KIND,       /* an unknown memory kind on one side */
    BEND_DEVICE,     /* a device side on device 7 */
    BEND_NULL,       /* one side without data */
    BEND_OVERLAP,    /* the source is the destination, or that an item on */
    BEND_RANGE,      /* a device side past its allocation */
    BEND_BAD_DTYPE,  /* an invalid dtype on both sides */
    BEND_BAD_NDIM,   /* ndim -1 or GM_MAX_DIMS + 1 on one side */
    BEND_OFFSET_MAX, /* device offsets near INT64_MAX: the byte extent overflows */
    BEND_HUGE,       /* a shape whose byte count overflows */
    BEND_OTHER_CTX,  /* the destination is another context's device array */
    BEND_COUNT
};

/* One random case: the two sides over their regions (regions[0..1]). */
typedef struct diff_case {
    gm_ndview dst, src;
    region dr, sr;
    bool shared; /* src lives in dr (BEND_OVERLAP) */
    int bend;
} diff_case;

/* C strides of `shape` for items of k bytes; returns the byte count. */
static int64_t c_strides(int ndim, const int64_t *shape, int64_t k, int64_t *strides)
{
    int64_t stride = k;

    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = shape[i] == 1 && pick(2) == 0 ? pick(9) - 4 : stride; /* extent 1: any */
        stride *= shape[i];
    }
    return stride;
}

/* Build a random case (see the bends); no view ever reaches outside a host region. */
static void diff_case_new(gm_context *ctx, gm_context *other, diff_case *c)
{
    const gm_dtype dtypes[] = {
        GM_UINT8, GM_INT16, GM_FLOAT32, GM_FLOAT64, GM_COMPLEX128, {GM_DTYPE_FLOAT, 32, 3},
    };
    gm_dtype dtype = dtypes[pick(sizeof dtypes / sizeof dtypes[0])];
    int ndim = (int)pick(MAXD + 1);
    int64_t k = (int64_t)gm_dtype_itemsize(dtype), shape[MAXD], ds[MAXD], ss[MAXD];
    int64_t dbytes = 0, sbytes = 0, doff = 0, soff = 0;
    bool dst_dev = pick(2) == 0, src_dev = pick(2) == 0;
    layout dl, sl;

    memset(c, 0, sizeof(*c));
    c->bend = pick(3) == 0 ? (int)pick(BEND_COUNT) : BEND_NONE;
    for (int i = 0; i < ndim; i++)
        shape[i] = pick(4) == 0 ? 1 : 1 + pick(6);
    if (c->bend == BEND_EMPTY && ndim > 0)
        shape[pick(ndim)] = 0;
    dbytes = c_strides(ndim, shape, k, ds);
    sbytes = c_strides(ndim, shape, k, ss);
    doff = pick(3) * k + pick(2);
    soff = pick(3) * k + pick(2);
    if (c->bend == BEND_LAYOUT) {
        random_layout(ndim, shape, k, pick(2) == 0, false, &dl);
        random_layout(ndim, shape, k, pick(2) == 0, true, &sl);
        if (pick(2) == 0) /* alike: dense pairs in other orders, reversed ones */
            sl = dl;
        memcpy(ds, dl.strides, sizeof(ds));
        memcpy(ss, sl.strides, sizeof(ss));
        doff = dl.offset;
        soff = sl.offset;
        dbytes = dl.bytes - dl.offset;
        sbytes = sl.bytes - sl.offset;
    }
    c->shared = c->bend == BEND_OVERLAP;
    c->dr = region_new(c->bend == BEND_OTHER_CTX ? other : ctx,
                       dst_dev || c->bend == BEND_OTHER_CTX ? DEVICE : PAGEABLE,
                       doff + dbytes + pick(3) + (c->shared ? k : 0));
    if (!c->shared)
        c->sr = region_new(ctx, src_dev ? DEVICE : PAGEABLE, soff + sbytes + pick(3));
    c->dst = view_in(&c->dr, dtype, ndim, shape, ds, doff);
    c->src = c->shared ? c->dst : view_in(&c->sr, dtype, ndim, shape, ss, soff);
    if (c->shared && pick(2) == 0)
        c->src.offset += k; /* the source an item on (the region has room) */
}

/* Apply the bends that change descriptors but not regions. */
static void diff_case_bend(diff_case *c)
{
    gm_ndview *dev_side = c->dst.memory == GM_MEMORY_DEVICE   ? &c->dst
                          : c->src.memory == GM_MEMORY_DEVICE ? &c->src
                                                              : NULL;
    gm_ndview *one = pick(2) == 0 ? &c->dst : &c->src;

    switch (c->bend) {
    case BEND_SHAPE:
        if (c->src.ndim > 0)
            c->src.shape[pick(c->src.ndim)]++;
        break;
    case BEND_DTYPE:
        c->src.dtype = gm_dtype_itemsize(c->src.dtype) == 4 ? GM_INT32 : GM_FLOAT32;
        break;
    case BEND_NDIM:
        if (c->src.ndim < GM_MAX_DIMS) {
            c->src.shape[c->src.ndim] = 1;
            c->src.strides[c->src.ndim] = 8;
            c->src.ndim++;
        }
        break;
    case BEND_KIND:
        one->memory = 9;
        break;
    case BEND_DEVICE:
        if (dev_side != NULL)
            dev_side->device_id = 7;
        break;
    case BEND_NULL:
        one->data = NULL;
        break;
    case BEND_RANGE:
        if (dev_side != NULL)
            dev_side->offset += (int64_t)(pick(2) == 0 ? 1 : 4096);
        break;
    case BEND_BAD_DTYPE:
        c->dst.dtype.bits = c->src.dtype.bits = 12;
        break;
    case BEND_BAD_NDIM:
        one->ndim = pick(2) == 0 ? -1 : GM_MAX_DIMS + 1;
        break;
    case BEND_OFFSET_MAX: /* a device side (a host side would be a wild host address) */
        if (dev_side != NULL)
            dev_side->offset = INT64_MAX - 1;
        if (pick(2) == 0 && c->dst.memory == GM_MEMORY_DEVICE && c->src.memory == GM_MEMORY_DEVICE)
            c->dst.offset = c->src.offset = INT64_MAX - 1;
        break;
    case BEND_HUGE:
        c->dst.ndim = c->src.ndim = 2;
        c->dst.dtype = c->src.dtype = GM_FLOAT64;
        c->dst.shape[0] = c->src.shape[0] = INT64_MAX / 2;
        c->dst.shape[1] = c->src.shape[1] = 4;
        c->dst.strides[0] = c->src.strides[0] = 32;
        c->dst.strides[1] = c->src.strides[1] = 8;
        break;
    default:
        break;
    }
}

/*
 * gm__copy (its first fast path, c_dense_pair, takes two C-contiguous sides
 * alike) against gm__copy_general (without it) on the same random inputs,
 * most of them the fast path's, the rest bent one way each (see the
 * bends): the same status and message, the same ops->copy calls with the
 * same descriptor, and the same bytes in every region afterwards; a copy
 * that succeeds matches the element-by-element reference. Bad input the
 * fast path accepts (memory kind, device, data, overlap, a device range
 * past its allocation, another context's memory) gets its error on both.
 */
static void test_fast_matches_general(void **state)
{
    gm_context *ctx = rt_fault_ctx(), *other = rt_fault_ctx();
    gm_stream *st = NULL;
    int64_t ok_dense = 0, failed = 0;
    unsigned char *after[2][2];

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &st));
    for (int n = 0; n < N_CASES; n++) {
        diff_case c;
        region *rs[2];
        int nr = 0;
        gm_stream *use = pick(5) == 0 ? st : NULL;
        outcome fast, general;

        diff_case_new(ctx, other, &c);
        diff_case_bend(&c);
        rs[nr++] = &c.dr;
        if (!c.shared)
            rs[nr++] = &c.sr;
        for (int w = 0; w < 2; w++) {
            for (int r = 0; r < nr; r++) {
                after[w][r] = malloc(rs[r]->bytes);
                assert_non_null(after[w][r]);
            }
        }
        fast = run_entry(gm__copy, ctx, &c.dst, &c.src, use, rs, nr, n, after[0]);
        general = run_entry(gm__copy_general, ctx, &c.dst, &c.src, use, rs, nr, n, after[1]);
        assert_int_equal(fast.status, general.status);
        assert_string_equal(fast.message, general.message);
        assert_int_equal(fast.calls, general.calls);
        assert_memory_equal(&fast.desc, &general.desc, sizeof(fast.desc));
        for (int r = 0; r < nr; r++)
            assert_memory_equal(after[0][r], after[1][r], rs[r]->bytes);
        if (general.status == GM_OK) { /* the regions hold the general run's result */
            int64_t k = gm_ndview_itemsize(&c.dst);

            for (int64_t e = 0; e < gm_ndview_size(&c.dst); e++)
                assert_memory_equal(elem(&c.dst, e), elem(&c.src, e), (size_t)k);
            ok_dense += c.bend == BEND_NONE && gm_ndview_size(&c.dst) > 0;
        } else {
            failed++;
        }
        for (int w = 0; w < 2; w++) {
            for (int r = 0; r < nr; r++)
                free(after[w][r]);
        }
        region_free(&c.dr);
        if (!c.shared)
            region_free(&c.sr);
    }
    assert_true(ok_dense > N_CASES / 3 && failed > N_CASES / 20);
    gm_stream_destroy(&st);
    gm_context_destroy(&other);
    gm_context_destroy(&ctx);
}

/* ---------------------------------------------------------------- overlap */

/* The exact overlap message of dst <- src for call `fn`. */
static void expect_overlap_message(const char *fn, const gm_ndview *dst, const gm_ndview *src)
{
    int64_t dlo = 0, dhi = 0, slo = 0, shi = 0;
    char want[512];

    assert_int_equal(gm_ndview_extent(dst, &dlo, &dhi), GM_OK);
    assert_int_equal(gm_ndview_extent(src, &slo, &shi), GM_OK);
    snprintf(want, sizeof(want),
             "%s: the source and destination overlap: destination bytes [%#" PRIxPTR ", %#" PRIxPTR
             "), source bytes [%#" PRIxPTR ", %#" PRIxPTR ")",
             fn, (uintptr_t)dst->data + (uintptr_t)dlo, (uintptr_t)dst->data + (uintptr_t)dhi,
             (uintptr_t)src->data + (uintptr_t)slo, (uintptr_t)src->data + (uintptr_t)shi);
    assert_string_equal(gm_last_error_message(), want);
}

/* `expr`, a copy of dst <- src by `fn`, is refused as overlap and issues nothing. */
#define assert_overlap(expr, fn, dst, src)          \
    do {                                            \
        int64_t calls_before_ = rec_calls;          \
        assert_status((expr), GM_ERR_INVALID_ARG);  \
        expect_overlap_message((fn), (dst), (src)); \
        assert_int_equal(rec_calls, calls_before_); \
    } while (0)

/* gm_copy(dst <- src) of disjoint views of one region: every element lands, nothing else moves. */
static void expect_disjoint_copy(gm_context *ctx, region *r, const gm_ndview *dst,
                                 const gm_ndview *src)
{
    unsigned char before[160];

    for (int i = 0; i < 160; i++)
        r->base[i] = (unsigned char)(i * 7 + 1);
    memcpy(before, r->base, sizeof(before));
    assert_ok(gm_copy(ctx, dst, src, NULL));
    for (int64_t e = 0; e < gm_ndview_size(dst); e++) {
        size_t at = (size_t)(elem(src, e) - r->base);

        assert_memory_equal(elem(dst, e), before + at, 4);
    }
    for (int64_t e = 0; e < gm_ndview_size(src); e++) /* the source is untouched */
        assert_memory_equal(elem(src, e), before + (elem(src, e) - r->base), 4);
}

/* A 1-D int32 view of `n` elements of `whole` from byte `offset`. */
static gm_ndview part_of(const gm_ndview *whole, int64_t n, int64_t offset)
{
    gm_ndview v = *whole;

    v.shape[0] = n;
    v.offset = offset;
    return v;
}

/* gm_copy(dst <- src) across the two views of mapped memory whose halves are disjoint. */
static void expect_mapped_halves(gm_context *ctx, gm_ndview *host, const gm_ndview *dst,
                                 const gm_ndview *src)
{
    int32_t *data = (int32_t *)((char *)host->data + host->offset);

    for (int i = 0; i < 40; i++)
        data[i] = i + 1;
    assert_ok(gm_copy(ctx, dst, src, NULL));
    for (int64_t e = 0; e < 20; e++) {
        int32_t want = 0, got = 0;

        memcpy(&want, elem(src, e), 4);
        memcpy(&got, elem(dst, e), 4);
        assert_int_equal(got, want);
    }
}

/*
 * Mapped host memory and its device view are one range of addresses (one
 * virtual address space on every backend): a copy between them is overlap
 * although one side is host memory and the other device memory; disjoint
 * halves across the two views copy.
 */
static void check_mapped_overlap(gm_context *ctx, gm_stream *st)
{
    int64_t n40[1] = {40};
    gm_array *m = NULL;
    gm_ndview host, dev, dst, src;

    assert_ok(gm_mapped_array(ctx, 1, n40, GM_INT32, GM_ORDER_C, 0, &m));
    host = *gm_array_view(m);
    assert_ok(gm_array_device_view(m, &dev));
    assert_int_equal(dev.memory, GM_MEMORY_DEVICE);
    assert_ptr_equal((char *)dev.data + dev.offset, (char *)host.data + host.offset);
    assert_overlap(gm_copy(ctx, &dev, &host, NULL), "gm_copy", &dev, &host);
    assert_overlap(gm_copy(ctx, &host, &dev, st), "gm_copy", &host, &dev);
    dst = part_of(&dev, 10, 4); /* elements 1..10 <- 0..9 */
    src = part_of(&host, 10, 0);
    assert_overlap(gm_copy(ctx, &dst, &src, NULL), "gm_copy", &dst, &src);
    dst = part_of(&dev, 20, 0); /* halves touching at byte 80 */
    src = part_of(&host, 20, 80);
    expect_mapped_halves(ctx, &host, &dst, &src);
    dst = part_of(&host, 20, 0);
    src = part_of(&dev, 20, 80);
    expect_mapped_halves(ctx, &host, &dst, &src);
    gm_array_release(&m);
}

/*
 * Views of one buffer (160 bytes: 40 int32, or 8 x 5) whose byte extents
 * intersect are refused with GM_ERR_INVALID_ARG and a message naming the
 * call and both byte ranges, device to device and host to host, 1-D and
 * 2-D, either stride sign, the view onto itself included; views with
 * disjoint extents copy. So are a mapped array's host and device views,
 * which share their addresses (check_mapped_overlap).
 */
static void test_overlap(void **state)
{
    static const int64_t s1[1] = {4}, neg1[1] = {-4}, two1[1] = {8};
    static const int64_t s2[2] = {20, 4}, rows_neg[2] = {-20, 4}, cols_neg[2] = {20, -4};
    int64_t n9[1] = {9}, n10[1] = {10}, n20[1] = {20}, n40[1] = {40};
    int64_t r4[2] = {4, 5}, r7[2] = {7, 5}, r8[2] = {8, 5};
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &st));
    for (int device = 0; device < 2; device++) {
        region r = region_new(ctx, device == 1 ? DEVICE : PAGEABLE, 160);
        gm_ndview dst = view_in(&r, GM_INT32, 1, n9, s1, 4),
                  src = view_in(&r, GM_INT32, 1, n9, s1, 0);

        /* 1-D: d[1:10] <- d[0:9], also on a stream (nothing is queued) */
        assert_overlap(gm_copy(ctx, &dst, &src, NULL), "gm_copy", &dst, &src);
        assert_overlap(gm_copy(ctx, &src, &dst, st), "gm_copy", &src, &dst);
        /* a view onto itself */
        dst = view_in(&r, GM_INT32, 1, n40, s1, 0);
        assert_overlap(gm_copy(ctx, &dst, &dst, NULL), "gm_copy", &dst, &dst);
        /* negative strides: d[9::-1] <- d[0:10]; d[10:0:-1] <- d[9::-1] */
        dst = view_in(&r, GM_INT32, 1, n10, neg1, 36);
        src = view_in(&r, GM_INT32, 1, n10, s1, 0);
        assert_overlap(gm_copy(ctx, &dst, &src, NULL), "gm_copy", &dst, &src);
        src = dst;
        dst = view_in(&r, GM_INT32, 1, n10, neg1, 40);
        assert_overlap(gm_copy(ctx, &dst, &src, NULL), "gm_copy", &dst, &src);
        /* interleaved (d[0:20:2] <- d[1:20:2]): the extents intersect */
        dst = view_in(&r, GM_INT32, 1, n10, two1, 0);
        src = view_in(&r, GM_INT32, 1, n10, two1, 4);
        assert_overlap(gm_copy(ctx, &dst, &src, NULL), "gm_copy", &dst, &src);
        /* 2-D: rows 1..7 <- rows 0..6; flipped rows or columns onto the whole */
        dst = view_in(&r, GM_INT32, 2, r7, s2, 20);
        src = view_in(&r, GM_INT32, 2, r7, s2, 0);
        assert_overlap(gm_copy(ctx, &dst, &src, NULL), "gm_copy", &dst, &src);
        dst = view_in(&r, GM_INT32, 2, r8, rows_neg, 140);
        src = view_in(&r, GM_INT32, 2, r8, s2, 0);
        assert_overlap(gm_copy(ctx, &dst, &src, NULL), "gm_copy", &dst, &src);
        dst = view_in(&r, GM_INT32, 2, r8, cols_neg, 16);
        assert_overlap(gm_copy(ctx, &dst, &src, NULL), "gm_copy", &dst, &src);

        /* disjoint extents of the same buffer copy: halves, touching at byte 80 */
        dst = view_in(&r, GM_INT32, 1, n20, s1, 0);
        src = view_in(&r, GM_INT32, 1, n20, s1, 80);
        expect_disjoint_copy(ctx, &r, &dst, &src);
        expect_disjoint_copy(ctx, &r, &src, &dst);
        dst = view_in(&r, GM_INT32, 1, n20, neg1, 76); /* d[19::-1] <- d[20:40] */
        expect_disjoint_copy(ctx, &r, &dst, &src);
        dst = view_in(&r, GM_INT32, 2, r4, s2, 0); /* rows 0..3 <- rows 7..4 */
        src = view_in(&r, GM_INT32, 2, r4, rows_neg, 140);
        expect_disjoint_copy(ctx, &r, &dst, &src);
        dst = view_in(&r, GM_INT32, 2, r4, cols_neg, 16); /* columns flipped, strided */
        expect_disjoint_copy(ctx, &r, &dst, &src);
        dst = view_in(&r, GM_INT32, 1, n10, two1, 0); /* a strided half */
        src = view_in(&r, GM_INT32, 1, n10, two1, 84);
        expect_disjoint_copy(ctx, &r, &dst, &src);

        if (device == 1) { /* the array calls: the array's own bytes on the other side */
            const gm_ndview *v = gm_array_view(r.array);

            assert_overlap(gm_array_copy_to_device(r.array, v, NULL), "gm_array_copy_to_device", v,
                           v);
            assert_overlap(gm_array_copy_to_host(r.array, v, st), "gm_array_copy_to_host", v, v);
        }
        region_free(&r);
    }
    check_mapped_overlap(ctx, st);
    assert_ok(gm_stream_synchronize(st));
    assert_int_equal(rt_fault_calls(RT_ENQUEUE_HOST), 0);
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_random_pairs, test_setup),
        cmocka_unit_test_setup(test_named_pairs, test_setup),
        cmocka_unit_test_setup(test_broadcast_pairs, test_setup),
        cmocka_unit_test_setup(test_errors, test_setup),
        cmocka_unit_test_setup(test_async_dense, test_setup),
        cmocka_unit_test_setup(test_overlap, test_setup),
        cmocka_unit_test_setup(test_fast_matches_general, test_setup),
    };

    return cmocka_run_group_tests(tests, group_setup, gm_test_restore_allocator);
}
