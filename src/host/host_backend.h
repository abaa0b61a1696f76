/*
 * The host simulator backend's internal state, shared by host_backend.c
 * (lifecycle, memory, copies), host_cache.c (freed device memory kept for
 * reuse) and host_stream.c (streams, events). Not installed; tests include
 * it to reach gm__host_is_locked().
 *
 * Locks: a context has two locks that are never held together.
 *   mem_lock  (a gm__lock, lock.h: short sections; the longest make an
 *             mlock/munlock call or log) the allocation registry, the
 *             capacity accounting and the device-memory cache;
 *   lock      every stream, work queue, event and fence of the context, with
 *             one condition variable, `progress`, broadcast whenever a work
 *             item completes.
 *
 * Bookkeeping memory (gm__malloc) is only allocated and freed on threads that
 * call the ops, never on stream worker threads: finished work items are put
 * on a list and freed by the next op that takes the lock (or by fini).
 */
#ifndef GPUMEM_SRC_HOST_HOST_BACKEND_H
#define GPUMEM_SRC_HOST_HOST_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "lock.h"

/* Simulated device memory in bytes ("64M"; K, M, G, T suffixes, powers of 1024).
 * Default: half the physical RAM. */
#define GM_HOST_DEVICE_MEMORY_ENV "GM_HOST_DEVICE_MEMORY"
/* Pinned (host_alloc) capacity in bytes, same syntax. Default: device memory / 4. */
#define GM_HOST_PINNED_MEMORY_ENV "GM_HOST_PINNED_MEMORY"
/* "0" turns mlock off (pinned memory is then honestly reported as not locked). */
#define GM_HOST_MLOCK_ENV "GM_HOST_MLOCK"

/* Bytes of freed device memory kept for reuse (host_cache.c), same syntax; "0" turns the
 * cache off. Default: 256M, at most a quarter of the device memory. When it is full, a freed
 * block evicts the least recently cached ones. */
#define GM_HOST_DEVICE_CACHE_ENV "GM_HOST_DEVICE_CACHE"

/* Alignment of simulated device allocations (cudaMalloc gives at least 256). */
#define GM_HOST_DEVICE_ALIGNMENT 256

/* Largest cached block: 2^GM_HOST_CACHE_MAX_SHIFT bytes (64 MiB), in 72 size classes. */
#define GM_HOST_CACHE_MAX_SHIFT 26
#define GM_HOST_CACHE_MAX_BLOCK ((size_t)1 << GM_HOST_CACHE_MAX_SHIFT)
#define GM_HOST_CACHE_CLASSES   72

/* A region's state: in use, or a freed device block kept in the cache (host_cache.c). */
enum { HOST_REGION_LIVE = 0, HOST_REGION_CACHED = 1 };

/*
 * One allocation or registration of the context, keyed by its address range.
 *
 * A cached region is freed device memory that the cache keeps for reuse: it
 * stays in the registry (so that reusing it flips its state back, with no
 * removal and insertion) but every user of the registry treats it as if it
 * were not there: it is not memory of the context for pointer_kind, the copy
 * checks, mem_free, host_register or the page-lock walks. Two invariants make
 * that cheap: the ranges [base, base + bytes) of all regions, cached or not,
 * never overlap; and nothing else overlaps a cached region's whole block,
 * [base, base + capacity) (host_register evicts the cached blocks its range
 * meets, and a block whose tail may hold a registration, tail_shared, is
 * never cached). So a lookup that lands on a cached region has found no
 * memory of the context.
 */
typedef struct host_region {
    uintptr_t base;   /* first byte the user sees */
    size_t bytes;     /* bytes the user sees (> 0); cached: those of its last user */
    size_t charged;   /* bytes counted against the device or pinned capacity */
    size_t capacity;  /* bytes allocated (device kinds: the cache class's size) */
    int kind;         /* gm_memory_kind: DEVICE, MANAGED, PINNED or MAPPED */
    int16_t klass;    /* device kinds: the cache class of capacity, -1 when uncached */
    uint8_t state;    /* HOST_REGION_LIVE or HOST_REGION_CACHED */
    bool registered;  /* host_register'ed user memory (else allocated here) */
    bool locked;      /* mlock succeeded on [lock_base, lock_base + lock_bytes) */
    bool tail_shared; /* live device region: another region may lie in [base, base + capacity) */
    union {
        uintptr_t lock_base; /* pinned and mapped kinds */
        /*
         * Cached: the cache's clock when it was cached (lower: older). Device
         * kinds lock nothing (locked is false), so their lock_base is unused
         * and holds it (stale once live again, and never used).
         */
        uint64_t cached_at;
    };
    size_t lock_bytes;
    /* Cached: the neighbours in its class's list, most recently freed first. */
    struct host_region *cache_next, *cache_prev;
} host_region;

/* Whether a region is memory of the context (not a cached block). */
static inline bool gm__host_region_live(const host_region *r)
{
    return r->state == HOST_REGION_LIVE;
}

/* A registry node (host_registry.c): its region first, then the treap links. */
typedef struct host_node {
    host_region region;
    struct host_node *left, *right, *parent;
    uint32_t priority;
} host_node;

/*
 * The context's regions, cached ones included (host_registry.c; mem_lock):
 * a treap by base address for ordered lookups, and a hash index of the same
 * nodes by base for exact ones (gm__host_registry_find).
 */
typedef struct host_registry {
    host_node *root;
    host_node *spare; /* nodes of removed regions, linked through right */
    size_t count;     /* regions in the tree, cached ones included */
    uint32_t seed;
    unsigned bits;      /* the index has 2^bits slots (0: none yet) */
    host_node **slots;  /* the index: open addressing, linear probing, at most half full */
    host_node *hint[2]; /* gm__host_registry_floor_hinted's last finds, newest first, or NULL */
} host_registry;

/* The region with base == addr, or NULL. */
host_region *gm__host_registry_find(const host_registry *reg, uintptr_t addr);
/* The first region with base >= addr, or NULL. */
host_region *gm__host_registry_lower_bound(const host_registry *reg, uintptr_t addr);
/* The last region with base <= addr, or NULL. */
host_region *gm__host_registry_floor(const host_registry *reg, uintptr_t addr);
/*
 * gm__host_registry_floor for a registry whose ranges [base, base + bytes)
 * never overlap (the backend's invariant): the two regions it last found
 * are tried first, and one whose range holds addr is the floor (no other
 * base can lie in (its base, addr]). Repeated lookups in the same few
 * regions (a program's transfers between the same arrays) skip the walk.
 */
host_region *gm__host_registry_floor_hinted(host_registry *reg, uintptr_t addr);
/* The region of lowest base, or NULL. */
host_region *gm__host_registry_first(const host_registry *reg);
/* The region after / before r in address order, or NULL. */
host_region *gm__host_registry_next(host_region *r);
host_region *gm__host_registry_prev(host_region *r);
/* Insert a copy of r (no overlap checks: the caller's); NULL when out of memory. */
host_region *gm__host_registry_insert(host_registry *reg, const host_region *r);
/* Remove a region (a pointer from this registry); its node is kept for reuse. */
void gm__host_registry_remove(host_registry *reg, host_region *r);
/* Free every node; the registry is empty afterwards. */
void gm__host_registry_free(host_registry *reg);

typedef struct host_stream host_stream;
typedef struct host_event host_event;
typedef struct host_work host_work;
typedef struct host_fence host_fence;

/*
 * Freed device memory kept for reuse, per size class (host_cache.c; mem_lock):
 * lists of cached regions, linked through the regions themselves, each in
 * the order its regions were cached: reuse takes a list's first (the
 * newest), making room evicts the oldest of the lists' last ones.
 */
typedef struct host_cache {
    host_region *bins[GM_HOST_CACHE_CLASSES];  /* most recently freed first */
    host_region *tails[GM_HOST_CACHE_CLASSES]; /* each list's last (least recently freed) */
    int64_t counts[GM_HOST_CACHE_CLASSES];     /* regions in each list */
    uint64_t clock;                            /* regions cached so far (their cached_at) */
    int64_t bytes;                             /* capacity of the blocks held */
    int64_t limit;                             /* most bytes held (GM_HOST_DEVICE_CACHE) */
} host_cache;

/* A per-thread default stream: the thread's key and its stream. */
typedef struct host_thread_stream {
    uint64_t thread_key;
    host_stream *stream;
} host_thread_stream;

/* A backend context (what gm_backend_ctx points at). */
typedef struct host_ctx {
    int32_t device_id;
    int32_t warp_size;
    bool use_mlock;
    char cpu_name[128];

    gm__lock mem_lock;
    host_registry registry;      /* allocations and registrations, non-overlapping */
    struct host_module *modules; /* loaded host tables: their globals are device memory */
    int64_t device_total;
    int64_t device_used;
    int64_t pinned_total;
    int64_t pinned_used;
    host_cache cache;

    pthread_mutex_t lock;
    pthread_cond_t progress;
    uint64_t next_ticket;   /* enqueue order across every stream */
    _Atomic int64_t queued; /* items submitted and not yet completed, on every stream */
    int64_t busy_blocking;  /* blocking streams (not the legacy one) with queued items */
    host_stream *streams;   /* every stream with a worker */
    host_stream *ended;     /* retired streams whose workers ended: joined, freed later */
    host_stream *idle;      /* destroyed streams whose workers wait to serve a new one */
    int nidle;
    host_stream *wrappers; /* every stream_wrap wrapper */
    host_event *events;    /* every event */
    host_stream *legacy_stream;
    host_thread_stream *thread_streams; /* of the live threads that used theirs */
    size_t nthread_streams;
    size_t thread_stream_cap;
    gm__thread_watch exit_watch; /* retires an exiting thread's stream */
    host_work *dead;             /* finished work waiting to be freed */
} host_ctx;

/* The host context behind an opaque backend context. */
static inline host_ctx *gm__host_ctx(gm_backend_ctx *bctx)
{
    return (host_ctx *)(void *)bctx;
}

/* A unit of stream work. `run` (may be NULL) executes on the stream's worker. */
struct host_work {
    host_work *next;
    gm_status (*run)(host_work *w);
    uint64_t ticket;
    gm_status stream_status; /* the stream's pending error when the item starts */
    host_fence *signal;      /* completed with the item (event_record) */
    host_fence *wait;        /* the item waits for it (stream_wait_event) */
    gm_backend_host_work_fn fn;
    gm_backend_callback_fn callback;
    void *user;
    void (*cleanup)(void *user); /* called on the worker after run */
    gm_copy_desc desc;           /* pitched copy */
    gm_ndview *views;            /* strided copy: [0] dst, [1] src; owned */
    gm_devptr fill_dst;          /* memset */
    unsigned char pattern[8];
    size_t pattern_bytes;
    size_t fill_count;
};

/*
 * Whether the allocation or registration containing ptr is really
 * page-locked (false when mlock failed or was turned off, or ptr is unknown).
 */
bool gm__host_is_locked(gm_backend_ctx *bctx, const void *ptr);

/* ---- host_cache.c: the device-memory cache (every call with mem_lock held) ---- */

/*
 * The size class of a charged size (a multiple of GM_HOST_DEVICE_ALIGNMENT,
 * > 0) and the capacity to allocate for it; -1 (capacity = charged) when
 * blocks of that size are not cached.
 */
int gm__host_cache_class(size_t charged, size_t *capacity_p);

/*
 * Keep a live device-kind region's block (r in the registry): r becomes
 * cached, the newest in its class's list and in the cache. When the blocks
 * held leave no room for it, the least recently cached ones (of any class)
 * are evicted first: taken out of `reg`, their blocks pushed on *evicted_p
 * (a list for gm__host_cache_free, after mem_lock). False (r unchanged,
 * nothing evicted) when r's block is never cached (klass < 0) or is larger
 * than the whole cache.
 */
bool gm__host_cache_keep(host_cache *cache, host_registry *reg, host_region *r, void **evicted_p);

/*
 * The most recently cached region of `klass`, off its list and live again
 * (the caller sets its size and kind), its first `bytes` usable; NULL when
 * there is none. A region whose block was written since it was cached is
 * removed from `reg` instead and its block goes to *bad_p, for
 * gm__host_cache_discard.
 */
host_region *gm__host_cache_take(host_cache *cache, host_registry *reg, int klass, size_t bytes,
                                 void **bad_p);

/*
 * gm__host_cache_take when the most recently cached region of `klass` is
 * intact; NULL, changing nothing, when there is none or it was written since
 * it was cached (gm__host_cache_take then deals with it).
 */
host_region *gm__host_cache_take_intact(host_cache *cache, int klass, size_t bytes);

/*
 * Under AddressSanitizer, mark bytes [bytes, capacity) of a new block
 * inaccessible, as a cached block's are once reused: an access past the
 * requested size (an off-by-one in a kernel) is reported instead of landing
 * in the rounding up to the allocation's size class or page. Nothing in
 * other builds. No lock needed.
 */
void gm__host_poison_tail(void *block, size_t bytes, size_t capacity);

/* Report a block from gm__host_cache_take's *bad_p and free it (no lock needed). */
void gm__host_cache_discard(void *block, size_t capacity);

/*
 * Take a cached region out of the cache and the registry; its block is
 * pushed on *list_p (a list for gm__host_cache_free).
 */
void gm__host_cache_evict(host_cache *cache, host_registry *reg, host_region *r, void **list_p);

/* Evict every cached region (out-of-memory retry) into a list for gm__host_cache_free. */
void *gm__host_cache_drop(host_cache *cache, host_registry *reg);

/* Free a list of blocks from gm__host_cache_evict / gm__host_cache_drop (no lock needed). */
void gm__host_cache_free(void *list);

/* ---- host_stream.c: queue machinery used by host_backend.c ---- */

/* Set up / tear down the stream side of a context (fini drains and joins every worker). */
gm_status gm__host_streams_init(host_ctx *c);
void gm__host_streams_fini(host_ctx *c);

/* A zeroed work item (gm__malloc), or NULL. */
host_work *gm__host_work_new(void);

/* Free a work item that was never submitted. */
void gm__host_work_free(host_work *w);

/* Append w to a stream (wrappers resolved); the queue owns it afterwards. */
void gm__host_submit(host_ctx *c, gm_backend_stream *stream, host_work *w);

/* Before a synchronous (stream NULL) op: wait as legacy-stream work would. */
void gm__host_sync_barrier(host_ctx *c);

/* ---- host_stream.c: the stream and event ops ---- */
gm_op_stream_create gm__host_stream_create;
gm_op_stream_destroy gm__host_stream_destroy;
gm_op_stream_builtin gm__host_stream_builtin;
gm_op_stream_wrap gm__host_stream_wrap;
gm_op_stream_unwrap gm__host_stream_unwrap;
gm_op_stream_native gm__host_stream_native;
gm_op_stream_synchronize gm__host_stream_synchronize;
gm_op_stream_query gm__host_stream_query;
gm_op_stream_add_callback gm__host_stream_add_callback;
gm_op_stream_enqueue_host gm__host_stream_enqueue_host;
gm_op_device_synchronize gm__host_device_synchronize;
gm_op_event_create gm__host_event_create;
gm_op_event_destroy gm__host_event_destroy;
gm_op_event_record gm__host_event_record;
gm_op_stream_wait_event gm__host_stream_wait_event;
gm_op_event_query gm__host_event_query;
gm_op_event_synchronize gm__host_event_synchronize;
gm_op_event_elapsed gm__host_event_elapsed;

/* ---- host_spans.c: pinned, mapped and registered memory over every host context ---- */
/*
 * Claim r's first `bytes` bytes (an allocation's charged bytes, a
 * registration's own) for owner, before its pages are locked: GM_ERR_STATE
 * when they meet another context's span, GM_ERR_NO_MEMORY; messages name fn.
 */
gm_status gm__host_span_claim(const host_ctx *owner, const host_region *r, size_t bytes,
                              bool portable, const char *fn);
/* Owner's span at base locks no page after all (its mlock failed or is off). */
void gm__host_span_unlocked(const host_ctx *owner, uintptr_t base);
/*
 * Release owner's span at base (none: only the unlocking) and munlock the
 * page-aligned [lo, hi) but its end pages when another span (of any context)
 * shares them: one step, so no claim comes between.
 */
void gm__host_span_release(const host_ctx *owner, uintptr_t base, uintptr_t lo, uintptr_t hi);
/* The kind of another context's portable span whose user bytes (not its page-rounded
 * tail) hold [addr, addr + bytes), else GM_MEMORY_HOST. */
int gm__host_span_portable_kind(const host_ctx *owner, uintptr_t addr, size_t bytes);

#endif /* GPUMEM_SRC_HOST_HOST_BACKEND_H */
