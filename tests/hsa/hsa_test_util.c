#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gm_test_file.h"
#include "hsa_test_util.h"

const gm_backend_ops *const hsa_ops = &gm__hsa_backend;

gm_backend_ctx *hsa_test_open(const hsa_double_config *cfg, int32_t device_id)
{
    gm_backend_init_args args = {device_id, 0};
    gm_backend_ctx *bctx = NULL;

    hsa_double_reset(cfg);
    assert_ok(hsa_ops->init(&args, &bctx));
    assert_non_null(bctx);
    return bctx;
}

void hsa_test_assert_no_violations(void)
{
    static char text[8192];
    long n = hsa_double_violations(text, sizeof(text));

    if (n != 0) {
        print_error("the HSA runtime double recorded %ld violation(s):\n%s", n, text);
        fail();
    }
}

void hsa_test_assert_nothing_live(void)
{
    hsa_double_live live;

    hsa_double_get_live(&live);
    if (live.signals != 0 || live.queues != 0 || live.pool_allocations != 0 || live.locks != 0 ||
        live.executables != 0 || live.readers != 0 || live.ipc_attachments != 0 ||
        live.handlers != 0 || live.pending_copies != 0) {
        print_error("live runtime objects: signals %ld queues %ld allocations %ld locks %ld "
                    "executables %ld readers %ld ipc %ld handlers %ld copies %ld\n",
                    live.signals, live.queues, live.pool_allocations, live.locks, live.executables,
                    live.readers, live.ipc_attachments, live.handlers, live.pending_copies);
        fail();
    }
}

void hsa_test_close(gm_backend_ctx *bctx)
{
    hsa_ops->fini(bctx);
    hsa_test_assert_nothing_live();
    hsa_test_assert_no_violations();
    assert_int_equal(hsa_double_calls("hsa_memory_register"), 0);
}

void *hsa_test_read_fixture(const char *env, size_t *bytes_p)
{
    return gm_test_read_file(getenv(env), bytes_p);
}

void hsa_test_axpy_host(const hsa_kernel_dispatch_packet_t *packet, void *user)
{
    const unsigned char *k = packet->kernarg_address;
    const int32_t *bias = user;
    axpy_args a;

    memcpy(&a.a, k + 0, 4);
    memcpy(&a.x, k + 8, 8);
    memcpy(&a.y, k + 16, 8);
    memcpy(&a.n, k + 24, 4);
    for (uint32_t i = 0; i < packet->grid_size_x; i++) {
        if ((int32_t)i < a.n)
            a.y[i] = a.a * a.x[i] + a.y[i] + (float)(bias != NULL ? bias[i & 3] : 0);
    }
}

gm_copy_desc hsa_test_copy1d(gm_copy_side dst_side, gm_devptr dst, gm_copy_side src_side,
                             gm_devptr src, size_t bytes)
{
    gm_copy_desc d;

    memset(&d, 0, sizeof(d));
    d.dst_side = dst_side;
    d.src_side = src_side;
    d.dst = dst;
    d.src = src;
    d.width_bytes = bytes;
    d.height = 1;
    d.depth = 1;
    d.dst_pitch = bytes;
    d.src_pitch = bytes;
    d.dst_height = 1;
    d.src_height = 1;
    return d;
}

gm_devptr hsa_test_to_device(gm_backend_ctx *bctx, const void *host, size_t bytes)
{
    gm_devptr dev = 0;
    gm_copy_desc d;

    assert_ok(hsa_ops->mem_alloc(bctx, bytes, &dev));
    d = hsa_test_copy1d(GM_COPY_DEVICE, dev, GM_COPY_HOST, (gm_devptr)(uintptr_t)host, bytes);
    assert_ok(hsa_ops->copy(bctx, &d, NULL));
    return dev;
}

void hsa_test_to_host(gm_backend_ctx *bctx, void *host, gm_devptr dev, size_t bytes)
{
    gm_copy_desc d =
        hsa_test_copy1d(GM_COPY_HOST, (gm_devptr)(uintptr_t)host, GM_COPY_DEVICE, dev, bytes);

    assert_ok(hsa_ops->copy(bctx, &d, NULL));
}

hsa_signal_value_t hsa_test_wait_done(hsa_signal_t signal)
{
    struct timespec start, now;
    hsa_signal_value_t v = 1;

    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        v = hsa_signal_wait_scacquire(signal, HSA_SIGNAL_CONDITION_LT, 1, 100000000u,
                                      HSA_WAIT_STATE_BLOCKED);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (v < 1 || now.tv_sec - start.tv_sec > 5)
            break;
    }
    assert_true(v < 1);
    return v;
}
