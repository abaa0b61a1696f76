/*
 * The simulator's process-wide record of pinned, mapped and registered host
 * memory, over every host context: CUDA's page-locking is the process's, not
 * a context's. Each context keeps its own regions (host_registry.c); this
 * record adds what one context must know of the others':
 *   - registering memory that another context registered or allocated is
 *     refused (GM_ERR_STATE), as cuMemHostRegister refuses memory already
 *     registered, so one context's scope end cannot unlock pages another
 *     context's open scope relies on;
 *   - a page shared by two contexts' locked ranges stays locked until both
 *     are gone (mlock does not count);
 *   - portable memory (GM_HOST_PORTABLE) is memory of every context.
 * Spans are few (one per pinned or mapped allocation or registration): a
 * plain array under one mutex, taken after a context's mem_lock, never
 * before it.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "host_backend.h"

typedef struct host_span {
    const host_ctx *owner;
    uintptr_t base;
    size_t bytes;
    uintptr_t lock_base; /* the pages mlock locked, when `locked` */
    size_t lock_bytes;
    int kind;
    bool locked;
    bool portable;
} host_span;

static pthread_mutex_t spans_lock = PTHREAD_MUTEX_INITIALIZER;
static host_span *spans;
static size_t nspans, capacity;

/* Whether [base, base + bytes) meets span s's bytes. */
static bool meets(const host_span *s, uintptr_t base, size_t bytes)
{
    return base < s->base + s->bytes && s->base < base + bytes;
}

gm_status gm__host_span_add(const host_ctx *owner, const host_region *r, bool portable)
{
    gm_status status = GM_OK;

    pthread_mutex_lock(&spans_lock);
    if (nspans == capacity) {
        size_t grown = capacity == 0 ? 16 : capacity * 2;
        host_span *more = gm__realloc(spans, grown * sizeof(*spans));

        if (more == NULL)
            status = gm__error(GM_ERR_NO_MEMORY, "host backend: out of memory for the "
                                                 "process's record of page-locked memory");
        else {
            spans = more;
            capacity = grown;
        }
    }
    if (status == GM_OK)
        spans[nspans++] = (host_span){owner,         r->base, r->bytes,  r->lock_base,
                                      r->lock_bytes, r->kind, r->locked, portable};
    pthread_mutex_unlock(&spans_lock);
    return status;
}

void gm__host_span_remove(const host_ctx *owner, uintptr_t base)
{
    pthread_mutex_lock(&spans_lock);
    for (size_t i = 0; i < nspans; i++) {
        if (spans[i].owner == owner && spans[i].base == base) {
            spans[i] = spans[--nspans];
            break;
        }
    }
    pthread_mutex_unlock(&spans_lock);
}

void gm__host_spans_forget(const host_ctx *owner)
{
    pthread_mutex_lock(&spans_lock);
    for (size_t i = 0; i < nspans;) {
        if (spans[i].owner == owner)
            spans[i] = spans[--nspans];
        else
            i++;
    }
    if (nspans == 0) { /* the last context gone: nothing kept past it */
        gm__free(spans);
        spans = NULL;
        capacity = 0;
    }
    pthread_mutex_unlock(&spans_lock);
}

bool gm__host_span_of_other(const host_ctx *owner, uintptr_t base, size_t bytes)
{
    bool found = false;

    pthread_mutex_lock(&spans_lock);
    for (size_t i = 0; i < nspans && !found; i++)
        found = spans[i].owner != owner && meets(&spans[i], base, bytes);
    pthread_mutex_unlock(&spans_lock);
    return found;
}

bool gm__host_span_page_locked_by_other(const host_ctx *owner, uintptr_t page, size_t page_bytes)
{
    bool found = false;

    pthread_mutex_lock(&spans_lock);
    for (size_t i = 0; i < nspans && !found; i++) {
        const host_span *s = &spans[i];

        found = s->owner != owner && s->locked && page < s->lock_base + s->lock_bytes &&
                s->lock_base < page + page_bytes;
    }
    pthread_mutex_unlock(&spans_lock);
    return found;
}

int gm__host_span_portable_kind(const host_ctx *owner, uintptr_t addr, size_t bytes)
{
    int kind = GM_MEMORY_HOST;

    pthread_mutex_lock(&spans_lock);
    for (size_t i = 0; i < nspans && kind == GM_MEMORY_HOST; i++) {
        const host_span *s = &spans[i];

        if (s->owner != owner && s->portable && addr >= s->base && addr - s->base <= s->bytes &&
            bytes <= s->base + s->bytes - addr)
            kind = s->kind;
    }
    pthread_mutex_unlock(&spans_lock);
    return kind;
}
