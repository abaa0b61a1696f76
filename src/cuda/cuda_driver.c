/*
 * Loading libcuda.so.1 at run time and translating its results: the dlsym
 * loop generated from GM_CUDA_ENTRY_POINTS, the CUresult name table and the
 * CUresult -> gm_status mapping behind GM_CUDA_CALL.
 */
#define _GNU_SOURCE /* secure_getenv */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"

/* One row of the dlsym loop: where the pointer goes and what to look up. */
typedef struct driver_symbol {
    const char *name;     /* versioned symbol, from cuda.h's mapping */
    const char *fallback; /* same-signature older symbol, or NULL */
    int need;             /* GM_CUDA_REQUIRED or GM_CUDA_OPTIONAL */
    size_t offset;        /* of the field in gm_cuda_driver */
} driver_symbol;

static const driver_symbol driver_symbols[] = {
#define GM__CUDA_SYMBOL_ROW(api, fallback, need) \
    {GM_CUDA_SYMBOL(api), (fallback), (need), offsetof(gm_cuda_driver, api)},
    GM_CUDA_ENTRY_POINTS(GM__CUDA_SYMBOL_ROW)
#undef GM__CUDA_SYMBOL_ROW
};

#define DRIVER_SYMBOL_COUNT (sizeof(driver_symbols) / sizeof(driver_symbols[0]))

/* dlsym's void * is stored into function-pointer fields by copying its bytes (POSIX). */
_Static_assert(sizeof(void *) == sizeof(void (*)(void)),
               "function and object pointers must have the same size for dlsym");

/* CUresult codes and their enumerator names (numeric, so older headers compile too). */
#define GM_CUDA_RESULT_NAMES(X)                  \
    X(0, SUCCESS)                                \
    X(1, ERROR_INVALID_VALUE)                    \
    X(2, ERROR_OUT_OF_MEMORY)                    \
    X(3, ERROR_NOT_INITIALIZED)                  \
    X(4, ERROR_DEINITIALIZED)                    \
    X(5, ERROR_PROFILER_DISABLED)                \
    X(6, ERROR_PROFILER_NOT_INITIALIZED)         \
    X(7, ERROR_PROFILER_ALREADY_STARTED)         \
    X(8, ERROR_PROFILER_ALREADY_STOPPED)         \
    X(34, ERROR_STUB_LIBRARY)                    \
    X(35, ERROR_INSUFFICIENT_DRIVER)             \
    X(36, ERROR_CALL_REQUIRES_NEWER_DRIVER)      \
    X(46, ERROR_DEVICE_UNAVAILABLE)              \
    X(100, ERROR_NO_DEVICE)                      \
    X(101, ERROR_INVALID_DEVICE)                 \
    X(102, ERROR_DEVICE_NOT_LICENSED)            \
    X(200, ERROR_INVALID_IMAGE)                  \
    X(201, ERROR_INVALID_CONTEXT)                \
    X(202, ERROR_CONTEXT_ALREADY_CURRENT)        \
    X(205, ERROR_MAP_FAILED)                     \
    X(206, ERROR_UNMAP_FAILED)                   \
    X(207, ERROR_ARRAY_IS_MAPPED)                \
    X(208, ERROR_ALREADY_MAPPED)                 \
    X(209, ERROR_NO_BINARY_FOR_GPU)              \
    X(210, ERROR_ALREADY_ACQUIRED)               \
    X(211, ERROR_NOT_MAPPED)                     \
    X(212, ERROR_NOT_MAPPED_AS_ARRAY)            \
    X(213, ERROR_NOT_MAPPED_AS_POINTER)          \
    X(214, ERROR_ECC_UNCORRECTABLE)              \
    X(215, ERROR_UNSUPPORTED_LIMIT)              \
    X(216, ERROR_CONTEXT_ALREADY_IN_USE)         \
    X(217, ERROR_PEER_ACCESS_UNSUPPORTED)        \
    X(218, ERROR_INVALID_PTX)                    \
    X(219, ERROR_INVALID_GRAPHICS_CONTEXT)       \
    X(220, ERROR_NVLINK_UNCORRECTABLE)           \
    X(221, ERROR_JIT_COMPILER_NOT_FOUND)         \
    X(222, ERROR_UNSUPPORTED_PTX_VERSION)        \
    X(223, ERROR_JIT_COMPILATION_DISABLED)       \
    X(224, ERROR_UNSUPPORTED_EXEC_AFFINITY)      \
    X(225, ERROR_UNSUPPORTED_DEVSIDE_SYNC)       \
    X(226, ERROR_CONTAINED)                      \
    X(300, ERROR_INVALID_SOURCE)                 \
    X(301, ERROR_FILE_NOT_FOUND)                 \
    X(302, ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND) \
    X(303, ERROR_SHARED_OBJECT_INIT_FAILED)      \
    X(304, ERROR_OPERATING_SYSTEM)               \
    X(400, ERROR_INVALID_HANDLE)                 \
    X(401, ERROR_ILLEGAL_STATE)                  \
    X(402, ERROR_LOSSY_QUERY)                    \
    X(500, ERROR_NOT_FOUND)                      \
    X(600, ERROR_NOT_READY)                      \
    X(700, ERROR_ILLEGAL_ADDRESS)                \
    X(701, ERROR_LAUNCH_OUT_OF_RESOURCES)        \
    X(702, ERROR_LAUNCH_TIMEOUT)                 \
    X(703, ERROR_LAUNCH_INCOMPATIBLE_TEXTURING)  \
    X(704, ERROR_PEER_ACCESS_ALREADY_ENABLED)    \
    X(705, ERROR_PEER_ACCESS_NOT_ENABLED)        \
    X(708, ERROR_PRIMARY_CONTEXT_ACTIVE)         \
    X(709, ERROR_CONTEXT_IS_DESTROYED)           \
    X(710, ERROR_ASSERT)                         \
    X(711, ERROR_TOO_MANY_PEERS)                 \
    X(712, ERROR_HOST_MEMORY_ALREADY_REGISTERED) \
    X(713, ERROR_HOST_MEMORY_NOT_REGISTERED)     \
    X(714, ERROR_HARDWARE_STACK_ERROR)           \
    X(715, ERROR_ILLEGAL_INSTRUCTION)            \
    X(716, ERROR_MISALIGNED_ADDRESS)             \
    X(717, ERROR_INVALID_ADDRESS_SPACE)          \
    X(718, ERROR_INVALID_PC)                     \
    X(719, ERROR_LAUNCH_FAILED)                  \
    X(720, ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)   \
    X(721, ERROR_TENSOR_MEMORY_LEAK)             \
    X(800, ERROR_NOT_PERMITTED)                  \
    X(801, ERROR_NOT_SUPPORTED)                  \
    X(802, ERROR_SYSTEM_NOT_READY)               \
    X(803, ERROR_SYSTEM_DRIVER_MISMATCH)         \
    X(804, ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE) \
    X(805, ERROR_MPS_CONNECTION_FAILED)          \
    X(806, ERROR_MPS_RPC_FAILURE)                \
    X(807, ERROR_MPS_SERVER_NOT_READY)           \
    X(808, ERROR_MPS_MAX_CLIENTS_REACHED)        \
    X(809, ERROR_MPS_MAX_CONNECTIONS_REACHED)    \
    X(810, ERROR_MPS_CLIENT_TERMINATED)          \
    X(811, ERROR_CDP_NOT_SUPPORTED)              \
    X(812, ERROR_CDP_VERSION_MISMATCH)           \
    X(900, ERROR_STREAM_CAPTURE_UNSUPPORTED)     \
    X(901, ERROR_STREAM_CAPTURE_INVALIDATED)     \
    X(902, ERROR_STREAM_CAPTURE_MERGE)           \
    X(903, ERROR_STREAM_CAPTURE_UNMATCHED)       \
    X(904, ERROR_STREAM_CAPTURE_UNJOINED)        \
    X(905, ERROR_STREAM_CAPTURE_ISOLATION)       \
    X(906, ERROR_STREAM_CAPTURE_IMPLICIT)        \
    X(907, ERROR_CAPTURED_EVENT)                 \
    X(908, ERROR_STREAM_CAPTURE_WRONG_THREAD)    \
    X(909, ERROR_TIMEOUT)                        \
    X(910, ERROR_GRAPH_EXEC_UPDATE_FAILURE)      \
    X(911, ERROR_EXTERNAL_DEVICE)                \
    X(912, ERROR_INVALID_CLUSTER_SIZE)           \
    X(913, ERROR_FUNCTION_NOT_LOADED)            \
    X(914, ERROR_INVALID_RESOURCE_TYPE)          \
    X(915, ERROR_INVALID_RESOURCE_CONFIGURATION) \
    X(916, ERROR_KEY_ROTATION)                   \
    X(999, ERROR_UNKNOWN)

/*
 * Which gm_status a CUresult stands for; anything else is GM_ERR_DRIVER.
 * GM_ERR_CONTEXT_LOST marks the errors cuda.h calls sticky ("leaves the
 * process in an inconsistent state and any further CUDA work will return the
 * same error", or that the process "must be terminated and relaunched"; for
 * ASSERT, the context "cannot be used anymore"). tests/cuda checks this list
 * against the doc comments of the cuda.h it builds with.
 */
#define GM_CUDA_RESULT_STATUS(X)                                                         \
    X(0, GM_OK)                                                                          \
    X(1, GM_ERR_INVALID_ARG)          /* INVALID_VALUE */                                \
    X(2, GM_ERR_OUT_OF_DEVICE_MEMORY) /* OUT_OF_MEMORY: the queue flushes and retries */ \
    X(3, GM_ERR_STATE)                /* NOT_INITIALIZED */                              \
    X(4, GM_ERR_STATE)                /* DEINITIALIZED */                                \
    X(34, GM_ERR_NO_DEVICE)           /* STUB_LIBRARY */                                 \
    X(35, GM_ERR_NO_DRIVER)           /* INSUFFICIENT_DRIVER */                          \
    X(36, GM_ERR_NO_DRIVER)           /* CALL_REQUIRES_NEWER_DRIVER */                   \
    X(46, GM_ERR_NO_DEVICE)           /* DEVICE_UNAVAILABLE */                           \
    X(100, GM_ERR_NO_DEVICE)          /* NO_DEVICE */                                    \
    X(101, GM_ERR_NO_DEVICE)          /* INVALID_DEVICE */                               \
    X(200, GM_ERR_INVALID_ARG)        /* INVALID_IMAGE */                                \
    X(201, GM_ERR_INVALID_HANDLE)     /* INVALID_CONTEXT */                              \
    X(209, GM_ERR_UNSUPPORTED)        /* NO_BINARY_FOR_GPU */                            \
    X(218, GM_ERR_INVALID_ARG)        /* INVALID_PTX */                                  \
    X(222, GM_ERR_UNSUPPORTED)        /* UNSUPPORTED_PTX_VERSION */                      \
    X(226, GM_ERR_CONTEXT_LOST)       /* CONTAINED */                                    \
    X(304, GM_ERR_PERMISSION)         /* OPERATING_SYSTEM */                             \
    X(400, GM_ERR_INVALID_HANDLE)     /* INVALID_HANDLE */                               \
    X(401, GM_ERR_STATE)              /* ILLEGAL_STATE */                                \
    X(500, GM_ERR_NOT_FOUND)          /* NOT_FOUND */                                    \
    X(600, GM_ERR_NOT_READY)          /* NOT_READY */                                    \
    X(700, GM_ERR_CONTEXT_LOST)       /* ILLEGAL_ADDRESS (a kernel fault) */             \
    X(701, GM_ERR_LAUNCH)             /* LAUNCH_OUT_OF_RESOURCES */                      \
    X(702, GM_ERR_CONTEXT_LOST)       /* LAUNCH_TIMEOUT */                               \
    X(709, GM_ERR_INVALID_HANDLE)     /* CONTEXT_IS_DESTROYED */                         \
    X(710, GM_ERR_CONTEXT_LOST)       /* ASSERT */                                       \
    X(712, GM_ERR_STATE)              /* HOST_MEMORY_ALREADY_REGISTERED */               \
    X(713, GM_ERR_INVALID_ARG)        /* HOST_MEMORY_NOT_REGISTERED */                   \
    X(714, GM_ERR_CONTEXT_LOST)       /* HARDWARE_STACK_ERROR */                         \
    X(715, GM_ERR_CONTEXT_LOST)       /* ILLEGAL_INSTRUCTION */                          \
    X(716, GM_ERR_CONTEXT_LOST)       /* MISALIGNED_ADDRESS */                           \
    X(717, GM_ERR_CONTEXT_LOST)       /* INVALID_ADDRESS_SPACE */                        \
    X(718, GM_ERR_CONTEXT_LOST)       /* INVALID_PC */                                   \
    X(719, GM_ERR_CONTEXT_LOST)       /* LAUNCH_FAILED */                                \
    X(720, GM_ERR_LAUNCH)             /* COOPERATIVE_LAUNCH_TOO_LARGE */                 \
    X(721, GM_ERR_CONTEXT_LOST)       /* TENSOR_MEMORY_LEAK */                           \
    X(800, GM_ERR_PERMISSION)         /* NOT_PERMITTED */                                \
    X(801, GM_ERR_UNSUPPORTED)        /* NOT_SUPPORTED */                                \
    X(803, GM_ERR_NO_DRIVER)          /* SYSTEM_DRIVER_MISMATCH */                       \
    X(810, GM_ERR_CONTEXT_LOST)       /* MPS_CLIENT_TERMINATED */                        \
    X(911, GM_ERR_CONTEXT_LOST)       /* EXTERNAL_DEVICE */

size_t gm__cuda_driver_symbol_count(void)
{
    return DRIVER_SYMBOL_COUNT;
}

const char *gm__cuda_driver_symbol_name(size_t i)
{
    return i < DRIVER_SYMBOL_COUNT ? driver_symbols[i].name : NULL;
}

/* Look one entry up (its fallback too) and store it into its field; NULL when absent. */
static void *resolve_symbol(void *library, const driver_symbol *sym, gm_cuda_driver *drv)
{
    void *address = dlsym(library, sym->name);

    if (address == NULL && sym->fallback != NULL)
        address = dlsym(library, sym->fallback);
    memcpy((char *)drv + sym->offset, &address, sizeof(address));
    return address;
}

/* The dlsym loop: every entry point of the list, stopping at the first missing required one. */
static gm_status resolve_all(gm_cuda_driver *drv)
{
    size_t i = 0;

    for (i = 0; i < DRIVER_SYMBOL_COUNT; i++) {
        const driver_symbol *sym = &driver_symbols[i];

        if (resolve_symbol(drv->library, sym, drv) == NULL && sym->need == GM_CUDA_REQUIRED)
            return gm__error(GM_ERR_NO_DRIVER,
                             "cuda: %s has no entry point %s%s%s (driver too old or not a CUDA "
                             "driver)",
                             drv->path, sym->name, sym->fallback != NULL ? " nor " : "",
                             sym->fallback != NULL ? sym->fallback : "");
    }
    return GM_OK;
}

gm_status gm__cuda_driver_load(gm_cuda_driver *drv)
{
    const char *path = secure_getenv(GM_CUDA_DRIVER_PATH_ENV); /* ignored when setuid */
    gm_status status = GM_OK;

    memset(drv, 0, sizeof(*drv));
    if (path == NULL || path[0] == '\0')
        path = GM_CUDA_DRIVER_SONAME;
    snprintf(drv->path, sizeof(drv->path), "%s", path);
    /* NODELETE: the driver's own threads may outlive the last context. */
    drv->library = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (drv->library == NULL) {
        const char *why = dlerror();

        status = gm__error(GM_ERR_NO_DRIVER, "cuda: cannot load the CUDA driver %s: %s", path,
                           why != NULL ? why : "dlopen failed");
        goto fail;
    }
    status = resolve_all(drv);
    if (status != GM_OK)
        goto close_library;
    return GM_OK;

close_library:
    dlclose(drv->library);
fail:
    memset(drv, 0, sizeof(*drv));
    return status;
}

void gm__cuda_driver_unload(gm_cuda_driver *drv)
{
    if (drv == NULL || drv->library == NULL)
        return;
    dlclose(drv->library);
    memset(drv, 0, sizeof(*drv));
}

const char *gm__cuda_result_name(int result)
{
    switch (result) {
#define GM__CUDA_NAME_CASE(code, name) \
    case code:                         \
        return "CUDA_" #name;
        GM_CUDA_RESULT_NAMES(GM__CUDA_NAME_CASE)
#undef GM__CUDA_NAME_CASE
    default:
        return "CUDA_ERROR_(unknown)";
    }
}

gm_status gm__cuda_translate(int result)
{
    switch (result) {
#define GM__CUDA_STATUS_CASE(code, status) \
    case code:                             \
        return status;
        GM_CUDA_RESULT_STATUS(GM__CUDA_STATUS_CASE)
#undef GM__CUDA_STATUS_CASE
    default:
        return GM_ERR_DRIVER;
    }
}

/* The driver's description of a result, or NULL when it cannot give one (the stub library). */
static const char *driver_string(const gm_cuda_driver *drv, CUresult result)
{
    const char *text = NULL;

    if (drv == NULL || drv->cuGetErrorString == NULL)
        return NULL;
    if (drv->cuGetErrorString(result, &text) != CUDA_SUCCESS)
        return NULL;
    return text;
}

/* The driver's name for a result, else the library's own table. */
static const char *driver_name(const gm_cuda_driver *drv, CUresult result)
{
    const char *name = NULL;

    if (drv != NULL && drv->cuGetErrorName != NULL &&
        drv->cuGetErrorName(result, &name) == CUDA_SUCCESS && name != NULL)
        return name;
    return gm__cuda_result_name((int)result);
}

/* __FILE__ without the build directory's leading "../". */
static const char *short_file(const char *file)
{
    while (strncmp(file, "../", 3) == 0)
        file += 3;
    return file;
}

gm_status gm__cuda_check(const gm_cuda_driver *drv, CUresult result, CUresult quiet,
                         const char *call, const char *file, int line)
{
    gm_status status = GM_OK;
    const char *text = NULL;

    if (result == CUDA_SUCCESS)
        return GM_OK;
    status = gm__cuda_translate((int)result);
    if (result == quiet)
        return status;
    text = driver_string(drv, result);
    return gm__error(status, "%s failed: %s (%s; CUresult %d) at %s:%d%s", call,
                     driver_name(drv, result), text != NULL ? text : gm_status_string(status),
                     (int)result, short_file(file), line,
                     status == GM_ERR_CONTEXT_LOST
                         ? "; the error is sticky: the device's CUDA context is "
                           "unusable from now on, every later call returns it, and the "
                           "process must be restarted to use the GPU again"
                         : "");
}

gm_status gm__cuda_annotate(gm_status status, const char *fmt, ...)
{
    char prefix[256];
    char detail[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    snprintf(detail, sizeof(detail), "%s", gm_last_error_message());
    return gm__error(status, "%s: %s", prefix, detail);
}
