/*
 * The host backend's cache of freed device memory and the registry together
 * (src/host/host_cache.c, host_registry.c, host_backend.c): a cached block
 * stays in the registry as a cached region, and every user of the registry
 * must treat it as freed memory. Checked through the ops (pointer_kind, copy
 * and memset checks, mem_free / host_free / host_unregister /
 * host_device_pointer of it, host_register over it and over a live block's
 * tail), through the cache's own operations (reuse makes the region live
 * again, an out-of-memory retry drops the cached regions from the registry)
 * and by a randomized run of allocations, frees, reuses and registrations
 * against a reference, with the registry's and the cache's invariants
 * checked after every step: regions in address order with disjoint ranges,
 * the hash index finding every region, each cached region on its class's
 * list (in the order the regions were cached, by their stamps, ending at
 * the class's tail) and nothing overlapping its whole block, the cache's
 * counts and bytes. The eviction policy (a freed block that does not fit
 * under GM_HOST_DEVICE_CACHE evicts the least recently cached blocks, of
 * any class; one larger than the bound is not cached and evicts nothing) is
 * checked on named cases, against the longest-suffix rule under several
 * small bounds, and by the randomized run, whose reference models the
 * cache: its blocks in the order they were cached.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gm_sanitizer.h"
#include "gm_test.h"

#include "backend.h"
#include "../../src/host/host_backend.h"

#define OPS (&gm__host_backend)

#if defined(GM_TEST_ASAN) /* its poisoning can be asked */
#include <sanitizer/asan_interface.h>
#endif

/* ------------------------------------------------------------ helpers */

/* A context with default settings (the environment variables unset). */
static gm_backend_ctx *ctx_new(void)
{
    gm_backend_init_args args = {0, 0};
    gm_backend_ctx *c = NULL;

    assert_ok(OPS->init(&args, &c));
    assert_non_null(c);
    return c;
}

/* A context whose cache holds at most `limit` (GM_HOST_DEVICE_CACHE syntax; NULL: the default). */
static gm_backend_ctx *ctx_with_cache(const char *limit)
{
    gm_backend_ctx *c = NULL;

    if (limit != NULL)
        setenv(GM_HOST_DEVICE_CACHE_ENV, limit, 1);
    c = ctx_new();
    unsetenv(GM_HOST_DEVICE_CACHE_ENV);
    return c;
}

/* The capacity of the block a device allocation of `bytes` gets, and its class (-1: uncached). */
static size_t block_capacity(size_t bytes, int *klass_p)
{
    size_t capacity = 0;
    int klass = gm__host_cache_class((bytes + 255) & ~(size_t)255, &capacity);

    if (klass_p != NULL)
        *klass_p = klass;
    return capacity;
}

/* The kind pointer_kind reports for addr. */
static int kind_of(gm_backend_ctx *c, uintptr_t addr)
{
    int kind = -1;

    assert_ok(OPS->pointer_kind(c, (const void *)addr, &kind));
    return kind;
}

/* The region the registry holds at exactly base (live or cached), or NULL. */
static host_region *region_at(gm_backend_ctx *c, uintptr_t base)
{
    host_ctx *hc = gm__host_ctx(c);
    host_region *r = NULL;

    gm__lock_take(&hc->mem_lock);
    r = gm__host_registry_find(&hc->registry, base);
    gm__lock_give(&hc->mem_lock);
    return r;
}

/* Cached regions in the cache's lists. */
static int64_t cached_count(gm_backend_ctx *c)
{
    host_ctx *hc = gm__host_ctx(c);
    int64_t n = 0;

    for (int k = 0; k < GM_HOST_CACHE_CLASSES; k++)
        n += hc->cache.counts[k];
    return n;
}

/*
 * The registry's and the cache's invariants: regions in address order with
 * disjoint [base, base + bytes); the hash index finds each; a cached region
 * is an unregistered, unlocked device-kind region of a class whose list
 * holds it, and nothing overlaps its whole block; each list is consistent
 * both ways, ends at its class's tail and is in the order its regions were
 * cached (their stamps decreasing); the cache's counts and bytes are its
 * lists'. Returns the number of live regions.
 */
static size_t check_consistent(gm_backend_ctx *c)
{
    host_ctx *hc = gm__host_ctx(c);
    host_registry *reg = &hc->registry;
    host_region *prev = NULL;
    size_t n = 0, cached = 0;
    int64_t bytes = 0;

    gm__lock_take(&hc->mem_lock);
    for (host_region *r = gm__host_registry_first(reg); r != NULL;
         r = gm__host_registry_next(r), n++) {
        assert_ptr_equal(gm__host_registry_find(reg, r->base), r);
        assert_true(r->bytes > 0);
        if (prev != NULL) {
            assert_true(prev->base + prev->bytes <= r->base);
            if (!gm__host_region_live(prev))
                assert_true(prev->base + prev->capacity <= r->base);
        }
        if (!gm__host_region_live(r)) {
            assert_int_equal(r->state, HOST_REGION_CACHED);
            assert_true(r->kind == GM_MEMORY_DEVICE || r->kind == GM_MEMORY_MANAGED);
            assert_false(r->registered);
            assert_false(r->locked);
            assert_true(r->klass >= 0 && r->klass < GM_HOST_CACHE_CLASSES);
            assert_true(r->bytes <= r->capacity);
            cached++;
        }
        prev = r;
    }
    assert_int_equal(n, reg->count);
    for (int k = 0; k < GM_HOST_CACHE_CLASSES; k++) {
        int64_t in_list = 0;
        host_region *back = NULL;

        for (host_region *r = hc->cache.bins[k]; r != NULL; back = r, r = r->cache_next) {
            assert_ptr_equal(r->cache_prev, back);
            assert_int_equal(r->state, HOST_REGION_CACHED);
            assert_int_equal(r->klass, k);
            assert_ptr_equal(gm__host_registry_find(reg, r->base), r);
            /* Stamped by the cache's clock, newest first. */
            assert_true(r->cached_at >= 1 && r->cached_at <= hc->cache.clock);
            if (back != NULL)
                assert_true(r->cached_at < back->cached_at);
            bytes += (int64_t)r->capacity;
            in_list++;
        }
        assert_ptr_equal(hc->cache.tails[k], back);
        assert_int_equal(in_list, hc->cache.counts[k]);
    }
    assert_int_equal(bytes, hc->cache.bytes);
    assert_true(bytes <= hc->cache.limit);
    assert_int_equal((int64_t)cached, cached_count(c));
    gm__lock_give(&hc->mem_lock);
    return n - cached;
}

static int by_cached_at(const void *a, const void *b)
{
    const host_region *x = *(host_region *const *)a, *y = *(host_region *const *)b;

    return x->cached_at < y->cached_at ? -1 : x->cached_at > y->cached_at;
}

/*
 * The cached regions in the order they were cached, least recently first
 * (the order eviction follows), with distinct stamps; at most `max` (a test
 * failure if more), mem_lock held by the caller. Returns their number.
 */
static size_t cache_order(host_ctx *hc, host_region **out, size_t max)
{
    size_t n = 0;

    for (int k = 0; k < GM_HOST_CACHE_CLASSES; k++)
        for (host_region *r = hc->cache.bins[k]; r != NULL; r = r->cache_next) {
            assert_true(n < max);
            out[n++] = r;
        }
    qsort(out, n, sizeof out[0], by_cached_at);
    for (size_t i = 1; i < n; i++)
        assert_true(out[i - 1]->cached_at < out[i]->cached_at);
    return n;
}

/*
 * The cache holds exactly the blocks at newest[0 .. n), most recently cached
 * first (the cache-wide order), and their capacities' sum.
 */
static void expect_cache(gm_backend_ctx *c, const uintptr_t *newest, size_t n)
{
    host_ctx *hc = gm__host_ctx(c);
    host_region *order[256];
    int64_t bytes = 0;
    size_t held = 0;

    check_consistent(c);
    gm__lock_take(&hc->mem_lock);
    held = cache_order(hc, order, sizeof order / sizeof order[0]);
    assert_int_equal(held, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(order[n - 1 - i]->base, newest[i]);
        bytes += (int64_t)order[n - 1 - i]->capacity;
    }
    assert_int_equal(hc->cache.bytes, bytes);
    gm__lock_give(&hc->mem_lock);
}

/* A freed block the cache evicted (or never took): out of the registry, unknown to pointer_kind. */
static void expect_gone(gm_backend_ctx *c, uintptr_t base)
{
    assert_null(region_at(c, base));
    assert_int_equal(kind_of(c, base), GM_MEMORY_HOST);
    assert_int_equal(kind_of(c, base + 255), GM_MEMORY_HOST);
}

/* A 1-D byte copy descriptor. */
static gm_copy_desc byte_copy(gm_copy_side dside, gm_devptr dst, gm_copy_side sside, gm_devptr src,
                              size_t bytes)
{
    gm_copy_desc d = {dside, sside, dst, src, bytes, 1, 1, bytes, 1, bytes, 1};

    return d;
}

/* -------------------------------------------------- cached = freed memory */

/*
 * A freed, cached block is in the registry (cached), yet every op treats it
 * as freed memory; reused, it is live again, for its new size and kind.
 */
/*
 * Under ASan the bytes past a request are poisoned up to the block's size
 * class (new and reused blocks) or page (pinned), so an off-by-one access
 * is reported; caching a block smaller than its check words works.
 */
static void test_asan_poisons_past_request(void **state)
{
#if defined(GM_TEST_ASAN)
    gm_backend_ctx *c = ctx_new();
    gm_devptr a = 0, b = 0;
    void *pinned = NULL;
    unsigned char *p = NULL;

    (void)state;
    assert_ok(OPS->mem_alloc(c, 100, &a)); /* a new block of the 256-byte class */
    p = (unsigned char *)(uintptr_t)a;
    assert_false(__asan_address_is_poisoned(p + 99));
    assert_true(__asan_address_is_poisoned(p + 100));
    assert_true(__asan_address_is_poisoned(p + 255));
    assert_ok(OPS->mem_free(c, a));
    assert_ok(OPS->mem_alloc(c, 8, &b)); /* the same block, reused */
    assert_int_equal(b, a);
    assert_false(__asan_address_is_poisoned(p + 7));
    assert_true(__asan_address_is_poisoned(p + 8));
    assert_true(__asan_address_is_poisoned(p + 99));
    assert_ok(OPS->mem_free(c, b)); /* its check words lie past the 8 bytes */
    assert_ok(OPS->mem_alloc(c, 200, &b));
    assert_int_equal(b, a);
    assert_false(__asan_address_is_poisoned(p + 199));
    assert_true(__asan_address_is_poisoned(p + 200));
    assert_ok(OPS->mem_free(c, b));
    assert_ok(OPS->host_alloc(c, 100, 0, &pinned));
    p = pinned;
    assert_false(__asan_address_is_poisoned(p + 99));
    assert_true(__asan_address_is_poisoned(p + 100));
    assert_ok(OPS->host_free(c, pinned));
    assert_int_equal(check_consistent(c), 0);
    OPS->fini(c);
#else
    (void)state;
    skip(); /* nothing is poisoned without AddressSanitizer */
#endif
}

static void test_cached_block_is_freed_memory(void **state)
{
    gm_backend_ctx *c = ctx_new();
    unsigned char host[64] = {0}, byte = 7;
    int64_t shape[1] = {64};
    gm_devptr a = 0, b = 0, dp = 0;
    gm_copy_desc d;
    gm_ndview dv, hv;
    int64_t free_b = 0, total = 0;
    host_region *r = NULL;

    (void)state;
    assert_ok(OPS->mem_alloc(c, 3000, &a));
    assert_ok(OPS->mem_free(c, a));
    r = region_at(c, a);
    assert_non_null(r); /* kept in the registry... */
    assert_int_equal(r->state, HOST_REGION_CACHED);
    assert_int_equal(cached_count(c), 1);
    /* ...but it is not memory of the context. */
    assert_int_equal(kind_of(c, a), GM_MEMORY_HOST);
    assert_int_equal(kind_of(c, a + 100), GM_MEMORY_HOST);
    assert_int_equal(kind_of(c, a + 2999), GM_MEMORY_HOST);
    assert_false(gm__host_is_locked(c, (const void *)(uintptr_t)a));
    d = byte_copy(GM_COPY_DEVICE, a, GM_COPY_HOST, (gm_devptr)(uintptr_t)host, 64);
    assert_status(OPS->copy(c, &d, NULL), GM_ERR_INVALID_ARG);
    d = byte_copy(GM_COPY_HOST, (gm_devptr)(uintptr_t)host, GM_COPY_DEVICE, a + 64, 64);
    assert_status(OPS->copy(c, &d, NULL), GM_ERR_INVALID_ARG);
    assert_status(OPS->memset(c, a, &byte, 1, 16, NULL), GM_ERR_INVALID_ARG);
    assert_ok(gm_ndview_init((void *)(uintptr_t)a, GM_UINT8, 1, shape, NULL, GM_ORDER_C, &dv));
    dv.memory = GM_MEMORY_DEVICE;
    dv.device_id = 0;
    assert_ok(gm_ndview_init(host, GM_UINT8, 1, shape, NULL, GM_ORDER_C, &hv));
    assert_status(OPS->copy_strided(c, &dv, &hv, NULL), GM_ERR_INVALID_ARG);
    assert_status(OPS->mem_free(c, a), GM_ERR_INVALID_ARG); /* a double free */
    assert_message_contains("not the start of a live device allocation");
    assert_status(OPS->host_free(c, (void *)(uintptr_t)a), GM_ERR_INVALID_ARG);
    assert_status(OPS->host_unregister(c, (void *)(uintptr_t)a), GM_ERR_INVALID_ARG);
    assert_status(OPS->host_device_pointer(c, (void *)(uintptr_t)a, &dp), GM_ERR_INVALID_ARG);
    assert_ok(OPS->mem_info(c, &free_b, &total));
    assert_int_equal(free_b, total);
    assert_int_equal(check_consistent(c), 0);

    /* Reused (3000 and 2900 both take 3072 bytes): live again, as managed memory now. */
    assert_ok(OPS->managed_alloc(c, 2900, &b));
    assert_int_equal(b, a);
    assert_ptr_equal(region_at(c, b), r); /* the same region, flipped back */
    assert_int_equal(r->state, HOST_REGION_LIVE);
    assert_int_equal(r->bytes, 2900);
    assert_int_equal(cached_count(c), 0);
    assert_int_equal(kind_of(c, b + 2899), GM_MEMORY_MANAGED);
    assert_int_not_equal(kind_of(c, b + 2900), GM_MEMORY_MANAGED);
    assert_ok(OPS->memset(c, b, &byte, 1, 2900, NULL));
    d = byte_copy(GM_COPY_HOST, (gm_devptr)(uintptr_t)host, GM_COPY_DEVICE, b + 64, 64);
    assert_ok(OPS->copy(c, &d, NULL));
    assert_int_equal(host[63], 7);
    assert_status(OPS->host_free(c, (void *)(uintptr_t)b), GM_ERR_INVALID_ARG);
    assert_ok(OPS->mem_info(c, &free_b, &total));
    assert_int_equal(free_b, total - 3072);
    assert_int_equal(check_consistent(c), 1);
    assert_ok(OPS->mem_free(c, b));
    assert_int_equal(check_consistent(c), 0);
    OPS->fini(c); /* frees the cached block once (ASan would see a second free) */
}

/*
 * host_register over freed device memory (a dangling device pointer) works
 * as if the block were not there, and evicts it from the cache and the
 * registry; a registration in the tail of a live block (past its bytes,
 * inside its capacity) keeps that block out of the cache when it is freed.
 */
static void test_register_over_cached_block(void **state)
{
    gm_backend_ctx *c = ctx_new();
    host_ctx *hc = gm__host_ctx(c);
    gm_devptr a = 0, b = 0, t = 0;

    (void)state;
    /* Inside a cached block, not at its start. */
    assert_ok(OPS->mem_alloc(c, 8192, &a));
    assert_ok(OPS->mem_alloc(c, 8192, &b));
    assert_ok(OPS->mem_free(c, a));
    assert_ok(OPS->mem_free(c, b));
    assert_int_equal(cached_count(c), 2);
    assert_ok(OPS->host_register(c, (void *)(uintptr_t)(a + 512), 1024, 0));
    assert_int_equal(kind_of(c, a + 512), GM_MEMORY_PINNED);
    assert_int_equal(kind_of(c, a + 1535), GM_MEMORY_PINNED);
    assert_int_equal(kind_of(c, a), GM_MEMORY_HOST);
    assert_null(region_at(c, a)); /* evicted */
    assert_int_equal(cached_count(c), 1);
    assert_non_null(region_at(c, b)); /* the other block is still cached */
    assert_int_equal(check_consistent(c), 1);
    /* Registering it again overlaps the live registration, not a cached block. */
    assert_status(OPS->host_register(c, (void *)(uintptr_t)(a + 1000), 100, 0), GM_ERR_STATE);
    assert_ok(OPS->host_unregister(c, (void *)(uintptr_t)(a + 512)));
    assert_int_equal(check_consistent(c), 0);

    /* At the start of a cached block, and past its end (a whole range of blocks). */
    assert_ok(OPS->host_register(c, (void *)(uintptr_t)b, 8192 + 4096, GM_HOST_MAPPED));
    assert_int_equal(kind_of(c, b), GM_MEMORY_MAPPED);
    assert_int_equal(cached_count(c), 0);
    assert_int_equal(hc->cache.bytes, 0);
    assert_int_equal(check_consistent(c), 1);
    assert_ok(OPS->host_unregister(c, (void *)(uintptr_t)b));

    /*
     * The tail of a block: 4100 bytes charge 4352, in a class of 5120-byte
     * blocks. A registration past the first 4100 bytes is allowed (it is not
     * what the user sees), but that block then never goes to the cache.
     */
    assert_ok(OPS->mem_alloc(c, 4100, &t));
    assert_true(region_at(c, t)->capacity > 4352);
    assert_ok(OPS->host_register(c, (void *)(uintptr_t)(t + 4352), 256, 0));
    assert_int_equal(kind_of(c, t + 4352), GM_MEMORY_PINNED);
    assert_int_equal(kind_of(c, t + 4099), GM_MEMORY_DEVICE);
    assert_int_equal(check_consistent(c), 2);
    assert_ok(OPS->mem_free(c, t));
    assert_null(region_at(c, t)); /* released, not cached */
    assert_int_equal(cached_count(c), 0);
    assert_int_equal(kind_of(c, t + 4352), GM_MEMORY_PINNED);
    assert_int_equal(check_consistent(c), 1);
    assert_ok(OPS->host_unregister(c, (void *)(uintptr_t)(t + 4352)));

    /* The tail of a cached block: evicted like the rest of it. */
    assert_ok(OPS->mem_alloc(c, 4100, &t));
    assert_ok(OPS->mem_free(c, t));
    assert_int_equal(cached_count(c), 1);
    assert_ok(OPS->host_register(c, (void *)(uintptr_t)(t + 4352), 256, 0));
    assert_int_equal(cached_count(c), 0);
    assert_null(region_at(c, t));
    assert_int_equal(check_consistent(c), 1);
    assert_ok(OPS->host_unregister(c, (void *)(uintptr_t)(t + 4352)));
    assert_int_equal(check_consistent(c), 0);
    OPS->fini(c);
}

/*
 * A registration left over freed memory (a user error: here freed device
 * memory, evicted and given back to the C library) that a new block then
 * lands on: the block works, but is released, not cached, when freed, since
 * a cached block must overlap nothing. Skipped when the C library puts the
 * new block elsewhere every time: the blocks are large enough for glibc to
 * mmap them (past its largest mmap threshold), so that the kernel hands the
 * unmapped range out again; ASan's allocator keeps freed memory apart.
 */
static void test_block_under_stale_registration_not_cached(void **state)
{
    enum { BIG = 48 << 20 }; /* a cache class of its own: 48 MiB */
    gm_backend_ctx *c = ctx_new();
    bool hit = false;

    (void)state;
    for (int attempt = 0; attempt < 16 && !hit; attempt++) {
        gm_devptr a = 0, b = 0;
        uintptr_t reg = 0;

        assert_ok(OPS->mem_alloc(c, BIG, &a));
        assert_ok(OPS->mem_free(c, a));
        reg = (uintptr_t)a + 64;
        assert_ok(OPS->host_register(c, (void *)reg, 128, 0)); /* evicts a's block */
        assert_ok(OPS->mem_alloc(c, BIG, &b));
        hit = b <= reg && reg - b < BIG;
        if (hit) {
            assert_int_equal(kind_of(c, b), GM_MEMORY_DEVICE);
            assert_ok(OPS->mem_free(c, b));
            assert_null(region_at(c, b)); /* released */
            assert_int_equal(cached_count(c), 0);
        }
        assert_ok(OPS->host_unregister(c, (void *)reg));
        if (!hit)
            assert_ok(OPS->mem_free(c, b));
        assert_int_equal(check_consistent(c), 0);
    }
    OPS->fini(c);
    if (!hit)
        skip();
}

/*
 * Two registrations share a page with a 256-byte device block between them,
 * live (a region with no lock range) or freed (cached): unregistering one
 * must keep the page locked for the other. The search for another locker
 * once stopped at the device region and unlocked the page; a cached block
 * must be passed over as if it were not there.
 */
static void page_walk_across_block(bool freed)
{
    gm_backend_ctx *c = ctx_new();
    uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
    gm_devptr d[64] = {0};
    uintptr_t dev = 0, page = 0;
    long base = 0;
    int n = 0;

    /* A 256-byte device block with room in its page on both sides. */
    for (n = 0; n < 64 && dev == 0; n++) {
        uintptr_t off = 0;

        assert_ok(OPS->mem_alloc(c, 256, &d[n]));
        off = (uintptr_t)d[n] & (ps - 1);
        if (off >= 256 && off + 512 <= ps)
            dev = (uintptr_t)d[n];
    }
    if (dev == 0) {
        OPS->fini(c);
        skip();
    }
    for (int i = 0; i < n; i++) /* the others go first: they may share the page */
        if ((uintptr_t)d[i] != dev)
            assert_ok(OPS->mem_free(c, d[i]));
    if (freed)
        assert_ok(OPS->mem_free(c, dev));
    page = dev & ~(ps - 1);
    base = gm_test_vmlck_kb();
    /* Either side of the block (other cached blocks in the page are evicted). */
    assert_ok(OPS->host_register(c, (void *)page, (size_t)(dev - page), 0));
    assert_ok(OPS->host_register(c, (void *)(dev + 256), (size_t)(page + ps - dev - 256), 0));
    assert_int_equal(region_at(c, dev)->state, freed ? HOST_REGION_CACHED : HOST_REGION_LIVE);
    assert_int_equal(kind_of(c, dev), freed ? GM_MEMORY_HOST : GM_MEMORY_DEVICE);
    assert_int_equal(check_consistent(c), freed ? 2 : 3);
    if (!gm__host_is_locked(c, (void *)page) || base < 0 || gm_test_vmlck_kb() == base) {
        OPS->fini(c); /* not locked, no VmLck, or mlock is a no-op (ASan intercepts it) */
        skip();
    }
    assert_int_equal(gm_test_vmlck_kb() - base, (long)(ps / 1024));
    assert_ok(OPS->host_unregister(c, (void *)(dev + 256)));
    assert_int_equal(gm_test_vmlck_kb() - base, (long)(ps / 1024)); /* still locked for the first */
    assert_ok(OPS->host_unregister(c, (void *)page));
    assert_int_equal(gm_test_vmlck_kb() - base, 0);
    assert_int_equal(check_consistent(c), freed ? 0 : 1);
    OPS->fini(c);
}

static void test_page_lock_walk_skips_cached(void **state)
{
    (void)state;
    page_walk_across_block(true);
}

static void test_register_shared_page_across_device_region(void **state)
{
    (void)state;
    page_walk_across_block(false);
}

/* gm__host_cache_drop (the out-of-memory retry) takes every cached region out of the registry. */
static void test_cache_drop_removes_regions(void **state)
{
    enum { N = 40 };
    gm_backend_ctx *c = ctx_new();
    host_ctx *hc = gm__host_ctx(c);
    gm_devptr p[N] = {0}, live = 0, q = 0;
    void *list = NULL;

    (void)state;
    assert_ok(OPS->mem_alloc(c, 700, &live));
    for (int i = 0; i < N; i++)
        assert_ok(OPS->mem_alloc(c, (size_t)(256 + 977 * i), &p[i]));
    for (int i = 0; i < N; i++)
        assert_ok(OPS->mem_free(c, p[i]));
    assert_int_equal(cached_count(c), N);
    assert_int_equal(hc->registry.count, N + 1);
    gm__lock_take(&hc->mem_lock);
    list = gm__host_cache_drop(&hc->cache, &hc->registry);
    gm__lock_give(&hc->mem_lock);
    assert_non_null(list);
    gm__host_cache_free(list); /* ASan: each block freed once, here and not at fini */
    assert_int_equal(cached_count(c), 0);
    assert_int_equal(hc->cache.bytes, 0);
    assert_int_equal(hc->registry.count, 1);
    assert_int_equal(check_consistent(c), 1);
    for (int i = 0; i < N; i++) {
        assert_null(region_at(c, p[i]));
        assert_int_equal(kind_of(c, p[i]), GM_MEMORY_HOST);
    }
    assert_int_equal(kind_of(c, live + 699), GM_MEMORY_DEVICE);
    /* The cache works on afterwards. */
    assert_ok(OPS->mem_alloc(c, 4096, &q));
    assert_ok(OPS->mem_free(c, q));
    assert_int_equal(cached_count(c), 1);
    assert_ok(OPS->mem_free(c, live));
    assert_int_equal(check_consistent(c), 0);
    OPS->fini(c);
}

/*
 * The real out-of-memory retry: with a huge simulated device, an allocation
 * the C library cannot serve drops the cache (its regions leave the
 * registry) and fails with the same error as before. Not under a sanitizer,
 * whose allocator aborts on such a request instead of returning NULL.
 */
static void test_host_oom_drops_cached_regions(void **state)
{
#if defined(GM_TEST_SANITIZER) /* its allocator aborts on a request it cannot serve */
    (void)state;
    skip();
#else
    gm_backend_ctx *c = NULL;
    gm_devptr p[4] = {0}, x = 0;
    int64_t free_b = 0, total = 0;

    (void)state;
    setenv(GM_HOST_DEVICE_MEMORY_ENV, "1048576T", 1); /* 2^60 bytes */
    c = ctx_new();
    unsetenv(GM_HOST_DEVICE_MEMORY_ENV);
    for (int i = 0; i < 4; i++)
        assert_ok(OPS->mem_alloc(c, 1000, &p[i]));
    for (int i = 0; i < 4; i++)
        assert_ok(OPS->mem_free(c, p[i]));
    assert_int_equal(cached_count(c), 4);
    assert_status(OPS->mem_alloc(c, (size_t)1 << 58, &x), GM_ERR_OUT_OF_DEVICE_MEMORY);
    assert_message_contains("exhausted");
    assert_int_equal(cached_count(c), 0);
    assert_int_equal(gm__host_ctx(c)->registry.count, 0);
    for (int i = 0; i < 4; i++)
        assert_null(region_at(c, p[i]));
    assert_ok(OPS->mem_info(c, &free_b, &total));
    assert_int_equal(free_b, total);
    assert_int_equal(check_consistent(c), 0);
    OPS->fini(c);
#endif
}

/* A write into a cached block's first words: logged, that block discarded, the rest intact. */
static char error_seen[512];

static void capture_error(gm_log_level level, const char *message, void *user)
{
    (void)user;
    if (level == GM_LOG_ERROR)
        snprintf(error_seen, sizeof error_seen, "%s", message);
}

static void test_write_after_free_discards_one_block(void **state)
{
    gm_backend_ctx *c = ctx_new();
    gm_devptr a = 0, b = 0, x = 0, y = 0, z = 0;

    (void)state;
    assert_ok(OPS->mem_alloc(c, 2048, &a));
    assert_ok(OPS->mem_alloc(c, 2048, &b));
    assert_ok(OPS->mem_free(c, a));
    assert_ok(OPS->mem_free(c, b)); /* b is taken first */
    gm_set_log_hook(capture_error, NULL);
    error_seen[0] = '\0';
    memset((void *)(uintptr_t)b, 0, 8); /* the first check word */
    assert_ok(OPS->mem_alloc(c, 2048, &x));
    gm_set_log_hook(NULL, NULL);
    assert_non_null(strstr(error_seen, "written after mem_free"));
    /* b left the cache and the registry (x is a new block, which may be b's memory again). */
    assert_int_equal(region_at(c, x)->state, HOST_REGION_LIVE);
    if (x != b)
        assert_null(region_at(c, b));
    assert_int_equal(cached_count(c), 1);
    assert_ok(OPS->mem_alloc(c, 2048, &y)); /* a, still intact in the cache */
    assert_int_equal(y, a);
    assert_int_equal(check_consistent(c), 2);
    assert_ok(OPS->mem_alloc(c, 2048, &z));
    assert_ok(OPS->mem_free(c, x));
    assert_ok(OPS->mem_free(c, y));
    assert_ok(OPS->mem_free(c, z));
    OPS->fini(c);
}

/* ------------------------------------------------------------ eviction */

/*
 * A full cache (16 KiB of 4 KiB blocks) receiving a block of another class
 * evicts the least recently cached blocks, of any class, and only as many
 * as it must: they leave the registry and are freed memory; the rest stay
 * cached, in order, with exact bytes and counts. Reuse takes a block out of
 * the order, and freeing it again makes it the newest.
 */
static void test_full_cache_evicts_oldest(void **state)
{
    gm_backend_ctx *c = ctx_with_cache("16K");
    host_ctx *hc = gm__host_ctx(c);
    gm_devptr a[4] = {0}, x = 0, y = 0, b = 0, d = 0;
    int k4 = 0, k6 = 0, k3 = 0;

    (void)state;
    assert_int_equal(block_capacity(4096, &k4), 4096);
    assert_int_equal(block_capacity(6000, &k6), 6144);
    assert_int_equal(block_capacity(3000, &k3), 3072);
    for (int i = 0; i < 4; i++)
        assert_ok(OPS->mem_alloc(c, 4096, &a[i]));
    for (int i = 0; i < 4; i++)
        assert_ok(OPS->mem_free(c, a[i])); /* exactly full: nothing evicted */
    expect_cache(c, (const uintptr_t[]){a[3], a[2], a[1], a[0]}, 4);
    assert_int_equal(hc->cache.bytes, 16384);

    /* Reuse takes the newest of the class; an exact fit again evicts nothing. */
    assert_ok(OPS->mem_alloc(c, 4096, &x));
    assert_ok(OPS->mem_alloc(c, 4000, &y));
    assert_int_equal(x, a[3]);
    assert_int_equal(y, a[2]);
    expect_cache(c, (const uintptr_t[]){a[1], a[0]}, 2);
    assert_ok(OPS->mem_free(c, x)); /* a[3], then a[2]: the newest now */
    assert_ok(OPS->mem_free(c, y));
    expect_cache(c, (const uintptr_t[]){a[2], a[3], a[1], a[0]}, 4);
    assert_int_equal(hc->cache.counts[k4], 4);
    assert_int_equal(hc->registry.count, 4);

    /* 6 KiB of another class: the two oldest 4 KiB blocks make room. */
    assert_ok(OPS->mem_alloc(c, 6000, &b));
    assert_ok(OPS->mem_free(c, b));
    expect_cache(c, (const uintptr_t[]){b, a[2], a[3]}, 3);
    assert_int_equal(hc->cache.bytes, 2 * 4096 + 6144);
    assert_int_equal(hc->cache.counts[k4], 2);
    assert_int_equal(hc->cache.counts[k6], 1);
    assert_int_equal(hc->registry.count, 3);
    expect_gone(c, a[0]);
    expect_gone(c, a[1]);
    assert_int_equal(check_consistent(c), 0);

    /* 3 KiB, with 2 KiB free: the oldest goes, of a class neither new nor largest. */
    assert_ok(OPS->mem_alloc(c, 3000, &d));
    assert_ok(OPS->mem_free(c, d));
    expect_cache(c, (const uintptr_t[]){d, b, a[2]}, 3);
    assert_int_equal(hc->cache.bytes, 4096 + 6144 + 3072);
    assert_int_equal(hc->cache.counts[k4], 1);
    assert_int_equal(hc->cache.counts[k6], 1);
    assert_int_equal(hc->cache.counts[k3], 1);
    expect_gone(c, a[3]);

    /* Every survivor is still served from the cache. */
    assert_ok(OPS->mem_alloc(c, 4096, &x));
    assert_int_equal(x, a[2]);
    assert_ok(OPS->mem_alloc(c, 5500, &y));
    assert_int_equal(y, b);
    expect_cache(c, (const uintptr_t[]){d}, 1);
    assert_int_equal(check_consistent(c), 2);
    assert_ok(OPS->mem_free(c, x));
    assert_ok(OPS->mem_free(c, y));
    expect_cache(c, (const uintptr_t[]){b, a[2], d}, 3);
    OPS->fini(c); /* frees the three cached blocks once; the evicted ones were freed already */
}

/*
 * A block larger than the whole cache is freed at once and evicts nothing;
 * one of exactly its size evicts everything else; a block of no class (over
 * 64 MiB) is never cached either.
 */
static void test_block_larger_than_limit_not_cached(void **state)
{
    gm_backend_ctx *c = ctx_with_cache("16K");
    host_ctx *hc = gm__host_ctx(c);
    gm_devptr a[4] = {0}, big = 0, whole = 0, huge = 0, s = 0;
    int klass = 0;

    (void)state;
    assert_int_equal(block_capacity(16385, NULL), 20480);
    assert_int_equal(block_capacity(16384, NULL), 16384);
    for (int i = 0; i < 4; i++)
        assert_ok(OPS->mem_alloc(c, 4096, &a[i]));
    for (int i = 0; i < 4; i++)
        assert_ok(OPS->mem_free(c, a[i]));
    assert_ok(OPS->mem_alloc(c, 16385, &big));
    assert_int_equal(check_consistent(c), 1);
    assert_ok(OPS->mem_free(c, big));
    expect_gone(c, big);
    expect_cache(c, (const uintptr_t[]){a[3], a[2], a[1], a[0]}, 4);
    assert_int_equal(hc->cache.bytes, 16384);
    assert_int_equal(hc->registry.count, 4);

    assert_ok(OPS->mem_alloc(c, 16384, &whole));
    assert_ok(OPS->mem_free(c, whole));
    expect_cache(c, (const uintptr_t[]){whole}, 1);
    for (int i = 0; i < 4; i++)
        expect_gone(c, a[i]);
    assert_int_equal(hc->registry.count, 1);
    OPS->fini(c);

    /* The default bound; 64 MiB + 256 bytes has no class. */
    c = ctx_new();
    hc = gm__host_ctx(c);
    assert_ok(OPS->mem_alloc(c, 1000, &s));
    assert_ok(OPS->mem_free(c, s));
    assert_true(block_capacity(GM_HOST_CACHE_MAX_BLOCK + 256, &klass) > 0);
    assert_int_equal(klass, -1);
    assert_ok(OPS->mem_alloc(c, GM_HOST_CACHE_MAX_BLOCK + 256, &huge));
    assert_ok(OPS->mem_free(c, huge));
    expect_gone(c, huge);
    expect_cache(c, (const uintptr_t[]){s}, 1);
    OPS->fini(c);
}

/*
 * Under small bounds (one 256-byte block; 1000 bytes, no multiple of 256;
 * a few blocks; more), blocks of many sizes freed one after another: after
 * each free the cache holds the longest run of the most recently freed
 * cacheable blocks whose capacities fit the bound (what evicting the oldest
 * until the new block fits gives), blocks larger than the bound never. Then
 * the same sizes allocated again are served newest first per class.
 */
static void test_eviction_small_limits(void **state)
{
    enum { N = 64 };
    static const char *const limits[] = {"256", "1000", "4K", "20000", "64K"};
    static const int64_t limit_bytes[] = {256, 1000, 4096, 20000, 65536};
    static const size_t sizes[] = {1,    256,  300,  600,   1000,  3000,
                                   4096, 5000, 9000, 17000, 40000, 70000};
    uint64_t x = 0x9e3779b97f4a7c15ull;

    (void)state;
    for (size_t l = 0; l < sizeof limits / sizeof limits[0]; l++) {
        gm_backend_ctx *c = ctx_with_cache(limits[l]);
        host_ctx *hc = gm__host_ctx(c);
        gm_devptr p[N] = {0};
        size_t bytes[N] = {0}, cap[N] = {0};
        int order[N] = {0}, freed[N] = {0}, nfreed = 0, evictions = 0;
        uintptr_t want[N] = {0};
        size_t nwant = 0;

        assert_int_equal(hc->cache.limit, limit_bytes[l]);
        for (int i = 0; i < N; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bytes[i] = sizes[x % (sizeof sizes / sizeof sizes[0])];
            cap[i] = block_capacity(bytes[i], NULL);
            assert_ok(OPS->mem_alloc(c, bytes[i], &p[i]));
            order[i] = i;
        }
        for (int i = N - 1; i > 0; i--) { /* free in a shuffled order */
            int j = (int)((x >> 11) % (uint64_t)(i + 1)), t = order[i];

            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order[i] = order[j];
            order[j] = t;
        }
        for (int f = 0; f < N; f++) {
            int i = order[f];
            int64_t sum = 0;
            size_t before = nwant;

            assert_ok(OPS->mem_free(c, p[i]));
            if ((int64_t)cap[i] <= limit_bytes[l])
                freed[nfreed++] = i;
            /* The longest suffix of the cacheable frees that fits. */
            nwant = 0;
            for (int g = nfreed - 1; g >= 0 && sum + (int64_t)cap[freed[g]] <= limit_bytes[l];
                 g--) {
                sum += (int64_t)cap[freed[g]];
                want[nwant++] = (uintptr_t)p[freed[g]];
            }
            if ((int64_t)cap[i] <= limit_bytes[l] && nwant < before + 1)
                evictions += (int)(before + 1 - nwant);
            expect_cache(c, want, nwant);
            assert_int_equal(hc->cache.bytes, sum);
            assert_int_equal(hc->registry.count, (size_t)(N - f - 1) + nwant);
            if ((int64_t)cap[i] > limit_bytes[l])
                expect_gone(c, (uintptr_t)p[i]);
        }
        assert_true(evictions > 0);
        /* Allocated again: each class's newest cached block, else a new one. */
        for (int i = N - 1; i >= 0; i--) {
            int klass = 0, newest = -1;
            gm_devptr q = 0;

            block_capacity(bytes[i], &klass);
            for (size_t w = 0; w < nwant && newest < 0; w++) {
                host_region *r = region_at(c, want[w]);

                assert_non_null(r);
                if (r->klass == klass)
                    newest = (int)w;
            }
            assert_ok(OPS->mem_alloc(c, bytes[i], &q));
            if (newest >= 0) {
                assert_int_equal(q, want[newest]);
                memmove(&want[newest], &want[newest + 1],
                        (nwant - (size_t)newest - 1) * sizeof want[0]);
                nwant--;
            } else {
                for (size_t w = 0; w < nwant; w++)
                    assert_int_not_equal(q, want[w]);
            }
            p[i] = q;
            expect_cache(c, want, nwant);
        }
        assert_int_equal(nwant, 0);
        for (int i = 0; i < N; i++)
            assert_ok(OPS->mem_free(c, p[i]));
        check_consistent(c);
        OPS->fini(c);
    }
}

/* ---------------------------------------------- a randomized consistency run */

enum { SLOTS = 48, STEPS = 6000, ARENA = 64 * 1024, MODEL = 4096 };

/* One thing the run holds: a device / managed / pinned allocation or a registration. */
typedef struct held {
    uintptr_t base;
    size_t bytes;
    size_t capacity; /* device kinds: the block's */
    int klass;       /* device kinds: its cache class */
    int kind;        /* GM_MEMORY_*; 0: empty slot */
    bool registered;
    bool tail_shared; /* device kinds: a registration met its block's tail (never cached) */
} held;

/* A block the reference says is cached. */
typedef struct model_block {
    uintptr_t base;
    size_t capacity;
    int klass;
} model_block;

typedef struct run {
    gm_backend_ctx *c;
    held h[SLOTS];
    uintptr_t dead[256]; /* addresses of freed device blocks (maybe reused since) */
    int ndead;
    unsigned char *arena; /* user memory for registrations */
    uint64_t x;
    /* The reference cache: its blocks, least recently cached first, and their capacities' sum. */
    model_block cached[MODEL];
    int ncached;
    int64_t cached_bytes;
    int64_t limit;
    int64_t evictions; /* blocks evicted to make room, over the run */
    int64_t batched;   /* device blocks freed by mem_free_batch */
} run;

static uint64_t rnd(run *r)
{
    r->x ^= r->x << 13;
    r->x ^= r->x >> 7;
    r->x ^= r->x << 17;
    return r->x;
}

/* The kind the reference gives addr: the held range containing it, else host. */
static int ref_kind(const run *r, uintptr_t addr)
{
    for (int i = 0; i < SLOTS; i++)
        if (r->h[i].kind != 0 && addr - r->h[i].base < r->h[i].bytes)
            return r->h[i].kind;
    return GM_MEMORY_HOST;
}

/* Whether [base, base + bytes) meets a held range. */
/*
 * Whether [base, base + bytes) meets what a held slot holds: its bytes, or for
 * a pinned allocation its whole pages (page-rounded, locked and charged with
 * it). The heap may hand a freed device block's memory to a pinned
 * allocation, and a registration over the block's old address then meets the
 * pinned pages past the requested bytes: the simulator refuses it, rightly,
 * and a model that counted only the bytes said otherwise whenever the heap's
 * layout put a dead block there.
 */
static bool ref_overlaps(const run *r, uintptr_t base, size_t bytes)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);

    for (int i = 0; i < SLOTS; i++) {
        const held *h = &r->h[i];
        size_t held_bytes = h->kind == GM_MEMORY_PINNED && !h->registered
                                ? (h->bytes + ps - 1) / ps * ps
                                : h->bytes;

        if (h->kind != 0 && h->base < base + bytes && base < h->base + held_bytes)
            return true;
    }
    return false;
}

/* Whether the reference holds something (held or cached) at exactly base. */
static bool ref_has_base(const run *r, uintptr_t base)
{
    for (int i = 0; i < SLOTS; i++)
        if (r->h[i].kind != 0 && r->h[i].base == base)
            return true;
    for (int i = 0; i < r->ncached; i++)
        if (r->cached[i].base == base)
            return true;
    return false;
}

/* Drop the reference's cached block i (evicted or reused). */
static void model_remove(run *r, int i)
{
    r->cached_bytes -= (int64_t)r->cached[i].capacity;
    memmove(&r->cached[i], &r->cached[i + 1], (size_t)(r->ncached - i - 1) * sizeof r->cached[0]);
    r->ncached--;
}

/* The reference's mem_free of a device block: whether it is cached, evicting the oldest first. */
static bool model_keep(run *r, const held *h)
{
    if (h->klass < 0 || h->tail_shared || (int64_t)h->capacity > r->limit)
        return false;
    while ((int64_t)h->capacity > r->limit - r->cached_bytes) {
        uintptr_t gone = r->cached[0].base;

        assert_true(r->ncached > 0);
        model_remove(r, 0);
        r->evictions++;
        assert_null(region_at(r->c, gone)); /* out of the registry already (mem_free returned) */
    }
    assert_true(r->ncached < MODEL);
    r->cached[r->ncached].base = h->base;
    r->cached[r->ncached].capacity = h->capacity;
    r->cached[r->ncached].klass = h->klass;
    r->ncached++;
    r->cached_bytes += (int64_t)h->capacity;
    return true;
}

/* The reference's reuse: the newest cached block of klass, out of the cache; 0 when none. */
static uintptr_t model_take(run *r, int klass)
{
    for (int i = r->ncached - 1; i >= 0 && klass >= 0; i--)
        if (r->cached[i].klass == klass) {
            uintptr_t base = r->cached[i].base;

            model_remove(r, i);
            return base;
        }
    return 0;
}

/*
 * The reference's host_register of [base, base + bytes): the cached blocks
 * it meets are evicted; a held device block whose tail it meets is never
 * cached afterwards.
 */
static void model_register(run *r, uintptr_t base, size_t bytes)
{
    for (int i = r->ncached - 1; i >= 0; i--)
        if (r->cached[i].base < base + bytes && base < r->cached[i].base + r->cached[i].capacity)
            model_remove(r, i);
    for (int i = 0; i < SLOTS; i++) {
        held *h = &r->h[i];

        if ((h->kind == GM_MEMORY_DEVICE || h->kind == GM_MEMORY_MANAGED) && !h->registered &&
            h->base < base + bytes && base < h->base + h->capacity)
            h->tail_shared = true;
    }
}

/* The cache is the reference's: the same blocks in the same order, the same bytes. */
static void check_model(run *r)
{
    host_ctx *hc = gm__host_ctx(r->c);
    host_region *order[MODEL];
    size_t n = 0;

    gm__lock_take(&hc->mem_lock);
    n = cache_order(hc, order, MODEL);
    assert_int_equal(n, r->ncached);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(order[i]->base, r->cached[i].base);
        assert_int_equal(order[i]->capacity, r->cached[i].capacity);
        assert_int_equal(order[i]->klass, r->cached[i].klass);
    }
    assert_int_equal(hc->cache.bytes, r->cached_bytes);
    gm__lock_give(&hc->mem_lock);
}

/* Every held range and every dead address as the reference says; the invariants. */
static void check_run(run *r)
{
    size_t held_n = 0;
    int64_t charged = 0, free_b = 0, total = 0;

    for (int i = 0; i < SLOTS; i++) {
        const held *h = &r->h[i];

        if (h->kind == 0)
            continue;
        held_n++;
        assert_int_equal(kind_of(r->c, h->base), h->kind);
        assert_int_equal(kind_of(r->c, h->base + h->bytes - 1), h->kind);
        if (h->kind == GM_MEMORY_DEVICE || h->kind == GM_MEMORY_MANAGED)
            charged += (int64_t)((h->bytes + 255) & ~(size_t)255);
    }
    for (int i = 0; i < r->ndead; i++) {
        assert_int_equal(kind_of(r->c, r->dead[i]), ref_kind(r, r->dead[i]));
        assert_int_equal(kind_of(r->c, r->dead[i] + 17), ref_kind(r, r->dead[i] + 17));
        /* Evicted or never cached: out of the registry, unless held or cached again there. */
        if (region_at(r->c, r->dead[i]) != NULL)
            assert_true(ref_has_base(r, r->dead[i]));
    }
    assert_int_equal(check_consistent(r->c), held_n);
    check_model(r);
    assert_ok(OPS->mem_info(r->c, &free_b, &total));
    assert_int_equal(total - free_b, charged);
}

/* Remember a freed device block's address (the oldest forgotten when full). */
static void add_dead(run *r, uintptr_t base)
{
    if (r->ndead == (int)(sizeof r->dead / sizeof r->dead[0]))
        memmove(r->dead, r->dead + 1, sizeof r->dead - sizeof r->dead[0]);
    else
        r->ndead++;
    r->dead[r->ndead - 1] = base;
}

/* Allocate into empty slot i: device, managed or pinned, sizes in a few classes. */
static void step_alloc(run *r, int i)
{
    static const size_t sizes[] = {1, 200, 256, 1000, 3000, 4096, 4100, 9000, 70000};
    uint64_t v = rnd(r);
    size_t bytes = sizes[v % (sizeof sizes / sizeof sizes[0])] + (size_t)((v >> 8) % 3);
    gm_devptr p = 0;
    void *hp = NULL;
    held *h = &r->h[i];
    uintptr_t reused = 0;

    memset(h, 0, sizeof *h);
    h->capacity = block_capacity(bytes, &h->klass);
    switch ((v >> 16) % 8) {
    case 0:
        assert_ok(OPS->host_alloc(r->c, bytes, 0, &hp));
        h->base = (uintptr_t)hp;
        h->kind = GM_MEMORY_PINNED;
        break;
    case 1:
        reused = model_take(r, h->klass);
        assert_ok(OPS->managed_alloc(r->c, bytes, &p));
        h->base = (uintptr_t)p;
        h->kind = GM_MEMORY_MANAGED;
        break;
    default:
        reused = model_take(r, h->klass);
        assert_ok(OPS->mem_alloc(r->c, bytes, &p));
        h->base = (uintptr_t)p;
        h->kind = GM_MEMORY_DEVICE;
        break;
    }
    /* The newest cached block of the class, else a new block (no cached one). */
    if (reused != 0)
        assert_int_equal(h->base, reused);
    for (int k = 0; k < r->ncached; k++)
        assert_int_not_equal(h->base, r->cached[k].base);
    h->bytes = bytes;
    assert_int_equal(region_at(r->c, h->base)->state, HOST_REGION_LIVE);
}

/* Free slot i's allocation or registration, checking the double free is refused. */
static void step_free(run *r, int i)
{
    held *h = &r->h[i];

    if (h->registered) {
        assert_ok(OPS->host_unregister(r->c, (void *)h->base));
        assert_status(OPS->host_unregister(r->c, (void *)h->base), GM_ERR_INVALID_ARG);
    } else if (h->kind == GM_MEMORY_PINNED) {
        assert_ok(OPS->host_free(r->c, (void *)h->base));
        assert_status(OPS->host_free(r->c, (void *)h->base), GM_ERR_INVALID_ARG);
    } else {
        gm_devptr ptr = (gm_devptr)h->base;
        /* Half the frees go to the batch free first: it frees a device block the cache keeps,
         * exactly as mem_free would, and leaves anything else to mem_free. */
        size_t batched = (rnd(r) & 1) != 0 ? OPS->mem_free_batch(r->c, &ptr, 1) : 0;
        host_region *at = NULL;

        if (batched == 0)
            assert_ok(OPS->mem_free(r->c, ptr));
        assert_status(OPS->mem_free(r->c, ptr), GM_ERR_INVALID_ARG);
        at = region_at(r->c, h->base);
        if (model_keep(r, h)) {
            assert_non_null(at);
            assert_int_equal(at->state, HOST_REGION_CACHED);
        } else {
            assert_int_equal(batched, 0);
            assert_null(at);
        }
        if (batched != 0) {
            assert_int_equal(h->kind, GM_MEMORY_DEVICE);
            r->batched++;
        }
        add_dead(r, h->base);
    }
    h->kind = 0;
}

/*
 * Register into empty slot i: user memory of the arena, or (briefly, since
 * the block is then freed) a range over a freed device block or a live
 * block's tail; the outcome must be what the reference's overlaps say.
 */
/*
 * A pinned allocation holds its whole pages: registering bytes past its
 * request but inside its last page is GM_ERR_STATE (the random test's model
 * missed this, and failed whenever the heap put a freed block's address there).
 */
static void test_register_in_pinned_page_tail(void **state)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    gm_backend_ctx *c = ctx_new();
    void *p = NULL;

    (void)state;
    assert_ok(OPS->host_alloc(c, 257, 0, &p));
    assert_int_equal((uintptr_t)p % ps, 0);
    assert_status(OPS->host_register(c, (char *)p + 512, 100, 0), GM_ERR_STATE);
    assert_message_contains("overlaps memory already registered or allocated");
    assert_status(OPS->host_register(c, (char *)p + ps - 1, 1, 0), GM_ERR_STATE);
    assert_ok(OPS->host_free(c, p));
    OPS->fini(c);
}

/*
 * A context torn down with two registrations sharing a page unlocks it (each
 * saw the other locked, and neither unlocked it). Where mlock works (not
 * under ASan, whose mlock does nothing).
 */
static void test_fini_unlocks_shared_page(void **state)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *p = aligned_alloc(ps, ps);
    gm_backend_ctx *c = ctx_new();
    long before = gm_test_vmlck_kb();

    (void)state;
    assert_non_null(p);
    assert_ok(OPS->host_register(c, p, 100, 0));
    assert_ok(OPS->host_register(c, p + 200, 100, 0));
    if (before < 0 || gm_test_vmlck_kb() <= before) {
        OPS->fini(c);
        free(p);
        skip(); /* nothing was locked here */
    }
    OPS->fini(c);
    assert_int_equal(gm_test_vmlck_kb(), before);
    free(p);
}

/* Whether every page of [base, base + bytes) is mapped (a freed block may have gone back). */
static bool pages_mapped(uintptr_t base, size_t bytes)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = base & ~(uintptr_t)(ps - 1), hi = (base + bytes + ps - 1) & ~(uintptr_t)(ps - 1);
    unsigned char v[64];

    for (uintptr_t p = lo; p < hi; p += ps) {
        if (mincore((void *)p, ps, v) != 0)
            return false;
    }
    return true;
}

static void step_register(run *r, int i)
{
    uint64_t v = rnd(r);
    uintptr_t base = 0;
    size_t bytes = 1 + (size_t)((v >> 8) % 3000);
    bool brief = false;
    held *h = &r->h[i];
    gm_status expect = GM_OK, got = GM_OK;

    if ((v & 3) != 0 || r->ndead == 0) {
        base = (uintptr_t)r->arena + (uintptr_t)((v >> 24) % (ARENA - 3000));
    } else {
        base = r->dead[(v >> 24) % (uint64_t)r->ndead] + (uintptr_t)((v >> 40) % 512);
        brief = true;
    }
    expect = !pages_mapped(base, bytes)     ? GM_ERR_INVALID_ARG /* cuMemHostRegister: too */
             : ref_overlaps(r, base, bytes) ? GM_ERR_STATE
                                            : GM_OK;
    got = OPS->host_register(r->c, (void *)base, bytes, (v >> 4) & 1 ? GM_HOST_MAPPED : 0);
    assert_status(got, expect);
    if (got != GM_OK)
        return;
    model_register(r, base, bytes);
    memset(h, 0, sizeof *h);
    h->base = base;
    h->bytes = bytes;
    h->kind = (v >> 4) & 1 ? GM_MEMORY_MAPPED : GM_MEMORY_PINNED;
    h->registered = true;
    check_run(r);
    if (brief) /* its block may be freed memory now: let nothing be allocated over it */
        step_free(r, i);
}

/* STEPS random steps under a cache bound (NULL: the default); returns the evictions seen. */
static int64_t random_run(const char *limit, uint64_t seed)
{
    run *r = test_calloc(1, sizeof *r);
    int64_t evictions = 0;

    r->c = ctx_with_cache(limit);
    r->limit = gm__host_ctx(r->c)->cache.limit;
    r->x = seed;
    r->arena = malloc(ARENA);
    assert_non_null(r->arena);
    for (int step = 0; step < STEPS; step++) {
        uint64_t v = rnd(r);
        int i = (int)(v % SLOTS);

        if (r->h[i].kind != 0)
            step_free(r, i);
        else if ((v >> 32) % 5 == 0)
            step_register(r, i);
        else
            step_alloc(r, i);
        if (step % 7 == 0)
            check_run(r);
    }
    check_run(r);
    assert_true(cached_count(r->c) > 0);
    /* Free half, fini frees the rest (live and cached alike, each once). */
    for (int i = 0; i < SLOTS; i += 2)
        if (r->h[i].kind != 0)
            step_free(r, i);
    check_run(r);
    assert_true(r->limit == 0 || r->batched > 0);
    evictions = r->evictions;
    OPS->fini(r->c);
    free(r->arena);
    test_free(r);
    return evictions;
}

/*
 * mem_free_batch frees a run of live device blocks the cache keeps, under
 * one lock, and stops at the first pointer that is anything else (a pinned
 * block, an unknown address, a block the cache does not keep), leaving it
 * and the rest untouched; with the cache off it frees nothing.
 */
static void test_batch_free(void **state)
{
    gm_backend_ctx *c = ctx_new(), *off = ctx_with_cache("0");
    gm_devptr d[4], list[4];
    void *pinned = NULL;
    int64_t free_before = 0, free_after = 0, total = 0;

    (void)state;
    for (int i = 0; i < 4; i++)
        assert_ok(OPS->mem_alloc(c, 4096, &d[i]));
    assert_ok(OPS->host_alloc(c, 4096, 0, &pinned));
    assert_ok(OPS->mem_info(c, &free_before, &total));
    list[0] = d[0];
    list[1] = d[1];
    list[2] = (gm_devptr)(uintptr_t)pinned;
    list[3] = d[2];
    assert_int_equal(OPS->mem_free_batch(c, list, 4), 2);
    assert_int_equal(region_at(c, d[0])->state, HOST_REGION_CACHED);
    assert_int_equal(region_at(c, d[1])->state, HOST_REGION_CACHED);
    assert_int_equal(region_at(c, d[2])->state, HOST_REGION_LIVE);
    assert_ok(OPS->mem_info(c, &free_after, &total));
    assert_int_equal(free_after - free_before, 2 * 4096); /* uncharged as mem_free would */
    list[0] = d[1];                                       /* freed already: not live */
    assert_int_equal(OPS->mem_free_batch(c, list, 1), 0);
    list[0] = d[2] + 256; /* inside a block, not its start */
    assert_int_equal(OPS->mem_free_batch(c, list, 1), 0);
    list[0] = d[2];
    list[1] = d[3];
    assert_int_equal(OPS->mem_free_batch(c, list, 2), 2);
    assert_int_equal(OPS->mem_free_batch(c, list, 0), 0);
    assert_ok(OPS->host_free(c, pinned));
    OPS->fini(c);
    assert_ok(OPS->mem_alloc(off, 4096, &d[0]));
    assert_int_equal(OPS->mem_free_batch(off, d, 1), 0); /* nothing is cached: mem_free's work */
    assert_ok(OPS->mem_free(off, d[0]));
    OPS->fini(off);
}

/* The default bound (nothing evicted: the run's blocks take far less) and two small ones. */
static void test_random_alloc_free_register(void **state)
{
    (void)state;
    assert_int_equal(random_run(NULL, 0x2545f4914f6cdd1dull), 0);
    /* 64 KiB: the 70000-byte blocks (80 KiB) are never cached, the others evict. */
    assert_true(random_run("64K", 0x9e3779b97f4a7c15ull) > 100);
    assert_true(random_run("300K", 0xd1b54a32d192ed03ull) > 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cached_block_is_freed_memory),
        cmocka_unit_test(test_asan_poisons_past_request),
        cmocka_unit_test(test_register_in_pinned_page_tail),
        cmocka_unit_test(test_fini_unlocks_shared_page),
        cmocka_unit_test(test_register_over_cached_block),
        cmocka_unit_test(test_block_under_stale_registration_not_cached),
        cmocka_unit_test(test_page_lock_walk_skips_cached),
        cmocka_unit_test(test_register_shared_page_across_device_region),
        cmocka_unit_test(test_cache_drop_removes_regions),
        cmocka_unit_test(test_host_oom_drops_cached_regions),
        cmocka_unit_test(test_write_after_free_discards_one_block),
        cmocka_unit_test(test_full_cache_evicts_oldest),
        cmocka_unit_test(test_block_larger_than_limit_not_cached),
        cmocka_unit_test(test_eviction_small_limits),
        cmocka_unit_test(test_batch_free),
        cmocka_unit_test(test_random_alloc_free_register),
    };

    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
