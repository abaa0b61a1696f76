/*
 * The HSA backend's private state. Not installed.
 *
 * HSA has agents, memory pools, queues and signals, not devices and streams.
 * This backend builds CUDA's model from them:
 *
 *  - a device is a GPU agent with the kernel-dispatch feature; host memory
 *    comes from the CPU agent's fine-grained pool, kernel arguments from its
 *    kernarg pool, device arrays from the GPU's coarse-grained global pool;
 *  - a stream is an ordered chain of operations. Every operation gets a
 *    completion signal and waits on the stream's "frontier" (the signals of
 *    the work it must follow): copies pass the frontier as dependency signals
 *    of hsa_amd_memory_async_copy, kernels and event records put barrier-AND
 *    packets holding it in front of their packets on the stream's AQL queue,
 *    host work (callbacks) runs from hsa_amd_signal_async_handler when the
 *    frontier completes. The operation's signal then becomes the frontier;
 *  - the legacy default stream follows CU_STREAM_LEGACY: its work also waits
 *    for every blocking stream's frontier, and blocking streams' work waits
 *    for its frontier;
 *  - signals are reference counted (each pending operation holds its
 *    dependencies until it completes, so no signal is destroyed while the
 *    packet processor or a DMA engine may still read it) and recycled.
 *
 * Locking: one mutex per context (bctx->lock) guards every stream, frontier,
 * operation list, signal reference count and the signal cache; it is never
 * held while waiting for the device. Async-handler threads touch only their
 * own work item, the stream's error slot (its own mutex) and the signal they
 * complete. The runtime's GPU memory-fault handler touches only the failure
 * fields (queue_failed...) of the contexts in its process-wide registry,
 * under the registry's own mutex (hsa_fault.c). Host memory locked for
 * copies and registrations are process-wide, under hsa_memory.c's registry
 * mutex, which is taken after bctx->lock, never before.
 */
#ifndef GPUMEM_SRC_HSA_HSA_INTERNAL_H
#define GPUMEM_SRC_HSA_HSA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "hsa_api.h"
#include "hsa_codeobj.h"

#define GM_HSA_MAX_GPUS      64       /* GPU agents remembered (PORTABLE host memory) */
#define GM_HSA_QUEUE_SIZE    4096u    /* AQL packets per stream queue (within the agent's limits) */
#define GM_HSA_SIGNAL_CACHE  64       /* completed signals kept for reuse */
#define GM_HSA_WAIT_SLICE_NS 10000000 /* 10 ms: how often a wait looks for queue errors */
#define GM_HSA_MEMSET_CHUNK  (1u << 20) /* staging buffer for memset patterns */
#define GM_HSA_ERROR_TEXT    512
#define GM_HSA_KERNARG_BYTES 4096u /* kernarg buffers of this size are recycled */
#define GM_HSA_KERNARG_CACHE 64

#define GM_HSA_STREAM_MAGIC 0x48534153u /* "HSAS" */
#define GM_HSA_EVENT_MAGIC  0x48534145u /* "HSAE" */

/* A reference-counted HSA signal (refs and stamp_ns under bctx->lock, except
 * stamp_ns, which a timing record's handler writes before completing it). */
typedef struct gm__hsa_sig {
    hsa_signal_t handle;
    int refs;
    _Atomic int64_t stamp_ns; /* host CLOCK_MONOTONIC time at completion (timing records) */
    const char *failed_what;  /* the failed operation it completed, once reaped (else NULL) */
} gm__hsa_sig;

/* Host work run from an async handler when its dependency completes. */
typedef enum gm__hsa_work_kind {
    GM_HSA_WORK_FN = 0,       /* stream_enqueue_host */
    GM_HSA_WORK_CALLBACK = 1, /* stream_add_callback */
    GM_HSA_WORK_STAMP = 2,    /* timing event record: stamp the completion time */
    GM_HSA_WORK_MEMCPY = 3,   /* host-to-host rows of a copy on a stream */
    GM_HSA_WORK_NOP = 4       /* a marker: completes when its dependencies do */
} gm__hsa_work_kind;

typedef struct gm__hsa_work gm__hsa_work;

/*
 * Pageable host memory a context locked (hsa_amd_memory_lock) for DMA,
 * shared by that context's operations using it. Every context's entries are
 * in one process-wide list with the registrations (hsa_memory.c, under its
 * registry mutex), as page-locking is the process's: a range inside one of
 * the context's entries reuses it, and no lock of another size is ever taken
 * where any lock (a copy's of any context, a registration) starts, which
 * libhsakmt could not tell apart when unlocking (it finds a registration to
 * unlock by address alone): such a copy is staged instead (hsa_copy.c).
 */
typedef struct gm__hsa_lock {
    struct gm__hsa_lock *next;   /* the process-wide list */
    const gm_backend_ctx *owner; /* the context whose operations use it */
    char *base;                  /* the registration's address */
    size_t size;                 /* and size */
    char *agent;                 /* its agent address */
    unsigned users;              /* operations using it (owner's lock) */
} gm__hsa_lock;

/* A staging buffer from the CPU's pool shared by the operations of one staged copy
 * (refs under bctx->lock); the last reference frees it. */
typedef struct gm__hsa_stage {
    void *buf;
    unsigned refs;
} gm__hsa_stage;

/* One stream operation: its completion signal and what it holds until done. */
typedef struct gm__hsa_op {
    struct gm__hsa_op *next;
    gm__hsa_sig *done;  /* completes (reaches 0) when the operation is finished */
    gm__hsa_sig **deps; /* references held until done (dependency signals) */
    size_t ndeps;
    const char *what;        /* "hsa_amd_memory_async_copy", "kernel dispatch"... */
    void *kernarg;           /* kernarg-pool buffer to free or recycle */
    bool kernarg_pooled;     /* kernarg is GM_HSA_KERNARG_BYTES long: recycle it */
    void *staging;           /* host-pool staging buffer to free */
    gm__hsa_stage *stage;    /* a staged copy's shared staging buffer (a reference) */
    gm__hsa_lock *locked[2]; /* pageable memory locked for it (references) */
    gm__hsa_work *work;      /* host work to free */
    bool reported;           /* a synchronous caller returns its failure (not the stream) */
    uint64_t seq;            /* its stream's count of committed operations, this one included */
} gm__hsa_op;

typedef enum gm__hsa_stream_kind {
    GM_HSA_STREAM_CREATED = 0,
    GM_HSA_STREAM_LEGACY = 1,
    GM_HSA_STREAM_PER_THREAD = 2,
    GM_HSA_STREAM_WRAPPER = 3
} gm__hsa_stream_kind;

struct gm_backend_stream {
    uint32_t magic;
    gm__hsa_stream_kind kind;
    unsigned flags; /* gm_stream_flags */
    gm_backend_ctx *bctx;
    gm_backend_stream *target; /* wrappers: the wrapped stream */
    gm_backend_stream *next;   /* bctx->streams list, or bctx->wrappers for a wrapper */
    gm_backend_stream *prev;   /* wrappers: the previous one on bctx->wrappers */
    bool retired;       /* per-thread stream of an exited thread, or a destroyed one still wrapped:
                           freed once idle and unwrapped (end_retired) */
    bool destroyed;     /* stream_destroy was called: no new wrapper finds it */
    int wrappers;       /* stream_wrap wrappers of it (lock): it stays while there are any */
    hsa_queue_t *queue; /* created on first packet */
    gm__hsa_sig *queue_last; /* completion of the last packet chain on queue (ref) */
    gm__hsa_sig **frontier;  /* what the next operation waits for */
    size_t nfrontier, frontier_cap;
    gm__hsa_op *ops_head, *ops_tail; /* pending operations, in submission order */
    uint64_t committed;              /* operations committed so far (the last one's seq) */
    uint64_t own_committed;          /* seq of the last one its own callbacks committed */
    pthread_mutex_t error_lock;      /* guards error, error_text (handler threads) */
    gm_status error;                 /* first error of asynchronous work, reported once */
    char error_text[GM_HSA_ERROR_TEXT];
};

struct gm_backend_event {
    uint32_t magic;
    unsigned timing;
    gm__hsa_sig *record; /* signal of the latest record; NULL before the first */
};

/* A loaded code object. */
struct gm_backend_module {
    void *image; /* our copy of the ELF (the loader keeps pointers to it) */
    size_t image_bytes;
    hsa_code_object_reader_t reader;
    hsa_executable_t executable;
    gm__hsa_codeobj_meta meta;  /* kernels' argument layouts */
    gm_backend_kernel *kernels; /* looked-up kernels, freed with the module */
};

struct gm_backend_kernel {
    gm_backend_kernel *next;
    gm_backend_module *module;
    char name[GM_HSA_KERNEL_NAME_MAX];
    uint64_t object; /* kernel descriptor address */
    uint32_t kernarg_bytes, kernarg_align, group_bytes, private_bytes;
    bool dynamic_stack;
    const gm__hsa_kernel_meta *meta; /* NULL when the image has no metadata for it */
};

/* The packing kernel of copy_strided (hsa_pack.c). */
typedef enum gm__hsa_pack_state {
    GM_HSA_PACK_UNLOADED = 0,   /* not tried yet */
    GM_HSA_PACK_LOADED = 1,     /* pack_module / pack_kernel are set */
    GM_HSA_PACK_UNAVAILABLE = 2 /* no code object for this GPU, or the runtime refused it */
} gm__hsa_pack_state;

/* An IPC import (ipc_open), detached by ipc_close or at fini. */
typedef struct gm__hsa_ipc_map {
    struct gm__hsa_ipc_map *next;
    void *mapped;  /* what hsa_amd_ipc_memory_attach returned */
    gm_devptr ptr; /* what ipc_open returned (mapped + offset) */
} gm__hsa_ipc_map;

/* Per-thread default streams, by thread key (unique for the process's life, unlike
 * pthread_t, which a new thread may reuse once an old one has exited). */
typedef struct gm__hsa_thread_stream {
    struct gm__hsa_thread_stream *next;
    uint64_t thread_key;
    gm_backend_stream *stream;
} gm__hsa_thread_stream;

struct gm_backend_ctx {
    gm__hsa_api api;
    int32_t device_id;
    hsa_agent_t gpu;                   /* the context's device */
    hsa_agent_t cpu;                   /* host agent */
    hsa_agent_t gpus[GM_HSA_MAX_GPUS]; /* every GPU agent, device order */
    uint32_t ngpus;
    hsa_amd_memory_pool_t device_pool;  /* GPU coarse-grained global */
    hsa_amd_memory_pool_t host_pool;    /* CPU fine-grained global */
    hsa_amd_memory_pool_t kernarg_pool; /* CPU kernarg-init pool */
    bool host_pool_needs_access;        /* GPU access to host_pool must be allowed */
    bool kernarg_pool_needs_access;
    bool no_copy_rect;    /* hsa_amd_memory_async_copy_rect refused: no SDMA engine (under lock) */
    uint64_t group_bytes; /* group segment (LDS) per work-group */
    uint32_t queue_min_size, queue_max_size;
    uint64_t timestamp_hz; /* hsa_system timestamp frequency */
    char isa_name[128];    /* "amdgcn-amd-amdhsa--gfx906:sramecc+:xnack-" */
    gm_device_info info;
    hsa_profile_t profile;

    pthread_mutex_t lock;
    _Atomic int64_t device_bytes; /* allocated through mem_alloc (mem_info fallback) */
    gm_backend_stream *streams;   /* every non-wrapper stream */
    gm_backend_stream *wrappers;  /* every wrapper not unwrapped (the fini frees what is left:
                                     those a stream callback that never ran still held) */
    gm_backend_stream *zombies;   /* destroyed after a failure with work the runtime may still
                                     touch (a DMA copy, an async handler): freed once reaped */
    gm_backend_stream *legacy;
    gm__hsa_thread_stream *thread_streams; /* of the live threads that used theirs */
    gm__thread_watch exit_watch;           /* retires an exiting thread's stream */
    gm__hsa_ipc_map *ipc_maps;
    gm__hsa_sig *cache[GM_HSA_SIGNAL_CACHE];
    int ncache;
    gm__hsa_sig *zero;                    /* a signal that is always 0 (no dependency) */
    void *kernargs[GM_HSA_KERNARG_CACHE]; /* free GM_HSA_KERNARG_BYTES kernarg buffers */
    int nkernargs;
    int64_t stuck_checked_ns;        /* when a query last looked for stuck work (lock) */
    _Atomic int queue_failed;        /* a queue, a GPU memory fault or work stuck behind a
                                        failed operation failed the context */
    _Atomic int queue_error;         /* that error, a gm_status */
    _Atomic int queue_error_claimed; /* the first failure writes queue_error_text */
    char queue_error_text[GM_HSA_ERROR_TEXT];
    gm_backend_ctx *fault_next; /* the memory-fault handler's registry (hsa_fault.c) */
    pthread_mutex_t pack_lock;  /* guards the three pack_ fields (taken before lock, never after) */
    gm__hsa_pack_state pack_state;
    gm_backend_module *pack_module;
    gm_backend_kernel *pack_kernel;
};

/* ---- the runtime's lifetime, GPU memory faults (hsa_fault.c); no lock held ---- */
/* hsa_init, and the system event handler for GPU memory faults registered once per runtime. */
gm_status gm__hsa_runtime_open(gm_backend_ctx *bctx);
gm_status gm__hsa_runtime_close(gm_backend_ctx *bctx);
/* Enter / leave the registry of contexts a memory fault on their GPU fails. */
void gm__hsa_fault_watch(gm_backend_ctx *bctx);
void gm__hsa_fault_unwatch(gm_backend_ctx *bctx);
/* Fail the context (queue error, memory fault): every wait ends with status; any thread. */
void gm__hsa_ctx_fail(gm_backend_ctx *bctx, gm_status status, const char *text);

/* ---- signals (hsa_signal.c); bctx->lock held unless noted ---- */
gm_status gm__hsa_sig_new(gm_backend_ctx *bctx, hsa_signal_value_t initial, gm__hsa_sig **sig_p);
gm__hsa_sig *gm__hsa_sig_ref(gm__hsa_sig *sig);
void gm__hsa_sig_unref(gm_backend_ctx *bctx, gm__hsa_sig *sig);
void gm__hsa_sig_cache_drain(gm_backend_ctx *bctx);
/* Whether the signal is done (< 1); no lock needed. */
bool gm__hsa_sig_done(const gm_backend_ctx *bctx, const gm__hsa_sig *sig);
/*
 * Async handlers ended, process-wide (hsa_stream.c): each handler's last step
 * adds one with release before it completes its signal, and whoever sees a
 * signal complete loads it with acquire (gm__hsa_sig_done, the waits). ROCr
 * orders the two already, but through signal memory and kernel events that
 * ThreadSanitizer cannot see; this is the edge it sees from a handler's
 * writes (a callback's, a host copy's, the work item it frees) to the thread
 * that waited, whichever context's stream the handler ran for.
 */
extern _Atomic unsigned long gm__hsa_handlers_ended;
/* Wait (no lock held) until sig < 1; fails if the context failed (a queue error, a GPU
 * memory fault, work stuck behind a failed operation: GM_ERR_CONTEXT_LOST). */
gm_status gm__hsa_sig_wait(gm_backend_ctx *bctx, gm__hsa_sig *sig, const char *what);
/* The same with bctx->lock held (kept held while waiting). */
gm_status gm__hsa_sig_wait_locked(gm_backend_ctx *bctx, gm__hsa_sig *sig, const char *what);
/* Fail the context when a pending operation waits for a failed (negative) signal, which
 * the runtime never starts. Lock held. */
void gm__hsa_check_stuck(gm_backend_ctx *bctx);
/* The stream whose host work (a stream callback...) this thread runs in an async handler;
 * NULL outside one. */
extern _Thread_local gm_backend_stream *gm__hsa_handler_stream;
/* For a query that found work pending: gm__hsa_check_stuck (at most every 10 ms: it looks
 * at every pending operation), then the context's failure (GM_ERR_CONTEXT_LOST...) as an
 * error naming `what`, or GM_OK. Lock held. */
gm_status gm__hsa_poll_failed(gm_backend_ctx *bctx, const char *what);
int64_t gm__hsa_now_ns(void);

/* ---- streams and operations (hsa_stream.c); bctx->lock held ---- */
gm_backend_stream *gm__hsa_stream_resolve(gm_backend_ctx *bctx, gm_backend_stream *stream);
/* packets: whether the operation may write AQL packets (a DMA copy or memset does not). */
gm_status gm__hsa_op_begin(gm_backend_ctx *bctx, gm_backend_stream *stream, hsa_signal_value_t n,
                           bool packets, const char *what, gm__hsa_op **op_p);
void gm__hsa_op_commit(gm_backend_ctx *bctx, gm_backend_stream *stream, gm__hsa_op *op);
void gm__hsa_op_abort(gm_backend_ctx *bctx, gm__hsa_op *op);
void gm__hsa_stream_reap(gm_backend_ctx *bctx, gm_backend_stream *stream);
/* Reap every stream of the context (after a context-wide or event wait). */
void gm__hsa_reap_all(gm_backend_ctx *bctx);
gm_status gm__hsa_stream_queue(gm_backend_ctx *bctx, gm_backend_stream *stream, hsa_queue_t **q_p);
void gm__hsa_stream_set_error(gm_backend_stream *stream, gm_status status, const char *text);
gm_status gm__hsa_stream_new(gm_backend_ctx *bctx, gm__hsa_stream_kind kind, unsigned flags,
                             gm_backend_stream **stream_p);
void gm__hsa_stream_free_all(gm_backend_ctx *bctx);
/* Unlist and free a wrapper (stream_wrap's). */
void gm__hsa_wrapper_free(gm_backend_ctx *bctx, gm_backend_stream *wrapper);
/* A thread exited (a gm__thread_watch function; arg is the context): retire its stream. */
void gm__hsa_thread_exited(void *arg, uint64_t key);
/* Commit op, then (lock released while waiting) wait for it: the synchronous path. */
gm_status gm__hsa_op_finish_sync(gm_backend_ctx *bctx, gm_backend_stream *stream, gm__hsa_op *op);
/* Run host work in stream order (an async handler on the op's dependencies). */
gm_status gm__hsa_host_work(gm_backend_ctx *bctx, gm_backend_stream *stream, gm__hsa_work *work,
                            gm__hsa_op *op);

/* Host work items (hsa_stream.c). */
struct gm__hsa_work {
    gm__hsa_work_kind kind;
    const gm__hsa_api *api;
    gm_backend_stream *stream;
    hsa_signal_t done;
    gm__hsa_sig *stamp_sig;     /* STAMP: where the time goes */
    gm_backend_host_work_fn fn; /* FN */
    void (*cleanup)(void *user);
    gm_backend_callback_fn callback; /* CALLBACK */
    void *user;
    gm_copy_desc copy; /* MEMCPY */
    bool pass_failure; /* a skipped step completes done with the failed dependency's value
                          (staging rows a DMA then copies: it must not start either) */
    bool sync;         /* for a synchronous call, which reports a skip (gm__hsa_op_finish_sync) */
};

/* ---- AQL packets (hsa_queue.c); bctx->lock held ---- */
#define GM_HSA_BARRIER_DEPS 5 /* dep_signal slots in a barrier-AND packet */
/* Packets an operation with ndeps dependencies may write: its barriers and one more. */
size_t gm__hsa_queue_packets_for(size_t ndeps);
/*
 * Wait until `queue` has npackets free slots. The lock is released while
 * waiting (host work, callbacks and other threads keep going; the caller
 * must hold no half-made state), so a full queue never blocks the context.
 * GM_ERR_UNSUPPORTED when npackets exceeds the queue; the queue's error
 * when it fails meanwhile.
 */
gm_status gm__hsa_queue_wait_room(gm_backend_ctx *bctx, hsa_queue_t *queue, size_t npackets,
                                  const char *what);
/* GM_ERR_UNSUPPORTED when npackets exceed a queue of `size` packets (no lock needed). */
gm_status gm__hsa_queue_check_size(size_t npackets, uint32_t size, const char *what);
/*
 * The dependencies a packet chain on stream's queue must name: op's, less
 * the stream's last packet (the barrier bit orders after it). *deps_p is
 * gm__malloc'ed (NULL when none). After submitting, call gm__hsa_queue_submitted.
 */
gm_status gm__hsa_queue_deps(gm_backend_stream *stream, const gm__hsa_op *op, gm__hsa_sig ***deps_p,
                             size_t *ndeps_p);
void gm__hsa_queue_submitted(gm_backend_ctx *bctx, gm_backend_stream *stream, gm__hsa_sig *done);
/* Barrier-AND packets waiting for deps (5 per packet), the last completing `completion`. */
gm_status gm__hsa_submit_barrier(gm_backend_ctx *bctx, hsa_queue_t *queue, gm__hsa_sig *const *deps,
                                 size_t ndeps, hsa_signal_t completion);
/* Barrier-AND packets for deps (if any), then the dispatch packet; one doorbell. */
gm_status gm__hsa_submit_dispatch(gm_backend_ctx *bctx, hsa_queue_t *queue,
                                  gm__hsa_sig *const *deps, size_t ndeps,
                                  const hsa_kernel_dispatch_packet_t *dispatch);

/* ---- memory helpers (hsa_memory.c) ---- */
/* Allocate from a CPU pool and allow the device to reach it when needed. */
gm_status gm__hsa_host_pool_alloc(gm_backend_ctx *bctx, hsa_amd_memory_pool_t pool, bool allow,
                                  size_t bytes, void **ptr_p);
/* Detach IPC imports still open (context teardown). Lock held. */
void gm__hsa_ipc_detach_all(gm_backend_ctx *bctx);
/*
 * The agent address of host memory for a DMA: registered or pool memory as
 * is, pageable memory locked (*locked_p receives a reference to release with
 * gm__hsa_lock_release when the operation is done; NULL when nothing was
 * locked). *split_p (nothing locked, *agent_p unset): the range is pageable
 * and a lock of another size starts at its address (any context's copy, a
 * registration it runs past), so locking it would make two registrations
 * there that libhsakmt could never unlock; the caller stages the copy. Lock
 * held.
 */
gm_status gm__hsa_host_for_dma(gm_backend_ctx *bctx, void *host, size_t extent, void **agent_p,
                               gm__hsa_lock **locked_p, bool *split_p);
/* Drop an operation's reference; the last one unlocks the memory. Lock held. */
void gm__hsa_lock_release(gm_backend_ctx *bctx, gm__hsa_lock *lock);
/* Drop a reference to a staging buffer; the last one frees it. Lock held. */
void gm__hsa_stage_unref(gm_backend_ctx *bctx, gm__hsa_stage *stage);
/* Sleep a little while waiting for the device: yield first, then 50 us naps. */
void gm__hsa_back_off(unsigned *rounds);
/* GM_OK when [addr, addr + bytes), the device side of an operation, lies inside one block
 * of memory the runtime knows (device, pool, registered, IPC); else GM_ERR_INVALID_ARG
 * naming fn, what ("destination"...) and the block. Any lock. */
gm_status gm__hsa_check_device_range(gm_backend_ctx *bctx, gm_devptr addr, size_t bytes,
                                     const char *fn, const char *what);
/* Unlock the host memory the context still has registered (fini). No lock held. */
void gm__hsa_unregister_all(gm_backend_ctx *bctx);
/* copy without the device-range check, for callers that bounded the range already. */
gm_status gm__hsa_copy_unchecked(gm_backend_ctx *bctx, const gm_copy_desc *desc,
                                 gm_backend_stream *stream);

gm_status gm__hsa_frontier_add(gm_backend_ctx *bctx, gm_backend_stream *stream, gm__hsa_sig *sig);

/* ---- the ops (one per gm_backend_ops slot; documented in backend.h) ---- */
gm_op_init gm__hsa_init;
gm_op_fini gm__hsa_fini;
gm_op_device_info gm__hsa_device_info;
gm_op_mem_info gm__hsa_mem_info;
gm_op_mem_alloc gm__hsa_mem_alloc;
gm_op_mem_free gm__hsa_mem_free;
gm_op_host_alloc gm__hsa_host_alloc;
gm_op_host_free gm__hsa_host_free;
gm_op_host_device_pointer gm__hsa_host_device_pointer;
gm_op_host_register gm__hsa_host_register;
gm_op_host_unregister gm__hsa_host_unregister;
gm_op_pointer_kind gm__hsa_pointer_kind;
gm_op_copy gm__hsa_copy;
gm_op_copy_strided gm__hsa_copy_strided;
/* Unload the packing kernel and destroy pack_lock (fini, after the streams are drained). */
void gm__hsa_pack_fini(gm_backend_ctx *bctx);
gm_op_memset gm__hsa_memset;
gm_op_stream_create gm__hsa_stream_create;
gm_op_stream_destroy gm__hsa_stream_destroy;
gm_op_stream_builtin gm__hsa_stream_builtin;
gm_op_stream_wrap gm__hsa_stream_wrap;
gm_op_stream_unwrap gm__hsa_stream_unwrap;
gm_op_stream_native gm__hsa_stream_native;
gm_op_stream_synchronize gm__hsa_stream_synchronize;
gm_op_stream_query gm__hsa_stream_query;
gm_op_stream_add_callback gm__hsa_stream_add_callback;
gm_op_stream_enqueue_host gm__hsa_stream_enqueue_host;
gm_op_device_synchronize gm__hsa_device_synchronize;
gm_op_event_create gm__hsa_event_create;
gm_op_event_destroy gm__hsa_event_destroy;
gm_op_event_record gm__hsa_event_record;
gm_op_stream_wait_event gm__hsa_stream_wait_event;
gm_op_event_query gm__hsa_event_query;
gm_op_event_synchronize gm__hsa_event_synchronize;
gm_op_event_elapsed gm__hsa_event_elapsed;
gm_op_module_load gm__hsa_module_load;
gm_op_module_unload gm__hsa_module_unload;
gm_op_module_get_kernel gm__hsa_module_get_kernel;
gm_op_module_get_global gm__hsa_module_get_global;
gm_op_module_set_global gm__hsa_module_set_global;
gm_op_kernel_attrs gm__hsa_kernel_attrs;
gm_op_launch gm__hsa_launch;
gm_op_ipc_get_handle gm__hsa_ipc_get_handle;
gm_op_ipc_open gm__hsa_ipc_open;
gm_op_ipc_close gm__hsa_ipc_close;

#endif /* GPUMEM_SRC_HSA_HSA_INTERNAL_H */
