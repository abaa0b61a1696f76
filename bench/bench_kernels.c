/*
 * Kernel simulator benchmarks: tiled matmul (n = 256, 512, 1024), block
 * reduction (n = 2^24), elementwise add (n = 10^5, 10^7) and the cost of a
 * barrier, each compared in the same run with PoCL running the equivalent
 * OpenCL kernels on the same CPUs (when the build found OpenCL), and the
 * tiled matmul at n = 64 against Numba's CUDA simulator (when Debian's
 * python3-numba is installed). The simulator and PoCL runs alternate and the
 * best time of each is kept, so a busy machine slows both alike. Prints
 * figures and targets; never fails on speed. GM_BENCH_QUICK=1 runs fewer
 * repetitions.
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

/* `rounds` block barriers and nothing else: the cost of a barrier. */
GM_KERNEL(bench_barriers, (int32_t *, out), (int32_t, rounds))
{
    for (int32_t r = 0; r < rounds; r++)
        gm_syncthreads();
    if (gm_thread_idx_x() == 0u)
        out[gm_block_idx_x()] = rounds;
}

/* Neighbours exchange through shared memory between barriers (work no compiler removes). */
GM_KERNEL(bench_exchange, (int32_t *, out), (int32_t, rounds))
{
    GM_SHARED_ARRAY(int32_t, s, 1024);
    uint32_t t = gm_thread_idx_x(), bd = gm_block_dim_x();
    int32_t v = (int32_t)t;

    for (int32_t r = 0; r < rounds; r++) {
        s[t] = v;
        gm_syncthreads();
        v = s[(t + 1u) % bd] + 1;
        gm_syncthreads();
    }
    out[gm_global_id_x()] = v;
}

GM_HOST_TABLE(bench_table, GM_HOST_KERNELS(bench_barriers, bench_exchange), GM_HOST_NO_GLOBALS);
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

static gm_array *device_array(gm_context *ctx, gm_dtype dtype, int64_t n)
{
    gm_array *a = NULL;
    float one = 1.0f;

    if (!check(gm_device_array(ctx, 1, &n, dtype, GM_ORDER_C, &a), "device_array"))
        return NULL;
    if (dtype.code == GM_FLOAT32.code)
        gm_array_fill(a, &one, NULL);
    return a;
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
    /* OpenCL 1.2 has no wavefront barrier: the tree uses work-group barriers to the end. */
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
    "__kernel void bench_exchange(__global int *out, int rounds) {\n"
    "  __local int s[1024];\n"
    "  uint t = get_local_id(0), bd = get_local_size(0);\n"
    "  int v = (int)t;\n"
    "  for (int r = 0; r < rounds; r++) {\n"
    "    s[t] = v; barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    v = s[(t + 1) % bd] + 1; barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  }\n"
    "  out[get_global_id(0)] = v;\n"
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
    if (err != CL_SUCCESS ||
        clBuildProgram(e.prog, 1, &dev, "-cl-std=CL1.2", NULL, NULL) != CL_SUCCESS) {
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

/* A buffer of `bytes`, every float set to 1 when `fill`. */
static cl_mem cl_buffer(cl_env *e, size_t bytes, int fill)
{
    cl_int err = 0;
    cl_mem m = clCreateBuffer(e->ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    float one = 1.0f;

    if (m != NULL && fill)
        clEnqueueFillBuffer(e->q, m, &one, sizeof one, 0, bytes, 0, NULL, NULL);
    clFinish(e->q);
    return m;
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

/* ------------------------------------------------ paired measurements */

#define PAIR_MAX_ARGS    8
#define PAIR_MAX_BUFFERS 4

/* One kernel launch on the simulator and its OpenCL equivalent. */
typedef struct pair {
    gm_kernel *kernel;
    gm_dim3 grid, block;
    int nargs;
    gm_arg args[PAIR_MAX_ARGS];
    gm_array *arrays[PAIR_MAX_BUFFERS];
#if defined(GM_BENCH_OPENCL)
    cl_env *cl;
    cl_kernel ck;
    cl_mem mems[PAIR_MAX_BUFFERS];
    cl_uint dims;
    size_t global[2], local[2];
#endif
} pair;

static int pair_kernel(gm_context *ctx, pair *p, const char *name)
{
    memset(p, 0, sizeof(*p));
    return check(gm_kernel_find(ctx, name, &p->kernel), name);
}

/* Add a simulator array argument (n elements of dtype, floats set to 1). */
static int pair_array(gm_context *ctx, pair *p, gm_dtype dtype, int64_t n)
{
    int i = 0;

    while (p->arrays[i] != NULL)
        i++;
    p->arrays[i] = device_array(ctx, dtype, n);
    p->args[p->nargs++] = gm_arg_array(p->arrays[i]);
    return p->arrays[i] != NULL;
}

#if defined(GM_BENCH_OPENCL)
/* The OpenCL side: kernel, 1-D or 2-D range with the simulator's block as work-group. */
static void pair_cl(pair *p, cl_env *cl, const char *name)
{
    p->cl = cl;
    p->dims = p->grid.y > 1 ? 2 : 1;
    p->global[0] = (size_t)p->grid.x * p->block.x;
    p->global[1] = (size_t)p->grid.y * p->block.y;
    p->local[0] = p->block.x;
    p->local[1] = p->block.y;
    if (cl->ok)
        p->ck = clCreateKernel(cl->prog, name, NULL);
}

/* Set OpenCL argument i to a new buffer of `bytes` (floats set to 1 when fill). */
static void pair_cl_buffer(pair *p, cl_uint i, size_t bytes, int fill)
{
    int b = 0;

    if (p->ck == NULL)
        return;
    while (p->mems[b] != NULL)
        b++;
    p->mems[b] = cl_buffer(p->cl, bytes, fill);
    clSetKernelArg(p->ck, i, sizeof(cl_mem), &p->mems[b]);
}

static void pair_cl_value(pair *p, cl_uint i, size_t size, const void *value)
{
    if (p->ck != NULL)
        clSetKernelArg(p->ck, i, size, value);
}

static double cl_once(pair *p)
{
    double t0 = now_s();

    if (clEnqueueNDRangeKernel(p->cl->q, p->ck, p->dims, NULL, p->global, p->local, 0, NULL,
                               NULL) != CL_SUCCESS)
        return NAN;
    clFinish(p->cl->q);
    return now_s() - t0;
}
#endif

static double sim_once(pair *p)
{
    double t0 = now_s();

    if (gm_launch(p->kernel, p->grid, p->block, 0, NULL, p->nargs, p->args) != GM_OK)
        return NAN;
    return now_s() - t0;
}

/* Alternate `n` runs of each side after a warm-up; the best time of each. */
static void pair_run(pair *p, int n, double *sim_p, double *cl_p)
{
    double sim = 1e30, ocl = 1e30;

    *cl_p = NAN;
    if (isnan(sim_once(p))) {
        check(gm_launch(p->kernel, p->grid, p->block, 0, NULL, p->nargs, p->args), "launch");
        *sim_p = NAN;
        return;
    }
#if defined(GM_BENCH_OPENCL)
    if (p->ck != NULL && isnan(cl_once(p)))
        p->ck = NULL;
#endif
    for (int i = 0; i < n; i++) {
        double t = sim_once(p);

        sim = t < sim ? t : sim;
#if defined(GM_BENCH_OPENCL)
        if (p->ck != NULL) {
            t = cl_once(p);
            ocl = t < ocl ? t : ocl;
        }
#endif
    }
    *sim_p = sim;
    *cl_p = ocl < 1e29 ? ocl : NAN;
}

static void pair_release(pair *p)
{
    for (int i = 0; i < PAIR_MAX_BUFFERS; i++)
        gm_array_release(&p->arrays[i]);
#if defined(GM_BENCH_OPENCL)
    for (int i = 0; i < PAIR_MAX_BUFFERS; i++) {
        if (p->mems[i] != NULL)
            clReleaseMemObject(p->mems[i]);
    }
    if (p->ck != NULL)
        clReleaseKernel(p->ck);
#endif
}

static void ratio_line(const char *what, double ours, double pocl, double target)
{
    char goal[48] = "";

    if (target > 0.0)
        snprintf(goal, sizeof goal, "  (target <= %.1fx: %s)", target,
                 ours / pocl <= target ? "met" : "missed");
    if (isnan(pocl) || pocl <= 0.0)
        printf("  %-30s simulator %9.3f ms   (PoCL not available)\n", what, ours * 1e3);
    else
        printf("  %-30s simulator %9.3f ms   PoCL %9.3f ms   ratio %5.2fx%s\n", what, ours * 1e3,
               pocl * 1e3, ours / pocl, goal);
}

/* ------------------------------------------------------------ benches */

static double bench_matmul_n(gm_context *ctx, cl_env *cl, int32_t n, double target, int runs)
{
    pair p;
    int64_t nn = (int64_t)n * n;
    uint32_t g = (uint32_t)(n + 15) / 16;
    double sim = NAN, ocl = NAN;
    char what[64];

    (void)cl;
    if (!pair_kernel(ctx, &p, "matmul_f32"))
        return NAN;
    p.grid = gm_dim3_make(g, g, 1);
    p.block = gm_dim3_make(16, 16, 1);
    pair_array(ctx, &p, GM_FLOAT32, nn);
    pair_array(ctx, &p, GM_FLOAT32, nn);
    pair_array(ctx, &p, GM_FLOAT32, nn);
    p.args[p.nargs++] = gm_arg_i32(n);
    p.args[p.nargs++] = gm_arg_i32(n);
    p.args[p.nargs++] = gm_arg_i32(n);
#if defined(GM_BENCH_OPENCL)
    pair_cl(&p, cl, "matmul_f32");
    for (cl_uint i = 0; i < 3; i++)
        pair_cl_buffer(&p, i, (size_t)nn * 4, 1);
    for (cl_uint i = 3; i < 6; i++)
        pair_cl_value(&p, i, sizeof n, &n);
#endif
    pair_run(&p, runs, &sim, &ocl);
    snprintf(what, sizeof what, "n = %d (%.2f GFLOP/s)", n, 2.0 * (double)n * nn / sim * 1e-9);
    if (target > 0.0 || n != 64)
        ratio_line(what, sim, ocl, target);
    pair_release(&p);
    return sim;
}

static void bench_reduce(gm_context *ctx, cl_env *cl)
{
    const int64_t n = (int64_t)1 << 24;
    const uint32_t grids[] = {(uint32_t)(n / 256), 1024};

    (void)cl;
    printf("block reduction, n = 2^24 float32, blocks of 256 (grid-stride accumulation):\n");
    for (int i = 0; i < 2; i++) {
        pair p;
        double sim = NAN, ocl = NAN;
        int64_t nl = n; /* an OpenCL long */
        char what[64];

        if (!pair_kernel(ctx, &p, "reduce_sum_f32"))
            return;
        p.grid = gm_dim3_make(grids[i], 1, 1);
        p.block = gm_dim3_make(256, 1, 1);
        pair_array(ctx, &p, GM_FLOAT32, n);
        pair_array(ctx, &p, GM_FLOAT32, grids[i]);
        p.args[p.nargs++] = gm_arg_i64(n);
#if defined(GM_BENCH_OPENCL)
        pair_cl(&p, cl, "reduce_sum_f32");
        pair_cl_buffer(&p, 0, (size_t)n * 4, 1);
        pair_cl_buffer(&p, 1, (size_t)grids[i] * 4, 0);
        pair_cl_value(&p, 2, sizeof nl, &nl);
#else
        (void)nl;
#endif
        pair_run(&p, reps(i == 0 ? 5 : 10), &sim, &ocl);
        snprintf(what, sizeof what, "%u blocks (%.2f GB/s)", grids[i], (double)n * 4 / sim * 1e-9);
        ratio_line(what, sim, ocl, i == 0 ? 5.0 : 0.0);
        pair_release(&p);
    }
}

static void bench_add(gm_context *ctx, cl_env *cl)
{
    const int64_t sizes[] = {100000, 10000000};

    (void)cl;
    printf("elementwise add (barrier-free, float32, blocks of 256):\n");
    for (int i = 0; i < 2; i++) {
        pair p;
        int64_t n = sizes[i];
        int64_t nl = n; /* an OpenCL long */
        double sim = NAN, ocl = NAN;
        char what[64];

        if (!pair_kernel(ctx, &p, "add_f32"))
            return;
        p.grid = gm_dim3_make((uint32_t)((n + 255) / 256), 1, 1);
        p.block = gm_dim3_make(256, 1, 1);
        for (int a = 0; a < 3; a++)
            pair_array(ctx, &p, GM_FLOAT32, n);
        p.args[p.nargs++] = gm_arg_i64(n);
#if defined(GM_BENCH_OPENCL)
        pair_cl(&p, cl, "add_f32");
        for (cl_uint a = 0; a < 3; a++)
            pair_cl_buffer(&p, a, (size_t)n * 4, 1);
        pair_cl_value(&p, 3, sizeof nl, &nl);
#else
        (void)nl;
#endif
        pair_run(&p, reps(i == 0 ? 200 : 20), &sim, &ocl);
        snprintf(what, sizeof what, "n = %lld (%.1f GB/s)", (long long)n,
                 (double)n * 12 / sim * 1e-9);
        ratio_line(what, sim, ocl, 1.2);
        pair_release(&p);
    }
}

static void bench_barrier(gm_context *ctx, cl_env *cl, unsigned workers)
{
    const uint32_t blocks = 64, block = 256;
    const int32_t rounds = 200;
    double threads = (double)blocks * block * rounds, sim = NAN, ocl = NAN;
    pair p;

    (void)cl;
    printf("barriers (%u blocks of %u threads, %d rounds):\n", blocks, block, rounds);
    if (!pair_kernel(ctx, &p, "bench_barriers"))
        return;
    p.grid = gm_dim3_make(blocks, 1, 1);
    p.block = gm_dim3_make(block, 1, 1);
    pair_array(ctx, &p, GM_INT32, blocks);
    p.args[p.nargs++] = gm_arg_i32(rounds);
    pair_run(&p, reps(10), &sim, &ocl);
    printf("  one barrier: %.2f ns per thread (wall, %u workers; %.2f ns of a worker's time)"
           "   (target <= 15 ns: %s)\n",
           sim / threads * 1e9, workers, sim / threads * 1e9 * workers,
           sim / threads * 1e9 <= 15.0 ? "met" : "missed");
    pair_release(&p);
    if (!pair_kernel(ctx, &p, "bench_exchange"))
        return;
    p.grid = gm_dim3_make(blocks, 1, 1);
    p.block = gm_dim3_make(block, 1, 1);
    pair_array(ctx, &p, GM_INT32, (int64_t)blocks * block);
    p.args[p.nargs++] = gm_arg_i32(rounds);
#if defined(GM_BENCH_OPENCL)
    pair_cl(&p, cl, "bench_exchange");
    pair_cl_buffer(&p, 0, (size_t)blocks * block * 4, 0);
    pair_cl_value(&p, 1, sizeof rounds, &rounds);
#endif
    pair_run(&p, reps(10), &sim, &ocl);
    ratio_line("shared exchange, 2 barriers/round", sim, ocl, 0.0);
    pair_release(&p);
}

/* The seed's fast_matmul at n = 64 under Numba's CUDA simulator (Debian's python3-numba). */
static const char numba_script[] =
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

static void bench_numba(gm_context *ctx, cl_env *cl)
{
    FILE *p = NULL;
    double numba = 0.0, ours = 0.0;

    printf("tiled matmul n = 64 against Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1):\n");
    if (system("/usr/bin/python3 -c 'import numba' >/dev/null 2>&1") != 0) {
        printf("  python3-numba is not installed; skipped\n");
        return;
    }
    p = popen(numba_script, "r");
    if (p == NULL || fscanf(p, "%lf", &numba) != 1) {
        printf("  running Numba failed; skipped\n");
        if (p != NULL)
            pclose(p);
        return;
    }
    pclose(p);
    ours = bench_matmul_n(ctx, cl, 64, 0.0, reps(20));
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
    const int32_t sizes[] = {256, 512, 1024};

    gm_context_options_default(&o);
    o.backend = GM_BACKEND_HOST;
    if (!check(gm_context_create(&o, &ctx), "gm_context_create") ||
        !check(gm_register_image_set(&bench_set), "register"))
        return 0;
    gm_context_device_info(ctx, &info);
    printf("gpumem kernel simulator on %s (%d CPUs); PoCL: %s\n", info.name,
           (int)info.multiprocessor_count, cl.ok ? cl.device : "not available");
    printf("tiled matmul (16x16 shared tiles, float32):\n");
    for (int i = 0; i < 3; i++)
        bench_matmul_n(ctx, &cl, sizes[i], sizes[i] == 512 ? 3.0 : 0.0,
                       reps(sizes[i] >= 1024 ? 3 : 7));
    bench_reduce(ctx, &cl);
    bench_add(ctx, &cl);
    bench_barrier(ctx, &cl, (unsigned)info.multiprocessor_count);
    bench_numba(ctx, &cl);
    gm_context_destroy(&ctx);
    cl_close(&cl);
    return 0;
}
