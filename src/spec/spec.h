/*
 * spec.h - speculative decoding's proposers (docs/speculative.md).
 *
 * DESIGN: a proposer guesses the tokens that follow a session's context;
 * the engine verifies the guess in its next step (the session's last
 * token and the k guesses as one run of k + 1 positions) and keeps the
 * prefix the sampler agrees with.  The guess never changes what is
 * decoded, only how many positions one step covers, so the proposers are
 * pure lookups with no state of the model: they cannot make output wrong,
 * only a step longer.
 *
 *   spec_ngram_lookup  the latest earlier place where the context's last
 *                      L tokens occur (L from key_max down to key_min),
 *                      and what followed there: llama.cpp's ngram-simple
 *                      with key_min = key_max.
 *   spec_store         a server-wide ring of recent generations, indexed
 *                      by their key_min-grams: a retried request, a
 *                      re-query or a sibling sub-agent writing the same
 *                      tool call finds the tokens another session wrote.
 *
 * The third proposer, a draft model (SPEC_DRAFT_SIMPLE), runs a model and
 * lives with the engine (src/engine/eng_draft.c); only its name is here.
 *
 * Threads: a store has one owner at a time (the engine thread).
 */
#ifndef POLYKV_SPEC_H
#define POLYKV_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/pk.h"

typedef enum spec_kind {
    SPEC_NONE = 0,
    SPEC_NGRAM_SIMPLE,          /* the session's own tokens, one key length (size_n) */
    SPEC_NGRAM_CACHE,           /* the session's tokens and the server's store, key_max..key_min */
    SPEC_DRAFT_SIMPLE,          /* a draft model's greedy tokens (-md; eng_draft.c) */
    SPEC_DRAFT_MTP,             /* the model's own MTP block's greedy tokens (eng_draft.c) */
} spec_kind;

/* llama-server's --spec-type names; false for a name not built here. */
bool spec_kind_parse(const char *name, spec_kind *out);
const char *spec_kind_name(spec_kind k);

typedef struct spec_params {
    spec_kind kind;             /* --spec-type, SPEC_NONE by default */
    int32_t n_max;              /* --spec-draft-n-max: guesses per session and step, 16 */
    int32_t n_min;              /* --spec-draft-n-min: a shorter guess is not verified, 0 */
    int32_t size_n;             /* --spec-ngram-simple-size-n: ngram-simple's key, 12 */
    int32_t size_m;             /* --spec-ngram-simple-size-m: its longest guess, 48 */
    int32_t key_min, key_max;   /* ngram-cache's key lengths, 3 and 8 */
    int32_t store_tokens;       /* ngram-cache's store, 1 << 20 tokens */
    float p_min;                /* --spec-draft-p-min: a draft model stops guessing where its
                                   token's probability is below this, 0 */
    float ngram_p_min;          /* --spec-ngram-p-min: an n-gram guess stops at the depth whose
                                   tallied chance of being kept is below this; < 0 (default):
                                   a row's measured cost over a token's worth (spec_gain) */
} spec_params;

spec_params spec_params_default(void);
/* NULL when valid, else what is wrong (static text). */
const char *spec_params_check(const spec_params *p);

/* The longest key: for L from key_max down to key_min, the latest i with
 * toks[i - L + 1 .. i] equal to toks[n - L .. n - 1] and i < n - 1; its
 * continuation toks[i + 1 ..] (at most max_out, up to n) goes to out.
 * Returns the continuation's length, 0 when no key of key_min matches;
 * *key (may be NULL) gets L.  O(n) per call. */
int32_t spec_ngram_lookup(const int32_t *toks, int32_t n, int32_t key_min, int32_t key_max, int32_t *out,
                          int32_t max_out, int32_t *key);
/* The same search for ctx's last tokens in another text, hay[0..n_hay)
 * (a session running beside it): the latest i <= n_hay - 2 whose key
 * matches; spec_ngram_lookup is this with hay = ctx. */
int32_t spec_ngram_lookup_in(const int32_t *hay, int32_t n_hay, const int32_t *ctx, int32_t n, int32_t key_min,
                             int32_t key_max, int32_t *out, int32_t max_out, int32_t *key);

typedef struct spec_store spec_store;

/* A ring of cap tokens (rounded up to a power of two) and its index of
 * key_min-grams.  PK_EINVAL, PK_ENOMEM. */
pk_status spec_store_new(int32_t cap, int32_t key_min, spec_store **out);
void spec_store_free(spec_store *s);            /* NULL is a no-op */
/* Appends one generation with the context it continued (toks[0..n)),
 * after a separator that no lookup crosses; the oldest tokens go. */
void spec_store_add(spec_store *s, const int32_t *toks, int32_t n);
/* As spec_ngram_lookup over the store: of the SPEC_STORE_PROBES latest
 * stored occurrences of ctx's last key_min tokens, the one whose match
 * extends furthest back (up to key_max; the latest of equals) and that
 * something follows; its continuation (up to the generation's end) goes
 * to out.  The latest
 * occurrence alone is often a short match where an older one continues
 * a longer one: stories260K's fresh prompts kept 0.59 of their guesses
 * with it. */
#define SPEC_STORE_PROBES 32
int32_t spec_store_lookup(const spec_store *s, const int32_t *ctx, int32_t n, int32_t key_max, int32_t *out,
                          int32_t max_out, int32_t *key);
int64_t spec_store_tokens(const spec_store *s);     /* tokens held now */

/*
 * spec_gain: how much of an n-gram guess is worth its rows.  A verified
 * row costs what the step's products and attention spend on it: next to
 * nothing where decoding streams the weights from memory (the 0.5B shape:
 * a 4-row step 1.16x a 1-row one), about half a token's step where they
 * sit in cache (stories260K: 47 us for one row, 22 us more a row).  The
 * j-th guessed token is worth its row when the chance that it and every
 * guess before it are kept, times what a token is worth to its session
 * (the step's time shared by the sessions in it), exceeds the row's cost.
 * The chance is tallied per key length and depth over the server's
 * verifications (a match on a longer key is right more often: on stories
 * the first guess after a 3-token key is kept 0.67 of the time, after an
 * 8-token key 0.88); the costs come from a least-squares line through
 * decode steps' times against their rows.  Both forget slowly.  Depths
 * with too few tallies are tried, and one guess in SPEC_GAIN_EXPLORE goes
 * uncut so that the tallies of cut depths stay current.
 */
#define SPEC_GAIN_KEYS 65           /* key lengths 0..64 */
#define SPEC_GAIN_DEPTH 64          /* guesses 1..64 */
#define SPEC_GAIN_EXPLORE 16

typedef struct spec_gain {
    double w, n, nn, t, nt;         /* decode steps, decayed: count, rows, rows^2, ms, rows * ms */
    float tried[SPEC_GAIN_KEYS][SPEC_GAIN_DEPTH];   /* guesses verified at this key and depth */
    float kept[SPEC_GAIN_KEYS][SPEC_GAIN_DEPTH];    /* ... kept with every guess before them */
    uint32_t n_cut;                 /* guesses cut: counts to the next uncut one */
} spec_gain;

/* A decode step (no prompt rows) of `rows` rows took ms. */
void spec_gain_step(spec_gain *g, int32_t rows, double ms);
/* A guess of n_guess tokens on a key of `key` tokens kept n_kept. */
void spec_gain_judged(spec_gain *g, int32_t key, int32_t n_guess, int32_t n_kept);
/* The row's cost over a token's worth with n_sessions decoding (0 until
 * the steps have varied in rows: then no guess is cut). */
double spec_gain_threshold(const spec_gain *g, int32_t n_sessions);
/* How many of an n_guess-token guess on a key of `key` tokens to verify:
 * the depths whose tallied chance reaches th (0: all). */
int32_t spec_gain_cut(spec_gain *g, int32_t key, int32_t n_guess, double th);

#endif
