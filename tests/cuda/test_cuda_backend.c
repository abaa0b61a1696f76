/*
 * The CUDA backend against the driver test double: the ops table, driver
 * loading, init/fini call order, CUresult translation and error detail,
 * memory ops, the current context on other threads, and a fault-injection
 * sweep proving that every error path releases what it took.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "cuda_test_util.h"
#include "test_kernels.h"

/* Every slot of the table is filled; identity fields are right. */
static void test_ops_table_complete(void **state)
{
    const gm_backend_ops *ops = CUDA_OPS;
#define SLOT(name) (ops->name != NULL)
    const int filled[] = {SLOT(init),
                          SLOT(fini),
                          SLOT(device_info),
                          SLOT(mem_info),
                          SLOT(mem_alloc),
                          SLOT(mem_free),
                          SLOT(mem_free_batch),
                          SLOT(host_alloc),
                          SLOT(host_free),
                          SLOT(host_device_pointer),
                          SLOT(host_register),
                          SLOT(host_unregister),
                          SLOT(managed_alloc),
                          SLOT(pointer_kind),
                          SLOT(copy),
                          SLOT(copy_strided),
                          SLOT(copy_views),
                          SLOT(memset),
                          SLOT(stream_create),
                          SLOT(stream_destroy),
                          SLOT(stream_builtin),
                          SLOT(stream_wrap),
                          SLOT(stream_unwrap),
                          SLOT(stream_native),
                          SLOT(stream_synchronize),
                          SLOT(stream_query),
                          SLOT(stream_add_callback),
                          SLOT(stream_enqueue_host),
                          SLOT(device_synchronize),
                          SLOT(event_create),
                          SLOT(event_destroy),
                          SLOT(event_record),
                          SLOT(stream_wait_event),
                          SLOT(event_query),
                          SLOT(event_synchronize),
                          SLOT(event_elapsed),
                          SLOT(module_load),
                          SLOT(module_unload),
                          SLOT(module_get_kernel),
                          SLOT(module_get_global),
                          SLOT(kernel_attrs),
                          SLOT(launch),
                          SLOT(ipc_get_handle),
                          SLOT(ipc_open),
                          SLOT(ipc_close)};
#undef SLOT

    (void)state;
    assert_int_equal(ops->size, sizeof(gm_backend_ops));
    assert_int_equal(ops->abi_version, GM_BACKEND_ABI_VERSION);
    assert_int_equal(ops->kind, GM_BACKEND_CUDA);
    assert_string_equal(ops->name, "cuda");
    for (size_t i = 0; i < sizeof(filled) / sizeof(filled[0]); i++)
        assert_true(filled[i]);
    /* copy_strided launches the packing kernel; the one deliberate stub is module_set_global
     * (the core writes constants through module_get_global and an ordinary copy). */
    assert_ptr_not_equal(ops->copy_strided, gm__unsupported_copy_strided);
    assert_ptr_equal(ops->module_set_global, gm__unsupported_module_set_global);
    assert_ptr_equal(ops->copy_views, gm__unsupported_copy_views); /* copies planned */
}

/* The X-macro list resolves the versioned symbols cuda.h maps the API names to. */
static void test_symbols_are_versioned(void **state)
{
    static const char *const versioned[] = {"cuMemAlloc_v2",
                                            "cuMemFree_v2",
                                            "cuMemHostRegister_v2",
                                            "cuModuleGetGlobal_v2",
                                            "cuMemGetInfo_v2",
                                            "cuDeviceTotalMem_v2",
                                            "cuMemHostGetDevicePointer_v2",
                                            "cuDevicePrimaryCtxRelease_v2",
                                            "cuIpcOpenMemHandle_v2",
                                            "cuStreamDestroy_v2",
                                            "cuEventDestroy_v2",
                                            "cuEventElapsedTime_v2",
                                            "cuMemcpyHtoD_v2",
                                            "cuMemcpy2D_v2",
                                            "cuMemcpy2DAsync_v2",
                                            "cuMemcpy3D_v2",
                                            "cuMemcpy3DAsync_v2",
                                            "cuMemsetD8_v2",
                                            "cuMemsetD2D32_v2",
                                            "cuLaunchKernel",
                                            "cuStreamAddCallback"};
    size_t n = gm__cuda_driver_symbol_count();

    (void)state;
    for (size_t v = 0; v < sizeof(versioned) / sizeof(versioned[0]); v++) {
        int found = 0;

        for (size_t i = 0; i < n; i++)
            found |= strcmp(gm__cuda_driver_symbol_name(i), versioned[v]) == 0;
        if (found == 0)
            fail_msg("%s is not in the entry point list", versioned[v]);
    }
    for (size_t i = 0; i < n; i++) {
        assert_string_not_equal(gm__cuda_driver_symbol_name(i), "cuMemAlloc");
        assert_string_not_equal(gm__cuda_driver_symbol_name(i), "cuMemHostRegister");
    }
    assert_null(gm__cuda_driver_symbol_name(n));
}

/* init: cuInit, version, device, primary context retained (ops make it current); fini releases. */
static void test_init_fini_call_order(void **state)
{
    static const char *const order[] = {"cuInit",
                                        "cuDriverGetVersion",
                                        "cuDeviceGetCount",
                                        "cuDeviceGet",
                                        "cuDevicePrimaryCtxRetain",
                                        "cuDeviceGetName",
                                        "cuDeviceTotalMem_v2"};
    gm_backend_init_args args = {0, 32};
    gm_backend_ctx *bctx = NULL;
    gm_device_info info;
    int64_t free_bytes = 0;
    int64_t total = 0;

    (void)state;
    assert_ok(CUDA_OPS->init(&args, &bctx));
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
        assert_string_equal(gm_cuda_double_call_name((long)i), order[i]);
    assert_int_equal(gm_cuda_double_live_objects(), 1); /* the primary context retain */
    memset(&info, 0, sizeof(info));
    assert_ok(CUDA_OPS->device_info(bctx, &info));
    assert_string_equal(info.name, "gpumem CUDA driver double 0");
    assert_int_equal(info.backend, GM_BACKEND_CUDA);
    assert_int_equal(info.warp_size, 32);
    assert_int_equal(info.max_threads_per_block, 1024);
    assert_int_equal(info.max_block_dim[2], 64);
    assert_int_equal(info.max_grid_dim[1], 65535);
    assert_int_equal(info.shared_memory_per_block, 48 * 1024);
    assert_int_equal(info.total_memory, 64 << 20);
    assert_ok(CUDA_OPS->mem_info(bctx, &free_bytes, &total));
    assert_int_equal(total, 64 << 20);
    assert_int_equal(free_bytes, total);
    gm_cuda_double_clear_calls();
    cuda_test_close(bctx);
    assert_int_equal(gm_cuda_double_count_calls("cuDevicePrimaryCtxRelease_v2"), 1);
}

/*
 * A device whose primary context cannot be had (another process holds it in
 * exclusive mode, no memory left for it) is no usable device: GM_ERR_NO_DEVICE
 * with the driver's reason, so that GM_BACKEND=auto falls back; nothing stays.
 */
static void test_primary_context_refused(void **state)
{
    gm_backend_init_args args = {0, 32};
    gm_backend_ctx *bctx = NULL;

    (void)state;
    gm_cuda_double_fail("cuDevicePrimaryCtxRetain", 1, CUDA_ERROR_DEVICE_UNAVAILABLE);
    assert_status(CUDA_OPS->init(&args, &bctx), GM_ERR_NO_DEVICE);
    assert_message_contains("cannot use the device's primary context");
    assert_message_contains("CUDA_ERROR_DEVICE_UNAVAILABLE");
    assert_null(bctx);
    gm_cuda_double_fail("cuDeviceGetName", 1, CUDA_ERROR_OUT_OF_MEMORY);
    assert_status(CUDA_OPS->init(&args, &bctx), GM_ERR_NO_DEVICE);
    assert_message_contains("cannot read the device's properties: cuDeviceGetName failed");
    assert_null(strstr(gm_last_error_message(), "properties: cuda: cannot")); /* said once */
    assert_null(bctx);
    assert_int_equal(gm_cuda_double_live_objects(), 0);
}

/* No library at the path: GM_ERR_NO_DRIVER naming it. */
static void test_no_driver(void **state)
{
    const char *saved = getenv(GM_CUDA_DRIVER_PATH_ENV);
    char keep[1024];
    gm_backend_init_args args = {0, 32};
    gm_backend_ctx *bctx = NULL;

    (void)state;
    snprintf(keep, sizeof(keep), "%s", saved != NULL ? saved : "");
    setenv(GM_CUDA_DRIVER_PATH_ENV, "/nonexistent/gpumem/libcuda.so.1", 1);
    assert_status(CUDA_OPS->init(&args, &bctx), GM_ERR_NO_DRIVER);
    assert_message_contains("/nonexistent/gpumem/libcuda.so.1");
    assert_null(bctx);
    if (getenv("GM_TEST_CUDA_INCOMPLETE") != NULL) {
        setenv(GM_CUDA_DRIVER_PATH_ENV, getenv("GM_TEST_CUDA_INCOMPLETE"), 1);
        assert_status(CUDA_OPS->init(&args, &bctx), GM_ERR_NO_DRIVER);
        assert_message_contains("has no entry point cuDriverGetVersion");
    }
    setenv(GM_CUDA_DRIVER_PATH_ENV, keep, 1);
    assert_int_equal(gm_cuda_double_live_objects(), 0);
}

/* Every way init fails for lack of a device is GM_ERR_NO_DEVICE with the driver's words. */
static void test_no_device(void **state)
{
    gm_backend_init_args args = {0, 32};
    gm_backend_ctx *bctx = NULL;

    (void)state;
    gm_cuda_double_fail("cuInit", 1, CUDA_ERROR_NO_DEVICE);
    assert_status(CUDA_OPS->init(&args, &bctx), GM_ERR_NO_DEVICE);
    assert_message_contains("cuInit failed: CUDA_ERROR_NO_DEVICE");
    assert_message_contains("no CUDA-capable device is detected (double)");
    assert_message_contains("CUresult 100");

    /* A code the driver cannot name (as the stub library): the library's own name table. */
    gm_cuda_double_fail("cuInit", 1, CUDA_ERROR_STUB_LIBRARY);
    assert_status(CUDA_OPS->init(&args, &bctx), GM_ERR_NO_DEVICE);
    assert_message_contains("CUDA_ERROR_STUB_LIBRARY");

    gm_cuda_double_set_device_count(0);
    assert_status(CUDA_OPS->init(&args, &bctx), GM_ERR_NO_DEVICE);
    assert_message_contains("reports no CUDA device");

    gm_cuda_double_set_device_count(1);
    args.device_id = 1;
    assert_status(CUDA_OPS->init(&args, &bctx), GM_ERR_NO_DEVICE);
    assert_message_contains("device 1 requested");
    assert_null(bctx);
    assert_int_equal(gm_cuda_double_live_objects(), 0);
    assert_no_violations();
}

/* A failure after the context was retained releases it again. */
static void test_init_unwinds(void **state)
{
    static const char *const steps[] = {"cuDeviceGetName", "cuDeviceTotalMem_v2",
                                        "cuDeviceGetAttribute"};
    static const char *const api[] = {"cuDeviceGetName failed", "cuDeviceTotalMem failed",
                                      "cuDeviceGetAttribute failed"};
    gm_backend_init_args args = {0, 32};
    gm_backend_ctx *bctx = NULL;

    (void)state;
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        gm_cuda_double_fail(steps[i], 1, CUDA_ERROR_UNKNOWN);
        assert_int_not_equal(CUDA_OPS->init(&args, &bctx), GM_OK);
        assert_message_contains(api[i]);
        assert_int_equal(gm_cuda_double_live_objects(), 0);
    }
    assert_null(bctx);
    assert_no_violations();
}

/* CUresult -> gm_status, and the detail: call, driver name and string, code, file, line. */
static void test_error_translation(void **state)
{
    static const struct {
        CUresult result;
        gm_status status;
        const char *name;
    } cases[] = {
        {CUDA_ERROR_OUT_OF_MEMORY, GM_ERR_OUT_OF_DEVICE_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
        {CUDA_ERROR_INVALID_VALUE, GM_ERR_INVALID_ARG, "CUDA_ERROR_INVALID_VALUE"},
        {CUDA_ERROR_INVALID_CONTEXT, GM_ERR_INVALID_HANDLE, "CUDA_ERROR_INVALID_CONTEXT"},
        {CUDA_ERROR_LAUNCH_FAILED, GM_ERR_CONTEXT_LOST, "CUDA_ERROR_LAUNCH_FAILED"},
        {CUDA_ERROR_ILLEGAL_ADDRESS, GM_ERR_CONTEXT_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS"},
        {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, GM_ERR_LAUNCH, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
        {CUDA_ERROR_ASSERT, GM_ERR_CONTEXT_LOST, "CUDA_ERROR_ASSERT"},
        {CUDA_ERROR_NOT_SUPPORTED, GM_ERR_UNSUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"},
        {CUDA_ERROR_NOT_PERMITTED, GM_ERR_PERMISSION, "CUDA_ERROR_NOT_PERMITTED"},
        {CUDA_ERROR_ECC_UNCORRECTABLE, GM_ERR_DRIVER, "CUDA_ERROR_ECC_UNCORRECTABLE"},
        {(CUresult)4242, GM_ERR_DRIVER, "CUDA_ERROR_(unknown)"},
    };
    gm_backend_ctx *bctx = cuda_test_open();
    gm_devptr ptr = 0;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char code[32];

        gm_cuda_double_fail("cuMemAlloc_v2", 1, cases[i].result);
        assert_status(CUDA_OPS->mem_alloc(bctx, 64, &ptr), cases[i].status);
        assert_int_equal(gm_last_error(), cases[i].status);
        assert_message_contains("cuMemAlloc failed");
        assert_message_contains(cases[i].name);
        assert_message_contains("src/cuda/cuda_memory.c:");
        assert_message_contains("mem_alloc of 64 bytes");
        snprintf(code, sizeof(code), "CUresult %d", (int)cases[i].result);
        assert_message_contains(code);
        assert_int_equal(ptr, 0); /* outputs untouched on failure */
    }
    gm_cuda_double_fail("cuMemAlloc_v2", 1, CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(CUDA_OPS->mem_alloc(bctx, 64, &ptr), GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_message_contains("out of memory (double)"); /* the driver's own string */
    cuda_test_close(bctx);
}

/*
 * The sticky CUresults, read from the doc comments of the cuda.h the build
 * used ($GM_TEST_CUDA_H): those that leave "the process in an inconsistent
 * state", say it "must be terminated and relaunched" or that the context
 * "cannot be used anymore" translate to GM_ERR_CONTEXT_LOST, and no other
 * result of the header does.
 */
static void test_sticky_errors_from_cuda_h(void **state)
{
    const char *path = getenv("GM_TEST_CUDA_H");
    FILE *f = path != NULL ? fopen(path, "r") : NULL;
    char line[512], name[128];
    bool sticky_doc = false;
    int code = 0, sticky = 0, results = 0;

    (void)state;
    if (f == NULL)
        skip(); /* cuda.h came from the compiler's default path: not located */
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, "/**") != NULL)
            sticky_doc = false;
        if (strstr(line, "inconsistent state") != NULL || strstr(line, "relaunched") != NULL ||
            strstr(line, "cannot be used anymore") != NULL)
            sticky_doc = true;
        if (sscanf(line, " CUDA_ERROR_%127[A-Z0-9_] = %d", name, &code) != 2)
            continue;
        results++;
        if (sticky_doc != (gm__cuda_translate(code) == GM_ERR_CONTEXT_LOST))
            fail_msg("CUDA_ERROR_%s (%d): cuda.h %s it sticky, it translates to %s", name, code,
                     sticky_doc ? "calls" : "does not call",
                     gm_status_name(gm__cuda_translate(code)));
        sticky += sticky_doc ? 1 : 0;
        sticky_doc = false;
    }
    fclose(f);
    assert_in_range(results, 100, 1000); /* the enum was read */
    assert_in_range(sticky, 10, 100);
}

/* Real exhaustion: OUT_OF_DEVICE_MEMORY for device and pinned memory, fine once freed. */
static void test_out_of_memory(void **state)
{
    gm_backend_ctx *bctx = NULL;
    gm_devptr a = 0;
    gm_devptr b = 0;
    void *pinned = NULL;
    void *more = NULL;

    (void)state;
    gm_cuda_double_set_device_memory(1 << 20);
    gm_cuda_double_set_pinned_memory(1 << 20);
    bctx = cuda_test_open();
    assert_ok(CUDA_OPS->mem_alloc(bctx, 768 << 10, &a));
    assert_status(CUDA_OPS->mem_alloc(bctx, 512 << 10, &b), GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_message_contains("mem_alloc of 524288 bytes");
    assert_ok(CUDA_OPS->mem_free(bctx, a));
    assert_ok(CUDA_OPS->mem_alloc(bctx, 512 << 10, &b));
    assert_ok(CUDA_OPS->mem_free(bctx, b));
    assert_ok(CUDA_OPS->host_alloc(bctx, 768 << 10, 0, &pinned));
    assert_status(CUDA_OPS->host_alloc(bctx, 512 << 10, 0, &more), GM_ERR_NO_MEMORY);
    assert_message_contains("cuda host_alloc of 524288 bytes: out of page-locked host memory");
    assert_message_contains("CUDA_ERROR_OUT_OF_MEMORY");
    assert_null(more);
    assert_ok(CUDA_OPS->host_free(bctx, pinned));
    cuda_test_close(bctx);
}

/* Size 0 and NULL need no driver call. */
static void test_zero_sizes(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_devptr ptr = 1;
    void *host = &ptr;

    (void)state;
    assert_ok(CUDA_OPS->mem_alloc(bctx, 0, &ptr));
    assert_int_equal(ptr, 0);
    assert_ok(CUDA_OPS->mem_free(bctx, 0));
    assert_ok(CUDA_OPS->host_alloc(bctx, 0, GM_HOST_MAPPED, &host));
    assert_null(host);
    assert_ok(CUDA_OPS->host_free(bctx, NULL));
    assert_ok(CUDA_OPS->managed_alloc(bctx, 0, &ptr));
    assert_int_equal(cuda_test_work_calls(), 0);
    cuda_test_close(bctx);
}

/* Pinned / mapped allocation flags, device pointers, registration, managed memory. */
static void test_host_memory(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    void *pinned = NULL;
    void *mapped = NULL;
    gm_devptr device = 0;
    char *user = malloc(8192);

    (void)state;
    assert_non_null(user);
    assert_ok(CUDA_OPS->host_alloc(bctx, 4096, 0, &pinned));
    assert_int_equal(gm_cuda_double_host_flags(pinned), 0);
    assert_status(CUDA_OPS->host_device_pointer(bctx, pinned, &device), GM_ERR_INVALID_ARG);
    assert_ok(CUDA_OPS->host_alloc(
        bctx, 4096, GM_HOST_PORTABLE | GM_HOST_MAPPED | GM_HOST_WRITECOMBINED, &mapped));
    assert_int_equal(gm_cuda_double_host_flags(mapped), CU_MEMHOSTALLOC_PORTABLE |
                                                            CU_MEMHOSTALLOC_DEVICEMAP |
                                                            CU_MEMHOSTALLOC_WRITECOMBINED);
    /* write-combined memory has a device address of its own (cuda.h, "Disjoint Addressing") */
    assert_ok(CUDA_OPS->host_device_pointer(bctx, (char *)mapped + 100, &device));
    assert_int_not_equal(device, (gm_devptr)(uintptr_t)mapped + 100);
    assert_int_equal(device, gm_cuda_double_device_address((char *)mapped + 100));
    assert_ok(CUDA_OPS->host_free(bctx, mapped));
    /* other mapped memory is reached at its host address (unified addressing) */
    assert_ok(CUDA_OPS->host_alloc(bctx, 4096, GM_HOST_PORTABLE | GM_HOST_MAPPED, &mapped));
    assert_ok(CUDA_OPS->host_device_pointer(bctx, (char *)mapped + 100, &device));
    assert_int_equal(device, (gm_devptr)(uintptr_t)mapped + 100);
    assert_status(CUDA_OPS->host_alloc(bctx, 64, 0x100, &pinned), GM_ERR_INVALID_ARG);

    assert_ok(CUDA_OPS->host_register(bctx, user, 8192, GM_HOST_MAPPED));
    assert_int_equal(gm_cuda_double_host_flags(user), CU_MEMHOSTREGISTER_DEVICEMAP);
    assert_status(CUDA_OPS->host_register(bctx, user, 4096, 0), GM_ERR_STATE);
    assert_message_contains("CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED");
    assert_ok(CUDA_OPS->host_device_pointer(bctx, user, &device));
    assert_int_not_equal(device, (gm_devptr)(uintptr_t)user); /* registered: its own address */
    assert_int_equal(device, gm_cuda_double_device_address(user));
    assert_ok(CUDA_OPS->host_unregister(bctx, user));
    /* Re-pinning the same memory at once works (numba#3508). */
    assert_ok(CUDA_OPS->host_register(bctx, user, 8192, GM_HOST_PORTABLE));
    assert_int_equal(gm_cuda_double_host_flags(user), CU_MEMHOSTREGISTER_PORTABLE);
    assert_ok(CUDA_OPS->host_unregister(bctx, user));
    assert_status(CUDA_OPS->host_unregister(bctx, user), GM_ERR_INVALID_ARG);
    assert_message_contains("CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED");
    /* a range that only contains an earlier registration overlaps it too */
    assert_ok(CUDA_OPS->host_register(bctx, (char *)user + 100, 100, 0));
    assert_status(CUDA_OPS->host_register(bctx, user, 4096, 0), GM_ERR_STATE);
    assert_ok(CUDA_OPS->host_unregister(bctx, (char *)user + 100));
    assert_status(CUDA_OPS->host_register(bctx, user, 64, GM_HOST_WRITECOMBINED),
                  GM_ERR_INVALID_ARG);

    assert_ok(CUDA_OPS->host_free(bctx, pinned));
    assert_ok(CUDA_OPS->host_free(bctx, mapped));
    free(user);
    cuda_test_close(bctx);
}

/* A driver call that needs a context, made with the primary context current. */
static CUresult with_context(CUresult (*call)(void *), void *arg)
{
    CUcontext ctx = NULL;
    CUresult rc = cuDevicePrimaryCtxRetain(&ctx, 0);

    if (rc == CUDA_SUCCESS && (rc = cuCtxPushCurrent(ctx)) == CUDA_SUCCESS) {
        rc = call(arg);
        assert_int_equal(cuCtxPopCurrent(NULL), CUDA_SUCCESS);
    }
    assert_int_equal(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
    return rc;
}

typedef struct pointer_query {
    CUpointer_attribute attribute;
    CUdeviceptr ptr;
    uint64_t value;
} pointer_query;

static CUresult query_pointer(void *arg)
{
    pointer_query *q = arg;

    q->value = 0;
    return cuPointerGetAttribute(&q->value, q->attribute, q->ptr);
}

/* The attribute of ptr (CU_POINTER_ATTRIBUTE_DEVICE_POINTER or _HOST_POINTER); 0 when none. */
static uint64_t pointer_address(CUpointer_attribute attribute, uint64_t ptr)
{
    pointer_query q = {attribute, (CUdeviceptr)ptr, 0};

    return with_context(query_pointer, &q) == CUDA_SUCCESS ? q.value : 0;
}

/*
 * The double's model of registered memory on a device that cannot use host
 * pointers for it (CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM 0, the default):
 * the device address is another one, where the CPU faults; copies, memsets
 * and pointer queries through it reach the host memory; the host address as
 * a device side, or the device address as a host side, is a violation, and
 * so is the device address once unregistered. With the attribute 1 the
 * device address is the host address.
 */
static void test_registered_device_address(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    size_t bytes = 2 * 4096 + 300;
    char *user = malloc(bytes);
    gm_devptr dev = 0, regdev = 0, again = 0;
    int attribute = -1;
    int kind = -1;
    gm_copy_desc d = {GM_COPY_DEVICE, GM_COPY_DEVICE, 0, 0, 0, 1, 1, 0, 0, 0, 0};

    (void)state;
    assert_non_null(user);
    for (size_t i = 0; i < bytes; i++)
        user[i] = (char)(i * 7 + 1);
    assert_int_equal(
        cuDeviceGetAttribute(&attribute,
                             CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 0),
        CUDA_SUCCESS);
    assert_int_equal(attribute, 0);
    assert_int_equal(cuDeviceGetAttribute(&attribute, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0),
                     CUDA_SUCCESS);
    assert_int_equal(attribute, 1);
    assert_ok(CUDA_OPS->mem_alloc(bctx, bytes, &dev));
    assert_ok(CUDA_OPS->host_register(bctx, user, bytes, GM_HOST_MAPPED));
    assert_ok(CUDA_OPS->host_device_pointer(bctx, user + 10, &regdev));
    assert_int_not_equal(regdev, (gm_devptr)(uintptr_t)(user + 10));
    assert_int_equal(regdev % 4096, (uintptr_t)(user + 10) % 4096);
    assert_true(gm_test_cpu_read_faults((void *)(uintptr_t)regdev));
    assert_ptr_equal(gm_cuda_double_host_address(regdev), user + 10);
    /* either address names the memory to cuPointerGetAttribute */
    assert_int_equal(pointer_address(CU_POINTER_ATTRIBUTE_DEVICE_POINTER, (uintptr_t)user + 10),
                     regdev);
    assert_int_equal(pointer_address(CU_POINTER_ATTRIBUTE_DEVICE_POINTER, regdev), regdev);
    assert_int_equal(pointer_address(CU_POINTER_ATTRIBUTE_HOST_POINTER, regdev),
                     (uintptr_t)user + 10);
    assert_int_equal(pointer_address(CU_POINTER_ATTRIBUTE_HOST_POINTER, dev), 0);
    assert_ok(CUDA_OPS->pointer_kind(bctx, (void *)(uintptr_t)regdev, &kind));
    assert_int_equal(kind, GM_MEMORY_PINNED);
    assert_ok(CUDA_OPS->pointer_kind(bctx, user, &kind));
    assert_int_equal(kind, GM_MEMORY_PINNED);

    /* the device address as a device side: copies and memsets reach the host memory */
    d.dst = dev;
    d.src = regdev - 10;
    d.width_bytes = bytes;
    assert_ok(CUDA_OPS->copy(bctx, &d, NULL));
    memset(user, 0, bytes);
    d.dst = regdev - 10;
    d.src = dev;
    assert_ok(CUDA_OPS->copy(bctx, &d, NULL));
    for (size_t i = 0; i < bytes; i++)
        assert_int_equal(user[i], (char)(i * 7 + 1));
    assert_ok(CUDA_OPS->memset(bctx, regdev, "\x5a", 1, 5, NULL));
    assert_memory_equal(user + 10, "\x5a\x5a\x5a\x5a\x5a", 5);
    /* pitched copies (cuMemcpy2D, cuMemcpy3D) from the device address */
    for (size_t depth = 1; depth <= 2; depth++) {
        gm_copy_desc p = {
            GM_COPY_DEVICE, GM_COPY_DEVICE, dev, regdev - 10, 100, 3, depth, 200, 3, 1000, 4};
        gm_copy_desc r = {GM_COPY_HOST, GM_COPY_DEVICE, 0, dev, 1200, 1, 1, 1200, 1, 1200, 1};
        char rows[1200];

        gm_cuda_double_clear_calls();
        assert_ok(CUDA_OPS->copy(bctx, &p, NULL));
        assert_int_equal(gm_cuda_double_count_calls(depth == 1 ? "cuMemcpy2D_v2" : "cuMemcpy3D_v2"),
                         1);
        r.dst = (gm_devptr)(uintptr_t)rows;
        assert_ok(CUDA_OPS->copy(bctx, &r, NULL));
        for (size_t z = 0; z < depth; z++)
            for (size_t y = 0; y < 3; y++)
                assert_memory_equal(rows + (z * 3 + y) * 200, user + (z * 4 + y) * 1000, 100);
    }
    assert_no_violations();

    /* the host address as a device side, the device address as a host side: violations */
    d.dst = (gm_devptr)(uintptr_t)user;
    assert_status(CUDA_OPS->copy(bctx, &d, NULL), GM_ERR_INVALID_ARG);
    assert_int_equal(gm_cuda_double_violations(), 1);
    assert_non_null(strstr(gm_cuda_double_last_violation(), "host address of registered"));
    d.dst_side = GM_COPY_HOST;
    d.dst = regdev;
    d.width_bytes = 16;
    assert_status(CUDA_OPS->copy(bctx, &d, NULL), GM_ERR_INVALID_ARG);
    assert_int_equal(gm_cuda_double_violations(), 2);
    assert_non_null(strstr(gm_cuda_double_last_violation(), "device address of mapped host"));
    assert_ok(CUDA_OPS->host_unregister(bctx, user));
    /* a stale device address */
    assert_status(CUDA_OPS->memset(bctx, regdev, "\x5a", 1, 5, NULL), GM_ERR_INVALID_ARG);
    assert_int_equal(gm_cuda_double_violations(), 3);
    assert_non_null(strstr(gm_cuda_double_last_violation(), "no longer registered"));

    /* a device that can use host pointers for registered memory */
    gm_cuda_double_set_host_pointer_for_registered_mem(1);
    assert_int_equal(
        cuDeviceGetAttribute(&attribute,
                             CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 0),
        CUDA_SUCCESS);
    assert_int_equal(attribute, 1);
    assert_ok(CUDA_OPS->host_register(bctx, user, bytes, GM_HOST_MAPPED));
    assert_ok(CUDA_OPS->host_device_pointer(bctx, user + 10, &again));
    assert_int_equal(again, (gm_devptr)(uintptr_t)(user + 10));
    assert_ok(CUDA_OPS->host_unregister(bctx, user));

    assert_ok(CUDA_OPS->mem_free(bctx, dev));
    CUDA_OPS->fini(bctx);
    assert_int_equal(gm_cuda_double_live_objects(), 0);
    assert_int_equal(gm_cuda_double_violations(), 3);
    free(user);
}

/* pointer_kind: device, pinned, managed; pageable memory is HOST and no error. */
static void test_pointer_kind(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    gm_devptr device = 0;
    gm_devptr managed = 0;
    void *pinned = NULL;
    int local = 0;
    int kind = -1;

    (void)state;
    assert_ok(CUDA_OPS->mem_alloc(bctx, 256, &device));
    assert_ok(CUDA_OPS->managed_alloc(bctx, 256, &managed));
    assert_ok(CUDA_OPS->host_alloc(bctx, 256, GM_HOST_MAPPED, &pinned));
    assert_ok(CUDA_OPS->pointer_kind(bctx, (void *)(uintptr_t)(device + 8), &kind));
    assert_int_equal(kind, GM_MEMORY_DEVICE);
    assert_ok(CUDA_OPS->pointer_kind(bctx, (void *)(uintptr_t)managed, &kind));
    assert_int_equal(kind, GM_MEMORY_MANAGED);
    assert_ok(CUDA_OPS->pointer_kind(bctx, pinned, &kind));
    assert_int_equal(kind, GM_MEMORY_PINNED);
    gm_clear_error();
    assert_ok(CUDA_OPS->pointer_kind(bctx, &local, &kind));
    assert_int_equal(kind, GM_MEMORY_HOST);
    assert_int_equal(gm_last_error(), GM_OK); /* "not CUDA memory" is an answer */
    assert_ok(CUDA_OPS->mem_free(bctx, device));
    assert_ok(CUDA_OPS->mem_free(bctx, managed));
    assert_ok(CUDA_OPS->host_free(bctx, pinned));
    cuda_test_close(bctx);
}

/* IPC handles: get, open, close; a short handle buffer is refused. */
static void test_ipc(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    unsigned char handle[CU_IPC_HANDLE_SIZE];
    gm_devptr device = 0;
    gm_devptr opened = 0;

    (void)state;
    assert_ok(CUDA_OPS->mem_alloc(bctx, 1024, &device));
    assert_status(CUDA_OPS->ipc_get_handle(bctx, device, handle, 16), GM_ERR_INVALID_ARG);
    /* a handle names a whole driver allocation: a pointer inside one is refused, not opened
     * at the allocation's start */
    assert_status(CUDA_OPS->ipc_get_handle(bctx, device + 256, handle, sizeof(handle)),
                  GM_ERR_UNSUPPORTED);
    assert_message_contains("is 256 bytes into a driver allocation of 1024 bytes");
    assert_ok(CUDA_OPS->ipc_get_handle(bctx, device, handle, sizeof(handle)));
    assert_status(CUDA_OPS->ipc_open(bctx, handle, 8, &opened), GM_ERR_INVALID_ARG);
    assert_ok(CUDA_OPS->ipc_open(bctx, handle, sizeof(handle), &opened));
    assert_int_equal(opened, device);
    assert_ok(CUDA_OPS->ipc_close(bctx, opened));
    assert_ok(CUDA_OPS->mem_free(bctx, device));
    cuda_test_close(bctx);
}

/* A thread with no (or another) current context can call in: the op makes ours current. */
static void *use_from_thread(void *arg)
{
    gm_backend_ctx *bctx = arg;
    gm_devptr ptr = 0;
    uint32_t value = 0x12345678;
    uint32_t back = 0;
    gm_copy_desc to = {
        GM_COPY_DEVICE, GM_COPY_HOST, 0, (gm_devptr)(uintptr_t)&value, 4, 1, 1, 0, 0, 0, 0};
    gm_copy_desc from = {
        GM_COPY_HOST, GM_COPY_DEVICE, (gm_devptr)(uintptr_t)&back, 0, 4, 1, 1, 0, 0, 0, 0};
    gm_status status = CUDA_OPS->mem_alloc(bctx, 4, &ptr);

    to.dst = from.src = ptr;
    if (status == GM_OK)
        status = CUDA_OPS->copy(bctx, &to, NULL);
    if (status == GM_OK)
        status = CUDA_OPS->copy(bctx, &from, NULL);
    if (ptr != 0 && CUDA_OPS->mem_free(bctx, ptr) != GM_OK)
        status = GM_ERR_INTERNAL;
    if (status == GM_OK && back != value)
        status = GM_ERR_INTERNAL;
    return (void *)(intptr_t)status;
}

static void test_current_context_any_thread(void **state)
{
    gm_backend_ctx *bctx = cuda_test_open();
    pthread_t thread;
    void *result = NULL;
    int64_t free_bytes = 0;
    int64_t total = 0;

    (void)state;
    assert_int_equal(pthread_create(&thread, NULL, use_from_thread, bctx), 0);
    assert_int_equal(pthread_join(thread, &result), 0);
    assert_int_equal((intptr_t)result, GM_OK);
    assert_true(gm_cuda_double_count_calls("cuCtxSetCurrent") >= 1);
    /* This thread lost its current context (someone else's code): the next op restores it. */
    assert_int_equal(cuCtxSetCurrent(NULL), CUDA_SUCCESS);
    assert_ok(CUDA_OPS->mem_info(bctx, &free_bytes, &total));
    assert_no_violations();
    cuda_test_close(bctx);
}

/* ------------------------------------------------------ fault injection */

/* Host work and callbacks of the sweep: count what ran and what was cleaned up. */
static int sweep_callbacks;
static int sweep_work;
static int sweep_cleanups;

static void sweep_callback(gm_status status, void *user)
{
    (void)status;
    (void)user;
    sweep_callbacks++;
}

static gm_status sweep_host_work(void *user)
{
    (void)user;
    sweep_work++;
    return GM_OK;
}

static void sweep_cleanup(void *user)
{
    (void)user;
    sweep_cleanups++;
}

/* Most driver calls one sweep run makes. */
#define MAX_SWEEP 1024

/* Release ops are retried once (the expression runs again only if it failed), as the
 * deallocation queue retries a failed entry. */
#define RETRY(call) ((call) == GM_OK ? GM_OK : (call))

/* The resources of one sweep run; zero means not taken. */
typedef struct sweep_state {
    gm_devptr device, managed;
    void *pinned;
    gm_backend_stream *stream;
    gm_backend_event *start, *end;
    gm_backend_module *module;
    char host[4096];
} sweep_state;

/* Copies, memsets, events and host work on the stream. */
static gm_status sweep_stream_work(gm_backend_ctx *bctx, sweep_state *s)
{
    gm_copy_desc up = {GM_COPY_DEVICE,
                       GM_COPY_HOST,
                       s->device,
                       (gm_devptr)(uintptr_t)s->pinned,
                       256,
                       4,
                       1,
                       256,
                       0,
                       256,
                       0};
    gm_copy_desc down = {GM_COPY_HOST,
                         GM_COPY_DEVICE,
                         (gm_devptr)(uintptr_t)s->host,
                         s->device,
                         200,
                         4,
                         1,
                         512,
                         0,
                         256,
                         0};
    const uint64_t pattern = 0x0102030405060708u;
    float ms = 0.0f;
    gm_status status = CUDA_OPS->copy(bctx, &up, s->stream);

    if (status == GM_OK)
        status = CUDA_OPS->copy(bctx, &down, NULL);
    if (status == GM_OK)
        status = CUDA_OPS->memset(bctx, s->device, &pattern, 8, 16, s->stream);
    if (status == GM_OK)
        status = CUDA_OPS->event_record(bctx, s->start, s->stream);
    if (status == GM_OK)
        status = CUDA_OPS->stream_wait_event(bctx, s->stream, s->start);
    if (status == GM_OK)
        status = CUDA_OPS->event_record(bctx, s->end, s->stream);
    if (status == GM_OK)
        status = CUDA_OPS->event_synchronize(bctx, s->end);
    if (status == GM_OK)
        status = CUDA_OPS->event_elapsed(bctx, s->start, s->end, &ms);
    if (status == GM_OK)
        status = CUDA_OPS->stream_add_callback(bctx, s->stream, sweep_callback, NULL);
    if (status == GM_OK)
        status =
            CUDA_OPS->stream_enqueue_host(bctx, s->stream, sweep_host_work, NULL, sweep_cleanup);
    if (status == GM_OK)
        status = CUDA_OPS->stream_synchronize(bctx, s->stream);
    return status;
}

/* Registration, pointer queries, IPC. */
static gm_status sweep_memory_work(gm_backend_ctx *bctx, sweep_state *s)
{
    unsigned char handle[CU_IPC_HANDLE_SIZE];
    gm_devptr mapped = 0;
    gm_devptr opened = 0;
    int kind = 0;
    gm_status status = CUDA_OPS->host_device_pointer(bctx, s->pinned, &mapped);

    if (status == GM_OK)
        status = CUDA_OPS->host_register(bctx, s->host, sizeof(s->host), GM_HOST_MAPPED);
    if (status == GM_OK) {
        status = CUDA_OPS->pointer_kind(bctx, s->host, &kind);
        if (RETRY(CUDA_OPS->host_unregister(bctx, s->host)) != GM_OK)
            status = GM_ERR_INTERNAL;
    }
    if (status == GM_OK)
        status = CUDA_OPS->ipc_get_handle(bctx, s->device, handle, sizeof(handle));
    if (status == GM_OK)
        status = CUDA_OPS->ipc_open(bctx, handle, sizeof(handle), &opened);
    if (status == GM_OK && RETRY(CUDA_OPS->ipc_close(bctx, opened)) != GM_OK)
        status = GM_ERR_INTERNAL;
    return status;
}

/* Module, kernel, global, attributes and two launches (one above 48 KiB of shared memory). */
static gm_status sweep_kernel_work(gm_backend_ctx *bctx, sweep_state *s)
{
    gm_backend_kernel *fill = NULL;
    gm_backend_kernel *scale = NULL;
    gm_kernel_attrs attrs;
    gm_devptr coeffs = 0;
    size_t bytes = 0;
    uint32_t value = 7;
    uint64_t n = 64;
    void *fill_args[3] = {&s->device, &value, &n};
    void *scale_args[2] = {&s->device, &n};
    const size_t fill_sizes[3] = {8, 4, 8};
    const size_t scale_sizes[2] = {8, 8};
    gm_launch_config small = {{1, 1, 1}, {64, 1, 1}, 0};
    gm_launch_config big = {{1, 1, 1}, {64, 1, 1}, 64 * 1024};
    gm_status status = CUDA_OPS->module_load(bctx, GM_IMAGE_CUDA, gm_test_kernels_ptx,
                                             sizeof(gm_test_kernels_ptx), &s->module);

    if (status == GM_OK)
        status = CUDA_OPS->module_get_kernel(bctx, s->module, "gm_test_fill_u32", &fill);
    if (status == GM_OK)
        status = CUDA_OPS->module_get_kernel(bctx, s->module, "gm_test_scale_f32", &scale);
    if (status == GM_OK)
        status = CUDA_OPS->module_get_global(bctx, s->module, "gm_test_coeffs", &coeffs, &bytes);
    if (status == GM_OK)
        status = CUDA_OPS->kernel_attrs(bctx, fill, &attrs);
    if (status == GM_OK)
        status = CUDA_OPS->launch(bctx, fill, &small, fill_args, fill_sizes, 3, s->stream);
    if (status == GM_OK)
        status = CUDA_OPS->launch(bctx, scale, &big, scale_args, scale_sizes, 2, s->stream);
    return status;
}

/* Take everything, use it, release what was taken (releases retried once). */
static gm_status sweep_scenario(gm_backend_ctx *bctx)
{
    sweep_state s;
    gm_status status = GM_OK;
    gm_status release = GM_OK;

    memset(&s, 0, sizeof(s));
    status = CUDA_OPS->mem_alloc(bctx, 4096, &s.device);
    if (status == GM_OK)
        status = CUDA_OPS->managed_alloc(bctx, 256, &s.managed);
    if (status == GM_OK)
        status = CUDA_OPS->host_alloc(bctx, 4096, GM_HOST_MAPPED, &s.pinned);
    if (status == GM_OK)
        status = CUDA_OPS->stream_create(bctx, GM_STREAM_NON_BLOCKING, &s.stream);
    if (status == GM_OK)
        status = CUDA_OPS->event_create(bctx, 1, &s.start);
    if (status == GM_OK)
        status = CUDA_OPS->event_create(bctx, 1, &s.end);
    if (status == GM_OK)
        status = sweep_stream_work(bctx, &s);
    if (status == GM_OK)
        status = sweep_memory_work(bctx, &s);
    if (status == GM_OK)
        status = sweep_kernel_work(bctx, &s);

    if (s.module != NULL)
        release |= RETRY(CUDA_OPS->module_unload(bctx, s.module));
    if (s.end != NULL)
        release |= RETRY(CUDA_OPS->event_destroy(bctx, s.end));
    if (s.start != NULL)
        release |= RETRY(CUDA_OPS->event_destroy(bctx, s.start));
    if (s.stream != NULL)
        release |= RETRY(CUDA_OPS->stream_destroy(bctx, s.stream));
    release |= RETRY(CUDA_OPS->host_free(bctx, s.pinned));
    release |= RETRY(CUDA_OPS->mem_free(bctx, s.managed));
    release |= RETRY(CUDA_OPS->mem_free(bctx, s.device));
    assert_int_equal(release, GM_OK);
    return status;
}

/* One run with the n-th driver call failing with `result` (n = 0: no fault). */
static gm_status sweep_run(long n, CUresult result)
{
    gm_backend_init_args args = {0, 32};
    gm_backend_ctx *bctx = NULL;
    gm_status status = GM_OK;

    gm_cuda_double_reset();
    sweep_callbacks = sweep_work = sweep_cleanups = 0;
    if (n > 0)
        gm_cuda_double_fail(NULL, n, result);
    status = CUDA_OPS->init(&args, &bctx);
    if (status == GM_OK) {
        status = sweep_scenario(bctx);
        CUDA_OPS->fini(bctx);
    }
    return status;
}

/* Whether a driver call gives something back (its own failure would leak by definition). */
static int is_release_call(const char *symbol)
{
    static const char *const releases[] = {"cuMemFree_v2",        "cuMemFreeHost",
                                           "cuMemHostUnregister", "cuIpcCloseMemHandle",
                                           "cuStreamDestroy_v2",  "cuEventDestroy_v2",
                                           "cuModuleUnload",      "cuDevicePrimaryCtxRelease_v2"};

    for (size_t i = 0; i < sizeof(releases) / sizeof(releases[0]); i++) {
        if (strcmp(symbol, releases[i]) == 0)
            return 1;
    }
    return 0;
}

/*
 * Fail every driver call of the scenario in turn (except calls that
 * release: those are retried like the queue does, or are fini's): each run
 * must report an error with detail when the fault hit an operation, must
 * leave the driver holding nothing, must never misuse the driver, and
 * (cmocka's allocator) must not leak host memory. Host work that was
 * queued runs its cleanup exactly once; work that was refused, never.
 */
static void test_fault_sweep(void **state)
{
    static const CUresult faults[] = {CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_INVALID_VALUE,
                                      CUDA_ERROR_LAUNCH_FAILED, CUDA_ERROR_UNKNOWN};
    const char *symbols[MAX_SWEEP];
    long calls = 0;

    (void)state;
    assert_ok(sweep_run(0, CUDA_SUCCESS));
    assert_int_equal(sweep_callbacks, 1);
    assert_int_equal(sweep_cleanups, 1);
    calls = gm_cuda_double_call_count();
    assert_true(calls > 50 && calls < MAX_SWEEP);
    for (long i = 0; i < calls; i++)
        symbols[i] = gm_cuda_double_call_name(i);
    for (long n = 1; n <= calls; n++) {
        gm_status status = GM_OK;

        if (is_release_call(symbols[n - 1]))
            continue;
        gm_clear_error();
        status = sweep_run(n, faults[n % 4]);
        if (gm_cuda_double_live_objects() != 0 || gm_cuda_double_violations() != 0)
            fail_msg("fault at call %ld (%s): %ld objects left, %ld violations (%s)", n,
                     symbols[n - 1], gm_cuda_double_live_objects(), gm_cuda_double_violations(),
                     gm_cuda_double_last_violation());
        if (status != GM_OK && strstr(gm_last_error_message(), "CUresult") == NULL)
            fail_msg("fault at call %ld (%s): %s without driver detail: \"%s\"", n, symbols[n - 1],
                     gm_status_name(status), gm_last_error_message());
        assert_int_equal(sweep_cleanups, sweep_work);
        assert_true(sweep_callbacks <= 1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_ops_table_complete, cuda_test_setup),
        cmocka_unit_test_setup(test_symbols_are_versioned, cuda_test_setup),
        cmocka_unit_test_setup(test_init_fini_call_order, cuda_test_setup),
        cmocka_unit_test_setup(test_primary_context_refused, cuda_test_setup),
        cmocka_unit_test_setup(test_no_driver, cuda_test_setup),
        cmocka_unit_test_setup(test_no_device, cuda_test_setup),
        cmocka_unit_test_setup(test_init_unwinds, cuda_test_setup),
        cmocka_unit_test_setup(test_error_translation, cuda_test_setup),
        cmocka_unit_test_setup(test_sticky_errors_from_cuda_h, cuda_test_setup),
        cmocka_unit_test_setup(test_out_of_memory, cuda_test_setup),
        cmocka_unit_test_setup(test_zero_sizes, cuda_test_setup),
        cmocka_unit_test_setup(test_host_memory, cuda_test_setup),
        cmocka_unit_test_setup(test_registered_device_address, cuda_test_setup),
        cmocka_unit_test_setup(test_pointer_kind, cuda_test_setup),
        cmocka_unit_test_setup(test_ipc, cuda_test_setup),
        cmocka_unit_test_setup(test_current_context_any_thread, cuda_test_setup),
        cmocka_unit_test_setup(test_fault_sweep, cuda_test_setup),
    };

    return cmocka_run_group_tests_name("cuda/backend", tests, cuda_test_group_setup,
                                       cuda_test_group_teardown);
}
