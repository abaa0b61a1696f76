/*
 * The library's own kernels on the CUDA backend, over the driver test
 * double, which loads the embedded fatbin (its PTX entries) and runs each
 * launch on the simulator's host-compiled kernel of the same name:
 *
 *   - built-in kernels through the backend's module and launch ops: results
 *     against C references, constant memory per module, the attributes the
 *     image declares, and the parameter array the driver reads;
 *   - copy_strided, the packing kernel behind strided copies between
 *     device-side layouts that no pitched copy expresses (transposed,
 *     reversed, permuted 3-D and 4-D, broadcast, misaligned, wide items),
 *     byte for byte against an element-by-element C reference, and the
 *     cases it leaves to the core (GM_ERR_UNSUPPORTED);
 *   - the core's copies on top: the kernel when it loads, the fallback when
 *     the device cannot load it, and the error paths releasing what they
 *     took.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_util.h"
#include "kernels_internal.h"
#include "runtime_internal.h"

#define MAX_CASE_DIMS 5

/* The built-in CUDA image holding kernel `name` (the library is built with nvcc here). */
static const gm_image_set *builtin_set(const char *name)
{
    for (int s = 0; s < gm__builtin_image_set_count; s++) {
        const gm_image_set *set = gm__builtin_image_sets[s];

        for (int32_t i = 0; set->host != NULL && i < set->host->nkernels; i++) {
            if (set->host->kernels[i] != NULL && strcmp(set->host->kernels[i]->name, name) == 0) {
                assert_non_null(set->cuda);
                return set;
            }
        }
    }
    fail_msg("no built-in image set has kernel %s", name);
    return NULL;
}

static gm_backend_module *load_builtin(gm_backend_ctx *bctx, const char *kernel)
{
    const gm_image_set *set = builtin_set(kernel);
    gm_backend_module *module = NULL;

    assert_ok(CUDA_OPS->module_load(bctx, GM_IMAGE_CUDA, set->cuda, set->cuda_bytes, &module));
    return module;
}

static gm_devptr device_from(gm_backend_ctx *bctx, const void *host, size_t bytes)
{
    gm_devptr ptr = 0;
    gm_copy_desc d = {GM_COPY_DEVICE,
                      GM_COPY_HOST,
                      0,
                      (gm_devptr)(uintptr_t)host,
                      bytes,
                      1,
                      1,
                      bytes,
                      1,
                      bytes,
                      1};

    assert_ok(CUDA_OPS->mem_alloc(bctx, bytes, &ptr));
    d.dst = ptr;
    assert_ok(CUDA_OPS->copy(bctx, &d, NULL));
    return ptr;
}

static void device_to(gm_backend_ctx *bctx, void *host, gm_devptr ptr, size_t bytes)
{
    gm_copy_desc d = {GM_COPY_HOST,
                      GM_COPY_DEVICE,
                      (gm_devptr)(uintptr_t)host,
                      ptr,
                      bytes,
                      1,
                      1,
                      bytes,
                      1,
                      bytes,
                      1};

    assert_ok(CUDA_OPS->copy(bctx, &d, NULL));
}

/* fini, then: nothing held, and exactly `violations` broken driver rules. */
static void close_expecting(gm_backend_ctx *bctx, long violations)
{
    CUDA_OPS->fini(bctx);
    assert_int_equal(gm_cuda_double_live_objects(), 0);
    assert_int_equal(gm_cuda_double_violations(), violations);
}

/* ------------------------------------------------------ built-in kernels */

/* Run the module's add_f32 on a stream (or synchronously), against a + b computed here. */
static void check_add(gm_backend_ctx *bctx, gm_backend_module *module, gm_backend_stream *stream)
{
    enum { N = 3001 };
    gm_backend_kernel *add = NULL;
    gm_kernel_attrs attrs;
    float *a = malloc(N * sizeof(float));
    float *b = malloc(N * sizeof(float));
    float *out = malloc(N * sizeof(float));
    gm_devptr da = 0, db = 0, dout = 0;
    int64_t n = N;
    void *args[4] = {&da, &db, &dout, &n};
    const size_t sizes[4] = {8, 8, 8, 8};
    gm_launch_config config = {{(N + 127) / 128, 1, 1}, {128, 1, 1}, 0};

    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(out);
    for (int i = 0; i < N; i++) {
        a[i] = (float)i * 0.25f;
        b[i] = 1000.0f - (float)i;
        out[i] = -1.0f;
    }
    da = device_from(bctx, a, N * sizeof(float));
    db = device_from(bctx, b, N * sizeof(float));
    dout = device_from(bctx, out, N * sizeof(float));
    assert_ok(CUDA_OPS->module_get_kernel(bctx, module, "add_f32", &add));
    assert_ok(CUDA_OPS->kernel_attrs(bctx, add, &attrs));
    assert_int_equal(attrs.kernarg_bytes, 32); /* three pointers and an int64 */
    assert_int_equal(attrs.static_shared_bytes, 0);
    gm_cuda_double_clear_calls();
    assert_ok(CUDA_OPS->launch(bctx, add, &config, args, sizes, 4, stream));
    assert_int_equal(gm_cuda_double_count_calls("cuLaunchKernel"), 1);
    /* Without a stream the launch is synchronous: the legacy stream is waited for after it. */
    assert_int_equal(gm_cuda_double_count_calls("cuStreamSynchronize"), stream == NULL ? 1 : 0);
    if (stream == NULL)
        assert_string_equal(gm_cuda_double_call_name(gm_cuda_double_call_count() - 1),
                            "cuStreamSynchronize");
    if (stream != NULL)
        assert_ok(CUDA_OPS->stream_synchronize(bctx, stream));
    device_to(bctx, out, dout, N * sizeof(float));
    for (int i = 0; i < N; i++)
        assert_float_equal(out[i], a[i] + b[i], 0.0f);
    assert_ok(CUDA_OPS->mem_free(bctx, da));
    assert_ok(CUDA_OPS->mem_free(bctx, db));
    assert_ok(CUDA_OPS->mem_free(bctx, dout));
    free(a);
    free(b);
    free(out);
}

/* add_f32 from the embedded fatbin, on a stream and synchronously. */
static void test_builtin_add(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_module *module = load_builtin(bctx, "add_f32");
    gm_backend_stream *stream = NULL;

    (void)state;
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &stream));
    check_add(bctx, module, stream);
    check_add(bctx, module, NULL);
    assert_ok(CUDA_OPS->stream_destroy(bctx, stream));
    assert_ok(CUDA_OPS->module_unload(bctx, module));
    cuda_test_close(bctx);
}

/*
 * A copy of a built-in fatbin (nvcc's container: a 16-byte header, then
 * entries of a >= 64-byte header {u16 kind (1 PTX, 2 cubin), u16, u32
 * header bytes, u64 payload bytes, ..., u64 flags at 40} and the payload)
 * with the entries of `kind` (0: all) flagged as compressed (0x2000) and
 * their payloads overwritten, which the double must then skip; *cubin_p
 * receives the first cubin of the original.
 */
static unsigned char *fatbin_flagged(const gm_image_set *set, unsigned kind,
                                     const unsigned char **cubin_p, size_t *cubin_bytes_p)
{
    const unsigned char *original = set->cuda;
    unsigned char *image = malloc(set->cuda_bytes);
    uint16_t header = 0;
    uint64_t total = 0;
    size_t p = 0;

    assert_non_null(image);
    memcpy(image, original, set->cuda_bytes);
    memcpy(&header, image + 6, 2);
    memcpy(&total, image + 8, 8);
    *cubin_p = NULL;
    for (p = header; p + 64 <= header + total;) {
        uint32_t entry_header = 0;
        uint64_t payload = 0;
        uint64_t flags = 0;

        memcpy(&entry_header, image + p + 4, 4);
        memcpy(&payload, image + p + 8, 8);
        memcpy(&flags, image + p + 40, 8);
        if (kind == 0 || (unsigned)(image[p] | image[p + 1] << 8) == kind) {
            flags |= 0x2000u;
            memcpy(image + p + 40, &flags, 8);
            memset(image + p + entry_header, 0x5a,
                   (size_t)payload); /* unreadable, as it would be */
        }
        if (image[p] == 2 && *cubin_p == NULL) {
            *cubin_p = original + p + entry_header;
            *cubin_bytes_p = (size_t)payload;
        }
        p += entry_header + (size_t)payload;
    }
    assert_true(p == header + total);
    assert_non_null(*cubin_p);
    return image;
}

/* Cubins alone and inside a fatbin whose PTX the double cannot read; nothing readable. */
static void test_builtin_cubins(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_module *module = NULL;
    gm_backend_kernel *kernel = NULL;
    gm_kernel_attrs attrs;
    const unsigned char *cubin = NULL;
    size_t cubin_bytes = 0;
    const gm_image_set *set = builtin_set("add_f32");
    unsigned char *image = fatbin_flagged(set, 1, &cubin, &cubin_bytes);
    gm_devptr coeffs = 0;
    size_t coeff_bytes = 0;

    (void)state;
    /* the fatbin's PTX flagged compressed: the double runs its cubin */
    assert_ok(CUDA_OPS->module_load(bctx, GM_IMAGE_CUDA, image, set->cuda_bytes, &module));
    check_add(bctx, module, NULL);
    assert_ok(CUDA_OPS->module_get_kernel(bctx, module, "copy_strided", &kernel));
    assert_ok(CUDA_OPS->kernel_attrs(bctx, kernel, &attrs));
    assert_int_equal(attrs.kernarg_bytes, 8 + 8 + sizeof(gm_strided_layout) + 8);
    assert_ok(CUDA_OPS->module_unload(bctx, module));
    /* the bare cubin */
    assert_ok(CUDA_OPS->module_load(bctx, GM_IMAGE_CUDA, cubin, cubin_bytes, &module));
    check_add(bctx, module, NULL);
    assert_ok(CUDA_OPS->module_unload(bctx, module));
    free(image);
    /* static shared memory and __constant__ arrays from cubins */
    set = builtin_set("reduce_sum_f32");
    image = fatbin_flagged(set, 1, &cubin, &cubin_bytes);
    for (int inside = 0; inside < 2; inside++) { /* bare, then inside the fatbin */
        assert_ok(CUDA_OPS->module_load(bctx, GM_IMAGE_CUDA, inside ? image : cubin,
                                        inside ? set->cuda_bytes : cubin_bytes, &module));
        assert_ok(CUDA_OPS->module_get_kernel(bctx, module, "reduce_sum_f32", &kernel));
        assert_ok(CUDA_OPS->kernel_attrs(bctx, kernel, &attrs));
        assert_int_equal(attrs.static_shared_bytes, 1024 * sizeof(float));
        assert_int_equal(attrs.kernarg_bytes, 24);
        assert_ok(CUDA_OPS->module_unload(bctx, module));
    }
    free(image);
    image = fatbin_flagged(builtin_set("poly_eval_f32"), 1, &cubin, &cubin_bytes);
    assert_ok(CUDA_OPS->module_load(bctx, GM_IMAGE_CUDA, cubin, cubin_bytes, &module));
    assert_ok(CUDA_OPS->module_get_global(bctx, module, "gm_poly_coeffs", &coeffs, &coeff_bytes));
    assert_int_equal(coeff_bytes, 16 * sizeof(float));
    assert_ok(CUDA_OPS->module_unload(bctx, module));
    free(image);
    cuda_test_close(bctx);
}

/* A fatbin with no entry the double can read: CUDA_ERROR_NO_BINARY_FOR_GPU. */
static void test_fatbin_without_readable_entry(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_module *module = NULL;
    const gm_image_set *set = builtin_set("add_f32");
    const unsigned char *cubin = NULL;
    size_t cubin_bytes = 0;
    unsigned char *none = fatbin_flagged(set, 0, &cubin, &cubin_bytes);

    (void)state;
    assert_status(CUDA_OPS->module_load(bctx, GM_IMAGE_CUDA, none, set->cuda_bytes, &module),
                  GM_ERR_UNSUPPORTED);
    assert_message_contains("CUDA_ERROR_NO_BINARY_FOR_GPU");
    free(none);
    cuda_test_close(bctx);
}

/* Horner's rule in double precision, the reference for poly_eval_f32. */
static double horner(const float *coeffs, int degree, float x)
{
    double acc = 0.0;

    for (int k = degree; k >= 0; k--)
        acc = acc * (double)x + (double)coeffs[k];
    return acc;
}

/* poly_eval_f32 reads gm_poly_coeffs: each module has its own constant array. */
static void test_builtin_constants(void **state)
{
    enum { N = 200, DEGREE = 3 };
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_module *m1 = load_builtin(bctx, "poly_eval_f32");
    gm_backend_module *m2 = load_builtin(bctx, "poly_eval_f32");
    gm_backend_kernel *k1 = NULL, *k2 = NULL;
    const float c1[16] = {1.0f, -2.0f, 0.5f, 0.25f};
    const float c2[16] = {-3.0f, 0.0f, 1.5f, -1.0f};
    float x[N], y1[N], y2[N];
    gm_devptr g1 = 0, g2 = 0, dx = 0, dy1 = 0, dy2 = 0;
    size_t bytes1 = 0, bytes2 = 0;
    int64_t n = N;
    int32_t degree = DEGREE;
    void *args1[4] = {&dx, &dy1, &n, &degree};
    void *args2[4] = {&dx, &dy2, &n, &degree};
    const size_t sizes[4] = {8, 8, 8, 4};
    gm_launch_config config = {{4, 1, 1}, {64, 1, 1}, 0};
    gm_copy_desc up = {GM_COPY_DEVICE, GM_COPY_HOST, 0, 0, 64, 1, 1, 64, 1, 64, 1};

    (void)state;
    for (int i = 0; i < N; i++)
        x[i] = (float)(i - N / 2) / 37.0f;
    dx = device_from(bctx, x, sizeof(x));
    memset(y1, 0, sizeof(y1));
    dy1 = device_from(bctx, y1, sizeof(y1));
    dy2 = device_from(bctx, y1, sizeof(y1));
    assert_ok(CUDA_OPS->module_get_global(bctx, m1, "gm_poly_coeffs", &g1, &bytes1));
    assert_ok(CUDA_OPS->module_get_global(bctx, m2, "gm_poly_coeffs", &g2, &bytes2));
    assert_int_equal(bytes1, 16 * sizeof(float));
    assert_int_equal(bytes2, 16 * sizeof(float));
    assert_true(g1 != g2);
    up.dst = g1;
    up.src = (gm_devptr)(uintptr_t)c1;
    assert_ok(CUDA_OPS->copy(bctx, &up, NULL));
    up.dst = g2;
    up.src = (gm_devptr)(uintptr_t)c2;
    assert_ok(CUDA_OPS->copy(bctx, &up, NULL));
    assert_ok(CUDA_OPS->module_get_kernel(bctx, m1, "poly_eval_f32", &k1));
    assert_ok(CUDA_OPS->module_get_kernel(bctx, m2, "poly_eval_f32", &k2));
    assert_ok(CUDA_OPS->launch(bctx, k1, &config, args1, sizes, 4, NULL));
    assert_ok(CUDA_OPS->launch(bctx, k2, &config, args2, sizes, 4, NULL));
    device_to(bctx, y1, dy1, sizeof(y1));
    device_to(bctx, y2, dy2, sizeof(y2));
    for (int i = 0; i < N; i++) {
        assert_float_equal(y1[i], horner(c1, DEGREE, x[i]), 1e-4);
        assert_float_equal(y2[i], horner(c2, DEGREE, x[i]), 1e-4);
    }

    assert_ok(CUDA_OPS->mem_free(bctx, dx));
    assert_ok(CUDA_OPS->mem_free(bctx, dy1));
    assert_ok(CUDA_OPS->mem_free(bctx, dy2));
    assert_ok(CUDA_OPS->module_unload(bctx, m1));
    assert_ok(CUDA_OPS->module_unload(bctx, m2));
    cuda_test_close(bctx);
}

/* What the image declares: reduce_sum_f32's 1024-float shared array and its parameters. */
static void test_builtin_attributes(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_module *module = load_builtin(bctx, "reduce_sum_f32");
    gm_backend_kernel *reduce = NULL;
    gm_kernel_attrs attrs;

    (void)state;
    assert_ok(CUDA_OPS->module_get_kernel(bctx, module, "reduce_sum_f32", &reduce));
    assert_ok(CUDA_OPS->kernel_attrs(bctx, reduce, &attrs));
    assert_int_equal(attrs.static_shared_bytes, 1024 * sizeof(float));
    assert_int_equal(attrs.kernarg_bytes, 24);
    assert_ok(CUDA_OPS->module_unload(bctx, module));
    cuda_test_close(bctx);
}

/* The parameter array as the driver reads it: one pointer per parameter, device addresses. */
static void test_builtin_parameter_array(void **state)
{
    enum { N = 64 };
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_module *module = load_builtin(bctx, "fill_i32");
    gm_backend_kernel *fill = NULL;
    int32_t host[N];
    int32_t value = 77;
    int64_t n = N;
    gm_devptr out = 0;
    gm_devptr not_device = (gm_devptr)(uintptr_t)host;
    void *args[3] = {&out, &value, &n};
    void *with_hole[3] = {&out, NULL, &n};
    void *host_target[3] = {&not_device, &value, &n};
    const size_t sizes[3] = {8, 4, 8};
    gm_launch_config config = {{1, 1, 1}, {N, 1, 1}, 0};

    (void)state;
    memset(host, 0, sizeof(host));
    out = device_from(bctx, host, sizeof(host));
    assert_ok(CUDA_OPS->module_get_kernel(bctx, module, "fill_i32", &fill));
    assert_ok(CUDA_OPS->launch(bctx, fill, &config, args, sizes, 3, NULL));
    device_to(bctx, host, out, sizeof(host));
    for (int i = 0; i < N; i++)
        assert_int_equal(host[i], 77);

    /* a NULL entry in kernelParams: the driver refuses it (the backend passes arrays as is) */
    assert_int_equal(cuLaunchKernel((CUfunction)fill, 1, 1, 1, N, 1, 1, 0, NULL, with_hole, NULL),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(gm_cuda_double_violations(), 1);
    assert_non_null(strstr(gm_cuda_double_last_violation(), "kernelParams[1]"));
    /* a host address where the kernel expects device memory */
    assert_int_not_equal(CUDA_OPS->launch(bctx, fill, &config, host_target, sizes, 3, NULL), GM_OK);
    assert_message_contains("CUDA_ERROR_ILLEGAL_ADDRESS");
    assert_int_equal(gm_cuda_double_violations(), 2);
    assert_non_null(strstr(gm_cuda_double_last_violation(), "not device memory"));

    assert_ok(CUDA_OPS->mem_free(bctx, out));
    assert_ok(CUDA_OPS->module_unload(bctx, module));
    close_expecting(bctx, 2);
}

/*
 * Registered memory's device address (distinct from its host address in the
 * double) as a kernel's pointer argument: the kernel writes the host memory.
 * Its host address there is an illegal address, and so is a device address
 * of mapped host memory in a by-value parameter (the double cannot translate
 * it for the simulator).
 */
static void test_builtin_registered_memory(void **state)
{
    enum { N = 64 };
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_module *module = load_builtin(bctx, "fill_i32");
    gm_backend_kernel *fill = NULL;
    int32_t *user = calloc(N, sizeof(int32_t));
    int32_t value = 91;
    int64_t n = N;
    gm_devptr out = 0;
    gm_devptr host_address = 0;
    void *args[3] = {&out, &value, &n};
    const size_t sizes[3] = {8, 4, 8};
    gm_launch_config config = {{1, 1, 1}, {N, 1, 1}, 0};

    (void)state;
    assert_non_null(user);
    assert_ok(CUDA_OPS->module_get_kernel(bctx, module, "fill_i32", &fill));
    assert_ok(CUDA_OPS->host_register(bctx, user, N * sizeof(int32_t), GM_HOST_MAPPED));
    assert_ok(CUDA_OPS->host_device_pointer(bctx, user, &out));
    assert_int_not_equal(out, (gm_devptr)(uintptr_t)user);
    assert_ok(CUDA_OPS->launch(bctx, fill, &config, args, sizes, 3, NULL));
    for (int i = 0; i < N; i++)
        assert_int_equal(user[i], 91);
    assert_int_equal(gm_cuda_double_violations(), 0);

    host_address = (gm_devptr)(uintptr_t)user;
    args[0] = &host_address;
    assert_int_not_equal(CUDA_OPS->launch(bctx, fill, &config, args, sizes, 3, NULL), GM_OK);
    assert_message_contains("CUDA_ERROR_ILLEGAL_ADDRESS");
    assert_int_equal(gm_cuda_double_violations(), 1);
    assert_non_null(strstr(gm_cuda_double_last_violation(), "host address of page-locked"));
    n = (int64_t)out; /* a device address where the kernel takes a count */
    args[0] = &out;
    assert_int_not_equal(CUDA_OPS->launch(bctx, fill, &config, args, sizes, 3, NULL), GM_OK);
    assert_int_equal(gm_cuda_double_violations(), 2);
    assert_non_null(strstr(gm_cuda_double_last_violation(), "cannot translate"));

    assert_ok(CUDA_OPS->host_unregister(bctx, user));
    assert_ok(CUDA_OPS->module_unload(bctx, module));
    close_expecting(bctx, 2);
    free(user);
}

/* Images the double reads and refuses: a fatbin header of another version. */
static void test_fatbin_refused(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_module *module = NULL;
    const gm_image_set *set = builtin_set("add_f32");
    unsigned char *image = malloc(set->cuda_bytes);

    (void)state;
    assert_non_null(image);
    memcpy(image, set->cuda, set->cuda_bytes);
    image[4] = 2; /* version 2 */
    assert_status(CUDA_OPS->module_load(bctx, GM_IMAGE_CUDA, image, set->cuda_bytes, &module),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("CUDA_ERROR_INVALID_IMAGE");
    free(image);
    cuda_test_close(bctx);
}

/* ----------------------------------------------------------- copy_strided */

/* A strided copy between two device allocations (dst_bytes and src_bytes long). */
typedef struct layout_case {
    int ndim;
    int64_t shape[MAX_CASE_DIMS];
    int64_t dst_strides[MAX_CASE_DIMS];
    int64_t src_strides[MAX_CASE_DIMS];
    int64_t dst_offset;
    int64_t src_offset;
    size_t dst_bytes;
    size_t src_bytes;
    gm_dtype dtype;
} layout_case;

static gm_ndview device_view(gm_devptr base, int64_t offset, const layout_case *c,
                             const int64_t *strides)
{
    gm_ndview v;

    assert_ok(gm_ndview_init((void *)(uintptr_t)base, c->dtype, c->ndim, c->shape, strides,
                             GM_ORDER_C, &v));
    v.offset = offset;
    v.memory = GM_MEMORY_DEVICE;
    v.device_id = 0;
    return v;
}

/* The reference: every element moved one at a time, walking the index space in C order. */
static void reference_copy(unsigned char *dst, const unsigned char *src, const layout_case *c)
{
    size_t itemsize = gm_dtype_itemsize(c->dtype);
    int64_t index[MAX_CASE_DIMS] = {0};
    int64_t total = 1;

    for (int d = 0; d < c->ndim; d++)
        total *= c->shape[d];
    for (int64_t e = 0; e < total; e++) {
        int64_t dst_at = c->dst_offset;
        int64_t src_at = c->src_offset;

        for (int d = 0; d < c->ndim; d++) {
            dst_at += index[d] * c->dst_strides[d];
            src_at += index[d] * c->src_strides[d];
        }
        memcpy(dst + dst_at, src + src_at, itemsize);
        for (int d = c->ndim - 1; d >= 0 && ++index[d] == c->shape[d]; d--)
            index[d] = 0;
    }
}

/* Run one case through the op and compare both allocations, bytes outside the view included. */
static void check_case(gm_backend_ctx *bctx, const layout_case *c, gm_backend_stream *stream)
{
    unsigned char *src = malloc(c->src_bytes);
    unsigned char *expected = malloc(c->dst_bytes);
    unsigned char *got = malloc(c->dst_bytes);
    gm_devptr dsrc = 0, ddst = 0;
    gm_ndview dst_view, src_view;

    assert_non_null(src);
    assert_non_null(expected);
    assert_non_null(got);
    for (size_t i = 0; i < c->src_bytes; i++)
        src[i] = (unsigned char)(i * 7u + i / 251u);
    memset(expected, 0xee, c->dst_bytes);
    dsrc = device_from(bctx, src, c->src_bytes);
    ddst = device_from(bctx, expected, c->dst_bytes);
    dst_view = device_view(ddst, c->dst_offset, c, c->dst_strides);
    src_view = device_view(dsrc, c->src_offset, c, c->src_strides);
    gm_cuda_double_clear_calls();
    assert_ok(CUDA_OPS->copy_strided(bctx, &dst_view, &src_view, stream));
    assert_int_equal(gm_cuda_double_count_calls("cuLaunchKernel"), 1);
    assert_int_equal(gm_cuda_double_count_calls("cuMemcpy2D_v2") +
                         gm_cuda_double_count_calls("cuMemcpy2DAsync_v2") +
                         gm_cuda_double_count_calls("cuMemcpy3D_v2") +
                         gm_cuda_double_count_calls("cuMemcpy3DAsync_v2"),
                     0);
    if (stream == NULL) /* synchronous: finished before the op returns */
        assert_true(gm_cuda_double_find_call("cuStreamSynchronize",
                                             gm_cuda_double_find_call("cuLaunchKernel", 0)) > 0);
    else
        assert_ok(CUDA_OPS->stream_synchronize(bctx, stream));
    reference_copy(expected, src, c);
    device_to(bctx, got, ddst, c->dst_bytes);
    assert_memory_equal(got, expected, c->dst_bytes);
    assert_ok(CUDA_OPS->mem_free(bctx, dsrc));
    assert_ok(CUDA_OPS->mem_free(bctx, ddst));
    free(src);
    free(expected);
    free(got);
}

/* Layouts no single pitched copy expresses, synchronous and on a stream. */
static void test_copy_strided_layouts(void **state)
{
    const layout_case cases[] = {
        /* 2-D transpose, float32: C source into an F-ordered destination */
        {2, {37, 23}, {4, 37 * 4}, {23 * 4, 4}, 0, 0, 37 * 23 * 4, 37 * 23 * 4, GM_FLOAT32},
        /* both axes reversed in the source only, int16 */
        {2,
         {19, 31},
         {31 * 2, 2},
         {-31 * 2, -2},
         0,
         (18 * 31 + 30) * 2,
         19 * 31 * 2,
         19 * 31 * 2,
         GM_INT16},
        /* an axis negative on both sides plus a transposition, float64 */
        {2,
         {9, 11},
         {-8, -9 * 8},
         {-11 * 8, 8},
         (8 + 10 * 9) * 8,
         8 * 11 * 8,
         99 * 8,
         99 * 8,
         GM_FLOAT64},
        /* 3-D: a (6, 7, 5) array permuted to (5, 6, 7), float64, into a C destination */
        {3,
         {5, 6, 7},
         {6 * 7 * 8, 7 * 8, 8},
         {8, 7 * 5 * 8, 5 * 8},
         0,
         0,
         210 * 8,
         210 * 8,
         GM_FLOAT64},
        /* 4-D: a (5, 4, 6, 3) array permuted (3, 1, 0, 2) to (3, 4, 5, 6), float32 */
        {4,
         {3, 4, 5, 6},
         {4 * 5 * 6 * 4, 5 * 6 * 4, 6 * 4, 4},
         {4, 6 * 3 * 4, 4 * 6 * 3 * 4, 3 * 4},
         0,
         0,
         360 * 4,
         360 * 4,
         GM_FLOAT32},
        /* 5-D that merges to 3 axes: the two outer axes swapped, uint8 */
        {5,
         {3, 2, 4, 5, 6},
         {2 * 120, 120, 30, 6, 1},
         {120, 3 * 120, 30, 6, 1},
         0,
         0,
         720,
         720,
         GM_UINT8},
        /* a broadcast source row (stride 0) into a transposed destination, float32 */
        {2, {30, 40}, {4, 30 * 4}, {0, 4}, 0, 0, 1200 * 4, 40 * 4, GM_FLOAT32},
        /* complex128 (16-byte items, moved as two 8-byte units), transposed */
        {2, {7, 9}, {16, 7 * 16}, {9 * 16, 16}, 0, 0, 63 * 16, 63 * 16, GM_COMPLEX128},
        /* float32 at 2-byte aligned offsets and strides: moved as 2-byte units */
        {2,
         {8, 9},
         {4, 8 * 4 + 2},
         {9 * 4 + 2, 4},
         6,
         2,
         6 + 9 * 34 + 8,
         2 + 8 * 38 + 2,
         GM_FLOAT32},
    };
    gm_backend_ctx *bctx = cuda_test_open();
    gm_backend_stream *stream = NULL;

    (void)state;
    assert_ok(CUDA_OPS->stream_create(bctx, 0, &stream));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        check_case(bctx, &cases[i], NULL);
        check_case(bctx, &cases[i], stream);
    }
    assert_ok(CUDA_OPS->stream_destroy(bctx, stream));
    cuda_test_close(bctx);
}

/* One load per context, however many copies. */
static void test_copy_strided_loads_once(void **state)
{
    const layout_case c = {2, {4, 5}, {4, 16}, {20, 4}, 0, 0, 80, 80, GM_FLOAT32};
    gm_backend_ctx *bctx = cuda_test_open();

    (void)state;
    check_case(bctx, &c, NULL); /* clears the call log before the op */
    assert_int_equal(gm_cuda_double_count_calls("cuModuleLoadDataEx"), 1);
    assert_int_equal(gm_cuda_double_count_calls("cuModuleGetFunction"), 1);
    check_case(bctx, &c, NULL);
    assert_int_equal(gm_cuda_double_count_calls("cuModuleLoadDataEx"), 0);
    assert_int_equal(gm_cuda_double_count_calls("cuModuleGetFunction"), 0);
    cuda_test_close(bctx);
}

/* Arguments: NULLs, shape and dtype mismatches, broadcast destinations; what is left to the core.
 */
static void test_copy_strided_arguments(void **state)
{
    const layout_case c = {2, {4, 5}, {4, 16}, {20, 4}, 0, 0, 80, 80, GM_FLOAT32};
    /* five axes that cannot merge: a full reversal of axis order */
    const layout_case five = {5,
                              {2, 3, 2, 3, 2},
                              {72 * 4, 24 * 4, 12 * 4, 4 * 4, 2 * 4},
                              {4, 2 * 4, 6 * 4, 12 * 4, 36 * 4},
                              0,
                              0,
                              72 * 4 * 2,
                              72 * 4 * 2,
                              GM_FLOAT32};
    gm_backend_ctx *bctx = cuda_test_open();
    gm_devptr a = 0, b = 0;
    gm_ndview dst, src, other;
    float host[20];

    (void)state;
    assert_ok(CUDA_OPS->mem_alloc(bctx, 1024, &a));
    assert_ok(CUDA_OPS->mem_alloc(bctx, 1024, &b));
    dst = device_view(a, 0, &c, c.dst_strides);
    src = device_view(b, 0, &c, c.src_strides);
    gm_cuda_double_clear_calls();
    assert_status(CUDA_OPS->copy_strided(bctx, NULL, &src, NULL), GM_ERR_NULL_POINTER);
    assert_status(CUDA_OPS->copy_strided(bctx, &dst, NULL, NULL), GM_ERR_NULL_POINTER);
    other = src;
    other.shape[1] = 4;
    assert_status(CUDA_OPS->copy_strided(bctx, &dst, &other, NULL), GM_ERR_SHAPE_MISMATCH);
    other = src;
    other.dtype = GM_INT32;
    assert_status(CUDA_OPS->copy_strided(bctx, &dst, &other, NULL), GM_ERR_DTYPE);
    other = dst;
    other.strides[0] = 0; /* several elements into one place */
    assert_status(CUDA_OPS->copy_strided(bctx, &other, &src, NULL), GM_ERR_INVALID_ARG);
    /* host-side descriptors and layouts beyond the kernel: the core's job */
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 2, c.shape, NULL, GM_ORDER_C, &other));
    assert_status(CUDA_OPS->copy_strided(bctx, &dst, &other, NULL), GM_ERR_UNSUPPORTED);
    assert_status(CUDA_OPS->copy_strided(bctx, &other, &src, NULL), GM_ERR_UNSUPPORTED);
    dst = device_view(a, 0, &five, five.dst_strides);
    src = device_view(b, 0, &five, five.src_strides);
    assert_status(CUDA_OPS->copy_strided(bctx, &dst, &src, NULL), GM_ERR_UNSUPPORTED);
    assert_message_contains("5 axes");
    assert_int_equal(gm_cuda_double_count_calls("cuLaunchKernel"), 0);
    assert_int_equal(gm_cuda_double_count_calls("cuModuleLoadDataEx"), 0);
    assert_ok(CUDA_OPS->mem_free(bctx, a));
    assert_ok(CUDA_OPS->mem_free(bctx, b));
    cuda_test_close(bctx);
}

/* ------------------------------------------------------- through the core */

static gm_context *open_context(void)
{
    gm_context_options options;
    gm_context *ctx = NULL;

    gm_context_options_default(&options);
    assert_ok(gm__context_create_with_ops(CUDA_OPS, &options, &ctx));
    return ctx;
}

static void close_context(gm_context *ctx)
{
    gm_context_destroy(&ctx);
    assert_int_equal(gm_cuda_double_live_objects(), 0);
    assert_no_violations();
}

/* gm_copy of a transposed device view into a device array, checked on the host. */
static void transpose_through_core(gm_context *ctx)
{
    enum { R = 33, C = 17 };
    const int64_t shape[2] = {R, C};
    const int64_t out_shape[2] = {C, R};
    float host[R][C];
    float back[C][R];
    gm_ndview host_view, transposed;
    gm_array *dev = NULL;
    gm_array *out = NULL;
    gm_array *back_array = NULL;

    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            host[i][j] = (float)(i * 100 + j);
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &host_view));
    assert_ok(gm_to_device(ctx, &host_view, NULL, &dev));
    assert_ok(gm_ndview_transpose(gm_array_view(dev), &transposed));
    assert_ok(gm_device_array(ctx, 2, out_shape, GM_FLOAT32, GM_ORDER_C, &out));
    assert_ok(gm_copy(ctx, gm_array_view(out), &transposed, NULL));
    assert_ok(gm_array_copy_to_host_new(out, NULL, &back_array));
    memcpy(back, gm_array_view(back_array)->data, sizeof(back));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            assert_float_equal(back[j][i], host[i][j], 0.0f);
    gm_array_release(&back_array);
    gm_array_release(&out);
    gm_array_release(&dev);
}

/* The core hands a device transpose to the packing kernel: one launch. */
static void test_core_uses_packing_kernel(void **state)
{
    gm_context *ctx = open_context();

    (void)state;
    gm_cuda_double_clear_calls();
    transpose_through_core(ctx);
    assert_int_equal(gm_cuda_double_count_calls("cuModuleLoadDataEx"), 1);
    assert_int_equal(gm_cuda_double_count_calls("cuLaunchKernel"), 1);
    close_context(ctx);
}

/* A device that cannot load the image: the core falls back, and no later copy tries again. */
static void test_core_falls_back_without_kernel(void **state)
{
    gm_context *ctx = open_context();

    (void)state;
    gm_cuda_double_clear_calls();
    gm_cuda_double_fail("cuModuleLoadDataEx", 1, CUDA_ERROR_NO_BINARY_FOR_GPU);
    transpose_through_core(ctx);
    transpose_through_core(ctx);
    assert_int_equal(gm_cuda_double_count_calls("cuModuleLoadDataEx"), 1);
    assert_int_equal(gm_cuda_double_count_calls("cuLaunchKernel"), 0);
    close_context(ctx);
}

/* Failures that may pass (out of memory, a missing function): fall back now, load next time. */
static void test_core_retries_after_transient_failure(void **state)
{
    gm_context *ctx = open_context();

    (void)state;
    gm_cuda_double_clear_calls();
    gm_cuda_double_fail("cuModuleLoadDataEx", 1, CUDA_ERROR_OUT_OF_MEMORY);
    transpose_through_core(ctx);
    assert_int_equal(gm_cuda_double_count_calls("cuLaunchKernel"), 0);
    gm_cuda_double_fail("cuModuleGetFunction", 1, CUDA_ERROR_NOT_FOUND);
    transpose_through_core(ctx); /* loads, misses the function, unloads the module */
    assert_int_equal(gm_cuda_double_count_calls("cuModuleUnload"), 1);
    assert_int_equal(gm_cuda_double_count_calls("cuLaunchKernel"), 0);
    transpose_through_core(ctx);
    assert_int_equal(gm_cuda_double_count_calls("cuModuleLoadDataEx"), 3);
    assert_int_equal(gm_cuda_double_count_calls("cuLaunchKernel"), 1);
    close_context(ctx);
}

/* A failing launch is the copy's error (no silent fallback after work may have started). */
static void test_core_launch_failure(void **state)
{
    gm_context *ctx = open_context();
    const int64_t shape[2] = {8, 6};
    const int64_t out_shape[2] = {6, 8};
    gm_array *dev = NULL;
    gm_array *out = NULL;
    gm_ndview transposed;

    (void)state;
    assert_ok(gm_device_array(ctx, 2, shape, GM_FLOAT32, GM_ORDER_C, &dev));
    assert_ok(gm_ndview_transpose(gm_array_view(dev), &transposed));
    assert_ok(gm_device_array(ctx, 2, out_shape, GM_FLOAT32, GM_ORDER_C, &out));
    gm_cuda_double_fail("cuLaunchKernel", 1, CUDA_ERROR_LAUNCH_FAILED);
    assert_status(gm_copy(ctx, gm_array_view(out), &transposed, NULL), GM_ERR_CONTEXT_LOST);
    assert_message_contains("CUDA_ERROR_LAUNCH_FAILED");
    assert_ok(gm_copy(ctx, gm_array_view(out), &transposed, NULL));
    gm_array_release(&out);
    gm_array_release(&dev);
    close_context(ctx);
}

/*
 * Dynamic shared memory past the default 48 KiB: gm_launch allows up to the
 * device's opt-in limit (227 KiB on the double, as on an H100) and the
 * backend opts the kernel in; past that limit it is refused before the driver.
 */
static void test_core_large_dynamic_shared(void **state)
{
    gm_context *ctx = open_context();
    const int64_t n = 1024;
    const int32_t radius = 6200; /* (256 + 2 * 6200) * 4 = 50624 bytes */
    size_t shared = (size_t)(256 + 2 * radius) * sizeof(float);
    gm_device_info info;
    gm_kernel *k = NULL;
    gm_array *in = NULL, *out = NULL;
    float one = 1.0f, back[1024];
    gm_ndview bv;

    (void)state;
    assert_ok(gm_context_device_info(ctx, &info));
    assert_int_equal(info.shared_memory_per_block, 48 * 1024);
    assert_int_equal(info.shared_memory_per_block_optin, 227 * 1024);
    assert_ok(gm_kernel_find(ctx, "stencil1d_f32", &k));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &in));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &out));
    assert_ok(gm_array_fill(in, &one, NULL));
    {
        gm_arg args[4] = {gm_arg_array(in), gm_arg_array(out), gm_arg_i64(n), gm_arg_i32(radius)};

        gm_cuda_double_clear_calls();
        assert_ok(
            gm_launch(k, gm_dim3_make(4, 1, 1), gm_dim3_make(256, 1, 1), shared, NULL, 4, args));
        assert_true(gm_cuda_double_find_call("cuFuncSetAttribute", 0) >= 0);
        assert_ok(gm_ndview_init(back, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &bv));
        assert_ok(gm_array_copy_to_host(out, &bv, NULL));
        for (int64_t i = 0; i < n; i++)
            assert_true(back[i] == 1024.0f); /* every element is within the radius */
        gm_cuda_double_clear_calls();
        assert_int_equal(gm_launch(k, gm_dim3_make(4, 1, 1), gm_dim3_make(256, 1, 1),
                                   227 * 1024 + 4, NULL, 4, args),
                         GM_ERR_INVALID_ARG);
        assert_non_null(strstr(gm_last_error_message(), "exceed the device's 232448 bytes"));
        assert_int_equal(gm_cuda_double_count_calls("cuLaunchKernel"), 0);
    }
    /* A kernel with 4 KiB of static shared memory may take only 44 KiB of dynamic memory
     * by default: 46 KiB (under the 48 KiB) still needs the opt-in. */
    assert_ok(gm_kernel_find(ctx, "reduce_sum_f32", &k));
    {
        gm_arg args[3] = {gm_arg_array(in), gm_arg_array(out), gm_arg_i64(256)};

        gm_cuda_double_clear_calls();
        assert_ok(
            gm_launch(k, gm_dim3_make(1, 1, 1), gm_dim3_make(256, 1, 1), 46 * 1024, NULL, 3, args));
        assert_true(gm_cuda_double_find_call("cuFuncSetAttribute", 0) >= 0);
        assert_ok(gm_ndview_init(back, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &bv));
        assert_ok(gm_array_copy_to_host(out, &bv, NULL));
        assert_true(back[0] == 256.0f);
        /* Raised once: a smaller launch neither sets nor lowers it. */
        gm_cuda_double_clear_calls();
        assert_ok(
            gm_launch(k, gm_dim3_make(1, 1, 1), gm_dim3_make(256, 1, 1), 45 * 1024, NULL, 3, args));
        assert_int_equal(gm_cuda_double_count_calls("cuFuncSetAttribute"), 0);
    }
    gm_array_release(&in);
    gm_array_release(&out);
    close_context(ctx);
}

/*
 * A registered set (searched first) whose CUDA image loads but lacks the
 * kernel: gm_kernel_find goes on to the built-in set that has it, and the
 * miss is not left as the thread's error.
 */
static void test_find_after_a_miss_leaves_no_error(void **state)
{
    gm_context *ctx = open_context();
    const gm_image_set *elementwise = builtin_set("add_f32");
    const gm_image_set user = {"cuda image only",       NULL, elementwise->cuda,
                               elementwise->cuda_bytes, NULL, 0};
    gm_kernel *k = NULL;

    (void)state;
    assert_ok(gm_register_image_set(&user));
    gm_clear_error();
    assert_ok(gm_kernel_find(ctx, "matmul_f32", &k));
    assert_int_equal(gm_last_error(), GM_OK);
    assert_ok(gm_unregister_image_set(&user));
    close_context(ctx);
}

/*
 * The newest registered set fails to load and an older one loads but lacks
 * the kernel: gm_kernel_find returns the load failure with its own message,
 * not the older set's miss.
 */
static void test_find_keeps_first_failure(void **state)
{
    gm_context *ctx = open_context();
    const gm_image_set *elementwise = builtin_set("add_f32");
    const gm_image_set older = {"older cuda image",      NULL, elementwise->cuda,
                                elementwise->cuda_bytes, NULL, 0};
    const gm_image_set newer = {"newer cuda image",      NULL, elementwise->cuda,
                                elementwise->cuda_bytes, NULL, 0};
    gm_kernel *k = NULL;

    (void)state;
    assert_ok(gm_register_image_set(&older));
    assert_ok(gm_register_image_set(&newer));
    gm_cuda_double_clear_calls();
    gm_cuda_double_fail("cuModuleLoadDataEx", 1, CUDA_ERROR_INVALID_IMAGE);
    assert_status(gm_kernel_find(ctx, "no_such_kernel", &k), GM_ERR_INVALID_ARG);
    assert_int_equal(gm_cuda_double_count_calls("cuModuleLoadDataEx"), 2); /* both were tried */
    assert_message_contains("CUDA_ERROR_INVALID_IMAGE");
    assert_null(strstr(gm_last_error_message(), "no_such_kernel"));
    assert_ok(gm_unregister_image_set(&newer));
    assert_ok(gm_unregister_image_set(&older));
    close_context(ctx);
}

/* Whether this build embedded CUDA images (nvcc was found; -Dkernels_cuda not disabled). */
static int have_cuda_images(void)
{
    for (int s = 0; s < gm__builtin_image_set_count; s++) {
        if (gm__builtin_image_sets[s]->cuda != NULL)
            return 1;
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_builtin_add, cuda_test_setup),
        cmocka_unit_test_setup(test_builtin_cubins, cuda_test_setup),
        cmocka_unit_test_setup(test_fatbin_without_readable_entry, cuda_test_setup),
        cmocka_unit_test_setup(test_builtin_constants, cuda_test_setup),
        cmocka_unit_test_setup(test_builtin_attributes, cuda_test_setup),
        cmocka_unit_test_setup(test_builtin_parameter_array, cuda_test_setup),
        cmocka_unit_test_setup(test_builtin_registered_memory, cuda_test_setup),
        cmocka_unit_test_setup(test_fatbin_refused, cuda_test_setup),
        cmocka_unit_test_setup(test_copy_strided_layouts, cuda_test_setup),
        cmocka_unit_test_setup(test_copy_strided_loads_once, cuda_test_setup),
        cmocka_unit_test_setup(test_copy_strided_arguments, cuda_test_setup),
        cmocka_unit_test_setup(test_core_uses_packing_kernel, cuda_test_setup),
        cmocka_unit_test_setup(test_core_falls_back_without_kernel, cuda_test_setup),
        cmocka_unit_test_setup(test_core_retries_after_transient_failure, cuda_test_setup),
        cmocka_unit_test_setup(test_core_launch_failure, cuda_test_setup),
        cmocka_unit_test_setup(test_core_large_dynamic_shared, cuda_test_setup),
        cmocka_unit_test_setup(test_find_after_a_miss_leaves_no_error, cuda_test_setup),
        cmocka_unit_test_setup(test_find_keeps_first_failure, cuda_test_setup),
    };

    if (!have_cuda_images()) {
        printf("cuda/kernels skipped: the library was built without CUDA kernel images\n");
        return 77;
    }
    return cmocka_run_group_tests_name("cuda/kernels", tests, cuda_test_group_setup,
                                       cuda_test_group_teardown);
}
