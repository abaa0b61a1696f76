/*
 * Fault injection sweep: a scenario touching every part of the backend
 * (init, memory, registration, copies, streams, events, callbacks, memset,
 * modules and launches, IPC) runs once per fallible runtime call with that
 * call failing. Every time: the failing operation reports the injected call
 * by name with the translated status, nothing gpumem allocated leaks, and
 * every runtime object is released (unless the injected call was itself a
 * release, which a real runtime would not redo either).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep_out_of_resources),
        cmocka_unit_test(test_sweep_generic_error),
    };

    return cmocka_run_group_tests(tests, use_counting_allocator, gm_test_restore_allocator);
}
