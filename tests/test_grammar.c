/* test_grammar.c - the grammar engine: accept/reject sets per GBNF construct,
 * parse errors with positions, partial UTF-8, token masks against a brute
 * force over a small vocabulary, a property test against an independent
 * backtracking matcher on random grammars, JSON Schema conversion checked
 * by hand-written instances (in JSON and in Gemma 4's value syntax), and
 * mask speed on a 150k-token vocabulary. */
#include "../src/grammar/gram.h"
#include "../src/gguf/gguf.h"
#include "../src/tokenizer/tok.h"
#include "test.h"

#include <jansson.h>
#include <stdint.h>
#include <time.h>

static uint64_t trng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
    trng ^= trng << 13;
    trng ^= trng >> 7;
    trng ^= trng << 17;
    return (uint32_t)((trng >> 11) % n);
}

static gram_grammar *compile(const char *src)
{
    gram_grammar *g = NULL;
    gram_error e;
    if (gram_parse(src, strlen(src), NULL, &g, &e) != PK_OK)
        fprintf(stderr, "compile failed at %d:%d: %s\n", e.line, e.col, e.msg);
    return g;
}

/* Every string in yes is accepted, every one in no rejected. */
static void check_sets(const char *src, const char *const *yes, const char *const *no)
{
    gram_grammar *g = compile(src);
    CHECK(g != NULL);
    if (!g) return;
    for (int i = 0; yes[i]; i++) {
        bool ok = gram_accepts(g, yes[i], strlen(yes[i]));
        if (!ok) fprintf(stderr, "  grammar %s\n  should accept \"%s\"\n", src, yes[i]);
        CHECK(ok);
    }
    for (int i = 0; no[i]; i++) {
        bool ok = gram_accepts(g, no[i], strlen(no[i]));
        if (ok) fprintf(stderr, "  grammar %s\n  should reject \"%s\"\n", src, no[i]);
        CHECK(!ok);
    }
    gram_free(g);
}

#define SET(...) (const char *const[]){ __VA_ARGS__, NULL }

static void test_constructs(void)
{
    check_sets("root ::= \"abc\"", SET("abc"), SET("", "ab", "abcd", "abd"));
    check_sets("root ::= \"a\" | \"bc\" | \"\"", SET("a", "bc", ""), SET("b", "abc", "aa"));
    check_sets("root ::= (\"a\" \"b\")+ \"c\"", SET("abc", "ababc"), SET("c", "abac", "ab"));
    check_sets("root ::= \"x\"? \"y\"*", SET("", "x", "xyyy", "y"), SET("xx", "yx"));
    check_sets("root ::= [a-c]{2,3}", SET("ab", "ccc", "abc"), SET("a", "abca", "ad"));
    check_sets("root ::= [a]{3}", SET("aaa"), SET("aa", "aaaa"));
    check_sets("root ::= \"a\"{2,}", SET("aa", "aaaaaaa"), SET("a", ""));
    check_sets("root ::= \"a\"{0,2} \"b\"", SET("b", "ab", "aab"), SET("aaab"));
    check_sets("root ::= [^a-z\\n]+", SET("ABC", "1-2", "\xc3\xa9"), SET("a", "Ab", "\n", ""));
    /* overlong forms and surrogates are not characters: an overlong '"'
     * must not end a string */
    check_sets("root ::= [^a]*", SET("\xf0\x9f\x98\x80", "\xed\x9f\xbf"),
               SET("\xe0\x80\xa2", "\xc0\xa2", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf0\x80\x80\xa2", "\xc3"));
    check_sets("root ::= [a-zA-Z_] [a-zA-Z0-9_]*", SET("_x1", "Q"), SET("1a", "a-b"));
    check_sets("root ::= . . .", SET("abc", "\xe2\x82\xac\xc3\xa9z"), SET("ab", "abcd"));
    check_sets("root ::= \"\\x41\\u00e9\\t\\\"\\\\\"", SET("A\xc3\xa9\t\"\\"), SET("A\xc3\xa9\t\"", "a"));
    check_sets("root ::= \"\xe6\x97\xa5\xe6\x9c\xac\"", SET("\xe6\x97\xa5\xe6\x9c\xac"), SET("\xe6\x97\xa5"));
    check_sets("root ::= [\xce\xb1-\xcf\x89]+", SET("\xce\xb1\xce\xb2", "\xcf\x89"), SET("a", "\xce\x91"));
    check_sets("# comment\nroot ::= a b  # trailing\na ::= \"a\"\nb ::= \"b\" | a", SET("ab", "aa"), SET("ba"));
    /* recursion (right and nested), not left */
    check_sets("root ::= \"(\" root \")\" | \"\"", SET("", "()", "((()))"), SET("(", "())", ")("));
    check_sets("root ::= item (\",\" item)*\nitem ::= [0-9]+ | \"[\" root \"]\"",
               SET("1", "1,22", "[1,[2]],3"), SET("", "1,", "[1", "1,,2"));
    /* repetitions of what may match nothing: (x)* is (x without "")* */
    check_sets("root ::= (\"a\"*)* \"b\"", SET("b", "ab", "aab", "aaab"), SET("", "a", "ba", "abb"));
    check_sets("root ::= (\"a\" | \"b\"*)* \"c\"", SET("c", "ac", "bbc", "abbac", "bbbaaac"), SET("", "ca", "ab", "acc"));
    check_sets("root ::= (\"a\"?)*", SET("", "a", "aaaa"), SET("b", "ab"));
    check_sets("root ::= (\"a\"? \"b\"? \"c\"? \"d\"?)* \".\"", SET(".", "abcd.", "dcba.", "bd.", "aaab."),
               SET("", "e.", "abcd", ".."));
    check_sets("root ::= (\"a\"? \"b\"?)+ \"c\"", SET("c", "abc", "bac", "aabbc"), SET("", "ab", "cc"));
    check_sets("root ::= (\"a\"*){2,} \"b\"", SET("b", "aaab"), SET("a", "ba"));
    check_sets("root ::= (\"\")* \"b\"", SET("b"), SET("", "bb"));
    check_sets("root ::= x* \"!\"\nx ::= y \"x\"? | \"\"\ny ::= \"y\"*", SET("!", "yyx!", "xx!", "yxy!"), SET("x", "z!"));
    /* a grammar whose rules span lines and whose group spans lines */
    check_sets("root ::= (\n  \"a\" |\n  \"b\"\n) \"c\"", SET("ac", "bc"), SET("c", "abc"));
}

static void check_error(const char *src, int line, int col, const char *needle)
{
    gram_grammar *g = NULL;
    gram_error e;
    pk_status st = gram_parse(src, strlen(src), NULL, &g, &e);
    CHECK_EQ_INT(st, PK_EFORMAT);
    CHECK(g == NULL);
    CHECK_EQ_INT(e.line, line);
    CHECK_EQ_INT(e.col, col);
    if (!strstr(e.msg, needle)) fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", e.msg, needle);
    CHECK(strstr(e.msg, needle) != NULL);
    gram_free(g);
}

static void test_errors(void)
{
    check_error("root ::= \"abc", 1, 10, "unterminated string");
    check_error("root ::= foo", 1, 10, "undefined rule 'foo'");
    check_error("foo ::= \"a\"", 1, 1, "no rule named 'root'");
    check_error("root ::= [a-", 1, 10, "unterminated");
    check_error("root ::= \"a\"\nx ::= x \"b\"", 2, 1, "left recursion");
    check_error("root ::= (\"a\"", 1, 10, "unclosed '('");
    check_error("root ::= \"a\"{3,2}", 1, 13, "repetition bounds");
    check_error("root ::= \"\\q\"", 1, 11, "unknown escape");
    check_error("root ::= \"a\"\nroot ::= \"b\"", 2, 1, "defined twice");
    check_error("root := \"a\"", 1, 6, "expected '::='");
    check_error("root ::= [z-a]", 1, 13, "range end below");
    check_error("root ::= a\na ::= b? a \"x\"\nb ::= \"y\"", 2, 1, "left recursion");
    /* a star of a nullable body that reaches itself first: left recursion still */
    check_error("root ::= (\"a\" | root)*", 1, 1, "left recursion");
    /* a grammar that is garbage bytes: an error, not a crash */
    check_error("\xff\xfe ::=", 1, 1, "expected a rule name");
}

/* ---- masks against brute force ---- */

typedef struct mini_vocab {
    const char *tok[32];
    int n;
    char bytes[512];
    int64_t off[33];
    bool eog[32];
} mini_vocab;

static gram_vocab *make_vocab(mini_vocab *mv)
{
    int64_t o = 0;
    for (int i = 0; i < mv->n; i++) {
        mv->off[i] = o;
        size_t l = strlen(mv->tok[i]);
        memcpy(mv->bytes + o, mv->tok[i], l);
        o += (int64_t)l;
    }
    mv->off[mv->n] = o;
    gram_vocab *v = NULL;
    CHECK_EQ_INT(gram_vocab_new(mv->n, mv->bytes, mv->off, mv->eog, &v), PK_OK);
    return v;
}

/* The mask after prefix equals "fresh matcher accepts prefix + token". */
static void check_mask(gram_grammar *g, gram_vocab *v, const mini_vocab *mv, const char *prefix)
{
    gram_matcher *m;
    CHECK_EQ_INT(gram_matcher_new(g, v, &m), PK_OK);
    CHECK_EQ_INT(gram_matcher_accept_bytes(m, prefix, strlen(prefix)), PK_OK);
    const uint64_t *mask = gram_matcher_mask(m);
    CHECK(mask != NULL);
    bool can_end = gram_matcher_can_end(m);
    for (int i = 0; i < mv->n && mask; i++) {
        bool want;
        if (mv->eog[i]) want = can_end;
        else if (!mv->tok[i][0]) want = false;
        else {
            char buf[128];
            snprintf(buf, sizeof buf, "%s%s", prefix, mv->tok[i]);
            gram_matcher *b;
            CHECK_EQ_INT(gram_matcher_new(g, NULL, &b), PK_OK);
            want = gram_matcher_accept_bytes(b, buf, strlen(buf)) == PK_OK;
            gram_matcher_free(b);
        }
        bool got = (mask[i / 64] >> (i % 64)) & 1;
        if (got != want) fprintf(stderr, "  prefix \"%s\" token %d \"%s\": mask %d, brute force %d\n",
                                 prefix, i, mv->tok[i], got, want);
        CHECK_EQ_INT(got, want);
        /* accept agrees with the mask, and a refused token leaves the state */
        pk_status st = gram_matcher_accept(m, i);
        CHECK_EQ_INT(st == PK_OK, want);
        if (st == PK_OK && !mv->eog[i]) {
            gram_matcher_free(m);
            CHECK_EQ_INT(gram_matcher_new(g, v, &m), PK_OK);
            CHECK_EQ_INT(gram_matcher_accept_bytes(m, prefix, strlen(prefix)), PK_OK);
            mask = gram_matcher_mask(m);
        }
    }
    gram_matcher_free(m);
}

static void test_masks(void)
{
    mini_vocab mv = { .tok = { "<eos>", "{", "}", "\"", "a", "ab", "abc", "\":", " ", "  ", "1", "12",
                               "\xc3", "\xa9", "\xc3\xa9", "\xe2\x82", "\xac", "\"}", "b", "", ",",
                               "\xff", "\x80" }, .n = 23 };
    mv.eog[0] = true;
    gram_vocab *v = make_vocab(&mv);
    gram_grammar *g = compile("root ::= \"{\" \" \"? \"\\\"\" [a-c\xc3\xa9\xe2\x82\xac]* \"\\\":\" [0-9]+ \"}\"");
    CHECK(g != NULL);
    const char *prefixes[] = { "", "{", "{ ", "{\"", "{\"a", "{\"\xc3", "{\"\xe2\x82", "{\"ab\":", "{\"a\":1",
                               "{\"a\":1}" };
    for (size_t i = 0; g && v && i < ARRAY_LEN(prefixes); i++) check_mask(g, v, &mv, prefixes[i]);
    /* done only after the closing brace; partial UTF-8 is never "can end" */
    gram_matcher *m;
    CHECK_EQ_INT(gram_matcher_new(g, v, &m), PK_OK);
    CHECK_EQ_INT(gram_matcher_accept_bytes(m, "{\"\xc3", 3), PK_OK);
    CHECK(!gram_matcher_can_end(m));
    CHECK_EQ_INT(gram_matcher_accept(m, 13), PK_OK);      /* "\xa9" completes é */
    CHECK_EQ_INT(gram_matcher_accept(m, 12), PK_OK);      /* a lone lead byte may start one */
    CHECK_EQ_INT(gram_matcher_accept(m, 4), PK_EINVAL);   /* "a" cannot follow a lead byte */
    CHECK_EQ_INT(gram_matcher_accept(m, 13), PK_OK);
    CHECK_EQ_INT(gram_matcher_accept_bytes(m, "\":1", 3), PK_OK);
    CHECK(!gram_matcher_done(m));
    CHECK_EQ_INT(gram_matcher_accept(m, 0), PK_EINVAL);   /* eos before the end */
    CHECK_EQ_INT(gram_matcher_accept(m, 2), PK_OK);
    CHECK(gram_matcher_done(m));
    CHECK_EQ_INT(gram_matcher_accept(m, 0), PK_OK);
    /* the same state again is a cache hit */
    gram_stats s0 = gram_matcher_stats(m);
    gram_matcher_mask(m);
    gram_matcher_mask(m);
    gram_stats s1 = gram_matcher_stats(m);
    CHECK_EQ_INT(s1.n_mask_built - s0.n_mask_built, 1);
    CHECK_EQ_INT(s1.n_mask_cached - s0.n_mask_cached, 1);
    /* reset: back at the start, warm (the first mask is a cache hit) */
    CHECK(gram_matcher_reset(m));
    CHECK(!gram_matcher_can_end(m));
    gram_matcher_mask(m);
    CHECK_EQ_INT(gram_matcher_accept_bytes(m, "{", 1), PK_OK);
    CHECK(gram_matcher_reset(m));
    gram_stats s2 = gram_matcher_stats(m);
    gram_matcher_mask(m);
    CHECK_EQ_INT(gram_matcher_stats(m).n_mask_built, s2.n_mask_built);
    CHECK_EQ_INT(gram_matcher_accept_bytes(m, "{\"a\":1}", 7), PK_OK);
    CHECK(gram_matcher_done(m));
    /* a state saved and set back undoes what was accepted since (the
     * engine runs a session's guesses ahead this way) */
    CHECK(gram_matcher_reset(m));
    CHECK_EQ_INT(gram_matcher_accept_bytes(m, "{\"ab", 4), PK_OK);
    int32_t at = gram_matcher_state(m);
    uint64_t before = gram_matcher_mask(m)[0];
    CHECK_EQ_INT(gram_matcher_accept_bytes(m, "\":12}", 5), PK_OK);
    CHECK(gram_matcher_done(m));
    gram_matcher_set_state(m, at);
    CHECK(!gram_matcher_done(m));
    CHECK_EQ_INT(gram_matcher_mask(m)[0], before);
    CHECK_EQ_INT(gram_matcher_accept(m, 10), PK_EINVAL);  /* "1" cannot follow a key's letters */
    CHECK_EQ_INT(gram_matcher_accept_bytes(m, "c\":1}", 5), PK_OK);
    CHECK(gram_matcher_done(m));
    gram_matcher_free(m);
    /* equal: same code from the same text, not from another */
    gram_grammar *g2 = compile("root ::= \"{\" \" \"? \"\\\"\" [a-c\xc3\xa9\xe2\x82\xac]* \"\\\":\" [0-9]+ \"}\"");
    gram_grammar *g3 = compile("root ::= \"{\" \" \"? \"\\\"\" [a-d]* \"\\\":\" [0-9]+ \"}\"");
    CHECK(gram_equal(g, g2));
    CHECK(!gram_equal(g, g3));
    gram_free(g2);
    gram_free(g3);
    gram_free(g);
    gram_vocab_free(v);
}

/* ---- property test: random grammars vs. a backtracking oracle ---- */

enum { N_LIT, N_CLASS, N_SEQ, N_ALT, N_REP, N_REF };
typedef struct node {
    int kind;
    char lit[4];
    char lo, hi;
    bool neg;
    int kids[4], n_kids;
    int min, max;              /* REP; max -1 unbounded */
    int rule;                  /* REF */
} node;

static node pool[4096];
static int n_pool;
static int rule_root[6], n_rules_made;

static int n_null_stars;        /* unbounded repetitions of a nullable node generated */

static bool nullable(int i)
{
    node *n = &pool[i];
    switch (n->kind) {
    case N_LIT: return !n->lit[0];
    case N_CLASS: return false;
    case N_SEQ: for (int k = 0; k < n->n_kids; k++) if (!nullable(n->kids[k])) return false; return true;
    case N_ALT: for (int k = 0; k < n->n_kids; k++) if (nullable(n->kids[k])) return true; return false;
    case N_REP: return n->min == 0 || nullable(n->kids[0]);
    default: return nullable(rule_root[n->rule]);
    }
}

static int gen_node(int depth)
{
    int i = n_pool++;
    node *n = &pool[i];
    memset(n, 0, sizeof *n);
    int k = depth > 3 ? (int)rnd(2) : (int)rnd(6);
    if (k == N_REF && n_rules_made == 0) k = N_LIT;
    n->kind = k;
    if (k == N_LIT) { int l = (int)rnd(3); for (int j = 0; j < l; j++) n->lit[j] = (char)('a' + rnd(4)); }
    else if (k == N_CLASS) { n->lo = (char)('a' + rnd(4)); n->hi = (char)(n->lo + rnd(3)); n->neg = rnd(5) == 0; }
    else if (k == N_SEQ || k == N_ALT) {
        n->n_kids = 1 + (int)rnd(3);
        for (int j = 0; j < n->n_kids; j++) { int c = gen_node(depth + 1); pool[i].kids[j] = c; }
    } else if (k == N_REP) {
        int c = gen_node(depth + 1);
        n = &pool[i];
        n->kids[0] = c;
        n->n_kids = 1;
        n->min = (int)rnd(3);
        n->max = rnd(3) == 0 ? -1 : n->min + (int)rnd(3);
        n_null_stars += n->max < 0 && nullable(c);           /* (x)* with x nullable: primed */
    } else n->rule = (int)rnd((uint32_t)n_rules_made);
    return i;
}

static void put_node(char *out, size_t cap, int i)
{
    node *n = &pool[i];
    size_t l = strlen(out);
    switch (n->kind) {
    case N_LIT: snprintf(out + l, cap - l, "\"%s\" ", n->lit); break;
    case N_CLASS: snprintf(out + l, cap - l, "[%s%c-%c] ", n->neg ? "^" : "", n->lo, n->hi); break;
    case N_SEQ: case N_ALT:
        snprintf(out + l, cap - l, "( ");
        for (int k = 0; k < n->n_kids; k++) {
            if (k && n->kind == N_ALT) { l = strlen(out); snprintf(out + l, cap - l, "| "); }
            put_node(out, cap, n->kids[k]);
        }
        l = strlen(out);
        snprintf(out + l, cap - l, ") ");
        break;
    case N_REP:
        snprintf(out + l, cap - l, "( ");
        put_node(out, cap, n->kids[0]);
        l = strlen(out);
        if (n->max < 0) snprintf(out + l, cap - l, "){%d,} ", n->min);
        else snprintf(out + l, cap - l, "){%d,%d} ", n->min, n->max);
        break;
    default: snprintf(out + l, cap - l, "r%d ", n->rule);
    }
}

/* Oracle: the set of end positions (bit p) reachable from starts. */
static uint64_t ends(int i, const char *s, int len, uint64_t starts)
{
    node *n = &pool[i];
    uint64_t out = 0;
    switch (n->kind) {
    case N_LIT: {
        int l = (int)strlen(n->lit);
        for (int p = 0; p <= len; p++)
            if ((starts >> p & 1) && p + l <= len && !memcmp(s + p, n->lit, (size_t)l)) out |= 1ULL << (p + l);
        return out;
    }
    case N_CLASS:
        for (int p = 0; p < len; p++) {
            if (!(starts >> p & 1)) continue;
            unsigned char c = (unsigned char)s[p];
            if (c >= 0x80) continue;                     /* test strings here are ASCII */
            bool in = c >= (unsigned char)n->lo && c <= (unsigned char)n->hi;
            if (in != n->neg) out |= 1ULL << (p + 1);
        }
        return out;
    case N_SEQ:
        out = starts;
        for (int k = 0; k < n->n_kids; k++) out = ends(n->kids[k], s, len, out);
        return out;
    case N_ALT:
        for (int k = 0; k < n->n_kids; k++) out |= ends(n->kids[k], s, len, starts);
        return out;
    case N_REP: {
        uint64_t cur = starts;
        if (n->min == 0) out = starts;
        for (int k = 1; n->max < 0 || k <= n->max; k++) {
            cur = ends(n->kids[0], s, len, cur);
            if (!cur) break;
            if (k >= n->min) {
                if (n->max < 0 && (out | cur) == out && k > n->min + 64) break;
                out |= cur;
            }
            if (k > 70) break;                           /* non-nullable: positions only grow */
        }
        return out;
    }
    default: return ends(rule_root[n->rule], s, len, starts);
    }
}

static bool sample_cut;         /* the sample hit its cap: not a sentence */

static void sample(int i, char *out, size_t cap)
{
    node *n = &pool[i];
    size_t l = strlen(out);
    if (l + 8 >= cap) { sample_cut = true; return; }
    switch (n->kind) {
    case N_LIT: snprintf(out + l, cap - l, "%s", n->lit); break;
    case N_CLASS: {
        char c;
        if (!n->neg) c = (char)(n->lo + rnd((uint32_t)(n->hi - n->lo + 1)));
        else do c = (char)('a' + rnd(8)); while (c >= n->lo && c <= n->hi);
        out[l] = c;
        out[l + 1] = 0;
        break;
    }
    case N_SEQ: for (int k = 0; k < n->n_kids; k++) sample(n->kids[k], out, cap); break;
    case N_ALT: sample(n->kids[rnd((uint32_t)n->n_kids)], out, cap); break;
    case N_REP: {
        int times = n->min + (int)rnd((uint32_t)((n->max < 0 ? 3 : n->max - n->min) + 1));
        for (int k = 0; k < times; k++) sample(n->kids[0], out, cap);
        break;
    }
    default: sample(rule_root[n->rule], out, cap);
    }
}

static void test_property(void)
{
    int n_gen = 0, n_mut = 0, n_mut_rejected = 0, n_agree = 0;
    for (int trial = 0; trial < 400; trial++) {
        n_pool = 0;
        n_rules_made = 0;
        static char src[16384];
        src[0] = 0;
        int nr = 1 + (int)rnd(4);
        for (int r = 0; r < nr; r++) {
            int root = gen_node(0);
            rule_root[r] = root;
            size_t l = strlen(src);
            snprintf(src + l, sizeof src - l, "%s ::= ", r == nr - 1 ? "root" : (char[8]){ 'r', (char)('0' + r), 0 });
            put_node(src, sizeof src, root);
            l = strlen(src);
            snprintf(src + l, sizeof src - l, "\n");
            n_rules_made = r + 1;
        }
        gram_grammar *g = compile(src);
        CHECK(g != NULL);
        if (!g) { fprintf(stderr, "%s\n", src); continue; }
        int root = rule_root[nr - 1];
        for (int k = 0; k < 20; k++) {
            char s[64] = "";
            sample_cut = false;
            sample(root, s, 56);
            int len = (int)strlen(s);
            if (sample_cut) continue;
            bool ok = gram_accepts(g, s, (size_t)len);
            if (!ok) fprintf(stderr, "  generated \"%s\" rejected by\n%s", s, src);
            CHECK(ok);
            n_gen++;
            /* a mutation: the oracle decides, the engine must agree */
            char t[64];
            memcpy(t, s, (size_t)len + 1);
            int op = (int)rnd(3), at = len ? (int)rnd((uint32_t)len) : 0;
            if (op == 0 && len) t[at] = (char)('a' + rnd(8));
            else if (op == 1 && len) memmove(t + at, t + at + 1, (size_t)(len - at));
            else { memmove(t + at + 1, t + at, (size_t)(len - at + 1)); t[at] = (char)('a' + rnd(8)); }
            int tl = (int)strlen(t);
            bool want = (ends(root, t, tl, 1) >> tl) & 1;
            bool got = gram_accepts(g, t, (size_t)tl);
            if (want != got) fprintf(stderr, "  \"%s\": oracle %d, engine %d, grammar\n%s", t, want, got, src);
            n_agree += want == got;
            n_mut++;
            n_mut_rejected += !got;
        }
        gram_free(g);
    }
    CHECK_EQ_INT(n_agree, n_mut);
    CHECK(n_gen > 3000);
    /* mutations of random grammars' sentences are mostly not sentences */
    printf("property: %d generated accepted, %d mutants, %d rejected, %d stars of a nullable node\n", n_gen, n_mut,
           n_mut_rejected, n_null_stars);
    CHECK(n_null_stars > 20);
    CHECK(n_mut_rejected * 2 > n_mut);
    /* random bytes as grammar text: never a crash */
    for (int k = 0; k < 3000; k++) {
        char src[64];
        const char alpha[] = "root ::=\"[]()|*+?{},.-^\\ax0\n#";
        int l = (int)rnd(40);
        for (int j = 0; j < l; j++) src[j] = alpha[rnd(sizeof alpha - 1)];
        gram_grammar *g = NULL;
        gram_error e;
        if (gram_parse(src, (size_t)l, NULL, &g, &e) == PK_OK) {
            gram_accepts(g, "ab", 2);
            gram_free(g);
        } else CHECK(e.pos >= 0 && e.pos <= l && e.msg[0]);
    }
}

/* ---- JSON Schema ---- */

static gram_grammar *schema(const char *s)
{
    char *gbnf = NULL;
    gram_error e;
    pk_status st = gram_schema_to_gbnf(s, strlen(s), &gbnf, &e);
    if (st) { fprintf(stderr, "schema %s: %s\n", s, e.msg); return NULL; }
    gram_grammar *g = NULL;
    if (gram_parse(gbnf, strlen(gbnf), NULL, &g, &e)) fprintf(stderr, "gbnf of %s:\n%s\n%d:%d %s\n", s, gbnf, e.line, e.col, e.msg);
    free(gbnf);
    return g;
}

static void check_schema(const char *s, const char *const *yes, const char *const *no)
{
    gram_grammar *g = schema(s);
    CHECK(g != NULL);
    if (!g) return;
    for (int i = 0; yes[i]; i++) {
        bool ok = gram_accepts(g, yes[i], strlen(yes[i]));
        if (!ok) fprintf(stderr, "  schema %s should accept %s\n", s, yes[i]);
        CHECK(ok);
    }
    for (int i = 0; no[i]; i++) {
        bool ok = gram_accepts(g, no[i], strlen(no[i]));
        if (ok) fprintf(stderr, "  schema %s should reject %s\n", s, no[i]);
        CHECK(!ok);
    }
    gram_free(g);
}

static void check_schema_refused(const char *s, pk_status want, const char *needle)
{
    char *gbnf = NULL;
    gram_error e;
    CHECK_EQ_INT(gram_schema_to_gbnf(s, strlen(s), &gbnf, &e), want);
    CHECK(gbnf == NULL);
    if (!strstr(e.msg, needle)) fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", e.msg, needle);
    CHECK(strstr(e.msg, needle) != NULL);
    CHECK(strstr(e.msg, "rule '") == NULL);       /* the generated grammar's names mean nothing to a client */
}

static void test_schema(void)
{
    check_schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},"
                 "\"required\":[\"a\"]}",
                 SET("{\"a\":1}", "{ \"a\": -12, \"b\": \"x\" }", "{\"a\":0,\"b\":\"\"}"),
                 SET("{}", "{\"b\":\"x\"}", "{\"a\":1.5}", "{\"a\":1,}", "{\"b\":\"x\",\"a\":1}", "{\"a\":01}"));
    check_schema("{\"properties\":{\"x\":{\"type\":\"boolean\"},\"y\":{\"type\":\"null\"},\"z\":{}}}",
                 SET("{}", "{\"y\":null}", "{\"x\":true,\"z\":[1,{\"q\":\"r\"}]}", "{\"z\":1}"),
                 SET("{,\"y\":null}", "{\"x\":1}", "{\"y\":null,\"x\":true}"));
    check_schema("{\"type\":\"array\",\"items\":{\"enum\":[\"a\",1,null]},\"minItems\":1,\"maxItems\":2}",
                 SET("[\"a\"]", "[1, null]"), SET("[]", "[1,1,1]", "[\"b\"]", "[true]"));
    check_schema("{\"type\":\"array\",\"items\":{\"type\":\"number\"}}", SET("[]", "[1.5, -2e3, 0]"), SET("[1,]", "[.5]"));
    check_schema("{\"const\":{\"k\":[1,2]}}", SET("{\"k\":[1,2]}"), SET("{\"k\":[1]}"));
    check_schema("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"integer\",\"minimum\":3,\"maximum\":15}]}",
                 SET("\"ab\"", "\"\"", "3", "9", "10", "15"), SET("\"abc\"", "2", "16", "-3", "03"));
    check_schema("{\"type\":\"integer\",\"minimum\":-20,\"exclusiveMaximum\":100}",
                 SET("-20", "-1", "0", "7", "99"), SET("-21", "100", "-0", "1000"));
    check_schema("{\"type\":\"integer\",\"minimum\":1234,\"maximum\":5678}",
                 SET("1234", "1300", "2000", "5678", "5599"), SET("1233", "5679", "999", "6000"));
    check_schema("{\"type\":\"number\",\"minimum\":2.5}", SET("3", "3.75", "10.5"), SET("2", "-3", "1.9"));
    check_schema("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", SET("\"ab\"", "\"a\\nb\"", "\"\xc3\xa9\xc3\xa9\""),
                 SET("\"a\"", "\"abcd\""));
    check_schema("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d+(x|yz)?$\"}", SET("\"AB-12\"", "\"QQ-1yz\""),
                 SET("\"A-1\"", "\"AB-\"", "\"AB-1y\""));
    /* patterns with stars over what may match nothing */
    check_schema("{\"type\":\"string\",\"pattern\":\"^(a*)*b$\"}", SET("\"b\"", "\"aab\"", "\"aaab\""),
                 SET("\"a\"", "\"ba\"", "\"\""));
    check_schema("{\"type\":\"string\",\"pattern\":\"^(a|b*)*c$\"}", SET("\"c\"", "\"abbc\"", "\"bbac\""),
                 SET("\"ca\"", "\"ab\"", "\"\""));
    check_schema("{\"type\":\"string\",\"pattern\":\"^(a?)*$\"}", SET("\"\"", "\"a\"", "\"aaa\""),
                 SET("\"b\"", "\"ab\""));
    check_schema("{\"type\":\"string\",\"format\":\"date\"}", SET("\"2024-02-28\"", "\"1999-12-31\""),
                 SET("\"2024-02-30\"", "\"2024-13-01\"", "\"2024-04-31\""));
    check_schema("{\"type\":\"string\",\"format\":\"date-time\"}", SET("\"2024-01-05T10:20:30Z\"", "\"2024-01-05T23:59:59.5+02:00\""),
                 SET("\"2024-01-05T24:00:00Z\"", "\"2024-01-05 10:20:30Z\""));
    check_schema("{\"type\":\"string\",\"format\":\"uuid\"}", SET("\"123e4567-e89b-12d3-a456-426614174000\""),
                 SET("\"123e4567e89b12d3a456426614174000\""));
    check_schema("{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                 "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/n\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}},"
                 "\"$ref\":\"#/$defs/n\"}",
                 SET("{\"v\":1,\"next\":null}", "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}"), SET("{\"v\":1}"));
    check_schema("{\"type\":[\"string\",\"null\"]}", SET("\"x\"", "null"), SET("1"));
    check_schema("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", SET("{}", "{\"q\":1,\"r\":2}"),
                 SET("{\"q\":\"1\"}"));
    check_schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":false}",
                 SET("{\"a\":1}", "{}"), SET("{\"b\":1}"));
    check_schema("{\"allOf\":[{\"properties\":{\"a\":{\"const\":1}},\"required\":[\"a\"]},{\"properties\":{\"b\":{\"const\":2}}}]}",
                 SET("{\"a\":1}", "{\"a\":1,\"b\":2}"), SET("{\"b\":2}"));
    check_schema("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}",
                 SET("[1,\"a\"]"), SET("[1]", "[\"a\",1]"));
    /* The older tuple form, "items" as a list (llama.cpp's test_completion_with_response_format). */
    check_schema("{\"items\":[{\"type\":\"integer\"}]}", SET("[ -3000 ]", "[1]"), SET("[]", "[1,2]", "[\"a\"]"));
    check_schema("{\"type\":\"array\",\"items\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}",
                 SET("[1,\"a\"]"), SET("[1]", "[\"a\",1]"));
    check_schema_refused("{\"items\":[{\"type\":\"integer\"}],\"prefixItems\":[{\"type\":\"integer\"}]}",
                         PK_EUNSUPPORTED, "beside prefixItems");
    check_schema_refused("{\"items\":[{\"type\":\"integer\"}],\"minItems\":1}", PK_EUNSUPPORTED, "tuple ('items')");
    check_schema("{\"type\":\"object\",\"properties\":{\"k\\\"ey\":{\"type\":\"integer\"}},\"required\":[\"k\\\"ey\"]}",
                 SET("{\"k\\\"ey\":3}"), SET("{\"k\"ey\":3}"));
    check_schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"],\"title\":\"T\",\"description\":\"d\"}",
                 SET("{\"a\":\"\"}"), SET("{}"));
    check_schema_refused("{\"type\":\"string\",\"contentEncoding\":\"base64\"}", PK_EUNSUPPORTED, "'contentEncoding'");
    check_schema_refused("{\"properties\":{\"a\":{\"uniqueItems\":true}}}", PK_EUNSUPPORTED, "#/properties/a");
    check_schema_refused("{\"type\":\"string\",\"format\":\"email\"}", PK_EUNSUPPORTED, "format 'email'");
    check_schema_refused("{\"type\":\"number\",\"maximum\":3}", PK_EUNSUPPORTED, "'maximum'");
    check_schema_refused("{\"$ref\":\"http://x/y\"}", PK_EUNSUPPORTED, "$ref");
    check_schema_refused("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", PK_EUNSUPPORTED, "(?");
    /* patterns the grammar cannot hold: refused in the pattern's terms, never a rule of the generated text */
    check_schema_refused("{\"type\":\"string\",\"pattern\":\"*a\"}", PK_EFORMAT, "'*' at offset 0 has nothing to repeat");
    check_schema_refused("{\"type\":\"string\",\"pattern\":\"a+*\"}", PK_EFORMAT, "'*' at offset 2 has nothing");
    check_schema_refused("{\"type\":\"string\",\"pattern\":\"(|?)\"}", PK_EFORMAT, "'?' at offset 2 has nothing");
    check_schema_refused("{\"type\":\"string\",\"pattern\":\"a{2}{3}\"}", PK_EFORMAT, "'{' at offset 4 has nothing");
    check_schema_refused("{\"type\":\"string\",\"pattern\":\"a{3,2}\"}", PK_EFORMAT, "repetition '{3,2}' at offset 1");
    check_schema_refused("{\"type\":\"string\",\"pattern\":\"a{20000}\"}", PK_EUNSUPPORTED, "m <= n <= 10000");
    check_schema_refused("{\"type\":\"string\",\"pattern\":\"a{1,2,3}\"}", PK_EUNSUPPORTED, "unsupported pattern '{'");
    check_schema_refused("{\"type\":\"string\",\"pattern\":\"[z-a]\"}", PK_EUNSUPPORTED,
                         "pattern '[z-a]' cannot be compiled: range end below its start");
    {
        char deep[700] = "{\"type\":\"string\",\"pattern\":\"";
        size_t l = strlen(deep);
        for (int k = 0; k < 300; k++) deep[l++] = '(';
        deep[l++] = 'a';
        for (int k = 0; k < 300; k++) deep[l++] = ')';
        snprintf(deep + l, sizeof deep - l, "\"}");
        check_schema_refused(deep, PK_EUNSUPPORTED, "cannot be compiled: groups nested deeper than 200");
    }
    check_schema("{\"type\":\"string\",\"pattern\":\"^a{2,}b{1,2}?c{2}$\"}", SET("\"aabcc\"", "\"aaabbcc\""),
                 SET("\"abcc\"", "\"aabbbcc\"", "\"aabc\""));
    check_schema_refused("{\"type\":", PK_EFORMAT, "not JSON");
    check_schema_refused("{\"type\":\"blob\"}", PK_EUNSUPPORTED, "type 'blob'");
    /* json_object */
    gram_grammar *g = NULL;
    gram_error e;
    const char *jo = gram_json_object_gbnf();
    CHECK_EQ_INT(gram_parse(jo, strlen(jo), NULL, &g, &e), PK_OK);
    if (g) {
        const char *doc = "{\"a\": [1, {\"b\": null}], \"c\": \"\\\"\"}";
        CHECK(gram_accepts(g, doc, strlen(doc)));
        CHECK(!gram_accepts(g, "[1]", 3));
        CHECK(!gram_accepts(g, "{\"a\":}", 6));
    }
    gram_free(g);
}

/* ---- JSON Schema in Gemma 4's value syntax ---- */

static gram_grammar *schema_g4(const char *s)
{
    char *rules = NULL;
    gram_error e;
    if (gram_schema_rules(s, strlen(s), "", GRAM_SYNTAX_GEMMA4, &rules, &e)) {
        fprintf(stderr, "schema %s: %s\n", s, e.msg);
        return NULL;
    }
    char *gbnf = malloc(strlen(rules) + strlen(gram_syntax_rules(GRAM_SYNTAX_GEMMA4)) + 1);
    gram_grammar *g = NULL;
    if (gbnf) {
        strcpy(gbnf, rules);
        strcat(gbnf, gram_syntax_rules(GRAM_SYNTAX_GEMMA4));
        if (gram_parse(gbnf, strlen(gbnf), NULL, &g, &e)) fprintf(stderr, "gbnf of %s:\n%s\n%d:%d %s\n", s, gbnf, e.line,
                                                                  e.col, e.msg);
    }
    free(gbnf);
    free(rules);
    return g;
}

static void check_schema_g4(const char *s, const char *const *yes, const char *const *no)
{
    gram_grammar *g = schema_g4(s);
    CHECK(g != NULL);
    for (int i = 0; g && yes[i]; i++) {
        bool ok = gram_accepts(g, yes[i], strlen(yes[i]));
        if (!ok) fprintf(stderr, "  Gemma 4 schema %s should accept %s\n", s, yes[i]);
        CHECK(ok);
    }
    for (int i = 0; g && no[i]; i++) {
        bool ok = gram_accepts(g, no[i], strlen(no[i]));
        if (ok) fprintf(stderr, "  Gemma 4 schema %s should reject %s\n", s, no[i]);
        CHECK(!ok);
    }
    gram_free(g);
}

static void check_schema_g4_refused(const char *s, const char *needle)
{
    char *rules = NULL;
    gram_error e;
    CHECK_EQ_INT(gram_schema_rules(s, strlen(s), "", GRAM_SYNTAX_GEMMA4, &rules, &e), PK_EUNSUPPORTED);
    CHECK(rules == NULL);
    if (!strstr(e.msg, needle)) fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", e.msg, needle);
    CHECK(strstr(e.msg, needle) != NULL);
}

#define Q "<|\"|>"

/* Values as Gemma 4's template prints them (its format_argument, with
 * Python's str of numbers and None): strings between marks, raw, holding
 * anything but the mark; keys bare unless the call's reader could not take
 * them so, in dictsort's order; no blanks; integers and floats only in the
 * spelling Python gives them. */
static void test_schema_gemma4(void)
{
    check_schema_g4("{\"type\":\"string\"}",
                    SET(Q Q, Q "a<b <| <|\" <|\"| \"q\" \\n\n\t}" Q, Q "\xc3\xbc\xe4\xbd\xa0" Q, Q "<" Q, Q "<|\"|" Q),
                    SET("\"a\"", Q "a" Q "b" Q, Q "a", "<|\"|" "a" Q, Q "a" Q " "));
    check_schema_g4("{\"type\":\"integer\"}", SET("0", "-12", "1234567890123456"), SET("-0", "01", "1.0", Q "1" Q, " 1"));
    check_schema_g4("{\"type\":\"number\"}",
                    SET("3", "-3", "0.25", "0.0", "-0.0", "1e-05", "1.5e+20", "12345.5", "0.0001", "1e+16",
                        "1.25e-100", "1234567.12345678"),
                    SET("1.50", "1e5", "1E+20", "0.00001", "1e-5", "1e+15", ".5", "1.", "1.0e+20", "-0", "+1"));
    check_schema_g4("{\"type\":\"number\",\"minimum\":2.5}", SET("3", "3.75", "10.5", "1234567.5"),
                    SET("2", "2.5", "3.750", "-3", "1.9"));
    check_schema_g4("{\"type\":\"number\",\"minimum\":-1}", SET("-1", "0", "0.5", "0.0001", "7.25"), SET("-0.5", "0.00001"));
    check_schema_g4("{\"type\":\"integer\",\"minimum\":-20,\"maximum\":99}", SET("-20", "0", "99"), SET("-0", "100", "-21"));
    check_schema_g4("{\"type\":\"boolean\"}", SET("true", "false"), SET("True", Q "true" Q));
    check_schema_g4("{\"type\":[\"string\",\"null\"]}", SET("None", Q "x" Q), SET("null", "none"));
    check_schema_g4("{\"enum\":[\"a\",1,2.5,null,true,0.1,[1,\"b\"],{\"y\":1,\"X\":2}]}",
                    SET(Q "a" Q, "1", "2.5", "None", "true", "0.1", "[1," Q "b" Q "]", "{X:2,y:1}"),
                    SET("\"a\"", "null", "0.10000000000000001", "2.50", "[1,\"b\"]", "{y:1,X:2}"));
    check_schema_g4("{\"const\":{\"b\":[1,\"x\"],\"A\":null}}", SET("{A:None,b:[1," Q "x" Q "]}"),
                    SET("{b:[1," Q "x" Q "],A:None}", "{\"A\":null,\"b\":[1,\"x\"]}"));
    /* keys: dictsort's order (case folded); a leading blank or a ':' quoted, as the reader needs */
    check_schema_g4("{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"integer\"},\"A\":{\"type\":\"integer\"},"
                    "\"a c\":{\"type\":\"string\"},\"x:y\":{\"type\":\"integer\"},\" lead\":{\"type\":\"integer\"}},"
                    "\"required\":[\"b\"]}",
                    SET("{b:1}", "{A:2,b:1}", "{" Q " lead" Q ":0,A:2,a c:" Q "s" Q ",b:1," Q "x:y" Q ":3}"),
                    SET("{b:1,A:2}", "{ b:1}", "{\"b\":1}", "{b: 1}", "{b:1,x:y:3}", "{A:2}", "{}", "{b:1,}"));
    check_schema_g4("{\"type\":\"object\",\"properties\":{\"when\":{\"type\":\"object\",\"properties\":{"
                    "\"hour\":{\"type\":\"integer\"},\"date\":{\"type\":\"string\",\"format\":\"date\"}},"
                    "\"required\":[\"date\"]}},\"required\":[\"when\"]}",
                    SET("{when:{date:" Q "2024-02-28" Q "}}", "{when:{date:" Q "2024-02-28" Q ",hour:3}}"),
                    SET("{when:{hour:3,date:" Q "2024-02-28" Q "}}", "{when:{date:" Q "2024-02-30" Q "}}",
                        "{when:{date:\"2024-02-28\"}}"));
    check_schema_g4("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}",
                    SET("[1]", "[1,-2]"), SET("[]", "[1, 2]", "[1,2,3]", "[ 1]"));
    check_schema_g4("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}",
                    SET("[1," Q "a" Q "]"), SET("[1, " Q "a" Q "]", "[1]"));
    check_schema_g4("{\"type\":\"object\"}",
                    SET("{}", "{a:1,b:[None,true," Q "x" Q "],c:{d:1.5},A b:-2,\xc3\xa9:0}"),
                    SET("{a:null}", "{" Q "q" Q ":1}", "{:1}", "{ a:1}", "{a:1,}", "{a : 1}"));
    check_schema_g4("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", SET("{q:1,R:2}", "{}"),
                    SET("{q:" Q "1" Q "}"));
    check_schema_g4("{}", SET("None", "[{a:" Q "b" Q "}]", "-1.5e-07"), SET("null", "[1, 2]"));
    check_schema_g4("{\"type\":\"string\",\"maxLength\":3}", SET(Q Q, Q "ab\"" Q, Q "\xc3\xa9\xc3\xa9\xc3\xa9" Q),
                    SET(Q "a<b" Q, Q "abcd" Q));
    check_schema_g4("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d+\\\"\\\\\\\\x$\"}", SET(Q "AB-12\"\\x" Q),
                    SET(Q "AB-12\\\"\\\\x" Q, Q "AB-12" Q));
    check_schema_g4("{\"type\":\"string\",\"pattern\":\"^[^a]. \\\\S$\"}", SET(Q "bc x" Q, Q "\"| >" Q),
                    SET(Q "<c x" Q, Q "b< x" Q, Q "bc <" Q, Q "ac x" Q));
    check_schema_g4_refused("{\"type\":\"string\",\"pattern\":\"^a<b$\"}", "'<' in a pattern");
    check_schema_g4_refused("{\"enum\":[\"x<|\\\"|>y\"]}", "mark");
    check_schema_g4_refused("{\"const\":{\"<|\\\"|>\":1}}", "mark");
}

#undef Q

/* ---- speed: masks on a 150k-token byte vocabulary ---- */

static void test_speed(void)
{
    enum { NV = 150000 };
    char *bytes = malloc((size_t)NV * 12);
    int64_t *off = malloc((NV + 1) * sizeof *off);
    bool *eog = calloc(NV, sizeof *eog);
    const char alpha[] = "abcdefghijklmnopqrstuvwxyz{}[]\":, 0123456789._-ABCDEFGHIJ\n\xc3\xa9";
    int64_t o = 0;
    for (int i = 0; i < NV; i++) {
        off[i] = o;
        int l = 1 + (int)rnd(8);
        if (i < 256) { bytes[o++] = (char)i; continue; }     /* every byte is a token */
        for (int j = 0; j < l; j++) bytes[o++] = alpha[rnd(sizeof alpha - 1)];
    }
    off[NV] = o;
    eog[NV - 1] = true;
    gram_vocab *v = NULL;
    CHECK_EQ_INT(gram_vocab_new(NV, bytes, off, eog, &v), PK_OK);
    gram_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                             "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
                             "\"required\":[\"name\",\"age\",\"tags\"]}");
    CHECK(g && v);
    if (g && v) {
        gram_matcher *m;
        CHECK_EQ_INT(gram_matcher_new(g, v, &m), PK_OK);
        const char *doc = "{\"name\": \"abcdefghij klmnop qrstu\", \"age\": 42, \"tags\": [\"x\", \"yy\", \"zzz\"]}";
        int64_t t0 = pk_time_us(), worst = 0;
        int steps = 0;
        for (const char *p = doc; *p; p++, steps++) {
            int64_t t1 = pk_time_us();
            const uint64_t *mask = gram_matcher_mask(m);
            int64_t dt = pk_time_us() - t1;
            if (dt > worst) worst = dt;
            CHECK(mask != NULL);
            int tok = (unsigned char)*p;                  /* the byte token */
            CHECK(mask && (mask[tok / 64] >> (tok % 64) & 1));
            CHECK_EQ_INT(gram_matcher_accept(m, tok), PK_OK);
        }
        CHECK(gram_matcher_done(m));
        double per = (double)(pk_time_us() - t0) / steps;
        gram_stats st = gram_matcher_stats(m);
        printf("speed: %d steps, %.1f us/step mean (mask + accept), worst mask %lld us, %lld masks built, "
               "%lld cached, %lld states\n", steps, per, (long long)worst, (long long)st.n_mask_built,
               (long long)st.n_mask_cached, (long long)st.n_states);
        /* a step must stay far below a decode step (~25 ms on the benchmark
         * model); under ThreadSanitizer it took 4,300-6,800 us where the
         * plain build takes 170 */
        CHECK(per < (TEST_SANITIZED ? 50000 : 5000));
        gram_matcher_free(m);
    }
    gram_free(g);
    gram_vocab_free(v);
    free(bytes);
    free(off);
    free(eog);
}

/* ---- a real vocabulary: random walks through the mask ---- */

/* Samples uniformly among allowed tokens until the grammar is done; every
 * sampled token must be accepted, and the text must be a sentence for a
 * fresh matcher (what the engine relies on). */
static void test_real_vocab(void)
{
    const char *dir = test_shared_dir();
    if (!dir) { SKIP_PART("real vocabulary: ../shared/models absent"); return; }
    const char *names[] = { "rand-qwen2-qwen2vocab-e64-l2-F16.gguf", "stories260K.gguf",
                            "rand-llama-llama3vocab-e256-l2-Q8_0.gguf" };
    for (size_t mi = 0; mi < ARRAY_LEN(names); mi++) {
        char path[512], err[200];
        snprintf(path, sizeof path, "%s/models/%s", dir, names[mi]);
        gguf_ctx *gg = NULL;
        tok_vocab *tv = NULL;
        if (gguf_open(path, &gg, err, sizeof err) || tok_load_gguf(gg, &tv, err, sizeof err)) {
            SKIP_PART("real vocabulary: %.60s: %.100s", names[mi], err);
            tok_free(tv);
            gguf_close(gg);
            continue;
        }
        int32_t nv = tok_n_vocab(tv);
        int64_t *off = malloc((size_t)(nv + 1) * sizeof *off);
        bool *eog = calloc((size_t)nv, sizeof *eog);
        char *bytes = malloc((size_t)nv * 256);
        int64_t o = 0;
        for (int32_t i = 0; i < nv; i++) {
            off[i] = o;
            eog[i] = tok_is_eog(tv, i);
            int32_t n = tok_piece(tv, i, bytes + o, 256, false);
            if (n > 0 && !eog[i]) o += n;
        }
        off[nv] = o;
        gram_vocab *v = NULL;
        CHECK_EQ_INT(gram_vocab_new(nv, bytes, off, eog, &v), PK_OK);
        gram_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
                                 "\"n\":{\"type\":\"integer\"},\"t\":{\"type\":\"array\",\"items\":{\"enum\":[\"x\",\"y\"]}}},"
                                 "\"required\":[\"name\",\"n\"]}");
        int n_done = 0;
        double mask_us = 0;
        int n_masks = 0;
        for (int run = 0; run < 30 && g && v; run++) {
            gram_matcher *m;
            CHECK_EQ_INT(gram_matcher_new(g, v, &m), PK_OK);
            char text[8192];
            size_t tl = 0;
            for (int step = 0; step < 400; step++) {
                int64_t t0 = pk_time_us();
                const uint64_t *mask = gram_matcher_mask(m);
                mask_us += (double)(pk_time_us() - t0);
                n_masks++;
                CHECK(mask != NULL);
                if (!mask) break;
                int32_t allowed[4096], na = 0, seen = 0;
                for (int32_t i = 0; i < nv; i++)
                    if (mask[i / 64] >> (i % 64) & 1) {
                        seen++;
                        if (na < 4096) allowed[na++] = i;
                        else if (rnd((uint32_t)seen) < 4096) allowed[rnd(4096)] = i;
                    }
                CHECK(na > 0);
                if (!na) break;
                int32_t t = allowed[rnd((uint32_t)na)];
                if (eog[t]) { CHECK(gram_matcher_can_end(m)); break; }
                pk_status st = gram_matcher_accept(m, t);
                if (st) fprintf(stderr, "  %s: token %d refused after the mask allowed it\n", names[mi], t);
                CHECK_EQ_INT(st, PK_OK);
                int64_t n = off[t + 1] - off[t];
                if (tl + (size_t)n < sizeof text) { memcpy(text + tl, bytes + off[t], (size_t)n); tl += (size_t)n; }
                if (gram_matcher_done(m)) break;
            }
            if (gram_matcher_can_end(m)) {
                n_done++;
                bool ok = gram_accepts(g, text, tl);
                if (!ok) fprintf(stderr, "  %s: finished text not accepted: %.*s\n", names[mi], (int)tl, text);
                CHECK(ok);
                /* and an independent parser agrees that it is JSON (UTF-8 checked) */
                json_error_t je;
                json_t *doc = json_loadb(text, tl, 0, &je);
                if (!doc) fprintf(stderr, "  %s: jansson: %s in %.*s\n", names[mi], je.text, (int)tl, text);
                CHECK(doc != NULL && json_is_string(json_object_get(doc, "name")) &&
                      json_is_integer(json_object_get(doc, "n")));
                json_decref(doc);
            }
            gram_matcher_free(m);
        }
        printf("real vocab %s (%d tokens): %d/30 walks complete, mask %.0f us mean over %d steps\n", names[mi], nv,
               n_done, n_masks ? mask_us / n_masks : 0, n_masks);
        CHECK(n_done > 0);
        gram_free(g);
        gram_vocab_free(v);
        free(off);
        free(eog);
        free(bytes);
        tok_free(tv);
        gguf_close(gg);
    }
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_constructs);
    TEST_RUN(test_errors);
    TEST_RUN(test_masks);
    TEST_RUN(test_property);
    TEST_RUN(test_schema);
    TEST_RUN(test_schema_gemma4);
    TEST_RUN(test_speed);
    TEST_RUN(test_real_vocab);
    return test_finish();
}
