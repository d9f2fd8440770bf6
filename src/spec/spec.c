/*
 * spec.c - the n-gram proposers: lookup in a session's tokens and the
 * server-wide store of recent generations.  See spec.h.
 */
#include "spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SEP (-1)                /* between generations in the store; never a token */

static const struct { const char *name; spec_kind kind; } kinds[] = {
    { "none", SPEC_NONE },
    { "ngram-simple", SPEC_NGRAM_SIMPLE },
    { "ngram-cache", SPEC_NGRAM_CACHE },
    { "draft-simple", SPEC_DRAFT_SIMPLE },
    { "draft-mtp", SPEC_DRAFT_MTP },
};

bool spec_kind_parse(const char *name, spec_kind *out)
{
    for (size_t i = 0; i < ARRAY_LEN(kinds); i++)
        if (!strcmp(name, kinds[i].name)) {
            *out = kinds[i].kind;
            return true;
        }
    return false;
}

const char *spec_kind_name(spec_kind k)
{
    for (size_t i = 0; i < ARRAY_LEN(kinds); i++)
        if (kinds[i].kind == k) return kinds[i].name;
    return "?";
}

spec_params spec_params_default(void)
{
    return (spec_params){ .kind = SPEC_NONE, .n_max = 16, .n_min = 0, .size_n = 12, .size_m = 48,
                          .key_min = 3, .key_max = 8, .store_tokens = 1 << 20, .ngram_p_min = -1 };
}

const char *spec_params_check(const spec_params *p)
{
    if (p->n_max < 0 || p->n_max > 64) return "--spec-draft-n-max must be in 0..64";
    if (p->n_min < 0 || p->n_min > p->n_max) return "--spec-draft-n-min must be in 0..--spec-draft-n-max";
    if (p->size_n < 1 || p->size_n > 1024) return "--spec-ngram-simple-size-n must be in 1..1024";
    if (p->size_m < 1 || p->size_m > 1024) return "--spec-ngram-simple-size-m must be in 1..1024";
    if (p->key_min < 1 || p->key_max < p->key_min || p->key_max > 64)
        return "the n-gram key lengths must satisfy 1 <= min <= max <= 64";
    if (!(p->p_min >= 0 && p->p_min <= 1)) return "--spec-draft-p-min must be in 0..1";
    if (!(p->ngram_p_min <= 1)) return "--spec-ngram-p-min must be in 0..1 or auto";
    if (p->store_tokens < 1024 || p->store_tokens > (1 << 26)) return "the n-gram store must hold 1Ki..64Mi tokens";
    return NULL;
}

int32_t spec_ngram_lookup(const int32_t *toks, int32_t n, int32_t key_min, int32_t key_max, int32_t *out,
                          int32_t max_out, int32_t *key)
{
    return spec_ngram_lookup_in(toks, n, toks, n, key_min, key_max, out, max_out, key);
}

int32_t spec_ngram_lookup_in(const int32_t *hay, int32_t n_hay, const int32_t *ctx, int32_t n, int32_t key_min,
                             int32_t key_max, int32_t *out, int32_t max_out, int32_t *key)
{
    if (key) *key = 0;
    if (n < key_min || n_hay < key_min + 1 || max_out < 1) return 0;
    const int32_t last = ctx[n - 1];
    int32_t best_l = 0, best_i = -1;
    for (int32_t i = n_hay - 2; i >= key_min - 1; i--) {
        if (hay[i] != last) continue;
        int32_t l = 1;
        while (l < key_max && i - l >= 0 && l < n && hay[i - l] == ctx[n - 1 - l]) l++;
        if (l >= key_min && l > best_l) {
            best_l = l;
            best_i = i;
            if (l == key_max) break;
        }
    }
    if (best_i < 0) return 0;
    int32_t c = MIN(max_out, n_hay - 1 - best_i);
    memcpy(out, hay + best_i + 1, (size_t)c * sizeof *out);
    if (key) *key = best_l;
    return c;
}

/* ---- the store ---- */

struct spec_store {
    int32_t *ring;              /* [mask + 1] tokens by absolute position & mask */
    uint64_t mask;
    uint64_t head;              /* tokens ever written: the next one's position */
    uint64_t *index;            /* [mask + 1] position + 1 of a key_min-gram's last token, by its hash */
    uint64_t *prev;             /* [mask + 1] by position & mask: index's value before that position
                                   took it (the bucket's next older entry), a chain per bucket */
    int32_t key_min;
};

static uint64_t key_hash(const int32_t *t, int32_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint32_t)t[i];
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    return h;
}

pk_status spec_store_new(int32_t cap, int32_t key_min, spec_store **out)
{
    *out = NULL;
    if (cap < 2 || key_min < 1 || key_min > 64) return PK_EINVAL;
    uint64_t size = 1;
    while (size < (uint64_t)cap) size <<= 1;
    spec_store *s = calloc(1, sizeof *s);
    if (!s) return PK_ENOMEM;
    s->ring = malloc(size * sizeof *s->ring);
    s->index = calloc(size, sizeof *s->index);
    s->prev = calloc(size, sizeof *s->prev);
    if (!s->ring || !s->index || !s->prev) {
        spec_store_free(s);
        return PK_ENOMEM;
    }
    s->mask = size - 1;
    s->key_min = key_min;
    *out = s;
    return PK_OK;
}

void spec_store_free(spec_store *s)
{
    if (!s) return;
    free(s->ring);
    free(s->index);
    free(s->prev);
    free(s);
}

int64_t spec_store_tokens(const spec_store *s) { return (int64_t)MIN(s->head, s->mask + 1); }

static uint64_t oldest(const spec_store *s) { return s->head > s->mask + 1 ? s->head - (s->mask + 1) : 0; }

void spec_store_add(spec_store *s, const int32_t *toks, int32_t n)
{
    if (n < 1) return;
    if ((uint64_t)n > s->mask) {                 /* the separator and the newest tokens fit */
        toks += (uint64_t)n - s->mask;
        n = (int32_t)s->mask;
    }
    s->ring[s->head++ & s->mask] = SEP;
    for (int32_t i = 0; i < n; i++) {
        uint64_t p = s->head++;
        s->ring[p & s->mask] = toks[i];
        if (i + 1 >= s->key_min) {
            uint64_t *b = &s->index[key_hash(toks + i + 1 - s->key_min, s->key_min) & s->mask];
            s->prev[p & s->mask] = *b;
            *b = p + 1;
        }
    }
}

int32_t spec_store_lookup(const spec_store *s, const int32_t *ctx, int32_t n, int32_t key_max, int32_t *out,
                          int32_t max_out, int32_t *key)
{
    if (key) *key = 0;
    if (n < s->key_min || max_out < 1) return 0;
    /* The bucket's chain runs from the newest entry back; an entry older
     * than the ring's oldest token was overwritten, and so is all after it. */
    uint64_t lo = oldest(s), best_p = 0;
    int32_t best_l = 0;
    uint64_t v = s->index[key_hash(ctx + n - s->key_min, s->key_min) & s->mask];
    for (int seen = 0, steps = 0; v && seen < SPEC_STORE_PROBES && steps < 8 * SPEC_STORE_PROBES;
         steps++, v = s->prev[(v - 1) & s->mask]) {
        uint64_t p = v - 1;
        if (p >= s->head || p < lo + (uint64_t)(s->key_min - 1)) break;
        int32_t l = 0;
        while (l < key_max && l < n && p >= (uint64_t)l && p - (uint64_t)l >= lo &&
               s->ring[(p - (uint64_t)l) & s->mask] == ctx[n - 1 - l])
            l++;
        if (l < s->key_min) continue;           /* another key in the same bucket */
        seen++;
        if (p + 1 >= s->head || s->ring[(p + 1) & s->mask] == SEP) continue;   /* nothing follows it */
        if (l > best_l) {
            best_l = l;
            best_p = p;
            if (l == key_max) break;
        }
    }
    if (!best_l) return 0;
    int32_t c = 0;
    for (uint64_t q = best_p + 1; q < s->head && c < max_out && s->ring[q & s->mask] != SEP; q++)
        out[c++] = s->ring[q & s->mask];
    if (key) *key = best_l;
    return c;
}

/* ---- what a guess is worth ---- */

#define GAIN_DECAY 0.98             /* per decode step: the line follows the last ~50 */
#define GAIN_WINDOW 256.0f          /* tallies halve past this many guesses at a key and depth */
#define GAIN_MIN_TRIED 8.0f         /* fewer: the depth is tried */

void spec_gain_step(spec_gain *g, int32_t rows, double ms)
{
    if (rows < 1 || !(ms >= 0)) return;
    g->w = g->w * GAIN_DECAY + 1;
    g->n = g->n * GAIN_DECAY + rows;
    g->nn = g->nn * GAIN_DECAY + (double)rows * rows;
    g->t = g->t * GAIN_DECAY + ms;
    g->nt = g->nt * GAIN_DECAY + rows * ms;
}

void spec_gain_judged(spec_gain *g, int32_t key, int32_t n_guess, int32_t n_kept)
{
    key = MIN(MAX(key, 0), SPEC_GAIN_KEYS - 1);
    for (int32_t j = 0; j < MIN(n_guess, SPEC_GAIN_DEPTH); j++) {
        float *tr = &g->tried[key][j], *kp = &g->kept[key][j];
        *tr += 1;
        *kp += n_kept > j;
        if (*tr > GAIN_WINDOW) {
            *tr *= 0.5f;
            *kp *= 0.5f;
        }
    }
}

double spec_gain_threshold(const spec_gain *g, int32_t n_sessions)
{
    /* slope b (ms a row) and intercept a of the least-squares line; rows
     * that never varied say nothing about b */
    double var = g->w * g->nn - g->n * g->n;
    if (g->w < 4 || var < 0.25 * g->w * g->w) return 0;
    double b = (g->w * g->nt - g->n * g->t) / var, a = (g->t - b * g->n) / g->w;
    if (!(b > 0)) return 0;
    int32_t s = MAX(n_sessions, 1);
    double step = fmax(a, 0) + b * s;   /* a step of each session's one token */
    return fmin(b * s / step, 1.0);
}

int32_t spec_gain_cut(spec_gain *g, int32_t key, int32_t n_guess, double th)
{
    if (th <= 0 || n_guess <= 0) return n_guess;
    key = MIN(MAX(key, 0), SPEC_GAIN_KEYS - 1);
    int32_t j = 0;
    for (; j < MIN(n_guess, SPEC_GAIN_DEPTH); j++) {
        float tr = g->tried[key][j];
        if (tr >= GAIN_MIN_TRIED && g->kept[key][j] < th * tr) break;
    }
    if (j < n_guess && ++g->n_cut % SPEC_GAIN_EXPLORE == 0) return n_guess;
    return j;
}
