/*
 * Fault injection sweep: a scenario touching every part of the backend
 * (init and its memory-fault handler registration, memory, registration,
 * copies, streams, events, callbacks, memset, modules and launches, IPC) runs
 * once per fallible runtime call with that call failing. Every time: the
 * failing operation reports the injected call by name with the translated
 * status, nothing gpumem allocated leaks, and every runtime object is
 * released (unless the injected call was itself a release, which a real
 * runtime would not redo either).
 *
 * GPU memory faults: ROCr reports an ordinary page fault to the handlers of
 * hsa_amd_register_system_event_handler only (never to a queue callback) and
 * aborts the process when none answers HSA_STATUS_SUCCESS; the double does
 * the same. The backend's handler fails the contexts on the faulting GPU.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hsa_test_util.h"

/* ------------------------------------------- a counting host allocator */

static _Atomic long live_blocks;

static void *count_malloc(size_t size)
{
    void *p = malloc(size);

    if (p != NULL)
        atomic_fetch_add(&live_blocks, 1);
    return p;
}

static void *count_calloc(size_t count, size_t size)
{
    void *p = calloc(count, size);

    if (p != NULL)
        atomic_fetch_add(&live_blocks, 1);
    return p;
}

static void *count_realloc(void *ptr, size_t size)
{
    void *p = realloc(ptr, size);

    if (p != NULL && ptr == NULL)
        atomic_fetch_add(&live_blocks, 1);
    return p;
}

static void count_free(void *ptr)
{
    if (ptr != NULL)
        atomic_fetch_sub(&live_blocks, 1);
    free(ptr);
}

static int use_counting_allocator(void **state)
{
    static const gm_host_allocator allocator = {count_malloc, count_calloc, count_realloc,
                                                count_free};

    (void)state;
    return gm_set_host_allocator(&allocator) == GM_OK ? 0 : -1;
}

/* ------------------------------------------------------------- scenario */

typedef struct run {
    gm_backend_ctx *bctx;
    gm_devptr dev, ipc;
    void *pinned;
    gm_backend_stream *stream;
    gm_backend_event *event;
    gm_backend_module *module;
    gm_status failed;   /* first failure */
    char message[1024]; /* its message */
    const char *step;   /* its step */
} run;

static _Alignas(16) unsigned char host_a[65536], host_b[65536];
static int callbacks;

static void on_callback(gm_status status, void *user)
{
    (void)status;
    (void)user;
    callbacks++;
}

/* Record a step's result; the first failure is kept. */
static bool step(run *r, const char *name, gm_status status)
{
    if (status != GM_OK && r->failed == GM_OK) {
        r->failed = status;
        r->step = name;
        snprintf(r->message, sizeof(r->message), "%s", gm_last_error_message());
    }
    return status == GM_OK;
}

static bool do_memory(run *r)
{
    gm_copy_desc d = hsa_test_copy1d(GM_COPY_DEVICE, 0, GM_COPY_HOST, (gm_devptr)(uintptr_t)host_a,
                                     sizeof(host_a));

    if (!step(r, "mem_alloc", hsa_ops->mem_alloc(r->bctx, sizeof(host_a), &r->dev)) ||
        !step(r, "host_alloc", hsa_ops->host_alloc(r->bctx, sizeof(host_a), 0, &r->pinned)))
        return false;
    d.dst = r->dev;
    if (!step(r, "copy h2d", hsa_ops->copy(r->bctx, &d, NULL)) ||
        !step(r, "host_register", hsa_ops->host_register(r->bctx, host_b, sizeof(host_b), 0)))
        return false;
    return step(r, "host_unregister", hsa_ops->host_unregister(r->bctx, host_b));
}

/* Streams, events, a callback, memset, and copies (1-D, and 2-D as one rectangle). */
static bool do_streams(run *r)
{
    gm_copy_desc d = hsa_test_copy1d(GM_COPY_HOST, (gm_devptr)(uintptr_t)r->pinned, GM_COPY_DEVICE,
                                     r->dev, sizeof(host_a));
    gm_copy_desc pitched =
        hsa_test_copy1d(GM_COPY_DEVICE, r->dev, GM_COPY_HOST, (gm_devptr)(uintptr_t)host_a, 1000);
    uint32_t v = 0x01020304;
    float ms = 0.0f;

    pitched.height = 8;
    pitched.dst_pitch = 2048;
    pitched.src_pitch = 4096;
    if (!step(r, "stream_create", hsa_ops->stream_create(r->bctx, 0, &r->stream)) ||
        !step(r, "event_create", hsa_ops->event_create(r->bctx, 1, &r->event)) ||
        !step(r, "event_record idle", hsa_ops->event_record(r->bctx, r->event, r->stream)) ||
        !step(r, "copy d2h async", hsa_ops->copy(r->bctx, &d, r->stream)) ||
        !step(r, "copy 2-D async", hsa_ops->copy(r->bctx, &pitched, r->stream)) ||
        !step(r, "memset", hsa_ops->memset(r->bctx, r->dev, &v, 4, 100, r->stream)) ||
        !step(r, "add_callback",
              hsa_ops->stream_add_callback(r->bctx, r->stream, on_callback, NULL)))
        return false;
    if (!step(r, "event_record", hsa_ops->event_record(r->bctx, r->event, r->stream)) ||
        !step(r, "stream_synchronize", hsa_ops->stream_synchronize(r->bctx, r->stream)))
        return false;
    return step(r, "event_elapsed", hsa_ops->event_elapsed(r->bctx, r->event, r->event, &ms));
}

static bool do_kernels(run *r, const void *image, size_t bytes)
{
    gm_backend_kernel *k = NULL;
    float a = 1.0f;
    int32_t n = 16;
    void *args[4] = {&a, &r->dev, &r->dev, &n};
    size_t sizes[4] = {4, 8, 8, 4};
    gm_launch_config cfg = {{1, 1, 1}, {64, 1, 1}, 0};

    if (image == NULL)
        return true;
    if (!step(r, "module_load",
              hsa_ops->module_load(r->bctx, GM_IMAGE_AMDGPU, image, bytes, &r->module)) ||
        !step(r, "module_get_kernel", hsa_ops->module_get_kernel(r->bctx, r->module, "axpy", &k)))
        return false;
    if (!step(r, "launch", hsa_ops->launch(r->bctx, k, &cfg, args, sizes, 4, r->stream)))
        return false;
    return step(r, "stream_synchronize 2", hsa_ops->stream_synchronize(r->bctx, r->stream));
}

static bool do_ipc(run *r)
{
    unsigned char handle[64];

    if (!step(r, "ipc_get_handle",
              hsa_ops->ipc_get_handle(r->bctx, r->dev, handle, sizeof(handle))) ||
        !step(r, "ipc_open", hsa_ops->ipc_open(r->bctx, handle, sizeof(handle), &r->ipc)))
        return false;
    step(r, "ipc_close", hsa_ops->ipc_close(r->bctx, r->ipc));
    r->ipc = 0;
    return r->failed == GM_OK;
}

/* Release whatever the run made; failures here are recorded too. */
static void teardown(run *r)
{
    if (r->module != NULL)
        step(r, "module_unload", hsa_ops->module_unload(r->bctx, r->module));
    if (r->event != NULL)
        step(r, "event_destroy", hsa_ops->event_destroy(r->bctx, r->event));
    if (r->stream != NULL)
        step(r, "stream_destroy", hsa_ops->stream_destroy(r->bctx, r->stream));
    if (r->pinned != NULL)
        step(r, "host_free", hsa_ops->host_free(r->bctx, r->pinned));
    if (r->dev != 0)
        step(r, "mem_free", hsa_ops->mem_free(r->bctx, r->dev));
    hsa_ops->fini(r->bctx);
}

static void scenario(run *r, const void *image, size_t bytes)
{
    gm_backend_init_args args = {0, 0};

    memset(r, 0, sizeof(*r));
    if (!step(r, "init", hsa_ops->init(&args, &r->bctx)))
        return;
    if (do_memory(r) && do_streams(r) && do_kernels(r, image, bytes))
        do_ipc(r);
    teardown(r);
}

/* Calls that release something: a failure there may leave the runtime object alive. */
static bool is_release(const char *call)
{
    static const char *const names[] = {
        "hsa_amd_memory_pool_free",
        "hsa_signal_destroy",
        "hsa_queue_destroy",
        "hsa_executable_destroy",
        "hsa_code_object_reader_destroy",
        "hsa_amd_memory_unlock",
        "hsa_shut_down",
        "hsa_amd_ipc_memory_detach",
    };

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(call, names[i]) == 0)
            return true;
    }
    return false;
}

/* What an injected status must become at the failing operation. */
static bool translated(gm_status got, hsa_status_t injected, const char *call)
{
    if (strcmp(call, "hsa_init") == 0)
        return got == GM_ERR_NO_DEVICE;
    if (injected == HSA_STATUS_ERROR_OUT_OF_RESOURCES)
        return got == GM_ERR_OUT_OF_DEVICE_MEMORY;
    return got == GM_ERR_DRIVER || got == GM_ERR_NOT_FOUND; /* get_kernel: missing symbol */
}

/* One injected failure: check the report and the cleanup. */
static void check_one(long n, hsa_status_t injected, const void *image, size_t bytes, long *hit)
{
    long before = atomic_load(&live_blocks);
    const char *call = NULL;
    run r;

    hsa_double_reset(NULL);
    hsa_double_fail(NULL, n, injected, 0);
    scenario(&r, image, bytes);
    call = hsa_double_last_injected();
    if (call[0] == '\0')
        return; /* n is past the last call */
    (*hit)++;
    if (r.failed != GM_OK && strstr(r.message, call) == NULL &&
        strstr(r.message, "the HSA runtime reported") == NULL)
        fail_msg("call %ld (%s) failed but step %s reported: %s", n, call, r.step, r.message);
    if (r.failed != GM_OK && strstr(r.message, call) != NULL &&
        !translated(r.failed, injected, call))
        fail_msg("call %ld (%s): step %s returned %s: %s", n, call, r.step,
                 gm_status_name(r.failed), r.message);
    if (atomic_load(&live_blocks) != before)
        fail_msg("call %ld (%s): %ld gpumem block(s) leaked", n, call,
                 atomic_load(&live_blocks) - before);
    if (!is_release(call)) {
        hsa_double_live live;

        hsa_double_get_live(&live);
        if (live.signals + live.queues + live.pool_allocations + live.locks + live.executables +
                live.readers + live.ipc_attachments + live.handlers !=
            0)
            print_error("after an injected failure of call %ld (%s):\n", n, call);
        hsa_test_assert_nothing_live();
        hsa_test_assert_no_violations();
    }
}

static void sweep(hsa_status_t injected)
{
    size_t bytes = 0;
    void *image = hsa_test_read_fixture("GM_TEST_HSACO_V5", &bytes);
    long fewest = 0, most = 0, hit = 0;
    run r;

    /* How many calls a run makes depends a little on timing (a signal is recycled once its
     * work is reaped, else a new one is created): sweep past the most of three clean runs,
     * and require nearly the fewest to be reached. */
    for (int clean = 0; clean < 3; clean++) {
        long calls = 0;

        hsa_double_reset(NULL);
        scenario(&r, image, bytes);
        assert_int_equal(r.failed, GM_OK);
        hsa_test_assert_nothing_live();
        hsa_test_assert_no_violations();
        calls = hsa_double_calls(NULL);
        fewest = clean == 0 || calls < fewest ? calls : fewest;
        most = calls > most ? calls : most;
    }
    assert_true(fewest > 50);
    for (long n = 1; n <= most + 10; n++)
        check_one(n, injected, image, bytes, &hit);
    /* Not vacuous: nearly every call was reached and failed (a loaded machine shifts a few). */
    assert_true(hit >= fewest - fewest / 10);
    print_message("%ld runtime calls failed one at a time\n", hit);
    free(image);
}

static void test_sweep_out_of_resources(void **state)
{
    (void)state;
    sweep(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
}

static void test_sweep_generic_error(void **state)
{
    (void)state;
    sweep(HSA_STATUS_ERROR);
}

/* ------------------------------------------------------- memory faults */

/* Wait (at most 5 s) until the double's event thread delivered `want` memory faults. */
static void wait_faults(long want)
{
    struct timespec ms = {0, 1000000L};
    long handled = 0, unhandled = 0;

    for (int i = 0; i < 5000; i++) {
        hsa_double_fault_counts(&handled, &unhandled);
        if (handled + unhandled >= want)
            return;
        nanosleep(&ms, NULL);
    }
    fail_msg("%ld memory fault(s) delivered, %ld expected", handled + unhandled, want);
}

/* Wait (at most 5 s) until the double has no copy pending. */
static void wait_copies_done(void)
{
    struct timespec ms = {0, 1000000L};
    hsa_double_live live;

    for (int i = 0; i < 5000; i++) {
        hsa_double_get_live(&live);
        if (live.pending_copies == 0)
            return;
        nanosleep(&ms, NULL);
    }
    fail_msg("copies still pending");
}

/* An asynchronous copy of `bytes` from pinned host memory to device memory on s. */
static void copy_h2d(gm_backend_ctx *bctx, gm_backend_stream *s, gm_devptr dev, void *pinned,
                     size_t bytes)
{
    gm_copy_desc d =
        hsa_test_copy1d(GM_COPY_DEVICE, dev, GM_COPY_HOST, (gm_devptr)(uintptr_t)pinned, bytes);

    assert_ok(hsa_ops->copy(bctx, &d, s));
}

/*
 * A memory fault on the context's GPU ends every wait with GM_ERR_CONTEXT_LOST
 * naming the address and the reasons, and the process goes on. The work
 * stays pending meanwhile (the double is paused), as on a GPU whose queues
 * stopped: without the handler these waits would never end.
 */
static void test_memory_fault_ends_waits(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    gm_backend_stream *s = NULL;
    gm_backend_event *ev = NULL;
    void *pinned = NULL;
    gm_devptr dev = 0;
    hsa_double_live live;
    long handled = 0, unhandled = 0;

    (void)state;
    assert_int_equal(hsa_double_calls("hsa_amd_register_system_event_handler"), 1);
    hsa_double_get_live(&live);
    assert_int_equal(live.system_event_handlers, 1);
    assert_ok(hsa_ops->host_alloc(bctx, 4096, 0, &pinned));
    assert_ok(hsa_ops->mem_alloc(bctx, 4096, &dev));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_DEFAULT, &s));
    assert_ok(hsa_ops->event_create(bctx, 0, &ev));
    hsa_double_pause(1);
    copy_h2d(bctx, s, dev, pinned, 4096);
    assert_ok(hsa_ops->event_record(bctx, ev, s));
    hsa_double_memory_fault(0, 0x7f0012345000ull,
                            HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT | HSA_AMD_MEMORY_FAULT_READ_ONLY);
    assert_status(hsa_ops->stream_synchronize(bctx, s), GM_ERR_CONTEXT_LOST);
    assert_message_contains("GPU memory fault on device 0 at address 0x7f0012345000, reason "
                            "mask 0x3 (page not present or supervisor privilege, write to a "
                            "read-only page)");
    assert_status(hsa_ops->event_synchronize(bctx, ev), GM_ERR_CONTEXT_LOST);
    assert_status(hsa_ops->device_synchronize(bctx), GM_ERR_CONTEXT_LOST);
    assert_message_contains("GPU memory fault on device 0");
    hsa_double_fault_counts(&handled, &unhandled);
    assert_int_equal(handled, 1);
    assert_int_equal(unhandled, 0);
    hsa_double_pause(0); /* let the copy and the record finish before teardown */
    wait_copies_done();
    while (hsa_ops->event_query(bctx, ev) != GM_OK)
        continue;
    assert_ok(hsa_ops->event_destroy(bctx, ev));
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    assert_ok(hsa_ops->mem_free(bctx, dev));
    assert_ok(hsa_ops->host_free(bctx, pinned));
    hsa_test_close(bctx);
}

/*
 * Two contexts on two GPUs share the one handler: a fault on GPU 1 fails the
 * context on GPU 1 only. A fault on a GPU no context uses is left to the
 * runtime (here recorded as a violation instead of aborting).
 */
static void test_memory_fault_other_gpu(void **state)
{
    hsa_double_config cfg;
    gm_backend_init_args args0 = {0, 0}, args1 = {1, 0};
    gm_backend_ctx *ctx0 = NULL, *ctx1 = NULL;
    gm_backend_stream *s0 = NULL, *s1 = NULL;
    void *pinned0 = NULL, *pinned1 = NULL;
    gm_devptr dev0 = 0, dev1 = 0;
    char text[2048];

    (void)state;
    hsa_double_config_default(&cfg);
    cfg.gpu_count = 2;
    cfg.unhandled_fault_violation = 1;
    hsa_double_reset(&cfg);
    assert_ok(hsa_ops->init(&args0, &ctx0));
    assert_ok(hsa_ops->init(&args1, &ctx1));
    assert_int_equal(hsa_double_calls("hsa_amd_register_system_event_handler"), 1);
    assert_ok(hsa_ops->host_alloc(ctx0, 4096, 0, &pinned0));
    assert_ok(hsa_ops->host_alloc(ctx1, 4096, 0, &pinned1));
    assert_ok(hsa_ops->mem_alloc(ctx0, 4096, &dev0));
    assert_ok(hsa_ops->mem_alloc(ctx1, 4096, &dev1));
    assert_ok(hsa_ops->stream_create(ctx0, GM_STREAM_DEFAULT, &s0));
    assert_ok(hsa_ops->stream_create(ctx1, GM_STREAM_DEFAULT, &s1));
    hsa_double_pause(1);
    copy_h2d(ctx0, s0, dev0, pinned0, 4096);
    copy_h2d(ctx1, s1, dev1, pinned1, 4096);
    hsa_double_memory_fault(1, 0x2000, HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT);
    assert_status(hsa_ops->device_synchronize(ctx1), GM_ERR_CONTEXT_LOST);
    assert_message_contains("GPU memory fault on device 1 at address 0x2000");
    hsa_double_pause(0);
    assert_ok(hsa_ops->device_synchronize(ctx0)); /* GPU 0's context is unaffected */
    wait_copies_done();
    assert_ok(hsa_ops->stream_destroy(ctx1, s1));
    assert_ok(hsa_ops->mem_free(ctx1, dev1));
    assert_ok(hsa_ops->host_free(ctx1, pinned1));
    hsa_ops->fini(ctx1);

    hsa_double_memory_fault(1, 0x3000, HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT);
    wait_faults(2);
    assert_int_equal(hsa_double_violations(text, sizeof(text)), 1);
    assert_non_null(strstr(text, "no system event handler answered HSA_STATUS_SUCCESS"));
    copy_h2d(ctx0, NULL, dev0, pinned0, 4096);
    assert_ok(hsa_ops->device_synchronize(ctx0));
    assert_ok(hsa_ops->stream_destroy(ctx0, s0));
    assert_ok(hsa_ops->mem_free(ctx0, dev0));
    assert_ok(hsa_ops->host_free(ctx0, pinned0));
    hsa_ops->fini(ctx0);
    hsa_test_assert_nothing_live();
    assert_int_equal(hsa_double_violations(NULL, 0), 1);
}

/*
 * ROCr deletes the runtime instance, handlers included, at the last
 * hsa_shut_down: a context opened after that registers again (the double
 * models the deletion and would abort on the fault otherwise). While the
 * runtime lives, more contexts register nothing more. A failed registration
 * fails the context (its first fault would abort the process).
 */
static void test_memory_fault_handler_per_runtime(void **state)
{
    gm_backend_init_args args = {0, 0};
    gm_backend_ctx *a = NULL, *b = NULL;
    hsa_double_live live;
    long handled = 0;

    (void)state;
    hsa_double_reset(NULL);
    hsa_double_fail("hsa_amd_register_system_event_handler", 1, HSA_STATUS_ERROR, 0);
    assert_status(hsa_ops->init(&args, &a), GM_ERR_DRIVER);
    assert_message_contains("hsa_amd_register_system_event_handler failed: HSA_STATUS_ERROR");
    hsa_test_assert_nothing_live();

    assert_ok(hsa_ops->init(&args, &a));
    assert_int_equal(hsa_double_calls("hsa_amd_register_system_event_handler"), 2);
    hsa_ops->fini(a);
    hsa_double_get_live(&live);
    assert_int_equal(live.system_event_handlers, 0); /* the instance is gone */

    assert_ok(hsa_ops->init(&args, &a));
    assert_ok(hsa_ops->init(&args, &b));
    assert_int_equal(hsa_double_calls("hsa_amd_register_system_event_handler"), 3);
    hsa_double_get_live(&live);
    assert_int_equal(live.system_event_handlers, 1);
    hsa_double_memory_fault(0, 0x4000, HSA_AMD_MEMORY_FAULT_HOST_ONLY);
    wait_faults(1);
    hsa_double_fault_counts(&handled, NULL);
    assert_int_equal(handled, 1); /* else the double would have aborted */
    hsa_ops->fini(b);
    hsa_ops->fini(a);
    hsa_test_assert_nothing_live();
    hsa_test_assert_no_violations();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep_out_of_resources),
        cmocka_unit_test(test_sweep_generic_error),
        cmocka_unit_test(test_memory_fault_ends_waits),
        cmocka_unit_test(test_memory_fault_other_gpu),
        cmocka_unit_test(test_memory_fault_handler_per_runtime),
    };

    return cmocka_run_group_tests(tests, use_counting_allocator, gm_test_restore_allocator);
}
