/*
 * Runtime benchmark on the current backend (prints figures, never fails):
 *   - an allocate/release pair of a device array through the deallocation
 *     queue, against malloc/free of the same size (target: <= 2x);
 *   - the same through defer_cleanup (nothing freed until the scope ends).
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

/* Best of 5 rounds, ns per malloc/free pair of `bytes`. */
static double time_malloc_free(size_t bytes, int loops)
{
    double best = 1e30;

    for (int round = 0; round < 5; round++) {
        double t0 = now_ns();

        for (int i = 0; i < loops; i++) {
            void *volatile p = malloc(bytes);

            free(p);
        }
        double t = (now_ns() - t0) / loops;
        best = t < best ? t : best;
    }
    return best;
}

/* Best of 5 rounds, ns per gm_device_array / gm_array_release pair of `bytes`. */
static double time_device_array(gm_context *ctx, size_t bytes, int loops, int deferred)
{
    int64_t shape[1] = {(int64_t)bytes};
    double best = 1e30;

    for (int round = 0; round < 5; round++) {
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
        double t = (now_ns() - t0) / loops;
        best = t < best ? t : best;
    }
    return best;
}

int main(void)
{
    static const size_t sizes[] = {64, 4096, 65536, 1 << 20};
    gm_context *ctx = NULL;
    gm_dealloc_stats stats;

    CHECK(gm_context_create(NULL, &ctx));
    printf("allocate/release pair, %s backend (ns per pair, best of 5)\n",
           gm_backend_name(gm_context_backend(ctx)));
    printf("  %10s %12s %14s %8s %16s\n", "bytes", "malloc/free", "device array", "ratio",
           "in defer_cleanup");
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        int loops = sizes[i] >= (1 << 20) ? 2000 : 20000;
        double m = time_malloc_free(sizes[i], loops);
        double g = time_device_array(ctx, sizes[i], loops, 0);
        double d = time_device_array(ctx, sizes[i], loops / 10, 1);

        printf("  %10zu %12.1f %14.1f %7.2fx %16.1f\n", sizes[i], m, g, g / m, d);
    }
    CHECK(gm_deallocations_stats(ctx, &stats));
    printf("  queue: %lld flushes, %lld freed, peak %lld bytes pending\n", (long long)stats.flushes,
           (long long)stats.freed_count, (long long)stats.peak_pending_bytes);
    gm_context_destroy(&ctx);
    return 0;
}
