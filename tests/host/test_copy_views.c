/*
 * Tests for the simulator's synchronous strided copies (src/core/copy.c,
 * step 1b; the copy_views op, host_copy_views in src/host/host_backend.c):
 * on a context of the host backend, a copy with a device side that is not
 * one dense range goes without a stream straight to the host engine on its
 * views instead of through pitched ops->copy pieces or ops->copy_strided.
 *
 * Each copy here runs on such a context (the fast path) and on a
 * fault-injection context, whose ops table is a copy of the host backend's
 * with copy_views set to the shared stub, and so takes the pitched plan (the
 * general path): random layouts (packed
 * in any axis order, spaced out, reversed, broadcast sources, extent-1 and
 * empty axes) between pageable, pinned, mapped, device and managed memory,
 * through gm_copy and the array calls, without and with a stream, every
 * byte of each destination region compared with an element-by-element
 * reference loop, and statuses and messages (addresses masked) compared
 * between the two contexts, device views outside the context's memory
 * included. A synchronous strided copy waits for the work queued on a
 * blocking stream before it (the barrier the pitched path has).
 */
#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt_helpers.h"
#include "rt_layout.h"

#define MAXD    4
#define N_CASES 2500

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

/* A context of the host backend's own ops table (the fast path). */
static gm_context *host_ctx(void)
{
    gm_context_options options;
    gm_context *ctx = NULL;

    gm_context_options_default(&options);
    options.backend = GM_BACKEND_HOST;
    assert_ok(gm_context_create(&options, &ctx));
    return ctx;
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

/* ------------------------------------------------------- random layouts */

static uint64_t rng = 0x2545F4914F6CDD1Du;

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

/* ---------------------------------------------------------- comparisons */

/* The last error message with every hexadecimal address replaced by "@". */
static void masked_message(char *out, size_t size)
{
    const char *m = gm_last_error_message();
    size_t n = 0;

    while (*m != '\0' && n + 1 < size) {
        if (m[0] == '0' && m[1] == 'x') {
            m += 2;
            while (isxdigit((unsigned char)*m))
                m++;
            out[n++] = '@';
        } else {
            out[n++] = *m++;
        }
    }
    out[n] = '\0';
}

/* Nonempty copies that succeeded (on either context). */
static int64_t copied;

/* What a copy did: its status, its message (masked) and the destination region after it. */
typedef struct outcome {
    gm_status status;
    char message[512];
    unsigned char *bytes;
} outcome;

/*
 * A copy between two layouts over regions of the given kinds on ctx, the
 * source region patterned and the destination region cleared first: through
 * gm_copy, or (`array`) the array calls with a contiguous device array as
 * one side (the other a host-side view). On success, every byte of the
 * destination region is checked against the reference loop.
 */
static outcome run_copy(gm_context *ctx, gm_dtype dtype, int ndim, const int64_t *shape,
                        const layout *dl, kind dk, const layout *sl, kind sk, bool array,
                        bool use_stream)
{
    int64_t k = (int64_t)gm_dtype_itemsize(dtype), size = 1;
    region dr, sr;
    gm_ndview dst, src;
    gm_array *dev = NULL;
    gm_stream *st = NULL;
    unsigned char *want = NULL, none[2] = {0, 0};
    outcome out;

    for (int i = 0; i < ndim; i++)
        size *= shape[i];
    if (use_stream)
        assert_ok(gm_stream_create(ctx, 0, &st));
    if (array) { /* the device side is a whole array: its own region */
        assert_ok(gm_device_array(ctx, ndim, shape, dtype, GM_ORDER_C, &dev));
        if (dk == DEVICE) {
            dr = (region){gm_array_view(dev)->data, (size_t)(size * k > 0 ? size * k : 1), NULL};
            sr = region_new(ctx, sk, sl->bytes);
            dst = *gm_array_view(dev);
            src = view_in(&sr, dtype, ndim, shape, sl->strides, sl->offset);
        } else {
            sr = (region){gm_array_view(dev)->data, (size_t)(size * k > 0 ? size * k : 1), NULL};
            dr = region_new(ctx, dk, dl->bytes);
            src = *gm_array_view(dev);
            dst = view_in(&dr, dtype, ndim, shape, dl->strides, dl->offset);
        }
    } else {
        dr = region_new(ctx, dk, dl->bytes);
        sr = region_new(ctx, sk, sl->bytes);
        dst = view_in(&dr, dtype, ndim, shape, dl->strides, dl->offset);
        src = view_in(&sr, dtype, ndim, shape, sl->strides, sl->offset);
    }
    if (dr.base == NULL) /* an empty array's data */
        dr.base = &none[0];
    if (sr.base == NULL)
        sr.base = &none[1];
    for (size_t i = 0; i < sr.bytes && size > 0; i++)
        sr.base[i] = (unsigned char)(i * 7 + 1);
    memset(dr.base, 0xEE, dr.bytes);
    want = malloc(dr.bytes);
    out.bytes = malloc(dr.bytes);
    assert_true(want != NULL && out.bytes != NULL);
    memcpy(want, dr.base, dr.bytes);
    for (int64_t e = 0; e < size; e++) { /* the layouts stay inside their regions */
        assert_true(elem(&dst, e) >= dr.base && elem(&dst, e) + k <= dr.base + dr.bytes);
        assert_true(elem(&src, e) >= sr.base && elem(&src, e) + k <= sr.base + sr.bytes);
        memcpy(want + (elem(&dst, e) - dr.base), elem(&src, e), (size_t)k);
    }
    if (!array)
        out.status = gm_copy(ctx, &dst, &src, st);
    else if (dk == DEVICE)
        out.status = gm_array_copy_to_device(dev, &src, st);
    else
        out.status = gm_array_copy_to_host(dev, &dst, st);
    masked_message(out.message, sizeof out.message);
    if (st != NULL) {
        assert_ok(gm_stream_synchronize(st));
        gm_stream_destroy(&st);
    }
    memcpy(out.bytes, dr.base, dr.bytes);
    if (out.status == GM_OK)
        assert_memory_equal(out.bytes, want, dr.bytes);
    copied += out.status == GM_OK && size > 0;
    free(want);
    if (array) { /* the array's region is the array */
        if (dk == DEVICE)
            region_free(&sr);
        else
            region_free(&dr);
        gm_array_release(&dev);
    } else {
        region_free(&dr);
        region_free(&sr);
    }
    return out;
}

/* The same copy on the fast path's context and the general path's: the same outcome. */
static void run_both(gm_context *fast, gm_context *general, gm_dtype dtype, int ndim,
                     const int64_t *shape, const layout *dl, kind dk, const layout *sl, kind sk,
                     bool array, bool use_stream)
{
    outcome a = run_copy(fast, dtype, ndim, shape, dl, dk, sl, sk, array, use_stream);
    outcome b = run_copy(general, dtype, ndim, shape, dl, dk, sl, sk, array, use_stream);

    assert_int_equal(a.status, b.status);
    if (a.status != GM_OK)
        assert_string_equal(a.message, b.message);
    free(a.bytes);
    free(b.bytes);
}

/* ------------------------------------------------------------------ tests */

/*
 * Random layouts in every direction between every kind of memory (a device
 * side in most), through gm_copy, a fifth on a stream: the reference's
 * bytes, and the general path's outcome.
 */
static void test_random_views(void **state)
{
    const gm_dtype dtypes[] = {
        GM_UINT8, GM_INT16, GM_FLOAT32, GM_FLOAT64, GM_COMPLEX128, {GM_DTYPE_FLOAT, 32, 3},
    };
    gm_context *fast = host_ctx(), *general = rt_fault_ctx();
    int device_sided = 0, strided = 0;
    int64_t before = copied;

    (void)state;
    for (int c = 0; c < N_CASES; c++) {
        int ndim = (int)pick(MAXD + 1);
        gm_dtype dtype = dtypes[pick(sizeof dtypes / sizeof dtypes[0])];
        int64_t k = (int64_t)gm_dtype_itemsize(dtype), shape[MAXD];
        kind dk = (kind)pick(NKINDS), sk = (kind)pick(NKINDS);
        bool dst_gaps = pick(2) == 0;
        layout dl, sl;

        if (pick(4) != 0 && dk < DEVICE && sk < DEVICE) /* mostly a device side */
            dk = pick(2) == 0 ? DEVICE : MANAGED;
        for (int i = 0; i < ndim; i++)
            shape[i] = pick(20) == 0 ? 0 : 1 + pick(5);
        random_layout(ndim, shape, k, dst_gaps, false, &dl);
        random_layout(ndim, shape, k, !dst_gaps || pick(2) == 0, true, &sl);
        device_sided += dk >= DEVICE || sk >= DEVICE;
        strided += dst_gaps;
        run_both(fast, general, dtype, ndim, shape, &dl, dk, &sl, sk, false, pick(5) == 0);
    }
    assert_true(device_sided > N_CASES / 2 && strided > N_CASES / 3);
    assert_true(copied - before > N_CASES); /* most of both contexts' copies */
    gm_context_destroy(&general);
    gm_context_destroy(&fast);
}

/*
 * The array calls between a contiguous device array and a random host-side
 * layout (pageable, pinned or mapped), both ways, with and without a stream;
 * then the benchmark's case, a[::2] of float32, at sizes around the
 * engine's unrolling, reversed too.
 */
static void test_array_calls(void **state)
{
    gm_context *fast = host_ctx(), *general = rt_fault_ctx();
    int64_t before = copied;

    (void)state;
    for (int c = 0; c < N_CASES / 2; c++) {
        int ndim = 1 + (int)pick(MAXD);
        int64_t shape[MAXD];
        kind hk = (kind)pick(DEVICE); /* a host-side kind */
        bool h2d = pick(2) == 0;
        layout hl, dl = {{0}, 0, 0};

        for (int i = 0; i < ndim; i++)
            shape[i] = pick(20) == 0 ? 0 : 1 + pick(6);
        random_layout(ndim, shape, 4, pick(3) != 0, h2d, &hl);
        run_both(fast, general, GM_FLOAT32, ndim, shape, h2d ? &dl : &hl, h2d ? DEVICE : hk,
                 h2d ? &hl : &dl, h2d ? hk : DEVICE, true, pick(4) == 0);
    }
    assert_true(copied - before > N_CASES / 2); /* most of both contexts' copies */
    for (int64_t n = 0; n <= 1030; n += n < 40 ? 1 : 331) {
        for (int way = 0; way < 8; way++) {
            int64_t shape[1] = {n};
            layout hl = {{(way & 4) ? -8 : 8}, (way & 4) && n > 0 ? 8 * (n - 1) : 0, 8 * n + 4};
            layout dl = {{0}, 0, 0};
            kind hk = (way & 2) ? PINNED : PAGEABLE;
            bool h2d = (way & 1) != 0;

            run_both(fast, general, GM_FLOAT32, 1, shape, h2d ? &dl : &hl, h2d ? DEVICE : hk,
                     h2d ? &hl : &dl, h2d ? hk : DEVICE, true, false);
            run_both(fast, general, GM_FLOAT32, 1, shape, h2d ? &dl : &hl, h2d ? DEVICE : hk,
                     h2d ? &hl : &dl, h2d ? hk : DEVICE, true, true);
        }
    }
    gm_context_destroy(&general);
    gm_context_destroy(&fast);
}

/*
 * A device-side view outside the context's memory (host memory labelled
 * device, past the end of an array, a released array), as destination or
 * source, one pitched piece or several: the general path's statuses and
 * messages, which name the op that found it (copy or copy_strided).
 */
static void test_outside_memory(void **state)
{
    gm_context *ctxs[2] = {host_ctx(), rt_fault_ctx()};
    char messages[2][3][6][512];
    gm_status statuses[2][3][6];

    (void)state;
    for (int x = 0; x < 2; x++) {
        gm_context *ctx = ctxs[x];
        float *host = calloc(64, sizeof(float)), *other = calloc(64, sizeof(float));
        int64_t n32 = 32, n64 = 64;
        gm_array *dev = NULL, *gone = NULL;

        assert_true(host != NULL && other != NULL);
        assert_ok(gm_device_array(ctx, 1, &n32, GM_FLOAT32, GM_ORDER_C, &dev));
        assert_ok(gm_device_array(ctx, 1, &n64, GM_FLOAT32, GM_ORDER_C, &gone));
        for (int w = 0; w < 3; w++) {
            gm_ndview bad = *gm_array_view(dev), good;
            /* layouts of 16 items: one piece; reversed against forward; 2-D, several pieces */
            const int64_t strides[6][2] = {{8, 0}, {-8, 0}, {32, 4}, {8, 0}, {4, 0}, {32, 8}};
            const int64_t shapes[6][2] = {{16, 1}, {16, 1}, {4, 4}, {16, 1}, {16, 1}, {4, 4}};

            if (w == 0) { /* host memory labelled device */
                bad.data = host;
            } else if (w == 2) { /* a released array */
                bad = *gm_array_view(gone);
                if (gone != NULL) {
                    gm_array_release(&gone);
                    assert_ok(gm_deallocations_flush(ctx));
                }
            }
            for (int c = 0; c < 6; c++) {
                gm_ndview *d = c < 3 ? &bad : &good, *s = c < 3 ? &good : &bad;
                int nd = shapes[c][1] == 1 ? 1 : 2;

                assert_ok(
                    gm_ndview_init(other, GM_FLOAT32, nd, shapes[c], NULL, GM_ORDER_C, &good));
                bad.ndim = nd;
                for (int i = 0; i < nd; i++) {
                    bad.shape[i] = shapes[c][i];
                    bad.strides[i] = strides[c][i];
                }
                /* w == 1: reaching past the array's 128 bytes (by a stride of 16 bytes) */
                bad.offset = w == 1 ? 16 * 4 : 0;
                if (strides[c][0] < 0)
                    bad.offset += 8 * 15;
                if (w == 1 && c % 3 != 1)
                    bad.strides[nd - 1] *= 2;
                if (w == 1 && c % 3 == 1)
                    bad.offset += 64;
                statuses[x][w][c] = gm_copy(ctx, d, s, NULL);
                masked_message(messages[x][w][c], sizeof messages[x][w][c]);
            }
        }
        gm_array_release(&dev);
        free(host);
        free(other);
    }
    for (int w = 0; w < 3; w++) {
        for (int c = 0; c < 6; c++) {
            if (statuses[0][w][c] != GM_ERR_INVALID_ARG || statuses[1][w][c] != GM_ERR_INVALID_ARG)
                print_message("w %d c %d: %s\n", w, c, messages[0][w][c]);
            assert_int_equal(statuses[0][w][c], GM_ERR_INVALID_ARG);
            assert_int_equal(statuses[1][w][c], GM_ERR_INVALID_ARG);
            assert_string_equal(messages[0][w][c], messages[1][w][c]);
            assert_non_null(strstr(messages[0][w][c], "is not inside device"));
        }
    }
    /* one piece is an ops->copy; a reversed side against a forward one, the strided op */
    assert_non_null(strstr(messages[0][0][0], "gm_copy: copy: destination range"));
    assert_non_null(strstr(messages[0][0][1], "gm_copy: copy_strided: destination range"));
    assert_non_null(strstr(messages[0][0][3], "gm_copy: copy: source range"));
    gm_context_destroy(&ctxs[1]);
    gm_context_destroy(&ctxs[0]);
}

/* A callback that sleeps, then fills a device array with 7.0f. */
static void late_fill(gm_stream *stream, gm_status status, void *user)
{
    const gm_ndview *v = user;
    struct timespec pause = {0, 30 * 1000 * 1000};

    (void)stream;
    (void)status;
    nanosleep(&pause, NULL);
    for (int64_t i = 0; i < v->shape[0]; i++)
        ((float *)v->data)[i] = 7.0f;
}

/*
 * A synchronous strided copy waits for the work queued on a blocking stream
 * before it, as the legacy stream would: from the device, it reads what a
 * late callback wrote; to the device, the callback's write comes first.
 */
static void test_waits_for_streams(void **state)
{
    gm_context *ctx = host_ctx();
    int64_t n = 256, step = 8;
    float *host = calloc(2 * (size_t)n, sizeof(float));
    gm_array *dev = NULL;
    gm_stream *st = NULL;
    gm_ndview every_other;

    (void)state;
    assert_non_null(host);
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &dev));
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 1, &n, &step, GM_ORDER_C, &every_other));
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_array_memset(dev, 0, NULL));
    assert_ok(gm_stream_add_callback(st, late_fill, (void *)gm_array_view(dev)));
    assert_ok(gm_array_copy_to_host(dev, &every_other, NULL));
    for (int64_t i = 0; i < n; i++)
        assert_true(host[2 * i] == 7.0f && host[2 * i + 1] == 0.0f);
    for (int64_t i = 0; i < n; i++)
        host[2 * i] = (float)i;
    assert_ok(gm_stream_add_callback(st, late_fill, (void *)gm_array_view(dev)));
    assert_ok(gm_array_copy_to_device(dev, &every_other, NULL));
    assert_ok(gm_stream_synchronize(st));
    for (int64_t i = 0; i < n; i++)
        assert_true(((const float *)gm_array_view(dev)->data)[i] == (float)i);
    gm_stream_destroy(&st);
    gm_array_release(&dev);
    free(host);
    gm_context_destroy(&ctx);
}

/* ------------------------------------------------------- the op's wiring */

/* The host backend's ops table with copy_views and copy counted. */
static gm_backend_ops routed_ops;
static _Atomic int views_asked, views_taken, pitched_copies;

static bool counted_copy_views(gm_backend_ctx *bctx, const gm_ndview *dst, const gm_ndview *src,
                               gm_status *status_p)
{
    bool taken = gm__host_backend.copy_views(bctx, dst, src, status_p);

    atomic_fetch_add(&views_asked, 1);
    atomic_fetch_add(&views_taken, taken ? 1 : 0);
    return taken;
}

static gm_status counted_copy(gm_backend_ctx *bctx, const gm_copy_desc *desc,
                              gm_backend_stream *stream)
{
    atomic_fetch_add(&pitched_copies, 1);
    return gm__host_backend.copy(bctx, desc, stream);
}

/*
 * The core hands a synchronous strided copy with a device side to the
 * backend's copy_views and issues no pitched piece when it is taken; with a
 * stream, or for a dense pair, it does not ask; when the op declines (a
 * device view outside the context's memory) the planned path runs and
 * explains.
 */
static void test_routed_through_op(void **state)
{
    float host[128], back[128];
    int64_t n = 64, every_other = 2 * (int64_t)sizeof(float);
    gm_context_options options;
    gm_context *ctx = NULL;
    gm_array *dev = NULL;
    gm_stream *stream = NULL;
    gm_ndview strided, dense, fake;

    (void)state;
    routed_ops = gm__host_backend;
    routed_ops.name = "host (copy_views counted)";
    routed_ops.copy_views = counted_copy_views;
    routed_ops.copy = counted_copy;
    gm_context_options_default(&options);
    assert_ok(gm__context_create_with_ops(&routed_ops, &options, &ctx));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &dev));
    for (int i = 0; i < 128; i++)
        host[i] = (float)i;
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 1, &n, &every_other, GM_ORDER_C, &strided));

    /* synchronous, strided host side: taken, no pitched piece */
    assert_ok(gm_copy(ctx, gm_array_view(dev), &strided, NULL));
    assert_int_equal(atomic_load(&views_asked), 1);
    assert_int_equal(atomic_load(&views_taken), 1);
    assert_int_equal(atomic_load(&pitched_copies), 0);
    assert_ok(gm_ndview_init(back, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &dense));
    assert_ok(gm_copy(ctx, &dense, gm_array_view(dev), NULL)); /* dense: one pitched copy */
    assert_int_equal(atomic_load(&views_asked), 1);
    assert_int_equal(atomic_load(&pitched_copies), 1);
    for (int i = 0; i < 64; i++)
        assert_true(back[i] == (float)(2 * i));

    /* with a stream: not asked (stream order is the backend's copy ops') */
    assert_ok(gm_stream_create(ctx, 0, &stream));
    assert_ok(gm_copy(ctx, &strided, gm_array_view(dev), stream));
    assert_ok(gm_stream_synchronize(stream));
    assert_int_equal(atomic_load(&views_asked), 1);
    assert_true(atomic_load(&pitched_copies) > 1);
    gm_stream_destroy(&stream);

    /* declined: host memory labelled device; the planned path's error */
    fake = strided;
    fake.memory = GM_MEMORY_DEVICE;
    fake.device_id = 0;
    assert_status(gm_copy(ctx, &fake, &dense, NULL), GM_ERR_INVALID_ARG);
    assert_message_contains("is not inside device");
    assert_int_equal(atomic_load(&views_asked), 2);
    assert_int_equal(atomic_load(&views_taken), 1);

    gm_array_release(&dev);
    gm_context_destroy(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_random_views, test_setup),
        cmocka_unit_test_setup(test_array_calls, test_setup),
        cmocka_unit_test_setup(test_outside_memory, test_setup),
        cmocka_unit_test_setup(test_waits_for_streams, test_setup),
        cmocka_unit_test_setup(test_routed_through_op, test_setup),
    };

    return cmocka_run_group_tests(tests, group_setup, NULL);
}
