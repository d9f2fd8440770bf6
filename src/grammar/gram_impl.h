/*
 * gram_impl.h - the compiled grammar, shared by the parser (gram_parse.c)
 * and the matcher (gram_match.c).  Private to src/grammar.
 *
 *   code:  [ alt items... END  alt items... END | rule 1 ... ]
 *          item >= 0: character class `item`; GRAM_END; GRAM_REF(r) = -2 - r
 *   alt:   start position in code of every alternative, by rule
 *   rule_alt[r] .. rule_alt[r+1]: rule r's alternatives in alt
 *   csets[c]: ranges[off .. off + 2n) as sorted, merged [lo, hi] pairs
 */
#ifndef GRAM_IMPL_H
#define GRAM_IMPL_H

#include <stdatomic.h>

#include "gram.h"

#define GRAM_END (-1)
#define GRAM_REF(r) (-2 - (r))
#define GRAM_REF_RULE(c) (-2 - (c))

typedef struct gram_cset {
    int32_t off, n;            /* n [lo, hi] pairs at ranges + off */
    bool neg;
} gram_cset;

struct gram_grammar {
    atomic_int refs;
    int32_t *code;
    int32_t n_code;
    int32_t *alt;
    int32_t *rule_alt;         /* [n_rules + 1] */
    int32_t n_rules, root;
    gram_cset *csets;
    int32_t n_csets;
    uint32_t *ranges;
};

/* Whether class c admits code point cp. */
static inline bool gram_cset_has(const gram_grammar *g, int32_t c, uint32_t cp)
{
    const gram_cset *s = &g->csets[c];
    const uint32_t *r = g->ranges + s->off;
    bool in = false;
    for (int32_t i = 0; i < s->n; i++)
        if (cp >= r[2 * i] && cp <= r[2 * i + 1]) { in = true; break; }
    return in != s->neg;
}

/* Whether class c admits some code point in [lo, hi] (a partial UTF-8
 * character's completions).  Exact because ranges are merged. */
static inline bool gram_cset_meets(const gram_grammar *g, int32_t c, uint32_t lo, uint32_t hi)
{
    const gram_cset *s = &g->csets[c];
    const uint32_t *r = g->ranges + s->off;
    for (int32_t i = 0; i < s->n; i++) {
        if (!s->neg && r[2 * i] <= hi && r[2 * i + 1] >= lo) return true;
        if (s->neg && r[2 * i] <= lo && r[2 * i + 1] >= hi) return false;
    }
    return s->neg;
}

#endif
