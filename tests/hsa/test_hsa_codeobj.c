/*
 * AMDGPU code-object parsing without a runtime: offload-bundle selection by
 * ISA, NT_AMDGPU_METADATA (MessagePack) argument layouts for code objects v4
 * and v5, and robustness against truncated or corrupted images.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gm_test_file.h"
#include "gm_test.h"
#include "hsa_codeobj.h"

static const char isa[] = "amdgcn-amd-amdhsa--gfx906:sramecc+:xnack-";

/* The code object an environment variable names; skip the test when it was not built. */
static void *fixture_or_skip(const char *env, size_t *bytes)
{
    void *data = gm_test_read_file(getenv(env), bytes);

    if (data == NULL)
        skip();
    return data;
}

static void test_v5_layout(void **state)
{
    size_t bytes = 0;
    void *image = fixture_or_skip("GM_TEST_HSACO_V5", &bytes);
    gm__hsa_codeobj_meta meta;
    const gm__hsa_kernel_meta *k = NULL;
    static const uint32_t offsets[4] = {0, 8, 16, 24}, sizes[4] = {4, 8, 8, 4};

    (void)state;
    assert_ok(gm__hsa_codeobj_parse(image, bytes, &meta));
    assert_int_equal(meta.abi_version, 5);
    assert_string_equal(meta.target, "amdgcn-amd-amdhsa--gfx906");
    assert_int_equal(meta.nkernels, 1);
    k = gm__hsa_codeobj_find(&meta, "axpy");
    assert_ptr_equal(k, gm__hsa_codeobj_find(&meta, "axpy.kd"));
    assert_null(gm__hsa_codeobj_find(&meta, "other"));
    assert_string_equal(k->symbol, "axpy.kd");
    assert_int_equal(k->nexplicit, 4);
    assert_int_equal(k->kernarg_size, 288);
    assert_int_equal(k->group_fixed, 1024);
    assert_int_equal(k->max_flat_workgroup_size, 256);
    assert_int_equal(k->wavefront_size, 64);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(k->args[i].offset, offsets[i]);
        assert_int_equal(k->args[i].size, sizes[i]);
        assert_true(GM_HSA_ARG_IS_EXPLICIT(k->args[i].kind));
    }
    assert_int_equal(k->args[1].kind, GM_HSA_ARG_GLOBAL_BUFFER);
    assert_int_equal(k->args[4].kind, GM_HSA_ARG_HIDDEN_BLOCK_COUNT_X);
    assert_int_equal(k->args[4].offset, 32);
    assert_int_equal(k->args[7].kind, GM_HSA_ARG_HIDDEN_GROUP_SIZE_X);
    assert_int_equal(k->args[7].size, 2);
    gm__hsa_codeobj_meta_free(&meta);
    free(image);
}

static void test_v4_layout(void **state)
{
    size_t bytes = 0;
    void *image = fixture_or_skip("GM_TEST_HSACO_V4", &bytes);
    gm__hsa_codeobj_meta meta;

    (void)state;
    assert_ok(gm__hsa_codeobj_parse(image, bytes, &meta));
    assert_int_equal(meta.abi_version, 4);
    assert_int_equal(meta.kernels[0].nargs, 4);
    assert_int_equal(meta.kernels[0].kernarg_size, 28);
    gm__hsa_codeobj_meta_free(&meta);
    free(image);
}

/* Every truncation and many corruptions parse or fail cleanly (ASan watches). */
static void test_corrupted(void **state)
{
    size_t bytes = 0;
    unsigned char *image = fixture_or_skip("GM_TEST_HSACO_V5", &bytes);
    unsigned char *copy = malloc(bytes);
    gm__hsa_codeobj_meta meta;
    uint32_t seed = 12345;

    (void)state;
    for (size_t cut = 0; cut < bytes; cut += cut < 4096 ? 1 : 97) {
        unsigned char *part = malloc(cut > 0 ? cut : 1);

        memcpy(part, image, cut);
        if (gm__hsa_codeobj_parse(part, cut, &meta) == GM_OK)
            gm__hsa_codeobj_meta_free(&meta);
        free(part);
    }
    for (int round = 0; round < 3000; round++) {
        memcpy(copy, image, bytes);
        for (int flips = 0; flips < 4; flips++) {
            seed = seed * 1103515245u + 12345u;
            copy[0x200 + (seed >> 8) % 0x2ac] ^= (unsigned char)(seed >> 3); /* the note */
        }
        if (gm__hsa_codeobj_parse(copy, bytes, &meta) == GM_OK)
            gm__hsa_codeobj_meta_free(&meta);
    }
    free(copy);
    free(image);
}

static void test_select(void **state)
{
    static const unsigned char elf[64] = {0x7f, 'E', 'L', 'F'};
    static const char junk[] = "junk";
    const void *out = NULL;
    size_t out_bytes = 0;

    (void)state;
    assert_ok(gm__hsa_codeobj_select(elf, sizeof(elf), isa, &out, &out_bytes));
    assert_ptr_equal(out, elf);
    assert_status(gm__hsa_codeobj_select(junk, sizeof(junk), isa, &out, &out_bytes),
                  GM_ERR_INVALID_ARG);
    assert_status(gm__hsa_codeobj_select(NULL, 0, isa, &out, &out_bytes), GM_ERR_INVALID_ARG);
    assert_status(gm__hsa_codeobj_parse(elf, sizeof(elf), &(gm__hsa_codeobj_meta){0}),
                  GM_ERR_INVALID_ARG); /* an ELF, but not AMDGPU */
}

/* Build a one-entry bundle around a fake ELF and try target ids against the ISA. */
static gm_status try_bundle(const char *id)
{
    unsigned char b[256];
    size_t idlen = strlen(id);
    uint64_t v = 0;
    const void *out = NULL;
    size_t out_bytes = 0;

    memset(b, 0, sizeof(b));
    memcpy(b, "__CLANG_OFFLOAD_BUNDLE__", 24);
    v = 1;
    memcpy(b + 24, &v, 8);
    v = 32 + 24 + idlen;
    memcpy(b + 32, &v, 8); /* offset */
    v = 16;
    memcpy(b + 40, &v, 8); /* size */
    v = idlen;
    memcpy(b + 48, &v, 8);
    memcpy(b + 56, id, idlen);
    memcpy(b + 56 + idlen, "\177ELF", 4);
    return gm__hsa_codeobj_select(b, 56 + idlen + 16, isa, &out, &out_bytes);
}

static void test_bundle_targets(void **state)
{
    (void)state;
    assert_ok(try_bundle("hipv4-amdgcn-amd-amdhsa--gfx906"));
    assert_ok(try_bundle("hip-amdgcn-amd-amdhsa--gfx906:xnack-"));
    assert_ok(try_bundle("hipv4-amdgcn-amd-amdhsa--gfx906:sramecc+:xnack-"));
    assert_ok(try_bundle("hip-amdgcn-amd-amdhsa-gfx906")); /* three-part triple (old clang) */
    assert_status(try_bundle("hip-amdgcn-amd-amdhsa-gfx90a"), GM_ERR_NOT_FOUND);
    assert_status(try_bundle("hip-amdgcn-amd-amdhsa-"), GM_ERR_NOT_FOUND);
    assert_status(try_bundle("hipv4-amdgcn-amd-amdhsa--gfx906:xnack+"), GM_ERR_NOT_FOUND);
    assert_status(try_bundle("hipv4-amdgcn-amd-amdhsa--gfx90a"), GM_ERR_NOT_FOUND);
    assert_status(try_bundle("hipv4-amdgcn-amd-amdhsa--gfx90"), GM_ERR_NOT_FOUND);
    assert_status(try_bundle("host-x86_64-unknown-linux-gnu"), GM_ERR_NOT_FOUND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v5_layout),      cmocka_unit_test(test_v4_layout),
        cmocka_unit_test(test_corrupted),      cmocka_unit_test(test_select),
        cmocka_unit_test(test_bundle_targets),
    };

    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
