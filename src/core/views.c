/*
 * View operations on the ndarray descriptor, with numpy's semantics:
 * transpose / permute / swapaxes, slicing, integer and basic indexing,
 * expand_dims, squeeze, dtype views, Numba's split, and the layout of a new
 * array like another one (numpy's empty_like(order='K')). reshape and ravel
 * live in reshape.c.
 *
 * Every operation validates its input, builds the result in a local
 * descriptor and writes *out_p only on success, so out_p may alias the input.
 * Results keep data, memory and device_id (gm_ndview_like clears data).
 */
#include <string.h>

#include "core.h"
#include "ndview_internal.h"

/* Validate the input view and require an output pointer; errors name `fn`. */
static gm_status check_io(const char *fn, const gm_ndview *view, const void *out_p)
{
    gm_status status = gm__validate(fn, view);

    if (status != GM_OK)
        return status;
    if (out_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: out_p is NULL", fn);
    return GM_OK;
}

/*
 * Wrap an axis in [-ndim, ndim) into [0, ndim) like numpy's
 * normalize_axis_index; `prefix` ("" or "axis1: ") starts the detail as in
 * numpy's AxisError.
 */
static gm_status normalize_axis(const char *fn, const char *prefix, int axis, int ndim, int *axis_p)
{
    if (axis < -ndim || axis >= ndim)
        return gm__error(GM_ERR_OUT_OF_RANGE,
                         "%s: %saxis %d is out of bounds for array of dimension %d", fn, prefix,
                         axis, ndim);
    *axis_p = axis < 0 ? axis + ndim : axis;
    return GM_OK;
}

/*
 * a * b modulo 2^64, like numpy's unchecked npy_intp products. Used only
 * where numpy does not check either: the stride of a sliced axis (it can
 * wrap only when the result has at most one element, so the stride never
 * addresses memory; numpy's a[::2**62] on float64 has stride 0) and the
 * strides reshape gives extent-1 axes.
 */
static int64_t wrap_mul(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a * (uint64_t)b);
}

/* Remove axis `axis` of v, shifting the later axes down. */
static void remove_axis(gm_ndview *v, int axis)
{
    for (int i = axis; i + 1 < v->ndim; i++) {
        v->shape[i] = v->shape[i + 1];
        v->strides[i] = v->strides[i + 1];
    }
    v->ndim--;
    v->shape[v->ndim] = 0;
    v->strides[v->ndim] = 0;
}

/* Insert an axis (extent, stride) before axis `axis`; the caller checked ndim < GM_MAX_DIMS. */
static void insert_axis(gm_ndview *v, int axis, int64_t extent, int64_t stride)
{
    for (int i = v->ndim; i > axis; i--) {
        v->shape[i] = v->shape[i - 1];
        v->strides[i] = v->strides[i - 1];
    }
    v->shape[axis] = extent;
    v->strides[axis] = stride;
    v->ndim++;
}

/*
 * One bound of Python's slice.indices(length) (PySlice_AdjustIndices):
 * GM_NONE gives `dflt`, negative bounds wrap once, then clamp.
 */
static int64_t adjust_bound(int64_t bound, int64_t length, int64_t step, int64_t dflt)
{
    if (bound == GM_NONE)
        return dflt;
    if (bound < 0) {
        bound += length;
        if (bound < 0)
            bound = step < 0 ? -1 : 0;
    } else if (bound >= length) {
        bound = step < 0 ? length - 1 : length;
    }
    return bound;
}

/*
 * Slice one axis of extent `extent` and byte stride `stride` (step != 0):
 * the new extent and stride, and the bytes to add to the offset. Like numpy's
 * get_view_from_index, an empty result starts at index 0 with step 1, so it
 * keeps the offset and the axis's own stride. Returns nonzero when a product
 * that addresses memory overflows (a stride of a result with one element or
 * none never does, so it wraps as numpy's does).
 */
static int slice_axis(gm_slice s, int64_t extent, int64_t stride, int64_t *extent_p,
                      int64_t *stride_p, int64_t *delta_p)
{
    int64_t step = s.step == GM_NONE ? 1 : s.step;
    int64_t start = adjust_bound(s.start, extent, step, step < 0 ? extent - 1 : 0);
    int64_t stop = adjust_bound(s.stop, extent, step, step < 0 ? -1 : extent);
    int64_t n = 0;

    if (step < 0 && stop < start)
        n = (start - stop - 1) / (-step) + 1;
    else if (step > 0 && start < stop)
        n = (stop - start - 1) / step + 1;
    if (n == 0) {
        start = 0;
        step = 1;
    }
    *extent_p = n;
    if (n > 1 && gm__mul_overflow(stride, step, stride_p))
        return -1;
    if (n <= 1)
        *stride_p = wrap_mul(stride, step);
    return gm__mul_overflow(start, stride, delta_p);
}

/* Add `delta` to the offset of r; GM_ERR_OVERFLOW naming fn when it does not fit. */
static gm_status shift_offset(const char *fn, gm_ndview *r, int axis, int overflowed, int64_t delta)
{
    if (overflowed != 0 || gm__add_overflow(r->offset, delta, &r->offset))
        return gm__error(GM_ERR_OVERFLOW, "%s: the byte offset of the view overflows (axis %d)", fn,
                         axis);
    return GM_OK;
}

/* GM_ERR_INVALID_ARG for a slice step of 0 (Python's ValueError). */
static gm_status check_step(const char *fn, gm_slice s, int axis)
{
    if (s.step == 0)
        return gm__error(GM_ERR_INVALID_ARG, "%s: slice step cannot be zero (axis %d)", fn, axis);
    return GM_OK;
}

/*
 * The byte offset of integer index `index` on an axis (negative wraps once),
 * or GM_ERR_OUT_OF_RANGE with numpy's message naming the axis and extent.
 */
static gm_status index_axis(const char *fn, int64_t index, int axis, int64_t extent, int64_t stride,
                            int64_t *delta_p)
{
    int64_t i = index < 0 ? index + extent : index;

    if (i < 0 || i >= extent)
        return gm__error(GM_ERR_OUT_OF_RANGE,
                         "%s: index %lld is out of bounds for axis %d with size %lld", fn,
                         (long long)index, axis, (long long)extent);
    if (gm__mul_overflow(i, stride, delta_p))
        return gm__error(GM_ERR_OVERFLOW, "%s: index %lld times stride %lld overflows (axis %d)",
                         fn, (long long)index, (long long)stride, axis);
    return GM_OK;
}

/* numpy's a.T: the axes in reverse order, same offset. */
gm_status gm_ndview_transpose(const gm_ndview *view, gm_ndview *out_p)
{
    gm_status status = check_io("gm_ndview_transpose", view, out_p);
    gm_ndview r;

    if (status != GM_OK)
        return status;
    r = *view;
    for (int i = 0; i < view->ndim; i++) {
        r.shape[i] = view->shape[view->ndim - 1 - i];
        r.strides[i] = view->strides[view->ndim - 1 - i];
    }
    gm__put_view(out_p, &r);
    return GM_OK;
}

/* Fill r's axes from view's in the order `axes` (count checked); rejects bad, repeated axes. */
static gm_status permute_axes(const char *fn, const gm_ndview *view, const int *axes, gm_ndview *r)
{
    bool seen[GM_MAX_DIMS] = {false};
    int axis = 0;

    for (int i = 0; i < view->ndim; i++) {
        gm_status status = normalize_axis(fn, "", axes[i], view->ndim, &axis);

        if (status != GM_OK)
            return status;
        if (seen[axis])
            return gm__error(GM_ERR_INVALID_ARG, "%s: repeated axis in transpose (axis %d)", fn,
                             axes[i]);
        seen[axis] = true;
        r->shape[i] = view->shape[axis];
        r->strides[i] = view->strides[axis];
    }
    return GM_OK;
}

/* numpy's a.transpose(axes): count first, then each axis in range and unrepeated. */
gm_status gm_ndview_permute(const gm_ndview *view, int naxes, const int *axes, gm_ndview *out_p)
{
    static const char fn[] = "gm_ndview_permute";
    gm_status status = check_io(fn, view, out_p);
    gm_ndview r;

    if (status != GM_OK)
        return status;
    if (axes == NULL && naxes > 0)
        return gm__error(GM_ERR_NULL_POINTER, "%s: axes is NULL", fn);
    if (naxes != view->ndim)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: axes don't match array: %d axes given for a %d-dimensional array", fn,
                         naxes, view->ndim);
    r = *view;
    status = permute_axes(fn, view, axes, &r);
    if (status == GM_OK)
        gm__put_view(out_p, &r);
    return status;
}

/* numpy's a.swapaxes(axis1, axis2); equal axes give the same layout. */
gm_status gm_ndview_swapaxes(const gm_ndview *view, int axis1, int axis2, gm_ndview *out_p)
{
    static const char fn[] = "gm_ndview_swapaxes";
    gm_status status = check_io(fn, view, out_p);
    int a = 0, b = 0;
    gm_ndview r;

    if (status == GM_OK)
        status = normalize_axis(fn, "axis1: ", axis1, view->ndim, &a);
    if (status == GM_OK)
        status = normalize_axis(fn, "axis2: ", axis2, view->ndim, &b);
    if (status != GM_OK)
        return status;
    r = *view;
    r.shape[a] = view->shape[b];
    r.strides[a] = view->strides[b];
    r.shape[b] = view->shape[a];
    r.strides[b] = view->strides[a];
    gm__put_view(out_p, &r);
    return GM_OK;
}

/* numpy's a[..., start:stop:step] on one axis (negative axes wrap). */
gm_status gm_ndview_slice(const gm_ndview *view, int axis, gm_slice slice, gm_ndview *out_p)
{
    static const char fn[] = "gm_ndview_slice";
    gm_status status = check_io(fn, view, out_p);
    int64_t delta = 0;
    int ax = 0, ovf = 0;
    gm_ndview r;

    if (status == GM_OK)
        status = normalize_axis(fn, "", axis, view->ndim, &ax);
    if (status == GM_OK)
        status = check_step(fn, slice, ax);
    if (status != GM_OK)
        return status;
    r = *view;
    ovf =
        slice_axis(slice, view->shape[ax], view->strides[ax], &r.shape[ax], &r.strides[ax], &delta);
    status = shift_offset(fn, &r, ax, ovf, delta);
    if (status == GM_OK)
        status = gm__validate(fn, &r); /* a reversed axis can move the extent past int64 */
    if (status == GM_OK)
        gm__put_view(out_p, &r);
    return status;
}

/* numpy's a[..., i] on one axis: adds i * stride to the offset and drops the axis. */
gm_status gm_ndview_index(const gm_ndview *view, int axis, int64_t index, gm_ndview *out_p)
{
    static const char fn[] = "gm_ndview_index";
    gm_status status = check_io(fn, view, out_p);
    int64_t delta = 0;
    int ax = 0;
    gm_ndview r;

    if (status == GM_OK)
        status = normalize_axis(fn, "", axis, view->ndim, &ax);
    if (status == GM_OK)
        status = index_axis(fn, index, ax, view->shape[ax], view->strides[ax], &delta);
    if (status != GM_OK)
        return status;
    r = *view;
    status = shift_offset(fn, &r, ax, 0, delta);
    if (status != GM_OK)
        return status;
    remove_axis(&r, ax);
    gm__put_view(out_p, &r);
    return GM_OK;
}

/* What a basic-indexing expression asks for (numpy's prepare_index counts). */
typedef struct index_counts {
    int consumed;  /* integer and slice items: input axes they index */
    int integers;  /* integer items: input axes they drop */
    int newaxes;   /* newaxis items: axes they insert */
    bool ellipsis; /* whether an ellipsis is present */
} index_counts;

/* Count the items of a getitem expression, rejecting unknown kinds and a second ellipsis. */
static gm_status count_items(const char *fn, int nitems, const gm_index_item *items,
                             index_counts *c)
{
    for (int k = 0; k < nitems; k++) {
        gm_index_kind kind = items[k].kind;

        if (kind == GM_INDEX_INT || kind == GM_INDEX_SLICE) {
            c->consumed++;
            c->integers += kind == GM_INDEX_INT;
        } else if (kind == GM_INDEX_NEWAXIS) {
            c->newaxes++;
        } else if (kind == GM_INDEX_ELLIPSIS) {
            if (c->ellipsis)
                return gm__error(GM_ERR_INVALID_ARG,
                                 "%s: an index can only have a single ellipsis ('...')", fn);
            c->ellipsis = true;
        } else {
            return gm__error(GM_ERR_INVALID_ARG, "%s: item %d has unknown kind %d", fn, k,
                             (int)kind);
        }
    }
    return GM_OK;
}

/* Check the counts against the view: too many indices, too many result dimensions. */
static gm_status check_counts(const char *fn, const gm_ndview *view, const index_counts *c)
{
    int64_t result_ndim = (int64_t)view->ndim - c->integers + c->newaxes;

    if (c->consumed > view->ndim)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: too many indices for array: array is %d-dimensional, but %d were "
                         "indexed",
                         fn, view->ndim, c->consumed);
    if (result_ndim > GM_MAX_DIMS)
        return gm__error(GM_ERR_TOO_MANY_DIMS,
                         "%s: number of dimensions must be within [0, %d], indexing result "
                         "would have %lld",
                         fn, GM_MAX_DIMS, (long long)result_ndim);
    return GM_OK;
}

/* Append an axis to the result being built. */
static void push_axis(gm_ndview *r, int64_t extent, int64_t stride)
{
    r->shape[r->ndim] = extent;
    r->strides[r->ndim] = stride;
    r->ndim++;
}

/*
 * Apply one item to the result r, reading input axis *src (advanced past the
 * axes the item consumes); an ellipsis copies `fill` axes unchanged.
 */
static gm_status apply_item(const char *fn, const gm_ndview *view, const gm_index_item *item,
                            int fill, int *src, gm_ndview *r)
{
    int64_t extent = 0, stride = 0, delta = 0;
    gm_status status = GM_OK;

    if (item->kind == GM_INDEX_NEWAXIS) {
        push_axis(r, 1, 0); /* numpy gives an inserted axis stride 0 */
    } else if (item->kind == GM_INDEX_ELLIPSIS) {
        for (int j = 0; j < fill; j++, (*src)++)
            push_axis(r, view->shape[*src], view->strides[*src]);
    } else if (item->kind == GM_INDEX_INT) {
        status = index_axis(fn, item->index, *src, view->shape[*src], view->strides[*src], &delta);
        if (status == GM_OK)
            status = shift_offset(fn, r, *src, 0, delta);
        (*src)++;
    } else {
        status = check_step(fn, item->slice, *src);
        if (status == GM_OK) {
            int ovf = slice_axis(item->slice, view->shape[*src], view->strides[*src], &extent,
                                 &stride, &delta);

            push_axis(r, extent, stride);
            status = shift_offset(fn, r, *src, ovf, delta);
        }
        (*src)++;
    }
    return status;
}

/*
 * numpy's basic indexing a[items]: every check of the whole expression
 * (numpy's prepare_index) before any item is applied, then the items in
 * order; axes left over are kept as if by a trailing ellipsis.
 */
gm_status gm__ndview_getitem(const char *fn, const gm_ndview *view, int nitems,
                             const gm_index_item *items, gm_ndview *out_p)
{
    gm_status status = check_io(fn, view, out_p);
    index_counts c = {0, 0, 0, false};
    int src = 0;
    gm_ndview r;

    if (status != GM_OK)
        return status;
    if (nitems < 0)
        return gm__error(GM_ERR_INVALID_ARG, "%s: nitems must be >= 0, got %d", fn, nitems);
    if (items == NULL && nitems > 0)
        return gm__error(GM_ERR_NULL_POINTER, "%s: items is NULL", fn);
    status = count_items(fn, nitems, items, &c);
    if (status == GM_OK)
        status = check_counts(fn, view, &c);
    r = *view;
    r.ndim = 0;
    for (int k = 0; k < nitems && status == GM_OK; k++)
        status = apply_item(fn, view, &items[k], view->ndim - c.consumed, &src, &r);
    if (status != GM_OK)
        return status;
    while (src < view->ndim) {
        push_axis(&r, view->shape[src], view->strides[src]);
        src++;
    }
    status = gm__validate(fn, &r); /* a reversed axis can move the extent past int64 */
    if (status == GM_OK)
        gm__put_view(out_p, &r);
    return status;
}

/* Public form of gm__ndview_getitem. */
gm_status gm_ndview_getitem(const gm_ndview *view, int nitems, const gm_index_item *items,
                            gm_ndview *out_p)
{
    return gm__ndview_getitem("gm_ndview_getitem", view, nitems, items, out_p);
}

/*
 * Strides numpy's _attempt_nocopy_reshape (C order) gives the extent-1 axes
 * of a non-C-contiguous array when axes of 1 are inserted: a run of ones
 * before an axis j of another extent gets strides[j] * shape[j], trailing
 * ones get the stride of the last axis whose extent is not 1. The other axes
 * keep their strides.
 */
static void nocopy_one_strides(gm_ndview *r, int64_t itemsize)
{
    int64_t next = itemsize;
    int last = -1;

    for (int i = r->ndim - 1; i >= 0 && last < 0; i--) {
        if (r->shape[i] != 1)
            last = i;
    }
    for (int i = r->ndim - 1; i >= 0; i--) {
        if (r->shape[i] != 1)
            next = wrap_mul(r->strides[i], r->shape[i]);
        else
            r->strides[i] = (last >= 0 && i > last) ? r->strides[last] : next;
    }
}

/* numpy.expand_dims: a C-order reshape that inserts an axis of 1 at `axis`. */
gm_status gm_ndview_expand_dims(const gm_ndview *view, int axis, gm_ndview *out_p)
{
    static const char fn[] = "gm_ndview_expand_dims";
    gm_status status = check_io(fn, view, out_p);
    int64_t itemsize = 0;
    int ax = 0;
    gm_ndview r;

    if (status != GM_OK)
        return status;
    if (view->ndim >= GM_MAX_DIMS)
        return gm__error(GM_ERR_TOO_MANY_DIMS,
                         "%s: cannot add an axis to a %d-dimensional array (GM_MAX_DIMS is %d)", fn,
                         view->ndim, GM_MAX_DIMS);
    status = normalize_axis(fn, "", axis, view->ndim + 1, &ax);
    if (status != GM_OK)
        return status;
    itemsize = (int64_t)gm_dtype_itemsize(view->dtype);
    r = *view;
    insert_axis(&r, ax, 1, 0);
    /* numpy's expand_dims is a C-order reshape: fresh C strides when contiguous. */
    if (gm_ndview_is_c_contiguous(view))
        status = gm_contiguous_strides(r.ndim, r.shape, itemsize, GM_ORDER_C, r.strides);
    else
        nocopy_one_strides(&r, itemsize);
    if (status == GM_OK)
        gm__put_view(out_p, &r);
    return status;
}

/*
 * Mark the listed axes for squeezing (numpy's order of checks: every axis
 * in range and unrepeated first, then every extent equal to 1).
 */
static gm_status mark_squeeze_axes(const char *fn, const gm_ndview *view, int naxes,
                                   const int *axes, bool *drop)
{
    int axis = 0;

    if (naxes < 0)
        return gm__error(GM_ERR_INVALID_ARG, "%s: naxes must be >= 0, got %d", fn, naxes);
    for (int k = 0; k < naxes; k++) {
        gm_status status = normalize_axis(fn, "", axes[k], view->ndim, &axis);

        if (status != GM_OK)
            return status;
        if (drop[axis])
            return gm__error(GM_ERR_INVALID_ARG, "%s: duplicate value in 'axis' (axis %d)", fn,
                             axes[k]);
        drop[axis] = true;
    }
    for (int i = 0; i < view->ndim; i++) {
        if (drop[i] && view->shape[i] != 1)
            return gm__error(GM_ERR_INVALID_ARG,
                             "%s: cannot select an axis to squeeze out which has size not equal "
                             "to one (axis %d has extent %lld)",
                             fn, i, (long long)view->shape[i]);
    }
    return GM_OK;
}

/* numpy's a.squeeze(axis): drop all extent-1 axes, or the listed ones. */
gm_status gm_ndview_squeeze(const gm_ndview *view, int naxes, const int *axes, gm_ndview *out_p)
{
    static const char fn[] = "gm_ndview_squeeze";
    gm_status status = check_io(fn, view, out_p);
    bool drop[GM_MAX_DIMS] = {false};
    gm_ndview r;

    if (status != GM_OK)
        return status;
    if (naxes == 0 || axes == NULL) {
        for (int i = 0; i < view->ndim; i++)
            drop[i] = view->shape[i] == 1;
    } else {
        status = mark_squeeze_axes(fn, view, naxes, axes, drop);
        if (status != GM_OK)
            return status;
    }
    r = *view;
    r.ndim = 0;
    for (int i = 0; i < view->ndim; i++) {
        if (!drop[i])
            push_axis(&r, view->shape[i], view->strides[i]);
    }
    gm__put_view(out_p, &r);
    return GM_OK;
}

/*
 * numpy's array_descr_set for an item size change from `from` to `to`
 * bytes: only the last axis changes, and it must be contiguous unless its
 * extent is 1 or the array is empty; its byte length must divide evenly.
 */
static gm_status resize_last_axis(const char *fn, gm_ndview *r, int64_t from, int64_t to)
{
    int last = r->ndim - 1;
    int64_t bytes = 0;

    if (r->ndim == 0)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: changing the dtype of a 0d array is only supported if the "
                         "itemsize is unchanged (%lld -> %lld bytes)",
                         fn, (long long)from, (long long)to);
    if (r->shape[last] != 1 && gm_ndview_size(r) != 0 && r->strides[last] != from)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: to change to a dtype of a different size, the last axis must be "
                         "contiguous (its stride is %lld, the itemsize %lld)",
                         fn, (long long)r->strides[last], (long long)from);
    bytes = r->shape[last] * from;
    if (to < from ? from % to != 0 : bytes % to != 0)
        return to < from ? gm__error(GM_ERR_INVALID_ARG,
                                     "%s: the new itemsize %lld must divide the old itemsize "
                                     "(%lld bytes)",
                                     fn, (long long)to, (long long)from)
                         : gm__error(GM_ERR_INVALID_ARG,
                                     "%s: the new itemsize %lld must divide the byte length of "
                                     "the last axis (%lld bytes; the old itemsize is %lld)",
                                     fn, (long long)to, (long long)bytes, (long long)from);
    r->shape[last] = bytes / to;
    r->strides[last] = to;
    return GM_OK;
}

/* numpy's a.view(dtype): same bytes, new dtype; the last axis absorbs a size change. */
gm_status gm_ndview_view_dtype(const gm_ndview *view, gm_dtype dtype, gm_ndview *out_p)
{
    static const char fn[] = "gm_ndview_view_dtype";
    gm_status status = check_io(fn, view, out_p);
    int64_t from = 0, to = 0;
    gm_ndview r;

    if (status != GM_OK)
        return status;
    if (!gm_dtype_is_valid(dtype))
        return gm__error(GM_ERR_DTYPE, "%s: invalid dtype {code %u, bits %u, lanes %u}", fn,
                         dtype.code, dtype.bits, dtype.lanes);
    from = (int64_t)gm_dtype_itemsize(view->dtype);
    to = (int64_t)gm_dtype_itemsize(dtype);
    r = *view;
    r.dtype = dtype;
    if (to != from)
        status = resize_last_axis(fn, &r, from, to);
    if (status == GM_OK)
        status = gm__validate(fn, &r); /* e.g. a wider item overflows an empty array's size */
    if (status == GM_OK)
        gm__put_view(out_p, &r);
    return status;
}

/* Argument checks of gm_ndview_split, in the order the header lists them. */
static gm_status check_split(const char *fn, const gm_ndview *view, int64_t section,
                             int64_t max_pieces, const gm_ndview *pieces, const int64_t *count_p)
{
    gm_status status = gm__validate(fn, view);

    if (status != GM_OK)
        return status;
    if (count_p == NULL || (pieces == NULL && max_pieces > 0))
        return gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn,
                         count_p == NULL ? "count_p" : "pieces");
    if (max_pieces < 0)
        return gm__error(GM_ERR_INVALID_ARG, "%s: max_pieces must be >= 0, got %lld", fn,
                         (long long)max_pieces);
    if (view->ndim != 1 || !gm_ndview_is_c_contiguous(view))
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: only 1-D contiguous arrays can be split (ndim %d, %s)", fn,
                         view->ndim, view->ndim == 1 ? "not contiguous" : "not 1-D");
    if (section <= 0)
        return gm__error(GM_ERR_INVALID_ARG, "%s: section must be > 0, got %lld", fn,
                         (long long)section);
    return GM_OK;
}

/*
 * Numba's DeviceNDArray.split(section): piece i is a[i * section:(i + 1) *
 * section], the last one shorter; only the first max_pieces are written.
 */
gm_status gm_ndview_split(const gm_ndview *view, int64_t section, int64_t max_pieces,
                          gm_ndview *pieces, int64_t *count_p)
{
    static const char fn[] = "gm_ndview_split";
    gm_status status = check_split(fn, view, section, max_pieces, pieces, count_p);
    int64_t n = 0, count = 0;
    gm_ndview v;

    if (status != GM_OK)
        return status;
    v = *view; /* pieces may alias the input */
    v.reserved = 0;
    n = v.shape[0];
    count = n / section + (n % section != 0);
    for (int64_t i = 0; i < count && i < max_pieces; i++) {
        int64_t begin = i * section;
        int64_t len = n - begin < section ? n - begin : section;

        pieces[i] = v;
        pieces[i].offset = v.offset + begin * v.strides[0];
        pieces[i].shape[0] = len;
    }
    *count_p = count;
    return GM_OK;
}

/* Magnitude of a stride as an unsigned value (defined for INT64_MIN too). */
static uint64_t stride_magnitude(int64_t stride)
{
    return stride < 0 ? 0u - (uint64_t)stride : (uint64_t)stride;
}

/*
 * numpy's KEEPORDER strides (PyArray_NewLikeArrayWithShape): axes sorted by
 * decreasing |stride|, ties in axis order (PyArray_CreateSortedStridePerm;
 * extent-1 axes take part like any other), then packed from the last.
 */
static void keep_order_strides(const gm_ndview *view, int64_t itemsize, int64_t *strides)
{
    int perm[GM_MAX_DIMS];
    int64_t stride = itemsize;

    for (int i = 0; i < view->ndim; i++) {
        int j = i;

        while (j > 0 &&
               stride_magnitude(view->strides[perm[j - 1]]) < stride_magnitude(view->strides[i])) {
            perm[j] = perm[j - 1];
            j--;
        }
        perm[j] = i;
    }
    for (int k = view->ndim - 1; k >= 0; k--) {
        strides[perm[k]] = stride;
        stride *= view->shape[perm[k]];
    }
}

/* The layout numpy's empty_like(a, order='K') would allocate: data NULL, offset 0. */
gm_status gm_ndview_like(const gm_ndview *view, gm_ndview *out_p)
{
    static const char fn[] = "gm_ndview_like";
    gm_status status = check_io(fn, view, out_p);
    int64_t itemsize = 0;
    gm_ndview r;

    if (status != GM_OK)
        return status;
    itemsize = (int64_t)gm_dtype_itemsize(view->dtype);
    r = *view;
    r.data = NULL;
    r.offset = 0;
    if (view->ndim <= 1 || gm_ndview_is_c_contiguous(view))
        status = gm_contiguous_strides(r.ndim, r.shape, itemsize, GM_ORDER_C, r.strides);
    else if (gm_ndview_is_f_contiguous(view))
        status = gm_contiguous_strides(r.ndim, r.shape, itemsize, GM_ORDER_F, r.strides);
    else
        keep_order_strides(view, itemsize, r.strides);
    if (status == GM_OK)
        gm__put_view(out_p, &r);
    return status;
}
