/*
 * Test kernels, compiled like an application's own kernel file (C compiler,
 * gpumem/kernel.h) and registered with gm_register_image_set.
 */
#include <gpumem/kernel.h>

#include "kt_helpers.h"

/* out[g] = the value the next thread of the block wrote to shared memory:
 * right only if the barrier separates the writes from the reads. */
GM_KERNEL(kt_shift, (int32_t *, out), (int32_t, seed), (int32_t, barrier_flags),
          (int32_t, use_barrier))
{
    GM_SHARED_ARRAY(int32_t, s, 1024);
    uint32_t t = gm_thread_idx_x(), bd = gm_block_dim_x();
    int64_t g = gm_global_id_x();

    s[t] = seed + (int32_t)g;
    if (use_barrier != 0)
        gm_barrier((unsigned)barrier_flags);
    out[g] = s[(t + 1u) % bd];
}

/* out[t] = what lane t ^ distance wrote before the wave barrier. */
GM_KERNEL(kt_wave_exchange, (int32_t *, out), (int32_t, seed), (int32_t, distance))
{
    GM_SHARED_ARRAY(int32_t, s, 1024);
    uint32_t t = gm_thread_idx_x();
    int64_t g = gm_global_id_x();

    s[t] = seed + (int32_t)g;
    gm_wavebarrier();
    out[g] = s[t ^ (uint32_t)distance];
}

/* Lanes >= live return at once; the others exchange with lane ^ 1 over a wave barrier. */
GM_KERNEL(kt_wave_partial, (int32_t *, out), (int32_t, live))
{
    GM_SHARED_ARRAY(int32_t, s, 1024);
    uint32_t t = gm_thread_idx_x();

    if (gm_lane_id() >= (uint32_t)live)
        return;
    s[t] = (int32_t)t * 3;
    gm_wavebarrier();
    out[t] = s[t ^ 1u];
}

/* Lanes < first return at once (so the block starts barrier-free); the others exchange
 * with lane ^ 1 over a wave barrier. */
GM_KERNEL(kt_wave_late, (int32_t *, out), (int32_t, first))
{
    GM_SHARED_ARRAY(int32_t, s, 1024);
    uint32_t t = gm_thread_idx_x();

    if (gm_lane_id() < (uint32_t)first)
        return;
    s[t] = (int32_t)t * 5;
    gm_wavebarrier();
    out[gm_global_id_x()] = s[t ^ 1u];
}

/* Thread `who` of block `block` returns before the barrier. */
GM_KERNEL(kt_early_return, (int32_t *, out), (int32_t, who), (int32_t, block))
{
    if ((int32_t)gm_thread_idx_x() == who && (int32_t)gm_block_idx_x() == block)
        return;
    gm_syncthreads();
    out[gm_global_id_x()] = 1;
}

/* A barrier only the first `upto` threads reach. */
GM_KERNEL(kt_branch_barrier, (int32_t *, out), (int32_t, upto))
{
    if ((int32_t)gm_thread_idx_x() < upto)
        gm_syncthreads();
    out[gm_global_id_x()] = 2;
}

/* Thread 0 waits at one barrier more than the others. */
GM_KERNEL(kt_extra_barrier, (int32_t *, out))
{
    int rounds = gm_thread_idx_x() == 0u ? 3 : 2;

    for (int i = 0; i < rounds; i++)
        gm_syncthreads();
    out[gm_global_id_x()] = 3;
}

/* Lane 0 of each warp waits at the block barrier, its warp-mates at the wave barrier. */
GM_KERNEL(kt_wave_vs_block, (int32_t *, out))
{
    if (gm_lane_id() == 0u)
        gm_syncthreads();
    else
        gm_wavebarrier();
    out[gm_global_id_x()] = 4;
}

/* Every thread records its indices, once before and once after barriers. */
GM_KERNEL(kt_index_probe, (int32_t *, out), (int32_t, barriers))
{
    int64_t gx = gm_global_id_x(), gy = gm_global_id_y(), gz = gm_global_id_z();
    int64_t sx = gm_global_size_x(), sy = gm_global_size_y();
    int64_t g = gx + sx * (gy + sy * gz);
    int32_t code = (int32_t)(gm_thread_idx_x() | gm_thread_idx_y() << 8 | gm_thread_idx_z() << 16);

    for (int i = 0; i < barriers; i++)
        gm_syncthreads();
    out[2 * g] = code;
    out[2 * g + 1] = (int32_t)(gm_block_idx_x() | gm_block_idx_y() << 8 | gm_block_idx_z() << 16);
}

/* Device helpers, kept out of line: they read the indices, and reach the barrier, through
 * the simulator rather than through the kernel body's context. */
static __attribute__((noinline)) int32_t kt_thread_code(void)
{
    return (int32_t)(gm_thread_idx_x() | gm_thread_idx_y() << 8 | gm_thread_idx_z() << 16);
}

static __attribute__((noinline)) int32_t kt_block_code(void)
{
    return (int32_t)(gm_block_idx_x() | gm_block_idx_y() << 8 | gm_block_idx_z() << 16);
}

static __attribute__((noinline)) int64_t kt_global_index(void)
{
    int64_t sx = gm_global_size_x(), sy = gm_global_size_y();

    return gm_global_id_x() + sx * (gm_global_id_y() + sy * gm_global_id_z());
}

static __attribute__((noinline)) uint32_t kt_linear_and_lane(void)
{
    return gm_thread_linear_id() * 1000u + gm_lane_id();
}

static __attribute__((noinline)) void kt_sync(void)
{
    gm_syncthreads();
}

/* kt_index_probe with the indices read, and the barriers reached, in helper functions: out
 * of the body, in the barrier-free loop, and after barriers. A thread whose helpers disagree
 * with its body writes -1. */
GM_KERNEL(kt_helper_probe, (int32_t *, out), (int32_t, barriers))
{
    int64_t g = kt_global_index();
    int32_t code = kt_thread_code();
    uint32_t lin = gm_thread_idx_x() +
                   gm_block_dim_x() * (gm_thread_idx_y() + gm_block_dim_y() * gm_thread_idx_z());

    if (g != gm_global_id_x() +
                 gm_global_size_x() * (gm_global_id_y() + gm_global_size_y() * gm_global_id_z()))
        code = -1;
    for (int i = 0; i < barriers; i++)
        kt_sync();
    if (kt_thread_code() != code || kt_global_index() != g ||
        kt_linear_and_lane() != lin * 1000u + lin % gm_warp_size())
        code = -1;
    out[2 * g] = code;
    out[2 * g + 1] = kt_block_code();
}

/* Thread 0 stores the block index in shared memory; after many barriers every
 * thread checks it (another block running at the same time must not clobber it). */
GM_KERNEL(kt_shared_isolation, (int32_t *, bad), (int32_t, rounds))
{
    GM_SHARED_ARRAY(int32_t, s, 2);
    uint32_t b = gm_block_idx_x();

    for (int i = 0; i < rounds; i++) {
        if (gm_thread_idx_x() == 0u)
            s[0] = (int32_t)b + i;
        gm_syncthreads();
        if (s[0] != (int32_t)b + i)
            gm_atomic_add_i32(bad, 1);
        gm_syncthreads();
    }
}

/*
 * A 3-D shared array: each thread of a 4 x 4 x 4 block writes its own
 * element, and after the barrier reads the one mirrored through the block's
 * centre (written by another thread), so out[t] = 63 - t for each thread's
 * linear index t; block b adds 100 * b to what it writes.
 */
GM_KERNEL(kt_shared_3d, (int32_t *, out))
{
    GM_SHARED_ARRAY3D(int32_t, cube, 4, 4, 5); /* a padded row: the layout is the macro's */
    uint32_t x = gm_thread_idx_x(), y = gm_thread_idx_y(), z = gm_thread_idx_z();
    int32_t b = (int32_t)gm_block_idx_x();
    int32_t t = (int32_t)(x + 4u * (y + 4u * z));

    cube[z][y][x] = t + 100 * b;
    gm_syncthreads();
    out[64 * b + t] = cube[3u - z][3u - y][3u - x];
}

/* Atomics from every thread of every block. */
GM_KERNEL(kt_atomics, (int32_t *, i32), (int64_t *, i64), (uint32_t *, u32), (uint64_t *, u64),
          (float *, f32), (double *, f64))
{
    int64_t g = gm_global_id_x();
    int32_t old = 0;

    gm_atomic_add_i32(&i32[0], 1);
    gm_atomic_sub_i32(&i32[1], 2);
    gm_atomic_min_i32(&i32[2], (int32_t)-g);
    gm_atomic_max_i32(&i32[3], (int32_t)g);
    gm_atomic_add_i64(&i64[0], 3);
    gm_atomic_sub_i64(&i64[1], 1);
    gm_atomic_min_i64(&i64[2], -g);
    gm_atomic_max_i64(&i64[3], g);
    gm_atomic_add_u32(&u32[0], 1u);
    gm_atomic_max_u32(&u32[1], (uint32_t)g);
    gm_atomic_min_u32(&u32[2], (uint32_t)g);
    gm_atomic_add_u64(&u64[0], 2u);
    gm_atomic_max_u64(&u64[1], (uint64_t)g);
    gm_atomic_min_u64(&u64[2], (uint64_t)g + 5u);
    gm_atomic_add_f32(&f32[0], 0.5f);
    gm_atomic_add_f64(&f64[0], 0.25);
    /* A lock-free counter through compare-and-swap, and exchange. */
    do {
        old = gm_atomic_add_i32(&i32[4], 0);
    } while (gm_atomic_cas_i32(&i32[4], old, old + 1) != old);
    gm_atomic_exch_i32(&i32[5], 7);
    {
        uint64_t o64 = 0;

        do {
            o64 = gm_atomic_add_u64(&u64[3], 0u);
        } while (gm_atomic_cas_u64(&u64[3], o64, o64 + 1u) != o64);
        gm_atomic_exch_i64(&i64[4], -9);
        gm_atomic_cas_u32(&u32[3], 0u, 11u);
    }
}

/* A per-thread local array. */
GM_KERNEL(kt_local_array, (int32_t *, out), (int32_t, n))
{
    GM_LOCAL_ARRAY(int32_t, tmp, 8);
    int64_t g = gm_global_id_x();
    int32_t acc = 0;

    if (g >= n)
        return;
    for (int i = 0; i < 8; i++)
        tmp[i] = (int32_t)g * i;
    for (int i = 7; i >= 0; i--)
        acc += tmp[i];
    out[g] = acc;
}

/* Many barriers in a loop, and a fence. */
GM_KERNEL(kt_barrier_loop, (int32_t *, out), (int32_t, rounds))
{
    GM_SHARED_ARRAY(int32_t, s, 1024);
    uint32_t t = gm_thread_idx_x(), bd = gm_block_dim_x();
    int32_t v = (int32_t)t;

    for (int i = 0; i < rounds; i++) {
        s[t] = v;
        gm_syncthreads();
        v = s[(t + 1u) % bd] + 1;
        gm_threadfence_block();
        gm_syncthreads();
    }
    gm_threadfence();
    out[gm_global_id_x()] = v;
}

GM_CONSTANT_ARRAY(int32_t, kt_const, 4);

/* out[g] = kt_const[g % 4]. */
GM_KERNEL(kt_read_const, (int32_t *, out), (int64_t, n))
{
    int64_t g = gm_global_id_x();

    if (g < n)
        out[g] = kt_const[g % 4];
}

/* A replacement for the built-in add_f32 (registered sets are searched first). */
GM_KERNEL(add_f32, (const float *, a), (const float *, b), (float *, out), (int64_t, n))
{
    int64_t i = gm_global_id_x();

    if (i < n)
        out[i] = a[i] - b[i];
}

GM_HOST_TABLE(kt_test_table,
              GM_HOST_KERNELS(kt_shift, kt_wave_exchange, kt_wave_partial, kt_wave_late,
                              kt_early_return, kt_branch_barrier, kt_extra_barrier,
                              kt_wave_vs_block, kt_index_probe, kt_helper_probe,
                              kt_shared_isolation, kt_shared_3d, kt_atomics, kt_local_array,
                              kt_barrier_loop, kt_read_const),
              GM_HOST_GLOBALS(kt_const));

/* A set without the add_f32 override; the override lives in its own set. */
const gm_image_set kt_test_set = {"kernel tests", &kt_test_table, NULL, 0, NULL, 0};

static const gm_host_kernel *const kt_override_kernels[] = {&add_f32__gm_kernel};
static const gm_host_table kt_override_table = {
    GM_HOST_TABLE_MAGIC, GM_HOST_KERNEL_ABI, 1, kt_override_kernels, 0, NULL};
const gm_image_set kt_override_set = {"override", &kt_override_table, NULL, 0, NULL, 0};
