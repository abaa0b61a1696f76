/*
 * The kernels the CUDA tests launch, as PTX text: JIT-compiled by a real
 * driver (PTX ISA 7.0, sm_52 and newer, so any driver since CUDA 11.0 runs
 * them) and interpreted by name by the driver test double. Generated from
 *
 *     __constant__ float gm_test_coeffs[4];
 *     extern "C" __global__ void gm_test_fill_u32(unsigned *out, unsigned value,
 *                                                 unsigned long long n)
 *     {   i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = value; }
 *     extern "C" __global__ void gm_test_scale_f32(float *data, unsigned long long n)
 *     {   extern __shared__ float scratch[];            // blockDim.x floats
 *         scratch[threadIdx.x] = i < n ? data[i] : 0; __syncthreads();
 *         if (i < n) data[i] = scratch[threadIdx.x] * gm_test_coeffs[0] + gm_test_coeffs[1]; }
 *
 * with `nvcc -ptx -arch=compute_75`, the .version / .target lines lowered
 * to 7.0 / sm_52 and checked with ptxas for sm_75 and sm_90.
 */
#ifndef GM_TEST_CUDA_KERNELS_H
#define GM_TEST_CUDA_KERNELS_H

static const char gm_test_kernels_ptx[] =
    ".version 7.0\n"
    ".target sm_52\n"
    ".address_size 64\n"
    "\n"
    "    // .globl    gm_test_fill_u32\n"
    ".const .align 4 .b8 gm_test_coeffs[16];\n"
    ".extern .shared .align 16 .b8 scratch[];\n"
    "\n"
    ".visible .entry gm_test_fill_u32(\n"
    "    .param .u64 gm_test_fill_u32_param_0,\n"
    "    .param .u32 gm_test_fill_u32_param_1,\n"
    "    .param .u64 gm_test_fill_u32_param_2\n"
    ")\n"
    "{\n"
    "    .reg .pred     %p<2>;\n"
    "    .reg .b32     %r<5>;\n"
    "    .reg .b64     %rd<9>;\n"
    "\n"
    "\n"
    "    ld.param.u64     %rd2, [gm_test_fill_u32_param_0];\n"
    "    ld.param.u32     %r1, [gm_test_fill_u32_param_1];\n"
    "    ld.param.u64     %rd3, [gm_test_fill_u32_param_2];\n"
    "    mov.u32     %r2, %ctaid.x;\n"
    "    mov.u32     %r3, %ntid.x;\n"
    "    mul.wide.u32     %rd4, %r2, %r3;\n"
    "    mov.u32     %r4, %tid.x;\n"
    "    cvt.u64.u32     %rd5, %r4;\n"
    "    add.s64     %rd1, %rd4, %rd5;\n"
    "    setp.ge.u64     %p1, %rd1, %rd3;\n"
    "    @%p1 bra     $L__BB0_2;\n"
    "\n"
    "    cvta.to.global.u64     %rd6, %rd2;\n"
    "    shl.b64     %rd7, %rd1, 2;\n"
    "    add.s64     %rd8, %rd6, %rd7;\n"
    "    st.global.u32     [%rd8], %r1;\n"
    "\n"
    "$L__BB0_2:\n"
    "    ret;\n"
    "\n"
    "}\n"
    "    // .globl    gm_test_scale_f32\n"
    ".visible .entry gm_test_scale_f32(\n"
    "    .param .u64 gm_test_scale_f32_param_0,\n"
    "    .param .u64 gm_test_scale_f32_param_1\n"
    ")\n"
    "{\n"
    "    .reg .pred     %p<3>;\n"
    "    .reg .f32     %f<9>;\n"
    "    .reg .b32     %r<7>;\n"
    "    .reg .b64     %rd<9>;\n"
    "\n"
    "\n"
    "    ld.param.u64     %rd4, [gm_test_scale_f32_param_0];\n"
    "    ld.param.u64     %rd3, [gm_test_scale_f32_param_1];\n"
    "    cvta.to.global.u64     %rd5, %rd4;\n"
    "    mov.u32     %r3, %ctaid.x;\n"
    "    mov.u32     %r4, %ntid.x;\n"
    "    mul.wide.u32     %rd6, %r3, %r4;\n"
    "    mov.u32     %r1, %tid.x;\n"
    "    cvt.u64.u32     %rd7, %r1;\n"
    "    add.s64     %rd1, %rd6, %rd7;\n"
    "    setp.ge.u64     %p1, %rd1, %rd3;\n"
    "    shl.b64     %rd8, %rd1, 2;\n"
    "    add.s64     %rd2, %rd5, %rd8;\n"
    "    mov.f32     %f8, 0f00000000;\n"
    "    @%p1 bra     $L__BB1_2;\n"
    "\n"
    "    ld.global.f32     %f8, [%rd2];\n"
    "\n"
    "$L__BB1_2:\n"
    "    shl.b32     %r5, %r1, 2;\n"
    "    mov.u32     %r6, scratch;\n"
    "    add.s32     %r2, %r6, %r5;\n"
    "    st.shared.f32     [%r2], %f8;\n"
    "    bar.sync     0;\n"
    "    @%p1 bra     $L__BB1_4;\n"
    "\n"
    "    ld.shared.f32     %f4, [%r2];\n"
    "    ld.const.f32     %f5, [gm_test_coeffs];\n"
    "    ld.const.f32     %f6, [gm_test_coeffs+4];\n"
    "    fma.rn.f32     %f7, %f4, %f5, %f6;\n"
    "    st.global.f32     [%rd2], %f7;\n"
    "\n"
    "$L__BB1_4:\n"
    "    ret;\n"
    "\n"
    "}\n"
    "\n";

#endif /* GM_TEST_CUDA_KERNELS_H */
