/*
 * Tiled transpose through a padded shared tile (32 x 33 floats, so a
 * column of the tile spans every bank): out (cols x rows) = in (rows x
 * cols)^T, row-major float32. Launch (ceil(cols / 32), ceil(rows / 32))
 * blocks of (32, 8) threads; each thread moves four elements.
 */
#include <gpumem/kernel.h>

#define GM_TRANSPOSE_TILE 32
#define GM_TRANSPOSE_ROWS 8

GM_KERNEL(transpose_f32, (const float *GM_RESTRICT, in), (float *GM_RESTRICT, out), (int32_t, rows),
          (int32_t, cols))
{
    GM_SHARED_ARRAY2D(float, tile, GM_TRANSPOSE_TILE, GM_TRANSPOSE_TILE + 1);
    int32_t tx = (int32_t)gm_thread_idx_x(), ty = (int32_t)gm_thread_idx_y();
    int32_t x = (int32_t)gm_block_idx_x() * GM_TRANSPOSE_TILE + tx;
    int32_t y = (int32_t)gm_block_idx_y() * GM_TRANSPOSE_TILE + ty;

    for (int32_t j = 0; j < GM_TRANSPOSE_TILE; j += GM_TRANSPOSE_ROWS) {
        if (x < cols && y + j < rows)
            tile[ty + j][tx] = in[(int64_t)(y + j) * cols + x];
    }
    gm_syncthreads();
    x = (int32_t)gm_block_idx_y() * GM_TRANSPOSE_TILE + tx;
    y = (int32_t)gm_block_idx_x() * GM_TRANSPOSE_TILE + ty;
    for (int32_t j = 0; j < GM_TRANSPOSE_TILE; j += GM_TRANSPOSE_ROWS) {
        if (x < rows && y + j < cols)
            out[(int64_t)(y + j) * rows + x] = tile[tx][ty + j];
    }
}

GM_HOST_TABLE(gm__kernels_transpose, GM_HOST_KERNELS(transpose_f32), GM_HOST_NO_GLOBALS);
