/*
 * A test driver in front of the CUDA driver double: stream callbacks run
 * later, on a thread of their own, as libcuda runs them, and the calls that
 * wait (stream, event and context synchronize, synchronous copies to the
 * host) wait for them through memory ThreadSanitizer cannot see (this file
 * is built without sanitizers), as libcuda's own locks are invisible to it.
 * Everything else is the double's (this library links it, so dlsym through
 * this library's handle finds the double's entry points next). Used by
 * cuda/callback-thread: under TSan, a race is reported wherever the backend
 * reads what a callback wrote without an acquire after a completed wait.
 * Callbacks are not kept in order: a test queues one at a time per wait.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <cuda.h>

/* A reference to the double, so that the linker keeps it as this library's dependency
 * (dlsym through this library's handle then finds the double's other entry points). */
long gm_cuda_double_violations(void);
__attribute__((used)) static long (*const keep_the_double)(void) = gm_cuda_double_violations;

static int pending; /* callbacks not yet run; relaxed atomics only */

typedef struct job {
    CUstream stream;
    CUstreamCallback fn;
    void *data;
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    const struct timespec later = {0, 5 * 1000 * 1000};

    nanosleep(&later, NULL); /* so that a wait that does not wait misses it */
    j->fn(j->stream, CUDA_SUCCESS, j->data);
    free(j);
    __atomic_fetch_sub(&pending, 1, __ATOMIC_RELAXED);
    return NULL;
}

static void wait_for_callbacks(void)
{
    const struct timespec pause = {0, 100 * 1000};

    while (__atomic_load_n(&pending, __ATOMIC_RELAXED) != 0)
        nanosleep(&pause, NULL);
}

CUresult CUDAAPI cuStreamAddCallback(CUstream stream, CUstreamCallback fn, void *data,
                                     unsigned int flags)
{
    job *j = malloc(sizeof(*j));
    pthread_t thread;

    if (j == NULL || flags != 0) {
        free(j);
        return CUDA_ERROR_INVALID_VALUE;
    }
    *j = (job){stream, fn, data};
    __atomic_fetch_add(&pending, 1, __ATOMIC_RELAXED);
    if (pthread_create(&thread, NULL, run_job, j) != 0) {
        __atomic_fetch_sub(&pending, 1, __ATOMIC_RELAXED);
        free(j);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_detach(thread);
    return CUDA_SUCCESS;
}

/* The double's entry point `name` (GM_CUDA_DOUBLE_PATH is the double's file). */
static void *double_entry(const char *name)
{
    void *lib = dlopen(GM_CUDA_DOUBLE_PATH, RTLD_NOW | RTLD_NOLOAD);

    return lib != NULL ? dlsym(lib, name) : NULL;
}

#define STRING_(x) #x
#define STRING(x)  STRING_(x)
#define WAITING(name, params, args)                                                         \
    CUresult CUDAAPI name params                                                            \
    {                                                                                       \
        CUresult(*real) params = (CUresult(*) params)(uintptr_t)double_entry(STRING(name)); \
                                                                                            \
        wait_for_callbacks();                                                               \
        return real != NULL ? real args : CUDA_ERROR_NOT_FOUND;                             \
    }

WAITING(cuStreamSynchronize, (CUstream stream), (stream))
WAITING(cuEventSynchronize, (CUevent event), (event))
WAITING(cuCtxSynchronize, (void), ())
WAITING(cuMemcpyDtoH, (void *dst, CUdeviceptr src, size_t bytes), (dst, src, bytes))
WAITING(cuMemcpy2D, (const CUDA_MEMCPY2D *copy), (copy))
WAITING(cuMemcpy3D, (const CUDA_MEMCPY3D *copy), (copy))
