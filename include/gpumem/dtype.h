/**
 * @file gpumem/dtype.h
 * @brief Element types, laid out exactly like DLPack's DLDataType.
 */
#ifndef GPUMEM_DTYPE_H
#define GPUMEM_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "export.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Type codes; the values are DLPack's DLDataTypeCode values. */
typedef enum gm_dtype_code {
    GM_DTYPE_INT = 0,     /**< signed integer (kDLInt) */
    GM_DTYPE_UINT = 1,    /**< unsigned integer (kDLUInt) */
    GM_DTYPE_FLOAT = 2,   /**< IEEE floating point (kDLFloat) */
    GM_DTYPE_BFLOAT = 4,  /**< bfloat16 (kDLBfloat) */
    GM_DTYPE_COMPLEX = 5, /**< complex, bits = both parts (kDLComplex) */
    GM_DTYPE_BOOL = 6     /**< boolean stored in 8 bits (kDLBool) */
} gm_dtype_code;

/**
 * An element type: same layout and meaning as DLPack's DLDataType.
 * bits is the width of one lane; lanes > 1 is a short vector type.
 */
typedef struct gm_dtype {
    uint8_t code;   /**< a gm_dtype_code */
    uint8_t bits;   /**< bits per lane: 8, 16, 32, 64 or 128 */
    uint16_t lanes; /**< lanes per element, 1 for scalars */
} gm_dtype;

/**
 * Constants for the supported scalar types (compound literals: in a static
 * initializer write GM_DTYPE_INIT(GM_DTYPE_FLOAT, 32) instead).
 */
#define GM_DTYPE_INIT(c, b)           \
    {                                 \
        (uint8_t)(c), (uint8_t)(b), 1 \
    }
#define GM_BOOL       ((gm_dtype)GM_DTYPE_INIT(GM_DTYPE_BOOL, 8))
#define GM_INT8       ((gm_dtype)GM_DTYPE_INIT(GM_DTYPE_INT, 8))
#define GM_INT16      ((gm_dtype)GM_DTYPE_INIT(GM_DTYPE_INT, 16))
#define GM_INT32      ((gm_dtype)GM_DTYPE_INIT(GM_DTYPE_INT, 32))
#define GM_INT64      ((gm_dtype)GM_DTYPE_INIT(GM_DTYPE_INT, 64))
#define GM_UINT8      ((gm_dtype)GM_DTYPE_INIT(GM_DTYPE_UINT, 8))
#define GM_UINT16     ((gm_dtype)GM_DTYPE_INIT(GM_DTYPE_UINT, 16))
#define GM_UINT32     ((gm_dtype)GM_DTYPE_INIT(GM_DTYPE_UINT, 32))
#define GM_UINT64     ((gm_dtype)GM_DTYPE_INIT(GM_DTYPE_UINT, 64))
#define GM_FLOAT16    ((gm_dtype)GM_DTYPE_INIT(GM_DTYPE_FLOAT, 16))
#define GM_BFLOAT16   ((gm_dtype)GM_DTYPE_INIT(GM_DTYPE_BFLOAT, 16))
#define GM_FLOAT32    ((gm_dtype)GM_DTYPE_INIT(GM_DTYPE_FLOAT, 32))
#define GM_FLOAT64    ((gm_dtype)GM_DTYPE_INIT(GM_DTYPE_FLOAT, 64))
#define GM_COMPLEX64  ((gm_dtype)GM_DTYPE_INIT(GM_DTYPE_COMPLEX, 64))
#define GM_COMPLEX128 ((gm_dtype)GM_DTYPE_INIT(GM_DTYPE_COMPLEX, 128))

/** Longest name gm_dtype_name() writes, terminator included. */
#define GM_DTYPE_NAME_MAX 32

/**
 * @brief Whether gpumem supports this dtype (one of the constants above, or
 *        such a type with lanes > 1).
 */
GM_API bool gm_dtype_is_valid(gm_dtype dtype);

/**
 * @brief Bytes per element (bits * lanes / 8).
 * @return the item size, or 0 for an unsupported dtype.
 */
GM_API size_t gm_dtype_itemsize(gm_dtype dtype);

/** @brief Whether two dtypes are the same (all three fields). */
GM_API bool gm_dtype_equal(gm_dtype a, gm_dtype b);

/**
 * @brief Parse a dtype name.
 *
 * Accepts numpy's names ("float32", "int8", "uint64", "bool", "complex128",
 * "bfloat16", "half", "single", "double"), numpy's type codes with an
 * optional byte-order prefix of '<', '=' or '|' ("f4", "<i8", "c16", "?",
 * "b1", "u2", "e"), and the one-letter codes of numpy's scalar types that
 * have a fixed size ("f" float32, "d" float64, "F" complex64, "D"
 * complex128, "b" int8, "B" uint8, "h"/"H" 16, "i"/"I" 32, "q"/"Q" 64).
 * A '>' (big-endian) prefix is rejected: gpumem's devices are little-endian.
 * @param name   NUL-terminated name.
 * @param out_p  receives the dtype; written only on success.
 * @return GM_OK, GM_ERR_NULL_POINTER, or GM_ERR_DTYPE for an unknown name.
 */
GM_API gm_status gm_dtype_from_name(const char *name, gm_dtype *out_p);

/**
 * @brief Canonical numpy name of a dtype ("float32", "bool", "bfloat16").
 *        Vector types get an "x<lanes>" suffix ("float32x4").
 * @param buf  caller's buffer of size bytes (GM_DTYPE_NAME_MAX is enough).
 * @return GM_OK, GM_ERR_NULL_POINTER, GM_ERR_DTYPE, or GM_ERR_INVALID_ARG if
 *         the buffer is too small (it then holds "").
 */
GM_API gm_status gm_dtype_name(gm_dtype dtype, char *buf, size_t size);

/**
 * @brief numpy's array-interface type string ("<f4", "|b1", "<c16").
 *        bfloat16 has none in numpy and gives GM_ERR_DTYPE.
 */
GM_API gm_status gm_dtype_typestr(gm_dtype dtype, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_DTYPE_H */
