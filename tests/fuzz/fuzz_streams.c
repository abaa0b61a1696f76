/*
 * Stateful libFuzzer target for streams, events, callbacks, host
 * registration, foreign memory and DLPack on the host backend.
 *
 * One context per input (its simulated device 64 MiB, or 64 KiB to 1 MiB
 * so that allocations run out of memory); the rest of the input decodes into
 * up to MAX_OPS operations (op_* below) on 1-D arrays (device, managed,
 * pinned, foreign host memory, a device array re-wrapped as foreign memory,
 * DLPack imports of exported arrays; 1 to 64 elements, or 64 KiB to 4 MiB
 * now and then) and host scratch buffers, with asynchronous copies (host to
 * device, device to host, device to device, through gm_map's device views),
 * fills, memsets and launches of a kernel (dst = src + k bytewise, or in
 * place, over device and managed arrays) on up to 14 streams: the default
 * stream (asked for as gm_default_stream, gm_legacy_default_stream or a
 * NULL event stream), the per-thread default stream and created blocking
 * and non-blocking streams.
 *
 * The model orders work only as the API promises. Every stream item
 * (copies, fills, event records and waits, callbacks) gets a vector clock:
 * FIFO on its stream, the clocks of waited-for events, and the legacy rule
 * (an item on the default stream follows the earlier items of the live
 * blocking streams, and theirs follow its earlier items). The host knows an
 * item finished after synchronizing its stream (gm_stream_synchronize, the
 * end of an auto_synchronize scope, gm_stream_query returning GM_OK), an
 * event recorded after it (gm_event_synchronize, gm_event_query), or the
 * context. Before an operation touches a buffer that earlier work still
 * writes (or reads, for a write), the fuzzer orders the two as the input
 * says: an event recorded on the other stream and waited for on this one,
 * or one of those synchronizations; work the model finds already ordered
 * (FIFO, the legacy rule, earlier waits) is left as it is. Then, checked
 * against the model:
 *
 *   - contents: a copy to the host is compared with the model's bytes once
 *     the host knows it finished (and inside callbacks that follow it), a
 *     buffer read back (gm_copy, or directly for pinned and scratch memory)
 *     equals the model;
 *   - events: query and synchronize agree with what the host knows, the
 *     elapsed time between two completed timing events is >= 0 when the
 *     second's record followed the first's, bad event calls fail as
 *     documented;
 *   - callbacks: each runs once, with GM_OK, after every callback that
 *     precedes it in the model's order (FIFO per stream, and across streams
 *     through events and the legacy rule), sees the copies to the host that
 *     precede it, and may release an array; after a synchronize, every
 *     callback before it has run;
 *   - auto_synchronize: ending the outermost scope leaves the stream idle
 *     (gm_stream_query is GM_OK) and its copies verifiable; an end with none
 *     open is GM_ERR_STATE;
 *   - host scopes: gm_pin / gm_map / gm_register of scratch buffers used by
 *     asynchronous copies, registering twice is GM_ERR_STATE and changes
 *     nothing, a scope ends after its work (or, ended early, waits for it);
 *   - foreign memory: the owner's release runs exactly once, at the last
 *     release (at the next flush when a callback released it), never while
 *     work queued on the memory can still use it (the release frees host
 *     memory, so ASan sees a late copy);
 *   - DLPack: an imported export shares memory with its array, and the
 *     export's deleter runs exactly once, when the import's last array goes
 *     (or when the consumer drops an unimported export);
 *   - memory: an allocation fails exactly when it does not fit in the free
 *     device memory even after the flush-and-retry (free memory as the
 *     model counts it), with GM_ERR_OUT_OF_DEVICE_MEMORY, a message and
 *     nothing written; nothing is logged at warn or error level; at the end
 *     no device memory is in use.
 *
 * A broken invariant prints what broke and aborts. FUZZ_STREAMS_TRACE=1
 * prints each operation. Run: GM_FUZZ_TARGET=fuzz_streams
 * tests/fuzz/run_fuzz.sh [SECONDS].
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_TARGET "fuzz_streams"
#include "fuzz_model.h"
#include "fuzz_reader.h"
#include "gpumem/dlpack.h"
#include "gpumem/kernel.h"
#include "gpumem/launch.h"
#include "gpumem/runtime.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_OPS     96
#define NSID        16 /* stream identities per input: legacy, per-thread, 14 created */
#define ID_LEGACY   0
#define ID_PTD      1
#define MAX_ITEMS   1024 /* items per stream */
#define MAX_BUFS    160
#define MAX_HANDLES 12
#define MAX_CHECKS  256
#define MAX_CBS     128
#define MAX_OWNERS  32
#define NEVENTS     4
#define NSCRATCH    4
#define SCRATCH     ((4 << 20) + 4096)
#define BIG_BUDGET  (12 << 20) /* bytes of large arrays per input */
#define DEVICE_MEM  (1 << 26)

static const gm_dtype dtypes[] = {GM_UINT8, GM_INT16, GM_FLOAT32, GM_FLOAT64, GM_COMPLEX128};
#define NDTYPES (int)(sizeof dtypes / sizeof dtypes[0])

typedef struct vclock {
    int32_t c[NSID];
} vclock;

typedef enum skind { S_LEGACY, S_PTD, S_CREATED } skind;

/* One stream identity: its handle, items issued, the clock of its next item. */
typedef struct mstream {
    gm_stream *h;
    skind kind;
    bool blocking;
    bool alive;
    int n;
    vclock vc;
    int auto_depth;
} mstream;

typedef enum bkind { B_SCRATCH, B_DEVICE, B_MANAGED, B_PINNED, B_FOREIGN_HOST } bkind;

/* A buffer: contents, who references it, and the stream work still touching it. */
typedef struct mbuf {
    uintptr_t base;
    int64_t bytes;
    bkind kind;
    int w_id; /* last writer (w_seq 0: the host, finished) */
    int32_t w_seq;
    int32_t r_seq[NSID];  /* last read per stream since that write (copies) */
    int32_t cb_seq[NSID]; /* last callback per stream reading it since that write */
    unsigned gen;         /* scratch: writes so far */
    gm_host_scope *scope;
    int scope_kind;  /* 0 pin, 1 map, 2 register */
    gm_ndview dview; /* gm_map's device view */
    unsigned char *img;
    unsigned char *known;
} mbuf;

/* A buffer of the library (what an array's references keep): an allocation, or foreign
 * memory (an import) over some memory. */
typedef struct group {
    int mem;
    bool gone;
    int arrays; /* references the main thread holds (arrays, owners, exports) */
    int cbrefs; /* references callbacks hold that the host has not seen go */
    int64_t charge;
    int owner; /* foreign owner record, or -1 */
} group;

typedef struct handle {
    gm_array *a;
    int buf; /* memory */
    int grp;
    int refs;
} handle;

/* A copy to a scratch buffer: what bytes [lo, hi) must hold once it ran. */
typedef struct hcheck {
    int id;
    int32_t seq;
    int scratch;
    unsigned gen;
    int64_t lo, hi;
    unsigned char *expect;
    unsigned char *care;
    bool done;
} hcheck;

/* A stream callback: its place, what it checks and what it releases. */
typedef struct cbrec {
    int id;
    int32_t seq;
    vclock clk;
    int nchecks;
    int checks[8];
    gm_stream *handle;
    gm_array *release;
    int release_grp;
    _Atomic int ran;
    _Atomic int status;
    bool settled;
} cbrec;

/* Foreign memory's owner, or a DLPack export. */
typedef struct owner {
    bool dlpack;
    _Atomic int calls;
    void *mem; /* foreign host memory (freed by the release) */
    int64_t bytes;
    gm_array *device; /* foreign device memory: the array that owns it */
    DLManagedTensorVersioned *tensor;
    void (*deleter)(DLManagedTensorVersioned *);
    int hold_grp;          /* the group whose reference it holds, -1: none */
    bool accounted;        /* that reference is gone in the model */
    bool last_in_callback; /* the last array may go in a callback: due at a flush */
    bool due;              /* the release must have run */
} owner;

typedef struct mevent {
    gm_event *e;
    bool timing;
    bool recorded;
    int id;
    int32_t seq;
    vclock clk;
} mevent;

typedef struct model {
    gm_context *ctx;
    int64_t device_total;
    int depth; /* defer_cleanup */
    mstream s[NSID];
    int nids;
    vclock done; /* what the host knows finished */
    mbuf bufs[MAX_BUFS];
    int nbufs;
    group groups[MAX_BUFS];
    int ngroups;
    handle h[MAX_HANDLES];
    hcheck checks[MAX_CHECKS];
    int nchecks;
    cbrec cbs[MAX_CBS];
    int ncbs;
    owner owners[MAX_OWNERS];
    int nowners;
    mevent ev[NEVENTS];
    gm_event *sync_ev;
    int64_t big; /* bytes of large arrays so far */
    const uint8_t *mode;
    reader *r;
} model;

static vclock hist[NSID][MAX_ITEMS];
static unsigned char scratch[NSCRATCH][SCRATCH];
static unsigned char scratch_img[NSCRATCH][SCRATCH];
static unsigned char scratch_known[NSCRATCH][SCRATCH];
static int64_t scratch_hw[NSCRATCH]; /* bytes of scratch_known that may be set */
static unsigned char readback[SCRATCH];
static model M;
static const gm_image_set fz_set; /* the fuzzer's kernel (op_kernel) */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_setup("GM_HOST_PINNED_MEMORY", "FUZZ_STREAMS_TRACE");
    if (gm_register_image_set(&fz_set) != GM_OK)
        fail("gm_register_image_set: %s", gm_last_error_message());
    return 0;
}

/* A failing call: the documented status and a message. */
static void expect_error(gm_status got, gm_status want, const char *call)
{
    if (got != want)
        fail("%s returned %s, expected %s (%s)", call, gm_status_name(got), gm_status_name(want),
             gm_last_error_message());
    if (gm_last_error_message()[0] == '\0')
        fail("%s returned %s with an empty gm_last_error_message()", call, gm_status_name(got));
    gm_clear_error(); /* seen: expect_status checks that later successes leave none */
}

/* ---------------------------------------------------------------- clocks */

static void join(vclock *a, const vclock *b)
{
    for (int i = 0; i < NSID; i++)
        if (b->c[i] > a->c[i])
            a->c[i] = b->c[i];
}

/* The clock the next item on stream id would get (FIFO, its waits, the legacy rule). */
static vclock next_clock(const model *m, int id)
{
    const mstream *st = &m->s[id];
    vclock c = st->vc;

    if (st->kind == S_LEGACY) {
        for (int t = 0; t < m->nids; t++)
            if (t != id && m->s[t].alive && m->s[t].blocking && m->s[t].n > 0)
                join(&c, &hist[t][m->s[t].n]);
    } else if (st->blocking && m->s[ID_LEGACY].n > 0) {
        join(&c, &hist[ID_LEGACY][m->s[ID_LEGACY].n]);
    }
    return c;
}

/* Account for one item queued on stream id (after `extra`, an event's clock); its number. */
static int32_t issue(model *m, int id, const vclock *extra)
{
    mstream *st = &m->s[id];
    vclock c = st->vc;

    /* an event wait is ordered by FIFO and the event only (whether it is legacy work that
     * waits for the blocking streams is not promised) */
    if (extra != NULL)
        join(&c, extra);
    else
        c = next_clock(m, id);
    if (st->n + 1 >= MAX_ITEMS)
        fail("model: too many items on one stream");
    c.c[id] = ++st->n;
    hist[id][st->n] = c;
    st->vc = c;
    return st->n;
}

static bool finished(const model *m, int id, int32_t seq)
{
    return seq <= m->done.c[id];
}

/* ------------------------------------------------------------- settling */

static void verify_check(const hcheck *c, const char *where)
{
    const unsigned char *mem = scratch[c->scratch];

    for (int64_t j = c->lo; j < c->hi; j++)
        if (c->care[j - c->lo] && mem[j] != c->expect[j - c->lo])
            fail("%s: scratch %d byte %lld after a copy to the host (stream %d item %d) is %u, "
                 "expected %u",
                 where, c->scratch, (long long)j, c->id, (int)c->seq, mem[j], c->expect[j - c->lo]);
}

static void group_unref(model *m, int g);

/*
 * What the host now knows finished: verify the copies to the host, and check that every
 * callback before it ran exactly once (its references are gone, foreign releases due).
 */
static void settle(model *m)
{
    for (int i = 0; i < m->nchecks; i++) {
        hcheck *c = &m->checks[i];

        if (c->done || !finished(m, c->id, c->seq))
            continue;
        c->done = true;
        if (c->gen == m->bufs[c->scratch].gen)
            verify_check(c, "after a synchronize");
    }
    for (int i = 0; i < m->ncbs; i++) {
        cbrec *cb = &m->cbs[i];

        if (cb->settled || !finished(m, cb->id, cb->seq))
            continue;
        if (atomic_load(&cb->ran) != 1)
            fail("callback %d (stream %d item %d) ran %d times once its stream was done", i, cb->id,
                 (int)cb->seq, atomic_load(&cb->ran));
        if (atomic_load(&cb->status) != GM_OK)
            fail("callback %d was given %s", i, gm_status_name(atomic_load(&cb->status)));
        cb->settled = true;
        if (cb->release_grp >= 0) {
            m->groups[cb->release_grp].cbrefs--;
            group_unref(m, cb->release_grp);
        }
    }
}

/* --------------------------------------------------------------- waiting */

/* Synchronize stream id through its handle (the legacy stream through one of its names). */
static void sync_stream(model *m, int id, uint8_t how)
{
    mstream *st = &m->s[id];
    gm_stream *h = st->h;

    if (st->kind == S_LEGACY && (how & 1))
        h = gm_legacy_default_stream(m->ctx);
    say("    synchronize stream %d", id);
    expect_status(gm_stream_synchronize(h), GM_OK, "gm_stream_synchronize");
    join(&m->done, &st->vc);
    settle(m);
}

static void sync_context(model *m)
{
    say("    synchronize the context");
    expect_status(gm_context_synchronize(m->ctx), GM_OK, "gm_context_synchronize");
    for (int t = 0; t < m->nids; t++)
        m->done.c[t] = m->s[t].n;
    settle(m);
}

/* Record the fuzzer's own event on stream t: an item there; its clock. */
static vclock record_sync_event(model *m, int t)
{
    int32_t seq = 0;

    expect_status(gm_event_record(m->sync_ev, m->s[t].h), GM_OK, "gm_event_record");
    seq = issue(m, t, NULL);
    return hist[t][seq];
}

/*
 * Make item (t, k) precede the next item on stream id (id < 0: the host), as the input's
 * next byte says: an event recorded on t and waited for on id, or a synchronize of t, of an
 * event recorded on t, or of the context.
 */
static void order_after(model *m, int id, int t, uint8_t how)
{
    vclock c;

    if (!m->s[t].alive) {
        sync_context(m);
        return;
    }
    switch (id >= 0 ? how % 5 : 2 + how % 3) {
    case 0:
    case 1:
        say("    stream %d waits for an event on stream %d", id, t);
        c = record_sync_event(m, t);
        expect_status(gm_stream_wait_event(m->s[id].h, m->sync_ev), GM_OK, "gm_stream_wait_event");
        (void)issue(m, id, &c);
        break;
    case 2:
        sync_stream(m, t, how >> 3);
        break;
    case 3:
        say("    synchronize an event on stream %d", t);
        c = record_sync_event(m, t);
        expect_status(gm_event_synchronize(m->sync_ev), GM_OK, "gm_event_synchronize");
        join(&m->done, &c);
        settle(m);
        break;
    default:
        sync_context(m);
        break;
    }
}

/* Whether item (t, k) is ordered before the next item on id (id < 0: the host). */
static bool ordered(const model *m, int id, int t, int32_t k)
{
    vclock c;

    if (k == 0 || finished(m, t, k))
        return true;
    if (id < 0)
        return false;
    c = next_clock(m, id);
    return k <= c.c[t];
}

/* Order earlier work on buffer b before the next item on id: its writes, and reads too
 * when that item writes. */
static void prepare(model *m, int id, int b, bool write)
{
    mbuf *buf = &m->bufs[b];

    for (int guard = 0; guard < 4 * NSID; guard++) {
        int t = -1;

        if (!ordered(m, id, buf->w_id, buf->w_seq))
            t = buf->w_id;
        for (int u = 0; write && t < 0 && u < m->nids; u++)
            if (!ordered(m, id, u, buf->r_seq[u]) || !ordered(m, id, u, buf->cb_seq[u]))
                t = u;
        if (t < 0)
            return;
        order_after(m, id, t, take_u8(m->r));
    }
    fail("model: could not order the work on buffer %d", b);
}

/* Note an access by item (id, seq); id < 0: by the host, finished. */
static void accessed(model *m, int b, int id, int32_t seq, bool write)
{
    mbuf *buf = &m->bufs[b];

    if (write) {
        buf->w_id = id < 0 ? 0 : id;
        buf->w_seq = id < 0 ? 0 : seq;
        memset(buf->r_seq, 0, sizeof buf->r_seq);
        memset(buf->cb_seq, 0, sizeof buf->cb_seq);
        buf->gen++;
    } else if (id >= 0 && seq > buf->r_seq[id]) {
        buf->r_seq[id] = seq;
    }
}

/* ------------------------------------------------------------- elements */

/* The model's image of buffer b (fuzz_model.h). */
static fuzz_image image_of(const mbuf *b)
{
    return (fuzz_image){b->base, b->bytes, b->img, b->known};
}

/* Byte offset of element e of a view into buffer b, checked against the buffer. */
static int64_t buf_offset(const mbuf *b, const gm_ndview *v, int64_t e)
{
    fuzz_image im = image_of(b);

    return fuzz_offset_checked(&im, v, e);
}

/* The elements of a view of buffer b, packed in C order, with their defined bytes. */
static void gather(const mbuf *b, const gm_ndview *v, unsigned char *out, unsigned char *known)
{
    fuzz_image im = image_of(b);

    fuzz_gather(&im, v, out, known);
}

/* Write packed elements into a view of buffer b. */
static void scatter(mbuf *b, const gm_ndview *v, const unsigned char *in,
                    const unsigned char *known)
{
    fuzz_image im = image_of(b);
    int64_t end = fuzz_scatter(&im, v, in, known);

    if (b->kind == B_SCRATCH && end > scratch_hw[b - M.bufs])
        scratch_hw[b - M.bufs] = end;
}

/* A sub-view of n elements of 1-D view v from element `start`, step 1, 2 or -1. */
static gm_ndview sub_view(const gm_ndview *v, int64_t start, int64_t n, int step)
{
    gm_ndview w = *v;
    int64_t k = (int64_t)gm_dtype_itemsize(v->dtype);

    w.shape[0] = n;
    w.strides[0] = v->strides[0] * step;
    w.offset = v->offset + start * v->strides[0];
    if (step < 0 && n > 0)
        w.offset += (n - 1) * v->strides[0];
    (void)k;
    return w;
}

/* Pick n elements and a step that fit in `extent` elements; the start. */
static int64_t pick_range(reader *r, int64_t extent, int64_t n, int *step)
{
    uint8_t b = take_u8(r);

    *step = b % 4 == 1 ? 2 : b % 4 == 2 ? -1 : 1;
    if (*step == 2 && 2 * n - 1 > extent)
        *step = 1;
    return (int64_t)(b >> 2) % (extent - (*step == 2 ? 2 * n - 1 : n) + 1);
}

/* ---------------------------------------------------------------- model */

static int64_t charge_of(int64_t bytes)
{
    return (bytes + 255) / 256 * 256;
}

static int new_buf(model *m, bkind kind, uintptr_t base, int64_t bytes)
{
    mbuf *b = &m->bufs[m->nbufs];

    if (m->nbufs == MAX_BUFS)
        fail("model: too many buffers");
    memset(b, 0, sizeof *b);
    b->kind = kind;
    b->base = base;
    b->bytes = bytes;
    if (kind == B_SCRATCH) {
        int s = m->nbufs;

        memset(scratch_known[s], 0, (size_t)scratch_hw[s]);
        scratch_hw[s] = 0;
        b->img = scratch_img[s];
        b->known = scratch_known[s];
        return m->nbufs++;
    }
    b->img = calloc((size_t)bytes + 1, 1);
    b->known = calloc((size_t)bytes + 1, 1);
    if (b->img == NULL || b->known == NULL)
        fail("model: out of memory");
    return m->nbufs++;
}

static int free_slot(model *m)
{
    for (int i = 0; i < MAX_HANDLES; i++)
        if (m->h[i].a == NULL)
            return i;
    return -1;
}

static handle *pick_handle(model *m, reader *r)
{
    int i = take_u8(r) % MAX_HANDLES;

    for (int n = 0; n < MAX_HANDLES; n++, i = (i + 1) % MAX_HANDLES)
        if (m->h[i].a != NULL)
            return &m->h[i];
    return NULL;
}

/* A new group over memory b (charged for device memory it allocated). */
static int new_group(model *m, int b, int owner, bool allocated)
{
    group *g = &m->groups[m->ngroups];

    if (m->ngroups == MAX_BUFS)
        fail("model: too many groups");
    memset(g, 0, sizeof *g);
    g->mem = b;
    g->owner = owner;
    if (allocated && (m->bufs[b].kind == B_DEVICE || m->bufs[b].kind == B_MANAGED))
        g->charge = charge_of(m->bufs[b].bytes);
    return m->ngroups++;
}

static void hold(model *m, int slot, gm_array *a, int g)
{
    m->h[slot].a = a;
    m->h[slot].buf = m->groups[g].mem;
    m->h[slot].grp = g;
    m->h[slot].refs = 1;
    m->groups[g].arrays++;
}

/* A group lost a reference: when none is left it is gone (its foreign release due). */
static void group_unref(model *m, int g)
{
    group *gr = &m->groups[g];

    if (gr->gone || gr->arrays > 0)
        return;
    if (gr->owner >= 0 && gr->cbrefs > 0)
        m->owners[gr->owner].last_in_callback = true;
    if (gr->cbrefs > 0)
        return;
    gr->gone = true;
    if (gr->owner >= 0)
        m->owners[gr->owner].due = true;
}

/* Owners whose release must have run, and none before. */
static void check_owners(model *m, const char *when)
{
    bool more = true;

    while (more) { /* a release may drop the last reference of another owner's memory */
        more = false;
        for (int i = 0; i < m->nowners; i++) {
            owner *o = &m->owners[i];

            if (atomic_load(&o->calls) == 1 && !o->accounted && o->hold_grp >= 0) {
                /* the export's reference went in its deleter; the foreign memory's owner
                 * may free it now */
                o->accounted = true;
                more = true;
                if (o->device != NULL)
                    gm_array_release(&o->device);
                m->groups[o->hold_grp].arrays--;
                group_unref(m, o->hold_grp);
            }
        }
    }
    for (int i = 0; i < m->nowners; i++) {
        const owner *o = &m->owners[i];
        int calls = atomic_load(&o->calls);

        if (calls > 1 || (calls == 1 && !o->due && !o->last_in_callback) ||
            (calls == 0 && o->due && !o->last_in_callback))
            fail("%s %d: released %d times %s (%s)", o->dlpack ? "DLPack export" : "foreign owner",
                 i, calls, o->due ? "after its last array went" : "while arrays use it", when);
    }
}

/* Drop one reference of a handle on the main thread. */
static void release_handle(model *m, handle *h)
{
    gm_array *a = h->a;
    int g = h->grp;

    gm_array_release(&a);
    if (a != NULL)
        fail("gm_array_release did not clear its argument");
    if (--h->refs > 0)
        return;
    h->a = NULL;
    m->groups[g].arrays--;
    group_unref(m, g);
    check_owners(m, "at a release on the main thread");
}

/* Device memory the model knows is used (live), and what callbacks may still hold. */
static void device_use(const model *m, int64_t *live, int64_t *maybe)
{
    *live = *maybe = 0;
    for (int i = 0; i < m->ngroups; i++) {
        const group *g = &m->groups[i];
        int held = g->arrays;

        if (g->gone || g->charge == 0)
            continue;
        /* an export whose release is due drops its reference at the next flush (the one an
         * allocation's retry runs, which then frees what that reference kept) */
        for (int k = 0; k < m->nowners; k++)
            if (m->owners[k].hold_grp == i && m->owners[k].due && !m->owners[k].accounted)
                held--;
        if (held > 0)
            *live += g->charge;
        else
            *maybe += g->charge;
    }
}

/*
 * An allocation of `bytes` device bytes: predict from the free memory whether it must
 * succeed or fail (flush-and-retry outside defer_cleanup); after a failure check the
 * status, the message and that the output stayed unwritten.
 */
static gm_status predict_alloc(model *m, int64_t bytes, int *must)
{
    int64_t free_b = 0, total = 0, live = 0, maybe = 0, c = charge_of(bytes);

    expect_status(gm_context_memory_info(m->ctx, &free_b, &total), GM_OK, "gm_context_memory_info");
    device_use(m, &live, &maybe);
    if (c <= free_b)
        *must = 1;
    else if (m->depth > 0 || c > total - live)
        *must = -1;
    else if (c <= total - live - maybe)
        *must = 1;
    else
        *must = 0;
    return GM_OK;
}

static void after_alloc(model *m, gm_status st, int must, gm_array *a, const char *call)
{
    static gm_array *const sentinel = (gm_array *)(uintptr_t)0x5a5a5a50;
    int64_t free_b = 0, total = 0, live = 0, maybe = 0;

    if (st == GM_OK) {
        if (must < 0)
            fail("%s succeeded but the device cannot hold it", call);
        return;
    }
    if (must > 0)
        fail("%s failed (%s: %s) though the device memory fits it", call, gm_status_name(st),
             gm_last_error_message());
    expect_error(st, GM_ERR_OUT_OF_DEVICE_MEMORY, call);
    if (a != sentinel)
        fail("%s failed but wrote its output", call);
    device_use(m, &live, &maybe);
    expect_status(gm_context_memory_info(m->ctx, &free_b, &total), GM_OK, "gm_context_memory_info");
    if (m->depth == 0 && maybe == 0 && free_b != total - live)
        fail("after a failed allocation and its flush, %lld bytes are free; the live arrays "
             "leave %lld",
             (long long)free_b, (long long)(total - live));
}

/* --------------------------------------------------------------- streams */

/* A live stream identity, or -1 for synchronous (when the input says so). */
static int pick_stream(model *m, uint8_t b)
{
    int live[NSID], n = 0;

    if (b % 8 == 7)
        return -1;
    for (int t = 0; t < m->nids; t++)
        if (m->s[t].alive && m->s[t].n < MAX_ITEMS - 4 * NSID - 8)
            live[n++] = t;
    return n == 0 ? -1 : live[(b >> 3) % n];
}

/* The handle of stream id for a call (the legacy stream by either name). */
static gm_stream *stream_handle(model *m, int id, uint8_t b)
{
    if (id < 0)
        return NULL;
    if (id == ID_LEGACY && (b & 1))
        return gm_legacy_default_stream(m->ctx);
    return m->s[id].h;
}

/* ------------------------------------------------------------ host views */

/* n elements of dtype over scratch s: start, step 1, 2 or -1. */
static gm_ndview host_view(reader *r, int s, int64_t n, gm_dtype dtype)
{
    int64_t k = (int64_t)gm_dtype_itemsize(dtype), cap = SCRATCH / k, all = cap;
    gm_ndview v;
    int step = 1;
    int64_t start = 0;

    gm_ndview_init(scratch[s], dtype, 1, &all, NULL, GM_ORDER_C, &v);
    start = pick_range(r, cap > 4 * n + 64 ? 4 * n + 64 : cap, n, &step);
    return sub_view(&v, start, n, step);
}

/* Write bytes derived from the input into the elements of host view v of scratch s. */
static void fill_host(model *m, int s, const gm_ndview *v)
{
    mbuf *b = &m->bufs[s];
    int64_t k = (int64_t)gm_dtype_itemsize(v->dtype), n = fuzz_elements(v);
    uint8_t seed = take_u8(m->r), mul = take_u8(m->r) | 1;

    prepare(m, -1, s, true);
    for (int64_t e = 0; e < n; e++) {
        int64_t rel = buf_offset(b, v, e);

        for (int64_t j = 0; j < k; j++) {
            unsigned char byte = (unsigned char)(seed + (e * k + j) * mul);

            scratch[s][rel + j] = byte;
            b->img[rel + j] = byte;
            b->known[rel + j] = 1;
        }
        if (rel + k > scratch_hw[s])
            scratch_hw[s] = rel + k;
    }
    accessed(m, s, -1, 0, true);
}

/* ----------------------------------------------------------- operations */

/* A new 1-D array's element count: 1..64, or 64 KiB .. 4 MiB of bytes now and then. */
static int64_t pick_count(model *m, gm_dtype dtype)
{
    uint8_t b = take_u8(m->r), c = take_u8(m->r);
    int64_t k = (int64_t)gm_dtype_itemsize(dtype), bytes = 0;

    if (b % 16 != 0)
        return 1 + c % 64;
    bytes = ((int64_t)64 << 10) << (c % 7); /* 64 KiB .. 4 MiB */
    bytes += (int64_t)(b >> 4) * 40;
    if (m->big + bytes > BIG_BUDGET)
        return 1 + c % 64;
    m->big += bytes;
    return bytes / k;
}

/* gm_device_array, gm_managed_array or gm_pinned_array of n elements. */
static void op_create(model *m, reader *r)
{
    static gm_array *const sentinel = (gm_array *)(uintptr_t)0x5a5a5a50;
    int slot = free_slot(m);
    gm_dtype dtype = dtypes[take_u8(r) % NDTYPES];
    uint8_t how = take_u8(r);
    int64_t n = pick_count(m, dtype), bytes = n * (int64_t)gm_dtype_itemsize(dtype);
    gm_array *a = sentinel;
    gm_status st = GM_OK;
    int must = 1, b = 0;
    bkind kind = how % 4 == 1 ? B_MANAGED : how % 4 == 2 ? B_PINNED : B_DEVICE;
    const char *call = kind == B_MANAGED  ? "gm_managed_array"
                       : kind == B_PINNED ? "gm_pinned_array"
                                          : "gm_device_array";

    if (slot < 0)
        return;
    if (kind != B_PINNED)
        predict_alloc(m, bytes, &must);
    say("  %s %lld x %u bytes -> slot %d (must %d)", call, (long long)n,
        (unsigned)gm_dtype_itemsize(dtype), slot, must);
    if (kind == B_MANAGED)
        st = gm_managed_array(m->ctx, 1, &n, dtype, GM_ORDER_C, &a);
    else if (kind == B_PINNED)
        st = gm_pinned_array(m->ctx, 1, &n, dtype, GM_ORDER_C, &a);
    else
        st = gm_device_array(m->ctx, 1, &n, dtype, GM_ORDER_C, &a);
    after_alloc(m, st, must, a, call);
    if (st != GM_OK)
        return;
    b = new_buf(m, kind, (uintptr_t)gm_array_view(a)->data, bytes);
    hold(m, slot, a, new_group(m, b, -1, true));
    check_owners(m, "after an allocation");
}

/* gm_to_device of a scratch view, maybe on a stream. */
static void op_to_device(model *m, reader *r)
{
    static gm_array *const sentinel = (gm_array *)(uintptr_t)0x5a5a5a50;
    int slot = free_slot(m), s = take_u8(r) % NSCRATCH, id = pick_stream(m, take_u8(r));
    gm_dtype dtype = dtypes[take_u8(r) % NDTYPES];
    int64_t n = pick_count(m, dtype), k = (int64_t)gm_dtype_itemsize(dtype);
    gm_ndview host;
    gm_array *a = sentinel;
    gm_status st = GM_OK;
    int must = 1, b = 0;
    int32_t seq = 0;
    unsigned char *packed = NULL, *known = NULL;

    if (slot < 0)
        return;
    host = host_view(r, s, n, dtype);
    fill_host(m, s, &host);
    if (id >= 0)
        prepare(m, id, s, false);
    predict_alloc(m, n * k, &must);
    say("  to_device %lld x %lld from scratch %d on stream %d -> slot %d", (long long)n,
        (long long)k, s, id, slot);
    st = gm_to_device(m->ctx, &host, stream_handle(m, id, (uint8_t)n), &a);
    after_alloc(m, st, must, a, "gm_to_device");
    if (st != GM_OK)
        return;
    b = new_buf(m, B_DEVICE, (uintptr_t)gm_array_view(a)->data, n * k);
    hold(m, slot, a, new_group(m, b, -1, true));
    packed = malloc((size_t)(n * k));
    known = malloc((size_t)(n * k));
    if (packed == NULL || known == NULL)
        fail("model: out of memory");
    gather(&m->bufs[s], &host, packed, known);
    scatter(&m->bufs[b], gm_array_view(a), packed, known);
    free(packed);
    free(known);
    if (id >= 0)
        seq = issue(m, id, NULL);
    accessed(m, s, id, seq, false);
    accessed(m, b, id, seq, true);
}

/* A whole scratch buffer as n elements of dtype: its host view, or gm_map's device view. */
static gm_ndview scratch_view(const model *m, int s, gm_dtype dtype, bool device)
{
    int64_t n = SCRATCH / (int64_t)gm_dtype_itemsize(dtype);
    gm_ndview v;

    gm_ndview_init(scratch[s], dtype, 1, &n, NULL, GM_ORDER_C, &v);
    if (device && m->bufs[s].scope != NULL && m->bufs[s].scope_kind == 1) {
        v.data = m->bufs[s].dview.data;
        v.memory = GM_MEMORY_DEVICE;
        v.device_id = m->bufs[s].dview.device_id;
    }
    return v;
}

/* A copy endpoint: a held array's view, or a scratch buffer (n = -1, view made later). */
typedef struct endpoint {
    int buf;
    int64_t n;
    bool device;
    gm_ndview v;
} endpoint;

static endpoint pick_endpoint(model *m, reader *r)
{
    handle *h = pick_handle(m, r);
    uint8_t b = take_u8(r);
    endpoint e;

    memset(&e, 0, sizeof e);
    if (h == NULL || (b & 0x30) == 0x30) {
        e.buf = b % NSCRATCH;
        e.n = -1;
        e.device = (b & 8) != 0;
        return e;
    }
    e.buf = h->buf;
    e.v = *gm_array_view(h->a);
    e.n = e.v.shape[0];
    return e;
}

/* n elements of an endpoint (a scratch one near its start, where copies meet). */
static gm_ndview endpoint_range(const model *m, reader *r, endpoint *e, gm_dtype dtype, int64_t n)
{
    int step = 1;
    int64_t extent = e->n;

    if (e->n < 0) {
        e->v = scratch_view(m, e->buf, dtype, e->device);
        extent = e->v.shape[0] < 4 * n + 64 ? e->v.shape[0] : 4 * n + 64;
    }
    return sub_view(&e->v, pick_range(r, extent, n, &step), n, step);
}

/* Check a copy to scratch when it ran (after a synchronize, or in a callback). */
static void add_check(model *m, int s, const gm_ndview *v, int id, int32_t seq)
{
    hcheck *c = NULL;
    int64_t lo = 0, hi = 0;
    const mbuf *b = &m->bufs[s];

    if (m->nchecks == MAX_CHECKS)
        return;
    c = &m->checks[m->nchecks++];
    gm_ndview_extent(v, &lo, &hi);
    lo += (int64_t)((uintptr_t)v->data - b->base);
    hi += (int64_t)((uintptr_t)v->data - b->base);
    c->id = id;
    c->seq = seq;
    c->scratch = s;
    c->gen = b->gen;
    c->lo = lo;
    c->hi = hi;
    c->done = false;
    c->expect = malloc((size_t)(hi - lo + 1));
    c->care = malloc((size_t)(hi - lo + 1));
    if (c->expect == NULL || c->care == NULL)
        fail("model: out of memory");
    memcpy(c->expect, b->img + lo, (size_t)(hi - lo));
    memcpy(c->care, b->known + lo, (size_t)(hi - lo));
}

/*
 * gm_copy between two endpoints (held arrays, scratch buffers through host views or
 * gm_map's device views) on a stream or synchronously; a copy to a scratch buffer is
 * checked once it ran.
 */
static void op_copy(model *m, reader *r)
{
    int id = pick_stream(m, take_u8(r));
    endpoint se = pick_endpoint(m, r), de = pick_endpoint(m, r);
    uint8_t len = take_u8(r);
    gm_dtype dtype = dtypes[len % NDTYPES];
    int64_t n = 0, k = 0;
    int32_t seq = 0;
    unsigned char *packed = NULL, *known = NULL;
    gm_ndview src, dst;
    int sb = se.buf, db = de.buf;

    if (sb == db || (se.n < 0 && de.n < 0))
        return;
    if (se.n >= 0 && de.n >= 0 && !gm_dtype_equal(se.v.dtype, de.v.dtype))
        return;
    dtype = se.n >= 0 ? se.v.dtype : de.v.dtype;
    k = (int64_t)gm_dtype_itemsize(dtype);
    n = se.n < 0 ? de.n : de.n < 0 ? se.n : se.n < de.n ? se.n : de.n;
    if (len & 8)
        n = 1 + (int64_t)(len >> 4) % n;
    src = endpoint_range(m, r, &se, dtype, n);
    dst = endpoint_range(m, r, &de, dtype, n);
    if (m->bufs[sb].kind == B_SCRATCH && (take_u8(r) & 3) != 0)
        fill_host(m, sb, &src);
    prepare(m, id, sb, false);
    prepare(m, id, db, true);
    say("  copy %lld x %lld bytes buffer %d -> buffer %d on stream %d", (long long)n, (long long)k,
        sb, db, id);
    expect_status(gm_copy(m->ctx, &dst, &src, stream_handle(m, id, len)), GM_OK, "gm_copy");
    packed = malloc((size_t)(n * k) + 1);
    known = malloc((size_t)(n * k) + 1);
    if (packed == NULL || known == NULL)
        fail("model: out of memory");
    gather(&m->bufs[sb], &src, packed, known);
    scatter(&m->bufs[db], &dst, packed, known);
    free(packed);
    free(known);
    if (id >= 0)
        seq = issue(m, id, NULL);
    accessed(m, sb, id, seq, false);
    accessed(m, db, id, seq, true);
    if (m->bufs[db].kind == B_SCRATCH) {
        add_check(m, db, &dst, id < 0 ? 0 : id, seq);
        if (id < 0)
            verify_check(&m->checks[m->nchecks - 1], "after a synchronous copy");
    }
}

/* gm_array_fill or gm_array_memset of a held array, or of part of it (gm_array_derive). */
static void op_fill(model *m, reader *r)
{
    handle *h = pick_handle(m, r);
    int id = pick_stream(m, take_u8(r));
    uint8_t how = take_u8(r), value[16];
    gm_array *part = NULL;
    gm_ndview v;
    int64_t k = 0, n = 0;
    int32_t seq = 0;
    int step = 1;
    unsigned char *packed = NULL, *known = NULL;

    if (h == NULL)
        return;
    v = *gm_array_view(h->a);
    k = (int64_t)gm_dtype_itemsize(v.dtype);
    for (int i = 0; i < 16; i++)
        value[i] = take_u8(r);
    if (how & 4) {
        n = 1 + (int64_t)value[15] % v.shape[0];
        v = sub_view(&v, pick_range(r, v.shape[0], n, &step), n, step);
        expect_status(gm_array_derive(h->a, &v, &part), GM_OK, "gm_array_derive");
    }
    n = v.shape[0];
    prepare(m, id, h->buf, true);
    say("  %s %lld elements of slot %ld on stream %d", how & 2 ? "memset" : "fill", (long long)n,
        (long)(h - m->h), id);
    packed = malloc((size_t)(n * k));
    known = malloc((size_t)(n * k));
    if (packed == NULL || known == NULL)
        fail("model: out of memory");
    if (how & 2) {
        expect_status(
            gm_array_memset(part != NULL ? part : h->a, value[0], stream_handle(m, id, how >> 3)),
            GM_OK, "gm_array_memset");
        memset(packed, value[0], (size_t)(n * k));
    } else {
        expect_status(
            gm_array_fill(part != NULL ? part : h->a, value, stream_handle(m, id, how >> 3)), GM_OK,
            "gm_array_fill");
        for (int64_t e = 0; e < n; e++)
            memcpy(packed + e * k, value, (size_t)k);
    }
    gm_array_release(&part); /* right after queueing work on it */
    memset(known, 1, (size_t)(n * k));
    scatter(&m->bufs[h->buf], &v, packed, known);
    free(packed);
    free(known);
    if (id >= 0)
        seq = issue(m, id, NULL);
    accessed(m, h->buf, id, seq, true);
}

/* The fuzzer's kernel: dst[i] = src[i] + add for n bytes (in place when dst == src). */
GM_KERNEL(fz_add_bytes, (const uint8_t *, src), (uint8_t *, dst), (int64_t, n), (int32_t, add))
{
    int64_t i = gm_global_id_x();

    if (i < n)
        dst[i] = (uint8_t)(src[i] + add);
}

GM_HOST_TABLE(fz_table, GM_HOST_KERNELS(fz_add_bytes), GM_HOST_NO_GLOBALS);
static const gm_image_set fz_set = {"fuzz_streams", &fz_table, NULL, 0, NULL, 0};

/* A held array's bytes as a dense uint8 view, when it is device or managed memory. */
static bool kernel_bytes(const model *m, const handle *h, gm_ndview *bytes_p)
{
    const gm_ndview *v = gm_array_view(h->a);
    int64_t k = (int64_t)gm_dtype_itemsize(v->dtype), n = v->shape[0] * k;

    if ((m->bufs[h->buf].kind != B_DEVICE && m->bufs[h->buf].kind != B_MANAGED) ||
        (v->shape[0] > 1 && v->strides[0] != k) || n == 0)
        return false;
    return gm_ndview_init((char *)v->data + v->offset, GM_UINT8, 1, &n, NULL, GM_ORDER_C,
                          bytes_p) == GM_OK;
}

/*
 * Launch fz_add_bytes between two held device arrays (or in place on one) on a stream or
 * synchronously, in 1 to 128-thread blocks: stream-ordered like a copy.
 */
static void op_kernel(model *m, reader *r)
{
    handle *hs = pick_handle(m, r), *hd = pick_handle(m, r);
    int id = pick_stream(m, take_u8(r));
    uint8_t how = take_u8(r), add = take_u8(r);
    uint32_t block = 1 + (uint32_t)take_u8(r) % 128;
    gm_ndview src, dst;
    gm_kernel *k = NULL;
    gm_arg args[4];
    int64_t n = 0;
    int32_t seq = 0;
    unsigned char *packed = NULL, *known = NULL;

    if (hs == NULL || hd == NULL || !kernel_bytes(m, hs, &src) || !kernel_bytes(m, hd, &dst))
        return;
    if (hs->buf == hd->buf && (hs != hd || (how & 1))) /* one buffer: in place, one range */
        hd = hs, dst = src;
    n = src.shape[0] < dst.shape[0] ? src.shape[0] : dst.shape[0];
    if (how & 2)
        n = 1 + (int64_t)(how >> 2) % n;
    if (n > 256 * (int64_t)block) /* at most 256 blocks: a simulated block is not free */
        n = 256 * (int64_t)block;
    src.shape[0] = dst.shape[0] = n;
    expect_status(gm_kernel_find(m->ctx, "fz_add_bytes", &k), GM_OK, "gm_kernel_find");
    prepare(m, id, hs->buf, false);
    prepare(m, id, hd->buf, true);
    say("  kernel: %lld bytes buffer %d + %u -> buffer %d on stream %d, blocks of %u", (long long)n,
        hs->buf, add, hd->buf, id, block);
    args[0] = gm_arg_ptr(src.data);
    args[1] = gm_arg_ptr(dst.data);
    args[2] = gm_arg_i64(n);
    args[3] = gm_arg_i32(add);
    expect_status(gm_launch(k, gm_dim3_make((uint32_t)((n + block - 1) / block), 1, 1),
                            gm_dim3_make(block, 1, 1), 0, stream_handle(m, id, how >> 6), 4, args),
                  GM_OK, "gm_launch");
    packed = malloc((size_t)n);
    known = malloc((size_t)n);
    if (packed == NULL || known == NULL)
        fail("model: out of memory");
    gather(&m->bufs[hs->buf], &src, packed, known);
    for (int64_t i = 0; i < n; i++)
        packed[i] = (unsigned char)(packed[i] + add);
    scatter(&m->bufs[hd->buf], &dst, packed, known);
    free(packed);
    free(known);
    if (id >= 0)
        seq = issue(m, id, NULL);
    accessed(m, hs->buf, id, seq, false);
    accessed(m, hd->buf, id, seq, true);
}

/*
 * Read a held array back synchronously (or a scratch buffer directly) once the work
 * writing it is done, and compare with the model; pinned memory directly too.
 */
static void op_check(model *m, reader *r)
{
    handle *h = pick_handle(m, r);
    uint8_t how = take_u8(r);
    const mbuf *b = NULL;
    gm_ndview v, dst;
    int64_t n = 0, k = 0;
    const unsigned char *mem = readback;

    if (h == NULL || (how & 1)) {
        int s = how >> 1 & 3;

        prepare(m, -1, s, false);
        b = &m->bufs[s];
        for (int64_t j = 0; j < scratch_hw[s]; j++)
            if (b->known[j] && scratch[s][j] != b->img[j])
                fail("scratch %d byte %lld is %u, the model says %u", s, (long long)j,
                     scratch[s][j], b->img[j]);
        return;
    }
    prepare(m, -1, h->buf, false);
    b = &m->bufs[h->buf];
    v = *gm_array_view(h->a);
    k = (int64_t)gm_dtype_itemsize(v.dtype);
    n = v.shape[0];
    say("  check slot %ld (buffer %d)", (long)(h - m->h), h->buf);
    if (b->kind == B_PINNED || b->kind == B_FOREIGN_HOST) {
        mem = (const unsigned char *)v.data + v.offset;
    } else {
        gm_ndview_init(readback, v.dtype, 1, &n, NULL, GM_ORDER_C, &dst);
        expect_status(gm_copy(m->ctx, &dst, &v, NULL), GM_OK, "gm_copy (reading back)");
    }
    for (int64_t j = 0; j < n * k; j++) {
        int64_t rel = (int64_t)((uintptr_t)v.data + (uintptr_t)v.offset - b->base) + j;

        if (b->known[rel] && mem[j] != b->img[rel])
            fail("buffer %d (kind %d, %lld bytes): byte %lld is %u, the model says %u", h->buf,
                 (int)b->kind, (long long)b->bytes, (long long)rel, mem[j], b->img[rel]);
    }
}

static void op_retain_release(model *m, reader *r)
{
    handle *h = pick_handle(m, r);

    if (h == NULL)
        return;
    if (take_u8(r) % 4 == 0) {
        say("  retain slot %ld", (long)(h - m->h));
        if (gm_array_retain(h->a) != h->a)
            fail("gm_array_retain returned another pointer");
        h->refs++;
        return;
    }
    say("  release slot %ld", (long)(h - m->h));
    release_handle(m, h);
}

/* Create or destroy a stream (blocking or not), with or without work pending. */
static void op_stream(model *m, reader *r)
{
    uint8_t b = take_u8(r);
    int id = 2 + (int)(b >> 1) % (NSID - 2);
    mstream *st = NULL;
    void *native = NULL;

    for (int t = 2; t < m->nids; t++)
        if (m->s[t].alive && (b & 1)) {
            id = t;
            break;
        }
    if (id < m->nids && m->s[id].alive) {
        st = &m->s[id];
        say("  destroy stream %d (%d items, %d done)", id, st->n, (int)m->done.c[id]);
        if (b & 64)
            sync_stream(m, id, b);
        if (st->auto_depth > 0)
            return; /* its scopes stay open */
        native = gm_stream_native(st->h);
        gm_stream_destroy(&st->h);
        if (st->h != NULL)
            fail("gm_stream_destroy did not clear its argument");
        st->alive = false;
        if (b & 128) { /* its handle is refused from the destroy on, queued or done */
            gm_stream *w = NULL;

            expect_error(gm_stream_wrap_external(m->ctx, native, &w), GM_ERR_INVALID_HANDLE,
                         "gm_stream_wrap_external of a destroyed stream");
            if (w != NULL)
                fail("a refused gm_stream_wrap_external gave a stream");
        }
        return;
    }
    if (m->nids == NSID)
        return;
    id = m->nids++;
    st = &m->s[id];
    memset(st, 0, sizeof *st);
    st->kind = S_CREATED;
    st->blocking = (b & 2) == 0;
    st->alive = true;
    say("  create stream %d (%s)", id, st->blocking ? "blocking" : "non-blocking");
    expect_status(
        gm_stream_create(m->ctx, st->blocking ? GM_STREAM_DEFAULT : GM_STREAM_NON_BLOCKING, &st->h),
        GM_OK, "gm_stream_create");
}

/* Synchronize a stream, query it, or synchronize the context. */
static void op_sync(model *m, reader *r)
{
    uint8_t b = take_u8(r);
    int id = pick_stream(m, (uint8_t)(b & 0xf8)); /* -1 only when no stream is left */
    gm_status st = GM_OK;

    (void)r;
    if (id < 0 || b % 4 == 3) {
        sync_context(m);
        return;
    }
    if (b % 4 != 0) {
        sync_stream(m, id, b >> 2);
        return;
    }
    st = gm_stream_query(stream_handle(m, id, b >> 2));
    say("  query stream %d: %s", id, gm_status_name(st));
    if (st == GM_OK) {
        join(&m->done, &m->s[id].vc);
        settle(m);
    } else {
        expect_error(st, GM_ERR_NOT_READY, "gm_stream_query");
        if (m->done.c[id] >= m->s[id].n)
            fail("gm_stream_query: not ready, but the host knows all %d items finished",
                 m->s[id].n);
    }
}

/* Events: create (timing or not), record, wait, query, synchronize, elapsed time, destroy. */
static void op_event(model *m, reader *r)
{
    uint8_t b = take_u8(r), c = take_u8(r);
    mevent *e = &m->ev[b % NEVENTS], *f = &m->ev[c % NEVENTS];
    int id = pick_stream(m, c);
    gm_status st = GM_OK;
    float ms = -1;

    if (e->e == NULL) {
        e->timing = (b & 12) != 0;
        say("  event %d create (timing %d)", (int)(e - m->ev), e->timing);
        expect_status(gm_event_create(m->ctx, e->timing, &e->e), GM_OK, "gm_event_create");
        e->recorded = false;
        return;
    }
    switch ((b >> 3) % 7) {
    case 0:
    case 1: /* record (NULL: the default stream) */
        if (id < 0)
            id = ID_LEGACY;
        say("  event %d record on stream %d", (int)(e - m->ev), id);
        expect_status(
            gm_event_record(e->e, (c & 1) && id == ID_LEGACY ? NULL : stream_handle(m, id, c)),
            GM_OK, "gm_event_record");
        e->seq = issue(m, id, NULL);
        e->id = id;
        e->clk = hist[id][e->seq];
        e->recorded = true;
        break;
    case 2: /* wait */
        if (id < 0)
            return;
        say("  stream %d waits for event %d", id, (int)(e - m->ev));
        expect_status(/* NULL: the default stream, the legacy one here */
                      gm_stream_wait_event(
                          (c & 1) && id == ID_LEGACY ? NULL : stream_handle(m, id, c), e->e),
                      GM_OK, "gm_stream_wait_event");
        if (e->recorded) /* else nothing to wait for: no item */
            (void)issue(m, id, &e->clk);
        break;
    case 3: /* query */
        st = gm_event_query(e->e);
        say("  event %d query: %s", (int)(e - m->ev), gm_status_name(st));
        if (st == GM_OK && e->recorded) {
            join(&m->done, &e->clk);
            settle(m);
        } else if (st != GM_OK) {
            expect_error(st, GM_ERR_NOT_READY, "gm_event_query");
            if (!e->recorded || finished(m, e->id, e->seq))
                fail("gm_event_query: not ready, but the host knows its record finished");
        }
        break;
    case 4: /* synchronize */
        say("  event %d synchronize", (int)(e - m->ev));
        expect_status(gm_event_synchronize(e->e), GM_OK, "gm_event_synchronize");
        if (e->recorded) {
            join(&m->done, &e->clk);
            settle(m);
        }
        break;
    case 5: /* elapsed time between e and f */
        if (f->e == NULL)
            return;
        if (!e->timing || !f->timing || !e->recorded || !f->recorded) {
            say("  elapsed %d -> %d (expecting an error)", (int)(e - m->ev), (int)(f - m->ev));
            gm_clear_error();
            expect_error(gm_event_elapsed_ms(e->e, f->e, &ms), GM_ERR_INVALID_ARG,
                         "gm_event_elapsed_ms");
            if (ms != -1)
                fail("gm_event_elapsed_ms failed but wrote its output");
            return;
        }
        if (!finished(m, e->id, e->seq) || !finished(m, f->id, f->seq)) {
            say("  event %d and %d synchronize", (int)(e - m->ev), (int)(f - m->ev));
            expect_status(gm_event_synchronize(e->e), GM_OK, "gm_event_synchronize");
            expect_status(gm_event_synchronize(f->e), GM_OK, "gm_event_synchronize");
            join(&m->done, &e->clk);
            join(&m->done, &f->clk);
            settle(m);
        }
        st = gm_event_elapsed_ms(e->e, f->e, &ms);
        say("  elapsed %d -> %d: %s %g ms", (int)(e - m->ev), (int)(f - m->ev), gm_status_name(st),
            ms);
        expect_status(st, GM_OK, "gm_event_elapsed_ms");
        if (ms != ms || (e->seq <= f->clk.c[e->id] && ms < 0))
            fail("gm_event_elapsed_ms: %g ms from an event to one recorded after it", ms);
        break;
    default:
        say("  event %d destroy", (int)(e - m->ev));
        gm_event_destroy(&e->e);
        if (e->e != NULL)
            fail("gm_event_destroy did not clear its argument");
        break;
    }
}

/* The user callback: runs once, after what precedes it; checks copies, may release. */
static void on_callback(gm_stream *stream, gm_status status, void *user)
{
    cbrec *cb = user;
    int idx = (int)(cb - M.cbs);

    if (atomic_fetch_add(&cb->ran, 1) != 0)
        fail("callback %d ran twice", idx);
    atomic_store(&cb->status, status);
    if (stream != cb->handle)
        fail("callback %d was given another stream", idx);
    for (int i = 0; i < idx; i++) {
        const cbrec *o = &M.cbs[i];

        if (o->seq <= cb->clk.c[o->id] && atomic_load(&o->ran) == 0)
            fail("callback %d (stream %d item %d) ran before callback %d (stream %d item %d), "
                 "which precedes it",
                 idx, cb->id, (int)cb->seq, i, o->id, (int)o->seq);
    }
    for (int i = 0; i < cb->nchecks; i++)
        verify_check(&M.checks[cb->checks[i]], "in a callback");
    gm_array_release(&cb->release);
}

/* gm_stream_add_callback: checks the copies to the host before it, may release an array. */
static void op_callback(model *m, reader *r)
{
    int id = pick_stream(m, take_u8(r));
    uint8_t how = take_u8(r);
    handle *h = pick_handle(m, r);
    cbrec *cb = NULL;
    vclock c;

    if (id < 0 || m->ncbs == MAX_CBS)
        return;
    cb = &m->cbs[m->ncbs];
    memset(cb, 0, sizeof *cb);
    cb->id = id;
    cb->release_grp = -1;
    cb->handle = stream_handle(m, id, how);
    c = next_clock(m, id);
    for (int i = 0; i < m->nchecks && cb->nchecks < 8; i++) {
        const hcheck *k = &m->checks[i];

        if (!k->done && k->seq > 0 && k->seq <= c.c[k->id] && k->gen == m->bufs[k->scratch].gen)
            cb->checks[cb->nchecks++] = i;
    }
    if (h != NULL && (how & 6) != 0) {
        cb->release = gm_array_retain(h->a);
        cb->release_grp = h->grp;
        m->groups[h->grp].cbrefs++;
    }
    say("  callback %d on stream %d (%d checks, releases %d)", m->ncbs, id, cb->nchecks,
        cb->release_grp);
    expect_status(gm_stream_add_callback(cb->handle, on_callback, cb), GM_OK,
                  "gm_stream_add_callback");
    cb->seq = issue(m, id, NULL);
    cb->clk = hist[id][cb->seq];
    m->ncbs++;
    for (int i = 0; i < cb->nchecks; i++) { /* the callback reads those scratch buffers */
        mbuf *b = &m->bufs[m->checks[cb->checks[i]].scratch];

        if (cb->seq > b->cb_seq[id])
            b->cb_seq[id] = cb->seq;
    }
    if (h != NULL && (how & 6) == 6)
        release_handle(m, h); /* the callback may hold the last reference */
}

/* auto_synchronize scopes: the end of the outermost leaves the stream done. */
static void op_auto(model *m, reader *r)
{
    uint8_t b = take_u8(r);
    int id = pick_stream(m, (uint8_t)(b & 0xf8)); /* -1 only when no stream is left */
    mstream *st = NULL;
    gm_stream *h = NULL;

    if (id < 0)
        id = ID_LEGACY;
    st = &m->s[id];
    h = st->h; /* scopes count per handle: gm_legacy_default_stream() has its own */
    if (b & 1) {
        say("  auto_synchronize begin on stream %d", id);
        expect_status(gm_stream_auto_synchronize_begin(h), GM_OK,
                      "gm_stream_auto_synchronize_begin");
        st->auto_depth++;
        return;
    }
    say("  auto_synchronize end on stream %d (depth %d)", id, st->auto_depth);
    if (st->auto_depth == 0) {
        gm_clear_error();
        expect_error(gm_stream_auto_synchronize_end(h), GM_ERR_STATE,
                     "gm_stream_auto_synchronize_end");
        return;
    }
    expect_status(gm_stream_auto_synchronize_end(h), GM_OK, "gm_stream_auto_synchronize_end");
    if (--st->auto_depth > 0)
        return;
    expect_status(gm_stream_query(h), GM_OK, "gm_stream_query after auto_synchronize_end");
    join(&m->done, &st->vc);
    settle(m);
}

/* gm_pin / gm_map / gm_register of a whole scratch buffer, or the end of its scope. */
static void op_scope(model *m, reader *r)
{
    uint8_t b = take_u8(r);
    int s = b % NSCRATCH;
    mbuf *buf = &m->bufs[s];
    int64_t n = SCRATCH;
    gm_ndview v;
    gm_host_scope *scope = NULL;
    gm_status st = GM_OK;
    static const char *const names[] = {"gm_pin", "gm_map", "gm_register"};

    gm_ndview_init(scratch[s], GM_UINT8, 1, &n, NULL, GM_ORDER_C, &v);
    if (buf->scope != NULL && (b & 4)) {
        say("  %s scratch %d again (expecting GM_ERR_STATE)", names[(b >> 3) % 3], s);
        gm_clear_error();
        st = (b >> 3) % 3 == 0   ? gm_pin(m->ctx, 1, &v, &scope)
             : (b >> 3) % 3 == 1 ? gm_map(m->ctx, 1, &v, NULL, &scope)
                                 : gm_register(m->ctx, 1, &v, &scope);
        expect_error(st, GM_ERR_STATE, names[(b >> 3) % 3]);
        if (scope != NULL)
            fail("a failed registration wrote its scope");
        return;
    }
    if (buf->scope != NULL) {
        /* after its work, or early: the end waits for the copies using the memory (what a
         * callback reads is the user's business) */
        if ((b & 8) == 0)
            prepare(m, -1, s, true);
        say("  end the scope of scratch %d", s);
        st = buf->scope_kind == 2 ? gm_deregister(&buf->scope) : gm_host_scope_end(&buf->scope);
        expect_status(st, GM_OK, "gm_host_scope_end");
        if (buf->scope != NULL)
            fail("gm_host_scope_end did not clear its argument");
        for (int t = 0; t < m->nids; t++)
            if (t == buf->w_id || buf->r_seq[t] > 0)
                join(&m->done,
                     &hist[t][t == buf->w_id && buf->w_seq > buf->r_seq[t] ? buf->w_seq
                                                                           : buf->r_seq[t]]);
        settle(m);
        return;
    }
    buf->scope_kind = (b >> 3) % 3;
    say("  %s scratch %d", names[buf->scope_kind], s);
    if (buf->scope_kind == 1) {
        expect_status(gm_map(m->ctx, 1, &v, &buf->dview, &buf->scope), GM_OK, "gm_map");
        if (buf->dview.memory != GM_MEMORY_DEVICE)
            fail("gm_map: the device view has memory kind %d", buf->dview.memory);
    } else {
        st = buf->scope_kind == 0 ? gm_pin(m->ctx, 1, &v, &buf->scope)
                                  : gm_register(m->ctx, 1, &v, &buf->scope);
        expect_status(st, GM_OK, names[buf->scope_kind]);
    }
}

/* The owner's release of foreign memory: once; foreign host memory is freed. */
static void on_foreign_release(void *user)
{
    owner *o = user;

    if (atomic_fetch_add(&o->calls, 1) != 0)
        fail("a foreign release ran twice");
    if (o->mem != NULL) {
        memset(o->mem, 0xEE, (size_t)o->bytes);
        free(o->mem);
        o->mem = NULL;
    }
}

static owner *new_owner(model *m)
{
    owner *o = NULL;

    if (m->nowners == MAX_OWNERS)
        return NULL;
    o = &m->owners[m->nowners++];
    memset(o, 0, sizeof *o);
    o->hold_grp = -1;
    return o;
}

/*
 * gm_array_from_foreign over new host memory (filled by the model), or over a held device
 * array's memory (the owner keeps that array until the release runs).
 */
static void op_foreign(model *m, reader *r)
{
    uint8_t how = take_u8(r);
    handle *h = pick_handle(m, r);
    int slot = free_slot(m);
    owner *o = NULL;
    gm_ndview v;
    gm_array *a = NULL;
    int64_t n = 0, k = 0;
    int b = 0, id = pick_stream(m, take_u8(r));

    if (slot < 0 || (o = new_owner(m)) == NULL)
        return;
    if (h != NULL && (how & 1) && m->bufs[h->buf].kind == B_DEVICE) {
        v = *gm_array_view(h->a);
        v.device_id = -1;
        o->device = gm_array_retain(h->a);
        o->hold_grp = h->grp;
        m->groups[h->grp].arrays++;
        b = h->buf;
        say("  foreign device array over slot %ld -> slot %d", (long)(h - m->h), slot);
    } else {
        gm_dtype dtype = dtypes[(how >> 1) % NDTYPES];

        k = (int64_t)gm_dtype_itemsize(dtype);
        n = 1 + (how >> 4) * 3;
        o->bytes = n * k;
        o->mem = malloc((size_t)o->bytes);
        if (o->mem == NULL)
            fail("model: out of memory");
        for (int64_t j = 0; j < o->bytes; j++)
            ((unsigned char *)o->mem)[j] = (unsigned char)(j * 7 + how);
        gm_ndview_init(o->mem, dtype, 1, &n, NULL, GM_ORDER_C, &v);
        b = new_buf(m, B_FOREIGN_HOST, (uintptr_t)o->mem, o->bytes);
        memcpy(m->bufs[b].img, o->mem, (size_t)o->bytes);
        memset(m->bufs[b].known, 1, (size_t)o->bytes);
        say("  foreign host array of %lld bytes -> slot %d", (long long)o->bytes, slot);
    }
    /* the producer's stream is synchronized first (Numba's sync=True) */
    expect_status(
        gm_array_from_foreign(m->ctx, &v, on_foreign_release, o, stream_handle(m, id, how), &a),
        GM_OK, "gm_array_from_foreign");
    if (id >= 0) {
        join(&m->done, &m->s[id].vc);
        settle(m);
    }
    if (gm_array_view(a)->data != v.data || gm_array_view(a)->offset != v.offset)
        fail("gm_array_from_foreign: the array does not view the memory");
    hold(m, slot, a, new_group(m, b, (int)(o - m->owners), false));
}

/* Counts the deleter of an export, then runs gpumem's. */
static void on_dlpack_delete(DLManagedTensorVersioned *self)
{
    for (int i = 0; i < M.nowners; i++) {
        owner *o = &M.owners[i];

        if (o->dlpack && o->tensor == self && atomic_load(&o->calls) == 0) {
            atomic_fetch_add(&o->calls, 1);
            o->deleter(self);
            return;
        }
    }
    fail("a DLPack deleter ran for an unknown tensor, or twice");
}

/* Export a held device array to DLPack; import it back, or drop it as a consumer. */
static void op_dlpack(model *m, reader *r)
{
    uint8_t how = take_u8(r);
    handle *h = pick_handle(m, r);
    int slot = free_slot(m);
    owner *o = NULL;
    DLManagedTensorVersioned *t = NULL;
    gm_array *a = NULL;
    const gm_ndview *v = NULL;

    if (h == NULL || slot < 0 || m->bufs[h->buf].kind != B_DEVICE || (o = new_owner(m)) == NULL)
        return;
    v = gm_array_view(h->a);
    expect_status(gm_array_to_dlpack(h->a, &t), GM_OK, "gm_array_to_dlpack");
    o->dlpack = true;
    o->tensor = t;
    o->deleter = t->deleter;
    o->hold_grp = h->grp;
    m->groups[h->grp].arrays++;
    t->deleter = on_dlpack_delete;
    if (t->dl_tensor.ndim != 1 || t->dl_tensor.shape[0] != v->shape[0] ||
        (char *)t->dl_tensor.data + t->dl_tensor.byte_offset != (char *)v->data + v->offset)
        fail("gm_array_to_dlpack: the tensor does not describe the array");
    if (how & 1) {
        say("  DLPack export of slot %ld dropped by its consumer", (long)(h - m->h));
        o->due = true;
        t->deleter(t);
        check_owners(m, "after the consumer called the deleter");
        return;
    }
    say("  DLPack export of slot %ld imported -> slot %d", (long)(h - m->h), slot);
    expect_status(gm_array_from_dlpack(m->ctx, t, &a), GM_OK, "gm_array_from_dlpack");
    if (gm_array_view(a)->memory != GM_MEMORY_DEVICE ||
        (char *)gm_array_view(a)->data + gm_array_view(a)->offset != (char *)v->data + v->offset)
        fail("gm_array_from_dlpack: the import does not view the exported memory");
    hold(m, slot, a, new_group(m, h->buf, (int)(o - m->owners), false));
    check_owners(m, "after an import");
}

/* defer_cleanup scopes and flushes (a flush runs the releases callbacks left queued). */
static void op_queue(model *m, reader *r)
{
    uint8_t b = take_u8(r);

    if (b % 3 == 0) {
        say("  defer_cleanup_begin");
        expect_status(gm_defer_cleanup_begin(m->ctx), GM_OK, "gm_defer_cleanup_begin");
        m->depth++;
        return;
    }
    if (b % 3 == 1 && m->depth > 0) {
        say("  defer_cleanup_end");
        expect_status(gm_defer_cleanup_end(m->ctx), GM_OK, "gm_defer_cleanup_end");
        m->depth--;
        return;
    }
    say("  flush");
    expect_status(gm_deallocations_flush(m->ctx), GM_OK, "gm_deallocations_flush");
    if (m->depth > 0)
        return;
    for (int i = 0; i < m->nowners; i++)
        if (m->owners[i].due)
            m->owners[i].last_in_callback = false; /* what callbacks released is freed now */
    check_owners(m, "after a flush");
}

/* Calls with bad arguments: the documented status and a message. */
static void op_bad(model *m, reader *r)
{
    uint8_t b = take_u8(r);
    gm_stream *st = (gm_stream *)(uintptr_t)0x5a5a5a50;

    gm_clear_error();
    switch (b % 4) {
    case 0:
        say("  bad: gm_stream_create with unknown flags");
        expect_error(gm_stream_create(m->ctx, 2u << (b >> 4), &st), GM_ERR_INVALID_ARG,
                     "gm_stream_create");
        if (st != (gm_stream *)(uintptr_t)0x5a5a5a50)
            fail("gm_stream_create failed but wrote its output");
        break;
    case 1:
        say("  bad: gm_stream_add_callback without a function");
        expect_error(gm_stream_add_callback(m->s[ID_LEGACY].h, NULL, NULL), GM_ERR_NULL_POINTER,
                     "gm_stream_add_callback");
        break;
    case 2:
        say("  bad: gm_stream_synchronize(NULL)");
        expect_error(gm_stream_synchronize(NULL), GM_ERR_NULL_POINTER, "gm_stream_synchronize");
        break;
    default: {
        handle *h = pick_handle(m, r);
        gm_host_scope *scope = NULL;

        if (h == NULL || m->bufs[h->buf].kind != B_DEVICE)
            return;
        say("  bad: gm_pin of device memory");
        expect_error(gm_pin(m->ctx, 1, gm_array_view(h->a), &scope), GM_ERR_INVALID_ARG, "gm_pin");
        if (scope != NULL)
            fail("a failed gm_pin wrote its scope");
        break;
    }
    }
}

typedef void (*op_fn)(model *m, reader *r);

static const struct {
    op_fn fn;
    const char *name;
} ops[] = {
    {op_create, "create"},     {op_to_device, "to_device"},
    {op_copy, "copy"},         {op_copy, "copy"},
    {op_copy, "copy"},         {op_fill, "fill"},
    {op_check, "check"},       {op_retain_release, "retain/release"},
    {op_stream, "stream"},     {op_sync, "sync"},
    {op_event, "event"},       {op_event, "event"},
    {op_callback, "callback"}, {op_auto, "auto_synchronize"},
    {op_scope, "host scope"},  {op_foreign, "foreign"},
    {op_dlpack, "dlpack"},     {op_queue, "queue"},
    {op_bad, "bad"},           {op_kernel, "kernel"},
};
#define NOPS (int)(sizeof ops / sizeof ops[0])

/* Wait for everything, release everything, check that every release ran once. */
static void finish(model *m)
{
    int64_t free_b = 0, total = 0;

    current_op = "the final release";
    for (int t = 0; t < m->nids; t++)
        while (m->s[t].alive && m->s[t].auto_depth > 0) {
            expect_status(gm_stream_auto_synchronize_end(m->s[t].h), GM_OK,
                          "gm_stream_auto_synchronize_end");
            m->s[t].auto_depth--;
        }
    sync_context(m);
    for (int i = 0; i < m->ncbs; i++)
        if (!m->cbs[i].settled)
            fail("callback %d never settled", i);
    for (int s = 0; s < NSCRATCH; s++)
        if (m->bufs[s].scope != NULL)
            expect_status(gm_host_scope_end(&m->bufs[s].scope), GM_OK, "gm_host_scope_end");
    for (int i = 0; i < NEVENTS; i++)
        gm_event_destroy(&m->ev[i].e);
    gm_event_destroy(&m->sync_ev);
    for (int t = 2; t < m->nids; t++)
        if (m->s[t].alive)
            gm_stream_destroy(&m->s[t].h);
    while (m->depth > 0) {
        expect_status(gm_defer_cleanup_end(m->ctx), GM_OK, "gm_defer_cleanup_end");
        m->depth--;
    }
    for (int i = 0; i < MAX_HANDLES; i++)
        while (m->h[i].a != NULL)
            release_handle(m, &m->h[i]);
    expect_status(gm_deallocations_flush(m->ctx), GM_OK, "gm_deallocations_flush");
    for (int i = 0; i < m->nowners; i++)
        m->owners[i].last_in_callback = false;
    check_owners(m, "after releasing everything");
    for (int i = 0; i < m->nowners; i++)
        if (atomic_load(&m->owners[i].calls) != 1)
            fail("%s %d released %d times by the end", m->owners[i].dlpack ? "export" : "owner", i,
                 atomic_load(&m->owners[i].calls));
    expect_status(gm_deallocations_flush(m->ctx), GM_OK, "gm_deallocations_flush");
    expect_status(gm_context_memory_info(m->ctx, &free_b, &total), GM_OK, "gm_context_memory_info");
    if (free_b != total)
        fail("%lld bytes of device memory in use after releasing everything and a flush",
             (long long)(total - free_b));
    gm_context_destroy(&m->ctx);
    for (int i = NSCRATCH; i < m->nbufs; i++) {
        free(m->bufs[i].img);
        free(m->bufs[i].known);
    }
    for (int i = 0; i < m->nchecks; i++) {
        free(m->checks[i].expect);
        free(m->checks[i].care);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size};
    model *m = &M;
    gm_context_options o;
    uint8_t dev = take_u8(&r);
    char mem[32];

    memset(m, 0, sizeof *m);
    m->r = &r;
    current_op = "setup";
    m->device_total = dev % 4 == 0 ? (int64_t)(1 + (dev >> 2) % 16) << 16 : DEVICE_MEM;
    snprintf(mem, sizeof mem, "%lld", (long long)m->device_total);
    setenv("GM_HOST_DEVICE_MEMORY", mem, 1);
    gm_context_options_default(&o);
    o.backend = GM_BACKEND_HOST;
    expect_status(gm_context_create(&o, &m->ctx), GM_OK, "gm_context_create");
    say("context: %lld bytes of device memory", (long long)m->device_total);
    m->s[ID_LEGACY] = (mstream){.h = gm_default_stream(m->ctx), .kind = S_LEGACY, .alive = true};
    m->s[ID_PTD] = (mstream){
        .h = gm_per_thread_default_stream(m->ctx), .kind = S_PTD, .blocking = true, .alive = true};
    m->nids = 2;
    if (m->s[ID_LEGACY].h == NULL || m->s[ID_PTD].h == NULL)
        fail("no built-in stream: %s", gm_last_error_message());
    expect_status(gm_event_create(m->ctx, false, &m->sync_ev), GM_OK, "gm_event_create");
    for (int s = 0; s < NSCRATCH; s++)
        new_buf(m, B_SCRATCH, (uintptr_t)scratch[s], SCRATCH);
    for (int n = 0; n < MAX_OPS && r.n > 0; n++) {
        int op = take_u8(&r) % NOPS;

        current_op = ops[op].name;
        ops[op].fn(m, &r);
        check_owners(m, "between operations");
    }
    finish(m);
    return 0;
}
