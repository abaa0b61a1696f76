/*
 * The runtime's lifetime and GPU memory faults.
 *
 * ROCr reports an ordinary GPU page fault through no queue's error callback:
 * the kernel driver signals a VM fault event, Runtime::VMFaultHandler (on the
 * runtime's async-event thread) passes it as HSA_AMD_GPU_MEMORY_FAULT_EVENT
 * to the handlers registered with hsa_amd_register_system_event_handler, and
 * when none of them returns HSA_STATUS_SUCCESS it prints the fault and calls
 * std::abort(). The faulting queue is left suspended: AqlQueue's exception
 * handler drops HSA_STATUS_ERROR_MEMORY_FAULT instead of calling the queue's
 * callback, so the queue's packets never complete.
 *
 * So every context registers in a process-wide registry, and one handler is
 * registered with each runtime instance: on a memory fault it fails every
 * context whose GPU is the faulting agent, exactly as a queue error callback
 * does (every wait then ends with GM_ERR_CONTEXT_LOST and the fault in the
 * message), and answers HSA_STATUS_SUCCESS so that ROCr does not abort. A
 * fault on an agent no context of ours uses, and any other event, is left to
 * the runtime (and to other handlers).
 *
 * ROCr has no way to unregister a handler, so the handler's data is this
 * file's process-wide state, never a context. Handlers live as long as the
 * runtime instance: ROCr deletes it, registrations included, at the last
 * hsa_shut_down, and the next hsa_init builds a fresh one. Before taking its
 * first reference, a context therefore asks whether the runtime is still
 * initialized (another user of the runtime may have kept it alive, our
 * registration with it) and registers again when it is not. Left unseen: a
 * runtime shut down and re-initialized by someone else between two gpumem
 * contexts.
 */
#include <stdio.h>

#include "hsa_internal.h"

/* Our hsa_init references and whether the runtime instance they hold has our handler
 * (the whole init / shut-down sequences are made under runtime_lock; the handler never
 * takes it, so ROCr may join its event thread inside hsa_shut_down while we hold it). */
static pthread_mutex_t runtime_lock = PTHREAD_MUTEX_INITIALIZER;
static long runtime_refs;
static bool handler_registered;

/* Contexts the handler may fail (registry_lock; the handler takes it, and then no other). */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static gm_backend_ctx *registry;

/* Fail the context: every wait ends with `status` and `text` (first failure kept; any thread). */
void gm__hsa_ctx_fail(gm_backend_ctx *bctx, gm_status status, const char *text)
{
    if (atomic_exchange(&bctx->queue_error_claimed, 1) != 0)
        return;
    snprintf(bctx->queue_error_text, sizeof(bctx->queue_error_text), "%s", text);
    atomic_store(&bctx->queue_error, (int)status);
    atomic_store(&bctx->queue_failed, 1); /* last: readers then see the text */
}

/* The reasons of hsa_amd_memory_fault_reason_t, in words. */
static void reason_words(uint32_t mask, char *buf, size_t bytes)
{
    static const struct {
        uint32_t bit;
        const char *what;
    } reasons[] = {
        {HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT, "page not present or supervisor privilege"},
        {HSA_AMD_MEMORY_FAULT_READ_ONLY, "write to a read-only page"},
        {HSA_AMD_MEMORY_FAULT_NX, "execute access to a no-execute page"},
        {HSA_AMD_MEMORY_FAULT_HOST_ONLY, "GPU access to a host-only page"},
        {HSA_AMD_MEMORY_FAULT_DRAMECC, "DRAM ECC failure"},
        {HSA_AMD_MEMORY_FAULT_IMPRECISE, "address may not be exact"},
        {HSA_AMD_MEMORY_FAULT_SRAMECC, "SRAM ECC failure"},
        {(uint32_t)HSA_AMD_MEMORY_FAULT_HANG, "GPU reset after a hang"},
    };
    size_t used = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]) && used < bytes; i++) {
        int n = 0;

        if ((mask & reasons[i].bit) == 0)
            continue;
        n = snprintf(buf + used, bytes - used, "%s%s", used != 0 ? ", " : "", reasons[i].what);
        used += n > 0 ? (size_t)n : 0;
    }
    if (buf[0] == '\0')
        snprintf(buf, bytes, "no reason given");
}

/*
 * The system event handler (the runtime's async-event thread). A memory fault
 * on the GPU of a live context fails that context and is answered SUCCESS;
 * anything else is answered HSA_STATUS_ERROR: not handled here.
 */
static hsa_status_t system_event(const hsa_amd_event_t *event, void *data)
{
    const hsa_amd_gpu_memory_fault_info_t *fault = NULL;
    char reasons[256], text[GM_HSA_ERROR_TEXT];
    bool handled = false;

    (void)data;
    if (event == NULL || event->event_type != HSA_AMD_GPU_MEMORY_FAULT_EVENT)
        return HSA_STATUS_ERROR;
    fault = &event->memory_fault;
    reason_words(fault->fault_reason_mask, reasons, sizeof(reasons));
    pthread_mutex_lock(&registry_lock);
    for (gm_backend_ctx *bctx = registry; bctx != NULL; bctx = bctx->fault_next) {
        if (bctx->gpu.handle != fault->agent.handle)
            continue;
        snprintf(text, sizeof(text),
                 "GPU memory fault on device %d at address 0x%llx, reason mask 0x%x (%s); "
                 "the GPU's queues stop, their work will never complete",
                 (int)bctx->device_id, (unsigned long long)fault->virtual_address,
                 (unsigned)fault->fault_reason_mask, reasons);
        gm__hsa_ctx_fail(bctx, GM_ERR_CONTEXT_LOST, text);
        handled = true;
    }
    pthread_mutex_unlock(&registry_lock);
    if (handled)
        gm__log(GM_LOG_ERROR,
                "HSA backend: GPU memory fault at address 0x%llx, reason mask 0x%x (%s)",
                (unsigned long long)fault->virtual_address, (unsigned)fault->fault_reason_mask,
                reasons);
    return handled ? HSA_STATUS_SUCCESS : HSA_STATUS_ERROR;
}

/*
 * hsa_init for a context, and our system event handler for the runtime
 * instance when it has none of ours yet. Failing to register fails the
 * context (its first memory fault would abort the process); a runtime
 * without the entry point is used as it is, with a warning.
 */
gm_status gm__hsa_runtime_open(gm_backend_ctx *bctx)
{
    const gm__hsa_api *api = &bctx->api;
    uint64_t hz = 0;
    gm_status status = GM_OK;

    pthread_mutex_lock(&runtime_lock);
    /* No reference of ours: the instance our handler went to may have been deleted. */
    if (runtime_refs == 0 && api->hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &hz) ==
                                 HSA_STATUS_ERROR_NOT_INITIALIZED)
        handler_registered = false;
    /* Without /dev/kfd (no GPU, no permission) hsa_init fails with OUT_OF_RESOURCES. */
    status = GM_HSA_CALL_AS(api, GM_ERR_NO_DEVICE, hsa_init, ());
    if (status != GM_OK)
        goto done;
    if (!handler_registered && api->hsa_amd_register_system_event_handler == NULL) {
        gm__log(GM_LOG_WARN, "HSA backend: the runtime has no "
                             "hsa_amd_register_system_event_handler; a GPU memory fault will "
                             "abort the process");
    } else if (!handler_registered) {
        status = GM_HSA_CALL(api, hsa_amd_register_system_event_handler, (system_event, NULL));
        if (status != GM_OK) {
            (void)api->hsa_shut_down(); /* keep the registration's error */
            goto done;
        }
        handler_registered = true;
    }
    runtime_refs++;
done:
    pthread_mutex_unlock(&runtime_lock);
    return status;
}

/* hsa_shut_down for a context that gm__hsa_runtime_open opened. */
gm_status gm__hsa_runtime_close(gm_backend_ctx *bctx)
{
    gm_status status = GM_OK;

    pthread_mutex_lock(&runtime_lock);
    runtime_refs--;
    status = GM_HSA_CALL(&bctx->api, hsa_shut_down, ());
    pthread_mutex_unlock(&runtime_lock);
    return status;
}

/* From now on a memory fault on the context's GPU fails the context. */
void gm__hsa_fault_watch(gm_backend_ctx *bctx)
{
    pthread_mutex_lock(&registry_lock);
    bctx->fault_next = registry;
    registry = bctx;
    pthread_mutex_unlock(&registry_lock);
}

/* Leave the registry; once this returns the handler no longer touches bctx. */
void gm__hsa_fault_unwatch(gm_backend_ctx *bctx)
{
    gm_backend_ctx **link = &registry;

    pthread_mutex_lock(&registry_lock);
    while (*link != NULL && *link != bctx)
        link = &(*link)->fault_next;
    if (*link == bctx)
        *link = bctx->fault_next;
    bctx->fault_next = NULL;
    pthread_mutex_unlock(&registry_lock);
}
