/*
 * test_rng.h - deterministic test inputs for the quantization tests
 * (test_kquant.c, test_lowbit.c): an integer PRNG (xorshift64*, no libm,
 * so the same bits everywhere), uniform floats that are exact multiples of
 * 2^-24, and an Irwin-Hall(4) approximation of a unit normal.  The file
 * that includes it defines TEST_RNG_SEED first: each keeps its own
 * sequence.
 */
#ifndef TEST_RNG_H
#define TEST_RNG_H

#include <stdint.h>

#ifndef TEST_RNG_SEED
#error "define TEST_RNG_SEED before including test_rng.h"
#endif

static uint64_t rng = TEST_RNG_SEED;

static uint32_t next_u32(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 0x2545f4914f6cdd1dull) >> 32);
}

static float uniform(void)   /* [0, 1) */
{
    return (float)(next_u32() >> 8) * (1.0f / 16777216.0f);
}

static float gaussish(void)  /* Irwin-Hall(4), unit variance */
{
    return (uniform() + uniform() + uniform() + uniform() - 2.0f) * 1.7320508f;
}

#endif
