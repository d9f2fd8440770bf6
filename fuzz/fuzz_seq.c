/*
 * fuzz_seq.c - libFuzzer entry for sequences of operations over the KV
 * cache (src/kv) and the pool tree (src/pool), each checked against a
 * naive model after every step.
 *
 * The input is a program: byte 0 picks the machine (even: KV cache, odd:
 * pool tree), then each operation takes an opcode byte and its operand
 * bytes.  The naive models are plain arrays with the documented rules
 * written out the slow way:
 *   KV    cells {pos, member set, owner}; find_slot = lowest free cells;
 *         rm frees a cell when its last member leaves and gives the charge
 *         to the lowest remaining member; cp adds members; keep drops every
 *         other sequence; add refuses a shared cell and frees cells moved
 *         below 0; take moves charges.  Then kv_check, and every cell, every
 *         per-sequence count, pos_min / pos_max and common are compared.
 *   pool  nodes {id, parent, D, tokens}; plan = the longest common prefix or
 *         the given branch_pos, conflicts at the first differing token;
 *         remove only leaves; ids never reused.  Then pool_tree_check, and
 *         every node, n_children, pool_match against a plain comparison,
 *         pool_subtree order and pool_depth are compared.
 * Any disagreement aborts (libFuzzer saves the input).
 */
#include <stdlib.h>
#include <string.h>

#include "../src/kv/kv.h"
#include "../src/pool/pool.h"

#define NC 40                   /* cells */
#define NS 10                   /* sequence ids used (0..8, and 255 as "far") */

static void need(bool ok)
{
    if (!ok) abort();
}

typedef struct prog {
    const uint8_t *p;
    size_t n, i;
} prog;

static int byte(prog *g) { return g->i < g->n ? g->p[g->i++] : -1; }
static int arg(prog *g, int mod)
{
    int b = byte(g);
    return b < 0 ? 0 : b % mod;
}
static kv_seq seq_of(int b) { return b == NS - 1 ? KV_MAX_SEQ - 1 : b; }
static kv_pos pos_of(int b) { return b == 0 ? -1 : b - 1; }   /* -1: the open end */

/* ---- the KV cache ---------------------------------------------------- */

typedef struct ncell {
    kv_pos pos;                 /* -1 free */
    bool mem[KV_MAX_SEQ];
    kv_seq owner;
} ncell;

static bool in_range(kv_pos p, kv_pos p0, kv_pos p1) { return p >= (p0 < 0 ? 0 : p0) && (p1 < 0 || p < p1); }
static int n_members(const ncell *c)
{
    int n = 0;
    for (int s = 0; s < KV_MAX_SEQ; s++) n += c->mem[s];
    return n;
}
static void leave(ncell *c, kv_seq s)
{
    c->mem[s] = false;
    if (c->owner != s) return;
    c->owner = -1;
    for (int t = 0; t < KV_MAX_SEQ && c->owner < 0; t++)
        if (c->mem[t]) c->owner = t;
    if (c->owner < 0) c->pos = -1;
}

static void kv_compare(const kv_cache *kv, const ncell *m)
{
    need(kv_check(kv));
    int used = 0, end = 0;
    int cells[KV_MAX_SEQ] = {0}, owned[KV_MAX_SEQ] = {0};
    kv_pos lo[KV_MAX_SEQ], hi[KV_MAX_SEQ];
    for (int s = 0; s < KV_MAX_SEQ; s++) lo[s] = hi[s] = -1;
    for (int i = 0; i < NC; i++) {
        need(kv_cell_pos(kv, i) == m[i].pos);
        need(kv_cell_owner(kv, i) == (m[i].pos < 0 ? -1 : m[i].owner));
        if (m[i].pos < 0) continue;
        used++;
        end = i + 1;
        owned[m[i].owner]++;
        for (int s = 0; s < KV_MAX_SEQ; s++) {
            need(kv_seqset_has(kv_cell_seqs(kv, i), s) == m[i].mem[s]);
            if (!m[i].mem[s]) continue;
            cells[s]++;
            if (lo[s] < 0 || m[i].pos < lo[s]) lo[s] = m[i].pos;
            if (m[i].pos > hi[s]) hi[s] = m[i].pos;
        }
    }
    need(kv_used(kv) == used && kv_cells_end(kv) == end);
    for (int b = 0; b < NS; b++) {
        kv_seq s = seq_of(b);
        need(kv_seq_cells(kv, s) == cells[s] && kv_seq_owned(kv, s) == owned[s]);
        need(kv_seq_pos_min(kv, s) == lo[s] && kv_seq_pos_max(kv, s) == hi[s]);
    }
}

static void run_kv(prog *g)
{
    kv_params kp = { .n_layer = 1, .n_ctx = NC, .n_embd_k = 2, .n_embd_v = 2, .type = TQ_F32 };
    kv_cache *kv;
    if (kv_new(&kp, &kv) != PK_OK) return;
    static ncell m[NC];
    for (int i = 0; i < NC; i++) m[i] = (ncell){ .pos = -1, .owner = -1 };
    for (int op; (op = byte(g)) >= 0;) {
        kv_seq s = seq_of(arg(g, NS));
        switch (op % 8) {
        case 0: {                                   /* a batch: find cells, occupy them */
            int n = arg(g, 6) + 1, got[8], want[8], k = 0;
            for (int i = 0; i < NC && k < n; i++)
                if (m[i].pos < 0) want[k++] = i;
            pk_status st = kv_find_slot(kv, n, got);
            need(st == (k == n ? PK_OK : PK_EFULL));
            if (st != PK_OK) break;
            for (int j = 0; j < n; j++) {
                need(got[j] == want[j]);
                kv_seq mem[3] = { s, seq_of(arg(g, NS)), seq_of(arg(g, NS)) };
                int nm = arg(g, 3) + 1;
                kv_pos pos = arg(g, 48);
                kv_cell_set(kv, got[j], pos, mem, nm);
                ncell *c = &m[got[j]];
                c->pos = pos;
                c->owner = mem[0];
                for (int t = 0; t < nm; t++) c->mem[mem[t]] = true;
            }
            break;
        }
        case 1: {                                   /* rm, also of every sequence */
            bool all = arg(g, 4) == 0;
            kv_pos p0 = pos_of(arg(g, 50)), p1 = pos_of(arg(g, 50));
            kv_seq_rm(kv, all ? -1 : s, p0, p1);
            for (int i = 0; i < NC; i++) {
                if (m[i].pos < 0 || !in_range(m[i].pos, p0, p1)) continue;
                if (all) m[i] = (ncell){ .pos = -1, .owner = -1 };
                else if (m[i].mem[s]) leave(&m[i], s);
            }
            break;
        }
        case 2: {
            kv_seq d = seq_of(arg(g, NS));
            kv_pos p0 = pos_of(arg(g, 50)), p1 = pos_of(arg(g, 50));
            kv_seq_cp(kv, s, d, p0, p1);
            for (int i = 0; i < NC; i++)
                if (m[i].pos >= 0 && m[i].mem[s] && in_range(m[i].pos, p0, p1)) m[i].mem[d] = true;
            break;
        }
        case 3:
            kv_seq_keep(kv, s);
            for (int i = 0; i < NC; i++) {
                if (m[i].pos < 0) continue;
                if (!m[i].mem[s]) {
                    m[i] = (ncell){ .pos = -1, .owner = -1 };
                    continue;
                }
                memset(m[i].mem, 0, sizeof m[i].mem);
                m[i].mem[s] = true;
                m[i].owner = s;
            }
            break;
        case 4: {                                   /* a shift: refused on shared cells */
            kv_pos p0 = pos_of(arg(g, 50)), p1 = pos_of(arg(g, 50));
            kv_pos delta = arg(g, 40) - 20;
            bool shared = false;
            for (int i = 0; i < NC; i++)
                if (m[i].pos >= 0 && m[i].mem[s] && in_range(m[i].pos, p0, p1) && n_members(&m[i]) > 1)
                    shared = true;
            pk_status st = kv_seq_add(kv, s, p0, p1, delta);
            need(st == (shared ? PK_EINVAL : PK_OK));
            if (shared) break;
            for (int i = 0; i < NC; i++) {
                if (m[i].pos < 0 || !m[i].mem[s] || !in_range(m[i].pos, p0, p1)) continue;
                if (m[i].pos + delta < 0) m[i] = (ncell){ .pos = -1, .owner = -1 };
                else m[i].pos += delta;
            }
            break;
        }
        case 5: {
            kv_pos p0 = pos_of(arg(g, 50)), p1 = pos_of(arg(g, 50));
            kv_seq_take(kv, s, p0, p1);
            for (int i = 0; i < NC; i++)
                if (m[i].pos >= 0 && m[i].mem[s] && in_range(m[i].pos, p0, p1)) m[i].owner = s;
            break;
        }
        case 6: {
            kv_seq b = seq_of(arg(g, NS));
            kv_pos p0 = pos_of(arg(g, 50)), p1 = pos_of(arg(g, 50));
            int n = 0;
            for (int i = 0; i < NC; i++) n += m[i].pos >= 0 && m[i].mem[s] && m[i].mem[b] && in_range(m[i].pos, p0, p1);
            need(kv_seq_common(kv, s, b, p0, p1) == n);
            int32_t excl[KV_MAX_SEQ];
            kv_excl_counts(kv, excl);
            for (int bb = 0; bb < NS; bb++) {
                kv_seq t = seq_of(bb);
                int alone = 0;
                for (int i = 0; i < NC; i++) alone += m[i].pos >= 0 && m[i].mem[t] && n_members(&m[i]) == 1;
                need(excl[t] == alone);
            }
            break;
        }
        default:
            kv_clear(kv);
            for (int i = 0; i < NC; i++) m[i] = (ncell){ .pos = -1, .owner = -1 };
        }
        kv_compare(kv, m);
    }
    kv_free(kv);
}

/* ---- the pool tree --------------------------------------------------- */

#define NP 8
#define NT 24

typedef struct nnode {
    int32_t id, parent, d, n;
    int32_t tok[NT];
    bool pinned;
} nnode;

static int32_t lcp(const int32_t *a, int32_t na, const int32_t *b, int32_t nb)
{
    int32_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

static int find(const nnode *m, int n, int32_t id)
{
    for (int i = 0; i < n; i++)
        if (m[i].id == id) return i;
    return -1;
}

static void pool_compare(const pool_tree *t, const nnode *m, int n, prog *g)
{
    need(pool_tree_check(t) && pool_count(t) == n);
    int depth = 0;
    for (int i = 0; i < n; i++) {
        const pool_node *p = pool_at(t, i);
        need(p->id == m[i].id && p->parent == m[i].parent && p->branch_pos == m[i].d && p->prefix_len == m[i].n);
        need(!memcmp(p->tokens, m[i].tok, (size_t)m[i].n * sizeof(int32_t)) && p->pinned == m[i].pinned);
        int kids = 0, dep = 1;
        for (int j = 0; j < n; j++) kids += m[j].parent == m[i].id;
        need(p->n_children == kids);
        for (int j = i; m[j].parent > 0; j = find(m, n, m[j].parent)) dep++;
        if (dep > depth) depth = dep;
    }
    need(pool_depth(t) == depth);
    /* A prompt from the input: the hash match equals a plain comparison. */
    int32_t prompt[NT + 4];
    uint64_t ph[NT + 5];
    int32_t np = arg(g, NT + 4);
    for (int32_t i = 0; i < np; i++) prompt[i] = arg(g, 3);
    pool_hash_chain(prompt, np, ph);
    for (int i = 0; i < n; i++) need(pool_match(pool_at(t, i), prompt, np, ph) == lcp(m[i].tok, m[i].n, prompt, np));
    if (n > 0) {
        /* The subtree of one node: leaves first, exactly its descendants. */
        int r = arg(g, n);
        int32_t ids[NP];
        int32_t k = pool_subtree(t, m[r].id, ids, NP);
        int want = 0;
        for (int i = 0; i < n; i++) {
            bool under = false;
            for (int j = i; j >= 0 && !under; j = m[j].parent > 0 ? find(m, n, m[j].parent) : -1) under = j == r;
            want += under;
        }
        need(k == want);
        for (int32_t a = 0; a < k; a++)
            for (int32_t b = a + 1; b < k; b++) need(!pool_is_ancestor(t, ids[a], ids[b]) || ids[a] == ids[b]);
    }
}

static void run_pool(prog *g)
{
    pool_tree *t;
    if (pool_tree_new(NP, &t) != PK_OK) return;
    static nnode m[NP];
    int n = 0;
    int32_t next_id = 1;
    for (int op; (op = byte(g)) >= 0;) {
        switch (op % 4) {
        case 0: {                                   /* plan and add a root or a fork */
            int32_t parent = n > 0 && arg(g, 3) ? m[arg(g, n)].id : -1;
            int32_t len = arg(g, NT) + 1, tok[NT];
            int pi = parent > 0 ? find(m, n, parent) : -1;
            /* mostly the parent's tokens then new ones, so forks happen */
            int32_t keep = pi >= 0 ? arg(g, m[pi].n + 2) : 0;
            for (int32_t i = 0; i < len; i++) tok[i] = i < keep && pi >= 0 && i < m[pi].n ? m[pi].tok[i] : arg(g, 3);
            int32_t bp = arg(g, 4) == 0 ? -1 : arg(g, NT + 2);
            /* the naive plan */
            pk_status want = PK_OK;
            int32_t d = 0, conflict = -1;
            if (pi >= 0) {
                int32_t c = lcp(m[pi].tok, m[pi].n, tok, len);
                if (bp < 0) d = c;
                else if (bp > m[pi].n || bp > len) want = PK_EINVAL;
                else if (c < bp) want = PK_ECONFLICT, conflict = c;
                else d = bp;
                if (want == PK_OK && d == len) want = PK_EINVAL;
            }
            int32_t gd = -2, gc = -2;
            pk_status st = pool_plan(t, parent, tok, len, bp, &gd, &gc);
            need(st == want);
            if (st == PK_OK) need(gd == d);
            if (st == PK_ECONFLICT) need(gc == conflict);
            if (st != PK_OK) break;
            int32_t id;
            st = pool_add(t, parent, tok, len, bp, 0, 0, &id);
            need(st == (n == NP ? PK_EFULL : PK_OK));
            if (st != PK_OK) break;
            need(id == next_id);
            m[n] = (nnode){ .id = next_id++, .parent = parent, .d = d, .n = len };
            memcpy(m[n].tok, tok, sizeof tok);
            n++;
            break;
        }
        case 1: {                                   /* remove: leaves only */
            if (n == 0) break;
            int i = arg(g, n);
            bool leaf = true;
            for (int j = 0; j < n; j++) leaf &= m[j].parent != m[i].id;
            need(pool_remove(t, m[i].id) == (leaf ? PK_OK : PK_ECONFLICT));
            if (leaf) {
                memmove(&m[i], &m[i + 1], (size_t)(n - i - 1) * sizeof m[0]);
                n--;
            }
            break;
        }
        case 2:
            if (n > 0) {
                int i = arg(g, n);
                m[i].pinned = !m[i].pinned;
                pool_set_pinned(t, m[i].id, m[i].pinned);
            }
            break;
        default:                                    /* an id that is gone or never was */
            need(pool_get(t, next_id) == NULL && pool_remove(t, next_id) == PK_ENOTFOUND);
        }
        pool_compare(t, m, n, g);
    }
    pool_tree_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    prog g = { data, size, 0 };
    int which = byte(&g);
    if (which < 0) return 0;
    if (which % 2 == 0) run_kv(&g);
    else run_pool(&g);
    return 0;
}
