/*
 * The GTC 2017 Numba tutorial's memory-management experiment, in C.
 *
 * Adds two float32 vectors of n = 100000 three ways and prints the time per
 * call of each, like the notebook's %timeit lines:
 *   (a) host arrays in and out: every call copies x and y to the device,
 *       allocates the output, launches, and copies the result back;
 *   (b) device arrays in: x and y already on the device; every call
 *       allocates a device output and launches;
 *   (c) device arrays in and a preallocated device `out`: launch only.
 * The notebook measured 1.25 ms -> 429 us -> 235 us on its GPU.
 *
 * Runs on whichever backend the context gets (GM_BACKEND=host|cuda|hsa).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <gpumem/gpumem.h>

#define N     100000
#define BLOCK 256u

#define CHECK(call)                                                                   \
    do {                                                                              \
        gm_status check_status_ = (call);                                             \
        if (check_status_ != GM_OK) {                                                 \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call, \
                    gm_status_name(check_status_), gm_last_error_message());          \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

typedef struct experiment {
    gm_context *ctx;
    gm_kernel *add;
    gm_ndview x, y, result; /* host descriptors */
    gm_array *x_device, *y_device, *out_device;
} experiment;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* out = x + y on the device, synchronously. */
static void launch_add(experiment *e, gm_array *x, gm_array *y, gm_array *out)
{
    gm_arg args[4] = {gm_arg_array(x), gm_arg_array(y), gm_arg_array(out), gm_arg_i64(N)};

    CHECK(gm_launch(e->add, gm_dim3_make((N + BLOCK - 1) / BLOCK, 1, 1), gm_dim3_make(BLOCK, 1, 1),
                    0, NULL, 4, args));
}

/* (a) add_ufunc(x, y) with host arrays. */
static void step_host_arrays(experiment *e)
{
    gm_array *x = NULL, *y = NULL, *out = NULL;

    CHECK(gm_to_device(e->ctx, &e->x, NULL, &x));
    CHECK(gm_to_device(e->ctx, &e->y, NULL, &y));
    CHECK(gm_device_array_like(e->ctx, &e->x, &out));
    launch_add(e, x, y, out);
    CHECK(gm_array_copy_to_host(out, &e->result, NULL));
    gm_array_release(&x);
    gm_array_release(&y);
    gm_array_release(&out);
}

/* (b) add_ufunc(x_device, y_device): a new device output each call. */
static void step_device_inputs(experiment *e)
{
    gm_array *out = NULL;

    CHECK(gm_device_array_like(e->ctx, &e->x, &out));
    launch_add(e, e->x_device, e->y_device, out);
    gm_array_release(&out);
}

/* (c) add_ufunc(x_device, y_device, out=out_device). */
static void step_preallocated(experiment *e)
{
    launch_add(e, e->x_device, e->y_device, e->out_device);
}

/* Best of 5 rounds of the mean time per call, in microseconds (%timeit's "best of"). */
static double time_us(experiment *e, void (*step)(experiment *), int loops)
{
    double best = 1e30;

    step(e); /* warm up */
    for (int round = 0; round < 5; round++) {
        double t0 = now_s();

        for (int i = 0; i < loops; i++)
            step(e);
        double per_call = (now_s() - t0) / loops * 1e6;
        best = per_call < best ? per_call : best;
    }
    return best;
}

int main(void)
{
    static float x[N], y[N], result[N];
    int64_t shape[1] = {N};
    gm_device_info info;
    experiment e = {0};

    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = 2.0f * (float)i;
    }
    CHECK(gm_context_create(NULL, &e.ctx));
    CHECK(gm_context_device_info(e.ctx, &info));
    CHECK(gm_kernel_find(e.ctx, "add_f32", &e.add));
    CHECK(gm_ndview_init(x, GM_FLOAT32, 1, shape, NULL, GM_ORDER_C, &e.x));
    CHECK(gm_ndview_init(y, GM_FLOAT32, 1, shape, NULL, GM_ORDER_C, &e.y));
    CHECK(gm_ndview_init(result, GM_FLOAT32, 1, shape, NULL, GM_ORDER_C, &e.result));
    CHECK(gm_to_device(e.ctx, &e.x, NULL, &e.x_device));
    CHECK(gm_to_device(e.ctx, &e.y, NULL, &e.y_device));
    CHECK(gm_device_array_like(e.ctx, &e.x, &e.out_device));

    printf("add two float32 vectors of n = %d on %s (%s backend)\n", N, info.name,
           gm_backend_name(gm_context_backend(e.ctx)));
    printf("  (a) host arrays in and out:          %8.1f us per call\n",
           time_us(&e, step_host_arrays, 200));
    printf("  (b) device arrays in:                %8.1f us per call\n",
           time_us(&e, step_device_inputs, 200));
    printf("  (c) device arrays in, preallocated:  %8.1f us per call\n",
           time_us(&e, step_preallocated, 200));
    printf("  notebook (its GPU): 1250 us -> 429 us -> 235 us\n");

    step_host_arrays(&e);
    for (int i = 0; i < N; i++) {
        if (result[i] != 3.0f * (float)i) {
            fprintf(stderr, "wrong sum at %d: %g\n", i, (double)result[i]);
            return 1;
        }
    }
    printf("  result checked: out[i] == 3 * i for every i\n");
    gm_array_release(&e.x_device);
    gm_array_release(&e.y_device);
    gm_array_release(&e.out_device);
    gm_context_destroy(&e.ctx);
    return 0;
}
