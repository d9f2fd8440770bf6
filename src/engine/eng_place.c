/*
 * eng_place.c - placement: the mechanism behind the pure policy
 * (src/policy/pol.h).
 *
 * A history is the tokens and state a finished request left: in its slot
 * (sequence id = slot id), or out of it in the history store (eng_hist.c:
 * parked under a parking id, or copied to RAM).  For each waiting request
 * this file builds a pol_snapshot of every slot and history, and every
 * resident pool beside them (eng_pool.c: a source like any history, pinned
 * while in use), asks pol_place, and applies the decision through the
 * sequence-memory seam (src/mem): drop, park, cut the slot to n_keep,
 * share [n_keep, n_reuse) from the source (also from a busy slot) or copy
 * it back from RAM, and then the slot prefills the rest.  kind[]/idx[] say
 * where each snapshot entry is.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eng_impl.h"

enum { H_SLOT, H_PARKED, H_RAM, H_POOL };

struct eng_snap {
    pol_slot slots[ENG_MAX_SLOTS];
    pol_hist hists[POL_MAX_HIST];
    int8_t kind[POL_MAX_HIST];     /* H_SLOT, H_PARKED, H_RAM, H_POOL */
    int32_t idx[POL_MAX_HIST];     /* slot, parked or spill index; a pool's seq */
    int32_t excl[KV_MAX_SEQ];
    pol_snapshot s;
};
typedef struct eng_snap place_snap;

double eng_now_s(void)
{
    return pk_time_ms() / 1000.0;
}

void eng_cache_event_add(eng *e, const eng_cache_event *ev)
{
    eng_cache_event *d = &e->stat.events[(e->stat.ev_head + e->stat.ev_n) % ENG_CACHE_EVENTS];
    if (e->stat.ev_n == ENG_CACHE_EVENTS) e->stat.ev_head = (e->stat.ev_head + 1) % ENG_CACHE_EVENTS;
    else e->stat.ev_n++;
    *d = *ev;
    d->ts_ms = pk_wall_ms();
}

pk_status eng_place_init(eng *e)
{
    /* The snapshot holds every history (slots, parked, in RAM) and every
     * pool: POL_MAX_HIST in all. */
    e->hist.n_parked_max = MIN(KV_MAX_SEQ - e->p.n_slots - e->p.n_pools, 96);
    e->hist.n_spill_max = POL_MAX_HIST - e->p.n_slots - e->hist.n_parked_max - e->p.n_pools;
    if (e->hist.n_parked_max < 0 || e->hist.n_spill_max < 0 || eng_seq_init(e, e->hist.n_parked_max) != PK_OK)
        return PK_EINVAL;
    e->hist.snap = calloc(1, sizeof *e->hist.snap);
    if (!e->hist.snap || eng_hist_init(e) != PK_OK) return PK_ENOMEM;

    /* The turn marker as tokens: "auto" follows the model's chat template. */
    const char *text = e->p.policy.turn_marker;
    if (!strcmp(text, "auto")) {
        tmpl_kind k = tmpl_detect(tok_chat_template(model_vocab(e->m)));
        text = k == TMPL_UNKNOWN ? "" : pol_turn_marker_for(tmpl_name(k));
    }
    e->hist.n_marker = 0;
    if (text[0]) {
        int32_t n = 0;
        if (tok_encode(model_vocab(e->m), text, strlen(text), false, true, e->hist.marker,
                       (int32_t)ARRAY_LEN(e->hist.marker), &n) == PK_OK)
            e->hist.n_marker = n;
    }
    for (int32_t i = 0; i < e->p.n_slots; i++) e->slots[i].marker_pos = -1;
    return PK_OK;
}

void eng_place_free(eng *e)
{
    free(e->hist.snap);
    e->hist.snap = NULL;
    if (e->mem) eng_hist_free(e);
    else free(e->hist.rec);
    e->hist.rec = NULL;
}

/* Fills sn from the engine's state, for prompt t (NULL: none). */
static void snapshot(eng *e, const eng_task *t, place_snap *sn)
{
    double now = eng_now_s();
    int32_t nh = 0;
    mem_excl_counts(e->mem, sn->excl);
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        bool busy = s->state != ENG_SLOT_IDLE;
        sn->slots[i] = (pol_slot){ .id = i, .busy = busy, .hist = -1 };
        if (s->n_hist <= 0) continue;
        int32_t marker = busy ? pol_last_marker(s->hist, s->n_hist, e->hist.marker, e->hist.n_marker) : s->marker_pos;
        sn->hists[nh] = (pol_hist){ .seq = s->id, .tokens = s->hist, .n_tokens = s->n_hist,
                                    .marker_pos = marker, .last_use_s = busy ? now : s->last_use_s,
                                    .valid = true, .n_cells_excl = sn->excl[s->id] };
        sn->kind[nh] = H_SLOT;
        sn->idx[nh] = i;
        sn->slots[i].hist = nh++;
    }
    /* Parked histories, then those in RAM (no cells: dropping one frees
     * none; its id is for reasons only). */
    for (int where = HIST_PARKED; where <= HIST_RAM; where++)
        for (int32_t i = 0; i < e->hist.n_rec; i++) {
            const hrec *r = &e->hist.rec[i];
            if ((int)r->where != where) continue;
            bool ram = where == HIST_RAM;
            sn->hists[nh] = (pol_hist){ .seq = ram ? KV_MAX_SEQ + i : r->seq, .tokens = r->tokens,
                                        .n_tokens = r->n_tokens, .marker_pos = r->marker_pos,
                                        .last_use_s = r->last_use_s, .valid = true,
                                        .n_cells_excl = ram ? 0 : sn->excl[r->seq] };
            sn->kind[nh] = ram ? H_RAM : H_PARKED;
            sn->idx[nh++] = i;
        }
    int32_t n_free_ids = e->hist.n_parked_max - e->hist.n_parked;
    int32_t pool_seq[ENG_MAX_POOLS];
    int32_t np = eng_pool_hists(e, sn->excl, sn->hists + nh, pool_seq, POL_MAX_HIST - nh);
    for (int32_t k = 0; k < np; k++) {
        sn->kind[nh] = H_POOL;
        sn->idx[nh++] = pool_seq[k];
    }
    int32_t extra = 0;
    if (t) {
        int32_t room = e->n_ctx_slot - t->req.n_prompt;
        extra = t->req.n_predict >= 0 ? MIN(t->req.n_predict, room) : room;
    }
    sn->s = (pol_snapshot){ .slots = sn->slots, .n_slots = e->p.n_slots, .hists = sn->hists,
                            .n_hists = nh, .prompt = t ? t->prompt : NULL,
                            .n_prompt = t ? t->req.n_prompt : 0, .prompt_tps = e->stat.prompt_tps,
                            .now_s = now, .n_cells_free = e->p.n_ctx - mem_used(e->mem),
                            .n_cells_extra = MAX(extra, 0), .n_reserve_free = n_free_ids,
                            .params = &e->p.policy };
}

static double hist_value(const eng *e, const pol_hist *h)
{
    return pol_hist_state(&e->p.policy, h, eng_now_s()).value;
}

/* What the RAM tier takes: any history with some value and enough tokens to
 * be worth a copy.  RAM is plentiful next to KV cells, and its budget evicts
 * the least valuable first, so it keeps more than the cache's parking rule. */
static bool worth_ram(int32_t n_tokens, double value)
{
    return n_tokens >= 64 && value > 0;
}

/* Drops history h of the snapshot: its sequence leaves every cell.  With
 * `spill`, a history worth keeping is first copied to RAM (and kept there). */
static void drop_hist(eng *e, const place_snap *sn, int32_t h, const char *why, bool spill)
{
    const pol_hist *ph = &sn->hists[h];
    int kind = sn->kind[h], i = sn->idx[h];
    double value = hist_value(e, ph);
    eng_cache_event ev = { .kind = ENG_CACHE_DROP, .slot = kind == H_SLOT ? i : -1, .seq = ph->seq,
                           .n_tokens = ph->n_tokens, .value = value };
    snprintf(ev.reason, sizeof ev.reason, "%s", why);
    if (kind == H_RAM) {
        eng_hist_drop(e, i);
        eng_cache_event_add(e, &ev);
        return;
    }
    if (kind == H_POOL) {                 /* a pool loses its cells, keeps its tokens */
        eng_pool_evict_seq(e, i, why);
        return;
    }
    const char *session = kind == H_SLOT ? e->slots[i].session : e->hist.rec[i].session;
    double gap = kind == H_SLOT ? e->slots[i].max_gap_ms : e->hist.rec[i].max_gap_ms;
    int32_t pool = kind == H_SLOT ? e->slots[i].pool_id : e->hist.rec[i].pool_id;
    if (spill && worth_ram(ph->n_tokens, value) &&
        eng_spill(e, ph->seq, ph->tokens, ph->n_tokens, ph->marker_pos, ph->last_use_s, session, gap, pool) >= 0) {
        ev.kind = ENG_CACHE_PARK;
        snprintf(ev.reason, sizeof ev.reason, "%s: spilled to RAM", why);
    }
    if (kind == H_SLOT) {
        slot *s = &e->slots[i];
        mem_drop(e->mem, ph->seq);
        s->n_hist = 0;
        s->session[0] = 0;
        eng_pool_detach(e, s);
    } else {
        eng_hist_drop(e, i);
    }
    eng_cache_event_add(e, &ev);
}

/* Keeps slot s's history under a free parking id; false when none is free. */
static bool park(eng *e, slot *s, int32_t pool_id, uint64_t task_id, int32_t keep)
{
    int32_t i = eng_hist_park(e, s, pool_id, keep);
    if (i < 0) return false;
    const hrec *r = &e->hist.rec[i];
    pol_hist h = { .n_tokens = r->n_tokens, .last_use_s = r->last_use_s, .valid = true };
    eng_cache_event ev = { .kind = ENG_CACHE_PARK, .task_id = task_id, .slot = s->id, .seq = r->seq,
                           .n_tokens = r->n_tokens, .value = hist_value(e, &h) };
    snprintf(ev.reason, sizeof ev.reason, "slot %d's history kept as sequence %d", s->id, r->seq);
    eng_cache_event_add(e, &ev);
    return true;
}

bool eng_make_room(eng *e, int32_t n)
{
    if (e->p.n_ctx - mem_used(e->mem) >= n) return true;
    place_snap *sn = e->hist.snap;
    snapshot(e, NULL, sn);
    int32_t order[POL_MAX_HIST], n_order = 0;
    if (pol_drop_order(&sn->s, NULL, 0, order, POL_MAX_HIST, &n_order) != PK_OK) return false;
    for (int32_t k = 0; k < n_order && e->p.n_ctx - mem_used(e->mem) < n; k++)
        if (sn->kind[order[k]] != H_RAM) drop_hist(e, sn, order[k], "KV cells ran short", true);
    return e->p.n_ctx - mem_used(e->mem) >= n;
}

/* Task t goes into slot s, whose cache now holds what it reuses (from
 * source sequence src_seq): the slot's session and display fields, the
 * placement and admission events, the reused-vs-read counters, and the
 * PLACED event when the submitter asked for it. */
static void admitted(eng *e, eng_task *t, slot *s, int32_t src_seq, const char *kind, const char *reason)
{
    /* A session's context is where it last ran: older histories of it
     * stay, but no longer answer to its name, and are no longer a session
     * between turns for admission (an agent whose turns land in new slots
     * would count once per turn).  The same for a history that t carries
     * on past its pool's prefix without naming a session; a named one is
     * known by its name only (agents' prompts share more than the pool's
     * prefix: "Agent 3:" continues no history of "Agent 1:"). */
    const char *sid = t->req.session_id;
    bool carries_s = sid[0] ? !strcmp(s->session, sid) : s->n_hist > s->pool_shared && src_seq == s->id;
    const slot *from = s->n_hist > 0 && carries_s ? s : NULL;
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        slot *o = &e->slots[i];
        if (o == s) continue;
        bool named = sid[0] && !strcmp(o->session, sid);
        bool carried = !sid[0] && i == src_seq && o->state == ENG_SLOT_IDLE && s->n_hist > s->pool_shared;
        if (named || carried) {
            o->session[0] = 0;
            o->moved = true;
            if (!from || o->last_use_s > from->last_use_s) from = o;
        }
    }
    /* The pause this turn ends, for how long its history stays live
     * (adm_live_ms): from the history it continues, wherever that was. */
    double last_use_s = from ? from->last_use_s : 0, max_gap = from ? from->max_gap_ms : 0;
    for (int32_t i; (i = eng_hist_find(e, sid)) >= 0;) {
        hrec *r = &e->hist.rec[i];
        if (r->last_use_s > last_use_s) last_use_s = r->last_use_s, max_gap = r->max_gap_ms;
        r->session[0] = 0;
    }
    s->max_gap_ms = last_use_s > 0 ? fmax(max_gap, (eng_now_s() - last_use_s) * 1000.0) : 0;
    memcpy(s->session, t->req.session_id, sizeof s->session);
    s->last_source_seq = s->n_hist > 0 ? src_seq : -1;
    s->last_reused = s->n_hist;
    snprintf(s->last_reason, sizeof s->last_reason, "%s", reason);
    eng_cache_event ev = { .kind = ENG_CACHE_PLACE, .task_id = t->id, .slot = s->id, .seq = s->id };
    snprintf(ev.reason, sizeof ev.reason, "%s", kind);
    eng_cache_event_add(e, &ev);
    ev = (eng_cache_event){ .kind = ENG_CACHE_ADMIT, .task_id = t->id, .slot = s->id,
                            .seq = s->last_source_seq, .n_reused = s->n_hist,
                            .n_read = t->req.n_prompt - s->n_hist };
    snprintf(ev.reason, sizeof ev.reason, "%s", reason);
    eng_cache_event_add(e, &ev);
    e->stat.n_tokens_reused += (uint64_t)s->n_hist;
    e->stat.n_tokens_read += (uint64_t)(t->req.n_prompt - s->n_hist);
    if (t->req.report_placed) {
        eng_event pe = { .kind = ENG_EV_PLACED, .slot = s->id, .n_prompt = t->req.n_prompt,
                         .n_cached = s->n_hist, .pool_id = s->pool_id, .pool_shared = s->pool_shared,
                         .warned = t->adm_warned, .sessions_remaining = t->adm_remaining };
        eng_task_push(t, &pe);
    }
    s->n_progress = s->n_hist;
    if (t->req.report_progress) {
        eng_event pe = { .kind = ENG_EV_PROGRESS, .slot = s->id, .n_prompt = t->req.n_prompt,
                         .n_cached = s->n_hist, .n_processed = s->n_hist };
        eng_task_push(t, &pe);
    }
}

/* Applies decision d for task t (see pol_decision for the order); returns
 * the source sequence reused (-1 none). */
static int32_t apply(eng *e, place_snap *sn, eng_task *t, const pol_decision *d)
{
    slot *s = &e->slots[d->slot];
    s->state = ENG_SLOT_PREFILL;       /* nothing below may evict the run slot */
    int32_t pool = s->pool_id;         /* the scope of the history it parks or spills */
    eng_pool_detach(e, s);
    /* A spill below may free the least valuable RAM entries to make room,
     * and reuse their places: the entry this task continues is pinned,
     * and the RAM entries the decision drops go before any spill, while
     * the snapshot's indices still name them. */
    bool src_ram = d->source >= 0 && sn->kind[d->source] == H_RAM;
    e->hist.spill_pin = src_ram ? sn->idx[d->source] : -1;
    for (int32_t k = 0; k < d->n_drop; k++)
        if (sn->kind[d->drop[k]] == H_RAM) drop_hist(e, sn, d->drop[k], "room for a park", true);
    for (int32_t k = 0; k < d->n_drop; k++)
        if (sn->kind[d->drop[k]] != H_RAM) drop_hist(e, sn, d->drop[k], "room for a park", true);
    if (d->park >= 0 && !park(e, s, pool, t->id, t->req.cache_prompt ? d->n_keep : 0)) {
        eng_cache_event ev = { .kind = ENG_CACHE_DROP, .task_id = t->id, .slot = s->id, .seq = s->id,
                               .n_tokens = s->n_hist, .value = hist_value(e, &sn->hists[d->park]) };
        snprintf(ev.reason, sizeof ev.reason, "overwritten: no reserve id or memory to park it");
        eng_cache_event_add(e, &ev);
    } else if (d->park < 0 && s->n_hist > d->n_keep && sn->slots[d->slot].hist >= 0) {
        /* Not parked in the cache: when it is still worth keeping and no
         * other history or the request itself holds it, keep it in RAM. */
        int32_t h = sn->slots[d->slot].hist;
        pol_park_plan plan;
        double kept_at = e->p.policy.park_kept_share;
        if (pol_park(&sn->s, h, d->source, 0, &plan) == PK_OK &&
            !(kept_at > 0 && plan.kept_share >= kept_at) && worth_ram(s->n_hist, plan.value) &&
            eng_spill(e, s->id, s->hist, s->n_hist, s->marker_pos, s->last_use_s, s->session, s->max_gap_ms,
                      pool) >= 0) {
            eng_cache_event ev = { .kind = ENG_CACHE_PARK, .task_id = t->id, .slot = s->id, .seq = s->id,
                                   .n_tokens = s->n_hist, .value = plan.value };
            snprintf(ev.reason, sizeof ev.reason, "slot %d's history spilled to RAM (%s)", s->id, plan.why);
            eng_cache_event_add(e, &ev);
        }
    }
    int32_t keep = mem_keep(e->mem, s->id, t->req.cache_prompt ? d->n_keep : 0);
    s->n_hist = MIN(s->n_hist, keep);
    int32_t src_seq = -1;
    if (d->source >= 0 && t->req.cache_prompt) {
        const pol_hist *h = &sn->hists[d->source];
        int kind = sn->kind[d->source], i = sn->idx[d->source];
        int32_t key = h->marker_pos > 0 ? h->marker_pos : h->n_tokens;
        src_seq = h->seq;
        if (h->seq != s->id && d->n_reuse > s->n_hist) {
            int32_t from = s->n_hist, to = d->n_reuse;
            if (kind == H_RAM) {
                /* Rows come back by copy; the room is made first (it may
                 * move other histories out, never this slot or the entry). */
                if (eng_make_room(e, to - from) && (to = eng_hist_copy_in(e, i, s->id, from, to)) > from) {
                    memcpy(s->hist + from, e->hist.rec[i].tokens + from, (size_t)(to - from) * sizeof(int32_t));
                    s->n_hist = to;
                }
            } else {
                /* on a hybrid, as far as the source has a recurrent state */
                to = mem_share(e->mem, h->seq, s->id, from, to);
                memcpy(s->hist + from, h->tokens + from, (size_t)(to - from) * sizeof(int32_t));
                s->n_hist = to;
            }
        }
        /* A parked or spilled history the prompt continues is superseded:
         * the slot holds it now (shared cells stay; its own tail is freed).
         * (sn may have been refilled by eng_make_room: only i and kind are
         * used here, and a restore happens only for H_RAM.) */
        if ((kind == H_PARKED || kind == H_RAM) && s->n_hist >= key) {
            if (kind == H_RAM) eng_hist_drop(e, i);
            else drop_hist(e, sn, d->source, "continued in a slot", false);
        }
    }
    e->hist.spill_pin = -1;
    if (s->n_hist >= t->req.n_prompt)    /* the last prompt token gives the logits */
        s->n_hist = mem_keep(e->mem, s->id, t->req.n_prompt - 1);
    return src_seq;
}

/* A request that names its slot: the slot's own common prefix only. */
static void apply_fixed(eng *e, eng_task *t, slot *s)
{
    eng_pool_detach(e, s);
    int32_t keep = t->req.cache_prompt ? pol_common_prefix(s->hist, s->n_hist, t->prompt, t->req.n_prompt) : 0;
    keep = MIN(keep, t->req.n_prompt - 1);
    s->n_hist = mem_keep(e->mem, s->id, keep);
}

void eng_wait_push(eng *e, eng_task *t)
{
    t->next = NULL;
    if (e->wq.wait_tail) e->wq.wait_tail->next = t;
    else e->wq.wait_head = t;
    e->wq.wait_tail = t;
    e->wq.n_waiting++;
}

void eng_wait_first(eng *e, bool (*first)(eng *e, const eng_task *t))
{
    eng_task *head = NULL, **ht = &head, *rest = NULL, **rt = &rest;
    for (eng_task *t = e->wq.wait_head, *nx; t; t = nx) {
        nx = t->next;
        t->next = NULL;
        if (first(e, t)) {
            *ht = t;
            ht = &t->next;
        } else {
            *rt = t;
            rt = &t->next;
        }
    }
    *ht = rest;
    e->wq.wait_head = head;
    e->wq.wait_tail = NULL;
    for (eng_task *t = head; t; t = t->next) e->wq.wait_tail = t;
}

/* Unlinks t (*pp == t, prev its predecessor or NULL) from the wait queue,
 * placed in a slot or failed (eng_pend_drop). */
static void unlink_waiting(eng *e, eng_task **pp, eng_task *prev, bool placed)
{
    eng_task *t = *pp;
    *pp = t->next;
    if (e->wq.wait_tail == t) e->wq.wait_tail = prev;
    t->next = NULL;
    e->wq.n_waiting--;
    eng_pend_drop(e, t, placed);
}

/* True when a slot is still prefilling a prompt that shares with t's a
 * prefix well beyond the cells it has so far: t then waits for those cells
 * and shares them by membership instead of computing them a second time
 * (agents spawned together with one long common prefix). */
static bool prefix_in_flight(const eng *e, const eng_task *t)
{
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        const slot *s = &e->slots[i];
        if (s->state != ENG_SLOT_PREFILL) continue;
        int32_t shared = pol_common_prefix(s->task->prompt, s->n_prompt, t->prompt, t->req.n_prompt);
        if (shared > s->n_hist + 64) return true;
    }
    return false;
}

/* Task t, placed in slot s, joins its pool's cells, then starts. */
/* Starts t in slot s, placed by apply (or apply_fixed).  What can fail
 * (memory for its sampler and grammar) comes before anything is announced:
 * a task that cannot start ends with its ERROR, never after a PLACED, and
 * counts as no admit; the slot keeps the cells it holds as an unnamed
 * history. */
/* Hybrids: where the prompt's recurrent state is kept besides its end
 * (docs/hybrid.md): one token before the end (a retry, a next turn that
 * re-renders the reply), the last turn marker (a next turn that drops the
 * reply's thinking diverges after it), the start of the last message
 * before it (a side request that rewrites that message) and the end of
 * the first message (another conversation on the same system prompt). */
static void hybrid_checkpoints(eng *e, const eng_task *t, const slot *s)
{
    if (!mem_resume_limited(e->mem)) return;
    const int32_t n = t->req.n_prompt, *p = t->prompt;
    int32_t at[4] = { n - 1, -1, -1, -1 };
    at[1] = pol_last_marker(p, n, e->hist.marker, e->hist.n_marker);
    if (e->hist.n_marker > 0) {
        int32_t first = -1, last = -1;
        for (int32_t i = 1; i < n - 1; i++)
            if (p[i] == e->hist.marker[0]) {
                if (first < 0) first = i;
                if (i < at[1]) last = i;
            }
        at[2] = last, at[3] = first;
    }
    /* at[k] == n_hist: the state the slot was given there (from another
     * history) is kept too, so a third conversation finds it here */
    for (int k = 3; k >= 0; k--)   /* the prompt's end asked last: kept first */
        if (at[k] > 0 && at[k] >= s->n_hist) mem_checkpoint_at(e->mem, s->id, at[k]);
}

static void start(eng *e, eng_task *t, slot *s, int32_t src_seq, int32_t p_share, const char *kind,
                  const char *reason)
{
    eng_slot_res res;
    if (!eng_slot_prepare(e, t, &res)) {
        eng_task_unref(t);
        s->state = ENG_SLOT_IDLE;
        s->session[0] = 0;
        eng_history_done(e, s);
        return;
    }
    if (t->req.pool_id > 0) eng_pool_attach(e, s, t, p_share);
    hybrid_checkpoints(e, t, s);
    eng_admit_placed(e, t);
    admitted(e, t, s, src_seq, kind, reason);
    eng_slot_start(e, s, t, &res);
}

void eng_place_waiting(eng *e)
{
    e->wq.place_pass++;
    eng_admit_order(e);
    place_snap *sn = e->hist.snap;
    eng_task **pp = &e->wq.wait_head, *prev = NULL;
    while (*pp) {
        eng_task *t = *pp;
        /* A task leaves the queue before anything may drop the engine's
         * reference to it (the submitter may have released its own). */
        if (atomic_load(&t->cancelled)) {
            unlink_waiting(e, pp, prev, false);
            eng_task_fail(t, PK_ECANCELLED, "cancelled");
            eng_task_unref(t);
            continue;
        }
        int32_t p_share = 0;
        int ready = t->req.pool_id > 0 ? eng_pool_ready(e, t, &p_share) : 1;
        if (ready < 0) {                          /* its ERROR is queued */
            unlink_waiting(e, pp, prev, false);
            eng_task_unref(t);
            continue;
        }
        bool waits = ready == 0;                  /* its pool is materializing */
        bool refused = false;
        if (!waits && !eng_admit_gate(e, t, p_share, &refused)) {
            if (refused) {                        /* its ERROR is queued */
                unlink_waiting(e, pp, prev, false);
                eng_task_unref(t);
                continue;
            }
            waits = true;                         /* held by its admission policy */
        }
        if (!waits && t->req.id_slot >= 0) {
            slot *s = &e->slots[t->req.id_slot];
            if (s->state == ENG_SLOT_IDLE) {
                unlink_waiting(e, pp, prev, true);
                s->state = ENG_SLOT_PREFILL;
                apply_fixed(e, t, s);
                char reason[64];
                snprintf(reason, sizeof reason, "id_slot %d requested", s->id);
                start(e, t, s, s->id, p_share, "slot", reason);
                continue;
            }
            waits = true;                         /* its slot is busy; others may go */
        }
        if (!waits && t->req.cache_prompt && t->req.pool_id <= 0 && prefix_in_flight(e, t)) waits = true;
        if (waits) {
            prev = t;
            pp = &t->next;
            continue;
        }
        pol_decision d;
        snapshot(e, t, sn);
        pk_status st = pol_place(&sn->s, &d);
        if (st == PK_OK && d.kind == POL_WAIT) return;   /* every slot busy */
        unlink_waiting(e, pp, prev, st == PK_OK);
        if (st != PK_OK) {
            eng_task_fail(t, PK_EINVAL, "placement failed");
            eng_task_unref(t);
            continue;
        }
        int32_t src = apply(e, sn, t, &d);
        start(e, t, &e->slots[d.slot], src, p_share, pol_kind_name(d.kind), d.reason);
    }
}

pk_status eng_drop_histories(eng *e, int32_t slot_id, const char *why, int32_t *n_erased)
{
    place_snap *sn = e->hist.snap;
    snapshot(e, NULL, sn);
    *n_erased = 0;
    if (slot_id >= 0 && e->slots[slot_id].state != ENG_SLOT_IDLE) return PK_ECONFLICT;
    for (int32_t h = 0; h < sn->s.n_hists; h++) {
        int kind = sn->kind[h], i = sn->idx[h];
        if (kind == H_POOL || (slot_id >= 0 && !(kind == H_SLOT && i == slot_id))) continue;
        if (kind == H_SLOT && e->slots[i].state != ENG_SLOT_IDLE) continue;
        *n_erased += sn->hists[h].n_tokens;
        drop_hist(e, sn, h, why, false);
    }
    return PK_OK;
}

void eng_fail_waiting_pool(eng *e, int32_t pool_id, pk_status st, const char *msg)
{
    eng_task **pp = &e->wq.wait_head, *prev = NULL;
    while (*pp) {
        eng_task *t = *pp;
        if (t->req.pool_id != pool_id) {
            prev = t;
            pp = &t->next;
            continue;
        }
        unlink_waiting(e, pp, prev, false);
        eng_task_fail(t, st, msg);
        eng_task_unref(t);
    }
}

kv_seq eng_session_find(eng *e, const char *session, const int32_t **tokens, int32_t *n)
{
    if (!session || !session[0]) return -1;
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->n_hist > 0 && !strcmp(s->session, session)) {
            *tokens = s->hist;
            *n = s->n_hist;
            return s->id;
        }
    }
    int32_t i = eng_hist_find(e, session);      /* a history in RAM has no cells to share */
    if (i < 0 || e->hist.rec[i].where != HIST_PARKED) return -1;
    *tokens = e->hist.rec[i].tokens;
    *n = e->hist.rec[i].n_tokens;
    return e->hist.rec[i].seq;
}

void eng_history_done(eng *e, slot *s)
{
    s->last_use_s = eng_now_s();
    s->marker_pos = pol_last_marker(s->hist, s->n_hist, e->hist.marker, e->hist.n_marker);
}

void eng_place_stats(eng *e, eng_stats *o)
{
    double now = eng_now_s();
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        const slot *s = &e->slots[i];
        eng_slot_info *si = &o->slots[i];
        pol_hist h = { .n_tokens = s->n_hist, .last_use_s = s->state == ENG_SLOT_IDLE ? s->last_use_s : now,
                       .valid = s->n_hist > 0 };
        pol_state ps = pol_hist_state(&e->p.policy, &h, now);
        si->hist_tokens = s->n_hist;
        si->hist_age_s = s->n_hist > 0 ? ps.age_s : 0;
        si->protected_for_s = ps.is_protected ? ps.ttl_s - ps.age_s : 0;
        si->hist_value = ps.value;
        si->last_source_seq = s->last_source_seq;
        si->last_reused = s->last_reused;
        snprintf(si->last_reason, sizeof si->last_reason, "%s", s->last_reason);
    }
    eng_hist_stats(e, o);
    o->n_tokens_reused = e->stat.n_tokens_reused;
    o->n_tokens_read = e->stat.n_tokens_read;
    o->n_tokens_restored = e->stat.n_tokens_restored;
    o->n_events = e->stat.ev_n;
    for (int32_t k = 0; k < e->stat.ev_n; k++) o->events[k] = e->stat.events[(e->stat.ev_head + k) % ENG_CACHE_EVENTS];
}
