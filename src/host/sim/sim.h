/*
 * The kernel simulator: runs a host-compiled kernel (gpumem/kernel.h's host
 * expansion) with real block and warp semantics.
 *
 *   - blocks are spread over a pool of worker threads (the calling thread
 *     works too); a block runs start to finish on one OS thread, so static
 *     shared memory (thread-local arrays) is per block;
 *   - the threads of a block run as a plain loop on one fiber until one
 *     reaches a barrier; from then on each suspended thread keeps its own
 *     fiber (sim_block.c), taken on demand from a pool per OS thread (a
 *     fiber whose thread returned parks in the kernel's loop, ready to start
 *     another; when the run ends its fibers leave the loop, so that none
 *     keeps a frame of the kernel between launches and the kernel's library
 *     may be dlclose'd after gm_module_unload); fiber stacks are 512 KiB
 *     (GM_SIM_STACK_BYTES), reserved and committed only as touched; a 1-D
 *     block whose first thread returns without a barrier
 *     runs the rest as a bookkeeping-free, vectorizable loop over the global
 *     index (gpumem/kernel.h's GM_KERNEL);
 *   - a kernel body reads its indices from a hidden parameter, not from
 *     thread-local storage; device code outside a body asks the scheduler
 *     (gm__sim_current);
 *   - gm_syncthreads / gm_barrier wait for every thread of the block,
 *     gm_wavebarrier for the live threads of the calling warp (32 or 64);
 *   - a barrier that cannot complete fails the launch with
 *     GM_ERR_BARRIER_DIVERGENCE naming the kernel and block.
 *
 * Memory for the simulator's own long-lived state (worker pool, per-thread
 * fiber pools) comes from the C library and mmap, not from the bookkeeping
 * allocator: it lives as long as the process's threads, beyond any context.
 */
#ifndef GPUMEM_SRC_HOST_SIM_SIM_H
#define GPUMEM_SRC_HOST_SIM_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "gpumem/kernel.h"

/* Most threads per block and warps per block the simulator supports. */
#define GM__SIM_MAX_THREADS 1024u
#define GM__SIM_MAX_WARPS   32u

/* Size of the detail kept for a failed block. */
#define GM__SIM_MESSAGE_MAX 320

/* One launch. */
typedef struct gm__sim_launch {
    const gm_host_kernel *kernel;
    void *const *args; /* kernel->nparams pointers to argument values */
    uint32_t grid[3];  /* blocks, each >= 1 */
    uint32_t block[3]; /* threads, product <= GM__SIM_MAX_THREADS */
    size_t dynamic_shared_bytes;
    uint32_t warp_size; /* 32 or 64 */
} gm__sim_launch;

/*
 * Run a launch to completion on the calling thread and the worker pool.
 * Returns GM_OK, or the first failure (GM_ERR_BARRIER_DIVERGENCE,
 * GM_ERR_NO_MEMORY) with its detail recorded by gm__error on the calling
 * thread, starting with `fn`.
 */
gm_status gm__sim_run(const char *fn, const gm__sim_launch *launch);

/* ---- sim_block.c: blocks on the calling OS thread ---- */

/* Hand out the next block of a run: 1 with its index, 0 when none is left. */
typedef int (*gm__sim_claim_fn)(void *user, uint32_t block_idx[3]);

/*
 * Run blocks of `launch` on the calling thread, as long as `claim` gives
 * one. On failure the run stops and the detail ("kernel 'k' block (x,y,z):
 * ...") is written to message.
 */
gm_status gm__sim_run_blocks(const gm__sim_launch *launch, gm__sim_claim_fn claim, void *user,
                             char *message, size_t message_size);

/* Workers in the pool plus the caller: GM_SIM_THREADS, else the online CPUs. */
unsigned gm__sim_thread_count(void);

#endif /* GPUMEM_SRC_HOST_SIM_SIM_H */
