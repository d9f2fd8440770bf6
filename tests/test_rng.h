/*
 * test_rng.h - deterministic test inputs for the quantization tests
 * (test_kquant.c, test_lowbit.c) and the random grammar walks of
 * test_tools_families.c: an integer PRNG (xorshift64*, no libm,
 * so the same bits everywhere), uniform floats that are exact multiples of
 * 2^-24, and an Irwin-Hall(4) approximation of a unit normal.  The file
 * that includes it defines TEST_RNG_SEED first: each keeps its own
 * sequence.
 */
#ifndef TEST_RNG_H
#define TEST_RNG_H

#include "../src/tensor/tq.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef TEST_RNG_SEED
#error "define TEST_RNG_SEED before including test_rng.h"
#endif

static uint64_t rng = TEST_RNG_SEED;

static inline uint32_t next_u32(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 0x2545f4914f6cdd1dull) >> 32);
}

static inline float uniform(void)   /* [0, 1) */
{
    return (float)(next_u32() >> 8) * (1.0f / 16777216.0f);
}

static inline float gaussish(void)  /* Irwin-Hall(4), unit variance */
{
    return (uniform() + uniform() + uniform() + uniform() - 2.0f) * 1.7320508f;
}

/* Sets the f16 scale of a block of `type` to d: IQ1_M keeps it in the top
 * nibbles of its 4 scale words, the other formats at the start. */
static inline void set_block_scale(tq_type type, void *blk, float d)
{
    tq_f16 h = tq_f32_to_f16(d);
    if (type != TQ_IQ1_M) {
        memcpy(blk, &h, sizeof h);
        return;
    }
    uint8_t *sc = (uint8_t *)blk + offsetof(tq_block_iq1_m, scales);
    for (int k = 0; k < 4; k++) sc[2 * k + 1] = (uint8_t)((sc[2 * k + 1] & 0x0f) | ((h >> (4 * k)) & 15) << 4);
}

/* A block of `type` of random bytes (any bit pattern is a valid block of
 * the formats without a quantizer, tq.h) with its f16 scale set to d. */
static inline void random_scaled_block(tq_type type, void *blk, float d)
{
    uint8_t *p = blk;
    for (size_t i = 0; i < tq_get(type)->type_size; i++) p[i] = (uint8_t)next_u32();
    set_block_scale(type, blk, d);
}

#endif
