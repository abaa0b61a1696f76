/*
 * A tour of gpumem, mirroring the Numba memory-management pages in C:
 * descriptors and views, to_device -> kernel -> copy_to_host, streams and
 * events, pinned and mapped memory, register/deregister, defer_cleanup and
 * the deallocation queue's statistics.
 *
 * Build and run on the embedded host backend: ./scripts/run-example.sh
 * (GM_BACKEND=cuda or hsa runs it on a GPU build.)
 */
#include <stdio.h>
#include <stdlib.h>

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

static void print_view(const char *label, const gm_ndview *v)
{
    char shape[128], strides[128];

    gm_format_shape(v->ndim, v->shape, shape, sizeof(shape));
    gm_format_shape(v->ndim, v->strides, strides, sizeof(strides));
    printf("  %-28s shape %-12s strides %-14s offset %3lld  C:%d F:%d\n", label, shape, strides,
           (long long)v->offset, gm_ndview_is_c_contiguous(v), gm_ndview_is_f_contiguous(v));
}

/* Descriptors describe memory anywhere; every view op is numpy's. */
static void tour_views(void)
{
    float data[24];
    int64_t shape[2] = {4, 6};
    int64_t flat[1] = {-1};
    int64_t lo = 0, hi = 0;
    gm_ndview a, t, s, r, f;
    gm_dtype dtype;

    printf("descriptors and views\n");
    CHECK(gm_dtype_from_name("f4", &dtype));
    CHECK(gm_ndview_init(data, dtype, 2, shape, NULL, GM_ORDER_C, &a));
    print_view("a = empty((4, 6), 'f4')", &a);
    CHECK(gm_ndview_transpose(&a, &t));
    print_view("a.T", &t);
    gm_index_item items[2] = {GM_IDX_SLICE(GM_NONE, GM_NONE, -1), GM_IDX_SLICE(1, 5, 2)};
    CHECK(gm_ndview_getitem(&a, 2, items, &s));
    print_view("a[::-1, 1:5:2]", &s);
    CHECK(gm_ndview_extent(&s, &lo, &hi));
    printf("  its byte extent: [%lld, %lld)\n", (long long)lo, (long long)hi);
    printf("  a[::-1, 1:5:2].reshape(-1):  %s\n",
           gm_status_name(gm_ndview_reshape(&s, 1, flat, GM_ORDER_C, &r)));
    printf("    (%s)\n", gm_last_error_message());
    CHECK(gm_ndview_reshape(&t, 1, flat, GM_ORDER_F, &f));
    print_view("a.T.reshape(-1, order='F')", &f);
}

#define N 4096

/* to_device -> kernel -> copy_to_host, on a stream, timed with events. */
static void tour_device_arrays(gm_context *ctx)
{
    static float x[N], y[N], out[N];
    int64_t shape[1] = {N};
    gm_ndview hx, hy, hout;
    gm_array *dx = NULL, *dy = NULL, *dout = NULL;
    gm_stream *stream = NULL;
    gm_event *start = NULL, *stop = NULL;
    gm_kernel *add = NULL;
    float ms = 0.0f;

    printf("\ndevice arrays, a kernel, a stream and events\n");
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = 0.5f * (float)i;
    }
    CHECK(gm_ndview_init(x, GM_FLOAT32, 1, shape, NULL, GM_ORDER_C, &hx));
    CHECK(gm_ndview_init(y, GM_FLOAT32, 1, shape, NULL, GM_ORDER_C, &hy));
    CHECK(gm_ndview_init(out, GM_FLOAT32, 1, shape, NULL, GM_ORDER_C, &hout));
    CHECK(gm_stream_create(ctx, GM_STREAM_DEFAULT, &stream));
    CHECK(gm_event_create(ctx, true, &start));
    CHECK(gm_event_create(ctx, true, &stop));
    CHECK(gm_kernel_find(ctx, "add_f32", &add));

    CHECK(gm_event_record(start, stream));
    CHECK(gm_to_device(ctx, &hx, stream, &dx)); /* x_device = cuda.to_device(x, stream) */
    CHECK(gm_to_device(ctx, &hy, stream, &dy));
    CHECK(gm_device_array_like(ctx, &hx, &dout)); /* cuda.device_array_like(x) */
    gm_arg args[4] = {gm_arg_array(dx), gm_arg_array(dy), gm_arg_array(dout), gm_arg_i64(N)};
    CHECK(gm_launch(add, gm_dim3_make(N / 256, 1, 1), gm_dim3_make(256, 1, 1), 0, stream, 4, args));
    CHECK(gm_array_copy_to_host(dout, &hout, stream)); /* out_device.copy_to_host(out, stream) */
    CHECK(gm_event_record(stop, stream));
    CHECK(gm_stream_synchronize(stream));
    CHECK(gm_event_elapsed_ms(start, stop, &ms));
    printf("  out[%d] = %g (expected %g); transfers + kernel took %.3f ms\n", N - 1,
           (double)out[N - 1], 1.5 * (N - 1), (double)ms);
    for (int i = 0; i < N; i++) {
        if (out[i] != x[i] + y[i]) {
            fprintf(stderr, "tour: out[%d] = %g, expected %g\n", i, (double)out[i],
                    (double)(x[i] + y[i]));
            exit(1);
        }
    }

    gm_array_release(&dx);
    gm_array_release(&dy);
    gm_array_release(&dout);
    gm_event_destroy(&start);
    gm_event_destroy(&stop);
    gm_stream_destroy(&stream);
}

/* pinned_array, mapped_array with its device view, and ROC's register/deregister. */
static void tour_host_memory(gm_context *ctx)
{
    static double user_a[1024], user_b[1024];
    int64_t shape[2] = {32, 32};
    gm_array *pinned = NULL, *mapped = NULL;
    gm_ndview device_side, arrays[2];
    gm_host_scope *scope = NULL;

    printf("\npinned, mapped and registered host memory\n");
    CHECK(gm_pinned_array(ctx, 2, shape, GM_FLOAT64, GM_ORDER_C, &pinned));
    CHECK(gm_mapped_array(ctx, 2, shape, GM_FLOAT64, GM_ORDER_F, GM_HOST_PORTABLE, &mapped));
    CHECK(gm_array_device_view(mapped, &device_side));
    print_view("pinned_array((32, 32))", gm_array_view(pinned));
    print_view("mapped_array(order='F')", gm_array_view(mapped));
    printf("  the device sees the mapped array at %p\n", device_side.data);

    CHECK(gm_ndview_init(user_a, GM_FLOAT64, 2, shape, NULL, GM_ORDER_C, &arrays[0]));
    CHECK(gm_ndview_init(user_b, GM_FLOAT64, 2, shape, NULL, GM_ORDER_C, &arrays[1]));
    CHECK(gm_register(ctx, 2, arrays, &scope)); /* with roc.register(a, b): */
    printf("  registered two user arrays\n");
    CHECK(gm_deregister(&scope));
    CHECK(gm_pin(ctx, 2, arrays, &scope)); /* with cuda.pinned(a, b): again at once */
    CHECK(gm_host_scope_end(&scope));
    printf("  deregistered, pinned again and unpinned\n");
    gm_array_release(&pinned);
    gm_array_release(&mapped);
}

/* Releases are deferred; defer_cleanup holds them; the statistics show it. */
static void tour_deallocation_queue(gm_context *ctx)
{
    int64_t shape[1] = {1 << 16};
    gm_dealloc_stats st;

    printf("\nthe deallocation queue\n");
    CHECK(gm_deallocations_flush(ctx)); /* start empty: free what the tour released so far */
    CHECK(gm_defer_cleanup_begin(ctx)); /* with cuda.defer_cleanup(): */
    for (int i = 0; i < 25; i++) {
        gm_array *a = NULL;

        CHECK(gm_device_array(ctx, 1, shape, GM_FLOAT32, GM_ORDER_C, &a));
        gm_array_release(&a);
    }
    CHECK(gm_deallocations_stats(ctx, &st));
    printf("  25 arrays released inside defer_cleanup: %lld pending (%lld bytes), %lld flushes\n",
           (long long)st.pending_count, (long long)st.pending_device_bytes, (long long)st.flushes);
    CHECK(gm_defer_cleanup_end(ctx));
    CHECK(gm_deallocations_flush(ctx));
    CHECK(gm_deallocations_stats(ctx, &st));
    printf("  after the scope and a flush: %lld pending, %lld freed, peak %lld bytes\n",
           (long long)st.pending_count, (long long)st.freed_count,
           (long long)st.peak_pending_bytes);
}

int main(void)
{
    gm_context *ctx = NULL;
    gm_device_info info;

    printf("gpumem %s\n", gm_version_string());
    tour_views();
    gm_set_log_hook(gm_log_stderr, NULL); /* the library itself never prints */
    CHECK(gm_context_create(NULL, &ctx));
    CHECK(gm_context_device_info(ctx, &info));
    printf("\ncontext on %s (%s backend), %lld MiB, warp %d\n", info.name,
           gm_backend_name(gm_context_backend(ctx)), (long long)(info.total_memory >> 20),
           info.warp_size);
    tour_device_arrays(ctx);
    tour_host_memory(ctx);
    tour_deallocation_queue(ctx);
    gm_context_destroy(&ctx);
    return 0;
}
