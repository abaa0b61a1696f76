/*
 * Block reduction: each thread sums a grid-stride slice of `in`, the block
 * combines its threads' sums in shared memory with gm_syncthreads() down to
 * one warp / wavefront, which finishes with gm_wavebarrier() only, and
 * thread 0 writes the block's sum to partial[block]. Sum the partials with a
 * second launch of one block (n = blocks of the first). Any 1-D block of at
 * most 1024 threads: the sums above the largest power of two are folded in
 * first.
 */
#include <gpumem/kernel.h>

GM_KERNEL(reduce_sum_f32, (const float *GM_RESTRICT, in), (float *GM_RESTRICT, partial),
          (int64_t, n))
{
    GM_SHARED_ARRAY(float, sh, 1024);
    uint32_t t = gm_thread_idx_x(), bd = gm_block_dim_x(), ws = gm_warp_size(), p = 1u;
    int64_t stride = gm_global_size_x();
    float acc = 0.0f;

    for (int64_t i = gm_global_id_x(); i < n; i += stride)
        acc += in[i];
    while (p * 2u <= bd) /* the largest power of two <= bd */
        p *= 2u;
    sh[t] = acc;
    gm_syncthreads();
    if (p != bd) {      /* the same for the whole block: no divergent barrier */
        if (t < bd - p) /* sums p .. bd-1 onto 0 .. bd-p-1 */
            sh[t] += sh[t + p];
        gm_syncthreads();
    }
    for (uint32_t s = p / 2u; s >= ws; s >>= 1) {
        if (t < s)
            sh[t] += sh[t + s];
        gm_syncthreads();
    }
    if (t < ws) {
        /* The first warp: read, wave barrier, write, wave barrier. */
        for (uint32_t s = (p < ws ? p : ws) / 2u; s > 0u; s >>= 1) {
            float other = t < s ? sh[t + s] : 0.0f;

            gm_wavebarrier();
            if (t < s)
                sh[t] += other;
            gm_wavebarrier();
        }
        if (t == 0u)
            partial[gm_block_idx_x()] = sh[0];
    }
}

GM_HOST_TABLE(gm__kernels_reduce, GM_HOST_KERNELS(reduce_sum_f32), GM_HOST_NO_GLOBALS);
