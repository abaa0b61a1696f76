/*
 * The ndarray descriptor: construction, validation, size, contiguity,
 * extent and formatting. The view operations live in views.c and reshape.c.
 */
#include <stdio.h>
#include <inttypes.h>
#include <string.h>

#include "core.h"
#include "ndview_internal.h"

/* "(2, 3)", "(5,)" or "()" into buf; "..." replaces the end when it does not fit. */
char *gm_format_shape(int ndim, const int64_t *shape, char *buf, size_t size)
{
    size_t used = 0;

    if (buf == NULL || size == 0)
        return buf;
    buf[0] = '\0';
    if ((shape == NULL && ndim > 0) || ndim < 0 || ndim > GM_MAX_DIMS)
        return buf;
    used += (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", i == 0 ? "" : ", ",
                                 (long long)shape[i]);
    if (used < size)
        used += (size_t)snprintf(buf + used, size - used, ndim == 1 ? ",)" : ")");
    if (used >= size && size >= 4)
        memcpy(buf + size - 4, "...", 4);
    return buf;
}

/* ndim in [0, GM_MAX_DIMS], or the status and message naming `fn`. */
gm_status gm__check_ndim(const char *fn, int ndim)
{
    if (ndim < 0)
        return gm__error(GM_ERR_INVALID_ARG, "%s: ndim must be >= 0, got %d", fn, ndim);
    if (ndim > GM_MAX_DIMS)
        return gm__error(GM_ERR_TOO_MANY_DIMS, "%s: ndim %d exceeds GM_MAX_DIMS (%d)", fn, ndim,
                         GM_MAX_DIMS);
    return GM_OK;
}

/* Product of a shape without recording errors: nonzero for a negative
 * extent or an overflow (numpy rejects overflow even when an extent is 0). */
static int shape_size_quiet(int ndim, const int64_t *shape, int64_t *size_p)
{
    int64_t size = 1;
    int has_zero = 0;

    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return -1;
        has_zero |= shape[i] == 0;
        if (shape[i] != 0 && gm__mul_overflow(size, shape[i], &size))
            return -1;
    }
    *size_p = has_zero ? 0 : size;
    return 0;
}

/* Element count of a shape (0 if an extent is 0); rejects negative extents (reported
 * first, naming the axis) and overflow. */
gm_status gm__shape_size(const char *fn, int ndim, const int64_t *shape, int64_t *size_p)
{
    if (shape_size_quiet(ndim, shape, size_p) == 0)
        return GM_OK;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return gm__error(GM_ERR_INVALID_ARG, "%s: negative extent %lld on axis %d", fn,
                             (long long)shape[i], i);
    }
    return gm__error(GM_ERR_OVERFLOW, "%s: the element count of the shape overflows", fn);
}

/*
 * Contiguous strides in `order` (numpy's _array_fill_strides: extents of 0
 * and 1 count as 1 in the running product). Errors name `fn`.
 */
static gm_status fill_contiguous_strides(const char *fn, int ndim, const int64_t *shape,
                                         int64_t itemsize, gm_order order, int64_t *strides_out)
{
    int64_t strides[GM_MAX_DIMS];
    int64_t stride = itemsize;
    int64_t size = 0;
    gm_status status = GM_OK;

    if (order != GM_ORDER_C && order != GM_ORDER_F)
        return gm__error(GM_ERR_INVALID_ARG, "%s: order must be 'C' or 'F', got %d", fn,
                         (int)order);
    if (itemsize <= 0)
        return gm__error(GM_ERR_INVALID_ARG, "%s: itemsize must be > 0, got %lld", fn,
                         (long long)itemsize);
    status = gm__shape_size(fn, ndim, shape, &size);
    if (status != GM_OK)
        return status;
    for (int k = 0; k < ndim; k++) {
        int i = order == GM_ORDER_C ? ndim - 1 - k : k;
        int64_t extent = shape[i] > 1 ? shape[i] : 1;

        strides[i] = stride;
        if (gm__mul_overflow(stride, extent, &stride))
            return gm__error(GM_ERR_OVERFLOW, "%s: the byte size of the shape overflows", fn);
    }
    if (ndim > 0) /* written only on success */
        memcpy(strides_out, strides, (size_t)ndim * sizeof(int64_t));
    return GM_OK;
}

/* Public wrapper: argument checks, then fill_contiguous_strides(). */
gm_status gm_contiguous_strides(int ndim, const int64_t *shape, int64_t itemsize, gm_order order,
                                int64_t *strides_out)
{
    static const char fn[] = "gm_contiguous_strides";
    gm_status status = gm__check_ndim(fn, ndim);

    if (status != GM_OK)
        return status;
    if ((shape == NULL && ndim > 0) || (strides_out == NULL && ndim > 0))
        return gm__error(GM_ERR_NULL_POINTER, "%s: shape and strides_out must not be NULL", fn);
    return fill_contiguous_strides(fn, ndim, shape, itemsize, order, strides_out);
}

/* The byte extent of a view relative to data, and its overflow check. */
static gm_status view_extent(const char *fn, const gm_ndview *v, int64_t *lo_p, int64_t *hi_p)
{
    int64_t lo = v->offset;
    int64_t hi = v->offset;
    int64_t span = 0;
    int64_t itemsize = (int64_t)gm_dtype_itemsize(v->dtype);

    for (int i = 0; i < v->ndim; i++) {
        if (v->shape[i] == 0) {
            *lo_p = v->offset;
            *hi_p = v->offset;
            return GM_OK;
        }
    }
    for (int i = 0; i < v->ndim; i++) {
        int64_t reach = 0;

        if (gm__mul_overflow(v->shape[i] - 1, v->strides[i], &reach))
            return gm__error(GM_ERR_OVERFLOW, "%s: the byte extent of axis %d overflows", fn, i);
        if ((reach < 0 ? gm__add_overflow(lo, reach, &lo) : gm__add_overflow(hi, reach, &hi)))
            return gm__error(GM_ERR_OVERFLOW, "%s: the byte extent overflows", fn);
    }
    if (gm__add_overflow(hi, itemsize, &hi))
        return gm__error(GM_ERR_OVERFLOW, "%s: the byte extent overflows", fn);
    if (gm__sub_overflow(hi, lo, &span)) /* each end fits, their distance not */
        return gm__error(GM_ERR_OVERFLOW,
                         "%s: the byte extent [%" PRId64 ", %" PRId64 ") spans more than %" PRId64
                         " bytes",
                         fn, lo, hi, INT64_MAX);
    *lo_p = lo;
    *hi_p = hi;
    return GM_OK;
}

/* The checks of gm_ndview_validate, with messages naming `fn`. */
gm_status gm__validate(const char *fn, const gm_ndview *v)
{
    int64_t lo = 0, hi = 0;

    return gm__validate_extent(fn, v, &lo, &hi);
}

/* gm__validate, then the byte extent of view_extent (outputs set only on success). */
gm_status gm__validate_extent(const char *fn, const gm_ndview *v, int64_t *lo_p, int64_t *hi_p)
{
    int64_t size = 0, nbytes = 0;
    char text[64];
    gm_status status = GM_OK;

    if (v == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: view is NULL", fn);
    if (gm__extent_quick(v, gm__dtype_bytes(v->dtype), lo_p, hi_p))
        return GM_OK;
    status = gm__check_ndim(fn, v->ndim);
    if (status != GM_OK)
        return status;
    if (!gm_dtype_is_valid(v->dtype))
        return gm__error(GM_ERR_DTYPE, "%s: invalid dtype {code %u, bits %u, lanes %u}", fn,
                         v->dtype.code, v->dtype.bits, v->dtype.lanes);
    status = gm__shape_size(fn, v->ndim, v->shape, &size);
    if (status != GM_OK)
        return status;
    /* Like numpy, the nonzero extents times the itemsize must fit even when the size is 0. */
    nbytes = (int64_t)gm_dtype_itemsize(v->dtype);
    for (int i = 0; i < v->ndim; i++) {
        if (v->shape[i] != 0 && gm__mul_overflow(nbytes, v->shape[i], &nbytes))
            return gm__error(GM_ERR_OVERFLOW, "%s: the byte size of shape %s overflows", fn,
                             gm_format_shape(v->ndim, v->shape, text, sizeof(text)));
    }
    return view_extent(fn, v, lo_p, hi_p);
}

/* Public form of gm__validate. */
gm_status gm_ndview_validate(const gm_ndview *view)
{
    return gm__validate("gm_ndview_validate", view);
}

/* Fill a descriptor (host memory, device -1, offset 0), then validate it as a whole. */
gm_status gm__ndview_init(const char *fn, void *data, gm_dtype dtype, int ndim,
                          const int64_t *shape, const int64_t *strides, gm_order order,
                          gm_ndview *out_p)
{
    gm_ndview v;
    gm_status status = gm__check_ndim(fn, ndim);

    if (status != GM_OK)
        return status;
    if (out_p == NULL || (shape == NULL && ndim > 0))
        return gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn,
                         out_p == NULL ? "out_p" : "shape");
    if (!gm_dtype_is_valid(dtype))
        return gm__error(GM_ERR_DTYPE, "%s: invalid dtype {code %u, bits %u, lanes %u}", fn,
                         dtype.code, dtype.bits, dtype.lanes);
    memset(&v, 0, sizeof(v));
    v.data = data;
    v.dtype = dtype;
    v.ndim = ndim;
    v.memory = GM_MEMORY_HOST;
    v.device_id = -1;
    if (ndim > 0)
        memcpy(v.shape, shape, (size_t)ndim * sizeof(int64_t));
    if (strides != NULL) {
        if (ndim > 0)
            memcpy(v.strides, strides, (size_t)ndim * sizeof(int64_t));
    } else {
        status = fill_contiguous_strides(fn, ndim, shape, (int64_t)gm_dtype_itemsize(dtype), order,
                                         v.strides);
        if (status != GM_OK)
            return status;
    }
    status = gm__validate(fn, &v);
    if (status == GM_OK)
        *out_p = v;
    return status;
}

/* Public form of gm__ndview_init. */
gm_status gm_ndview_init(void *data, gm_dtype dtype, int ndim, const int64_t *shape,
                         const int64_t *strides, gm_order order, gm_ndview *out_p)
{
    return gm__ndview_init("gm_ndview_init", data, dtype, ndim, shape, strides, order, out_p);
}

/* Product of the extents; 0 for NULL. */
int64_t gm_ndview_size(const gm_ndview *view)
{
    int64_t size = 0;

    if (view == NULL || view->ndim < 0 || view->ndim > GM_MAX_DIMS)
        return -1;
    if (shape_size_quiet(view->ndim, view->shape, &size) != 0)
        return -1;
    return size;
}

/* Bytes per element; 0 for NULL. */
int64_t gm_ndview_itemsize(const gm_ndview *view)
{
    return view == NULL ? 0 : (int64_t)gm_dtype_itemsize(view->dtype);
}

/* size * itemsize; -1 for NULL and for an invalid descriptor (an invalid dtype included). */
int64_t gm_ndview_nbytes(const gm_ndview *view)
{
    int64_t size = gm_ndview_size(view);
    int64_t itemsize = size < 0 ? 0 : gm_ndview_itemsize(view);
    int64_t nbytes = 0;

    if (itemsize == 0 || gm__mul_overflow(size, itemsize, &nbytes))
        return -1;
    return nbytes;
}

/* numpy's relaxed contiguity: walk axes in `order`, ignoring extents of 1. */
static bool is_contiguous(const gm_ndview *v, gm_order order)
{
    int64_t expected = (int64_t)gm_dtype_itemsize(v->dtype);

    if (v->ndim < 0 || v->ndim > GM_MAX_DIMS)
        return false;
    for (int i = 0; i < v->ndim; i++) {
        if (v->shape[i] == 0)
            return true;
    }
    for (int k = 0; k < v->ndim; k++) {
        int i = order == GM_ORDER_C ? v->ndim - 1 - k : k;

        if (v->shape[i] == 1)
            continue;
        if (v->strides[i] != expected)
            return false;
        expected *= v->shape[i];
    }
    return true;
}

/* Relaxed C-contiguity (numpy's NPY_ARRAY_C_CONTIGUOUS flag). */
bool gm_ndview_is_c_contiguous(const gm_ndview *view)
{
    return view != NULL && is_contiguous(view, GM_ORDER_C);
}

/* Relaxed F-contiguity (numpy's NPY_ARRAY_F_CONTIGUOUS flag). */
bool gm_ndview_is_f_contiguous(const gm_ndview *view)
{
    return view != NULL && is_contiguous(view, GM_ORDER_F);
}

/* Either relaxed C- or F-contiguity. */
bool gm_ndview_is_contiguous(const gm_ndview *view)
{
    return gm_ndview_is_c_contiguous(view) || gm_ndview_is_f_contiguous(view);
}

/* Validate, then the byte range [lo, hi) relative to data; outputs set only on success. */
gm_status gm_ndview_extent(const gm_ndview *view, int64_t *lo_p, int64_t *hi_p)
{
    static const char fn[] = "gm_ndview_extent";
    int64_t lo = 0, hi = 0;
    gm_status status = GM_OK;

    if (lo_p == NULL || hi_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: lo_p and hi_p must not be NULL", fn);
    status = gm__validate_extent(fn, view, &lo, &hi);
    if (status == GM_OK) {
        *lo_p = lo;
        *hi_p = hi;
    }
    return status;
}
