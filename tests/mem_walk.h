/*
 * mem_walk.h - a random walk of sequence operations over the memory seam
 * (src/mem): extends (with a checkpoint asked inside, sometimes), shares of
 * a random prefix, keeps, drops and one-token steps over 6 sequences, each
 * sequence's holding and resumability checked after every operation, and
 * the caller's own accounting check.  Used by test_hybrid and test_swa;
 * header-only so each test stays one file.
 */
#ifndef MEM_WALK_H
#define MEM_WALK_H

#include "ref.h"
#include "../src/mem/mem.h"

enum { WALK_SEQS = 6 };

/* feed(seq, p0, p1): the tokens [p0, p1) into seq.  Sequences stay under
 * max_len positions, extends add at most max_add.  len[WALK_SEQS] ends as
 * what each sequence holds. */
static inline void mem_walk(mem *m, uint64_t *rng, pk_status (*feed)(kv_seq, int, int), int max_len, int max_add,
                            void (*check)(void), int32_t *len)
{
#define WALK_BELOW(n) ((*rng ^= *rng >> 12, *rng ^= *rng << 25, *rng ^= *rng >> 27), \
                       (n) ? (uint32_t)((*rng * 0x2545f4914f6cdd1dull) >> 32) % (uint32_t)(n) : 0u)
    mem_clear(m);
    for (int s = 0; s < WALK_SEQS; s++) len[s] = 0;
    for (int op = 0; op < 300; op++) {
        kv_seq a = (kv_seq)WALK_BELOW(WALK_SEQS), b = (kv_seq)WALK_BELOW(WALK_SEQS);
        switch (WALK_BELOW(6)) {
        case 0:   /* extend a by a few tokens, maybe with a checkpoint inside */
            if (len[a] + max_add < max_len) {
                int add = 1 + (int)WALK_BELOW(max_add);
                if (add > 1 && WALK_BELOW(2)) mem_checkpoint_at(m, a, len[a] + add / 2);
                if (feed(a, len[a], len[a] + add) == PK_OK) len[a] += add;
            }
            break;
        case 1:
            if (a != b) {
                mem_drop(m, b);
                len[b] = mem_share(m, a, b, 0, (int32_t)WALK_BELOW((uint32_t)len[a] + 1));
            }
            break;
        case 2: len[a] = mem_keep(m, a, (int32_t)WALK_BELOW((uint32_t)len[a] + 1)); break;
        case 3: mem_drop(m, a), len[a] = 0; break;
        default:
            if (len[a] > 0 && len[a] < max_len && feed(a, len[a], len[a] + 1) == PK_OK) len[a]++;
            break;
        }
        CHECK(mem_holds(m, a, len[a]) && mem_holds(m, b, len[b]));
        CHECK(len[a] == 0 || mem_can_resume(m, a, len[a]));
        check();
    }
#undef WALK_BELOW
}

#endif
