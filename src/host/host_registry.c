/*
 * The host simulator's registry of allocations and registrations: the
 * context's regions ordered by base address, non-overlapping, in a treap
 * (a binary search tree kept balanced in expectation by random heap
 * priorities). Every operation is O(log n), so a program holding many
 * thousands of live arrays (or freeing them late, inside defer_cleanup)
 * pays no more per allocation than one holding ten; the sorted array this
 * replaced moved every later region on each insert and removal.
 *
 * Exact lookups (mem_free, host_unregister: the region that starts at an
 * address) go through a hash index of the same nodes instead: one probe in
 * the common case rather than a walk down the tree. It is an open-addressed
 * table of node pointers keyed by base (Fibonacci hashing, linear probing,
 * at most half full, deletion by backward shift), grown with the tree and
 * never shrunk.
 *
 * The copy checks find the region holding an address through
 * gm__host_registry_floor_hinted, which remembers the last two regions it
 * found: a program moving data in and out of the same arrays skips the walk
 * down the tree. A hint is only a candidate (one whose range holds the
 * address is the floor, the ranges never overlapping) and is dropped when
 * its node leaves the tree.
 *
 * Freed device blocks that the cache keeps stay in the tree as cached
 * regions (host_cache.c), so the steady state (allocate, release, allocate
 * again) flips a region's state instead of removing and inserting a node;
 * this file does not look at the state. Nodes of removed regions are kept
 * on a spare list and reused; they are freed with the registry. Every
 * function here runs with the context's mem_lock held.
 */
#include <stdint.h>

#include "host_backend.h"

/* A node's region is its first member: a region pointer is its node's. */
_Static_assert(offsetof(host_node, region) == 0, "a registry node starts with its region");

static host_node *node_of(host_region *r)
{
    return (host_node *)(void *)r;
}

/* The next priority (xorshift32; any sequence with no structure in the keys will do). */
static uint32_t next_priority(host_registry *reg)
{
    uint32_t x = reg->seed != 0 ? reg->seed : 0x9e3779b9u;

    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    reg->seed = x;
    return x;
}

/* The link that points at n: its parent's child pointer, or the root. */
static host_node **link_to(host_registry *reg, host_node *n)
{
    if (n->parent == NULL)
        return &reg->root;
    return n->parent->left == n ? &n->parent->left : &n->parent->right;
}

/* Rotate child c of p up into p's place (c is p->left or p->right). */
static void rotate_up(host_registry *reg, host_node *c)
{
    host_node *p = c->parent;
    host_node **top = link_to(reg, p);

    if (p->left == c) {
        p->left = c->right;
        if (c->right != NULL)
            c->right->parent = p;
        c->right = p;
    } else {
        p->right = c->left;
        if (c->left != NULL)
            c->left->parent = p;
        c->left = p;
    }
    c->parent = p->parent;
    p->parent = c;
    *top = c;
}

/* The index's home slot for a base (the top `bits` bits of a Fibonacci product). */
static size_t home_slot(unsigned bits, uintptr_t base)
{
    return (size_t)(((uint64_t)base * 0x9e3779b97f4a7c15ull) >> (64 - bits));
}

/* Put n in the first free slot from its home (there is one: the index is at most half full). */
static void index_put(host_node **slots, unsigned bits, host_node *n)
{
    size_t mask = ((size_t)1 << bits) - 1;
    size_t i = home_slot(bits, n->region.base);

    while (slots[i] != NULL)
        i = (i + 1) & mask;
    slots[i] = n;
}

/* Make room in the index for one more node (doubling it); false when out of memory. */
static bool index_reserve(host_registry *reg)
{
    unsigned bits = reg->bits != 0 ? reg->bits + 1 : 4;
    host_node **slots = NULL;

    if (reg->bits != 0 && (reg->count + 1) * 2 <= (size_t)1 << reg->bits)
        return true;
    slots = gm__malloc(sizeof *slots << bits);
    if (slots == NULL)
        return false;
    for (size_t i = 0; i < (size_t)1 << bits; i++)
        slots[i] = NULL;
    for (size_t i = 0; reg->bits != 0 && i < (size_t)1 << reg->bits; i++)
        if (reg->slots[i] != NULL)
            index_put(slots, bits, reg->slots[i]);
    gm__free(reg->slots);
    reg->slots = slots;
    reg->bits = bits;
    return true;
}

/* Take n out of the index, moving later entries of its probe run back into the gap. */
static void index_remove(host_registry *reg, const host_node *n)
{
    size_t mask = ((size_t)1 << reg->bits) - 1;
    size_t gap = home_slot(reg->bits, n->region.base);

    while (reg->slots[gap] != n)
        gap = (gap + 1) & mask;
    for (size_t j = (gap + 1) & mask; reg->slots[j] != NULL; j = (j + 1) & mask) {
        size_t home = home_slot(reg->bits, reg->slots[j]->region.base);

        /* The entry at j may move to the gap unless its home lies cyclically in (gap, j]. */
        if (((j - home) & mask) >= ((j - gap) & mask)) {
            reg->slots[gap] = reg->slots[j];
            gap = j;
        }
    }
    reg->slots[gap] = NULL;
}

host_region *gm__host_registry_find(const host_registry *reg, uintptr_t addr)
{
    size_t mask = ((size_t)1 << reg->bits) - 1;

    if (reg->bits == 0)
        return NULL;
    for (size_t i = home_slot(reg->bits, addr); reg->slots[i] != NULL; i = (i + 1) & mask)
        if (reg->slots[i]->region.base == addr)
            return &reg->slots[i]->region;
    return NULL;
}

host_region *gm__host_registry_lower_bound(const host_registry *reg, uintptr_t addr)
{
    host_node *n = reg->root, *best = NULL;

    while (n != NULL) {
        if (n->region.base >= addr) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return best != NULL ? &best->region : NULL;
}

host_region *gm__host_registry_floor(const host_registry *reg, uintptr_t addr)
{
    host_node *n = reg->root, *best = NULL;

    while (n != NULL) {
        if (n->region.base <= addr) {
            best = n;
            n = n->right;
        } else {
            n = n->left;
        }
    }
    return best != NULL ? &best->region : NULL;
}

/* Whether a node's range [base, base + bytes) holds addr (bytes > 0; NULL holds nothing). */
static bool node_holds(const host_node *n, uintptr_t addr)
{
    return n != NULL && addr - n->region.base < n->region.bytes;
}

host_region *gm__host_registry_floor_hinted(host_registry *reg, uintptr_t addr)
{
    host_node *n = reg->hint[0];
    host_region *r = NULL;

    if (node_holds(n, addr))
        return &n->region;
    n = reg->hint[1];
    if (!node_holds(n, addr)) {
        r = gm__host_registry_floor(reg, addr);
        if (r == NULL)
            return NULL;
        n = node_of(r);
    }
    reg->hint[1] = reg->hint[0];
    reg->hint[0] = n;
    return &n->region;
}

host_region *gm__host_registry_first(const host_registry *reg)
{
    host_node *n = reg->root;

    while (n != NULL && n->left != NULL)
        n = n->left;
    return n != NULL ? &n->region : NULL;
}

host_region *gm__host_registry_next(host_region *r)
{
    host_node *n = node_of(r);

    if (n->right != NULL) {
        n = n->right;
        while (n->left != NULL)
            n = n->left;
        return &n->region;
    }
    while (n->parent != NULL && n->parent->right == n)
        n = n->parent;
    return n->parent != NULL ? &n->parent->region : NULL;
}

host_region *gm__host_registry_prev(host_region *r)
{
    host_node *n = node_of(r);

    if (n->left != NULL) {
        n = n->left;
        while (n->right != NULL)
            n = n->right;
        return &n->region;
    }
    while (n->parent != NULL && n->parent->left == n)
        n = n->parent;
    return n->parent != NULL ? &n->parent->region : NULL;
}

host_region *gm__host_registry_insert(host_registry *reg, const host_region *r)
{
    host_node *n = reg->spare, *p = NULL, **at = &reg->root;

    if (!index_reserve(reg))
        return NULL;
    if (n != NULL)
        reg->spare = n->right;
    else
        n = gm__malloc(sizeof *n);
    if (n == NULL)
        return NULL;
    n->region = *r;
    n->left = n->right = NULL;
    n->priority = next_priority(reg);
    while (*at != NULL) {
        p = *at;
        at = r->base < p->region.base ? &p->left : &p->right;
    }
    n->parent = p;
    *at = n;
    while (n->parent != NULL && n->parent->priority < n->priority)
        rotate_up(reg, n);
    index_put(reg->slots, reg->bits, n);
    reg->count++;
    return &n->region;
}

void gm__host_registry_remove(host_registry *reg, host_region *r)
{
    host_node *n = node_of(r);

    index_remove(reg, n);
    if (reg->hint[0] == n || reg->hint[1] == n) /* its node may come back as another region */
        reg->hint[0] = reg->hint[1] = NULL;
    /* Rotate n down (its higher-priority child up) until it has at most one child. */
    while (n->left != NULL && n->right != NULL)
        rotate_up(reg, n->left->priority > n->right->priority ? n->left : n->right);
    {
        host_node *child = n->left != NULL ? n->left : n->right;

        *link_to(reg, n) = child;
        if (child != NULL)
            child->parent = n->parent;
    }
    n->right = reg->spare;
    reg->spare = n;
    reg->count--;
}

/* Free a subtree's nodes (iteratively: the tree may be deep in the unlikely worst case). */
static void free_nodes(host_node *n)
{
    while (n != NULL) {
        if (n->left != NULL) {
            /* Rotate the left child up so that n loses it; no recursion, no stack. */
            host_node *l = n->left;

            n->left = l->right;
            l->right = n;
            n = l;
        } else {
            host_node *next = n->right;

            gm__free(n);
            n = next;
        }
    }
}

void gm__host_registry_free(host_registry *reg)
{
    free_nodes(reg->root);
    while (reg->spare != NULL) {
        host_node *next = reg->spare->right;

        gm__free(reg->spare);
        reg->spare = next;
    }
    gm__free(reg->slots);
    reg->slots = NULL;
    reg->hint[0] = reg->hint[1] = NULL;
    reg->bits = 0;
    reg->root = NULL;
    reg->count = 0;
}
