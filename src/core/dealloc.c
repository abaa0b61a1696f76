/*
 * The per-context deallocation queue (DESIGN.md "Deallocation queue",
 * Numba's "Deallocation Behavior"): a FIFO of {kind, handle, bytes}.
 *
 * Memory is allocated and freed through the context's memory manager
 * (emm.c); its frees come here unless the manager frees at once (entries
 * marked immediate: external managers without GM_MEMORY_MANAGER_DEFERRED_FREE,
 * foreign memory), and so does every release inside a stream callback.
 *
 * Releasing a resource appends its (preallocated) entry. The queue is
 * flushed when more than max_count entries are pending, when pending device
 * bytes exceed max_device_bytes (ratio x total device memory), when pending
 * pinned/mapped host bytes exceed max_pinned_bytes, when an allocation runs
 * out of memory (then the allocation is retried once), on
 * gm_deallocations_flush() and at context teardown. Streams, events,
 * modules and gpumem's own host buffers count toward the count bound only.
 *
 * Inside gm_defer_cleanup_begin/end nothing is freed, not even to satisfy an
 * out-of-memory retry (Numba's defer_cleanup behaves the same way).
 *
 * A flush frees entries in FIFO order and stops at the first failing
 * deallocation: that entry and all after it stay queued, and the counters
 * keep describing exactly what is still pending. The queue lock is never held
 * across a backend call; one flush runs at a time (flush_lock). Automatic
 * flushes only try the flush lock: if another thread is flushing, it drains
 * the entry just added as well.
 *
 * A drain works in batches: it detaches every pending entry under one lock,
 * frees them in order without the lock (the counters still count them,
 * while the drain sums the weights of those it passes), and settles the
 * batch under one more: uncounts what was freed (those sums: the counters
 * end exactly as if each entry had been uncounted on its own), puts back at
 * the head what was not (a failure, or a defer scope that opened
 * meanwhile), and returns pooled blocks to the pool (at most POOL_MAX;
 * array.c takes them for new arrays), the released run of the batch at once
 * when every entry of it heads a pooled block and fits. It repeats until the
 * queue is empty.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "runtime_internal.h"

#define GM__MESSAGE_COPY_MAX 512

/* Most spare pooled blocks a queue keeps (each about 1.2 KiB). */
#define POOL_MAX 64

/* How a drain treats failures: stop there (normal) or log and drop (teardown). */
typedef enum drain_mode { DRAIN_NORMAL = 0, DRAIN_TEARDOWN = 1 } drain_mode;

/* Name of an entry kind for messages. */
static const char *kind_name(gm__dealloc_kind kind)
{
    static const char *const names[] = {"device memory",
                                        "pinned host memory",
                                        "mapped host memory",
                                        "managed memory",
                                        "stream",
                                        "event",
                                        "module",
                                        "host buffer",
                                        "foreign memory",
                                        "stream wrapper"};

    if ((int)kind < 0 || (size_t)kind >= sizeof(names) / sizeof(names[0]))
        return "resource";
    return names[kind];
}

/* Whether an entry's bytes count as device bytes. */
static bool counts_device(gm__dealloc_kind kind)
{
    return kind == GM__DEALLOC_DEVICE || kind == GM__DEALLOC_MANAGED;
}

/* Whether an entry's bytes count as pinned host bytes. */
static bool counts_pinned(gm__dealloc_kind kind)
{
    return kind == GM__DEALLOC_PINNED || kind == GM__DEALLOC_MAPPED;
}

/* An empty queue with its bounds and locks. */
gm_status gm__dealloc_queue_init(gm__dealloc_queue *queue, int64_t max_count,
                                 int64_t max_device_bytes, int64_t max_pinned_bytes)
{
    memset(queue, 0, sizeof(*queue));
    atomic_init(&queue->defer_depth, 0);
    gm__lock_init(&queue->lock);
    gm__lock_init(&queue->host_keep.lock);
    if (pthread_mutex_init(&queue->flush_lock, NULL) != 0)
        return gm__error(GM_ERR_NO_MEMORY, "gm_context_create: cannot create the flush lock");
    queue->max_count = max_count;
    queue->max_device_bytes = max_device_bytes;
    queue->max_pinned_bytes = max_pinned_bytes;
    return GM_OK;
}

/* A zeroed entry, allocated up front so that releasing never needs memory. */
gm_status gm__dealloc_entry_create(const char *fn, gm__dealloc_kind kind,
                                   gm__dealloc_entry **entry_p)
{
    gm__dealloc_entry *entry = gm__calloc(1, sizeof(*entry));

    if (entry == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory for a queue entry", fn);
    entry->kind = kind;
    *entry_p = entry;
    return GM_OK;
}

/* Free an entry that never reached the queue. */
void gm__dealloc_entry_discard(gm__dealloc_entry *entry)
{
    gm__free(entry);
}

/* Put a done pooled entry's block in the pool if there is room (queue lock held). */
static bool pool_push(gm__dealloc_queue *q, gm__dealloc_entry *entry)
{
    if (!entry->pooled || q->pool_count >= POOL_MAX)
        return false;
    entry->next = q->pool;
    q->pool = entry;
    q->pool_count++;
    return true;
}

/* Free a done entry and its bookkeeping (a pooled entry: its whole block). */
static void entry_free(gm__dealloc_entry *entry)
{
    if (entry->kind == GM__DEALLOC_STREAM && !entry->pooled && entry->bookkeeping != NULL)
        gm__stream_dead(entry->bookkeeping);
    gm__free(entry->bookkeeping);
    gm__free(entry);
}

/* A spare block from the pool, or NULL (queue lock held). */
gm__dealloc_entry *gm__dealloc_pool_take_locked(gm__dealloc_queue *q)
{
    gm__dealloc_entry *entry = q->pool;

    if (entry != NULL) {
        q->pool = entry->next;
        q->pool_count--;
    }
    return entry;
}

/* Return an unused pooled block, or free it when the pool is full. */
void gm__dealloc_pool_put(gm_context *ctx, gm__dealloc_entry *entry)
{
    bool kept = false;

    gm__lock_take(&ctx->queue.lock);
    kept = pool_push(&ctx->queue, entry);
    gm__lock_give(&ctx->queue.lock);
    if (!kept)
        entry_free(entry);
}

/* Give a done entry back: to the pool, or freed. */
static void entry_done(gm_context *ctx, gm__dealloc_entry *entry)
{
    if (entry->pooled)
        gm__dealloc_pool_put(ctx, entry);
    else
        entry_free(entry);
}

/* Whether an automatic flush is due: a bound exceeded outside defer_cleanup (queue lock held). */
static bool flush_due_locked(const gm__dealloc_queue *q)
{
    return q->defer_depth == 0 &&
           (q->count > q->max_count || q->device_bytes > q->max_device_bytes ||
            q->pinned_bytes > q->max_pinned_bytes);
}

/* Add or remove an entry's weight from the counters (queue lock held). */
static void account(gm__dealloc_queue *q, const gm__dealloc_entry *entry, int64_t sign)
{
    q->count += sign;
    if (counts_device(entry->kind))
        q->device_bytes += sign * entry->bytes;
    if (counts_pinned(entry->kind))
        q->pinned_bytes += sign * entry->bytes;
    if (q->device_bytes + q->pinned_bytes > q->peak_bytes)
        q->peak_bytes = q->device_bytes + q->pinned_bytes;
}

/* Append an entry (queue lock held); return whether an automatic flush is due. */
bool gm__dealloc_push_locked(gm__dealloc_queue *q, gm__dealloc_entry *entry)
{
    entry->next = NULL;
    if (q->tail == NULL)
        q->head = entry;
    else
        q->tail->next = entry;
    q->tail = entry;
    account(q, entry, 1);
    return flush_due_locked(q);
}

/* Whether a pooled block's entry is better queued as a copy (runtime_internal.h). */
bool gm__dealloc_copy_wanted(const gm__dealloc_queue *q)
{
    return atomic_load_explicit(&q->defer_depth, memory_order_relaxed) > 0 ||
           q->max_count >= POOL_MAX; /* set at creation */
}

/* Queue a copy of a pooled block's entry and pool the block (queue lock held). */
bool gm__dealloc_push_copy_locked(gm__dealloc_queue *q, gm__dealloc_entry *block,
                                  gm__dealloc_entry *copy, bool *block_kept_p)
{
    *copy = *block;
    copy->pooled = false; /* freed alone when done */
    *block_kept_p = pool_push(q, block);
    return gm__dealloc_push_locked(q, copy);
}

/* Free a pooled block that is neither queued nor pooled. */
void gm__dealloc_block_free(gm__dealloc_entry *block)
{
    entry_free(block);
}

/* Append an entry; return whether an automatic flush is due. */
static bool push(gm__dealloc_queue *q, gm__dealloc_entry *entry)
{
    bool due = false;

    gm__lock_take(&q->lock);
    due = gm__dealloc_push_locked(q, entry);
    gm__lock_give(&q->lock);
    return due;
}

/* ----------------------------------------------------- kept host memory */

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GM__KEEP_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(GM__KEEP_ASAN)
#define GM__KEEP_ASAN 1
#endif
#if defined(GM__KEEP_ASAN)
#include <sanitizer/asan_interface.h>
/* A kept block is poisoned, so that a use after its array's release still shows. */
#define KEEP_POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define KEEP_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define KEEP_POISON(p, n)   ((void)(p), (void)(n))
#define KEEP_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* Remove kept block i (lock held). */
static void *keep_remove_locked(gm__host_keep *keep, int i)
{
    void *ptr = keep->ptr[i];

    keep->bytes -= (int64_t)keep->size[i];
    keep->count--;
    memmove(&keep->ptr[i], &keep->ptr[i + 1], (size_t)(keep->count - i) * sizeof keep->ptr[0]);
    memmove(&keep->size[i], &keep->size[i + 1], (size_t)(keep->count - i) * sizeof keep->size[0]);
    return ptr;
}

/*
 * Keep a freed host block of `bytes` for reuse, the oldest going to make
 * room; false when it is not kept (too small or too large, the context
 * going): the caller frees it.
 */
static bool host_keep_put(gm__host_keep *keep, void *ptr, size_t bytes)
{
    void *evicted[GM__HOST_KEEP_BLOCKS];
    size_t evicted_size[GM__HOST_KEEP_BLOCKS];
    int n = 0;

    if (ptr == NULL || bytes < GM__HOST_KEEP_MIN || (int64_t)bytes > GM__HOST_KEEP_BYTES)
        return false;
    gm__lock_take(&keep->lock);
    if (keep->closed) {
        gm__lock_give(&keep->lock);
        return false;
    }
    while (keep->count == GM__HOST_KEEP_BLOCKS ||
           keep->bytes + (int64_t)bytes > GM__HOST_KEEP_BYTES) {
        evicted_size[n] = keep->size[0];
        evicted[n++] = keep_remove_locked(keep, 0);
    }
    keep->ptr[keep->count] = ptr;
    keep->size[keep->count++] = bytes;
    keep->bytes += (int64_t)bytes;
    KEEP_POISON(ptr, bytes);
    gm__lock_give(&keep->lock);
    for (int i = 0; i < n; i++) {
        KEEP_UNPOISON(evicted[i], evicted_size[i]);
        gm__free(evicted[i]);
    }
    return true;
}

void *gm__host_keep_take(gm__host_keep *keep, size_t bytes)
{
    void *ptr = NULL;

    if (bytes < GM__HOST_KEEP_MIN)
        return NULL;
    gm__lock_take(&keep->lock);
    for (int i = keep->count - 1; i >= 0 && ptr == NULL; i--) { /* the newest, warmest first */
        if (keep->size[i] == bytes)
            ptr = keep_remove_locked(keep, i);
    }
    gm__lock_give(&keep->lock);
    if (ptr != NULL)
        KEEP_UNPOISON(ptr, bytes);
    return ptr;
}

void gm__host_keep_purge(gm__host_keep *keep, bool close)
{
    void *ptr[GM__HOST_KEEP_BLOCKS];
    size_t size[GM__HOST_KEEP_BLOCKS];
    int n = 0;

    gm__lock_take(&keep->lock);
    keep->closed = keep->closed || close;
    n = keep->count;
    memcpy(ptr, keep->ptr, (size_t)n * sizeof ptr[0]);
    memcpy(size, keep->size, (size_t)n * sizeof size[0]);
    keep->count = 0;
    keep->bytes = 0;
    gm__lock_give(&keep->lock);
    for (int i = 0; i < n; i++) {
        KEEP_UNPOISON(ptr[i], size[i]);
        gm__free(ptr[i]);
    }
}

void *gm__host_keep_malloc(gm__host_keep *keep, size_t bytes)
{
    void *ptr = gm__malloc(bytes);

    if (ptr == NULL) { /* the kept blocks first, then the queue's retry */
        gm__host_keep_purge(keep, false);
        ptr = gm__malloc(bytes);
    }
    return ptr;
}

/* Release the resource an entry describes (memory through the memory manager). */
static gm_status release(gm_context *ctx, const gm__dealloc_entry *entry)
{
    const gm_backend_ops *ops = ctx->ops;

    switch (entry->kind) {
    case GM__DEALLOC_DEVICE:
    case GM__DEALLOC_MANAGED:
    case GM__DEALLOC_PINNED:
    case GM__DEALLOC_MAPPED:
        return gm__mm_free(ctx, entry);
    case GM__DEALLOC_FOREIGN:
        entry->release_fn(entry->handle);
        return GM_OK;
    case GM__DEALLOC_STREAM: {
        gm_status status = ops->stream_destroy(ctx->bctx, entry->handle);

        /* The backend refuses the handle itself now; it may be reused at once (entry_free,
         * after the batch, would unlist it too late). */
        if (status == GM_OK && entry->bookkeeping != NULL)
            gm__stream_dead(entry->bookkeeping);
        return status;
    }
    case GM__DEALLOC_EVENT:
        return ops->event_destroy(ctx->bctx, entry->handle);
    case GM__DEALLOC_MODULE:
        return entry->unload != NULL ? entry->unload(ctx, entry->handle) : GM_OK;
    case GM__DEALLOC_HOST_COPY:
        if (!host_keep_put(&ctx->queue.host_keep, entry->handle, (size_t)entry->bytes))
            gm__free(entry->handle);
        return GM_OK;
    case GM__DEALLOC_WRAPPER:
        ops->stream_unwrap(ctx->bctx, entry->handle);
        return GM_OK;
    }
    return gm__error(GM_ERR_INTERNAL, "deallocation queue: unknown entry kind %d",
                     (int)entry->kind);
}

/*
 * Whether queued device work may still use what releasing an entry of this
 * kind frees. Not a stream's or an event's (their backends free them once
 * their work is done), nor a stream wrapper's: it is queued once no callback
 * queued through it is pending, and the backends resolve a wrapper to its
 * stream when work is queued.
 */
static bool needs_idle_device(gm__dealloc_kind kind)
{
    return kind != GM__DEALLOC_STREAM && kind != GM__DEALLOC_EVENT && kind != GM__DEALLOC_WRAPPER;
}

/*
 * Before freeing memory, a host copy, foreign memory or a module: wait for
 * the work queued on the context's streams, which may still use it (as
 * cuMemFree synchronizes implicitly; HSA's pool free and the simulator's
 * free do not). A failure is logged and the release goes on.
 */
static void wait_device_idle(gm_context *ctx)
{
    uint64_t mark = gm__error_mark();

    if (ctx->ops->device_synchronize(ctx->bctx) != GM_OK) {
        gm__log(GM_LOG_WARN, "deallocation queue: waiting for queued device work failed: %s",
                gm_last_error_message());
        gm__error_back_to(mark); /* logged; not the error of the call that flushed */
    }
}

/* Record a failed deallocation with the backend's detail appended. */
static gm_status report_failure(const char *fn, gm_status status, const gm__dealloc_entry *entry)
{
    char detail[GM__MESSAGE_COPY_MAX];

    snprintf(detail, sizeof(detail), "%s", gm_last_error_message());
    if (entry->kind == GM__DEALLOC_DEVICE || entry->kind == GM__DEALLOC_MANAGED)
        return gm__error(status, "%s: freeing %s at 0x%" PRIx64 " (%" PRId64 " bytes) failed: %s",
                         fn, kind_name(entry->kind), (uint64_t)entry->device, entry->bytes, detail);
    return gm__error(status, "%s: freeing %s %p (%" PRId64 " bytes) failed: %s", fn,
                     kind_name(entry->kind), entry->handle, entry->bytes, detail);
}

/* Whether a drain in `mode` may free now (a defer scope stops a normal one). */
static bool may_free(const gm__dealloc_queue *q, drain_mode mode)
{
    return mode == DRAIN_TEARDOWN ||
           atomic_load_explicit(&q->defer_depth, memory_order_relaxed) == 0;
}

/* Take every pending entry for a drain (queue lock held); NULL when there is none to free. */
static gm__dealloc_entry *detach(gm__dealloc_queue *q, drain_mode mode)
{
    gm__dealloc_entry *batch = q->head;

    if (batch == NULL || !may_free(q, mode))
        return NULL;
    q->head = NULL;
    q->tail = NULL;
    return batch;
}

/*
 * One drain pass's results: the first entry not released, how many were
 * freed, and what settle() uncounts and pools: the entries released (passed:
 * freed, or dropped at teardown), from the batch's head up to rest.
 */
typedef struct batch_result {
    gm__dealloc_entry *rest; /* NULL when every entry was released */
    gm__dealloc_entry *last; /* the last entry released, NULL when none */
    int64_t freed;           /* successful deallocations */
    int64_t released;        /* entries released */
    int64_t device_bytes;    /* their device bytes (counts_device) */
    int64_t pinned_bytes;    /* their pinned bytes (counts_pinned) */
    int64_t pooled;          /* those of them that head pooled blocks */
    gm_status status;        /* the first failure */
} batch_result;

/* Count the entry at result->rest as released and step past it. */
static void pass_entry(batch_result *result)
{
    gm__dealloc_entry *entry = result->rest;

    result->released++;
    if (counts_device(entry->kind))
        result->device_bytes += entry->bytes;
    if (counts_pinned(entry->kind))
        result->pinned_bytes += entry->bytes;
    result->pooled += entry->pooled ? 1 : 0;
    result->last = entry;
    result->rest = entry->next;
}

/* Most entries handed to mem_free_batch at once. */
#define FREE_RUN_MAX 32

/*
 * Free the run of built-in-manager device entries that starts at
 * result->rest (up to FREE_RUN_MAX) with one mem_free_batch, and pass the
 * entries freed from its start (pass_entry's sums, taken for the whole run
 * while the addresses are gathered, and walked again only when the backend
 * stopped early); returns how many were freed (0: the first is left to
 * release()).
 */
static size_t free_device_run(gm_context *ctx, batch_result *result)
{
    gm_devptr ptrs[FREE_RUN_MAX];
    gm__dealloc_entry *entry = result->rest, *last = NULL;
    int64_t bytes = 0, pooled = 0;
    size_t n = 0, freed = 0;

    for (; entry != NULL && n < FREE_RUN_MAX && entry->kind == GM__DEALLOC_DEVICE;
         entry = entry->next) {
        ptrs[n++] = entry->device;
        bytes += entry->bytes;
        pooled += entry->pooled ? 1 : 0;
        last = entry;
    }
    freed = ctx->ops->mem_free_batch(ctx->bctx, ptrs, n);
    result->freed += (int64_t)freed;
    if (freed == n) {
        result->released += (int64_t)n;
        result->device_bytes += bytes;
        result->pooled += pooled;
        result->last = last != NULL ? last : result->last;
        result->rest = entry;
        return freed;
    }
    for (size_t i = 0; i < freed; i++)
        pass_entry(result);
    return freed;
}

/*
 * Release a detached batch in FIFO order without the queue lock. Normal mode
 * stops at a failure (that entry starts the rest) or when a defer scope opens;
 * teardown logs failures and goes on. A defer scope opened by another thread
 * meanwhile is seen between runs of device entries, not inside one (up to
 * FREE_RUN_MAX more frees; the built-in manager's run calls no user code).
 */
static batch_result release_batch(gm_context *ctx, const char *fn, drain_mode mode,
                                  gm__dealloc_entry *batch)
{
    batch_result result = {batch, NULL, 0, 0, 0, 0, 0, GM_OK};
    bool idle = false;

    while (result.rest != NULL && may_free(&ctx->queue, mode)) {
        gm_status status = GM_OK;

        if (!idle && needs_idle_device(result.rest->kind)) {
            wait_device_idle(ctx); /* once a batch: the batch was queued before it */
            idle = true;
        }
        if (result.rest->kind == GM__DEALLOC_DEVICE && ctx->mm.direct_device &&
            ctx->ops->mem_free_batch != gm__unsupported_mem_free_batch) {
            (void)free_device_run(ctx, &result);
            if (result.rest == NULL || result.rest->kind != GM__DEALLOC_DEVICE)
                continue;
        }
        status = release(ctx, result.rest);

        if (status != GM_OK) {
            result.status = report_failure(fn, status, result.rest);
            if (mode == DRAIN_NORMAL)
                break;
            gm__log(GM_LOG_ERROR, "%s", gm_last_error_message());
        }
        result.freed += status == GM_OK ? 1 : 0;
        pass_entry(&result);
    }
    return result;
}

/* Put the unreleased tail of a batch back at the head of the queue (queue lock held). */
static void requeue(gm__dealloc_queue *q, gm__dealloc_entry *rest)
{
    gm__dealloc_entry *last = rest;

    while (last->next != NULL)
        last = last->next;
    last->next = q->head;
    if (q->head == NULL)
        q->tail = last;
    q->head = rest;
}

/*
 * Settle a released batch under the queue lock: uncount the entries up to
 * result->rest (by their sums: the peak never moves on a decrease), requeue
 * the rest, pool what fits (the whole released run in one step when it
 * can), count the flush (*counted_p) with its first freed entry; return the
 * entries to free.
 */
static gm__dealloc_entry *settle(gm__dealloc_queue *q, gm__dealloc_entry *batch,
                                 const batch_result *result, bool *counted_p, bool *empty_p)
{
    gm__dealloc_entry *to_free = NULL;

    gm__lock_take(&q->lock);
    if (result->freed > 0 && !*counted_p) { /* a flush counts once, when it freed something */
        q->flushes++;
        *counted_p = true;
    }
    q->count -= result->released;
    q->device_bytes -= result->device_bytes;
    q->pinned_bytes -= result->pinned_bytes;
    if (result->released > 0 && result->pooled == result->released &&
        q->pool_count + result->pooled <= POOL_MAX) {
        result->last->next = q->pool; /* the run [batch, last] is linked already */
        q->pool = batch;
        q->pool_count += result->pooled;
        batch = result->rest;
    }
    while (batch != result->rest) {
        gm__dealloc_entry *next = batch->next;

        if (!pool_push(q, batch)) {
            batch->next = to_free;
            to_free = batch;
        }
        batch = next;
    }
    q->freed += result->freed;
    if (result->rest != NULL)
        requeue(q, result->rest);
    *empty_p = q->head == NULL;
    gm__lock_give(&q->lock);
    return to_free;
}

/*
 * Free entries from the head, batch by batch, until the queue is empty, a
 * defer scope opens (normal mode), or a deallocation fails (normal mode:
 * stop, keep it queued). flush_lock is held by the caller.
 */
static gm_status drain(gm_context *ctx, const char *fn, drain_mode mode)
{
    gm__dealloc_queue *q = &ctx->queue;
    gm_status status = GM_OK;
    bool counted = false;

    for (;;) {
        gm__dealloc_entry *batch = NULL, *to_free = NULL;
        batch_result result;
        bool empty = false;

        gm__lock_take(&q->lock);
        batch = detach(q, mode);
        gm__lock_give(&q->lock);
        if (batch == NULL)
            break;
        result = release_batch(ctx, fn, mode, batch);
        to_free = settle(q, batch, &result, &counted, &empty);
        while (to_free != NULL) {
            gm__dealloc_entry *next = to_free->next;

            entry_free(to_free);
            to_free = next;
        }
        status = status != GM_OK ? status : result.status;
        if (result.rest != NULL || empty)
            break;
    }
    return status;
}

/* flush_due_locked, taking the queue lock. */
static bool flush_due(gm__dealloc_queue *q)
{
    bool due = false;

    gm__lock_take(&q->lock);
    due = flush_due_locked(q);
    gm__lock_give(&q->lock);
    return due;
}

/*
 * A flush triggered by a bound: skipped if another thread is flushing (that
 * drain takes the new entry too). A drain decides to stop when it sees the
 * queue empty, so an entry pushed after that, whose own try failed, would
 * wait for the next push: after giving the flush lock back, the bounds are
 * checked again and a flush still due runs.
 */
static void auto_flush(gm_context *ctx)
{
    gm__dealloc_queue *q = &ctx->queue;
    uint64_t mark = gm__error_mark();
    gm_status status = GM_OK;

    do {
        if (pthread_mutex_trylock(&q->flush_lock) != 0)
            return;
        status = drain(ctx, "deallocation queue", DRAIN_NORMAL);
        pthread_mutex_unlock(&q->flush_lock);
        if (status != GM_OK) {
            /* Only logged (the entry stays queued for the next flush, which returns it): the
             * call that triggered the flush leaves the thread's error as it was. */
            gm__log(GM_LOG_WARN, "automatic flush stopped: %s", gm_last_error_message());
            gm__error_back_to(mark);
            return;
        }
    } while (flush_due(q));
}

/* Append an entry and flush if a bound is now exceeded (outside defer_cleanup). */
void gm__dealloc_enqueue(gm_context *ctx, gm__dealloc_entry *entry)
{
    if (push(&ctx->queue, entry))
        gm__dealloc_flush_due(ctx);
}

/* The automatic flush gm__dealloc_push_locked asked for (none inside a stream callback). */
void gm__dealloc_flush_due(gm_context *ctx)
{
    if (!gm__in_stream_callback())
        auto_flush(ctx);
}

/* Whether gm__dealloc_release queues the entry (else it frees at once). */
bool gm__dealloc_would_queue(const gm__dealloc_entry *entry)
{
    return !entry->immediate || gm__in_stream_callback();
}

/* Free an entry's resource at once (undoing an allocation); the entry is the caller's. */
gm_status gm__dealloc_free_now(gm_context *ctx, const gm__dealloc_entry *entry)
{
    return release(ctx, entry);
}

/* Append an entry; safe on backend worker threads (frees nothing). */
void gm__dealloc_enqueue_no_flush(gm_context *ctx, gm__dealloc_entry *entry)
{
    (void)push(&ctx->queue, entry);
}

/* Queue the entry, or release it at once (logging a failure) when it is immediate. */
void gm__dealloc_release(gm_context *ctx, gm__dealloc_entry *entry)
{
    gm_status status = GM_OK;

    if (gm__dealloc_would_queue(entry)) {
        gm__dealloc_enqueue(ctx, entry);
        return;
    }
    if (needs_idle_device(entry->kind))
        wait_device_idle(ctx);
    status = release(ctx, entry);
    if (status != GM_OK) {
        (void)report_failure("gm_array_release", status, entry);
        gm__log(GM_LOG_ERROR, "%s", gm_last_error_message());
    }
    entry_done(ctx, entry);
}

/* Wait for the flush lock and drain (a no-op inside defer_cleanup). */
gm_status gm__dealloc_flush(gm_context *ctx, const char *fn)
{
    gm__dealloc_queue *q = &ctx->queue;
    gm_status status = GM_OK;

    pthread_mutex_lock(&q->flush_lock);
    status = drain(ctx, fn, DRAIN_NORMAL);
    pthread_mutex_unlock(&q->flush_lock);
    if (status != GM_OK)
        return status;
    /* A release that found flush_lock taken left its flush to this holder (auto_flush):
     * entries pushed after the drain settled are still over the bounds, so look again. */
    if (flush_due(q))
        auto_flush(ctx);
    return GM_OK;
}

/* Drain everything, ignoring defer_cleanup and logging failures, then destroy the locks. */
/* Free the pooled spare blocks (teardown: no lock, nobody else uses the queue). */
static void pool_free(gm__dealloc_queue *q)
{
    while (q->pool != NULL) {
        gm__dealloc_entry *next = q->pool->next;

        entry_free(q->pool);
        q->pool = next;
    }
    q->pool_count = 0;
}

void gm__dealloc_queue_teardown(gm_context *ctx)
{
    gm__dealloc_queue *q = &ctx->queue;

    pthread_mutex_lock(&q->flush_lock);
    (void)drain(ctx, "gm_context_destroy", DRAIN_TEARDOWN);
    pthread_mutex_unlock(&q->flush_lock);
    gm__host_keep_purge(&q->host_keep, true); /* what the drain kept, and nothing more */
    pool_free(q);
    pthread_mutex_destroy(&q->flush_lock);
}

void gm__dealloc_queue_orphans(gm_context *ctx)
{
    gm__dealloc_queue *q = &ctx->queue;
    gm__dealloc_entry *entry = NULL;
    int64_t others = 0;

    gm__lock_take(&q->lock);
    entry = q->head;
    q->head = NULL;
    q->tail = NULL;
    gm__lock_give(&q->lock);
    while (entry != NULL) {
        gm__dealloc_entry *next = entry->next;

        if (entry->kind == GM__DEALLOC_FOREIGN || entry->kind == GM__DEALLOC_HOST_COPY)
            (void)release(ctx, entry); /* no backend call: the owner's release, a host free */
        else
            others += entry->kind != GM__DEALLOC_WRAPPER;
        entry_free(entry);
        entry = next;
    }
    pool_free(q); /* blocks pooled since (a size-0 array released there) */
    if (others > 0)
        gm__log(GM_LOG_WARN,
                "gm_context_destroy: %" PRId64 " deallocations queued by stream callbacks after "
                "the queue was drained; their resources went with the backend",
                others);
}

/* ------------------------------------------------ allocation with retry */

/* One allocation attempt; `args` is the caller's request. */
typedef gm_status (*alloc_attempt_fn)(gm_context *ctx, void *args);

/* Whether a status means "out of memory" (the retry rule applies). */
static bool is_oom(gm_status status)
{
    return status == GM_ERR_OUT_OF_DEVICE_MEMORY || status == GM_ERR_NO_MEMORY;
}

/*
 * An allocation out of memory inside defer_cleanup fails without a flush:
 * its message says what the scope holds back, if anything.
 */
static gm_status oom_in_defer(gm_context *ctx, gm_status status)
{
    char detail[GM__ERROR_MESSAGE_MAX];
    gm_dealloc_stats st;

    snprintf(detail, sizeof(detail), "%s", gm_last_error_message());
    if (gm_deallocations_stats(ctx, &st) != GM_OK || st.pending_count == 0)
        return gm__error(status, "%s (inside defer_cleanup)", detail);
    return gm__error(status,
                     "%s (inside defer_cleanup, which keeps %" PRId64
                     " queued deallocations, %" PRId64 " device and %" PRId64
                     " pinned bytes, until its scope ends)",
                     detail, st.pending_count, st.pending_device_bytes, st.pending_pinned_bytes);
}

/* The rule after a first attempt that returned `status`: on OOM outside defer_cleanup,
 * flush and retry once. A retry that succeeds puts the thread's error back as it was
 * at `mark`, before the first attempt: the out-of-memory error was not the call's. */
static gm_status retry_after(gm_context *ctx, gm_status status, uint64_t mark,
                             alloc_attempt_fn attempt, void *args)
{
    if (!is_oom(status) || gm__in_stream_callback())
        return status;
    if (atomic_load(&ctx->queue.defer_depth) > 0)
        return oom_in_defer(ctx, status);
    if (gm__dealloc_flush(ctx, "out-of-memory flush") != GM_OK)
        gm__log(GM_LOG_WARN, "out-of-memory flush stopped: %s", gm_last_error_message());
    /* The host blocks kept for reuse go too, those the flush just kept included: page-locked
     * and mapped memory comes from the same system memory. */
    gm__host_keep_purge(&ctx->queue.host_keep, false);
    status = attempt(ctx, args);
    if (status == GM_OK)
        gm__error_back_to(mark);
    return status;
}

/* Run an allocation with the out-of-memory rule. */
static gm_status alloc_with_retry(gm_context *ctx, alloc_attempt_fn attempt, void *args)
{
    uint64_t mark = gm__error_mark();

    return retry_after(ctx, attempt(ctx, args), mark, attempt, args);
}

typedef struct device_request {
    size_t bytes;
    gm_devptr ptr;
    void *owner;
    bool managed;
} device_request;

/* Attempt a device allocation through the memory manager (managed memory: the backend's). */
static gm_status attempt_device(gm_context *ctx, void *args)
{
    device_request *req = args;

    if (req->managed)
        return ctx->ops->managed_alloc(ctx->bctx, req->bytes, &req->ptr);
    return gm__mm_memalloc(ctx, req->bytes, &req->ptr, &req->owner);
}

typedef struct host_request {
    size_t bytes;
    unsigned flags;
    void *ptr;
    void *owner;
} host_request;

/* Attempt a pinned / mapped host allocation through the memory manager. */
static gm_status attempt_host(gm_context *ctx, void *args)
{
    host_request *req = args;

    return gm__mm_memhostalloc(ctx, req->bytes, req->flags, &req->ptr, &req->owner);
}

/* Device memory with the out-of-memory flush-and-retry rule. */
gm_status gm__alloc_device(gm_context *ctx, size_t bytes, gm_devptr *ptr_p, void **owner_p)
{
    device_request req = {bytes, 0, NULL, false};
    gm_status status = alloc_with_retry(ctx, attempt_device, &req);

    if (status == GM_OK) {
        *ptr_p = req.ptr;
        *owner_p = req.owner;
    }
    return status;
}

/* gm__alloc_device after its first attempt was made by the caller and returned `status`
 * (`mark`: gm__error_mark() before that attempt). */
gm_status gm__alloc_device_failed(gm_context *ctx, gm_status status, uint64_t mark, size_t bytes,
                                  gm_devptr *ptr_p, void **owner_p)
{
    device_request req = {bytes, 0, NULL, false};

    status = retry_after(ctx, status, mark, attempt_device, &req);
    if (status == GM_OK) {
        *ptr_p = req.ptr;
        *owner_p = req.owner;
    }
    return status;
}

/* Managed memory with the out-of-memory flush-and-retry rule. */
gm_status gm__alloc_managed(gm_context *ctx, size_t bytes, gm_devptr *ptr_p)
{
    device_request req = {bytes, 0, NULL, true};
    gm_status status = alloc_with_retry(ctx, attempt_device, &req);

    if (status == GM_OK)
        *ptr_p = req.ptr;
    return status;
}

/* Pinned / mapped host memory with the out-of-memory flush-and-retry rule. */
gm_status gm__alloc_host(gm_context *ctx, size_t bytes, unsigned flags, void **ptr_p,
                         void **owner_p)
{
    host_request req = {bytes, flags, NULL, NULL};
    gm_status status = alloc_with_retry(ctx, attempt_host, &req);

    if (status == GM_OK) {
        *ptr_p = req.ptr;
        *owner_p = req.owner;
    }
    return status;
}

typedef struct pin_request {
    void *start;
    size_t bytes;
    bool mapped;
    void *owner;
} pin_request;

/* Attempt to page-lock (register) host memory through the memory manager. */
static gm_status attempt_pin(gm_context *ctx, void *args)
{
    pin_request *req = args;

    return gm__mm_mempin(ctx, req->start, req->bytes, req->mapped, &req->owner);
}

/* Registration with the same rule (Numba retries mapped registration; so do we, any). */
gm_status gm__pin_host(gm_context *ctx, void *start, size_t bytes, bool mapped, void **owner_p)
{
    pin_request req = {start, bytes, mapped, NULL};
    gm_status status = alloc_with_retry(ctx, attempt_pin, &req);

    if (status == GM_OK)
        *owner_p = req.owner;
    return status;
}

/* ------------------------------------------------------------ public API */

/* Step the defer_cleanup nesting counter; true when the bounds now apply and are exceeded. */
static bool defer_step(gm__dealloc_queue *q, int64_t step)
{
    bool due = false;

    gm__lock_take(&q->lock);
    q->defer_depth += step;
    due = flush_due_locked(q);
    gm__lock_give(&q->lock);
    return due;
}

/* Open a defer_cleanup scope (a per-context nesting counter), then the manager's. */
gm_status gm_defer_cleanup_begin(gm_context *ctx)
{
    static const char fn[] = "gm_defer_cleanup_begin";
    gm_status status = gm__check_context(fn, ctx);
    gm__saved_error saved;

    if (status != GM_OK)
        return status;
    (void)defer_step(&ctx->queue, 1);
    status = gm__error_within(fn, gm__mm_defer_begin(ctx));
    if (status != GM_OK && defer_step(&ctx->queue, -1)) {
        gm__error_save(&saved); /* the flush's own failure is logged */
        gm__dealloc_flush_due(ctx);
        gm__error_restore(&saved);
    }
    return status;
}

/*
 * Close a scope; the last one re-applies the bounds (and flushes if they are
 * exceeded). Then close the manager's.
 */
gm_status gm_defer_cleanup_end(gm_context *ctx)
{
    static const char fn[] = "gm_defer_cleanup_end";
    gm_status status = gm__check_context(fn, ctx);
    bool due = false;

    if (status != GM_OK)
        return status;
    gm__lock_take(&ctx->queue.lock);
    if (ctx->queue.defer_depth == 0) {
        status = gm__error(GM_ERR_STATE, "%s: no defer_cleanup scope is open", fn);
    } else {
        ctx->queue.defer_depth--;
        due = flush_due_locked(&ctx->queue);
    }
    gm__lock_give(&ctx->queue.lock);
    if (status != GM_OK)
        return status;
    if (due)
        gm__dealloc_flush_due(ctx); /* none inside a stream callback */
    return gm__error_within(fn, gm__mm_defer_end(ctx));
}

/* Explicit flush; returns the first deallocation failure. */
gm_status gm_deallocations_flush(gm_context *ctx)
{
    static const char fn[] = "gm_deallocations_flush";
    gm_status status = gm__check_context(fn, ctx);

    if (status != GM_OK)
        return status;
    if (gm__in_stream_callback())
        return gm__error(GM_ERR_STATE, "%s: not allowed inside a stream callback", fn);
    return gm__dealloc_flush(ctx, fn);
}

/* A consistent snapshot of the counters. */
gm_status gm_deallocations_stats(gm_context *ctx, gm_dealloc_stats *stats_p)
{
    static const char fn[] = "gm_deallocations_stats";
    gm_status status = gm__check_context(fn, ctx);
    gm__dealloc_queue *q = NULL;

    if (status != GM_OK)
        return status;
    if (stats_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: stats_p is NULL", fn);
    q = &ctx->queue;
    gm__lock_take(&q->lock);
    stats_p->pending_count = q->count;
    stats_p->pending_device_bytes = q->device_bytes;
    stats_p->pending_pinned_bytes = q->pinned_bytes;
    stats_p->flushes = q->flushes;
    stats_p->peak_pending_bytes = q->peak_bytes;
    stats_p->freed_count = q->freed;
    stats_p->defer_depth = q->defer_depth;
    gm__lock_give(&q->lock);
    return GM_OK;
}
