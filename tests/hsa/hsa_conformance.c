/*
 * HSA backend conformance on a real AMD GPU: every op family once, results
 * checked on the host. Exits 77 (meson's skip) when there is no GPU or no
 * runtime. With --double it runs the same checks against the runtime test
 * double named by GM_HSA_RUNTIME_PATH, registering a host axpy there, so the
 * program itself is known to work on machines without a GPU.
 *
 *   hsa_conformance [--double] [code-object-or-bundle]
 * The kernel image defaults to $GM_TEST_AMDGPU_BUNDLE (tests/hsa/kernels/axpy.cl
 * built for the common GPUs); without one the kernel checks are skipped.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gm_test_file.h"
#include "hsa_api.h"

#define CHECK(expr)                                                           \
    do {                                                                      \
        gm_status check_status_ = (expr);                                     \
        if (check_status_ != GM_OK) {                                         \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #expr, \
                    gm_status_name(check_status_), gm_last_error_message());  \
            exit(1);                                                          \
        }                                                                     \
    } while (0)
#define EXPECT(cond)                                                            \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

enum { N = 4096 };

static const gm_backend_ops *ops = &gm__hsa_backend;

static gm_copy_desc desc1d(gm_copy_side ds, gm_devptr dst, gm_copy_side ss, gm_devptr src,
                           size_t bytes)
{
    gm_copy_desc d;

    memset(&d, 0, sizeof(d));
    d.dst_side = ds;
    d.src_side = ss;
    d.dst = dst;
    d.src = src;
    d.width_bytes = bytes;
    d.height = d.depth = d.dst_height = d.src_height = 1;
    d.dst_pitch = d.src_pitch = bytes;
    return d;
}

static void copy(gm_backend_ctx *b, gm_copy_side ds, const void *dst, gm_copy_side ss,
                 const void *src, size_t bytes, gm_backend_stream *s)
{
    gm_copy_desc d = desc1d(ds, (gm_devptr)(uintptr_t)dst, ss, (gm_devptr)(uintptr_t)src, bytes);

    CHECK(ops->copy(b, &d, s));
}

/* Memory kinds, copies both ways, pitched copy, memset. */
static void check_memory(gm_backend_ctx *b)
{
    static float host[N], back[N];
    void *pinned = NULL;
    gm_devptr d1 = 0, d2 = 0;
    uint16_t pattern = 0xBEEF;

    for (int i = 0; i < N; i++)
        host[i] = (float)i * 0.5f;
    CHECK(ops->mem_alloc(b, sizeof(host), &d1));
    CHECK(ops->mem_alloc(b, sizeof(host), &d2));
    CHECK(ops->host_alloc(b, sizeof(host), GM_HOST_MAPPED, &pinned));
    copy(b, GM_COPY_DEVICE, (void *)(uintptr_t)d1, GM_COPY_HOST, host, sizeof(host), NULL);
    copy(b, GM_COPY_DEVICE, (void *)(uintptr_t)d2, GM_COPY_DEVICE, (void *)(uintptr_t)d1,
         sizeof(host), NULL);
    copy(b, GM_COPY_HOST, pinned, GM_COPY_DEVICE, (void *)(uintptr_t)d2, sizeof(host), NULL);
    EXPECT(memcmp(pinned, host, sizeof(host)) == 0);
    CHECK(ops->host_register(b, back, sizeof(back), 0));
    CHECK(ops->memset(b, d1, &pattern, 2, N * 2, NULL));
    copy(b, GM_COPY_HOST, back, GM_COPY_DEVICE, (void *)(uintptr_t)d1, sizeof(back), NULL);
    EXPECT(((uint16_t *)(void *)back)[77] == 0xBEEF);
    CHECK(ops->host_unregister(b, back));
    CHECK(ops->host_free(b, pinned));
    CHECK(ops->mem_free(b, d1));
    CHECK(ops->mem_free(b, d2));
    printf("memory: ok\n");
}

static void count_callback(gm_status status, void *user)
{
    if (status == GM_OK)
        (*(int *)user)++;
}

/* Stream order across two streams with an event, a callback, timing. */
static void check_streams(gm_backend_ctx *b)
{
    static float host[N], back[N];
    gm_backend_stream *s1 = NULL, *s2 = NULL;
    gm_backend_event *e0 = NULL, *e1 = NULL;
    gm_devptr d = 0;
    int calls = 0;
    float ms = -1.0f;

    for (int i = 0; i < N; i++)
        host[i] = (float)(N - i);
    CHECK(ops->mem_alloc(b, sizeof(host), &d));
    CHECK(ops->stream_create(b, GM_STREAM_NON_BLOCKING, &s1));
    CHECK(ops->stream_create(b, GM_STREAM_NON_BLOCKING, &s2));
    CHECK(ops->event_create(b, 1, &e0));
    CHECK(ops->event_create(b, 1, &e1));
    CHECK(ops->event_record(b, e0, s1));
    copy(b, GM_COPY_DEVICE, (void *)(uintptr_t)d, GM_COPY_HOST, host, sizeof(host), s1);
    CHECK(ops->event_record(b, e1, s1));
    CHECK(ops->stream_wait_event(b, s2, e1));
    copy(b, GM_COPY_HOST, back, GM_COPY_DEVICE, (void *)(uintptr_t)d, sizeof(back), s2);
    CHECK(ops->stream_add_callback(b, s2, count_callback, &calls));
    CHECK(ops->stream_synchronize(b, s2));
    EXPECT(memcmp(host, back, sizeof(host)) == 0);
    EXPECT(calls == 1);
    CHECK(ops->event_elapsed(b, e0, e1, &ms));
    EXPECT(ms >= 0.0f);
    CHECK(ops->event_destroy(b, e0));
    CHECK(ops->event_destroy(b, e1));
    CHECK(ops->stream_destroy(b, s1));
    CHECK(ops->stream_destroy(b, s2));
    CHECK(ops->mem_free(b, d));
    printf("streams and events: ok (copy took %.3f ms)\n", (double)ms);
}

/* Host axpy for the double (offsets 0, 8, 16, 24 as in the code object). */
static void host_axpy(const hsa_kernel_dispatch_packet_t *p, void *user)
{
    const unsigned char *k = p->kernarg_address;
    const int32_t *bias = user;
    float a = 0.0f, *x = NULL, *y = NULL;
    int32_t n = 0;

    memcpy(&a, k, 4);
    memcpy(&x, k + 8, 8);
    memcpy(&y, k + 16, 8);
    memcpy(&n, k + 24, 4);
    for (uint32_t i = 0; i < p->grid_size_x && (int32_t)i < n; i++)
        y[i] = a * x[i] + y[i] + (float)bias[i & 3];
}

/* In --double mode, give the double a host axpy reading `bias` at its device address. */
static void register_double_kernel(gm_devptr bias)
{
    typedef void (*register_fn)(const char *,
                                void (*)(const hsa_kernel_dispatch_packet_t *, void *), void *);
    void *lib = dlopen(getenv(GM_HSA_RUNTIME_PATH_ENV), RTLD_NOW | RTLD_NOLOAD);
    void *sym = lib != NULL ? dlsym(lib, "hsa_double_register_kernel") : NULL;
    register_fn fn = NULL;

    EXPECT(sym != NULL);
    memcpy(&fn, &sym, sizeof(fn));
    fn("axpy", host_axpy, (void *)(uintptr_t)bias);
    dlclose(lib);
}

/* Load the axpy code object, set constant memory, launch, check. */
static void check_kernels(gm_backend_ctx *b, const char *path, int on_double)
{
    size_t bytes = 0, bias_bytes = 0;
    void *image = gm_test_read_file(path, &bytes);
    static float x[N], y[N];
    int32_t bias[4] = {1, -1, 2, -2}, n = N;
    gm_backend_module *m = NULL;
    gm_backend_kernel *k = NULL;
    gm_devptr dbias = 0, dx = 0, dy = 0;
    float a = 3.0f;
    void *args[4] = {&a, &dx, &dy, &n};
    size_t sizes[4] = {4, 8, 8, 4};
    gm_launch_config cfg = {{N / 256, 1, 1}, {256, 1, 1}, 0};

    if (image == NULL) {
        printf("kernels: skipped (no code object; pass one or set GM_TEST_AMDGPU_BUNDLE)\n");
        return;
    }
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = 1.0f;
    }
    CHECK(ops->module_load(b, GM_IMAGE_AMDGPU, image, bytes, &m));
    CHECK(ops->module_get_kernel(b, m, "axpy", &k));
    CHECK(ops->module_get_global(b, m, "bias", &dbias, &bias_bytes));
    EXPECT(bias_bytes == sizeof(bias));
    if (on_double)
        register_double_kernel(dbias);
    copy(b, GM_COPY_DEVICE, (void *)(uintptr_t)dbias, GM_COPY_HOST, bias, sizeof(bias), NULL);
    CHECK(ops->mem_alloc(b, sizeof(x), &dx));
    CHECK(ops->mem_alloc(b, sizeof(y), &dy));
    copy(b, GM_COPY_DEVICE, (void *)(uintptr_t)dx, GM_COPY_HOST, x, sizeof(x), NULL);
    copy(b, GM_COPY_DEVICE, (void *)(uintptr_t)dy, GM_COPY_HOST, y, sizeof(y), NULL);
    CHECK(ops->launch(b, k, &cfg, args, sizes, 4, NULL));
    copy(b, GM_COPY_HOST, y, GM_COPY_DEVICE, (void *)(uintptr_t)dy, sizeof(y), NULL);
    for (int i = 0; i < N; i++)
        EXPECT(y[i] == a * (float)i + 1.0f + (float)bias[i & 3]);
    CHECK(ops->mem_free(b, dx));
    CHECK(ops->mem_free(b, dy));
    CHECK(ops->module_unload(b, m));
    free(image);
    printf("kernels: ok\n");
}

int main(int argc, char **argv)
{
    gm_backend_init_args args = {0, 0};
    gm_backend_ctx *b = NULL;
    gm_device_info info;
    int on_double = argc > 1 && strcmp(argv[1], "--double") == 0;
    const char *image =
        argc > 1 + on_double ? argv[1 + on_double] : getenv("GM_TEST_AMDGPU_BUNDLE");
    gm_status status = GM_OK;

    if (!on_double)
        unsetenv(GM_HSA_RUNTIME_PATH_ENV);
    else if (getenv(GM_HSA_RUNTIME_PATH_ENV) == NULL)
        return 77;
    status = ops->init(&args, &b);
    if (status == GM_ERR_NO_DEVICE || status == GM_ERR_NO_DRIVER) {
        printf("no AMD GPU: %s\n", gm_last_error_message());
        return 77;
    }
    CHECK(status);
    CHECK(ops->device_info(b, &info));
    printf("device: %s, %d CUs, wavefront %d, %lld MiB\n", info.name, info.multiprocessor_count,
           info.warp_size, (long long)(info.total_memory >> 20));
    check_memory(b);
    check_streams(b);
    check_kernels(b, image, on_double);
    ops->fini(b);
    return 0;
}
