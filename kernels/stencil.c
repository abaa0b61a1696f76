/*
 * 1-D stencil with a shared-memory halo: out[i] = sum of in[i - radius ..
 * i + radius] (elements outside 0..n-1 count as 0). Each block stages its
 * elements and `radius` halo elements on each side in dynamic shared
 * memory: launch with (block + 2 * radius) * sizeof(float) bytes of it.
 */
#include <gpumem/kernel.h>

GM_KERNEL(stencil1d_f32, (const float *GM_RESTRICT, in), (float *GM_RESTRICT, out), (int64_t, n),
          (int32_t, radius))
{
    GM_DYNAMIC_SHARED(float, buf);
    int32_t t = (int32_t)gm_thread_idx_x(), bd = (int32_t)gm_block_dim_x();
    int64_t base = (int64_t)gm_block_idx_x() * bd;

    /* Stage [base - radius, base + bd + radius) with a block-strided loop. */
    for (int32_t j = t; j < bd + 2 * radius; j += bd) {
        int64_t g = base - radius + j;

        buf[j] = g >= 0 && g < n ? in[g] : 0.0f;
    }
    gm_syncthreads();
    if (base + t < n) {
        float acc = 0.0f;

        for (int32_t j = 0; j <= 2 * radius; j++)
            acc += buf[t + j];
        out[base + t] = acc;
    }
}

GM_HOST_TABLE(gm__kernels_stencil, GM_HOST_KERNELS(stencil1d_f32), GM_HOST_NO_GLOBALS);
