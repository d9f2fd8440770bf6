/*
 * smp_vs_llama.c - polykv's sampler (src/sample/smp.h) against the
 * reference engine's sampler chain (libllama), token for token: the same
 * logits, parameters and seed into both, llama.cpp's chain built as its
 * common/sampling.cpp builds the default one (penalties, top-k, top-p,
 * min-p, temperature, dist, with min_keep; the samplers that are off by
 * default left out, being no-ops).  Both accept the reference's token, so their histories stay
 * equal and one difference does not hide the next.  Built by
 * bench/smp_vs_llama.sh against the reference build beside the project
 * (never by the Makefile: polykv does not link it).
 *
 * The logits look like a model's: a normal bulk whose spread changes from
 * step to step, a few strong candidates on top, now and then a masked one.
 *
 * Prints one line per parameter set and seed with the differing steps, then
 * the total; exits 1 if any token differs.
 *
 * Usage: smp_vs_llama [N_VOCAB [STEPS]]
 */
#include "llama.h"
#include "sample/mt.h"
#include "sample/smp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct cfg {
    const char *name;
    float temp;
    int32_t top_k;
    float top_p, min_p, repeat, freq, present;
    int32_t min_keep;
} cfg;

static const cfg CFGS[] = {
    { "default", 0.8f, 40, 0.95f, 0.05f, 1, 0, 0, 0 },
    { "k0 p.95 m.05", 0.8f, 0, 0.95f, 0.05f, 1, 0, 0, 0 },
    { "k0 p.95", 0.8f, 0, 0.95f, 0.0f, 1, 0, 0, 0 },
    { "k0 m.05", 0.8f, 0, 1.0f, 0.05f, 1, 0, 0, 0 },
    { "temp only", 0.8f, 0, 1.0f, 0.0f, 1, 0, 0, 0 },
    { "k40 only", 0.8f, 40, 1.0f, 0.0f, 1, 0, 0, 0 },
    { "k5 p.5 t1.5", 1.5f, 5, 0.5f, 0.0f, 1, 0, 0, 0 },
    { "t1", 1.0f, 40, 0.95f, 0.05f, 1, 0, 0, 0 },
    { "penalties", 0.8f, 40, 0.95f, 0.05f, 1.1f, 0.1f, 0.2f, 0 },
    { "k>=V", 0.8f, 1 << 30, 0.95f, 0.0f, 1, 0, 0, 0 },
    { "k>=V m.1", 0.7f, 1 << 30, 1.0f, 0.1f, 1, 0, 0, 0 },
    { "k1", 0.8f, 1, 0.95f, 0.05f, 1, 0, 0, 0 },
    { "k0 p.99 t2", 2.0f, 0, 0.99f, 0.0f, 1, 0, 0, 0 },
    { "m1.5", 0.8f, 0, 1.0f, 1.5f, 1, 0, 0, 0 },
    { "k0 p.9999999", 1.0f, 0, 0.9999999f, 0.0f, 1, 0, 0, 0 },
    { "k0 p.5 keep50", 0.8f, 0, 0.5f, 0.05f, 1, 0, 0, 50 },
    { "k40 p.3 m.2 keep10", 0.8f, 40, 0.3f, 0.2f, 1, 0, 0, 10 },
    { "k0 m.3 keep7", 0.8f, 0, 1.0f, 0.3f, 1, 0, 0, 7 },
    { "m1.5 keep3", 0.8f, 0, 1.0f, 1.5f, 1, 0, 0, 3 },
    { "k0 p.95 m.05 keep300", 1.0f, 0, 0.95f, 0.05f, 1, 0, 0, 300 },
    { "k20 keep30", 0.8f, 20, 0.9f, 0.05f, 1, 0, 0, 30 },
};

static mt19937 gen;

static float normal(void)                  /* Box-Muller; any spread will do */
{
    double u1 = mt_uniform(&gen), u2 = mt_uniform(&gen);
    return (float)(sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2));
}

static void fill_logits(float *l, int32_t V, int step)
{
    float scale = 1.0f + (float)(step % 7);
    for (int32_t i = 0; i < V; i++) l[i] = normal() * scale;
    for (int j = 0; j <= step % 5; j++) l[mt_next(&gen) % (uint32_t)V] += 8.0f + 2.0f * normal();
    if (step % 11 == 0) l[mt_next(&gen) % (uint32_t)V] = -INFINITY;
}

static struct llama_sampler *reference_chain(const cfg *c, int32_t V, uint32_t seed)
{
    struct llama_sampler *ch = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(ch, llama_sampler_init_penalties(V, 64, c->repeat, c->freq, c->present));
    llama_sampler_chain_add(ch, llama_sampler_init_top_k(c->top_k));
    llama_sampler_chain_add(ch, llama_sampler_init_top_p(c->top_p, (size_t)c->min_keep));
    llama_sampler_chain_add(ch, llama_sampler_init_min_p(c->min_p, (size_t)c->min_keep));
    llama_sampler_chain_add(ch, llama_sampler_init_temp_ext(c->temp, 0.0f, 1.0f));
    llama_sampler_chain_add(ch, llama_sampler_init_dist(seed));
    return ch;
}

int main(int argc, char **argv)
{
    int32_t V = argc > 1 ? atoi(argv[1]) : 32000;
    int steps = argc > 2 ? atoi(argv[2]) : 200;
    if (V < 2 || steps < 1) {
        fprintf(stderr, "usage: smp_vs_llama [N_VOCAB >= 2 [STEPS >= 1]]\n");
        return 2;
    }
    static const uint32_t seeds[] = { 42, 1, 123456 };
    float *l = malloc((size_t)V * sizeof *l);
    llama_token_data *cur = malloc((size_t)V * sizeof *cur);
    if (!l || !cur) return 1;
    mt_seed(&gen, 12345);
    long total = 0;
    for (size_t ci = 0; ci < sizeof CFGS / sizeof CFGS[0]; ci++) {
        const cfg *c = &CFGS[ci];
        for (size_t si = 0; si < sizeof seeds / sizeof seeds[0]; si++) {
            struct llama_sampler *ch = reference_chain(c, V, seeds[si]);
            smp_params sp = smp_default_params();
            sp.temp = c->temp;
            sp.top_k = c->top_k;
            sp.top_p = c->top_p;
            sp.min_p = c->min_p;
            sp.min_keep = c->min_keep;
            sp.repeat_penalty = c->repeat;
            sp.frequency_penalty = c->freq;
            sp.presence_penalty = c->present;
            sp.penalty_last_n = 64;
            sp.seed = seeds[si];
            smp_ctx *s = NULL;
            if (smp_new(&sp, V, 4096, &s) != PK_OK) return 1;
            int bad = 0, first = -1;
            for (int t = 0; t < steps; t++) {
                fill_logits(l, V, t);
                for (int32_t i = 0; i < V; i++) cur[i] = (llama_token_data){ i, l[i], 0.0f };
                llama_token_data_array arr = { cur, (size_t)V, -1, false };
                llama_sampler_apply(ch, &arr);
                llama_token want = arr.data[arr.selected].id;
                int32_t got = smp_sample(s, l, NULL, 0, NULL);
                if (got != want && bad++ == 0) first = t;
                llama_sampler_accept(ch, want);
                smp_accept(s, want);
            }
            printf("%-14s seed %-7u V %d: %d of %d differ", c->name, (unsigned)seeds[si], (int)V, bad, steps);
            if (bad) printf(" (first at step %d)", first);
            printf("\n");
            total += bad;
            llama_sampler_free(ch);
            smp_free(s);
        }
    }
    printf("total differing: %ld\n", total);
    free(l);
    free(cur);
    return total != 0;
}
