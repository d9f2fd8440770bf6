/*
 * test_policy_prop.c - the slot policy (src/policy) over 200,000 random slot
 * tables (fixed seed), each decision checked against oracles written from
 * pol.h's stated rules and formulas (ttl, size, value, parking loss: none
 * calls src/policy), and each history's pol_hist_state against them:
 * never a busy slot, never another conversation's slot while a blank one is
 * idle, each rule and its order (continue, older version, reclaim order,
 * least loss within the tie), token-identical sources near the best and
 * outside busy slots when possible, park and drop constraints, and the same
 * decision twice and from a copy of the table.  Then the time of one
 * decision on 100 histories of 100K tokens.
 *
 * POL_TEST_TABLES=n changes the number of random tables (default 200000).
 */
#include "policy_tables.h"

/* ---- the curves, written from pol.h's DESIGN comment ----------------------
 * Not a call into src/policy: the oracles below must check the policy
 * against its stated formulas, not against itself. */

/* ttl(n): piecewise linear through the knots, each knot's time scaled by
 * ttl_max_s / 120, flat beyond the last; 0 for no tokens or no ttl_max_s. */
static double o_ttl(int64_t n, double ttl_max_s)
{
    static const double kn[] = { 0, 500, 2000, 8000, 32000, 50000, 100000, 262144 };
    static const double ks[] = { 0, 0.1, 2, 10, 45, 65, 90, 120 };
    enum { LAST = 7 };
    if (n <= 0 || !(ttl_max_s > 0))
        return 0;
    double k = ttl_max_s / 120, x = (double)n;
    if (x >= kn[LAST])
        return ks[LAST] * k;
    int i = LAST;
    while (kn[i - 1] > x)   /* the segment [kn[i-1], kn[i]) holding x */
        i--;
    return k * ks[i - 1] + (x - kn[i - 1]) * (k * ks[i] - k * ks[i - 1]) / (kn[i] - kn[i - 1]);
}

/* size(n) = (n/50000)^0.7 * (n/(n+2000))^2 */
static double o_size(int64_t n)
{
    if (n <= 0)
        return 0;
    return pow((double)n / 50000, 0.7) * pow((double)n / ((double)n + 2000), 2);
}

/* value: size * (0.25 + 0.75 * (1 - age/ttl)) while age < ttl; after,
 * size * 0.25 * (1 - x^2), x = clamp((age - ttl) / (zero - ttl), 0, 1),
 * with zero = idle_value_zero_s: 0 means no decay (size * 0.25), and
 * 0 < zero <= ttl means 0 once expired.  Negative ages count as 0. */
static double o_value(int64_t n, double age, const pol_params *p)
{
    double ttl = o_ttl(n, p->ttl_max_s), zero = p->idle_value_zero_s;
    age = age < 0 ? 0 : age;
    if (age < ttl)
        return o_size(n) * (0.25 + 0.75 * (1 - age / ttl));
    if (zero <= 0)
        return o_size(n) * 0.25;
    if (zero <= ttl)
        return 0;
    double x = (age - ttl) / (zero - ttl);
    x = x < 0 ? 0 : x > 1 ? 1 : x;
    return o_size(n) * 0.25 * (1 - x * x);
}

/* Equal up to the rounding of two ways of writing one formula. */
static bool o_near(double a, double b)
{
    return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b)) + 1e-300;
}

/* ---- property test over random tables ----------------------------------- */

/* Long, fixed token streams for tables with realistic lengths: stream k
 * copies stream parent[k] up to fork[k] then goes its own way. */
#define NSTREAM 6
#define STREAM_LEN 263000
static int32_t *stream[NSTREAM];
static const int stream_parent[NSTREAM] = { -1, 0, 0, 1, 2, 0 };
static const int stream_fork[NSTREAM] = { 0, 20000, 100000, 60000, 150000, 0 };

static void make_streams(void)
{
    for (int k = 0; k < NSTREAM; k++) {
        stream[k] = malloc(STREAM_LEN * sizeof(int32_t));
        ASSERT(stream[k]);
        int f = stream_fork[k];
        if (stream_parent[k] >= 0)
            memcpy(stream[k], stream[stream_parent[k]], (size_t)f * sizeof(int32_t));
        fill_content(stream[k] + f, STREAM_LEN - f, 1000 + (uint64_t)k);
        for (int i = f; i < STREAM_LEN; i++)
            if (rndn(700) == 0)
                stream[k][i] = MK;
    }
}

static pol_params random_params(void)
{
    pol_params p = pol_params_default();
    if (rndn(2))
        return p;
    static const double ttl[] = { 0, 1, 120, 1e4, 1e6 };
    static const double zero[] = { 0, 5, 1800, 1e5 };
    static const double share[] = { 0, 0.5, 0.9, 0.98, 1 };
    static const double thr[] = { 0, 1e-7, 1e-5, 1e-3, 0.01, 0.2 };
    static const double ratio[] = { 0, 0.5, 1, 2, 10 };
    static const int near[] = { 0, 1, 3, 64, 4096 };
    p.ttl_max_s = ttl[rndn(ARRAY_LEN(ttl))];
    p.idle_value_zero_s = zero[rndn(ARRAY_LEN(zero))];
    p.sibling_share = share[rndn(ARRAY_LEN(share))];
    p.expired_keep_score = thr[rndn(ARRAY_LEN(thr))];
    p.park_min_value = thr[rndn(ARRAY_LEN(thr))];
    p.park_kept_share = share[rndn(ARRAY_LEN(share))];
    p.park_value_ratio = ratio[rndn(ARRAY_LEN(ratio))];
    p.near_share = (double)rndn(3) * 0.02;
    p.near_s = rndn(2);
    p.near_tokens = near[rndn(ARRAY_LEN(near))];
    p.loss_tie = (double)rndn(3) * 0.1;
    return p;
}

/* Random tokens from a small alphabet (so accidental matches happen), with
 * markers now and then. */
static void random_tail(int32_t *t, int n, int alphabet, int marker_1_in)
{
    for (int i = 0; i < n; i++)
        t[i] = marker_1_in && rndn((uint32_t)marker_1_in) == 0 ? MK : 100 + (int32_t)rndn((uint32_t)alphabet);
}

/* A cut point in a parent of length n with key k: the places that matter. */
static int random_cut(int n, int k)
{
    int extra = 1 + (int)rndn(3);   /* outside MIN: it evaluates twice */
    switch (rndn(7)) {
    case 0: return n;
    case 1: return k;
    case 2: return MIN(n, k + extra);
    case 3: return (int)(k * (0.97 + 0.03 * rndu()));
    case 4: return (int)(n * (0.97 + 0.03 * rndu()));
    case 5: return 0;
    default: return (int)rndn((uint32_t)n + 1);
    }
}

static int key_of(const pol_hist *h)
{
    return h->marker_pos > 0 ? h->marker_pos : h->n_tokens;
}

/* Builds a random table into T; long: histories are views of the streams. */
static void random_table(bool long_table)
{
    arena_reset();
    int n_slots = 1 + (int)rndn(8);
    tb_init(n_slots);
    T.p = random_params();
    T.s.now_s = 1e5;
    int n_hists = (int)rndn((uint32_t)n_slots + 6);
    int scale = long_table ? 0 : (int[]){ 8, 64, 400 }[rndn(3)];
    int alphabet = (int[]){ 2, 4, 1000 }[rndn(3)];
    int marker_1_in = (int[]){ 0, 20, 5 }[rndn(3)];
    bool fresh = rndn(5) == 0;   /* everything protected: least loss */
    for (int i = 0; i < n_hists; i++) {
        const int32_t *tok;
        int n;
        if (long_table) {
            int k = (int)rndn(NSTREAM);
            n = rndn(3) == 0 ? stream_fork[(int)rndn(NSTREAM)] + (int)rndn(4000) - 2000
                             : (int)rndn(262144);
            n = MAX(n, 0);
            tok = stream[k];
        } else {
            int tail = (int)rndn((uint32_t)scale + 1);
            int cut = 0;
            const pol_hist *par = i > 0 && rndn(4) ? &T.hists[rndn((uint32_t)i)] : NULL;
            if (par)
                cut = random_cut(par->n_tokens, key_of(par));
            int32_t *t = arena_take((size_t)(cut + tail));
            if (cut)
                memcpy(t, par->tokens, (size_t)cut * sizeof *t);
            random_tail(t + cut, tail, alphabet, marker_1_in);
            tok = t;
            n = cut + tail;
        }
        double ttl = o_ttl(n, T.p.ttl_max_s);
        double age = fresh ? 0.99 * ttl * rndu() : rndn(2) ? 3 * ttl * rndu() : 2500 * rndu();
        int h = tb_hist(tok, n, age);
        T.hists[h].valid = rndn(12) != 0;
        T.hists[h].n_cells_excl = (int32_t)rndn((uint32_t)n + 1);
    }
    /* Slots get distinct histories or stay empty; the rest is parked. */
    int order[POL_MAX_HIST];
    for (int i = 0; i < n_hists; i++)
        order[i] = i;
    for (int i = n_hists - 1; i > 0; i--) {
        int j = (int)rndn((uint32_t)i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int used = 0;
    double p_busy = rndn(30) == 0 ? 1 : (double[]){ 0, 0.2, 0.5, 0.9 }[rndn(4)];
    for (int k = 0; k < n_slots; k++) {
        int h = used < n_hists && rndn(5) ? order[used++] : -1;
        tb_put(k, h, rndu() < p_busy);
    }
    /* The prompt: mostly grown from a history, sometimes fresh. */
    int tail = long_table ? (int)rndn(3000) : (int)rndn((uint32_t)scale + 1);
    int cut = 0;
    const int32_t *from = NULL;
    if (n_hists > 0 && rndn(5)) {
        const pol_hist *par = &T.hists[rndn((uint32_t)n_hists)];
        cut = random_cut(par->n_tokens, key_of(par));
        from = par->tokens;
    }
    int32_t *pt = arena_take((size_t)(cut + tail));
    if (cut)
        memcpy(pt, from, (size_t)cut * sizeof *pt);
    random_tail(pt + cut, tail, alphabet, marker_1_in);
    tb_prompt(pt, cut + tail);
    T.s.prompt_tps = (double[]){ 0, 10, 1000 }[rndn(3)];
    T.s.n_cells_free = (int32_t)rndn(long_table ? 300000 : 2u * (uint32_t)scale + 2);
    T.s.n_cells_extra = (int32_t)rndn(long_table ? 4096 : (uint32_t)scale + 1);
    T.s.n_reserve_free = (int32_t)rndn(3);
}

/* Independent recomputation of what the decision must satisfy. */
typedef struct oracle {
    int32_t lcp[POL_MAX_HIST];
    bool blank[POL_MAX_HIST], busy[POL_MAX_HIST], prot[POL_MAX_HIST], parked[POL_MAX_HIST];
    double value[POL_MAX_HIST];
    int slot_of[POL_MAX_HIST];
} oracle;

static int32_t naive_lcp(const int32_t *a, int na, const int32_t *b, int nb)
{
    int i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

static int fails;   /* property failures, reported with the table's number */

static void dump_table(const pol_decision *d);

#define PROP(cond) do { if (!(cond)) { if (fails++ < 10) { \
    fprintf(stderr, "table %ld: %s:%d: %s\n", table_no, __FILE__, __LINE__, #cond); \
    if (fails == 1) dump_table(d); } } } while (0)

static bool o_same(const oracle *o, int h)
{
    return !o->blank[h] && o->lcp[h] > 0 && o->lcp[h] >= key_of(&T.hists[h]);
}

static bool o_sib(const oracle *o, int h)
{
    return T.p.sibling_share > 0 && !o->blank[h] && o->lcp[h] > 0 && !o_same(o, h)
        && o->lcp[h] >= T.p.sibling_share * key_of(&T.hists[h]);
}

static bool o_slot_blank(const oracle *o, int k)
{
    int h = T.slots[k].hist;
    return h < 0 || o->blank[h];
}

static bool o_may_drop(const oracle *o, int v, double value_h)
{
    if (o->blank[v]) return true;
    if (o->prot[v]) return false;
    if (o->value[v] < T.p.expired_keep_score) return true;
    return T.p.park_value_ratio > 0 && value_h >= T.p.park_value_ratio * o->value[v];
}

/* Largest share of h's key that another valid history or the request (its
 * common prefix with the prompt) already holds. */
static double o_kept_share(const oracle *o, int h)
{
    int key = key_of(&T.hists[h]);
    double kept = (double)MIN(o->lcp[h], key) / key;
    for (int g = 0; g < T.s.n_hists; g++) {
        if (g == h || o->blank[g])
            continue;
        int common = naive_lcp(T.hists[h].tokens, T.hists[h].n_tokens, T.hists[g].tokens, T.hists[g].n_tokens);
        kept = MAX(kept, (double)MIN(common, key) / key);
    }
    return kept;
}

/* The value an idle slot's history h loses when the request (reusing
 * source src, needing `need` new cells) runs there, from pol.h's parking
 * rules: nothing for a blank; its value when it is worth less than
 * park_min_value; nothing when another holds park_kept_share of its key;
 * nothing when there is room (a free reserve id and need free cells);
 * else, dropping lowest value first (blanks first at equal value, then
 * history order) the histories that may go (o_may_drop; never h, src or a
 * busy one) and free what is short, the sum of their values; its value
 * when even all of them leave it short. */
static double o_park_loss(const oracle *o, int h, int src, int64_t need)
{
    const pol_snapshot *s = &T.s;
    if (o->blank[h])
        return 0;
    double v = o->value[h];
    if (v < T.p.park_min_value)
        return v;
    if (T.p.park_kept_share > 0 && o_kept_share(o, h) >= T.p.park_kept_share)
        return 0;
    int64_t cells_short = need - s->n_cells_free;
    int ids_short = 1 - s->n_reserve_free;
    if (cells_short <= 0 && ids_short <= 0)
        return 0;
    bool taken[POL_MAX_HIST] = { false };
    double lost = 0;
    while (cells_short > 0 || ids_short > 0) {
        int pick = -1;
        for (int u = 0; u < s->n_hists; u++) {
            if (taken[u] || u == h || u == src || o->busy[u] || !o_may_drop(o, u, v))
                continue;
            bool helps = (cells_short > 0 && T.hists[u].n_cells_excl > 0) || (ids_short > 0 && o->parked[u]);
            if (!helps)
                continue;
            if (pick < 0 || o->value[u] < o->value[pick] ||
                (o->value[u] == o->value[pick] && o->blank[u] && !o->blank[pick]))
                pick = u;
        }
        if (pick < 0)
            return v;
        taken[pick] = true;
        lost += o->value[pick];
        cells_short -= T.hists[pick].n_cells_excl;
        ids_short -= o->parked[pick];
    }
    return lost;
}

/* Rule 4: in each idle slot the request would reuse that slot's own history
 * when it is among the longest allowed sources, else the first of them;
 * the chosen slot's loss (o_park_loss) is within loss_tie of the least and
 * no earlier slot's is. */
static void check_least_loss(long table_no, const pol_decision *d, const oracle *o)
{
    const pol_snapshot *s = &T.s;
    double loss[POL_MAX_SLOTS], least = INFINITY;
    int64_t need = (int64_t)MAX(s->n_prompt - d->n_reuse, 0) + s->n_cells_extra;
    int first = -1;
    for (int i = 0; i < s->n_hists && d->n_reuse > 0 && first < 0; i++)
        if (o->lcp[i] == d->n_reuse && !(!o->busy[d->source] && o->busy[i]))
            first = i;
    for (int j = 0; j < s->n_slots; j++) {
        loss[j] = INFINITY;
        if (T.slots[j].busy)
            continue;
        int h = T.slots[j].hist;
        int src = d->n_reuse > 0 && o->lcp[h] == d->n_reuse ? h : first;
        loss[j] = o_park_loss(o, h, src, need);
        least = MIN(least, loss[j]);
    }
    double limit = least * (1 + T.p.loss_tie);
    PROP(loss[d->slot] <= limit);
    PROP(o_near(loss[d->slot], d->loss));
    for (int j = 0; j < d->slot; j++)
        PROP(!(loss[j] <= limit));
}

/* The first failing table, for the log. */
static void dump_table(const pol_decision *d)
{
    const pol_snapshot *s = &T.s;
    fprintf(stderr, "  prompt %d tokens, tps %g, cells free %d extra %d, reserve %d\n",
            s->n_prompt, s->prompt_tps, s->n_cells_free, s->n_cells_extra, s->n_reserve_free);
    fprintf(stderr, "  params ttl %g zero %g sib %g keep %g pmin %g pkept %g ratio %g near %g/%g/%d tie %g\n",
            T.p.ttl_max_s, T.p.idle_value_zero_s, T.p.sibling_share, T.p.expired_keep_score,
            T.p.park_min_value, T.p.park_kept_share, T.p.park_value_ratio, T.p.near_share,
            T.p.near_s, T.p.near_tokens, T.p.loss_tie);
    for (int k = 0; k < s->n_slots; k++)
        fprintf(stderr, "  slot %d %s hist %d\n", k, T.slots[k].busy ? "busy" : "idle", T.slots[k].hist);
    for (int i = 0; i < s->n_hists; i++) {
        const pol_hist *h = &T.hists[i];
        pol_state st = pol_hist_state(&T.p, h, s->now_s);
        fprintf(stderr, "  hist %d: n %d key %d lcp %d valid %d excl %d age %g ttl %g prot %d value %.6g\n",
                i, h->n_tokens, key_of(h), pol_common_prefix(h->tokens, h->n_tokens, s->prompt, s->n_prompt),
                h->valid, h->n_cells_excl, st.age_s, st.ttl_s, st.is_protected, st.value);
    }
    if (d)
        fprintf(stderr, "  decision %s slot %d source %d reuse %d keep %d park %d drops %d loss %g: %s\n",
                pol_kind_name(d->kind), d->slot, d->source, d->n_reuse, d->n_keep, d->park, d->n_drop,
                d->loss, d->reason);
}

static void check_decision(long table_no, const pol_decision *d)
{
    const pol_snapshot *s = &T.s;
    oracle o;
    for (int i = 0; i < s->n_hists; i++) {
        const pol_hist *h = &T.hists[i];
        o.blank[i] = !h->valid || h->n_tokens == 0;
        o.lcp[i] = o.blank[i] ? 0 : naive_lcp(h->tokens, h->n_tokens, s->prompt, s->n_prompt);
        double age = MAX(s->now_s - h->last_use_s, 0.0), ttl = o.blank[i] ? 0 : o_ttl(h->n_tokens, T.p.ttl_max_s);
        o.prot[i] = !o.blank[i] && age < ttl;
        o.value[i] = o.blank[i] ? 0 : o_value(h->n_tokens, age, &T.p);
        o.slot_of[i] = -1;
        /* the curves themselves, as /slots shows them */
        pol_state st = pol_hist_state(&T.p, h, s->now_s);
        PROP(st.blank == o.blank[i] && st.is_protected == o.prot[i]);
        PROP(o_near(st.ttl_s, ttl) && o_near(st.value, o.value[i]) && o_near(st.age_s, age));
        PROP(o_near(st.overwrite_score, 1 / (1 + o.value[i])));
    }
    bool any_idle = false, blank_idle = false;
    for (int k = 0; k < s->n_slots; k++) {
        if (T.slots[k].hist >= 0)
            o.slot_of[T.slots[k].hist] = k;
        any_idle |= !T.slots[k].busy;
        blank_idle |= !T.slots[k].busy && o_slot_blank(&o, k);
    }
    for (int i = 0; i < s->n_hists; i++) {
        o.parked[i] = o.slot_of[i] < 0;
        o.busy[i] = !o.parked[i] && T.slots[o.slot_of[i]].busy;
    }

    PROP((d->kind == POL_WAIT) == !any_idle);
    if (d->kind == POL_WAIT) {
        PROP(d->slot == -1 && d->source == -1 && d->park == -1 && d->n_drop == 0);
        return;
    }
    PROP(d->slot >= 0 && d->slot < s->n_slots);
    if (d->slot < 0 || d->slot >= s->n_slots)
        return;
    const int k = d->slot, rh = T.slots[k].hist;
    PROP(!T.slots[k].busy);

    /* The continuation flag, and the slot a continuation may use. */
    bool cont = false;
    for (int i = 0; i < s->n_hists; i++)
        cont |= o_same(&o, i);
    PROP(d->continuation == cont);
    if (blank_idle)
        PROP(o_slot_blank(&o, k) || o_same(&o, rh) || o_sib(&o, rh));

    /* Which rule, and the order within it. */
    int best_same = -1, best_sib = -1;
    for (int j = 0; j < s->n_slots; j++) {
        int h = T.slots[j].hist;
        if (T.slots[j].busy || h < 0)
            continue;
        if (o_same(&o, h) && (best_same < 0 || o.lcp[h] > o.lcp[T.slots[best_same].hist]))
            best_same = j;
        if (o_sib(&o, h) && (best_sib < 0 || o.lcp[h] > o.lcp[T.slots[best_sib].hist]))
            best_sib = j;
    }
    if (best_same >= 0) {
        PROP(d->kind == POL_CONTINUE && k == best_same);
    } else if (best_sib >= 0) {
        PROP(d->kind == POL_SIBLING && k == best_sib);
    } else {
        bool any_unprot = false;
        for (int j = 0; j < s->n_slots; j++)
            any_unprot |= !T.slots[j].busy && (o_slot_blank(&o, j) || !o.prot[T.slots[j].hist]);
        if (any_unprot) {
            PROP(d->kind == POL_RECLAIM);
            PROP(o_slot_blank(&o, k) || !o.prot[rh]);
            /* (worth keeping, value, non-blank, index) is minimal at k. */
            double vk = o_slot_blank(&o, k) ? 0 : o.value[rh];
            int tk = !o_slot_blank(&o, k) && vk >= T.p.expired_keep_score;
            for (int j = 0; j < s->n_slots; j++) {
                if (j == k || T.slots[j].busy)
                    continue;
                bool bj = o_slot_blank(&o, j);
                if (!bj && o.prot[T.slots[j].hist])
                    continue;
                double vj = bj ? 0 : o.value[T.slots[j].hist];
                int tj = !bj && vj >= T.p.expired_keep_score;
                bool before = tj < tk || (tj == tk && (vj < vk || (vj == vk &&
                              ((bj && !o_slot_blank(&o, k)) ||
                               (bj == o_slot_blank(&o, k) && j < k)))));
                PROP(!before);
            }
        } else {
            PROP(d->kind == POL_LEAST_LOSS);
            PROP(!o_slot_blank(&o, k) && o.prot[rh]);
            check_least_loss(table_no, d, &o);
        }
    }

    /* Source: token-identical, near the best, outside busy slots if it can. */
    int32_t best = 0;
    for (int i = 0; i < s->n_hists; i++)
        best = MAX(best, o.lcp[i]);
    double tol = MAX(T.p.near_share * best, MAX(s->prompt_tps * T.p.near_s, (double)T.p.near_tokens));
    bool free_near = false;
    int32_t best_allowed = 0;
    for (int i = 0; i < s->n_hists; i++)
        free_near |= o.lcp[i] > 0 && o.lcp[i] >= best - tol && !o.busy[i];
    for (int i = 0; i < s->n_hists; i++)
        if (o.lcp[i] > 0 && o.lcp[i] >= best - tol && !(free_near && o.busy[i]))
            best_allowed = MAX(best_allowed, o.lcp[i]);
    if (best == 0) {
        PROP(d->source == -1 && d->n_reuse == 0);
    } else {
        PROP(d->source >= 0 && d->source < s->n_hists);
        if (d->source < 0 || d->source >= s->n_hists)
            return;
        const pol_hist *src = &T.hists[d->source];
        PROP(!o.blank[d->source]);
        PROP(d->n_reuse == o.lcp[d->source] && d->n_reuse <= src->n_tokens && d->n_reuse <= s->n_prompt);
        PROP(memcmp(src->tokens, s->prompt, (size_t)d->n_reuse * sizeof(int32_t)) == 0);
        PROP(d->n_reuse >= best - tol);
        PROP(!(free_near && o.busy[d->source]));
        PROP(d->source_busy == o.busy[d->source]);
        PROP(d->n_reuse == best_allowed);
        if (rh >= 0 && o.lcp[rh] == d->n_reuse && !(free_near && o.busy[rh]))
            PROP(d->source == rh);
    }
    PROP(d->n_keep == (o_slot_blank(&o, k) ? 0 : o.lcp[rh]));
    PROP(d->n_keep <= d->n_reuse);

    /* Parking and drops. */
    PROP(d->park == -1 || d->park == rh);
    if (d->kind == POL_CONTINUE || d->kind == POL_SIBLING || o_slot_blank(&o, k))
        PROP(d->park == -1 && d->n_drop == 0 && d->loss == 0);
    if ((d->kind == POL_RECLAIM || d->kind == POL_LEAST_LOSS) && !o_slot_blank(&o, k)) {
        double kept = o_kept_share(&o, rh);
        bool kept_elsewhere = T.p.park_kept_share > 0 && kept >= T.p.park_kept_share;
        bool wants = o.value[rh] >= T.p.park_min_value && !kept_elsewhere;
        int64_t need = (int64_t)MAX(s->n_prompt - d->n_reuse, 0) + s->n_cells_extra;
        if (d->park >= 0) {
            PROP(wants);
            int64_t cells = s->n_cells_free;
            int ids = s->n_reserve_free;
            double lost = 0;
            for (int i = 0; i < d->n_drop; i++) {
                int v = d->drop[i];
                PROP(v >= 0 && v < s->n_hists && v != rh && v != d->source && !o.busy[v]);
                if (v < 0 || v >= s->n_hists)
                    return;
                for (int j = 0; j < i; j++)
                    PROP(d->drop[j] != v);
                PROP(o_may_drop(&o, v, o.value[rh]));
                cells += T.hists[v].n_cells_excl;
                ids += o.parked[v];
                lost += o.value[v];
            }
            PROP(cells >= need && ids >= 1);
            PROP(fabs(d->loss - lost) <= 1e-9 * (1 + lost));
            PROP(o_near(d->loss, o_park_loss(&o, rh, d->source, need)));
        } else {
            PROP(d->n_drop == 0);
            PROP(o_near(d->loss, o.value[rh] >= T.p.park_min_value && kept_elsewhere ? 0 : o.value[rh]));
            if (wants) {
                /* Refused only when dropping everything allowed is not enough. */
                int64_t cells = s->n_cells_free;
                int ids = s->n_reserve_free;
                for (int v = 0; v < s->n_hists; v++)
                    if (v != rh && v != d->source && !o.busy[v] && o_may_drop(&o, v, o.value[rh])) {
                        cells += T.hists[v].n_cells_excl;
                        ids += o.parked[v];
                    }
                PROP(cells < need || ids < 1);
            }
        }
    }
}

/* The same table again, every array copied elsewhere: the decision must not
 * depend on addresses. */
static void check_copy_determinism(long table_no, const pol_decision *d)
{
    static pol_slot slots[POL_MAX_SLOTS];
    static pol_hist hists[POL_MAX_HIST];
    static int32_t *buf;
    static size_t cap;
    size_t total = (size_t)T.s.n_prompt;
    for (int i = 0; i < T.s.n_hists; i++)
        total += (size_t)T.hists[i].n_tokens;
    if (total > cap) {
        free(buf);
        cap = total * 2 + 1024;
        buf = malloc(cap * sizeof *buf);
        ASSERT(buf);
    }
    if (!d) {   /* release */
        free(buf);
        buf = NULL;
        cap = 0;
        return;
    }
    size_t at = 0;
    pol_params p = T.p;
    pol_snapshot s = T.s;
    memcpy(slots, T.slots, sizeof slots[0] * (size_t)s.n_slots);
    memcpy(hists, T.hists, sizeof hists[0] * (size_t)s.n_hists);
    for (int i = 0; i < s.n_hists; i++) {
        memcpy(buf + at, hists[i].tokens, (size_t)hists[i].n_tokens * sizeof *buf);
        hists[i].tokens = buf + at;
        at += (size_t)hists[i].n_tokens;
    }
    memcpy(buf + at, s.prompt, (size_t)s.n_prompt * sizeof *buf);
    s.prompt = buf + at;
    s.slots = slots;
    s.hists = hists;
    s.params = &p;
    static pol_decision again;
    PROP(pol_place(&s, &again) == PK_OK);
    PROP(memcmp(&again, d, sizeof again) == 0);
}

static void check_drop_order(long table_no)
{
    const pol_decision *d = NULL;
    int32_t order[POL_MAX_HIST], n = 0;
    PROP(pol_drop_order(&T.s, NULL, 0, order, POL_MAX_HIST, &n) == PK_OK);
    int expect = 0;
    for (int i = 0; i < T.s.n_hists; i++) {
        int k = -1;
        for (int j = 0; j < T.s.n_slots; j++)
            if (T.slots[j].hist == i)
                k = j;
        expect += !(k >= 0 && T.slots[k].busy);
    }
    PROP(n == expect);
    for (int i = 1; i < n; i++) {
        const pol_hist *ha = &T.hists[order[i - 1]], *hb = &T.hists[order[i]];
        bool ba = !ha->valid || ha->n_tokens <= 0, bb = !hb->valid || hb->n_tokens <= 0;
        double age_a = MAX(T.s.now_s - ha->last_use_s, 0.0), age_b = MAX(T.s.now_s - hb->last_use_s, 0.0);
        bool pa = !ba && age_a < o_ttl(ha->n_tokens, T.p.ttl_max_s);
        bool pb = !bb && age_b < o_ttl(hb->n_tokens, T.p.ttl_max_s);
        double va = ba ? 0 : o_value(ha->n_tokens, age_a, &T.p), vb = bb ? 0 : o_value(hb->n_tokens, age_b, &T.p);
        bool ok = pa < pb || (pa == pb && (va < vb || (va == vb &&
                  (ba > bb || (ba == bb && order[i - 1] < order[i])))));
        PROP(ok);
    }
}

static void test_property(void)
{
    long n_tables = 200000;
    const char *env = getenv("POL_TEST_TABLES");
    if (env)
        n_tables = atol(env);
    rng_state = 0x5eed;
    make_streams();
    long kinds[5] = { 0 };
    long parks = 0, drops = 0, busy_src = 0, longs = 0;
    double t0 = pk_time_ms();
    const pol_decision *d = NULL;
    for (long table_no = 0; table_no < n_tables; table_no++) {
        bool long_table = rndn(50) == 0;
        longs += long_table;
        random_table(long_table);
        pk_status st = pol_place(&T.s, &D);
        PROP(st == PK_OK);
        if (st != PK_OK)
            continue;
        kinds[D.kind]++;
        parks += D.park >= 0;
        drops += D.n_drop > 0;
        busy_src += D.source_busy;
        check_decision(table_no, &D);
        pol_decision again;
        PROP(pol_place(&T.s, &again) == PK_OK && memcmp(&again, &D, sizeof D) == 0);
        if (table_no % 16 == 0) {
            check_copy_determinism(table_no, &D);
            check_drop_order(table_no);
        }
    }
    check_copy_determinism(0, NULL);
    double ms = pk_time_ms() - t0;
    printf("  %ld random tables (%ld long) in %.1f s: wait %ld, continue %ld, sibling %ld, "
           "reclaim %ld, least-loss %ld; %ld parks, %ld with drops, %ld busy sources\n",
           n_tables, longs, ms / 1000, kinds[POL_WAIT], kinds[POL_CONTINUE], kinds[POL_SIBLING],
           kinds[POL_RECLAIM], kinds[POL_LEAST_LOSS], parks, drops, busy_src);
    CHECK_EQ_INT(fails, 0);
    if (n_tables >= 200000) {
        for (int k = 0; k < 5; k++)
            CHECK(kinds[k] > n_tables / 200);
        CHECK(parks > 1000 && drops > 100 && busy_src > 1000);
    }
    for (int k = 0; k < NSTREAM; k++)
        free(stream[k]);
}

/* ---- timing --------------------------------------------------------------- */

static void bench_case(const char *what, int reps)
{
    pol_decision d;
    double t0 = pk_time_ms();
    for (int r = 0; r < reps; r++)
        CHECK_EQ_INT(pol_place(&T.s, &d), PK_OK);
    double ms = (pk_time_ms() - t0) / reps;
    printf("  %-58s %8.3f ms  (%s slot %d)\n", what, ms, pol_kind_name(d.kind), d.slot);
}

static void test_timing(void)
{
    enum { NH = 100, LEN = 100000, SHARED = 10000 };
    size_t cap = (size_t)NH * LEN + 2 * LEN;
    int32_t *own = arena;
    size_t own_cap = arena_cap;
    arena = malloc(cap * sizeof *arena);
    ASSERT(arena);
    arena_cap = cap;
    arena_reset();
    static const int m0[] = { 0, -1 };
    int32_t *shared = conv(SHARED, NULL, 0, 80, m0);
    tb_init(8);
    for (int i = 0; i < NH; i++) {
        const int m[] = { SHARED, LEN - 1500, -1 };
        int32_t *t = conv(LEN, shared, SHARED, 81 + (uint64_t)i, m);
        int h = tb_hist(t, LEN, 20 + i * 20);
        if (i < 8)
            tb_put(i, h, i < 2);
    }
    int32_t *p = arena_take(LEN + 500);
    memcpy(p, T.hists[37].tokens, LEN * sizeof *p);
    fill_content(p + LEN, 500, 90);
    tb_prompt(p, LEN + 500);
    printf("  timing, %d histories of %d tokens, 8 slots:\n", NH, LEN);
    bench_case("continuation of a parked history (10K shared by all)", 200);
    tb_prompt(p, SHARED + 500);
    memcpy(p + SHARED, T.hists[99].tokens + SHARED, 500 * sizeof *p);
    p[SHARED] = -5;
    bench_case("new conversation, reclaim + park check", 200);
    for (int i = 0; i < NH; i++)
        T.hists[i].last_use_s = T.s.now_s - 1;
    bench_case("all protected: least loss over 6 park plans", 200);

    /* Worst case: every history repeats the prompt for 100K tokens. */
    for (int i = 0; i < NH; i++) {
        T.hists[i].tokens = T.hists[0].tokens;
        T.hists[i].marker_pos = LEN - 1500;
    }
    memcpy(p, T.hists[0].tokens, LEN * sizeof *p);
    tb_prompt(p, LEN + 500);
    T.p.sibling_share = 0;
    for (int k = 0; k < 8; k++)
        T.slots[k].busy = k != 7;
    T.slots[7].hist = -1;
    bench_case("worst: 100 x 100K identical to the prompt", 20);

    free(arena);
    arena = own;
    arena_cap = own_cap;
}


int main(int argc, char **argv)
{
    test_select(argc, argv);
    arena_init((size_t)4 << 20);
    TEST_RUN(test_property);
    TEST_RUN(test_timing);
    free(arena);
    return test_finish();
}
