/*
 * Events on HSA are signals: each record makes a fresh signal that completes
 * when the stream reaches it (a barrier-AND packet, or host work stamping the
 * time for timing events); waits add that signal to a stream's frontier.
 * Elapsed time is host CLOCK_MONOTONIC time between the completions, taken
 * by the async handler that completes a timing record (documented choice:
 * barrier packets carry no profiling timestamps on every runtime).
 */
#include "hsa_internal.h"

gm_status gm__hsa_event_create(gm_backend_ctx *bctx, unsigned timing, gm_backend_event **event_p)
{
    gm_backend_event *event = gm__calloc(1, sizeof(*event));

    (void)bctx;
    if (event == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "event_create: no memory for an HSA event");
    event->magic = GM_HSA_EVENT_MAGIC;
    event->timing = timing;
    *event_p = event;
    return GM_OK;
}

gm_status gm__hsa_event_destroy(gm_backend_ctx *bctx, gm_backend_event *event)
{
    if (event == NULL)
        return GM_OK;
    pthread_mutex_lock(&bctx->lock);
    gm__hsa_sig_unref(bctx, event->record); /* a pending record keeps its own reference */
    pthread_mutex_unlock(&bctx->lock);
    event->magic = 0;
    gm__free(event);
    return GM_OK;
}

/*
 * Submit a record: timing events stamp the host clock from an async handler
 * when the stream reaches them (so elapsed time is host time between
 * completions, microsecond-grade); others are a barrier-AND packet. Lock held.
 */
static gm_status submit_record(gm_backend_ctx *bctx, gm_backend_stream *stream, gm__hsa_op *op,
                               unsigned timing)
{
    hsa_queue_t *queue = NULL;
    gm__hsa_work *work = NULL;
    gm__hsa_sig **deps = NULL;
    size_t ndeps = 0;
    gm_status status = GM_OK;

    if (timing != 0) {
        work = gm__calloc(1, sizeof(*work));
        if (work == NULL)
            return gm__error(GM_ERR_NO_MEMORY, "event_record: no memory");
        work->kind = GM_HSA_WORK_STAMP;
        work->stamp_sig = op->done;
        return gm__hsa_host_work(bctx, stream, work, op);
    }
    status = gm__hsa_stream_queue(bctx, stream, &queue);
    if (status == GM_OK)
        status = gm__hsa_queue_deps(stream, op, &deps, &ndeps);
    if (status == GM_OK)
        status = gm__hsa_submit_barrier(bctx, queue, deps, ndeps, op->done->handle);
    gm__free(deps);
    if (status == GM_OK)
        gm__hsa_queue_submitted(bctx, stream, op->done);
    return status;
}

/* Record with nothing pending: complete at once. Lock held. */
static gm_status record_now(gm_backend_ctx *bctx, gm_backend_event *event)
{
    gm__hsa_sig *sig = NULL;
    gm_status status = gm__hsa_sig_new(bctx, 0, &sig);

    if (status != GM_OK)
        return status;
    atomic_store(&sig->stamp_ns, gm__hsa_now_ns());
    gm__hsa_sig_unref(bctx, event->record);
    event->record = sig;
    return GM_OK;
}

gm_status gm__hsa_event_record(gm_backend_ctx *bctx, gm_backend_event *event,
                               gm_backend_stream *stream)
{
    gm__hsa_op *op = NULL;
    gm_status status = GM_OK;

    if (event == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "event_record: event is NULL");
    pthread_mutex_lock(&bctx->lock);
    stream = gm__hsa_stream_resolve(bctx, stream);
    status = gm__hsa_op_begin(bctx, stream, 1, true, "event record", &op);
    if (status != GM_OK)
        goto done;
    if (op->ndeps == 0) {
        gm__hsa_op_abort(bctx, op);
        status = record_now(bctx, event);
        goto done;
    }
    status = submit_record(bctx, stream, op, event->timing);
    if (status != GM_OK) {
        gm__hsa_op_abort(bctx, op);
        goto done;
    }
    gm__hsa_sig_unref(bctx, event->record);
    event->record = gm__hsa_sig_ref(op->done);
    gm__hsa_op_commit(bctx, stream, op);
done:
    pthread_mutex_unlock(&bctx->lock);
    return status;
}

gm_status gm__hsa_stream_wait_event(gm_backend_ctx *bctx, gm_backend_stream *stream,
                                    gm_backend_event *event)
{
    gm_status status = GM_OK;

    if (event == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "stream_wait_event: event is NULL");
    pthread_mutex_lock(&bctx->lock);
    stream = gm__hsa_stream_resolve(bctx, stream);
    if (event->record != NULL && !gm__hsa_sig_done(bctx, event->record))
        status = gm__hsa_frontier_add(bctx, stream, event->record);
    pthread_mutex_unlock(&bctx->lock);
    return status;
}

/* event_elapsed with an event not completed: its context's failure, or GM_ERR_NOT_READY. */
static gm_status not_completed(gm_backend_ctx *bctx)
{
    gm_status status = gm__hsa_poll_failed(bctx, "event_elapsed");

    if (status != GM_OK)
        return status;
    return gm__error(GM_ERR_NOT_READY, "event_elapsed: an event has not completed yet");
}

gm_status gm__hsa_event_query(gm_backend_ctx *bctx, gm_backend_event *event)
{
    gm_status status = GM_OK;

    if (event == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "event_query: event is NULL");
    pthread_mutex_lock(&bctx->lock);
    if (event->record != NULL && !gm__hsa_sig_done(bctx, event->record)) {
        /* a lost context's work never completes: say so, as the waits do */
        status = gm__hsa_poll_failed(bctx, "event_query");
        if (status == GM_OK)
            status = GM_ERR_NOT_READY;
    }
    pthread_mutex_unlock(&bctx->lock);
    return status;
}

/*
 * Wait for the latest record, then reap: the record's stream, and whatever it
 * waited for on other streams, is done up to the record, and what that work
 * held (locked pageable memory above all) is released before returning, as
 * the caller may free the memory now. Reaping frees completed operations
 * only, so every stream is tried. A failed operation reaped here becomes its
 * stream's error (recording a message), so the caller's last error is kept
 * on GM_OK.
 */
gm_status gm__hsa_event_synchronize(gm_backend_ctx *bctx, gm_backend_event *event)
{
    gm__hsa_sig *sig = NULL;
    gm_status status = GM_OK;
    gm__saved_error saved;

    if (event == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "event_synchronize: event is NULL");
    gm__error_save(&saved);
    pthread_mutex_lock(&bctx->lock);
    if (event->record != NULL)
        sig = gm__hsa_sig_ref(event->record);
    pthread_mutex_unlock(&bctx->lock);
    if (sig == NULL)
        return GM_OK;
    status = gm__hsa_sig_wait(bctx, sig, "event_synchronize");
    pthread_mutex_lock(&bctx->lock);
    gm__hsa_sig_unref(bctx, sig);
    gm__hsa_reap_all(bctx);
    pthread_mutex_unlock(&bctx->lock);
    if (status == GM_OK)
        gm__error_restore(&saved);
    return status;
}

/* Elapsed host time between two completed timing records, in milliseconds. */
gm_status gm__hsa_event_elapsed(gm_backend_ctx *bctx, gm_backend_event *start,
                                gm_backend_event *end, float *ms_p)
{
    gm_status status = GM_OK;

    if (start == NULL || end == NULL || ms_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "event_elapsed: %s is NULL",
                         start == NULL ? "start"
                         : end == NULL ? "end"
                                       : "ms_p");
    pthread_mutex_lock(&bctx->lock);
    if (start->timing == 0 || end->timing == 0)
        status = gm__error(GM_ERR_INVALID_ARG, "event_elapsed: both events must be created "
                                               "with timing enabled");
    else if (start->record == NULL || end->record == NULL)
        status = gm__error(GM_ERR_INVALID_ARG, "event_elapsed: both events must have been "
                                               "recorded");
    else if (!gm__hsa_sig_done(bctx, start->record) || !gm__hsa_sig_done(bctx, end->record))
        status = not_completed(bctx);
    else
        *ms_p = (float)((double)(atomic_load(&end->record->stamp_ns) -
                                 atomic_load(&start->record->stamp_ns)) /
                        1.0e6);
    pthread_mutex_unlock(&bctx->lock);
    return status;
}
