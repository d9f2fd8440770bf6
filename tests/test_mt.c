/* test_mt.c - MT19937 and the uniform double (src/sample/mt.h): the
 * standard's reference values, hand-computed draws including the clamp
 * below 1, and, where g++ is installed, the C++ library's own stream
 * (tests/ref_cpp/mt_ref.cpp) output for output. */
#include "../src/common/pk.h"
#include "../src/sample/mt.h"
#include "test.h"

#include <stdint.h>

/* The C++ standard ([rand.predef]) fixes the 10000th output of a
 * default-constructed mt19937 (seed 5489); the first ones are the
 * reference implementation's (mt19937ar.c, init_genrand(5489)). */
static void test_reference_values(void)
{
    mt19937 mt;
    mt_seed(&mt, 5489);
    CHECK_EQ_INT(mt_next(&mt), 3499211612u);
    CHECK_EQ_INT(mt_next(&mt), 581869302u);
    CHECK_EQ_INT(mt_next(&mt), 3890346734u);
    uint32_t x = 0;
    for (int i = 3; i < 10000; i++) x = mt_next(&mt);
    CHECK_EQ_INT(x, 4123659995u);

    mt_seed(&mt, 42);                        /* std::mt19937(42)() */
    CHECK_EQ_INT(mt_next(&mt), 1608637542u);
}

/* Inverts the output tempering, to place chosen outputs in the state. */
static uint32_t untemper(uint32_t y)
{
    y ^= y >> 18;
    y ^= (y << 15) & 0xefc60000u;
    uint32_t x = y;
    for (int i = 0; i < 5; i++) x = y ^ ((x << 7) & 0x9d2c5680u);
    y = x;
    x = y;
    for (int i = 0; i < 3; i++) x = y ^ (x >> 11);
    return x;
}

/* Makes the next two outputs g1, g2 (no twist before them). */
static void force(mt19937 *mt, uint32_t g1, uint32_t g2)
{
    mt_seed(mt, 1);
    mt_next(mt);                             /* twist once: i = 1 */
    mt->s[mt->i] = untemper(g1);
    mt->s[mt->i + 1] = untemper(g2);
}

static void test_uniform(void)
{
    mt19937 mt;
    /* (g1 + g2 * 2^32) / 2^64 with the first output the low half. */
    mt_seed(&mt, 5489);
    double want = (3499211612.0 + 581869302.0 * 4294967296.0) / 18446744073709551616.0;
    CHECK(mt_uniform(&mt) == want);

    force(&mt, 7, 0);
    CHECK(mt_uniform(&mt) == 7.0 * 0x1.0p-64);
    force(&mt, 0, 1);
    CHECK(mt_uniform(&mt) == 0x1.0p-32);
    force(&mt, 0, 0);
    CHECK(mt_uniform(&mt) == 0.0);
    /* The sum rounds to 53 bits: 2^64 - 1 rounds to 2^64, a 1 that is
     * clamped to the double below it; 2^64 - 2^11 is the largest exact. */
    force(&mt, 0xffffffffu, 0xffffffffu);
    CHECK(mt_uniform(&mt) == 0x1.fffffffffffffp-1);
    force(&mt, 0xfffff800u, 0xffffffffu);
    CHECK(mt_uniform(&mt) == 0x1.fffffffffffffp-1);
    force(&mt, 0xfffffbffu, 0xffffffffu);    /* rounds down to 2^64 - 2^11 */
    CHECK(mt_uniform(&mt) == 0x1.fffffffffffffp-1);
    force(&mt, 0xfffff3ffu, 0xffffffffu);    /* rounds to 2^64 - 2^12 */
    CHECK(mt_uniform(&mt) == 0x1.ffffffffffffep-1);
    /* Exactly two outputs per draw. */
    mt19937 a, b;
    mt_seed(&a, 99);
    mt_seed(&b, 99);
    for (int i = 0; i < 700; i++) mt_uniform(&a);
    for (int i = 0; i < 1400; i++) mt_next(&b);
    CHECK_EQ_INT(mt_next(&a), mt_next(&b));
}

/* The C++ library's stream, when a compiler is here to build the helper. */
static void test_against_cpp(void)
{
    if (system("g++ --version >/dev/null 2>&1") != 0) {
        SKIP_PART("no g++: mt19937 not compared with the C++ library");
        return;
    }
    char dir[] = "/tmp/pk_mt_XXXXXX", cmd[512];
    if (!mkdtemp(dir)) {
        SKIP_PART("no temporary directory");
        return;
    }
    snprintf(cmd, sizeof cmd, "g++ -O1 -o %s/mt_ref tests/ref_cpp/mt_ref.cpp", dir);
    CHECK_EQ_INT(system(cmd), 0);
    static const uint32_t seeds[] = { 0, 1, 42, 5489, 1234, 0xfffffffeu };
    snprintf(cmd, sizeof cmd, "%s/mt_ref 0 1 42 5489 1234 0xfffffffe", dir);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    int bad_raw = 0, bad_u = 0, lines = 0;
    char line[64];
    for (size_t k = 0; f && k < ARRAY_LEN(seeds); k++) {
        mt19937 raw, eng;
        mt_seed(&raw, seeds[k]);
        mt_seed(&eng, seeds[k]);
        for (int i = 0; i < 1000 && fgets(line, sizeof line, f); i++, lines++)
            bad_raw += strtoul(line, NULL, 10) != mt_next(&raw);
        for (int i = 0; i < 1000 && fgets(line, sizeof line, f); i++, lines++) {
            double want = strtod(line, NULL), got = mt_uniform(&eng);
            if (want != got && bad_u++ < 3)
                fprintf(stderr, "seed %u draw %d: %a, C++ %a\n", (unsigned)seeds[k], i, got, want);
        }
    }
    if (f) CHECK_EQ_INT(pclose(f), 0);
    CHECK_EQ_INT(lines, 2000 * (int)ARRAY_LEN(seeds));
    CHECK_EQ_INT(bad_raw, 0);
    CHECK_EQ_INT(bad_u, 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_reference_values);
    TEST_RUN(test_uniform);
    TEST_RUN(test_against_cpp);
    return test_finish();
}
