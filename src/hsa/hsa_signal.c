/*
 * Reference-counted, recycled HSA signals and waiting on them without hanging
 * when a queue dies. See hsa_internal.h for the locking rules.
 */
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

bool gm__hsa_sig_done(const gm_backend_ctx *bctx, const gm__hsa_sig *sig)
{
    return bctx->api.hsa_signal_load_scacquire(sig->handle) < 1;
}

/* The status recorded by a queue error callback, as an error with detail. */
static gm_status queue_failure(gm_backend_ctx *bctx, const char *what)
{
    gm_status status = (gm_status)atomic_load(&bctx->queue_error);

    return gm__error(status,
                     "%s: an AQL queue of this context failed, its work will never "
                     "complete: %s",
                     what, bctx->queue_error_text);
}

/*
 * Wait until sig < 1, in slices, so that a queue error (reported by the
 * runtime's callback) ends the wait instead of hanging. Lock not held; the
 * caller holds a reference to sig. A negative value is the runtime's way of
 * reporting a failed operation: GM_ERR_DRIVER.
 */
gm_status gm__hsa_sig_wait(gm_backend_ctx *bctx, gm__hsa_sig *sig, const char *what)
{
    uint64_t slice = bctx->timestamp_hz / (1000000000u / GM_HSA_WAIT_SLICE_NS);
    hsa_signal_value_t value = 1;

    for (;;) {
        value = bctx->api.hsa_signal_wait_scacquire(sig->handle, HSA_SIGNAL_CONDITION_LT, 1, slice,
                                                    HSA_WAIT_STATE_BLOCKED);
        if (value < 1)
            break;
        if (atomic_load(&bctx->queue_failed) != 0)
            return queue_failure(bctx, what);
    }
    if (value < 0)
        return gm__error(GM_ERR_DRIVER,
                         "%s: the HSA runtime reported a failure (completion "
                         "signal value %lld)",
                         what, (long long)value);
    return GM_OK;
}
