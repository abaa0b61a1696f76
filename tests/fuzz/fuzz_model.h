/*
 * The byte model the stateful fuzz targets share: a buffer's image (what its
 * bytes must hold) and which of them are defined, and the elements of a view
 * of it, walked in C order.
 */
#ifndef GPUMEM_TESTS_FUZZ_MODEL_H
#define GPUMEM_TESTS_FUZZ_MODEL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gpumem/gpumem.h>

#ifndef FUZZ_TARGET
#error "define FUZZ_TARGET (the target's name, for messages) before including fuzz_model.h"
#endif

static const char *current_op = "setup"; /* the operation running, for messages */
static bool trace;                       /* print each call (the target's TRACE variable) */

/* Report a model mismatch after the current operation and abort. */
static void fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static void fail(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, FUZZ_TARGET ": after %s: ", current_op);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    abort();
}

/* A line of the call trace, when tracing. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
    va_list ap;

    if (!trace)
        return;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
}

/* Every warning or error the library logs is a failure of the input. */
static void fuzz_log_hook(gm_log_level level, const char *message, void *user)
{
    (void)user;
    if (level <= GM_LOG_WARN)
        fail("the library logged: %s", message);
}

/* The host backend with `memory_var` (a GM_HOST_* size variable) set to 64M, no mlock, the
 * log hook above, and tracing when `trace_var` is set. */
static void fuzz_setup(const char *memory_var, const char *trace_var)
{
    setenv("GM_BACKEND", "host", 1);
    setenv(memory_var, "64M", 1);
    setenv("GM_HOST_MLOCK", "0", 1);
    trace = getenv(trace_var) != NULL;
    gm_set_log_hook(fuzz_log_hook, NULL);
    gm_set_log_level(GM_LOG_WARN);
}

/* A call that must return `want`. */
static void expect_status(gm_status got, gm_status want, const char *call)
{
    if (got != want)
        fail("%s returned %s, expected %s (%s)", call, gm_status_name(got), gm_status_name(want),
             gm_last_error_message());
    /* The targets clear the thread's error after every error they expect, so a call
     * that succeeds must find it clear: a way it tried first leaves nothing behind. */
    if (got == GM_OK && gm_last_error() != GM_OK)
        fail("%s succeeded but left %s as the thread's error (%s)", call,
             gm_status_name(gm_last_error()), gm_last_error_message());
}

/* A modelled buffer: [base, base + bytes), its image and its defined bytes. */
typedef struct fuzz_image {
    uintptr_t base;
    int64_t bytes;
    unsigned char *img;
    unsigned char *known;
} fuzz_image;

/* Element count of a view. */
static inline int64_t fuzz_elements(const gm_ndview *v)
{
    int64_t n = 1;

    for (int i = 0; i < v->ndim; i++)
        n *= v->shape[i];
    return n;
}

/* Absolute address of element e (C order over the shape). */
static inline uintptr_t fuzz_element_at(const gm_ndview *v, int64_t e)
{
    intptr_t off = (intptr_t)v->offset;

    for (int i = v->ndim - 1; i >= 0; i--) {
        off += (intptr_t)((e % v->shape[i]) * v->strides[i]);
        e /= v->shape[i];
    }
    return (uintptr_t)v->data + (uintptr_t)off;
}

/* Byte offset of element e of v in the image; -1 when it lies outside. */
static inline int64_t fuzz_offset(const fuzz_image *b, const gm_ndview *v, int64_t e)
{
    int64_t k = (int64_t)gm_dtype_itemsize(v->dtype);
    int64_t rel = (int64_t)(fuzz_element_at(v, e) - b->base);

    return rel < 0 || rel + k > b->bytes ? -1 : rel;
}

/* fuzz_offset, failing when the element lies outside the image. */
static inline int64_t fuzz_offset_checked(const fuzz_image *b, const gm_ndview *v, int64_t e)
{
    int64_t rel = fuzz_offset(b, v, e);

    if (rel < 0)
        fail("element %lld of a view lies at byte %lld of a %lld-byte buffer", (long long)e,
             (long long)(fuzz_element_at(v, e) - b->base), (long long)b->bytes);
    return rel;
}

/* The elements of v, packed in C order, with their defined bytes (fails outside the image). */
static inline void fuzz_gather(const fuzz_image *b, const gm_ndview *v, unsigned char *out,
                               unsigned char *known)
{
    int64_t k = (int64_t)gm_dtype_itemsize(v->dtype), n = fuzz_elements(v);

    for (int64_t e = 0; e < n; e++) {
        int64_t rel = fuzz_offset_checked(b, v, e);

        memcpy(out + e * k, b->img + rel, (size_t)k);
        memcpy(known + e * k, b->known + rel, (size_t)k);
    }
}

/* Write packed elements into v (fails outside the image); the end of the highest one. */
static inline int64_t fuzz_scatter(fuzz_image *b, const gm_ndview *v, const unsigned char *in,
                                   const unsigned char *known)
{
    int64_t k = (int64_t)gm_dtype_itemsize(v->dtype), n = fuzz_elements(v), end = 0;

    for (int64_t e = 0; e < n; e++) {
        int64_t rel = fuzz_offset_checked(b, v, e);

        memcpy(b->img + rel, in + e * k, (size_t)k);
        memcpy(b->known + rel, known + e * k, (size_t)k);
        end = rel + k > end ? rel + k : end;
    }
    return end;
}

#endif /* GPUMEM_TESTS_FUZZ_MODEL_H */
