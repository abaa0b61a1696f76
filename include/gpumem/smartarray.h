/**
 * @file gpumem/smartarray.h
 * @brief Numba's SmartArray: an array with a host and a device copy that
 *        moves data only when the side asked for is stale.
 *
 * A smart array tracks which of its two sides holds current data. Asking
 * for a side (gm_smart_array_get) allocates it on first use and copies the
 * other side into it only if it is stale; after writing a side, say so with
 * gm_smart_array_mark_changed, which makes the other side stale. Transfers
 * are synchronous and counted (gm_smart_array_stats), so inside a stream
 * callback a call that must transfer (a get of a stale side, a launch with
 * a stale host side) returns GM_ERR_STATE (runtime.h: no synchronous
 * operation on device memory there). The device side is a
 * device array with gm_ndview_like()'s layout of the host side.
 *
 * Passed to a kernel with gm_arg_smart() (gpumem/launch.h), as Numba passes
 * a SmartArray to a cuda.jit function, the launch moves the data to the
 * device if the host side is newer and leaves the kernel's result there: the
 * device side is the current one afterwards, and the host side is refreshed
 * by its next gm_smart_array_get, which waits for a launch made on a stream.
 *
 * Ownership: a smart array is created by gm_smart_array_create /
 * gm_smart_array_from_host and destroyed by gm_smart_array_destroy, which
 * releases the memory gpumem allocated for it (through the deallocation
 * queue, like any array). Destroy it before its context. Calls on one smart
 * array are serialized by its own lock; the descriptors gm_smart_array_get
 * returns stay valid until gm_smart_array_destroy.
 */
#ifndef GPUMEM_SMARTARRAY_H
#define GPUMEM_SMARTARRAY_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "export.h"
#include "ndview.h"
#include "runtime.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gm_smart_array gm_smart_array;

/** A side of a smart array (Numba's where='host' / where='gpu'). */
typedef enum gm_where {
    GM_WHERE_HOST = 1,  /**< the host copy */
    GM_WHERE_DEVICE = 2 /**< the device copy */
} gm_where;

/** Introspection of a smart array. */
typedef struct gm_smart_stats {
    int64_t to_device;     /**< host-to-device transfers so far */
    int64_t to_host;       /**< device-to-host transfers so far */
    bool host_valid;       /**< the host side holds current data */
    bool device_valid;     /**< the device side holds current data */
    bool host_allocated;   /**< the host side exists */
    bool device_allocated; /**< the device side exists */
} gm_smart_stats;

/**
 * @brief A smart array of a new shape (Numba's SmartArray(shape=, dtype=,
 *        where=)): only side `where` is allocated, with undefined contents,
 *        and counts as current; the other side is allocated on first use.
 *        The host side is gpumem-owned host memory.
 * @param order GM_ORDER_C or GM_ORDER_F.
 * @param sa_p  receives the smart array; destroy with gm_smart_array_destroy().
 * @return GM_OK; GM_ERR_NULL_POINTER; GM_ERR_INVALID_ARG (order, where); the
 *         errors of gm_ndview_init(); allocation errors.
 */
GM_API gm_status gm_smart_array_create(gm_context *ctx, int ndim, const int64_t *shape,
                                       gm_dtype dtype, gm_order order, gm_where where,
                                       gm_smart_array **sa_p);

/**
 * @brief A smart array whose host side starts from `host` (Numba's
 *        SmartArray(obj, copy=)); the host side is current, the device side is
 *        allocated on first use.
 * @param host host memory (GM_MEMORY_HOST, PINNED or MAPPED); any strides.
 *        device_id is -1 for HOST and PINNED memory, the context's device
 *        or -1 for MAPPED memory (as gpumem's own arrays carry). The same
 *        checks apply with either `copy`.
 * @param copy true: the host side is a gpumem-owned copy of `host` (layout of
 *        gm_ndview_like()); false: the host side is `host` itself, which must
 *        stay valid until the smart array is destroyed.
 * @return GM_OK; GM_ERR_NULL_POINTER; GM_ERR_INVALID_ARG (device or
 *         managed memory, an unknown memory kind, a host or pinned view whose
 *         device_id is not -1); GM_ERR_WRONG_CONTEXT (mapped memory of
 *         another device); validation, allocation and copy errors.
 */
GM_API gm_status gm_smart_array_from_host(gm_context *ctx, const gm_ndview *host, bool copy,
                                          gm_smart_array **sa_p);

/**
 * @brief The descriptor of side `where`, made current first: allocated if
 *        needed, and filled from the other side if stale (one counted,
 *        synchronous transfer). A side that is already current moves nothing.
 *        Both sides are current afterwards when a transfer happened.
 * @param view_p receives the descriptor (host side: a host memory kind;
 *        device side: GM_MEMORY_DEVICE); written only on success.
 * @return GM_OK; GM_ERR_NULL_POINTER; GM_ERR_INVALID_ARG (where);
 *         allocation and copy errors (the side then stays stale).
 */
GM_API gm_status gm_smart_array_get(gm_smart_array *sa, gm_where where, gm_ndview *view_p);

/**
 * @brief Numba's mark_changed(where): side `where` was written, so it is now
 *        the only current side; the other one will be refreshed by its next get.
 * @return GM_OK; GM_ERR_NULL_POINTER; GM_ERR_INVALID_ARG (where);
 *         GM_ERR_STATE if that side was never allocated (get it first).
 */
GM_API gm_status gm_smart_array_mark_changed(gm_smart_array *sa, gm_where where);

/** @brief Transfer counts and side states; GM_ERR_NULL_POINTER for NULL arguments. */
GM_API gm_status gm_smart_array_stats(gm_smart_array *sa, gm_smart_stats *stats_p);

/**
 * @brief Release the sides gpumem allocated (a copy=false host side is left
 *        to its owner) and free the smart array; sets *sa_p to NULL. NULL and
 *        *sa_p == NULL are accepted.
 */
GM_API void gm_smart_array_destroy(gm_smart_array **sa_p);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_SMARTARRAY_H */
