/*
 * Buffers and random strided layouts for the copy tests (test_copy_fast.c
 * and test_copy_views.c): a region of each memory kind a copy can meet, a
 * view in it, and layouts with any axis order, reversed axes, extent-1 axes
 * with any stride, gaps between and inside axes, broadcast axes for sources.
 */
#ifndef GPUMEM_TESTS_HOST_RT_LAYOUT_H
#define GPUMEM_TESTS_HOST_RT_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gm_test.h"

/* The memory a region is: one of each kind a copy can meet. */
typedef enum kind { PAGEABLE, PINNED, MAPPED, DEVICE, MANAGED, NKINDS } kind;

/* A buffer views live in. */
typedef struct region {
    unsigned char *base;
    size_t bytes;
    gm_array *array; /* all but pageable memory */
} region;

/* A region of `bytes` bytes (at least 1) of memory kind kd. */
static inline region region_new(gm_context *ctx, kind kd, int64_t bytes)
{
    region r = {NULL, (size_t)(bytes > 0 ? bytes : 1), NULL};
    int64_t n = (int64_t)r.bytes;

    switch (kd) {
    case PAGEABLE:
        r.base = malloc(r.bytes);
        assert_non_null(r.base);
        return r;
    case PINNED:
        assert_ok(gm_pinned_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &r.array));
        break;
    case MAPPED:
        assert_ok(gm_mapped_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, 0, &r.array));
        break;
    case DEVICE:
        assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &r.array));
        break;
    default:
        assert_ok(gm_managed_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &r.array));
        break;
    }
    r.base = gm_array_view(r.array)->data;
    return r;
}

static inline void region_free(region *r)
{
    if (r->array != NULL)
        gm_array_release(&r->array);
    else
        free(r->base);
    r->base = NULL;
}

/* A view of `r` with the given layout (memory kind and device from the region). */
static inline gm_ndview view_in(const region *r, gm_dtype dtype, int ndim, const int64_t *shape,
                                const int64_t *strides, int64_t offset)
{
    gm_ndview v;

    memset(&v, 0, sizeof(v));
    if (r->array != NULL) {
        v = *gm_array_view(r->array);
    } else {
        v.memory = GM_MEMORY_HOST;
        v.device_id = -1;
    }
    v.data = r->base;
    v.dtype = dtype;
    v.ndim = ndim;
    v.offset = offset;
    for (int i = 0; i < ndim; i++) {
        v.shape[i] = shape[i];
        v.strides[i] = strides[i];
    }
    return v;
}

#define RT_LAYOUT_MAXD 4

/* A layout of a shape for items of k bytes, and the bytes of buffer it needs. */
typedef struct rt_layout {
    int64_t strides[RT_LAYOUT_MAXD];
    int64_t offset;
    int64_t bytes;
} rt_layout;

/* A number in [0, n) from the xorshift state *rng. */
static inline int64_t rt_pick(uint64_t *rng, int64_t n)
{
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    return (int64_t)(*rng % (uint64_t)n);
}

/*
 * Axes packed in a random order, some reversed, extent-1 axes with any
 * stride; with `gaps` some axes spaced out (a[::2] and wider), and with
 * `zeros` (a source) some broadcast.
 */
static inline void rt_random_layout(uint64_t *rng, int ndim, const int64_t *shape, int64_t k,
                                    bool gaps, bool zeros, rt_layout *l)
{
    int order[RT_LAYOUT_MAXD];
    int64_t stride = k, lo = 0, hi = k;

    for (int i = 0; i < ndim; i++)
        order[i] = i;
    for (int i = ndim - 1; i > 0; i--) {
        int j = (int)rt_pick(rng, i + 1), t = order[i];

        order[i] = order[j];
        order[j] = t;
    }
    for (int j = 0; j < ndim; j++) { /* stride: the span of the axes placed so far */
        int i = order[j];
        int64_t n = shape[i], step = stride;

        if (n == 1) { /* any stride: never stepped */
            l->strides[i] = (rt_pick(rng, 9) - 4) * (rt_pick(rng, 2) == 0 ? k : 1);
            continue;
        }
        if (zeros && rt_pick(rng, 4) == 0) {
            l->strides[i] = 0;
            continue;
        }
        if (gaps && rt_pick(rng, 2) == 0) /* the axis itself strided: a[::2], a[::3] */
            step *= 2 + rt_pick(rng, 2);
        l->strides[i] = rt_pick(rng, 3) == 0 ? -step : step;
        stride = step * (n > 1 ? n : 1) * (gaps && rt_pick(rng, 3) == 0 ? 2 : 1);
    }
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) {
            lo = 0;
            hi = 0;
            break;
        }
        if (l->strides[i] < 0)
            lo += (shape[i] - 1) * l->strides[i];
        else
            hi += (shape[i] - 1) * l->strides[i];
    }
    l->offset = -lo + rt_pick(rng, 3) * (rt_pick(rng, 2) == 0 ? k : 1);
    l->bytes = l->offset + hi + rt_pick(rng, 5);
}

#endif /* GPUMEM_TESTS_HOST_RT_LAYOUT_H */
