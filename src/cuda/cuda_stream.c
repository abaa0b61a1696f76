/*
 * Streams and events of the CUDA backend.
 *
 * Streams: created ones (cuStreamCreate, destroyed by stream_destroy), the
 * three built-in ones owned by the backend context (the default stream is
 * the NULL stream; CU_STREAM_LEGACY; CU_STREAM_PER_THREAD) and wrapped
 * external CUstreams, of which only the wrapper is ours. Callbacks and host
 * work run through cuStreamAddCallback on a driver thread; like every CUDA
 * callback they must not call the CUDA API, so every op that needs the
 * driver refuses there (GM_ERR_STATE, gm__cuda_in_host_call) instead of
 * calling it. cuStreamAddCallback, unlike cuLaunchHostFunc, runs its
 * function even after an error in the context, with that error: callbacks
 * receive it (as Numba's add_callback does), host work is skipped then but
 * its cleanup still runs, so nothing queued leaks or waits forever. A failing
 * (or skipped) host work's status is kept on the stream and returned by its
 * next stream_synchronize (stream_query leaves it there), or logged if the
 * stream goes first.
 *
 * Events are the driver's CUevents; timing ones are created without
 * CU_EVENT_DISABLE_TIMING.
 */
#include <stdint.h>
#include <time.h>

#include "cuda_internal.h"

/*
 * The failed-host-step error of one thread's per-thread default stream. It
 * goes once its thread has exited and the calls queued with it have run
 * (an error nobody can take any more is logged then), or with the context.
 */
struct gm_cuda_thread_error {
    struct gm_cuda_thread_error *next;
    uint64_t thread; /* gm__thread_key() of its thread */
    _Atomic int error;
    long pending; /* host calls queued with this slot, not run yet (thread_errors_lock) */
    bool exited;  /* its thread has exited (thread_errors_lock) */
};

/* What a function queued with cuStreamAddCallback runs. */
typedef struct host_call {
    gm_backend_ctx *bctx;                     /* its host_calls count this call */
    gm_backend_stream *stream;                /* referenced until the call ran */
    _Atomic int *slot;                        /* where its stream's failed-work status is kept */
    struct gm_cuda_thread_error *thread_slot; /* that slot, when it is a thread's: counted */
    gm_backend_callback_fn callback;          /* stream_add_callback, or NULL */
    gm_backend_host_work_fn work;             /* stream_enqueue_host, or NULL */
    void (*cleanup)(void *user);
    void *user;
} host_call;

/* Log a host-work error left where nobody can take it any more (`stream`: which). */
static void log_discarded(const char *who, const char *stream, int error)
{
    if (error != GM_OK)
        gm__log(GM_LOG_WARN, "%s: discarding the unreported error of host work on %s: %s", who,
                stream, gm_status_name((gm_status)error));
}

/* Unlink and free a thread's slot (thread_errors_lock held), logging an error left in it. */
static void slot_free_locked(gm_backend_ctx *bctx, struct gm_cuda_thread_error *e, const char *why)
{
    struct gm_cuda_thread_error **link = &bctx->thread_errors;
    int error = atomic_load(&e->error);

    while (*link != NULL && *link != e)
        link = &(*link)->next;
    if (*link == e)
        *link = e->next;
    log_discarded(why, "a per-thread stream", error);
    gm__free(e);
}

/*
 * A thread that used a per-thread slot exits (thread_exit.c's notice, under
 * its lock): its slot goes now, or once the calls queued with it have run.
 */
static void thread_exited(void *arg, uint64_t key)
{
    gm_backend_ctx *bctx = arg;
    struct gm_cuda_thread_error *e = NULL;

    pthread_mutex_lock(&bctx->thread_errors_lock);
    for (e = bctx->thread_errors; e != NULL && e->thread != key; e = e->next)
        ;
    if (e != NULL) {
        e->exited = true;
        if (e->pending == 0)
            slot_free_locked(bctx, e, "per-thread stream of an exited thread");
    }
    pthread_mutex_unlock(&bctx->thread_errors_lock);
}

/* A host call queued with a thread's slot ran (or was never queued): the slot may go. */
static void slot_call_done(gm_backend_ctx *bctx, struct gm_cuda_thread_error *e)
{
    pthread_mutex_lock(&bctx->thread_errors_lock);
    if (--e->pending == 0 && e->exited)
        slot_free_locked(bctx, e, "per-thread stream of an exited thread");
    pthread_mutex_unlock(&bctx->thread_errors_lock);
}

void gm__cuda_streams_init(gm_backend_ctx *bctx)
{
    const CUstream handles[3] = {NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD};

    for (int i = 0; i < 3; i++) {
        bctx->builtin[i].handle = handles[i];
        bctx->builtin[i].kind = GM_CUDA_STREAM_BUILTIN;
        atomic_init(&bctx->builtin[i].deferred_error, GM_OK);
        atomic_init(&bctx->builtin[i].refs, 1);
    }
    atomic_init(&bctx->host_calls, 0);
    pthread_mutex_init(&bctx->created_lock, NULL);
    bctx->created = NULL;
    pthread_mutex_init(&bctx->thread_errors_lock, NULL);
    bctx->thread_errors = NULL;
    gm__thread_watch_start(&bctx->exit_watch, thread_exited, bctx);
}

static void stream_unref(gm_backend_stream *stream);

/* After every host call has returned (fini waits for them): the slots left go, with their
 * errors logged (the core reports, and so takes, the errors of the built-in streams it
 * handed out; the legacy stream's, set through a wrapper of its handle, is logged here). */
void gm__cuda_streams_fini(gm_backend_ctx *bctx)
{
    int legacy = atomic_load(&bctx->builtin[GM_BUILTIN_STREAM_LEGACY].deferred_error);

    log_discarded("context teardown", "the legacy stream", legacy);
    gm__thread_watch_stop(&bctx->exit_watch);
    pthread_mutex_lock(&bctx->thread_errors_lock);
    while (bctx->thread_errors != NULL)
        slot_free_locked(bctx, bctx->thread_errors, "context teardown");
    pthread_mutex_unlock(&bctx->thread_errors_lock);
    pthread_mutex_destroy(&bctx->thread_errors_lock);
    /* created streams the driver refused to destroy (a sticky error fails every call):
     * their driver handles go with the context, their records here */
    while (bctx->created != NULL) {
        gm_backend_stream *s = bctx->created;

        bctx->created = s->next_created;
        gm__log(GM_LOG_WARN, "context teardown: a stream the driver did not destroy is left "
                             "to the context's end");
        stream_unref(s);
    }
    pthread_mutex_destroy(&bctx->created_lock);
}

/*
 * The calling thread's per-thread error slot; made when `create`, and then
 * counted as one more call pending (NULL: none, or no memory).
 */
static struct gm_cuda_thread_error *thread_slot(gm_backend_ctx *bctx, bool create)
{
    uint64_t key = gm__thread_key(); /* never reused in the process (pthread_self values are) */
    struct gm_cuda_thread_error *e = NULL;

    pthread_mutex_lock(&bctx->thread_errors_lock);
    for (e = bctx->thread_errors; e != NULL && e->thread != key; e = e->next)
        ;
    if (e == NULL && create) {
        e = gm__calloc(1, sizeof(*e));
        if (e != NULL) {
            e->thread = key;
            atomic_init(&e->error, GM_OK);
            e->next = bctx->thread_errors;
            bctx->thread_errors = e;
        }
    }
    if (e != NULL && create)
        e->pending++;
    pthread_mutex_unlock(&bctx->thread_errors_lock);
    return e;
}

/* One more reference to a created or wrapped stream (built-in ones live with the context). */
static void stream_ref(gm_backend_stream *stream)
{
    if (stream->kind != GM_CUDA_STREAM_BUILTIN)
        atomic_fetch_add(&stream->refs, 1);
}

/*
 * Drop a reference to a created or wrapped stream's wrapper; the last frees
 * it, logging an error of its host work that nobody took.
 */
static void stream_unref(gm_backend_stream *stream)
{
    int error = GM_OK;

    if (stream->kind == GM_CUDA_STREAM_BUILTIN || atomic_fetch_sub(&stream->refs, 1) != 1)
        return;
    error = atomic_load(&stream->deferred_error); /* nobody can take it any more */
    log_discarded(
        "cuda", stream->kind == GM_CUDA_STREAM_WRAPPED ? "a wrapped stream" : "a destroyed stream",
        error);
    if (stream->owner != NULL)
        stream_unref(stream->owner);
    gm__free(stream);
}

bool gm__cuda_wait_host_calls(gm_backend_ctx *bctx, const char *what)
{
    const struct timespec pause = {0, 1000 * 1000};
    long left = 0;

    for (int ms = 0; ms < 60 * 1000; ms++) {
        left = atomic_load(&bctx->host_calls);
        if (left == 0)
            return true;
        nanosleep(&pause, NULL);
    }
    gm__log(GM_LOG_ERROR,
            "cuda %s: %ld stream callbacks have still not run after 60 s; going on without them",
            what, left);
    return false;
}

/* A new wrapper of `handle`; NULL when out of host memory (recorded). */
static gm_backend_stream *new_stream(CUstream handle, gm_cuda_stream_kind kind)
{
    gm_backend_stream *stream = gm__malloc(sizeof(*stream));

    if (stream == NULL) {
        gm__error(GM_ERR_NO_MEMORY, "cuda: out of host memory for a stream");
        return NULL;
    }
    stream->handle = handle;
    stream->kind = kind;
    atomic_init(&stream->deferred_error, GM_OK);
    atomic_init(&stream->refs, 1);
    stream->owner = NULL;
    stream->next_created = NULL;
    return stream;
}

gm_status gm__cuda_stream_create(gm_backend_ctx *bctx, unsigned flags, gm_backend_stream **stream_p)
{
    CUstream handle = NULL;
    gm_backend_stream *stream = NULL;
    gm_status status = GM_OK;

    if ((flags & ~(unsigned)GM_STREAM_NON_BLOCKING) != 0)
        return gm__error(GM_ERR_INVALID_ARG, "cuda stream_create: unknown flags 0x%x", flags);
    status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuStreamCreate, &handle,
                              (flags & GM_STREAM_NON_BLOCKING) != 0 ? CU_STREAM_NON_BLOCKING
                                                                    : CU_STREAM_DEFAULT);
    if (status != GM_OK)
        return status;
    stream = new_stream(handle, GM_CUDA_STREAM_CREATED);
    if (stream == NULL) {
        status = GM_ERR_NO_MEMORY;
        goto destroy_handle;
    }
    pthread_mutex_lock(&bctx->created_lock);
    stream->next_created = bctx->created;
    bctx->created = stream;
    pthread_mutex_unlock(&bctx->created_lock);
    *stream_p = stream;
    return GM_OK;

destroy_handle:
    (void)GM_CUDA_CALL(&bctx->drv, cuStreamDestroy, handle);
    return gm__error(status, "cuda stream_create: out of host memory");
}

/*
 * Wait for the stream, then destroy it. Only a created stream's CUstream
 * is destroyed; built-in streams are left alone and wrapped ones lose only
 * their wrapper. If cuStreamDestroy fails nothing is freed, so the call can
 * be retried; an error of the work waited for is logged, not returned, once
 * the stream is gone.
 */
gm_status gm__cuda_stream_destroy(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    gm_status status = GM_OK;
    uint64_t mark = 0;

    if (stream == NULL || stream->kind == GM_CUDA_STREAM_BUILTIN)
        return GM_OK;
    if (stream->kind == GM_CUDA_STREAM_WRAPPED) {
        stream_unref(stream); /* host work still queued keeps it */
        return GM_OK;
    }
    status = gm__cuda_enter(bctx);
    if (status != GM_OK)
        return status;
    mark = gm__error_mark();
    if (GM_CUDA_CALL(&bctx->drv, cuStreamSynchronize, stream->handle) != GM_OK) {
        gm__log(GM_LOG_WARN, "cuda stream_destroy: pending work failed: %s",
                gm_last_error_message());
        gm__error_back_to(mark); /* logged; the stream goes either way */
    } else {
        gm__cuda_host_calls_seen(bctx);
    }
    status = GM_CUDA_CALL(&bctx->drv, cuStreamDestroy, stream->handle);
    if (status != GM_OK)
        return status;
    pthread_mutex_lock(&bctx->created_lock); /* the driver may reuse the handle from here */
    for (gm_backend_stream **link = &bctx->created; *link != NULL; link = &(*link)->next_created) {
        if (*link == stream) {
            *link = stream->next_created;
            break;
        }
    }
    pthread_mutex_unlock(&bctx->created_lock);
    stream_unref(stream); /* after an error, host work may still be queued */
    return GM_OK;
}

gm_status gm__cuda_stream_builtin(gm_backend_ctx *bctx, gm_builtin_stream which,
                                  gm_backend_stream **stream_p)
{
    if (which != GM_BUILTIN_STREAM_DEFAULT && which != GM_BUILTIN_STREAM_LEGACY &&
        which != GM_BUILTIN_STREAM_PER_THREAD)
        return gm__error(GM_ERR_INVALID_ARG, "cuda stream_builtin: unknown stream %d", (int)which);
    *stream_p = &bctx->builtin[which];
    return GM_OK;
}

gm_status gm__cuda_stream_wrap(gm_backend_ctx *bctx, void *native, gm_backend_stream **stream_p)
{
    gm_backend_stream *stream = new_stream((CUstream)native, GM_CUDA_STREAM_WRAPPED);

    if (stream == NULL)
        return GM_ERR_NO_MEMORY;
    pthread_mutex_lock(&bctx->created_lock);
    for (gm_backend_stream *s = bctx->created; s != NULL && native != NULL; s = s->next_created) {
        if (s->handle == (CUstream)native) {
            stream_ref(s);
            stream->owner = s;
            break;
        }
    }
    pthread_mutex_unlock(&bctx->created_lock);
    *stream_p = stream;
    return GM_OK;
}

/* Free a wrapper made by stream_wrap; the user's CUstream is never touched. */
void gm__cuda_stream_unwrap(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    (void)bctx;
    if (stream != NULL && stream->kind == GM_CUDA_STREAM_WRAPPED)
        stream_unref(stream);
}

void *gm__cuda_stream_native(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    (void)bctx;
    return (void *)gm__cuda_stream_handle(stream);
}

/*
 * Where the status of failed host work on the stream is kept, as the
 * calling thread sees it, decided by the CUstream handle (so a wrapped
 * external handle of a built-in stream, such as CuPy's Stream.ptds, is that
 * stream): the default stream (handle NULL) is the legacy stream, so the
 * two share the legacy stream's slot, as they share one FIFO; the
 * per-thread stream's is the calling thread's (made when `create`; NULL
 * when there is none).
 */
static _Atomic int *deferred_slot(gm_backend_ctx *bctx, gm_backend_stream *stream, bool create,
                                  struct gm_cuda_thread_error **thread_p)
{
    if (stream->handle == CU_STREAM_PER_THREAD) {
        struct gm_cuda_thread_error *e = thread_slot(bctx, create);

        *thread_p = e;
        return e != NULL ? &e->error : NULL;
    }
    *thread_p = NULL;
    if (stream->handle == NULL || stream->handle == CU_STREAM_LEGACY)
        stream = &bctx->builtin[GM_BUILTIN_STREAM_LEGACY];
    else if (stream->owner != NULL)
        stream = stream->owner;
    return &stream->deferred_error;
}

/* Hand out (once) the status of failed host work on the stream. */
static gm_status take_deferred(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    struct gm_cuda_thread_error *thread = NULL; /* the caller's own: alive while it runs */
    _Atomic int *slot = NULL;
    int deferred = GM_OK;

    if (stream == NULL)
        return GM_OK;
    slot = deferred_slot(bctx, stream, false, &thread);
    if (slot == NULL)
        return GM_OK;
    deferred = atomic_exchange(slot, GM_OK);
    if (deferred == GM_OK)
        return GM_OK;
    return gm__error((gm_status)deferred, "cuda: host work enqueued on the stream failed with %s",
                     gm_status_name((gm_status)deferred));
}

gm_status gm__cuda_stream_synchronize(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    gm_status status = gm__cuda_enter(bctx);

    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuStreamSynchronize, gm__cuda_stream_handle(stream));
    if (status == GM_OK) {
        gm__cuda_host_calls_seen(bctx);
        status = take_deferred(bctx, stream);
    }
    return status;
}

gm_status gm__cuda_stream_query(gm_backend_ctx *bctx, gm_backend_stream *stream)
{
    gm_status status = gm__cuda_enter(bctx);

    if (status == GM_OK)
        status = GM_CUDA_CALL_QUIET(&bctx->drv, CUDA_ERROR_NOT_READY, cuStreamQuery,
                                    gm__cuda_stream_handle(stream));
    if (status == GM_OK)
        gm__cuda_host_calls_seen(bctx);
    return status; /* a failed host work's error stays for stream_synchronize, as elsewhere */
}

/*
 * The cuStreamAddCallback function: run the callback with the stream's
 * status (the driver's error, else that of failed host work before it, which
 * stays for stream_synchronize), or the work when the stream is fine (its
 * cleanup either way), then free the call. No CUDA call here
 * (gm__cuda_translate only maps).
 */
static _Thread_local int in_host_call; /* run_host_call's nesting on this thread */

bool gm__cuda_in_host_call(void)
{
    return in_host_call > 0;
}

static void CUDA_CB run_host_call(CUstream handle, CUresult result, void *data)
{
    host_call *call = data;
    gm_backend_ctx *bctx = call->bctx;
    gm_status status = result == CUDA_SUCCESS ? GM_OK : gm__cuda_translate((int)result);
    int expected = GM_OK;

    (void)handle;
    in_host_call++;
    if (call->callback != NULL) {
        if (status == GM_OK)
            status = (gm_status)atomic_load(call->slot);
        call->callback(status, call->user);
    } else {
        if (status == GM_OK)
            status = call->work(call->user);
        if (call->cleanup != NULL)
            call->cleanup(call->user);
        if (status != GM_OK)
            atomic_compare_exchange_strong(call->slot, &expected, (int)status);
    }
    in_host_call--;
    if (call->thread_slot != NULL)
        slot_call_done(bctx, call->thread_slot);
    stream_unref(call->stream);
    gm__free(call);
    /* The last touch of bctx; releases the call's writes to gm__cuda_host_calls_seen. */
    atomic_fetch_sub_explicit(&bctx->host_calls, 1, memory_order_acq_rel);
}

/*
 * Whether the stream is capturing into a graph: cuStreamAddCallback is not
 * allowed then (and would invalidate the capture), and a captured host step
 * would run at every replay while its bookkeeping is freed after the first.
 * The legacy stream counts as capturing while a blocking stream is (the
 * query's CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: it is unusable then). Unknown
 * (no cuStreamIsCapturing, or another failing query) counts as no.
 */
static bool capturing(gm_backend_ctx *bctx, const gm_backend_stream *stream)
{
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult result = CUDA_SUCCESS;

    if (bctx->drv.cuStreamIsCapturing == NULL)
        return false;
    result = bctx->drv.cuStreamIsCapturing(stream->handle, &capture);
    return result == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT ||
           (result == CUDA_SUCCESS && capture != CU_STREAM_CAPTURE_STATUS_NONE);
}

/* Queue a host_call on the stream; on failure it is freed and nothing will run. */
static gm_status launch_host_call(gm_backend_ctx *bctx, gm_backend_stream *stream,
                                  const host_call *proto)
{
    host_call *call = NULL;
    gm_status status = GM_OK;

    if (stream == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "cuda: host work needs a stream");
    call = gm__malloc(sizeof(*call));
    if (call == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "cuda: out of host memory for a stream callback");
    *call = *proto;
    call->bctx = bctx;
    /* the enqueuing thread's, per-thread (counted: it stays until this call ran) */
    call->slot = deferred_slot(bctx, stream, true, &call->thread_slot);
    if (call->slot == NULL) {
        gm__free(call);
        return gm__error(GM_ERR_NO_MEMORY, "cuda: out of host memory for a stream's error slot");
    }
    status = gm__cuda_enter(bctx);
    if (status == GM_OK && capturing(bctx, stream))
        status = gm__error(GM_ERR_UNSUPPORTED,
                           "cuda: the stream is being captured into a CUDA graph (the legacy "
                           "stream: a blocking stream is); stream callbacks and gpumem's host "
                           "steps cannot be captured (they run once)");
    if (status != GM_OK)
        goto free_call;
    /* Counted before it can run (the double runs it inside cuStreamAddCallback). */
    stream_ref(stream);
    atomic_fetch_add(&bctx->host_calls, 1);
    status = GM_CUDA_CALL(&bctx->drv, cuStreamAddCallback, stream->handle, run_host_call, call, 0);
    if (status != GM_OK) {
        atomic_fetch_sub(&bctx->host_calls, 1);
        stream_unref(stream); /* the owner's reference is still held */
        goto free_call;
    }
    return GM_OK;

free_call:
    if (call->thread_slot != NULL)
        slot_call_done(bctx, call->thread_slot);
    gm__free(call);
    return status;
}

gm_status gm__cuda_stream_add_callback(gm_backend_ctx *bctx, gm_backend_stream *stream,
                                       gm_backend_callback_fn fn, void *user)
{
    const host_call proto = {NULL, stream, NULL, NULL, fn, NULL, NULL, user};

    if (fn == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "cuda stream_add_callback: fn is NULL");
    return launch_host_call(bctx, stream, &proto);
}

/* If queuing fails, neither fn nor cleanup runs: the caller still owns `user`. */
gm_status gm__cuda_stream_enqueue_host(gm_backend_ctx *bctx, gm_backend_stream *stream,
                                       gm_backend_host_work_fn fn, void *user,
                                       void (*cleanup)(void *user))
{
    const host_call proto = {NULL, stream, NULL, NULL, NULL, fn, cleanup, user};

    if (fn == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "cuda stream_enqueue_host: fn is NULL");
    return launch_host_call(bctx, stream, &proto);
}

gm_status gm__cuda_event_create(gm_backend_ctx *bctx, unsigned timing, gm_backend_event **event_p)
{
    CUevent event = NULL;
    gm_status status = gm__cuda_enter(bctx);

    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuEventCreate, &event,
                              timing != 0 ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
    if (status != GM_OK)
        return status;
    *event_p = (gm_backend_event *)event;
    return GM_OK;
}

gm_status gm__cuda_event_destroy(gm_backend_ctx *bctx, gm_backend_event *event)
{
    gm_status status = GM_OK;

    if (event == NULL)
        return GM_OK;
    status = gm__cuda_enter(bctx);
    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuEventDestroy, (CUevent)event);
    return status;
}

/* stream NULL records on the default stream. */
gm_status gm__cuda_event_record(gm_backend_ctx *bctx, gm_backend_event *event,
                                gm_backend_stream *stream)
{
    gm_status status = gm__cuda_enter(bctx);

    if (status == GM_OK)
        status =
            GM_CUDA_CALL(&bctx->drv, cuEventRecord, (CUevent)event, gm__cuda_stream_handle(stream));
    return status;
}

gm_status gm__cuda_stream_wait_event(gm_backend_ctx *bctx, gm_backend_stream *stream,
                                     gm_backend_event *event)
{
    gm_status status = gm__cuda_enter(bctx);

    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuStreamWaitEvent, gm__cuda_stream_handle(stream),
                              (CUevent)event, 0);
    return status;
}

gm_status gm__cuda_event_query(gm_backend_ctx *bctx, gm_backend_event *event)
{
    gm_status status = gm__cuda_enter(bctx);

    if (status == GM_OK)
        status = GM_CUDA_CALL_QUIET(&bctx->drv, CUDA_ERROR_NOT_READY, cuEventQuery, (CUevent)event);
    if (status == GM_OK)
        gm__cuda_host_calls_seen(bctx);
    return status;
}

gm_status gm__cuda_event_synchronize(gm_backend_ctx *bctx, gm_backend_event *event)
{
    gm_status status = gm__cuda_enter(bctx);

    if (status == GM_OK)
        status = GM_CUDA_CALL(&bctx->drv, cuEventSynchronize, (CUevent)event);
    if (status == GM_OK)
        gm__cuda_host_calls_seen(bctx);
    return status;
}

gm_status gm__cuda_event_elapsed(gm_backend_ctx *bctx, gm_backend_event *start,
                                 gm_backend_event *end, float *ms_p)
{
    float ms = 0.0f;
    gm_status status = gm__cuda_enter(bctx);

    if (status == GM_OK)
        status = GM_CUDA_CALL_QUIET(&bctx->drv, CUDA_ERROR_NOT_READY, cuEventElapsedTime, &ms,
                                    (CUevent)start, (CUevent)end);
    if (status == GM_ERR_NOT_READY) /* not recorded as an error (GM_CUDA_CALL_QUIET) */
        return gm__error(status, "cuda event_elapsed: an event has not completed yet");
    if (status != GM_OK)
        return status;
    *ms_p = ms;
    return GM_OK;
}

/*
 * cuCtxSynchronize. When it fails (an error of the context's work), stream
 * callbacks queued before may not have run yet (the driver runs each once,
 * with the error): wait for them, since the caller is about to free what
 * they use.
 */
gm_status gm__cuda_device_synchronize(gm_backend_ctx *bctx)
{
    gm_status status = gm__cuda_enter(bctx);

    if (status == GM_OK)
        status = gm__cuda_check(&bctx->drv, bctx->drv.cuCtxSynchronize(), CUDA_SUCCESS,
                                "cuCtxSynchronize", __FILE__, __LINE__);
    if (status == GM_OK)
        gm__cuda_host_calls_seen(bctx);
    if (status != GM_OK) {
        gm__saved_error saved;

        gm__error_save(&saved);
        (void)gm__cuda_wait_host_calls(bctx, "device_synchronize");
        gm__error_restore(&saved);
    }
    return status;
}
