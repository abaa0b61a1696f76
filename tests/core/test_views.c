/*
 * Tests for the view operations in src/core/views.c.
 *
 * Every expected shape, stride and offset in the tables was produced by
 * numpy 1.24 while this file was written and then hard-coded: the input is
 * np.ndarray(shape, dtype, buffer=buf, offset=offset, strides=strides) and
 * the expected offset is the result's __array_interface__['data'][0] minus
 * the buffer's address. Error fragments follow numpy's messages where numpy
 * has one (its text is quoted in a comment beside the case).
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "gm_test.h"

/* Most dimensions of a layout in the tables. */
#define MAXD 8

/* dtype initializers usable in static tables (the GM_FLOAT64 constants are compound literals). */
#define D_F64  GM_DTYPE_INIT(GM_DTYPE_FLOAT, 64)
#define D_F32  GM_DTYPE_INIT(GM_DTYPE_FLOAT, 32)
#define D_F16  GM_DTYPE_INIT(GM_DTYPE_FLOAT, 16)
#define D_I64  GM_DTYPE_INIT(GM_DTYPE_INT, 64)
#define D_I32  GM_DTYPE_INIT(GM_DTYPE_INT, 32)
#define D_I16  GM_DTYPE_INIT(GM_DTYPE_INT, 16)
#define D_I8   GM_DTYPE_INIT(GM_DTYPE_INT, 8)
#define D_U8   GM_DTYPE_INIT(GM_DTYPE_UINT, 8)
#define D_C64  GM_DTYPE_INIT(GM_DTYPE_COMPLEX, 64)
#define D_C128 GM_DTYPE_INIT(GM_DTYPE_COMPLEX, 128)
#define D_F32X4               \
    {                         \
        GM_DTYPE_FLOAT, 32, 4 \
    }

/* Index items usable in static tables. */
#define S(a, b, c)         \
    {                      \
        GM_INDEX_SLICE, 0, \
        {                  \
            (a), (b), (c)  \
        }                  \
    }
#define I(i)                          \
    {                                 \
        GM_INDEX_INT, (i),            \
        {                             \
            GM_NONE, GM_NONE, GM_NONE \
        }                             \
    }
#define NEW                           \
    {                                 \
        GM_INDEX_NEWAXIS, 0,          \
        {                             \
            GM_NONE, GM_NONE, GM_NONE \
        }                             \
    }
#define ELL                           \
    {                                 \
        GM_INDEX_ELLIPSIS, 0,         \
        {                             \
            GM_NONE, GM_NONE, GM_NONE \
        }                             \
    }

/* numpy's flags.c_contiguous / flags.f_contiguous of a getitem result. */
#define GM_T_C 1
#define GM_T_F 2

/* The device every test view claims to live on; results must keep it. */
#define TEST_DEVICE 3

/* Shape, strides and byte offset of a view. */
typedef struct layout {
    int ndim;
    int64_t shape[MAXD];
    int64_t strides[MAXD];
    int64_t offset;
} layout;

/* The base pointer of every test view (never dereferenced by the library). */
static char test_buffer[16];

/* A view of `l` in device memory of TEST_DEVICE. */
static gm_ndview make_view(const layout *l, gm_dtype dtype)
{
    gm_ndview v;

    memset(&v, 0, sizeof(v));
    v.data = test_buffer;
    v.offset = l->offset;
    v.dtype = dtype;
    v.ndim = l->ndim;
    v.memory = GM_MEMORY_DEVICE;
    v.device_id = TEST_DEVICE;
    for (int i = 0; i < l->ndim; i++) {
        v.shape[i] = l->shape[i];
        v.strides[i] = l->strides[i];
    }
    return v;
}

/* Fail unless v has layout l and dtype, and kept the data pointer, memory kind and device. */
static void check_layout(const char *name, const gm_ndview *v, const layout *l, gm_dtype dtype)
{
    char got_shape[256], got_strides[256], want_shape[256], want_strides[256];
    bool same = v->ndim == l->ndim && v->offset == l->offset && gm_dtype_equal(v->dtype, dtype);

    for (int i = 0; same && i < l->ndim; i++)
        same = v->shape[i] == l->shape[i] && v->strides[i] == l->strides[i];
    if (same && v->data == test_buffer && v->memory == GM_MEMORY_DEVICE &&
        v->device_id == TEST_DEVICE)
        return;
    print_error("%s: got shape %s strides %s offset %lld (data %p, memory %d, device %d), "
                "expected shape %s strides %s offset %lld\n",
                name, gm_format_shape(v->ndim, v->shape, got_shape, sizeof(got_shape)),
                gm_format_shape(v->ndim, v->strides, got_strides, sizeof(got_strides)),
                (long long)v->offset, v->data, (int)v->memory, (int)v->device_id,
                gm_format_shape(l->ndim, l->shape, want_shape, sizeof(want_shape)),
                gm_format_shape(l->ndim, l->strides, want_strides, sizeof(want_strides)),
                (long long)l->offset);
    fail();
}

/*
 * Check one call: its status; for an error, a message naming `fn` and
 * containing `fragment`, and an output left as the 0xA5 sentinel; for
 * success, the layout.
 */
static void check_result(const char *fn, const char *name, gm_status got, gm_status expected,
                         const char *fragment, const gm_ndview *out, const layout *want,
                         gm_dtype dtype)
{
    gm_ndview sentinel;

    if (got != expected) {
        print_error("%s: %s returned %s, expected %s; message \"%s\"\n", name, fn,
                    gm_status_name(got), gm_status_name(expected), gm_last_error_message());
        fail();
    }
    if (expected == GM_OK) {
        check_layout(name, out, want, dtype);
        return;
    }
    memset(&sentinel, 0xA5, sizeof(sentinel));
    if (memcmp(out, &sentinel, sizeof(sentinel)) != 0) {
        print_error("%s: %s wrote its output on failure\n", name, fn);
        fail();
    }
    if (strstr(gm_last_error_message(), fn) == NULL ||
        strstr(gm_last_error_message(), fragment) == NULL) {
        print_error("%s: message \"%s\" lacks \"%s\" or \"%s\"\n", name, gm_last_error_message(),
                    fn, fragment);
        fail();
    }
}

/* An output descriptor filled with the 0xA5 sentinel. */
static gm_ndview sentinel_view(void)
{
    gm_ndview v;

    memset(&v, 0xA5, sizeof(v));
    return v;
}

/* Input layouts shared by the tables (float64 unless a table says otherwise). */
static const layout L_A1 = {1, {10}, {8}, 0};
static const layout L_A1N = {1, {10}, {-8}, 72};
static const layout L_A2 = {2, {4, 5}, {40, 8}, 0};
static const layout L_A3 = {2, {4, 3}, {80, 16}, 8};
static const layout L_E1 = {1, {0}, {8}, 16};
static const layout L_Z = {0, {0}, {0}, 24};
static const layout L_B3 = {3, {2, 3, 4}, {96, 32, 8}, 800};
static const layout L_N1 = {1, {4}, {8}, 0};
static const layout L_N2 = {2, {4, 5}, {40, 8}, 0};
static const layout L_N3 = {3, {4, 5, 6}, {240, 48, 8}, 0};
static const layout L_C = {2, {4, 5}, {40, 8}, 0};
static const layout L_F = {2, {5, 4}, {8, 40}, 0};
static const layout L_NC = {2, {4, 3}, {40, 16}, 0};
static const layout L_NEG = {2, {4, 5}, {-40, 8}, 120};
static const layout L_NC1 = {3, {3, 1, 2}, {32, 32, 16}, 0};
static const layout L_W1 = {3, {3, 1, 2}, {64, 7992, 16}, 0};
static const layout L_C1 = {2, {2, 1}, {24, 8}, 0};
static const layout L_NC2 = {2, {2, 2}, {96, 24}, 0};
static const layout L_NC2T = {2, {2, 2}, {24, 96}, 0};
static const layout L_EMPTY = {2, {0, 3}, {24, 8}, 0};
static const layout L_EMPTYW = {3, {2, 0, 3}, {8, 96, -16}, 64};
static const layout L_BCAST = {2, {3, 4}, {0, 8}, 0};
static const layout L_CW = {2, {1, 3}, {7992, 8}, 0};
static const layout L_Q = {6, {1, 2, 1, 4, 1, 3}, {192, 96, 96, 24, 24, 8}, 0};
static const layout L_QW = {4, {1, 3, 1, 2}, {-5, -16, 0, 8}, 40};
static const layout L_ONES = {2, {1, 1}, {0, 8}, 0};
static const layout L_P = {3, {2, 3, 4}, {96, -32, 8}, 64};
static const layout L_W = {4, {2, 1, 3, 2}, {8, 1000, -48, 0}, 160};

typedef struct slice_case {
    const char *name;
    const layout *in;
    int axis;
    gm_slice slice;
    gm_status status;
    layout out;
    const char *message;
} slice_case;

typedef struct index_case {
    const char *name;
    const layout *in;
    int axis;
    int64_t index;
    gm_status status;
    layout out;
    const char *message;
} index_case;

typedef struct getitem_case {
    const char *name;
    const layout *in;
    int nitems;
    gm_index_item items[6];
    gm_status status;
    layout out;
    int flags; /* GM_T_C / GM_T_F: numpy's contiguity flags of the result */
    const char *message;
} getitem_case;

typedef struct axis_case {
    const char *name;
    const layout *in;
    int axis;
    gm_status status;
    layout out;
    const char *message;
} axis_case;

typedef struct axes_case {
    const char *name;
    const layout *in;
    int naxes;
    int axes[6];
    gm_status status;
    layout out;
    const char *message;
} axes_case;

typedef struct swap_case {
    const char *name;
    const layout *in;
    int axis1, axis2;
    gm_status status;
    layout out;
    const char *message;
} swap_case;

typedef struct transpose_case {
    const char *name;
    const layout *in;
    layout out;
} transpose_case;

typedef struct dtype_case {
    const char *name;
    layout in;
    gm_dtype from, to;
    gm_status status;
    layout out;
    const char *message;
} dtype_case;

typedef struct like_case {
    const char *name;
    layout in;
    layout out; /* offset 0, data NULL */
} like_case;

typedef struct split_case {
    const char *name;
    layout in; /* float32 */
    int64_t section;
    int64_t max_pieces;
    gm_status status;
    int64_t count;
    int64_t offsets[4];
    int64_t extents[4];
    int64_t stride; /* of every piece */
    const char *message;
} split_case;

/* Generated from numpy 1.24 and hard-coded: one case per line. */
/* clang-format off */
/* gm_ndview_slice: numpy a[(slice(None),) * axis + (s,)] */
static const slice_case slice_cases[] = {
    {"A1 axis 0, [5:2]", &L_A1, 0, {5, 2, GM_NONE}, GM_OK, {1, {0}, {8}, 0}, NULL},
    {"A1 axis 0, [20:30]", &L_A1, 0, {20, 30, GM_NONE}, GM_OK, {1, {0}, {8}, 0}, NULL},
    {"A1 axis 0, [::-1]", &L_A1, 0, {GM_NONE, GM_NONE, -1}, GM_OK, {1, {10}, {-8}, 72}, NULL},
    {"A1 axis 0, [-100:]", &L_A1, 0, {-100, GM_NONE, GM_NONE}, GM_OK, {1, {10}, {8}, 0}, NULL},
    {"A1 axis 0, [::-3]", &L_A1, 0, {GM_NONE, GM_NONE, -3}, GM_OK, {1, {4}, {-24}, 72}, NULL},
    {"A1 axis 0, [8:1:-3]", &L_A1, 0, {8, 1, -3}, GM_OK, {1, {3}, {-24}, 64}, NULL},
    {"A1 axis 0, [::4611686018427387904]", &L_A1, 0, {GM_NONE, GM_NONE, 4611686018427387904}, GM_OK, {1, {1}, {0}, 0}, NULL},
    {"A1 axis 0, [3::4611686018427387904]", &L_A1, 0, {3, GM_NONE, 4611686018427387904}, GM_OK, {1, {1}, {0}, 24}, NULL},
    {"A1 axis 0, [-1:-100:-1]", &L_A1, 0, {-1, -100, -1}, GM_OK, {1, {10}, {-8}, 72}, NULL},
    {"A1 axis 0, [2:8:2]", &L_A1, 0, {2, 8, 2}, GM_OK, {1, {3}, {16}, 16}, NULL},
    {"A1 axis 0, [-3:]", &L_A1, 0, {-3, GM_NONE, GM_NONE}, GM_OK, {1, {3}, {8}, 56}, NULL},
    {"A1 axis 0, [:-3]", &L_A1, 0, {GM_NONE, -3, GM_NONE}, GM_OK, {1, {7}, {8}, 0}, NULL},
    {"A1 axis 0, [::2305843009213693953]", &L_A1, 0, {GM_NONE, GM_NONE, 2305843009213693953}, GM_OK, {1, {1}, {8}, 0}, NULL},
    {"A1 axis 0, [::-2305843009213693953]", &L_A1, 0, {GM_NONE, GM_NONE, -2305843009213693953}, GM_OK, {1, {1}, {-8}, 72}, NULL},
    {"A1 axis 0, [-9223372036854775807:9223372036854775807]", &L_A1, 0, {-INT64_MAX, INT64_MAX, GM_NONE}, GM_OK, {1, {10}, {8}, 0}, NULL},
    {"A1 axis 0, [9223372036854775807:-9223372036854775807:-1]", &L_A1, 0, {INT64_MAX, -INT64_MAX, -1}, GM_OK, {1, {10}, {-8}, 72}, NULL},
    {"A1 axis 0, [5:5]", &L_A1, 0, {5, 5, GM_NONE}, GM_OK, {1, {0}, {8}, 0}, NULL},
    {"A1 axis 0, [5:2:-1]", &L_A1, 0, {5, 2, -1}, GM_OK, {1, {3}, {-8}, 40}, NULL},
    {"A1 axis 0, [2:5:-1]", &L_A1, 0, {2, 5, -1}, GM_OK, {1, {0}, {8}, 0}, NULL},
    {"A1 axis 0, [::11]", &L_A1, 0, {GM_NONE, GM_NONE, 11}, GM_OK, {1, {1}, {88}, 0}, NULL},
    {"A1 axis 0, [::-11]", &L_A1, 0, {GM_NONE, GM_NONE, -11}, GM_OK, {1, {1}, {-88}, 72}, NULL},
    {"A1 axis 0, [10::-1]", &L_A1, 0, {10, GM_NONE, -1}, GM_OK, {1, {10}, {-8}, 72}, NULL},
    {"A1 axis 0, [-11::1]", &L_A1, 0, {-11, GM_NONE, 1}, GM_OK, {1, {10}, {8}, 0}, NULL},
    {"A1 axis 0, [:-11:-1]", &L_A1, 0, {GM_NONE, -11, -1}, GM_OK, {1, {10}, {-8}, 72}, NULL},
    {"A1 axis 0, [:]", &L_A1, 0, {GM_NONE, GM_NONE, GM_NONE}, GM_OK, {1, {10}, {8}, 0}, NULL},
    {"A1 axis 0, [9:]", &L_A1, 0, {9, GM_NONE, GM_NONE}, GM_OK, {1, {1}, {8}, 72}, NULL},
    {"A1N axis 0, [5:2]", &L_A1N, 0, {5, 2, GM_NONE}, GM_OK, {1, {0}, {-8}, 72}, NULL},
    {"A1N axis 0, [20:30]", &L_A1N, 0, {20, 30, GM_NONE}, GM_OK, {1, {0}, {-8}, 72}, NULL},
    {"A1N axis 0, [::-1]", &L_A1N, 0, {GM_NONE, GM_NONE, -1}, GM_OK, {1, {10}, {8}, 0}, NULL},
    {"A1N axis 0, [-100:]", &L_A1N, 0, {-100, GM_NONE, GM_NONE}, GM_OK, {1, {10}, {-8}, 72}, NULL},
    {"A1N axis 0, [::-3]", &L_A1N, 0, {GM_NONE, GM_NONE, -3}, GM_OK, {1, {4}, {24}, 0}, NULL},
    {"A1N axis 0, [8:1:-3]", &L_A1N, 0, {8, 1, -3}, GM_OK, {1, {3}, {24}, 8}, NULL},
    {"A1N axis 0, [::4611686018427387904]", &L_A1N, 0, {GM_NONE, GM_NONE, 4611686018427387904}, GM_OK, {1, {1}, {0}, 72}, NULL},
    {"A1N axis 0, [3::4611686018427387904]", &L_A1N, 0, {3, GM_NONE, 4611686018427387904}, GM_OK, {1, {1}, {0}, 48}, NULL},
    {"A1N axis 0, [-1:-100:-1]", &L_A1N, 0, {-1, -100, -1}, GM_OK, {1, {10}, {8}, 0}, NULL},
    {"A1N axis 0, [2:8:2]", &L_A1N, 0, {2, 8, 2}, GM_OK, {1, {3}, {-16}, 56}, NULL},
    {"A1N axis 0, [-3:]", &L_A1N, 0, {-3, GM_NONE, GM_NONE}, GM_OK, {1, {3}, {-8}, 16}, NULL},
    {"A1N axis 0, [:-3]", &L_A1N, 0, {GM_NONE, -3, GM_NONE}, GM_OK, {1, {7}, {-8}, 72}, NULL},
    {"A1N axis 0, [::2305843009213693953]", &L_A1N, 0, {GM_NONE, GM_NONE, 2305843009213693953}, GM_OK, {1, {1}, {-8}, 72}, NULL},
    {"A1N axis 0, [::-2305843009213693953]", &L_A1N, 0, {GM_NONE, GM_NONE, -2305843009213693953}, GM_OK, {1, {1}, {8}, 0}, NULL},
    {"A1N axis 0, [-9223372036854775807:9223372036854775807]", &L_A1N, 0, {-INT64_MAX, INT64_MAX, GM_NONE}, GM_OK, {1, {10}, {-8}, 72}, NULL},
    {"A1N axis 0, [9223372036854775807:-9223372036854775807:-1]", &L_A1N, 0, {INT64_MAX, -INT64_MAX, -1}, GM_OK, {1, {10}, {8}, 0}, NULL},
    {"A1N axis 0, [5:5]", &L_A1N, 0, {5, 5, GM_NONE}, GM_OK, {1, {0}, {-8}, 72}, NULL},
    {"A1N axis 0, [5:2:-1]", &L_A1N, 0, {5, 2, -1}, GM_OK, {1, {3}, {8}, 32}, NULL},
    {"A1N axis 0, [2:5:-1]", &L_A1N, 0, {2, 5, -1}, GM_OK, {1, {0}, {-8}, 72}, NULL},
    {"A1N axis 0, [::11]", &L_A1N, 0, {GM_NONE, GM_NONE, 11}, GM_OK, {1, {1}, {-88}, 72}, NULL},
    {"A1N axis 0, [::-11]", &L_A1N, 0, {GM_NONE, GM_NONE, -11}, GM_OK, {1, {1}, {88}, 0}, NULL},
    {"A1N axis 0, [10::-1]", &L_A1N, 0, {10, GM_NONE, -1}, GM_OK, {1, {10}, {8}, 0}, NULL},
    {"A1N axis 0, [-11::1]", &L_A1N, 0, {-11, GM_NONE, 1}, GM_OK, {1, {10}, {-8}, 72}, NULL},
    {"A1N axis 0, [:-11:-1]", &L_A1N, 0, {GM_NONE, -11, -1}, GM_OK, {1, {10}, {8}, 0}, NULL},
    {"A1N axis 0, [:]", &L_A1N, 0, {GM_NONE, GM_NONE, GM_NONE}, GM_OK, {1, {10}, {-8}, 72}, NULL},
    {"A1N axis 0, [9:]", &L_A1N, 0, {9, GM_NONE, GM_NONE}, GM_OK, {1, {1}, {-8}, 0}, NULL},
    {"E1 axis 0, [::-1]", &L_E1, 0, {GM_NONE, GM_NONE, -1}, GM_OK, {1, {0}, {8}, 16}, NULL},
    {"E1 axis 0, [::2]", &L_E1, 0, {GM_NONE, GM_NONE, 2}, GM_OK, {1, {0}, {8}, 16}, NULL},
    {"E1 axis 0, [1:]", &L_E1, 0, {1, GM_NONE, GM_NONE}, GM_OK, {1, {0}, {8}, 16}, NULL},
    {"E1 axis 0, [-1::-2]", &L_E1, 0, {-1, GM_NONE, -2}, GM_OK, {1, {0}, {8}, 16}, NULL},
    {"A2 axis 0, [1:3]", &L_A2, 0, {1, 3, GM_NONE}, GM_OK, {2, {2, 5}, {40, 8}, 40}, NULL},
    {"A2 axis 0, [::-2]", &L_A2, 0, {GM_NONE, GM_NONE, -2}, GM_OK, {2, {2, 5}, {-80, 8}, 120}, NULL},
    {"A2 axis 0, [3:0:-2]", &L_A2, 0, {3, 0, -2}, GM_OK, {2, {2, 5}, {-80, 8}, 120}, NULL},
    {"A2 axis 0, [4:0]", &L_A2, 0, {4, 0, GM_NONE}, GM_OK, {2, {0, 5}, {40, 8}, 0}, NULL},
    {"A2 axis 1, [1:3]", &L_A2, 1, {1, 3, GM_NONE}, GM_OK, {2, {4, 2}, {40, 8}, 8}, NULL},
    {"A2 axis 1, [::-2]", &L_A2, 1, {GM_NONE, GM_NONE, -2}, GM_OK, {2, {4, 3}, {40, -16}, 32}, NULL},
    {"A2 axis 1, [3:0:-2]", &L_A2, 1, {3, 0, -2}, GM_OK, {2, {4, 2}, {40, -16}, 24}, NULL},
    {"A2 axis 1, [4:0]", &L_A2, 1, {4, 0, GM_NONE}, GM_OK, {2, {4, 0}, {40, 8}, 0}, NULL},
    {"A2 axis -1, [1:3]", &L_A2, -1, {1, 3, GM_NONE}, GM_OK, {2, {4, 2}, {40, 8}, 8}, NULL},
    {"A2 axis -1, [::-2]", &L_A2, -1, {GM_NONE, GM_NONE, -2}, GM_OK, {2, {4, 3}, {40, -16}, 32}, NULL},
    {"A2 axis -1, [3:0:-2]", &L_A2, -1, {3, 0, -2}, GM_OK, {2, {4, 2}, {40, -16}, 24}, NULL},
    {"A2 axis -1, [4:0]", &L_A2, -1, {4, 0, GM_NONE}, GM_OK, {2, {4, 0}, {40, 8}, 0}, NULL},
    {"A2 axis -2, [1:3]", &L_A2, -2, {1, 3, GM_NONE}, GM_OK, {2, {2, 5}, {40, 8}, 40}, NULL},
    {"A2 axis -2, [::-2]", &L_A2, -2, {GM_NONE, GM_NONE, -2}, GM_OK, {2, {2, 5}, {-80, 8}, 120}, NULL},
    {"A2 axis -2, [3:0:-2]", &L_A2, -2, {3, 0, -2}, GM_OK, {2, {2, 5}, {-80, 8}, 120}, NULL},
    {"A2 axis -2, [4:0]", &L_A2, -2, {4, 0, GM_NONE}, GM_OK, {2, {0, 5}, {40, 8}, 0}, NULL},
    {"A3 axis 0, [::-1]", &L_A3, 0, {GM_NONE, GM_NONE, -1}, GM_OK, {2, {4, 3}, {-80, 16}, 248}, NULL},
    {"A3 axis 0, [1::2]", &L_A3, 0, {1, GM_NONE, 2}, GM_OK, {2, {2, 3}, {160, 16}, 88}, NULL},
    {"A3 axis 0, [-2::-3]", &L_A3, 0, {-2, GM_NONE, -3}, GM_OK, {2, {1, 3}, {-240, 16}, 168}, NULL},
    {"A3 axis 1, [::-1]", &L_A3, 1, {GM_NONE, GM_NONE, -1}, GM_OK, {2, {4, 3}, {80, -16}, 40}, NULL},
    {"A3 axis 1, [1::2]", &L_A3, 1, {1, GM_NONE, 2}, GM_OK, {2, {4, 1}, {80, 32}, 24}, NULL},
    {"A3 axis 1, [-2::-3]", &L_A3, 1, {-2, GM_NONE, -3}, GM_OK, {2, {4, 1}, {80, -48}, 24}, NULL},
    {"A2 axis 0, [::0]", &L_A2, 0, {GM_NONE, GM_NONE, 0}, GM_ERR_INVALID_ARG, {0}, "slice step cannot be zero"},
    {"A1 axis 0, [1:2:0]", &L_A1, 0, {1, 2, 0}, GM_ERR_INVALID_ARG, {0}, "slice step cannot be zero"},
    {"A2 axis 2, [:]", &L_A2, 2, {GM_NONE, GM_NONE, GM_NONE}, GM_ERR_OUT_OF_RANGE, {0}, "axis 2 is out of bounds for array of dimension 2"},
    {"A2 axis -3, [:]", &L_A2, -3, {GM_NONE, GM_NONE, GM_NONE}, GM_ERR_OUT_OF_RANGE, {0}, "axis -3 is out of bounds for array of dimension 2"},
    {"Z axis 0, [:]", &L_Z, 0, {GM_NONE, GM_NONE, GM_NONE}, GM_ERR_OUT_OF_RANGE, {0}, "axis 0 is out of bounds for array of dimension 0"},
};

/* gm_ndview_index: numpy a[(slice(None),) * axis + (i, ...)] */
static const index_case index_cases[] = {
    {"A2 axis 0, index 3", &L_A2, 0, 3, GM_OK, {1, {5}, {8}, 120}, NULL},
    {"A2 axis 0, index -1", &L_A2, 0, -1, GM_OK, {1, {5}, {8}, 120}, NULL},
    {"A2 axis 0, index -4", &L_A2, 0, -4, GM_OK, {1, {5}, {8}, 0}, NULL},
    {"A2 axis 0, index 0", &L_A2, 0, 0, GM_OK, {1, {5}, {8}, 0}, NULL},
    {"A2 axis 1, index 2", &L_A2, 1, 2, GM_OK, {1, {4}, {40}, 16}, NULL},
    {"A2 axis -1, index -5", &L_A2, -1, -5, GM_OK, {1, {4}, {40}, 0}, NULL},
    {"A2 axis -2, index 1", &L_A2, -2, 1, GM_OK, {1, {5}, {8}, 40}, NULL},
    {"A3 axis 1, index 2", &L_A3, 1, 2, GM_OK, {1, {4}, {80}, 40}, NULL},
    {"A3 axis 0, index -1", &L_A3, 0, -1, GM_OK, {1, {3}, {16}, 248}, NULL},
    {"A1 axis 0, index 4", &L_A1, 0, 4, GM_OK, {0, {0}, {0}, 32}, NULL},
    {"A1N axis 0, index 0", &L_A1N, 0, 0, GM_OK, {0, {0}, {0}, 72}, NULL},
    {"A1N axis 0, index -1", &L_A1N, 0, -1, GM_OK, {0, {0}, {0}, 0}, NULL},
    {"A1N axis 0, index 9", &L_A1N, 0, 9, GM_OK, {0, {0}, {0}, 0}, NULL},
    {"A2 axis 0, index 4", &L_A2, 0, 4, GM_ERR_OUT_OF_RANGE, {0}, "index 4 is out of bounds for axis 0 with size 4"},
    {"A2 axis 0, index -5", &L_A2, 0, -5, GM_ERR_OUT_OF_RANGE, {0}, "index -5 is out of bounds for axis 0 with size 4"},
    {"A2 axis -1, index 5", &L_A2, -1, 5, GM_ERR_OUT_OF_RANGE, {0}, "index 5 is out of bounds for axis 1 with size 5"},
    {"E1 axis 0, index 0", &L_E1, 0, 0, GM_ERR_OUT_OF_RANGE, {0}, "index 0 is out of bounds for axis 0 with size 0"},
    {"A1 axis 0, index -9223372036854775807", &L_A1, 0, -INT64_MAX, GM_ERR_OUT_OF_RANGE, {0}, "index -9223372036854775807 is out of bounds for axis 0 with size 10"},
    {"A1 axis 0, index 9223372036854775807", &L_A1, 0, INT64_MAX, GM_ERR_OUT_OF_RANGE, {0}, "index 9223372036854775807 is out of bounds"},
    {"A2 axis 2, index 0", &L_A2, 2, 0, GM_ERR_OUT_OF_RANGE, {0}, "axis 2 is out of bounds for array of dimension 2"},
    {"Z axis 0, index 0", &L_Z, 0, 0, GM_ERR_OUT_OF_RANGE, {0}, "axis 0 is out of bounds for array of dimension 0"},
};

/* gm_ndview_getitem: numpy a[items]; flags are numpy's flags.c_contiguous / f_contiguous */
static const getitem_case getitem_cases[] = {
    /* basic indexing */
    {"B3[1, ::-1, None, ...]", &L_B3, 4, {I(1), S(GM_NONE, GM_NONE, -1), NEW, ELL}, GM_OK, {3, {3, 1, 4}, {-32, 0, 8}, 960}, 0 | 0, NULL},
    {"B3[..., 1]", &L_B3, 2, {ELL, I(1)}, GM_OK, {2, {2, 3}, {96, 32}, 808}, 0 | 0, NULL},
    {"B3[...]", &L_B3, 1, {ELL}, GM_OK, {3, {2, 3, 4}, {96, 32, 8}, 800}, GM_T_C | 0, NULL},
    {"B3[]", &L_B3, 0, {NEW}, GM_OK, {3, {2, 3, 4}, {96, 32, 8}, 800}, GM_T_C | 0, NULL},
    {"B3[None, ..., None]", &L_B3, 3, {NEW, ELL, NEW}, GM_OK, {5, {1, 2, 3, 4, 1}, {0, 96, 32, 8, 0}, 800}, GM_T_C | 0, NULL},
    {"B3[-1, -1, -1]", &L_B3, 3, {I(-1), I(-1), I(-1)}, GM_OK, {0, {0}, {0}, 984}, GM_T_C | GM_T_F, NULL},
    {"B3[1, ..., 2, 3]", &L_B3, 4, {I(1), ELL, I(2), I(3)}, GM_OK, {0, {0}, {0}, 984}, GM_T_C | GM_T_F, NULL},
    {"B3[None, 0, 0, 0, None]", &L_B3, 5, {NEW, I(0), I(0), I(0), NEW}, GM_OK, {2, {1, 1}, {0, 0}, 800}, GM_T_C | GM_T_F, NULL},
    {"B3[1:, ::2, 3:0:-2]", &L_B3, 3, {S(1, GM_NONE, GM_NONE), S(GM_NONE, GM_NONE, 2), S(3, 0, -2)}, GM_OK, {3, {1, 2, 2}, {96, 64, -16}, 920}, 0 | 0, NULL},
    {"B3[5:2]", &L_B3, 1, {S(5, 2, GM_NONE)}, GM_OK, {3, {0, 3, 4}, {96, 32, 8}, 800}, GM_T_C | GM_T_F, NULL},
    {"B3[0, ::-1, -100:100:3]", &L_B3, 3, {I(0), S(GM_NONE, GM_NONE, -1), S(-100, 100, 3)}, GM_OK, {2, {3, 2}, {-32, 24}, 864}, 0 | 0, NULL},
    {"B3[None, None, ...]", &L_B3, 3, {NEW, NEW, ELL}, GM_OK, {5, {1, 1, 2, 3, 4}, {0, 0, 96, 32, 8}, 800}, GM_T_C | 0, NULL},
    {"B3[..., None]", &L_B3, 2, {ELL, NEW}, GM_OK, {4, {2, 3, 4, 1}, {96, 32, 8, 0}, 800}, GM_T_C | 0, NULL},
    {"B3[1]", &L_B3, 1, {I(1)}, GM_OK, {2, {3, 4}, {32, 8}, 896}, GM_T_C | 0, NULL},
    {"B3[:, -2]", &L_B3, 2, {S(GM_NONE, GM_NONE, GM_NONE), I(-2)}, GM_OK, {2, {2, 4}, {96, 8}, 832}, 0 | 0, NULL},
    {"B3[None]", &L_B3, 1, {NEW}, GM_OK, {4, {1, 2, 3, 4}, {0, 96, 32, 8}, 800}, GM_T_C | 0, NULL},
    {"B3[0, None, ::-1, None]", &L_B3, 4, {I(0), NEW, S(GM_NONE, GM_NONE, -1), NEW}, GM_OK, {4, {1, 3, 1, 4}, {0, -32, 0, 8}, 864}, 0 | 0, NULL},
    {"B3[..., ::-2, None]", &L_B3, 3, {ELL, S(GM_NONE, GM_NONE, -2), NEW}, GM_OK, {4, {2, 3, 2, 1}, {96, 32, -16, 0}, 824}, 0 | 0, NULL},
    {"B3[::4611686018427387904, 1]", &L_B3, 2, {S(GM_NONE, GM_NONE, 4611686018427387904), I(1)}, GM_OK, {2, {1, 4}, {0, 8}, 832}, GM_T_C | GM_T_F, NULL},
    {"B3[2::-1, ..., 0]", &L_B3, 3, {S(2, GM_NONE, -1), ELL, I(0)}, GM_OK, {2, {2, 3}, {-96, 32}, 896}, 0 | 0, NULL},
    /* Numba test_slice0_1d: a[x:] */
    {"N1[-2:]", &L_N1, 1, {S(-2, GM_NONE, GM_NONE)}, GM_OK, {1, {2}, {8}, 16}, GM_T_C | GM_T_F, NULL},
    {"N1[-1:]", &L_N1, 1, {S(-1, GM_NONE, GM_NONE)}, GM_OK, {1, {1}, {8}, 24}, GM_T_C | GM_T_F, NULL},
    {"N1[0:]", &L_N1, 1, {S(0, GM_NONE, GM_NONE)}, GM_OK, {1, {4}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[1:]", &L_N1, 1, {S(1, GM_NONE, GM_NONE)}, GM_OK, {1, {3}, {8}, 8}, GM_T_C | GM_T_F, NULL},
    {"N1[2:]", &L_N1, 1, {S(2, GM_NONE, GM_NONE)}, GM_OK, {1, {2}, {8}, 16}, GM_T_C | GM_T_F, NULL},
    /* Numba test_slice1_1d: a[:x] */
    {"N1[:-2]", &L_N1, 1, {S(GM_NONE, -2, GM_NONE)}, GM_OK, {1, {2}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[:-1]", &L_N1, 1, {S(GM_NONE, -1, GM_NONE)}, GM_OK, {1, {3}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[:0]", &L_N1, 1, {S(GM_NONE, 0, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[:1]", &L_N1, 1, {S(GM_NONE, 1, GM_NONE)}, GM_OK, {1, {1}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[:2]", &L_N1, 1, {S(GM_NONE, 2, GM_NONE)}, GM_OK, {1, {2}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    /* Numba test_slice2_1d: a[x:y] */
    {"N1[-2:-2]", &L_N1, 1, {S(-2, -2, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[-2:-1]", &L_N1, 1, {S(-2, -1, GM_NONE)}, GM_OK, {1, {1}, {8}, 16}, GM_T_C | GM_T_F, NULL},
    {"N1[-2:0]", &L_N1, 1, {S(-2, 0, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[-2:1]", &L_N1, 1, {S(-2, 1, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[-2:2]", &L_N1, 1, {S(-2, 2, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[-1:-2]", &L_N1, 1, {S(-1, -2, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[-1:-1]", &L_N1, 1, {S(-1, -1, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[-1:0]", &L_N1, 1, {S(-1, 0, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[-1:1]", &L_N1, 1, {S(-1, 1, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[-1:2]", &L_N1, 1, {S(-1, 2, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[0:-2]", &L_N1, 1, {S(0, -2, GM_NONE)}, GM_OK, {1, {2}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[0:-1]", &L_N1, 1, {S(0, -1, GM_NONE)}, GM_OK, {1, {3}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[0:0]", &L_N1, 1, {S(0, 0, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[0:1]", &L_N1, 1, {S(0, 1, GM_NONE)}, GM_OK, {1, {1}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[0:2]", &L_N1, 1, {S(0, 2, GM_NONE)}, GM_OK, {1, {2}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[1:-2]", &L_N1, 1, {S(1, -2, GM_NONE)}, GM_OK, {1, {1}, {8}, 8}, GM_T_C | GM_T_F, NULL},
    {"N1[1:-1]", &L_N1, 1, {S(1, -1, GM_NONE)}, GM_OK, {1, {2}, {8}, 8}, GM_T_C | GM_T_F, NULL},
    {"N1[1:0]", &L_N1, 1, {S(1, 0, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[1:1]", &L_N1, 1, {S(1, 1, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[1:2]", &L_N1, 1, {S(1, 2, GM_NONE)}, GM_OK, {1, {1}, {8}, 8}, GM_T_C | GM_T_F, NULL},
    {"N1[2:-2]", &L_N1, 1, {S(2, -2, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[2:-1]", &L_N1, 1, {S(2, -1, GM_NONE)}, GM_OK, {1, {1}, {8}, 16}, GM_T_C | GM_T_F, NULL},
    {"N1[2:0]", &L_N1, 1, {S(2, 0, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[2:1]", &L_N1, 1, {S(2, 1, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[2:2]", &L_N1, 1, {S(2, 2, GM_NONE)}, GM_OK, {1, {0}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    /* Numba test_strided_1d: a[::x] */
    {"N1[::-2]", &L_N1, 1, {S(GM_NONE, GM_NONE, -2)}, GM_OK, {1, {2}, {-16}, 24}, 0 | 0, NULL},
    {"N1[::-1]", &L_N1, 1, {S(GM_NONE, GM_NONE, -1)}, GM_OK, {1, {4}, {-8}, 24}, 0 | 0, NULL},
    {"N1[::1]", &L_N1, 1, {S(GM_NONE, GM_NONE, 1)}, GM_OK, {1, {4}, {8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N1[::2]", &L_N1, 1, {S(GM_NONE, GM_NONE, 2)}, GM_OK, {1, {2}, {16}, 0}, 0 | 0, NULL},
    /* Numba test_slice0_2d: a[x:], a[x:, y:] */
    {"N2[-2:]", &L_N2, 1, {S(-2, GM_NONE, GM_NONE)}, GM_OK, {2, {2, 5}, {40, 8}, 80}, GM_T_C | 0, NULL},
    {"N2[0:]", &L_N2, 1, {S(0, GM_NONE, GM_NONE)}, GM_OK, {2, {4, 5}, {40, 8}, 0}, GM_T_C | 0, NULL},
    {"N2[1:]", &L_N2, 1, {S(1, GM_NONE, GM_NONE)}, GM_OK, {2, {3, 5}, {40, 8}, 40}, GM_T_C | 0, NULL},
    {"N2[2:]", &L_N2, 1, {S(2, GM_NONE, GM_NONE)}, GM_OK, {2, {2, 5}, {40, 8}, 80}, GM_T_C | 0, NULL},
    {"N2[-2:, -2:]", &L_N2, 2, {S(-2, GM_NONE, GM_NONE), S(-2, GM_NONE, GM_NONE)}, GM_OK, {2, {2, 2}, {40, 8}, 104}, 0 | 0, NULL},
    {"N2[-2:, 0:]", &L_N2, 2, {S(-2, GM_NONE, GM_NONE), S(0, GM_NONE, GM_NONE)}, GM_OK, {2, {2, 5}, {40, 8}, 80}, GM_T_C | 0, NULL},
    {"N2[-2:, 1:]", &L_N2, 2, {S(-2, GM_NONE, GM_NONE), S(1, GM_NONE, GM_NONE)}, GM_OK, {2, {2, 4}, {40, 8}, 88}, 0 | 0, NULL},
    {"N2[-2:, 2:]", &L_N2, 2, {S(-2, GM_NONE, GM_NONE), S(2, GM_NONE, GM_NONE)}, GM_OK, {2, {2, 3}, {40, 8}, 96}, 0 | 0, NULL},
    {"N2[0:, -2:]", &L_N2, 2, {S(0, GM_NONE, GM_NONE), S(-2, GM_NONE, GM_NONE)}, GM_OK, {2, {4, 2}, {40, 8}, 24}, 0 | 0, NULL},
    {"N2[0:, 0:]", &L_N2, 2, {S(0, GM_NONE, GM_NONE), S(0, GM_NONE, GM_NONE)}, GM_OK, {2, {4, 5}, {40, 8}, 0}, GM_T_C | 0, NULL},
    {"N2[0:, 1:]", &L_N2, 2, {S(0, GM_NONE, GM_NONE), S(1, GM_NONE, GM_NONE)}, GM_OK, {2, {4, 4}, {40, 8}, 8}, 0 | 0, NULL},
    {"N2[0:, 2:]", &L_N2, 2, {S(0, GM_NONE, GM_NONE), S(2, GM_NONE, GM_NONE)}, GM_OK, {2, {4, 3}, {40, 8}, 16}, 0 | 0, NULL},
    {"N2[1:, -2:]", &L_N2, 2, {S(1, GM_NONE, GM_NONE), S(-2, GM_NONE, GM_NONE)}, GM_OK, {2, {3, 2}, {40, 8}, 64}, 0 | 0, NULL},
    {"N2[1:, 0:]", &L_N2, 2, {S(1, GM_NONE, GM_NONE), S(0, GM_NONE, GM_NONE)}, GM_OK, {2, {3, 5}, {40, 8}, 40}, GM_T_C | 0, NULL},
    {"N2[1:, 1:]", &L_N2, 2, {S(1, GM_NONE, GM_NONE), S(1, GM_NONE, GM_NONE)}, GM_OK, {2, {3, 4}, {40, 8}, 48}, 0 | 0, NULL},
    {"N2[1:, 2:]", &L_N2, 2, {S(1, GM_NONE, GM_NONE), S(2, GM_NONE, GM_NONE)}, GM_OK, {2, {3, 3}, {40, 8}, 56}, 0 | 0, NULL},
    {"N2[2:, -2:]", &L_N2, 2, {S(2, GM_NONE, GM_NONE), S(-2, GM_NONE, GM_NONE)}, GM_OK, {2, {2, 2}, {40, 8}, 104}, 0 | 0, NULL},
    {"N2[2:, 0:]", &L_N2, 2, {S(2, GM_NONE, GM_NONE), S(0, GM_NONE, GM_NONE)}, GM_OK, {2, {2, 5}, {40, 8}, 80}, GM_T_C | 0, NULL},
    {"N2[2:, 1:]", &L_N2, 2, {S(2, GM_NONE, GM_NONE), S(1, GM_NONE, GM_NONE)}, GM_OK, {2, {2, 4}, {40, 8}, 88}, 0 | 0, NULL},
    {"N2[2:, 2:]", &L_N2, 2, {S(2, GM_NONE, GM_NONE), S(2, GM_NONE, GM_NONE)}, GM_OK, {2, {2, 3}, {40, 8}, 96}, 0 | 0, NULL},
    /* Numba test_slice1_2d: a[:x], a[:x, :y] */
    {"N2[:-2]", &L_N2, 1, {S(GM_NONE, -2, GM_NONE)}, GM_OK, {2, {2, 5}, {40, 8}, 0}, GM_T_C | 0, NULL},
    {"N2[:0]", &L_N2, 1, {S(GM_NONE, 0, GM_NONE)}, GM_OK, {2, {0, 5}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[:2]", &L_N2, 1, {S(GM_NONE, 2, GM_NONE)}, GM_OK, {2, {2, 5}, {40, 8}, 0}, GM_T_C | 0, NULL},
    {"N2[:-2, :-2]", &L_N2, 2, {S(GM_NONE, -2, GM_NONE), S(GM_NONE, -2, GM_NONE)}, GM_OK, {2, {2, 3}, {40, 8}, 0}, 0 | 0, NULL},
    {"N2[:-2, :0]", &L_N2, 2, {S(GM_NONE, -2, GM_NONE), S(GM_NONE, 0, GM_NONE)}, GM_OK, {2, {2, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[:-2, :2]", &L_N2, 2, {S(GM_NONE, -2, GM_NONE), S(GM_NONE, 2, GM_NONE)}, GM_OK, {2, {2, 2}, {40, 8}, 0}, 0 | 0, NULL},
    {"N2[:0, :-2]", &L_N2, 2, {S(GM_NONE, 0, GM_NONE), S(GM_NONE, -2, GM_NONE)}, GM_OK, {2, {0, 3}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[:0, :0]", &L_N2, 2, {S(GM_NONE, 0, GM_NONE), S(GM_NONE, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[:0, :2]", &L_N2, 2, {S(GM_NONE, 0, GM_NONE), S(GM_NONE, 2, GM_NONE)}, GM_OK, {2, {0, 2}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[:2, :-2]", &L_N2, 2, {S(GM_NONE, 2, GM_NONE), S(GM_NONE, -2, GM_NONE)}, GM_OK, {2, {2, 3}, {40, 8}, 0}, 0 | 0, NULL},
    {"N2[:2, :0]", &L_N2, 2, {S(GM_NONE, 2, GM_NONE), S(GM_NONE, 0, GM_NONE)}, GM_OK, {2, {2, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[:2, :2]", &L_N2, 2, {S(GM_NONE, 2, GM_NONE), S(GM_NONE, 2, GM_NONE)}, GM_OK, {2, {2, 2}, {40, 8}, 0}, 0 | 0, NULL},
    /* Numba test_slice2_2d: a[s:t, u:v] */
    {"N2[-2:-2, -2:-2]", &L_N2, 2, {S(-2, -2, GM_NONE), S(-2, -2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:-2, -2:0]", &L_N2, 2, {S(-2, -2, GM_NONE), S(-2, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:-2, -2:2]", &L_N2, 2, {S(-2, -2, GM_NONE), S(-2, 2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:-2, 0:-2]", &L_N2, 2, {S(-2, -2, GM_NONE), S(0, -2, GM_NONE)}, GM_OK, {2, {0, 3}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:-2, 0:0]", &L_N2, 2, {S(-2, -2, GM_NONE), S(0, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:-2, 0:2]", &L_N2, 2, {S(-2, -2, GM_NONE), S(0, 2, GM_NONE)}, GM_OK, {2, {0, 2}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:-2, 2:-2]", &L_N2, 2, {S(-2, -2, GM_NONE), S(2, -2, GM_NONE)}, GM_OK, {2, {0, 1}, {40, 8}, 16}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:-2, 2:0]", &L_N2, 2, {S(-2, -2, GM_NONE), S(2, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:-2, 2:2]", &L_N2, 2, {S(-2, -2, GM_NONE), S(2, 2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:0, -2:-2]", &L_N2, 2, {S(-2, 0, GM_NONE), S(-2, -2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:0, -2:0]", &L_N2, 2, {S(-2, 0, GM_NONE), S(-2, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:0, -2:2]", &L_N2, 2, {S(-2, 0, GM_NONE), S(-2, 2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:0, 0:-2]", &L_N2, 2, {S(-2, 0, GM_NONE), S(0, -2, GM_NONE)}, GM_OK, {2, {0, 3}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:0, 0:0]", &L_N2, 2, {S(-2, 0, GM_NONE), S(0, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:0, 0:2]", &L_N2, 2, {S(-2, 0, GM_NONE), S(0, 2, GM_NONE)}, GM_OK, {2, {0, 2}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:0, 2:-2]", &L_N2, 2, {S(-2, 0, GM_NONE), S(2, -2, GM_NONE)}, GM_OK, {2, {0, 1}, {40, 8}, 16}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:0, 2:0]", &L_N2, 2, {S(-2, 0, GM_NONE), S(2, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:0, 2:2]", &L_N2, 2, {S(-2, 0, GM_NONE), S(2, 2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:2, -2:-2]", &L_N2, 2, {S(-2, 2, GM_NONE), S(-2, -2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:2, -2:0]", &L_N2, 2, {S(-2, 2, GM_NONE), S(-2, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:2, -2:2]", &L_N2, 2, {S(-2, 2, GM_NONE), S(-2, 2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:2, 0:-2]", &L_N2, 2, {S(-2, 2, GM_NONE), S(0, -2, GM_NONE)}, GM_OK, {2, {0, 3}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:2, 0:0]", &L_N2, 2, {S(-2, 2, GM_NONE), S(0, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:2, 0:2]", &L_N2, 2, {S(-2, 2, GM_NONE), S(0, 2, GM_NONE)}, GM_OK, {2, {0, 2}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:2, 2:-2]", &L_N2, 2, {S(-2, 2, GM_NONE), S(2, -2, GM_NONE)}, GM_OK, {2, {0, 1}, {40, 8}, 16}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:2, 2:0]", &L_N2, 2, {S(-2, 2, GM_NONE), S(2, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[-2:2, 2:2]", &L_N2, 2, {S(-2, 2, GM_NONE), S(2, 2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:-2, -2:-2]", &L_N2, 2, {S(0, -2, GM_NONE), S(-2, -2, GM_NONE)}, GM_OK, {2, {2, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:-2, -2:0]", &L_N2, 2, {S(0, -2, GM_NONE), S(-2, 0, GM_NONE)}, GM_OK, {2, {2, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:-2, -2:2]", &L_N2, 2, {S(0, -2, GM_NONE), S(-2, 2, GM_NONE)}, GM_OK, {2, {2, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:-2, 0:-2]", &L_N2, 2, {S(0, -2, GM_NONE), S(0, -2, GM_NONE)}, GM_OK, {2, {2, 3}, {40, 8}, 0}, 0 | 0, NULL},
    {"N2[0:-2, 0:0]", &L_N2, 2, {S(0, -2, GM_NONE), S(0, 0, GM_NONE)}, GM_OK, {2, {2, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:-2, 0:2]", &L_N2, 2, {S(0, -2, GM_NONE), S(0, 2, GM_NONE)}, GM_OK, {2, {2, 2}, {40, 8}, 0}, 0 | 0, NULL},
    {"N2[0:-2, 2:-2]", &L_N2, 2, {S(0, -2, GM_NONE), S(2, -2, GM_NONE)}, GM_OK, {2, {2, 1}, {40, 8}, 16}, 0 | 0, NULL},
    {"N2[0:-2, 2:0]", &L_N2, 2, {S(0, -2, GM_NONE), S(2, 0, GM_NONE)}, GM_OK, {2, {2, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:-2, 2:2]", &L_N2, 2, {S(0, -2, GM_NONE), S(2, 2, GM_NONE)}, GM_OK, {2, {2, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:0, -2:-2]", &L_N2, 2, {S(0, 0, GM_NONE), S(-2, -2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:0, -2:0]", &L_N2, 2, {S(0, 0, GM_NONE), S(-2, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:0, -2:2]", &L_N2, 2, {S(0, 0, GM_NONE), S(-2, 2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:0, 0:-2]", &L_N2, 2, {S(0, 0, GM_NONE), S(0, -2, GM_NONE)}, GM_OK, {2, {0, 3}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:0, 0:0]", &L_N2, 2, {S(0, 0, GM_NONE), S(0, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:0, 0:2]", &L_N2, 2, {S(0, 0, GM_NONE), S(0, 2, GM_NONE)}, GM_OK, {2, {0, 2}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:0, 2:-2]", &L_N2, 2, {S(0, 0, GM_NONE), S(2, -2, GM_NONE)}, GM_OK, {2, {0, 1}, {40, 8}, 16}, GM_T_C | GM_T_F, NULL},
    {"N2[0:0, 2:0]", &L_N2, 2, {S(0, 0, GM_NONE), S(2, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:0, 2:2]", &L_N2, 2, {S(0, 0, GM_NONE), S(2, 2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:2, -2:-2]", &L_N2, 2, {S(0, 2, GM_NONE), S(-2, -2, GM_NONE)}, GM_OK, {2, {2, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:2, -2:0]", &L_N2, 2, {S(0, 2, GM_NONE), S(-2, 0, GM_NONE)}, GM_OK, {2, {2, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:2, -2:2]", &L_N2, 2, {S(0, 2, GM_NONE), S(-2, 2, GM_NONE)}, GM_OK, {2, {2, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:2, 0:-2]", &L_N2, 2, {S(0, 2, GM_NONE), S(0, -2, GM_NONE)}, GM_OK, {2, {2, 3}, {40, 8}, 0}, 0 | 0, NULL},
    {"N2[0:2, 0:0]", &L_N2, 2, {S(0, 2, GM_NONE), S(0, 0, GM_NONE)}, GM_OK, {2, {2, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:2, 0:2]", &L_N2, 2, {S(0, 2, GM_NONE), S(0, 2, GM_NONE)}, GM_OK, {2, {2, 2}, {40, 8}, 0}, 0 | 0, NULL},
    {"N2[0:2, 2:-2]", &L_N2, 2, {S(0, 2, GM_NONE), S(2, -2, GM_NONE)}, GM_OK, {2, {2, 1}, {40, 8}, 16}, 0 | 0, NULL},
    {"N2[0:2, 2:0]", &L_N2, 2, {S(0, 2, GM_NONE), S(2, 0, GM_NONE)}, GM_OK, {2, {2, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[0:2, 2:2]", &L_N2, 2, {S(0, 2, GM_NONE), S(2, 2, GM_NONE)}, GM_OK, {2, {2, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:-2, -2:-2]", &L_N2, 2, {S(2, -2, GM_NONE), S(-2, -2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:-2, -2:0]", &L_N2, 2, {S(2, -2, GM_NONE), S(-2, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:-2, -2:2]", &L_N2, 2, {S(2, -2, GM_NONE), S(-2, 2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:-2, 0:-2]", &L_N2, 2, {S(2, -2, GM_NONE), S(0, -2, GM_NONE)}, GM_OK, {2, {0, 3}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:-2, 0:0]", &L_N2, 2, {S(2, -2, GM_NONE), S(0, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:-2, 0:2]", &L_N2, 2, {S(2, -2, GM_NONE), S(0, 2, GM_NONE)}, GM_OK, {2, {0, 2}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:-2, 2:-2]", &L_N2, 2, {S(2, -2, GM_NONE), S(2, -2, GM_NONE)}, GM_OK, {2, {0, 1}, {40, 8}, 16}, GM_T_C | GM_T_F, NULL},
    {"N2[2:-2, 2:0]", &L_N2, 2, {S(2, -2, GM_NONE), S(2, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:-2, 2:2]", &L_N2, 2, {S(2, -2, GM_NONE), S(2, 2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:0, -2:-2]", &L_N2, 2, {S(2, 0, GM_NONE), S(-2, -2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:0, -2:0]", &L_N2, 2, {S(2, 0, GM_NONE), S(-2, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:0, -2:2]", &L_N2, 2, {S(2, 0, GM_NONE), S(-2, 2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:0, 0:-2]", &L_N2, 2, {S(2, 0, GM_NONE), S(0, -2, GM_NONE)}, GM_OK, {2, {0, 3}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:0, 0:0]", &L_N2, 2, {S(2, 0, GM_NONE), S(0, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:0, 0:2]", &L_N2, 2, {S(2, 0, GM_NONE), S(0, 2, GM_NONE)}, GM_OK, {2, {0, 2}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:0, 2:-2]", &L_N2, 2, {S(2, 0, GM_NONE), S(2, -2, GM_NONE)}, GM_OK, {2, {0, 1}, {40, 8}, 16}, GM_T_C | GM_T_F, NULL},
    {"N2[2:0, 2:0]", &L_N2, 2, {S(2, 0, GM_NONE), S(2, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:0, 2:2]", &L_N2, 2, {S(2, 0, GM_NONE), S(2, 2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:2, -2:-2]", &L_N2, 2, {S(2, 2, GM_NONE), S(-2, -2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:2, -2:0]", &L_N2, 2, {S(2, 2, GM_NONE), S(-2, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:2, -2:2]", &L_N2, 2, {S(2, 2, GM_NONE), S(-2, 2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:2, 0:-2]", &L_N2, 2, {S(2, 2, GM_NONE), S(0, -2, GM_NONE)}, GM_OK, {2, {0, 3}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:2, 0:0]", &L_N2, 2, {S(2, 2, GM_NONE), S(0, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:2, 0:2]", &L_N2, 2, {S(2, 2, GM_NONE), S(0, 2, GM_NONE)}, GM_OK, {2, {0, 2}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:2, 2:-2]", &L_N2, 2, {S(2, 2, GM_NONE), S(2, -2, GM_NONE)}, GM_OK, {2, {0, 1}, {40, 8}, 16}, GM_T_C | GM_T_F, NULL},
    {"N2[2:2, 2:0]", &L_N2, 2, {S(2, 2, GM_NONE), S(2, 0, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    {"N2[2:2, 2:2]", &L_N2, 2, {S(2, 2, GM_NONE), S(2, 2, GM_NONE)}, GM_OK, {2, {0, 0}, {40, 8}, 0}, GM_T_C | GM_T_F, NULL},
    /* Numba test_strided_2d: a[::a, ::b] */
    {"N2[::-2, ::-2]", &L_N2, 2, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -2)}, GM_OK, {2, {2, 3}, {-80, -16}, 152}, 0 | 0, NULL},
    {"N2[::-2, ::-1]", &L_N2, 2, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -1)}, GM_OK, {2, {2, 5}, {-80, -8}, 152}, 0 | 0, NULL},
    {"N2[::-2, ::1]", &L_N2, 2, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 1)}, GM_OK, {2, {2, 5}, {-80, 8}, 120}, 0 | 0, NULL},
    {"N2[::-2, ::2]", &L_N2, 2, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 2)}, GM_OK, {2, {2, 3}, {-80, 16}, 120}, 0 | 0, NULL},
    {"N2[::-1, ::-2]", &L_N2, 2, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -2)}, GM_OK, {2, {4, 3}, {-40, -16}, 152}, 0 | 0, NULL},
    {"N2[::-1, ::-1]", &L_N2, 2, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -1)}, GM_OK, {2, {4, 5}, {-40, -8}, 152}, 0 | 0, NULL},
    {"N2[::-1, ::1]", &L_N2, 2, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 1)}, GM_OK, {2, {4, 5}, {-40, 8}, 120}, 0 | 0, NULL},
    {"N2[::-1, ::2]", &L_N2, 2, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 2)}, GM_OK, {2, {4, 3}, {-40, 16}, 120}, 0 | 0, NULL},
    {"N2[::1, ::-2]", &L_N2, 2, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -2)}, GM_OK, {2, {4, 3}, {40, -16}, 32}, 0 | 0, NULL},
    {"N2[::1, ::-1]", &L_N2, 2, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -1)}, GM_OK, {2, {4, 5}, {40, -8}, 32}, 0 | 0, NULL},
    {"N2[::1, ::1]", &L_N2, 2, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 1)}, GM_OK, {2, {4, 5}, {40, 8}, 0}, GM_T_C | 0, NULL},
    {"N2[::1, ::2]", &L_N2, 2, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 2)}, GM_OK, {2, {4, 3}, {40, 16}, 0}, 0 | 0, NULL},
    {"N2[::2, ::-2]", &L_N2, 2, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -2)}, GM_OK, {2, {2, 3}, {80, -16}, 32}, 0 | 0, NULL},
    {"N2[::2, ::-1]", &L_N2, 2, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -1)}, GM_OK, {2, {2, 5}, {80, -8}, 32}, 0 | 0, NULL},
    {"N2[::2, ::1]", &L_N2, 2, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 1)}, GM_OK, {2, {2, 5}, {80, 8}, 0}, 0 | 0, NULL},
    {"N2[::2, ::2]", &L_N2, 2, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 2)}, GM_OK, {2, {2, 3}, {80, 16}, 0}, 0 | 0, NULL},
    /* Numba test_strided_3d: a[::a, ::b, ::c] */
    {"N3[::-2, ::-2, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {2, 3, 3}, {-480, -96, -16}, 952}, 0 | 0, NULL},
    {"N3[::-2, ::-2, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {2, 3, 6}, {-480, -96, -8}, 952}, 0 | 0, NULL},
    {"N3[::-2, ::-2, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {2, 3, 6}, {-480, -96, 8}, 912}, 0 | 0, NULL},
    {"N3[::-2, ::-2, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {2, 3, 3}, {-480, -96, 16}, 912}, 0 | 0, NULL},
    {"N3[::-2, ::-1, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {2, 5, 3}, {-480, -48, -16}, 952}, 0 | 0, NULL},
    {"N3[::-2, ::-1, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {2, 5, 6}, {-480, -48, -8}, 952}, 0 | 0, NULL},
    {"N3[::-2, ::-1, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {2, 5, 6}, {-480, -48, 8}, 912}, 0 | 0, NULL},
    {"N3[::-2, ::-1, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {2, 5, 3}, {-480, -48, 16}, 912}, 0 | 0, NULL},
    {"N3[::-2, ::1, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {2, 5, 3}, {-480, 48, -16}, 760}, 0 | 0, NULL},
    {"N3[::-2, ::1, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {2, 5, 6}, {-480, 48, -8}, 760}, 0 | 0, NULL},
    {"N3[::-2, ::1, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {2, 5, 6}, {-480, 48, 8}, 720}, 0 | 0, NULL},
    {"N3[::-2, ::1, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {2, 5, 3}, {-480, 48, 16}, 720}, 0 | 0, NULL},
    {"N3[::-2, ::2, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {2, 3, 3}, {-480, 96, -16}, 760}, 0 | 0, NULL},
    {"N3[::-2, ::2, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {2, 3, 6}, {-480, 96, -8}, 760}, 0 | 0, NULL},
    {"N3[::-2, ::2, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {2, 3, 6}, {-480, 96, 8}, 720}, 0 | 0, NULL},
    {"N3[::-2, ::2, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {2, 3, 3}, {-480, 96, 16}, 720}, 0 | 0, NULL},
    {"N3[::-1, ::-2, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {4, 3, 3}, {-240, -96, -16}, 952}, 0 | 0, NULL},
    {"N3[::-1, ::-2, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {4, 3, 6}, {-240, -96, -8}, 952}, 0 | 0, NULL},
    {"N3[::-1, ::-2, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {4, 3, 6}, {-240, -96, 8}, 912}, 0 | 0, NULL},
    {"N3[::-1, ::-2, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {4, 3, 3}, {-240, -96, 16}, 912}, 0 | 0, NULL},
    {"N3[::-1, ::-1, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {4, 5, 3}, {-240, -48, -16}, 952}, 0 | 0, NULL},
    {"N3[::-1, ::-1, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {4, 5, 6}, {-240, -48, -8}, 952}, 0 | 0, NULL},
    {"N3[::-1, ::-1, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {4, 5, 6}, {-240, -48, 8}, 912}, 0 | 0, NULL},
    {"N3[::-1, ::-1, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {4, 5, 3}, {-240, -48, 16}, 912}, 0 | 0, NULL},
    {"N3[::-1, ::1, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {4, 5, 3}, {-240, 48, -16}, 760}, 0 | 0, NULL},
    {"N3[::-1, ::1, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {4, 5, 6}, {-240, 48, -8}, 760}, 0 | 0, NULL},
    {"N3[::-1, ::1, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {4, 5, 6}, {-240, 48, 8}, 720}, 0 | 0, NULL},
    {"N3[::-1, ::1, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {4, 5, 3}, {-240, 48, 16}, 720}, 0 | 0, NULL},
    {"N3[::-1, ::2, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {4, 3, 3}, {-240, 96, -16}, 760}, 0 | 0, NULL},
    {"N3[::-1, ::2, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {4, 3, 6}, {-240, 96, -8}, 760}, 0 | 0, NULL},
    {"N3[::-1, ::2, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {4, 3, 6}, {-240, 96, 8}, 720}, 0 | 0, NULL},
    {"N3[::-1, ::2, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {4, 3, 3}, {-240, 96, 16}, 720}, 0 | 0, NULL},
    {"N3[::1, ::-2, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {4, 3, 3}, {240, -96, -16}, 232}, 0 | 0, NULL},
    {"N3[::1, ::-2, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {4, 3, 6}, {240, -96, -8}, 232}, 0 | 0, NULL},
    {"N3[::1, ::-2, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {4, 3, 6}, {240, -96, 8}, 192}, 0 | 0, NULL},
    {"N3[::1, ::-2, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {4, 3, 3}, {240, -96, 16}, 192}, 0 | 0, NULL},
    {"N3[::1, ::-1, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {4, 5, 3}, {240, -48, -16}, 232}, 0 | 0, NULL},
    {"N3[::1, ::-1, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {4, 5, 6}, {240, -48, -8}, 232}, 0 | 0, NULL},
    {"N3[::1, ::-1, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {4, 5, 6}, {240, -48, 8}, 192}, 0 | 0, NULL},
    {"N3[::1, ::-1, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {4, 5, 3}, {240, -48, 16}, 192}, 0 | 0, NULL},
    {"N3[::1, ::1, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {4, 5, 3}, {240, 48, -16}, 40}, 0 | 0, NULL},
    {"N3[::1, ::1, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {4, 5, 6}, {240, 48, -8}, 40}, 0 | 0, NULL},
    {"N3[::1, ::1, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {4, 5, 6}, {240, 48, 8}, 0}, GM_T_C | 0, NULL},
    {"N3[::1, ::1, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {4, 5, 3}, {240, 48, 16}, 0}, 0 | 0, NULL},
    {"N3[::1, ::2, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {4, 3, 3}, {240, 96, -16}, 40}, 0 | 0, NULL},
    {"N3[::1, ::2, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {4, 3, 6}, {240, 96, -8}, 40}, 0 | 0, NULL},
    {"N3[::1, ::2, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {4, 3, 6}, {240, 96, 8}, 0}, 0 | 0, NULL},
    {"N3[::1, ::2, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {4, 3, 3}, {240, 96, 16}, 0}, 0 | 0, NULL},
    {"N3[::2, ::-2, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {2, 3, 3}, {480, -96, -16}, 232}, 0 | 0, NULL},
    {"N3[::2, ::-2, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {2, 3, 6}, {480, -96, -8}, 232}, 0 | 0, NULL},
    {"N3[::2, ::-2, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {2, 3, 6}, {480, -96, 8}, 192}, 0 | 0, NULL},
    {"N3[::2, ::-2, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -2), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {2, 3, 3}, {480, -96, 16}, 192}, 0 | 0, NULL},
    {"N3[::2, ::-1, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {2, 5, 3}, {480, -48, -16}, 232}, 0 | 0, NULL},
    {"N3[::2, ::-1, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {2, 5, 6}, {480, -48, -8}, 232}, 0 | 0, NULL},
    {"N3[::2, ::-1, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {2, 5, 6}, {480, -48, 8}, 192}, 0 | 0, NULL},
    {"N3[::2, ::-1, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -1), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {2, 5, 3}, {480, -48, 16}, 192}, 0 | 0, NULL},
    {"N3[::2, ::1, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {2, 5, 3}, {480, 48, -16}, 40}, 0 | 0, NULL},
    {"N3[::2, ::1, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {2, 5, 6}, {480, 48, -8}, 40}, 0 | 0, NULL},
    {"N3[::2, ::1, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {2, 5, 6}, {480, 48, 8}, 0}, 0 | 0, NULL},
    {"N3[::2, ::1, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 1), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {2, 5, 3}, {480, 48, 16}, 0}, 0 | 0, NULL},
    {"N3[::2, ::2, ::-2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -2)}, GM_OK, {3, {2, 3, 3}, {480, 96, -16}, 40}, 0 | 0, NULL},
    {"N3[::2, ::2, ::-1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, -1)}, GM_OK, {3, {2, 3, 6}, {480, 96, -8}, 40}, 0 | 0, NULL},
    {"N3[::2, ::2, ::1]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 1)}, GM_OK, {3, {2, 3, 6}, {480, 96, 8}, 0}, 0 | 0, NULL},
    {"N3[::2, ::2, ::2]", &L_N3, 3, {S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 2), S(GM_NONE, GM_NONE, 2)}, GM_OK, {3, {2, 3, 3}, {480, 96, 16}, 0}, 0 | 0, NULL},
    /* 0-d */
    {"Z[]", &L_Z, 0, {NEW}, GM_OK, {0, {0}, {0}, 24}, GM_T_C | GM_T_F, NULL},
    {"Z[...]", &L_Z, 1, {ELL}, GM_OK, {0, {0}, {0}, 24}, GM_T_C | GM_T_F, NULL},
    {"Z[None]", &L_Z, 1, {NEW}, GM_OK, {1, {1}, {0}, 24}, GM_T_C | GM_T_F, NULL},
    {"Z[None, ..., None]", &L_Z, 3, {NEW, ELL, NEW}, GM_OK, {2, {1, 1}, {0, 0}, 24}, GM_T_C | GM_T_F, NULL},
    /* errors */
    {"B3[0, 0, 0, 0]", &L_B3, 4, {I(0), I(0), I(0), I(0)}, GM_ERR_INVALID_ARG, {0}, 0, "too many indices for array: array is 3-dimensional, but 4 were indexed"}, /* numpy: IndexError: too many indices for array: array is 3-dimensional, but 4 were indexed */
    {"B3[0, ..., 0, 0, 0]", &L_B3, 5, {I(0), ELL, I(0), I(0), I(0)}, GM_ERR_INVALID_ARG, {0}, 0, "array is 3-dimensional, but 4 were indexed"}, /* numpy: IndexError: too many indices for array: array is 3-dimensional, but 4 were indexed */
    {"B3[..., ...]", &L_B3, 2, {ELL, ELL}, GM_ERR_INVALID_ARG, {0}, 0, "an index can only have a single ellipsis ('...')"}, /* numpy: IndexError: an index can only have a single ellipsis ('...') */
    {"B3[2]", &L_B3, 1, {I(2)}, GM_ERR_OUT_OF_RANGE, {0}, 0, "index 2 is out of bounds for axis 0 with size 2"}, /* numpy: IndexError: index 2 is out of bounds for axis 0 with size 2 */
    {"B3[0, 3]", &L_B3, 2, {I(0), I(3)}, GM_ERR_OUT_OF_RANGE, {0}, 0, "index 3 is out of bounds for axis 1 with size 3"}, /* numpy: IndexError: index 3 is out of bounds for axis 1 with size 3 */
    {"B3[None, 0, 0, -5]", &L_B3, 4, {NEW, I(0), I(0), I(-5)}, GM_ERR_OUT_OF_RANGE, {0}, 0, "index -5 is out of bounds for axis 2 with size 4"}, /* numpy: IndexError: index -5 is out of bounds for axis 2 with size 4 */
    {"B3[..., -5]", &L_B3, 2, {ELL, I(-5)}, GM_ERR_OUT_OF_RANGE, {0}, 0, "index -5 is out of bounds for axis 2 with size 4"}, /* numpy: IndexError: index -5 is out of bounds for axis 2 with size 4 */
    {"B3[::0]", &L_B3, 1, {S(GM_NONE, GM_NONE, 0)}, GM_ERR_INVALID_ARG, {0}, 0, "slice step cannot be zero"}, /* numpy: ValueError: slice step cannot be zero */
    {"B3[5, ..., ...]", &L_B3, 3, {I(5), ELL, ELL}, GM_ERR_INVALID_ARG, {0}, 0, "single ellipsis"}, /* numpy: IndexError: an index can only have a single ellipsis ('...') */
    {"Z[0]", &L_Z, 1, {I(0)}, GM_ERR_INVALID_ARG, {0}, 0, "array is 0-dimensional, but 1 were indexed"}, /* numpy: IndexError: too many indices for array: array is 0-dimensional, but 1 were indexed */
};

/* gm_ndview_expand_dims: numpy.expand_dims (a C-order reshape) */
static const axis_case expand_dims_cases[] = {
    {"C axis -3", &L_C, -3, GM_OK, {3, {1, 4, 5}, {160, 40, 8}, 0}, NULL},
    {"C axis -2", &L_C, -2, GM_OK, {3, {4, 1, 5}, {40, 40, 8}, 0}, NULL},
    {"C axis -1", &L_C, -1, GM_OK, {3, {4, 5, 1}, {40, 8, 8}, 0}, NULL},
    {"C axis 0", &L_C, 0, GM_OK, {3, {1, 4, 5}, {160, 40, 8}, 0}, NULL},
    {"C axis 1", &L_C, 1, GM_OK, {3, {4, 1, 5}, {40, 40, 8}, 0}, NULL},
    {"C axis 2", &L_C, 2, GM_OK, {3, {4, 5, 1}, {40, 8, 8}, 0}, NULL},
    {"F axis -3", &L_F, -3, GM_OK, {3, {1, 5, 4}, {40, 8, 40}, 0}, NULL},
    {"F axis -2", &L_F, -2, GM_OK, {3, {5, 1, 4}, {8, 160, 40}, 0}, NULL},
    {"F axis -1", &L_F, -1, GM_OK, {3, {5, 4, 1}, {8, 40, 40}, 0}, NULL},
    {"F axis 0", &L_F, 0, GM_OK, {3, {1, 5, 4}, {40, 8, 40}, 0}, NULL},
    {"F axis 1", &L_F, 1, GM_OK, {3, {5, 1, 4}, {8, 160, 40}, 0}, NULL},
    {"F axis 2", &L_F, 2, GM_OK, {3, {5, 4, 1}, {8, 40, 40}, 0}, NULL},
    {"NC axis -3", &L_NC, -3, GM_OK, {3, {1, 4, 3}, {160, 40, 16}, 0}, NULL},
    {"NC axis -2", &L_NC, -2, GM_OK, {3, {4, 1, 3}, {40, 48, 16}, 0}, NULL},
    {"NC axis -1", &L_NC, -1, GM_OK, {3, {4, 3, 1}, {40, 16, 16}, 0}, NULL},
    {"NC axis 0", &L_NC, 0, GM_OK, {3, {1, 4, 3}, {160, 40, 16}, 0}, NULL},
    {"NC axis 1", &L_NC, 1, GM_OK, {3, {4, 1, 3}, {40, 48, 16}, 0}, NULL},
    {"NC axis 2", &L_NC, 2, GM_OK, {3, {4, 3, 1}, {40, 16, 16}, 0}, NULL},
    {"NEG axis -3", &L_NEG, -3, GM_OK, {3, {1, 4, 5}, {-160, -40, 8}, 120}, NULL},
    {"NEG axis -2", &L_NEG, -2, GM_OK, {3, {4, 1, 5}, {-40, 40, 8}, 120}, NULL},
    {"NEG axis -1", &L_NEG, -1, GM_OK, {3, {4, 5, 1}, {-40, 8, 8}, 120}, NULL},
    {"NEG axis 0", &L_NEG, 0, GM_OK, {3, {1, 4, 5}, {-160, -40, 8}, 120}, NULL},
    {"NEG axis 1", &L_NEG, 1, GM_OK, {3, {4, 1, 5}, {-40, 40, 8}, 120}, NULL},
    {"NEG axis 2", &L_NEG, 2, GM_OK, {3, {4, 5, 1}, {-40, 8, 8}, 120}, NULL},
    {"NC1 axis -4", &L_NC1, -4, GM_OK, {4, {1, 3, 1, 2}, {96, 32, 32, 16}, 0}, NULL},
    {"NC1 axis -3", &L_NC1, -3, GM_OK, {4, {3, 1, 1, 2}, {32, 32, 32, 16}, 0}, NULL},
    {"NC1 axis -2", &L_NC1, -2, GM_OK, {4, {3, 1, 1, 2}, {32, 32, 32, 16}, 0}, NULL},
    {"NC1 axis -1", &L_NC1, -1, GM_OK, {4, {3, 1, 2, 1}, {32, 32, 16, 16}, 0}, NULL},
    {"NC1 axis 0", &L_NC1, 0, GM_OK, {4, {1, 3, 1, 2}, {96, 32, 32, 16}, 0}, NULL},
    {"NC1 axis 1", &L_NC1, 1, GM_OK, {4, {3, 1, 1, 2}, {32, 32, 32, 16}, 0}, NULL},
    {"NC1 axis 2", &L_NC1, 2, GM_OK, {4, {3, 1, 1, 2}, {32, 32, 32, 16}, 0}, NULL},
    {"NC1 axis 3", &L_NC1, 3, GM_OK, {4, {3, 1, 2, 1}, {32, 32, 16, 16}, 0}, NULL},
    {"W1 axis -4", &L_W1, -4, GM_OK, {4, {1, 3, 1, 2}, {192, 64, 32, 16}, 0}, NULL},
    {"W1 axis -3", &L_W1, -3, GM_OK, {4, {3, 1, 1, 2}, {64, 32, 32, 16}, 0}, NULL},
    {"W1 axis -2", &L_W1, -2, GM_OK, {4, {3, 1, 1, 2}, {64, 32, 32, 16}, 0}, NULL},
    {"W1 axis -1", &L_W1, -1, GM_OK, {4, {3, 1, 2, 1}, {64, 32, 16, 16}, 0}, NULL},
    {"W1 axis 0", &L_W1, 0, GM_OK, {4, {1, 3, 1, 2}, {192, 64, 32, 16}, 0}, NULL},
    {"W1 axis 1", &L_W1, 1, GM_OK, {4, {3, 1, 1, 2}, {64, 32, 32, 16}, 0}, NULL},
    {"W1 axis 2", &L_W1, 2, GM_OK, {4, {3, 1, 1, 2}, {64, 32, 32, 16}, 0}, NULL},
    {"W1 axis 3", &L_W1, 3, GM_OK, {4, {3, 1, 2, 1}, {64, 32, 16, 16}, 0}, NULL},
    {"C1 axis -3", &L_C1, -3, GM_OK, {3, {1, 2, 1}, {48, 24, 24}, 0}, NULL},
    {"C1 axis -2", &L_C1, -2, GM_OK, {3, {2, 1, 1}, {24, 24, 24}, 0}, NULL},
    {"C1 axis -1", &L_C1, -1, GM_OK, {3, {2, 1, 1}, {24, 24, 24}, 0}, NULL},
    {"C1 axis 0", &L_C1, 0, GM_OK, {3, {1, 2, 1}, {48, 24, 24}, 0}, NULL},
    {"C1 axis 1", &L_C1, 1, GM_OK, {3, {2, 1, 1}, {24, 24, 24}, 0}, NULL},
    {"C1 axis 2", &L_C1, 2, GM_OK, {3, {2, 1, 1}, {24, 24, 24}, 0}, NULL},
    {"NC2 axis -3", &L_NC2, -3, GM_OK, {3, {1, 2, 2}, {192, 96, 24}, 0}, NULL},
    {"NC2 axis -2", &L_NC2, -2, GM_OK, {3, {2, 1, 2}, {96, 48, 24}, 0}, NULL},
    {"NC2 axis -1", &L_NC2, -1, GM_OK, {3, {2, 2, 1}, {96, 24, 24}, 0}, NULL},
    {"NC2 axis 0", &L_NC2, 0, GM_OK, {3, {1, 2, 2}, {192, 96, 24}, 0}, NULL},
    {"NC2 axis 1", &L_NC2, 1, GM_OK, {3, {2, 1, 2}, {96, 48, 24}, 0}, NULL},
    {"NC2 axis 2", &L_NC2, 2, GM_OK, {3, {2, 2, 1}, {96, 24, 24}, 0}, NULL},
    {"NC2T axis -3", &L_NC2T, -3, GM_OK, {3, {1, 2, 2}, {48, 24, 96}, 0}, NULL},
    {"NC2T axis -2", &L_NC2T, -2, GM_OK, {3, {2, 1, 2}, {24, 192, 96}, 0}, NULL},
    {"NC2T axis -1", &L_NC2T, -1, GM_OK, {3, {2, 2, 1}, {24, 96, 96}, 0}, NULL},
    {"NC2T axis 0", &L_NC2T, 0, GM_OK, {3, {1, 2, 2}, {48, 24, 96}, 0}, NULL},
    {"NC2T axis 1", &L_NC2T, 1, GM_OK, {3, {2, 1, 2}, {24, 192, 96}, 0}, NULL},
    {"NC2T axis 2", &L_NC2T, 2, GM_OK, {3, {2, 2, 1}, {24, 96, 96}, 0}, NULL},
    {"EMPTY axis -3", &L_EMPTY, -3, GM_OK, {3, {1, 0, 3}, {24, 24, 8}, 0}, NULL},
    {"EMPTY axis -2", &L_EMPTY, -2, GM_OK, {3, {0, 1, 3}, {24, 24, 8}, 0}, NULL},
    {"EMPTY axis -1", &L_EMPTY, -1, GM_OK, {3, {0, 3, 1}, {24, 8, 8}, 0}, NULL},
    {"EMPTY axis 0", &L_EMPTY, 0, GM_OK, {3, {1, 0, 3}, {24, 24, 8}, 0}, NULL},
    {"EMPTY axis 1", &L_EMPTY, 1, GM_OK, {3, {0, 1, 3}, {24, 24, 8}, 0}, NULL},
    {"EMPTY axis 2", &L_EMPTY, 2, GM_OK, {3, {0, 3, 1}, {24, 8, 8}, 0}, NULL},
    {"EMPTYW axis -4", &L_EMPTYW, -4, GM_OK, {4, {1, 2, 0, 3}, {48, 24, 24, 8}, 64}, NULL},
    {"EMPTYW axis -3", &L_EMPTYW, -3, GM_OK, {4, {2, 1, 0, 3}, {24, 24, 24, 8}, 64}, NULL},
    {"EMPTYW axis -2", &L_EMPTYW, -2, GM_OK, {4, {2, 0, 1, 3}, {24, 24, 24, 8}, 64}, NULL},
    {"EMPTYW axis -1", &L_EMPTYW, -1, GM_OK, {4, {2, 0, 3, 1}, {24, 24, 8, 8}, 64}, NULL},
    {"EMPTYW axis 0", &L_EMPTYW, 0, GM_OK, {4, {1, 2, 0, 3}, {48, 24, 24, 8}, 64}, NULL},
    {"EMPTYW axis 1", &L_EMPTYW, 1, GM_OK, {4, {2, 1, 0, 3}, {24, 24, 24, 8}, 64}, NULL},
    {"EMPTYW axis 2", &L_EMPTYW, 2, GM_OK, {4, {2, 0, 1, 3}, {24, 24, 24, 8}, 64}, NULL},
    {"EMPTYW axis 3", &L_EMPTYW, 3, GM_OK, {4, {2, 0, 3, 1}, {24, 24, 8, 8}, 64}, NULL},
    {"BCAST axis -3", &L_BCAST, -3, GM_OK, {3, {1, 3, 4}, {0, 0, 8}, 0}, NULL},
    {"BCAST axis -2", &L_BCAST, -2, GM_OK, {3, {3, 1, 4}, {0, 32, 8}, 0}, NULL},
    {"BCAST axis -1", &L_BCAST, -1, GM_OK, {3, {3, 4, 1}, {0, 8, 8}, 0}, NULL},
    {"BCAST axis 0", &L_BCAST, 0, GM_OK, {3, {1, 3, 4}, {0, 0, 8}, 0}, NULL},
    {"BCAST axis 1", &L_BCAST, 1, GM_OK, {3, {3, 1, 4}, {0, 32, 8}, 0}, NULL},
    {"BCAST axis 2", &L_BCAST, 2, GM_OK, {3, {3, 4, 1}, {0, 8, 8}, 0}, NULL},
    {"CW axis -3", &L_CW, -3, GM_OK, {3, {1, 1, 3}, {24, 24, 8}, 0}, NULL},
    {"CW axis -2", &L_CW, -2, GM_OK, {3, {1, 1, 3}, {24, 24, 8}, 0}, NULL},
    {"CW axis -1", &L_CW, -1, GM_OK, {3, {1, 3, 1}, {24, 8, 8}, 0}, NULL},
    {"CW axis 0", &L_CW, 0, GM_OK, {3, {1, 1, 3}, {24, 24, 8}, 0}, NULL},
    {"CW axis 1", &L_CW, 1, GM_OK, {3, {1, 1, 3}, {24, 24, 8}, 0}, NULL},
    {"CW axis 2", &L_CW, 2, GM_OK, {3, {1, 3, 1}, {24, 8, 8}, 0}, NULL},
    {"Z axis -1", &L_Z, -1, GM_OK, {1, {1}, {8}, 24}, NULL},
    {"Z axis 0", &L_Z, 0, GM_OK, {1, {1}, {8}, 24}, NULL},
    {"C axis 3", &L_C, 3, GM_ERR_OUT_OF_RANGE, {0}, "axis 3 is out of bounds for array of dimension 3"}, /* numpy: axis 3 is out of bounds for array of dimension 3 */
    {"C axis -4", &L_C, -4, GM_ERR_OUT_OF_RANGE, {0}, "axis -4 is out of bounds for array of dimension 3"}, /* numpy: axis -4 is out of bounds for array of dimension 3 */
    {"Z axis 1", &L_Z, 1, GM_ERR_OUT_OF_RANGE, {0}, "axis 1 is out of bounds for array of dimension 1"}, /* numpy: axis 1 is out of bounds for array of dimension 1 */
    {"Z axis -2", &L_Z, -2, GM_ERR_OUT_OF_RANGE, {0}, "axis -2 is out of bounds for array of dimension 1"}, /* numpy: axis -2 is out of bounds for array of dimension 1 */
};

/* gm_ndview_squeeze: ndarray.squeeze(axis) (Numba TestSqueeze shapes first) */
static const axes_case squeeze_cases[] = {
    {"Q None", &L_Q, 0, {0}, GM_OK, {3, {2, 4, 3}, {96, 24, 8}, 0}, NULL},
    {"Q (0,)", &L_Q, 1, {0}, GM_OK, {5, {2, 1, 4, 1, 3}, {96, 96, 24, 24, 8}, 0}, NULL},
    {"Q (2,)", &L_Q, 1, {2}, GM_OK, {5, {1, 2, 4, 1, 3}, {192, 96, 24, 24, 8}, 0}, NULL},
    {"Q (4,)", &L_Q, 1, {4}, GM_OK, {5, {1, 2, 1, 4, 3}, {192, 96, 96, 24, 8}, 0}, NULL},
    {"Q (0, 2)", &L_Q, 2, {0, 2}, GM_OK, {4, {2, 4, 1, 3}, {96, 24, 24, 8}, 0}, NULL},
    {"Q (0, 4)", &L_Q, 2, {0, 4}, GM_OK, {4, {2, 1, 4, 3}, {96, 96, 24, 8}, 0}, NULL},
    {"Q (2, 4)", &L_Q, 2, {2, 4}, GM_OK, {4, {1, 2, 4, 3}, {192, 96, 24, 8}, 0}, NULL},
    {"Q (0, 2, 4)", &L_Q, 3, {0, 2, 4}, GM_OK, {3, {2, 4, 3}, {96, 24, 8}, 0}, NULL},
    {"Q (-2,)", &L_Q, 1, {-2}, GM_OK, {5, {1, 2, 1, 4, 3}, {192, 96, 96, 24, 8}, 0}, NULL},
    {"Q (-6,)", &L_Q, 1, {-6}, GM_OK, {5, {2, 1, 4, 1, 3}, {96, 96, 24, 24, 8}, 0}, NULL},
    {"Q (4, 0)", &L_Q, 2, {4, 0}, GM_OK, {4, {2, 1, 4, 3}, {96, 96, 24, 8}, 0}, NULL},
    {"Q (1,)", &L_Q, 1, {1}, GM_ERR_INVALID_ARG, {0}, "cannot select an axis to squeeze out which has size not equal to one"},
    {"Q (2, 3)", &L_Q, 2, {2, 3}, GM_ERR_INVALID_ARG, {0}, "cannot select an axis to squeeze out which has size not equal to one"},
    {"Q (6,)", &L_Q, 1, {6}, GM_ERR_OUT_OF_RANGE, {0}, "axis 6 is out of bounds for array of dimension 6"},
    {"Q (-7,)", &L_Q, 1, {-7}, GM_ERR_OUT_OF_RANGE, {0}, "axis -7 is out of bounds for array of dimension 6"},
    {"Q (0, 0)", &L_Q, 2, {0, 0}, GM_ERR_INVALID_ARG, {0}, "duplicate value in 'axis'"},
    {"Q (0, -6)", &L_Q, 2, {0, -6}, GM_ERR_INVALID_ARG, {0}, "duplicate value in 'axis'"},
    {"Q (1, 1)", &L_Q, 2, {1, 1}, GM_ERR_INVALID_ARG, {0}, "duplicate value in 'axis'"},
    {"Q (6, 1)", &L_Q, 2, {6, 1}, GM_ERR_OUT_OF_RANGE, {0}, "axis 6 is out of bounds for array of dimension 6"},
    {"Q (1, 6)", &L_Q, 2, {1, 6}, GM_ERR_OUT_OF_RANGE, {0}, "axis 6 is out of bounds for array of dimension 6"},
    {"QW None", &L_QW, 0, {0}, GM_OK, {2, {3, 2}, {-16, 8}, 40}, NULL},
    {"QW (0,)", &L_QW, 1, {0}, GM_OK, {3, {3, 1, 2}, {-16, 0, 8}, 40}, NULL},
    {"QW (-2,)", &L_QW, 1, {-2}, GM_OK, {3, {1, 3, 2}, {-5, -16, 8}, 40}, NULL},
    {"QW (2, 0)", &L_QW, 2, {2, 0}, GM_OK, {2, {3, 2}, {-16, 8}, 40}, NULL},
    {"QW (1,)", &L_QW, 1, {1}, GM_ERR_INVALID_ARG, {0}, "cannot select an axis to squeeze out which has size not equal to one"},
    {"ONES None", &L_ONES, 0, {0}, GM_OK, {0, {0}, {0}, 0}, NULL},
    {"ONES (1,)", &L_ONES, 1, {1}, GM_OK, {1, {1}, {0}, 0}, NULL},
    {"Z None", &L_Z, 0, {0}, GM_OK, {0, {0}, {0}, 24}, NULL},
    {"Z (0,)", &L_Z, 1, {0}, GM_ERR_OUT_OF_RANGE, {0}, "axis 0 is out of bounds for array of dimension 0"},
};

/* gm_ndview_permute: ndarray.transpose(axes) */
static const axes_case permute_cases[] = {
    {"P (2, 0, 1)", &L_P, 3, {2, 0, 1}, GM_OK, {3, {4, 2, 3}, {8, 96, -32}, 64}, NULL},
    {"P (-1, 0, 1)", &L_P, 3, {-1, 0, 1}, GM_OK, {3, {4, 2, 3}, {8, 96, -32}, 64}, NULL},
    {"P (0, 1, 2)", &L_P, 3, {0, 1, 2}, GM_OK, {3, {2, 3, 4}, {96, -32, 8}, 64}, NULL},
    {"P (2, 1, 0)", &L_P, 3, {2, 1, 0}, GM_OK, {3, {4, 3, 2}, {8, -32, 96}, 64}, NULL},
    {"P (1, -3, -1)", &L_P, 3, {1, -3, -1}, GM_OK, {3, {3, 2, 4}, {-32, 96, 8}, 64}, NULL},
    {"P (0, 1)", &L_P, 2, {0, 1}, GM_ERR_INVALID_ARG, {0}, "axes don't match array"},
    {"P (0, 0, 1)", &L_P, 3, {0, 0, 1}, GM_ERR_INVALID_ARG, {0}, "repeated axis in transpose"},
    {"P (0, 1, 3)", &L_P, 3, {0, 1, 3}, GM_ERR_OUT_OF_RANGE, {0}, "axis 3 is out of bounds for array of dimension 3"},
    {"P (0, 1, -4)", &L_P, 3, {0, 1, -4}, GM_ERR_OUT_OF_RANGE, {0}, "axis -4 is out of bounds for array of dimension 3"},
    {"P (0, 1, 2, 0)", &L_P, 4, {0, 1, 2, 0}, GM_ERR_INVALID_ARG, {0}, "axes don't match array"},
    {"P (0, 0, 3)", &L_P, 3, {0, 0, 3}, GM_ERR_INVALID_ARG, {0}, "repeated axis in transpose"},
    {"Z ()", &L_Z, 0, {0}, GM_OK, {0, {0}, {0}, 24}, NULL},
    {"A1N (0,)", &L_A1N, 1, {0}, GM_OK, {1, {10}, {-8}, 72}, NULL},
    {"A1N (-1,)", &L_A1N, 1, {-1}, GM_OK, {1, {10}, {-8}, 72}, NULL},
    {"A1N (1,)", &L_A1N, 1, {1}, GM_ERR_OUT_OF_RANGE, {0}, "axis 1 is out of bounds for array of dimension 1"},
};


/* gm_ndview_swapaxes: ndarray.swapaxes */
static const swap_case swapaxes_cases[] = {
    {"P 0 2", &L_P, 0, 2, GM_OK, {3, {4, 3, 2}, {8, -32, 96}, 64}, NULL},
    {"P -1 0", &L_P, -1, 0, GM_OK, {3, {4, 3, 2}, {8, -32, 96}, 64}, NULL},
    {"P 1 1", &L_P, 1, 1, GM_OK, {3, {2, 3, 4}, {96, -32, 8}, 64}, NULL},
    {"P 2 -2", &L_P, 2, -2, GM_OK, {3, {2, 4, 3}, {96, 8, -32}, 64}, NULL},
    {"P 3 0", &L_P, 3, 0, GM_ERR_OUT_OF_RANGE, {0}, "axis1: axis 3 is out of bounds for array of dimension 3"},
    {"P 0 -4", &L_P, 0, -4, GM_ERR_OUT_OF_RANGE, {0}, "axis2: axis -4 is out of bounds for array of dimension 3"},
};

/* gm_ndview_transpose: ndarray.T */
static const transpose_case transpose_cases[] = {
    {"P", &L_P, {3, {4, 3, 2}, {8, -32, 96}, 64}},
    {"A1N", &L_A1N, {1, {10}, {-8}, 72}},
    {"Z", &L_Z, {0, {0}, {0}, 24}},
    {"W", &L_W, {4, {2, 3, 1, 2}, {0, -48, 1000, 8}, 160}},
};

/* gm_ndview_view_dtype: ndarray.view(dtype) (numpy >= 1.23 rules) */
static const dtype_case view_dtype_cases[] = {
    {"(2,3) i4 -> f4", {2, {2, 3}, {12, 4}, 0}, D_I32, D_F32, GM_OK, {2, {2, 3}, {12, 4}, 0}, NULL},
    {"(2,3) i4 -> i2", {2, {2, 3}, {12, 4}, 0}, D_I32, D_I16, GM_OK, {2, {2, 6}, {12, 2}, 0}, NULL},
    {"(2,3) i4 -> i1", {2, {2, 3}, {12, 4}, 0}, D_I32, D_I8, GM_OK, {2, {2, 12}, {12, 1}, 0}, NULL},
    {"(2,3) i4 -> i8", {2, {2, 3}, {12, 4}, 0}, D_I32, D_I64, GM_ERR_INVALID_ARG, {0}, "the new itemsize 8 must divide the byte length of the last axis (12 bytes; the old itemsize is 4)"}, /* numpy: When changing to a larger dtype, its size must be a divisor of the total size in bytes of the last axis of the array. */
    {"(2,4) i4 -> i8", {2, {2, 4}, {16, 4}, 0}, D_I32, D_I64, GM_OK, {2, {2, 2}, {16, 8}, 0}, NULL},
    {"(2,4) i4 -> c16", {2, {2, 4}, {16, 4}, 0}, D_I32, D_C128, GM_OK, {2, {2, 1}, {16, 16}, 0}, NULL},
    {"(2,3).T i4 -> i2", {2, {3, 2}, {4, 12}, 0}, D_I32, D_I16, GM_ERR_INVALID_ARG, {0}, "the last axis must be contiguous"}, /* numpy: To change to a dtype of a different size, the last axis must be contiguous */
    {"(2,3).T i4 -> f4", {2, {3, 2}, {4, 12}, 0}, D_I32, D_F32, GM_OK, {2, {3, 2}, {4, 12}, 0}, NULL},
    {"(2,3)[:, ::2] i4 -> i2", {2, {2, 2}, {12, 8}, 0}, D_I32, D_I16, GM_ERR_INVALID_ARG, {0}, "the last axis must be contiguous"}, /* numpy: To change to a dtype of a different size, the last axis must be contiguous */
    {"(2,3)[:, ::-1] i4 -> i2", {2, {2, 3}, {12, -4}, 8}, D_I32, D_I16, GM_ERR_INVALID_ARG, {0}, "the last axis must be contiguous"}, /* numpy: To change to a dtype of a different size, the last axis must be contiguous */
    {"(2,3)[:, :1] i4 -> i2", {2, {2, 1}, {12, 4}, 0}, D_I32, D_I16, GM_OK, {2, {2, 2}, {12, 2}, 0}, NULL},
    {"(2,3)[:, :1] i4 -> i8", {2, {2, 1}, {12, 4}, 0}, D_I32, D_I64, GM_ERR_INVALID_ARG, {0}, "must divide the byte length of the last axis"}, /* numpy: When changing to a larger dtype, its size must be a divisor of the total size in bytes of the last axis of the array. */
    {"(3,1)[::2] i4 -> i1", {2, {2, 1}, {8, 4}, 0}, D_I32, D_I8, GM_OK, {2, {2, 4}, {8, 1}, 0}, NULL},
    {"(2,1) stride 999 i4 -> i2", {2, {2, 1}, {12, 999}, 0}, D_I32, D_I16, GM_OK, {2, {2, 2}, {12, 2}, 0}, NULL},
    {"(2,3)[:, 1:1] i4 -> i8", {2, {2, 0}, {12, 4}, 4}, D_I32, D_I64, GM_OK, {2, {2, 0}, {12, 8}, 4}, NULL},
    {"(2,3)[:0] i4 -> i8", {2, {0, 3}, {12, 4}, 0}, D_I32, D_I64, GM_ERR_INVALID_ARG, {0}, "must divide the byte length of the last axis"}, /* numpy: When changing to a larger dtype, its size must be a divisor of the total size in bytes of the last axis of the array. */
    {"(2,3)[:0, ::2] i4 -> i1", {2, {0, 2}, {12, 8}, 0}, D_I32, D_I8, GM_OK, {2, {0, 8}, {12, 1}, 0}, NULL},
    {"(2,3)[1] i4 -> i8", {1, {3}, {4}, 12}, D_I32, D_I64, GM_ERR_INVALID_ARG, {0}, "must divide the byte length of the last axis"}, /* numpy: When changing to a larger dtype, its size must be a divisor of the total size in bytes of the last axis of the array. */
    {"0-d i4 -> i2", {0, {0}, {0}, 8}, D_I32, D_I16, GM_ERR_INVALID_ARG, {0}, "changing the dtype of a 0d array is only supported if the itemsize is unchanged"}, /* numpy: Changing the dtype of a 0d array is only supported if the itemsize is unchanged */
    {"0-d i4 -> f4", {0, {0}, {0}, 8}, D_I32, D_F32, GM_OK, {0, {0}, {0}, 8}, NULL},
    {"(2,3) i2 -> c8", {2, {2, 3}, {6, 2}, 0}, D_I16, D_C64, GM_ERR_INVALID_ARG, {0}, "must divide the byte length of the last axis"}, /* numpy: When changing to a larger dtype, its size must be a divisor of the total size in bytes of the last axis of the array. */
    {"(2,6)[:, ::2] i2 -> i4", {2, {2, 3}, {12, 4}, 0}, D_I16, D_I32, GM_ERR_INVALID_ARG, {0}, "the last axis must be contiguous"}, /* numpy: To change to a dtype of a different size, the last axis must be contiguous */
    {"(4,)[::-1] i2 -> i4", {1, {4}, {-2}, 6}, D_I16, D_I32, GM_ERR_INVALID_ARG, {0}, "the last axis must be contiguous"}, /* numpy: To change to a dtype of a different size, the last axis must be contiguous */
    {"(2,3,4).transpose(0,2,1) f8 -> f4", {3, {2, 4, 3}, {96, 8, 32}, 0}, D_F64, D_F32, GM_ERR_INVALID_ARG, {0}, "the last axis must be contiguous"}, /* numpy: To change to a dtype of a different size, the last axis must be contiguous */
    {"broadcast (5,) i4 -> i1", {1, {5}, {0}, 0}, D_I32, D_I8, GM_ERR_INVALID_ARG, {0}, "the last axis must be contiguous"}, /* numpy: To change to a dtype of a different size, the last axis must be contiguous */
    {"(5,)[::5] i4 -> i1", {1, {1}, {20}, 0}, D_I32, D_I8, GM_OK, {1, {4}, {1}, 0}, NULL},
    {"(3,) c16 -> f8", {1, {3}, {16}, 0}, D_C128, D_F64, GM_OK, {1, {6}, {8}, 0}, NULL},
    /* float32x4 has no numpy dtype; numpy's complex128 has its 16 bytes: (2,8) f4 -> c16 */
    {"(2,8) f4 -> f4x4", {2, {2, 8}, {32, 4}, 0}, D_F32, D_F32X4, GM_OK, {2, {2, 2}, {32, 16}, 0}, NULL},
    {"(3,2) u1 -> f2", {2, {3, 2}, {2, 1}, 0}, D_U8, D_F16, GM_OK, {2, {3, 1}, {2, 2}, 0}, NULL},
};

/* gm_ndview_like: numpy.empty_like(a, order="K") strides */
static const like_case like_cases[] = {
    {"C", {3, {2, 3, 4}, {96, 32, 8}, 0}, {3, {2, 3, 4}, {96, 32, 8}, 0}},
    {"F", {3, {2, 3, 4}, {8, 16, 48}, 0}, {3, {2, 3, 4}, {8, 16, 48}, 0}},
    {"T", {3, {3, 2, 4}, {32, 96, 8}, 0}, {3, {3, 2, 4}, {32, 96, 8}, 0}},
    {"T2", {3, {4, 2, 3}, {8, 96, 32}, 0}, {3, {4, 2, 3}, {8, 96, 32}, 0}},
    {"neg", {3, {2, 3, 4}, {96, -32, 8}, 64}, {3, {2, 3, 4}, {96, 32, 8}, 0}},
    {"negnc", {3, {2, 2, 4}, {96, -64, 8}, 64}, {3, {2, 2, 4}, {64, 32, 8}, 0}},
    {"nc", {3, {2, 3, 2}, {96, 32, 16}, 0}, {3, {2, 3, 2}, {48, 16, 8}, 0}},
    {"Fneg", {3, {2, 3, 4}, {-8, 16, 48}, 8}, {3, {2, 3, 4}, {8, 16, 48}, 0}},
    {"1d", {1, {2}, {16}, 0}, {1, {2}, {8}, 0}},
    {"1dneg", {1, {4}, {-8}, 24}, {1, {4}, {8}, 0}},
    {"0d", {0, {0}, {0}, 8}, {0, {0}, {0}, 0}},
    {"size1", {3, {3, 1, 2}, {32, 32, 16}, 0}, {3, {3, 1, 2}, {16, 16, 8}, 0}},
    {"size1big", {3, {3, 1, 4}, {8, 1000, 64}, 0}, {3, {3, 1, 4}, {8, 96, 24}, 0}},
    {"tie", {3, {3, 2, 4}, {16, 16, 64}, 0}, {3, {3, 2, 4}, {16, 8, 48}, 0}},
    {"tieneg", {3, {3, 2, 4}, {16, -16, 64}, 16}, {3, {3, 2, 4}, {16, 8, 48}, 0}},
    {"bcast", {2, {3, 4}, {8, 0}, 0}, {2, {3, 4}, {32, 8}, 0}},
    {"bcast2", {2, {3, 4}, {0, 8}, 0}, {2, {3, 4}, {8, 24}, 0}},
    {"nc2", {2, {2, 2}, {96, 24}, 0}, {2, {2, 2}, {16, 8}, 0}},
    {"nc2T", {2, {2, 2}, {24, 96}, 0}, {2, {2, 2}, {8, 16}, 0}},
    {"s1", {3, {2, 1, 2}, {24, 24, 16}, 0}, {3, {2, 1, 2}, {16, 16, 8}, 0}},
    {"Cweird1", {3, {2, 1, 3}, {24, 5, 8}, 0}, {3, {2, 1, 3}, {24, 24, 8}, 0}},
    {"F4d", {4, {2, 3, 1, 2}, {8, 16, 0, 48}, 0}, {4, {2, 3, 1, 2}, {8, 16, 48, 48}, 0}},
    /* empty: numpy 1.24 allocates empty arrays with all strides 0; we give the documented C strides */
    {"empty", {3, {2, 0, 3}, {0, 0, 0}, 0}, {3, {2, 0, 3}, {24, 24, 8}, 0}}, /* numpy: (0, 0, 0) */
    {"emptyview", {2, {0, 3}, {48, 16}, 0}, {2, {0, 3}, {24, 8}, 0}}, /* numpy: (0, 0) */
    {"emptyF", {3, {3, 0, 2}, {8, 24, 24}, 0}, {3, {3, 0, 2}, {16, 16, 8}, 0}}, /* numpy: (0, 0, 0) */
};

/* clang-format on */

/* gm_ndview_split: Numba's DeviceNDArray.split(section), pieces as numpy's a[b:b + section] */
static const split_case split_cases[] = {
    {"(10,) section 3",
     {1, {10}, {4}, 40},
     3,
     4,
     GM_OK,
     4,
     {40, 52, 64, 76},
     {3, 3, 3, 1},
     4,
     NULL},
    {"(10,) section 5", {1, {10}, {4}, 40}, 5, 4, GM_OK, 2, {40, 60}, {5, 5}, 4, NULL},
    {"(10,) section 10", {1, {10}, {4}, 40}, 10, 4, GM_OK, 1, {40}, {10}, 4, NULL},
    {"(10,) section 20", {1, {10}, {4}, 40}, 20, 4, GM_OK, 1, {40}, {10}, 4, NULL},
    {"(3,) section 1", {1, {3}, {4}, 40}, 1, 4, GM_OK, 3, {40, 44, 48}, {1, 1, 1}, 4, NULL},
    {"(10,) section 3, room for 2", {1, {10}, {4}, 40}, 3, 2, GM_OK, 4, {40, 52}, {3, 3}, 4, NULL},
    {"(0,) section 3", {1, {0}, {4}, 40}, 3, 4, GM_OK, 0, {0}, {0}, 4, NULL},
    {"(1,) stride 999 (contiguous: extent 1)",
     {1, {1}, {999}, 40},
     7,
     4,
     GM_OK,
     1,
     {40},
     {1},
     999,
     NULL},
    {"(2, 5)",
     {2, {2, 5}, {20, 4}, 0},
     2,
     4,
     GM_ERR_INVALID_ARG,
     0,
     {0},
     {0},
     0,
     "only 1-D contiguous arrays can be split"},
    {"0-d", {0, {0}, {0}, 0}, 2, 4, GM_ERR_INVALID_ARG, 0, {0}, {0}, 0, "not 1-D"},
    {"(10,) stride -4",
     {1, {10}, {-4}, 36},
     3,
     4,
     GM_ERR_INVALID_ARG,
     0,
     {0},
     {0},
     0,
     "not contiguous"},
    {"(5,) stride 8", {1, {5}, {8}, 0}, 3, 4, GM_ERR_INVALID_ARG, 0, {0}, {0}, 0, "not contiguous"},
    {"section 0",
     {1, {10}, {4}, 0},
     0,
     4,
     GM_ERR_INVALID_ARG,
     0,
     {0},
     {0},
     0,
     "section must be > 0, got 0"},
    {"section -1",
     {1, {10}, {4}, 0},
     -1,
     4,
     GM_ERR_INVALID_ARG,
     0,
     {0},
     {0},
     0,
     "section must be > 0, got -1"},
    {"max_pieces -1",
     {1, {10}, {4}, 0},
     3,
     -1,
     GM_ERR_INVALID_ARG,
     0,
     {0},
     {0},
     0,
     "max_pieces must be >= 0, got -1"},
};

static void test_slice(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(slice_cases) / sizeof(slice_cases[0]); k++) {
        const slice_case *c = &slice_cases[k];
        gm_ndview in = make_view(c->in, (gm_dtype)D_F64);
        gm_ndview out = sentinel_view();
        gm_status got = gm_ndview_slice(&in, c->axis, c->slice, &out);

        check_result("gm_ndview_slice", c->name, got, c->status, c->message, &out, &c->out,
                     in.dtype);
    }
}

static void test_index(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(index_cases) / sizeof(index_cases[0]); k++) {
        const index_case *c = &index_cases[k];
        gm_ndview in = make_view(c->in, (gm_dtype)D_F64);
        gm_ndview out = sentinel_view();
        gm_status got = gm_ndview_index(&in, c->axis, c->index, &out);

        check_result("gm_ndview_index", c->name, got, c->status, c->message, &out, &c->out,
                     in.dtype);
    }
}

/* Fail unless the contiguity flags of v are numpy's `flags`. */
static void check_flags(const char *name, const gm_ndview *v, int flags)
{
    bool c = (flags & GM_T_C) != 0;
    bool f = (flags & GM_T_F) != 0;

    if (gm_ndview_is_c_contiguous(v) == c && gm_ndview_is_f_contiguous(v) == f)
        return;
    print_error("%s: C/F contiguous %d/%d, numpy says %d/%d\n", name,
                (int)gm_ndview_is_c_contiguous(v), (int)gm_ndview_is_f_contiguous(v), (int)c,
                (int)f);
    fail();
}

static void test_getitem(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(getitem_cases) / sizeof(getitem_cases[0]); k++) {
        const getitem_case *c = &getitem_cases[k];
        gm_ndview in = make_view(c->in, (gm_dtype)D_F64);
        gm_ndview out = sentinel_view();
        gm_status got = gm_ndview_getitem(&in, c->nitems, c->items, &out);

        check_result("gm_ndview_getitem", c->name, got, c->status, c->message, &out, &c->out,
                     in.dtype);
        if (c->status == GM_OK)
            check_flags(c->name, &out, c->flags);
    }
}

/* Result dimensions above GM_MAX_DIMS; numpy's limit (32) differs, its message is the model. */
static void test_getitem_too_many_dims(void **state)
{
    static const layout zero_d = {0, {0}, {0}, 24};
    static const gm_index_item newaxis = NEW;
    gm_index_item items[GM_MAX_DIMS + 1];
    gm_ndview in = make_view(&zero_d, (gm_dtype)D_F64);
    gm_ndview out = sentinel_view();

    (void)state;
    for (int i = 0; i < GM_MAX_DIMS + 1; i++)
        items[i] = newaxis;
    assert_status(gm_ndview_getitem(&in, GM_MAX_DIMS + 1, items, &out), GM_ERR_TOO_MANY_DIMS);
    assert_message_contains("number of dimensions must be within [0, 64], indexing result would "
                            "have 65");
    assert_ok(gm_ndview_getitem(&in, GM_MAX_DIMS, items, &out));
    assert_int_equal(out.ndim, GM_MAX_DIMS);
    assert_int_equal(out.shape[GM_MAX_DIMS - 1], 1);
    assert_int_equal(out.strides[GM_MAX_DIMS - 1], 0);
    assert_true(gm_ndview_is_c_contiguous(&out));
}

/* Argument errors of gm_ndview_getitem that numpy's syntax cannot produce. */
static void test_getitem_arguments(void **state)
{
    static const gm_index_item bad_kind[] = {{(gm_index_kind)9, 0, {0, 0, 0}}};
    gm_ndview in = make_view(&L_B3, (gm_dtype)D_F64);
    gm_ndview out = sentinel_view();

    (void)state;
    assert_status(gm_ndview_getitem(&in, 1, bad_kind, &out), GM_ERR_INVALID_ARG);
    assert_message_contains("gm_ndview_getitem: item 0 has unknown kind 9");
    assert_status(gm_ndview_getitem(&in, -1, bad_kind, &out), GM_ERR_INVALID_ARG);
    assert_message_contains("nitems must be >= 0, got -1");
    assert_status(gm_ndview_getitem(&in, 1, NULL, &out), GM_ERR_NULL_POINTER);
    assert_message_contains("items is NULL");
    assert_ok(gm_ndview_getitem(&in, 0, NULL, &out));
    check_layout("B3[()]", &out, &L_B3, in.dtype);
}

static void test_expand_dims(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(expand_dims_cases) / sizeof(expand_dims_cases[0]); k++) {
        const axis_case *c = &expand_dims_cases[k];
        gm_ndview in = make_view(c->in, (gm_dtype)D_F64);
        gm_ndview out = sentinel_view();
        gm_status got = gm_ndview_expand_dims(&in, c->axis, &out);

        check_result("gm_ndview_expand_dims", c->name, got, c->status, c->message, &out, &c->out,
                     in.dtype);
    }
}

/* A view with GM_MAX_DIMS axes cannot grow another. */
static void test_expand_dims_too_many(void **state)
{
    layout all_ones = {0, {0}, {0}, 0};
    gm_ndview in = make_view(&all_ones, (gm_dtype)D_F64);
    gm_ndview out = sentinel_view();

    (void)state;
    in.ndim = GM_MAX_DIMS;
    for (int i = 0; i < GM_MAX_DIMS; i++) {
        in.shape[i] = 1;
        in.strides[i] = 8;
    }
    assert_status(gm_ndview_expand_dims(&in, 0, &out), GM_ERR_TOO_MANY_DIMS);
    assert_message_contains("gm_ndview_expand_dims: cannot add an axis to a 64-dimensional array");
    in.ndim = GM_MAX_DIMS - 1;
    assert_ok(gm_ndview_expand_dims(&in, -1, &out));
    assert_int_equal(out.ndim, GM_MAX_DIMS);
}

static void test_squeeze(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(squeeze_cases) / sizeof(squeeze_cases[0]); k++) {
        const axes_case *c = &squeeze_cases[k];
        gm_ndview in = make_view(c->in, (gm_dtype)D_F64);
        gm_ndview out = sentinel_view();
        gm_status got = gm_ndview_squeeze(&in, c->naxes, c->axes, &out);

        check_result("gm_ndview_squeeze", c->name, got, c->status, c->message, &out, &c->out,
                     in.dtype);
    }
}

/* axes NULL squeezes every extent-1 axis whatever naxes says; a negative count is an error. */
static void test_squeeze_arguments(void **state)
{
    static const layout squeezed = {3, {2, 4, 3}, {96, 24, 8}, 0};
    static const int axes[] = {0};
    gm_ndview in = make_view(&L_Q, (gm_dtype)D_F64);
    gm_ndview out = sentinel_view();

    (void)state;
    assert_ok(gm_ndview_squeeze(&in, 2, NULL, &out));
    check_layout("Q axes NULL", &out, &squeezed, in.dtype);
    assert_status(gm_ndview_squeeze(&in, -1, axes, &out), GM_ERR_INVALID_ARG);
    assert_message_contains("gm_ndview_squeeze: naxes must be >= 0, got -1");
}

static void test_permute(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(permute_cases) / sizeof(permute_cases[0]); k++) {
        const axes_case *c = &permute_cases[k];
        gm_ndview in = make_view(c->in, (gm_dtype)D_F64);
        gm_ndview out = sentinel_view();
        gm_status got = gm_ndview_permute(&in, c->naxes, c->axes, &out);

        check_result("gm_ndview_permute", c->name, got, c->status, c->message, &out, &c->out,
                     in.dtype);
    }
}

/* NULL axes: an error unless the array is 0-d. */
static void test_permute_null_axes(void **state)
{
    gm_ndview in = make_view(&L_P, (gm_dtype)D_F64);
    gm_ndview zero_d = make_view(&L_Z, (gm_dtype)D_F64);
    gm_ndview out = sentinel_view();

    (void)state;
    assert_status(gm_ndview_permute(&in, 3, NULL, &out), GM_ERR_NULL_POINTER);
    assert_message_contains("gm_ndview_permute: axes is NULL");
    assert_ok(gm_ndview_permute(&zero_d, 0, NULL, &out));
    check_layout("Z permute ()", &out, &L_Z, in.dtype);
}

static void test_swapaxes(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(swapaxes_cases) / sizeof(swapaxes_cases[0]); k++) {
        const swap_case *c = &swapaxes_cases[k];
        gm_ndview in = make_view(c->in, (gm_dtype)D_F64);
        gm_ndview out = sentinel_view();
        gm_status got = gm_ndview_swapaxes(&in, c->axis1, c->axis2, &out);

        check_result("gm_ndview_swapaxes", c->name, got, c->status, c->message, &out, &c->out,
                     in.dtype);
    }
}

static void test_transpose(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(transpose_cases) / sizeof(transpose_cases[0]); k++) {
        const transpose_case *c = &transpose_cases[k];
        gm_ndview in = make_view(c->in, (gm_dtype)D_F64);
        gm_ndview out = sentinel_view();

        assert_ok(gm_ndview_transpose(&in, &out));
        check_layout(c->name, &out, &c->out, in.dtype);
    }
}

static void test_view_dtype(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(view_dtype_cases) / sizeof(view_dtype_cases[0]); k++) {
        const dtype_case *c = &view_dtype_cases[k];
        gm_ndview in = make_view(&c->in, c->from);
        gm_ndview out = sentinel_view();
        gm_status got = gm_ndview_view_dtype(&in, c->to, &out);

        check_result("gm_ndview_view_dtype", c->name, got, c->status, c->message, &out, &c->out,
                     c->to);
    }
}

/* An unsupported target dtype is GM_ERR_DTYPE. */
static void test_view_dtype_invalid(void **state)
{
    static const gm_dtype bad = {GM_DTYPE_FLOAT, 24, 1};
    gm_ndview in = make_view(&L_A2, (gm_dtype)D_F64);
    gm_ndview out = sentinel_view();

    (void)state;
    assert_status(gm_ndview_view_dtype(&in, bad, &out), GM_ERR_DTYPE);
    assert_message_contains("gm_ndview_view_dtype: invalid dtype {code 2, bits 24, lanes 1}");
}

static void test_like(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(like_cases) / sizeof(like_cases[0]); k++) {
        const like_case *c = &like_cases[k];
        gm_ndview in = make_view(&c->in, (gm_dtype)D_F64);
        gm_ndview out = sentinel_view();

        assert_ok(gm_ndview_like(&in, &out));
        assert_null(out.data);
        out.data = test_buffer; /* checked below; check_layout wants the base kept */
        check_layout(c->name, &out, &c->out, in.dtype);
    }
}

/* like: data NULL, offset 0, dtype / memory / device kept, reserved untouched. */
static void test_like_fields(void **state)
{
    gm_ndview in = make_view(&L_NEG, (gm_dtype)D_C64);
    gm_ndview out = sentinel_view();

    (void)state;
    in.memory = GM_MEMORY_MANAGED;
    in.device_id = 1;
    assert_ok(gm_ndview_like(&in, &out));
    assert_null(out.data);
    assert_int_equal(out.offset, 0);
    assert_true(gm_dtype_equal(out.dtype, in.dtype));
    assert_int_equal(out.memory, GM_MEMORY_MANAGED);
    assert_int_equal(out.device_id, 1);
    assert_int_equal(out.reserved, 0);
    assert_ok(gm_ndview_validate(&out));
}

/* Fail unless the first pieces of a split case match numpy's slices. */
static void check_pieces(const split_case *c, const gm_ndview *pieces, int64_t count)
{
    int64_t n = count < c->max_pieces ? count : c->max_pieces;

    assert_int_equal(count, c->count);
    for (int64_t i = 0; i < n; i++) {
        layout want = {1, {c->extents[i]}, {c->stride}, c->offsets[i]};

        check_layout(c->name, &pieces[i], &want, (gm_dtype)D_F32);
    }
}

static void test_split(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(split_cases) / sizeof(split_cases[0]); k++) {
        const split_case *c = &split_cases[k];
        gm_ndview in = make_view(&c->in, (gm_dtype)D_F32);
        gm_ndview pieces[4];
        int64_t count = -7;
        gm_status got = gm_ndview_split(&in, c->section, c->max_pieces, pieces, &count);

        if (got != c->status) {
            print_error("%s: returned %s, expected %s: %s\n", c->name, gm_status_name(got),
                        gm_status_name(c->status), gm_last_error_message());
            fail();
        }
        if (got == GM_OK) {
            check_pieces(c, pieces, count);
        } else {
            assert_int_equal(count, -7);
            assert_message_contains("gm_ndview_split");
            assert_message_contains(c->message);
        }
    }
}

/* Counting only, NULL outputs, and pieces aliasing the input. */
static void test_split_arguments(void **state)
{
    static const layout ten = {1, {10}, {4}, 40};
    static const layout first = {1, {3}, {4}, 40};
    gm_ndview in = make_view(&ten, (gm_dtype)D_F32);
    gm_ndview pieces[2];
    int64_t count = 0;

    (void)state;
    assert_ok(gm_ndview_split(&in, 3, 0, NULL, &count));
    assert_int_equal(count, 4);
    assert_status(gm_ndview_split(&in, 3, 1, NULL, &count), GM_ERR_NULL_POINTER);
    assert_message_contains("gm_ndview_split: pieces is NULL");
    assert_status(gm_ndview_split(&in, 3, 2, pieces, NULL), GM_ERR_NULL_POINTER);
    assert_message_contains("gm_ndview_split: count_p is NULL");
    pieces[0] = in;
    assert_ok(gm_ndview_split(&pieces[0], 3, 2, pieces, &count));
    check_layout("aliased split piece 0", &pieces[0], &first, (gm_dtype)D_F32);
    assert_int_equal(pieces[1].offset, 52);
}

/* Every view operation, as one signature, on a fixed valid argument set. */
typedef gm_status (*view_op)(const gm_ndview *view, gm_ndview *out_p);

static gm_status op_transpose(const gm_ndview *v, gm_ndview *o)
{
    return gm_ndview_transpose(v, o);
}

static gm_status op_permute(const gm_ndview *v, gm_ndview *o)
{
    static const int axes[] = {1, 0};
    return gm_ndview_permute(v, 2, axes, o);
}

static gm_status op_swapaxes(const gm_ndview *v, gm_ndview *o)
{
    return gm_ndview_swapaxes(v, 0, 1, o);
}

static gm_status op_slice(const gm_ndview *v, gm_ndview *o)
{
    return gm_ndview_slice(v, 1, GM_SLICE(GM_NONE, GM_NONE, -2), o);
}

static gm_status op_index(const gm_ndview *v, gm_ndview *o)
{
    return gm_ndview_index(v, 0, -1, o);
}

static gm_status op_getitem(const gm_ndview *v, gm_ndview *o)
{
    static const gm_index_item items[] = {NEW, I(1), S(GM_NONE, GM_NONE, -1)};
    return gm_ndview_getitem(v, 3, items, o);
}

static gm_status op_expand_dims(const gm_ndview *v, gm_ndview *o)
{
    return gm_ndview_expand_dims(v, 1, o);
}

static gm_status op_squeeze(const gm_ndview *v, gm_ndview *o)
{
    return gm_ndview_squeeze(v, 0, NULL, o);
}

static gm_status op_view_dtype(const gm_ndview *v, gm_ndview *o)
{
    return gm_ndview_view_dtype(v, (gm_dtype)D_F32, o);
}

static gm_status op_like(const gm_ndview *v, gm_ndview *o)
{
    return gm_ndview_like(v, o);
}

static gm_status op_split(const gm_ndview *v, gm_ndview *o)
{
    int64_t count = 0;
    return gm_ndview_split(v, 2, 1, o, &count);
}

static const struct {
    const char *fn;
    view_op op;
} all_ops[] = {
    {"gm_ndview_transpose", op_transpose},
    {"gm_ndview_permute", op_permute},
    {"gm_ndview_swapaxes", op_swapaxes},
    {"gm_ndview_slice", op_slice},
    {"gm_ndview_index", op_index},
    {"gm_ndview_getitem", op_getitem},
    {"gm_ndview_expand_dims", op_expand_dims},
    {"gm_ndview_squeeze", op_squeeze},
    {"gm_ndview_view_dtype", op_view_dtype},
    {"gm_ndview_like", op_like},
    {"gm_ndview_split", op_split},
};

/* Check one failing call of every operation: status, message naming it, output untouched. */
static void check_all_fail(const gm_ndview *in, bool null_out, gm_status expected,
                           const char *fragment)
{
    for (size_t k = 0; k < sizeof(all_ops) / sizeof(all_ops[0]); k++) {
        gm_ndview out = sentinel_view();
        gm_status got = all_ops[k].op(in, null_out ? NULL : &out);

        check_result(all_ops[k].fn, fragment, got, expected, fragment, &out, NULL, (gm_dtype)D_F64);
    }
}

/* NULL view and NULL output are GM_ERR_NULL_POINTER everywhere. */
static void test_null_pointers(void **state)
{
    static const layout two_d = {2, {4, 6}, {48, 8}, 0};
    gm_ndview in = make_view(&two_d, (gm_dtype)D_F64);

    (void)state;
    check_all_fail(NULL, false, GM_ERR_NULL_POINTER, "view is NULL");
    check_all_fail(&in, true, GM_ERR_NULL_POINTER, "is NULL");
}

/* Invalid input descriptors are rejected by every operation with gm_ndview_validate's status. */
static void test_invalid_inputs(void **state)
{
    static const layout two_d = {2, {4, 6}, {48, 8}, 0};
    gm_ndview in = make_view(&two_d, (gm_dtype)D_F64);

    (void)state;
    in.dtype.bits = 12;
    check_all_fail(&in, false, GM_ERR_DTYPE, "invalid dtype {code 2, bits 12, lanes 1}");
    in = make_view(&two_d, (gm_dtype)D_F64);
    in.ndim = GM_MAX_DIMS + 1;
    check_all_fail(&in, false, GM_ERR_TOO_MANY_DIMS, "ndim 65 exceeds GM_MAX_DIMS (64)");
    in.ndim = -1;
    check_all_fail(&in, false, GM_ERR_INVALID_ARG, "ndim must be >= 0, got -1");
    in = make_view(&two_d, (gm_dtype)D_F64);
    in.shape[1] = -6;
    check_all_fail(&in, false, GM_ERR_INVALID_ARG, "negative extent -6 on axis 1");
    in = make_view(&two_d, (gm_dtype)D_F64);
    in.strides[0] = INT64_MAX / 2;
    check_all_fail(&in, false, GM_ERR_OVERFLOW, "overflows");
}

/* Writing the result over the input gives the same result as a separate output. */
static void test_output_aliases_input(void **state)
{
    static const layout two_d = {2, {4, 6}, {48, 8}, 16};
    static const layout one_d = {1, {5}, {8}, 16}; /* split takes 1-D views only */

    (void)state;
    for (size_t k = 0; k < sizeof(all_ops) / sizeof(all_ops[0]); k++) {
        gm_ndview in = make_view(all_ops[k].op == op_split ? &one_d : &two_d, (gm_dtype)D_F64);
        gm_ndview separate = sentinel_view();
        gm_ndview inplace = in;

        assert_ok(all_ops[k].op(&in, &separate));
        assert_ok(all_ops[k].op(&inplace, &inplace));
        if (memcmp(&separate, &inplace, sizeof(separate)) != 0) {
            print_error("%s: in-place result differs\n", all_ops[k].fn);
            fail();
        }
    }
}

/* ndview.h: `reserved` is written zero by gpumem, whatever the input carries (it used to be
 * copied from the input into every result). */
static void test_results_have_reserved_zero(void **state)
{
    static const layout two_d = {2, {4, 6}, {48, 8}, 16};
    static const layout one_d = {1, {5}, {8}, 16}; /* split takes 1-D views only */

    (void)state;
    for (size_t k = 0; k < sizeof(all_ops) / sizeof(all_ops[0]); k++) {
        gm_ndview in = make_view(all_ops[k].op == op_split ? &one_d : &two_d, (gm_dtype)D_F64);
        gm_ndview out = sentinel_view();

        in.reserved = 0x5a5a;
        assert_ok(all_ops[k].op(&in, &out));
        if (out.reserved != 0) {
            print_error("%s: reserved is %d, not 0\n", all_ops[k].fn, (int)out.reserved);
            fail();
        }
        assert_ok(all_ops[k].op(&in, &in)); /* in place too */
        assert_int_equal(in.reserved, 0);
    }
}

/* The fuzzer's findings: overflowing offsets and strides give GM_ERR_OVERFLOW, never UB. */
static void test_overflow_regressions(void **state)
{
    int64_t shape2[2] = {0, 4};
    int64_t strides2[2] = {1, INT64_C(3886237042513805377)};
    int64_t shape1[1] = {2};
    int64_t strides1[1] = {INT64_MIN};
    int64_t wide[2] = {INT64_C(1) << 62, 0};
    gm_index_item items[2] = {GM_IDX_ALL, GM_IDX_INT(3)};
    gm_ndview v, out, untouched;

    (void)state;
    memset(&untouched, 0x5a, sizeof(untouched));
    out = untouched;
    assert_ok(gm_ndview_init(NULL, GM_INT8, 2, shape2, strides2, GM_ORDER_C, &v));
    assert_status(gm_ndview_slice(&v, 1, GM_SLICE(GM_NONE, GM_NONE, -1), &out), GM_ERR_OVERFLOW);
    assert_status(gm_ndview_index(&v, 1, 3, &out), GM_ERR_OVERFLOW);
    assert_status(gm_ndview_getitem(&v, 2, items, &out), GM_ERR_OVERFLOW);
    shape2[1] = 5;
    strides2[1] = -20;
    assert_ok(gm_ndview_init(NULL, GM_INT8, 2, shape2, strides2, GM_ORDER_C, &v));
    v.offset = INT64_MIN;
    assert_status(gm_ndview_index(&v, 1, 4, &out), GM_ERR_OVERFLOW);
    assert_message_contains("offset");
    /* ends that fit in int64 but a span hi - lo that does not: invalid from the start */
    assert_status(gm_ndview_init(NULL, GM_INT8, 1, shape1, strides1, GM_ORDER_C, &v),
                  GM_ERR_OVERFLOW);
    assert_message_contains("spans more than");
    memset(&v, 0, sizeof(v)); /* the same view, made by hand: refused by every operation */
    v.dtype = GM_INT8;
    v.ndim = 1;
    v.shape[0] = shape1[0];
    v.strides[0] = strides1[0];
    assert_status(gm_ndview_slice(&v, 0, GM_SLICE(GM_NONE, GM_NONE, -1), &out), GM_ERR_OVERFLOW);
    /* the fuzzer's input whose reversal's extent did not fit: its span does not either */
    v.shape[0] = 3;
    v.strides[0] = -(INT64_C(1) << 62);
    v.offset = 8768;
    assert_status(gm_ndview_validate(&v), GM_ERR_OVERFLOW);
    assert_status(gm_ndview_slice(&v, 0, GM_SLICE(GM_NONE, GM_NONE, -1), &out), GM_ERR_OVERFLOW);
    items[0] = GM_IDX_SLICE(GM_NONE, GM_NONE, -1);
    assert_status(gm_ndview_getitem(&v, 1, items, &out), GM_ERR_OVERFLOW);
    assert_ok(gm_ndview_init(NULL, GM_INT8, 2, wide, NULL, GM_ORDER_C, &v));
    assert_status(gm_ndview_view_dtype(&v, GM_UINT16, &out), GM_ERR_OVERFLOW);
    assert_memory_equal(&out, &untouched, sizeof(out));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overflow_regressions),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_index),
        cmocka_unit_test(test_getitem),
        cmocka_unit_test(test_getitem_too_many_dims),
        cmocka_unit_test(test_getitem_arguments),
        cmocka_unit_test(test_expand_dims),
        cmocka_unit_test(test_expand_dims_too_many),
        cmocka_unit_test(test_squeeze),
        cmocka_unit_test(test_squeeze_arguments),
        cmocka_unit_test(test_permute),
        cmocka_unit_test(test_permute_null_axes),
        cmocka_unit_test(test_swapaxes),
        cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_view_dtype),
        cmocka_unit_test(test_view_dtype_invalid),
        cmocka_unit_test(test_like),
        cmocka_unit_test(test_like_fields),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_split_arguments),
        cmocka_unit_test(test_null_pointers),
        cmocka_unit_test(test_invalid_inputs),
        cmocka_unit_test(test_output_aliases_input),
        cmocka_unit_test(test_results_have_reserved_zero),
    };
    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
