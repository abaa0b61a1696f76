/*
 * The host simulator's cache of freed device memory.
 *
 * mem_free of simulated device (or managed) memory does not hand the block
 * back to the C library: it keeps it in a per-size-class free list, and the
 * next allocation of that class reuses it. That spares posix_memalign/free,
 * and for large blocks the mmap/munmap and fresh-page faults that a real
 * driver's allocator never shows (cudaMalloc hands out device pages that
 * are already there).
 *
 * A cached block keeps its region in the registry, marked HOST_REGION_CACHED
 * (see host_backend.h): freeing it flips the state and pushes the region on
 * its class's list, reusing it pops the region and flips the state back, so
 * the steady state (allocate, free, allocate again) neither removes nor
 * inserts a registry node.
 *
 * What the cache does not change:
 *   - capacity accounting: a cached block is not charged, so mem_info
 *     reports it as free and it can never cause an out-of-memory error;
 *   - what is memory of the context: every registry user skips cached
 *     regions, so pointer_kind and the copy checks treat a cached block as
 *     freed memory, mem_free of it is a double free and host_register may
 *     claim its range (the block is then evicted: freed, never handed out
 *     again); under AddressSanitizer it is poisoned, so a stray access is
 *     still reported as one;
 *   - host memory pressure: when posix_memalign fails, the caller evicts
 *     the whole cache (gm__host_cache_drop) and tries once more.
 *
 * Size classes: blocks are allocated with the capacity of their class, a
 * multiple of 256 bytes up to 4 KiB, then four classes per power of two
 * (at most 25 % over the request) up to GM_HOST_CACHE_MAX_BLOCK. Larger
 * blocks are never cached. The total capacity kept is bounded by
 * GM_HOST_DEVICE_CACHE (bytes; 0 turns the cache off).
 *
 * Policy: reuse takes the most recently freed block of the class (the one
 * most likely still in the CPU's caches). A freed block that does not fit
 * under the bound evicts the least recently cached blocks, of any class,
 * until it fits, as a caching allocator drops its least recently used
 * blocks: the cache follows the program's current sizes instead of keeping
 * whatever filled it first. A block larger than the whole bound is freed
 * at once and evicts nothing. The evicted blocks leave the registry under
 * mem_lock and are freed by the caller after it.
 *
 * The class lists link through the registry regions (cache_next and
 * cache_prev; the cache holds each list's first and last), not through the
 * blocks: a write into freed device memory cannot corrupt a list, a region
 * can be unlinked from the middle of its list (host_register evicting it)
 * in constant time, and teardown frees each block once by walking the
 * registry. The cache-wide order needs no list of its own: each region is
 * stamped with the cache's clock when it is cached (cached_at, in the lock
 * range device memory never uses: no larger regions), so each class list is
 * in clock order, and the least recently cached block is the oldest of the
 * lists' last regions. So reuse and freeing do the class list's constant
 * work and a stamp (a second list would touch two more regions each time),
 * and finding the oldest block is a walk over the 72 lists' last regions,
 * done only to make room. The walk also yields the oldest last region of
 * the other classes, so a run of evictions from one class takes one walk:
 * evicting k blocks costs k registry removals and at most k walks under
 * mem_lock; each block is evicted at most once per time it is cached.
 *
 * The block's first two words still hold check values (its region's address
 * and its own, each xor a constant), written when it is cached and verified
 * when it is reused, so a write into freed device memory is detected and
 * logged: that block is freed and never handed out; the rest of its class is
 * unaffected. Under AddressSanitizer the rest of the block is poisoned,
 * and a live block's bytes past its request are too (gm__host_poison_tail
 * for a new block; a reused one unpoisons only its request).
 * Every function here except gm__host_cache_discard and gm__host_cache_free
 * runs with the context's mem_lock held.
 */
#include <stdint.h>
#include <stdlib.h>

#include "host_backend.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GM__HOST_CACHE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(GM__HOST_CACHE_ASAN)
#define GM__HOST_CACHE_ASAN 1
#endif
#if defined(GM__HOST_CACHE_ASAN)
#include <sanitizer/asan_interface.h>
#endif

/* Classes of exactly n * 256 bytes, n = 1 ..= 16 (up to 4 KiB). */
#define SMALL_CLASSES 16
#define SMALL_LIMIT   ((size_t)SMALL_CLASSES * GM_HOST_DEVICE_ALIGNMENT)
#define SMALL_SHIFT   12 /* log2(SMALL_LIMIT) */

/* Xor'ed into a cached block's check words. */
#define CHECK_REGION ((uintptr_t)0x9e3779b97f4a7c15ull)
#define CHECK_BLOCK  ((uintptr_t)0xc2b2ae3d27d4eb4full)

_Static_assert(SMALL_LIMIT == (size_t)1 << SMALL_SHIFT, "SMALL_SHIFT must match SMALL_LIMIT");
_Static_assert(GM_HOST_CACHE_CLASSES == SMALL_CLASSES + 4 * (GM_HOST_CACHE_MAX_SHIFT - SMALL_SHIFT),
               "GM_HOST_CACHE_CLASSES must match the class layout");
_Static_assert(GM_HOST_CACHE_CLASSES <= INT16_MAX, "a region's klass must hold every class");

/*
 * The words at the start of a cached block: check values while it is cached,
 * the link of a list for gm__host_cache_free once it is evicted.
 */
typedef struct cached_block {
    uintptr_t region; /* (uintptr_t)its region ^ CHECK_REGION; evicted: the next block */
    uintptr_t self;   /* (uintptr_t)the block ^ CHECK_BLOCK */
} cached_block;

/* Mark a block's bytes inaccessible (ASan builds), except the check words. */
static void poison(void *block, size_t capacity)
{
#if defined(GM__HOST_CACHE_ASAN)
    ASAN_POISON_MEMORY_REGION((char *)block + sizeof(cached_block),
                              capacity - sizeof(cached_block));
#else
    (void)block;
    (void)capacity;
#endif
}

/* Make the first `bytes` of a reused block accessible again (ASan builds). */
static void unpoison(void *block, size_t bytes)
{
#if defined(GM__HOST_CACHE_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(block, bytes);
#else
    (void)block;
    (void)bytes;
#endif
}

void gm__host_poison_tail(void *block, size_t bytes, size_t capacity)
{
#if defined(GM__HOST_CACHE_ASAN)
    if (bytes < capacity)
        ASAN_POISON_MEMORY_REGION((char *)block + bytes, capacity - bytes);
#else
    (void)block;
    (void)bytes;
    (void)capacity;
#endif
}

/* Index of the highest set bit of x > 0. */
static int log2_floor(size_t x)
{
    return (int)(sizeof(unsigned long long) * 8 - 1) - __builtin_clzll((unsigned long long)x);
}

/* The class of a charged size (a multiple of 256, > 0) and its capacity; -1 when uncached. */
int gm__host_cache_class(size_t charged, size_t *capacity_p)
{
    int shift = 0;
    size_t step = 0, capacity = 0;

    *capacity_p = charged;
    if (charged <= SMALL_LIMIT)
        return (int)(charged / GM_HOST_DEVICE_ALIGNMENT) - 1;
    if (charged > GM_HOST_CACHE_MAX_BLOCK)
        return -1;
    shift = log2_floor(charged - 1); /* charged is in (2^shift, 2^(shift + 1)] */
    step = (size_t)1 << (shift - 2);
    capacity = (charged + step - 1) & ~(step - 1);
    *capacity_p = capacity;
    return SMALL_CLASSES + 4 * (shift - SMALL_SHIFT) + (int)(capacity / step) - 5;
}

/* Whether a cached block's check words are those gm__host_cache_keep wrote. */
static bool block_intact(const host_region *r)
{
    const cached_block *block = (const cached_block *)r->base;

    return block->region == ((uintptr_t)r ^ CHECK_REGION) && block->self == (r->base ^ CHECK_BLOCK);
}

/*
 * Take a cached region off its class's list (it stays cached and in the
 * registry). Its own links are left stale: only a cached region's are read,
 * and cache_region writes them.
 */
static void unlink_region(host_cache *cache, host_region *r)
{
    if (r->cache_prev != NULL)
        r->cache_prev->cache_next = r->cache_next;
    else
        cache->bins[r->klass] = r->cache_next;
    if (r->cache_next != NULL)
        r->cache_next->cache_prev = r->cache_prev;
    else
        cache->tails[r->klass] = r->cache_prev;
    cache->counts[r->klass]--;
    cache->bytes -= (int64_t)r->capacity;
}

/*
 * The class whose last region is the least recently cached of all (the cache
 * holds something), and in *next_p the cached_at of the oldest last region
 * of every other class (UINT64_MAX when none).
 */
static int oldest_class(const host_cache *cache, uint64_t *next_p)
{
    int oldest = -1;
    uint64_t first = UINT64_MAX, next = UINT64_MAX;

    for (int k = 0; k < GM_HOST_CACHE_CLASSES; k++) {
        uint64_t at = 0;

        if (cache->tails[k] == NULL)
            continue;
        at = cache->tails[k]->cached_at;
        if (at < first) {
            next = first;
            first = at;
            oldest = k;
        } else if (at < next) {
            next = at;
        }
    }
    *next_p = next;
    return oldest;
}

/* Make a live region cached: first in its class's list, stamped, check words written, poisoned. */
static inline void cache_region(host_cache *cache, host_region *r)
{
    cached_block *block = (cached_block *)r->base;
    host_region *head = cache->bins[r->klass];

    r->cache_next = head;
    r->cache_prev = NULL;
    if (head != NULL)
        head->cache_prev = r;
    else
        cache->tails[r->klass] = r;
    cache->bins[r->klass] = r;
    cache->counts[r->klass]++;
    cache->bytes += (int64_t)r->capacity;
    r->cached_at = ++cache->clock;
    r->state = HOST_REGION_CACHED;
    unpoison(block, sizeof(*block)); /* a block of fewer bytes has its tail poisoned */
    block->region = (uintptr_t)r ^ CHECK_REGION;
    block->self = r->base ^ CHECK_BLOCK;
    poison(block, r->capacity);
}

/*
 * gm__host_cache_keep when r does not fit: evict the least recently cached
 * regions until it does, then cache it; false, evicting nothing, when it
 * never would (larger than the whole cache). Out of line, so that the
 * common path stays a leaf function with no stack frame.
 */
static __attribute__((noinline)) bool keep_evicting(host_cache *cache, host_registry *reg,
                                                    host_region *r, void **evicted_p)
{
    if ((int64_t)r->capacity > cache->limit)
        return false;
    while ((int64_t)r->capacity > cache->limit - cache->bytes) {
        /* Something is held: with nothing, r fits. */
        uint64_t next = 0;
        int k = oldest_class(cache, &next);

        /* Class k's last regions, while each is older than every other class's. */
        do
            gm__host_cache_evict(cache, reg, cache->tails[k], evicted_p);
        while ((int64_t)r->capacity > cache->limit - cache->bytes && cache->tails[k] != NULL &&
               cache->tails[k]->cached_at < next);
    }
    cache_region(cache, r);
    return true;
}

bool gm__host_cache_keep(host_cache *cache, host_registry *reg, host_region *r, void **evicted_p)
{
    if (r->klass < 0)
        return false;
    if ((int64_t)r->capacity > cache->limit - cache->bytes)
        return keep_evicting(cache, reg, r, evicted_p);
    cache_region(cache, r);
    return true;
}

/* Take class klass's first region (r) off its list: unlink_region for a list's head. */
static inline void pop_first(host_cache *cache, int klass, host_region *r)
{
    cache->bins[klass] = r->cache_next;
    if (r->cache_next != NULL)
        r->cache_next->cache_prev = NULL;
    else
        cache->tails[klass] = NULL;
    cache->counts[klass]--;
    cache->bytes -= (int64_t)r->capacity;
}

/* A region just taken off its list made live, its first `bytes` usable. */
static inline host_region *make_live(host_region *r, size_t bytes)
{
    r->state = HOST_REGION_LIVE;
    unpoison((void *)r->base, bytes);
    gm__host_poison_tail((void *)r->base, bytes, sizeof(cached_block)); /* its check words */
    return r;
}

host_region *gm__host_cache_take(host_cache *cache, host_registry *reg, int klass, size_t bytes,
                                 void **bad_p)
{
    host_region *r = NULL;

    if (klass < 0 || cache->bins[klass] == NULL)
        return NULL;
    r = cache->bins[klass];
    pop_first(cache, klass, r);
    if (!block_intact(r)) {
        *bad_p = (void *)r->base;
        gm__host_registry_remove(reg, r);
        return NULL;
    }
    return make_live(r, bytes);
}

host_region *gm__host_cache_take_intact(host_cache *cache, int klass, size_t bytes)
{
    host_region *r = klass >= 0 ? cache->bins[klass] : NULL;

    if (r == NULL || !block_intact(r))
        return NULL;
    pop_first(cache, klass, r);
    return make_live(r, bytes);
}

void gm__host_cache_discard(void *block, size_t capacity)
{
    gm__log(GM_LOG_ERROR,
            "host backend: freed device memory at %p was written after mem_free; discarding "
            "that cached %zu-byte block",
            block, capacity);
    free(block);
}

void gm__host_cache_evict(host_cache *cache, host_registry *reg, host_region *r, void **list_p)
{
    cached_block *block = (cached_block *)r->base;

    unlink_region(cache, r);
    gm__host_registry_remove(reg, r);
    block->region = (uintptr_t)*list_p; /* the check words are never poisoned */
    *list_p = block;
}

void *gm__host_cache_drop(host_cache *cache, host_registry *reg)
{
    void *list = NULL;

    for (int k = 0; k < GM_HOST_CACHE_CLASSES; k++)
        while (cache->bins[k] != NULL)
            gm__host_cache_evict(cache, reg, cache->bins[k], &list);
    return list;
}

void gm__host_cache_free(void *list)
{
    cached_block *block = list;

    while (block != NULL) {
        cached_block *next = (cached_block *)block->region;

        free(block);
        block = next;
    }
}
