/* dtypes: validity, item size, and numpy's names and type codes. */
#include <stdio.h>
#include <string.h>

#include "core.h"

/* One row per supported scalar type: the canonical name and numpy's kind letter. */
typedef struct dtype_row {
    uint8_t code;
    uint8_t bits;
    const char *name;
    char kind; /* numpy's typestr kind: b i u f c; 0 for none */
} dtype_row;

static const dtype_row dtype_rows[] = {
    {GM_DTYPE_BOOL, 8, "bool", 'b'},
    {GM_DTYPE_INT, 8, "int8", 'i'},
    {GM_DTYPE_INT, 16, "int16", 'i'},
    {GM_DTYPE_INT, 32, "int32", 'i'},
    {GM_DTYPE_INT, 64, "int64", 'i'},
    {GM_DTYPE_UINT, 8, "uint8", 'u'},
    {GM_DTYPE_UINT, 16, "uint16", 'u'},
    {GM_DTYPE_UINT, 32, "uint32", 'u'},
    {GM_DTYPE_UINT, 64, "uint64", 'u'},
    {GM_DTYPE_FLOAT, 16, "float16", 'f'},
    {GM_DTYPE_BFLOAT, 16, "bfloat16", 0},
    {GM_DTYPE_FLOAT, 32, "float32", 'f'},
    {GM_DTYPE_FLOAT, 64, "float64", 'f'},
    {GM_DTYPE_COMPLEX, 64, "complex64", 'c'},
    {GM_DTYPE_COMPLEX, 128, "complex128", 'c'},
};

#define DTYPE_ROWS ((int)(sizeof(dtype_rows) / sizeof(dtype_rows[0])))

/* Aliases numpy accepts besides the canonical names and kind+size codes. */
static const struct {
    const char *alias;
    const char *name;
} dtype_aliases[] = {
    {"?", "bool"},
    {"bool_", "bool"},
    {"b", "int8"},
    {"B", "uint8"},
    {"h", "int16"},
    {"H", "uint16"},
    {"i", "int32"},
    {"I", "uint32"},
    {"q", "int64"},
    {"Q", "uint64"},
    {"e", "float16"},
    {"f", "float32"},
    {"d", "float64"},
    {"F", "complex64"},
    {"D", "complex128"},
    {"half", "float16"},
    {"single", "float32"},
    {"double", "float64"},
    {"csingle", "complex64"},
    {"cdouble", "complex128"},
    {"byte", "int8"},
    {"ubyte", "uint8"},
    {"short", "int16"},
    {"ushort", "uint16"},
    {"intc", "int32"},
    {"uintc", "uint32"},
    {"longlong", "int64"},
    {"ulonglong", "uint64"},
};

static const dtype_row *find_row(uint8_t code, uint8_t bits)
{
    for (int i = 0; i < DTYPE_ROWS; i++) {
        if (dtype_rows[i].code == code && dtype_rows[i].bits == bits)
            return &dtype_rows[i];
    }
    return NULL;
}

bool gm_dtype_is_valid(gm_dtype dtype)
{
    return gm__dtype_bytes(dtype) != 0;
}

size_t gm_dtype_itemsize(gm_dtype dtype)
{
    return (size_t)gm__dtype_bytes(dtype);
}

bool gm_dtype_equal(gm_dtype a, gm_dtype b)
{
    return gm__dtype_same(a, b);
}

static bool from_canonical(const char *name, gm_dtype *out)
{
    for (int i = 0; i < DTYPE_ROWS; i++) {
        if (strcmp(dtype_rows[i].name, name) == 0) {
            *out = (gm_dtype){dtype_rows[i].code, dtype_rows[i].bits, 1};
            return true;
        }
    }
    return false;
}

/* numpy's kind + byte count codes: "f4", "i8", "c16", "b1", "u2". */
static bool from_typecode(const char *name, gm_dtype *out)
{
    char kind = name[0];
    int bytes = 0;
    int used = 0;

    if (kind == '\0' || strchr("biufc", kind) == NULL)
        return false;
    if (sscanf(name + 1, "%3d%n", &bytes, &used) != 1 || name[1 + used] != '\0' || bytes <= 0 ||
        bytes > 16 || name[1] == '+' || name[1] == '-' || name[1] == ' ')
        return false;
    for (int i = 0; i < DTYPE_ROWS; i++) {
        if (dtype_rows[i].kind == kind && dtype_rows[i].bits == bytes * 8) {
            *out = (gm_dtype){dtype_rows[i].code, dtype_rows[i].bits, 1};
            return true;
        }
    }
    return false;
}

gm_status gm_dtype_from_name(const char *name, gm_dtype *out_p)
{
    static const char fn[] = "gm_dtype_from_name";
    const char *body = name;
    gm_dtype dtype = {0, 0, 0};

    if (name == NULL || out_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: name and out_p must not be NULL", fn);
    if (body[0] == '>')
        return gm__error(GM_ERR_DTYPE, "%s: big-endian dtype \"%s\" is not supported", fn, name);
    if (body[0] == '<' || body[0] == '=' || body[0] == '|')
        body++;
    for (size_t i = 0; i < sizeof(dtype_aliases) / sizeof(dtype_aliases[0]); i++) {
        if (strcmp(dtype_aliases[i].alias, body) == 0)
            body = dtype_aliases[i].name;
    }
    if (!from_canonical(body, &dtype) && !from_typecode(body, &dtype))
        return gm__error(GM_ERR_DTYPE, "%s: unknown dtype name \"%s\"", fn, name);
    *out_p = dtype;
    return GM_OK;
}

static gm_status write_name(const char *fn, char *buf, size_t size, const char *text)
{
    if (buf == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: buf is NULL", fn);
    if (size == 0 || strlen(text) >= size) {
        if (size > 0)
            buf[0] = '\0';
        return gm__error(GM_ERR_INVALID_ARG, "%s: buffer of %zu bytes is too small for \"%s\"", fn,
                         size, text);
    }
    memcpy(buf, text, strlen(text) + 1);
    return GM_OK;
}

gm_status gm_dtype_name(gm_dtype dtype, char *buf, size_t size)
{
    static const char fn[] = "gm_dtype_name";
    const dtype_row *row = find_row(dtype.code, dtype.bits);
    char text[GM_DTYPE_NAME_MAX];

    if (row == NULL || dtype.lanes < 1)
        return gm__error(GM_ERR_DTYPE, "%s: invalid dtype {code %u, bits %u, lanes %u}", fn,
                         dtype.code, dtype.bits, dtype.lanes);
    if (dtype.lanes == 1)
        snprintf(text, sizeof(text), "%s", row->name);
    else
        snprintf(text, sizeof(text), "%sx%u", row->name, (unsigned)dtype.lanes);
    return write_name(fn, buf, size, text);
}

gm_status gm_dtype_typestr(gm_dtype dtype, char *buf, size_t size)
{
    static const char fn[] = "gm_dtype_typestr";
    const dtype_row *row = find_row(dtype.code, dtype.bits);
    char text[GM_DTYPE_NAME_MAX];

    if (row == NULL || dtype.lanes != 1 || row->kind == 0)
        return gm__error(GM_ERR_DTYPE,
                         "%s: dtype {code %u, bits %u, lanes %u} has no numpy type string", fn,
                         dtype.code, dtype.bits, dtype.lanes);
    snprintf(text, sizeof(text), "%c%c%d", dtype.bits == 8 ? '|' : '<', row->kind, dtype.bits / 8);
    return write_name(fn, buf, size, text);
}
