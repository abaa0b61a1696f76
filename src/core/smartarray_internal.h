/*
 * What a launch does with a smart array argument (gm_arg_smart). Not installed.
 */
#ifndef GPUMEM_SRC_CORE_SMARTARRAY_INTERNAL_H
#define GPUMEM_SRC_CORE_SMARTARRAY_INTERNAL_H

#include "gpumem/smartarray.h"

/*
 * Before the launch: the smart array is of `ctx`; its device side is made
 * current (after any earlier launch that used it) and *devptr_p is the
 * address of its element (0, ..., 0). Errors name `fn` and argument `arg`.
 */
gm_status gm__smart_launch_begin(gm_smart_array *sa, gm_context *ctx, const char *fn, int arg,
                                 void **devptr_p);

/*
 * After a launch on `stream` (NULL: synchronous): the device side is the
 * current one, and the next transfer waits for the launch first.
 */
void gm__smart_launch_end(gm_smart_array *sa, gm_stream *stream);

#endif /* GPUMEM_SRC_CORE_SMARTARRAY_INTERNAL_H */
