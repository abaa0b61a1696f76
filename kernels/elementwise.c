/*
 * Elementwise kernels: the tutorial's add ufunc (with an output array),
 * fills, and a strided copy between any two layouts of up to four
 * dimensions. One thread per element; threads past n do nothing.
 */
#include <gpumem/kernel.h>

/* out[i] = a[i] + b[i] (Numba's add_ufunc(x, y, out=out)). */
GM_KERNEL(add_f32, (const float *GM_RESTRICT, a), (const float *GM_RESTRICT, b),
          (float *GM_RESTRICT, out), (int64_t, n))
{
    int64_t i = gm_global_id_x();

    if (i < n)
        out[i] = a[i] + b[i];
}

GM_KERNEL(add_f64, (const double *GM_RESTRICT, a), (const double *GM_RESTRICT, b),
          (double *GM_RESTRICT, out), (int64_t, n))
{
    int64_t i = gm_global_id_x();

    if (i < n)
        out[i] = a[i] + b[i];
}

/* out[i] = value. */
GM_KERNEL(fill_f32, (float *, out), (float, value), (int64_t, n))
{
    int64_t i = gm_global_id_x();

    if (i < n)
        out[i] = value;
}

GM_KERNEL(fill_i32, (int32_t *, out), (int32_t, value), (int64_t, n))
{
    int64_t i = gm_global_id_x();

    if (i < n)
        out[i] = value;
}

/* Element i of a C-order walk over layout.shape, copied between byte-strided layouts. */
GM_KERNEL(copy_strided, (unsigned char *, dst), (const unsigned char *, src),
          (gm_strided_layout, layout), (int64_t, n))
{
    int64_t i = gm_global_id_x();
    int64_t rest = i, dst_off = 0, src_off = 0;

    if (i >= n || layout.ndim < 1 || layout.ndim > GM_STRIDED_MAX_DIMS)
        return;
    for (int d = layout.ndim - 1; d >= 0; d--) {
        int64_t idx = rest % layout.shape[d];

        rest /= layout.shape[d];
        dst_off += idx * layout.dst_strides[d];
        src_off += idx * layout.src_strides[d];
    }
    switch (layout.itemsize) {
    case 1:
        dst[dst_off] = src[src_off];
        break;
    case 2:
        *(uint16_t *)(void *)(dst + dst_off) = *(const uint16_t *)(const void *)(src + src_off);
        break;
    case 4:
        *(uint32_t *)(void *)(dst + dst_off) = *(const uint32_t *)(const void *)(src + src_off);
        break;
    default:
        *(uint64_t *)(void *)(dst + dst_off) = *(const uint64_t *)(const void *)(src + src_off);
        break;
    }
}

GM_HOST_TABLE(gm__kernels_elementwise,
              GM_HOST_KERNELS(add_f32, add_f64, fill_f32, fill_i32, copy_strided),
              GM_HOST_NO_GLOBALS);
