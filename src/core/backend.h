/*
 * The backend ops table: everything a driver must provide. One function
 * type per op (gm_op_<op>); the table holds pointers to them, and a backend
 * declares its implementations through the same types
 * (`gm_op_mem_alloc gm__cuda_mem_alloc;`), so each signature is written once.
 * Each op is MANDATORY (every backend implements it) or OPTIONAL (a backend
 * without it points the slot at the gm__unsupported_* stubs, never NULL).
 * Ops return gm_status only; no CUresult / hsa_status_t crosses this table,
 * and every failure records its detail with gm__error() (naming the driver
 * call and its own error name).
 *
 * Handles: device addresses are gm_devptr (CUdeviceptr and HSA pointers both
 * fit); streams and events are opaque backend objects. The host simulator
 * (src/host/) implements every op and is the reference for the others.
 */
#ifndef GPUMEM_SRC_CORE_BACKEND_H
#define GPUMEM_SRC_CORE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "gpumem/launch.h"
#include "gpumem/runtime.h"

#define GM_BACKEND_ABI_VERSION 4

typedef uint64_t gm_devptr;
typedef struct gm_backend_ctx gm_backend_ctx;       /* per-context driver state */
typedef struct gm_backend_stream gm_backend_stream; /* a driver stream */
typedef struct gm_backend_event gm_backend_event;   /* a driver event */

/* Which built-in stream stream_builtin returns. */
typedef enum gm_builtin_stream {
    GM_BUILTIN_STREAM_DEFAULT = 0,   /* the context's default stream */
    GM_BUILTIN_STREAM_LEGACY = 1,    /* CU_STREAM_LEGACY semantics */
    GM_BUILTIN_STREAM_PER_THREAD = 2 /* the calling thread's own default stream */
} gm_builtin_stream;

/* Where a copy's side lives. */
typedef enum gm_copy_side {
    GM_COPY_HOST = 0,  /* host memory (pageable, pinned or mapped: the host address) */
    GM_COPY_DEVICE = 1 /* a device address */
} gm_copy_side;

/*
 * A pitched copy of up to three dimensions: depth planes of height rows of
 * width_bytes bytes. Pitches are bytes between rows / planes and are >= 0
 * (cuMemcpy2D/3D's model); a 1-D copy has height = depth = 1.
 */
typedef struct gm_copy_desc {
    gm_copy_side dst_side, src_side;
    gm_devptr dst, src; /* host pointers cast to gm_devptr for GM_COPY_HOST */
    size_t width_bytes, height, depth;
    size_t dst_pitch, dst_height; /* dst_height: rows per plane for 3-D */
    size_t src_pitch, src_height;
} gm_copy_desc;

/* Arguments to init. */
typedef struct gm_backend_init_args {
    int32_t device_id;
    int32_t host_warp_size; /* host simulator only */
} gm_backend_init_args;

/* Completion callback used by stream_add_callback and stream_enqueue_host. */
typedef void (*gm_backend_callback_fn)(gm_status status, void *user);

/* Host work run in stream order (MANDATORY for host; GPU backends may use cuStreamAddCallback). */
typedef gm_status (*gm_backend_host_work_fn)(void *user);

/* ---- lifecycle (MANDATORY) ---- */
/* Load the driver, choose the device; GM_ERR_NO_DRIVER / GM_ERR_NO_DEVICE with detail. */
typedef gm_status gm_op_init(const gm_backend_init_args *args, gm_backend_ctx **bctx_p);
/* Release everything init took. Accepts NULL. */
typedef void gm_op_fini(gm_backend_ctx *bctx);
typedef gm_status gm_op_device_info(gm_backend_ctx *bctx, gm_device_info *info_p);
typedef gm_status gm_op_mem_info(gm_backend_ctx *bctx, int64_t *free_p, int64_t *total_p);

/* ---- memory ---- */
/* MANDATORY. OOM must return GM_ERR_OUT_OF_DEVICE_MEMORY (the queue flushes and retries once). */
typedef gm_status gm_op_mem_alloc(gm_backend_ctx *bctx, size_t bytes, gm_devptr *ptr_p);
typedef gm_status gm_op_mem_free(gm_backend_ctx *bctx, gm_devptr ptr);
/* OPTIONAL. Free device allocations ptrs[0..n) in order, as mem_free would, while each is one
 * the backend frees without a failure or extra work; returns how many it freed (0 ..= n). The
 * first one not freed is left to mem_free (which frees it or reports why not), so the stub's
 * 0 is always correct. The deallocation queue's flush hands it runs of device entries. */
typedef size_t gm_op_mem_free_batch(gm_backend_ctx *bctx, const gm_devptr *ptrs, size_t n);
/* MANDATORY. Page-locked host memory; flags are gm_host_flags (MAPPED asks for a device mapping).
 * OOM returns GM_ERR_NO_MEMORY or GM_ERR_OUT_OF_DEVICE_MEMORY. */
typedef gm_status gm_op_host_alloc(gm_backend_ctx *bctx, size_t bytes, unsigned flags,
                                   void **ptr_p);
typedef gm_status gm_op_host_free(gm_backend_ctx *bctx, void *ptr);
/* MANDATORY. Device address of mapped / registered-mapped host memory. */
typedef gm_status gm_op_host_device_pointer(gm_backend_ctx *bctx, void *host, gm_devptr *ptr_p);
/* MANDATORY. Page-lock existing host memory (cuMemHostRegister / hsa_amd_memory_lock). */
typedef gm_status gm_op_host_register(gm_backend_ctx *bctx, void *ptr, size_t bytes,
                                      unsigned flags);
typedef gm_status gm_op_host_unregister(gm_backend_ctx *bctx, void *ptr);
/* OPTIONAL. Managed (unified) memory. */
typedef gm_status gm_op_managed_alloc(gm_backend_ctx *bctx, size_t bytes, gm_devptr *ptr_p);
/* OPTIONAL. Whether ptr is device (or managed/mapped) memory of this context:
 * *kind_p receives a gm_memory_kind, GM_MEMORY_HOST for unknown memory. */
typedef gm_status gm_op_pointer_kind(gm_backend_ctx *bctx, const void *ptr, int *kind_p);

/* ---- copies (MANDATORY) ---- */
/* Pitched copy; stream NULL = synchronous. With a stream, device memory is read and written
 * in stream order; host memory too, unless the ops table's host_read_at_call says otherwise. */
typedef gm_status gm_op_copy(gm_backend_ctx *bctx, const gm_copy_desc *desc,
                             gm_backend_stream *stream);
/* OPTIONAL. Arbitrary strided copy between two descriptors of equal shape and dtype (the
 * GPU backends launch a packing kernel); when absent, or GM_ERR_UNSUPPORTED for a layout,
 * the core decomposes the copy into gm_op_copy pieces or stages it through the host. */
typedef gm_status gm_op_copy_strided(gm_backend_ctx *bctx, const gm_ndview *dst,
                                     const gm_ndview *src, gm_backend_stream *stream);
/* OPTIONAL. A synchronous copy of two views the core has checked for gm__copy (valid, alike
 * in dtype and shape, nonempty, data present, disjoint extents, no broadcast destination; at
 * least one side device-side), done whole on the views by a backend whose engine takes any
 * layout without planning (the simulator): it either copies, puts the copy's status in
 * *status_p and returns true, or declines (a device side it does not plainly own), records
 * no error and returns false, and the core plans the copy as usual (pitched ops->copy
 * pieces, copy_strided, staging), which decides and explains. Absent (the stub declines
 * every copy), every copy is planned. */
typedef bool gm_op_copy_views(gm_backend_ctx *bctx, const gm_ndview *dst, const gm_ndview *src,
                              gm_status *status_p);
/* MANDATORY. Fill bytes with a pattern of 1, 2, 4 or 8 bytes (cuMemsetD8/16/32). */
typedef gm_status gm_op_memset(gm_backend_ctx *bctx, gm_devptr dst, const void *pattern,
                               size_t pattern_bytes, size_t count, gm_backend_stream *stream);

/* ---- streams (MANDATORY) ---- */
typedef gm_status gm_op_stream_create(gm_backend_ctx *bctx, unsigned flags,
                                      gm_backend_stream **stream_p);
/* Waits for pending work, then destroys. */
typedef gm_status gm_op_stream_destroy(gm_backend_ctx *bctx, gm_backend_stream *stream);
typedef gm_status gm_op_stream_builtin(gm_backend_ctx *bctx, gm_builtin_stream which,
                                       gm_backend_stream **stream_p);
/* Wrap a native handle; the wrapper is freed by stream_unwrap, the native stream never. */
typedef gm_status gm_op_stream_wrap(gm_backend_ctx *bctx, void *native,
                                    gm_backend_stream **stream_p);
typedef void gm_op_stream_unwrap(gm_backend_ctx *bctx, gm_backend_stream *stream);
typedef void *gm_op_stream_native(gm_backend_ctx *bctx, gm_backend_stream *stream);
typedef gm_status gm_op_stream_synchronize(gm_backend_ctx *bctx, gm_backend_stream *stream);
/* GM_OK when idle, GM_ERR_NOT_READY when work is pending. */
typedef gm_status gm_op_stream_query(gm_backend_ctx *bctx, gm_backend_stream *stream);
typedef gm_status gm_op_stream_add_callback(gm_backend_ctx *bctx, gm_backend_stream *stream,
                                            gm_backend_callback_fn fn, void *user);
/* Run fn(user) in stream order on a host thread; its status becomes the stream's error.
 * cleanup (may be NULL) runs after fn, whatever fn returned. If the op fails (nothing
 * queued) cleanup is not called and the caller keeps `user` (the core relies on this).
 * stream_add_callback's fn is likewise never called when that op fails. stream NULL
 * (optional: the simulator and HSA take it, CUDA refuses it with GM_ERR_NULL_POINTER):
 * fn runs now, after the legacy stream's work, and cleanup has run when the call
 * returns, whatever it returns (fn's status, or the wait's when fn could not run): the
 * caller never keeps `user` then. The core never passes NULL. */
typedef gm_status gm_op_stream_enqueue_host(gm_backend_ctx *bctx, gm_backend_stream *stream,
                                            gm_backend_host_work_fn fn, void *user,
                                            void (*cleanup)(void *user));
/* MANDATORY. Wait until every stream of the context has finished the work queued on it
 * before the call (cuCtxSynchronize's wait); errors of that work stay with their streams
 * for stream_synchronize (CUDA's may also be returned here). The deallocation queue calls
 * it before it frees memory, host copies, foreign memory or modules, as cuMemFree
 * synchronizes implicitly, so that work still queued never touches freed memory. Never
 * called from stream work (the core runs no flush and no immediate free there; the
 * simulator skips a worker's own stream all the same). */
typedef gm_status gm_op_device_synchronize(gm_backend_ctx *bctx);

/* ---- events (MANDATORY) ---- */
typedef gm_status gm_op_event_create(gm_backend_ctx *bctx, unsigned timing,
                                     gm_backend_event **event_p);
typedef gm_status gm_op_event_destroy(gm_backend_ctx *bctx, gm_backend_event *event);
typedef gm_status gm_op_event_record(gm_backend_ctx *bctx, gm_backend_event *event,
                                     gm_backend_stream *stream);
typedef gm_status gm_op_stream_wait_event(gm_backend_ctx *bctx, gm_backend_stream *stream,
                                          gm_backend_event *event);
typedef gm_status gm_op_event_query(gm_backend_ctx *bctx, gm_backend_event *event);
typedef gm_status gm_op_event_synchronize(gm_backend_ctx *bctx, gm_backend_event *event);
typedef gm_status gm_op_event_elapsed(gm_backend_ctx *bctx, gm_backend_event *start,
                                      gm_backend_event *end, float *ms_p);

/* ---- IPC (OPTIONAL) ---- */
typedef gm_status gm_op_ipc_get_handle(gm_backend_ctx *bctx, gm_devptr ptr, void *handle,
                                       size_t handle_bytes);
typedef gm_status gm_op_ipc_open(gm_backend_ctx *bctx, const void *handle, size_t handle_bytes,
                                 gm_devptr *ptr_p);
typedef gm_status gm_op_ipc_close(gm_backend_ctx *bctx, gm_devptr ptr);

/* ---- modules and launches (MANDATORY) ---- */
typedef struct gm_backend_module gm_backend_module; /* a loaded code image */
typedef struct gm_backend_kernel gm_backend_kernel; /* a kernel inside a module */

/* Which image format a module_load call is given. */
typedef enum gm_image_kind {
    GM_IMAGE_HOST = 0,  /* a gm_host_table (gpumem/launch.h); bytes = sizeof(gm_host_table) */
    GM_IMAGE_CUDA = 1,  /* fatbin, cubin or PTX text (cuModuleLoadData) */
    GM_IMAGE_AMDGPU = 2 /* AMDGPU ELF code object */
} gm_image_kind;

/* Attributes of a kernel, read from the image / driver. */
typedef struct gm_kernel_attrs {
    size_t static_shared_bytes; /* group / shared segment declared by the kernel */
    size_t private_bytes;       /* per-thread local / private segment */
    size_t kernarg_bytes;       /* size of the argument block (HSA: kernarg segment) */
    size_t kernarg_align;
    int32_t max_threads_per_block;
    /* The parameters, when the image describes them (host tables, AMDGPU metadata,
     * cuFuncGetParamInfo); param_count -1 otherwise. Owned by the backend kernel. */
    int32_t param_count;
    const size_t *param_sizes;      /* param_count sizes, or NULL */
    const char *const *param_decls; /* "type name" per parameter, or NULL */
} gm_kernel_attrs;

/* One launch: grid in blocks, block in threads (CUDA's model; HSA backends
 * convert the grid to work-items). */
typedef struct gm_launch_config {
    uint32_t grid[3];
    uint32_t block[3];
    size_t dynamic_shared_bytes;
} gm_launch_config;

/* Load an image; images are not copied unless the driver does so. */
typedef gm_status gm_op_module_load(gm_backend_ctx *bctx, gm_image_kind kind, const void *image,
                                    size_t bytes, gm_backend_module **module_p);
typedef gm_status gm_op_module_unload(gm_backend_ctx *bctx, gm_backend_module *module);
/* GM_ERR_NOT_FOUND naming the kernel when absent. */
typedef gm_status gm_op_module_get_kernel(gm_backend_ctx *bctx, gm_backend_module *module,
                                          const char *name, gm_backend_kernel **kernel_p);
/* Device address and size of a global (constant memory) variable. */
typedef gm_status gm_op_module_get_global(gm_backend_ctx *bctx, gm_backend_module *module,
                                          const char *name, gm_devptr *ptr_p, size_t *bytes_p);
typedef gm_status gm_op_kernel_attrs(gm_backend_ctx *bctx, gm_backend_kernel *kernel,
                                     gm_kernel_attrs *attrs_p);
/* OPTIONAL. Copy `bytes` host bytes to the start of a module global, synchronously and
 * after the work queued on the legacy stream. Absent (the gm__unsupported stub), the core
 * uses module_get_global and copy. */
typedef gm_status gm_op_module_set_global(gm_backend_ctx *bctx, gm_backend_module *module,
                                          const char *name, const void *data, size_t bytes);
/* Launch with cuLaunchKernel's argument convention: args[i] points at argument i's value,
 * arg_sizes[i] is its size; the core has already checked arity and sizes. On `stream`, in
 * its order; with stream NULL synchronous (after the legacy stream's earlier work): the
 * kernel has finished when the op returns, and a failure while it ran is the op's status. */
typedef gm_status gm_op_launch(gm_backend_ctx *bctx, gm_backend_kernel *kernel,
                               const gm_launch_config *config, void **args, const size_t *arg_sizes,
                               int nargs, gm_backend_stream *stream);

typedef struct gm_backend_ops {
    size_t size;          /* sizeof(gm_backend_ops) the backend was built with */
    uint32_t abi_version; /* GM_BACKEND_ABI_VERSION */
    const char *name;
    gm_backend_kind kind;
    /* Whether an asynchronous copy from pageable host memory may read the source when it is
     * called instead of in stream order (CUDA: the driver may stage it at once, without
     * waiting for the stream's earlier work). The core then fills such a source before the
     * call, never in a host step queued ahead of it. */
    bool host_read_at_call;
    /* Optional (NULL: callbacks may call the driver). Whether the calling thread runs one
     * of this backend's stream callbacks where its driver allows no call (CUDA): every op
     * that needs the driver refuses there (GM_ERR_STATE), and the core refuses
     * stream-ordered work that would need temporaries before making them. */
    bool (*in_driverless_callback)(void);
    gm_op_init *init;
    gm_op_fini *fini;
    gm_op_device_info *device_info;
    gm_op_mem_info *mem_info;
    gm_op_mem_alloc *mem_alloc;
    gm_op_mem_free *mem_free;
    gm_op_mem_free_batch *mem_free_batch;
    gm_op_host_alloc *host_alloc;
    gm_op_host_free *host_free;
    gm_op_host_device_pointer *host_device_pointer;
    gm_op_host_register *host_register;
    gm_op_host_unregister *host_unregister;
    gm_op_managed_alloc *managed_alloc;
    gm_op_pointer_kind *pointer_kind;
    gm_op_copy *copy;
    gm_op_copy_strided *copy_strided;
    gm_op_copy_views *copy_views;
    gm_op_memset *memset;
    gm_op_stream_create *stream_create;
    gm_op_stream_destroy *stream_destroy;
    gm_op_stream_builtin *stream_builtin;
    gm_op_stream_wrap *stream_wrap;
    gm_op_stream_unwrap *stream_unwrap;
    gm_op_stream_native *stream_native;
    gm_op_stream_synchronize *stream_synchronize;
    gm_op_stream_query *stream_query;
    gm_op_stream_add_callback *stream_add_callback;
    gm_op_stream_enqueue_host *stream_enqueue_host;
    gm_op_device_synchronize *device_synchronize;
    gm_op_event_create *event_create;
    gm_op_event_destroy *event_destroy;
    gm_op_event_record *event_record;
    gm_op_stream_wait_event *stream_wait_event;
    gm_op_event_query *event_query;
    gm_op_event_synchronize *event_synchronize;
    gm_op_event_elapsed *event_elapsed;
    gm_op_module_load *module_load;
    gm_op_module_unload *module_unload;
    gm_op_module_get_kernel *module_get_kernel;
    gm_op_module_get_global *module_get_global;
    gm_op_kernel_attrs *kernel_attrs;
    gm_op_launch *launch;
    gm_op_module_set_global *module_set_global;
    gm_op_ipc_get_handle *ipc_get_handle;
    gm_op_ipc_open *ipc_open;
    gm_op_ipc_close *ipc_close;
} gm_backend_ops;

/* Shared stubs for OPTIONAL ops: record "<op> is not supported by <backend>" and return
 * GM_ERR_UNSUPPORTED. */
gm_op_mem_free_batch gm__unsupported_mem_free_batch; /* frees none (returns 0, no error) */
gm_op_managed_alloc gm__unsupported_managed_alloc;
gm_op_pointer_kind gm__unsupported_pointer_kind;
gm_op_copy_strided gm__unsupported_copy_strided;
gm_op_copy_views gm__unsupported_copy_views; /* declines every copy (false, no error) */
gm_op_ipc_get_handle gm__unsupported_ipc_get_handle;
gm_op_ipc_open gm__unsupported_ipc_open;
gm_op_ipc_close gm__unsupported_ipc_close;
/* (defined in src/core/module.c) */
gm_op_module_set_global gm__unsupported_module_set_global;

/* The backends compiled in. gm__host_backend always exists. */
extern const gm_backend_ops gm__host_backend;
#ifdef GM_HAVE_HSA
extern const gm_backend_ops gm__hsa_backend; /* src/hsa: ROCm HSA runtime, dlopen'ed */
#endif
#ifdef GM_HAVE_CUDA
/* The CUDA driver API backend (src/cuda/), libcuda.so.1 loaded at init. */
extern const gm_backend_ops gm__cuda_backend;
#endif

/*
 * The shared strided host copy engine (src/core/hostcopy.c): copy between two
 * host descriptors of equal shape and dtype, any strides, coalescing
 * contiguous inner axes into memcpy runs and blocking transposes for cache.
 * Used by the host backend for every copy and by GPU backends for staging.
 */
gm_status gm__host_copy_strided(const gm_ndview *dst, const gm_ndview *src);
/*
 * The built-in copy_strided kernel's layout for dst <- src, two views that
 * gm__host_copy_check accepted (a GPU backend's packing kernel): extent-1
 * axes dropped, axes negative on both sides reversed, axes sorted outermost
 * first and contiguous neighbours merged, items split into the widest unit
 * (8, 4, 2 or 1 bytes) that every address and stride is aligned to. The
 * first elements' addresses go to *dst_p / *src_p and the units to copy to
 * *count_p. GM_ERR_UNSUPPORTED, naming `fn`, when more than
 * GM_STRIDED_MAX_DIMS axes remain (the caller falls back).
 */
gm_status gm__strided_pack_layout(const char *fn, const gm_ndview *dst, const gm_ndview *src,
                                  gm_strided_layout *layout, gm_devptr *dst_p, gm_devptr *src_p,
                                  int64_t *count_p);

/*
 * The checks gm__host_copy_strided makes, without copying: both descriptors
 * valid, equal dtype (GM_ERR_DTYPE) and shape (GM_ERR_SHAPE_MISMATCH, naming
 * both), data pointers present when there are elements, no zero-stride
 * (broadcast) destination axis. Lets an asynchronous copy fail at enqueue time.
 */
gm_status gm__host_copy_check(const gm_ndview *dst, const gm_ndview *src);

#endif /* GPUMEM_SRC_CORE_BACKEND_H */
