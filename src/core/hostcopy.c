/*
 * The strided host copy engine: copy between two host descriptors of equal
 * shape and dtype, any byte strides on either side (negative strides on both,
 * zero strides on the source: broadcasting).
 *
 * A copy is first normalised into a plan: extents of 1 are dropped, every
 * destination stride is made positive (walking both sides backwards together,
 * which is allowed because the element order of a copy does not matter),
 * axes are sorted by decreasing destination stride, and neighbours that are
 * contiguous on both sides are merged; a short run left contiguous on both
 * sides under a strided axis (2, 4, 8 or 16 bytes: the narrow rows of a
 * pitched copy) becomes one wider item. Then one of three kernels runs the
 * innermost axis (or two), under an index-counter loop over the rest:
 *
 *   - both sides contiguous: one memcpy per run (a fully contiguous copy is a
 *     single memcpy);
 *   - a transpose (the destination's fastest axis is strided in the source
 *     and another axis is the source's fastest): cache-blocked tiles;
 *   - otherwise a strided 1-D loop.
 *
 * The 1-D and tile loops are specialised for 1, 2, 4, 8 and 16-byte items,
 * with loops of their own for a[::2] and a[::-1] of 4-byte items.
 *
 * Overlap between source and destination is the caller's problem: the
 * result of an overlapping copy is undefined (like memcpy).
 */
#include <stdbool.h>
#include <string.h>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "backend.h"
#include "ndview_internal.h"

#define GM__ALWAYS_INLINE inline __attribute__((always_inline))

#define GM__ERRFN "gm_copy"

/* A source stride (bytes) from which reading along the destination's fastest
 * axis wastes most of each cache line, so tiling pays. */
#define TILE_MIN_SRC_STRIDE 64
/* Smallest extents worth tiling. */
#define TILE_MIN_EXTENT 4

/* One axis of a plan: extent and byte strides on both sides. */
typedef struct copy_axis {
    int64_t n;
    int64_t ds;
    int64_t ss;
} copy_axis;

/* A normalised copy: element 0 of both sides and the axes that matter, the
 * destination's fastest last. */
typedef struct copy_plan {
    char *dst;
    const char *src;
    size_t itemsize;
    int naxes;
    copy_axis ax[GM_MAX_DIMS];
} copy_plan;

/* Arguments of the innermost kernel. */
typedef struct kernel_args {
    int64_t na, dsa, ssa; /* the destination's fastest axis */
    int64_t nb, dsb, ssb; /* tile kernels: the source's fastest axis */
    int64_t tile;         /* tile kernels: tile edge in elements */
    size_t bytes;         /* memcpy kernel: bytes per run; generic kernels: item size */
} kernel_args;

typedef void (*copy_kernel)(char *dst, const char *src, const kernel_args *args);

/* ------------------------------------------------------------- kernels */

/* Strided 1-D copy of n items of k bytes (k, and ds or ss when the caller
 * passes a literal, are constants after inlining). Offsets, not pointers,
 * advance, so no pointer is formed outside the views. */
static GM__ALWAYS_INLINE void line_run(char *dst, const char *src, int64_t n, int64_t ds,
                                       int64_t ss, size_t k)
{
    int64_t doff = 0;
    int64_t soff = 0;
    int64_t i = 0;

    for (; i + 4 <= n; i += 4) { /* unrolled: independent loads and stores */
        memcpy(dst + doff, src + soff, k);
        memcpy(dst + doff + ds, src + soff + ss, k);
        memcpy(dst + doff + 2 * ds, src + soff + 2 * ss, k);
        memcpy(dst + doff + 3 * ds, src + soff + 3 * ss, k);
        doff += 4 * ds;
        soff += 4 * ss;
    }
    for (; i < n; i++) {
        memcpy(dst + doff, src + soff, k);
        doff += ds;
        soff += ss;
    }
}

/* A line, specialised for a contiguous destination or source. */
static GM__ALWAYS_INLINE void line_copy(char *dst, const char *src, const kernel_args *a, size_t k)
{
    int64_t n = a->na;
    int64_t ds = a->dsa;
    int64_t ss = a->ssa;

    if (ds == (int64_t)k && ss == -(int64_t)k) /* a[::-1]: constant strides, so it vectorises */
        line_run(dst, src, n, (int64_t)k, -(int64_t)k, k);
    else if (ds == (int64_t)k && ss == 0) /* a fill (a broadcast item): the same */
        line_run(dst, src, n, (int64_t)k, 0, k);
    else if (ds == (int64_t)k)
        line_run(dst, src, n, (int64_t)k, ss, k);
    else if (ss == (int64_t)k)
        line_run(dst, src, n, ds, (int64_t)k, k);
    else
        line_run(dst, src, n, ds, ss, k);
}

/* Cache-blocked 2-D copy over axes a (dst-fast) and b (src-fast): square
 * tiles, rows of a tile along b, each row a line along a. */
static GM__ALWAYS_INLINE void tile_copy(char *dst, const char *src, const kernel_args *a, size_t k)
{
    const int64_t na = a->na, nb = a->nb, tile = a->tile;
    const int64_t dsa = a->dsa, ssa = a->ssa, dsb = a->dsb, ssb = a->ssb;

    for (int64_t b0 = 0; b0 < nb; b0 += tile) {
        int64_t b1 = b0 + tile < nb ? b0 + tile : nb;

        for (int64_t a0 = 0; a0 < na; a0 += tile) {
            int64_t an = a0 + tile < na ? tile : na - a0;

            for (int64_t j = b0; j < b1; j++) {
                char *drow = dst + j * dsb + a0 * dsa;
                const char *srow = src + j * ssb + a0 * ssa;

                if (dsa == (int64_t)k)
                    line_run(drow, srow, an, (int64_t)k, ssa, k);
                else
                    line_run(drow, srow, an, dsa, ssa, k);
            }
        }
    }
}

/* Contiguous run on both sides. */
static void run_memcpy(char *dst, const char *src, const kernel_args *a)
{
    memcpy(dst, src, a->bytes);
}

/* Itemsize-specialised entry points (the size is a constant in each). */
static void line_1(char *d, const char *s, const kernel_args *a)
{
    line_copy(d, s, a, 1);
}

static void line_2(char *d, const char *s, const kernel_args *a)
{
    line_copy(d, s, a, 2);
}

/* Every other 4-byte item (a[::2], numpy's commonest stride), in a loop the compiler can
 * vectorise: gather into a contiguous destination, or scatter from a contiguous source. */
static void every_other_4(char *dst, const char *src, int64_t n, bool gather)
{
    for (int64_t i = 0; i < n; i++) {
        if (gather)
            memcpy(dst + 4 * i, src + 8 * i, 4);
        else
            memcpy(dst + 8 * i, src + 4 * i, 4);
    }
}

/* 4-byte items in reverse order (a[::-1] into a contiguous destination), in a loop the
 * compiler can vectorise. */
static void reverse_4(char *dst, const char *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + 4 * i, src - 4 * i, 4);
}

static void line_4(char *d, const char *s, const kernel_args *a)
{
    if (a->dsa == 4 && a->ssa == -4)
        reverse_4(d, s, a->na);
    else if (a->dsa == 4 && a->ssa == 8)
        every_other_4(d, s, a->na, true);
    else if (a->dsa == 8 && a->ssa == 4)
        every_other_4(d, s, a->na, false);
    else
        line_copy(d, s, a, 4);
}

static void line_8(char *d, const char *s, const kernel_args *a)
{
    line_copy(d, s, a, 8);
}

static void line_16(char *d, const char *s, const kernel_args *a)
{
    line_copy(d, s, a, 16);
}

static void line_any(char *d, const char *s, const kernel_args *a)
{
    line_copy(d, s, a, a->bytes);
}

static void tile_1(char *d, const char *s, const kernel_args *a)
{
    tile_copy(d, s, a, 1);
}

static void tile_2(char *d, const char *s, const kernel_args *a)
{
    tile_copy(d, s, a, 2);
}

#if defined(__SSE2__)
#ifndef BLOCKS_TILE_EDGE
#define BLOCKS_TILE_EDGE 64
#endif
/*
 * A tile copy of 4-byte items between a destination contiguous along a and a
 * source contiguous along b (a transpose): 4 x 4 blocks go through registers
 * (four 16-byte loads, an in-register transpose, four 16-byte stores; the
 * shuffles move bits, so any 4-byte type is copied exactly), the edges item
 * by item.
 */
static void tile_4_blocks(char *dst, const char *src, const kernel_args *a)
{
    const int64_t na = a->na, nb = a->nb, tile = a->tile;
    const int64_t ssa = a->ssa, dsb = a->dsb;

    for (int64_t b0 = 0; b0 < nb; b0 += tile) {
        const int64_t b1 = b0 + tile < nb ? b0 + tile : nb;
        const int64_t b4 = b0 + ((b1 - b0) & ~(int64_t)3);

        for (int64_t a0 = 0; a0 < na; a0 += tile) {
            const int64_t a1 = a0 + tile < na ? a0 + tile : na;
            const int64_t a4 = a0 + ((a1 - a0) & ~(int64_t)3);

            for (int64_t j = b0; j < b4; j += 4) {
                for (int64_t i = a0; i < a4; i += 4) {
                    const char *s = src + j * 4 + i * ssa;
                    char *d = dst + j * dsb + i * 4;
                    __m128 r0 = _mm_loadu_ps((const float *)(const void *)s);
                    __m128 r1 = _mm_loadu_ps((const float *)(const void *)(s + ssa));
                    __m128 r2 = _mm_loadu_ps((const float *)(const void *)(s + 2 * ssa));
                    __m128 r3 = _mm_loadu_ps((const float *)(const void *)(s + 3 * ssa));

                    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
                    _mm_storeu_ps((float *)(void *)d, r0);
                    _mm_storeu_ps((float *)(void *)(d + dsb), r1);
                    _mm_storeu_ps((float *)(void *)(d + 2 * dsb), r2);
                    _mm_storeu_ps((float *)(void *)(d + 3 * dsb), r3);
                }
                for (int64_t jj = j; a4 < a1 && jj < j + 4; jj++) /* the a edge of these rows */
                    line_run(dst + jj * dsb + a4 * 4, src + jj * 4 + a4 * ssa, a1 - a4, 4, ssa, 4);
            }
            for (int64_t jj = b4; jj < b1; jj++) /* the b edge */
                line_run(dst + jj * dsb + a0 * 4, src + jj * 4 + a0 * ssa, a1 - a0, 4, ssa, 4);
        }
    }
}
#endif

static void tile_4(char *d, const char *s, const kernel_args *a)
{
#if defined(__SSE2__)
    if (a->dsa == 4 && a->ssb == 4) {
        kernel_args wide = *a;

        wide.tile = BLOCKS_TILE_EDGE;
        tile_4_blocks(d, s, &wide);
        return;
    }
#endif
    tile_copy(d, s, a, 4);
}

static void tile_8(char *d, const char *s, const kernel_args *a)
{
    tile_copy(d, s, a, 8);
}

static void tile_16(char *d, const char *s, const kernel_args *a)
{
    tile_copy(d, s, a, 16);
}

static void tile_any(char *d, const char *s, const kernel_args *a)
{
    tile_copy(d, s, a, a->bytes);
}

/* Kernels for an item size: the strided line and the tile, with the tile edge. */
typedef struct kernel_set {
    size_t itemsize;
    copy_kernel line;
    copy_kernel tile;
    int64_t tile_edge;
} kernel_set;

/* Tiles of 16 x 16 items measured best for every size (4096 x 4096 float32
 * included, where larger tiles suffer cache-set conflicts). */
static const kernel_set kernel_sets[] = {
    {1, line_1, tile_1, 16}, {2, line_2, tile_2, 16},    {4, line_4, tile_4, 16},
    {8, line_8, tile_8, 16}, {16, line_16, tile_16, 16},
};

/* The kernels for items of `itemsize` bytes (generic ones for odd sizes). */
static kernel_set kernels_for(size_t itemsize)
{
    kernel_set generic = {itemsize, line_any, tile_any, 16};

    for (size_t i = 0; i < sizeof kernel_sets / sizeof kernel_sets[0]; i++) {
        if (kernel_sets[i].itemsize == itemsize)
            return kernel_sets[i];
    }
    return generic;
}

/* ---------------------------------------------------------- validation */

/* GM_ERR_DTYPE naming both dtypes. */
static gm_status dtype_mismatch(const gm_ndview *dst, const gm_ndview *src)
{
    char dname[GM_DTYPE_NAME_MAX] = "?";
    char sname[GM_DTYPE_NAME_MAX] = "?";

    (void)gm_dtype_name(dst->dtype, dname, sizeof dname);
    (void)gm_dtype_name(src->dtype, sname, sizeof sname);
    return gm__error(GM_ERR_DTYPE, "%s: destination dtype %s differs from source dtype %s",
                     GM__ERRFN, dname, sname);
}

/* GM_ERR_SHAPE_MISMATCH naming both shapes, unless the shapes are equal. */
static gm_status check_shapes(const gm_ndview *dst, const gm_ndview *src)
{
    char dshape[256];
    char sshape[256];
    bool same = dst->ndim == src->ndim;

    for (int i = 0; same && i < dst->ndim; i++)
        same = dst->shape[i] == src->shape[i];
    if (same)
        return GM_OK;
    return gm__error(GM_ERR_SHAPE_MISMATCH,
                     "%s: destination shape %s does not match source shape %s", GM__ERRFN,
                     gm_format_shape(dst->ndim, dst->shape, dshape, sizeof dshape),
                     gm_format_shape(src->ndim, src->shape, sshape, sizeof sshape));
}

/* Data pointers present when there are elements; no broadcast (zero-stride) destination. */
static gm_status check_data(const gm_ndview *dst, const gm_ndview *src)
{
    if (gm_ndview_size(dst) == 0)
        return GM_OK;
    if (dst->data == NULL || src->data == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: %s data pointer is NULL", GM__ERRFN,
                         dst->data == NULL ? "destination" : "source");
    for (int i = 0; i < dst->ndim; i++) {
        if (dst->shape[i] > 1 && (dst->strides[i] == INT64_MIN || src->strides[i] == INT64_MIN))
            return gm__error(GM_ERR_OVERFLOW, "%s: stride INT64_MIN on axis %d", GM__ERRFN, i);
        if (dst->strides[i] == 0 && dst->shape[i] > 1)
            return gm__error(GM_ERR_INVALID_ARG,
                             "%s: destination axis %d has stride 0 and extent %lld "
                             "(a broadcast destination is not writable)",
                             GM__ERRFN, i, (long long)dst->shape[i]);
    }
    return GM_OK;
}

/* The full checks, each failure recorded with its detail. */
static gm_status full_check(const gm_ndview *dst, const gm_ndview *src)
{
    gm_status status = GM_OK;

    if (dst == NULL || src == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: %s descriptor is NULL", GM__ERRFN,
                         dst == NULL ? "destination" : "source");
    status = gm__validate(GM__ERRFN, dst);
    if (status == GM_OK)
        status = gm__validate(GM__ERRFN, src);
    if (status == GM_OK && !gm_dtype_equal(dst->dtype, src->dtype))
        status = dtype_mismatch(dst, src);
    if (status == GM_OK)
        status = check_shapes(dst, src);
    if (status == GM_OK)
        status = check_data(dst, src);
    return status;
}

/* Extend [*lo, *hi) by axis reach (n - 1) * stride; false on overflow. */
static bool reach_ok(int64_t n, int64_t stride, int64_t *lo, int64_t *hi)
{
    int64_t reach = 0;

    if (gm__mul_overflow(n - 1, stride, &reach))
        return false;
    return reach < 0 ? !gm__add_overflow(*lo, reach, lo) : !gm__add_overflow(*hi, reach, hi);
}

/* Byte extents of both sides, one pass; false on any doubt (then full_check decides). */
static bool quick_axes_ok(const gm_ndview *dst, const gm_ndview *src, int64_t k)
{
    int64_t size = 1, dlo = dst->offset, dhi = dst->offset, slo = src->offset, shi = src->offset;
    bool empty = false;

    for (int i = 0; i < dst->ndim; i++) {
        int64_t n = dst->shape[i];

        if (n != src->shape[i] || n < 0 ||
            (n > 1 && (dst->strides[i] == 0 || dst->strides[i] == INT64_MIN ||
                       src->strides[i] == INT64_MIN)))
            return false;
        empty = empty || n == 0;
        if (n != 0 &&
            (gm__mul_overflow(size, n, &size) || !reach_ok(n, dst->strides[i], &dlo, &dhi) ||
             !reach_ok(n, src->strides[i], &slo, &shi)))
            return false;
    }
    if (gm__mul_overflow(size, k, &size) || gm__add_overflow(dhi, k, &dhi) ||
        gm__add_overflow(shi, k, &shi) || gm__sub_overflow(dhi, dlo, &dlo) ||
        gm__sub_overflow(shi, slo, &slo)) /* the spans must fit too (gm_ndview_extent) */
        return false;
    return empty || (dst->data != NULL && src->data != NULL);
}

/*
 * A fast conservative version of full_check for the common valid case (it
 * costs a fraction of a small copy): true only if full_check would pass.
 */
static bool quick_check(const gm_ndview *dst, const gm_ndview *src)
{
    int64_t k = 0;

    if (dst == NULL || src == NULL || dst->ndim < 0 || dst->ndim > GM_MAX_DIMS ||
        dst->ndim != src->ndim || !gm__dtype_same(dst->dtype, src->dtype))
        return false;
    k = gm__dtype_bytes(dst->dtype);
    return k > 0 && quick_axes_ok(dst, src, k);
}

/* Validate a copy without doing it (see backend.h). */
gm_status gm__host_copy_check(const gm_ndview *dst, const gm_ndview *src)
{
    return quick_check(dst, src) ? GM_OK : full_check(dst, src);
}

/* ---------------------------------------------------------------- plan */

/* Collect the axes that matter (extents of 1 dropped), each with a positive
 * destination stride. Returns false when the copy has no elements. */
static bool plan_axes(const gm_ndview *dst, const gm_ndview *src, copy_plan *p)
{
    for (int i = 0; i < dst->ndim; i++) {
        if (dst->shape[i] == 0)
            return false; /* data may be NULL: form no pointer */
    }
    p->dst = (char *)dst->data + dst->offset;
    p->src = (const char *)src->data + src->offset;
    p->itemsize = (size_t)dst->dtype.bits / 8 * dst->dtype.lanes; /* validated */
    p->naxes = 0;
    for (int i = 0; i < dst->ndim; i++) {
        copy_axis a = {dst->shape[i], dst->strides[i], src->strides[i]};

        if (a.n == 1)
            continue;
        if (a.ds < 0) {
            p->dst += (a.n - 1) * a.ds;
            p->src += (a.n - 1) * a.ss;
            a.ds = -a.ds;
            a.ss = -a.ss;
        }
        p->ax[p->naxes++] = a;
    }
    return true;
}

/* Whether axis x should come before (outside) axis y. */
static bool axis_outer(const copy_axis *x, const copy_axis *y)
{
    int64_t xs = x->ss < 0 ? -x->ss : x->ss;
    int64_t ys = y->ss < 0 ? -y->ss : y->ss;

    return x->ds > y->ds || (x->ds == y->ds && xs > ys);
}

/* Stable insertion sort: decreasing destination stride (source stride breaks ties). */
static void plan_sort(copy_plan *p)
{
    for (int i = 1; i < p->naxes; i++) {
        copy_axis key = p->ax[i];
        int j = i - 1;

        while (j >= 0 && axis_outer(&key, &p->ax[j])) {
            p->ax[j + 1] = p->ax[j];
            j--;
        }
        p->ax[j + 1] = key;
    }
}

/* Whether `outer` steps exactly over all of `inner` on both sides. */
static bool axes_merge(const copy_axis *outer, const copy_axis *inner)
{
    int64_t dspan = 0;
    int64_t sspan = 0;

    if (gm__mul_overflow(inner->n, inner->ds, &dspan) ||
        gm__mul_overflow(inner->n, inner->ss, &sspan))
        return false;
    return outer->ds == dspan && outer->ss == sspan;
}

/* Merge neighbours contiguous on both sides; a copy of one element keeps one axis. */
static void plan_merge(copy_plan *p)
{
    int out = 0;
    int64_t k = (int64_t)p->itemsize;

    if (p->naxes == 0) {
        p->ax[0] = (copy_axis){1, k, k};
        p->naxes = 1;
        return;
    }
    for (int i = 1; i < p->naxes; i++) {
        if (axes_merge(&p->ax[out], &p->ax[i])) {
            p->ax[out].n *= p->ax[i].n;
            p->ax[out].ds = p->ax[i].ds;
            p->ax[out].ss = p->ax[i].ss;
        } else {
            p->ax[++out] = p->ax[i];
        }
    }
    p->naxes = out + 1;
}

/* Remove axis i from the plan (the kernel takes it over). */
static void plan_remove(copy_plan *p, int i)
{
    memmove(&p->ax[i], &p->ax[i + 1], (size_t)(p->naxes - 1 - i) * sizeof p->ax[0]);
    p->naxes--;
}

/* The axis to tile against the destination's fastest axis, or -1: the
 * non-broadcast axis read fastest in the source, when that is not the
 * destination's fastest axis and the source reads along the latter are sparse. */
static int transpose_partner(const copy_plan *p)
{
    const copy_axis *a = &p->ax[p->naxes - 1];
    int64_t assa = a->ss < 0 ? -a->ss : a->ss;
    int64_t best_ss = assa;
    int best = -1;

    if (assa < TILE_MIN_SRC_STRIDE || a->n < TILE_MIN_EXTENT)
        return -1;
    for (int i = 0; i < p->naxes - 1; i++) {
        int64_t s = p->ax[i].ss < 0 ? -p->ax[i].ss : p->ax[i].ss;

        if (s != 0 && s < best_ss && p->ax[i].n >= TILE_MIN_EXTENT) {
            best_ss = s;
            best = i;
        }
    }
    return best;
}

/* Run `kernel` once for every index of the plan's remaining (outer) axes. */
static void for_each_outer(const copy_plan *p, copy_kernel kernel, const kernel_args *args)
{
    int64_t idx[GM_MAX_DIMS];
    char *d = p->dst;
    const char *s = p->src;
    int i = 0;

    if (p->naxes == 0) {
        kernel(d, s, args);
        return;
    }
    memset(idx, 0, (size_t)p->naxes * sizeof idx[0]);
    for (;;) {
        kernel(d, s, args);
        for (i = p->naxes - 1; i >= 0 && idx[i] == p->ax[i].n - 1; i--) {
            d -= (p->ax[i].n - 1) * p->ax[i].ds;
            s -= (p->ax[i].n - 1) * p->ax[i].ss;
            idx[i] = 0;
        }
        if (i < 0)
            break;
        idx[i]++;
        d += p->ax[i].ds;
        s += p->ax[i].ss;
    }
}

/*
 * A short run contiguous on both sides under a strided axis (a pitched copy of
 * narrow rows, or bytes of a wider item seen as uint8) becomes one item of the
 * run's size, so the specialised line and tile kernels move it instead of one
 * memcpy call per run: the rows of a[::2] as 4-byte runs went at a twentieth
 * of the C loop's speed. Only sizes the kernels are specialised for.
 */
static void plan_widen_items(copy_plan *p)
{
    const copy_axis a = p->ax[p->naxes - 1];
    int64_t k = (int64_t)p->itemsize, run = 0;

    if (p->naxes < 2 || a.ds != k || a.ss != k || gm__mul_overflow(a.n, k, &run))
        return;
    if (run != 2 && run != 4 && run != 8 && run != 16)
        return;
    p->itemsize = (size_t)run;
    plan_remove(p, p->naxes - 1);
}

/* Choose the innermost kernel, hand it its axes, and run it over the rest. */
static void plan_run(copy_plan *p)
{
    const copy_axis a = p->ax[p->naxes - 1];
    int64_t k = (int64_t)p->itemsize;
    kernel_set set = kernels_for(p->itemsize);
    kernel_args args = {a.n, a.ds, a.ss, 0, 0, 0, set.tile_edge, p->itemsize};
    copy_kernel kernel = set.line;
    int b = -1;

    if (a.ds == k && a.ss == k) {
        args.bytes = (size_t)(a.n * k);
        kernel = run_memcpy;
    } else {
        b = transpose_partner(p);
    }
    if (b >= 0) {
        args.nb = p->ax[b].n;
        args.dsb = p->ax[b].ds;
        args.ssb = p->ax[b].ss;
        kernel = set.tile;
    }
    plan_remove(p, p->naxes - 1);
    if (b >= 0)
        plan_remove(p, b);
    for_each_outer(p, kernel, &args);
}

/*
 * Bytes of a copy whose sides are both dense in C order with the same strides
 * (extent-1 axes ignored), so one memcpy does it; 0 when they are not (or the
 * copy is empty). Only called once quick_check has passed.
 */
static size_t dense_bytes(const gm_ndview *dst, const gm_ndview *src)
{
    int64_t expect = gm__dtype_bytes(dst->dtype);

    for (int i = dst->ndim - 1; i >= 0; i--) {
        int64_t n = dst->shape[i];

        if (n == 0)
            return 0;
        if (n == 1)
            continue;
        if (dst->strides[i] != expect || src->strides[i] != expect)
            return 0;
        expect *= n; /* no overflow: quick_check bounded the total size */
    }
    return (size_t)expect;
}

/*
 * Bytes of a valid 1-D copy dense on both sides (the most common copy there
 * is), 0 for anything else: what quick_check and dense_bytes would conclude,
 * without their loops, so a small copy costs about what its memcpy does.
 */
static size_t dense_1d_bytes(const gm_ndview *dst, const gm_ndview *src)
{
    int64_t n = 0, k = 0, bytes = 0, end = 0;

    if (dst == NULL || src == NULL || dst->ndim != 1 || src->ndim != 1 ||
        !gm__dtype_same(dst->dtype, src->dtype))
        return 0;
    n = dst->shape[0];
    k = gm__dtype_bytes(dst->dtype);
    if (k == 0 || n <= 0 || n != src->shape[0] || dst->strides[0] != k || src->strides[0] != k ||
        dst->data == NULL || src->data == NULL || gm__mul_overflow(n, k, &bytes) ||
        gm__add_overflow(dst->offset, bytes, &end) || gm__add_overflow(src->offset, bytes, &end))
        return 0;
    return (size_t)bytes;
}

/* Copy src into dst (see backend.h); validates first. */
gm_status gm__host_copy_strided(const gm_ndview *dst, const gm_ndview *src)
{
    copy_plan plan;
    size_t bytes = dense_1d_bytes(dst, src);
    gm_status status = GM_OK;

    if (bytes == 0 && quick_check(dst, src))
        bytes = dense_bytes(dst, src);
    else if (bytes == 0)
        status = full_check(dst, src); /* quick_check is conservative: this decides */
    if (status != GM_OK)
        return status;
    /* The common case, a dense copy, goes straight to memcpy (no plan). */
    if (bytes > 0) {
        memcpy((char *)dst->data + dst->offset, (const char *)src->data + src->offset, bytes);
        return GM_OK;
    }
    if (!plan_axes(dst, src, &plan))
        return GM_OK;
    plan_sort(&plan);
    plan_merge(&plan);
    plan_widen_items(&plan);
    plan_run(&plan);
    return GM_OK;
}
