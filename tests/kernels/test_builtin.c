/*
 * The library's built-in kernels (kernels/) on the host simulator, each
 * against a plain C reference, with random sizes that are mostly not
 * multiples of the block size, at warp sizes 32 and 64.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt_helpers.h"

static gm_dim3 d1(uint32_t x)
{
    return gm_dim3_make(x, 1, 1);
}

static void run_add(gm_context *ctx, int64_t n)
{
    float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4), *out = malloc((size_t)n * 4);
    gm_array *da = NULL, *db = NULL, *dout = NULL;
    gm_kernel *k = NULL;

    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(out);
    for (int64_t i = 0; i < n; i++) {
        a[i] = kt_randf();
        b[i] = kt_randf();
    }
    da = kt_device(ctx, GM_FLOAT32, n, a);
    db = kt_device(ctx, GM_FLOAT32, n, b);
    dout = kt_device(ctx, GM_FLOAT32, n, NULL);
    assert_ok(gm_kernel_find(ctx, "add_f32", &k));
    {
        gm_arg args[] = {gm_arg_array(da), gm_arg_array(db), gm_arg_array(dout), gm_arg_i64(n)};

        assert_ok(gm_launch(k, d1(kt_blocks(n, 256)), d1(256), 0, NULL, 4, args));
    }
    kt_to_host(dout, GM_FLOAT32, n, out);
    for (int64_t i = 0; i < n; i++) {
        if (out[i] != a[i] + b[i])
            fail_msg("add_f32 n=%lld: out[%lld] = %g, expected %g", (long long)n, (long long)i,
                     out[i], a[i] + b[i]);
    }
    gm_array_release(&da);
    gm_array_release(&db);
    gm_array_release(&dout);
    free(a);
    free(b);
    free(out);
}

static void test_add(void **state)
{
    gm_context *ctx = kt_context(32);
    const int64_t sizes[] = {1, 255, 256, 257, 1000};

    (void)state;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        run_add(ctx, sizes[i]);
    for (int r = 0; r < 4; r++)
        run_add(ctx, kt_rand(1, 200000));
    kt_destroy(&ctx);
}

static void test_add_f64_and_fill(void **state)
{
    gm_context *ctx = kt_context(64);
    int64_t n = kt_rand(300, 5000);
    double *a = malloc((size_t)n * 8), *b = malloc((size_t)n * 8), *o = malloc((size_t)n * 8);
    float *f = malloc((size_t)n * 4);
    int32_t *iv = malloc((size_t)n * 4);
    gm_array *da = NULL, *db = NULL, *dout = NULL, *df = NULL, *di = NULL;

    (void)state;
    for (int64_t i = 0; i < n; i++) {
        a[i] = (double)i * 0.5;
        b[i] = 1.0 / (double)(i + 1);
    }
    da = kt_device(ctx, GM_FLOAT64, n, a);
    db = kt_device(ctx, GM_FLOAT64, n, b);
    dout = kt_device(ctx, GM_FLOAT64, n, NULL);
    df = kt_device(ctx, GM_FLOAT32, n, NULL);
    di = kt_device(ctx, GM_INT32, n, NULL);
    {
        gm_arg add[] = {gm_arg_array(da), gm_arg_array(db), gm_arg_array(dout), gm_arg_i64(n)};
        gm_arg ff[] = {gm_arg_array(df), gm_arg_f32(2.5f), gm_arg_i64(n)};
        gm_arg fi[] = {gm_arg_array(di), gm_arg_i32(-7), gm_arg_i64(n)};

        assert_ok(
            gm_launch(kt_kernel(ctx, "add_f64"), d1(kt_blocks(n, 128)), d1(128), 0, NULL, 4, add));
        assert_ok(
            gm_launch(kt_kernel(ctx, "fill_f32"), d1(kt_blocks(n, 64)), d1(64), 0, NULL, 3, ff));
        assert_ok(
            gm_launch(kt_kernel(ctx, "fill_i32"), d1(kt_blocks(n, 100)), d1(100), 0, NULL, 3, fi));
    }
    kt_to_host(dout, GM_FLOAT64, n, o);
    kt_to_host(df, GM_FLOAT32, n, f);
    kt_to_host(di, GM_INT32, n, iv);
    for (int64_t i = 0; i < n; i++) {
        assert_true(o[i] == a[i] + b[i]);
        assert_true(f[i] == 2.5f);
        assert_int_equal(iv[i], -7);
    }
    gm_array_release(&da);
    gm_array_release(&db);
    gm_array_release(&dout);
    gm_array_release(&df);
    gm_array_release(&di);
    free(a);
    free(b);
    free(o);
    free(f);
    free(iv);
    kt_destroy(&ctx);
}

/* Copy a (d0, d1, d2) float array from a transposed, sliced layout into a C-contiguous one. */
static void run_copy_strided(gm_context *ctx, int64_t d0, int64_t d1_, int64_t d2)
{
    int64_t big = (2 * d0) * d1_ * d2; /* source: axes (2, 1, 0) of a (d2, d1, 2*d0) array */
    float *src = malloc((size_t)big * 4), *dst = malloc((size_t)(d0 * d1_ * d2) * 4);
    gm_array *dsrc = NULL, *ddst = NULL;
    gm_strided_layout L;
    int64_t n = d0 * d1_ * d2;

    for (int64_t i = 0; i < big; i++)
        src[i] = (float)i;
    dsrc = kt_device(ctx, GM_FLOAT32, big, src);
    ddst = kt_device(ctx, GM_FLOAT32, n, NULL);
    memset(&L, 0, sizeof L);
    L.ndim = 3;
    L.itemsize = 4;
    L.shape[0] = d0;
    L.shape[1] = d1_;
    L.shape[2] = d2;
    L.dst_strides[0] = d1_ * d2 * 4;
    L.dst_strides[1] = d2 * 4;
    L.dst_strides[2] = 4;
    /* src element (i, j, k) = src_array[k][j][2 i] of shape (d2, d1, 2 d0). */
    L.src_strides[0] = 2 * 4;
    L.src_strides[1] = 2 * d0 * 4;
    L.src_strides[2] = 2 * d0 * d1_ * 4;
    {
        gm_arg args[] = {gm_arg_array(ddst), gm_arg_array(dsrc), gm_arg_bytes(&L, sizeof L),
                         gm_arg_i64(n)};

        assert_ok(gm_launch(kt_kernel(ctx, "copy_strided"), d1(kt_blocks(n, 96)), d1(96), 0, NULL,
                            4, args));
    }
    kt_to_host(ddst, GM_FLOAT32, n, dst);
    for (int64_t i = 0; i < d0; i++)
        for (int64_t j = 0; j < d1_; j++)
            for (int64_t k = 0; k < d2; k++) {
                float want = src[k * (d1_ * 2 * d0) + j * (2 * d0) + 2 * i];
                float got = dst[(i * d1_ + j) * d2 + k];

                if (got != want)
                    fail_msg("copy_strided (%lld,%lld,%lld) at (%lld,%lld,%lld): %g != %g",
                             (long long)d0, (long long)d1_, (long long)d2, (long long)i,
                             (long long)j, (long long)k, got, want);
            }
    gm_array_release(&dsrc);
    gm_array_release(&ddst);
    free(src);
    free(dst);
}

static void test_copy_strided(void **state)
{
    gm_context *ctx = kt_context(32);

    (void)state;
    run_copy_strided(ctx, 1, 1, 1);
    run_copy_strided(ctx, 3, 5, 7);
    run_copy_strided(ctx, kt_rand(1, 40), kt_rand(1, 40), kt_rand(1, 40));
    kt_destroy(&ctx);
}

static void run_matmul(gm_context *ctx, int32_t m, int32_t n, int32_t k)
{
    float *a = malloc((size_t)m * k * 4), *b = malloc((size_t)k * n * 4);
    float *c = malloc((size_t)m * n * 4);
    gm_array *da = NULL, *db = NULL, *dc = NULL;

    for (int64_t i = 0; i < (int64_t)m * k; i++)
        a[i] = kt_randf();
    for (int64_t i = 0; i < (int64_t)k * n; i++)
        b[i] = kt_randf();
    da = kt_device(ctx, GM_FLOAT32, (int64_t)m * k, a);
    db = kt_device(ctx, GM_FLOAT32, (int64_t)k * n, b);
    dc = kt_device(ctx, GM_FLOAT32, (int64_t)m * n, NULL);
    {
        gm_arg args[] = {gm_arg_array(da), gm_arg_array(db), gm_arg_array(dc),
                         gm_arg_i32(m),    gm_arg_i32(n),    gm_arg_i32(k)};

        assert_ok(gm_launch(kt_kernel(ctx, "matmul_f32"),
                            gm_dim3_make(kt_blocks(n, 16), kt_blocks(m, 16), 1),
                            gm_dim3_make(16, 16, 1), 0, NULL, 6, args));
    }
    kt_to_host(dc, GM_FLOAT32, (int64_t)m * n, c);
    for (int32_t i = 0; i < m; i++)
        for (int32_t j = 0; j < n; j++) {
            double ref = 0.0;

            for (int32_t l = 0; l < k; l++)
                ref += (double)a[(int64_t)i * k + l] * b[(int64_t)l * n + j];
            if (fabs(c[(int64_t)i * n + j] - ref) > 1e-4 * (1.0 + fabs(ref)) * k)
                fail_msg("matmul %dx%dx%d: C[%d][%d] = %g, expected %g", m, n, k, i, j,
                         c[(int64_t)i * n + j], ref);
        }
    gm_array_release(&da);
    gm_array_release(&db);
    gm_array_release(&dc);
    free(a);
    free(b);
    free(c);
}

static void test_matmul(void **state)
{
    gm_context *ctx = kt_context(32);

    (void)state;
    run_matmul(ctx, 1, 1, 1);
    run_matmul(ctx, 16, 16, 16);
    run_matmul(ctx, 17, 33, 9);
    run_matmul(ctx, 64, 48, 80);
    for (int r = 0; r < 3; r++)
        run_matmul(ctx, (int32_t)kt_rand(1, 120), (int32_t)kt_rand(1, 120),
                   (int32_t)kt_rand(1, 120));
    kt_destroy(&ctx);
}

/* Two passes: partial sums per block, then one block over the partials. */
static void run_reduce(gm_context *ctx, int64_t n, uint32_t block, uint32_t max_grid)
{
    float *x = malloc((size_t)n * 4), result = 0.0f;
    uint32_t grid = kt_blocks(n, block) < max_grid ? kt_blocks(n, block) : max_grid;
    gm_array *dx = NULL, *dpart = NULL, *dout = NULL;
    gm_kernel *k = kt_kernel(ctx, "reduce_sum_f32");
    double ref = 0.0, mag = 0.0;

    for (int64_t i = 0; i < n; i++) {
        x[i] = kt_randf();
        ref += x[i];
        mag += fabs(x[i]);
    }
    dx = kt_device(ctx, GM_FLOAT32, n, x);
    dpart = kt_device(ctx, GM_FLOAT32, grid, NULL);
    dout = kt_device(ctx, GM_FLOAT32, 1, NULL);
    {
        gm_arg p1[] = {gm_arg_array(dx), gm_arg_array(dpart), gm_arg_i64(n)};
        gm_arg p2[] = {gm_arg_array(dpart), gm_arg_array(dout), gm_arg_i64(grid)};

        assert_ok(gm_launch(k, d1(grid), d1(block), 0, NULL, 3, p1));
        assert_ok(gm_launch(k, d1(1), d1(block), 0, NULL, 3, p2));
    }
    kt_to_host(dout, GM_FLOAT32, 1, &result);
    if (fabs(result - ref) > 1e-5 * mag + 1e-6)
        fail_msg("reduce n=%lld block=%u grid=%u: %.9g, expected %.9g", (long long)n, block, grid,
                 result, ref);
    gm_array_release(&dx);
    gm_array_release(&dpart);
    gm_array_release(&dout);
    free(x);
}

static void test_reduce(void **state)
{
    (void)state;
    for (int ws = 32; ws <= 64; ws *= 2) {
        gm_context *ctx = kt_context(ws);

        run_reduce(ctx, 1, 256, 64);
        run_reduce(ctx, 1000, 256, 64);
        run_reduce(ctx, 1000, 32, 1000);
        run_reduce(ctx, 777, 16, 1000);
        run_reduce(ctx, 4099, 1024, 8);
        run_reduce(ctx, kt_rand(1, 300000), 256, 128);
        run_reduce(ctx, kt_rand(1, 300000), 128, 100000);
        /* blocks that are not powers of two, below, across and above a warp */
        run_reduce(ctx, 100000, 100, 64);
        run_reduce(ctx, 100000, 48, 64);
        run_reduce(ctx, 5000, 3, 64);
        run_reduce(ctx, 5000, 33, 64);
        run_reduce(ctx, 5000, 1000, 4);
        run_reduce(ctx, kt_rand(1, 300000), (uint32_t)kt_rand(1, 1024), 64);
        kt_destroy(&ctx);
    }
}

static void run_transpose(gm_context *ctx, int32_t rows, int32_t cols)
{
    int64_t n = (int64_t)rows * cols;
    float *in = malloc((size_t)n * 4), *out = malloc((size_t)n * 4);
    gm_array *din = NULL, *dout = NULL;

    for (int64_t i = 0; i < n; i++)
        in[i] = (float)i;
    din = kt_device(ctx, GM_FLOAT32, n, in);
    dout = kt_device(ctx, GM_FLOAT32, n, NULL);
    {
        gm_arg args[] = {gm_arg_array(din), gm_arg_array(dout), gm_arg_i32(rows), gm_arg_i32(cols)};

        assert_ok(gm_launch(kt_kernel(ctx, "transpose_f32"),
                            gm_dim3_make(kt_blocks(cols, 32), kt_blocks(rows, 32), 1),
                            gm_dim3_make(32, 8, 1), 0, NULL, 4, args));
    }
    kt_to_host(dout, GM_FLOAT32, n, out);
    for (int32_t r = 0; r < rows; r++)
        for (int32_t c = 0; c < cols; c++) {
            if (out[(int64_t)c * rows + r] != in[(int64_t)r * cols + c])
                fail_msg("transpose %dx%d at (%d,%d)", rows, cols, r, c);
        }
    gm_array_release(&din);
    gm_array_release(&dout);
    free(in);
    free(out);
}

static void test_transpose(void **state)
{
    gm_context *ctx = kt_context(32);

    (void)state;
    run_transpose(ctx, 1, 1);
    run_transpose(ctx, 32, 32);
    run_transpose(ctx, 33, 65);
    run_transpose(ctx, 100, 7);
    run_transpose(ctx, (int32_t)kt_rand(1, 300), (int32_t)kt_rand(1, 300));
    kt_destroy(&ctx);
}

static void run_stencil(gm_context *ctx, int64_t n, int32_t radius, uint32_t block)
{
    float *in = malloc((size_t)n * 4), *out = malloc((size_t)n * 4);
    gm_array *din = NULL, *dout = NULL;

    for (int64_t i = 0; i < n; i++)
        in[i] = (float)kt_rand(-100, 100);
    din = kt_device(ctx, GM_FLOAT32, n, in);
    dout = kt_device(ctx, GM_FLOAT32, n, NULL);
    {
        gm_arg args[] = {gm_arg_array(din), gm_arg_array(dout), gm_arg_i64(n), gm_arg_i32(radius)};

        assert_ok(gm_launch(kt_kernel(ctx, "stencil1d_f32"), d1(kt_blocks(n, block)), d1(block),
                            (block + 2u * (uint32_t)radius) * sizeof(float), NULL, 4, args));
    }
    kt_to_host(dout, GM_FLOAT32, n, out);
    for (int64_t i = 0; i < n; i++) {
        float ref = 0.0f;

        for (int64_t j = i - radius; j <= i + radius; j++)
            ref += j >= 0 && j < n ? in[j] : 0.0f;
        if (out[i] != ref)
            fail_msg("stencil n=%lld r=%d at %lld: %g != %g", (long long)n, radius, (long long)i,
                     out[i], ref);
    }
    gm_array_release(&din);
    gm_array_release(&dout);
    free(in);
    free(out);
}

static void test_stencil(void **state)
{
    gm_context *ctx = kt_context(32);

    (void)state;
    run_stencil(ctx, 1, 0, 64);
    run_stencil(ctx, 1000, 1, 128);
    run_stencil(ctx, 1000, 3, 256);
    run_stencil(ctx, 77, 40, 32); /* halo wider than the block */
    run_stencil(ctx, kt_rand(1, 100000), (int32_t)kt_rand(0, 8), 256);
    kt_destroy(&ctx);
}

static void run_poly(gm_context *ctx, gm_kernel *k, const float *coeffs, int32_t degree, int64_t n)
{
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    gm_array *dx = NULL, *dy = NULL;

    for (int64_t i = 0; i < n; i++)
        x[i] = kt_randf();
    dx = kt_device(ctx, GM_FLOAT32, n, x);
    dy = kt_device(ctx, GM_FLOAT32, n, NULL);
    assert_ok(gm_module_set_constant(gm_kernel_module(k), "gm_poly_coeffs", coeffs,
                                     (size_t)(degree + 1) * sizeof(float)));
    {
        gm_arg args[] = {gm_arg_array(dx), gm_arg_array(dy), gm_arg_i64(n), gm_arg_i32(degree)};

        assert_ok(gm_launch(k, d1(kt_blocks(n, 256)), d1(256), 0, NULL, 4, args));
    }
    kt_to_host(dy, GM_FLOAT32, n, y);
    for (int64_t i = 0; i < n; i++) {
        float ref = 0.0f;

        for (int32_t d = degree; d >= 0; d--)
            ref = ref * x[i] + coeffs[d];
        if (fabsf(y[i] - ref) > 1e-5f * (1.0f + fabsf(ref)))
            fail_msg("poly degree %d at %lld: %g != %g", degree, (long long)i, y[i], ref);
    }
    gm_array_release(&dx);
    gm_array_release(&dy);
    free(x);
    free(y);
}

static void test_constant_memory(void **state)
{
    gm_context *ctx = kt_context(32);
    gm_kernel *k = kt_kernel(ctx, "poly_eval_f32");
    const float c1[] = {1.0f, -2.0f, 0.5f, 3.0f};
    const float c2[] = {0.25f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f};
    void *addr = NULL;
    size_t bytes = 0;

    (void)state;
    assert_ok(gm_module_get_global(gm_kernel_module(k), "gm_poly_coeffs", &addr, &bytes));
    assert_non_null(addr);
    assert_int_equal(bytes, 16 * sizeof(float));
    run_poly(ctx, k, c1, 3, 1000);
    run_poly(ctx, k, c2, 5, kt_rand(1, 50000)); /* new constants are seen by the next launch */
    kt_destroy(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add),          cmocka_unit_test(test_add_f64_and_fill),
        cmocka_unit_test(test_copy_strided), cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_reduce),       cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_stencil),      cmocka_unit_test(test_constant_memory),
    };

    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
