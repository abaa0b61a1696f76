/*
 * SmartArray (gpumem/smartarray.h): two sides, host and device, each
 * allocated on first use and marked current or stale. get(side) copies the
 * other side in only when the side asked for is stale; mark_changed(side)
 * makes the other side stale. Invariant: at least one side is current.
 *
 * The sides gpumem allocates are arrays of the context (host: gpumem-owned
 * host memory; device: device memory), both with one layout, `layout`: the
 * C/F layout asked for, or gm_ndview_like() of the caller's host array. A
 * copy=false host side is the caller's descriptor, owned by the caller.
 *
 * Passed to a kernel (gm_arg_smart), the device side is made current before
 * the launch and is the only current side after it. A launch on a stream is
 * recorded on the smart array's event, after making that stream wait for the
 * event's previous record, so the event completes only when every launch
 * that used the array has; the next transfer between the sides waits for
 * it, so it neither reads the device side before a kernel wrote it nor
 * overwrites it while a kernel may still read it.
 */
#include <inttypes.h>
#include <string.h>

#include "gpumem/launch.h"
#include "gpumem/smartarray.h"
#include "ndview_internal.h"
#include "runtime_internal.h"
#include "smartarray_internal.h"

enum { SIDE_HOST = 0, SIDE_DEVICE = 1 };

/* One side of a smart array. */
typedef struct sa_side {
    gm_array *array;   /* memory gpumem allocated for this side, or NULL */
    gm_ndview view;    /* the side's descriptor, once allocated */
    bool allocated;    /* view describes memory */
    bool valid;        /* holds current data */
    int64_t transfers; /* copies into this side */
} sa_side;

struct gm_smart_array {
    gm_context *ctx;
    pthread_mutex_t lock; /* everything below */
    gm_ndview layout;     /* layout of the sides gpumem allocates */
    sa_side side[2];      /* SIDE_HOST, SIDE_DEVICE */
    gm_event *launched;   /* recorded after each launch on a stream (made at the first) */
    bool launch_pending;  /* `launched` was recorded since the last wait for it */
};

/* The side index of a gm_where; -1 for other values. */
static int side_index(gm_where where)
{
    return where == GM_WHERE_HOST ? SIDE_HOST : where == GM_WHERE_DEVICE ? SIDE_DEVICE : -1;
}

/* The error of a bad gm_where. */
static gm_status bad_where(const char *fn, gm_where where)
{
    return gm__error(GM_ERR_INVALID_ARG,
                     "%s: where must be GM_WHERE_HOST or GM_WHERE_DEVICE, got %d", fn, (int)where);
}

/* An empty smart array on `layout`. */
static gm_status sa_alloc(gm_context *ctx, const char *fn, const gm_ndview *layout,
                          gm_smart_array **sa_p)
{
    gm_smart_array *sa = gm__calloc(1, sizeof(*sa));

    if (sa == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of host memory", fn);
    if (pthread_mutex_init(&sa->lock, NULL) != 0) {
        gm__free(sa);
        return gm__error(GM_ERR_NO_MEMORY, "%s: cannot create the smart array's lock", fn);
    }
    sa->ctx = ctx;
    sa->layout = *layout;
    *sa_p = sa;
    return GM_OK;
}

/* Allocate side i with the smart array's layout (no data moves). */
static gm_status side_allocate(gm_smart_array *sa, const char *fn, int i)
{
    sa_side *s = &sa->side[i];
    gm_memory_kind memory = i == SIDE_HOST ? GM_MEMORY_HOST : GM_MEMORY_DEVICE;
    gm_status status = gm__array_create(sa->ctx, fn, &sa->layout, memory, 0, &s->array);

    if (status != GM_OK)
        return status;
    s->view = s->array->view;
    s->allocated = true;
    return GM_OK;
}

/* Make side i allocated and current, copying from the other side if it is stale. */
static gm_status side_ensure(gm_smart_array *sa, const char *fn, int i)
{
    sa_side *s = &sa->side[i];
    const sa_side *other = &sa->side[1 - i];
    gm_status status = GM_OK;

    if (!s->allocated)
        status = side_allocate(sa, fn, i);
    if (status != GM_OK || s->valid)
        return status;
    if (sa->launch_pending) { /* a kernel may still use the device side */
        status = gm_event_synchronize(sa->launched);
        if (status != GM_OK)
            return gm__error(status, "%s: waiting for the last launch that used the array: %s", fn,
                             gm_last_error_message());
        sa->launch_pending = false;
    }
    status = gm__copy(fn, sa->ctx, &s->view, &other->view, NULL);
    if (status != GM_OK)
        return status;
    s->transfers++;
    s->valid = true;
    return GM_OK;
}

/* Free a smart array whose sides are released. */
static void sa_free(gm_smart_array *sa)
{
    gm_array_release(&sa->side[SIDE_HOST].array);
    gm_array_release(&sa->side[SIDE_DEVICE].array);
    gm_event_destroy(&sa->launched);
    pthread_mutex_destroy(&sa->lock);
    gm__free(sa);
}

/* A new shape: side `where` allocated and current. */
gm_status gm_smart_array_create(gm_context *ctx, int ndim, const int64_t *shape, gm_dtype dtype,
                                gm_order order, gm_where where, gm_smart_array **sa_p)
{
    static const char fn[] = "gm_smart_array_create";
    gm_smart_array *sa = NULL;
    gm_ndview layout;
    int i = side_index(where);
    gm_status status = gm__check_context(fn, ctx);

    if (status == GM_OK && sa_p == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: sa_p is NULL", fn);
    if (status == GM_OK && order != GM_ORDER_C && order != GM_ORDER_F)
        status =
            gm__error(GM_ERR_INVALID_ARG, "%s: order must be 'C' or 'F', got %d", fn, (int)order);
    if (status == GM_OK && i < 0)
        status = bad_where(fn, where);
    if (status == GM_OK)
        status = gm__ndview_init(fn, NULL, dtype, ndim, shape, NULL, order, &layout);
    if (status == GM_OK)
        status = sa_alloc(ctx, fn, &layout, &sa);
    if (status != GM_OK)
        return status;
    status = side_allocate(sa, fn, i);
    if (status != GM_OK) {
        sa_free(sa);
        return status;
    }
    sa->side[i].valid = true;
    *sa_p = sa;
    return GM_OK;
}

/*
 * `host` is host memory described as gpumem describes its own arrays:
 * device_id -1 for pageable and pinned memory; for mapped memory the
 * context's device (or -1, meaning it).
 */
static gm_status check_host_memory(const char *fn, const gm_context *ctx, const gm_ndview *host)
{
    switch (host->memory) {
    case GM_MEMORY_HOST:
    case GM_MEMORY_PINNED:
        if (host->device_id == -1)
            return GM_OK;
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: host %s memory must have device_id -1, got %" PRId32, fn,
                         host->memory == GM_MEMORY_HOST ? "pageable" : "pinned", host->device_id);
    case GM_MEMORY_MAPPED:
        if (host->device_id == -1 || host->device_id == ctx->device_id)
            return GM_OK;
        return gm__error(GM_ERR_WRONG_CONTEXT,
                         "%s: host is mapped memory of device %" PRId32
                         ", the context's device is %" PRId32,
                         fn, host->device_id, ctx->device_id);
    case GM_MEMORY_DEVICE:
    case GM_MEMORY_MANAGED:
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: host must be host memory (memory kind %" PRId32 ")", fn,
                         host->memory);
    default:
        break;
    }
    return gm__error(GM_ERR_INVALID_ARG, "%s: host has an unknown memory kind %" PRId32, fn,
                     host->memory);
}

/* Checks of gm_smart_array_from_host; `layout` receives the like-layout. */
static gm_status check_from_host(const char *fn, const gm_context *ctx, const gm_ndview *host,
                                 gm_smart_array **sa_p, gm_ndview *layout)
{
    gm_status status = gm__check_context(fn, ctx);

    if (status == GM_OK && (host == NULL || sa_p == NULL))
        status =
            gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn, host == NULL ? "host" : "sa_p");
    if (status == GM_OK)
        status = gm__validate(fn, host);
    if (status == GM_OK && host->data == NULL && gm_ndview_size(host) > 0)
        status =
            gm__error(GM_ERR_NULL_POINTER, "%s: the host view has %" PRId64 " elements and no data",
                      fn, gm_ndview_size(host));
    if (status == GM_OK)
        status = check_host_memory(fn, ctx, host);
    if (status != GM_OK)
        return status;
    return gm_ndview_like(host, layout);
}

/* The host side starts from `host`: a copy, or the caller's memory itself. */
gm_status gm_smart_array_from_host(gm_context *ctx, const gm_ndview *host, bool copy,
                                   gm_smart_array **sa_p)
{
    static const char fn[] = "gm_smart_array_from_host";
    gm_smart_array *sa = NULL;
    sa_side *s = NULL;
    gm_ndview layout;
    gm_status status = check_from_host(fn, ctx, host, sa_p, &layout);

    if (status == GM_OK)
        status = sa_alloc(ctx, fn, &layout, &sa);
    if (status != GM_OK)
        return status;
    s = &sa->side[SIDE_HOST];
    if (copy)
        status = side_allocate(sa, fn, SIDE_HOST);
    else
        *s = (sa_side){NULL, *host, true, false, 0};
    s->view.reserved = 0; /* ndview.h: gpumem writes zero there */
    if (status == GM_OK && copy)
        status = gm__copy(fn, ctx, &s->view, host, NULL);
    if (status != GM_OK) {
        sa_free(sa);
        return status;
    }
    s->valid = true;
    *sa_p = sa;
    return GM_OK;
}

/* Make a side current (transferring only if it is stale) and describe it. */
gm_status gm_smart_array_get(gm_smart_array *sa, gm_where where, gm_ndview *view_p)
{
    static const char fn[] = "gm_smart_array_get";
    int i = 0;
    gm_status status = GM_OK;

    if (sa == NULL || view_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn, sa == NULL ? "sa" : "view_p");
    i = side_index(where);
    if (i < 0)
        return bad_where(fn, where);
    pthread_mutex_lock(&sa->lock);
    status = side_ensure(sa, fn, i);
    if (status == GM_OK)
        *view_p = sa->side[i].view;
    pthread_mutex_unlock(&sa->lock);
    return status;
}

/* Side `where` was written: it alone is current now. */
gm_status gm_smart_array_mark_changed(gm_smart_array *sa, gm_where where)
{
    static const char fn[] = "gm_smart_array_mark_changed";
    int i = 0;
    gm_status status = GM_OK;

    if (sa == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: sa is NULL", fn);
    i = side_index(where);
    if (i < 0)
        return bad_where(fn, where);
    pthread_mutex_lock(&sa->lock);
    if (!sa->side[i].allocated) {
        status = gm__error(GM_ERR_STATE, "%s: the %s side was never allocated; get it first", fn,
                           i == SIDE_HOST ? "host" : "device");
    } else {
        sa->side[i].valid = true;
        sa->side[1 - i].valid = false;
    }
    pthread_mutex_unlock(&sa->lock);
    return status;
}

/* Transfer counts and side states. */
gm_status gm_smart_array_stats(gm_smart_array *sa, gm_smart_stats *stats_p)
{
    static const char fn[] = "gm_smart_array_stats";

    if (sa == NULL || stats_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn, sa == NULL ? "sa" : "stats_p");
    pthread_mutex_lock(&sa->lock);
    stats_p->to_device = sa->side[SIDE_DEVICE].transfers;
    stats_p->to_host = sa->side[SIDE_HOST].transfers;
    stats_p->host_valid = sa->side[SIDE_HOST].valid;
    stats_p->device_valid = sa->side[SIDE_DEVICE].valid;
    stats_p->host_allocated = sa->side[SIDE_HOST].allocated;
    stats_p->device_allocated = sa->side[SIDE_DEVICE].allocated;
    pthread_mutex_unlock(&sa->lock);
    return GM_OK;
}

/* A kernel argument: the device side made current; its element (0, ..., 0). */
gm_status gm__smart_launch_begin(gm_smart_array *sa, gm_context *ctx, const char *fn, int arg,
                                 void **devptr_p)
{
    gm_status status = GM_OK;

    if (sa->ctx != ctx)
        return gm__error(GM_ERR_WRONG_CONTEXT,
                         "%s: argument %d: the smart array belongs to another context", fn, arg);
    pthread_mutex_lock(&sa->lock);
    if (sa->launched == NULL) /* made now, so that recording after the launch cannot fail for it */
        status = gm_event_create(ctx, false, &sa->launched);
    if (status == GM_OK)
        status = side_ensure(sa, fn, SIDE_DEVICE);
    if (status == GM_OK)
        *devptr_p = gm_arg_view(&sa->side[SIDE_DEVICE].view).value.ptr;
    pthread_mutex_unlock(&sa->lock);
    if (status != GM_OK)
        return gm__error(status, "%s: argument %d (smart array): %s", fn, arg,
                         gm_last_error_message());
    return GM_OK;
}

/* After a launch: the kernel may have written the device side. */
void gm__smart_launch_end(gm_smart_array *sa, gm_stream *stream)
{
    pthread_mutex_lock(&sa->lock);
    sa->side[SIDE_DEVICE].valid = true;
    sa->side[SIDE_HOST].valid = false;
    if (stream != NULL) { /* a NULL-stream launch has finished already */
        /* the new record must also cover an earlier launch still pending on another stream:
         * this stream's later work waits for it (after the kernel, which it does not hold) */
        uint64_t mark = gm__error_mark();
        gm_status status = sa->launch_pending ? gm_stream_wait_event(stream, sa->launched) : GM_OK;

        if (status == GM_OK)
            status = gm_event_record(sa->launched, stream);
        if (status == GM_OK) {
            sa->launch_pending = true;
        } else {
            gm__log(GM_LOG_WARN,
                    "gm_launch: recording the launch on a smart array's event failed (%s); "
                    "synchronizing the stream instead",
                    gm_last_error_message());
            status = gm_stream_synchronize(stream); /* the older record, if any, still stands */
            if (status != GM_OK)
                gm__log(GM_LOG_WARN, "gm_launch: synchronizing the stream failed too: %s",
                        gm_last_error_message());
            gm__error_back_to(mark); /* logged; the launch itself succeeded */
        }
    }
    pthread_mutex_unlock(&sa->lock);
}

/* Release gpumem's sides and free the smart array. */
void gm_smart_array_destroy(gm_smart_array **sa_p)
{
    if (sa_p == NULL || *sa_p == NULL)
        return;
    sa_free(*sa_p);
    *sa_p = NULL;
}
