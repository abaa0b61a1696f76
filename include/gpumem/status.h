/**
 * @file gpumem/status.h
 * @brief The one status list, the error detail, the log hook and the host
 *        allocator hook.
 *
 * Every gpumem call that can fail returns a gm_status. GM_OK is 0 and every
 * error is negative; the numeric values are part of the ABI and never change.
 * When a call fails it also stores a human-readable detail for the calling
 * thread (which call, which argument, which values, and for driver errors the
 * driver's own code name); gm_last_error_message() returns it.
 *
 * The library never prints, aborts or exits. Its only output is the log hook.
 */
#ifndef GPUMEM_STATUS_H
#define GPUMEM_STATUS_H

#include <stddef.h>

#include "export.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * X-macro list of every status: X(NAME, value, description).
 * Generates enum gm_status, gm_status_name() and gm_status_string().
 */
#define GM_STATUS_LIST(X)                                                                  \
    X(OK, 0, "success")                                                                    \
    X(ERR_INVALID_ARG, -1, "invalid argument")                                             \
    X(ERR_NULL_POINTER, -2, "a required pointer argument is NULL")                         \
    X(ERR_OUT_OF_RANGE, -3, "index or axis out of range")                                  \
    X(ERR_OVERFLOW, -4, "size or byte count overflows")                                    \
    X(ERR_TOO_MANY_DIMS, -5, "more dimensions than GM_MAX_DIMS")                           \
    X(ERR_SHAPE_MISMATCH, -6, "shapes or sizes do not match")                              \
    X(ERR_NEEDS_COPY, -7, "the operation would require a copy; no view is possible")       \
    X(ERR_DTYPE, -8, "unknown or incompatible dtype")                                      \
    X(ERR_NO_MEMORY, -9, "out of host memory")                                             \
    X(ERR_OUT_OF_DEVICE_MEMORY, -10, "out of device memory")                               \
    X(ERR_UNSUPPORTED, -11, "operation not supported by this backend")                     \
    X(ERR_NO_DRIVER, -12, "GPU driver library not found")                                  \
    X(ERR_NO_DEVICE, -13, "no usable GPU device")                                          \
    X(ERR_DRIVER, -14, "the GPU driver reported an error")                                 \
    X(ERR_NOT_READY, -15, "work is still pending")                                         \
    X(ERR_INVALID_HANDLE, -16, "invalid, released or foreign handle")                      \
    X(ERR_WRONG_CONTEXT, -17, "object belongs to another context")                         \
    X(ERR_NOT_FOUND, -18, "not found")                                                     \
    X(ERR_VERSION_MISMATCH, -19, "interface version mismatch")                             \
    X(ERR_BARRIER_DIVERGENCE, -20, "a barrier was not reached by every thread of a block") \
    X(ERR_LAUNCH, -21, "kernel launch failed")                                             \
    X(ERR_STATE, -22, "call not valid in the current state")                               \
    X(ERR_PERMISSION, -23, "permission denied or resource limit reached")                  \
    X(ERR_INTERNAL, -24, "internal error")                                                 \
    X(ERR_CONTEXT_LOST, -25, "an unrecoverable device error ended the context")

/** Status returned by every fallible gpumem call. */
typedef enum gm_status {
#define GM__STATUS_ENUM(name, value, text) GM_##name = (value),
    GM_STATUS_LIST(GM__STATUS_ENUM)
#undef GM__STATUS_ENUM
} gm_status;

/**
 * @brief Short description of a status ("out of device memory").
 * @param status any value; unknown values give "unknown status".
 * @return a static string; never NULL; never freed.
 */
GM_API const char *gm_status_string(gm_status status);

/**
 * @brief The status's identifier without prefix ("ERR_NEEDS_COPY", "OK").
 * @param status any value; unknown values give "UNKNOWN".
 * @return a static string; never NULL; never freed.
 */
GM_API const char *gm_status_name(gm_status status);

/**
 * @brief Detail of the last error raised on the calling thread.
 *
 * Names the call, the argument and the offending values, e.g.
 * "gm_ndview_reshape: cannot reshape size 6 into shape (4,-1)".
 * Successful calls neither clear nor change it: a call that returns GM_OK
 * after a way it tried first failed (an allocation retried after the
 * out-of-memory flush, a copy the backend's strided path refused, a GPU
 * backend GM_BACKEND=auto could not start) leaves it as it was, and failures
 * a successful call only logs (a stream's failed work at its destroy) are not
 * recorded either. (Should more than eight internal failures come between,
 * which takes an allocation's out-of-memory flush failing repeatedly, it is
 * cleared rather than left stale.) Void calls that fail (gm_array_release's free, a
 * gm_context_destroy refused) record their error here. Driver errors carry
 * the driver's code name.
 * @return thread-local storage owned by gpumem, valid until the next failing
 *         call on this thread; "" when nothing failed yet.
 */
GM_API const char *gm_last_error_message(void);

/** @brief Status of the last error raised on the calling thread (GM_OK if none). */
GM_API gm_status gm_last_error(void);

/** @brief Clear the calling thread's error status and message. */
GM_API void gm_clear_error(void);

/** Log levels, most severe first. */
typedef enum gm_log_level {
    GM_LOG_OFF = 0,
    GM_LOG_ERROR = 1,
    GM_LOG_WARN = 2,
    GM_LOG_INFO = 3,
    GM_LOG_DEBUG = 4,
    GM_LOG_TRACE = 5
} gm_log_level;

/**
 * @brief Log callback.
 * @param level   severity of the message.
 * @param message NUL-terminated text without trailing newline; valid only
 *                during the call.
 * @param user    the pointer given to gm_set_log_hook().
 */
typedef void (*gm_log_fn)(gm_log_level level, const char *message, void *user);

/**
 * @brief Install the process-wide log hook (NULL removes it).
 *
 * Without a hook gpumem is silent. Messages above the threshold are dropped
 * before formatting. The threshold starts from the GM_LOG_LEVEL environment
 * variable (off, error, warn, info, debug, trace or 0-5; default warn), read
 * the first time anything is logged, and can be changed by gm_set_log_level().
 * Thread-safe; the hook may be called from any thread, including gpumem's
 * worker threads, sometimes with gpumem's internal locks held, so it must
 * not call gpumem (what gpumem would log on that thread while the hook runs
 * is dropped, so a hook that does cannot recurse, but it may deadlock).
 * gm_set_log_hook() returns once no call of the hook it replaced is running
 * on another thread, so the old hook's user data may be freed then; do not
 * call it while holding a lock that the running hook may wait for.
 */
GM_API void gm_set_log_hook(gm_log_fn hook, void *user);

/** @brief Set the log threshold (overrides GM_LOG_LEVEL). */
GM_API void gm_set_log_level(gm_log_level level);

/** @brief Current log threshold. */
GM_API gm_log_level gm_get_log_level(void);

/**
 * @brief A ready-made hook that writes "gpumem[level]: message" to stderr.
 *
 * gpumem never installs it by itself; an application opts in with
 * gm_set_log_hook(gm_log_stderr, NULL).
 */
GM_API void gm_log_stderr(gm_log_level level, const char *message, void *user);

/**
 * Host allocator used for all of gpumem's own bookkeeping memory (not for
 * device, pinned or mapped allocations). All four functions are required and
 * follow the C library's contracts.
 */
typedef struct gm_host_allocator {
    void *(*malloc_fn)(size_t size);
    void *(*calloc_fn)(size_t count, size_t size);
    void *(*realloc_fn)(void *ptr, size_t size);
    void (*free_fn)(void *ptr);
} gm_host_allocator;

/**
 * @brief Replace the bookkeeping allocator (NULL restores the C library's).
 *
 * Call it before any other gpumem call, or when no gpumem object is alive:
 * memory must be freed by the allocator that made it.
 * @return GM_OK, or GM_ERR_INVALID_ARG if a function pointer is NULL.
 */
GM_API gm_status gm_set_host_allocator(const gm_host_allocator *allocator);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_STATUS_H */
