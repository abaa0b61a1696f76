/*
 * Streams on HSA: ordered chains of operations linked by completion signals
 * (see hsa_internal.h), the legacy default stream's implicit synchronization,
 * per-thread default streams, wrapping, and host work run in stream order
 * through hsa_amd_signal_async_handler.
 */
#include <stdio.h>
#include <string.h>

#include "hsa_internal.h"

/* ------------------------------------------------------------- errors */

/* Remember the first asynchronous error of a stream (any thread). */
void gm__hsa_stream_set_error(gm_backend_stream *stream, gm_status status, const char *text)
{
    pthread_mutex_lock(&stream->error_lock);
    if (stream->error == GM_OK) {
        stream->error = status;
        snprintf(stream->error_text, sizeof(stream->error_text), "%s", text);
    }
    pthread_mutex_unlock(&stream->error_lock);
}

/* The stream's pending error without clearing it. */
static gm_status peek_error(gm_backend_stream *stream)
{
    gm_status status = GM_OK;

    pthread_mutex_lock(&stream->error_lock);
    status = stream->error;
    pthread_mutex_unlock(&stream->error_lock);
    return status;
}

/* Report and clear the stream's pending error (each error is reported once). */
static gm_status take_error(gm_backend_stream *stream, const char *call)
{
    gm_status status = GM_OK;
    char text[GM_HSA_ERROR_TEXT];

    pthread_mutex_lock(&stream->error_lock);
    status = stream->error;
    memcpy(text, stream->error_text, sizeof(text));
    stream->error = GM_OK;
    stream->error_text[0] = '\0';
    pthread_mutex_unlock(&stream->error_lock);
    if (status == GM_OK)
        return GM_OK;
    return gm__error(status, "%s: earlier asynchronous work failed: %s", call, text);
}

/*
 * The runtime calls this when a queue breaks (aperture violation, illegal
 * instruction, bad packet...). Not for ordinary page faults: ROCr reports
 * those to the system event handler only (hsa_fault.c).
 */
static void queue_error_callback(hsa_status_t status, hsa_queue_t *source, void *data)
{
    gm_backend_stream *stream = data;
    gm_backend_ctx *bctx = stream->bctx;
    gm_status mapped =
        gm__hsa_check(status, &bctx->api, GM_ERR_CONTEXT_LOST, "AQL queue", __FILE__, __LINE__);

    (void)source;
    gm__hsa_stream_set_error(stream, mapped, gm_last_error_message());
    gm__hsa_ctx_fail(bctx, mapped, gm_last_error_message());
}

/* ------------------------------------------------------------- streams */

gm_status gm__hsa_stream_new(gm_backend_ctx *bctx, gm__hsa_stream_kind kind, unsigned flags,
                             gm_backend_stream **stream_p)
{
    gm_backend_stream *stream = gm__calloc(1, sizeof(*stream));

    if (stream == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "stream_create: no memory for an HSA stream");
    stream->magic = GM_HSA_STREAM_MAGIC;
    stream->kind = kind;
    stream->flags = flags;
    stream->bctx = bctx;
    if (kind != GM_HSA_STREAM_WRAPPER) {
        /* Never empty again, so a commit never needs memory (see gm__hsa_op_commit). */
        stream->frontier = gm__calloc(4, sizeof(*stream->frontier));
        if (stream->frontier == NULL) {
            gm__free(stream);
            return gm__error(GM_ERR_NO_MEMORY, "stream_create: no memory for an HSA stream");
        }
        stream->frontier_cap = 4;
    }
    pthread_mutex_init(&stream->error_lock, NULL);
    if (kind != GM_HSA_STREAM_WRAPPER) {
        stream->next = bctx->streams;
        bctx->streams = stream;
    } else {
        stream->next = bctx->wrappers;
        if (bctx->wrappers != NULL)
            bctx->wrappers->prev = stream;
        bctx->wrappers = stream;
    }
    *stream_p = stream;
    return GM_OK;
}

gm_backend_stream *gm__hsa_stream_resolve(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    if (stream == NULL)
        return bctx->legacy;
    if (stream->kind == GM_HSA_STREAM_WRAPPER)
        return stream->target;
    return stream;
}

/* The packets a stream's queue holds: GM_HSA_QUEUE_SIZE within the agent's limits. */
static uint32_t queue_size(const gm_backend_ctx *bctx)
{
    uint32_t size = GM_HSA_QUEUE_SIZE;

    if (size < bctx->queue_min_size)
        size = bctx->queue_min_size;
    if (bctx->queue_max_size != 0 && bctx->queue_max_size < size)
        size = bctx->queue_max_size;
    return size;
}

/* The stream's AQL queue, created on first use. Lock held. */
gm_status gm__hsa_stream_queue(gm_backend_ctx *bctx, gm_backend_stream *stream, hsa_queue_t **q_p)
{
    gm_status status = GM_OK;

    if (stream->queue == NULL) {
        status =
            GM_HSA_CALL(&bctx->api, hsa_queue_create,
                        (bctx->gpu, queue_size(bctx), HSA_QUEUE_TYPE_MULTI, queue_error_callback,
                         stream, UINT32_MAX, UINT32_MAX, &stream->queue));
        if (status != GM_OK)
            return status;
    }
    *q_p = stream->queue;
    return GM_OK;
}

/* Release what an operation held. Lock held. */
static void release_op(gm_backend_ctx *bctx, gm__hsa_op *op)
{
    if (op->kernarg != NULL && op->kernarg_pooled && bctx->nkernargs < GM_HSA_KERNARG_CACHE)
        bctx->kernargs[bctx->nkernargs++] = op->kernarg;
    else if (op->kernarg != NULL)
        (void)GM_HSA_CALL(&bctx->api, hsa_amd_memory_pool_free, (op->kernarg));
    if (op->staging != NULL)
        (void)GM_HSA_CALL(&bctx->api, hsa_amd_memory_pool_free, (op->staging));
    gm__hsa_stage_unref(bctx, op->stage);
    for (int i = 0; i < 2; i++) {
        if (op->locked[i] != NULL)
            gm__hsa_lock_release(bctx, op->locked[i]);
    }
    for (size_t i = 0; i < op->ndeps; i++)
        gm__hsa_sig_unref(bctx, op->deps[i]);
    gm__hsa_sig_unref(bctx, op->done);
    gm__free(op->deps);
    gm__free(op->work);
    gm__free(op);
}

/* Free completed operations from the head of the stream. Lock held. */
void gm__hsa_stream_reap(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    while (stream->ops_head != NULL && gm__hsa_sig_done(bctx, stream->ops_head->done)) {
        gm__hsa_op *op = stream->ops_head;
        hsa_signal_value_t value = bctx->api.hsa_signal_load_scacquire(op->done->handle);

        if (value < 0)
            op->done->failed_what = op->what; /* for work stuck behind it (hsa_signal.c) */
        if (value < 0 && !op->reported) {
            gm__saved_error saved; /* the caller's last error stays (a wait's failure...) */
            gm_status status = GM_OK;

            gm__error_save(&saved);
            status = gm__error(GM_ERR_DRIVER, "%s failed on the device (completion signal %lld)",
                               op->what, (long long)value);
            gm__hsa_stream_set_error(stream, status, gm_last_error_message());
            gm__error_restore(&saved);
        }
        stream->ops_head = op->next;
        if (stream->ops_head == NULL)
            stream->ops_tail = NULL;
        release_op(bctx, op);
    }
}

/* Append the still-pending signals of `from` to deps (refs taken). */
static void add_pending(gm_backend_ctx *bctx, const gm_backend_stream *from, gm__hsa_sig **deps,
                        size_t *ndeps)
{
    for (size_t i = 0; i < from->nfrontier; i++) {
        if (!gm__hsa_sig_done(bctx, from->frontier[i]))
            deps[(*ndeps)++] = gm__hsa_sig_ref(from->frontier[i]);
    }
}

/* Whether work on `other` must wait for / be waited by the legacy stream. */
static bool is_blocking(const gm_backend_stream *other)
{
    return other->kind != GM_HSA_STREAM_LEGACY && (other->flags & GM_STREAM_NON_BLOCKING) == 0;
}

/* Signals of from's frontier still pending (a done signal never is again). */
static size_t count_pending(const gm_backend_ctx *bctx, const gm_backend_stream *from)
{
    size_t n = 0;

    for (size_t i = 0; i < from->nfrontier; i++)
        n += gm__hsa_sig_done(bctx, from->frontier[i]) ? 0 : 1;
    return n;
}

/*
 * Upper bound of the dependencies collect_deps may add (signals only complete
 * meanwhile). Done ones do not count: a stream that waited for many events
 * must take work again once they completed.
 */
static size_t count_deps(const gm_backend_ctx *bctx, const gm_backend_stream *stream)
{
    size_t n = count_pending(bctx, stream);

    if (stream->kind == GM_HSA_STREAM_LEGACY) {
        for (const gm_backend_stream *s = bctx->streams; s != NULL; s = s->next)
            n += is_blocking(s) ? count_pending(bctx, s) : 0;
    } else if (is_blocking(stream)) {
        n += count_pending(bctx, bctx->legacy);
    }
    return n;
}

/*
 * What a new operation on `stream` waits for: the stream's frontier, plus the
 * legacy-stream rule (legacy work waits for every blocking stream, blocking
 * streams' work waits for legacy work). Completed signals are left out.
 */
static gm_status collect_deps(gm_backend_ctx *bctx, gm_backend_stream *stream, gm__hsa_op *op)
{
    size_t cap = count_deps(bctx, stream);

    if (cap == 0)
        return GM_OK;
    op->deps = gm__calloc(cap, sizeof(*op->deps));
    if (op->deps == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "HSA backend: no memory for dependency signals");
    add_pending(bctx, stream, op->deps, &op->ndeps);
    if (stream->kind == GM_HSA_STREAM_LEGACY) {
        for (gm_backend_stream *s = bctx->streams; s != NULL; s = s->next) {
            if (is_blocking(s))
                add_pending(bctx, s, op->deps, &op->ndeps);
        }
    } else if (is_blocking(stream)) {
        add_pending(bctx, bctx->legacy, op->deps, &op->ndeps);
    }
    return GM_OK;
}

/*
 * Start an operation on a resolved stream: reap finished work, collect the
 * dependencies and make the completion signal with value n (n DMA copies or
 * one packet each decrement it once). An operation that may write packets
 * (`packets`) first waits for room in the stream's queue; a DMA operation
 * hands its dependencies to the copy engine and needs none. Lock held.
 */
gm_status gm__hsa_op_begin(gm_backend_ctx *bctx, gm_backend_stream *stream, hsa_signal_value_t n,
                           bool packets, const char *what, gm__hsa_op **op_p)
{
    gm__hsa_op *op = NULL;
    gm_status status = GM_OK;

    /* A queue made later (by the operation) must hold its barriers too. */
    if (packets && stream->queue == NULL)
        status = gm__hsa_queue_check_size(gm__hsa_queue_packets_for(count_deps(bctx, stream)),
                                          queue_size(bctx), what);
    if (status != GM_OK)
        return status;
    /* Room first, before anything of the operation exists (the wait drops the lock); the
     * dependencies only grow while unlocked, so re-check until the room and they agree. */
    while (packets && stream->queue != NULL) {
        size_t need = gm__hsa_queue_packets_for(count_deps(bctx, stream));

        status = gm__hsa_queue_wait_room(bctx, stream->queue, need, what);
        if (status != GM_OK)
            return status;
        if (gm__hsa_queue_packets_for(count_deps(bctx, stream)) <= need)
            break;
    }
    gm__hsa_stream_reap(bctx, stream);
    op = gm__calloc(1, sizeof(*op));
    if (op == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: no memory for a stream operation", what);
    op->what = what;
    status = collect_deps(bctx, stream, op);
    if (status != GM_OK)
        goto fail;
    status = gm__hsa_sig_new(bctx, n, &op->done);
    if (status != GM_OK)
        goto fail;
    *op_p = op;
    return GM_OK;

fail:
    release_op(bctx, op);
    return status;
}

/* Drop the frontier's references. Lock held. */
static void clear_frontier(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    for (size_t i = 0; i < stream->nfrontier; i++)
        gm__hsa_sig_unref(bctx, stream->frontier[i]);
    stream->nfrontier = 0;
}

/* Add a signal to what the stream's next operation waits for. Lock held. */
gm_status gm__hsa_frontier_add(gm_backend_ctx *bctx, gm_backend_stream *stream, gm__hsa_sig *sig)
{
    size_t kept = 0;

    for (size_t i = 0; i < stream->nfrontier; i++) {
        if (stream->frontier[i] == sig) /* waiting twice for one event adds nothing */
            return GM_OK;
    }
    if (stream->nfrontier == stream->frontier_cap) { /* full: drop what completed first */
        for (size_t i = 0; i < stream->nfrontier; i++) {
            if (gm__hsa_sig_done(bctx, stream->frontier[i]))
                gm__hsa_sig_unref(bctx, stream->frontier[i]);
            else
                stream->frontier[kept++] = stream->frontier[i];
        }
        stream->nfrontier = kept;
    }
    if (stream->nfrontier == stream->frontier_cap) {
        size_t cap = stream->frontier_cap == 0 ? 4 : 2 * stream->frontier_cap;
        gm__hsa_sig **grown = gm__realloc(stream->frontier, cap * sizeof(*grown));

        if (grown == NULL)
            return gm__error(GM_ERR_NO_MEMORY, "stream_wait_event: no memory");
        stream->frontier = grown;
        stream->frontier_cap = cap;
    }
    stream->frontier[stream->nfrontier++] = gm__hsa_sig_ref(sig);
    return GM_OK;
}

_Thread_local gm_backend_stream *gm__hsa_handler_stream = NULL;

/* The operation was submitted: queue it and make it the frontier. Lock held. */
void gm__hsa_op_commit(gm_backend_ctx *bctx, gm_backend_stream *stream, gm__hsa_op *op)
{
    op->seq = ++stream->committed;
    if (gm__hsa_handler_stream == stream) /* queued by the stream's own callback */
        stream->own_committed = op->seq;
    if (stream->ops_tail != NULL)
        stream->ops_tail->next = op;
    else
        stream->ops_head = op;
    stream->ops_tail = op;
    clear_frontier(bctx, stream);
    /* frontier_cap >= 1 since stream creation: this cannot fail */
    stream->frontier[stream->nfrontier++] = gm__hsa_sig_ref(op->done);
}

/* Nothing of the operation reached the runtime: free it. Lock held. */
void gm__hsa_op_abort(gm_backend_ctx *bctx, gm__hsa_op *op)
{
    release_op(bctx, op);
}

/*
 * Commit op and wait for it with the lock released; lock held on entry and
 * exit. Host work on one dependency runs (skipping its step) even when that
 * dependency failed on the device; the caller then gets the failure.
 */
gm_status gm__hsa_op_finish_sync(gm_backend_ctx *bctx, gm_backend_stream *stream, gm__hsa_op *op)
{
    gm__hsa_sig *done = gm__hsa_sig_ref(op->done);
    gm__hsa_sig *dep = op->work != NULL && op->ndeps == 1 ? gm__hsa_sig_ref(op->deps[0]) : NULL;
    const char *what = op->what;
    hsa_signal_value_t value = 0;
    gm_status status = GM_OK;

    op->reported = true; /* this caller reports the op's failure, not the stream error */
    gm__hsa_op_commit(bctx, stream, op);
    pthread_mutex_unlock(&bctx->lock); /* from here another thread may reap and free op */
    status = gm__hsa_sig_wait(bctx, done, what);
    pthread_mutex_lock(&bctx->lock);
    if (dep != NULL && status == GM_OK)
        value = bctx->api.hsa_signal_load_scacquire(dep->handle);
    if (value < 0)
        status = gm__error(GM_ERR_DRIVER,
                           "%s skipped: an operation it waits for failed on the device "
                           "(completion signal %lld)",
                           what, (long long)value);
    gm__hsa_sig_unref(bctx, dep);
    gm__hsa_sig_unref(bctx, done);
    gm__hsa_stream_reap(bctx, stream);
    return status;
}

/*
 * Wait until every operation of the stream completed, oldest first; lock held
 * on entry and exit. Failed operations are left to the stream error (reap).
 */
/* A pending signal of the stream's frontier (an event it waits for), or NULL. Lock held. */
static gm__hsa_sig *pending_frontier(const gm_backend_ctx *bctx, const gm_backend_stream *stream)
{
    for (size_t i = 0; i < stream->nfrontier; i++)
        if (!gm__hsa_sig_done(bctx, stream->frontier[i]))
            return stream->frontier[i];
    return NULL;
}

/* What drain waits for. */
typedef enum drain_mode {
    DRAIN_QUEUED, /* the work queued when it starts (stream_synchronize, as in CUDA) */
    DRAIN_OWN,    /* that, and what the stream's own callbacks queue meanwhile (destroy:
                     the core frees what they are given next) */
    DRAIN_ALL     /* everything, whoever queues it (context teardown) */
} drain_mode;

/*
 * What drain waits for, from `start` (the stream's pending frontier when the
 * drain began, references held: the events it had been made to wait for, or
 * its last operation's signal; a later operation of another thread clears
 * the frontier, and its dependencies then hold them) and the operations up to
 * *target_p. Returns the next signal, or NULL when it is done. Lock held.
 */
static gm__hsa_sig *drain_next(gm_backend_ctx *bctx, gm_backend_stream *stream, drain_mode mode,
                               uint64_t *target_p, gm__hsa_sig **start, size_t *nstart_p)
{
    for (;;) {
        if (mode == DRAIN_ALL)
            return stream->ops_head != NULL ? stream->ops_head->done
                                            : pending_frontier(bctx, stream);
        if (stream->ops_head != NULL && stream->ops_head->seq <= *target_p)
            return stream->ops_head->done;
        while (*nstart_p > 0) {
            gm__hsa_sig *sig = start[*nstart_p - 1];

            if (!gm__hsa_sig_done(bctx, sig))
                return sig;
            gm__hsa_sig_unref(bctx, sig);
            --*nstart_p;
        }
        /* other threads' later work is not waited for (it would starve the caller) */
        if (mode != DRAIN_OWN || stream->own_committed <= *target_p)
            return NULL;
        *target_p = stream->own_committed;
    }
}

static gm_status drain(gm_backend_ctx *bctx, gm_backend_stream *stream, const char *call,
                       drain_mode mode)
{
    uint64_t target = stream->committed;
    gm__hsa_sig *small[4]; /* the frontier's usual size: no allocation per synchronize */
    gm__hsa_sig **start = NULL;
    size_t nstart = 0;
    gm_status status = GM_OK;

    gm__hsa_stream_reap(bctx, stream);
    if (mode != DRAIN_ALL && stream->nfrontier > 0) {
        start = stream->nfrontier <= sizeof(small) / sizeof(small[0])
                    ? small
                    : gm__calloc(stream->nfrontier, sizeof(*start));
        if (start == NULL)
            mode = DRAIN_ALL; /* no memory for the snapshot: wait for everything, as before */
        for (size_t i = 0; start != NULL && i < stream->nfrontier; i++) {
            if (!gm__hsa_sig_done(bctx, stream->frontier[i]))
                start[nstart++] = gm__hsa_sig_ref(stream->frontier[i]);
        }
    }
    /* its operations, then the events it was made to wait for (a wait is work of the
     * stream, as in CUDA, though no operation of its own stands for it); the signal is
     * picked once: a frontier signal may complete between two looks */
    while (status == GM_OK) {
        gm__hsa_sig *sig = drain_next(bctx, stream, mode, &target, start, &nstart);

        if (sig == NULL)
            break;
        sig = gm__hsa_sig_ref(sig);
        pthread_mutex_unlock(&bctx->lock);
        status = gm__hsa_sig_wait(bctx, sig, call);
        pthread_mutex_lock(&bctx->lock);
        gm__hsa_sig_unref(bctx, sig);
        if (status == GM_ERR_DRIVER)
            status = GM_OK;
        gm__hsa_stream_reap(bctx, stream);
    }
    while (nstart > 0)
        gm__hsa_sig_unref(bctx, start[--nstart]);
    if (start != small)
        gm__free(start);
    return status;
}

/* Free a stream whose work is finished (or abandoned after a queue failure). Lock held. */
static void stream_free(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    gm_backend_stream **link = &bctx->streams;

    while (*link != NULL && *link != stream)
        link = &(*link)->next;
    if (*link == stream)
        *link = stream->next;
    if (stream->queue != NULL)
        (void)GM_HSA_CALL(&bctx->api, hsa_queue_destroy, (stream->queue));
    gm__hsa_sig_unref(bctx, stream->queue_last);
    while (stream->ops_head != NULL) {
        gm__hsa_op *op = stream->ops_head;

        stream->ops_head = op->next;
        release_op(bctx, op);
    }
    clear_frontier(bctx, stream);
    gm__free(stream->frontier);
    pthread_mutex_destroy(&stream->error_lock);
    stream->magic = 0;
    gm__free(stream);
}

/*
 * Free a destroyed stream, or, when its drain ended on a context failure with
 * work pending, keep it as a zombie: a copy engine still running one of its
 * copies or an async handler still registered for its host work would touch
 * the signals, the locked memory, the staging buffers, the work item and the
 * stream (its error slot) that freeing releases. Zombies are reaped with
 * every stream (gm__hsa_reap_all) and freed once their work is done, or at
 * teardown. Lock held.
 */
static void stream_retire(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    gm_backend_stream **link = &bctx->streams;

    gm__hsa_stream_reap(bctx, stream);
    if (stream->ops_head == NULL) {
        stream_free(bctx, stream);
        return;
    }
    while (*link != NULL && *link != stream)
        link = &(*link)->next;
    if (*link == stream)
        *link = stream->next;
    stream->next = bctx->zombies;
    bctx->zombies = stream;
}

/*
 * Free the retired per-thread streams (of exited threads) whose work is done
 * (drain's test: its operations and the events it waits for) and that no
 * wrapper refers to; a pending error nobody can take any more is logged.
 * Lock held.
 */
static void end_retired(gm_backend_ctx *bctx)
{
    gm_backend_stream **link = &bctx->streams;

    while (*link != NULL) {
        gm_backend_stream *s = *link;

        if (s->retired && s->wrappers == 0)
            gm__hsa_stream_reap(bctx, s);
        /* its operations and the events it was made to wait for (a later legacy operation
         * depends on those through it; a failed host step's barrier may be one) */
        if (!s->retired || s->wrappers > 0 || s->ops_head != NULL ||
            pending_frontier(bctx, s) != NULL) {
            link = &s->next;
            continue;
        }
        if (peek_error(s) != GM_OK)
            gm__log(GM_LOG_WARN, "%s: discarding unreported error: %s",
                    s->destroyed ? "stream_destroy" : "per-thread stream of an exited thread",
                    s->error_text);
        stream_free(bctx, s); /* unlinks it: *link is the next one now */
    }
}

/* Reap the zombies, freeing those whose work is done; force: free every one. Lock held. */
static void reap_zombies(gm_backend_ctx *bctx, bool force)
{
    gm_backend_stream **link = &bctx->zombies;

    while (*link != NULL) {
        gm_backend_stream *z = *link;

        gm__hsa_stream_reap(bctx, z);
        if (z->ops_head != NULL && !force) {
            link = &z->next;
            continue;
        }
        *link = z->next;
        stream_free(bctx, z);
    }
}

/* Drain and free every stream (context teardown). Lock held. */
void gm__hsa_stream_free_all(gm_backend_ctx *bctx)
{
    while (bctx->thread_streams != NULL) {
        gm__hsa_thread_stream *ts = bctx->thread_streams;

        bctx->thread_streams = ts->next;
        gm__free(ts);
    }
    while (bctx->streams != NULL) {
        gm_backend_stream *stream = bctx->streams;

        if (drain(bctx, stream, "context teardown", DRAIN_ALL) != GM_OK)
            gm__log(GM_LOG_WARN, "HSA backend: %s", gm_last_error_message());
        /* the core took the other built-in streams' errors; the per-thread streams of other
         * threads (one handle stands for all) are reported here */
        if (stream != bctx->legacy && peek_error(stream) != GM_OK)
            gm__log(GM_LOG_WARN, "context teardown: a stream held an unreported error: %s",
                    stream->error_text);
        stream_free(bctx, stream);
    }
    reap_zombies(bctx, true);
    bctx->legacy = NULL;
}

/* ----------------------------------------------------------- host work */

/* Copy the rows of a host-to-host pitched copy. */
static void host_rows(const gm_copy_desc *d)
{
    for (size_t z = 0; z < d->depth; z++) {
        for (size_t y = 0; y < d->height; y++) {
            char *dst = (char *)(uintptr_t)d->dst + (z * d->dst_height + y) * d->dst_pitch;
            const char *src =
                (const char *)(uintptr_t)d->src + (z * d->src_height + y) * d->src_pitch;

            memmove(dst, src, d->width_bytes);
        }
    }
}

/* Run one work item's host side; its status becomes the stream's error. */
static gm_status run_work(gm__hsa_work *w, gm_status upstream)
{
    gm_status status = upstream;

    switch (w->kind) {
    case GM_HSA_WORK_FN:
        if (status == GM_OK)
            status = w->fn(w->user);
        if (w->cleanup != NULL)
            w->cleanup(w->user);
        break;
    case GM_HSA_WORK_CALLBACK:
        w->callback(status != GM_OK ? status : peek_error(w->stream), w->user);
        status = GM_OK;
        break;
    case GM_HSA_WORK_STAMP:
        atomic_store(&w->stamp_sig->stamp_ns, gm__hsa_now_ns());
        break;
    case GM_HSA_WORK_MEMCPY:
        if (status == GM_OK)
            host_rows(&w->copy);
        break;
    case GM_HSA_WORK_NOP:
        break;
    }
    return status;
}

/* The async handler: runs once the dependency completes, then completes `done`. */
static bool work_handler(hsa_signal_value_t value, void *arg)
{
    gm__hsa_work *w = arg;
    /* Read before the end below (the context's table may be gone once done is 0). */
    void (*complete)(hsa_signal_t, hsa_signal_value_t) = w->api->hsa_signal_store_screlease;
    hsa_signal_t done = w->done;
    /* staging rows a DMA copies next: that DMA must not start after a failure either */
    hsa_signal_value_t result = value < 0 && w->pass_failure ? value : 0;
    gm_status upstream = GM_OK;
    gm_status status = GM_OK;

    gm_clear_error();
    if (value < 0)
        upstream = gm__error(GM_ERR_DRIVER,
                             "stream work skipped: a preceding operation failed "
                             "(signal %lld)",
                             (long long)value);
    gm__hsa_handler_stream = w->stream;
    status = run_work(w, upstream);
    gm__hsa_handler_stream = NULL;
    /* A synchronous call reports its own failure (gm__hsa_op_finish_sync). */
    if (status != GM_OK && !w->sync)
        gm__hsa_stream_set_error(w->stream, status,
                                 gm_last_error() != GM_OK ? gm_last_error_message()
                                                          : gm_status_name(status));
    /* Last touch of w: once done is 0 a reaper may free it, and a waiter may end the
     * context (hence `complete`, read above). */
    atomic_fetch_add_explicit(&gm__hsa_handlers_ended, 1, memory_order_release);
    complete(done, result);
    return false;
}

/*
 * The single signal host work waits for: none (the always-zero signal), the
 * only one, or a barrier-AND packet merging them (*merged_p, held by op).
 */
static gm_status single_dep(gm_backend_ctx *bctx, gm_backend_stream *stream, gm__hsa_op *op,
                            hsa_signal_t *dep_p, gm__hsa_sig **merged_p)
{
    hsa_queue_t *queue = NULL;
    gm__hsa_sig *merged = NULL;
    gm__hsa_sig **deps = NULL;
    gm_status status = GM_OK;

    if (op->ndeps <= 1) {
        *dep_p = op->ndeps == 0 ? bctx->zero->handle : op->deps[0]->handle;
        return GM_OK;
    }
    status = gm__hsa_stream_queue(bctx, stream, &queue);
    if (status != GM_OK)
        return status;
    deps = gm__realloc(op->deps, (op->ndeps + 1) * sizeof(*deps));
    if (deps == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "HSA backend: no memory for dependency signals");
    op->deps = deps;
    status = gm__hsa_sig_new(bctx, 1, &merged);
    if (status != GM_OK)
        return status;
    status = gm__hsa_submit_barrier(bctx, queue, op->deps, op->ndeps, merged->handle);
    op->deps[op->ndeps++] = merged; /* held until the operation completes */
    if (status == GM_OK)
        *merged_p = merged;
    *dep_p = merged->handle;
    return status;
}

/*
 * Run `work` when op's dependencies complete and complete op->done after it.
 * op (begun with n = 1) takes ownership of work; on failure the caller aborts
 * op (which frees work) and nothing runs. Lock held.
 */
gm_status gm__hsa_host_work(gm_backend_ctx *bctx, gm_backend_stream *stream, gm__hsa_work *work,
                            gm__hsa_op *op)
{
    hsa_signal_t dep = {0};
    gm__hsa_sig *merged = NULL;
    gm_status status = GM_OK;

    work->api = &bctx->api;
    work->stream = stream;
    work->done = op->done->handle;
    op->work = work;
    status = single_dep(bctx, stream, op, &dep, &merged);
    if (status != GM_OK)
        return status;
    status = GM_HSA_CALL(&bctx->api, hsa_amd_signal_async_handler,
                         (dep, HSA_SIGNAL_CONDITION_LT, 1, work_handler, work));
    if (status != GM_OK && merged != NULL) {
        /* The merging barrier is in flight: its signal and the signals it waits for must
         * outlive it (the caller's abort would drop them, and the cache hand them to new
         * operations while the barrier still waits on them). An operation of their own
         * holds them on the stream until the barrier completes, and its signal becomes the
         * stream's frontier (it merges what the stream waited for), so no wait with the lock
         * held, which a callback that needs the lock would deadlock; only when there is no
         * memory for it, wait. */
        char detail[GM_HSA_ERROR_TEXT];
        gm__hsa_op *hold = gm__calloc(1, sizeof(*hold));

        snprintf(detail, sizeof(detail), "%s", gm_last_error_message());
        if (hold != NULL) {
            hold->what = "merging barrier";
            hold->reported = true; /* its dependencies' failures are their own operations' */
            hold->deps = op->deps; /* all but the last entry, merged: the hold's signal now */
            hold->ndeps = op->ndeps - 1;
            hold->done = merged;
            op->deps = NULL;
            op->ndeps = 0;
            gm__hsa_op_commit(bctx, stream, hold);
        } else if (gm__hsa_sig_wait_locked(bctx, merged, "host work") != GM_OK) {
            gm__log(GM_LOG_WARN, "HSA backend: %s", gm_last_error_message());
        }
        status = gm__error(status, "%s", detail);
    }
    return status;
}

/* --------------------------------------------------------------- ops */

gm_status gm__hsa_stream_create(gm_backend_ctx *bctx, unsigned flags, gm_backend_stream **stream_p)
{
    gm_status status = GM_OK;

    pthread_mutex_lock(&bctx->lock);
    status = gm__hsa_stream_new(bctx, GM_HSA_STREAM_CREATED, flags, stream_p);
    pthread_mutex_unlock(&bctx->lock);
    return status;
}

gm_status gm__hsa_stream_destroy(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    gm_status status = GM_OK;
    uint64_t mark = 0;

    if (stream == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "stream_destroy: stream is NULL");
    if (stream->kind != GM_HSA_STREAM_CREATED)
        return gm__error(GM_ERR_INVALID_ARG, "stream_destroy: %s",
                         stream->kind == GM_HSA_STREAM_WRAPPER
                             ? "a wrapped stream is released with stream_unwrap"
                             : "built-in streams belong to the context");
    mark = gm__error_mark();
    pthread_mutex_lock(&bctx->lock);
    status = drain(bctx, stream, "stream_destroy", DRAIN_OWN);
    if (status == GM_OK)
        status = take_error(stream, "stream_destroy");
    stream->destroyed = true;
    if (stream->wrappers > 0)
        stream->retired = true; /* wrapped: freed with the last wrapper (end_retired) */
    else
        stream_retire(bctx, stream);
    pthread_mutex_unlock(&bctx->lock);
    /* The stream is gone either way: an error of its work is logged, not returned (nor left
     * as the thread's error), so that the deallocation queue does not keep the entry and
     * destroy the stream again. */
    if (status != GM_OK)
        gm__log(GM_LOG_WARN, "stream_destroy: pending work failed: %s", gm_last_error_message());
    gm__error_back_to(mark); /* whatever was recorded on the way */
    return GM_OK;
}

/*
 * The calling thread's default stream, made on first use and keyed by
 * gm__thread_key (pthread_self() is no key: glibc hands an exited thread's id
 * to the next thread it creates, which would inherit the dead thread's
 * stream, its pending work and errors). When the thread exits, its stream is
 * retired (gm__hsa_thread_exited) and freed once its work is done. Lock held.
 */
static gm_status thread_stream(gm_backend_ctx *bctx, gm_backend_stream **stream_p)
{
    uint64_t self = gm__thread_key();
    gm__hsa_thread_stream *ts = bctx->thread_streams;
    gm_status status = GM_OK;

    while (ts != NULL && ts->thread_key != self)
        ts = ts->next;
    if (ts != NULL) {
        *stream_p = ts->stream;
        return GM_OK;
    }
    end_retired(bctx); /* a new thread: the streams of those gone before may be done */
    ts = gm__calloc(1, sizeof(*ts));
    if (ts == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "stream_builtin: no memory for a per-thread stream");
    status = gm__hsa_stream_new(bctx, GM_HSA_STREAM_PER_THREAD, GM_STREAM_DEFAULT, &ts->stream);
    if (status != GM_OK)
        goto fail_stream;
    ts->thread_key = self;
    ts->next = bctx->thread_streams;
    bctx->thread_streams = ts;
    *stream_p = ts->stream;
    return GM_OK;

fail_stream:
    gm__free(ts);
    return status;
}

/*
 * A thread that used per-thread streams exits (thread_exit.c's notice, under
 * its lock): retire its stream of this context, if it has one, and free it
 * now if it is idle and unwrapped, else once it is (end_retired, from every
 * reap of all streams and every new thread's first use). Its queued work
 * still runs, in order, and still orders the legacy stream.
 */
void gm__hsa_thread_exited(void *arg, uint64_t key)
{
    gm_backend_ctx *bctx = arg;
    gm__hsa_thread_stream **link = &bctx->thread_streams;

    pthread_mutex_lock(&bctx->lock);
    while (*link != NULL && (*link)->thread_key != key)
        link = &(*link)->next;
    if (*link != NULL) {
        gm__hsa_thread_stream *ts = *link;

        *link = ts->next;
        ts->stream->retired = true;
        gm__free(ts);
        end_retired(bctx);
    }
    pthread_mutex_unlock(&bctx->lock);
}

/* DEFAULT is the legacy stream, as in Numba (no per-thread mode by default). */
gm_status gm__hsa_stream_builtin(gm_backend_ctx *bctx, gm_builtin_stream which,
                                 gm_backend_stream **stream_p)
{
    gm_status status = GM_OK;

    pthread_mutex_lock(&bctx->lock);
    if (which == GM_BUILTIN_STREAM_PER_THREAD)
        status = thread_stream(bctx, stream_p);
    else if (which == GM_BUILTIN_STREAM_DEFAULT || which == GM_BUILTIN_STREAM_LEGACY)
        *stream_p = bctx->legacy;
    else
        status = gm__error(GM_ERR_INVALID_ARG, "stream_builtin: unknown stream %d", (int)which);
    pthread_mutex_unlock(&bctx->lock);
    return status;
}

/* A native HSA stream is a gm_backend_stream of this context (stream_native). */
gm_status gm__hsa_stream_wrap(gm_backend_ctx *bctx, void *native, gm_backend_stream **stream_p)
{
    gm_backend_stream *target = NULL;
    gm_backend_stream *wrapper = NULL;
    gm_status status = GM_OK;

    pthread_mutex_lock(&bctx->lock);
    target = bctx->streams;
    while (target != NULL && (void *)target != native)
        target = target->next;
    if (target == NULL || target->destroyed) {
        status = gm__error(GM_ERR_INVALID_HANDLE,
                           "stream_wrap: %p is not a live HSA stream of this context (never "
                           "one, or destroyed; HSA has no foreign stream handle)",
                           native);
        goto done;
    }
    status = gm__hsa_stream_new(bctx, GM_HSA_STREAM_WRAPPER, target->flags, &wrapper);
    if (status != GM_OK)
        goto done;
    wrapper->target = target;
    target->wrappers++; /* a retired or destroyed one stays while wrapped */
    *stream_p = wrapper;
done:
    pthread_mutex_unlock(&bctx->lock);
    return status;
}

void gm__hsa_stream_unwrap(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    if (stream == NULL || stream->kind != GM_HSA_STREAM_WRAPPER)
        return;
    pthread_mutex_lock(&bctx->lock);
    /* the target stays while wrapped; retired (its thread exited) or destroyed, it may go now */
    if (--stream->target->wrappers == 0 && stream->target->retired)
        end_retired(bctx);
    gm__hsa_wrapper_free(bctx, stream);
    pthread_mutex_unlock(&bctx->lock);
}

void gm__hsa_wrapper_free(gm_backend_ctx *bctx, gm_backend_stream *wrapper)
{
    if (wrapper->prev != NULL)
        wrapper->prev->next = wrapper->next;
    else
        bctx->wrappers = wrapper->next;
    if (wrapper->next != NULL)
        wrapper->next->prev = wrapper->prev;
    pthread_mutex_destroy(&wrapper->error_lock);
    wrapper->magic = 0;
    gm__free(wrapper);
}

void *gm__hsa_stream_native(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    return gm__hsa_stream_resolve(bctx, stream);
}

gm_status gm__hsa_stream_synchronize(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    gm_status status = GM_OK;

    pthread_mutex_lock(&bctx->lock);
    stream = gm__hsa_stream_resolve(bctx, stream);
    status = drain(bctx, stream, "stream_synchronize", DRAIN_QUEUED);
    pthread_mutex_unlock(&bctx->lock);
    if (status == GM_OK)
        status = take_error(stream, "stream_synchronize");
    return status;
}

gm_status gm__hsa_stream_query(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    gm_status status = GM_OK;

    pthread_mutex_lock(&bctx->lock);
    stream = gm__hsa_stream_resolve(bctx, stream);
    gm__hsa_stream_reap(bctx, stream);
    if (stream->ops_head != NULL || pending_frontier(bctx, stream) != NULL) {
        /* work, or an event it waits for, still pending; a lost context's never completes */
        status = gm__hsa_poll_failed(bctx, "stream_query");
        if (status == GM_OK)
            status = GM_ERR_NOT_READY;
    }
    pthread_mutex_unlock(&bctx->lock);
    return status;
}

/* Queue a work item on a stream. Takes ownership of work. */
static gm_status enqueue_work(gm_backend_ctx *bctx, gm_backend_stream *stream, gm__hsa_work *work,
                              const char *what)
{
    gm__hsa_op *op = NULL;
    gm_status status = GM_OK;

    pthread_mutex_lock(&bctx->lock);
    stream = gm__hsa_stream_resolve(bctx, stream);
    status = gm__hsa_op_begin(bctx, stream, 1, true, what, &op);
    if (status != GM_OK) {
        gm__free(work);
        goto done;
    }
    status = gm__hsa_host_work(bctx, stream, work, op);
    if (status != GM_OK) {
        gm__hsa_op_abort(bctx, op);
        goto done;
    }
    gm__hsa_op_commit(bctx, stream, op);
done:
    pthread_mutex_unlock(&bctx->lock);
    return status;
}

gm_status gm__hsa_stream_add_callback(gm_backend_ctx *bctx, gm_backend_stream *stream,
                                      gm_backend_callback_fn fn, void *user)
{
    gm__hsa_work *work = NULL;

    if (fn == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "stream_add_callback: fn is NULL");
    work = gm__calloc(1, sizeof(*work));
    if (work == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "stream_add_callback: no memory");
    work->kind = GM_HSA_WORK_CALLBACK;
    work->callback = fn;
    work->user = user;
    return enqueue_work(bctx, stream, work, "stream callback");
}

/*
 * Wait on the calling thread for what an operation on the legacy stream
 * would wait for (the synchronous form of stream work). Lock not held.
 */
static gm_status sync_barrier(gm_backend_ctx *bctx)
{
    gm__hsa_work *work = gm__calloc(1, sizeof(*work));
    gm__hsa_op *op = NULL;
    gm_status status = GM_OK;

    if (work == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "stream_enqueue_host: no memory");
    work->kind = GM_HSA_WORK_NOP;
    work->sync = true;
    pthread_mutex_lock(&bctx->lock);
    status = gm__hsa_op_begin(bctx, bctx->legacy, 1, true, "synchronous host work", &op);
    if (status != GM_OK) {
        gm__free(work);
    } else if (op->ndeps == 0) {
        gm__free(work);
        gm__hsa_op_abort(bctx, op);
    } else {
        status = gm__hsa_host_work(bctx, bctx->legacy, work, op);
        if (status != GM_OK)
            gm__hsa_op_abort(bctx, op);
        else
            status = gm__hsa_op_finish_sync(bctx, bctx->legacy, op);
    }
    pthread_mutex_unlock(&bctx->lock);
    return status;
}

/*
 * On GM_OK with a stream, cleanup(user) runs exactly once after fn ran (or
 * was skipped because earlier work failed); on an error return nothing runs
 * and the caller keeps user. Stream NULL: fn runs now on the calling thread
 * once the legacy stream's dependencies are done, then cleanup; fn's status
 * is returned (the host backend's convention).
 */
gm_status gm__hsa_stream_enqueue_host(gm_backend_ctx *bctx, gm_backend_stream *stream,
                                      gm_backend_host_work_fn fn, void *user,
                                      void (*cleanup)(void *user))
{
    gm__hsa_work *work = NULL;
    gm_status status = GM_OK;

    if (fn == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "stream_enqueue_host: fn is NULL");
    if (stream == NULL) {
        status = sync_barrier(bctx);
        if (status == GM_OK)
            status = fn(user);
        if (cleanup != NULL)
            cleanup(user);
        return status;
    }
    work = gm__calloc(1, sizeof(*work));
    if (work == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "stream_enqueue_host: no memory");
    work->kind = GM_HSA_WORK_FN;
    work->fn = fn;
    work->user = user;
    work->cleanup = cleanup;
    return enqueue_work(bctx, stream, work, "stream host work");
}

/*
 * device_synchronize without memory for the signal list: wait for the head
 * operation of any stream with work pending, one at a time, until none has
 * any (work queued meanwhile is waited for too). A failed context ends it
 * with its error (that head would never complete). Lock held.
 */
static gm_status wait_every_head(gm_backend_ctx *bctx)
{
    for (;;) {
        gm__hsa_sig *sig = NULL;
        gm_status status = GM_OK;

        for (gm_backend_stream *s = bctx->streams; s != NULL && sig == NULL; s = s->next) {
            gm__hsa_stream_reap(bctx, s);
            if (s->ops_head != NULL)
                sig = gm__hsa_sig_ref(s->ops_head->done);
        }
        if (sig == NULL)
            return GM_OK;
        pthread_mutex_unlock(&bctx->lock);
        status = gm__hsa_sig_wait(bctx, sig, "device_synchronize");
        pthread_mutex_lock(&bctx->lock);
        gm__hsa_sig_unref(bctx, sig);
        if (status != GM_OK && status != GM_ERR_DRIVER)
            return status;
    }
}

/* Reap every stream: what finished work held (locked pageable memory, staging and kernarg
 * buffers, signals) is released now. Lock held. */
void gm__hsa_reap_all(gm_backend_ctx *bctx)
{
    for (gm_backend_stream *s = bctx->streams; s != NULL; s = s->next)
        gm__hsa_stream_reap(bctx, s);
    reap_zombies(bctx, false);
    end_retired(bctx);
}

/*
 * cuCtxSynchronize's wait: every operation pending on any stream at the call
 * finishes (their completion signals are referenced under the lock, then
 * waited for without it), and is reaped before the call returns: the core
 * frees copy staging blocks and users free pageable memory right after a
 * synchronize, so nothing may stay locked or held past it. Failures of that
 * work stay with their streams: reaping a failed operation and waiting for
 * its signal record messages, so the caller's last error is saved at entry
 * and restored on GM_OK (the op runs inside flushes and teardown, which must
 * not change it).
 */
gm_status gm__hsa_device_synchronize(gm_backend_ctx *bctx)
{
    gm__hsa_sig **sigs = NULL;
    size_t n = 0, cap = 0;
    gm_status status = GM_OK;
    gm__saved_error saved;

    gm__error_save(&saved);
    pthread_mutex_lock(&bctx->lock);
    for (gm_backend_stream *s = bctx->streams; s != NULL; s = s->next) {
        gm__hsa_stream_reap(bctx, s);
        for (const gm__hsa_op *op = s->ops_head; op != NULL; op = op->next)
            cap++;
    }
    if (cap > 0)
        sigs = gm__calloc(cap, sizeof(*sigs));
    if (cap > 0 && sigs == NULL)
        status = wait_every_head(bctx); /* never return with work pending but on failure */
    for (gm_backend_stream *s = bctx->streams; s != NULL && sigs != NULL; s = s->next) {
        for (gm__hsa_op *op = s->ops_head; op != NULL; op = op->next)
            sigs[n++] = gm__hsa_sig_ref(op->done);
    }
    pthread_mutex_unlock(&bctx->lock);
    for (size_t i = 0; i < n; i++) {
        gm_status waited = gm__hsa_sig_wait(bctx, sigs[i], "device_synchronize");

        if (waited != GM_OK && waited != GM_ERR_DRIVER && status == GM_OK)
            status = waited;
    }
    pthread_mutex_lock(&bctx->lock);
    for (size_t i = 0; i < n; i++)
        gm__hsa_sig_unref(bctx, sigs[i]);
    gm__hsa_reap_all(bctx); /* the waited-for work is done: release what it held */
    pthread_mutex_unlock(&bctx->lock);
    gm__free(sigs);
    if (status == GM_OK)
        gm__error_restore(&saved);
    return status;
}
