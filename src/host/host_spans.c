/*
 * The simulator's process-wide record of pinned, mapped and registered host
 * memory, over every host context: CUDA's page-locking is the process's, not
 * a context's. Each context keeps its own regions (host_registry.c); this
 * record adds what one context must know of the others':
 *   - registering memory that another context registered or allocated (a
 *     pinned or mapped block counts with its page-rounded tail) is refused
 *     (GM_ERR_STATE), as cuMemHostRegister refuses memory already
 *     registered, so one context's scope end cannot unlock pages another
 *     context's open scope relies on;
 *   - a page shared by two contexts' registrations stays locked until both
 *     are gone (mlock does not count);
 *   - portable memory (GM_HOST_PORTABLE) is memory of every context.
 * A span is claimed (checked and recorded in one step) before its pages are
 * locked, and released (removed, its pages unlocked but those another span
 * shares) in one step too, so two contexts cannot both claim a range, nor
 * one unlock a page between another's claim and lock. Spans are few (one per
 * pinned or mapped allocation or registration): a plain array under one
 * mutex, taken after a context's mem_lock, never before it, with only
 * mlock/munlock called under it.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "host_backend.h"

typedef struct host_span {
    const host_ctx *owner;
    uintptr_t base;
    size_t bytes;        /* an allocation's charged bytes: its pages are its own */
    size_t user_bytes;   /* the bytes the user asked for: what other contexts may use */
    uintptr_t lock_base; /* the pages it locks, or may be locking (none once mlock failed) */
    size_t lock_bytes;
    int kind;
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

gm_status gm__host_span_claim(const host_ctx *owner, const host_region *r, size_t bytes,
                              bool portable, const char *fn)
{
    gm_status status = GM_OK;

    pthread_mutex_lock(&spans_lock);
    for (size_t i = 0; i < nspans && status == GM_OK; i++) {
        if (spans[i].owner != owner && meets(&spans[i], r->base, bytes))
            status = gm__error(GM_ERR_STATE,
                               "%s: [%p, %p) overlaps memory another context registered or "
                               "allocated (page-locking is the process's, as in CUDA)",
                               fn, (void *)r->base, (void *)(r->base + bytes));
    }
    if (status == GM_OK && nspans == capacity) {
        size_t grown = capacity == 0 ? 16 : capacity * 2;
        host_span *more = gm__realloc(spans, grown * sizeof(*spans));

        if (more == NULL) {
            status = gm__error(GM_ERR_NO_MEMORY,
                               "%s: out of memory for the process's record of "
                               "page-locked memory",
                               fn);
        } else {
            spans = more;
            capacity = grown;
        }
    }
    if (status == GM_OK)
        spans[nspans++] = (host_span){owner,        r->base,       bytes,   r->bytes,
                                      r->lock_base, r->lock_bytes, r->kind, portable};
    pthread_mutex_unlock(&spans_lock);
    return status;
}

/* Whether another span than `self` covers a byte of page [page, page + ps) (spans_lock). */
static bool page_shared(const host_span *self, uintptr_t page, size_t ps)
{
    for (size_t i = 0; i < nspans; i++) {
        const host_span *s = &spans[i];

        if (s != self && page < s->lock_base + s->lock_bytes && s->lock_base < page + ps)
            return true;
    }
    return false;
}

/* Owner's span at base, or NULL (spans_lock). */
static host_span *span_at(const host_ctx *owner, uintptr_t base)
{
    for (size_t i = 0; i < nspans; i++) {
        if (spans[i].owner == owner && spans[i].base == base)
            return &spans[i];
    }
    return NULL;
}

void gm__host_span_unlocked(const host_ctx *owner, uintptr_t base)
{
    host_span *self = NULL;

    pthread_mutex_lock(&spans_lock);
    self = span_at(owner, base);
    if (self != NULL)
        self->lock_bytes = 0; /* keeps no shared page locked for another span */
    pthread_mutex_unlock(&spans_lock);
}

void gm__host_span_release(const host_ctx *owner, uintptr_t base, uintptr_t lo, uintptr_t hi)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    host_span *self = NULL;

    pthread_mutex_lock(&spans_lock);
    self = span_at(owner, base);
    if (hi > lo && page_shared(self, lo, ps))
        lo += ps;
    if (hi > lo && page_shared(self, hi - ps, ps))
        hi -= ps;
    if (hi > lo)
        (void)munlock((void *)lo, hi - lo);
    if (self != NULL)
        *self = spans[--nspans];
    if (nspans == 0) { /* nothing kept while no context has any */
        gm__free(spans);
        spans = NULL;
        capacity = 0;
    }
    pthread_mutex_unlock(&spans_lock);
}

int gm__host_span_portable_kind(const host_ctx *owner, uintptr_t addr, size_t bytes)
{
    int kind = GM_MEMORY_HOST;

    pthread_mutex_lock(&spans_lock);
    for (size_t i = 0; i < nspans && kind == GM_MEMORY_HOST; i++) {
        const host_span *s = &spans[i];

        if (s->owner != owner && s->portable && addr >= s->base && addr - s->base < s->user_bytes &&
            bytes <= s->user_bytes - (addr - s->base))
            kind = s->kind;
    }
    pthread_mutex_unlock(&spans_lock);
    return kind;
}
