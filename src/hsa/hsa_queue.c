/*
 * Writing AQL packets: wait for room (gm__hsa_queue_wait_room, with the
 * context lock released), reserve slots with the write index, write each
 * packet's body, publish its header last with a release store, then ring the
 * doorbell with the last packet id. Every packet carries the barrier bit (a
 * stream's queue runs its packets one after another) and system-scope
 * acquire and release fences (results are read by the host and by DMA
 * engines).
 */
#include <sched.h>
#include <string.h>
#include <time.h>

#include "hsa_internal.h"

/* The header of every packet we write, for a packet type. */
static uint16_t packet_header(hsa_packet_type_t type)
{
    return (uint16_t)((type << HSA_PACKET_HEADER_TYPE) | (1u << HSA_PACKET_HEADER_BARRIER) |
                      (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                      (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE));
}

/* Packet slots of the queue in use (written, not yet consumed). */
static uint64_t slots_used(gm_backend_ctx *bctx, hsa_queue_t *queue)
{
    uint64_t write = bctx->api.hsa_queue_add_write_index_scacq_screl(queue, 0);

    return write - bctx->api.hsa_queue_load_read_index_scacquire(queue);
}

/* Sleep a little while waiting for the packet processor: yield first, then 50 us naps. */
void gm__hsa_back_off(unsigned *rounds)
{
    struct timespec nap = {0, 50000};

    if ((*rounds)++ < 64)
        sched_yield();
    else
        nanosleep(&nap, NULL);
}

size_t gm__hsa_queue_packets_for(size_t ndeps)
{
    return (ndeps + GM_HSA_BARRIER_DEPS - 1) / GM_HSA_BARRIER_DEPS + 1;
}

gm_status gm__hsa_queue_check_size(size_t npackets, uint32_t size, const char *what)
{
    if (npackets > size)
        return gm__error(GM_ERR_UNSUPPORTED,
                         "%s: needs %zu AQL packets (dependency barriers), more than the "
                         "queue's %u",
                         what, npackets, (unsigned)size);
    return GM_OK;
}

gm_status gm__hsa_queue_wait_room(gm_backend_ctx *bctx, hsa_queue_t *queue, size_t npackets,
                                  const char *what)
{
    unsigned rounds = 0;
    gm_status status = gm__hsa_queue_check_size(npackets, queue->size, what);

    if (status != GM_OK)
        return status;
    while (slots_used(bctx, queue) + npackets > queue->size) {
        /* Host work the runtime's handler thread runs (a stream callback) must not wait: the
         * packets ahead may wait for that very work, which then never ends. */
        if (gm__hsa_handler_stream != NULL)
            return gm__error(GM_ERR_STATE,
                             "%s: the stream's AQL queue is full, and inside a stream callback "
                             "waiting for room could wait for the callback itself; queue the "
                             "work from another thread",
                             what);
        if (rounds % 256 == 255) /* about every 10 ms: packets behind a failed op never leave */
            gm__hsa_check_stuck(bctx);
        if (atomic_load(&bctx->queue_failed) != 0)
            return gm__error((gm_status)atomic_load(&bctx->queue_error),
                             "%s: the queue failed while waiting for free packet slots", what);
        pthread_mutex_unlock(&bctx->lock);
        gm__hsa_back_off(&rounds);
        pthread_mutex_lock(&bctx->lock);
    }
    return GM_OK;
}

/*
 * Reserve n consecutive packet ids. Room was made by gm__hsa_queue_wait_room
 * under the same hold of the lock, and only this context writes the queue,
 * so a full ring here is a broken invariant: an error, never a spin.
 */
static gm_status reserve(gm_backend_ctx *bctx, hsa_queue_t *queue, uint64_t n, uint64_t *first_p)
{
    uint64_t first = 0;

    if (slots_used(bctx, queue) + n > queue->size)
        return gm__error(GM_ERR_DRIVER, "HSA backend: AQL queue full without a reservation");
    first = bctx->api.hsa_queue_add_write_index_scacq_screl(queue, n);
    *first_p = first;
    return GM_OK;
}

/* Write a 64-byte packet at id: body first, then header+setup with a release store. */
static void publish(hsa_queue_t *queue, uint64_t id, const void *packet)
{
    unsigned char *slot = (unsigned char *)queue->base_address + (id & (queue->size - 1)) * 64;
    uint32_t first_word = 0;

    memcpy(slot + 4, (const unsigned char *)packet + 4, 60);
    memcpy(&first_word, packet, sizeof(first_word));
    __atomic_store_n((uint32_t *)(void *)slot, first_word, __ATOMIC_RELEASE);
}

/* Fill barrier-AND packet i of a chain over deps. */
static void barrier_packet(hsa_barrier_and_packet_t *pkt, gm__hsa_sig *const *deps, size_t ndeps,
                           size_t i, hsa_signal_t completion)
{
    memset(pkt, 0, sizeof(*pkt));
    pkt->header = packet_header(HSA_PACKET_TYPE_BARRIER_AND);
    for (size_t d = 0; d < GM_HSA_BARRIER_DEPS && i * GM_HSA_BARRIER_DEPS + d < ndeps; d++)
        pkt->dep_signal[d] = deps[i * GM_HSA_BARRIER_DEPS + d]->handle;
    pkt->completion_signal = completion;
}

/* Packets a barrier chain over ndeps needs (at least one when completing a signal). */
static size_t barrier_count(size_t ndeps)
{
    return (ndeps + GM_HSA_BARRIER_DEPS - 1) / GM_HSA_BARRIER_DEPS;
}

gm_status gm__hsa_submit_barrier(gm_backend_ctx *bctx, hsa_queue_t *queue, gm__hsa_sig *const *deps,
                                 size_t ndeps, hsa_signal_t completion)
{
    size_t n = barrier_count(ndeps) > 0 ? barrier_count(ndeps) : 1;
    uint64_t first = 0;
    gm_status status = reserve(bctx, queue, n, &first);
    hsa_signal_t none = {0};

    if (status != GM_OK)
        return status;
    for (size_t i = 0; i < n; i++) {
        hsa_barrier_and_packet_t pkt;

        barrier_packet(&pkt, deps, ndeps, i, i + 1 == n ? completion : none);
        publish(queue, first + i, &pkt);
    }
    bctx->api.hsa_signal_store_screlease(queue->doorbell_signal,
                                         (hsa_signal_value_t)(first + n - 1));
    return GM_OK;
}

gm_status gm__hsa_submit_dispatch(gm_backend_ctx *bctx, hsa_queue_t *queue,
                                  gm__hsa_sig *const *deps, size_t ndeps,
                                  const hsa_kernel_dispatch_packet_t *dispatch)
{
    size_t nbarriers = barrier_count(ndeps);
    uint64_t first = 0;
    gm_status status = reserve(bctx, queue, nbarriers + 1, &first);
    hsa_kernel_dispatch_packet_t pkt = *dispatch;
    hsa_signal_t none = {0};

    if (status != GM_OK)
        return status;
    for (size_t i = 0; i < nbarriers; i++) {
        hsa_barrier_and_packet_t barrier;

        barrier_packet(&barrier, deps, ndeps, i, none);
        publish(queue, first + i, &barrier);
    }
    pkt.header = packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH);
    publish(queue, first + nbarriers, &pkt);
    bctx->api.hsa_signal_store_screlease(queue->doorbell_signal,
                                         (hsa_signal_value_t)(first + nbarriers));
    return GM_OK;
}

gm_status gm__hsa_queue_deps(gm_backend_stream *stream, const gm__hsa_op *op, gm__hsa_sig ***deps_p,
                             size_t *ndeps_p)
{
    gm__hsa_sig **deps = NULL;
    size_t n = 0;

    *deps_p = NULL;
    *ndeps_p = 0;
    if (op->ndeps == 0)
        return GM_OK;
    deps = gm__calloc(op->ndeps, sizeof(*deps));
    if (deps == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "HSA backend: no memory for dependency signals");
    for (size_t i = 0; i < op->ndeps; i++) {
        if (op->deps[i] != stream->queue_last)
            deps[n++] = op->deps[i];
    }
    *deps_p = deps;
    *ndeps_p = n;
    return GM_OK;
}

/* Remember the completion of the chain just submitted on stream's queue. */
void gm__hsa_queue_submitted(gm_backend_ctx *bctx, gm_backend_stream *stream, gm__hsa_sig *done)
{
    gm__hsa_sig_unref(bctx, stream->queue_last);
    stream->queue_last = gm__hsa_sig_ref(done);
}
