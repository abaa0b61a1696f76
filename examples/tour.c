/*
 * A tour of gpumem: descriptors and views (numpy semantics).
 *
 * Build and run on the embedded host backend: ./scripts/run-example.sh
 */
#include <stdio.h>
#include <stdlib.h>

#include <gpumem/gpumem.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        gm_status check_status_ = (call);                                                          \
        if (check_status_ != GM_OK) {                                                              \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,              \
                    gm_status_name(check_status_), gm_last_error_message());                       \
            exit(1);                                                                               \
        }                                                                                          \
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
    CHECK(gm_ndview_reshape(&s, 1, flat, GM_ORDER_C, &r) == GM_ERR_NEEDS_COPY
              ? GM_OK
              : GM_ERR_INTERNAL);
    printf("  a[::-1, 1:5:2].reshape(-1):  %s\n", gm_last_error_message());
    CHECK(gm_ndview_reshape(&t, 1, flat, GM_ORDER_F, &f));
    print_view("a.T.reshape(-1, order='F')", &f);
}

int main(void)
{
    printf("gpumem %s\n", gm_version_string());
    tour_views();
    return 0;
}
