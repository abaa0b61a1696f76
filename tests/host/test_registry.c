/*
 * The host backend's registry of regions (src/host/host_registry.c, a
 * treap with a hash index): random inserts and removals checked, step by
 * step, against a plain sorted array (exact find, lower bound, floor, first,
 * in-order walk both ways, count), node reuse through the spare list and
 * freeing under the leak checker; then the backend with thousands of live
 * allocations at once, where every pointer query must still find the right
 * allocation. The hinted floor (the copy checks' lookup) against the plain
 * one on regions that never overlap.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gm_test.h"

#include "backend.h"
#include "../../src/host/host_backend.h"

enum { KEYS = 4096, STEPS = 20000 };

/* The reference: the bases present, sorted. */
typedef struct ref_set {
    uintptr_t base[KEYS];
    int n;
} ref_set;

static int ref_find(const ref_set *s, uintptr_t b)
{
    for (int i = 0; i < s->n; i++)
        if (s->base[i] == b)
            return i;
    return -1;
}

static void ref_insert(ref_set *s, uintptr_t b)
{
    int i = s->n;

    while (i > 0 && s->base[i - 1] > b) {
        s->base[i] = s->base[i - 1];
        i--;
    }
    s->base[i] = b;
    s->n++;
}

static void ref_remove(ref_set *s, int i)
{
    memmove(&s->base[i], &s->base[i + 1], (size_t)(s->n - i - 1) * sizeof s->base[0]);
    s->n--;
}

/* The registry holds exactly the reference's bases, in order, both ways. */
static void check_same(host_registry *reg, const ref_set *s)
{
    host_region *r = gm__host_registry_first(reg);
    int i = 0;

    assert_int_equal(reg->count, s->n);
    for (; r != NULL; r = gm__host_registry_next(r), i++) {
        assert_true(i < s->n);
        assert_true(r->base == s->base[i]);
        assert_ptr_equal(gm__host_registry_find(reg, r->base), r); /* the index has it */
        assert_true(r->bytes == (size_t)(s->base[i] / 16));        /* what insert stored */
    }
    assert_int_equal(i, s->n);
    if (s->n > 0) {
        r = gm__host_registry_lower_bound(reg, s->base[s->n - 1]);
        for (i = s->n - 1; r != NULL; r = gm__host_registry_prev(r), i--)
            assert_true(r->base == s->base[i]);
        assert_int_equal(i, -1);
    }
}

/* The tree's shape: parent links, search order, heap order of priorities; returns the depth. */
static int check_node(const host_node *n, const host_node *parent, uintptr_t lo, uintptr_t hi)
{
    int left = 0, right = 0;

    if (n == NULL)
        return 0;
    assert_ptr_equal(n->parent, parent);
    assert_true(n->region.base >= lo && n->region.base <= hi);
    if (parent != NULL)
        assert_true(n->priority <= parent->priority);
    left = check_node(n->left, n, lo, n->region.base);
    right = check_node(n->right, n, n->region.base, hi);
    return 1 + (left > right ? left : right);
}

/* The shape is a treap's, and no deeper than a balanced tree's few times over. */
static void check_shape(const host_registry *reg)
{
    int depth = check_node(reg->root, NULL, 0, UINTPTR_MAX);
    int bound = 8;

    for (size_t n = reg->count; n > 1; n /= 2)
        bound += 4; /* 4 log2(n) + 8: a treap's expected depth is about 3 log2(n) */
    assert_true(depth <= bound);
}

/* find, lower_bound and floor of one probe against the reference. */
static void check_probe(host_registry *reg, const ref_set *s, uintptr_t probe)
{
    host_region *lb = gm__host_registry_lower_bound(reg, probe);
    host_region *fl = gm__host_registry_floor(reg, probe);
    host_region *at = gm__host_registry_find(reg, probe);
    int i = 0;

    if (ref_find(s, probe) >= 0)
        assert_true(at != NULL && at->base == probe);
    else
        assert_null(at);

    while (i < s->n && s->base[i] < probe)
        i++;
    if (i == s->n)
        assert_null(lb);
    else
        assert_true(lb != NULL && lb->base == s->base[i]);
    if (i < s->n && s->base[i] == probe)
        assert_true(fl != NULL && fl->base == probe);
    else if (i == 0)
        assert_null(fl);
    else
        assert_true(fl != NULL && fl->base == s->base[i - 1]);
}

/* The next value of a xorshift64 sequence (x != 0). */
static uint64_t xorshift(uint64_t x)
{
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

/* Insert a region at b (b / 16 bytes) into the registry and into the reference. */
static void add_key(host_registry *reg, ref_set *s, uintptr_t b)
{
    host_region r = {0};

    r.base = b;
    r.bytes = b / 16;
    assert_non_null(gm__host_registry_insert(reg, &r));
    ref_insert(s, b);
}

static void test_registry_matches_sorted_array(void **state)
{
    host_registry reg = {0};
    ref_set *s = test_calloc(1, sizeof *s);
    uint64_t x = 0x243f6a8885a308d3ull;

    (void)state;
    for (int step = 0; step < STEPS; step++) {
        uintptr_t b = 0;
        int at = 0;

        x = xorshift(x);
        b = (uintptr_t)(x % (KEYS * 4)) * 16 + 16; /* keys collide often */
        at = ref_find(s, b);
        if (at >= 0 && (x >> 40) % 3 != 0) {
            gm__host_registry_remove(&reg, gm__host_registry_lower_bound(&reg, b));
            ref_remove(s, at);
        } else if (at < 0 && s->n < KEYS) {
            add_key(&reg, s, b);
        }
        check_probe(&reg, s, b);
        check_probe(&reg, s, b + 1);
        check_probe(&reg, s, b - 1);
        if (step % 997 == 0) {
            check_same(&reg, s);
            check_shape(&reg);
        }
    }
    check_same(&reg, s);
    /* Empty it in order, then refill: nodes come back from the spare list. */
    while (s->n > 0) {
        gm__host_registry_remove(&reg, gm__host_registry_first(&reg));
        ref_remove(s, 0);
    }
    check_same(&reg, s);
    assert_null(gm__host_registry_first(&reg));
    assert_non_null(reg.spare);
    for (uintptr_t b = 16; b < 16 * 200; b += 16)
        add_key(&reg, s, b);
    check_same(&reg, s);
    gm__host_registry_free(&reg); /* the leak checker sees every node go */
    assert_null(reg.root);
    assert_null(reg.spare);
    test_free(s);
}

/* Ascending and descending inserts (the orders a naive tree degenerates on). */
static void test_registry_sorted_inserts(void **state)
{
    host_registry reg = {0};
    ref_set *s = test_calloc(1, sizeof *s);

    (void)state;
    for (int dir = 0; dir < 2; dir++) {
        for (int i = 0; i < KEYS; i++)
            add_key(&reg, s, (uintptr_t)(dir == 0 ? i + 1 : KEYS - i) * 64);
        check_same(&reg, s);
        check_shape(&reg); /* sorted inserts: a plain search tree would be a list */
        for (int i = 0; i < KEYS; i += 2) {
            uintptr_t b = (uintptr_t)(i + 1) * 64;

            gm__host_registry_remove(&reg, gm__host_registry_lower_bound(&reg, b));
            ref_remove(s, ref_find(s, b));
        }
        check_same(&reg, s);
        while (s->n > 0) {
            gm__host_registry_remove(&reg, gm__host_registry_lower_bound(&reg, s->base[0]));
            ref_remove(s, 0);
        }
    }
    gm__host_registry_free(&reg);
    test_free(s);
}

/*
 * The hash index under clustering: bases that are multiples of large powers
 * of two, dense runs and removals from the middle of probe runs, checked
 * against the reference after each step; then emptied (the index is empty
 * but kept) and refilled.
 */
static void test_registry_index_clusters(void **state)
{
    host_registry reg = {0};
    ref_set *s = test_calloc(1, sizeof *s);
    uint64_t x = 0x6a09e667f3bcc909ull;

    (void)state;
    for (int step = 0; step < STEPS; step++) {
        uintptr_t b = 0;
        int at = 0;

        x = xorshift(x);
        b = (uintptr_t)((x % 64) + 1) << (8 + (x >> 32) % 16); /* few distinct high bits */
        if ((x >> 60) == 0)
            b = (uintptr_t)(x % 512 + 1) * 16; /* a dense run */
        at = ref_find(s, b);
        if (at >= 0) {
            gm__host_registry_remove(&reg, gm__host_registry_find(&reg, b));
            ref_remove(s, at);
        } else if (s->n < KEYS) {
            add_key(&reg, s, b);
        }
        check_probe(&reg, s, b);
        if (step % 499 == 0)
            check_same(&reg, s);
    }
    check_same(&reg, s);
    while (s->n > 0) {
        gm__host_registry_remove(&reg, gm__host_registry_find(&reg, s->base[s->n - 1]));
        ref_remove(s, s->n - 1);
    }
    check_same(&reg, s);
    for (uintptr_t b = 0; b < 64 * 256; b += 256)
        assert_null(gm__host_registry_find(&reg, b));
    gm__host_registry_free(&reg);
    test_free(s);
}

/*
 * gm__host_registry_floor_hinted on regions that never overlap (the
 * backend's invariant; here [slot * 64, + 1..64) in slots of 64 bytes): the
 * same region as gm__host_registry_floor, step by step, through random
 * inserts, removals (whose nodes come back as other regions), sizes changed
 * in place, and probes that repeat (hits of either hint), wander or fall in
 * gaps.
 */
static void test_registry_floor_hinted(void **state)
{
    host_registry reg = {0};
    uint64_t x = 0xb7e151628aed2a6bull;
    uintptr_t recent[4] = {64, 64, 64, 64};

    (void)state;
    for (int step = 0; step < STEPS; step++) {
        uintptr_t b = 0, probes[5];
        host_region *at = NULL;

        x = xorshift(x);
        b = (uintptr_t)(x % 512 + 1) * 64;
        at = gm__host_registry_find(&reg, b);
        if (at != NULL && (x >> 40) % 3 == 0) {
            gm__host_registry_remove(&reg, at);
        } else if (at != NULL && (x >> 40) % 3 == 1) {
            at->bytes = 1 + (x >> 20) % 64;
        } else if (at == NULL) {
            host_region r = {0};

            r.base = b;
            r.bytes = 1 + (x >> 20) % 64;
            assert_non_null(gm__host_registry_insert(&reg, &r));
        }
        probes[0] = b;
        probes[1] = b + (x >> 8) % 64;
        probes[2] = recent[(x >> 50) % 4] + (x >> 12) % 70;
        probes[3] = recent[(x >> 54) % 4];
        probes[4] = b - 1;
        for (int i = 0; i < 5; i++)
            assert_ptr_equal(gm__host_registry_floor_hinted(&reg, probes[i]),
                             gm__host_registry_floor(&reg, probes[i]));
        recent[step % 4] = b;
    }
    gm__host_registry_free(&reg);
    assert_null(reg.hint[0]);
    assert_null(reg.hint[1]);
}

/* Thousands of live device allocations: every pointer query still right, frees in any order. */
static void test_backend_many_live_allocations(void **state)
{
    enum { N = 3000 };
    const gm_backend_ops *ops = &gm__host_backend;
    gm_backend_init_args args = {0, 0};
    gm_backend_ctx *c = NULL;
    gm_devptr *p = test_calloc(N, sizeof *p);
    uint64_t x = 0x9e3779b97f4a7c15ull;

    (void)state;
    assert_ok(ops->init(&args, &c));
    for (int i = 0; i < N; i++)
        assert_ok(ops->mem_alloc(c, (size_t)(64 + (i % 7) * 300), &p[i]));
    for (int i = 0; i < N; i++) {
        int kind = -1;
        size_t last = (size_t)(64 + (i % 7) * 300) - 1;

        assert_ok(ops->pointer_kind(c, (const void *)(uintptr_t)p[i], &kind));
        assert_int_equal(kind, GM_MEMORY_DEVICE);
        assert_ok(ops->pointer_kind(c, (const void *)(uintptr_t)(p[i] + last), &kind));
        assert_int_equal(kind, GM_MEMORY_DEVICE);
        /* An interior pointer is not the start of an allocation. */
        assert_status(ops->mem_free(c, p[i] + 1), GM_ERR_INVALID_ARG);
    }
    /* Free in a shuffled order; a freed pointer is no longer device memory. */
    for (int i = N - 1; i > 0; i--) {
        int j = 0;
        gm_devptr t = 0;

        x = xorshift(x);
        j = (int)(x % (uint64_t)(i + 1));
        t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    for (int i = 0; i < N; i++) {
        int kind = -1;

        assert_ok(ops->mem_free(c, p[i]));
        assert_status(ops->mem_free(c, p[i]), GM_ERR_INVALID_ARG);
        assert_ok(ops->pointer_kind(c, (const void *)(uintptr_t)p[i], &kind));
        assert_int_equal(kind, GM_MEMORY_HOST);
        if (i + 1 < N) {
            assert_ok(ops->pointer_kind(c, (const void *)(uintptr_t)p[i + 1], &kind));
            assert_int_equal(kind, GM_MEMORY_DEVICE);
        }
    }
    ops->fini(c);
    test_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_matches_sorted_array),
        cmocka_unit_test(test_registry_sorted_inserts),
        cmocka_unit_test(test_registry_index_clusters),
        cmocka_unit_test(test_registry_floor_hinted),
        cmocka_unit_test(test_backend_many_live_allocations),
    };

    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
