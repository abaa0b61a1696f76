/*
 * Kernel simulator benchmarks: tiled matmul (n = 256, 512, 1024), block
 * reduction (n = 2^24), elementwise add (n = 10^5, 10^7) and the cost of a
 * barrier, each compared in the same run with PoCL running the equivalent
 * OpenCL kernels on the same CPUs (when the build found OpenCL), and the
 * tiled matmul at n = 64 against Numba's CUDA simulator (when Debian's
 * python3-numba is installed). Prints figures and targets; never fails on
 * speed. GM_BENCH_QUICK=1 runs fewer repetitions.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gpumem/gpumem.h>
#include <gpumem/kernel.h>

#if defined(GM_BENCH_OPENCL)
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#endif

/* ------------------------------------------------------------ kernels */

/* `rounds` block barriers and nothing else. */
GM_KERNEL(bench_barriers, (int32_t *, out), (int32_t, rounds))
{
    for (int32_t r = 0; r < rounds; r++)
        gm_syncthreads();
    if (gm_thread_idx_x() == 0u)
        out[gm_block_idx_x()] = rounds;
}

GM_HOST_TABLE(bench_table, GM_HOST_KERNELS(bench_barriers), GM_HOST_NO_GLOBALS);
static const gm_image_set bench_set = {"bench", &bench_table, NULL, 0, NULL, 0};

/* --------------------------------------------------------- utilities */

static int reps(int n)
{
    const char *q = getenv("GM_BENCH_QUICK");

    return q != NULL && q[0] == '1' ? (n + 2) / 3 : n;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int check(gm_status s, const char *what)
{
    if (s != GM_OK) {
        printf("  %s failed: %s (%s)\n", what, gm_status_name(s), gm_last_error_message());
        return 0;
    }
    return 1;
}

static gm_dim3 d3(uint32_t x, uint32_t y)
{
    return gm_dim3_make(x, y, 1);
}

/* Best time in seconds over `n` synchronous launches (after one warm-up). */
static double time_launch(gm_kernel *k, gm_dim3 grid, gm_dim3 block, size_t dyn, int nargs,
                          const gm_arg *args, int n)
{
    double best = 1e30;

    if (!check(gm_launch(k, grid, block, dyn, NULL, nargs, args), "launch"))
        return NAN;
    for (int i = 0; i < n; i++) {
        double t0 = now_s();

        gm_launch(k, grid, block, dyn, NULL, nargs, args);
        t0 = now_s() - t0;
        best = t0 < best ? t0 : best;
    }
    return best;
}

static gm_array *device_f32(gm_context *ctx, int64_t n, float value)
{
    gm_array *a = NULL;

    if (!check(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &a), "device_array"))
        return NULL;
    gm_array_fill(a, &value, NULL);
    return a;
}

static void ratio_line(const char *what, double ours, double pocl, double target)
{
    if (isnan(pocl) || pocl <= 0.0) {
        printf("  %-34s simulator %9.3f ms   (PoCL not available)\n", what, ours * 1e3);
        return;
    }
    printf("  %-34s simulator %9.3f ms   PoCL %9.3f ms   ratio %5.2fx  (target <= %.1fx: %s)\n",
           what, ours * 1e3, pocl * 1e3, ours / pocl, target,
           ours / pocl <= target ? "met" : "missed");
}

/* ------------------------------------------------------------- OpenCL */

#if defined(GM_BENCH_OPENCL)
static const char *cl_source =
    "__kernel void add_f32(__global const float *a, __global const float *b,\n"
    "                      __global float *out, long n) {\n"
    "  long i = get_global_id(0); if (i < n) out[i] = a[i] + b[i];\n"
    "}\n"
    "#define T 16\n"
    "__kernel void matmul_f32(__global const float *a, __global const float *b,\n"
    "                         __global float *c, int m, int n, int k) {\n"
    "  __local float sa[T][T], sb[T][T];\n"
    "  int tx = get_local_id(0), ty = get_local_id(1);\n"
    "  int row = get_group_id(1) * T + ty, col = get_group_id(0) * T + tx;\n"
    "  float acc = 0.0f;\n"
    "  for (int t0 = 0; t0 < k; t0 += T) {\n"
    "    int ac = t0 + tx, br = t0 + ty;\n"
    "    sa[ty][tx] = row < m && ac < k ? a[(long)row * k + ac] : 0.0f;\n"
    "    sb[ty][tx] = br < k && col < n ? b[(long)br * n + col] : 0.0f;\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    for (int j = 0; j < T; j++) acc += sa[ty][j] * sb[j][tx];\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  }\n"
    "  if (row < m && col < n) c[(long)row * n + col] = acc;\n"
    "}\n"
    "__kernel void reduce_sum_f32(__global const float *in, __global float *partial, long n) {\n"
    "  __local float sh[1024];\n"
    "  uint t = get_local_id(0), bd = get_local_size(0);\n"
    "  long stride = get_global_size(0);\n"
    "  float acc = 0.0f;\n"
    "  for (long i = get_global_id(0); i < n; i += stride) acc += in[i];\n"
    "  sh[t] = acc;\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  for (uint s = bd / 2; s > 0; s >>= 1) {\n"
    "    if (t < s) sh[t] += sh[t + s];\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  }\n"
    "  if (t == 0) partial[get_group_id(0)] = sh[0];\n"
    "}\n"
    "__kernel void bench_barriers(__global int *out, int rounds) {\n"
    "  for (int r = 0; r < rounds; r++) barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  if (get_local_id(0) == 0) out[get_group_id(0)] = rounds;\n"
    "}\n";

typedef struct cl_env {
    cl_context ctx;
    cl_command_queue q;
    cl_program prog;
    char device[256];
    int ok;
} cl_env;

static cl_env cl_open(void)
{
    cl_env e;
    cl_platform_id platform;
    cl_device_id dev;
    cl_uint n = 0;
    cl_int err = 0;

    memset(&e, 0, sizeof e);
    if (clGetPlatformIDs(1, &platform, &n) != CL_SUCCESS || n == 0)
        return e;
    if (clGetDeviceIDs(platform, CL_DEVICE_TYPE_CPU, 1, &dev, &n) != CL_SUCCESS || n == 0)
        return e;
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof e.device, e.device, NULL);
    e.ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    if (err != CL_SUCCESS)
        return e;
    e.q = clCreateCommandQueue(e.ctx, dev, 0, &err);
    e.prog = clCreateProgramWithSource(e.ctx, 1, &cl_source, NULL, &err);
    if (err != CL_SUCCESS || clBuildProgram(e.prog, 1, &dev, "-cl-std=CL1.2", NULL, NULL) !=
                                 CL_SUCCESS) {
        printf("  PoCL: building the OpenCL kernels failed\n");
        return e;
    }
    e.ok = 1;
    return e;
}

static void cl_close(cl_env *e)
{
    if (e->prog != NULL)
        clReleaseProgram(e->prog);
    if (e->q != NULL)
        clReleaseCommandQueue(e->q);
    if (e->ctx != NULL)
        clReleaseContext(e->ctx);
}

static cl_mem cl_buffer(cl_env *e, size_t bytes, float value)
{
    cl_int err = 0;
    cl_mem m = clCreateBuffer(e->ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);

    if (m != NULL && value == value)
        clEnqueueFillBuffer(e->q, m, &value, sizeof value, 0, bytes, 0, NULL, NULL);
    clFinish(e->q);
    return m;
}

/* Best time over `n` runs of a kernel whose arguments are already set (one warm-up). */
static double cl_time(cl_env *e, cl_kernel k, cl_uint dims, const size_t *global,
                      const size_t *local, int n)
{
    double best = 1e30;

    if (clEnqueueNDRangeKernel(e->q, k, dims, NULL, global, local, 0, NULL, NULL) != CL_SUCCESS)
        return NAN;
    clFinish(e->q);
    for (int i = 0; i < n; i++) {
        double t0 = now_s();

        clEnqueueNDRangeKernel(e->q, k, dims, NULL, global, local, 0, NULL, NULL);
        clFinish(e->q);
        t0 = now_s() - t0;
        best = t0 < best ? t0 : best;
    }
    return best;
}

static double cl_add(cl_env *e, int64_t n, int r)
{
    cl_kernel k = clCreateKernel(e->prog, "add_f32", NULL);
    cl_mem a = cl_buffer(e, (size_t)n * 4, 1.0f), b = cl_buffer(e, (size_t)n * 4, 2.0f);
    cl_mem o = cl_buffer(e, (size_t)n * 4, 0.0f);
    cl_long nn = n;
    size_t local = 256, global = (size_t)((n + 255) / 256 * 256);
    double t = 0.0;

    clSetKernelArg(k, 0, sizeof a, &a);
    clSetKernelArg(k, 1, sizeof b, &b);
    clSetKernelArg(k, 2, sizeof o, &o);
    clSetKernelArg(k, 3, sizeof nn, &nn);
    t = cl_time(e, k, 1, &global, &local, r);
    clReleaseMemObject(a);
    clReleaseMemObject(b);
    clReleaseMemObject(o);
    clReleaseKernel(k);
    return t;
}

static double cl_matmul(cl_env *e, int n, int r)
{
    cl_kernel k = clCreateKernel(e->prog, "matmul_f32", NULL);
    size_t bytes = (size_t)n * n * 4;
    cl_mem a = cl_buffer(e, bytes, 0.5f), b = cl_buffer(e, bytes, 0.25f);
    cl_mem c = cl_buffer(e, bytes, 0.0f);
    size_t local[2] = {16, 16}, global[2] = {(size_t)(n + 15) / 16 * 16, (size_t)(n + 15) / 16 * 16};
    double t = 0.0;

    clSetKernelArg(k, 0, sizeof a, &a);
    clSetKernelArg(k, 1, sizeof b, &b);
    clSetKernelArg(k, 2, sizeof c, &c);
    clSetKernelArg(k, 3, sizeof n, &n);
    clSetKernelArg(k, 4, sizeof n, &n);
    clSetKernelArg(k, 5, sizeof n, &n);
    t = cl_time(e, k, 2, global, local, r);
    clReleaseMemObject(a);
    clReleaseMemObject(b);
    clReleaseMemObject(c);
    clReleaseKernel(k);
    return t;
}

static double cl_reduce(cl_env *e, int64_t n, size_t blocks, int r)
{
    cl_kernel k = clCreateKernel(e->prog, "reduce_sum_f32", NULL);
    cl_mem in = cl_buffer(e, (size_t)n * 4, 1.0f), part = cl_buffer(e, blocks * 4, 0.0f);
    cl_long nn = n;
    size_t local = 256, global = blocks * 256;
    double t = 0.0;

    clSetKernelArg(k, 0, sizeof in, &in);
    clSetKernelArg(k, 1, sizeof part, &part);
    clSetKernelArg(k, 2, sizeof nn, &nn);
    t = cl_time(e, k, 1, &global, &local, r);
    clReleaseMemObject(in);
    clReleaseMemObject(part);
    clReleaseKernel(k);
    return t;
}

static double cl_barriers(cl_env *e, size_t blocks, size_t block, int rounds, int r)
{
    cl_kernel k = clCreateKernel(e->prog, "bench_barriers", NULL);
    cl_mem out = cl_buffer(e, blocks * 4, NAN);
    size_t global = blocks * block;
    double t = 0.0;

    clSetKernelArg(k, 0, sizeof out, &out);
    clSetKernelArg(k, 1, sizeof rounds, &rounds);
    t = cl_time(e, k, 1, &global, &block, r);
    clReleaseMemObject(out);
    clReleaseKernel(k);
    return t;
}
#else
typedef struct cl_env {
    int ok;
    char device[8];
} cl_env;
static cl_env cl_open(void)
{
    cl_env e = {0, ""};
    return e;
}
static void cl_close(cl_env *e)
{
    (void)e;
}
#endif

/* ------------------------------------------------------------ benches */

static double sim_add(gm_context *ctx, int64_t n, int r)
{
    gm_array *a = device_f32(ctx, n, 1.0f), *b = device_f32(ctx, n, 2.0f);
    gm_array *o = device_f32(ctx, n, 0.0f);
    gm_kernel *k = NULL;
    double t = NAN;

    if (a != NULL && b != NULL && o != NULL && check(gm_kernel_find(ctx, "add_f32", &k), "find")) {
        gm_arg args[] = {gm_arg_array(a), gm_arg_array(b), gm_arg_array(o), gm_arg_i64(n)};

        t = time_launch(k, d3((uint32_t)((n + 255) / 256), 1), d3(256, 1), 0, 4, args, r);
    }
    gm_array_release(&a);
    gm_array_release(&b);
    gm_array_release(&o);
    return t;
}

static double sim_matmul(gm_context *ctx, int32_t n, int r)
{
    int64_t nn = (int64_t)n * n;
    gm_array *a = device_f32(ctx, nn, 0.5f), *b = device_f32(ctx, nn, 0.25f);
    gm_array *c = device_f32(ctx, nn, 0.0f);
    gm_kernel *k = NULL;
    double t = NAN;
    uint32_t g = (uint32_t)(n + 15) / 16;

    if (a != NULL && b != NULL && c != NULL &&
        check(gm_kernel_find(ctx, "matmul_f32", &k), "find")) {
        gm_arg args[] = {gm_arg_array(a), gm_arg_array(b), gm_arg_array(c),
                         gm_arg_i32(n),    gm_arg_i32(n),    gm_arg_i32(n)};

        t = time_launch(k, d3(g, g), d3(16, 16), 0, 6, args, r);
    }
    gm_array_release(&a);
    gm_array_release(&b);
    gm_array_release(&c);
    return t;
}

static double sim_reduce(gm_context *ctx, int64_t n, uint32_t blocks, int r)
{
    gm_array *in = device_f32(ctx, n, 1.0f), *part = device_f32(ctx, blocks, 0.0f);
    gm_kernel *k = NULL;
    double t = NAN;

    if (in != NULL && part != NULL && check(gm_kernel_find(ctx, "reduce_sum_f32", &k), "find")) {
        gm_arg args[] = {gm_arg_array(in), gm_arg_array(part), gm_arg_i64(n)};

        t = time_launch(k, d3(blocks, 1), d3(256, 1), 0, 3, args, r);
    }
    gm_array_release(&in);
    gm_array_release(&part);
    return t;
}

static double sim_barriers(gm_context *ctx, uint32_t blocks, uint32_t block, int32_t rounds,
                           int r)
{
    int64_t nb = blocks;
    gm_array *out = NULL;
    gm_kernel *k = NULL;
    double t = NAN;

    if (check(gm_device_array(ctx, 1, &nb, GM_INT32, GM_ORDER_C, &out), "device_array") &&
        check(gm_kernel_find(ctx, "bench_barriers", &k), "find")) {
        gm_arg args[] = {gm_arg_array(out), gm_arg_i32(rounds)};

        t = time_launch(k, d3(blocks, 1), d3(block, 1), 0, 2, args, r);
    }
    gm_array_release(&out);
    return t;
}

#if defined(GM_BENCH_OPENCL)
#define CL_OR_NAN(expr) (cl->ok ? (expr) : NAN)
#else
#define CL_OR_NAN(expr) NAN
#endif

static void bench_matmul(gm_context *ctx, cl_env *cl)
{
    const int32_t sizes[] = {256, 512, 1024};

    (void)cl;
    printf("tiled matmul (16x16 shared tiles, float32):\n");
    for (int i = 0; i < 3; i++) {
        int32_t n = sizes[i];
        double t = sim_matmul(ctx, n, reps(n >= 1024 ? 2 : 5));
        double p = CL_OR_NAN(cl_matmul(cl, n, reps(n >= 1024 ? 2 : 5)));
        char what[64];

        snprintf(what, sizeof what, "n = %d (%.2f GFLOP/s)", n, 2.0 * n * n * (double)n / t * 1e-9);
        ratio_line(what, t, p, n == 512 ? 3.0 : 1e9);
    }
}

static void bench_reduce(gm_context *ctx, cl_env *cl)
{
    const int64_t n = (int64_t)1 << 24;
    const uint32_t grids[] = {(uint32_t)(n / 256), 1024};

    (void)cl;
    printf("block reduction, n = 2^24 float32 (256 threads per block):\n");
    for (int i = 0; i < 2; i++) {
        double t = sim_reduce(ctx, n, grids[i], reps(5));
        double p = CL_OR_NAN(cl_reduce(cl, n, grids[i], reps(5)));
        char what[64];

        snprintf(what, sizeof what, "%u blocks (%.2f GB/s)", grids[i], (double)n * 4 / t * 1e-9);
        ratio_line(what, t, p, i == 0 ? 5.0 : 1e9);
    }
}

static void bench_add(gm_context *ctx, cl_env *cl)
{
    const int64_t sizes[] = {100000, 10000000};

    (void)cl;
    printf("elementwise add (barrier-free, float32):\n");
    for (int i = 0; i < 2; i++) {
        double t = sim_add(ctx, sizes[i], reps(i == 0 ? 50 : 10));
        double p = CL_OR_NAN(cl_add(cl, sizes[i], reps(i == 0 ? 50 : 10)));
        char what[64];

        snprintf(what, sizeof what, "n = %lld (%.2f GB/s)", (long long)sizes[i],
                 (double)sizes[i] * 12 / t * 1e-9);
        ratio_line(what, t, p, 1.2);
    }
}

static void bench_barrier(gm_context *ctx, cl_env *cl, unsigned workers)
{
    const uint32_t blocks = 64, block = 256;
    const int32_t rounds = 200;
    double threads = (double)blocks * block * rounds;
    double t = sim_barriers(ctx, blocks, block, rounds, reps(5));
    double p = CL_OR_NAN(cl_barriers(cl, blocks, block, rounds, reps(5)));

    (void)cl;
    printf("barrier cost (%u blocks of %u threads, %d barriers each):\n", blocks, block, rounds);
    printf("  simulator: %.2f ns per thread and barrier (wall, %u workers; %.2f ns of one "
           "worker's time)   (target <= 15 ns: %s)\n",
           t / threads * 1e9, workers, t / threads * 1e9 * workers,
           t / threads * 1e9 <= 15.0 ? "met" : "missed");
    if (!isnan(p))
        printf("  PoCL:      %.2f ns per thread and barrier (wall)   ratio %.2fx\n",
               p / threads * 1e9, t / p);
}

/* The seed's fast_matmul at n = 64 under Numba's CUDA simulator (Debian's python3-numba). */
static void bench_numba(gm_context *ctx)
{
    static const char script[] =
        "/usr/bin/python3 - <<'EOF' 2>/dev/null\n"
        "import os, time\n"
        "os.environ['NUMBA_ENABLE_CUDASIM'] = '1'\n"
        "import numpy as np\n"
        "from numba import cuda, float32\n"
        "TPB = 16\n"
        "@cuda.jit\n"
        "def fast_matmul(A, B, C):\n"
        "    sA = cuda.shared.array(shape=(TPB, TPB), dtype=float32)\n"
        "    sB = cuda.shared.array(shape=(TPB, TPB), dtype=float32)\n"
        "    x, y = cuda.grid(2)\n"
        "    tx = cuda.threadIdx.x\n"
        "    ty = cuda.threadIdx.y\n"
        "    bpg = cuda.gridDim.x\n"
        "    tmp = 0.\n"
        "    for i in range(bpg):\n"
        "        sA[tx, ty] = A[x, ty + i * TPB]\n"
        "        sB[tx, ty] = B[tx + i * TPB, y]\n"
        "        cuda.syncthreads()\n"
        "        for j in range(TPB):\n"
        "            tmp += sA[tx, j] * sB[j, ty]\n"
        "        cuda.syncthreads()\n"
        "    C[x, y] = tmp\n"
        "n = 64\n"
        "A = np.full((n, n), 0.5, np.float32); B = np.full((n, n), 0.25, np.float32)\n"
        "C = np.zeros((n, n), np.float32)\n"
        "t = time.perf_counter()\n"
        "fast_matmul[(n // TPB, n // TPB), (TPB, TPB)](A, B, C)\n"
        "print('%.6f' % (time.perf_counter() - t))\n"
        "EOF\n";
    FILE *p = NULL;
    double numba = 0.0, ours = 0.0;

    printf("tiled matmul n = 64 against Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1):\n");
    if (system("/usr/bin/python3 -c 'import numba' >/dev/null 2>&1") != 0) {
        printf("  python3-numba is not installed; skipped\n");
        return;
    }
    p = popen(script, "r");
    if (p == NULL || fscanf(p, "%lf", &numba) != 1) {
        printf("  running Numba failed; skipped\n");
        if (p != NULL)
            pclose(p);
        return;
    }
    pclose(p);
    ours = sim_matmul(ctx, 64, reps(20));
    printf("  Numba simulator %.3f s   gpumem simulator %.3f ms   %.0fx faster  (target >= "
           "1000x: %s)\n",
           numba, ours * 1e3, numba / ours, numba / ours >= 1000.0 ? "met" : "missed");
}

int main(void)
{
    gm_context_options o;
    gm_context *ctx = NULL;
    gm_device_info info;
    cl_env cl = cl_open();
    unsigned workers = 0;

    gm_context_options_default(&o);
    o.backend = GM_BACKEND_HOST;
    if (!check(gm_context_create(&o, &ctx), "gm_context_create") ||
        !check(gm_register_image_set(&bench_set), "register"))
        return 0;
    gm_context_device_info(ctx, &info);
    workers = (unsigned)info.multiprocessor_count;
    printf("gpumem kernel simulator on %s (%u CPUs); PoCL: %s\n", info.name, workers,
           cl.ok ? cl.device : "not available");
    bench_matmul(ctx, &cl);
    bench_reduce(ctx, &cl);
    bench_add(ctx, &cl);
    bench_barrier(ctx, &cl, workers);
    bench_numba(ctx);
    gm_context_destroy(&ctx);
    cl_close(&cl);
    return 0;
}
