/*
 * Streams and events of the host simulator.
 *
 * Every stream is a FIFO of work items run by its own worker thread, so an
 * asynchronous op returns before its work runs, and work on different streams
 * runs concurrently. Work items are copies, memsets, host functions,
 * callbacks, event markers and event waits. The first failure of a stream's
 * work is kept ("sticky") and returned, with its message, by the next
 * stream_synchronize, which then clears it; later work still runs.
 *
 * Ordering rules, checked by a worker before it starts the item at its head:
 *   - FIFO within a stream;
 *   - stream_wait_event: the item waits for the fence of the event's most
 *     recent record at the time of the wait call (never-recorded events are
 *     complete, so no item is queued);
 *   - CUDA's legacy default stream (GM_BUILTIN_STREAM_LEGACY): every item
 *     carries a ticket, a context-wide enqueue counter. An item on the legacy
 *     stream starts only when every blocking stream (all streams but the
 *     legacy one and those created GM_STREAM_NON_BLOCKING; the per-thread
 *     streams are blocking) has finished all its items with a
 *     smaller ticket; an item on a blocking stream starts only when the
 *     legacy stream has finished all its items with a smaller ticket.
 *     Synchronous ops (stream NULL) wait the same way as a legacy item before
 *     they run on the calling thread. Dependencies always point to smaller
 *     tickets, so they cannot form a cycle.
 *
 * Stream ops given a NULL stream act on the legacy stream (CUDA's stream 0),
 * and so does the default stream (GM_BUILTIN_STREAM_DEFAULT): Numba's
 * default_stream() is stream 0 with the legacy APIs, which Numba always uses,
 * and the CUDA and HSA backends map it the same way.
 * Work functions (and cleanups and callbacks) run on a worker thread, like
 * CUDA host functions: they must not synchronize their own stream
 * (stream_synchronize and stream_destroy detect it: GM_ERR_STATE) nor issue
 * synchronous ops while legacy work is queued behind them (the synchronous
 * op skips the caller's own stream, but legacy work waits for it: a hang;
 * the core refuses every synchronous call inside a user's callback, and the
 * library's own work functions make none).
 *
 * Per-thread default streams are keyed by gm__thread_key (not pthread_self,
 * which the system reuses after a thread exits). When a thread exits, its
 * stream is retired: it leaves the thread map (a later thread never finds
 * it), its queued work still runs in order (and still orders the legacy
 * stream), and once it is idle and no wrapper refers to it, its worker
 * unlists it and exits; the next worker to end its stream, the next
 * stream_builtin or stream_create call, or at the latest fini joins that
 * worker and frees the stream, so no worker of the context outlives it. So a
 * program that starts threads without end does not collect idle workers.
 * A retired stream's unreported error is logged when it goes.
 *
 * Workers are reused: stream_destroy of an unwrapped stream leaves its
 * worker waiting, idle, on the context's idle list (at most IDLE_MAX; past
 * that it is stopped and joined), and the next stream made takes an idle
 * one instead of starting a thread. A thread's start and exit (an 8 MiB
 * stack mapped, faulted in and unmapped once more than glibc's stack cache
 * is in use, as when the deallocation queue destroys streams in batches)
 * cost a create/destroy pair tens of microseconds; a reused worker costs
 * none of that. An idle stream is on no list but the idle one, so nothing
 * orders against it or finds it by its handle; fini joins it.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "host_backend.h"

#define STICKY_MESSAGE_MAX 512
#define BUILTIN_NONE       (-1)
#define IDLE_MAX           16 /* idle workers a context keeps (a queue flush destroys 11) */

/* Completion of one event record. Reference counted under the context lock. */
struct host_fence {
    int refs;
    bool done;
    uint64_t time_ns; /* CLOCK_MONOTONIC when the stream reached it */
};

/* A stream: a worker and its FIFO, or a wrapper (target != NULL, no worker). */
struct host_stream {
    host_ctx *ctx;
    host_stream *next;   /* in ctx->streams or ctx->wrappers */
    host_stream *target; /* wrappers: the wrapped stream */
    unsigned flags;      /* gm_stream_flags */
    int builtin;         /* a gm_builtin_stream, or BUILTIN_NONE */
    pthread_t thread;
    pthread_cond_t wake; /* signalled when work is appended or the stream stops */
    host_work *head;     /* the running or next item; stays until it completes */
    host_work *tail;
    uint64_t enqueued;
    uint64_t completed;
    uint64_t own_enqueued; /* enqueued after the last item its own work queued */
    bool stopping;
    bool retired;   /* per-thread stream of an exited thread, or a destroyed stream still
                       wrapped: goes once idle and unwrapped */
    bool destroyed; /* stream_destroy was called: no new wrapper finds it */
    gm_status sticky;
    char sticky_message[STICKY_MESSAGE_MAX];
};

/* An event: the fence of its most recent record (NULL: never recorded). */
struct host_event {
    host_ctx *ctx;
    host_event *prev;
    host_event *next;
    bool timing;
    host_fence *fence;
};

/* The stream whose worker is the calling thread (NULL on other threads). */
static _Thread_local host_stream *tls_worker = NULL;

/* Opaque handle conversions. */
static host_stream *as_stream(gm_backend_stream *stream)
{
    return (host_stream *)(void *)stream;
}

static gm_backend_stream *to_backend_stream(host_stream *stream)
{
    return (gm_backend_stream *)(void *)stream;
}

static host_event *as_event(gm_backend_event *event)
{
    return (host_event *)(void *)event;
}

/* The stream a (possibly wrapper) stream stands for. */
static host_stream *real_stream(host_stream *s)
{
    return s->target != NULL ? s->target : s;
}

/* CLOCK_MONOTONIC in nanoseconds. */
static uint64_t now_ns(void)
{
    struct timespec ts = {0, 0};

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------- work items */

/* A new fence with one reference, or NULL. */
static host_fence *fence_new(void)
{
    host_fence *f = gm__calloc(1, sizeof *f);

    if (f != NULL)
        f->refs = 1;
    return f;
}

/* Drop a reference (context lock held). Accepts NULL. */
static void fence_release(host_fence *f)
{
    if (f != NULL && --f->refs == 0)
        gm__free(f);
}

host_work *gm__host_work_new(void)
{
    return gm__calloc(1, sizeof(host_work));
}

void gm__host_work_free(host_work *w)
{
    if (w == NULL)
        return;
    gm__free(w->views);
    gm__free(w);
}

/* Free the work items the workers have finished (context lock held). */
static void reap_locked(host_ctx *c)
{
    while (c->dead != NULL) {
        host_work *w = c->dead;

        c->dead = w->next;
        fence_release(w->signal);
        fence_release(w->wait);
        gm__host_work_free(w);
    }
}

/* --------------------------------------------------------- ordering */

/* Whether s synchronizes with the legacy stream. */
static bool is_blocking(const host_ctx *c, const host_stream *s)
{
    return s != c->legacy_stream && (s->flags & GM_STREAM_NON_BLOCKING) == 0;
}

/* Whether s has finished every item with a ticket below `ticket`. */
static bool clear_before(const host_stream *s, uint64_t ticket)
{
    return s->head == NULL || s->head->ticket > ticket;
}

/*
 * Whether every stream other than `skip` (only the blocking ones when
 * `only_blocking`) has finished its items with a ticket below `ticket`.
 */
static bool streams_clear(const host_ctx *c, uint64_t ticket, const host_stream *skip,
                          bool only_blocking)
{
    /* no blocking stream holds an item: nothing to walk for each legacy-stream item (300 idle
     * streams made each one cost 1.3 us instead of 61 ns) */
    if (only_blocking && c->busy_blocking == 0)
        return true;
    for (const host_stream *s = c->streams; s != NULL; s = s->next) {
        if (s != skip && (!only_blocking || is_blocking(c, s)) && !clear_before(s, ticket))
            return false;
    }
    return true;
}

/* Whether item w at the head of s may start (context lock held). */
static bool work_ready(const host_ctx *c, const host_stream *s, const host_work *w)
{
    if (w->wait != NULL && !w->wait->done)
        return false;
    if (s == c->legacy_stream)
        return streams_clear(c, w->ticket, s, true);
    if (is_blocking(c, s) && c->legacy_stream != NULL)
        return clear_before(c->legacy_stream, w->ticket);
    return true;
}

/*
 * Work that the item running on another stream of this context (a stream
 * callback) queues on s starts only once that item has returned, as
 * runtime.h promises (HSA's one handler thread runs callbacks in turn; here
 * each stream's worker would start it at once, while the callback still
 * runs): it waits for the running item's completion fence, made for it if it
 * has none (a dependency on a smaller ticket: no cycle). Without memory for
 * that fence the work is left unordered (logged). Lock held.
 */
static void after_running_locked(host_ctx *c, const host_stream *s, host_work *w)
{
    host_work *running = tls_worker != NULL ? tls_worker->head : NULL;

    if (running == NULL || tls_worker == s || tls_worker->ctx != c || w->wait != NULL)
        return;
    if (running->signal == NULL)
        running->signal = fence_new();
    if (running->signal == NULL) {
        gm__log(GM_LOG_WARN, "stream work queued by a stream callback: out of memory for its "
                             "ordering; it may start before the callback returns");
        return;
    }
    running->signal->refs++;
    w->wait = running->signal;
}

/* Append w to s and wake its worker (context lock held). */
static void submit_locked(host_ctx *c, host_stream *s, host_work *w)
{
    reap_locked(c);
    after_running_locked(c, s, w);
    w->ticket = ++c->next_ticket;
    w->next = NULL;
    if (s->tail != NULL) {
        s->tail->next = w;
    } else {
        s->head = w;
        if (is_blocking(c, s))
            c->busy_blocking++;
    }
    s->tail = w;
    s->enqueued++;
    if (tls_worker == s) /* queued by the stream's own work (a callback) */
        s->own_enqueued = s->enqueued;
    atomic_fetch_add_explicit(&c->queued, 1, memory_order_relaxed);
    pthread_cond_signal(&s->wake);
}

void gm__host_submit(host_ctx *c, gm_backend_stream *stream, host_work *w)
{
    pthread_mutex_lock(&c->lock);
    submit_locked(c, real_stream(as_stream(stream)), w);
    pthread_mutex_unlock(&c->lock);
}

/*
 * Wait until the streams have finished every item queued before the call
 * (the calling worker's own stream is skipped): every stream when
 * `every_stream`, else what a legacy-stream item waits for (the blocking
 * streams and the legacy stream).
 */
static void wait_queued_before(host_ctx *c, bool every_stream)
{
    uint64_t ticket = 0;
    const host_stream *legacy = NULL;

    /* Nothing queued on any stream (the common case of synchronous code): every item
     * submitted before this call has finished, and its effects are visible (acquire). */
    if (atomic_load_explicit(&c->queued, memory_order_acquire) == 0)
        return;
    pthread_mutex_lock(&c->lock);
    reap_locked(c);
    ticket = ++c->next_ticket;
    for (;;) {
        legacy = c->legacy_stream;
        /* every stream, or the blocking ones and the legacy one (which is not blocking) */
        if (streams_clear(c, ticket, tls_worker, !every_stream) &&
            (every_stream || legacy == NULL || legacy == tls_worker ||
             clear_before(legacy, ticket)))
            break;
        pthread_cond_wait(&c->progress, &c->lock);
    }
    pthread_mutex_unlock(&c->lock);
}

void gm__host_sync_barrier(host_ctx *c)
{
    wait_queued_before(c, false);
}

/*
 * cuCtxSynchronize's wait: every stream, blocking or not (streams destroyed
 * by the core but still queued for destruction included), finishes what was
 * queued on it before the call. A worker's own stream is skipped.
 */
gm_status gm__host_device_synchronize(gm_backend_ctx *bctx)
{
    wait_queued_before(gm__host_ctx(bctx), true);
    return GM_OK;
}

/* Wait until s has finished everything enqueued so far (context lock held). */
static void wait_idle_locked(host_stream *s)
{
    uint64_t target = s->enqueued;

    while (s->completed < target)
        pthread_cond_wait(&s->ctx->progress, &s->ctx->lock);
}

/* ------------------------------------------------------------- worker */

/* Whether a wrapper refers to s (lock held). */
static bool wrapped_locked(const host_ctx *c, const host_stream *s)
{
    for (const host_stream *w = c->wrappers; w != NULL; w = w->next) {
        if (w->target == s)
            return true;
    }
    return false;
}

/* Whether s's worker is to end it: retired, idle and unwrapped, and not stopped by fini. */
static bool ends_itself(const host_ctx *c, const host_stream *s)
{
    return s->retired && !s->stopping && s->head == NULL && !wrapped_locked(c, s);
}

/* The next item for s's worker once it may start, or NULL to exit (lock held). */
static host_work *next_work(host_stream *s)
{
    host_ctx *c = s->ctx;

    while (s->head == NULL && !s->stopping && !ends_itself(c, s))
        pthread_cond_wait(&s->wake, &c->lock);
    if (s->head == NULL)
        return NULL;
    while (!work_ready(c, s, s->head))
        pthread_cond_wait(&c->progress, &c->lock);
    return s->head;
}

/* Pop the finished head item, complete its fence, keep the first error (lock held). */
static void complete_work(host_stream *s, host_work *w, gm_status status, const char *message)
{
    host_ctx *c = s->ctx;

    s->head = w->next;
    if (s->head == NULL) {
        s->tail = NULL;
        if (is_blocking(c, s))
            c->busy_blocking--;
    }
    s->completed++;
    if (w->signal != NULL) {
        w->signal->time_ns = now_ns();
        w->signal->done = true;
    }
    if (status != GM_OK && s->sticky == GM_OK) {
        s->sticky = status;
        snprintf(s->sticky_message, sizeof s->sticky_message, "%s", message);
    }
    w->next = c->dead;
    c->dead = w;
    /* Release: the item's effects are visible to a sync barrier that sees the count drop. */
    atomic_fetch_sub_explicit(&c->queued, 1, memory_order_release);
    pthread_cond_broadcast(&c->progress);
}

/* Run one item outside the lock; its failure message goes to `message`. */
static gm_status run_work(host_work *w, char *message, size_t size)
{
    gm_status status = GM_OK;

    gm_clear_error();
    if (w->run != NULL)
        status = w->run(w);
    message[0] = '\0';
    if (status != GM_OK && gm_last_error() != GM_OK)
        snprintf(message, size, "%s", gm_last_error_message());
    else if (status != GM_OK)
        snprintf(message, size, "stream work failed with %s", gm_status_name(status));
    if (w->cleanup != NULL)
        w->cleanup(w->user);
    return status;
}

static void unlink_stream_locked(host_ctx *c, host_stream *s);

/*
 * A retired stream's worker ends its stream (lock held): nothing refers to s
 * any more (no thread's map, no wrapper, no queued item), so it leaves the
 * stream list for the ended list, where a later call joins the worker and
 * frees it (join_ended). The worker touches nothing of s once it gives the
 * lock back.
 */
static void end_retired_locked(host_ctx *c, host_stream *s)
{
    if (s->sticky != GM_OK)
        gm__log(GM_LOG_WARN, "%s: discarding unreported error: %s",
                s->destroyed ? "stream_destroy" : "per-thread stream of an exited thread",
                s->sticky_message);
    unlink_stream_locked(c, s);
    reap_locked(c);
    s->next = c->ended;
    c->ended = s;
    tls_worker = NULL;
}

/* Take the ended list (lock held), for join_ended once the lock is given back. */
static host_stream *take_ended_locked(host_ctx *c)
{
    host_stream *ended = c->ended;

    c->ended = NULL;
    return ended;
}

/*
 * Join the workers of ended streams and free the streams. Not under the
 * context lock: a worker's last act may be its thread's exit notice, which
 * takes it (for the worker's own per-thread stream of this context). A
 * stream whose worker is the calling thread (an application's key
 * destructor running on a worker that has ended its stream) goes back to
 * the list, for a later caller or fini.
 */
static void join_ended(host_ctx *c, host_stream *ended)
{
    while (ended != NULL) {
        host_stream *s = ended;

        ended = s->next;
        if (pthread_equal(s->thread, pthread_self())) {
            pthread_mutex_lock(&c->lock);
            s->next = c->ended;
            c->ended = s;
            pthread_mutex_unlock(&c->lock);
            continue;
        }
        pthread_join(s->thread, NULL);
        pthread_cond_destroy(&s->wake);
        gm__free(s);
    }
}

/* A stream's worker thread: run items in order until the stream stops or, retired, ends. */
static void *worker_main(void *arg)
{
    host_stream *s = arg;
    host_ctx *c = s->ctx;
    char message[STICKY_MESSAGE_MAX];
    host_work *w = NULL;
    host_stream *ended = NULL;

    tls_worker = s;
    pthread_mutex_lock(&c->lock);
    while ((w = next_work(s)) != NULL) {
        gm_status status = GM_OK;

        w->stream_status = s->sticky;
        pthread_mutex_unlock(&c->lock);
        status = run_work(w, message, sizeof message);
        pthread_mutex_lock(&c->lock);
        complete_work(s, w, status, message);
    }
    if (ends_itself(c, s)) {
        /* the workers that ended before this one are joined here, so that at most one
         * waits for a later call to join it */
        ended = take_ended_locked(c);
        end_retired_locked(c, s);
    }
    pthread_mutex_unlock(&c->lock);
    join_ended(c, ended);
    return NULL;
}

/* ------------------------------------------------------------ streams */

/*
 * Create a stream (context lock held): an idle worker's, reset, or a new
 * one with a worker started for it.
 */
static gm_status stream_new_locked(host_ctx *c, unsigned flags, int builtin, host_stream **s_p)
{
    gm_status status = GM_ERR_NO_MEMORY;
    host_stream *s = c->idle;
    int rc = 0;

    if (s != NULL) { /* its worker waits in next_work: head NULL, not stopping nor retired */
        c->idle = s->next;
        c->nidle--;
        s->flags = flags;
        s->builtin = builtin;
        s->enqueued = 0;
        s->completed = 0;
        s->own_enqueued = 0;
        s->destroyed = false;
        s->next = c->streams;
        c->streams = s;
        *s_p = s;
        return GM_OK;
    }
    s = gm__calloc(1, sizeof *s);
    if (s == NULL)
        goto fail;
    s->ctx = c;
    s->flags = flags;
    s->builtin = builtin;
    if (pthread_cond_init(&s->wake, NULL) != 0)
        goto free_stream;
    rc = pthread_create(&s->thread, NULL, worker_main, s);
    if (rc != 0)
        goto destroy_cond;
    s->next = c->streams;
    c->streams = s;
    *s_p = s;
    return GM_OK;

destroy_cond:
    pthread_cond_destroy(&s->wake);
free_stream:
    gm__free(s);
fail:
    return gm__error(status, "stream_create: cannot create a stream (%s)",
                     rc != 0 ? "pthread_create failed" : "out of memory");
}

/* Remove s from the context's worker list (lock held). */
static void unlink_stream_locked(host_ctx *c, host_stream *s)
{
    host_stream **pp = &c->streams;

    while (*pp != NULL && *pp != s)
        pp = &(*pp)->next;
    if (*pp == s)
        *pp = s->next;
}

gm_status gm__host_stream_create(gm_backend_ctx *bctx, unsigned flags, gm_backend_stream **stream_p)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_stream *s = NULL, *ended = NULL;
    gm_status status = GM_OK;

    if (stream_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "stream_create: stream_p is NULL");
    if ((flags & ~(unsigned)GM_STREAM_NON_BLOCKING) != 0)
        return gm__error(GM_ERR_INVALID_ARG, "stream_create: unknown flags 0x%x", flags);
    pthread_mutex_lock(&c->lock);
    status = stream_new_locked(c, flags, BUILTIN_NONE, &s);
    ended = take_ended_locked(c);
    pthread_mutex_unlock(&c->lock);
    join_ended(c, ended);
    if (status == GM_OK)
        *stream_p = to_backend_stream(s);
    return status;
}

/* The built-in stream in *slot, created on first use (lock held). */
static gm_status builtin_locked(host_ctx *c, host_stream **slot, int which, host_stream **s_p)
{
    gm_status status = GM_OK;

    if (*slot == NULL)
        status = stream_new_locked(c, 0, which, slot);
    if (status == GM_OK)
        *s_p = *slot;
    return status;
}

/* The calling thread's per-thread default stream, created on first use (lock held). */
static gm_status per_thread_locked(host_ctx *c, host_stream **s_p)
{
    uint64_t key = gm__thread_key();
    host_thread_stream *map = c->thread_streams;
    gm_status status = GM_OK;

    for (size_t i = 0; i < c->nthread_streams; i++) {
        if (map[i].thread_key == key) {
            *s_p = map[i].stream;
            return GM_OK;
        }
    }
    if (c->nthread_streams == c->thread_stream_cap) {
        size_t cap = c->thread_stream_cap == 0 ? 8 : 2 * c->thread_stream_cap;

        map = gm__realloc(map, cap * sizeof *map);
        if (map == NULL)
            return gm__error(GM_ERR_NO_MEMORY, "stream_builtin: out of memory");
        c->thread_streams = map;
        c->thread_stream_cap = cap;
    }
    status = stream_new_locked(c, 0, GM_BUILTIN_STREAM_PER_THREAD, &map[c->nthread_streams].stream);
    if (status == GM_OK) {
        map[c->nthread_streams].thread_key = key;
        *s_p = map[c->nthread_streams++].stream;
    }
    return status;
}

/*
 * A thread that used per-thread streams exits (thread_exit.c's notice, under
 * its lock): retire its stream of this context, if it has one. Its worker
 * ends it once it is idle and unwrapped; this only wakes it to look.
 */
static void thread_exited(void *arg, uint64_t key)
{
    host_ctx *c = arg;

    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->nthread_streams; i++) {
        host_stream *s = c->thread_streams[i].stream;

        if (c->thread_streams[i].thread_key != key)
            continue;
        c->thread_streams[i] = c->thread_streams[--c->nthread_streams];
        s->retired = true;
        pthread_cond_signal(&s->wake);
        break;
    }
    pthread_mutex_unlock(&c->lock);
}

/* A built-in stream (lock held). */
static gm_status stream_builtin_locked(host_ctx *c, gm_builtin_stream which, host_stream **s_p)
{
    switch (which) {
    case GM_BUILTIN_STREAM_DEFAULT: /* stream 0: the legacy stream, as on CUDA and HSA */
    case GM_BUILTIN_STREAM_LEGACY:
        return builtin_locked(c, &c->legacy_stream, GM_BUILTIN_STREAM_LEGACY, s_p);
    case GM_BUILTIN_STREAM_PER_THREAD:
        return per_thread_locked(c, s_p);
    }
    return gm__error(GM_ERR_INVALID_ARG, "stream_builtin: unknown built-in stream %d", (int)which);
}

gm_status gm__host_stream_builtin(gm_backend_ctx *bctx, gm_builtin_stream which,
                                  gm_backend_stream **stream_p)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_stream *s = NULL, *ended = NULL;
    gm_status status = GM_OK;

    if (stream_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "stream_builtin: stream_p is NULL");
    pthread_mutex_lock(&c->lock);
    status = stream_builtin_locked(c, which, &s);
    ended = take_ended_locked(c); /* NULL but after exits: a load */
    pthread_mutex_unlock(&c->lock);
    join_ended(c, ended);
    if (status == GM_OK)
        *stream_p = to_backend_stream(s);
    return status;
}

/* The stream an op acts on: NULL means the legacy stream (lock held). */
static gm_status resolve_locked(host_ctx *c, gm_backend_stream *stream, host_stream **s_p)
{
    if (stream == NULL)
        return builtin_locked(c, &c->legacy_stream, GM_BUILTIN_STREAM_LEGACY, s_p);
    *s_p = real_stream(as_stream(stream));
    return GM_OK;
}

/* Why s may not be destroyed by stream_destroy, or NULL. */
static const char *destroy_refusal(const host_stream *s)
{
    if (s->target != NULL)
        return "a wrapped stream is released with stream_unwrap";
    if (s->builtin != BUILTIN_NONE)
        return "built-in streams belong to the context";
    return NULL;
}

gm_status gm__host_stream_destroy(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_stream *s = as_stream(stream);

    if (s == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "stream_destroy: stream is NULL");
    if (destroy_refusal(s) != NULL)
        return gm__error(GM_ERR_INVALID_ARG, "stream_destroy: %s", destroy_refusal(s));
    if (tls_worker == s)
        return gm__error(GM_ERR_STATE, "stream_destroy: called from the stream's own work");
    pthread_mutex_lock(&c->lock);
    s->destroyed = true;
    /* The core frees what its queued callbacks are given next: wait for the work queued so
     * far and for what those callbacks queue on it meanwhile (not for other threads' later
     * work through a wrapper, which would starve the destroy; the stream stays for that). */
    for (uint64_t target = s->enqueued;;) {
        while (s->completed < target)
            pthread_cond_wait(&c->progress, &c->lock);
        if (s->own_enqueued <= target)
            break;
        target = s->own_enqueued;
    }
    if (s->sticky != GM_OK) {
        gm__log(GM_LOG_WARN, "stream_destroy: discarding unreported error: %s", s->sticky_message);
        s->sticky = GM_OK; /* taken with the stream, whoever still wraps it */
    }
    if (wrapped_locked(c, s)) {
        /* a wrapper still refers to it (its handle was wrapped): its worker ends it once it is
         * idle and the last wrapper went, as it ends an exited thread's stream */
        s->retired = true;
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&c->lock);
        return GM_OK;
    }
    if (c->nidle < IDLE_MAX && s->head == NULL) { /* its worker waits for the next stream */
        unlink_stream_locked(c, s);
        reap_locked(c);
        s->next = c->idle;
        c->idle = s;
        c->nidle++;
        pthread_mutex_unlock(&c->lock);
        return GM_OK;
    }
    s->stopping = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&c->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_lock(&c->lock); /* listed until its worker is done: legacy work orders on it */
    unlink_stream_locked(c, s);
    reap_locked(c);
    pthread_mutex_unlock(&c->lock);
    pthread_cond_destroy(&s->wake);
    gm__free(s);
    return GM_OK;
}

/* The worker stream `native` names, if it is one of this context's and not destroyed (lock
 * held). */
static host_stream *find_stream_locked(host_ctx *c, const void *native)
{
    for (host_stream *s = c->streams; s != NULL; s = s->next) {
        if ((const void *)s == native)
            return s->destroyed ? NULL : s;
    }
    for (host_stream *s = c->wrappers; s != NULL; s = s->next) {
        if ((const void *)s == native)
            return s->target->destroyed ? NULL : s->target;
    }
    return NULL;
}

gm_status gm__host_stream_wrap(gm_backend_ctx *bctx, void *native, gm_backend_stream **stream_p)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_stream *w = NULL;
    host_stream *target = NULL;

    if (native == NULL || stream_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "stream_wrap: %s is NULL",
                         native == NULL ? "native" : "stream_p");
    w = gm__calloc(1, sizeof *w);
    if (w == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "stream_wrap: out of memory");
    pthread_mutex_lock(&c->lock);
    target = find_stream_locked(c, native);
    if (target != NULL) {
        w->ctx = c;
        w->target = target;
        w->builtin = BUILTIN_NONE;
        w->next = c->wrappers;
        c->wrappers = w;
    }
    pthread_mutex_unlock(&c->lock);
    if (target == NULL) {
        gm__free(w);
        return gm__error(GM_ERR_INVALID_HANDLE,
                         "stream_wrap: %p is not a live stream of this host backend context "
                         "(never one, or destroyed)",
                         native);
    }
    *stream_p = to_backend_stream(w);
    return GM_OK;
}

void gm__host_stream_unwrap(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_stream *s = as_stream(stream);
    host_stream **pp = NULL;

    if (s == NULL || s->target == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    for (pp = &c->wrappers; *pp != NULL && *pp != s; pp = &(*pp)->next)
        continue;
    if (*pp == s)
        *pp = s->next;
    /* the target stays while wrapped: if retired (its thread exited, or it was destroyed),
     * its worker may end it now */
    pthread_cond_signal(&s->target->wake);
    pthread_mutex_unlock(&c->lock);
    gm__free(s);
}

void *gm__host_stream_native(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    (void)bctx;
    return stream == NULL ? NULL : (void *)real_stream(as_stream(stream));
}

gm_status gm__host_stream_synchronize(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_stream *s = NULL;
    char message[STICKY_MESSAGE_MAX] = "";
    gm_status status = GM_OK;

    pthread_mutex_lock(&c->lock);
    status = resolve_locked(c, stream, &s);
    if (status == GM_OK && s == tls_worker)
        status = GM_ERR_STATE;
    if (status == GM_OK) {
        wait_idle_locked(s);
        status = s->sticky;
        snprintf(message, sizeof message, "%s", s->sticky_message);
        s->sticky = GM_OK;
        reap_locked(c);
    }
    pthread_mutex_unlock(&c->lock);
    if (status == GM_ERR_STATE && message[0] == '\0')
        return gm__error(status, "stream_synchronize: called from the stream's own work");
    if (status != GM_OK && message[0] != '\0')
        return gm__error(status, "stream_synchronize: %s", message);
    return status;
}

gm_status gm__host_stream_query(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_stream *s = NULL;
    gm_status status = GM_OK;

    pthread_mutex_lock(&c->lock);
    status = resolve_locked(c, stream, &s);
    if (status == GM_OK && s->completed < s->enqueued)
        status = GM_ERR_NOT_READY;
    pthread_mutex_unlock(&c->lock);
    return status;
}

/* Queue w on a stream (NULL: legacy); frees w if the stream cannot be had. */
static gm_status enqueue(host_ctx *c, gm_backend_stream *stream, host_work *w)
{
    host_stream *s = NULL;
    gm_status status = GM_OK;

    pthread_mutex_lock(&c->lock);
    status = resolve_locked(c, stream, &s);
    if (status == GM_OK)
        submit_locked(c, s, w);
    pthread_mutex_unlock(&c->lock);
    if (status != GM_OK)
        gm__host_work_free(w);
    return status;
}

/* Work item body: a completion callback. */
static gm_status run_callback(host_work *w)
{
    w->callback(w->stream_status, w->user);
    return GM_OK;
}

/* Work item body: host work. */
static gm_status run_host(host_work *w)
{
    return w->fn(w->user);
}

gm_status gm__host_stream_add_callback(gm_backend_ctx *bctx, gm_backend_stream *stream,
                                       gm_backend_callback_fn fn, void *user)
{
    host_work *w = NULL;

    if (fn == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "stream_add_callback: fn is NULL");
    w = gm__host_work_new();
    if (w == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "stream_add_callback: out of memory");
    w->run = run_callback;
    w->callback = fn;
    w->user = user;
    return enqueue(gm__host_ctx(bctx), stream, w);
}

gm_status gm__host_stream_enqueue_host(gm_backend_ctx *bctx, gm_backend_stream *stream,
                                       gm_backend_host_work_fn fn, void *user,
                                       void (*cleanup)(void *user))
{
    host_work *w = NULL;
    gm_status status = GM_OK;

    if (fn == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "stream_enqueue_host: fn is NULL");
    if (stream == NULL) {
        gm__host_sync_barrier(gm__host_ctx(bctx));
        status = fn(user);
        if (cleanup != NULL)
            cleanup(user);
        return status;
    }
    w = gm__host_work_new();
    if (w == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "stream_enqueue_host: out of memory");
    w->run = run_host;
    w->fn = fn;
    w->user = user;
    w->cleanup = cleanup;
    gm__host_submit(gm__host_ctx(bctx), stream, w);
    return GM_OK;
}

/* ------------------------------------------------------------- events */

gm_status gm__host_event_create(gm_backend_ctx *bctx, unsigned timing, gm_backend_event **event_p)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_event *e = NULL;

    if (event_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "event_create: event_p is NULL");
    e = gm__calloc(1, sizeof *e);
    if (e == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "event_create: out of memory");
    e->ctx = c;
    e->timing = timing != 0;
    pthread_mutex_lock(&c->lock);
    e->next = c->events;
    if (c->events != NULL)
        c->events->prev = e;
    c->events = e;
    pthread_mutex_unlock(&c->lock);
    *event_p = (gm_backend_event *)(void *)e;
    return GM_OK;
}

/* Unlink and free an event (lock held). */
static void event_free_locked(host_ctx *c, host_event *e)
{
    if (e->prev != NULL)
        e->prev->next = e->next;
    else
        c->events = e->next;
    if (e->next != NULL)
        e->next->prev = e->prev;
    fence_release(e->fence);
    gm__free(e);
}

gm_status gm__host_event_destroy(gm_backend_ctx *bctx, gm_backend_event *event)
{
    host_ctx *c = gm__host_ctx(bctx);

    if (event == NULL)
        return GM_OK;
    pthread_mutex_lock(&c->lock);
    event_free_locked(c, as_event(event));
    pthread_mutex_unlock(&c->lock);
    return GM_OK;
}

gm_status gm__host_event_record(gm_backend_ctx *bctx, gm_backend_event *event,
                                gm_backend_stream *stream)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_event *e = as_event(event);
    host_fence *f = NULL;
    host_work *w = NULL;
    host_stream *s = NULL;
    gm_status status = GM_ERR_NO_MEMORY;

    if (e == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "event_record: event is NULL");
    f = fence_new();
    w = gm__host_work_new();
    if (f == NULL || w == NULL)
        goto free_work;
    pthread_mutex_lock(&c->lock);
    status = resolve_locked(c, stream, &s);
    if (status == GM_OK && atomic_load_explicit(&c->queued, memory_order_relaxed) == 0) {
        /* Nothing queued on any stream: the marker would complete as soon as its worker
         * woke, so it completes now, without the round trip through that thread (a
         * synchronous fill of pinned memory waited 12-70 us for it). */
        f->done = true;
        f->time_ns = now_ns();
        fence_release(e->fence);
        e->fence = f;
        pthread_mutex_unlock(&c->lock);
        gm__host_work_free(w);
        return GM_OK;
    }
    if (status == GM_OK) {
        f->refs = 2; /* the event's and the marker's */
        w->signal = f;
        fence_release(e->fence);
        e->fence = f;
        submit_locked(c, s, w);
    }
    pthread_mutex_unlock(&c->lock);
    if (status == GM_OK)
        return GM_OK;

free_work:
    gm__host_work_free(w);
    gm__free(f);
    if (status == GM_ERR_NO_MEMORY)
        return gm__error(status, "event_record: out of memory");
    return status;
}

gm_status gm__host_stream_wait_event(gm_backend_ctx *bctx, gm_backend_stream *stream,
                                     gm_backend_event *event)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_event *e = as_event(event);
    host_work *w = NULL;
    host_stream *s = NULL;
    gm_status status = GM_OK;

    if (e == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "stream_wait_event: event is NULL");
    w = gm__host_work_new();
    if (w == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "stream_wait_event: out of memory");
    pthread_mutex_lock(&c->lock);
    status = resolve_locked(c, stream, &s);
    if (status == GM_OK && e->fence != NULL && !e->fence->done) {
        e->fence->refs++;
        w->wait = e->fence;
        submit_locked(c, s, w);
        w = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    gm__host_work_free(w);
    return status;
}

gm_status gm__host_event_query(gm_backend_ctx *bctx, gm_backend_event *event)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_event *e = as_event(event);
    bool done = true;

    if (e == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "event_query: event is NULL");
    pthread_mutex_lock(&c->lock);
    done = e->fence == NULL || e->fence->done;
    pthread_mutex_unlock(&c->lock);
    return done ? GM_OK : GM_ERR_NOT_READY;
}

gm_status gm__host_event_synchronize(gm_backend_ctx *bctx, gm_backend_event *event)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_event *e = as_event(event);
    host_fence *f = NULL;

    if (e == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "event_synchronize: event is NULL");
    pthread_mutex_lock(&c->lock);
    f = e->fence;
    if (f != NULL) {
        f->refs++; /* the event may be recorded again while we wait */
        while (!f->done)
            pthread_cond_wait(&c->progress, &c->lock);
        fence_release(f);
    }
    pthread_mutex_unlock(&c->lock);
    return GM_OK;
}

/* Why elapsed time cannot be computed between s and e, or NULL (lock held). */
static const char *elapsed_refusal(const host_event *s, const host_event *e)
{
    if (!s->timing || !e->timing)
        return "both events must be created with timing enabled";
    if (s->fence == NULL || e->fence == NULL)
        return "both events must have been recorded";
    return NULL;
}

gm_status gm__host_event_elapsed(gm_backend_ctx *bctx, gm_backend_event *start,
                                 gm_backend_event *end, float *ms_p)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_event *s = as_event(start);
    host_event *e = as_event(end);
    const char *refusal = NULL;
    bool done = false;
    double ms = 0.0;

    if (s == NULL || e == NULL || ms_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "event_elapsed: %s is NULL",
                         s == NULL   ? "start"
                         : e == NULL ? "end"
                                     : "ms_p");
    pthread_mutex_lock(&c->lock);
    refusal = elapsed_refusal(s, e);
    done = refusal == NULL && s->fence->done && e->fence->done;
    if (done)
        ms = ((double)e->fence->time_ns - (double)s->fence->time_ns) / 1e6;
    pthread_mutex_unlock(&c->lock);
    if (refusal != NULL)
        return gm__error(GM_ERR_INVALID_ARG, "event_elapsed: %s", refusal);
    if (!done)
        return gm__error(GM_ERR_NOT_READY, "event_elapsed: an event has not completed yet");
    *ms_p = (float)ms;
    return GM_OK;
}

/* ----------------------------------------------------------- lifecycle */

gm_status gm__host_streams_init(host_ctx *c)
{
    if (pthread_mutex_init(&c->lock, NULL) != 0)
        return gm__error(GM_ERR_INTERNAL, "init: pthread_mutex_init failed");
    if (pthread_cond_init(&c->progress, NULL) != 0) {
        pthread_mutex_destroy(&c->lock);
        return gm__error(GM_ERR_INTERNAL, "init: pthread_cond_init failed");
    }
    gm__thread_watch_start(&c->exit_watch, thread_exited, c);
    return GM_OK;
}

/* Stop every worker (the idle ones relisted first) once its queue is empty and join it. */
static void join_workers(host_ctx *c)
{
    pthread_mutex_lock(&c->lock);
    while (c->idle != NULL) {
        host_stream *s = c->idle;

        c->idle = s->next;
        s->next = c->streams;
        c->streams = s;
    }
    c->nidle = 0;
    for (host_stream *s = c->streams; s != NULL; s = s->next) {
        s->stopping = true;
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&c->lock);
    /* Only fini touches the list now; the workers drain (they still take the lock). */
    for (host_stream *s = c->streams; s != NULL; s = s->next)
        pthread_join(s->thread, NULL);
}

void gm__host_streams_fini(host_ctx *c)
{
    host_stream *ended = NULL;

    gm__thread_watch_stop(&c->exit_watch); /* no exit notice retires a stream from now on */
    join_workers(c);
    pthread_mutex_lock(&c->lock);
    ended = take_ended_locked(c); /* the workers are joined: no stream ends now */
    pthread_mutex_unlock(&c->lock);
    join_ended(c, ended);
    pthread_mutex_lock(&c->lock);
    while (c->streams != NULL) {
        host_stream *s = c->streams;

        /* the core reported the built-in streams it holds; the per-thread streams of the
         * other threads (one handle stands for all) are reported here */
        if (s->sticky != GM_OK)
            gm__log(GM_LOG_WARN, "context teardown: a stream held an unreported error: %s",
                    s->sticky_message);
        c->streams = s->next;
        pthread_cond_destroy(&s->wake);
        gm__free(s);
    }
    while (c->wrappers != NULL) {
        host_stream *w = c->wrappers;

        c->wrappers = w->next;
        gm__free(w);
    }
    while (c->events != NULL)
        event_free_locked(c, c->events);
    reap_locked(c);
    gm__free(c->thread_streams);
    pthread_mutex_unlock(&c->lock);
    pthread_cond_destroy(&c->progress);
    pthread_mutex_destroy(&c->lock);
}
