/*
 * eng_draft.c - a draft model's guesses (--spec-type draft-simple, -md;
 * docs/speculative.md).  A smaller model with the target's vocabulary
 * decodes a few tokens ahead of every decoding session, greedily, and the
 * step verifies them like any guess (eng_spec.c, sample_and_emit): what
 * the draft says changes how many tokens a step gives, never which.
 *
 * The draft's cache follows the sessions lazily.  Its sequence i holds
 * the draft's cells for slot i's tokens d_hist[0..d_n).  Before a step,
 * every session that guesses brings its sequence up to its context (the
 * slot's history and the token the step decodes): the common prefix stays,
 * which holds the guesses the step before kept, the rest is cut and the
 * missing tokens are decoded, at most CATCHUP tokens a step in all so a
 * long new prompt is caught up over several steps and never stalls the
 * running sessions.  A sequence that holds less of its context than
 * another slot's sequence shares that one's cells by membership first (a
 * pool's prefix, a sibling agent's task, a conversation that moved), as
 * the target's cache does.  Then the guessing sessions decode together,
 * one token each per round, so a round reads the draft's weights once for
 * all of them; a session stops at its limit, at an end of generation,
 * where its grammar allows nothing, or where the draft's own probability
 * of its token falls under --spec-draft-p-min.
 *
 * llama-server keeps one draft context per slot and re-evaluates the
 * draft's prompt per slot; polykv shares the draft's prefixes between
 * slots and batches every slot's draft rounds into one pass each.
 *
 * A Qwen3.5 file's MTP block (--spec-type draft-mtp) drafts the same way
 * with no cache to follow: the target's context runs the block with every
 * pass (model_mtp.c: its K/V are a layer of the target's cells), so a
 * round is model_mtp_draft over the guessing sessions, its first input
 * the trunk's state before the token the step decodes, each next one the
 * block's own output.  The rounds' cells hold only the block's K/V and
 * leave the sessions' sequences before the step's batch.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../grammar/gram.h"
#include "eng_impl.h"

#define CATCHUP 512             /* draft tokens decoded a step to catch sessions up */
#define SHARE_FROM 16           /* a catch-up this long first looks for another slot's cells */
#define VOCAB_SLACK 128         /* the ids a draft's vocabulary may have more or fewer of */

const char *eng_draft_compatible(const model *target, const model *draft)
{
    const tok_vocab *a = model_vocab(target), *b = model_vocab(draft);
    if (model_get_hparams(draft)->hybrid) return "a hybrid draft model is not supported (use a dense one)";
    if (tok_get_kind(a) != tok_get_kind(b)) return "the draft model's tokenizer is of another kind";
    if (tok_bos(a) != tok_bos(b) || tok_eos(a) != tok_eos(b) || tok_add_bos(a) != tok_add_bos(b))
        return "the draft model's special tokens differ from the target's";
    int32_t na = model_get_hparams(target)->n_vocab, nb = model_get_hparams(draft)->n_vocab;
    if (abs(na - nb) > VOCAB_SLACK) return "the draft model's vocabulary differs in size from the target's";
    int32_t n = MIN(MIN(na, nb), MIN(tok_n_vocab(a), tok_n_vocab(b)));
    for (int32_t i = 0; i < n; i++) {
        size_t la, lb;
        const char *ta = tok_text(a, i, &la), *tb = tok_text(b, i, &lb);
        if (la != lb || memcmp(ta, tb, la)) return "the draft model's tokens differ from the target's";
    }
    return NULL;
}

static pk_status ctx_new(eng *e)
{
    model_ctx_params cp = eng_ctx_params(e);
    cp.n_ubatch = MIN(cp.n_ubatch, CATCHUP);
    cp.n_rs = 0;
    cp.type_k = cp.type_v = TQ_F16;        /* llama-server's draft cache (its -ctkd / -ctvd default) */
    cp.swa_full = true;                    /* a draft's cells follow its target's by hand (eng_draft.c) */
    cp.tp = model_ctx_tp(e->ctx);          /* never two pools spinning on the same cores */
    pk_status st = model_ctx_new(e->p.draft, &cp, &e->draft.ctx);
    if (st == PK_OK && (st = mem_new(e->draft.ctx, &e->draft.mem)) != PK_OK) {
        model_ctx_free(e->draft.ctx);
        e->draft.ctx = NULL;
    }
    return st;
}

pk_status eng_draft_init(eng *e)
{
    eng_draft *d = &e->draft;
    d->mtp = e->p.spec.kind == SPEC_DRAFT_MTP;
    if (d->mtp && !model_has_mtp(e->m)) return PK_EINVAL;
    if (!e->p.draft && !d->mtp) return PK_OK;
    if (e->p.draft && eng_draft_compatible(e->m, e->p.draft)) return PK_EINVAL;
    d->n_vocab = d->mtp ? e->n_vocab : model_get_hparams(e->p.draft)->n_vocab;
    d->n_cand = MIN(d->n_vocab, e->n_vocab);
    int32_t cap = CATCHUP + e->p.n_slots;
    d->tok = malloc((size_t)cap * sizeof *d->tok);
    d->pos = malloc((size_t)cap * sizeof *d->pos);
    d->nseq = malloc((size_t)cap * sizeof *d->nseq);
    d->seq = calloc((size_t)cap, sizeof *d->seq);
    d->want = malloc((size_t)cap * sizeof *d->want);
    d->row_of = malloc((size_t)e->p.n_slots * sizeof *d->row_of);
    d->logits = malloc((size_t)e->p.n_slots * d->n_vocab * sizeof *d->logits);
    if (!d->tok || !d->pos || !d->nseq || !d->seq || !d->want || !d->row_of || !d->logits) return PK_ENOMEM;
    if (d->mtp) {
        size_t rows = (size_t)e->p.n_slots * model_get_hparams(e->m)->n_embd * sizeof(float);
        return (d->h_in = malloc(rows)) && (d->h_out = malloc(rows)) ? PK_OK : PK_ENOMEM;
    }
    for (int32_t i = 0; i < e->p.n_slots; i++)
        if (!(e->slots[i].d_hist = malloc((size_t)e->n_ctx_slot * sizeof(int32_t)))) return PK_ENOMEM;
    return ctx_new(e);
}

void eng_draft_free(eng *e)
{
    eng_draft *d = &e->draft;
    mem_free(d->mem);
    model_ctx_free(d->ctx);
    d->mem = NULL;
    d->ctx = NULL;
    for (int32_t i = 0; e->slots && i < e->p.n_slots; i++) free(e->slots[i].d_hist);
    free(d->tok);
    free(d->pos);
    free(d->nseq);
    free(d->seq);
    free(d->want);
    free(d->row_of);
    free(d->logits);
    free(d->h_in);
    free(d->h_out);
}

void eng_draft_sleep(eng *e)
{
    if (!e->p.draft) return;              /* the MTP block sleeps with the target */
    mem_free(e->draft.mem);
    model_ctx_free(e->draft.ctx);
    e->draft.mem = NULL;
    e->draft.ctx = NULL;
    for (int32_t i = 0; i < e->p.n_slots; i++) e->slots[i].d_n = 0;
    model_weights_release(e->p.draft);
}

pk_status eng_draft_wake(eng *e)
{
    if (!e->p.draft) return PK_OK;
    model_weights_reload(e->p.draft);
    return ctx_new(e);
}

static void add(eng_draft *d, int32_t *n, int32_t tok, kv_pos pos, kv_seq seq, bool want)
{
    d->tok[*n] = tok;
    d->pos[*n] = pos;
    d->nseq[*n] = 1;
    d->seq[*n][0] = seq;
    d->want[*n] = want;
    (*n)++;
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb)
{
    int32_t n = MIN(na, nb), i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Slot s's context: its history and the token this step decodes (hist
 * has room for it: eng_spec_propose's rule). */
static int32_t context(slot *s)
{
    s->hist[s->n_hist] = s->next_token;
    return s->n_hist + 1;
}

/* s's draft sequence keeps the longest prefix of its context it holds,
 * or takes another slot's longer one by membership; returns its length,
 * below the context's end (the last token is decoded for its row). */
static int32_t sync_prefix(eng *e, slot *s, int32_t n)
{
    eng_draft *d = &e->draft;
    int32_t keep = MIN(common_prefix(s->d_hist, s->d_n, s->hist, n), n - 1);
    if (n - 1 - keep >= SHARE_FROM) {
        const slot *best = NULL;
        int32_t best_l = keep;
        for (int32_t i = 0; i < e->p.n_slots; i++) {
            const slot *o = &e->slots[i];
            int32_t l = o == s ? 0 : MIN(common_prefix(o->d_hist, o->d_n, s->hist, n), n - 1);
            if (l > best_l) best = o, best_l = l;
        }
        if (best) {
            mem_drop(d->mem, s->id);
            keep = mem_share(d->mem, best->id, s->id, 0, best_l);
            memcpy(s->d_hist, best->d_hist, (size_t)keep * sizeof *s->d_hist);
            s->d_n = keep;
            return keep;
        }
    }
    s->d_n = mem_keep(d->mem, s->id, keep);
    return s->d_n;
}

/* The greedy token of row r for slot s (its grammar's allowed tokens
 * only), or -1 when none may follow or the draft is less sure than p_min. */
static int32_t pick(eng *e, slot *s, int32_t r)
{
    eng_draft *d = &e->draft;
    const float *row = d->logits + (size_t)r * d->n_vocab;
    const uint64_t *mask = s->gm ? gram_matcher_mask(s->gm) : NULL;
    if (s->gm && !mask) return -1;
    int32_t best = -1;
    float mx = -INFINITY;
    if (mask) {
        for (int32_t v = 0; v < d->n_cand; v++)
            if (row[v] > mx && (mask[v >> 6] >> (v & 63) & 1)) mx = row[v], best = v;
    } else if (d->n_cand > 0 && row[best = smp_argmax(row, d->n_cand)] > -INFINITY) {
        mx = row[best];
    } else {
        best = -1;
    }
    if (best < 0 || e->p.spec.p_min <= 0) return best;
    double sum = 0;
    for (int32_t v = 0; v < d->n_cand; v++)
        if (!mask || (mask[v >> 6] >> (v & 63) & 1)) sum += exp((double)row[v] - mx);
    return 1.0 / sum >= e->p.spec.p_min ? best : -1;
}

/* Frees what idle slots' draft sequences hold (the cache ran full). */
static void drop_idle(eng *e)
{
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state != ENG_SLOT_IDLE) continue;
        mem_drop(e->draft.mem, s->id);
        s->d_n = 0;
    }
}

/* A round of the MTP block (h_in: the rows of the sessions going on, NULL
 * the first round); its outputs' states into d->h_out. */
static bool run_mtp(eng *e, int32_t n, bool first)
{
    eng_draft *d = &e->draft;
    model_batch b = { n, d->tok, d->pos, d->nseq, (const kv_seq (*)[MODEL_MAX_TOKEN_SEQS])d->seq, d->want };
    return model_mtp_draft(e->ctx, &b, first ? NULL : d->h_in, d->logits, d->h_out) == PK_OK;
}

static bool run(eng *e, int32_t n)
{
    eng_draft *d = &e->draft;
    model_batch b = { n, d->tok, d->pos, d->nseq, (const kv_seq (*)[MODEL_MAX_TOKEN_SEQS])d->seq, d->want };
    pk_status st = model_decode(d->ctx, &b, d->logits);
    if (st == PK_EFULL) {
        drop_idle(e);
        st = model_decode(d->ctx, &b, d->logits);
    }
    for (int32_t i = 0; i < n && st == PK_OK; i++) {   /* what the sequences hold now */
        slot *s = &e->slots[d->seq[i][0]];
        s->d_hist[d->pos[i]] = d->tok[i];
        s->d_n = d->pos[i] + 1;
    }
    return st == PK_OK;
}

void eng_draft_step(eng *e)
{
    eng_draft *d = &e->draft;
    int32_t guessing[ENG_MAX_SLOTS], lim[ENG_MAX_SLOTS], all[ENG_MAX_SLOTS], n_g = 0, n = 0, n_dec = 0;
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        e->slots[i].n_prop = 0;
        n_dec += e->slots[i].state == ENG_SLOT_DECODE;
    }
    if (!d->ctx && !d->mtp) return;
    double t0 = pk_time_ms();
    /* Catch-up: every guessing session's missing tokens in one batch, the
     * row of its last one wanted (the MTP block: its token, the first
     * round). */
    int32_t budget = MIN(ENG_SPEC_STEP, e->p.n_batch - n_dec), catchup = CATCHUP;
    const spec_kind kind = d->mtp ? SPEC_DRAFT_MTP : SPEC_DRAFT_SIMPLE;
    for (int32_t i = 0; i < e->p.n_slots && budget > 0; i++) {
        slot *s = &e->slots[i];
        if (s->state != ENG_SLOT_DECODE || s->n_replay > 0 || s->spec_skip > 0) continue;
        if (eng_spec_kind(e, s) != kind) continue;
        int32_t l = MIN(eng_spec_limit(e, s), budget);
        if (l < 1) continue;
        if (d->mtp) {
            add(d, &n, s->next_token, s->n_hist, s->id, true);
        } else {
            int32_t c = context(s), from = sync_prefix(e, s, c), k = MIN(c - from, catchup);
            for (int32_t j = 0; j < k; j++) add(d, &n, s->hist[from + j], from + j, s->id, from + j == c - 1);
            catchup -= k;
            if (from + k < c) continue;       /* caught up over the next steps */
        }
        if (s->gm) s->d_gram_at = gram_matcher_state(s->gm);
        d->row_of[s->id] = n_g;
        all[n_g] = guessing[n_g] = i;
        lim[n_g++] = l;
        budget -= l;
    }
    int32_t n_all = n_g;
    const size_t E = (size_t)model_get_hparams(e->m)->n_embd;
    bool ok = n == 0 || (d->mtp ? run_mtp(e, n, true) : run(e, n));
    /* Rounds: each session's greedy token, fed back while it goes on. */
    for (int32_t r = 0; ok && n_g > 0; r++) {
        int32_t n_next = 0;
        n = 0;
        for (int32_t g = 0; g < n_g; g++) {
            slot *s = &e->slots[guessing[g]];
            int32_t t = pick(e, s, d->row_of[s->id]);
            bool more = t >= 0;
            if (more) {
                s->d_prop[s->n_prop++] = t;
                more = s->n_prop < lim[g] && !tok_is_eog(model_vocab(e->m), t);
                if (s->gm) more = more && gram_matcher_accept(s->gm, t) == PK_OK && !gram_matcher_done(s->gm);
            }
            if (!more) continue;
            if (d->mtp)                       /* the block's output goes on as its next input */
                memmove(d->h_in + n_next * E, d->h_out + (size_t)d->row_of[s->id] * E, E * sizeof(float));
            d->row_of[s->id] = n_next;
            guessing[n_next] = guessing[g];
            lim[n_next++] = lim[g];
            add(d, &n, t, s->n_hist + s->n_prop, s->id, true);
        }
        n_g = n_next;
        ok = n == 0 || (d->mtp ? run_mtp(e, n, false) : run(e, n));
    }
    for (int32_t g = 0; d->mtp && g < n_all; g++) {   /* the rounds' cells go before the step's batch */
        slot *s = &e->slots[all[g]];
        kv_pos kept = mem_keep(e->mem, s->id, s->n_hist);
        ASSERT(kept == s->n_hist);
    }
    for (int32_t g = 0; g < n_all; g++) {   /* grammars back where the step starts */
        slot *s = &e->slots[all[g]];
        if (s->gm) gram_matcher_set_state(s->gm, s->d_gram_at);
    }
    if (!ok)
        for (int32_t i = 0; i < e->p.n_slots; i++) e->slots[i].n_prop = 0;
    e->stat.draft_ms += pk_time_ms() - t0;
}

int32_t eng_draft_take(slot *s, int32_t lim)
{
    int32_t got = MIN(s->n_prop, lim);
    memcpy(s->draft, s->d_prop, (size_t)got * sizeof *s->draft);
    return got;
}

bool eng_draft_check(eng *e)
{
    if (!e->draft.mem) return true;
    if (!mem_check(e->draft.mem)) return false;
    for (int32_t i = 0; i < e->p.n_slots; i++)
        if (!mem_holds(e->draft.mem, e->slots[i].id, e->slots[i].d_n)) return false;
    return true;
}
