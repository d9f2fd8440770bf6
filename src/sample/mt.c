/*
 * mt.c - MT19937 and libstdc++'s uniform double over it (see mt.h).
 */
#include "mt.h"

enum { MT_M = 397 };

void mt_seed(mt19937 *mt, uint32_t seed)
{
    mt->s[0] = seed;
    for (uint32_t i = 1; i < MT_N; i++)
        mt->s[i] = 1812433253u * (mt->s[i - 1] ^ (mt->s[i - 1] >> 30)) + i;
    mt->i = MT_N;
}

/* Regenerates all 624 words; each takes the top bit of one word and the low
 * 31 of the next, so words already rewritten feed the last 397. */
static void twist(mt19937 *mt)
{
    for (int i = 0; i < MT_N; i++) {
        uint32_t y = (mt->s[i] & 0x80000000u) | (mt->s[(i + 1) % MT_N] & 0x7fffffffu);
        mt->s[i] = mt->s[(i + MT_M) % MT_N] ^ (y >> 1) ^ (y & 1 ? 0x9908b0dfu : 0);
    }
    mt->i = 0;
}

uint32_t mt_next(mt19937 *mt)
{
    if (mt->i >= MT_N) twist(mt);
    uint32_t y = mt->s[mt->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

double mt_uniform(mt19937 *mt)
{
    /* Both halves are exact in a double and so is the scaling; the one
     * rounding is the sum's, which is libstdc++'s. */
    double lo = mt_next(mt);
    double hi = mt_next(mt);
    double u = (lo + hi * 0x1.0p32) * 0x1.0p-64;
    return u < 1.0 ? u : 0x1.fffffffffffffp-1;
}
