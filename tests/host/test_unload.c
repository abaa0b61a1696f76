/*
 * Unloading the library after multi-block launches: dlopen libgpumem (path
 * in argv[1]), run a launch whose blocks the simulator's pool threads help
 * with, destroy the context, dlclose. The pool's threads must be gone then
 * (the library's destructor stops and joins them): before, they stayed
 * parked in unmapped code and crashed the process now and then, and leak
 * checkers reported their memory. Checked by counting this process's
 * threads in /proc/self/task: one (the main thread) after dlclose. A fork
 * child of the process, which has none of the pool's threads, exits cleanly.
 * Before the context goes, a thread queues work on its per-thread stream
 * and exits: that stream's worker must be joined by gm_context_destroy at
 * the latest (no more threads after it than before that thread), not left
 * running library code that dlclose unmaps.
 * Not a cmocka test: the program must not link the library it unloads.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gpumem/gpumem.h>

#include "gm_sanitizer.h"
#include "gm_threads.h"

#define SKIP 77

typedef gm_status (*context_create_fn)(const gm_context_options *, gm_context **);
typedef void (*context_destroy_fn)(gm_context **);
typedef gm_status (*device_array_fn)(gm_context *, int, const int64_t *, gm_dtype, gm_order,
                                     gm_array **);
typedef void (*array_release_fn)(gm_array **);
typedef const gm_ndview *(*array_view_fn)(const gm_array *);
typedef gm_status (*kernel_find_fn)(gm_context *, const char *, gm_kernel **);
typedef gm_stream *(*per_thread_fn)(gm_context *);
typedef gm_status (*memset_fn)(gm_array *, int, gm_stream *);
typedef gm_status (*add_callback_fn)(gm_stream *, gm_stream_callback, void *);
typedef gm_status (*launch_fn)(gm_kernel *, gm_dim3, gm_dim3, size_t, gm_stream *, int,
                               const gm_arg *);

/* Look a function up into *fn_p (through memcpy: ISO C has no object-to-function cast). */
static void sym(void *lib, const char *name, void *fn_p, size_t fn_bytes)
{
    void *p = dlsym(lib, name);

    if (p == NULL || fn_bytes != sizeof(p)) {
        fprintf(stderr, "test_unload: %s not found: %s\n", name, dlerror());
        exit(1);
    }
    memcpy(fn_p, &p, fn_bytes);
}

#define SYM(lib, name, fn) sym((lib), (name), &(fn), sizeof(fn))

/* A key whose destructor makes a thread's exit slow: set by a callback on a stream's worker. */
static pthread_key_t slow_exit;

static void slow_destructor(void *value)
{
    const struct timespec pause = {0, 200 * 1000 * 1000};

    (void)value;
    nanosleep(&pause, NULL);
}

static void make_exit_slow(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    (void)user;
    (void)pthread_setspecific(slow_exit, (void *)1);
}

/* What a short-lived thread does: a memset and a callback on its per-thread stream. */
typedef struct thread_job {
    per_thread_fn per_thread;
    memset_fn set;
    add_callback_fn add_callback;
    gm_context *ctx;
    gm_array *a;
    gm_status status;
} thread_job;

static void *memset_and_exit(void *arg)
{
    thread_job *job = arg;
    gm_stream *mine = job->per_thread(job->ctx);

    job->status = mine == NULL ? GM_ERR_INTERNAL : job->set(job->a, 0, mine);
    if (job->status == GM_OK)
        job->status = job->add_callback(mine, make_exit_slow, NULL);
    return NULL;
}

/* A pointer argument at a device array's first element. */
static gm_arg array_arg(array_view_fn view, const gm_array *a)
{
    const gm_ndview *v = view(a);

    return gm_arg_ptr((char *)v->data + v->offset);
}

int main(int argc, char **argv)
{
    const int64_t n = 1 << 16;
    void *lib = NULL;
    gm_context *ctx = NULL;
    gm_array *x = NULL, *y = NULL, *out = NULL;
    gm_kernel *add = NULL;
    int threads = 0;

#if defined(GM_TEST_TSAN) /* it starts a thread of its own once the program has threads */
    fprintf(stderr, "test_unload: skipped under ThreadSanitizer (its own thread is counted)\n");
    return SKIP;
#endif
    if (argc < 2 || gm_test_thread_count() != 1) {
        fprintf(stderr, "test_unload: needs the library path and /proc/self/task\n");
        return SKIP;
    }
    setenv("GM_BACKEND", "host", 1);
    setenv("GM_SIM_THREADS", "4", 1); /* three pool threads, whatever the machine */
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "test_unload: dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    {
        context_create_fn create = NULL;
        context_destroy_fn destroy = NULL;
        device_array_fn device_array = NULL;
        array_release_fn release = NULL;
        array_view_fn view = NULL;
        kernel_find_fn find = NULL;
        launch_fn launch = NULL;
        gm_arg args[4];

        SYM(lib, "gm_context_create", create);
        SYM(lib, "gm_context_destroy", destroy);
        SYM(lib, "gm_device_array", device_array);
        SYM(lib, "gm_array_release", release);
        SYM(lib, "gm_array_view", view);
        SYM(lib, "gm_kernel_find", find);
        SYM(lib, "gm_launch", launch);
        if (create(NULL, &ctx) != GM_OK || device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &x) ||
            device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &y) ||
            device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &out) ||
            find(ctx, "add_f32", &add) != GM_OK) {
            fprintf(stderr, "test_unload: setting up failed\n");
            return 1;
        }
        args[0] = array_arg(view, x);
        args[1] = array_arg(view, y);
        args[2] = array_arg(view, out);
        args[3] = gm_arg_i64(n);
        if (launch(add, gm_dim3_make(256, 1, 1), gm_dim3_make(256, 1, 1), 0, NULL, 4, args) !=
            GM_OK) {
            fprintf(stderr, "test_unload: the launch failed\n");
            return 1;
        }
        threads = gm_test_thread_count();
        if (threads < 2) {
            fprintf(stderr, "test_unload: no pool thread ran the launch (%d threads)\n", threads);
            return 1;
        }
        /* A thread's per-thread stream (a worker thread) that goes after the thread exits:
         * its worker is joined by the context's end at the latest, so no thread of the
         * context is left running library code when the library is unloaded. The worker's
         * exit is made slow (200 ms, by a key its callback set) and has begun before the
         * context goes (the 50 ms pause): a worker left running shows in the count. */
        {
            thread_job job = {NULL, NULL, NULL, ctx, out, GM_ERR_INTERNAL};
            const struct timespec pause = {0, 50 * 1000 * 1000};
            pthread_t t;

            SYM(lib, "gm_per_thread_default_stream", job.per_thread);
            SYM(lib, "gm_array_memset", job.set);
            SYM(lib, "gm_stream_add_callback", job.add_callback);
            if (pthread_key_create(&slow_exit, slow_destructor) != 0 ||
                pthread_create(&t, NULL, memset_and_exit, &job) != 0 ||
                pthread_join(t, NULL) != 0 || job.status != GM_OK) {
                fprintf(stderr, "test_unload: the per-thread stream's work failed\n");
                return 1;
            }
            nanosleep(&pause, NULL);
        }
        release(&x);
        release(&y);
        release(&out);
        destroy(&ctx);
        if (gm_test_thread_count() > threads) {
            fprintf(stderr,
                    "test_unload: %d threads after gm_context_destroy (%d before the "
                    "per-thread stream's thread)\n",
                    gm_test_thread_count(), threads);
            return 1;
        }
    }
    {
        /* A fork child has none of the pool's threads: its exit must not join them (a join
         * of the parent's thread ids crashed or hung the child). */
        int wstatus = 0;
        pid_t child = fork();

        if (child == 0) {
            alarm(20); /* a hang fails the test instead of stalling it */
            /* dlclose runs the library's destructor; _exit then skips LeakSanitizer's check
             * at exit, which can hang in the fork child of a threaded process (2 runs in 40
             * here; none with detect_leaks=0) */
            _exit(dlclose(lib) == 0 ? 0 : 2);
        }
        if (child < 0 || waitpid(child, &wstatus, 0) != child || !WIFEXITED(wstatus) ||
            WEXITSTATUS(wstatus) != 0) {
            fprintf(stderr, "test_unload: the fork child's exit failed (status 0x%x)\n",
                    (unsigned)wstatus);
            return 1;
        }
    }
    if (dlclose(lib) != 0) {
        fprintf(stderr, "test_unload: dlclose: %s\n", dlerror());
        return 1;
    }
    threads = gm_test_thread_count_settled();
    if (threads != 1) {
        fprintf(stderr, "test_unload: %d threads left after dlclose (expected 1)\n", threads);
        return 1;
    }
    printf("test_unload: pool threads joined at unload\n");
    return 0;
}
