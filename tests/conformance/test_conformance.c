/*
 * Backend-neutral API conformance: the same cases, through the public API
 * only, on whichever backend GM_BACKEND selects (host simulator, CUDA, HSA,
 * or their driver test doubles). Every result is compared with a plain C
 * reference computed on the host; the host simulator defines the reference
 * semantics. Exits 77 (meson's skip) when the backend finds no driver or
 * device. Cases the backend honestly cannot run (e.g. a test double without
 * the built-in kernels) are skipped with cmocka's skip() and a printed reason.
 *
 * The cmocka leak-checking allocator is not installed here: GPU backends
 * free bookkeeping memory on driver threads.
 */
#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "gm_test.h"

#define SKIP_EXIT 77

/* The context every case uses, created in main(). */
static gm_context *g_ctx = NULL;

/* --------------------------------------------------------------- helpers */

/* Descriptor of host memory `data` in a contiguous layout. */
static gm_ndview host_view(void *data, gm_dtype dtype, int ndim, const int64_t *shape,
                           gm_order order)
{
    gm_ndview v;

    assert_ok(gm_ndview_init(data, dtype, ndim, shape, NULL, order, &v));
    return v;
}

/* Byte offset from v->data of the element at position `linear` of a C-order walk. */
static int64_t elem_offset(const gm_ndview *v, int64_t linear)
{
    int64_t off = v->offset;

    for (int d = v->ndim - 1; d >= 0; d--) {
        off += (linear % v->shape[d]) * v->strides[d];
        linear /= v->shape[d];
    }
    return off;
}

/* Address of element `linear` (C-order walk) of a host descriptor. */
static unsigned char *elem(const gm_ndview *v, int64_t linear)
{
    return (unsigned char *)v->data + elem_offset(v, linear);
}

/* Deterministic bytes: byte i of the buffer is (i * 37 + seed) mod 251 + 1 (never 0). */
static void fill_pattern(void *buf, size_t bytes, unsigned seed)
{
    unsigned char *p = buf;

    for (size_t i = 0; i < bytes; i++)
        p[i] = (unsigned char)((i * 37u + seed) % 251u + 1u);
}

/* Fail unless two host descriptors have the same shape and element bytes. */
static void assert_views_equal(const gm_ndview *got, const gm_ndview *want, const char *what)
{
    size_t item = (size_t)gm_ndview_itemsize(want);
    int64_t n = gm_ndview_size(want);

    assert_int_equal(got->ndim, want->ndim);
    for (int d = 0; d < want->ndim; d++)
        assert_int_equal(got->shape[d], want->shape[d]);
    for (int64_t i = 0; i < n; i++) {
        if (memcmp(elem(got, i), elem(want, i), item) != 0)
            fail_msg("%s: element %lld of %lld differs", what, (long long)i, (long long)n);
    }
}

/* Copy a device array to a new host array (copy_to_host_new) and compare it with `want`. */
static void assert_device_equals(gm_array *dev, const gm_ndview *want, const char *what)
{
    gm_array *host = NULL;

    assert_ok(gm_array_copy_to_host_new(dev, NULL, &host));
    assert_int_equal(gm_array_view(host)->memory, GM_MEMORY_HOST);
    assert_views_equal(gm_array_view(host), want, what);
    gm_array_release(&host);
}

/* A device array holding a copy of host descriptor `src`. */
static gm_array *upload(const gm_ndview *src)
{
    gm_array *dev = NULL;

    assert_ok(gm_to_device(g_ctx, src, NULL, &dev));
    return dev;
}

/* getitem on a host descriptor (the reference for the same getitem on a device array). */
static gm_ndview host_getitem(const gm_ndview *v, int nitems, const gm_index_item *items)
{
    gm_ndview out;

    assert_ok(gm_ndview_getitem(v, nitems, items, &out));
    return out;
}

/* Blocks of `block` threads covering n elements. */
static uint32_t blocks_for(int64_t n, uint32_t block)
{
    return (uint32_t)((n + block - 1) / block);
}

/* A 1-D geometry. */
static gm_dim3 dim1(uint32_t x)
{
    return gm_dim3_make(x, 1, 1);
}

/* Name of the running backend, for messages. */
static const char *backend_name(void)
{
    return gm_backend_name(gm_context_backend(g_ctx));
}

/* Whether a GPU backend runs on a driver test double (its documented path overrides). */
static bool on_test_double(void)
{
    gm_backend_kind kind = gm_context_backend(g_ctx);

    return (kind == GM_BACKEND_CUDA && getenv("GM_CUDA_DRIVER_PATH") != NULL) ||
           (kind == GM_BACKEND_HSA && getenv("GM_HSA_RUNTIME_PATH") != NULL);
}

/*
 * The built-in kernel `name`; skips the case when this backend has no image
 * of it (GM_ERR_NOT_FOUND / GM_ERR_UNSUPPORTED), or when a driver test
 * double that cannot run the library's images rejects them. A double that
 * runs them (GM_TEST_DOUBLE_RUNS_KERNELS set, as for the CUDA double) and a
 * real driver fail on every other failure.
 */
static gm_kernel *kernel_or_skip(const char *name)
{
    gm_kernel *k = NULL;
    gm_status st = gm_kernel_find(g_ctx, name, &k);
    bool double_skips = on_test_double() && getenv("GM_TEST_DOUBLE_RUNS_KERNELS") == NULL;

    if (st == GM_ERR_NOT_FOUND || st == GM_ERR_UNSUPPORTED || (st != GM_OK && double_skips)) {
        print_message("[  SKIPPED ] kernel %s unavailable on backend %s%s: %s: %s\n", name,
                      backend_name(), on_test_double() ? " (test double)" : "", gm_status_name(st),
                      gm_last_error_message());
        skip();
    }
    assert_status(st, GM_OK);
    return k;
}

/* A float32 device vector of n elements from host data (uninitialized when data is NULL). */
static gm_array *f32_vector(int64_t n, float *data)
{
    gm_array *a = NULL;
    gm_ndview v;

    if (data == NULL) {
        assert_ok(gm_device_array(g_ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &a));
        return a;
    }
    v = host_view(data, GM_FLOAT32, 1, &n, GM_ORDER_C);
    return upload(&v);
}

/* Read a float32 device vector into `out` (n elements). */
static void f32_download(gm_array *a, float *out, int64_t n)
{
    gm_ndview v = host_view(out, GM_FLOAT32, 1, &n, GM_ORDER_C);

    assert_ok(gm_array_copy_to_host(a, &v, NULL));
}

/* Small reproducible pseudo-random floats in [-1, 1). */
static float randf(unsigned *state)
{
    *state = *state * 1103515245u + 12345u;
    return (float)((*state >> 8) & 0xffffu) / 32768.0f - 1.0f;
}

/* ----------------------------------------------------- device arrays */

typedef struct layout_case {
    const char *name;
    int ndim;
    int64_t shape[3];
    gm_order order;
} layout_case;

/* Device arrays in C and F order (size 0 included): descriptor, then a round trip. */
static void test_device_array_layouts(void **state)
{
    static const layout_case cases[] = {
        {"C 3x4x5", 3, {3, 4, 5}, GM_ORDER_C}, {"F 3x4x5", 3, {3, 4, 5}, GM_ORDER_F},
        {"C 7", 1, {7, 0, 0}, GM_ORDER_C},     {"C 0x4", 2, {0, 4, 0}, GM_ORDER_C},
        {"F 3x0x2", 3, {3, 0, 2}, GM_ORDER_F}, {"C 0", 1, {0, 0, 0}, GM_ORDER_C},
    };
    int64_t buf[64];

    (void)state;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const layout_case *lc = &cases[c];
        gm_array *dev = NULL;
        gm_ndview src = host_view(buf, GM_INT64, lc->ndim, lc->shape, lc->order);
        const gm_ndview *v = NULL;

        fill_pattern(buf, sizeof(buf), (unsigned)c);
        assert_ok(gm_device_array(g_ctx, lc->ndim, lc->shape, GM_INT64, lc->order, &dev));
        v = gm_array_view(dev);
        assert_int_equal(v->memory, GM_MEMORY_DEVICE);
        assert_int_equal(gm_ndview_nbytes(v), gm_ndview_nbytes(&src));
        assert_true(lc->order == GM_ORDER_C ? gm_ndview_is_c_contiguous(v)
                                            : gm_ndview_is_f_contiguous(v));
        assert_ok(gm_array_copy_to_device(dev, &src, NULL));
        assert_device_equals(dev, &src, lc->name);
        gm_array_release(&dev);
    }
}

/* A device array with negative strides: round trip through it. */
static void test_device_array_strided(void **state)
{
    const int64_t shape[2] = {3, 4};
    const int64_t strides[2] = {-16, 4}; /* rows reversed, padded to 16 bytes */
    int16_t buf[12];
    gm_ndview src = host_view(buf, GM_INT16, 2, shape, GM_ORDER_C);
    gm_array *dev = NULL;

    (void)state;
    fill_pattern(buf, sizeof(buf), 3);
    assert_ok(gm_device_array_strided(g_ctx, 2, shape, strides, GM_INT16, &dev));
    assert_int_equal(gm_array_view(dev)->strides[0], -16);
    assert_int_equal(gm_array_view(dev)->strides[1], 4);
    assert_ok(gm_array_copy_to_device(dev, &src, NULL));
    assert_device_equals(dev, &src, "strided device array");
    gm_array_release(&dev);
}

/* ------------------------------------------------------------ transfers */

typedef struct host_layout {
    const char *name;
    gm_order order;
    int nitems;
    gm_index_item items[2];
} host_layout;

/* to_device from contiguous, strided, negative-stride and F-order host arrays. */
static void test_to_device_layouts(void **state)
{
    const host_layout cases[] = {
        {"contiguous", GM_ORDER_C, 0, {GM_IDX_ALL, GM_IDX_ALL}},
        {"F-order", GM_ORDER_F, 0, {GM_IDX_ALL, GM_IDX_ALL}},
        {"strided", GM_ORDER_C, 2, {GM_IDX_SLICE(GM_NONE, GM_NONE, 2), GM_IDX_SLICE(1, 8, 3)}},
        {"negative",
         GM_ORDER_C,
         2,
         {GM_IDX_SLICE(GM_NONE, GM_NONE, -1), GM_IDX_SLICE(GM_NONE, GM_NONE, -2)}},
        {"F negative", GM_ORDER_F, 1, {GM_IDX_SLICE(4, 0, -3), GM_IDX_ALL}},
    };
    const int64_t shape[2] = {6, 8};
    int32_t buf[48];

    (void)state;
    fill_pattern(buf, sizeof(buf), 11);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        gm_ndview base = host_view(buf, GM_INT32, 2, shape, cases[c].order);
        gm_ndview src = host_getitem(&base, cases[c].nitems, cases[c].items);
        gm_array *dev = upload(&src);

        assert_int_equal(gm_array_view(dev)->memory, GM_MEMORY_DEVICE);
        assert_true(gm_ndview_is_contiguous(gm_array_view(dev)));
        assert_device_equals(dev, &src, cases[c].name);
        gm_array_release(&dev);
    }
}

/* Count int16 elements of a buffer that differ from `sentinel`. */
static int64_t count_changed(const int16_t *buf, int64_t n, int16_t sentinel)
{
    int64_t changed = 0;

    for (int64_t i = 0; i < n; i++)
        changed += buf[i] != sentinel ? 1 : 0;
    return changed;
}

/* copy_to_host into strided destinations writes exactly the addressed elements. */
static void test_copy_to_host_strided(void **state)
{
    const gm_index_item dests[][2] = {
        {GM_IDX_SLICE(GM_NONE, GM_NONE, 2), GM_IDX_SLICE(GM_NONE, GM_NONE, 2)},
        {GM_IDX_SLICE(GM_NONE, GM_NONE, -2), GM_IDX_SLICE(GM_NONE, GM_NONE, -2)},
        {GM_IDX_SLICE(1, GM_NONE, 2), GM_IDX_SLICE(13, GM_NONE, -2)},
    };
    const int64_t shape[2] = {5, 7}, big[2] = {10, 14};
    int16_t src[35], dst[140];
    gm_ndview sv = host_view(src, GM_INT16, 2, shape, GM_ORDER_C);
    gm_ndview bv = host_view(dst, GM_INT16, 2, big, GM_ORDER_C);
    gm_array *dev = NULL;

    (void)state;
    for (int i = 0; i < 35; i++)
        src[i] = (int16_t)(i * 3 + 1);
    dev = upload(&sv);
    for (size_t c = 0; c < sizeof(dests) / sizeof(dests[0]); c++) {
        gm_ndview dv = host_getitem(&bv, 2, dests[c]);

        for (int i = 0; i < 140; i++)
            dst[i] = 0x7777;
        assert_ok(gm_array_copy_to_host(dev, &dv, NULL));
        assert_views_equal(&dv, &sv, "strided destination");
        assert_int_equal(count_changed(dst, 140, 0x7777), 35);
    }
    gm_array_release(&dev);
}

/* copy_to_host_new of an F-order array keeps its order (gm_ndview_like). */
static void test_copy_to_host_new(void **state)
{
    const int64_t shape[2] = {5, 3};
    double buf[15];
    gm_ndview src = host_view(buf, GM_FLOAT64, 2, shape, GM_ORDER_F);
    gm_array *dev = NULL, *host = NULL;

    (void)state;
    fill_pattern(buf, sizeof(buf), 5);
    dev = upload(&src);
    assert_ok(gm_array_copy_to_host_new(dev, NULL, &host));
    assert_true(gm_ndview_is_f_contiguous(gm_array_view(host)));
    assert_false(gm_ndview_is_c_contiguous(gm_array_view(host)));
    assert_views_equal(gm_array_view(host), &src, "copy_to_host_new F");
    gm_array_release(&host);
    gm_array_release(&dev);
}

/* copy_to_device from a strided host array and from another device array. */
static void test_copy_to_device(void **state)
{
    const int64_t shape[2] = {4, 5}, big[2] = {8, 5};
    const gm_index_item rev[1] = {GM_IDX_SLICE(GM_NONE, GM_NONE, -2)};
    double hbuf[40], fbuf[20];
    gm_ndview hb = host_view(hbuf, GM_FLOAT64, 2, big, GM_ORDER_C);
    gm_ndview hs = host_getitem(&hb, 1, rev);
    gm_ndview fv = host_view(fbuf, GM_FLOAT64, 2, shape, GM_ORDER_F);
    gm_array *dev = NULL, *other = NULL;

    (void)state;
    fill_pattern(hbuf, sizeof(hbuf), 1);
    fill_pattern(fbuf, sizeof(fbuf), 2);
    assert_ok(gm_device_array(g_ctx, 2, shape, GM_FLOAT64, GM_ORDER_C, &dev));
    assert_ok(gm_array_copy_to_device(dev, &hs, NULL));
    assert_device_equals(dev, &hs, "copy_to_device from strided host");
    other = upload(&fv);
    assert_ok(gm_array_copy_to_device(dev, gm_array_view(other), NULL));
    assert_device_equals(dev, &fv, "copy_to_device from device");
    gm_array_release(&other);
    gm_array_release(&dev);
}

/* Device-to-device gm_copy between transposed and negatively sliced views. */
static void test_device_to_device_views(void **state)
{
    const int64_t shape[2] = {6, 8}, tshape[2] = {8, 6}, half[2] = {3, 4};
    const gm_index_item neg[2] = {GM_IDX_SLICE(GM_NONE, GM_NONE, -2),
                                  GM_IDX_SLICE(GM_NONE, GM_NONE, -2)};
    int32_t buf[48];
    gm_ndview hv = host_view(buf, GM_INT32, 2, shape, GM_ORDER_C), ht, hs;
    gm_array *da = NULL, *dt = NULL, *dh = NULL, *dz = NULL, *dzs = NULL;
    gm_ndview tv, sv;

    (void)state;
    fill_pattern(buf, sizeof(buf), 9);
    da = upload(&hv);
    assert_ok(gm_ndview_transpose(&hv, &ht));
    hs = host_getitem(&hv, 2, neg);
    assert_ok(gm_ndview_transpose(gm_array_view(da), &tv));
    sv = host_getitem(gm_array_view(da), 2, neg);
    assert_ok(gm_device_array(g_ctx, 2, tshape, GM_INT32, GM_ORDER_C, &dt));
    assert_ok(gm_copy(g_ctx, gm_array_view(dt), &tv, NULL));
    assert_device_equals(dt, &ht, "d2d from transposed view");
    assert_ok(gm_device_array(g_ctx, 2, half, GM_INT32, GM_ORDER_F, &dh));
    assert_ok(gm_copy(g_ctx, gm_array_view(dh), &sv, NULL));
    assert_device_equals(dh, &hs, "d2d from [::-2, ::-2]");
    /* ... and into a [::-2, ::-2] destination view of a zeroed array */
    assert_ok(gm_device_array(g_ctx, 2, shape, GM_INT32, GM_ORDER_C, &dz));
    assert_ok(gm_array_memset(dz, 0, NULL));
    assert_ok(gm_array_getitem(dz, 2, neg, &dzs));
    assert_ok(gm_copy(g_ctx, gm_array_view(dzs), gm_array_view(dh), NULL));
    assert_device_equals(dzs, &hs, "d2d into [::-2, ::-2]");
    gm_array_release(&dzs);
    gm_array_release(&dz);
    gm_array_release(&dh);
    gm_array_release(&dt);
    gm_array_release(&da);
}

typedef enum derive_op { DERIVE_RESHAPE, DERIVE_RAVEL, DERIVE_TRANSPOSE, DERIVE_GETITEM } derive_op;

/* Apply `op` to a (3, 4) device array, and to its host descriptor as the reference. */
static gm_array *derive(gm_array *a, const gm_ndview *hv, derive_op op, gm_ndview *want)
{
    const int64_t rshape[2] = {4, 3};
    const gm_index_item row[2] = {GM_IDX_INT(1), GM_IDX_SLICE(GM_NONE, GM_NONE, -1)};
    gm_array *out = NULL;

    switch (op) {
    case DERIVE_RESHAPE:
        assert_ok(gm_array_reshape(a, 2, rshape, GM_ORDER_C, &out));
        assert_ok(gm_ndview_reshape(hv, 2, rshape, GM_ORDER_C, want));
        break;
    case DERIVE_RAVEL:
        assert_ok(gm_array_ravel(a, GM_ORDER_C, &out));
        assert_ok(gm_ndview_ravel(hv, GM_ORDER_C, want));
        break;
    case DERIVE_TRANSPOSE:
        assert_ok(gm_array_transpose(a, &out));
        assert_ok(gm_ndview_transpose(hv, want));
        break;
    default:
        assert_ok(gm_array_getitem(a, 2, row, &out));
        *want = host_getitem(hv, 2, row);
        break;
    }
    return out;
}

/* reshape / ravel / transpose / getitem of a device array share its buffer. */
static void test_views_share_buffer(void **state)
{
    const int64_t shape[2] = {3, 4};
    int32_t buf[12];
    gm_ndview hv = host_view(buf, GM_INT32, 2, shape, GM_ORDER_C), want;
    gm_array *a = NULL, *t = NULL, *d = NULL;

    (void)state;
    for (int i = 0; i < 12; i++)
        buf[i] = i;
    a = upload(&hv);
    for (int op = DERIVE_RESHAPE; op <= DERIVE_GETITEM; op++) {
        d = derive(a, &hv, (derive_op)op, &want);
        assert_true(gm_array_view(d)->data == gm_array_view(a)->data);
        assert_device_equals(d, &want, "derived view");
        gm_array_release(&d);
    }
    assert_ok(gm_array_transpose(a, &t));
    assert_status(gm_array_ravel(t, GM_ORDER_C, &d), GM_ERR_NEEDS_COPY); /* numpy: a copy */
    assert_null(d);
    gm_array_release(&t);
    gm_array_release(&a);
}

/* A fill through a getitem view is seen through the parent and its transpose. */
static void test_write_through_view(void **state)
{
    const int64_t shape[2] = {3, 4};
    int32_t buf[12], seven = 7;
    gm_ndview hv = host_view(buf, GM_INT32, 2, shape, GM_ORDER_C), row, ht;
    gm_array *a = NULL, *g = NULL, *t = NULL;

    (void)state;
    for (int i = 0; i < 12; i++)
        buf[i] = i;
    a = upload(&hv);
    g = derive(a, &hv, DERIVE_GETITEM, &row);
    t = derive(a, &hv, DERIVE_TRANSPOSE, &ht);
    assert_ok(gm_array_fill(g, &seven, NULL));
    for (int i = 4; i < 8; i++)
        buf[i] = 7;
    assert_device_equals(a, &hv, "parent after fill of a[1]");
    assert_device_equals(t, &ht, "transpose after fill of a[1]");
    gm_array_release(&g);
    gm_array_release(&t);
    gm_array_release(&a);
}

/* ----------------------------------------------------------- fill, memset */

typedef struct fill_case {
    gm_dtype dtype;
    size_t itemsize;
} fill_case;

/* Fill a contiguous and a [::3] view of a zeroed array; check both and the gaps. */
static void run_fill(gm_dtype dtype, size_t item)
{
    const int64_t n = 100;
    const gm_index_item every3[1] = {GM_IDX_SLICE(GM_NONE, GM_NONE, 3)};
    unsigned char value[16], *back = NULL;
    gm_array *a = NULL, *s = NULL, *host = NULL;

    fill_pattern(value, sizeof(value), (unsigned)item);
    assert_ok(gm_device_array(g_ctx, 1, &n, dtype, GM_ORDER_C, &a));
    assert_ok(gm_array_fill(a, value, NULL));
    assert_ok(gm_array_copy_to_host_new(a, NULL, &host));
    back = elem(gm_array_view(host), 0);
    for (int64_t i = 0; i < n; i++)
        assert_memory_equal(back + i * (int64_t)item, value, item);
    gm_array_release(&host);
    assert_ok(gm_array_memset(a, 0, NULL));
    assert_ok(gm_array_getitem(a, 1, every3, &s));
    assert_ok(gm_array_fill(s, value, NULL));
    assert_ok(gm_array_copy_to_host_new(a, NULL, &host));
    back = elem(gm_array_view(host), 0);
    for (int64_t i = 0; i < n; i++) {
        for (size_t b = 0; b < item; b++)
            assert_int_equal(back[i * (int64_t)item + (int64_t)b], i % 3 == 0 ? value[b] : 0);
    }
    gm_array_release(&host);
    gm_array_release(&s);
    gm_array_release(&a);
}

/* fill with 1, 2, 4, 8 and 16-byte items, contiguous and strided. */
static void test_fill_itemsizes(void **state)
{
    const fill_case cases[] = {
        {GM_UINT8, 1}, {GM_INT16, 2}, {GM_FLOAT32, 4}, {GM_INT64, 8}, {GM_COMPLEX128, 16},
    };

    (void)state;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
        run_fill(cases[c].dtype, cases[c].itemsize);
}

/*
 * A fill of a view that is not aligned to its item size (an int32 view at
 * byte 2 of a byte array, an int16 view at byte 1) works on every backend
 * and writes exactly its bytes.
 */
static void test_fill_unaligned(void **state)
{
    const int64_t nbytes = 70;
    const int32_t v32 = 0x11223344;
    const int16_t v16 = 0x5566;
    unsigned char got[70], want[70];
    gm_ndview gv = host_view(got, GM_UINT8, 1, &nbytes, GM_ORDER_C);
    gm_array *bytes = NULL, *w32 = NULL, *w16 = NULL;
    gm_ndview v;

    (void)state;
    assert_ok(gm_device_array(g_ctx, 1, &nbytes, GM_UINT8, GM_ORDER_C, &bytes));
    assert_ok(gm_array_memset(bytes, 0xee, NULL));
    v = *gm_array_view(bytes);
    v.dtype = GM_INT32;
    v.shape[0] = 16;
    v.strides[0] = 4;
    v.offset += 2; /* bytes 2 .. 65 */
    assert_ok(gm_array_derive(bytes, &v, &w32));
    assert_ok(gm_array_fill(w32, &v32, NULL));
    v.dtype = GM_INT16;
    v.shape[0] = 1;
    v.strides[0] = 2;
    v.offset = gm_array_view(bytes)->offset + 67; /* bytes 67 .. 68 */
    assert_ok(gm_array_derive(bytes, &v, &w16));
    assert_ok(gm_array_fill(w16, &v16, NULL));
    memset(want, 0xee, sizeof(want));
    for (int i = 0; i < 16; i++)
        memcpy(want + 2 + 4 * i, &v32, 4);
    memcpy(want + 67, &v16, 2);
    assert_ok(gm_array_copy_to_host(bytes, &gv, NULL));
    assert_memory_equal(got, want, sizeof(want));
    gm_array_release(&w16);
    gm_array_release(&w32);
    gm_array_release(&bytes);
}

/* memset sets every byte; a value outside 0..255 is rejected. */
static void test_memset(void **state)
{
    const int64_t shape[2] = {9, 7};
    unsigned char want[9 * 7 * 4];
    gm_ndview wv = host_view(want, GM_UINT32, 2, shape, GM_ORDER_F);
    gm_array *a = NULL;

    (void)state;
    memset(want, 0xab, sizeof(want));
    assert_ok(gm_device_array(g_ctx, 2, shape, GM_UINT32, GM_ORDER_F, &a));
    assert_ok(gm_array_memset(a, 0xab, NULL));
    assert_device_equals(a, &wv, "memset 0xab");
    assert_status(gm_array_memset(a, 256, NULL), GM_ERR_INVALID_ARG);
    gm_array_release(&a);
}

/* ------------------------------------------------------------ host memory */

/* pinned_array and mapped_array: host-accessible, copies both ways, device view. */
static void test_pinned_and_mapped(void **state)
{
    const int64_t n = 1000;
    gm_array *p = NULL, *m = NULL, *dev = NULL, *back = NULL;
    gm_ndview dv;

    (void)state;
    assert_ok(gm_pinned_array(g_ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &p));
    assert_int_equal(gm_array_view(p)->memory, GM_MEMORY_PINNED);
    fill_pattern(elem(gm_array_view(p), 0), (size_t)n * 4, 4);
    dev = upload(gm_array_view(p));
    assert_device_equals(dev, gm_array_view(p), "from pinned");
    assert_ok(gm_mapped_array(g_ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, 0, &m));
    assert_int_equal(gm_array_view(m)->memory, GM_MEMORY_MAPPED);
    assert_ok(gm_array_copy_to_host(dev, gm_array_view(m), NULL));
    assert_views_equal(gm_array_view(m), gm_array_view(p), "device to mapped");
    assert_ok(gm_array_device_view(m, &dv));
    assert_int_equal(dv.memory, GM_MEMORY_DEVICE);
    back = upload(&dv); /* device-to-device from the mapped device side */
    assert_device_equals(back, gm_array_view(p), "from mapped device view");
    assert_status(gm_array_device_view(p, &dv), GM_ERR_INVALID_ARG);
    gm_array_release(&back);
    gm_array_release(&m);
    gm_array_release(&dev);
    gm_array_release(&p);
}

/* A kernel writes through a mapped array's device view; the host reads it. */
static void test_mapped_kernel_write(void **state)
{
    const int64_t n = 777;
    gm_kernel *k = kernel_or_skip("fill_i32");
    gm_array *m = NULL;
    gm_ndview dv;
    const int32_t *host = NULL;

    (void)state;
    assert_ok(gm_mapped_array(g_ctx, 1, &n, GM_INT32, GM_ORDER_C, GM_HOST_PORTABLE, &m));
    memset(elem(gm_array_view(m), 0), 0, (size_t)n * 4);
    assert_ok(gm_array_device_view(m, &dv));
    {
        gm_arg args[] = {gm_arg_view(&dv), gm_arg_i32(-42), gm_arg_i64(n)};

        assert_ok(gm_launch(k, dim1(blocks_for(n, 128)), dim1(128), 0, NULL, 3, args));
    }
    host = (const int32_t *)(const void *)elem(gm_array_view(m), 0);
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(host[i], -42);
    gm_array_release(&m);
}

/* gm_pointer_kind names page-locked memory by how it was made, the same on every backend. */
static void test_pointer_kinds(void **state)
{
    const int64_t n = 1024;
    float *buf = malloc((size_t)n * 4), *other = malloc((size_t)n * 4);
    gm_array *pinned = NULL, *mapped = NULL, *dev = NULL;
    gm_ndview view, oview, dview;
    gm_host_scope *map_scope = NULL, *pin_scope = NULL;
    gm_memory_kind kind = GM_MEMORY_HOST;

    (void)state;
    assert_non_null(buf);
    assert_non_null(other);
    assert_ok(gm_pinned_array(g_ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &pinned));
    assert_ok(gm_mapped_array(g_ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, 0, &mapped));
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &dev));
    view = host_view(buf, GM_FLOAT32, 1, &n, GM_ORDER_C);
    oview = host_view(other, GM_FLOAT32, 1, &n, GM_ORDER_C);
    assert_ok(gm_map(g_ctx, 1, &view, &dview, &map_scope));
    assert_ok(gm_pin(g_ctx, 1, &oview, &pin_scope));
    assert_ok(gm_pointer_kind(g_ctx, gm_array_view(pinned)->data, &kind));
    assert_int_equal(kind, GM_MEMORY_PINNED);
    assert_ok(gm_pointer_kind(g_ctx, (char *)gm_array_view(mapped)->data + 100, &kind));
    assert_int_equal(kind, GM_MEMORY_MAPPED);
    assert_ok(gm_pointer_kind(g_ctx, buf + 10, &kind));
    assert_int_equal(kind, GM_MEMORY_MAPPED);
    assert_ok(gm_pointer_kind(g_ctx, other + 10, &kind));
    assert_int_equal(kind, GM_MEMORY_PINNED);
    assert_ok(gm_pointer_kind(g_ctx, gm_array_view(dev)->data, &kind));
    assert_int_equal(kind, GM_MEMORY_DEVICE);
    assert_ok(gm_host_scope_end(&pin_scope));
    assert_ok(gm_host_scope_end(&map_scope));
    assert_ok(gm_pointer_kind(g_ctx, buf + 10, &kind));
    assert_int_equal(kind, GM_MEMORY_HOST); /* unregistered again */
    gm_array_release(&dev);
    gm_array_release(&mapped);
    gm_array_release(&pinned);
    free(other);
    free(buf);
}

/* pin / map / register scopes on malloc'ed memory, pinning the same memory twice in a row. */
static void test_host_scopes(void **state)
{
    const int64_t n = 4096;
    int64_t half = n / 2;
    float *buf = malloc((size_t)n * 4);
    gm_ndview views[2], dview[2];
    gm_host_scope *scope = NULL;
    gm_array *dev = NULL;

    (void)state;
    assert_non_null(buf);
    fill_pattern(buf, (size_t)n * 4, 8);
    views[0] = host_view(buf, GM_FLOAT32, 1, &n, GM_ORDER_C);
    views[1] = host_view(buf, GM_FLOAT32, 1, &half, GM_ORDER_C); /* overlaps: merged */
    for (int round = 0; round < 2; round++) {
        assert_ok(gm_pin(g_ctx, 2, views, &scope));
        dev = upload(&views[0]);
        assert_device_equals(dev, &views[0], "pinned scope");
        gm_array_release(&dev);
        assert_ok(gm_host_scope_end(&scope));
        assert_null(scope);
    }
    assert_ok(gm_map(g_ctx, 1, views, dview, &scope));
    assert_int_equal(dview[0].memory, GM_MEMORY_DEVICE);
    dev = upload(&dview[0]);
    assert_device_equals(dev, &views[0], "mapped scope device view");
    gm_array_release(&dev);
    assert_ok(gm_host_scope_end(&scope));
    assert_ok(gm_register(g_ctx, 1, views, &scope));
    assert_ok(gm_deregister(&scope));
    assert_ok(gm_register(g_ctx, 1, views, &scope));
    assert_ok(gm_deregister(&scope));
    free(buf);
}

/* ---------------------------------------------------------------- streams */

/* Several rounds of async h2d, d2d, d2h on one stream, synchronized once. */
static void test_stream_copy_ordering(void **state)
{
    enum { ROUNDS = 4 };
    const int64_t n = 50000;
    gm_stream *s = NULL;
    gm_array *src = NULL, *dst = NULL, *da = NULL, *db = NULL;
    const int64_t shape[2] = {ROUNDS, n};

    (void)state;
    assert_ok(gm_stream_create(g_ctx, GM_STREAM_DEFAULT, &s));
    assert_ok(gm_pinned_array(g_ctx, 2, shape, GM_INT32, GM_ORDER_C, &src));
    assert_ok(gm_pinned_array(g_ctx, 2, shape, GM_INT32, GM_ORDER_C, &dst));
    fill_pattern(elem(gm_array_view(src), 0), (size_t)(ROUNDS * n * 4), 21);
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_INT32, GM_ORDER_C, &da));
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_INT32, GM_ORDER_C, &db));
    for (int64_t r = 0; r < ROUNDS; r++) {
        gm_ndview sr, dr;

        assert_ok(gm_ndview_index(gm_array_view(src), 0, r, &sr));
        assert_ok(gm_ndview_index(gm_array_view(dst), 0, r, &dr));
        assert_ok(gm_array_copy_to_device(da, &sr, s));
        assert_ok(gm_copy(g_ctx, gm_array_view(db), gm_array_view(da), s));
        assert_ok(gm_array_copy_to_host(db, &dr, s));
    }
    assert_ok(gm_stream_synchronize(s));
    assert_ok(gm_stream_query(s));
    assert_views_equal(gm_array_view(dst), gm_array_view(src), "stream ordering");
    gm_array_release(&da);
    gm_array_release(&db);
    gm_array_release(&src);
    gm_array_release(&dst);
    gm_stream_destroy(&s);
    assert_null(s);
}

/* Async copies and an add_f32 kernel on one stream: out = a + b. */
static void test_stream_kernel_ordering(void **state)
{
    const int64_t n = 3001;
    gm_kernel *k = kernel_or_skip("add_f32");
    gm_stream *s = NULL;
    gm_array *ha = NULL, *hout = NULL, *da = NULL, *dout = NULL;
    const float *a = NULL, *out = NULL;

    (void)state;
    assert_ok(gm_stream_create(g_ctx, GM_STREAM_NON_BLOCKING, &s));
    assert_ok(gm_pinned_array(g_ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &ha));
    assert_ok(gm_pinned_array(g_ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &hout));
    a = (const float *)(const void *)elem(gm_array_view(ha), 0);
    out = (const float *)(const void *)elem(gm_array_view(hout), 0);
    for (int64_t i = 0; i < n; i++)
        ((float *)(void *)elem(gm_array_view(ha), i))[0] = (float)i * 0.25f;
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &da));
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &dout));
    assert_ok(gm_array_copy_to_device(da, gm_array_view(ha), s));
    {
        gm_arg args[] = {gm_arg_array(da), gm_arg_array(da), gm_arg_array(dout), gm_arg_i64(n)};

        assert_ok(gm_launch(k, dim1(blocks_for(n, 256)), dim1(256), 0, s, 4, args));
        assert_ok(gm_launch(k, dim1(blocks_for(n, 64)), dim1(64), 0, s, 4, args));
    }
    assert_ok(gm_array_copy_to_host(dout, gm_array_view(hout), s));
    assert_ok(gm_stream_synchronize(s));
    for (int64_t i = 0; i < n; i++)
        assert_true(out[i] == a[i] + a[i]);
    gm_array_release(&da);
    gm_array_release(&dout);
    gm_array_release(&ha);
    gm_array_release(&hout);
    gm_stream_destroy(&s);
}

/* Two streams: the second waits on an event recorded after the first's upload. */
static void test_two_streams_event(void **state)
{
    const int64_t n = 1 << 18;
    gm_stream *s1 = NULL, *s2 = NULL;
    gm_event *e = NULL;
    gm_array *h = NULL, *back = NULL, *da = NULL, *db = NULL;

    (void)state;
    assert_ok(gm_stream_create(g_ctx, GM_STREAM_NON_BLOCKING, &s1));
    assert_ok(gm_stream_create(g_ctx, GM_STREAM_NON_BLOCKING, &s2));
    assert_ok(gm_event_create(g_ctx, false, &e));
    assert_ok(gm_pinned_array(g_ctx, 1, &n, GM_UINT8, GM_ORDER_C, &h));
    assert_ok(gm_pinned_array(g_ctx, 1, &n, GM_UINT8, GM_ORDER_C, &back));
    fill_pattern(elem(gm_array_view(h), 0), (size_t)n, 33);
    memset(elem(gm_array_view(back), 0), 0, (size_t)n);
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_UINT8, GM_ORDER_C, &da));
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_UINT8, GM_ORDER_C, &db));
    assert_ok(gm_array_copy_to_device(da, gm_array_view(h), s1));
    assert_ok(gm_event_record(e, s1));
    assert_ok(gm_stream_wait_event(s2, e));
    assert_ok(gm_copy(g_ctx, gm_array_view(db), gm_array_view(da), s2));
    assert_ok(gm_array_copy_to_host(db, gm_array_view(back), s2));
    assert_ok(gm_stream_synchronize(s2));
    assert_ok(gm_event_query(e));
    assert_views_equal(gm_array_view(back), gm_array_view(h), "two streams");
    gm_event_destroy(&e);
    gm_array_release(&da);
    gm_array_release(&db);
    gm_array_release(&h);
    gm_array_release(&back);
    gm_stream_destroy(&s1);
    gm_stream_destroy(&s2);
}

typedef struct callback_record {
    atomic_int calls;
    atomic_int status;
} callback_record;

/* Stream callback: count the call and keep its status. */
static void on_stream_done(gm_stream *stream, gm_status status, void *user)
{
    callback_record *r = user;

    (void)stream;
    atomic_store(&r->status, (int)status);
    atomic_fetch_add(&r->calls, 1);
}

/* Wait up to ~10 s for `calls` to reach `want`. */
static bool wait_for_calls(callback_record *r, int want)
{
    const struct timespec tick = {0, 1000000};

    for (int i = 0; i < 10000; i++) {
        if (atomic_load(&r->calls) >= want)
            return true;
        nanosleep(&tick, NULL);
    }
    return false;
}

/* Callbacks run once each after the work before them; query reports completion. */
static void test_stream_callbacks(void **state)
{
    const int64_t n = 4096;
    callback_record rec;
    gm_stream *s = NULL;
    gm_array *da = NULL;

    (void)state;
    atomic_init(&rec.calls, 0);
    atomic_init(&rec.status, -1);
    assert_ok(gm_stream_create(g_ctx, GM_STREAM_DEFAULT, &s));
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_INT32, GM_ORDER_C, &da));
    assert_ok(gm_array_memset(da, 1, s));
    assert_ok(gm_stream_add_callback(s, on_stream_done, &rec));
    assert_ok(gm_stream_add_callback(s, on_stream_done, &rec));
    assert_ok(gm_stream_synchronize(s));
    assert_true(wait_for_calls(&rec, 2));
    assert_int_equal(atomic_load(&rec.calls), 2);
    assert_int_equal(atomic_load(&rec.status), GM_OK);
    assert_ok(gm_stream_query(s));
    gm_array_release(&da);
    gm_stream_destroy(&s);
}

/* What a callback got from the calls that wait for streams. */
typedef struct waits_in_callback {
    gm_event *event;
    gm_stream *other;
    gm_host_scope *scope;
    atomic_int own, other_stream, event_sync, auto_end, scope_end, calls;
} waits_in_callback;

static void wait_inside_callback(gm_stream *stream, gm_status status, void *user)
{
    waits_in_callback *w = user;

    (void)status;
    atomic_store(&w->own, (int)gm_stream_synchronize(stream));
    atomic_store(&w->other_stream, (int)gm_stream_synchronize(w->other));
    atomic_store(&w->event_sync, (int)gm_event_synchronize(w->event));
    atomic_store(&w->auto_end, (int)gm_stream_auto_synchronize_end(stream));
    atomic_store(&w->scope_end, (int)gm_host_scope_end(&w->scope));
    atomic_fetch_add(&w->calls, 1);
}

/*
 * A callback must not wait for streams: every waiting call (ending a
 * registration scope too) is refused there with GM_ERR_STATE, on every backend, instead of
 * deadlocking (HSA: the callback's own completion), failing in the driver (CUDA) or running (the
 * simulator, for another stream).
 */
static void test_no_waiting_inside_callbacks(void **state)
{
    const int64_t n = 256;
    float *buf = malloc((size_t)n * 4);
    gm_ndview bv;
    waits_in_callback w;
    gm_stream *s = NULL;

    (void)state;
    assert_non_null(buf);
    memset(&w, 0, sizeof(w));
    bv = host_view(buf, GM_FLOAT32, 1, &n, GM_ORDER_C);
    assert_ok(gm_pin(g_ctx, 1, &bv, &w.scope));
    assert_ok(gm_stream_create(g_ctx, GM_STREAM_DEFAULT, &s));
    assert_ok(gm_stream_create(g_ctx, GM_STREAM_NON_BLOCKING, &w.other));
    assert_ok(gm_event_create(g_ctx, false, &w.event));
    assert_ok(gm_event_record(w.event, w.other));
    assert_ok(gm_stream_auto_synchronize_begin(s));
    assert_ok(gm_stream_add_callback(s, wait_inside_callback, &w));
    assert_ok(gm_stream_synchronize(s));
    assert_int_equal(atomic_load(&w.calls), 1);
    assert_int_equal(atomic_load(&w.own), GM_ERR_STATE);
    assert_int_equal(atomic_load(&w.other_stream), GM_ERR_STATE);
    assert_int_equal(atomic_load(&w.event_sync), GM_ERR_STATE);
    assert_int_equal(atomic_load(&w.auto_end), GM_ERR_STATE);
    assert_int_equal(atomic_load(&w.scope_end), GM_ERR_STATE);
    assert_non_null(w.scope); /* still open: ended here */
    assert_ok(gm_host_scope_end(&w.scope));
    free(buf);
    assert_ok(gm_stream_auto_synchronize_end(s)); /* the callback's refused end closed nothing */
    assert_status(gm_stream_auto_synchronize_end(s), GM_ERR_STATE);
    gm_event_destroy(&w.event);
    gm_stream_destroy(&w.other);
    gm_stream_destroy(&s);
}

/* auto_synchronize scopes nest; the outermost end synchronizes. */
static void test_auto_synchronize(void **state)
{
    const int64_t n = 10000;
    int64_t want[10000], got[10000];
    gm_ndview wv = host_view(want, GM_INT64, 1, &n, GM_ORDER_C);
    gm_ndview gv = host_view(got, GM_INT64, 1, &n, GM_ORDER_C);
    gm_stream *s = NULL;
    gm_array *da = NULL;

    (void)state;
    fill_pattern(want, sizeof(want), 17);
    memset(got, 0, sizeof(got));
    assert_ok(gm_stream_create(g_ctx, GM_STREAM_DEFAULT, &s));
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_INT64, GM_ORDER_C, &da));
    assert_ok(gm_stream_auto_synchronize_begin(s));
    assert_ok(gm_stream_auto_synchronize_begin(s));
    assert_ok(gm_array_copy_to_device(da, &wv, s));
    assert_ok(gm_array_copy_to_host(da, &gv, s));
    assert_ok(gm_stream_auto_synchronize_end(s));
    assert_ok(gm_stream_auto_synchronize_end(s));
    assert_views_equal(&gv, &wv, "auto_synchronize");
    assert_status(gm_stream_auto_synchronize_end(s), GM_ERR_STATE);
    gm_array_release(&da);
    gm_stream_destroy(&s);
}

/* The default, legacy and per-thread streams: copies on each; destroy ignores them. */
static void test_builtin_streams(void **state)
{
    const int64_t n = 999;
    int16_t want[999], got[999];
    gm_ndview wv = host_view(want, GM_INT16, 1, &n, GM_ORDER_C);
    gm_ndview gv = host_view(got, GM_INT16, 1, &n, GM_ORDER_C);
    gm_stream *streams[3] = {gm_default_stream(g_ctx), gm_legacy_default_stream(g_ctx),
                             gm_per_thread_default_stream(g_ctx)};
    gm_array *da = NULL;

    (void)state;
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_INT16, GM_ORDER_C, &da));
    for (int i = 0; i < 3; i++) {
        gm_stream *s = streams[i];

        assert_non_null(s);
        fill_pattern(want, sizeof(want), (unsigned)i);
        memset(got, 0, sizeof(got));
        assert_ok(gm_array_copy_to_device(da, &wv, s));
        assert_ok(gm_array_copy_to_host(da, &gv, s));
        assert_ok(gm_stream_synchronize(s));
        assert_ok(gm_stream_query(s));
        assert_views_equal(&gv, &wv, "built-in stream");
        gm_stream_destroy(&s);
        assert_true(s == streams[i]);
    }
    gm_array_release(&da);
}

/* ------------------------------------- per-thread streams of exited threads */

/* A thread's per-thread stream work held back by a gate until another thread opens it. */
typedef struct gated_job {
    gm_context *ctx;
    gm_array *a;         /* the thread fills it on its stream, behind the gate */
    uint32_t value;      /* what it fills in */
    _Atomic int release; /* the gate */
    _Atomic int ran;     /* 1: the gated callback ran after the gate opened; 2: gave up */
    gm_status status;    /* what the thread's calls returned */
} gated_job;

/* Stream callback: wait (up to ~10 s) for the gate, then say so. */
static void gated_callback(gm_stream *stream, gm_status status, void *user)
{
    gated_job *job = user;
    const struct timespec tick = {0, 1000000};
    int i = 0;

    (void)stream;
    (void)status;
    while (atomic_load(&job->release) == 0 && i++ < 10000)
        nanosleep(&tick, NULL);
    atomic_store(&job->ran, atomic_load(&job->release) != 0 ? 1 : 2);
}

/* Thread body: queue the gate and a fill on this thread's own stream, then exit at once. */
static void *queue_behind_gate(void *arg)
{
    gated_job *job = arg;
    gm_stream *mine = gm_per_thread_default_stream(job->ctx);

    job->status = mine == NULL ? gm_last_error() : GM_OK;
    if (job->status == GM_OK)
        job->status = gm_stream_add_callback(mine, gated_callback, job);
    if (job->status == GM_OK)
        job->status = gm_array_fill(job->a, &job->value, mine);
    return NULL;
}

/* Thread body: open the gate after 30 ms. */
static void *open_gate_later(void *arg)
{
    gated_job *job = arg;
    const struct timespec pause = {0, 30000000};

    nanosleep(&pause, NULL);
    atomic_store(&job->release, 1);
    return NULL;
}

/*
 * Work a thread queued on its per-thread default stream runs after the
 * thread exits, in order, and still orders the legacy stream: a synchronous
 * copy (legacy) issued after the thread is gone waits for the gate and then
 * sees the fill (CUDA: per-thread streams are blocking streams). Ten threads
 * in turn do the same, so per-thread streams come and go.
 */
static void test_per_thread_stream_outlives_thread(void **state)
{
    const int64_t n = 4096;
    uint32_t *host = calloc((size_t)n, sizeof(uint32_t));
    gm_ndview hv = host_view(host, GM_UINT32, 1, &n, GM_ORDER_C);
    gm_array *a = NULL;

    (void)state;
    if (gm_context_backend(g_ctx) == GM_BACKEND_CUDA && on_test_double()) {
        print_message("skipped on %s (test double): it runs stream work within the call, so "
                      "no work can wait behind a gate\n",
                      backend_name());
        free(host);
        skip();
    }
    assert_non_null(host);
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_UINT32, GM_ORDER_C, &a));
    for (uint32_t round = 0; round < 10; round++) {
        gated_job job = {g_ctx, a, 0xA5A50000u + round, 0, 0, GM_ERR_INTERNAL};
        pthread_t queuer, opener;

        assert_ok(gm_array_memset(a, 0, NULL));
        assert_int_equal(pthread_create(&queuer, NULL, queue_behind_gate, &job), 0);
        assert_int_equal(pthread_join(queuer, NULL), 0);
        assert_ok(job.status);
        assert_int_equal(atomic_load(&job.ran), 0); /* held by the gate */
        assert_int_equal(pthread_create(&opener, NULL, open_gate_later, &job), 0);
        assert_ok(gm_array_copy_to_host(a, &hv, NULL));
        assert_int_equal(atomic_load(&job.ran), 1);
        for (int64_t i = 0; i < n; i++)
            assert_int_equal(host[i], job.value);
        assert_int_equal(pthread_join(opener, NULL), 0);
    }
    assert_ok(gm_context_synchronize(g_ctx));
    gm_array_release(&a);
    free(host);
}

/* Thread body: use the per-thread stream of job->ctx, then wait for the gate before exiting. */
static void *use_then_wait(void *arg)
{
    gated_job *job = arg;
    gm_stream *mine = gm_per_thread_default_stream(job->ctx);
    const struct timespec tick = {0, 1000000};

    job->status = mine == NULL ? gm_last_error() : gm_array_fill(job->a, &job->value, mine);
    if (job->status == GM_OK)
        job->status = gm_stream_synchronize(mine);
    atomic_store(&job->ran, 1);
    for (int i = 0; i < 10000 && atomic_load(&job->release) == 0; i++)
        nanosleep(&tick, NULL);
    return NULL;
}

/*
 * A context destroyed while a thread that used its per-thread stream is
 * still alive: the thread's exit afterwards must not touch the gone context
 * (AddressSanitizer reports it if it does), and a new context works.
 */
static void test_per_thread_stream_context_gone_first(void **state)
{
    const int64_t n = 64;
    gm_context *ctx = NULL;
    gated_job job;
    pthread_t t;

    (void)state;
    memset(&job, 0, sizeof(job));
    assert_ok(gm_context_create(NULL, &ctx));
    job.ctx = ctx;
    job.value = 7;
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT32, GM_ORDER_C, &job.a));
    assert_int_equal(pthread_create(&t, NULL, use_then_wait, &job), 0);
    for (int i = 0; i < 10000 && atomic_load(&job.ran) == 0; i++) {
        const struct timespec tick = {0, 1000000};

        nanosleep(&tick, NULL);
    }
    assert_int_equal(atomic_load(&job.ran), 1);
    assert_ok(job.status);
    gm_array_release(&job.a);
    gm_context_destroy(&ctx);
    atomic_store(&job.release, 1);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_ok(gm_context_create(NULL, &ctx));
    gm_context_destroy(&ctx);
}

/* --------------------------------------------------------------- events */

/* Timing events around a copy: elapsed >= 0; query and synchronize; non-timing rejected. */
static void test_events(void **state)
{
    const int64_t n = 1 << 16;
    gm_stream *s = NULL;
    gm_event *e0 = NULL, *e1 = NULL, *plain = NULL;
    gm_array *a = NULL, *b = NULL;
    float ms = -1.0f;

    (void)state;
    assert_ok(gm_stream_create(g_ctx, GM_STREAM_DEFAULT, &s));
    assert_ok(gm_event_create(g_ctx, true, &e0));
    assert_ok(gm_event_create(g_ctx, true, &e1));
    assert_ok(gm_event_create(g_ctx, false, &plain));
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &a));
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &b));
    assert_status(gm_event_elapsed_ms(e0, e1, &ms), GM_ERR_INVALID_ARG); /* never recorded */
    assert_message_contains("the start event was never recorded");
    assert_ok(gm_event_record(e0, s));
    assert_status(gm_event_elapsed_ms(e0, e1, &ms), GM_ERR_INVALID_ARG);
    assert_message_contains("the end event was never recorded");
    assert_true(ms == -1.0f); /* not written on failure */
    assert_ok(gm_array_memset(a, 3, s));
    assert_ok(gm_copy(g_ctx, gm_array_view(b), gm_array_view(a), s));
    assert_ok(gm_event_record(e1, s));
    assert_ok(gm_event_record(plain, NULL));
    assert_ok(gm_event_synchronize(e1));
    assert_ok(gm_event_synchronize(plain));
    assert_ok(gm_event_query(e0));
    assert_ok(gm_event_query(e1));
    assert_ok(gm_event_elapsed_ms(e0, e1, &ms));
    assert_true(ms >= 0.0f);
    assert_status(gm_event_elapsed_ms(e0, plain, &ms), GM_ERR_INVALID_ARG);
    gm_event_destroy(&e0);
    gm_event_destroy(&e1);
    gm_event_destroy(&plain);
    assert_null(e0);
    gm_array_release(&a);
    gm_array_release(&b);
    gm_stream_destroy(&s);
}

/* ------------------------------------------------ memory manager base */

/* A manager that forwards to the base and keeps it for the test to call. */
static const gm_memory_manager_base *g_base = NULL;

static gm_status fwd_initialize(const gm_memory_manager_base *base, void *user)
{
    (void)user;
    g_base = base;
    return GM_OK;
}

static gm_status fwd_memalloc(const gm_memory_manager_base *base, void *user, size_t bytes,
                              uint64_t *ptr_p, void **owner_p)
{
    (void)user;
    (void)owner_p;
    return base->memalloc(base, bytes, ptr_p);
}

static gm_status fwd_memfree(const gm_memory_manager_base *base, void *user, uint64_t ptr,
                             size_t bytes, void *owner)
{
    (void)user;
    (void)bytes;
    (void)owner;
    return base->memfree(base, ptr);
}

static gm_status fwd_memory_info(const gm_memory_manager_base *base, void *user, int64_t *free_p,
                                 int64_t *total_p)
{
    (void)user;
    return base->get_memory_info(base, free_p, total_p);
}

/*
 * The base allocator a plugin calls behaves alike on every backend: 0 bytes
 * refused, freeing 0 / NULL a no-op, pinning twice GM_ERR_STATE, unpinning
 * what is not pinned GM_ERR_INVALID_ARG (the drivers differ on each).
 */
static void test_memory_manager_base(void **state)
{
    static const gm_memory_manager fwd = {
        .interface_version = GM_MEMORY_MANAGER_INTERFACE_VERSION,
        .size = (uint32_t)sizeof(gm_memory_manager),
        .name = "forwarding",
        .initialize = fwd_initialize,
        .memalloc = fwd_memalloc,
        .memfree = fwd_memfree,
        .get_memory_info = fwd_memory_info,
    };
    gm_context_options opt;
    gm_context *ctx = NULL;
    uint64_t dptr = 1;
    void *hptr = &dptr;
    void *buf = NULL;
    const size_t page = 4096;

    (void)state;
    gm_context_options_default(&opt);
    opt.backend = gm_context_backend(g_ctx);
    opt.memory_manager = &fwd;
    assert_ok(gm_context_create(&opt, &ctx));
    assert_non_null(g_base);
    assert_status(g_base->memalloc(g_base, 0, &dptr), GM_ERR_INVALID_ARG);
    assert_message_contains("memory manager base memalloc: 0 bytes requested");
    assert_int_equal(dptr, 1); /* untouched */
    assert_ok(g_base->memfree(g_base, 0));
    assert_status(g_base->memhostalloc(g_base, 0, false, false, false, &hptr), GM_ERR_INVALID_ARG);
    assert_message_contains("memory manager base memhostalloc: 0 bytes requested");
    assert_ptr_equal(hptr, &dptr);
    assert_ok(g_base->memhostfree(g_base, NULL));
    assert_ok(g_base->memalloc(g_base, 256, &dptr));
    assert_true(dptr != 0 && dptr != 1);
    assert_ok(g_base->memfree(g_base, dptr));
    assert_ok(g_base->memhostalloc(g_base, 256, true, false, false, &hptr));
    assert_ok(g_base->memhostfree(g_base, hptr));
    assert_int_equal(posix_memalign(&buf, page, 2 * page), 0);
    assert_ok(g_base->mempin(g_base, buf, 2 * page, false));
    assert_status(g_base->mempin(g_base, buf, 2 * page, false), GM_ERR_STATE);
    assert_ok(g_base->memunpin(g_base, buf));
    assert_status(g_base->memunpin(g_base, buf), GM_ERR_INVALID_ARG);
    assert_status(g_base->memunpin(g_base, (char *)buf + page), GM_ERR_INVALID_ARG);
    free(buf);
    gm_context_destroy(&ctx);
    g_base = NULL;
}

/* -------------------------------------------------- deallocation queue */

/* A second context of the same backend with a deallocation count bound. */
static gm_context *context_with_count_limit(int64_t limit)
{
    gm_context_options opt;
    gm_context *ctx = NULL;

    gm_context_options_default(&opt);
    opt.max_pending_count = limit;
    opt.max_pending_ratio = 1.0;
    opt.backend = gm_context_backend(g_ctx);
    assert_ok(gm_context_create(&opt, &ctx));
    return ctx;
}

/* Release arrays[first .. last) in order. */
static void release_range(gm_array **arrays, int first, int last)
{
    for (int i = first; i < last; i++)
        gm_array_release(&arrays[i]);
}

/* Queue stats of `ctx`. */
static gm_dealloc_stats queue_stats(gm_context *ctx)
{
    gm_dealloc_stats st;

    memset(&st, 0, sizeof(st));
    assert_ok(gm_deallocations_stats(ctx, &st));
    return st;
}

/* A context with count bound `limit` and `count` device arrays of it, the queue flushed. */
static gm_context *queue_fixture(int64_t limit, gm_array **arrays, int count)
{
    const int64_t n = 256;
    gm_context *ctx = context_with_count_limit(limit);

    for (int i = 0; i < count; i++)
        assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &arrays[i]));
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(queue_stats(ctx).pending_count, 0);
    return ctx;
}

/* Releases queue up to the count bound; one more flushes, as the stats show. */
static void test_deallocation_count_limit(void **state)
{
    enum { LIMIT = 4 };
    gm_array *arrays[LIMIT + 1] = {NULL};
    gm_context *ctx = queue_fixture(LIMIT, arrays, LIMIT + 1);
    gm_dealloc_stats s0 = queue_stats(ctx), st;

    (void)state;
    release_range(arrays, 0, LIMIT);
    st = queue_stats(ctx);
    assert_int_equal(st.pending_count, LIMIT);
    assert_int_equal(st.flushes, s0.flushes);
    assert_true(st.pending_device_bytes >= LIMIT * 256 * 4);
    release_range(arrays, LIMIT, LIMIT + 1); /* one more than the bound: flush */
    st = queue_stats(ctx);
    assert_int_equal(st.flushes, s0.flushes + 1);
    assert_int_equal(st.pending_count, 0);
    assert_int_equal(st.pending_device_bytes, 0);
    assert_int_equal(st.freed_count, s0.freed_count + LIMIT + 1);
    gm_context_destroy(&ctx);
}

/* defer_cleanup scopes nest and hold every deallocation back until the outermost ends. */
static void test_defer_cleanup_nesting(void **state)
{
    enum { LIMIT = 2, NARR = 6 };
    gm_array *arrays[NARR] = {NULL};
    gm_context *ctx = queue_fixture(LIMIT, arrays, NARR);
    gm_dealloc_stats s0 = queue_stats(ctx), st;

    (void)state;
    assert_ok(gm_defer_cleanup_begin(ctx));
    assert_ok(gm_defer_cleanup_begin(ctx));
    assert_int_equal(queue_stats(ctx).defer_depth, 2);
    release_range(arrays, 0, NARR);
    assert_ok(gm_deallocations_flush(ctx)); /* nothing freed inside the scope */
    st = queue_stats(ctx);
    assert_int_equal(st.pending_count, NARR);
    assert_int_equal(st.flushes, s0.flushes);
    assert_ok(gm_defer_cleanup_end(ctx));
    assert_int_equal(queue_stats(ctx).pending_count, NARR);
    assert_ok(gm_defer_cleanup_end(ctx)); /* depth 0, bound exceeded: flush */
    st = queue_stats(ctx);
    assert_int_equal(st.defer_depth, 0);
    assert_int_equal(st.pending_count, 0);
    assert_int_equal(st.flushes, s0.flushes + 1);
    assert_status(gm_defer_cleanup_end(ctx), GM_ERR_STATE);
    gm_context_destroy(&ctx);
}

/* ------------------------------------------------------ built-in kernels */

/* Launch `k` (add_f32 or add_f64) on a, b of n items of `dtype`; return out on the host. */
static void launch_add(gm_kernel *k, gm_dtype dtype, int64_t n, void *a, void *b, void *out)
{
    gm_ndview av = host_view(a, dtype, 1, &n, GM_ORDER_C);
    gm_ndview bv = host_view(b, dtype, 1, &n, GM_ORDER_C);
    gm_ndview ov = host_view(out, dtype, 1, &n, GM_ORDER_C);
    gm_array *da = upload(&av), *db = upload(&bv), *dout = NULL;

    assert_ok(gm_device_array(g_ctx, 1, &n, dtype, GM_ORDER_C, &dout));
    {
        gm_arg args[] = {gm_arg_array(da), gm_arg_array(db), gm_arg_array(dout), gm_arg_i64(n)};

        assert_ok(gm_launch(k, dim1(blocks_for(n, 96)), dim1(96), 0, NULL, 4, args));
    }
    assert_ok(gm_array_copy_to_host(dout, &ov, NULL));
    gm_array_release(&da);
    gm_array_release(&db);
    gm_array_release(&dout);
}

/* add_f32 and add_f64 against C for n elements. */
static void run_add(gm_kernel *k32, gm_kernel *k64, int64_t n)
{
    double *a = malloc((size_t)n * 8), *b = malloc((size_t)n * 8), *o = malloc((size_t)n * 8);
    float *af = malloc((size_t)n * 4), *bf = malloc((size_t)n * 4), *of = malloc((size_t)n * 4);

    assert_true(a != NULL && b != NULL && o != NULL && af != NULL && bf != NULL && of != NULL);
    for (int64_t i = 0; i < n; i++) {
        a[i] = (double)i / 3.0;
        b[i] = 1.0 / (double)(i + 1);
        af[i] = (float)i * 0.5f;
        bf[i] = (float)(n - i) * 0.25f;
    }
    launch_add(k64, GM_FLOAT64, n, a, b, o);
    launch_add(k32, GM_FLOAT32, n, af, bf, of);
    for (int64_t i = 0; i < n; i++) {
        if (o[i] != a[i] + b[i] || of[i] != af[i] + bf[i])
            fail_msg("add n=%lld at %lld: %g, %g", (long long)n, (long long)i, o[i], of[i]);
    }
    free(a);
    free(b);
    free(o);
    free(af);
    free(bf);
    free(of);
}

/* add_f32 and add_f64 with sizes that are not multiples of the block (96). */
static void test_kernel_add(void **state)
{
    static const int64_t sizes[] = {1, 95, 97, 1000, 4099};
    gm_kernel *k32 = kernel_or_skip("add_f32");
    gm_kernel *k64 = kernel_or_skip("add_f64");

    (void)state;
    for (size_t c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++)
        run_add(k32, k64, sizes[c]);
}

/* fill_f32 / fill_i32 against C. */
static void test_kernel_fill(void **state)
{
    const int64_t n = 1234;
    gm_kernel *kf = kernel_or_skip("fill_f32");
    gm_kernel *ki = kernel_or_skip("fill_i32");
    float f[1234];
    int32_t iv[1234];
    gm_ndview ivv = host_view(iv, GM_INT32, 1, &n, GM_ORDER_C);
    gm_array *df = f32_vector(n, NULL), *di = NULL;

    (void)state;
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_INT32, GM_ORDER_C, &di));
    {
        gm_arg af[] = {gm_arg_array(df), gm_arg_f32(2.5f), gm_arg_i64(n)};
        gm_arg ai[] = {gm_arg_array(di), gm_arg_i32(-7), gm_arg_i64(n)};

        assert_ok(gm_launch(kf, dim1(blocks_for(n, 100)), dim1(100), 0, NULL, 3, af));
        assert_ok(gm_launch(ki, dim1(blocks_for(n, 64)), dim1(64), 0, NULL, 3, ai));
    }
    f32_download(df, f, n);
    assert_ok(gm_array_copy_to_host(di, &ivv, NULL));
    for (int64_t i = 0; i < n; i++) {
        assert_true(f[i] == 2.5f);
        assert_int_equal(iv[i], -7);
    }
    gm_array_release(&df);
    gm_array_release(&di);
}

/*
 * A SmartArray as a kernel argument: out = x + x with x sent once, the result
 * left on the device until the host side is asked for, on a stream.
 */
static void test_kernel_smart_arrays(void **state)
{
    const int64_t n = 777;
    gm_kernel *add = kernel_or_skip("add_f32");
    float x[777];
    gm_ndview xv = host_view(x, GM_FLOAT32, 1, &n, GM_ORDER_C), got;
    gm_smart_array *sx = NULL, *sout = NULL;
    gm_smart_stats st;
    gm_stream *s = NULL;

    (void)state;
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)i - 100.0f;
    assert_ok(gm_stream_create(g_ctx, GM_STREAM_DEFAULT, &s));
    assert_ok(gm_smart_array_from_host(g_ctx, &xv, true, &sx));
    assert_ok(gm_smart_array_create(g_ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, GM_WHERE_HOST, &sout));
    {
        gm_arg args[] = {gm_arg_smart(sx), gm_arg_smart(sx), gm_arg_smart(sout), gm_arg_i64(n)};

        assert_ok(gm_launch(add, dim1(blocks_for(n, 128)), dim1(128), 0, s, 4, args));
        assert_ok(gm_launch(add, dim1(blocks_for(n, 128)), dim1(128), 0, s, 4, args));
    }
    assert_ok(gm_smart_array_get(sout, GM_WHERE_HOST, &got));
    for (int64_t i = 0; i < n; i++)
        assert_true(((const float *)got.data)[i] == 2.0f * x[i]);
    assert_ok(gm_smart_array_stats(sx, &st));
    assert_int_equal(st.to_device, 1);
    assert_ok(gm_smart_array_stats(sout, &st));
    assert_int_equal(st.to_device, 1); /* its (undefined) host side, sent once */
    assert_int_equal(st.to_host, 1);
    gm_smart_array_destroy(&sout);
    gm_smart_array_destroy(&sx);
    gm_stream_destroy(&s);
}

/* copy_strided: a transposed, negatively sliced (5, 7, 3) view packed in C order. */
static void test_kernel_copy_strided(void **state)
{
    const int64_t shape[3] = {3, 7, 10};
    const gm_index_item items[3] = {GM_IDX_ALL, GM_IDX_ALL, GM_IDX_SLICE(GM_NONE, GM_NONE, -2)};
    gm_kernel *k = kernel_or_skip("copy_strided");
    int32_t buf[210];
    gm_ndview hv = host_view(buf, GM_INT32, 3, shape, GM_ORDER_C), hs, ht;
    gm_array *dsrc = NULL, *ddst = NULL;
    gm_ndview sv, tv;
    gm_strided_layout L;

    (void)state;
    fill_pattern(buf, sizeof(buf), 13);
    dsrc = upload(&hv);
    hs = host_getitem(&hv, 3, items);
    assert_ok(gm_ndview_transpose(&hs, &ht)); /* (5, 7, 3) */
    sv = host_getitem(gm_array_view(dsrc), 3, items);
    assert_ok(gm_ndview_transpose(&sv, &tv));
    assert_ok(gm_device_array(g_ctx, 3, ht.shape, GM_INT32, GM_ORDER_C, &ddst));
    memset(&L, 0, sizeof(L));
    L.ndim = 3;
    L.itemsize = 4;
    for (int d = 0; d < 3; d++) {
        L.shape[d] = tv.shape[d];
        L.src_strides[d] = tv.strides[d];
        L.dst_strides[d] = gm_array_view(ddst)->strides[d];
    }
    {
        int64_t n = gm_ndview_size(&tv);
        gm_arg args[] = {gm_arg_array(ddst), gm_arg_view(&tv), gm_arg_bytes(&L, sizeof(L)),
                         gm_arg_i64(n)};

        assert_ok(gm_launch(k, dim1(blocks_for(n, 32)), dim1(32), 0, NULL, 4, args));
    }
    assert_device_equals(ddst, &ht, "copy_strided");
    gm_array_release(&dsrc);
    gm_array_release(&ddst);
}

/* matmul_f32 for one (m, n, k) against a double-precision C reference. */
static void run_matmul(gm_kernel *kern, int32_t m, int32_t n, int32_t k)
{
    int64_t na = (int64_t)m * k, nb = (int64_t)k * n, nc = (int64_t)m * n;
    float *a = malloc((size_t)na * 4), *b = malloc((size_t)nb * 4), *c = malloc((size_t)nc * 4);
    unsigned seed = 7u;
    gm_array *da = NULL, *db = NULL, *dc = NULL;

    assert_true(a != NULL && b != NULL && c != NULL);
    for (int64_t i = 0; i < na; i++)
        a[i] = randf(&seed);
    for (int64_t i = 0; i < nb; i++)
        b[i] = randf(&seed);
    da = f32_vector(na, a);
    db = f32_vector(nb, b);
    dc = f32_vector(nc, NULL);
    {
        gm_arg args[] = {gm_arg_array(da), gm_arg_array(db), gm_arg_array(dc),
                         gm_arg_i32(m),    gm_arg_i32(n),    gm_arg_i32(k)};

        assert_ok(gm_launch(kern, gm_dim3_make(blocks_for(n, 16), blocks_for(m, 16), 1),
                            gm_dim3_make(16, 16, 1), 0, NULL, 6, args));
    }
    f32_download(dc, c, nc);
    for (int64_t i = 0; i < nc; i++) {
        double ref = 0.0;

        for (int32_t l = 0; l < k; l++)
            ref += (double)a[(i / n) * k + l] * b[(int64_t)l * n + i % n];
        if (fabs(c[i] - ref) > 1e-4 * (1.0 + fabs(ref)) * k)
            fail_msg("matmul %dx%dx%d: C[%lld] = %g, expected %g", m, n, k, (long long)i, c[i],
                     ref);
    }
    gm_array_release(&da);
    gm_array_release(&db);
    gm_array_release(&dc);
    free(a);
    free(b);
    free(c);
}

/* matmul_f32 with sizes that are not multiples of the 16x16 tile. */
static void test_kernel_matmul(void **state)
{
    gm_kernel *k = kernel_or_skip("matmul_f32");

    (void)state;
    run_matmul(k, 1, 1, 1);
    run_matmul(k, 17, 33, 9);
    run_matmul(k, 40, 23, 51);
}

/* reduce_sum_f32 in two passes against a double sum. */
static void run_reduce(gm_kernel *k, int64_t n, uint32_t block, uint32_t max_grid)
{
    uint32_t grid = blocks_for(n, block) < max_grid ? blocks_for(n, block) : max_grid;
    float *x = malloc((size_t)n * 4), result = 0.0f;
    double ref = 0.0, mag = 0.0;
    unsigned seed = (unsigned)n;
    gm_array *dx = NULL, *dpart = f32_vector(grid, NULL), *dout = f32_vector(1, NULL);

    assert_non_null(x);
    for (int64_t i = 0; i < n; i++) {
        x[i] = randf(&seed);
        ref += x[i];
        mag += fabs(x[i]);
    }
    dx = f32_vector(n, x);
    {
        gm_arg p1[] = {gm_arg_array(dx), gm_arg_array(dpart), gm_arg_i64(n)};
        gm_arg p2[] = {gm_arg_array(dpart), gm_arg_array(dout), gm_arg_i64(grid)};

        assert_ok(gm_launch(k, dim1(grid), dim1(block), 0, NULL, 3, p1));
        assert_ok(gm_launch(k, dim1(1), dim1(block), 0, NULL, 3, p2));
    }
    f32_download(dout, &result, 1);
    if (fabs(result - ref) > 1e-5 * mag + 1e-6)
        fail_msg("reduce n=%lld block=%u: %.9g, expected %.9g", (long long)n, block, result, ref);
    gm_array_release(&dx);
    gm_array_release(&dpart);
    gm_array_release(&dout);
    free(x);
}

/* reduce_sum_f32 with odd sizes and several block sizes. */
static void test_kernel_reduce(void **state)
{
    gm_kernel *k = kernel_or_skip("reduce_sum_f32");

    (void)state;
    run_reduce(k, 1, 256, 64);
    run_reduce(k, 1001, 256, 64);
    run_reduce(k, 777, 64, 1000);
    run_reduce(k, 40009, 1024, 8);
}

/* transpose_f32 for one shape. */
static void run_transpose(gm_kernel *k, int32_t rows, int32_t cols)
{
    int64_t n = (int64_t)rows * cols;
    float *in = malloc((size_t)n * 4), *out = malloc((size_t)n * 4);
    gm_array *din = NULL, *dout = f32_vector(n, NULL);

    assert_true(in != NULL && out != NULL);
    for (int64_t i = 0; i < n; i++)
        in[i] = (float)i;
    din = f32_vector(n, in);
    {
        gm_arg args[] = {gm_arg_array(din), gm_arg_array(dout), gm_arg_i32(rows), gm_arg_i32(cols)};

        assert_ok(gm_launch(k, gm_dim3_make(blocks_for(cols, 32), blocks_for(rows, 32), 1),
                            gm_dim3_make(32, 8, 1), 0, NULL, 4, args));
    }
    f32_download(dout, out, n);
    for (int64_t i = 0; i < n; i++) {
        if (out[(i % cols) * rows + i / cols] != in[i])
            fail_msg("transpose %dx%d at %lld", rows, cols, (long long)i);
    }
    gm_array_release(&din);
    gm_array_release(&dout);
    free(in);
    free(out);
}

/* transpose_f32 with shapes that are not multiples of the 32x32 tile. */
static void test_kernel_transpose(void **state)
{
    gm_kernel *k = kernel_or_skip("transpose_f32");

    (void)state;
    run_transpose(k, 1, 1);
    run_transpose(k, 33, 65);
    run_transpose(k, 100, 7);
}

/* stencil1d_f32 for one size, radius and block. */
static void run_stencil(gm_kernel *k, int64_t n, int32_t radius, uint32_t block)
{
    float *in = malloc((size_t)n * 4), *out = malloc((size_t)n * 4);
    gm_array *din = NULL, *dout = f32_vector(n, NULL);

    assert_true(in != NULL && out != NULL);
    for (int64_t i = 0; i < n; i++)
        in[i] = (float)(i % 17) - 8.0f;
    din = f32_vector(n, in);
    {
        gm_arg args[] = {gm_arg_array(din), gm_arg_array(dout), gm_arg_i64(n), gm_arg_i32(radius)};

        assert_ok(gm_launch(k, dim1(blocks_for(n, block)), dim1(block),
                            (block + 2u * (uint32_t)radius) * sizeof(float), NULL, 4, args));
    }
    f32_download(dout, out, n);
    for (int64_t i = 0; i < n; i++) {
        float ref = 0.0f;

        for (int64_t j = i - radius; j <= i + radius; j++)
            ref += j >= 0 && j < n ? in[j] : 0.0f;
        if (out[i] != ref)
            fail_msg("stencil n=%lld r=%d at %lld: %g != %g", (long long)n, radius, (long long)i,
                     out[i], ref);
    }
    gm_array_release(&din);
    gm_array_release(&dout);
    free(in);
    free(out);
}

/* stencil1d_f32 with odd sizes, including a halo wider than the block. */
static void test_kernel_stencil(void **state)
{
    gm_kernel *k = kernel_or_skip("stencil1d_f32");

    (void)state;
    run_stencil(k, 1, 0, 64);
    run_stencil(k, 1001, 3, 256);
    run_stencil(k, 77, 40, 32);
}

/* poly_eval_f32 after gm_module_set_constant, twice with different coefficients. */
static void run_poly(gm_kernel *k, const float *coeffs, int32_t degree, int64_t n)
{
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    unsigned seed = 3u;
    gm_array *dx = NULL, *dy = f32_vector(n, NULL);

    assert_true(x != NULL && y != NULL);
    for (int64_t i = 0; i < n; i++)
        x[i] = randf(&seed);
    dx = f32_vector(n, x);
    assert_ok(gm_module_set_constant(gm_kernel_module(k), "gm_poly_coeffs", coeffs,
                                     (size_t)(degree + 1) * sizeof(float)));
    {
        gm_arg args[] = {gm_arg_array(dx), gm_arg_array(dy), gm_arg_i64(n), gm_arg_i32(degree)};

        assert_ok(gm_launch(k, dim1(blocks_for(n, 256)), dim1(256), 0, NULL, 4, args));
    }
    f32_download(dy, y, n);
    for (int64_t i = 0; i < n; i++) {
        float ref = 0.0f;

        for (int32_t d = degree; d >= 0; d--)
            ref = ref * x[i] + coeffs[d];
        if (fabsf(y[i] - ref) > 1e-5f * (1.0f + fabsf(ref)))
            fail_msg("poly degree %d at %lld: %g != %g", degree, (long long)i, y[i], ref);
    }
    gm_array_release(&dx);
    gm_array_release(&dy);
    free(x);
    free(y);
}

/* Constant memory: new coefficients are seen by the next launch; size bound checked. */
static void test_kernel_poly_const(void **state)
{
    static const float c1[] = {1.0f, -2.0f, 0.5f, 3.0f};
    static const float c2[] = {0.25f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f};
    float too_many[17] = {0.0f};
    gm_kernel *k = kernel_or_skip("poly_eval_f32");

    (void)state;
    run_poly(k, c1, 3, 1000);
    run_poly(k, c2, 5, 3333);
    assert_status(
        gm_module_set_constant(gm_kernel_module(k), "gm_poly_coeffs", too_many, sizeof(too_many)),
        GM_ERR_OUT_OF_RANGE);
    assert_status(gm_module_set_constant(gm_kernel_module(k), "no_such_global", c1, sizeof(c1)),
                  GM_ERR_NOT_FOUND);
}

/* Launch errors: arity, zero grid, block too large; then a good launch runs. */
static void test_launch_errors(void **state)
{
    enum { N = 16 };
    const int64_t n = N;
    float x[N];
    float out[N];
    gm_kernel *k = kernel_or_skip("add_f32");
    gm_array *a = NULL;
    gm_array *c = NULL;
    gm_arg args[4];
    gm_device_info info;

    (void)state;
    for (int i = 0; i < N; i++)
        x[i] = (float)i + 0.5f;
    a = f32_vector(n, x);
    c = f32_vector(n, NULL);
    args[0] = gm_arg_array(a);
    args[1] = gm_arg_array(a);
    args[2] = gm_arg_array(c);
    args[3] = gm_arg_i64(n);
    assert_ok(gm_context_device_info(g_ctx, &info));
    assert_status(gm_launch(k, dim1(1), dim1(16), 0, NULL, 3, args), GM_ERR_INVALID_ARG);
    assert_message_contains("add_f32");
    assert_status(gm_launch(k, dim1(0), dim1(16), 0, NULL, 4, args), GM_ERR_INVALID_ARG);
    assert_status(gm_launch(k, dim1(1), dim1(0), 0, NULL, 4, args), GM_ERR_INVALID_ARG);
    assert_status(
        gm_launch(k, dim1(1), dim1((uint32_t)info.max_threads_per_block + 1u), 0, NULL, 4, args),
        GM_ERR_INVALID_ARG);
    /* dynamic shared memory whose sum with the kernel's static shared memory would wrap */
    {
        gm_kernel *reduce = NULL;
        gm_arg rargs[3] = {gm_arg_array(a), gm_arg_array(c), gm_arg_i64(n)};

        assert_ok(gm_kernel_find(g_ctx, "reduce_sum_f32", &reduce));
        assert_status(gm_launch(reduce, dim1(1), dim1(16), SIZE_MAX - 16, NULL, 3, rargs),
                      GM_ERR_INVALID_ARG);
        assert_message_contains("shared memory exceed");
    }
    assert_ok(gm_launch(k, dim1(1), dim1(16), 0, NULL, 4, args));
    f32_download(c, out, n);
    for (int i = 0; i < N; i++)
        assert_float_equal(out[i], 2.0f * x[i], 0.0f);
    gm_array_release(&a);
    gm_array_release(&c);
}

/* ------------------------------------------------------------------ DLPack */

/* The DLPack device type the running backend gives device arrays. */
static int32_t expected_device_type(void)
{
    switch (gm_context_backend(g_ctx)) {
    case GM_BACKEND_CUDA:
        return kDLCUDA;
    case GM_BACKEND_HSA:
        return kDLROCM;
    default:
        return kDLCPU;
    }
}

/* Export a strided device view, check the tensor, import it back, compare. */
static void test_dlpack_round_trip(void **state)
{
    const int64_t shape[2] = {5, 6};
    const gm_index_item items[2] = {GM_IDX_SLICE(GM_NONE, GM_NONE, -1), GM_IDX_SLICE(1, 6, 2)};
    float buf[30];
    gm_ndview hv = host_view(buf, GM_FLOAT32, 2, shape, GM_ORDER_C);
    gm_ndview hs = host_getitem(&hv, 2, items);
    gm_array *a = NULL, *s = NULL, *back = NULL;
    DLManagedTensorVersioned *t = NULL;

    (void)state;
    fill_pattern(buf, sizeof(buf), 19);
    a = upload(&hv);
    assert_ok(gm_array_getitem(a, 2, items, &s));
    assert_ok(gm_array_to_dlpack(s, &t));
    assert_int_equal(t->version.major, 1);
    assert_int_equal(t->dl_tensor.device.device_type, expected_device_type());
    assert_int_equal(t->dl_tensor.device.device_id, 0);
    assert_int_equal(t->dl_tensor.ndim, 2);
    assert_int_equal(t->dl_tensor.shape[0], 5);
    assert_int_equal(t->dl_tensor.shape[1], 3);
    assert_int_equal(t->dl_tensor.strides[0], -6);
    assert_int_equal(t->dl_tensor.strides[1], 2);
    assert_int_equal(t->dl_tensor.dtype.code, kDLFloat);
    assert_int_equal(t->dl_tensor.dtype.bits, 32);
    gm_array_release(&s);
    gm_array_release(&a); /* the tensor keeps the buffer alive */
    assert_ok(gm_array_from_dlpack(g_ctx, t, &back));
    assert_int_equal(gm_array_view(back)->memory, GM_MEMORY_DEVICE);
    assert_device_equals(back, &hs, "DLPack round trip");
    gm_array_release(&back); /* calls the tensor's deleter */
}

/* ---------------------------------------------------------------- SmartArray */

/* Lazy transfers: each side moves only when stale, and the counts say so. */
static void test_smart_array(void **state)
{
    const int64_t n = 300;
    int32_t buf[300], want[300];
    gm_ndview hv = host_view(buf, GM_INT32, 1, &n, GM_ORDER_C);
    gm_ndview wv = host_view(want, GM_INT32, 1, &n, GM_ORDER_C);
    gm_smart_array *sa = NULL;
    gm_smart_stats st;
    gm_ndview dv, back;
    gm_array *wrap = NULL;

    (void)state;
    fill_pattern(buf, sizeof(buf), 23);
    assert_ok(gm_smart_array_from_host(g_ctx, &hv, true, &sa));
    assert_ok(gm_smart_array_stats(sa, &st));
    assert_true(st.host_valid && !st.device_allocated && st.to_device == 0);
    assert_ok(gm_smart_array_get(sa, GM_WHERE_DEVICE, &dv));
    assert_ok(gm_smart_array_get(sa, GM_WHERE_DEVICE, &dv));
    assert_ok(gm_smart_array_stats(sa, &st));
    assert_int_equal(st.to_device, 1);
    assert_int_equal(st.to_host, 0);
    /* write the device side, mark it, read the host side once */
    assert_ok(gm_array_from_foreign(g_ctx, &dv, NULL, NULL, NULL, &wrap));
    assert_ok(gm_array_memset(wrap, 0x5c, NULL));
    gm_array_release(&wrap);
    assert_ok(gm_smart_array_mark_changed(sa, GM_WHERE_DEVICE));
    assert_ok(gm_smart_array_get(sa, GM_WHERE_HOST, &back));
    assert_ok(gm_smart_array_get(sa, GM_WHERE_HOST, &back));
    assert_ok(gm_smart_array_stats(sa, &st));
    assert_int_equal(st.to_device, 1);
    assert_int_equal(st.to_host, 1);
    assert_true(st.host_valid && st.device_valid);
    memset(want, 0x5c, sizeof(want));
    assert_views_equal(&back, &wv, "smart array host side");
    gm_smart_array_destroy(&sa);
    assert_null(sa);
}

/* ------------------------------------------------------------- error cases */

/* Shape and dtype mismatches name both sides. */
static void test_mismatch_messages(void **state)
{
    const int64_t s34[2] = {3, 4}, s43[2] = {4, 3};
    float fbuf[12];
    int32_t ibuf[12];
    gm_ndview h43 = host_view(fbuf, GM_FLOAT32, 2, s43, GM_ORDER_C);
    gm_ndview hi = host_view(ibuf, GM_INT32, 2, s34, GM_ORDER_C);
    gm_array *a = NULL;

    (void)state;
    assert_ok(gm_device_array(g_ctx, 2, s34, GM_FLOAT32, GM_ORDER_C, &a));
    assert_status(gm_array_copy_to_host(a, &h43, NULL), GM_ERR_SHAPE_MISMATCH);
    assert_message_contains("(3, 4)");
    assert_message_contains("(4, 3)");
    assert_status(gm_array_copy_to_device(a, &h43, NULL), GM_ERR_SHAPE_MISMATCH);
    assert_status(gm_copy(g_ctx, gm_array_view(a), &hi, NULL), GM_ERR_DTYPE);
    assert_message_contains("float32");
    assert_message_contains("int32");
    gm_array_release(&a);
}

/* Streams and events of another context are rejected. */
static void test_wrong_context(void **state)
{
    const int64_t n = 8;
    float buf[8] = {0};
    gm_ndview hv = host_view(buf, GM_FLOAT32, 1, &n, GM_ORDER_C);
    gm_context *other = context_with_count_limit(10);
    gm_stream *s = NULL;
    gm_event *e0 = NULL, *e1 = NULL;
    gm_array *a = NULL;
    float ms = 0.0f;

    (void)state;
    assert_ok(gm_stream_create(other, GM_STREAM_DEFAULT, &s));
    assert_ok(gm_event_create(g_ctx, true, &e0));
    assert_ok(gm_event_create(other, true, &e1));
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &a));
    assert_status(gm_copy(g_ctx, gm_array_view(a), &hv, s), GM_ERR_WRONG_CONTEXT);
    assert_status(gm_to_device(g_ctx, &hv, s, &a), GM_ERR_WRONG_CONTEXT);
    assert_non_null(a); /* outputs are written only on success */
    assert_ok(gm_event_record(e0, NULL));
    assert_ok(gm_event_record(e1, NULL));
    assert_ok(gm_event_synchronize(e0));
    assert_ok(gm_event_synchronize(e1));
    assert_status(gm_event_elapsed_ms(e0, e1, &ms), GM_ERR_WRONG_CONTEXT);
    gm_array_release(&a);
    gm_event_destroy(&e0);
    gm_event_destroy(&e1);
    gm_stream_destroy(&s);
    gm_context_destroy(&other);
}

/* -------------------------------------------------------------------- IPC */

enum { IPC_N = 1024, IPC_SKIP = 16 }; /* the shared view is elements [IPC_SKIP, IPC_N) */

extern char **environ;

static int32_t ipc_value(int64_t i)
{
    return (int32_t)(3 * i + 1);
}

/*
 * The other process (this program run again with GM_TEST_IPC_CHILD set to
 * the handle in hex): open the handle on its own context with the exporter's
 * descriptor (shape, dtype and offset: elements [IPC_SKIP, IPC_N) of the
 * allocation), check the exporter's data through it, then fill it with 7.
 */
static int ipc_child(const char *hex)
{
    gm_ipc_handle h;
    unsigned char *raw = (unsigned char *)&h;
    int32_t got[IPC_N - IPC_SKIP];
    int64_t n = IPC_N - IPC_SKIP;
    const int32_t seven = 7;
    gm_ndview layout;
    gm_ndview out;
    gm_context *ctx = NULL;
    gm_array *a = NULL;
    gm_status st = GM_OK;

    if (strlen(hex) != 2 * sizeof(h))
        return 2;
    for (size_t i = 0; i < sizeof(h); i++) {
        if (sscanf(hex + 2 * i, "%2hhx", &raw[i]) != 1)
            return 2;
    }
    st = gm_context_create(NULL, &ctx);
    if (st == GM_OK) /* the exporter's descriptor: its data is ignored, its offset kept */
        st = gm_ndview_init(NULL, GM_INT32, 1, &n, NULL, GM_ORDER_C, &layout);
    layout.offset = IPC_SKIP * (int64_t)sizeof(int32_t);
    if (st == GM_OK)
        st = gm_ndview_init(got, GM_INT32, 1, &n, NULL, GM_ORDER_C, &out);
    if (st == GM_OK)
        st = gm_array_from_ipc_handle(ctx, &h, &layout, &a);
    if (st == GM_OK)
        st = gm_copy(ctx, &out, gm_array_view(a), NULL);
    for (int64_t i = 0; st == GM_OK && i < n; i++) {
        if (got[i] != ipc_value(i + IPC_SKIP)) {
            fprintf(stderr, "ipc child: element %lld is %d, the exporter wrote %d\n", (long long)i,
                    got[i], ipc_value(i + IPC_SKIP));
            st = GM_ERR_INTERNAL;
        }
    }
    if (st == GM_OK)
        st = gm_array_fill(a, &seven, NULL);
    if (st != GM_OK)
        fprintf(stderr, "ipc child: %s: %s\n", gm_status_name(st), gm_last_error_message());
    gm_array_release(&a);
    gm_context_destroy(&ctx);
    return st == GM_OK ? 0 : 1;
}

/*
 * Numba's get_ipc_handle / IpcHandle.open across two processes: a view at an
 * offset into a device allocation is exported, opened by another process,
 * read and overwritten there; the exporter sees the new data in that view
 * only. Skipped where IPC does not exist (the host simulator) and on the
 * driver test doubles, whose handles do not cross processes.
 */
static void test_ipc_other_process(void **state)
{
    int32_t host[IPC_N];
    int64_t n = IPC_N;
    gm_index_item tail[1] = {GM_IDX_SLICE(IPC_SKIP, GM_NONE, 1)};
    char hex[2 * sizeof(gm_ipc_handle) + 1];
    char *argv[] = {"/proc/self/exe", NULL};
    gm_ndview hv;
    gm_ipc_handle h;
    gm_array *a = NULL;
    gm_array *v = NULL;
    gm_status st = GM_OK;
    pid_t pid = 0;
    int wstatus = 0;

    (void)state;
    for (int64_t i = 0; i < n; i++)
        host[i] = ipc_value(i);
    hv = host_view(host, GM_INT32, 1, &n, GM_ORDER_C);
    a = upload(&hv);
    assert_ok(gm_array_getitem(a, 1, tail, &v));
    st = gm_array_ipc_handle(v, &h);
    assert_int_equal(gm_array_view(v)->offset, IPC_SKIP * (int64_t)sizeof(int32_t));
    if (st == GM_OK) { /* data minus the allocation's start: 0 for a fresh array's views */
        assert_int_equal(h.offset, 0);
        assert_true(h.bytes >= IPC_N * (int64_t)sizeof(int32_t));
        assert_int_equal(h.backend, gm_context_backend(g_ctx));
    }
    /* The simulator has no IPC; a GPU backend refusing it fails the case. */
    if ((st == GM_ERR_UNSUPPORTED && gm_context_backend(g_ctx) == GM_BACKEND_HOST) ||
        on_test_double()) {
        print_message("[  SKIPPED ] no IPC across processes on backend %s%s: %s\n", backend_name(),
                      on_test_double() ? " (test double)" : "", gm_status_name(st));
        gm_array_release(&v);
        gm_array_release(&a);
        skip();
    }
    assert_ok(st);
    for (size_t i = 0; i < sizeof(h); i++)
        snprintf(hex + 2 * i, 3, "%02x", ((const unsigned char *)&h)[i]);
    assert_int_equal(setenv("GM_TEST_IPC_CHILD", hex, 1), 0);
    assert_int_equal(posix_spawn(&pid, argv[0], NULL, NULL, argv, environ), 0);
    unsetenv("GM_TEST_IPC_CHILD");
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus));
    assert_int_equal(WEXITSTATUS(wstatus), 0);
    assert_ok(gm_copy(g_ctx, &hv, gm_array_view(a), NULL));
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(host[i], i < IPC_SKIP ? ipc_value(i) : 7);
    gm_array_release(&v);
    gm_array_release(&a);
}

/* ------------------------------------------------------------------- main */

/* Create the context; 77 (skip) when the backend has no driver or device. */
static int open_context(void)
{
    gm_status st = gm_context_create(NULL, &g_ctx);
    const char *env = getenv("GM_BACKEND");

    if (st == GM_ERR_NO_DRIVER || st == GM_ERR_NO_DEVICE) {
        printf("conformance skipped: backend %s cannot run here: %s: %s\n",
               env != NULL ? env : "(build default)", gm_status_name(st), gm_last_error_message());
        return SKIP_EXIT;
    }
    if (st != GM_OK) {
        fprintf(stderr, "gm_context_create: %s: %s\n", gm_status_name(st), gm_last_error_message());
        return 1;
    }
    printf("conformance on backend %s (GM_BACKEND=%s)\n", backend_name(),
           env != NULL ? env : "unset");
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_array_layouts),
        cmocka_unit_test(test_device_array_strided),
        cmocka_unit_test(test_to_device_layouts),
        cmocka_unit_test(test_copy_to_host_strided),
        cmocka_unit_test(test_copy_to_host_new),
        cmocka_unit_test(test_copy_to_device),
        cmocka_unit_test(test_device_to_device_views),
        cmocka_unit_test(test_views_share_buffer),
        cmocka_unit_test(test_write_through_view),
        cmocka_unit_test(test_fill_itemsizes),
        cmocka_unit_test(test_fill_unaligned),
        cmocka_unit_test(test_memset),
        cmocka_unit_test(test_pinned_and_mapped),
        cmocka_unit_test(test_mapped_kernel_write),
        cmocka_unit_test(test_host_scopes),
        cmocka_unit_test(test_pointer_kinds),
        cmocka_unit_test(test_stream_copy_ordering),
        cmocka_unit_test(test_stream_kernel_ordering),
        cmocka_unit_test(test_two_streams_event),
        cmocka_unit_test(test_stream_callbacks),
        cmocka_unit_test(test_no_waiting_inside_callbacks),
        cmocka_unit_test(test_auto_synchronize),
        cmocka_unit_test(test_builtin_streams),
        cmocka_unit_test(test_per_thread_stream_outlives_thread),
        cmocka_unit_test(test_per_thread_stream_context_gone_first),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_deallocation_count_limit),
        cmocka_unit_test(test_defer_cleanup_nesting),
        cmocka_unit_test(test_kernel_add),
        cmocka_unit_test(test_kernel_fill),
        cmocka_unit_test(test_kernel_smart_arrays),
        cmocka_unit_test(test_kernel_copy_strided),
        cmocka_unit_test(test_kernel_matmul),
        cmocka_unit_test(test_kernel_reduce),
        cmocka_unit_test(test_kernel_transpose),
        cmocka_unit_test(test_kernel_stencil),
        cmocka_unit_test(test_kernel_poly_const),
        cmocka_unit_test(test_launch_errors),
        cmocka_unit_test(test_dlpack_round_trip),
        cmocka_unit_test(test_smart_array),
        cmocka_unit_test(test_mismatch_messages),
        cmocka_unit_test(test_wrong_context),
        cmocka_unit_test(test_memory_manager_base),
        cmocka_unit_test(test_ipc_other_process),
    };
    const char *ipc = getenv("GM_TEST_IPC_CHILD");
    int rc = ipc != NULL ? ipc_child(ipc) : open_context();

    if (ipc != NULL || rc != 0)
        return rc;
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    gm_context_destroy(&g_ctx);
    return rc;
}
