/*
 * The simulator's worker pool: a launch's blocks are claimed in chunks from
 * an atomic counter by the calling thread and by the pool's threads, each
 * running its blocks with gm__sim_run_blocks. The pool is process-wide,
 * started on the first launch with more than one block, and sized to the
 * online CPUs minus one (the caller works too), or GM_SIM_THREADS - 1. Its
 * threads are stopped and joined when the library is unloaded or the
 * process exits (a destructor), so that dlclose never leaves a thread
 * running unmapped code and leak checkers see no thread left behind; a
 * launch after that runs on the calling thread alone. A fork child has none
 * of the parent's pool threads: an atfork handler forgets them (and resets
 * the lock a parent thread may have held), so the child's launches run on
 * its calling thread and its exit joins nothing.
 *
 * The first failing block stops the launch: no new block starts, the
 * blocks already running finish, and its detail is returned.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim.h"

#define SIM_MAX_THREADS 256u
#define SIM_MAX_CHUNK   64u

typedef struct sim_job sim_job;

/* One launch being run. Fields below `lock` are guarded by the pool lock. */
struct sim_job {
    const gm__sim_launch *launch;
    uint64_t nblocks;
    uint64_t chunk;
    _Atomic uint64_t next;
    _Atomic int failed;
    int helpers;         /* pool threads working on the job */
    pthread_cond_t idle; /* helpers dropped to 0 */
    gm_status status;
    char message[GM__SIM_MESSAGE_MAX];
    sim_job *next_job;
};

/* A worker's current chunk of a job. */
typedef struct sim_cursor {
    sim_job *job;
    uint64_t cur;
    uint64_t end;
} sim_cursor;

static struct {
    pthread_once_t once;
    pthread_mutex_t lock;
    pthread_cond_t work;
    sim_job *jobs;
    unsigned threads; /* pool threads started */
    bool stopping;    /* the destructor asked the threads to end */
    pthread_t ids[SIM_MAX_THREADS];
} pool = {
    PTHREAD_ONCE_INIT, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, false, {0}};

unsigned gm__sim_thread_count(void)
{
    const char *text = getenv("GM_SIM_THREADS");
    long n = 0;

    if (text != NULL && text[0] != '\0') {
        char *end = NULL;

        errno = 0;
        n = strtol(text, &end, 10);
        if (errno != 0 || end == NULL || *end != '\0')
            n = 0;
    }
    if (n <= 0)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0)
        n = 1;
    return n > (long)SIM_MAX_THREADS ? SIM_MAX_THREADS : (unsigned)n;
}

/* The block index of linear block b (x fastest). */
static void block_coords(const gm__sim_launch *l, uint64_t b, uint32_t idx[3])
{
    if (l->grid[1] == 1u && l->grid[2] == 1u) { /* 1-D grids: no divisions */
        idx[0] = (uint32_t)b;
        idx[1] = idx[2] = 0;
        return;
    }
    idx[0] = (uint32_t)(b % l->grid[0]);
    idx[1] = (uint32_t)((b / l->grid[0]) % l->grid[1]);
    idx[2] = (uint32_t)(b / ((uint64_t)l->grid[0] * l->grid[1]));
}

/* gm__sim_claim_fn over a job: the next block of the cursor's chunk, or a new chunk. */
static int claim_block(void *user, uint32_t idx[3])
{
    sim_cursor *c = user;
    sim_job *job = c->job;

    if (c->cur >= c->end) {
        uint64_t start = 0;

        if (atomic_load_explicit(&job->failed, memory_order_relaxed) != 0)
            return 0;
        start = atomic_fetch_add_explicit(&job->next, job->chunk, memory_order_relaxed);
        if (start >= job->nblocks)
            return 0;
        c->cur = start;
        c->end = start + job->chunk < job->nblocks ? start + job->chunk : job->nblocks;
    }
    block_coords(job->launch, c->cur++, idx);
    return 1;
}

/* Run blocks of the job on this thread until none is left; keep the first failure. */
static void work_on(sim_job *job)
{
    sim_cursor cursor = {job, 0, 0};
    char message[GM__SIM_MESSAGE_MAX];
    gm_status status =
        gm__sim_run_blocks(job->launch, claim_block, &cursor, message, sizeof message);

    if (status == GM_OK)
        return;
    pthread_mutex_lock(&pool.lock);
    if (job->status == GM_OK) {
        job->status = status;
        snprintf(job->message, sizeof job->message, "%s", message);
    }
    atomic_store(&job->failed, 1);
    pthread_mutex_unlock(&pool.lock);
}

/* A job with blocks left to claim (pool lock held), or NULL. */
static sim_job *find_work(void)
{
    for (sim_job *j = pool.jobs; j != NULL; j = j->next_job) {
        if (atomic_load_explicit(&j->next, memory_order_relaxed) < j->nblocks &&
            atomic_load_explicit(&j->failed, memory_order_relaxed) == 0)
            return j;
    }
    return NULL;
}

static void *pool_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        sim_job *job = pool.stopping ? NULL : find_work();

        if (job == NULL && pool.stopping)
            break;
        if (job == NULL) {
            pthread_cond_wait(&pool.work, &pool.lock);
            continue;
        }
        job->helpers++;
        pthread_mutex_unlock(&pool.lock);
        work_on(job);
        pthread_mutex_lock(&pool.lock);
        if (--job->helpers == 0)
            pthread_cond_broadcast(&job->idle);
    }
    pthread_mutex_unlock(&pool.lock);
    return NULL;
}

/* In a fork child: the pool's threads stayed in the parent. */
static void pool_forget_in_child(void)
{
    (void)pthread_mutex_init(&pool.lock, NULL);
    (void)pthread_cond_init(&pool.work, NULL);
    pool.jobs = NULL;
    pool.threads = 0;
}

/* Start the pool threads (once); a thread that cannot start is simply missing. */
static void pool_start(void)
{
    unsigned want = gm__sim_thread_count() - 1u;

    if (want == 0 || pthread_atfork(NULL, NULL, pool_forget_in_child) != 0)
        return;
    for (unsigned i = 0; i < want && i < SIM_MAX_THREADS; i++) {
        if (pthread_create(&pool.ids[i], NULL, pool_main, NULL) != 0)
            break;
        pool.threads++;
    }
}

/* Library unload or process exit: end the pool threads (between jobs) and join them. */
static void __attribute__((destructor)) pool_stop(void)
{
    pthread_mutex_lock(&pool.lock);
    pool.stopping = true;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    for (unsigned i = 0; i < pool.threads; i++)
        (void)pthread_join(pool.ids[i], NULL);
}

static void job_unlink(sim_job *job)
{
    sim_job **p = &pool.jobs;

    while (*p != NULL && *p != job)
        p = &(*p)->next_job;
    if (*p == job)
        *p = job->next_job;
}

/* Run a multi-block launch with the pool's help. */
static gm_status run_pooled(sim_job *job)
{
    sim_job **tail = &pool.jobs;

    if (pthread_cond_init(&job->idle, NULL) != 0) {
        work_on(job);
        return job->status;
    }
    pthread_mutex_lock(&pool.lock);
    while (*tail != NULL)
        tail = &(*tail)->next_job;
    *tail = job;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    work_on(job);
    pthread_mutex_lock(&pool.lock);
    job_unlink(job);
    while (job->helpers > 0)
        pthread_cond_wait(&job->idle, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_cond_destroy(&job->idle);
    return job->status;
}

gm_status gm__sim_run(const char *fn, const gm__sim_launch *launch)
{
    sim_job job;
    uint64_t workers = 0;
    gm_status status = GM_OK;

    memset(&job, 0, sizeof job);
    job.launch = launch;
    job.nblocks = (uint64_t)launch->grid[0] * launch->grid[1] * launch->grid[2];
    job.status = GM_OK;
    if (job.nblocks > 1u)
        pthread_once(&pool.once, pool_start);
    workers = (uint64_t)pool.threads + 1u;
    job.chunk = job.nblocks / (workers * 16u);
    if (job.chunk < 1u)
        job.chunk = 1u;
    if (job.chunk > SIM_MAX_CHUNK)
        job.chunk = SIM_MAX_CHUNK;
    if (job.nblocks > 1u && pool.threads > 0u) {
        status = run_pooled(&job);
    } else {
        work_on(&job);
        status = job.status;
    }
    if (status != GM_OK)
        return gm__error(status, "%s: %s", fn, job.message);
    return GM_OK;
}
