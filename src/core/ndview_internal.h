/* Internal descriptor helpers shared by the core (ndview.c, views.c, reshape.c, copy.c, ...). */
#ifndef GPUMEM_SRC_CORE_NDVIEW_INTERNAL_H
#define GPUMEM_SRC_CORE_NDVIEW_INTERNAL_H

#include "core.h"

/* Validate a descriptor; errors name `fn`. */
gm_status gm__validate(const char *fn, const gm_ndview *v);

/*
 * Validate a descriptor and give its byte extent [lo, hi) relative to data
 * (gm_ndview_extent's values, validated once); outputs set only on success.
 */
gm_status gm__validate_extent(const char *fn, const gm_ndview *v, int64_t *lo_p, int64_t *hi_p);

/*
 * Every check of gm__validate_extent in one pass, for the common valid case,
 * given the itemsize k of the view's dtype (gm__dtype_bytes; 0 for an
 * invalid dtype): true (with the extent [*lo_p, *hi_p) relative to data)
 * only when the full checks would pass with the same extent; false on any
 * doubt, and the full checks then decide and explain. An empty view (an
 * extent 0) gives lo == hi == offset, any other hi - lo >= k. Inline: the
 * copy engine's fast path runs it on both sides of every transfer.
 * (The element count cannot overflow when the byte count of the nonzero
 * extents does not, the itemsize being >= 1.)
 */
static inline bool gm__extent_quick(const gm_ndview *v, int64_t k, int64_t *lo_p, int64_t *hi_p)
{
    int64_t nbytes = k, lo = v->offset, hi = v->offset;
    bool empty = false;

    if (k == 0 || v->ndim < 0 || v->ndim > GM_MAX_DIMS)
        return false;
    for (int i = 0; i < v->ndim; i++) {
        int64_t n = v->shape[i], reach = 0;

        if (n < 0)
            return false;
        if (n == 0) {
            empty = true;
            continue;
        }
        if (gm__mul_overflow(nbytes, n, &nbytes) ||
            gm__mul_overflow(n - 1, v->strides[i], &reach) ||
            (reach < 0 ? gm__add_overflow(lo, reach, &lo) : gm__add_overflow(hi, reach, &hi)))
            return false;
    }
    if (empty) {
        lo = hi = v->offset;
    } else if (gm__add_overflow(hi, k, &hi) || gm__sub_overflow(hi, lo, &nbytes)) {
        return false; /* hi - lo must fit too: every user takes it */
    }
    *lo_p = lo;
    *hi_p = hi;
    return true;
}

/*
 * Write a result descriptor: *out_p = *r with `reserved` zero (ndview.h: gpumem
 * writes zero there, whatever the input carried). r may not alias out_p.
 */
static inline void gm__put_view(gm_ndview *out_p, const gm_ndview *r)
{
    *out_p = *r;
    out_p->reserved = 0;
}

/* GM_ERR_INVALID_ARG for ndim < 0, GM_ERR_TOO_MANY_DIMS above GM_MAX_DIMS. */
gm_status gm__check_ndim(const char *fn, int ndim);

/* Product of a shape: GM_ERR_INVALID_ARG for a negative extent, GM_ERR_OVERFLOW. */
gm_status gm__shape_size(const char *fn, int ndim, const int64_t *shape, int64_t *size_p);

/*
 * gm_ndview_init, gm_ndview_reshape, gm_ndview_ravel and gm_ndview_getitem
 * with messages naming `fn`: for public calls that build on them.
 */
gm_status gm__ndview_init(const char *fn, void *data, gm_dtype dtype, int ndim,
                          const int64_t *shape, const int64_t *strides, gm_order order,
                          gm_ndview *out_p);
gm_status gm__ndview_reshape(const char *fn, const gm_ndview *view, int ndim, const int64_t *shape,
                             gm_order order, gm_ndview *out_p);
gm_status gm__ndview_ravel(const char *fn, const gm_ndview *view, gm_order order, gm_ndview *out_p);
gm_status gm__ndview_getitem(const char *fn, const gm_ndview *view, int nitems,
                             const gm_index_item *items, gm_ndview *out_p);

#endif
