/*
 * The CUDA driver API as the CUDA backend sees it: one X-macro list of the
 * entry points, the function-pointer table it generates, the loader that
 * fills that table from libcuda.so.1 with dlopen/dlsym, and the one wrapper
 * every driver call goes through.
 *
 * cuda.h is included for its types and prototypes only; nothing links
 * libcuda. The list names the API (cuMemAlloc, cuMemHostRegister, ...) and
 * cuda.h's own #defines turn each name into the versioned symbol the header
 * was written against (cuMemAlloc_v2, cuMemHostRegister_v2,
 * cuModuleGetGlobal_v2, cuEventElapsedTime_v2, ...): the table's fields,
 * their types (__typeof__ of the prototype) and the strings given to dlsym
 * all come from that expansion, so the symbol loaded always has the
 * signature the code is compiled against.
 *
 * The driver library is found with dlopen("libcuda.so.1"), or at the path in
 * the environment variable GM_CUDA_DRIVER_PATH when it is set (used by the
 * test doubles and to pick a driver without touching LD_LIBRARY_PATH; read
 * with secure_getenv, so ignored by setuid programs like LD_LIBRARY_PATH).
 */
#ifndef GPUMEM_SRC_CUDA_CUDA_DRIVER_H
#define GPUMEM_SRC_CUDA_CUDA_DRIVER_H

#include <cuda.h>

/*
 * The backend resolves the plain (legacy default stream) entry points by
 * name and relies on their meaning: a synchronous copy or memset is ordered
 * with the legacy stream, and it then synchronizes CU_STREAM_LEGACY. With
 * per-thread default-stream semantics cuda.h would rename the calls to their
 * _ptds forms, whose work goes to the calling thread's stream instead, and
 * that synchronize would wait for the wrong stream: refuse that build.
 */
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM) || defined(__CUDA_API_PER_THREAD_DEFAULT_STREAM)
#error "gpumem's CUDA backend must be built without CUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

#include "core.h"

/* The soname opened when GM_CUDA_DRIVER_PATH is not set. */
#define GM_CUDA_DRIVER_SONAME "libcuda.so.1"

/* Environment variable naming the driver library to open instead. */
#define GM_CUDA_DRIVER_PATH_ENV "GM_CUDA_DRIVER_PATH"

/* Third column of the list: whether a driver without the symbol is refused. */
#define GM_CUDA_REQUIRED 0
#define GM_CUDA_OPTIONAL 1

/*
 * Every driver entry point the backend uses: X(api_name, fallback, need).
 * `fallback` is an older symbol with the same signature tried when the
 * versioned one is absent (drivers older than the header), or NULL.
 * OPTIONAL entries may be NULL in the table; their callers check.
 */
#define GM_CUDA_ENTRY_POINTS(X)                                                 \
    /* lifecycle, device, context */                                            \
    X(cuInit, NULL, GM_CUDA_REQUIRED)                                           \
    X(cuDriverGetVersion, NULL, GM_CUDA_REQUIRED)                               \
    X(cuGetErrorName, NULL, GM_CUDA_REQUIRED)                                   \
    X(cuGetErrorString, NULL, GM_CUDA_REQUIRED)                                 \
    X(cuDeviceGetCount, NULL, GM_CUDA_REQUIRED)                                 \
    X(cuDeviceGet, NULL, GM_CUDA_REQUIRED)                                      \
    X(cuDeviceGetName, NULL, GM_CUDA_REQUIRED)                                  \
    X(cuDeviceGetAttribute, NULL, GM_CUDA_REQUIRED)                             \
    X(cuDeviceTotalMem, NULL, GM_CUDA_REQUIRED)                                 \
    X(cuDevicePrimaryCtxRetain, NULL, GM_CUDA_REQUIRED)                         \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", GM_CUDA_REQUIRED) \
    X(cuCtxGetCurrent, NULL, GM_CUDA_REQUIRED)                                  \
    X(cuCtxSetCurrent, NULL, GM_CUDA_REQUIRED)                                  \
    X(cuCtxPushCurrent, NULL, GM_CUDA_REQUIRED)                                 \
    X(cuCtxPopCurrent, NULL, GM_CUDA_REQUIRED)                                  \
    X(cuCtxSynchronize, NULL, GM_CUDA_REQUIRED)                                 \
    X(cuMemGetInfo, NULL, GM_CUDA_REQUIRED)                                     \
    /* memory */                                                                \
    X(cuMemAlloc, NULL, GM_CUDA_REQUIRED)                                       \
    X(cuMemFree, NULL, GM_CUDA_REQUIRED)                                        \
    X(cuMemHostAlloc, NULL, GM_CUDA_REQUIRED)                                   \
    X(cuMemFreeHost, NULL, GM_CUDA_REQUIRED)                                    \
    X(cuMemHostGetDevicePointer, NULL, GM_CUDA_REQUIRED)                        \
    X(cuMemHostRegister, NULL, GM_CUDA_REQUIRED)                                \
    X(cuMemHostUnregister, NULL, GM_CUDA_REQUIRED)                              \
    X(cuMemAllocManaged, NULL, GM_CUDA_REQUIRED)                                \
    X(cuPointerGetAttribute, NULL, GM_CUDA_REQUIRED)                            \
    X(cuMemGetAddressRange, NULL, GM_CUDA_REQUIRED)                             \
    X(cuIpcGetMemHandle, NULL, GM_CUDA_REQUIRED)                                \
    X(cuIpcOpenMemHandle, "cuIpcOpenMemHandle", GM_CUDA_REQUIRED)               \
    X(cuIpcCloseMemHandle, NULL, GM_CUDA_REQUIRED)                              \
    /* copies and memset */                                                     \
    X(cuMemcpyHtoD, NULL, GM_CUDA_REQUIRED)                                     \
    X(cuMemcpyDtoH, NULL, GM_CUDA_REQUIRED)                                     \
    X(cuMemcpyDtoD, NULL, GM_CUDA_REQUIRED)                                     \
    X(cuMemcpyHtoDAsync, NULL, GM_CUDA_REQUIRED)                                \
    X(cuMemcpyDtoHAsync, NULL, GM_CUDA_REQUIRED)                                \
    X(cuMemcpyDtoDAsync, NULL, GM_CUDA_REQUIRED)                                \
    X(cuMemcpy2D, NULL, GM_CUDA_REQUIRED)                                       \
    X(cuMemcpy2DAsync, NULL, GM_CUDA_REQUIRED)                                  \
    X(cuMemcpy3D, NULL, GM_CUDA_REQUIRED)                                       \
    X(cuMemcpy3DAsync, NULL, GM_CUDA_REQUIRED)                                  \
    X(cuMemsetD8, NULL, GM_CUDA_REQUIRED)                                       \
    X(cuMemsetD16, NULL, GM_CUDA_REQUIRED)                                      \
    X(cuMemsetD32, NULL, GM_CUDA_REQUIRED)                                      \
    X(cuMemsetD8Async, NULL, GM_CUDA_REQUIRED)                                  \
    X(cuMemsetD16Async, NULL, GM_CUDA_REQUIRED)                                 \
    X(cuMemsetD32Async, NULL, GM_CUDA_REQUIRED)                                 \
    X(cuMemsetD2D32, NULL, GM_CUDA_REQUIRED)                                    \
    X(cuMemsetD2D32Async, NULL, GM_CUDA_REQUIRED)                               \
    /* streams and events */                                                    \
    X(cuStreamCreate, NULL, GM_CUDA_REQUIRED)                                   \
    X(cuStreamDestroy, NULL, GM_CUDA_REQUIRED)                                  \
    X(cuStreamSynchronize, NULL, GM_CUDA_REQUIRED)                              \
    X(cuStreamQuery, NULL, GM_CUDA_REQUIRED)                                    \
    X(cuStreamWaitEvent, NULL, GM_CUDA_REQUIRED)                                \
    X(cuStreamAddCallback, NULL, GM_CUDA_REQUIRED)                              \
    X(cuStreamIsCapturing, NULL, GM_CUDA_OPTIONAL)                              \
    X(cuEventCreate, NULL, GM_CUDA_REQUIRED)                                    \
    X(cuEventDestroy, NULL, GM_CUDA_REQUIRED)                                   \
    X(cuEventRecord, NULL, GM_CUDA_REQUIRED)                                    \
    X(cuEventQuery, NULL, GM_CUDA_REQUIRED)                                     \
    X(cuEventSynchronize, NULL, GM_CUDA_REQUIRED)                               \
    X(cuEventElapsedTime, "cuEventElapsedTime", GM_CUDA_REQUIRED)               \
    /* modules and launches */                                                  \
    X(cuModuleLoadDataEx, NULL, GM_CUDA_REQUIRED)                               \
    X(cuModuleUnload, NULL, GM_CUDA_REQUIRED)                                   \
    X(cuModuleGetFunction, NULL, GM_CUDA_REQUIRED)                              \
    X(cuModuleGetGlobal, NULL, GM_CUDA_REQUIRED)                                \
    X(cuFuncGetAttribute, NULL, GM_CUDA_REQUIRED)                               \
    X(cuFuncSetAttribute, NULL, GM_CUDA_REQUIRED)                               \
    X(cuLaunchKernel, NULL, GM_CUDA_REQUIRED)                                   \
    X(cuFuncGetParamInfo, NULL, GM_CUDA_OPTIONAL)

/* Stringify after macro expansion: GM_CUDA_SYMBOL(cuMemAlloc) is "cuMemAlloc_v2". */
#define GM__CUDA_STR(x)     #x
#define GM_CUDA_SYMBOL(api) GM__CUDA_STR(api)

/* The function-pointer table: one field per entry point, named and typed by cuda.h. */
typedef struct gm_cuda_driver {
#define GM__CUDA_FIELD(api, fallback, need) __typeof__(api) *api;
    GM_CUDA_ENTRY_POINTS(GM__CUDA_FIELD)
#undef GM__CUDA_FIELD
    void *library;      /* the dlopen handle; NULL when the table was not loaded */
    char path[256];     /* what was opened, for messages */
    int driver_version; /* cuDriverGetVersion, e.g. 12040; 0 before cuInit */
} gm_cuda_driver;

/*
 * Open the driver library and resolve every entry point into *drv.
 * @return GM_OK; GM_ERR_NO_DRIVER naming the library and dlerror() when it
 *         cannot be opened, or the first missing REQUIRED symbol. On failure
 *         nothing stays open and *drv is zeroed.
 */
gm_status gm__cuda_driver_load(gm_cuda_driver *drv);

/* Close what gm__cuda_driver_load opened and zero the table. Accepts a zeroed table. */
void gm__cuda_driver_unload(gm_cuda_driver *drv);

/* Number of entry points in the list, and the dlsym name of entry i (tests, diagnostics). */
size_t gm__cuda_driver_symbol_count(void);
const char *gm__cuda_driver_symbol_name(size_t i);

/* The enumerator name of a CUresult ("CUDA_ERROR_OUT_OF_MEMORY"); never NULL. */
const char *gm__cuda_result_name(int result);

/* The gm_status a CUresult stands for (CUDA_ERROR_OUT_OF_MEMORY -> GM_ERR_OUT_OF_DEVICE_MEMORY). */
gm_status gm__cuda_translate(int result);

/*
 * Turn one driver call's CUresult into a gm_status. On failure, unless
 * `result` equals `quiet` or is CUDA_ERROR_NOT_READY (a state, not an
 * error), record the detail with gm__error(): the call, the driver's error
 * name and string (the library's own name table when the driver cannot
 * name it, e.g. the stub library), the numeric code, file and line.
 */
gm_status gm__cuda_check(const gm_cuda_driver *drv, CUresult result, CUresult quiet,
                         const char *call, const char *file, int line);

/*
 * The driver-call wrapper: an expression yielding a gm_status, so a call
 * site reads
 *     status = GM_CUDA_CALL(drv, cuMemAlloc, &ptr, bytes);
 *     if (status != GM_OK)
 *         goto out;
 * `api` is the API name; the field called is the versioned one cuda.h maps
 * it to. GM_CUDA_CALL_QUIET translates `quiet` without recording an error
 * (e.g. CUDA_ERROR_INVALID_VALUE from cuPointerGetAttribute on pageable
 * memory, which only means "not CUDA memory").
 */
#define GM_CUDA_CALL(drv, api, ...) \
    gm__cuda_check((drv), (drv)->api(__VA_ARGS__), CUDA_SUCCESS, #api, __FILE__, __LINE__)
#define GM_CUDA_CALL_QUIET(drv, quiet, api, ...) \
    gm__cuda_check((drv), (drv)->api(__VA_ARGS__), (quiet), #api, __FILE__, __LINE__)

/*
 * Re-record the calling thread's last error with a new status and a
 * printf-style prefix, keeping the driver detail: "prefix: <previous
 * detail>". Returns `status`.
 */
gm_status gm__cuda_annotate(gm_status status, const char *fmt, ...) GM_PRINTF_LIKE(2, 3);

#endif /* GPUMEM_SRC_CUDA_CUDA_DRIVER_H */
