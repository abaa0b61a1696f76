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
 * the kernel's fast path: started, not suspended, not running. Switches
 * go straight from fiber to fiber; the OS thread's own stack is returned to
 * only when there is no block left to run.
 */
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fiber.h"
#include "sim.h"

/* What a thread of the current block is doing. */
enum {
    T_RUN = 0,        /* running, not started, or returned */
    T_WAIT_BLOCK = 1, /* at gm_syncthreads / gm_barrier */
    T_WAIT_WAVE = 2,  /* at gm_wavebarrier */
    T_READY = 3       /* released from a barrier, not resumed yet */
};

#define READY_MASK (GM__SIM_MAX_THREADS - 1u)

typedef struct sim_worker sim_worker;

/* A pooled fiber and the simulated thread it holds while suspended. */
typedef struct sim_fiber {
    gm__fiber fiber; /* first: the fiber entry gets a gm__fiber * */
    sim_worker *owner;
    int in_use; /* holds a thread, or runs the loop; else parked in the free list */
} sim_fiber;

/* Per OS thread: its fibers and the block it is running. */
struct sim_worker {
    gm__fiber main;
    sim_fiber *current;
    sim_fiber **all;
    sim_fiber **free;
    uint32_t nall;
    uint32_t nfree;
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
    uint32_t warp_shift; /* log2 of the warp size */
    uint32_t waiting;    /* threads suspended at a barrier */
    uint32_t block_arrived;
    uint32_t wave_waiting;
    uint32_t warp_arrived[GM__SIM_MAX_WARPS];
    uint32_t ready_head;
    uint32_t ready_tail;
    uint32_t ready[GM__SIM_MAX_THREADS];
    sim_fiber *thread_fiber[GM__SIM_MAX_THREADS];
    uint32_t tid[GM__SIM_MAX_THREADS][3]; /* indices of the threads waiting */
    uint8_t state[GM__SIM_MAX_THREADS];

    gm_status status;
    char message[GM__SIM_MESSAGE_MAX];
};

GM_API GM__THREAD_LOCAL gm__sim_tls gm__sim GM__TLS_MODEL;

static _Thread_local sim_worker *tls_worker = NULL;
static pthread_key_t worker_key;
static pthread_once_t worker_key_once = PTHREAD_ONCE_INIT;

static void fiber_main(gm__fiber *gf);

/* ------------------------------------------------------- worker state */

/* Thread exit: unmap the fibers (none is running: the thread is on its own stack). */
static void worker_destroy(void *arg)
{
    sim_worker *w = arg;

    for (uint32_t i = 0; i < w->nall; i++) {
        gm__fiber_destroy(&w->all[i]->fiber);
        free(w->all[i]);
    }
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
    w->stack_bytes = gm__fiber_default_stack_bytes();
    (void)pthread_setspecific(worker_key, w);
    tls_worker = w;
    return w;
}

/* A parked or new fiber; NULL when memory is short. */
static sim_fiber *fiber_take(sim_worker *w)
{
    sim_fiber *f = NULL;

    if (w->nfree > 0) {
        f = w->free[--w->nfree];
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
    f->in_use = 1;
    return f;
}

/* Park a fiber in the free list (it stays where it stands and loops on resume). */
static void fiber_park(sim_worker *w, sim_fiber *f)
{
    f->in_use = 0;
    w->free[w->nfree++] = f;
}

/*
 * After a failed block every fiber starts over: those holding threads, the
 * one that failed (which may have been parked before it found the block
 * stuck), and the parked ones too (simplest: all are at rest now).
 */
static void recycle_all(sim_worker *w)
{
    w->nfree = 0;
    for (uint32_t i = 0; i < w->nall; i++) {
        gm__fiber_reset(&w->all[i]->fiber);
        fiber_park(w, w->all[i]);
    }
    memset(w->state, T_RUN, sizeof(w->state));
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

/* Every thread waits at the block barrier: make them all ready, in thread order. */
static void release_block(sim_worker *w)
{
    for (uint32_t t = 0; t < w->count; t++) {
        w->state[t] = T_READY;
        ready_push(w, t);
    }
    w->waiting -= w->block_arrived;
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

    warp_lanes(w, wi, &lo, &hi);
    if (w->warp_arrived[wi] == 0 || hi > w->pub.next)
        return 0;
    for (uint32_t t = lo; t < hi; t++) {
        if (w->state[t] != T_WAIT_WAVE && w->state[t] != T_RUN)
            return 0;
    }
    return 1;
}

/* Make the waiting lanes of warp wi ready, in lane order. */
static void release_warp(sim_worker *w, uint32_t wi)
{
    uint32_t lo = 0, hi = 0;

    warp_lanes(w, wi, &lo, &hi);
    for (uint32_t t = lo; t < hi; t++) {
        if (w->state[t] == T_WAIT_WAVE) {
            w->state[t] = T_READY;
            ready_push(w, t);
        }
    }
    w->waiting -= w->warp_arrived[wi];
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

/* Leave for the OS thread's stack for good (this fiber is abandoned or parked). */
static void to_main(sim_worker *w, sim_fiber *self, int leaving)
{
    w->current = NULL;
    gm__fiber_switch(&self->fiber, &w->main, leaving);
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
    to_main(w, self, 1);
}

/* Run `to` instead of `self` (no switch when they are the same); `to` is current after. */
static inline void switch_to(sim_worker *w, sim_fiber *self, sim_fiber *to)
{
    if (to == self)
        return;
    w->current = to;
    gm__fiber_switch(&self->fiber, &to->fiber, 0);
}

/*
 * The fiber to run instead of `self` (which waits at a barrier, or has no
 * thread): the next ready thread, else a new thread on a fresh fiber, else,
 * when every thread waits at the block barrier, its first thread after the
 * release. Fails the block (never returning) when none can run.
 */
static __attribute__((noinline)) sim_fiber *pick_next(sim_worker *w, sim_fiber *self)
{
    for (;;) {
        if (w->ready_head != w->ready_tail)
            return w->thread_fiber[w->ready[w->ready_head++ & READY_MASK]];
        if (w->pub.next < w->pub.count) {
            sim_fiber *f = fiber_take(w);

            if (f != NULL)
                return f;
            fail_block(w, self, GM_ERR_NO_MEMORY);
        } else if (w->wave_waiting > 0 && release_stalled_warps(w) != 0) {
            continue;
        } else if (w->block_arrived == w->count) {
            release_block(w);
        } else {
            fail_block(w, self, GM_ERR_BARRIER_DIVERGENCE);
        }
    }
}

/* `self` cannot go on: run another fiber; returns when `self` is resumed. */
static inline void schedule(sim_worker *w, sim_fiber *self)
{
    sim_fiber *to = NULL;

    if (w->ready_head != w->ready_tail) {
        to = w->thread_fiber[w->ready[w->ready_head++ & READY_MASK]];
    } else {
        to = pick_next(w, self);
    }
    switch_to(w, self, to);
}

/*
 * Note that thread t (the running one) waits: its indices go to the dense
 * per-thread array, not to the fiber, so that resuming touches only the
 * fiber's register line and arrays walked in thread order. A thread of the
 * barrier-free fast loop ends that loop: the threads after it are claimed
 * one at a time again.
 */
static inline void suspend_current(sim_worker *w, sim_fiber *self, uint32_t t, uint8_t state)
{
    if (gm__sim.fast != 0u) {
        gm__sim.fast = 0u;
        w->pub.next = t + 1u;
    }
    w->pub.barrier_seen = 1u;
    if (w->pub.dim_x != w->count) /* 1-D blocks: the index is t itself */
        memcpy(w->tid[t], gm__sim.thread_idx, sizeof(w->tid[t]));
    w->thread_fiber[t] = self;
    w->state[t] = state;
    w->waiting++;
}

/* Thread t runs again. */
static inline void resume_current(sim_worker *w, uint32_t t)
{
    w->state[t] = T_RUN;
    if (w->pub.dim_x != w->count)
        memcpy(gm__sim.thread_idx, w->tid[t], sizeof(w->tid[t]));
    else
        gm__sim.thread_idx[0] = t; /* y and z stay 0 in a 1-D block */
}

/* The running thread's linear index. */
static inline uint32_t current_thread(const sim_worker *w)
{
    if (w->pub.dim_x == w->count)
        return gm__sim.thread_idx[0];
    return gm__sim.thread_idx[0] +
           w->pub.dim_x * (gm__sim.thread_idx[1] + w->pub.dim_y * gm__sim.thread_idx[2]);
}

void gm__sim_barrier_local(unsigned flags)
{
    sim_worker *w = gm__sim.worker;
    sim_fiber *self = NULL;
    uint32_t t = 0;

    /* Workgroup scope on one OS thread: a compiler barrier orders both memories, so the
     * flags need nothing more (see gpumem/kernel.h). */
    (void)flags;
    atomic_signal_fence(memory_order_seq_cst);
    if (w == NULL)
        return;
    self = w->current;
    t = current_thread(w);
    suspend_current(w, self, t, T_WAIT_BLOCK);
    w->block_arrived++;
    schedule(w, self);
    resume_current(w, t);
    atomic_signal_fence(memory_order_seq_cst);
}

void gm__sim_wavebarrier_local(void)
{
    sim_worker *w = gm__sim.worker;
    sim_fiber *self = NULL;
    uint32_t t = 0, wi = 0;

    atomic_signal_fence(memory_order_seq_cst);
    if (w == NULL)
        return;
    self = w->current;
    t = current_thread(w);
    suspend_current(w, self, t, T_WAIT_WAVE);
    wi = t >> w->warp_shift;
    w->warp_arrived[wi]++;
    w->wave_waiting++;
    /* The warp's last lane releases it (lanes start in order). */
    if ((t + 1u == w->count || ((t + 1u) & ((1u << w->warp_shift) - 1u)) == 0) &&
        warp_complete(w, wi))
        release_warp(w, wi);
    schedule(w, self);
    resume_current(w, t);
    atomic_signal_fence(memory_order_seq_cst);
}

/* The exported names, for kernels compiled outside the library. */
void gm__sim_barrier(unsigned flags) __attribute__((alias("gm__sim_barrier_local")));
void gm__sim_wavebarrier(void) __attribute__((alias("gm__sim_wavebarrier_local")));

/* ------------------------------------------------------------ blocks */

/* Reset the block state for block_idx and point the device-side indices at it. */
static void block_begin(sim_worker *w, const uint32_t block_idx[3])
{
    gm__sim_block *b = &w->pub;

    b->next = 0;
    b->nx = b->ny = b->nz = 0;
    b->barrier_seen = 0;
    gm__sim.fast = 0;
    w->waiting = 0;
    memset(w->warp_arrived, 0, w->nwarps * sizeof(w->warp_arrived[0]));
    w->block_arrived = 0;
    w->wave_waiting = 0;
    w->ready_head = w->ready_tail = 0;
    for (int i = 0; i < 3; i++) {
        w->block_idx[i] = block_idx[i];
        gm__sim.block_idx[i] = block_idx[i];
        gm__sim.thread_idx[i] = 0;
    }
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
    return w->waiting == 0 && w->ready_head == w->ready_tail && w->pub.next >= w->pub.count;
}

/* Entry of every fiber: run the kernel's thread loop, block after block. */
static void fiber_main(gm__fiber *gf)
{
    sim_fiber *self = (sim_fiber *)(void *)gf;
    sim_worker *w = self->owner;

    for (;;) {
        w->launch->kernel->block_fn(w->launch->args, &w->pub);
        if (block_finished(w)) {
            if (next_block(w) != 0)
                continue;
            fiber_park(w, self);
            to_main(w, self, 0);
            continue;
        }
        fiber_park(w, self);
        schedule(w, self);
    }
}

/* Set up the run on this worker: sizes, TLS, dynamic shared memory. */
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
    w->status = GM_OK;
    w->message[0] = '\0';
    w->count = l->block[0] * l->block[1] * l->block[2];
    w->nwarps = (w->count + (1u << shift) - 1u) >> shift;
    w->pub.count = w->count;
    w->pub.dim_x = l->block[0];
    w->pub.dim_y = l->block[1];
    w->warp_shift = shift;
    for (int i = 0; i < 3; i++) {
        gm__sim.block_dim[i] = l->block[i];
        gm__sim.grid_dim[i] = l->grid[i];
    }
    gm__sim.warp_size = l->warp_size;
    gm__sim.dynamic_shared = w->dynamic_shared;
    gm__sim.block = &w->pub;
    gm__sim.worker = w;
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
    gm__fiber_switch(&w->main, &f->fiber, 0);
    gm__sim.worker = NULL;
    gm__sim.block = NULL;
    status = w->status;
    if (status != GM_OK) {
        recycle_all(w);
        snprintf(message, message_size, "%s", w->message);
    }
    return status;
fail:
    gm__sim.worker = NULL;
    snprintf(message, message_size, "kernel '%s': out of memory for the simulator's fibers",
             launch->kernel->name);
    return status;
}
