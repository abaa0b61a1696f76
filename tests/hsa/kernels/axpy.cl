/*
 * Test kernel for the HSA backend, compiled by clang for amdgcn-amd-amdhsa
 * without device libraries (clang builtins only):
 *     y[i] = a * x[i] + y[i] + bias[i % 4]
 * Reading the work-group size makes code object v5 carry its hidden
 * arguments; `tile` gives it a static group segment; `bias` is a global
 * variable for module_get_global (constant memory).
 */
__attribute__((visibility("protected"))) __global int bias[4] = {0, 0, 0, 0};

__kernel void axpy(float a, __global const float *x, __global float *y, int n)
{
    __local float tile[256];
    int l = (int)__builtin_amdgcn_workitem_id_x();
    int i = (int)(__builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x()) + l;

    tile[l] = i < n ? x[i] : 0.0f;
    __builtin_amdgcn_s_barrier();
    if (i < n)
        y[i] = a * tile[l] + y[i] + (float)bias[i & 3];
}
