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
 * What the cache does not change:
 *   - capacity accounting: a cached block is not charged, so mem_info
 *     reports it as free and it can never cause an out-of-memory error;
 *   - the registry: a cached block is not in it, so pointer_kind and the
 *     copy checks treat it as freed memory; under AddressSanitizer it is
 *     poisoned, so a stray access is still reported as one;
 *   - host memory pressure: when posix_memalign fails, the caller releases
 *     the whole cache and tries once more.
 *
 * Size classes: blocks are allocated with the capacity of their class, a
 * multiple of 256 bytes up to 4 KiB, then four classes per power of two
 * (at most 25 % over the request) up to GM_HOST_CACHE_MAX_BLOCK. Larger
 * blocks are never cached. The total capacity kept is bounded by
 * GM_HOST_DEVICE_CACHE (bytes; 0 turns the cache off).
 *
 * A cached block's first two words link it into its class's list: the next
 * block and that address xor a check value, so a write into freed device
 * memory is detected instead of followed: the written block is freed and
 * the rest of its class's list abandoned (leaked, never touched again).
 * Every function here runs with the context's mem_lock held.
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

/* Xor'ed into a cached block's check word. */
#define LINK_CHECK ((uintptr_t)0x9e3779b97f4a7c15ull)

_Static_assert(SMALL_LIMIT == (size_t)1 << SMALL_SHIFT, "SMALL_SHIFT must match SMALL_LIMIT");
_Static_assert(GM_HOST_CACHE_CLASSES == SMALL_CLASSES + 4 * (GM_HOST_CACHE_MAX_SHIFT - SMALL_SHIFT),
               "GM_HOST_CACHE_CLASSES must match the class layout");

/* The link words at the start of a cached block. */
typedef struct cached_block {
    struct cached_block *next;
    uintptr_t check; /* (uintptr_t)next ^ LINK_CHECK */
} cached_block;

/* Mark a block's bytes inaccessible (ASan builds), except the link words. */
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

/* A class's list head was written after mem_free: free that block, forget the rest. */
static void abandon_class(host_cache *cache, int klass, size_t capacity)
{
    void *block = cache->bins[klass];

    gm__log(GM_LOG_ERROR,
            "host backend: freed device memory at %p was written after mem_free; abandoning "
            "%lld cached %zu-byte blocks",
            block, (long long)cache->counts[klass], capacity);
    cache->bytes -= cache->counts[klass] * (int64_t)capacity;
    cache->counts[klass] = 0;
    cache->bins[klass] = NULL;
    free(block);
}

/* Take a block of `klass` whose first `bytes` become usable, or NULL if there is none. */
void *gm__host_cache_take(host_cache *cache, int klass, size_t bytes, size_t capacity)
{
    cached_block *block = NULL;

    if (klass < 0 || cache->bins[klass] == NULL)
        return NULL;
    block = cache->bins[klass];
    if (block->check != ((uintptr_t)block->next ^ LINK_CHECK)) {
        abandon_class(cache, klass, capacity);
        return NULL;
    }
    cache->bins[klass] = block->next;
    cache->counts[klass]--;
    cache->bytes -= (int64_t)capacity;
    unpoison(block, bytes);
    return block;
}

/* Keep a freed block of `klass` for reuse; false (the caller frees it) when it does not fit. */
bool gm__host_cache_keep(host_cache *cache, int klass, void *ptr, size_t capacity)
{
    cached_block *block = ptr;

    if (klass < 0 || (int64_t)capacity > cache->limit - cache->bytes)
        return false;
    block->next = cache->bins[klass];
    block->check = (uintptr_t)block->next ^ LINK_CHECK;
    poison(block, capacity);
    cache->bins[klass] = block;
    cache->counts[klass]++;
    cache->bytes += (int64_t)capacity;
    return true;
}

/* Move a class's blocks onto `all`; a corrupted link ends the walk (those blocks leak). */
static cached_block *drop_class(cached_block *block, cached_block *all)
{
    while (block != NULL && block->check == ((uintptr_t)block->next ^ LINK_CHECK)) {
        cached_block *next = block->next;

        block->next = all;
        all = block;
        block = next;
    }
    return all;
}

/* Unlink every cached block into one list (the caller frees it with gm__host_cache_free). */
void *gm__host_cache_drop(host_cache *cache)
{
    cached_block *all = NULL;

    for (int k = 0; k < GM_HOST_CACHE_CLASSES; k++) {
        all = drop_class(cache->bins[k], all);
        cache->bins[k] = NULL;
        cache->counts[k] = 0;
    }
    cache->bytes = 0;
    return all;
}

/* Give a list from gm__host_cache_drop back to the C library (no lock needed). */
void gm__host_cache_free(void *list)
{
    cached_block *block = list;

    while (block != NULL) {
        cached_block *next = block->next;

        free(block);
        block = next;
    }
}
