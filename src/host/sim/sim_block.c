/*
 * The block scheduler of the kernel simulator: runs blocks on the calling OS
 * thread, the threads of each block as cooperative fibers.
 *
 * A block starts on one pooled fiber that runs the kernel's generated loop
 * (claim the next thread, run the body, repeat). When a thread reaches a
 * barrier it is suspended where it stands and the next unstarted thread
 * starts on another fiber running the same loop, so fibers are taken only
 * by threads that reach a barrier and a barrier-free kernel runs as a plain
 * loop on a single fiber. When no thread can run and none is left to start,
 * the barrier is released if every thread of the block reached it;
 * otherwise the block has diverged and the launch fails. A wave barrier is
 * released when its warp's last lane reaches it, or, if that lane returned
 * instead, when nothing else can run; lanes that returned do not take part.
 * Returned threads are recognized without any per-thread bookkeeping on
 * the kernel's fast path: started, not suspended, not running. A fiber
 * whose thread returned parks in the kernel's loop, ready to start another
 * thread of the run; when the run ends, the fibers it used leave the loop
 * (see SWITCH_END), so that nothing of the kernel's code stays on a fiber
 * between launches.
 *
 * Switches go straight from fiber to fiber; the OS thread's own stack is
 * returned to only when there is no block left to run. The fiber that
 * suspends a thread also does the bookkeeping of the thread it resumes, so
 * that a barrier ends in a tail call of the switch and a resumed thread
 * returns from it straight into its kernel; the fibers about to run are
 * prefetched a few switches ahead (about 256 of them take turns in a
 * typical block, more than the first-level cache holds).
 */
#include <stdatomic.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fiber.h"
#include "sim.h"

/* What a thread of the current block is doing. The wave barrier scans eight lanes at a time
 * and rely on the encoding: bit 0 clear for running and for waiting at a wave barrier. */
enum {
    T_RUN = 0,        /* running, not started, or returned */
    T_WAIT_BLOCK = 1, /* at gm_syncthreads / gm_barrier */
    T_WAIT_WAVE = 2,  /* at gm_wavebarrier */
    T_READY = 3       /* released from a barrier, not resumed yet */
};

#define READY_MASK (GM__SIM_MAX_THREADS - 1u)

/*
 * A fiber is never resumed in the kernel's loop in a later run than the one
 * it parked there in: when a run ends, the fibers it used are taken out of
 * the kernel's code (run_end), so that between runs no fiber holds a frame
 * of it: the kernel's library may be unloaded (gm_module_unload, then
 * dlclose) before the next launch. They are started over, or, where a
 * sanitizer keeps books on every frame (ASan's fake frames, TSan's shadow
 * call stack), unwound: resumed with SWITCH_END, on which gm__sim_park
 * returns 0, the kernel's loop returns and fiber_main waits for the next
 * run.
 *
 * Every other switch passes SWITCH_GO: what gm__sim_park returns to a fiber
 * parked earlier in the same run (go on claiming). A fiber's first entry,
 * fiber_main and the barriers ignore the value.
 */
enum { SWITCH_END = 0, SWITCH_GO = 1 };
#if defined(GM__FIBER_ASAN) || defined(GM__FIBER_TSAN)
#define SIM_UNWIND 1
#endif

typedef struct sim_worker sim_worker;

/* A pooled fiber: holds a thread, or runs a kernel's loop, or is parked in the free list. */
typedef struct sim_fiber {
    gm__fiber fiber; /* first: the fiber entry gets a gm__fiber * */
    sim_worker *owner;
} sim_fiber;

/* Per OS thread: its fibers and the block it is running. */
struct sim_worker {
    gm__fiber main;
    sim_fiber *current;
    sim_fiber **all;
    sim_fiber **free;
    uint32_t nall;
    uint32_t nfree;
    uint32_t nfree_low; /* free[0 .. nfree_low) not run in this run: fresh or in fiber_main */
    size_t stack_bytes;

    /* the run */
    const gm__sim_launch *launch;
    gm__sim_claim_fn claim;
    void *claim_user;
    uint32_t block_idx[3];
    uint32_t count;
    uint32_t nwarps;
    unsigned char *dynamic_shared;
    size_t dynamic_capacity;

    /* the block */
    gm__sim_block pub;
    gm__sim_ctx ctx; /* the block's context; gm__sim_current fills in the thread */
    uint32_t dim_x, dim_y;
    uint32_t one_d;            /* a 1-D block: thread t is (t, 0, 0) */
    uint32_t pow2;             /* dim_x and dim_y are powers of two ... */
    uint32_t x_shift, y_shift; /* ... of these exponents */
    int64_t base_x;            /* block_idx[0] * dim_x */
    uint32_t warp_shift;       /* log2 of the warp size */
    uint32_t block_arrived;    /* threads suspended at the block barrier */
    uint32_t wave_waiting;     /* threads suspended at wave barriers */
    uint32_t warp_arrived[GM__SIM_MAX_WARPS];
    uint32_t ready_head;
    uint32_t ready_tail;
    uint32_t ready[GM__SIM_MAX_THREADS];
    sim_fiber *thread_fiber[GM__SIM_MAX_THREADS];
    uint8_t state[GM__SIM_MAX_THREADS];

    gm_status status;
    char message[GM__SIM_MESSAGE_MAX];
};

static _Thread_local sim_worker *tls_worker = NULL;
static pthread_key_t worker_key;
static pthread_once_t worker_key_once = PTHREAD_ONCE_INIT;

static void fiber_main(gm__fiber *gf);

/* ------------------------------------------------------- worker state */

/* Unmap every fiber of w (none is running: the thread is on its own stack, all are at rest). */
static void release_fibers(sim_worker *w)
{
    for (uint32_t i = 0; i < w->nall; i++) {
        gm__fiber_destroy(&w->all[i]->fiber);
        free(w->all[i]);
    }
    w->nall = w->nfree = w->nfree_low = 0;
    w->current = NULL;
}

/*
 * Thread exit: unmap the fibers. The thread forgets its worker: a later key
 * destructor of the application that launches a kernel on this thread gets
 * a new one (whose key value makes the C library call this again).
 */
static void worker_destroy(void *arg)
{
    sim_worker *w = arg;

    if (tls_worker == w)
        tls_worker = NULL;
    release_fibers(w);
    free(w->all);
    free(w->free);
    free(w->dynamic_shared);
    free(w);
}

static void worker_key_create(void)
{
    (void)pthread_key_create(&worker_key, worker_destroy);
}

/* The calling thread's worker, created on first use; NULL when memory is short. */
static sim_worker *worker_get(void)
{
    sim_worker *w = tls_worker;

    if (w != NULL)
        return w;
    pthread_once(&worker_key_once, worker_key_create);
    w = aligned_alloc(64, (sizeof(*w) + 63u) & ~(size_t)63u);
    if (w == NULL)
        return NULL;
    memset(w, 0, sizeof(*w));
    w->all = calloc(GM__SIM_MAX_THREADS + 1u, sizeof(*w->all));
    w->free = calloc(GM__SIM_MAX_THREADS + 1u, sizeof(*w->free));
    if (w->all == NULL || w->free == NULL) {
        free(w->all);
        free(w->free);
        free(w);
        return NULL;
    }
    gm__fiber_init_main(&w->main);
    w->pub.ctx = &w->ctx;
    w->ctx.block = &w->pub;
    w->stack_bytes = gm__fiber_default_stack_bytes();
    (void)pthread_setspecific(worker_key, w);
    tls_worker = w;
    return w;
}

/* How many switches ahead fibers are prefetched. */
#define PREFETCH_AHEAD 4u

/*
 * Warm the caches for a fiber about to run: its saved registers and the
 * first `lines` cache lines of its stack (the return address, the frames it
 * resumes in). Always inlined: out of line, the compiler sees a function
 * without effects and drops it.
 */
static inline __attribute__((always_inline)) void prefetch_fiber(const sim_fiber *f, unsigned lines)
{
#if defined(GM__FIBER_ASM)
    const char *sp = (const char *)(uintptr_t)f->fiber.regs[GM__FIBER_SP_SLOT];

    for (unsigned i = 0; i < lines; i++)
        __builtin_prefetch(sp + 64 * i);
#else
    (void)f;
    (void)lines;
#endif
}

/* The last parked fiber (the free list is not empty). */
static inline sim_fiber *fiber_pop(sim_worker *w)
{
    sim_fiber *f = w->free[--w->nfree];

    if (w->nfree < w->nfree_low) /* not run yet in this run: run_end takes it in */
        w->nfree_low = w->nfree;
    /* A parked fiber resumes in its kernel's loop, reloading the frame's spills; one from an
     * earlier run starts on the top of its stack. */
    if (w->nfree >= PREFETCH_AHEAD)
        prefetch_fiber(w->free[w->nfree - PREFETCH_AHEAD], 4);
    return f;
}

/* A parked or new fiber; NULL when memory is short. */
static sim_fiber *fiber_take(sim_worker *w)
{
    sim_fiber *f = NULL;

    if (w->nfree > 0) {
        f = fiber_pop(w);
    } else {
        if (w->nall > GM__SIM_MAX_THREADS)
            return NULL;
        f = aligned_alloc(64, (sizeof(*f) + 63u) & ~(size_t)63u);
        if (f == NULL)
            return NULL;
        memset(f, 0, sizeof(*f));
        /* Colour: spread the stack tops over the cache sets of one page. */
        if (gm__fiber_create(&f->fiber, w->stack_bytes, (w->nall * 256u + 128u) % 4096u,
                             fiber_main) != 0) {
            free(f);
            return NULL;
        }
        f->owner = w;
        w->all[w->nall++] = f;
    }
    return f;
}

/* Park a fiber in the free list: it waits in gm__sim_park (or fresh, or in fiber_main). */
static void fiber_park(sim_worker *w, sim_fiber *f)
{
    w->free[w->nfree++] = f;
}

/*
 * A run has ended (every fiber is parked, none holds a thread): the fibers
 * it used, free[nfree_low .. nfree), which wait in the kernel's loop, leave
 * it now, while its code is sure to be there (see SWITCH_END): they start
 * over (a reset writes the line of saved registers that the fiber's next
 * start reads anyway), or under a sanitizer they return from the kernel's
 * loop into fiber_main (two switches each).
 */
static void run_end(sim_worker *w)
{
    for (uint32_t i = w->nfree_low; i < w->nfree; i++) {
#if defined(SIM_UNWIND)
        w->current = w->free[i];
        (void)gm__fiber_switch(&w->main, &w->free[i]->fiber, 0, SWITCH_END);
#else
        gm__fiber_reset(&w->free[i]->fiber);
#endif
    }
    w->current = NULL;
    w->nfree_low = w->nfree;
}

/*
 * After a failed block every fiber starts over: those holding threads, the
 * one that failed (which may have been parked before it found the block
 * stuck), and the parked ones too (simplest: all are at rest now). The
 * block's waits are cleared too (a finished block leaves none).
 */
static void recycle_all(sim_worker *w)
{
    w->nfree = 0;
    for (uint32_t i = 0; i < w->nall; i++) {
        gm__fiber_reset(&w->all[i]->fiber);
        fiber_park(w, w->all[i]);
    }
    memset(w->state, T_RUN, sizeof(w->state));
    memset(w->warp_arrived, 0, sizeof(w->warp_arrived));
    w->block_arrived = 0;
    w->wave_waiting = 0;
    w->ready_head = w->ready_tail = 0;
    w->nfree_low = w->nfree;
}

/* --------------------------------------------------------- messages */

/* Thread coordinates of a linear index in the current block. */
static void thread_coords(const sim_worker *w, uint32_t t, uint32_t c[3])
{
    const uint32_t *b = w->launch->block;

    c[0] = t % b[0];
    c[1] = (t / b[0]) % b[1];
    c[2] = t / (b[0] * b[1]);
}

/* First thread in [lo, hi) whose state is / is not `state`; hi when none. */
static uint32_t find_thread(const sim_worker *w, uint32_t lo, uint32_t hi, int state, int equal)
{
    for (uint32_t t = lo; t < hi; t++) {
        if ((w->state[t] == state) == (equal != 0))
            return t;
    }
    return hi;
}

/* Lanes [lo, hi) of warp wi. */
static void warp_lanes(const sim_worker *w, uint32_t wi, uint32_t *lo_p, uint32_t *hi_p)
{
    uint32_t lo = wi << w->warp_shift;
    uint32_t hi = lo + (1u << w->warp_shift);

    *lo_p = lo;
    *hi_p = hi < w->count ? hi : w->count;
}

/* Describe why the block cannot go on (no thread can run, none is left to start). */
static void describe_divergence(sim_worker *w)
{
    uint32_t c[3], t = 0, wi = 0, lo = 0, hi = 0;
    const char *name = w->launch->kernel->name;
    const uint32_t *b = w->block_idx;

    while (wi < w->nwarps && w->warp_arrived[wi] == 0)
        wi++;
    if (wi < w->nwarps) {
        warp_lanes(w, wi, &lo, &hi);
        t = find_thread(w, lo, hi, T_WAIT_BLOCK, 1);
        thread_coords(w, t < hi ? t : lo, c);
        snprintf(w->message, sizeof w->message,
                 "kernel '%s' block (%u,%u,%u): gm_wavebarrier in warp %u reached by %u lanes; "
                 "thread (%u,%u,%u) of that warp waits at a block barrier instead (barrier "
                 "divergence)",
                 name, b[0], b[1], b[2], wi, w->warp_arrived[wi], c[0], c[1], c[2]);
        return;
    }
    t = find_thread(w, 0, w->count, T_WAIT_BLOCK, 0);
    thread_coords(w, t < w->count ? t : 0, c);
    snprintf(w->message, sizeof w->message,
             "kernel '%s' block (%u,%u,%u): gm_syncthreads/gm_barrier reached by %u of %u "
             "threads; thread (%u,%u,%u) returned without reaching it (barrier divergence)",
             name, b[0], b[1], b[2], w->block_arrived, w->count, c[0], c[1], c[2]);
}

/* -------------------------------------------------------- scheduling */

static void ready_push(sim_worker *w, uint32_t t)
{
    w->ready[w->ready_tail++ & READY_MASK] = t;
}

/*
 * Every thread waits at the block barrier: make them all ready, in thread
 * order. Nothing else is ready (the scheduler releases only when nothing
 * can run), so the queue starts over.
 */
static void release_block(sim_worker *w)
{
    uint32_t n = w->count;

    for (uint32_t t = 0; t < n; t++)
        w->ready[t] = t;
    memset(w->state, T_READY, n);
    w->ready_head = 0;
    w->ready_tail = n;
    w->block_arrived = 0;
}

/*
 * Whether every live lane of warp wi waits at the wave barrier: each lane
 * waits there or has returned (started, and neither suspended nor running;
 * the caller is not running any lane of wi but the one that just arrived).
 */
static int warp_complete(const sim_worker *w, uint32_t wi)
{
    uint32_t lo = 0, hi = 0;
    uint64_t odd = 0; /* states with bit 0 set: waiting at the block barrier, or ready */

    warp_lanes(w, wi, &lo, &hi);
    if (w->warp_arrived[wi] == 0 || hi > w->pub.next)
        return 0;
    for (; lo + 8u <= hi; lo += 8u) {
        uint64_t v = 0;

        memcpy(&v, &w->state[lo], sizeof v);
        odd |= v;
    }
    for (; lo < hi; lo++)
        odd |= w->state[lo];
    return (odd & UINT64_C(0x0101010101010101)) == 0;
}

/* Make the waiting lanes of warp wi ready, in lane order. */
static void release_warp(sim_worker *w, uint32_t wi)
{
    uint32_t lo = 0, hi = 0;

    warp_lanes(w, wi, &lo, &hi);
    for (; lo + 8u <= hi; lo += 8u) { /* eight lanes at a time: T_WAIT_WAVE -> T_READY */
        uint64_t v = 0, wave = 0;

        memcpy(&v, &w->state[lo], sizeof v);
        wave = (v >> 1) & ~v & UINT64_C(0x0101010101010101); /* a 1 per lane in state 2 */
        if (wave == 0)
            continue;
        v |= wave;
        memcpy(&w->state[lo], &v, sizeof v);
        do {
            ready_push(w, lo + (uint32_t)__builtin_ctzll(wave) / 8u);
            wave &= wave - 1u;
        } while (wave != 0);
    }
    for (; lo < hi; lo++) {
        if (w->state[lo] == T_WAIT_WAVE) {
            w->state[lo] = T_READY;
            ready_push(w, lo);
        }
    }
    w->wave_waiting -= w->warp_arrived[wi];
    w->warp_arrived[wi] = 0;
}

/* Nothing can run: release the warps whose other lanes returned. 1 if any was. */
static int release_stalled_warps(sim_worker *w)
{
    int released = 0;

    for (uint32_t wi = 0; wi < w->nwarps && w->wave_waiting > 0; wi++) {
        if (warp_complete(w, wi)) {
            release_warp(w, wi);
            released = 1;
        }
    }
    return released;
}

/* Leave for the OS thread's stack (this fiber is abandoned or parked); the value that
 * resumes it. */
static int to_main(sim_worker *w, sim_fiber *self, int leaving)
{
    w->current = NULL;
    return gm__fiber_switch(&self->fiber, &w->main, leaving, SWITCH_GO);
}

static void fail_block(sim_worker *w, sim_fiber *self, gm_status status)
{
    if (status == GM_ERR_BARRIER_DIVERGENCE) {
        describe_divergence(w);
    } else {
        snprintf(w->message, sizeof w->message,
                 "kernel '%s' block (%u,%u,%u): out of memory for thread fibers",
                 w->launch->kernel->name, w->block_idx[0], w->block_idx[1], w->block_idx[2]);
    }
    w->status = status;
    (void)to_main(w, self, 1);
}

/* Run `to` instead of `self` (no switch when they are the same); `to` is current after.
 * Returns the value that resumes `self` (SWITCH_GO without a switch). */
static inline int switch_to(sim_worker *w, sim_fiber *self, sim_fiber *to)
{
    if (to == self)
        return SWITCH_GO;
    w->current = to;
    return gm__fiber_switch(&self->fiber, &to->fiber, 0, SWITCH_GO);
}

/*
 * Nothing is ready: a fresh fiber for the next unstarted thread, else NULL
 * after releasing a barrier (the ready queue is not empty then). Fails the
 * block (never returning) when nothing can run: barrier divergence.
 */
static __attribute__((noinline)) sim_fiber *pick_next(sim_worker *w, sim_fiber *self)
{
    if (w->pub.next < w->pub.count) {
        sim_fiber *f = fiber_take(w);

        if (f == NULL)
            fail_block(w, self, GM_ERR_NO_MEMORY);
        return f;
    }
    if (w->wave_waiting > 0 && release_stalled_warps(w) != 0)
        return NULL;
    if (w->block_arrived == w->count) {
        release_block(w);
        return NULL;
    }
    fail_block(w, self, GM_ERR_BARRIER_DIVERGENCE);
    return NULL;
}

static inline __attribute__((always_inline)) void prefetch_ready(const sim_worker *w)
{
    uint32_t h = w->ready_head;

    if (w->ready_tail - h > PREFETCH_AHEAD)
        prefetch_fiber(w->thread_fiber[w->ready[(h + PREFETCH_AHEAD) & READY_MASK]], 2);
}

/* The indices of thread t of the block. */
static void thread_xyz(const sim_worker *w, uint32_t t, gm__sim_ctx *c)
{
    uint32_t r = 0;

    if (w->one_d != 0u) {
        c->thread_idx[0] = t;
        c->thread_idx[1] = 0;
        c->thread_idx[2] = 0;
    } else if (w->pow2 != 0u) {
        c->thread_idx[0] = t & (w->dim_x - 1u);
        r = t >> w->x_shift;
        c->thread_idx[1] = r & (w->dim_y - 1u);
        c->thread_idx[2] = r >> w->y_shift;
    } else {
        c->thread_idx[0] = t % w->dim_x;
        r = t / w->dim_x;
        c->thread_idx[1] = r % w->dim_y;
        c->thread_idx[2] = r / w->dim_y;
    }
}

/* Suspended thread t runs next. */
static inline void prepare_resume(sim_worker *w, uint32_t t)
{
    w->state[t] = T_RUN;
    w->pub.running = t;
}

/* The first ready thread runs instead of `self` (ready queue not empty; never `self`).
 * Returns the value that resumes `self`. */
static inline __attribute__((always_inline)) int resume_ready(sim_worker *w, sim_fiber *self)
{
    uint32_t t = w->ready[w->ready_head++ & READY_MASK];
    sim_fiber *to = w->thread_fiber[t];

    prefetch_ready(w);
    prepare_resume(w, t);
    w->current = to;
    return gm__fiber_switch(&self->fiber, &to->fiber, 0, SWITCH_GO);
}

/* The fiber to run instead of `self` (which waits at a barrier, or has no thread). */
static inline sim_fiber *next_fiber(sim_worker *w, sim_fiber *self)
{
    sim_fiber *f = NULL;

    for (;;) {
        if (w->ready_head != w->ready_tail) {
            uint32_t t = w->ready[w->ready_head++ & READY_MASK];

            prefetch_ready(w);
            prepare_resume(w, t);
            return w->thread_fiber[t];
        }
        if (w->pub.next < w->pub.count && w->nfree > 0)
            return fiber_pop(w); /* for the next unstarted thread */
        f = pick_next(w, self);
        if (f != NULL)
            return f;
    }
}

/* Thread t, the running one, waits at a barrier (`state`) on fiber `self`. */
static inline void note_waiting(sim_worker *w, sim_fiber *self, uint32_t t, uint8_t state)
{
    w->thread_fiber[t] = self;
    w->state[t] = state;
}

/*
 * The first time a thread of the block reaches a barrier, or one of the
 * barrier-free fast loop does: the fast loop ends (the threads after it are
 * claimed one at a time again) and the block is no longer barrier-free.
 */
static inline void note_barrier(sim_worker *w, uint32_t t)
{
    if (w->pub.fast != 0u) { /* a 1-D block: t's successor is (t + 1, 0, 0) */
        w->pub.fast = 0u;
        w->pub.next = t + 1u;
        w->pub.nx = t + 1u;
    }
    w->pub.barrier_seen = 1u;
}

static inline sim_worker *worker_of(gm__sim_block *b)
{
    return (sim_worker *)(void *)((char *)b - offsetof(sim_worker, pub));
}

/* The general case of a block barrier: the first one of the block, or the last thread. */
static __attribute__((noinline)) void block_barrier_slow(sim_worker *w, uint32_t t)
{
    sim_fiber *self = w->current;

    note_barrier(w, t);
    note_waiting(w, self, t, T_WAIT_BLOCK);
    w->block_arrived++;
    (void)switch_to(w, self, next_fiber(w, self));
}

/* The general case of a wave barrier: the warp's last lane, or nothing ready. */
static __attribute__((noinline)) void wave_barrier_slow(sim_worker *w, uint32_t t)
{
    sim_fiber *self = w->current;
    uint32_t wi = t >> w->warp_shift;

    note_barrier(w, t);
    note_waiting(w, self, t, T_WAIT_WAVE);
    w->warp_arrived[wi]++;
    w->wave_waiting++;
    /* The warp's last lane releases it (lanes start in order). */
    if ((t + 1u == w->count || ((t + 1u) & ((1u << w->warp_shift) - 1u)) == 0) &&
        warp_complete(w, wi))
        release_warp(w, wi);
    (void)switch_to(w, self, next_fiber(w, self));
}

/*
 * The barriers end in the switch (a tail call where the compiler makes one):
 * the thread resumes where the switch returns, its bookkeeping already done.
 * The common case - another thread is ready, so this one only waits - has a
 * short path. (A ready thread implies an earlier release, so the block is
 * not barrier-free and no fast loop runs.) Workgroup scope on one OS
 * thread: the opaque call is a compiler barrier that orders both memories,
 * so the flags need nothing more (see gpumem/kernel.h).
 */
void gm__sim_block_barrier_local(gm__sim_block *b, uint32_t t)
{
    sim_worker *w = NULL;

    atomic_signal_fence(memory_order_seq_cst);
    if (b == NULL)
        return;
    w = worker_of(b);
    if (w->ready_head != w->ready_tail) {
        sim_fiber *self = w->current;

        note_waiting(w, self, t, T_WAIT_BLOCK);
        w->block_arrived++;
        (void)resume_ready(w, self);
        return;
    }
    block_barrier_slow(w, t);
}

void gm__sim_wave_barrier_local(gm__sim_block *b, uint32_t t)
{
    sim_worker *w = NULL;

    atomic_signal_fence(memory_order_seq_cst);
    if (b == NULL)
        return;
    w = worker_of(b);
    if (w->ready_head != w->ready_tail && t + 1u != w->count &&
        ((t + 1u) & ((1u << w->warp_shift) - 1u)) != 0) {
        sim_fiber *self = w->current;

        note_waiting(w, self, t, T_WAIT_WAVE);
        w->warp_arrived[t >> w->warp_shift]++;
        w->wave_waiting++;
        (void)resume_ready(w, self);
        return;
    }
    wave_barrier_slow(w, t);
}

/* The exported names, for kernels compiled outside the library. */
void gm__sim_block_barrier(gm__sim_block *b, uint32_t t)
    __attribute__((alias("gm__sim_block_barrier_local")));
void gm__sim_wave_barrier(gm__sim_block *b, uint32_t t)
    __attribute__((alias("gm__sim_wave_barrier_local")));

/* ------------------------------------------------------------ blocks */

/* Start block block_idx: its claiming state and its context (the previous block left no
 * thread waiting or ready). */
static void block_begin(sim_worker *w, const uint32_t block_idx[3])
{
    gm__sim_block *b = &w->pub;

    b->next = 0;
    b->nx = b->ny = b->nz = 0;
    b->barrier_seen = 0;
    b->fast = 0;
    for (int i = 0; i < 3; i++) {
        w->block_idx[i] = block_idx[i];
        w->ctx.block_idx[i] = block_idx[i];
        w->ctx.thread_idx[i] = 0;
    }
    w->ctx.linear = 0;
    w->base_x = (int64_t)block_idx[0] * (int64_t)w->dim_x;
    w->ctx.global_x = w->base_x;
}

/* Claim the next block of the run; 0 when there is none (or the run failed). */
static int next_block(sim_worker *w)
{
    uint32_t idx[3];

    if (w->status != GM_OK || w->claim(w->claim_user, idx) == 0)
        return 0;
    block_begin(w, idx);
    return 1;
}

/* Whether the current block has finished: nothing waits, runs or is left to start. */
static int block_finished(const sim_worker *w)
{
    return w->block_arrived == 0 && w->wave_waiting == 0 && w->ready_head == w->ready_tail &&
           w->pub.next >= w->pub.count;
}

/*
 * A fiber's thread has returned and it has nothing left to claim (the
 * kernel's loop calls this): go on with the next block when this one is
 * finished, else park in the free list and run another fiber. Returns 1
 * when there is a thread to claim (the next block, or a new thread of this
 * run for which the fiber was taken); 0 when the run has ended and run_end
 * unwinds the fiber (the loop returns to fiber_main; without a sanitizer
 * the fiber is started over instead, and never returns from here). The
 * switches end the function, so that a resumed fiber returns from them
 * straight into the kernel's loop.
 */
int gm__sim_park_local(gm__sim_block *b)
{
    sim_worker *w = worker_of(b);
    sim_fiber *self = w->current;

    if (block_finished(w)) {
        if (next_block(w) != 0)
            return 1;
        fiber_park(w, self);
        return to_main(w, self, 0);
    }
    fiber_park(w, self);
    if (w->ready_head != w->ready_tail)
        return resume_ready(w, self);
    return switch_to(w, self, next_fiber(w, self));
}

int gm__sim_park(gm__sim_block *b) __attribute__((alias("gm__sim_park_local")));

/* Device code outside a kernel body: the context of the thread running on this OS thread. */
const gm__sim_ctx *gm__sim_current_local(void)
{
    static const gm__sim_ctx none; /* outside a launch */
    sim_worker *w = tls_worker;
    gm__sim_ctx *c = NULL;

    if (w == NULL || w->current == NULL)
        return &none;
    c = &w->ctx;
    c->linear = w->pub.running;
    thread_xyz(w, c->linear, c);
    c->global_x = w->base_x + (int64_t)c->thread_idx[0];
    return c;
}

const gm__sim_ctx *gm__sim_current(void) __attribute__((alias("gm__sim_current_local")));

/* Entry of every fiber, fresh or started over: the kernel's loop of the current run, which
 * returns only when run_end unwinds it (then the fiber waits here for a later run). */
static void fiber_main(gm__fiber *gf)
{
    sim_fiber *self = (sim_fiber *)(void *)gf;
    sim_worker *w = self->owner;

    for (;;) {
        w->launch->kernel->block_fn(w->launch->args, &w->pub);
        (void)gm__fiber_switch(&self->fiber, &w->main, 0, SWITCH_GO);
    }
}

/* Set up the run on this worker: sizes, the context, dynamic shared memory. */
static gm_status run_begin(sim_worker *w, const gm__sim_launch *l)
{
    size_t dyn = (l->dynamic_shared_bytes + 63u) & ~(size_t)63u;
    uint32_t shift = l->warp_size == 64u ? 6u : 5u;

    if (dyn > w->dynamic_capacity) {
        unsigned char *p = aligned_alloc(64, dyn);

        if (p == NULL)
            return GM_ERR_NO_MEMORY;
        free(w->dynamic_shared);
        w->dynamic_shared = p;
        w->dynamic_capacity = dyn;
    }
    w->launch = l;
    w->nfree_low = w->nfree;
    w->status = GM_OK;
    w->message[0] = '\0';
    w->count = l->block[0] * l->block[1] * l->block[2];
    w->nwarps = (w->count + (1u << shift) - 1u) >> shift;
    w->pub.count = w->count;
    w->dim_x = l->block[0];
    w->dim_y = l->block[1];
    w->one_d = w->dim_x == w->count;
    w->pow2 = (w->dim_x & (w->dim_x - 1u)) == 0 && (w->dim_y & (w->dim_y - 1u)) == 0;
    w->x_shift = (uint32_t)__builtin_ctz(w->dim_x);
    w->y_shift = (uint32_t)__builtin_ctz(w->dim_y);
    w->warp_shift = shift;
    for (int i = 0; i < 3; i++) {
        w->ctx.block_dim[i] = l->block[i];
        w->ctx.grid_dim[i] = l->grid[i];
    }
    w->ctx.warp_size = l->warp_size;
    w->ctx.dynamic_shared = w->dynamic_shared;
    return GM_OK;
}

gm_status gm__sim_run_blocks(const gm__sim_launch *launch, gm__sim_claim_fn claim, void *user,
                             char *message, size_t message_size)
{
    sim_worker *w = worker_get();
    sim_fiber *f = NULL;
    gm_status status = GM_ERR_NO_MEMORY;

    if (w == NULL || run_begin(w, launch) != GM_OK)
        goto fail;
    w->claim = claim;
    w->claim_user = user;
    if (next_block(w) == 0)
        return GM_OK;
    f = fiber_take(w);
    if (f == NULL)
        goto fail;
    w->current = f;
    (void)gm__fiber_switch(&w->main, &f->fiber, 0, SWITCH_GO);
    status = w->status;
    if (status != GM_OK) {
        recycle_all(w);
        /* Out of memory: the fibers a huge block made before it failed would keep their
         * address space with this thread, and later launches and allocations could fail for
         * want of it; they go (later runs make the ones they need again). */
        if (status == GM_ERR_NO_MEMORY)
            release_fibers(w);
        snprintf(message, message_size, "%s", w->message);
        return status;
    }
    run_end(w);
    return GM_OK;
fail:
    snprintf(message, message_size,
             "kernel '%s': out of memory for the simulator's fibers (each thread of a block "
             "reserves a stack of %zu bytes of address space, GM_SIM_STACK_BYTES sets it, and "
             "a 1 MiB guard region below it)",
             launch->kernel->name, w != NULL ? w->stack_bytes : (size_t)0);
    return status;
}
