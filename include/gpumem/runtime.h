/**
 * @file gpumem/runtime.h
 * @brief Contexts, device arrays, transfers, host memory, streams, events and
 *        the deallocation queue (Numba's numba.cuda / numba.roc memory API).
 *
 * Ownership in one paragraph: every object is created by a gm_*_create-like
 * call that returns it through an `_p` output and released by the matching
 * destroy/release call, which takes `T **`, accepts NULL and sets it to NULL.
 * gm_array is reference counted (gm_array_retain / gm_array_release); views
 * made from an array hold a reference to the same buffer. Releasing the last
 * reference does not free memory inline: the buffer goes to the context's
 * deallocation queue, which frees it when the queue's limits are exceeded,
 * when an allocation runs out of memory, on gm_deallocations_flush(), or when
 * the context is destroyed (Numba's semantics). Two exceptions, as in Numba:
 * an external memory manager frees its memory itself, at once unless it asks
 * for the queue (gpumem/memory_manager.h), and foreign memory
 * (gm_array_from_foreign, DLPack imports) is handed back to its owner at
 * once. Memory is never freed under work that may still use it: before the
 * queue frees memory, a host copy, foreign memory or a module, it waits for
 * the work already queued on every stream of the context (as cuMemFree
 * synchronizes; HSA's pool free does not, so the queue does it on every
 * backend, once per flush), so an array may be released right after
 * queueing an asynchronous copy or launch that uses it. Every call is
 * thread-safe.
 */
#ifndef GPUMEM_RUNTIME_H
#define GPUMEM_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "export.h"
#include "ndview.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gm_context gm_context;
typedef struct gm_stream gm_stream;
typedef struct gm_event gm_event;
typedef struct gm_array gm_array;
typedef struct gm_memory_manager gm_memory_manager;

/** Which driver runs a context. */
typedef enum gm_backend_kind {
    GM_BACKEND_DEFAULT = 0, /**< GM_BACKEND env var, else the build's -Dgpu_backend */
    GM_BACKEND_HOST = 1,    /**< the host simulator (always available) */
    GM_BACKEND_CUDA = 2,    /**< NVIDIA, CUDA driver API */
    GM_BACKEND_HSA = 3,     /**< AMD, ROCm HSA runtime */
    GM_BACKEND_AUTO = 4     /**< the build's GPU backend, falling back to host (logged) */
} gm_backend_kind;

/** Context options; fill with gm_context_options_default() then override. */
typedef struct gm_context_options {
    uint32_t struct_size;    /**< sizeof(gm_context_options), set by the defaults function */
    gm_backend_kind backend; /**< see gm_backend_kind */
    int32_t device_id;       /**< device ordinal, default 0 */
    /** Flush the queue when more than this many deallocations are pending
     *  (default: GM_MAX_PENDING_DEALLOCS_COUNT env var, else 10). The check runs
     *  when a release queues an entry on the calling thread; the bookkeeping of
     *  an asynchronous copy is queued by the stream's worker without a flush
     *  (nothing is freed on a driver thread), so the count may stand above the
     *  limit until the next release or flush. A release that finds another
     *  thread flushing does not wait for it (that flush frees its entry too), so
     *  while many threads release at once the pending count can stand well above
     *  the limit (thousands, with 8 threads on the CUDA test double); an
     *  allocation that fails for lack of memory waits for the flush and retries. */
    int64_t max_pending_count;
    /** Flush when pending device bytes exceed this fraction of total device
     *  memory (default: GM_MAX_PENDING_DEALLOCS_RATIO env var, else 0.2). */
    double max_pending_ratio;
    /** Flush when pending pinned/mapped host bytes exceed this many bytes
     *  (default: GM_MAX_PENDING_PINNED_BYTES env var, else 256 MiB). */
    int64_t max_pending_pinned_bytes;
    /** External memory manager (gpumem/memory_manager.h); NULL: the plugin the
     *  GM_MEMORY_MANAGER variable names, else the built-in manager. Not owned:
     *  must outlive the context. */
    const gm_memory_manager *memory_manager;
    void *memory_manager_user; /**< passed to the memory manager's calls */
    gm_log_fn log_hook;        /**< if set, installed as the process log hook */
    void *log_user;            /**< passed to log_hook */
    int32_t host_warp_size;    /**< host simulator only: 32 (CUDA) or 64 (HSA); default 32 */
    uint8_t reserved[60];      /**< zero; room for ABI growth */
} gm_context_options;

/**
 * @brief Fill `options` with the defaults described on each field. Malformed
 *        GM_MAX_PENDING_* values are ignored with a warning in the log;
 *        GM_MAX_PENDING_PINNED_BYTES accepts K/M/G/T suffixes (powers of 1024).
 */
GM_API void gm_context_options_default(gm_context_options *options);

/**
 * @brief Create a context on one device.
 * @param options NULL for the defaults. options->backend GM_BACKEND_DEFAULT
 *        reads the GM_BACKEND variable (host, cuda, hsa, auto), else takes the
 *        build's -Dgpu_backend; any other value ignores GM_BACKEND.
 * @param ctx_p   receives the context; release with gm_context_destroy().
 * @return GM_OK; GM_ERR_NO_DRIVER / GM_ERR_NO_DEVICE when the GPU backend
 *         cannot run, or is not compiled into this build (never a silent
 *         fallback, except GM_BACKEND_AUTO, which logs at info level when it
 *         falls back to the host simulator); GM_ERR_INVALID_ARG (struct_size
 *         not set by gm_context_options_default(), nonzero reserved bytes,
 *         negative bounds, unknown GM_BACKEND value, host_warp_size not 32/64,
 *         a memory manager lacking a mandatory function or with unknown flags,
 *         a plugin entry returning NULL); GM_ERR_VERSION_MISMATCH (a memory
 *         manager of another interface version, or too small a table);
 *         GM_ERR_NOT_FOUND (the GM_MEMORY_MANAGER plugin cannot be loaded or
 *         lacks its entry symbol); the status of the manager's initialize;
 *         GM_ERR_STATE inside a stream callback (where CUDA allows no driver
 *         call; refused on every backend, as gm_context_destroy is there).
 */
GM_API gm_status gm_context_create(const gm_context_options *options, gm_context **ctx_p);

/**
 * @brief Destroy a context: synchronizes its streams, ends the host
 *        registration scopes still open (warn), logs (warn) the arrays still
 *        alive with their count and bytes, destroys the events and streams
 *        still alive, flushes the deallocation queue (ignoring defer_cleanup;
 *        failing deallocations are logged at error level and dropped), and
 *        shuts the backend down. Arrays, streams, events and scopes still
 *        alive are freed with the context: their handles become invalid and
 *        must not be used afterwards, not even released; so are those that
 *        the callbacks it waits for make. DLPack exports still alive after
 *        that wait are detached before the arrays are freed (warn; their
 *        arrays count among the live arrays): their deleters stay safe to
 *        call, but their data pointers dangle (gpumem/dlpack.h). From its
 *        start, stream work queued by a callback still running (a callback
 *        adding another) is refused with GM_ERR_STATE: only work queued
 *        before the call is waited for, and work that such a callback was
 *        queuing as the call began (accepted: GM_OK). When that wait fails
 *        (a failed context), it waits while stream callbacks still run or
 *        start, then goes on (logged): a callback stuck behind work that
 *        never starts, or starting only later, is not called. NULL and
 *        *ctx_p == NULL are accepted. Inside a stream callback it does
 *        nothing but record GM_ERR_STATE (gm_last_error()) and log it at
 *        error level: the context stays alive and *ctx_p unchanged.
 */
GM_API void gm_context_destroy(gm_context **ctx_p);

/** Device properties. */
typedef struct gm_device_info {
    char name[256];
    gm_backend_kind backend;
    int32_t device_id;
    int64_t total_memory; /**< bytes */
    int32_t warp_size;    /**< warp (CUDA) or wavefront (HSA) size */
    int32_t max_threads_per_block;
    int64_t shared_memory_per_block; /**< bytes */
    int32_t multiprocessor_count;    /**< SMs or compute units */
    int32_t max_block_dim[3];
    int32_t max_grid_dim[3];
    /** bytes of static + dynamic shared memory a block may have when the kernel opts in
     *  (CUDA's MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: gm_launch opts in for a launch that needs
     *  it); shared_memory_per_block where the device has no opt-in */
    int64_t shared_memory_per_block_optin;
    uint8_t reserved[56];
} gm_device_info;

/** @brief Properties of the context's device. */
GM_API gm_status gm_context_device_info(gm_context *ctx, gm_device_info *info_p);

/** @brief Free and total device memory in bytes (Numba's get_memory_info), as the context's
 *         memory manager reports them; both outputs required. */
GM_API gm_status gm_context_memory_info(gm_context *ctx, int64_t *free_p, int64_t *total_p);

/**
 * @brief Block until the work queued on every stream of the context before
 *        the call has finished (Numba's cuda.synchronize(), CUDA's
 *        cuCtxSynchronize): created, built-in and wrapped external streams
 *        alike. Errors of that work stay with their streams, where
 *        gm_stream_synchronize() returns them; an error that broke the whole
 *        context is returned here too: GM_ERR_CONTEXT_LOST for a kernel
 *        fault (CUDA's sticky errors such as CUDA_ERROR_ILLEGAL_ADDRESS; HSA:
 *        a queue error or GPU memory fault), after which the context only
 *        returns that error and must be destroyed (CUDA: the process must
 *        be restarted to use that GPU again). The simulator returns none.
 * @return GM_OK; GM_ERR_STATE inside a stream callback (a callback must not
 *         wait for streams); the context's error above.
 */
GM_API gm_status gm_context_synchronize(gm_context *ctx);

/** @brief The backend actually running the context. */
GM_API gm_backend_kind gm_context_backend(const gm_context *ctx);

/** @brief Name of a backend kind ("host", "cuda", "hsa"). */
GM_API const char *gm_backend_name(gm_backend_kind kind);

/* ---------------------------------------------------------------- arrays */

/**
 * @brief Allocate a device array (Numba's device_array). Contents undefined.
 *        A size-0 array allocates nothing.
 * @param order GM_ORDER_C or GM_ORDER_F.
 */
GM_API gm_status gm_device_array(gm_context *ctx, int ndim, const int64_t *shape, gm_dtype dtype,
                                 gm_order order, gm_array **array_p);

/**
 * @brief Allocate a device array with given byte strides; the allocation
 *        covers the strides' extent (strides may be negative).
 */
GM_API gm_status gm_device_array_strided(gm_context *ctx, int ndim, const int64_t *shape,
                                         const int64_t *strides, gm_dtype dtype,
                                         gm_array **array_p);

/**
 * @brief Device array with the shape, dtype and axis order of `like`
 *        (Numba's device_array_like; layout from gm_ndview_like()).
 */
GM_API gm_status gm_device_array_like(gm_context *ctx, const gm_ndview *like, gm_array **array_p);

/**
 * @brief Copy a host array to a new device array (Numba's to_device). The
 *        device array has the layout gm_ndview_like() gives (so a
 *        non-contiguous host array is packed). With a stream the copy is
 *        asynchronous and `host` must stay valid and unchanged until the
 *        stream reaches it (CUDA stages pageable memory at the call, so a
 *        program that writes it earlier works there by chance and not on
 *        the simulator or HSA, which read it when the copy runs).
 *        A device descriptor is accepted too (a device-to-device copy).
 */
GM_API gm_status gm_to_device(gm_context *ctx, const gm_ndview *host, gm_stream *stream,
                              gm_array **array_p);

/** @brief The array's descriptor (valid while the array is alive). */
GM_API const gm_ndview *gm_array_view(const gm_array *array);

/** @brief The array's context. */
GM_API gm_context *gm_array_context(const gm_array *array);

/** @brief Add a reference. */
GM_API gm_array *gm_array_retain(gm_array *array);

/**
 * @brief Drop a reference and set *array_p to NULL. The last reference to a
 *        buffer hands it to the deallocation queue (or, for an external
 *        memory manager without GM_MEMORY_MANAGER_DEFERRED_FREE and for
 *        foreign memory, releases it at once; see the file comment). NULL is
 *        accepted.
 */
GM_API void gm_array_release(gm_array **array_p);

/**
 * @brief A new array sharing `array`'s buffer with descriptor `view`, which
 *        must address bytes inside the buffer (e.g. the result of any
 *        gm_ndview_* operation on gm_array_view(array)).
 * @return GM_OK, GM_ERR_OUT_OF_RANGE if the view leaves the buffer.
 */
GM_API gm_status gm_array_derive(gm_array *array, const gm_ndview *view, gm_array **array_p);

/** @brief gm_ndview_reshape + gm_array_derive (Numba's DeviceNDArray.reshape). */
GM_API gm_status gm_array_reshape(gm_array *array, int ndim, const int64_t *shape, gm_order order,
                                  gm_array **array_p);

/** @brief gm_ndview_ravel + gm_array_derive. */
GM_API gm_status gm_array_ravel(gm_array *array, gm_order order, gm_array **array_p);

/** @brief gm_ndview_getitem + gm_array_derive (a[items...]). */
GM_API gm_status gm_array_getitem(gm_array *array, int nitems, const gm_index_item *items,
                                  gm_array **array_p);

/**
 * @brief gm_ndview_transpose + gm_array_derive: numpy's a.T, a view of any
 *        ndim sharing the buffer (Numba's DeviceNDArray.T copies, 2-D only).
 */
GM_API gm_status gm_array_transpose(gm_array *array, gm_array **array_p);

/**
 * @brief Copy between any two descriptors of equal shape and dtype, host or
 *        device on either side, any layouts (overlap is not allowed).
 *
 * GM_MEMORY_DEVICE and GM_MEMORY_MANAGED descriptors are device addresses;
 * GM_MEMORY_HOST, GM_MEMORY_PINNED and GM_MEMORY_MAPPED ones are host
 * addresses (use gm_array_device_view() for the device side of mapped
 * memory). Strides of any sign are accepted on both sides. The copy is one
 * 1-D/2-D/3-D pitched driver copy when the layouts allow it; otherwise the
 * backend's strided copy when it has one; otherwise a few pitched copies;
 * otherwise it is staged through packed host temporaries that mirror each
 * device side, with the rearrangement done on the host. Host-to-host copies
 * run on the host; without a stream they run at once on the calling thread
 * and, unlike every copy with a device side, do not wait for work queued on
 * streams (synchronize the stream that writes their source first).
 *
 * Overlap is refused: when the byte extents (gm_ndview_extent) of the two
 * descriptors intersect, whatever their memory kinds, the copy fails with
 * GM_ERR_INVALID_ARG before anything moves. Device and host addresses share
 * one virtual address space on every supported backend, so this also refuses
 * a mapped range copied onto its device view (gm_array_device_view) where
 * that view has the host address (the simulator, CUDA with unified
 * addressing); an alias at another address (HSA's agent address of locked
 * memory) is not detected and must not be copied. Copying a view onto itself
 * is overlap too (an error, not a no-op). The
 * test is on extents: interleaved views such as a[0::2] <- a[1::2] are
 * refused as well; views of one buffer with disjoint extents copy.
 * @param stream NULL: synchronous (Numba's default). Otherwise ordered on
 *        the stream (host-side steps included); host memory must stay valid,
 *        and a source unchanged, until it completes (CUDA stages a pageable
 *        source at the call; the simulator and HSA read it when the copy
 *        runs, and may write a pageable destination only then; so on CUDA a
 *        copy staged through a host image on its way to the device waits
 *        for the work queued on the stream and fills the image before it
 *        returns). Temporaries are then released in stream order through
 *        the deallocation queue.
 *
 * Device memory of another context on the same device: CUDA (every context
 * of a device shares its primary context) and HSA (one runtime per process)
 * copy it; the simulator, where each context simulates a device memory of
 * its own, refuses it with GM_ERR_INVALID_ARG ("... is not inside device,
 * managed, pinned or mapped memory of this context"). Copy through the
 * context that owns the memory to stay portable.
 * @return GM_ERR_SHAPE_MISMATCH / GM_ERR_DTYPE naming both sides;
 *         GM_ERR_WRONG_CONTEXT for a stream of another context or a device
 *         descriptor of another device; GM_ERR_INVALID_ARG for overlapping
 *         sides, naming both byte ranges.
 */
GM_API gm_status gm_copy(gm_context *ctx, const gm_ndview *dst, const gm_ndview *src,
                         gm_stream *stream);

/**
 * @brief Numba's copy_to_host(ary): device array into an existing host
 *        descriptor; gm_copy's checks, overlap included, except that shapes
 *        that differ only by axes of extent 1 are accepted, as Numba's are
 *        ((1, 4) and (4,): the squeezed views are copied).
 */
GM_API gm_status gm_array_copy_to_host(gm_array *array, const gm_ndview *host, gm_stream *stream);

/**
 * @brief Numba's copy_to_host() without a destination: a new host array
 *        (GM_MEMORY_HOST, allocated with the bookkeeping allocator, released
 *        like any array: through the deallocation queue, counting toward its
 *        count bound only) with the layout of gm_ndview_like().
 */
GM_API gm_status gm_array_copy_to_host_new(gm_array *array, gm_stream *stream, gm_array **host_p);

/**
 * @brief Numba's copy_to_device(ary): fill a device array from host or
 *        device data; gm_copy's checks, overlap included (a view of the
 *        array's own bytes that intersects it is refused), except that
 *        shapes that differ only by axes of extent 1 are accepted, as in
 *        gm_array_copy_to_host.
 */
GM_API gm_status gm_array_copy_to_device(gm_array *array, const gm_ndview *src, gm_stream *stream);

/**
 * @brief Set every element to *value (itemsize bytes). Contiguous device
 *        arrays of 1, 2, 4 or 8-byte items aligned to their item size (4
 *        bytes for 8-byte items) use the driver's memset; other arrays are
 *        filled through a patterned host image (host-side memory is filled
 *        on the host, in stream order with a stream).
 */
GM_API gm_status gm_array_fill(gm_array *array, const void *value, gm_stream *stream);

/** @brief Set every byte of the array's elements to `byte` (0..255, else GM_ERR_INVALID_ARG). */
GM_API gm_status gm_array_memset(gm_array *array, int byte, gm_stream *stream);

/* ----------------------------------------------------------- host memory */

/** Flags for mapped / pinned host memory. */
typedef enum gm_host_flags {
    GM_HOST_PORTABLE = 1u << 0,      /**< usable from every context */
    GM_HOST_WRITECOMBINED = 1u << 1, /**< write-combined: fast to write, slow to read on host */
    GM_HOST_MAPPED = 1u << 2         /**< mapped into the device address space */
} gm_host_flags;

/** @brief Page-locked host array (Numba's pinned_array). */
GM_API gm_status gm_pinned_array(gm_context *ctx, int ndim, const int64_t *shape, gm_dtype dtype,
                                 gm_order order, gm_array **array_p);

/**
 * @brief Page-locked host array with given byte strides (Numba's
 *        pinned_array(shape, dtype, strides)); the allocation covers the
 *        strides' extent, as gm_device_array_strided()'s does.
 */
GM_API gm_status gm_pinned_array_strided(gm_context *ctx, int ndim, const int64_t *shape,
                                         const int64_t *strides, gm_dtype dtype,
                                         gm_array **array_p);

/** @brief Pinned array with the layout of `like` (pinned_array_like). */
GM_API gm_status gm_pinned_array_like(gm_context *ctx, const gm_ndview *like, gm_array **array_p);

/**
 * @brief Mapped host array (Numba's mapped_array): page-locked host memory
 *        the device can address; gm_array_device_view() gives its device side.
 * @param flags GM_HOST_PORTABLE and/or GM_HOST_WRITECOMBINED.
 */
GM_API gm_status gm_mapped_array(gm_context *ctx, int ndim, const int64_t *shape, gm_dtype dtype,
                                 gm_order order, unsigned flags, gm_array **array_p);

/**
 * @brief Mapped host array with given byte strides (Numba's
 *        mapped_array(shape, dtype, strides, ..., portable, wc)).
 * @param flags GM_HOST_PORTABLE and/or GM_HOST_WRITECOMBINED.
 */
GM_API gm_status gm_mapped_array_strided(gm_context *ctx, int ndim, const int64_t *shape,
                                         const int64_t *strides, gm_dtype dtype, unsigned flags,
                                         gm_array **array_p);

/** @brief Mapped array with the layout of `like` (mapped_array_like). */
GM_API gm_status gm_mapped_array_like(gm_context *ctx, const gm_ndview *like, unsigned flags,
                                      gm_array **array_p);

/**
 * @brief Managed (unified) memory array (Numba's managed_array, CUDA's
 *        cuMemAllocManaged with CU_MEM_ATTACH_GLOBAL): one address that both
 *        the host (through gm_array_view()->data) and kernels use; the host
 *        may touch it only while no work using it is queued (synchronize
 *        first). Its memory kind is GM_MEMORY_MANAGED; copies treat it as
 *        device memory. Charged and released like a device array (through the
 *        deallocation queue; an allocation out of memory flushes and retries
 *        once). The simulator gives host memory; on HSA it is
 *        GM_ERR_UNSUPPORTED.
 */
GM_API gm_status gm_managed_array(gm_context *ctx, int ndim, const int64_t *shape, gm_dtype dtype,
                                  gm_order order, gm_array **array_p);

/** @brief Managed array with given byte strides (Numba's managed_array(shape, dtype, strides)). */
GM_API gm_status gm_managed_array_strided(gm_context *ctx, int ndim, const int64_t *shape,
                                          const int64_t *strides, gm_dtype dtype,
                                          gm_array **array_p);

/** @brief Managed array with the layout of `like` (managed_array with like's shape). */
GM_API gm_status gm_managed_array_like(gm_context *ctx, const gm_ndview *like, gm_array **array_p);

/**
 * @brief Device-side descriptor of mapped host memory: same shape, strides
 *        and offset, the device address, memory GM_MEMORY_DEVICE (so that
 *        gm_copy() and kernels treat it as device memory). A device or
 *        managed array gives its own descriptor; other memory is
 *        GM_ERR_INVALID_ARG.
 */
GM_API gm_status gm_array_device_view(gm_array *array, gm_ndview *view_p);

/** Scoped host registration: gm_pin / gm_map / gm_register return one. */
typedef struct gm_host_scope gm_host_scope;

/**
 * @brief Numba's `with pinned(*arrays)`: page-lock the bytes of each host
 *        descriptor until gm_host_scope_end(). The byte extents of the
 *        arrays are merged, so overlapping or duplicate arrays are registered
 *        once. Pinned and mapped arrays are already page-locked and skipped,
 *        as are empty ones; device memory is GM_ERR_INVALID_ARG. Memory that
 *        another open scope registered cannot be registered again (the host
 *        simulator returns GM_ERR_STATE, as CUDA does). On failure nothing
 *        stays registered.
 */
GM_API gm_status gm_pin(gm_context *ctx, int narrays, const gm_ndview *arrays,
                        gm_host_scope **scope_p);

/**
 * @brief Numba's `with mapped(*arrays)`: page-lock and map; the device views
 *        (memory GM_MEMORY_DEVICE, as gm_array_device_view() gives) are
 *        written to device_views (narrays entries, may be NULL). Pinned but
 *        unmapped arrays are GM_ERR_INVALID_ARG; mapped ones are used as they are.
 */
GM_API gm_status gm_map(gm_context *ctx, int narrays, const gm_ndview *arrays,
                        gm_ndview *device_views, gm_host_scope **scope_p);

/**
 * @brief ROC's `register(*arrays)` (hsa_amd_memory_lock): same as gm_pin;
 *        end the scope with gm_deregister() (or gm_host_scope_end()).
 */
GM_API gm_status gm_register(gm_context *ctx, int narrays, const gm_ndview *arrays,
                             gm_host_scope **scope_p);

/** @brief ROC's deregister(*arrays): same as gm_host_scope_end(). */
GM_API gm_status gm_deregister(gm_host_scope **scope_p);

/**
 * @brief Undo a gm_pin / gm_map / gm_register immediately (not deferred, so
 *        the same memory can be pinned again at once: numba#3508). NULL is
 *        accepted. Every range is unregistered even if one fails; the first
 *        failure is returned and the scope is freed either way. Work still
 *        queued that may use the memory is waited for first (CUDA's
 *        cuMemHostUnregister does; HSA waits for the context's work), so
 *        inside a stream callback it is GM_ERR_STATE and the scope stays
 *        open.
 */
GM_API gm_status gm_host_scope_end(gm_host_scope **scope_p);

/* --------------------------------------------------------------- streams */

/** Stream creation flags. */
typedef enum gm_stream_flags {
    GM_STREAM_DEFAULT = 0,
    GM_STREAM_NON_BLOCKING = 1 /**< does not synchronize with the legacy default stream */
} gm_stream_flags;

/** @brief Create a stream (Numba's cuda.stream()). */
GM_API gm_status gm_stream_create(gm_context *ctx, unsigned flags, gm_stream **stream_p);

/**
 * @brief Destroy a created or wrapped stream after its pending work: the
 *        native handle goes through the deallocation queue (count limit
 *        only). A wrapped external stream is never destroyed; its wrapper
 *        goes through the queue the same way once every callback queued
 *        through it has returned (they are given it, and may queue more
 *        through it except on CUDA: gm_stream_callback). Nothing is called
 *        on the native stream, so its owner may destroy that stream as soon
 *        as gm_stream_destroy returns, even when a callback called it.
 *        Built-in streams are ignored (*stream_p is left as it is);
 *        otherwise *stream_p is set to NULL. NULL is accepted. The flush
 *        that destroys a created stream waits for its queued work (the
 *        simulator; CUDA's cuStreamSynchronize): a callback on it that
 *        waits for something the releasing thread does later would block
 *        that flush for good, so callbacks must not wait for other threads'
 *        gpumem calls. On the host and HSA backends that wait covers the
 *        work queued when it begins and what the stream's own callbacks
 *        queue on it meanwhile, not other threads' later work through a
 *        wrapper (the stream stays for that wrapper); the stream a callback
 *        is given is freed then, so a callback must not hand it to work that
 *        runs later (another stream's callback).
 */
GM_API void gm_stream_destroy(gm_stream **stream_p);

/**
 * @brief The context's default stream (Numba's cuda.default_stream()): CUDA's
 *        stream 0 with the legacy APIs Numba uses, so on every backend it is
 *        the legacy default stream (its work waits for earlier work on the
 *        blocking streams, and theirs for its). Owned by the context. NULL
 *        (error recorded) if ctx is NULL or the backend fails.
 */
GM_API gm_stream *gm_default_stream(gm_context *ctx);

/** @brief The legacy default stream (CU_STREAM_LEGACY); owned by the context. */
GM_API gm_stream *gm_legacy_default_stream(gm_context *ctx);

/**
 * @brief The per-thread default stream (Numba's per_thread_default_stream(),
 *        CUDA's CU_STREAM_PER_THREAD): one handle, owned by the context,
 *        that stands for the calling OS thread's own stream wherever it is
 *        used, so a handle passed to another thread queues that thread's
 *        work on that thread's stream. On the host and HSA backends a
 *        thread's stream is made on its first use; when the thread exits,
 *        the work it queued there still runs, in order (and still orders
 *        the legacy stream), and the stream is freed once that work is done
 *        and no wrapper of its native handle is left (a destroyed wrapper
 *        goes at the deallocation queue's next flush), so a program
 *        that keeps starting threads does not collect streams (the host
 *        backend's worker thread goes with it). A new thread never gets an
 *        old thread's stream. An error left unreported on an exited
 *        thread's stream is logged when the stream goes. CUDA's driver
 *        keeps its per-thread streams itself; the CUDA backend's record
 *        of a thread's failed host work on it goes the same way.
 */
GM_API gm_stream *gm_per_thread_default_stream(gm_context *ctx);

/**
 * @brief Wrap a native stream (CUstream, an HSA stream made by gpumem, or a
 *        host-backend gm stream handle) without taking ownership
 *        (Numba's external_stream).
 *
 * The owner keeps a foreign stream alive while it is wrapped, as in Numba.
 * A stream made by this context (gm_stream_create) that its owner destroys
 * while wrapped stays, on the host and HSA backends, until its last wrapper
 * is destroyed too: the destroy still waits for the work queued so far and
 * takes (logs) its error, and the wrapper keeps working. On every backend
 * the handle of a stream this context destroyed is GM_ERR_INVALID_HANDLE
 * here from its gm_stream_destroy on, although the destroy itself waits in
 * the deallocation queue, until a new stream gets the same handle (drivers
 * and allocators reuse them). On the host and HSA backends any other handle
 * that is not a live stream of this context is GM_ERR_INVALID_HANDLE too. On
 * CUDA a CUstream is a driver handle: once the owner's destroy reaches the
 * driver (at the next flush), a wrapper made before names a destroyed
 * CUstream, which the driver does not define a use of. The CUDA backend
 * cannot check a handle it did not make (the driver has no safe test of an
 * arbitrary value): it must be a CUstream, not, for instance, the native
 * handle of a stream of a host or HSA context, which the driver would be
 * given as one.
 */
GM_API gm_status gm_stream_wrap_external(gm_context *ctx, void *native, gm_stream **stream_p);

/** @brief The backend's native handle of a stream. */
GM_API void *gm_stream_native(gm_stream *stream);

/**
 * @brief Block until all work on the stream is done; returns the first error
 *        of that work. GM_ERR_STATE inside a stream callback (a callback must
 *        not wait for streams: CUDA refuses it, and on HSA it could wait for
 *        itself).
 */
GM_API gm_status gm_stream_synchronize(gm_stream *stream);

/** @brief GM_OK if all work is done, GM_ERR_NOT_READY if not. */
GM_API gm_status gm_stream_query(gm_stream *stream);

/**
 * @brief Call fn(stream, status, user) once the work queued so far is done
 *        (Numba's add_callback). It runs on a driver or worker thread and
 *        must not call anything that waits for streams: the synchronizing calls and the
 *        synchronous operations on device memory (without a stream: a copy,
 *        fill or memset with a device side, to_device, copy_to_host_new, a
 *        launch; gm_module_set_constant; a SmartArray transfer) return
 *        GM_ERR_STATE there; host-to-host copies and fills, which wait for
 *        nothing, are allowed. It may release arrays, streams and
 *        events: their deallocation is only queued there (no flush runs on
 *        that thread; gm_deallocations_flush() returns GM_ERR_STATE). On
 *        the CUDA backend it runs where the driver allows no call
 *        (cuStreamAddCallback's rule), so everything there that needs the
 *        driver returns GM_ERR_STATE without calling it: stream-ordered
 *        work on any stream (a host-to-host copy on a stream, another
 *        callback, an event record), queries, allocation; synchronous
 *        host-to-host copies and fills and releases work everywhere. On
 *        the host and HSA backends stream-ordered work queued there (another
 *        callback, on any stream of its context) runs after the callback
 *        returns; on HSA, where such work may need AQL packets, a full queue
 *        there returns GM_ERR_STATE instead of waiting (the packets ahead
 *        may wait for the callback itself).
 */
typedef void (*gm_stream_callback)(gm_stream *stream, gm_status status, void *user);
GM_API gm_status gm_stream_add_callback(gm_stream *stream, gm_stream_callback fn, void *user);

/**
 * @brief Numba's `with stream.auto_synchronize()`: begin/end a scope. Scopes
 *        nest (a counter per stream; on the per-thread default stream's
 *        handle, per thread, as it stands for each thread's own stream);
 *        ending the outermost one synchronizes
 *        the stream and returns its status; ending an inner one returns GM_OK;
 *        ending with no scope open is GM_ERR_STATE, and so are beginning and
 *        ending inside a stream callback (its end could not synchronize). One thread may have
 * per-thread-handle scopes open in at most 8 contexts at once (the 9th begin is GM_ERR_STATE; a
 * scope left open in a destroyed context no longer counts).
 */
GM_API gm_status gm_stream_auto_synchronize_begin(gm_stream *stream);
GM_API gm_status gm_stream_auto_synchronize_end(gm_stream *stream);

/* ---------------------------------------------------------------- events */

/** @brief Create an event (Numba's cuda.event(timing)). */
GM_API gm_status gm_event_create(gm_context *ctx, bool timing, gm_event **event_p);

/** @brief Destroy an event (through the deallocation queue). NULL is accepted. */
GM_API void gm_event_destroy(gm_event **event_p);

/** @brief Record the event on a stream (NULL: the default stream). */
GM_API gm_status gm_event_record(gm_event *event, gm_stream *stream);

/** @brief Make future work on `stream` (NULL: the default stream) wait for the event. */
GM_API gm_status gm_stream_wait_event(gm_stream *stream, gm_event *event);

/**
 * @brief GM_OK if the event has completed, GM_ERR_NOT_READY if not. An event
 *        never recorded counts as completed (CUDA's cuEventQuery).
 */
GM_API gm_status gm_event_query(gm_event *event);

/**
 * @brief Block until the event completes (at once for an event never
 *        recorded); GM_ERR_STATE inside a stream callback.
 */
GM_API gm_status gm_event_synchronize(gm_event *event);

/**
 * @brief Milliseconds between two completed timing events (Numba's
 *        event_elapsed_time). It does not wait: GM_ERR_NOT_READY while
 *        either has not completed (synchronize the end event first, as
 *        Numba's users do). GM_ERR_INVALID_ARG if either was created
 *        without timing or was never recorded, GM_ERR_WRONG_CONTEXT if they
 *        belong to different contexts. *ms_p is written only on success.
 */
GM_API gm_status gm_event_elapsed_ms(gm_event *start, gm_event *end, float *ms_p);

/* ---------------------------------------------------- deallocation queue */

/** Statistics of a context's deallocation queue. */
typedef struct gm_dealloc_stats {
    int64_t pending_count;        /**< entries queued now */
    int64_t pending_device_bytes; /**< device bytes queued now */
    int64_t pending_pinned_bytes; /**< pinned / mapped host bytes queued now */
    int64_t flushes;              /**< flushes that freed at least one entry so far */
    int64_t peak_pending_bytes;   /**< highest device + pinned bytes pending at once */
    int64_t freed_count;          /**< entries freed so far */
    int64_t defer_depth;          /**< nesting depth of defer_cleanup scopes */
} gm_dealloc_stats;

/**
 * @brief Numba's `with defer_cleanup()`: no deallocation happens inside, not
 *        even the flush-and-retry of an allocation that runs out of memory
 *        (Numba behaves the same way; the allocation then fails). Scopes nest;
 *        the scope belongs to the context, not to the calling thread. A flush
 *        another thread was running when the scope opened stops at its next
 *        check: it may still free up to 32 device entries after
 *        gm_defer_cleanup_begin returns.
 */
GM_API gm_status gm_defer_cleanup_begin(gm_context *ctx);

/**
 * @brief End a defer_cleanup scope; at depth 0 the limits apply again (a
 *        flush runs at once if one is exceeded; its failure is logged).
 * @return GM_OK, GM_ERR_STATE if no scope is open.
 */
GM_API gm_status gm_defer_cleanup_end(gm_context *ctx);

/**
 * @brief Free everything pending now (unless inside defer_cleanup: then
 *        nothing is freed and GM_OK is returned). Stops at the first failing
 *        deallocation, returns its status (the message names the resource and
 *        carries the driver's detail) and keeps the rest (that one included)
 *        queued, with the statistics counting exactly what is still pending.
 *        Automatic flushes (bounds exceeded) log such a failure instead.
 */
GM_API gm_status gm_deallocations_flush(gm_context *ctx);

/** @brief Queue statistics. */
GM_API gm_status gm_deallocations_stats(gm_context *ctx, gm_dealloc_stats *stats_p);

/* -------------------------------------------------------- foreign memory */

/**
 * Called once when the last gm_array viewing foreign memory is released
 * (gm_array_from_foreign). It must not call back into gpumem on that
 * context's deallocation queue (no flush).
 * @param user the release_user given with it.
 */
typedef void (*gm_foreign_release_fn)(void *user);

/**
 * @brief Wrap memory gpumem did not allocate as an array, without copying
 *        (Numba's as_cuda_array of a __cuda_array_interface__ object).
 *
 * The array describes `view` exactly (any memory kind, any strides; a
 * device_id of -1 means the context's device for device, mapped and managed
 * memory). Views derived from it share its buffer, which covers the view's
 * byte extent. When the last of them is released, release(release_user) is
 * called at once on the releasing thread; inside a stream callback the call
 * is queued instead and runs at the next flush of the deallocation queue (the
 * entry counts toward the count bound only). The memory is never freed by
 * gpumem and must stay valid until release is called.
 * @param ctx     the context the memory belongs to.
 * @param view    the foreign descriptor (copied).
 * @param release called when the last reference goes; NULL for none.
 * @param release_user passed to release.
 * @param stream  the producer's stream (the interface's "stream" entry): it is
 *                synchronized before wrapping (Numba's sync=True); NULL: none.
 * @param array_p receives the array; release with gm_array_release().
 * @return GM_OK; GM_ERR_NULL_POINTER (ctx, view, array_p, or data NULL in a
 *         non-empty view); GM_ERR_INVALID_ARG (unknown memory kind, a host or
 *         pinned view with a device id); GM_ERR_WRONG_CONTEXT (another
 *         device, a stream of another context); a validation error of the
 *         view; the stream's error; GM_ERR_NO_MEMORY. On failure the caller
 *         keeps ownership: release is not called.
 */
GM_API gm_status gm_array_from_foreign(gm_context *ctx, const gm_ndview *view,
                                       gm_foreign_release_fn release, void *release_user,
                                       gm_stream *stream, gm_array **array_p);

/**
 * @brief What kind of memory `ptr` points into, as the context sees it:
 *        GM_MEMORY_DEVICE, GM_MEMORY_MANAGED, GM_MEMORY_PINNED,
 *        GM_MEMORY_MAPPED, or GM_MEMORY_HOST for anything else (ordinary host
 *        memory, unknown addresses, NULL).
 *
 * Asks the driver first (cuPointerGetAttribute, hsa_amd_pointer_info, the
 * simulator's registry); where the backend cannot tell, or calls it host
 * memory, the arrays alive in this context answer (including foreign ones).
 * Page-locked memory is named by how it was made, on every backend, when
 * asked through the context that made it (drivers do not tell the two
 * apart): PINNED for gm_pinned_array, gm_pin and gm_register, MAPPED for
 * gm_mapped_array and gm_map, by the host address or by the device address
 * of their device views (not always the same one: CUDA's write-combined and
 * registered memory, HSA's locked memory). Another context gets the driver's answer:
 * PINNED on CUDA, MAPPED on HSA, and on the simulator HOST, unless the
 * memory was made GM_HOST_PORTABLE (then its own kind).
 * @return GM_OK, GM_ERR_NULL_POINTER (ctx, kind_p), a driver error.
 */
GM_API gm_status gm_pointer_kind(gm_context *ctx, const void *ptr, gm_memory_kind *kind_p);

/**
 * @brief Whether `ptr` is device memory (GM_MEMORY_DEVICE or
 *        GM_MEMORY_MANAGED per gm_pointer_kind()); the nearest C
 *        counterpart of Numba's is_cuda_array, which asks an object (for the
 *        CUDA Array Interface) where this asks a pointer. Pinned and mapped
 *        host memory are not device memory (gm_array_device_view() gives
 *        their device side).
 * @return as gm_pointer_kind(); *is_p is written only on success.
 */
GM_API gm_status gm_is_device_pointer(gm_context *ctx, const void *ptr, bool *is_p);

/* ------------------------------------------------------------------- IPC */

/** Bytes of a driver IPC handle (CUipcMemHandle's size; HSA's handle fits). */
#define GM_IPC_HANDLE_BYTES 64

/** An IPC handle of a device array's allocation (Numba's get_ipc_handle). */
typedef struct gm_ipc_handle {
    uint8_t handle[GM_IPC_HANDLE_BYTES]; /**< the memory manager's handle of the allocation */
    int64_t bytes;                       /**< bytes of the whole allocation */
    int64_t offset;                      /**< the array's `data` minus the allocation's start */
    gm_backend_kind backend;             /**< the backend that made it */
    int32_t device_id;                   /**< the device holding the allocation */
} gm_ipc_handle;

/**
 * @brief The IPC handle of the allocation behind a device array, made by the
 *        context's memory manager (get_ipc_handle; the built-in one asks the
 *        driver). The receiving process rebuilds the array from the opened
 *        allocation + offset and the same descriptor.
 * @return GM_OK; GM_ERR_NULL_POINTER; GM_ERR_INVALID_ARG (not device memory,
 *         or size 0: no allocation); GM_ERR_UNSUPPORTED (memory gpumem did not
 *         allocate, such as foreign or DLPack arrays; a backend without IPC,
 *         such as the host simulator); the manager's error.
 */
GM_API gm_status gm_array_ipc_handle(gm_array *array, gm_ipc_handle *handle_p);

/**
 * @brief Open, in another process, the allocation behind an IPC handle from
 *        gm_array_ipc_handle() and view it as an array (Numba's
 *        IpcHandle.open / open_ipc_array): `layout` gives the shape,
 *        strides, dtype and offset the exporter's array had (its data, memory
 *        kind and device id are ignored); the array's data is the opened
 *        mapping plus handle->offset, so the same descriptor views the same
 *        elements. Views derived from it share the mapping, which is closed
 *        (cuIpcCloseMemHandle, hsa_amd_ipc_memory_detach) when the last of
 *        them is released, after the work queued on the context's streams.
 *        The exporter must keep its array alive until then. The handle is
 *        opened by the backend, so it must be the driver's: one made by the
 *        built-in memory manager, or by a plugin whose get_ipc_handle returns
 *        the driver's handle of the allocation.
 * @return GM_OK; GM_ERR_NULL_POINTER; GM_ERR_INVALID_ARG (a handle of another
 *         backend; a layout reaching outside the allocation); the layout's
 *         validation error; GM_ERR_UNSUPPORTED (a backend without IPC, such
 *         as the host simulator); the driver's error (CUDA refuses to open a
 *         handle in the process that made it).
 */
GM_API gm_status gm_array_from_ipc_handle(gm_context *ctx, const gm_ipc_handle *handle,
                                          const gm_ndview *layout, gm_array **array_p);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_RUNTIME_H */
