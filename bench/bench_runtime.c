/*
 * Runtime benchmark on the current backend (prints figures, never fails):
 *   - an allocate/release pair of a device array through the deallocation
 *     queue, against malloc/free of the same size (target: <= 2x);
 *   - the same through defer_cleanup (nothing freed until the scope ends);
 *   - gm_pointer_kind (Numba's is_cuda_array) of a host and a device pointer
 *     among many live device arrays.
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
    return 0;
}
