/*
 * Stateful libFuzzer target for the public runtime API on the host backend:
 * arrays and their views, copies, fills, reference counting, the
 * deallocation queue and streams.
 *
 * The input's first bytes set the queue's bounds (count, device bytes,
 * pinned bytes) of one context; the rest decodes into up to MAX_OPS
 * operations on it (op_* below): device, strided, like, pinned, mapped and
 * managed arrays, gm_to_device, copies device to host, host to device and
 * between any two arrays' views (slices, reversed axes, transposes), fills
 * and memsets, views (transpose, getitem, reshape, ravel, derive),
 * retain / release, defer_cleanup scopes, flushes, a stream with
 * asynchronous copies on it, and calls with bad arguments. A plain C model
 * follows every call:
 *
 *   - each allocation has a shadow byte image and a mask of the bytes whose
 *     contents are defined; after every synchronous (or synchronized)
 *     operation each live buffer is read back whole through gm_copy and
 *     compared with the image, and every copy to the host is compared
 *     element by element, with the host bytes outside its elements
 *     untouched;
 *   - new arrays have the documented layout (contiguous strides, the given
 *     strides, gm_ndview_like's) and every view lies inside its buffer;
 *   - the queue: pending count and bytes, flushes, freed entries and the
 *     defer depth agree exactly with the model (a flush when a bound is
 *     exceeded outside defer_cleanup, nothing freed inside one, everything
 *     pending freed by a flush), except that staging buffers of
 *     asynchronous copies are queued by the stream's worker (counted only
 *     after a synchronize, and flushed by the next push);
 *   - memory the model has queued is still the context's device memory
 *     (gm_pointer_kind), memory it has freed no longer is;
 *   - a bad call fails with the documented status and a message, leaves its
 *     output untouched and changes neither the queue nor memory use;
 *   - nothing is logged at warn or error level (use after free of device
 *     memory, failed flushes, leaked arrays at teardown), and at the end,
 *     after releasing everything and a flush, no device memory is in use
 *     (ASan's leak checker covers the host side).
 *
 * A broken invariant prints what broke and aborts. FUZZ_RUNTIME_TRACE=1
 * prints each operation. Run: GM_FUZZ_TARGET=fuzz_runtime
 * tests/fuzz/run_fuzz.sh [SECONDS].
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_TARGET "fuzz_runtime"
#include "fuzz_model.h"
#include "fuzz_reader.h"
#include "gpumem/runtime.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_OPS     96
#define MAX_BUFS    (MAX_OPS + 4) /* at most one allocation per operation */
#define MAX_HANDLES 10
#define MAX_VDIM    8 /* views of up to 3-d arrays with a few new axes */
#define MAX_EXTENT  6
#define SCRATCH     16384 /* bytes of one host view (and more than one array) */
#define NSCRATCH    6     /* host buffers: asynchronous copies use one each */
#define DEVICE_MEM  (1 << 26)

static const gm_dtype dtypes[] = {
    GM_UINT8,
    GM_INT16,
    GM_FLOAT32,
    GM_FLOAT64,
    GM_COMPLEX128,
    {GM_DTYPE_FLOAT, 32, 3},
    {GM_DTYPE_INT, 8, 3},
};
#define NDTYPES (int)(sizeof dtypes / sizeof dtypes[0])

/* One allocation as the model sees it. */
typedef enum buf_state { BUF_LIVE = 0, BUF_PENDING = 1, BUF_FREED = 2 } buf_state;

typedef struct mbuf {
    uintptr_t base;
    int64_t bytes;
    gm_memory_kind kind;
    buf_state state;
    int arrays; /* gm_array objects on it */
    unsigned char *img;
    unsigned char *known;
} mbuf;

/* One gm_array the fuzzer holds, with the references it holds to it. */
typedef struct handle {
    gm_array *a;
    int buf;
    int refs;
} handle;

/* An asynchronous copy to a host buffer, checked after the synchronize. */
typedef struct host_check {
    int scratch;
    gm_ndview view;
    unsigned char expect[SCRATCH];
    unsigned char care[SCRATCH];
} host_check;

typedef struct model {
    gm_context *ctx;
    int64_t max_count, max_device, max_pinned;
    mbuf bufs[MAX_BUFS];
    int nbufs;
    handle h[MAX_HANDLES];
    /* the queue */
    int64_t count, device, pinned, flushes, freed, depth;
    bool fuzzy;     /* staging entries may have been queued since the last look */
    bool over_ok;   /* such entries may hold the count over its bound until a flush */
    bool async_any; /* an asynchronous copy since the last synchronize */
    /* the stream */
    gm_stream *stream;
    bool dirty;
    bool scratch_busy[NSCRATCH];
    host_check checks[NSCRATCH];
    int nchecks;
} model;

static unsigned char scratch[NSCRATCH][SCRATCH];
static unsigned char readback[SCRATCH * 2];
static model M;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_setup("GM_HOST_DEVICE_MEMORY", "FUZZ_RUNTIME_TRACE");
    return 0;
}

/* A failing call: the documented status (or any error for GM_OK) and a message. */
static void expect_error(gm_status got, gm_status want, const char *call)
{
    if (got == GM_OK)
        fail("%s succeeded; expected %s", call, want == GM_OK ? "an error" : gm_status_name(want));
    if (want != GM_OK && got != want)
        fail("%s returned %s, expected %s (%s)", call, gm_status_name(got), gm_status_name(want),
             gm_last_error_message());
    if (gm_last_error_message()[0] == '\0')
        fail("%s returned %s with an empty gm_last_error_message()", call, gm_status_name(got));
    gm_clear_error(); /* seen: expect_status checks that later successes leave none */
}

/* ------------------------------------------------------------- elements */

/* The model's image of buffer b (fuzz_model.h). */
static fuzz_image image_of(const mbuf *b)
{
    return (fuzz_image){b->base, b->bytes, b->img, b->known};
}

/* Byte offset of element e of a view into buffer b, checked against the buffer. */
static int64_t buf_offset(const mbuf *b, const gm_ndview *v, int64_t e)
{
    fuzz_image im = image_of(b);

    return fuzz_offset_checked(&im, v, e);
}

/* The elements of a view of buffer b, packed in C order, with their defined bytes. */
static void gather(const mbuf *b, const gm_ndview *v, unsigned char *out, unsigned char *known)
{
    fuzz_image im = image_of(b);

    fuzz_gather(&im, v, out, known);
}

/* Write packed elements into a view of buffer b. */
static void scatter(mbuf *b, const gm_ndview *v, const unsigned char *in,
                    const unsigned char *known)
{
    fuzz_image im = image_of(b);

    (void)fuzz_scatter(&im, v, in, known);
}

/* ---------------------------------------------------------------- queue */

static void model_flush(model *m)
{
    if (m->count > 0)
        m->flushes++;
    m->freed += m->count;
    m->count = m->device = m->pinned = 0;
    for (int i = 0; i < m->nbufs; i++)
        if (m->bufs[i].state == BUF_PENDING)
            m->bufs[i].state = BUF_FREED;
    if (!m->async_any)
        m->over_ok = false;
}

static bool over_bounds(const model *m)
{
    return m->depth == 0 &&
           (m->count > m->max_count || m->device > m->max_device || m->pinned > m->max_pinned);
}

/* A release queued buffer b (its last array went). */
static void model_push_buffer(model *m, int b)
{
    mbuf *buf = &m->bufs[b];

    if (buf->bytes == 0) {
        buf->state = BUF_FREED; /* no memory, no entry */
        return;
    }
    buf->state = BUF_PENDING;
    m->count++;
    if (buf->kind == GM_MEMORY_DEVICE || buf->kind == GM_MEMORY_MANAGED)
        m->device += buf->bytes;
    if (buf->kind == GM_MEMORY_PINNED || buf->kind == GM_MEMORY_MAPPED)
        m->pinned += buf->bytes;
    if (over_bounds(m))
        model_flush(m);
}

/* A queued entry without bytes (a stream). */
static void model_push_other(model *m)
{
    m->count++;
    if (over_bounds(m))
        model_flush(m);
}

/* Compare the queue's statistics with the model (with staging entries: as far as known). */
static void check_queue(model *m)
{
    gm_dealloc_stats s;

    expect_status(gm_deallocations_stats(m->ctx, &s), GM_OK, "gm_deallocations_stats");
    if (s.defer_depth != m->depth)
        fail("defer depth %lld, model %lld", (long long)s.defer_depth, (long long)m->depth);
    if (m->fuzzy && s.flushes > m->flushes && m->depth == 0) {
        /* staging entries queued by the stream took the count over its bound */
        model_flush(m);
        m->flushes = s.flushes;
    }
    if (s.flushes != m->flushes || s.pending_device_bytes != m->device ||
        s.pending_pinned_bytes != m->pinned || (!m->fuzzy && s.pending_count != m->count) ||
        (!m->fuzzy && s.freed_count != m->freed) || s.pending_count < m->count ||
        s.freed_count < m->freed)
        fail("queue: pending %lld (model %lld), device bytes %lld (%lld), pinned bytes %lld "
             "(%lld), flushes %lld (%lld), freed %lld (%lld)%s",
             (long long)s.pending_count, (long long)m->count, (long long)s.pending_device_bytes,
             (long long)m->device, (long long)s.pending_pinned_bytes, (long long)m->pinned,
             (long long)s.flushes, (long long)m->flushes, (long long)s.freed_count,
             (long long)m->freed, m->fuzzy ? " (staging entries may be queued)" : "");
    if (m->fuzzy && !m->async_any) {
        /* the stream is idle: every staging entry is queued, the count is known again */
        m->count = s.pending_count;
        m->freed = s.freed_count;
        m->fuzzy = false;
    }
    if (!m->over_ok && m->depth == 0 && s.pending_count > m->max_count)
        fail("%lld entries pending outside defer_cleanup, bound %lld", (long long)s.pending_count,
             (long long)m->max_count);
    if (m->depth == 0 &&
        (s.pending_device_bytes > m->max_device || s.pending_pinned_bytes > m->max_pinned))
        fail("pending bytes %lld / %lld over their bounds %lld / %lld outside defer_cleanup",
             (long long)s.pending_device_bytes, (long long)s.pending_pinned_bytes,
             (long long)m->max_device, (long long)m->max_pinned);
    if (s.peak_pending_bytes < s.pending_device_bytes + s.pending_pinned_bytes)
        fail("peak pending bytes %lld below the pending %lld", (long long)s.peak_pending_bytes,
             (long long)(s.pending_device_bytes + s.pending_pinned_bytes));
}

/* ------------------------------------------------------------- contents */

static gm_ndview whole_view(const mbuf *b)
{
    gm_ndview v;
    int64_t n = b->bytes;

    gm_ndview_init((void *)b->base, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &v);
    v.memory = (int32_t)b->kind;
    v.device_id = b->kind == GM_MEMORY_HOST || b->kind == GM_MEMORY_PINNED ? -1 : 0;
    return v;
}

/* Read a live buffer back whole and compare its defined bytes with the image. */
static void check_buffer(model *m, int i)
{
    mbuf *b = &m->bufs[i];
    gm_ndview src, dst;
    int64_t n = b->bytes;

    if (b->state != BUF_LIVE || n == 0)
        return;
    src = whole_view(b);
    gm_ndview_init(readback, GM_UINT8, 1, &n, NULL, GM_ORDER_C, &dst);
    expect_status(gm_copy(m->ctx, &dst, &src, NULL), GM_OK, "gm_copy (reading a buffer back)");
    for (int64_t j = 0; j < n; j++)
        if (b->known[j] && readback[j] != b->img[j])
            fail("buffer %d (memory kind %d, %lld bytes): byte %lld is %u, the model says %u", i,
                 (int)b->kind, (long long)n, (long long)j, readback[j], b->img[j]);
}

/* What the context says about each allocation's address. */
static void check_kinds(model *m)
{
    for (int i = 0; i < m->nbufs; i++) {
        mbuf *b = &m->bufs[i];
        gm_memory_kind kind = GM_MEMORY_HOST;
        bool reused = false;

        if (b->bytes == 0 || b->kind != GM_MEMORY_DEVICE)
            continue;
        for (int j = 0; j < m->nbufs && !reused; j++)
            reused = j != i && m->bufs[j].state != BUF_FREED && m->bufs[j].bytes > 0 &&
                     b->base >= m->bufs[j].base && b->base < m->bufs[j].base + m->bufs[j].bytes;
        expect_status(gm_pointer_kind(m->ctx, (void *)b->base, &kind), GM_OK, "gm_pointer_kind");
        if (b->state != BUF_FREED && kind != GM_MEMORY_DEVICE)
            fail("buffer %d, %s, is memory kind %d, not device memory", i,
                 b->state == BUF_LIVE ? "alive" : "queued", (int)kind);
        if (b->state == BUF_FREED && !reused && kind != GM_MEMORY_HOST)
            fail("buffer %d was freed by a flush but is still memory kind %d", i, (int)kind);
    }
}

static void check_all(model *m)
{
    if (m->dirty)
        return;
    for (int i = 0; i < m->nbufs; i++)
        check_buffer(m, i);
    check_kinds(m);
}

/* ------------------------------------------------------------ host views */

/*
 * A host view of the given shape and dtype over scratch s: C or F order,
 * gaps between items and rows, some axes reversed. Falls back to C order
 * when it would not fit.
 */
static gm_ndview host_view(reader *r, int s, int ndim, const int64_t *shape, gm_dtype dtype)
{
    gm_ndview v;
    uint8_t mode = take_u8(r), flip = take_u8(r);
    int64_t k = (int64_t)gm_dtype_itemsize(dtype), stride = k * (1 + (mode >> 4) % 2);
    int64_t lo = 0, hi = 0;

    gm_ndview_init(scratch[s], dtype, ndim, shape, NULL, mode % 2 ? GM_ORDER_F : GM_ORDER_C, &v);
    if (mode % 4 >= 2) { /* gaps: axes packed from the last one with padding */
        for (int i = ndim - 1; i >= 0; i--) {
            v.strides[i] = stride;
            stride = stride * (shape[i] > 0 ? shape[i] : 1) + ((mode >> 2) % 4) * 8;
        }
    }
    for (int i = 0; i < ndim; i++)
        if ((flip >> i) & 1 && shape[i] > 0) {
            v.offset += (shape[i] - 1) * v.strides[i];
            v.strides[i] = -v.strides[i];
        }
    v.offset += (mode >> 5) * 8; /* a little slack in front */
    if (gm_ndview_extent(&v, &lo, &hi) != GM_OK || lo < 0 || hi > SCRATCH)
        gm_ndview_init(scratch[s], dtype, ndim, shape, NULL, GM_ORDER_C, &v);
    return v;
}

/* Fill a host view's elements with bytes derived from the input, packed too into `packed`. */
static void fill_host(reader *r, const gm_ndview *v, unsigned char *packed)
{
    int64_t k = (int64_t)gm_dtype_itemsize(v->dtype), n = fuzz_elements(v);
    uint8_t seed = take_u8(r), mul = take_u8(r) | 1;

    for (int64_t e = 0; e < n; e++)
        for (int64_t b = 0; b < k; b++) {
            unsigned char byte = (unsigned char)(seed + (e * k + b) * mul);

            packed[e * k + b] = byte;
            ((unsigned char *)fuzz_element_at(v, e))[b] = byte;
        }
}

/* A free scratch buffer, synchronizing the stream when every one is in use. */
static void sync_stream(model *m);

static int take_scratch(model *m, reader *r)
{
    int s = take_u8(r) % NSCRATCH;

    for (int i = 0; i < NSCRATCH; i++, s = (s + 1) % NSCRATCH)
        if (!m->scratch_busy[s])
            return s;
    sync_stream(m);
    return s;
}

/* Expected contents of scratch s after copying packed elements into view v. */
static void expect_host(host_check *c, int s, const gm_ndview *v, const unsigned char *packed,
                        const unsigned char *known)
{
    int64_t k = (int64_t)gm_dtype_itemsize(v->dtype), n = fuzz_elements(v);

    c->scratch = s;
    c->view = *v;
    memcpy(c->expect, scratch[s], SCRATCH);
    memset(c->care, 1, SCRATCH);
    for (int64_t e = 0; e < n; e++) {
        int64_t at = (int64_t)(fuzz_element_at(v, e) - (uintptr_t)scratch[s]);

        memcpy(c->expect + at, packed + e * k, (size_t)k);
        memcpy(c->care + at, known + e * k, (size_t)k);
    }
}

static void verify_host(const host_check *c)
{
    for (int j = 0; j < SCRATCH; j++)
        if (c->care[j] && scratch[c->scratch][j] != c->expect[j])
            fail("host buffer byte %d after a copy to the host: %u, expected %u", j,
                 scratch[c->scratch][j], c->expect[j]);
}

/* --------------------------------------------------------------- stream */

static void sync_stream(model *m)
{
    if (!m->dirty)
        return;
    say("  synchronize");
    expect_status(gm_stream_synchronize(m->stream), GM_OK, "gm_stream_synchronize");
    for (int i = 0; i < m->nchecks; i++)
        verify_host(&m->checks[i]);
    m->nchecks = 0;
    memset(m->scratch_busy, 0, sizeof m->scratch_busy);
    m->dirty = false;
    m->async_any = false;
    check_queue(m); /* every staging entry is queued now: count them */
}

/* The stream for an operation: NULL (synchronous), or the stream when the input asks. */
static gm_stream *pick_stream(model *m, uint8_t b)
{
    if (m->stream != NULL && (b & 1))
        return m->stream;
    sync_stream(m);
    return NULL;
}

static void went_async(model *m, gm_stream *stream)
{
    if (stream == NULL)
        return;
    m->dirty = true;
    m->fuzzy = true;
    m->over_ok = true;
    m->async_any = true;
}

/* -------------------------------------------------------------- handles */

static int free_slot(model *m)
{
    for (int i = 0; i < MAX_HANDLES; i++)
        if (m->h[i].a == NULL)
            return i;
    return -1;
}

static handle *pick_handle(model *m, reader *r)
{
    int i = take_u8(r) % MAX_HANDLES;

    for (int n = 0; n < MAX_HANDLES; n++, i = (i + 1) % MAX_HANDLES)
        if (m->h[i].a != NULL)
            return &m->h[i];
    return NULL;
}

/* Record a new allocation behind array a (in slot `slot`) and return its buffer index. */
static int new_buffer(model *m, gm_array *a, int slot)
{
    const gm_ndview *v = gm_array_view(a);
    mbuf *b = &m->bufs[m->nbufs];
    int64_t lo = 0, hi = 0;

    if (m->nbufs == MAX_BUFS)
        fail("model: too many allocations");
    expect_status(gm_ndview_extent(v, &lo, &hi), GM_OK, "gm_ndview_extent of a new array");
    memset(b, 0, sizeof *b);
    b->kind = (gm_memory_kind)v->memory;
    b->bytes = hi - lo;
    b->base = (uintptr_t)v->data + (uintptr_t)lo;
    if (fuzz_elements(v) == 0)
        b->bytes = 0;
    b->arrays = 1;
    b->img = calloc((size_t)b->bytes + 1, 1);
    b->known = calloc((size_t)b->bytes + 1, 1);
    if (b->img == NULL || b->known == NULL)
        fail("model: out of memory");
    m->h[slot].a = a;
    m->h[slot].buf = m->nbufs;
    m->h[slot].refs = 1;
    return m->nbufs++;
}

/* A new view of an existing buffer. */
static void new_view(model *m, gm_array *a, int buf, int slot)
{
    const gm_ndview *v = gm_array_view(a);

    for (int64_t e = 0; e < fuzz_elements(v); e++)
        (void)buf_offset(&m->bufs[buf], v, e);
    m->bufs[buf].arrays++;
    m->h[slot].a = a;
    m->h[slot].buf = buf;
    m->h[slot].refs = 1;
}

static void release_handle(model *m, handle *h)
{
    gm_array *a = h->a;

    gm_array_release(&a);
    if (a != NULL)
        fail("gm_array_release did not clear its argument");
    if (--h->refs > 0)
        return;
    h->a = NULL;
    if (--m->bufs[h->buf].arrays == 0)
        model_push_buffer(m, h->buf);
}

/* Shape of a new array: 1 to 3 axes of 0 to MAX_EXTENT (0 rarely). */
static int pick_shape(reader *r, int64_t *shape)
{
    uint8_t b = take_u8(r);
    int ndim = 1 + b % 3;

    for (int i = 0; i < ndim; i++) {
        uint8_t e = take_u8(r);

        shape[i] = e % 16 == 0 ? 0 : 1 + e % MAX_EXTENT;
    }
    return ndim;
}

static gm_dtype pick_dtype(reader *r)
{
    return dtypes[take_u8(r) % NDTYPES];
}

/* Check a new array's descriptor: shape, dtype, memory, and the strides it must have. */
static void check_layout(const gm_array *a, int ndim, const int64_t *shape, gm_dtype dtype,
                         gm_memory_kind memory, const int64_t *strides)
{
    const gm_ndview *v = gm_array_view(a);

    if (v->ndim != ndim || !gm_dtype_equal(v->dtype, dtype) || v->memory != (int32_t)memory)
        fail("new array: ndim %d dtype %u/%u memory %d, expected %d %u/%u %d", v->ndim,
             v->dtype.code, v->dtype.bits, v->memory, ndim, dtype.code, dtype.bits, (int)memory);
    for (int i = 0; i < ndim; i++)
        if (v->shape[i] != shape[i] || (strides != NULL && fuzz_elements(v) > 0 && shape[i] > 1 &&
                                        v->strides[i] != strides[i]))
            fail("new array: axis %d has extent %lld stride %lld, expected %lld / %lld", i,
                 (long long)v->shape[i], (long long)v->strides[i], (long long)shape[i],
                 strides != NULL ? (long long)strides[i] : 0LL);
    if (gm_ndview_validate(v) != GM_OK)
        fail("new array: its descriptor does not validate");
}

/* ----------------------------------------------------------- operations */

/* gm_device_array, gm_pinned_array, gm_mapped_array or gm_managed_array (C or F). */
static void op_create(model *m, reader *r)
{
    int64_t shape[3], strides[3];
    int slot = free_slot(m), ndim = pick_shape(r, shape);
    gm_dtype dtype = pick_dtype(r);
    uint8_t how = take_u8(r);
    gm_order order = how & 1 ? GM_ORDER_F : GM_ORDER_C;
    gm_memory_kind kind = GM_MEMORY_DEVICE;
    gm_array *a = NULL;
    gm_status status = GM_OK;

    if (slot < 0)
        return;
    switch ((how >> 1) % 8) {
    case 5:
        kind = GM_MEMORY_PINNED;
        status = gm_pinned_array(m->ctx, ndim, shape, dtype, order, &a);
        break;
    case 6:
        kind = GM_MEMORY_MAPPED;
        status = gm_mapped_array(m->ctx, ndim, shape, dtype, order, (how >> 4) & 3, &a);
        break;
    case 7:
        kind = GM_MEMORY_MANAGED;
        status = gm_managed_array(m->ctx, ndim, shape, dtype, order, &a);
        break;
    default:
        status = gm_device_array(m->ctx, ndim, shape, dtype, order, &a);
        break;
    }
    say("  create kind %d ndim %d (%lld %lld %lld) order %c -> slot %d", (int)kind, ndim,
        (long long)shape[0], (long long)(ndim > 1 ? shape[1] : 0),
        (long long)(ndim > 2 ? shape[2] : 0), (char)order, slot);
    expect_status(status, GM_OK, "creating an array");
    gm_contiguous_strides(ndim, shape, (int64_t)gm_dtype_itemsize(dtype), order, strides);
    check_layout(a, ndim, shape, dtype, kind, strides);
    new_buffer(m, a, slot);
}

/* gm_device_array_strided (or pinned / managed): axes in any order, gaps, signs. */
static void op_create_strided(model *m, reader *r)
{
    int64_t shape[3], strides[3];
    int slot = free_slot(m), ndim = pick_shape(r, shape);
    gm_dtype dtype = pick_dtype(r);
    uint8_t how = take_u8(r), perm = take_u8(r), signs = take_u8(r);
    int64_t k = (int64_t)gm_dtype_itemsize(dtype), stride = k * (1 + how % 2);
    int order[3] = {0, 1, 2};
    gm_array *a = NULL;
    gm_memory_kind kind = GM_MEMORY_DEVICE;
    gm_status status = GM_OK;

    if (slot < 0)
        return;
    for (int i = ndim - 1; i > 0; i--) { /* a permutation of the axes */
        int j = perm % (i + 1), t = order[i];

        perm /= (uint8_t)(i + 1);
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = ndim - 1; i >= 0; i--) {
        int ax = order[i];

        strides[ax] = (signs >> ax) & 1 ? -stride : stride;
        stride = stride * (shape[ax] > 0 ? shape[ax] : 1) + ((how >> 1) % 4) * k;
    }
    switch ((how >> 3) % 4) {
    case 1:
        kind = GM_MEMORY_PINNED;
        status = gm_pinned_array_strided(m->ctx, ndim, shape, strides, dtype, &a);
        break;
    case 2:
        kind = GM_MEMORY_MANAGED;
        status = gm_managed_array_strided(m->ctx, ndim, shape, strides, dtype, &a);
        break;
    default:
        status = gm_device_array_strided(m->ctx, ndim, shape, strides, dtype, &a);
        break;
    }
    say("  create strided kind %d ndim %d -> slot %d", (int)kind, ndim, slot);
    expect_status(status, GM_OK, "creating a strided array");
    check_layout(a, ndim, shape, dtype, kind, strides);
    new_buffer(m, a, slot);
}

/* gm_device_array_like / pinned / mapped / managed _like of a held array's view. */
static void op_create_like(model *m, reader *r)
{
    handle *h = pick_handle(m, r);
    uint8_t how = take_u8(r);
    int slot = free_slot(m);
    gm_ndview like, view;
    gm_memory_kind kind = GM_MEMORY_DEVICE;
    gm_array *a = NULL;
    gm_status status = GM_OK;

    if (h == NULL || slot < 0)
        return;
    view = *gm_array_view(h->a);
    switch (how % 6) {
    case 3:
        kind = GM_MEMORY_PINNED;
        status = gm_pinned_array_like(m->ctx, &view, &a);
        break;
    case 4:
        kind = GM_MEMORY_MAPPED;
        status = gm_mapped_array_like(m->ctx, &view, 0, &a);
        break;
    case 5:
        kind = GM_MEMORY_MANAGED;
        status = gm_managed_array_like(m->ctx, &view, &a);
        break;
    default:
        status = gm_device_array_like(m->ctx, &view, &a);
        break;
    }
    say("  create like slot %ld kind %d -> slot %d", (long)(h - m->h), (int)kind, slot);
    expect_status(status, GM_OK, "creating an array like another");
    expect_status(gm_ndview_like(&view, &like), GM_OK, "gm_ndview_like");
    check_layout(a, view.ndim, view.shape, view.dtype, kind, like.strides);
    new_buffer(m, a, slot);
}

/* gm_to_device of a host view (maybe on the stream), or gm_array_copy_to_host_new. */
static void op_to_device(model *m, reader *r)
{
    static unsigned char packed[SCRATCH], known[SCRATCH];
    int64_t shape[3];
    int slot = free_slot(m), ndim = pick_shape(r, shape);
    gm_dtype dtype = pick_dtype(r);
    uint8_t how = take_u8(r);
    gm_stream *stream = pick_stream(m, how);
    int s = take_scratch(m, r);
    gm_ndview host = host_view(r, s, ndim, shape, dtype), like;
    gm_array *a = NULL;

    if (slot < 0)
        return;
    fill_host(r, &host, packed);
    say("  to_device ndim %d %s -> slot %d", ndim, stream ? "async" : "sync", slot);
    expect_status(gm_to_device(m->ctx, &host, stream, &a), GM_OK, "gm_to_device");
    expect_status(gm_ndview_like(&host, &like), GM_OK, "gm_ndview_like");
    check_layout(a, ndim, shape, dtype, GM_MEMORY_DEVICE, like.strides);
    new_buffer(m, a, slot);
    memset(known, 1, sizeof known);
    scatter(&m->bufs[m->h[slot].buf], gm_array_view(a), packed, known);
    if (stream != NULL) {
        m->scratch_busy[s] = true;
        went_async(m, stream);
    }
}

/* gm_array_copy_to_host_new: a new host array holding a copy of a view. */
static void op_copy_to_host_new(model *m, reader *r)
{
    static unsigned char packed[SCRATCH], known[SCRATCH];
    handle *h = pick_handle(m, r);
    gm_stream *stream = pick_stream(m, take_u8(r));
    int slot = free_slot(m);
    const gm_ndview *v = NULL;
    gm_ndview like;
    gm_array *a = NULL;

    if (h == NULL || slot < 0)
        return;
    v = gm_array_view(h->a);
    say("  copy_to_host_new slot %ld -> slot %d%s", (long)(h - m->h), slot, stream ? " async" : "");
    expect_status(gm_array_copy_to_host_new(h->a, stream, &a), GM_OK, "gm_array_copy_to_host_new");
    expect_status(gm_ndview_like(v, &like), GM_OK, "gm_ndview_like");
    check_layout(a, v->ndim, v->shape, v->dtype, GM_MEMORY_HOST, like.strides);
    gather(&m->bufs[h->buf], v, packed, known);
    new_buffer(m, a, slot);
    scatter(&m->bufs[m->h[slot].buf], gm_array_view(a), packed, known);
    went_async(m, stream);
}

/*
 * For gm_array_copy_to_host / _to_device (Numba's check_array_compatibility):
 * the host side may differ by axes of extent 1, one more or all of its own
 * squeezed out; the elements keep their C order, so the model is unchanged.
 */
static void vary_size_one_axes(uint8_t how, gm_ndview *host)
{
    if ((how & 6) != 6) /* not the copy_to_* call, or not this time */
        return;
    if (how & 8)
        expect_status(gm_ndview_squeeze(host, 0, NULL, host), GM_OK, "gm_ndview_squeeze");
    else if (host->ndim < GM_MAX_DIMS)
        expect_status(gm_ndview_expand_dims(host, (how >> 4) % (host->ndim + 1), host), GM_OK,
                      "gm_ndview_expand_dims");
}

/* Copy a held array's view into a host view (gm_array_copy_to_host or gm_copy). */
static void op_to_host(model *m, reader *r)
{
    static unsigned char packed[SCRATCH], known[SCRATCH];
    handle *h = pick_handle(m, r);
    uint8_t how = take_u8(r);
    gm_stream *stream = pick_stream(m, how);
    int s = take_scratch(m, r);
    const gm_ndview *v = NULL;
    gm_ndview host;
    host_check *c = &m->checks[m->nchecks];
    gm_status status = GM_OK;

    if (h == NULL)
        return;
    v = gm_array_view(h->a);
    host = host_view(r, s, v->ndim, v->shape, v->dtype);
    vary_size_one_axes(how, &host);
    for (int j = 0; j < SCRATCH; j++)
        scratch[s][j] = (unsigned char)(j * 31 + how);
    gather(&m->bufs[h->buf], v, packed, known);
    expect_host(c, s, &host, packed, known);
    say("  to_host slot %ld %s", (long)(h - m->h), stream ? "async" : "sync");
    if (how & 2)
        status = gm_array_copy_to_host(h->a, &host, stream);
    else
        status = gm_copy(m->ctx, &host, v, stream);
    expect_status(status, GM_OK, "copy to the host");
    if (stream == NULL) {
        verify_host(c);
        return;
    }
    m->scratch_busy[s] = true;
    m->nchecks++;
    went_async(m, stream);
}

/* Copy a host view into a held array's view (gm_array_copy_to_device or gm_copy). */
static void op_to_device_copy(model *m, reader *r)
{
    static unsigned char packed[SCRATCH], known[SCRATCH];
    handle *h = pick_handle(m, r);
    uint8_t how = take_u8(r);
    gm_stream *stream = pick_stream(m, how);
    int s = take_scratch(m, r);
    const gm_ndview *v = NULL;
    gm_ndview host;
    gm_status status = GM_OK;

    if (h == NULL)
        return;
    v = gm_array_view(h->a);
    host = host_view(r, s, v->ndim, v->shape, v->dtype);
    vary_size_one_axes(how, &host);
    fill_host(r, &host, packed);
    say("  to_device copy slot %ld %s", (long)(h - m->h), stream ? "async" : "sync");
    if (how & 2)
        status = gm_array_copy_to_device(h->a, &host, stream);
    else
        status = gm_copy(m->ctx, v, &host, stream);
    expect_status(status, GM_OK, "copy from the host");
    memset(known, 1, sizeof known);
    scatter(&m->bufs[h->buf], v, packed, known);
    if (stream != NULL)
        m->scratch_busy[s] = true;
    went_async(m, stream);
}

/* Slice every axis of two views of one ndim to common extents (offset, maybe reversed). */
static void match_views(reader *r, gm_ndview *a, gm_ndview *b)
{
    for (int i = 0; i < a->ndim; i++) {
        int64_t n = a->shape[i] < b->shape[i] ? a->shape[i] : b->shape[i];
        uint8_t x = take_u8(r);
        int64_t sa = a->shape[i] > n ? x % (a->shape[i] - n + 1) : 0;
        int64_t sb = b->shape[i] > n ? (x >> 4) % (b->shape[i] - n + 1) : 0;

        if (n == 0)
            continue;
        gm_ndview_slice(a, i, GM_SLICE(sa, sa + n, 1), a);
        gm_ndview_slice(b, i, GM_SLICE(sb, sb + n, 1), b);
        if (x & 8)
            gm_ndview_slice(a, i, GM_SLICE(GM_NONE, GM_NONE, -1), a);
        if (x & 128)
            gm_ndview_slice(b, i, GM_SLICE(GM_NONE, GM_NONE, -1), b);
    }
}

static bool same_shape(const gm_ndview *a, const gm_ndview *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

/* Whether two views' byte extents intersect (both non-empty). */
static bool overlaps(const gm_ndview *a, const gm_ndview *b)
{
    int64_t alo = 0, ahi = 0, blo = 0, bhi = 0;
    uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;

    if (fuzz_elements(a) == 0 || fuzz_elements(b) == 0)
        return false;
    gm_ndview_extent(a, &alo, &ahi);
    gm_ndview_extent(b, &blo, &bhi);
    return a0 + (uintptr_t)alo < b0 + (uintptr_t)bhi && b0 + (uintptr_t)blo < a0 + (uintptr_t)ahi;
}

/* gm_copy between two held arrays' views (any memory kinds), matched or not. */
static void op_copy(model *m, reader *r)
{
    static unsigned char packed[SCRATCH], known[SCRATCH];
    handle *hs = pick_handle(m, r), *hd = pick_handle(m, r);
    uint8_t how = take_u8(r);
    gm_stream *stream = NULL;
    gm_ndview src, dst;
    gm_status want = GM_OK, got = GM_OK;

    if (hs == NULL)
        return;
    src = *gm_array_view(hs->a);
    dst = *gm_array_view(hd->a);
    if ((how & 6) != 0 && src.ndim == dst.ndim)
        match_views(r, &dst, &src);
    if (!gm_dtype_equal(src.dtype, dst.dtype))
        want = GM_ERR_DTYPE;
    else if (!same_shape(&src, &dst))
        want = GM_ERR_SHAPE_MISMATCH;
    else if (hs->buf == hd->buf && overlaps(&src, &dst))
        want = GM_ERR_INVALID_ARG;
    stream = want == GM_OK ? pick_stream(m, how) : NULL;
    say("  copy slot %ld -> slot %ld %s, expecting %s", (long)(hs - m->h), (long)(hd - m->h),
        stream ? "async" : "sync", gm_status_name(want));
    gm_clear_error();
    got = gm_copy(m->ctx, &dst, &src, stream);
    if (want != GM_OK) {
        /* both shape and dtype wrong: either status is right */
        if (want == GM_ERR_DTYPE && !same_shape(&src, &dst) && got == GM_ERR_SHAPE_MISMATCH)
            want = got;
        expect_error(got, want, "gm_copy");
        return;
    }
    expect_status(got, GM_OK, "gm_copy");
    gather(&m->bufs[hs->buf], &src, packed, known);
    scatter(&m->bufs[hd->buf], &dst, packed, known);
    went_async(m, stream);
}

/* gm_array_fill or gm_array_memset of a held array's view. */
static void op_fill(model *m, reader *r)
{
    static unsigned char packed[SCRATCH], known[SCRATCH];
    handle *h = pick_handle(m, r);
    uint8_t how = take_u8(r), value[16];
    gm_stream *stream = pick_stream(m, how);
    const gm_ndview *v = NULL;
    int64_t k = 0, n = 0;

    if (h == NULL)
        return;
    v = gm_array_view(h->a);
    k = (int64_t)gm_dtype_itemsize(v->dtype);
    n = fuzz_elements(v);
    for (int i = 0; i < 16; i++)
        value[i] = take_u8(r);
    if (how & 2) {
        say("  memset slot %ld byte %u %s", (long)(h - m->h), value[0], stream ? "async" : "");
        expect_status(gm_array_memset(h->a, value[0], stream), GM_OK, "gm_array_memset");
        memset(packed, value[0], (size_t)(n * k));
    } else {
        say("  fill slot %ld %s", (long)(h - m->h), stream ? "async" : "");
        expect_status(gm_array_fill(h->a, value, stream), GM_OK, "gm_array_fill");
        for (int64_t e = 0; e < n; e++)
            memcpy(packed + e * k, value, (size_t)k);
    }
    memset(known, 1, (size_t)(n * k));
    scatter(&m->bufs[h->buf], v, packed, known);
    went_async(m, stream);
}

/* A slice item for getitem: in range, clamped by Python's rules, or reversed. */
static gm_index_item pick_item(reader *r, int64_t extent, int *ints)
{
    uint8_t b = take_u8(r), c = take_u8(r);
    int64_t step = (int64_t)(c % 5) - 2;

    switch (b % 6) {
    case 0:
        if (extent == 0)
            return GM_IDX_ALL;
        (*ints)++;
        return GM_IDX_INT((int64_t)(c % extent) - (b & 64 ? extent : 0));
    case 1:
        return GM_IDX_NEWAXIS;
    case 2:
        return GM_IDX_ALL;
    default:
        return GM_IDX_SLICE((int64_t)(b >> 3) % 9 - 4, (int64_t)(c >> 3) % 9 - 4,
                            step == 0 ? GM_NONE : step);
    }
}

/* A view of a held array: transpose, getitem, reshape, ravel or derive. */
static void op_view(model *m, reader *r)
{
    handle *h = pick_handle(m, r);
    uint8_t how = take_u8(r);
    int slot = free_slot(m);
    const gm_ndview *v = NULL;
    gm_array *a = NULL;
    gm_status status = GM_OK;

    if (h == NULL || slot < 0)
        return;
    v = gm_array_view(h->a);
    switch (how % 5) {
    case 0:
        say("  transpose slot %ld -> %d", (long)(h - m->h), slot);
        expect_status(gm_array_transpose(h->a, &a), GM_OK, "gm_array_transpose");
        break;
    case 1: {
        gm_index_item items[4];
        int n = 1 + (how >> 3) % 4, ints = 0;

        for (int i = 0; i < n; i++)
            items[i] = pick_item(r, i < v->ndim ? v->shape[i] : 1, &ints);
        say("  getitem slot %ld (%d items) -> %d", (long)(h - m->h), n, slot);
        status = gm_array_getitem(h->a, n, items, &a);
        if (status != GM_OK) {
            /* more indices than axes, or an int meant for another axis */
            if (status != GM_ERR_OUT_OF_RANGE && status != GM_ERR_INVALID_ARG)
                fail("gm_array_getitem returned %s", gm_status_name(status));
            expect_error(status, status, "gm_array_getitem");
            return;
        }
        break;
    }
    case 2: {
        int64_t shape[2] = {-1, 1 + (how >> 3) % 3};
        int ndim = 1 + (how >> 5) % 2;

        say("  reshape slot %ld -> %d", (long)(h - m->h), slot);
        status = gm_array_reshape(h->a, ndim, shape, (how >> 6) & 1 ? GM_ORDER_F : GM_ORDER_C, &a);
        if (status != GM_OK) {
            if (status != GM_ERR_NEEDS_COPY && status != GM_ERR_SHAPE_MISMATCH)
                fail("gm_array_reshape returned %s", gm_status_name(status));
            expect_error(status, status, "gm_array_reshape");
            return;
        }
        break;
    }
    case 3:
        say("  ravel slot %ld -> %d", (long)(h - m->h), slot);
        status = gm_array_ravel(h->a, (how >> 3) & 1 ? GM_ORDER_F : GM_ORDER_K, &a);
        if (status != GM_OK) {
            expect_error(status, GM_ERR_NEEDS_COPY, "gm_array_ravel");
            return;
        }
        break;
    default: {
        gm_ndview w = *v;

        if (w.ndim > 0 && w.shape[0] > 1)
            gm_ndview_slice(&w, 0, GM_SLICE(1, GM_NONE, 1 + (how >> 3) % 2), &w);
        say("  derive slot %ld -> %d", (long)(h - m->h), slot);
        expect_status(gm_array_derive(h->a, &w, &a), GM_OK, "gm_array_derive");
        break;
    }
    }
    if (gm_array_context(a) != m->ctx || gm_array_view(a)->memory != v->memory)
        fail("a view changed context or memory kind");
    new_view(m, a, h->buf, slot);
}

static void op_retain(model *m, reader *r)
{
    handle *h = pick_handle(m, r);

    if (h == NULL)
        return;
    say("  retain slot %ld", (long)(h - m->h));
    if (gm_array_retain(h->a) != h->a)
        fail("gm_array_retain returned another pointer");
    h->refs++;
}

static void op_release(model *m, reader *r)
{
    handle *h = pick_handle(m, r);

    if (h == NULL)
        return;
    say("  release slot %ld (refs %d, buffer %d with %d arrays)", (long)(h - m->h), h->refs, h->buf,
        m->bufs[h->buf].arrays);
    release_handle(m, h);
}

static void op_defer(model *m, reader *r)
{
    uint8_t b = take_u8(r);

    if (b & 1) {
        say("  defer_cleanup_begin");
        expect_status(gm_defer_cleanup_begin(m->ctx), GM_OK, "gm_defer_cleanup_begin");
        m->depth++;
        return;
    }
    if (m->depth == 0) {
        say("  defer_cleanup_end (none open)");
        gm_clear_error();
        expect_error(gm_defer_cleanup_end(m->ctx), GM_ERR_STATE, "gm_defer_cleanup_end");
        return;
    }
    say("  defer_cleanup_end");
    expect_status(gm_defer_cleanup_end(m->ctx), GM_OK, "gm_defer_cleanup_end");
    m->depth--;
    if (over_bounds(m))
        model_flush(m);
}

static void op_flush(model *m, reader *r)
{
    (void)r;
    say("  flush");
    expect_status(gm_deallocations_flush(m->ctx), GM_OK, "gm_deallocations_flush");
    if (m->depth == 0)
        model_flush(m);
}

/* Create, synchronize or destroy the stream. */
static void op_stream(model *m, reader *r)
{
    uint8_t b = take_u8(r);

    if (m->stream == NULL) {
        say("  stream create");
        expect_status(gm_stream_create(m->ctx, b & 1 ? GM_STREAM_NON_BLOCKING : GM_STREAM_DEFAULT,
                                       &m->stream),
                      GM_OK, "gm_stream_create");
        return;
    }
    if (b % 3 != 0) {
        sync_stream(m);
        return;
    }
    say("  stream destroy%s", m->dirty ? " (work pending)" : "");
    if (!m->dirty || !(b & 4))
        sync_stream(m);
    gm_stream_destroy(&m->stream);
    if (m->stream != NULL)
        fail("gm_stream_destroy did not clear its argument");
    model_push_other(m);
    if (m->dirty) {
        /* destroyed with work queued: gm_context_synchronize waits for it */
        expect_status(gm_context_synchronize(m->ctx), GM_OK, "gm_context_synchronize");
        for (int i = 0; i < m->nchecks; i++)
            verify_host(&m->checks[i]);
        m->nchecks = 0;
        memset(m->scratch_busy, 0, sizeof m->scratch_busy);
        m->dirty = false;
        m->async_any = false;
        check_queue(m);
    }
}

/* Calls with bad arguments: the documented error, a message, nothing changed. */
static void op_bad(model *m, reader *r)
{
    static gm_array *const sentinel = (gm_array *)(uintptr_t)0x5a5a5a50;
    handle *h = pick_handle(m, r);
    uint8_t how = take_u8(r);
    gm_array *a = sentinel;
    gm_dealloc_stats before, after;
    int64_t free0 = 0, total0 = 0, free1 = 0, total1 = 0;
    int64_t shape[GM_MAX_DIMS + 1] = {2, 3, 4};
    gm_ndview v, w;
    const char *call = "";
    gm_status want = GM_OK, got = GM_OK;

    sync_stream(m);
    expect_status(gm_deallocations_stats(m->ctx, &before), GM_OK, "gm_deallocations_stats");
    expect_status(gm_context_memory_info(m->ctx, &free0, &total0), GM_OK, "gm_context_memory_info");
    gm_clear_error();
    switch (how % 12) {
    case 0:
        call = "gm_device_array (order 'X')";
        want = GM_ERR_INVALID_ARG;
        got = gm_device_array(m->ctx, 2, shape, GM_FLOAT32, (gm_order)'X', &a);
        break;
    case 1:
        call = "gm_device_array (negative extent)";
        want = GM_ERR_INVALID_ARG;
        shape[1] = -1 - (how >> 4);
        got = gm_device_array(m->ctx, 3, shape, GM_FLOAT32, GM_ORDER_C, &a);
        break;
    case 2:
        call = "gm_device_array (invalid dtype)";
        want = GM_ERR_DTYPE;
        got = gm_device_array(m->ctx, 1, shape, (gm_dtype){9, 32, 1}, GM_ORDER_C, &a);
        break;
    case 3:
        call = "gm_device_array_strided (NULL strides)";
        want = GM_ERR_NULL_POINTER;
        got = gm_device_array_strided(m->ctx, 2, shape, NULL, GM_INT16, &a);
        break;
    case 4:
        call = "gm_to_device (NULL host)";
        want = GM_ERR_NULL_POINTER;
        got = gm_to_device(m->ctx, NULL, NULL, &a);
        break;
    case 5:
        call = "gm_device_array (too many dims)";
        want = GM_ERR_TOO_MANY_DIMS;
        got = gm_device_array(m->ctx, GM_MAX_DIMS + 1, shape, GM_UINT8, GM_ORDER_C, &a);
        break;
    default:
        break;
    }
    if (h != NULL && how % 12 >= 6) {
        v = *gm_array_view(h->a);
        w = v;
        switch (how % 12) {
        case 6: /* a host view one element longer on the last axis (or one axis more) */
            call = "gm_copy (shape mismatch)";
            want = GM_ERR_SHAPE_MISMATCH;
            if (w.ndim > 0)
                w.shape[w.ndim - 1]++;
            else
                w.shape[w.ndim++] = 2;
            w.data = scratch[0];
            w.offset = 0;
            w.memory = GM_MEMORY_HOST;
            w.device_id = -1;
            gm_contiguous_strides(w.ndim, w.shape, (int64_t)gm_dtype_itemsize(w.dtype), GM_ORDER_C,
                                  w.strides);
            got = how & 16 ? gm_array_copy_to_host(h->a, &w, NULL) : gm_copy(m->ctx, &v, &w, NULL);
            break;
        case 7:
            call = "gm_copy (dtype mismatch)";
            want = GM_ERR_DTYPE;
            w.dtype = gm_dtype_itemsize(v.dtype) == 8 ? GM_INT32 : GM_FLOAT64;
            gm_ndview_init(scratch[0], w.dtype, w.ndim, w.shape, NULL, GM_ORDER_C, &w);
            got =
                how & 16 ? gm_array_copy_to_device(h->a, &w, NULL) : gm_copy(m->ctx, &w, &v, NULL);
            break;
        case 8:
            call = "gm_copy (NULL source)";
            want = GM_ERR_NULL_POINTER;
            got = gm_copy(m->ctx, &v, NULL, NULL);
            break;
        case 9:
            call = fuzz_elements(&v) > 0 ? "gm_copy (a view onto itself)"
                                         : "gm_array_memset (byte 256)";
            want = GM_ERR_INVALID_ARG;
            got = fuzz_elements(&v) > 0 ? gm_copy(m->ctx, &v, &v, NULL)
                                        : gm_array_memset(h->a, 256, NULL);
            break;
        case 10:
            call = v.ndim > 0 ? "gm_array_getitem (index out of range)" : "gm_array_fill (NULL)";
            want = v.ndim > 0 ? GM_ERR_OUT_OF_RANGE : GM_ERR_NULL_POINTER;
            if (v.ndim > 0) {
                gm_index_item item = GM_IDX_INT(how & 16 ? v.shape[0] : -v.shape[0] - 1);

                got = gm_array_getitem(h->a, 1, &item, &a);
            } else {
                got = gm_array_fill(h->a, NULL, NULL);
            }
            break;
        default: { /* a view past the end of the buffer */
            const mbuf *b = &m->bufs[h->buf];

            if (fuzz_elements(&v) == 0)
                return;
            call = "gm_array_derive (outside the buffer)";
            want = GM_ERR_OUT_OF_RANGE;
            w.offset += how & 16 ? b->bytes : -b->bytes;
            got = gm_array_derive(h->a, &w, &a);
            break;
        }
        }
    }
    if (call[0] == '\0')
        return;
    say("  bad call: %s", call);
    expect_error(got, want, call);
    if (a != sentinel)
        fail("%s failed but wrote its output", call);
    expect_status(gm_deallocations_stats(m->ctx, &after), GM_OK, "gm_deallocations_stats");
    expect_status(gm_context_memory_info(m->ctx, &free1, &total1), GM_OK, "gm_context_memory_info");
    if (memcmp(&before, &after, sizeof before) != 0 || free0 != free1 || total0 != total1)
        fail("%s failed but changed the queue or the memory in use", call);
}

typedef void (*op_fn)(model *m, reader *r);

static const struct {
    op_fn fn;
    const char *name;
} ops[] = {
    {op_create, "create"},
    {op_create_strided, "create_strided"},
    {op_create_like, "create_like"},
    {op_to_device, "to_device"},
    {op_copy_to_host_new, "copy_to_host_new"},
    {op_to_host, "to_host"},
    {op_to_device_copy, "to_device_copy"},
    {op_copy, "copy"},
    {op_copy, "copy"},
    {op_fill, "fill"},
    {op_view, "view"},
    {op_view, "view"},
    {op_retain, "retain"},
    {op_release, "release"},
    {op_release, "release"},
    {op_defer, "defer"},
    {op_flush, "flush"},
    {op_stream, "stream"},
    {op_bad, "bad"},
};
#define NOPS (int)(sizeof ops / sizeof ops[0])

/* Release everything, check the queue empties and no device memory stays in use. */
static void finish(model *m)
{
    int64_t free_b = 0, total = 0;
    bool close = m->depth == 0 || (m->flushes & 1) == 0;

    current_op = "the final release";
    sync_stream(m);
    if (m->stream != NULL) {
        gm_stream_destroy(&m->stream);
        model_push_other(m);
        check_queue(m);
    }
    for (int i = 0; i < MAX_HANDLES; i++)
        while (m->h[i].a != NULL) {
            release_handle(m, &m->h[i]);
            check_queue(m);
        }
    if (close) { /* else the context is destroyed inside defer_cleanup */
        while (m->depth > 0) {
            expect_status(gm_defer_cleanup_end(m->ctx), GM_OK, "gm_defer_cleanup_end");
            m->depth--;
        }
        expect_status(gm_deallocations_flush(m->ctx), GM_OK, "gm_deallocations_flush");
        model_flush(m);
        check_queue(m);
        check_kinds(m);
        expect_status(gm_context_memory_info(m->ctx, &free_b, &total), GM_OK,
                      "gm_context_memory_info");
        if (free_b != total)
            fail("%lld bytes of device memory in use after releasing everything and a flush",
                 (long long)(total - free_b));
    }
    gm_context_destroy(&m->ctx);
    for (int i = 0; i < m->nbufs; i++) {
        free(m->bufs[i].img);
        free(m->bufs[i].known);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size};
    model *m = &M;
    gm_context_options o;
    uint8_t count = take_u8(&r), ratio = take_u8(&r), pinned = take_u8(&r);

    memset(m, 0, sizeof *m);
    current_op = "setup";
    gm_context_options_default(&o);
    o.backend = GM_BACKEND_HOST;
    o.max_pending_count = count % 16;
    /* k KiB of the 64 MiB device (exact in double), or the whole device */
    o.max_pending_ratio = ratio % 64 == 0 ? 1.0 : (double)(ratio % 64) * 1024.0 / DEVICE_MEM;
    o.max_pending_pinned_bytes = pinned % 32 == 0 ? (int64_t)1 << 30 : (int64_t)(pinned % 32) * 512;
    m->max_count = o.max_pending_count;
    m->max_device = ratio % 64 == 0 ? DEVICE_MEM : (int64_t)(ratio % 64) * 1024;
    m->max_pinned = o.max_pending_pinned_bytes;
    expect_status(gm_context_create(&o, &m->ctx), GM_OK, "gm_context_create");
    say("context: max count %lld, device bytes %lld, pinned bytes %lld", (long long)m->max_count,
        (long long)m->max_device, (long long)m->max_pinned);
    for (int n = 0; n < MAX_OPS && r.n > 0; n++) {
        int op = take_u8(&r) % NOPS;

        current_op = ops[op].name;
        ops[op].fn(m, &r);
        check_queue(m);
        check_all(m);
    }
    finish(m);
    return 0;
}
