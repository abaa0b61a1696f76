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
 * one unlock a page between another's claim and lock. The spans (one per
 * pinned or mapped allocation or registration) are under one mutex, taken
 * after a context's mem_lock, never before it, with only mlock/munlock
 * called under it.
 *
 * A program may hold many thousands of them, so they are a treap (a binary
 * search tree kept balanced in expectation by random heap priorities)
 * ordered by base, each node also keeping the hull of its subtree: the
 * lowest address and the highest end that any of its spans holds, bytes or
 * locked pages. A lookup skips every subtree whose hull misses the range it
 * asks about, so a claim, a release and each lookup cost O(log n) in
 * expectation, times one plus the spans meeting that range that it passes
 * over (the caller's own, or a shared page's), where the plain array this
 * replaced walked all of them (bench_runtime times a pin with 10,000 ranges
 * alive).
 * Nothing here takes the spans to be disjoint: different contexts' spans
 * may share a page (never a byte), and one context's spans are not checked
 * against each other here (its registry refuses overlapping registrations,
 * this record does not), so even a shared base is allowed: ties are
 * ordered by node address. Released spans' nodes are kept for the next
 * claims (a pin and its scope's end allocate nothing), as the array kept its
 * room, and freed once no span is left.
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

typedef struct span_node {
    host_span s;
    struct span_node *left, *right; /* spans before it in (base, node address), and after */
    uintptr_t lo, hi;               /* the hull of its subtree: [lowest span_lo, highest span_hi) */
    uint32_t priority;              /* at least its children's */
} span_node;

static pthread_mutex_t spans_lock = PTHREAD_MUTEX_INITIALIZER;
static span_node *root;
static span_node *spare;            /* released spans' nodes, through their left links */
static uint32_t seed = 0x9e3779b9u; /* the priorities' (xorshift32) */

/* Whether [base, base + bytes) meets span s's bytes. */
static bool meets(const host_span *s, uintptr_t base, size_t bytes)
{
    return base < s->base + s->bytes && s->base < base + bytes;
}

/* The lowest address s holds: its base, or the first page it locks. */
static uintptr_t span_lo(const host_span *s)
{
    return s->lock_bytes > 0 && s->lock_base < s->base ? s->lock_base : s->base;
}

/* The end of what s holds: its bytes (its user bytes too), the pages it locks. */
static uintptr_t span_hi(const host_span *s)
{
    uintptr_t hi = s->base + (s->bytes > s->user_bytes ? s->bytes : s->user_bytes);

    if (s->lock_bytes > 0 && s->lock_base + s->lock_bytes > hi)
        hi = s->lock_base + s->lock_bytes;
    return hi;
}

/* Recompute n's hull from its span and its children's hulls. */
static void update(span_node *n)
{
    n->lo = span_lo(&n->s);
    n->hi = span_hi(&n->s);
    for (int k = 0; k < 2; k++) {
        const span_node *c = k == 0 ? n->left : n->right;

        if (c != NULL && c->lo < n->lo)
            n->lo = c->lo;
        if (c != NULL && c->hi > n->hi)
            n->hi = c->hi;
    }
}

/* Whether a comes before b in the tree: by base, then by node address. */
static bool before(const span_node *a, const span_node *b)
{
    if (a->s.base != b->s.base)
        return a->s.base < b->s.base;
    return (uintptr_t)a < (uintptr_t)b;
}

/* t's left child rotated up into its place; returns it. */
static span_node *rotate_right(span_node *t)
{
    span_node *l = t->left;

    t->left = l->right;
    l->right = t;
    update(t);
    update(l);
    return l;
}

/* t's right child rotated up into its place; returns it. */
static span_node *rotate_left(span_node *t)
{
    span_node *r = t->right;

    t->right = r->left;
    r->left = t;
    update(t);
    update(r);
    return r;
}

/* Subtree t with leaf n (its hull set) added; returns the subtree's new root. */
static span_node *insert(span_node *t, span_node *n)
{
    if (t == NULL)
        return n;
    if (before(n, t)) {
        t->left = insert(t->left, n);
        if (t->left->priority > t->priority)
            return rotate_right(t);
    } else {
        t->right = insert(t->right, n);
        if (t->right->priority > t->priority)
            return rotate_left(t);
    }
    update(t);
    return t;
}

/* Subtrees a and b (every node of a before every node of b) as one. */
static span_node *join(span_node *a, span_node *b)
{
    if (a == NULL)
        return b;
    if (b == NULL)
        return a;
    if (a->priority > b->priority) {
        a->right = join(a->right, b);
        update(a);
        return a;
    }
    b->left = join(a, b->left);
    update(b);
    return b;
}

/* Subtree t without its node n; returns the subtree's new root. */
static span_node *remove_node(span_node *t, span_node *n)
{
    if (t == n)
        return join(t->left, t->right);
    if (before(n, t))
        t->left = remove_node(t->left, n);
    else
        t->right = remove_node(t->right, n);
    update(t);
    return t;
}

/* Recompute the hulls from subtree t's root down to its node n, after n's span changed. */
static void refresh(span_node *t, const span_node *n)
{
    if (t != n)
        refresh(before(n, t) ? t->left : t->right, n);
    update(t);
}

/*
 * The first span in subtree t, in tree order, that holds a byte of [lo, hi)
 * (bytes or locked pages) and that fits(span, arg) accepts, or NULL. Subtrees
 * whose hull misses the range are skipped.
 */
static span_node *find(span_node *t, uintptr_t lo, uintptr_t hi,
                       bool (*fits)(const host_span *, const void *), const void *arg)
{
    for (; t != NULL && t->lo < hi && lo < t->hi; t = t->right) {
        span_node *found = find(t->left, lo, hi, fits, arg);

        if (found != NULL)
            return found;
        if (span_lo(&t->s) < hi && lo < span_hi(&t->s) && fits(&t->s, arg))
            return t;
    }
    return NULL;
}

/* Owner's span at base in subtree t, or NULL: the subtree's spans at base, walked in order. */
static span_node *span_at(span_node *t, const host_ctx *owner, uintptr_t base)
{
    while (t != NULL && t->s.base != base)
        t = base < t->s.base ? t->left : t->right;
    if (t == NULL || t->s.owner == owner)
        return t;
    /* ties at base (one owner's spans only; see above) lie on both sides of t */
    {
        span_node *found = span_at(t->left, owner, base);

        return found != NULL ? found : span_at(t->right, owner, base);
    }
}

typedef struct claim_query {
    const host_ctx *owner;
    uintptr_t base;
    size_t bytes;
} claim_query;

/* Whether s is another context's span meeting the claimed bytes. */
static bool claim_refuses(const host_span *s, const void *arg)
{
    const claim_query *q = arg;

    return s->owner != q->owner && meets(s, q->base, q->bytes);
}

gm_status gm__host_span_claim(const host_ctx *owner, const host_region *r, size_t bytes,
                              bool portable, const char *fn)
{
    claim_query q = {owner, r->base, bytes};
    span_node *n = NULL;
    gm_status status = GM_OK;

    pthread_mutex_lock(&spans_lock);
    if (find(root, r->base, r->base + bytes, claim_refuses, &q) != NULL) {
        status = gm__error(GM_ERR_STATE,
                           "%s: [%p, %p) overlaps memory another context registered or "
                           "allocated (page-locking is the process's, as in CUDA)",
                           fn, (void *)r->base, (void *)(r->base + bytes));
    } else if (spare != NULL) {
        n = spare;
        spare = n->left;
    } else {
        n = gm__malloc(sizeof(*n));
        if (n == NULL)
            status = gm__error(GM_ERR_NO_MEMORY,
                               "%s: out of memory for the process's record of "
                               "page-locked memory",
                               fn);
    }
    if (n != NULL) {
        n->s = (host_span){owner,        r->base,       bytes,   r->bytes,
                           r->lock_base, r->lock_bytes, r->kind, portable};
        n->left = n->right = NULL;
        update(n);
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        n->priority = seed;
        root = insert(root, n);
    }
    pthread_mutex_unlock(&spans_lock);
    return status;
}

typedef struct page_query {
    const host_span *self;
    uintptr_t page;
    size_t ps;
} page_query;

/* Whether s is another span than the query's and locks a byte of its page. */
static bool shares_page(const host_span *s, const void *arg)
{
    const page_query *q = arg;

    /* (locking none, s locks no byte of the page: lock_base and page are page-aligned) */
    return s != q->self && s->lock_bytes > 0 && q->page < s->lock_base + s->lock_bytes &&
           s->lock_base < q->page + q->ps;
}

/* Whether another span than `self` covers a byte of page [page, page + ps) (spans_lock). */
static bool page_shared(const host_span *self, uintptr_t page, size_t ps)
{
    page_query q = {self, page, ps};

    return find(root, page, page + ps, shares_page, &q) != NULL;
}

void gm__host_span_unlocked(const host_ctx *owner, uintptr_t base)
{
    span_node *self = NULL;

    pthread_mutex_lock(&spans_lock);
    self = span_at(root, owner, base);
    if (self != NULL) {
        self->s.lock_bytes = 0; /* keeps no shared page locked for another span */
        refresh(root, self);
    }
    pthread_mutex_unlock(&spans_lock);
}

void gm__host_span_release(const host_ctx *owner, uintptr_t base, uintptr_t lo, uintptr_t hi)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    span_node *self = NULL, *unused = NULL;

    pthread_mutex_lock(&spans_lock);
    self = span_at(root, owner, base);
    if (hi > lo && page_shared(self != NULL ? &self->s : NULL, lo, ps))
        lo += ps;
    if (hi > lo && page_shared(self != NULL ? &self->s : NULL, hi - ps, ps))
        hi -= ps;
    if (hi > lo)
        (void)munlock((void *)lo, hi - lo);
    if (self != NULL) {
        root = remove_node(root, self);
        self->left = spare;
        spare = self;
    }
    if (root == NULL) { /* nothing kept while no context has any */
        unused = spare;
        spare = NULL;
    }
    pthread_mutex_unlock(&spans_lock);
    while (unused != NULL) {
        span_node *next = unused->left;

        gm__free(unused);
        unused = next;
    }
}

typedef struct portable_query {
    const host_ctx *owner;
    uintptr_t addr;
    size_t bytes;
} portable_query;

/* Whether s is another context's portable span whose user bytes hold the query's. */
static bool portable_holds(const host_span *s, const void *arg)
{
    const portable_query *q = arg;

    return s->owner != q->owner && s->portable && q->addr >= s->base &&
           q->addr - s->base < s->user_bytes && q->bytes <= s->user_bytes - (q->addr - s->base);
}

int gm__host_span_portable_kind(const host_ctx *owner, uintptr_t addr, size_t bytes)
{
    portable_query q = {owner, addr, bytes};
    const span_node *s = NULL;
    int kind = GM_MEMORY_HOST;

    pthread_mutex_lock(&spans_lock);
    s = find(root, addr, addr + 1, portable_holds, &q); /* a span holding addr's byte */
    if (s != NULL)
        kind = s->s.kind;
    pthread_mutex_unlock(&spans_lock);
    return kind;
}
