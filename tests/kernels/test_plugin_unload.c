/*
 * Kernels from a plugin that is unloaded: a program dlopens a shared module
 * holding a host table (kt_plugin.c), loads it with gm_module_load_image,
 * launches its kernels (with barriers, so that threads take fibers of their
 * own, and over many blocks, so that the pool's threads run some), unloads
 * the module, flushes the deallocations and dlcloses the plugin, which the
 * contract allows. Launches after that, of the library's own kernels, on the
 * same thread and on the pool, must not touch the plugin's unmapped code
 * (the simulator's fibers once stayed parked in the plugin kernel's loop
 * between runs and returned through it on the next launch: SIGSEGV).
 *
 * Linked with the shared library, like an application: the plugin's
 * references to the simulator's entry points resolve to it.
 * argv[1]: the plugin's path.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gpumem/gpumem.h>
#include <gpumem/kernel.h>

#include "gm_test.h"

static const char *plugin_path = NULL;

static gm_dim3 d1(uint32_t x)
{
    return gm_dim3_make(x, 1, 1);
}

static gm_array *device_i32(gm_context *ctx, int64_t n)
{
    gm_array *a = NULL;

    assert_ok(gm_device_array(ctx, 1, &n, GM_INT32, GM_ORDER_C, &a));
    return a;
}

static gm_array *device_f32(gm_context *ctx, int64_t n, const float *host)
{
    gm_array *a = NULL;
    gm_ndview v;

    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &a));
    if (host != NULL) {
        assert_ok(gm_ndview_init((void *)(uintptr_t)host, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &v));
        assert_ok(gm_array_copy_to_device(a, &v, NULL));
    }
    return a;
}

static void to_host(gm_array *a, gm_dtype dtype, int64_t n, void *host)
{
    gm_ndview v;

    assert_ok(gm_ndview_init(host, dtype, 1, &n, NULL, GM_ORDER_C, &v));
    assert_ok(gm_array_copy_to_host(a, &v, NULL));
}

/* Launch the plugin's kernels over grid x block threads and check what they wrote. */
static void run_plugin(gm_context *ctx, gm_module *m, uint32_t grid, uint32_t block, int32_t seed)
{
    int64_t n = (int64_t)grid * block;
    gm_array *out = device_i32(ctx, n);
    int32_t *got = malloc((size_t)n * sizeof *got);
    gm_kernel *shift = NULL, *fill = NULL;
    gm_arg args[2] = {gm_arg_array(out), gm_arg_i32(seed)};

    assert_non_null(got);
    assert_ok(gm_module_get_kernel(m, "kt_plugin_shift", &shift));
    assert_ok(gm_module_get_kernel(m, "kt_plugin_fill", &fill));
    assert_ok(gm_launch(fill, d1(grid), d1(block), 0, NULL, 2, args));
    to_host(out, GM_INT32, n, got);
    for (int64_t g = 0; g < n; g++) {
        if (got[g] != seed + (int32_t)g)
            fail_msg("kt_plugin_fill: out[%lld] = %d, expected %d", (long long)g, got[g],
                     seed + (int32_t)g);
    }
    assert_ok(gm_launch(shift, d1(grid), d1(block), 0, NULL, 2, args));
    to_host(out, GM_INT32, n, got);
    for (int64_t g = 0; g < n; g++) {
        int64_t next = g - g % block + (g % block + 1) % block;

        if (got[g] != seed + (int32_t)next)
            fail_msg("kt_plugin_shift %ux%u: out[%lld] = %d, expected %d", grid, block,
                     (long long)g, got[g], seed + (int32_t)next);
    }
    gm_array_release(&out);
    free(got);
}

/* The library's add_f32 (barrier-free) and reduce_sum_f32 (barriers, wave barriers). */
static void run_builtins(gm_context *ctx, uint32_t grid, uint32_t block)
{
    int64_t n = (int64_t)grid * block;
    float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    float *got = malloc((size_t)n * sizeof *got);
    gm_array *da = NULL, *db = NULL, *dout = NULL, *dpartial = NULL;
    gm_kernel *add = NULL, *reduce = NULL;

    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(got);
    for (int64_t i = 0; i < n; i++) {
        a[i] = (float)(i % 97);
        b[i] = (float)(i % 13);
    }
    da = device_f32(ctx, n, a);
    db = device_f32(ctx, n, b);
    dout = device_f32(ctx, n, NULL);
    dpartial = device_f32(ctx, grid, NULL);
    assert_ok(gm_kernel_find(ctx, "add_f32", &add));
    assert_ok(gm_kernel_find(ctx, "reduce_sum_f32", &reduce));
    {
        gm_arg args[4] = {gm_arg_array(da), gm_arg_array(db), gm_arg_array(dout), gm_arg_i64(n)};

        assert_ok(gm_launch(add, d1(grid), d1(block), 0, NULL, 4, args));
    }
    to_host(dout, GM_FLOAT32, n, got);
    for (int64_t i = 0; i < n; i++) {
        if (got[i] != a[i] + b[i])
            fail_msg("add_f32: out[%lld] = %g, expected %g", (long long)i, got[i], a[i] + b[i]);
    }
    {
        gm_arg args[3] = {gm_arg_array(da), gm_arg_array(dpartial), gm_arg_i64(n)};

        assert_ok(gm_launch(reduce, d1(grid), d1(block), 0, NULL, 3, args));
    }
    to_host(dpartial, GM_FLOAT32, grid, got);
    for (uint32_t blk = 0; blk < grid; blk++) {
        /* The grid's stride is n: thread t of block blk sums a[blk * block + t] alone. */
        float want = 0.0f;

        for (uint32_t t = 0; t < block; t++)
            want += a[(int64_t)blk * block + t];
        if (got[blk] != want)
            fail_msg("reduce_sum_f32: partial[%u] = %g, expected %g", blk, got[blk], want);
    }
    gm_array_release(&da);
    gm_array_release(&db);
    gm_array_release(&dout);
    gm_array_release(&dpartial);
    free(a);
    free(b);
    free(got);
}

/* dlopen the plugin, run its kernels on this thread and the pool, unload everything. */
static void use_and_close_plugin(gm_context *ctx)
{
    void *handle = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
    const gm_host_table *table = NULL;
    gm_module *m = NULL;

    if (handle == NULL)
        fail_msg("dlopen %s: %s", plugin_path, dlerror());
    table = dlsym(handle, "kt_plugin_table");
    assert_non_null(table);
    assert_ok(gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, table, sizeof *table, &m));
    run_plugin(ctx, m, 1, 256, 11);  /* one block: the calling thread */
    run_plugin(ctx, m, 1, 1024, 12); /* the most threads a block has */
    run_plugin(ctx, m, 64, 256, 13); /* the pool's threads too */
    run_plugin(ctx, m, 16, 32, 14);
    gm_module_unload(&m);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(dlclose(handle), 0);
    /* The plugin's code is gone (no one else holds it). */
    assert_null(dlopen(plugin_path, RTLD_NOW | RTLD_NOLOAD));
}

static void test_builtin_after_dlclose(void **state)
{
    gm_context *ctx = NULL;

    (void)state;
    assert_ok(gm_context_create(NULL, &ctx));
    use_and_close_plugin(ctx);
    run_builtins(ctx, 1, 256);  /* the fibers of the calling thread */
    run_builtins(ctx, 1, 1024); /* more than the plugin's last run left parked */
    run_builtins(ctx, 64, 256); /* the pool's threads' fibers */
    gm_context_destroy(&ctx);
}

/* Twice over: load, run, close, and the same path mapped again (likely at the same address). */
static void test_reload_after_dlclose(void **state)
{
    gm_context *ctx = NULL;

    (void)state;
    assert_ok(gm_context_create(NULL, &ctx));
    for (int i = 0; i < 3; i++) {
        use_and_close_plugin(ctx);
        run_builtins(ctx, 8, 128);
    }
    gm_context_destroy(&ctx);
}

/* The plugin run from another thread, which then launches the built-ins. */
static void *thread_main(void *arg)
{
    gm_context *ctx = arg;

    use_and_close_plugin(ctx);
    run_builtins(ctx, 1, 512);
    run_builtins(ctx, 32, 64);
    return NULL;
}

static void test_other_thread(void **state)
{
    gm_context *ctx = NULL;
    pthread_t thread;

    (void)state;
    assert_ok(gm_context_create(NULL, &ctx));
    assert_int_equal(pthread_create(&thread, NULL, thread_main, ctx), 0);
    assert_int_equal(pthread_join(thread, NULL), 0);
    gm_context_destroy(&ctx);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin_after_dlclose),
        cmocka_unit_test(test_reload_after_dlclose),
        cmocka_unit_test(test_other_thread),
    };

    if (argc < 2) {
        fprintf(stderr, "usage: %s PLUGIN.so\n", argv[0]);
        return 2;
    }
    plugin_path = argv[1];
    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
