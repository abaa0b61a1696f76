/*
 * libFuzzer target for the ndarray descriptor code (src/core/ndview.c,
 * views.c, reshape.c).
 *
 * The input decodes into one descriptor (any ndim, dtype, extents, strides
 * and offset, from tame to hostile) and a sequence of up to MAX_OPS view
 * operations, each applied to the result of the previous successful one.
 * Every call is checked against invariants that hold for any input:
 *
 *   - no crash and no undefined behaviour (built with ASan and UBSan);
 *   - a call on a descriptor that does not validate fails;
 *   - on GM_OK the result validates, keeps data, memory and device, and its
 *     byte extent lies inside the extent of its source (empty results are
 *     exempt: their offset may sit one element past the end, like numpy's);
 *   - reshape, ravel, transpose, permute, swapaxes, squeeze and expand_dims
 *     keep the element count; view_dtype keeps the byte count;
 *   - reshape / ravel of a view contiguous in the requested order never
 *     reports GM_ERR_NEEDS_COPY;
 *   - on an error the output is untouched;
 *   - the same call with the output aliasing the input gives the same result;
 *   - a NULL view or output is an error;
 *   - split's pieces lie inside the source and add up to it; like gives a
 *     dense layout; extent and contiguity agree; gm_format_shape terminates.
 *
 * FUZZ_NDVIEW_TRACE=1 in the environment prints each decoded step, to turn
 * a reproducer into a readable sequence of calls.
 *
 * A broken invariant prints what broke and aborts, which libFuzzer records
 * as a crash with its reproducer. Build and run: tests/fuzz/run_fuzz.sh.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_reader.h"
#include "gpumem/ndview.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_OPS    24
#define MAX_ITEMS  12
#define MAX_PIECES 8
#define FAKE_DATA  ((void *)(uintptr_t)0x40000000u) /* never dereferenced */

/* One operation's call: the source, the output and what it returned. */
typedef struct call {
    gm_ndview in;     /* the source */
    gm_ndview before; /* the output before the call */
    gm_ndview out;    /* the output after the call */
    gm_status status;
    const char *what; /* operation name for messages */
} call;

static const gm_dtype dtypes[] = {
    GM_BOOL,
    GM_INT8,
    GM_INT16,
    GM_INT32,
    GM_INT64,
    GM_UINT8,
    GM_UINT16,
    GM_UINT32,
    GM_UINT64,
    GM_FLOAT16,
    GM_FLOAT32,
    GM_FLOAT64,
    GM_BFLOAT16,
    GM_COMPLEX64,
    GM_COMPLEX128,
    {GM_DTYPE_FLOAT, 32, 4},
    {GM_DTYPE_INT, 8, 3},
    {GM_DTYPE_FLOAT, 7, 1},
    {9, 8, 1},
    {GM_DTYPE_INT, 64, 0},
};
#define N_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

static const int64_t edge_values[] = {
    INT64_MIN,
    INT64_MIN + 1,
    INT64_MAX,
    INT64_MAX - 7,
    INT64_MAX / 2,
    (int64_t)1 << 32,
    (int64_t)1 << 40,
    (int64_t)1 << 62,
    -((int64_t)1 << 62),
    -1,
    0,
    1,
    3037000499,
    -3037000500,
};
#define N_EDGES (sizeof(edge_values) / sizeof(edge_values[0]))

/* With FUZZ_NDVIEW_TRACE set, print each step (to describe a reproducer). */
static int tracing(void)
{
    static int state = -1;

    if (state < 0)
        state = getenv("FUZZ_NDVIEW_TRACE") != NULL;
    return state;
}

static void trace_view(const char *label, const gm_ndview *v)
{
    int n = v->ndim < 0 ? 0 : v->ndim > GM_MAX_DIMS ? GM_MAX_DIMS : v->ndim;

    if (!tracing())
        return;
    fprintf(stderr, "%s: data=%p offset=%lld dtype={%u,%u,%u} ndim=%d memory=%d device=%d\n", label,
            v->data, (long long)v->offset, v->dtype.code, v->dtype.bits, v->dtype.lanes,
            (int)v->ndim, (int)v->memory, (int)v->device_id);
    fprintf(stderr, "    shape/strides:");
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %lld/%lld", (long long)v->shape[i], (long long)v->strides[i]);
    fprintf(stderr, "\n");
}

static void fail(const call *c, const char *why)
{
    fprintf(stderr, "fuzz_ndview: %s: %s (status %s)\n", c->what, why, gm_status_name(c->status));
    fprintf(stderr, "  detail: %s\n", gm_last_error_message());
    abort();
}

/* An integer: usually small, sometimes an edge value, rarely any 64 bits. */
static int64_t take_int(reader *r)
{
    uint8_t k = take_u8(r);

    if (k < 160)
        return (int64_t)(k % 20) - 8;
    if (k < 220)
        return (int64_t)take_u8(r) - 128;
    if (k < 245)
        return edge_values[take_u8(r) % N_EDGES];
    return (int64_t)take_u64(r);
}

/* An extent: mostly 0..5, sometimes anything take_int gives. */
static int64_t take_extent(reader *r)
{
    uint8_t k = take_u8(r);

    if (k < 230)
        return k % 6;
    return take_int(r);
}

static gm_order take_order(reader *r)
{
    static const gm_order orders[] = {GM_ORDER_C, GM_ORDER_F, GM_ORDER_A, GM_ORDER_K,
                                      (gm_order)'x'};
    uint8_t k = take_u8(r);

    return orders[k < 240 ? k % 4 : 4];
}

/* ndim: mostly 0..6, sometimes the limits and beyond. */
static int take_ndim(reader *r)
{
    static const int edges[] = {GM_MAX_DIMS, GM_MAX_DIMS + 1, -1, 40, INT32_MIN};
    uint8_t k = take_u8(r);

    if (k < 245)
        return k % 7;
    return edges[k % 5];
}

/* Strides for v's shape: C/F contiguous, then scaled, flipped or replaced. */
static void take_strides(reader *r, gm_ndview *v, int n)
{
    uint8_t layout = take_u8(r);
    int64_t itemsize = (int64_t)gm_dtype_itemsize(v->dtype);

    if (itemsize <= 0 ||
        gm_contiguous_strides(n, v->shape, itemsize, layout & 1 ? GM_ORDER_F : GM_ORDER_C,
                              v->strides) != GM_OK) {
        for (int i = 0; i < n; i++)
            v->strides[i] = take_int(r);
        return;
    }
    for (int i = 0; i < n && (layout & 2) != 0; i++) {
        uint8_t k = take_u8(r);

        int64_t stride = v->strides[i];

        if (k < 64)
            continue;
        else if (k < 128)
            stride = -stride;
        else if (k < 192)
            stride = __builtin_mul_overflow(stride, (k % 4) + 1, &stride) ? 0 : stride;
        else
            stride = __builtin_mul_overflow(itemsize, take_int(r), &stride) ? 1 : stride;
        if (k == 255 && stride < INT64_MAX)
            stride++; /* unaligned */
        v->strides[i] = stride;
    }
}

static void decode_view(reader *r, gm_ndview *v)
{
    int ndim = take_ndim(r);
    int n = ndim < 0 ? 0 : ndim > GM_MAX_DIMS ? GM_MAX_DIMS : ndim;
    uint8_t k = take_u8(r);

    memset(v, 0, sizeof(*v));
    v->data = (k & 1) ? FAKE_DATA : NULL;
    v->dtype = dtypes[take_u8(r) % N_DTYPES];
    v->ndim = ndim;
    v->memory = (int32_t)(k >> 1) % 5;
    v->device_id = v->memory == GM_MEMORY_HOST ? -1 : (k >> 4);
    v->offset = (k & 8) ? take_int(r) : 64 * (int64_t)take_u8(r);
    for (int i = 0; i < n; i++)
        v->shape[i] = take_extent(r);
    take_strides(r, v, n);
}

static int64_t size_of(const gm_ndview *v)
{
    int64_t size = 1;

    for (int i = 0; i < v->ndim; i++)
        size *= v->shape[i];
    return size;
}

/* Whether the fields that carry meaning are equal (entries past ndim are not). */
static int same_view(const gm_ndview *a, const gm_ndview *b)
{
    size_t n = (size_t)(a->ndim > 0 ? a->ndim : 0) * sizeof(int64_t);

    return a->data == b->data && a->offset == b->offset && gm_dtype_equal(a->dtype, b->dtype) &&
           a->ndim == b->ndim && a->memory == b->memory && a->device_id == b->device_id &&
           memcmp(a->shape, b->shape, n) == 0 && memcmp(a->strides, b->strides, n) == 0;
}

/* The result of a successful call addresses bytes of its source only. */
static void check_inside(const call *c, const gm_ndview *res)
{
    int64_t lo = 0, hi = 0, rlo = 0, rhi = 0;

    if (gm_ndview_validate(res) != GM_OK)
        fail(c, "result does not validate");
    if (gm_ndview_extent(res, &rlo, &rhi) != GM_OK)
        fail(c, "gm_ndview_extent fails on a valid result");
    if (size_of(res) == 0)
        return;
    if (gm_ndview_extent(&c->in, &lo, &hi) != GM_OK)
        fail(c, "gm_ndview_extent fails on the valid source");
    if (rlo < lo || rhi > hi)
        fail(c, "result reaches bytes outside its source");
}

/* Common checks of one call; `keep`: 1 same element count, 2 same byte count. */
static void check_call(const call *c, int keep)
{
    int valid = gm_ndview_validate(&c->in) == GM_OK;

    if (c->status != GM_OK) {
        if (memcmp(&c->out, &c->before, sizeof(c->out)) != 0)
            fail(c, "output written on failure");
        return;
    }
    if (!valid)
        fail(c, "succeeded on a source that does not validate");
    check_inside(c, &c->out);
    if (c->out.data != c->in.data || c->out.memory != c->in.memory ||
        c->out.device_id != c->in.device_id)
        fail(c, "data, memory or device changed");
    if (keep == 1 && size_of(&c->out) != size_of(&c->in))
        fail(c, "element count changed");
    if (keep == 2 && gm_ndview_nbytes(&c->out) != gm_ndview_nbytes(&c->in))
        fail(c, "byte count changed");
}

/* Every operation on one view, with its parameters. */
typedef struct op_args {
    int ndim;
    int64_t shape[GM_MAX_DIMS + 1];
    int axes[GM_MAX_DIMS + 1];
    gm_order order;
    int axis;
    int axis2;
    int64_t index;
    gm_slice slice;
    gm_dtype dtype;
    int nitems;
    gm_index_item items[MAX_ITEMS];
} op_args;

typedef gm_status (*op_fn)(const gm_ndview *in, const op_args *a, gm_ndview *out);

static gm_status do_reshape(const gm_ndview *in, const op_args *a, gm_ndview *out)
{
    return gm_ndview_reshape(in, a->ndim, a->shape, a->order, out);
}

static gm_status do_ravel(const gm_ndview *in, const op_args *a, gm_ndview *out)
{
    return gm_ndview_ravel(in, a->order, out);
}

static gm_status do_transpose(const gm_ndview *in, const op_args *a, gm_ndview *out)
{
    (void)a;
    return gm_ndview_transpose(in, out);
}

static gm_status do_permute(const gm_ndview *in, const op_args *a, gm_ndview *out)
{
    return gm_ndview_permute(in, a->ndim, a->axes, out);
}

static gm_status do_swapaxes(const gm_ndview *in, const op_args *a, gm_ndview *out)
{
    return gm_ndview_swapaxes(in, a->axis, a->axis2, out);
}

static gm_status do_squeeze(const gm_ndview *in, const op_args *a, gm_ndview *out)
{
    return gm_ndview_squeeze(in, a->ndim, a->ndim == 0 ? NULL : a->axes, out);
}

static gm_status do_expand_dims(const gm_ndview *in, const op_args *a, gm_ndview *out)
{
    return gm_ndview_expand_dims(in, a->axis, out);
}

static gm_status do_view_dtype(const gm_ndview *in, const op_args *a, gm_ndview *out)
{
    return gm_ndview_view_dtype(in, a->dtype, out);
}

static gm_status do_slice(const gm_ndview *in, const op_args *a, gm_ndview *out)
{
    return gm_ndview_slice(in, a->axis, a->slice, out);
}

static gm_status do_index(const gm_ndview *in, const op_args *a, gm_ndview *out)
{
    return gm_ndview_index(in, a->axis, a->index, out);
}

static gm_status do_getitem(const gm_ndview *in, const op_args *a, gm_ndview *out)
{
    return gm_ndview_getitem(in, a->nitems, a->items, out);
}

/* A table row: the call, its name, what it keeps (see check_call). */
typedef struct op_desc {
    op_fn fn;
    const char *name;
    int keep;
} op_desc;

static const op_desc ops[] = {
    {do_reshape, "reshape", 1},
    {do_ravel, "ravel", 1},
    {do_transpose, "transpose", 1},
    {do_permute, "permute", 1},
    {do_swapaxes, "swapaxes", 1},
    {do_squeeze, "squeeze", 1},
    {do_expand_dims, "expand_dims", 1},
    {do_view_dtype, "view_dtype", 2},
    {do_slice, "slice", 0},
    {do_index, "index", 0},
    {do_getitem, "getitem", 0},
};
#define N_OPS (sizeof(ops) / sizeof(ops[0]))

static gm_slice take_slice(reader *r)
{
    uint8_t k = take_u8(r);
    gm_slice s;

    s.start = (k & 1) ? GM_NONE : take_int(r);
    s.stop = (k & 2) ? GM_NONE : take_int(r);
    s.step = (k & 4) ? GM_NONE : take_int(r);
    return s;
}

static void take_items(reader *r, op_args *a)
{
    a->nitems = take_u8(r) % (MAX_ITEMS + 1);
    for (int i = 0; i < a->nitems; i++) {
        uint8_t k = take_u8(r);

        a->items[i].kind = (gm_index_kind)(k < 250 ? k % 4 : k % 8);
        a->items[i].index = take_int(r);
        a->items[i].slice = take_slice(r);
    }
}

/* Shape and axes: a count (sometimes hostile) and that many entries. */
static void take_lists(reader *r, op_args *a, int source_ndim)
{
    uint8_t k = take_u8(r);
    int n = k < 200 ? k % 8 : k < 250 ? source_ndim : (k == 250 ? -1 : GM_MAX_DIMS + 1);
    int m = n < 0 ? 0 : n;

    a->ndim = n;
    for (int i = 0; i < m; i++) {
        uint8_t kind = take_u8(r);

        a->shape[i] = kind < 40 ? -1 : take_extent(r);
        a->axes[i] = kind < 200 ? (int)(kind % 8) - 2 : (int)take_int(r);
    }
}

static void decode_args(reader *r, op_args *a, int source_ndim)
{
    memset(a, 0, sizeof(*a));
    take_lists(r, a, source_ndim);
    a->order = take_order(r);
    a->axis = (int)take_int(r);
    a->axis2 = (int)take_int(r);
    a->index = take_int(r);
    a->slice = take_slice(r);
    a->dtype = dtypes[take_u8(r) % N_DTYPES];
    take_items(r, a);
}

static void trace_slice(const char *label, gm_slice s)
{
    fprintf(stderr, "%s", label);
    if (s.start != GM_NONE)
        fprintf(stderr, "%lld", (long long)s.start);
    fprintf(stderr, ":");
    if (s.stop != GM_NONE)
        fprintf(stderr, "%lld", (long long)s.stop);
    if (s.step != GM_NONE)
        fprintf(stderr, ":%lld", (long long)s.step);
}

/* The arguments of an operation (all of them; each operation uses some). */
static void trace_args(const char *name, const op_args *a)
{
    int n = a->ndim < 0 ? 0 : a->ndim > GM_MAX_DIMS + 1 ? GM_MAX_DIMS + 1 : a->ndim;

    if (!tracing())
        return;
    fprintf(stderr, "%s: n=%d shape/axes=[", name, a->ndim);
    for (int i = 0; i < n; i++)
        fprintf(stderr, "%s%lld/%d", i ? " " : "", (long long)a->shape[i], a->axes[i]);
    fprintf(stderr, "] order=%d axis=%d axis2=%d index=%lld dtype={%u,%u,%u}", (int)a->order,
            a->axis, a->axis2, (long long)a->index, a->dtype.code, a->dtype.bits, a->dtype.lanes);
    trace_slice(" slice=", a->slice);
    fprintf(stderr, " items=[");
    for (int i = 0; i < a->nitems; i++) {
        const gm_index_item *it = &a->items[i];

        if (it->kind == GM_INDEX_INT)
            fprintf(stderr, " %lld", (long long)it->index);
        else if (it->kind == GM_INDEX_SLICE)
            trace_slice(" ", it->slice);
        else
            fprintf(stderr, " %s",
                    it->kind == GM_INDEX_NEWAXIS    ? "None"
                    : it->kind == GM_INDEX_ELLIPSIS ? "..."
                                                    : "bad-kind");
    }
    fprintf(stderr, " ]\n");
}

/* A reshape or ravel of a view already contiguous in that order is a view. */
static void check_no_false_copy(const call *c, const op_desc *op, const op_args *a)
{
    gm_order order = a->order;
    int c_contig = 0, f_contig = 0;

    if (c->status != GM_ERR_NEEDS_COPY)
        return;
    if (op->fn != do_reshape && op->fn != do_ravel)
        fail(c, "GM_ERR_NEEDS_COPY from an operation that never copies");
    if (gm_ndview_validate(&c->in) != GM_OK)
        fail(c, "GM_ERR_NEEDS_COPY for a source that does not validate");
    c_contig = gm_ndview_is_c_contiguous(&c->in);
    f_contig = gm_ndview_is_f_contiguous(&c->in);
    if (order == GM_ORDER_A || order == GM_ORDER_K)
        order = (f_contig && !c_contig) ? GM_ORDER_F : GM_ORDER_C;
    if ((order == GM_ORDER_C && c_contig) || (order == GM_ORDER_F && f_contig))
        fail(c, "GM_ERR_NEEDS_COPY for a view contiguous in the requested order");
}

/* Run op on *cur, check it, once more with the output aliasing the input. */
static void run_op(const op_desc *op, const op_args *a, gm_ndview *cur)
{
    call c;
    gm_ndview alias = *cur;
    gm_status alias_status;

    c.in = *cur;
    c.what = op->name;
    memset(&c.before, 0xA5, sizeof(c.before));
    c.out = c.before;
    trace_args(op->name, a);
    c.status = op->fn(&c.in, a, &c.out);
    if (tracing())
        fprintf(stderr, "  -> %s\n", gm_status_name(c.status));
    if (c.status == GM_OK)
        trace_view("  result", &c.out);
    check_call(&c, op->keep);
    check_no_false_copy(&c, op, a);
    if (op->fn(&c.in, a, NULL) == GM_OK || op->fn(NULL, a, &alias) == GM_OK)
        fail(&c, "succeeded with a NULL view or output");
    alias_status = op->fn(&alias, a, &alias);
    if (alias_status != c.status)
        fail(&c, "status differs when the output aliases the input");
    if (c.status == GM_OK ? !same_view(&alias, &c.out) : memcmp(&alias, cur, sizeof(alias)) != 0)
        fail(&c, "aliased call gives another result");
    if (c.status == GM_OK)
        *cur = c.out;
}

/* like: a dense new layout with the same shape, no data, offset 0. */
static void run_like(const gm_ndview *cur)
{
    call c = {.in = *cur, .what = "like"};
    int64_t lo = 0, hi = 0;

    memset(&c.before, 0xA5, sizeof(c.before));
    c.out = c.before;
    c.status = gm_ndview_like(&c.in, &c.out);
    if (tracing())
        fprintf(stderr, "like -> %s\n", gm_status_name(c.status));
    if (c.status != GM_OK) {
        check_call(&c, 0);
        return;
    }
    if (gm_ndview_validate(&c.in) != GM_OK)
        fail(&c, "succeeded on a source that does not validate");
    if (c.out.data != NULL || c.out.offset != 0 || c.out.ndim != cur->ndim ||
        memcmp(c.out.shape, cur->shape, (size_t)cur->ndim * sizeof(int64_t)) != 0)
        fail(&c, "not a fresh layout of the same shape");
    if (!gm_dtype_equal(c.out.dtype, cur->dtype) || c.out.memory != cur->memory ||
        c.out.device_id != cur->device_id)
        fail(&c, "dtype, memory or device changed");
    if (gm_ndview_extent(&c.out, &lo, &hi) != GM_OK)
        fail(&c, "extent of the result fails");
    if (size_of(&c.out) > 0 && (lo != 0 || hi != gm_ndview_nbytes(&c.out)))
        fail(&c, "result is not dense");
}

static void check_pieces(const call *c, const gm_ndview *pieces, int64_t count, int64_t cap)
{
    int64_t total = 0;
    int64_t n = count < cap ? count : cap;

    for (int64_t i = 0; i < n; i++) {
        check_inside(c, &pieces[i]);
        total += size_of(&pieces[i]);
    }
    if (c->status == GM_OK && count <= cap && total != size_of(&c->in))
        fail(c, "pieces do not add up to the source");
    for (int64_t i = n; i < MAX_PIECES; i++) {
        if (memcmp(&pieces[i], &c->before, sizeof(c->before)) != 0)
            fail(c,
                 c->status == GM_OK ? "piece written past the count" : "piece written on failure");
    }
}

static void run_split(reader *r, const gm_ndview *cur)
{
    call c = {.in = *cur, .what = "split"};
    gm_ndview pieces[MAX_PIECES];
    int64_t section = take_int(r);
    int64_t cap = take_u8(r) % (MAX_PIECES + 1);
    int64_t count = -12345;

    memset(&c.before, 0xA5, sizeof(c.before));
    for (int i = 0; i < MAX_PIECES; i++)
        pieces[i] = c.before;
    c.out = c.before;
    c.status = gm_ndview_split(&c.in, section, cap, cap > 0 ? pieces : NULL, &count);
    if (tracing())
        fprintf(stderr, "split(section=%lld, max_pieces=%lld) -> %s count=%lld\n",
                (long long)section, (long long)cap, gm_status_name(c.status), (long long)count);
    if (c.status != GM_OK) {
        if (count != -12345)
            fail(&c, "count written on failure");
        check_pieces(&c, pieces, 0, 0);
        return;
    }
    if (gm_ndview_validate(&c.in) != GM_OK)
        fail(&c, "succeeded on a source that does not validate");
    if (count < 0)
        fail(&c, "negative count");
    check_pieces(&c, pieces, count, cap);
}

/* The extent [lo, hi) of a valid view: ordered, and dense when contiguous. */
static void check_extent(const call *c, int64_t lo, int64_t hi)
{
    int64_t width = 0;

    if (gm_ndview_validate(&c->in) != GM_OK)
        fail(c, "succeeded on a source that does not validate");
    if (lo > hi)
        fail(c, "extent with lo > hi");
    /* A valid view's span hi - lo fits in int64_t (ndview.h). */
    if (__builtin_sub_overflow(hi, lo, &width))
        fail(c, "extent whose span hi - lo overflows");
    if (size_of(&c->in) == 0)
        return;
    if (width < gm_ndview_itemsize(&c->in))
        fail(c, "extent narrower than one element");
    if (gm_ndview_is_contiguous(&c->in) && width != gm_ndview_nbytes(&c->in))
        fail(c, "contiguous view whose extent is not its byte size");
}

/* Queries that return values: extent, contiguity, formatting. */
static void run_queries(reader *r, const gm_ndview *cur)
{
    call c = {.in = *cur, .what = "extent"};
    int64_t lo = -7, hi = -7;
    char buf[48];
    size_t size = take_u8(r) % sizeof(buf);

    c.status = gm_ndview_extent(cur, &lo, &hi);
    if (c.status == GM_OK) {
        check_extent(&c, lo, hi);
    } else if (lo != -7 || hi != -7) {
        fail(&c, "output written on failure");
    }
    memset(buf, 'x', sizeof(buf));
    gm_format_shape(cur->ndim, cur->shape, size > 0 ? buf : NULL, size);
    if (size > 0 && memchr(buf, '\0', size) == NULL)
        fail(&c, "gm_format_shape did not terminate its output");
}

static void run_one(reader *r, gm_ndview *cur)
{
    uint8_t k = take_u8(r);
    op_args a;

    if (k >= 240) {
        run_like(cur);
        return;
    }
    if (k >= 225) {
        run_split(r, cur);
        return;
    }
    if (k >= 210) {
        run_queries(r, cur);
        return;
    }
    decode_args(r, &a, cur->ndim);
    run_op(&ops[k % N_OPS], &a, cur);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size};
    gm_ndview cur;

    decode_view(&r, &cur);
    trace_view("input", &cur);
    run_queries(&r, &cur);
    for (int i = 0; i < MAX_OPS && r.n > 0; i++)
        run_one(&r, &cur);
    return 0;
}
