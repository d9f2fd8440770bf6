/*
 * smp.h - token samplers and log-probabilities.
 *
 * DESIGN: a sampler is a small state (parameters, RNG, recent tokens for the
 * penalties).  smp_sample applies, in order: repetition / presence /
 * frequency penalties over the last `penalty_last_n` accepted tokens, then
 * (when temp > 0) top-k, top-p, min-p, temperature, and draws from the
 * result with the seeded RNG.  temp <= 0 is greedy: the argmax of the
 * penalized logits, ties to the lower id (what the reference engine does).
 *
 * A seed reproduces llama.cpp's tokens (llama-server's `seed`): the RNG is
 * its std::mt19937 with libstdc++'s uniform double (mt.h), and every filter
 * and the draw round as its samplers do, so the same logits and seed give
 * the same token draw for draw.  What can still differ is listed in smp.c's
 * header: ties between equal logits (ours go to the lower id), a draw of
 * exactly 0, a temperature that overflows the logits, and seeds past 32
 * bits (the low 32 bits are used).
 *
 * Log-probabilities are log-softmax of the penalized logits before any
 * truncation, the distribution OpenAI's `logprobs` describes.
 *
 * All scratch is allocated at smp_new; smp_sample allocates nothing.
 * Threads: one owner at a time (the engine thread).
 */
#ifndef SMP_H
#define SMP_H

#include "../common/pk.h"

/* The seed that asks for a random one (llama.cpp's LLAMA_DEFAULT_SEED). */
#define SMP_SEED_RANDOM 0xFFFFFFFFu

typedef struct smp_params {
    float temp;               /* <= 0: greedy */
    int32_t top_k;            /* <= 0: off */
    float top_p;              /* >= 1: off */
    float min_p;              /* <= 0: off */
    int32_t min_keep;         /* top-p and min-p keep at least this many (llama.cpp's
                                 min_keep; 0 and 1: no floor); >= 0 */
    float repeat_penalty;     /* 1: off */
    float presence_penalty;   /* 0: off */
    float frequency_penalty;  /* 0: off */
    int32_t penalty_last_n;   /* tokens looked back; 0 off, -1 all kept (up to n_ctx given at new) */
    uint64_t seed;
    bool post_probs;          /* smp_sample's top / chosen_logprob describe the distribution
                                 the token was drawn from (after penalties, top-k/p, min-p and
                                 temperature; greedy: the chosen token, log 1), not the
                                 log-softmax of the logits (llama.cpp's post_sampling_probs) */
} smp_params;

typedef struct smp_logprob { int32_t id; float logprob; } smp_logprob;

/* llama.cpp's defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05,
 * penalties off, last_n 64, seed 0xFFFFFFFF replaced by a random one. */
smp_params smp_default_params(void);

typedef struct smp_ctx smp_ctx;

/* The rule smp_new checks its parameters with (finite penalties, a
 * repeat penalty > 0, ...): callers validate with it, so the two agree. */
bool smp_params_valid(const smp_params *p);

/* n_vocab > 0; history_max bounds the tokens remembered for penalties.
 * PK_EINVAL for n_vocab <= 0, history_max < 0, penalty_last_n < -1, a NaN
 * parameter, a negative min_keep or a repeat_penalty that is not a
 * positive finite number;
 * PK_ENOMEM.  The RNG is mt19937 seeded with the seed's low 32 bits, as
 * std::mt19937(seed) in the reference engine. */
pk_status smp_new(const smp_params *p, int32_t n_vocab, int32_t history_max, smp_ctx **out);
void smp_free(smp_ctx *s);                      /* NULL is a no-op */
void smp_reset(smp_ctx *s);                     /* forgets history, reseeds */

/* The seed in use: params.seed, or the random 32-bit one drawn at smp_new
 * when it was 0xFFFFFFFF (never 0xFFFFFFFF itself; report it so a run can
 * be reproduced). */
uint64_t smp_get_seed(const smp_ctx *s);

/* Remembers a token (prompt or generated) for the penalties; the caller
 * accepts the sampled token too (smp_sample does not).  Ids outside
 * [0, n_vocab) are ignored. */
void smp_accept(smp_ctx *s, int32_t token);

/* Picks the next token from n_vocab logits (not modified).  When top != NULL
 * and n_top > 0, writes the n_top most likely tokens with their log-probs,
 * most likely first (ties: lower id first; entries past n_vocab are
 * {-1, -INFINITY}); *chosen_logprob (may be NULL) gets the chosen one's.
 * Logits may be -INFINITY (masked) but not NaN.  Every call with temp > 0
 * consumes exactly one RNG draw (two mt19937 outputs).  Cost: O(n_vocab)
 * passes, plus O(n_vocab log k) at worst for top-k (a full sort when
 * top_k >= n_vocab, as the reference), plus O(kept log n_vocab) for top-p
 * without top-k (no full sort); log-probs add an O(n_vocab) pass of exp in
 * double. */
int32_t smp_sample(smp_ctx *s, const float *logits, smp_logprob *top, int n_top,
                   float *chosen_logprob);

/* Greedy argmax, ties to the lower id. */
int32_t smp_argmax(const float *logits, int32_t n);

#endif
