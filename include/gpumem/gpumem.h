/**
 * @file gpumem/gpumem.h
 * @brief gpumem: Numba-style GPU memory management for C. Includes every
 *        host-side public header.
 */
#ifndef GPUMEM_GPUMEM_H
#define GPUMEM_GPUMEM_H

#include "dtype.h"
#include "export.h"
#include "ndview.h"
#include "status.h"
#include "runtime.h"
#include "memory_manager.h"
#include "dlpack.h"
#include "smartarray.h"
#include "launch.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Version of the library linked at run time, packed like GM_VERSION.
 *        Compare with GM_VERSION to detect a header/library mismatch.
 */
GM_API int gm_version(void);

/** @brief The run-time version as "MAJOR.MINOR.PATCH" (static string). */
GM_API const char *gm_version_string(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_GPUMEM_H */
