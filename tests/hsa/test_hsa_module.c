/*
 * Code objects and kernel launches on the runtime double, with the axpy test
 * kernel compiled by clang for gfx906 (code objects v4 and v5; fixtures from
 * tests/hsa/kernels/axpy.cl, skipped when the build could not make them).
 * The double runs a host implementation of axpy registered under its name,
 * reading the kernarg segment exactly as the backend wrote it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hsa_codeobj.h"
#include "hsa_internal.h"
#include "hsa_test_util.h"

enum { N = 1000 };

typedef struct fixture {
    void *image;
    size_t bytes;
} fixture;

/* The code object named by env; skips the test when it was not built. */
static fixture load_fixture(const char *env)
{
    fixture f = {NULL, 0};

    f.image = hsa_test_read_fixture(env, &f.bytes);
    if (f.image == NULL)
        skip();
    return f;
}

typedef struct loaded {
    gm_backend_ctx *bctx;
    gm_backend_module *module;
    gm_backend_kernel *kernel;
    fixture f;
    gm_devptr bias;
} loaded;

static loaded open_with(const char *env, const hsa_double_config *cfg)
{
    loaded l;
    size_t bytes = 0;

    memset(&l, 0, sizeof(l));
    l.f = load_fixture(env);
    l.bctx = hsa_test_open(cfg, 0);
    assert_ok(hsa_ops->module_load(l.bctx, GM_IMAGE_AMDGPU, l.f.image, l.f.bytes, &l.module));
    gm_clear_error();
    assert_ok(hsa_ops->module_get_kernel(l.bctx, l.module, "axpy", &l.kernel));
    assert_int_equal(gm_last_error(), GM_OK); /* a v2 name's miss under "axpy.kd" is no error */
    assert_ok(hsa_ops->module_get_global(l.bctx, l.module, "bias", &l.bias, &bytes));
    assert_int_equal(bytes, 16);
    hsa_double_register_kernel("axpy", hsa_test_axpy_host, (void *)(uintptr_t)l.bias);
    return l;
}

static void close_loaded(loaded *l)
{
    assert_ok(hsa_ops->module_unload(l->bctx, l->module));
    hsa_test_close(l->bctx);
    free(l->f.image);
}

/* Run axpy on n elements with the given block and dynamic shared bytes; check y. */
static void run_axpy(loaded *l, gm_backend_stream *s, uint32_t block, size_t dyn)
{
    float x[N], y[N], expect[N];
    int32_t bias[4] = {1, 2, 3, 4};
    gm_devptr dx = 0, dy = 0;
    float a = 2.0f;
    int32_t n = N;
    void *args[4] = {&a, &dx, &dy, &n};
    size_t sizes[4] = {4, 8, 8, 4};
    gm_launch_config cfg = {{(N + block - 1) / block, 1, 1}, {block, 1, 1}, dyn};
    gm_copy_desc d = hsa_test_copy1d(GM_COPY_DEVICE, l->bias, GM_COPY_HOST,
                                     (gm_devptr)(uintptr_t)bias, sizeof(bias));

    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = (float)(3 * i);
        expect[i] = a * x[i] + y[i] + (float)bias[i & 3];
    }
    assert_ok(hsa_ops->copy(l->bctx, &d, NULL)); /* constant memory through the variable */
    dx = hsa_test_to_device(l->bctx, x, sizeof(x));
    dy = hsa_test_to_device(l->bctx, y, sizeof(y));
    assert_ok(hsa_ops->launch(l->bctx, l->kernel, &cfg, args, sizes, 4, s));
    assert_ok(hsa_ops->stream_synchronize(l->bctx, s));
    memset(y, 0, sizeof(y));
    hsa_test_to_host(l->bctx, y, dy, sizeof(y));
    assert_memory_equal(y, expect, sizeof(y));
    assert_ok(hsa_ops->mem_free(l->bctx, dx));
    assert_ok(hsa_ops->mem_free(l->bctx, dy));
}

/* The last dispatch packet the double processed. */
static hsa_double_packet last_dispatch(void)
{
    hsa_double_packet p;

    for (long i = hsa_double_packet_count() - 1; i >= 0; i--) {
        if (hsa_double_get_packet(i, &p) && p.kernel[0] != '\0')
            return p;
    }
    fail_msg("no dispatch recorded");
    return p;
}

static uint64_t kernarg_uint(const hsa_double_packet *p, uint32_t offset, uint32_t size)
{
    uint64_t v = 0;

    memcpy(&v, p->kernarg + offset, size);
    return v;
}

/* Kernel attributes from the symbol and the metadata. */
static void test_kernel_attrs(void **state)
{
    loaded l = open_with("GM_TEST_HSACO_V5", NULL);
    gm_kernel_attrs attrs;
    gm_backend_kernel *again = NULL;

    (void)state;
    assert_ok(hsa_ops->kernel_attrs(l.bctx, l.kernel, &attrs));
    assert_int_equal(attrs.static_shared_bytes, 1024);
    assert_int_equal(attrs.private_bytes, 0);
    assert_int_equal(attrs.kernarg_bytes, 288);
    assert_int_equal(attrs.kernarg_align, 16);
    assert_int_equal(attrs.max_threads_per_block, 256);
    assert_ok(hsa_ops->module_get_kernel(l.bctx, l.module, "axpy", &again));
    assert_ptr_equal(again, l.kernel);
    close_loaded(&l);
}

/* Every field of a v5 dispatch: header, setup, sizes in work-items, segments, kernargs
 * with hidden arguments at the metadata's offsets. */
static void test_dispatch_packet_v5(void **state)
{
    loaded l = open_with("GM_TEST_HSACO_V5", NULL);
    gm__hsa_codeobj_meta meta;
    const gm__hsa_kernel_meta *k = NULL;
    hsa_double_packet p;
    hsa_kernel_dispatch_packet_t d;
    uint16_t header = 0;

    (void)state;
    run_axpy(&l, NULL, 64, 128);
    p = last_dispatch();
    memcpy(&d, p.bytes, sizeof(d));
    header = d.header;
    assert_int_equal(header & 0xff, HSA_PACKET_TYPE_KERNEL_DISPATCH);
    assert_int_equal((header >> HSA_PACKET_HEADER_BARRIER) & 1, 1);
    assert_int_equal((header >> HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) & 3,
                     HSA_FENCE_SCOPE_SYSTEM);
    assert_int_equal((header >> HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE) & 3,
                     HSA_FENCE_SCOPE_SYSTEM);
    assert_int_equal(d.setup, 1u << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS);
    assert_int_equal(d.workgroup_size_x, 64);
    assert_int_equal(d.workgroup_size_y, 1);
    assert_int_equal(d.workgroup_size_z, 1);
    assert_int_equal(d.grid_size_x, 16 * 64); /* work-items, not blocks */
    assert_int_equal(d.grid_size_y, 1);
    assert_int_equal(d.grid_size_z, 1);
    assert_int_equal(d.group_segment_size, 1024 + 128);
    assert_int_equal(d.private_segment_size, 0);
    assert_int_not_equal(d.completion_signal.handle, 0);
    assert_int_equal(p.kernarg_size, 288);
    assert_ok(gm__hsa_codeobj_parse(l.f.image, l.f.bytes, &meta));
    assert_int_equal(meta.abi_version, 5);
    k = gm__hsa_codeobj_find(&meta, "axpy");
    assert_non_null(k);
    for (uint32_t i = 0; i < k->nargs; i++) {
        const gm__hsa_arg *a = &k->args[i];
        uint64_t v = kernarg_uint(&p, a->offset, a->size);

        if (a->kind == GM_HSA_ARG_HIDDEN_BLOCK_COUNT_X)
            assert_int_equal(v, 16);
        else if (a->kind == GM_HSA_ARG_HIDDEN_BLOCK_COUNT_Y ||
                 a->kind == GM_HSA_ARG_HIDDEN_BLOCK_COUNT_Z)
            assert_int_equal(v, 1);
        else if (a->kind == GM_HSA_ARG_HIDDEN_GROUP_SIZE_X)
            assert_int_equal(v, 64);
        else if (a->kind == GM_HSA_ARG_HIDDEN_GROUP_SIZE_Y ||
                 a->kind == GM_HSA_ARG_HIDDEN_GROUP_SIZE_Z)
            assert_int_equal(v, 1);
        else if (a->kind == GM_HSA_ARG_HIDDEN_GRID_DIMS)
            assert_int_equal(v, 1);
        else if (!GM_HSA_ARG_IS_EXPLICIT(a->kind))
            assert_int_equal(v, 0); /* remainders, global offsets */
    }
    assert_int_equal(kernarg_uint(&p, 24, 4), N);
    gm__hsa_codeobj_meta_free(&meta);
    close_loaded(&l);
}

/* v4: only the explicit arguments (this kernel reads its group size from the packet). */
static void test_dispatch_v4_and_2d(void **state)
{
    loaded l = open_with("GM_TEST_HSACO_V4", NULL);
    hsa_double_packet p;
    hsa_kernel_dispatch_packet_t d;
    float x = 1.0f;
    gm_devptr dx = 0;
    int32_t n = 0;
    void *args[4] = {&x, &dx, &dx, &n};
    size_t sizes[4] = {4, 8, 8, 4};
    gm_launch_config cfg = {{3, 2, 1}, {16, 4, 1}, 0};

    (void)state;
    run_axpy(&l, NULL, 256, 0);
    p = last_dispatch();
    assert_int_equal(p.kernarg_size, 28);
    assert_ok(hsa_ops->launch(l.bctx, l.kernel, &cfg, args, sizes, 4, NULL));
    assert_ok(hsa_ops->stream_synchronize(l.bctx, NULL));
    p = last_dispatch();
    memcpy(&d, p.bytes, sizeof(d));
    assert_int_equal(d.setup, 2u << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS);
    assert_int_equal(d.grid_size_x, 48);
    assert_int_equal(d.grid_size_y, 8);
    assert_int_equal(d.workgroup_size_y, 4);
    close_loaded(&l);
}

/* A copy then a kernel on one stream: a barrier-AND packet holds the copy's signal. */
static void test_kernel_waits_for_copy(void **state)
{
    loaded l = open_with("GM_TEST_HSACO_V5", NULL);
    gm_backend_stream *s = NULL;
    float x[N], y[N];
    gm_devptr dx = 0, dy = 0;
    float a = 1.0f;
    int32_t n = N;
    void *args[4] = {&a, &dx, &dy, &n};
    size_t sizes[4] = {4, 8, 8, 4};
    gm_launch_config cfg = {{(N + 127) / 128, 1, 1}, {128, 1, 1}, 0};
    gm_copy_desc d;
    hsa_double_packet p, bar_rec;
    hsa_barrier_and_packet_t bar;
    long first = 0;

    (void)state;
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = 0.0f;
    }
    assert_ok(hsa_ops->stream_create(l.bctx, GM_STREAM_NON_BLOCKING, &s));
    assert_ok(hsa_ops->mem_alloc(l.bctx, sizeof(x), &dx));
    dy = hsa_test_to_device(l.bctx, y, sizeof(y));
    hsa_double_pause(1);
    first = hsa_double_packet_count();
    d = hsa_test_copy1d(GM_COPY_DEVICE, dx, GM_COPY_HOST, (gm_devptr)(uintptr_t)x, sizeof(x));
    assert_ok(hsa_ops->copy(l.bctx, &d, s));
    assert_ok(hsa_ops->launch(l.bctx, l.kernel, &cfg, args, sizes, 4, s));
    d = hsa_test_copy1d(GM_COPY_HOST, (gm_devptr)(uintptr_t)y, GM_COPY_DEVICE, dy, sizeof(y));
    assert_ok(hsa_ops->copy(l.bctx, &d, s));
    hsa_double_pause(0);
    assert_ok(hsa_ops->stream_synchronize(l.bctx, s));
    for (int i = 0; i < N; i++)
        assert_true(y[i] == (float)i);
    assert_int_equal(hsa_double_packet_count() - first, 2);
    assert_true(hsa_double_get_packet(first, &bar_rec));
    assert_true(hsa_double_get_packet(first + 1, &p));
    memcpy(&bar, bar_rec.bytes, sizeof(bar));
    assert_int_equal(bar.header & 0xff, HSA_PACKET_TYPE_BARRIER_AND);
    assert_int_not_equal(bar.dep_signal[0].handle, 0);
    assert_int_equal(bar.completion_signal.handle, 0);
    assert_string_equal(p.kernel, "axpy");
    assert_true(p.packet_id == bar_rec.packet_id + 1);
    assert_ok(hsa_ops->stream_destroy(l.bctx, s));
    assert_ok(hsa_ops->mem_free(l.bctx, dx));
    assert_ok(hsa_ops->mem_free(l.bctx, dy));
    close_loaded(&l);
}

/* Argument and configuration errors are reported before anything is queued. */
static void test_launch_errors(void **state)
{
    loaded l = open_with("GM_TEST_HSACO_V5", NULL);
    float a = 1.0f;
    double wide = 1.0;
    gm_devptr dx = 0;
    int32_t n = 0;
    void *args[4] = {&a, &dx, &dx, &n};
    size_t sizes[4] = {4, 8, 8, 4};
    gm_launch_config cfg = {{1, 1, 1}, {64, 1, 1}, 0};
    long packets = hsa_double_packet_count();

    (void)state;
    assert_status(hsa_ops->launch(l.bctx, l.kernel, &cfg, args, sizes, 3, NULL),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("3 arguments given, the kernel takes 4");
    args[0] = &wide;
    sizes[0] = 8;
    assert_status(hsa_ops->launch(l.bctx, l.kernel, &cfg, args, sizes, 4, NULL),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("argument 0 is 8 bytes");
    args[0] = &a;
    sizes[0] = 4;
    cfg.block[0] = 512; /* over the kernel's max flat work-group size */
    assert_status(hsa_ops->launch(l.bctx, l.kernel, &cfg, args, sizes, 4, NULL),
                  GM_ERR_INVALID_ARG);
    cfg.block[0] = 2048;
    assert_status(hsa_ops->launch(l.bctx, l.kernel, &cfg, args, sizes, 4, NULL),
                  GM_ERR_INVALID_ARG);
    cfg.block[0] = 64;
    cfg.grid[0] = 0;
    assert_status(hsa_ops->launch(l.bctx, l.kernel, &cfg, args, sizes, 4, NULL),
                  GM_ERR_INVALID_ARG);
    cfg.grid[0] = 1u << 30;
    assert_status(hsa_ops->launch(l.bctx, l.kernel, &cfg, args, sizes, 4, NULL),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("32-bit grid");
    cfg.grid[0] = 1;
    cfg.dynamic_shared_bytes = 65536;
    assert_status(hsa_ops->launch(l.bctx, l.kernel, &cfg, args, sizes, 4, NULL), GM_ERR_LAUNCH);
    assert_message_contains("group segment");
    assert_ok(hsa_ops->stream_synchronize(l.bctx, NULL));
    assert_int_equal(hsa_double_packet_count(), packets);
    close_loaded(&l);
}

/* Module errors: missing kernel or variable, wrong image kind, garbage, wrong ISA. */
static void test_module_errors(void **state)
{
    fixture f = load_fixture("GM_TEST_HSACO_V5");
    hsa_double_config cfg;
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    gm_backend_module *m = NULL;
    gm_backend_kernel *k = NULL;
    gm_devptr p = 0;
    size_t bytes = 0;
    static const char junk[] = "definitely not a code object";

    (void)state;
    assert_status(hsa_ops->module_load(bctx, GM_IMAGE_CUDA, f.image, f.bytes, &m),
                  GM_ERR_UNSUPPORTED);
    assert_status(hsa_ops->module_load(bctx, GM_IMAGE_AMDGPU, junk, sizeof(junk), &m),
                  GM_ERR_INVALID_ARG);
    assert_ok(hsa_ops->module_load(bctx, GM_IMAGE_AMDGPU, f.image, f.bytes, &m));
    assert_status(hsa_ops->module_get_kernel(bctx, m, "nope", &k), GM_ERR_NOT_FOUND);
    assert_message_contains("nope.kd");
    assert_status(hsa_ops->module_get_global(bctx, m, "missing", &p, &bytes), GM_ERR_NOT_FOUND);
    assert_status(hsa_ops->module_get_global(bctx, m, "axpy.kd", &p, &bytes), GM_ERR_NOT_FOUND);
    assert_message_contains("not a variable");
    assert_ok(hsa_ops->module_unload(bctx, m));
    assert_ok(hsa_ops->module_unload(bctx, NULL));
    hsa_test_close(bctx);

    hsa_double_config_default(&cfg);
    cfg.isa_mach = 0x30; /* a different GPU */
    bctx = hsa_test_open(&cfg, 0);
    assert_status(hsa_ops->module_load(bctx, GM_IMAGE_AMDGPU, f.image, f.bytes, &m),
                  GM_ERR_INVALID_ARG);
    assert_message_contains("hsa_executable_load_agent_code_object failed: "
                            "HSA_STATUS_ERROR_INVALID_ISA");
    hsa_test_close(bctx);
    free(f.image);
}

/* Append a little-endian uint64. */
static unsigned char *put64(unsigned char *at, uint64_t v)
{
    memcpy(at, &v, 8);
    return at + 8;
}

/* An offload bundle: host entry, a gfx900 entry of junk, then the gfx906 code object. */
static unsigned char *make_bundle(const fixture *f, const char *gfx906_id, size_t *bytes_p)
{
    static const char magic[] = "__CLANG_OFFLOAD_BUNDLE__";
    const char *ids[3] = {"host-x86_64-unknown-linux-gnu", "hipv4-amdgcn-amd-amdhsa--gfx900",
                          gfx906_id};
    size_t header = 24 + 8, at = 0;
    unsigned char *b = NULL, *w = NULL;

    for (int i = 0; i < 3; i++)
        header += 24 + strlen(ids[i]);
    b = calloc(1, header + 64 + f->bytes + 1);
    memcpy(b, magic, 24);
    w = put64(b + 24, 3);
    at = header;
    for (int i = 0; i < 3; i++) {
        size_t size = i == 0 ? 0 : i == 1 ? 64 : f->bytes;

        w = put64(w, at);
        w = put64(w, size);
        w = put64(w, strlen(ids[i]));
        memcpy(w, ids[i], strlen(ids[i]));
        w += strlen(ids[i]);
        at += size;
    }
    memset(b + header, 0x5A, 64);
    memcpy(b + header + 64, f->image, f->bytes);
    *bytes_p = header + 64 + f->bytes;
    return b;
}

static void test_offload_bundle(void **state)
{
    fixture f = load_fixture("GM_TEST_HSACO_V5");
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    gm_backend_module *m = NULL;
    gm_backend_kernel *k = NULL;
    size_t bytes = 0;
    unsigned char *bundle = make_bundle(&f, "hipv4-amdgcn-amd-amdhsa--gfx906:xnack-", &bytes);

    (void)state;
    assert_ok(hsa_ops->module_load(bctx, GM_IMAGE_AMDGPU, bundle, bytes, &m));
    assert_ok(hsa_ops->module_get_kernel(bctx, m, "axpy", &k));
    assert_ok(hsa_ops->module_unload(bctx, m));
    free(bundle);
    bundle = make_bundle(&f, "hipv4-amdgcn-amd-amdhsa--gfx906:xnack+", &bytes);
    assert_status(hsa_ops->module_load(bctx, GM_IMAGE_AMDGPU, bundle, bytes, &m), GM_ERR_NOT_FOUND);
    assert_message_contains("no code object for amdgcn-amd-amdhsa--gfx906");
    free(bundle);
    hsa_test_close(bctx);
    free(f.image);
}

/*
 * Code object v2 (no metadata; the kernel symbol is the bare name "axpy", its
 * descriptor an amd_kernel_code_t): module_get_kernel finds it after "axpy.kd"
 * is missing, and launches lay the arguments out at their natural alignment.
 */
static void test_code_object_v2(void **state)
{
    loaded l = open_with("GM_TEST_HSACO_V2", NULL);
    gm__hsa_codeobj_meta meta;
    gm_kernel_attrs attrs;
    hsa_double_packet p;

    (void)state;
    assert_ok(gm__hsa_codeobj_parse(l.f.image, l.f.bytes, &meta));
    assert_int_equal(meta.nkernels, 0);
    assert_null(l.kernel->meta);
    assert_ok(hsa_ops->kernel_attrs(l.bctx, l.kernel, &attrs));
    assert_int_equal(attrs.static_shared_bytes, 1024);
    assert_true(attrs.kernarg_bytes >= 28);
    run_axpy(&l, NULL, 64, 0);
    p = last_dispatch();
    assert_string_equal(p.kernel, "axpy");
    assert_int_equal(kernarg_uint(&p, 24, 4), N);
    close_loaded(&l);
}

/*
 * Launch axpy on a stream of a context whose double makes it fault as `cfg`
 * says, then record an event: the stream's wait returns GM_ERR_CONTEXT_LOST with a
 * message containing `expect`, and so does the event's; never a hang. The
 * loaded module, stream and event are handed back for more checks.
 */
typedef struct faulted {
    loaded l;
    gm_backend_stream *s;
    gm_backend_event *ev;
} faulted;

static faulted run_faulting(const hsa_double_config *cfg, const char *expect)
{
    static float a = 1.0f;
    static gm_devptr dx = 0;
    static int32_t n = 0;
    void *args[4] = {&a, &dx, &dx, &n};
    size_t sizes[4] = {4, 8, 8, 4};
    gm_launch_config lc = {{1, 1, 1}, {64, 1, 1}, 0};
    faulted f = {open_with("GM_TEST_HSACO_V5", cfg), NULL, NULL};

    assert_ok(hsa_ops->stream_create(f.l.bctx, GM_STREAM_DEFAULT, &f.s));
    assert_ok(hsa_ops->event_create(f.l.bctx, 0, &f.ev));
    assert_ok(hsa_ops->launch(f.l.bctx, f.l.kernel, &lc, args, sizes, 4, f.s));
    assert_ok(hsa_ops->event_record(f.l.bctx, f.ev, f.s));
    assert_status(hsa_ops->stream_synchronize(f.l.bctx, f.s), GM_ERR_CONTEXT_LOST);
    assert_message_contains(expect);
    assert_status(hsa_ops->event_synchronize(f.l.bctx, f.ev), GM_ERR_CONTEXT_LOST);
    return f;
}

static void close_faulted(faulted *f)
{
    assert_ok(hsa_ops->event_destroy(f->l.bctx, f->ev));
    (void)hsa_ops->stream_destroy(f->l.bctx, f->s);
    close_loaded(&f->l);
}

/*
 * An aperture violation in a kernel breaks its queue, which ROCr reports to the
 * queue's error callback: waits return GM_ERR_CONTEXT_LOST, never hang.
 */
static void test_queue_fault(void **state)
{
    hsa_double_config cfg;
    faulted f;

    (void)state;
    hsa_double_config_default(&cfg);
    cfg.fault_kernel = "axpy";
    f = run_faulting(&cfg, "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION");
    /* queries say so too, not GM_ERR_NOT_READY for ever (a polling loop would spin) */
    assert_status(hsa_ops->event_query(f.l.bctx, f.ev), GM_ERR_CONTEXT_LOST);
    assert_message_contains("event_query: the context failed");
    assert_status(hsa_ops->stream_query(f.l.bctx, f.s), GM_ERR_CONTEXT_LOST);
    assert_message_contains("stream_query: the context failed");
    close_faulted(&f);
}

/*
 * An ordinary page fault in a kernel: ROCr calls no queue callback (it drops
 * HSA_STATUS_ERROR_MEMORY_FAULT there) and stops the queue; the fault goes to
 * the system event handler, and with none answering SUCCESS the process
 * aborts (as the double does by default). The backend's handler fails the
 * context: every wait returns GM_ERR_CONTEXT_LOST with the address and reasons.
 */
static void test_kernel_memory_fault(void **state)
{
    hsa_double_config cfg;
    faulted f;
    long handled = 0, unhandled = 0;

    (void)state;
    hsa_double_config_default(&cfg);
    cfg.memory_fault_kernel = "axpy";
    cfg.fault_address = 0x7fffdead0000ull;
    cfg.fault_reason_mask = HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT | HSA_AMD_MEMORY_FAULT_IMPRECISE;
    f = run_faulting(&cfg, "GPU memory fault on device 0 at address 0x7fffdead0000");
    assert_status(hsa_ops->stream_synchronize(f.l.bctx, f.s), GM_ERR_CONTEXT_LOST);
    assert_message_contains("reason mask 0x21 (page not present or supervisor privilege, "
                            "address may not be exact)");
    assert_status(hsa_ops->device_synchronize(f.l.bctx), GM_ERR_CONTEXT_LOST);
    hsa_double_fault_counts(&handled, &unhandled);
    assert_int_equal(handled, 1);
    assert_int_equal(unhandled, 0);
    close_faulted(&f);
}

/* Many launches through a 64-packet queue: kernarg buffers are recycled. Each launch
 * computes y = 0 * y + y + 0, which keeps y. */
static void test_many_launches(void **state)
{
    loaded l = open_with("GM_TEST_HSACO_V5", NULL);
    float y[256];
    gm_devptr dy = 0;
    float a = 0.0f;
    int32_t n = 256;
    void *args[4] = {&a, &dy, &dy, &n};
    size_t sizes[4] = {4, 8, 8, 4};
    gm_launch_config cfg = {{1, 1, 1}, {256, 1, 1}, 0};
    hsa_double_live live;
    long first = hsa_double_packet_count();

    (void)state;
    for (int i = 0; i < 256; i++)
        y[i] = (float)i;
    dy = hsa_test_to_device(l.bctx, y, sizeof(y));
    for (int i = 0; i < 200; i++)
        assert_ok(hsa_ops->launch(l.bctx, l.kernel, &cfg, args, sizes, 4, NULL));
    assert_ok(hsa_ops->stream_synchronize(l.bctx, NULL));
    assert_int_equal(hsa_double_packet_count() - first, 200); /* the barrier bit orders them */
    memset(y, 0, sizeof(y));
    hsa_test_to_host(l.bctx, y, dy, sizeof(y));
    for (int i = 0; i < 256; i++)
        assert_true(y[i] == (float)i);
    hsa_double_get_live(&live);
    assert_true(live.pool_allocations < 80);
    assert_ok(hsa_ops->mem_free(l.bctx, dy));
    close_loaded(&l);
}

/* A launch made on another thread, so that the test can watch it wait. */
typedef struct launcher {
    loaded *l;
    gm_backend_stream *stream;
    void **args;
    size_t *sizes;
    gm_launch_config cfg;
    gm_status status;
    _Atomic int done;
} launcher;

static void *launch_thread(void *arg)
{
    launcher *x = arg;

    x->status = hsa_ops->launch(x->l->bctx, x->l->kernel, &x->cfg, x->args, x->sizes, 4, x->stream);
    atomic_store(&x->done, 1);
    return NULL;
}

/* An asynchronous copy issued from another thread. */
typedef struct copier {
    gm_backend_ctx *bctx;
    gm_backend_stream *stream;
    gm_copy_desc desc;
    gm_status status;
    _Atomic int done;
} copier;

static void *copy_thread(void *arg)
{
    copier *c = arg;

    c->status = hsa_ops->copy(c->bctx, &c->desc, c->stream);
    atomic_store(&c->done, 1);
    return NULL;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/*
 * A full AQL queue (16 packets, the packet processor held): a DMA copy on
 * that stream needs no packet, so it is issued at once (ordered after the
 * launches by its dependencies); the launch that finds no room waits without
 * the context lock, so another thread takes the lock and runs operations
 * meanwhile; once packets are consumed the launch goes on, and every launch
 * ran (y counts them: y += 1 * 1 + 0 each time).
 */
static void test_full_queue_waits_unlocked(void **state)
{
    enum { M = 256, FIT = 15 }; /* 15 launches fit; the 16th needs room for a barrier too */
    hsa_double_config cfg;
    loaded l;
    float ones[M], y[M];
    int32_t zero_bias[4] = {0, 0, 0, 0}, n = M;
    gm_devptr dx = 0, dy = 0, dz = 0;
    float a = 1.0f, z[M];
    void *args[4] = {&a, &dx, &dy, &n};
    size_t sizes[4] = {4, 8, 8, 4};
    gm_launch_config lc = {{1, 1, 1}, {M, 1, 1}, 0};
    gm_copy_desc d;
    gm_backend_stream *s = NULL, *other = NULL;
    gm_backend_event *e = NULL;
    launcher x;
    copier cp;
    pthread_t thread, cthread;
    struct timespec until;
    long first = 0, packets = 0;

    (void)state;
    hsa_double_config_default(&cfg);
    cfg.queue_max_size = 16;
    l = open_with("GM_TEST_HSACO_V4", &cfg);
    for (int i = 0; i < M; i++)
        ones[i] = 1.0f;
    d = hsa_test_copy1d(GM_COPY_DEVICE, l.bias, GM_COPY_HOST, (gm_devptr)(uintptr_t)zero_bias,
                        sizeof(zero_bias));
    assert_ok(hsa_ops->copy(l.bctx, &d, NULL));
    dx = hsa_test_to_device(l.bctx, ones, sizeof(ones));
    memset(y, 0, sizeof(y));
    dy = hsa_test_to_device(l.bctx, y, sizeof(y));
    assert_ok(hsa_ops->stream_create(l.bctx, GM_STREAM_NON_BLOCKING, &s));
    assert_ok(hsa_ops->stream_create(l.bctx, GM_STREAM_NON_BLOCKING, &other));
    first = hsa_double_packet_count();
    hsa_double_pause(1);
    for (int i = 0; i < FIT; i++)
        assert_ok(hsa_ops->launch(l.bctx, l.kernel, &lc, args, sizes, 4, s));
    assert_ok(hsa_ops->mem_alloc(l.bctx, sizeof(z), &dz));
    memset(&cp, 0, sizeof(cp));
    cp.bctx = l.bctx;
    cp.stream = s;
    cp.desc = hsa_test_copy1d(GM_COPY_DEVICE, dz, GM_COPY_DEVICE, dy, sizeof(z));
    assert_int_equal(pthread_create(&cthread, NULL, copy_thread, &cp), 0);
    for (int waited = 0; waited < 2000 && atomic_load(&cp.done) == 0; waited += 10)
        sleep_ms(10);
    assert_int_equal(atomic_load(&cp.done), 1); /* the queue is still full: no wait for room */
    assert_int_equal(pthread_join(cthread, NULL), 0);
    assert_ok(cp.status);
    memset(&x, 0, sizeof(x));
    x.l = &l;
    x.stream = s;
    x.args = args;
    x.sizes = sizes;
    x.cfg = lc;
    assert_int_equal(pthread_create(&thread, NULL, launch_thread, &x), 0);
    sleep_ms(100);
    assert_int_equal(atomic_load(&x.done), 0); /* no room: it waits */
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    assert_int_equal(pthread_mutex_timedlock(&l.bctx->lock, &until), 0); /* not held meanwhile */
    pthread_mutex_unlock(&l.bctx->lock);
    assert_ok(hsa_ops->stream_query(l.bctx, other));
    assert_status(hsa_ops->stream_query(l.bctx, s), GM_ERR_NOT_READY);
    assert_ok(hsa_ops->event_create(l.bctx, 0, &e));
    assert_ok(hsa_ops->event_record(l.bctx, e, other)); /* nothing pending there: at once */
    assert_ok(hsa_ops->event_destroy(l.bctx, e));
    assert_int_equal(atomic_load(&x.done), 0);
    hsa_double_pause(0);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_ok(x.status);
    assert_ok(hsa_ops->stream_synchronize(l.bctx, s));
    /* FIT + 1 dispatches, and a barrier before the last when it found the copy unfinished. */
    packets = hsa_double_packet_count() - first;
    assert_true(packets == FIT + 1 || packets == FIT + 2);
    hsa_test_to_host(l.bctx, y, dy, sizeof(y));
    for (int i = 0; i < M; i++)
        assert_true(y[i] == (float)(FIT + 1));
    hsa_test_to_host(l.bctx, z, dz, sizeof(z));
    for (int i = 0; i < M; i++)
        assert_true(z[i] == (float)FIT); /* after the launches before it, before the last */
    assert_ok(hsa_ops->mem_free(l.bctx, dz));
    assert_ok(hsa_ops->stream_destroy(l.bctx, s));
    assert_ok(hsa_ops->stream_destroy(l.bctx, other));
    assert_ok(hsa_ops->mem_free(l.bctx, dx));
    assert_ok(hsa_ops->mem_free(l.bctx, dy));
    close_loaded(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_attrs),       cmocka_unit_test(test_dispatch_packet_v5),
        cmocka_unit_test(test_dispatch_v4_and_2d), cmocka_unit_test(test_kernel_waits_for_copy),
        cmocka_unit_test(test_launch_errors),      cmocka_unit_test(test_module_errors),
        cmocka_unit_test(test_offload_bundle),     cmocka_unit_test(test_code_object_v2),
        cmocka_unit_test(test_queue_fault),        cmocka_unit_test(test_kernel_memory_fault),
        cmocka_unit_test(test_many_launches),      cmocka_unit_test(test_full_queue_waits_unlocked),
    };

    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
