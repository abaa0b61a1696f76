/*
 * The simulator's semantics (src/host/sim): block barriers, flags, wave
 * barriers at warp sizes 32 and 64, divergence detection (fast, never a
 * hang, naming kernel and block), thread and block indices in 1-3 D before
 * and after barriers, per-block shared memory, atomics, local arrays, the
 * largest blocks, asynchronous launches on streams, and recovery after a
 * failed launch.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gpumem/kernel.h>

#include "kt_helpers.h"

static int32_t seed = 1000;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static gm_dim3 d1(uint32_t x)
{
    return gm_dim3_make(x, 1, 1);
}

/* Launch kt_shift and count the threads that read the wrong neighbour. */
static int64_t shift_mismatches(gm_context *ctx, uint32_t grid, uint32_t block, int32_t flags,
                                int32_t use_barrier)
{
    int64_t n = (int64_t)grid * block, bad = 0;
    int32_t *out = malloc((size_t)n * 4);
    gm_array *dout = kt_device(ctx, GM_INT32, n, NULL);
    gm_arg args[] = {gm_arg_array(dout), gm_arg_i32(++seed * 100000), gm_arg_i32(flags),
                     gm_arg_i32(use_barrier)};

    assert_ok(gm_launch(kt_kernel(ctx, "kt_shift"), d1(grid), d1(block), 0, NULL, 4, args));
    kt_to_host(dout, GM_INT32, n, out);
    for (int64_t g = 0; g < n; g++) {
        int64_t t = g % block, base = g - t;

        if (out[g] != seed * 100000 + (int32_t)(base + (t + 1) % block))
            bad++;
    }
    gm_array_release(&dout);
    free(out);
    return bad;
}

/* A kernel that is wrong without its barrier is right with it, whatever the flags. */
static void test_barrier_semantics(void **state)
{
    gm_context *ctx = kt_context(32);

    (void)state;
    assert_true(shift_mismatches(ctx, 7, 64, 0, 0) > 0);
    assert_int_equal(shift_mismatches(ctx, 7, 64, GM_CLK_LOCAL_MEM_FENCE, 1), 0);
    assert_int_equal(shift_mismatches(ctx, 5, 100, GM_CLK_GLOBAL_MEM_FENCE, 1), 0);
    assert_int_equal(
        shift_mismatches(ctx, 3, 1024, GM_CLK_LOCAL_MEM_FENCE | GM_CLK_GLOBAL_MEM_FENCE, 1), 0);
    assert_int_equal(shift_mismatches(ctx, 2, 33, 0, 1), 0);
    kt_destroy(&ctx);
}

/* kt_wave_exchange: mismatches among the block's threads (one block). */
static int64_t wave_mismatches(gm_context *ctx, uint32_t block, int32_t distance,
                               int64_t *first_bad)
{
    int32_t out[1024];
    int64_t bad = 0;
    gm_array *dout = kt_device(ctx, GM_INT32, block, NULL);
    gm_arg args[] = {gm_arg_array(dout), gm_arg_i32(++seed * 10000), gm_arg_i32(distance)};

    *first_bad = -1;
    assert_ok(gm_launch(kt_kernel(ctx, "kt_wave_exchange"), d1(1), d1(block), 0, NULL, 3, args));
    kt_to_host(dout, GM_INT32, block, out);
    for (int64_t t = 0; t < (int64_t)block; t++) {
        if (out[t] != seed * 10000 + (int32_t)(t ^ distance)) {
            if (*first_bad < 0)
                *first_bad = t;
            bad++;
        }
    }
    gm_array_release(&dout);
    return bad;
}

/* gm_wavebarrier orders the lanes of one warp (32) or wavefront (64), no more. */
static void test_wavebarrier_scope(void **state)
{
    gm_context *c32 = kt_context(32), *c64 = kt_context(64);
    int64_t first = 0;

    (void)state;
    /* Partners inside the warp: always right. */
    assert_int_equal(wave_mismatches(c32, 128, 1, &first), 0);
    assert_int_equal(wave_mismatches(c32, 128, 16, &first), 0);
    assert_int_equal(wave_mismatches(c64, 128, 32, &first), 0);
    assert_int_equal(wave_mismatches(c64, 256, 63, &first), 0);
    /* Partners in the next warp: not ordered by a wave barrier. */
    assert_true(wave_mismatches(c32, 128, 32, &first) >= 32);
    assert_int_equal(first, 0);
    assert_true(wave_mismatches(c64, 256, 64, &first) >= 64);
    assert_int_equal(first, 0);
    kt_destroy(&c32);
    kt_destroy(&c64);
}

/* Lanes that returned do not take part in the wave barrier. */
static void test_wavebarrier_exited_lanes(void **state)
{
    (void)state;
    for (int ws = 32; ws <= 64; ws *= 2) {
        gm_context *ctx = kt_context(ws);
        int32_t out[256], all[3 * 256];
        gm_array *dout = kt_device(ctx, GM_INT32, 256, NULL);
        gm_arg args[] = {gm_arg_array(dout), gm_arg_i32(20)};

        memset(out, 0, sizeof out);
        kt_to_host(dout, GM_INT32, 256, out);
        assert_ok(gm_launch(kt_kernel(ctx, "kt_wave_partial"), d1(1), d1(256), 0, NULL, 2, args));
        kt_to_host(dout, GM_INT32, 256, out);
        for (int t = 0; t < 256; t++) {
            if (t % ws < 20)
                assert_int_equal(out[t], (t ^ 1) * 3);
        }
        /* The first lanes return (the block starts on the barrier-free path). */
        gm_array_release(&dout);
        dout = kt_device(ctx, GM_INT32, 3 * 256, NULL);
        args[0] = gm_arg_array(dout);
        args[1] = gm_arg_i32(6);
        assert_ok(gm_launch(kt_kernel(ctx, "kt_wave_late"), d1(3), d1(256), 0, NULL, 2, args));
        kt_to_host(dout, GM_INT32, 3 * 256, all);
        for (int g = 0; g < 3 * 256; g++) {
            if (g % 256 % ws >= 6)
                assert_int_equal(all[g], (g % 256 ^ 1) * 5);
        }
        gm_array_release(&dout);
        kt_destroy(&ctx);
    }
}

/* Launch a diverging kernel: it must fail quickly with the kernel and block in the message. */
static void expect_divergence(gm_context *ctx, const char *kernel, uint32_t grid, uint32_t block,
                              int nargs, const gm_arg *args, const char *where)
{
    double t0 = now_s();

    assert_status(gm_launch(kt_kernel(ctx, kernel), d1(grid), d1(block), 0, NULL, nargs, args),
                  GM_ERR_BARRIER_DIVERGENCE);
    assert_true(now_s() - t0 < 2.0);
    assert_message_contains(kernel);
    assert_message_contains(where);
    assert_message_contains("divergence");
}

static void test_divergence(void **state)
{
    gm_context *ctx = kt_context(32);
    gm_array *dout = kt_device(ctx, GM_INT32, 64 * 1024, NULL);
    gm_arg early[] = {gm_arg_array(dout), gm_arg_i32(5), gm_arg_i32(0)};
    gm_arg late[] = {gm_arg_array(dout), gm_arg_i32(0), gm_arg_i32(3)};
    gm_arg branch[] = {gm_arg_array(dout), gm_arg_i32(16)};
    gm_arg one[] = {gm_arg_array(dout)};

    (void)state;
    alarm(60); /* a hang fails the suite instead of blocking it */
    expect_divergence(ctx, "kt_early_return", 4, 64, 3, early, "block (0,0,0)");
    assert_message_contains("thread (5,0,0) returned");
    expect_divergence(ctx, "kt_early_return", 6, 64, 3, late, "block (3,0,0)");
    early[1] = gm_arg_i32(0); /* thread 0 returns: the block starts on the barrier-free path */
    expect_divergence(ctx, "kt_early_return", 2, 96, 3, early, "thread (0,0,0) returned");
    assert_message_contains("reached by 95 of 96");
    early[1] = gm_arg_i32(5);
    expect_divergence(ctx, "kt_branch_barrier", 2, 64, 2, branch, "reached by 16 of 64");
    expect_divergence(ctx, "kt_extra_barrier", 3, 128, 1, one, "reached by 1 of 128");
    expect_divergence(ctx, "kt_wave_vs_block", 1, 64, 1, one, "gm_wavebarrier in warp 0");
    expect_divergence(ctx, "kt_early_return", 1, 1024, 3, early, "block (0,0,0)");
    /* Reaching the barrier from the same number of threads but different branches is
     * not divergence: every thread arrives (hardware semantics). */
    {
        gm_arg all[] = {gm_arg_array(dout), gm_arg_i32(64)};

        assert_ok(gm_launch(kt_kernel(ctx, "kt_branch_barrier"), d1(2), d1(64), 0, NULL, 2, all));
    }
    /* The simulator recovers: a correct launch after failures works. */
    assert_int_equal(shift_mismatches(ctx, 9, 256, GM_CLK_LOCAL_MEM_FENCE, 1), 0);
    alarm(0);
    gm_array_release(&dout);
    kt_destroy(&ctx);
}

/* On a stream, the failure surfaces at gm_stream_synchronize with its detail. */
static void test_divergence_async(void **state)
{
    gm_context *ctx = kt_context(64);
    gm_stream *s = NULL;
    gm_array *dout = kt_device(ctx, GM_INT32, 256, NULL);
    gm_arg early[] = {gm_arg_array(dout), gm_arg_i32(7), gm_arg_i32(1)};

    (void)state;
    alarm(60);
    assert_ok(gm_stream_create(ctx, GM_STREAM_DEFAULT, &s));
    assert_ok(gm_launch(kt_kernel(ctx, "kt_early_return"), d1(2), d1(128), 0, s, 3, early));
    assert_status(gm_stream_synchronize(s), GM_ERR_BARRIER_DIVERGENCE);
    assert_message_contains("kt_early_return");
    assert_message_contains("block (1,0,0)");
    assert_ok(gm_stream_synchronize(s));
    alarm(0);
    gm_stream_destroy(&s);
    gm_array_release(&dout);
    kt_destroy(&ctx);
}

/* Every thread of a 3-D grid of 3-D blocks runs once with its indices, before and after
 * barriers (which move threads between fibers): kt_index_probe reads them in the kernel's
 * body, kt_helper_probe in helper functions too. */
static void check_indices_of(gm_context *ctx, const char *kernel, gm_dim3 grid, gm_dim3 block,
                             int32_t barriers)
{
    int64_t sx = (int64_t)grid.x * block.x, sy = (int64_t)grid.y * block.y;
    int64_t n = sx * sy * grid.z * block.z;
    int32_t *out = malloc((size_t)n * 8);
    gm_array *dout = kt_device(ctx, GM_INT32, 2 * n, NULL);
    gm_arg args[] = {gm_arg_array(dout), gm_arg_i32(barriers)};

    assert_ok(gm_launch(kt_kernel(ctx, kernel), grid, block, 0, NULL, 2, args));
    kt_to_host(dout, GM_INT32, 2 * n, out);
    for (int64_t g = 0; g < n; g++) {
        int64_t gx = g % sx, gy = (g / sx) % sy, gz = g / (sx * sy);
        int32_t want_t = (int32_t)(gx % block.x | (gy % block.y) << 8 | (gz % block.z) << 16);
        int32_t want_b = (int32_t)(gx / block.x | (gy / block.y) << 8 | (gz / block.z) << 16);

        if (out[2 * g] != want_t || out[2 * g + 1] != want_b)
            fail_msg("%s: thread %lld: indices 0x%x 0x%x, expected 0x%x 0x%x", kernel, (long long)g,
                     out[2 * g], out[2 * g + 1], want_t, want_b);
    }
    gm_array_release(&dout);
    free(out);
}

static void check_indices(gm_context *ctx, gm_dim3 grid, gm_dim3 block, int32_t barriers)
{
    check_indices_of(ctx, "kt_index_probe", grid, block, barriers);
    check_indices_of(ctx, "kt_helper_probe", grid, block, barriers);
}

static void test_indices(void **state)
{
    gm_context *ctx = kt_context(32);

    (void)state;
    check_indices(ctx, gm_dim3_make(3, 2, 2), gm_dim3_make(5, 3, 2), 0);
    check_indices(ctx, gm_dim3_make(3, 2, 2), gm_dim3_make(5, 3, 2), 2);
    check_indices(ctx, gm_dim3_make(2, 3, 1), gm_dim3_make(16, 16, 1), 1);
    check_indices(ctx, gm_dim3_make(1, 1, 3), gm_dim3_make(4, 4, 64), 3);
    check_indices(ctx, gm_dim3_make(37, 1, 1), gm_dim3_make(33, 1, 1), 1);
    check_indices(ctx, gm_dim3_make(37, 1, 1), gm_dim3_make(96, 1, 1), 0);
    check_indices(ctx, gm_dim3_make(2, 2, 1), gm_dim3_make(256, 1, 1), 2);
    kt_destroy(&ctx);
}

/* Shared memory belongs to one block even while other blocks run at the same time. */
static void test_shared_per_block(void **state)
{
    gm_context *ctx = kt_context(32);
    int32_t bad = 0;
    gm_array *dbad = kt_device(ctx, GM_INT32, 1, &bad);
    gm_arg args[] = {gm_arg_array(dbad), gm_arg_i32(50)};

    (void)state;
    assert_ok(gm_launch(kt_kernel(ctx, "kt_shared_isolation"), d1(64), d1(128), 0, NULL, 2, args));
    kt_to_host(dbad, GM_INT32, 1, &bad);
    assert_int_equal(bad, 0);
    gm_array_release(&dbad);
    kt_destroy(&ctx);
}

/* GM_SHARED_ARRAY3D: one [planes][rows][cols] array per block, indexed as in C. */
static void test_shared_3d(void **state)
{
    gm_context *ctx = kt_context(32);
    int32_t out[3 * 64];
    gm_array *dout = NULL;
    gm_arg args[1];

    (void)state;
    memset(out, 0xff, sizeof(out));
    dout = kt_device(ctx, GM_INT32, 3 * 64, out);
    args[0] = gm_arg_array(dout);
    assert_ok(
        gm_launch(kt_kernel(ctx, "kt_shared_3d"), d1(3), gm_dim3_make(4, 4, 4), 0, NULL, 1, args));
    kt_to_host(dout, GM_INT32, 3 * 64, out);
    for (int b = 0; b < 3; b++)
        for (int t = 0; t < 64; t++)
            assert_int_equal(out[64 * b + t], 63 - t + 100 * b);
    gm_array_release(&dout);
    kt_destroy(&ctx);
}

static void test_atomics(void **state)
{
    gm_context *ctx = kt_context(32);
    int32_t i32[6] = {0, 0, 0, 0, 0, 0};
    int64_t i64[5] = {0, 0, 0, 0, 0};
    uint32_t u32[4] = {0, 0, 1000000, 0};
    uint64_t u64[4] = {0, 0, 1000000, 0};
    float f32 = 0.0f;
    double f64 = 0.0;
    gm_array *a[6];
    const int64_t n = 37 * 129;

    (void)state;
    a[0] = kt_device(ctx, GM_INT32, 6, i32);
    a[1] = kt_device(ctx, GM_INT64, 5, i64);
    a[2] = kt_device(ctx, GM_UINT32, 4, u32);
    a[3] = kt_device(ctx, GM_UINT64, 4, u64);
    a[4] = kt_device(ctx, GM_FLOAT32, 1, &f32);
    a[5] = kt_device(ctx, GM_FLOAT64, 1, &f64);
    {
        gm_arg args[] = {gm_arg_array(a[0]), gm_arg_array(a[1]), gm_arg_array(a[2]),
                         gm_arg_array(a[3]), gm_arg_array(a[4]), gm_arg_array(a[5])};

        assert_ok(gm_launch(kt_kernel(ctx, "kt_atomics"), d1(37), d1(129), 0, NULL, 6, args));
    }
    kt_to_host(a[0], GM_INT32, 6, i32);
    kt_to_host(a[1], GM_INT64, 5, i64);
    kt_to_host(a[2], GM_UINT32, 4, u32);
    kt_to_host(a[3], GM_UINT64, 4, u64);
    kt_to_host(a[4], GM_FLOAT32, 1, &f32);
    kt_to_host(a[5], GM_FLOAT64, 1, &f64);
    assert_int_equal(i32[0], n);
    assert_int_equal(i32[1], -2 * n);
    assert_int_equal(i32[2], -(n - 1));
    assert_int_equal(i32[3], n - 1);
    assert_int_equal(i32[4], n);
    assert_int_equal(i32[5], 7);
    assert_true(i64[0] == 3 * n && i64[1] == -n && i64[2] == -(n - 1) && i64[3] == n - 1);
    assert_true(i64[4] == -9);
    assert_true(u32[0] == (uint32_t)n && u32[1] == (uint32_t)(n - 1) && u32[2] == 0u);
    assert_true(u32[3] == 11u);
    assert_true(u64[0] == 2u * (uint64_t)n && u64[1] == (uint64_t)(n - 1) && u64[2] == 5u);
    assert_true(u64[3] == (uint64_t)n);
    assert_true(f32 == 0.5f * (float)n);
    assert_true(f64 == 0.25 * (double)n);
    for (int i = 0; i < 6; i++)
        gm_array_release(&a[i]);
    kt_destroy(&ctx);
}

static void test_local_array_and_loop(void **state)
{
    gm_context *ctx = kt_context(64);
    int32_t out[1024];
    gm_array *dout = kt_device(ctx, GM_INT32, 1000, NULL);
    gm_array *dloop = kt_device(ctx, GM_INT32, 1024, NULL);
    gm_arg la[] = {gm_arg_array(dout), gm_arg_i32(1000)};
    gm_arg loop[] = {gm_arg_array(dloop), gm_arg_i32(10)};

    (void)state;
    assert_ok(gm_launch(kt_kernel(ctx, "kt_local_array"), d1(8), d1(128), 0, NULL, 2, la));
    kt_to_host(dout, GM_INT32, 1000, out);
    for (int g = 0; g < 1000; g++)
        assert_int_equal(out[g], g * 28);
    /* Every thread of a 1024-thread block passes 20 barriers: v = t + 10 shifted. */
    assert_ok(gm_launch(kt_kernel(ctx, "kt_barrier_loop"), d1(1), d1(1024), 0, NULL, 2, loop));
    kt_to_host(dloop, GM_INT32, 1024, out);
    for (int t = 0; t < 1024; t++)
        assert_int_equal(out[t], (t + 10) % 1024 + 10);
    gm_array_release(&dout);
    gm_array_release(&dloop);
    kt_destroy(&ctx);
}

/* An application's key, made after the simulator's worker key: its destructor runs later. */
static pthread_key_t late_key;
static gm_kernel *late_kernel;
static gm_array *late_out;
static gm_status late_status;

/* The application's thread-exit work: a kernel with barriers, on this thread. */
static void launch_at_exit(void *value)
{
    gm_arg loop[] = {gm_arg_array(late_out), gm_arg_i32(10)};

    (void)value;
    late_status = gm_launch(late_kernel, d1(1), d1(64), 0, NULL, 2, loop);
}

/* Thread body: a launch (this thread's simulator worker is made), then set late_key. */
static void *launch_then_set_late(void *arg)
{
    gm_arg loop[] = {gm_arg_array(late_out), gm_arg_i32(10)};

    (void)arg;
    if (gm_launch(late_kernel, d1(1), d1(64), 0, NULL, 2, loop) == GM_OK)
        (void)pthread_setspecific(late_key, (void *)1);
    return NULL;
}

/*
 * A launch from an application's key destructor that runs after the
 * simulator's worker of the thread was freed (a key made later): the
 * thread gets a new worker instead of the freed one (a use after free
 * under AddressSanitizer before), and the kernel computes.
 */
static void test_launch_in_late_destructor(void **state)
{
    gm_context *ctx = kt_context(32);
    int32_t out[64];
    pthread_t t;

    (void)state;
    late_out = kt_device(ctx, GM_INT32, 64, NULL);
    late_kernel = kt_kernel(ctx, "kt_barrier_loop");
    {
        gm_arg loop[] = {gm_arg_array(late_out), gm_arg_i32(10)}; /* the worker key exists */

        assert_ok(gm_launch(late_kernel, d1(1), d1(64), 0, NULL, 2, loop));
    }
    assert_int_equal(pthread_key_create(&late_key, launch_at_exit), 0);
    late_status = GM_ERR_INTERNAL;
    assert_ok(gm_array_memset(late_out, 0, NULL));
    assert_int_equal(pthread_create(&t, NULL, launch_then_set_late, NULL), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_ok(late_status);
    kt_to_host(late_out, GM_INT32, 64, out);
    for (int i = 0; i < 64; i++)
        assert_int_equal(out[i], (i + 10) % 64 + 10);
    assert_int_equal(pthread_key_delete(late_key), 0);
    gm_array_release(&late_out);
    kt_destroy(&ctx);
}

/* Launches on a stream are ordered with the stream's copies. */
static void test_stream_order(void **state)
{
    gm_context *ctx = kt_context(32);
    gm_stream *s = NULL;
    const int64_t n = 100000;
    float *a = malloc(n * 4), *b = malloc(n * 4), *out = malloc(n * 4);
    gm_array *da = kt_device(ctx, GM_FLOAT32, n, NULL), *db = kt_device(ctx, GM_FLOAT32, n, NULL);
    gm_array *dout = kt_device(ctx, GM_FLOAT32, n, NULL);
    gm_ndview va, vb, vo;
    gm_kernel *add = NULL;

    (void)state;
    assert_ok(gm_kernel_find(ctx, "add_f32", &add));
    for (int64_t i = 0; i < n; i++) {
        a[i] = (float)i;
        b[i] = (float)(2 * i);
    }
    assert_ok(gm_ndview_init(a, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &va));
    assert_ok(gm_ndview_init(b, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &vb));
    assert_ok(gm_ndview_init(out, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &vo));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s));
    for (int r = 0; r < 3; r++) {
        gm_arg args[] = {gm_arg_array(da), gm_arg_array(db), gm_arg_array(dout), gm_arg_i64(n)};

        memset(out, 0, n * 4);
        assert_ok(gm_array_copy_to_device(da, &va, s));
        assert_ok(gm_array_copy_to_device(db, &vb, s));
        assert_ok(gm_launch(add, d1(kt_blocks(n, 256)), d1(256), 0, s, 4, args));
        assert_ok(gm_array_copy_to_host(dout, &vo, s));
        assert_ok(gm_stream_synchronize(s));
        for (int64_t i = 0; i < n; i++)
            assert_true(out[i] == a[i] + b[i]);
        a[r] += 1.0f;
    }
    gm_stream_destroy(&s);
    gm_array_release(&da);
    gm_array_release(&db);
    gm_array_release(&dout);
    free(a);
    free(b);
    free(out);
    kt_destroy(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_barrier_semantics),
        cmocka_unit_test(test_wavebarrier_scope),
        cmocka_unit_test(test_wavebarrier_exited_lanes),
        cmocka_unit_test(test_divergence),
        cmocka_unit_test(test_divergence_async),
        cmocka_unit_test(test_indices),
        cmocka_unit_test(test_shared_per_block),
        cmocka_unit_test(test_shared_3d),
        cmocka_unit_test(test_atomics),
        cmocka_unit_test(test_local_array_and_loop),
        cmocka_unit_test(test_stream_order),
        cmocka_unit_test(test_launch_in_late_destructor),
    };

    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
