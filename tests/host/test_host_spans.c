/*
 * The process's record of pinned, mapped and registered host memory over
 * every host context (src/host/host_spans.c), with thousands of spans at
 * once, through the backend's ops table: registrations of two contexts laid
 * out side by side (adjacent, with gaps, a few many pages long), made and
 * undone in random order, each probed at its edges from both contexts after
 * every phase against a model of what is live; the page locks of ranges
 * sharing pages, counted in VmLck after every registration and release; and
 * threads of four contexts racing for the same bytes.
 *
 * The record is one ordered structure searched by range: a lookup that
 * misses a span (the first or last byte of one, one starting pages before
 * the address, one just moved by a rebalancing) shows here as a refusal that
 * does not come or a pointer kind that is wrong. The random order is fixed
 * (a seeded generator), so a failure repeats.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gm_test.h"

#include "backend.h"
#include "../../src/host/host_backend.h"

#define OPS (&gm__host_backend)

/* A context; its pages are not locked when `mlock` is false (GM_HOST_MLOCK=0). */
static gm_backend_ctx *ctx_new(bool mlock)
{
    gm_backend_init_args args = {0, 0};
    gm_backend_ctx *c = NULL;

    if (!mlock)
        setenv(GM_HOST_MLOCK_ENV, "0", 1);
    assert_ok(OPS->init(&args, &c));
    unsetenv(GM_HOST_MLOCK_ENV);
    assert_non_null(c);
    return c;
}

/* A fixed pseudo-random sequence (xorshift64*): a number in [0, n). */
static uint64_t rand_state;

static size_t rand_below(size_t n)
{
    uint64_t x = rand_state;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rand_state = x;
    return (size_t)((x * 0x2545f4914f6cdd1dull) >> 33) % n;
}

/* order[] = 0 .. n - 1 in a random order. */
static void shuffle(size_t *order, size_t n)
{
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = rand_below(i), t = order[i - 1];

        order[i - 1] = order[j];
        order[j] = t;
    }
}

/* A registration of the model: [off, off + len) of the mapping, by context `owner`. */
typedef struct model_span {
    size_t off, len;
    size_t gap; /* the free bytes before it (none: it starts where the one before ends) */
    int owner;
    unsigned flags; /* GM_HOST_PORTABLE, GM_HOST_MAPPED */
    bool live;
} model_span;

typedef struct world {
    unsigned char *mem;
    size_t size;
    model_span *spans; /* in address order, disjoint */
    size_t n;
    gm_backend_ctx *ctx[2];
} world;

/* The index of the last model span starting at or before byte `off`, or w->n if none. */
static size_t model_floor(const world *w, size_t off)
{
    size_t lo = 0, hi = w->n; /* the first span starting past off is in [lo, hi] */

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (w->spans[mid].off <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? w->n : lo - 1;
}

/* The live model span holding byte `off` of the mapping, or NULL. */
static const model_span *model_at(const world *w, size_t off)
{
    size_t i = model_floor(w, off);

    if (i == w->n || !w->spans[i].live || off >= w->spans[i].off + w->spans[i].len)
        return NULL;
    return &w->spans[i];
}

/* How many live model spans of context k (*mine) and of the other (*theirs) meet [off, +len). */
static void model_meets(const world *w, int k, size_t off, size_t len, int *mine, int *theirs)
{
    size_t i = model_floor(w, off);

    *mine = *theirs = 0;
    for (i = i == w->n ? 0 : i; i < w->n && w->spans[i].off < off + len; i++) {
        const model_span *s = &w->spans[i];

        if (s->live && off < s->off + s->len)
            ++*(s->owner == k ? mine : theirs);
    }
}

/* The kind context k sees at byte `off`: its own span's, another's portable one's, else host. */
static int model_kind(const world *w, int k, size_t off)
{
    const model_span *s = model_at(w, off);

    if (s == NULL || (s->owner != k && (s->flags & GM_HOST_PORTABLE) == 0))
        return GM_MEMORY_HOST;
    return (s->flags & GM_HOST_MAPPED) != 0 ? GM_MEMORY_MAPPED : GM_MEMORY_PINNED;
}

/*
 * Registering [off, off + len) in context k: refused by k's own registry
 * (GM_ERR_STATE, "already registered") when one of its spans meets it, else
 * by the record ("another context") when another's does, else it works and
 * is undone at once. A sweep's first pass (`refusals`) makes only the
 * refused ones, which change nothing, so that they find the record as the
 * registrations and releases before left it; its second pass makes the
 * others. `at` names the probe in a failure.
 */
static void probe_register(const world *w, bool refusals, int k, size_t off, size_t len,
                           const char *at)
{
    int mine = 0, theirs = 0;
    gm_status s = GM_OK;

    model_meets(w, k, off, len, &mine, &theirs);
    if (refusals != (mine > 0 || theirs > 0))
        return;
    s = OPS->host_register(w->ctx[k], w->mem + off, len, 0);
    if (refusals) {
        if (s != GM_ERR_STATE)
            fail_msg("context %d registering [%zu, +%zu) (%s): %s, not GM_ERR_STATE", k, off, len,
                     at, gm_status_name(s));
        if (mine == 0)
            assert_message_contains("overlaps memory another context registered or allocated");
        else
            assert_message_contains("overlaps memory already registered or allocated by this "
                                    "context");
    } else {
        if (s != GM_OK)
            fail_msg("context %d registering free [%zu, +%zu) (%s): %s (%s)", k, off, len, at,
                     gm_status_name(s), gm_last_error_message());
        assert_ok(OPS->host_unregister(w->ctx[k], w->mem + off));
    }
}

/* Both contexts' pointer kind at byte `off` (first pass), and a one-byte registration there. */
static void probe_byte(const world *w, bool refusals, size_t off, const char *at)
{
    for (int k = 0; k < 2; k++) {
        int kind = -1;

        if (refusals)
            assert_ok(OPS->pointer_kind(w->ctx[k], w->mem + off, &kind));
        if (refusals && kind != model_kind(w, k, off))
            fail_msg("context %d: pointer kind %d at byte %zu (%s), expected %d", k, kind, off, at,
                     model_kind(w, k, off));
        probe_register(w, refusals, k, off, 1, at);
    }
}

/*
 * Every span at its edges: its first, middle and last bytes, the bytes just
 * before and after it; the gap before it exactly (free: it works, adjacent on
 * both sides) and the gap with one byte more on either side; and the span
 * itself from the context that does not own it. Two passes: see probe_register.
 */
static void sweep(const world *w)
{
    for (size_t step = 0; step < 2 * w->n; step++) {
        bool refusals = step < w->n;
        const model_span *s = &w->spans[step % w->n];

        probe_byte(w, refusals, s->off, "first byte");
        probe_byte(w, refusals, s->off + s->len / 2, "middle byte");
        probe_byte(w, refusals, s->off + s->len - 1, "last byte");
        probe_byte(w, refusals, s->off - 1, "byte before");
        probe_byte(w, refusals, s->off + s->len, "byte after");
        if (s->gap > 0) {
            for (int k = 0; k < 2; k++) {
                probe_register(w, refusals, k, s->off - s->gap, s->gap, "the gap before");
                probe_register(w, refusals, k, s->off - s->gap, s->gap + 1,
                               "the gap and first byte");
                probe_register(w, refusals, k, s->off - s->gap - 1, s->gap + 1,
                               "the gap and the byte before it");
            }
        }
        probe_register(w, refusals, 1 - s->owner, s->off, s->len, "the whole span, other context");
    }
}

/* Register span i of the model in its owner context (it must work) and mark it live. */
static void model_register(world *w, size_t i)
{
    model_span *s = &w->spans[i];
    gm_status st = OPS->host_register(w->ctx[s->owner], w->mem + s->off, s->len, s->flags);

    if (st != GM_OK)
        fail_msg("span %zu [%zu, +%zu) of context %d: %s (%s)", i, s->off, s->len, s->owner,
                 gm_status_name(st), gm_last_error_message());
    s->live = true;
}

static void model_unregister(world *w, size_t i)
{
    model_span *s = &w->spans[i];

    assert_true(s->live);
    assert_ok(OPS->host_unregister(w->ctx[s->owner], w->mem + s->off));
    s->live = false;
}

/*
 * 3,000 registrations of two contexts, adjacent (different contexts' ranges
 * may touch) or with gaps (some starting on a page boundary, some pages
 * apart), one in 40 several pages long, registered in
 * random order; a third released in random order, those re-registered by
 * the other context; then the rest released in random order. Every phase
 * ends with a sweep of every edge from both contexts against the model.
 */
static void test_many_spans_random_order(void **state)
{
    const size_t n = 3000;
    size_t ps = (size_t)sysconf(_SC_PAGESIZE), cursor = ps, locked = 0;
    world w = {0};
    size_t *order = calloc(n, sizeof(*order));
    long base = gm_test_vmlck_kb();

    (void)state;
    rand_state = 0x5eed5eed12345678ull;
    assert_non_null(order);
    w.spans = calloc(n, sizeof(*w.spans));
    assert_non_null(w.spans);
    w.n = n;
    for (size_t i = 0; i < n; i++) {
        model_span *s = &w.spans[i];

        switch (rand_below(6)) {
        case 0: /* on the next page boundary, or pages past it */
            s->gap = (ps - cursor % ps) % ps + rand_below(3) * ps;
            break;
        case 1: /* up to two pages on */
            s->gap = 1 + rand_below(2 * ps);
            break;
        case 2:
        case 3: /* a few bytes on */
            s->gap = 1 + rand_below(300);
            break;
        default: /* adjacent */
            s->gap = 0;
        }
        s->len =
            rand_below(40) == 0 ? (2 + rand_below(10)) * ps + rand_below(ps) : 1 + rand_below(300);
        s->off = cursor + s->gap;
        s->owner = (int)rand_below(2);
        s->flags =
            (rand_below(4) == 0 ? GM_HOST_PORTABLE : 0) | (rand_below(2) == 0 ? GM_HOST_MAPPED : 0);
        cursor = s->off + s->len;
    }
    w.size = (cursor + 2 * ps) & ~(ps - 1);
    w.mem = mmap(NULL, w.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(w.mem != MAP_FAILED);
    /*
     * Context 0 locks its pages (as far as RLIMIT_MEMLOCK lets it; ASan makes
     * mlock a no-op), context 1 does not: a span that turns out unlocked has its
     * path in the record recomputed, which would hide a claim that left it wrong.
     */
    w.ctx[0] = ctx_new(true);
    w.ctx[1] = ctx_new(false);

    shuffle(order, n);
    for (size_t i = 0; i < n; i++)
        model_register(&w, order[i]);
    for (size_t i = 0; i < n; i++)
        locked += w.spans[i].owner == 0 && gm__host_is_locked(w.ctx[0], w.mem + w.spans[i].off);
    print_message("%zu ranges in %zu kB, %zu of context 0's locked\n", n, w.size / 1024, locked);
    sweep(&w);

    shuffle(order, n);
    for (size_t i = 0; i < n / 3; i++)
        model_unregister(&w, order[i]);
    sweep(&w);
    for (size_t i = 0; i < n / 3; i++) { /* the other context's now */
        w.spans[order[i]].owner = 1 - w.spans[order[i]].owner;
        model_register(&w, order[i]);
    }
    sweep(&w);

    shuffle(order, n);
    for (size_t i = 0; i < n; i++) {
        model_unregister(&w, order[i]);
        if (i == n / 2)
            sweep(&w);
    }
    sweep(&w);
    /* nothing left of either: the whole mapping is free to each, and no page locked */
    if (base >= 0)
        assert_int_equal(gm_test_vmlck_kb(), base);
    for (int k = 0; k < 2; k++) {
        assert_ok(OPS->host_register(w.ctx[k], w.mem, w.size, 0));
        assert_ok(OPS->host_unregister(w.ctx[k], w.mem));
    }
    OPS->fini(w.ctx[1]);
    OPS->fini(w.ctx[0]);
    assert_int_equal(munmap(w.mem, w.size), 0);
    free(w.spans);
    free(order);
}

/*
 * Ranges of three contexts packed into a few pages, many pages shared by two
 * or three of them; contexts 0 and 1 lock their pages, context 2 does not
 * (GM_HOST_MLOCK=0: its spans keep no page locked for the others). Two
 * thousand unlocked spans of context 2 elsewhere make the record deep.
 * Registered in random order, then released in random order: after each
 * step VmLck is exactly the pages that a live range of context 0 or 1
 * touches.
 */
static void test_shared_pages_locked_while_any_span(void **state)
{
    enum { PAGES = 24, EXTRA = 2000, MAX_RANGES = 400 };
    size_t ps = (size_t)sysconf(_SC_PAGESIZE), nr = 0, cursor = 0;
    size_t extra_size = ((size_t)EXTRA * 64 + ps - 1) & ~(ps - 1);
    size_t off[MAX_RANGES], len[MAX_RANGES], order[MAX_RANGES];
    int owner[MAX_RANGES];
    bool live[MAX_RANGES] = {false};
    gm_backend_ctx *ctx[3];
    unsigned char *mem = NULL, *extra = NULL;
    long base = gm_test_vmlck_kb();
    bool usable = false;

    (void)state;
    rand_state = 0x0ddba11cafef00dull;
    mem = mmap(NULL, PAGES * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    extra = mmap(NULL, extra_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(mem != MAP_FAILED && extra != MAP_FAILED);
    ctx[0] = ctx_new(true);
    ctx[1] = ctx_new(true);
    ctx[2] = ctx_new(false);
    /* mlock works here (not a no-op as under ASan, nor refused)? */
    assert_ok(OPS->host_register(ctx[0], mem, 1, 0));
    usable = base >= 0 && gm__host_is_locked(ctx[0], mem) && gm_test_vmlck_kb() > base;
    assert_ok(OPS->host_unregister(ctx[0], mem));
    if (!usable) {
        for (int k = 2; k >= 0; k--)
            OPS->fini(ctx[k]);
        munmap(extra, extra_size);
        munmap(mem, PAGES * ps);
        skip();
    }
    assert_int_equal(gm_test_vmlck_kb(), base);
    for (size_t i = 0; i < EXTRA; i++)
        assert_ok(OPS->host_register(ctx[2], extra + i * 64, 1 + rand_below(63), 0));
    assert_int_equal(gm_test_vmlck_kb(), base);

    /* 1 .. 2 pages long, 0 .. 99 bytes apart: most pages hold two or three ranges */
    while (nr < MAX_RANGES) {
        size_t gap = rand_below(2) == 0 ? 0 : rand_below(100), l = 1 + rand_below(2 * ps);

        if (cursor + gap + l > PAGES * ps)
            break;
        off[nr] = cursor + gap;
        len[nr] = l;
        owner[nr] = (int)rand_below(3);
        cursor = off[nr] + l;
        nr++;
    }
    assert_true(nr > 10);
    for (int phase = 0; phase < 2; phase++) {
        shuffle(order, nr);
        for (size_t step = 0; step < nr; step++) {
            size_t i = order[step];
            long want = 0;

            if (phase == 0)
                assert_ok(OPS->host_register(ctx[owner[i]], mem + off[i], len[i], 0));
            else
                assert_ok(OPS->host_unregister(ctx[owner[i]], mem + off[i]));
            live[i] = phase == 0;
            for (size_t p = 0; p < PAGES; p++) {
                bool locked = false;

                for (size_t j = 0; j < nr && !locked; j++)
                    locked = live[j] && owner[j] != 2 && off[j] < (p + 1) * ps &&
                             p * ps < off[j] + len[j];
                want += locked ? (long)(ps / 1024) : 0;
            }
            if (gm_test_vmlck_kb() - base != want)
                fail_msg("%s range %zu [%zu, +%zu) of context %d (step %zu): %ld kB locked, "
                         "expected %ld",
                         phase == 0 ? "after registering" : "after releasing", i, off[i], len[i],
                         owner[i], step, gm_test_vmlck_kb() - base, want);
        }
    }
    for (size_t i = 0; i < EXTRA; i++)
        assert_ok(OPS->host_unregister(ctx[2], extra + i * 64));
    assert_int_equal(gm_test_vmlck_kb(), base);
    for (int k = 2; k >= 0; k--)
        OPS->fini(ctx[k]);
    assert_int_equal(munmap(extra, extra_size), 0);
    assert_int_equal(munmap(mem, PAGES * ps), 0);
}

/* A thread of its own context registering random ranges of a small shared mapping. */
typedef struct racer {
    gm_backend_ctx *ctx;
    unsigned char *mem;
    _Atomic unsigned char *holder; /* per byte of mem: 0, or the id of the racer holding it */
    size_t size;
    unsigned char id; /* 1 .. */
    uint64_t seed;
    long granted, refused;
    char failure[200];
} racer;

static void *race(void *arg)
{
    racer *r = arg;

    for (int round = 0; round < 2000 && r->failure[0] == '\0'; round++) {
        size_t len = 0, off = 0;
        gm_status s = GM_OK;

        r->seed ^= r->seed >> 12; /* xorshift64*, the racer's own */
        r->seed ^= r->seed << 25;
        r->seed ^= r->seed >> 27;
        len = 1 + (size_t)((r->seed * 0x2545f4914f6cdd1dull) >> 33) % 1500;
        off = (size_t)((r->seed * 0x2545f4914f6cdd1dull) >> 11) % (r->size - len);
        s = OPS->host_register(r->ctx, r->mem + off, len, 0);
        if (s == GM_ERR_STATE) {
            r->refused++;
            continue;
        }
        if (s != GM_OK) {
            snprintf(r->failure, sizeof r->failure, "racer %d: [%zu, +%zu): %s (%s)", r->id, off,
                     len, gm_status_name(s), gm_last_error_message());
            break;
        }
        r->granted++;
        /* no other context may hold any of these bytes while this one does */
        for (size_t b = off; b < off + len; b++) {
            unsigned char none = 0;

            if (!atomic_compare_exchange_strong(&r->holder[b], &none, r->id)) {
                snprintf(r->failure, sizeof r->failure,
                         "racer %d registered [%zu, +%zu), but byte %zu is racer %d's", r->id, off,
                         len, b, none);
                len = b - off;
                break;
            }
        }
        for (size_t b = off; b < off + len; b++)
            atomic_store(&r->holder[b], 0);
        s = OPS->host_unregister(r->ctx, r->mem + off);
        if (s != GM_OK && r->failure[0] == '\0')
            snprintf(r->failure, sizeof r->failure, "racer %d: unregistering [%zu, +%zu): %s",
                     r->id, off, len, gm_status_name(s));
    }
    return NULL;
}

/*
 * Four contexts' threads register and unregister random ranges of 16 KiB at
 * once, the record's tree changing under each claim: a registration granted
 * while another context holds a byte of it shows as two holders of one
 * byte. (The library's own allocator for this test: cmocka's is not
 * thread-safe.)
 */
static void test_racing_contexts(void **state)
{
    enum { RACERS = 4 };
    size_t size = 16384;
    unsigned char *mem =
        mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    _Atomic unsigned char *holder = calloc(size, 1);
    racer r[RACERS];
    pthread_t t[RACERS];
    long granted = 0, refused = 0;

    (void)state;
    assert_true(mem != MAP_FAILED);
    assert_non_null(holder);
    assert_ok(gm_set_host_allocator(NULL));
    memset(r, 0, sizeof(r));
    for (int k = 0; k < RACERS; k++) {
        r[k].ctx = ctx_new(k == 0); /* one locks its pages, one at a time */
        r[k].mem = mem;
        r[k].holder = holder;
        r[k].size = size;
        r[k].id = (unsigned char)(k + 1);
        r[k].seed = 0x9e3779b97f4a7c15ull * (uint64_t)(k + 1);
    }
    for (int k = 0; k < RACERS; k++)
        assert_int_equal(pthread_create(&t[k], NULL, race, &r[k]), 0);
    for (int k = 0; k < RACERS; k++)
        assert_int_equal(pthread_join(t[k], NULL), 0);
    for (int k = 0; k < RACERS; k++) {
        if (r[k].failure[0] != '\0')
            fail_msg("%s", r[k].failure);
        granted += r[k].granted;
        refused += r[k].refused;
        OPS->fini(r[k].ctx);
    }
    assert_ok(gm_test_use_cmocka_allocator(NULL));
    print_message("%ld registrations granted, %ld refused\n", granted, refused);
    assert_true(granted > 0);
    free((void *)holder);
    assert_int_equal(munmap(mem, size), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_spans_random_order),
        cmocka_unit_test(test_shared_pages_locked_while_any_span),
        cmocka_unit_test(test_racing_contexts),
    };

    unsetenv(GM_HOST_DEVICE_MEMORY_ENV);
    unsetenv(GM_HOST_PINNED_MEMORY_ENV);
    unsetenv(GM_HOST_DEVICE_CACHE_ENV);
    unsetenv(GM_HOST_MLOCK_ENV);
    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
