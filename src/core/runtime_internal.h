/*
 * Internal structures of the backend-neutral runtime: the context, buffers
 * and arrays, streams, events, host-registration scopes, and the per-context
 * deallocation queue. Not installed.
 *
 * Locking: gm_context.lock guards the context's lists of streams, events and
 * scopes; gm__dealloc_queue.lock guards the queue, its statistics, its pool
 * of spare array blocks and the context's list of arrays (an array is listed
 * and unlisted in the same critical section that takes its block from the
 * pool or queues its memory); gm__dealloc_queue.flush_lock serializes
 * flushes. No backend op is called while gm__dealloc_queue.lock is
 * held, so a stream callback that releases an array cannot deadlock against a
 * flush.
 */
#ifndef GPUMEM_SRC_CORE_RUNTIME_INTERNAL_H
#define GPUMEM_SRC_CORE_RUNTIME_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "core.h"
#include "lock.h"

/* ------------------------------------------------------------- lists */

/* Intrusive circular doubly linked list; a context owns one sentinel per list. */
typedef struct gm__link {
    struct gm__link *prev;
    struct gm__link *next;
} gm__link;

#define GM__CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* An empty list. */
static inline void gm__list_init(gm__link *head)
{
    head->prev = head;
    head->next = head;
}

/* Append `link` at the tail of the list `head`. */
static inline void gm__list_push(gm__link *head, gm__link *link)
{
    link->prev = head->prev;
    link->next = head;
    head->prev->next = link;
    head->prev = link;
}

/* Unlink `link`, leaving its own links stale (for a node about to be relisted or freed). */
static inline void gm__list_unlink(gm__link *link)
{
    link->prev->next = link->next;
    link->next->prev = link->prev;
}

/* Unlink `link`; it then forms an empty list of its own. */
static inline void gm__list_remove(gm__link *link)
{
    gm__list_unlink(link);
    link->prev = link;
    link->next = link;
}

/* Whether the list holds no element. */
static inline bool gm__list_empty(const gm__link *head)
{
    return head->next == head;
}

/* ------------------------------------------------- deallocation queue */

/* What a queued entry releases, and which bound its bytes count against. */
typedef enum gm__dealloc_kind {
    GM__DEALLOC_DEVICE = 0,    /* device memory: mem_free; device bytes */
    GM__DEALLOC_PINNED = 1,    /* page-locked host memory: host_free; pinned bytes */
    GM__DEALLOC_MAPPED = 2,    /* mapped host memory: host_free; pinned bytes */
    GM__DEALLOC_MANAGED = 3,   /* managed memory: mem_free; device bytes */
    GM__DEALLOC_STREAM = 4,    /* a created stream: stream_destroy; count only */
    GM__DEALLOC_EVENT = 5,     /* an event: event_destroy; count only */
    GM__DEALLOC_MODULE = 6,    /* a module: entry->unload; count only */
    GM__DEALLOC_HOST_COPY = 7, /* gpumem-owned host memory (gm__malloc): gm__free; count only */
    GM__DEALLOC_FOREIGN = 8,   /* foreign memory: release_fn(handle); count only */
    GM__DEALLOC_WRAPPER = 9    /* a wrapped external stream's wrapper: stream_unwrap; count only */
} gm__dealloc_kind;

/* Unload function of a GM__DEALLOC_MODULE entry (the kernels code provides it). */
typedef gm_status (*gm__module_unload_fn)(gm_context *ctx, void *module);

/*
 * One pending deallocation {kind, handle, bytes}. Entries are allocated when
 * the resource is created (gm__dealloc_entry_create), so that releasing the
 * resource never needs memory and never fails; the queue owns an entry once
 * it is enqueued and frees it after the deallocation succeeded.
 *
 * A pooled entry heads a larger gm__malloc'd block (an array, its buffer and
 * this entry: array.c): the entry is the block's first member, so freeing
 * the entry frees the block, and when the queue is done with it the block
 * goes to the queue's pool of spare blocks (gm__dealloc_pool_take) instead.
 */
typedef struct gm__dealloc_entry {
    struct gm__dealloc_entry *next;
    gm__dealloc_kind kind;
    gm_devptr device;            /* DEVICE, MANAGED */
    void *handle;                /* PINNED, MAPPED, STREAM, EVENT, MODULE, HOST_COPY, FOREIGN */
    int64_t bytes;               /* memory kinds; 0 otherwise */
    void *owner;                 /* DEVICE, PINNED, MAPPED: the memory manager's token */
    bool immediate;              /* gm__dealloc_release frees at once instead of queueing */
    gm__module_unload_fn unload; /* MODULE */
    gm_foreign_release_fn release_fn; /* FOREIGN: called with handle */
    void *bookkeeping;                /* gm__free'd with the entry (e.g. a stream wrapper) */
    bool pooled;                      /* heads a block that goes back to the pool */
} gm__dealloc_entry;

/*
 * gpumem-owned host memory (host arrays: copy_to_host's new arrays) that the
 * queue has freed, kept for the next host array of the same size (dealloc.c):
 * the queue frees in batches, after which the C library returns large blocks
 * to the system, and every new array paid a page fault per page (a 4 MiB
 * copy_to_host cost 17x its memcpy). Blocks from GM__HOST_KEEP_MIN bytes, at
 * most GM__HOST_KEEP_BLOCKS of them and GM__HOST_KEEP_BYTES in all (the
 * oldest go first); freed with the context, and all at once when a host
 * allocation fails or an allocation's out-of-memory retry flushes.
 */
#define GM__HOST_KEEP_BLOCKS 16
#define GM__HOST_KEEP_BYTES  ((int64_t)128 << 20)
#define GM__HOST_KEEP_MIN    ((size_t)64 << 10)
typedef struct gm__host_keep {
    gm__lock lock;
    bool closed;   /* the context is going: keep nothing */
    int count;     /* blocks kept, oldest first */
    int64_t bytes; /* their sizes summed */
    void *ptr[GM__HOST_KEEP_BLOCKS];
    size_t size[GM__HOST_KEEP_BLOCKS];
} gm__host_keep;

/* A kept block of exactly `bytes` bytes, or NULL. */
void *gm__host_keep_take(gm__host_keep *keep, size_t bytes);
/* Free every kept block; `close`: keep none from now on. */
void gm__host_keep_purge(gm__host_keep *keep, bool close);
/* gm__malloc(bytes), tried once more after the kept blocks are freed if it fails. */
void *gm__host_keep_malloc(gm__host_keep *keep, size_t bytes);

typedef struct gm__dealloc_queue {
    gm__lock lock;              /* everything below but host_keep (never held across a call out) */
    pthread_mutex_t flush_lock; /* held by the one thread flushing */
    gm__dealloc_entry *head;
    gm__dealloc_entry *tail;
    int64_t count;
    int64_t device_bytes;
    int64_t pinned_bytes;
    int64_t max_count;        /* flush when count > max_count */
    int64_t max_device_bytes; /* flush when device_bytes > max_device_bytes */
    int64_t max_pinned_bytes; /* flush when pinned_bytes > max_pinned_bytes */
    int64_t flushes;
    int64_t peak_bytes;
    int64_t freed;
    _Atomic int64_t defer_depth; /* changed under lock; a drain also reads it without */
    gm__dealloc_entry *pool;     /* spare pooled blocks, linked through entry->next */
    int64_t pool_count;
    gm__host_keep host_keep; /* freed host-array memory for reuse (its own lock) */
} gm__dealloc_queue;

/* Initialize a queue with its bounds. */
gm_status gm__dealloc_queue_init(gm__dealloc_queue *queue, int64_t max_count,
                                 int64_t max_device_bytes, int64_t max_pinned_bytes);

/*
 * Free every pending entry regardless of defer_cleanup (context teardown);
 * failures are logged and the entry is dropped. Then destroy the queue.
 */
void gm__dealloc_queue_teardown(gm_context *ctx);
/*
 * After the backend's fini: free the entries queued since the teardown (by
 * callbacks the fini ran). Foreign memory and host buffers are released;
 * the other resources went with the backend (logged), except stream
 * wrappers, the expected ones, which need no release then.
 */
void gm__dealloc_queue_orphans(gm_context *ctx);

/* Allocate an empty entry of `kind`; errors name `fn`. */
gm_status gm__dealloc_entry_create(const char *fn, gm__dealloc_kind kind,
                                   gm__dealloc_entry **entry_p);

/* Free an entry that was never enqueued (not the resource it describes). NULL is accepted. */
void gm__dealloc_entry_discard(gm__dealloc_entry *entry);

/* A spare pooled block (its heading entry, contents stale), or NULL; queue lock held. */
gm__dealloc_entry *gm__dealloc_pool_take_locked(gm__dealloc_queue *queue);

/* Hand back a pooled block that is not queued; it is freed when the pool is full. */
void gm__dealloc_pool_put(gm_context *ctx, gm__dealloc_entry *entry);

/*
 * The pieces of gm__dealloc_release for a caller that holds the queue lock
 * anyway (array.c lists arrays under it): whether the entry is queued rather
 * than freed at once; append it with the lock held, returning whether an
 * automatic flush is due; and that flush, once the lock is released.
 */
bool gm__dealloc_would_queue(const gm__dealloc_entry *entry);
bool gm__dealloc_push_locked(gm__dealloc_queue *queue, gm__dealloc_entry *entry);
void gm__dealloc_flush_due(gm_context *ctx);

/*
 * A pooled block's entry may wait long in the queue: inside defer_cleanup,
 * or under a count bound past what the pool keeps. Held there, each entry
 * keeps its whole ~1.2 KiB block, and each new array takes a cold new one.
 * Whether to queue a compact copy of the entry instead (read without the
 * lock; a hint). Then gm__dealloc_push_copy_locked queues `copy` (a
 * gm__malloc'd entry, taken over) with the block's entry's contents and
 * puts the block in the pool; false in *block_kept_p: the pool is full,
 * free the block (gm__dealloc_block_free) once the lock is released.
 */
bool gm__dealloc_copy_wanted(const gm__dealloc_queue *queue);
bool gm__dealloc_push_copy_locked(gm__dealloc_queue *queue, gm__dealloc_entry *block,
                                  gm__dealloc_entry *copy, bool *block_kept_p);
void gm__dealloc_block_free(gm__dealloc_entry *block);

/* Free an entry's resource at once, to undo an allocation; the entry stays the caller's. */
gm_status gm__dealloc_free_now(gm_context *ctx, const gm__dealloc_entry *entry);

/*
 * Hand an entry to the queue (ownership passes). If a bound is exceeded and
 * no defer_cleanup scope is open, flush; a failing automatic flush is logged.
 */
void gm__dealloc_enqueue(gm_context *ctx, gm__dealloc_entry *entry);

/*
 * Hand an entry to the queue without flushing: for stream-ordered cleanups
 * that run on backend worker threads, so that no deallocation (and no
 * bookkeeping free) happens on those threads.
 */
void gm__dealloc_enqueue_no_flush(gm_context *ctx, gm__dealloc_entry *entry);

/*
 * The last reference to an entry's resource went: release it now when
 * entry->immediate (a failure is logged; the entry is freed either way),
 * except inside a stream callback; otherwise hand it to the queue.
 */
void gm__dealloc_release(gm_context *ctx, gm__dealloc_entry *entry);

/* Flush now unless inside defer_cleanup; stops at the first failure. */
gm_status gm__dealloc_flush(gm_context *ctx, const char *fn);

/*
 * Allocations with Numba's out-of-memory rule: on GM_ERR_OUT_OF_DEVICE_MEMORY
 * or GM_ERR_NO_MEMORY, flush the queue and retry once (not inside
 * defer_cleanup, where nothing may be freed).
 */
gm_status gm__alloc_device(gm_context *ctx, size_t bytes, gm_devptr *ptr_p, void **owner_p);
/* The same rule when the caller made the first attempt itself and it returned `status`;
 * `mark` is gm__error_mark() from before that attempt (a successful retry goes back to it). */
gm_status gm__alloc_device_failed(gm_context *ctx, gm_status status, uint64_t mark, size_t bytes,
                                  gm_devptr *ptr_p, void **owner_p);
gm_status gm__alloc_host(gm_context *ctx, size_t bytes, unsigned flags, void **ptr_p,
                         void **owner_p);
gm_status gm__alloc_managed(gm_context *ctx, size_t bytes, gm_devptr *ptr_p);
/* Registration of host memory (gm_pin, gm_map, gm_register: the manager's mempin). */
gm_status gm__pin_host(gm_context *ctx, void *start, size_t bytes, bool mapped, void **owner_p);

/* ----------------------------------------------------- memory manager */

/* The context's memory manager (src/core/emm.c, gpumem/memory_manager.h). */
typedef struct gm__mm {
    gm_memory_manager table;        /* resolved copy: NULL optional slots filled with defaults */
    const gm_memory_manager *given; /* the table the context runs (gm_context_memory_manager) */
    void *user;                     /* options.memory_manager_user */
    gm_memory_manager_base base;    /* the backend-facing allocator passed to every call */
    void *plugin;                   /* dlopen handle of a GM_MEMORY_MANAGER plugin, or NULL */
    bool defer_device;              /* memfree goes through the queue */
    bool defer_host;                /* memhostfree goes through the queue */
    bool direct_device;             /* memalloc / memfree are the built-in ones: call the backend */
    bool initialized;               /* initialize succeeded: reset is due */
} gm__mm;

/*
 * Choose the manager (options, else the GM_MEMORY_MANAGER plugin, else the
 * built-in one), check its table and fill ctx->mm. Needs ctx->ops and
 * ctx->device_id; calls nothing of the manager yet.
 */
gm_status gm__mm_open(gm_context *ctx, const gm_context_options *options);

/* The manager's initialize (once the backend runs). */
gm_status gm__mm_initialize(gm_context *ctx);

/* The manager's reset if initialize succeeded; a failure is logged. */
void gm__mm_reset(gm_context *ctx);

/* Unload the plugin, if any (after the backend shut down). */
void gm__mm_unload(gm_context *ctx);

/*
 * Calls of the manager. A failure that the base did not describe gets a
 * message naming the manager and the call; memalloc / memhostalloc returning
 * no address is GM_ERR_INTERNAL.
 */
gm_status gm__mm_memalloc(gm_context *ctx, size_t bytes, gm_devptr *ptr_p, void **owner_p);
gm_status gm__mm_memhostalloc(gm_context *ctx, size_t bytes, unsigned flags, void **ptr_p,
                              void **owner_p);
gm_status gm__mm_mempin(gm_context *ctx, void *ptr, size_t bytes, bool mapped, void **owner_p);
gm_status gm__mm_memunpin(gm_context *ctx, void *ptr, size_t bytes, void *owner);
gm_status gm__mm_memory_info(gm_context *ctx, int64_t *free_p, int64_t *total_p);
gm_status gm__mm_defer_begin(gm_context *ctx);
gm_status gm__mm_defer_end(gm_context *ctx);

/* Free the memory of a DEVICE, MANAGED, PINNED or MAPPED entry. */
gm_status gm__mm_free(gm_context *ctx, const gm__dealloc_entry *entry);

/* --------------------------------------------------------- the context */

struct gm_context {
    const gm_backend_ops *ops;
    gm_backend_ctx *bctx;
    int32_t device_id;
    int64_t total_memory;
    gm_context_options options;
    gm__mm mm;
    gm__dealloc_queue queue;
    /* gm_array.link, guarded by queue.lock: arrays whose memory the backend's pointer_kind
     * names by itself (device memory of the built-in manager, host memory, none) in `arrays`,
     * the rest (pinned, mapped, managed, a memory manager's, foreign) in `arrays_named`, the
     * only ones gm_pointer_kind must look through (gm__buffer.named) */
    gm__link arrays;
    gm__link arrays_named;
    pthread_mutex_t lock;       /* the lists below */
    gm__link streams;           /* gm_stream.link: created, built-in and wrapped */
    gm_stream *builtin_last[3]; /* per gm_builtin_stream: the wrapper builtin_locked gave last
                                 * (stream.c; ctx->lock), or NULL */
    gm__link dying;             /* gm_stream.link: created streams whose destroy is queued */
    gm__link events;            /* gm_event.link */
    gm__link scopes;            /* gm_host_scope.link */
    gm__link exports;     /* live DLPack exports (dlpack.c); guarded by dlpack.c's global lock */
    void *done_callbacks; /* finished stream-callback trampolines (stream.c); queue.lock */
    gm__link pending_callbacks; /* queued user callbacks not yet run (stream.c); queue.lock */
    _Atomic int64_t callbacks_running;  /* trampolines between entry and their last touch */
    _Atomic uint64_t callbacks_entered; /* trampolines entered so far (progress) */
    atomic_bool callbacks_abandoned;    /* teardown went on without them: skip their fn */
    atomic_bool closing;                /* gm_context_destroy has begun: no new stream work */
};

/* Whether this build has the backend of `kind` (host always). */
int gm__backend_compiled(gm_backend_kind kind);

/*
 * Create a context on an explicit ops table (tests use this to wrap the host
 * backend with fault injection). `options` NULL means the defaults; the
 * options' backend field is ignored.
 */
gm_status gm__context_create_with_ops(const gm_backend_ops *ops, const gm_context_options *options,
                                      gm_context **ctx_p);

/* GM_ERR_NULL_POINTER naming `fn` when ctx is NULL. */
gm_status gm__check_context(const char *fn, const gm_context *ctx);

/* A backend's device_info as the core gives it on: no opt-in limit below the default one. */
static inline void gm__device_info_complete(gm_device_info *info)
{
    if (info->shared_memory_per_block_optin < info->shared_memory_per_block)
        info->shared_memory_per_block_optin = info->shared_memory_per_block;
}

/*
 * Context teardown: detach every live DLPack export of `ctx` (dlpack.c), so
 * that its deleter, called later, frees only the export's own allocation.
 * Waits for deleters already running on other threads. The detached exports
 * keep their array references: the arrays are freed (and reported) with the
 * context's live arrays. Returns how many exports were detached.
 */
int64_t gm__dlpack_detach_exports(gm_context *ctx);

/* ---------------------------------------------------- buffers, arrays */

/* A refcounted allocation shared by the arrays that view it. */
typedef struct gm__buffer {
    gm_context *ctx;
    gm_memory_kind memory;    /* memory kind of the views */
    bool named;               /* its arrays are on ctx->arrays_named, not ctx->arrays */
    uintptr_t base;           /* address the views use (device or host), 0 if no memory */
    int64_t bytes;            /* 0: no memory (size-0 arrays) */
    _Atomic int64_t refcount; /* one per gm_array */
    gm__dealloc_entry *entry; /* filled at allocation; NULL when no memory */
    gm__dealloc_entry *block; /* the pooled entry heading the block it lives in, or NULL */
    /* MAPPED: the device address of base, read at allocation (gm__array_create) or when
     * gm_array_device_view gives one; 0 when the backend has none. On CUDA write-combined
     * memory's is not its host address (cuda.h, "Disjoint Addressing") */
    _Atomic uintptr_t device;
} gm__buffer;

struct gm_array {
    gm__link link; /* in ctx->arrays or ctx->arrays_named (buffer->named) */
    gm_context *ctx;
    gm__buffer *buffer;
    _Atomic int64_t refcount;
    bool in_block; /* part of its buffer's block (gm__array_create), not gm__malloc'd alone */
    gm_ndview view;
};

/*
 * Allocate an array of `memory` kind (DEVICE, PINNED, MAPPED, HOST) whose
 * layout is `layout` (shape, strides, dtype; data and offset ignored). The
 * allocation covers the layout's byte extent; data/offset are set so every
 * element is inside it. host_flags are gm_host_flags for PINNED / MAPPED.
 */
gm_status gm__array_create(gm_context *ctx, const char *fn, const gm_ndview *layout,
                           gm_memory_kind memory, unsigned host_flags, gm_array **array_p);

/*
 * A new array viewing memory gpumem did not allocate: its buffer covers the
 * byte extent of `view` and takes over `entry` (NULL: nothing to release)
 * on success only.
 */
gm_status gm__array_wrap_foreign(gm_context *ctx, const char *fn, const gm_ndview *view,
                                 gm__dealloc_entry *entry, gm_array **array_p);

/* gm_array_from_foreign with messages naming `fn` (the DLPack imports). */
gm_status gm__array_from_foreign(const char *fn, gm_context *ctx, const gm_ndview *view,
                                 gm_foreign_release_fn release, void *release_user,
                                 gm_stream *stream, gm_array **array_p);

/* Validate an array argument: non-NULL and, when ctx is given, of that context. */
gm_status gm__check_array(const char *fn, const gm_array *array, const gm_context *ctx);

/* Context teardown: free every array still alive; returns how many and their bytes. */
void gm__arrays_teardown(gm_context *ctx, int64_t *arrays_p, int64_t *buffers_p, int64_t *bytes_p);

/* ---------------------------------------------------- copies and fills */

/* gm_copy's engine; messages start with `fn`. */
gm_status gm__copy(const char *fn, gm_context *ctx, const gm_ndview *dst, const gm_ndview *src,
                   gm_stream *stream);

/*
 * gm__copy without its first fast path (two C-contiguous sides alike, copy.c
 * c_dense_pair): the same statuses, messages and results by another route,
 * for the tests that compare the two on the same inputs.
 */
gm_status gm__copy_general(const char *fn, gm_context *ctx, const gm_ndview *dst,
                           const gm_ndview *src, gm_stream *stream);

/* Set every element of `view` (memory of ctx) to the itemsize bytes at `value`. */
gm_status gm__fill(const char *fn, gm_context *ctx, const gm_ndview *view, const void *value,
                   gm_stream *stream);

/* Set every byte of the elements of `view` to `byte`. */
gm_status gm__memset(const char *fn, gm_context *ctx, const gm_ndview *view, unsigned char byte,
                     gm_stream *stream);

/* ------------------------------------------------------ streams, events */

typedef enum gm__stream_kind {
    GM__STREAM_CREATED = 0, /* gm_stream_create: destroyed through the queue */
    GM__STREAM_BUILTIN = 1, /* default / legacy / per-thread: owned by the context */
    GM__STREAM_EXTERNAL = 2 /* gm_stream_wrap_external: only the wrapper goes, through the queue */
} gm__stream_kind;

struct gm_stream {
    gm__link link; /* in ctx->streams */
    gm_context *ctx;
    gm_backend_stream *bstream;
    gm__stream_kind kind;
    gm_builtin_stream builtin;       /* for GM__STREAM_BUILTIN */
    _Atomic int64_t auto_sync_depth; /* gm_stream_auto_synchronize_begin/end nesting */
    uint64_t serial;                 /* unique in the process (a freed wrapper's address is not) */
    gm__dealloc_entry *entry;        /* created and external: preallocated queue entry */
    _Atomic int64_t holds;    /* external: the user's handle and each callback queued through it */
    gm__link per_thread_link; /* the per-thread handle: in stream.c's live list */
    void *dying_native;       /* created, in ctx->dying: its native handle (refused by wraps) */
};

/*
 * The backend stream of an optional stream argument: NULL gives NULL
 * (synchronous); a stream of another context is GM_ERR_WRONG_CONTEXT.
 */
gm_status gm__stream_backend(const char *fn, const gm_context *ctx, const gm_stream *stream,
                             gm_backend_stream **bstream_p);

/*
 * The deallocation queue is done with a created stream's entry (its destroy
 * reached the backend, or teardown dropped it): unlist it from ctx->dying, so
 * that its native handle is no longer refused by gm_stream_wrap_external on
 * that account (the backend refuses a destroyed one itself).
 */
void gm__stream_dead(gm_stream *stream);

/*
 * Whether the calling thread is running a gm_stream_callback. Deallocations
 * released there are only queued (no flush runs on a driver/worker thread:
 * CUDA forbids driver calls in stream callbacks).
 */
bool gm__in_stream_callback(void);

/*
 * GM_OK unless a synchronous operation on device memory (stream NULL), which
 * waits for the legacy stream, is made inside a stream callback:
 * GM_ERR_STATE then (the wait could wait for the callback's own stream, a
 * hang; runtime.h forbids it). Host-only operations wait for nothing.
 */
gm_status gm__sync_allowed(const char *fn, const gm_stream *stream);

/* A backend query's status for the public call fn: GM_ERR_NOT_READY with `pending` as its
 * message, another error with fn before the backend's message (stream.c). */
gm_status gm__query_result(const char *fn, gm_status status, const char *pending);

/* Context teardown, once the streams are idle: log the errors they still hold. */
void gm__streams_report_errors(gm_context *ctx);
/* Context teardown, when its device wait failed: wait while queued user callbacks still
 * run or start (not for ones stuck behind work that never starts). */
void gm__streams_wait_callbacks(gm_context *ctx);
/* Context teardown, after the backend's fini: free (and log) the user callbacks that never
 * ran (a failed context's; no backend can call them any more), with the wrappers they held. */
void gm__streams_free_unrun(gm_context *ctx);
/* Context teardown: destroy created streams, unwrap external ones, free built-in wrappers. */
void gm__streams_teardown(gm_context *ctx);
/* After the backend is gone: free the finished stream-callback trampolines. */
void gm__streams_free_callbacks(gm_context *ctx);

struct gm_event {
    gm__link link; /* in ctx->events */
    gm_context *ctx;
    gm_backend_event *bevent;
    bool timing;
    atomic_bool recorded; /* gm_event_record succeeded at least once */
    gm__dealloc_entry *entry;
};

/* Context teardown: queue every event still alive. */
void gm__events_teardown(gm_context *ctx);

/* -------------------------------------------------- host registration */

/* One registered (page-locked) host range. */
typedef struct gm__host_range {
    uintptr_t start;
    size_t bytes;
    gm_devptr device; /* device address of start (mapped scopes) */
    void *owner;      /* the memory manager's mempin token */
} gm__host_range;

struct gm_host_scope {
    gm__link link; /* in ctx->scopes */
    gm_context *ctx;
    bool mapped;
    int nranges;
    gm__host_range *ranges;
};

/* Context teardown: undo every registration still in place (logged). */
void gm__scopes_teardown(gm_context *ctx);

#endif /* GPUMEM_SRC_CORE_RUNTIME_INTERNAL_H */
