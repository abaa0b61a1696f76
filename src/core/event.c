/*
 * Events: creation, destruction through the deallocation queue, record,
 * wait, query, synchronize and elapsed time.
 */
#include <inttypes.h>

#include "runtime_internal.h"

/* An event argument that must not be NULL. */
static gm_status check_event(const char *fn, const gm_event *event)
{
    if (event == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: event is NULL", fn);
    return GM_OK;
}

/* A new event with a preallocated queue entry for its destruction. */
gm_status gm_event_create(gm_context *ctx, bool timing, gm_event **event_p)
{
    static const char fn[] = "gm_event_create";
    gm_event *event = NULL;
    gm_status status = gm__check_context(fn, ctx);

    if (status == GM_OK && event_p == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: event_p is NULL", fn);
    if (status != GM_OK)
        return status;
    event = gm__calloc(1, sizeof(*event));
    if (event == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory", fn);
    atomic_init(&event->recorded, false);
    status = gm__dealloc_entry_create(fn, GM__DEALLOC_EVENT, &event->entry);
    if (status != GM_OK)
        goto fail_event;
    status =
        gm__error_within(fn, ctx->ops->event_create(ctx->bctx, timing ? 1u : 0u, &event->bevent));
    if (status != GM_OK)
        goto fail_entry;
    event->ctx = ctx;
    event->timing = timing;
    pthread_mutex_lock(&ctx->lock);
    gm__list_push(&ctx->events, &event->link);
    pthread_mutex_unlock(&ctx->lock);
    *event_p = event;
    return GM_OK;
fail_entry:
    gm__dealloc_entry_discard(event->entry);
fail_event:
    gm__free(event);
    return status;
}

/* Queue an event's destruction; the wrapper is freed with it. */
static void queue_destroy(gm_event *event)
{
    gm__dealloc_entry *entry = event->entry;

    entry->handle = event->bevent;
    entry->bookkeeping = event;
    event->entry = NULL;
    gm__dealloc_enqueue(event->ctx, entry);
}

/* Unlist the event and queue its destruction. */
void gm_event_destroy(gm_event **event_p)
{
    gm_event *event = NULL;

    if (event_p == NULL || *event_p == NULL)
        return;
    event = *event_p;
    *event_p = NULL;
    pthread_mutex_lock(&event->ctx->lock);
    gm__list_remove(&event->link);
    pthread_mutex_unlock(&event->ctx->lock);
    queue_destroy(event);
}

/* Record on `stream` (NULL: the default stream). */
gm_status gm_event_record(gm_event *event, gm_stream *stream)
{
    static const char fn[] = "gm_event_record";
    gm_backend_stream *bs = NULL;
    gm_status status = check_event(fn, event);

    if (status == GM_OK && stream == NULL) {
        stream = gm_default_stream(event->ctx);
        if (stream == NULL)
            return gm_last_error();
    }
    if (status == GM_OK)
        status = gm__stream_backend(fn, event->ctx, stream, &bs);
    if (status != GM_OK)
        return status;
    status =
        gm__error_within(fn, event->ctx->ops->event_record(event->ctx->bctx, event->bevent, bs));
    if (status == GM_OK)
        atomic_store(&event->recorded, true);
    return status;
}

/* Make later work on `stream` wait for the event. */
gm_status gm_stream_wait_event(gm_stream *stream, gm_event *event)
{
    static const char fn[] = "gm_stream_wait_event";
    gm_backend_stream *bs = NULL;
    gm_status status = check_event(fn, event);

    if (status == GM_OK && stream == NULL) { /* Numba's Event.wait(stream=0), as gm_event_record */
        stream = gm_default_stream(event->ctx);
        if (stream == NULL)
            return gm_last_error();
    }
    if (status == GM_OK && stream->ctx != event->ctx)
        status = gm__error(GM_ERR_WRONG_CONTEXT,
                           "%s: the event belongs to another context than the stream", fn);
    if (status == GM_OK)
        status = gm__stream_backend(fn, event->ctx, stream, &bs);
    if (status != GM_OK)
        return status;
    return gm__error_within(
        fn, event->ctx->ops->stream_wait_event(event->ctx->bctx, bs, event->bevent));
}

/* GM_OK when the event has completed, GM_ERR_NOT_READY otherwise. */
gm_status gm_event_query(gm_event *event)
{
    static const char fn[] = "gm_event_query";
    gm_status status = check_event(fn, event);

    if (status != GM_OK)
        return status;
    return gm__query_result(fn, event->ctx->ops->event_query(event->ctx->bctx, event->bevent),
                            "the event has not completed yet");
}

/* Wait for the event. */
gm_status gm_event_synchronize(gm_event *event)
{
    gm_status status = check_event("gm_event_synchronize", event);

    if (status == GM_OK && gm__in_stream_callback())
        status =
            gm__error(GM_ERR_STATE, "gm_event_synchronize: not allowed inside a stream callback");
    if (status != GM_OK)
        return status;
    return gm__error_within("gm_event_synchronize",
                            event->ctx->ops->event_synchronize(event->ctx->bctx, event->bevent));
}

/* Milliseconds between two timing events of one context. */
gm_status gm_event_elapsed_ms(gm_event *start, gm_event *end, float *ms_p)
{
    static const char fn[] = "gm_event_elapsed_ms";
    float ms = 0.0f;
    gm_status status = check_event(fn, start);

    if (status == GM_OK)
        status = check_event(fn, end);
    if (status == GM_OK && ms_p == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: ms_p is NULL", fn);
    if (status == GM_OK && start->ctx != end->ctx)
        status = gm__error(GM_ERR_WRONG_CONTEXT, "%s: the events belong to different contexts", fn);
    if (status == GM_OK && (!start->timing || !end->timing))
        status = gm__error(GM_ERR_INVALID_ARG, "%s: the %s event was created without timing", fn,
                           !start->timing ? "start" : "end");
    if (status == GM_OK && (!atomic_load(&start->recorded) || !atomic_load(&end->recorded)))
        status = gm__error(GM_ERR_INVALID_ARG, "%s: the %s event was never recorded", fn,
                           !atomic_load(&start->recorded) ? "start" : "end");
    if (status != GM_OK)
        return status;
    status = gm__error_within(
        fn, start->ctx->ops->event_elapsed(start->ctx->bctx, start->bevent, end->bevent, &ms));
    if (status == GM_OK)
        *ms_p = ms;
    return status;
}

/* Queue the destruction of every event still alive, and say how many there were. */
void gm__events_teardown(gm_context *ctx)
{
    int64_t alive = 0;

    while (!gm__list_empty(&ctx->events)) {
        gm_event *event = GM__CONTAINER_OF(ctx->events.next, gm_event, link);

        gm__list_remove(&event->link);
        queue_destroy(event);
        alive++;
    }
    if (alive > 0)
        gm__log(GM_LOG_INFO, "gm_context_destroy: destroying %" PRId64 " events still alive",
                alive);
}
