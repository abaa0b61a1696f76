/*
 * The host simulator backend, exercised through its ops table
 * (gm__host_backend): lifecycle and properties, memory and OOM, the cache
 * of freed device memory, pointer kinds, pinned / mapped / registered
 * memory, copies and memsets (sync and async), streams (asynchrony, overlap,
 * FIFO order, sticky errors, callbacks, built-in, per-thread, legacy,
 * wrapped), events and the unsupported-op stubs.
 *
 * Tests that need concurrency block stream work on "gates" the test opens;
 * every wait has a timeout so a wrong order fails instead of hanging.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gm_sanitizer.h"
#include "gm_threads.h"
#include "gm_test.h"

#include "backend.h"
#include "../../src/host/host_backend.h"

#define OPS          (&gm__host_backend)
#define GATE_TIMEOUT 10.0 /* seconds a gate waits before the work fails */
#define SETTLE_MS    50   /* time given to work that must NOT run yet */

/* ------------------------------------------------------------ helpers */

/* A context with default settings (the environment variables unset). */
static gm_backend_ctx *ctx_new(void)
{
    gm_backend_init_args args = {0, 0};
    gm_backend_ctx *c = NULL;

    assert_ok(OPS->init(&args, &c));
    assert_non_null(c);
    return c;
}

/* Sleep for ms milliseconds. */
static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0)
        continue;
}

/* A latch that stream work waits on and the test opens. */
typedef struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool open;
    bool reached; /* set by the waiting work when it starts waiting */
} gate;

static void gate_init(gate *g)
{
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    g->open = false;
    g->reached = false;
}

static void gate_destroy(gate *g)
{
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
}

static void gate_open(gate *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = true;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

/* Wait until the gate opens; GM_ERR_INTERNAL after `seconds`. */
static gm_status gate_wait(gate *g, double seconds)
{
    struct timespec deadline;
    int rc = 0;

    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)seconds;
    pthread_mutex_lock(&g->lock);
    g->reached = true;
    pthread_cond_broadcast(&g->cond);
    while (!g->open && rc == 0)
        rc = pthread_cond_timedwait(&g->cond, &g->lock, &deadline);
    pthread_mutex_unlock(&g->lock);
    return g->open ? GM_OK : gm__error(GM_ERR_INTERNAL, "gate: timed out");
}

/* Wait until work is blocked on the gate. */
static bool gate_wait_reached(gate *g, double seconds)
{
    struct timespec deadline;
    int rc = 0;

    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)seconds;
    pthread_mutex_lock(&g->lock);
    while (!g->reached && rc == 0)
        rc = pthread_cond_timedwait(&g->cond, &g->lock, &deadline);
    pthread_mutex_unlock(&g->lock);
    return g->reached;
}

/* Host work: block on a gate. */
static gm_status work_gate(void *user)
{
    return gate_wait(user, GATE_TIMEOUT);
}

/* Host work: set an int flag to 1. */
static gm_status work_set_flag(void *user)
{
    *(volatile int *)user = 1;
    return GM_OK;
}

/* Poll a stream until it is idle; false after `ms` milliseconds. */
static bool query_idle_within(gm_backend_ctx *c, gm_backend_stream *s, long ms)
{
    for (long t = 0; t < ms; t += 2) {
        if (OPS->stream_query(c, s) == GM_OK)
            return true;
        sleep_ms(2);
    }
    return OPS->stream_query(c, s) == GM_OK;
}

/* A 1-D byte copy descriptor. */
static gm_copy_desc byte_copy(gm_copy_side dside, gm_devptr dst, gm_copy_side sside, gm_devptr src,
                              size_t bytes)
{
    gm_copy_desc d = {dside, sside, dst, src, bytes, 1, 1, bytes, 1, bytes, 1};

    return d;
}

/* ----------------------------------------------------- lifecycle, info */

/* The table: ABI fields set, no NULL slot. */
static void test_ops_table(void **state)
{
    const void *slots[] = {
        (const void *)&OPS->init,
        (const void *)&OPS->fini,
        (const void *)&OPS->device_info,
        (const void *)&OPS->mem_info,
        (const void *)&OPS->mem_alloc,
        (const void *)&OPS->mem_free,
        (const void *)&OPS->host_alloc,
        (const void *)&OPS->host_free,
        (const void *)&OPS->host_register,
        (const void *)&OPS->host_unregister,
        (const void *)&OPS->managed_alloc,
        (const void *)&OPS->pointer_kind,
        (const void *)&OPS->copy,
        (const void *)&OPS->copy_strided,
        (const void *)&OPS->copy_views,
        (const void *)&OPS->memset,
        (const void *)&OPS->stream_create,
        (const void *)&OPS->stream_destroy,
        (const void *)&OPS->stream_builtin,
        (const void *)&OPS->stream_wrap,
        (const void *)&OPS->stream_unwrap,
        (const void *)&OPS->stream_native,
        (const void *)&OPS->stream_synchronize,
        (const void *)&OPS->stream_query,
        (const void *)&OPS->stream_add_callback,
        (const void *)&OPS->event_create,
        (const void *)&OPS->event_destroy,
        (const void *)&OPS->event_record,
        (const void *)&OPS->stream_wait_event,
        (const void *)&OPS->event_query,
        (const void *)&OPS->event_synchronize,
        (const void *)&OPS->event_elapsed,
        (const void *)&OPS->module_load,
        (const void *)&OPS->module_unload,
        (const void *)&OPS->module_get_kernel,
        (const void *)&OPS->module_get_global,
        (const void *)&OPS->module_set_global,
        (const void *)&OPS->kernel_attrs,
        (const void *)&OPS->launch,
        (const void *)&OPS->ipc_get_handle,
        (const void *)&OPS->ipc_open,
        (const void *)&OPS->ipc_close,
        (const void *)&OPS->stream_enqueue_host,
        (const void *)&OPS->host_device_pointer,
    };
    static const char zero[sizeof(void (*)(void))] = {0};

    assert_int_equal(OPS->size, sizeof(gm_backend_ops));
    assert_int_equal(OPS->abi_version, GM_BACKEND_ABI_VERSION);
    assert_string_equal(OPS->name, "host");
    assert_int_equal(OPS->kind, GM_BACKEND_HOST);
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
        assert_memory_not_equal(slots[i], zero, sizeof zero);
}

/* The model name of /proc/cpuinfo's first "model name" line, or "CPU". */
static void cpuinfo_model(char *buf, size_t size)
{
    char line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");

    snprintf(buf, size, "CPU");
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        char *colon = strchr(line, ':');

        if (strncmp(line, "model name", 10) != 0 || colon == NULL)
            continue;
        colon += strspn(colon + 1, " \t") + 1;
        colon[strcspn(colon, "\n")] = '\0';
        if (colon[0] != '\0')
            snprintf(buf, size, "%s", colon);
        break;
    }
    if (f != NULL)
        fclose(f);
}

/* Every context names the CPU of /proc/cpuinfo (which the backend reads once per process). */
static void test_device_name_every_context(void **state)
{
    char model[128], expected[300];
    gm_device_info info;

    (void)state;
    cpuinfo_model(model, sizeof model);
    snprintf(expected, sizeof expected, "gpumem host simulator (%s)", model);
    for (int i = 0; i < 3; i++) {
        gm_backend_ctx *c = ctx_new();

        memset(&info, 0, sizeof info);
        assert_ok(OPS->device_info(c, &info));
        assert_string_equal(info.name, expected);
        OPS->fini(c);
    }
}

/* Properties for warp 32 (CUDA-like) and 64 (HSA-like); bad arguments. */
static void test_init_and_device_info(void **state)
{
    gm_backend_init_args args = {0, 64};
    gm_backend_ctx *c = ctx_new();
    gm_device_info info;

    assert_ok(OPS->device_info(c, &info));
    assert_true(strncmp(info.name, "gpumem host simulator (", 23) == 0);
    assert_int_equal(info.backend, GM_BACKEND_HOST);
    assert_int_equal(info.warp_size, 32);
    assert_int_equal(info.max_threads_per_block, 1024);
    assert_int_equal(info.shared_memory_per_block, 48 * 1024);
    assert_int_equal(info.multiprocessor_count, (int)sysconf(_SC_NPROCESSORS_ONLN));
    assert_int_equal(info.max_block_dim[2], 64);
    assert_int_equal(info.max_grid_dim[0], INT32_MAX);
    assert_int_equal(info.max_grid_dim[1], 65535);
    assert_true(info.total_memory > 0);
    OPS->fini(c);
    assert_ok(OPS->init(&args, &c));
    assert_ok(OPS->device_info(c, &info));
    assert_int_equal(info.warp_size, 64);
    assert_int_equal(info.shared_memory_per_block, 64 * 1024);
    OPS->fini(c);
    args.host_warp_size = 48;
    assert_status(OPS->init(&args, &c), GM_ERR_INVALID_ARG);
    args = (gm_backend_init_args){1, 32};
    assert_status(OPS->init(&args, &c), GM_ERR_NO_DEVICE);
    assert_status(OPS->init(NULL, &c), GM_ERR_NULL_POINTER);
    OPS->fini(NULL);
}

/* Capacities from the environment; bad values are errors naming the variable. */
static void test_capacity_env(void **state)
{
    static const struct {
        const char *text;
        int64_t bytes;
    } ok[] = {{"64M", 64 << 20}, {"3k", 3072}, {"1G", (int64_t)1 << 30},
              {"5MiB", 5 << 20}, {"7", 7},     {"2mb", 2 << 20},
              {"1000", 1000}};
    static const char *const bad[] = {
        "abc",      "0",    "-5M",  "12Q",  "1.5G", "99999999999999999999T",
        "9000000T", "64 M", "64Mi", "64KBB"};
    gm_backend_init_args args = {0, 0};
    gm_backend_ctx *c = NULL;
    int64_t free_b = 0, total = 0;

    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        setenv(GM_HOST_DEVICE_MEMORY_ENV, ok[i].text, 1);
        assert_ok(OPS->init(&args, &c));
        gm_devptr p = 0;

        assert_ok(OPS->mem_info(c, &free_b, &total));
        assert_int_equal(total, ok[i].bytes);
        /* free memory in whole 256-byte granules, the unit allocations are charged in, so
         * an allocation of all of it fits (of "1000": 768) */
        assert_int_equal(free_b, ok[i].bytes / 256 * 256);
        if (free_b > 0 && free_b <= (64 << 20)) {
            assert_ok(OPS->mem_alloc(c, (size_t)free_b, &p));
            assert_ok(OPS->mem_info(c, &free_b, &total));
            assert_int_equal(free_b, 0);
            assert_ok(OPS->mem_free(c, p));
        }
        OPS->fini(c);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(GM_HOST_DEVICE_MEMORY_ENV, bad[i], 1);
        assert_status(OPS->init(&args, &c), GM_ERR_INVALID_ARG);
        assert_message_contains(GM_HOST_DEVICE_MEMORY_ENV);
    }
    unsetenv(GM_HOST_DEVICE_MEMORY_ENV);
}

/* ------------------------------------------------------------- memory */

/* Device allocations are aligned, accounted, and fail with OOM past the capacity. */
static void test_alloc_free_oom(void **state)
{
    gm_backend_ctx *c = NULL;
    gm_devptr a = 0, b = 0, m = 0, x = 0;
    int64_t free_b = 0, total = 0;

    setenv(GM_HOST_DEVICE_MEMORY_ENV, "1M", 1);
    c = ctx_new();
    unsetenv(GM_HOST_DEVICE_MEMORY_ENV);
    assert_ok(OPS->mem_alloc(c, 512 * 1024, &a));
    assert_int_equal(a % GM_HOST_DEVICE_ALIGNMENT, 0);
    memset((void *)(uintptr_t)a, 0xab, 512 * 1024); /* real, writable memory */
    assert_ok(OPS->managed_alloc(c, 256 * 1024 - 100, &m));
    assert_ok(OPS->mem_info(c, &free_b, &total));
    assert_int_equal(total, 1 << 20);
    assert_int_equal(free_b, 256 * 1024);
    assert_status(OPS->mem_alloc(c, 256 * 1024 + 1, &x), GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_message_contains(GM_HOST_DEVICE_MEMORY_ENV);
    assert_ok(OPS->mem_alloc(c, 256 * 1024, &b));
    assert_status(OPS->mem_alloc(c, 1, &x), GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_ok(OPS->mem_free(c, a));
    assert_status(OPS->mem_free(c, a), GM_ERR_INVALID_ARG); /* double free */
    assert_status(OPS->mem_free(c, b + 8), GM_ERR_INVALID_ARG);
    assert_ok(OPS->mem_info(c, &free_b, &total));
    assert_int_equal(free_b, 512 * 1024);
    assert_ok(OPS->mem_alloc(c, 512 * 1024, &a));
    assert_status(OPS->mem_alloc(c, 0, &x), GM_ERR_INVALID_ARG);
    assert_status(OPS->mem_alloc(c, 16, NULL), GM_ERR_NULL_POINTER);
    assert_ok(OPS->mem_free(c, m));
    assert_ok(OPS->mem_free(c, b));
    OPS->fini(c); /* frees `a` */
}

/*
 * Freed device memory is cached: the next allocation of its size class gets
 * it back, yet it is not live (pointer_kind, memset, mem_free), counts as
 * free memory and never causes an out-of-memory error.
 */
static void test_device_cache_reuse(void **state)
{
    gm_backend_ctx *c = NULL;
    gm_devptr a = 0, b = 0, m = 0, x = 0;
    int64_t free_b = 0, total = 0;
    unsigned char byte = 7;
    int kind = -1;

    setenv(GM_HOST_DEVICE_MEMORY_ENV, "1M", 1);
    c = ctx_new();
    unsetenv(GM_HOST_DEVICE_MEMORY_ENV);
    assert_ok(OPS->mem_alloc(c, 1000, &a));
    assert_ok(OPS->mem_free(c, a));
    assert_ok(OPS->pointer_kind(c, (void *)(uintptr_t)a, &kind));
    assert_int_equal(kind, GM_MEMORY_HOST);
    assert_status(OPS->memset(c, a, &byte, 1, 1, NULL), GM_ERR_INVALID_ARG);
    assert_status(OPS->mem_free(c, a), GM_ERR_INVALID_ARG);
    assert_ok(OPS->mem_info(c, &free_b, &total));
    assert_int_equal(free_b, total);
    assert_ok(OPS->managed_alloc(c, 800, &m)); /* 800 and 1000 both take 1024 bytes */
    assert_int_equal(m, a);
    assert_ok(OPS->pointer_kind(c, (void *)(uintptr_t)(m + 799), &kind));
    assert_int_equal(kind, GM_MEMORY_MANAGED);
    assert_ok(OPS->pointer_kind(c, (void *)(uintptr_t)(m + 800), &kind));
    assert_int_not_equal(kind, GM_MEMORY_MANAGED);
    memset((void *)(uintptr_t)m, 0xcd, 800);
    assert_ok(OPS->mem_info(c, &free_b, &total));
    assert_int_equal(free_b, total - 1024);
    assert_ok(OPS->mem_free(c, m));
    assert_ok(OPS->mem_alloc(c, 1 << 20, &b)); /* the cached block takes no capacity */
    assert_status(OPS->mem_alloc(c, 1, &x), GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_ok(OPS->mem_free(c, b));
    OPS->fini(c); /* frees the cache */
}

/* GM_HOST_DEVICE_CACHE bounds the bytes kept ("0": none) and is checked like the capacities. */
static void test_device_cache_env(void **state)
{
    static const char *const bad[] = {"abc", "-1", "12Q", "4 K"};
    gm_backend_init_args args = {0, 0};
    gm_backend_ctx *c = NULL;
    gm_devptr p[3] = {0, 0, 0}, q[2] = {0, 0};

    setenv(GM_HOST_DEVICE_CACHE_ENV, "4K", 1);
    c = ctx_new();
    for (int i = 0; i < 3; i++)
        assert_ok(OPS->mem_alloc(c, 2048, &p[i]));
    for (int i = 0; i < 3; i++)
        assert_ok(OPS->mem_free(c, p[i])); /* p[2] evicts p[0]: the 4 KiB hold two */
    assert_ok(OPS->mem_alloc(c, 2048, &q[0]));
    assert_ok(OPS->mem_alloc(c, 2048, &q[1]));
    assert_int_equal(q[0], p[2]); /* most recently freed first */
    assert_int_equal(q[1], p[1]);
    assert_ok(OPS->mem_free(c, q[0]));
    assert_ok(OPS->mem_free(c, q[1]));
    OPS->fini(c);
    setenv(GM_HOST_DEVICE_CACHE_ENV, "0", 1);
    c = ctx_new();
    assert_ok(OPS->mem_alloc(c, 2048, &p[0]));
    assert_ok(OPS->mem_free(c, p[0]));
    OPS->fini(c);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(GM_HOST_DEVICE_CACHE_ENV, bad[i], 1);
        assert_status(OPS->init(&args, &c), GM_ERR_INVALID_ARG);
        assert_message_contains(GM_HOST_DEVICE_CACHE_ENV);
    }
    unsetenv(GM_HOST_DEVICE_CACHE_ENV);
}

static char error_seen[512];

/* Log hook: remember the last error message. */
static void capture_error(gm_log_level level, const char *message, void *user)
{
    if (level == GM_LOG_ERROR)
        snprintf(error_seen, sizeof error_seen, "%s", message);
}

/* A write into freed (cached) device memory is reported and the block is not handed out. */
static void test_device_cache_write_after_free(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_devptr a = 0, b = 0;

    gm_set_log_hook(capture_error, NULL);
    error_seen[0] = '\0';
    assert_ok(OPS->mem_alloc(c, 4096, &a));
    assert_ok(OPS->mem_free(c, a));
    memset((void *)(uintptr_t)a, 0x5a, 2 * sizeof(void *)); /* the words that link it */
    assert_ok(OPS->mem_alloc(c, 4096, &b));
    assert_non_null(strstr(error_seen, "written after mem_free"));
    memset((void *)(uintptr_t)b, 0, 4096);
    gm_set_log_hook(NULL, NULL);
    assert_ok(OPS->mem_free(c, b));
    OPS->fini(c);
}

/* Pinned capacity: host_alloc beyond it fails with GM_ERR_NO_MEMORY. */
static void test_pinned_capacity(void **state)
{
    gm_backend_ctx *c = NULL;
    void *p = NULL, *q = NULL;

    setenv(GM_HOST_PINNED_MEMORY_ENV, "64K", 1);
    c = ctx_new();
    unsetenv(GM_HOST_PINNED_MEMORY_ENV);
    assert_ok(OPS->host_alloc(c, 60 * 1024, 0, &p));
    assert_status(OPS->host_alloc(c, 8 * 1024, 0, &q), GM_ERR_NO_MEMORY);
    assert_message_contains(GM_HOST_PINNED_MEMORY_ENV);
    assert_ok(OPS->host_free(c, p));
    assert_ok(OPS->host_alloc(c, 64 * 1024, 0, &q));
    assert_ok(OPS->host_free(c, q));
    OPS->fini(c);
}

/* pointer_kind classifies every kind of this context's memory, interior pointers too. */
static void test_pointer_kind(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_devptr d = 0, m = 0;
    void *pinned = NULL, *mapped = NULL;
    char user[64];
    int kind = -1;

    assert_ok(OPS->mem_alloc(c, 1000, &d));
    assert_ok(OPS->managed_alloc(c, 1000, &m));
    assert_ok(OPS->host_alloc(c, 1000, 0, &pinned));
    assert_ok(OPS->host_alloc(c, 1000, GM_HOST_MAPPED | GM_HOST_PORTABLE, &mapped));
    assert_ok(OPS->host_register(c, user, sizeof user, GM_HOST_MAPPED));
    assert_ok(OPS->pointer_kind(c, (void *)(uintptr_t)d, &kind));
    assert_int_equal(kind, GM_MEMORY_DEVICE);
    assert_ok(OPS->pointer_kind(c, (void *)(uintptr_t)(d + 999), &kind));
    assert_int_equal(kind, GM_MEMORY_DEVICE);
    assert_ok(OPS->pointer_kind(c, (void *)(uintptr_t)(d + 1000), &kind));
    assert_int_not_equal(kind, GM_MEMORY_DEVICE);
    assert_ok(OPS->pointer_kind(c, (void *)(uintptr_t)(m + 10), &kind));
    assert_int_equal(kind, GM_MEMORY_MANAGED);
    assert_ok(OPS->pointer_kind(c, (char *)pinned + 5, &kind));
    assert_int_equal(kind, GM_MEMORY_PINNED);
    assert_ok(OPS->pointer_kind(c, mapped, &kind));
    assert_int_equal(kind, GM_MEMORY_MAPPED);
    assert_ok(OPS->pointer_kind(c, user + 63, &kind));
    assert_int_equal(kind, GM_MEMORY_MAPPED);
    assert_ok(OPS->pointer_kind(c, &kind, &kind));
    assert_int_equal(kind, GM_MEMORY_HOST);
    assert_ok(OPS->pointer_kind(c, NULL, &kind));
    assert_int_equal(kind, GM_MEMORY_HOST);
    assert_status(OPS->pointer_kind(c, user, NULL), GM_ERR_NULL_POINTER);
    assert_ok(OPS->host_unregister(c, user));
    assert_ok(OPS->pointer_kind(c, user, &kind));
    assert_int_equal(kind, GM_MEMORY_HOST);
    OPS->fini(c);
}

/* Pinned and mapped allocations: locked, device pointer == host pointer, flags. */
static void test_pinned_and_mapped(void **state)
{
    gm_backend_ctx *c = ctx_new();
    void *p = NULL, *wc = NULL;
    gm_devptr dp = 0, d = 0;

    assert_ok(OPS->host_alloc(c, 10000, GM_HOST_MAPPED, &p));
    assert_int_equal((uintptr_t)p % (uintptr_t)sysconf(_SC_PAGESIZE), 0);
    assert_ok(OPS->host_device_pointer(c, (char *)p + 100, &dp));
    assert_int_equal(dp, (gm_devptr)(uintptr_t)((char *)p + 100));
    if (geteuid() == 0) /* root may always mlock */
        assert_true(gm__host_is_locked(c, p));
    assert_ok(OPS->host_alloc(c, 100, GM_HOST_WRITECOMBINED | GM_HOST_PORTABLE, &wc));
    memset(wc, 1, 100);
    assert_status(OPS->host_alloc(c, 100, 1u << 7, &wc), GM_ERR_INVALID_ARG);
    assert_status(OPS->host_alloc(c, 0, 0, &wc), GM_ERR_INVALID_ARG);
    assert_ok(OPS->mem_alloc(c, 64, &d));
    assert_status(OPS->host_device_pointer(c, (void *)(uintptr_t)d, &dp), GM_ERR_INVALID_ARG);
    assert_status(OPS->host_device_pointer(c, &dp, &dp), GM_ERR_INVALID_ARG);
    assert_status(OPS->host_free(c, (void *)(uintptr_t)d), GM_ERR_INVALID_ARG);
    assert_status(OPS->mem_free(c, (gm_devptr)(uintptr_t)p), GM_ERR_INVALID_ARG);
    assert_ok(OPS->host_free(c, p));
    assert_status(OPS->host_free(c, p), GM_ERR_INVALID_ARG);
    assert_false(gm__host_is_locked(c, p));
    OPS->fini(c); /* frees wc and d */
}

static char log_seen[512];

/* Log hook: remember the last info message about page-locking. */
static void capture_log(gm_log_level level, const char *message, void *user)
{
    if (level == GM_LOG_INFO && strstr(message, "NOT page-locked") != NULL)
        snprintf(log_seen, sizeof log_seen, "%s", message);
}

/* With mlock off, pinned memory still works, is reported unlocked, and says so in the log. */
static void test_mlock_disabled_is_honest(void **state)
{
    gm_backend_ctx *c = NULL;
    gm_log_level level = gm_get_log_level();
    void *p = NULL;
    char user[100];

    setenv(GM_HOST_MLOCK_ENV, "0", 1);
    c = ctx_new();
    unsetenv(GM_HOST_MLOCK_ENV);
    gm_set_log_hook(capture_log, NULL);
    gm_set_log_level(GM_LOG_INFO);
    log_seen[0] = '\0';
    assert_ok(OPS->host_alloc(c, 4096, 0, &p));
    assert_false(gm__host_is_locked(c, p));
    assert_non_null(strstr(log_seen, "host_alloc"));
    log_seen[0] = '\0';
    assert_ok(OPS->host_register(c, user, sizeof user, 0));
    assert_false(gm__host_is_locked(c, user));
    assert_non_null(strstr(log_seen, "host_register"));
    assert_ok(OPS->host_unregister(c, user));
    gm_set_log_hook(NULL, NULL);
    gm_set_log_level(level);
    assert_ok(OPS->host_free(c, p));
    OPS->fini(c);
}

/* Register, re-register (error), overlap (error), unregister, register again. */
static void test_register_unregister(void **state)
{
    gm_backend_ctx *c = ctx_new();
    size_t n = 3 * 4096;
    char *buf = malloc(n);
    gm_devptr dp = 0;

    assert_non_null(buf);
    assert_ok(OPS->host_register(c, buf, n, 0));
    if (geteuid() == 0)
        assert_true(gm__host_is_locked(c, buf + n - 1));
    assert_status(OPS->host_register(c, buf, n, 0), GM_ERR_STATE);
    assert_message_contains("already registered");
    assert_status(OPS->host_register(c, buf + 10, 10, 0), GM_ERR_STATE);
    assert_status(OPS->host_register(c, buf + n - 1, 10, 0), GM_ERR_STATE);
    assert_ok(OPS->host_device_pointer(c, buf, &dp)); /* unified addressing */
    assert_status(OPS->host_unregister(c, buf + 1), GM_ERR_INVALID_ARG);
    assert_ok(OPS->host_unregister(c, buf));
    assert_false(gm__host_is_locked(c, buf));
    assert_status(OPS->host_unregister(c, buf), GM_ERR_INVALID_ARG);
    assert_ok(OPS->host_register(c, buf, n, GM_HOST_MAPPED)); /* immediate undo: works again */
    assert_ok(OPS->host_device_pointer(c, buf + 5, &dp));
    assert_int_equal(dp, (gm_devptr)(uintptr_t)(buf + 5));
    assert_status(OPS->host_register(c, NULL, 8, 0), GM_ERR_NULL_POINTER);
    assert_status(OPS->host_register(c, buf + n, 0, 0), GM_ERR_INVALID_ARG);
    assert_status(OPS->host_register(c, buf + n, 8, GM_HOST_WRITECOMBINED), GM_ERR_INVALID_ARG);
    OPS->fini(c); /* unregisters buf */
    free(buf);
}

/*
 * A pinned or mapped allocation holds its whole pages (locked and charged with
 * it): registering its page-rounded tail is refused in the same context as in
 * another one, so no registration outlives the block inside it.
 */
static void test_register_in_pinned_tail(void **state)
{
    gm_backend_ctx *c = ctx_new(), *other = ctx_new();
    void *p = NULL;
    int kind = -1;

    (void)state;
    assert_ok(OPS->host_alloc(c, 100, 0, &p));
    assert_status(OPS->host_register(c, (char *)p + 200, 100, 0), GM_ERR_STATE);
    assert_status(OPS->host_register(other, (char *)p + 200, 100, 0), GM_ERR_STATE);
    assert_status(OPS->host_register(c, (char *)p + 50, 10, 0), GM_ERR_STATE);
    assert_ok(OPS->host_free(c, p));
    assert_ok(OPS->pointer_kind(c, (char *)p + 200, &kind));
    assert_int_equal(kind, GM_MEMORY_HOST); /* nothing of the context is left there */
    assert_ok(OPS->host_alloc(c, 100, GM_HOST_MAPPED, &p));
    assert_status(OPS->host_register(c, (char *)p + 4000, 8, 0), GM_ERR_STATE);
    assert_ok(OPS->host_free(c, p));
    OPS->fini(other);
    OPS->fini(c);
}

/* Two registrations sharing a page: unregistering one keeps the shared page locked. */
static void test_register_shared_page(void **state)
{
    gm_backend_ctx *c = ctx_new();
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    char *buf = NULL;
    long base = gm_test_vmlck_kb();

    assert_int_equal(posix_memalign((void **)&buf, ps, 3 * ps), 0);
    assert_ok(OPS->host_register(c, buf + 100, 100, 0));
    assert_ok(OPS->host_register(c, buf + 300, ps, 0)); /* pages 0 and 1 */
    if (!gm__host_is_locked(c, buf + 300) || base < 0 || gm_test_vmlck_kb() == base) {
        OPS->fini(c); /* not locked, no VmLck, or mlock is a no-op (ASan intercepts it) */
        free(buf);
        skip();
    }
    assert_int_equal(gm_test_vmlck_kb() - base, (long)(2 * ps / 1024));
    assert_ok(OPS->host_unregister(c, buf + 100));
    assert_int_equal(gm_test_vmlck_kb() - base, (long)(2 * ps / 1024));
    assert_ok(OPS->host_unregister(c, buf + 300));
    assert_int_equal(gm_test_vmlck_kb() - base, 0);
    OPS->fini(c);
    free(buf);
}

/*
 * A registration whose mlock did not happen (off here; a full RLIMIT_MEMLOCK
 * alike) shares a page with another context's locked registration: once
 * both are gone the page is unlocked (the unlocked span still counted as
 * locking it, and VmLck stayed up a page with nothing registered).
 */
static void test_unlocked_registration_shares_a_page(void **state)
{
    gm_backend_ctx *ca = ctx_new(), *cb = NULL;
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    char *buf = NULL;
    long base = gm_test_vmlck_kb();

    setenv(GM_HOST_MLOCK_ENV, "0", 1);
    cb = ctx_new();
    unsetenv(GM_HOST_MLOCK_ENV);
    assert_int_equal(posix_memalign((void **)&buf, ps, 2 * ps), 0);
    assert_ok(OPS->host_register(ca, buf, 100, 0)); /* locks page 0 */
    if (!gm__host_is_locked(ca, buf) || base < 0 || gm_test_vmlck_kb() == base) {
        OPS->fini(cb); /* not locked, no VmLck, or mlock is a no-op (ASan intercepts it) */
        OPS->fini(ca);
        free(buf);
        skip();
    }
    assert_ok(OPS->host_register(cb, buf + 100, 100, 0)); /* page 0 too, not locked */
    assert_false(gm__host_is_locked(cb, buf + 100));
    assert_ok(OPS->host_unregister(ca, buf));
    assert_ok(OPS->host_unregister(cb, buf + 100));
    assert_int_equal(gm_test_vmlck_kb() - base, 0);
    OPS->fini(cb);
    OPS->fini(ca);
    free(buf);
}

/*
 * Another context sees a portable pinned allocation as the bytes asked for,
 * as its owner does, not its page-rounded block: past the end, pointer_kind
 * is host memory and device pointers, memsets and copies are refused.
 */
static void test_portable_allocation_ends_where_asked(void **state)
{
    gm_backend_ctx *c1 = ctx_new(), *c2 = ctx_new();
    void *p = NULL;
    unsigned char one = 1;
    int kind = -1;
    gm_devptr dp = 0;

    assert_ok(OPS->host_alloc(c1, 100, GM_HOST_PORTABLE, &p));
    for (int k = 0; k < 2; k++) {
        gm_backend_ctx *c = k == 0 ? c1 : c2;

        assert_ok(OPS->pointer_kind(c, (char *)p + 99, &kind));
        assert_int_equal(kind, GM_MEMORY_PINNED);
        assert_ok(OPS->pointer_kind(c, (char *)p + 200, &kind));
        assert_int_equal(kind, GM_MEMORY_HOST);
        assert_status(OPS->host_device_pointer(c, (char *)p + 200, &dp), GM_ERR_INVALID_ARG);
        assert_status(OPS->memset(c, (gm_devptr)(uintptr_t)p, &one, 1, 200, NULL),
                      GM_ERR_INVALID_ARG);
        assert_ok(OPS->memset(c, (gm_devptr)(uintptr_t)p, &one, 1, 100, NULL));
    }
    assert_ok(OPS->host_free(c1, p));
    OPS->fini(c2);
    OPS->fini(c1);
}

/* ------------------------------------------------------------- copies */

/* H2D, D2D, D2H pitched copies; 2-D pitched; strided copy; errors. */
static void test_copy_sync(void **state)
{
    gm_backend_ctx *c = ctx_new();
    unsigned char src[256], out[256] = {0};
    gm_devptr d1 = 0, d2 = 0;
    gm_copy_desc desc;

    for (int i = 0; i < 256; i++)
        src[i] = (unsigned char)i;
    assert_ok(OPS->mem_alloc(c, 256, &d1));
    assert_ok(OPS->mem_alloc(c, 256, &d2));
    desc = byte_copy(GM_COPY_DEVICE, d1, GM_COPY_HOST, (gm_devptr)(uintptr_t)src, 256);
    assert_ok(OPS->copy(c, &desc, NULL));
    desc = byte_copy(GM_COPY_DEVICE, d2, GM_COPY_DEVICE, d1, 256);
    assert_ok(OPS->copy(c, &desc, NULL));
    desc = byte_copy(GM_COPY_HOST, (gm_devptr)(uintptr_t)out, GM_COPY_DEVICE, d2, 256);
    assert_ok(OPS->copy(c, &desc, NULL));
    assert_memory_equal(out, src, 256);
    /* 2-D: 4 rows of 8 bytes from pitch 32 into pitch 8 (packing). */
    desc = (gm_copy_desc){GM_COPY_HOST,
                          GM_COPY_HOST,
                          (gm_devptr)(uintptr_t)out,
                          (gm_devptr)(uintptr_t)src,
                          8,
                          4,
                          1,
                          8,
                          1,
                          32,
                          1};
    assert_ok(OPS->copy(c, &desc, NULL));
    for (int r = 0; r < 4; r++)
        assert_memory_equal(out + 8 * r, src + 32 * r, 8);
    /* Errors: a device side outside device memory, pitch < width, past the allocation. */
    desc = byte_copy(GM_COPY_DEVICE, (gm_devptr)(uintptr_t)out, GM_COPY_HOST,
                     (gm_devptr)(uintptr_t)src, 16);
    assert_status(OPS->copy(c, &desc, NULL), GM_ERR_INVALID_ARG);
    desc = byte_copy(GM_COPY_DEVICE, d1 + 200, GM_COPY_HOST, (gm_devptr)(uintptr_t)src, 100);
    assert_status(OPS->copy(c, &desc, NULL), GM_ERR_INVALID_ARG);
    desc = (gm_copy_desc){GM_COPY_HOST,
                          GM_COPY_HOST,
                          (gm_devptr)(uintptr_t)out,
                          (gm_devptr)(uintptr_t)src,
                          8,
                          4,
                          1,
                          4,
                          1,
                          32,
                          1};
    assert_status(OPS->copy(c, &desc, NULL), GM_ERR_INVALID_ARG);
    assert_status(OPS->copy(c, NULL, NULL), GM_ERR_NULL_POINTER);
    OPS->fini(c);
}

/* Memory a random run may touch: host-addressable buffers of RUN_BYTES. */
enum { RUN_BYTES = 512, RUN_BUFS = 7, RUN_CASES = 4000 };

/* xorshift64 for the run cases. */
static uint64_t run_rng = 0x2545F4914F6CDD1Dull;

static size_t run_pick(size_t n)
{
    run_rng ^= run_rng << 13;
    run_rng ^= run_rng >> 7;
    run_rng ^= run_rng << 17;
    return (size_t)(run_rng % n);
}

/* Pattern every buffer (the same way for both runs of a case). */
static void run_pattern(unsigned char *const *bufs, size_t seed)
{
    for (int b = 0; b < RUN_BUFS; b++)
        for (size_t i = 0; i < RUN_BYTES; i++)
            bufs[b][i] = (unsigned char)(i * 7 + seed + (size_t)b * 31);
}

/*
 * Offset of a side in buffer b: inside it for a host side and for another
 * context's portable memory (bufs[4]: the check accepts that up to the end
 * of its page, so a copy past its bytes would run into the poisoned tail),
 * else anywhere up to 8 bytes past the end.
 */
static uintptr_t run_offset(bool device, int b, size_t width)
{
    return device && b != 4 ? run_pick(RUN_BYTES + 8) : run_pick(RUN_BYTES - width + 1);
}

/* One run copy from patterned buffers: its status, message and the buffers afterwards. */
static gm_status run_once(gm_backend_ctx *c, const gm_copy_desc *d, unsigned char *const *bufs,
                          size_t seed, char *message, unsigned char *after)
{
    gm_status status = GM_OK;

    run_pattern(bufs, seed);
    status = OPS->copy(c, d, NULL);
    snprintf(message, 512, "%s", status == GM_OK ? "" : gm_last_error_message());
    for (int b = 0; b < RUN_BUFS; b++)
        memcpy(after + (size_t)b * RUN_BYTES, bufs[b], RUN_BYTES);
    return status;
}

/*
 * Synchronous 1-D copies (height and depth 1, the pitches the width, one row
 * per plane: the run the core issues for dense arrays, which host_copy
 * checks and copies on a shorter path) against the same copies with
 * dst_height = src_height = 2 (which a one-plane copy never reads, but
 * which keeps them on the general pitched path): from the same memory, the
 * same status, message and bytes. Device sides point into device, pinned,
 * mapped, another context's device and another context's portable memory,
 * straddling or past their ends, into a freed (cached) block, into plain
 * host memory or at address 0; host sides stay inside the buffers (the
 * backend does not check them). Then the run path's errors one by one.
 */
static void test_copy_run_matches_pitched(void **state)
{
    gm_backend_ctx *c = ctx_new(), *c2 = ctx_new();
    gm_devptr dev = 0, freed = 0, odev = 0;
    void *pinned = NULL, *mapped = NULL, *oport = NULL;
    unsigned char *h1 = malloc(RUN_BYTES), *h2 = malloc(RUN_BYTES), *bufs[RUN_BUFS];
    unsigned char *after[2] = {malloc(RUN_BUFS * RUN_BYTES), malloc(RUN_BUFS * RUN_BYTES)};
    uintptr_t dev_targets[RUN_BUFS + 2];
    char message[2][512];
    int ok = 0, refused = 0;
    gm_copy_desc d;

    (void)state;
    assert_true(h1 != NULL && h2 != NULL && after[0] != NULL && after[1] != NULL);
    assert_ok(OPS->mem_alloc(c, RUN_BYTES, &dev));
    assert_ok(OPS->mem_alloc(c, RUN_BYTES, &freed));
    assert_ok(OPS->mem_free(c, freed)); /* cached: not memory of the context */
    assert_ok(OPS->host_alloc(c, RUN_BYTES, 0, &pinned));
    assert_ok(OPS->host_alloc(c, RUN_BYTES, GM_HOST_MAPPED, &mapped));
    assert_ok(OPS->mem_alloc(c2, RUN_BYTES, &odev));
    assert_ok(OPS->host_alloc(c2, RUN_BYTES, GM_HOST_PORTABLE, &oport));
    bufs[0] = (unsigned char *)(uintptr_t)dev;
    bufs[1] = pinned;
    bufs[2] = mapped;
    bufs[3] = (unsigned char *)(uintptr_t)odev;
    bufs[4] = oport;
    bufs[5] = h1;
    bufs[6] = h2;
    for (int b = 0; b < RUN_BUFS; b++)
        dev_targets[b] = (uintptr_t)bufs[b];
    dev_targets[RUN_BUFS] = (uintptr_t)freed;
    dev_targets[RUN_BUFS + 1] = 0;

    for (size_t n = 0; n < RUN_CASES; n++) {
        size_t width = run_pick(8) == 0 ? 0 : 1 + run_pick(RUN_BYTES / 2);
        bool dst_dev = run_pick(2) == 0, src_dev = run_pick(2) == 0;
        int db = (int)run_pick(dst_dev ? RUN_BUFS + 2 : RUN_BUFS), sb = 0;
        uintptr_t dst = 0, src = 0;
        gm_copy_desc slow;
        gm_status fast_status = GM_OK;

        do
            sb = (int)run_pick(src_dev ? RUN_BUFS + 2 : RUN_BUFS);
        while (sb == db && sb < RUN_BUFS);
        /* host sides inside their buffer, device sides anywhere near theirs */
        dst = (dst_dev ? dev_targets[db] : (uintptr_t)bufs[db]) + run_offset(dst_dev, db, width);
        src = (src_dev ? dev_targets[sb] : (uintptr_t)bufs[sb]) + run_offset(src_dev, sb, width);
        if ((dst_dev && dev_targets[db] == 0) || (src_dev && dev_targets[sb] == 0)) {
            dst = dst_dev && dev_targets[db] == 0 ? 0 : dst;
            src = src_dev && dev_targets[sb] == 0 ? 0 : src;
        }
        if (dst < src + width && src < dst + width && dst != 0 && src != 0)
            continue; /* overlapping ranges (a device side past its buffer): memcpy's UB */
        d = byte_copy(dst_dev ? GM_COPY_DEVICE : GM_COPY_HOST, dst,
                      src_dev ? GM_COPY_DEVICE : GM_COPY_HOST, src, width);
        slow = d;
        slow.dst_height = slow.src_height = 2;
        fast_status = run_once(c, &d, bufs, n, message[0], after[0]);
        assert_int_equal(run_once(c, &slow, bufs, n, message[1], after[1]), fast_status);
        assert_string_equal(message[0], message[1]);
        assert_memory_equal(after[0], after[1], RUN_BUFS * RUN_BYTES);
        if (fast_status == GM_OK && width > 0)
            ok++;
        else if (fast_status != GM_OK)
            refused++;
    }
    assert_true(ok > RUN_CASES / 8 && refused > RUN_CASES / 8);

    /* the run path's errors, with their messages */
    d = byte_copy(GM_COPY_DEVICE, 0, GM_COPY_HOST, (gm_devptr)(uintptr_t)h1, 16);
    assert_status(OPS->copy(c, &d, NULL), GM_ERR_NULL_POINTER);
    assert_message_contains("copy: destination address is 0");
    d = byte_copy(GM_COPY_HOST, (gm_devptr)(uintptr_t)h1, GM_COPY_DEVICE, 0, 16);
    assert_status(OPS->copy(c, &d, NULL), GM_ERR_NULL_POINTER);
    assert_message_contains("copy: source address is 0");
    d = byte_copy(GM_COPY_DEVICE, dev + RUN_BYTES - 8, GM_COPY_HOST, (gm_devptr)(uintptr_t)h1, 16);
    assert_status(OPS->copy(c, &d, NULL), GM_ERR_INVALID_ARG);
    assert_message_contains("copy: destination range");
    d = byte_copy(GM_COPY_HOST, (gm_devptr)(uintptr_t)h1, GM_COPY_DEVICE, freed, 16);
    assert_status(OPS->copy(c, &d, NULL), GM_ERR_INVALID_ARG);
    assert_message_contains("copy: source range");
    d = byte_copy(GM_COPY_DEVICE, dev, GM_COPY_DEVICE, odev, 16); /* another context's device */
    assert_status(OPS->copy(c, &d, NULL), GM_ERR_INVALID_ARG);
    assert_message_contains(
        "is not inside device, managed, pinned or mapped memory of this context");
    d = byte_copy(GM_COPY_DEVICE, dev, GM_COPY_DEVICE, (gm_devptr)(uintptr_t)oport, 16);
    assert_ok(OPS->copy(c, &d, NULL)); /* another context's portable memory is memory of all */
    d.width_bytes = d.dst_pitch = d.src_pitch = (size_t)INT64_MAX + 1;
    assert_status(OPS->copy(c, &d, NULL), GM_ERR_INVALID_ARG);
    assert_message_contains("copy: invalid layout");

    free(after[0]);
    free(after[1]);
    free(h1);
    free(h2);
    assert_ok(OPS->host_free(c2, oport));
    assert_ok(OPS->mem_free(c2, odev));
    assert_ok(OPS->host_free(c, mapped));
    assert_ok(OPS->host_free(c, pinned));
    assert_ok(OPS->mem_free(c, dev));
    OPS->fini(c2);
    OPS->fini(c);
}

/* copy_strided: a transposed host view into device memory and back. */
static void test_copy_strided_op(void **state)
{
    gm_backend_ctx *c = ctx_new();
    int64_t shape[2] = {30, 20}, tshape[2] = {20, 30};
    float host[30][20], back[20][30];
    gm_devptr d = 0;
    gm_ndview hv, tv, dv, bv;

    for (int i = 0; i < 30; i++)
        for (int j = 0; j < 20; j++)
            host[i][j] = (float)(i * 100 + j);
    assert_ok(OPS->mem_alloc(c, sizeof back, &d));
    assert_ok(gm_ndview_init(host, GM_FLOAT32, 2, shape, NULL, GM_ORDER_C, &hv));
    assert_ok(gm_ndview_transpose(&hv, &tv));
    assert_ok(gm_ndview_init((void *)(uintptr_t)d, GM_FLOAT32, 2, tshape, NULL, GM_ORDER_C, &dv));
    dv.memory = GM_MEMORY_DEVICE;
    dv.device_id = 0;
    assert_ok(OPS->copy_strided(c, &dv, &tv, NULL));
    assert_ok(gm_ndview_init(back, GM_FLOAT32, 2, tshape, NULL, GM_ORDER_C, &bv));
    assert_ok(OPS->copy_strided(c, &bv, &dv, NULL));
    for (int i = 0; i < 30; i++)
        for (int j = 0; j < 20; j++)
            assert_true(back[j][i] == host[i][j]);
    assert_status(OPS->copy_strided(c, &dv, &hv, NULL), GM_ERR_SHAPE_MISMATCH);
    dv.data = (char *)dv.data + 64; /* now runs past the allocation */
    assert_status(OPS->copy_strided(c, &dv, &tv, NULL), GM_ERR_INVALID_ARG);
    OPS->fini(c);
}

/* memset with 1, 2, 4 and 8-byte patterns; sync and on a stream. */
static void test_memset(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_backend_stream *s = NULL;
    gm_devptr d = 0;
    uint8_t b = 0x5a;
    uint16_t h = 0x1234;
    uint32_t w = 0xdeadbeef;
    uint64_t q = 0x0102030405060708u;

    assert_ok(OPS->mem_alloc(c, 1024, &d));
    assert_ok(OPS->stream_create(c, 0, &s));
    assert_ok(OPS->memset(c, d, &b, 1, 1024, NULL));
    for (int i = 0; i < 1024; i++)
        assert_int_equal(((uint8_t *)(uintptr_t)d)[i], 0x5a);
    assert_ok(OPS->memset(c, d, &h, 2, 333, NULL));
    for (int i = 0; i < 333; i++)
        assert_int_equal(((uint16_t *)(uintptr_t)d)[i], 0x1234);
    assert_ok(OPS->memset(c, d, &w, 4, 255, s));
    assert_ok(OPS->stream_synchronize(c, s));
    for (int i = 0; i < 255; i++)
        assert_int_equal(((uint32_t *)(uintptr_t)d)[i], 0xdeadbeef);
    assert_int_equal(((uint8_t *)(uintptr_t)d)[1020], 0x5a); /* untouched tail */
    assert_ok(OPS->memset(c, d, &q, 8, 128, NULL));
    for (int i = 0; i < 128; i++)
        assert_true(((uint64_t *)(uintptr_t)d)[i] == q);
    assert_status(OPS->memset(c, d, &q, 3, 1, NULL), GM_ERR_INVALID_ARG);
    assert_status(OPS->memset(c, d, &q, 8, 129, NULL), GM_ERR_INVALID_ARG);
    assert_status(OPS->memset(c, d, NULL, 8, 1, NULL), GM_ERR_NULL_POINTER);
    assert_ok(OPS->stream_destroy(c, s));
    OPS->fini(c);
}

/* An async copy returns before the data moves (the stream is held by a gate). */
static void test_async_copy_returns_early(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_backend_stream *s = NULL;
    unsigned char src[4096], dst[4096], before[4096];
    gate g;
    gm_copy_desc desc = byte_copy(GM_COPY_HOST, (gm_devptr)(uintptr_t)dst, GM_COPY_HOST,
                                  (gm_devptr)(uintptr_t)src, sizeof src);

    gate_init(&g);
    memset(src, 7, sizeof src);
    memset(dst, 1, sizeof dst);
    memcpy(before, dst, sizeof dst);
    assert_ok(OPS->stream_create(c, GM_STREAM_NON_BLOCKING, &s));
    assert_ok(OPS->stream_enqueue_host(c, s, work_gate, &g, NULL));
    assert_ok(OPS->copy(c, &desc, s));
    assert_true(gate_wait_reached(&g, GATE_TIMEOUT));
    sleep_ms(SETTLE_MS);
    assert_memory_equal(dst, before, sizeof dst); /* not moved yet */
    assert_status(OPS->stream_query(c, s), GM_ERR_NOT_READY);
    gate_open(&g);
    assert_ok(OPS->stream_synchronize(c, s));
    assert_memory_equal(dst, src, sizeof dst);
    assert_ok(OPS->stream_query(c, s));
    assert_ok(OPS->stream_destroy(c, s));
    gate_destroy(&g);
    OPS->fini(c);
}

/* ------------------------------------------------------------ streams */

/* Two gates crossed: each stream waits for the other's work (only overlap finishes). */
typedef struct crossed {
    gate *mine;
    gate *other;
} crossed;

/* Host work: open my gate, then wait for the other stream's. */
static gm_status work_crossed(void *user)
{
    crossed *x = user;

    gate_open(x->mine);
    return gate_wait(x->other, GATE_TIMEOUT);
}

/* Work on two streams overlaps: serialized, one of them would time out. */
static void test_streams_overlap(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_backend_stream *a = NULL, *b = NULL;
    gate ga, gb;
    crossed xa = {&ga, &gb}, xb = {&gb, &ga};

    gate_init(&ga);
    gate_init(&gb);
    assert_ok(OPS->stream_create(c, 0, &a));
    assert_ok(OPS->stream_create(c, 0, &b));
    assert_ok(OPS->stream_enqueue_host(c, a, work_crossed, &xa, NULL));
    assert_ok(OPS->stream_enqueue_host(c, b, work_crossed, &xb, NULL));
    assert_ok(OPS->stream_synchronize(c, a));
    assert_ok(OPS->stream_synchronize(c, b));
    assert_ok(OPS->stream_destroy(c, a));
    assert_ok(OPS->stream_destroy(c, b));
    gate_destroy(&ga);
    gate_destroy(&gb);
    OPS->fini(c);
}

/* An append-only log written by stream work. */
typedef struct order_log {
    int entries[300];
    int n;
} order_log;

typedef struct order_item {
    order_log *log;
    int value;
} order_item;

/* Host work: append my value. */
static gm_status work_append(void *user)
{
    order_item *it = user;

    it->log->entries[it->log->n++] = it->value;
    return GM_OK;
}

/* Work runs in FIFO order, copies included. */
static void test_fifo_order(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_backend_stream *s = NULL;
    order_log log = {{0}, 0};
    order_item items[200];
    int a = 1, b = 0;
    gm_copy_desc desc = byte_copy(GM_COPY_HOST, (gm_devptr)(uintptr_t)&b, GM_COPY_HOST,
                                  (gm_devptr)(uintptr_t)&a, sizeof a);

    assert_ok(OPS->stream_create(c, 0, &s));
    for (int i = 0; i < 200; i++) {
        items[i] = (order_item){&log, i};
        assert_ok(OPS->stream_enqueue_host(c, s, work_append, &items[i], NULL));
        if (i == 100)
            assert_ok(OPS->copy(c, &desc, s));
    }
    assert_ok(OPS->stream_synchronize(c, s));
    assert_int_equal(log.n, 200);
    for (int i = 0; i < 200; i++)
        assert_int_equal(log.entries[i], i);
    assert_int_equal(b, 1);
    assert_ok(OPS->stream_destroy(c, s));
    OPS->fini(c);
}

/* Host work: fail with a message. */
static gm_status work_fail(void *user)
{
    return gm__error(GM_ERR_INVALID_ARG, "boom from stream work %d", *(int *)user);
}

/* Host work: fail without recording a message. */
static gm_status work_fail_quietly(void *user)
{
    return GM_ERR_LAUNCH;
}

/* The first error is reported (with its message) by the next synchronize, then cleared. */
static void test_sticky_error(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_backend_stream *s = NULL;
    int id = 42;
    int after = 0;

    assert_ok(OPS->stream_create(c, 0, &s));
    assert_ok(OPS->stream_enqueue_host(c, s, work_fail, &id, NULL));
    assert_ok(OPS->stream_enqueue_host(c, s, work_fail_quietly, NULL, NULL));
    assert_ok(OPS->stream_enqueue_host(c, s, work_set_flag, &after, NULL));
    assert_status(OPS->stream_synchronize(c, s), GM_ERR_INVALID_ARG);
    assert_message_contains("boom from stream work 42");
    assert_int_equal(after, 1); /* later work still ran */
    assert_ok(OPS->stream_synchronize(c, s));
    assert_ok(OPS->stream_enqueue_host(c, s, work_fail_quietly, NULL, NULL));
    assert_status(OPS->stream_synchronize(c, s), GM_ERR_LAUNCH);
    assert_message_contains("ERR_LAUNCH");
    assert_ok(OPS->stream_synchronize(c, s));
    /* Without a stream the work runs at once and its status is returned. */
    assert_status(OPS->stream_enqueue_host(c, NULL, work_fail, &id, NULL), GM_ERR_INVALID_ARG);
    assert_ok(OPS->stream_destroy(c, s));
    OPS->fini(c);
}

/* What a callback saw. */
typedef struct callback_seen {
    int calls;
    gm_status status;
    int flag_at_call;
    const int *flag;
} callback_seen;

static void record_callback(gm_status status, void *user)
{
    callback_seen *seen = user;

    seen->calls++;
    seen->status = status;
    seen->flag_at_call = *seen->flag;
}

static int cleanups = 0;

static void count_cleanup(void *user)
{
    cleanups++;
}

/* Callbacks run after preceding work with the stream's status; cleanups run. */
static void test_callbacks(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_backend_stream *s = NULL;
    int flag = 0, id = 1;
    callback_seen ok = {0, GM_ERR_INTERNAL, 0, &flag}, bad = {0, GM_OK, 0, &flag};

    cleanups = 0;
    assert_ok(OPS->stream_create(c, 0, &s));
    assert_ok(OPS->stream_enqueue_host(c, s, work_set_flag, &flag, count_cleanup));
    assert_ok(OPS->stream_add_callback(c, s, record_callback, &ok));
    assert_ok(OPS->stream_enqueue_host(c, s, work_fail, &id, count_cleanup));
    assert_ok(OPS->stream_add_callback(c, s, record_callback, &bad));
    assert_status(OPS->stream_synchronize(c, s), GM_ERR_INVALID_ARG);
    assert_int_equal(ok.calls, 1);
    assert_int_equal(ok.status, GM_OK);
    assert_int_equal(ok.flag_at_call, 1);
    assert_int_equal(bad.calls, 1);
    assert_int_equal(bad.status, GM_ERR_INVALID_ARG);
    assert_int_equal(cleanups, 2);
    assert_ok(OPS->stream_enqueue_host(c, NULL, work_set_flag, &flag, count_cleanup));
    assert_int_equal(cleanups, 3);
    /* no stream: fn's failure is returned, and cleanup ran all the same (backend.h) */
    assert_status(OPS->stream_enqueue_host(c, NULL, work_fail, &id, count_cleanup),
                  GM_ERR_INVALID_ARG);
    assert_int_equal(cleanups, 4);
    assert_status(OPS->stream_add_callback(c, s, NULL, NULL), GM_ERR_NULL_POINTER);
    assert_ok(OPS->stream_destroy(c, s));
    OPS->fini(c);
}

/* Host work: sleep for *(long *)user milliseconds. */
static gm_status work_sleep(void *user)
{
    sleep_ms(*(long *)user);
    return GM_OK;
}

/* Timing events measure work; errors for non-timing / unrecorded / pending events. */
static void test_events(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_backend_stream *s = NULL;
    gm_backend_event *start = NULL, *end = NULL, *plain = NULL;
    long nap = 30;
    float ms = 0.0f;
    gate g;

    gate_init(&g);
    assert_ok(OPS->stream_create(c, 0, &s));
    assert_ok(OPS->event_create(c, 1, &start));
    assert_ok(OPS->event_create(c, 1, &end));
    assert_ok(OPS->event_create(c, 0, &plain));
    assert_ok(OPS->event_query(c, end)); /* never recorded: complete */
    assert_ok(OPS->event_synchronize(c, end));
    assert_status(OPS->event_elapsed(c, start, end, &ms), GM_ERR_INVALID_ARG);
    assert_ok(OPS->event_record(c, start, s));
    assert_ok(OPS->stream_enqueue_host(c, s, work_sleep, &nap, NULL));
    assert_ok(OPS->event_record(c, end, s));
    assert_ok(OPS->event_synchronize(c, end));
    assert_ok(OPS->event_query(c, end));
    assert_ok(OPS->event_elapsed(c, start, end, &ms));
    assert_true(ms >= (float)nap);
    assert_true(ms < 10000.0f);
    assert_ok(OPS->event_record(c, plain, s));
    assert_ok(OPS->event_synchronize(c, plain));
    assert_status(OPS->event_elapsed(c, start, plain, &ms), GM_ERR_INVALID_ARG);
    assert_ok(OPS->stream_enqueue_host(c, s, work_gate, &g, NULL));
    assert_ok(OPS->event_record(c, end, s));
    assert_status(OPS->event_query(c, end), GM_ERR_NOT_READY);
    assert_status(OPS->event_elapsed(c, start, end, &ms), GM_ERR_NOT_READY);
    gate_open(&g);
    assert_ok(OPS->event_synchronize(c, end));
    assert_ok(OPS->event_elapsed(c, start, end, &ms));
    assert_ok(OPS->event_destroy(c, start));
    assert_ok(OPS->event_destroy(c, end));
    assert_ok(OPS->event_destroy(c, plain));
    assert_ok(OPS->stream_destroy(c, s));
    gate_destroy(&g);
    OPS->fini(c);
}

/* Host work: copy *src into *dst (ints), observing another stream's effect. */
typedef struct observe {
    volatile int *src;
    int seen;
} observe;

static gm_status work_observe(void *user)
{
    observe *o = user;

    o->seen = *o->src;
    return GM_OK;
}

/* stream_wait_event orders work across streams, for the record current at the call. */
static void test_stream_wait_event(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_backend_stream *a = NULL, *b = NULL;
    gm_backend_event *e = NULL;
    volatile int x = 0;
    observe o = {&x, -1};
    gate g1, g2;

    gate_init(&g1);
    gate_init(&g2);
    assert_ok(OPS->stream_create(c, GM_STREAM_NON_BLOCKING, &a));
    assert_ok(OPS->stream_create(c, GM_STREAM_NON_BLOCKING, &b));
    assert_ok(OPS->event_create(c, 0, &e));
    assert_ok(OPS->stream_enqueue_host(c, a, work_gate, &g1, NULL));
    assert_ok(OPS->stream_enqueue_host(c, a, work_set_flag, (void *)&x, NULL));
    assert_ok(OPS->event_record(c, e, a));
    assert_ok(OPS->stream_wait_event(c, b, e));
    assert_ok(OPS->stream_enqueue_host(c, b, work_observe, &o, NULL));
    sleep_ms(SETTLE_MS);
    assert_status(OPS->stream_query(c, b), GM_ERR_NOT_READY); /* b waits for a */
    gate_open(&g1);
    assert_ok(OPS->stream_synchronize(c, b));
    assert_int_equal(o.seen, 1);
    /* Recorded-state semantics: b waits on the completed record, not a later one. */
    assert_ok(OPS->stream_wait_event(c, b, e));
    assert_ok(OPS->stream_enqueue_host(c, a, work_gate, &g2, NULL));
    assert_ok(OPS->event_record(c, e, a));
    assert_ok(OPS->stream_enqueue_host(c, b, work_set_flag, (void *)&x, NULL));
    assert_true(query_idle_within(c, b, 5000));
    assert_status(OPS->event_query(c, e), GM_ERR_NOT_READY);
    gate_open(&g2);
    assert_ok(OPS->stream_synchronize(c, a));
    assert_ok(OPS->event_destroy(c, e));
    assert_ok(OPS->stream_destroy(c, a));
    assert_ok(OPS->stream_destroy(c, b));
    gate_destroy(&g1);
    gate_destroy(&g2);
    OPS->fini(c);
}

/* What a helper thread saw of its per-thread stream. */
typedef struct thread_probe {
    gm_backend_ctx *ctx;
    gm_backend_stream *first;
    gm_backend_stream *second;
    gm_status status;
} thread_probe;

static void *probe_thread(void *arg)
{
    thread_probe *p = arg;
    int flag = 0;

    p->status = OPS->stream_builtin(p->ctx, GM_BUILTIN_STREAM_PER_THREAD, &p->first);
    if (p->status == GM_OK)
        p->status = OPS->stream_builtin(p->ctx, GM_BUILTIN_STREAM_PER_THREAD, &p->second);
    if (p->status == GM_OK)
        p->status = OPS->stream_enqueue_host(p->ctx, p->first, work_set_flag, &flag, NULL);
    if (p->status == GM_OK)
        p->status = OPS->stream_synchronize(p->ctx, p->first);
    if (p->status == GM_OK && flag != 1)
        p->status = GM_ERR_INTERNAL;
    return NULL;
}

/*
 * Built-in streams: the default one is the legacy one (CUDA's stream 0, as
 * Numba's default_stream() is), and one per thread (same within a thread). cmocka's leak-checking
 * allocator keeps its block list per thread, so a block allocated on the helper thread and freed by
 * fini on this one would corrupt it: this test runs on the C library's allocator (leaks are then
 * left to the ASan build).
 */
static void test_builtin_and_per_thread(void **state)
{
    gm_backend_ctx *c = NULL;
    gm_backend_stream *d1 = NULL, *d2 = NULL, *l = NULL, *p1 = NULL, *p2 = NULL;
    thread_probe probe = {NULL, NULL, NULL, GM_ERR_INTERNAL};
    pthread_t t;

    assert_int_equal(gm_test_restore_allocator(state), 0);
    c = ctx_new();
    probe.ctx = c;
    assert_ok(OPS->stream_builtin(c, GM_BUILTIN_STREAM_DEFAULT, &d1));
    assert_ok(OPS->stream_builtin(c, GM_BUILTIN_STREAM_DEFAULT, &d2));
    assert_ptr_equal(d1, d2);
    assert_ok(OPS->stream_builtin(c, GM_BUILTIN_STREAM_LEGACY, &l));
    assert_ptr_equal(l, d1);
    assert_ok(OPS->stream_builtin(c, GM_BUILTIN_STREAM_PER_THREAD, &p1));
    assert_int_equal(pthread_create(&t, NULL, probe_thread, &probe), 0);
    assert_ok(OPS->stream_builtin(c, GM_BUILTIN_STREAM_PER_THREAD, &p2));
    pthread_join(t, NULL); /* (the probe's stream may be gone now: compared, not used) */
    assert_ok(probe.status);
    assert_ptr_equal(p1, p2);
    assert_ptr_equal(probe.first, probe.second);
    assert_ptr_not_equal(probe.first, p1);
    assert_ptr_not_equal(p1, d1);
    assert_status(OPS->stream_builtin(c, (gm_builtin_stream)7, &p1), GM_ERR_INVALID_ARG);
    assert_status(OPS->stream_destroy(c, d1), GM_ERR_INVALID_ARG);
    assert_status(OPS->stream_destroy(c, p2), GM_ERR_INVALID_ARG);
    OPS->fini(c);
    assert_int_equal(gm_test_use_cmocka_allocator(state), 0);
}

/* Poll the thread count until it is at most `want`; the last count seen (after ~5 s). */
static int thread_count_down_to(int want)
{
    int n = gm_test_thread_count();

    for (int i = 0; i < 2500 && n > want; i++) {
        sleep_ms(2);
        n = gm_test_thread_count();
    }
    return n;
}

/* What a short-lived thread does with its per-thread stream. */
typedef struct exiting_job {
    gm_backend_ctx *ctx;
    gate *hold;       /* NULL, or a gate its work waits for */
    bool wrap;        /* wrap its stream before exiting */
    _Atomic int flag; /* set by its last work item (atomic: the test's edge from that work) */
    void *native;     /* its stream's native handle */
    gm_backend_stream *wrapper;
    gm_status status;
} exiting_job;

/* Host work: set an atomic flag to 1. */
static gm_status work_set_atomic(void *user)
{
    atomic_store((_Atomic int *)user, 1);
    return GM_OK;
}

/* Thread body: queue work on this thread's stream (behind job->hold if set) and exit. */
static void *queue_and_exit(void *arg)
{
    exiting_job *job = arg;
    gm_backend_stream *s = NULL;

    job->status = OPS->stream_builtin(job->ctx, GM_BUILTIN_STREAM_PER_THREAD, &s);
    if (job->status == GM_OK && job->hold != NULL)
        job->status = OPS->stream_enqueue_host(job->ctx, s, work_gate, job->hold, NULL);
    if (job->status == GM_OK)
        job->status = OPS->stream_enqueue_host(job->ctx, s, work_set_atomic, &job->flag, NULL);
    if (job->status == GM_OK)
        job->native = OPS->stream_native(job->ctx, s);
    if (job->status == GM_OK && job->wrap)
        job->status = OPS->stream_wrap(job->ctx, job->native, &job->wrapper);
    return NULL;
}

/* Thread body: nothing. */
static void *nothing(void *arg)
{
    return arg;
}

/* Run one exiting_job on a thread of its own, to its end. */
static void run_exiting(exiting_job *job)
{
    pthread_t t;

    assert_int_equal(pthread_create(&t, NULL, queue_and_exit, job), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_ok(job->status);
}

/*
 * A thread's per-thread stream goes once the thread has exited and the
 * stream's work is done, so a program that keeps starting threads does not
 * collect idle workers: 24 threads in turn each leave work on theirs, which
 * runs, and the process is back to its thread count. A retired stream with
 * work still queued, or wrapped, stays (its native handle still wraps) until
 * both are over. On the C library's allocator: the workers free their
 * streams on their own threads.
 */
static void test_per_thread_stream_ends_with_thread(void **state)
{
    gm_backend_ctx *c = NULL;
    gm_backend_stream *w = NULL;
    exiting_job jobs[24];
    exiting_job held;
    gate g;
    pthread_t t;
    int base = 0;

    assert_int_equal(gm_test_restore_allocator(state), 0);
    c = ctx_new();
    memset(jobs, 0, sizeof(jobs));
    assert_int_equal(pthread_create(&t, NULL, nothing, NULL), 0); /* ThreadSanitizer starts */
    assert_int_equal(pthread_join(t, NULL), 0);                   /* a thread with the first */
    base = gm_test_thread_count_settled();
    assert_true(base > 0);
    for (int i = 0; i < 24; i++) {
        jobs[i].ctx = c;
        run_exiting(&jobs[i]);
    }
    assert_int_equal(thread_count_down_to(base), base);
    for (int i = 0; i < 24; i++)
        assert_int_equal(atomic_load(&jobs[i].flag), 1);
    assert_status(OPS->stream_wrap(c, jobs[23].native, &w), GM_ERR_INVALID_HANDLE);

    /* work still queued: the stream stays until it has run */
    gate_init(&g);
    memset(&held, 0, sizeof(held));
    held.ctx = c;
    held.hold = &g;
    run_exiting(&held);
    sleep_ms(20);
    assert_int_equal(gm_test_thread_count(), base + 1);
    assert_ok(OPS->stream_wrap(c, held.native, &w)); /* still there */
    OPS->stream_unwrap(c, w);
    assert_int_equal(atomic_load(&held.flag), 0);
    gate_open(&g);
    assert_int_equal(thread_count_down_to(base), base);
    assert_int_equal(atomic_load(&held.flag), 1); /* after the gate's wait: it may go */
    gate_destroy(&g);

    /* wrapped: the stream stays, and works, until it is unwrapped */
    memset(&held, 0, sizeof(held));
    held.ctx = c;
    held.wrap = true;
    run_exiting(&held);
    sleep_ms(20);
    assert_int_equal(gm_test_thread_count(), base + 1);
    atomic_store(&held.flag, 0);
    assert_ok(OPS->stream_enqueue_host(c, held.wrapper, work_set_atomic, &held.flag, NULL));
    assert_ok(OPS->stream_synchronize(c, held.wrapper));
    assert_int_equal(atomic_load(&held.flag), 1);
    OPS->stream_unwrap(c, held.wrapper);
    assert_int_equal(thread_count_down_to(base), base);
    OPS->fini(c);
    assert_int_equal(gm_test_use_cmocka_allocator(state), 0);
}

/* Thread body: get the per-thread stream of the context `arg` (the thread's exit then
 * notifies). */
static void *touch_per_thread(void *arg)
{
    gm_backend_stream *s = NULL;

    return OPS->stream_builtin(arg, GM_BUILTIN_STREAM_PER_THREAD, &s) == GM_OK ? s : NULL;
}

/*
 * fork while a context's lock is held (by the forking thread here; by any
 * thread in a program): in the child, the exit of a thread that used a
 * per-thread stream of a context made there must not call into the
 * parent's context, whose lock nobody in the child will give back. The
 * child would hang (ended by alarm) before the fork handlers cleared the
 * watches it inherited.
 */
static void test_fork_child_thread_exit(void **state)
{
    host_ctx *parent = NULL;
    gm_backend_ctx *c = NULL, *other = NULL;
    pid_t pid;
    int status = 0;

#if defined(GM_TEST_TSAN) /* it lets no threaded process's fork child start threads */
    skip();
#endif
    assert_int_equal(gm_test_restore_allocator(state), 0);
    other = ctx_new(); /* watched before c */
    c = ctx_new();
    parent = gm__host_ctx(c);
    pthread_mutex_lock(&parent->lock);
    pid = fork();
    if (pid == 0) {
        gm_backend_ctx *mine = NULL;
        gm_backend_init_args args = {0, 0};
        pthread_t t;
        void *got = NULL;

        alarm(10);
        if (OPS->init(&args, &mine) != GM_OK)
            _exit(2);
        /* ending an inherited context stops its watch: that must leave the child's list
         * alone (unlinking it from the parent's list put c back at the list's head) */
        OPS->fini(other);
        if (pthread_create(&t, NULL, touch_per_thread, mine) != 0 || pthread_join(t, &got) != 0 ||
            got == NULL)
            _exit(2);
        OPS->fini(mine);
        _exit(0);
    }
    pthread_mutex_unlock(&parent->lock);
    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status))
        fail_msg("the fork child was killed by signal %d (a hang ended by alarm: 14)",
                 WTERMSIG(status));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    OPS->fini(c);
    OPS->fini(other);
    assert_int_equal(gm_test_use_cmocka_allocator(state), 0);
}

/* An application's key, made after the library's exit notice: its destructor runs later. */
static pthread_key_t late_key;
static gm_backend_ctx *late_ctx;
static _Atomic int late_flag;

/* The application's thread-exit work: host work on the thread's per-thread stream. */
static void late_destructor(void *value)
{
    gm_backend_stream *s = NULL;

    (void)value;
    if (OPS->stream_builtin(late_ctx, GM_BUILTIN_STREAM_PER_THREAD, &s) == GM_OK)
        (void)OPS->stream_enqueue_host(late_ctx, s, work_set_atomic, &late_flag, NULL);
}

/* Thread body: use the per-thread stream (arming the library's notice), then set late_key. */
static void *use_then_set_late(void *arg)
{
    gm_backend_stream *s = NULL;

    (void)arg;
    if (OPS->stream_builtin(late_ctx, GM_BUILTIN_STREAM_PER_THREAD, &s) == GM_OK)
        (void)OPS->stream_synchronize(late_ctx, s);
    (void)pthread_setspecific(late_key, (void *)1);
    return NULL;
}

/*
 * A per-thread stream made by an application's key destructor that runs
 * after the library's exit notice (a key made later) is retired too: the
 * notice is armed again for it. Without that, each such thread left a
 * worker behind. The destructor's work still runs.
 */
static void test_per_thread_stream_from_late_destructor(void **state)
{
    pthread_t t;
    int base = 0;

    assert_int_equal(gm_test_restore_allocator(state), 0);
    late_ctx = ctx_new();
    assert_int_equal(pthread_create(&t, NULL, touch_per_thread, late_ctx), 0); /* notice key */
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(pthread_key_create(&late_key, late_destructor), 0);
    sleep_ms(20); /* the first thread's worker ends */
    base = gm_test_thread_count_settled();
    for (int i = 0; i < 8; i++) {
        atomic_store(&late_flag, 0);
        assert_int_equal(pthread_create(&t, NULL, use_then_set_late, NULL), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        for (int j = 0; j < 2500 && atomic_load(&late_flag) == 0; j++)
            sleep_ms(2);
        assert_int_equal(atomic_load(&late_flag), 1);
    }
    assert_true(thread_count_down_to(base) <= base);
    assert_int_equal(pthread_key_delete(late_key), 0);
    OPS->fini(late_ctx);
    assert_int_equal(gm_test_use_cmocka_allocator(state), 0);
}

/* A backend callback that counts its calls. */
static void count_call(gm_status status, void *user)
{
    (void)status;
    atomic_fetch_add((_Atomic int *)user, 1);
}

/*
 * A wrapper released after its stream was destroyed by its owner, as context
 * teardown does with wrappers left to it: the stream stays until the wrapper
 * goes (AddressSanitizer reports a use after free, cmocka a leak, if not).
 */
static void test_unwrap_after_owner_destroyed(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_backend_stream *owner = NULL, *w = NULL, *again = NULL;
    void *native = NULL;
    _Atomic int calls = 0;

    (void)state;
    assert_ok(OPS->stream_create(c, GM_STREAM_DEFAULT, &owner));
    native = OPS->stream_native(c, owner);
    assert_ok(OPS->stream_wrap(c, native, &w));
    assert_ok(OPS->stream_enqueue_host(c, owner, work_fail_quietly, NULL, NULL));
    assert_ok(OPS->stream_destroy(c, owner)); /* waits for the work, takes (logs) its error */
    assert_ok(OPS->stream_synchronize(c, w)); /* as on HSA, and as without a wrapper */
    /* the wrapper keeps it: it still runs work, and no new wrapper finds it */
    assert_status(OPS->stream_wrap(c, native, &again), GM_ERR_INVALID_HANDLE);
    assert_ok(OPS->stream_add_callback(c, w, count_call, (void *)&calls));
    assert_ok(OPS->stream_synchronize(c, w));
    assert_int_equal(calls, 1);
    OPS->stream_unwrap(c, w);
    OPS->fini(c);
}

/*
 * Legacy stream work waits for earlier work on blocking streams, not on
 * non-blocking ones; so does the default stream's, which is the legacy one.
 */
static void test_legacy_waits_for_blocking(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_backend_stream *blocking = NULL, *nonblocking = NULL, *legacy = NULL, *def = NULL;
    int flag = 0, on_default = 0;
    gate g1, g2;

    gate_init(&g1);
    gate_init(&g2);
    assert_ok(OPS->stream_create(c, 0, &blocking));
    assert_ok(OPS->stream_create(c, GM_STREAM_NON_BLOCKING, &nonblocking));
    assert_ok(OPS->stream_builtin(c, GM_BUILTIN_STREAM_LEGACY, &legacy));
    assert_ok(OPS->stream_enqueue_host(c, nonblocking, work_gate, &g2, NULL));
    assert_ok(OPS->stream_enqueue_host(c, blocking, work_gate, &g1, NULL));
    assert_ok(OPS->stream_enqueue_host(c, legacy, work_set_flag, &flag, NULL));
    assert_ok(OPS->stream_builtin(c, GM_BUILTIN_STREAM_DEFAULT, &def));
    assert_ok(OPS->stream_enqueue_host(c, def, work_set_flag, &on_default, NULL));
    sleep_ms(SETTLE_MS);
    assert_int_equal(flag, 0); /* held back by the blocking stream */
    assert_int_equal(on_default, 0);
    gate_open(&g1);
    assert_true(query_idle_within(c, legacy, 5000)); /* not by the non-blocking one */
    assert_int_equal(flag, 1);
    assert_true(query_idle_within(c, def, 5000));
    assert_int_equal(on_default, 1);
    assert_status(OPS->stream_query(c, nonblocking), GM_ERR_NOT_READY);
    gate_open(&g2);
    assert_ok(OPS->stream_synchronize(c, nonblocking));
    assert_ok(OPS->stream_destroy(c, blocking));
    assert_ok(OPS->stream_destroy(c, nonblocking));
    gate_destroy(&g1);
    gate_destroy(&g2);
    OPS->fini(c);
}

/* Later work on blocking streams waits for earlier legacy work. */
static void test_blocking_waits_for_legacy(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_backend_stream *blocking = NULL, *nonblocking = NULL, *legacy = NULL;
    int on_blocking = 0, on_nonblocking = 0;
    gate g;

    gate_init(&g);
    assert_ok(OPS->stream_create(c, 0, &blocking)); /* blocking */
    assert_ok(OPS->stream_create(c, GM_STREAM_NON_BLOCKING, &nonblocking));
    assert_ok(OPS->stream_builtin(c, GM_BUILTIN_STREAM_LEGACY, &legacy));
    assert_ok(OPS->stream_enqueue_host(c, legacy, work_gate, &g, NULL));
    assert_ok(OPS->stream_enqueue_host(c, blocking, work_set_flag, &on_blocking, NULL));
    assert_ok(OPS->stream_enqueue_host(c, nonblocking, work_set_flag, &on_nonblocking, NULL));
    assert_true(query_idle_within(c, nonblocking, 5000));
    assert_int_equal(on_nonblocking, 1);
    sleep_ms(SETTLE_MS);
    assert_int_equal(on_blocking, 0);
    gate_open(&g);
    assert_ok(OPS->stream_synchronize(c, blocking));
    assert_int_equal(on_blocking, 1);
    assert_ok(OPS->stream_synchronize(c, NULL)); /* NULL is the legacy stream */
    assert_ok(OPS->stream_destroy(c, blocking));
    assert_ok(OPS->stream_destroy(c, nonblocking));
    gate_destroy(&g);
    OPS->fini(c);
}

/* Host work: wait on a gate, then store 42 (for the synchronous-copy test). */
typedef struct gated_store {
    gate *g;
    int *target;
} gated_store;

static gm_status work_gated_store(void *user)
{
    gated_store *gs = user;
    gm_status status = gate_wait(gs->g, GATE_TIMEOUT);

    *gs->target = 42;
    return status;
}

/* Thread body: open a gate after a delay. */
static void *open_later(void *arg)
{
    sleep_ms(SETTLE_MS);
    gate_open(arg);
    return NULL;
}

/* A synchronous copy waits for earlier work on blocking streams (legacy semantics). */
static void test_sync_copy_waits_for_blocking(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_backend_stream *s = NULL;
    int src = 0, dst = 0;
    gate g;
    gated_store gs = {&g, &src};
    gm_copy_desc desc = byte_copy(GM_COPY_HOST, (gm_devptr)(uintptr_t)&dst, GM_COPY_HOST,
                                  (gm_devptr)(uintptr_t)&src, sizeof src);
    pthread_t t;

    gate_init(&g);
    assert_ok(OPS->stream_create(c, 0, &s));
    assert_ok(OPS->stream_enqueue_host(c, s, work_gated_store, &gs, NULL));
    assert_int_equal(pthread_create(&t, NULL, open_later, &g), 0);
    assert_ok(OPS->copy(c, &desc, NULL));
    assert_int_equal(dst, 42);
    pthread_join(t, NULL);
    assert_ok(OPS->stream_destroy(c, s));
    gate_destroy(&g);
    OPS->fini(c);
}

/* Wrapping: native handle, work through the wrapper, unwrap frees only the wrapper. */
static void test_wrap(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_backend_stream *s = NULL, *w = NULL, *w2 = NULL;
    int flag = 0, junk = 0;

    assert_ok(OPS->stream_create(c, 0, &s));
    assert_ptr_equal(OPS->stream_native(c, s), s);
    assert_ok(OPS->stream_wrap(c, OPS->stream_native(c, s), &w));
    assert_ptr_not_equal(w, s);
    assert_ptr_equal(OPS->stream_native(c, w), s);
    assert_ok(OPS->stream_wrap(c, w, &w2)); /* a wrapper's handle names the same stream */
    assert_ptr_equal(OPS->stream_native(c, w2), s);
    assert_ok(OPS->stream_enqueue_host(c, w, work_set_flag, &flag, NULL));
    assert_ok(OPS->stream_synchronize(c, w));
    assert_int_equal(flag, 1);
    assert_status(OPS->stream_destroy(c, w), GM_ERR_INVALID_ARG);
    OPS->stream_unwrap(c, w);
    flag = 0;
    assert_ok(OPS->stream_enqueue_host(c, s, work_set_flag, &flag, NULL));
    assert_ok(OPS->stream_synchronize(c, s));
    assert_int_equal(flag, 1);
    assert_status(OPS->stream_wrap(c, &junk, &w), GM_ERR_INVALID_HANDLE);
    assert_status(OPS->stream_wrap(c, NULL, &w), GM_ERR_NULL_POINTER);
    assert_status(OPS->stream_create(c, 0x10, &w), GM_ERR_INVALID_ARG);
    OPS->stream_unwrap(c, NULL);
    assert_ok(OPS->stream_destroy(c, s));
    OPS->fini(c); /* frees w2 */
}

/* Host work: synchronize the stream it runs on (must be refused, not deadlock). */
typedef struct self_sync {
    gm_backend_ctx *ctx;
    gm_backend_stream *stream;
    gm_status sync_status;
    gm_status destroy_status;
} self_sync;

static gm_status work_self_sync(void *user)
{
    self_sync *x = user;

    x->sync_status = OPS->stream_synchronize(x->ctx, x->stream);
    x->destroy_status = OPS->stream_destroy(x->ctx, x->stream);
    return GM_OK;
}

/* stream_destroy waits for pending work; own-stream synchronize is refused. */
static void test_destroy_waits_and_self_sync(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_backend_stream *s = NULL;
    long nap = 30;
    int flag = 0;
    self_sync x = {c, NULL, GM_OK, GM_OK};

    assert_ok(OPS->stream_create(c, 0, &s));
    x.stream = s;
    assert_ok(OPS->stream_enqueue_host(c, s, work_self_sync, &x, NULL));
    assert_ok(OPS->stream_enqueue_host(c, s, work_sleep, &nap, NULL));
    assert_ok(OPS->stream_enqueue_host(c, s, work_set_flag, &flag, NULL));
    assert_ok(OPS->stream_destroy(c, s));
    assert_int_equal(flag, 1);
    assert_int_equal(x.sync_status, GM_ERR_STATE);
    assert_int_equal(x.destroy_status, GM_ERR_STATE);
    OPS->fini(c);
}

/* fini drains pending work and frees streams, events, wrappers and memory. */
static void test_fini_drains_and_frees(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_backend_stream *s = NULL, *w = NULL, *pt = NULL;
    gm_backend_event *e = NULL;
    gm_devptr d = 0;
    void *p = NULL;
    char user[64];
    long nap = 20;
    int flag = 0;

    assert_ok(OPS->stream_create(c, 0, &s));
    assert_ok(OPS->stream_wrap(c, s, &w));
    assert_ok(OPS->stream_builtin(c, GM_BUILTIN_STREAM_PER_THREAD, &pt));
    assert_ok(OPS->event_create(c, 1, &e));
    assert_ok(OPS->mem_alloc(c, 4096, &d));
    assert_ok(OPS->host_alloc(c, 4096, GM_HOST_MAPPED, &p));
    assert_ok(OPS->host_register(c, user, sizeof user, 0));
    assert_ok(OPS->stream_enqueue_host(c, s, work_sleep, &nap, NULL));
    assert_ok(OPS->event_record(c, e, s));
    assert_ok(OPS->stream_enqueue_host(c, s, work_set_flag, &flag, NULL));
    assert_ok(OPS->stream_enqueue_host(c, pt, work_sleep, &nap, NULL));
    OPS->fini(c);
    assert_int_equal(flag, 1);
}

/* The unsupported stubs: GM_ERR_UNSUPPORTED naming the op. */
static void test_unsupported_stubs(void **state)
{
    gm_backend_ctx *c = ctx_new();
    char handle[64];
    gm_devptr p = 0;
    int kind = 0;
    gm_ndview v;

    assert_status(OPS->ipc_get_handle(c, 0, handle, sizeof handle), GM_ERR_UNSUPPORTED);
    assert_message_contains("ipc_get_handle is not supported by this backend");
    assert_status(OPS->ipc_open(c, handle, sizeof handle, &p), GM_ERR_UNSUPPORTED);
    assert_message_contains("ipc_open");
    assert_status(OPS->ipc_close(c, 0), GM_ERR_UNSUPPORTED);
    assert_message_contains("ipc_close");
    assert_status(gm__unsupported_managed_alloc(c, 8, &p), GM_ERR_UNSUPPORTED);
    assert_message_contains("managed_alloc is not supported");
    assert_status(gm__unsupported_pointer_kind(c, &kind, &kind), GM_ERR_UNSUPPORTED);
    assert_message_contains("pointer_kind");
    memset(&v, 0, sizeof v);
    assert_status(gm__unsupported_copy_strided(c, &v, &v, NULL), GM_ERR_UNSUPPORTED);
    assert_message_contains("copy_strided");
    /* copy_views declines without an error: the core plans the copy */
    {
        gm_status status = GM_ERR_INTERNAL;

        gm_clear_error();
        assert_false(gm__unsupported_copy_views(c, &v, &v, &status));
        assert_int_equal(status, GM_ERR_INTERNAL);
        assert_int_equal(gm_last_error(), GM_OK);
    }
    OPS->fini(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops_table),
        cmocka_unit_test(test_init_and_device_info),
        cmocka_unit_test(test_device_name_every_context),
        cmocka_unit_test(test_capacity_env),
        cmocka_unit_test(test_alloc_free_oom),
        cmocka_unit_test(test_device_cache_reuse),
        cmocka_unit_test(test_device_cache_env),
        cmocka_unit_test(test_device_cache_write_after_free),
        cmocka_unit_test(test_pinned_capacity),
        cmocka_unit_test(test_pointer_kind),
        cmocka_unit_test(test_pinned_and_mapped),
        cmocka_unit_test(test_mlock_disabled_is_honest),
        cmocka_unit_test(test_register_unregister),
        cmocka_unit_test(test_register_in_pinned_tail),
        cmocka_unit_test(test_register_shared_page),
        cmocka_unit_test(test_unlocked_registration_shares_a_page),
        cmocka_unit_test(test_portable_allocation_ends_where_asked),
        cmocka_unit_test(test_copy_sync),
        cmocka_unit_test(test_copy_run_matches_pitched),
        cmocka_unit_test(test_copy_strided_op),
        cmocka_unit_test(test_memset),
        cmocka_unit_test(test_async_copy_returns_early),
        cmocka_unit_test(test_streams_overlap),
        cmocka_unit_test(test_fifo_order),
        cmocka_unit_test(test_sticky_error),
        cmocka_unit_test(test_callbacks),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_stream_wait_event),
        cmocka_unit_test(test_builtin_and_per_thread),
        cmocka_unit_test(test_per_thread_stream_ends_with_thread),
        cmocka_unit_test(test_fork_child_thread_exit),
        cmocka_unit_test(test_per_thread_stream_from_late_destructor),
        cmocka_unit_test(test_unwrap_after_owner_destroyed),
        cmocka_unit_test(test_legacy_waits_for_blocking),
        cmocka_unit_test(test_blocking_waits_for_legacy),
        cmocka_unit_test(test_sync_copy_waits_for_blocking),
        cmocka_unit_test(test_wrap),
        cmocka_unit_test(test_destroy_waits_and_self_sync),
        cmocka_unit_test(test_fini_drains_and_frees),
        cmocka_unit_test(test_unsupported_stubs),
    };

    unsetenv(GM_HOST_DEVICE_MEMORY_ENV);
    unsetenv(GM_HOST_PINNED_MEMORY_ENV);
    unsetenv(GM_HOST_DEVICE_CACHE_ENV);
    unsetenv(GM_HOST_MLOCK_ENV);
    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
