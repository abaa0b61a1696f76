/*
 * AMDGPU code objects: offload-bundle selection, ELF note lookup and a small
 * MessagePack reader for the NT_AMDGPU_METADATA note. See hsa_codeobj.h.
 */
#include <elf.h>
#include <string.h>

#include "hsa_codeobj.h"

#ifndef EM_AMDGPU
#define EM_AMDGPU 224
#endif
#define GM_AMDGPU_OSABI_HSA   64 /* ELFOSABI_AMDGPU_HSA */
#define GM_NT_AMDGPU_METADATA 32 /* note type of the MessagePack metadata */
#define GM_BUNDLE_MAGIC       "__CLANG_OFFLOAD_BUNDLE__"
#define GM_MSGPACK_MAX_DEPTH  32

/* ------------------------------------------------------------- bundles */

/* Read a little-endian uint64 at p + off if it lies inside [p, p + bytes). */
static int read_u64(const unsigned char *p, size_t bytes, uint64_t off, uint64_t *out)
{
    if (off > bytes || bytes - off < 8)
        return -1;
    memcpy(out, p + off, 8);
    return 0;
}

/*
 * Whether the target id after the triple ("gfx906:xnack-") fits the ISA
 * name: same processor, and every feature of the id that the ISA mentions has
 * the same sign there.
 */
static int target_matches(const char *id, size_t id_len, const char *isa_name)
{
    const char *isa_target = strstr(isa_name, "--");
    size_t proc_len = 0;

    if (isa_target == NULL)
        return 0;
    isa_target += 2;
    while (proc_len < id_len && id[proc_len] != ':')
        proc_len++;
    if (strncmp(isa_target, id, proc_len) != 0 ||
        (isa_target[proc_len] != '\0' && isa_target[proc_len] != ':'))
        return 0;
    for (size_t i = proc_len; i < id_len;) {
        size_t j = i + 1;
        char feature[64];
        const char *hit = NULL;

        while (j < id_len && id[j] != ':')
            j++;
        if (j - i - 1 < 2 || j - i - 1 >= sizeof(feature))
            return 0;
        memcpy(feature, id + i + 1, j - i - 2); /* without its +/- sign */
        feature[j - i - 2] = '\0';
        hit = strstr(isa_target, feature);
        if (hit != NULL && hit[strlen(feature)] != id[j - 1])
            return 0;
        i = j;
    }
    return 1;
}

/*
 * Whether a bundle entry id is for this ISA: "<kind>-<triple>-<target id>"
 * with a four-part triple whose environment is empty
 * ("hipv4-amdgcn-amd-amdhsa--gfx906", clang 13 on) or a three-part one
 * ("hip-amdgcn-amd-amdhsa-gfx906", older clang, ROCm 4 code object v2/v3).
 */
static int bundle_entry_matches(const char *id, size_t id_len, const char *isa_name)
{
    static const char triple[] = "amdgcn-amd-amdhsa-";
    const char *at = NULL;
    size_t skip = 0;

    for (size_t i = 0; i + sizeof(triple) - 1 <= id_len && at == NULL; i++) {
        if (memcmp(id + i, triple, sizeof(triple) - 1) == 0)
            at = id + i;
    }
    if (at == NULL)
        return 0;
    skip = (size_t)(at - id) + sizeof(triple) - 1;
    if (skip < id_len && id[skip] == '-') /* the empty environment of a four-part triple */
        skip++;
    if (skip >= id_len)
        return 0;
    return target_matches(id + skip, id_len - skip, isa_name);
}

/* Walk a clang offload bundle and return the entry for isa_name. */
static gm_status select_bundle_entry(const unsigned char *p, size_t bytes, const char *isa_name,
                                     const void **elf_p, size_t *elf_bytes_p)
{
    uint64_t count = 0, at = sizeof(GM_BUNDLE_MAGIC) - 1;

    if (read_u64(p, bytes, at, &count) != 0 || count > 4096)
        return gm__error(GM_ERR_INVALID_ARG, "module_load: truncated offload bundle header");
    at += 8;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t off = 0, size = 0, id_len = 0;

        if (read_u64(p, bytes, at, &off) != 0 || read_u64(p, bytes, at + 8, &size) != 0 ||
            read_u64(p, bytes, at + 16, &id_len) != 0 || id_len > bytes - (at + 24) ||
            off > bytes || size > bytes - off)
            return gm__error(GM_ERR_INVALID_ARG,
                             "module_load: offload bundle entry %llu is "
                             "out of bounds",
                             (unsigned long long)i);
        if (bundle_entry_matches((const char *)p + at + 24, (size_t)id_len, isa_name) != 0) {
            *elf_p = p + off;
            *elf_bytes_p = (size_t)size;
            return GM_OK;
        }
        at += 24 + id_len;
    }
    return gm__error(GM_ERR_NOT_FOUND,
                     "module_load: the offload bundle has no code object "
                     "for %s",
                     isa_name);
}

gm_status gm__hsa_codeobj_select(const void *image, size_t bytes, const char *isa_name,
                                 const void **elf_p, size_t *elf_bytes_p)
{
    const unsigned char *p = image;

    if (image == NULL || bytes < SELFMAG)
        return gm__error(GM_ERR_INVALID_ARG, "module_load: empty or truncated image");
    if (memcmp(p, ELFMAG, SELFMAG) == 0) {
        *elf_p = image;
        *elf_bytes_p = bytes;
        return GM_OK;
    }
    if (bytes >= sizeof(GM_BUNDLE_MAGIC) - 1 &&
        memcmp(p, GM_BUNDLE_MAGIC, sizeof(GM_BUNDLE_MAGIC) - 1) == 0)
        return select_bundle_entry(p, bytes, isa_name, elf_p, elf_bytes_p);
    return gm__error(GM_ERR_INVALID_ARG,
                     "module_load: not an AMDGPU code object (neither ELF nor offload bundle)");
}

/* ----------------------------------------------------------- MessagePack */

typedef struct mp_reader {
    const unsigned char *p, *end;
    int bad; /* set on malformed input; every read then fails */
} mp_reader;

/* Read an n-byte big-endian unsigned integer. */
static uint64_t mp_take(mp_reader *r, size_t n)
{
    uint64_t v = 0;

    if (r->bad != 0 || (size_t)(r->end - r->p) < n) {
        r->bad = 1;
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        v = (v << 8) | r->p[i];
    r->p += n;
    return v;
}

/* Skip a type byte, then read the n-byte length or value that follows it. */
static uint64_t mp_tagged(mp_reader *r, size_t n)
{
    mp_take(r, 1);
    return mp_take(r, n);
}

static unsigned mp_peek(mp_reader *r)
{
    if (r->bad != 0 || r->p >= r->end) {
        r->bad = 1;
        return 0xc1; /* "never used" */
    }
    return r->p[0];
}

/* A map header: its pair count; -1 if the next value is not a map. */
static int64_t mp_map(mp_reader *r)
{
    unsigned b = mp_peek(r);

    if (b >= 0x80 && b <= 0x8f)
        return (int64_t)(mp_take(r, 1) & 0x0f);
    if (b == 0xde)
        return (int64_t)mp_tagged(r, 2);
    if (b == 0xdf)
        return (int64_t)mp_tagged(r, 4);
    return -1;
}

static int64_t mp_array(mp_reader *r)
{
    unsigned b = mp_peek(r);

    if (b >= 0x90 && b <= 0x9f)
        return (int64_t)(mp_take(r, 1) & 0x0f);
    if (b == 0xdc)
        return (int64_t)mp_tagged(r, 2);
    if (b == 0xdd)
        return (int64_t)mp_tagged(r, 4);
    return -1;
}

/* A string: pointer into the input and its length; 0 if not a string. */
static int mp_str(mp_reader *r, const char **s, size_t *len)
{
    unsigned b = mp_peek(r);
    uint64_t n = 0;

    if (b >= 0xa0 && b <= 0xbf)
        n = mp_take(r, 1) & 0x1f;
    else if (b >= 0xd9 && b <= 0xdb)
        n = mp_tagged(r, (size_t)1 << (b - 0xd9));
    else
        return 0;
    if (r->bad != 0 || (uint64_t)(r->end - r->p) < n) {
        r->bad = 1;
        return 0;
    }
    *s = (const char *)r->p;
    *len = (size_t)n;
    r->p += n;
    return 1;
}

/* A non-negative integer; 0 (and bad set) if the value is something else. */
static uint64_t mp_uint(mp_reader *r)
{
    unsigned b = mp_peek(r);

    if (b <= 0x7f)
        return mp_take(r, 1);
    if (b >= 0xcc && b <= 0xcf)
        return mp_tagged(r, (size_t)1 << (b - 0xcc));
    if (b >= 0xd0 && b <= 0xd3) { /* signed forms holding a non-negative value */
        size_t n = (size_t)1 << (b - 0xd0);
        uint64_t v = mp_tagged(r, n);

        if ((v >> (n * 8 - 1)) == 0)
            return v;
    }
    r->bad = 1;
    return 0;
}

/* Skip one value of any type (depth-limited). */
static void mp_skip(mp_reader *r, int depth)
{
    unsigned b = mp_peek(r);
    int64_t n = 0;
    const char *s = NULL;
    size_t len = 0;

    if (depth > GM_MSGPACK_MAX_DEPTH) {
        r->bad = 1;
        return;
    }
    if ((n = mp_map(r)) >= 0) {
        for (int64_t i = 0; i < 2 * n && r->bad == 0; i++)
            mp_skip(r, depth + 1);
    } else if ((n = mp_array(r)) >= 0) {
        for (int64_t i = 0; i < n && r->bad == 0; i++)
            mp_skip(r, depth + 1);
    } else if (mp_str(r, &s, &len) != 0) {
        return;
    } else if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        mp_take(r, 1);
    } else if (b >= 0xc4 && b <= 0xc6) { /* bin 8/16/32 */
        uint64_t blen = mp_tagged(r, (size_t)1 << (b - 0xc4));

        if (r->bad == 0 && (uint64_t)(r->end - r->p) >= blen)
            r->p += blen;
        else
            r->bad = 1;
    } else if (b == 0xca || b == 0xcb) {
        mp_tagged(r, b == 0xca ? 4 : 8);
    } else if (b >= 0xcc && b <= 0xd3) {
        mp_tagged(r, (size_t)1 << ((b - 0xcc) & 3));
    } else {
        r->bad = 1; /* ext types and 0xc1 do not occur in AMDGPU metadata */
    }
}

/* Whether the string s (len bytes) equals key. */
static int mp_key_is(const char *s, size_t len, const char *key)
{
    return strlen(key) == len && memcmp(s, key, len) == 0;
}

/* Copy a string value into a fixed buffer (truncation is an error). */
static void mp_str_copy(mp_reader *r, char *dst, size_t cap)
{
    const char *s = NULL;
    size_t len = 0;

    if (mp_str(r, &s, &len) == 0 || len >= cap) {
        r->bad = 1;
        return;
    }
    memcpy(dst, s, len);
    dst[len] = '\0';
}

/* ------------------------------------------------------------- metadata */

const char *gm__hsa_arg_kind_name(gm__hsa_arg_kind kind)
{
    static const char *const names[] = {
#define GM__HSA_ARG_NAME(name, text) text,
        GM_HSA_ARG_KINDS(GM__HSA_ARG_NAME)
#undef GM__HSA_ARG_NAME
    };

    if ((unsigned)kind >= sizeof(names) / sizeof(names[0]))
        return "?";
    return names[kind];
}

/* The kind a .value_kind string names; unknown "hidden_*" kinds are HIDDEN_UNKNOWN. */
static gm__hsa_arg_kind arg_kind_from(const char *s, size_t len)
{
    for (int k = 0; k < GM_HSA_ARG_HIDDEN_UNKNOWN; k++) {
        if (mp_key_is(s, len, gm__hsa_arg_kind_name((gm__hsa_arg_kind)k)) != 0)
            return (gm__hsa_arg_kind)k;
    }
    if (len >= 7 && memcmp(s, "hidden_", 7) == 0)
        return GM_HSA_ARG_HIDDEN_UNKNOWN;
    return GM_HSA_ARG_BY_VALUE; /* future explicit kinds are passed like values */
}

/* One element of .args. */
static void parse_arg(mp_reader *r, gm__hsa_arg *arg)
{
    int64_t n = mp_map(r);
    int have_offset = 0, have_size = 0;

    arg->kind = GM_HSA_ARG_BY_VALUE;
    for (int64_t i = 0; i < n && r->bad == 0; i++) {
        const char *key = NULL, *s = NULL;
        size_t klen = 0, len = 0;

        if (mp_str(r, &key, &klen) == 0) {
            r->bad = 1;
        } else if (mp_key_is(key, klen, ".offset") != 0) {
            arg->offset = (uint32_t)mp_uint(r);
            have_offset = 1;
        } else if (mp_key_is(key, klen, ".size") != 0) {
            arg->size = (uint32_t)mp_uint(r);
            have_size = 1;
        } else if (mp_key_is(key, klen, ".value_kind") != 0) {
            if (mp_str(r, &s, &len) == 0)
                r->bad = 1;
            else
                arg->kind = arg_kind_from(s, len);
        } else {
            mp_skip(r, 1);
        }
    }
    if (n < 0 || have_offset == 0 || have_size == 0)
        r->bad = 1;
}

static gm_status parse_args(mp_reader *r, gm__hsa_kernel_meta *k)
{
    int64_t n = mp_array(r);

    if (n < 0 || n > 4096) {
        r->bad = 1;
        return GM_OK;
    }
    k->args = gm__calloc((size_t)(n > 0 ? n : 1), sizeof(gm__hsa_arg));
    if (k->args == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "module_load: no memory for kernel arguments");
    k->nargs = (uint32_t)n;
    for (uint32_t i = 0; i < k->nargs && r->bad == 0; i++) {
        parse_arg(r, &k->args[i]);
        if (GM_HSA_ARG_IS_EXPLICIT(k->args[i].kind))
            k->nexplicit++;
    }
    return GM_OK;
}

/* Store one numeric .key of a kernel map; 0 if the key is not numeric here. */
static int parse_kernel_number(mp_reader *r, const char *key, size_t klen, gm__hsa_kernel_meta *k)
{
    static const struct {
        const char *key;
        size_t offset;
    } fields[] = {
        {".kernarg_segment_size", offsetof(gm__hsa_kernel_meta, kernarg_size)},
        {".kernarg_segment_align", offsetof(gm__hsa_kernel_meta, kernarg_align)},
        {".group_segment_fixed_size", offsetof(gm__hsa_kernel_meta, group_fixed)},
        {".private_segment_fixed_size", offsetof(gm__hsa_kernel_meta, private_fixed)},
        {".max_flat_workgroup_size", offsetof(gm__hsa_kernel_meta, max_flat_workgroup_size)},
        {".wavefront_size", offsetof(gm__hsa_kernel_meta, wavefront_size)},
    };

    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (mp_key_is(key, klen, fields[i].key) != 0) {
            uint64_t v = mp_uint(r);
            uint32_t v32 = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;

            memcpy((char *)k + fields[i].offset, &v32, sizeof(v32));
            return 1;
        }
    }
    return 0;
}

/* One element of amdhsa.kernels. */
static gm_status parse_kernel(mp_reader *r, gm__hsa_kernel_meta *k)
{
    int64_t n = mp_map(r);
    gm_status status = GM_OK;

    for (int64_t i = 0; i < n && r->bad == 0 && status == GM_OK; i++) {
        const char *key = NULL;
        size_t klen = 0;

        if (mp_str(r, &key, &klen) == 0)
            r->bad = 1;
        else if (mp_key_is(key, klen, ".name") != 0)
            mp_str_copy(r, k->name, sizeof(k->name));
        else if (mp_key_is(key, klen, ".symbol") != 0)
            mp_str_copy(r, k->symbol, sizeof(k->symbol));
        else if (mp_key_is(key, klen, ".args") != 0 && k->args == NULL)
            status = parse_args(r, k);
        else if (parse_kernel_number(r, key, klen, k) == 0)
            mp_skip(r, 1);
    }
    if (n < 0 || k->name[0] == '\0')
        r->bad = 1;
    return status;
}

static gm_status parse_kernels(mp_reader *r, gm__hsa_codeobj_meta *meta)
{
    int64_t n = mp_array(r);
    gm_status status = GM_OK;

    if (n < 0 || n > 65536) {
        r->bad = 1;
        return GM_OK;
    }
    meta->kernels = gm__calloc((size_t)(n > 0 ? n : 1), sizeof(gm__hsa_kernel_meta));
    if (meta->kernels == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "module_load: no memory for kernel metadata");
    meta->nkernels = (size_t)n;
    for (size_t i = 0; i < meta->nkernels && r->bad == 0 && status == GM_OK; i++)
        status = parse_kernel(r, &meta->kernels[i]);
    return status;
}

/* Check that every argument lies inside its kernel's kernarg segment. */
static gm_status check_layouts(const gm__hsa_codeobj_meta *meta)
{
    for (size_t i = 0; i < meta->nkernels; i++) {
        const gm__hsa_kernel_meta *k = &meta->kernels[i];

        for (uint32_t a = 0; a < k->nargs; a++) {
            uint64_t end = (uint64_t)k->args[a].offset + k->args[a].size;

            if (end > k->kernarg_size || k->args[a].size > 8192)
                return gm__error(GM_ERR_INVALID_ARG,
                                 "module_load: kernel %s argument %u "
                                 "(offset %u, size %u) leaves its %u-byte kernarg segment",
                                 k->name, a, k->args[a].offset, k->args[a].size, k->kernarg_size);
        }
    }
    return GM_OK;
}

/* Parse the MessagePack root map of the metadata note. */
static gm_status parse_metadata(const unsigned char *p, size_t bytes, gm__hsa_codeobj_meta *meta)
{
    mp_reader r = {p, p + bytes, 0};
    int64_t n = mp_map(&r);
    gm_status status = GM_OK;

    for (int64_t i = 0; i < n && r.bad == 0 && status == GM_OK; i++) {
        const char *key = NULL;
        size_t klen = 0;

        if (mp_str(&r, &key, &klen) == 0)
            r.bad = 1;
        else if (mp_key_is(key, klen, "amdhsa.kernels") != 0 && meta->kernels == NULL)
            status = parse_kernels(&r, meta);
        else if (mp_key_is(key, klen, "amdhsa.target") != 0)
            mp_str_copy(&r, meta->target, sizeof(meta->target));
        else
            mp_skip(&r, 1);
    }
    if (status != GM_OK)
        return status;
    if (n < 0 || r.bad != 0)
        return gm__error(GM_ERR_INVALID_ARG, "module_load: malformed AMDGPU metadata note");
    return check_layouts(meta);
}

/* ------------------------------------------------------------------ ELF */

/* Look for the metadata note in [off, off + size); 1 and *desc when found. */
static int find_note(const unsigned char *p, size_t bytes, uint64_t off, uint64_t size,
                     const unsigned char **desc, size_t *desc_bytes)
{
    uint64_t end = 0;

    if (off > bytes || size > bytes - off)
        return 0;
    end = off + size;
    while (end - off >= sizeof(Elf64_Nhdr)) {
        Elf64_Nhdr nh;
        uint64_t name_pad = 0, desc_pad = 0;

        memcpy(&nh, p + off, sizeof(nh));
        name_pad = ((uint64_t)nh.n_namesz + 3) & ~(uint64_t)3;
        desc_pad = ((uint64_t)nh.n_descsz + 3) & ~(uint64_t)3;
        off += sizeof(nh);
        if (name_pad > end - off || desc_pad > end - off - name_pad ||
            nh.n_descsz > end - off - name_pad)
            return 0;
        if (nh.n_type == GM_NT_AMDGPU_METADATA && nh.n_namesz == 7 &&
            memcmp(p + off, "AMDGPU", 7) == 0) {
            *desc = p + off + name_pad;
            *desc_bytes = nh.n_descsz;
            return 1;
        }
        off += name_pad + desc_pad;
    }
    return 0;
}

/* Find the note through program headers, then section headers. */
static int find_metadata(const unsigned char *p, size_t bytes, const Elf64_Ehdr *eh,
                         const unsigned char **desc, size_t *desc_bytes)
{
    for (uint32_t i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr ph;
        uint64_t at = eh->e_phoff + (uint64_t)i * sizeof(ph);

        if (eh->e_phentsize != sizeof(ph) || at > bytes || bytes - at < sizeof(ph))
            break;
        memcpy(&ph, p + at, sizeof(ph));
        if (ph.p_type == PT_NOTE &&
            find_note(p, bytes, ph.p_offset, ph.p_filesz, desc, desc_bytes) != 0)
            return 1;
    }
    for (uint32_t i = 0; i < eh->e_shnum; i++) {
        Elf64_Shdr sh;
        uint64_t at = eh->e_shoff + (uint64_t)i * sizeof(sh);

        if (eh->e_shentsize != sizeof(sh) || at > bytes || bytes - at < sizeof(sh))
            break;
        memcpy(&sh, p + at, sizeof(sh));
        if (sh.sh_type == SHT_NOTE &&
            find_note(p, bytes, sh.sh_offset, sh.sh_size, desc, desc_bytes) != 0)
            return 1;
    }
    return 0;
}

gm_status gm__hsa_codeobj_parse(const void *elf, size_t bytes, gm__hsa_codeobj_meta *meta)
{
    const unsigned char *p = elf;
    const unsigned char *desc = NULL;
    size_t desc_bytes = 0;
    Elf64_Ehdr eh;
    gm_status status = GM_OK;

    memset(meta, 0, sizeof(*meta));
    if (elf == NULL || bytes < sizeof(eh))
        return gm__error(GM_ERR_INVALID_ARG, "module_load: truncated ELF image");
    memcpy(&eh, p, sizeof(eh));
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_machine != EM_AMDGPU)
        return gm__error(GM_ERR_INVALID_ARG,
                         "module_load: not a 64-bit little-endian AMDGPU "
                         "ELF (machine %u)",
                         (unsigned)eh.e_machine);
    if (eh.e_ident[EI_OSABI] == GM_AMDGPU_OSABI_HSA)
        meta->abi_version = (uint32_t)eh.e_ident[EI_ABIVERSION] + 2;
    if (find_metadata(p, bytes, &eh, &desc, &desc_bytes) == 0)
        return GM_OK; /* code object v2 or no kernels: launches use natural layout */
    status = parse_metadata(desc, desc_bytes, meta);
    if (status != GM_OK)
        gm__hsa_codeobj_meta_free(meta);
    return status;
}

void gm__hsa_codeobj_meta_free(gm__hsa_codeobj_meta *meta)
{
    if (meta == NULL)
        return;
    for (size_t i = 0; i < meta->nkernels; i++)
        gm__free(meta->kernels[i].args);
    gm__free(meta->kernels);
    memset(meta, 0, sizeof(*meta));
}

const gm__hsa_kernel_meta *gm__hsa_codeobj_find(const gm__hsa_codeobj_meta *meta, const char *name)
{
    for (size_t i = 0; i < meta->nkernels; i++) {
        if (strcmp(meta->kernels[i].name, name) == 0 || strcmp(meta->kernels[i].symbol, name) == 0)
            return &meta->kernels[i];
    }
    return NULL;
}
