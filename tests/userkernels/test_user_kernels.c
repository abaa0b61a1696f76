/*
 * An application's own kernels (user_kernels.c, built for the simulator, by
 * nvcc and by clang when they exist) registered with gm_register_image_set
 * and launched through the public API on the backend GM_BACKEND names, each
 * checked against a C reference: local, 3-D shared, dynamic shared and
 * constant memory, barriers in a loop, wave barriers, atomics, 3-D grids.
 * Exits 77 (skip) when the backend finds no device, when its images were not
 * built, and on the driver test doubles (they run only the library's own
 * kernels, whose host code they link).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gm_test.h"
#include "gm_test_file.h"

#define SKIP 77

extern const gm_host_table uk_host_table;

static gm_context *g_ctx = NULL;

static gm_kernel *find(const char *name)
{
    gm_kernel *k = NULL;

    assert_ok(gm_kernel_find(g_ctx, name, &k));
    return k;
}

static gm_array *i32_device(int64_t n, const int32_t *init)
{
    gm_array *a = NULL;
    gm_ndview hv;

    if (init == NULL) {
        assert_ok(gm_device_array(g_ctx, 1, &n, GM_INT32, GM_ORDER_C, &a));
        return a;
    }
    assert_ok(gm_ndview_init((void *)init, GM_INT32, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_to_device(g_ctx, &hv, NULL, &a));
    return a;
}

static void download(gm_array *a, void *out)
{
    gm_ndview hv = *gm_array_view(a);

    hv.data = out;
    hv.offset = 0;
    hv.memory = GM_MEMORY_HOST;
    hv.device_id = -1;
    assert_ok(gm_copy(g_ctx, &hv, gm_array_view(a), NULL));
}

static void test_local_memory(void **state)
{
    enum { N = 1000 };
    static int32_t out[N];
    gm_array *d = i32_device(N, NULL);
    gm_arg args[] = {gm_arg_array(d), gm_arg_i32(N)};

    (void)state;
    assert_ok(gm_launch(find("uk_local"), gm_dim3_make(4, 1, 1), gm_dim3_make(256, 1, 1), 0, NULL,
                        2, args));
    download(d, out);
    for (int i = 0; i < N; i++)
        assert_int_equal(out[i], 28 * i);
    gm_array_release(&d);
}

static void test_shared_3d(void **state)
{
    enum { BLOCKS = 3 };
    int32_t out[64 * BLOCKS];
    gm_array *d = i32_device(64 * BLOCKS, NULL);
    gm_arg args[] = {gm_arg_array(d)};

    (void)state;
    assert_ok(gm_launch(find("uk_shared_3d"), gm_dim3_make(BLOCKS, 1, 1), gm_dim3_make(4, 4, 4), 0,
                        NULL, 1, args));
    download(d, out);
    for (int b = 0; b < BLOCKS; b++)
        for (int t = 0; t < 64; t++)
            assert_int_equal(out[64 * b + t], 63 - t + 100 * b);
    gm_array_release(&d);
}

static void test_dynamic_shared(void **state)
{
    enum { BLOCK = 128, BLOCKS = 5, N = BLOCK * BLOCKS };
    float in[N], out[N];
    int64_t n = N;
    gm_ndview hv;
    gm_array *din = NULL, *dout = NULL;

    (void)state;
    for (int i = 0; i < N; i++)
        in[i] = (float)i * 0.5f;
    assert_ok(gm_ndview_init(in, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_to_device(g_ctx, &hv, NULL, &din));
    assert_ok(gm_device_array(g_ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &dout));
    {
        gm_arg args[] = {gm_arg_array(din), gm_arg_array(dout)};

        assert_ok(gm_launch(find("uk_dynamic_reverse"), gm_dim3_make(BLOCKS, 1, 1),
                            gm_dim3_make(BLOCK, 1, 1), BLOCK * sizeof(float), NULL, 2, args));
    }
    download(dout, out);
    for (int b = 0; b < BLOCKS; b++)
        for (int t = 0; t < BLOCK; t++)
            assert_float_equal(out[b * BLOCK + t], in[b * BLOCK + BLOCK - 1 - t], 0.0f);
    gm_array_release(&din);
    gm_array_release(&dout);
}

static void test_wave_barrier(void **state)
{
    enum { BLOCK = 256, BLOCKS = 2, N = BLOCK * BLOCKS };
    static int32_t out[N];
    gm_device_info info;
    gm_array *d = i32_device(N, NULL);

    (void)state;
    assert_ok(gm_context_device_info(g_ctx, &info));
    for (int32_t distance = 1; distance < info.warp_size; distance *= 2) {
        gm_arg args[] = {gm_arg_array(d), gm_arg_i32(1000), gm_arg_i32(distance)};

        assert_ok(gm_launch(find("uk_wave_exchange"), gm_dim3_make(BLOCKS, 1, 1),
                            gm_dim3_make(BLOCK, 1, 1), 0, NULL, 3, args));
        download(d, out);
        for (int g = 0; g < N; g++)
            assert_int_equal(out[g], 1000 + (g / BLOCK) * BLOCK + ((g % BLOCK) ^ distance));
    }
    gm_array_release(&d);
}

static void test_barrier_loop(void **state)
{
    enum { BLOCK = 96, ROUNDS = 37 };
    int32_t out[BLOCK];
    gm_array *d = i32_device(BLOCK, NULL);
    gm_arg args[] = {gm_arg_array(d), gm_arg_i32(ROUNDS)};

    (void)state;
    assert_ok(gm_launch(find("uk_barrier_loop"), gm_dim3_make(1, 1, 1), gm_dim3_make(BLOCK, 1, 1),
                        0, NULL, 2, args));
    download(d, out);
    for (int t = 0; t < BLOCK; t++) /* round r: v[t] = v[t + 1] + 1 */
        assert_int_equal(out[t], (t + ROUNDS) % BLOCK + ROUNDS);
    gm_array_release(&d);
}

static void test_atomics(void **state)
{
    enum { BLOCK = 128, BLOCKS = 40, N = BLOCK * BLOCKS };
    const int32_t i32_init[4] = {0, 0, 0, 0};
    int32_t i32[4];
    uint64_t u64 = 0;
    float f32 = 0.0f;
    double f64 = 0.0;
    int64_t one = 1;
    gm_array *di = i32_device(4, i32_init);
    gm_array *du = NULL, *df = NULL, *dd = NULL;

    (void)state;
    assert_ok(gm_device_array(g_ctx, 1, &one, GM_UINT64, GM_ORDER_C, &du));
    assert_ok(gm_device_array(g_ctx, 1, &one, GM_FLOAT32, GM_ORDER_C, &df));
    assert_ok(gm_device_array(g_ctx, 1, &one, GM_FLOAT64, GM_ORDER_C, &dd));
    assert_ok(gm_array_memset(du, 0, NULL));
    assert_ok(gm_array_memset(df, 0, NULL));
    assert_ok(gm_array_memset(dd, 0, NULL));
    {
        gm_arg args[] = {gm_arg_array(di), gm_arg_array(du), gm_arg_array(df), gm_arg_array(dd)};

        assert_ok(gm_launch(find("uk_atomics"), gm_dim3_make(BLOCKS, 1, 1),
                            gm_dim3_make(BLOCK, 1, 1), 0, NULL, 4, args));
    }
    download(di, i32);
    download(du, &u64);
    download(df, &f32);
    download(dd, &f64);
    assert_int_equal(i32[0], N);
    assert_int_equal(i32[1], -(N - 1));
    assert_int_equal(i32[2], N - 1);
    assert_int_equal(i32[3], 2 * N);
    assert_int_equal(u64, (uint64_t)N * (N - 1) / 2);
    assert_float_equal(f32, 0.5f * N, 0.0f);
    assert_float_equal(f64, 0.25 * N, 0.0);
    gm_array_release(&di);
    gm_array_release(&du);
    gm_array_release(&df);
    gm_array_release(&dd);
}

static void test_grid_3d(void **state)
{
    enum { SX = 2 * 4, SY = 3 * 2, SZ = 2 * 2, N = SX * SY * SZ };
    int32_t out[N];
    gm_array *d = i32_device(N, NULL);
    gm_arg args[] = {gm_arg_array(d)};

    (void)state;
    assert_ok(gm_launch(find("uk_indices"), gm_dim3_make(2, 3, 2), gm_dim3_make(4, 2, 2), 0, NULL,
                        1, args));
    download(d, out);
    for (int z = 0; z < SZ; z++)
        for (int y = 0; y < SY; y++)
            for (int x = 0; x < SX; x++) {
                int32_t blocks = x / 4 + y / 2 + z / 2;

                assert_int_equal(out[x + SX * (y + SY * z)], x | y << 8 | z << 16 | blocks << 24);
            }
    gm_array_release(&d);
}

static void test_constant_memory(void **state)
{
    enum { N = 300 };
    const int32_t coeffs[4] = {3, -1, 4, 10};
    int32_t out[N];
    gm_kernel *k = find("uk_constant");
    gm_array *d = i32_device(N, NULL);
    gm_arg args[] = {gm_arg_array(d), gm_arg_i64(N)};

    (void)state;
    assert_ok(gm_module_set_constant(gm_kernel_module(k), "uk_coeffs", coeffs, sizeof(coeffs)));
    assert_ok(gm_launch(k, gm_dim3_make(3, 1, 1), gm_dim3_make(128, 1, 1), 0, NULL, 2, args));
    download(d, out);
    for (int i = 0; i < N; i++)
        assert_int_equal(out[i], coeffs[i % 4] * i);
    gm_array_release(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_memory),   cmocka_unit_test(test_shared_3d),
        cmocka_unit_test(test_dynamic_shared), cmocka_unit_test(test_wave_barrier),
        cmocka_unit_test(test_barrier_loop),   cmocka_unit_test(test_atomics),
        cmocka_unit_test(test_grid_3d),        cmocka_unit_test(test_constant_memory),
    };
    gm_image_set set = {"user kernels", &uk_host_table, NULL, 0, NULL, 0};
    gm_amdgpu_image amdgpu[8];
    void *fatbin = NULL;
    gm_backend_kind kind;
    int rc = 0;
    gm_status st = gm_context_create(NULL, &g_ctx);

    if (st == GM_ERR_NO_DRIVER || st == GM_ERR_NO_DEVICE) {
        printf("skipped: %s: %s\n", gm_status_name(st), gm_last_error_message());
        return SKIP;
    }
    if (st != GM_OK) {
        fprintf(stderr, "gm_context_create: %s\n", gm_last_error_message());
        return 1;
    }
    kind = gm_context_backend(g_ctx);
    if ((kind == GM_BACKEND_CUDA && getenv("GM_CUDA_DRIVER_PATH") != NULL) ||
        (kind == GM_BACKEND_HSA && getenv("GM_HSA_RUNTIME_PATH") != NULL)) {
        printf("skipped: the %s driver test double runs only the library's own kernels\n",
               gm_backend_name(kind));
        gm_context_destroy(&g_ctx);
        return SKIP;
    }
#ifdef UK_FATBIN
    fatbin = gm_test_read_file(UK_FATBIN, &set.cuda_bytes);
    set.cuda = fatbin;
#endif
#ifdef UK_AMDGPU_DIR
    {
        static const char *const archs[] = {UK_AMDGPU_ARCHS};

        for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]) && archs[i][0] != '\0'; i++) {
            char path[1024];

            snprintf(path, sizeof(path), "%s/user_kernels-%s.co", UK_AMDGPU_DIR, archs[i]);
            amdgpu[set.amdgpu_count].arch = archs[i];
            amdgpu[set.amdgpu_count].data =
                gm_test_read_file(path, &amdgpu[set.amdgpu_count].bytes);
            if (amdgpu[set.amdgpu_count].data != NULL)
                set.amdgpu_count++;
        }
        set.amdgpu = amdgpu;
    }
#endif
    if ((kind == GM_BACKEND_CUDA && set.cuda == NULL) ||
        (kind == GM_BACKEND_HSA && set.amdgpu_count == 0)) {
        printf("skipped: no %s image of the test kernels was built\n", gm_backend_name(kind));
        gm_context_destroy(&g_ctx);
        return SKIP;
    }
    printf("user kernels on the %s backend\n", gm_backend_name(kind));
    if (gm_register_image_set(&set) != GM_OK) {
        fprintf(stderr, "gm_register_image_set: %s\n", gm_last_error_message());
        return 1;
    }
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    gm_context_destroy(&g_ctx);
    (void)gm_unregister_image_set(&set);
    free(fatbin);
    for (int32_t i = 0; i < set.amdgpu_count; i++)
        free((void *)amdgpu[i].data);
    return rc;
}
