/*
 * Runtime benchmark on the current backend (prints figures, never fails):
 *   - an allocate/release pair of a device array through the deallocation
 *     queue, against malloc/free of the same size (target: <= 2x);
 *   - the same through defer_cleanup (nothing freed until the scope ends);
 *   - gm_pointer_kind (what gm_is_device_pointer asks) of a host and a device pointer
 *     among many live device arrays;
 *   - a gm_pin / gm_host_scope_end pair of one buffer while 100, 1,000 and
 *     10,000 other registered ranges stay alive (GM_HOST_MLOCK=0 unless set:
 *     the cost of the bookkeeping, not of mlock).
 * Run: meson test --benchmark --suite gpumem runtime -v, or ./build/bench/bench_runtime
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gpumem/gpumem.h>

#define CHECK(call)                                                                   \
    do {                                                                              \
        gm_status check_status_ = (call);                                             \
        if (check_status_ != GM_OK) {                                                 \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call, \
                    gm_status_name(check_status_), gm_last_error_message());          \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One round: ns per malloc/free pair of `bytes`. */
static double time_malloc_free(size_t bytes, int loops)
{
    double t0 = now_ns();

    for (int i = 0; i < loops; i++) {
        void *volatile p = malloc(bytes);

        free(p);
    }
    return (now_ns() - t0) / loops;
}

/* One round: ns per gm_device_array / gm_array_release pair of `bytes` (the flush included). */
static double time_device_array(gm_context *ctx, size_t bytes, int loops, int deferred)
{
    int64_t shape[1] = {(int64_t)bytes};
    double t0 = now_ns();

    if (deferred)
        CHECK(gm_defer_cleanup_begin(ctx));
    for (int i = 0; i < loops; i++) {
        gm_array *a = NULL;

        CHECK(gm_device_array(ctx, 1, shape, GM_UINT8, GM_ORDER_C, &a));
        gm_array_release(&a);
    }
    if (deferred)
        CHECK(gm_defer_cleanup_end(ctx));
    CHECK(gm_deallocations_flush(ctx));
    return (now_ns() - t0) / loops;
}

static double min2(double a, double b)
{
    return a < b ? a : b;
}

/* ns per gm_pointer_kind of `ptr`, best of 5 rounds. */
static double time_pointer_kind(gm_context *ctx, const void *ptr)
{
    double best = 1e30;

    for (int round = 0; round < 5; round++) {
        double t0 = now_ns();
        gm_memory_kind kind = GM_MEMORY_HOST;

        for (int i = 0; i < 2000; i++)
            CHECK(gm_pointer_kind(ctx, ptr, &kind));
        best = min2(best, (now_ns() - t0) / 2000);
    }
    return best;
}

/* gm_pointer_kind among `live` live device arrays (and 10 pinned ones). */
static void pointer_kind_table(gm_context *ctx)
{
    static const int lives[] = {10, 1000, 10000};
    static gm_array *arrays[10000], *pinned[10];
    int64_t n = 256;
    char host[64];

    printf("\ngm_pointer_kind, %s backend (ns per call, best of 5 rounds of 2000)\n",
           gm_backend_name(gm_context_backend(ctx)));
    printf("  %12s %14s %14s %14s\n", "live arrays", "host pointer", "device pointer",
           "pinned pointer");
    for (int i = 0; i < 10; i++)
        CHECK(gm_pinned_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &pinned[i]));
    for (size_t k = 0, made = 0; k < sizeof(lives) / sizeof(lives[0]); k++) {
        for (; made < (size_t)lives[k]; made++)
            CHECK(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &arrays[made]));
        printf("  %12d %14.1f %14.1f %14.1f\n", lives[k], time_pointer_kind(ctx, host),
               time_pointer_kind(ctx, gm_array_view(arrays[0])->data),
               time_pointer_kind(ctx, gm_array_view(pinned[0])->data));
    }
    for (int i = 0; i < 10000; i++)
        gm_array_release(&arrays[i]);
    for (int i = 0; i < 10; i++)
        gm_array_release(&pinned[i]);
}

/* One round: ns per gm_pin / gm_host_scope_end pair of `one` (its scope ended at once). */
static double time_pin(gm_context *ctx, const gm_ndview *one, int loops)
{
    double t0 = now_ns();

    for (int i = 0; i < loops; i++) {
        gm_host_scope *scope = NULL;

        CHECK(gm_pin(ctx, 1, one, &scope));
        CHECK(gm_host_scope_end(&scope));
    }
    return (now_ns() - t0) / loops;
}

/*
 * gm_pin of one 4 KiB buffer with `alive` other ranges registered: one open
 * scope of that many disjoint 64-byte arrays (128 bytes apart, so none merge).
 */
static void bench_pin(void)
{
    static const int64_t alive[] = {100, 1000, 10000};
    int64_t one_bytes = 4096, range_bytes = 64;
    gm_context *ctx = NULL;
    unsigned char *one = malloc((size_t)one_bytes);
    gm_ndview one_view;

    if (one == NULL) {
        fprintf(stderr, "bench_runtime: out of memory\n");
        exit(1);
    }
    setenv("GM_HOST_MLOCK", "0", 0); /* the bookkeeping's cost, not mlock's */
    CHECK(gm_context_create(NULL, &ctx));
    CHECK(gm_ndview_init(one, GM_UINT8, 1, &one_bytes, NULL, GM_ORDER_C, &one_view));
    printf("\npin + scope end of one 4 KiB buffer with N other ranges registered "
           "(GM_HOST_MLOCK=%s;\nns per pair, best of 5 rounds)\n",
           getenv("GM_HOST_MLOCK"));
    printf("  %10s %12s\n", "N", "pin + end");
    for (size_t i = 0; i < sizeof(alive) / sizeof(alive[0]); i++) {
        int64_t n = alive[i];
        unsigned char *buf = malloc((size_t)(n * 2 * range_bytes));
        gm_ndview *views = calloc((size_t)n, sizeof(*views));
        gm_host_scope *held = NULL;
        double t = 1e30;

        if (buf == NULL || views == NULL) {
            fprintf(stderr, "bench_runtime: out of memory\n");
            exit(1);
        }
        for (int64_t k = 0; k < n; k++)
            CHECK(gm_ndview_init(buf + k * 2 * range_bytes, GM_UINT8, 1, &range_bytes, NULL,
                                 GM_ORDER_C, &views[k]));
        CHECK(gm_pin(ctx, (int)n, views, &held));
        for (int round = 0; round < 5; round++)
            t = min2(t, time_pin(ctx, &one_view, 2000));
        printf("  %10lld %12.1f\n", (long long)n, t);
        CHECK(gm_host_scope_end(&held));
        free(views);
        free(buf);
    }
    gm_context_destroy(&ctx);
    free(one);
}

int main(void)
{
    static const size_t sizes[] = {64, 4096, 65536, 1 << 20};
    gm_context *ctx = NULL;
    gm_dealloc_stats stats;

    CHECK(gm_context_create(NULL, &ctx));
    printf("allocate/release pair, %s backend (ns per pair, best of 7 interleaved rounds;\n"
           "malloc/free is the C library's)\n",
           gm_backend_name(gm_context_backend(ctx)));
    printf("  %10s %12s %14s %8s %16s\n", "bytes", "malloc/free", "device array", "ratio",
           "in defer_cleanup");
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        int loops = sizes[i] >= (1 << 20) ? 20000 : 100000;
        int deferred = sizes[i] >= (1 << 20) ? 200 : 2000; /* all pending at once */
        double m = 1e30, g = 1e30, d = 1e30;

        /* interleaved rounds, best of each: the machine's noise hits all three */
        for (int round = 0; round < 7; round++) {
            m = min2(m, time_malloc_free(sizes[i], loops));
            g = min2(g, time_device_array(ctx, sizes[i], loops, 0));
            d = min2(d, time_device_array(ctx, sizes[i], deferred, 1));
        }

        printf("  %10zu %12.1f %14.1f %7.2fx %16.1f\n", sizes[i], m, g, g / m, d);
    }
    CHECK(gm_deallocations_stats(ctx, &stats));
    printf("  queue: %lld flushes, %lld freed, peak %lld bytes pending\n", (long long)stats.flushes,
           (long long)stats.freed_count, (long long)stats.peak_pending_bytes);
    pointer_kind_table(ctx);
    gm_context_destroy(&ctx);
    bench_pin();
    return 0;
}
