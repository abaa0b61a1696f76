/*
 * Launch validation and marshalling (src/core/kernels.c), modules and the
 * registry (src/core/module.c), and the host backend's module ops
 * (src/host/host_launch.c): every invalid launch is refused with a clear
 * message before anything runs.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <gpumem/kernel.h>

#include "kt_helpers.h"

extern const gm_image_set kt_override_set;

static gm_dim3 d1(uint32_t x)
{
    return gm_dim3_make(x, 1, 1);
}

/* A kernel whose parameters are the program's own typedefs. */
typedef double kt_real;
typedef float *kt_fptr;

GM_KERNEL(kt_scale_typedefs, (kt_fptr, x), (kt_real, factor), (int64_t, n), (unsigned long, tag))
{
    int64_t i = gm_global_id_x();

    if (i < n)
        x[i] = (float)(x[i] * factor) + (float)tag;
}

/* Scalars of every size in an order that needs padding between them (natural alignment). */
GM_KERNEL(kt_mixed_scalars, (double *, out), (int8_t, c), (double, x), (int16_t, s), (float, f),
          (int32_t, a), (uint64_t, u))
{
    if (gm_global_id_x() == 0)
        out[0] = (double)c + x + (double)s + (double)f + (double)a + (double)u;
}

GM_HOST_TABLE(kt_typedef_table, GM_HOST_KERNELS(kt_scale_typedefs, kt_mixed_scalars),
              GM_HOST_NO_GLOBALS);

/* A table of more kernels than a parameter list may have (GM_HOST_KERNELS takes up to 64). */
GM_KERNEL(kt_many_0, (int32_t *, out))
{
    out[0] = 0;
}

GM_KERNEL(kt_many_1, (int32_t *, out))
{
    out[0] = 1;
}

GM_KERNEL(kt_many_2, (int32_t *, out))
{
    out[0] = 2;
}

GM_KERNEL(kt_many_3, (int32_t *, out))
{
    out[0] = 3;
}

GM_KERNEL(kt_many_4, (int32_t *, out))
{
    out[0] = 4;
}

GM_KERNEL(kt_many_5, (int32_t *, out))
{
    out[0] = 5;
}

GM_KERNEL(kt_many_6, (int32_t *, out))
{
    out[0] = 6;
}

GM_KERNEL(kt_many_7, (int32_t *, out))
{
    out[0] = 7;
}

GM_KERNEL(kt_many_8, (int32_t *, out))
{
    out[0] = 8;
}

GM_KERNEL(kt_many_9, (int32_t *, out))
{
    out[0] = 9;
}

GM_KERNEL(kt_many_10, (int32_t *, out))
{
    out[0] = 10;
}

GM_KERNEL(kt_many_11, (int32_t *, out))
{
    out[0] = 11;
}

GM_KERNEL(kt_many_12, (int32_t *, out))
{
    out[0] = 12;
}

GM_KERNEL(kt_many_13, (int32_t *, out))
{
    out[0] = 13;
}

GM_KERNEL(kt_many_14, (int32_t *, out))
{
    out[0] = 14;
}

GM_KERNEL(kt_many_15, (int32_t *, out))
{
    out[0] = 15;
}

GM_KERNEL(kt_many_16, (int32_t *, out))
{
    out[0] = 16;
}

GM_KERNEL(kt_many_17, (int32_t *, out))
{
    out[0] = 17;
}

GM_KERNEL(kt_many_18, (int32_t *, out))
{
    out[0] = 18;
}

GM_KERNEL(kt_many_19, (int32_t *, out))
{
    out[0] = 19;
}

GM_HOST_TABLE(kt_many_table,
              GM_HOST_KERNELS(kt_many_0, kt_many_1, kt_many_2, kt_many_3, kt_many_4, kt_many_5,
                              kt_many_6, kt_many_7, kt_many_8, kt_many_9, kt_many_10, kt_many_11,
                              kt_many_12, kt_many_13, kt_many_14, kt_many_15, kt_many_16,
                              kt_many_17, kt_many_18, kt_many_19),
              GM_HOST_NO_GLOBALS);

typedef struct add_fixture {
    gm_context *ctx;
    gm_kernel *add;
    gm_array *a, *b, *out;
} add_fixture;

static add_fixture add_setup(void)
{
    add_fixture f;

    f.ctx = kt_context(32);
    assert_ok(gm_kernel_find(f.ctx, "add_f32", &f.add));
    f.a = kt_device(f.ctx, GM_FLOAT32, 100, NULL);
    f.b = kt_device(f.ctx, GM_FLOAT32, 100, NULL);
    f.out = kt_device(f.ctx, GM_FLOAT32, 100, NULL);
    return f;
}

static void add_teardown(add_fixture *f)
{
    gm_array_release(&f->a);
    gm_array_release(&f->b);
    gm_array_release(&f->out);
    kt_destroy(&f->ctx);
}

static void test_config_errors(void **state)
{
    add_fixture f = add_setup();
    gm_arg args[] = {gm_arg_array(f.a), gm_arg_array(f.b), gm_arg_array(f.out), gm_arg_i64(100)};

    (void)state;
    assert_ok(gm_launch(f.add, d1(1), d1(100), 0, NULL, 4, args));
    assert_status(gm_launch(f.add, d1(1), d1(2048), 0, NULL, 4, args), GM_ERR_INVALID_ARG);
    assert_message_contains("exceeds the device limit 1024");
    assert_status(gm_launch(f.add, d1(1), gm_dim3_make(64, 32, 1), 0, NULL, 4, args),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("2048 threads; the limit is 1024");
    assert_status(gm_launch(f.add, d1(1), gm_dim3_make(1, 1, 65), 0, NULL, 4, args),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("block extent z = 65");
    assert_status(gm_launch(f.add, d1(1), d1(0), 0, NULL, 4, args), GM_ERR_INVALID_ARG);
    assert_message_contains("block (0,1,1) has a zero extent");
    assert_status(gm_launch(f.add, gm_dim3_make(1, 0, 1), d1(32), 0, NULL, 4, args),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("grid (1,0,1) has a zero extent");
    assert_status(gm_launch(f.add, gm_dim3_make(1, 70000, 1), d1(32), 0, NULL, 4, args),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("grid extent y = 70000");
    assert_status(gm_launch(f.add, d1(1), d1(32), 1 << 20, NULL, 4, args), GM_ERR_INVALID_ARG);
    assert_message_contains("1048576 bytes of dynamic shared memory exceed");
    assert_status(gm_launch(NULL, d1(1), d1(32), 0, NULL, 4, args), GM_ERR_NULL_POINTER);
    add_teardown(&f);
}

static void test_argument_errors(void **state)
{
    add_fixture f = add_setup();
    gm_arg args[] = {gm_arg_array(f.a), gm_arg_array(f.b), gm_arg_array(f.out), gm_arg_i64(100)};
    gm_arg wrong_size[] = {gm_arg_array(f.a), gm_arg_array(f.b), gm_arg_array(f.out),
                           gm_arg_i32(100)};
    gm_arg wrong_kind[] = {gm_arg_array(f.a), gm_arg_array(f.b), gm_arg_array(f.out),
                           gm_arg_f64(100.0)};
    gm_arg float_for_ptr[] = {gm_arg_array(f.a), gm_arg_f64(1.0), gm_arg_array(f.out),
                              gm_arg_i64(100)};
    gm_arg bad_bytes[] = {gm_arg_array(f.a), gm_arg_array(f.b), gm_arg_array(f.out),
                          gm_arg_bytes(NULL, 8)};
    gm_arg bad_type[] = {gm_arg_array(f.a), gm_arg_array(f.b), gm_arg_array(f.out),
                         gm_arg_i64(100)};
    char sig[256];

    (void)state;
    bad_type[3].type = (gm_arg_type)42;
    {
        size_t len = gm_kernel_signature(f.add, sig, sizeof sig);

        assert_int_equal(len, strlen(sig));
        assert_int_equal(gm_kernel_signature(f.add, sig, 8), len);
        assert_string_equal(sig, "add_f32");
        assert_int_equal(gm_kernel_signature(f.add, NULL, 0), len);
        gm_kernel_signature(f.add, sig, sizeof sig);
    }
    assert_string_equal(sig, "add_f32(const float *restrict a, const float *restrict b, float "
                             "*restrict out, int64_t n)");
    assert_status(gm_launch(f.add, d1(1), d1(32), 0, NULL, 3, args), GM_ERR_INVALID_ARG);
    assert_message_contains("takes 4 arguments, 3 were given");
    assert_message_contains("add_f32(const float *restrict a");
    {
        gm_arg five[] = {args[0], args[1], args[2], args[3], gm_arg_i32(1)};

        assert_status(gm_launch(f.add, d1(1), d1(32), 0, NULL, 5, five), GM_ERR_INVALID_ARG);
        assert_message_contains("takes 4 arguments, 5 were given");
    }
    assert_status(gm_launch(f.add, d1(1), d1(32), 0, NULL, 4, wrong_size), GM_ERR_INVALID_ARG);
    assert_message_contains("argument 3 (int64_t n) is 8 bytes, an i32 of 4 bytes was given");
    assert_status(gm_launch(f.add, d1(1), d1(32), 0, NULL, 4, wrong_kind), GM_ERR_INVALID_ARG);
    assert_message_contains("argument 3 (int64_t n) cannot take an f64 value");
    assert_status(gm_launch(f.add, d1(1), d1(32), 0, NULL, 4, float_for_ptr), GM_ERR_INVALID_ARG);
    assert_message_contains("argument 1 (const float *restrict b) cannot take an f64 value");
    assert_status(gm_launch(f.add, d1(1), d1(32), 0, NULL, 4, bad_bytes), GM_ERR_NULL_POINTER);
    assert_status(gm_launch(f.add, d1(1), d1(32), 0, NULL, 4, bad_type), GM_ERR_INVALID_ARG);
    /* a scalar whose size is not its type's (its value is read from the 8-byte union) */
    bad_type[3] = gm_arg_i64(100);
    bad_type[3].size = 104;
    assert_status(gm_launch(f.add, d1(1), d1(32), 0, NULL, 4, bad_type), GM_ERR_INVALID_ARG);
    assert_message_contains("argument 3 has type 3 and size 104");
    bad_type[3].size = 4;
    assert_status(gm_launch(f.add, d1(1), d1(32), 0, NULL, 4, bad_type), GM_ERR_INVALID_ARG);
    assert_message_contains("argument 3 has type 3 and size 4");
    assert_status(gm_launch(f.add, d1(1), d1(32), 0, NULL, -1, args), GM_ERR_INVALID_ARG);
    assert_status(gm_launch(f.add, d1(1), d1(32), 0, NULL, 4, NULL), GM_ERR_NULL_POINTER);
    add_teardown(&f);
}

/* A stream of another context is refused. */
static void test_wrong_context_stream(void **state)
{
    add_fixture f = add_setup();
    gm_context *other = kt_context(32);
    gm_stream *s = NULL;
    gm_arg args[] = {gm_arg_array(f.a), gm_arg_array(f.b), gm_arg_array(f.out), gm_arg_i64(100)};

    (void)state;
    assert_ok(gm_stream_create(other, GM_STREAM_DEFAULT, &s));
    assert_status(gm_launch(f.add, d1(1), d1(32), 0, s, 4, args), GM_ERR_WRONG_CONTEXT);
    gm_stream_destroy(&s);
    kt_destroy(&other);
    add_teardown(&f);
}

static void test_find_and_registry(void **state)
{
    gm_context *ctx = kt_context(32);
    gm_kernel *k = NULL, *k2 = NULL;
    gm_kernel_info info;

    (void)state;
    assert_status(gm_kernel_find(ctx, "no_such_kernel", &k), GM_ERR_NOT_FOUND);
    assert_message_contains("no kernel 'no_such_kernel' for the host backend");
    assert_message_contains("found once gm_register_image_set has registered their set");
    assert_status(gm_kernel_find(NULL, "add_f32", &k), GM_ERR_NULL_POINTER);
    assert_status(gm_kernel_find(ctx, NULL, &k), GM_ERR_NULL_POINTER);
    assert_ok(gm_kernel_find(ctx, "matmul_f32", &k));
    assert_ok(gm_kernel_find(ctx, "matmul_f32", &k2));
    assert_ptr_equal(k, k2);
    assert_ok(gm_kernel_get_info(k, &info));
    assert_string_equal(info.name, "matmul_f32");
    assert_int_equal(info.nparams, 6);
    assert_int_equal(info.max_threads_per_block, 1024);
    assert_int_equal(info.format, GM_IMAGE_FORMAT_HOST);
    /* Malformed sets are refused when registered, not at a later gm_kernel_find. */
    {
        static gm_host_table bad_magic, bad_abi;
        static gm_image_set sets[4];

        bad_magic = kt_test_table;
        bad_magic.magic = 0;
        bad_abi = kt_test_table;
        bad_abi.abi = GM_HOST_KERNEL_ABI + 1;
        sets[0] = (gm_image_set){"bad magic", &bad_magic, NULL, 0, NULL, 0};
        sets[1] = (gm_image_set){"bad abi", &bad_abi, NULL, 0, NULL, 0};
        sets[2] = (gm_image_set){"bad count", &kt_test_table, NULL, 0, NULL, -1};
        sets[3] = (gm_image_set){"cuda size", NULL, NULL, 16, NULL, 0};
        assert_status(gm_register_image_set(&sets[0]), GM_ERR_INVALID_ARG);
        assert_message_contains("gm_register_image_set: set 'bad magic'");
        /* another simulator ABI registers (its GPU images may serve); loading it fails */
        assert_ok(gm_register_image_set(&sets[1]));
        assert_status(gm_kernel_find(ctx, "kt_shift", &k), GM_ERR_VERSION_MISMATCH);
        assert_ok(gm_unregister_image_set(&sets[1]));
        assert_status(gm_register_image_set(&sets[2]), GM_ERR_INVALID_ARG);
        assert_status(gm_register_image_set(&sets[3]), GM_ERR_INVALID_ARG);
        assert_status(gm_unregister_image_set(&sets[0]), GM_ERR_NOT_FOUND); /* not listed */
    }
    {
        /* a kernel without a name: refused, since every later find compares names */
        static gm_host_kernel unnamed;
        static const gm_host_kernel *one[1];
        static gm_host_table table;
        static gm_image_set set;

        unnamed = *kt_test_table.kernels[0];
        unnamed.name = NULL;
        one[0] = &unnamed;
        table = kt_test_table;
        table.nkernels = 1;
        table.kernels = one;
        set = (gm_image_set){"unnamed", &table, NULL, 0, NULL, 0};
        assert_status(gm_register_image_set(&set), GM_ERR_INVALID_ARG);
        assert_message_contains("set 'unnamed': kernel 0 of its host table has a NULL name");
        assert_ok(gm_kernel_find(ctx, "matmul_f32", &k2));
    }
    /* A registered set comes first: its add_f32 replaces the built-in one. */
    assert_ok(gm_register_image_set(&kt_override_set));
    assert_ok(gm_register_image_set(&kt_override_set));
    {
        float a[3] = {5, 6, 7}, b[3] = {1, 2, 3}, out[3];
        gm_array *da = kt_device(ctx, GM_FLOAT32, 3, a), *db = kt_device(ctx, GM_FLOAT32, 3, b);
        gm_array *dout = kt_device(ctx, GM_FLOAT32, 3, NULL);
        gm_arg args[] = {gm_arg_array(da), gm_arg_array(db), gm_arg_array(dout), gm_arg_i64(3)};

        assert_ok(gm_kernel_find(ctx, "add_f32", &k));
        assert_ok(gm_launch(k, d1(1), d1(32), 0, NULL, 4, args));
        kt_to_host(dout, GM_FLOAT32, 3, out);
        assert_true(out[0] == 4.0f && out[1] == 4.0f && out[2] == 4.0f);
        gm_array_release(&da);
        gm_array_release(&db);
        gm_array_release(&dout);
    }
    assert_ok(gm_unregister_image_set(&kt_override_set));
    assert_status(gm_unregister_image_set(&kt_override_set), GM_ERR_NOT_FOUND);
    kt_destroy(&ctx);
}

static void test_modules(void **state)
{
    gm_context *ctx = kt_context(32);
    gm_module *m = NULL, *owned = NULL;
    gm_kernel *k = NULL;
    void *addr = NULL;
    size_t bytes = 0;
    const int32_t values[4] = {10, 20, 30, 40};
    int32_t out[10];
    gm_array *dout = kt_device(ctx, GM_INT32, 10, NULL);
    gm_dealloc_stats stats;

    (void)state;
    assert_ok(
        gm_module_load_image(ctx, GM_IMAGE_FORMAT_AUTO, &kt_test_table, sizeof kt_test_table, &m));
    assert_ok(gm_module_get_kernel(m, "kt_read_const", &k));
    assert_ptr_equal(gm_kernel_module(k), m);
    assert_status(gm_module_get_kernel(m, "nope", &k), GM_ERR_NOT_FOUND);
    assert_message_contains("no kernel 'nope' in module");
    assert_ok(gm_module_get_kernel(m, "kt_read_const", &k));
    assert_ok(gm_module_get_global(m, "kt_const", &addr, &bytes));
    assert_int_equal(bytes, 16);
    assert_status(gm_module_get_global(m, "nope", &addr, &bytes), GM_ERR_NOT_FOUND);
    assert_ok(gm_module_set_constant(m, "kt_const", values, sizeof values));
    assert_status(gm_module_set_constant(m, "kt_const", values, 17), GM_ERR_OUT_OF_RANGE);
    assert_status(gm_module_set_constant(m, "nope", values, 4), GM_ERR_NOT_FOUND);
    {
        gm_arg args[] = {gm_arg_array(dout), gm_arg_i64(10)};

        assert_ok(gm_launch(k, d1(1), d1(64), 0, NULL, 2, args));
    }
    kt_to_host(dout, GM_INT32, 10, out);
    for (int i = 0; i < 10; i++)
        assert_int_equal(out[i], values[i % 4]);
    /* Unloading goes through the deallocation queue. */
    assert_ok(gm_deallocations_stats(ctx, &stats));
    assert_ok(gm_defer_cleanup_begin(ctx));
    gm_module_unload(&m);
    assert_null(m);
    gm_module_unload(&m);
    gm_module_unload(NULL);
    {
        gm_dealloc_stats after;

        assert_ok(gm_deallocations_stats(ctx, &after));
        assert_int_equal(after.pending_count, stats.pending_count + 1);
    }
    assert_ok(gm_defer_cleanup_end(ctx));
    assert_ok(gm_deallocations_flush(ctx));
    /* Modules of the registry belong to the context: unload leaves them. */
    assert_ok(gm_kernel_find(ctx, "fill_f32", &k));
    owned = gm_kernel_module(k);
    gm_module_unload(&owned);
    assert_ok(gm_kernel_find(ctx, "fill_f32", &k));
    gm_array_release(&dout);
    kt_destroy(&ctx);
}

/*
 * The address gm_module_get_global gives is device memory of the context while the module
 * is loaded, as cuModuleGetGlobal's is: gm_copy takes it as a device side (synchronous and
 * on a stream), gm_pointer_kind calls it device memory, a launch reads what was copied in;
 * once the module is unloaded (and the queue flushed) it is no longer the context's.
 */
static void test_global_is_device_memory(void **state)
{
    gm_context *ctx = kt_context(32);
    gm_module *m = NULL;
    gm_kernel *k = NULL;
    gm_stream *stream = NULL;
    void *addr = NULL;
    size_t bytes = 0;
    int64_t four = 4, two = 2;
    const int32_t values[4] = {-5, 6, -7, 8};
    int32_t back[4] = {0, 0, 0, 0}, out[8];
    gm_array *dout = kt_device(ctx, GM_INT32, 8, NULL);
    gm_memory_kind kind = GM_MEMORY_HOST;
    gm_ndview global, host, part;

    (void)state;
    assert_ok(
        gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, &kt_test_table, sizeof kt_test_table, &m));
    assert_ok(gm_module_get_kernel(m, "kt_read_const", &k));
    assert_ok(gm_module_get_global(m, "kt_const", &addr, &bytes));
    assert_int_equal(bytes, sizeof values);
    assert_ok(gm_pointer_kind(ctx, addr, &kind));
    assert_int_equal(kind, GM_MEMORY_DEVICE);
    assert_ok(gm_ndview_init(addr, GM_INT32, 1, &four, NULL, GM_ORDER_C, &global));
    global.memory = GM_MEMORY_DEVICE;
    global.device_id = 0;
    assert_ok(gm_ndview_init((void *)values, GM_INT32, 1, &four, NULL, GM_ORDER_C, &host));
    assert_ok(gm_copy(ctx, &global, &host, NULL));
    {
        gm_arg args[] = {gm_arg_array(dout), gm_arg_i64(8)};

        assert_ok(gm_launch(k, d1(1), d1(64), 0, NULL, 2, args));
    }
    kt_to_host(dout, GM_INT32, 8, out);
    for (int i = 0; i < 8; i++)
        assert_int_equal(out[i], values[i % 4]);
    assert_ok(gm_stream_create(ctx, 0, &stream));
    assert_ok(gm_ndview_init(back, GM_INT32, 1, &four, NULL, GM_ORDER_C, &host));
    assert_ok(gm_copy(ctx, &host, &global, stream));
    assert_ok(gm_stream_synchronize(stream));
    assert_memory_equal(back, values, sizeof values);
    /* a range that runs past the global is not inside it */
    part = global;
    part.offset = 3 * (int64_t)sizeof(int32_t);
    part.shape[0] = two;
    assert_ok(gm_ndview_init(back, GM_INT32, 1, &two, NULL, GM_ORDER_C, &host));
    assert_status(gm_copy(ctx, &part, &host, NULL), GM_ERR_INVALID_ARG);
    gm_stream_destroy(&stream);
    gm_module_unload(&m);
    assert_ok(gm_deallocations_flush(ctx));
    assert_ok(gm_pointer_kind(ctx, addr, &kind));
    assert_int_equal(kind, GM_MEMORY_HOST);
    assert_ok(gm_ndview_init((void *)values, GM_INT32, 1, &four, NULL, GM_ORDER_C, &host));
    assert_status(gm_copy(ctx, &global, &host, NULL), GM_ERR_INVALID_ARG);
    gm_array_release(&dout);
    kt_destroy(&ctx);
}

static void test_module_errors(void **state)
{
    gm_context *ctx = kt_context(32);
    gm_module *m = NULL;
    static const unsigned char fatbin[16] = {0x50, 0xed, 0x55, 0xba, 1, 0, 0x10, 0};
    static const char ptx[] = "//\n.version 8.0\n.target sm_75\n";
    unsigned char elf_amd[64];
    gm_host_table bad = kt_test_table;
    char path[] = "/tmp/gm_kernels_test_XXXXXX";
    FILE *f = NULL;
    int fd = -1;

    (void)state;
    memset(elf_amd, 0, sizeof elf_amd);
    memcpy(elf_amd, "\177ELF", 4);
    elf_amd[18] = 224;
    assert_status(gm_module_load_image(ctx, GM_IMAGE_FORMAT_AUTO, fatbin, sizeof fatbin, &m),
                  GM_ERR_UNSUPPORTED);
    assert_message_contains("the host backend runs host kernel table images, not CUDA");
    assert_status(gm_module_load_image(ctx, GM_IMAGE_FORMAT_AUTO, ptx, sizeof ptx, &m),
                  GM_ERR_UNSUPPORTED);
    assert_status(gm_module_load_image(ctx, GM_IMAGE_FORMAT_AUTO, elf_amd, sizeof elf_amd, &m),
                  GM_ERR_UNSUPPORTED);
    assert_message_contains("not AMDGPU");
    assert_status(gm_module_load_image(ctx, GM_IMAGE_FORMAT_AUTO, "garbage!", 8, &m),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("unrecognized image");
    bad.magic = 0;
    assert_status(gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, &bad, sizeof bad, &m),
                  GM_ERR_INVALID_ARG);
    bad.magic = GM_HOST_TABLE_MAGIC;
    bad.abi = 99;
    assert_status(gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, &bad, sizeof bad, &m),
                  GM_ERR_VERSION_MISMATCH);
    assert_message_contains("gm_module_load_image: module_load: host kernel table built for "
                            "simulator ABI 99");
    {
        /* a kernel entry without a block function or a name is malformed, not another ABI */
        gm_host_kernel broken = *kt_test_table.kernels[0];
        const gm_host_kernel *const one[] = {&broken};

        bad = kt_test_table;
        bad.nkernels = 1;
        bad.kernels = one;
        broken.block_fn = NULL;
        assert_status(gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, &bad, sizeof bad, &m),
                      GM_ERR_INVALID_ARG);
        assert_message_contains("kernel 0 of the host table is malformed: its block function");
        broken = *kt_test_table.kernels[0];
        broken.name = NULL;
        assert_status(gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, &bad, sizeof bad, &m),
                      GM_ERR_INVALID_ARG);
        assert_message_contains("its name is NULL");
        broken = *kt_test_table.kernels[0];
        broken.nparams = -1;
        assert_status(gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, &bad, sizeof bad, &m),
                      GM_ERR_INVALID_ARG);
        assert_message_contains("has -1 parameters");
        broken = *kt_test_table.kernels[0];
        if (broken.nparams > 0) { /* a NULL declaration would reach a "%s" in a signature */
            const char *decls[16] = {NULL};

            assert_true(broken.nparams <= 16);
            for (int i = 1; i < broken.nparams; i++)
                decls[i] = broken.param_decls[i];
            broken.param_decls = decls;
            assert_status(gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, &bad, sizeof bad, &m),
                          GM_ERR_INVALID_ARG);
            assert_message_contains("its parameter declaration 0 is NULL");
        }
        broken = *kt_test_table.kernels[0];
        broken.abi = 7;
        assert_status(gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, &bad, sizeof bad, &m),
                      GM_ERR_VERSION_MISMATCH);
        bad = kt_test_table;
    }
    {
        /* a global without a name (its lookups compare names) or without storage */
        static float storage[4];
        gm_host_global g = {NULL, storage, sizeof storage};
        const gm_host_global *const globals[] = {&g};

        bad = kt_test_table;
        bad.nglobals = 1;
        bad.globals = globals;
        assert_status(gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, &bad, sizeof bad, &m),
                      GM_ERR_INVALID_ARG);
        assert_message_contains("global 0 of the host table is malformed: its name is NULL");
        g.name = "coeffs";
        g.address = NULL;
        assert_status(gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, &bad, sizeof bad, &m),
                      GM_ERR_INVALID_ARG);
        assert_message_contains("its address is NULL");
        bad = kt_test_table;
    }
    assert_status(gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, NULL, 0, &m),
                  GM_ERR_NULL_POINTER);
    assert_status(gm_module_load_image(NULL, GM_IMAGE_FORMAT_HOST, &bad, sizeof bad, &m),
                  GM_ERR_NULL_POINTER);
    assert_status(gm_module_load_file(ctx, GM_IMAGE_FORMAT_AUTO, "/nonexistent/k.fatbin", &m),
                  GM_ERR_NOT_FOUND);
    assert_message_contains("/nonexistent/k.fatbin");
    /* a directory opens, but is no image (its size reads as LONG_MAX) */
    assert_status(gm_module_load_file(ctx, GM_IMAGE_FORMAT_AUTO, "/tmp", &m), GM_ERR_NOT_FOUND);
    assert_message_contains("not a regular file");
    fd = mkstemp(path);
    assert_true(fd >= 0);
    f = fdopen(fd, "wb");
    assert_non_null(f);
    fwrite(ptx, 1, sizeof ptx - 1, f);
    fclose(f);
    assert_status(gm_module_load_file(ctx, GM_IMAGE_FORMAT_AUTO, path, &m), GM_ERR_UNSUPPORTED);
    assert_status(gm_module_load_file(ctx, GM_IMAGE_FORMAT_HOST, path, &m), GM_ERR_INVALID_ARG);
    remove(path);
    assert_null(m);
    kt_destroy(&ctx);
}

/* Twenty kernels in one host table: every one is listed and runs. */
static void test_many_kernels_table(void **state)
{
    gm_context *ctx = kt_context(32);
    gm_module *m = NULL;
    gm_kernel *k = NULL;
    gm_array *out = kt_device(ctx, GM_INT32, 1, NULL);
    gm_arg args[1] = {gm_arg_array(out)};
    int32_t got = -1;

    (void)state;
    assert_int_equal(kt_many_table.nkernels, 20);
    assert_ok(
        gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, &kt_many_table, sizeof kt_many_table, &m));
    assert_ok(gm_module_get_kernel(m, "kt_many_19", &k));
    assert_ok(gm_launch(k, d1(1), d1(1), 0, NULL, 1, args));
    kt_to_host(out, GM_INT32, 1, &got);
    assert_int_equal(got, 19);
    assert_ok(gm_module_get_kernel(m, "kt_many_0", &k));
    assert_ok(gm_launch(k, d1(1), d1(1), 0, NULL, 1, args));
    kt_to_host(out, GM_INT32, 1, &got);
    assert_int_equal(got, 0);
    gm_array_release(&out);
    gm_module_unload(&m);
    kt_destroy(&ctx);
}

/*
 * Parameter kinds come from the type words: a typedef the library cannot see
 * through (a pointer or a double behind a name) is checked by size only, so
 * the right arguments launch; C integer words, several of them included, are
 * integers.
 */
static void test_typedef_parameters(void **state)
{
    gm_context *ctx = kt_context(32);
    gm_module *m = NULL;
    gm_kernel *k = NULL;
    float host[4] = {1, 2, 3, 4}, out[4];
    gm_array *x = kt_device(ctx, GM_FLOAT32, 4, host);

    (void)state;
    assert_ok(gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, &kt_typedef_table,
                                   sizeof kt_typedef_table, &m));
    assert_ok(gm_module_get_kernel(m, "kt_scale_typedefs", &k));
    {
        gm_arg args[4] = {gm_arg_array(x), gm_arg_f64(2.0), gm_arg_i64(4), gm_arg_u64(1)};
        gm_arg wrong_size[4] = {gm_arg_array(x), gm_arg_f32(2.0f), gm_arg_i64(4), gm_arg_u64(1)};
        gm_arg float_for_int[4] = {gm_arg_array(x), gm_arg_f64(2.0), gm_arg_i64(4),
                                   gm_arg_f64(1.0)};

        assert_ok(gm_launch(k, d1(1), d1(32), 0, NULL, 4, args));
        kt_to_host(x, GM_FLOAT32, 4, out);
        for (int i = 0; i < 4; i++)
            assert_true(out[i] == 2.0f * host[i] + 1.0f);
        assert_status(gm_launch(k, d1(1), d1(32), 0, NULL, 4, wrong_size), GM_ERR_INVALID_ARG);
        assert_message_contains("argument 1 (kt_real factor) is 8 bytes, an f32 of 4 bytes");
        assert_status(gm_launch(k, d1(1), d1(32), 0, NULL, 4, float_for_int), GM_ERR_INVALID_ARG);
        assert_message_contains("argument 3 (unsigned long tag) cannot take an f64 value");
    }
    gm_array_release(&x);
    gm_module_unload(&m);
    gm_context_destroy(&ctx);
}

/*
 * Parameters spelled double and float take only f64 and f32 values (or raw
 * bytes of their size); mixed sizes reach the kernel intact.
 */
static void test_scalar_parameters(void **state)
{
    gm_context *ctx = kt_context(32);
    gm_module *m = NULL;
    gm_kernel *k = NULL;
    gm_array *out = kt_device(ctx, GM_FLOAT64, 1, NULL);
    double got = 0;
    int16_t s = -300;
    gm_arg args[7] = {gm_arg_array(out),     gm_arg_bytes(&(int8_t){-5}, 1),
                      gm_arg_f64(0.25),      gm_arg_bytes(&s, 2),
                      gm_arg_f32(0.5f),      gm_arg_i32(-70000),
                      gm_arg_u64(1ull << 40)};

    (void)state;
    assert_ok(gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, &kt_typedef_table,
                                   sizeof kt_typedef_table, &m));
    assert_ok(gm_module_get_kernel(m, "kt_mixed_scalars", &k));
    assert_ok(gm_launch(k, d1(1), d1(1), 0, NULL, 7, args));
    kt_to_host(out, GM_FLOAT64, 1, &got);
    assert_true(got == -5.0 + 0.25 - 300.0 + 0.5 - 70000.0 + 1099511627776.0);
    args[2] = gm_arg_i64(1);
    assert_status(gm_launch(k, d1(1), d1(1), 0, NULL, 7, args), GM_ERR_INVALID_ARG);
    assert_message_contains("argument 2 (double x) cannot take an i64 value");
    args[2] = gm_arg_f32(1.0f);
    assert_status(gm_launch(k, d1(1), d1(1), 0, NULL, 7, args), GM_ERR_INVALID_ARG);
    assert_message_contains("argument 2 (double x) is 8 bytes, an f32 of 4 bytes");
    args[2] = gm_arg_f64(0.25);
    args[4] = gm_arg_f64(0.5);
    assert_status(gm_launch(k, d1(1), d1(1), 0, NULL, 7, args), GM_ERR_INVALID_ARG);
    assert_message_contains("argument 4 (float f) is 4 bytes, an f64 of 8 bytes");
    args[4] = gm_arg_u32(1);
    assert_status(gm_launch(k, d1(1), d1(1), 0, NULL, 7, args), GM_ERR_INVALID_ARG);
    assert_message_contains("argument 4 (float f) cannot take a u32 value");
    gm_array_release(&out);
    gm_module_unload(&m);
    gm_context_destroy(&ctx);
}

/*
 * A set unregistered, then another registered at the same address (reused
 * storage, a reloaded plugin): the context's module of the first is not
 * taken for the second's.
 */
static void test_set_at_reused_address(void **state)
{
    static gm_image_set storage;
    gm_context *ctx = kt_context(32);
    gm_kernel *k = NULL;
    gm_kernel_info info;

    (void)state;
    storage = (gm_image_set){"typedef kernels", &kt_typedef_table, NULL, 0, NULL, 0};
    assert_ok(gm_register_image_set(&storage));
    assert_ok(gm_kernel_find(ctx, "kt_scale_typedefs", &k));
    assert_ok(gm_unregister_image_set(&storage));
    storage = (gm_image_set){"kernel tests again", &kt_test_table, NULL, 0, NULL, 0};
    assert_ok(gm_register_image_set(&storage));
    assert_ok(gm_kernel_find(ctx, "kt_read_const", &k));
    assert_ok(gm_kernel_get_info(k, &info));
    assert_string_equal(info.name, "kt_read_const");
    assert_ok(gm_unregister_image_set(&storage));
    gm_context_destroy(&ctx);
}

/* Warnings the library logged, for test_host_pointer_warning. */
static int warnings;
static char last_warning[512];

static void count_warnings(gm_log_level level, const char *message, void *user)
{
    (void)user;
    if (level == GM_LOG_WARN) {
        warnings++;
        snprintf(last_warning, sizeof(last_warning), "%s", message);
    }
}

/* On another thread: a kernel that fails (barrier divergence) on the per-thread stream. */
typedef struct diverge_job {
    gm_context *ctx;
    gm_array *out;
    gm_status status;
} diverge_job;

static void *diverge_on_per_thread(void *arg)
{
    diverge_job *job = arg;
    gm_arg early[] = {gm_arg_array(job->out), gm_arg_i32(7), gm_arg_i32(1)};

    job->status = gm_launch(kt_kernel(job->ctx, "kt_early_return"), d1(2), d1(128), 0,
                            gm_per_thread_default_stream(job->ctx), 3, early);
    return NULL;
}

/*
 * An error another thread's per-thread stream still holds is logged when the
 * stream goes: after the thread's exit once its work is done (on the
 * stream's worker), or at the latest by the backend's teardown. The hook is
 * in place before the thread starts; the teardown joins the worker that may
 * log.
 */
static void test_teardown_reports_per_thread_errors(void **state)
{
    diverge_job job = {NULL, NULL, GM_ERR_INTERNAL};
    pthread_t thread;

    (void)state;
    assert_ok(gm_set_host_allocator(NULL)); /* the other thread allocates */
    job.ctx = kt_context(64);
    assert_non_null(gm_per_thread_default_stream(job.ctx)); /* this thread's first */
    job.out = kt_device(job.ctx, GM_INT32, 256, NULL);
    warnings = 0;
    gm_set_log_hook(count_warnings, NULL);
    assert_int_equal(pthread_create(&thread, NULL, diverge_on_per_thread, &job), 0);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_ok(job.status);
    gm_array_release(&job.out);
    kt_destroy(&job.ctx);
    gm_set_log_hook(NULL, NULL);
    assert_true(warnings >= 1);
    assert_non_null(strstr(last_warning, "unreported error"));
    assert_non_null(strstr(last_warning, "kt_early_return"));
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/*
 * The simulator runs a kernel on plain host memory, where a GPU would fault:
 * it warns once per kernel, naming the argument; device memory, and NULL,
 * give no warning.
 */
/*
 * An image set may go once unregistered (launch.h): a set and its host table
 * in a page made unreadable after gm_unregister_image_set, while the context
 * still holds the module of a kernel found in it. Launches of other kernels
 * (whose host-pointer check looks through the context's modules' constant
 * arrays) and the context's teardown must not read it (they did: SIGSEGV,
 * an ASan use after free for a freed set).
 */
static void test_unregistered_set_not_read(void **state)
{
    gm_context *ctx = kt_context(32);
    gm_kernel *found = NULL, *add = kt_kernel(ctx, "add_f32");
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *mem =
        mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    gm_host_table *table = (gm_host_table *)(void *)mem;
    gm_image_set *set = (gm_image_set *)(void *)(mem + 512);
    float *host = calloc(64, sizeof(float));
    gm_array *da = kt_device(ctx, GM_FLOAT32, 64, NULL);

    (void)state;
    assert_true(mem != MAP_FAILED);
    assert_non_null(host);
    *table = kt_test_table;
    *set = (gm_image_set){"unreadable after unregistering", table, NULL, 0, NULL, 0};
    assert_ok(gm_register_image_set(set));
    assert_ok(gm_kernel_find(ctx, "kt_read_const", &found));
    assert_ok(gm_unregister_image_set(set));
    assert_int_equal(mprotect(mem, (size_t)page, PROT_NONE), 0);
    {
        gm_arg args[4] = {gm_arg_array(da), gm_arg_ptr(host), gm_arg_array(da), gm_arg_i64(64)};

        assert_ok(gm_launch(add, d1(1), d1(64), 0, NULL, 4, args)); /* checks `host` */
    }
    gm_array_release(&da);
    gm_context_destroy(&ctx);
    assert_int_equal(munmap(mem, (size_t)page), 0);
    free(host);
}

static void test_host_pointer_warning(void **state)
{
    gm_context *ctx = kt_context(32);
    gm_kernel *add = kt_kernel(ctx, "add_f32");
    float *a = calloc(64, sizeof(float)), *out = calloc(64, sizeof(float));
    gm_array *da = kt_device(ctx, GM_FLOAT32, 64, NULL),
             *dout = kt_device(ctx, GM_FLOAT32, 64, NULL);

    (void)state;
    assert_non_null(a);
    assert_non_null(out);
    gm_set_log_hook(count_warnings, NULL);
    warnings = 0;
    {
        gm_arg device[4] = {gm_arg_array(da), gm_arg_array(da), gm_arg_array(dout), gm_arg_i64(64)};
        gm_arg host[4] = {gm_arg_array(da), gm_arg_ptr(a), gm_arg_array(dout), gm_arg_i64(64)};
        gm_arg host_out[4] = {gm_arg_array(da), gm_arg_array(da), gm_arg_ptr(out), gm_arg_i64(64)};

        assert_ok(gm_launch(add, d1(1), d1(64), 0, NULL, 4, device));
        assert_int_equal(warnings, 0);
        /* memory the context knows without allocating it: a foreign array, a constant array */
        {
            int64_t n64 = 64;
            gm_ndview fv;
            gm_array *foreign = NULL;
            gm_module *m = NULL;
            void *global = NULL;
            size_t bytes = 0;

            assert_ok(gm_ndview_init(a, GM_FLOAT32, 1, &n64, NULL, GM_ORDER_C, &fv));
            fv.memory = GM_MEMORY_DEVICE;
            assert_ok(gm_array_from_foreign(ctx, &fv, NULL, NULL, NULL, &foreign));
            assert_ok(gm_module_load_image(ctx, GM_IMAGE_FORMAT_HOST, &kt_test_table,
                                           sizeof kt_test_table, &m));
            assert_ok(gm_module_get_global(m, "kt_const", &global, &bytes));
            {
                gm_arg known[4] = {gm_arg_array(foreign), gm_arg_ptr(global), gm_arg_array(dout),
                                   gm_arg_i64(4)};

                assert_ok(gm_launch(add, d1(1), d1(64), 0, NULL, 4, known));
                assert_int_equal(warnings, 0);
            }
            gm_module_unload(&m);
            gm_array_release(&foreign);
        }
        assert_ok(gm_launch(add, d1(1), d1(64), 0, NULL, 4, host)); /* runs all the same */
        assert_int_equal(warnings, 1);
        assert_non_null(strstr(last_warning, "kernel 'add_f32': argument 1 (const float "
                                             "*restrict b)"));
        assert_non_null(strstr(last_warning, "a GPU would fault"));
        assert_ok(gm_launch(add, d1(1), d1(64), 0, NULL, 4, host_out));
        assert_int_equal(warnings, 1); /* once per kernel */
    }
    gm_set_log_hook(NULL, NULL);
    gm_array_release(&da);
    gm_array_release(&dout);
    kt_destroy(&ctx);
    free(a);
    free(out);
}

/* A callback that holds its stream for a while. */
static void slow_callback(gm_stream *stream, gm_status status, void *user)
{
    struct timespec pause = {0, 80 * 1000 * 1000};

    (void)stream;
    (void)status;
    (void)user;
    nanosleep(&pause, NULL);
}

/* A callback that holds its stream until *user is set. */
static void held_callback(gm_stream *stream, gm_status status, void *user)
{
    struct timespec tick = {0, 1000 * 1000};

    (void)stream;
    (void)status;
    while (atomic_load((atomic_int *)user) == 0)
        nanosleep(&tick, NULL);
}

/* Set *arg after 100 ms. */
static void *release_later(void *arg)
{
    struct timespec pause = {0, 100 * 1000 * 1000};

    nanosleep(&pause, NULL);
    atomic_store((atomic_int *)arg, 1);
    return NULL;
}

/*
 * A smart array used by launches on two non-blocking streams: its next
 * transfer waits for both, not only for the last one (a host write sent to
 * the device must not overwrite what the first kernel has still to read).
 */
static void test_smart_array_two_streams(void **state)
{
    enum { N = 64 };
    gm_context *ctx = kt_context(32);
    gm_kernel *add = NULL;
    gm_smart_array *x = NULL, *o1 = NULL, *o2 = NULL;
    gm_stream *s1 = NULL, *s2 = NULL;
    gm_ndview hv, got;
    atomic_int released;
    pthread_t thread;
    float host[N];
    int64_t n = N;

    (void)state;
    atomic_init(&released, 0);
    for (int i = 0; i < N; i++)
        host[i] = 1.0f;
    assert_ok(gm_kernel_find(ctx, "add_f32", &add));
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_smart_array_from_host(ctx, &hv, true, &x));
    assert_ok(gm_smart_array_create(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, GM_WHERE_DEVICE, &o1));
    assert_ok(gm_smart_array_create(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, GM_WHERE_DEVICE, &o2));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s1));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s2));
    assert_ok(gm_stream_add_callback(s1, held_callback, &released));
    {
        gm_arg a1[] = {gm_arg_smart(x), gm_arg_smart(x), gm_arg_smart(o1), gm_arg_i64(N)};
        gm_arg a2[] = {gm_arg_smart(x), gm_arg_smart(x), gm_arg_smart(o2), gm_arg_i64(N)};

        assert_ok(gm_launch(add, d1(1), d1(64), 0, s1, 4, a1)); /* held back */
        assert_ok(gm_launch(add, d1(1), d1(64), 0, s2, 4, a2));
        assert_int_equal(pthread_create(&thread, NULL, release_later, &released), 0);
        assert_ok(gm_smart_array_get(x, GM_WHERE_HOST, &got));
        assert_int_equal(atomic_load(&released), 1); /* the get waited for s1's launch too */
        for (int i = 0; i < N; i++)
            ((float *)got.data)[i] = 100.0f;
        assert_ok(gm_smart_array_mark_changed(x, GM_WHERE_HOST));
        assert_ok(gm_launch(add, d1(1), d1(64), 0, s2, 4, a2));
    }
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_ok(gm_smart_array_get(o1, GM_WHERE_HOST, &got));
    assert_true(((const float *)got.data)[0] == 2.0f); /* s1's kernel read x before the write */
    assert_ok(gm_smart_array_get(o2, GM_WHERE_HOST, &got));
    assert_true(((const float *)got.data)[0] == 200.0f);
    gm_smart_array_destroy(&o2);
    gm_smart_array_destroy(&o1);
    gm_smart_array_destroy(&x);
    gm_stream_destroy(&s2);
    gm_stream_destroy(&s1);
    kt_destroy(&ctx);
}

/*
 * Smart arrays as kernel arguments (Numba's SmartArray passed to a kernel):
 * the device side is filled only when the host side is newer, the kernel's
 * result stays on the device until the host side is asked for, and that
 * waits for a launch on a stream.
 */
static void test_smart_array_arguments(void **state)
{
    enum { N = 100 };
    gm_context *ctx = kt_context(32), *other = kt_context(32);
    gm_kernel *add = NULL, *fill = NULL;
    gm_smart_array *x = NULL, *out = NULL, *foreign = NULL;
    gm_smart_stats st;
    gm_stream *s = NULL;
    gm_ndview hv, got;
    float host[N];
    int64_t n = N;

    (void)state;
    for (int i = 0; i < N; i++)
        host[i] = (float)i;
    assert_ok(gm_kernel_find(ctx, "add_f32", &add));
    assert_ok(gm_kernel_find(ctx, "fill_f32", &fill));
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_smart_array_from_host(ctx, &hv, true, &x));
    assert_ok(gm_smart_array_create(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, GM_WHERE_HOST, &out));
    {
        gm_arg args[] = {gm_arg_smart(x), gm_arg_smart(x), gm_arg_smart(out), gm_arg_i64(N)};

        /* out = x + x: x goes to the device once, out's result stays there */
        assert_ok(gm_launch(add, d1(1), d1(128), 0, NULL, 4, args));
        assert_ok(gm_smart_array_stats(x, &st));
        assert_int_equal(st.to_device, 1);
        assert_ok(gm_smart_array_stats(out, &st));
        assert_true(st.device_valid && !st.host_valid);
        assert_ok(gm_smart_array_get(out, GM_WHERE_HOST, &got));
        for (int i = 0; i < N; i++)
            assert_true(((const float *)got.data)[i] == 2.0f * (float)i);
        assert_ok(gm_launch(add, d1(1), d1(128), 0, NULL, 4, args)); /* nothing moves again */
        assert_ok(gm_smart_array_stats(x, &st));
        assert_int_equal(st.to_device, 1);
        assert_int_equal(st.to_host, 0);

        /* a host write, marked: the next launch sends it */
        assert_ok(gm_smart_array_get(x, GM_WHERE_HOST, &got)); /* the kernel may have written x */
        ((float *)got.data)[7] = 1000.0f;
        assert_ok(gm_smart_array_mark_changed(x, GM_WHERE_HOST));
        assert_ok(gm_launch(add, d1(1), d1(128), 0, NULL, 4, args));
        assert_ok(gm_smart_array_stats(x, &st));
        assert_int_equal(st.to_device, 2);
        assert_ok(gm_smart_array_get(out, GM_WHERE_HOST, &got));
        assert_true(((const float *)got.data)[7] == 2000.0f);
        assert_true(((const float *)got.data)[8] == 16.0f);
    }
    {
        /* on a stream held back by a slow callback: the host side waits for the kernel */
        gm_arg args[] = {gm_arg_smart(out), gm_arg_f32(-3.0f), gm_arg_i64(N)};

        assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s));
        assert_ok(gm_stream_add_callback(s, slow_callback, NULL));
        assert_ok(gm_launch(fill, d1(1), d1(128), 0, s, 3, args));
        assert_ok(gm_smart_array_get(out, GM_WHERE_HOST, &got));
        for (int i = 0; i < N; i++)
            assert_true(((const float *)got.data)[i] == -3.0f);
        assert_ok(gm_stream_query(s)); /* the get waited for the launch */
    }
    {
        /* bad arguments: nothing is launched, nothing moves */
        gm_arg null_sa[] = {gm_arg_smart(NULL), gm_arg_f32(1.0f), gm_arg_i64(N)};
        gm_arg scalar[] = {gm_arg_smart(out), gm_arg_smart(out), gm_arg_i64(N)};
        gm_arg wrong[] = {gm_arg_smart(foreign), gm_arg_f32(1.0f), gm_arg_i64(N)};

        assert_status(gm_launch(fill, d1(1), d1(128), 0, NULL, 3, null_sa), GM_ERR_NULL_POINTER);
        assert_message_contains("argument 0: the smart array is NULL");
        assert_status(gm_launch(fill, d1(1), d1(128), 0, NULL, 3, scalar), GM_ERR_INVALID_ARG);
        assert_message_contains("argument 1 (float value) is 4 bytes, a smart array of");
        scalar[1] = gm_arg_f32(1.0f);
        scalar[2] = gm_arg_smart(out); /* int64_t n: the right size, the wrong kind */
        assert_status(gm_launch(fill, d1(1), d1(128), 0, NULL, 3, scalar), GM_ERR_INVALID_ARG);
        assert_message_contains("argument 2 (int64_t n) cannot take a smart array value");
        assert_ok(
            gm_smart_array_create(other, 1, &n, GM_FLOAT32, GM_ORDER_C, GM_WHERE_DEVICE, &foreign));
        wrong[0] = gm_arg_smart(foreign);
        assert_status(gm_launch(fill, d1(1), d1(128), 0, NULL, 3, wrong), GM_ERR_WRONG_CONTEXT);
        assert_message_contains("argument 0: the smart array belongs to another context");
        assert_ok(gm_smart_array_stats(out, &st));
        assert_true(st.host_valid); /* the refused launches changed nothing */
    }
    gm_smart_array_destroy(&foreign);
    gm_smart_array_destroy(&out);
    gm_smart_array_destroy(&x);
    gm_stream_destroy(&s);
    kt_destroy(&other);
    kt_destroy(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_argument_errors),
        cmocka_unit_test(test_wrong_context_stream),
        cmocka_unit_test(test_find_and_registry),
        cmocka_unit_test(test_many_kernels_table),
        cmocka_unit_test(test_modules),
        cmocka_unit_test(test_module_errors),
        cmocka_unit_test(test_global_is_device_memory),
        cmocka_unit_test(test_typedef_parameters),
        cmocka_unit_test(test_scalar_parameters),
        cmocka_unit_test(test_set_at_reused_address),
        cmocka_unit_test(test_host_pointer_warning),
        cmocka_unit_test(test_unregistered_set_not_read),
        cmocka_unit_test(test_teardown_reports_per_thread_errors),
        cmocka_unit_test(test_smart_array_arguments),
        cmocka_unit_test(test_smart_array_two_streams),
    };

    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
