/*
 * Reshape and ravel with numpy's semantics, restricted to the cases where
 * numpy returns a view. The rules follow numpy's shape.c (PyArray_Newshape,
 * _fix_unknown_dimension, _attempt_nocopy_reshape, PyArray_Ravel), so a
 * result has exactly numpy's shape and strides; where numpy would copy, the
 * call fails with GM_ERR_NEEDS_COPY and touches nothing.
 */
#include <stdbool.h>
#include <string.h>

#include "core.h"
#include "ndview_internal.h"

/* Room for one formatted shape or strides list in an error message. */
#define TEXT_MAX 200

/* Bytes per element of a validated view. */
static int64_t itemsize_of(const gm_ndview *v)
{
    return (int64_t)gm_dtype_itemsize(v->dtype);
}

/* numpy's order 'A' (PyArray_ISFORTRAN): F if F- and not C-contiguous, else C. */
static gm_order any_order(const gm_ndview *v)
{
    bool fortran = gm_ndview_is_f_contiguous(v) && !gm_ndview_is_c_contiguous(v);

    return fortran ? GM_ORDER_F : GM_ORDER_C;
}

/* Whether v is contiguous in `order`; false for any order but C and F. */
static bool contiguous_in(const gm_ndview *v, gm_order order)
{
    bool contiguous = false;

    if (order == GM_ORDER_C)
        contiguous = gm_ndview_is_c_contiguous(v);
    else if (order == GM_ORDER_F)
        contiguous = gm_ndview_is_f_contiguous(v);
    return contiguous;
}

/* " (here 'C')" after an order 'A' in a message, naming what it resolved to. */
static const char *resolved_text(gm_order order, gm_order resolved)
{
    if (order != GM_ORDER_A)
        return "";
    return resolved == GM_ORDER_F ? " (here 'F')" : " (here 'C')";
}

/* *out = v with a new shape and strides; entries past ndim are zeroed. */
static void set_layout(const gm_ndview *v, int ndim, const int64_t *shape, const int64_t *strides,
                       gm_ndview *out)
{
    *out = *v;
    memset(out->shape, 0, sizeof(out->shape));
    memset(out->strides, 0, sizeof(out->strides));
    if (ndim > 0) {
        memcpy(out->shape, shape, (size_t)ndim * sizeof(int64_t));
        memcpy(out->strides, strides, (size_t)ndim * sizeof(int64_t));
    }
    out->ndim = ndim;
}

/* Accept C, F, A (and K when allow_k); reject anything else with a message. */
static gm_status check_order(const char *fn, gm_order order, bool allow_k)
{
    if (order == GM_ORDER_C || order == GM_ORDER_F || order == GM_ORDER_A ||
        (allow_k && order == GM_ORDER_K))
        return GM_OK;
    if (order == GM_ORDER_K)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: order 'K' is not permitted for reshaping (use 'C', 'F' or 'A')", fn);
    return gm__error(GM_ERR_INVALID_ARG, "%s: unknown order %d (expected %s)", fn, (int)order,
                     allow_k ? "'C', 'F', 'A' or 'K'" : "'C', 'F' or 'A'");
}

/* Record GM_ERR_NEEDS_COPY for a reshape of v into `dims` in `order`. */
static gm_status reshape_needs_copy(const char *fn, const gm_ndview *v, int ndim,
                                    const int64_t *dims, gm_order order, gm_order resolved)
{
    char shape[TEXT_MAX], strides[TEXT_MAX], target[TEXT_MAX];

    return gm__error(GM_ERR_NEEDS_COPY,
                     "%s: reshaping the array of shape %s and strides %s into shape %s in "
                     "order '%c'%s would require a copy",
                     fn, gm_format_shape(v->ndim, v->shape, shape, sizeof(shape)),
                     gm_format_shape(v->ndim, v->strides, strides, sizeof(strides)),
                     gm_format_shape(ndim, dims, target, sizeof(target)), (char)order,
                     resolved_text(order, resolved));
}

/*
 * State of numpy's _attempt_nocopy_reshape: the source without its extent-1
 * axes (their strides never matter), the target shape and its strides.
 */
typedef struct nocopy {
    const char *fn;
    const gm_ndview *src;
    gm_order order;     /* GM_ORDER_C or GM_ORDER_F */
    gm_order requested; /* the caller's order ('A' resolved to `order`), for messages */
    int oldnd;
    int64_t olddims[GM_MAX_DIMS];
    int64_t oldstrides[GM_MAX_DIMS];
    int newnd;
    const int64_t *newdims;
    int64_t *newstrides;
} nocopy;

/* Fill the state for a reshape of src into (newnd, newdims) in order C or F. */
static void nocopy_init(nocopy *st, const char *fn, const gm_ndview *src, int newnd,
                        const int64_t *newdims, gm_order order, int64_t *newstrides)
{
    st->fn = fn;
    st->src = src;
    st->order = order;
    st->requested = order;
    st->oldnd = 0;
    for (int i = 0; i < src->ndim; i++) {
        if (src->shape[i] != 1) {
            st->olddims[st->oldnd] = src->shape[i];
            st->oldstrides[st->oldnd] = src->strides[i];
            st->oldnd++;
        }
    }
    st->newnd = newnd;
    st->newdims = newdims;
    st->newstrides = newstrides;
}

/*
 * Grow new axes [ni, *nj_p) and old axes [oi, *oj_p) until both hold the
 * same number of elements (numpy's inner loop). With equal, non-zero sizes
 * the ranges stay in bounds; the bound checks only guard against a bad state.
 * @return whether the two groups matched.
 */
static bool match_group(const nocopy *st, int ni, int oi, int *nj_p, int *oj_p)
{
    int64_t np = st->newdims[ni];
    int64_t op = st->olddims[oi];
    int nj = ni + 1;
    int oj = oi + 1;
    bool grew = true;

    while (np != op && grew) {
        grew = false;
        if (np < op && nj < st->newnd) {
            np *= st->newdims[nj++];
            grew = true;
        } else if (op < np && oj < st->oldnd) {
            op *= st->olddims[oj++];
            grew = true;
        }
    }
    *nj_p = nj;
    *oj_p = oj;
    return np == op;
}

/*
 * Whether old axes [oi, oj) form one run in the order of the reshape: in C
 * order each stride is the next axis's stride times its extent, in F order
 * each stride is the previous axis's stride times the previous extent.
 */
static bool group_merges(const nocopy *st, int oi, int oj)
{
    const int64_t *dims = st->olddims;
    const int64_t *strides = st->oldstrides;
    bool merges = true;

    for (int k = oi; k < oj - 1 && merges; k++) {
        int64_t want = 0;

        if (st->order == GM_ORDER_F)
            merges = !gm__mul_overflow(dims[k], strides[k], &want) && strides[k + 1] == want;
        else
            merges = !gm__mul_overflow(dims[k + 1], strides[k + 1], &want) && strides[k] == want;
    }
    return merges;
}

/*
 * stride * extent modulo 2^64, as numpy's unchecked products: it can wrap
 * only for an axis of extent 1 (the stride of an axis of larger extent lies
 * within the valid source's extent), whose stride addresses no byte
 * (gm_ndview_expand_dims wraps the same way).
 */
static int64_t mul_stride(int64_t stride, int64_t extent)
{
    return (int64_t)((uint64_t)stride * (uint64_t)extent);
}

/*
 * Strides of new axes [ni, nj) splitting the merged old axes [oi, oj): in C
 * order the last new axis takes the last old stride and the others grow
 * leftwards; in F order the first takes the first old stride and they grow
 * rightwards (new axes of extent 1 inside the group included, as in numpy).
 */
static void group_strides(nocopy *st, int ni, int nj, int oi, int oj)
{
    int64_t *strides = st->newstrides;
    const int64_t *dims = st->newdims;

    if (st->order == GM_ORDER_F) {
        strides[ni] = st->oldstrides[oi];
        for (int nk = ni + 1; nk < nj; nk++)
            strides[nk] = mul_stride(strides[nk - 1], dims[nk - 1]);
    } else {
        strides[nj - 1] = st->oldstrides[oj - 1];
        for (int nk = nj - 1; nk > ni; nk--)
            strides[nk - 1] = mul_stride(strides[nk], dims[nk]);
    }
}

/*
 * Trailing new axes (all of extent 1) get, as in numpy, the stride of the
 * last axis placed (C) or that stride times its extent (F). numpy reads
 * newdims[-1] when no axis was placed; that cannot happen for a
 * non-contiguous source, and the item size is used here instead.
 */
static void trailing_strides(nocopy *st, int ni)
{
    int64_t last = itemsize_of(st->src);

    if (ni >= 1) {
        last = st->newstrides[ni - 1];
        if (st->order == GM_ORDER_F)
            last = mul_stride(last, st->newdims[ni - 1]);
    }
    for (int nk = ni; nk < st->newnd; nk++)
        st->newstrides[nk] = last;
}

/*
 * numpy's _attempt_nocopy_reshape: split source and target into groups of
 * axes holding the same number of elements; each source group must be one
 * run in the reshape's order. Fills st->newstrides or fails NEEDS_COPY.
 */
static gm_status attempt_nocopy(nocopy *st)
{
    int ni = 0;
    int oi = 0;
    gm_status status = GM_OK;

    while (status == GM_OK && ni < st->newnd && oi < st->oldnd) {
        int nj = ni + 1;
        int oj = oi + 1;

        if (!match_group(st, ni, oi, &nj, &oj) || !group_merges(st, oi, oj))
            status = reshape_needs_copy(st->fn, st->src, st->newnd, st->newdims, st->requested,
                                        st->order);
        else
            group_strides(st, ni, nj, oi, oj);
        ni = nj;
        oi = oj;
    }
    if (status == GM_OK)
        trailing_strides(st, ni);
    return status;
}

/*
 * Shape and strides of the reshaped view (dims already resolved), as numpy's
 * PyArray_Newshape: contiguous strides when the source is contiguous in the
 * (resolved) order, otherwise the no-copy attempt.
 */
static gm_status reshape_layout(const char *fn, const gm_ndview *v, int ndim, const int64_t *dims,
                                gm_order order, gm_ndview *out)
{
    int64_t strides[GM_MAX_DIMS] = {0};
    gm_order resolved = order == GM_ORDER_A ? any_order(v) : order;
    gm_status status = GM_OK;

    if (contiguous_in(v, resolved)) {
        status = gm_contiguous_strides(ndim, dims, itemsize_of(v), resolved, strides);
    } else {
        nocopy st;

        nocopy_init(&st, fn, v, ndim, dims, resolved, strides);
        st.requested = order;
        status = attempt_nocopy(&st);
    }
    if (status == GM_OK)
        set_layout(v, ndim, dims, strides, out);
    return status;
}

/* Find the one -1 of a new shape (*unknown_p = -1 if none); reject other negatives. */
static gm_status find_unknown(const char *fn, int ndim, const int64_t *shape, int *unknown_p)
{
    int unknown = -1;

    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1 && unknown >= 0)
            return gm__error(GM_ERR_INVALID_ARG,
                             "%s: can only specify one unknown extent (-1); axes %d and %d are "
                             "both -1",
                             fn, unknown, i);
        if (shape[i] == -1)
            unknown = i;
        else if (shape[i] < 0)
            return gm__error(GM_ERR_INVALID_ARG,
                             "%s: negative extent %lld on axis %d of the new shape (only -1 "
                             "is allowed)",
                             fn, (long long)shape[i], i);
    }
    *unknown_p = unknown;
    return GM_OK;
}

/*
 * Product of the extents of `shape` other than axis `skip`, times `unit`
 * (1, or the item size to check the byte size): 0 when an extent is 0, and
 * GM_ERR_OVERFLOW, naming `what`, when the product of the non-zero extents
 * and `unit` does not fit in int64. *product_p excludes `unit`.
 */
static gm_status known_product(const char *fn, int ndim, const int64_t *shape, int skip,
                               int64_t unit, const char *what, int64_t *product_p)
{
    int64_t product = unit;
    bool has_zero = false;

    for (int i = 0; i < ndim; i++) {
        if (i == skip)
            continue;
        if (shape[i] == 0)
            has_zero = true;
        else if (gm__mul_overflow(product, shape[i], &product))
            return gm__error(GM_ERR_OVERFLOW, "%s: the %s of the new shape overflows int64", fn,
                             what);
    }
    *product_p = has_zero ? 0 : product / unit;
    return GM_OK;
}

/* Record GM_ERR_SHAPE_MISMATCH naming both shapes. */
static gm_status size_mismatch(const char *fn, const gm_ndview *v, int ndim, const int64_t *shape,
                               bool inferring)
{
    char from[TEXT_MAX], to[TEXT_MAX];

    return gm__error(GM_ERR_SHAPE_MISMATCH,
                     "%s: cannot reshape the array of shape %s (size %lld) into shape %s%s", fn,
                     gm_format_shape(v->ndim, v->shape, from, sizeof(from)),
                     (long long)gm_ndview_size(v), gm_format_shape(ndim, shape, to, sizeof(to)),
                     inferring ? " (the -1 extent cannot be inferred)" : "");
}

/*
 * numpy's _fix_unknown_dimension: copy `shape` into dims with its -1
 * replaced by size / (product of the other extents); sizes must agree. The
 * new shape's element count and byte size must fit in int64 (numpy: "array
 * is too big"), which matters for empty arrays only.
 */
static gm_status resolve_shape(const char *fn, const gm_ndview *v, int ndim, const int64_t *shape,
                               int64_t *dims)
{
    int unknown = -1;
    int64_t known = 0;
    int64_t size = gm_ndview_size(v);
    gm_status status = find_unknown(fn, ndim, shape, &unknown);

    if (status == GM_OK)
        status = known_product(fn, ndim, shape, unknown, 1, "element count", &known);
    if (status == GM_OK && unknown >= 0 && (known == 0 || size % known != 0))
        status = size_mismatch(fn, v, ndim, shape, true);
    else if (status == GM_OK && unknown < 0 && known != size)
        status = size_mismatch(fn, v, ndim, shape, false);
    if (status == GM_OK) {
        if (ndim > 0)
            memcpy(dims, shape, (size_t)ndim * sizeof(int64_t));
        if (unknown >= 0)
            dims[unknown] = size / known;
        status = known_product(fn, ndim, dims, -1, itemsize_of(v), "byte size", &known);
    }
    return status;
}

/* Whether the new shape is the source's own (numpy then returns a plain view). */
static bool same_shape(const gm_ndview *v, int ndim, const int64_t *shape)
{
    bool same = ndim == v->ndim;

    for (int i = 0; i < ndim && same; i++)
        same = shape[i] == v->shape[i];
    return same;
}

/* Argument checks of gm_ndview_reshape, in a fixed order. */
static gm_status check_reshape_args(const char *fn, const gm_ndview *v, int ndim,
                                    const int64_t *shape, gm_order order, const gm_ndview *out_p)
{
    gm_status status = GM_OK;

    if (out_p == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: out_p is NULL", fn);
    if (status == GM_OK)
        status = gm__validate(fn, v);
    if (status == GM_OK)
        status = gm__check_ndim(fn, ndim);
    if (status == GM_OK && ndim > 0 && shape == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: shape is NULL but ndim is %d", fn, ndim);
    if (status == GM_OK)
        status = check_order(fn, order, false);
    return status;
}

/* gm_ndview_reshape with messages naming `fn`. */
gm_status gm__ndview_reshape(const char *fn, const gm_ndview *view, int ndim, const int64_t *shape,
                             gm_order order, gm_ndview *out_p)
{
    int64_t dims[GM_MAX_DIMS] = {0};
    gm_ndview result;
    gm_status status = check_reshape_args(fn, view, ndim, shape, order, out_p);

    if (status == GM_OK && same_shape(view, ndim, shape)) {
        result = *view;
    } else if (status == GM_OK) {
        status = resolve_shape(fn, view, ndim, shape, dims);
        if (status == GM_OK)
            status = reshape_layout(fn, view, ndim, dims, order, &result);
    }
    if (status == GM_OK)
        gm__put_view(out_p, &result);
    return status;
}

/* Public form of gm__ndview_reshape. */
gm_status gm_ndview_reshape(const gm_ndview *view, int ndim, const int64_t *shape, gm_order order,
                            gm_ndview *out_p)
{
    return gm__ndview_reshape("gm_ndview_reshape", view, ndim, shape, order, out_p);
}

/* Magnitude of a stride, safe for INT64_MIN. */
static uint64_t stride_magnitude(int64_t stride)
{
    return stride < 0 ? (uint64_t)0 - (uint64_t)stride : (uint64_t)stride;
}

/*
 * Axes sorted by decreasing |stride|, ties in axis order (numpy's
 * PyArray_CreateSortedStridePerm); a stable insertion sort.
 */
static void sort_axes_by_stride(const gm_ndview *v, int *perm)
{
    for (int i = 0; i < v->ndim; i++) {
        int axis = i;
        int j = i;
        uint64_t magnitude = stride_magnitude(v->strides[axis]);

        while (j > 0 && stride_magnitude(v->strides[perm[j - 1]]) < magnitude) {
            perm[j] = perm[j - 1];
            j--;
        }
        perm[j] = axis;
    }
}

/*
 * numpy's ravel(order='K') view test: walking the axes from the smallest
 * |stride| up and skipping extents of 1, each stride (sign included) must be
 * the item size times the extents already walked.
 */
static bool keeps_order_contiguous(const gm_ndview *v)
{
    int perm[GM_MAX_DIMS] = {0};
    int64_t expected = itemsize_of(v);
    bool contiguous = true;

    sort_axes_by_stride(v, perm);
    for (int i = v->ndim - 1; i >= 0 && contiguous; i--) {
        int axis = perm[i];

        if (v->shape[axis] == 1)
            continue;
        contiguous =
            v->strides[axis] == expected && !gm__mul_overflow(expected, v->shape[axis], &expected);
    }
    return contiguous;
}

/* The order numpy's PyArray_Ravel uses: K becomes C or F for contiguous sources, A resolves. */
static gm_order ravel_order(const gm_ndview *v, gm_order order)
{
    gm_order resolved = order;

    if (order == GM_ORDER_A) {
        resolved = any_order(v);
    } else if (order == GM_ORDER_K) {
        if (gm_ndview_is_c_contiguous(v))
            resolved = GM_ORDER_C;
        else if (gm_ndview_is_f_contiguous(v))
            resolved = GM_ORDER_F;
    }
    return resolved;
}

/* Record GM_ERR_NEEDS_COPY for a ravel of v. */
static gm_status ravel_needs_copy(const char *fn, const gm_ndview *v, gm_order order,
                                  gm_order resolved)
{
    char shape[TEXT_MAX], strides[TEXT_MAX];

    return gm__error(GM_ERR_NEEDS_COPY,
                     "%s: flattening the array of shape %s and strides %s in order '%c'%s would "
                     "require a copy",
                     fn, gm_format_shape(v->ndim, v->shape, shape, sizeof(shape)),
                     gm_format_shape(v->ndim, v->strides, strides, sizeof(strides)), (char)order,
                     resolved_text(order, resolved));
}

/* gm_ndview_ravel with messages naming `fn`. */
gm_status gm__ndview_ravel(const char *fn, const gm_ndview *view, gm_order order, gm_ndview *out_p)
{
    gm_status status = GM_OK;
    gm_order resolved = order;
    gm_ndview result;

    if (out_p == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: out_p is NULL", fn);
    if (status == GM_OK)
        status = gm__validate(fn, view);
    if (status == GM_OK)
        status = check_order(fn, order, true);
    if (status == GM_OK) {
        resolved = ravel_order(view, order);
        if (!contiguous_in(view, resolved) &&
            !(resolved == GM_ORDER_K && keeps_order_contiguous(view)))
            status = ravel_needs_copy(fn, view, order, resolved);
    }
    if (status == GM_OK) {
        int64_t size = gm_ndview_size(view);
        int64_t stride = itemsize_of(view);

        set_layout(view, 1, &size, &stride, &result);
        gm__put_view(out_p, &result);
    }
    return status;
}

/* Public form of gm__ndview_ravel. */
gm_status gm_ndview_ravel(const gm_ndview *view, gm_order order, gm_ndview *out_p)
{
    return gm__ndview_ravel("gm_ndview_ravel", view, order, out_p);
}
