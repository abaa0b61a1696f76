/*
 * A "driver" that exports cuInit and nothing else: loading it must fail with
 * GM_ERR_NO_DRIVER naming the first missing entry point (test_cuda_backend).
 */
#include <cuda.h>

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    (void)Flags;
    return CUDA_SUCCESS;
}
