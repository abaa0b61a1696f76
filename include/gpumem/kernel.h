/**
 * @file gpumem/kernel.h
 * @brief The device-side API: write a kernel once, in the common subset of C
 *        and CUDA/HIP C++, and build it for the host simulator (any C11
 *        compiler), for NVIDIA GPUs (nvcc -x cu) and for AMD GPUs
 *        (clang -x hip --cuda-device-only).
 *
 * A kernel file includes only this header:
 *
 * @code
 * #include <gpumem/kernel.h>
 *
 * GM_KERNEL(scale_f32, (float *, x), (float, factor), (int64_t, n))
 * {
 *     int64_t i = gm_global_id_x();
 *     if (i < n)
 *         x[i] *= factor;
 * }
 *
 * GM_HOST_TABLE(my_kernels, GM_HOST_KERNELS(scale_f32), GM_HOST_NO_GLOBALS);
 * @endcode
 *
 * Parameters are written as (type, name) pairs (1 to 16 of them); the type
 * must be a scalar or a pointer (no arrays, no function pointers). Kernels
 * have C linkage on the GPU, so a kernel's name is its symbol in the CUDA
 * fatbin and in the AMDGPU code object (exported there with protected
 * visibility, with a `name.kd` descriptor). On the host the same macro
 * produces a descriptor `name__gm_kernel` that GM_HOST_TABLE collects; the
 * runtime (gpumem/launch.h) loads such a table like a GPU image.
 *
 * What a kernel may use (each maps to CUDA, to AMDGPU clang builtins and to
 * the simulator):
 * - indices and sizes: gm_thread_idx_x/y/z(), gm_block_idx_*, gm_block_dim_*,
 *   gm_grid_dim_*, gm_global_id_* (Numba's cuda.grid), gm_global_size_*
 *   (cuda.gridsize), gm_lane_id(), gm_warp_size().
 * - GM_SHARED_ARRAY(type, name, count) / GM_SHARED_ARRAY2D(type, name, rows,
 *   cols) / GM_SHARED_ARRAY3D(type, name, planes, rows, cols) (Numba's
 *   cuda.shared.array(shape)): static shared memory, one instance per block (__shared__, LDS
 *   address space 3; in the simulator a thread-local array of the worker
 *   running the block, so concurrently running blocks never share it).
 *   Index it; do not take sizeof of it (a pointer on the host).
 * - GM_DYNAMIC_SHARED(type, name): the dynamic shared memory sized at launch.
 * - GM_LOCAL_ARRAY(type, name, count): a per-thread array (Numba's
 *   cuda.local.array). CUDA allows a thread up to 512 KiB of local memory;
 *   the simulator keeps a thread's locals on its fiber's stack, 512 KiB by
 *   default (1 MiB under AddressSanitizer; a quarter of that under strict
 *   overcommit accounting, vm.overcommit_memory = 2), a few KiB of which its
 *   own frames use. The environment variable GM_SIM_STACK_BYTES (16K to 1G,
 *   digits with an optional K, M or G; read when an OS thread first runs a
 *   block) sets another size; an overflow of up to 1 MiB past the stack
 *   hits a guard region (SIGSEGV) instead of another thread's stack. Only
 *   the stack pages touched cost memory.
 * - GM_CONSTANT_ARRAY(type, name, count) at file scope: constant memory
 *   (__constant__, address space 4), written from the host with
 *   gm_module_set_constant() (Numba's const.array_like).
 * - gm_syncthreads(); gm_barrier(flags) with GM_CLK_LOCAL_MEM_FENCE and/or
 *   GM_CLK_GLOBAL_MEM_FENCE (a workgroup-scope fence over the named memory
 *   before and after the barrier; 0 gives an execution barrier only where the
 *   target can express it); gm_wavebarrier() (the warp / wavefront).
 * - gm_threadfence_block(), gm_threadfence() (device scope).
 * - atomics returning the old value: gm_atomic_{add,sub,min,max,exch,cas}_
 *   {i32,u32,i64,u64}, gm_atomic_add_f32, gm_atomic_add_f64 (relaxed, device
 *   scope, like CUDA's atomicAdd).
 *
 * Every thread of a block must reach each gm_syncthreads() / gm_barrier():
 * the simulator fails a launch in which some never do (an early return, or a
 * barrier under a thread-dependent branch) with GM_ERR_BARRIER_DIVERGENCE.
 * gm_wavebarrier() waits for the threads of the calling warp that have not
 * returned.
 *
 * On the simulator the threads of a block take turns on one OS thread and
 * switch only at a barrier or when one returns: a thread that waits for
 * another thread of its block to write something without a barrier in its
 * loop (a spin on a shared or global flag set by a thread of another warp,
 * which a GPU runs independently) never sees the write, and the launch never
 * ends (it is not detected: no barrier is involved). Blocks run in parallel,
 * but, as on a GPU, a block must not wait for another block of its launch.
 *
 * A kernel that faults (a wild or NULL pointer) on the simulator faults the
 * process, as any C code does: there is no device to lose, so no
 * GM_ERR_CONTEXT_LOST as on CUDA and HSA. Run it under AddressSanitizer to
 * locate the access (the report names the kernel's body).
 */
#ifndef GPUMEM_KERNEL_H
#define GPUMEM_KERNEL_H

/* ------------------------------------------------------------- targets */

#if defined(__HIP__)
#define GM_TARGET_AMDGPU 1 /**< compiled for AMD GPUs (clang HIP, device pass) */
#elif defined(__CUDACC__)
#define GM_TARGET_CUDA 1 /**< compiled by nvcc */
#else
#define GM_TARGET_HOST 1 /**< compiled by the C compiler for the simulator */
#endif

#if defined(GM_TARGET_HOST)
#include <stddef.h>
#include <stdint.h>

#include "launch.h"
#else
#include <stddef.h>
#include <stdint.h>
#endif

/** barrier flag: order shared (local) memory across the barrier. */
#define GM_CLK_LOCAL_MEM_FENCE 1u
/** barrier flag: order global memory across the barrier. */
#define GM_CLK_GLOBAL_MEM_FENCE 2u

/* ---------------------------------------------- parameter list machinery */

#define GM__CAT(a, b)  GM__CAT_(a, b)
#define GM__CAT_(a, b) a##b
#define GM__STR(x)     GM__STR_(x)
#define GM__STR_(x)    #x
#define GM__NARGS(...) \
    GM__NARGS_(__VA_ARGS__, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define GM__NARGS_(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, N, ...) N
/* (type, name) pair accessors. */
#define GM__PT(p)     GM__PT_ p
#define GM__PT_(t, n) t
#define GM__PN(p)     GM__PN_ p
#define GM__PN_(t, n) n
#define GM__COMMA()   ,
#define GM__NOSEP()

/* GM__MAP(m, sep, pairs...) applies m(index, pair) to each pair, separated by sep(). */
#define GM__MAP(m, sep, ...)                    GM__CAT(GM__MAP_, GM__NARGS(__VA_ARGS__))(m, sep, __VA_ARGS__)
#define GM__MAP_1(m, s, a)                      m(0, a)
#define GM__MAP_2(m, s, a, b)                   GM__MAP_1(m, s, a) s() m(1, b)
#define GM__MAP_3(m, s, a, b, c)                GM__MAP_2(m, s, a, b) s() m(2, c)
#define GM__MAP_4(m, s, a, b, c, d)             GM__MAP_3(m, s, a, b, c) s() m(3, d)
#define GM__MAP_5(m, s, a, b, c, d, e)          GM__MAP_4(m, s, a, b, c, d) s() m(4, e)
#define GM__MAP_6(m, s, a, b, c, d, e, f)       GM__MAP_5(m, s, a, b, c, d, e) s() m(5, f)
#define GM__MAP_7(m, s, a, b, c, d, e, f, g)    GM__MAP_6(m, s, a, b, c, d, e, f) s() m(6, g)
#define GM__MAP_8(m, s, a, b, c, d, e, f, g, h) GM__MAP_7(m, s, a, b, c, d, e, f, g) s() m(7, h)
#define GM__MAP_9(m, s, a, b, c, d, e, f, g, h, i) \
    GM__MAP_8(m, s, a, b, c, d, e, f, g, h) s() m(8, i)
#define GM__MAP_10(m, s, a, b, c, d, e, f, g, h, i, j) \
    GM__MAP_9(m, s, a, b, c, d, e, f, g, h, i) s() m(9, j)
#define GM__MAP_11(m, s, a, b, c, d, e, f, g, h, i, j, k) \
    GM__MAP_10(m, s, a, b, c, d, e, f, g, h, i, j) s() m(10, k)
#define GM__MAP_12(m, s, a, b, c, d, e, f, g, h, i, j, k, l) \
    GM__MAP_11(m, s, a, b, c, d, e, f, g, h, i, j, k) s() m(11, l)
#define GM__MAP_13(m, s, a, b, c, d, e, f, g, h, i, j, k, l, n) \
    GM__MAP_12(m, s, a, b, c, d, e, f, g, h, i, j, k, l) s() m(12, n)
#define GM__MAP_14(m, s, a, b, c, d, e, f, g, h, i, j, k, l, n, o) \
    GM__MAP_13(m, s, a, b, c, d, e, f, g, h, i, j, k, l, n) s() m(13, o)
#define GM__MAP_15(m, s, a, b, c, d, e, f, g, h, i, j, k, l, n, o, p) \
    GM__MAP_14(m, s, a, b, c, d, e, f, g, h, i, j, k, l, n, o) s() m(14, p)
#define GM__MAP_16(m, s, a, b, c, d, e, f, g, h, i, j, k, l, n, o, p, q) \
    GM__MAP_15(m, s, a, b, c, d, e, f, g, h, i, j, k, l, n, o, p) s() m(15, q)

#define GM__M_DECL(i, p)   GM__PT(p) GM__PN(p)
#define GM__M_NAME(i, p)   GM__PN(p)
#define GM__M_SIZE(i, p)   sizeof(GM__PT(p))
#define GM__M_TEXT(i, p)   GM__STR(GM__PT(p)) " " GM__STR(GM__PN(p))
#define GM__M_UNPACK(i, p) GM__PT(p) GM__PN(p) = *(GM__PT(p) *)gm__args[i];

/* A file-scope declaration that expands to nothing useful; absorbs a ';'. */
#if defined(__cplusplus)
#define GM__EMPTY_DECL(tag) static_assert(true, #tag)
#else
#define GM__EMPTY_DECL(tag) _Static_assert(1, #tag)
#endif

/* ================================================================ CUDA */
#if defined(GM_TARGET_CUDA)

#define GM_RESTRICT __restrict__
#define GM_DEVICE   __device__
#define GM__DEVINL  static __device__ __forceinline__

/** Declare a kernel: GM_KERNEL(name, (type, name), ...) { body } */
#define GM_KERNEL(name, ...) \
    extern "C" __global__ void name(GM__MAP(GM__M_DECL, GM__COMMA, __VA_ARGS__))

#define GM_SHARED_ARRAY(type, name, count)        __shared__ type name[(count)]
#define GM_SHARED_ARRAY2D(type, name, rows, cols) __shared__ type name[(rows)][(cols)]
#define GM_SHARED_ARRAY3D(type, name, planes, rows, cols) \
    __shared__ type name[(planes)][(rows)][(cols)]
#define GM_DYNAMIC_SHARED(type, name)                                   \
    extern __shared__ __align__(64) unsigned char gm__dynamic_shared[]; \
    type *name = (type *)gm__dynamic_shared
#define GM_CONSTANT_ARRAY(type, name, count) __constant__ type name[(count)]

GM__DEVINL uint32_t gm_thread_idx_x(void)
{
    return threadIdx.x;
}
GM__DEVINL uint32_t gm_thread_idx_y(void)
{
    return threadIdx.y;
}
GM__DEVINL uint32_t gm_thread_idx_z(void)
{
    return threadIdx.z;
}
GM__DEVINL uint32_t gm_block_idx_x(void)
{
    return blockIdx.x;
}
GM__DEVINL uint32_t gm_block_idx_y(void)
{
    return blockIdx.y;
}
GM__DEVINL uint32_t gm_block_idx_z(void)
{
    return blockIdx.z;
}
GM__DEVINL uint32_t gm_block_dim_x(void)
{
    return blockDim.x;
}
GM__DEVINL uint32_t gm_block_dim_y(void)
{
    return blockDim.y;
}
GM__DEVINL uint32_t gm_block_dim_z(void)
{
    return blockDim.z;
}
GM__DEVINL uint32_t gm_grid_dim_x(void)
{
    return gridDim.x;
}
GM__DEVINL uint32_t gm_grid_dim_y(void)
{
    return gridDim.y;
}
GM__DEVINL uint32_t gm_grid_dim_z(void)
{
    return gridDim.z;
}
GM__DEVINL uint32_t gm_warp_size(void)
{
    return 32u;
}

GM__DEVINL void gm_syncthreads(void)
{
    __syncthreads();
}
/* bar.sync orders shared and global memory for the block whatever the flags. */
GM__DEVINL void gm_barrier(unsigned flags)
{
    (void)flags;
    __syncthreads();
}
GM__DEVINL void gm_wavebarrier(void)
{
    __syncwarp();
}
GM__DEVINL void gm_threadfence_block(void)
{
    __threadfence_block();
}
GM__DEVINL void gm_threadfence(void)
{
    __threadfence();
}

#define GM__ATOMIC_INT(sfx, T, CT)                                \
    GM__DEVINL T gm_atomic_add_##sfx(T *p, T v)                   \
    {                                                             \
        return (T)atomicAdd((CT *)p, (CT)v);                      \
    }                                                             \
    GM__DEVINL T gm_atomic_sub_##sfx(T *p, T v)                   \
    {                                                             \
        return (T)atomicAdd((CT *)p, (CT)(0 - v));                \
    }                                                             \
    GM__DEVINL T gm_atomic_exch_##sfx(T *p, T v)                  \
    {                                                             \
        return (T)atomicExch((CT *)p, (CT)v);                     \
    }                                                             \
    GM__DEVINL T gm_atomic_cas_##sfx(T *p, T expected, T desired) \
    {                                                             \
        return (T)atomicCAS((CT *)p, (CT)expected, (CT)desired);  \
    }
GM__ATOMIC_INT(i32, int32_t, int)
GM__ATOMIC_INT(u32, uint32_t, unsigned int)
GM__ATOMIC_INT(i64, int64_t, unsigned long long)
GM__ATOMIC_INT(u64, uint64_t, unsigned long long)
#undef GM__ATOMIC_INT
GM__DEVINL int32_t gm_atomic_min_i32(int32_t *p, int32_t v)
{
    return atomicMin((int *)p, v);
}
GM__DEVINL int32_t gm_atomic_max_i32(int32_t *p, int32_t v)
{
    return atomicMax((int *)p, v);
}
GM__DEVINL uint32_t gm_atomic_min_u32(uint32_t *p, uint32_t v)
{
    return atomicMin((unsigned int *)p, v);
}
GM__DEVINL uint32_t gm_atomic_max_u32(uint32_t *p, uint32_t v)
{
    return atomicMax((unsigned int *)p, v);
}
GM__DEVINL int64_t gm_atomic_min_i64(int64_t *p, int64_t v)
{
    return (int64_t)atomicMin((long long *)p, (long long)v);
}
GM__DEVINL int64_t gm_atomic_max_i64(int64_t *p, int64_t v)
{
    return (int64_t)atomicMax((long long *)p, (long long)v);
}
GM__DEVINL uint64_t gm_atomic_min_u64(uint64_t *p, uint64_t v)
{
    return (uint64_t)atomicMin((unsigned long long *)p, (unsigned long long)v);
}
GM__DEVINL uint64_t gm_atomic_max_u64(uint64_t *p, uint64_t v)
{
    return (uint64_t)atomicMax((unsigned long long *)p, (unsigned long long)v);
}
GM__DEVINL float gm_atomic_add_f32(float *p, float v)
{
    return atomicAdd(p, v);
}
GM__DEVINL double gm_atomic_add_f64(double *p, double v)
{
    return atomicAdd(p, v);
}

/* ============================================================== AMDGPU */
#elif defined(GM_TARGET_AMDGPU)

#if !defined(__global__) /* no HIP headers (-nogpuinc): define the attributes */
#define __global__   __attribute__((global))
#define __device__   __attribute__((device))
#define __shared__   __attribute__((shared))
#define __constant__ __attribute__((constant))
#endif

#define GM_RESTRICT __restrict__
#define GM_DEVICE   __device__
#define GM__DEVINL  static __device__ inline __attribute__((always_inline))

/** Declare a kernel: exported with protected visibility, up to 1024 work-items per group. */
#define GM_KERNEL(name, ...)                                       \
    extern "C" __global__ __attribute__((visibility("protected"))) \
    __attribute__((amdgpu_flat_work_group_size(1, 1024))) void     \
    name(GM__MAP(GM__M_DECL, GM__COMMA, __VA_ARGS__))

#define GM_SHARED_ARRAY(type, name, count)        __shared__ type name[(count)]
#define GM_SHARED_ARRAY2D(type, name, rows, cols) __shared__ type name[(rows)][(cols)]
#define GM_SHARED_ARRAY3D(type, name, planes, rows, cols) \
    __shared__ type name[(planes)][(rows)][(cols)]
#define GM_DYNAMIC_SHARED(type, name)                                                  \
    extern __shared__ __attribute__((aligned(64))) unsigned char gm__dynamic_shared[]; \
    type *name = (type *)gm__dynamic_shared
#define GM_CONSTANT_ARRAY(type, name, count) \
    __attribute__((visibility("protected"))) __constant__ type name[(count)]

/* hsa_kernel_dispatch_packet_t: workgroup_size_x/y/z are u16 at bytes 4/6/8,
 * grid_size_x/y/z (in work-items) u32 at bytes 12/16/20. */
GM__DEVINL uint32_t gm__amd_wg_size(int axis)
{
    const uint16_t *p = (const uint16_t *)__builtin_amdgcn_dispatch_ptr();
    return p[2 + axis];
}
GM__DEVINL uint32_t gm__amd_grid_blocks(int axis)
{
    const uint32_t *p = (const uint32_t *)__builtin_amdgcn_dispatch_ptr();
    uint32_t wg = gm__amd_wg_size(axis);
    return (p[3 + axis] + wg - 1u) / wg;
}
GM__DEVINL uint32_t gm_thread_idx_x(void)
{
    return __builtin_amdgcn_workitem_id_x();
}
GM__DEVINL uint32_t gm_thread_idx_y(void)
{
    return __builtin_amdgcn_workitem_id_y();
}
GM__DEVINL uint32_t gm_thread_idx_z(void)
{
    return __builtin_amdgcn_workitem_id_z();
}
GM__DEVINL uint32_t gm_block_idx_x(void)
{
    return __builtin_amdgcn_workgroup_id_x();
}
GM__DEVINL uint32_t gm_block_idx_y(void)
{
    return __builtin_amdgcn_workgroup_id_y();
}
GM__DEVINL uint32_t gm_block_idx_z(void)
{
    return __builtin_amdgcn_workgroup_id_z();
}
GM__DEVINL uint32_t gm_block_dim_x(void)
{
    return gm__amd_wg_size(0);
}
GM__DEVINL uint32_t gm_block_dim_y(void)
{
    return gm__amd_wg_size(1);
}
GM__DEVINL uint32_t gm_block_dim_z(void)
{
    return gm__amd_wg_size(2);
}
GM__DEVINL uint32_t gm_grid_dim_x(void)
{
    return gm__amd_grid_blocks(0);
}
GM__DEVINL uint32_t gm_grid_dim_y(void)
{
    return gm__amd_grid_blocks(1);
}
GM__DEVINL uint32_t gm_grid_dim_z(void)
{
    return gm__amd_grid_blocks(2);
}
/* clang defines the wavefront size of the target (64 on gfx9, 32 on gfx10+ by default). */
GM__DEVINL uint32_t gm_warp_size(void)
{
    return (uint32_t)__AMDGCN_WAVEFRONT_SIZE;
}

/* Workgroup-scope release / acquire fences around s_barrier (what HIP's
 * __syncthreads does). clang 15's fence builtin cannot name one address
 * space, so either flag fences both; flags == 0 is a bare s_barrier. */
GM__DEVINL void gm_barrier(unsigned flags)
{
    if (flags != 0u)
        __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    if (flags != 0u)
        __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
GM__DEVINL void gm_syncthreads(void)
{
    gm_barrier(GM_CLK_LOCAL_MEM_FENCE | GM_CLK_GLOBAL_MEM_FENCE);
}
GM__DEVINL void gm_wavebarrier(void)
{
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
    __builtin_amdgcn_wave_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
GM__DEVINL void gm_threadfence_block(void)
{
    __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
}
GM__DEVINL void gm_threadfence(void)
{
    __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent");
}

#define GM__AMD_RMW(op, p, v) \
    __hip_atomic_##op((p), (v), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT)
#define GM__ATOMIC_INT(sfx, T)                                                            \
    GM__DEVINL T gm_atomic_add_##sfx(T *p, T v)                                           \
    {                                                                                     \
        return GM__AMD_RMW(fetch_add, p, v);                                              \
    }                                                                                     \
    GM__DEVINL T gm_atomic_sub_##sfx(T *p, T v)                                           \
    {                                                                                     \
        return GM__AMD_RMW(fetch_add, p, 0 - v);                                          \
    }                                                                                     \
    GM__DEVINL T gm_atomic_min_##sfx(T *p, T v)                                           \
    {                                                                                     \
        return GM__AMD_RMW(fetch_min, p, v);                                              \
    }                                                                                     \
    GM__DEVINL T gm_atomic_max_##sfx(T *p, T v)                                           \
    {                                                                                     \
        return GM__AMD_RMW(fetch_max, p, v);                                              \
    }                                                                                     \
    GM__DEVINL T gm_atomic_exch_##sfx(T *p, T v)                                          \
    {                                                                                     \
        return GM__AMD_RMW(exchange, p, v);                                               \
    }                                                                                     \
    GM__DEVINL T gm_atomic_cas_##sfx(T *p, T expected, T desired)                         \
    {                                                                                     \
        __hip_atomic_compare_exchange_strong(p, &expected, desired, __ATOMIC_RELAXED,     \
                                             __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT); \
        return expected;                                                                  \
    }
GM__ATOMIC_INT(i32, int32_t)
GM__ATOMIC_INT(u32, uint32_t)
GM__ATOMIC_INT(i64, int64_t)
GM__ATOMIC_INT(u64, uint64_t)
#undef GM__ATOMIC_INT
GM__DEVINL float gm_atomic_add_f32(float *p, float v)
{
    return GM__AMD_RMW(fetch_add, p, v);
}
GM__DEVINL double gm_atomic_add_f64(double *p, double v)
{
    return GM__AMD_RMW(fetch_add, p, v);
}

/* ========================================================= simulator */
#else

#if defined(__cplusplus)
#define GM_RESTRICT __restrict__
#else
#define GM_RESTRICT restrict
#endif
#define GM_DEVICE
#define GM__DEVINL static inline

#if defined(__cplusplus)
#define GM__THREAD_LOCAL thread_local
#else
#define GM__THREAD_LOCAL _Thread_local
#endif

/*
 * The simulator's device ABI (GM_HOST_KERNEL_ABI). Internal: only this
 * header and src/host/sim use it.
 *
 * gm__sim_ctx is what device code sees of the thread being simulated. A
 * kernel body gets the running thread's context as a hidden parameter,
 * gm__c, pointing to a local of the block function (GM_KERNEL) that the
 * compiler keeps in registers once the body is inlined: the indices cost no
 * thread-local access, and a barrier-free loop over threads is a plain
 * loop over an induction variable. Device code outside a kernel body
 * (helper functions) asks the simulator (gm__sim_current), which knows the
 * block being run on the calling OS thread and which of its threads runs:
 * the loops note the claimed thread in `running`, and nothing else is kept
 * per thread. The index functions, barriers and GM_DYNAMIC_SHARED pick
 * whichever is in scope (GM__CTX: the parameter gm__c hides the file-scope
 * function gm__c).
 */
typedef struct gm__sim_block gm__sim_block;

typedef struct gm__sim_ctx {
    int64_t global_x; /* block_idx[0] * block_dim[0] + thread_idx[0] */
    uint32_t linear;  /* linear index of the thread in the block (x fastest) */
    uint32_t thread_idx[3];
    uint32_t block_idx[3];
    uint32_t block_dim[3];
    uint32_t grid_dim[3];
    uint32_t warp_size;
    unsigned char *dynamic_shared;
    gm__sim_block *block;
} gm__sim_ctx;

/* The block being run: the thread-claiming state read by the loops of GM_KERNEL. */
struct gm__sim_block {
    uint32_t next;          /* next linear thread not yet started (stale while `fast`) */
    uint32_t count;         /* threads per block */
    uint32_t nx, ny, nz;    /* index of `next` */
    uint32_t fast;          /* a fiber runs the rest of the block as a barrier-free loop */
    uint32_t barrier_seen;  /* some thread of the block reached a barrier */
    uint32_t running;       /* linear index of the thread running (see gm__sim_current) */
    const gm__sim_ctx *ctx; /* the block's context (thread indices 0) */
    void *probe;            /* see GM_KERNEL; never dereferenced */
};

#if defined(__GNUC__)
#define GM__SIM_UNUSED __attribute__((unused))
#else
#define GM__SIM_UNUSED
#endif
#if defined(__cplusplus)
extern "C" {
#endif
/* The running thread's context, for device code outside a kernel body. */
GM_API const gm__sim_ctx *gm__sim_current(void);
/* Thread `linear` of the block waits at gm_barrier / gm_wavebarrier. */
GM_API void gm__sim_block_barrier(gm__sim_block *block, uint32_t linear);
GM_API void gm__sim_wave_barrier(gm__sim_block *block, uint32_t linear);
/* The calling fiber has no thread left to run: 1 when it has a thread to claim again (its
 * block's copy of the context may be stale), 0 when it must return. */
GM_API int gm__sim_park(gm__sim_block *block);
#if defined(GM_BUILDING_LIBRARY) && defined(__GNUC__)
/* The library's own kernels call the barriers directly, not through the PLT. */
__attribute__((visibility("hidden"))) void gm__sim_block_barrier_local(gm__sim_block *block,
                                                                       uint32_t linear);
__attribute__((visibility("hidden"))) void gm__sim_wave_barrier_local(gm__sim_block *block,
                                                                      uint32_t linear);
__attribute__((visibility("hidden"))) int gm__sim_park_local(gm__sim_block *block);
__attribute__((visibility("hidden"))) const gm__sim_ctx *gm__sim_current_local(void);
#define GM__SIM_BARRIER     gm__sim_block_barrier_local
#define GM__SIM_WAVEBARRIER gm__sim_wave_barrier_local
#define GM__SIM_PARK        gm__sim_park_local
#define GM__SIM_CURRENT     gm__sim_current_local
#else
#define GM__SIM_BARRIER     gm__sim_block_barrier
#define GM__SIM_WAVEBARRIER gm__sim_wave_barrier
#define GM__SIM_PARK        gm__sim_park
#define GM__SIM_CURRENT     gm__sim_current
#endif
#if defined(__cplusplus)
}
#endif

/* Outside a kernel body, `gm__c` names this function: there is no context parameter. */
GM__DEVINL void gm__c(void)
{
}

/* The context in scope: the body's parameter gm__c, else the simulator's (an opaque call). */
#if defined(__cplusplus)
GM__DEVINL const gm__sim_ctx *gm__sim_pick(const gm__sim_ctx *c)
{
    return c;
}
GM__DEVINL const gm__sim_ctx *gm__sim_pick(void (*)(void))
{
    return GM__SIM_CURRENT();
}
#define GM__CTX() gm__sim_pick(gm__c)
#else
#define GM__CTX() _Generic(gm__c, const gm__sim_ctx * : gm__c, default : GM__SIM_CURRENT())
#endif

/* Claim the next thread of the block for the calling fiber: 0 when none is left. */
GM__DEVINL int gm__sim_claim(gm__sim_block *b, gm__sim_ctx *c)
{
    uint32_t t = b->next;

    if (t >= b->count)
        return 0;
    b->next = t + 1u;
    b->running = t;
    c->linear = t;
    c->thread_idx[0] = b->nx;
    c->thread_idx[1] = b->ny;
    c->thread_idx[2] = b->nz;
    c->global_x = (int64_t)c->block_idx[0] * (int64_t)c->block_dim[0] + (int64_t)b->nx;
    if (++b->nx == c->block_dim[0]) {
        b->nx = 0;
        if (++b->ny == c->block_dim[1]) {
            b->ny = 0;
            b->nz++;
        }
    }
    return 1;
}

/* Whether the rest of the block may run as a barrier-free loop (1-D, no barrier yet). */
GM__DEVINL int gm__sim_fast_ok(const gm__sim_block *b, const gm__sim_ctx *c)
{
    return b->barrier_seen == 0u && c->block_dim[0] == b->count && b->next < b->count;
}

/* The loop ran to the end: every thread of the block has been started. */
GM__DEVINL void gm__sim_fast_end(gm__sim_block *b)
{
    if (b->fast != 0u) {
        b->fast = 0u;
        b->next = b->count;
    }
}

/*
 * Declare a kernel. On the host this makes three things: the body as a
 * static function with a hidden first parameter, the thread's context; a
 * block function that unpacks the arguments once and runs the block's
 * threads as a loop over the inlined body; and the descriptor
 * name__gm_kernel that GM_HOST_KERNELS lists.
 *
 * The loop claims threads one at a time from the block (a thread that
 * reaches a barrier is suspended in its fiber and the next thread starts on
 * another fiber running the same loop). A fiber with nothing left to claim
 * parks in the loop (gm__sim_park), so that starting a thread on it later
 * costs a switch and a claim. In a 1-D block whose first thread
 * returned without reaching a barrier, the kernel is barrier-free (every
 * thread of a block must reach each block barrier), so the remaining
 * threads run in a loop over the global index with no per-thread
 * bookkeeping, which the compiler may vectorize. If a thread reaches a
 * barrier after all (a wave barrier past returned lanes, or a divergent
 * block barrier), the barrier clears `fast` and the scheduler takes over
 * from that thread on.
 *
 * The loop notes the running thread for gm__sim_current, and checks whether
 * a barrier took over, only if the body may run code that asks or reaches a
 * barrier: such code is an opaque call, which may write the escaped local
 * gm__probe, so that its value is not a compile-time constant. A body
 * without opaque calls (a plain elementwise kernel) leaves gm__probe a
 * constant, the store and the check compile away, and the loop may be
 * vectorized.
 */
#define GM__SIM_BODY(name, ...) \
    name##__gm_body(&gm__cx, GM__MAP(GM__M_NAME, GM__COMMA, __VA_ARGS__))
#define GM_KERNEL(name, ...)                                                                     \
    static inline void name##__gm_body(const gm__sim_ctx *gm__c GM__SIM_UNUSED,                  \
                                       GM__MAP(GM__M_DECL, GM__COMMA, __VA_ARGS__));             \
    static void name##__gm_block(void *const *gm__args, gm__sim_block *gm__blk)                  \
    {                                                                                            \
        GM__MAP(GM__M_UNPACK, GM__NOSEP, __VA_ARGS__)                                            \
        gm__sim_ctx gm__cx = *gm__blk->ctx;                                                      \
        for (;;) {                                                                               \
            while (gm__sim_claim(gm__blk, &gm__cx) != 0) {                                       \
                GM__SIM_BODY(name, __VA_ARGS__);                                                 \
                if (gm__sim_fast_ok(gm__blk, &gm__cx) != 0) {                                    \
                    long double gm__probe = 0;                                                   \
                    int64_t gm__b = gm__cx.global_x - (int64_t)gm__cx.thread_idx[0];             \
                    int64_t gm__g = gm__b + (int64_t)gm__blk->next;                              \
                    int64_t gm__e = gm__b + (int64_t)gm__blk->count;                             \
                    gm__blk->probe = &gm__probe;                                                 \
                    gm__blk->fast = 1u;                                                          \
                    for (; gm__g < gm__e; gm__g++) {                                             \
                        gm__cx.linear = (uint32_t)(gm__g - gm__b);                               \
                        gm__cx.thread_idx[0] = gm__cx.linear;                                    \
                        gm__cx.global_x = gm__g;                                                 \
                        if (!__builtin_constant_p(gm__probe))                                    \
                            gm__blk->running = gm__cx.linear;                                    \
                        GM__SIM_BODY(name, __VA_ARGS__);                                         \
                        if (!__builtin_constant_p(gm__probe) && gm__blk->fast == 0u)             \
                            break; /* a barrier took over from this thread */                    \
                    }                                                                            \
                    gm__sim_fast_end(gm__blk);                                                   \
                    break;                                                                       \
                }                                                                                \
            }                                                                                    \
            if (GM__SIM_PARK(gm__blk) == 0)                                                      \
                return;                                                                          \
            gm__cx = *gm__blk->ctx;                                                              \
        }                                                                                        \
    }                                                                                            \
    static const size_t name##__gm_sizes[] = {GM__MAP(GM__M_SIZE, GM__COMMA, __VA_ARGS__)};      \
    static const char *const name##__gm_decls[] = {GM__MAP(GM__M_TEXT, GM__COMMA, __VA_ARGS__)}; \
    static const gm_host_kernel name##__gm_kernel = {GM_HOST_KERNEL_ABI, #name,                  \
                                                     name##__gm_block,   GM__NARGS(__VA_ARGS__), \
                                                     name##__gm_sizes,   name##__gm_decls};      \
    static inline void name##__gm_body(const gm__sim_ctx *gm__c GM__SIM_UNUSED,                  \
                                       GM__MAP(GM__M_DECL, GM__COMMA, __VA_ARGS__))

/*
 * A shared array no GPU can hold fails to compile here as it does with nvcc
 * and clang: one array over GM_SHARED_ARRAY_MAX_BYTES (64 KiB, AMD's LDS per
 * workgroup; CUDA allows 48 KiB of static shared memory per kernel, which
 * nvcc checks for the kernel's total; the simulator cannot add up a kernel's
 * arrays, so a total over the limit still runs here).
 */
#define GM_SHARED_ARRAY_MAX_BYTES (64 * 1024)
#if defined(__cplusplus)
#define GM__SHARED_FITS(name)                                                      \
    static_assert(sizeof(name##__gm_shared) <= GM_SHARED_ARRAY_MAX_BYTES,          \
                  "GM_SHARED_ARRAY " #name " is larger than the 64 KiB of shared " \
                  "memory a GPU block can have")
#else
#define GM__SHARED_FITS(name)                                                       \
    _Static_assert(sizeof(name##__gm_shared) <= GM_SHARED_ARRAY_MAX_BYTES,          \
                   "GM_SHARED_ARRAY " #name " is larger than the 64 KiB of shared " \
                   "memory a GPU block can have")
#endif

/* The array is thread-local storage of the worker running the block; `name` is a pointer
 * to it, computed once per thread (a thread-local address costs a call in shared
 * libraries), so sizeof(name) is a pointer's size on the host. */
#define GM_SHARED_ARRAY(type, name, count)                   \
    static GM__THREAD_LOCAL type name##__gm_shared[(count)]; \
    GM__SHARED_FITS(name);                                   \
    type *name = name##__gm_shared;                          \
    __asm__("" : "+r"(name)) /* keep the address; do not recompute it */
#define GM_SHARED_ARRAY2D(type, name, rows, cols)                   \
    static GM__THREAD_LOCAL type name##__gm_shared[(rows)][(cols)]; \
    GM__SHARED_FITS(name);                                          \
    type(*name)[(cols)] = name##__gm_shared;                        \
    __asm__("" : "+r"(name))
#define GM_SHARED_ARRAY3D(type, name, planes, rows, cols)                     \
    static GM__THREAD_LOCAL type name##__gm_shared[(planes)][(rows)][(cols)]; \
    GM__SHARED_FITS(name);                                                    \
    type(*name)[(rows)][(cols)] = name##__gm_shared;                          \
    __asm__("" : "+r"(name))
#define GM_DYNAMIC_SHARED(type, name) type *name = (type *)(void *)GM__CTX()->dynamic_shared
/* One instance per process: host images share their constants between contexts. */
#define GM_CONSTANT_ARRAY(type, name, count) \
    static type name[(count)];               \
    static const gm_host_global name##__gm_global = {#name, (void *)name, sizeof(name)}

/* The indices and sizes read the context in scope (macros, so that a kernel body reads
 * its parameter). */
#define gm_thread_idx_x() ((uint32_t)GM__CTX()->thread_idx[0])
#define gm_thread_idx_y() ((uint32_t)GM__CTX()->thread_idx[1])
#define gm_thread_idx_z() ((uint32_t)GM__CTX()->thread_idx[2])
#define gm_block_idx_x()  ((uint32_t)GM__CTX()->block_idx[0])
#define gm_block_idx_y()  ((uint32_t)GM__CTX()->block_idx[1])
#define gm_block_idx_z()  ((uint32_t)GM__CTX()->block_idx[2])
#define gm_block_dim_x()  ((uint32_t)GM__CTX()->block_dim[0])
#define gm_block_dim_y()  ((uint32_t)GM__CTX()->block_dim[1])
#define gm_block_dim_z()  ((uint32_t)GM__CTX()->block_dim[2])
#define gm_grid_dim_x()   ((uint32_t)GM__CTX()->grid_dim[0])
#define gm_grid_dim_y()   ((uint32_t)GM__CTX()->grid_dim[1])
#define gm_grid_dim_z()   ((uint32_t)GM__CTX()->grid_dim[2])
#define gm_warp_size()    ((uint32_t)GM__CTX()->warp_size)

/* The threads of a block run on one OS thread, so program order already
 * orders their shared and global accesses: at workgroup scope both fence
 * flags are honoured by the compiler barrier of the (opaque) call. Device
 * scope (gm_threadfence, other blocks run on other OS threads) is a real
 * fence. */
GM__DEVINL void gm__sim_barrier_at(const gm__sim_ctx *c, unsigned flags)
{
    (void)flags;
    GM__SIM_BARRIER(c->block, c->linear);
}
GM__DEVINL void gm__sim_wavebarrier_at(const gm__sim_ctx *c)
{
    GM__SIM_WAVEBARRIER(c->block, c->linear);
}
#define gm_barrier(flags) gm__sim_barrier_at(GM__CTX(), (flags))
#define gm_syncthreads() \
    gm__sim_barrier_at(GM__CTX(), GM_CLK_LOCAL_MEM_FENCE | GM_CLK_GLOBAL_MEM_FENCE)
#define gm_wavebarrier() gm__sim_wavebarrier_at(GM__CTX())
GM__DEVINL void gm_threadfence_block(void)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
#if defined(__SANITIZE_THREAD__)
/* ThreadSanitizer does not model fences: a sequentially consistent RMW stands in. */
GM__DEVINL void gm_threadfence(void)
{
    static int gm__fence_word;

    (void)__atomic_fetch_add(&gm__fence_word, 0, __ATOMIC_SEQ_CST);
}
#else
GM__DEVINL void gm_threadfence(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
#endif

#define GM__ATOMIC_INT(sfx, T)                                                                     \
    GM__DEVINL T gm_atomic_add_##sfx(T *p, T v)                                                    \
    {                                                                                              \
        return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);                                         \
    }                                                                                              \
    GM__DEVINL T gm_atomic_sub_##sfx(T *p, T v)                                                    \
    {                                                                                              \
        return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED);                                         \
    }                                                                                              \
    GM__DEVINL T gm_atomic_exch_##sfx(T *p, T v)                                                   \
    {                                                                                              \
        return __atomic_exchange_n(p, v, __ATOMIC_RELAXED);                                        \
    }                                                                                              \
    GM__DEVINL T gm_atomic_cas_##sfx(T *p, T expected, T desired)                                  \
    {                                                                                              \
        __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED); \
        return expected;                                                                           \
    }                                                                                              \
    GM__DEVINL T gm_atomic_min_##sfx(T *p, T v)                                                    \
    {                                                                                              \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                              \
        while (old > v &&                                                                          \
               !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {  \
        }                                                                                          \
        return old;                                                                                \
    }                                                                                              \
    GM__DEVINL T gm_atomic_max_##sfx(T *p, T v)                                                    \
    {                                                                                              \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                              \
        while (old < v &&                                                                          \
               !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {  \
        }                                                                                          \
        return old;                                                                                \
    }
GM__ATOMIC_INT(i32, int32_t)
GM__ATOMIC_INT(u32, uint32_t)
GM__ATOMIC_INT(i64, int64_t)
GM__ATOMIC_INT(u64, uint64_t)
#undef GM__ATOMIC_INT

/* Float add as a compare-and-swap loop on the bits. */
#define GM__ATOMIC_FADD(sfx, T, U)                                                                \
    GM__DEVINL T gm_atomic_add_##sfx(T *p, T v)                                                   \
    {                                                                                             \
        union {                                                                                   \
            T f;                                                                                  \
            U u;                                                                                  \
        } old, upd;                                                                               \
        old.u = __atomic_load_n((U *)(void *)p, __ATOMIC_RELAXED);                                \
        do {                                                                                      \
            upd.f = old.f + v;                                                                    \
        } while (!__atomic_compare_exchange_n((U *)(void *)p, &old.u, upd.u, 1, __ATOMIC_RELAXED, \
                                              __ATOMIC_RELAXED));                                 \
        return old.f;                                                                             \
    }
GM__ATOMIC_FADD(f32, float, uint32_t)
GM__ATOMIC_FADD(f64, double, uint64_t)
#undef GM__ATOMIC_FADD

#endif /* targets */

/* ------------------------------------------------------ common helpers */

#ifndef GM__STRIDED_LAYOUT_DEFINED /* also in gpumem/launch.h */
#define GM__STRIDED_LAYOUT_DEFINED
/** Most dimensions of the built-in strided copy kernel (copy_strided). */
#define GM_STRIDED_MAX_DIMS 4

/**
 * Layout argument of the built-in copy_strided kernel (passed by value with
 * gm_arg_bytes): a C-order walk over `shape`, byte strides on each side.
 */
typedef struct gm_strided_layout {
    int64_t shape[GM_STRIDED_MAX_DIMS];
    int64_t dst_strides[GM_STRIDED_MAX_DIMS];
    int64_t src_strides[GM_STRIDED_MAX_DIMS];
    int32_t ndim;     /**< 1 ..= GM_STRIDED_MAX_DIMS */
    int32_t itemsize; /**< 1, 2, 4 or 8 */
} gm_strided_layout;
#endif

/* Per-thread local memory. On the simulator it is on the thread's fiber stack: at most a
 * little under 512 KiB per thread by default, GM_SIM_STACK_BYTES for more (see the list
 * of what a kernel may use, above). */
#define GM_LOCAL_ARRAY(type, name, count) type name[(count)]

#if defined(GM_TARGET_HOST)
/* The simulator: macros over the context in scope, like the indices (see GM__CTX). */
#define gm_thread_linear_id() ((uint32_t)GM__CTX()->linear)
#define gm_lane_id()          (gm_thread_linear_id() % gm_warp_size())
#define gm_global_id_x()      ((int64_t)GM__CTX()->global_x)
#define gm_global_id_y() \
    ((int64_t)gm_block_idx_y() * (int64_t)gm_block_dim_y() + (int64_t)gm_thread_idx_y())
#define gm_global_id_z() \
    ((int64_t)gm_block_idx_z() * (int64_t)gm_block_dim_z() + (int64_t)gm_thread_idx_z())
#define gm_global_size_x() ((int64_t)gm_grid_dim_x() * (int64_t)gm_block_dim_x())
#define gm_global_size_y() ((int64_t)gm_grid_dim_y() * (int64_t)gm_block_dim_y())
#define gm_global_size_z() ((int64_t)gm_grid_dim_z() * (int64_t)gm_block_dim_z())
#else
/** Linear thread index in the block (x fastest). */
GM__DEVINL uint32_t gm_thread_linear_id(void)
{
    return gm_thread_idx_x() +
           gm_block_dim_x() * (gm_thread_idx_y() + gm_block_dim_y() * gm_thread_idx_z());
}
/** Lane in the warp / wavefront. */
GM__DEVINL uint32_t gm_lane_id(void)
{
    return gm_thread_linear_id() % gm_warp_size();
}
/** Numba's cuda.grid(1) along each axis: block index * block size + thread index. */
GM__DEVINL int64_t gm_global_id_x(void)
{
    return (int64_t)gm_block_idx_x() * (int64_t)gm_block_dim_x() + (int64_t)gm_thread_idx_x();
}
GM__DEVINL int64_t gm_global_id_y(void)
{
    return (int64_t)gm_block_idx_y() * (int64_t)gm_block_dim_y() + (int64_t)gm_thread_idx_y();
}
GM__DEVINL int64_t gm_global_id_z(void)
{
    return (int64_t)gm_block_idx_z() * (int64_t)gm_block_dim_z() + (int64_t)gm_thread_idx_z();
}
/** Numba's cuda.gridsize(1) along each axis: threads in the grid. */
GM__DEVINL int64_t gm_global_size_x(void)
{
    return (int64_t)gm_grid_dim_x() * (int64_t)gm_block_dim_x();
}
GM__DEVINL int64_t gm_global_size_y(void)
{
    return (int64_t)gm_grid_dim_y() * (int64_t)gm_block_dim_y();
}
GM__DEVINL int64_t gm_global_size_z(void)
{
    return (int64_t)gm_grid_dim_z() * (int64_t)gm_block_dim_z();
}
#endif

/* ------------------------------------------------------ host tables */

#if defined(GM_TARGET_HOST)
/** The most kernels (or constant arrays) one GM_HOST_KERNELS (GM_HOST_GLOBALS) lists. */
#define GM_HOST_LIST_MAX 64
/* GM__LIST(m, a, b, ...) is m(a), m(b), ...: up to GM_HOST_LIST_MAX names. */
#define GM__LNARGS(...)                                                                          \
    GM__LNARGS_(__VA_ARGS__, 64, 63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, \
                47, 46, 45, 44, 43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28,  \
                27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, \
                6, 5, 4, 3, 2, 1, 0)
#define GM__LNARGS_(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, \
                    a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31, a32,  \
                    a33, a34, a35, a36, a37, a38, a39, a40, a41, a42, a43, a44, a45, a46, a47,  \
                    a48, a49, a50, a51, a52, a53, a54, a55, a56, a57, a58, a59, a60, a61, a62,  \
                    a63, a64, N, ...)                                                           \
    N
#define GM__LIST(m, ...)       GM__CAT(GM__LIST_, GM__LNARGS(__VA_ARGS__))(m, __VA_ARGS__)
#define GM__LIST_1(m, a)       m(a)
#define GM__LIST_2(m, a, ...)  m(a), GM__LIST_1(m, __VA_ARGS__)
#define GM__LIST_3(m, a, ...)  m(a), GM__LIST_2(m, __VA_ARGS__)
#define GM__LIST_4(m, a, ...)  m(a), GM__LIST_3(m, __VA_ARGS__)
#define GM__LIST_5(m, a, ...)  m(a), GM__LIST_4(m, __VA_ARGS__)
#define GM__LIST_6(m, a, ...)  m(a), GM__LIST_5(m, __VA_ARGS__)
#define GM__LIST_7(m, a, ...)  m(a), GM__LIST_6(m, __VA_ARGS__)
#define GM__LIST_8(m, a, ...)  m(a), GM__LIST_7(m, __VA_ARGS__)
#define GM__LIST_9(m, a, ...)  m(a), GM__LIST_8(m, __VA_ARGS__)
#define GM__LIST_10(m, a, ...) m(a), GM__LIST_9(m, __VA_ARGS__)
#define GM__LIST_11(m, a, ...) m(a), GM__LIST_10(m, __VA_ARGS__)
#define GM__LIST_12(m, a, ...) m(a), GM__LIST_11(m, __VA_ARGS__)
#define GM__LIST_13(m, a, ...) m(a), GM__LIST_12(m, __VA_ARGS__)
#define GM__LIST_14(m, a, ...) m(a), GM__LIST_13(m, __VA_ARGS__)
#define GM__LIST_15(m, a, ...) m(a), GM__LIST_14(m, __VA_ARGS__)
#define GM__LIST_16(m, a, ...) m(a), GM__LIST_15(m, __VA_ARGS__)
#define GM__LIST_17(m, a, ...) m(a), GM__LIST_16(m, __VA_ARGS__)
#define GM__LIST_18(m, a, ...) m(a), GM__LIST_17(m, __VA_ARGS__)
#define GM__LIST_19(m, a, ...) m(a), GM__LIST_18(m, __VA_ARGS__)
#define GM__LIST_20(m, a, ...) m(a), GM__LIST_19(m, __VA_ARGS__)
#define GM__LIST_21(m, a, ...) m(a), GM__LIST_20(m, __VA_ARGS__)
#define GM__LIST_22(m, a, ...) m(a), GM__LIST_21(m, __VA_ARGS__)
#define GM__LIST_23(m, a, ...) m(a), GM__LIST_22(m, __VA_ARGS__)
#define GM__LIST_24(m, a, ...) m(a), GM__LIST_23(m, __VA_ARGS__)
#define GM__LIST_25(m, a, ...) m(a), GM__LIST_24(m, __VA_ARGS__)
#define GM__LIST_26(m, a, ...) m(a), GM__LIST_25(m, __VA_ARGS__)
#define GM__LIST_27(m, a, ...) m(a), GM__LIST_26(m, __VA_ARGS__)
#define GM__LIST_28(m, a, ...) m(a), GM__LIST_27(m, __VA_ARGS__)
#define GM__LIST_29(m, a, ...) m(a), GM__LIST_28(m, __VA_ARGS__)
#define GM__LIST_30(m, a, ...) m(a), GM__LIST_29(m, __VA_ARGS__)
#define GM__LIST_31(m, a, ...) m(a), GM__LIST_30(m, __VA_ARGS__)
#define GM__LIST_32(m, a, ...) m(a), GM__LIST_31(m, __VA_ARGS__)
#define GM__LIST_33(m, a, ...) m(a), GM__LIST_32(m, __VA_ARGS__)
#define GM__LIST_34(m, a, ...) m(a), GM__LIST_33(m, __VA_ARGS__)
#define GM__LIST_35(m, a, ...) m(a), GM__LIST_34(m, __VA_ARGS__)
#define GM__LIST_36(m, a, ...) m(a), GM__LIST_35(m, __VA_ARGS__)
#define GM__LIST_37(m, a, ...) m(a), GM__LIST_36(m, __VA_ARGS__)
#define GM__LIST_38(m, a, ...) m(a), GM__LIST_37(m, __VA_ARGS__)
#define GM__LIST_39(m, a, ...) m(a), GM__LIST_38(m, __VA_ARGS__)
#define GM__LIST_40(m, a, ...) m(a), GM__LIST_39(m, __VA_ARGS__)
#define GM__LIST_41(m, a, ...) m(a), GM__LIST_40(m, __VA_ARGS__)
#define GM__LIST_42(m, a, ...) m(a), GM__LIST_41(m, __VA_ARGS__)
#define GM__LIST_43(m, a, ...) m(a), GM__LIST_42(m, __VA_ARGS__)
#define GM__LIST_44(m, a, ...) m(a), GM__LIST_43(m, __VA_ARGS__)
#define GM__LIST_45(m, a, ...) m(a), GM__LIST_44(m, __VA_ARGS__)
#define GM__LIST_46(m, a, ...) m(a), GM__LIST_45(m, __VA_ARGS__)
#define GM__LIST_47(m, a, ...) m(a), GM__LIST_46(m, __VA_ARGS__)
#define GM__LIST_48(m, a, ...) m(a), GM__LIST_47(m, __VA_ARGS__)
#define GM__LIST_49(m, a, ...) m(a), GM__LIST_48(m, __VA_ARGS__)
#define GM__LIST_50(m, a, ...) m(a), GM__LIST_49(m, __VA_ARGS__)
#define GM__LIST_51(m, a, ...) m(a), GM__LIST_50(m, __VA_ARGS__)
#define GM__LIST_52(m, a, ...) m(a), GM__LIST_51(m, __VA_ARGS__)
#define GM__LIST_53(m, a, ...) m(a), GM__LIST_52(m, __VA_ARGS__)
#define GM__LIST_54(m, a, ...) m(a), GM__LIST_53(m, __VA_ARGS__)
#define GM__LIST_55(m, a, ...) m(a), GM__LIST_54(m, __VA_ARGS__)
#define GM__LIST_56(m, a, ...) m(a), GM__LIST_55(m, __VA_ARGS__)
#define GM__LIST_57(m, a, ...) m(a), GM__LIST_56(m, __VA_ARGS__)
#define GM__LIST_58(m, a, ...) m(a), GM__LIST_57(m, __VA_ARGS__)
#define GM__LIST_59(m, a, ...) m(a), GM__LIST_58(m, __VA_ARGS__)
#define GM__LIST_60(m, a, ...) m(a), GM__LIST_59(m, __VA_ARGS__)
#define GM__LIST_61(m, a, ...) m(a), GM__LIST_60(m, __VA_ARGS__)
#define GM__LIST_62(m, a, ...) m(a), GM__LIST_61(m, __VA_ARGS__)
#define GM__LIST_63(m, a, ...) m(a), GM__LIST_62(m, __VA_ARGS__)
#define GM__LIST_64(m, a, ...) m(a), GM__LIST_63(m, __VA_ARGS__)
/** List the kernels of a host table: GM_HOST_KERNELS(k1, k2, ...), 1 to 64 names. */
#define GM_HOST_KERNELS(...) GM__LIST(GM__M_KREF, __VA_ARGS__)
#define GM__M_KREF(k)        &k##__gm_kernel
/** List the constant arrays of a host table: GM_HOST_GLOBALS(c1, ...), 1 to 64 names. */
#define GM_HOST_GLOBALS(...) GM__LIST(GM__M_GREF, __VA_ARGS__)
#define GM__M_GREF(g)        &g##__gm_global
/** A table without constant arrays. */
#define GM_HOST_NO_GLOBALS NULL
/**
 * Define `const gm_host_table name` from a GM_HOST_KERNELS(...) list and a
 * GM_HOST_GLOBALS(...) list (or GM_HOST_NO_GLOBALS). Expands to nothing on
 * GPU targets. Use it once per kernel file, after the kernels.
 */
#define GM_HOST_TABLE(name, kernels, globals)                                           \
    static const gm_host_kernel *const name##__gm_kernels[] = {kernels};                \
    static const gm_host_global *const name##__gm_globals[] = {globals};                \
    extern const gm_host_table name; /* external linkage in C++ too */                  \
    const gm_host_table name = {GM_HOST_TABLE_MAGIC,                                    \
                                GM_HOST_KERNEL_ABI,                                     \
                                (int32_t)(sizeof(name##__gm_kernels) / sizeof(void *)), \
                                name##__gm_kernels,                                     \
                                (int32_t)(sizeof(name##__gm_globals) / sizeof(void *)), \
                                name##__gm_globals}
#else
#define GM_HOST_TABLE(name, kernels, globals) GM__EMPTY_DECL(name)
#endif

#endif /* GPUMEM_KERNEL_H */
