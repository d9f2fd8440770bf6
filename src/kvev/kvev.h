/*
 * kvev.h - KV events: the cache's content as fixed blocks of tokens, and
 * what entered and left it since the last look (docs/kv-events.md).
 *
 * DESIGN
 *   A router that scores replicas by cached prefix (llm-d's precise
 *   prefix-cache scorer) learns what each replica holds from events in
 *   vLLM's format: a block is block_size consecutive tokens of a sequence,
 *   starting at a multiple of block_size, named by a hash chained from its
 *   parent's (the block before it), so a block's hash names its whole
 *   prefix.  Only full blocks exist.
 *
 *   polykv holds token prefixes in holders (a slot's history, a parked
 *   one, a pool, a RAM-tier record).  Holders share cells by membership,
 *   and two holders of the same prefix hold the same blocks: a block is
 *   counted once per holder and medium, and it is stored while some
 *   holder has it and removed when the last lets go.  The tracker is
 *   told, after a step, what each holder holds now (kvev_hold) and
 *   answers with the net change since the last kvev_flush: a block whose
 *   count fell to 0 and rose again in the same step is no event.
 *
 *     holder h : hash[0..nb)  its blocks' chained hashes, nb = n / block_size
 *     table    : hash -> { count[medium], parent, tokens[block_size], was }
 *     events   : BlockStored runs (consecutive blocks, one parent), then
 *                BlockRemoved lists, per medium, in the order they happened
 *
 *   hash[i] = XXH3_64(seed, le64(hash[i-1]) || le32(tokens of block i)),
 *   hash[-1] = 0; a hash of 0 becomes 1 (0 marks an empty table entry).
 *
 * INVARIANTS (kvev_check)
 *   - An entry's count per medium is the number of holders in that medium
 *     whose blocks include it; entries with every count 0 exist only
 *     between a kvev_hold and the kvev_flush that reports them.
 *   - After kvev_flush, the blocks a subscriber was told about (stored
 *     and not removed since) are exactly the table's entries per medium.
 *
 * COST
 *   kvev_hold is O(blocks added + blocks dropped) for the holder, plus
 *   O(1) when nothing changed; kvev_flush is O(blocks touched).
 *
 * Threads: one (the engine thread); the tracker has no locks.
 */
#ifndef KVEV_H
#define KVEV_H

#include "../common/pk.h"

/* Where a block is: llm-d scores the first above the second. */
typedef enum kvev_medium { KVEV_GPU = 0, KVEV_CPU = 1, KVEV_N_MEDIUM } kvev_medium;
const char *kvev_medium_name(kvev_medium m);   /* "GPU", "CPU" */

typedef enum kvev_kind { KVEV_STORED, KVEV_REMOVED, KVEV_CLEARED } kvev_kind;

/* One event of a batch; its hashes and tokens are ranges of the list's
 * arrays. */
typedef struct kvev_event {
    kvev_kind kind;
    kvev_medium medium;
    int32_t h0, n_hash;         /* hashes [h0, h0 + n_hash) of kvev_list.hash */
    bool has_parent;            /* STORED: the first block has a parent */
    uint64_t parent;
    int32_t t0, n_tok;          /* STORED: tokens [t0, t0 + n_tok) of kvev_list.tok */
} kvev_event;

/* A step's events, owned by the tracker until the next kvev_flush. */
typedef struct kvev_list {
    const kvev_event *ev;
    int32_t n_ev;
    const uint64_t *hash;
    const int32_t *tok;
    int32_t block_size;
} kvev_list;

typedef struct kvev_tracker kvev_tracker;

/* ---- create / destroy ---- */

/* A tracker of n_holders holders (ids [0, n_holders)) over blocks of
 * block_size tokens (1 .. 1024), hashes seeded by seed.  PK_EINVAL,
 * PK_ENOMEM. */
pk_status kvev_new(int32_t block_size, int32_t n_holders, uint64_t seed, kvev_tracker **out);
void kvev_free(kvev_tracker *t);     /* NULL is a no-op */
int32_t kvev_block_size(const kvev_tracker *t);

/* ---- use ---- */

/* Holder h now holds tokens[0, n) in medium m, of which the first `same`
 * are the tokens it held at the last call (a cut since then lowers it;
 * 0 for a holder that is new or was replaced).  Moving to another medium
 * counts as new.  PK_ENOMEM leaves h holding what it held before. */
pk_status kvev_hold(kvev_tracker *t, int32_t h, kvev_medium m, const int32_t *tokens, int32_t n, int32_t same);
/* Holder h holds nothing (never fails). */
void kvev_release(kvev_tracker *t, int32_t h);
/* Every holder holds nothing (a removal for every block). */
void kvev_clear(kvev_tracker *t);
/* The blocks h holds now, and its medium. */
int32_t kvev_holder_blocks(const kvev_tracker *t, int32_t h);

/* The net change since the last flush, as events: stored runs, then one
 * removal list per medium.  The first flush of a tracker starts with a
 * clear (a subscriber forgets what an earlier process told it).  The list
 * is valid until the next call on t.  PK_ENOMEM when the list could not
 * be built: it is empty, and the next flush starts with a clear and sends
 * every block held as stored (a subscriber then starts over). */
pk_status kvev_flush(kvev_tracker *t, kvev_list *out);

/* Blocks held in medium m (distinct hashes). */
int32_t kvev_blocks(const kvev_tracker *t, kvev_medium m);
/* How many leading blocks of tokens[0, n) are held in some medium, and in
 * *medium the best medium of the last of them (GPU before CPU).  What a
 * router reading the events scores, for tests. */
int32_t kvev_match(const kvev_tracker *t, const int32_t *tokens, int32_t n, kvev_medium *medium);

/* The chained hash of block tokens[0, block_size) after parent (0: the
 * first block). */
uint64_t kvev_hash(const kvev_tracker *t, uint64_t parent, const int32_t *tokens);

/* Recomputes every count from the holders; true when consistent. */
bool kvev_check(const kvev_tracker *t);

#endif
