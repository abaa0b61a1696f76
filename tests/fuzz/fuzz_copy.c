/*
 * libFuzzer target for the host copy engine (src/core/hostcopy.c): the
 * validation gm__host_copy_check / gm__host_copy_strided make (a one-pass
 * fast path, with the full checks behind it) and the copy itself (a memcpy
 * fast path for dense copies, a planner with merged, sorted and tiled axes
 * for the rest).
 *
 * The input decodes into a pair of descriptors over two 4 KiB buffers, from
 * tame (in-bounds, aligned) to hostile (huge or INT64_MIN strides, overflowing
 * offsets, mismatched shapes or dtypes, NULL data). Invariants for any input:
 *
 *   - no crash and no undefined behaviour (built with ASan and UBSan);
 *   - gm_ndview_validate accepts exactly the descriptors the documented
 *     rules (restated here, not calling the library) accept;
 *   - the check accepts exactly the pairs the documented rules accept
 *     (both descriptors valid, equal
 *     dtypes and shapes, data present unless empty, no broadcast (stride 0)
 *     destination axis, no INT64_MIN stride), and the copy returns what the
 *     check returned;
 *   - an accepted copy of two in-bounds descriptors whose destination
 *     elements do not overlap writes exactly what an element-by-element
 *     copy does, and no byte of the destination buffer outside its elements.
 *
 * Run: GM_FUZZ_TARGET=fuzz_copy tests/fuzz/run_fuzz.sh [SECONDS].
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "fuzz_reader.h"
#include "gpumem/ndview.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
static void fail(const char *what);

#define BUF      4096
#define MAX_NDIM 5

static const gm_dtype dtypes[] = {
    GM_UINT8, GM_INT16, GM_FLOAT32, GM_FLOAT64, GM_COMPLEX128, {GM_DTYPE_FLOAT, 32, 3},
};

/* An invalid dtype now and then. */
static gm_dtype pick_dtype(reader *r)
{
    uint8_t b = take_u8(r);

    if (b == 255)
        return (gm_dtype){7, 8, 1};
    return dtypes[b % (sizeof dtypes / sizeof dtypes[0])];
}

/* A stride: mostly small multiples of the item size, sometimes anything. */
static int64_t pick_stride(reader *r, int64_t k)
{
    uint8_t mode = take_u8(r);
    int64_t m = (int64_t)(int8_t)take_u8(r);

    switch (mode % 16) {
    case 0:
        return (int64_t)take_u64(r); /* hostile */
    case 1:
        return INT64_MIN;
    case 2:
        return m; /* unaligned */
    default:
        return (m % 24) * k;
    }
}

/* One descriptor over buf (or NULL / hostile data and offsets now and then). */
static gm_ndview decode_view(reader *r, unsigned char *buf, int ndim, const int64_t *shape,
                             gm_dtype dtype)
{
    gm_ndview v;
    int64_t k = (int64_t)gm_dtype_itemsize(dtype);
    uint8_t mode = take_u8(r);

    memset(&v, 0, sizeof v);
    v.data = mode == 255 ? NULL : buf;
    v.dtype = dtype;
    v.ndim = ndim;
    v.device_id = -1;
    v.offset = mode == 254 ? (int64_t)take_u64(r) : (int64_t)(take_u64(r) % BUF);
    for (int i = 0; i < ndim; i++) {
        v.shape[i] = shape[i];
        v.strides[i] = pick_stride(r, k > 0 ? k : 1);
    }
    return v;
}

/* Item size of the dtypes gm_ndview.h documents as valid, 0 otherwise (restated here). */
static int64_t valid_itemsize(gm_dtype t)
{
    int ok = 0;

    switch (t.code) {
    case GM_DTYPE_INT:
    case GM_DTYPE_UINT:
        ok = t.bits == 8 || t.bits == 16 || t.bits == 32 || t.bits == 64;
        break;
    case GM_DTYPE_FLOAT:
        ok = t.bits == 16 || t.bits == 32 || t.bits == 64;
        break;
    case GM_DTYPE_BFLOAT:
        ok = t.bits == 16;
        break;
    case GM_DTYPE_COMPLEX:
        ok = t.bits == 64 || t.bits == 128;
        break;
    case GM_DTYPE_BOOL:
        ok = t.bits == 8;
        break;
    default:
        break;
    }
    return ok && t.lanes >= 1 ? (int64_t)t.bits / 8 * t.lanes : 0;
}

/*
 * gm_ndview_validate's rules, restated without the library's code (which has
 * a one-pass fast path of its own): ndim in range, a valid dtype, no negative
 * extent, the byte size of the nonzero extents fits, and unless the view is
 * empty its byte extent (offset plus each axis' reach, plus an item) fits,
 * both ends and the span hi - lo between them.
 */
static int view_valid(const gm_ndview *v)
{
    int64_t k = valid_itemsize(v->dtype), nbytes = k, lo = v->offset, hi = v->offset;
    int empty = 0;

    if (v->ndim < 0 || v->ndim > GM_MAX_DIMS || k == 0)
        return 0;
    for (int i = 0; i < v->ndim; i++) {
        if (v->shape[i] < 0)
            return 0;
        if (v->shape[i] == 0)
            empty = 1;
        else if (__builtin_mul_overflow(nbytes, v->shape[i], &nbytes))
            return 0;
    }
    if (empty)
        return 1;
    for (int i = 0; i < v->ndim; i++) {
        int64_t reach = 0;

        if (__builtin_mul_overflow(v->shape[i] - 1, v->strides[i], &reach) ||
            (reach < 0 ? __builtin_add_overflow(lo, reach, &lo)
                       : __builtin_add_overflow(hi, reach, &hi)))
            return 0;
    }
    return !__builtin_add_overflow(hi, k, &hi) && !__builtin_sub_overflow(hi, lo, &nbytes);
}

/* The documented rules for a copy (the reference for the check). */
static gm_status rules(const gm_ndview *dst, const gm_ndview *src)
{
    int dst_ok = view_valid(dst), src_ok = view_valid(src);

    /* The library's own validation must agree with the restated rules. */
    if (dst_ok != (gm_ndview_validate(dst) == GM_OK) ||
        src_ok != (gm_ndview_validate(src) == GM_OK))
        fail("gm_ndview_validate disagrees with the restated rules");
    if (!dst_ok || !src_ok)
        return GM_ERR_INVALID_ARG;
    if (!gm_dtype_equal(dst->dtype, src->dtype))
        return GM_ERR_DTYPE;
    if (dst->ndim != src->ndim)
        return GM_ERR_SHAPE_MISMATCH;
    for (int i = 0; i < dst->ndim; i++)
        if (dst->shape[i] != src->shape[i])
            return GM_ERR_SHAPE_MISMATCH;
    if (gm_ndview_size(dst) == 0)
        return GM_OK;
    if (dst->data == NULL || src->data == NULL)
        return GM_ERR_NULL_POINTER;
    for (int i = 0; i < dst->ndim; i++) {
        if (dst->shape[i] > 1 && (dst->strides[i] == INT64_MIN || src->strides[i] == INT64_MIN))
            return GM_ERR_OVERFLOW;
        if (dst->strides[i] == 0 && dst->shape[i] > 1)
            return GM_ERR_INVALID_ARG;
    }
    return GM_OK;
}

/* Whether a valid view's bytes lie inside its 4 KiB buffer. */
static int in_bounds(const gm_ndview *v)
{
    int64_t lo = 0, hi = 0;

    return gm_ndview_extent(v, &lo, &hi) == GM_OK && lo >= 0 && hi <= BUF;
}

/* Byte offset of element `index` (C order over the shape) from the buffer start. */
static int64_t element_at(const gm_ndview *v, int64_t index)
{
    int64_t off = v->offset;

    for (int i = v->ndim - 1; i >= 0; i--) {
        off += (index % v->shape[i]) * v->strides[i];
        index /= v->shape[i];
    }
    return off;
}

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_copy: %s\n", what);
    abort();
}

/* The element-by-element reference; false when dst's elements overlap each other. */
static int reference(const gm_ndview *dst, const gm_ndview *src, unsigned char *out,
                     const unsigned char *in, unsigned char *owned)
{
    int64_t k = (int64_t)gm_dtype_itemsize(dst->dtype), n = gm_ndview_size(dst);

    memset(owned, 0, BUF);
    for (int64_t e = 0; e < n; e++) {
        int64_t d = element_at(dst, e), s = element_at(src, e);

        for (int64_t b = 0; b < k; b++) {
            if (owned[d + b])
                return 0;
            owned[d + b] = 1;
            out[d + b] = in[s + b];
        }
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned char src_buf[BUF], dst_buf[BUF], expect[BUF], owned[BUF];
    reader r = {data, size};
    int64_t shape[MAX_NDIM], src_shape[MAX_NDIM];
    int ndim = take_u8(&r) % (MAX_NDIM + 1);
    gm_dtype dtype = pick_dtype(&r), src_dtype = dtype;
    uint8_t twist = take_u8(&r);
    gm_ndview dst, src;
    gm_status want, got;

    for (int i = 0; i < ndim; i++) {
        uint8_t b = take_u8(&r);

        shape[i] = b == 255 ? (int64_t)take_u64(&r) : (int64_t)(b % 7);
        src_shape[i] = shape[i];
    }
    if (twist == 1 && ndim > 0)
        src_shape[ndim - 1] ^= 1; /* shape mismatch (no overflow, unlike + 1) */
    if (twist == 2)
        src_dtype = dtypes[(take_u8(&r)) % (sizeof dtypes / sizeof dtypes[0])];
    dst = decode_view(&r, dst_buf, ndim, shape, dtype);
    src = decode_view(&r, src_buf, twist == 3 && ndim > 0 ? ndim - 1 : ndim, src_shape, src_dtype);

    want = rules(&dst, &src);
    got = gm__host_copy_check(&dst, &src);
    if ((want == GM_OK) != (got == GM_OK)) {
        fprintf(stderr, "check says %s, the rules %s\n", gm_status_name(got), gm_status_name(want));
        fail("the check disagrees with the documented rules");
    }
    if (got != GM_OK || !in_bounds(&dst) || !in_bounds(&src))
        return 0; /* out-of-bounds views would make the copy write outside the buffers */
    for (int i = 0; i < BUF; i++) {
        src_buf[i] = (unsigned char)(i * 7 + 3);
        dst_buf[i] = (unsigned char)(i * 13 + 1);
    }
    memcpy(expect, dst_buf, BUF);
    if (!reference(&dst, &src, expect, src_buf, owned))
        return 0; /* overlapping destination elements: the result depends on order */
    if (gm__host_copy_strided(&dst, &src) != GM_OK)
        fail("the copy failed where the check passed");
    if (memcmp(dst_buf, expect, BUF) != 0) {
        for (int i = 0; i < BUF; i++)
            if (dst_buf[i] != expect[i]) {
                fprintf(stderr, "byte %d: %u, expected %u (%s)\n", i, dst_buf[i], expect[i],
                        owned[i] ? "an element" : "outside every element");
                break;
            }
        fail("the copy differs from the element-by-element reference");
    }
    return 0;
}
