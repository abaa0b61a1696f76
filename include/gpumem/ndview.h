/**
 * @file gpumem/ndview.h
 * @brief The ndarray descriptor and its view operations, with numpy's
 *        semantics.
 *
 * A gm_ndview describes an n-dimensional strided array anywhere (host, device,
 * pinned, mapped, managed memory). It owns nothing: it is a plain value that
 * can be copied freely. Element (i0, ..., i{n-1}) lives at byte address
 *
 *     (char *)data + offset + i0 * strides[0] + ... + i{n-1} * strides[n-1]
 *
 * Strides are in bytes, may be negative or zero (broadcast), and follow
 * numpy's conventions. Every view operation reads one descriptor and writes a
 * new one that addresses a subset of the same bytes; none of them touch the
 * data or dereference `data`. Output descriptors are written only on success
 * and may alias the input.
 *
 * All operations validate their inputs and return GM_ERR_* with a detail in
 * gm_last_error_message(); none of them allocate.
 */
#ifndef GPUMEM_NDVIEW_H
#define GPUMEM_NDVIEW_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "export.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Most dimensions a descriptor can have (numpy 2's NPY_MAXDIMS). */
#define GM_MAX_DIMS 64

/** Where the bytes of an array live. */
typedef enum gm_memory_kind {
    GM_MEMORY_HOST = 0,   /**< ordinary (pageable) host memory */
    GM_MEMORY_DEVICE = 1, /**< device memory of device `device_id` */
    GM_MEMORY_PINNED = 2, /**< page-locked host memory */
    GM_MEMORY_MAPPED = 3, /**< page-locked host memory mapped into the device */
    GM_MEMORY_MANAGED = 4 /**< unified / managed memory */
} gm_memory_kind;

/** Memory order of a new array or of a reshape / ravel. */
typedef enum gm_order {
    GM_ORDER_C = 'C', /**< row-major: last index varies fastest */
    GM_ORDER_F = 'F', /**< column-major: first index varies fastest */
    GM_ORDER_A = 'A', /**< F if the source is F- and not C-contiguous, else C */
    GM_ORDER_K = 'K'  /**< memory order of the source (ravel only) */
} gm_order;

/**
 * The ndarray descriptor. A plain struct: fill it with gm_ndview_init() or by
 * hand (then check it with gm_ndview_validate()).
 */
typedef struct gm_ndview {
    void *data;                   /**< base pointer (of the allocation, or any base) */
    int64_t offset;               /**< bytes from data to element (0, ..., 0) */
    gm_dtype dtype;               /**< element type */
    int32_t ndim;                 /**< number of dimensions, 0 ..= GM_MAX_DIMS */
    int32_t memory;               /**< a gm_memory_kind */
    int32_t device_id;            /**< device ordinal for device/mapped/managed memory, else -1 */
    int32_t reserved;             /**< gpumem writes zero and ignores it when reading */
    int64_t shape[GM_MAX_DIMS];   /**< extents; entries past ndim are ignored */
    int64_t strides[GM_MAX_DIMS]; /**< byte strides; entries past ndim are ignored */
} gm_ndview;

/**
 * @brief Describe a new array.
 * @param data     base pointer; NULL is allowed (a layout without memory yet).
 * @param dtype    element type (must be valid).
 * @param ndim     0 ..= GM_MAX_DIMS.
 * @param shape    ndim extents >= 0 (may be NULL when ndim is 0).
 * @param strides  ndim byte strides, or NULL for a contiguous layout in `order`.
 * @param order    GM_ORDER_C or GM_ORDER_F; used only when strides is NULL.
 * @param out_p    receives the descriptor (offset 0, GM_MEMORY_HOST, device -1).
 * @return GM_OK; GM_ERR_NULL_POINTER, GM_ERR_TOO_MANY_DIMS, GM_ERR_INVALID_ARG
 *         (negative extent, bad order), GM_ERR_DTYPE, GM_ERR_OVERFLOW (the
 *         element count or byte size does not fit in int64).
 */
GM_API gm_status gm_ndview_init(void *data, gm_dtype dtype, int ndim, const int64_t *shape,
                                const int64_t *strides, gm_order order, gm_ndview *out_p);

/** @brief Check a hand-filled descriptor (ndim, dtype, extents, overflow of size and extent). */
GM_API gm_status gm_ndview_validate(const gm_ndview *view);

/**
 * @brief Contiguous byte strides for a shape (numpy's rules; size-0 and
 *        size-1 extents count as 1 for the stride product).
 * @return GM_OK, GM_ERR_NULL_POINTER, GM_ERR_TOO_MANY_DIMS, GM_ERR_INVALID_ARG,
 *         GM_ERR_OVERFLOW.
 */
GM_API gm_status gm_contiguous_strides(int ndim, const int64_t *shape, int64_t itemsize,
                                       gm_order order, int64_t *strides_out);

/** @brief Number of elements (product of the shape; 1 for 0-d); -1 for NULL or an
 *         invalid descriptor (negative extent, overflow). */
GM_API int64_t gm_ndview_size(const gm_ndview *view);

/** @brief size * itemsize; -1 for NULL or an invalid descriptor. */
GM_API int64_t gm_ndview_nbytes(const gm_ndview *view);

/** @brief Bytes per element. */
GM_API int64_t gm_ndview_itemsize(const gm_ndview *view);

/**
 * @brief C-contiguity with numpy's relaxed rules: extents of 1 are ignored
 *        and any array with an extent of 0 is contiguous.
 */
GM_API bool gm_ndview_is_c_contiguous(const gm_ndview *view);

/** @brief F-contiguity with numpy's relaxed rules. */
GM_API bool gm_ndview_is_f_contiguous(const gm_ndview *view);

/** @brief Either C- or F-contiguous. */
GM_API bool gm_ndview_is_contiguous(const gm_ndview *view);

/**
 * @brief Byte extent of a view: the lowest byte touched and one past the
 *        highest, both relative to `data` (offset included). Correct for
 *        negative and zero strides. A size-0 view gives lo == hi == offset.
 * @return GM_OK, GM_ERR_NULL_POINTER, GM_ERR_OVERFLOW (either end, or the
 *         span hi - lo, does not fit in int64_t).
 */
GM_API gm_status gm_ndview_extent(const gm_ndview *view, int64_t *lo_p, int64_t *hi_p);

/**
 * @brief Reshape, with numpy's semantics: a view whenever numpy's
 *        ndarray.reshape would return a view (including numpy's no-copy
 *        reshape of non-contiguous sources), otherwise GM_ERR_NEEDS_COPY.
 * @param shape  new extents; one may be -1 (inferred). Unlike numpy 1.x,
 *               only -1 means "unknown": -2 is an error.
 * @param order  C, F or A: the index order used to read and write elements.
 * @return GM_OK; GM_ERR_NEEDS_COPY; GM_ERR_SHAPE_MISMATCH (wrong total size,
 *         or -1 cannot be inferred); GM_ERR_INVALID_ARG (two -1, other
 *         negative extents, unknown order); GM_ERR_TOO_MANY_DIMS;
 *         GM_ERR_OVERFLOW; GM_ERR_NULL_POINTER.
 */
GM_API gm_status gm_ndview_reshape(const gm_ndview *view, int ndim, const int64_t *shape,
                                   gm_order order, gm_ndview *out_p);

/**
 * @brief Flatten to 1-D: numpy's ravel(order) when that returns a view
 *        (C, F, A or K), otherwise GM_ERR_NEEDS_COPY. Like numpy, ravel never
 *        tries the no-copy reshape: a[::2].ravel() needs a copy even though
 *        reshape(-1) of it is a view.
 * @return GM_OK, GM_ERR_NEEDS_COPY, GM_ERR_INVALID_ARG (order),
 *         GM_ERR_NULL_POINTER, or a validation error of the input
 *         (GM_ERR_DTYPE, GM_ERR_TOO_MANY_DIMS, GM_ERR_OVERFLOW).
 */
GM_API gm_status gm_ndview_ravel(const gm_ndview *view, gm_order order, gm_ndview *out_p);

/** @brief Reverse the axes (numpy's .T). */
GM_API gm_status gm_ndview_transpose(const gm_ndview *view, gm_ndview *out_p);

/**
 * @brief Permute axes: axis i of the result is axis axes[i] of the input.
 * @param axes  ndim entries, each in [-ndim, ndim) (negative wraps), no repeats.
 * @return GM_OK, GM_ERR_INVALID_ARG (count or repeat), GM_ERR_OUT_OF_RANGE.
 */
GM_API gm_status gm_ndview_permute(const gm_ndview *view, int naxes, const int *axes,
                                   gm_ndview *out_p);

/** @brief Swap two axes (negative axes wrap). */
GM_API gm_status gm_ndview_swapaxes(const gm_ndview *view, int axis1, int axis2, gm_ndview *out_p);

/** "Not given" for a slice bound (Python's None). */
#define GM_NONE INT64_MIN

/** A Python slice start:stop:step; GM_NONE for an omitted part. */
typedef struct gm_slice {
    int64_t start;
    int64_t stop;
    int64_t step; /**< GM_NONE means 1; 0 is an error */
} gm_slice;

/** Slice helpers: GM_SLICE(a, b, s); GM_SLICE_ALL is ":". */
#define GM_SLICE(a, b, s) ((gm_slice){(a), (b), (s)})
#define GM_SLICE_ALL      GM_SLICE(GM_NONE, GM_NONE, GM_NONE)

/**
 * @brief Slice one axis like Python: bounds are clamped, negative bounds
 *        wrap once, negative steps walk backwards.
 * @return GM_OK, GM_ERR_OUT_OF_RANGE (axis), GM_ERR_INVALID_ARG (step 0).
 */
GM_API gm_status gm_ndview_slice(const gm_ndview *view, int axis, gm_slice slice, gm_ndview *out_p);

/**
 * @brief Integer-index one axis, dropping it (a[..., i, ...]). Negative
 *        indices wrap once.
 * @return GM_OK, GM_ERR_OUT_OF_RANGE (axis or index).
 */
GM_API gm_status gm_ndview_index(const gm_ndview *view, int axis, int64_t index, gm_ndview *out_p);

/** Kinds of items in a multi-axis index expression. */
typedef enum gm_index_kind {
    GM_INDEX_INT = 0,     /**< integer: drops the axis */
    GM_INDEX_SLICE = 1,   /**< slice: keeps the axis */
    GM_INDEX_NEWAXIS = 2, /**< numpy.newaxis / None: inserts an axis of 1 */
    GM_INDEX_ELLIPSIS = 3 /**< ...: as many ":" as needed (at most one) */
} gm_index_kind;

/** One item of a basic-indexing expression a[i, 1:5:2, None, ...]. */
typedef struct gm_index_item {
    gm_index_kind kind;
    int64_t index;  /**< for GM_INDEX_INT */
    gm_slice slice; /**< for GM_INDEX_SLICE */
} gm_index_item;

#define GM_IDX_INT(i)         ((gm_index_item){GM_INDEX_INT, (i), GM_SLICE_ALL})
#define GM_IDX_SLICE(a, b, s) ((gm_index_item){GM_INDEX_SLICE, 0, GM_SLICE((a), (b), (s))})
#define GM_IDX_ALL            ((gm_index_item){GM_INDEX_SLICE, 0, GM_SLICE_ALL})
#define GM_IDX_NEWAXIS        ((gm_index_item){GM_INDEX_NEWAXIS, 0, GM_SLICE_ALL})
#define GM_IDX_ELLIPSIS       ((gm_index_item){GM_INDEX_ELLIPSIS, 0, GM_SLICE_ALL})

/**
 * @brief numpy basic indexing: a[items...]. Missing trailing items mean ":".
 * @return GM_OK, GM_ERR_OUT_OF_RANGE (index), GM_ERR_INVALID_ARG (too many
 *         indices, two ellipses, step 0, unknown kind), GM_ERR_TOO_MANY_DIMS.
 */
GM_API gm_status gm_ndview_getitem(const gm_ndview *view, int nitems, const gm_index_item *items,
                                   gm_ndview *out_p);

/**
 * @brief Insert an axis of extent 1 at `axis` (in [-ndim-1, ndim]), like
 *        numpy.expand_dims.
 */
GM_API gm_status gm_ndview_expand_dims(const gm_ndview *view, int axis, gm_ndview *out_p);

/**
 * @brief Remove axes of extent 1: all of them when naxes is 0 / axes NULL,
 *        else the listed ones (numpy.squeeze: a listed axis whose extent is
 *        not 1 is GM_ERR_INVALID_ARG; repeats are GM_ERR_INVALID_ARG).
 */
GM_API gm_status gm_ndview_squeeze(const gm_ndview *view, int naxes, const int *axes,
                                   gm_ndview *out_p);

/**
 * @brief Reinterpret the bytes as another dtype (numpy's ndarray.view(dtype)).
 *
 * Same item size: only the dtype changes. Different item size: the array must
 * have ndim >= 1 and its last axis must be contiguous (stride == itemsize,
 * unless its extent is 1 or the array is empty); the last axis's byte length
 * must be divisible by the new item size; the last extent and stride change.
 * @return GM_OK, GM_ERR_DTYPE, GM_ERR_INVALID_ARG (0-d, non-contiguous last
 *         axis, indivisible length).
 */
GM_API gm_status gm_ndview_view_dtype(const gm_ndview *view, gm_dtype dtype, gm_ndview *out_p);

/**
 * @brief Numba's DeviceNDArray.split(section) for 1-D contiguous views:
 *        consecutive pieces of `section` elements, the last one shorter.
 *
 * @param section    elements per piece, > 0.
 * @param max_pieces capacity of pieces (may be 0 with pieces NULL to count).
 * @param pieces     receives min(count, max_pieces) views.
 * @param count_p    receives the total number of pieces (ceil(n / section);
 *                   0 for an empty array).
 * @return GM_OK, GM_ERR_INVALID_ARG (not 1-D or not contiguous, section <= 0),
 *         GM_ERR_NULL_POINTER.
 */
GM_API gm_status gm_ndview_split(const gm_ndview *view, int64_t section, int64_t max_pieces,
                                 gm_ndview *pieces, int64_t *count_p);

/**
 * @brief Strides of a new contiguous array that keeps the memory order of the
 *        axes of `view` (numpy's empty_like(order='K')): C strides if view is
 *        C-contiguous, F strides if it is F- and not C-contiguous, otherwise
 *        axes ordered by decreasing |stride| (ties keep axis order). The
 *        result has the same shape, dtype, memory and device, data NULL and
 *        offset 0. Numba's device_array_like gives the same strides except
 *        for negative ones, which it orders by signed value (a[::-1, ::2] of
 *        a 3 x 8 float64 array: numpy and this (32, 8), Numba (8, 24)).
 */
GM_API gm_status gm_ndview_like(const gm_ndview *view, gm_ndview *out_p);

/**
 * @brief Format a shape as "(2, 3)" / "(5,)" / "()" into buf (for messages).
 * @return buf; truncates with "..." when size is too small.
 */
GM_API char *gm_format_shape(int ndim, const int64_t *shape, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_NDVIEW_H */
