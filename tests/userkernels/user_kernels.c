/*
 * An application's own kernel file, built three ways as
 * docs/kernels-meson-snippet.md shows (the C compiler for the simulator, nvcc
 * into a fatbin, clang into AMDGPU code objects) and registered with
 * gm_register_image_set by test_user_kernels.c. Each kernel exercises one
 * device-side feature of gpumem/kernel.h; the test checks them against C
 * references on whichever backend runs it.
 */
#include <gpumem/kernel.h>

/* Per-thread local memory: written forwards, read backwards after a barrier (so an
 * array shared between threads would hold another thread's values); out[g] = 28 * g. */
GM_KERNEL(uk_local, (int32_t *, out), (int32_t, n))
{
    GM_LOCAL_ARRAY(int32_t, tmp, 8);
    int64_t g = gm_global_id_x();
    int32_t acc = 0;

    for (int i = 0; i < 8; i++)
        tmp[i] = (int32_t)g * i;
    gm_syncthreads();
    for (int i = 7; i >= 0; i--)
        acc += tmp[i];
    if (g < n)
        out[g] = acc;
}

/* A 3-D block (4 x 4 x 4) through a 3-D shared array: out[64 b + t] = 63 - t + 100 b. */
GM_KERNEL(uk_shared_3d, (int32_t *, out))
{
    GM_SHARED_ARRAY3D(int32_t, cube, 4, 4, 5);
    uint32_t x = gm_thread_idx_x(), y = gm_thread_idx_y(), z = gm_thread_idx_z();
    int32_t b = (int32_t)gm_block_idx_x();
    int32_t t = (int32_t)(x + 4u * (y + 4u * z));

    cube[z][y][x] = t + 100 * b;
    gm_syncthreads();
    out[64 * b + t] = cube[3u - z][3u - y][3u - x];
}

/* Dynamic shared memory: each block reverses its slice of `in` into `out`. */
GM_KERNEL(uk_dynamic_reverse, (const float *, in), (float *, out))
{
    GM_DYNAMIC_SHARED(float, s);
    uint32_t t = gm_thread_idx_x(), bd = gm_block_dim_x();
    int64_t g = gm_global_id_x();

    s[t] = in[g];
    gm_syncthreads();
    out[g] = s[bd - 1u - t];
}

/* Within a warp: out[g] = seed + the global index of lane ^ distance (a wave barrier). */
GM_KERNEL(uk_wave_exchange, (int32_t *, out), (int32_t, seed), (int32_t, distance))
{
    GM_SHARED_ARRAY(int32_t, s, 1024);
    uint32_t t = gm_thread_idx_x();
    int64_t g = gm_global_id_x();

    s[t] = seed + (int32_t)g;
    gm_wavebarrier();
    out[g] = s[t ^ (uint32_t)distance];
}

/* Barriers in a loop: each round takes the next thread's value plus one. */
GM_KERNEL(uk_barrier_loop, (int32_t *, out), (int32_t, rounds))
{
    GM_SHARED_ARRAY(int32_t, s, 1024);
    uint32_t t = gm_thread_idx_x(), bd = gm_block_dim_x();
    int32_t v = (int32_t)t;

    for (int i = 0; i < rounds; i++) {
        s[t] = v;
        gm_barrier(GM_CLK_LOCAL_MEM_FENCE);
        v = s[(t + 1u) % bd] + 1;
        gm_syncthreads();
    }
    out[gm_global_id_x()] = v;
}

/* Atomics from every thread: counters, extrema, float sums and a CAS loop. */
GM_KERNEL(uk_atomics, (int32_t *, i32), (uint64_t *, u64), (float *, f32), (double *, f64))
{
    int64_t g = gm_global_id_x();
    int32_t old = 0;

    gm_atomic_add_i32(&i32[0], 1);
    gm_atomic_min_i32(&i32[1], (int32_t)-g);
    gm_atomic_max_i32(&i32[2], (int32_t)g);
    do {
        old = gm_atomic_add_i32(&i32[3], 0);
    } while (gm_atomic_cas_i32(&i32[3], old, old + 2) != old);
    gm_atomic_add_u64(&u64[0], (uint64_t)g);
    gm_atomic_add_f32(&f32[0], 0.5f);
    gm_atomic_add_f64(&f64[0], 0.25);
}

/* 3-D grid and block indices: each thread writes its coordinates, packed. */
GM_KERNEL(uk_indices, (int32_t *, out))
{
    int64_t gx = gm_global_id_x(), gy = gm_global_id_y(), gz = gm_global_id_z();
    int64_t linear = gx + gm_global_size_x() * (gy + gm_global_size_y() * gz);
    uint32_t blocks = gm_block_idx_x() + gm_block_idx_y() + gm_block_idx_z();

    out[linear] = (int32_t)((uint32_t)gx | (uint32_t)gy << 8 | (uint32_t)gz << 16 | blocks << 24);
}

GM_CONSTANT_ARRAY(int32_t, uk_coeffs, 4);

/* out[g] = uk_coeffs[g % 4] * g (constant memory set from the host). */
GM_KERNEL(uk_constant, (int32_t *, out), (int64_t, n))
{
    int64_t g = gm_global_id_x();

    if (g < n)
        out[g] = uk_coeffs[g % 4] * (int32_t)g;
}

GM_HOST_TABLE(uk_host_table,
              GM_HOST_KERNELS(uk_local, uk_shared_3d, uk_dynamic_reverse, uk_wave_exchange,
                              uk_barrier_loop, uk_atomics, uk_indices, uk_constant),
              GM_HOST_GLOBALS(uk_coeffs));
