/*
 * Streams: created streams (destroyed through the deallocation queue), the
 * context's built-in streams (default, legacy default, per-thread default;
 * wrappers owned by the context and created on first use), wrapped external
 * streams (never destroyed), and the stream operations.
 */
#include <inttypes.h>
#include <time.h>

#include "runtime_internal.h"

/*
 * A gm_stream_callback and its arguments, carried through the backend
 * callback. Once the callback has run, the trampoline goes on its context's
 * list of finished ones (the worker does not free it: a user's allocator
 * may be single-threaded); the next gm_stream_add_callback reuses one and
 * frees the rest (on a worker only when a callback itself adds a callback),
 * and context teardown frees what is left. It is internal
 * bookkeeping, not a deallocation: it never counts in the queue.
 */
typedef struct callback_trampoline {
    gm_context *ctx;   /* not read through `stream`: a destroyed one may be gone by then */
    gm_stream *stream; /* passed on to fn; a wrapped one is held for it (`held`) */
    gm_stream_callback fn;
    void *user;
    bool held;                             /* one of stream->holds is this callback's */
    struct callback_trampoline *next_done; /* in ctx->done_callbacks */
    gm__link pending;                      /* in ctx->pending_callbacks until it runs */
} callback_trampoline;

/* Set while this thread runs a user's stream callback. */
static _Thread_local bool tls_in_callback = false;

/* Whether this thread is inside a gm_stream_callback. */
bool gm__in_stream_callback(void)
{
    return tls_in_callback;
}

gm_status gm__sync_allowed(const char *fn, const gm_stream *stream)
{
    if (stream != NULL || !tls_in_callback)
        return GM_OK;
    return gm__error(GM_ERR_STATE,
                     "%s: a synchronous operation on device memory is not allowed inside a "
                     "stream callback: it waits for the legacy stream, whose queued work may "
                     "wait for the callback's own stream",
                     fn);
}

/* A backend query's status for the public call fn: NOT_READY with `pending` as its message
 * (the thread's message must not be an older one), an error prefixed with fn. */
gm_status gm__query_result(const char *fn, gm_status status, const char *pending)
{
    if (status == GM_ERR_NOT_READY)
        return gm__error(status, "%s: %s", fn, pending);
    return gm__error_within(fn, status);
}

static gm_status stream_target(const char *fn, const gm_stream *stream,
                               gm_backend_stream **bstream_p);

/* Whether the wrapper is the per-thread default stream's one handle (each thread's stream). */
static bool per_thread_handle(const gm_stream *stream)
{
    return stream->kind == GM__STREAM_BUILTIN && stream->builtin == GM_BUILTIN_STREAM_PER_THREAD;
}

/* Map an optional stream argument to its backend stream. */
gm_status gm__stream_backend(const char *fn, const gm_context *ctx, const gm_stream *stream,
                             gm_backend_stream **bstream_p)
{
    if (stream == NULL) {
        *bstream_p = NULL;
        return GM_OK;
    }
    if (stream->ctx != ctx)
        return gm__error(GM_ERR_WRONG_CONTEXT, "%s: the stream belongs to another context", fn);
    if (atomic_load(&ctx->closing)) /* a callback queuing work while the context goes */
        return gm__error(GM_ERR_STATE, "%s: the context is being destroyed", fn);
    return stream_target(fn, stream, bstream_p);
}

/*
 * The backend stream a wrapper stands for on the calling thread: its own,
 * except for the per-thread default stream, which (like CUDA's
 * CU_STREAM_PER_THREAD handle, and Numba's per_thread_default_stream()) is
 * one handle meaning the calling thread's stream wherever it is used.
 */
static gm_status stream_target(const char *fn, const gm_stream *stream,
                               gm_backend_stream **bstream_p)
{
    gm_status status = GM_OK;

    if (!per_thread_handle(stream)) {
        *bstream_p = stream->bstream;
        return GM_OK;
    }
    status = stream->ctx->ops->stream_builtin(stream->ctx->bctx, GM_BUILTIN_STREAM_PER_THREAD,
                                              bstream_p);
    return gm__error_within(fn, status);
}

/* A stream argument that must not be NULL. */
static gm_status check_stream(const char *fn, const gm_stream *stream)
{
    if (stream == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: stream is NULL", fn);
    return GM_OK;
}

/* Allocate a wrapper for a backend stream and list it in the context. */
static gm_status wrapper_create(gm_context *ctx, const char *fn, gm__stream_kind kind,
                                gm_backend_stream *bstream, gm_stream **stream_p)
{
    gm_stream *stream = gm__calloc(1, sizeof(*stream));

    if (stream == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory", fn);
    static _Atomic uint64_t next_serial = 1;

    stream->ctx = ctx;
    stream->bstream = bstream;
    stream->kind = kind;
    stream->serial = atomic_fetch_add(&next_serial, 1);
    atomic_init(&stream->auto_sync_depth, 0);
    atomic_init(&stream->holds, 1);
    *stream_p = stream;
    return GM_OK;
}

/*
 * List a finished wrapper in its context. `native` is a created stream's
 * handle (NULL otherwise): a stream destroyed before whose entry is still
 * listed in ctx->dying may have had the same address, freed by the backend's
 * destroy during a flush that has not unlisted it yet; that old claim on the
 * handle goes, so that the new, live stream can be wrapped.
 */
static void wrapper_publish(gm_stream *stream, const void *native)
{
    gm_context *ctx = stream->ctx;

    pthread_mutex_lock(&ctx->lock);
    for (gm__link *l = ctx->dying.next; native != NULL && l != &ctx->dying; l = l->next) {
        gm_stream *old = GM__CONTAINER_OF(l, gm_stream, link);

        if (old->dying_native == native)
            old->dying_native = NULL;
    }
    gm__list_push(&ctx->streams, &stream->link);
    pthread_mutex_unlock(&ctx->lock);
}

/* A new stream with a preallocated queue entry for its destruction. */
gm_status gm_stream_create(gm_context *ctx, unsigned flags, gm_stream **stream_p)
{
    static const char fn[] = "gm_stream_create";
    gm_backend_stream *bstream = NULL;
    gm_stream *stream = NULL;
    gm_status status = gm__check_context(fn, ctx);

    if (status == GM_OK && stream_p == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: stream_p is NULL", fn);
    if (status == GM_OK && (flags & ~(unsigned)GM_STREAM_NON_BLOCKING) != 0)
        status = gm__error(GM_ERR_INVALID_ARG, "%s: unknown flags %#x", fn, flags);
    if (status == GM_OK)
        status = wrapper_create(ctx, fn, GM__STREAM_CREATED, NULL, &stream);
    if (status != GM_OK)
        return status;
    status = gm__dealloc_entry_create(fn, GM__DEALLOC_STREAM, &stream->entry);
    if (status != GM_OK)
        goto fail_wrapper;
    status = gm__error_within(fn, ctx->ops->stream_create(ctx->bctx, flags, &bstream));
    if (status != GM_OK)
        goto fail_entry;
    stream->bstream = bstream;
    wrapper_publish(stream, ctx->ops->stream_native(ctx->bctx, bstream));
    *stream_p = stream;
    return GM_OK;
fail_entry:
    gm__dealloc_entry_discard(stream->entry);
fail_wrapper:
    gm__free(stream);
    return status;
}

/*
 * Queue a created stream's destruction, or a wrapped stream's unwrapping
 * (its native stream is never destroyed); the core's wrapper is freed with
 * it. The flush (on a user thread) releases it in queue order. `flush`:
 * whether a flush this makes due may run now (not on a backend's thread).
 */
static void queue_destroy(gm_stream *stream, bool flush)
{
    gm__dealloc_entry *entry = stream->entry;

    entry->handle = stream->bstream;
    entry->bookkeeping = stream;
    stream->entry = NULL;
    if (flush)
        gm__dealloc_enqueue(stream->ctx, entry);
    else
        gm__dealloc_enqueue_no_flush(stream->ctx, entry);
}

/*
 * Drop one of a wrapped stream's holds: the user's handle, or a callback
 * queued through it (which is given the wrapper). The last one queues its
 * unwrapping, so a wrapper destroyed while callbacks queued through it are
 * pending (or destroyed by one of them, or one chaining another through it)
 * stays until the last has returned. Nothing is called on the native stream,
 * which its owner may destroy once the wrapper is.
 */
static void wrapper_release(gm_stream *stream, bool flush)
{
    if (atomic_fetch_sub_explicit(&stream->holds, 1, memory_order_acq_rel) == 1)
        queue_destroy(stream, flush);
}

/* Built-in streams: ignored; created and wrapped: queued. */
void gm_stream_destroy(gm_stream **stream_p)
{
    gm_stream *stream = NULL;

    if (stream_p == NULL || *stream_p == NULL)
        return;
    stream = *stream_p;
    if (stream->kind == GM__STREAM_BUILTIN)
        return;
    *stream_p = NULL;
    if (stream->kind == GM__STREAM_CREATED) /* read before the lock: no call out under it */
        stream->dying_native = stream->ctx->ops->stream_native(stream->ctx->bctx, stream->bstream);
    pthread_mutex_lock(&stream->ctx->lock);
    gm__list_remove(&stream->link);
    if (stream->kind == GM__STREAM_CREATED) /* its handle is refused by wraps from now on */
        gm__list_push(&stream->ctx->dying, &stream->link);
    pthread_mutex_unlock(&stream->ctx->lock);
    if (stream->kind == GM__STREAM_EXTERNAL)
        wrapper_release(stream, true);
    else
        queue_destroy(stream, true);
}

void gm__stream_dead(gm_stream *stream)
{
    pthread_mutex_lock(&stream->ctx->lock);
    gm__list_remove(&stream->link); /* a no-op unless in ctx->dying */
    pthread_mutex_unlock(&stream->ctx->lock);
}

/* Whether `native` is the handle of a stream of ctx whose destroy is queued. */
static bool native_dying(gm_context *ctx, const void *native)
{
    bool dying = false;

    pthread_mutex_lock(&ctx->lock);
    for (const gm__link *l = ctx->dying.next; l != &ctx->dying && !dying; l = l->next)
        dying = GM__CONTAINER_OF(l, const gm_stream, link)->dying_native == native;
    pthread_mutex_unlock(&ctx->lock);
    return dying;
}

/*
 * The live per-thread handles of every context in the process, so that a
 * thread's auto_synchronize scope slot left open on a destroyed context's
 * handle can be reclaimed (scope_depth). Touched only when a per-thread
 * handle is made or freed and when a thread runs out of slots.
 */
static pthread_mutex_t per_thread_lock = PTHREAD_MUTEX_INITIALIZER;
static gm__link per_thread_live = {&per_thread_live, &per_thread_live};

static void per_thread_list(gm_stream *stream)
{
    pthread_mutex_lock(&per_thread_lock);
    gm__list_push(&per_thread_live, &stream->per_thread_link);
    pthread_mutex_unlock(&per_thread_lock);
}

static void per_thread_unlist(gm_stream *stream)
{
    pthread_mutex_lock(&per_thread_lock);
    gm__list_remove(&stream->per_thread_link);
    pthread_mutex_unlock(&per_thread_lock);
}

/* Whether a per-thread handle with this serial is alive in some context. */
static bool per_thread_alive(uint64_t serial)
{
    bool alive = false;

    pthread_mutex_lock(&per_thread_lock);
    for (const gm__link *l = per_thread_live.next; l != &per_thread_live && !alive; l = l->next)
        alive = GM__CONTAINER_OF(l, const gm_stream, per_thread_link)->serial == serial;
    pthread_mutex_unlock(&per_thread_lock);
    return alive;
}

/* The wrapper of a built-in stream, made on first use (ctx->lock held). */
static gm_stream *builtin_locked(gm_context *ctx, const char *fn, gm_builtin_stream which)
{
    gm_backend_stream *bstream = NULL;
    gm_stream *stream = NULL;

    if (ctx->ops->stream_builtin(ctx->bctx, which, &bstream) != GM_OK)
        return NULL;
    /* the wrapper given last, if it still matches: the walk below went through every
     * stream of the context (1 us with 300 streams alive, at each gm_default_stream) */
    stream = ctx->builtin_last[which];
    if (stream != NULL && (stream->bstream == bstream || which == GM_BUILTIN_STREAM_PER_THREAD))
        return stream;
    for (gm__link *l = ctx->streams.next; l != &ctx->streams; l = l->next) {
        gm_stream *s = GM__CONTAINER_OF(l, gm_stream, link);

        if (s->kind == GM__STREAM_BUILTIN && s->builtin == which &&
            (s->bstream == bstream || which == GM_BUILTIN_STREAM_PER_THREAD)) {
            ctx->builtin_last[which] = s;
            return s; /* one per-thread wrapper: it resolves at each use */
        }
    }
    /* The per-thread wrapper keeps no backend stream: the one just found is the calling
     * thread's, which goes when that thread exits. */
    if (which == GM_BUILTIN_STREAM_PER_THREAD)
        bstream = NULL;
    if (wrapper_create(ctx, fn, GM__STREAM_BUILTIN, bstream, &stream) != GM_OK)
        return NULL;
    stream->builtin = which;
    gm__list_push(&ctx->streams, &stream->link);
    if (which == GM_BUILTIN_STREAM_PER_THREAD)
        per_thread_list(stream);
    ctx->builtin_last[which] = stream;
    return stream;
}

/* The wrapper of a built-in stream; NULL (error recorded) on failure. */
static gm_stream *builtin_stream(gm_context *ctx, const char *fn, gm_builtin_stream which)
{
    gm_stream *stream = NULL;

    if (gm__check_context(fn, ctx) != GM_OK)
        return NULL;
    pthread_mutex_lock(&ctx->lock);
    stream = builtin_locked(ctx, fn, which);
    pthread_mutex_unlock(&ctx->lock);
    return stream;
}

/* The context's default stream wrapper. */
gm_stream *gm_default_stream(gm_context *ctx)
{
    return builtin_stream(ctx, "gm_default_stream", GM_BUILTIN_STREAM_DEFAULT);
}

/* The context's legacy default stream wrapper. */
gm_stream *gm_legacy_default_stream(gm_context *ctx)
{
    return builtin_stream(ctx, "gm_legacy_default_stream", GM_BUILTIN_STREAM_LEGACY);
}

/* The calling thread's default stream wrapper. */
gm_stream *gm_per_thread_default_stream(gm_context *ctx)
{
    return builtin_stream(ctx, "gm_per_thread_default_stream", GM_BUILTIN_STREAM_PER_THREAD);
}

/* Wrap a native stream without taking ownership. */
gm_status gm_stream_wrap_external(gm_context *ctx, void *native, gm_stream **stream_p)
{
    static const char fn[] = "gm_stream_wrap_external";
    gm_backend_stream *bstream = NULL;
    gm_stream *stream = NULL;
    gm_status status = gm__check_context(fn, ctx);

    if (status == GM_OK && (native == NULL || stream_p == NULL))
        status = gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn,
                           native == NULL ? "native" : "stream_p");
    if (status == GM_OK && native_dying(ctx, native))
        status = gm__error(GM_ERR_INVALID_HANDLE,
                           "%s: %p is the handle of a stream destroyed with gm_stream_destroy", fn,
                           native);
    if (status == GM_OK)
        status = gm__error_within(fn, ctx->ops->stream_wrap(ctx->bctx, native, &bstream));
    if (status != GM_OK)
        return status;
    status = wrapper_create(ctx, fn, GM__STREAM_EXTERNAL, bstream, &stream);
    if (status == GM_OK) {
        status = gm__dealloc_entry_create(fn, GM__DEALLOC_WRAPPER, &stream->entry);
        if (status != GM_OK)
            gm__free(stream);
    }
    if (status != GM_OK) {
        ctx->ops->stream_unwrap(ctx->bctx, bstream);
        return status;
    }
    wrapper_publish(stream, NULL);
    *stream_p = stream;
    return GM_OK;
}

/* The backend's native handle; NULL for NULL. */
void *gm_stream_native(gm_stream *stream)
{
    gm_backend_stream *bs = NULL;

    if (stream == NULL || stream_target("gm_stream_native", stream, &bs) != GM_OK)
        return NULL;
    return stream->ctx->ops->stream_native(stream->ctx->bctx, bs);
}

/* Wait for the stream; returns (and clears) its first error. */
gm_status gm_stream_synchronize(gm_stream *stream)
{
    gm_backend_stream *bs = NULL;
    gm_status status = check_stream("gm_stream_synchronize", stream);

    if (status == GM_OK && gm__in_stream_callback())
        status =
            gm__error(GM_ERR_STATE, "gm_stream_synchronize: not allowed inside a stream callback");
    if (status == GM_OK)
        status = stream_target("gm_stream_synchronize", stream, &bs);
    if (status != GM_OK)
        return status;
    return gm__error_within("gm_stream_synchronize",
                            stream->ctx->ops->stream_synchronize(stream->ctx->bctx, bs));
}

/* GM_OK when idle, GM_ERR_NOT_READY otherwise. */
gm_status gm_stream_query(gm_stream *stream)
{
    static const char fn[] = "gm_stream_query";
    gm_backend_stream *bs = NULL;
    gm_status status = check_stream(fn, stream);

    if (status == GM_OK)
        status = stream_target(fn, stream, &bs);
    if (status != GM_OK)
        return status;
    return gm__query_result(fn, stream->ctx->ops->stream_query(stream->ctx->bctx, bs),
                            "the stream still has work pending");
}

/* Backend callback: call the user's function, then list the trampoline as finished. */
static void trampoline_cb(gm_status status, void *user)
{
    callback_trampoline *t = user;
    gm_context *ctx = t->ctx;
    gm_stream *held = t->held ? t->stream : NULL;

    atomic_fetch_add(&ctx->callbacks_running, 1); /* seq_cst: against the abandon below */
    atomic_fetch_add_explicit(&ctx->callbacks_entered, 1, memory_order_relaxed);
    if (!atomic_load(&ctx->callbacks_abandoned)) {
        tls_in_callback = true;
        t->fn(t->stream, status, t->user);
        tls_in_callback = false;
    }
    gm__lock_take(&ctx->queue.lock);
    gm__list_unlink(&t->pending);
    t->next_done = ctx->done_callbacks; /* from here another thread may reuse t */
    ctx->done_callbacks = t;
    gm__lock_give(&ctx->queue.lock);
    if (held != NULL)
        wrapper_release(held, false); /* a backend's thread: no flush */
    /* the last touch of ctx: a teardown waiting for it may go on */
    atomic_fetch_sub_explicit(&ctx->callbacks_running, 1, memory_order_release);
}

/* Milliseconds on CLOCK_MONOTONIC. */
static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Wait until no queued callback is left, or none runs and none has started
 * for STALL_MS (the rest may wait for work that never starts: a failed HSA
 * context's), or for at most WAIT_MS in all. Giving up abandons the rest:
 * one that starts later (behind slow work the backend still runs during the
 * teardown) skips its function, which could touch what the teardown frees;
 * those already running are waited for.
 */
#define STALL_MS 500
#define WAIT_MS  (60 * 1000)
void gm__streams_wait_callbacks(gm_context *ctx)
{
    const struct timespec tick = {0, 1000 * 1000};
    int64_t start = now_ms(), progress = start;
    uint64_t entered = atomic_load(&ctx->callbacks_entered);

    for (;;) {
        int64_t now = now_ms();
        uint64_t seen = atomic_load(&ctx->callbacks_entered);
        bool pending = false;

        gm__lock_take(&ctx->queue.lock);
        pending = !gm__list_empty(&ctx->pending_callbacks);
        gm__lock_give(&ctx->queue.lock);
        if (!pending && atomic_load_explicit(&ctx->callbacks_running, memory_order_acquire) == 0)
            return;
        if (seen != entered || atomic_load(&ctx->callbacks_running) > 0) {
            entered = seen;
            progress = now;
        }
        if (now - progress >= STALL_MS || now - start >= WAIT_MS)
            break;
        nanosleep(&tick, NULL);
    }
    atomic_store(&ctx->callbacks_abandoned, true); /* seq_cst: a trampoline that missed it */
    while (atomic_load(&ctx->callbacks_running) > 0 && now_ms() - start < WAIT_MS)
        nanosleep(&tick, NULL); /* is counted as running here */
    gm__log(GM_LOG_WARN,
            "gm_context_destroy: queued stream callbacks are still to run; going on without "
            "them (they will not be called)");
}

void gm__streams_free_unrun(gm_context *ctx)
{
    int64_t left = 0;

    while (!gm__list_empty(&ctx->pending_callbacks)) {
        callback_trampoline *t =
            GM__CONTAINER_OF(ctx->pending_callbacks.next, callback_trampoline, pending);
        gm_stream *held = t->held ? t->stream : NULL;

        gm__list_unlink(&t->pending);
        gm__free(t);
        left++;
        /* its last hold: a wrapper left to it by the teardown, or destroyed (its backend
         * wrapper went with the backend's fini) */
        if (held != NULL && atomic_fetch_sub_explicit(&held->holds, 1, memory_order_acq_rel) == 1) {
            gm__dealloc_entry_discard(held->entry);
            gm__free(held);
        }
    }
    if (left > 0)
        gm__log(GM_LOG_WARN,
                "gm_context_destroy: %" PRId64 " stream callbacks never ran (the context "
                "failed)",
                left);
}

/* Take the finished trampolines off the context's list. */
static callback_trampoline *take_done(gm_context *ctx)
{
    callback_trampoline *done = NULL;

    gm__lock_take(&ctx->queue.lock);
    done = ctx->done_callbacks;
    ctx->done_callbacks = NULL;
    gm__lock_give(&ctx->queue.lock);
    return done;
}

/* Free a list of finished trampolines. */
static void free_done(callback_trampoline *done)
{
    while (done != NULL) {
        callback_trampoline *next = done->next_done;

        gm__free(done);
        done = next;
    }
}

/* Queue a user callback through a trampoline (a finished one reused, the others freed). */
gm_status gm_stream_add_callback(gm_stream *stream, gm_stream_callback fn, void *user)
{
    static const char name[] = "gm_stream_add_callback";
    callback_trampoline *t = NULL;
    gm_backend_stream *bs = NULL;
    gm_status status = check_stream(name, stream);

    if (status == GM_OK && fn == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: fn is NULL", name);
    if (status == GM_OK && atomic_load(&stream->ctx->closing))
        status = gm__error(GM_ERR_STATE, "%s: the context is being destroyed", name);
    if (status == GM_OK)
        status = stream_target(name, stream, &bs);
    if (status != GM_OK)
        return status;
    t = take_done(stream->ctx);
    if (t != NULL)
        free_done(t->next_done);
    else
        t = gm__malloc(sizeof(*t));
    if (t == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory", name);
    *t = (callback_trampoline){
        stream->ctx, stream, fn, user, stream->kind == GM__STREAM_EXTERNAL, NULL, {NULL, NULL}};
    if (t->held)
        atomic_fetch_add_explicit(&stream->holds, 1, memory_order_relaxed);
    gm__lock_take(&stream->ctx->queue.lock); /* before it can run */
    gm__list_push(&stream->ctx->pending_callbacks, &t->pending);
    gm__lock_give(&stream->ctx->queue.lock);
    status = gm__error_within(
        name, stream->ctx->ops->stream_add_callback(stream->ctx->bctx, bs, trampoline_cb, t));
    if (status != GM_OK) {
        gm__lock_take(&stream->ctx->queue.lock);
        gm__list_unlink(&t->pending);
        gm__lock_give(&stream->ctx->queue.lock);
        if (t->held) /* not the last: the caller's handle holds it */
            atomic_fetch_sub_explicit(&stream->holds, 1, memory_order_relaxed);
        gm__free(t);
    }
    return status;
}

/* Context teardown, after the backend is gone: free the finished trampolines. */
void gm__streams_free_callbacks(gm_context *ctx)
{
    free_done(take_done(ctx));
}

/*
 * The nesting counter of a stream's auto_synchronize scopes: the wrapper's,
 * except for the per-thread default stream, whose one handle stands for a
 * stream per thread: its scopes are counted per thread (at most
 * PER_THREAD_SCOPES handles, i.e. contexts, with scopes open at once on one
 * thread), keyed by the handle's serial (a scope left open in a destroyed
 * context never counts for a later handle at the same address; when the
 * slots run out, those of destroyed contexts' handles are reclaimed). NULL
 * when a new count is needed and there is no room.
 */
#define PER_THREAD_SCOPES 8
static _Thread_local struct {
    uint64_t serial;
    _Atomic int64_t depth;
} tls_scopes[PER_THREAD_SCOPES];

static _Atomic int64_t *scope_depth(gm_stream *stream, bool create)
{
    int free_slot = -1;

    if (!per_thread_handle(stream))
        return &stream->auto_sync_depth;
    for (int i = 0; i < PER_THREAD_SCOPES; i++) {
        if (tls_scopes[i].serial == stream->serial && atomic_load(&tls_scopes[i].depth) > 0)
            return &tls_scopes[i].depth;
        if (free_slot < 0 && atomic_load(&tls_scopes[i].depth) == 0)
            free_slot = i;
    }
    for (int i = 0; create && free_slot < 0 && i < PER_THREAD_SCOPES; i++) {
        if (!per_thread_alive(tls_scopes[i].serial)) { /* left open in a destroyed context */
            atomic_store(&tls_scopes[i].depth, 0);
            free_slot = i;
        }
    }
    if (!create || free_slot < 0)
        return NULL;
    tls_scopes[free_slot].serial = stream->serial;
    return &tls_scopes[free_slot].depth;
}

/* Open an auto_synchronize scope (atomic nesting counter). */
gm_status gm_stream_auto_synchronize_begin(gm_stream *stream)
{
    static const char fn[] = "gm_stream_auto_synchronize_begin";
    _Atomic int64_t *depth = NULL;
    gm_status status = check_stream(fn, stream);

    if (status == GM_OK && gm__in_stream_callback()) /* its end would be refused there */
        status = gm__error(GM_ERR_STATE, "%s: not allowed inside a stream callback", fn);
    if (status != GM_OK)
        return status;
    depth = scope_depth(stream, true);
    if (depth == NULL)
        return gm__error(GM_ERR_STATE,
                         "%s: this thread has per-thread stream scopes open in %d contexts already",
                         fn, PER_THREAD_SCOPES);
    atomic_fetch_add(depth, 1);
    return GM_OK;
}

/* Close a scope; closing the outermost synchronizes. */
gm_status gm_stream_auto_synchronize_end(gm_stream *stream)
{
    static const char fn[] = "gm_stream_auto_synchronize_end";
    gm_backend_stream *bs = NULL;
    _Atomic int64_t *counter = NULL;
    int64_t depth = 0;
    gm_status status = check_stream(fn, stream);

    if (status == GM_OK && gm__in_stream_callback())
        status = gm__error(GM_ERR_STATE, "%s: not allowed inside a stream callback", fn);
    if (status != GM_OK)
        return status;
    counter = scope_depth(stream, false);
    depth = counter != NULL ? atomic_load(counter) : 0;
    do {
        if (depth == 0)
            return gm__error(GM_ERR_STATE, "%s: no auto_synchronize scope is open", fn);
    } while (!atomic_compare_exchange_weak(counter, &depth, depth - 1));
    if (depth != 1)
        return GM_OK;
    status = stream_target(fn, stream, &bs);
    if (status != GM_OK)
        return status;
    return gm__error_within(fn, stream->ctx->ops->stream_synchronize(stream->ctx->bctx, bs));
}

/* ------------------------------------------------------------- teardown */

/*
 * Context teardown, after its device_synchronize: take and log the errors
 * the built-in streams still hold (a created stream's destroy logs its own;
 * a wrapped one's belong to its owner; the per-thread streams, one handle
 * for every thread's, are the backend's to report at fini). Their backend
 * streams live until the backend's fini, so they are synchronized without
 * ctx->lock, which a callback may need meanwhile. At most BUILTIN_REPORTED
 * of them.
 */
#define BUILTIN_REPORTED 16
void gm__streams_report_errors(gm_context *ctx)
{
    gm_backend_stream *builtin[BUILTIN_REPORTED];
    size_t n = 0;

    pthread_mutex_lock(&ctx->lock);
    for (gm__link *l = ctx->streams.next; l != &ctx->streams && n < BUILTIN_REPORTED; l = l->next) {
        const gm_stream *s = GM__CONTAINER_OF(l, gm_stream, link);

        if (s->kind == GM__STREAM_BUILTIN && !per_thread_handle(s))
            builtin[n++] = s->bstream;
    }
    pthread_mutex_unlock(&ctx->lock);
    for (size_t i = 0; i < n; i++) {
        if (ctx->ops->stream_synchronize(ctx->bctx, builtin[i]) != GM_OK)
            gm__log(GM_LOG_WARN, "gm_context_destroy: a built-in stream reported: %s",
                    gm_last_error_message());
    }
}

/* Queue created streams, unwrap external ones, free built-in wrappers. */
void gm__streams_teardown(gm_context *ctx)
{
    int64_t created = 0;

    pthread_mutex_lock(&ctx->lock);
    for (size_t i = 0; i < sizeof ctx->builtin_last / sizeof ctx->builtin_last[0]; i++)
        ctx->builtin_last[i] = NULL; /* the wrappers are freed below */
    pthread_mutex_unlock(&ctx->lock);

    while (!gm__list_empty(&ctx->streams)) {
        gm_stream *s = GM__CONTAINER_OF(ctx->streams.next, gm_stream, link);

        gm__list_remove(&s->link);
        if (s->kind == GM__STREAM_CREATED) {
            created++;
            queue_destroy(s, true);
        } else {
            if (s->kind == GM__STREAM_EXTERNAL) {
                if (atomic_fetch_sub_explicit(&s->holds, 1, memory_order_acq_rel) != 1)
                    continue; /* a callback still to run holds it (the device wait failed):
                               * its release queues it, freed after the backend's fini */
                ctx->ops->stream_unwrap(ctx->bctx, s->bstream);
                gm__dealloc_entry_discard(s->entry);
            }
            if (per_thread_handle(s))
                per_thread_unlist(s);
            gm__free(s);
        }
    }
    if (created > 0)
        gm__log(GM_LOG_INFO, "gm_context_destroy: destroying %" PRId64 " streams still alive",
                created);
}
