/*
 * mt.h - the Mersenne Twister MT19937 and the uniform double that
 * libstdc++ draws from it: the random stream of the reference engine
 * (llama.cpp samples with std::mt19937 and
 * std::uniform_real_distribution<double>(0, 1)), so a seed reproduces its
 * draws.
 *
 * DESIGN: the published algorithm of Matsumoto and Nishimura (1998):
 * 624 words of state, seeded by the recurrence
 * x[i] = 1812433253 * (x[i-1] ^ (x[i-1] >> 30)) + i, regenerated in one
 * "twist" every 624 outputs, each output tempered.  mt_uniform is
 * std::generate_canonical<double, 53> over it as libstdc++ implements it:
 * two outputs, the first the low half, (g1 + g2 * 2^32) rounded to a double
 * and scaled by 2^-64; a sum that rounds up to 2^64 gives the double just
 * below 1.  So it is in [0, 1) and consumes exactly two outputs.
 *
 * Invariant: 0 <= i <= MT_N; i == MT_N means the next output twists first.
 * Threads: one owner at a time; the state is a plain value (copy it to fork
 * a stream).
 */
#ifndef MT_H
#define MT_H

#include <stdint.h>

enum { MT_N = 624 };

typedef struct mt19937 {
    uint32_t s[MT_N];
    int i;              /* next word of s to temper */
} mt19937;

/* Seeds as std::mt19937(seed) does; the default seed of the C++ engine is
 * 5489. */
void mt_seed(mt19937 *mt, uint32_t seed);

/* The next 32-bit output. */
uint32_t mt_next(mt19937 *mt);

/* Uniform in [0, 1) from two outputs, bit for bit libstdc++'s
 * uniform_real_distribution<double>(0, 1). */
double mt_uniform(mt19937 *mt);

#endif
