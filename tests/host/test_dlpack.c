/*
 * Tests for DLPack (src/core/dlpack.c, gpumem/dlpack.h): the structures'
 * ABI, export (shape, element strides, data + byte_offset, DLDevice per
 * backend and memory kind, reference held until the deleter), import
 * (versioned and legacy, strides NULL, byte_offset, devices, the deleter on
 * the last release), round trips, exports that outlive their context, and
 * every error path. CUDA and HSA
 * placement is checked on the simulator's fault table relabelled as those
 * backends.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt_helpers.h"

#ifndef DLPACK_DLPACK_H_
#error "gpumem/dlpack.h must define DLPACK_DLPACK_H_ so that a later real dlpack.h is skipped"
#endif

/* DLPack's ABI on LP64 (the layout every producer and consumer shares). */
_Static_assert(sizeof(DLDevice) == 8, "DLDevice");
_Static_assert(sizeof(DLDataType) == 4, "DLDataType");
_Static_assert(sizeof(DLDataType) == sizeof(gm_dtype), "gm_dtype mirrors DLDataType");
_Static_assert(offsetof(DLTensor, device) == 8 && offsetof(DLTensor, ndim) == 16 &&
                   offsetof(DLTensor, dtype) == 20 && offsetof(DLTensor, shape) == 24 &&
                   offsetof(DLTensor, strides) == 32 && offsetof(DLTensor, byte_offset) == 40 &&
                   sizeof(DLTensor) == 48,
               "DLTensor");
_Static_assert(offsetof(DLManagedTensor, manager_ctx) == 48 &&
                   offsetof(DLManagedTensor, deleter) == 56 && sizeof(DLManagedTensor) == 64,
               "DLManagedTensor");
_Static_assert(offsetof(DLManagedTensorVersioned, manager_ctx) == 8 &&
                   offsetof(DLManagedTensorVersioned, deleter) == 16 &&
                   offsetof(DLManagedTensorVersioned, flags) == 24 &&
                   offsetof(DLManagedTensorVersioned, dl_tensor) == 32 &&
                   sizeof(DLManagedTensorVersioned) == 80,
               "DLManagedTensorVersioned");
_Static_assert(kDLCPU == 1 && kDLCUDA == 2 && kDLCUDAHost == 3 && kDLROCM == 10 &&
                   kDLROCMHost == 11 && kDLCUDAManaged == 13,
               "device types");

#define BIG (INT64_MAX / 4)

static int deletes; /* deleter calls */

static int group_setup(void **state)
{
    setenv("GM_HOST_DEVICE_MEMORY", "64M", 1);
    setenv("GM_HOST_PINNED_MEMORY", "16M", 1);
    return gm_test_use_cmocka_allocator(state);
}

static int test_setup(void **state)
{
    (void)state;
    deletes = 0;
    rt_fault_reset();
    return 0;
}

/* A context on the fault table relabelled as `kind` (the simulator does the work). */
static gm_context *ctx_as(gm_backend_kind kind)
{
    gm_context_options o = rt_options(1000, 10.0, BIG);
    gm_context *ctx = NULL;

    rt_fault_ops()->kind = kind;
    assert_ok(rt_fault_context(&o, &ctx));
    return ctx;
}

/* A hand-made tensor over caller memory; the deleter counts. */
typedef struct made_tensor {
    DLManagedTensorVersioned t;
    int64_t shape[3];
    int64_t strides[3];
} made_tensor;

static void made_deleter(DLManagedTensorVersioned *self)
{
    (void)self;
    deletes++;
}

static void legacy_deleter(DLManagedTensor *self)
{
    (void)self;
    deletes++;
}

/* A 2-D float32 kDLCPU tensor over data, C-contiguous with strides NULL. */
static void made_init(made_tensor *m, float *data, int64_t rows, int64_t cols)
{
    memset(m, 0, sizeof(*m));
    m->t.version.major = 1;
    m->t.version.minor = 3; /* a newer minor is fine */
    m->t.deleter = made_deleter;
    m->t.dl_tensor.data = data;
    m->t.dl_tensor.device.device_type = kDLCPU;
    m->t.dl_tensor.ndim = 2;
    m->t.dl_tensor.dtype.code = kDLFloat;
    m->t.dl_tensor.dtype.bits = 32;
    m->t.dl_tensor.dtype.lanes = 1;
    m->shape[0] = rows;
    m->shape[1] = cols;
    m->t.dl_tensor.shape = m->shape;
}

/* Address of element (i, j) of a 2-D DLTensor. */
static const float *element(const DLTensor *t, int64_t i, int64_t j)
{
    int64_t k = i * t->strides[0] + j * t->strides[1];

    return (const float *)((const char *)t->data + t->byte_offset) + k;
}

/* Export a device array: layout, device, and the reference the tensor holds. */
static void test_export(void **state)
{
    int64_t shape[2] = {3, 4};
    float host[12];
    gm_context *ctx = ctx_as(GM_BACKEND_HOST);
    gm_array *a = NULL;
    DLManagedTensorVersioned *t = NULL;
    gm_ndview hv;

    (void)state;
    for (int i = 0; i < 12; i++)
        host[i] = (float)i;
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_to_device(ctx, &hv, NULL, &a));
    assert_ok(gm_array_to_dlpack(a, &t));
    assert_int_equal(t->version.major, 1);
    assert_int_equal(t->version.minor, 0);
    assert_int_equal(t->flags, 0);
    assert_int_equal(t->dl_tensor.device.device_type, kDLCPU); /* simulator memory */
    assert_int_equal(t->dl_tensor.device.device_id, 0);
    assert_int_equal(t->dl_tensor.ndim, 2);
    assert_int_equal(t->dl_tensor.dtype.code, kDLFloat);
    assert_int_equal(t->dl_tensor.dtype.bits, 32);
    assert_int_equal(t->dl_tensor.dtype.lanes, 1);
    assert_int_equal(t->dl_tensor.shape[0], 3);
    assert_int_equal(t->dl_tensor.shape[1], 4);
    assert_int_equal(t->dl_tensor.strides[0], 4);
    assert_int_equal(t->dl_tensor.strides[1], 1);
    assert_ptr_equal(t->dl_tensor.data, gm_array_view(a)->data);
    assert_int_equal(t->dl_tensor.byte_offset, 0);
    gm_array_release(&a); /* the tensor keeps the memory alive */
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    assert_true(*element(&t->dl_tensor, 2, 3) == 11.0f);
    t->deleter(t);
    assert_int_equal(rt_stats(ctx).pending_count, 1); /* now the memory is queued */
    gm_context_destroy(&ctx);
}

/* Views: negative strides, offsets, transposes; size 0; strides that count no elements. */
static void test_export_views(void **state)
{
    int64_t shape[2] = {3, 4}, zero = 0, odd_shape = 3, odd_stride = 3;
    float host[12];
    gm_context *ctx = ctx_as(GM_BACKEND_HOST);
    gm_array *a = NULL, *v = NULL, *z = NULL, *u = NULL, *odd = NULL;
    gm_index_item flip[2] = {GM_IDX_SLICE(GM_NONE, GM_NONE, -1), GM_IDX_SLICE(1, GM_NONE, 2)};
    DLManagedTensorVersioned *t = NULL;
    gm_ndview hv, ov;

    (void)state;
    for (int i = 0; i < 12; i++)
        host[i] = (float)i;
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_to_device(ctx, &hv, NULL, &a));
    assert_ok(gm_array_getitem(a, 2, flip, &v)); /* a[::-1, 1::2] */
    assert_ok(gm_array_to_dlpack(v, &t));
    assert_int_equal(t->dl_tensor.strides[0], -4);
    assert_int_equal(t->dl_tensor.strides[1], 2);
    assert_ptr_equal(t->dl_tensor.data, gm_array_view(a)->data);
    assert_true(*element(&t->dl_tensor, 0, 0) == 9.0f);
    assert_true(*element(&t->dl_tensor, 2, 1) == 3.0f);
    t->deleter(t);
    assert_ok(gm_device_array(ctx, 1, &zero, GM_FLOAT32, GM_ORDER_C, &z));
    assert_ok(gm_array_to_dlpack(z, &t));
    assert_null(t->dl_tensor.data);
    assert_int_equal(t->dl_tensor.byte_offset, 0);
    assert_int_equal(t->dl_tensor.shape[0], 0);
    t->deleter(t);
    /* a uint16 view with a 3-byte stride has no DLPack form */
    assert_ok(gm_device_array(ctx, 1, &shape[1], GM_UINT16, GM_ORDER_C, &u));
    assert_ok(gm_ndview_init(gm_array_view(u)->data, GM_UINT16, 1, &odd_shape, &odd_stride,
                             GM_ORDER_C, &ov));
    ov.memory = GM_MEMORY_DEVICE;
    assert_ok(gm_array_derive(u, &ov, &odd));
    assert_status(gm_array_to_dlpack(odd, &t), GM_ERR_INVALID_ARG);
    assert_message_contains("not a multiple of the item size");
    assert_status(gm_array_to_dlpack(NULL, &t), GM_ERR_NULL_POINTER);
    assert_status(gm_array_to_dlpack(a, NULL), GM_ERR_NULL_POINTER);
    rt_alloc_fail_at(1);
    assert_status(gm_array_to_dlpack(a, &t), GM_ERR_NO_MEMORY);
    assert_ok(gm_test_use_cmocka_allocator(NULL));
    gm_array_release(&odd);
    gm_array_release(&u);
    gm_array_release(&z);
    gm_array_release(&v);
    gm_array_release(&a);
    gm_context_destroy(&ctx);
}

/* Export one array of `memory` kind and return its device. */
static DLDevice export_kind(gm_context *ctx, gm_memory_kind memory)
{
    int64_t n = 16;
    gm_ndview layout;
    gm_array *a = NULL;
    DLManagedTensorVersioned *t = NULL;
    DLDevice dev;

    assert_ok(gm_ndview_init(NULL, GM_INT32, 1, &n, NULL, GM_ORDER_C, &layout));
    assert_ok(
        gm__array_create(ctx, "test", &layout, memory, memory == GM_MEMORY_MAPPED ? 4u : 0u, &a));
    assert_ok(gm_array_to_dlpack(a, &t));
    dev = t->dl_tensor.device;
    t->deleter(t);
    gm_array_release(&a);
    return dev;
}

/* DLDevice per backend and memory kind. */
static void test_export_devices(void **state)
{
    static const struct {
        gm_backend_kind backend;
        gm_memory_kind memory;
        int type;
        int id;
    } cases[] = {
        {GM_BACKEND_HOST, GM_MEMORY_DEVICE, kDLCPU, 0},
        {GM_BACKEND_HOST, GM_MEMORY_PINNED, kDLCPU, 0},
        {GM_BACKEND_HOST, GM_MEMORY_MANAGED, kDLCPU, 0},
        {GM_BACKEND_CUDA, GM_MEMORY_DEVICE, kDLCUDA, 0},
        {GM_BACKEND_CUDA, GM_MEMORY_PINNED, kDLCUDAHost, 0},
        {GM_BACKEND_CUDA, GM_MEMORY_MAPPED, kDLCUDAHost, 0},
        {GM_BACKEND_CUDA, GM_MEMORY_MANAGED, kDLCUDAManaged, 0},
        {GM_BACKEND_CUDA, GM_MEMORY_HOST, kDLCPU, 0},
        {GM_BACKEND_HSA, GM_MEMORY_DEVICE, kDLROCM, 0},
        {GM_BACKEND_HSA, GM_MEMORY_PINNED, kDLROCMHost, 0},
        {GM_BACKEND_HSA, GM_MEMORY_MAPPED, kDLROCMHost, 0},
        {GM_BACKEND_HSA, GM_MEMORY_HOST, kDLCPU, 0},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        gm_context *ctx = ctx_as(cases[i].backend);
        DLDevice dev = export_kind(ctx, cases[i].memory);

        assert_int_equal(dev.device_type, cases[i].type);
        assert_int_equal(dev.device_id, cases[i].id);
        gm_context_destroy(&ctx);
    }
}

/* Round trip: export, import into the same context, the deleter on the last release. */
static void test_round_trip(void **state)
{
    int64_t shape[2] = {3, 4};
    float host[12], back[12];
    gm_context *ctx = ctx_as(GM_BACKEND_HOST);
    gm_array *a = NULL, *b = NULL, *col = NULL;
    DLManagedTensorVersioned *t = NULL;
    gm_ndview hv, bv;
    gm_dealloc_stats s0;

    (void)state;
    for (int i = 0; i < 12; i++)
        host[i] = (float)(i * i);
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_to_device(ctx, &hv, NULL, &a));
    assert_ok(gm_array_to_dlpack(a, &t));
    gm_array_release(&a);
    assert_ok(gm_array_from_dlpack(ctx, t, &b));
    assert_int_equal(gm_array_view(b)->memory, GM_MEMORY_DEVICE); /* the simulator knows it */
    assert_int_equal(gm_array_view(b)->device_id, 0);
    assert_ok(gm_array_transpose(b, &col));
    gm_array_release(&b);
    assert_ok(gm_ndview_init(back, GM_FLOAT32, 2, (int64_t[]){4, 3}, NULL, GM_ORDER_C, &bv));
    assert_ok(gm_array_copy_to_host(col, &bv, NULL));
    assert_true(back[1] == 16.0f && back[11] == 121.0f);
    s0 = rt_stats(ctx);
    gm_array_release(&col); /* deleter -> releases the original array -> queued */
    assert_int_equal(rt_stats(ctx).pending_count, s0.pending_count + 1);
    gm_context_destroy(&ctx);
}

/* Import of caller memory: strides NULL, explicit strides, byte_offset, deleter. */
static void test_import_host(void **state)
{
    float data[24];
    made_tensor m;
    gm_context *ctx = ctx_as(GM_BACKEND_HOST);
    gm_array *a = NULL;
    const gm_ndview *v = NULL;

    (void)state;
    for (int i = 0; i < 24; i++)
        data[i] = (float)i;
    made_init(&m, data, 4, 6);
    assert_ok(gm_array_from_dlpack(ctx, &m.t, &a));
    v = gm_array_view(a);
    assert_int_equal(v->memory, GM_MEMORY_HOST);
    assert_int_equal(v->device_id, -1);
    assert_int_equal(v->strides[0], 24);
    assert_int_equal(v->strides[1], 4);
    assert_true(gm_ndview_is_c_contiguous(v));
    assert_int_equal(deletes, 0);
    gm_array_release(&a);
    assert_int_equal(deletes, 1);
    /* every other column from element (1, 1): byte_offset and element strides */
    made_init(&m, data, 3, 3);
    m.strides[0] = 6;
    m.strides[1] = 2;
    m.t.dl_tensor.strides = m.strides;
    m.t.dl_tensor.byte_offset = 7 * sizeof(float);
    assert_ok(gm_array_from_dlpack(ctx, &m.t, &a));
    v = gm_array_view(a);
    assert_int_equal(v->strides[1], 8);
    assert_true(*(const float *)((const char *)v->data + v->offset + 2 * v->strides[0] +
                                 v->strides[1]) == 21.0f);
    gm_array_release(&a);
    assert_int_equal(deletes, 2);
    /* no deleter: nothing to call */
    made_init(&m, data, 2, 2);
    m.t.deleter = NULL;
    assert_ok(gm_array_from_dlpack(ctx, &m.t, &a));
    gm_array_release(&a);
    assert_int_equal(deletes, 2);
    gm_context_destroy(&ctx);
}

/* Import of GPU device types on backends relabelled as CUDA / HSA. */
static void test_import_devices(void **state)
{
    static const struct {
        gm_backend_kind backend;
        int type;
        int32_t id;
        gm_status status;
        gm_memory_kind memory;
    } cases[] = {
        {GM_BACKEND_CUDA, kDLCUDA, 0, GM_OK, GM_MEMORY_DEVICE},
        {GM_BACKEND_CUDA, kDLCUDA, 1, GM_ERR_WRONG_CONTEXT, GM_MEMORY_HOST},
        {GM_BACKEND_CUDA, kDLCUDAManaged, 0, GM_OK, GM_MEMORY_MANAGED},
        {GM_BACKEND_CUDA, kDLCUDAHost, 0, GM_OK, GM_MEMORY_PINNED},
        {GM_BACKEND_CUDA, kDLROCM, 0, GM_ERR_UNSUPPORTED, GM_MEMORY_HOST},
        {GM_BACKEND_CUDA, kDLCPU, 0, GM_OK, GM_MEMORY_HOST},
        {GM_BACKEND_HSA, kDLROCM, 0, GM_OK, GM_MEMORY_DEVICE},
        {GM_BACKEND_HSA, kDLROCMHost, 0, GM_OK, GM_MEMORY_PINNED},
        {GM_BACKEND_HSA, kDLCUDAHost, 0, GM_ERR_UNSUPPORTED, GM_MEMORY_HOST},
        {GM_BACKEND_HOST, kDLCUDA, 0, GM_ERR_UNSUPPORTED, GM_MEMORY_HOST},
        {GM_BACKEND_HOST, kDLCUDAHost, 0, GM_OK, GM_MEMORY_PINNED},
        {GM_BACKEND_HOST, kDLROCMHost, 0, GM_OK, GM_MEMORY_PINNED},
        {GM_BACKEND_HOST, kDLOpenCL, 0, GM_ERR_UNSUPPORTED, GM_MEMORY_HOST},
    };
    float data[4] = {0};

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        gm_context *ctx = ctx_as(cases[i].backend);
        gm_array *a = NULL;
        made_tensor m;

        made_init(&m, data, 2, 2);
        m.t.dl_tensor.device.device_type = (DLDeviceType)cases[i].type;
        m.t.dl_tensor.device.device_id = cases[i].id;
        assert_status(gm_array_from_dlpack(ctx, &m.t, &a), cases[i].status);
        if (cases[i].status == GM_OK)
            assert_int_equal(gm_array_view(a)->memory, cases[i].memory);
        gm_array_release(&a);
        gm_context_destroy(&ctx);
    }
    assert_int_equal(deletes, 8); /* the successful imports */
}

/* The simulator's init, told device 0 whatever the context asks for. */
static gm_op_init *real_init;

static gm_status init_as_device_0(const gm_backend_init_args *args, gm_backend_ctx **bctx_p)
{
    gm_backend_init_args a = *args;

    a.device_id = 0;
    return real_init(&a, bctx_p);
}

/*
 * On a context of device 1 (relabelled CUDA, then HSA): kDLCUDA / kDLROCM
 * tensors must name device 1, while pinned and managed ones carry device id
 * 0 as DLPack says, so they import, and a managed array's own export (id 0)
 * imports back.
 */
static void test_import_on_device_1(void **state)
{
    static const struct {
        gm_backend_kind backend;
        int type;
        int32_t id;
        gm_status status;
    } cases[] = {
        {GM_BACKEND_CUDA, kDLCUDA, 1, GM_OK},
        {GM_BACKEND_CUDA, kDLCUDA, 0, GM_ERR_WRONG_CONTEXT},
        {GM_BACKEND_CUDA, kDLCUDAManaged, 0, GM_OK},
        {GM_BACKEND_CUDA, kDLCUDAHost, 0, GM_OK},
        {GM_BACKEND_HSA, kDLROCM, 1, GM_OK},
        {GM_BACKEND_HSA, kDLROCM, 0, GM_ERR_WRONG_CONTEXT},
        {GM_BACKEND_HSA, kDLROCMHost, 0, GM_OK},
    };
    gm_context_options o = rt_options(1000, 10.0, BIG);
    float data[4] = {0};
    int64_t n = 4;

    (void)state;
    real_init = rt_fault_ops()->init;
    rt_fault_ops()->init = init_as_device_0;
    o.device_id = 1;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        gm_context *ctx = NULL;
        gm_array *a = NULL, *managed = NULL;
        DLManagedTensorVersioned *t = NULL;
        made_tensor m;

        rt_fault_ops()->kind = cases[i].backend;
        assert_ok(rt_fault_context(&o, &ctx));
        made_init(&m, data, 2, 2);
        m.t.dl_tensor.device.device_type = (DLDeviceType)cases[i].type;
        m.t.dl_tensor.device.device_id = cases[i].id;
        assert_status(gm_array_from_dlpack(ctx, &m.t, &a), cases[i].status);
        if (cases[i].status != GM_OK)
            assert_message_contains("the tensor is on device 0, the context on device 1");
        gm_array_release(&a);
        if (cases[i].backend == GM_BACKEND_CUDA && cases[i].type == kDLCUDAManaged) {
            assert_ok(gm_managed_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &managed));
            assert_ok(gm_array_to_dlpack(managed, &t));
            assert_int_equal(t->dl_tensor.device.device_type, kDLCUDAManaged);
            assert_int_equal(t->dl_tensor.device.device_id, 0);
            assert_ok(gm_array_from_dlpack(ctx, t, &a));
            assert_int_equal(gm_array_view(a)->memory, GM_MEMORY_MANAGED);
            assert_int_equal(gm_array_view(a)->device_id, 1);
            gm_array_release(&a);
            gm_array_release(&managed);
        }
        gm_context_destroy(&ctx);
    }
    rt_fault_ops()->init = real_init;
}

/* Every import error keeps the tensor with the caller (no deleter call). */
static void test_import_errors(void **state)
{
    float data[4] = {0};
    made_tensor m;
    gm_context *ctx = ctx_as(GM_BACKEND_HOST);
    gm_array *a = NULL;

    (void)state;
    made_init(&m, data, 2, 2);
    assert_status(gm_array_from_dlpack(NULL, &m.t, &a), GM_ERR_NULL_POINTER);
    assert_status(gm_array_from_dlpack(ctx, NULL, &a), GM_ERR_NULL_POINTER);
    assert_message_contains("tensor is NULL");
    assert_status(gm_array_from_dlpack(ctx, &m.t, NULL), GM_ERR_NULL_POINTER);
#define EXPECT(change, status, text)                                \
    do {                                                            \
        made_init(&m, data, 2, 2);                                  \
        change;                                                     \
        assert_status(gm_array_from_dlpack(ctx, &m.t, &a), status); \
        assert_message_contains(text);                              \
        assert_null(a);                                             \
    } while (0)
    EXPECT(m.t.version.major = 2, GM_ERR_VERSION_MISMATCH, "the tensor is DLPack 2.3");
    EXPECT(m.t.flags = DLPACK_FLAG_BITMASK_READ_ONLY, GM_ERR_PERMISSION, "read-only");
    EXPECT(m.t.dl_tensor.dtype.code = kDLOpaqueHandle, GM_ERR_DTYPE, "{code 3, bits 32");
    EXPECT(m.t.dl_tensor.dtype.bits = 12, GM_ERR_DTYPE, "not supported");
    EXPECT(m.t.dl_tensor.ndim = GM_MAX_DIMS + 1, GM_ERR_TOO_MANY_DIMS, "");
    EXPECT(m.t.dl_tensor.ndim = -1, GM_ERR_INVALID_ARG, "");
    EXPECT(m.t.dl_tensor.shape = NULL, GM_ERR_NULL_POINTER, "dl_tensor.shape is NULL");
    EXPECT(m.shape[1] = -1, GM_ERR_INVALID_ARG,
           "gm_array_from_dlpack: negative extent -1 on axis 1");
    EXPECT((m.strides[0] = INT64_MAX / 2, m.t.dl_tensor.strides = m.strides), GM_ERR_OVERFLOW,
           "stride 4611686018427387903 of axis 0 overflows");
    EXPECT(m.t.dl_tensor.byte_offset = UINT64_MAX, GM_ERR_OVERFLOW, "byte_offset");
    EXPECT(m.t.dl_tensor.data = NULL, GM_ERR_NULL_POINTER,
           "gm_array_from_dlpack: view->data is NULL"); /* the foreign-array checks */
#undef EXPECT
    /* a copied (IS_COPIED) tensor is fine */
    made_init(&m, data, 2, 2);
    m.t.flags = DLPACK_FLAG_BITMASK_IS_COPIED;
    assert_ok(gm_array_from_dlpack(ctx, &m.t, &a));
    gm_array_release(&a);
    assert_int_equal(deletes, 1);
    gm_context_destroy(&ctx);
}

/* The legacy unversioned structure. */
static void test_import_legacy(void **state)
{
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[1] = {6};
    DLManagedTensor t;
    gm_context *ctx = ctx_as(GM_BACKEND_HOST);
    gm_array *a = NULL;

    (void)state;
    memset(&t, 0, sizeof(t));
    t.dl_tensor.data = data;
    t.dl_tensor.device.device_type = kDLCPU;
    t.dl_tensor.ndim = 1;
    t.dl_tensor.dtype.code = kDLFloat;
    t.dl_tensor.dtype.bits = 32;
    t.dl_tensor.dtype.lanes = 1;
    t.dl_tensor.shape = shape;
    t.deleter = legacy_deleter;
    assert_ok(gm_array_from_dlpack_legacy(ctx, &t, &a));
    assert_ptr_equal(gm_array_view(a)->data, data);
    assert_int_equal(gm_array_view(a)->shape[0], 6);
    gm_array_release(&a);
    assert_int_equal(deletes, 1);
    t.deleter = NULL;
    assert_ok(gm_array_from_dlpack_legacy(ctx, &t, &a));
    gm_array_release(&a);
    assert_status(gm_array_from_dlpack_legacy(NULL, &t, &a), GM_ERR_NULL_POINTER);
    assert_status(gm_array_from_dlpack_legacy(ctx, NULL, &a), GM_ERR_NULL_POINTER);
    assert_status(gm_array_from_dlpack_legacy(ctx, &t, NULL), GM_ERR_NULL_POINTER);
    t.dl_tensor.dtype.bits = 3;
    assert_status(gm_array_from_dlpack_legacy(ctx, &t, &a), GM_ERR_DTYPE);
    assert_int_equal(deletes, 1);
    gm_context_destroy(&ctx);
}

/* Bookkeeping allocation failures during import: the caller keeps the tensor. */
static void test_import_allocation_failures(void **state)
{
    float data[4] = {0};
    made_tensor m;
    gm_context *ctx = ctx_as(GM_BACKEND_HOST);
    gm_array *a = NULL;
    gm_status s = GM_OK;
    int64_t k = 1;

    (void)state;
    made_init(&m, data, 2, 2);
    for (;; k++) {
        rt_alloc_fail_at(k);
        s = gm_array_from_dlpack(ctx, &m.t, &a);
        assert_ok(gm_test_use_cmocka_allocator(NULL));
        if (s == GM_OK)
            break;
        assert_status(s, GM_ERR_NO_MEMORY);
        assert_int_equal(deletes, 0);
    }
    assert_true(k > 2);
    gm_array_release(&a);
    assert_int_equal(deletes, 1);
    gm_context_destroy(&ctx);
}

/*
 * An export outlives its context: teardown detaches it (warning, and its
 * array counts among the live arrays); the deleter, called afterwards, frees
 * only the tensor (cmocka checks that nothing leaks, ASan that nothing freed is
 * touched).
 */
static void test_export_outlives_context(void **state)
{
    int64_t shape[2] = {3, 4};
    float host[12] = {0};
    gm_context *ctx = ctx_as(GM_BACKEND_HOST);
    gm_array *a = NULL, *row = NULL;
    DLManagedTensorVersioned *t = NULL, *u = NULL, *done = NULL;
    gm_ndview hv;

    (void)state;
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_to_device(ctx, &hv, NULL, &a));
    assert_ok(gm_array_to_dlpack(a, &t));    /* held by the export only */
    assert_ok(gm_array_to_dlpack(a, &done)); /* deleted before the teardown */
    assert_ok(gm_array_transpose(a, &row));
    assert_ok(gm_array_to_dlpack(row, &u)); /* a view still held by the application */
    gm_array_release(&a);
    done->deleter(done);
    rt_log_capture(GM_LOG_WARN);
    gm_context_destroy(&ctx);
    rt_log_stop();
    assert_true(t->dl_tensor.shape[0] == 3 && u->dl_tensor.shape[0] == 4); /* the tensor's own */
    t->deleter(t);
    u->deleter(u);
    assert_true(rt_log_contains(GM_LOG_WARN, "2 DLPack exports still alive"));
    assert_true(rt_log_contains(GM_LOG_WARN, "2 arrays still alive"));
}

/*
 * An export imported back into its own context and still alive at teardown:
 * freeing the imported array calls the export's deleter during the teardown,
 * after the exported array itself was freed.
 */
static void test_export_imported_at_teardown(void **state)
{
    int64_t shape[1] = {16};
    float host[16] = {0};
    gm_context *ctx = ctx_as(GM_BACKEND_HOST);
    gm_array *a = NULL, *b = NULL;
    DLManagedTensorVersioned *t = NULL;
    gm_ndview hv;

    (void)state;
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 1, shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_to_device(ctx, &hv, NULL, &a));
    assert_ok(gm_array_to_dlpack(a, &t));
    assert_ok(gm_array_from_dlpack(ctx, t, &b)); /* b owns t */
    gm_array_release(&a);
    rt_log_capture(GM_LOG_WARN);
    gm_context_destroy(&ctx); /* frees a, then b, whose release calls t's deleter */
    rt_log_stop();
    assert_true(rt_log_contains(GM_LOG_WARN, "1 DLPack exports still alive"));
    assert_true(rt_log_contains(GM_LOG_WARN, "2 arrays still alive"));
}

/* Deleters running on another thread while the context is destroyed. */
typedef struct deleter_run {
    DLManagedTensorVersioned **tensors;
    int count;
} deleter_run;

static void *delete_all(void *arg)
{
    deleter_run *run = arg;

    for (int i = 0; i < run->count; i++)
        run->tensors[i]->deleter(run->tensors[i]);
    return NULL;
}

/*
 * Whichever side wins each race (the deleter releasing the array, or the
 * teardown detaching the export first), nothing is freed twice or leaked
 * (ASan; TSan checks the locking). cmocka's leak-checking allocator is
 * single-threaded, so this test runs on the C library's allocator.
 */
static void test_export_deleter_races_teardown(void **state)
{
    enum { ROUNDS = 20, EXPORTS = 64 };
    int64_t shape[1] = {8};

    (void)state;
    assert_ok(gm_set_host_allocator(NULL));
    for (int round = 0; round < ROUNDS; round++) {
        DLManagedTensorVersioned *tensors[EXPORTS];
        deleter_run run = {tensors, EXPORTS};
        gm_context *ctx = ctx_as(GM_BACKEND_HOST);
        pthread_t thread;

        for (int i = 0; i < EXPORTS; i++) {
            gm_array *a = NULL;

            assert_ok(gm_device_array(ctx, 1, shape, GM_FLOAT32, GM_ORDER_C, &a));
            assert_ok(gm_array_to_dlpack(a, &tensors[i]));
            gm_array_release(&a);
        }
        rt_log_capture(GM_LOG_WARN); /* keep the teardown's warnings off the output */
        assert_int_equal(pthread_create(&thread, NULL, delete_all, &run), 0);
        gm_context_destroy(&ctx);
        assert_int_equal(pthread_join(thread, NULL), 0);
        rt_log_stop();
    }
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/* A callback that exports an array once gm_context_destroy, which waits for it, has begun. */
typedef struct late_export {
    gm_array *array;
    DLManagedTensorVersioned *tensor;
    gm_status status;
} late_export;

static void export_late(gm_stream *stream, gm_status status, void *user)
{
    late_export *job = user;
    struct timespec pause = {0, 100 * 1000 * 1000}; /* the teardown has begun meanwhile */

    (void)stream;
    (void)status;
    nanosleep(&pause, NULL);
    job->status = gm_array_to_dlpack(job->array, &job->tensor);
}

/*
 * An export made by a callback that the teardown waits for is detached too
 * (the teardown detached exports before waiting for the streams: this one
 * stayed attached, and its deleter, called afterwards, released an array
 * freed with the context: ASan saw a heap-use-after-free).
 */
static void test_export_made_by_callback_during_teardown(void **state)
{
    int64_t shape[1] = {8};
    gm_context *ctx = NULL;
    gm_stream *st = NULL;
    late_export job = {NULL, NULL, GM_ERR_INTERNAL};

    (void)state;
    assert_ok(gm_set_host_allocator(NULL)); /* the callback allocates on a worker thread */
    ctx = ctx_as(GM_BACKEND_HOST);
    assert_ok(gm_device_array(ctx, 1, shape, GM_FLOAT32, GM_ORDER_C, &job.array));
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_stream_add_callback(st, export_late, &job));
    rt_log_capture(GM_LOG_WARN);
    gm_context_destroy(&ctx);
    rt_log_stop();
    assert_ok(job.status);
    assert_non_null(job.tensor);
    assert_true(rt_log_contains(GM_LOG_WARN, "1 DLPack exports still alive"));
    job.tensor->deleter(job.tensor); /* detached: frees only the tensor */
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_export, test_setup),
        cmocka_unit_test_setup(test_export_views, test_setup),
        cmocka_unit_test_setup(test_export_devices, test_setup),
        cmocka_unit_test_setup(test_round_trip, test_setup),
        cmocka_unit_test_setup(test_import_host, test_setup),
        cmocka_unit_test_setup(test_import_devices, test_setup),
        cmocka_unit_test_setup(test_import_on_device_1, test_setup),
        cmocka_unit_test_setup(test_import_errors, test_setup),
        cmocka_unit_test_setup(test_import_legacy, test_setup),
        cmocka_unit_test_setup(test_import_allocation_failures, test_setup),
        cmocka_unit_test_setup(test_export_outlives_context, test_setup),
        cmocka_unit_test_setup(test_export_imported_at_teardown, test_setup),
        cmocka_unit_test_setup(test_export_deleter_races_teardown, test_setup),
        cmocka_unit_test_setup(test_export_made_by_callback_during_teardown, test_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, gm_test_restore_allocator);
}
