/* dtypes: DLPack layout, item sizes, numpy names and codes. */
#include <string.h>

#include "gm_test.h"

typedef struct name_case {
    const char *name;
    gm_dtype dtype;
} name_case;

/* Every accepted spelling maps to the dtype numpy gives it. */
static void test_names_parse(void **state)
{
    static const name_case cases[] = {
        {"bool", GM_DTYPE_INIT(GM_DTYPE_BOOL, 8)},
        {"?", GM_DTYPE_INIT(GM_DTYPE_BOOL, 8)},
        {"|b1", GM_DTYPE_INIT(GM_DTYPE_BOOL, 8)},
        {"int8", GM_DTYPE_INIT(GM_DTYPE_INT, 8)},
        {"i1", GM_DTYPE_INIT(GM_DTYPE_INT, 8)},
        {"b", GM_DTYPE_INIT(GM_DTYPE_INT, 8)},
        {"int16", GM_DTYPE_INIT(GM_DTYPE_INT, 16)},
        {"<i2", GM_DTYPE_INIT(GM_DTYPE_INT, 16)},
        {"int32", GM_DTYPE_INIT(GM_DTYPE_INT, 32)},
        {"i", GM_DTYPE_INIT(GM_DTYPE_INT, 32)},
        {"int64", GM_DTYPE_INIT(GM_DTYPE_INT, 64)},
        {"=i8", GM_DTYPE_INIT(GM_DTYPE_INT, 64)},
        {"q", GM_DTYPE_INIT(GM_DTYPE_INT, 64)},
        {"uint8", GM_DTYPE_INIT(GM_DTYPE_UINT, 8)},
        {"B", GM_DTYPE_INIT(GM_DTYPE_UINT, 8)},
        {"u2", GM_DTYPE_INIT(GM_DTYPE_UINT, 16)},
        {"uint32", GM_DTYPE_INIT(GM_DTYPE_UINT, 32)},
        {"Q", GM_DTYPE_INIT(GM_DTYPE_UINT, 64)},
        {"uint64", GM_DTYPE_INIT(GM_DTYPE_UINT, 64)},
        {"float16", GM_DTYPE_INIT(GM_DTYPE_FLOAT, 16)},
        {"e", GM_DTYPE_INIT(GM_DTYPE_FLOAT, 16)},
        {"half", GM_DTYPE_INIT(GM_DTYPE_FLOAT, 16)},
        {"bfloat16", GM_DTYPE_INIT(GM_DTYPE_BFLOAT, 16)},
        {"float32", GM_DTYPE_INIT(GM_DTYPE_FLOAT, 32)},
        {"f4", GM_DTYPE_INIT(GM_DTYPE_FLOAT, 32)},
        {"<f4", GM_DTYPE_INIT(GM_DTYPE_FLOAT, 32)},
        {"f", GM_DTYPE_INIT(GM_DTYPE_FLOAT, 32)},
        {"single", GM_DTYPE_INIT(GM_DTYPE_FLOAT, 32)},
        {"float64", GM_DTYPE_INIT(GM_DTYPE_FLOAT, 64)},
        {"d", GM_DTYPE_INIT(GM_DTYPE_FLOAT, 64)},
        {"f8", GM_DTYPE_INIT(GM_DTYPE_FLOAT, 64)},
        {"complex64", GM_DTYPE_INIT(GM_DTYPE_COMPLEX, 64)},
        {"c8", GM_DTYPE_INIT(GM_DTYPE_COMPLEX, 64)},
        {"F", GM_DTYPE_INIT(GM_DTYPE_COMPLEX, 64)},
        {"complex128", GM_DTYPE_INIT(GM_DTYPE_COMPLEX, 128)},
        {"c16", GM_DTYPE_INIT(GM_DTYPE_COMPLEX, 128)},
        {"D", GM_DTYPE_INIT(GM_DTYPE_COMPLEX, 128)},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        gm_dtype got = {0, 0, 0};

        assert_ok(gm_dtype_from_name(cases[i].name, &got));
        if (!gm_dtype_equal(got, cases[i].dtype))
            fail_msg("%s parsed as {%u,%u,%u}", cases[i].name, got.code, got.bits, got.lanes);
    }
}

/* Unknown names, big-endian and malformed codes fail and leave the output alone. */
static void test_bad_names_rejected(void **state)
{
    static const char *const bad[] = {"",    "float", "f3",      "i16",  "c4", "int128",
                                      "f-4", "f+4",   "f 4",     "f4x",  "<",  "<<f4",
                                      "b0",  "u",     "complex", "f1234"};
    gm_dtype out = GM_INT8;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_status(gm_dtype_from_name(bad[i], &out), GM_ERR_DTYPE);
        assert_true(gm_dtype_equal(out, GM_INT8));
    }
    assert_status(gm_dtype_from_name(">f4", &out), GM_ERR_DTYPE);
    assert_message_contains("big-endian");
    assert_status(gm_dtype_from_name(NULL, &out), GM_ERR_NULL_POINTER);
    assert_status(gm_dtype_from_name("f4", NULL), GM_ERR_NULL_POINTER);
}

/* DLPack's codes and sizes. */
static void test_itemsize_and_codes(void **state)
{
    gm_dtype vec4 = {GM_DTYPE_FLOAT, 32, 4};
    gm_dtype bad_bits = {GM_DTYPE_FLOAT, 24, 1};
    gm_dtype no_lanes = {GM_DTYPE_FLOAT, 32, 0};
    gm_dtype bad_code = {3, 64, 1};

    (void)state;
    assert_int_equal(GM_DTYPE_INT, 0);
    assert_int_equal(GM_DTYPE_UINT, 1);
    assert_int_equal(GM_DTYPE_FLOAT, 2);
    assert_int_equal(GM_DTYPE_BFLOAT, 4);
    assert_int_equal(GM_DTYPE_COMPLEX, 5);
    assert_int_equal(GM_DTYPE_BOOL, 6);
    assert_int_equal(sizeof(gm_dtype), 4);
    assert_int_equal(gm_dtype_itemsize(GM_BOOL), 1);
    assert_int_equal(gm_dtype_itemsize(GM_BFLOAT16), 2);
    assert_int_equal(gm_dtype_itemsize(GM_FLOAT32), 4);
    assert_int_equal(gm_dtype_itemsize(GM_COMPLEX64), 8);
    assert_int_equal(gm_dtype_itemsize(GM_COMPLEX128), 16);
    assert_int_equal(gm_dtype_itemsize(vec4), 16);
    assert_int_equal(gm_dtype_itemsize(bad_bits), 0);
    assert_int_equal(gm_dtype_itemsize(no_lanes), 0);
    assert_int_equal(gm_dtype_itemsize(bad_code), 0);
    assert_false(gm_dtype_is_valid(bad_code));
    assert_true(gm_dtype_is_valid(vec4));
    assert_false(gm_dtype_equal(GM_INT32, GM_UINT32));
    assert_false(gm_dtype_equal(GM_FLOAT16, GM_BFLOAT16));
}

/* Canonical names and numpy type strings round-trip through the parser. */
static void test_names_round_trip(void **state)
{
    const gm_dtype all[] = {GM_BOOL,     GM_INT8,    GM_INT16,   GM_INT32,     GM_INT64,
                            GM_UINT8,    GM_UINT16,  GM_UINT32,  GM_UINT64,    GM_FLOAT16,
                            GM_BFLOAT16, GM_FLOAT32, GM_FLOAT64, GM_COMPLEX64, GM_COMPLEX128};
    char buf[GM_DTYPE_NAME_MAX];
    gm_dtype back = {0, 0, 0};

    (void)state;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        assert_ok(gm_dtype_name(all[i], buf, sizeof(buf)));
        assert_ok(gm_dtype_from_name(buf, &back));
        assert_true(gm_dtype_equal(back, all[i]));
        if (all[i].code == GM_DTYPE_BFLOAT) {
            assert_status(gm_dtype_typestr(all[i], buf, sizeof(buf)), GM_ERR_DTYPE);
            continue;
        }
        assert_ok(gm_dtype_typestr(all[i], buf, sizeof(buf)));
        assert_ok(gm_dtype_from_name(buf, &back));
        assert_true(gm_dtype_equal(back, all[i]));
    }
    assert_ok(gm_dtype_typestr(GM_FLOAT32, buf, sizeof(buf)));
    assert_string_equal(buf, "<f4");
    assert_ok(gm_dtype_typestr(GM_BOOL, buf, sizeof(buf)));
    assert_string_equal(buf, "|b1");
    assert_ok(gm_dtype_typestr(GM_COMPLEX128, buf, sizeof(buf)));
    assert_string_equal(buf, "<c16");
    assert_ok(gm_dtype_name((gm_dtype){GM_DTYPE_FLOAT, 32, 4}, buf, sizeof(buf)));
    assert_string_equal(buf, "float32x4");
}

/* gm_dtype_is_valid (a switch) agrees with the name table for every code and width. */
static void test_validity_matches_names(void **state)
{
    char buf[GM_DTYPE_NAME_MAX];
    int valid = 0;

    (void)state;
    for (unsigned code = 0; code < 16; code++) {
        for (unsigned bits = 0; bits < 256; bits++) {
            gm_dtype d = {(uint8_t)code, (uint8_t)bits, 1};
            bool named = gm_dtype_name(d, buf, sizeof(buf)) == GM_OK;

            assert_int_equal(gm_dtype_is_valid(d), named);
            valid += named;
        }
    }
    assert_int_equal(valid, 15);
}

static void test_name_buffer_errors(void **state)
{
    char small[4] = "zzz";

    (void)state;
    assert_status(gm_dtype_name(GM_FLOAT32, small, sizeof(small)), GM_ERR_INVALID_ARG);
    assert_string_equal(small, "");
    assert_message_contains("too small");
    assert_status(gm_dtype_name(GM_FLOAT32, NULL, 8), GM_ERR_NULL_POINTER);
    assert_status(gm_dtype_name((gm_dtype){9, 32, 1}, small, sizeof(small)), GM_ERR_DTYPE);
    assert_status(gm_dtype_typestr((gm_dtype){GM_DTYPE_FLOAT, 32, 2}, small, sizeof(small)),
                  GM_ERR_DTYPE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_parse),        cmocka_unit_test(test_bad_names_rejected),
        cmocka_unit_test(test_itemsize_and_codes), cmocka_unit_test(test_names_round_trip),
        cmocka_unit_test(test_name_buffer_errors), cmocka_unit_test(test_validity_matches_names),
    };
    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
