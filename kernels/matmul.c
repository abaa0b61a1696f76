/*
 * Tiled matrix multiplication with shared-memory tiles (Numba's fast_matmul
 * from the CUDA memory-management page, with TPB = 16): C = A B for
 * row-major float32 A (m x k), B (k x n), C (m x n). Launch a grid of
 * (ceil(n / 16), ceil(m / 16)) blocks of (16, 16) threads. Unlike the
 * original, no thread returns before the barriers, and tiles are padded
 * with zeros, so any m, n, k work.
 */
#include <gpumem/kernel.h>

#define GM_MATMUL_TILE 16

GM_KERNEL(matmul_f32, (const float *GM_RESTRICT, a), (const float *GM_RESTRICT, b),
          (float *GM_RESTRICT, c), (int32_t, m), (int32_t, n), (int32_t, k))
{
    GM_SHARED_ARRAY2D(float, sa, GM_MATMUL_TILE, GM_MATMUL_TILE);
    GM_SHARED_ARRAY2D(float, sb, GM_MATMUL_TILE, GM_MATMUL_TILE);
    uint32_t tx = gm_thread_idx_x(), ty = gm_thread_idx_y();
    int32_t row = (int32_t)(gm_block_idx_y() * GM_MATMUL_TILE + ty);
    int32_t col = (int32_t)(gm_block_idx_x() * GM_MATMUL_TILE + tx);
    /* Four partial sums: independent chains of additions for the CPU's pipelines. */
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};

    for (int32_t t0 = 0; t0 < k; t0 += GM_MATMUL_TILE) {
        int32_t ac = t0 + (int32_t)tx, br = t0 + (int32_t)ty;

        sa[ty][tx] = row < m && ac < k ? a[(int64_t)row * k + ac] : 0.0f;
        sb[ty][tx] = br < k && col < n ? b[(int64_t)br * n + col] : 0.0f;
        gm_syncthreads();
        for (int j = 0; j < GM_MATMUL_TILE; j += 4) {
            acc[0] += sa[ty][j] * sb[j][tx];
            acc[1] += sa[ty][j + 1] * sb[j + 1][tx];
            acc[2] += sa[ty][j + 2] * sb[j + 2][tx];
            acc[3] += sa[ty][j + 3] * sb[j + 3][tx];
        }
        gm_syncthreads();
    }
    if (row < m && col < n)
        c[(int64_t)row * n + col] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

GM_HOST_TABLE(gm__kernels_matmul, GM_HOST_KERNELS(matmul_f32), GM_HOST_NO_GLOBALS);
