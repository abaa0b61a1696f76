/*
 * Reference-counted, recycled HSA signals and waiting on them without hanging
 * when a queue dies. See hsa_internal.h for the locking rules.
 */
#include <stdio.h>
#include <time.h>

#include "hsa_internal.h"

int64_t gm__hsa_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A signal with value `initial`: from the cache when possible. Lock held. */
gm_status gm__hsa_sig_new(gm_backend_ctx *bctx, hsa_signal_value_t initial, gm__hsa_sig **sig_p)
{
    gm__hsa_sig *sig = NULL;
    gm_status status = GM_OK;

    if (bctx->ncache > 0) {
        sig = bctx->cache[--bctx->ncache];
        bctx->api.hsa_signal_store_screlease(sig->handle, initial);
        goto done;
    }
    sig = gm__calloc(1, sizeof(*sig));
    if (sig == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "HSA backend: no memory for a signal");
    status = GM_HSA_CALL(&bctx->api, hsa_signal_create, (initial, 0, NULL, &sig->handle));
    if (status != GM_OK)
        goto fail_create;
done:
    sig->refs = 1;
    sig->failed_what = NULL;
    atomic_store(&sig->stamp_ns, 0);
    *sig_p = sig;
    return GM_OK;

fail_create:
    gm__free(sig);
    return status;
}

gm__hsa_sig *gm__hsa_sig_ref(gm__hsa_sig *sig)
{
    sig->refs++;
    return sig;
}

/* Drop a reference; the last one recycles or destroys the signal. Lock held. */
void gm__hsa_sig_unref(gm_backend_ctx *bctx, gm__hsa_sig *sig)
{
    if (sig == NULL || --sig->refs > 0)
        return;
    if (bctx->ncache < GM_HSA_SIGNAL_CACHE) {
        bctx->cache[bctx->ncache++] = sig;
        return;
    }
    (void)GM_HSA_CALL(&bctx->api, hsa_signal_destroy, (sig->handle));
    gm__free(sig);
}

/* Destroy every cached signal (context teardown). Lock held. */
void gm__hsa_sig_cache_drain(gm_backend_ctx *bctx)
{
    while (bctx->ncache > 0) {
        gm__hsa_sig *sig = bctx->cache[--bctx->ncache];

        (void)GM_HSA_CALL(&bctx->api, hsa_signal_destroy, (sig->handle));
        gm__free(sig);
    }
}

_Atomic unsigned long gm__hsa_handlers_ended = 0;

/* Acquire what the async handlers that ended so far wrote (gm__hsa_handlers_ended). */
static void handlers_seen(void)
{
    (void)atomic_load_explicit(&gm__hsa_handlers_ended, memory_order_acquire);
}

bool gm__hsa_sig_done(const gm_backend_ctx *bctx, const gm__hsa_sig *sig)
{
    if (bctx->api.hsa_signal_load_scacquire(sig->handle) >= 1)
        return false;
    handlers_seen();
    return true;
}

/* The status recorded by a queue error callback, as an error with detail. */
static gm_status queue_failure(gm_backend_ctx *bctx, const char *what)
{
    gm_status status = (gm_status)atomic_load(&bctx->queue_error);

    return gm__error(status, "%s: the context failed, its pending work will never complete: %s",
                     what, bctx->queue_error_text);
}

/* The pending operation of these streams whose completion signal is sig, or NULL. */
static const gm__hsa_op *op_of(gm_backend_stream *streams, const gm__hsa_sig *sig)
{
    for (gm_backend_stream *s = streams; s != NULL; s = s->next) {
        for (const gm__hsa_op *op = s->ops_head; op != NULL; op = op->next) {
            if (op->done == sig)
                return op;
        }
    }
    return NULL;
}

/* A pending operation of these streams that waits for a failed (negative) signal. */
static const gm__hsa_op *stuck_op(gm_backend_ctx *bctx, gm_backend_stream *streams,
                                  gm__hsa_sig **dep_p, hsa_signal_value_t *value_p)
{
    for (gm_backend_stream *s = streams; s != NULL; s = s->next) {
        for (const gm__hsa_op *op = s->ops_head; op != NULL; op = op->next) {
            /* Host work on one signal: its async handler runs on a negative value too. */
            if ((op->work != NULL && op->ndeps <= 1) || gm__hsa_sig_done(bctx, op->done))
                continue;
            for (size_t i = 0; i < op->ndeps; i++) {
                hsa_signal_value_t value = bctx->api.hsa_signal_load_scacquire(op->deps[i]->handle);

                if (value < 0) {
                    *dep_p = op->deps[i];
                    *value_p = value;
                    return op;
                }
            }
        }
    }
    return NULL;
}

/*
 * ROCr starts a copy (its SDMA engine polls every dependency for 0) and a
 * barrier-AND packet only once each dependency is exactly 0: work depending
 * on an operation that failed asynchronously (its completion signal went
 * negative: a copy the runtime reports failed) never starts, and neither
 * does anything after it. No callback says so, so a wait that timed out
 * looks for such work among the context's pending operations (their
 * dependencies are referenced until they complete, so values are stable) and
 * fails the context as a queue error does: every wait then ends with
 * GM_ERR_CONTEXT_LOST instead of hanging. Lock held.
 */
void gm__hsa_check_stuck(gm_backend_ctx *bctx)
{
    const gm__hsa_op *stuck = NULL, *failed = NULL;
    const char *failed_what = "an operation";
    gm__hsa_sig *dep = NULL;
    hsa_signal_value_t value = 0;
    char text[GM_HSA_ERROR_TEXT];

    if (atomic_load(&bctx->queue_failed) != 0)
        return;
    stuck = stuck_op(bctx, bctx->streams, &dep, &value);
    if (stuck == NULL)
        stuck = stuck_op(bctx, bctx->zombies, &dep, &value);
    if (stuck == NULL)
        return;
    failed = op_of(bctx->streams, dep);
    if (failed == NULL)
        failed = op_of(bctx->zombies, dep);
    if (failed != NULL)
        failed_what = failed->what;
    else if (dep->failed_what != NULL)
        failed_what = dep->failed_what; /* reaped already */
    snprintf(text, sizeof(text),
             "%s failed on the device (completion signal %lld), and %s, which depends on it, "
             "will never start (the runtime starts copies and barrier packets only once every "
             "dependency is 0)",
             failed_what, (long long)value, stuck->what);
    gm__log(GM_LOG_ERROR, "HSA backend: %s", text);
    gm__hsa_ctx_fail(bctx, GM_ERR_CONTEXT_LOST, text);
}

gm_status gm__hsa_poll_failed(gm_backend_ctx *bctx, const char *what)
{
    int64_t now = gm__hsa_now_ns();

    if (now - bctx->stuck_checked_ns >= 10 * 1000 * 1000) { /* a polling loop stays cheap */
        bctx->stuck_checked_ns = now;
        gm__hsa_check_stuck(bctx);
    }
    if (atomic_load(&bctx->queue_failed) != 0)
        return queue_failure(bctx, what);
    return GM_OK;
}

/*
 * Wait until sig < 1, in slices, so that a queue error (reported by the
 * runtime's callback), a GPU memory fault or work stuck behind a failed
 * operation (gm__hsa_check_stuck) ends the wait instead of hanging. The
 * caller holds a reference to sig; locked: whether it holds bctx->lock. A
 * negative value is the runtime's way of reporting a failed operation:
 * GM_ERR_DRIVER.
 */
static gm_status sig_wait(gm_backend_ctx *bctx, gm__hsa_sig *sig, const char *what, bool locked)
{
    uint64_t slice = bctx->timestamp_hz / (1000000000u / GM_HSA_WAIT_SLICE_NS);
    hsa_signal_value_t value = 1;

    for (;;) {
        value = bctx->api.hsa_signal_wait_scacquire(sig->handle, HSA_SIGNAL_CONDITION_LT, 1, slice,
                                                    HSA_WAIT_STATE_BLOCKED);
        if (value < 1) {
            handlers_seen();
            break;
        }
        if (!locked)
            pthread_mutex_lock(&bctx->lock);
        gm__hsa_check_stuck(bctx);
        if (!locked)
            pthread_mutex_unlock(&bctx->lock);
        if (atomic_load(&bctx->queue_failed) != 0)
            return queue_failure(bctx, what);
    }
    if (value < 0)
        return gm__error(GM_ERR_DRIVER, "%s failed on the device (completion signal %lld)", what,
                         (long long)value);
    return GM_OK;
}

gm_status gm__hsa_sig_wait(gm_backend_ctx *bctx, gm__hsa_sig *sig, const char *what)
{
    return sig_wait(bctx, sig, what, false);
}

gm_status gm__hsa_sig_wait_locked(gm_backend_ctx *bctx, gm__hsa_sig *sig, const char *what)
{
    return sig_wait(bctx, sig, what, true);
}
