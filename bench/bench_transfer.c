/*
 * Transfer and allocation benchmark on whichever backend the context gets
 * (GM_BACKEND=host|cuda|hsa; prints figures, never fails on speed):
 *   - host<->device bandwidth from pageable, pinned and mapped host memory,
 *     4 KiB to 1 GiB (sizes above a quarter of device memory are skipped),
 *     through the public API (gm_copy), through the backend's copy op alone
 *     (no core), and on CUDA through the driver's cuMemcpyHtoD / DtoH alone
 *     (no synchronization after them), so the cost of each layer shows;
 *   - a strided host side (every other float32, pageable and pinned) copied
 *     directly by gm_copy, against packing it on the host first (Numba's way);
 *   - allocation latency: a device array through the queue and the context's
 *     memory manager, against the backend's raw allocate/free pair
 *     (cuMemAlloc/cuMemFree on CUDA, the pool on HSA, the simulator's heap).
 * Links the static library to reach the backend's raw ops for the comparison.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime_internal.h"

#define CHECK(call)                                                                   \
    do {                                                                              \
        gm_status check_status_ = (call);                                             \
        if (check_status_ != GM_OK) {                                                 \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call, \
                    gm_status_name(check_status_), gm_last_error_message());          \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One synchronous copy of `bytes` bytes dst <- src, by one of the layers below. */
typedef struct copy_case {
    gm_context *ctx;
    const gm_ndview *dst, *src;
    int layer; /* 0 gm_copy, 1 the backend's copy op, 2 the CUDA driver's cuMemcpy */
    int to_device;
} copy_case;

typedef int (*cu_memcpy_htod_fn)(unsigned long long dst, const void *src, size_t bytes);
typedef int (*cu_memcpy_dtoh_fn)(void *dst, unsigned long long src, size_t bytes);
static cu_memcpy_htod_fn cu_htod;
static cu_memcpy_dtoh_fn cu_dtoh;

/* The CUDA driver the library loaded, if it is the system's libcuda.so.1. */
static int find_cuda_driver(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);

    if (lib == NULL)
        return 0;
    cu_htod = (cu_memcpy_htod_fn)(uintptr_t)dlsym(lib, "cuMemcpyHtoD_v2");
    cu_dtoh = (cu_memcpy_dtoh_fn)(uintptr_t)dlsym(lib, "cuMemcpyDtoH_v2");
    return cu_htod != NULL && cu_dtoh != NULL;
}

static void copy_once(const copy_case *c)
{
    int64_t bytes = gm_ndview_nbytes(c->src);
    gm_devptr dst = (gm_devptr)(uintptr_t)c->dst->data;
    gm_devptr src = (gm_devptr)(uintptr_t)c->src->data;

    if (c->layer == 0) {
        CHECK(gm_copy(c->ctx, c->dst, c->src, NULL));
    } else if (c->layer == 1) {
        gm_copy_desc d = {c->to_device ? GM_COPY_DEVICE : GM_COPY_HOST,
                          c->to_device ? GM_COPY_HOST : GM_COPY_DEVICE,
                          dst,
                          src,
                          (size_t)bytes,
                          1,
                          1,
                          (size_t)bytes,
                          1,
                          (size_t)bytes,
                          1};

        CHECK(c->ctx->ops->copy(c->ctx->bctx, &d, NULL));
    } else {
        int r = c->to_device ? cu_htod(dst, c->src->data, (size_t)bytes)
                             : cu_dtoh(c->dst->data, src, (size_t)bytes);

        if (r != 0) {
            fprintf(stderr, "cuMemcpy failed: CUresult %d\n", r);
            exit(1);
        }
    }
}

/*
 * Best GB/s of `reps` timings of synchronous copies. Small copies are timed
 * in batches of at least 16 MiB moved, so that the clock's own cost and
 * resolution do not show in the figure.
 */
static double copy_gbs(const copy_case *c, int reps)
{
    int64_t bytes = gm_ndview_nbytes(c->src);
    int64_t batch = bytes >= (16 << 20) ? 1 : (16 << 20) / bytes;
    double best = 0.0;

    copy_once(c);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();

        for (int64_t b = 0; b < batch; b++)
            copy_once(c);
        double gbs = (double)bytes * (double)batch / (now_s() - t0) / 1e9;

        best = gbs > best ? gbs : best;
    }
    return best;
}

/* A host array of `bytes` of the given kind: 0 pageable (malloc'd), 1 pinned, 2 mapped. */
static gm_status host_array(gm_context *ctx, int kind, int64_t bytes, void **pageable_p,
                            gm_array **array_p, gm_ndview *view_p)
{
    int64_t shape[1] = {bytes};

    if (kind == 0) {
        *pageable_p = malloc((size_t)bytes);
        if (*pageable_p == NULL)
            return GM_ERR_NO_MEMORY;
        memset(*pageable_p, 1, (size_t)bytes);
        return gm_ndview_init(*pageable_p, GM_UINT8, 1, shape, NULL, GM_ORDER_C, view_p);
    }
    gm_status status = kind == 1 ? gm_pinned_array(ctx, 1, shape, GM_UINT8, GM_ORDER_C, array_p)
                                 : gm_mapped_array(ctx, 1, shape, GM_UINT8, GM_ORDER_C, 0, array_p);
    if (status == GM_OK)
        *view_p = *gm_array_view(*array_p);
    return status;
}

static void bench_bandwidth(gm_context *ctx, int64_t total)
{
    static const char *const kinds[] = {"pageable", "pinned", "mapped"};

    int layers = gm_context_backend(ctx) == GM_BACKEND_CUDA && find_cuda_driver() ? 3 : 2;

    printf("host<->device bandwidth, GB/s (best of the repetitions): gm_copy, the backend's\n"
           "copy op alone%s\n",
           layers == 3 ? ", the driver's cuMemcpyHtoD / DtoH alone" : "");
    printf("  %10s %-9s %8s %8s %8s %8s", "bytes", "host", "H2D", "D2H", "op H2D", "op D2H");
    printf(layers == 3 ? " %8s %8s\n" : "\n", "cu H2D", "cu D2H");
    static const int64_t sizes[] = {4096, 65536, 1 << 20, 16 << 20, 256 << 20, INT64_C(1) << 30};

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        int64_t bytes = sizes[i];
        int64_t shape[1] = {bytes};
        int reps = bytes >= (1 << 26) ? 3 : 20;
        gm_array *dev = NULL;

        if (bytes > total / 4)
            break;
        if (gm_device_array(ctx, 1, shape, GM_UINT8, GM_ORDER_C, &dev) != GM_OK)
            break;
        for (int k = 0; k < 3; k++) {
            void *pageable = NULL;
            gm_array *host = NULL;
            gm_ndview hv;

            if (host_array(ctx, k, bytes, &pageable, &host, &hv) != GM_OK) {
                printf("  %10lld %-9s (allocation failed: %s)\n", (long long)bytes, kinds[k],
                       gm_last_error_message());
                continue;
            }
            printf("  %10lld %-9s", (long long)bytes, kinds[k]);
            for (int layer = 0; layer < layers; layer++) {
                copy_case h2d = {ctx, gm_array_view(dev), &hv, layer, 1};
                copy_case d2h = {ctx, &hv, gm_array_view(dev), layer, 0};

                printf(" %8.2f", copy_gbs(&h2d, reps));
                printf(" %8.2f", copy_gbs(&d2h, reps));
            }
            printf("\n");
            gm_array_release(&host);
            free(pageable);
        }
        gm_array_release(&dev);
        CHECK(gm_deallocations_flush(ctx));
    }
}

/* Seconds per call of `fn`, best of `reps` batches of `batch` calls. */
static double best_time(void (*fn)(void *), void *arg, int reps, int batch)
{
    double best = 1e30;

    fn(arg);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();

        for (int b = 0; b < batch; b++)
            fn(arg);
        double t = (now_s() - t0) / batch;

        best = t < best ? t : best;
    }
    return best;
}

/* One strided transfer: a float32 device array and every other element of a host buffer. */
typedef struct strided_case {
    gm_context *ctx;
    gm_array *dev;
    gm_ndview host;   /* a[::2] of the host buffer */
    float *staging;   /* packed host copy, for the pack-then-copy way */
    gm_ndview packed; /* the staging buffer as a contiguous array */
    int to_device;
} strided_case;

/* gm_copy between the device array and a[::2] directly (the library picks the way). */
static void strided_direct(void *arg)
{
    strided_case *c = arg;

    if (c->to_device)
        CHECK(gm_copy(c->ctx, gm_array_view(c->dev), &c->host, NULL));
    else
        CHECK(gm_copy(c->ctx, &c->host, gm_array_view(c->dev), NULL));
}

/* What Numba's to_device / copy_to_host do with a non-contiguous host array: pack on the
 * host (a C loop), then one contiguous copy (or the reverse). */
static void strided_packed(void *arg)
{
    strided_case *c = arg;
    const float *wide = (const float *)c->host.data;
    int64_t n = c->host.shape[0];

    if (c->to_device) {
        for (int64_t i = 0; i < n; i++)
            c->staging[i] = wide[2 * i];
        CHECK(gm_copy(c->ctx, gm_array_view(c->dev), &c->packed, NULL));
    } else {
        CHECK(gm_copy(c->ctx, &c->packed, gm_array_view(c->dev), NULL));
        for (int64_t i = 0; i < n; i++)
            ((float *)c->host.data)[2 * i] = c->staging[i];
    }
}

/*
 * A host side of every other float32 (a[::2]), pinned (so the direct way may
 * use the copy engine's 2-D copies) and pageable: gm_copy straight between
 * the strided host view and the device array, against packing on the host
 * first and copying contiguously, as Numba does. GB/s of elements moved.
 */
static void bench_strided(gm_context *ctx, int64_t total)
{
    static const int64_t sizes[] = {65536, 1 << 20, 16 << 20};

    printf("strided host side (float32 a[::2]), GB/s of elements moved: gm_copy directly,\n"
           "and packing on the host with a C loop around a contiguous gm_copy (Numba's way)\n");
    printf("  %10s %-9s %8s %8s %8s %8s\n", "bytes", "host", "H2D", "D2H", "pack H2D", "pack D2H");
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        int64_t bytes = sizes[i], n = bytes / 4, step = 8;
        int reps = 5, batch = bytes >= (1 << 20) ? 4 : 64;
        gm_array *dev = NULL;

        if (bytes * 3 > total / 4)
            break;
        if (gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &dev) != GM_OK)
            break;
        for (int k = 0; k < 2; k++) {
            gm_array *wide = NULL, *stage = NULL;
            void *wide_pageable = NULL, *stage_pageable = NULL;
            gm_ndview wv, sv;
            strided_case c = {ctx, dev, {0}, NULL, {0}, 1};
            double t[4];

            if (host_array(ctx, k, 2 * bytes, &wide_pageable, &wide, &wv) != GM_OK ||
                host_array(ctx, k, bytes, &stage_pageable, &stage, &sv) != GM_OK) {
                printf("  %10lld %-9s (allocation failed: %s)\n", (long long)bytes,
                       k == 0 ? "pageable" : "pinned", gm_last_error_message());
            } else {
                CHECK(gm_ndview_init(wv.data, GM_FLOAT32, 1, &n, &step, GM_ORDER_C, &c.host));
                CHECK(gm_ndview_init(sv.data, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &c.packed));
                c.staging = sv.data;
                for (int w = 0; w < 4; w++) {
                    c.to_device = w % 2 == 0;
                    t[w] = best_time(w < 2 ? strided_direct : strided_packed, &c, reps, batch);
                }
                printf("  %10lld %-9s %8.2f %8.2f %8.2f %8.2f\n", (long long)bytes,
                       k == 0 ? "pageable" : "pinned", (double)bytes / t[0] / 1e9,
                       (double)bytes / t[1] / 1e9, (double)bytes / t[2] / 1e9,
                       (double)bytes / t[3] / 1e9);
            }
            gm_array_release(&wide);
            gm_array_release(&stage);
            free(wide_pageable);
            free(stage_pageable);
        }
        gm_array_release(&dev);
        CHECK(gm_deallocations_flush(ctx));
    }
}

/* ns per pair: gm_device_array + release (queue, manager) vs the backend's raw ops. */
static void bench_allocation(gm_context *ctx)
{
    static const size_t sizes[] = {4096, 1 << 20, 16 << 20};

    printf("allocation latency, ns per allocate/free pair\n");
    printf("  %10s %14s %14s\n", "bytes", "through queue", "raw backend");
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        int64_t shape[1] = {(int64_t)sizes[i]};
        int loops = 2000;
        double t0 = now_s();

        for (int l = 0; l < loops; l++) {
            gm_array *a = NULL;

            CHECK(gm_device_array(ctx, 1, shape, GM_UINT8, GM_ORDER_C, &a));
            gm_array_release(&a);
        }
        CHECK(gm_deallocations_flush(ctx));
        double queued = (now_s() - t0) / loops * 1e9;
        t0 = now_s();
        for (int l = 0; l < loops; l++) {
            gm_devptr p = 0;

            CHECK(ctx->ops->mem_alloc(ctx->bctx, sizes[i], &p));
            CHECK(ctx->ops->mem_free(ctx->bctx, p));
        }
        double raw = (now_s() - t0) / loops * 1e9;
        printf("  %10zu %14.0f %14.0f\n", sizes[i], queued, raw);
    }
}

int main(void)
{
    gm_context *ctx = NULL;
    gm_device_info info;

    CHECK(gm_context_create(NULL, &ctx));
    CHECK(gm_context_device_info(ctx, &info));
    printf("%s (%s backend)\n", info.name, gm_backend_name(gm_context_backend(ctx)));
    bench_bandwidth(ctx, info.total_memory);
    bench_strided(ctx, info.total_memory);
    bench_allocation(ctx);
    gm_context_destroy(&ctx);
    return 0;
}
