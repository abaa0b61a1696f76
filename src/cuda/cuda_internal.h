/*
 * State shared by the CUDA backend's files: the per-context driver state
 * behind gm_backend_ctx, the stream wrapper behind gm_backend_stream, and
 * the ops each file implements for the table in cuda_backend.c.
 *
 * Handles: gm_backend_event, gm_backend_module and gm_backend_kernel are the
 * driver's own CUevent, CUmodule and CUfunction, converted; streams are a
 * small wrapper because the backend must know who owns the CUstream
 * (created: us; built-in and wrapped: never destroyed by us) and carry the
 * status of failed host work enqueued on it.
 */
#ifndef GPUMEM_SRC_CUDA_CUDA_INTERNAL_H
#define GPUMEM_SRC_CUDA_CUDA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "backend.h"
#include "cuda_driver.h"

/* Who owns a stream's CUstream. */
typedef enum gm_cuda_stream_kind {
    GM_CUDA_STREAM_CREATED = 0, /* cuStreamCreate'd here; cuStreamDestroy'd by stream_destroy */
    GM_CUDA_STREAM_BUILTIN = 1, /* 0, CU_STREAM_LEGACY or CU_STREAM_PER_THREAD; owned by bctx */
    GM_CUDA_STREAM_WRAPPED = 2  /* the user's CUstream; only the wrapper is ours */
} gm_cuda_stream_kind;

struct gm_backend_stream {
    CUstream handle;
    gm_cuda_stream_kind kind;
    /* First failing status of host work enqueued on the stream (GM_OK: none);
     * taken and returned by the next stream_synchronize (stream_query leaves
     * it); logged if the stream goes with it. */
    _Atomic int deferred_error;
    /* A created or wrapped stream's wrapper: one reference for its owner and one
     * per host work still queued (whose end writes deferred_error); the last frees
     * it. A built-in one lives in the backend context. */
    _Atomic int refs;
    /* A wrapper of a stream created by this context (referenced): its errors are that
     * stream's, as on the other backends; NULL otherwise. */
    struct gm_backend_stream *owner;
    struct gm_backend_stream *next_created; /* created: in bctx->created (created_lock) */
};

/* Whether the packing kernel of copy_strided (cuda_pack.c) is loaded. */
typedef enum gm_cuda_pack_state {
    GM_CUDA_PACK_UNLOADED = 0,   /* not tried yet (or the last try failed for want of memory) */
    GM_CUDA_PACK_LOADED = 1,     /* pack_module / pack_function valid */
    GM_CUDA_PACK_UNAVAILABLE = 2 /* no CUDA image, or the device cannot run it */
} gm_cuda_pack_state;

struct gm_backend_ctx {
    gm_cuda_driver drv; /* the loaded entry points */
    CUdevice device;
    CUcontext context; /* the device's primary context, retained by init */
    int32_t device_id;
    size_t max_pitch;    /* CU_DEVICE_ATTRIBUTE_MAX_PITCH: larger pitches copy row by row */
    gm_device_info info; /* read once by init */
    gm_backend_stream builtin[3]; /* indexed by gm_builtin_stream */
    pthread_mutex_t pack_lock;    /* guards the three fields below */
    gm_cuda_pack_state pack_state;
    CUmodule pack_module; /* the built-in image holding copy_strided, loaded on first use */
    CUfunction pack_function;
    /* Functions queued with cuStreamAddCallback that have not returned yet: after a
     * context error the driver may still run them once cuCtxSynchronize has returned,
     * so device_synchronize (when it fails) and fini wait for none to be left. */
    _Atomic long host_calls;
    /* The per-thread default stream is one handle for every thread's own stream: the
     * error of a failed host step is kept per thread (made on the thread's first host
     * step on it, freed once the thread has exited and its queued steps have run, or by
     * fini). */
    pthread_mutex_t created_lock; /* the list of live created streams, for stream_wrap */
    struct gm_backend_stream *created;
    pthread_mutex_t thread_errors_lock;
    struct gm_cuda_thread_error *thread_errors;
    gm__thread_watch exit_watch; /* frees an exited thread's slot */
};

/* Make the context's primary context current on the calling thread (first thing in every op). */
gm_status gm__cuda_enter(gm_backend_ctx *bctx);

/*
 * Whether the calling thread is running a function queued with
 * cuStreamAddCallback (a stream callback or host step), where the driver
 * allows no CUDA call: every op that needs one refuses then.
 */
bool gm__cuda_in_host_call(void);

/* The CUstream behind a backend stream; NULL stands for the default (NULL) stream. */
CUstream gm__cuda_stream_handle(const gm_backend_stream *stream);

/*
 * Wait for the legacy default stream: a "synchronous" copy or memset whose
 * driver call may return before the device has finished (device
 * destinations, memsets) is completed this way before the op returns.
 */
gm_status gm__cuda_finish_sync(gm_backend_ctx *bctx);

/*
 * After a wait the driver says is complete (a stream, event or context
 * synchronize, or a query that found the work done): make the writes of the
 * host steps and callbacks that ran before it (on the driver's thread)
 * happen-before the caller's next reads. The driver synchronizes internally,
 * but out of sight of the C11 memory model and of ThreadSanitizer; each host
 * call ends with a release decrement of host_calls, which this acquires.
 */
static inline void gm__cuda_host_calls_seen(gm_backend_ctx *bctx)
{
    (void)atomic_load_explicit(&bctx->host_calls, memory_order_acquire);
}

/* ---- cuda_memory.c ---- */
gm_op_mem_alloc gm__cuda_mem_alloc;
gm_op_mem_free gm__cuda_mem_free;
gm_op_host_alloc gm__cuda_host_alloc;
gm_op_host_free gm__cuda_host_free;
gm_op_host_device_pointer gm__cuda_host_device_pointer;
gm_op_host_register gm__cuda_host_register;
gm_op_host_unregister gm__cuda_host_unregister;
gm_op_managed_alloc gm__cuda_managed_alloc;
gm_op_pointer_kind gm__cuda_pointer_kind;
gm_op_ipc_get_handle gm__cuda_ipc_get_handle;
gm_op_ipc_open gm__cuda_ipc_open;
gm_op_ipc_close gm__cuda_ipc_close;

/* ---- cuda_copy.c ---- */
gm_op_copy gm__cuda_copy;
gm_op_memset gm__cuda_memset;

/* ---- cuda_pack.c: copy_strided through the library's copy_strided kernel ---- */
/* Set up the (unloaded) packing kernel state; called once by init. */
gm_status gm__cuda_pack_init(gm_backend_ctx *bctx);
/* Unload the packing kernel if it was loaded; called by fini with the context still held. */
void gm__cuda_pack_fini(gm_backend_ctx *bctx);
/*
 * Any-layout copy between two device-side descriptors (device or managed
 * memory) in one kernel launch; GM_ERR_UNSUPPORTED for everything else (a
 * host side, more than GM_STRIDED_MAX_DIMS axes after merging, no loadable
 * kernel), so that the core falls back to pitched copies or staging.
 */
gm_op_copy_strided gm__cuda_copy_strided;

/* ---- cuda_stream.c ---- */
void gm__cuda_streams_init(gm_backend_ctx *bctx);
/* Free what streams_init and the streams made (fini, after the host calls ran). */
void gm__cuda_streams_fini(gm_backend_ctx *bctx);
/* Wait (bounded, logged) until no function queued with cuStreamAddCallback is left to run;
 * false when some are still left after the bound. */
bool gm__cuda_wait_host_calls(gm_backend_ctx *bctx, const char *what);
gm_op_stream_create gm__cuda_stream_create;
gm_op_stream_destroy gm__cuda_stream_destroy;
gm_op_stream_builtin gm__cuda_stream_builtin;
gm_op_stream_wrap gm__cuda_stream_wrap;
gm_op_stream_unwrap gm__cuda_stream_unwrap;
gm_op_stream_native gm__cuda_stream_native;
gm_op_stream_synchronize gm__cuda_stream_synchronize;
gm_op_stream_query gm__cuda_stream_query;
gm_op_stream_add_callback gm__cuda_stream_add_callback;
gm_op_stream_enqueue_host gm__cuda_stream_enqueue_host;
gm_op_device_synchronize gm__cuda_device_synchronize;
gm_op_event_create gm__cuda_event_create;
gm_op_event_destroy gm__cuda_event_destroy;
gm_op_event_record gm__cuda_event_record;
gm_op_stream_wait_event gm__cuda_stream_wait_event;
gm_op_event_query gm__cuda_event_query;
gm_op_event_synchronize gm__cuda_event_synchronize;
gm_op_event_elapsed gm__cuda_event_elapsed;

/* ---- cuda_module.c ---- */
gm_op_module_load gm__cuda_module_load;
gm_op_module_unload gm__cuda_module_unload;
gm_op_module_get_kernel gm__cuda_module_get_kernel;
gm_op_module_get_global gm__cuda_module_get_global;
gm_op_kernel_attrs gm__cuda_kernel_attrs;
gm_op_launch gm__cuda_launch;

#endif /* GPUMEM_SRC_CUDA_CUDA_INTERNAL_H */
