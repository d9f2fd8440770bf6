/*
 * test_pretok.c - the BPE pre-tokenizers' splitting, below the tokenizer's
 * public interface (tok_impl.h), where a split can be seen word by word.
 *
 *   1. gpt-4o: every case of tests/data/pretok/gpt-4o.txt, where the regex
 *      module ran the reference engine's pattern (tests/pretok/oracle.py):
 *      the reference's tokenizer test inputs, hostile Unicode (case outside
 *      ASCII, combining marks, other scripts, CR/LF runs, digit runs,
 *      contractions in all cases, invalid UTF-8) and seeded random texts;
 *   2. every pre-tokenizer on random code points and random bytes: words
 *      are non-empty and cover the text exactly (no crash, no overrun).
 */
#include "../src/tokenizer/tok_impl.h"
#include "test.h"

#include <stdint.h>

#define DATA "tests/data/pretok/gpt-4o.txt"

/* Decodes bytes to code points as the tokenizer does; returns the count. */
static size_t decode(const unsigned char *b, size_t n, uint32_t *cpt)
{
    size_t k = 0;
    for (size_t off = 0, adv; off < n; off += adv) cpt[k++] = tok_utf8_decode(b + off, n - off, &adv);
    return k;
}

static int hex_val(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* One line "HEX\tL1 L2 ...": checks the split; returns false when it differs. */
static bool check_case(const char *line, size_t *n_shown)
{
    enum { MAX = 4096 };
    static unsigned char bytes[MAX];
    static uint32_t cpt[MAX], lens[MAX], tmp[MAX];
    size_t nb = 0;
    const char *p = line;
    for (; hex_val(p[0]) >= 0 && hex_val(p[1]) >= 0 && nb < MAX; p += 2)
        bytes[nb++] = (unsigned char)(hex_val(p[0]) << 4 | hex_val(p[1]));
    CHECK(*p == '\t');
    size_t n = decode(bytes, nb, cpt);
    size_t k = tok_pretok_split(TOK_PRE_GPT4O, cpt, n, lens, tmp);
    char got[4 * MAX] = "";
    size_t at = 0;
    for (size_t i = 0; i < k && at + 16 < sizeof got; i++)
        at += (size_t)snprintf(got + at, sizeof got - at, i ? " %u" : "%u", lens[i]);
    const char *want = p + 1;
    size_t want_len = strcspn(want, "\n");
    bool same = want_len == at && memcmp(want, got, at) == 0;
    if (!same && (*n_shown)++ < 10)
        printf("  %.*s: want [%.*s] got [%s]\n", (int)MIN((size_t)(p - line), 80), line, (int)want_len, want, got);
    return same;
}

static void test_gpt4o_oracle(void)
{
    FILE *f = fopen(DATA, "r");
    CHECK(f != NULL);
    if (!f) return;
    static char line[1 << 16];
    size_t n = 0, n_bad = 0, n_shown = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        n++;
        n_bad += !check_case(line, &n_shown);
    }
    fclose(f);
    printf("gpt-4o: %zu of %zu cases split as the oracle does\n", n - n_bad, n);
    CHECK(n > 800);
    CHECK_EQ_INT(n_bad, 0);
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 0x2545f4914f6cdd1dull) >> 32);
}

/* A code point from a mix weighted towards the classes the scanners test. */
static uint32_t random_cpt(void)
{
    static const uint32_t some[] = {' ', '\t', '\r', '\n', '\'', '/', '0', '9', 'a', 's', 'A', 'S', 'l', 'L',
                                    0x0B, 0x1C, 0x85, 0xA0, 0x301, 0x3000, 0x2028, 0xE9, 0xC9, 0x4E2D,
                                    0x1F999, 0xFFFD, 0xD800, 0x10FFFF, 0x660, 0xB2};
    uint32_t r = rnd();
    return r % 4 ? some[(r >> 8) % ARRAY_LEN(some)] : (r >> 8) % 0x110000;
}

static bool covers(const uint32_t *lens, size_t k, size_t n)
{
    size_t sum = 0;
    for (size_t i = 0; i < k; i++) {
        if (lens[i] == 0) return false;
        sum += lens[i];
    }
    return sum == n && (n == 0 || k > 0);
}

static void test_all_cover(void)
{
    enum { MAX = 64 };
    uint32_t cpt[MAX], lens[MAX], tmp[MAX];
    unsigned char b[MAX];
    size_t n_bad = 0;
    for (int round = 0; round < 20000; round++) {
        size_t n = rnd() % MAX;
        if (round % 2) {
            for (size_t i = 0; i < n; i++) cpt[i] = random_cpt();
        } else {
            for (size_t i = 0; i < n; i++) b[i] = (unsigned char)rnd();
            n = decode(b, n, cpt);
        }
        for (int pre = TOK_PRE_NONE; pre <= TOK_PRE_GPT4O; pre++)
            n_bad += !covers(lens, tok_pretok_split((tok_pre)pre, cpt, n, lens, tmp), n);
    }
    CHECK_EQ_INT(n_bad, 0);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_gpt4o_oracle);
    TEST_RUN(test_all_cover);
    return test_finish();
}
