/*
 * The library's own kernels on the HSA backend, end to end on the runtime
 * double: gm_kernel_find picks the embedded clang-built AMDGPU code object
 * for the double's GPU (gfx90a, or gfx1100 with 32-wide wavefronts), the
 * backend loads it (reader -> executable -> load -> freeze) and dispatches
 * AQL packets, and the double runs each dispatch on the simulator's
 * host-compiled kernel of the same name with the packet's geometry and the
 * arguments it decodes from the kernarg segment. Results are compared with
 * plain C loops; the packets and kernarg bytes with what the test passed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hsa_internal.h"
#include "hsa_test_util.h"
#include "kernels_internal.h"
#include "runtime_internal.h"

static gm_context *open_context(const char *arch)
{
    hsa_double_config cfg;
    gm_context_options opts;
    gm_context *ctx = NULL;

    hsa_double_config_default(&cfg);
    cfg.gpu_arch = arch;
    hsa_double_reset(&cfg);
    gm_context_options_default(&opts);
    assert_ok(gm__context_create_with_ops(&gm__hsa_backend, &opts, &ctx));
    return ctx;
}

static void close_context(gm_context *ctx)
{
    gm_context_destroy(&ctx);
    hsa_test_assert_nothing_live();
    hsa_test_assert_no_violations();
}

/* The built-in kernel `name`, skipping the test when the build embeds no AMDGPU code. */
static gm_kernel *find_or_skip(gm_context *ctx, const char *name)
{
    gm_kernel *k = NULL;
    gm_status st = gm_kernel_find(ctx, name, &k);

    if (st == GM_ERR_NOT_FOUND) {
        print_message("no AMDGPU image of %s in this build: %s\n", name, gm_last_error_message());
        gm_context_destroy(&ctx);
        skip();
    }
    assert_ok(st);
    return k;
}

static gm_array *upload(gm_context *ctx, const float *data, int64_t n)
{
    gm_ndview v;
    gm_array *a = NULL;

    assert_ok(gm_ndview_init((void *)(uintptr_t)data, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &v));
    assert_ok(gm_to_device(ctx, &v, NULL, &a));
    return a;
}

static void download(gm_array *a, float *data, int64_t n)
{
    gm_ndview v;

    assert_ok(gm_ndview_init(data, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &v));
    assert_ok(gm_array_copy_to_host(a, &v, NULL));
}

/* The last dispatch packet the double processed. */
static hsa_double_packet last_dispatch(void)
{
    hsa_double_packet p;

    for (long i = hsa_double_packet_count() - 1; i >= 0; i--) {
        assert_true(hsa_double_get_packet(i, &p));
        if (p.kernel[0] != '\0')
            return p;
    }
    fail_msg("no dispatch packet");
    return p;
}

/* add_f32 on gfx90a, on a stream: results, packet geometry, kernarg bytes. */
static void test_add_on_gfx90a(void **state)
{
    enum { N = 1000, BLOCK = 128 };
    gm_context *ctx = open_context("gfx90a");
    gm_kernel *k = find_or_skip(ctx, "add_f32");
    float a[N], b[N], out[N];
    gm_array *da = NULL, *db = NULL, *dout = NULL;
    gm_stream *s = NULL;
    gm_device_info info;
    hsa_double_packet p;
    hsa_kernel_dispatch_packet_t d;
    void *ptr = NULL;
    int64_t n = 0;

    (void)state;
    assert_ok(gm_context_device_info(ctx, &info));
    assert_int_equal(info.warp_size, 64);
    for (int i = 0; i < N; i++) {
        a[i] = (float)i * 0.25f;
        b[i] = 1000.0f - (float)i;
    }
    da = upload(ctx, a, N);
    db = upload(ctx, b, N);
    assert_ok(gm_device_array(ctx, 1, &(int64_t){N}, GM_FLOAT32, GM_ORDER_C, &dout));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s));
    {
        gm_arg args[] = {gm_arg_array(da), gm_arg_array(db), gm_arg_array(dout), gm_arg_i64(N)};

        assert_ok(gm_launch(k, gm_dim3_make((N + BLOCK - 1) / BLOCK, 1, 1),
                            gm_dim3_make(BLOCK, 1, 1), 0, s, 4, args));
    }
    assert_ok(gm_stream_synchronize(s));
    download(dout, out, N);
    for (int i = 0; i < N; i++)
        assert_true(out[i] == a[i] + b[i]);
    /* More group memory than a work-group may have: the core's check, before the runtime. */
    {
        gm_arg args[] = {gm_arg_array(da), gm_arg_array(db), gm_arg_array(dout), gm_arg_i64(N)};

        assert_int_equal(gm_launch(k, gm_dim3_make(1, 1, 1), gm_dim3_make(BLOCK, 1, 1),
                                   (size_t)info.shared_memory_per_block + 1, NULL, 4, args),
                         GM_ERR_INVALID_ARG);
        assert_non_null(strstr(gm_last_error_message(), "exceed the device's"));
        assert_int_equal(info.shared_memory_per_block_optin, info.shared_memory_per_block);
    }
    p = last_dispatch();
    assert_string_equal(p.kernel, "add_f32");
    memcpy(&d, p.bytes, sizeof(d));
    assert_int_equal(d.grid_size_x, 8 * BLOCK); /* work-items, whole work-groups */
    assert_int_equal(d.workgroup_size_x, BLOCK);
    /* the code object's layout: three pointers then n, each 8 bytes */
    memcpy(&ptr, p.kernarg + 16, sizeof(ptr));
    assert_ptr_equal(ptr, gm_array_view(dout)->data);
    memcpy(&n, p.kernarg + 24, sizeof(n));
    assert_int_equal(n, N);
    gm_stream_destroy(&s);
    gm_array_release(&da);
    gm_array_release(&db);
    gm_array_release(&dout);
    close_context(ctx);
}

/* Horner's rule, the reference for poly_eval_f32. */
static float horner(const float *c, int degree, float x)
{
    float acc = 0.0f;

    for (int k = degree; k >= 0; k--)
        acc = acc * x + c[k];
    return acc;
}

/* Run poly_eval_f32 with coefficients c and compare with horner(). */
static void run_poly(gm_context *ctx, gm_kernel *k, const float *c, int degree, size_t bytes)
{
    enum { N = 300 };
    float x[N], y[N];
    gm_array *dx = NULL, *dy = NULL;
    void *global = NULL;
    size_t global_bytes = 0;

    for (int i = 0; i < N; i++)
        x[i] = (float)(i - 150) / 64.0f;
    assert_ok(gm_module_set_constant(gm_kernel_module(k), "gm_poly_coeffs", c, bytes));
    /* the constant array is the code object's variable: the double's "device" memory */
    assert_ok(gm_module_get_global(gm_kernel_module(k), "gm_poly_coeffs", &global, &global_bytes));
    assert_int_equal(global_bytes, 16 * sizeof(float));
    assert_memory_equal(global, c, bytes);
    dx = upload(ctx, x, N);
    assert_ok(gm_device_array(ctx, 1, &(int64_t){N}, GM_FLOAT32, GM_ORDER_C, &dy));
    {
        gm_arg args[] = {gm_arg_array(dx), gm_arg_array(dy), gm_arg_i64(N), gm_arg_i32(degree)};

        assert_ok(gm_launch(k, gm_dim3_make(5, 1, 1), gm_dim3_make(64, 1, 1), 0, NULL, 4, args));
    }
    download(dy, y, N);
    for (int i = 0; i < N; i++) {
        float ref = horner(c, degree, x[i]);

        if (fabsf(y[i] - ref) > 1e-5f * (1.0f + fabsf(ref)))
            fail_msg("poly degree %d at %d: %g, expected %g", degree, i, (double)y[i], (double)ref);
    }
    gm_array_release(&dx);
    gm_array_release(&dy);
}

/* Constant memory through the variable symbol: each launch sees the latest coefficients. */
static void test_constant_memory(void **state)
{
    static const float c1[] = {1.0f, -2.0f, 0.5f, 3.0f};
    static const float c2[] = {0.0f, 0.0f, 4.0f};
    gm_context *ctx = open_context("gfx90a");
    gm_kernel *k = find_or_skip(ctx, "poly_eval_f32");

    (void)state;
    run_poly(ctx, k, c1, 3, sizeof(c1));
    run_poly(ctx, k, c2, 2, sizeof(c2));
    assert_string_equal(last_dispatch().kernel, "poly_eval_f32");
    close_context(ctx);
}

/* reduce_sum_f32 on gfx1100: 32-wide wavefronts (gm_wavebarrier per warp of 32). */
static void test_reduce_on_gfx1100_wave32(void **state)
{
    enum { N = 5000, BLOCK = 256, BLOCKS = 8 };
    gm_context *ctx = open_context("gfx1100");
    gm_kernel *k = find_or_skip(ctx, "reduce_sum_f32");
    float *x = malloc(N * sizeof(float)), partial[BLOCKS];
    double sum = 0.0, ref = 0.0;
    gm_array *dx = NULL, *dp = NULL;
    gm_device_info info;

    (void)state;
    assert_non_null(x);
    assert_ok(gm_context_device_info(ctx, &info));
    assert_int_equal(info.warp_size, 32);
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 97) - 40.0f;
        ref += x[i];
    }
    dx = upload(ctx, x, N);
    assert_ok(gm_device_array(ctx, 1, &(int64_t){BLOCKS}, GM_FLOAT32, GM_ORDER_C, &dp));
    {
        gm_arg args[] = {gm_arg_array(dx), gm_arg_array(dp), gm_arg_i64(N)};

        assert_ok(
            gm_launch(k, gm_dim3_make(BLOCKS, 1, 1), gm_dim3_make(BLOCK, 1, 1), 0, NULL, 3, args));
    }
    download(dp, partial, BLOCKS);
    for (int i = 0; i < BLOCKS; i++)
        sum += partial[i];
    assert_true(sum == ref); /* small integers: exact in float */
    assert_string_equal(last_dispatch().kernel, "reduce_sum_f32");
    gm_array_release(&dx);
    gm_array_release(&dp);
    free(x);
    close_context(ctx);
}

/* A transposed device-to-device gm_copy of a rows x cols float matrix; checks the result. */
static void copy_transposed(gm_context *ctx, int64_t rows, int64_t cols)
{
    float *host = malloc((size_t)(rows * cols) * sizeof(float));
    float *back = malloc((size_t)(rows * cols) * sizeof(float));
    const int64_t tshape[2] = {cols, rows};
    gm_array *a = NULL, *t = NULL;
    gm_ndview tv, bv;

    assert_true(host != NULL && back != NULL);
    for (int64_t i = 0; i < rows * cols; i++)
        host[i] = (float)i * 0.5f - 7.0f;
    a = upload(ctx, host, rows * cols);
    assert_ok(gm_array_reshape(a, 2, (const int64_t[2]){rows, cols}, GM_ORDER_C, &t));
    gm_array_release(&a);
    assert_ok(gm_ndview_transpose(gm_array_view(t), &tv));
    assert_ok(gm_device_array(ctx, 2, tshape, GM_FLOAT32, GM_ORDER_C, &a));
    assert_ok(gm_copy(ctx, gm_array_view(a), &tv, NULL));
    assert_ok(gm_ndview_init(back, GM_FLOAT32, 2, tshape, NULL, GM_ORDER_C, &bv));
    assert_ok(gm_array_copy_to_host(a, &bv, NULL));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            if (back[c * rows + r] != host[r * cols + c])
                fail_msg("transposed copy %lldx%lld at (%lld, %lld)", (long long)rows,
                         (long long)cols, (long long)r, (long long)c);
        }
    }
    gm_array_release(&a);
    gm_array_release(&t);
    free(host);
    free(back);
}

/* Dispatches of `kernel` the double processed since packet `first`. */
static long dispatches_of(long first, const char *kernel)
{
    hsa_double_packet p;
    long n = 0;

    for (long i = first; i < hsa_double_packet_count(); i++) {
        assert_true(hsa_double_get_packet(i, &p));
        n += strcmp(p.kernel, kernel) == 0 ? 1 : 0;
    }
    return n;
}

/*
 * Kernels on mapped (page-locked) host memory: gm_map's device views hold
 * the agent addresses hsa_amd_memory_lock returned, which are not the host
 * addresses, and the kernels (fill_f32 writing one, add_f32 reading both,
 * then the copy_strided packing kernel reading a transposed one) reach the
 * host pages through them: the double hands the host code the host address
 * of each global_buffer argument. The kernarg bytes hold the agent address.
 */
static void test_kernels_on_mapped_memory(void **state)
{
    enum { N = 1024, BLOCK = 64 }; /* whole pages (aligned_alloc) */
    gm_context *ctx = open_context("gfx90a");
    gm_kernel *fill = find_or_skip(ctx, "fill_f32");
    gm_kernel *add = find_or_skip(ctx, "add_f32");
    float *x = aligned_alloc(4096, N * sizeof(float)), *y = aligned_alloc(4096, N * sizeof(float));
    float out[N], t[N];
    int64_t n = N, shape[2] = {16, 32}, tstrides[2] = {4, 64};
    gm_ndview hv[2], dv[2], tv, dt;
    gm_host_scope *scope = NULL;
    gm_array *dout = NULL, *dtr = NULL;
    hsa_double_packet p;
    void *arg = NULL;

    (void)state;
    assert_non_null(x);
    assert_non_null(y);
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = -1.0f;
    }
    assert_ok(gm_ndview_init(x, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &hv[0]));
    assert_ok(gm_ndview_init(y, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &hv[1]));
    assert_ok(gm_map(ctx, 2, hv, dv, &scope));
    assert_ptr_not_equal(dv[0].data, x); /* the agent address, not the host address */
    assert_ptr_not_equal(dv[1].data, y);
    {
        gm_arg args[] = {gm_arg_view(&dv[1]), gm_arg_f32(2.5f), gm_arg_i64(N)};

        assert_ok(gm_launch(fill, gm_dim3_make(N / BLOCK, 1, 1), gm_dim3_make(BLOCK, 1, 1), 0, NULL,
                            3, args));
    }
    p = last_dispatch();
    memcpy(&arg, p.kernarg, sizeof(arg));
    assert_ptr_equal(arg, dv[1].data);
    for (int i = 0; i < N; i++)
        assert_true(y[i] == 2.5f);
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &dout));
    {
        gm_arg args[] = {gm_arg_view(&dv[0]), gm_arg_view(&dv[1]), gm_arg_array(dout),
                         gm_arg_i64(N)};

        assert_ok(gm_launch(add, gm_dim3_make(N / BLOCK, 1, 1), gm_dim3_make(BLOCK, 1, 1), 0, NULL,
                            4, args));
    }
    download(dout, out, N);
    for (int i = 0; i < N; i++)
        assert_true(out[i] == (float)i + 2.5f);
    /* a transposed view of x's device side copied by the packing kernel */
    if (gm_kernel_find(ctx, "copy_strided", &(gm_kernel *){NULL}) == GM_OK) {
        long first = hsa_double_packet_count();

        assert_ok(gm_ndview_init(dv[0].data, GM_FLOAT32, 2, shape, tstrides, GM_ORDER_C, &tv));
        tv.memory = GM_MEMORY_DEVICE;
        tv.device_id = dv[0].device_id;
        assert_ok(gm_device_array(ctx, 2, shape, GM_FLOAT32, GM_ORDER_C, &dtr));
        dt = *gm_array_view(dtr);
        assert_ok(gm_copy(ctx, &dt, &tv, NULL));
        assert_int_equal(dispatches_of(first, "copy_strided"), 1);
        assert_ok(gm_ndview_init(t, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &tv));
        assert_ok(gm_array_copy_to_host(dtr, &tv, NULL));
        for (int r = 0; r < 16; r++) {
            for (int c = 0; c < 32; c++)
                assert_true(t[r * 32 + c] == x[c * 16 + r]);
        }
        gm_array_release(&dtr);
    }
    assert_ok(gm_host_scope_end(&scope));
    gm_array_release(&dout);
    close_context(ctx);
    free(x);
    free(y);
}

/*
 * copy_strided: a transposed device-to-device copy is one dispatch of the
 * packing kernel on gfx90a; on gfx906, for which the library embeds no
 * code object, the op declines and the core's pitched copies do it.
 */
static void test_copy_strided_packing_kernel(void **state)
{
    gm_context *ctx = open_context("gfx90a");
    gm_ndview host_view;
    float x[4] = {0};
    long first = hsa_double_packet_count();

    (void)state;
    find_or_skip(ctx, "copy_strided"); /* the build embeds AMDGPU code */
    copy_transposed(ctx, 37, 53);
    assert_int_equal(dispatches_of(first, "copy_strided"), 1);
    /* host memory is not the packing kernel's */
    assert_ok(gm_ndview_init(x, GM_FLOAT32, 1, &(int64_t){4}, NULL, GM_ORDER_C, &host_view));
    assert_status(gm__hsa_backend.copy_strided(ctx->bctx, &host_view, &host_view, NULL),
                  GM_ERR_UNSUPPORTED);
    close_context(ctx);
    ctx = open_context("gfx906");
    first = hsa_double_packet_count();
    copy_transposed(ctx, 9, 5);
    assert_int_equal(dispatches_of(first, "copy_strided"), 0);
    /* No embedded object is for gfx906 (the driver refuses each ISA): not found, said so. */
    {
        gm_kernel *k = NULL;

        assert_int_equal(gm_kernel_find(ctx, "add_f32", &k), GM_ERR_NOT_FOUND);
        assert_non_null(strstr(gm_last_error_message(), "gm_kernel_find: no AMDGPU object of"));
        assert_non_null(strstr(gm_last_error_message(), "the last refusal: "));
        assert_non_null(strstr(gm_last_error_message(), "INVALID_ISA"));
        assert_non_null(strstr(gm_last_error_message(), "(looking for kernel 'add_f32')"));
    }
    close_context(ctx);
}

/* The built-in gfx90a code object holding `kernel`, or NULL. */
static const gm_amdgpu_image *builtin_gfx90a(const char *kernel)
{
    for (int s = 0; s < gm__builtin_image_set_count; s++) {
        const gm_image_set *set = gm__builtin_image_sets[s];

        for (int32_t k = 0; set->host != NULL && k < set->host->nkernels; k++) {
            if (strcmp(set->host->kernels[k]->name, kernel) != 0)
                continue;
            for (int32_t i = 0; i < set->amdgpu_count; i++) {
                if (strcmp(set->amdgpu[i].arch, "gfx90a") == 0)
                    return &set->amdgpu[i];
            }
        }
    }
    return NULL;
}

/*
 * The double's own checks of a host-run dispatch, with packets written by
 * hand (the backend never writes such): a grid that is not whole
 * work-groups is a violation and the kernel does not run; the same packet
 * with whole work-groups runs fill_i32 from the hand-made kernarg segment.
 */
static void test_double_rejects_partial_work_groups(void **state)
{
    const gm_amdgpu_image *img = builtin_gfx90a("fill_i32");
    hsa_double_config cfg;
    gm_backend_ctx *bctx = NULL;
    gm_backend_module *m = NULL;
    gm_backend_kernel *k = NULL;
    hsa_queue_t *q = NULL;
    hsa_signal_t done = {0};
    hsa_kernel_dispatch_packet_t pkt;
    void *kernarg = NULL;
    int32_t out[128] = {0}, value = 7;
    int64_t n = 100;
    int32_t *ptr = out;
    char text[4096];

    (void)state;
    if (img == NULL)
        skip();
    hsa_double_config_default(&cfg);
    cfg.gpu_arch = "gfx90a";
    bctx = hsa_test_open(&cfg, 0);
    assert_ok(hsa_ops->module_load(bctx, GM_IMAGE_AMDGPU, img->data, img->bytes, &m));
    assert_ok(hsa_ops->module_get_kernel(bctx, m, "fill_i32", &k));
    assert_int_equal(hsa_queue_create(bctx->gpu, 16, HSA_QUEUE_TYPE_SINGLE, NULL, NULL, UINT32_MAX,
                                      UINT32_MAX, &q),
                     HSA_STATUS_SUCCESS);
    assert_ok(gm__hsa_host_pool_alloc(bctx, bctx->kernarg_pool, bctx->kernarg_pool_needs_access,
                                      k->kernarg_bytes, &kernarg));
    memcpy(kernarg, &ptr, 8); /* fill_i32(out, value, n): offsets 0, 8, 16 */
    memcpy((char *)kernarg + 8, &value, 4);
    memcpy((char *)kernarg + 16, &n, 8);
    assert_int_equal(hsa_signal_create(1, 0, NULL, &done), HSA_STATUS_SUCCESS);
    memset(&pkt, 0, sizeof(pkt));
    pkt.setup = 1u << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
    pkt.workgroup_size_x = 64;
    pkt.workgroup_size_y = pkt.workgroup_size_z = 1;
    pkt.grid_size_x = 100; /* one and a half work-groups */
    pkt.grid_size_y = pkt.grid_size_z = 1;
    pkt.group_segment_size = k->group_bytes;
    pkt.private_segment_size = k->private_bytes;
    pkt.kernel_object = k->object;
    pkt.kernarg_address = kernarg;
    pkt.completion_signal = done;
    memcpy((char *)q->base_address + 4, (const char *)&pkt + 4, 60);
    pkt.header = (uint16_t)((HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE) |
                            (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                            (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE));
    __atomic_store_n((uint32_t *)q->base_address, pkt.header | ((uint32_t)pkt.setup << 16),
                     __ATOMIC_RELEASE); /* header and setup last */
    (void)hsa_queue_add_write_index_scacq_screl(q, 1);
    hsa_signal_store_screlease(q->doorbell_signal, 0);
    assert_int_equal(hsa_test_wait_done(done), 0);
    assert_int_equal(hsa_double_violations(text, sizeof(text)), 2); /* + no error callback */
    assert_non_null(strstr(text, "not whole work-groups"));
    assert_int_equal(out[0], 0); /* not run */
    /* the same packet with whole work-groups runs: out[0, n) = value, the rest untouched */
    hsa_signal_store_screlease(done, 1);
    pkt.grid_size_x = 128;
    memcpy((char *)q->base_address + 64 + 4, (const char *)&pkt + 4, 60);
    __atomic_store_n((uint32_t *)((char *)q->base_address + 64),
                     pkt.header | ((uint32_t)pkt.setup << 16), __ATOMIC_RELEASE);
    (void)hsa_queue_add_write_index_scacq_screl(q, 1);
    hsa_signal_store_screlease(q->doorbell_signal, 1);
    assert_int_equal(hsa_test_wait_done(done), 0);
    for (int i = 0; i < 128; i++)
        assert_int_equal(out[i], i < n ? value : 0);
    assert_int_equal(hsa_double_violations(NULL, 0), 2);
    assert_int_equal(hsa_signal_destroy(done), HSA_STATUS_SUCCESS);
    assert_int_equal(hsa_queue_destroy(q), HSA_STATUS_SUCCESS);
    assert_int_equal(hsa_amd_memory_pool_free(kernarg), HSA_STATUS_SUCCESS);
    assert_ok(hsa_ops->module_unload(bctx, m));
    hsa_ops->fini(bctx);
    hsa_test_assert_nothing_live();
    hsa_double_reset(NULL); /* the violations were the point */
}

/*
 * Kernels and copies on streams made and destroyed round after round (their
 * queues come back at the same handles, as ROCr hands destroyed queues'
 * handles out again, and so do the signals and kernarg blocks): each round's
 * upload, add_f32 dispatch and download are held in the paused double and
 * chained across three streams by events; every result holds.
 */
static void test_kernels_over_reused_queues(void **state)
{
    enum { N = 512, BLOCK = 64, ROUNDS = 8 };
    gm_context *ctx = open_context("gfx90a");
    gm_kernel *k = find_or_skip(ctx, "add_f32");
    float in[N], out[N];
    int64_t n = N;
    gm_array *a = NULL, *c = NULL;
    gm_ndview iv, ov;
    hsa_double_reuse reuse;

    (void)state;
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &a));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &c));
    assert_ok(gm_ndview_init(in, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &iv));
    assert_ok(gm_ndview_init(out, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &ov));
    for (int r = 0; r < ROUNDS; r++) {
        gm_stream *s1 = NULL, *s2 = NULL, *s3 = NULL;
        gm_event *e1 = NULL, *e2 = NULL;
        gm_arg args[] = {gm_arg_array(a), gm_arg_array(a), gm_arg_array(c), gm_arg_i64(N)};

        for (int i = 0; i < N; i++)
            in[i] = (float)(r * 1000 + i);
        memset(out, 0, sizeof(out));
        assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s1));
        assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s2));
        assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s3));
        assert_ok(gm_event_create(ctx, false, &e1));
        assert_ok(gm_event_create(ctx, false, &e2));
        hsa_double_pause(1);
        assert_ok(gm_array_copy_to_device(a, &iv, s1));
        assert_ok(gm_event_record(e1, s1));
        assert_ok(gm_stream_wait_event(s2, e1));
        assert_ok(gm_stream_wait_event(s2, e1));
        assert_ok(
            gm_launch(k, gm_dim3_make(N / BLOCK, 1, 1), gm_dim3_make(BLOCK, 1, 1), 0, s2, 4, args));
        assert_ok(gm_event_record(e2, s2));
        assert_ok(gm_stream_wait_event(s3, e2));
        assert_ok(gm_array_copy_to_host(c, &ov, s3));
        hsa_double_pause(0);
        assert_ok(gm_stream_synchronize(s3));
        for (int i = 0; i < N; i++)
            assert_true(out[i] == 2.0f * in[i]);
        gm_event_destroy(&e1);
        gm_event_destroy(&e2);
        gm_stream_destroy(&s1);
        gm_stream_destroy(&s2);
        gm_stream_destroy(&s3);
    }
    hsa_double_get_reuse(&reuse);
    assert_true(reuse.queues >= ROUNDS - 1);
    gm_array_release(&a);
    gm_array_release(&c);
    close_context(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_over_reused_queues),
        cmocka_unit_test(test_add_on_gfx90a),
        cmocka_unit_test(test_constant_memory),
        cmocka_unit_test(test_reduce_on_gfx1100_wave32),
        cmocka_unit_test(test_copy_strided_packing_kernel),
        cmocka_unit_test(test_kernels_on_mapped_memory),
        cmocka_unit_test(test_double_rejects_partial_work_groups),
    };

    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
