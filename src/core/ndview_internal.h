/* Internal helpers shared by ndview.c, views.c and reshape.c. */
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

/* GM_ERR_INVALID_ARG for ndim < 0, GM_ERR_TOO_MANY_DIMS above GM_MAX_DIMS. */
gm_status gm__check_ndim(const char *fn, int ndim);

/* Product of a shape: GM_ERR_INVALID_ARG for a negative extent, GM_ERR_OVERFLOW. */
gm_status gm__shape_size(const char *fn, int ndim, const int64_t *shape, int64_t *size_p);

#endif
