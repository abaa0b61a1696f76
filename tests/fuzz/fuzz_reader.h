/*
 * The fuzz targets' input reader: bytes taken from the front of libFuzzer's
 * input; reads past the end give zeros, so every input decodes.
 */
#ifndef GPUMEM_TESTS_FUZZ_READER_H
#define GPUMEM_TESTS_FUZZ_READER_H

#include <stddef.h>
#include <stdint.h>

/* The bytes not consumed yet. */
typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static inline uint8_t take_u8(reader *r)
{
    uint8_t v = 0;

    if (r->n > 0) {
        v = *r->p++;
        r->n--;
    }
    return v;
}

/* Eight bytes, big-endian. */
static inline uint64_t take_u64(reader *r)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | take_u8(r);
    return v;
}

#endif /* GPUMEM_TESTS_FUZZ_READER_H */
